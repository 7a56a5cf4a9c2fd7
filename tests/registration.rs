//! The confirmation server's side of discovery and self-service
//! registration (PROTOCOL.md §16.1, §16.3, §16.4), on real loopback sockets:
//!
//! - the discovery document: its shape with registration off and open, and
//!   the shape a confirmation hosted by a resource server serves (§12);
//! - every refusal of a registration, each with its status and nothing
//!   stored: a document of another origin, members off the origin, a
//!   redirect, an answer of 64 KiB + 1, an answer slower than 10 s, a
//!   non-JSON answer, a document without `private_key_jwt`, a key set with
//!   no key, an address the operator did not allow (`https://localhost:…`
//!   and literal loopback), and a loopback `http` origin accepted where it
//!   is allowed (a small real HTTP server in this process serves the RS's
//!   documents);
//! - `token` mode: no token and a wrong one `401`, a token made by `cheq rs
//!   token` through the running server's admin socket, not used up by a
//!   failed registration, used once;
//! - a registered RS end to end (the reference RS with the documents of
//!   §16.2, whose token endpoint checks the CS's client assertion with
//!   `verify_client_assertion`): served without a restart, then `cheq rs
//!   block` while a decision waits: the start link's page and the raw API
//!   say the site is no longer served, the registration is refused `403`,
//!   the decision is not delivered nor dropped; `cheq rs unblock` delivers
//!   it; `cheq rs remove` forgets the RS;
//! - two CS processes on one PostgreSQL database: a registration on one is
//!   served by the other, a block and an unblock with `cheq rs` are obeyed
//!   by both, each within 5 s (polled, no sleep as synchronisation);
//! - a flood of registrations from one address and for one origin: `429`
//!   past the rate, and a browser sign-in during the flood within twice its
//!   time at rest (and a margin); both times are printed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use actix_web::{web, App, HttpResponse, HttpServer};
use cheq::discovery::{CsConfiguration, CS_CONFIGURATION_PATH};
use cheq::sign::assertion::{verify_client_assertion, Expected, ASSERTION_TYPE};
use common::*;
use serde_json::{json, Value};
use std::collections::HashSet;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The `[registration]` table of an open host that may fetch loopback.
const OPEN_LOOPBACK: &str =
    "\n[registration]\nmode = \"open\"\nallow_addresses = [\"127.0.0.0/8\"]\n";

/// `POST <cs>/api/v1/resource-servers` with `body`: (status, headers, JSON).
async fn register_with(
    http: &reqwest::Client,
    cs: &str,
    body: &Value,
    token: Option<&str>,
    forwarded_for: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = http
        .post(format!("{cs}/api/v1/resource-servers"))
        .json(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(f) = forwarded_for {
        req = req.header("x-forwarded-for", f);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let text = res.text().await.unwrap();
    let json = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {status} {text}"));
    (status, headers, json)
}

async fn register(cs: &str, origin: &str) -> (u16, Value) {
    let (status, _, body) = register_with(
        &http_client(),
        cs,
        &json!({ "resource": origin }),
        None,
        None,
    )
    .await;
    (status, body)
}

/// `cheq ARGS…` on a blocking thread, so that a server of this test's own
/// runtime answers its admin socket meanwhile: (success, stdout, stderr).
async fn cheq_async(args: &[&str]) -> (bool, String, String) {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cheq_cmd(&args)
    })
    .await
    .unwrap()
}

/// The registrations the CS of `env` has stored.
fn stored(env: &Env) -> Vec<String> {
    env.cs
        .cs
        .registrations()
        .list()
        .unwrap()
        .into_iter()
        .map(|r| r.origin)
        .collect()
}

async fn discovery(base: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let res = http_client()
        .get(format!("{base}{CS_CONFIGURATION_PATH}"))
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    (status, headers, res.text().await.unwrap())
}

/// The `max-age` of a `Cache-Control` header.
fn max_age(headers: &reqwest::header::HeaderMap) -> i64 {
    let cc = headers.get("cache-control").unwrap().to_str().unwrap();
    cc.split(',')
        .find_map(|d| d.trim().strip_prefix("max-age="))
        .unwrap_or_else(|| panic!("no max-age in {cc}"))
        .parse()
        .unwrap()
}

// ---------------------------------------------------------------------------
// §16.1: the discovery document
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn the_discovery_document_says_what_this_host_offers() {
    for open in [false, true] {
        let env = Env::start(Options {
            cs_toml_tables: if open {
                OPEN_LOOPBACK.into()
            } else {
                String::new()
            },
            ..Options::default()
        })
        .await;
        let (status, headers, text) = discovery(&env.cs_origin).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(
            headers.get("content-type").unwrap().to_str().unwrap(),
            "application/json"
        );
        let age = max_age(&headers);
        assert!((1..=86_400).contains(&age), "max-age {age}");
        // It reads as §16.1 says (everything on the CS's origin).
        let doc = CsConfiguration::read(text.as_bytes(), &env.cs_origin).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc.issuer, env.cs_origin);
        assert_eq!(v["issuer"], env.cs_origin.as_str());
        assert_eq!(doc.confirmation_uri, env.cs_url);
        assert_eq!(
            doc.jwks_uri,
            format!("{}/.well-known/jwks.json", env.cs_origin)
        );
        assert_eq!(
            doc.raw_api.as_deref(),
            Some(format!("{}/api/v1", env.cs_origin).as_str())
        );
        assert_eq!(doc.versions, ["1.0"]);
        assert_eq!(doc.assurances_supported, ["password", "passkey"]);
        // The log is kept by default: its prefix and key, as the log says.
        let log = doc.log.expect("the log member");
        assert_eq!(log.prefix, format!("{}{START}/log/", env.cs_origin));
        assert_eq!(log.key, log_key(&format!("{}{START}", env.cs_origin)).await);
        // Nothing this CS does not do.
        assert!(
            v.get("push_key").is_none() && v.get("inbox").is_none(),
            "{v}"
        );
        match open {
            false => assert!(v.get("registration_endpoint").is_none(), "{v}"),
            true => assert_eq!(
                doc.registration_endpoint.as_deref(),
                Some(format!("{}/api/v1/resource-servers", env.cs_origin).as_str())
            ),
        }
        // The key set it names is the CS's.
        let (status, jwks) = get_text(&doc.jwks_uri).await;
        assert_eq!(status, 200);
        assert!(jwks.contains(env.cs_key.kid()), "{jwks}");
        env.stop().await;
    }
}

#[actix_web::test]
async fn without_the_log_the_document_names_none() {
    let env = Env::start(Options {
        cs_toml_tables: "\n[transparency_log]\nenabled = false\n".into(),
        ..Options::default()
    })
    .await;
    let (status, _, text) = discovery(&env.cs_origin).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(v.get("log").is_none(), "{v}");
    env.stop().await;
}

/// A confirmation hosted by a resource server (§12) serves the document on
/// the RS's origin, naming the RS's key set (which publishes the
/// confirmation's keys too), and takes no registrations.
#[actix_web::test]
async fn a_hosted_confirmation_serves_it_on_the_resource_servers_origin() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let pair = cheq::testkit::LoopbackPair {
        dir: root.to_owned(),
        rs_port: port,
        cs_port: port,
        cs_path: String::new(),
        rs_key: root.join("rs.jwk"),
        cs_key: root.join("cs.jwk"),
        rs_jwks: None,
        cs_jwks: None,
        cs_secret: CS_SECRET.into(),
        agent_id: "agent".into(),
        agent_secret: AGENT_SECRET.into(),
        host: "127.0.0.1".into(),
    };
    use cheq::configfile::ServerConfig as _;
    let config = cheq::resource::RsConfig::from_toml(&pair.hosted_rs_toml("").unwrap()).unwrap();
    let state = cheq::colocated::build_state(&config, Arc::new(cheq::time::SystemClock))
        .await
        .unwrap();
    let server = cheq::colocated::serve(listener, &state).unwrap();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    let origin = format!("http://127.0.0.1:{port}");
    let (status, headers, text) = discovery(&origin).await;
    assert_eq!(status, 200, "{text}");
    assert!(max_age(&headers) <= 86_400);
    let doc = CsConfiguration::read(text.as_bytes(), &origin).unwrap();
    assert_eq!(doc.issuer, origin);
    assert_eq!(doc.confirmation_uri, format!("{origin}/confirm"));
    assert_eq!(doc.registration_endpoint, None);
    let (status, jwks) = get_text(&doc.jwks_uri).await;
    assert_eq!(status, 200);
    let cs_kid = state.cs.cs.keys().signer().unwrap().kid().to_owned();
    assert!(jwks.contains(&cs_kid), "the confirmation's key: {jwks}");
    // And refuses registration in its configuration.
    let refused = cheq::resource::RsConfig::from_toml(
        &pair
            .hosted_rs_toml("[confirmation.registration]\nmode = \"open\"\n")
            .unwrap(),
    )
    .map(|c| cheq::colocated::cs_config(&c).map(drop));
    let e = match refused {
        Ok(Ok(())) => panic!("a hosted confirmation took registrations"),
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("registration"), "{e}");
    handle.stop(true).await;
}

// ---------------------------------------------------------------------------
// §16.3: refusals, each with its status, nothing stored
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn registration_is_404_when_off_and_needs_a_json_origin() {
    let env = Env::start(Options::default()).await;
    let rs = DocServer::rs(|_, _| {});
    let (status, body) = register(&env.cs_origin, &rs.origin).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("not_found")));
    assert_eq!(rs.hits(), 0, "nothing fetched");
    assert!(stored(&env).is_empty());
    env.stop().await;

    let env = Env::start(Options {
        cs_toml_tables: OPEN_LOOPBACK.into(),
        ..Options::default()
    })
    .await;
    let http = http_client();
    for (body, code) in [
        (json!({}), "invalid_request"),
        (json!({"resource": 7}), "invalid_request"),
        (json!({"resource": ""}), "invalid_request"),
        (json!({"resource": "not a uri"}), "invalid_resource"),
        (
            json!({"resource": format!("{}/cheq/", rs.origin)}),
            "invalid_resource",
        ),
        (
            json!({"resource": format!("{}?x=1", rs.origin)}),
            "invalid_resource",
        ),
        (
            json!({"resource": "file:///etc/passwd"}),
            "invalid_resource",
        ),
    ] {
        let (status, _, answer) = register_with(&http, &env.cs_origin, &body, None, None).await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (400, Some(code)),
            "{body}: {answer}"
        );
    }
    let res = http
        .post(format!("{}/api/v1/resource-servers", env.cs_origin))
        .header("content-type", "text/plain")
        .body(format!("{{\"resource\":\"{}\"}}", rs.origin))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 415);
    assert_eq!(rs.hits(), 0, "nothing fetched for a bad request");
    assert!(stored(&env).is_empty());
    env.stop().await;
}

#[actix_web::test]
async fn every_bad_document_is_refused_and_nothing_is_stored() {
    let env = Env::start(Options {
        cs_toml_tables: OPEN_LOOPBACK.into(),
        ..Options::default()
    })
    .await;
    let elsewhere = "https://api.airline.example";
    let big = vec![b' '; 64 * 1024 + 1];
    let cases: Vec<(&str, DocServer, &str)> = vec![
        (
            "a document naming another origin",
            DocServer::rs(move |_, d| d["resource"] = json!(elsewhere)),
            "not the origin it was fetched from",
        ),
        (
            "a resource prefix off the origin",
            DocServer::rs(move |_, d| {
                d["resource_prefix"] = json!(format!("{elsewhere}/cheq/"));
            }),
            "resource_prefix",
        ),
        (
            "a key set off the origin",
            DocServer::rs(|_, d| d["jwks_uri"] = json!("http://169.254.169.254/latest/keys")),
            "jwks_uri",
        ),
        (
            "a token endpoint off the origin",
            DocServer::rs(move |_, d| {
                d["token_endpoint"] = json!(format!("{elsewhere}/oauth/token"));
            }),
            "token_endpoint",
        ),
        (
            "a document without private_key_jwt",
            DocServer::rs(|_, d| {
                d["token_endpoint_auth_methods_supported"] = json!(["client_secret_basic"]);
            }),
            "private_key_jwt",
        ),
        (
            "a prefix that is not a plain path",
            DocServer::rs(|origin, d| d["resource_prefix"] = json!(format!("{origin}/cheq"))),
            "resource_prefix",
        ),
        (
            "a redirect",
            DocServer::start(|_, _| {
                Reply::with(
                    "302 Found\r\nlocation: http://127.0.0.1:9/.well-known/cheq-resource",
                    "",
                )
            }),
            "redirect",
        ),
        (
            "an answer of 64 KiB + 1",
            DocServer::start(move |_, _| {
                Reply::with("200 OK\r\ncontent-type: application/json", big.clone())
            }),
            "more than 65536 bytes",
        ),
        (
            "a non-JSON answer",
            DocServer::start(|_, _| Reply::with("200 OK\r\ncontent-type: text/html", "<html>")),
            "not JSON",
        ),
        (
            "a missing document",
            DocServer::start(|_, _| Reply::with("404 Not Found", "")),
            "HTTP 404",
        ),
        (
            "a key set that is not a JWKS",
            DocServer::start(|origin, path| match path {
                "/.well-known/cheq-resource" => {
                    Reply::json(&rs_document(origin, "/cheq/confirmations/", "/oauth/token"))
                }
                _ => Reply::json(&json!({"keys": [{"kty": "oct", "k": "AAAA"}]})),
            }),
            "key set is not a usable JWKS",
        ),
        (
            "a key set with no key",
            DocServer::start(|origin, path| match path {
                "/.well-known/cheq-resource" => {
                    Reply::json(&rs_document(origin, "/cheq/confirmations/", "/oauth/token"))
                }
                _ => Reply::json(&json!({"keys": []})),
            }),
            "no key",
        ),
    ];
    for (what, server, says) in &cases {
        let (status, body) = register(&env.cs_origin, &server.origin).await;
        assert_eq!(status, 400, "{what}: {body}");
        assert_eq!(body["error"], "invalid_resource", "{what}: {body}");
        let description = body["error_description"].as_str().unwrap();
        assert!(description.contains(says), "{what}: {description}");
        assert!(server.hits() >= 1, "{what}: the document was fetched");
        assert!(stored(&env).is_empty(), "{what}: something was stored");
    }
    // The redirect was not followed: its target (port 9) is never asked,
    // and the server that redirected was asked once.
    assert_eq!(cases[6].1.hits(), 1);

    // A slow answer: given up at 10 s, long before it would come.
    let slow = DocServer::start(move |origin, path| {
        let doc = rs_document(origin, "/cheq/confirmations/", "/oauth/token");
        match path {
            "/.well-known/cheq-resource" => Reply::json(&doc).after(Duration::from_secs(14)),
            _ => Reply::json(&rs_keys()),
        }
    });
    let started = Instant::now();
    let (status, body) = register(&env.cs_origin, &slow.origin).await;
    let took = started.elapsed();
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_resource")),
        "{body}"
    );
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("did not answer in time"),
        "{body}"
    );
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(13),
        "given up after {took:?}"
    );
    assert!(stored(&env).is_empty());

    // And a loopback http origin the operator allowed is accepted.
    let good = DocServer::rs(|_, _| {});
    let (status, body) = register(&env.cs_origin, &good.origin).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        body,
        json!({"resource": good.origin, "name": "Example Air", "status": "active"})
    );
    assert_eq!(stored(&env), vec![good.origin.clone()]);
    // Again: a refresh.
    let (status, body) = register(&env.cs_origin, &format!("{}/", good.origin)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(stored(&env), vec![good.origin.clone()]);
    env.stop().await;
}

/// Without `allow_addresses`, no loopback address is fetched, by name or
/// literal, over https or http: refused before anything is sent.
#[actix_web::test]
async fn addresses_the_operator_did_not_allow_are_refused() {
    let env = Env::start(Options {
        cs_toml_tables: "\n[registration]\nmode = \"open\"\n".into(),
        ..Options::default()
    })
    .await;
    let rs = DocServer::rs(|_, _| {});
    for (origin, says) in [
        (format!("https://localhost:{}", rs.port), "does not fetch"),
        (format!("https://127.0.0.1:{}", rs.port), "does not fetch"),
        (format!("https://[::1]:{}", rs.port), "does not fetch"),
        (
            format!("https://[::ffff:127.0.0.1]:{}", rs.port),
            "does not fetch",
        ),
        (rs.origin.clone(), "not https"),
    ] {
        let (status, body) = register(&env.cs_origin, &origin).await;
        assert_eq!(status, 400, "{origin}: {body}");
        assert_eq!(body["error"], "invalid_resource");
        let description = body["error_description"].as_str().unwrap();
        assert!(description.contains(says), "{origin}: {description}");
    }
    assert_eq!(rs.hits(), 0, "no refused address was connected to");
    assert!(stored(&env).is_empty());
    env.stop().await;
}

// ---------------------------------------------------------------------------
// `token` mode
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn token_mode_takes_one_registration_per_token_made_by_cheq_rs_token() {
    let env = Env::start(Options {
        cs_toml_tables: "\n[registration]\nmode = \"token\"\nallow_addresses = [\"127.0.0.0/8\"]\n"
            .into(),
        plain_cs_store: true,
        ..Options::default()
    })
    .await;
    let http = http_client();
    let good = DocServer::rs(|_, _| {});
    let body = json!({ "resource": good.origin });
    for token in [None, Some("made-up-token"), Some("")] {
        let (status, headers, answer) =
            register_with(&http, &env.cs_origin, &body, token, None).await;
        assert_eq!(status, 401, "{token:?}: {answer}");
        assert_eq!(answer["error"], "invalid_token");
        assert!(headers
            .get("www-authenticate")
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("Bearer"));
    }
    assert_eq!(good.hits(), 0, "nothing fetched without a valid token");
    // Made-up tokens never count against the origin named: more of them
    // than an origin's allowance, and its owner still registers below.
    let per_origin = cheq::confirm::auth::limits::REGISTRATION_ORIGIN.free_failures;
    for _ in 0..per_origin + 2 {
        let (status, _, _) = register_with(&http, &env.cs_origin, &body, Some("bogus"), None).await;
        assert_eq!(status, 401);
    }
    // This host's own origin is no resource server to register.
    let (status, _, answer) = register_with(
        &http,
        &env.cs_origin,
        &json!({ "resource": env.cs_origin }),
        Some("bogus"),
        None,
    )
    .await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("invalid_resource")),
        "{answer}"
    );

    // `cheq rs token` while the server runs (through its admin socket).
    let config = env.cs_config.to_str().unwrap();
    let (ok, token, err) = cheq_async(&["rs", "token", "--config", config]).await;
    assert!(ok, "{err}");
    let token = token.trim().to_owned();
    assert!(token.len() >= 22, "at least 128 bits: {token}");
    // Only its digest is kept.
    assert_no_file_holds(&env.cs_data, &[&token]);

    // A failed registration does not use it up …
    let bad = DocServer::start(|_, _| Reply::with("200 OK", "not json"));
    let (status, _, answer) = register_with(
        &http,
        &env.cs_origin,
        &json!({ "resource": bad.origin }),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    // … a good one does,
    let (status, _, answer) = register_with(&http, &env.cs_origin, &body, Some(&token), None).await;
    assert_eq!(status, 201, "{answer}");
    // … and it is good for one registration only.
    let other = DocServer::rs(|_, _| {});
    let (status, _, answer) = register_with(
        &http,
        &env.cs_origin,
        &json!({ "resource": other.origin }),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (401, Some("invalid_token"))
    );
    assert_eq!(other.hits(), 0);
    assert_eq!(stored(&env), vec![good.origin.clone()]);
    env.stop().await;
}

// ---------------------------------------------------------------------------
// A registered resource server, end to end: served, blocked, unblocked
// ---------------------------------------------------------------------------

/// What the reference RS adds to itself to be registrable here: its
/// discovery document (§16.2) and a token endpoint that takes the CS's
/// client assertion (§16.4), checked with `verify_client_assertion` against
/// the CS's published keys, each `jti` once, before it hands out the RS's
/// own token for the CS's client.
struct Shim {
    cs_keys: Arc<cheq::keyring::KeyRing>,
    cs_origin: String,
    rs_origin: String,
    jtis: Mutex<HashSet<String>>,
    /// Token requests whose assertion verified.
    verified: AtomicUsize,
    /// While set, decisions posted to the RS are answered 503.
    gate: AtomicBool,
}

const TOKEN_PATH: &str = "/assertion/token";

async fn shim_document(shim: web::Data<Shim>) -> HttpResponse {
    let mut doc = rs_document(&shim.rs_origin, "/cheq/confirmations/", TOKEN_PATH);
    doc["name"] = json!("Self-registered Air");
    doc["token_endpoint_auth_methods_supported"] = json!(["private_key_jwt"]);
    HttpResponse::Ok().json(doc)
}

async fn shim_token(
    shim: web::Data<Shim>,
    form: web::Form<std::collections::HashMap<String, String>>,
) -> HttpResponse {
    let refuse = |why: String| {
        HttpResponse::Unauthorized()
            .json(json!({"error": "invalid_client", "error_description": why}))
    };
    if form.get("client_assertion_type").map(String::as_str) != Some(ASSERTION_TYPE)
        || form.get("grant_type").map(String::as_str) != Some("client_credentials")
    {
        return refuse("not a client-credentials request with an assertion".into());
    }
    let Some(assertion) = form.get("client_assertion") else {
        return refuse("no assertion".into());
    };
    let expected = Expected {
        issuer: &shim.cs_origin,
        audience: &format!("{}{TOKEN_PATH}", shim.rs_origin),
        now: chrono::Utc::now().timestamp(),
    };
    let checked = match verify_client_assertion(assertion, &shim.cs_keys.published(), expected) {
        Ok(v) => v,
        Err(e) => return refuse(e.to_string()),
    };
    if !shim.jtis.lock().unwrap().insert(checked.jti) {
        return refuse("jti seen before".into());
    }
    shim.verified.fetch_add(1, Ordering::SeqCst);
    let res = reqwest::Client::new()
        .post(format!("{}/oauth/token", shim.rs_origin))
        .basic_auth("cs", Some(CS_SECRET))
        .form(&[("grant_type", "client_credentials"), ("scope", "cheq")])
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap())
        .content_type("application/json")
        .body(res.text().await.unwrap())
}

/// A CS with no resource server in its file (registration open, loopback
/// allowed) and the reference RS, able to register, in this process.
struct Hosting {
    _dir: tempfile::TempDir,
    cs: web::Data<cheq::confirm::CsState>,
    cs_origin: String,
    cs_url: String,
    cs_config: String,
    rs_origin: String,
    shim: web::Data<Shim>,
    handles: Vec<actix_web::dev::ServerHandle>,
    _background: cheq::confirm::server::Background,
}

const GW: &str = "voice-gw";
const GW_SECRET: &str = "voice-gateway-secret-0123";
const ALICE_PIN: &str = "432109";

impl Hosting {
    async fn start() -> Hosting {
        Hosting::with(false).await
    }

    /// `configured`: the RS is in the CS's file, with `auth =
    /// "private_key_jwt"`, rather than registering itself.
    async fn with(configured: bool) -> Hosting {
        use cheq::configfile::ServerConfig as _;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        let keys = root.join("keys");
        let cs_key = cheq::keyfile::load_or_create_key(&keys.join("cs.jwk"), None, "cs").unwrap();
        cheq::keyfile::load_or_create_key(&keys.join("rs.jwk"), None, "rs").unwrap();
        std::fs::write(keys.join("cs.pub.jwks.json"), public_jwks(&cs_key)).unwrap();
        let rs_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let cs_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let rs_port = rs_listener.local_addr().unwrap().port();
        let cs_port = cs_listener.local_addr().unwrap().port();
        let pair = cheq::testkit::LoopbackPair {
            dir: root.clone(),
            rs_port,
            cs_port,
            cs_path: START.into(),
            rs_key: keys.join("rs.jwk"),
            cs_key: keys.join("cs.jwk"),
            rs_jwks: None,
            cs_jwks: Some(keys.join("cs.pub.jwks.json")),
            cs_secret: CS_SECRET.into(),
            agent_id: "agent".into(),
            agent_secret: AGENT_SECRET.into(),
            host: "127.0.0.1".into(),
        };
        let rs_toml = pair.rs_toml().unwrap();
        // The CS's file names no resource server.
        let full = pair.cs_toml().unwrap();
        let head = &full[..full.find("\n[[resource_servers]]").unwrap()];
        let rs_url = pair.rs_url();
        let entry = if configured {
            format!(
                "\n[[resource_servers]]\norigin = \"{rs_url}\"\npath_prefix = \"/cheq/\"\n\
                 jwks_uri = \"{rs_url}/.well-known/jwks.json\"\ntoken_url = \"{rs_url}{TOKEN_PATH}\"\n\
                 auth = \"private_key_jwt\"\n"
            )
        } else {
            String::new()
        };
        let cs_toml = format!(
            "{head}\n{OPEN_LOOPBACK}\n[[gateways]]\nclient_id = \"{GW}\"\nsecret_hash = \"{}\"\n{entry}",
            cheq::confirm::auth::hash_secret(GW_SECRET).unwrap()
        );
        let (rs_path, cs_path) = (root.join("rs.toml"), root.join("cs.toml"));
        std::fs::write(&rs_path, &rs_toml).unwrap();
        std::fs::write(&cs_path, &cs_toml).unwrap();
        let rs_config = cheq::resource::RsConfig::from_toml(&rs_toml).unwrap();
        let cs_config = cheq::confirm::CsConfig::from_toml(&cs_toml).unwrap();
        assert_eq!(cs_config.resource_servers.is_empty(), !configured);
        let clock: Arc<dyn cheq::time::Clock> = Arc::new(cheq::time::SystemClock);

        let cs = cheq::confirm::build_state(&cs_config, clock.clone())
            .await
            .unwrap();
        let mut alice = cheq::confirm::auth::new_account("alice", None, ALICE_PW).unwrap();
        let pepper = cheq::keyfile::load_or_create_secret(
            &cs_config
                .data_dir
                .join(cheq::confirm::auth::PIN_PEPPER_FILE),
        )
        .unwrap();
        alice.pin_hash = Some(cheq::confirm::auth::pin_hash(&pepper, ALICE_PIN).unwrap());
        cs.accounts.put(&alice, false).unwrap();
        let background = cheq::confirm::server::start_background(&cs, &cs_config.data_dir);
        let cs_server = cheq::confirm::serve(cs_listener, cs.clone()).unwrap();

        let rs = cheq::resource::build_state(&rs_config, clock)
            .await
            .unwrap();
        let rs_origin = format!("http://127.0.0.1:{rs_port}");
        let cs_origin = format!("http://127.0.0.1:{cs_port}");
        let shim = web::Data::new(Shim {
            cs_keys: cs.cs.keys().clone(),
            cs_origin: cs_origin.clone(),
            rs_origin: rs_origin.clone(),
            jtis: Mutex::new(HashSet::new()),
            verified: AtomicUsize::new(0),
            gate: AtomicBool::new(false),
        });
        let (rs_state, shim_data) = (rs.clone(), shim.clone());
        let rs_server = HttpServer::new(move || {
            let (rs_state, shim) = (rs_state.clone(), shim_data.clone());
            let gate = shim.clone();
            App::new().app_data(shim).configure(move |c| {
                c.service(
                    web::resource("/.well-known/cheq-resource").route(web::get().to(shim_document)),
                )
                .service(web::resource(TOKEN_PATH).route(web::post().to(shim_token)))
                .service(
                    web::resource("/cheq/confirmations/{id}")
                        .guard(actix_web::guard::Post())
                        .guard(actix_web::guard::fn_guard(move |_| {
                            gate.gate.load(Ordering::SeqCst)
                        }))
                        .to(|| async {
                            HttpResponse::ServiceUnavailable().json(json!({"error": "unavailable"}))
                        }),
                );
                cheq::resource::configure(c, rs_state);
            })
        })
        .workers(2)
        .listen(rs_listener)
        .unwrap()
        .run();
        let handles = vec![cs_server.handle(), rs_server.handle()];
        actix_web::rt::spawn(cs_server);
        actix_web::rt::spawn(rs_server);
        Hosting {
            _dir: dir,
            cs,
            cs_url: format!("{cs_origin}{START}"),
            cs_origin,
            cs_config: cs_path.display().to_string(),
            rs_origin,
            shim,
            handles,
            _background: background,
        }
    }

    /// The status and page of the start link of `uri`, for a visitor not
    /// signed in (`GET <confirmation uri>?resource_uri=…`, §2).
    async fn start_link(&self, uri: &str) -> (u16, String) {
        let url = reqwest::Url::parse_with_params(&self.cs_url, &[("resource_uri", uri)]).unwrap();
        let res = http_client().get(url).send().await.unwrap();
        (res.status().as_u16(), unescape(&res.text().await.unwrap()))
    }

    /// Polls the start link of `uri` until it answers `status`; the time
    /// it took (at most `limit`).
    async fn until_link(&self, uri: &str, status: u16, limit: Duration) -> Duration {
        let started = Instant::now();
        loop {
            let (got, page) = self.start_link(uri).await;
            if got == status {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < limit,
                "the start link still answers {got}, not {status}, after {limit:?}: {page}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// alice's one decision record.
    fn record(&self) -> cheq::store::cs::DecisionRecord {
        let mut records = self.cs.cs.records().for_user("alice", 10).unwrap();
        assert_eq!(records.len(), 1);
        records.remove(0)
    }

    async fn stop(self) {
        for h in self.handles {
            h.stop(true).await;
        }
    }
}

/// The attempts, next try and last error of a pending delivery.
fn pending(record: &cheq::store::cs::DecisionRecord) -> (u32, i64, Option<String>) {
    match &record.delivery {
        cheq::store::cs::Delivery::Pending {
            attempts,
            next_try,
            last_error,
        } => (*attempts, *next_try, last_error.clone()),
        other => panic!("not pending: {other:?}"),
    }
}

#[actix_web::test]
async fn a_registered_resource_server_is_served_blocked_and_unblocked_without_a_restart() {
    let h = Hosting::start().await;
    let pack = invoke_flight(&h.rs_origin).await;
    assert_eq!(pack.confirmation_uri, h.cs_url);
    let uri = pack.resource_uri.clone();
    // Not served before it registers: refused before anything is fetched.
    let (status, page) = h.start_link(&uri).await;
    assert_eq!(status, 400, "{page}");
    assert!(
        page.contains("does not work for that resource server"),
        "{page}"
    );

    let (status, body) = register(&h.cs_origin, &h.rs_origin).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["name"], "Self-registered Air");
    let took = h.until_link(&uri, 303, Duration::from_secs(5)).await;
    println!("registered RS served after {took:?}");
    let (ok, list, err) = cheq_async(&["rs", "list", "--config", &h.cs_config]).await;
    assert!(ok, "{err}");
    let row = list.lines().find(|l| l.starts_with(&h.rs_origin)).unwrap();
    assert!(
        row.contains("Self-registered Air") && row.contains("active"),
        "{list}"
    );

    // alice confirms: the CHEQ fetched with the CS's client assertion, the
    // RS's keys read from its registered jwks_uri.
    let mut b = Browser::new(&h.cs_origin);
    let (path, page) = b.open(START, &uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("Book a flight"), "{}", page.text);
    assert!(h.shim.verified.load(Ordering::SeqCst) >= 1);
    // The RS does not take decisions for a moment: the decision waits.
    h.shim.gate.store(true, Ordering::SeqCst);
    let outcome = b.decide(&path, &page, "accept").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    let (attempts, _, _) = pending(&h.record());
    assert!(attempts >= 1);

    // Blocked, while the server runs (through its admin socket).
    let (ok, out, err) = cheq_async(&["rs", "block", &h.rs_origin, "--config", &h.cs_config]).await;
    assert!(ok && out.contains("blocked"), "{out}{err}");
    let took = h.until_link(&uri, 403, Duration::from_secs(5)).await;
    println!("blocked RS refused after {took:?}");
    let (_, page) = h.start_link(&uri).await;
    assert!(
        page.contains("no longer serves Self-registered Air"),
        "{page}"
    );
    // The browser's POST of a new start link: the same page.
    let second = invoke_flight(&h.rs_origin).await;
    let res = b
        .post(START, &[("resource_uri", &second.resource_uri)])
        .await;
    assert_eq!(res.status, 403, "{}", res.text);
    assert!(res.text.contains("no longer serves"), "{}", res.text);
    // The raw API: a JSON error.
    let voice = VoiceClient::new(&h.cs_origin, GW, GW_SECRET);
    let token = voice.user_token("alice", ALICE_PIN).await;
    let answer = voice.create(Some(&token), &second.resource_uri).await;
    answer.expect(403, "a blocked RS over the raw API");
    assert_eq!(answer.error(), "resource_server_blocked");
    // Its registration is refused.
    let (status, body) = register(&h.cs_origin, &h.rs_origin).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("blocked")),
        "{body}"
    );
    let (_, list, _) = cheq_async(&["rs", "list", "--config", &h.cs_config]).await;
    assert!(
        list.lines()
            .any(|l| l.starts_with(&h.rs_origin) && l.contains("blocked")),
        "{list}"
    );

    // The RS takes decisions again, but the blocked one's decision is not
    // tried: the worker looks at it twice and leaves it pending, untried.
    h.shim.gate.store(false, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut looks = Vec::new();
    while looks.len() < 3 {
        let (a, next_try, last_error) = pending(&h.record());
        assert_eq!(a, attempts, "a blocked RS's delivery was tried");
        if last_error.as_deref() == Some(cheq::confirm::flow::deliver::BLOCKED_WAIT)
            && looks.last() != Some(&next_try)
        {
            looks.push(next_try);
        }
        assert!(
            Instant::now() < deadline,
            "the worker never looked: {looks:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, result) = result_of(&pack.result_uri).await;
    assert_eq!(status, 202, "the RS ran nothing: {result}");

    // Unblocked: served again, and the decision goes out.
    let (ok, out, err) =
        cheq_async(&["rs", "unblock", &h.rs_origin, "--config", &h.cs_config]).await;
    assert!(ok && out.contains("unblocked"), "{out}{err}");
    h.until_link(&uri, 303, Duration::from_secs(5)).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, result) = result_of(&pack.result_uri).await;
        if status == 200 {
            assert_eq!(result["status"], "accepted", "{result}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not delivered after unblock: {result}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(matches!(
        h.record().delivery,
        cheq::store::cs::Delivery::Delivered { .. }
    ));

    // Removed: no longer served, and it may register again.
    let (ok, out, err) =
        cheq_async(&["rs", "remove", &h.rs_origin, "--config", &h.cs_config]).await;
    assert!(ok && out.contains("removed"), "{out}{err}");
    h.until_link(&uri, 400, Duration::from_secs(5)).await;
    let (ok, _, err) = cheq_async(&["rs", "remove", &h.rs_origin, "--config", &h.cs_config]).await;
    assert!(!ok && err.contains("not registered"), "{err}");
    let (status, body) = register(&h.cs_origin, &h.rs_origin).await;
    assert_eq!(status, 201, "{body}");
    h.stop().await;
}

/// A resource server of the CS's file may take the CS's client assertion
/// instead of a secret (`auth = "private_key_jwt"`): the whole flow runs
/// with no secret of the CS's configured anywhere.
#[actix_web::test]
async fn a_configured_resource_server_may_take_the_cs_key_instead_of_a_secret() {
    let h = Hosting::with(true).await;
    let pack = invoke_flight(&h.rs_origin).await;
    let mut b = Browser::new(&h.cs_origin);
    let (path, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let outcome = b.decide(&path, &page, "accept").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, result) = result_of(&pack.result_uri).await;
        if status == 200 {
            assert_eq!(result["status"], "accepted", "{result}");
            break;
        }
        assert!(Instant::now() < deadline, "not delivered: {result}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(h.shim.verified.load(Ordering::SeqCst) >= 1);
    let config = std::fs::read_to_string(&h.cs_config).unwrap();
    assert!(!config.contains(CS_SECRET), "no secret in the CS's file");
    // Its origin is the file's: no registration takes it (one would be
    // stored unused, and served unnoticed the day the file drops it).
    let (status, body) = register(&h.cs_origin, &h.rs_origin).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_resource")),
        "{body}"
    );
    assert!(
        h.cs.cs.registrations().list().unwrap().is_empty(),
        "nothing stored"
    );
    h.stop().await;
}

// ---------------------------------------------------------------------------
// Two CS processes on one PostgreSQL database
// ---------------------------------------------------------------------------

fn postgres() -> bool {
    cheq::store::testing::can_run(
        "the registration tests on PostgreSQL",
        &[cheq::store::testing::Outside::Postgres],
    )
}

/// The status of the start link of `uri` at the CS `base`.
async fn link_status(base: &str, uri: &str) -> u16 {
    let url =
        reqwest::Url::parse_with_params(&format!("{base}/"), &[("resource_uri", uri)]).unwrap();
    http_client()
        .get(url)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Polls the start link of `uri` at every base until each answers
/// `status`; the time it took (at most 5 s, with the logs on failure).
async fn until_everywhere(bases: &[&str], uri: &str, status: u16, logs: &[&Proc]) -> Duration {
    let started = Instant::now();
    for base in bases {
        loop {
            let got = link_status(base, uri).await;
            if got == status {
                break;
            }
            if started.elapsed() > Duration::from_secs(5) {
                let logs: Vec<String> = logs.iter().map(|p| p.log()).collect();
                panic!(
                    "{base} answers {got}, not {status}, 5 s on\n{}",
                    logs.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    started.elapsed()
}

/// A CS configuration: open registration, loopback allowed, `more` at the
/// top (`database_url`, `trusted_proxies`).
fn host_toml(dir: &std::path::Path, port: u16, more: &str) -> String {
    let text = format!(
        "listen = \"127.0.0.1:{port}\"\npublic_url = \"http://127.0.0.1:{port}\"\n\
         data_dir = \"{data}\"\nsigning_key = \"{key}\"\nmetrics = \"open\"\n{more}\n{OPEN_LOOPBACK}",
        data = toml_path(&dir.join("cs")),
        key = toml_path(&dir.join("cs.jwk")),
    );
    let path = dir.join("cs.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn two_instances_on_one_database_serve_and_refuse_within_5_s() {
    if !postgres() {
        return;
    }
    let db = cheq::store::pg::test_database("registration").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (p1, p2) = (free_port(), free_port());
    let config = host_toml(dir.path(), p1, &format!("database_url = {db:?}"));
    let (cs1, cs2) = (
        format!("http://127.0.0.1:{p1}"),
        format!("http://127.0.0.1:{p2}"),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let a = start_server(
            "cs1",
            &["serve", "--config", &config],
            &dir.path().join("cs1.log"),
            &cs1,
        )
        .await;
        let listen = format!("127.0.0.1:{p2}");
        let b = start_server_with(
            "cs2",
            &["serve", "--config", &config],
            &[("CHEQ_LISTEN", &listen)],
            &dir.path().join("cs2.log"),
            &cs2,
        )
        .await;
        let logs = [&a, &b];
        let rs = DocServer::rs(|_, _| {});
        let uri = format!("{}/cheq/confirmations/abc", rs.origin);
        assert_eq!(link_status(&cs1, &uri).await, 400);
        assert_eq!(link_status(&cs2, &uri).await, 400);

        // Registered at the first, served by the second.
        let (status, body) = register(&cs1, &rs.origin).await;
        assert_eq!(status, 201, "{body}");
        let took = until_everywhere(&[&cs2, &cs1], &uri, 303, &logs).await;
        println!("a registration at instance 1 served by instance 2 after {took:?}");

        // Blocked in the database itself, while both run.
        let (ok, out, err) = cheq_cmd(&["rs", "block", &rs.origin, "--config", &config]);
        assert!(ok, "{out}{err}");
        let took = until_everywhere(&[&cs2, &cs1], &uri, 403, &logs).await;
        println!("a block refused by both instances after {took:?}");
        let (status, body) = register(&cs2, &rs.origin).await;
        assert_eq!((status, body["error"].as_str()), (403, Some("blocked")));
        let (ok, list, _) = cheq_cmd(&["rs", "list", "--config", &config]);
        assert!(ok);
        assert!(
            list.lines()
                .any(|l| l.starts_with(&rs.origin) && l.contains("blocked")),
            "{list}"
        );

        let (ok, out, err) = cheq_cmd(&["rs", "unblock", &rs.origin, "--config", &config]);
        assert!(ok, "{out}{err}");
        let took = until_everywhere(&[&cs1, &cs2], &uri, 303, &logs).await;
        println!("an unblock served by both instances after {took:?}");

        let (ok, out, err) = cheq_cmd(&["rs", "remove", &rs.origin, "--config", &config]);
        assert!(ok, "{out}{err}");
        until_everywhere(&[&cs1, &cs2], &uri, 400, &logs).await;

        // Blocked before it ever registered: refused on both.
        let other = DocServer::rs(|_, _| {});
        let (ok, _, err) = cheq_cmd(&["rs", "block", &other.origin, "--config", &config]);
        assert!(ok, "{err}");
        for base in [&cs1, &cs2] {
            let (status, body) = register(base, &other.origin).await;
            assert_eq!((status, body["error"].as_str()), (403, Some("blocked")));
        }
        assert_eq!(other.hits(), 0);
    });
}

// ---------------------------------------------------------------------------
// A flood of registrations
// ---------------------------------------------------------------------------

/// The time one browser sign-in takes at `base`.
async fn sign_in_time(base: &str) -> Duration {
    let mut b = Browser::new(base);
    let started = Instant::now();
    b.sign_in("alice", ALICE_PW).await;
    started.elapsed()
}

#[test]
fn a_flood_of_registrations_is_refused_past_the_rate_and_users_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // Behind a proxy on loopback: the flood names many addresses.
    let config = host_toml(dir.path(), port, "trusted_proxies = [\"127.0.0.1\"]");
    let (ok, out) = user_add("alice", ALICE_PW, &["--config", &config]);
    assert!(ok, "{out}");
    let base = format!("http://127.0.0.1:{port}");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cs = start_server(
            "cs",
            &["serve", "--config", &config],
            &dir.path().join("cs.log"),
            &base,
        )
        .await;
        // At rest: the middle of three.
        let mut rest = Vec::new();
        for _ in 0..3 {
            rest.push(sign_in_time(&base).await);
        }
        rest.sort();
        let at_rest = rest[1];

        let rs = DocServer::rs(|_, _| {});
        let http = http_client();
        let statuses = Arc::new(Mutex::new(Vec::<(&str, u16)>::new()));
        let flood = Arc::new(AtomicBool::new(true));
        let mut tasks = tokio::task::JoinSet::new();
        // One origin from many addresses, and one address for many
        // origins (nothing listens there: each fetch is refused at once), 16
        // requests at a time each, until the sign-ins are measured.
        for kind in ["one origin", "one address"] {
            for worker in 0..16 {
                let (http, statuses, flood) = (http.clone(), statuses.clone(), flood.clone());
                let (base, origin) = (base.clone(), rs.origin.clone());
                tasks.spawn(async move {
                    let mut n = 0u32;
                    while flood.load(Ordering::SeqCst) {
                        n += 1;
                        let (origin, from) = match kind {
                            "one origin" => (origin.clone(), format!("198.51.{worker}.{}", n % 250)),
                            // Port 1 of loopback addresses: nothing listens
                            // there, whatever else runs on this machine.
                            _ => (format!("http://127.{worker}.{}.{}:1", n / 250 % 250, n % 250 + 1), "203.0.113.7".to_owned()),
                        };
                        let (status, _, _) = register_with(
                            &http,
                            &base,
                            &json!({ "resource": origin }),
                            None,
                            Some(&from),
                        )
                        .await;
                        statuses.lock().unwrap().push((kind, status));
                    }
                });
            }
        }
        // The flood is on: measure the sign-ins meanwhile.
        while statuses.lock().unwrap().len() < 200 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut during = Vec::new();
        for _ in 0..3 {
            during.push(sign_in_time(&base).await);
        }
        during.sort();
        let in_flood = during[1];
        flood.store(false, Ordering::SeqCst);
        while tasks.join_next().await.is_some() {}
        let statuses = statuses.lock().unwrap().clone();
        let count = |kind: &str, status: u16| {
            statuses
                .iter()
                .filter(|(k, s)| *k == kind && *s == status)
                .count()
        };
        println!(
            "a browser sign-in: {at_rest:?} at rest, {in_flood:?} during a flood of {} registrations",
            statuses.len()
        );
        // One origin: its allowance registered (201 then 200s), the rest 429.
        let allowed = cheq::confirm::auth::limits::REGISTRATION_ORIGIN.free_failures as usize;
        assert_eq!(count("one origin", 201), 1, "{statuses:?}");
        assert_eq!(count("one origin", 200), allowed - 1);
        assert!(count("one origin", 429) > 100, "{statuses:?}");
        // One address: its allowance tried (each 400: nothing listens),
        // the rest 429.
        let allowed = cheq::confirm::auth::limits::REGISTRATION_ADDRESS.free_failures as usize;
        assert_eq!(count("one address", 400), allowed);
        assert!(count("one address", 429) > 100);
        assert!(
            statuses.iter().all(|(_, s)| [200, 201, 400, 429].contains(s)),
            "{statuses:?}"
        );
        assert!(
            in_flood <= at_rest * 2 + Duration::from_millis(750),
            "a sign-in took {in_flood:?} during the flood, {at_rest:?} at rest\n{}",
            cs.log()
        );
        assert_eq!(rs.hits(), 2 * 10, "each registration of the origin fetched its two documents");
    });
}
