//! What the confirmation server keeps (PROTOCOL.md §2, §6, §8): started
//! confirmations, decision records with their delivery outbox, accounts,
//! sessions and limiter state. Each is a trait, so that a SQL database can
//! implement it with the same guarantees as the embedded sled backend
//! ([`super::sled_cs`]):
//!
//! - [`DecisionRecords::claim`] is a compare-and-set: at most one record per
//!   [`RecordKey`] (RS origin and nonce, §6), durable before it returns;
//! - [`DecisionRecords::lease_due`] hands a due delivery to one worker at a
//!   time, by moving its next try forward (a lease): a worker that dies leaves
//!   the decision to the next one once the lease runs out;
//! - [`Limits::update`] is an atomic read-modify-write of one key;
//! - [`DecisionRecords::collect_decided_before`] drops old history: only
//!   records whose delivery is final and whose document is no longer sealed,
//!   so that nothing still to deliver and no sealed value is lost; the CS
//!   asks for it only once their CHEQs have expired. The key stays (§6: the
//!   CS never countersigns a nonce twice, even an RS's reused one).

use super::{Durability, StoreError};
use cheq_core::cheq::{Channel, Decision};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

// ---- started confirmations ----

/// A confirmation the user started (§2): which resource URI, and the document
/// last fetched for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfirmationEntry {
    pub resource_uri: String,
    /// When it was started (unix seconds); old entries are collected.
    #[serde(default)]
    pub created: i64,
    /// The resource-signed document as last fetched (it was verified then).
    /// No longer written (the CS fetches it again when its cache lost the
    /// verified CHEQ); read when an entry stored earlier has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<String>,
}

/// Started confirmations, by id (the id is derived from the resource URI).
pub trait ConfirmationEntries: Send + Sync {
    /// Stores `entry` under `id` unless an entry is there already.
    fn start(&self, id: &str, entry: &ConfirmationEntry) -> Result<(), StoreError>;
    /// The entry under `id`.
    fn get(&self, id: &str) -> Result<Option<ConfirmationEntry>, StoreError>;
    /// Rewrites the entry under `id` (not flushed: it can be fetched again).
    fn put(&self, id: &str, entry: &ConfirmationEntry) -> Result<(), StoreError>;
    /// Removes entries created before `cutoff` (unix seconds); returns how many.
    fn collect_older_than(&self, cutoff: i64) -> Result<usize, StoreError>;
    /// Up to `limit` entries with their ids, in the order of the ids, from
    /// the first after `after` (from the first of all with `None`): every
    /// entry, a page at a time (`store export`).
    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, ConfirmationEntry)>, StoreError>;
}

// ---- decisions and their delivery ----

/// What identifies a decision (§6): the RS's origin and the CHEQ's nonce, so
/// that one RS can never block or answer for another's CHEQ.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RecordKey {
    pub origin: String,
    pub nonce: String,
}

impl RecordKey {
    pub fn new(origin: &str, nonce: &str) -> Self {
        RecordKey {
            origin: origin.to_owned(),
            nonce: nonce.to_owned(),
        }
    }

    /// A short, URL-safe id for the key (base64url SHA-256 of origin, NUL,
    /// nonce): the name of the evidence link and of a sealed-document key.
    pub fn id(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.origin.as_bytes());
        h.update([0]);
        h.update(self.nonce.as_bytes());
        cheq_core::sign::b64::encode(h.finalize())
    }
}

/// Why the RS did not take a decision, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "by")]
pub enum Refusal {
    /// The RS answered with this HTTP status and `error` code (400, 409, …).
    ResourceServer {
        status: u16,
        error: String,
        /// The RS's own words (`error_description`), bounded; never shown as
        /// the CS's words.
        description: String,
    },
    /// The RS is no longer registered here: nothing was sent.
    Unregistered,
    /// The sealed document could not be opened: nothing was sent.
    Unsealable,
}

/// Where a decision stands with the resource server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum Delivery {
    /// Not yet acknowledged; retried until the CHEQ expires.
    Pending {
        attempts: u32,
        next_try: i64,
        last_error: Option<String>,
    },
    /// The RS recorded the decision (§6 `200`).
    Delivered { decision: Decision, at: i64 },
    /// The RS refused it, or it could not be sent; not retried.
    Refused { refusal: Refusal, at: i64 },
    /// The CHEQ expired before the RS could be reached (or the RS said 410).
    Expired { at: i64 },
}

impl Delivery {
    pub fn is_pending(&self) -> bool {
        matches!(self, Delivery::Pending { .. })
    }
}

/// One countersigned decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    pub nonce: String,
    pub user: String,
    pub resource_uri: String,
    pub resource_origin: String,
    pub operation: String,
    pub operation_name: String,
    pub decision: Decision,
    pub channel: Channel,
    pub decided_at: i64,
    pub expires: i64,
    /// The two-signature document, exactly as delivered; sealed when
    /// `sealed`; redacted evidence once a sealed document's delivery is final.
    pub document: String,
    pub delivery: Delivery,
    #[serde(default)]
    pub sealed: bool,
    /// Keyed digest (HMAC-SHA256, base64url) of each value the user typed (§8).
    #[serde(default)]
    pub collected_hmac: IndexMap<String, String>,
    /// The SHA-256 (base64url) of the document's exact bytes as delivered:
    /// its entry in the transparency log (§15), queued with the claim.
    /// `None` where the log is off, and in records made before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_digest: Option<String>,
}

impl DecisionRecord {
    /// The record's transparency-log entry, if it has one.
    pub fn log_entry(&self) -> Option<Vec<u8>> {
        self.log_digest
            .as_ref()
            .map(|d| cheq_core::tlog::Entry::Decision { digest: d.clone() }.to_bytes())
    }

    /// The record's key (§6).
    pub fn key(&self) -> RecordKey {
        RecordKey::new(&self.resource_origin, &self.nonce)
    }
}

/// A record of the delivery outbox as read for a lease: the record with its
/// next try moved on to `until`, if it is readable, pending and due by
/// `due_by` (`None`: the backend read due ones only); `None` otherwise.
/// An unreadable record is logged and passed over: it must not stop every
/// other delivery.
pub(crate) fn leased(
    read: Result<DecisionRecord, StoreError>,
    due_by: Option<i64>,
    until: i64,
) -> Option<DecisionRecord> {
    let mut record = match read {
        Ok(r) => r,
        Err(e) => {
            log::error!("delivery outbox: skipping an unreadable record: {e}");
            return None;
        }
    };
    let Delivery::Pending { next_try, .. } = &mut record.delivery else {
        return None;
    };
    if due_by.is_some_and(|now| *next_try > now) {
        return None;
    }
    *next_try = until;
    Some(record)
}

/// What [`DecisionRecords::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The record is new and durable.
    Fresh,
    /// A record for this key already existed; nothing was written.
    Existing(Box<DecisionRecord>),
    /// A record for this key existed and was collected as old history
    /// ([`DecisionRecords::collect_decided_before`]); nothing was written:
    /// the key is never claimed again (§6).
    Collected,
}

/// Countersigned decisions and their delivery outbox.
pub trait DecisionRecords: Send + Sync {
    /// Stores `record` if its key has none yet (compare-and-set), with what it
    /// takes to find it by resource URI, by user and as a pending delivery;
    /// durable before it returns [`Claim::Fresh`].
    fn claim(&self, record: &DecisionRecord) -> Result<Claim, StoreError>;
    /// [`claim`](Self::claim), made durable as `durability` says: with
    /// [`Durability::Deferred`] the record need not be on disk when this
    /// returns; it is once a later write is made durable (the backend's
    /// [`AsyncFlush`](super::AsyncFlush)). The default writes durably, as
    /// `claim`, either way.
    fn claim_with(
        &self,
        record: &DecisionRecord,
        durability: Durability,
    ) -> Result<Claim, StoreError> {
        let _ = durability;
        self.claim(record)
    }
    /// The record under `key`.
    fn get(&self, key: &RecordKey) -> Result<Option<DecisionRecord>, StoreError>;
    /// The record of the decision on `resource_uri`, if any.
    fn by_resource(&self, resource_uri: &str) -> Result<Option<DecisionRecord>, StoreError>;
    /// The user's record whose [`RecordKey::id`] is `id`.
    fn by_id_for_user(&self, user: &str, id: &str) -> Result<Option<DecisionRecord>, StoreError>;
    /// Rewrites an existing record (its delivery state), made durable as
    /// `durability` says: [`Durability::Now`], on disk before this returns;
    /// otherwise a crash may lose it.
    fn update(&self, record: &DecisionRecord, durability: Durability) -> Result<(), StoreError>;
    /// Up to `limit` pending deliveries due at `now`, each leased to the
    /// caller for `lease_secs` (its next try moved to `now + lease_secs`), so
    /// that no other worker takes it meanwhile.
    fn lease_due(
        &self,
        now: i64,
        lease_secs: i64,
        limit: usize,
    ) -> Result<Vec<DecisionRecord>, StoreError>;
    /// How many deliveries are pending, and the decision time of the oldest.
    fn pending_summary(&self) -> Result<(usize, Option<i64>), StoreError>;
    /// The keys of records still holding a sealed document.
    fn sealed(&self) -> Result<Vec<RecordKey>, StoreError>;
    /// A user's decisions, newest first, at most `limit`.
    fn for_user(&self, user: &str, limit: usize) -> Result<Vec<DecisionRecord>, StoreError>;
    /// Removes the records decided before `cutoff` (unix seconds) whose
    /// delivery is final and whose document is not sealed, with everything
    /// that finds them (by resource URI, by user) and their documents. Each
    /// leaves its key behind (its id and decision time), so that a claim of
    /// it is [`Claim::Collected`]. Returns how many records went.
    fn collect_decided_before(&self, cutoff: i64) -> Result<usize, StoreError>;
    /// Up to `limit` records with their ids ([`RecordKey::id`]), each with
    /// its document and delivery as they are, in the order of the ids, from
    /// the first after `after` (from the first of all with `None`): every
    /// record, a page at a time (`store export`).
    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, DecisionRecord)>, StoreError>;
    /// The same for the keys collected as old history: each id with its
    /// decision time.
    fn collected_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, i64)>, StoreError>;
    /// Puts back a key collected as old history elsewhere (`store import`):
    /// from then on a claim of it is [`Claim::Collected`]. Durable once a
    /// later durable write is (as a deferred [`claim_with`](Self::claim_with)).
    fn restore_collected(&self, id: &str, decided_at: i64) -> Result<(), StoreError>;
}

// ---- accounts ----

/// An account at the CS: a local one (a password), or one that an identity
/// provider's login stands for (`external`, no password). Its `Debug` shows
/// no hash.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    pub username: String,
    /// A CHEQ `subject` this account may decide for: for an external
    /// account, only an e-mail the provider said it verified.
    #[serde(default)]
    pub email: Option<String>,
    /// Empty for an external account (nothing verifies against it).
    pub password_hash: String,
    #[serde(default)]
    pub pin_hash: Option<String>,
    /// Who this account is at an OpenID Connect provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalId>,
    /// The WebAuthn user handle of its passkeys: random (base64url), so
    /// that an authenticator holds no name of the user; given at the first
    /// passkey and kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_handle: Option<String>,
    /// Its passkeys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passkeys: Vec<Passkey>,
}

/// A passkey (a WebAuthn credential) of an account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Passkey {
    /// The credential id, base64url.
    pub id: String,
    /// Its public key as a JWK: EC P-256, OKP Ed25519 or RSA.
    pub key: serde_json::Map<String, serde_json::Value>,
    /// The name the user gave it.
    pub name: String,
    /// When it was added (unix seconds).
    pub added: i64,
    /// When it last signed (unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used: Option<i64>,
    /// The authenticator's signature counter last seen (0: it keeps none).
    #[serde(default)]
    pub sign_count: u32,
}

/// An identity at an OpenID Connect provider: the issuer and its `sub`
/// (OpenID Connect Core §2: together they identify the user).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalId {
    pub issuer: String,
    pub subject: String,
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("username", &self.username)
            .field("email", &self.email)
            .field("external", &self.external)
            .field("passkeys", &self.passkeys.len())
            .finish_non_exhaustive()
    }
}

/// Why an account could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum AccountPutError {
    #[error("user {0:?} already exists")]
    Exists(String),
    #[error("{0:?} already names another account (as its user name or e-mail)")]
    Ambiguous(String),
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// Local accounts, by user name. A CHEQ's `subject` must name one account
/// only: no user name may equal another account's e-mail, and no e-mail may
/// be taken twice (compared without regard to ASCII case).
pub trait Accounts: Send + Sync {
    /// Adds `account`; with `replace`, an existing one of that name is
    /// overwritten. Durable before it returns.
    fn put(&self, account: &Account, replace: bool) -> Result<(), AccountPutError>;
    /// The account named `username`.
    fn get(&self, username: &str) -> Result<Option<Account>, StoreError>;
    /// The account whose passkeys have the user handle `handle`.
    fn by_handle(&self, handle: &str) -> Result<Option<Account>, StoreError>;
    /// Up to `limit` accounts, in the order of their names, from the first
    /// after `after` (from the first of all with `None`): every account, a
    /// page at a time (`store export`).
    fn list_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<Account>, StoreError>;
}

// ---- sessions ----

/// Someone the CS has authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// `sub` in the countersignature: the local user name.
    pub sub: String,
    /// Other names a CHEQ `subject` may use for this user (a verified e-mail).
    pub also_known_as: Vec<String>,
    /// When they authenticated (unix seconds), as the CS saw it or the
    /// identity provider reported it; `None` when the provider did not say
    /// (never made up: such a sign-in meets no freshness rule, and the
    /// countersignature states [`cheq_core::sign::AUTH_TIME_UNKNOWN`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_time: Option<i64>,
    /// How (RFC 8176).
    pub amr: Vec<String>,
    /// The identity provider (its configured name) they signed in with;
    /// `None` for a local account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The provider's ID token of that sign-in, for its end-session
    /// endpoint (`id_token_hint`) at logout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_token: Option<String>,
    /// For a local account: a digest of the credential (password or PIN
    /// hash) this identity signed in with. A session or token holding it is
    /// honoured only while it is still the account's credential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
}

impl Identity {
    /// How pages name the user: the account, or for a provider's user their
    /// e-mail (else account) and the provider.
    pub fn display_name(&self) -> String {
        match (&self.provider, self.also_known_as.first()) {
            (Some(p), Some(email)) => format!("{email} (via {p})"),
            (Some(p), None) => format!("{} (via {p})", self.sub),
            (None, _) => self.sub.clone(),
        }
    }

    /// Is `subject` (a CHEQ's) this user?
    pub fn is(&self, subject: &str) -> bool {
        self.sub == subject
            || self
                .also_known_as
                .iter()
                .any(|a| a.eq_ignore_ascii_case(subject))
    }
}

/// What a session holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub identity: Option<Identity>,
    pub expires: i64,
}

/// Server-side sessions, keyed by the SHA-256 of the cookie value (a copy of
/// the store does not give live cookies).
pub trait Sessions: Send + Sync {
    fn put(&self, key: &[u8; 32], session: &Session) -> Result<(), StoreError>;
    fn get(&self, key: &[u8; 32]) -> Result<Option<Session>, StoreError>;
    fn remove(&self, key: &[u8; 32]) -> Result<(), StoreError>;
    /// Removes sessions that expired at `now`; returns how many.
    fn collect_expired(&self, now: i64) -> Result<usize, StoreError>;
}

// ---- limiter state ----

pub use crate::throttle::LimitState;

/// Limiter state by key (a user, an address, a gateway), kept in the store so
/// that it survives a restart and can be shared by several instances.
pub trait Limits: Send + Sync {
    /// The state of `key`.
    fn get(&self, key: &str) -> Result<Option<LimitState>, StoreError>;
    /// Atomically replaces the state of `key` by `f(old)` (`None` removes it);
    /// returns the new state.
    fn update(
        &self,
        key: &str,
        f: &mut dyn FnMut(Option<LimitState>) -> Option<LimitState>,
    ) -> Result<Option<LimitState>, StoreError>;
    /// Removes states last touched before `cutoff` and not locked at it.
    fn collect(&self, cutoff: i64) -> Result<usize, StoreError>;
}

/// Everything the CS keeps, from one backend.
#[derive(Clone)]
pub struct CsStore {
    pub entries: std::sync::Arc<dyn ConfirmationEntries>,
    pub records: std::sync::Arc<dyn DecisionRecords>,
    pub accounts: std::sync::Arc<dyn Accounts>,
    pub sessions: std::sync::Arc<dyn Sessions>,
    pub limits: std::sync::Arc<dyn Limits>,
    /// The transparency log (§15).
    pub log: std::sync::Arc<dyn super::tlog::LogStore>,
    /// The RSes registered without a restart, and initial access tokens
    /// (§16.3).
    pub registrations: std::sync::Arc<dyn super::registrations::Registrations>,
    /// Whether the backend answers now.
    pub readiness: std::sync::Arc<dyn super::Readiness>,
    /// Flushes awaited without a thread (sled); `None` where a durable
    /// write waits on the backend itself (PostgreSQL).
    pub flusher: Option<super::AsyncFlush>,
}

impl std::fmt::Debug for CsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsStore").finish_non_exhaustive()
    }
}
