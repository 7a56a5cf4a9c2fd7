//! The signing core against PROTOCOL.md §5: the happy path, then one negative
//! test per verification rule, each asserting the exact error variant.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::sign::{
    assemble, b64, countersign, sign_entry, sign_resource, verify_decision, verify_own_decision,
    verify_resource, Channel, Context, CountersignError, Decision, DecisionInput, Jwks,
    ResourceSignature, SigningKey, TrustStore, VerifyError,
};
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde_json::{json, Value};

const RS_ORIGIN: &str = "https://api.airline.example";
const RESOURCE_URI: &str = "https://api.airline.example/cheq/confirmations/Q3ONTdR0soidHLd4ue3DgQ";
const CS_URI: &str = "https://confirm.example";

struct Fx {
    rs: SigningKey,
    cs: SigningKey,
    trust: TrustStore,
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap()
}

fn ctx() -> Context<'static> {
    Context::at(now())
}

fn payload() -> Value {
    json!({
        "version": "1.0",
        "operation": "https://api.airline.example/api/v1/book-flight",
        "operation name": "Book flight",
        "inputs": {"parameters": [
            {"parameter name": "flight number", "parameter description": "The overnight flight from EWR to MAD", "parameter value": "UA23"},
            {"parameter name": "price", "parameter value": "1200 USD"},
            {"parameter name": "account", "parameter input": {"type": "digits", "sensitive": true, "required": false}}
        ]},
        "date": "2026-11-22T09:00:00Z",
        "nonce": "AAECAwQFBgcICQoLDA0ODw",
        "resource uri": RESOURCE_URI,
        "confirmation uri": CS_URI,
        "subject": "alice",
        "expires": "2026-11-22T21:00:00Z"
    })
}

fn fx() -> Fx {
    let rs = SigningKey::from_seed("rs-1", &[1; 32]).unwrap();
    let cs = SigningKey::from_seed("cs-1", &[2; 32]).unwrap();
    let mut trust = TrustStore::new();
    trust
        .add_resource_server(RS_ORIGIN, Jwks::new(vec![rs.public_key()]).unwrap())
        .unwrap();
    trust
        .add_confirmation_server(CS_URI, Jwks::new(vec![cs.public_key()]).unwrap())
        .unwrap();
    Fx { rs, cs, trust }
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

static AMR: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| vec!["pwd".to_owned()]);

fn input(decision: Decision) -> DecisionInput<'static> {
    DecisionInput {
        decision,
        sub: "alice",
        also_known_as: &[],
        auth_time: now().timestamp() - 100,
        amr: &AMR,
        channel: Channel::Html,
        view_text: "Book flight UA23",
        collected: None,
        passkey: None,
    }
}

impl Fx {
    fn resource_doc(&self, p: &Value) -> String {
        sign_resource(&bytes(p), &self.rs).unwrap()
    }
    fn decided(&self, d: Decision) -> String {
        let doc = self.resource_doc(&payload());
        let v = verify_resource(doc.as_bytes(), &self.trust, &ctx()).unwrap();
        countersign(&v, &self.cs, input(d), now()).unwrap()
    }
    fn verify_res(&self, doc: &str) -> Result<(), VerifyError> {
        verify_resource(doc.as_bytes(), &self.trust, &ctx()).map(|_| ())
    }
    fn verify_dec(&self, doc: &str, d: Decision) -> Result<(), VerifyError> {
        verify_decision(doc.as_bytes(), &self.trust, Some(d), &ctx()).map(|_| ())
    }
}

/// The decoded envelope, for surgery.
fn parts(doc: &str) -> (String, Vec<(String, String)>) {
    let v: Value = serde_json::from_str(doc).unwrap();
    let sigs = v["signatures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["protected"].as_str().unwrap().to_owned(),
                s["signature"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (v["payload"].as_str().unwrap().to_owned(), sigs)
}

fn header(protected_b64: &str) -> Value {
    serde_json::from_slice(&b64::decode(protected_b64).unwrap()).unwrap()
}

/// Re-signs a resource-only document whose header was changed by `f`.
fn with_resource_header(fx: &Fx, f: impl FnOnce(&mut Value)) -> String {
    let doc = fx.resource_doc(&payload());
    let (p, sigs) = parts(&doc);
    let mut h = header(&sigs[0].0);
    f(&mut h);
    let (ph, s) = sign_entry(&fx.rs, &h.to_string(), &p);
    assemble(&p, &[(&ph, &s)])
}

/// Re-signs the confirmation entry of a decided document after `f` changes its header.
fn with_confirmation_header(fx: &Fx, d: Decision, f: impl FnOnce(&mut Value)) -> String {
    let doc = fx.decided(d);
    let (p, sigs) = parts(&doc);
    let mut h = header(&sigs[1].0);
    f(&mut h);
    let (ph, s) = sign_entry(&fx.cs, &h.to_string(), &p);
    assemble(&p, &[(&sigs[0].0, &sigs[0].1), (&ph, &s)])
}

// ---- happy paths ----------------------------------------------------------

#[test]
fn resource_then_decision_verify() {
    let fx = fx();
    let doc = fx.resource_doc(&payload());
    let v = verify_resource(doc.as_bytes(), &fx.trust, &ctx()).unwrap();
    assert_eq!(v.fields().subject, "alice");
    assert_eq!(v.resource_kid(), "rs-1");
    assert_eq!(v.to_document(), doc);
    let decided = countersign(&v, &fx.cs, input(Decision::Accept), now()).unwrap();
    let d = verify_decision(
        decided.as_bytes(),
        &fx.trust,
        Some(Decision::Accept),
        &ctx(),
    )
    .unwrap();
    assert_eq!(d.decision(), Decision::Accept);
    assert_eq!(d.claims().sub, "alice");
    assert_eq!(d.claims().iat, now().timestamp());
    assert_eq!(d.claims().view, b64::sha256("Book flight UA23"));
    assert_eq!(d.confirmation_kid(), "cs-1");
    // The confirmation header carries every member §5 lists, in order.
    let (_, sigs) = parts(&decided);
    let h = header(&sigs[1].0);
    let keys: Vec<&str> = h.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "alg",
            "kid",
            "typ",
            "cheq_role",
            "crit",
            "cheq_decision",
            "sub",
            "iat",
            "auth_time",
            "amr",
            "cheq_channel",
            "cheq_view",
            "cheq_rs_sig"
        ]
    );
    assert_eq!(h["crit"], json!(["cheq_decision"]));
    assert_eq!(
        header(&sigs[0].0).to_string(),
        r#"{"alg":"EdDSA","kid":"rs-1","typ":"cheq+jws","cheq_role":"resource"}"#
    );
}

#[test]
fn resource_uri_and_confirmation_uri_context() {
    let fx = fx();
    let doc = fx.resource_doc(&payload());
    let mut c = ctx();
    c.resource_uri = Some(RESOURCE_URI);
    c.confirmation_uri = Some("https://confirm.example/");
    assert!(verify_resource(doc.as_bytes(), &fx.trust, &c).is_ok());
    c.resource_uri = Some("https://api.airline.example/cheq/confirmations/other");
    assert!(matches!(
        verify_resource(doc.as_bytes(), &fx.trust, &c),
        Err(VerifyError::ResourceUriMismatch { .. })
    ));
    c.resource_uri = Some(RESOURCE_URI);
    c.confirmation_uri = Some("https://other-confirm.example");
    assert!(matches!(
        verify_resource(doc.as_bytes(), &fx.trust, &c),
        Err(VerifyError::ConfirmationUriMismatch { .. })
    ));
}

#[test]
fn sign_keeps_exact_payload_bytes() {
    let fx = fx();
    let text = serde_json::to_string_pretty(&payload()).unwrap() + "\n";
    let doc = sign_resource(text.as_bytes(), &fx.rs).unwrap();
    let (p, _) = parts(&doc);
    assert_eq!(b64::decode(&p).unwrap(), text.as_bytes());
    assert!(fx.verify_res(&doc).is_ok());
}

// ---- rule 1: well-formed, every signature verifies ------------------------

#[test]
fn tampered_payload_fails() {
    let fx = fx();
    let doc = fx.decided(Decision::Accept);
    let (_, sigs) = parts(&doc);
    let mut p = payload();
    p["subject"] = "mallory".into();
    let forged = assemble(
        &b64::encode(bytes(&p)),
        &[(&sigs[0].0, &sigs[0].1), (&sigs[1].0, &sigs[1].1)],
    );
    assert!(matches!(
        fx.verify_dec(&forged, Decision::Accept),
        Err(VerifyError::BadSignature { index: 0, .. })
    ));
}

#[test]
fn each_signature_tampered_alone_fails() {
    let fx = fx();
    let doc = fx.decided(Decision::Accept);
    let (p, sigs) = parts(&doc);
    for i in 0..2 {
        let mut s = sigs.clone();
        s[i].1 = b64::encode({
            let mut raw = b64::decode(&s[i].1).unwrap();
            raw[10] ^= 1;
            raw
        });
        let refs: Vec<(&str, &str)> = s.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let err = fx
            .verify_dec(&assemble(&p, &refs), Decision::Accept)
            .unwrap_err();
        match (i, &err) {
            (0, VerifyError::BadSignature { index: 0, .. }) => {}
            // A tampered resource signature leaves the confirmation signature valid
            // over the payload; the confirmation signature itself must fail alone.
            (1, VerifyError::BadSignature { index: 1, .. }) => {}
            _ => panic!("signature {i}: {err:?}"),
        }
        assert_eq!(err.rule(), 1);
    }
}

#[test]
fn signature_stripped_or_added_fails() {
    let fx = fx();
    let doc = fx.decided(Decision::Accept);
    let (p, sigs) = parts(&doc);
    let only_rs = assemble(&p, &[(&sigs[0].0, &sigs[0].1)]);
    assert_eq!(
        fx.verify_dec(&only_rs, Decision::Accept),
        Err(VerifyError::SignatureCount {
            expected: 2,
            found: 1
        })
    );
    let only_cs = assemble(&p, &[(&sigs[1].0, &sigs[1].1)]);
    assert!(matches!(
        fx.verify_dec(&only_cs, Decision::Accept),
        Err(VerifyError::SignatureCount { .. })
    ));
    // A decided CHEQ is not a resource-stage CHEQ.
    assert_eq!(
        fx.verify_res(&doc),
        Err(VerifyError::SignatureCount {
            expected: 1,
            found: 2
        })
    );
    let empty = format!(r#"{{"payload":"{p}","signatures":[]}}"#);
    assert!(matches!(
        fx.verify_res(&empty),
        Err(VerifyError::EnvelopeMember(_))
    ));
}

#[test]
fn roles_swapped_fails() {
    let fx = fx();
    let doc = fx.decided(Decision::Accept);
    let (p, sigs) = parts(&doc);
    let swapped = assemble(&p, &[(&sigs[1].0, &sigs[1].1), (&sigs[0].0, &sigs[0].1)]);
    let err = fx.verify_dec(&swapped, Decision::Accept).unwrap_err();
    assert_eq!(
        err,
        VerifyError::RoleOrder {
            index: 0,
            expected: "resource"
        }
    );
    assert_eq!(err.rule(), 2);
    // Two resource signatures.
    let twice = assemble(&p, &[(&sigs[0].0, &sigs[0].1), (&sigs[0].0, &sigs[0].1)]);
    assert_eq!(
        fx.verify_dec(&twice, Decision::Accept),
        Err(VerifyError::RoleOrder {
            index: 1,
            expected: "confirmation"
        })
    );
}

#[test]
fn untrusted_key_with_trusted_kid_fails() {
    let fx = fx();
    let impostor = SigningKey::from_seed("rs-1", &[9; 32]).unwrap();
    let doc = sign_resource(&bytes(&payload()), &impostor).unwrap();
    assert!(matches!(
        fx.verify_res(&doc),
        Err(VerifyError::BadSignature { index: 0, .. })
    ));
    let cs_impostor = SigningKey::from_seed("cs-1", &[8; 32]).unwrap();
    let v = verify_resource(fx.resource_doc(&payload()).as_bytes(), &fx.trust, &ctx()).unwrap();
    let doc = countersign(&v, &cs_impostor, input(Decision::Accept), now()).unwrap();
    assert!(matches!(
        fx.verify_dec(&doc, Decision::Accept),
        Err(VerifyError::BadSignature { index: 1, .. })
    ));
}

#[test]
fn unknown_kid_is_untrusted() {
    let fx = fx();
    let stranger = SigningKey::from_seed("rs-2", &[7; 32]).unwrap();
    let doc = sign_resource(&bytes(&payload()), &stranger).unwrap();
    assert!(matches!(
        fx.verify_res(&doc),
        Err(VerifyError::UntrustedResourceKey { .. })
    ));
    let stranger_cs = SigningKey::from_seed("cs-2", &[6; 32]).unwrap();
    let v = verify_resource(fx.resource_doc(&payload()).as_bytes(), &fx.trust, &ctx()).unwrap();
    let doc = countersign(&v, &stranger_cs, input(Decision::Accept), now()).unwrap();
    assert!(matches!(
        fx.verify_dec(&doc, Decision::Accept),
        Err(VerifyError::UntrustedConfirmationKey { .. })
    ));
}

#[test]
fn wrong_origin_for_a_key_fails() {
    let fx = fx();
    // The RS key is trusted for api.airline.example only.
    let mut p = payload();
    p["resource uri"] = "https://api.hotel.example/cheq/confirmations/x".into();
    let doc = fx.resource_doc(&p);
    assert!(matches!(
        fx.verify_res(&doc),
        Err(VerifyError::UntrustedResourceKey { .. })
    ));
    // Same host, other port: another origin.
    let mut p = payload();
    p["resource uri"] = "https://api.airline.example:8443/cheq/confirmations/x".into();
    assert!(matches!(
        fx.verify_res(&fx.resource_doc(&p)),
        Err(VerifyError::UntrustedResourceKey { .. })
    ));
    // The CS key is trusted for confirm.example only; the RS key is not a CS key.
    let mut p = payload();
    p["confirmation uri"] = "https://confirm2.example".into();
    let v = verify_resource(fx.resource_doc(&p).as_bytes(), &fx.trust, &ctx()).unwrap();
    let doc = countersign(&v, &fx.cs, input(Decision::Accept), now()).unwrap();
    assert!(matches!(
        fx.verify_dec(&doc, Decision::Accept),
        Err(VerifyError::UntrustedConfirmationKey { .. })
    ));
    let v = verify_resource(fx.resource_doc(&payload()).as_bytes(), &fx.trust, &ctx()).unwrap();
    let rs_as_cs = SigningKey::from_seed("rs-1", &[1; 32]).unwrap();
    let doc = countersign(&v, &rs_as_cs, input(Decision::Accept), now()).unwrap();
    assert!(matches!(
        fx.verify_dec(&doc, Decision::Accept),
        Err(VerifyError::UntrustedConfirmationKey { .. })
    ));
}

#[test]
fn alg_none_and_other_algorithms_refused() {
    let fx = fx();
    for alg in ["none", "HS256", "RS256", "ES384", "Ed25519", ""] {
        let doc = with_resource_header(&fx, |h| h["alg"] = alg.into());
        assert_eq!(
            fx.verify_res(&doc),
            Err(VerifyError::AlgorithmNotAllowed {
                index: 0,
                alg: alg.into()
            }),
            "{alg}"
        );
    }
    // alg none with an empty signature.
    let doc = fx.resource_doc(&payload());
    let (p, _) = parts(&doc);
    let h = b64::encode(r#"{"alg":"none","kid":"rs-1","typ":"cheq+jws","cheq_role":"resource"}"#);
    assert!(matches!(
        fx.verify_res(&assemble(&p, &[(&h, "")])),
        Err(VerifyError::AlgorithmNotAllowed { .. })
    ));
    let doc = with_resource_header(&fx, |h| {
        h.as_object_mut().unwrap().remove("alg");
    });
    assert!(matches!(
        fx.verify_res(&doc),
        Err(VerifyError::AlgorithmNotAllowed { .. })
    ));
}

#[test]
fn hs256_keyed_with_the_public_key_refused() {
    use sha2::Sha256;
    let fx = fx();
    let doc = fx.resource_doc(&payload());
    let (p, _) = parts(&doc);
    let h = b64::encode(r#"{"alg":"HS256","kid":"rs-1","typ":"cheq+jws","cheq_role":"resource"}"#);
    // HMAC-SHA256 keyed with the RS public key bytes (the classic confusion attack).
    let key = b64::decode(fx.rs.public_jwk()["x"].as_str().unwrap()).unwrap();
    let mac = hmac_sha256::<Sha256>(&key, format!("{h}.{p}").as_bytes());
    let forged = assemble(&p, &[(&h, &b64::encode(mac))]);
    assert_eq!(
        fx.verify_res(&forged),
        Err(VerifyError::AlgorithmNotAllowed {
            index: 0,
            alg: "HS256".into()
        })
    );
}

fn hmac_sha256<D: sha2::Digest>(key: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut k = [0u8; 64];
    k[..key.len()].copy_from_slice(key);
    let inner: Vec<u8> = k
        .iter()
        .map(|b| b ^ 0x36)
        .chain(msg.iter().copied())
        .collect();
    let ih = D::digest(&inner);
    let outer: Vec<u8> = k
        .iter()
        .map(|b| b ^ 0x5c)
        .chain(ih.iter().copied())
        .collect();
    D::digest(&outer).to_vec()
}

#[test]
fn missing_kid_refused() {
    let fx = fx();
    let doc = with_resource_header(&fx, |h| {
        h.as_object_mut().unwrap().remove("kid");
    });
    assert_eq!(
        fx.verify_res(&doc),
        Err(VerifyError::MissingKid { index: 0 })
    );
    let doc = with_resource_header(&fx, |h| h["kid"] = 7.into());
    assert_eq!(
        fx.verify_res(&doc),
        Err(VerifyError::MissingKid { index: 0 })
    );
}

#[test]
fn embedded_keys_refused() {
    let fx = fx();
    for member in ["jwk", "jku", "x5u", "x5c"] {
        let jwk = fx.rs.public_jwk();
        let doc = with_resource_header(&fx, |h| h[member] = jwk);
        assert_eq!(
            fx.verify_res(&doc),
            Err(VerifyError::EmbeddedKey { index: 0, member }),
            "{member}"
        );
    }
}

#[test]
fn unprotected_header_refused() {
    let fx = fx();
    let doc = fx.resource_doc(&payload());
    let (p, sigs) = parts(&doc);
    let with_header = format!(
        r#"{{"payload":"{p}","signatures":[{{"protected":"{}","header":{{"kid":"rs-1"}},"signature":"{}"}}]}}"#,
        sigs[0].0, sigs[0].1
    );
    assert_eq!(
        fx.verify_res(&with_header),
        Err(VerifyError::UnprotectedHeader { index: Some(0) })
    );
    let top = format!(
        r#"{{"payload":"{p}","header":{{}},"signatures":[{{"protected":"{}","signature":"{}"}}]}}"#,
        sigs[0].0, sigs[0].1
    );
    assert_eq!(
        fx.verify_res(&top),
        Err(VerifyError::UnprotectedHeader { index: None })
    );
    // Flattened members beside "signatures" are not allowed either.
    let flat = format!(
        r#"{{"payload":"{p}","protected":"{}","signatures":[{{"protected":"{}","signature":"{}"}}]}}"#,
        sigs[0].0, sigs[0].0, sigs[0].1
    );
    assert!(matches!(
        fx.verify_res(&flat),
        Err(VerifyError::EnvelopeMember(_))
    ));
}

#[test]
fn unknown_crit_refused() {
    let fx = fx();
    let doc = with_confirmation_header(&fx, Decision::Accept, |h| {
        h["crit"] = json!(["cheq_decision", "exp"]);
        h["exp"] = 1.into();
    });
    assert_eq!(
        fx.verify_dec(&doc, Decision::Accept),
        Err(VerifyError::UnknownCrit {
            index: 1,
            name: "exp".into()
        })
    );
    let doc = with_resource_header(&fx, |h| {
        h["crit"] = json!(["zzz"]);
        h["zzz"] = true.into();
    });
    assert_eq!(
        fx.verify_res(&doc),
        Err(VerifyError::UnknownCrit {
            index: 0,
            name: "zzz".into()
        })
    );
    for bad in [
        json!([]),
        json!("cheq_decision"),
        json!(["cheq_decision", "cheq_decision"]),
    ] {
        let doc = with_confirmation_header(&fx, Decision::Accept, |h| h["crit"] = bad.clone());
        assert!(
            matches!(
                fx.verify_dec(&doc, Decision::Accept),
                Err(VerifyError::BadCrit { index: 1, .. })
            ),
            "{bad}"
        );
    }
}

#[test]
fn missing_crit_refused() {
    let fx = fx();
    let doc = with_confirmation_header(&fx, Decision::Accept, |h| {
        h.as_object_mut().unwrap().remove("crit");
    });
    assert_eq!(
        fx.verify_dec(&doc, Decision::Accept),
        Err(VerifyError::MissingCrit { index: 1 })
    );
}

#[test]
fn confirmation_claims_each_required() {
    let fx = fx();
    for member in [
        "sub",
        "iat",
        "auth_time",
        "amr",
        "cheq_channel",
        "cheq_view",
        "cheq_rs_sig",
        "cheq_decision",
    ] {
        let doc = with_confirmation_header(&fx, Decision::Accept, |h| {
            h.as_object_mut().unwrap().remove(member);
        });
        let err = fx.verify_dec(&doc, Decision::Accept).unwrap_err();
        let expected_member = if member == "cheq_decision" {
            "crit"
        } else {
            member
        };
        match &err {
            VerifyError::BadClaim {
                index: 1,
                member: m,
            } if *m == member => {}
            VerifyError::BadCrit { index: 1, .. } if expected_member == "crit" => {}
            _ => panic!("{member}: {err:?}"),
        }
    }
    let doc = with_confirmation_header(&fx, Decision::Accept, |h| h["cheq_channel"] = "fax".into());
    assert!(matches!(
        fx.verify_dec(&doc, Decision::Accept),
        Err(VerifyError::BadClaim {
            member: "cheq_channel",
            ..
        })
    ));
    let doc = with_confirmation_header(&fx, Decision::Accept, |h| h["iat"] = "1795341600".into());
    assert!(matches!(
        fx.verify_dec(&doc, Decision::Accept),
        Err(VerifyError::BadClaim { member: "iat", .. })
    ));
    let doc = with_confirmation_header(&fx, Decision::Accept, |h| h["typ"] = "JWT".into());
    assert_eq!(
        fx.verify_dec(&doc, Decision::Accept),
        Err(VerifyError::BadTyp { index: 1 })
    );
    let doc = with_confirmation_header(&fx, Decision::Accept, |h| {
        h["cheq_decision"] = "maybe".into()
    });
    assert!(matches!(
        fx.verify_dec(&doc, Decision::Accept),
        Err(VerifyError::BadClaim {
            member: "cheq_decision",
            ..
        })
    ));
    // A resource signature may not carry a decision.
    let doc = with_resource_header(&fx, |h| {
        h["cheq_decision"] = "accept".into();
        h["crit"] = json!(["cheq_decision"]);
    });
    assert!(matches!(
        fx.verify_res(&doc),
        Err(VerifyError::BadClaim {
            index: 0,
            member: "cheq_decision"
        })
    ));
}

#[test]
fn b64_false_refused() {
    let fx = fx();
    let doc = with_resource_header(&fx, |h| {
        h["b64"] = false.into();
    });
    assert_eq!(fx.verify_res(&doc), Err(VerifyError::B64False { index: 0 }));
}

#[test]
fn non_canonical_base64url_refused() {
    let fx = fx();
    let doc = fx.resource_doc(&payload());
    let (p, sigs) = parts(&doc);
    let cases = [
        (
            format!("{p}="),
            sigs[0].0.clone(),
            sigs[0].1.clone(),
            "payload",
        ),
        (
            p.replace('-', "+").replace('_', "/"),
            sigs[0].0.clone(),
            sigs[0].1.clone(),
            "payload",
        ),
        (
            p.clone(),
            format!("{}==", sigs[0].0),
            sigs[0].1.clone(),
            "protected",
        ),
        (
            p.clone(),
            sigs[0].0.clone(),
            flip_trailing_bits(&sigs[0].1),
            "signature",
        ),
    ];
    for (payload_b64, protected, signature, part) in cases {
        if payload_b64 == p && part == "payload" {
            continue; // the payload had no '-' or '_' to swap
        }
        let doc = assemble(&payload_b64, &[(&protected, &signature)]);
        assert!(
            matches!(fx.verify_res(&doc), Err(VerifyError::NonCanonicalBase64 { part: q, .. }) if q == part),
            "{part}: {:?}",
            fx.verify_res(&doc)
        );
    }
}

/// A 64-byte signature is 86 base64url characters, whose last one carries 4
/// unused bits: setting one makes the same bytes in a non-canonical spelling.
fn flip_trailing_bits(s: &str) -> String {
    const ALPHA: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let last = s.chars().last().unwrap();
    let idx = ALPHA.find(last).unwrap();
    let other = ALPHA.chars().nth(idx ^ 1).unwrap();
    format!("{}{}", &s[..s.len() - 1], other)
}

#[test]
fn duplicate_json_members_refused_everywhere() {
    let fx = fx();
    // In the payload.
    let text = String::from_utf8(bytes(&payload())).unwrap().replacen(
        "\"subject\":\"alice\"",
        "\"subject\":\"alice\",\"subject\":\"mallory\"",
        1,
    );
    let p = b64::encode(&text);
    let (ph, s) = sign_entry(
        &fx.rs,
        r#"{"alg":"EdDSA","kid":"rs-1","typ":"cheq+jws","cheq_role":"resource"}"#,
        &p,
    );
    assert!(matches!(
        fx.verify_res(&assemble(&p, &[(&ph, &s)])),
        Err(VerifyError::Payload(cheq::cheq::CheqError::Json(cheq::cheq::json::JsonError::DuplicateMember(m)))) if m == "subject"
    ));
    // In a protected header.
    let doc = fx.resource_doc(&payload());
    let (p, _) = parts(&doc);
    let (ph, s) = sign_entry(
        &fx.rs,
        r#"{"alg":"EdDSA","kid":"rs-1","typ":"cheq+jws","cheq_role":"resource","cheq_role":"confirmation"}"#,
        &p,
    );
    assert!(matches!(
        fx.verify_res(&assemble(&p, &[(&ph, &s)])),
        Err(VerifyError::HeaderJson { index: 0, .. })
    ));
    // In the JWS object.
    let (_, sigs) = parts(&doc);
    let dup = format!(
        r#"{{"payload":"{p}","payload":"{p}","signatures":[{{"protected":"{}","signature":"{}"}}]}}"#,
        sigs[0].0, sigs[0].1
    );
    assert!(matches!(fx.verify_res(&dup), Err(VerifyError::Envelope(_))));
}

#[test]
fn oversize_payload_refused() {
    let fx = fx();
    let mut p = payload();
    for i in 0..20 {
        p[format!("pad{i}")] = "x".repeat(4000).into();
    }
    let big = bytes(&p);
    assert!(big.len() > 64 * 1024);
    let pb = b64::encode(&big);
    let (ph, s) = sign_entry(
        &fx.rs,
        r#"{"alg":"EdDSA","kid":"rs-1","typ":"cheq+jws","cheq_role":"resource"}"#,
        &pb,
    );
    assert!(matches!(
        fx.verify_res(&assemble(&pb, &[(&ph, &s)])),
        Err(VerifyError::PayloadTooLarge(_))
    ));
    assert!(sign_resource(&big, &fx.rs).is_err());
}

// ---- rule 3 ---------------------------------------------------------------

#[test]
fn decision_mismatch_refused() {
    let fx = fx();
    let doc = fx.decided(Decision::Accept);
    let err = fx.verify_dec(&doc, Decision::Reject).unwrap_err();
    assert_eq!(
        err,
        VerifyError::DecisionMismatch {
            expected: Decision::Reject,
            found: Decision::Accept
        }
    );
    assert_eq!(err.rule(), 3);
    let doc = fx.decided(Decision::Reject);
    assert!(fx.verify_dec(&doc, Decision::Reject).is_ok());
    assert!(matches!(
        fx.verify_dec(&doc, Decision::Accept),
        Err(VerifyError::DecisionMismatch { .. })
    ));
}

#[test]
fn rs_sig_mismatch_refused() {
    let fx = fx();
    let doc = with_confirmation_header(&fx, Decision::Accept, |h| {
        h["cheq_rs_sig"] = b64::sha256("another signature").into();
    });
    assert_eq!(
        fx.verify_dec(&doc, Decision::Accept),
        Err(VerifyError::RsSigMismatch)
    );
    // A countersignature lifted onto another resource signature of the same payload.
    let other_rs = SigningKey::from_seed("rs-1b", &[3; 32]).unwrap();
    let mut trust = TrustStore::new();
    trust
        .add_resource_server(
            RS_ORIGIN,
            Jwks::new(vec![fx.rs.public_key(), other_rs.public_key()]).unwrap(),
        )
        .unwrap();
    trust
        .add_confirmation_server(CS_URI, Jwks::new(vec![fx.cs.public_key()]).unwrap())
        .unwrap();
    let decided = fx.decided(Decision::Accept);
    let (p, sigs) = parts(&decided);
    let other = sign_resource(&bytes(&payload()), &other_rs).unwrap();
    let (_, osigs) = parts(&other);
    let spliced = assemble(&p, &[(&osigs[0].0, &osigs[0].1), (&sigs[1].0, &sigs[1].1)]);
    assert_eq!(
        verify_decision(spliced.as_bytes(), &trust, Some(Decision::Accept), &ctx()).map(|_| ()),
        Err(VerifyError::RsSigMismatch)
    );
}

// ---- rule 4 ---------------------------------------------------------------

#[test]
fn expired_refused_with_skew() {
    let fx = fx();
    let doc = fx.resource_doc(&payload());
    let expires = Utc.with_ymd_and_hms(2026, 11, 22, 21, 0, 0).unwrap();
    let at =
        |t: DateTime<Utc>| verify_resource(doc.as_bytes(), &fx.trust, &Context::at(t)).map(|_| ());
    assert!(at(expires + chrono::Duration::seconds(60)).is_ok());
    let err = at(expires + chrono::Duration::seconds(61)).unwrap_err();
    assert!(matches!(err, VerifyError::Expired { .. }));
    assert_eq!(err.rule(), 4);
    let decided = fx.decided(Decision::Accept);
    assert!(matches!(
        verify_decision(
            decided.as_bytes(),
            &fx.trust,
            Some(Decision::Accept),
            &Context::at(expires + chrono::Duration::hours(1))
        ),
        Err(VerifyError::Expired { .. })
    ));
    // Countersigning after expiry is refused by the signer too.
    let v = verify_resource(doc.as_bytes(), &fx.trust, &ctx()).unwrap();
    assert!(matches!(
        countersign(
            &v,
            &fx.cs,
            input(Decision::Accept),
            expires + chrono::Duration::hours(1)
        ),
        Err(CountersignError::Expired(_))
    ));
    // A countersignature whose iat is after expiry is refused on verification.
    let late = with_confirmation_header(&fx, Decision::Accept, |h| {
        h["iat"] = (expires.timestamp() + 3600).into();
    });
    assert_eq!(
        fx.verify_dec(&late, Decision::Accept),
        Err(VerifyError::DecidedAfterExpiry)
    );
}

/// A resource-signed CHEQ made `ahead` of the fixture's now (`date`), valid
/// for an hour after that.
fn dated_ahead(fx: &Fx, ahead: chrono::Duration) -> String {
    let date = now() + ahead;
    let mut p = payload();
    p["date"] = date.to_rfc3339_opts(SecondsFormat::Secs, true).into();
    p["expires"] = (date + chrono::Duration::hours(1))
        .to_rfc3339_opts(SecondsFormat::Secs, true)
        .into();
    fx.resource_doc(&p)
}

#[test]
fn dated_in_the_future_refused_with_skew() {
    let fx = fx();
    let secs = chrono::Duration::seconds;
    // 200 days ahead: refused by the verifier, rule 4, with its own variant.
    let far = dated_ahead(&fx, chrono::Duration::days(200));
    let err = fx.verify_res(&far).unwrap_err();
    assert!(matches!(err, VerifyError::DatedInFuture { .. }), "{err:?}");
    assert_eq!(err.rule(), 4);
    assert!(
        err.to_string().contains("later than now") && err.to_string().contains("60 s"),
        "{err}"
    );
    // The 60 s clock skew, and not a second more.
    for (ahead, ok) in [(59, true), (60, true), (61, false)] {
        let doc = dated_ahead(&fx, secs(ahead));
        let got = fx.verify_res(&doc);
        assert_eq!(got.is_ok(), ok, "now + {ahead} s: {got:?}");
        if !ok {
            assert!(matches!(got, Err(VerifyError::DatedInFuture { .. })));
        }
    }
    // The countersigner refuses too, even for a CHEQ verified at a time it
    // was acceptable (a clock that was ahead, then corrected).
    let v = verify_resource(
        far.as_bytes(),
        &fx.trust,
        &Context::at(now() + chrono::Duration::days(200)),
    )
    .unwrap();
    assert!(matches!(
        countersign(&v, &fx.cs, input(Decision::Accept), now()),
        Err(CountersignError::DatedInFuture { .. })
    ));
    // A decision on a future-dated CHEQ (countersigned by a CS whose clock
    // ran ahead) is refused by the RS's verifier, at +61 s but not at +59 s.
    for (ahead, ok) in [(59, true), (61, false)] {
        let doc = dated_ahead(&fx, secs(ahead));
        let at = now() + secs(ahead);
        let v = verify_resource(doc.as_bytes(), &fx.trust, &Context::at(at)).unwrap();
        let decided = countersign(&v, &fx.cs, input(Decision::Accept), at).unwrap();
        let got = fx.verify_dec(&decided, Decision::Accept);
        assert_eq!(got.is_ok(), ok, "decision on now + {ahead} s: {got:?}");
        if !ok {
            let err = got.unwrap_err();
            assert!(matches!(err, VerifyError::DatedInFuture { .. }), "{err:?}");
            assert_eq!(err.rule(), 4);
        }
    }
}

#[test]
fn missing_countersign_members_refused_at_every_stage() {
    let fx = fx();
    for member in [
        "nonce",
        "resource uri",
        "confirmation uri",
        "subject",
        "expires",
    ] {
        let mut p = payload();
        p.as_object_mut().unwrap().remove(member);
        let pb = b64::encode(bytes(&p));
        let (ph, s) = sign_entry(
            &fx.rs,
            r#"{"alg":"EdDSA","kid":"rs-1","typ":"cheq+jws","cheq_role":"resource"}"#,
            &pb,
        );
        let err = fx.verify_res(&assemble(&pb, &[(&ph, &s)])).unwrap_err();
        assert!(
            matches!(&err, VerifyError::NotCountersignable(cheq::cheq::CountersignableError::MissingMembers(m)) if m == &vec![member]),
            "{member}: {err:?}"
        );
        assert_eq!(err.rule(), 4);
        // And the signer refuses to sign such a payload at all.
        assert!(sign_resource(&bytes(&p), &fx.rs).is_err());
    }
}

#[test]
fn countersign_refuses_other_subject() {
    let fx = fx();
    let v = verify_resource(fx.resource_doc(&payload()).as_bytes(), &fx.trust, &ctx()).unwrap();
    let mut i = input(Decision::Accept);
    i.sub = "bob";
    assert!(matches!(
        countersign(&v, &fx.cs, i, now()),
        Err(CountersignError::SubjectMismatch { .. })
    ));
    // A verified e-mail alias matches.
    let mut p = payload();
    p["subject"] = "alice@example.com".into();
    let v = verify_resource(fx.resource_doc(&p).as_bytes(), &fx.trust, &ctx()).unwrap();
    let aliases = vec!["alice@example.com".to_owned()];
    let mut i = input(Decision::Accept);
    i.also_known_as = &aliases;
    let doc = countersign(&v, &fx.cs, i, now()).unwrap();
    assert!(fx.verify_dec(&doc, Decision::Accept).is_ok());
}

#[test]
fn collected_values_travel_signed_and_only_for_inputs() {
    let fx = fx();
    let v = verify_resource(fx.resource_doc(&payload()).as_bytes(), &fx.trust, &ctx()).unwrap();
    let mut i = input(Decision::Accept);
    i.collected = Some(
        [("account".to_owned(), "12345678".to_owned())]
            .into_iter()
            .collect(),
    );
    let doc = countersign(&v, &fx.cs, i, now()).unwrap();
    let d = verify_decision(doc.as_bytes(), &fx.trust, Some(Decision::Accept), &ctx()).unwrap();
    assert_eq!(
        d.claims().collected.as_ref().unwrap()["account"],
        "12345678"
    );
    let mut i = input(Decision::Accept);
    i.collected = Some(
        [("price".to_owned(), "1 USD".to_owned())]
            .into_iter()
            .collect(),
    );
    assert!(matches!(
        countersign(&v, &fx.cs, i, now()),
        Err(CountersignError::CollectedNotAnInput(_))
    ));
    let forged = with_confirmation_header(&fx, Decision::Accept, |h| {
        h["cheq_collected"] = json!({"price": "1 USD"});
    });
    assert_eq!(
        fx.verify_dec(&forged, Decision::Accept),
        Err(VerifyError::CollectedNotAnInput("price".into()))
    );
}

#[test]
fn trust_file_parses_and_refuses_private_keys() {
    let fx = fx();
    let trust = format!(
        r#"{{"resource_servers":[{{"origin":"{RS_ORIGIN}","keys":{{"keys":[{}]}}}}],"confirmation_servers":[{{"origin":"{CS_URI}","keys":{{"keys":[{}]}}}}]}}"#,
        fx.rs.public_jwk(),
        fx.cs.public_jwk()
    );
    let t = TrustStore::from_bytes(trust.as_bytes()).unwrap();
    assert!(t.resource_key(RESOURCE_URI, "rs-1").is_some());
    assert!(t.resource_key(RESOURCE_URI, "cs-1").is_none());
    assert!(t
        .confirmation_key("https://confirm.example/x", "cs-1")
        .is_some());
    let private = format!(
        r#"{{"resource_servers":[{{"origin":"{RS_ORIGIN}","keys":{{"keys":[{}]}}}}]}}"#,
        fx.rs.to_private_jwk_json().as_str()
    );
    assert!(matches!(
        TrustStore::from_bytes(private.as_bytes()),
        Err(cheq::sign::TrustError::Key { .. })
    ));
    let bad_origin =
        r#"{"resource_servers":[{"origin":"https://a.example/path","keys":{"keys":[]}}]}"#;
    assert!(matches!(
        TrustStore::from_bytes(bad_origin.as_bytes()),
        Err(cheq::sign::TrustError::BadOrigin(_))
    ));
}

#[test]
fn es256_resource_signature_verifies_through_josekit() {
    use josekit::jws::{JwsSigner as _, ES256};
    let fx = fx();
    let pair = ES256.generate_key_pair().unwrap();
    let mut public = pair.to_jwk_public_key();
    public.set_key_id("rs-ec");
    let mut private = pair.to_jwk_private_key();
    private.set_key_id("rs-ec");
    let signer = ES256.signer_from_jwk(&private).unwrap();
    let public_value: Value = serde_json::from_str(&public.to_string()).unwrap();
    let mut trust = fx.trust.clone();
    trust
        .add_resource_server(
            RS_ORIGIN,
            Jwks::from_value(&json!({"keys": [public_value]})).unwrap(),
        )
        .unwrap();
    let p = b64::encode(bytes(&payload()));
    let h = b64::encode(r#"{"alg":"ES256","kid":"rs-ec","typ":"cheq+jws","cheq_role":"resource"}"#);
    let sig = signer.sign(format!("{h}.{p}").as_bytes()).unwrap();
    let doc = assemble(&p, &[(&h, &b64::encode(&sig))]);
    assert!(verify_resource(doc.as_bytes(), &trust, &ctx()).is_ok());
    let mut bad = sig.clone();
    bad[5] ^= 1;
    let doc = assemble(&p, &[(&h, &b64::encode(&bad))]);
    assert!(matches!(
        verify_resource(doc.as_bytes(), &trust, &ctx()),
        Err(VerifyError::BadSignature { .. })
    ));
    // An EdDSA header naming the EC key is refused before any verification.
    let h = b64::encode(r#"{"alg":"EdDSA","kid":"rs-ec","typ":"cheq+jws","cheq_role":"resource"}"#);
    let doc = assemble(&p, &[(&h, &b64::encode(&sig))]);
    assert_eq!(
        verify_resource(doc.as_bytes(), &trust, &ctx()).map(|_| ()),
        Err(VerifyError::AlgorithmKeyMismatch { index: 0 })
    );
}

#[test]
fn required_inputs_must_be_collected_to_accept() {
    let fx = fx();
    let mut p = payload();
    p["inputs"]["parameters"][2]["parameter input"]["required"] = true.into();
    let v = verify_resource(fx.resource_doc(&p).as_bytes(), &fx.trust, &ctx()).unwrap();
    assert_eq!(
        countersign(&v, &fx.cs, input(Decision::Accept), now()).unwrap_err(),
        CountersignError::RequiredInputMissing("account".into())
    );
    // Rejecting needs no input.
    assert!(countersign(&v, &fx.cs, input(Decision::Reject), now()).is_ok());
    // An acceptance signed without the value (by a CS that skipped the check) is refused.
    let lax = verify_resource(fx.resource_doc(&payload()).as_bytes(), &fx.trust, &ctx()).unwrap();
    let doc = countersign(&lax, &fx.cs, input(Decision::Accept), now()).unwrap();
    let (_, sigs) = parts(&doc);
    let pb = b64::encode(bytes(&p));
    let rs = fx.resource_doc(&p);
    let (_, rsigs) = parts(&rs);
    let mut h = header(&sigs[1].0);
    h["cheq_rs_sig"] = b64::sha256(b64::decode(&rsigs[0].1).unwrap()).into();
    let (ph, s) = sign_entry(&fx.cs, &h.to_string(), &pb);
    let forged = assemble(&pb, &[(&rsigs[0].0, &rsigs[0].1), (&ph, &s)]);
    assert_eq!(
        fx.verify_dec(&forged, Decision::Accept),
        Err(VerifyError::RequiredInputMissing("account".into()))
    );
}

// ---- a decision read by the RS that issued it -------------------------------

/// A decision on `issued`, countersigned with `d`.
fn decided_on(fx: &Fx, issued: &str, d: Decision) -> String {
    let v = verify_resource(issued.as_bytes(), &fx.trust, &ctx()).unwrap();
    countersign(&v, &fx.cs, input(d), now()).unwrap()
}

fn own(fx: &Fx, doc: &str, issued: &str) -> Result<ResourceSignature, VerifyError> {
    verify_own_decision(
        doc.as_bytes(),
        issued,
        &fx.trust,
        Some(Decision::Accept),
        &ctx(),
    )
    .map(|d| d.resource_signature())
}

#[test]
fn an_rs_recognises_its_own_signature_in_a_decision() {
    let fx = fx();
    let issued = fx.resource_doc(&payload());
    let doc = decided_on(&fx, &issued, Decision::Accept);
    assert_eq!(own(&fx, &doc, &issued), Ok(ResourceSignature::Issued));
    // Anyone else verifies it.
    let d = verify_decision(doc.as_bytes(), &fx.trust, Some(Decision::Accept), &ctx()).unwrap();
    assert_eq!(d.resource_signature(), ResourceSignature::Verified);
}

#[test]
fn a_document_not_the_issued_one_is_verified_in_full() {
    let fx = fx();
    let issued = fx.resource_doc(&payload());
    // Another genuine CHEQ of the same RS: verified, not recognised.
    let mut other = payload();
    other["nonce"] = "BBECAwQFBgcICQoLDA0ODw".into();
    let doc = decided_on(&fx, &fx.resource_doc(&other), Decision::Accept);
    assert_eq!(own(&fx, &doc, &issued), Ok(ResourceSignature::Verified));
    // The issued document with anything after it, or cut short, vouches for nothing.
    let doc = decided_on(&fx, &issued, Decision::Accept);
    assert_eq!(
        own(&fx, &doc, &format!("{issued} ")),
        Ok(ResourceSignature::Verified)
    );
    assert_eq!(
        own(&fx, &doc, &issued[..issued.len() - 1]),
        Ok(ResourceSignature::Verified)
    );
}

#[test]
fn a_forged_resource_signature_fails_beside_the_issued_document() {
    let fx = fx();
    let issued = fx.resource_doc(&payload());
    let (p, sigs) = parts(&issued);
    // The payload changed under the RS's header and signature: the
    // confirmation entry is genuine (made by the CS over the new payload),
    // the resource one does not match the issued document, and fails.
    let mut changed = payload();
    changed["operation name"] = "Book two flights".into();
    let pb = b64::encode(bytes(&changed));
    let decided = decided_on(&fx, &issued, Decision::Accept);
    let (_, dsigs) = parts(&decided);
    let (ph, s) = sign_entry(&fx.cs, &header(&dsigs[1].0).to_string(), &pb);
    let forged = assemble(&pb, &[(&sigs[0].0, &sigs[0].1), (&ph, &s)]);
    assert_eq!(
        own(&fx, &forged, &issued),
        Err(VerifyError::BadSignature {
            index: 0,
            kid: "rs-1".into()
        })
    );
    // A resource signature changed in one byte, beside the issued payload.
    let mut bad = b64::decode(&sigs[0].1).unwrap();
    bad[7] ^= 1;
    let bad = b64::encode(&bad);
    let forged = assemble(&p, &[(&sigs[0].0, &bad), (&dsigs[1].0, &dsigs[1].1)]);
    assert_eq!(
        own(&fx, &forged, &issued),
        Err(VerifyError::BadSignature {
            index: 0,
            kid: "rs-1".into()
        })
    );
}

#[test]
fn an_issued_signature_whose_key_is_no_longer_trusted_fails() {
    let fx = fx();
    let issued = fx.resource_doc(&payload());
    let doc = decided_on(&fx, &issued, Decision::Accept);
    let mut trust = TrustStore::new();
    trust
        .add_confirmation_server(CS_URI, Jwks::new(vec![fx.cs.public_key()]).unwrap())
        .unwrap();
    let newer = SigningKey::from_seed("rs-2", &[3; 32]).unwrap();
    trust
        .add_resource_server(RS_ORIGIN, Jwks::new(vec![newer.public_key()]).unwrap())
        .unwrap();
    assert!(matches!(
        verify_own_decision(doc.as_bytes(), &issued, &trust, None, &ctx()),
        Err(VerifyError::UntrustedResourceKey { .. })
    ));
}

#[test]
fn an_issued_signature_under_a_key_of_another_algorithm_fails() {
    use josekit::jws::ES256;
    let fx = fx();
    let issued = fx.resource_doc(&payload());
    let doc = decided_on(&fx, &issued, Decision::Accept);
    // The RS's kid now names an EC key: the EdDSA header no longer fits it.
    let pair = ES256.generate_key_pair().unwrap();
    let mut public = pair.to_jwk_public_key();
    public.set_key_id("rs-1");
    let public_value: Value = serde_json::from_str(&public.to_string()).unwrap();
    let mut trust = TrustStore::new();
    trust
        .add_confirmation_server(CS_URI, Jwks::new(vec![fx.cs.public_key()]).unwrap())
        .unwrap();
    trust
        .add_resource_server(
            RS_ORIGIN,
            Jwks::from_value(&json!({"keys": [public_value]})).unwrap(),
        )
        .unwrap();
    assert_eq!(
        verify_own_decision(doc.as_bytes(), &issued, &trust, None, &ctx()).map(|_| ()),
        Err(VerifyError::AlgorithmKeyMismatch { index: 0 })
    );
}

#[test]
fn every_other_rule_holds_beside_the_issued_document() {
    let fx = fx();
    let issued = fx.resource_doc(&payload());
    // A rejection read as an acceptance (rule 3).
    let doc = decided_on(&fx, &issued, Decision::Reject);
    assert!(matches!(
        own(&fx, &doc, &issued),
        Err(VerifyError::DecisionMismatch { .. })
    ));
    // A bad confirmation signature (rule 1).
    let doc = decided_on(&fx, &issued, Decision::Accept);
    let (p, sigs) = parts(&doc);
    let mut bad = b64::decode(&sigs[1].1).unwrap();
    bad[3] ^= 1;
    let forged = assemble(
        &p,
        &[(&sigs[0].0, &sigs[0].1), (&sigs[1].0, &b64::encode(&bad))],
    );
    assert_eq!(
        own(&fx, &forged, &issued),
        Err(VerifyError::BadSignature {
            index: 1,
            kid: "cs-1".into()
        })
    );
    // Expired (rule 4).
    let late = Context::at(now() + chrono::Duration::days(2));
    assert!(matches!(
        verify_own_decision(doc.as_bytes(), &issued, &fx.trust, None, &late),
        Err(VerifyError::Expired { .. })
    ));
}
