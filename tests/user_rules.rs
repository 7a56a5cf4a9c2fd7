//! Each user's rules and CS at the reference RS (PROTOCOL.md §17), the RS
//! in this process on a real socket, its peers played over HTTP: its
//! default CS (named in full, a `cs` client with a secret) and other CSes a
//! user may move to (discovery documents, key sets and registration
//! endpoints served by this test).
//!
//! Every refusal of a change, status by status, before anything is minted;
//! a change applied only on its CS's accept, and only against the settings
//! it was asked for; the CHEQ a passkey rule makes; only the CS a CHEQ
//! names reads and decides it; the settings page.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

#[path = "support/rs_kit.rs"]
mod rs_kit;

use actix_web::{web, App, HttpResponse, HttpServer};
use cheq::cheq::UriPack;
use cheq::configfile::ServerConfig as _;
use cheq::resource::RsConfig;
use cheq::sign::assertion::{client_assertion, AssertionClaims, ASSERTION_TYPE};
use cheq::sign::{b64, Decision, Jwks, SigningKey};
use cheq::time::{Clock, ManualClock};
use chrono::Utc;
use reqwest::StatusCode;
use rs_kit::{Countersigning, Rs, CS_SECRET};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;

const CS_URI: &str = "http://127.0.0.1:9/confirm";

fn cs_key() -> SigningKey {
    SigningKey::from_seed("cs-1", &[7u8; 32]).unwrap()
}

fn other_key() -> SigningKey {
    SigningKey::from_seed("other-1", &[9u8; 32]).unwrap()
}

fn config(dir: &Path, port: u16) -> RsConfig {
    config_with(dir, port, port, "", FLOOR)
}

/// The operator's floor of `book_flight` in [`config`].
const FLOOR: &str =
    "[[policy.rules]]\ntool = \"book_flight\"\nparam = \"price_usd\"\nabove = 100\n";

/// The RS's file: reached at `public_port`, listening on `port`, with the
/// top-level lines `top`.
fn config_with(dir: &Path, public_port: u16, port: u16, top: &str, policy: &str) -> RsConfig {
    let jwks = Jwks::new(vec![cs_key().public_key()]).unwrap();
    let jwks_path = dir.join("cs-jwks.json");
    std::fs::write(&jwks_path, jwks.to_json().to_string()).unwrap();
    let text = format!(
        r#"
{top}
listen = "127.0.0.1:{port}"
public_url = "http://127.0.0.1:{public_port}"
data_dir = "{data}"
signing_key = "{key}"
retry_after_secs = 1
allow_addresses = ["127.0.0.0/8"]

[confirmation_server]
uri = "{CS_URI}"
jwks_file = "{jwks}"

[[clients]]
client_id = "cs"
client_secret = "{CS_SECRET}"
role = "cs"

[[clients]]
client_id = "agent"
client_secret = "{agent}"
role = "agent"
subject = "alice"

{policy}
"#,
        data = dir.join("data").display(),
        key = dir.join("data/rs-key.jwk").display(),
        jwks = jwks_path.display(),
        agent = rs_kit::AGENT_SECRET,
    );
    RsConfig::from_toml(&text).unwrap()
}

async fn start(dir: &Path) -> Rs {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    Rs::start(
        listener,
        &config(dir, port),
        Arc::new(ManualClock::new(Utc::now())),
    )
    .await
}

/// A CS a user may move to, served by this test.
struct OtherCs {
    base: String,
}

/// Serves a CS's discovery document (with `assurances` and a registration
/// endpoint that answers `registration`) and its key set ([`other_key`]).
fn other_cs(assurances: &[&str], registration: u16) -> OtherCs {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let document = json!({
        "issuer": base,
        "name": "Other Host",
        "confirmation_uri": format!("{base}/confirm"),
        "jwks_uri": format!("{base}/jwks.json"),
        "registration_endpoint": format!("{base}/register"),
        "assurances_supported": assurances,
        "versions": ["1.0"],
    })
    .to_string();
    let jwks = Jwks::new(vec![other_key().public_key()])
        .unwrap()
        .to_json()
        .to_string();
    let server = HttpServer::new(move || {
        let (document, jwks) = (document.clone(), jwks.clone());
        App::new()
            .route(
                "/.well-known/cheq-configuration",
                web::get().to(move || {
                    let d = document.clone();
                    async move { HttpResponse::Ok().content_type("application/json").body(d) }
                }),
            )
            .route(
                "/jwks.json",
                web::get().to(move || {
                    let j = jwks.clone();
                    async move { HttpResponse::Ok().content_type("application/json").body(j) }
                }),
            )
            .route(
                "/register",
                web::post().to(move || async move {
                    HttpResponse::build(
                        actix_web::http::StatusCode::from_u16(registration).unwrap(),
                    )
                    .json(json!({"status": "active"}))
                }),
            )
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    OtherCs { base }
}

impl Rs {
    async fn change(&self, tool: &str, inputs: Value) -> (StatusCode, Value) {
        let res = self.invoke(tool, inputs).await;
        let status = res.status();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    async fn rule(&self, above: Value, assurance: Option<&str>) -> (StatusCode, Value) {
        let mut inputs = json!({"tool": "book_flight", "above": above});
        if let Some(a) = assurance {
            inputs["assurance"] = json!(a);
        }
        self.change("set_confirmation_policy", inputs).await
    }

    /// Decides `pack` as the default CS (its secret, its key).
    async fn decide_default(&self, pack: &UriPack, decision: Decision) -> Value {
        let token = self.token("cs", CS_SECRET).await;
        let body = self
            .countersigned_with(
                pack,
                Countersigning {
                    token: &token,
                    confirmation_uri: CS_URI,
                    key: &cs_key(),
                    decision,
                    collected: None,
                    iat_offset: 0,
                },
            )
            .await;
        let query = match decision {
            Decision::Accept => "accept",
            Decision::Reject => "reject",
        };
        let (status, answer) = self
            .post_with(&token, &pack.resource_uri, query, &body)
            .await;
        assert_eq!(status, 200, "{answer}");
        self.result(&pack.result_uri).await.1
    }

    /// A token for the CS at `issuer` by its own key's assertion.
    async fn assertion_token(&self, key: &SigningKey, issuer: &str) -> String {
        let (status, body) = self.by_assertion(key, issuer).await;
        assert_eq!(status, 200, "{body}");
        body["access_token"].as_str().unwrap().to_owned()
    }

    /// The token endpoint's answer to an assertion of the CS at `issuer`
    /// signed with `key`.
    async fn by_assertion(&self, key: &SigningKey, issuer: &str) -> (StatusCode, Value) {
        // The token endpoint as the RS names it (its public URL), posted to
        // on the socket it listens on.
        let audience = self.state.resource_document.token_endpoint.clone();
        let jti = b64::encode(rand::random::<[u8; 16]>());
        let assertion = client_assertion(
            key,
            &AssertionClaims {
                issuer,
                audience: &audience,
                jti: &jti,
                issued_at: self.clock.now().timestamp(),
            },
        );
        let res = self
            .http
            .post(format!("{}/oauth/token", self.base))
            .form(&[
                ("grant_type", "client_credentials"),
                ("scope", "cheq"),
                ("client_assertion_type", ASSERTION_TYPE),
                ("client_assertion", &assertion),
            ])
            .send()
            .await
            .unwrap();
        let status = res.status();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    /// The payload of the CHEQ of `pack`, read by the default CS.
    async fn payload(&self, pack: &UriPack) -> Value {
        let token = self.token("cs", CS_SECRET).await;
        let res = self.fetch(&token, &pack.resource_uri).await;
        assert_eq!(res.status(), 200);
        let doc: Value = serde_json::from_slice(&res.bytes().await.unwrap()).unwrap();
        serde_json::from_slice(&b64::decode(doc["payload"].as_str().unwrap()).unwrap()).unwrap()
    }
}

fn pack_of(body: &Value) -> UriPack {
    UriPack::parse(body.to_string().as_bytes()).unwrap()
}

fn status_of(result: &Value) -> &str {
    result["result"]["output_parameters"]
        .as_array()
        .and_then(|o| o.iter().find(|p| p["name"] == "status"))
        .and_then(|p| p["value"].as_str())
        .unwrap_or("")
}

fn parameter<'a>(payload: &'a Value, name: &str) -> &'a str {
    payload["inputs"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["parameter name"] == name)
        .and_then(|p| p["parameter value"].as_str())
        .unwrap_or_else(|| panic!("no parameter {name}: {payload}"))
}

#[actix_web::test]
async fn every_refusal_of_a_rule_comes_before_anything_is_minted() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let cases: Vec<(Value, StatusCode, &str, &str)> = vec![
        (
            json!({"tool": "book_flight", "above": 500}),
            StatusCode::FORBIDDEN,
            "loosens_floor",
            "when price_usd is above 100",
        ),
        (
            json!({"tool": "no_such_tool", "above": "always"}),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "no tool",
        ),
        (
            json!({"tool": "transfer_funds", "above": 10}),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "no numeric parameter",
        ),
        (
            json!({"tool": "choose_confirmation_server", "above": "always"}),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "always confirmed",
        ),
        (
            json!({"tool": "book_flight", "above": "lots"}),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "always",
        ),
        (
            json!({"tool": "book_flight", "above": -1}),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "number from 0",
        ),
        (
            json!({"tool": "book_flight", "above": 50, "assurance": "telepathy"}),
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "assurance",
        ),
    ];
    for (inputs, status, code, says) in cases {
        let (got, body) = rs.change("set_confirmation_policy", inputs.clone()).await;
        assert_eq!(got, status, "{inputs}: {body}");
        assert_eq!(body["error"], code, "{inputs}: {body}");
        let description = body["error_description"].as_str().unwrap();
        assert!(description.contains(says), "{inputs}: {description}");
    }
    // The floor still rules: 150 needs confirmation, 60 does not.
    assert_eq!(rs.flight(150).await.status(), 202);
    assert_eq!(rs.flight(60).await.status(), 200);
    rs.stop().await;
}

#[actix_web::test]
async fn a_rule_applies_on_its_accept_only_and_only_against_the_settings_it_was_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;

    // Rejected: nothing changes.
    let (status, body) = rs.rule(json!(50), None).await;
    assert_eq!(status, 202, "{body}");
    let pack = pack_of(&body);
    let payload = rs.payload(&pack).await;
    assert_eq!(payload["operation name"], "Change when you confirm");
    assert_eq!(
        parameter(&payload, "confirm now"),
        "when price_usd is above 100 (the operator's rule)"
    );
    assert_eq!(
        parameter(&payload, "confirm after"),
        "when price_usd is above 50"
    );
    let rejected = rs.decide_default(&pack, Decision::Reject).await;
    assert_eq!(rejected["status"], "rejected");
    assert_eq!(rs.flight(60).await.status(), 200);

    // Two changes asked against the same settings: the first accepted
    // applies; the second, accepted after it, changes nothing.
    let (_, first) = rs.rule(json!(80), None).await;
    let (_, second) = rs.rule(json!(50), None).await;
    let (first, second) = (pack_of(&first), pack_of(&second));
    let applied = rs.decide_default(&first, Decision::Accept).await;
    assert_eq!(status_of(&applied), "DONE", "{applied}");
    let stale = rs.decide_default(&second, Decision::Accept).await;
    assert_eq!(stale["status"], "accepted");
    assert_eq!(status_of(&stale), "FAILED", "{stale}");
    assert_eq!(rs.flight(60).await.status(), 200, "the rule is 80, not 50");
    assert_eq!(rs.flight(90).await.status(), 202);

    // Now the rule in force is the user's: the next change says so.
    let (_, body) = rs.rule(json!("always"), Some("passkey")).await;
    let pack = pack_of(&body);
    let payload = rs.payload(&pack).await;
    assert_eq!(
        parameter(&payload, "confirm now"),
        "when price_usd is above 80"
    );
    assert_eq!(
        parameter(&payload, "confirm after"),
        "always, with a passkey"
    );
    let done = rs.decide_default(&pack, Decision::Accept).await;
    assert_eq!(status_of(&done), "DONE", "{done}");
    // A CHEQ under a passkey rule asks for one (§14); even 1 USD.
    let res = rs.flight(1).await;
    assert_eq!(res.status(), 202);
    let pack = UriPack::parse(&res.bytes().await.unwrap()).unwrap();
    assert_eq!(rs.payload(&pack).await["assurance"], "passkey");
    // Loosening the user's own rule back within the floor is a change like
    // any other; below the floor it is refused, naming it.
    let (status, body) = rs.rule(json!(100), Some("any")).await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = rs.rule(json!(101), Some("any")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("loosens_floor"))
    );
    rs.stop().await;
}

#[actix_web::test]
async fn a_move_is_checked_first_and_then_only_the_chosen_cs_reads_and_decides() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let refusing = other_cs(&["password", "passkey"], 403);
    let good = other_cs(&["password", "passkey"], 201);
    let choose = |to: &str| json!({"confirmation_server": to});

    for (to, status, code) in [
        (
            "ftp://example",
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
        ),
        (
            &format!("http://127.0.0.1:{}", rs_kit_free_port()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "confirmation_server_unreachable",
        ),
        (
            &refusing.base,
            StatusCode::UNPROCESSABLE_ENTITY,
            "confirmation_server_refused",
        ),
        ("http://127.0.0.1:9", StatusCode::CONFLICT, "already_chosen"),
    ] {
        let (got, body) = rs.change("choose_confirmation_server", choose(to)).await;
        assert_eq!(
            (got, body["error"].as_str()),
            (status, Some(code)),
            "{to}: {body}"
        );
    }

    // The move: asked at the default CS, naming the new one and its name.
    let (status, body) = rs
        .change("choose_confirmation_server", choose(&good.base))
        .await;
    assert_eq!(status, 202, "{body}");
    let pack = pack_of(&body);
    assert_eq!(pack.confirmation_uri, CS_URI);
    let payload = rs.payload(&pack).await;
    assert_eq!(parameter(&payload, "new confirmation server"), good.base);
    assert_eq!(parameter(&payload, "its name"), "Other Host");
    assert_eq!(
        parameter(&payload, "confirmation server now"),
        "http://127.0.0.1:9"
    );
    // Checked, but the move not yet confirmed: that CS is not trusted, its
    // own key gets no token.
    let (status, body) = rs.by_assertion(&other_key(), &good.base).await;
    assert_eq!(status, 401, "{body}");
    let moved = rs.decide_default(&pack, Decision::Accept).await;
    assert_eq!(status_of(&moved), "DONE", "{moved}");

    // Alice's CHEQs now name the new CS; the default CS neither reads them
    // nor decides them.
    let res = rs.flight(500).await;
    assert_eq!(res.status(), 202);
    let flight = UriPack::parse(&res.bytes().await.unwrap()).unwrap();
    assert_eq!(flight.confirmation_uri, format!("{}/confirm", good.base));
    let default_token = rs.token("cs", CS_SECRET).await;
    assert_eq!(
        rs.fetch(&default_token, &flight.resource_uri)
            .await
            .status(),
        404
    );
    let other_token = rs.assertion_token(&other_key(), &good.base).await;
    let by_default_key = rs
        .countersigned_with(
            &flight,
            Countersigning {
                token: &other_token,
                confirmation_uri: &flight.confirmation_uri,
                key: &cs_key(),
                decision: Decision::Accept,
                collected: None,
                iat_offset: 0,
            },
        )
        .await;
    let ran = rs.state.executions();
    for token in [&default_token, &other_token] {
        let (status, body) = rs
            .post_with(token, &flight.resource_uri, "accept", &by_default_key)
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::FORBIDDEN, Some("wrong_confirmation_server")),
            "{body}"
        );
    }
    assert_eq!(rs.result(&flight.result_uri).await.1["status"], "pending");
    assert_eq!(
        rs.state.executions(),
        ran,
        "nothing ran for the refused decisions"
    );
    let by_other = rs
        .countersigned_with(
            &flight,
            Countersigning {
                token: &other_token,
                confirmation_uri: &flight.confirmation_uri,
                key: &other_key(),
                decision: Decision::Accept,
                collected: None,
                iat_offset: 0,
            },
        )
        .await;
    let (status, body) = rs
        .post_with(&other_token, &flight.resource_uri, "accept", &by_other)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(rs.result(&flight.result_uri).await.1["status"], "accepted");
    rs.stop().await;
}

fn rs_kit_free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[actix_web::test]
async fn the_settings_page_shows_no_one_and_sends_the_person_to_their_cs() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = http
        .get(format!("{}/settings", rs.base))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let text = page.text().await.unwrap();
    assert!(
        text.contains("book_flight (at least: when price_usd is above 100)"),
        "{text}"
    );
    assert!(!text.contains(CS_URI), "the page names no one's CS");

    let post = |path: &str, form: Vec<(&'static str, String)>| {
        http.post(format!("{}{path}", rs.base)).form(&form).send()
    };
    // A change starts, and the browser goes on to the user's CS.
    let res = post(
        "/settings/rules",
        vec![
            ("name", "alice".into()),
            ("tool", "book_flight".into()),
            ("above", "50".into()),
            ("assurance", String::new()),
        ],
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 303);
    let location = res.headers()["location"].to_str().unwrap().to_owned();
    assert!(
        location.starts_with(&format!("{CS_URI}?resource_uri=")),
        "{location}"
    );
    // Refusals are pages that say why.
    let res = post(
        "/settings/rules",
        vec![
            ("name", "alice".into()),
            ("tool", "book_flight".into()),
            ("above", "500".into()),
        ],
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 403);
    assert!(res.text().await.unwrap().contains("above 100"));
    let res = post("/settings/server", vec![("name", "alice".into())])
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let res = post(
        "/settings/server",
        vec![
            ("name", "".into()),
            ("confirmation_server", "https://x.example".into()),
        ],
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 400);
    // At most 10 starts a minute from one address: 2 counted above (a form
    // that cannot be read, or a name left empty, fails before it counts).
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let res = post(
            "/settings/rules",
            vec![
                ("name", "bob".into()),
                ("tool", "book_flight".into()),
                ("above", "always".into()),
            ],
        )
        .await
        .unwrap();
        statuses.push(res.status().as_u16());
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    assert_eq!(*statuses.last().unwrap(), 429, "{statuses:?}");
    rs.stop().await;
}

/// Two RS instances on one PostgreSQL database: a move applied through one
/// holds on the other, which learns the new CS from the store (its CHEQs
/// name it, and that CS's own key is taken at its token endpoint).
#[actix_web::test]
async fn a_move_made_on_one_instance_holds_on_another() {
    let Some(url) = cheq::store::pg::test_database_or_skip("user_rules") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let good = other_cs(&["password", "passkey"], 201);
    let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let public = first.local_addr().unwrap().port();
    let second = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port2 = second.local_addr().unwrap().port();
    let top = format!("database_url = \"{url}\"");
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let one = Rs::start(
        first,
        &config_with(dir.path(), public, public, &top, FLOOR),
        clock.clone(),
    )
    .await;
    let two = Rs::start(
        second,
        &config_with(dir.path(), public, port2, &top, FLOOR),
        clock,
    )
    .await;

    let (status, body) = one
        .change(
            "choose_confirmation_server",
            json!({"confirmation_server": good.base}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let moved = one.decide_default(&pack_of(&body), Decision::Accept).await;
    assert_eq!(status_of(&moved), "DONE", "{moved}");

    // The second instance never saw the move: it reads it from the store.
    let res = two.flight(500).await;
    assert_eq!(res.status(), 202);
    let flight = UriPack::parse(&res.bytes().await.unwrap()).unwrap();
    assert_eq!(flight.confirmation_uri, format!("{}/confirm", good.base));
    // Its token endpoint takes that CS's key, and it serves the CHEQ.
    let token = two.assertion_token(&other_key(), &good.base).await;
    let at_two = flight
        .resource_uri
        .replace(&format!(":{public}/"), &format!(":{port2}/"));
    assert_ne!(at_two, flight.resource_uri);
    let res = two.fetch(&token, &at_two).await;
    assert_eq!(res.status(), 200);
    one.stop().await;
    two.stop().await;
}

/// At most 8 CSes are checked at once: the ninth move asked while 8 wait
/// on a CS that answers slowly is told to try again (503 `busy`).
#[actix_web::test]
async fn checks_of_other_cses_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let slow = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let server = HttpServer::new(|| {
        App::new().default_service(web::to(|| async {
            actix_web::rt::time::sleep(std::time::Duration::from_secs(3)).await;
            HttpResponse::NotFound().finish()
        }))
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    let asks = (0..(cheq::resource::hosts::MAX_CHECKS + 1)).map(|_| {
        rs.change(
            "choose_confirmation_server",
            json!({"confirmation_server": slow}),
        )
    });
    let answers = futures_util::future::join_all(asks).await;
    let busy = answers
        .iter()
        .filter(|(status, body)| *status == 503 && body["error"] == "busy")
        .count();
    let unreachable = answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::UNPROCESSABLE_ENTITY)
        .count();
    assert!(busy >= 1, "{answers:?}");
    assert_eq!(busy + unreachable, answers.len(), "{answers:?}");
    rs.stop().await;
}

/// With a passkey rule in force, a CS without passkeys cannot be chosen, and
/// every change of the user's CS or rules asks for the passkey too (a
/// password alone must not undo it).
#[actix_web::test]
async fn a_passkey_rule_guards_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path()).await;
    let no_passkeys = other_cs(&["password"], 201);
    let good = other_cs(&["password", "passkey"], 201);
    let (_, body) = rs
        .change(
            "set_confirmation_policy",
            json!({"tool": "transfer_funds", "above": "always", "assurance": "passkey"}),
        )
        .await;
    let pack = pack_of(&body);
    assert!(rs.payload(&pack).await.get("assurance").is_none());
    rs.decide_default(&pack, Decision::Accept).await;
    let (got, body) = rs
        .change(
            "choose_confirmation_server",
            json!({"confirmation_server": no_passkeys.base}),
        )
        .await;
    assert_eq!(
        (got, body["error"].as_str()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("passkeys_not_offered")
        ),
        "{body}"
    );
    for (tool, inputs) in [
        (
            "choose_confirmation_server",
            json!({"confirmation_server": good.base}),
        ),
        (
            "set_confirmation_policy",
            json!({"tool": "book_flight", "above": 10}),
        ),
        (
            "set_confirmation_policy",
            json!({"tool": "transfer_funds", "above": "always", "assurance": "any"}),
        ),
    ] {
        let (status, body) = rs.change(tool, inputs).await;
        assert_eq!(status, 202, "{body}");
        assert_eq!(
            rs.payload(&pack_of(&body)).await["assurance"],
            "passkey",
            "{tool}"
        );
    }
    rs.stop().await;
}

/// A user's stored rule that the operator's floors no longer allow gives
/// way to the floor.
#[actix_web::test]
async fn a_raised_floor_overrides_a_looser_stored_rule() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let rs = Rs::start(listener, &config(dir.path(), port), clock.clone()).await;
    let (_, body) = rs.rule(json!(80), None).await;
    rs.decide_default(&pack_of(&body), Decision::Accept).await;
    assert_eq!(rs.flight(90).await.status(), 202);
    assert_eq!(rs.flight(70).await.status(), 200);
    rs.stop().await;
    // The operator raises the floor to always.
    let listener = std::net::TcpListener::bind(format!("127.0.0.1:{port}")).unwrap();
    let always = "[[policy.rules]]\ntool = \"book_flight\"\n";
    let rs = Rs::start(
        listener,
        &config_with(dir.path(), port, port, "", always),
        clock,
    )
    .await;
    assert_eq!(rs.flight(70).await.status(), 202, "the floor rules now");
    rs.stop().await;
}
