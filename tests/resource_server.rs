//! The reference resource server on real sockets: A2T tools, URI pack (§1),
//! fetch (§3), decision and replay (§6), result (§7), collected values (§8),
//! expiry, restart persistence, the token endpoint.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

#[path = "support/rs_kit.rs"]
mod rs_kit;

use cheq::cheq::UriPack;
use cheq::configfile::ServerConfig as _;
use cheq::resource::{agent, build_state, RsConfig, RsState};
use cheq::sign::{assemble, b64, sign_entry, Decision, Jwks, SigningKey};
use cheq::time::ManualClock;
use chrono::{Duration, Utc};
use indexmap::IndexMap;
use reqwest::StatusCode;
use rs_kit::{Countersigning, Rs, AGENT_SECRET, CS_SECRET};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;

const CS_URI: &str = "http://127.0.0.1:9/confirm";

fn cs_key() -> SigningKey {
    SigningKey::from_seed("cs-1", &[7u8; 32]).unwrap()
}

fn config(dir: &Path, port: u16) -> RsConfig {
    let jwks = Jwks::new(vec![cs_key().public_key()]).unwrap();
    let jwks_path = dir.join("cs-jwks.json");
    std::fs::write(&jwks_path, jwks.to_json().to_string()).unwrap();
    let text = format!(
        r#"
listen = "127.0.0.1:{port}"
public_url = "http://127.0.0.1:{port}"
data_dir = "{data}"
signing_key = "{key}"
cheq_ttl_secs = 900
retry_after_secs = 1

[confirmation_server]
uri = "{CS_URI}"
jwks_file = "{jwks}"

[[clients]]
client_id = "cs"
client_secret = "{CS_SECRET}"
role = "cs"

[[clients]]
client_id = "agent"
client_secret = "{AGENT_SECRET}"
role = "agent"
subject = "alice"

[policy]
book_flight_threshold_usd = 100
"#,
        data = dir.join("data").display(),
        key = dir.join("data/rs-key.jwk").display(),
        jwks = jwks_path.display(),
    );
    RsConfig::from_toml(&text).unwrap()
}

async fn start_on(dir: &Path, listener: std::net::TcpListener, clock: Arc<ManualClock>) -> Rs {
    let port = listener.local_addr().unwrap().port();
    Rs::start(listener, &config(dir, port), clock).await
}

async fn start(dir: &Path) -> Rs {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    start_on(dir, listener, Arc::new(ManualClock::new(Utc::now()))).await
}

/// The exchanges of this file's CS: client `cs` by its secret, confirmation
/// URI [`CS_URI`].
impl Rs {
    /// Fetches a resource URI with a fresh token of the `cs` client.
    async fn cs_fetch(&self, resource_uri: &str) -> reqwest::Response {
        let token = self.token("cs", CS_SECRET).await;
        self.fetch(&token, resource_uri).await
    }

    /// Fetches the CHEQ of `pack`, verifies it and countersigns it with `key`.
    async fn sign_with(
        &self,
        pack: &UriPack,
        key: &SigningKey,
        decision: Decision,
        collected: Option<IndexMap<String, String>>,
        iat_offset: i64,
    ) -> String {
        let token = self.token("cs", CS_SECRET).await;
        self.countersigned_with(
            pack,
            Countersigning {
                token: &token,
                confirmation_uri: CS_URI,
                key,
                decision,
                collected,
                iat_offset,
            },
        )
        .await
    }

    async fn sign(&self, pack: &UriPack, decision: Decision) -> String {
        self.sign_with(pack, &cs_key(), decision, None, 0).await
    }

    /// Posts a decision with a fresh token of the `cs` client.
    async fn post(&self, resource_uri: &str, query: &str, body: &str) -> (StatusCode, Value) {
        let token = self.token("cs", CS_SECRET).await;
        self.post_with(&token, resource_uri, query, body).await
    }
}

/// The agent library books a first-class flight at `price` at the RS of
/// `base`, as client `agent` with `secret`.
async fn agent_books(
    base: &str,
    secret: &str,
    price: i64,
) -> Result<agent::InvokeOutcome, agent::AgentError> {
    let params = json!({"flight_number": "UA23", "flight_date": "2026-12-01",
                        "cabin_class": "FIRST", "price_usd": price});
    agent::invoke(
        base,
        "agent",
        secret,
        "book_flight",
        params.as_object().unwrap(),
    )
    .await
}

fn id_bits(uri: &str) -> usize {
    let id = uri.rsplit('/').next().unwrap();
    b64::decode(id).unwrap().len() * 8
}

#[actix_web::test]
async fn book_flight_confirmed_once_and_replays_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;

    // Cheap: runs at once.
    let res = rs.flight(50).await;
    assert_eq!(res.status(), 200);
    let out: Value = res.json().await.unwrap();
    assert_eq!(out["output_parameters"][1]["value"], "CONFIRMED");
    assert_eq!(rs.state.executions(), 1);

    // Expensive: needs confirmation.
    let pack = rs.pending_flight().await;
    assert_eq!(pack.confirmation_uri, CS_URI);
    assert!(pack
        .resource_uri
        .starts_with(&format!("{}/cheq/confirmations/", rs.base)));
    assert!(pack
        .result_uri
        .starts_with(&format!("{}/cheq/results/", rs.base)));
    assert!(id_bits(&pack.resource_uri) >= 128);
    assert!(id_bits(&pack.result_uri) >= 128);
    assert_eq!(rs.state.executions(), 1);

    let (status, body, retry) = rs.result(&pack.result_uri).await;
    assert_eq!((status.as_u16(), body), (202, json!({"status": "pending"})));
    assert_eq!(retry.as_deref(), Some("1"));

    let accept = rs.sign(&pack, Decision::Accept).await;
    // Other documents for the same nonce, made while it is still pending.
    let later = rs
        .sign_with(&pack, &cs_key(), Decision::Accept, None, 1)
        .await;
    assert_ne!(later, accept);
    let reject = rs.sign(&pack, Decision::Reject).await;
    let (status, body) = rs.post(&pack.resource_uri, "accept", &accept).await;
    assert_eq!(
        (status.as_u16(), body),
        (200, json!({"status": "accepted"}))
    );
    assert_eq!(rs.state.executions(), 2);

    let (status, body, _) = rs.result(&pack.result_uri).await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "accepted");
    assert_eq!(body["result"]["output_parameters"][1]["value"], "CONFIRMED");
    assert_eq!(body["result"]["output_parameters"][5]["value"], 500);

    // Byte-identical re-delivery: same answer, not run again.
    let (status, body) = rs.post(&pack.resource_uri, "accept", &accept).await;
    assert_eq!(
        (status.as_u16(), body),
        (200, json!({"status": "accepted"}))
    );
    assert_eq!(rs.state.executions(), 2);
    // … but not under the other query.
    let (status, body) = rs.post(&pack.resource_uri, "reject", &accept).await;
    assert_eq!(
        (status.as_u16(), body["error"].clone()),
        (400, json!("invalid_cheq"))
    );

    // A different countersignature for the same nonce: replayed.
    let (status, body) = rs.post(&pack.resource_uri, "accept", &later).await;
    assert_eq!(status, 409);
    assert_eq!(body["error"], "replayed");
    assert!(body["error_description"].is_string());
    let (status, body) = rs.post(&pack.resource_uri, "reject", &reject).await;
    assert_eq!(
        (status.as_u16(), body["error"].clone()),
        (409, json!("replayed"))
    );
    assert_eq!(rs.state.executions(), 2);

    // Decided: GET is 410.
    let res = rs.cs_fetch(&pack.resource_uri).await;
    assert_eq!(res.status(), 410);

    rs.stop().await;
}

#[actix_web::test]
async fn reject_and_invalid_documents() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let pack = rs.pending_flight().await;
    let accept = rs.sign(&pack, Decision::Accept).await;

    // Decision mismatch: accept-signed posted with ?reject.
    let (status, body) = rs.post(&pack.resource_uri, "reject", &accept).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"], "invalid_cheq");
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("rule 3"),
        "{body}"
    );

    // Tampered payload: the resource signature no longer verifies.
    let mut doc: Value = serde_json::from_str(&accept).unwrap();
    let payload = b64::decode(doc["payload"].as_str().unwrap()).unwrap();
    let tampered = String::from_utf8(payload)
        .unwrap()
        .replace("\"500\"", "\"5\"");
    doc["payload"] = b64::encode(tampered.as_bytes()).into();
    let (status, body) = rs
        .post(&pack.resource_uri, "accept", &doc.to_string())
        .await;
    assert_eq!(
        (status.as_u16(), body["error"].clone()),
        (400, json!("invalid_cheq"))
    );
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("rule 1"),
        "{body}"
    );

    // Tampered countersignature.
    let mut doc: Value = serde_json::from_str(&accept).unwrap();
    let sig = doc["signatures"][1]["signature"]
        .as_str()
        .unwrap()
        .to_owned();
    let flipped = format!(
        "{}{}",
        if sig.starts_with('A') { "B" } else { "A" },
        &sig[1..]
    );
    doc["signatures"][1]["signature"] = flipped.into();
    let (status, body) = rs
        .post(&pack.resource_uri, "accept", &doc.to_string())
        .await;
    assert_eq!(
        (status.as_u16(), body["error"].clone()),
        (400, json!("invalid_cheq"))
    );

    // Countersigned by a CS key the RS does not trust.
    let evil = SigningKey::from_seed("cs-evil", &[9u8; 32]).unwrap();
    let untrusted = rs.sign_with(&pack, &evil, Decision::Accept, None, 0).await;
    let (status, body) = rs.post(&pack.resource_uri, "accept", &untrusted).await;
    assert_eq!(
        (status.as_u16(), body["error"].clone()),
        (400, json!("invalid_cheq"))
    );
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("rule 2"),
        "{body}"
    );
    // Same kid, other key.
    let impostor = SigningKey::from_seed("cs-1", &[9u8; 32]).unwrap();
    let forged = rs
        .sign_with(&pack, &impostor, Decision::Accept, None, 0)
        .await;
    let (status, _) = rs.post(&pack.resource_uri, "accept", &forged).await;
    assert_eq!(status, 400);

    // Neither or both of ?accept / ?reject.
    let (status, body) = rs.post(&pack.resource_uri, "", &accept).await;
    assert_eq!(
        (status.as_u16(), body["error"].clone()),
        (400, json!("invalid_request"))
    );
    let (status, _) = rs.post(&pack.resource_uri, "accept&reject", &accept).await;
    assert_eq!(status, 400);
    // Garbage.
    let (status, body) = rs.post(&pack.resource_uri, "accept", "{not json").await;
    assert_eq!(
        (status.as_u16(), body["error"].clone()),
        (400, json!("invalid_cheq"))
    );

    assert_eq!(rs.state.executions(), 0);
    // Still pending after all that.
    assert_eq!(rs.result(&pack.result_uri).await.0, 202);

    // Now a real rejection.
    let reject = rs.sign(&pack, Decision::Reject).await;
    let (status, body) = rs.post(&pack.resource_uri, "reject", &reject).await;
    assert_eq!(
        (status.as_u16(), body),
        (200, json!({"status": "rejected"}))
    );
    let (status, body, _) = rs.result(&pack.result_uri).await;
    assert_eq!(
        (status.as_u16(), body),
        (200, json!({"status": "rejected"}))
    );
    // The earlier accept, now for a decided nonce, is a replay.
    let (status, _) = rs.post(&pack.resource_uri, "accept", &accept).await;
    assert_eq!(status, 409);
    assert_eq!(rs.state.executions(), 0);
    rs.stop().await;
}

#[actix_web::test]
async fn tokens_unknown_resources_and_roles() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let pack = rs.pending_flight().await;
    let accept = rs.sign(&pack, Decision::Accept).await;

    // No token, bad token: 401 on GET and POST.
    let res = rs.http.get(&pack.resource_uri).send().await.unwrap();
    assert_eq!(res.status(), 401);
    assert!(res.headers().contains_key("www-authenticate"));
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "invalid_token");
    let res = rs
        .http
        .get(&pack.resource_uri)
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let res = rs
        .http
        .post(format!("{}?accept", pack.resource_uri))
        .body(accept.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let res = rs
        .http
        .post(format!("{}?accept", pack.resource_uri))
        .bearer_auth("nope")
        .body(accept.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    // An agent token cannot read confirmations.
    let agent = rs.token("agent", AGENT_SECRET).await;
    let res = rs
        .http
        .get(&pack.resource_uri)
        .bearer_auth(&agent)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    // Tokens expire.
    let cs = rs.token("cs", CS_SECRET).await;
    rs.clock.advance(Duration::seconds(3601));
    let res = rs
        .http
        .get(format!("{}/tools", rs.base))
        .bearer_auth(&agent)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let res = rs
        .http
        .get(&pack.resource_uri)
        .bearer_auth(&cs)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);

    // Unknown resource and result.
    let unknown = format!("{}/cheq/confirmations/AAAAAAAAAAAAAAAAAAAAAA", rs.base);
    assert_eq!(rs.cs_fetch(&unknown).await.status(), 404);
    let (status, body) = rs.post(&unknown, "accept", &accept).await;
    assert_eq!(
        (status.as_u16(), body["error"].clone()),
        (404, json!("not_found"))
    );
    let res = rs
        .http
        .get(format!("{}/cheq/results/nothing", rs.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    let res = rs
        .http
        .get(format!("{}/nowhere", rs.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "not_found");
    rs.stop().await;
}

#[actix_web::test]
async fn expiry_gives_410_and_expired_result() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let pack = rs.pending_flight().await;
    let accept = rs.sign(&pack, Decision::Accept).await;

    // At `expires` the CS can no longer fetch it; decisions are still taken
    // within the 60 s skew, and the result stays pending meanwhile.
    rs.clock.advance(Duration::seconds(900));
    let res = rs.cs_fetch(&pack.resource_uri).await;
    assert_eq!(res.status(), 410);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "expired");
    assert_eq!(rs.result(&pack.result_uri).await.0, 202);

    rs.clock.advance(Duration::seconds(61));
    let (status, body) = rs.post(&pack.resource_uri, "accept", &accept).await;
    assert_eq!(
        (status.as_u16(), body["error"].clone()),
        (410, json!("expired"))
    );
    let (status, body, _) = rs.result(&pack.result_uri).await;
    assert_eq!((status.as_u16(), body), (200, json!({"status": "expired"})));
    assert_eq!(rs.state.executions(), 0);
    rs.stop().await;
}

#[actix_web::test]
async fn late_redelivery_of_a_recorded_decision_gets_the_same_answer() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let pack = rs.pending_flight().await;
    let accept = rs.sign(&pack, Decision::Accept).await;
    assert_eq!(rs.post(&pack.resource_uri, "accept", &accept).await.0, 200);
    rs.clock.advance(Duration::seconds(2000));
    let (status, body) = rs.post(&pack.resource_uri, "accept", &accept).await;
    assert_eq!(
        (status.as_u16(), body),
        (200, json!({"status": "accepted"}))
    );
    assert_eq!(rs.result(&pack.result_uri).await.1["status"], "accepted");
    assert_eq!(rs.state.executions(), 1);
    rs.stop().await;
}

#[actix_web::test]
async fn transfer_funds_collects_private_values() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let res = rs.invoke("transfer_funds", json!({"memo": "rent"})).await;
    assert_eq!(res.status(), 202);
    let pack = UriPack::parse(&res.bytes().await.unwrap()).unwrap();

    // The CHEQ asks the user for the accounts and the amount.
    let doc: Value =
        serde_json::from_slice(&rs.cs_fetch(&pack.resource_uri).await.bytes().await.unwrap())
            .unwrap();
    let payload: Value =
        serde_json::from_slice(&b64::decode(doc["payload"].as_str().unwrap()).unwrap()).unwrap();
    let params = payload["inputs"]["parameters"].as_array().unwrap();
    let names: Vec<&str> = params
        .iter()
        .map(|p| p["parameter name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["memo", "from account", "to account", "amount"]);
    assert_eq!(params[1]["parameter input"]["type"], "digits");
    assert_eq!(params[1]["parameter input"]["sensitive"], true);
    assert_eq!(params[3]["parameter input"]["type"], "amount");
    assert_eq!(payload["subject"], "alice");

    // Accepting without the required values is refused. Our own countersigner
    // will not produce such a document, so turn a signed rejection into an
    // acceptance by re-signing its header with the CS key.
    let reject: Value = serde_json::from_str(&rs.sign(&pack, Decision::Reject).await).unwrap();
    let payload_b64 = reject["payload"].as_str().unwrap();
    let sigs = reject["signatures"].as_array().unwrap();
    let mut header: Value =
        serde_json::from_slice(&b64::decode(sigs[1]["protected"].as_str().unwrap()).unwrap())
            .unwrap();
    header["cheq_decision"] = json!("accept");
    let (ph, sig) = sign_entry(&cs_key(), &header.to_string(), payload_b64);
    let rs_entry = (
        sigs[0]["protected"].as_str().unwrap(),
        sigs[0]["signature"].as_str().unwrap(),
    );
    let empty = assemble(payload_b64, &[rs_entry, (&ph, &sig)]);
    let (status, body) = rs.post(&pack.resource_uri, "accept", &empty).await;
    assert_eq!(
        (status.as_u16(), body["error"].clone()),
        (400, json!("invalid_cheq"))
    );
    // Refused by rule 3 of the verifier, naming the first missing input.
    let why = body["error_description"].as_str().unwrap();
    assert!(
        why.contains("rule 3") && why.contains("\"from account\""),
        "{why}"
    );
    assert_eq!(rs.state.executions(), 0);

    let collected: IndexMap<String, String> = [
        ("from account", "12345678"),
        ("to account", "87654321"),
        ("amount", "250.00"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let accept = rs
        .sign_with(&pack, &cs_key(), Decision::Accept, Some(collected), 0)
        .await;
    let (status, body) = rs.post(&pack.resource_uri, "accept", &accept).await;
    assert_eq!(
        (status.as_u16(), body),
        (200, json!({"status": "accepted"}))
    );
    let (status, body, _) = rs.result(&pack.result_uri).await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["output_parameters"][0]["value"], "DONE");
    let text = body.to_string();
    for secret in ["12345678", "87654321", "250"] {
        assert!(!text.contains(secret), "result leaks {secret}: {text}");
    }
    assert_eq!(rs.state.executions(), 1);
    rs.stop().await;
}

#[actix_web::test]
async fn tool_api_enumerates_and_validates() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let token = rs.token("agent", AGENT_SECRET).await;
    let res = rs
        .http
        .get(format!("{}/tools", rs.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let list: Value = res.json().await.unwrap();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    assert_eq!(items[0]["name"], "book_flight");
    let id = items[0]["toolId"].as_str().unwrap();
    let res = rs
        .http
        .get(format!("{}/tools/{id}", rs.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    let one: Value = res.json().await.unwrap();
    assert_eq!(one["input_parameters"][2]["type"], "enum");
    assert_eq!(
        one["input_parameters"][2]["allowed-values"][3]["name"],
        "FIRST"
    );

    // Invoking by toolId works as by name.
    let res = rs
        .http
        .post(format!("{}/tools/{id}:invoke", rs.base))
        .bearer_auth(&token)
        .json(&json!({"input_parameters": [
            {"name": "flight_number", "value": "UA23"}, {"name": "flight_date", "value": "2026-12-01"},
            {"name": "cabin_class", "value": "ECONOMY"}, {"name": "price_usd", "value": 100}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    let good = json!({"flight_number": "UA23", "flight_date": "2026-12-01", "cabin_class": "BUSINESS", "price_usd": 50});
    let mut cases = Vec::new();
    for (key, value) in [
        ("cabin_class", json!("COACH")),
        ("flight_date", json!("tomorrow")),
        ("price_usd", json!("50")),
        ("price_usd", json!(-1)),
        ("flight_number", json!("ua 23")),
        ("seat", json!("1A")),
    ] {
        let mut inputs = good.clone();
        inputs[key] = value;
        cases.push(inputs);
    }
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("price_usd");
    cases.push(missing);
    for inputs in cases {
        let res = rs.invoke("book_flight", inputs.clone()).await;
        assert_eq!(res.status(), 400, "{inputs}");
        let body: Value = res.json().await.unwrap();
        assert!(
            body["error"].is_string() && body["error_description"].is_string(),
            "{body}"
        );
    }
    let res = rs
        .http
        .post(format!("{}/tools/book_flight:invoke", rs.base))
        .bearer_auth(&token)
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let res = rs.invoke("launch_rockets", json!({})).await;
    assert_eq!(res.status(), 404);
    let res = rs
        .http
        .post(format!("{}/tools/book_flight:invoke", rs.base))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(rs.state.executions(), 1);

    let health = rs
        .http
        .get(format!("{}/healthz", rs.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    rs.stop().await;
}

#[actix_web::test]
async fn token_endpoint_errors_and_body_auth() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let url = format!("{}/oauth/token", rs.base);
    let res = rs
        .http
        .post(&url)
        .basic_auth("cs", Some("wrong-secret"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    assert!(res.headers().contains_key("www-authenticate"));
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "invalid_client");
    let res = rs
        .http
        .post(&url)
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "nobody"),
            ("client_secret", "x"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let res = rs
        .http
        .post(&url)
        .basic_auth("cs", Some(CS_SECRET))
        .form(&[("grant_type", "password")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "unsupported_grant_type");
    let res = rs
        .http
        .post(&url)
        .basic_auth("cs", Some(CS_SECRET))
        .form(&[("grant_type", "client_credentials"), ("scope", "admin")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.json::<Value>().await.unwrap()["error"], "invalid_scope");
    let res = rs
        .http
        .post(&url)
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "cs"),
            ("client_secret", CS_SECRET),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["cache-control"], "no-store");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["token_type"], "Bearer");

    // The oauth2 crate, as the CS uses it.
    use oauth2::basic::BasicClient;
    use oauth2::{ClientId, ClientSecret, Scope, TokenResponse, TokenUrl};
    let client = BasicClient::new(ClientId::new("cs".into()))
        .set_client_secret(ClientSecret::new(CS_SECRET.into()))
        .set_token_uri(TokenUrl::new(url.clone()).unwrap());
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let token = client
        .exchange_client_credentials()
        .add_scope(Scope::new("cheq".into()))
        .request_async(&http)
        .await
        .unwrap();
    let pack = rs.pending_flight().await;
    let res = rs
        .http
        .get(&pack.resource_uri)
        .bearer_auth(token.access_token().secret())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    rs.stop().await;
}

#[actix_web::test]
async fn pending_confirmations_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let pack = rs.pending_flight().await;
    let first = rs.cs_fetch(&pack.resource_uri).await.bytes().await.unwrap();
    let port: u16 = rs.base.rsplit(':').next().unwrap().parse().unwrap();
    let clock = rs.clock.clone();
    rs.stop().await;

    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let rs = start_on(dir.path(), listener, clock).await;
    let res = rs.cs_fetch(&pack.resource_uri).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.bytes().await.unwrap(), first, "same document, same key");
    let accept = rs.sign(&pack, Decision::Accept).await;
    let (status, _) = rs.post(&pack.resource_uri, "accept", &accept).await;
    assert_eq!(status, 200);
    assert_eq!(rs.result(&pack.result_uri).await.1["status"], "accepted");
    rs.stop().await;
}

#[actix_web::test]
async fn agent_client_invokes_and_polls() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let out = agent_books(&rs.base, AGENT_SECRET, 20).await.unwrap();
    assert!(matches!(out, agent::InvokeOutcome::Done(_)));

    let out = agent_books(&rs.base, AGENT_SECRET, 2000).await.unwrap();
    let agent::InvokeOutcome::NeedsConfirmation(pack) = out else {
        panic!("expected a URI pack")
    };
    let timeout =
        agent::poll_result(&pack.result_uri, std::time::Duration::from_millis(1500)).await;
    assert!(matches!(timeout, Err(agent::AgentError::Timeout(_))));
    let accept = rs.sign(&pack, Decision::Accept).await;
    assert_eq!(rs.post(&pack.resource_uri, "accept", &accept).await.0, 200);
    let result = agent::poll_result(&pack.result_uri, std::time::Duration::from_secs(5))
        .await
        .unwrap();
    let agent::ResultStatus::Accepted(result) = result else {
        panic!("expected accepted")
    };
    assert_eq!(result["output_parameters"][1]["value"], "CONFIRMED");

    let err = agent_books(&rs.base, "wrong-secret", 2000)
        .await
        .unwrap_err();
    assert!(
        matches!(err, agent::AgentError::Status { status: 401, .. }),
        "{err}"
    );
    rs.stop().await;
}

#[actix_web::test]
async fn concurrent_redeliveries_run_the_operation_once() {
    let dir = tempfile::tempdir().unwrap();
    let rs = Arc::new(start(dir.path()).await);
    let pack = rs.pending_flight().await;
    let accept = rs.sign(&pack, Decision::Accept).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (rs, uri, body) = (rs.clone(), pack.resource_uri.clone(), accept.clone());
        tasks.push(actix_web::rt::spawn(async move {
            rs.post(&uri, "accept", &body).await
        }));
    }
    for t in tasks {
        let (status, body) = t.await.unwrap();
        assert_eq!(
            (status.as_u16(), body),
            (200, json!({"status": "accepted"}))
        );
    }
    assert_eq!(rs.state.executions(), 1);
    rs.handle.stop(true).await;
}

#[actix_web::test]
async fn in_process_with_init_service() {
    use actix_web::{test, App};
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), 8089);
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let state = build_state(&config, clock).await.unwrap();
    let app =
        test::init_service(App::new().configure(|c| cheq::resource::configure(c, state.clone())))
            .await;
    let res = test::call_service(&app, test::TestRequest::get().uri("/healthz").to_request()).await;
    assert_eq!(res.status(), 200);
    let jwks: Value = test::call_and_read_body_json(
        &app,
        test::TestRequest::get()
            .uri("/.well-known/jwks.json")
            .to_request(),
    )
    .await;
    assert_eq!(jwks["keys"][0]["kty"], "OKP");
    let token: Value = test::call_and_read_body_json(
        &app,
        test::TestRequest::post()
            .uri("/oauth/token")
            .insert_header(("content-type", "application/x-www-form-urlencoded"))
            .set_payload(format!(
                "grant_type=client_credentials&client_id=agent&client_secret={AGENT_SECRET}"
            ))
            .to_request(),
    )
    .await;
    let bearer = format!("Bearer {}", token["access_token"].as_str().unwrap());
    let res = test::call_service(
        &app,
        test::TestRequest::post()
            .uri("/tools/transfer_funds:invoke")
            .insert_header(("authorization", bearer.as_str()))
            .set_json(json!({"name": "transfer_funds", "input_parameters": []}))
            .to_request(),
    )
    .await;
    assert_eq!(res.status(), 202);
    let location = res
        .headers()
        .get("location")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(location.starts_with("http://127.0.0.1:8089/cheq/results/"));
}

#[actix_web::test]
async fn cs_keys_from_jwks_uri_and_clear_errors() {
    // Serve a JWKS (here: another RS's, standing in for the CS) and point jwks_uri at it.
    let dir = tempfile::tempdir().unwrap();
    let other = start(dir.path()).await;
    let dir2 = tempfile::tempdir().unwrap();
    let mut cfg = config(dir2.path(), 8090);
    cfg.confirmation_server.as_mut().unwrap().jwks_file = None;
    cfg.confirmation_server.as_mut().unwrap().jwks_uri =
        Some(format!("{}/.well-known/jwks.json", other.base));
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let published = reqwest::get(format!("{}/.well-known/jwks.json", other.base))
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let kid = published["keys"][0]["kid"].as_str().unwrap().to_owned();
    let knows_kid = |state: &RsState| {
        state
            .cheq
            .confirmation_server()
            .source()
            .key(&kid)
            .is_some()
    };
    let state = build_state(&cfg, clock.clone()).await.unwrap();
    // Fetched on first use (a peer that starts later is no error).
    state.cheq.confirmation_server().ensure_fresh().await;
    assert!(knows_kid(&state));
    drop(state);
    // A jwks_uri that answers 404: the server starts, trusts nothing from
    // it, and asks for a later try rather than refusing for good.
    cfg.confirmation_server.as_mut().unwrap().jwks_uri =
        Some(format!("{}/nowhere.json", other.base));
    let state = build_state(&cfg, clock.clone()).await.unwrap();
    state.cheq.confirmation_server().ensure_fresh().await;
    assert!(!knows_kid(&state));
    assert!(matches!(
        state.cheq.confirmation_server().refetch_for(&kid).await,
        cheq::peerkeys::Refetch::Later { retry_after } if (1..=5).contains(&retry_after)
    ));
    drop(state);
    // Not https, not loopback: refused at start.
    cfg.confirmation_server.as_mut().unwrap().jwks_uri = Some("http://cs.example/jwks.json".into());
    assert!(build_state(&cfg, clock.clone()).await.is_err());
    cfg.confirmation_server.as_mut().unwrap().jwks_uri = None;
    let err = build_state(&cfg, clock).await.unwrap_err();
    assert!(err.to_string().contains("jwks_file"), "{err}");
    other.stop().await;
}

#[actix_web::test]
async fn every_error_is_json() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let pack = rs.pending_flight().await;
    let token = rs.token("cs", CS_SECRET).await;
    let big = "x".repeat(300 * 1024);
    let res = rs
        .http
        .post(format!("{}?accept", pack.resource_uri))
        .bearer_auth(&token)
        .body(big)
        .send()
        .await
        .unwrap();
    let status = res.status();
    let body: Value = res.json().await.unwrap();
    assert_eq!(status, 413, "{body}");
    assert!(body["error"].is_string() && body["error_description"].is_string());
    let res = rs
        .http
        .get(format!("{}/oauth/token", rs.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 405);
    let body: Value = res.json().await.unwrap();
    assert!(body["error"].is_string());
    let res = rs
        .http
        .delete(&pack.resource_uri)
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 405);
    let res = rs
        .http
        .post(format!("{}/oauth/token", rs.base))
        .body("grant_type=client_credentials&grant_type=x")
        .send()
        .await
        .unwrap();
    assert!(res.status().is_client_error());
    let _: Value = res.json().await.unwrap();
    rs.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_from_a_toml_file_under_plain_tokio() {
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cfg = config(dir.path(), port);
    // Round-trip through a file, as `cheq resource-server --config rs.toml` does.
    let toml_path = dir.path().join("rs.toml");
    std::fs::write(
        &toml_path,
        format!(
            "listen = \"{}\"\npublic_url = \"{}\"\ndata_dir = \"{}\"\nsigning_key = \"{}\"\n\
             [confirmation_server]\nuri = \"{CS_URI}\"\njwks_file = \"{}\"\n\
             [[clients]]\nclient_id = \"agent\"\nclient_secret = \"{AGENT_SECRET}\"\nrole = \"agent\"\nsubject = \"alice\"\n",
            cfg.listen,
            cfg.public_url,
            cfg.data_dir.display(),
            cfg.signing_key.display(),
            cfg.confirmation_server.as_ref().unwrap().jwks_file.as_ref().unwrap().display(),
        ),
    )
    .unwrap();
    let loaded = RsConfig::load(&toml_path).unwrap();
    let task = tokio::spawn(cheq::resource::run(loaded));
    let base = format!("http://127.0.0.1:{port}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Ok(res) = reqwest::get(format!("{base}/healthz")).await {
            if res.status() == 200 {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not come up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let out = agent_books(&base, AGENT_SECRET, 300).await.unwrap();
    assert!(matches!(out, agent::InvokeOutcome::NeedsConfirmation(_)));
    task.abort();

    let err = RsConfig::load(&dir.path().join("missing.toml")).unwrap_err();
    assert!(err.to_string().contains("missing.toml"), "{err}");
}
