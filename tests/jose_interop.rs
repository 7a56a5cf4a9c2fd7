//! Interoperability with a second independent JOSE implementation, node's
//! `jose` (beside Python's joserfc in `tests/interop.rs`), PROTOCOL.md §5, in
//! both directions and as real processes:
//!
//! - node verifies our decided CHEQs (General JSON Serialization), EVERY
//!   signature with its own server's key (`tests/jose/verify.mjs`: jose's
//!   `flattenedVerify` per signature, `crit` honoured), documents countersigned
//!   by the signing core and by a running CS; a tampered document, a swapped
//!   key and an unknown `crit` fail there;
//! - we verify CHEQs node makes and signs (`tests/jose/sign.mjs`), with the
//!   library and with `cheq verify`, and refuse the ones it breaks on
//!   purpose (an unknown `crit` parameter, alg HS256, an embedded key).
//!
//! node's side is installed by `tests/jose/install.sh` (jose pinned at
//! 6.2.17), which the test command runs; when it is missing these tests fail
//! rather than skip.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use cheq::sign::{
    countersign, sign_resource, verify_decision, verify_resource, Channel, Context, Decision,
    DecisionInput, SigningKey, TrustStore, VerifyError,
};
use chrono::Utc;
use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures/interop").join(name)
}

fn read_fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap()
}

fn trust() -> TrustStore {
    TrustStore::from_bytes(&read_fixture("trust.json")).unwrap()
}

/// Runs a script of `tests/jose/` with node.
fn node(script: &str, args: &[&str]) -> Output {
    let dir = root().join("tests/jose");
    assert!(
        dir.join("node_modules/jose/package.json").exists(),
        "node's jose is not installed: run tests/jose/install.sh"
    );
    Command::new("node")
        .arg(dir.join(script))
        .args(args)
        .output()
        .expect("node must be installed (tests/jose/install.sh)")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `tests/jose/verify.mjs` on `doc`: (exit code, summary or stderr).
fn node_verify(doc: &str, rs_jwks: &Path, cs_jwks: &Path) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("doc.json");
    std::fs::write(&file, doc).unwrap();
    let out = node(
        "verify.mjs",
        &[
            "--resource-jwks",
            rs_jwks.to_str().unwrap(),
            "--confirmation-jwks",
            cs_jwks.to_str().unwrap(),
            file.to_str().unwrap(),
        ],
    );
    let said = if out.status.success() {
        text(&out.stdout)
    } else {
        text(&out.stderr)
    };
    (out.status.code(), said)
}

/// The fixtures' keys, the same the joserfc interop uses.
fn keys() -> (SigningKey, SigningKey) {
    (
        SigningKey::from_jwk_bytes(&read_fixture("rs.private.json")).unwrap(),
        SigningKey::from_jwk_bytes(&read_fixture("cs.private.json")).unwrap(),
    )
}

/// A decided CHEQ countersigned by the signing core, now (the fixture
/// payload's dates lie in the past; node does not look at them).
fn our_decided(decision: Decision) -> String {
    let (rs, cs) = keys();
    let resource = sign_resource(&read_fixture("payload.json"), &rs).unwrap();
    let at = chrono::DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let verified = verify_resource(resource.as_bytes(), &trust(), &Context::at(at)).unwrap();
    let amr = vec!["pwd".to_owned()];
    countersign(
        &verified,
        &cs,
        DecisionInput {
            decision,
            sub: "alice",
            also_known_as: &[],
            auth_time: at.timestamp() - 600,
            amr: &amr,
            channel: Channel::Voice,
            view_text: "the view read out",
            collected: None,
            passkey: None,
        },
        at,
    )
    .unwrap()
}

/// `doc` with one base64url character of `member` of signature `i`
/// changed (or of the payload when `i` is `None`).
fn tampered(doc: &str, i: Option<usize>, member: &str) -> String {
    let mut v: Value = serde_json::from_str(doc).unwrap();
    let slot = match i {
        Some(i) => &mut v["signatures"][i][member],
        None => &mut v["payload"],
    };
    let s = slot.as_str().unwrap().to_owned();
    // The middle character: every one of its bits is data.
    let mid = s.len() / 2;
    let c = if &s[mid..mid + 1] == "A" { "B" } else { "A" };
    *slot = format!("{}{c}{}", &s[..mid], &s[mid + 1..]).into();
    v.to_string()
}

// ---------------------------------------------------------------------------
// node verifies what we sign
// ---------------------------------------------------------------------------

/// Whether JOSE interop tests with node's jose can run here (else they are skipped,
/// saying so; `scripts/test` installs what they need).
fn node_jose() -> bool {
    cheq::store::testing::can_run(
        "the JOSE interop tests with node's jose",
        &[cheq::store::testing::Outside::Node("jose")],
    )
}

#[test]
fn node_jose_verifies_every_signature_of_our_decided_cheqs() {
    if !node_jose() {
        return;
    }
    let (rs_jwks, cs_jwks) = (fixture("rs.public.json"), fixture("cs.public.json"));
    for decision in [Decision::Accept, Decision::Reject] {
        let doc = our_decided(decision);
        let (code, said) = node_verify(&doc, &rs_jwks, &cs_jwks);
        assert_eq!(code, Some(0), "{decision:?}: {said}");
        let summary: Value = serde_json::from_str(&said).unwrap();
        assert_eq!(
            summary["signatures"],
            json!([
                {"kid": "interop-rs-1", "cheq_role": "resource", "cheq_decision": null},
                {"kid": "interop-cs-1", "cheq_role": "confirmation", "cheq_decision": decision.as_str()},
            ]),
            "{said}"
        );
    }

    // Every signature is checked, each with its own server's key.
    let doc = our_decided(Decision::Accept);
    for (what, bad) in [
        (
            "the confirmation signature",
            tampered(&doc, Some(1), "signature"),
        ),
        (
            "the resource signature",
            tampered(&doc, Some(0), "signature"),
        ),
        ("the payload", tampered(&doc, None, "payload")),
    ] {
        let (code, said) = node_verify(&bad, &rs_jwks, &cs_jwks);
        assert_eq!(
            code,
            Some(1),
            "node accepted a document with {what} altered: {said}"
        );
        assert!(said.contains("invalid"), "{said}");
    }
    // The resource server's key under the CS's kid: the confirmation
    // signature must fail with it.
    let dir = tempfile::tempdir().unwrap();
    let impostor = dir.path().join("impostor.json");
    let mut rs_as_cs: Value = serde_json::from_slice(&read_fixture("rs.public.json")).unwrap();
    rs_as_cs["kid"] = json!("interop-cs-1");
    std::fs::write(&impostor, json!({"keys": [rs_as_cs]}).to_string()).unwrap();
    let (code, said) = node_verify(&doc, &rs_jwks, &impostor);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("signature 1"), "{said}");
}

#[test]
fn node_jose_honours_crit() {
    if !node_jose() {
        return;
    }
    // A document whose resource header marks a parameter critical that
    // node's verifier was not told it understands: refused there.
    let made = node_sign(&["--break", "unknown-crit"], false);
    let (code, said) = node_verify(
        &made.resource,
        &fixture("rs.public.json"),
        &fixture("cs.public.json"),
    );
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("cheq_unknown"), "{said}");
    // And a confirmation header that does not mark cheq_decision critical.
    let doc = our_decided(Decision::Accept);
    let mut v: Value = serde_json::from_str(&doc).unwrap();
    let protected = v["signatures"][1]["protected"].as_str().unwrap().to_owned();
    let mut header: Value =
        serde_json::from_slice(&cheq::sign::b64::decode(&protected).unwrap()).unwrap();
    header.as_object_mut().unwrap().remove("crit");
    v["signatures"][1]["protected"] = cheq::sign::b64::encode(header.to_string()).into();
    let (code, said) = node_verify(
        &v.to_string(),
        &fixture("rs.public.json"),
        &fixture("cs.public.json"),
    );
    assert_eq!(code, Some(1), "{said}");
}

/// A CHEQ decided through a running CS (the raw API, §10), verified by node
/// with the two servers' published keys.
#[actix_web::test]
async fn node_jose_verifies_a_decision_of_a_running_cs() {
    if !node_jose() {
        return;
    }
    let env = Env::start(Options {
        gateways: vec![Gateway::new("voice-gw", "voice-gateway-secret-0123")],
        ..Options::default()
    })
    .await;
    env.set_pin("alice", "432109");
    let pack = env.invoke().await;
    let gw = env.voice(&Gateway::new("voice-gw", "voice-gateway-secret-0123"));
    let token = gw.user_token("alice", "432109").await;
    let created = gw.create(Some(&token), &pack.resource_uri).await;
    created.expect(201, "create");
    let id = created.body["id"].as_str().unwrap().to_owned();
    gw.decide(Some(&token), &id, &json!({"decision": "accept"}))
        .await
        .expect(200, "accept");
    let records = env.records("alice");
    assert_eq!(records.len(), 1);
    let doc = records[0].document.clone();

    let dir = tempfile::tempdir().unwrap();
    let (rs_jwks, cs_jwks) = (dir.path().join("rs.json"), dir.path().join("cs.json"));
    std::fs::write(&rs_jwks, public_jwks(&env.rs_key)).unwrap();
    std::fs::write(&cs_jwks, public_jwks(&env.cs_key)).unwrap();
    let (code, said) = node_verify(&doc, &rs_jwks, &cs_jwks);
    assert_eq!(code, Some(0), "{said}");
    let summary: Value = serde_json::from_str(&said).unwrap();
    assert_eq!(
        summary["signatures"][1]["cheq_decision"], "accept",
        "{said}"
    );
    // The keys swapped: nothing verifies.
    let (code, said) = node_verify(&doc, &cs_jwks, &rs_jwks);
    assert_eq!(code, Some(1), "{said}");
    env.stop().await;
}

// ---------------------------------------------------------------------------
// We verify what node signs
// ---------------------------------------------------------------------------

struct NodeSigned {
    resource: String,
    decided: Option<String>,
}

/// `tests/jose/sign.mjs` with the fixture keys, for a fresh resource URI of
/// the fixture RS origin; `decided` adds the CS's countersignature.
fn node_sign(extra: &[&str], decided: bool) -> NodeSigned {
    let rs_key = fixture("rs.private.json");
    let cs_key = fixture("cs.private.json");
    let uri = format!(
        "https://api.airline.example/cheq/confirmations/{}",
        cheq::sign::b64::encode(rand::random::<[u8; 16]>())
    );
    let mut args = vec![
        "--rs-key",
        rs_key.to_str().unwrap(),
        "--resource-uri",
        &uri,
        "--confirmation-uri",
        "https://confirm.example",
        "--subject",
        "alice",
    ];
    if decided {
        args.extend(["--cs-key", cs_key.to_str().unwrap()]);
    }
    args.extend_from_slice(extra);
    let out = node("sign.mjs", &args);
    assert!(out.status.success(), "sign.mjs: {}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    NodeSigned {
        resource: v["resource"].as_str().unwrap().to_owned(),
        decided: v["decided"].as_str().map(str::to_owned),
    }
}

/// `cheq verify --trust <fixtures> [--expect STAGE] FILE`: (exit code,
/// stdout, stderr).
fn cheq_verify(doc: &str, expect: Option<&str>) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("doc.json");
    std::fs::write(&file, doc).unwrap();
    let trust = fixture("trust.json");
    let mut args = vec!["verify", "--trust", trust.to_str().unwrap()];
    if let Some(e) = expect {
        args.extend(["--expect", e]);
    }
    args.push(file.to_str().unwrap());
    let out = Command::new(env!("CARGO_BIN_EXE_cheq"))
        .args(&args)
        .output()
        .unwrap();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn cheqs_node_signs_verify_here() {
    if !node_jose() {
        return;
    }
    let ctx = Context::at(Utc::now());
    for decision in ["accept", "reject"] {
        let made = node_sign(&["--decision", decision], true);
        let v = verify_resource(made.resource.as_bytes(), &trust(), &ctx).unwrap();
        assert_eq!(v.resource_kid(), "interop-rs-1");
        assert_eq!(v.fields().subject, "alice");
        let decided = made.decided.unwrap();
        let expected = Decision::parse(decision).unwrap();
        let d = verify_decision(decided.as_bytes(), &trust(), Some(expected), &ctx).unwrap();
        assert_eq!(d.decision(), expected);
        assert_eq!(d.claims().channel, Channel::Voice);
        assert_eq!(d.claims().amr, vec!["pin".to_owned()]);

        // And through the CLI.
        let (code, out, err) = cheq_verify(&made.resource, Some("resource"));
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap()["stage"],
            "resource"
        );
        let (code, out, err) = cheq_verify(&decided, Some(decision));
        assert_eq!(code, Some(0), "{err}");
        let summary: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(summary["decision"], decision, "{out}");
        assert_eq!(summary["kids"]["confirmation"], "interop-cs-1", "{out}");
        // The other decision is refused.
        let other = if decision == "accept" {
            "reject"
        } else {
            "accept"
        };
        let (code, _, err) = cheq_verify(&decided, Some(other));
        assert_eq!(code, Some(1), "{err}");
    }
}

#[test]
fn broken_cheqs_node_signs_are_refused_here() {
    if !node_jose() {
        return;
    }
    let ctx = Context::at(Utc::now());
    for (what, decided) in [
        ("unknown-crit", false),
        ("hs256", false),
        ("embedded-jwk", true),
    ] {
        let made = node_sign(&["--break", what], decided);
        let refused = verify_resource(made.resource.as_bytes(), &trust(), &ctx)
            .expect_err(&format!("{what}: accepted"));
        let right = match what {
            "unknown-crit" => {
                matches!(&refused, VerifyError::UnknownCrit { index: 0, name } if name == "cheq_unknown")
            }
            "hs256" => {
                matches!(&refused, VerifyError::AlgorithmNotAllowed { index: 0, alg } if alg == "HS256")
            }
            _ => matches!(
                refused,
                VerifyError::EmbeddedKey {
                    index: 0,
                    member: "jwk"
                }
            ),
        };
        assert!(right, "{what}: refused for another reason: {refused}");
        let (code, out, err) = cheq_verify(&made.resource, None);
        assert_eq!(code, Some(1), "{what}: {out}");
        assert!(err.contains(&refused.to_string()), "{what}: {err}");
        if let Some(decided) = made.decided {
            assert!(
                verify_decision(decided.as_bytes(), &trust(), None, &ctx).is_err(),
                "{what}: the decided document was accepted"
            );
        }
    }
}
