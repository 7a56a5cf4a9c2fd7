//! Interoperability with an independent JOSE implementation (Python joserfc).
//!
//! Fixtures in `tests/fixtures/interop/` were signed by joserfc
//! (`tests/interop/make_fixtures.py`) and must verify here; documents made here
//! must verify with joserfc (`tests/interop/verify.py`). The Python side is
//! installed by `tests/interop/install.sh`, which the test command runs; when it
//! is missing these tests fail rather than skip.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::sign::{
    countersign, sign_resource, verify_decision, verify_resource, Channel, Context, Decision,
    DecisionInput, SigningKey, TrustStore, VerifyError,
};
use chrono::{TimeZone, Utc};
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/interop")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn trust() -> TrustStore {
    TrustStore::from_bytes(&fixture("trust.json")).unwrap()
}

fn ctx() -> Context<'static> {
    Context::at(Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap())
}

fn payload_field(doc: &[u8], sig: usize, member: &str) -> String {
    let v: serde_json::Value = serde_json::from_slice(doc).unwrap();
    v["signatures"][sig][member].as_str().unwrap().to_owned()
}

#[test]
fn joserfc_documents_verify_here() {
    let trust = trust();
    let v = verify_resource(&fixture("resource_signed.json"), &trust, &ctx()).unwrap();
    assert_eq!(v.cheq().raw(), fixture("payload.json").as_slice());
    assert_eq!(v.resource_kid(), "interop-rs-1");
    let a = verify_decision(
        &fixture("decided_accept.json"),
        &trust,
        Some(Decision::Accept),
        &ctx(),
    )
    .unwrap();
    assert_eq!(a.claims().sub, "alice");
    assert_eq!(a.claims().iat, 1_795_341_600);
    let r = verify_decision(
        &fixture("decided_reject.json"),
        &trust,
        Some(Decision::Reject),
        &ctx(),
    )
    .unwrap();
    assert_eq!(r.decision(), Decision::Reject);
    assert!(matches!(
        verify_decision(
            &fixture("decided_accept.json"),
            &trust,
            Some(Decision::Reject),
            &ctx()
        ),
        Err(VerifyError::DecisionMismatch { .. })
    ));
}

#[test]
fn our_resource_signature_equals_joserfcs() {
    // Ed25519 is deterministic and the header bytes are the same, so the
    // signature value must be identical.
    let key = SigningKey::from_jwk_bytes(&fixture("rs.private.json")).unwrap();
    let ours = sign_resource(&fixture("payload.json"), &key).unwrap();
    let theirs = fixture("resource_signed.json");
    for member in ["protected", "signature"] {
        assert_eq!(
            payload_field(ours.as_bytes(), 0, member),
            payload_field(&theirs, 0, member),
            "{member}"
        );
    }
}

fn python_verify(doc: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let file: PathBuf = dir.path().join("doc.json");
    std::fs::write(&file, doc).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join("tests/interop/verify.py"))
        .arg("--jwks")
        .arg(root.join("tests/fixtures/interop/rs.public.json"))
        .arg("--jwks")
        .arg(root.join("tests/fixtures/interop/cs.public.json"))
        .arg(&file)
        .output()
        .expect("python3 must be installed (tests/interop/install.sh)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("ModuleNotFoundError"),
        "joserfc is not installed: run tests/interop/install.sh ({stderr})"
    );
    out
}

#[test]
fn our_documents_verify_with_joserfc() {
    if !cheq::store::testing::can_run(
        "the JOSE interop tests with Python's joserfc",
        &[cheq::store::testing::Outside::Python("joserfc")],
    ) {
        return;
    }
    let trust = trust();
    let rs = SigningKey::from_jwk_bytes(&fixture("rs.private.json")).unwrap();
    let cs = SigningKey::from_jwk_bytes(&fixture("cs.private.json")).unwrap();
    let resource = sign_resource(&fixture("payload.json"), &rs).unwrap();
    let out = python_verify(&resource);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let verified = verify_resource(resource.as_bytes(), &trust, &ctx()).unwrap();
    let amr = vec!["pwd".to_owned()];
    let decided = countersign(
        &verified,
        &cs,
        DecisionInput {
            decision: Decision::Accept,
            sub: "alice",
            also_known_as: &[],
            auth_time: 1_795_340_600,
            amr: &amr,
            channel: Channel::Html,
            view_text: "interop view",
            collected: None,
            passkey: None,
        },
        ctx().now,
    )
    .unwrap();
    let out = python_verify(&decided);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["signatures"][1]["cheq_decision"], "accept");
    assert_eq!(summary["signatures"][1]["cheq_role"], "confirmation");
    // Same claims as joserfc's own accept fixture: the confirmation signature is identical.
    assert_eq!(
        payload_field(decided.as_bytes(), 1, "signature"),
        payload_field(&fixture("decided_accept.json"), 1, "signature")
    );

    // The independent verifier really checks the second signature.
    let mut tampered: serde_json::Value = serde_json::from_str(&decided).unwrap();
    let sig = tampered["signatures"][1]["signature"]
        .as_str()
        .unwrap()
        .to_owned();
    let flipped = match sig.strip_prefix('A') {
        Some(rest) => format!("B{rest}"),
        None => format!("A{}", &sig[1..]),
    };
    tampered["signatures"][1]["signature"] = flipped.into();
    let out = python_verify(&tampered.to_string());
    assert_eq!(out.status.code(), Some(1));
}
