//! Data at rest: the servers' data directories are 0700 and every file they
//! create in them 0600 (argon2 hashes of passwords and PINs, sealed-document
//! keys, secrets, databases), and a server refuses to start in a data
//! directory that is open to others. Real processes, started as a host would.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn modes_under(dir: &Path) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        let meta = std::fs::symlink_metadata(&d).unwrap();
        out.push((d.display().to_string(), meta.permissions().mode() & 0o777));
        if meta.is_dir() {
            for e in std::fs::read_dir(&d).unwrap() {
                todo.push(e.unwrap().path());
            }
        }
    }
    out
}

#[tokio::test]
async fn data_directories_and_files_are_their_owners_alone() {
    let setup = Setup::new();
    let mut rs = setup.start_rs().await;
    let mut cs = setup.start_cs().await;
    // A user and a PIN, written through the running server's admin socket.
    let (ok, out) = user_add("alice", ALICE_PW, &["--config", &setup.path("cs.toml")]);
    assert!(ok, "{out}");
    // A complete flow, so that every kind of record is on disk.
    let pack = invoke_flight(&setup.rs_url).await;
    let mut b = Browser::new(&setup.cs_url);
    let (path, page) = b.open("/", &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let outcome = b.decide(&path, &page, "accept").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    cs.kill();
    rs.kill();
    for data in ["cs", "rs"] {
        let found = modes_under(&setup.dir.path().join(data));
        assert!(found.len() >= 4, "{found:?}");
        for (path, mode) in found {
            assert_eq!(mode & 0o077, 0, "{path} is open to others: {mode:o}");
        }
    }
}

#[tokio::test]
async fn a_server_refuses_a_data_directory_open_to_others() {
    let setup = Setup::new();
    let cs_data = setup.dir.path().join("cs");
    std::fs::create_dir_all(&cs_data).unwrap();
    std::fs::set_permissions(&cs_data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cheq"))
        .args(["serve", "--config", &setup.path("cs.toml")])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("open to others"), "{err}");
    assert!(err.contains("chmod 700"), "{err}");
    assert!(
        !cs_data.join("cs.sled").exists(),
        "nothing was opened in it"
    );
}

/// By default (no `metrics` key) at either server, `GET /metrics` answers
/// only a request carrying the bearer token the server wrote (0600) into its
/// data directory; without it, or with another, 401 with a Bearer challenge
/// and no metric in the body. (`metrics = "open"` is for loopback and
/// private networks, as the test configurations use.)
#[tokio::test]
async fn metrics_answer_only_their_bearer_by_default() {
    let setup = Setup::new();
    for config in ["cs.toml", "rs.toml"] {
        let path = setup.dir.path().join(config);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("metrics = \"open\"\n"), "{text}");
        std::fs::write(&path, text.replace("metrics = \"open\"\n", "")).unwrap();
    }
    let _rs = setup.start_rs().await;
    let _cs = setup.start_cs().await;
    let http = reqwest::Client::new();
    for (origin, data) in [(&setup.cs_url, "cs"), (&setup.rs_url, "rs")] {
        let file = setup.dir.path().join(data).join("metrics.secret");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
        let token = std::fs::read_to_string(&file).unwrap();
        let url = format!("{origin}/metrics");
        for auth in [None, Some("Bearer not-the-token"), Some("Basic bWU6eW91")] {
            let mut req = http.get(&url);
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            let res = req.send().await.unwrap();
            assert_eq!(res.status(), 401, "{origin} {auth:?}");
            assert_eq!(
                res.headers().get("www-authenticate").unwrap(),
                "Bearer realm=\"metrics\""
            );
            let body = res.text().await.unwrap();
            assert!(
                body.contains("invalid_token") && !body.contains("cheq_"),
                "{body}"
            );
        }
        let res = http
            .get(&url)
            .bearer_auth(token.trim())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{origin}");
        let body = res.text().await.unwrap();
        assert!(
            body.contains("cheq_jwks_requests_total"),
            "{origin}: {body}"
        );
    }
}

/// Log lines carry route patterns, never a path or query as sent: a whole
/// flow, with refusals at both servers (unknown and unauthorised capability
/// paths, a wrong password, a wrong PIN, a stale view, bad tokens), leaves
/// none of the capabilities, credentials or tokens it used in either
/// server's log, at the servers' own debug level.
#[tokio::test]
async fn no_capability_or_secret_reaches_a_log_line() {
    const GW: &str = "voice-gw";
    const GW_SECRET: &str = "gateway-secret-for-the-logs";
    const PIN: &str = "864209";
    let setup = Setup::new();
    let config = setup.path("cs.toml");
    let toml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!(
            "{toml}\n[[gateways]]\nclient_id = \"{GW}\"\nsecret_hash = \"{}\"\n",
            cheq::confirm::auth::hash_secret(GW_SECRET).unwrap()
        ),
    )
    .unwrap();
    let (ok, out) = user_add("alice", ALICE_PW, &["--config", &config]);
    assert!(ok, "{out}");
    let env = [("RUST_LOG", "info,cheq=debug")];
    let rs_log = setup.dir.path().join("rs.log");
    let cs_log = setup.dir.path().join("cs.log");
    let rs = start_server_with(
        "RS",
        &["resource-server", "--config", &setup.path("rs.toml")],
        &env,
        &rs_log,
        &setup.rs_url,
    )
    .await;
    let cs = start_server_with(
        "CS",
        &["serve", "--config", &config],
        &env,
        &cs_log,
        &setup.cs_url,
    )
    .await;
    let mut secrets: Vec<String> = vec![
        ALICE_PW.into(),
        PIN.into(),
        GW_SECRET.into(),
        AGENT_SECRET.into(),
        CS_SECRET.into(),
    ];
    let tail = |uri: &str| uri.rsplit('/').next().unwrap().to_owned();

    let pack = invoke_flight(&setup.rs_url).await;
    secrets.push(tail(&pack.resource_uri));
    secrets.push(tail(&pack.result_uri));
    assert_eq!(result_of(&pack.result_uri).await.0, 202);
    // Refusals at the RS: a made-up result URI, the resource URI without
    // the CS's token, a made-up resource URI.
    let made_up = "Zm9yZ2VkLWNhcGFiaWxpdHktcGF0aA";
    secrets.push(made_up.into());
    let unknown_result = format!("{}/{made_up}", pack.result_uri.rsplit_once('/').unwrap().0);
    assert_eq!(result_of(&unknown_result).await.0, 404);
    let bare = reqwest::get(&pack.resource_uri).await.unwrap();
    assert_eq!(bare.status(), 401);
    let unknown_resource = format!(
        "{}/{made_up}",
        pack.resource_uri.rsplit_once('/').unwrap().0
    );
    assert!(reqwest::get(&unknown_resource)
        .await
        .unwrap()
        .status()
        .is_client_error());

    // The page, with a wrong password first and a stale view.
    let mut b = Browser::new(&setup.cs_url);
    let res = b
        .post("/", &[("resource_uri", pack.resource_uri.as_str())])
        .await;
    let to_login = res.location();
    let wrong = b.login_at(&to_login, "alice", "not-alices-password").await;
    assert_eq!(wrong.status, 401);
    secrets.push("not-alices-password".into());
    let res = b.login_at(&to_login, "alice", ALICE_PW).await;
    let path = res.location();
    assert!(path.starts_with("/c/"), "{path}");
    secrets.push(b.session.clone().unwrap());
    let page = b.get(&path).await;
    let csrf = page.hidden("csrf").unwrap();
    secrets.push(csrf.clone());
    let stale = b
        .post(
            &path,
            &[("csrf", &csrf), ("view", "stale"), ("decision", "accept")],
        )
        .await;
    assert_eq!(stale.status, 409, "{}", stale.text);
    let done = b.decide(&path, &page, "accept").await;
    assert_eq!(done.status, 200, "{}", done.text);

    // The voice API: a wrong PIN, a bad token.
    let (ok, out) = cheq_with_stdin(
        &[
            "user",
            "set-pin",
            "alice",
            "--pin-stdin",
            "--config",
            &config,
        ],
        &[],
        PIN,
    );
    assert!(ok, "{out}");
    let gw = VoiceClient::new(&setup.cs_url, GW, GW_SECRET);
    gw.token("alice", "000000").await.expect(401, "wrong PIN");
    let token = gw.user_token("alice", PIN).await;
    secrets.push(token.clone());
    gw.get(Some("made-up-token-value"), "x")
        .await
        .expect(401, "bad token");
    gw.get(Some(&token), "none-such")
        .await
        .expect(404, "unknown");

    // The result, then both logs read whole.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while result_of(&pack.result_uri).await.1["status"] != "accepted" {
        assert!(std::time::Instant::now() < deadline, "not delivered");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    drop((cs, rs));
    let logs = format!(
        "{}\n{}",
        std::fs::read_to_string(&cs_log).unwrap(),
        std::fs::read_to_string(&rs_log).unwrap()
    );
    assert!(logs.lines().count() > 5, "the servers logged: {logs}");
    for s in &secrets {
        assert!(
            !logs.contains(s.as_str()),
            "{s:?} is in a log line:\n{logs}"
        );
    }
}
