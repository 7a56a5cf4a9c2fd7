//! The raw API for voice gateways (PROTOCOL.md §10) end to end, with the
//! reference resource server (RS), both on real loopback sockets: the voice
//! flow (token, view, decision, countersignature with `cheq_channel` "voice"),
//! its refusals (PINs, gateway secrets, tokens, other users, expiry, repeated
//! decisions), deceptive-text warnings (API and HTML page), and the
//! collection of private data (§8) through the API and through the HTML form,
//! with a scan of the CS data directory for the private values afterwards.
//! The harness is in `tests/common/mod.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use base64::Engine;
use cheq::time::Clock;
use chrono::{DateTime, Utc};
use common::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

const GW: &str = "voice-gw";
const GW_SECRET: &str = "voice-gateway-secret-0123";
const GW2: &str = "voice-gw-2";
const GW2_SECRET: &str = "other-gateway-secret-4567";
const ALICE_PIN: &str = "432109";
const BOB_PIN: &str = "876543";

const FROM: &str = "12345678";
const TO: &str = "87654321";
const AMOUNT: &str = "250.00";

/// A right-to-left override inside the payee, a Cyrillic 'а' in "Amazon".
const BIDI_PAYEE: &str = "Acme \u{202E}gnp.exe";
const MIXED_MEMO: &str = "Pay Am\u{0430}zon";

fn gateways() -> Vec<Gateway> {
    vec![Gateway::new(GW, GW_SECRET), Gateway::new(GW2, GW2_SECRET)]
}

/// Both servers, two gateways, alice (PIN) and bob (password and PIN).
async fn start(clock: Option<Arc<cheq::time::ManualClock>>) -> Env {
    let env = Env::start(Options {
        gateways: gateways(),
        clock,
        // The private-value tests scan the CS's files for typed values.
        plain_cs_store: true,
        ..Options::default()
    })
    .await;
    env.set_pin("alice", ALICE_PIN);
    env.add_user("bob", BOB_PW);
    env.set_pin("bob", BOB_PIN);
    env
}

fn manual_clock() -> Arc<cheq::time::ManualClock> {
    Arc::new(cheq::time::ManualClock::new(Utc::now()))
}

/// base64url (unpadded) SHA-256, computed here rather than by the crate.
fn sha256_b64url(text: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(text.as_bytes()))
}

/// The protected header of signature `i` of a JWS document, as JSON.
fn protected_of(doc: &str, i: usize) -> Value {
    let (protected, _) = signature_of(doc, i);
    serde_json::from_slice(&cheq::sign::b64::decode(&protected).unwrap()).unwrap()
}

/// The evidence of one of alice's decisions, downloaded from her history
/// (`GET /history/{id}.json`, the id of its record) after signing in with
/// her password.
async fn evidence(env: &Env, record: &cheq::store::cs::DecisionRecord) -> String {
    let mut b = env.browser();
    b.sign_in("alice", ALICE_PW).await;
    let history = b.get("/history").await;
    assert_eq!(history.status, 200, "{}", history.text);
    let link = format!("/history/{}.json", record.key().id());
    assert!(
        history.raw.contains(&format!("href=\"{link}\"")),
        "the history links the evidence: {}",
        history.text
    );
    let res = b.get(&link).await;
    assert_eq!(res.status, 200, "{}", res.text);
    res.raw
}

/// The parameter called `name` in a §10 view.
fn param<'a>(view: &'a Value, name: &str) -> &'a Value {
    view["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no parameter {name:?} in {view}"))
}

/// The parameter names named by a 422 `invalid_input` answer.
fn problem_names(a: &ApiAnswer) -> Vec<String> {
    a.body["problems"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|p| p["parameter"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts a 422 `invalid_input` that names `names` (in its description).
fn assert_invalid_input(a: &ApiAnswer, names: &[&str], what: &str) {
    a.expect(422, what);
    assert_eq!(a.error(), "invalid_input", "{what}: {}", a.raw);
    let description = a.body["error_description"].as_str().unwrap();
    for n in names {
        assert!(
            description.contains(n),
            "{what}: {n:?} is not named in {description:?}"
        );
        assert!(
            problem_names(a).iter().any(|p| p == n),
            "{what}: {n:?} not in the problems of {}",
            a.raw
        );
    }
}

/// Does `text` say one of `forms`?
fn says(text: &str, forms: &[&str]) -> bool {
    forms.iter().any(|f| text.contains(f))
}

/// The `<input …>` tag labelled by a `<label>` whose text contains `label`:
/// (its `name`, its `type`).
fn labelled_input(raw: &str, label: &str) -> (String, String) {
    let labels = regex::Regex::new(r#"(?s)<label for="([^"]+)"[^>]*>(.*?)</label>"#).unwrap();
    let id = labels
        .captures_iter(raw)
        .find(|c| unescape(&c[2]).contains(label))
        .map(|c| c[1].to_owned())
        .unwrap_or_else(|| panic!("no label for {label:?} in {raw}"));
    let inputs = regex::Regex::new(r"(?s)<input\b[^>]*>").unwrap();
    let tag = inputs
        .find_iter(raw)
        .map(|m| m.as_str())
        .find(|t| t.contains(&format!("id=\"{id}\"")))
        .unwrap_or_else(|| panic!("no input with id {id:?}"));
    let attr = |name: &str| {
        regex::Regex::new(&format!(r#"\b{name}="([^"]*)""#))
            .unwrap()
            .captures(tag)
            .map(|c| unescape(&c[1]))
            .unwrap_or_else(|| panic!("no {name} in {tag}"))
    };
    (attr("name"), attr("type"))
}

/// Posts a decision form with extra fields.
async fn post_form(
    b: &mut Browser,
    path: &str,
    page: &Page,
    decision: &str,
    extra: &[(&str, &str)],
) -> Page {
    let csrf = page.hidden("csrf").expect("csrf field");
    let view = page.hidden("view").expect("view field");
    let mut fields = vec![
        ("csrf", csrf.as_str()),
        ("view", view.as_str()),
        ("decision", decision),
    ];
    fields.extend_from_slice(extra);
    b.post(path, &fields).await
}

/// Gives sled's periodic flush time to write what is in memory, so that the
/// scan of the data directory sees the state after delivery.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

// ---------------------------------------------------------------------------
// 1. The voice flow end to end, accept and reject
// ---------------------------------------------------------------------------

/// Token, view, decision over the raw API; returns the pack, the view and
/// the answer to the decision.
async fn voice_decides(env: &Env, decision: &str) -> (cheq::cheq::UriPack, Value, ApiAnswer) {
    let pack = env.invoke().await;
    let gw = env.voice(&Gateway::new(GW, GW_SECRET));
    let token = gw.user_token("alice", ALICE_PIN).await;

    let created = gw.create(Some(&token), &pack.resource_uri).await;
    created.expect(201, "create");
    let view = created.body.clone();
    let id = view["id"].as_str().expect("an id").to_owned();
    assert!(!id.is_empty());
    if let Some(location) = created.header("location") {
        assert!(location.ends_with(&format!("/api/v1/confirmations/{id}")));
    }

    // Every member of a §10 view.
    let (status, doc) = env.fetch_cheq(&pack.resource_uri).await;
    assert_eq!(status, 200);
    let payload = payload_of(&doc);
    assert_eq!(view["status"], "pending", "{view}");
    assert_eq!(view["operation"], payload["operation"], "{view}");
    assert_eq!(view["operation name"], "Book a flight", "{view}");
    assert_eq!(view["resource origin"], env.rs_url.as_str(), "{view}");
    assert_eq!(view["subject"], "alice", "{view}");
    let expires = DateTime::parse_from_rfc3339(view["expires"].as_str().unwrap()).unwrap();
    assert_eq!(
        expires,
        DateTime::parse_from_rfc3339(payload["expires"].as_str().unwrap()).unwrap(),
        "the expiry is the CHEQ's"
    );
    assert_eq!(view["language"], "en", "{view}");
    let params = view["parameters"].as_array().unwrap();
    assert_eq!(params.len(), 4, "{view}");
    for (name, value) in [
        ("flight number", "UA23"),
        ("flight date", "2026-12-08"),
        ("cabin class", "BUSINESS"),
        ("price", "1200"),
    ] {
        let p = param(&view, name);
        assert_eq!(p["value"], value, "{p}");
        assert!(p["input"].is_null(), "{p}");
        assert!(p.as_object().unwrap().contains_key("description"), "{p}");
    }
    assert_eq!(param(&view, "price")["description"], "in US dollars");
    assert_eq!(view["warnings"], json!([]), "{view}");

    let text = view["voice"]["text"].as_str().expect("voice.text");
    let ssml = view["voice"]["ssml"].as_str().expect("voice.ssml");
    for (what, forms) in [
        ("the CS", &[env.cs_origin.as_str()][..]),
        ("who asks", &[env.rs_url.as_str()]),
        ("the operation name", &["Book a flight"]),
        ("the operation", &[view["operation"].as_str().unwrap()]),
        ("a parameter name", &["flight number"]),
        ("the flight number", &["U A 2 3", "UA23"]),
        ("a parameter name", &["flight date"]),
        ("the date", &["December 8, 2026", "2026-12-08"]),
        ("a parameter name", &["cabin class"]),
        ("the cabin class", &["business", "BUSINESS"]),
        ("a parameter name", &["price"]),
        ("a description", &["in US dollars"]),
        ("the price", &["1,200", "1200"]),
        ("the subject", &["alice"]),
    ] {
        assert!(
            says(text, forms),
            "voice.text lacks {what} {forms:?}: {text}"
        );
    }
    let expiry_said = expires
        .with_timezone(&Utc)
        .format("%B %-d, %Y at %H:%M")
        .to_string();
    assert!(
        says(text, &[&expiry_said, view["expires"].as_str().unwrap()]),
        "voice.text lacks the expiry {expiry_said}: {text}"
    );
    let last = text.trim_end().lines().last().unwrap();
    assert!(
        last.contains('?') && last.to_lowercase().contains("accept"),
        "voice.text ends with the question: {text}"
    );
    // SSML 1.1: the <speak> root (after an optional XML declaration).
    let root = ssml.trim_start();
    let root = match root.strip_prefix("<?xml") {
        Some(rest) => rest[rest.find("?>").expect("a closed declaration") + 2..].trim_start(),
        None => root,
    };
    assert!(root.starts_with("<speak"), "{ssml}");
    assert!(ssml.trim_end().ends_with("</speak>"), "{ssml}");
    assert!(ssml.contains("Book a flight") && ssml.contains("alice"));

    // GET gives the same view.
    let got = gw.get(Some(&token), &id).await;
    got.expect(200, "get");
    assert_eq!(got.body, view);
    assert_eq!(env.rs.executions(), 0);
    assert!(env.records("alice").is_empty());

    let answer = gw
        .decide(Some(&token), &id, &json!({ "decision": decision }))
        .await;
    (pack, view, answer)
}

/// Checks the countersignature of alice's only decision.
async fn assert_voice_countersignature(env: &Env, view: &Value, decision: &str) -> String {
    let records = env.records("alice");
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!(record.channel, cheq::cheq::Channel::Voice);
    assert_eq!(record.decision.as_str(), decision);
    let doc = evidence(env, record).await;
    assert_eq!(doc, record.document, "the evidence is the stored document");
    let header = protected_of(&doc, 1);
    assert_eq!(header["cheq_role"], "confirmation", "{header}");
    assert_eq!(header["cheq_decision"], decision, "{header}");
    assert_eq!(header["cheq_channel"], "voice", "{header}");
    assert_eq!(header["amr"], json!(["pin"]), "{header}");
    assert_eq!(header["sub"], "alice", "{header}");
    assert_eq!(
        header["cheq_view"],
        sha256_b64url(view["voice"]["text"].as_str().unwrap()),
        "cheq_view is the SHA-256 of voice.text"
    );
    // And it verifies as a decision with both servers' keys.
    let d = if decision == "accept" {
        cheq::sign::Decision::Accept
    } else {
        cheq::sign::Decision::Reject
    };
    let verified = cheq::sign::verify_decision(
        doc.as_bytes(),
        &env.trust(),
        Some(d),
        &cheq::sign::Context::at(Utc::now()),
    )
    .unwrap();
    assert_eq!(verified.claims().channel, cheq::sign::Channel::Voice);
    doc
}

#[actix_web::test]
async fn voice_accept_end_to_end() {
    let env = start(None).await;
    let (pack, view, answer) = voice_decides(&env, "accept").await;
    answer.expect(200, "accept");
    assert_eq!(answer.body["status"], "accepted", "{}", answer.raw);
    DateTime::parse_from_rfc3339(answer.body["decided_at"].as_str().expect("decided_at"))
        .expect("decided_at is RFC 3339");
    assert_eq!(env.rs.executions(), 1, "the RS ran once");
    let (status, body) = result_of(&pack.result_uri).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "accepted", "{body}");
    assert_voice_countersignature(&env, &view, "accept").await;

    // The decided confirmation, seen again.
    let gw = env.voice(&Gateway::new(GW, GW_SECRET));
    let token = gw.user_token("alice", ALICE_PIN).await;
    let again = gw.get(Some(&token), view["id"].as_str().unwrap()).await;
    again.expect(200, "get after the decision");
    assert_eq!(again.body["status"], "accepted", "{}", again.raw);
    assert_eq!(env.rs.executions(), 1);
    env.stop().await;
}

#[actix_web::test]
async fn voice_reject_end_to_end() {
    let env = start(None).await;
    let (pack, view, answer) = voice_decides(&env, "reject").await;
    answer.expect(200, "reject");
    assert_eq!(answer.body["status"], "rejected", "{}", answer.raw);
    DateTime::parse_from_rfc3339(answer.body["decided_at"].as_str().expect("decided_at"))
        .expect("decided_at is RFC 3339");
    assert_eq!(env.rs.executions(), 0, "nothing ran");
    let (status, body) = result_of(&pack.result_uri).await;
    assert_eq!((status, body), (200, json!({"status": "rejected"})));
    assert_voice_countersignature(&env, &view, "reject").await;
    env.stop().await;
}

// ---------------------------------------------------------------------------
// 2. Refusals: PINs, gateways, tokens, other users, expiry, repeats
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn voice_api_refusals() {
    let clock = manual_clock();
    let env = start(Some(clock.clone())).await;
    let gw = env.voice(&Gateway::new(GW, GW_SECRET));
    let gw2 = env.voice(&Gateway::new(GW2, GW2_SECRET));

    // (a) Wrong PINs: 401 each and never a lock-out: a caller guessing
    // alice's PIN only slows her checks down (by a delay that grows past 5
    // failures), and never makes her right PIN fail.
    for wrong in 0..7 {
        let a = gw.token("alice", "000000").await;
        a.expect(401, &format!("wrong PIN {wrong}"));
        assert!(a.body.get("access_token").is_none());
    }
    let alice = gw2.user_token("alice", ALICE_PIN).await;
    // The right PIN through the guessing gateway works as well.
    gw.user_token("bob", BOB_PIN).await;
    let _ = clock;

    // (b) Gateway authentication: wrong secret, unknown gateway, none.
    for (what, credentials) in [
        ("a wrong gateway secret", Some((GW2, "not-the-secret"))),
        ("an unknown gateway", Some(("no-such-gateway", GW2_SECRET))),
        ("no gateway credentials", None),
    ] {
        let a = gw2
            .token_with(credentials, &[("username", "alice"), ("pin", ALICE_PIN)])
            .await;
        a.expect(401, what);
        assert_eq!(a.error(), "invalid_client", "{what}: {}", a.raw);
        assert!(a.body.get("access_token").is_none());
    }

    // (c) Bearer tokens: absent, unknown.
    let pack = env.invoke().await;
    for (what, token) in [
        ("no token", None),
        ("an unknown token", Some("bm90LWEtdG9rZW4")),
    ] {
        let a = gw.create(token, &pack.resource_uri).await;
        a.expect(401, what);
        assert_eq!(a.error(), "invalid_token", "{what}: {}", a.raw);
        let a = gw.get(token, "some-id").await;
        a.expect(401, what);
        assert_eq!(a.error(), "invalid_token", "{what}: {}", a.raw);
        let a = gw
            .decide(token, "some-id", &json!({"decision": "accept"}))
            .await;
        a.expect(401, what);
        assert_eq!(a.error(), "invalid_token", "{what}: {}", a.raw);
    }

    // (d) An expired token.
    let created = gw2.create(Some(&alice), &pack.resource_uri).await;
    created.expect(201, "create");
    let id = created.body["id"].as_str().unwrap().to_owned();
    env.advance(env.api_token_ttl_secs + 1);
    let a = gw2.get(Some(&alice), &id).await;
    a.expect(401, "an expired token");
    assert_eq!(a.error(), "invalid_token", "{}", a.raw);
    let a = gw2
        .decide(Some(&alice), &id, &json!({"decision": "accept"}))
        .await;
    a.expect(401, "a decision with an expired token");
    assert!(env.records("alice").is_empty());
    let alice = gw2.user_token("alice", ALICE_PIN).await;
    gw2.get(Some(&alice), &id).await.expect(200, "a new token");

    // (e) Bob's token on alice's confirmation: 403, and nothing of it shown.
    let bob = gw2.user_token("bob", BOB_PIN).await;
    let a = gw2.get(Some(&bob), &id).await;
    a.expect(403, "bob reads alice's confirmation");
    assert!(!a.raw.contains("UA23"), "{}", a.raw);
    let a = gw2
        .decide(Some(&bob), &id, &json!({"decision": "accept"}))
        .await;
    a.expect(403, "bob decides alice's confirmation");
    let a = gw2.create(Some(&bob), &pack.resource_uri).await;
    a.expect(403, "bob opens alice's resource URI");
    assert!(env.records("alice").is_empty() && env.records("bob").is_empty());
    assert_eq!(env.rs.executions(), 0);

    // (f) A decision posted twice: the second sees the first.
    let first = gw2
        .decide(Some(&alice), &id, &json!({"decision": "accept"}))
        .await;
    first.expect(200, "accept");
    assert_eq!(first.body["status"], "accepted", "{}", first.raw);
    assert_eq!(env.rs.executions(), 1);
    let records = env.records("alice");
    assert_eq!(records.len(), 1);
    let evidence_before = evidence(&env, &records[0]).await;
    let same = gw2
        .decide(Some(&alice), &id, &json!({"decision": "accept"}))
        .await;
    same.expect(200, "the same decision again");
    assert_eq!(same.body["status"], "accepted", "{}", same.raw);
    assert_eq!(same.body["decided_at"], first.body["decided_at"]);
    let opposite = gw2
        .decide(Some(&alice), &id, &json!({"decision": "reject"}))
        .await;
    opposite.expect(409, "the opposite decision");
    assert_eq!(opposite.error(), "already_decided", "{}", opposite.raw);
    // Through another gateway and a new token too.
    let alice_gw = gw.user_token("alice", ALICE_PIN).await;
    gw.decide(Some(&alice_gw), &id, &json!({"decision": "reject"}))
        .await
        .expect(409, "the opposite decision through another gateway");
    assert_eq!(env.records("alice"), records, "no second signature");
    assert_eq!(evidence(&env, &records[0]).await, evidence_before);
    assert_eq!(env.rs.executions(), 1, "the RS ran once");
    let (_, body) = result_of(&pack.result_uri).await;
    assert_eq!(body["status"], "accepted", "{body}");

    // (g) A decision on an expired CHEQ: 410, nothing signed.
    let late = env.invoke().await;
    let created = gw2.create(Some(&alice), &late.resource_uri).await;
    created.expect(201, "create");
    let late_id = created.body["id"].as_str().unwrap().to_owned();
    let expires = DateTime::parse_from_rfc3339(created.body["expires"].as_str().unwrap())
        .unwrap()
        .with_timezone(&Utc);
    let left = (expires - clock.now()).num_seconds();
    env.advance(left + 61);
    let alice = gw2.user_token("alice", ALICE_PIN).await;
    let a = gw2
        .decide(Some(&alice), &late_id, &json!({"decision": "accept"}))
        .await;
    a.expect(410, "a decision after expiry");
    assert_eq!(env.records("alice"), records, "nothing new was signed");
    assert_eq!(env.rs.executions(), 1);
    let (status, body) = result_of(&late.result_uri).await;
    assert_eq!((status, body), (200, json!({"status": "expired"})));
    env.stop().await;
}

// ---------------------------------------------------------------------------
// 3. Deceptive text: warnings in the API view and on the page
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn warnings_must_be_acknowledged() {
    let env = start(None).await;
    let params = transfer_params(Some(BIDI_PAYEE), Some(MIXED_MEMO));
    let all_values = json!({"from account": FROM, "to account": TO, "amount": AMOUNT});

    // Over the raw API.
    let pack = env.invoke_tool("transfer_funds", &params).await;
    let gw = env.voice(&Gateway::new(GW, GW_SECRET));
    let token = gw.user_token("alice", ALICE_PIN).await;
    let created = gw.create(Some(&token), &pack.resource_uri).await;
    created.expect(201, "create");
    let view = &created.body;
    let id = view["id"].as_str().unwrap();
    let warnings = view["warnings"].as_array().expect("a warnings list");
    let has = |parameter: &str, kind: &str| {
        warnings.iter().any(|w| {
            w["parameter"] == parameter
                && w["kind"] == kind
                && w["detail"].as_str().is_some_and(|d| !d.is_empty())
        })
    };
    assert!(has("payee", "bidi_control"), "{warnings:?}");
    assert!(has("memo", "mixed_script"), "{warnings:?}");
    assert!(has("memo", "confusable"), "{warnings:?}");
    let text = view["voice"]["text"].as_str().unwrap();
    assert!(
        !text.contains('\u{202E}'),
        "the override is not read out raw"
    );
    let warning_at = text.find("Warning").expect("voice.text speaks a warning");
    let question_at = text.rfind("Do you accept").expect("the question");
    assert!(warning_at < question_at, "the warning comes first: {text}");
    assert!(!view["voice"]["ssml"].as_str().unwrap().contains('\u{202E}'));

    let refused = gw
        .decide(
            Some(&token),
            id,
            &json!({"decision": "accept", "collected": all_values}),
        )
        .await;
    refused.expect(422, "accept without acknowledging");
    assert_eq!(
        refused.error(),
        "warnings_not_acknowledged",
        "{}",
        refused.raw
    );
    assert!(env.records("alice").is_empty(), "nothing was signed");
    assert_eq!(env.rs.executions(), 0);
    let accepted = gw
        .decide(
            Some(&token),
            id,
            &json!({"decision": "accept", "collected": all_values, "acknowledge_warnings": true}),
        )
        .await;
    accepted.expect(200, "accept, acknowledged");
    assert_eq!(accepted.body["status"], "accepted", "{}", accepted.raw);
    assert_eq!(env.rs.executions(), 1);

    // On the HTML page.
    let pack = env.invoke_tool("transfer_funds", &params).await;
    let mut b = env.browser();
    let (path, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("⟨U+202E⟩"), "{}", page.text);
    assert!(
        !page.raw.contains('\u{202E}'),
        "the raw override is never sent"
    );
    assert!(page.text.contains("Warning"), "{}", page.text);
    for kind in ["bidi_control", "mixed_script", "confusable"] {
        assert!(page.text.contains(kind), "{kind}: {}", page.text);
    }
    assert!(page.raw.contains("name=\"acknowledge_warnings\""));
    let (from, _) = labelled_input(&page.raw, "from account");
    let (to, _) = labelled_input(&page.raw, "to account");
    let (amount, _) = labelled_input(&page.raw, "amount");
    let values = [
        (from.as_str(), FROM),
        (to.as_str(), TO),
        (amount.as_str(), AMOUNT),
    ];
    let before = env.records("alice");
    let res = post_form(&mut b, &path, &page, "accept", &values).await;
    assert_eq!(res.status, 422, "{}", res.text);
    assert!(res.raw.contains("name=\"decision\""), "the form again");
    assert_eq!(env.records("alice"), before, "nothing was signed");
    assert_eq!(env.rs.executions(), 1);
    assert_eq!(result_of(&pack.result_uri).await.0, 202);
    let mut fields = values.to_vec();
    fields.push(("acknowledge_warnings", "yes"));
    let res = post_form(&mut b, &path, &page, "accept", &fields).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert!(res.text.contains("you chose to accept"), "{}", res.text);
    assert_eq!(env.rs.executions(), 2);
    let (status, body) = result_of(&pack.result_uri).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "accepted", "{body}");
    env.stop().await;
}

// ---------------------------------------------------------------------------
// 4. Private data (§8): over the raw API and through the HTML form
// ---------------------------------------------------------------------------

/// After delivery: the result, the CS records, the evidence and every file
/// of the CS data directory hold none of the private values.
async fn assert_private_values_gone(env: &Env, pack: &cheq::cheq::UriPack) {
    assert_eq!(env.rs.executions(), 1, "the RS ran once");
    let res = reqwest::get(&pack.result_uri).await.unwrap();
    assert_eq!(res.status(), 200);
    let raw = res.text().await.unwrap();
    let body: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(body["status"], "accepted", "{raw}");
    let outputs = body["result"]["output_parameters"].as_array().unwrap();
    assert!(
        outputs.contains(&json!({"name": "status", "value": "DONE"})),
        "the values reached the RS: {raw}"
    );
    for v in [FROM, TO, AMOUNT] {
        assert!(!holds(raw.as_bytes(), v), "the result holds {v}: {raw}");
    }

    let records = env.records("alice");
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert!(!record.sealed, "delivered: no sealed copy left");
    for v in [FROM, TO] {
        assert!(
            !holds(record.document.as_bytes(), v),
            "the record holds {v}"
        );
    }

    let doc = evidence(env, record).await;
    for v in [FROM, TO] {
        assert!(!holds(doc.as_bytes(), v), "the evidence holds {v}: {doc}");
    }
    // Redacted evidence: a JWS signed by the CS over the statement (§8.1).
    let signed: Value = serde_json::from_str(&doc).unwrap();
    let statement = cheq::sign::b64::decode(signed["payload"].as_str().unwrap()).unwrap();
    for v in [FROM, TO] {
        assert!(!holds(&statement, v), "the statement holds {v}: {doc}");
    }
    let redacted: Value = serde_json::from_slice(&statement).unwrap();
    // Keyed digests: without the CS's evidence key a short number cannot be
    // found by hashing every candidate.
    let digests = &redacted["collected_hmac_sha256"];
    assert!(digests.is_object(), "no collected_hmac_sha256 in {doc}");
    let key = std::fs::read(env.cs_data.join("evidence.secret")).unwrap();
    for (name, v) in [("from account", FROM), ("to account", TO)] {
        assert_eq!(
            digests[name],
            cheq::confirm::seal::keyed_digest(&key, v.as_bytes()),
            "{doc}"
        );
        assert_ne!(
            digests[name],
            sha256_b64url(v),
            "a plain hash of {name}: {doc}"
        );
    }
    assert!(redacted.get("confirmation_signature").is_none(), "{doc}");

    settle().await;
    let n = assert_no_file_holds(&env.cs_data, &[FROM, TO]);
    assert!(n > 1, "only {n} files under the CS data directory");
    // Control: the scan does reach what the CS stored. The payee (not
    // private) is in the kept CHEQ payload, base64url-encoded.
    assert!(
        files_under(&env.cs_data)
            .iter()
            .any(|f| holds(&std::fs::read(f).unwrap(), "ACME")),
        "the scan found not even the payee in the CS data directory"
    );
}

#[actix_web::test]
async fn private_values_over_the_raw_api() {
    let env = start(None).await;
    let pack = env
        .invoke_tool("transfer_funds", &transfer_params(Some("ACME"), None))
        .await;
    let gw = env.voice(&Gateway::new(GW, GW_SECRET));
    let token = gw.user_token("alice", ALICE_PIN).await;
    let created = gw.create(Some(&token), &pack.resource_uri).await;
    created.expect(201, "create");
    let view = created.body.clone();
    let id = view["id"].as_str().unwrap();

    assert_eq!(param(&view, "payee")["value"], "ACME");
    assert!(param(&view, "payee")["input"].is_null());
    for name in ["from account", "to account"] {
        let p = param(&view, name);
        assert!(p["value"].is_null(), "{p}");
        let input = &p["input"];
        assert_eq!(input["type"], "digits", "{p}");
        assert_eq!(input["required"], true, "{p}");
        assert_eq!(input["sensitive"], true, "{p}");
        assert_eq!(input["pattern"], "^[0-9]{6,20}$", "{p}");
    }
    let amount = param(&view, "amount");
    assert!(amount["value"].is_null(), "{amount}");
    assert_eq!(amount["input"]["type"], "amount", "{amount}");
    assert_eq!(amount["input"]["sensitive"], false, "{amount}");
    assert_eq!(view["warnings"], json!([]));

    // Without the values.
    let a = gw
        .decide(Some(&token), id, &json!({"decision": "accept"}))
        .await;
    assert_invalid_input(&a, &["from account", "to account", "amount"], "no values");
    let a = gw
        .decide(
            Some(&token),
            id,
            &json!({"decision": "accept", "collected": {"amount": AMOUNT}}),
        )
        .await;
    assert_invalid_input(&a, &["from account", "to account"], "no accounts");

    // Bad values.
    for (what, collected, named) in [
        (
            "letters in digits",
            json!({"from account": "12ab5678", "to account": TO, "amount": AMOUNT}),
            "from account",
        ),
        (
            "too short for the pattern",
            json!({"from account": FROM, "to account": "12345", "amount": AMOUNT}),
            "to account",
        ),
        (
            "not an amount",
            json!({"from account": FROM, "to account": TO, "amount": "12,50"}),
            "amount",
        ),
    ] {
        let a = gw
            .decide(
                Some(&token),
                id,
                &json!({"decision": "accept", "collected": collected}),
            )
            .await;
        assert_invalid_input(&a, &[named], what);
        for v in ["12ab5678", FROM, TO] {
            assert!(!a.raw.contains(v), "{what}: the answer echoes {v}");
        }
    }
    assert!(env.records("alice").is_empty(), "nothing was signed");
    assert_eq!(env.rs.executions(), 0);
    assert_eq!(result_of(&pack.result_uri).await.0, 202);

    let a = gw
        .decide(
            Some(&token),
            id,
            &json!({"decision": "accept",
                    "collected": {"from account": FROM, "to account": TO, "amount": AMOUNT}}),
        )
        .await;
    a.expect(200, "accept with the values");
    assert_eq!(a.body["status"], "accepted", "{}", a.raw);
    let seen = gw.get(Some(&token), id).await;
    seen.expect(200, "the decided view");
    for v in [FROM, TO] {
        assert!(!seen.raw.contains(v), "the decided view holds {v}");
    }
    assert_private_values_gone(&env, &pack).await;
    env.stop().await;
}

#[actix_web::test]
async fn private_values_through_the_html_form() {
    let env = start(None).await;
    let mut b = env.browser();
    let (pack, path, page) = env.open_transfer(&mut b).await;
    assert!(page.text.contains("ACME"));
    let (from, from_type) = labelled_input(&page.raw, "from account");
    let (to, to_type) = labelled_input(&page.raw, "to account");
    let (amount, _) = labelled_input(&page.raw, "amount");
    assert_eq!(
        (from_type.as_str(), to_type.as_str()),
        ("password", "password")
    );
    for name in [&from, &to, &amount] {
        assert!(name.starts_with("input:"), "{name}");
    }

    // Without the values, then with bad ones.
    let res = post_form(&mut b, &path, &page, "accept", &[]).await;
    assert_eq!(res.status, 422, "{}", res.text);
    for (what, values) in [
        (
            "letters in digits",
            [
                (from.as_str(), "12ab5678"),
                (to.as_str(), TO),
                (amount.as_str(), AMOUNT),
            ],
        ),
        (
            "too short for the pattern",
            [
                (from.as_str(), FROM),
                (to.as_str(), "12345"),
                (amount.as_str(), AMOUNT),
            ],
        ),
        (
            "not an amount",
            [
                (from.as_str(), FROM),
                (to.as_str(), TO),
                (amount.as_str(), "12,50"),
            ],
        ),
    ] {
        let res = post_form(&mut b, &path, &page, "accept", &values).await;
        assert_eq!(res.status, 422, "{what}: {}", res.text);
        assert!(
            res.raw.contains("name=\"decision\""),
            "{what}: the form again"
        );
        for v in ["12ab5678", FROM, TO] {
            assert!(!res.raw.contains(v), "{what}: the page echoes {v}");
        }
    }
    assert!(env.records("alice").is_empty(), "nothing was signed");
    assert_eq!(env.rs.executions(), 0);

    let values = [
        (from.as_str(), FROM),
        (to.as_str(), TO),
        (amount.as_str(), AMOUNT),
    ];
    let res = post_form(&mut b, &path, &page, "accept", &values).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert!(res.text.contains("you chose to accept"), "{}", res.text);
    assert!(res.text.contains("delivered"), "{}", res.text);
    for v in [FROM, TO] {
        assert!(!res.raw.contains(v), "the outcome page echoes {v}");
    }
    let records = env.records("alice");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].channel, cheq::cheq::Channel::Html);
    assert_private_values_gone(&env, &pack).await;
    env.stop().await;
}

// ---------------------------------------------------------------------------
// 6. A decision the RS refuses is never reported as accepted
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn a_decision_the_rs_refuses_is_not_reported_accepted() {
    use cheq::sign::{countersign, verify_resource, Channel, Context, Decision, DecisionInput};
    let env = start(None).await;
    let pack = env.invoke().await;
    let gw = env.voice(&Gateway::new(GW, GW_SECRET));
    let token = gw.user_token("alice", ALICE_PIN).await;
    let created = gw.create(Some(&token), &pack.resource_uri).await;
    created.expect(201, "create");
    let id = created.body["id"].as_str().unwrap().to_owned();

    // Another countersignature of the same CHEQ reaches the RS first, so the
    // RS refuses the CS's own as a replay (409).
    let (status, resource_signed) = env.fetch_cheq(&pack.resource_uri).await;
    assert_eq!(status, 200);
    let now = Utc::now();
    let ctx = Context {
        now,
        resource_uri: Some(&pack.resource_uri),
        confirmation_uri: Some(&env.cs_url),
    };
    let verified = verify_resource(resource_signed.as_bytes(), &env.trust(), &ctx).unwrap();
    let cs_key = cheq::keyfile::load_or_create_key(&env.cs_key_path, None, "cs").unwrap();
    let amr = vec!["pin".to_owned()];
    let other = countersign(
        &verified,
        &cs_key,
        DecisionInput {
            decision: Decision::Accept,
            sub: "alice",
            also_known_as: &[],
            auth_time: now.timestamp(),
            amr: &amr,
            channel: Channel::Voice,
            view_text: "something else",
            collected: None,
            passkey: None,
        },
        now,
    )
    .unwrap();
    let (status, _) = env
        .post_decision(&pack.resource_uri, "accept", &other)
        .await;
    assert_eq!(status, 200);
    assert_eq!(env.rs.executions(), 1);

    let answer = gw
        .decide(Some(&token), &id, &json!({"decision": "accept"}))
        .await;
    answer.expect(409, "a decision the RS refused");
    assert_eq!(
        answer.error(),
        "refused_by_resource_server",
        "{}",
        answer.raw
    );
    assert!(!answer.raw.contains("accepted"), "{}", answer.raw);
    // Read again, it is still not "accepted".
    let again = gw.get(Some(&token), &id).await;
    again.expect(409, "the refused decision, read again");
    assert_eq!(again.error(), "refused_by_resource_server", "{}", again.raw);
    assert!(!again.raw.contains("accepted"), "{}", again.raw);
    let records = env.records("alice");
    assert_eq!(records.len(), 1);
    assert!(
        matches!(
            records[0].delivery,
            cheq::store::cs::Delivery::Refused {
                refusal: cheq::store::cs::Refusal::ResourceServer { status: 409, .. },
                ..
            }
        ),
        "{:?}",
        records[0].delivery
    );
    assert_eq!(env.rs.executions(), 1, "the refused decision ran nothing");
    env.stop().await;
}

/// The verified CHEQ of a page is kept for the decision on it: a value typed
/// wrong shows the page again, and the decision is then signed, without the
/// resource server being asked again (here it has gone away meanwhile).
#[actix_web::test]
async fn an_input_error_shows_the_page_again_without_asking_the_resource_server() {
    let env = start(None).await;
    let mut b = env.browser();
    let (_, path, page) = env.open_transfer(&mut b).await;
    let (from, _) = labelled_input(&page.raw, "from account");
    let (to, _) = labelled_input(&page.raw, "to account");
    let (amount, _) = labelled_input(&page.raw, "amount");

    env.rs_handle.stop(true).await;

    let res = post_form(&mut b, &path, &page, "accept", &[]).await;
    assert_eq!(res.status, 422, "{}", res.text);
    assert!(res.raw.contains("name=\"decision\""), "the form again");
    assert!(res.text.contains("a value is required"), "{}", res.text);
    assert!(res.text.contains("ACME"), "the same request: {}", res.text);

    let values = [
        (from.as_str(), FROM),
        (to.as_str(), TO),
        (amount.as_str(), AMOUNT),
    ];
    let res = post_form(&mut b, &path, &page, "accept", &values).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert!(res.text.contains("delivery pending"), "{}", res.text);
    let records = env.records("alice");
    assert_eq!(records.len(), 1, "signed once");
    assert!(records[0].delivery.is_pending());
    drop(env.background);
    env.cs_handle.stop(true).await;
}
