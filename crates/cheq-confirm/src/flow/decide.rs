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
use super::{owned, stripe, Cs, CsError, Internal, Open, PasskeyProblem, PAGE_DEADLINE};
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
    /// The user's authenticator's assertion over this decision's challenge
    /// (§14), when the page asked for one.
    pub passkey: Option<crate::passkeys::AssertionAnswer>,
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
        let (entry, open, collected) = match self.prepare(id, who, &request).await? {
            Prepared::Earlier(decided) => return Ok(*decided),
            Prepared::Ready {
                entry,
                open,
                collected,
            } => (entry, open, collected),
        };
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
        let passkey = self.passkey_member(who, request, verified)?;
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
                passkey: passkey.as_ref().map(|p| p.member.clone()),
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
        // §15: the log names the document as delivered, before any sealing.
        let log_digest = self
            .log
            .is_some()
            .then(|| cheq_core::sign::b64::sha256(document.as_bytes()));
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
            log_digest,
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
                if let Some(used) = passkey {
                    self.passkey_used(used, now.timestamp());
                }
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

/// A decision checked against what was shown, before it is signed.
enum Prepared {
    /// Decided before: nothing to sign.
    Earlier(Box<Decided>),
    Ready {
        entry: cheq_store::cs::ConfirmationEntry,
        open: Arc<Open>,
        collected: Option<IndexMap<String, String>>,
    },
}

impl Cs {
    /// Everything a decision checks before it is signed: the entry, the
    /// page shown (kept, or fetched and verified again), the user, the
    /// view, the typed values, the warnings.
    async fn prepare(
        self: &Arc<Self>,
        id: &str,
        who: &Identity,
        request: &DecisionRequest,
    ) -> Result<Prepared, DecideError> {
        let entry = self.entry(id)?;
        // A page kept here has not been decided here (a decision forgets
        // it), and a decision made elsewhere on its CHEQ is found by its
        // nonce before signing: the store is asked by resource URI only
        // when the page must be fetched again, so that an earlier decision
        // is shown rather than the RS's refusal to serve it.
        let kept = self.kept(id, &entry);
        if kept.is_none() {
            if let Some(record) = self.earlier(&entry.resource_uri)? {
                return Ok(Prepared::Earlier(Box::new(earlier(record, who)?)));
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
        Ok(Prepared::Ready {
            entry,
            open,
            collected,
        })
    }

    /// The WebAuthn request options of an acceptance with the user's
    /// passkey (§14): the challenge of exactly this decision (this CHEQ,
    /// the view shown, `accept`, the values typed), and the user's
    /// passkeys. The challenge needs no state here: an assertion over it
    /// fits this decision alone, and a decision is signed once.
    pub async fn passkey_options(
        self: &Arc<Self>,
        id: &str,
        who: &Identity,
        request: &DecisionRequest,
    ) -> Result<serde_json::Value, DecideError> {
        let (open, collected) = match self.prepare(id, who, request).await? {
            Prepared::Earlier(_) => return Err(CsError::DecidedBefore.into()),
            Prepared::Ready {
                open, collected, ..
            } => (open, collected),
        };
        let account = self
            .store
            .accounts
            .get(&who.sub)
            .map_err(CsError::from)?
            .filter(|a| !a.passkeys.is_empty())
            .ok_or(CsError::Passkey(PasskeyProblem::NoPasskey))?;
        let challenge = decision_challenge(&open, request, collected.as_ref())?;
        let rp = crate::passkeys::RelyingParty::of(&self.public_url)
            .ok_or(CsError::Internal(Internal::Missing("the relying party")))?;
        Ok(crate::passkeys::request_options(
            &rp,
            &challenge,
            &account.passkeys,
        ))
    }
}

/// The challenge of a decision (§14) as the countersignature will state it.
fn decision_challenge(
    open: &Open,
    request: &DecisionRequest,
    collected: Option<&IndexMap<String, String>>,
) -> Result<[u8; 32], CsError> {
    let (_, view) = shown(&open.view, request.channel);
    cheq_core::sign::passkey::challenge_of(
        open.verified().rs_sig_digest(),
        view,
        request.decision,
        collected,
    )
    .ok_or(CsError::Internal(Internal::Missing(
        "the digests of the decision",
    )))
}

/// A passkey assertion ready for the header, and what to keep of it once
/// the decision is recorded.
struct PasskeyUse {
    member: serde_json::Map<String, serde_json::Value>,
    account: cheq_store::cs::Account,
    index: usize,
    sign_count: u32,
}

impl Cs {
    /// The `cheq_passkey` member of this decision (§14), from the user's
    /// own passkey: the credential must be one of the account's and its
    /// counter must grow; an acceptance of a CHEQ that asks for a passkey
    /// must carry one. (The countersigner then checks the assertion itself
    /// against the challenge.)
    fn passkey_member(
        &self,
        who: &Identity,
        request: &DecisionRequest,
        verified: &VerifiedCheq,
    ) -> Result<Option<PasskeyUse>, CsError> {
        let Some(answer) = &request.passkey else {
            let asks = verified.cheq().assurance == Some(cheq_core::cheq::Assurance::Passkey);
            if asks && request.decision == Decision::Accept {
                return Err(CsError::Passkey(PasskeyProblem::Required));
            }
            return Ok(None);
        };
        let account = self
            .store
            .accounts
            .get(&who.sub)?
            .ok_or(CsError::Passkey(PasskeyProblem::NotYours))?;
        let index = account
            .passkeys
            .iter()
            .position(|p| p.id == answer.id)
            .ok_or(CsError::Passkey(PasskeyProblem::NotYours))?;
        let seen = cheq_core::sign::passkey::sign_count(&answer.authenticator_data).unwrap_or(0);
        let kept = &account.passkeys[index];
        let sign_count = crate::passkeys::counter_after(kept.sign_count, seen)
            .map_err(|_| CsError::Passkey(PasskeyProblem::CounterWentBack))?;
        let b64 = cheq_core::sign::b64::encode;
        let mut member = serde_json::Map::new();
        member.insert("id".into(), kept.id.clone().into());
        member.insert("key".into(), serde_json::Value::Object(kept.key.clone()));
        member.insert(
            "authenticator_data".into(),
            b64(&answer.authenticator_data).into(),
        );
        member.insert("client_data".into(), b64(&answer.client_data).into());
        member.insert("signature".into(), b64(&answer.signature).into());
        Ok(Some(PasskeyUse {
            member,
            account,
            index,
            sign_count,
        }))
    }

    /// Keeps the counter and the time of use of a passkey that bound a
    /// recorded decision. The decision stands if this write fails (the
    /// next use checks against the older counter, which the next assertion
    /// still passes).
    fn passkey_used(&self, used: PasskeyUse, now: i64) {
        let PasskeyUse {
            mut account,
            index,
            sign_count,
            ..
        } = used;
        if let Some(p) = account.passkeys.get_mut(index) {
            p.sign_count = sign_count;
            p.last_used = Some(now);
        }
        if let Err(e) = self.store.accounts.put(&account, true) {
            log::warn!("keeping a passkey's counter: {e}");
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
