//! `cheq keys rotate | list | retire | remove --config FILE`: a server's own
//! signing keys over time (PROTOCOL.md §9, [`crate::keyring`]).
//!
//! The configuration is a confirmation server's or a resource server's (one
//! with a `[confirmation_server]` table); its `signing_key` names the key
//! set. Every command works before the first start and while the servers
//! run: they read the key set again as soon as it changes, every instance
//! that shares the key folder included. Nothing printed holds private
//! material.

use super::{write_out, CliError};
use crate::configfile::ServerConfig as _;
use crate::keyring::{KeyInfo, KeyRing, DEFAULT_ACTIVATE_AFTER_SECS};
use chrono::SecondsFormat;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Manage a server's signing keys: rotate, list, retire, remove.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: KeysCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// Add a new key: published at once, signing after --activate-after
    /// seconds; the key signing until then becomes retiring.
    Rotate(RotateArgs),
    /// List the keys with their state and dates (no private material).
    List(ListArgs),
    /// Stop a key signing now; if it is the active key, a new key takes
    /// over at once. It stays published (retiring) so that what it signed
    /// still verifies; a compromised key is then removed with --force.
    Retire(KidArgs),
    /// Remove a key and delete its file; refused while peers may still need
    /// it, unless --force.
    Remove(RemoveArgs),
}

#[derive(Debug, clap::Args)]
pub struct ConfigArg {
    /// The server's configuration file (CS or RS).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct RotateArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Seconds until the new key signs (peers that cache the key set must
    /// have seen it by then).
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_ACTIVATE_AFTER_SECS)]
    pub activate_after: i64,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct KidArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// The key id.
    pub kid: String,
}

#[derive(Debug, clap::Args)]
pub struct RemoveArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// The key id.
    pub kid: String,
    /// Remove a key that is new or retiring (peers may still need it).
    #[arg(long)]
    pub force: bool,
}

/// The key set a configuration file names: its configured key file, kid
/// and kid prefix.
fn key_config(config: &Path) -> Result<(PathBuf, Option<String>, &'static str), CliError> {
    let bytes = super::read_input(config)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| CliError::Server(format!("{}: not UTF-8", config.display())))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| CliError::Server(format!("{}: {e}", config.display())))?;
    let (key, kid, prefix) =
        if table.contains_key("confirmation_server") || table.contains_key("confirmation") {
            let c = crate::resource::RsConfig::load(config)
                .map_err(|e| CliError::Server(e.to_string()))?;
            (c.signing_key, c.key_id, "rs")
        } else {
            let c = crate::confirm::CsConfig::load(config)
                .map_err(|e| CliError::Server(e.to_string()))?;
            (c.signing_key, c.key_id, "cs")
        };
    Ok((key, kid, prefix))
}

/// The key set a configuration file names, made from its configured key
/// (generated when missing) the first time.
fn open(config: &Path) -> Result<Arc<KeyRing>, CliError> {
    let (key, kid, prefix) = key_config(config)?;
    KeyRing::open(
        &key,
        kid.as_deref(),
        prefix,
        Arc::new(crate::time::SystemClock),
    )
    .map_err(|e| CliError::Server(e.to_string()))
}

fn time(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn opt_time(t: &Option<chrono::DateTime<chrono::Utc>>) -> String {
    t.as_ref().map_or_else(|| "-".to_owned(), time)
}

fn to_json(k: &KeyInfo) -> serde_json::Value {
    json!({
        "kid": k.kid,
        "state": k.state.as_str(),
        "created": time(&k.created),
        "activates": time(&k.activates),
        "stopped": k.stopped.as_ref().map(time),
        "published_until": k.published_until.as_ref().map(time),
        "file": k.file.display().to_string(),
    })
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let fail = |e: crate::keyring::KeyRingError| CliError::Server(e.to_string());
    match args.command {
        KeysCommand::Rotate(a) => {
            let ring = open(&a.config.config)?;
            let before = ring.list();
            let new = ring.rotate(a.activate_after).map_err(fail)?;
            let mut text = format!(
                "added key {} (mode 0600, {}): published now, signs from {}\n",
                new.kid,
                new.file.display(),
                time(&new.activates)
            );
            if let Some(old) = before
                .iter()
                .find(|k| k.state == crate::sign::KeyState::Active)
            {
                text.push_str(&format!(
                    "key {} signs until then, then is retiring (published {} more)\n",
                    old.kid,
                    humantime(crate::keyring::RETIRING_SECS)
                ));
            }
            write_out(out, &text)
        }
        KeysCommand::List(a) => {
            // Listing makes no key: before the first start (or `rotate`)
            // there is none to list. (A key from before key sets gets its
            // manifest written, as at a server's start.)
            let (key, _, _) = key_config(&a.config.config)?;
            if !KeyRing::exists(&key).map_err(|e| CliError::Server(e.to_string()))? {
                if a.json {
                    let text = serde_json::to_string_pretty(&json!({
                        "key_set": KeyRing::manifest_for(&key).display().to_string(),
                        "keys": [],
                    }))
                    .map_err(|e| CliError::Internal(e.to_string()))?;
                    return write_out(out, &format!("{text}\n"));
                }
                return write_out(
                    out,
                    &format!(
                        "no keys yet: {} does not exist; the server makes its first key when it starts (or run `cheq keys rotate`)\n",
                        key.display()
                    ),
                );
            }
            let ring = open(&a.config.config)?;
            let keys = ring.list();
            if a.json {
                let text = serde_json::to_string_pretty(&json!({
                    "key_set": ring.manifest_path().display().to_string(),
                    "keys": keys.iter().map(to_json).collect::<Vec<_>>(),
                }))
                .map_err(|e| CliError::Internal(e.to_string()))?;
                return write_out(out, &format!("{text}\n"));
            }
            let mut text = format!(
                "{:<20} {:<9} {:<21} {:<21} {:<21}\n",
                "KID", "STATE", "SIGNS FROM", "STOPPED", "PUBLISHED UNTIL"
            );
            for k in &keys {
                text.push_str(&format!(
                    "{:<20} {:<9} {:<21} {:<21} {:<21}\n",
                    k.kid,
                    k.state.as_str(),
                    time(&k.activates),
                    opt_time(&k.stopped),
                    if k.state.is_published() {
                        opt_time(&k.published_until)
                    } else {
                        "not published".to_owned()
                    }
                ));
            }
            write_out(out, &text)
        }
        KeysCommand::Retire(a) => {
            let ring = open(&a.config.config)?;
            let successor = ring.retire(&a.kid).map_err(fail)?;
            let mut text = format!(
                "key {} signs nothing more; it stays published for {} (remove it sooner with `cheq keys remove --force`)\n",
                a.kid,
                humantime(crate::keyring::RETIRING_SECS)
            );
            if let Some(next) = successor {
                text.push_str(&format!("key {} signs from now\n", next.kid));
            }
            write_out(out, &text)
        }
        KeysCommand::Remove(a) => {
            let ring = open(&a.config.config)?;
            let removed = ring.remove(&a.kid, a.force).map_err(fail)?;
            write_out(
                out,
                &format!(
                    "removed key {} ({}) and deleted {}\n",
                    removed.kid,
                    removed.state,
                    removed.file.display()
                ),
            )
        }
    }
}

fn humantime(secs: i64) -> String {
    let (h, m) = (secs / 3600, (secs % 3600) / 60);
    match (h, m) {
        (0, m) => format!("{m} min"),
        (h, 0) => format!("{h} h"),
        (h, m) => format!("{h} h {m} min"),
    }
}
