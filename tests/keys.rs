//! Keys over time (PROTOCOL.md §9, ISSUE 12): key rotation and retirement
//! at both servers while confirmations are pending, peer keys fetched by
//! `jwks_uri` (cache, once-a-minute refetch of an unknown `kid`), and the
//! `cheq keys` commands run against live servers.
//!
//! The in-process tests run both servers on a clock set an hour ahead of
//! the system's, so that a `cheq keys` process (system time) acting "now"
//! acts in the servers' past; moves of that clock stand for waiting.
//! The harness is in `tests/common/mod.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use cheq::keyring::KeyRing;
use cheq::sign::SigningKey;
use cheq::sign::{b64, countersign, verify_resource, Channel, Context, Decision, DecisionInput};
use cheq::time::{Clock, ManualClock};
use chrono::Utc;
use common::*;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

fn kid_of(doc: &str, i: usize) -> String {
    let (protected, _) = signature_of(doc, i);
    let header: Value = serde_json::from_slice(&b64::decode(&protected).unwrap()).unwrap();
    header["kid"].as_str().unwrap().to_owned()
}

/// `(kid, cheq_key_state)` of each key a server publishes.
async fn published(origin: &str) -> Vec<(String, String)> {
    let res = reqwest::get(format!("{origin}/.well-known/jwks.json"))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            assert!(k.get("d").is_none(), "no private part: {k}");
            (
                k["kid"].as_str().unwrap().to_owned(),
                k["cheq_key_state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn pair(kid: &str, state: &str) -> (String, String) {
    (kid.to_owned(), state.to_owned())
}

/// A server's `cheq_jwks_requests_total`, read from its `/metrics`.
async fn jwks_served(origin: &str) -> u64 {
    let text = reqwest::get(format!("{origin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("cheq_jwks_requests_total "))
        .unwrap_or_else(|| panic!("no jwks counter in {text}"))
        .trim()
        .parse()
        .unwrap()
}

async fn env_by_jwks_uri() -> Env {
    let clock = Arc::new(ManualClock::new(Utc::now() + chrono::Duration::hours(1)));
    let env = Env::start(Options {
        jwks_uri: true,
        clock: Some(clock),
        ..Default::default()
    })
    .await;
    // Both servers read each other's keys in the background at start-up:
    // let those first fetches land before the test counts any.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while jwks_served(&env.rs_url).await < 1 || jwks_served(&env.cs_origin).await < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the start-up key fetches never landed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    env
}

fn keys_cmd(args: &[&str]) -> String {
    let (ok, out, err) = cheq_cmd(args);
    assert!(ok, "cheq {args:?}: {out}{err}");
    assert!(!out.contains("\"d\""), "no private material: {out}");
    out
}

/// The new key's id in `cheq keys rotate`'s answer.
fn added_kid(out: &str) -> String {
    out.split_whitespace()
        .skip_while(|w| *w != "key")
        .nth(1)
        .unwrap_or_else(|| panic!("no kid in {out}"))
        .to_owned()
}

/// Polls the agent's result until it is accepted (at most `secs` s),
/// calling `tick` between reads (a clock to move, or nothing).
async fn until_accepted(result_uri: &str, secs: u64, tick: impl Fn()) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let (_, body) = result_of(result_uri).await;
        if body["status"] == "accepted" {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not delivered: {body}"
        );
        tick();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Opens `pack`'s page as alice and accepts; the outcome page must say
/// accepted and the agent must read the RS's result.
async fn confirm(env: &Env, pack: &cheq::cheq::UriPack) {
    let mut b = env.browser();
    let (path, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let outcome = b.decide(&path, &page, "accept").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    let (status, body) = result_of(&pack.result_uri).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("accepted")),
        "{body}"
    );
}

#[actix_web::test]
async fn rs_key_rotated_while_cheqs_are_pending() {
    let env = env_by_jwks_uri().await;
    let old_pack = env.invoke().await;
    let (_, doc) = env.fetch_cheq(&old_pack.resource_uri).await;
    let old = kid_of(&doc, 0);

    // `keys rotate` on the running RS: published at once, signing later.
    let admin = KeyRing::open(
        &env._dir.path().join("keys/rs.jwk"),
        None,
        "rs",
        env.clock.clone().unwrap(),
    )
    .unwrap();
    let new = admin.rotate(120).unwrap().kid;
    assert_eq!(
        published(&env.rs_url).await,
        [pair(&old, "active"), pair(&new, "new")]
    );
    let waiting_pack = env.invoke().await;
    assert_eq!(
        kid_of(&env.fetch_cheq(&waiting_pack.resource_uri).await.1, 0),
        old
    );

    env.advance(121);
    let new_pack = env.invoke().await;
    assert_eq!(
        kid_of(&env.fetch_cheq(&new_pack.resource_uri).await.1, 0),
        new
    );
    assert_eq!(
        published(&env.rs_url).await,
        [pair(&old, "retiring"), pair(&new, "active")]
    );

    // Every pending CHEQ is confirmed and runs, whichever key signed it; the
    // CS read the new key through jwks_uri, once, without a restart.
    let served = jwks_served(&env.rs_url).await;
    for pack in [&old_pack, &waiting_pack, &new_pack] {
        confirm(&env, pack).await;
    }
    assert_eq!(env.rs.executions(), 3);
    // Our own `published` reads above are not in `served`; the CS's are.
    assert_eq!(jwks_served(&env.rs_url).await - served, 1);
    env.stop().await;
}

#[actix_web::test]
async fn an_unknown_kid_flood_fetches_at_most_once_a_minute() {
    let env = env_by_jwks_uri().await;
    let rs_config = env.rs_config.display().to_string();
    env.advance(61);
    keys_cmd(&[
        "keys",
        "rotate",
        "--config",
        &rs_config,
        "--activate-after",
        "0",
    ]);
    let before = jwks_served(&env.rs_url).await;
    // The first CHEQ under the new key: one fetch, then it is shown.
    confirm(&env, &env.invoke().await).await;
    assert_eq!(jwks_served(&env.rs_url).await, before + 1);

    // Another key at once: its CHEQs name a kid the CS cannot fetch again
    // within the minute. None is shown; none makes the CS fetch.
    keys_cmd(&[
        "keys",
        "rotate",
        "--config",
        &rs_config,
        "--activate-after",
        "0",
    ]);
    let mut b = env.browser();
    b.sign_in("alice", ALICE_PW).await;
    let mut packs = Vec::new();
    for _ in 0..20 {
        let pack = env.invoke().await;
        let (_, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
        assert_eq!(page.status, 503, "{}", page.text);
        assert!(page.text.contains("has not read yet"), "{}", page.text);
        let wait: i64 = page.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=60).contains(&wait), "{wait}");
        assert!(!page.raw.contains("name=\"decision\""), "no decision form");
        packs.push(pack);
    }
    assert_eq!(jwks_served(&env.rs_url).await, before + 1);

    // A minute later, one fetch, and the same CHEQs are shown and decided.
    env.advance(61);
    for pack in &packs[..3] {
        confirm(&env, pack).await;
    }
    assert_eq!(jwks_served(&env.rs_url).await, before + 2);
    env.stop().await;
}

#[actix_web::test]
async fn forged_confirmation_kids_make_the_rs_fetch_at_most_once_a_minute() {
    let env = env_by_jwks_uri().await;
    let before = jwks_served(&env.cs_origin).await;
    env.advance(61);
    let now = env.clock().now();
    let mut statuses = Vec::new();
    for i in 0..12 {
        let pack = env.invoke().await;
        let (_, doc) = env.fetch_cheq(&pack.resource_uri).await;
        let ctx = Context {
            now,
            resource_uri: Some(&pack.resource_uri),
            confirmation_uri: Some(&env.cs_url),
        };
        let verified = verify_resource(doc.as_bytes(), &env.trust(), &ctx).unwrap();
        let forger =
            SigningKey::generate(&format!("cs-forged-{i}"), &mut rand::rngs::OsRng).unwrap();
        let amr = vec!["pwd".to_owned()];
        let forged = countersign(
            &verified,
            &forger,
            DecisionInput {
                decision: Decision::Accept,
                sub: "alice",
                also_known_as: &[],
                auth_time: now.timestamp() - 5,
                amr: &amr,
                channel: Channel::Html,
                view_text: "a view",
                collected: None,
                passkey: None,
            },
            now,
        )
        .unwrap();
        let (status, body) = env
            .post_decision(&pack.resource_uri, "accept", &forged)
            .await;
        statuses.push((status, body["error"].as_str().unwrap_or("").to_owned()));
    }
    // The first unknown kid fetched the CS's keys (not there); every one is
    // "try again later" (only the CS posts decisions: none is lost), and no
    // other made the RS fetch.
    for s in &statuses {
        assert_eq!(*s, (503, "keys_unavailable".to_owned()), "{statuses:?}");
    }
    assert_eq!(jwks_served(&env.cs_origin).await, before + 1);
    assert_eq!(env.rs.executions(), 0, "nothing forged ran");
    env.stop().await;
}

#[actix_web::test]
async fn a_removed_key_is_refused_once_the_cache_expires_and_a_retired_key_signs_nothing() {
    let env = env_by_jwks_uri().await;
    let rs_config = env.rs_config.display().to_string();
    let pack = env.invoke().await;
    let old = kid_of(&env.fetch_cheq(&pack.resource_uri).await.1, 0);

    // Retire: the old key signs nothing more, at once; a new key takes over.
    let out = keys_cmd(&["keys", "retire", "--config", &rs_config, &old]);
    assert!(out.contains("signs nothing more"), "{out}");
    let next = kid_of(&env.fetch_cheq(&env.invoke().await.resource_uri).await.1, 0);
    assert_ne!(next, old);
    assert_eq!(
        published(&env.rs_url).await,
        [pair(&old, "retiring"), pair(&next, "active")]
    );
    // Removing a retiring key needs --force; the active key never goes.
    let (ok, _, err) = cheq_cmd(&["keys", "remove", "--config", &rs_config, &old]);
    assert!(!ok && err.contains("--force"), "{err}");
    let (ok, _, err) = cheq_cmd(&["keys", "remove", "--config", &rs_config, &next, "--force"]);
    assert!(!ok && err.contains("signing key"), "{err}");
    keys_cmd(&["keys", "remove", "--config", &rs_config, &old, "--force"]);
    assert_eq!(published(&env.rs_url).await, [pair(&next, "active")]);

    // The CS read the old key before; until its copy expires (the RS says
    // max-age=300) the page still shows. After that the old CHEQ is never
    // shown as trustworthy again.
    let mut b = env.browser();
    let (_, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    env.advance(301);
    let (_, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert!(matches!(page.status, 502 | 503), "{}", page.text);
    assert!(!page.raw.contains("name=\"decision\""), "no decision form");
    env.advance(61);
    let (_, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 502, "{}", page.text);
    assert!(
        page.text.contains("Do not trust this request"),
        "{}",
        page.text
    );
    assert!(page.text.contains(&old), "names the key: {}", page.text);
    env.stop().await;
}

#[cfg(unix)]
#[actix_web::test]
async fn key_files_are_private_and_keys_list_prints_no_private_material() {
    use std::os::unix::fs::PermissionsExt;
    let env = env_by_jwks_uri().await;
    let cs_config = env.cs_config.display().to_string();
    // Two hours from the system's now: an hour from the servers'.
    let out = keys_cmd(&[
        "keys",
        "rotate",
        "--config",
        &cs_config,
        "--activate-after",
        "7200",
    ]);
    let new = added_kid(&out);
    assert!(out.contains("published now"), "{out}");
    // The running CS publishes the new key at once, not yet signing.
    let keys = published(&env.cs_origin).await;
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[1], pair(&new, "new"));

    let table = keys_cmd(&["keys", "list", "--config", &cs_config]);
    assert!(
        table.contains(&new) && table.contains("active") && table.contains("new"),
        "{table}"
    );
    let listed: Value = serde_json::from_str(&keys_cmd(&[
        "keys", "list", "--config", &cs_config, "--json",
    ]))
    .unwrap();
    let keys = listed["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    for k in keys {
        let file = std::path::Path::new(k["file"].as_str().unwrap());
        let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
        // What was printed holds no part of the private key.
        let private: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        let d = private["d"].as_str().unwrap();
        assert!(!table.contains(d) && !listed.to_string().contains(d));
    }
    let set = std::path::Path::new(listed["key_set"].as_str().unwrap());
    assert_eq!(
        std::fs::metadata(set).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Errors are one clear line.
    let (ok, _, err) = cheq_cmd(&["keys", "retire", "--config", &cs_config, "no-such-kid"]);
    assert!(
        !ok && err.starts_with("cheq: ") && err.contains("no key no-such-kid"),
        "{err}"
    );
    let (ok, _, err) = cheq_cmd(&[
        "keys",
        "rotate",
        "--config",
        &cs_config,
        "--activate-after",
        "-5",
    ]);
    assert!(!ok, "{err}");
    env.stop().await;
}

#[actix_web::test]
async fn cs_key_rotated_between_a_decision_and_its_delivery() {
    let env = env_by_jwks_uri().await;
    let cs_config = env.cs_config.display().to_string();
    // The RS has read the CS's keys; now a decision is signed with the
    // CS's current key, and the CS rotates before it is delivered.
    let pack = env.invoke().await;
    let mut b = env.browser();
    let (path, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let old = published(&env.cs_origin).await[0].0.clone();
    let out = keys_cmd(&[
        "keys",
        "rotate",
        "--config",
        &cs_config,
        "--activate-after",
        "0",
    ]);
    let new = added_kid(&out);
    // Signed now: with the new key, which the RS has not read.
    let outcome = b.decide(&path, &page, "accept").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    let record = env.records("alice").remove(0);
    assert_eq!(kid_of(&record.document, 1), new);
    assert_eq!(
        published(&env.cs_origin).await,
        [pair(&old, "retiring"), pair(&new, "active")]
    );
    // The RS asked the CS to try again (it may fetch once a minute) rather
    // than refuse; a minute later the delivery goes through.
    assert!(record.delivery.is_pending(), "{:?}", record.delivery);
    assert_eq!(result_of(&pack.result_uri).await.1["status"], "pending");
    env.advance(61);
    until_accepted(&pack.result_uri, 30, || env.advance(31)).await;
    assert_eq!(env.rs.executions(), 1);
    env.stop().await;
}

/// The RS is down when the decision is made; the CS rotates its key; the
/// RS comes back (a fresh process, reading the CS's keys by jwks_uri) and
/// takes the decision signed with the now retiring key.
#[actix_web::test]
async fn cs_key_rotated_while_the_rs_is_down_processes() {
    let setup = Setup::by_jwks_uri();
    let (ok, out) = user_add("alice", ALICE_PW, &["--data-dir", &setup.path("cs")]);
    assert!(ok, "{out}");
    let mut rs = setup.start_rs().await;
    let cs = setup.start_cs().await;
    let pack = invoke_flight(&setup.rs_url).await;
    let mut b = Browser::new(&setup.cs_url);
    let (path, page) = b.open("/", &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let old = published(&setup.cs_url).await[0].0.clone();

    rs.kill();
    let outcome = b.decide(&path, &page, "accept").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    assert!(
        outcome.text.contains("delivery pending"),
        "{}",
        outcome.text
    );
    let out = keys_cmd(&[
        "keys",
        "rotate",
        "--config",
        &setup.path("cs.toml"),
        "--activate-after",
        "0",
    ]);
    let new = added_kid(&out);
    assert_eq!(
        published(&setup.cs_url).await,
        [pair(&old, "retiring"), pair(&new, "active")]
    );

    let _rs = setup.start_rs().await;
    until_accepted(&pack.result_uri, 60, || {}).await;
    // A new confirmation is countersigned with the new key, and taken too.
    let pack = invoke_flight(&setup.rs_url).await;
    let (path, page) = b.open("/", &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let outcome = b.decide(&path, &page, "accept").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    assert_eq!(result_of(&pack.result_uri).await.1["status"], "accepted");
    drop(cs);
}

/// §9: a CS whose key set has no active key (every key retired behind its
/// back, here by an edit of the manifest) signs nothing: the decision is
/// answered 503 with a `Retry-After`, says that nothing was signed or sent,
/// and nothing reaches the RS. Once a key signs again, the same page decides.
#[actix_web::test]
async fn a_cs_without_an_active_key_answers_503_and_sends_nothing() {
    let env = Env::start(Options::default()).await;
    let pack = env.invoke().await;
    let mut b = env.browser();
    let (path, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);

    let manifest = KeyRing::manifest_for(&env.cs_key_path);
    let before = std::fs::read(&manifest).unwrap();
    let mut set: Value = serde_json::from_slice(&before).unwrap();
    for key in set["keys"].as_array_mut().unwrap() {
        key["retired"] = Value::from(1);
    }
    let edited = manifest.with_extension("edited");
    std::fs::write(&edited, serde_json::to_vec(&set).unwrap()).unwrap();
    std::fs::rename(&edited, &manifest).unwrap();

    let refused = b.decide(&path, &page, "accept").await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert_eq!(refused.header("retry-after").as_deref(), Some("60"));
    assert!(
        refused.text.contains("cannot sign decisions right now")
            && refused.text.contains("Nothing was signed"),
        "{}",
        refused.text
    );
    assert_eq!(env.rs.executions(), 0, "nothing was delivered");
    assert_eq!(result_of(&pack.result_uri).await.1["status"], "pending");

    std::fs::write(&edited, &before).unwrap();
    std::fs::rename(&edited, &manifest).unwrap();
    let outcome = b.decide(&path, &page, "accept").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    assert_eq!(result_of(&pack.result_uri).await.1["status"], "accepted");
    env.stop().await;
}

/// `cheq keys list` only reads: before the server's first start there is
/// no key to list, it says so, and it makes neither a key nor a key set;
/// once a key exists, listing makes the set from it and no other key.
#[test]
fn keys_list_before_the_first_key_makes_none() {
    let setup = Setup::new();
    let keys = setup.dir.path().join("keys");
    std::fs::remove_file(keys.join("cs.jwk")).unwrap();
    let cs_config = setup.path("cs.toml");
    let listed_files = || {
        let mut names: Vec<String> = std::fs::read_dir(&keys)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listed_files();

    let table = keys_cmd(&["keys", "list", "--config", &cs_config]);
    assert!(table.starts_with("no keys yet: "), "{table}");
    assert!(table.contains("cs.jwk"), "names the key file: {table}");
    let listed: Value = serde_json::from_str(&keys_cmd(&[
        "keys", "list", "--config", &cs_config, "--json",
    ]))
    .unwrap();
    assert_eq!(listed["keys"], serde_json::json!([]), "{listed}");
    assert!(
        listed["key_set"]
            .as_str()
            .unwrap()
            .ends_with("cs.keyset.json"),
        "{listed}"
    );
    assert_eq!(listed_files(), before, "listing wrote nothing");

    // With the configured key present, the set is made from it: one key.
    cheq::keyfile::load_or_create_key(&keys.join("cs.jwk"), None, "cs").unwrap();
    let listed: Value = serde_json::from_str(&keys_cmd(&[
        "keys", "list", "--config", &cs_config, "--json",
    ]))
    .unwrap();
    assert_eq!(listed["keys"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["keys"][0]["state"], "active", "{listed}");
}

/// `cheq verify` reads a peer's keys from its `jwks_uri` or a `jwks_file`
/// named in the TRUST file, and says which key signed, in which state.
#[actix_web::test]
async fn verify_reads_trust_by_jwks_uri_and_names_the_signing_key_and_its_state() {
    let env = env_by_jwks_uri().await;
    let dir = tempfile::tempdir().unwrap();
    let pack = env.invoke().await;
    let doc_path = dir.path().join("cheq.json");
    std::fs::write(&doc_path, env.fetch_cheq(&pack.resource_uri).await.1).unwrap();
    let doc = doc_path.display().to_string();
    let old = kid_of(&std::fs::read_to_string(&doc_path).unwrap(), 0);
    let now = env
        .clock()
        .now()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let written = std::cell::Cell::new(0);
    let trust_with = |entry: &str| {
        written.set(written.get() + 1);
        let path = dir.path().join(format!("trust-{}.json", written.get()));
        std::fs::write(
            &path,
            format!(
                r#"{{"resource_servers":[{{"origin":"{}",{entry}}}]}}"#,
                env.rs_url
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    let verify = |trust: &str| cheq_cmd(&["verify", "--trust", trust, "--now", &now, &doc]);
    let by_uri = trust_with(&format!(
        r#""jwks_uri":"{}/.well-known/jwks.json""#,
        env.rs_url
    ));
    let (ok, out, err) = verify(&by_uri);
    assert!(ok, "{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["signed_by"]["resource"]["kid"], old.as_str());
    assert_eq!(summary["signed_by"]["resource"]["state"], "active");

    // After a rotation the same document is signed by a retiring key.
    let rs_config = env.rs_config.display().to_string();
    keys_cmd(&[
        "keys",
        "rotate",
        "--config",
        &rs_config,
        "--activate-after",
        "0",
    ]);
    let (ok, out, err) = verify(&by_uri);
    assert!(ok, "{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["signed_by"]["resource"]["state"], "retiring");

    // A file beside the TRUST file: the published set saved as is.
    let set = reqwest::get(format!("{}/.well-known/jwks.json", env.rs_url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    std::fs::write(dir.path().join("rs.jwks.json"), set).unwrap();
    let (ok, out, err) = verify(&trust_with(r#""jwks_file":"rs.jwks.json""#));
    assert!(ok, "{err}");
    assert!(out.contains("\"retiring\""), "{out}");

    // Refused, each with a clear line: not https, no such file, two sources,
    // and a key that is not in the fetched set.
    let (ok, _, err) = verify(&trust_with(r#""jwks_uri":"http://rs.example/jwks.json""#));
    assert!(
        !ok && err.starts_with("cheq: ") && err.contains("http"),
        "{err}"
    );
    let (ok, _, err) = verify(&trust_with(r#""jwks_file":"missing.json""#));
    assert!(!ok && err.contains("missing.json"), "{err}");
    let (ok, _, err) = verify(&trust_with(&format!(
        r#""jwks_file":"rs.jwks.json","jwks_uri":"{}/.well-known/jwks.json""#,
        env.rs_url
    )));
    assert!(!ok && err.contains("exactly one"), "{err}");
    keys_cmd(&["keys", "remove", "--config", &rs_config, &old, "--force"]);
    let (ok, _, err) = verify(&by_uri);
    assert!(!ok && err.contains("rule 2") && err.contains(&old), "{err}");
    env.stop().await;
}

/// `cheq demo` starts both servers, each fetching the other's key set by
/// `jwks_uri` before the other listens: a normal start prints no warning
/// (a peer still starting is not one), and both servers then trust each
/// other's keys (a confirmation runs end to end).
#[actix_web::test]
async fn the_demo_starts_without_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (cs_port, rs_port) = (free_port(), free_port());
    let data = dir.path().join("demo");
    let cs_url = format!("http://127.0.0.1:{cs_port}");
    let rs_url = format!("http://127.0.0.1:{rs_port}");
    let demo = start_server_with(
        "demo",
        &[
            "demo",
            "--data-dir",
            &data.display().to_string(),
            "--cs-port",
            &cs_port.to_string(),
            "--rs-port",
            &rs_port.to_string(),
        ],
        &[("CHEQ_DEMO_PASSWORD", ALICE_PW)],
        &dir.path().join("demo.log"),
        &cs_url,
    )
    .await;
    let pack = invoke_demo_flight(&rs_url, || demo.log()).await;
    let mut b = Browser::new(&cs_url);
    let (path, page) = b.open("/", &pack.resource_uri, "alice", ALICE_PW).await;
    let done = b.decide(&path, &page, "accept").await;
    assert_eq!(done.status, 200, "{}\n{}", done.text, demo.log());
    until_accepted(&pack.result_uri, 20, || {}).await;
    let log = demo.log();
    assert!(!log.contains("WARN"), "{log}");
}
