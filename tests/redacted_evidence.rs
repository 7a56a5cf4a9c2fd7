//! Evidence of every decision that the tools can read (PROTOCOL.md §8.1,
//! §15), end to end on real sockets and with the real `cheq` binary:
//!
//! - a decision with private values (`transfer_funds`), once delivered, is
//!   offered in the history as redacted evidence, named by operation, date
//!   and decision; `cheq verify` checks its resource signature and says
//!   what it cannot check, `cheq audit --document` proves its log entry by
//!   the digest the CS kept; both exit 0;
//! - a tampered copy fails: an altered payload, a wrong key, a missing
//!   member, an unknown format version, the older unversioned shape, a log
//!   digest the log does not hold, a decision it does not state;
//! - a record stored in the older shape is served in the current one;
//! - a decision without private values is the signed CHEQ, named likewise.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

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
        let text = http_client()
            .get(format!("{base}/log/checkpoint"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let size: u64 = text.lines().nth(1).unwrap().parse().unwrap();
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
/// replaced by `rs_keys` when given).
fn trust_file(env: &Env, dir: &Path, name: &str, rs_keys: Option<&str>) -> PathBuf {
    let rs: Value = serde_json::from_str(rs_keys.unwrap_or(&public_jwks(&env.rs_key))).unwrap();
    let cs: Value = serde_json::from_str(&public_jwks(&env.cs_key)).unwrap();
    let trust = json!({
        "resource_servers": [{"origin": env.rs_url, "keys": rs}],
        "confirmation_servers": [{"origin": env.cs_origin, "keys": cs}],
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

fn audit(base: &str, key: &str, file: &Path) -> (bool, String, String) {
    let log = format!("{base}/log/");
    let file = file.display().to_string();
    cheq_cmd(&["audit", "--log", &log, "--key", key, "--document", &file])
}

/// `evidence` as a JSON object, changed by `f`, written to `dir/name`.
fn tampered(
    evidence: &str,
    dir: &Path,
    name: &str,
    f: impl FnOnce(&mut Map<String, Value>),
) -> PathBuf {
    let mut v: Map<String, Value> = serde_json::from_str(evidence).unwrap();
    f(&mut v);
    let path = dir.join(name);
    std::fs::write(&path, Value::Object(v).to_string()).unwrap();
    path
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
    let pack = env
        .invoke_tool("transfer_funds", &transfer_params(Some("ACME"), None))
        .await;
    let mut b = env.browser();
    let (path, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
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

    // The download: named by operation, date and decision, marked redacted.
    let res = b.get(&format!("/history/{id}.json")).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(
        res.header("content-disposition").unwrap(),
        format!(
            "attachment; filename=\"cheq-transfer_funds-{}-accept-redacted.json\"",
            date_of(&record)
        )
    );
    assert_eq!(res.header("content-type").unwrap(), "application/json");
    let evidence = res.raw.clone();
    for v in [FROM, TO] {
        assert!(!evidence.contains(v), "the evidence holds {v}");
    }
    let parsed: Value = serde_json::from_str(&evidence).unwrap();
    assert_eq!(parsed["format"], "cheq-redacted-evidence/v1", "{evidence}");
    assert_eq!(parsed["log_digest"], log_digest.as_str());
    let file = d.join("evidence.json");
    std::fs::write(&file, &evidence).unwrap();

    // cheq verify: what it proves, and what it cannot.
    let trust = trust_file(&env, d, "trust.json", None);
    let (ok, out, err) = verify(&trust, &file, &[]);
    assert!(ok, "{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["valid"], true);
    assert_eq!(summary["stage"], "decided (redacted evidence)");
    assert_eq!(summary["decision"], "accept");
    assert_eq!(summary["operation name"], "Transfer funds");
    assert_eq!(summary["subject"], "alice");
    assert_eq!(summary["signed_by"]["resource"]["kid"], env.rs_key.kid());
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

    // cheq audit: the entry named by the digest the CS kept, proven.
    let key = http_client()
        .get(format!("{base}/log/key"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let key = key.trim();
    let (ok, out, err) = audit(&base, key, &file);
    assert!(ok, "{out}{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    let doc = &summary["documents"][0];
    assert_eq!(doc["redacted_evidence"], true, "{out}");
    assert_eq!(doc["entry"], format!("cheq-decision/v1 {log_digest}"));
    assert!(
        doc["checked"]
            .as_str()
            .unwrap()
            .contains("the digest the confirmation service kept"),
        "{out}"
    );
    assert!(doc["index"].is_u64(), "{out}");

    // Tampered copies fail, each naming its cause.
    let altered = tampered(&evidence, d, "altered.json", |v| {
        let rs = v["resource_signed"].as_object_mut().unwrap();
        let payload = cheq::sign::b64::decode(rs["payload"].as_str().unwrap()).unwrap();
        let payload = String::from_utf8(payload).unwrap().replace("ACME", "EVIL");
        rs["payload"] = json!(cheq::sign::b64::encode(payload));
    });
    refused(verify(&trust, &altered, &[]), "does not verify");
    let impostor = cheq::sign::SigningKey::from_seed(env.rs_key.kid(), &[9; 32]).unwrap();
    let wrong = trust_file(&env, d, "wrong.json", Some(&public_jwks(&impostor)));
    refused(verify(&wrong, &file, &[]), "does not verify");
    let missing = tampered(&evidence, d, "missing.json", |v| {
        v.remove("decision");
    });
    refused(
        verify(&trust, &missing, &[]),
        "the member \"decision\" is missing",
    );
    let v2 = tampered(&evidence, d, "v2.json", |v| {
        v["format"] = json!("cheq-redacted-evidence/v2");
    });
    refused(
        verify(&trust, &v2, &[]),
        "a version this tool does not know",
    );
    refused(audit(&base, key, &v2), "a version this tool does not know");
    let reject = tampered(&evidence, d, "reject.json", |v| {
        v["decision"] = json!("reject");
    });
    refused(
        verify(&trust, &reject, &[]),
        "a rejection carries no values",
    );
    let old_shape = |v: &mut Map<String, Value>| {
        for m in ["format", "withheld", "decision", "decided_at", "log_digest"] {
            v.remove(m);
        }
        v.insert(
            "redacted".into(),
            json!("the confirmation signature carried values the user marked private"),
        );
    };
    let old = tampered(&evidence, d, "old.json", old_shape);
    refused(verify(&trust, &old, &[]), "in the older shape");
    // Another digest: verify cannot tell (it cannot recompute it), the log can.
    let elsewhere = tampered(&evidence, d, "elsewhere.json", |v| {
        v["log_digest"] = json!(cheq::sign::b64::sha256(b"another document"));
    });
    let (ok, _, err) = verify(&trust, &elsewhere, &[]);
    assert!(ok, "{err}");
    refused(audit(&base, key, &elsewhere), "is not in the log");
    let no_log = tampered(&evidence, d, "no-log.json", |v| {
        v["log_digest"] = Value::Null;
    });
    refused(audit(&base, key, &no_log), "names no log entry");

    // A record stored in the older shape is served in the current one,
    // completed from the record; both tools still pass.
    let mut stored: Map<String, Value> = serde_json::from_str(&evidence).unwrap();
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
    let served: Value = serde_json::from_str(&res.raw).unwrap();
    assert_eq!(served, parsed, "served in the current format");
    let upgraded = d.join("upgraded.json");
    std::fs::write(&upgraded, &res.raw).unwrap();
    let (ok, _, err) = verify(&trust, &upgraded, &[]);
    assert!(ok, "{err}");
    let (ok, out, err) = audit(&base, key, &upgraded);
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
