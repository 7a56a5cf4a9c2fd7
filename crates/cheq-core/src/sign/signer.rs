//! Signing (PROTOCOL.md §5): the resource signature over exact payload bytes,
//! and the confirmation countersignature, which only a [`VerifiedCheq`] can get
//! and only while it is neither expired nor dated in the future (§4).

use super::b64;
use super::header::{
    confirmation_header_json, resource_header_json, Channel, ConfirmationClaims, Decision,
};
use super::jws::{signing_input, write_document};
use super::keys::{Algorithm, SigningKey};
use super::verify::{dated_in_future, VerifiedCheq, CLOCK_SKEW_SECS};
use crate::cheq::{Cheq, CheqError, CountersignableError};
use chrono::{DateTime, Utc};
use indexmap::IndexMap;

/// Why a payload could not be resource-signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    #[error("{0}")]
    Payload(#[from] CheqError),
    #[error("{0}")]
    NotCountersignable(#[from] CountersignableError),
}

/// Why a verified CHEQ could not be countersigned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CountersignError {
    #[error("the CHEQ is for \"{subject}\", not \"{user}\"")]
    SubjectMismatch { subject: String, user: String },
    #[error("the CHEQ expired at {}", .0.to_rfc3339())]
    Expired(chrono::DateTime<chrono::Utc>),
    #[error("the CHEQ is dated {date}, later than now ({now}) plus the clock skew")]
    DatedInFuture { date: String, now: String },
    #[error("\"amr\" must name at least one authentication method")]
    NoAuthMethod,
    #[error("\"{0}\" is not a parameter that asks for input")]
    CollectedNotAnInput(String),
    #[error("a value for \"{0}\" is required to accept")]
    RequiredInputMissing(String),
    #[error("this CHEQ asks for the user's passkey to accept, and no assertion was given")]
    PasskeyRequired,
    #[error("the passkey assertion: {0}")]
    Passkey(super::passkey::PasskeyError),
}

/// The CS checks a passkey assertion before it signs, as every verifier
/// will after (§5 rule 6); an acceptance of a CHEQ that asks for one must
/// carry one.
fn check_passkey(
    verified: &VerifiedCheq,
    claims: &ConfirmationClaims,
) -> Result<(), CountersignError> {
    use super::passkey;
    let Some(member) = &claims.passkey else {
        if claims.decision == Decision::Accept
            && verified.cheq().assurance == Some(crate::cheq::Assurance::Passkey)
        {
            return Err(CountersignError::PasskeyRequired);
        }
        return Ok(());
    };
    passkey::check_member(member, claims, &verified.fields().confirmation_uri)
        .map(|_| ())
        .map_err(CountersignError::Passkey)
}

/// Signs `payload` (its exact bytes, never re-serialised) as the resource server.
/// The payload must satisfy §4, including the members needed to countersign.
pub fn sign_resource(payload: &[u8], key: &SigningKey) -> Result<String, SignError> {
    let cheq = Cheq::parse(payload)?;
    cheq.countersign_fields()?;
    let payload_b64 = b64::encode(payload);
    let protected = b64::encode(resource_header_json(Algorithm::EdDsa, key.kid()));
    let signature = b64::encode(key.sign(&signing_input(&protected, &payload_b64)));
    Ok(write_document(&payload_b64, &[(&protected, &signature)]))
}

/// The `auth_time` a confirmation header states when no one reported when
/// the user authenticated (an identity provider that sends no `auth_time`):
/// the epoch. §5 requires the member, and this value claims no freshness at
/// all: every age computed from it is decades, so no rule on the age of a
/// sign-in ever takes it as recent, and no time is made up.
pub const AUTH_TIME_UNKNOWN: i64 = 0;

/// The user's decision and how it was made: everything the confirmation
/// header carries besides what comes from the verified CHEQ.
#[derive(Debug, Clone)]
pub struct DecisionInput<'a> {
    pub decision: Decision,
    /// The user's id at the CS (`sub`).
    pub sub: &'a str,
    /// Other names the CHEQ's `subject` may use for this user (a verified e-mail).
    pub also_known_as: &'a [String],
    /// When the user authenticated (unix seconds), or [`AUTH_TIME_UNKNOWN`].
    pub auth_time: i64,
    pub amr: &'a [String],
    pub channel: Channel,
    /// The exact text the user was shown or read; `cheq_view` is its SHA-256.
    pub view_text: &'a str,
    pub collected: Option<IndexMap<String, String>>,
    /// The passkey assertion bound to this decision (`cheq_passkey`), when
    /// the user's authenticator made one.
    pub passkey: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Countersigns a verified CHEQ with the user's decision, at `now`.
/// Returns the two-signature document.
pub fn countersign(
    verified: &VerifiedCheq,
    key: &SigningKey,
    input: DecisionInput<'_>,
    now: DateTime<Utc>,
) -> Result<String, CountersignError> {
    let fields = verified.fields();
    // The same rule as the CS's sign-in: the user name exactly, or one of
    // the user's other names (a verified e-mail) without regard to ASCII case.
    let named = fields.subject == input.sub
        || input
            .also_known_as
            .iter()
            .any(|a| a.eq_ignore_ascii_case(&fields.subject));
    if !named {
        return Err(CountersignError::SubjectMismatch {
            subject: fields.subject.clone(),
            user: input.sub.to_owned(),
        });
    }
    if now > fields.expires + chrono::Duration::seconds(CLOCK_SKEW_SECS) {
        return Err(CountersignError::Expired(fields.expires));
    }
    // §4: a CHEQ dated later than now plus the skew is never countersigned,
    // even one verified earlier against another clock.
    if dated_in_future(fields, now) {
        return Err(CountersignError::DatedInFuture {
            date: fields.date.to_rfc3339(),
            now: now.to_rfc3339(),
        });
    }
    if input.amr.is_empty() || input.amr.iter().any(String::is_empty) {
        return Err(CountersignError::NoAuthMethod);
    }
    for name in input.collected.iter().flat_map(|c| c.keys()) {
        let asks = verified
            .cheq()
            .parameters
            .iter()
            .any(|p| &p.name == name && p.input.is_some());
        if !asks {
            return Err(CountersignError::CollectedNotAnInput(name.clone()));
        }
    }
    if input.decision == Decision::Accept {
        if let Some(p) = verified
            .cheq()
            .missing_required_input(input.collected.as_ref())
        {
            return Err(CountersignError::RequiredInputMissing(p.name.clone()));
        }
    }
    let claims = ConfirmationClaims {
        decision: input.decision,
        sub: input.sub.to_owned(),
        iat: now.timestamp(),
        auth_time: input.auth_time.min(now.timestamp()),
        amr: input.amr.to_vec(),
        channel: input.channel,
        view: b64::sha256(input.view_text.as_bytes()),
        rs_sig: verified.rs_sig_digest().to_owned(),
        collected: input.collected,
        passkey: input.passkey,
    };
    check_passkey(verified, &claims)?;
    let (payload_b64, rs_protected, rs_signature) = verified.parts();
    let protected = b64::encode(confirmation_header_json(
        Algorithm::EdDsa,
        key.kid(),
        &claims,
    ));
    let signature = b64::encode(key.sign(&signing_input(&protected, payload_b64)));
    Ok(write_document(
        payload_b64,
        &[(rs_protected, rs_signature), (&protected, &signature)],
    ))
}

/// Low-level: signs `protected_json` (a header's exact JSON text) over an
/// already-encoded payload and returns `(protected_b64, signature_b64)`.
/// No CHEQ rule is checked; this is for tooling and for tests that must
/// produce well-signed but otherwise wrong documents.
pub fn sign_entry(key: &SigningKey, protected_json: &str, payload_b64: &str) -> (String, String) {
    let protected = b64::encode(protected_json);
    let signature = b64::encode(key.sign(&signing_input(&protected, payload_b64)));
    (protected, signature)
}

/// Low-level: writes a General JSON Serialization document from encoded parts.
pub fn assemble(payload_b64: &str, signatures: &[(&str, &str)]) -> String {
    write_document(payload_b64, signatures)
}
