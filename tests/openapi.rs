//! The OpenAPI 3.1 description of the raw API (PROTOCOL.md §10), against the
//! code and a running CS on real loopback sockets:
//!
//! (a) the description the CS serves (`GET /api/v1/openapi.json`, no
//!     authentication) is byte for byte `docs/openapi.json`; run with
//!     `CHEQ_BLESS=1` to rewrite the file after changing the API;
//! (b) the routes and the description agree: the routes the code registers
//!     ([`cheq::confirm::api::ROUTES`]) are the operations described, every
//!     described operation answers at the server with something other than
//!     the JSON 404 or 405 of an unknown route, every other method of a
//!     described path is a JSON 405 naming the described methods in `Allow`,
//!     and no `/api/v1` path is written anywhere in `src/` that the
//!     description lacks;
//! (c) the answers of a real flow (token, view, decision, and the errors of
//!     each route) validate against the schema described for their route
//!     and status (the `jsonschema` crate, JSON Schema 2020-12 as OpenAPI 3.1
//!     uses it), and every status met is described for its route.
//!
//! The harness is in `tests/common/mod.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use cheq::confirm::api::doc::{described_operations, openapi_json};
use common::*;
use serde_json::{json, Value};
use std::path::Path;

const GW: &str = "voice-gw";
const GW_SECRET: &str = "voice-gateway-secret-0123";
const ALICE_PIN: &str = "432109";
const BOB_PIN: &str = "876543";

async fn start() -> Env {
    let env = Env::start(Options {
        gateways: vec![Gateway::new(GW, GW_SECRET)],
        ..Options::default()
    })
    .await;
    env.set_pin("alice", ALICE_PIN);
    env.add_user("bob", BOB_PW);
    env.set_pin("bob", BOB_PIN);
    env
}

fn checked_in() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json")
}

async fn served(env: &Env) -> (u16, Option<String>, String) {
    let res = http_client()
        .get(format!("{}/api/v1/openapi.json", env.cs_origin))
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let ct = res
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, ct, res.text().await.unwrap())
}

// ---------------------------------------------------------------------------
// (a) The served description is the checked-in one
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn the_served_description_is_docs_openapi_json() {
    if std::env::var("CHEQ_BLESS").as_deref() == Ok("1") {
        std::fs::write(checked_in(), openapi_json()).unwrap();
    }
    let env = start().await;
    let (status, content_type, text) = served(&env).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(content_type.as_deref(), Some("application/json"));
    let file = std::fs::read_to_string(checked_in()).unwrap_or_default();
    assert!(
        text == file,
        "docs/openapi.json is not what the CS serves: the API changed and the \
         checked-in description did not. Run `CHEQ_BLESS=1 cargo test --test openapi` \
         and commit docs/openapi.json."
    );
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["gateway"]["scheme"], "basic", "{schemes}");
    assert_eq!(schemes["user_token"]["scheme"], "bearer", "{schemes}");
    let token = &doc["paths"]["/api/v1/token"]["post"];
    assert_eq!(token["security"], json!([{"gateway": []}]));
    assert!(token["requestBody"]["content"]["application/x-www-form-urlencoded"].is_object());
    let create = &doc["paths"]["/api/v1/confirmations"]["post"];
    assert_eq!(create["security"], json!([{"user_token": []}]));
    // Every error status of the §10 list is described somewhere, each with
    // the error schema.
    let mut statuses = std::collections::BTreeSet::new();
    for item in doc["paths"].as_object().unwrap().values() {
        for op in item.as_object().unwrap().values() {
            for (status, r) in op["responses"].as_object().unwrap() {
                if status.starts_with('4') || status.starts_with('5') {
                    assert_eq!(
                        r["content"]["application/json"]["schema"]["$ref"],
                        "#/components/schemas/ErrorBody",
                        "{status}: {r}"
                    );
                    statuses.insert(status.clone());
                }
            }
        }
    }
    for s in [
        "400", "401", "403", "404", "409", "410", "413", "415", "422", "429", "503",
    ] {
        assert!(statuses.contains(s), "{s} is never described: {statuses:?}");
    }
    // The wire names, spaces and all.
    let view = &doc["components"]["schemas"]["OpenView"]["properties"];
    assert!(view["operation name"].is_object() && view["resource origin"].is_object());
    env.stop().await;
}

// ---------------------------------------------------------------------------
// (b) Routes and description agree
// ---------------------------------------------------------------------------

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// The JSON 404 of a path no route knows.
fn is_unknown_route(status: u16, body: &Value) -> bool {
    status == 404 && body["error"] == "not_found" && body["error_description"] == "no such resource"
}

#[actix_web::test]
async fn routes_and_description_agree() {
    // The code's one table of routes is the description's list of operations.
    let mut registered: Vec<(String, String)> = cheq::confirm::api::ROUTES
        .iter()
        .map(|r| (r.method.as_str().to_owned(), r.path.to_owned()))
        .collect();
    let mut described = described_operations();
    registered.sort();
    described.sort();
    assert_eq!(
        registered, described,
        "registered routes vs described operations"
    );

    let env = start().await;
    let http = http_client();
    // The probe can tell an unknown route from a known one.
    let res = http
        .get(format!("{}/api/v1/no-such-route", env.cs_origin))
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    assert!(is_unknown_route(status, &res.json().await.unwrap()));

    let mut paths: Vec<&str> = described.iter().map(|(_, p)| p.as_str()).collect();
    paths.dedup();
    for path in paths {
        let url = format!("{}{}", env.cs_origin, path.replace("{id}", "some-id"));
        let allowed: Vec<&str> = described
            .iter()
            .filter(|(_, p)| p == path)
            .map(|(m, _)| m.as_str())
            .collect();
        for method in METHODS {
            let res = http
                .request(method.parse().unwrap(), &url)
                .send()
                .await
                .unwrap();
            let status = res.status().as_u16();
            let allow = res
                .headers()
                .get("allow")
                .map(|v| v.to_str().unwrap().to_owned());
            let ct = res
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_owned());
            let raw = res.text().await.unwrap();
            let body: Value = serde_json::from_str(&raw)
                .unwrap_or_else(|_| panic!("{method} {path}: not JSON: {status} {raw}"));
            assert_eq!(ct.as_deref(), Some("application/json"), "{method} {path}");
            if allowed.contains(&method) {
                assert!(
                    !is_unknown_route(status, &body) && status != 405,
                    "{method} {path} is described but the server does not route it: {status} {raw}"
                );
            } else {
                assert_eq!(status, 405, "{method} {path} is not described: {raw}");
                assert_eq!(body["error"], "method_not_allowed", "{raw}");
                assert_eq!(
                    allow.as_deref(),
                    Some(allowed.join(", ").as_str()),
                    "{method} {path}: Allow"
                );
            }
        }
    }
    env.stop().await;
}

/// Every string literal in `src/` that starts with `/api/v1`.
fn api_paths_in_source() -> Vec<(String, String)> {
    let re = regex::Regex::new(r#""(/api/v1[^"]*)""#).unwrap();
    let mut out = Vec::new();
    let mut todo = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
                    for c in re.captures_iter(line) {
                        out.push((path.display().to_string(), c[1].to_owned()));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn no_api_path_in_the_code_is_left_out_of_the_description() {
    let described: Vec<String> = described_operations().into_iter().map(|(_, p)| p).collect();
    // The catch-alls that answer the JSON 404 of an unknown path.
    let fallbacks = ["/api/v1", "/api/v1/{tail:.*}"];
    let found = api_paths_in_source();
    assert!(
        found.iter().any(|(_, p)| p == "/api/v1/token"),
        "the scan finds the routes: {found:?}"
    );
    for (file, path) in found {
        assert!(
            described.contains(&path) || fallbacks.contains(&path.as_str()),
            "{file} names {path}, which the OpenAPI description lacks"
        );
    }
}

// ---------------------------------------------------------------------------
// (c) Real answers validate against the described schemas
// ---------------------------------------------------------------------------

/// Validates answers against the description.
struct Described {
    doc: Value,
    checked: std::cell::RefCell<Vec<(String, String, u16)>>,
}

/// `s` as one token of a JSON pointer in a URI fragment (RFC 6901 §6).
fn pointer_escape(s: &str) -> String {
    s.replace('~', "~0")
        .replace('/', "~1")
        .replace('{', "%7B")
        .replace('}', "%7D")
}

impl Described {
    fn new() -> Self {
        Described {
            doc: serde_json::from_str(&openapi_json()).unwrap(),
            checked: Default::default(),
        }
    }

    /// Asserts that `answer`, to `method path`, is described: its status is
    /// listed for the operation, it is JSON, and its body validates against
    /// the schema of that status.
    fn check(&self, method: &str, path: &str, answer: &ApiAnswer, what: &str) {
        let op = &self.doc["paths"][path][method.to_ascii_lowercase()];
        assert!(op.is_object(), "{what}: {method} {path} is not described");
        let status = answer.status.to_string();
        let response = &op["responses"][&status];
        assert!(
            response.is_object(),
            "{what}: {method} {path} answered {status}, which is not described: {}",
            answer.raw
        );
        assert_eq!(
            answer.header("content-type").as_deref(),
            Some("application/json"),
            "{what}"
        );
        assert!(response["content"]["application/json"]["schema"].is_object());
        // The whole description is the root, so that its `$ref`s resolve;
        // the root's own `$ref` names the schema of this answer.
        let mut root = self.doc.clone();
        root["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
        root["$ref"] = json!(format!(
            "#/paths/{}/{}/responses/{}/content/application~1json/schema",
            pointer_escape(path),
            method.to_ascii_lowercase(),
            status
        ));
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&root)
            .unwrap_or_else(|e| panic!("the description is not a valid schema: {e}"));
        let errors: Vec<String> = validator
            .iter_errors(&answer.body)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{what}: {method} {path} {status} does not match its description: {errors:?}\n{}",
            answer.raw
        );
        self.checked
            .borrow_mut()
            .push((method.to_owned(), path.to_owned(), answer.status));
    }
}

/// A control: the validator does refuse an answer that breaks the schema.
#[test]
fn the_validator_refuses_what_the_description_does_not_allow() {
    let d = Described::new();
    let answer = |status: u16, body: Value| ApiAnswer {
        status,
        headers: {
            let mut h = reqwest::header::HeaderMap::new();
            h.insert("content-type", "application/json".parse().unwrap());
            h
        },
        raw: body.to_string(),
        body,
    };
    let ok = answer(
        200,
        json!({"status": "accepted", "decided_at": "2026-11-22T10:00:00Z", "delivery": "delivered"}),
    );
    d.check(
        "POST",
        "/api/v1/confirmations/{id}/decision",
        &ok,
        "control",
    );
    for bad in [
        json!({"status": "pending", "decided_at": "2026-11-22T10:00:00Z", "delivery": "delivered"}),
        json!({"status": "accepted", "decided_at": "yesterday", "delivery": "delivered"}),
        json!({"status": "accepted", "delivery": "delivered"}),
    ] {
        let a = answer(200, bad.clone());
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            d.check("POST", "/api/v1/confirmations/{id}/decision", &a, "bad")
        }));
        assert!(caught.is_err(), "{bad} passed");
    }
    let error = answer(400, json!({"error": "invalid_request"}));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        d.check("POST", "/api/v1/confirmations", &error, "bad error")
    }));
    assert!(caught.is_err(), "an error without error_description passed");
}

const TOKEN: &str = "/api/v1/token";
const CREATE: &str = "/api/v1/confirmations";
const GET: &str = "/api/v1/confirmations/{id}";
const DECIDE: &str = "/api/v1/confirmations/{id}/decision";
const REGISTER: &str = "/api/v1/resource-servers";

#[actix_web::test]
async fn real_answers_validate_against_the_description() {
    let env = start().await;
    let d = Described::new();
    let gw = env.voice(&Gateway::new(GW, GW_SECRET));
    let http = http_client();

    // POST /api/v1/token
    let a = gw.token("alice", ALICE_PIN).await;
    d.check("POST", TOKEN, &a, "a token");
    let alice = a.body["access_token"].as_str().unwrap().to_owned();
    let a = gw.token("alice", "000000").await;
    a.expect(401, "a wrong PIN");
    d.check("POST", TOKEN, &a, "a wrong PIN");
    let a = gw
        .token_with(None, &[("username", "alice"), ("pin", ALICE_PIN)])
        .await;
    a.expect(401, "no gateway");
    assert!(a.header("www-authenticate").is_some());
    d.check("POST", TOKEN, &a, "no gateway");
    let a = gw
        .token_with(Some((GW, GW_SECRET)), &[("username", "alice")])
        .await;
    a.expect(400, "no PIN");
    d.check("POST", TOKEN, &a, "no PIN");
    let a = gw
        .send(
            http.post(format!("{}{TOKEN}", env.cs_origin))
                .basic_auth(GW, Some(GW_SECRET))
                .json(&json!({"username": "alice", "pin": ALICE_PIN})),
        )
        .await;
    a.expect(415, "a JSON token request");
    d.check("POST", TOKEN, &a, "a JSON token request");
    let bob = gw.user_token("bob", BOB_PIN).await;

    // POST /api/v1/confirmations
    let pack = env.invoke().await;
    let a = gw.create(Some(&alice), &pack.resource_uri).await;
    a.expect(201, "create");
    d.check("POST", CREATE, &a, "create");
    assert_eq!(a.body["status"], "pending");
    let id = a.body["id"].as_str().unwrap().to_owned();
    let a = gw
        .create(Some(&alice), "http://127.0.0.1:1/elsewhere")
        .await;
    a.expect(400, "an unregistered resource server");
    d.check("POST", CREATE, &a, "an unregistered resource server");
    let a = gw.create(None, &pack.resource_uri).await;
    a.expect(401, "no token");
    d.check("POST", CREATE, &a, "no token");
    let a = gw.create(Some(&bob), &pack.resource_uri).await;
    a.expect(403, "bob");
    d.check("POST", CREATE, &a, "bob");
    let a = gw
        .send(
            http.post(format!("{}{CREATE}", env.cs_origin))
                .bearer_auth(&alice)
                .header("content-type", "application/json")
                .body(vec![b' '; 70 * 1024]),
        )
        .await;
    a.expect(413, "a body too large");
    d.check("POST", CREATE, &a, "a body too large");
    let a = gw
        .send(
            http.post(format!("{}{CREATE}", env.cs_origin))
                .bearer_auth(&alice)
                .header("content-type", "application/json")
                .body(r#"{"resource uri": "a", "resource uri": "b"}"#),
        )
        .await;
    a.expect(400, "a duplicate member");
    d.check("POST", CREATE, &a, "a duplicate member");

    // GET /api/v1/confirmations/{id}
    let a = gw.get(Some(&alice), &id).await;
    a.expect(200, "get");
    d.check("GET", GET, &a, "get");
    let a = gw.get(Some(&alice), "no-such-id").await;
    a.expect(404, "an unknown id");
    d.check("GET", GET, &a, "an unknown id");
    let a = gw.get(Some(&bob), &id).await;
    a.expect(403, "bob reads");
    d.check("GET", GET, &a, "bob reads");

    // POST /api/v1/confirmations/{id}/decision
    let a = gw
        .decide(
            Some(&alice),
            &id,
            &json!({"decision": "accept", "view": null}),
        )
        .await;
    a.expect(400, "no view");
    d.check("POST", DECIDE, &a, "no view");
    let a = gw
        .decide(
            Some(&alice),
            &id,
            &json!({"decision": "accept", "view": "not-the-digest"}),
        )
        .await;
    a.expect(409, "another view");
    d.check("POST", DECIDE, &a, "another view");
    let a = gw
        .decide(Some(&alice), &id, &json!({"decision": "accept"}))
        .await;
    a.expect(200, "accept");
    d.check("POST", DECIDE, &a, "accept");
    let a = gw
        .decide(Some(&alice), &id, &json!({"decision": "reject"}))
        .await;
    a.expect(409, "the other decision");
    assert_eq!(a.error(), "already_decided");
    d.check("POST", DECIDE, &a, "the other decision");
    let a = gw.get(Some(&alice), &id).await;
    a.expect(200, "get a decided one");
    assert_eq!(a.body["decision"], "accept", "{}", a.raw);
    d.check("GET", GET, &a, "get a decided one");
    let a = gw.create(Some(&alice), &pack.resource_uri).await;
    a.expect(201, "create a decided one");
    d.check("POST", CREATE, &a, "create a decided one");

    // Private values and warnings (§8): 422 with problems.
    let params = transfer_params(Some("Acme \u{202E}gnp.exe"), Some("Pay Am\u{0430}zon"));
    let pack = env.invoke_tool("transfer_funds", &params).await;
    let a = gw.create(Some(&alice), &pack.resource_uri).await;
    a.expect(201, "create a transfer");
    d.check("POST", CREATE, &a, "create a transfer");
    assert!(!a.body["warnings"].as_array().unwrap().is_empty());
    assert!(a.body["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["input"].is_object()));
    let transfer = a.body["id"].as_str().unwrap().to_owned();
    let a = gw
        .decide(Some(&alice), &transfer, &json!({"decision": "accept"}))
        .await;
    a.expect(422, "nothing collected, warnings not acknowledged");
    assert!(a.body["problems"].as_array().is_some_and(|p| !p.is_empty()));
    d.check("POST", DECIDE, &a, "nothing collected");
    let a = gw
        .decide(Some(&alice), &transfer, &json!({"decision": "maybe"}))
        .await;
    a.expect(400, "a decision that is no decision");
    d.check("POST", DECIDE, &a, "a decision that is no decision");
    let a = gw
        .decide(Some(&alice), &transfer, &json!({"decision": "reject"}))
        .await;
    a.expect(200, "reject");
    d.check("POST", DECIDE, &a, "reject");

    // The description itself.
    let (status, _, text) = served(&env).await;
    let a = ApiAnswer {
        status,
        headers: {
            let mut h = reqwest::header::HeaderMap::new();
            h.insert("content-type", "application/json".parse().unwrap());
            h
        },
        body: serde_json::from_str(&text).unwrap(),
        raw: text,
    };
    d.check("GET", "/api/v1/openapi.json", &a, "the description");

    // POST /api/v1/resource-servers (§16.3): off here, …
    let register = |base: &str, body: Value| http.post(format!("{base}{REGISTER}")).json(&body);
    let a = gw
        .send(register(
            &env.cs_origin,
            json!({"resource": "https://rs.example"}),
        ))
        .await;
    a.expect(404, "registration off");
    d.check("POST", REGISTER, &a, "registration off");
    // … and open at another host.
    let host = Env::start(Options {
        cs_toml_tables: "\n[registration]\nmode = \"open\"\nallow_addresses = [\"127.0.0.0/8\"]\n"
            .into(),
        ..Options::default()
    })
    .await;
    let rs = DocServer::rs(|_, _| {});
    let a = gw
        .send(register(&host.cs_origin, json!({"resource": rs.origin})))
        .await;
    a.expect(201, "a registration");
    d.check("POST", REGISTER, &a, "a registration");
    let a = gw
        .send(register(&host.cs_origin, json!({"resource": rs.origin})))
        .await;
    a.expect(200, "a refresh");
    d.check("POST", REGISTER, &a, "a refresh");
    let html = DocServer::start(|_, _| Reply::with("200 OK", "<html>"));
    let a = gw
        .send(register(&host.cs_origin, json!({"resource": html.origin})))
        .await;
    a.expect(400, "a document that is not JSON");
    assert_eq!(a.error(), "invalid_resource");
    d.check("POST", REGISTER, &a, "a document that is not JSON");
    let a = gw
        .send(register(&host.cs_origin, json!({"origin": rs.origin})))
        .await;
    a.expect(400, "no resource member");
    d.check("POST", REGISTER, &a, "no resource member");
    let a = gw
        .send(
            http.post(format!("{}{REGISTER}", host.cs_origin))
                .header("content-type", "text/plain")
                .body("{}"),
        )
        .await;
    a.expect(415, "not JSON");
    d.check("POST", REGISTER, &a, "not JSON");
    host.cs.cs.registrations().block(&rs.origin, 0).unwrap();
    let a = gw
        .send(register(&host.cs_origin, json!({"resource": rs.origin})))
        .await;
    a.expect(403, "a blocked origin");
    assert_eq!(a.error(), "blocked");
    d.check("POST", REGISTER, &a, "a blocked origin");
    host.stop().await;

    // Every described operation was met.
    let checked = d.checked.take();
    for (method, path) in described_operations() {
        assert!(
            checked.iter().any(|(m, p, _)| *m == method && *p == path),
            "{method} {path} was never checked"
        );
    }
    env.stop().await;
}
