//! Signing, countersigning and verification end to end, on payloads the
//! fuzzer writes and the harness signs (so that the verifier's checks after
//! the signature are reached, which random bytes in a signed document never
//! do). PROTOCOL.md §4, §5.
//!
//! Input: two option bytes, then the payload. The first picks the resource
//! header (`HEADERS`: some §5 allows, most it refuses) and whether to
//! countersign; the second how.
//!
//! Properties:
//! - `sign_resource` signs exactly the countersignable payloads;
//! - a resource-signed CHEQ verifies exactly when its payload is
//!   countersignable, its header is one §5 allows, and its key is trusted for
//!   the origin of its `resource uri`; every refused header is refused;
//! - an accepted one has every property of the `jws` target;
//! - countersigning refuses exactly what it must (another user, no `amr`,
//!   a value collected for no input, a required input missing on accept),
//!   and a countersigned CHEQ verifies exactly when the CS key is trusted for
//!   its `confirmation uri`, with the decision, user, view and collected
//!   values that were signed;
//! - a decided CHEQ is refused with its signatures swapped, with a
//!   confirmation header signed by the wrong key, with a `cheq_rs_sig` for
//!   another resource signature, and as a resource-signed CHEQ.

use super::fixtures::{self, cs_trusted, origin, rs_trusted};
use super::jws::{check_decision, check_resource};
use super::variant;
use cheq::cheq::Cheq;
use cheq::sign::header::{confirmation_header_json, ConfirmationClaims};
use cheq::sign::{
    assemble, b64, countersign, sign_entry, sign_resource, verify_decision, verify_resource,
    Algorithm, Channel, Context, Decision, DecisionInput, VerifyError,
};
use indexmap::IndexMap;

/// Resource headers: `true` for those §5 allows. `{kid}` is the key's kid.
pub const HEADERS: &[(bool, &str)] = &[
    (true, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource"}"#),
    (true, r#"{"cheq_role":"resource","typ":"CHEQ+JWS","x-note":[1,{"a":null}],"kid":"{kid}","alg":"EdDSA"}"#),
    (true, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource","b64":true}"#),
    (true, " {\n \"alg\" : \"EdDSA\" ,\t\"kid\":\"{kid}\",\"typ\":\"cheq+jws\",\"cheq_role\":\"resource\"} "),
    (false, r#"{"alg":"none","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource"}"#),
    (false, r#"{"alg":"HS256","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource"}"#),
    (false, r#"{"kid":"{kid}","typ":"cheq+jws","cheq_role":"resource"}"#),
    (false, r#"{"alg":"eddsa","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource"}"#),
    (false, r#"{"alg":"EdDSA","typ":"cheq+jws","cheq_role":"resource"}"#),
    (false, r#"{"alg":"EdDSA","kid":"","typ":"cheq+jws","cheq_role":"resource"}"#),
    (false, r#"{"alg":"EdDSA","kid":"nobody","typ":"cheq+jws","cheq_role":"resource"}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource","jwk":{"kty":"OKP"}}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource","jku":"https://evil.example/k"}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource","x5u":"https://evil.example/c"}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource","x5c":["AA"]}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource","b64":false}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource","crit":["exp"],"exp":1}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource","crit":[]}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource","crit":"cheq_decision","cheq_decision":"accept"}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource","crit":["cheq_decision"],"cheq_decision":"accept"}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"JWT","cheq_role":"resource"}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","cheq_role":"resource"}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws"}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"confirmation"}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource","alg":"EdDSA"}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource","\u006bid":"{kid}"}"#),
    (false, r#"["alg","EdDSA"]"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource""#),
    (false, r#"{"alg":"ES256","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource"}"#),
    (false, r#"{"alg":"EdDSA","kid":"{kid}","typ":"cheq+jws","cheq_role":"resource","cheq_decision":"accept"}"#),
];

/// `HEADERS.len()` and two more ways to be wrong: signed by an untrusted key
/// with the trusted kid, and a signature over another payload.
const ROGUE_KEY: usize = HEADERS.len();
const OTHER_PAYLOAD: usize = HEADERS.len() + 1;
/// The header made by `sign_resource` itself.
const SIGNER: usize = HEADERS.len() + 2;

pub fn run(data: &[u8]) -> u64 {
    let (a, b) = (
        data.first().copied().unwrap_or(0),
        data.get(1).copied().unwrap_or(0),
    );
    let payload = fixtures::tail(data, 2);
    let fx = fixtures::get();
    let parsed = Cheq::parse(payload);
    let fields = parsed.as_ref().ok().map(Cheq::countersign_fields);
    let countersignable = matches!(fields, Some(Ok(_)));

    // sign_resource signs exactly the countersignable payloads.
    let signed = sign_resource(payload, &fx.rs);
    assert_eq!(signed.is_ok(), countersignable, "sign_resource: {signed:?}");

    let header_ix = usize::from(a & 0x7f) % (HEADERS.len() + 3);
    let payload_b64 = b64::encode(payload);
    let (doc, allowed) = match header_ix {
        SIGNER => match signed {
            Ok(doc) => (doc, true),
            Err(_) => (
                entry(HEADERS[0].1, &fx.rs, &payload_b64, &payload_b64),
                true,
            ),
        },
        ROGUE_KEY => (
            entry(HEADERS[0].1, &fx.rogue, &payload_b64, &payload_b64),
            false,
        ),
        OTHER_PAYLOAD => {
            let other = b64::encode([payload, b" "].concat());
            (entry(HEADERS[0].1, &fx.rs, &payload_b64, &other), false)
        }
        i => (
            entry(HEADERS[i].1, &fx.rs, &payload_b64, &payload_b64),
            HEADERS[i].0,
        ),
    };

    let now = match &fields {
        Some(Ok(f)) => f.date,
        _ => fixtures::now(),
    };
    let ctx = Context::at(now);
    let verified = verify_resource(doc.as_bytes(), &fx.trust, &ctx);
    let mut out = variant(0x7367, &verified.as_ref().map(|_| ()));
    let Some(Ok(f)) = fields else {
        let e = verified
            .err()
            .unwrap_or_else(|| panic!("accepted a payload that is not countersignable"));
        // The envelope and its headers are read first; past them, the
        // payload is what is refused.
        assert!(
            !allowed
                || matches!(
                    e,
                    VerifyError::Payload(_)
                        | VerifyError::NotCountersignable(_)
                        | VerifyError::PayloadTooLarge(_)
                ),
            "a payload that is not countersignable refused for another reason: {e:?}"
        );
        return out;
    };
    let trusted = rs_trusted(&origin(&f.resource_uri).unwrap_or_default());
    let v = match verified {
        Ok(v) => {
            assert!(allowed, "header variant {header_ix} accepted");
            assert!(trusted, "accepted for untrusted {}", f.resource_uri);
            v
        }
        Err(e) => {
            assert!(
                !allowed || !trusted,
                "an allowed header ({header_ix}) on a countersignable payload for a trusted \
                 origin is refused: {e:?}"
            );
            if allowed {
                assert!(
                    matches!(e, VerifyError::UntrustedResourceKey { .. }),
                    "{e:?}"
                );
            }
            return out;
        }
    };
    check_resource(doc.as_bytes(), &v, &ctx);
    if a & 0x80 == 0 {
        return out;
    }

    // Countersigning.
    let cheq = v.cheq();
    let decision = if b & 1 == 0 {
        Decision::Accept
    } else {
        Decision::Reject
    };
    let user = if b & 2 == 0 {
        f.subject.clone()
    } else {
        format!("{}~", f.subject)
    };
    let amr: Vec<String> = if b & 4 == 0 {
        vec!["pwd".into()]
    } else {
        Vec::new()
    };
    let channel = [Channel::Html, Channel::Voice, Channel::Api][usize::from(b >> 3) % 3];
    let mut collected: IndexMap<String, String> = cheq
        .parameters
        .iter()
        .filter(|p| p.input.is_some())
        .enumerate()
        .filter(|(i, _)| b & 0x20 == 0 || *i > 0)
        .map(|(i, p)| (p.name.clone(), format!("value {i}")))
        .collect();
    if b & 0x40 != 0 && !cheq.parameters.iter().any(|p| p.name == "not a parameter") {
        collected.insert("not a parameter".into(), "x".into());
    }
    let collected = (!collected.is_empty() || b & 0x80 != 0).then_some(collected);
    let view_text = format!("view {b}");
    let expected = if user != f.subject {
        Some("SubjectMismatch")
    } else if amr.is_empty() {
        Some("NoAuthMethod")
    } else if collected.iter().flat_map(|c| c.keys()).any(|k| {
        !cheq
            .parameters
            .iter()
            .any(|p| &p.name == k && p.input.is_some())
    }) {
        Some("CollectedNotAnInput")
    } else if decision == Decision::Accept
        && cheq.missing_required_input(collected.as_ref()).is_some()
    {
        Some("RequiredInputMissing")
    } else {
        None
    };
    let input = DecisionInput {
        decision,
        sub: &user,
        also_known_as: &[],
        auth_time: now.timestamp() - 100,
        amr: &amr,
        channel,
        view_text: &view_text,
        collected: collected.clone(),
        passkey: None,
    };
    let decided = countersign(&v, &fx.cs, input, now);
    out ^= variant(0x6373, &decided.as_ref().map(|_| ())).rotate_left(9);
    let decided = match (decided, expected) {
        (Ok(doc), None) => doc,
        (Err(e), Some(name)) => {
            assert!(format!("{e:?}").starts_with(name), "{e:?}, not {name}");
            return out;
        }
        (Err(e), None) => panic!("countersign refused: {e:?}"),
        (Ok(_), Some(name)) => panic!("countersigned, but expected {name}"),
    };
    let d = verify_decision(decided.as_bytes(), &fx.trust, Some(decision), &ctx);
    let cs_ok = cs_trusted(&origin(&f.confirmation_uri).unwrap_or_default());
    let d = match d {
        Ok(d) => {
            assert!(
                cs_ok,
                "countersignature accepted for {}",
                f.confirmation_uri
            );
            d
        }
        Err(e) => {
            assert!(!cs_ok, "a countersigned CHEQ is refused: {e:?}");
            assert!(
                matches!(e, VerifyError::UntrustedConfirmationKey { .. }),
                "{e:?}"
            );
            return out;
        }
    };
    check_decision(decided.as_bytes(), &d, &ctx);
    let claims = d.claims();
    assert_eq!(claims.decision, decision);
    assert_eq!(claims.sub, user);
    assert_eq!(claims.channel, channel);
    assert_eq!(claims.view, b64::sha256(view_text.as_bytes()));
    assert_eq!(claims.collected, collected);
    assert_eq!(d.confirmation_kid(), fx.cs.kid());
    assert!(matches!(
        verify_resource(decided.as_bytes(), &fx.trust, &ctx),
        Err(VerifyError::SignatureCount {
            expected: 1,
            found: 2
        })
    ));
    tampered(&decided, claims, &ctx);
    out
}

/// A one-signature document with the header `template` signed by `key` over
/// `signed_b64`, carrying `payload_b64`.
fn entry(
    template: &str,
    key: &cheq::sign::SigningKey,
    payload_b64: &str,
    signed_b64: &str,
) -> String {
    let header = template.replace("{kid}", key.kid());
    let (protected, _) = sign_entry(key, &header, payload_b64);
    let (_, signature) = sign_entry(key, &header, signed_b64);
    assemble(payload_b64, &[(&protected, &signature)])
}

/// Decided documents changed in ways that must each be refused.
fn tampered(doc: &str, claims: &ConfirmationClaims, ctx: &Context<'_>) {
    let fx = fixtures::get();
    let raw = cheq::sign::jws::RawDocument::parse(doc.as_bytes())
        .unwrap_or_else(|e| panic!("envelope: {e}"));
    let (rs, cs) = (&raw.signatures[0], &raw.signatures[1]);
    let parts = |s: &cheq::sign::jws::RawSignature<'_>| {
        (s.protected_b64.to_string(), s.signature_b64.to_string())
    };
    let ((rp, rsig), (cp, csig)) = (parts(rs), parts(cs));
    let refused = |d: String, what: &str| {
        let r = verify_decision(d.as_bytes(), &fx.trust, None, ctx);
        assert!(r.is_err(), "{what}: accepted");
        r.err()
    };
    refused(
        assemble(&raw.payload_b64, &[(&cp, &csig), (&rp, &rsig)]),
        "swapped",
    );
    refused(
        assemble(&raw.payload_b64, &[(&rp, &rsig), (&rp, &rsig)]),
        "resource twice",
    );
    refused(
        assemble(
            &raw.payload_b64,
            &[(&rp, &rsig), (&cp, &csig), (&cp, &csig)],
        ),
        "three signatures",
    );
    // The confirmation header, signed by the resource key under the CS kid.
    let header = confirmation_header_json(Algorithm::EdDsa, fx.cs.kid(), claims);
    let (p, s) = sign_entry(&fx.rs, &header, &raw.payload_b64);
    let e = refused(
        assemble(&raw.payload_b64, &[(&rp, &rsig), (&p, &s)]),
        "wrong key",
    );
    assert_eq!(
        e,
        Some(VerifyError::BadSignature {
            index: 1,
            kid: fx.cs.kid().to_owned()
        })
    );
    // A countersignature bound to another resource signature.
    let other = ConfirmationClaims {
        rs_sig: b64::sha256(b"another resource signature"),
        ..claims.clone()
    };
    let header = confirmation_header_json(Algorithm::EdDsa, fx.cs.kid(), &other);
    let (p, s) = sign_entry(&fx.cs, &header, &raw.payload_b64);
    let e = refused(
        assemble(&raw.payload_b64, &[(&rp, &rsig), (&p, &s)]),
        "rs_sig",
    );
    assert_eq!(e, Some(VerifyError::RsSigMismatch));
}
