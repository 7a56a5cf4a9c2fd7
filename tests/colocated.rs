//! The confirmation inside the resource server (PROTOCOL.md §12; draft §3,
//! §5): `cheq resource-server` with `[confirmation] embedded = true`, as a
//! real process, driven over HTTP by the agent client and by a browser-like
//! client. The RS has no confirmation-server client at all, so a CHEQ could
//! not travel between the two sides over HTTP even if the code tried: the
//! flow works only because the CS reaches the RS in the process.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use cheq::resource::agent::{self, ResultStatus};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// An `rs.toml` that hosts its confirmation, on loopback `port`; `top` goes
/// at the top level, `extra` into `[confirmation]`.
fn config(dir: &Path, port: u16, top: &str, extra: &str) -> PathBuf {
    let data = dir.join("data");
    let text = format!(
        "listen = \"127.0.0.1:{port}\"\n\
         public_url = \"http://127.0.0.1:{port}\"\n\
         data_dir = \"{data}\"\n\
         signing_key = \"{key}\"\n\
         metrics = \"open\"\n\
         {top}\n\
         \n\
         [confirmation]\n\
         embedded = true\n\
         {extra}\n\
         \n\
         [[clients]]\n\
         client_id = \"agent\"\n\
         client_secret = \"{AGENT_SECRET}\"\n\
         role = \"agent\"\n\
         subject = \"alice\"\n",
        data = toml_path(&data),
        key = toml_path(&data.join("rs.jwk")),
    );
    let path = dir.join("rs.toml");
    std::fs::write(&path, text).unwrap();
    path
}

struct Hosted {
    proc: Proc,
    base: String,
    dir: tempfile::TempDir,
}

async fn start_hosted(top: &str, extra: &str) -> Hosted {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = config(dir.path(), port, top, extra);
    let place = ["--config", path.to_str().unwrap()];
    let (ok, out) = user_add("alice", ALICE_PW, &place);
    assert!(ok, "cheq user add --config rs.toml: {out}");
    let base = format!("http://127.0.0.1:{port}");
    let log = dir.path().join("rs.log");
    // Uncompressed databases, so that a scan of the files reads every
    // stored byte in clear.
    let proc = start_server_with(
        "rs",
        &["resource-server", "--config", path.to_str().unwrap()],
        &[("CHEQ_SLED_COMPRESSION", "off")],
        &log,
        &base,
    )
    .await;
    Hosted { proc, base, dir }
}

/// Reads the result URI until the RS reports a final state.
async fn final_result(result_uri: &str) -> ResultStatus {
    agent::poll_result(result_uri, Duration::from_secs(20))
        .await
        .unwrap()
}

async fn metric(base: &str, name: &str) -> f64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[actix_web::test]
async fn an_rs_hosting_its_confirmation_confirms_on_its_own_origin_and_runs_the_operation_once() {
    hosted_flow(start_hosted("", "").await).await;
}

/// The same on PostgreSQL: both sides' state in one database.
#[actix_web::test]
async fn the_same_with_both_sides_in_postgresql() {
    if !cheq::store::testing::can_run(
        "the hosted confirmation on PostgreSQL",
        &[cheq::store::testing::Outside::Postgres],
    ) {
        return;
    }
    let url = cheq::store::pg::test_database("colocated").unwrap();
    hosted_flow(start_hosted(&format!("database_url = \"{url}\""), "").await).await;
}

async fn hosted_flow(h: Hosted) {
    // The URI pack names the RS's own confirmation URI.
    let pack = invoke_flight(&h.base).await;
    assert_eq!(pack.confirmation_uri, format!("{}/confirm", h.base));
    assert!(pack.resource_uri.starts_with(&h.base), "{pack:?}");

    // Nobody may fetch the CHEQ over HTTP: the RS has no CS client.
    let token = agent::get_token(&h.base, "agent", AGENT_SECRET)
        .await
        .unwrap();
    let res = http_client()
        .get(&pack.resource_uri)
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert!(
        matches!(res.status().as_u16(), 401 | 403),
        "{}",
        res.status()
    );

    // The user signs in at the RS and decides on its page.
    let mut b = Browser::new(&h.base);
    let (path, page) = b
        .open("/confirm", &pack.resource_uri, "alice", ALICE_PW)
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("UA23"), "{}", page.text);
    let outcome = b.decide(&path, &page, "accept").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);

    match final_result(&pack.result_uri).await {
        ResultStatus::Accepted(result) => {
            assert!(result.to_string().contains("CONFIRMED"), "{result}")
        }
        other => panic!("{other:?}\n{}", h.proc.log()),
    }
    assert_eq!(metric(&h.base, "cheq_operations_executed_total").await, 1.0);

    // The same decision again changes nothing: the operation ran once.
    let again = b.decide(&path, &page, "accept").await;
    assert_ne!(again.status, 500, "{}", again.text);
    assert_eq!(metric(&h.base, "cheq_operations_executed_total").await, 1.0);

    // A second confirmation, rejected: nothing runs.
    let pack2 = invoke_flight(&h.base).await;
    let (path2, page2) = b
        .open("/confirm", &pack2.resource_uri, "alice", ALICE_PW)
        .await;
    let outcome = b.decide(&path2, &page2, "reject").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    assert_eq!(
        final_result(&pack2.result_uri).await,
        ResultStatus::Rejected
    );
    assert_eq!(metric(&h.base, "cheq_operations_executed_total").await, 1.0);

    // History and evidence at the RS, countersigned by the confirmation's
    // key, which the RS's key set publishes beside its own.
    let history = b.get("/history").await;
    assert_eq!(history.status, 200, "{}", history.text);
    let evidence_path = history.link("/history/").expect("an evidence link");
    let evidence = b.get(&evidence_path).await;
    assert_eq!(evidence.status, 200, "{}", evidence.text);
    let doc: Value = serde_json::from_str(&evidence.raw).unwrap();
    let kids: Vec<String> = doc["signatures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let header = cheq::sign::b64::decode(s["protected"].as_str().unwrap()).unwrap();
            let header: Value = serde_json::from_slice(&header).unwrap();
            header["kid"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(kids.len(), 2, "{doc}");
    let jwks: Value = reqwest::get(format!("{}/.well-known/jwks.json", h.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let published: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["kid"].as_str())
        .collect();
    for kid in &kids {
        assert!(published.contains(&kid.as_str()), "{kid} in {jwks}");
    }
    assert_ne!(
        kids[0], kids[1],
        "the RS and its confirmation sign with keys of their own"
    );
    drop(h);
}

/// §5 and §8: private data typed on the RS's page reaches the operation,
/// and neither the agent, the log nor the stored records in clear.
#[actix_web::test]
async fn private_values_typed_at_the_rs_reach_neither_the_agent_nor_a_log_nor_the_store() {
    const FROM: &str = "31415926535";
    const TO: &str = "27182818284";
    let h = start_hosted("", "").await;
    let pack = invoke_tool(
        &h.base,
        "transfer_funds",
        &transfer_params(Some("ACME"), None),
    )
    .await;
    let mut b = Browser::new(&h.base);
    let (path, page) = b
        .open("/confirm", &pack.resource_uri, "alice", ALICE_PW)
        .await;
    let outcome = b.accept_typing(&path, &page, [FROM, TO, "12.50"]).await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    let result = match final_result(&pack.result_uri).await {
        ResultStatus::Accepted(result) => result,
        other => panic!("{other:?}"),
    };
    let seen_by_agent = result.to_string();
    assert!(seen_by_agent.contains("DONE"), "{seen_by_agent}");
    for secret in [FROM, TO] {
        assert!(!seen_by_agent.contains(secret), "{secret}: {seen_by_agent}");
    }
    let log = std::fs::read_to_string(&h.proc.log).unwrap();
    // Control: the log is there and speaks of the confirmation.
    assert!(log.contains("needs confirmation"), "{log}");
    let mut stored = Vec::new();
    for entry in walk(&h.dir.path().join("data")) {
        stored.extend(std::fs::read(entry).unwrap());
    }
    // Control: what the agent gave (the payee) is found in the store.
    assert!(
        stored.windows(4).any(|w| w == b"ACME"),
        "the scan reads the store"
    );
    for secret in [FROM, TO] {
        assert!(!log.contains(secret), "{secret} in the log");
        assert!(
            !stored.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{secret} stored in clear"
        );
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
        if kind.is_dir() {
            out.extend(walk(&path));
        } else if kind.is_file() {
            out.push(path);
        }
    }
    out
}

/// A file that names both a confirmation server elsewhere and its own, or
/// its own without `embedded = true`, or a CS key the RS sets itself, is
/// refused at start with the key named.
#[test]
fn a_hosting_configuration_is_checked_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[confirmation]\nembedded = false\n",
            "confirmation.embedded",
        ),
        ("[confirmation]\nembedded = true\nlisten = \"127.0.0.1:1\"\n", "confirmation.listen"),
        ("[confirmation]\nembedded = true\nsession_ttl_secs = 5\n", "confirmation.session_ttl_secs"),
        ("[confirmation]\nembedded = true\nno_such_key = 1\n", "no_such_key"),
        (
            "[confirmation]\nembedded = true\n[confirmation_server]\nuri = \"http://127.0.0.1:1/confirm\"\njwks_file = \"x.json\"\n",
            "confirmation_server",
        ),
        // No CHEQ leaves it: no confirmation-server client.
        (
            "[confirmation]\nembedded = true\n[[clients]]\nclient_id = \"cs\"\nclient_secret = \"cs-secret-1\"\nrole = \"cs\"\n",
            "clients[0].role",
        ),
        // Keys of its own, under key ids of its own.
        (
            "key_id = \"k1\"\n[confirmation]\nembedded = true\nkey_id = \"k1\"\n",
            "key id \"k1\"",
        ),
    ];
    for (i, (tail, key)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("rs{i}.toml"));
        let text = format!(
            "listen = \"127.0.0.1:1\"\npublic_url = \"http://127.0.0.1:1\"\ndata_dir = \"{d}\"\nsigning_key = \"{k}\"\n{tail}",
            d = toml_path(&dir.path().join("data")),
            k = toml_path(&dir.path().join("data/rs.jwk")),
        );
        std::fs::write(&path, text).unwrap();
        let (ok, out, err) = cheq_cmd(&["resource-server", "--config", path.to_str().unwrap()]);
        assert!(!ok, "{tail}: started\n{out}");
        assert!(err.contains(key), "{tail}: {err}");
    }
    // The confirmation's key may not be the RS's own.
    let other = tempfile::tempdir().unwrap();
    let key = toml_path(&other.path().join("data/rs.jwk"));
    let path = other.path().join("rs.toml");
    std::fs::write(
        &path,
        format!(
            "listen = \"127.0.0.1:1\"\npublic_url = \"http://127.0.0.1:1\"\ndata_dir = \"{d}\"\nsigning_key = \"{key}\"\n[confirmation]\nembedded = true\nsigning_key = \"{key}\"\n",
            d = toml_path(&other.path().join("data")),
        ),
    )
    .unwrap();
    let (ok, out, err) = cheq_cmd(&["resource-server", "--config", path.to_str().unwrap()]);
    assert!(!ok, "one key for both: started\n{out}");
    assert!(err.contains("confirmation.signing_key"), "{err}");
}

/// §10: a voice gateway confirms through the raw API of the RS that hosts
/// the confirmation, with a PIN set through the running server.
#[actix_web::test]
async fn a_voice_gateway_confirms_at_the_rs_through_the_raw_api() {
    const GW_SECRET: &str = "gateway-secret-0123456789";
    const PIN: &str = "482916";
    let hash = cheq::confirm::auth::hash_secret(GW_SECRET).unwrap();
    let gateways =
        format!("\n[[confirmation.gateways]]\nclient_id = \"gw\"\nsecret_hash = \"{hash}\"\n");
    let h = start_hosted("", &gateways).await;
    let path = h.dir.path().join("rs.toml");
    let (ok, out) = cheq_with_stdin(
        &[
            "user",
            "set-pin",
            "alice",
            "--pin-stdin",
            "--config",
            path.to_str().unwrap(),
        ],
        &[],
        PIN,
    );
    assert!(ok, "{out}");
    let pack = invoke_flight(&h.base).await;
    let gw = VoiceClient::new(&h.base, "gw", GW_SECRET);
    let token = gw.user_token("alice", PIN).await;
    let created = gw.create(Some(&token), &pack.resource_uri).await;
    created.expect(201, "create");
    let text = created.body["voice"]["text"].as_str().unwrap_or_default();
    assert!(text.contains("U A 2 3"), "{}", created.raw);
    let id = created.body["id"].as_str().unwrap().to_owned();
    let decided = gw
        .decide(
            Some(&token),
            &id,
            &serde_json::json!({"decision": "accept"}),
        )
        .await;
    assert_eq!(decided.status, 200, "{}", decided.raw);
    assert!(matches!(
        final_result(&pack.result_uri).await,
        ResultStatus::Accepted(_)
    ));
    // A wrong gateway secret is refused.
    let wrong = VoiceClient::new(&h.base, "gw", "not-the-secret-0123456789");
    assert_eq!(wrong.token("alice", PIN).await.status, 401);
}

/// Data that can leave: the confirmation's store of an RS that hosts it
/// (accounts, decisions) is exported and imported with `--confirmation`,
/// the RS's own without; a CS's file refuses the flag.
#[actix_web::test]
async fn the_hosted_confirmations_state_moves_with_store_export_confirmation() {
    let mut h = start_hosted("", "").await;
    let pack = invoke_flight(&h.base).await;
    let mut b = Browser::new(&h.base);
    let (path, page) = b
        .open("/confirm", &pack.resource_uri, "alice", ALICE_PW)
        .await;
    assert_eq!(b.decide(&path, &page, "accept").await.status, 200);
    assert!(matches!(
        final_result(&pack.result_uri).await,
        ResultStatus::Accepted(_)
    ));
    h.proc.kill();
    let config = h.dir.path().join("rs.toml");
    let config = config.to_str().unwrap();
    let export = |args: &[&str]| {
        let mut all = vec!["store", "export"];
        all.extend_from_slice(args);
        let (ok, out, err) = cheq_cmd(&all);
        assert!(ok, "{all:?}: {err}");
        out
    };
    let cs = export(&["--config", config, "--confirmation"]);
    assert!(
        cs.lines().next().unwrap().contains("\"server\":\"cs\""),
        "{cs}"
    );
    assert!(
        cs.contains("\"kind\":\"account\"") && cs.contains("\"kind\":\"decision\""),
        "{cs}"
    );
    let rs = export(&["--config", config]);
    assert!(
        rs.lines().next().unwrap().contains("\"server\":\"rs\""),
        "{rs}"
    );

    // Into an empty hosted RS elsewhere: alice and her decision come along,
    // and the public log, which moves under its key (the key file, copied)
    // and its name (the public URL's host, kept).
    let dir2 = tempfile::tempdir().unwrap();
    let port: u16 = h.base.rsplit(':').next().unwrap().parse().unwrap();
    let config2 = self::config(dir2.path(), port, "", "");
    {
        use std::os::unix::fs::PermissionsExt;
        let data2 = dir2.path().join("data");
        std::fs::create_dir_all(&data2).unwrap();
        std::fs::set_permissions(&data2, std::fs::Permissions::from_mode(0o700)).unwrap();
        let key = "transparency-log-key.secret";
        std::fs::copy(h.dir.path().join("data").join(key), data2.join(key)).unwrap();
    }
    let config2 = config2.to_str().unwrap();
    let file = dir2.path().join("cs.jsonl");
    std::fs::write(&file, &cs).unwrap();
    let (ok, out, err) = cheq_cmd(&[
        "store",
        "import",
        "--config",
        config2,
        "--confirmation",
        "--in",
        file.to_str().unwrap(),
    ]);
    assert!(ok, "{out}{err}");
    let again = export(&["--config", config2, "--confirmation"]);
    let items = |s: &str| s.lines().skip(1).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(items(&again), items(&cs));

    // A confirmation server's own file has no hosted confirmation.
    let cs_file = dir2.path().join("cheq.toml");
    std::fs::write(
        &cs_file,
        format!(
            "listen = \"127.0.0.1:1\"\npublic_url = \"http://127.0.0.1:1\"\ndata_dir = \"{}\"\nsigning_key = \"{}\"\n\n[[resource_servers]]\norigin = \"http://127.0.0.1:2\"\npath_prefix = \"/cheq/\"\njwks = \"x.json\"\ntoken_url = \"http://127.0.0.1:2/oauth/token\"\nclient_id = \"cs\"\nclient_secret = \"s3cret-s3cret\"\n",
            toml_path(&dir2.path().join("csdata")),
            toml_path(&dir2.path().join("csdata/cs.jwk")),
        ),
    )
    .unwrap();
    let (ok, _, err) = cheq_cmd(&[
        "store",
        "export",
        "--config",
        cs_file.to_str().unwrap(),
        "--confirmation",
    ]);
    assert!(!ok && err.contains("--confirmation"), "{err}");
}

/// `cheq migrate` on the file of an RS hosting its confirmation applies
/// both schemas, once.
#[test]
fn migrate_applies_both_schemas_of_a_hosting_rs() {
    if !cheq::store::testing::can_run(
        "the hosted confirmation's migrations on PostgreSQL",
        &[cheq::store::testing::Outside::Postgres],
    ) {
        return;
    }
    let url = cheq::store::pg::test_database("colocated_migrate").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = config(
        dir.path(),
        free_port(),
        &format!("database_url = \"{url}\""),
        "",
    );
    let path = path.to_str().unwrap();
    let (ok, out, err) = cheq_cmd(&["migrate", "--config", path]);
    assert!(ok, "{err}");
    assert!(
        out.contains("rs schema") && out.contains("cs schema"),
        "{out}"
    );
    assert!(!out.contains("(0 steps"), "{out}");
    let (ok, again, err) = cheq_cmd(&["migrate", "--config", path]);
    assert!(ok, "{err}");
    assert_eq!(again.matches("(0 steps applied now)").count(), 2, "{again}");
}
