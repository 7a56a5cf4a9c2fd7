//! Redacted evidence of a decision (PROTOCOL.md §8.1): what a confirmation
//! service keeps, and gives its user, of a decided document whose
//! confirmation signature carried values the user marked private, once the
//! document is delivered and the values are gone.
//!
//! It is a JSON object, `format` `cheq-redacted-evidence/v1`, holding what
//! can still be proven: the resource-signed CHEQ (JWS General JSON, the
//! resource server's signature only), the decision and when it was made,
//! the names of the collected values with a keyed digest of each, a keyed
//! digest of the withheld confirmation header, and the log digest of the
//! document as delivered (the `<D>` of its `cheq-decision/v1 <D>` entry,
//! §15.1), or `null` where the service keeps no log.
//!
//! Reading it is a chain of named checks, each with its own error:
//!
//! 1. [`RedactedEvidence::parse`]: strict JSON (no duplicate member), the
//!    format and its version, every member present, typed and nothing
//!    else, every digest 32 bytes of canonical base64url;
//! 2. [`RedactedEvidence::verify`]: the resource-signed CHEQ passes §5
//!    rules 1, 2 and 4 under the caller's trust, its times checked at the
//!    decision time the evidence states (made within the CHEQ's lifetime);
//!    the collected names are inputs the CHEQ asks for, and an acceptance
//!    names every required one (rule 3, as far as names go).
//!
//! What it cannot prove is said by [`NOT_CHECKED`]: the confirmation
//! signature is not in it, so that no one can test a guess at a private
//! value against it. No I/O here.

use crate::cheq::json::{self, JsonError, Node, Object};
use crate::cheq::Decision;
use crate::sign::jws::{write_document, RawDocument, MAX_DOCUMENT_BYTES};
use crate::sign::{verify_resource, Context, TrustStore, VerifiedCheq, VerifyError};
use crate::tlog::Entry;
use chrono::{DateTime, SecondsFormat, Utc};
use indexmap::IndexMap;
use serde_json::{json, Map, Value};

/// The format this module writes and reads.
pub const FORMAT: &str = "cheq-redacted-evidence/v1";
/// The family of formats: anything else under it is a version not known here.
const FAMILY: &str = "cheq-redacted-evidence/";
/// The largest evidence file read: a whole signed CHEQ and its digests.
pub const MAX_EVIDENCE_BYTES: usize = MAX_DOCUMENT_BYTES + 64 * 1024;
/// The length of a SHA-256 or HMAC-SHA256 digest in unpadded base64url.
const DIGEST_CHARS: usize = 43;

/// The words an evidence file carries in its `withheld` member.
pub const WITHHELD: &str = "the confirmation signature: it signed values the user marked private (PROTOCOL.md §8), which the confirmation service keeps only as keyed digests (HMAC-SHA256 under a key of its own)";

/// What a check of redacted evidence cannot establish, in a verifier's words.
pub const NOT_CHECKED: &str = "the confirmation signature is withheld with the private values it signed, so the confirmation service's signature, its decision claims and the values themselves cannot be checked from this file; the log entry names the document as delivered (cheq audit --document checks it is in the log)";

/// The members of a v1 evidence file, in the order written.
const MEMBERS: [&str; 8] = [
    "format",
    "withheld",
    "decision",
    "decided_at",
    "resource_signed",
    "collected_hmac_sha256",
    "confirmation_protected_hmac_sha256",
    "log_digest",
];

/// Why a file is not good redacted evidence; each check its own variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvidenceError {
    #[error("redacted evidence: {0}")]
    Json(JsonError),
    #[error("redacted evidence in the older shape, with no \"format\": download it again from the history, which serves the current format ({FORMAT})")]
    Unversioned,
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

/// Does `bytes` look like redacted evidence rather than a signed CHEQ: a JSON
/// object with a `format`, a `redacted` (the older shape) or a
/// `resource_signed` member? Anything else is left to the JWS reader.
pub fn is_redacted(bytes: &[u8]) -> bool {
    json::parse_node_object(bytes, MAX_EVIDENCE_BYTES).is_ok_and(|o| {
        ["format", "redacted", "resource_signed"]
            .iter()
            .any(|m| o.contains_key(m))
    })
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

/// Redacted evidence, read but not yet verified (or made to be written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedactedEvidence {
    /// The resource-signed CHEQ (JWS General JSON, one signature).
    pub resource_signed: String,
    pub decision: Decision,
    /// When the decision was made, as the confirmation service states it.
    pub decided_at: DateTime<Utc>,
    /// Each collected value's name, and its keyed digest.
    pub collected: IndexMap<String, String>,
    /// The keyed digest of the confirmation signature's protected header.
    pub confirmation_protected: String,
    /// The SHA-256 (base64url) of the document as delivered, as logged.
    pub log_digest: Option<String>,
}

impl RedactedEvidence {
    /// The evidence file's text.
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
            "resource_signed": resource_signed,
            "collected_hmac_sha256": collected,
            "confirmation_protected_hmac_sha256": self.confirmation_protected,
            "log_digest": self.log_digest,
        })
        .to_string()
    }

    /// Check 1: reads an evidence file (see the module docs).
    pub fn parse(bytes: &[u8]) -> Result<Self, EvidenceError> {
        let o = json::parse_node_object(bytes, MAX_EVIDENCE_BYTES).map_err(EvidenceError::Json)?;
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
            collected,
            confirmation_protected,
            log_digest,
        })
    }

    /// Check 2: verifies what the evidence can prove under `trust` (see the
    /// module docs).
    pub fn verify(self, trust: &TrustStore) -> Result<VerifiedEvidence, EvidenceError> {
        let cheq = check_resource_signed(&self, trust)?;
        check_collected(&self, &cheq)?;
        Ok(VerifiedEvidence {
            cheq,
            evidence: self,
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

/// Redacted evidence whose every check held.
#[derive(Debug, Clone)]
pub struct VerifiedEvidence {
    cheq: VerifiedCheq,
    evidence: RedactedEvidence,
}

impl VerifiedEvidence {
    /// The resource-signed CHEQ, verified.
    pub fn cheq(&self) -> &VerifiedCheq {
        &self.cheq
    }

    /// The evidence as read.
    pub fn evidence(&self) -> &RedactedEvidence {
        &self.evidence
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

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn bad(member: &'static str, reason: &'static str) -> EvidenceError {
    EvidenceError::BadMember { member, reason }
}

fn member<'o, 'a>(o: &'o Object<'a>, name: &'static str) -> Result<&'o Node<'a>, EvidenceError> {
    o.get(name).ok_or(EvidenceError::MissingMember(name))
}

/// The format names this one, or says what it is instead.
fn check_format(o: &Object<'_>) -> Result<(), EvidenceError> {
    let Some(format) = o.get("format") else {
        if o.contains_key("redacted") {
            return Err(EvidenceError::Unversioned);
        }
        return Err(EvidenceError::MissingMember("format"));
    };
    match format.as_str() {
        Some(FORMAT) => Ok(()),
        Some(f) if f.starts_with(FAMILY) => Err(EvidenceError::UnknownVersion(f.to_owned())),
        Some(f) => Err(EvidenceError::UnknownFormat(f.to_owned())),
        None => Err(bad("format", "is not a string")),
    }
}

/// A digest: 32 bytes, canonical unpadded base64url.
fn digest_of(name: &str, node: Option<&Node<'_>>) -> Result<String, EvidenceError> {
    match node.and_then(Node::as_str) {
        Some(d) if d.len() == DIGEST_CHARS && crate::sign::b64::decode(d).is_some() => {
            Ok(d.to_owned())
        }
        _ => Err(EvidenceError::BadDigest(name.to_owned())),
    }
}

/// The resource-signed CHEQ passes rules 1, 2 and 4, its lifetime checked
/// at the decision time the evidence states.
fn check_resource_signed(
    evidence: &RedactedEvidence,
    trust: &TrustStore,
) -> Result<VerifiedCheq, EvidenceError> {
    let at = rfc3339(evidence.decided_at);
    verify_resource(
        evidence.resource_signed.as_bytes(),
        trust,
        &Context::at(evidence.decided_at),
    )
    .map_err(|e| match e {
        VerifyError::Expired { expires } => EvidenceError::DecidedAfterExpiry {
            decided_at: at,
            expires: rfc3339(expires),
        },
        VerifyError::DatedInFuture { date, .. } => EvidenceError::DecidedBeforeDate {
            decided_at: at,
            date,
        },
        e => EvidenceError::ResourceSigned(e),
    })
}

/// The collected names are inputs the CHEQ asks for; an acceptance names
/// every required one, a rejection none.
fn check_collected(evidence: &RedactedEvidence, cheq: &VerifiedCheq) -> Result<(), EvidenceError> {
    let parameters = &cheq.cheq().parameters;
    for name in evidence.collected.keys() {
        if !parameters
            .iter()
            .any(|p| &p.name == name && p.input.is_some())
        {
            return Err(EvidenceError::CollectedNotAnInput(name.clone()));
        }
    }
    match evidence.decision {
        Decision::Accept => match cheq
            .cheq()
            .missing_required_input(Some(&evidence.collected))
        {
            Some(p) => Err(EvidenceError::RequiredInputMissing(p.name.clone())),
            None => Ok(()),
        },
        Decision::Reject if !evidence.collected.is_empty() => Err(EvidenceError::CollectedOnReject),
        Decision::Reject => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::sign::{countersign, sign_resource, Channel, DecisionInput, Jwks, SigningKey};
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

    fn trust_in(rs: &SigningKey) -> TrustStore {
        let mut t = TrustStore::new();
        t.add_resource_server(RS, Jwks::new(vec![rs.public_key()]).unwrap())
            .unwrap();
        t
    }

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 7, h, m, 0).unwrap()
    }

    /// A decided document with a private value, and its redacted evidence.
    fn decided(rs: &SigningKey) -> (String, RedactedEvidence) {
        let signed = sign_resource(payload().as_bytes(), rs).unwrap();
        let verified =
            verify_resource(signed.as_bytes(), &trust_in(rs), &Context::at(at(10, 5))).unwrap();
        let collected: IndexMap<String, String> =
            [("account".to_owned(), "12345678".to_owned())].into();
        let document = countersign(
            &verified,
            &key("cs", 2),
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
            collected: [(
                "account".to_owned(),
                crate::sign::b64::sha256(b"k|12345678"),
            )]
            .into(),
            confirmation_protected: crate::sign::b64::sha256(
                split.confirmation_protected_b64.as_bytes(),
            ),
            log_digest: Some(crate::sign::b64::sha256(document.as_bytes())),
        };
        (document, evidence)
    }

    fn edited(evidence: &RedactedEvidence, f: impl FnOnce(&mut Map<String, Value>)) -> Vec<u8> {
        let mut v: Map<String, Value> = serde_json::from_str(&evidence.to_json()).unwrap();
        f(&mut v);
        Value::Object(v).to_string().into_bytes()
    }

    #[test]
    fn evidence_reads_back_and_verifies() {
        let rs = key("rs", 1);
        let (document, evidence) = decided(&rs);
        let text = evidence.to_json();
        assert!(!text.contains("12345678"), "{text}");
        assert!(is_redacted(text.as_bytes()));
        assert!(!is_redacted(document.as_bytes()));
        let read = RedactedEvidence::parse(text.as_bytes()).unwrap();
        assert_eq!(read, evidence);
        let verified = read.verify(&trust_in(&rs)).unwrap();
        assert_eq!(verified.cheq().resource_kid(), "rs");
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
    }

    #[test]
    fn a_wrong_key_or_an_altered_payload_fails_the_resource_signature() {
        let rs = key("rs", 1);
        let (_, evidence) = decided(&rs);
        let impostor = key("rs", 9);
        assert!(matches!(
            evidence.clone().verify(&trust_in(&impostor)),
            Err(EvidenceError::ResourceSigned(
                VerifyError::BadSignature { .. }
            ))
        ));
        assert!(matches!(
            evidence.clone().verify(&TrustStore::new()),
            Err(EvidenceError::ResourceSigned(
                VerifyError::UntrustedResourceKey { .. }
            ))
        ));
        // Another payload under the same signature.
        let other = payload().replace("ACME", "EVIL");
        let mut altered = evidence.clone();
        let original = crate::sign::b64::encode(payload());
        altered.resource_signed = altered
            .resource_signed
            .replace(&original, &crate::sign::b64::encode(other));
        assert_ne!(altered.resource_signed, evidence.resource_signed);
        let bytes = altered.to_json();
        assert!(matches!(
            RedactedEvidence::parse(bytes.as_bytes())
                .unwrap()
                .verify(&trust_in(&rs)),
            Err(EvidenceError::ResourceSigned(
                VerifyError::BadSignature { .. }
            ))
        ));
    }

    #[test]
    fn the_decision_time_must_be_within_the_cheqs_lifetime() {
        let rs = key("rs", 1);
        let (_, mut evidence) = decided(&rs);
        evidence.decided_at = at(12, 0);
        assert!(matches!(
            evidence.clone().verify(&trust_in(&rs)),
            Err(EvidenceError::DecidedAfterExpiry { .. })
        ));
        evidence.decided_at = at(9, 0);
        assert!(matches!(
            evidence.verify(&trust_in(&rs)),
            Err(EvidenceError::DecidedBeforeDate { .. })
        ));
    }

    #[test]
    fn the_collected_names_must_fit_the_cheq() {
        let rs = key("rs", 1);
        let (_, evidence) = decided(&rs);
        let digest = evidence.confirmation_protected.clone();
        let mut e = evidence.clone();
        e.collected.insert("payee".into(), digest.clone());
        assert_eq!(
            e.verify(&trust_in(&rs)).unwrap_err(),
            EvidenceError::CollectedNotAnInput("payee".into())
        );
        let mut e = evidence.clone();
        e.collected.clear();
        assert_eq!(
            e.verify(&trust_in(&rs)).unwrap_err(),
            EvidenceError::RequiredInputMissing("account".into())
        );
        let mut e = evidence.clone();
        e.decision = Decision::Reject;
        assert_eq!(
            e.verify(&trust_in(&rs)).unwrap_err(),
            EvidenceError::CollectedOnReject
        );
    }

    #[test]
    fn each_malformed_member_has_its_error() {
        let rs = key("rs", 1);
        let (_, evidence) = decided(&rs);
        let parse = |bytes: Vec<u8>| RedactedEvidence::parse(&bytes).unwrap_err();
        for m in MEMBERS {
            let err = parse(edited(&evidence, |v| {
                v.remove(m);
            }));
            assert_eq!(err, EvidenceError::MissingMember(m), "{m}");
        }
        assert_eq!(
            parse(edited(&evidence, |v| {
                v.insert("format".into(), json!("cheq-redacted-evidence/v2"));
            })),
            EvidenceError::UnknownVersion("cheq-redacted-evidence/v2".into())
        );
        assert_eq!(
            parse(edited(&evidence, |v| {
                v.insert("format".into(), json!("something-else/v1"));
            })),
            EvidenceError::UnknownFormat("something-else/v1".into())
        );
        assert_eq!(
            parse(edited(&evidence, |v| {
                v.insert("extra".into(), json!(1));
            })),
            EvidenceError::UnexpectedMember("extra".into())
        );
        assert_eq!(
            parse(edited(&evidence, |v| {
                v.insert("decision".into(), json!("maybe"));
            })),
            bad("decision", "is not \"accept\" or \"reject\"")
        );
        assert_eq!(
            parse(edited(&evidence, |v| {
                v.insert("decided_at".into(), json!("yesterday"));
            })),
            bad("decided_at", "is not an RFC 3339 time")
        );
        assert_eq!(
            parse(edited(&evidence, |v| {
                v.insert("resource_signed".into(), json!("a string"));
            })),
            bad("resource_signed", "is not a JWS object")
        );
        assert_eq!(
            parse(edited(&evidence, |v| {
                v.insert("collected_hmac_sha256".into(), json!({"account": "short"}));
            })),
            EvidenceError::BadDigest("account".into())
        );
        assert_eq!(
            parse(edited(&evidence, |v| {
                v.insert("log_digest".into(), json!(7));
            })),
            EvidenceError::BadDigest("log_digest".into())
        );
        // The older shape, and a document that is not JSON.
        assert_eq!(
            parse(br#"{"redacted":"old","resource_signed":{}}"#.to_vec()),
            EvidenceError::Unversioned
        );
        assert!(matches!(
            parse(b"{\"format\":1,\"format\":2}".to_vec()),
            EvidenceError::Json(JsonError::DuplicateMember(_))
        ));
        // A resource-signed CHEQ that is not one.
        let broken = edited(&evidence, |v| {
            v.insert("resource_signed".into(), json!({"payload": "x"}));
        });
        assert!(matches!(
            RedactedEvidence::parse(&broken)
                .unwrap()
                .verify(&trust_in(&rs)),
            Err(EvidenceError::ResourceSigned(_))
        ));
    }

    #[test]
    fn no_log_digest_names_no_entry() {
        let rs = key("rs", 1);
        let (_, mut evidence) = decided(&rs);
        evidence.log_digest = None;
        let read = RedactedEvidence::parse(evidence.to_json().as_bytes()).unwrap();
        assert_eq!(read.log_digest, None);
        assert_eq!(read.log_entry().unwrap_err(), EvidenceError::NoLogEntry);
    }

    #[test]
    fn only_a_decided_document_splits() {
        let rs = key("rs", 1);
        let signed = sign_resource(payload().as_bytes(), &rs).unwrap();
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
