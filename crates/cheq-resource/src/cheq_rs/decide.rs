//! Taking a decision exactly once (§6): the steps of the [`cheq_rs`](super)
//! docs ("Exactly once", "Awaited durability"), for a first delivery and
//! for a re-delivery of the same bytes.

use super::{expires_at, CheqRs, CheqRsError};
use cheq_core::cheq::{Decision, DecisionAnswer};
use cheq_core::sign::verify::CLOCK_SKEW_SECS;
use cheq_core::sign::{
    b64, verify_decision, verify_own_decision, Context, VerifiedDecision, VerifyError,
};
use cheq_store::rs::{CheqRecord, CheqState, Transition};
use cheq_store::Durability;
use cheq_store::{NonceEntry, RecordOutcome, StoreError};
use chrono::{DateTime, Duration, Utc};
use indexmap::IndexMap;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// The caller data of a nonce entry: the decision's wire word.
fn nonce_data(decision: Decision) -> Vec<u8> {
    decision.as_str().as_bytes().to_vec()
}

/// Reads back the decision [`nonce_data`] wrote in the entry of `nonce`.
fn nonce_decision(nonce: &str, entry: &NonceEntry) -> Result<Decision, StoreError> {
    std::str::from_utf8(&entry.data)
        .ok()
        .and_then(Decision::parse)
        .ok_or_else(|| StoreError::Corrupt {
            key: nonce.to_owned(),
            reason: "the nonce entry does not name a decision".to_owned(),
        })
}

impl CheqRs {
    /// Takes a decision (§6): `body` is the exact bytes POSTed to the resource
    /// URI of `id` with `?accept` or `?reject` (`decision`).
    ///
    /// Blocks: call it from a thread that may. Called on an async task, it
    /// panics (tokio's `blocking_lock`) rather than stall the task's worker:
    /// an async caller has [`decide_async`](Self::decide_async).
    pub fn decide(
        &self,
        id: &str,
        decision: Decision,
        body: &[u8],
    ) -> Result<DecisionAnswer, CheqRsError> {
        self.decide_by(id, decision, body, None)
    }

    /// [`decide`](Self::decide) for a caller that authenticated as the CS
    /// of issuer `by` (§16.4), when it did: a decision whose CHEQ names
    /// another CS is refused ([`CheqRsError::WrongConfirmationServer`]),
    /// before anything is written. (A countersignature that is not that
    /// CS's fails to verify against the keys trusted for the CHEQ's CS:
    /// the front end tells that apart, [`CheqRsError::countersigned_elsewhere`],
    /// once it has read the CS's keys again.)
    pub fn decide_by(
        &self,
        id: &str,
        decision: Decision,
        body: &[u8],
        by: Option<&str>,
    ) -> Result<DecisionAnswer, CheqRsError> {
        let _guard = self.stripe(id).blocking_lock();
        self.decide_locked(id, decision, body, Durability::Now, by)
    }

    /// [`decide`](Self::decide) for an async caller. With a flusher and an
    /// operation whose effect is in the RS's store, the steps run on the
    /// caller's task, every write unflushed, and one awaited flush makes them
    /// durable before the answer (the decision's lock is held until then, as
    /// the [`cheq_rs`](super) docs say); otherwise on a blocking thread.
    pub async fn decide_async(
        self: &Arc<Self>,
        id: Arc<String>,
        decision: Decision,
        body: Arc<[u8]>,
    ) -> Result<DecisionAnswer, CheqRsError> {
        self.decide_async_by(id, decision, body, None).await
    }

    /// [`decide_async`](Self::decide_async) for a caller that
    /// authenticated as the CS of issuer `by` ([`decide_by`](Self::decide_by)).
    pub async fn decide_async_by(
        self: &Arc<Self>,
        id: Arc<String>,
        decision: Decision,
        body: Arc<[u8]>,
        by: Option<Arc<str>>,
    ) -> Result<DecisionAnswer, CheqRsError> {
        match &self.flusher {
            Some(flusher) if self.in_store() => {
                let _guard = self.stripe(&id).lock().await;
                let answer =
                    self.decide_locked(&id, decision, &body, Durability::Deferred, by.as_deref());
                // Also after a refusal: what it read may be another
                // decision's write, visible and not yet on disk.
                flusher.flushed().await?;
                answer
            }
            _ => {
                self.on_blocking_thread(move |rs| rs.decide_by(&id, decision, &body, by.as_deref()))
                    .await
            }
        }
    }

    /// [`decide`](Self::decide) under the decision's lock. Deferred durability
    /// applies to an operation whose effect is in the RS's store
    /// ([`Effect::InStore`](super::Effect::InStore)) only: an effect kept
    /// elsewhere needs its nonce on disk before it runs.
    fn decide_locked(
        &self,
        id: &str,
        decision: Decision,
        body: &[u8],
        durability: Durability,
        by: Option<&str>,
    ) -> Result<DecisionAnswer, CheqRsError> {
        // A kept record is taken out: whatever this decision does to the
        // record, a later one reads the store.
        let kept = self.recent.as_ref().and_then(|r| r.take(id));
        let record = match self.unexpired(kept) {
            Some(record) => record,
            None => self.records.get(id)?.ok_or(CheqRsError::NotFound)?,
        };
        let _span = cheq_support::text::confirmation_span(&cheq_support::text::confirmation_id(
            &record.resource_uri,
        ))
        .entered();
        let digest_bytes: [u8; 32] = Sha256::digest(body).into();
        let digest = b64::encode(digest_bytes);
        let now = self.clock.now();
        let delivered = Delivered {
            body,
            digest: &digest,
            decision,
            now,
            durability,
        };

        // A byte-identical re-delivery gets the same answer (and completes the
        // steps a crash may have cut short); anything else for a decided nonce
        // is a replay.
        let decided = (record.state.digest().map(str::to_owned)).zip(record.state.decision());
        if let Some((earlier, found)) = decided {
            return self.again(record, &delivered, (&earlier, found));
        }

        // Pending. Its nonce may be recorded all the same (a crash between
        // steps 1 and 2): the record of step 1 below finds that, so the nonce
        // is not read first. Only a body that cannot be taken as new (expired,
        // or no longer verifying) is looked up there, since a re-delivery of
        // recorded bytes completes whatever the time or the keys now say.
        let fresh = if now > expires_at(&record) + Duration::seconds(CLOCK_SKEW_SECS) {
            Err(CheqRsError::Expired)
        } else {
            self.verify(&record, body, Some(decision), now)
        };
        // A CHEQ that names another CS than the caller's is not the
        // caller's to decide, whoever countersigned it (§16.4, §17).
        if let (Some(cs), Err(e)) = (by, &fresh) {
            if e.names_another_cs(cs) {
                return Err(CheqRsError::WrongConfirmationServer);
            }
        }
        let verified = match fresh {
            // A CS that authenticated with its own key decides only the
            // CHEQs that name it (§16.4).
            Ok(verified)
                if by.is_some_and(|cs| {
                    verified.fields().confirmation_origin.ascii_serialization() != cs
                }) =>
            {
                return Err(CheqRsError::WrongConfirmationServer)
            }
            Ok(verified) => verified,
            Err(refused) => {
                return match self.nonces.get(&record.nonce)? {
                    Some(entry) => {
                        let earlier = b64::encode(entry.digest);
                        let found = nonce_decision(&record.nonce, &entry)?;
                        self.again(record, &delivered, (&earlier, found))
                    }
                    None => Err(refused),
                };
            }
        };

        let entry = NonceEntry {
            digest: digest_bytes,
            expires_at: record.expires + CLOCK_SKEW_SECS + 1,
            data: nonce_data(decision),
        };
        let nonce = record.nonce.clone();
        let in_store = self.in_store();
        // Deferred durability is for an effect in the store only (the
        // nonce of an effect elsewhere is on disk before it runs).
        let deferred = durability == Durability::Deferred && in_store;
        let recorded = if in_store {
            self.nonces
                .record_with(&nonce, &entry, Durability::Deferred)?
        } else {
            self.nonces.record(&nonce, &entry)?
        };
        let mut flushed = false;
        let answer = match recorded {
            RecordOutcome::Fresh | RecordOutcome::SameAsBefore(_) => {
                log::info!("decision recorded: {decision}");
                self.complete_verified(record, &digest, &verified, durability, &mut flushed)
            }
            RecordOutcome::Conflict(_) => {
                log::info!("a replay of a decided nonce was refused");
                Err(CheqRsError::Replayed)
            }
        };
        if in_store && !flushed && !deferred {
            // The steps ended before the final state's durable write (a
            // failed operation, a refusal): the nonce is on disk before the
            // answer all the same (§6).
            self.nonces.flush()?;
        }
        answer
    }

    /// A delivery for a nonce already decided by a body of digest `earlier`
    /// that said `found`: the same bytes complete the steps left, anything
    /// else is refused.
    fn again(
        &self,
        record: CheqRecord,
        delivered: &Delivered<'_>,
        (earlier, found): (&str, Decision),
    ) -> Result<DecisionAnswer, CheqRsError> {
        let decision = delivered.decision;
        if earlier != delivered.digest {
            log::info!("a replay of a decided nonce was refused");
            return Err(CheqRsError::Replayed);
        }
        if found != decision {
            return Err(VerifyError::DecisionMismatch {
                expected: decision,
                found,
            }
            .into());
        }
        let answer = self.complete(record, delivered);
        if self.in_store() && delivered.durability == Durability::Now {
            // What the re-delivery finds may be visible and not yet on disk
            // (a final state whose flush failed): it is before the answer.
            self.nonces.flush()?;
        }
        answer
    }

    /// Verifies a decision for `record` (§5, rules 1–4, the required inputs
    /// of rule 3 included), and that it carries the nonce this RS issued.
    fn verify(
        &self,
        record: &CheqRecord,
        body: &[u8],
        expected: Option<Decision>,
        now: DateTime<Utc>,
    ) -> Result<VerifiedDecision, CheqRsError> {
        let ctx = Context {
            now,
            resource_uri: Some(&record.resource_uri),
            confirmation_uri: None,
        };
        // A pending record still holds the document this RS issued: its own
        // signature in the decision is recognised, not verified again.
        let verified = if record.document.is_empty() {
            verify_decision(body, &self.trust(), expected, &ctx)?
        } else {
            verify_own_decision(body, &record.document, &self.trust(), expected, &ctx)?
        };
        if verified.fields().nonce != record.nonce {
            return Err(CheqRsError::InvalidOther(
                "the nonce is not the one this resource server issued".into(),
            ));
        }
        Ok(verified)
    }

    /// Steps 2–4 of the [`cheq_rs`](super) docs, for a body whose nonce is
    /// recorded.
    fn complete(
        &self,
        record: CheqRecord,
        delivered: &Delivered<'_>,
    ) -> Result<DecisionAnswer, CheqRsError> {
        if let CheqState::Done { decision, .. } = record.state {
            return Ok(DecisionAnswer { decision });
        }
        // The body was verified when first delivered; verify again to read it,
        // at a time it was valid (it may be re-delivered after expiry).
        let at = delivered.now.min(expires_at(&record));
        let verified = self.verify(&record, delivered.body, None, at)?;
        self.complete_verified(
            record,
            delivered.digest,
            &verified,
            delivered.durability,
            &mut false,
        )
    }

    /// Steps 2–4 for a body just verified (`verified` is what it says;
    /// `digest` is the base64url SHA-256 of the body). `flushed` turns true
    /// with step 4's durable write (everything written before it is then
    /// durable too); with [`Durability::Deferred`] (an effect in the store),
    /// step 4 writes unflushed too.
    fn complete_verified(
        &self,
        mut record: CheqRecord,
        digest: &str,
        verified: &VerifiedDecision,
        durability: Durability,
        flushed: &mut bool,
    ) -> Result<DecisionAnswer, CheqRsError> {
        let decision = verified.decision();
        let decided = CheqState::Decided {
            decision,
            digest: digest.to_owned(),
        };
        match &record.state {
            CheqState::Done { decision, .. } => {
                return Ok(DecisionAnswer {
                    decision: *decision,
                })
            }
            // Not durable on its own: step 4's durable write covers this
            // (and, with the effect kept elsewhere, the nonce of step 1,
            // durable already, stands for the decision meanwhile).
            // With the effect in the store, the move to `decided` is not
            // written: the operation, idempotent per key, finds its effect
            // under that key if it ran before, so the record need not say
            // that it may have. On sled the final state below is written
            // before any of these writes can reach the disk, by the same
            // flush, and would replace it unseen; on PostgreSQL it would be
            // one more statement. A crash keeps the nonce, perhaps the
            // effect, and a pending record, which a re-delivery completes as
            // after step 1 or 3.
            CheqState::Pending if self.in_store() => {}
            CheqState::Pending => {
                let moved = self
                    .records
                    .advance_record(&record, &decided, Durability::Deferred)?;
                if let Some(answer) = settled_elsewhere(moved, digest)? {
                    return Ok(answer);
                }
                // Decided now, here or by a delivery of the same bytes.
                record.enter(decided.clone());
            }
            // Decided by these very bytes (the callers check the digest).
            CheqState::Decided { .. } if record.state == decided => {}
            CheqState::Decided { .. } => return Err(CheqRsError::Replayed),
        }
        let result = match decision {
            Decision::Accept => {
                let none = IndexMap::new();
                let collected = verified.claims().collected.as_ref().unwrap_or(&none);
                Some(
                    self.operation
                        .execute(&record.id, &record.action, collected)
                        .map_err(CheqRsError::Operation)?,
                )
            }
            Decision::Reject => None,
        };
        let done = CheqState::Done {
            decision,
            digest: digest.to_owned(),
            result,
        };
        let durability = if self.in_store() {
            durability
        } else {
            Durability::Now
        };
        let moved = self.records.advance_record(&record, &done, durability)?;
        *flushed = moved == Transition::Moved;
        Ok(settled_elsewhere(moved, digest)?.unwrap_or(DecisionAnswer { decision }))
    }
}

/// After the compare-and-set move of step 2 or 4: `None` to go on (it moved,
/// or another writer took step 2 for the same body); the answer another
/// writer reached for the same body; or `Replayed` when the record holds
/// another body's decision.
fn settled_elsewhere(
    moved: Transition,
    digest: &str,
) -> Result<Option<DecisionAnswer>, CheqRsError> {
    match moved {
        Transition::Moved => Ok(None),
        Transition::Missing => Err(CheqRsError::NotFound),
        Transition::Other(current) => match current.state {
            CheqState::Done {
                decision,
                digest: d,
                ..
            } if d == digest => Ok(Some(DecisionAnswer { decision })),
            CheqState::Decided { digest: d, .. } if d == digest => Ok(None),
            _ => Err(CheqRsError::Replayed),
        },
    }
}

/// One delivery of a decision, as [`CheqRs::decide`] took it.
struct Delivered<'a> {
    /// The exact bytes posted.
    body: &'a [u8],
    /// Their base64url SHA-256.
    digest: &'a str,
    /// The decision the URI's query named.
    decision: Decision,
    /// When it was taken.
    now: DateTime<Utc>,
    /// When its writes are made durable.
    durability: Durability,
}
