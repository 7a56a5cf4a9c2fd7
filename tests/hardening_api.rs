//! The raw API's strictness (PROTOCOL.md §10): every answer under `/api/v1/`
//! is JSON, the framework's own refusals included, and a voice decision must
//! name the view it read.

mod common;

use common::*;
use serde_json::{json, Value};

const GW: &str = "voice-gw";
const GW_SECRET: &str = "gateway-secret-0123456789";
const PIN: &str = "135790";

async fn json_answer(res: reqwest::Response) -> (u16, Value, String) {
    let status = res.status().as_u16();
    let ct = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let raw = res.text().await.unwrap();
    assert!(ct.starts_with("application/json"), "{status} {ct}: {raw}");
    let v: Value = serde_json::from_str(&raw).unwrap_or_else(|_| panic!("not JSON: {raw}"));
    assert!(v["error"].is_string(), "{raw}");
    assert!(v["error_description"].is_string(), "{raw}");
    (status, v, raw)
}

#[actix_web::test]
async fn every_answer_under_api_v1_is_json() {
    let env = Env::start(Options {
        gateways: vec![Gateway::new(GW, GW_SECRET)],
        ..Default::default()
    })
    .await;
    env.set_pin("alice", PIN);
    let gw = env.voice(&Gateway::new(GW, GW_SECRET));
    let token = gw.user_token("alice", PIN).await;
    let http = http_client();
    let url = |p: &str| format!("{}{p}", env.cs_origin);

    // Unknown paths.
    for path in [
        "/api/v1",
        "/api/v1/",
        "/api/v1/nothing",
        "/api/v1/confirmations/x/y/z",
    ] {
        let (status, v, _) = json_answer(http.get(url(path)).send().await.unwrap()).await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(v["error"], "not_found");
    }
    // Wrong methods.
    for (method, path) in [
        (reqwest::Method::GET, "/api/v1/token"),
        (reqwest::Method::DELETE, "/api/v1/confirmations"),
        (reqwest::Method::PUT, "/api/v1/confirmations/x/decision"),
    ] {
        let (status, v, _) = json_answer(
            http.request(method, url(path))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 405, "{path}");
        assert_eq!(v["error"], "method_not_allowed");
    }
    // A body too large, of either kind.
    let big = "x".repeat(1024 * 1024);
    let (status, v, _) = json_answer(
        http.post(url("/api/v1/confirmations"))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(format!("{{\"resource uri\":\"{big}\"}}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, v["error"].as_str()), (413, Some("too_large")));
    let (status, _, _) = json_answer(
        http.post(url("/api/v1/token"))
            .basic_auth(GW, Some(GW_SECRET))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("username=alice&pin={big}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 413);
    // The wrong media type.
    let (status, v, _) = json_answer(
        http.post(url("/api/v1/confirmations"))
            .bearer_auth(&token)
            .header("content-type", "text/plain")
            .body("{\"resource uri\":\"x\"}")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (415, Some("unsupported_media_type"))
    );
    let (status, _, _) = json_answer(
        http.post(url("/api/v1/token"))
            .basic_auth(GW, Some(GW_SECRET))
            .json(&json!({"username": "alice", "pin": PIN}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 415);
    env.stop().await;
}

#[actix_web::test]
async fn a_voice_decision_must_name_the_view_it_read() {
    let env = Env::start(Options {
        gateways: vec![Gateway::new(GW, GW_SECRET)],
        ..Default::default()
    })
    .await;
    env.set_pin("alice", PIN);
    let gw = env.voice(&Gateway::new(GW, GW_SECRET));
    let token = gw.user_token("alice", PIN).await;
    let pack = env.invoke().await;
    let created = gw.create(Some(&token), &pack.resource_uri).await;
    created.expect(201, "create");
    let id = created.body["id"].as_str().unwrap().to_owned();
    let digest = created.body["voice"]["digest"].as_str().unwrap().to_owned();

    let missing = gw
        .decide(
            Some(&token),
            &id,
            &json!({"decision": "accept", "view": null}),
        )
        .await;
    missing.expect(400, "no view");
    assert!(missing.raw.contains("view"), "{}", missing.raw);
    let other = gw
        .decide(
            Some(&token),
            &id,
            &json!({"decision": "accept", "view": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}),
        )
        .await;
    other.expect(409, "another view");
    assert_eq!(other.error(), "view_changed", "{}", other.raw);
    assert!(env.records("alice").is_empty(), "nothing was signed");

    let ok = gw
        .decide(
            Some(&token),
            &id,
            &json!({"decision": "accept", "view": digest}),
        )
        .await;
    ok.expect(200, "the view read");
    assert_eq!(env.records("alice").len(), 1);
    env.stop().await;
}
