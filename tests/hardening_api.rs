//! The raw API's strictness (PROTOCOL.md §10): every answer under `/api/v1/`
//! is JSON, the framework's own refusals included, and a voice decision must
//! name the view it read.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

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

/// Whether the CS honours `token`: an unknown confirmation is 404 for a
/// good token, 401 for a refused one.
async fn token_holds(cs_url: &str, token: &str) -> (bool, Value) {
    let res = http_client()
        .get(format!("{cs_url}/api/v1/confirmations/none-such"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let (status, v, _) = json_answer(res).await;
    assert!(status == 404 || status == 401, "{status}: {v}");
    (status == 404, v)
}

/// §10: a token is bound to the credential it was issued for and to its
/// gateway: a new PIN (set through the running server's admin socket) ends
/// the tokens of the old one, and a gateway removed from the configuration
/// takes its tokens with it across a restart. A session is bound to the
/// password it signed in with in the same way.
#[actix_web::test]
async fn tokens_and_sessions_end_when_their_credential_or_gateway_goes() {
    let setup = Setup::new();
    let config = setup.path("cs.toml");
    let plain = std::fs::read_to_string(&config).unwrap();
    let with_gateway = format!(
        "{plain}\n[[gateways]]\nclient_id = \"{GW}\"\nsecret_hash = \"{}\"\n",
        cheq::confirm::auth::hash_secret(GW_SECRET).unwrap()
    );
    std::fs::write(&config, &with_gateway).unwrap();
    let (ok, out) = user_add("alice", ALICE_PW, &["--config", &config]);
    assert!(ok, "{out}");
    let set_pin = |pin: &str| {
        let (ok, out) = cheq_with_stdin(
            &[
                "user",
                "set-pin",
                "alice",
                "--pin-stdin",
                "--config",
                &config,
            ],
            &[],
            pin,
        );
        assert!(ok, "{out}");
    };
    set_pin(PIN);
    let mut cs = setup.start_cs().await;
    let gw = VoiceClient::new(&setup.cs_url, GW, GW_SECRET);

    let first = gw.user_token("alice", PIN).await;
    assert!(token_holds(&setup.cs_url, &first).await.0);
    let mut b = Browser::new(&setup.cs_url);
    b.sign_in("alice", ALICE_PW).await;
    assert_eq!(b.get("/history").await.status, 200);

    // A new PIN: the old PIN's token is refused, saying why; a token for the
    // new PIN works; the password's session is not touched.
    set_pin("975310");
    let (holds, v) = token_holds(&setup.cs_url, &first).await;
    assert!(!holds, "{v}");
    assert!(
        v["error_description"]
            .as_str()
            .unwrap_or("")
            .contains("credential"),
        "{v}"
    );
    let second = gw.user_token("alice", "975310").await;
    assert!(token_holds(&setup.cs_url, &second).await.0);
    assert_eq!(b.get("/history").await.status, 200);

    // A new password: the session signed in with the old one is over.
    let (ok, out) = cheq_with_stdin(
        &[
            "user",
            "set-password",
            "alice",
            "--password-stdin",
            "--config",
            &config,
        ],
        &[],
        "a-new-password-2",
    );
    assert!(ok, "{out}");
    let res = b.get("/history").await;
    assert_eq!(res.status, 303, "{}", res.text);
    assert!(res.location().starts_with("/login"), "{}", res.location());
    let mut again = Browser::new(&setup.cs_url);
    assert_eq!(
        again.login_at("/login", "alice", ALICE_PW).await.status,
        401,
        "the old password is refused"
    );
    again.sign_in("alice", "a-new-password-2").await;
    assert_eq!(again.get("/history").await.status, 200);
    // The PIN's token does not depend on the password.
    assert!(token_holds(&setup.cs_url, &second).await.0);

    // The gateway leaves the configuration: after a restart its tokens are
    // refused.
    cs.kill();
    std::fs::write(&config, &plain).unwrap();
    let _cs = setup.start_cs().await;
    let (holds, v) = token_holds(&setup.cs_url, &second).await;
    assert!(!holds, "{v}");
    assert!(
        v["error_description"]
            .as_str()
            .unwrap_or("")
            .contains("gateway"),
        "{v}"
    );
}
