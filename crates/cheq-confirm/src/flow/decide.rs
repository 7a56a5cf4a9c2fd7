//! The decision (PROTOCOL.md §5, §6, §8): check what the user decided on
//! against what they were shown, countersign once per (RS origin, nonce),
//! seal private values, store the record durably, then deliver at once within
//! the page deadline (the worker of [`super::deliver`] takes over after).
//!
//! A nonce is countersigned at most once: decisions on one record key are
//! serialised by a striped lock, the store's compare-and-set claim is the
//! final word (it holds across processes), and the record is durable before
//! anything is delivered.

use super::inputs::{validate_collected, Collected, InputProblems};
use super::{owned, stripe, Cs, CsError, Internal, Open, PAGE_DEADLINE};
use crate::seal::collected_digests;
use crate::view::CheqView;
use cheq_core::cheq::{Channel, Decision};
use cheq_core::sign::{countersign, CountersignError, DecisionInput, VerifiedCheq};
use cheq_store::cs::{Claim, DecisionRecord, Delivery, Identity, RecordKey};
use cheq_store::Durability;
use indexmap::IndexMap;
use std::sync::Arc;

/// What the user decided, and how.
#[derive(Debug, Clone)]
pub struct DecisionRequest {
    pub decision: Decision,
    pub channel: Channel,
    /// The `cheq_view` digest of the view the user decided on, when the
    /// front end knows it (the HTML form carries it).
    pub view_digest: Option<String>,
    pub collected: Collected,
    /// The user took the extra step that accepting despite warnings needs.
    pub warnings_acknowledged: bool,
}

/// The outcome of a decision request.
#[derive(Debug, Clone)]
pub struct Decided {
    pub record: DecisionRecord,
    /// True when the record key had been decided before: nothing new was signed.
    pub earlier: bool,
}

/// Why a decision could not be made.
#[derive(Debug)]
pub enum DecideError {
    /// Values the user typed are not acceptable: the page is shown again,
    /// from what was shown before (no second fetch, no new verification).
    Input {
        problems: InputProblems,
        open: Arc<Open>,
    },
    Other(CsError),
}

impl From<CsError> for DecideError {
    fn from(e: CsError) -> Self {
        DecideError::Other(e)
    }
}

/// The text shown on `channel` and its digest (`cheq_view`).
fn shown(view: &CheqView, channel: Channel) -> (&str, &str) {
    match channel {
        Channel::Voice => (&view.voice().text, &view.voice().digest),
        Channel::Html | Channel::Api => (&view.text, &view.digest),
    }
}

fn earlier(record: DecisionRecord, who: &Identity) -> Result<Decided, CsError> {
    Ok(Decided {
        record: owned(record, who)?,
        earlier: true,
    })
}

impl Cs {
    /// Decides: checks the decision against what was shown, countersigns
    /// once, records durably, then delivers. Returns the record (its
    /// delivery state says whether the RS has it yet).
    pub async fn decide(
        self: &Arc<Self>,
        id: &str,
        who: &Identity,
        request: DecisionRequest,
    ) -> Result<Decided, DecideError> {
        use tracing::Instrument;
        self.decide_in_span(id, who, request)
            .instrument(cheq_support::text::confirmation_span(id))
            .await
    }

    async fn decide_in_span(
        self: &Arc<Self>,
        id: &str,
        who: &Identity,
        request: DecisionRequest,
    ) -> Result<Decided, DecideError> {
        let entry = self.entry(id)?;
        // A page kept here has not been decided here (a decision forgets
        // it), and a decision made elsewhere on its CHEQ is found by its
        // nonce before signing: the store is asked by resource URI only
        // when the page must be fetched again, so that an earlier decision
        // is shown rather than the RS's refusal to serve it.
        let kept = self.kept(id, &entry);
        if kept.is_none() {
            if let Some(record) = self.earlier(&entry.resource_uri)? {
                return Ok(earlier(record, who)?);
            }
        }
        self.check_fresh(&entry.resource_uri, who)?;
        let open = match kept {
            Some(open) => open,
            None => self.shown(id, &entry).await?,
        };
        let verified = open.verified();
        if !who.is(&verified.fields().subject) {
            return Err(CsError::WrongUser {
                subject: verified.fields().subject.clone(),
                user: who.sub.clone(),
            }
            .into());
        }
        let (_, digest) = shown(&open.view, request.channel);
        if request.view_digest.as_deref().is_some_and(|d| d != digest) {
            return Err(CsError::Changed.into());
        }
        let by_name = request.collected.by_name(verified);
        let collected = match validate_collected(verified, request.decision, &by_name) {
            Ok(c) => c,
            Err(problems) => return Err(DecideError::Input { problems, open }),
        };
        if request.decision == Decision::Accept
            && !open.view.warnings.is_empty()
            && !request.warnings_acknowledged
        {
            let problems = InputProblems {
                fields: Vec::new(),
                warnings_unacknowledged: true,
            };
            return Err(DecideError::Input { problems, open });
        }
        let decided = match &self.store.flusher {
            // Signed and written here, then awaited on disk: no thread is
            // held for the flush. The record's lock is released
            // before the flush; a second decision on it finds the record
            // and answers after its own flush, which covers this write.
            // (A document to seal writes and syncs its key file first:
            // that waits on the disk, so it takes the blocking path.)
            Some(flusher) if !seals(open.verified(), collected.as_ref()) => {
                let decided = self.sign_and_record(
                    &open,
                    &entry.resource_uri,
                    who,
                    &request,
                    collected,
                    Durability::Deferred,
                )?;
                flusher.flushed().await.map_err(CsError::from)?;
                decided
            }
            // Signing and the flushed record run off the async worker.
            _ => {
                let cs = self.clone();
                let who2 = who.clone();
                let open2 = open.clone();
                let span = tracing::Span::current();
                tokio::task::spawn_blocking(move || {
                    let _span = span.entered();
                    cs.sign_and_record(
                        &open2,
                        &entry.resource_uri,
                        &who2,
                        &request,
                        collected,
                        Durability::Now,
                    )
                })
                .await
                .map_err(|_| CsError::Internal(Internal::Task("signing")))??
            }
        };
        self.forget(id);
        if decided.earlier || !decided.record.delivery.is_pending() {
            return Ok(decided);
        }
        // The user hears back within the page deadline; a slower RS is left
        // to the worker (the record says "delivery pending").
        let key = decided.record.key();
        let attempt = self.deliver_claimed(decided.record.clone());
        let record = match tokio::time::timeout(PAGE_DEADLINE, attempt).await {
            Ok(Some(r)) => r,
            _ => self
                .store
                .records
                .get(&key)
                .ok()
                .flatten()
                .unwrap_or(decided.record),
        };
        if record.delivery.is_pending() {
            // Its next try is the worker's.
            self.wake();
        }
        Ok(Decided {
            record,
            earlier: false,
        })
    }

    /// Countersigns and stores the record, once per record key: durable
    /// before it returns ([`Durability::Now`]), or written for the caller to
    /// await on disk ([`Durability::Deferred`]).
    fn sign_and_record(
        &self,
        open: &Open,
        resource_uri: &str,
        who: &Identity,
        request: &DecisionRequest,
        collected: Option<IndexMap<String, String>>,
        durability: Durability,
    ) -> Result<Decided, DecideError> {
        let verified = open.verified();
        let view = &open.view;
        let key = RecordKey::new(&view.resource_origin, &verified.fields().nonce);
        let record_id = key.id();
        let _guard = self.locks[stripe(&record_id)]
            .lock()
            .map_err(|_| CsError::Internal(Internal::Poisoned))?;
        // A double click, a second tab, a replayed form, a decision made on
        // another instance: no second countersignature (§6), not even one
        // thrown away. (Across instances deciding at the same moment, the
        // claim below keeps the first.)
        if let Some(record) = self.store.records.get(&key).map_err(CsError::from)? {
            return Ok(earlier(record, who)?);
        }
        let now = self.clock.now();
        let signer = self
            .keys
            .signer()
            .map_err(|e| CsError::SigningUnavailable(Arc::new(e)))?;
        let document = countersign(
            verified,
            &signer,
            DecisionInput {
                decision: request.decision,
                sub: &who.sub,
                also_known_as: &who.also_known_as,
                auth_time: who.auth_time.unwrap_or(cheq_core::sign::AUTH_TIME_UNKNOWN),
                amr: &who.amr,
                channel: request.channel,
                view_text: shown(view, request.channel).0,
                collected: collected.clone(),
                passkey: None,
            },
            now,
        )
        .map_err(|e| match e {
            CountersignError::Expired(at) => CsError::Expired(at),
            CountersignError::SubjectMismatch { subject, user } => {
                CsError::WrongUser { subject, user }
            }
            e => CsError::BadRequest(crate::flow::BadRequest::Countersign(e)),
        })?;
        // §8: a sensitive value is never written in clear, even before delivery.
        let sensitive = seals(verified, collected.as_ref());
        let collected_hmac = collected
            .as_ref()
            .map(|c| collected_digests(self.sealer.evidence_key(), c))
            .unwrap_or_default();
        let document = if sensitive {
            self.sealer
                .seal(&record_id, &document)
                .map_err(|e| CsError::Internal(Internal::Seal(Arc::new(e))))?
        } else {
            document
        };
        let record = DecisionRecord {
            sealed: sensitive,
            collected_hmac,
            nonce: key.nonce,
            user: who.sub.clone(),
            resource_uri: resource_uri.to_owned(),
            resource_origin: key.origin,
            operation: view.operation.clone(),
            operation_name: view.operation_name.clone(),
            decision: request.decision,
            channel: request.channel,
            decided_at: now.timestamp(),
            expires: verified.fields().expires.timestamp(),
            document,
            delivery: Delivery::Pending {
                attempts: 0,
                // The immediate delivery goes first: this is its lease.
                next_try: now.timestamp() + 15,
                last_error: None,
            },
        };
        let claimed = match durability {
            Durability::Now => self.store.records.claim(&record),
            Durability::Deferred => self.store.records.claim_with(&record, Durability::Deferred),
        };
        match claimed.map_err(CsError::from)? {
            Claim::Fresh => {
                self.metrics()
                    .decisions
                    .with_label_values(&[record.decision.as_str()])
                    .inc();
                log::info!(
                    "{} decided {} on {} ({})",
                    cheq_support::text::one_line(&record.user),
                    record.decision,
                    cheq_support::text::one_line(&record.operation_name),
                    record.resource_origin
                );
                Ok(Decided {
                    record,
                    earlier: false,
                })
            }
            Claim::Existing(old) => Ok(earlier(*old, who)?),
            // Its record was collected as old history: the countersignature
            // just made goes nowhere (§6: the nonce was countersigned once).
            Claim::Collected => Err(CsError::DecidedBefore.into()),
        }
    }
}

/// Whether a decision with these typed values seals its document (§8: a
/// value typed into a sensitive input is never written in clear).
fn seals(verified: &VerifiedCheq, collected: Option<&IndexMap<String, String>>) -> bool {
    collected.is_some_and(|c| {
        verified
            .cheq()
            .parameters
            .iter()
            .any(|p| p.input.as_ref().is_some_and(|i| i.sensitive) && c.contains_key(&p.name))
    })
}
