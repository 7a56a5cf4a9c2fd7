//! A host anyone can use (PROTOCOL.md §16), as real processes on real
//! sockets over one PostgreSQL database: two instances of a CS in `open`
//! registration mode, and an RS that neither has in its file, whose own
//! file names the CS by its issuer alone and holds no shared secret.
//!
//! - the RS reads the CS's discovery document, registers itself, and both
//!   instances serve it within 5 s of that, with nothing edited and no
//!   restart;
//! - the CS fetches the CHEQ with a token it got by its own key's client
//!   assertion (there is no secret to use), a user confirms at the second
//!   instance, the agent reads the outcome, and the decided document
//!   verifies offline with `cheq verify` under the two published key sets;
//! - `cheq rs block` (straight to the database) stops the RS on the second
//!   instance within 5 s: its start link shows a page that says so, its
//!   registration is refused; `cheq rs unblock` restores it, and a flow
//!   completes again;
//! - registration turned off on an instance refuses new registrations and
//!   still serves the RS registered before.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use std::time::Duration;

/// How long a change may take to hold on every instance.
const EVERY_INSTANCE: Duration = Duration::from_secs(5);

fn postgres() -> bool {
    cheq::store::testing::can_run(
        "the public host's tests on PostgreSQL",
        &[cheq::store::testing::Outside::Postgres],
    )
}

struct Host {
    dir: tempfile::TempDir,
    db: String,
    cs1_url: String,
    cs2_url: String,
    cs2_listen: String,
    rs_url: String,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let (cs1, cs2, rs) = (free_port(), free_port(), free_port());
        let cs1_url = format!("http://127.0.0.1:{cs1}");
        let rs_url = format!("http://127.0.0.1:{rs}");
        let path = |p: &str| toml_path(&root.join(p));
        // The host: no resource server in its file, registration open; the
        // test's servers are on loopback, which the operator allows.
        std::fs::write(
            root.join("cs.toml"),
            format!(
                "listen = \"127.0.0.1:{cs1}\"\npublic_url = \"{cs1_url}\"\n\
                 data_dir = \"{data}\"\nsigning_key = \"{key}\"\nmetrics = \"open\"\n\n\
                 [registration]\nmode = \"open\"\nallow_addresses = [\"127.0.0.0/8\"]\n",
                data = path("cs"),
                key = path("keys/cs.jwk"),
            ),
        )
        .unwrap();
        // The RS: its CS by issuer alone, no `cs` client, no secret.
        std::fs::write(
            root.join("rs.toml"),
            format!(
                "listen = \"127.0.0.1:{rs}\"\npublic_url = \"{rs_url}\"\n\
                 data_dir = \"{data}\"\nsigning_key = \"{key}\"\nmetrics = \"open\"\n\
                 cheq_ttl_secs = 900\nretry_after_secs = 1\n\
                 allow_addresses = [\"127.0.0.0/8\"]\n\n\
                 [[clients]]\nclient_id = \"agent\"\nclient_secret = \"{AGENT_SECRET}\"\n\
                 role = \"agent\"\nsubject = \"alice\"\n\n\
                 [confirmation_server]\nissuer = \"{cs1_url}\"\n",
                data = path("rs"),
                key = path("keys/rs.jwk"),
            ),
        )
        .unwrap();
        Host {
            db: cheq::store::pg::test_database("public_host").unwrap(),
            cs2_url: format!("http://127.0.0.1:{cs2}"),
            cs2_listen: format!("127.0.0.1:{cs2}"),
            cs1_url,
            rs_url,
            dir,
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn envs(&self) -> Vec<(&str, &str)> {
        vec![("CHEQ_DATABASE_URL", self.db.as_str())]
    }

    async fn start_cs(&self, second: bool) -> Proc {
        self.start_cs_with("cs.toml", second).await
    }

    async fn start_cs_with(&self, config: &str, second: bool) -> Proc {
        let mut envs = self.envs();
        let (name, base, log) = if second {
            envs.push(("CHEQ_LISTEN", self.cs2_listen.as_str()));
            ("cs2", &self.cs2_url, "cs2.log")
        } else {
            ("cs1", &self.cs1_url, "cs1.log")
        };
        let config = self.path(config);
        start_server_with(
            name,
            &["serve", "--config", &config],
            &envs,
            &self.dir.path().join(log),
            base,
        )
        .await
    }

    async fn start_rs(&self) -> Proc {
        let config = self.path("rs.toml");
        start_server(
            "rs",
            &["resource-server", "--config", &config],
            &self.dir.path().join("rs.log"),
            &self.rs_url,
        )
        .await
    }

    /// `cheq rs ARGS… --config cs.toml`, on the database: (success, output).
    fn rs_cmd(&self, args: &[&str]) -> (bool, String) {
        let config = self.path("cs.toml");
        let mut all = vec!["rs"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--config", &config]);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cheq"))
            .args(&all)
            .envs(self.envs())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

/// Starts a confirmation of `resource_uri` at `cs` (signed in or not):
/// the answer to the user's `POST`.
async fn start(b: &mut Browser, resource_uri: &str) -> Page {
    b.post("/", &[("resource_uri", resource_uri)]).await
}

/// Accepts `pack` at the browser's CS (signed in as alice) and waits for
/// the agent's result.
async fn confirm(b: &mut Browser, pack: &cheq::cheq::UriPack, logs: &[&Proc]) -> serde_json::Value {
    let res = start(b, &pack.resource_uri).await;
    assert_eq!(res.status, 303, "start: {}", res.text);
    let location = res.location();
    assert!(location.starts_with("/c/"), "{location}");
    let page = b.get(&location).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let done = b.decide(&location, &page, "accept").await;
    assert!(done.status < 400, "decide: {}", done.text);
    outcome_of(&pack.result_uri, logs).await
}

#[test]
fn an_rs_the_host_never_heard_of_registers_and_is_served_blocked_and_restored() {
    if !postgres() {
        return;
    }
    let h = Host::new();
    let cs_config = h.path("cs.toml");
    let (ok, out) = user_add_with(
        "alice",
        ALICE_PW,
        &["--config", &cs_config],
        &[("CHEQ_DATABASE_URL", &h.db)],
    );
    assert!(ok, "{out}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let cs1 = h.start_cs(false).await;
        let cs2 = h.start_cs(true).await;
        // Nothing is registered yet.
        let (ok, out) = h.rs_cmd(&["list"]);
        assert!(ok && !out.contains(&h.rs_url), "{out}");

        // 1. The RS reads the host's document and registers itself.
        let rs = h.start_rs().await;
        let logs = [&cs1, &cs2, &rs];
        let registered = within(Duration::from_secs(30), || async {
            let (ok, out) = h.rs_cmd(&["list"]);
            ok && out.contains(&h.rs_url) && out.contains("active")
        })
        .await;
        assert!(
            registered.is_some(),
            "the RS did not register:\n{}\n{}",
            rs.log(),
            cs1.log()
        );
        assert!(
            rs.log().contains("registered"),
            "the RS says where it registered:\n{}",
            rs.log()
        );

        // 2. Every instance serves it within 5 s: the second instance
        //    starts a confirmation of one of its CHEQs.
        let pack = invoke_flight(&h.rs_url).await;
        assert_eq!(
            pack.confirmation_uri.trim_end_matches('/'),
            h.cs1_url,
            "the RS took its confirmation URI from the host's document"
        );
        let mut b2 = Browser::new(&h.cs2_url);
        let res = b2.login_at("/login", "alice", ALICE_PW).await;
        assert_eq!(res.status, 303, "{}", cs2.log());
        let served = within(EVERY_INSTANCE, || {
            let uri = pack.resource_uri.clone();
            let mut probe = Browser::new(&h.cs2_url);
            probe.session = b2.session.clone();
            async move { start(&mut probe, &uri).await.status == 303 }
        })
        .await;
        assert!(served.is_some(), "not served by the second instance:\n{}", cs2.log());

        // 3. A user confirms there; the CS authenticated at the RS with its
        //    own key (the RS holds no secret for it).
        let outcome = confirm(&mut b2, &pack, &logs).await;
        assert_eq!(outcome["status"], "accepted", "{outcome}");
        assert!(
            !std::fs::read_to_string(h.path("rs.toml")).unwrap().contains("role = \"cs\""),
            "the RS's file has no client for the CS"
        );

        // 4. The decided document verifies offline under the two
        //    published key sets.
        let documents = history_documents(&mut b2).await;
        assert_eq!(documents.len(), 1, "{documents:?}");
        let (_, cs_jwks) = get_text(&format!("{}/.well-known/jwks.json", h.cs1_url)).await;
        let (_, rs_jwks) = get_text(&format!("{}/.well-known/jwks.json", h.rs_url)).await;
        let trust = serde_json::json!({
            "resource_servers": [{"origin": h.rs_url,
                "keys": serde_json::from_str::<serde_json::Value>(&rs_jwks).unwrap()}],
            "confirmation_servers": [{"origin": h.cs1_url,
                "keys": serde_json::from_str::<serde_json::Value>(&cs_jwks).unwrap()}],
        });
        let trust_file = h.dir.path().join("trust.json");
        std::fs::write(&trust_file, trust.to_string()).unwrap();
        let doc_file = h.dir.path().join("decided.json");
        std::fs::write(&doc_file, &documents[0]).unwrap();
        let (ok, out, err) = cheq_cmd(&[
            "verify",
            "--trust",
            trust_file.to_str().unwrap(),
            "--expect",
            "accept",
            doc_file.to_str().unwrap(),
        ]);
        assert!(ok, "cheq verify: {out}{err}");

        // 5. Blocked from the command line, on the database: within 5 s the
        //    second instance refuses its CHEQs with a page that says so,
        //    and its registration is refused.
        let pack = invoke_flight(&h.rs_url).await;
        let (ok, out) = h.rs_cmd(&["block", &h.rs_url]);
        assert!(ok, "{out}");
        let refused = within(EVERY_INSTANCE, || {
            let uri = pack.resource_uri.clone();
            let mut probe = Browser::new(&h.cs2_url);
            probe.session = b2.session.clone();
            async move { start(&mut probe, &uri).await.status != 303 }
        })
        .await;
        assert!(refused.is_some(), "still served after the block:\n{}", cs2.log());
        let page = start(&mut b2, &pack.resource_uri).await;
        assert!(
            page.text.contains("no longer"),
            "the page says this host no longer serves that site: {}",
            page.text
        );
        let (ok, out) = h.rs_cmd(&["list"]);
        assert!(ok && out.contains("blocked"), "{out}");
        let again = http_client()
            .post(format!("{}/api/v1/resource-servers", h.cs2_url))
            .json(&serde_json::json!({"resource": h.rs_url}))
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 403);

        // 6. Unblocked: served again within 5 s, and the flow completes.
        let (ok, out) = h.rs_cmd(&["unblock", &h.rs_url]);
        assert!(ok, "{out}");
        let restored = within(EVERY_INSTANCE, || {
            let uri = pack.resource_uri.clone();
            let mut probe = Browser::new(&h.cs2_url);
            probe.session = b2.session.clone();
            async move { start(&mut probe, &uri).await.status == 303 }
        })
        .await;
        assert!(restored.is_some(), "not served after the unblock:\n{}", cs2.log());
        let outcome = confirm(&mut b2, &pack, &logs).await;
        assert_eq!(outcome["status"], "accepted", "{outcome}");

        // 7. Registration turned off on the second instance (restarted with
        //    `mode = "off"`): no new registration, but the RS registered
        //    before is still served, so nothing pending is stranded.
        drop(cs2);
        let off = std::fs::read_to_string(h.path("cs.toml"))
            .unwrap()
            .replace("mode = \"open\"", "mode = \"off\"");
        std::fs::write(h.path("cs-off.toml"), off).unwrap();
        let cs2 = h.start_cs_with("cs-off.toml", true).await;
        let off_answer = http_client()
            .post(format!("{}/api/v1/resource-servers", h.cs2_url))
            .json(&serde_json::json!({"resource": h.rs_url}))
            .send()
            .await
            .unwrap();
        assert_eq!(off_answer.status(), 404);
        let pack = invoke_flight(&h.rs_url).await;
        let outcome = confirm(&mut b2, &pack, &[&cs1, &cs2, &rs]).await;
        assert_eq!(outcome["status"], "accepted", "{outcome}");
        println!(
            "registration seen after {registered:?}; served by the second instance after {served:?}; \
             blocked after {refused:?}; restored after {restored:?}"
        );
    });
}
