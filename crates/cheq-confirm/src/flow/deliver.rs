//! Delivery of decisions (PROTOCOL.md §6): a decision the user made is never
//! lost. Each attempt turns the RS's answer into the next [`Delivery`] state:
//!
//! | answer | next state |
//! |---|---|
//! | `200` | `Delivered` (the decision the RS recorded) |
//! | `410`, or no answer after expiry | `Expired` |
//! | `401`/`403`, no answer, `5xx` | `Pending`, next try after a back-off (1 s doubling, at most 30 s) |
//! | any other answer | `Refused` (the RS's status and words, kept as its words) |
//!
//! The worker leases due deliveries from the store (so that two workers, or
//! the immediate delivery and the worker, never deliver one decision at
//! once), and runs across restarts. A decision for a resource server the
//! operator blocked (§16.3) is not tried while it is blocked, and stays
//! pending (its attempts not counted), looked at again every
//! [`BLOCKED_RECHECK_SECS`]: it goes out once the RS is unblocked. When a sealed document's delivery is
//! final, the record keeps redacted evidence only (§8.1, in its current
//! format) and the key is shredded (§8).

use super::{stripe, Cs};
use crate::directory::Found;
use crate::fetch::RsAnswer;
use crate::seal::redact;
use cheq_core::sign::verify::CLOCK_SKEW_SECS;
use cheq_store::cs::{DecisionRecord, Delivery, RecordKey, Refusal};
use cheq_store::Durability;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// What a sealed record keeps when its document could not be opened or
/// redacted: no evidence ([`crate::seal::EvidenceKind::Lost`]).
const LOST: &str = "{\"redacted\":\"the sealed document could not be opened\"}";
/// Longest wait between two delivery attempts.
pub const MAX_BACKOFF_SECS: i64 = 30;
/// Deliveries the worker starts at once (the rest wait for the next round).
const MAX_DELIVERIES_PER_ROUND: usize = 32;
/// How long a leased delivery is the worker's alone.
pub const LEASE_SECS: i64 = 30;
/// How soon a decision for a blocked resource server is looked at again.
pub const BLOCKED_RECHECK_SECS: i64 = 3;
/// Why such a decision waits.
pub const BLOCKED_WAIT: &str =
    "the operator of this confirmation service blocked this resource server: the decision waits until it is unblocked";
/// How often the delivery worker reads the outbox's size for the metrics.
pub const OUTBOX_SUMMARY_SECS: i64 = 15;

/// Seconds before the next delivery attempt: 1, 2, 4, … capped at 30.
pub fn backoff(attempts: u32) -> i64 {
    (1i64 << attempts.min(5)).min(MAX_BACKOFF_SECS)
}

/// The state after an attempt that got `answer` at `now` (`late`: the CHEQ
/// expired more than the clock skew ago).
pub fn next_state(
    answer: Result<RsAnswer, String>,
    attempts: u32,
    now: i64,
    late: bool,
) -> Delivery {
    let retry = |error: String| Delivery::Pending {
        attempts: attempts + 1,
        next_try: now + backoff(attempts + 1),
        last_error: Some(error),
    };
    match answer {
        Ok(RsAnswer::Recorded(a)) => Delivery::Delivered {
            decision: a.decision,
            at: now,
        },
        Ok(RsAnswer::Expired) => Delivery::Expired { at: now },
        _ if late => Delivery::Expired { at: now },
        Ok(RsAnswer::Unauthorized { status }) => {
            retry(format!("HTTP {status}: our credentials were refused"))
        }
        Ok(RsAnswer::Refused {
            status,
            error,
            description,
        }) => Delivery::Refused {
            refusal: Refusal::ResourceServer {
                status,
                error,
                description,
            },
            at: now,
        },
        Err(e) => retry(e),
    }
}

impl Cs {
    /// One delivery attempt of a pending decision; returns the updated record.
    pub async fn deliver(self: &Arc<Self>, key: &RecordKey) -> Option<DecisionRecord> {
        let id = key.id();
        // One delivery of a decision at a time in this process (the store's
        // lease covers other processes).
        let _guard = self.delivery_locks[stripe(&id)].lock().await;
        let record = self.store.records.get(key).ok().flatten()?;
        self.attempt(&id, record).await
    }

    /// The first delivery attempt of a decision this call just claimed: the
    /// record is the one stored, leased to this attempt by its `next_try`,
    /// so it is not read back (two reads less per decision).
    pub(super) async fn deliver_claimed(
        self: &Arc<Self>,
        record: DecisionRecord,
    ) -> Option<DecisionRecord> {
        let id = record.key().id();
        let _guard = self.delivery_locks[stripe(&id)].lock().await;
        self.attempt(&id, record).await
    }

    /// One attempt on `record` (stored under `id`), under its delivery lock.
    async fn attempt(self: &Arc<Self>, id: &str, record: DecisionRecord) -> Option<DecisionRecord> {
        let Delivery::Pending { attempts, .. } = record.delivery else {
            return Some(record);
        };
        let now = self.clock.now().timestamp();
        let document = if record.sealed {
            match self.sealer.open(id, &record.document) {
                Ok(d) => d,
                Err(e) => {
                    log::error!("decision on {}: {e}", record.resource_origin);
                    let refused = Delivery::Refused {
                        refusal: Refusal::Unsealable,
                        at: now,
                    };
                    return self.finish_blocking(record, refused, None).await;
                }
            }
        } else {
            record.document.clone()
        };
        // Past expiry one more try is still made: the RS may have recorded
        // the decision before a crash here lost the word of it, and then it
        // answers the same again.
        let late = now > record.expires + CLOCK_SKEW_SECS;
        let rs = match self.directory.find(&record.resource_uri) {
            Ok(Found::Served(rs)) => rs,
            // Blocked by the operator (§16.3): not tried, not dropped, and
            // looked at again shortly, so that it goes out soon after the
            // RS is unblocked.
            Ok(Found::Blocked(_)) => {
                let waiting = Delivery::Pending {
                    attempts,
                    next_try: now + BLOCKED_RECHECK_SECS,
                    last_error: Some(BLOCKED_WAIT.to_owned()),
                };
                return self.finish_blocking(record, waiting, None).await;
            }
            Err(_) => {
                let gone = Delivery::Refused {
                    refusal: Refusal::Unregistered,
                    at: now,
                };
                return self.finish_blocking(record, gone, Some(document)).await;
            }
        };
        let answer = rs
            .client
            .deliver(&record.resource_uri, record.decision, &document)
            .await
            .map_err(|e| e.to_string());
        let now = self.clock.now().timestamp();
        let delivery = next_state(answer, attempts, now, late);
        let outcome = match &delivery {
            Delivery::Pending { .. } => "retry",
            Delivery::Delivered { .. } => "delivered",
            Delivery::Refused { .. } => "refused",
            Delivery::Expired { .. } => "expired",
        };
        self.metrics()
            .deliveries
            .with_label_values(&[outcome])
            .inc();
        match &delivery {
            Delivery::Pending { last_error, .. } => log::warn!(
                "delivery to {} pending: {}",
                record.resource_origin,
                last_error.as_deref().unwrap_or("")
            ),
            other => log::info!("delivery to {}: {other:?}", record.resource_origin),
        }
        self.finish_blocking(record, delivery, Some(document)).await
    }

    /// [`Cs::finish`], off the async worker when it flushes (a state still
    /// pending, or a sealed document's evidence); a final state of a
    /// document kept in clear is written without a flush, here (one
    /// hand-off between threads less per decision).
    async fn finish_blocking(
        self: &Arc<Self>,
        record: DecisionRecord,
        delivery: Delivery,
        clear: Option<String>,
    ) -> Option<DecisionRecord> {
        if !delivery.is_pending() && !record.sealed {
            return self.finish(record, delivery, clear.as_deref());
        }
        let cs = self.clone();
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _span = span.entered();
            cs.finish(record, delivery, clear.as_deref())
        })
        .await
        .ok()
        .flatten()
    }

    /// Stores a new delivery state. When it is final and the document was
    /// sealed, the record keeps redacted evidence only and the key is then
    /// shredded (§8).
    fn finish(
        &self,
        mut record: DecisionRecord,
        delivery: Delivery,
        clear: Option<&str>,
    ) -> Option<DecisionRecord> {
        let done = !delivery.is_pending();
        record.delivery = delivery;
        if done && record.sealed {
            // The redacted record is made durable first, then the key goes;
            // a crash in between leaves a key whose record no longer needs
            // it, which `sweep_keys` deletes at the next start.
            let redacted = clear.map(|d| redact(self.sealer.evidence_key(), d, &record));
            record.document = match redacted {
                Some(Ok(evidence)) => evidence,
                Some(Err(e)) => {
                    log::error!("cannot redact a delivered document: {e}");
                    LOST.to_owned()
                }
                None => LOST.to_owned(),
            };
            record.sealed = false;
            if let Err(e) = self.store.records.update(&record, Durability::Now) {
                log::error!("cannot store a delivery state: {e}");
                return None;
            }
            if let Err(e) = self.sealer.shred(&record.key().id()) {
                log::error!("cannot delete a sealed-document key: {e}");
            }
            return Some(record);
        }
        // A lost "delivered" is harmless (the next start delivers the same
        // bytes again and the RS answers the same), so it is not flushed; a
        // still-pending state is worth keeping.
        let durability = if done {
            Durability::Deferred
        } else {
            Durability::Now
        };
        match self.store.records.update(&record, durability) {
            Ok(()) => Some(record),
            Err(e) => {
                log::error!("cannot store a delivery state: {e}");
                None
            }
        }
    }

    /// Deletes sealed-document keys whose records no longer need them (left
    /// by a crash between storing redacted evidence and deleting the key).
    pub fn sweep_keys(&self) -> Result<usize, super::CsError> {
        // Usually there is no key at all: then no record needs reading.
        if !self.sealer.has_keys() {
            return Ok(0);
        }
        let keep: Vec<String> = self
            .store
            .records
            .sealed()?
            .iter()
            .map(RecordKey::id)
            .collect();
        Ok(self.sealer.sweep(&keep))
    }

    /// Wakes the delivery worker.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Delivers pending decisions whose time has come, forever (and reads
    /// the outbox's size for the metrics now and then): started with
    /// the server, so decisions left pending by a previous run go out too.
    pub async fn run_deliveries(self: Arc<Self>) {
        let mut summarised_at: Option<i64> = None;
        loop {
            let now = self.clock.now().timestamp();
            if summarised_at.is_none_or(|t| now - t >= OUTBOX_SUMMARY_SECS || now < t) {
                summarised_at = Some(now);
                let cs = self.clone();
                let _ = tokio::task::spawn_blocking(move || cs.summarise_outbox()).await;
            }
            let due = self
                .store
                .records
                .lease_due(now, LEASE_SECS, MAX_DELIVERIES_PER_ROUND)
                .unwrap_or_else(|e| {
                    log::warn!("reading the delivery outbox: {e}");
                    Vec::new()
                });
            let tasks: Vec<_> = due
                .into_iter()
                .map(|record| {
                    let cs = self.clone();
                    let span = cheq_support::text::confirmation_span(
                        &cheq_support::text::confirmation_id(&record.resource_uri),
                    );
                    tokio::spawn(async move { cs.deliver(&record.key()).await }.instrument(span))
                })
                .collect();
            for t in tasks {
                let _ = t.await;
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), self.wake.notified()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cheq_core::cheq::{Decision, DecisionAnswer};

    #[test]
    fn backoff_is_capped_at_30_seconds() {
        assert_eq!(
            (1..=8).map(backoff).collect::<Vec<_>>(),
            [2, 4, 8, 16, 30, 30, 30, 30]
        );
        assert_eq!(backoff(0), 1);
    }

    #[test]
    fn every_answer_has_its_next_state() {
        let accepted = RsAnswer::Recorded(DecisionAnswer {
            decision: Decision::Accept,
        });
        assert_eq!(
            next_state(Ok(accepted.clone()), 0, 100, false),
            Delivery::Delivered {
                decision: Decision::Accept,
                at: 100
            }
        );
        // A late answer that says "recorded" is still delivered.
        assert!(matches!(
            next_state(Ok(accepted), 3, 100, true),
            Delivery::Delivered { .. }
        ));
        assert_eq!(
            next_state(Ok(RsAnswer::Expired), 0, 100, false),
            Delivery::Expired { at: 100 }
        );
        assert_eq!(
            next_state(Err("refused".into()), 2, 100, false),
            Delivery::Pending {
                attempts: 3,
                next_try: 108,
                last_error: Some("refused".into())
            }
        );
        assert_eq!(
            next_state(Err("refused".into()), 2, 100, true),
            Delivery::Expired { at: 100 }
        );
        assert!(matches!(
            next_state(Ok(RsAnswer::Unauthorized { status: 401 }), 0, 100, false),
            Delivery::Pending { attempts: 1, .. }
        ));
        let refused = RsAnswer::Refused {
            status: 409,
            error: "replayed".into(),
            description: "no".into(),
        };
        assert!(matches!(
            next_state(Ok(refused), 0, 100, false),
            Delivery::Refused {
                refusal: Refusal::ResourceServer { status: 409, .. },
                ..
            }
        ));
    }
}
