//! The resource server's side of discovery, registration and keys instead
//! of shared secrets (PROTOCOL.md §16), on real sockets: the reference RS
//! in this process (its clock a `ManualClock`), and a confirmation server
//! played by a small HTTP server of the test that serves a discovery
//! document and a key set signed for with a test key, and records the
//! registrations it is sent.
//!
//! - `/.well-known/cheq-resource` of each shape (a CS named in full, by
//!   issuer, the confirmation inside the RS);
//! - a CS named by its issuer alone: the RS starts while it is down, mints
//!   only once its document is read;
//! - `private_key_jwt` at the token endpoint: each deviation `401`, mixed
//!   authentication `400`, the lock-out per address; a replay refused on
//!   the same instance and across two instances on one PostgreSQL database;
//! - a token by assertion reads and decides only its CS's CHEQs: another
//!   CS's CHEQ is `404`, another CS's countersignature `403
//!   wrong_confirmation_server`, the CHEQ still pending;
//! - self-registration: the POST, back-off on `500`, a stop on `403`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

#[path = "support/rs_kit.rs"]
mod rs_kit;

use actix_web::{web, App, HttpResponse, HttpServer};
use cheq::cheq::UriPack;
use cheq::configfile::ServerConfig as _;
use cheq::resource::registration::RegistrationState;
use cheq::resource::RsConfig;
use cheq::sign::assertion::{client_assertion, AssertionClaims, ASSERTION_TYPE};
use cheq::sign::{b64, Decision, Jwks, SigningKey};
use cheq::time::{Clock, ManualClock};
use cheq_core::discovery::ResourceDocument;
use chrono::{Duration, Utc};
use reqwest::StatusCode;
use rs_kit::{Countersigning, Rs, AGENT_SECRET, CS_SECRET};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

fn key_a() -> SigningKey {
    SigningKey::from_seed("cs-a", &[11u8; 32]).unwrap()
}
fn key_b() -> SigningKey {
    SigningKey::from_seed("cs-b", &[12u8; 32]).unwrap()
}

fn set_of(key: &SigningKey) -> Jwks {
    Jwks::new(vec![key.public_key()]).unwrap()
}

// ---------------------------------------------------------------------------
// The confirmation server: a document, a key set, a registration endpoint
// ---------------------------------------------------------------------------

#[derive(Default)]
struct FakeCs {
    base: Mutex<String>,
    /// Answers 503 for its document while set.
    down: AtomicBool,
    /// Offers a `registration_endpoint`.
    registration: AtomicBool,
    /// The statuses of successive registrations (the last one repeats).
    answers: Mutex<VecDeque<u16>>,
    /// The registrations received: when, and the body.
    posts: Mutex<Vec<(Instant, Value)>>,
}

impl FakeCs {
    fn base(&self) -> String {
        self.base.lock().unwrap().clone()
    }
    fn posts(&self) -> Vec<(Instant, Value)> {
        self.posts.lock().unwrap().clone()
    }
}

async fn document(cs: web::Data<FakeCs>) -> HttpResponse {
    if cs.down.load(Ordering::SeqCst) {
        return HttpResponse::ServiceUnavailable().finish();
    }
    let base = cs.base();
    let mut doc = json!({
        "issuer": base,
        "confirmation_uri": format!("{base}/confirm"),
        "jwks_uri": format!("{base}/.well-known/jwks.json"),
        "versions": ["1.0"],
    });
    if cs.registration.load(Ordering::SeqCst) {
        doc["registration_endpoint"] = json!(format!("{base}/api/v1/resource-servers"));
    }
    HttpResponse::Ok()
        .insert_header(("cache-control", "max-age=300"))
        .json(doc)
}

async fn jwks() -> HttpResponse {
    let set = set_of(&key_a());
    HttpResponse::Ok()
        .insert_header(("cache-control", "max-age=300"))
        .content_type("application/json")
        .body(set.to_json().to_string())
}

async fn register(cs: web::Data<FakeCs>, body: web::Bytes) -> HttpResponse {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    cs.posts
        .lock()
        .unwrap()
        .push((Instant::now(), body.clone()));
    let status = {
        let mut answers = cs.answers.lock().unwrap();
        if answers.len() > 1 {
            answers.pop_front().unwrap()
        } else {
            answers.front().copied().unwrap_or(201)
        }
    };
    HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap()).json(json!({
        "resource": body["resource"],
        "name": "x",
        "status": "active",
    }))
}

/// Starts a CS on loopback: (its state, its origin).
fn start_cs(registration: bool, answers: &[u16]) -> (Arc<FakeCs>, String) {
    let cs = Arc::new(FakeCs::default());
    cs.registration.store(registration, Ordering::SeqCst);
    *cs.answers.lock().unwrap() = answers.iter().copied().collect();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    *cs.base.lock().unwrap() = base.clone();
    let data = web::Data::from(cs.clone());
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .route("/.well-known/cheq-configuration", web::get().to(document))
            .route("/.well-known/jwks.json", web::get().to(jwks))
            .route("/api/v1/resource-servers", web::post().to(register))
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    (cs, base)
}

// ---------------------------------------------------------------------------
// The resource server
// ---------------------------------------------------------------------------

/// How the RS names its CS.
enum Named<'a> {
    Issuer(&'a str),
    /// In full, with a key file holding `key`'s public key.
    InFull(&'a str, Jwks),
}

struct Setup<'a> {
    named: Named<'a>,
    /// A `cs` client with a secret.
    cs_client: bool,
    /// Top-level lines (name, database_url, …).
    top: String,
}

fn config(dir: &Path, public_port: u16, listen_port: u16, s: &Setup<'_>) -> RsConfig {
    let cs = match &s.named {
        Named::Issuer(issuer) => format!("issuer = \"{issuer}\""),
        Named::InFull(uri, keys) => {
            let path = dir.join("cs-jwks.json");
            std::fs::write(&path, keys.to_json().to_string()).unwrap();
            format!("uri = \"{uri}\"\njwks_file = \"{}\"", path.display())
        }
    };
    let cs_client = if s.cs_client {
        format!("[[clients]]\nclient_id = \"cs\"\nclient_secret = \"{CS_SECRET}\"\nrole = \"cs\"\n")
    } else {
        String::new()
    };
    let text = format!(
        r#"
listen = "127.0.0.1:{listen_port}"
public_url = "http://127.0.0.1:{public_port}"
data_dir = "{data}"
signing_key = "{key}"
allow_addresses = ["127.0.0.0/8"]
{top}

[confirmation_server]
{cs}

{cs_client}
[[clients]]
client_id = "agent"
client_secret = "{AGENT_SECRET}"
role = "agent"
subject = "alice"
"#,
        data = dir.join("data").display(),
        key = dir.join("data/rs-key.jwk").display(),
        top = s.top,
    );
    RsConfig::from_toml(&text).unwrap()
}

/// Starts an RS on `listener`, answering for `public_port`'s origin.
async fn start_on(
    dir: &Path,
    listener: std::net::TcpListener,
    public_port: u16,
    clock: Arc<ManualClock>,
    s: &Setup<'_>,
) -> Rs {
    let port = listener.local_addr().unwrap().port();
    Rs::start(listener, &config(dir, public_port, port, s), clock).await
}

async fn start(dir: &Path, s: &Setup<'_>) -> Rs {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    start_on(
        dir,
        listener,
        port,
        Arc::new(ManualClock::new(Utc::now())),
        s,
    )
    .await
}

fn by_issuer(issuer: &str) -> Setup<'_> {
    Setup {
        named: Named::Issuer(issuer),
        cs_client: false,
        top: String::new(),
    }
}

/// The CS as `named`, and a `cs` client with a secret too.
fn with_secret_client(named: Named<'_>) -> Setup<'_> {
    Setup {
        named,
        cs_client: true,
        top: String::new(),
    }
}

/// Waits until `done` holds, for at most `secs` seconds.
async fn until(secs: u64, what: &str, done: impl Fn() -> bool) {
    let end = Instant::now() + std::time::Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < end, "{what}: not within {secs} s");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

impl Rs {
    fn now(&self) -> i64 {
        self.clock.now().timestamp()
    }

    fn token_endpoint(&self) -> String {
        format!("{}/oauth/token", self.base)
    }

    async fn discovered(&self) {
        let cheq = self.state.cheq.clone();
        until(15, "the CS's document read", move || {
            cheq.confirmation_uri().is_some()
        })
        .await;
    }

    fn registration(&self) -> RegistrationState {
        self.state
            .cheq
            .confirmation_server()
            .discovered()
            .unwrap()
            .registration()
    }

    /// Waits until `done` holds of its registration at its CS, for at most
    /// `secs` seconds.
    async fn registration_until(
        &self,
        secs: u64,
        what: &str,
        done: impl Fn(&RegistrationState) -> bool,
    ) {
        let state = self.state.clone();
        until(secs, what, move || {
            done(
                &state
                    .cheq
                    .confirmation_server()
                    .discovered()
                    .unwrap()
                    .registration(),
            )
        })
        .await;
    }

    async fn token_request(&self, form: &[(&str, &str)]) -> (StatusCode, Value) {
        let res = self
            .http
            .post(self.token_endpoint())
            .form(form)
            .send()
            .await
            .unwrap();
        (res.status(), res.json().await.unwrap_or(Value::Null))
    }

    async fn by_assertion(&self, assertion: &str) -> (StatusCode, Value) {
        self.token_request(&[
            ("grant_type", "client_credentials"),
            ("scope", "cheq"),
            ("client_assertion_type", ASSERTION_TYPE),
            ("client_assertion", assertion),
        ])
        .await
    }

    /// A token for the CS of `issuer`, by an assertion signed with `key`.
    async fn cs_token(&self, key: &SigningKey, issuer: &str) -> String {
        let (status, body) = self
            .by_assertion(&assertion(key, issuer, &self.token_endpoint(), self.now()))
            .await;
        assert_eq!(status, 200, "{body}");
        body["access_token"].as_str().unwrap().to_owned()
    }

    /// The CHEQ of `pack` (read with `token`) accepted and countersigned
    /// with `key`.
    async fn countersigned(&self, token: &str, pack: &UriPack, key: &SigningKey) -> String {
        self.countersigned_with(
            pack,
            Countersigning {
                token,
                confirmation_uri: &pack.confirmation_uri,
                key,
                decision: Decision::Accept,
                collected: None,
                iat_offset: 0,
            },
        )
        .await
    }

    /// Posts an acceptance with `token`.
    async fn decide(&self, token: &str, resource_uri: &str, body: &str) -> (StatusCode, Value) {
        self.post_with(token, resource_uri, "accept", body).await
    }

    async fn resource_document(&self) -> (reqwest::header::HeaderMap, Vec<u8>) {
        let res = self
            .http
            .get(format!("{}/.well-known/cheq-resource", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        (res.headers().clone(), res.bytes().await.unwrap().to_vec())
    }
}

/// A fresh assertion of `issuer` for `audience`, issued at `at`.
fn assertion(key: &SigningKey, issuer: &str, audience: &str, at: i64) -> String {
    let jti = b64::encode(rand::random::<[u8; 16]>());
    client_assertion(
        key,
        &AssertionClaims {
            issuer,
            audience,
            jti: &jti,
            issued_at: at,
        },
    )
}

/// Signs `header` and `claims` as given with the Ed25519 key of `seed`
/// (what no signer of cheq would make).
fn forged(seed: u8, header: &Value, claims: &Value) -> String {
    use ed25519_dalek::Signer as _;
    let input = format!(
        "{}.{}",
        b64::encode(header.to_string()),
        b64::encode(claims.to_string())
    );
    let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
    let signature = key.sign(input.as_bytes()).to_bytes();
    format!("{input}.{}", b64::encode(signature))
}

// ---------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------

/// `/.well-known/cheq-resource` in each shape: what it names is on the RS's
/// origin (a reader of §16.2 takes it), and the methods say how a CS
/// authenticates.
#[actix_web::test]
async fn the_discovery_document_of_each_shape() {
    let (_cs, issuer) = start_cs(false, &[]);
    let read = |rs: &Rs, bytes: &[u8]| ResourceDocument::read(bytes, &rs.base).unwrap();

    // By issuer, with a secret client too, and a name.
    let dir = tempfile::tempdir().unwrap();
    let rs = start(
        dir.path(),
        &Setup {
            named: Named::Issuer(&issuer),
            cs_client: true,
            top: "name = \"Example Air\"".into(),
        },
    )
    .await;
    let (headers, bytes) = rs.resource_document().await;
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    assert!(headers["cache-control"]
        .to_str()
        .unwrap()
        .contains("max-age="));
    let doc = read(&rs, &bytes);
    assert_eq!(doc.resource, rs.base);
    assert_eq!(doc.name, "Example Air");
    assert_eq!(
        doc.resource_prefix,
        format!("{}/cheq/confirmations/", rs.base)
    );
    assert_eq!(doc.jwks_uri, format!("{}/.well-known/jwks.json", rs.base));
    assert_eq!(doc.token_endpoint, rs.token_endpoint());
    assert_eq!(
        doc.token_endpoint_auth_methods_supported,
        ["client_secret_basic", "private_key_jwt"]
    );
    assert!(doc.takes_private_key_jwt());
    // The prefix is where resource URIs are.
    rs.discovered().await;
    let pack = rs.pending_flight().await;
    assert!(pack.resource_uri.starts_with(&doc.resource_prefix));
    rs.stop().await;

    // By issuer alone: the key only.
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path(), &by_issuer(&issuer)).await;
    let doc = read(&rs, &rs.resource_document().await.1);
    assert_eq!(
        doc.token_endpoint_auth_methods_supported,
        ["private_key_jwt"]
    );
    rs.stop().await;

    // Named in full with a secret client: the secret only; the name is
    // the host.
    let dir = tempfile::tempdir().unwrap();
    let rs = start(
        dir.path(),
        &with_secret_client(Named::InFull(
            "http://127.0.0.1:9/confirm",
            set_of(&key_a()),
        )),
    )
    .await;
    // A user may still choose a CS by issuer (§17): its own key is taken.
    let doc = read(&rs, &rs.resource_document().await.1);
    assert_eq!(
        doc.token_endpoint_auth_methods_supported,
        ["client_secret_basic", "private_key_jwt"]
    );
    assert!(doc.takes_private_key_jwt());
    assert_eq!(doc.name, rs.base.trim_start_matches("http://"));
    rs.stop().await;

    // The confirmation inside the RS (§12): the same document; only a CS a
    // user chose authenticates at its token endpoint, with its own key.
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let data = dir.path().join("data");
    let config = RsConfig::from_toml(&format!(
        "listen = \"127.0.0.1:{port}\"\npublic_url = \"http://127.0.0.1:{port}\"\n\
         data_dir = \"{}\"\nsigning_key = \"{}\"\nname = \"Hosted Air\"\n\
         [confirmation]\nembedded = true\n\
         [[clients]]\nclient_id = \"agent\"\nclient_secret = \"{AGENT_SECRET}\"\n\
         role = \"agent\"\nsubject = \"alice\"\n",
        data.display(),
        data.join("rs.jwk").display(),
    ))
    .unwrap();
    let state = cheq::colocated::build_state(&config, Arc::new(ManualClock::new(Utc::now())))
        .await
        .unwrap();
    let server = cheq::colocated::serve(listener, &state).unwrap();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    let base = format!("http://127.0.0.1:{port}");
    let bytes = reqwest::get(format!("{base}/.well-known/cheq-resource"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let doc = ResourceDocument::read(&bytes, &base).unwrap();
    assert_eq!(doc.name, "Hosted Air");
    assert_eq!(doc.token_endpoint, format!("{base}/oauth/token"));
    assert_eq!(
        doc.token_endpoint_auth_methods_supported,
        ["private_key_jwt"]
    );
    handle.stop(true).await;
}

/// The RS starts while its CS is down; until it has read the CS's
/// document nothing is minted (503, in JSON) and no assertion is taken
/// (503); once read, the URI pack names the CS's confirmation URI.
#[actix_web::test]
async fn an_issuer_alone_is_enough_and_the_cs_may_come_later() {
    let (cs, issuer) = start_cs(false, &[]);
    cs.down.store(true, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path(), &by_issuer(&issuer)).await;
    let res = rs.flight(500).await;
    assert_eq!(res.status(), 503);
    assert!(res.headers().get("retry-after").is_some());
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "confirmation_server_unavailable", "{body}");
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains(&issuer),
        "{body}"
    );
    let (status, body) = rs
        .by_assertion(&assertion(
            &key_a(),
            &issuer,
            &rs.token_endpoint(),
            rs.now(),
        ))
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "temporarily_unavailable");

    cs.down.store(false, Ordering::SeqCst);
    rs.discovered().await;
    let pack = rs.pending_flight().await;
    assert_eq!(pack.confirmation_uri, format!("{issuer}/confirm"));
    // No registration offered: none tried.
    assert_eq!(rs.registration(), RegistrationState::NotOffered);
    assert!(cs.posts().is_empty());
    rs.stop().await;
}

/// Every deviation of a client assertion is `401 invalid_client`, each for
/// its own reason; two methods at once are `400`; failures lock the
/// address out.
#[actix_web::test]
async fn each_deviation_of_an_assertion_is_refused() {
    let (_cs, issuer) = start_cs(false, &[]);
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path(), &with_secret_client(Named::Issuer(&issuer))).await;
    rs.discovered().await;
    let aud = rs.token_endpoint();
    let now = rs.now();

    let good = assertion(&key_a(), &issuer, &aud, now);
    let (status, body) = rs.by_assertion(&good).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["scope"], "cheq");

    let claims = |jti: &str| {
        json!({"iss": issuer, "sub": issuer, "aud": aud, "jti": jti,
               "iat": now, "exp": now + 60})
    };
    let header = |kid: &str, typ: &str| json!({"alg": "EdDSA", "kid": kid, "typ": typ});
    let typ = "client-authentication+jwt";
    let cases: Vec<(&str, String, &str)> = vec![
        ("replayed", good.clone(), "used before"),
        (
            "expired",
            assertion(&key_a(), &issuer, &aud, now - 120),
            "expired",
        ),
        (
            "for another audience",
            assertion(&key_a(), &issuer, "https://other.example/oauth/token", now),
            "\"aud\"",
        ),
        (
            "under another typ",
            forged(
                11,
                &header("cs-a", "JWT"),
                &claims("cccccccccccccccccccccccccc"),
            ),
            "typ",
        ),
        (
            "signed by a key not in the CS's set",
            forged(
                12,
                &header("cs-b", typ),
                &claims("dddddddddddddddddddddddddd"),
            ),
            "not in the confirmation server's key set",
        ),
        (
            "by a CS the RS does not trust",
            assertion(&key_a(), "https://other-cs.example", &aud, now),
            "not a confirmation server this resource server trusts",
        ),
        (
            "with a bad signature",
            forged(
                13,
                &header("cs-a", typ),
                &claims("eeeeeeeeeeeeeeeeeeeeeeeeee"),
            ),
            "signature does not verify",
        ),
        (
            "living longer than a minute",
            forged(
                11,
                &header("cs-a", typ),
                &json!({"iss": issuer, "sub": issuer, "aud": aud,
                        "jti": "ffffffffffffffffffffffffff", "iat": now, "exp": now + 600}),
            ),
            "longer than",
        ),
        ("not a JWS", "garbage".into(), "compact JWS"),
    ];
    for (what, a, reason) in &cases {
        let (status, body) = rs.by_assertion(a).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert_eq!(body["error"], "invalid_client", "{what}");
        let said = body["error_description"].as_str().unwrap();
        assert!(said.contains(reason), "{what}: {said}");
    }
    // The wrong assertion type.
    let (status, body) = rs
        .token_request(&[
            ("grant_type", "client_credentials"),
            ("client_assertion_type", "urn:example:other"),
            ("client_assertion", &assertion(&key_a(), &issuer, &aud, now)),
        ])
        .await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"], "invalid_client");
    // A client_id that is not the issuer.
    let (status, body) = rs
        .token_request(&[
            ("grant_type", "client_credentials"),
            ("client_id", "cs"),
            ("client_assertion_type", ASSERTION_TYPE),
            ("client_assertion", &assertion(&key_a(), &issuer, &aud, now)),
        ])
        .await;
    assert_eq!(status, 401, "{body}");

    // Two methods at once: a bad request, whatever the assertion.
    let fresh = assertion(&key_a(), &issuer, &aud, now);
    let res = rs
        .http
        .post(&aud)
        .basic_auth("cs", Some(CS_SECRET))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_assertion_type", ASSERTION_TYPE),
            ("client_assertion", &fresh),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "invalid_request");
    let (status, body) = rs
        .token_request(&[
            ("grant_type", "client_credentials"),
            ("client_secret", CS_SECRET),
            ("client_assertion_type", ASSERTION_TYPE),
            ("client_assertion", &fresh),
        ])
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "invalid_request");
    // Nothing of those took the fresh assertion: it is still good.
    assert_eq!(rs.by_assertion(&fresh).await.0, 200);

    // Failed authentications lock the address out, assertion or secret.
    let mut locked = false;
    for _ in 0..25 {
        let (status, _) = rs
            .by_assertion(&assertion(&key_b(), &issuer, &aud, now))
            .await;
        if status == 429 {
            locked = true;
            break;
        }
        assert_eq!(status, 401);
    }
    assert!(locked, "no lock-out after 25 failures");
    let (status, _) = rs
        .by_assertion(&assertion(&key_a(), &issuer, &aud, now))
        .await;
    assert_eq!(status, 429, "a good assertion from a locked-out address");
    rs.stop().await;
}

/// A token issued by assertion names its CS: it reads only the CHEQs that
/// name that CS (another's is 404) and decides only with that CS's
/// countersignature (another's is 403 and runs nothing); a token of a
/// secret `cs` client is the default CS's, and reads only its CHEQs.
#[actix_web::test]
async fn a_token_by_assertion_reads_and_decides_only_its_cs_cheqs() {
    let (_cs, issuer) = start_cs(false, &[]);
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // First the same RS with another CS, named in full: a CHEQ for it.
    let old = start_on(
        dir.path(),
        listener,
        port,
        clock.clone(),
        &with_secret_client(Named::InFull(
            "http://127.0.0.1:9/confirm",
            set_of(&key_b()),
        )),
    )
    .await;
    let other = old.pending_flight().await;
    assert_eq!(other.confirmation_uri, "http://127.0.0.1:9/confirm");
    // Read by that CS (its secret client) and countersigned with the key
    // of the CS the RS trusts next.
    let old_secret = old.token("cs", CS_SECRET).await;
    let other_by_a = old.countersigned(&old_secret, &other, &key_a()).await;
    old.stop().await;
    // Then by issuer, on the same data.
    let listener = std::net::TcpListener::bind(format!("127.0.0.1:{port}")).unwrap();
    let rs = start_on(
        dir.path(),
        listener,
        port,
        clock,
        &with_secret_client(Named::Issuer(&issuer)),
    )
    .await;
    rs.discovered().await;
    let mine = rs.pending_flight().await;
    assert_eq!(mine.confirmation_uri, format!("{issuer}/confirm"));

    let token = rs.cs_token(&key_a(), &issuer).await;
    assert_eq!(rs.fetch(&token, &mine.resource_uri).await.status(), 200);
    let res = rs.fetch(&token, &other.resource_uri).await;
    assert_eq!(res.status(), 404);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "not_found");
    // The secret client is the default CS's (§17): another CS's CHEQ is
    // not its either.
    let secret = rs.token("cs", CS_SECRET).await;
    assert_eq!(rs.fetch(&secret, &other.resource_uri).await.status(), 404);
    assert_eq!(rs.fetch(&secret, &mine.resource_uri).await.status(), 200);

    // The other CHEQ, countersigned with this CS's key: not its CHEQ.
    let (status, answer) = rs.decide(&token, &other.resource_uri, &other_by_a).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"], "wrong_confirmation_server");

    // Its own CHEQ, countersigned by another CS (a key not in its set):
    // "try again" while its keys may not be read again yet, then 403 once
    // they were and still lack it.
    let by_b = rs.countersigned(&token, &mine, &key_b()).await;
    let (status, answer) = rs.decide(&token, &mine.resource_uri, &by_b).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"], "keys_unavailable");
    rs.clock.advance(Duration::seconds(61));
    let (status, answer) = rs.decide(&token, &mine.resource_uri, &by_b).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"], "wrong_confirmation_server");
    // Countersigned under this CS's key id by another key.
    let impostor = SigningKey::from_seed("cs-a", &[13u8; 32]).unwrap();
    let forged = rs.countersigned(&token, &mine, &impostor).await;
    let (status, answer) = rs.decide(&token, &mine.resource_uri, &forged).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"], "wrong_confirmation_server");
    // Nothing ran; the CHEQ is still pending, for its CS.
    assert_eq!(rs.state.executions(), 0);
    assert_eq!(rs.result(&mine.result_uri).await.0, 202);
    assert_eq!(rs.fetch(&token, &mine.resource_uri).await.status(), 200);

    // Its CS's decision is taken.
    let good = rs.countersigned(&token, &mine, &key_a()).await;
    let (status, answer) = rs.decide(&token, &mine.resource_uri, &good).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "accepted");
    assert_eq!(rs.state.executions(), 1);
    assert_eq!(rs.result(&mine.result_uri).await.0, 200);
    rs.stop().await;
}

/// One assertion, two RS instances on one PostgreSQL database: the second
/// refuses it. Used assertions are collected once expired.
#[actix_web::test]
async fn an_assertion_is_taken_once_across_instances() {
    let Some(url) = cheq::store::pg::test_database_or_skip("rs_assertions") else {
        return;
    };
    let (_cs, issuer) = start_cs(false, &[]);
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup {
        named: Named::Issuer(&issuer),
        cs_client: false,
        top: format!("database_url = \"{url}\""),
    };
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let public = first.local_addr().unwrap().port();
    let second = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let one = start_on(dir.path(), first, public, clock.clone(), &setup).await;
    let two = start_on(dir.path(), second, public, clock.clone(), &setup).await;
    one.discovered().await;
    two.discovered().await;
    // Both answer for one origin: one audience.
    let aud = one.token_endpoint();
    assert_eq!(
        two.state.resource_document.token_endpoint, aud,
        "one public URL"
    );
    let a = assertion(&key_a(), &issuer, &aud, one.now());
    assert_eq!(one.by_assertion(&a).await.0, 200);
    let (status, body) = two.by_assertion(&a).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("used before"),
        "{body}"
    );
    // A fresh one is taken by the second; the token of either instance
    // works on the other.
    let b = assertion(&key_a(), &issuer, &aud, one.now());
    let (status, body) = two.by_assertion(&b).await;
    assert_eq!(status, 200, "{body}");
    let pack = one.pending_flight().await;
    let token = body["access_token"].as_str().unwrap();
    assert_eq!(one.fetch(token, &pack.resource_uri).await.status(), 200);
    // Expired, both records are kept a clock skew longer (an instance
    // whose clock runs behind still takes them until then), then go.
    let collect = || {
        let tokens = one.state.tokens.clone();
        async move {
            tokio::task::spawn_blocking(move || tokens.collect_expired())
                .await
                .unwrap()
                .unwrap()
        }
    };
    clock.advance(Duration::seconds(61));
    assert_eq!(collect().await, 0);
    clock.advance(Duration::seconds(60));
    assert_eq!(collect().await, 2);
    one.stop().await;
    two.stop().await;
}

/// An RS (and its data directory) whose CS answers every registration
/// with `status`, once it has taken that refusal.
async fn refused_with(status: u16) -> (Arc<FakeCs>, tempfile::TempDir, Rs) {
    let (cs, issuer) = start_cs(true, &[status]);
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path(), &by_issuer(&issuer)).await;
    rs.registration_until(15, "refused", |r| {
        *r == RegistrationState::Refused { status }
    })
    .await;
    (cs, dir, rs)
}

/// The RS registers its origin at its CS when the CS offers registration:
/// once after failures (1 s, then 2 s apart), not again after a refusal.
#[actix_web::test]
async fn the_rs_registers_itself_with_back_off_and_stops_when_refused() {
    // Two failures, then registered.
    let (cs, issuer) = start_cs(true, &[500, 500, 201]);
    let dir = tempfile::tempdir().unwrap();
    let rs = start(dir.path(), &by_issuer(&issuer)).await;
    rs.discovered().await;
    rs.registration_until(20, "registered", |r| {
        matches!(r, RegistrationState::Registered { .. })
    })
    .await;
    assert_eq!(
        rs.registration(),
        RegistrationState::Registered {
            endpoint: format!("{issuer}/api/v1/resource-servers")
        }
    );
    let posts = cs.posts();
    assert_eq!(posts.len(), 3, "{posts:?}");
    for (_, body) in &posts {
        assert_eq!(body, &json!({"resource": rs.base}));
    }
    let gaps: Vec<f64> = posts
        .windows(2)
        .map(|w| (w[1].0 - w[0].0).as_secs_f64())
        .collect();
    assert!(gaps[0] >= 0.9 && gaps[1] >= 1.9, "{gaps:?}");
    rs.stop().await;

    // Blocked: one try, then no more.
    let (cs, _dir, rs) = refused_with(403).await;
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert_eq!(cs.posts().len(), 1);
    // The RS serves all the same.
    assert_eq!(rs.flight(500).await.status(), 202);
    rs.stop().await;

    // Registration off at the CS (404): the same.
    let (cs, _dir, rs) = refused_with(404).await;
    assert_eq!(cs.posts().len(), 1);
    rs.stop().await;
}
