//! The resource servers that registered themselves at a CS (PROTOCOL.md
//! §16.3), and the initial access tokens its operator issued for them.
//!
//! A record keeps nothing of an RS but its origin, name, prefix and the two
//! endpoints, and whether the operator blocked it. Every write moves the
//! [`Registrations::generation`], so that each instance of the CS notices a
//! change by reading one number and reloads the list only then.
//!
//! The contract, on every backend:
//! - [`Registrations::register`] is atomic: it creates, or refreshes an
//!   active record (keeping when it was first registered), and never
//!   touches a blocked one ([`RegisterOutcome::Blocked`]);
//! - [`Registrations::block`] of an origin never registered records it as
//!   blocked, so that its registration is refused from then on;
//! - [`Registrations::take_access_token`] succeeds once per token, across
//!   every instance;
//! - [`Registrations::restore`] writes a record exactly as given (what an
//!   import of a moved store does), into an origin with none only;
//! - every write is durable before it returns.

use super::StoreError;
use serde::{Deserialize, Serialize};

/// Whether the CS serves a registered RS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegistrationStatus {
    Active,
    Blocked,
}

impl RegistrationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RegistrationStatus::Active => "active",
            RegistrationStatus::Blocked => "blocked",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(RegistrationStatus::Active),
            "blocked" => Some(RegistrationStatus::Blocked),
            _ => None,
        }
    }
}

/// One registered RS, as read from its discovery document (§16.2). A
/// record made by blocking an origin never registered has empty endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisteredRecord {
    /// `scheme://host[:port]`, the key.
    pub origin: String,
    pub name: String,
    pub resource_prefix: String,
    pub jwks_uri: String,
    pub token_endpoint: String,
    pub status: RegistrationStatus,
    /// When it was first registered (unix seconds).
    pub registered_at: i64,
    /// When it was last registered or its status changed.
    pub updated_at: i64,
}

impl RegisteredRecord {
    /// A blocked origin that never registered.
    pub fn is_placeholder(&self) -> bool {
        self.token_endpoint.is_empty()
    }
}

/// What [`Registrations::register`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterOutcome {
    /// A new record (`201`).
    Created,
    /// An active record refreshed (`200`).
    Refreshed,
    /// The origin is blocked: nothing written (`403`).
    Blocked,
}

/// The registered RSes and the initial access tokens.
pub trait Registrations: Send + Sync {
    /// Records `record` (its `status` and `registered_at` are the store's
    /// to keep: a new record is active and registered now).
    fn register(&self, record: &RegisteredRecord) -> Result<RegisterOutcome, StoreError>;

    /// The record of `origin`.
    fn get(&self, origin: &str) -> Result<Option<RegisteredRecord>, StoreError>;

    /// Every record, in the order of their origins.
    fn list(&self) -> Result<Vec<RegisteredRecord>, StoreError>;

    /// Blocks `origin` (recording it when it was never registered);
    /// `true` when its status changed.
    fn block(&self, origin: &str, now: i64) -> Result<bool, StoreError>;

    /// Serves a blocked `origin` again (a placeholder is removed); `true`
    /// when it was blocked.
    fn unblock(&self, origin: &str, now: i64) -> Result<bool, StoreError>;

    /// Forgets `origin`; `true` when it was recorded.
    fn remove(&self, origin: &str) -> Result<bool, StoreError>;

    /// A number that changes with every write to the records.
    fn generation(&self) -> Result<i64, StoreError>;

    /// Writes `record` exactly as given, its status and times kept (a
    /// moved store's record, `cheq store import`), and moves the
    /// generation; `false`, writing nothing, when `record.origin` has a
    /// record already.
    fn restore(&self, record: &RegisteredRecord) -> Result<bool, StoreError>;

    /// Keeps an initial access token, by its digest (never the token), and
    /// when it was issued; `false` when that digest was kept already (its
    /// time is left as it was).
    fn add_access_token(&self, digest: &str, created: i64) -> Result<bool, StoreError>;

    /// Every initial access token not used yet: its digest and when it was
    /// issued, in the order of the digests.
    fn access_tokens(&self) -> Result<Vec<(String, i64)>, StoreError>;

    /// Uses the token of `digest` up: `true` once, for the first caller.
    fn take_access_token(&self, digest: &str) -> Result<bool, StoreError>;
}
