//! `cheq audit`: checks a confirmation server's transparency log from the
//! outside (PROTOCOL.md §15.6), with nothing but its public tiles and the
//! verifier key the auditor got out of band.
//!
//! The checks are the core's ([`crate::tlog::audit`]): the checkpoint's
//! signature, its consistency with the checkpoint kept in `--state` (a log
//! rewritten, truncated or forked since is caught), and the inclusion of
//! each `--document`: a signed CHEQ by the digest of its exact bytes,
//! redacted evidence (§8.1) by the log digest the confirmation service kept
//! of the document as delivered, which the evidence carries.
//!
//! Finding that entry proves only that the log holds an entry with that
//! digest: that the evidence is the confirmation service's, and so that
//! the digest is the delivered document's, is its signature's to prove,
//! which needs the trust `cheq verify` is given. With `--trust` the audit
//! verifies each redacted evidence first, as `cheq verify` does, and a
//! forged file fails; without it the summary says what was not checked.
//! On success the new checkpoint is kept and a JSON summary printed; on
//! any failure, one line naming it and exit 1, and the kept checkpoint
//! stays as it was.

use super::{display_path, read_input, read_trust, write_out, CliError};
use crate::sign::TrustStore;
use crate::tlog::audit::{audit, AuditError, TileSource, Wanted};
use crate::tlog::LogVerifier;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Audit a confirmation server's public transparency log (PROTOCOL.md §15).
///
/// Exit 0 and a JSON summary when the log's checkpoint is signed by KEY,
/// extends the one kept in FILE, and holds every DOCUMENT; exit 1 naming
/// what failed otherwise. For redacted evidence the log proves only that
/// an entry with the digest it names is there: give --trust to check first
/// that the confirmation service signed it (as `cheq verify` does).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The log's URL prefix, `<public_url>/log/`.
    #[arg(long, value_name = "URL")]
    pub log: String,
    /// The log's verifier key (`<name>+<hex>+<base64>`, as `GET <log>/key`
    /// answers it), or a file holding it. Get it out of band: a log cannot
    /// vouch for its own key.
    #[arg(long, value_name = "VKEY")]
    pub key: String,
    /// The checkpoint kept from the last audit: read if present, replaced by
    /// the new one when this audit passes.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// A decided document that must be in the log: a signed CHEQ (its
    /// exact bytes), or redacted evidence (PROTOCOL.md §8.1: the entry
    /// named by the log digest it carries).
    #[arg(long = "document", value_name = "FILE")]
    pub documents: Vec<PathBuf>,
    /// The TRUST file (as for `cheq verify`): each redacted evidence is
    /// verified under it before its entry is looked for, so that a file
    /// the confirmation service did not sign is refused.
    #[arg(long, value_name = "TRUST.json")]
    pub trust: Option<PathBuf>,
}

/// The most bytes read from the log per resource: a full tile is 8 KiB, a
/// bundle of 256 entries under 64 KiB, a checkpoint a few hundred bytes.
const MAX_RESOURCE: usize = 1024 * 1024;
/// How long one resource may take.
const TIMEOUT: Duration = Duration::from_secs(15);

struct Http {
    prefix: url::Url,
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
}

impl TileSource for Http {
    fn fetch(&self, path: &str) -> Result<Vec<u8>, String> {
        let url = self.prefix.join(path).map_err(|e| e.to_string())?;
        self.runtime.block_on(async {
            let mut res = self
                .client
                .get(url)
                .header(reqwest::header::ACCEPT_ENCODING, "gzip, identity")
                .send()
                .await
                .map_err(|e| crate::text::one_line(&e.without_url().to_string()))?;
            if !res.status().is_success() {
                return Err(format!("the log answered {}", res.status()));
            }
            let mut body = Vec::new();
            while let Some(chunk) = res.chunk().await.map_err(|e| e.without_url().to_string())? {
                if body.len() + chunk.len() > MAX_RESOURCE {
                    return Err(format!("the answer is larger than {MAX_RESOURCE} bytes"));
                }
                body.extend_from_slice(&chunk);
            }
            let encoding = res
                .headers()
                .get(reqwest::header::CONTENT_ENCODING)
                .map(|v| v.to_str().unwrap_or("?").to_ascii_lowercase());
            match encoding.as_deref() {
                None | Some("identity") => Ok(body),
                Some("gzip") => gunzip(&body),
                Some(other) => Err(format!(
                    "the log answered in an encoding not asked for: {other:?}"
                )),
            }
        })
    }
}

/// A gzip body's bytes, at most [`MAX_RESOURCE`] of them (a small body may
/// inflate to far more).
fn gunzip(body: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .take(MAX_RESOURCE as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("the log's gzip body does not inflate: {e}"))?;
    if out.len() > MAX_RESOURCE {
        return Err(format!(
            "the answer inflates to more than {MAX_RESOURCE} bytes"
        ));
    }
    Ok(out)
}

fn source(log: &str) -> Result<Http, CliError> {
    let mut prefix = url::Url::parse(log)
        .map_err(|e| CliError::Usage(format!("--log {log:?} is not a URL: {e}")))?;
    if !matches!(prefix.scheme(), "http" | "https") || prefix.query().is_some() {
        return Err(CliError::Usage(
            "--log must be an http(s) URL prefix with no query, such as https://cs.example/log/"
                .into(),
        ));
    }
    if !prefix.path().ends_with('/') {
        let path = format!("{}/", prefix.path());
        prefix.set_path(&path);
    }
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| CliError::Internal(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Internal(e.to_string()))?;
    Ok(Http {
        prefix,
        client,
        runtime,
    })
}

fn verifier(key: &str) -> Result<LogVerifier, CliError> {
    let path = std::path::Path::new(key);
    let text = if !key.contains('+') && path.exists() {
        let bytes = read_input(path)?;
        String::from_utf8(bytes).map_err(|_| CliError::Usage(format!("{key}: not text")))?
    } else {
        key.to_owned()
    };
    LogVerifier::new(text.trim()).map_err(|e| CliError::Usage(format!("--key: {e}")))
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let verifier = verifier(&args.key)?;
    let kept = match &args.state {
        Some(p) if p.exists() => Some(read_input(p)?),
        _ => None,
    };
    let trust = args.trust.as_deref().map(read_trust).transpose()?;
    let mut wanted = Vec::new();
    let mut redacted = Vec::new();
    for d in &args.documents {
        let (w, r) = wanted_document(d, trust.as_ref())?;
        wanted.push(w);
        redacted.push(r);
    }
    let http = source(&args.log)?;
    let report = audit(&http, &verifier, kept.as_deref(), &wanted).map_err(|e| match e {
        e @ AuditError::Fetch { .. } => CliError::Server(format!("log audit failed: {e}")),
        e => CliError::Audit(e.to_string()),
    })?;
    if let Some(p) = &args.state {
        keep(p, &report.checkpoint.note)?;
    }
    let documents: Vec<_> = report
        .included
        .iter()
        .zip(&redacted)
        .map(|((file, index), redacted)| match redacted {
            Some(r) => json!({
                "file": file,
                "index": index,
                "redacted_evidence": true,
                "entry": r.entry,
                "checked": if r.signature_checked { REDACTED_VERIFIED } else { REDACTED_ENTRY },
            }),
            None => json!({"file": file, "index": index}),
        })
        .collect();
    let summary = json!({
        "ok": true,
        "origin": verifier.origin(),
        "tree_size": report.checkpoint.size,
        "root_hash": report.checkpoint.root.to_string(),
        "consistent_with_kept": report.extends,
        "documents": documents,
    });
    write_out(out, &format!("{summary:#}\n"))
}

/// What the summary says of redacted evidence looked up without `--trust`.
pub const REDACTED_ENTRY: &str = "an entry with the digest this evidence names is in the log; `cheq verify` checks that the confirmation service signed this evidence";

/// What the summary says of redacted evidence verified under `--trust`.
pub const REDACTED_VERIFIED: &str = "the confirmation service signed this evidence, with a key the trust file gives it (as `cheq verify` checks), and an entry with the digest it names, that of the document as delivered, is in the log";

/// Redacted evidence to look for: the entry's text, and whether the
/// evidence was verified first.
struct Redacted {
    entry: String,
    signature_checked: bool,
}

/// The entry to look for of `path`: a decided document's by its exact
/// bytes; redacted evidence's (§8.1) by the log digest it carries, with
/// that entry's text to report, once the evidence is verified under
/// `trust` when one is given.
fn wanted_document(
    path: &std::path::Path,
    trust: Option<&TrustStore>,
) -> Result<(Wanted, Option<Redacted>), CliError> {
    use crate::evidence::SignedEvidence;
    let name = display_path(path);
    let bytes = read_input(path)?;
    if !crate::evidence::is_redacted(&bytes) {
        return Ok((Wanted::document(&name, &bytes), None));
    }
    let in_file = |e: crate::evidence::EvidenceError| CliError::from(e).in_file(path);
    let signed = SignedEvidence::parse(&bytes).map_err(in_file)?;
    let entry = match trust {
        Some(trust) => signed.verify(trust).and_then(|v| v.evidence().log_entry()),
        None => signed.statement().log_entry(),
    }
    .map_err(in_file)?
    .to_bytes();
    let text = String::from_utf8_lossy(&entry).trim_end().to_owned();
    Ok((
        Wanted { name, entry },
        Some(Redacted {
            entry: text,
            signature_checked: trust.is_some(),
        }),
    ))
}

/// Replaces the kept checkpoint: written beside it, synced, then renamed
/// over it, so that a crash leaves the old one or the new one whole.
fn keep(path: &std::path::Path, note: &[u8]) -> Result<(), CliError> {
    let write_err = |source| CliError::Write {
        path: display_path(path),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(write_err)?;
    f.write_all(note).map_err(write_err)?;
    f.sync_all().map_err(write_err)?;
    std::fs::rename(&tmp, path).map_err(write_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_gzip_body_inflates_within_the_bound_and_no_further() {
        assert_eq!(gunzip(&gz(b"\x00\x05entry")).unwrap(), b"\x00\x05entry");
        let full = vec![0u8; MAX_RESOURCE];
        assert_eq!(gunzip(&gz(&full)).unwrap().len(), MAX_RESOURCE);
        // A few kilobytes that would inflate past the bound.
        let bomb = gz(&vec![0u8; MAX_RESOURCE + 1]);
        assert!(bomb.len() < 8192);
        assert!(gunzip(&bomb).unwrap_err().contains("more than"));
        assert!(gunzip(b"not gzip")
            .unwrap_err()
            .contains("does not inflate"));
    }
}
