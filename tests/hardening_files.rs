//! Data at rest: the servers' data directories are 0700 and every file they
//! create in them 0600 (argon2 hashes of passwords and PINs, sealed-document
//! keys, secrets, databases), and a server refuses to start in a data
//! directory that is open to others. Real processes, started as a host would.

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

/// `metrics = "token"` at either server: `GET /metrics` answers only a
/// request carrying the bearer token the server wrote (0600) into its data
/// directory; without it, or with another, 401 with a Bearer challenge and
/// no metric in the body.
#[tokio::test]
async fn metrics_with_a_token_answer_only_its_bearer() {
    let setup = Setup::new();
    for config in ["cs.toml", "rs.toml"] {
        let path = setup.dir.path().join(config);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("metrics = \"token\"\n{text}")).unwrap();
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
