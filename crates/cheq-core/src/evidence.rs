//! Redacted evidence of a decision (PROTOCOL.md §8.1): what a confirmation
//! service keeps, and gives its user, of a decided document whose
//! confirmation signature carried values the user marked private, once the
//! document is delivered and the values are gone.
//!
//! The file is a JWS in General JSON Serialization, like a signed CHEQ, with
//! one signature: the confirmation service's, made with its current signing
//! key over the exact bytes of the *statement* carried (base64url) as the
//! payload. Its protected header is its own (`typ` `cheq-evidence+jws`,
//! `cheq_role` `evidence`), so that it is never taken for a resource
//! signature or a countersignature, and no §5 verifier accepts it as either.
//!
//! The statement ([`RedactedEvidence`]) is a JSON object, `format`
//! `cheq-redacted-evidence/v1`, holding what can still be proven: the
//! resource-signed CHEQ (the resource server's signature only), the
//! decision and when it was made, the account that made it (`sub`), the
//! names of the collected values with a keyed digest of each, a keyed
//! digest of the withheld confirmation header, and the log digest of the
//! document as delivered (the `<D>` of its `cheq-decision/v1 <D>` entry,
//! §15.1), or `null` where the service keeps no log. The confirmation
//! service stores the statement; it signs it each time it serves it.
//!
//! Reading it is a chain of named checks, each with its own error:
//!
//! 1. [`SignedEvidence::parse`]: the envelope (strict JSON, exactly one
//!    signature; a bare statement is refused as unsigned), the evidence
//!    header (its role, its `typ`, its algorithm and key id, nothing else),
//!    and the statement ([`RedactedEvidence::parse`]: the format and its
//!    version, every member present, typed and nothing else, every digest
//!    32 bytes of canonical base64url);
//! 2. [`SignedEvidence::verify`]: the signature, under the key the trust
//!    gives the confirmation server at the origin of the CHEQ's
//!    `confirmation uri` (as §5 rule 2 does for a countersignature); then
//!    the resource-signed CHEQ passes §5 rules 1, 2 and 4, its times checked
//!    at the decision time the evidence states (made within the CHEQ's
//!    lifetime); then the collected names are inputs the CHEQ asks for, and
//!    an acceptance names every required one (rule 3, as far as names go).
//!
//! What it cannot prove is said by [`NOT_CHECKED`]: the confirmation
//! signature is not in it, so that no one can test a guess at a private
//! value against it. No I/O here.

use crate::cheq::json::{self, JsonError, Node, Object};
use crate::cheq::{Cheq, CountersignFields, Decision};
use crate::sign::b64;
use crate::sign::jws::{signing_input, write_document, RawDocument, RawSignature};
use crate::sign::jws::{MAX_DOCUMENT_BYTES, MAX_HEADER_BYTES};
use crate::sign::keys::Algorithm;
use crate::sign::{
    assemble, sign_entry, verify_resource, Context, SigningKey, TrustStore, VerifiedCheq,
    VerifyError,
};
use crate::tlog::Entry;
use chrono::{DateTime, SecondsFormat, Utc};
use indexmap::IndexMap;
use serde_json::{json, Map, Value};

mod checks;
use checks::*;

/// The format of the statement this module writes and reads.
pub const FORMAT: &str = "cheq-redacted-evidence/v1";
/// The family of formats: anything else under it is a version not known here.
const FAMILY: &str = "cheq-redacted-evidence/";
/// The `typ` of the evidence signature's protected header.
pub const TYP: &str = "cheq-evidence+jws";
/// The `cheq_role` of the evidence signature.
pub const ROLE: &str = "evidence";
/// The largest statement read: a whole signed CHEQ and its digests.
pub const MAX_STATEMENT_BYTES: usize = MAX_DOCUMENT_BYTES + 64 * 1024;
/// The largest evidence file read: the statement in base64url and a header.
pub const MAX_EVIDENCE_BYTES: usize = MAX_STATEMENT_BYTES * 4 / 3 + MAX_HEADER_BYTES * 4 / 3 + 1024;
/// The length of a SHA-256 or HMAC-SHA256 digest in unpadded base64url.
const DIGEST_CHARS: usize = 43;

/// The words an evidence file carries in its `withheld` member.
pub const WITHHELD: &str = "the confirmation signature: it signed values the user marked private (PROTOCOL.md §8), which the confirmation service keeps only as keyed digests (HMAC-SHA256 under a key of its own)";

/// What a check of redacted evidence cannot establish, in a verifier's words.
pub const NOT_CHECKED: &str = "the confirmation signature is withheld with the private values it signed, so its claims (how the user signed in, what was shown) and the values themselves cannot be checked from this file: the decision, its time, the account and the digests are the confirmation service's word, signed over this evidence; the log entry names the document as delivered (cheq audit --document checks it is in the log)";

/// The members of a v1 statement, in the order written.
const MEMBERS: [&str; 9] = [
    "format",
    "withheld",
    "decision",
    "decided_at",
    "sub",
    "resource_signed",
    "collected_hmac_sha256",
    "confirmation_protected_hmac_sha256",
    "log_digest",
];

/// The members of the evidence signature's protected header, in the order
/// written; it has no other.
const HEADER_MEMBERS: [&str; 4] = ["alg", "kid", "typ", "cheq_role"];

/// Why a file is not good redacted evidence; each check its own variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvidenceError {
    // The envelope and its signature's header.
    #[error("redacted evidence: {0}")]
    Json(JsonError),
    #[error("redacted evidence in the older shape, with no \"format\": download it again from the history, which serves the current format ({FORMAT}, signed by the confirmation service)")]
    Unversioned,
    #[error("unsigned redacted evidence (the bare statement): a confirmation service serves it signed, as a JWS whose payload is the statement; download it again from the history")]
    Unsigned,
    #[error("the signed evidence: {0}")]
    Envelope(VerifyError),
    #[error("the evidence's statement is {0} bytes, more than {MAX_STATEMENT_BYTES}")]
    TooLarge(usize),
    #[error("the evidence carries no signature: the confirmation service's is required")]
    SignatureMissing,
    #[error("the evidence carries {0} signatures; it has one, the confirmation service's")]
    SignatureCount(usize),
    #[error("the evidence's signature has role {}, not \"evidence\": it is not a confirmation service's signature of evidence", .found.as_deref().map_or_else(|| "(none)".to_owned(), |r| format!("{r:?}")))]
    WrongRole { found: Option<String> },
    #[error("the evidence's signature has a \"typ\" other than \"{TYP}\"")]
    WrongType,
    #[error("the evidence's signature header carries \"{0}\"; it has only \"alg\", \"kid\", \"typ\" and \"cheq_role\"")]
    HeaderMember(String),
    #[error("the evidence's signature: algorithm {0:?} is not allowed (only EdDSA and ES256)")]
    AlgorithmNotAllowed(String),
    #[error("the evidence's signature has no \"kid\"")]
    MissingKid,
    #[error("the evidence is signed with key \"{kid}\", which the trust does not give the confirmation server at the origin of {confirmation_uri}")]
    UntrustedKey {
        kid: String,
        confirmation_uri: String,
    },
    #[error("the evidence is signed by the confirmation server at {origin} (key \"{kid}\"), not by the one the CHEQ names ({confirmation_uri})")]
    AnotherOrigin {
        kid: String,
        origin: String,
        confirmation_uri: String,
    },
    #[error("the evidence's signature: key \"{kid}\" is not of the header's \"alg\"")]
    AlgorithmKeyMismatch { kid: String },
    #[error("the confirmation service's signature over the evidence (key \"{kid}\") does not verify: the evidence was altered, or signed by another key")]
    BadSignature { kid: String },
    // The statement.
    #[error("\"format\" is {0:?}, not redacted CHEQ evidence")]
    UnknownFormat(String),
    #[error(
        "redacted evidence of format {0:?}, a version this tool does not know (it reads {FORMAT})"
    )]
    UnknownVersion(String),
    #[error("redacted evidence: the member \"{0}\" is missing")]
    MissingMember(&'static str),
    #[error("redacted evidence: the member \"{member}\" {reason}")]
    BadMember {
        member: &'static str,
        reason: &'static str,
    },
    #[error("redacted evidence: unexpected member \"{0}\"")]
    UnexpectedMember(String),
    #[error("redacted evidence: the digest of \"{0}\" is not 32 bytes of unpadded base64url")]
    BadDigest(String),
    // What the statement says, checked.
    #[error("a decided document was expected: {0}")]
    NotDecided(VerifyError),
    #[error("the resource-signed CHEQ: rule {rule}: {0}", rule = .0.rule())]
    ResourceSigned(VerifyError),
    #[error("decided at {decided_at}, after the CHEQ expired at {expires}")]
    DecidedAfterExpiry { decided_at: String, expires: String },
    #[error("decided at {decided_at}, before the CHEQ was dated ({date})")]
    DecidedBeforeDate { decided_at: String, date: String },
    #[error(
        "a value is said to be collected for \"{0}\", which is not a parameter asking for input"
    )]
    CollectedNotAnInput(String),
    #[error("an acceptance must carry a value for the required input \"{0}\", and the evidence names none")]
    RequiredInputMissing(String),
    #[error("a rejection carries no values, and the evidence names some")]
    CollectedOnReject,
    #[error("the decision is \"{found}\", not \"{expected}\"")]
    DecisionMismatch { expected: Decision, found: Decision },
    #[error("this is redacted evidence of a decision, not a resource-signed CHEQ")]
    NotResourceSigned,
    #[error(
        "the evidence names no log entry (the confirmation service kept no log when it was made)"
    )]
    NoLogEntry,
}

/// Does `bytes` look like redacted evidence rather than a signed CHEQ? A
/// JSON object with a `format`, a `redacted` (the older shape) or a
/// `resource_signed` member (a bare statement), or a JWS whose payload is a
/// statement of this family or whose signature claims the evidence role or
/// `typ`. Anything else is left to the CHEQ's JWS reader.
pub fn is_redacted(bytes: &[u8]) -> bool {
    let Ok(o) = json::parse_node_object(bytes, MAX_EVIDENCE_BYTES) else {
        return false;
    };
    if ["format", "redacted", "resource_signed"]
        .iter()
        .any(|m| o.contains_key(m))
    {
        return true;
    }
    let statement = o
        .get("payload")
        .and_then(Node::as_str)
        .and_then(b64::decode)
        .is_some_and(|p| {
            json::parse_node_object(&p, MAX_STATEMENT_BYTES).is_ok_and(|s| {
                s.get("format")
                    .and_then(Node::as_str)
                    .is_some_and(|f| f.starts_with(FAMILY))
            })
        });
    let evidence_header = |sig: &Node<'_>| {
        let Node::Object(sig) = sig else {
            return false;
        };
        sig.get("protected")
            .and_then(Node::as_str)
            .and_then(b64::decode)
            .is_some_and(|h| {
                json::parse_node_object(&h, MAX_HEADER_BYTES).is_ok_and(|h| {
                    h.get("cheq_role").and_then(Node::as_str) == Some(ROLE)
                        || h.get("typ")
                            .and_then(Node::as_str)
                            .is_some_and(|t| t.eq_ignore_ascii_case(TYP))
                })
            })
    };
    statement
        || o.get("signatures")
            .and_then(Node::as_array)
            .is_some_and(|sigs| sigs.iter().any(evidence_header))
}

/// A decided document split into what redacted evidence keeps and the one
/// thing it keeps a digest of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The resource-signed CHEQ: the payload and the resource signature.
    pub resource_signed: String,
    /// The confirmation signature's protected header, base64url as signed.
    pub confirmation_protected_b64: String,
}

/// Splits a decided document (two signatures): nothing is verified.
pub fn split_decided(document: &[u8]) -> Result<Split, EvidenceError> {
    let raw = RawDocument::parse(document).map_err(EvidenceError::NotDecided)?;
    let [resource, confirmation] = raw.signatures.as_slice() else {
        return Err(EvidenceError::NotDecided(VerifyError::SignatureCount {
            expected: 2,
            found: raw.signatures.len(),
        }));
    };
    Ok(Split {
        resource_signed: write_document(
            &raw.payload_b64,
            &[(&resource.protected_b64, &resource.signature_b64)],
        ),
        confirmation_protected_b64: confirmation.protected_b64.clone().into_owned(),
    })
}

/// The statement of redacted evidence: read but not yet verified, or made
/// to be signed ([`RedactedEvidence::sign`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedactedEvidence {
    /// The resource-signed CHEQ (JWS General JSON, one signature).
    pub resource_signed: String,
    pub decision: Decision,
    /// When the decision was made, as the confirmation service states it.
    pub decided_at: DateTime<Utc>,
    /// The account at the confirmation service that decided (its `sub`).
    pub sub: String,
    /// Each collected value's name, and its keyed digest.
    pub collected: IndexMap<String, String>,
    /// The keyed digest of the confirmation signature's protected header.
    pub confirmation_protected: String,
    /// The SHA-256 (base64url) of the document as delivered, as logged.
    pub log_digest: Option<String>,
}

impl RedactedEvidence {
    /// The statement's text: what the confirmation service stores, and
    /// the exact bytes it signs.
    pub fn to_json(&self) -> String {
        let resource_signed: Value = serde_json::from_str(&self.resource_signed)
            .unwrap_or_else(|_| Value::String(self.resource_signed.clone()));
        let collected: Map<String, Value> = self
            .collected
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        json!({
            "format": FORMAT,
            "withheld": WITHHELD,
            "decision": self.decision.as_str(),
            "decided_at": rfc3339(self.decided_at),
            "sub": self.sub,
            "resource_signed": resource_signed,
            "collected_hmac_sha256": collected,
            "confirmation_protected_hmac_sha256": self.confirmation_protected,
            "log_digest": self.log_digest,
        })
        .to_string()
    }

    /// The evidence file: the statement signed by the confirmation service
    /// with `key` (its current signing key, as a countersignature is made).
    pub fn sign(&self, key: &SigningKey) -> String {
        let payload_b64 = b64::encode(self.to_json());
        let (protected, signature) = sign_entry(key, &header_json(key.kid()), &payload_b64);
        assemble(&payload_b64, &[(&protected, &signature)])
    }

    /// Reads a statement (the payload of the evidence file, or what a
    /// confirmation service stores): the format, every member.
    pub fn parse(bytes: &[u8]) -> Result<Self, EvidenceError> {
        let o = json::parse_node_object(bytes, MAX_STATEMENT_BYTES).map_err(EvidenceError::Json)?;
        check_format(&o)?;
        if let Some(other) = o.keys().find(|k| !MEMBERS.contains(k)) {
            return Err(EvidenceError::UnexpectedMember(other.to_owned()));
        }
        if !matches!(member(&o, "withheld")?, Node::String(_)) {
            return Err(bad("withheld", "is not a string"));
        }
        let decision = member(&o, "decision")?
            .as_str()
            .and_then(Decision::parse)
            .ok_or_else(|| bad("decision", "is not \"accept\" or \"reject\""))?;
        let decided_at = member(&o, "decided_at")?
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
            .ok_or_else(|| bad("decided_at", "is not an RFC 3339 time"))?;
        let sub = match member(&o, "sub")?.as_str() {
            Some(s) if !s.is_empty() => s.to_owned(),
            _ => return Err(bad("sub", "is not a non-empty string")),
        };
        let resource_signed = match member(&o, "resource_signed")? {
            n @ Node::Object(_) => n.to_value().to_string(),
            _ => return Err(bad("resource_signed", "is not a JWS object")),
        };
        let Node::Object(digests) = member(&o, "collected_hmac_sha256")? else {
            return Err(bad("collected_hmac_sha256", "is not an object"));
        };
        let mut collected = IndexMap::new();
        for (name, digest) in digests.iter() {
            collected.insert(name.to_owned(), digest_of(name, Some(digest))?);
        }
        let confirmation_protected = digest_of(
            "confirmation_protected_hmac_sha256",
            Some(member(&o, "confirmation_protected_hmac_sha256")?),
        )?;
        let log_digest = match member(&o, "log_digest")? {
            Node::Null => None,
            n => Some(digest_of("log_digest", Some(n))?),
        };
        Ok(RedactedEvidence {
            resource_signed,
            decision,
            decided_at,
            sub,
            collected,
            confirmation_protected,
            log_digest,
        })
    }

    /// The log entry the evidence names (`cheq-decision/v1 <D>`, §15.1).
    pub fn log_entry(&self) -> Result<Entry, EvidenceError> {
        self.log_digest
            .as_ref()
            .map(|d| Entry::Decision { digest: d.clone() })
            .ok_or(EvidenceError::NoLogEntry)
    }
}

/// An evidence file, read (check 1) but not yet verified.
#[derive(Debug, Clone)]
pub struct SignedEvidence {
    statement: RedactedEvidence,
    payload_b64: String,
    protected_b64: String,
    signature: Vec<u8>,
    alg: Algorithm,
    kid: String,
}

impl SignedEvidence {
    /// Check 1: reads an evidence file (see the module docs).
    pub fn parse(bytes: &[u8]) -> Result<Self, EvidenceError> {
        check_signed(bytes)?;
        let raw = RawDocument::parse_within(bytes, MAX_EVIDENCE_BYTES, MAX_STATEMENT_BYTES)
            .map_err(|e| match e {
                VerifyError::PayloadTooLarge(n) => EvidenceError::TooLarge(n),
                e => EvidenceError::Envelope(e),
            })?;
        let [signature] = raw.signatures.as_slice() else {
            return Err(EvidenceError::SignatureCount(raw.signatures.len()));
        };
        let (alg, kid) = check_header(signature)?;
        let statement = RedactedEvidence::parse(&raw.payload)?;
        Ok(SignedEvidence {
            statement,
            payload_b64: raw.payload_b64.into_owned(),
            protected_b64: signature.protected_b64.clone().into_owned(),
            signature: signature.signature.clone(),
            alg,
            kid,
        })
    }

    /// The statement as read: nothing in it is verified yet.
    pub fn statement(&self) -> &RedactedEvidence {
        &self.statement
    }

    /// The key id the evidence says it is signed with (not yet verified).
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// Check 2: verifies what the evidence can prove under `trust` (see the
    /// module docs): who signed it, then what it says.
    pub fn verify(self, trust: &TrustStore) -> Result<VerifiedEvidence, EvidenceError> {
        let fields = cheq_fields(&self.statement.resource_signed)?;
        check_signature(&self, trust, &fields)?;
        let cheq = check_resource_signed(&self.statement, trust)?;
        check_collected(&self.statement, &cheq)?;
        Ok(VerifiedEvidence {
            cheq,
            evidence: self.statement,
            confirmation_kid: self.kid,
        })
    }
}

/// Redacted evidence whose every check held.
#[derive(Debug, Clone)]
pub struct VerifiedEvidence {
    cheq: VerifiedCheq,
    evidence: RedactedEvidence,
    confirmation_kid: String,
}

impl VerifiedEvidence {
    /// The resource-signed CHEQ, verified.
    pub fn cheq(&self) -> &VerifiedCheq {
        &self.cheq
    }

    /// The statement, signed by the confirmation service.
    pub fn evidence(&self) -> &RedactedEvidence {
        &self.evidence
    }

    /// The key the confirmation service signed the evidence with.
    pub fn confirmation_kid(&self) -> &str {
        &self.confirmation_kid
    }

    /// Refuses another decision than `expected`.
    pub fn expect(self, expected: Decision) -> Result<Self, EvidenceError> {
        let found = self.evidence.decision;
        if found == expected {
            Ok(self)
        } else {
            Err(EvidenceError::DecisionMismatch { expected, found })
        }
    }
}

#[derive(serde::Serialize)]
struct HeaderOut<'a> {
    alg: &'a str,
    kid: &'a str,
    typ: &'a str,
    cheq_role: &'a str,
}

/// The evidence signature's protected header: these members, in this
/// order, compact.
fn header_json(kid: &str) -> String {
    serde_json::to_string(&HeaderOut {
        alg: Algorithm::EdDsa.as_str(),
        kid,
        typ: TYP,
        cheq_role: ROLE,
    })
    .unwrap_or_default()
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::sign::{
        countersign, sign_resource, verify_decision, Channel, DecisionInput, Jwks, SigningKey,
    };
    use chrono::TimeZone;

    const RS: &str = "https://rs.example";
    const CS: &str = "https://cs.example";

    fn payload() -> String {
        json!({
            "version": "1.0",
            "operation": "https://rs.example/api/transfer",
            "operation name": "Transfer funds",
            "inputs": {"parameters": [
                {"parameter name": "payee", "parameter value": "ACME"},
                {"parameter name": "account", "parameter input": {"type": "digits", "sensitive": true}},
                {"parameter name": "memo", "parameter input": {"type": "text", "required": false}},
            ]},
            "date": "2026-12-07T10:00:00Z",
            "nonce": "Q3ONTdR0soidHLd4ue3DgQ",
            "resource uri": "https://rs.example/cheq/c/1",
            "confirmation uri": CS,
            "subject": "alice",
            "expires": "2026-12-07T11:00:00Z",
            "language": "en",
        })
        .to_string()
    }

    fn key(kid: &str, seed: u8) -> SigningKey {
        SigningKey::from_seed(kid, &[seed; 32]).unwrap()
    }

    fn rs_key() -> SigningKey {
        key("rs", 1)
    }

    fn cs_key() -> SigningKey {
        key("cs", 2)
    }

    /// Both servers trusted for their origins.
    fn trust() -> TrustStore {
        let mut t = TrustStore::new();
        t.add_resource_server(RS, Jwks::new(vec![rs_key().public_key()]).unwrap())
            .unwrap();
        t.add_confirmation_server(CS, Jwks::new(vec![cs_key().public_key()]).unwrap())
            .unwrap();
        t
    }

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 7, h, m, 0).unwrap()
    }

    /// A decided document with a private value, and the statement of its
    /// redacted evidence.
    fn decided() -> (String, RedactedEvidence) {
        let signed = sign_resource(payload().as_bytes(), &rs_key()).unwrap();
        let verified =
            verify_resource(signed.as_bytes(), &trust(), &Context::at(at(10, 5))).unwrap();
        let collected: IndexMap<String, String> =
            [("account".to_owned(), "12345678".to_owned())].into();
        let document = countersign(
            &verified,
            &cs_key(),
            DecisionInput {
                decision: Decision::Accept,
                sub: "alice",
                also_known_as: &[],
                auth_time: 0,
                amr: &["pwd".to_owned()],
                channel: Channel::Html,
                view_text: "shown",
                collected: Some(collected),
                passkey: None,
            },
            at(10, 5),
        )
        .unwrap();
        let split = split_decided(document.as_bytes()).unwrap();
        let evidence = RedactedEvidence {
            resource_signed: split.resource_signed,
            decision: Decision::Accept,
            decided_at: at(10, 5),
            sub: "alice".into(),
            collected: [("account".to_owned(), b64::sha256(b"k|12345678"))].into(),
            confirmation_protected: b64::sha256(split.confirmation_protected_b64.as_bytes()),
            log_digest: Some(b64::sha256(document.as_bytes())),
        };
        (document, evidence)
    }

    /// `statement` signed by `key` under `header` (its exact JSON text).
    fn signed_with(statement: &str, key: &SigningKey, header: &str) -> Vec<u8> {
        let payload_b64 = b64::encode(statement);
        let (p, s) = sign_entry(key, header, &payload_b64);
        assemble(&payload_b64, &[(&p, &s)]).into_bytes()
    }

    fn read(bytes: &[u8]) -> Result<VerifiedEvidence, EvidenceError> {
        SignedEvidence::parse(bytes)?.verify(&trust())
    }

    fn statement_edited(
        evidence: &RedactedEvidence,
        f: impl FnOnce(&mut Map<String, Value>),
    ) -> Vec<u8> {
        let mut v: Map<String, Value> = serde_json::from_str(&evidence.to_json()).unwrap();
        f(&mut v);
        Value::Object(v).to_string().into_bytes()
    }

    /// The evidence file as a JSON object, changed by `f`.
    fn file_edited(file: &str, f: impl FnOnce(&mut Map<String, Value>)) -> Vec<u8> {
        let mut v: Map<String, Value> = serde_json::from_str(file).unwrap();
        f(&mut v);
        Value::Object(v).to_string().into_bytes()
    }

    #[test]
    fn evidence_signs_reads_back_and_verifies() {
        let (document, evidence) = decided();
        let file = evidence.sign(&cs_key());
        assert!(!file.contains("12345678"), "{file}");
        assert!(is_redacted(file.as_bytes()));
        assert!(is_redacted(evidence.to_json().as_bytes()));
        assert!(!is_redacted(document.as_bytes()));
        // The payload is the statement's exact bytes, under the evidence header.
        let raw =
            RawDocument::parse_within(file.as_bytes(), MAX_EVIDENCE_BYTES, MAX_STATEMENT_BYTES)
                .unwrap();
        assert_eq!(raw.payload, evidence.to_json().as_bytes());
        assert_eq!(
            b64::decode(&raw.signatures[0].protected_b64).unwrap(),
            br#"{"alg":"EdDSA","kid":"cs","typ":"cheq-evidence+jws","cheq_role":"evidence"}"#
        );
        let signed = SignedEvidence::parse(file.as_bytes()).unwrap();
        assert_eq!(signed.statement(), &evidence);
        assert_eq!(signed.kid(), "cs");
        let verified = signed.verify(&trust()).unwrap();
        assert_eq!(verified.cheq().resource_kid(), "rs");
        assert_eq!(verified.confirmation_kid(), "cs");
        assert_eq!(verified.evidence().sub, "alice");
        assert_eq!(
            verified.evidence().log_entry().unwrap().to_bytes(),
            Entry::decision(document.as_bytes()).to_bytes()
        );
        assert!(verified.clone().expect(Decision::Accept).is_ok());
        assert_eq!(
            verified.expect(Decision::Reject).unwrap_err(),
            EvidenceError::DecisionMismatch {
                expected: Decision::Reject,
                found: Decision::Accept
            }
        );
        // The statement reads back as written.
        assert_eq!(
            RedactedEvidence::parse(evidence.to_json().as_bytes()).unwrap(),
            evidence
        );
    }

    /// The reviewer's forgery: an acceptance turned into a rejection, its
    /// digests emptied, the signature kept.
    #[test]
    fn an_altered_statement_fails_the_signature() {
        let (_, evidence) = decided();
        let file = evidence.sign(&cs_key());
        let mut forged = evidence.clone();
        forged.decision = Decision::Reject;
        forged.collected.clear();
        let forged_file = file_edited(&file, |v| {
            v["payload"] = json!(b64::encode(forged.to_json()));
        });
        assert_eq!(
            read(&forged_file).unwrap_err(),
            EvidenceError::BadSignature { kid: "cs".into() }
        );
        // The same forgery with another key under the service's kid.
        let impostor = key("cs", 9);
        let resigned = forged.sign(&impostor);
        assert_eq!(
            read(resigned.as_bytes()).unwrap_err(),
            EvidenceError::BadSignature { kid: "cs".into() }
        );
        // The signature moved onto another CHEQ's statement.
        let mut other = evidence.clone();
        let other_payload = payload().replace("Q3ONTdR0soidHLd4ue3DgQ", "AAAAAAAAAAAAAAAAAAAAAA");
        other.resource_signed = sign_resource(other_payload.as_bytes(), &rs_key()).unwrap();
        let other_file = other.sign(&cs_key());
        let moved = file_edited(&other_file, |v| {
            let mine: Map<String, Value> = serde_json::from_str(&file).unwrap();
            v["signatures"] = mine["signatures"].clone();
        });
        assert!(read(other_file.as_bytes()).is_ok());
        assert_eq!(
            read(&moved).unwrap_err(),
            EvidenceError::BadSignature { kid: "cs".into() }
        );
    }

    #[test]
    fn only_the_confirmation_server_of_the_cheq_signs_its_evidence() {
        let (_, evidence) = decided();
        // The resource server makes a file: its key is not a confirmation key.
        let by_rs = evidence.sign(&rs_key());
        assert_eq!(
            read(by_rs.as_bytes()).unwrap_err(),
            EvidenceError::UntrustedKey {
                kid: "rs".into(),
                confirmation_uri: CS.into()
            }
        );
        // Nobody's key.
        assert_eq!(
            read(evidence.sign(&key("stranger", 5)).as_bytes()).unwrap_err(),
            EvidenceError::UntrustedKey {
                kid: "stranger".into(),
                confirmation_uri: CS.into()
            }
        );
        // Another confirmation server, trusted for its own origin only.
        let other = key("other", 6);
        let mut t = trust();
        t.add_confirmation_server(
            "https://other.example",
            Jwks::new(vec![other.public_key()]).unwrap(),
        )
        .unwrap();
        assert_eq!(
            SignedEvidence::parse(evidence.sign(&other).as_bytes())
                .unwrap()
                .verify(&t)
                .unwrap_err(),
            EvidenceError::AnotherOrigin {
                kid: "other".into(),
                origin: "https://other.example".into(),
                confirmation_uri: CS.into()
            }
        );
        // An untrusted resource server's CHEQ fails as before, though signed.
        let mut only_cs = TrustStore::new();
        only_cs
            .add_confirmation_server(CS, Jwks::new(vec![cs_key().public_key()]).unwrap())
            .unwrap();
        assert!(matches!(
            SignedEvidence::parse(evidence.sign(&cs_key()).as_bytes())
                .unwrap()
                .verify(&only_cs),
            Err(EvidenceError::ResourceSigned(
                VerifyError::UntrustedResourceKey { .. }
            ))
        ));
    }

    #[test]
    fn unsigned_or_missing_signatures_are_refused() {
        let (_, evidence) = decided();
        // The bare statement (the stored form).
        assert_eq!(
            SignedEvidence::parse(evidence.to_json().as_bytes()).unwrap_err(),
            EvidenceError::Unsigned
        );
        let file = evidence.sign(&cs_key());
        let none = file_edited(&file, |v| {
            v.remove("signatures");
        });
        assert_eq!(
            SignedEvidence::parse(&none).unwrap_err(),
            EvidenceError::SignatureMissing
        );
        let empty = file_edited(&file, |v| {
            v["signatures"] = json!([]);
        });
        assert_eq!(
            SignedEvidence::parse(&empty).unwrap_err(),
            EvidenceError::SignatureMissing
        );
        let two = file_edited(&file, |v| {
            let s = v["signatures"][0].clone();
            v["signatures"] = json!([s.clone(), s]);
        });
        assert_eq!(
            SignedEvidence::parse(&two).unwrap_err(),
            EvidenceError::SignatureCount(2)
        );
        let unprotected = file_edited(&file, |v| {
            v["signatures"][0]["header"] = json!({});
        });
        assert!(matches!(
            SignedEvidence::parse(&unprotected).unwrap_err(),
            EvidenceError::Envelope(VerifyError::UnprotectedHeader { .. })
        ));
    }

    #[test]
    fn each_wrong_header_has_its_error() {
        let (_, evidence) = decided();
        let statement = evidence.to_json();
        let cs = cs_key();
        let parse = |header: &str| {
            SignedEvidence::parse(&signed_with(&statement, &cs, header)).unwrap_err()
        };
        // A countersignature's header over the statement.
        assert_eq!(
            parse(
                r#"{"alg":"EdDSA","kid":"cs","typ":"cheq+jws","cheq_role":"confirmation","crit":["cheq_decision"],"cheq_decision":"reject"}"#
            ),
            EvidenceError::WrongRole {
                found: Some("confirmation".into())
            }
        );
        assert_eq!(
            parse(r#"{"alg":"EdDSA","kid":"cs","typ":"cheq-evidence+jws"}"#),
            EvidenceError::WrongRole { found: None }
        );
        assert_eq!(
            parse(r#"{"alg":"EdDSA","kid":"cs","typ":"cheq+jws","cheq_role":"evidence"}"#),
            EvidenceError::WrongType
        );
        assert_eq!(
            parse(
                r#"{"alg":"EdDSA","kid":"cs","typ":"cheq-evidence+jws","cheq_role":"evidence","jwk":{}}"#
            ),
            EvidenceError::HeaderMember("jwk".into())
        );
        assert_eq!(
            parse(r#"{"alg":"HS256","kid":"cs","typ":"cheq-evidence+jws","cheq_role":"evidence"}"#),
            EvidenceError::AlgorithmNotAllowed("HS256".into())
        );
        assert_eq!(
            parse(r#"{"alg":"EdDSA","kid":"","typ":"cheq-evidence+jws","cheq_role":"evidence"}"#),
            EvidenceError::MissingKid
        );
        // A header naming ES256 over the service's Ed25519 key.
        let es = SignedEvidence::parse(&signed_with(
            &statement,
            &cs,
            r#"{"alg":"ES256","kid":"cs","typ":"cheq-evidence+jws","cheq_role":"evidence"}"#,
        ))
        .unwrap();
        assert_eq!(
            es.verify(&trust()).unwrap_err(),
            EvidenceError::AlgorithmKeyMismatch { kid: "cs".into() }
        );
    }

    /// The §5 verifiers never take the evidence signature for a resource
    /// signature or a countersignature, even over a CHEQ's own payload.
    #[test]
    fn section_5_verifiers_refuse_the_evidence_header() {
        let (document, _) = decided();
        let cs = cs_key();
        let raw = RawDocument::parse(document.as_bytes()).unwrap();
        let payload_b64 = raw.payload_b64.to_string();
        let (p, s) = sign_entry(&cs, &header_json("cs"), &payload_b64);
        // As a resource signature (with the CS's key trusted for the RS too).
        let mut t = trust();
        t.add_resource_server(RS, Jwks::new(vec![cs.public_key()]).unwrap())
            .unwrap();
        let as_resource = assemble(&payload_b64, &[(&p, &s)]);
        assert_eq!(
            verify_resource(as_resource.as_bytes(), &t, &Context::at(at(10, 5))).unwrap_err(),
            VerifyError::BadTyp { index: 0 }
        );
        // As a countersignature: the CHEQ's resource signature, then
        // (protected, signature) as the second.
        let rs = &raw.signatures[0];
        let countersigned = |p: &str, s: &str| {
            let as_confirmation = assemble(
                &payload_b64,
                &[(&rs.protected_b64, &rs.signature_b64), (p, s)],
            );
            verify_decision(
                as_confirmation.as_bytes(),
                &trust(),
                None,
                &Context::at(at(10, 5)),
            )
            .unwrap_err()
        };
        assert_eq!(countersigned(&p, &s), VerifyError::BadTyp { index: 1 });
        // Its typ alone would not pass either: the role is refused.
        let header = r#"{"alg":"EdDSA","kid":"cs","typ":"cheq+jws","cheq_role":"evidence"}"#;
        let (p, s) = sign_entry(&cs, header, &payload_b64);
        assert_eq!(countersigned(&p, &s), VerifyError::BadRole { index: 1 });
    }

    #[test]
    fn a_wrong_key_or_an_altered_payload_fails_the_resource_signature() {
        let (_, evidence) = decided();
        let mut t = TrustStore::new();
        t.add_resource_server(RS, Jwks::new(vec![key("rs", 9).public_key()]).unwrap())
            .unwrap();
        t.add_confirmation_server(CS, Jwks::new(vec![cs_key().public_key()]).unwrap())
            .unwrap();
        let file = evidence.sign(&cs_key());
        assert!(matches!(
            SignedEvidence::parse(file.as_bytes()).unwrap().verify(&t),
            Err(EvidenceError::ResourceSigned(
                VerifyError::BadSignature { .. }
            ))
        ));
        // Another payload under the same resource signature, signed as
        // evidence by the service all the same.
        let other = payload().replace("ACME", "EVIL");
        let mut altered = evidence.clone();
        altered.resource_signed = altered
            .resource_signed
            .replace(&b64::encode(payload()), &b64::encode(other));
        assert_ne!(altered.resource_signed, evidence.resource_signed);
        assert!(matches!(
            read(altered.sign(&cs_key()).as_bytes()),
            Err(EvidenceError::ResourceSigned(
                VerifyError::BadSignature { .. }
            ))
        ));
    }

    #[test]
    fn the_decision_time_must_be_within_the_cheqs_lifetime() {
        let (_, mut evidence) = decided();
        evidence.decided_at = at(12, 0);
        assert!(matches!(
            read(evidence.sign(&cs_key()).as_bytes()),
            Err(EvidenceError::DecidedAfterExpiry { .. })
        ));
        evidence.decided_at = at(9, 0);
        assert!(matches!(
            read(evidence.sign(&cs_key()).as_bytes()),
            Err(EvidenceError::DecidedBeforeDate { .. })
        ));
    }

    #[test]
    fn the_collected_names_must_fit_the_cheq() {
        let (_, evidence) = decided();
        let digest = evidence.confirmation_protected.clone();
        let mut e = evidence.clone();
        e.collected.insert("payee".into(), digest.clone());
        assert_eq!(
            read(e.sign(&cs_key()).as_bytes()).unwrap_err(),
            EvidenceError::CollectedNotAnInput("payee".into())
        );
        let mut e = evidence.clone();
        e.collected.clear();
        assert_eq!(
            read(e.sign(&cs_key()).as_bytes()).unwrap_err(),
            EvidenceError::RequiredInputMissing("account".into())
        );
        let mut e = evidence.clone();
        e.decision = Decision::Reject;
        assert_eq!(
            read(e.sign(&cs_key()).as_bytes()).unwrap_err(),
            EvidenceError::CollectedOnReject
        );
    }

    #[test]
    fn each_malformed_member_has_its_error() {
        let (_, evidence) = decided();
        let parse = |bytes: Vec<u8>| RedactedEvidence::parse(&bytes).unwrap_err();
        for m in MEMBERS {
            let err = parse(statement_edited(&evidence, |v| {
                v.remove(m);
            }));
            assert_eq!(err, EvidenceError::MissingMember(m), "{m}");
        }
        // A member set to a value the parser refuses, and the error that names it.
        let cases = [
            (
                "format",
                json!("cheq-redacted-evidence/v2"),
                EvidenceError::UnknownVersion("cheq-redacted-evidence/v2".into()),
            ),
            (
                "format",
                json!("something-else/v1"),
                EvidenceError::UnknownFormat("something-else/v1".into()),
            ),
            (
                "extra",
                json!(1),
                EvidenceError::UnexpectedMember("extra".into()),
            ),
            (
                "decision",
                json!("maybe"),
                bad("decision", "is not \"accept\" or \"reject\""),
            ),
            (
                "decided_at",
                json!("yesterday"),
                bad("decided_at", "is not an RFC 3339 time"),
            ),
            ("sub", json!(""), bad("sub", "is not a non-empty string")),
            (
                "resource_signed",
                json!("a string"),
                bad("resource_signed", "is not a JWS object"),
            ),
            (
                "collected_hmac_sha256",
                json!({"account": "short"}),
                EvidenceError::BadDigest("account".into()),
            ),
            (
                "log_digest",
                json!(7),
                EvidenceError::BadDigest("log_digest".into()),
            ),
        ];
        for (m, value, expected) in cases {
            let err = parse(statement_edited(&evidence, |v| {
                v.insert(m.into(), value);
            }));
            assert_eq!(err, expected, "{m}");
        }
        // The older shape, and a document that is not JSON.
        let old = br#"{"redacted":"old","resource_signed":{}}"#;
        assert_eq!(parse(old.to_vec()), EvidenceError::Unversioned);
        assert_eq!(
            SignedEvidence::parse(old).unwrap_err(),
            EvidenceError::Unversioned
        );
        assert!(matches!(
            parse(b"{\"format\":1,\"format\":2}".to_vec()),
            EvidenceError::Json(JsonError::DuplicateMember(_))
        ));
        // A statement of an unknown version, bare or signed.
        let v2 = statement_edited(&evidence, |v| {
            v.insert("format".into(), json!("cheq-redacted-evidence/v2"));
        });
        assert_eq!(
            SignedEvidence::parse(&v2).unwrap_err(),
            EvidenceError::UnknownVersion("cheq-redacted-evidence/v2".into())
        );
        let signed_v2 = signed_with(
            std::str::from_utf8(&v2).unwrap(),
            &cs_key(),
            &header_json("cs"),
        );
        assert!(is_redacted(&signed_v2));
        assert_eq!(
            SignedEvidence::parse(&signed_v2).unwrap_err(),
            EvidenceError::UnknownVersion("cheq-redacted-evidence/v2".into())
        );
        // A resource-signed CHEQ that is not one.
        let mut broken = evidence.clone();
        broken.resource_signed = json!({"payload": "x"}).to_string();
        assert!(matches!(
            read(broken.sign(&cs_key()).as_bytes()),
            Err(EvidenceError::ResourceSigned(_))
        ));
    }

    #[test]
    fn a_statement_beyond_the_limit_is_refused() {
        let (_, mut evidence) = decided();
        evidence.sub = "a".repeat(MAX_STATEMENT_BYTES);
        let file = evidence.sign(&cs_key());
        assert!(file.len() <= MAX_EVIDENCE_BYTES);
        assert!(matches!(
            SignedEvidence::parse(file.as_bytes()).unwrap_err(),
            EvidenceError::TooLarge(n) if n > MAX_STATEMENT_BYTES
        ));
    }

    #[test]
    fn no_log_digest_names_no_entry() {
        let (_, mut evidence) = decided();
        evidence.log_digest = None;
        let read = SignedEvidence::parse(evidence.sign(&cs_key()).as_bytes()).unwrap();
        assert_eq!(read.statement().log_digest, None);
        assert_eq!(
            read.statement().log_entry().unwrap_err(),
            EvidenceError::NoLogEntry
        );
    }

    #[test]
    fn only_a_decided_document_splits() {
        let signed = sign_resource(payload().as_bytes(), &rs_key()).unwrap();
        assert!(matches!(
            split_decided(signed.as_bytes()),
            Err(EvidenceError::NotDecided(VerifyError::SignatureCount {
                expected: 2,
                found: 1
            }))
        ));
        assert!(matches!(
            split_decided(b"not json"),
            Err(EvidenceError::NotDecided(_))
        ));
    }
}
