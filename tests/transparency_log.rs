//! The transparency log (PROTOCOL.md §15), end to end on real sockets:
//!
//! - decisions made on the page (accept and reject) and through the voice
//!   API are in a checkpoint within 10 s; `cheq audit` finds each decided
//!   document by its exact bytes and keeps the checkpoint; the history page
//!   shows each one's index and offers its inclusion proof, which checks;
//! - aics-tlog, a tlog-tiles / signed-note client cheq did not write,
//!   verifies the checkpoint with the key `GET /log/key` gives, rebuilds the
//!   root from the tiles, authenticates every tile and bundle, and finds
//!   the entries;
//! - the tile endpoints: caching headers, 404 for a tile the tree does not
//!   hold and for paths that are not canonical;
//! - a log rewritten behind the auditor's back (real processes: the CS
//!   stopped, its database replaced by a fresh log under the same key,
//!   smaller and then larger than the kept one) fails `cheq audit`, which
//!   keeps the checkpoint it had;
//! - two CS instances on one PostgreSQL database, deciding at once, make
//!   one log that holds every decision once.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

const GW: &str = "voice-gw";
const GW_SECRET: &str = "gateway secret for the log test";
const PIN: &str = "482913";

fn aics() -> bool {
    cheq::store::testing::can_run(
        "the transparency log's interop test",
        &[cheq::store::testing::Outside::Python("aics_tlog")],
    )
}

async fn get(url: &str) -> reqwest::Response {
    http_client().get(url).send().await.unwrap()
}

/// Waits until the checkpoint covers `n` entries; how long it took.
async fn wait_for_size(base: &str, n: u64) -> Duration {
    let start = Instant::now();
    while log_size(base).await < n {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the log has {} entries, not {n}, after 10 s",
            log_size(base).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    start.elapsed()
}

#[actix_web::test]
async fn every_decision_is_in_the_log_and_a_foreign_client_rebuilds_it() {
    let env = Env::start(Options {
        gateways: vec![Gateway::new(GW, GW_SECRET)],
        ..Options::default()
    })
    .await;
    env.set_pin("alice", PIN);
    // The log's prefix is `<public_url>/log/`; the public URL here has a
    // path (the start path).
    let base = env.cs_url.clone();
    let key = log_key(&base).await;
    let origin = env.cs_origin.trim_start_matches("http://");
    assert!(key.starts_with(&format!("{origin}/cheq-log+")), "{key}");

    // The page: one accept, one reject.
    let mut b = env.browser();
    env.decided(&mut b, "accept").await;
    env.decided(&mut b, "reject").await;
    // The voice API.
    let gw = env.voice(&Gateway::new(GW, GW_SECRET));
    let token = gw.user_token("alice", PIN).await;
    let pack = env.invoke().await;
    let created = gw.create(Some(&token), &pack.resource_uri).await;
    created.expect(201, "create");
    let id = created.body["id"].as_str().unwrap().to_owned();
    gw.decide(Some(&token), &id, &json!({"decision": "accept"}))
        .await
        .expect(200, "decide");

    let took = wait_for_size(&base, 3).await;
    eprintln!("three decisions in a checkpoint after {took:?}");

    // Each decided document, as the history serves it, is in the log.
    let history = b.get("/history").await;
    assert_eq!(history.status, 200);
    let dir = tempfile::tempdir().unwrap();
    let records = env.records("alice");
    assert_eq!(records.len(), 3);
    let mut docs = Vec::new();
    for r in &records {
        let id = r.key().id();
        let evidence = b.get(&format!("/history/{id}.json")).await;
        assert_eq!(evidence.status, 200);
        let path = dir.path().join(format!("{id}.json"));
        std::fs::write(&path, &evidence.text).unwrap();
        docs.push(path);
        // The proof the history offers checks against its checkpoint.
        let proof = b.get(&format!("/history/{id}/inclusion.json")).await;
        assert_eq!(proof.status, 200, "{}", proof.text);
        let proof: Value = serde_json::from_str(&proof.text).unwrap();
        let digest = cheq::sign::b64::sha256(evidence.text.as_bytes());
        assert_eq!(proof["entry"], format!("cheq-decision/v1 {digest}\n"));
        let index = proof["index"].as_u64().unwrap();
        assert!(
            history.text.contains(&format!("entry {index}</span>")),
            "the history shows entry {index}"
        );
        check_inclusion(&proof, &key);
    }
    // Another account gets neither alice's evidence nor her proofs, and
    // cannot tell them from records that do not exist.
    env.add_user("bob", "bob's long password");
    let mut bob = env.browser();
    bob.sign_in("bob", "bob's long password").await;
    let id = records[0].key().id();
    for path in [
        format!("/history/{id}/inclusion.json"),
        format!("/history/{id}.json"),
    ] {
        let theirs = bob.get(&path).await;
        assert_eq!(theirs.status, 404, "{path}: {}", theirs.text);
        assert!(!theirs.text.contains("cheq-decision/v1"), "{}", theirs.text);
        let none = bob.get(&path.replace(&id, "no-such-record")).await;
        assert_eq!(none.status, 404);
        assert_eq!(none.text, theirs.text, "the same answer as for no record");
    }
    let state = dir.path().join("kept.checkpoint");
    let doc_refs: Vec<&Path> = docs.iter().map(|d| d.as_path()).collect();
    let (ok, out, err) = audit_log(&base, &key, &state, &doc_refs);
    assert!(ok, "{out}{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["tree_size"], 3, "{summary}");
    assert_eq!(summary["documents"].as_array().unwrap().len(), 3);
    assert!(std::fs::read(&state)
        .unwrap()
        .starts_with(origin.as_bytes()));

    // A document that was never decided here is not in the log.
    let stranger = dir.path().join("stranger.json");
    std::fs::write(&stranger, b"{\"payload\":\"never signed here\"}").unwrap();
    let (ok, out, err) = audit_log(&base, &key, &state, &[&stranger]);
    assert!(!ok, "{out}");
    assert!(err.contains("is not in the log"), "{err}");

    // The tile API: headers, and nothing the tree does not hold.
    let cp = get(&format!("{base}/log/checkpoint")).await;
    assert_eq!(
        cp.headers()["content-type"].to_str().unwrap(),
        "text/plain; charset=utf-8"
    );
    assert_eq!(cp.headers()["cache-control"].to_str().unwrap(), "no-store");
    let tile = get(&format!("{base}/log/tile/0/000.p/3")).await;
    assert_eq!(tile.status(), 200);
    assert!(tile.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("immutable"));
    assert!(tile.headers().get("content-encoding").is_none());
    assert_eq!(tile.bytes().await.unwrap().len(), 3 * 32);
    // Entry bundles: gzip for a client that takes it (as the auditor and
    // aics-tlog do), plain for one that does not.
    let bundle_at = format!("{base}/log/tile/entries/000.p/3");
    let plain = get(&bundle_at).await;
    assert_eq!(plain.status(), 200);
    assert!(plain.headers().get("content-encoding").is_none());
    assert_eq!(plain.headers()["vary"].to_str().unwrap(), "Accept-Encoding");
    let plain = plain.bytes().await.unwrap();
    let entries = cheq::tlog::tiles::unbundle(&plain, 3).unwrap();
    assert!(entries[0].starts_with(b"cheq-decision/v1 "));
    let gzipped = http_client()
        .get(&bundle_at)
        .header("accept-encoding", "gzip, identity")
        .send()
        .await
        .unwrap();
    assert_eq!(
        gzipped.headers()["content-encoding"].to_str().unwrap(),
        "gzip"
    );
    let gzipped = gzipped.bytes().await.unwrap();
    assert_ne!(gzipped, plain);
    let mut inflated = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&gzipped[..]),
        &mut inflated,
    )
    .unwrap();
    assert_eq!(inflated, plain);
    for missing in [
        "tile/0/000.p/4",
        "tile/0/000",
        "tile/entries/000.p/4",
        "tile/0/x000/000.p/3",
        "tile/00/000.p/3",
        "tile/0/000.p/03",
        "tile/1/000.p/1",
        "tile/entries/001.p/1",
    ] {
        let res = get(&format!("{base}/log/{missing}")).await;
        assert_eq!(res.status(), 404, "{missing}");
    }

    // A client that knows nothing of cheq rebuilds the tree.
    if aics() {
        let entries: Vec<String> = records
            .iter()
            .map(|r| format!("cheq-decision/v1 {}", r.log_digest.clone().unwrap()))
            .collect();
        let mut cmd = std::process::Command::new("python3");
        cmd.arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/tlog/check_log.py"
        ))
        .arg(format!("{base}/log/"))
        .arg(&key)
        .args(&entries);
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(report["size"], 3, "{report}");
        assert_eq!(report["found"].as_object().unwrap().len(), 3, "{report}");
        // The same client refuses the checkpoint under another key.
        let other = "cs.example/cheq-log+3b4d2e83+Ad9lLKOe0Mqx8a5x0Uk0Yqk5sgJ9JR1Gn6pK1uZz3vP0";
        let out = std::process::Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/tlog/check_log.py"
            ))
            .arg(format!("{base}/log/"))
            .arg(other)
            .output()
            .unwrap();
        assert!(!out.status.success());
    }
    env.stop().await;
}

/// Checks an inclusion proof as served, with the core's RFC 9162 check and
/// the checkpoint's signature.
fn check_inclusion(proof: &Value, key: &str) {
    use base64::Engine as _;
    let std = base64::engine::general_purpose::STANDARD;
    let hash =
        |s: &Value| cheq::tlog::Hash(std.decode(s.as_str().unwrap()).unwrap().try_into().unwrap());
    let verified = cheq::tlog::LogVerifier::new(key)
        .unwrap()
        .verify(proof["checkpoint"].as_str().unwrap().as_bytes())
        .unwrap();
    let size = proof["tree_size"].as_u64().unwrap();
    assert_eq!(verified.size, size);
    assert_eq!(verified.root, hash(&proof["root_hash"]));
    let path: Vec<_> = proof["proof"]
        .as_array()
        .unwrap()
        .iter()
        .map(hash)
        .collect();
    let leaf = cheq::tlog::tree::leaf_hash(proof["entry"].as_str().unwrap().as_bytes());
    cheq::tlog::tree::check_record(
        &path,
        size,
        verified.root,
        proof["index"].as_u64().unwrap(),
        leaf,
    )
    .unwrap();
}

/// Decides one booking in `b`; its document.
async fn decide_one(setup: &Setup, b: &mut Browser) -> String {
    accept_bookings(setup, b, 1).await;
    history_documents(b).await.swap_remove(0)
}

#[test]
fn a_log_rewritten_behind_the_auditors_back_is_caught() {
    let setup = Setup::new();
    let cs_config = setup.path("cs.toml");
    let (ok, out) = user_add("alice", ALICE_PW, &["--config", &cs_config]);
    assert!(ok, "{out}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let _rs = setup.start_rs().await;
        let mut cs = setup.start_cs().await;
        let base = setup.cs_url.clone();
        let key = log_key(&base).await;
        let mut b = Browser::new(&base);
        let mut docs = Vec::new();
        for _ in 0..3 {
            docs.push(decide_one(&setup, &mut b).await);
        }
        wait_for_size(&base, 3).await;
        let state = setup.dir.path().join("kept.checkpoint");
        let doc = setup.dir.path().join("first.json");
        std::fs::write(&doc, &docs[0]).unwrap();
        let (ok, out, err) = audit_log(&base, &key, &state, &[&doc]);
        assert!(ok, "{out}{err}\n{}", cs.log());
        let kept = std::fs::read(&state).unwrap();

        // The host starts a fresh log under the same key: its database is
        // set aside (the note key stays), alice is made again.
        cs.kill();
        let data = setup.dir.path().join("cs");
        let db = cheq::confirm::admin::db_path(&data);
        std::fs::rename(&db, data.join("set-aside")).unwrap();
        let (ok, out) = user_add("alice", ALICE_PW, &["--config", &cs_config]);
        assert!(ok, "{out}");
        let cs = setup.start_cs().await;
        assert_eq!(log_key(&base).await, key, "the same key");
        let mut b = Browser::new(&base);
        decide_one(&setup, &mut b).await;
        wait_for_size(&base, 1).await;
        let (ok, out, err) = audit_log(&base, &key, &state, &[]);
        assert!(!ok, "{out}");
        assert!(err.contains("truncated"), "{err}");
        assert_eq!(
            std::fs::read(&state).unwrap(),
            kept,
            "the kept checkpoint stays"
        );

        // Larger than the kept tree, but not its extension.
        for _ in 0..3 {
            decide_one(&setup, &mut b).await;
        }
        wait_for_size(&base, 4).await;
        let (ok, out, err) = audit_log(&base, &key, &state, &[]);
        assert!(!ok, "{out}");
        assert!(err.contains("rewritten"), "{err}\n{}", cs.log());
        assert_eq!(std::fs::read(&state).unwrap(), kept);
        // And the old decision is not in the new log.
        let (ok, _, err) = audit_log(&base, &key, &setup.dir.path().join("fresh.state"), &[&doc]);
        assert!(!ok);
        assert!(err.contains("is not in the log"), "{err}");
    });
}

#[test]
fn two_instances_on_one_database_make_one_log() {
    if !cheq::store::testing::can_run(
        "the transparency log on PostgreSQL",
        &[cheq::store::testing::Outside::Postgres],
    ) {
        return;
    }
    let setup = Setup::new();
    let db = cheq::store::pg::test_database("tlog").unwrap();
    let cs_config = setup.path("cs.toml");
    let (ok, out) = user_add_with(
        "alice",
        ALICE_PW,
        &["--config", &cs_config],
        &[("CHEQ_DATABASE_URL", &db)],
    );
    assert!(ok, "{out}");
    let port = free_port();
    let (cs2, listen2) = (
        format!("http://127.0.0.1:{port}"),
        format!("127.0.0.1:{port}"),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let _rs = setup.start_rs().await;
        let envs = [("CHEQ_DATABASE_URL", db.as_str())];
        let cs1 = start_server_with(
            "cs1",
            &["serve", "--config", &cs_config],
            &envs,
            &setup.dir.path().join("cs1.log"),
            &setup.cs_url,
        )
        .await;
        let cs2_proc = start_server_with(
            "cs2",
            &["serve", "--config", &cs_config],
            &[
                ("CHEQ_DATABASE_URL", db.as_str()),
                ("CHEQ_LISTEN", &listen2),
            ],
            &setup.dir.path().join("cs2.log"),
            &cs2,
        )
        .await;
        let key = log_key(&setup.cs_url).await;
        assert_eq!(log_key(&cs2).await, key, "one key");
        // Both instances decide at once; each sequences.
        let (mut one_browser, mut two_browser) = (Browser::new(&setup.cs_url), Browser::new(&cs2));
        tokio::join!(
            accept_bookings(&setup, &mut one_browser, 12),
            accept_bookings(&setup, &mut two_browser, 12)
        );
        // Read only once both sides are done: each browser's history is
        // alice's, every decision whichever instance signed it.
        let a = history_documents(&mut one_browser).await;
        let b = history_documents(&mut two_browser).await;
        assert_eq!(a.len(), 24, "{}", cs1.log());
        assert_eq!(b.len(), 24, "{}", cs2_proc.log());
        wait_for_size(&setup.cs_url, 24).await;
        wait_for_size(&cs2, 24).await;
        let one = get(&format!("{}/log/checkpoint", setup.cs_url))
            .await
            .text()
            .await
            .unwrap();
        let two = get(&format!("{cs2}/log/checkpoint"))
            .await
            .text()
            .await
            .unwrap();
        assert_eq!(one, two, "one tree, one checkpoint");
        assert!(one.lines().nth(1) == Some("24"), "{one}");
        let dir = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        for (i, d) in a.iter().enumerate() {
            let p = dir.path().join(format!("{i}.json"));
            std::fs::write(&p, d).unwrap();
            paths.push(p);
        }
        let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
        let state = dir.path().join("kept");
        for base in [&setup.cs_url, &cs2] {
            let (ok, out, err) = audit_log(base, &key, &state, &refs);
            assert!(ok, "{out}{err}");
            let summary: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(
                audited_indexes(&summary),
                (0..24).collect::<Vec<_>>(),
                "each decision once"
            );
        }
    });
}
