//! What the reference resource server keeps (PROTOCOL.md §1, §3, §6, §7,
//! §17): its CHEQ records, the nonces it took decisions for, the demo
//! tools' execution log, and each user's CS and rules. Each is a trait, so
//! that a SQL database can implement it with the same guarantees as the
//! embedded sled backend ([`super::sled_rs`]):
//!
//! - [`CheqRecords::create`] is an "insert if absent" of a minted record and
//!   its result-id index (the result id is unique as well), durable before it
//!   returns;
//! - [`CheqRecords::advance`] moves a record from one [`CheqState`] to the
//!   next only if it is still in the state the caller read (compare-and-set),
//!   so that two writers can never both take the same step; the caller says
//!   whether the step must be durable before it returns;
//! - [`CheqRecords::collect_expired`] drops the records whose CHEQ expired
//!   before a cutoff;
//! - [`Executions::record`] stores an operation's result under its
//!   idempotency key if the key is absent: that one atomic write *is* the
//!   effect (§6: the operation runs at most once);
//! - the nonces of §6 are the crate's [`NonceStore`];
//! - [`UsedAssertions::first_use`] is an "insert if absent" of a client
//!   assertion's `jti` (§16.4), durable before it returns, so that an
//!   assertion is taken once whichever instance it reaches;
//! - [`Settings::apply`] writes a user's new settings and the change's
//!   result in the execution log in one atomic write, only when the key is
//!   absent and the user's generation is the one the change was asked
//!   against (§17: a change is applied once, and never over another).
//!
//! The steps a decision goes through, and why each write is durable or not,
//! are in `resource::cheq_rs`.

use super::{Durability, NonceStore, StoreError};
use cheq_core::cheq::Decision;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

// ---- CHEQ records ----

/// Where a confirmation stands (the steps of a decision, §6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum CheqState {
    /// Minted and served (§3); no decision taken yet.
    Pending,
    /// A decision is recorded (its nonce too), the operation may not have run.
    Decided {
        decision: Decision,
        /// base64url SHA-256 of the exact decision document bytes.
        digest: String,
    },
    /// The decision is complete; the result is what the agent reads (§7).
    Done {
        decision: Decision,
        /// base64url SHA-256 of the exact decision document bytes.
        digest: String,
        /// The operation's result (`None` for a rejection).
        #[serde(default)]
        result: Option<Value>,
    },
}

impl CheqState {
    /// The decision taken, once there is one.
    pub fn decision(&self) -> Option<Decision> {
        match self {
            CheqState::Pending => None,
            CheqState::Decided { decision, .. } | CheqState::Done { decision, .. } => {
                Some(*decision)
            }
        }
    }

    /// The digest of the decision document, once there is one.
    pub fn digest(&self) -> Option<&str> {
        match self {
            CheqState::Pending => None,
            CheqState::Decided { digest, .. } | CheqState::Done { digest, .. } => Some(digest),
        }
    }
}

/// One confirmation the RS minted (§1, §4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheqRecord {
    /// The confirmation id (last segment of the resource URI), 128 random bits.
    pub id: String,
    /// The result id (last segment of the result URI), 128 random bits.
    pub result_id: String,
    pub resource_uri: String,
    pub nonce: String,
    /// The CHEQ's `expires`, unix seconds.
    pub expires: i64,
    /// The resource-signed document (§5), as served (§3); empty once
    /// decided (a decided CHEQ is no longer served: §3 answers `410`).
    pub document: String,
    /// What to run when accepted (opaque to the store); `null` once done.
    pub action: Value,
    #[serde(flatten)]
    pub state: CheqState,
}

impl CheqRecord {
    /// Moves the record to `state`. Once decided, the document is no
    /// longer needed (a decided CHEQ is not served again: §3 answers `410`;
    /// a re-delivery is compared by its digest); once [`CheqState::Done`],
    /// neither is the action (the operation does not run again). Both are
    /// dropped as soon as they are not needed: a decided confirmation keeps
    /// only what answers the agent and refuses replays (disk per
    /// decision).
    /// The record without its document: what a backend stores beside the
    /// document packed ([`super::packed`]).
    pub fn without_document(&self) -> CheqRecord {
        CheqRecord {
            id: self.id.clone(),
            result_id: self.result_id.clone(),
            resource_uri: self.resource_uri.clone(),
            nonce: self.nonce.clone(),
            expires: self.expires,
            document: String::new(),
            action: self.action.clone(),
            state: self.state.clone(),
        }
    }

    /// Puts back the document a backend stored packed apart from the
    /// record; says why when it cannot (the backend reports the record as
    /// corrupt).
    pub fn attach_packed(&mut self, packed: &[u8]) -> Result<(), String> {
        if !self.document.is_empty() {
            return Err("a record with two documents".into());
        }
        self.document = super::packed::unpack(packed).map_err(|e| format!("its document: {e}"))?;
        Ok(())
    }

    pub fn enter(&mut self, state: CheqState) {
        if !matches!(state, CheqState::Pending) {
            self.document = String::new();
        }
        if matches!(state, CheqState::Done { .. }) {
            self.action = Value::Null;
        }
        self.state = state;
    }
}

/// What [`CheqRecords::advance`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// The record was in the expected state and is now in the new one.
    Moved,
    /// The record is in another state (here, as it is now); nothing was written.
    Other(Box<CheqRecord>),
    /// There is no record with that id.
    Missing,
}

/// One compare-and-set move of a CHEQ record ([`CheqRecords::advance`]):
/// the record `id`, from the state `from` it must be in now, to `to`.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    pub id: &'a str,
    pub from: &'a CheqState,
    pub to: &'a CheqState,
}

impl<'a> Step<'a> {
    /// The move of `record`, as the caller read it, from its state now to `to`.
    pub fn of(record: &'a CheqRecord, to: &'a CheqState) -> Self {
        Step {
            id: &record.id,
            from: &record.state,
            to,
        }
    }
}

/// The RS's CHEQ records, by confirmation id, with an index by result id.
pub trait CheqRecords: Send + Sync {
    /// Stores a newly minted `record` and its result-id index entry, unless a
    /// record already has its id or its result id (insert if absent; then
    /// nothing is stored and `false` is returned). Durable before it returns
    /// `true`.
    fn create(&self, record: &CheqRecord) -> Result<bool, StoreError>;
    /// [`create`](Self::create), made durable as `durability` says: with
    /// [`Durability::Deferred`] the record need not be on disk when this
    /// returns; it is once a later write is made durable (the backend's
    /// [`AsyncFlush`](super::AsyncFlush)). The default writes durably, as
    /// `create`, either way.
    fn create_with(&self, record: &CheqRecord, durability: Durability) -> Result<bool, StoreError> {
        let _ = durability;
        self.create(record)
    }
    /// The record with confirmation id `id`.
    fn get(&self, id: &str) -> Result<Option<CheqRecord>, StoreError>;
    /// The record whose result id is `result_id` (§7).
    fn by_result(&self, result_id: &str) -> Result<Option<CheqRecord>, StoreError>;
    /// Moves the record `step.id` from state `step.from` to state
    /// `step.to`, only if it is in `from` now (compare-and-set; every other
    /// member is kept, except what [`CheqRecord::enter`] drops once done).
    /// With [`Durability::Now`] the move is on disk before this returns;
    /// otherwise a crash may lose it (and a later durable write of the same
    /// backend covers it).
    fn advance(&self, step: Step<'_>, durability: Durability) -> Result<Transition, StoreError>;
    /// [`advance`](Self::advance) for `record` as the caller read it, in its
    /// state now (`record.state` is `from`): the same compare-and-set, but a
    /// backend may write the record moved on without reading it again when
    /// the stored one is still the one given, and reads only when it is not
    /// (PostgreSQL: one statement instead of two).
    fn advance_record(
        &self,
        record: &CheqRecord,
        to: &CheqState,
        durability: Durability,
    ) -> Result<Transition, StoreError> {
        self.advance(Step::of(record, to), durability)
    }
    /// Removes the records whose CHEQ expired before `cutoff` (unix seconds),
    /// with their result-id index entries; returns how many records went.
    fn collect_expired(&self, cutoff: i64) -> Result<usize, StoreError>;
    /// Up to `limit` records, each as it is, in the order of their ids,
    /// from the first after `after` (from the first of all with `None`):
    /// every record, a page at a time (`store export`). The default (a
    /// store that only wraps another, in tests) says it cannot.
    fn list_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<CheqRecord>, StoreError> {
        let _ = (after, limit);
        Err(super::cannot_list())
    }
}

// ---- the demo tools' execution log ----

/// What [`Executions::record`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Execution {
    /// This call stored the result: the operation's effect happened now.
    Fresh,
    /// A result was stored under the key before (here); nothing was written.
    Existing(Value),
}

/// The idempotent execution log of the demo operations: one result per
/// idempotency key (the confirmation id, or a random key for a call that
/// needs no confirmation).
pub trait Executions: Send + Sync {
    /// The result stored under `key`, if the operation ran.
    fn get(&self, key: &str) -> Result<Option<Value>, StoreError>;
    /// Stores `result` under `key` if the key is absent, in one atomic write
    /// that stands for the effect (compare-and-set). Whatever the outcome, the
    /// stored result is durable before this returns.
    fn record(&self, key: &str, result: &Value) -> Result<Execution, StoreError> {
        self.record_with(key, result, Durability::Now)
    }
    /// [`record`](Self::record), made durable as `durability` says: with
    /// [`Durability::Deferred`] the write need not be on disk when this
    /// returns; it is once a later write to the same database is made
    /// durable, and a crash before that loses it with everything written
    /// after it (as [`NonceStore::record_with`](super::NonceStore::record_with)).
    /// A backend that commits every write durably anyway (PostgreSQL) does
    /// so either way.
    fn record_with(
        &self,
        key: &str,
        result: &Value,
        durability: Durability,
    ) -> Result<Execution, StoreError>;
    /// Up to `limit` keys with their results, in the order of the keys,
    /// from the first after `after` (from the first of all with `None`):
    /// the whole log, a page at a time (`store export`).
    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Value)>, StoreError>;
}

// ---- client assertions taken (§16.4) ----

/// The client assertions a CS authenticated with at the token endpoint
/// (§16.4), by issuer and `jti`: each is taken once, on every instance,
/// until it expires (after which the assertion itself is refused as
/// expired, so its record can go).
pub trait UsedAssertions: Send + Sync {
    /// Records the use of the assertion `jti` of the CS `issuer`, kept
    /// until `expires_at` (unix seconds): `true` when this is its first
    /// use, `false` when it was recorded before (insert if absent). Durable
    /// before it returns `true`.
    fn first_use(&self, issuer: &str, jti: &str, expires_at: i64) -> Result<bool, StoreError>;
    /// Removes the records that expired before `now` (unix seconds);
    /// returns how many went.
    fn collect_expired(&self, now: i64) -> Result<usize, StoreError>;
}

/// The key an assertion's use is kept under: the SHA-256 of the issuer, a
/// zero byte and the `jti` (a fixed length whatever theirs; no origin holds
/// a zero byte, so two pairs never share the text hashed).
pub fn assertion_key(issuer: &str, jti: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(issuer.as_bytes());
    h.update([0u8]);
    h.update(jti.as_bytes());
    h.finalize().into()
}

// ---- each user's confirmation server and rules (§17) ----

/// What one user chose at the RS (§17): the confirmation server they use
/// and their rules, as the RS domain writes them (the store keeps the rules
/// as the JSON it is given, as it keeps a record's `action`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserSettings {
    /// The issuer (origin) of the CS the user chose; `None`: the RS's
    /// default CS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cs: Option<String>,
    /// The user's rules (the RS domain's JSON; an empty array for none).
    pub rules: Value,
    /// Moves by one with each change applied; a user never changed is at
    /// generation 0 (and has no stored settings).
    pub generation: u64,
}

/// What [`Settings::apply`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// The settings and the result were written now.
    Fresh,
    /// A result was stored under the key before: that result; nothing was
    /// written.
    Existing(Value),
    /// The user's stored generation is not the one expected (another
    /// change was applied since): nothing was written; the generation
    /// stored now.
    Stale(u64),
}

/// Each user's choice of CS and rules (§17), kept per CHEQ `subject`.
///
/// A change is applied as the operation of a confirmed CHEQ, so exactly
/// once (§6): [`Settings::apply`] writes the new settings and the
/// operation's result in the execution log ([`Executions`]) in one atomic
/// write, so that a re-delivery after a crash finds the result and writes
/// nothing, and a change asked for against settings that have moved since
/// changes nothing.
pub trait Settings: Send + Sync {
    /// The settings of `subject`, if it ever changed any.
    fn get(&self, subject: &str) -> Result<Option<UserSettings>, StoreError>;
    /// In one atomic write: when `key` is absent from the execution log
    /// and the stored generation of `subject` is `expected` (0 for a user
    /// with none stored), stores `settings` at generation `expected + 1`
    /// (the `generation` given is ignored), `result` under `key`, and the
    /// chosen CS (if any) among [`hosts`](Self::hosts). With `key` present:
    /// [`Applied::Existing`] with its result; with another generation:
    /// [`Applied::Stale`]. Durable as `durability` says (as
    /// [`Executions::record_with`]).
    fn apply(
        &self,
        subject: &str,
        key: &str,
        expected: u64,
        settings: &UserSettings,
        result: &Value,
        durability: Durability,
    ) -> Result<Applied, StoreError>;
    /// The issuers of every CS a user ever chose, in order: kept when the
    /// user moves on, since a pending CHEQ may still name it.
    fn hosts(&self) -> Result<Vec<String>, StoreError>;
    /// Up to `limit` subjects with their settings, in the order of the
    /// subjects, from the first after `after` (`store export`).
    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, UserSettings)>, StoreError>;
    /// Writes `settings` (generation included) for `subject` as they are,
    /// and its CS among the hosts (`store import`); durable before it
    /// returns.
    fn restore(&self, subject: &str, settings: &UserSettings) -> Result<(), StoreError>;
    /// Puts `issuer` among the [`hosts`](Self::hosts), after those there,
    /// unless it is there already (then nothing changes): `store import`,
    /// for a CS that no user has now and a pending CHEQ may still name.
    /// Durable before it returns. The default (a store that only wraps
    /// another, in tests) says it cannot.
    fn restore_host(&self, issuer: &str) -> Result<(), StoreError> {
        let _ = issuer;
        Err(StoreError::Backend {
            op: "restore host",
            message: "this store cannot restore the hosts".into(),
        })
    }
}

// ---- the bundle ----

/// Everything the RS keeps, from one backend, in one database: a durable
/// write through any of these stores makes every earlier write through the
/// others durable too (sled: one database, one log, flushed as a whole;
/// PostgreSQL: a write not asked to be durable commits asynchronously, and
/// the next synchronous commit flushes the write-ahead log past it).
#[derive(Clone)]
pub struct RsStore {
    /// The nonces of decided CHEQs (§6).
    pub nonces: Arc<dyn NonceStore>,
    /// The CHEQ records and their result index.
    pub records: Arc<dyn CheqRecords>,
    /// The demo tools' execution log.
    pub executions: Arc<dyn Executions>,
    /// The client assertions taken at the token endpoint (§16.4).
    pub assertions: Arc<dyn UsedAssertions>,
    /// Each user's CS and rules (§17).
    pub settings: Arc<dyn Settings>,
    /// Whether the backend answers now.
    pub readiness: Arc<dyn super::Readiness>,
    /// Flushes awaited without a thread (sled); `None` where a durable
    /// write waits on the backend itself (PostgreSQL).
    pub flusher: Option<super::AsyncFlush>,
    /// How many records it minted, still pending, the RS keeps in memory to
    /// spare the store the look-ups of the CS's fetch and of the decision:
    /// each is a round trip to a database server (PostgreSQL), while sled's
    /// own cache answers at once (0 there).
    pub recent_records: usize,
}

impl std::fmt::Debug for RsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RsStore").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_keep_the_stored_format() {
        // The format the RS wrote before the states were typed.
        let old = json!({
            "id": "i", "result_id": "r", "resource_uri": "u", "nonce": "n",
            "expires": 5, "document": "d", "action": null,
            "state": "done", "decision": "accept", "digest": "g", "result": {"x": 1}
        });
        let r: CheqRecord = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(r.state.decision(), Some(Decision::Accept));
        assert_eq!(r.state.digest(), Some("g"));
        assert_eq!(serde_json::to_value(&r).unwrap(), old);
        let pending = json!({
            "id": "i", "result_id": "r", "resource_uri": "u", "nonce": "n",
            "expires": 5, "document": "d", "action": null, "state": "pending"
        });
        let r: CheqRecord = serde_json::from_value(pending).unwrap();
        assert_eq!(r.state, CheqState::Pending);
        assert_eq!(r.state.decision(), None);
        let bad = json!({
            "id": "i", "result_id": "r", "resource_uri": "u", "nonce": "n",
            "expires": 5, "document": "d", "action": null,
            "state": "decided", "decision": "maybe", "digest": "g"
        });
        assert!(serde_json::from_value::<CheqRecord>(bad).is_err());
    }
}
