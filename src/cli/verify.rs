//! `cheq verify`: offline verification of a signed CHEQ (PROTOCOL.md §5,
//! rules 1–4), or of redacted evidence of a decision (§8.1).
//!
//! The stage is `--expect resource|accept|reject`, or, without it, follows the
//! number of signatures (1: resource-signed; 2: decided, either decision).
//! On success prints a JSON summary on stdout, with which key signed each
//! signature (`signed_by`: `kid`, and the `state` its publisher gave it);
//! on failure one line on stderr naming the rule. The TRUST file's keys may
//! be inline, in a `jwks_file` or at a `jwks_uri` ([`super::read_trust`]). Rule 5 (the nonce has not been decided before) needs a
//! nonce store and is not checked here; the summary says so.
//!
//! Redacted evidence (a file `crate::evidence::is_redacted` recognises) is
//! checked by the core ([`crate::evidence`]): the confirmation service's
//! signature over it, with the key the trust gives the origin of the
//! CHEQ's `confirmation uri`; the resource server's signature under the
//! same trust, its times at the decision time the file states; the
//! collected names against the CHEQ. The summary names what was checked,
//! what cannot be (the withheld confirmation signature), the decision, the
//! account, the collected values' digests and the log entry to audit.

use super::{now_or_current, parse_now, read_input, read_trust, write_out, CliError};
use crate::sign::jws::RawDocument;
use crate::sign::{verify_decision, verify_resource, Context, Decision};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};
use std::io::Write;
use std::path::PathBuf;

/// What the summary says about rule 5.
pub const REPLAY_NOTE: &str = "rule 5 (replay: the nonce has not been decided before) needs a nonce store and is not checked offline";

/// Verify a signed CHEQ offline (PROTOCOL.md §5 rules 1-4, and 6 for a passkey-bound decision).
///
/// Exit 0 and a JSON summary on stdout when every rule holds for the stage;
/// exit 1 and the failed rule on stderr otherwise. Rule 5 (replay) is not
/// checked: it needs the nonce store. Redacted evidence (§8.1) is checked
/// as far as it can be: the confirmation service's signature over it, then
/// what it says; the summary says what its withheld confirmation signature
/// leaves unchecked.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The TRUST file: keys trusted per resource- and confirmation-server origin.
    #[arg(long, value_name = "TRUST.json")]
    pub trust: PathBuf,
    /// The stage required; by default it follows the number of signatures
    /// (1: resource, 2: decided with either decision).
    #[arg(long, value_enum)]
    pub expect: Option<Stage>,
    /// Check expiry at this time (RFC 3339) instead of now.
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<DateTime<Utc>>,
    /// The signed CHEQ, or redacted evidence of a decision (PROTOCOL.md
    /// §8.1: signed by the confirmation service, its times checked at the
    /// decision time it states); `-` reads standard input.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

/// `--expect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Stage {
    /// Resource-signed only (one signature).
    Resource,
    /// Decided, accepted (two signatures).
    Accept,
    /// Decided, rejected (two signatures).
    Reject,
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let trust = read_trust(&args.trust)?;
    let document = read_input(&args.file)?;
    if crate::evidence::is_redacted(&document) {
        return redacted(&args, &trust, &document, out);
    }
    let now = now_or_current(args.now);
    let ctx = Context::at(now);
    let expect = match args.expect {
        Some(stage) => Some(stage),
        None => match RawDocument::parse(&document)?.signatures.len() {
            1 => Some(Stage::Resource),
            _ => None,
        },
    };
    let mut summary = Map::new();
    summary.insert("valid".into(), json!(true));
    match expect {
        Some(Stage::Resource) => {
            let v = verify_resource(&document, &trust, &ctx)?;
            let cheq = v.cheq();
            let f = v.fields();
            summary.insert("stage".into(), json!("resource"));
            summary.insert("kids".into(), json!({ "resource": v.resource_kid() }));
            let resource = trust.resource_key(&v.fields().resource_uri, v.resource_kid());
            summary.insert(
                "signed_by".into(),
                json!({ "resource": signer(v.resource_kid(), resource) }),
            );
            common(&mut summary, &cheq.operation, &cheq.operation_name, f);
        }
        other => {
            let expected = match other {
                Some(Stage::Accept) => Some(Decision::Accept),
                Some(Stage::Reject) => Some(Decision::Reject),
                _ => None,
            };
            let v = verify_decision(&document, &trust, expected, &ctx)?;
            let cheq = v.cheq();
            let c = v.claims();
            summary.insert("stage".into(), json!("decided"));
            summary.insert("decision".into(), json!(v.decision().as_str()));
            signers(
                &mut summary,
                &trust,
                v.fields(),
                v.resource_kid(),
                "confirmation",
                v.confirmation_kid(),
            );
            common(
                &mut summary,
                &cheq.operation,
                &cheq.operation_name,
                v.fields(),
            );
            summary.insert(
                "confirmation".into(),
                json!({
                    "sub": c.sub,
                    "iat": timestamp(c.iat),
                    "auth_time": auth_time(c.auth_time),
                    "amr": c.amr,
                    "channel": c.channel.as_str(),
                    "collected": c.collected.as_ref().map(|m| m.keys().collect::<Vec<_>>()),
                }),
            );
        }
    }
    summary.insert(
        "checked_at".into(),
        json!(now.to_rfc3339_opts(SecondsFormat::Secs, true)),
    );
    summary.insert("rules_checked".into(), json!([1, 2, 3, 4]));
    summary.insert("note".into(), json!(REPLAY_NOTE));
    let text = serde_json::to_string_pretty(&Value::Object(summary))
        .map_err(|e| CliError::Internal(e.to_string()))?;
    write_out(out, &text)?;
    write_out(out, "\n")
}

/// What a check of redacted evidence establishes, in the summary's words.
const REDACTED_CHECKED: [&str; 4] = [
    "the confirmation service's signature over this evidence (role \"evidence\"), with a key the trust file gives for the origin of the CHEQ's confirmation uri (as rule 2 for a countersignature): it states the decision, its time, the account, the digests and the log digest",
    "the resource server's signature over the CHEQ, with a key the trust file gives for its origin (rules 1, 2)",
    "the collected values' names are inputs the CHEQ asks for, and an acceptance names every required one (rule 3, names only: the countersignature that binds them is withheld)",
    "the CHEQ's members, and that the decision time the evidence states is within the CHEQ's lifetime (rule 4; --now does not apply)",
];

/// The rules of §5 [`REDACTED_CHECKED`] names, in part or in full.
const REDACTED_RULES: [u8; 4] = [1, 2, 3, 4];

/// Redacted evidence (§8.1): every check the core can make, then the summary.
fn redacted(
    args: &Args,
    trust: &crate::sign::TrustStore,
    bytes: &[u8],
    out: &mut dyn Write,
) -> Result<(), CliError> {
    use crate::evidence::{EvidenceError, SignedEvidence, FORMAT, NOT_CHECKED};
    let verified = SignedEvidence::parse(bytes)?.verify(trust)?;
    let verified = match args.expect {
        None => verified,
        Some(Stage::Resource) => return Err(EvidenceError::NotResourceSigned.into()),
        Some(Stage::Accept) => verified.expect(Decision::Accept)?,
        Some(Stage::Reject) => verified.expect(Decision::Reject)?,
    };
    let (v, e) = (verified.cheq(), verified.evidence());
    let f = v.fields();
    let decided_at = e.decided_at.to_rfc3339_opts(SecondsFormat::Secs, true);
    let mut summary = Map::new();
    summary.insert("valid".into(), json!(true));
    summary.insert("stage".into(), json!("decided (redacted evidence)"));
    summary.insert("format".into(), json!(FORMAT));
    summary.insert("decision".into(), json!(e.decision.as_str()));
    summary.insert("decided_at".into(), json!(decided_at));
    summary.insert("sub".into(), json!(e.sub));
    signers(
        &mut summary,
        trust,
        f,
        v.resource_kid(),
        "evidence",
        verified.confirmation_kid(),
    );
    common(
        &mut summary,
        &v.cheq().operation,
        &v.cheq().operation_name,
        f,
    );
    summary.insert("collected_hmac_sha256".into(), json!(e.collected));
    summary.insert(
        "collected_note".into(),
        json!("keyed digests (HMAC-SHA256 under the confirmation service's evidence key): only that service can test a value against them"),
    );
    summary.insert("log_digest".into(), json!(e.log_digest));
    summary.insert(
        "log_entry".into(),
        json!(e.log_entry().ok().map(|entry| {
            String::from_utf8_lossy(&entry.to_bytes())
                .trim_end()
                .to_owned()
        })),
    );
    summary.insert("checked".into(), json!(REDACTED_CHECKED));
    summary.insert("not_checked".into(), json!([NOT_CHECKED, REPLAY_NOTE]));
    summary.insert("checked_at".into(), json!(decided_at));
    summary.insert("rules_checked".into(), json!(REDACTED_RULES));
    let text = serde_json::to_string_pretty(&Value::Object(summary))
        .map_err(|e| CliError::Internal(e.to_string()))?;
    write_out(out, &text)?;
    write_out(out, "\n")
}

fn common(
    summary: &mut Map<String, Value>,
    operation: &str,
    operation_name: &str,
    f: &crate::cheq::CountersignFields,
) {
    summary.insert("operation".into(), json!(operation));
    summary.insert("operation name".into(), json!(operation_name));
    summary.insert("subject".into(), json!(f.subject));
    summary.insert("nonce".into(), json!(f.nonce));
    summary.insert("resource uri".into(), json!(f.resource_uri));
    summary.insert("confirmation uri".into(), json!(f.confirmation_uri));
    summary.insert(
        "date".into(),
        json!(f.date.to_rfc3339_opts(SecondsFormat::Secs, true)),
    );
    summary.insert(
        "expires".into(),
        json!(f.expires.to_rfc3339_opts(SecondsFormat::Secs, true)),
    );
}

/// `kids` and `signed_by` of a document the resource server signed and the
/// confirmation service signed in `role` (`confirmation` on a decided CHEQ,
/// `evidence` on redacted evidence), each key looked up in `trust` for the
/// origin of the CHEQ's URI that names its signer.
fn signers(
    summary: &mut Map<String, Value>,
    trust: &crate::sign::TrustStore,
    f: &crate::cheq::CountersignFields,
    resource_kid: &str,
    role: &str,
    confirmation_kid: &str,
) {
    let mut kids = Map::new();
    kids.insert("resource".into(), json!(resource_kid));
    kids.insert(role.into(), json!(confirmation_kid));
    summary.insert("kids".into(), Value::Object(kids));
    let mut signed_by = Map::new();
    signed_by.insert(
        "resource".into(),
        signer(
            resource_kid,
            trust.resource_key(&f.resource_uri, resource_kid),
        ),
    );
    signed_by.insert(
        role.into(),
        signer(
            confirmation_kid,
            trust.confirmation_key(&f.confirmation_uri, confirmation_kid),
        ),
    );
    summary.insert("signed_by".into(), Value::Object(signed_by));
}

/// Which key signed: its id, and the state its publisher gave it
/// (`active`, `new`, `retiring`; `null` when the trusted keys do not say).
fn signer(kid: &str, key: Option<crate::sign::PublicKey>) -> Value {
    json!({
        "kid": kid,
        "state": key.and_then(|k| k.state()).map(|s| s.as_str()),
    })
}

/// An epoch-seconds claim as RFC 3339 (or the bare number if out of range).
/// A confirmation's `auth_time`, said as it is: [`AUTH_TIME_UNKNOWN`] is
/// no time at all (the CS was not told when the user authenticated).
///
/// [`AUTH_TIME_UNKNOWN`]: crate::sign::AUTH_TIME_UNKNOWN
fn auth_time(secs: i64) -> Value {
    if secs == crate::sign::AUTH_TIME_UNKNOWN {
        json!("unknown (not reported)")
    } else {
        timestamp(secs)
    }
}

fn timestamp(secs: i64) -> Value {
    match DateTime::<Utc>::from_timestamp(secs, 0) {
        Some(t) => json!(t.to_rfc3339_opts(SecondsFormat::Secs, true)),
        None => json!(secs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules the summary of redacted evidence lists are those its
    /// checked list names, and only those.
    #[test]
    fn the_redacted_rules_are_the_ones_checked() {
        let named: Vec<u8> = (1..=6)
            .filter(|n| {
                let rule = format!("rule {n}");
                let rules = format!("rules {n}");
                REDACTED_CHECKED.iter().any(|c| {
                    c.contains(&rule) || c.contains(&rules) || c.contains(&format!(", {n})"))
                })
            })
            .collect();
        assert_eq!(named, REDACTED_RULES);
    }

    #[test]
    fn an_unknown_auth_time_is_said_to_be_unknown() {
        assert_eq!(auth_time(0), json!("unknown (not reported)"));
        assert_eq!(auth_time(1_795_340_600), json!("2026-11-22T09:43:20Z"));
    }
}
