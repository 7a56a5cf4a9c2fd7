//! Several instances of both servers over one PostgreSQL database (ISSUE 9),
//! as real processes on real sockets: two CS and two RS instances started
//! from the same configurations and data directories, each with its own
//! `CHEQ_LISTEN`, behind one public URL each (the first instance's).
//!
//! - a flow through both: the agent at RS 2, the user signed in at CS 1 and
//!   deciding at CS 2 with the same session, the result read at either RS;
//! - two tabs on two CS instances deciding one CHEQ at once: one signature,
//!   the other tab sees the earlier decision (§6);
//! - a storm of 240 concurrent posts of one decision to both RS instances,
//!   byte-identical and re-encoded: the operation runs once, as
//!   `cheq_operations_executed_total` summed over the instances shows;
//! - SIGKILL of a CS instance holding decisions the RS could not take: the
//!   other instance delivers them within a minute of the RS being back;
//! - `/readyz` answers in time whatever the database does, turns 200 again
//!   by itself, and no instance exits while the database is away; an
//!   instance whose schema a newer cheq migrated says it is not ready;
//! - TLS to the database as the URL's `sslmode` and `sslrootcert` say, with
//!   libpq's meaning (the throwaway cluster of `scripts/pg` offers TLS with a
//!   certificate for `localhost` from a CA of its own, so the other tests
//!   here run over `prefer`, encrypted): the demo runs over `verify-full`,
//!   every connection of its servers encrypted, and a certificate that does
//!   not check out is refused, whoever signed it or whatever name it bears.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use cheq::cheq::{Channel, Decision, UriPack};
use cheq::sign::{
    countersign, verify_resource, Context, DecisionInput, Jwks, SigningKey, TrustStore,
};
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

/// The throwaway database of one test.
/// Whether a PostgreSQL server is here for these tests (else they are
/// skipped, saying so; `scripts/test` starts one).
fn postgres() -> bool {
    cheq::store::testing::can_run(
        "the multi-instance tests on PostgreSQL",
        &[cheq::store::testing::Outside::Postgres],
    )
}

fn database(name: &str) -> String {
    cheq::store::pg::test_database(name).unwrap()
}

/// The count `sql` gives in the database at `url`.
async fn query_count(
    url: &str,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> i64 {
    let mut config: tokio_postgres::Config = url.parse().unwrap();
    config.application_name(PROBE);
    let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client.query_one(sql, params).await.unwrap().get(0)
}

/// The `application_name` of the test's own connections, which a count of
/// the servers' connections leaves out (one just closed may still be
/// listed for a moment).
const PROBE: &str = "cheq-test-probe";

/// The sum of a counter over instances' `/metrics`.
async fn counter_sum(bases: &[&str], name: &str) -> u64 {
    let mut sum = 0;
    for base in bases {
        let (_, text) = get_text(&format!("{base}/metrics")).await;
        let line = text
            .lines()
            .find(|l| l.split(' ').next() == Some(name))
            .unwrap_or_else(|| panic!("{name} at {base}:\n{text}"));
        sum += line.rsplit(' ').next().unwrap().parse::<u64>().unwrap();
    }
    sum
}

/// An access token of the CS's client at the RS instance `base`.
async fn cs_token(base: &str) -> String {
    let res = http_client()
        .post(format!("{base}/oauth/token"))
        .basic_auth("cs", Some(CS_SECRET))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    body["access_token"].as_str().unwrap().to_owned()
}

/// The CHEQ of `pack` countersigned (accept, by alice) with the CS key of
/// `setup`, as a CS instance would.
async fn decided_document(setup: &Setup, pack: &UriPack) -> String {
    let token = cs_token(&setup.rs_url).await;
    let doc = http_client()
        .get(&pack.resource_uri)
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let rs_jwks = std::fs::read(setup.dir.path().join("keys/rs.pub.jwks.json")).unwrap();
    let mut trust = TrustStore::new();
    trust
        .add_resource_server(&setup.rs_url, Jwks::from_bytes(&rs_jwks).unwrap())
        .unwrap();
    let now = chrono::Utc::now();
    let ctx = Context {
        now,
        resource_uri: Some(&pack.resource_uri),
        confirmation_uri: Some(&pack.confirmation_uri),
    };
    let verified = verify_resource(&doc, &trust, &ctx).unwrap();
    let key =
        SigningKey::from_jwk_bytes(&std::fs::read(setup.dir.path().join("keys/cs.jwk")).unwrap())
            .unwrap();
    let amr = vec!["pwd".to_owned()];
    countersign(
        &verified,
        &key,
        DecisionInput {
            decision: Decision::Accept,
            sub: "alice",
            also_known_as: &[],
            auth_time: now.timestamp() - 10,
            amr: &amr,
            channel: Channel::Html,
            view_text: "Book a flight",
            collected: None,
            passkey: None,
        },
        now,
    )
    .unwrap()
}

/// Polls the result URI until the decision arrived, at most `limit`.
async fn wait_for_result(result_uri: &str, limit: Duration, logs: &[&Proc]) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let (status, body) = result_of(result_uri).await;
        if status == 200 {
            return body;
        }
        assert_eq!(status, 202, "{body}");
        if Instant::now() > deadline {
            let logs: Vec<String> = logs.iter().map(|p| p.log()).collect();
            panic!(
                "no decision at {result_uri} within {limit:?}\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

struct Cluster {
    setup: Setup,
    db: String,
    rs2_url: String,
    cs2_url: String,
    rs2_listen: String,
    cs2_listen: String,
}

impl Cluster {
    fn new(name: &str) -> Cluster {
        let setup = Setup::new();
        let (rs2, cs2) = (free_port(), free_port());
        Cluster {
            setup,
            db: database(name),
            rs2_url: format!("http://127.0.0.1:{rs2}"),
            cs2_url: format!("http://127.0.0.1:{cs2}"),
            rs2_listen: format!("127.0.0.1:{rs2}"),
            cs2_listen: format!("127.0.0.1:{cs2}"),
        }
    }

    async fn start(&self, server: &str, second: bool) -> Proc {
        let (config, base, listen, log) = match (server, second) {
            ("rs", false) => ("rs.toml", &self.setup.rs_url, None, "rs1.log"),
            ("rs", true) => ("rs.toml", &self.rs2_url, Some(&self.rs2_listen), "rs2.log"),
            ("cs", false) => ("cs.toml", &self.setup.cs_url, None, "cs1.log"),
            _ => ("cs.toml", &self.cs2_url, Some(&self.cs2_listen), "cs2.log"),
        };
        let command = if server == "rs" {
            "resource-server"
        } else {
            "serve"
        };
        let name = format!("{server}{}", if second { 2 } else { 1 });
        let mut envs = vec![
            ("CHEQ_DATABASE_URL", self.db.as_str()),
            ("CHEQ_LOG_FORMAT", "json"),
            ("CHEQ_INSTANCE", name.as_str()),
        ];
        if let Some(l) = listen {
            envs.push(("CHEQ_LISTEN", l.as_str()));
        }
        let config = self.setup.path(config);
        start_server_with(
            &name,
            &[command, "--config", &config],
            &envs,
            &self.setup.dir.path().join(log),
            base,
        )
        .await
    }
}

#[test]
fn two_instances_of_each_server_keep_every_guarantee_on_one_database() {
    if !postgres() {
        return;
    }
    let c = Cluster::new("multi");
    let cs_config = c.setup.path("cs.toml");
    // `cheq user add` writes to the database itself (no server yet, and
    // later while instances run).
    let (ok, out) = user_add_with(
        "alice",
        ALICE_PW,
        &["--config", &cs_config],
        &[("CHEQ_DATABASE_URL", &c.db)],
    );
    assert!(ok, "{out}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut rs1 = c.start("rs", false).await;
        let mut rs2 = c.start("rs", true).await;
        let mut cs1 = c.start("cs", false).await;
        let cs2 = c.start("cs", true).await;
        let (ok, out) = user_add_with(
            "bob",
            BOB_PW,
            &["--config", &cs_config],
            &[("CHEQ_DATABASE_URL", &c.db)],
        );
        assert!(ok, "while instances run: {out}");

        // 1. A flow through both: the agent at RS 2; signed in at CS 1,
        //    deciding at CS 2 with the same session.
        let pack = invoke_flight(&c.rs2_url).await;
        assert!(pack.resource_uri.starts_with(&c.setup.rs_url), "{pack:?}");
        let mut b1 = Browser::new(&c.setup.cs_url);
        let res = b1.login_at("/login", "alice", ALICE_PW).await;
        assert_eq!(res.status, 303, "{}", cs1.log());
        let mut b2 = Browser::new(&c.cs2_url);
        b2.session = b1.session.clone();
        let start = b2.post("/", &[("resource_uri", &pack.resource_uri)]).await;
        assert_eq!(start.status, 303, "{}", start.text);
        let path = start.location();
        assert!(
            path.starts_with("/c/"),
            "the session of CS 1 works at CS 2: {path}"
        );
        let page = b2.get(&path).await;
        assert_eq!(page.status, 200, "{}\n{}", page.text, cs2.log());
        let outcome = b2.decide(&path, &page, "accept").await;
        assert_eq!(outcome.status, 200, "{}", outcome.text);
        assert!(
            outcome.text.contains("you chose to accept"),
            "{}",
            outcome.text
        );
        let body = wait_for_result(&pack.result_uri, Duration::from_secs(30), &[&cs1, &cs2]).await;
        assert_eq!(body["status"], "accepted", "{body}");
        // The other RS instance answers the same.
        let other = pack.result_uri.replace(&c.setup.rs_url, &c.rs2_url);
        assert_eq!(result_of(&other).await.1, body);
        let mut accepted = 1;

        // 2. Two tabs on two instances decide one CHEQ at once.
        let pack = invoke_flight(&c.setup.rs_url).await;
        let (path1, page1) = b1.open("/", &pack.resource_uri, "alice", ALICE_PW).await;
        let (path2, page2) = b2.open("/", &pack.resource_uri, "alice", ALICE_PW).await;
        assert_eq!(page1.status, 200, "{}", page1.text);
        assert_eq!(page2.status, 200, "{}", page2.text);
        let (one, two) = tokio::join!(
            b1.decide(&path1, &page1, "accept"),
            b2.decide(&path2, &page2, "reject")
        );
        assert_eq!(
            (one.status, two.status),
            (200, 200),
            "{}\n{}",
            one.text,
            two.text
        );
        let earlier = [&one, &two]
            .iter()
            .filter(|p| p.text.contains("Already decided"))
            .count();
        assert_eq!(
            earlier, 1,
            "one tab signs, the other sees it:\n{}\n{}",
            one.text, two.text
        );
        let chose = |p: &Page| {
            if p.text.contains("you chose to accept") {
                "accept"
            } else {
                assert!(p.text.contains("you chose to reject"), "{}", p.text);
                "reject"
            }
        };
        assert_eq!(chose(&one), chose(&two), "both tabs show the one decision");
        let records = query_count(
            &c.db,
            "SELECT count(*) FROM cs_records WHERE resource_uri = $1",
            &[&pack.resource_uri],
        )
        .await;
        assert_eq!(records, 1, "one countersignature across instances");
        let body = wait_for_result(&pack.result_uri, Duration::from_secs(30), &[&cs1, &cs2]).await;
        let expected = if chose(&one) == "accept" {
            accepted += 1;
            "accepted"
        } else {
            "rejected"
        };
        assert_eq!(body["status"], expected, "{body}");

        // 3. A storm of one decision on both RS instances: byte-identical
        //    and re-encoded, 240 posts at once.
        let pack = invoke_flight(&c.rs2_url).await;
        let document = decided_document(&c.setup, &pack).await;
        let reencoded =
            serde_json::to_string_pretty(&serde_json::from_str::<Value>(&document).unwrap())
                .unwrap();
        assert_ne!(reencoded, document);
        let tokens = [cs_token(&c.setup.rs_url).await, cs_token(&c.rs2_url).await];
        let suffix = pack
            .resource_uri
            .strip_prefix(&c.setup.rs_url)
            .unwrap()
            .to_owned();
        // One client (building one per request would stall the sender).
        let http = http_client();
        let posts: Vec<_> = (0..240)
            .map(|i| {
                let base = if i % 2 == 0 {
                    &c.setup.rs_url
                } else {
                    &c.rs2_url
                };
                let url = format!("{base}{suffix}?accept");
                let body = if i % 3 == 0 {
                    reencoded.clone()
                } else {
                    document.clone()
                };
                // A token from one instance works at the other.
                let token = tokens[(i / 2) % 2].clone();
                let http = http.clone();
                async move {
                    let res = match http
                        .post(url)
                        .header("content-type", "application/jose+json")
                        .bearer_auth(token)
                        .body(body.clone())
                        .send()
                        .await
                    {
                        Ok(res) => res,
                        Err(e) => return (0, Value::String(format!("{e:?}")), body),
                    };
                    let status = res.status().as_u16();
                    let answer: Value = res.json().await.unwrap_or(Value::Null);
                    (status, answer, body)
                }
            })
            .collect();
        let answers = futures_join_all(posts).await;
        let mut by_status = std::collections::BTreeMap::new();
        for (status, answer, _) in &answers {
            by_status
                .entry(*status)
                .or_insert_with(|| (0, answer.clone()))
                .0 += 1;
        }
        eprintln!("storm answers: {by_status:?}");
        let winners: Vec<_> = answers.iter().filter(|(s, _, _)| *s == 200).collect();
        assert!(!winners.is_empty(), "{:?}", &answers[..3]);
        let winning_bytes = &winners[0].2;
        for (status, answer, body) in &answers {
            match status {
                200 => {
                    assert_eq!(body, winning_bytes, "only the recorded bytes are taken");
                    assert_eq!(answer, &winners[0].1, "the same answer every time");
                }
                409 => {
                    assert_ne!(body, winning_bytes);
                    assert_eq!(answer["error"], "replayed", "{answer}");
                }
                other => panic!("status {other}: {answer}\n{}\n{}", rs1.log(), rs2.log()),
            }
        }
        accepted += 1;
        let body = wait_for_result(&pack.result_uri, Duration::from_secs(10), &[&rs1, &rs2]).await;
        assert_eq!(body["status"], "accepted", "{body}");
        let rs_bases = [c.setup.rs_url.as_str(), c.rs2_url.as_str()];
        assert_eq!(
            counter_sum(&rs_bases, "cheq_operations_executed_total").await,
            accepted,
            "each accepted confirmation ran once, over both instances"
        );

        // 4. SIGKILL of a CS instance holding decisions the RS cannot take.
        let packs = [
            invoke_flight(&c.setup.rs_url).await,
            invoke_flight(&c.rs2_url).await,
        ];
        let mut opened = Vec::new();
        for p in &packs {
            opened.push(b1.open("/", &p.resource_uri, "alice", ALICE_PW).await);
        }
        rs1.kill();
        rs2.kill();
        for (path, page) in &opened {
            let outcome = b1.decide(path, page, "accept").await;
            assert_eq!(outcome.status, 200, "{}", outcome.text);
            assert!(
                outcome.text.to_lowercase().contains("delivery pending"),
                "{}",
                outcome.text
            );
        }
        cs1.kill();
        let rs1 = c.start("rs", false).await;
        let rs2 = c.start("rs", true).await;
        let back = Instant::now();
        for p in &packs {
            let body = wait_for_result(
                &p.result_uri,
                Duration::from_secs(60).saturating_sub(back.elapsed()),
                &[&cs2, &rs1, &rs2],
            )
            .await;
            assert_eq!(body["status"], "accepted", "{body}");
        }
        accepted += 2;
        assert!(back.elapsed() < Duration::from_secs(60));
        // Nothing twice: the restarted RS instances count from zero, and
        // ran exactly the two delivered operations.
        let rs_bases = [c.setup.rs_url.as_str(), c.rs2_url.as_str()];
        assert_eq!(
            counter_sum(&rs_bases, "cheq_operations_executed_total").await,
            2
        );
        let total = query_count(&c.db, "SELECT count(*) FROM rs_executions", &[]).await;
        assert_eq!(total, i64::try_from(accepted).unwrap());
        // The outbox is empty, as every instance reports it (each reads
        // it for its metrics every 15 s).
        let deadline = Instant::now() + Duration::from_secs(40);
        while counter_sum(&[c.cs2_url.as_str()], "cheq_deliveries_pending").await != 0 {
            assert!(Instant::now() < deadline, "{}", cs2.log());
            tokio::time::sleep(Duration::from_millis(300)).await;
        }

        // 5. The logs: JSON lines naming their instance; one confirmation
        //    followed by its id from its decision at CS 1 to its delivery by
        //    CS 2 and its recording at the RS.
        //    A line is written once its step is done, which may be just
        //    after the RS's answer is seen: read until all are there.
        let id = cheq::text::confirmation_id(&packs[0].resource_uri);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut seen = Vec::new();
            for name in ["cs1", "cs2", "rs1", "rs2"] {
                let text = std::fs::read_to_string(c.setup.dir.path().join(format!("{name}.log")))
                    .unwrap();
                let mut about = 0;
                for line in text.lines().filter(|l| l.starts_with('{')) {
                    let v: Value = serde_json::from_str(line)
                        .unwrap_or_else(|e| panic!("{name}: {e}: {line}"));
                    assert_eq!(v["instance"], name, "{line}");
                    if line.contains(&format!("\"confirmation_id\":\"{id}\"")) {
                        about += 1;
                    }
                }
                if about > 0 {
                    seen.push(name);
                }
            }
            if seen.contains(&"cs1")
                && seen.contains(&"cs2")
                && (seen.contains(&"rs1") || seen.contains(&"rs2"))
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "confirmation {id} logged by {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

/// Runs the futures concurrently, in order of the answers.
async fn futures_join_all<F>(futures: Vec<F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

/// A PostgreSQL server of this test's own (stopped when dropped), so that
/// stopping it harms no other test.
struct OwnPostgres {
    dir: tempfile::TempDir,
}

impl OwnPostgres {
    fn script(&self, command: &str) -> String {
        let out = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/pg"))
            .args([command, &self.dir.path().display().to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/pg {command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn start() -> (OwnPostgres, String) {
        let pg = OwnPostgres {
            dir: tempfile::tempdir().unwrap(),
        };
        let out = pg.script("start");
        let base = out
            .lines()
            .find_map(|l| l.strip_prefix("export CHEQ_TEST_DATABASE_URL="))
            .unwrap()
            .to_owned();
        let url = cheq::store::pg::fresh_database(&base, "readyz").unwrap();
        (pg, url)
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/pg"))
            .args(["stop", &self.dir.path().display().to_string()])
            .output();
    }
}

/// `(status, time taken)` of `GET base/path`, the client waiting up to 10 s.
async fn timed_get(base: &str, path: &str) -> (u16, Duration) {
    let started = Instant::now();
    let status = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(format!("{base}{path}"))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0);
    (status, started.elapsed())
}

#[test]
fn readyz_follows_the_database_and_no_instance_exits_while_it_is_away() {
    if !postgres() {
        return;
    }
    let (postgres, db) = OwnPostgres::start();
    let setup = Setup::new();
    let envs = [("CHEQ_DATABASE_URL", db.as_str())];
    let (ok, out) = user_add_with(
        "alice",
        ALICE_PW,
        &["--config", &setup.path("cs.toml")],
        &envs,
    );
    assert!(ok, "{out}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let rs_config = setup.path("rs.toml");
        let cs_config = setup.path("cs.toml");
        let mut rs = start_server_with(
            "rs",
            &["resource-server", "--config", &rs_config],
            &envs,
            &setup.dir.path().join("rs.log"),
            &setup.rs_url,
        )
        .await;
        let mut cs = start_server_with(
            "cs",
            &["serve", "--config", &cs_config],
            &envs,
            &setup.dir.path().join("cs.log"),
            &setup.cs_url,
        )
        .await;
        let bases = [setup.rs_url.as_str(), setup.cs_url.as_str()];
        for base in bases {
            assert_eq!(timed_get(base, "/readyz").await.0, 200, "{base}");
        }

        let waiting = invoke_flight(&setup.rs_url).await;
        let token = cs_token(&setup.rs_url).await;
        postgres.script("stop");
        // The RS says its database is away, as JSON, and when to come back.
        let res = http_client()
            .get(&waiting.resource_uri)
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 503);
        assert_eq!(res.headers()["retry-after"], "1");
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["error"], "unavailable", "{body}");
        for base in bases {
            let (status, took) = timed_get(base, "/readyz").await;
            assert_eq!(status, 503, "{base}");
            assert!(took < Duration::from_secs(5), "{base}: {took:?}");
            // Liveness does not depend on the database.
            assert_eq!(timed_get(base, "/healthz").await.0, 200, "{base}");
        }
        // A page that needs the database says so, and nothing exits.
        let mut b = Browser::new(&setup.cs_url);
        let form = b.get("/login").await;
        assert_eq!(form.status, 200);
        let res = b
            .post(
                "/login",
                &[
                    ("username", "alice"),
                    ("password", ALICE_PW),
                    ("csrf", &form.hidden("csrf").unwrap()),
                    ("next", "/history"),
                ],
            )
            .await;
        assert_eq!(res.status, 503, "{}", res.text);
        assert!(
            res.text.contains("cannot reach its database"),
            "{}",
            res.text
        );
        assert_eq!(res.header("retry-after").as_deref(), Some("1"));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!rs.exited(), "{}", rs.log());
        assert!(!cs.exited(), "{}", cs.log());

        postgres.script("start");
        let deadline = Instant::now() + Duration::from_secs(30);
        for base in bases {
            while timed_get(base, "/readyz").await.0 != 200 {
                assert!(Instant::now() < deadline, "{base} not ready again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        // And it works again, with no restart.
        b.sign_in("alice", ALICE_PW).await;
        let pack = invoke_flight(&setup.rs_url).await;
        let (_, page) = b.open("/", &pack.resource_uri, "alice", ALICE_PW).await;
        assert_eq!(page.status, 200, "{}", page.text);

        // A newer cheq migrates the database (a rolling upgrade): these
        // instances, which do not know that schema, say they are not ready,
        // by name, until it is theirs again.
        let (client, conn) = tokio_postgres::connect(&db, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        for component in ["cs", "rs"] {
            client
                .execute(
                    "INSERT INTO cheq_migrations (component, version, name) VALUES ($1, 99, 'future')",
                    &[&component],
                )
                .await
                .unwrap();
        }
        for base in bases {
            let res = http_client()
                .get(format!("{base}/readyz"))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 503, "{base}");
            let body: Value = res.json().await.unwrap();
            let said = body["error_description"].as_str().unwrap_or_default();
            assert!(
                said.contains("schema is at version 99, newer than this instance knows"),
                "{base}: {body}"
            );
        }
        client
            .execute("DELETE FROM cheq_migrations WHERE version = 99", &[])
            .await
            .unwrap();
        for base in bases {
            assert_eq!(timed_get(base, "/readyz").await.0, 200, "{base}");
        }
        rs.kill();
        cs.kill();
    });
}

/// `db` (a URL of the throwaway cluster) at `host`, with `sslmode` and,
/// when given, `sslrootcert`.
fn tls_url(db: &str, host: &str, mode: &str, root: Option<&str>) -> String {
    let mut url = url::Url::parse(db).unwrap();
    url.set_host(Some(host)).unwrap();
    url.query_pairs_mut().append_pair("sslmode", mode);
    if let Some(root) = root {
        url.query_pairs_mut().append_pair("sslrootcert", root);
    }
    url.to_string()
}

/// The CA of the throwaway cluster (`scripts/pg` prints where it is).
fn cluster_ca() -> String {
    std::env::var("CHEQ_TEST_DATABASE_CA")
        .expect("CHEQ_TEST_DATABASE_CA is not set: run the tests with scripts/test")
}

/// A CA that signed nothing of the cluster's.
fn unrelated_ca() -> String {
    format!(
        "{}/tests/fixtures/unrelated-ca.pem",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Every `sslmode`, as libpq means it, against a server whose certificate
/// names `localhost` (not 127.0.0.1) and is signed by the cluster's own CA.
#[test]
fn postgresql_connections_are_encrypted_and_checked_as_sslmode_says() {
    if !postgres() {
        return;
    }
    let db = database("tls_modes");
    let ca = cluster_ca();
    let other = unrelated_ca();
    let encrypted = |url: &str| cheq::store::pg::Pg::new(url, 1).and_then(|pg| pg.encrypted());
    // A bundle whose first root is not the one that signed.
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.pem");
    std::fs::write(
        &bundle,
        std::fs::read_to_string(&other).unwrap() + &std::fs::read_to_string(&ca).unwrap(),
    )
    .unwrap();
    let bundle = bundle.display().to_string();
    // Connected, and encrypted or not as the mode says.
    for (url, want) in [
        (tls_url(&db, "localhost", "verify-full", Some(&ca)), true),
        (
            tls_url(&db, "localhost", "verify-full", Some(&bundle)),
            true,
        ),
        (tls_url(&db, "127.0.0.1", "verify-ca", Some(&ca)), true),
        (tls_url(&db, "127.0.0.1", "require", None), true),
        (tls_url(&db, "127.0.0.1", "require", Some(&ca)), true),
        (tls_url(&db, "127.0.0.1", "prefer", None), true),
        (db.clone(), true),
        (tls_url(&db, "127.0.0.1", "disable", None), false),
    ] {
        assert_eq!(encrypted(&url).unwrap(), want, "{url}");
    }
    // Over the cluster's Unix socket (in the directory of its CA), sslmode
    // does not apply, as in libpq: connected, not encrypted.
    let port = url::Url::parse(&db).unwrap().port().unwrap();
    let socket_dir = std::path::Path::new(&ca)
        .parent()
        .unwrap()
        .display()
        .to_string();
    let over_socket = format!(
        "postgres://cheq@{}:{port}{}?sslmode=verify-full&sslrootcert={}",
        socket_dir.replace('/', "%2F"),
        url::Url::parse(&db).unwrap().path(),
        ca.replace('/', "%2F"),
    );
    assert!(!encrypted(&over_socket).unwrap(), "{over_socket}");
    // Refused: no connection at all, with the reason.
    for (url, why) in [
        // The certificate names localhost, not the address asked for.
        (
            tls_url(&db, "127.0.0.1", "verify-full", Some(&ca)),
            "certificate",
        ),
        // Another CA: the chain does not check out, in any mode that checks it.
        (
            tls_url(&db, "localhost", "verify-full", Some(&other)),
            "certificate",
        ),
        (
            tls_url(&db, "127.0.0.1", "verify-ca", Some(&other)),
            "certificate",
        ),
        (
            tls_url(&db, "127.0.0.1", "require", Some(&other)),
            "certificate",
        ),
        // Without sslrootcert, or with `system`, the system's roots are
        // asked, and they do not know the cluster's CA.
        (
            tls_url(&db, "localhost", "verify-full", None),
            "certificate",
        ),
        (
            tls_url(&db, "localhost", "verify-full", Some("system")),
            "certificate",
        ),
    ] {
        let e = encrypted(&url).expect_err(&url);
        assert!(
            matches!(e, cheq::store::StoreError::Unavailable { .. }),
            "{url}: {e:?}"
        );
        assert!(e.to_string().contains(why), "{url}: {e}");
    }
    // A mode libpq does not have, and a root file that is not there: refused
    // before any connection, by name.
    let e = cheq::store::pg::Pg::new(&tls_url(&db, "localhost", "verify_full", None), 1)
        .err()
        .unwrap();
    assert!(e.to_string().contains("verify_full"), "{e}");
    // The system's roots without the host check: any public CA's
    // certificate would pass, so it is refused (as libpq 16 does).
    for root in [None, Some("system")] {
        let e = cheq::store::pg::Pg::new(&tls_url(&db, "127.0.0.1", "verify-ca", root), 1)
            .err()
            .unwrap();
        assert!(e.to_string().contains("verify-ca needs sslrootcert"), "{e}");
    }
    let e = cheq::store::pg::Pg::new(
        &tls_url(&db, "localhost", "verify-full", Some("/nonexistent/ca.pem")),
        1,
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
}

/// `cheq` with `args` and `envs`: (success, stdout and stderr).
fn cheq_cli(args: &[&str], envs: &[(&str, &str)]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cheq"))
        .args(args)
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn cheq_migrate_applies_the_schema_of_the_server_a_configuration_names() {
    if !postgres() {
        return;
    }
    let setup = Setup::new();
    let db = database("migrate_cli");
    let envs = [("CHEQ_DATABASE_URL", db.as_str())];
    let cs = setup.path("cs.toml");
    let rs = setup.path("rs.toml");
    let (ok, out) = cheq_cli(&["migrate", "--config", &cs], &envs);
    assert!(ok, "{out}");
    assert!(
        out.contains("cs schema at version 8 (8 steps applied now)"),
        "{out}"
    );
    let (ok, out) = cheq_cli(&["migrate", "--config", &cs], &envs);
    assert!(ok && out.contains("(0 steps applied now)"), "{out}");
    let (ok, out) = cheq_cli(&["migrate", "--config", &rs], &envs);
    assert!(ok && out.contains("rs schema at version 4"), "{out}");
    let pg = cheq::store::pg::Pg::new(&db, 1).unwrap();
    assert_eq!(
        cheq::store::pg::applied(&pg, "cs").unwrap(),
        vec![1, 2, 3, 4, 5, 6, 7, 8]
    );
    assert_eq!(
        cheq::store::pg::applied(&pg, "rs").unwrap(),
        vec![1, 2, 3, 4]
    );
    // Without a database there is nothing to migrate: said in one line.
    let (ok, out) = cheq_cli(&["migrate", "--config", &cs], &[]);
    assert!(!ok && out.contains("no database_url"), "{out}");
    // A database nobody answers for: a clear error, no panic.
    let port = free_port();
    let nowhere = format!("postgres://cheq@127.0.0.1:{port}/x");
    let (ok, out) = cheq_cli(
        &["migrate", "--config", &cs],
        &[("CHEQ_DATABASE_URL", nowhere.as_str())],
    );
    assert!(
        !ok && out.contains("migrate") && !out.contains("panicked"),
        "{out}"
    );
    // A database whose certificate does not check out: refused, said so.
    let forged = tls_url(&db, "localhost", "verify-full", Some(&unrelated_ca()));
    let (ok, out) = cheq_cli(
        &["migrate", "--config", &cs],
        &[("CHEQ_DATABASE_URL", forged.as_str())],
    );
    assert!(
        !ok && out.contains("certificate") && !out.contains("panicked"),
        "{out}"
    );
    // libpq's PGSSLMODE and PGSSLROOTCERT stand for what the URL leaves
    // out: the certificate is checked against the root they name.
    let mut on_localhost = url::Url::parse(&db).unwrap();
    on_localhost.set_host(Some("localhost")).unwrap();
    let on_localhost = on_localhost.to_string();
    for (root, checks_out) in [(unrelated_ca(), false), (cluster_ca(), true)] {
        let (ok, out) = cheq_cli(
            &["migrate", "--config", &cs],
            &[
                ("CHEQ_DATABASE_URL", on_localhost.as_str()),
                ("PGSSLMODE", "verify-full"),
                ("PGSSLROOTCERT", root.as_str()),
            ],
        );
        if checks_out {
            assert!(ok && out.contains("(0 steps applied now)"), "{out}");
        } else {
            assert!(!ok && out.contains("certificate"), "{out}");
        }
    }
    let (ok, out) = cheq_cli(
        &["migrate", "--config", &cs],
        &[("CHEQ_DATABASE_URL", "mysql://root:hunter2@h/db")],
    );
    assert!(
        !ok && out.contains("database_url") && !out.contains("hunter2"),
        "{out}"
    );
}

#[test]
fn the_demo_runs_on_postgresql() {
    if !postgres() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = database("demo");
    // Over TLS, the server's certificate checked against the cluster's CA
    // and for its name.
    let db_tls = tls_url(&db, "localhost", "verify-full", Some(&cluster_ca()));
    let (cs_port, rs_port) = (free_port(), free_port());
    let data = dir.path().join("demo");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let demo = start_server_with(
            "demo",
            &[
                "demo",
                "--data-dir",
                &data.display().to_string(),
                "--cs-port",
                &cs_port.to_string(),
                "--rs-port",
                &rs_port.to_string(),
                "--database-url",
                &db_tls,
            ],
            &[("CHEQ_DEMO_PASSWORD", ALICE_PW)],
            &dir.path().join("demo.log"),
            &format!("http://127.0.0.1:{cs_port}"),
        )
        .await;
        for port in [cs_port, rs_port] {
            let base = format!("http://127.0.0.1:{port}");
            assert_eq!(timed_get(&base, "/readyz").await.0, 200, "{}", demo.log());
        }
        // Every connection of the demo's servers is encrypted (this
        // query's own, plain, left out).
        let of_demo = format!(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.datname = current_database() AND a.application_name <> '{PROBE}'"
        );
        let encrypted = query_count(&db, &format!("{of_demo} AND s.ssl"), &[]).await;
        let plain = query_count(&db, &format!("{of_demo} AND NOT s.ssl"), &[]).await;
        assert!(
            encrypted >= 2 && plain == 0,
            "{encrypted} encrypted, {plain} plain"
        );
        // alice lives in the database, and no sled database was opened.
        let accounts = query_count(&db, "SELECT count(*) FROM cs_accounts", &[]).await;
        assert_eq!(accounts, 1);
        assert!(!data.join("cs").join("cs.sled").exists());
        let mut b = Browser::new(&format!("http://127.0.0.1:{cs_port}"));
        b.sign_in("alice", ALICE_PW).await;
    });
}
