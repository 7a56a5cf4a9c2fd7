//! `cheq demo` leads a newcomer all the way to the evidence: the commands it
//! prints run as printed (the binary's path where `cheq` is not on the
//! PATH), each decision's evidence is written with a TRUST file of both
//! servers' keys, and the `cheq verify` and `cheq audit` commands it prints
//! for that decision pass; in both shapes (two servers, and the
//! confirmation inside the RS, whose log is under `/confirm/log/`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// The lines of the demo's output that start with `prefix` (trimmed), the
/// continuation lines (ending in `\`) joined.
fn commands(log: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = log.lines();
    while let Some(line) = lines.next() {
        let Some(at) = line.find(prefix) else {
            continue;
        };
        let mut cmd = line[at + prefix.len()..].trim().to_owned();
        while cmd.ends_with('\\') {
            cmd.pop();
            cmd.push(' ');
            cmd.push_str(lines.next().unwrap_or_default().trim());
        }
        out.push(cmd);
    }
    out
}

/// Waits (bounded) until the demo's output holds `n` lines starting with
/// `prefix`.
async fn wait_for_lines(demo: &Proc, prefix: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = commands(&demo.log(), prefix);
        if found.len() >= n {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "the demo printed {} of {n} lines {prefix:?}:\n{}",
            found.len(),
            demo.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs a printed command in a shell from the checkout's root, as the
/// person would: (success, stdout + stderr).
fn run_printed(cmd: &str) -> (bool, String) {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "$ {cmd}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The demo's banner names this binary as a shell in the checkout reaches
/// it (`cheq` is not on the PATH the test gives the demo).
fn assert_commands_run_as_printed(log: &str) {
    assert!(!log.contains("\n  cheq agent"), "{log}");
    let agent = commands(log, "  ");
    let agent = agent
        .iter()
        .find(|c| c.contains(" agent --rs "))
        .unwrap_or_else(|| panic!("no agent command:\n{log}"));
    let program = agent.split_whitespace().next().unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(program);
    assert!(path.is_file(), "{program} is not a file from the checkout");
}

/// Decides one booking for the demo at `rs`, at the confirmation server
/// `cs` whose start path is `start`, and accepts it.
async fn book_and_accept(rs: &str, cs: &str, start: &str, demo: &Proc) {
    let pack = invoke_demo_flight(rs, || demo.log()).await;
    let mut b = Browser::new(cs);
    let (path, page) = b.open(start, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}\n{}", page.text, demo.log());
    let done = b.decide(&path, &page, "accept").await;
    assert_eq!(done.status, 200, "{}\n{}", done.text, demo.log());
}

/// The printed checks of the one decision made, run as printed.
async fn the_printed_checks_pass(demo: &Proc, data: &Path) {
    let verify = wait_for_lines(demo, "check it offline:", 1).await;
    let audit = wait_for_lines(demo, "find it in the log:", 1).await;
    let (ok, out) = run_printed(&verify[0]);
    assert!(ok, "{out}\n{}", demo.log());
    assert!(out.contains("\"valid\": true"), "{out}");
    let (ok, out) = run_printed(&audit[0]);
    assert!(ok, "{out}\n{}", demo.log());
    assert!(out.contains("\"ok\": true"), "{out}");
    let trust = std::fs::read_to_string(data.join("trust.json")).unwrap();
    assert!(trust.contains("resource_servers") && trust.contains("confirmation_servers"));
    let evidence: Vec<_> = std::fs::read_dir(data.join("evidence"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(evidence.len(), 1, "{evidence:?}");
    assert!(
        evidence[0].starts_with("cheq-book_a_flight-") && evidence[0].ends_with("-accept.json"),
        "{evidence:?}"
    );
}

#[actix_web::test]
async fn the_demo_leads_to_evidence_that_its_printed_commands_check() {
    let dir = tempfile::tempdir().unwrap();
    let (cs_port, rs_port) = (free_port(), free_port());
    let data = dir.path().join("demo");
    let data_arg = data.display().to_string();
    let cs_url = format!("http://127.0.0.1:{cs_port}");
    let rs_url = format!("http://127.0.0.1:{rs_port}");
    let (cs_port, rs_port) = (cs_port.to_string(), rs_port.to_string());
    let args = [
        "demo",
        "--data-dir",
        &data_arg,
        "--cs-port",
        &cs_port,
        "--rs-port",
        &rs_port,
    ];
    let mut demo = start_server_with(
        "demo",
        &args,
        &[("CHEQ_DEMO_PASSWORD", ALICE_PW), ("PATH", "/usr/bin:/bin")],
        &dir.path().join("demo.log"),
        &cs_url,
    )
    .await;
    let log = demo.log();
    assert_commands_run_as_printed(&log);
    assert!(
        log.contains(&format!("public log at {cs_url}/log/")),
        "{log}"
    );
    assert!(log.contains("its key: 127.0.0.1"), "{log}");
    book_and_accept(&rs_url, &cs_url, "/", &demo).await;
    the_printed_checks_pass(&demo, &data).await;

    // Started again without a password: alice keeps hers, and the demo
    // says how to set a new one.
    demo.kill();
    let again = start_server_with(
        "demo-again",
        &args,
        &[("PATH", "/usr/bin:/bin")],
        &dir.path().join("again.log"),
        &cs_url,
    )
    .await;
    let log = again.log();
    assert!(log.contains("from the first run (unchanged"), "{log}");
    assert!(log.contains("CHEQ_DEMO_PASSWORD"), "{log}");
}

#[actix_web::test]
async fn the_colocated_demo_names_its_log_under_the_confirmation() {
    let dir = tempfile::tempdir().unwrap();
    let rs_port = free_port();
    let data = dir.path().join("demo");
    let rs_url = format!("http://127.0.0.1:{rs_port}");
    let demo = start_server_with(
        "demo",
        &[
            "demo",
            "--colocated",
            "--data-dir",
            &data.display().to_string(),
            "--rs-port",
            &rs_port.to_string(),
        ],
        &[("CHEQ_DEMO_PASSWORD", ALICE_PW), ("PATH", "/usr/bin:/bin")],
        &dir.path().join("demo.log"),
        &rs_url,
    )
    .await;
    let log = demo.log();
    assert_commands_run_as_printed(&log);
    assert!(
        log.contains(&format!("public log at {rs_url}/confirm/log/")),
        "{log}"
    );
    book_and_accept(&rs_url, &rs_url, "/confirm", &demo).await;
    the_printed_checks_pass(&demo, &data).await;
}
