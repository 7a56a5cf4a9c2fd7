//! The harness of the tests that run the reference resource server (RS) in
//! this process on a real loopback socket (its clock a `ManualClock`) and
//! play its peers over HTTP: the agent that invokes a tool and gets a URI
//! pack (§1), the confirmation server (CS) that takes a token at the RS's
//! token endpoint, fetches the CHEQ (§3), verifies it against the RS's key
//! set and countersigns it (§5), posts the decision (§6), and the reader of
//! the result (§7), with collected values (§8) where asked.
//!
//! Each test file includes it with `#[path = "support/rs_kit.rs"] mod
//! rs_kit;`, writes its own configuration (which names both clients below:
//! `agent` for subject `alice`, and `cs`) and may add its own `impl Rs`
//! block; not every file uses every helper.
#![allow(dead_code)]

use actix_web::web;
use cheq::cheq::UriPack;
use cheq::resource::{build_state, serve, RsConfig, RsState};
use cheq::sign::{
    countersign, verify_resource, Channel, Context, Decision, DecisionInput, Jwks, SigningKey,
    TrustStore,
};
use cheq::time::{Clock, ManualClock};
use chrono::Duration;
use indexmap::IndexMap;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

/// The secret of the `agent` client (role agent, subject `alice`).
pub const AGENT_SECRET: &str = "agent-secret-123";
/// The secret of the `cs` client (role cs).
pub const CS_SECRET: &str = "cs-secret-123";

/// An RS serving on a loopback socket, and a client to talk to it.
pub struct Rs {
    /// The origin of the socket it listens on.
    pub base: String,
    pub state: web::Data<RsState>,
    pub handle: actix_web::dev::ServerHandle,
    pub clock: Arc<ManualClock>,
    pub http: reqwest::Client,
}

/// How the played CS reads a CHEQ and countersigns it.
pub struct Countersigning<'a> {
    /// The bearer token the CHEQ is fetched with.
    pub token: &'a str,
    /// The confirmation URI the CHEQ must name to verify.
    pub confirmation_uri: &'a str,
    /// The CS key that countersigns.
    pub key: &'a SigningKey,
    pub decision: Decision,
    /// The values the user entered (§8), if any.
    pub collected: Option<IndexMap<String, String>>,
    /// Seconds added to the clock's time for the countersignature's `iat`
    /// (another document for the same nonce).
    pub iat_offset: i64,
}

impl Rs {
    /// Builds the RS of `config` and serves it on `listener`. Building is
    /// tried again for a while: after a restart on the same data directory,
    /// sled may still be closing.
    pub async fn start(
        listener: std::net::TcpListener,
        config: &RsConfig,
        clock: Arc<ManualClock>,
    ) -> Rs {
        let port = listener.local_addr().unwrap().port();
        let mut state = None;
        for _ in 0..50 {
            match build_state(config, clock.clone()).await {
                Ok(built) => {
                    state = Some(built);
                    break;
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
        let state = state.expect("state");
        let server = serve(listener, state.clone()).unwrap();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Rs {
            base: format!("http://127.0.0.1:{port}"),
            state,
            handle,
            clock,
            http: reqwest::Client::new(),
        }
    }

    /// A bearer token for the client `id`, by its secret (HTTP Basic).
    pub async fn token(&self, id: &str, secret: &str) -> String {
        let res = self
            .http
            .post(format!("{}/oauth/token", self.base))
            .basic_auth(id, Some(secret))
            .form(&[("grant_type", "client_credentials"), ("scope", "cheq")])
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["token_type"], "Bearer");
        assert!(body["expires_in"].as_i64().unwrap() > 0);
        body["access_token"].as_str().unwrap().to_owned()
    }

    /// The agent invokes `tool` with `inputs` (an object of name → value).
    pub async fn invoke(&self, tool: &str, inputs: Value) -> reqwest::Response {
        let token = self.token("agent", AGENT_SECRET).await;
        let params: Vec<Value> = inputs
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        self.http
            .post(format!("{}/tools/{tool}:invoke", self.base))
            .bearer_auth(token)
            .json(&json!({"name": tool, "input_parameters": params}))
            .send()
            .await
            .unwrap()
    }

    /// The agent books a business-class flight at `price`.
    pub async fn flight(&self, price: i64) -> reqwest::Response {
        self.invoke(
            "book_flight",
            json!({"flight_number": "UA23", "flight_date": "2026-12-01",
                   "cabin_class": "BUSINESS", "price_usd": price}),
        )
        .await
    }

    /// Invokes a flight that needs confirmation and returns its URI pack
    /// (its result URI is also the `Location`).
    pub async fn pending_flight(&self) -> UriPack {
        let res = self.flight(500).await;
        assert_eq!(res.status(), 202);
        let location = res.headers()["location"].to_str().unwrap().to_owned();
        assert!(res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
        let pack = UriPack::parse(&res.bytes().await.unwrap()).unwrap();
        assert_eq!(location, pack.result_uri);
        pack
    }

    /// GETs a resource URI with `token`, as a CS fetches a CHEQ.
    pub async fn fetch(&self, token: &str, resource_uri: &str) -> reqwest::Response {
        self.http
            .get(resource_uri)
            .header("accept", "application/jose+json")
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    /// The RS's published key set, trusted for `origin`.
    pub async fn trust(&self, origin: &str) -> TrustStore {
        let bytes = self
            .http
            .get(format!("{}/.well-known/jwks.json", self.base))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let mut trust = TrustStore::new();
        trust
            .add_resource_server(origin, Jwks::from_bytes(&bytes).unwrap())
            .unwrap();
        trust
    }

    /// Plays the CS: fetches the CHEQ of `pack`, verifies it under the RS's
    /// key set (for the resource URI's origin) and countersigns it as `how`
    /// says, at the clock's time.
    pub async fn countersigned_with(&self, pack: &UriPack, how: Countersigning<'_>) -> String {
        let res = self.fetch(how.token, &pack.resource_uri).await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], "application/jose+json");
        let doc = res.bytes().await.unwrap();
        let origin = cheq_core::discovery::origin(&pack.resource_uri).unwrap();
        let now = self.clock.now();
        let ctx = Context {
            now,
            resource_uri: Some(&pack.resource_uri),
            confirmation_uri: Some(how.confirmation_uri),
        };
        let verified = verify_resource(&doc, &self.trust(&origin).await, &ctx).unwrap();
        assert_eq!(verified.fields().subject, "alice");
        let amr = vec!["pwd".to_owned()];
        countersign(
            &verified,
            how.key,
            DecisionInput {
                decision: how.decision,
                sub: "alice",
                also_known_as: &[],
                auth_time: now.timestamp() - 60,
                amr: &amr,
                channel: Channel::Html,
                view_text: "Book a flight …",
                collected: how.collected,
                passkey: None,
            },
            now + Duration::seconds(how.iat_offset),
        )
        .unwrap()
    }

    /// POSTs a countersigned CHEQ to `resource_uri?query` with `token`;
    /// the status and the JSON answer (`null` if none).
    pub async fn post_with(
        &self,
        token: &str,
        resource_uri: &str,
        query: &str,
        body: &str,
    ) -> (StatusCode, Value) {
        let res = self
            .http
            .post(format!("{resource_uri}?{query}"))
            .header("content-type", "application/jose+json")
            .bearer_auth(token)
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        (res.status(), res.json().await.unwrap_or(Value::Null))
    }

    /// GETs a result URI: the status, the JSON answer, `Retry-After`.
    pub async fn result(&self, result_uri: &str) -> (StatusCode, Value, Option<String>) {
        let res = self.http.get(result_uri).send().await.unwrap();
        let retry = res
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        (res.status(), res.json().await.unwrap(), retry)
    }

    /// Stops the server and lets go of its store.
    pub async fn stop(self) {
        self.handle.stop(true).await;
        drop(self.state);
    }
}
