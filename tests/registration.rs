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

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use cheq::discovery::{CsConfiguration, CS_CONFIGURATION_PATH};
use cheq::sign::assertion::{verify_client_assertion, Expected, ASSERTION_TYPE};
use cheq::store::registrations::RegistrationStatus;
use common::*;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The `[registration]` table of an open host that may fetch loopback.
const OPEN_LOOPBACK: &str =
    "\n[registration]\nmode = \"open\"\nallow_addresses = [\"127.0.0.0/8\"]\n";

// ---------------------------------------------------------------------------
// A small HTTP server that serves what a test tells it
// ---------------------------------------------------------------------------

/// One answer of a [`DocServer`].
#[derive(Clone)]
struct Reply {
    head: String,
    body: Vec<u8>,
    delay: Duration,
}

impl Reply {
    fn json(v: &Value) -> Reply {
        Reply::with("200 OK\r\ncontent-type: application/json", v.to_string())
    }

    fn with(head: &str, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            head: head.to_owned(),
            body: body.into(),
            delay: Duration::ZERO,
        }
    }

    fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}

type Answer = dyn Fn(&str, &str) -> Reply + Send + Sync;

/// A threaded HTTP/1.1 server on 127.0.0.1 that answers each `GET` with
/// `answer(its own origin, the path)`, and counts the requests.
struct DocServer {
    origin: String,
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl DocServer {
    fn start(answer: impl Fn(&str, &str) -> Reply + Send + Sync + 'static) -> DocServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let origin = format!("http://127.0.0.1:{port}");
        let hits = Arc::new(AtomicUsize::new(0));
        let answer: Arc<Answer> = Arc::new(answer);
        let (own, counted) = (origin.clone(), hits.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let (answer, own, counted) = (answer.clone(), own.clone(), counted.clone());
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut first = String::new();
                    let _ = reader.read_line(&mut first);
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty()
                        {
                            break;
                        }
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    let path = first.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let reply = answer(&own, &path);
                    std::thread::sleep(reply.delay);
                    let mut out = format!(
                        "HTTP/1.1 {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        reply.head,
                        reply.body.len()
                    )
                    .into_bytes();
                    out.extend_from_slice(&reply.body);
                    let _ = stream.write_all(&out);
                });
            }
        });
        DocServer { origin, port, hits }
    }

    /// An RS whose documents are as §16.2 says, with `change` applied to
    /// its discovery document.
    fn rs(change: impl Fn(&str, &mut Value) + Send + Sync + 'static) -> DocServer {
        DocServer::start(move |origin, path| match path {
            "/.well-known/cheq-resource" => {
                let mut doc = rs_document(origin, "/cheq/confirmations/", "/oauth/token");
                change(origin, &mut doc);
                Reply::json(&doc)
            }
            "/.well-known/jwks.json" => Reply::json(&rs_keys()),
            _ => Reply::with("404 Not Found", ""),
        })
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// An RS discovery document (§16.2) for `origin`.
fn rs_document(origin: &str, prefix: &str, token_path: &str) -> Value {
    json!({
        "resource": origin,
        "name": "Example Air",
        "resource_prefix": format!("{origin}{prefix}"),
        "jwks_uri": format!("{origin}/.well-known/jwks.json"),
        "token_endpoint": format!("{origin}{token_path}"),
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "private_key_jwt"],
    })
}

/// A key set with one public key.
fn rs_keys() -> Value {
    let key = cheq::sign::SigningKey::from_seed("rs-1", &[7; 32]).unwrap();
    json!({"keys": [key.public_jwk()]})
}

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
    let json = serde_json::from_str(&text)
        .unwrap_or_else(|_| panic!("not JSON: {status} {text}"));
    (status, headers, json)
}

async fn register(cs: &str, origin: &str) -> (u16, Value) {
    let (status, _, body) =
        register_with(&http_client(), cs, &json!({ "resource": origin }), None, None).await;
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
            cs_toml_tables: if open { OPEN_LOOPBACK.into() } else { String::new() },
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
        assert!(v.get("push_key").is_none() && v.get("inbox").is_none(), "{v}");
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
        (json!({"resource": "file:///etc/passwd"}), "invalid_resource"),
    ] {
        let (status, _, answer) = register_with(&http, &env.cs_origin, &body, None, None).await;
        assert_eq!((status, answer["error"].as_str()), (400, Some(code)), "{body}: {answer}");
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
                "/.well-known/cheq-resource" => Reply::json(&rs_document(
                    origin,
                    "/cheq/confirmations/",
                    "/oauth/token",
                )),
                _ => Reply::json(&json!({"keys": [{"kty": "oct", "k": "AAAA"}]})),
            }),
            "key set is not a usable JWKS",
        ),
        (
            "a key set with no key",
            DocServer::start(|origin, path| match path {
                "/.well-known/cheq-resource" => Reply::json(&rs_document(
                    origin,
                    "/cheq/confirmations/",
                    "/oauth/token",
                )),
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
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_resource")), "{body}");
    assert!(
        body["error_description"].as_str().unwrap().contains("did not answer in time"),
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
    assert_eq!(stored(&env), [good.origin.clone()]);
    // Again: a refresh.
    let (status, body) = register(&env.cs_origin, &format!("{}/", good.origin)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(stored(&env), [good.origin.clone()]);
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
        (format!("https://[::ffff:127.0.0.1]:{}", rs.port), "does not fetch"),
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
    let (status, _, answer) =
        register_with(&http, &env.cs_origin, &body, Some(&token), None).await;
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
    assert_eq!((status, answer["error"].as_str()), (401, Some("invalid_token")));
    assert_eq!(other.hits(), 0);
    assert_eq!(stored(&env), [good.origin.clone()]);
    env.stop().await;
}
