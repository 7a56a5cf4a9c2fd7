//! Honest views, end to end through the confirmation server (CS) on real
//! loopback sockets (PROTOCOL.md §4, §5 rule 4, §10):
//!
//! - a CHEQ dated in the future (later than now plus the 60 s clock skew) is
//!   shown as untrustworthy and nothing is countersigned, in the browser and
//!   through the raw API; one dated within the skew is confirmed as usual;
//! - the page shows `parameter unit` beside the value, and the reference
//!   RS's demo price carries `USD`, so money is read from the CHEQ, not
//!   guessed from a parameter's name.
//!
//! The CHEQs with chosen dates come from a small stand-in resource server,
//! registered at the CS and signing with the reference RS's key (which the CS
//! trusts for it). The harness is in `tests/common/mod.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use cheq::sign::{
    b64, sign_resource, verify_decision, Context, Decision, Jwks, SigningKey, TrustStore,
};
use chrono::{Duration, SecondsFormat, Utc};
use common::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const GW: &str = "voice-gw";
const GW_SECRET: &str = "voice-gateway-secret-0123";
const ALICE_PIN: &str = "432100";

/// What the stand-in RS serves (path → signed CHEQ) and what was posted to it.
#[derive(Default)]
struct Served {
    cheqs: Mutex<HashMap<String, String>>,
    /// Every decision posted: (the query, the document).
    decisions: Mutex<Vec<(String, String)>>,
}

/// A stand-in RS: its token endpoint, the CHEQs it was given, and a decision
/// endpoint that records what it gets and answers as §6 says.
fn start_stand_in_rs(listener: std::net::TcpListener, served: Arc<Served>) -> ServerHandle {
    let server = HttpServer::new(move || {
        let served = web::Data::from(served.clone());
        App::new()
            .app_data(served)
            .route(
                "/oauth/token",
                web::post().to(|| async {
                    HttpResponse::Ok().json(json!({
                        "access_token": "stand-in-token", "token_type": "Bearer", "expires_in": 3600
                    }))
                }),
            )
            .route(
                "/cheq/confirmations/{id}",
                web::get().to(|req: HttpRequest, served: web::Data<Served>| async move {
                    match served.cheqs.lock().unwrap().get(req.path()) {
                        Some(doc) => HttpResponse::Ok()
                            .content_type("application/jose+json")
                            .body(doc.clone()),
                        None => HttpResponse::NotFound().finish(),
                    }
                }),
            )
            .route(
                "/cheq/confirmations/{id}",
                web::post().to(
                    |req: HttpRequest, body: String, served: web::Data<Served>| async move {
                        let query = req.query_string().to_owned();
                        let status = if query == "accept" {
                            "accepted"
                        } else {
                            "rejected"
                        };
                        served.decisions.lock().unwrap().push((query, body));
                        HttpResponse::Ok().json(json!({ "status": status }))
                    },
                ),
            )
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    handle
}

/// The CS, the reference RS and the stand-in RS (registered at the CS).
struct World {
    env: Env,
    stand_in: String,
    served: Arc<Served>,
    handle: ServerHandle,
    /// Numbers the resource URIs of the stand-in.
    next: usize,
}

impl World {
    async fn start() -> World {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stand_in = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let env = Env::start(Options {
            extra: vec![ExtraRs {
                origin: stand_in.clone(),
            }],
            gateways: vec![Gateway::new(GW, GW_SECRET)],
            ..Options::default()
        })
        .await;
        env.set_pin("alice", ALICE_PIN);
        let served = Arc::new(Served::default());
        let handle = start_stand_in_rs(listener, served.clone());
        World {
            env,
            stand_in,
            served,
            handle,
            next: 0,
        }
    }

    /// Has the stand-in serve a CHEQ for alice dated `ahead` of now (valid
    /// for an hour after its date) with `parameters`; returns its resource URI.
    fn serve(&mut self, ahead: Duration, parameters: Value) -> String {
        let nonce = b64::encode(rand::random::<[u8; 16]>());
        self.serve_with_nonce(ahead, parameters, &nonce)
    }

    /// The same, with a chosen nonce.
    fn serve_with_nonce(&mut self, ahead: Duration, parameters: Value, nonce: &str) -> String {
        self.next += 1;
        let path = format!(
            "/cheq/confirmations/Zm9yLWEtaG9uZXN0LXZpZXctMDA{}",
            self.next
        );
        let resource_uri = format!("{}{path}", self.stand_in);
        let date = Utc::now() + ahead;
        let rfc3339 = |t: chrono::DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
        let payload = json!({
            "version": "1.0",
            "operation": format!("{}/tools/book-hotel:invoke", self.stand_in),
            "operation name": "Book a hotel",
            "inputs": {"parameters": parameters},
            "date": rfc3339(date),
            "nonce": nonce,
            "resource uri": resource_uri,
            "confirmation uri": self.env.cs_url,
            "subject": "alice",
            "expires": rfc3339(date + Duration::hours(1)),
            "language": "en"
        });
        let doc = sign_resource(payload.to_string().as_bytes(), &self.env.rs_key).unwrap();
        self.served.cheqs.lock().unwrap().insert(path, doc);
        resource_uri
    }

    fn decisions(&self) -> Vec<(String, String)> {
        self.served.decisions.lock().unwrap().clone()
    }

    /// Trust as an offline verifier has it: the stand-in's key (the reference
    /// RS's) and the CS's key.
    fn trust(&self) -> TrustStore {
        let key: &SigningKey = &self.env.rs_key;
        let mut t = TrustStore::new();
        t.add_resource_server(&self.stand_in, Jwks::new(vec![key.public_key()]).unwrap())
            .unwrap();
        t.add_confirmation_server(
            &self.env.cs_origin,
            Jwks::new(vec![self.env.cs_key.public_key()]).unwrap(),
        )
        .unwrap();
        t
    }

    async fn stop(self) {
        self.handle.stop(true).await;
        self.env.stop().await;
    }
}

/// `html` with every run of white space made one space.
fn squeezed(html: &str) -> String {
    html.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Does the page show `value` and then `unit`, each in its element?
fn shows_value_and_unit(page: &Page, value: &str, unit: &str) -> bool {
    squeezed(&page.raw).contains(&format!(
        "<span class=\"value\">{value}</span> <span class=\"unit\">{unit}</span>"
    ))
}

fn hotel() -> Value {
    json!([
        {"parameter name": "hotel", "parameter value": "Hotel Okura"},
        {"parameter name": "fare", "parameter description": "in Japanese yen", "parameter value": "120000", "parameter unit": "JPY"},
        {"parameter name": "stay", "parameter value": "3", "parameter unit": "nights"}
    ])
}

// ---------------------------------------------------------------------------
// §4, §5 rule 4: `date` not later than now plus the clock skew
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn a_cheq_dated_in_the_future_is_not_countersigned() {
    let mut w = World::start().await;
    let future = w.serve(Duration::days(200), hotel());
    let mut b = w.env.browser();

    // The browser: the untrusted page, no decision buttons, rule 4 named.
    let (path, page) = b.open(START, &future, "alice", ALICE_PW).await;
    assert_eq!(page.status, 502, "{}", page.text);
    assert!(page.text.contains("Do not trust"), "{}", page.text);
    assert!(page.text.contains("Nothing was signed"), "{}", page.text);
    assert!(page.text.contains("rule 4"), "{}", page.text);
    assert!(page.text.contains("later than now"), "{}", page.text);
    assert!(!page.raw.contains("name=\"decision\""), "{}", page.raw);
    assert!(!page.text.contains("Hotel Okura"), "{}", page.text);
    // Posting a decision anyway (with a valid CSRF token) signs nothing.
    let csrf = b.get("/history").await.hidden("csrf").unwrap();
    let res = b
        .post(
            &path,
            &[("csrf", &csrf), ("view", "x"), ("decision", "accept")],
        )
        .await;
    assert_eq!(res.status, 502, "{}", res.text);
    assert!(res.text.contains("Nothing was signed"), "{}", res.text);

    // The raw API (§10): refused as untrusted, no view to read out.
    let gw = w.env.voice(&Gateway::new(GW, GW_SECRET));
    let token = gw.user_token("alice", ALICE_PIN).await;
    let a = gw.create(Some(&token), &future).await;
    assert_eq!(a.status, 502, "{}", a.raw);
    assert_eq!(a.body["error"], "untrusted_cheq", "{}", a.raw);
    assert!(a.body.get("voice").is_none(), "{}", a.raw);

    assert!(w.env.records("alice").is_empty());
    assert!(w.decisions().is_empty());
    w.stop().await;
}

#[actix_web::test]
async fn a_cheq_dated_within_the_skew_is_confirmed_as_shown() {
    let mut w = World::start().await;
    // The RS's clock is 30 s ahead of the CS's: within the 60 s skew.
    let soon = w.serve(Duration::seconds(30), hotel());
    let mut b = w.env.browser();
    let (path, page) = b.open(START, &soon, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert_eq!(page.raw.matches("name=\"decision\"").count(), 2);
    // The value as written and its unit as written, side by side.
    assert!(shows_value_and_unit(&page, "120000", "JPY"), "{}", page.raw);
    assert!(shows_value_and_unit(&page, "3", "nights"), "{}", page.raw);
    let view = page.hidden("view").unwrap();
    let outcome = b.decide(&path, &page, "accept").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    assert_eq!(w.env.records("alice").len(), 1);

    // The stand-in got one decision, which verifies and names the page shown.
    let mut decisions = w.decisions();
    for _ in 0..100 {
        if !decisions.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        decisions = w.decisions();
    }
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    let (query, doc) = &decisions[0];
    assert_eq!(query, "accept");
    let ctx = Context {
        now: Utc::now(),
        resource_uri: Some(&soon),
        confirmation_uri: None,
    };
    let d = verify_decision(doc.as_bytes(), &w.trust(), Some(Decision::Accept), &ctx).unwrap();
    assert_eq!(d.claims().view, view, "cheq_view is the page's digest");
    w.stop().await;
}

// ---------------------------------------------------------------------------
// §4: money is read from `parameter unit`, and the demo RS says USD
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn the_demo_price_carries_its_currency_to_page_and_voice() {
    let w = World::start().await;
    let pack = w.env.invoke().await;
    let mut b = w.env.browser();
    let (_, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(shows_value_and_unit(&page, "1200", "USD"), "{}", page.raw);
    let (status, doc) = w.env.fetch_cheq(&pack.resource_uri).await;
    assert_eq!(status, 200);
    let payload = payload_of(&doc);
    let price = payload["inputs"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["parameter name"] == "price")
        .unwrap()
        .clone();
    assert_eq!(price["parameter unit"], "USD", "{price}");

    let gw = w.env.voice(&Gateway::new(GW, GW_SECRET));
    let token = gw.user_token("alice", ALICE_PIN).await;
    let a = gw.create(Some(&token), &pack.resource_uri).await;
    assert_eq!(a.status, 201, "{}", a.raw);
    let text = a.body["voice"]["text"].as_str().unwrap();
    assert!(
        text.contains("price, in US dollars: 1,200 US dollars."),
        "{text}"
    );
    w.stop().await;
}

/// A stand-in CHEQ whose names speak of money in several languages, without
/// `parameter unit`: the voice view read through the API invents no currency.
#[actix_web::test]
async fn the_api_voice_view_invents_no_currency() {
    let mut w = World::start().await;
    let uri = w.serve(
        Duration::zero(),
        json!([
            {"parameter name": "Preis (EUR)", "parameter value": "45"},
            {"parameter name": "料金 (円)", "parameter value": "120000"},
            {"parameter name": "fare", "parameter description": "amount in yen", "parameter value": "120000"}
        ]),
    );
    let gw = w.env.voice(&Gateway::new(GW, GW_SECRET));
    let token = gw.user_token("alice", ALICE_PIN).await;
    let a = gw.create(Some(&token), &uri).await;
    assert_eq!(a.status, 201, "{}", a.raw);
    let text = a.body["voice"]["text"].as_str().unwrap();
    for line in [
        "Preis (EUR): 45.",
        "料金 (円): 1 2 0 0 0 0.",
        "fare, amount in yen: 1 2 0 0 0 0.",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
    }
    for invented in ["US dollars", "euros", "120,000"] {
        assert!(!text.contains(invented), "{invented:?} in\n{text}");
    }
    w.stop().await;
}

// ---------------------------------------------------------------------------
// §6: records keyed by RS origin and nonce
// ---------------------------------------------------------------------------

/// Another registered RS that reuses the reference RS's nonce can neither
/// block nor answer for its CHEQ: both are decided, each delivered to its RS.
#[actix_web::test]
async fn one_rs_cannot_answer_for_anothers_nonce() {
    let mut w = World::start().await;
    let pack = w.env.invoke().await;
    let (status, doc) = w.env.fetch_cheq(&pack.resource_uri).await;
    assert_eq!(status, 200, "{doc}");
    let nonce = payload_of(&doc)["nonce"].as_str().unwrap().to_owned();
    let copy = w.serve_with_nonce(Duration::zero(), hotel(), &nonce);

    let mut b = w.env.browser();
    let (path, page) = b.open(START, &copy, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let outcome = b.decide(&path, &page, "reject").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    assert_eq!(w.decisions().len(), 1, "the copy's RS got its decision");

    // The reference RS's CHEQ with the same nonce is still open…
    let (path, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(
        page.raw.contains("name=\"decision\""),
        "still open: {}",
        page.text
    );
    // …and is decided and delivered to the reference RS.
    let outcome = b.decide(&path, &page, "accept").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    assert!(outcome.text.contains("Delivered"), "{}", outcome.text);
    assert_eq!(w.env.rs.executions(), 1);
    let (status, body) = result_of(&pack.result_uri).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("accepted")));
    assert_eq!(w.env.records("alice").len(), 2);
    w.stop().await;
}
