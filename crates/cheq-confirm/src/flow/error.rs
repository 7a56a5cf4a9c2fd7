//! The confirmation flow's one error type. It says what went wrong in the
//! domain's words; each front end turns it into a status through the one
//! table of `confirm::status`, and into words for a person or a program.

use crate::auth::AuthError;
use crate::registry::RegistryError;
use cheq_core::cheq::CountersignableError;
use cheq_store::StoreError;
use cheq_support::keyring::KeyRingError;
use std::sync::Arc;

/// What broke inside the CS (500): never the request's doing, and never
/// shown to a person or a program beyond "internal error" (the log has it).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Internal {
    #[error("{0}")]
    Store(Arc<StoreError>),
    #[error("{0}")]
    Auth(Arc<AuthError>),
    #[error("a registered resource server's keys: {0}")]
    Trust(cheq_core::sign::TrustError),
    #[error("sealing a document: {0}")]
    Seal(Arc<crate::seal::SealError>),
    #[error("the {0} task ended before it answered")]
    Task(&'static str),
    #[error("a lock was poisoned")]
    Poisoned,
    #[error("the page could not be rendered: {0}")]
    Template(String),
    #[error("a cookie could not be set: {0}")]
    Cookie(String),
    #[error("{0} is missing")]
    Missing(&'static str),
    #[error("the transparency log: {0}")]
    Log(Arc<crate::transparency::LogError>),
    #[error("a decision's evidence: {0}")]
    Evidence(crate::seal::RedactError),
}

/// What is wrong with a request as sent (400).
#[derive(Debug, Clone, thiserror::Error)]
pub enum BadRequest {
    #[error("the form could not be read: {0}")]
    Form(String),
    #[error("the query could not be read: {0}")]
    Query(String),
    #[error("the field {0} is missing")]
    MissingField(&'static str),
    #[error("the decision must be accept or reject")]
    Decision,
    #[error("{0}")]
    Countersign(cheq_core::sign::CountersignError),
}

/// Why a confirmation could not go on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CsError {
    #[error("{0}")]
    NotRegistered(#[from] RegistryError),
    /// The resource server registered itself here, and the operator
    /// blocked it (§16.3).
    #[error(
        "this confirmation service no longer serves {}",
        blocked_name(name, origin)
    )]
    Blocked { origin: String, name: String },
    #[error("{0}")]
    BadRequest(#[from] BadRequest),
    #[error("no such confirmation")]
    NotFound,
    #[error("the form's security token is missing or wrong")]
    Csrf,
    #[error("this request needs a sign-in from the last {max_age_secs} s; sign in again")]
    Reauthenticate { max_age_secs: i64 },
    #[error("this request belongs to another account; you are signed in as \"{user}\"")]
    WrongUser { subject: String, user: String },
    #[error("{origin} could not be reached: {detail}")]
    Unreachable { origin: String, detail: String },
    #[error("{origin} did not answer in time")]
    Timeout { origin: String },
    #[error("{reason}")]
    Untrusted { origin: String, reason: String },
    #[error("{origin} signed this request with a key this service has not read yet; try again in {retry_after} s")]
    KeysPending { origin: String, retry_after: i64 },
    #[error("{0}")]
    NotCountersignable(CountersignableError),
    #[error("this request expired at {}", .0.to_rfc3339())]
    Expired(chrono::DateTime<chrono::Utc>),
    #[error("the resource server says this request has expired or was already decided")]
    Gone,
    #[error("this request was decided here before, and that decision is no longer kept: it is not confirmed again")]
    DecidedBefore,
    #[error(
        "{origin} does not know this request: it may have been withdrawn, or the link is wrong"
    )]
    UnknownAtRs { origin: String },
    #[error("the request changed since it was shown to you")]
    Changed,
    #[error("too many failed attempts; try again in {retry_after} s")]
    TooManyAttempts { retry_after: i64 },
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("the request body is too large")]
    PayloadTooLarge,
    #[error("the service is busy; try again in a moment")]
    Busy,
    #[error("the service cannot reach its database; try again in a moment")]
    Unavailable(Arc<StoreError>),
    /// The CS's own signing key cannot be used now (none active, or its
    /// file unreadable): an operator's problem, not the request's.
    #[error("the service cannot sign decisions right now; try again later")]
    SigningUnavailable(Arc<KeyRingError>),
    #[error("internal error: {0}")]
    Internal(Internal),
    #[error("{0}")]
    Passkey(PasskeyProblem),
}

/// Why a decision that needs the user's passkey (§14) was not made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PasskeyProblem {
    #[error("this request asks to be accepted with your passkey, and your account has none: add one on your account page, then come back")]
    NoPasskey,
    #[error("this request asks to be accepted with your passkey, on a page that can ask for it")]
    Required,
    #[error("this passkey is not one of your account's")]
    NotYours,
    #[error("the passkey's signature counter went back: it may have been copied")]
    CounterWentBack,
}

/// How a blocked resource server is named: its name and origin, or its
/// origin alone when it never registered.
fn blocked_name(name: &str, origin: &str) -> String {
    if name.is_empty() {
        origin.to_owned()
    } else {
        format!("{name} ({origin})")
    }
}

impl From<StoreError> for CsError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable { .. } => CsError::Unavailable(Arc::new(e)),
            e => CsError::Internal(Internal::Store(Arc::new(e))),
        }
    }
}

impl From<AuthError> for CsError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Store(e) => e.into(),
            e => CsError::Internal(Internal::Auth(Arc::new(e))),
        }
    }
}
