//! Each user's confirmation server and rules (PROTOCOL.md §17), as real
//! processes on real sockets: two confirmation servers of cheq (two hosts,
//! each with its own accounts, both taking registrations) and the
//! reference RS, whose default CS is the first, named by its issuer.
//!
//! - Alice moves from CS 1 to CS 2: the move is itself a CHEQ, confirmed
//!   at CS 1, naming CS 2 and the name its document gives; until the accept
//!   her CHEQs still name CS 1; after it they name CS 2. Bob stays at CS 1.
//! - CS 2 cannot fetch Bob's CHEQ (404); a decision on Alice's CHEQ
//!   countersigned with CS 1's key is refused (`403
//!   wrong_confirmation_server`), whoever delivers it, and nothing runs;
//!   CS 1 cannot fetch Alice's CHEQ either.
//! - Alice tightens `book_flight` to `above 50`, confirmed at CS 2: a 60
//!   USD booking then needs confirmation (Bob's does not); loosening to
//!   `above 500` is refused before anything is minted, naming the floor; a
//!   rejected change changes nothing.
//! - Both servers restarted: every choice and rule holds.
//! - A CS that cannot be reached, or that refuses the RS, is refused with
//!   its reason and the user keeps the CS they had.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use cheq::cheq::{Decision, UriPack};
use cheq::resource::agent::{self, InvokeOutcome};
use cheq::sign::assertion::{client_assertion, AssertionClaims, ASSERTION_TYPE};
use cheq::sign::{b64, countersign, Channel, DecisionInput, SigningKey};
use common::*;
use serde_json::{json, Map, Value};
use std::time::{Duration, Instant};

const BOB_AGENT_SECRET: &str = "bob-agent-secret-0123";

struct Hosts {
    dir: tempfile::TempDir,
    cs1: String,
    cs2: String,
    rs: String,
}

impl Hosts {
    fn new() -> Hosts {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let (p1, p2, pr) = (free_port(), free_port(), free_port());
        let cs1 = format!("http://127.0.0.1:{p1}");
        let cs2 = format!("http://127.0.0.1:{p2}");
        let rs = format!("http://127.0.0.1:{pr}");
        let path = |p: &str| toml_path(&root.join(p));
        for (file, port, url, name, data) in [
            ("cs1.toml", p1, &cs1, "Host One", "cs1"),
            ("cs2.toml", p2, &cs2, "Host Two", "cs2"),
        ] {
            std::fs::write(
                root.join(file),
                format!(
                    "listen = \"127.0.0.1:{port}\"\npublic_url = \"{url}\"\nname = \"{name}\"\n\
                     data_dir = \"{d}\"\nsigning_key = \"{k}\"\n\n\
                     [registration]\nmode = \"open\"\nallow_addresses = [\"127.0.0.0/8\"]\n",
                    d = path(data),
                    k = path(&format!("keys/{data}.jwk")),
                ),
            )
            .unwrap();
        }
        std::fs::write(
            root.join("rs.toml"),
            format!(
                "listen = \"127.0.0.1:{pr}\"\npublic_url = \"{rs}\"\nname = \"Example Air\"\n\
                 data_dir = \"{d}\"\nsigning_key = \"{k}\"\nretry_after_secs = 1\n\
                 allow_addresses = [\"127.0.0.0/8\"]\n\n\
                 [[clients]]\nclient_id = \"agent\"\nclient_secret = \"{AGENT_SECRET}\"\n\
                 role = \"agent\"\nsubject = \"alice\"\n\n\
                 [[clients]]\nclient_id = \"bob-agent\"\nclient_secret = \"{BOB_AGENT_SECRET}\"\n\
                 role = \"agent\"\nsubject = \"bob\"\n\n\
                 [confirmation_server]\nissuer = \"{cs1}\"\n\n\
                 [[policy.rules]]\ntool = \"book_flight\"\nparam = \"price_usd\"\nabove = 100\n",
                d = path("rs"),
                k = path("keys/rs.jwk"),
            ),
        )
        .unwrap();
        for cs in ["cs1.toml", "cs2.toml"] {
            let config = toml_path(&root.join(cs));
            for (user, pw) in [("alice", ALICE_PW), ("bob", BOB_PW)] {
                let (ok, out) = user_add(user, pw, &["--config", &config]);
                assert!(ok, "{out}");
            }
        }
        Hosts { dir, cs1, cs2, rs }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    async fn start(&self, name: &str, args: &[&str], base: &str) -> Proc {
        start_server(
            name,
            args,
            &self.dir.path().join(format!("{name}.log")),
            base,
        )
        .await
    }

    async fn start_cs(&self, which: u8) -> Proc {
        let (name, base) = match which {
            1 => ("cs1", self.cs1.clone()),
            _ => ("cs2", self.cs2.clone()),
        };
        let config = self.path(&format!("{name}.toml"));
        self.start(name, &["serve", "--config", &config], &base)
            .await
    }

    async fn start_rs(&self) -> Proc {
        let config = self.path("rs.toml");
        let rs = self.rs.clone();
        let started = self
            .start("rs", &["resource-server", "--config", &config], &rs)
            .await;
        // Its default CS's document is read in the background.
        let ready = within(Duration::from_secs(20), || async {
            matches!(
                self.call("agent", "book_flight", flight(500)).await,
                Ok(InvokeOutcome::NeedsConfirmation(_))
            )
        })
        .await;
        assert!(ready.is_some(), "the RS never minted:\n{}", started.log());
        started
    }

    fn signing_key(&self, name: &str) -> std::sync::Arc<SigningKey> {
        let clock: std::sync::Arc<dyn cheq::time::Clock> =
            std::sync::Arc::new(cheq::time::SystemClock);
        cheq::keyring::KeyRing::open(
            std::path::Path::new(&self.path(&format!("keys/{name}.jwk"))),
            None,
            "cs",
            clock,
        )
        .unwrap()
        .signer()
        .unwrap()
    }

    /// Calls `tool` as `agent` (alice's agent, or bob's).
    async fn call(
        &self,
        agent: &str,
        tool: &str,
        params: Map<String, Value>,
    ) -> Result<InvokeOutcome, agent::AgentError> {
        let secret = if agent == "agent" {
            AGENT_SECRET
        } else {
            BOB_AGENT_SECRET
        };
        agent::invoke(&self.rs, agent, secret, tool, &params).await
    }

    async fn pending(&self, agent: &str, tool: &str, params: Map<String, Value>) -> UriPack {
        match self.call(agent, tool, params).await.unwrap() {
            InvokeOutcome::NeedsConfirmation(pack) => pack,
            other => panic!("expected a URI pack from {tool}, got {other:?}"),
        }
    }

    /// A token at the RS for the CS whose key is `key`, by its assertion.
    async fn cs_token(&self, key: &SigningKey, issuer: &str) -> String {
        let audience = format!("{}/oauth/token", self.rs);
        let jti = b64::encode(rand::random::<[u8; 16]>());
        let assertion = client_assertion(
            key,
            &AssertionClaims {
                issuer,
                audience: &audience,
                jti: &jti,
                issued_at: chrono::Utc::now().timestamp(),
            },
        );
        let res = http_client()
            .post(&audience)
            .form(&[
                ("grant_type", "client_credentials"),
                ("scope", "cheq"),
                ("client_assertion_type", ASSERTION_TYPE),
                ("client_assertion", assertion.as_str()),
            ])
            .send()
            .await
            .unwrap();
        let status = res.status();
        let body: Value = res.json().await.unwrap();
        assert_eq!(status, 200, "{body}");
        body["access_token"].as_str().unwrap().to_owned()
    }
}

fn flight(price: i64) -> Map<String, Value> {
    let mut m = flight_params();
    m.insert("price_usd".into(), json!(price));
    m
}

fn params(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn origin_of(uri: &str) -> String {
    cheq::discovery::origin(uri).unwrap()
}

/// Opens `pack` at the browser's CS (signed in): the confirmation page.
async fn open(b: &mut Browser, pack: &UriPack) -> (String, Page) {
    // The RS registers itself at a CS in the background (§16.3): a CS
    // serves it within a few seconds of that.
    let deadline = Instant::now() + Duration::from_secs(15);
    let res = loop {
        let res = b.post("/", &[("resource_uri", &pack.resource_uri)]).await;
        if res.status == 303 || Instant::now() > deadline {
            break res;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(res.status, 303, "start: {}", res.text);
    let location = res.location();
    let page = b.get(&location).await;
    (location, page)
}

/// Decides `pack` at the browser's CS and waits for the agent's result.
async fn decide(b: &mut Browser, pack: &UriPack, decision: &str, logs: &[&Proc]) -> Value {
    let (location, page) = open(b, pack).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let done = b.decide(&location, &page, decision).await;
    assert!(done.status < 400, "decide: {}", done.text);
    outcome_of(&pack.result_uri, logs).await
}

fn output(result: &Value, name: &str) -> Value {
    result["result"]["output_parameters"]
        .as_array()
        .and_then(|o| o.iter().find(|p| p["name"] == name))
        .map(|p| p["value"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn a_user_moves_host_and_tightens_a_rule_each_change_confirmed_where_they_were() {
    let h = Hosts::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let cs1 = h.start_cs(1).await;
        let cs2 = h.start_cs(2).await;
        let rs = h.start_rs().await;
        let logs = [&cs1, &cs2, &rs];
        let mut alice1 = Browser::new(&h.cs1);
        alice1.sign_in("alice", ALICE_PW).await;
        let mut alice2 = Browser::new(&h.cs2);
        alice2.sign_in("alice", ALICE_PW).await;
        let mut bob2 = Browser::new(&h.cs2);
        bob2.sign_in("bob", BOB_PW).await;

        // 1. Alice asks to move: a CHEQ at CS 1 that names CS 2 and its name.
        let move_pack = h
            .pending(
                "agent",
                "choose_confirmation_server",
                params(&[("confirmation_server", json!(h.cs2))]),
            )
            .await;
        assert_eq!(origin_of(&move_pack.confirmation_uri), h.cs1);
        let (_, page) = open(&mut alice1, &move_pack).await;
        assert_eq!(page.status, 200, "{}", page.text);
        assert!(page.text.contains(&h.cs2), "the page names the new host");
        assert!(
            page.text.contains("Host Two"),
            "and its name: {}",
            page.text
        );
        // Nothing changes before the accept.
        let before = h.pending("agent", "book_flight", flight(500)).await;
        assert_eq!(origin_of(&before.confirmation_uri), h.cs1);

        let outcome = decide(&mut alice1, &move_pack, "accept", &logs).await;
        assert_eq!(outcome["status"], "accepted", "{outcome}");
        assert_eq!(output(&outcome, "status"), "DONE", "{outcome}");

        // 2. Alice's CHEQs now name CS 2; Bob's still CS 1. The CHEQ minted
        //    before the move stays with CS 1.
        let alice_flight = h.pending("agent", "book_flight", flight(500)).await;
        assert_eq!(origin_of(&alice_flight.confirmation_uri), h.cs2);
        let bob_flight = h.pending("bob-agent", "book_flight", flight(500)).await;
        assert_eq!(origin_of(&bob_flight.confirmation_uri), h.cs1);
        let kept = decide(&mut alice1, &before, "accept", &logs).await;
        assert_eq!(kept["status"], "accepted", "{kept}");

        // 3. CS 2 cannot fetch Bob's CHEQ; CS 1 cannot fetch Alice's.
        let (_, page) = open(&mut bob2, &bob_flight).await;
        assert!(page.status >= 400, "CS 2 showed Bob's CHEQ: {}", page.text);
        let cs1_key = h.signing_key("cs1");
        let cs2_key = h.signing_key("cs2");
        let cs1_token = h.cs_token(&cs1_key, &h.cs1).await;
        let cs2_token = h.cs_token(&cs2_key, &h.cs2).await;
        let fetch = |token: String, uri: String| async move {
            http_client()
                .get(uri)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
        };
        let res = fetch(cs1_token.clone(), alice_flight.resource_uri.clone()).await;
        assert_eq!(res.status(), 404, "CS 1 fetched Alice's CHEQ");
        let res = fetch(cs2_token.clone(), bob_flight.resource_uri.clone()).await;
        assert_eq!(res.status(), 404, "CS 2 fetched Bob's CHEQ");

        // 4. Alice's CHEQ countersigned with CS 1's key: refused whoever
        //    delivers it, and nothing runs.
        let res = fetch(cs2_token.clone(), alice_flight.resource_uri.clone()).await;
        assert_eq!(res.status(), 200);
        let document = res.bytes().await.unwrap();
        let mut trust = cheq::sign::TrustStore::new();
        let (_, rs_jwks) = get_text(&format!("{}/.well-known/jwks.json", h.rs)).await;
        trust
            .add_resource_server(
                &h.rs,
                cheq::sign::Jwks::from_bytes(rs_jwks.as_bytes()).unwrap(),
            )
            .unwrap();
        let now = chrono::Utc::now();
        let verified = cheq::sign::verify_resource(
            &document,
            &trust,
            &cheq::sign::Context {
                now,
                resource_uri: Some(&alice_flight.resource_uri),
                confirmation_uri: None,
            },
        )
        .unwrap();
        let amr = vec!["pwd".to_owned()];
        let forged = countersign(
            &verified,
            &cs1_key,
            DecisionInput {
                decision: Decision::Accept,
                sub: "alice",
                also_known_as: &[],
                auth_time: now.timestamp() - 60,
                amr: &amr,
                channel: Channel::Html,
                view_text: "Book a flight",
                collected: None,
                passkey: None,
            },
            now,
        )
        .unwrap();
        for token in [&cs1_token, &cs2_token] {
            let res = http_client()
                .post(format!("{}?accept", alice_flight.resource_uri))
                .header("content-type", "application/jose+json")
                .bearer_auth(token)
                .body(forged.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 403);
            let body: Value = res.json().await.unwrap();
            assert_eq!(body["error"], "wrong_confirmation_server", "{body}");
        }
        let (status, body) = result_of(&alice_flight.result_uri).await;
        assert_eq!(
            (status, &body["status"]),
            (202, &json!("pending")),
            "{body}"
        );
        // At CS 2, Alice's own accept runs it.
        let booked = decide(&mut alice2, &alice_flight, "accept", &logs).await;
        assert_eq!(booked["status"], "accepted", "{booked}");

        // 5. A rule looser than the floor is refused before anything is
        //    minted, naming the floor.
        let loose = h
            .call(
                "agent",
                "set_confirmation_policy",
                params(&[("tool", json!("book_flight")), ("above", json!(500))]),
            )
            .await;
        let message = format!("{loose:?}");
        assert!(
            message.contains("403") && message.contains("above 100"),
            "{message}"
        );

        // 6. A rejected change changes nothing; an accepted one holds.
        let tighter = params(&[("tool", json!("book_flight")), ("above", json!(50))]);
        let rejected = h
            .pending("agent", "set_confirmation_policy", tighter.clone())
            .await;
        assert_eq!(origin_of(&rejected.confirmation_uri), h.cs2);
        let outcome = decide(&mut alice2, &rejected, "reject", &logs).await;
        assert_eq!(outcome["status"], "rejected");
        assert!(matches!(
            h.call("agent", "book_flight", flight(60)).await.unwrap(),
            InvokeOutcome::Done(_)
        ));
        let change = h.pending("agent", "set_confirmation_policy", tighter).await;
        let (_, page) = open(&mut alice2, &change).await;
        assert!(
            page.text.contains("when price_usd is above 100")
                && page.text.contains("when price_usd is above 50"),
            "the CHEQ shows the rule before and after: {}",
            page.text
        );
        let outcome = decide(&mut alice2, &change, "accept", &logs).await;
        assert_eq!(outcome["status"], "accepted", "{outcome}");
        let sixty = h.pending("agent", "book_flight", flight(60)).await;
        assert_eq!(origin_of(&sixty.confirmation_uri), h.cs2);
        assert!(
            matches!(
                h.call("bob-agent", "book_flight", flight(60))
                    .await
                    .unwrap(),
                InvokeOutcome::Done(_)
            ),
            "Bob's rule is the floor"
        );

        // 7. A host that cannot be reached, or refuses: refused with its
        //    reason, and Alice keeps CS 2.
        let nowhere = format!("http://127.0.0.1:{}", free_port());
        let refused = h
            .call(
                "agent",
                "choose_confirmation_server",
                params(&[("confirmation_server", json!(nowhere))]),
            )
            .await;
        let message = format!("{refused:?}");
        assert!(
            message.contains("422") && message.contains("cannot be used"),
            "{message}"
        );
        let still = h.pending("agent", "book_flight", flight(500)).await;
        assert_eq!(origin_of(&still.confirmation_uri), h.cs2);

        // 8. Both servers restarted: every choice and rule holds.
        drop(rs);
        drop(cs2);
        let cs2 = h.start_cs(2).await;
        let rs = h.start_rs().await;
        let again = h.pending("agent", "book_flight", flight(60)).await;
        assert_eq!(origin_of(&again.confirmation_uri), h.cs2);
        let bob_again = h.pending("bob-agent", "book_flight", flight(500)).await;
        assert_eq!(origin_of(&bob_again.confirmation_uri), h.cs1);
        // CS 2 (known again from the store) fetches and decides Alice's.
        let outcome = decide(&mut alice2, &again, "accept", &[&cs1, &cs2, &rs]).await;
        assert_eq!(outcome["status"], "accepted", "{outcome}");
    });
}
