//! Passkey-bound decisions in the signing core (PROTOCOL.md §14): a CHEQ
//! asking `"assurance": "passkey"`, an authenticator's assertion over the
//! challenge of exactly one decision in `cheq_passkey`, checked by every
//! verifier (rule 6). One negative test per way of fooling it: an assertion
//! for another view, decision, CHEQ or typed values, another origin or RP
//! ID, no user verification, one copied onto a second CHEQ, and an
//! acceptance without one.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::sign::header::{confirmation_header_json, ConfirmationClaims};
use cheq::sign::passkey::{challenge, PasskeyError};
use cheq::sign::{
    assemble, b64, countersign, sign_entry, sign_resource, verify_decision, verify_resource,
    Algorithm, Channel, Context, CountersignError, Decision, DecisionInput, Jwks, SigningKey,
    TrustStore, VerifyError,
};
use chrono::{DateTime, TimeZone, Utc};
use ed25519_dalek::Signer as _;
use indexmap::IndexMap;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

const RS_ORIGIN: &str = "https://api.bank.example";
const CS_URI: &str = "https://confirm.example/confirm";
const CS_ORIGIN: &str = "https://confirm.example";
const RP_ID: &str = "confirm.example";
const VIEW: &str = "Transfer 12.50 from your account to ACME";

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap()
}

fn payload(nonce: &str, assurance: bool) -> Vec<u8> {
    let mut p = json!({
        "version": "1.0",
        "operation": "https://api.bank.example/tools/transfer:invoke",
        "operation name": "Transfer funds",
        "inputs": {"parameters": [
            {"parameter name": "payee", "parameter value": "ACME"},
            {"parameter name": "amount", "parameter input": {"type": "text", "sensitive": false, "required": true}}
        ]},
        "date": "2026-11-22T09:00:00Z",
        "nonce": nonce,
        "resource uri": format!("{RS_ORIGIN}/cheq/confirmations/{nonce}"),
        "confirmation uri": CS_URI,
        "subject": "alice",
        "expires": "2026-11-22T21:00:00Z"
    });
    if assurance {
        p["assurance"] = json!("passkey");
    }
    serde_json::to_vec(&p).unwrap()
}

struct Fx {
    rs: SigningKey,
    cs: SigningKey,
    trust: TrustStore,
    authenticator: ed25519_dalek::SigningKey,
}

fn fx() -> Fx {
    let rs = SigningKey::from_seed("rs-1", &[1; 32]).unwrap();
    let cs = SigningKey::from_seed("cs-1", &[2; 32]).unwrap();
    let mut trust = TrustStore::new();
    trust
        .add_resource_server(RS_ORIGIN, Jwks::new(vec![rs.public_key()]).unwrap())
        .unwrap();
    trust
        .add_confirmation_server(CS_ORIGIN, Jwks::new(vec![cs.public_key()]).unwrap())
        .unwrap();
    Fx {
        rs,
        cs,
        trust,
        authenticator: ed25519_dalek::SigningKey::from_bytes(&[7; 32]),
    }
}

fn collected(amount: &str) -> IndexMap<String, String> {
    let mut m = IndexMap::new();
    m.insert("amount".to_owned(), amount.to_owned());
    m
}

/// How an authenticator and a browser would answer; each part may be bent.
struct Answer<'a> {
    rs_sig: [u8; 32],
    view: &'a str,
    decision: Decision,
    collected: Option<IndexMap<String, String>>,
    origin: &'a str,
    rp_id: &'a str,
    flags: u8,
}

fn assertion(f: &Fx, a: &Answer<'_>) -> Map<String, Value> {
    let view: [u8; 32] = Sha256::digest(a.view.as_bytes()).into();
    let c = challenge(&a.rs_sig, &view, a.decision, a.collected.as_ref());
    let client_data = format!(
        r#"{{"type":"webauthn.get","challenge":"{}","origin":"{}"}}"#,
        b64::encode(c),
        a.origin
    );
    let mut auth_data = Sha256::digest(a.rp_id.as_bytes()).to_vec();
    auth_data.push(a.flags);
    auth_data.extend_from_slice(&1u32.to_be_bytes());
    let mut message = auth_data.clone();
    message.extend_from_slice(&Sha256::digest(client_data.as_bytes()));
    let v = json!({
        "id": b64::encode(b"cred-1"),
        "key": {"kty": "OKP", "crv": "Ed25519", "x": b64::encode(f.authenticator.verifying_key().to_bytes())},
        "authenticator_data": b64::encode(&auth_data),
        "client_data": b64::encode(client_data.as_bytes()),
        "signature": b64::encode(f.authenticator.sign(&message).to_bytes()),
    });
    v.as_object().unwrap().clone()
}

static AMR: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| vec!["hwk".into()]);

/// The resource-signed CHEQ, its verified form and its `cheq_rs_sig` bytes.
fn cheq(f: &Fx, nonce: &str, assurance: bool) -> (cheq::sign::VerifiedCheq, [u8; 32]) {
    let doc = sign_resource(&payload(nonce, assurance), &f.rs).unwrap();
    let verified = verify_resource(
        doc.as_bytes(),
        &f.trust,
        &Context {
            now: now(),
            resource_uri: None,
            confirmation_uri: Some(CS_URI),
        },
    )
    .unwrap();
    let v: Value = serde_json::from_str(&doc).unwrap();
    let sig = b64::decode(v["signatures"][0]["signature"].as_str().unwrap()).unwrap();
    (verified, Sha256::digest(&sig).into())
}

/// What the CS does (countersign, which checks the assertion first), and
/// what every verifier does with a document a rogue CS signed anyway
/// (`sign_entry`, no check): both must refuse the same way.
fn decide(
    f: &Fx,
    verified: &cheq::sign::VerifiedCheq,
    decision: Decision,
    amount: &str,
    passkey: Option<Map<String, Value>>,
) -> Result<(), VerifyError> {
    let input = DecisionInput {
        decision,
        sub: "alice",
        also_known_as: &[],
        auth_time: now().timestamp() - 10,
        amr: &AMR,
        channel: Channel::Html,
        view_text: VIEW,
        collected: Some(collected(amount)),
        passkey: passkey.clone(),
    };
    let by_cs = countersign(verified, &f.cs, input, now());
    // The rogue CS: the same header, signed without a check, beside the
    // resource signature (the first of any countersigned document).
    let resource = countersign(verified, &f.cs, reject_input(), now()).unwrap();
    let rs_doc: Value = serde_json::from_str(&resource).unwrap();
    let payload_b64 = rs_doc["payload"].as_str().unwrap();
    let rs_sig = &rs_doc["signatures"][0];
    let rs_bytes = b64::decode(rs_sig["signature"].as_str().unwrap()).unwrap();
    let claims = ConfirmationClaims {
        decision,
        sub: "alice".into(),
        iat: now().timestamp(),
        auth_time: now().timestamp() - 10,
        amr: AMR.clone(),
        channel: Channel::Html,
        view: b64::sha256(VIEW.as_bytes()),
        rs_sig: b64::sha256(&rs_bytes),
        collected: Some(collected(amount)),
        passkey,
    };
    let header = confirmation_header_json(Algorithm::EdDsa, f.cs.kid(), &claims);
    let (protected, signature) = sign_entry(&f.cs, &header, payload_b64);
    let doc = assemble(
        payload_b64,
        &[
            (
                rs_sig["protected"].as_str().unwrap(),
                rs_sig["signature"].as_str().unwrap(),
            ),
            (&protected, &signature),
        ],
    );
    let verified = verify_decision(
        doc.as_bytes(),
        &f.trust,
        Some(decision),
        &Context::at(now()),
    );
    match (&by_cs, &verified) {
        (Ok(_), Ok(_)) => {}
        (Err(CountersignError::Passkey(a)), Err(VerifyError::Passkey(b))) => assert_eq!(a, b),
        (Err(CountersignError::PasskeyRequired), Err(VerifyError::PasskeyMissing)) => {}
        other => panic!("the CS and the verifier disagree: {other:?}"),
    }
    verified.map(|_| ())
}

fn reject_input() -> DecisionInput<'static> {
    DecisionInput {
        decision: Decision::Reject,
        sub: "alice",
        also_known_as: &[],
        auth_time: now().timestamp() - 10,
        amr: &AMR,
        channel: Channel::Html,
        view_text: VIEW,
        collected: None,
        passkey: None,
    }
}

fn good<'a>(rs_sig: [u8; 32], decision: Decision) -> Answer<'a> {
    Answer {
        rs_sig,
        view: VIEW,
        decision,
        collected: Some(collected("12.50")),
        origin: CS_ORIGIN,
        rp_id: RP_ID,
        flags: 0x05,
    }
}

#[test]
fn an_acceptance_bound_by_the_users_passkey_verifies_and_one_without_is_refused() {
    let f = fx();
    let (verified, rs_sig) = cheq(&f, "AAECAwQFBgcICQoLDA0ODw", true);
    let member = assertion(&f, &good(rs_sig, Decision::Accept));
    assert_eq!(
        decide(&f, &verified, Decision::Accept, "12.50", Some(member)),
        Ok(())
    );
    // The CHEQ asks for a passkey: an acceptance without one fails rule 6.
    let e = decide(&f, &verified, Decision::Accept, "12.50", None).unwrap_err();
    assert_eq!(e, VerifyError::PasskeyMissing);
    assert_eq!(e.rule(), 6);
    // A rejection need not carry one.
    assert_eq!(
        decide(&f, &verified, Decision::Reject, "12.50", None),
        Ok(())
    );
    // A CHEQ that does not ask is decided as before.
    let (plain, _) = cheq(&f, "AAECAwQFBgcICQoLDA0OEA", false);
    assert_eq!(decide(&f, &plain, Decision::Accept, "12.50", None), Ok(()));
}

#[test]
fn an_assertion_binds_one_view_decision_cheq_and_typed_values() {
    let f = fx();
    let (verified, rs_sig) = cheq(&f, "AAECAwQFBgcICQoLDA0ODw", true);
    let (_, other_rs_sig) = cheq(&f, "AAECAwQFBgcICQoLDA0OEA", true);
    let wrong = |e| Err(VerifyError::Passkey(e));
    let cases: Vec<(&str, Answer<'_>, Result<(), VerifyError>)> = vec![
        (
            "another view",
            Answer {
                view: "Transfer 1,250.00 to ACME",
                ..good(rs_sig, Decision::Accept)
            },
            wrong(PasskeyError::WrongChallenge),
        ),
        (
            "another decision",
            good(rs_sig, Decision::Reject),
            wrong(PasskeyError::WrongChallenge),
        ),
        (
            "another CHEQ (a copied assertion)",
            good(other_rs_sig, Decision::Accept),
            wrong(PasskeyError::WrongChallenge),
        ),
        (
            "other typed values",
            Answer {
                collected: Some(collected("1250.00")),
                ..good(rs_sig, Decision::Accept)
            },
            wrong(PasskeyError::WrongChallenge),
        ),
        (
            "another origin",
            Answer {
                origin: "https://confirm.evil.example",
                ..good(rs_sig, Decision::Accept)
            },
            wrong(PasskeyError::WrongOrigin),
        ),
        (
            "another RP ID",
            Answer {
                rp_id: "evil.example",
                ..good(rs_sig, Decision::Accept)
            },
            wrong(PasskeyError::WrongRpId),
        ),
        (
            "no user verification",
            Answer {
                flags: 0x01,
                ..good(rs_sig, Decision::Accept)
            },
            wrong(PasskeyError::UserNotVerified),
        ),
    ];
    for (what, answer, want) in cases {
        let member = assertion(&f, &answer);
        let got = decide(&f, &verified, Decision::Accept, "12.50", Some(member));
        assert_eq!(got, want, "{what}");
        assert_eq!(got.unwrap_err().rule(), 6, "{what}");
    }
    // A malformed member is its own refusal.
    let mut member = assertion(&f, &good(rs_sig, Decision::Accept));
    member.remove("signature");
    assert_eq!(
        decide(&f, &verified, Decision::Accept, "12.50", Some(member)),
        wrong(PasskeyError::Malformed("cheq_passkey"))
    );
}

#[test]
fn an_unknown_assurance_is_refused_rather_than_ignored() {
    let mut p: Value = serde_json::from_slice(&payload("AAECAwQFBgcICQoLDA0ODw", false)).unwrap();
    p["assurance"] = json!("retina-scan");
    let f = fx();
    // Not signed: the signer reads the payload as a verifier would.
    let e = sign_resource(&serde_json::to_vec(&p).unwrap(), &f.rs).unwrap_err();
    assert!(e.to_string().contains("assurance"), "{e}");
}
