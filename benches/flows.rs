//! Load generator: complete confirmation flows per second that the CS
//! sustains against the reference RS, with p50/p99 latency (issue 3).
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
//! set the size of the run. `CHEQ_BENCH_CS` may name several CS instances
//! (comma-separated, on one PostgreSQL database): the browsers are spread
//! over them, all with the one session signed in at the first.

use reqwest::header;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[path = "support/web.rs"]
mod web;
use web::{hidden, login};

async fn flow(
    http: &reqwest::Client,
    cs: &str,
    session: &str,
    resource_uri: &str,
) -> Result<(), String> {
    let res = http
        .post(format!("{cs}/"))
        .header(header::COOKIE, session)
        .form(&[("resource_uri", resource_uri)])
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let page = res
        .headers()
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .filter(|l| l.starts_with("/c/"))
        .ok_or("start did not lead to a page")?
        .to_owned();
    let res = http
        .get(format!("{cs}{page}"))
        .header(header::COOKIE, session)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if res.status() != 200 {
        return Err(format!("page: HTTP {}", res.status()));
    }
    let html = res.text().await.map_err(|e| e.to_string())?;
    let csrf = hidden(&html, "csrf").ok_or("no csrf")?;
    let view = hidden(&html, "view").ok_or("no view")?;
    let res = http
        .post(format!("{cs}{page}"))
        .header(header::COOKIE, session)
        .form(&[
            ("csrf", csrf.as_str()),
            ("view", view.as_str()),
            ("decision", "accept"),
        ])
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let outcome = res.text().await.map_err(|e| e.to_string())?;
    if outcome.contains("class=\"delivery\">delivered<") {
        Ok(())
    } else {
        Err("the decision was not delivered".into())
    }
}

/// The next resource URI to confirm (the lock is released before the flow).
fn next(queue: &std::sync::Mutex<Vec<String>>) -> Option<String> {
    queue.lock().ok().and_then(|mut q| q.pop())
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
        let token: Value = http
            .post(format!("{rs}/oauth/token"))
            .basic_auth("demo-agent", Some("demo-agent-secret"))
            .form(&[("grant_type", "client_credentials")])
            .send()
            .await
            .expect("agent token")
            .json()
            .await
            .expect("agent token body");
        let token = Arc::new(token["access_token"].as_str().expect("access_token").to_owned());
        let body = Arc::new(serde_json::json!({"name": "book_flight", "input_parameters": [
            {"name": "flight_number", "value": "UA23"},
            {"name": "flight_date", "value": "2026-12-08"},
            {"name": "cabin_class", "value": "BUSINESS"},
            {"name": "price_usd", "value": 1200}]}));
        let mut uris = Vec::with_capacity(flows);
        let mut pending = Vec::new();
        for _ in 0..flows {
            let (http, rs, token, body) = (http.clone(), rs.clone(), token.clone(), body.clone());
            pending.push(tokio::spawn(async move {
                let res = http
                    .post(format!("{rs}/tools/book_flight:invoke"))
                    .bearer_auth(token.as_str())
                    .json(body.as_ref())
                    .send()
                    .await
                    .ok()?;
                let pack: Value = res.json().await.ok()?;
                pack["resource uri"].as_str().map(str::to_owned)
            }));
            if pending.len() >= 64 {
                for p in pending.drain(..) {
                    uris.extend(p.await.ok().flatten());
                }
            }
        }
        for p in pending.drain(..) {
            uris.extend(p.await.ok().flatten());
        }
        assert_eq!(uris.len(), flows, "minting failed");
        println!("minted {flows} CHEQs in {:.1} s", started.elapsed().as_secs_f64());

        let session = Arc::new(login(&http, &cs, &password).await);
        let queue = Arc::new(std::sync::Mutex::new(uris));
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
        if let Some(f) = failures.first() {
            println!("first failure: {f}");
        }
    });
}
