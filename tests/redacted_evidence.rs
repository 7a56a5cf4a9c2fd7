//! Evidence of every decision that the tools can read (PROTOCOL.md §8.1,
//! §15), end to end on real sockets and with the real `cheq` binary:
//!
//! - a decision with private values (`transfer_funds`), once delivered, is
//!   offered in the history as redacted evidence, named by operation, date
//!   and decision, signed by the CS; `cheq verify` checks that signature
//!   and the resource signature and says what it cannot check; `cheq audit
//!   --document` finds its log entry by the digest the CS kept, and says
//!   that this is all it proves unless `--trust` has it verify the
//!   evidence first; all exit 0;
//! - a forged or tampered copy fails: a decision turned round with its
//!   digests emptied, another log digest, a copy re-signed with another
//!   key, the signature moved onto another CHEQ's evidence, a file the RS
//!   made (signed with its own key, or not at all), a CS trusted for
//!   another origin, an altered CHEQ, a wrong RS key, a missing member, an
//!   unknown format version, the older unversioned shape;
//! - a record stored in the older shape is served in the current one;
//! - a decision without private values is the signed CHEQ, named likewise.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use cheq::evidence::RedactedEvidence;
use cheq::store::cs::{DecisionRecord, Delivery};
use common::*;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const FROM: &str = "12345678";
const TO: &str = "87654321";
const AMOUNT: &str = "250.00";

/// Waits (at most 10 s) until alice's decision on `resource_uri` is
/// delivered and no longer sealed.
async fn delivered(env: &Env, resource_uri: &str) -> DecisionRecord {
    let start = Instant::now();
    loop {
        let found = env
            .records("alice")
            .into_iter()
            .find(|r| r.resource_uri == resource_uri);
        if let Some(r) = found {
            if matches!(r.delivery, Delivery::Delivered { .. }) && !r.sealed {
                return r;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "not delivered after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (at most 10 s) until the log's checkpoint covers `n` entries.
async fn log_covers(base: &str, n: u64) {
    let start = Instant::now();
    loop {
        let size = log_size(base).await;
        if size >= n {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the log has {size} entries, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The UTC date of a record's decision, as evidence file names give it.
fn date_of(r: &DecisionRecord) -> String {
    chrono::DateTime::from_timestamp(r.decided_at, 0)
        .unwrap()
        .format("%Y-%m-%d")
        .to_string()
}

/// A trust file for `cheq verify`: both servers' public keys (the RS's
/// replaced by `rs_keys` when given, the CS's trusted for `cs_origin`
/// instead of its own when given).
fn trust_file(
    env: &Env,
    dir: &Path,
    name: &str,
    rs_keys: Option<&str>,
    cs_origin: Option<&str>,
) -> PathBuf {
    let rs: Value = serde_json::from_str(rs_keys.unwrap_or(&public_jwks(&env.rs_key))).unwrap();
    let cs: Value = serde_json::from_str(&public_jwks(&env.cs_key)).unwrap();
    let trust = json!({
        "resource_servers": [{"origin": env.rs_url, "keys": rs}],
        "confirmation_servers": [{"origin": cs_origin.unwrap_or(&env.cs_origin), "keys": cs}],
    });
    let path = dir.join(name);
    std::fs::write(&path, trust.to_string()).unwrap();
    path
}

fn verify(trust: &Path, file: &Path, extra: &[&str]) -> (bool, String, String) {
    let (trust, file) = (trust.display().to_string(), file.display().to_string());
    let mut args = vec!["verify", "--trust", &trust];
    args.extend_from_slice(extra);
    args.push(&file);
    cheq_cmd(&args)
}

/// `cheq audit` of one document, with `--trust` when given.
fn audit(base: &str, key: &str, file: &Path, trust: Option<&Path>) -> (bool, String, String) {
    let log = format!("{base}/log/");
    let file = file.display().to_string();
    let mut args = vec!["audit", "--log", &log, "--key", key, "--document", &file];
    let trust = trust.map(|t| t.display().to_string());
    if let Some(t) = &trust {
        args.extend_from_slice(&["--trust", t]);
    }
    cheq_cmd(&args)
}

/// The statement an evidence file signs (its payload), as a JSON object.
fn statement_of(evidence: &str) -> Map<String, Value> {
    let file: Value = serde_json::from_str(evidence).unwrap();
    let payload = cheq::sign::b64::decode(file["payload"].as_str().unwrap()).unwrap();
    serde_json::from_slice(&payload).unwrap()
}

/// `evidence` with its statement changed by `f` and its signature kept
/// (a forgery), written to `dir/name`.
fn forged(
    evidence: &str,
    dir: &Path,
    name: &str,
    f: impl FnOnce(&mut Map<String, Value>),
) -> PathBuf {
    let mut statement = statement_of(evidence);
    f(&mut statement);
    let mut file: Map<String, Value> = serde_json::from_str(evidence).unwrap();
    file["payload"] = json!(cheq::sign::b64::encode(
        Value::Object(statement).to_string()
    ));
    let path = dir.join(name);
    std::fs::write(&path, Value::Object(file).to_string()).unwrap();
    path
}

/// `text` written to `dir/name`.
fn written(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The statement of `evidence`, changed by `f`, signed with `key`.
fn resigned(
    evidence: &str,
    key: &cheq::sign::SigningKey,
    f: impl FnOnce(&mut Map<String, Value>),
) -> String {
    let mut statement = statement_of(evidence);
    f(&mut statement);
    let text = Value::Object(statement).to_string();
    RedactedEvidence::parse(text.as_bytes()).unwrap().sign(key)
}

/// A failed run of the binary: exit 1, and the one line on stderr.
fn refused(run: (bool, String, String), says: &str) {
    let (ok, out, err) = run;
    assert!(!ok, "passed: {out}");
    assert!(err.contains(says), "{says:?} not in: {err}");
}

#[actix_web::test]
async fn redacted_evidence_verifies_and_is_found_in_the_log() {
    let env = Env::start(Options::default()).await;
    let base = env.cs_url.clone();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // A decision with private values, on the page.
    let mut b = env.browser();
    let (pack, path, page) = env.open_transfer(&mut b).await;
    let outcome = b.accept_typing(&path, &page, [FROM, TO, AMOUNT]).await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    // The outcome page names its download as what it is.
    assert!(
        outcome
            .text
            .contains("Download the redacted evidence (your private values withheld)"),
        "{}",
        outcome.text
    );
    assert!(!outcome.text.contains("Download the signed decision"));
    let record = delivered(&env, &pack.resource_uri).await;
    let log_digest = record.log_digest.clone().expect("the log is on");
    log_covers(&base, 1).await;
    let id = record.key().id();

    // The history labels it as what it is.
    let history = b.get("/history").await;
    assert_eq!(history.status, 200);
    assert!(
        history.raw.contains(&format!(
            "<a href=\"/history/{id}.json\" download>redacted evidence<span"
        )),
        "{}",
        history.raw
    );
    assert!(
        !history.raw.contains("download>signed CHEQ<span"),
        "{}",
        history.raw
    );

    // The download: named by operation, date and decision, marked redacted,
    // a JWS signed by the CS.
    let res = b.get(&format!("/history/{id}.json")).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(
        res.header("content-disposition").unwrap(),
        format!(
            "attachment; filename=\"cheq-transfer_funds-{}-accept-redacted.json\"",
            date_of(&record)
        )
    );
    assert_eq!(res.header("content-type").unwrap(), "application/jose+json");
    let evidence = res.raw.clone();
    for v in [FROM, TO] {
        assert!(!evidence.contains(v), "the evidence holds {v}");
    }
    let statement = statement_of(&evidence);
    assert_eq!(
        statement["format"], "cheq-redacted-evidence/v1",
        "{evidence}"
    );
    assert_eq!(statement["log_digest"], log_digest.as_str());
    assert_eq!(statement["sub"], "alice");
    assert_eq!(statement["decision"], "accept");
    let file = written(d, "evidence.json", &evidence);

    // cheq verify: what it proves, and what it cannot.
    let trust = trust_file(&env, d, "trust.json", None, None);
    let (ok, out, err) = verify(&trust, &file, &[]);
    assert!(ok, "{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["valid"], true);
    assert_eq!(summary["stage"], "decided (redacted evidence)");
    assert_eq!(summary["decision"], "accept");
    assert_eq!(summary["sub"], "alice");
    assert_eq!(summary["operation name"], "Transfer funds");
    assert_eq!(summary["subject"], "alice");
    assert_eq!(summary["signed_by"]["resource"]["kid"], env.rs_key.kid());
    assert_eq!(summary["signed_by"]["evidence"]["kid"], env.cs_key.kid());
    assert_eq!(summary["rules_checked"], json!([1, 2, 3, 4]));
    assert!(
        summary["checked"][0]
            .as_str()
            .unwrap()
            .contains("the confirmation service's signature over this evidence"),
        "{out}"
    );
    assert_eq!(
        summary["decided_at"],
        chrono::DateTime::from_timestamp(record.decided_at, 0)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    let collected = summary["collected_hmac_sha256"].as_object().unwrap();
    for (name, digest) in &record.collected_hmac {
        assert_eq!(collected[name], digest.as_str(), "{out}");
    }
    assert!(collected.contains_key("from account"), "{out}");
    assert_eq!(summary["log_digest"], log_digest.as_str());
    assert_eq!(
        summary["log_entry"],
        format!("cheq-decision/v1 {log_digest}")
    );
    let not_checked = summary["not_checked"].to_string();
    assert!(
        not_checked.contains("confirmation signature is withheld"),
        "{out}"
    );
    for v in [FROM, TO] {
        assert!(!out.contains(v), "the summary holds {v}");
    }
    let (ok, _, err) = verify(&trust, &file, &["--expect", "accept"]);
    assert!(ok, "{err}");
    refused(
        verify(&trust, &file, &["--expect", "reject"]),
        "the decision is \"accept\", not \"reject\"",
    );
    refused(
        verify(&trust, &file, &["--expect", "resource"]),
        "redacted evidence of a decision, not a resource-signed CHEQ",
    );

    // cheq audit: the entry named by the digest the CS kept is found;
    // without a trust file it says that is all it proves, with one it
    // verifies the evidence first.
    let key = &log_key(&base).await;
    let (ok, out, err) = audit(&base, key, &file, None);
    assert!(ok, "{out}{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    let doc = &summary["documents"][0];
    assert_eq!(doc["redacted_evidence"], true, "{out}");
    assert_eq!(doc["entry"], format!("cheq-decision/v1 {log_digest}"));
    assert_eq!(doc["checked"], cheq::cli::audit::REDACTED_ENTRY, "{out}");
    assert!(doc["index"].is_u64(), "{out}");
    let (ok, out, err) = audit(&base, key, &file, Some(&trust));
    assert!(ok, "{out}{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    let doc = &summary["documents"][0];
    assert_eq!(doc["checked"], cheq::cli::audit::REDACTED_VERIFIED, "{out}");
    assert_eq!(doc["entry"], format!("cheq-decision/v1 {log_digest}"));

    // The reviewer's forgery: the acceptance turned into a rejection, its
    // digests emptied, the CS's signature kept. Both tools refuse it; audit
    // without a trust file finds the real entry and says no more.
    let turned = forged(&evidence, d, "turned.json", |v| {
        v["decision"] = json!("reject");
        v["collected_hmac_sha256"] = json!({});
    });
    refused(
        verify(&trust, &turned, &["--expect", "reject"]),
        "the confirmation service's signature over the evidence (key",
    );
    refused(verify(&trust, &turned, &[]), "does not verify");
    refused(audit(&base, key, &turned, Some(&trust)), "does not verify");
    let (ok, out, err) = audit(&base, key, &turned, None);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("`cheq verify` checks that the confirmation service signed this evidence"),
        "{out}"
    );
    // Another log digest: the log does not hold it, and the signature fails.
    let elsewhere = forged(&evidence, d, "elsewhere.json", |v| {
        v["log_digest"] = json!(cheq::sign::b64::sha256(b"another document"));
    });
    refused(verify(&trust, &elsewhere, &[]), "does not verify");
    refused(audit(&base, key, &elsewhere, None), "is not in the log");
    refused(
        audit(&base, key, &elsewhere, Some(&trust)),
        "does not verify",
    );
    // The forgery re-signed with another key under the CS's key id, or
    // under a key id of its own.
    let forge = |v: &mut Map<String, Value>| {
        v["decision"] = json!("reject");
        v["collected_hmac_sha256"] = json!({});
    };
    let impostor = cheq::sign::SigningKey::from_seed(env.cs_key.kid(), &[9; 32]).unwrap();
    let other_key = written(d, "other-key.json", &resigned(&evidence, &impostor, forge));
    refused(verify(&trust, &other_key, &[]), "does not verify");
    refused(
        audit(&base, key, &other_key, Some(&trust)),
        "does not verify",
    );
    let stranger = cheq::sign::SigningKey::from_seed("stranger", &[8; 32]).unwrap();
    let other_kid = written(d, "other-kid.json", &resigned(&evidence, &stranger, forge));
    refused(
        verify(&trust, &other_kid, &[]),
        "signed with key \"stranger\", which the trust does not give",
    );
    // A file the RS makes for a CHEQ it signed: with its own key, or unsigned.
    let by_rs = written(d, "by-rs.json", &resigned(&evidence, &env.rs_key, forge));
    refused(
        verify(&trust, &by_rs, &["--expect", "reject"]),
        &format!(
            "signed with key \"{}\", which the trust does not give",
            env.rs_key.kid()
        ),
    );
    refused(
        audit(&base, key, &by_rs, Some(&trust)),
        "which the trust does not give",
    );
    let mut bare = statement_of(&evidence);
    forge(&mut bare);
    let unsigned = written(d, "unsigned.json", &Value::Object(bare).to_string());
    refused(verify(&trust, &unsigned, &[]), "unsigned redacted evidence");
    refused(
        audit(&base, key, &unsigned, None),
        "unsigned redacted evidence",
    );
    // The CS's keys trusted for another origin than the CHEQ's.
    let elsewhere_trust = trust_file(
        &env,
        d,
        "elsewhere-trust.json",
        None,
        Some("https://confirm.elsewhere.example"),
    );
    refused(
        verify(&elsewhere_trust, &file, &[]),
        "signed by the confirmation server at https://confirm.elsewhere.example",
    );

    // The signature moved onto another CHEQ's evidence.
    let (pack2, path2, page2) = env.open_transfer(&mut b).await;
    let outcome = b.accept_typing(&path2, &page2, [TO, FROM, "12.00"]).await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    let record2 = delivered(&env, &pack2.resource_uri).await;
    let res = b
        .get(&format!("/history/{}.json", record2.key().id()))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let second = written(d, "second.json", &res.raw);
    let (ok, _, err) = verify(&trust, &second, &[]);
    assert!(ok, "{err}");
    let mut moved: Map<String, Value> = serde_json::from_str(&res.raw).unwrap();
    let first: Value = serde_json::from_str(&evidence).unwrap();
    moved["signatures"] = first["signatures"].clone();
    let moved = written(d, "moved.json", &Value::Object(moved).to_string());
    refused(verify(&trust, &moved, &[]), "does not verify");
    refused(audit(&base, key, &moved, Some(&trust)), "does not verify");

    // The deeper checks, on statements the CS's own key signs: an altered
    // CHEQ, a wrong RS key, a missing member, an unknown version.
    let altered = written(
        d,
        "altered.json",
        &resigned(&evidence, &env.cs_key, |v| {
            let rs = v["resource_signed"].as_object_mut().unwrap();
            let payload = cheq::sign::b64::decode(rs["payload"].as_str().unwrap()).unwrap();
            let payload = String::from_utf8(payload).unwrap().replace("ACME", "EVIL");
            rs["payload"] = json!(cheq::sign::b64::encode(payload));
        }),
    );
    refused(
        verify(&trust, &altered, &[]),
        "the resource-signed CHEQ: rule 1: signature 0",
    );
    let impostor = cheq::sign::SigningKey::from_seed(env.rs_key.kid(), &[9; 32]).unwrap();
    let wrong = trust_file(&env, d, "wrong.json", Some(&public_jwks(&impostor)), None);
    refused(
        verify(&wrong, &file, &[]),
        "the resource-signed CHEQ: rule 1: signature 0",
    );
    let missing = forged(&evidence, d, "missing.json", |v| {
        v.remove("decision");
    });
    refused(
        verify(&trust, &missing, &[]),
        "the member \"decision\" is missing",
    );
    let v2 = forged(&evidence, d, "v2.json", |v| {
        v["format"] = json!("cheq-redacted-evidence/v2");
    });
    refused(
        verify(&trust, &v2, &[]),
        "a version this tool does not know",
    );
    refused(
        audit(&base, key, &v2, None),
        "a version this tool does not know",
    );
    let old_shape = |v: &mut Map<String, Value>| {
        for m in [
            "format",
            "withheld",
            "decision",
            "decided_at",
            "sub",
            "log_digest",
        ] {
            v.remove(m);
        }
        v.insert(
            "redacted".into(),
            json!("the confirmation signature carried values the user marked private"),
        );
    };
    let mut old = statement_of(&evidence);
    old_shape(&mut old);
    let old = written(d, "old.json", &Value::Object(old).to_string());
    refused(verify(&trust, &old, &[]), "in the older shape");
    let no_log = written(
        d,
        "no-log.json",
        &resigned(&evidence, &env.cs_key, |v| {
            v["log_digest"] = Value::Null;
        }),
    );
    refused(audit(&base, key, &no_log, None), "names no log entry");

    // A record stored in the older shape is served in the current one,
    // completed from the record and signed: the same file as before.
    let mut stored = statement_of(&evidence);
    old_shape(&mut stored);
    let mut older = record.clone();
    older.document = Value::Object(stored).to_string();
    env.cs
        .cs
        .records()
        .update(&older, cheq::store::Durability::Now)
        .unwrap();
    let res = b.get(&format!("/history/{id}.json")).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.raw, evidence, "served in the current format, signed");
    let upgraded = written(d, "upgraded.json", &res.raw);
    let (ok, _, err) = verify(&trust, &upgraded, &[]);
    assert!(ok, "{err}");
    let (ok, out, err) = audit(&base, key, &upgraded, Some(&trust));
    assert!(ok, "{out}{err}");

    // A decision without private values: the signed CHEQ, named likewise.
    let (flight, _, _, _) = env.decided(&mut b, "reject").await;
    let record = delivered(&env, &flight.resource_uri).await;
    let res = b.get(&format!("/history/{}.json", record.key().id())).await;
    assert_eq!(res.status, 200);
    assert_eq!(
        res.header("content-disposition").unwrap(),
        format!(
            "attachment; filename=\"cheq-book_a_flight-{}-reject.json\"",
            date_of(&record)
        )
    );
    assert_eq!(res.header("content-type").unwrap(), "application/jose+json");
    let history = b.get("/history").await;
    assert!(
        history.raw.contains(&format!(
            "<a href=\"/history/{}.json\" download>signed CHEQ<span",
            record.key().id()
        )),
        "{}",
        history.raw
    );
    env.stop().await;
}
