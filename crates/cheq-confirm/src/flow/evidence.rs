//! A user's evidence of their decisions (PROTOCOL.md §8.1, §15): the
//! signed document as delivered, or redacted evidence signed here, and the
//! name of its file.

use super::{Cs, CsError, Internal};
use crate::seal::{evidence_kind, redacted, served, EvidenceKind, RedactError};
use cheq_store::cs::{DecisionRecord, Identity};
use std::sync::Arc;

impl Cs {
    /// The evidence of one of the user's decisions, by record id: the
    /// signed document as delivered, or redacted evidence (§8.1) when it
    /// carried private values, signed here and now with the current
    /// signing key (as a countersignature is made), whether the record
    /// holds it sealed, redacted, or in the older shape;
    /// [`CsError::NotFound`] when none is kept.
    pub fn evidence(&self, record_id: &str, who: &Identity) -> Result<Evidence, CsError> {
        let Some(r) = self.store.records.by_id_for_user(&who.sub, record_id)? else {
            return Err(CsError::NotFound);
        };
        let kind = evidence_kind(&r);
        let statement = match kind {
            EvidenceKind::Signed => {
                return Ok(Evidence {
                    filename: evidence_filename(&r, false),
                    redacted: false,
                    body: r.document.clone(),
                })
            }
            EvidenceKind::Redacted if r.sealed => {
                let clear = self
                    .sealer
                    .open(record_id, &r.document)
                    .map_err(|e| CsError::Internal(Internal::Seal(Arc::new(e))))?;
                redacted(self.sealer.evidence_key(), &clear, &r).map_err(evidence_error)?
            }
            EvidenceKind::Redacted => served(&r).map_err(evidence_error)?,
            EvidenceKind::Lost => return Err(CsError::NotFound),
        };
        let signer = self
            .keys
            .signer()
            .map_err(|e| CsError::SigningUnavailable(Arc::new(e)))?;
        Ok(Evidence {
            filename: evidence_filename(&r, true),
            redacted: true,
            body: statement.sign(&signer),
        })
    }
}

/// One decision's evidence, as downloaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// The file: the signed document, or redacted evidence signed by this
    /// service (both JWS General JSON).
    pub body: String,
    /// Whether it is redacted evidence (§8.1) rather than a signed CHEQ
    /// (the file name says so).
    pub redacted: bool,
    /// A file name safe anywhere: `cheq-<operation>-<date>-<decision>.json`,
    /// `-redacted` before `.json` for redacted evidence.
    pub filename: String,
}

fn evidence_error(e: RedactError) -> CsError {
    match e {
        RedactError::Lost => CsError::NotFound,
        e => CsError::Internal(Internal::Evidence(e)),
    }
}

/// The most characters of an operation's name in an evidence file's name.
const FILENAME_OPERATION_CHARS: usize = 48;

/// The evidence file's name of `record` (see [`Evidence::filename`]): the
/// operation's name in lower-case ASCII letters and digits, every other run
/// of characters one `_` (the operation's URI's last segment when its name
/// has none of those, else `decision`), the decision's UTC date, the
/// decision.
pub fn evidence_filename(record: &DecisionRecord, redacted: bool) -> String {
    let last_segment = record
        .operation
        .rsplit(['/', ':', '#', '?'])
        .find(|s| !s.is_empty())
        .unwrap_or_default();
    let operation = [record.operation_name.as_str(), last_segment]
        .into_iter()
        .map(filename_word)
        .find(|w| !w.is_empty())
        .unwrap_or_else(|| "decision".to_owned());
    let date = chrono::DateTime::from_timestamp(record.decided_at, 0)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| "undated".to_owned());
    let suffix = if redacted { "-redacted" } else { "" };
    format!(
        "cheq-{operation}-{date}-{}{suffix}.json",
        record.decision.as_str()
    )
}

/// `text` as a file-name word: see [`evidence_filename`].
fn filename_word(text: &str) -> String {
    let mut out = String::new();
    let mut gap = false;
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            if gap && !out.is_empty() {
                out.push('_');
            }
            gap = false;
            out.push(c.to_ascii_lowercase());
            if out.len() >= FILENAME_OPERATION_CHARS {
                break;
            }
        } else {
            gap = true;
        }
    }
    out
}
