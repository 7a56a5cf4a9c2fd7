//! Sign-in with an identity provider (ISSUE 10), over real sockets: the CS and
//! RS in this process, node's oidc-provider (a certified OpenID provider) and
//! a provider that misbehaves on purpose (`tests/oidc/rogue.mjs`, signing
//! with node's jose) as real processes on loopback. A browser is played by a
//! reqwest client with a cookie jar that follows no redirect by itself.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use cheq::confirm::oidc::account_name;
use common::*;
use serde_json::{json, Value};
use std::io::BufRead;
use std::time::Duration;

const CAROL: &str = "carol@example.com";
const CAROL_IDP_PW: &str = "carol-idp-password";
const IDP_SECRET: &str = "idp-client-secret-for-tests";
const ROGUE_SECRET: &str = "rogue-client-secret";

/// The agent's result once the decision is there (polled, bounded).
async fn outcome_of(pack: &cheq::cheq::UriPack) -> Value {
    for _ in 0..100 {
        let (status, v) = result_of(&pack.result_uri).await;
        if status == 200 {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no result for {}", pack.result_uri);
}

/// A node process of `tests/oidc/`, killed when dropped.
struct Node {
    child: std::process::Child,
    issuer: String,
}

impl Node {
    fn start(script: &str, env_name: &str, config: Value) -> Node {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc");
        assert!(
            dir.join("node_modules/oidc-provider").exists(),
            "run tests/oidc/install.sh first (scripts/test does)"
        );
        let mut child = std::process::Command::new("node")
            .arg(dir.join(script))
            .env(env_name, config.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("node");
        // What it says on stderr, kept to say why if it does not start.
        let said = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        if let Some(stderr) = child.stderr.take() {
            let said = said.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stderr)
                    .lines()
                    .map_while(Result::ok)
                {
                    let mut said = said.lock().unwrap();
                    if said.len() < 4_096 {
                        said.push_str(&line);
                        said.push('\n');
                    }
                }
            });
        }
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(issuer) = line.strip_prefix("ready ") {
                    let _ = tx.send(issuer.to_owned());
                }
            }
        });
        let issuer = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                let status = child.try_wait().ok().flatten();
                std::thread::sleep(Duration::from_millis(200));
                let said = said.lock().unwrap().clone();
                panic!("{script} did not start (exit: {status:?}); it said:\n{said}")
            });
        Node { child, issuer }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A browser: one cookie jar for every site, redirects looked at one by one.
struct Web {
    http: reqwest::Client,
    cs: String,
}

struct Answer {
    status: u16,
    location: Option<String>,
    retry_after: Option<String>,
    text: String,
}

impl Answer {
    fn hidden(&self, name: &str) -> Option<String> {
        let marker = format!("name=\"{name}\" value=\"");
        let start = self.text.find(&marker)? + marker.len();
        let end = self.text[start..].find('"')? + start;
        Some(
            self.text[start..end]
                .replace("&#x2F;", "/")
                .replace("&amp;", "&"),
        )
    }

    fn link(&self, prefix: &str) -> Option<String> {
        let marker = format!("href=\"{prefix}");
        let start = self.text.find(&marker)? + "href=\"".len();
        let end = self.text[start..].find('"')? + start;
        Some(
            self.text[start..end]
                .replace("&#x2F;", "/")
                .replace("&amp;", "&")
                .replace("&#x3D;", "="),
        )
    }
}

impl Web {
    fn new(cs: &str) -> Web {
        Web {
            http: reqwest::Client::builder()
                .cookie_store(true)
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            cs: cs.trim_end_matches('/').to_owned(),
        }
    }

    fn url(&self, u: &str) -> String {
        if u.starts_with('/') {
            format!("{}{u}", self.cs)
        } else {
            u.to_owned()
        }
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Answer {
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        let location = res
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_owned());
        let retry_after = res
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let text = res.text().await.unwrap();
        Answer {
            status,
            location,
            retry_after,
            text,
        }
    }

    async fn get(&self, u: &str) -> Answer {
        self.send(self.http.get(self.url(u))).await
    }

    async fn post(&self, u: &str, form: &[(&str, &str)]) -> Answer {
        self.send(self.http.post(self.url(u)).form(form)).await
    }

    /// Posts the CS's local login form with `csrf` (next: /history).
    async fn local_login(&self, user: &str, password: &str, csrf: &str) -> Answer {
        let form = [
            ("username", user),
            ("password", password),
            ("csrf", csrf),
            ("next", "/history"),
        ];
        self.post("/login", &form).await
    }

    /// Follows redirects from `u` until an answer that is not one; returns
    /// it and every URL visited.
    async fn follow(&self, u: &str) -> (Answer, Vec<String>) {
        let mut url = self.url(u);
        let mut seen = vec![url.clone()];
        for _ in 0..20 {
            let a = self.get(&url).await;
            match (a.status, &a.location) {
                (301..=303 | 307 | 308, Some(next)) => {
                    url = absolute(&url, next);
                    seen.push(url.clone());
                }
                _ => return (a, seen),
            }
        }
        panic!("too many redirects: {seen:?}");
    }

    /// Starts a sign-in with provider `name` (back to `next`); returns the
    /// provider's login page (its URL and the answer).
    async fn to_provider_login(&self, name: &str, next: &str) -> (String, Answer) {
        let q = serde_urlencoded::to_string([("next", next)]).unwrap();
        let (page, seen) = self.follow(&format!("/oidc/login/{name}?{q}")).await;
        (seen.last().unwrap().clone(), page)
    }

    /// Signs `user` in at the provider's login form at `login_url` and
    /// follows the provider's redirects up to the CS callback, which is
    /// returned unvisited.
    async fn callback_url(&self, login_url: &str, user: &str, password: &str) -> String {
        let a = self
            .post(
                &format!("{login_url}/login"),
                &[("login", user), ("password", password)],
            )
            .await;
        assert_eq!(a.status, 303);
        let mut url = absolute(
            &format!("{login_url}/login"),
            a.location.as_deref().unwrap(),
        );
        while !url.contains("/oidc/callback") {
            let r = self.get(&url).await;
            url = absolute(
                &url,
                r.location.as_deref().expect("redirect to the callback"),
            );
        }
        url
    }

    /// Fills the oidc-provider login form at `login_url`; follows on to
    /// the end (through the CS callback).
    async fn idp_login(
        &self,
        login_url: &str,
        user: &str,
        password: &str,
    ) -> (Answer, Vec<String>) {
        let action = format!("{login_url}/login");
        let a = self
            .post(&action, &[("login", user), ("password", password)])
            .await;
        assert_eq!(a.status, 303, "IdP login: {}", a.text);
        let (page, mut seen) = self
            .follow(&absolute(&action, a.location.as_deref().unwrap()))
            .await;
        // §11: back at the start link, the filled-in form starts the
        // confirmation with the user's own POST (a GET starts nothing).
        let last = seen.last().cloned().unwrap_or_default();
        let start_uri = url::Url::parse(&last).ok().and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "resource_uri")
                .map(|(_, v)| v.into_owned())
        });
        match start_uri {
            Some(uri) if page.status == 200 => {
                let posted = self.post(&last, &[("resource_uri", &uri)]).await;
                assert_eq!(posted.status, 303, "start: {}", posted.text);
                let (page, more) = self
                    .follow(&absolute(&last, posted.location.as_deref().unwrap()))
                    .await;
                seen.extend(more);
                (page, seen)
            }
            _ => (page, seen),
        }
    }

    /// Signs in at the real provider as `user`, from the CS's login link,
    /// and ends where the CS sends the browser after (`next`).
    async fn sign_in_with_idp(
        &self,
        user: &str,
        password: &str,
        next: &str,
    ) -> (Answer, Vec<String>) {
        let (login_url, page) = self.to_provider_login("example", next).await;
        assert_eq!(page.status, 200, "IdP login page: {}", page.text);
        assert!(
            page.text.contains("Example identity provider"),
            "{}",
            page.text
        );
        self.idp_login(&login_url, user, password).await
    }
}

fn absolute(base: &str, location: &str) -> String {
    url::Url::parse(base)
        .unwrap()
        .join(location)
        .unwrap()
        .to_string()
}

struct World {
    env: Env,
    idp: Node,
    rogue: Node,
}

async fn world(cs_top: &str, rs_entry_keys: &str) -> World {
    world_with(cs_top, rs_entry_keys, true).await
}

/// The world, with a provider that sends `auth_time` in every ID token
/// (`require_auth_time`), or only when `max_age` asks for it.
async fn world_with(cs_top: &str, rs_entry_keys: &str, require_auth_time: bool) -> World {
    let (idp_port, rogue_port) = (free_port(), free_port());
    let idp_issuer = format!("http://127.0.0.1:{idp_port}");
    let rogue_issuer = format!("http://127.0.0.1:{rogue_port}");
    let down_port = free_port();
    let tables = format!(
        r#"
[[identity_providers]]
name = "example"
issuer = "{idp_issuer}"
client_id = "cheq"
client_secret = "{IDP_SECRET}"

[[identity_providers]]
name = "down"
issuer = "http://127.0.0.1:{down_port}"
client_id = "cheq"
client_secret = "nobody-listens"

[[identity_providers]]
name = "rogue"
issuer = "{rogue_issuer}"
client_id = "cheq"
client_secret = "{ROGUE_SECRET}"
"#
    );
    let env = Env::start(Options {
        cs_toml_top: cs_top.to_owned(),
        cs_toml_tables: tables,
        rs_entry_keys: rs_entry_keys.to_owned(),
        agent_subject: Some(CAROL.to_owned()),
        ..Default::default()
    })
    .await;
    let callback = format!("{}/oidc/callback", env.cs_origin);
    let idp = Node::start(
        "provider.mjs",
        "CHEQ_IDP",
        json!({
            "port": idp_port,
            "client_id": "cheq",
            "client_secret": IDP_SECRET,
            "redirect_uris": [callback],
            "post_logout_redirect_uris": [format!("{}/login", env.cs_origin)],
            "require_auth_time": require_auth_time,
            "accounts": {
                "carol": {"password": CAROL_IDP_PW, "email": CAROL, "email_verified": true, "amr": ["pwd", "mfa"]},
                "eve": {"password": "eve-idp-password", "email": CAROL, "email_verified": false, "amr": ["pwd"]},
                "frank": {"password": "frank-idp-password", "email": "frank@example.com", "email_verified": true, "amr": ["urn:example:custom"]}
            }
        }),
    );
    assert_eq!(idp.issuer, idp_issuer);
    let rogue = Node::start(
        "rogue.mjs",
        "CHEQ_ROGUE",
        json!({"port": rogue_port, "client_id": "cheq", "client_secret": ROGUE_SECRET,
               "sub": "rogue-user", "email": CAROL}),
    );
    World { env, idp, rogue }
}

impl World {
    async fn rogue_mode(&self, mode: &str) {
        let res = http_client()
            .post(format!("{}/_mode?m={mode}", self.rogue.issuer))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
    }

    async fn rogue_stats(&self) -> Value {
        http_client()
            .get(format!("{}/_stats", self.rogue.issuer))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// A fresh browser through the rogue provider; returns the CS's last
    /// answer.
    async fn through_rogue(&self) -> (Web, Answer) {
        let web = Web::new(&self.env.cs_origin);
        let (a, seen) = web.follow("/oidc/login/rogue?next=%2Fhistory").await;
        assert!(
            seen.iter().any(|u| u.contains("/oidc/callback")),
            "{seen:?}"
        );
        (web, a)
    }
}

async fn signed_in(web: &Web) -> bool {
    web.get("/history").await.status == 200
}

/// The confirmation header of a decided document.
fn confirmation_header(document: &str) -> Value {
    let doc: Value = serde_json::from_str(document).unwrap();
    let protected = doc["signatures"][1]["protected"].as_str().unwrap();
    serde_json::from_slice(&cheq::sign::b64::decode(protected).unwrap()).unwrap()
}

/// Whether OpenID Connect tests with node's oidc-provider can run here (else they are skipped,
/// saying so; `scripts/test` installs what they need).
fn oidc_provider() -> bool {
    cheq::store::testing::can_run(
        "the OpenID Connect tests with node's oidc-provider",
        &[cheq::store::testing::Outside::Node("oidc")],
    )
}

#[actix_web::test]
async fn an_idp_login_decides_an_email_subject_end_to_end() {
    if !oidc_provider() {
        return;
    }
    let w = world("", "").await;
    let env = &w.env;
    let pack = env.invoke().await;
    let web = Web::new(&env.cs_origin);
    // §2 through login: the login page offers the provider beside the form.
    let start = web
        .post(&env.cs_url, &[("resource_uri", &pack.resource_uri)])
        .await;
    assert_eq!(start.status, 303);
    let login = web.get(start.location.as_deref().unwrap()).await;
    assert_eq!(login.status, 200);
    assert!(
        login.text.contains("Sign in with example"),
        "{}",
        login.text
    );
    assert!(login.text.contains("Sign in with rogue"), "{}", login.text);
    let link = login.link("/oidc/login/example").expect("provider link");
    // To the provider: code flow with PKCE (S256), state, nonce, scopes.
    let first = web.get(&link).await;
    assert_eq!(first.status, 303);
    let authorize = url::Url::parse(first.location.as_deref().unwrap()).unwrap();
    assert!(authorize.as_str().starts_with(&w.idp.issuer));
    let q: std::collections::HashMap<_, _> = authorize.query_pairs().into_owned().collect();
    assert_eq!(q["response_type"], "code");
    assert_eq!(q["client_id"], "cheq");
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(
        q["redirect_uri"],
        format!("{}/oidc/callback", env.cs_origin)
    );
    assert!(q["state"].len() >= 22 && q["nonce"].len() >= 22);
    assert_eq!(q["scope"], "openid email");
    let before = chrono::Utc::now().timestamp();
    let (idp_page, seen) = web.follow(authorize.as_str()).await;
    let login_url = seen.last().unwrap().clone();
    assert_eq!(idp_page.status, 200);
    // A wrong password at the provider: its own page, nothing at the CS.
    let wrong = web
        .post(
            &format!("{login_url}/login"),
            &[("login", "carol"), ("password", "nope")],
        )
        .await;
    assert_eq!(wrong.status, 401);
    let (page, seen) = web.idp_login(&login_url, "carol", CAROL_IDP_PW).await;
    assert!(
        seen.iter().any(|u| u.contains("/oidc/callback?")),
        "{seen:?}"
    );
    assert!(seen.last().unwrap().contains("/c/"), "{seen:?}");
    assert_eq!(page.status, 200, "{}", page.text);
    let account = account_name(&w.idp.issuer, "carol");
    assert!(
        page.text.contains("carol@example.com (via example)"),
        "signed in through the provider: {}",
        page.text
    );
    // Decide.
    let path = url::Url::parse(seen.last().unwrap())
        .unwrap()
        .path()
        .to_owned();
    let csrf = page.hidden("csrf").unwrap();
    let view = page.hidden("view").unwrap();
    let outcome = web
        .post(
            &path,
            &[("csrf", &csrf), ("view", &view), ("decision", "accept")],
        )
        .await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    let result = outcome_of(&pack).await;
    assert_eq!(result["status"], "accepted", "{result}");
    // The evidence: sub is the CS account, auth_time from the ID token, amr
    // the provider's RFC 8176 values.
    let records = env.records(&account);
    assert_eq!(records.len(), 1);
    let evidence = web
        .get(&format!("/history/{}.json", records[0].key().id()))
        .await;
    assert_eq!(evidence.status, 200);
    let header = confirmation_header(&evidence.text);
    assert_eq!(header["sub"], account.as_str());
    let auth_time = header["auth_time"].as_i64().unwrap();
    assert!(
        auth_time >= before - 1 && auth_time <= header["iat"].as_i64().unwrap(),
        "{header}"
    );
    assert_eq!(header["amr"], json!(["pwd", "mfa"]));
    // History works the same.
    let history = web.get("/history").await;
    assert!(
        history.text.contains(&records[0].key().id()),
        "{}",
        history.text
    );
    // The account: the verified e-mail, no password.
    let stored = env.cs.accounts.get(&account).unwrap().unwrap();
    assert_eq!(stored.email.as_deref(), Some(CAROL));
    assert!(stored.password_hash.is_empty());
    // A local login with that name and any password fails.
    let mut b = env.browser();
    let res = b.login_at("/login", &account, "").await;
    assert_eq!(res.status, 401);

    // Logout ends the CS session and offers the provider's end-session link.
    let csrf = history.hidden("csrf").unwrap();
    let out = web.post("/logout", &[("csrf", &csrf)]).await;
    assert_eq!(out.status, 200, "{}", out.text);
    assert!(!signed_in(&web).await);
    let end = out
        .link(&format!("{}/session/end", w.idp.issuer))
        .expect("end-session link");
    let end = url::Url::parse(&end).unwrap();
    let eq: std::collections::HashMap<_, _> = end.query_pairs().into_owned().collect();
    assert_eq!(eq["client_id"], "cheq");
    assert_eq!(
        eq["post_logout_redirect_uri"],
        format!("{}/login", env.cs_origin)
    );
    assert!(eq["id_token_hint"].split('.').count() == 3);
    // The page's own login form works (a fresh pre-login cookie and token).
    let other = Web::new(&env.cs_origin);
    let csrf = out.hidden("csrf").unwrap();
    assert!(!csrf.is_empty());
    let local = web.local_login("alice", ALICE_PW, &csrf).await;
    assert_eq!(local.status, 303, "{}", local.text);
    assert!(signed_in(&web).await);
    // (and a token from that page is no good in another browser)
    let stolen = other.local_login("alice", ALICE_PW, &csrf).await;
    assert_eq!(stolen.status, 403, "{}", stolen.text);
    let history = web.get("/history").await;
    let csrf = history.hidden("csrf").unwrap();
    let out2 = web.post("/logout", &[("csrf", &csrf)]).await;
    assert_eq!(
        out2.status, 303,
        "a local account's logout goes to the login page"
    );
    assert!(!signed_in(&web).await);
    let ended = web.get(end.as_str()).await;
    assert_eq!(
        ended.status, 200,
        "the provider's logout page: {}",
        ended.text
    );

    // The same person again: the same account; a second provider claiming
    // carol's e-mail is refused, and stores nothing.
    // (The provider still has her session, so no password is asked.)
    let (_, again) = web.to_provider_login("example", "/history").await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert!(again.text.contains("Your decisions"), "{}", again.text);
    assert_eq!(env.records(&account).len(), 1);
    w.rogue_mode("good").await;
    let (_, clash) = w.through_rogue().await;
    assert_eq!(clash.status, 409, "{}", clash.text);
    assert!(
        clash.text.contains("carol@example.com already belongs"),
        "{}",
        clash.text
    );
    assert!(env
        .cs
        .accounts
        .get(&account_name(&w.rogue.issuer, "rogue-user"))
        .unwrap()
        .is_none());
}

#[actix_web::test]
async fn an_unverified_email_never_matches() {
    if !oidc_provider() {
        return;
    }
    let w = world("", "").await;
    let env = &w.env;
    let pack = env.invoke().await;
    // eve's provider says her e-mail is carol's, unverified.
    let web = Web::new(&env.cs_origin);
    let (page, _) = web
        .sign_in_with_idp("eve", "eve-idp-password", "/history")
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    let eve = env
        .cs
        .accounts
        .get(&account_name(&w.idp.issuer, "eve"))
        .unwrap()
        .unwrap();
    assert_eq!(eve.email, None, "an unverified e-mail is not kept");
    let start = web
        .post(&env.cs_url, &[("resource_uri", &pack.resource_uri)])
        .await;
    let (refused, _) = web.follow(start.location.as_deref().unwrap()).await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    assert!(
        refused.text.contains("belongs to another account"),
        "{}",
        refused.text
    );
    // Carol (verified) is not blocked by eve's claim and decides.
    let carol = Web::new(&env.cs_origin);
    let (login_url, _) = carol.to_provider_login("example", "/history").await;
    let (_, _) = carol.idp_login(&login_url, "carol", CAROL_IDP_PW).await;
    let start = carol
        .post(&env.cs_url, &[("resource_uri", &pack.resource_uri)])
        .await;
    let (page, _) = carol.follow(start.location.as_deref().unwrap()).await;
    assert_eq!(page.status, 200, "{}", page.text);
}

#[actix_web::test]
async fn state_missing_swapped_or_without_cookie_is_refused_and_nothing_is_stored() {
    if !oidc_provider() {
        return;
    }
    let w = world("", "").await;
    let env = &w.env;
    let alice = Web::new(&env.cs_origin);
    let mallory = Web::new(&env.cs_origin);
    // Both start a sign-in; alice completes hers at the provider, but her
    // callback URL is played in mallory's browser (login CSRF / swap).
    let (alice_login, _) = alice.to_provider_login("example", "/history").await;
    let (_, _) = mallory.to_provider_login("example", "/history").await;
    let callback = alice
        .callback_url(&alice_login, "carol", CAROL_IDP_PW)
        .await;
    let swapped = mallory.get(&callback).await;
    assert_eq!(swapped.status, 400, "{}", swapped.text);
    assert!(swapped
        .text
        .contains("does not belong to the sign-in started in this browser"));
    assert!(!signed_in(&mallory).await);
    // Without the state, or with no pending cookie at all: refused too.
    let no_state = {
        let mut u = url::Url::parse(&callback).unwrap();
        let kept: Vec<(String, String)> = u
            .query_pairs()
            .filter(|(k, _)| k != "state")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        u.query_pairs_mut().clear().extend_pairs(kept);
        u.to_string()
    };
    assert_eq!(alice.get(&no_state).await.status, 400);
    let stranger = Web::new(&env.cs_origin);
    let none = stranger.get(&callback).await;
    assert_eq!(none.status, 400);
    assert!(
        none.text.contains("not started in this browser"),
        "{}",
        none.text
    );
    // Nothing was stored for carol by any of these.
    let carol = account_name(&w.idp.issuer, "carol");
    assert!(env.cs.accounts.get(&carol).unwrap().is_none());
    // The code was not spent by the refusals: alice's own callback works once.
    let ok = alice.get(&callback).await;
    assert_eq!(ok.status, 303, "{}", ok.text);
    assert!(signed_in(&alice).await);
    assert!(env.cs.accounts.get(&carol).unwrap().is_some());
    // Played again: the pending cookie is gone.
    let replay = alice.get(&callback).await;
    assert_eq!(replay.status, 400, "{}", replay.text);
    // The provider cancelled: a page, not signed in.
    let web = Web::new(&env.cs_origin);
    let (login_url, _) = web.to_provider_login("example", "/history").await;
    let cancel = web.post(&format!("{login_url}/abort"), &[]).await;
    let (page, _) = web
        .follow(&absolute(
            &format!("{login_url}/abort"),
            cancel.location.as_deref().unwrap(),
        ))
        .await;
    assert_eq!(page.status, 401, "{}", page.text);
    assert!(page.text.contains("did not sign you in"), "{}", page.text);
    // An unknown provider; a provider that is down.
    assert_eq!(web.get("/oidc/login/nobody?next=%2F").await.status, 404);
    let down = web.get("/oidc/login/down?next=%2F").await;
    assert_eq!(down.status, 502, "{}", down.text);
    assert!(
        down.text.contains("down could not be reached"),
        "{}",
        down.text
    );
}

/// §2: failed callbacks are rate-limited per address, under a key of their
/// own, checked (and the failure counted) before the provider is asked to
/// redeem a code. Past the address's free failures, even a good answer is
/// refused (429 with `Retry-After`) without being spent: once the lock
/// ends, it signs in. The password form from that address is not locked.
#[actix_web::test]
async fn failed_callbacks_are_limited_per_address_before_a_code_is_redeemed() {
    if !oidc_provider() {
        return;
    }
    let w = world("", "").await;
    let env = &w.env;
    let web = Web::new(&env.cs_origin);
    let (login_url, _) = web.to_provider_login("example", "/history").await;
    let callback = web.callback_url(&login_url, "carol", CAROL_IDP_PW).await;
    let forged = format!("{}/oidc/callback?code=made-up&state=made-up", env.cs_origin);
    // Policy::ADDRESS: 20 free failures; the 21st locks the address.
    for i in 0..21 {
        let refused = web.get(&forged).await;
        assert_eq!(refused.status, 400, "attempt {i}: {}", refused.text);
    }
    let locked = web.get(&forged).await;
    assert_eq!(locked.status, 429, "{}", locked.text);
    let retry: i64 = locked.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    let held = web.get(&callback).await;
    assert_eq!(held.status, 429, "the good answer waits too: {}", held.text);
    assert!(!signed_in(&web).await);
    // A key of its own: the password form from the same address still works.
    let other = Web::new(&env.cs_origin);
    let form = other.get("/login").await;
    let local = other
        .local_login("alice", ALICE_PW, &form.hidden("csrf").unwrap())
        .await;
    assert_eq!(local.status, 303, "{}", local.text);
    assert!(signed_in(&other).await);
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let ok = web.get(&callback).await;
    assert_eq!(ok.status, 303, "the code was not spent: {}", ok.text);
    assert!(signed_in(&web).await);
}

/// A callback played again with all the browser had (the code, the state
/// and the pending sign-in's cookie): the provider refuses the code it has
/// already redeemed, which is the caller's doing, not the provider's
/// trouble: 400, counted against the address like every bad callback.
#[actix_web::test]
async fn a_replayed_callback_is_the_callers_fault_and_counted() {
    if !oidc_provider() {
        return;
    }
    let w = world("", "").await;
    let env = &w.env;
    let web = Web::new(&env.cs_origin);
    // The start, by hand, to keep the pending sign-in's cookie.
    let start = web
        .http
        .get(web.url("/oidc/login/example?next=%2Fhistory"))
        .send()
        .await
        .unwrap();
    assert_eq!(start.status(), 303);
    let pending = start
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("cheq_oidc="))
        .and_then(|c| c.split(';').next())
        .expect("the pending sign-in's cookie")
        .to_owned();
    let authorize = start.headers()["location"].to_str().unwrap().to_owned();
    let (_, seen) = web.follow(&authorize).await;
    let callback = web
        .callback_url(seen.last().unwrap(), "carol", CAROL_IDP_PW)
        .await;
    let ok = web.get(&callback).await;
    assert_eq!(ok.status, 303, "{}", ok.text);
    assert!(signed_in(&web).await);
    let replayer = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let replay = || async {
        let res = replayer
            .get(&callback)
            .header("cookie", &pending)
            .send()
            .await
            .unwrap();
        (res.status().as_u16(), res.text().await.unwrap())
    };
    // Policy::ADDRESS: 20 free failures; the 21st locks the address.
    for i in 0..21 {
        let (status, text) = replay().await;
        assert_eq!(status, 400, "replay {i}: {text}");
        assert!(text.contains("was used already"), "{text}");
    }
    let (status, text) = replay().await;
    assert_eq!(status, 429, "{text}");
}

#[actix_web::test]
async fn every_bad_id_token_is_refused_by_its_own_rule() {
    if !oidc_provider() {
        return;
    }
    let w = world("", "").await;
    // The harness can pass: an honest answer signs in (RS256, then ES256),
    // with client_secret_post (the rogue's only method).
    for mode in ["good", "good-es256"] {
        w.rogue_mode(mode).await;
        let (web, a) = w.through_rogue().await;
        assert_eq!(a.status, 200, "{mode}: {}", a.text);
        assert!(signed_in(&web).await, "{mode}");
    }
    let cases = [
        ("wrong-iss", "issued by someone else"),
        ("wrong-aud", "for another client"),
        ("extra-aud", "for another client"),
        ("wrong-azp", "authorized party"),
        ("other-key", "signature does not verify"),
        ("alg-none", "algorithm"),
        ("hs256", "algorithm"),
        ("expired", "has expired"),
        ("iat-future", "issue time"),
        ("iat-old", "issue time"),
        ("no-id-token", "no ID token"),
    ];
    for (mode, words) in cases {
        w.rogue_mode(mode).await;
        let (web, a) = w.through_rogue().await;
        assert_eq!(a.status, 401, "{mode}: {}", a.text);
        assert!(a.text.contains(words), "{mode}: {}", a.text);
        assert!(!signed_in(&web).await, "{mode}");
    }
    // A replayed ID token (the nonce of an earlier sign-in).
    w.rogue_mode("replay-nonce").await;
    let (web, first) = w.through_rogue().await;
    assert_eq!(first.status, 200, "the first use: {}", first.text);
    assert!(signed_in(&web).await);
    let (web, second) = w.through_rogue().await;
    assert_eq!(second.status, 401, "{}", second.text);
    assert!(second.text.contains("nonce"), "{}", second.text);
    assert!(!signed_in(&web).await);
    // A new key at the provider: found by fetching its JWKS again.
    let before = w.rogue_stats().await["jwks"].as_u64().unwrap();
    w.rogue_mode("rotate").await;
    let (web, a) = w.through_rogue().await;
    assert_eq!(a.status, 200, "rotated key: {}", a.text);
    assert!(signed_in(&web).await);
    let after_rotation = w.rogue_stats().await["jwks"].as_u64().unwrap();
    assert_eq!(after_rotation, before + 1, "one refetch for the new kid");
    // A flood of tokens naming an unknown kid: refused, and the JWKS is not
    // fetched again within the minute.
    w.rogue_mode("unknown-kid").await;
    for _ in 0..5 {
        let (_, a) = w.through_rogue().await;
        assert_eq!(a.status, 401, "{}", a.text);
        assert!(a.text.contains("no key of the provider"), "{}", a.text);
    }
    assert_eq!(
        w.rogue_stats().await["jwks"].as_u64().unwrap(),
        after_rotation
    );
}

/// Accepts on the confirmation page `page` (at `path`), and returns the
/// confirmation header of carol's evidence.
async fn carol_accepts(
    w: &World,
    web: &Web,
    pack: &cheq::cheq::UriPack,
    path: &str,
    page: &Answer,
) -> Value {
    let env = &w.env;
    let csrf = page.hidden("csrf").unwrap();
    let view = page.hidden("view").unwrap();
    let outcome = web
        .post(
            path,
            &[("csrf", &csrf), ("view", &view), ("decision", "accept")],
        )
        .await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    assert_eq!(outcome_of(pack).await["status"], "accepted");
    let records = env.records(&account_name(&w.idp.issuer, "carol"));
    assert_eq!(records.len(), 1);
    let evidence = web
        .get(&format!("/history/{}.json", records[0].key().id()))
        .await;
    assert_eq!(evidence.status, 200);
    confirmation_header(&evidence.text)
}

/// A provider that does not say when the user authenticated (its ID token
/// has no `auth_time` unless `max_age` asks): the CS makes up no time. With
/// no freshness rule, carol decides, and the countersignature states
/// `auth_time` 0, which claims no freshness (§5 requires the member).
#[actix_web::test]
async fn an_unreported_auth_time_is_stated_as_unknown() {
    if !oidc_provider() {
        return;
    }
    let w = world_with("", "", false).await;
    let env = &w.env;
    let pack = env.invoke().await;
    let web = Web::new(&env.cs_origin);
    let (page, _) = web
        .sign_in_with_idp("carol", CAROL_IDP_PW, "/history")
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    let start = web
        .post(&env.cs_url, &[("resource_uri", &pack.resource_uri)])
        .await;
    let path = start.location.clone().unwrap();
    let page = web.get(&path).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let header = carol_accepts(&w, &web, &pack, &path, &page).await;
    assert_eq!(header["auth_time"], 0, "{header}");
    assert_eq!(header["amr"], json!(["pwd", "mfa"]));
}

/// With a freshness rule (`max_auth_age_secs`), a sign-in whose time no one
/// reported is not fresh: carol, just signed in, is sent back to the
/// provider at once with `max_age` (which obliges it to report
/// `auth_time`), and the countersignature states the time it reports.
#[actix_web::test]
async fn an_unreported_auth_time_is_never_fresh_enough() {
    if !oidc_provider() {
        return;
    }
    let w = world_with("", "max_auth_age_secs = 300\n", false).await;
    let env = &w.env;
    let pack = env.invoke().await;
    let web = Web::new(&env.cs_origin);
    let (page, _) = web
        .sign_in_with_idp("carol", CAROL_IDP_PW, "/history")
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    let start = web
        .post(&env.cs_url, &[("resource_uri", &pack.resource_uri)])
        .await;
    let path = start.location.clone().unwrap();
    let reauth = web.get(&path).await;
    assert_eq!(reauth.status, 303, "{}", reauth.text);
    let again = reauth.location.clone().unwrap();
    assert!(
        again.starts_with("/oidc/login/example?") && again.contains("max_age=300"),
        "{again}"
    );
    let before = chrono::Utc::now().timestamp();
    let (idp_page, seen) = web.follow(&again).await;
    assert!(
        idp_page.text.contains("Example identity provider"),
        "{}",
        idp_page.text
    );
    let (page, seen) = web
        .idp_login(seen.last().unwrap(), "carol", CAROL_IDP_PW)
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(seen.last().unwrap().ends_with(&path), "{seen:?}");
    let header = carol_accepts(&w, &web, &pack, &path, &page).await;
    let auth_time = header["auth_time"].as_i64().unwrap();
    assert!(
        auth_time >= before - 1 && auth_time <= header["iat"].as_i64().unwrap(),
        "{header}"
    );
}

#[actix_web::test]
async fn max_auth_age_sends_people_back_to_sign_in() {
    if !oidc_provider() {
        return;
    }
    // Top level one hour; this RS ten seconds (it replaces the default):
    // long enough for a sign-in at the provider, the page and the decision
    // on a loaded machine, short enough to wait out.
    let w = world("max_auth_age_secs = 3600", "max_auth_age_secs = 10\n").await;
    let env = &w.env;
    let pack = env.invoke().await;
    let web = Web::new(&env.cs_origin);
    let (page, _) = web
        .sign_in_with_idp("carol", CAROL_IDP_PW, "/history")
        .await;
    assert_eq!(page.status, 200);
    tokio::time::sleep(Duration::from_secs(12)).await;
    // Too old now: the page sends carol to the provider, asking for a new
    // authentication (max_age, prompt=login).
    let start = web
        .post(&env.cs_url, &[("resource_uri", &pack.resource_uri)])
        .await;
    let page_path = start.location.clone().unwrap();
    assert!(page_path.starts_with("/c/"), "{page_path}");
    let reauth = web.get(&page_path).await;
    assert_eq!(reauth.status, 303);
    let again = reauth.location.clone().unwrap();
    assert!(
        again.starts_with("/oidc/login/example?") && again.contains("max_age=10"),
        "{again}"
    );
    let to_idp = web.get(&again).await;
    let authorize = to_idp.location.clone().unwrap();
    assert!(
        authorize.contains("max_age=10") && authorize.contains("prompt=login"),
        "{authorize}"
    );
    // The provider asks for the password again (its session is not enough).
    let (idp_page, seen) = web.follow(&authorize).await;
    assert!(
        idp_page.text.contains("Example identity provider"),
        "{}",
        idp_page.text
    );
    let (page, seen2) = web
        .idp_login(seen.last().unwrap(), "carol", CAROL_IDP_PW)
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(seen2.last().unwrap().ends_with(&page_path), "{seen2:?}");
    let csrf = page.hidden("csrf").unwrap();
    let view = page.hidden("view").unwrap();
    let outcome = web
        .post(
            &page_path,
            &[("csrf", &csrf), ("view", &view), ("decision", "accept")],
        )
        .await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    assert_eq!(outcome_of(&pack).await["status"], "accepted");

    // A provider that ignores max_age (an old auth_time, or none) is refused.
    for mode in ["stale-auth-time", "no-auth-time"] {
        w.rogue_mode(mode).await;
        let web = Web::new(&env.cs_origin);
        let (a, _) = web
            .follow("/oidc/login/rogue?next=%2Fhistory&max_age=10")
            .await;
        assert_eq!(a.status, 401, "{mode}: {}", a.text);
        assert!(a.text.contains("not fresh enough"), "{mode}: {}", a.text);
    }
    // Without max_age the same token passes every ID-token check (auth_time
    // is only required when a fresh sign-in was asked for): it gets as far
    // as the account, where carol's e-mail is already taken by her login at
    // the other provider (so a second provider cannot claim it).
    let (_, a) = w.through_rogue().await;
    assert_eq!(a.status, 409, "{}", a.text);
    assert!(a.text.contains("already belongs"), "{}", a.text);

    // A local account is sent back to the local form.
    let mut b = env.browser();
    b.sign_in("alice", ALICE_PW).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    let pack2 = invoke_tool(&env.rs_url, "book_flight", &flight_params()).await;
    let res = b
        .post(START, &[("resource_uri", &pack2.resource_uri)])
        .await;
    let path = b.after_login(res.location()).await;
    let res = b.get(&path).await;
    assert_eq!(res.status, 303);
    let loc = res.location();
    assert!(
        loc.starts_with("/login?") && loc.contains("reauth=10"),
        "{loc}"
    );
    let form = b.get(&loc).await;
    assert_eq!(form.status, 200);
    assert!(form.text.contains("sign in again"), "{}", form.text);
}
