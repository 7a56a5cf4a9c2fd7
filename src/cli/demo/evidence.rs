//! What `cheq demo` does after each decision the demo's people make: writes
//! the decision's evidence into the data directory, keeps a TRUST file of
//! both servers' key sets beside it, and prints the two commands that check
//! it: `cheq verify` offline (PROTOCOL.md §5) and `cheq audit` against the
//! public log (§15), once the decision is in a checkpoint.

use crate::confirm::flow::Cs;
use crate::store::cs::{Accounts, DecisionRecord, Identity};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often the demo looks for new decisions.
const EVERY: Duration = Duration::from_secs(1);
/// How many more looks a decision whose evidence could not be written gets.
const TRIES: u32 = 3;

/// The demo's view of its servers, for the commands it prints.
pub struct Watch {
    pub cs: Arc<Cs>,
    pub accounts: Arc<dyn Accounts>,
    /// The RS's published key set, asked at each write (keys may rotate).
    pub rs_jwks: Box<dyn Fn() -> Value + Send + Sync>,
    pub rs_origin: String,
    pub cs_origin: String,
    /// The log's prefix URL (`…/log/`), when the log is on.
    pub log_url: Option<String>,
    /// The data directory (the evidence goes into `evidence/` there).
    pub dir: PathBuf,
    /// How to call this binary from the user's shell.
    pub command: String,
}

/// How the user's shell reaches this binary: `cheq` when the `PATH` finds
/// this very file, else its path (relative to the working directory when
/// it is under it, as `target/debug/cheq`).
pub fn command_name() -> String {
    let Ok(exe) = std::env::current_exe().and_then(|e| e.canonicalize()) else {
        return "cheq".into();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| d.join("cheq").canonicalize().is_ok_and(|c| c == exe))
    });
    if on_path {
        return "cheq".into();
    }
    let cwd = std::env::current_dir().and_then(|d| d.canonicalize());
    match cwd.as_ref().map(|cwd| exe.strip_prefix(cwd)) {
        Ok(Ok(rel)) => rel.display().to_string(),
        _ => exe.display().to_string(),
    }
}

/// This binary's absolute path, for a configuration another program reads
/// (a desktop MCP client starts it from elsewhere).
pub fn absolute_command() -> String {
    std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .map(|e| e.display().to_string())
        .unwrap_or_else(|_| "cheq".into())
}

impl Watch {
    /// The TRUST file `cheq verify` reads: both servers' key sets, inline,
    /// so that the evidence checks with the demo stopped.
    fn trust(&self) -> Value {
        json!({
            "resource_servers": [{"origin": self.rs_origin, "keys": (self.rs_jwks)()}],
            "confirmation_servers": [{"origin": self.cs_origin, "keys": self.cs.jwks()}],
        })
    }

    pub fn trust_path(&self) -> PathBuf {
        self.dir.join("trust.json")
    }

    /// Writes the TRUST file (public keys only).
    pub fn write_trust(&self) -> std::io::Result<()> {
        write_file(
            &self.trust_path(),
            format!("{:#}\n", self.trust()).as_bytes(),
        )
    }

    /// The decisions on record now, of every account.
    fn records(&self) -> Vec<DecisionRecord> {
        let mut out = Vec::new();
        let Ok(accounts) = self.accounts.list_after(None, 100) else {
            return out;
        };
        for account in accounts {
            let who = identity(&account.username);
            if let Ok(records) = self.cs.history(&who) {
                out.extend(records);
            }
        }
        out
    }

    /// Watches for decisions until the demo ends; those on record when it
    /// starts are left alone.
    pub async fn run(self) {
        let this = Arc::new(self);
        let start = Arc::clone(&this);
        let mut seen: HashSet<String> = tokio::task::spawn_blocking(move || start.records())
            .await
            .unwrap_or_default()
            .iter()
            .map(|r| r.key().id())
            .collect();
        let mut failed: HashMap<String, u32> = HashMap::new();
        let mut waiting: Vec<(DecisionRecord, PathBuf)> = Vec::new();
        loop {
            tokio::time::sleep(EVERY).await;
            let step = Arc::clone(&this);
            let Ok(new) = tokio::task::spawn_blocking(move || step.records()).await else {
                continue;
            };
            for record in new {
                let id = record.key().id();
                if seen.contains(&id) {
                    continue;
                }
                let written = {
                    let this = Arc::clone(&this);
                    let record = record.clone();
                    tokio::task::spawn_blocking(move || this.write_evidence(&record)).await
                };
                // A decision whose evidence could not be written is tried
                // again at the next look, a few times, then said once.
                let tries = failed.entry(id.clone()).or_insert(0);
                match written {
                    Ok(Ok(path)) => {
                        seen.insert(id);
                        waiting.push((record, path));
                    }
                    Ok(Err(e)) if *tries >= TRIES => {
                        log::warn!("demo: the evidence could not be written: {e}");
                        seen.insert(id);
                    }
                    _ => *tries += 1,
                }
            }
            // A decision is told once it is in a checkpoint, so that the
            // audit command finds it when the person runs it.
            let mut still = Vec::new();
            for (record, path) in waiting.drain(..) {
                if this.logged(&record) {
                    this.tell(&record, &path);
                } else {
                    still.push((record, path));
                }
            }
            waiting = still;
        }
    }

    /// Whether the decision is in the log's latest checkpoint (or there is
    /// no log to wait for).
    fn logged(&self, record: &DecisionRecord) -> bool {
        match (self.cs.transparency(), &record.log_digest) {
            (Some(log), Some(d)) => {
                let size = log.checkpoint().ok().flatten().map_or(0, |h| h.size);
                matches!(log.index_of_decision(d), Ok(Some(i)) if i < size)
            }
            _ => true,
        }
    }

    fn write_evidence(&self, record: &DecisionRecord) -> Result<PathBuf, String> {
        let evidence = self
            .cs
            .evidence(&record.key().id(), &identity(&record.user))
            .map_err(|e| e.to_string())?;
        let dir = self.dir.join("evidence");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let path = unused_name(&dir, &evidence.filename);
        write_file(&path, evidence.body.as_bytes()).map_err(|e| e.to_string())?;
        self.write_trust().map_err(|e| e.to_string())?;
        Ok(path)
    }

    fn tell(&self, record: &DecisionRecord, path: &Path) {
        let decided = chrono::DateTime::from_timestamp(record.decided_at, 0)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default();
        let verb = match record.decision.as_str() {
            "accept" => "accepted",
            _ => "rejected",
        };
        let mut text = format!(
            "\n{user} {verb} \"{op}\"; its evidence: {file}\
             \n  check it offline:   {cmd} verify --trust {trust} --now {decided} {file}",
            user = record.user,
            op = record.operation_name,
            file = path.display(),
            cmd = self.command,
            trust = self.trust_path().display(),
        );
        if let (Some(url), Some(log)) = (&self.log_url, self.cs.transparency()) {
            text.push_str(&format!(
                "\n  find it in the log: {cmd} audit --log {url} --key '{key}' \\\
                 \n                        --trust {trust} --state {state} --document {file}",
                cmd = self.command,
                key = log.verifier_key(),
                state = self.dir.join("audit.checkpoint").display(),
                trust = self.trust_path().display(),
                file = path.display(),
            ));
        }
        text.push('\n');
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
}

/// The account `sub` as the flow's per-user reads take it.
fn identity(sub: &str) -> Identity {
    Identity {
        sub: sub.to_owned(),
        also_known_as: Vec::new(),
        auth_time: None,
        amr: Vec::new(),
        provider: None,
        id_token: None,
        credential: None,
    }
}

/// `dir/name`, or with `-2`, `-3`… before its extension where a file of
/// that name is there already (an earlier decision of the same day).
fn unused_name(dir: &Path, name: &str) -> PathBuf {
    let first = dir.join(name);
    if !first.exists() {
        return first;
    }
    let (stem, ext) = name.rsplit_once('.').unwrap_or((name, ""));
    (2..)
        .map(|n| dir.join(format!("{stem}-{n}.{ext}")))
        .find(|p| !p.exists())
        .unwrap_or(first)
}

/// Writes `bytes` to `path`, replacing it: written beside it, then renamed.
fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
