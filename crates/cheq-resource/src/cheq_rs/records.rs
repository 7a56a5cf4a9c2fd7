//! What the RS reads back from its records: the document for the CS (§3),
//! the result for the agent (§7), and forgetting what can no longer matter.

use super::{expires_at, CheqRs, CheqRsError};
use cheq_core::cheq::{Cheq, Decision};
use cheq_core::sign::jws::RawDocument;
use cheq_core::sign::verify::CLOCK_SKEW_SECS;
use cheq_store::rs::CheqState;
use chrono::Duration;
use serde_json::{json, Value};

/// The result as the agent sees it (§7).
#[derive(Debug, Clone, PartialEq)]
pub enum ResultView {
    Pending,
    Accepted(Value),
    Rejected,
    Expired,
}

impl ResultView {
    /// The §7 body.
    pub fn to_json(&self) -> Value {
        match self {
            ResultView::Pending => json!({"status": "pending"}),
            ResultView::Accepted(result) => json!({"status": "accepted", "result": result}),
            ResultView::Rejected => json!({"status": "rejected"}),
            ResultView::Expired => json!({"status": "expired"}),
        }
    }
}

impl CheqRs {
    /// The resource-signed document of confirmation `id`, for the CS (§3).
    pub fn fetch(&self, id: &str) -> Result<String, CheqRsError> {
        self.fetch_for(id, None)
    }

    /// [`fetch`](Self::fetch) for a caller that authenticated as the CS of
    /// issuer `by` (§16.4), when it did: a CHEQ whose `confirmation uri`
    /// is another CS's is `NotFound`, as if unknown. (A decided CHEQ no
    /// longer holds its document, and is `AlreadyDecided` to anyone.)
    pub fn fetch_for(&self, id: &str, by: Option<&str>) -> Result<String, CheqRsError> {
        let kept = self.recent.as_ref().and_then(|r| r.get(id));
        let record = match self.unexpired(kept) {
            Some(record) => record,
            None => self.records.get(id)?.ok_or(CheqRsError::NotFound)?,
        };
        if let Some(cs) = by {
            if !record.document.is_empty() && confirmation_origin(&record.document)? != cs {
                return Err(CheqRsError::NotFound);
            }
        }
        if record.state != CheqState::Pending || self.nonces.get(&record.nonce)?.is_some() {
            return Err(CheqRsError::AlreadyDecided);
        }
        if self.clock.now() >= expires_at(&record) {
            return Err(CheqRsError::Expired);
        }
        Ok(record.document)
    }

    /// Forgets what can no longer matter: nonce entries of expired CHEQs (the
    /// record of each confirmation still refuses replays), and confirmation
    /// records (with their results) whose CHEQ expired more than `keep` ago.
    /// Returns how many nonces and records were removed. Blocks, as
    /// [`decide`](Self::decide) does (and panics on an async task).
    pub fn collect_expired(&self, keep: Duration) -> Result<(usize, usize), CheqRsError> {
        // Every stripe, in order: no decision runs while entries go.
        let _guards: Vec<_> = self.locks.iter().map(|l| l.blocking_lock()).collect();
        let now = self.clock.now();
        let nonces = self.nonces.collect_expired(now.timestamp())?;
        let cutoff = (now - keep).timestamp() - CLOCK_SKEW_SECS;
        let records = self.records.collect_expired(cutoff)?;
        Ok((nonces, records))
    }

    /// The result behind `result_id` (§7).
    pub fn result(&self, result_id: &str) -> Result<ResultView, CheqRsError> {
        let mut record = self
            .records
            .by_result(result_id)?
            .ok_or(CheqRsError::ResultNotFound)?;
        if record.state != CheqState::Pending {
            // A decision's writes are visible before its flush (one for all
            // of them, with the final state: `Effect::InStore`); a decision
            // holds its lock until they are durable, so a result read under
            // it is one no crash can take back. While a decision holds it,
            // the result is pending (never a wait: the RS may serve this on
            // its async worker).
            let Ok(_guard) = self.stripe(&record.id).try_lock() else {
                return Ok(ResultView::Pending);
            };
            record = self
                .records
                .get(&record.id)?
                .ok_or(CheqRsError::ResultNotFound)?;
        }
        Ok(match record.state {
            CheqState::Done {
                decision: Decision::Accept,
                result,
                ..
            } => ResultView::Accepted(result.unwrap_or(Value::Null)),
            CheqState::Done {
                decision: Decision::Reject,
                ..
            } => ResultView::Rejected,
            CheqState::Decided { .. } => ResultView::Pending,
            CheqState::Pending => {
                if self.clock.now() > expires_at(&record) + Duration::seconds(CLOCK_SKEW_SECS) {
                    ResultView::Expired
                } else {
                    ResultView::Pending
                }
            }
        })
    }
}

/// The origin of the `confirmation uri` of a document this RS signed.
fn confirmation_origin(document: &str) -> Result<String, CheqRsError> {
    let unreadable = |e: String| CheqRsError::Mint(format!("a stored CHEQ cannot be read: {e}"));
    let raw = RawDocument::parse(document.as_bytes()).map_err(|e| unreadable(e.to_string()))?;
    let cheq = Cheq::parse(&raw.payload).map_err(|e| unreadable(e.to_string()))?;
    let uri = cheq
        .confirmation_uri
        .ok_or_else(|| unreadable("no confirmation uri".into()))?;
    Ok(cheq_core::discovery::origin(&uri).unwrap_or(uri))
}
