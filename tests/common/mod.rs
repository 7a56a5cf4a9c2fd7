//! The harness shared by the integration tests of the confirmation server
//! (CS): both servers (the CS and the reference RS) on real loopback sockets
//! in this process ([`Env`]), a cookie-keeping [`Browser`], helpers for the
//! raw API of voice gateways (§10), and real server processes ([`Proc`],
//! [`Setup`]).
//!
//! Each test file declares `mod common;`; not every file uses every helper.
#![allow(dead_code)]

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpResponse, HttpServer};
use cheq::cheq::UriPack;
use cheq::configfile::ServerConfig as _;
use cheq::confirm::auth::{hash_secret, new_account};
use cheq::confirm::server::{start_background, Background};
use cheq::confirm::{CsConfig, CsState};
use cheq::keyfile::load_or_create_key;
use cheq::resource::{agent, InvokeOutcome, RsConfig, RsState};
use cheq::sign::{b64, Jwks, SigningKey, TrustStore};
use cheq::store::cs::DecisionRecord;
use cheq::testkit::LoopbackPair;
use cheq::time::{Clock, ManualClock, SystemClock};
use serde_json::{json, Map, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const CS_SECRET: &str = "cs-client-secret-0123";
pub const AGENT_SECRET: &str = "agent-secret-0123";
pub const ALICE_PW: &str = "alice-password-1";
pub const BOB_PW: &str = "bob-password-22";
pub const CAROL_PW: &str = "carol-password-333";
/// The CS start path of the in-process servers (a non-root confirmation URI).
pub const START: &str = "/confirm";

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

/// Undoes askama's HTML escaping.
pub fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#x2f;", "/")
        .replace("&amp;", "&")
}

pub fn public_jwks(key: &SigningKey) -> String {
    json!({"keys": [key.public_jwk()]}).to_string()
}

pub fn toml_path(p: &Path) -> String {
    p.display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

/// A TCP port on 127.0.0.1 that is free now, for a server started later.
///
/// Taken below the kernel's ephemeral range (ports a server bound to port 0
/// is given): between a free port's check and its use, another test's
/// server on port 0 could be given the very port it had just let go (the
/// likely reason why the OIDC test's rogue provider once failed to start).
/// Each call in one process tries the next port of its own sequence, from
/// an offset of the process id; port 0's answer when the range below is too
/// small.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    const FIRST: u32 = 10_000;
    if low > FIRST + 1_000 {
        let span = low - FIRST;
        let start = std::process::id().wrapping_mul(7_919) % span;
        for _ in 0..span {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = FIRST + (start + n) % span;
            if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
                return port as u16;
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn flight_params() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("flight_number".into(), json!("UA23"));
    m.insert("flight_date".into(), json!("2026-12-08"));
    m.insert("cabin_class".into(), json!("BUSINESS"));
    m.insert("price_usd".into(), json!(1200));
    m
}

/// Invokes book_flight above the threshold: 202 and a URI pack (§1).
pub async fn invoke_flight(rs_url: &str) -> UriPack {
    match agent::invoke(
        rs_url,
        "agent",
        AGENT_SECRET,
        "book_flight",
        &flight_params(),
    )
    .await
    .unwrap()
    {
        InvokeOutcome::NeedsConfirmation(pack) => pack,
        other => panic!("expected 202 and a URI pack, got {other:?}"),
    }
}

/// Invokes `book_flight` as the demo's agent (`cheq demo`): 202 and a URI
/// pack; `log` says what the demo printed when it is not.
pub async fn invoke_demo_flight(rs_url: &str, log: impl Fn() -> String) -> UriPack {
    match agent::invoke(
        rs_url,
        cheq::cli::agent::DEMO_AGENT_ID,
        cheq::cli::agent::DEMO_AGENT_SECRET,
        "book_flight",
        &flight_params(),
    )
    .await
    .unwrap()
    {
        InvokeOutcome::NeedsConfirmation(pack) => pack,
        other => panic!("expected a URI pack: {other:?}\n{}", log()),
    }
}

/// Invokes any tool as the agent: 202 and a URI pack (§1).
pub async fn invoke_tool(rs_url: &str, tool: &str, params: &Map<String, Value>) -> UriPack {
    match agent::invoke(rs_url, "agent", AGENT_SECRET, tool, params)
        .await
        .unwrap()
    {
        InvokeOutcome::NeedsConfirmation(pack) => pack,
        other => panic!("expected 202 and a URI pack from {tool}, got {other:?}"),
    }
}

/// The inputs of `transfer_funds` given by the agent (`payee`, `memo`).
pub fn transfer_params(payee: Option<&str>, memo: Option<&str>) -> Map<String, Value> {
    let mut m = Map::new();
    if let Some(p) = payee {
        m.insert("payee".into(), json!(p));
    }
    if let Some(memo) = memo {
        m.insert("memo".into(), json!(memo));
    }
    m
}

/// `GET <result uri>`: (status, body).
pub async fn result_of(result_uri: &str) -> (u16, Value) {
    let res = reqwest::get(result_uri).await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// The payload of a JWS document, as JSON.
pub fn payload_of(doc: &str) -> Value {
    let v: Value = serde_json::from_str(doc).unwrap();
    let bytes = b64::decode(v["payload"].as_str().unwrap()).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// `(protected_b64, signature_b64)` of signature `i` of a JWS document.
pub fn signature_of(doc: &str, i: usize) -> (String, String) {
    let v: Value = serde_json::from_str(doc).unwrap();
    (
        v["signatures"][i]["protected"].as_str().unwrap().to_owned(),
        v["signatures"][i]["signature"].as_str().unwrap().to_owned(),
    )
}

// ---------------------------------------------------------------------------
// A browser: no redirects followed, the session cookie kept by hand
// ---------------------------------------------------------------------------

#[derive(Debug)]
pub struct Page {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    /// The body as sent.
    pub raw: String,
    /// The body with HTML escapes undone (for text checks).
    pub text: String,
}

impl Page {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    }

    pub fn location(&self) -> String {
        self.header("location")
            .unwrap_or_else(|| panic!("no Location in a {} answer: {}", self.status, self.text))
    }

    pub fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    }

    /// The value of the hidden field `name`.
    pub fn hidden(&self, name: &str) -> Option<String> {
        let marker = format!("name=\"{name}\" value=\"");
        let start = self.raw.find(&marker)? + marker.len();
        let end = self.raw[start..].find('"')? + start;
        Some(unescape(&self.raw[start..end]))
    }

    /// The first `href` that starts with `prefix`.
    pub fn link(&self, prefix: &str) -> Option<String> {
        let marker = format!("href=\"{prefix}");
        let start = self.raw.find(&marker)? + "href=\"".len();
        let end = self.raw[start..].find('"')? + start;
        Some(unescape(&self.raw[start..end]))
    }
}

pub struct Browser {
    pub http: reqwest::Client,
    pub origin: String,
    pub session: Option<String>,
}

/// An HTTP client that follows no redirect (tests look at each 303).
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// The same, its connections made from another loopback address (Linux
/// routes all of 127.0.0.0/8 to the loopback device), so that a test can be
/// two clients at two addresses.
pub fn http_client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .local_address(ip.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
}

impl Browser {
    pub fn new(origin: &str) -> Self {
        Browser {
            http: http_client(),
            origin: origin.trim_end_matches('/').to_owned(),
            session: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        if path.starts_with("http://") || path.starts_with("https://") {
            path.to_owned()
        } else {
            format!("{}{path}", self.origin)
        }
    }

    pub async fn page(&mut self, req: reqwest::RequestBuilder) -> Page {
        let req = match &self.session {
            Some(s) => req.header("cookie", format!("cheq_session={s}")),
            None => req,
        };
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let raw = res.text().await.unwrap();
        let page = Page {
            status,
            headers,
            text: unescape(&raw),
            raw,
        };
        for c in page.set_cookies() {
            if let Some(rest) = c.strip_prefix("cheq_session=") {
                let value = rest.split(';').next().unwrap_or("").trim();
                let removal = value.is_empty() || c.to_ascii_lowercase().contains("max-age=0");
                self.session = if removal {
                    None
                } else {
                    Some(value.to_owned())
                };
            }
        }
        page
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let req = self.http.get(self.url(path));
        self.page(req).await
    }

    pub async fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> Page {
        let req = self.http.post(self.url(path)).form(fields);
        self.page(req).await
    }

    /// Follows a redirect to the login page and signs in there; returns the
    /// answer to the login POST.
    pub async fn login_at(&mut self, login_location: &str, user: &str, password: &str) -> Page {
        let form = self.get(login_location).await;
        assert_eq!(form.status, 200, "login form: {}", form.text);
        let csrf = form.hidden("csrf").expect("csrf field on the login form");
        let next = form.hidden("next").expect("next field on the login form");
        self.post(
            "/login",
            &[
                ("username", user),
                ("password", password),
                ("csrf", &csrf),
                ("next", &next),
            ],
        )
        .await
    }

    /// Signs in from the login page (next: /history).
    pub async fn sign_in(&mut self, user: &str, password: &str) {
        let res = self.login_at("/login", user, password).await;
        assert_eq!(res.status, 303, "login as {user}: {}", res.text);
    }

    /// Where login sent us, followed to the confirmation page's path: nothing
    /// is stored before login, so the CS sends the signed-in user back to the
    /// start, which then leads to the page.
    pub async fn after_login(&mut self, location: String) -> String {
        if location.starts_with("/c/") {
            return location;
        }
        // §11: the start link's GET only shows the filled-in start form;
        // the user's own POST starts the confirmation.
        let res = self.get(&location).await;
        assert_eq!(res.status, 200, "start page after login: {}", res.text);
        let uri = url::Url::parse(&format!("http://x{location}"))
            .ok()
            .and_then(|u| {
                u.query_pairs()
                    .find(|(k, _)| k == "resource_uri")
                    .map(|(_, v)| v.into_owned())
            })
            .expect("resource_uri in the start link");
        assert!(
            res.text
                .contains(&format!("value=\"{}\"", uri.replace('&', "&amp;"))),
            "the start form is filled in: {}",
            res.text
        );
        let res = self.post(&location, &[("resource_uri", &uri)]).await;
        assert_eq!(res.status, 303, "start after login: {}", res.text);
        res.location()
    }

    /// §2: POST the resource URI to the start path, through login when
    /// needed, to the confirmation page. Returns the page's path and the page.
    pub async fn open(
        &mut self,
        start: &str,
        resource_uri: &str,
        user: &str,
        password: &str,
    ) -> (String, Page) {
        let res = self.post(start, &[("resource_uri", resource_uri)]).await;
        assert_eq!(res.status, 303, "start: {}", res.text);
        let mut location = res.location();
        if location.starts_with("/login") {
            let res = self.login_at(&location, user, password).await;
            assert_eq!(res.status, 303, "login: {}", res.text);
            // §2: the sign-in that follows the user's own POST goes on to
            // the confirmation page, with no second click.
            location = res.location();
        }
        assert!(location.starts_with("/c/"), "{location}");
        let page = self.get(&location).await;
        (location, page)
    }

    /// Accepts the page of a `transfer_funds` confirmation, typing `values`
    /// into its inputs in order (from account, to account, amount).
    pub async fn accept_typing(&mut self, path: &str, page: &Page, values: [&str; 3]) -> Page {
        let inputs: Vec<String> = page
            .raw
            .match_indices("name=\"input:")
            .map(|(i, _)| {
                let rest = &page.raw[i + 6..];
                rest[..rest.find('"').unwrap()].to_owned()
            })
            .collect();
        assert_eq!(inputs.len(), 3, "{}", page.raw);
        let csrf = page.hidden("csrf").unwrap();
        let view = page.hidden("view").unwrap();
        let mut fields = vec![
            ("csrf", csrf.as_str()),
            ("view", view.as_str()),
            ("decision", "accept"),
        ];
        fields.extend(inputs.iter().map(String::as_str).zip(values));
        self.post(path, &fields).await
    }

    /// Posts the decision form of a confirmation page.
    pub async fn decide(&mut self, path: &str, page: &Page, decision: &str) -> Page {
        let csrf = page.hidden("csrf").expect("csrf field");
        let view = page.hidden("view").expect("view field");
        self.post(
            path,
            &[("csrf", &csrf), ("view", &view), ("decision", decision)],
        )
        .await
    }
}

// ---------------------------------------------------------------------------
// Both servers in this process
// ---------------------------------------------------------------------------

/// One more resource server registered at the CS (trust: the real RS's key).
pub struct ExtraRs {
    pub origin: String,
}

/// A voice gateway registered at the CS for the raw API (§10): its client
/// id and its secret in clear (the CS configuration gets its argon2 hash).
#[derive(Debug, Clone)]
pub struct Gateway {
    pub client_id: String,
    pub secret: String,
}

impl Gateway {
    pub fn new(client_id: &str, secret: &str) -> Self {
        Gateway {
            client_id: client_id.to_owned(),
            secret: secret.to_owned(),
        }
    }
}

#[derive(Default)]
pub struct Options {
    /// Register the RS at the CS with a different key under the same kid.
    pub wrong_rs_key: bool,
    pub extra: Vec<ExtraRs>,
    /// One clock for both servers; the system clock when `None`.
    pub clock: Option<Arc<ManualClock>>,
    /// Voice gateways registered at the CS (`[[gateways]]`).
    pub gateways: Vec<Gateway>,
    /// The CS's `api_token_ttl_secs`; its default when `None`.
    pub api_token_ttl_secs: Option<i64>,
    /// Top-level keys put first in the CS configuration.
    pub cs_toml_top: String,
    /// Tables put last in the CS configuration (`[[identity_providers]]`).
    pub cs_toml_tables: String,
    /// Keys added to the CS's `[[resource_servers]]` entry of the RS.
    pub rs_entry_keys: String,
    /// Tables put last in the RS configuration (`[policy]`).
    pub rs_toml_tables: String,
    /// The CHEQ subject the agent acts for ("alice" when `None`).
    pub agent_subject: Option<String>,
    /// Each server trusts the other's published keys (`jwks_uri`) rather
    /// than a file.
    pub jwks_uri: bool,
    /// The CS database is made without compression (sled compresses a new
    /// one; one made before keeps its setting), so that a scan of its files
    /// reads every stored byte in clear.
    pub plain_cs_store: bool,
}

pub struct Env {
    pub _dir: tempfile::TempDir,
    pub rs_url: String,
    pub cs_origin: String,
    /// The CS public URL, its confirmation URI (§1).
    pub cs_url: String,
    pub cs_key_path: PathBuf,
    pub rs_key: SigningKey,
    pub cs_key: SigningKey,
    pub rs: web::Data<RsState>,
    pub cs: web::Data<CsState>,
    pub rs_handle: ServerHandle,
    pub cs_handle: ServerHandle,
    pub background: Option<Background>,
    /// The CS data directory (its database, sealed-document keys, secrets).
    pub cs_data: PathBuf,
    /// The RS data directory.
    pub rs_data: PathBuf,
    /// The clock both servers use, when the test controls time.
    pub clock: Option<Arc<ManualClock>>,
    /// The CS's lifetime of a raw-API user token.
    pub api_token_ttl_secs: i64,
    /// The configuration files the servers were started from (for the CLI).
    pub rs_config: PathBuf,
    pub cs_config: PathBuf,
}

impl Env {
    pub async fn start(opts: Options) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        let keys = root.join("keys");
        // Keys first, so that each side's JWKS file exists.
        let rs_key = load_or_create_key(&keys.join("rs.jwk"), None, "rs").unwrap();
        let cs_key_path = keys.join("cs.jwk");
        let cs_key = load_or_create_key(&cs_key_path, None, "cs").unwrap();
        let rs_jwks = keys.join("rs.pub.jwks.json");
        let cs_jwks = keys.join("cs.pub.jwks.json");
        std::fs::write(&rs_jwks, public_jwks(&rs_key)).unwrap();
        std::fs::write(&cs_jwks, public_jwks(&cs_key)).unwrap();
        let cs_trusts_for_rs = if opts.wrong_rs_key {
            let impostor = SigningKey::from_seed(rs_key.kid(), &rand::random()).unwrap();
            let path = keys.join("impostor.pub.jwks.json");
            std::fs::write(&path, public_jwks(&impostor)).unwrap();
            path
        } else {
            rs_jwks.clone()
        };

        let rs_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let cs_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let rs_port = rs_listener.local_addr().unwrap().port();
        let cs_port = cs_listener.local_addr().unwrap().port();
        let rs_url = format!("http://127.0.0.1:{rs_port}");
        let cs_origin = format!("http://127.0.0.1:{cs_port}");
        let cs_url = format!("{cs_origin}{START}");

        let pair = LoopbackPair {
            dir: root.to_owned(),
            rs_port,
            cs_port,
            cs_path: START.to_owned(),
            rs_key: keys.join("rs.jwk"),
            cs_key: cs_key_path.clone(),
            rs_jwks: (!opts.jwks_uri).then(|| cs_trusts_for_rs.clone()),
            cs_jwks: (!opts.jwks_uri).then(|| cs_jwks.clone()),
            cs_secret: CS_SECRET.to_owned(),
            agent_id: "agent".to_owned(),
            agent_secret: AGENT_SECRET.to_owned(),
            host: "127.0.0.1".into(),
        };
        let mut rs_toml = pair.rs_toml().unwrap();
        if let Some(subject) = &opts.agent_subject {
            rs_toml = rs_toml.replace("subject = \"alice\"", &format!("subject = {subject:?}"));
        }
        rs_toml.push_str(&opts.rs_toml_tables);
        let mut cs_toml = pair.cs_toml().unwrap();
        cs_toml.push_str(&opts.rs_entry_keys);
        for extra in &opts.extra {
            cs_toml.push_str(&format!(
                r#"
[[resource_servers]]
origin = "{origin}"
path_prefix = "/cheq/"
jwks = "{jwks}"
token_url = "{origin}/oauth/token"
client_id = "cs"
client_secret = "{CS_SECRET}"
"#,
                origin = extra.origin,
                jwks = toml_path(&rs_jwks),
            ));
        }
        for gw in &opts.gateways {
            cs_toml.push_str(&format!(
                r#"
[[gateways]]
client_id = "{id}"
secret_hash = "{hash}"
"#,
                id = gw.client_id,
                hash = hash_secret(&gw.secret).unwrap(),
            ));
        }
        cs_toml.push_str(&opts.cs_toml_tables);
        cs_toml = format!("{}\n{cs_toml}", opts.cs_toml_top);
        if let Some(ttl) = opts.api_token_ttl_secs {
            // A top-level key: it must come before the first table.
            cs_toml = format!("api_token_ttl_secs = {ttl}\n{cs_toml}");
        }
        let rs_config = RsConfig::from_toml(&rs_toml).unwrap();
        let cs_config = CsConfig::from_toml(&cs_toml).unwrap();
        let (rs_config_path, cs_config_path) = (root.join("rs.toml"), root.join("cs.toml"));
        std::fs::write(&rs_config_path, &rs_toml).unwrap();
        std::fs::write(&cs_config_path, &cs_toml).unwrap();
        let clock: Arc<dyn Clock> = match &opts.clock {
            Some(c) => c.clone(),
            None => Arc::new(SystemClock),
        };

        let rs = cheq::resource::build_state(&rs_config, clock.clone())
            .await
            .unwrap();
        let rs_server = cheq::resource::serve(rs_listener, rs.clone()).unwrap();
        let rs_handle = rs_server.handle();
        actix_web::rt::spawn(rs_server);

        if opts.plain_cs_store {
            cheq::keyfile::ensure_private_dir(&cs_config.data_dir).unwrap();
            let made = sled::Config::new()
                .path(cheq::confirm::admin::db_path(&cs_config.data_dir))
                .use_compression(false)
                .open()
                .unwrap();
            drop(made);
        }
        let cs = cheq::confirm::build_state(&cs_config, clock).await.unwrap();
        cs.accounts
            .put(&new_account("alice", None, ALICE_PW).unwrap(), false)
            .unwrap();
        let background = start_background(&cs, &cs_config.data_dir);
        let cs_server = cheq::confirm::serve(cs_listener, cs.clone()).unwrap();
        let cs_handle = cs_server.handle();
        actix_web::rt::spawn(cs_server);

        Env {
            _dir: dir,
            rs_url,
            cs_origin,
            cs_url,
            cs_key_path,
            rs_key,
            cs_key,
            rs,
            cs,
            rs_handle,
            cs_handle,
            background: Some(background),
            cs_data: cs_config.data_dir.clone(),
            rs_data: rs_config.data_dir.clone(),
            clock: opts.clock,
            api_token_ttl_secs: cs_config.api_token_ttl_secs,
            rs_config: rs_config_path,
            cs_config: cs_config_path,
        }
    }

    pub fn browser(&self) -> Browser {
        Browser::new(&self.cs_origin)
    }

    pub async fn invoke(&self) -> UriPack {
        let pack = invoke_flight(&self.rs_url).await;
        assert_eq!(pack.confirmation_uri, self.cs_url);
        pack
    }

    pub fn add_user(&self, name: &str, password: &str) {
        self.cs
            .accounts
            .put(&new_account(name, None, password).unwrap(), false)
            .unwrap();
    }

    /// Gives `user` a voice PIN (its argon2 hash under the CS's PIN pepper,
    /// as `Account.pin_hash`).
    pub fn set_pin(&self, user: &str, pin: &str) {
        let mut account = self.cs.accounts.get(user).unwrap().expect("no such user");
        let pepper = cheq::keyfile::load_or_create_secret(
            &self.cs_data.join(cheq::confirm::auth::PIN_PEPPER_FILE),
        )
        .unwrap();
        account.pin_hash = Some(cheq::confirm::auth::pin_hash(&pepper, pin).unwrap());
        self.cs.accounts.put(&account, true).unwrap();
    }

    /// Invokes any tool as the agent; it must answer 202 and a URI pack.
    pub async fn invoke_tool(&self, tool: &str, params: &Map<String, Value>) -> UriPack {
        let pack = invoke_tool(&self.rs_url, tool, params).await;
        assert_eq!(pack.confirmation_uri, self.cs_url);
        pack
    }

    /// The clock both servers use (only with `Options::clock`).
    pub fn clock(&self) -> &ManualClock {
        self.clock
            .as_deref()
            .expect("this test needs Options { clock: Some(..) }")
    }

    /// Moves both servers' clock forward by `secs` seconds.
    pub fn advance(&self, secs: i64) {
        self.clock().advance(chrono::Duration::seconds(secs));
    }

    /// A voice gateway client of the raw API, with `gw`'s credentials.
    pub fn voice(&self, gw: &Gateway) -> VoiceClient {
        VoiceClient::new(&self.cs_origin, &gw.client_id, &gw.secret)
    }

    pub fn records(&self, user: &str) -> Vec<DecisionRecord> {
        self.cs.cs.records().for_user(user, 100).unwrap()
    }

    /// The resource-signed CHEQ, fetched as the CS does (§3).
    pub async fn fetch_cheq(&self, resource_uri: &str) -> (u16, String) {
        let token = agent::get_token(&self.rs_url, "cs", CS_SECRET)
            .await
            .unwrap();
        let res = reqwest::Client::new()
            .get(resource_uri)
            .header("accept", "application/jose+json")
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        (res.status().as_u16(), res.text().await.unwrap())
    }

    /// `POST <resource uri>?<decision>` as a CS would (§6).
    pub async fn post_decision(
        &self,
        resource_uri: &str,
        decision: &str,
        doc: &str,
    ) -> (u16, Value) {
        let token = agent::get_token(&self.rs_url, "cs", CS_SECRET)
            .await
            .unwrap();
        let res = reqwest::Client::new()
            .post(format!("{resource_uri}?{decision}"))
            .header("content-type", "application/jose+json")
            .bearer_auth(token)
            .body(doc.to_owned())
            .send()
            .await
            .unwrap();
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    /// Trust in both servers' keys, as an offline verifier has it.
    pub fn trust(&self) -> TrustStore {
        let mut t = TrustStore::new();
        t.add_resource_server(
            &self.rs_url,
            Jwks::new(vec![self.rs_key.public_key()]).unwrap(),
        )
        .unwrap();
        t.add_confirmation_server(
            &self.cs_origin,
            Jwks::new(vec![self.cs_key.public_key()]).unwrap(),
        )
        .unwrap();
        t
    }

    /// Invokes `transfer_funds` to the payee ACME (its accounts and amount
    /// private, typed on the page) and opens its page in `b` as alice;
    /// returns the pack, the page path and the confirmation page.
    pub async fn open_transfer(&self, b: &mut Browser) -> (UriPack, String, Page) {
        let pack = self
            .invoke_tool("transfer_funds", &transfer_params(Some("ACME"), None))
            .await;
        let (path, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
        assert_eq!(page.status, 200, "{}", page.text);
        (pack, path, page)
    }

    /// Invokes, opens the page as alice and decides; returns the pack, the
    /// page path, the confirmation page and the outcome page.
    pub async fn decided(&self, b: &mut Browser, decision: &str) -> (UriPack, String, Page, Page) {
        let pack = self.invoke().await;
        let (path, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
        assert_eq!(page.status, 200, "{}", page.text);
        let outcome = b.decide(&path, &page, decision).await;
        assert_eq!(outcome.status, 200, "{}", outcome.text);
        (pack, path, page, outcome)
    }

    pub async fn stop(mut self) {
        drop(self.background.take());
        self.cs_handle.stop(true).await;
        self.rs_handle.stop(true).await;
    }
}

/// A listener that counts (and drops) every connection made to it.
pub struct Counter {
    pub port: u16,
    pub count: Arc<AtomicUsize>,
    pub stop: Arc<AtomicBool>,
    pub thread: Option<std::thread::JoinHandle<()>>,
}

impl Counter {
    pub fn start() -> Counter {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let count = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (count.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        c.fetch_add(1, Ordering::SeqCst);
                        drop(stream);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Counter {
            port,
            count,
            stop,
            thread: Some(thread),
        }
    }

    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A resource server that serves the real RS's CHEQs with their payload
/// altered (its own origin in place of the real one, another flight).
pub fn start_tampering_rs(
    listener: std::net::TcpListener,
    real: String,
    fake: String,
) -> ServerHandle {
    let server = HttpServer::new(move || {
        let (real, fake) = (real.clone(), fake.clone());
        App::new()
            .route(
                "/oauth/token",
                web::post().to(|| async {
                    HttpResponse::Ok().json(json!({
                        "access_token": "fake-token", "token_type": "Bearer", "expires_in": 3600
                    }))
                }),
            )
            .route(
                "/cheq/confirmations/{id}",
                web::get().to(move |id: web::Path<String>| {
                    let (real, fake) = (real.clone(), fake.clone());
                    async move {
                        let token = agent::get_token(&real, "cs", CS_SECRET).await.unwrap();
                        let doc = reqwest::Client::new()
                            .get(format!("{real}/cheq/confirmations/{id}"))
                            .header("accept", "application/jose+json")
                            .bearer_auth(token)
                            .send()
                            .await
                            .unwrap()
                            .text()
                            .await
                            .unwrap();
                        let mut v: Value = serde_json::from_str(&doc).unwrap();
                        let payload =
                            String::from_utf8(b64::decode(v["payload"].as_str().unwrap()).unwrap())
                                .unwrap();
                        let altered = payload
                            .replace(&format!("{real}/"), &format!("{fake}/"))
                            .replace("UA23", "UA99");
                        assert_ne!(altered, payload);
                        v["payload"] = b64::encode(altered.as_bytes()).into();
                        HttpResponse::Ok()
                            .content_type("application/jose+json")
                            .body(v.to_string())
                    }
                }),
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

// ---------------------------------------------------------------------------
// 9 and 10. Real processes: crash and restart, `cheq user add` while running
// ---------------------------------------------------------------------------

/// A child process killed (SIGKILL) when dropped.
pub struct Proc {
    pub name: String,
    pub child: Option<std::process::Child>,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, args: &[&str], log: &Path) -> Proc {
        Proc::spawn_with(name, args, &[], log)
    }

    /// Like [`Proc::spawn`], with more environment variables.
    pub fn spawn_with(name: &str, args: &[&str], envs: &[(&str, &str)], log: &Path) -> Proc {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let err = out.try_clone().unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_cheq"))
            .args(args)
            .env("RUST_LOG", "info")
            .envs(envs.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap();
        Proc {
            name: name.to_owned(),
            child: Some(child),
            log: log.to_owned(),
        }
    }

    pub fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => c.try_wait().unwrap().is_some(),
            None => true,
        }
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> String {
        format!(
            "--- {} log ---\n{}",
            self.name,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts a server process and waits (bounded) until `/healthz` answers;
/// retries when the process exits early (e.g. the port is not free yet).
pub async fn start_server(name: &str, args: &[&str], log: &Path, base: &str) -> Proc {
    start_server_with(name, args, &[], log, base).await
}

/// Like [`start_server`], with more environment variables.
pub async fn start_server_with(
    name: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    log: &Path,
    base: &str,
) -> Proc {
    let deadline = Instant::now() + Duration::from_secs(30);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut proc = Proc::spawn_with(name, args, envs, log);
    loop {
        if let Ok(res) = http.get(format!("{base}/healthz")).send().await {
            if res.status() == 200 {
                return proc;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not become healthy:\n{}",
            proc.log()
        );
        if proc.exited() {
            tokio::time::sleep(Duration::from_millis(300)).await;
            proc = Proc::spawn_with(name, args, envs, log);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `cheq ARGS…` to its end (at most 30 s): (success, stdout, stderr).
pub fn cheq_cmd(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cheq"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `cheq user add NAME --password-stdin <place...>`: (success, stdout+stderr).
pub fn user_add(name: &str, password: &str, place: &[&str]) -> (bool, String) {
    user_add_with(name, password, place, &[])
}

/// Like [`user_add`], with more environment variables.
pub fn user_add_with(
    name: &str,
    password: &str,
    place: &[&str],
    envs: &[(&str, &str)],
) -> (bool, String) {
    let mut args = vec!["user", "add", name, "--password-stdin"];
    args.extend_from_slice(place);
    cheq_with_stdin(&args, envs, password)
}

/// `cheq ARGS…` with the line `input` on its standard input, to its end
/// (at most 30 s): (success, stdout+stderr).
pub fn cheq_with_stdin(args: &[&str], envs: &[(&str, &str)], input: &str) -> (bool, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cheq"))
        .args(args)
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{input}\n").as_bytes())
        .unwrap();
    // Bounded: the command must finish within 30 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut text = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            return (status.success(), text);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cheq {} did not finish", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Keys, JWKS files and both configurations, as `cheq demo` writes them.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub rs_url: String,
    pub cs_url: String,
}

impl Setup {
    pub fn new() -> Setup {
        Setup::with(false)
    }

    /// Each server trusts the other's published keys (`jwks_uri`).
    pub fn by_jwks_uri() -> Setup {
        Setup::with(true)
    }

    fn with(by_uri: bool) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let keys = root.join("keys");
        let rs_key = load_or_create_key(&keys.join("rs.jwk"), None, "rs").unwrap();
        let cs_key = load_or_create_key(&keys.join("cs.jwk"), None, "cs").unwrap();
        std::fs::write(keys.join("rs.pub.jwks.json"), public_jwks(&rs_key)).unwrap();
        std::fs::write(keys.join("cs.pub.jwks.json"), public_jwks(&cs_key)).unwrap();
        let (rs_port, cs_port) = (free_port(), free_port());
        let rs_url = format!("http://127.0.0.1:{rs_port}");
        let cs_url = format!("http://127.0.0.1:{cs_port}");
        let pair = LoopbackPair {
            dir: root.to_owned(),
            rs_port,
            cs_port,
            cs_path: String::new(),
            rs_key: keys.join("rs.jwk"),
            cs_key: keys.join("cs.jwk"),
            rs_jwks: (!by_uri).then(|| keys.join("rs.pub.jwks.json")),
            cs_jwks: (!by_uri).then(|| keys.join("cs.pub.jwks.json")),
            cs_secret: CS_SECRET.to_owned(),
            agent_id: "agent".to_owned(),
            agent_secret: AGENT_SECRET.to_owned(),
            host: "127.0.0.1".into(),
        };
        let (rs_toml, cs_toml) = (pair.rs_toml().unwrap(), pair.cs_toml().unwrap());
        std::fs::write(root.join("rs.toml"), rs_toml).unwrap();
        std::fs::write(root.join("cs.toml"), cs_toml).unwrap();
        Setup {
            dir,
            rs_url,
            cs_url,
        }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    pub async fn start_rs(&self) -> Proc {
        let config = self.path("rs.toml");
        let log = self.dir.path().join("rs.log");
        start_server(
            "RS",
            &["resource-server", "--config", &config],
            &log,
            &self.rs_url,
        )
        .await
    }

    pub async fn start_cs(&self) -> Proc {
        let config = self.path("cs.toml");
        let log = self.dir.path().join("cs.log");
        start_server("CS", &["serve", "--config", &config], &log, &self.cs_url).await
    }
}

/// `cheq audit` of the transparency log at `base` (the CS's URL), checked
/// with `key` and keeping its state in `state`, each of `documents` looked up
/// in it: (success, stdout, stderr).
pub fn audit_log(
    base: &str,
    key: &str,
    state: &Path,
    documents: &[&Path],
) -> (bool, String, String) {
    let log = format!("{base}/log/");
    let state = state.display().to_string();
    let mut args = vec!["audit", "--log", &log, "--key", key, "--state", &state];
    let docs: Vec<String> = documents.iter().map(|d| d.display().to_string()).collect();
    for d in &docs {
        args.push("--document");
        args.push(d);
    }
    cheq_cmd(&args)
}

/// Accepts `n` new bookings (invoked at the RS of `setup`) in `b`, signing
/// in as alice where the CS asks.
pub async fn accept_bookings(setup: &Setup, b: &mut Browser, n: usize) {
    for _ in 0..n {
        let pack = invoke_flight(&setup.rs_url).await;
        let (path, page) = b.open("/", &pack.resource_uri, "alice", ALICE_PW).await;
        assert_eq!(page.status, 200, "{}", page.text);
        let outcome = b.decide(&path, &page, "accept").await;
        assert_eq!(outcome.status, 200, "{}", outcome.text);
    }
}

/// Every decided document of `b`'s history, newest first.
pub async fn history_documents(b: &mut Browser) -> Vec<String> {
    let history = b.get("/history").await;
    let mut docs = Vec::new();
    let mut rest = history.raw.as_str();
    while let Some(at) = rest.find("href=\"/history/") {
        rest = &rest[at + 6..];
        let link = &rest[..rest.find('"').unwrap()];
        if link.ends_with(".json") && !link.ends_with("/inclusion.json") {
            docs.push(b.get(link).await.text);
        }
    }
    docs
}

/// The log indexes of the documents a `cheq audit` summary found, in order.
pub fn audited_indexes(summary: &Value) -> Vec<u64> {
    let mut found: Vec<u64> = summary["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["index"].as_u64().unwrap())
        .collect();
    found.sort();
    found
}

/// How many operations the RS ran, read from its database (RS stopped).
pub fn executions_on_disk(rs_data: &Path) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match cheq::store::sled_config(&rs_data.join("rs.sled")).open() {
            Ok(db) => return db.open_tree("rs.executions").unwrap().len(),
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "cannot open the RS database: {e}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The raw API for voice gateways (§10)
// ---------------------------------------------------------------------------

/// One answer of the raw API.
#[derive(Debug)]
pub struct ApiAnswer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    /// The body as JSON (`Null` when it is not JSON).
    pub body: Value,
    /// The body as sent.
    pub raw: String,
}

impl ApiAnswer {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    }

    /// The `error` member of a JSON error.
    pub fn error(&self) -> &str {
        self.body["error"].as_str().unwrap_or("")
    }

    /// Asserts the status and, for an error, that the body is a §10 error.
    pub fn expect(&self, status: u16, what: &str) -> &Self {
        assert_eq!(self.status, status, "{what}: {}", self.raw);
        if status >= 400 {
            assert!(
                self.body["error"].is_string() && self.body["error_description"].is_string(),
                "{what}: not a JSON error: {}",
                self.raw
            );
        }
        self
    }
}

/// The `voice.digest` of each confirmation view read out, by id.
static VIEWS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, String>>> =
    std::sync::LazyLock::new(Default::default);

/// A voice gateway talking to the CS raw API.
pub struct VoiceClient {
    pub http: reqwest::Client,
    pub origin: String,
    pub client_id: String,
    pub secret: String,
}

impl VoiceClient {
    pub fn new(origin: &str, client_id: &str, secret: &str) -> Self {
        VoiceClient {
            http: http_client(),
            origin: origin.trim_end_matches('/').to_owned(),
            client_id: client_id.to_owned(),
            secret: secret.to_owned(),
        }
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> ApiAnswer {
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let raw = res.text().await.unwrap();
        let body: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
        // Remember the digest of each view read out, as a gateway does.
        if let (Some(id), Some(digest)) = (body["id"].as_str(), body["voice"]["digest"].as_str()) {
            VIEWS
                .lock()
                .unwrap()
                .insert(id.to_owned(), digest.to_owned());
        }
        ApiAnswer {
            status,
            headers,
            body,
            raw,
        }
    }

    /// `POST /api/v1/token` with explicit gateway credentials (`None`: no
    /// Authorization header) and form fields.
    pub async fn token_with(
        &self,
        credentials: Option<(&str, &str)>,
        form: &[(&str, &str)],
    ) -> ApiAnswer {
        let mut req = self
            .http
            .post(format!("{}/api/v1/token", self.origin))
            .form(form);
        if let Some((id, secret)) = credentials {
            req = req.basic_auth(id, Some(secret));
        }
        self.send(req).await
    }

    /// `POST /api/v1/token` as this gateway, for `username` with `pin`.
    pub async fn token(&self, username: &str, pin: &str) -> ApiAnswer {
        self.token_with(
            Some((&self.client_id, &self.secret)),
            &[("username", username), ("pin", pin)],
        )
        .await
    }

    /// A user token; the answer must be a §10 token answer.
    pub async fn user_token(&self, username: &str, pin: &str) -> String {
        let a = self.token(username, pin).await;
        a.expect(200, &format!("token for {username}"));
        assert_eq!(a.body["token_type"], "Bearer", "{}", a.raw);
        assert!(a.body["expires_in"].as_i64().unwrap_or(0) > 0, "{}", a.raw);
        a.body["access_token"].as_str().unwrap().to_owned()
    }

    fn bearer(req: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
        match token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// `POST /api/v1/confirmations` `{"resource uri": …}`.
    pub async fn create(&self, token: Option<&str>, resource_uri: &str) -> ApiAnswer {
        let req = self
            .http
            .post(format!("{}/api/v1/confirmations", self.origin))
            .json(&json!({ "resource uri": resource_uri }));
        self.send(Self::bearer(req, token)).await
    }

    /// `GET /api/v1/confirmations/{id}`.
    pub async fn get(&self, token: Option<&str>, id: &str) -> ApiAnswer {
        let req = self
            .http
            .get(format!("{}/api/v1/confirmations/{id}", self.origin));
        self.send(Self::bearer(req, token)).await
    }

    /// `POST /api/v1/confirmations/{id}/decision` with `body`; without a
    /// `view` member, the digest of the view last read out for `id` is sent
    /// as `view` (§10), as a gateway does (`"view": null` sends none).
    pub async fn decide(&self, token: Option<&str>, id: &str, body: &Value) -> ApiAnswer {
        let mut body = body.clone();
        if let Some(map) = body.as_object_mut() {
            if !map.contains_key("view") {
                if let Some(d) = VIEWS.lock().unwrap().get(id) {
                    map.insert("view".into(), Value::String(d.clone()));
                }
            } else if map.get("view") == Some(&Value::Null) {
                map.remove("view");
            }
        }
        let body = &body;
        let req = self
            .http
            .post(format!(
                "{}/api/v1/confirmations/{id}/decision",
                self.origin
            ))
            .json(body);
        self.send(Self::bearer(req, token)).await
    }
}

// ---------------------------------------------------------------------------
// Looking for private values on disk
// ---------------------------------------------------------------------------

/// Every regular file under `dir`, recursively (symbolic links not followed).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                todo.push(entry.path());
            } else if kind.is_file() {
                out.push(entry.path());
            }
        }
    }
    out.sort();
    out
}

/// The forms in which `value` could sit in a file: as it is, and inside any
/// base64 or base64url text (a JWS protected header is base64url), at each of
/// the three alignments.
pub fn encodings_of(value: &str) -> Vec<Vec<u8>> {
    use base64::Engine;
    let bytes = value.as_bytes();
    let mut out = vec![bytes.to_vec()];
    for k in 0..3usize {
        let mut padded = vec![0u8; k];
        padded.extend_from_slice(bytes);
        // The characters made only of `value`'s bits.
        let from = (8 * k).div_ceil(6);
        let to = 8 * padded.len() / 6;
        for engine in [
            base64::engine::general_purpose::URL_SAFE_NO_PAD,
            base64::engine::general_purpose::STANDARD_NO_PAD,
        ] {
            let enc = engine.encode(&padded);
            if to > from + 4 {
                out.push(enc.as_bytes()[from..to].to_vec());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `GET url` with [`http_client`]: its status and body.
pub async fn get_text(url: &str) -> (u16, String) {
    let res = http_client().get(url).send().await.unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

/// The transparency log's verifier key, as the CS at `base` publishes it.
pub async fn log_key(base: &str) -> String {
    let (status, text) = get_text(&format!("{base}/log/key")).await;
    assert_eq!(status, 200, "{text}");
    text.trim().to_owned()
}

/// The size of the transparency log's current checkpoint at `base`.
pub async fn log_size(base: &str) -> u64 {
    let (status, text) = get_text(&format!("{base}/log/checkpoint")).await;
    assert_eq!(status, 200, "{text}");
    text.lines().nth(1).unwrap().parse().unwrap()
}

/// `haystack` contains `needle`.
pub fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Does `text` hold `value`, in clear or base64(url)-encoded, also inside a
/// packed document (`cheq::store::packed`)?
pub fn holds(text: &[u8], value: &str) -> bool {
    let encodings = encodings_of(value);
    let found = |bytes: &[u8]| encodings.iter().any(|e| contains_bytes(bytes, e));
    // Documents stored packed (compressed) hide their text: looked through.
    found(text)
        || cheq::store::packed::unpack_all_in(text)
            .iter()
            .any(|doc| found(doc.as_bytes()))
}

/// Asserts that no file under `dir` holds any of `values` (raw bytes, in
/// clear or base64(url)-encoded, also inside packed documents). Returns how many files were read.
pub fn assert_no_file_holds(dir: &Path, values: &[&str]) -> usize {
    let files = files_under(dir);
    assert!(!files.is_empty(), "no files under {}", dir.display());
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        for v in values {
            assert!(
                !holds(&bytes, v),
                "{} holds the private value {v:?}",
                f.display()
            );
        }
    }
    files.len()
}

// ---------------------------------------------------------------------------
// Clients the tests drive over JSON lines (the Python SDKs' clients)
// ---------------------------------------------------------------------------

/// The lines `out` gives (a child's standard output), as a thread reads
/// them, until it ends or the receiver is dropped.
pub fn lines_of(out: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// A client process driven over JSON lines: one command a line on its
/// standard input, one event a line on its standard output. Every line it
/// printed is kept (`seen`): all it received from the server it talks to.
pub struct LineClient {
    pub child: std::process::Child,
    stdin: std::process::ChildStdin,
    events: std::sync::mpsc::Receiver<String>,
    pub seen: Vec<String>,
    /// Events passed over by [`LineClient::next_any`] (notifications).
    skip: &'static [&'static str],
}

impl LineClient {
    /// Starts `python3 SCRIPT ARGS…` with more environment variables.
    pub fn python(
        script: &str,
        args: &[&str],
        envs: &[(&str, &str)],
        skip: &'static [&'static str],
    ) -> LineClient {
        let mut child = std::process::Command::new("python3")
            .arg(script)
            .args(args)
            .envs(envs.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("python3");
        let stdin = child.stdin.take().unwrap();
        let events = lines_of(child.stdout.take().unwrap());
        LineClient {
            child,
            stdin,
            events,
            seen: Vec::new(),
            skip,
        }
    }

    pub fn send(&mut self, cmd: Value) {
        use std::io::Write;
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next event that is not one to pass over, whatever it is.
    pub fn next_any(&mut self) -> Value {
        loop {
            let line = self
                .events
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("no event from the client; seen: {:#?}", self.seen));
            self.seen.push(line.clone());
            let event: Value = serde_json::from_str(&line).unwrap();
            if !self.skip.iter().any(|s| event["event"] == *s) {
                return event;
            }
        }
    }

    /// The next event, which must be `kind`.
    pub fn next(&mut self, kind: &str) -> Value {
        let event = self.next_any();
        assert_eq!(event["event"], kind, "{event}");
        event
    }

    /// Every line the client printed so far.
    pub fn everything(&mut self) -> String {
        while let Ok(line) = self.events.try_recv() {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }
}

impl Drop for LineClient {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = writeln!(self.stdin, "{}", json!({"op": "quit"}));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a bridge (`cheq mcp` or `cheq a2a`) in front of the RS at
/// `rs_url` on a free loopback port, as the test agent, and waits (bounded)
/// until `GET <probe>` answers `status`. Returns it and its base URL.
pub async fn spawn_bridge(
    command: &str,
    rs_url: &str,
    dir: &Path,
    extra: &[&str],
    probe: &str,
    status: u16,
) -> (Proc, String) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let log = dir.join(format!("{command}-{port}.log"));
    let mut args = vec![
        command,
        "--rs",
        rs_url,
        "--listen",
        &listen,
        "--client-id",
        "agent",
    ];
    args.extend_from_slice(extra);
    let name = format!("cheq {command}");
    let proc = Proc::spawn_with(&name, &args, &[("CHEQ_AGENT_SECRET", AGENT_SECRET)], &log);
    let base = format!("http://{listen}");
    let http = http_client();
    for _ in 0..200 {
        if let Ok(res) = http.get(format!("{base}{probe}")).send().await {
            assert_eq!(res.status().as_u16(), status);
            return (proc, base);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the bridge did not start:\n{}", proc.log());
}

// ---------------------------------------------------------------------------
// A small HTTP server that serves what a test tells it (an RS's discovery
// documents, §16.2)
// ---------------------------------------------------------------------------

/// One answer of a [`DocServer`].
#[derive(Clone)]
pub struct Reply {
    head: String,
    body: Vec<u8>,
    delay: Duration,
}

impl Reply {
    pub fn json(v: &Value) -> Reply {
        Reply::with("200 OK\r\ncontent-type: application/json", v.to_string())
    }

    pub fn with(head: &str, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            head: head.to_owned(),
            body: body.into(),
            delay: Duration::ZERO,
        }
    }

    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}

pub type DocAnswer = dyn Fn(&str, &str) -> Reply + Send + Sync;

/// A threaded HTTP/1.1 server on 127.0.0.1 that answers each `GET` with
/// `answer(its own origin, the path)`, and counts the requests.
pub struct DocServer {
    pub origin: String,
    pub port: u16,
    hits: Arc<AtomicUsize>,
}

impl DocServer {
    pub fn start(answer: impl Fn(&str, &str) -> Reply + Send + Sync + 'static) -> DocServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let origin = format!("http://127.0.0.1:{port}");
        let hits = Arc::new(AtomicUsize::new(0));
        let answer: Arc<DocAnswer> = Arc::new(answer);
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
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                            break;
                        }
                    }
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
    pub fn rs(change: impl Fn(&str, &mut Value) + Send + Sync + 'static) -> DocServer {
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

    pub fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// An RS discovery document (§16.2) for `origin`.
pub fn rs_document(origin: &str, prefix: &str, token_path: &str) -> Value {
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
pub fn rs_keys() -> Value {
    let key = cheq::sign::SigningKey::from_seed("rs-1", &[7; 32]).unwrap();
    json!({"keys": [key.public_jwk()]})
}

/// Polls `ok` every 100 ms until it holds, at most `limit`; how long it
/// took, or `None`.
pub async fn within<F, Fut>(limit: std::time::Duration, mut ok: F) -> Option<std::time::Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t0 = std::time::Instant::now();
    loop {
        if ok().await {
            return Some(t0.elapsed());
        }
        if t0.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The outcome at `result_uri` once it is final (200), polled for at most
/// 30 s; `logs` are shown when it never is.
pub async fn outcome_of(result_uri: &str, logs: &[&Proc]) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, body) = result_of(result_uri).await;
        if status == 200 {
            return body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no outcome at the result URI:\n{}",
            logs.iter().map(|p| p.log()).collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
