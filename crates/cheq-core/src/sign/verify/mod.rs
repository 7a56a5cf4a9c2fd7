//! Verification (PROTOCOL.md §5, rules 1–4) as a chain of small named checks.
//! Rule 4 includes §4's time limits: not expired, and `date` not later than
//! now plus the 60 s clock skew.
//!
//! Each check has its own error variant, so a rejection says exactly which rule
//! failed ([`VerifyError::rule`]). Every signature is verified: one bad signature
//! fails the whole document, whatever the others say. Rule 5 (the nonce has not
//! been decided before) needs the replay store and is applied by the servers.
//!
//! A resource server reading a decision on a CHEQ it issued may hand over
//! the document it issued ([`verify_own_decision`]): a resource signature
//! byte-identical to its own, over the same protected header and payload,
//! is the one its key made, so it is recognised instead of verified again
//! (the key must still be trusted, and must still be the header's
//! algorithm). Anything else in that place is verified in full.
//!
//! A [`VerifiedCheq`] or [`VerifiedDecision`] can only be made here: their
//! fields are private and they have no public constructor, so code elsewhere
//! cannot forge one.
//!
//! ```compile_fail
//! // Only verification makes a VerifiedCheq; building one by hand does not compile.
//! let forged = cheq::sign::VerifiedCheq { cheq: todo!(), fields: todo!() };
//! ```

mod rules;

pub(crate) use rules::dated_in_future;

use super::b64;
use super::header::{ConfirmationClaims, Decision, Role};
use super::jws::RawDocument;
use super::trust::TrustStore;
use crate::cheq::json::JsonError;
use crate::cheq::{Cheq, CheqError, CountersignFields, CountersignableError};
use chrono::{DateTime, Utc};
use rules::{
    check_collected, check_count, check_decided_in_time, check_decision, check_header,
    check_not_dated_in_future, check_not_expired, check_passkey, check_resource_signature,
    check_role, check_rs_sig, check_signature, read_claims, read_payload,
};

/// Clock skew allowed on expiry and on `date` (§4, §5 rule 4).
pub const CLOCK_SKEW_SECS: i64 = 60;

/// Why a signed CHEQ was refused. [`VerifyError::rule`] names the rule of §5.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    // Rule 1: well-formed, every signature verifies.
    #[error("JWS object: {0}")]
    Envelope(JsonError),
    #[error("JWS object: unexpected or malformed member \"{0}\"")]
    EnvelopeMember(String),
    #[error("JWS object: unprotected \"header\" is not allowed")]
    UnprotectedHeader { index: Option<usize> },
    #[error("JWS object: {part} is not canonical unpadded base64url")]
    NonCanonicalBase64 {
        part: &'static str,
        index: Option<usize>,
    },
    #[error("payload is {0} bytes, more than 64 KiB")]
    PayloadTooLarge(usize),
    #[error("{0}")]
    Payload(CheqError),
    #[error("signature {index}: protected header: {error}")]
    HeaderJson { index: usize, error: JsonError },
    #[error("signature {index}: algorithm {alg:?} is not allowed (only EdDSA and ES256)")]
    AlgorithmNotAllowed { index: usize, alg: String },
    #[error("signature {index}: no \"kid\" in the protected header")]
    MissingKid { index: usize },
    #[error(
        "signature {index}: header carries its own key (\"{member}\"); keys come only from trust"
    )]
    EmbeddedKey { index: usize, member: &'static str },
    #[error("signature {index}: \"b64\": false is not allowed")]
    B64False { index: usize },
    #[error("signature {index}: \"crit\" names \"{name}\", which is not understood")]
    UnknownCrit { index: usize, name: String },
    #[error("signature {index}: \"crit\" is malformed: {reason}")]
    BadCrit { index: usize, reason: String },
    #[error("signature {index}: a confirmation header must mark \"cheq_decision\" critical")]
    MissingCrit { index: usize },
    #[error("signature {index}: \"typ\" must be \"cheq+jws\"")]
    BadTyp { index: usize },
    #[error("signature {index}: \"cheq_role\" is missing or unknown")]
    BadRole { index: usize },
    #[error("signature {index}: header member \"{member}\" is missing or malformed")]
    BadClaim { index: usize, member: &'static str },
    #[error("signature {index}: the key's algorithm is not the header's \"alg\"")]
    AlgorithmKeyMismatch { index: usize },
    #[error("signature {index} (kid \"{kid}\") does not verify")]
    BadSignature { index: usize, kid: String },
    // Rule 2: roles, order and trust.
    #[error("expected {expected} signature(s), found {found}")]
    SignatureCount { expected: usize, found: usize },
    #[error("signature {index} should have role \"{expected}\"")]
    RoleOrder {
        index: usize,
        expected: &'static str,
    },
    #[error("resource key \"{kid}\" is not trusted for the origin of {resource_uri}")]
    UntrustedResourceKey { kid: String, resource_uri: String },
    #[error("confirmation key \"{kid}\" is not trusted for the origin of {confirmation_uri}")]
    UntrustedConfirmationKey {
        kid: String,
        confirmation_uri: String,
    },
    // Rule 3: the countersignature is bound to this resource signature and decision.
    #[error("\"cheq_rs_sig\" does not match the resource signature")]
    RsSigMismatch,
    #[error("the decision is \"{found}\", not \"{expected}\"")]
    DecisionMismatch { expected: Decision, found: Decision },
    #[error("\"cheq_collected\" names \"{0}\", which is not a parameter asking for input")]
    CollectedNotAnInput(String),
    #[error("an acceptance must carry a value for the required input \"{0}\"")]
    RequiredInputMissing(String),
    // Rule 4: members present and as required; not expired.
    #[error("{0}")]
    NotCountersignable(CountersignableError),
    #[error("\"resource uri\" is {found}, but the CHEQ was read from {expected}")]
    ResourceUriMismatch { expected: String, found: String },
    #[error("\"confirmation uri\" is {found}, not this confirmation server ({expected})")]
    ConfirmationUriMismatch { expected: String, found: String },
    #[error("the CHEQ expired at {}", expires.to_rfc3339())]
    Expired {
        expires: chrono::DateTime<chrono::Utc>,
    },
    #[error(
        "the CHEQ is dated {date}, later than now ({now}) plus the {CLOCK_SKEW_SECS} s clock skew"
    )]
    DatedInFuture { date: String, now: String },
    #[error("the decision was signed after the CHEQ expired")]
    DecidedAfterExpiry,
    // Rule 6: a passkey-bound decision.
    #[error("signature {index}: \"cheq_passkey\" is not marked critical")]
    PasskeyNotCritical { index: usize },
    #[error("the CHEQ asks for a passkey and this acceptance carries none")]
    PasskeyMissing,
    #[error("the passkey assertion: {0}")]
    Passkey(super::passkey::PasskeyError),
}

impl VerifyError {
    /// The rule of PROTOCOL.md §5 that failed (1–4, 6; rule 5, the nonce,
    /// is the servers').
    pub fn rule(&self) -> u8 {
        use VerifyError::*;
        match self {
            SignatureCount { .. }
            | RoleOrder { .. }
            | UntrustedResourceKey { .. }
            | UntrustedConfirmationKey { .. } => 2,
            RsSigMismatch
            | DecisionMismatch { .. }
            | CollectedNotAnInput(_)
            | RequiredInputMissing(_) => 3,
            NotCountersignable(_)
            | ResourceUriMismatch { .. }
            | ConfirmationUriMismatch { .. }
            | Expired { .. }
            | DatedInFuture { .. }
            | DecidedAfterExpiry => 4,
            PasskeyMissing | Passkey(_) => 6,
            _ => 1,
        }
    }
}

/// What the verifier knows besides the document.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    pub now: DateTime<Utc>,
    /// The URI the CHEQ was fetched from or posted to, if known (§4).
    pub resource_uri: Option<&'a str>,
    /// The verifying CS's own confirmation URI, if it is a CS (§4).
    pub confirmation_uri: Option<&'a str>,
}

impl<'a> Context<'a> {
    pub fn at(now: DateTime<Utc>) -> Self {
        Context {
            now,
            resource_uri: None,
            confirmation_uri: None,
        }
    }
}

/// A resource-signed CHEQ whose every rule of §5 (1–4) held. The only way to
/// get one is [`verify_resource`]; only this can be countersigned.
#[derive(Debug, Clone)]
pub struct VerifiedCheq {
    cheq: Cheq,
    fields: CountersignFields,
    payload_b64: String,
    resource_protected_b64: String,
    resource_signature_b64: String,
    resource_kid: String,
    rs_sig_digest: String,
}

impl VerifiedCheq {
    pub fn cheq(&self) -> &Cheq {
        &self.cheq
    }
    pub fn fields(&self) -> &CountersignFields {
        &self.fields
    }
    pub fn resource_kid(&self) -> &str {
        &self.resource_kid
    }
    /// base64url SHA-256 of the decoded resource signature (`cheq_rs_sig`).
    pub fn rs_sig_digest(&self) -> &str {
        &self.rs_sig_digest
    }
    /// The resource-signed document, as serialised by this implementation.
    pub fn to_document(&self) -> String {
        super::jws::write_document(
            &self.payload_b64,
            &[(&self.resource_protected_b64, &self.resource_signature_b64)],
        )
    }
    pub(crate) fn parts(&self) -> (&str, &str, &str) {
        (
            &self.payload_b64,
            &self.resource_protected_b64,
            &self.resource_signature_b64,
        )
    }
}

/// A decided CHEQ (both signatures) whose every rule of §5 (1–4) held.
#[derive(Debug, Clone)]
pub struct VerifiedDecision {
    cheq: Cheq,
    fields: CountersignFields,
    claims: ConfirmationClaims,
    resource_kid: String,
    confirmation_kid: String,
    resource_signature: ResourceSignature,
}

/// How a decision's resource signature was found good (§5 rule 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceSignature {
    /// Verified with the trusted key.
    Verified,
    /// Byte-identical to the document the verifier issued itself
    /// ([`verify_own_decision`]), under a key it still trusts.
    Issued,
}

impl VerifiedDecision {
    /// How the resource signature was found good.
    pub fn resource_signature(&self) -> ResourceSignature {
        self.resource_signature
    }
    pub fn cheq(&self) -> &Cheq {
        &self.cheq
    }
    pub fn fields(&self) -> &CountersignFields {
        &self.fields
    }
    pub fn decision(&self) -> Decision {
        self.claims.decision
    }
    pub fn claims(&self) -> &ConfirmationClaims {
        &self.claims
    }
    pub fn resource_kid(&self) -> &str {
        &self.resource_kid
    }
    pub fn confirmation_kid(&self) -> &str {
        &self.confirmation_kid
    }
}

/// Verifies a resource-signed CHEQ (one signature).
pub fn verify_resource(
    doc: &[u8],
    trust: &TrustStore,
    ctx: &Context<'_>,
) -> Result<VerifiedCheq, VerifyError> {
    let raw = RawDocument::parse(doc)?;
    let (cheq, fields) = read_payload(&raw, ctx)?;
    check_count(&raw, 1)?;
    let resource = &raw.signatures[0];
    let header = check_header(0, resource)?;
    check_role(0, &header, Role::Resource)?;
    let key = trust
        .resource_key_at(&fields.resource_origin, &header.kid)
        .ok_or_else(|| VerifyError::UntrustedResourceKey {
            kid: header.kid.clone(),
            resource_uri: fields.resource_uri.clone(),
        })?;
    check_signature(0, &header, &key, resource, &raw.payload_b64)?;
    check_not_expired(&fields, ctx)?;
    check_not_dated_in_future(&fields, ctx)?;
    Ok(VerifiedCheq {
        rs_sig_digest: b64::sha256(&resource.signature),
        resource_kid: header.kid,
        resource_protected_b64: resource.protected_b64.clone().into_owned(),
        resource_signature_b64: resource.signature_b64.clone().into_owned(),
        payload_b64: raw.payload_b64.into_owned(),
        cheq,
        fields,
    })
}

/// Verifies a decided CHEQ (resource signature then confirmation signature).
/// With `expected`, the decision must be that one (rule 3: `?accept`/`?reject`).
pub fn verify_decision(
    doc: &[u8],
    trust: &TrustStore,
    expected: Option<Decision>,
    ctx: &Context<'_>,
) -> Result<VerifiedDecision, VerifyError> {
    decision(doc, trust, expected, ctx, None)
}

/// [`verify_decision`] by the resource server that issued the CHEQ:
/// `issued` is the resource-signed document it issued (its own copy, §3).
/// A resource signature byte-identical to that one, over the same protected
/// header and payload, is recognised rather than verified again (the module
/// docs); every other rule, trust in its key included, is checked as
/// always. The caller vouches that `issued` is its own: a document from
/// anywhere else must go through [`verify_decision`].
pub fn verify_own_decision(
    doc: &[u8],
    issued: &str,
    trust: &TrustStore,
    expected: Option<Decision>,
    ctx: &Context<'_>,
) -> Result<VerifiedDecision, VerifyError> {
    decision(doc, trust, expected, ctx, Some(issued))
}

fn decision(
    doc: &[u8],
    trust: &TrustStore,
    expected: Option<Decision>,
    ctx: &Context<'_>,
    issued: Option<&str>,
) -> Result<VerifiedDecision, VerifyError> {
    let raw = RawDocument::parse(doc)?;
    let (cheq, fields) = read_payload(&raw, ctx)?;
    check_count(&raw, 2)?;
    let (rs, cs) = (&raw.signatures[0], &raw.signatures[1]);
    let rs_header = check_header(0, rs)?;
    let cs_header = check_header(1, cs)?;
    check_role(0, &rs_header, Role::Resource)?;
    check_role(1, &cs_header, Role::Confirmation)?;
    let claims = read_claims(1, &cs_header)?;
    let rs_key = trust
        .resource_key_at(&fields.resource_origin, &rs_header.kid)
        .ok_or_else(|| VerifyError::UntrustedResourceKey {
            kid: rs_header.kid.clone(),
            resource_uri: fields.resource_uri.clone(),
        })?;
    let cs_key = trust
        .confirmation_key_at(&fields.confirmation_origin, &cs_header.kid)
        .ok_or_else(|| VerifyError::UntrustedConfirmationKey {
            kid: cs_header.kid.clone(),
            confirmation_uri: fields.confirmation_uri.clone(),
        })?;
    let resource_signature =
        check_resource_signature(&rs_header, &rs_key, rs, &raw.payload_b64, issued)?;
    check_signature(1, &cs_header, &cs_key, cs, &raw.payload_b64)?;
    check_rs_sig(&claims, rs)?;
    check_decision(&claims, expected)?;
    check_collected(&claims, &cheq)?;
    check_passkey(&claims, &cheq, &fields)?;
    check_not_expired(&fields, ctx)?;
    check_not_dated_in_future(&fields, ctx)?;
    check_decided_in_time(&claims, &fields)?;
    Ok(VerifiedDecision {
        resource_kid: rs_header.kid,
        confirmation_kid: cs_header.kid,
        resource_signature,
        cheq,
        fields,
        claims,
    })
}
