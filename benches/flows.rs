//! Load generator: complete confirmation flows per second that the CS
//! sustains against the reference RS, with p50/p99 latency.
//!
//! The servers run as a separate process (`cheq demo`, release build), on
//! loopback; `scripts/bench` starts it and passes its addresses in
//! `CHEQ_BENCH_CS` / `CHEQ_BENCH_RS` and alice's password in
//! `CHEQ_DEMO_PASSWORD`. This process plays the agent (it mints the CHEQs
//! first, untimed) and then many browsers at once: each timed flow is
//! `POST /` (start) → `GET /c/{id}` (the CS fetches the CHEQ from the RS with
//! its OAuth token and verifies it) → `POST /c/{id}` accept (the CS
//! countersigns, records the nonce durably, delivers to the RS, which
//! verifies, records durably and runs the operation). A flow counts only if
//! the outcome page says the decision was delivered.
//!
//! `CHEQ_BENCH_FLOWS` (default 2000) and `CHEQ_BENCH_CONCURRENCY` (default 32)
//! set the size of the run. The last line printed is one JSON object
//! (`flows_per_s`, `p50_ms`, `p99_ms`, `concurrency`, `flows`, `failed`,
//! `store`, and with `CHEQ_BENCH_PID` naming the servers' process,
//! `server_cpu_ms` and `client_cpu_ms`: CPU time per complete flow of the
//! servers and of this load generator, steadier than flows/s on a shared
//! machine), also written to `CHEQ_BENCH_JSON_OUT` when set.
//! `CHEQ_BENCH_BEFORE_FLOWS` and `CHEQ_BENCH_AFTER_FLOWS`, when set, are shell
//! commands run just before the timed flows and just after.
//! `CHEQ_BENCH_CS` may name several CS instances (comma-separated, on one
//! PostgreSQL database): the browsers are spread over them, all with the one
//! session signed in at the first.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;
use std::time::{Duration, Instant};

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[path = "support/web.rs"]
mod web;
use web::{cpu_secs, flow, login, mint};

/// The next resource URI to confirm (the lock is released before the flow).
fn next(queue: &std::sync::Mutex<Vec<String>>) -> Option<String> {
    queue.lock().ok().and_then(|mut q| q.pop())
}

/// Runs the shell command in the variable `name`, if set: just before the
/// timed flows and just after (`scripts/bench instructions` zeroes and
/// dumps callgrind's counters there, so that minting and signing in are
/// left out, as they are from the timing).
fn hook(name: &str) {
    let Ok(command) = std::env::var(name) else {
        return;
    };
    match std::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .status()
    {
        Ok(status) if status.success() => {}
        other => panic!("{name} ({command}) failed: {other:?}"),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    // `cargo bench` passes "--bench"; nothing else is taken from argv.
    let Ok(cs_list) = std::env::var("CHEQ_BENCH_CS") else {
        eprintln!("flows: set CHEQ_BENCH_CS and CHEQ_BENCH_RS (scripts/bench does); skipping");
        return;
    };
    let instances: Vec<String> = cs_list.split(',').map(str::to_owned).collect();
    let cs = instances[0].clone();
    let rs = env("CHEQ_BENCH_RS", "http://127.0.0.1:8081");
    let password = env("CHEQ_DEMO_PASSWORD", "");
    let flows: usize = env("CHEQ_BENCH_FLOWS", "2000").parse().unwrap_or(2000);
    let concurrency: usize = env("CHEQ_BENCH_CONCURRENCY", "32").parse().unwrap_or(32);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(concurrency * 2)
            .build()
            .expect("client");
        // Untimed: the agent asks for the confirmations (one token, one client).
        let started = Instant::now();
        let uris = mint(&http, &rs, flows).await;
        assert_eq!(uris.len(), flows, "minting failed");
        println!("minted {flows} CHEQs in {:.1} s", started.elapsed().as_secs_f64());

        let session = Arc::new(login(&http, &cs, &password).await);
        let queue = Arc::new(std::sync::Mutex::new(uris));
        hook("CHEQ_BENCH_BEFORE_FLOWS");
        let server_pid = std::env::var("CHEQ_BENCH_PID").ok();
        let server_cpu = server_pid.as_deref().and_then(cpu_secs);
        let client_cpu = cpu_secs("self");
        let started = Instant::now();
        let mut workers = Vec::new();
        for i in 0..concurrency {
            let cs = instances[i % instances.len()].clone();
            let (http, session, queue) = (http.clone(), session.clone(), queue.clone());
            workers.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut failures = Vec::new();
                while let Some(uri) = next(&queue) {
                    let t = Instant::now();
                    match flow(&http, &cs, &session, &uri).await {
                        Ok(()) => latencies.push(t.elapsed()),
                        Err(e) => failures.push(e),
                    }
                }
                (latencies, failures)
            }));
        }
        let mut latencies = Vec::new();
        let mut failures = Vec::new();
        for w in workers {
            let (l, f) = w.await.expect("worker");
            latencies.extend(l);
            failures.extend(f);
        }
        let wall = started.elapsed();
        hook("CHEQ_BENCH_AFTER_FLOWS");
        // CPU per complete flow: steadier than flows/s on a shared VM.
        let per_flow = |before: Option<f64>, after: Option<f64>| match (before, after) {
            (Some(b), Some(a)) if !latencies.is_empty() => {
                Some(((a - b) * 1000.0 / latencies.len() as f64 * 1000.0).round() / 1000.0)
            }
            _ => None,
        };
        let server_ms = per_flow(server_cpu, server_pid.as_deref().and_then(cpu_secs));
        let client_ms = per_flow(client_cpu, cpu_secs("self"));
        latencies.sort();
        println!(
            "flows: {} complete, {} failed, {concurrency} concurrent, {} CS instance(s), {:.2} s: {:.0} flows/s; latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            latencies.len(),
            failures.len(),
            instances.len(),
            wall.as_secs_f64(),
            latencies.len() as f64 / wall.as_secs_f64(),
            percentile(&latencies, 0.50).as_secs_f64() * 1000.0,
            percentile(&latencies, 0.99).as_secs_f64() * 1000.0,
            latencies.last().copied().unwrap_or_default().as_secs_f64() * 1000.0,
        );
        if let (Some(s), Some(c)) = (server_ms, client_ms) {
            println!("CPU per flow: servers {s:.3} ms, load generator {c:.3} ms");
        }
        if let Some(f) = failures.first() {
            println!("first failure: {f}");
        }
        // The one JSON line outside scripts read (`scripts/bench flows --json`).
        let line = serde_json::json!({
            "flows_per_s": (latencies.len() as f64 / wall.as_secs_f64()).round(),
            "p50_ms": (percentile(&latencies, 0.50).as_secs_f64() * 10_000.0).round() / 10.0,
            "p99_ms": (percentile(&latencies, 0.99).as_secs_f64() * 10_000.0).round() / 10.0,
            "concurrency": concurrency,
            "flows": latencies.len(),
            "failed": failures.len(),
            "store": env("CHEQ_BENCH_STORE", "sled"),
            "server_cpu_ms": server_ms,
            "client_cpu_ms": client_ms,
        })
        .to_string();
        println!("{line}");
        if let Ok(path) = std::env::var("CHEQ_BENCH_JSON_OUT") {
            if let Err(e) = std::fs::write(&path, format!("{line}\n")) {
                eprintln!("flows: writing {path}: {e}");
            }
        }
    });
}
