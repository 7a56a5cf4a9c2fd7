//! Load test: a flood of bad credentials against a running CS.
//!
//! `scripts/bench flood` starts `cheq demo` as its own process and passes its
//! address in `CHEQ_BENCH_CS`, its process id in `CHEQ_BENCH_PID` (for its
//! resident memory, read from `/proc`) and alice's password in
//! `CHEQ_DEMO_PASSWORD`. This process then
//! 1. signs alice in a few times (the baseline latency) and reads the CS's
//!    resident memory;
//! 2. sends `CHEQ_BENCH_FLOOD` (default 1,000) concurrent bad
//!    `POST /api/v1/token` requests from one address (half with the real
//!    gateway id and a wrong secret, half with random gateway ids) and, while
//!    they are in flight, signs alice in from another loopback address and
//!    times it;
//! 3. waits `CHEQ_BENCH_SETTLE_SECS` (default 60) and reads the CS's
//!    resident memory again.
//!
//! It prints one JSON line last: the honest login's latency before and
//! during the flood, the answers to the flood by status, and the memory
//! before, at the end of the flood and after settling.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[path = "support/web.rs"]
mod web;
use web::{login, rss_kib};

/// One honest login (form, then post); returns its wall time in ms.
async fn timed_login(http: &reqwest::Client, cs: &str, password: &str) -> f64 {
    let started = Instant::now();
    login(http, cs, password).await;
    started.elapsed().as_secs_f64() * 1000.0
}

fn main() {
    let Ok(cs) = std::env::var("CHEQ_BENCH_CS") else {
        eprintln!(
            "flood: set CHEQ_BENCH_CS and CHEQ_BENCH_PID (scripts/bench flood does); skipping"
        );
        return;
    };
    let pid = env("CHEQ_BENCH_PID", "self");
    let password = env("CHEQ_DEMO_PASSWORD", "");
    let flood: usize = env("CHEQ_BENCH_FLOOD", "1000").parse().unwrap_or(1000);
    let settle: u64 = env("CHEQ_BENCH_SETTLE_SECS", "60").parse().unwrap_or(60);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let honest = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .local_address("127.0.0.1".parse::<std::net::IpAddr>().ok())
            .build()
            .expect("client");
        let attacker = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .local_address("127.0.0.66".parse::<std::net::IpAddr>().ok())
            .pool_max_idle_per_host(flood)
            .timeout(Duration::from_secs(120))
            .build()
            .expect("client");
        let mut before = Vec::new();
        for _ in 0..3 {
            before.push(timed_login(&honest, &cs, &password).await);
        }
        let rss_before = rss_kib(&pid);
        let started = Instant::now();
        let tasks: Vec<_> = (0..flood)
            .map(|i| {
                let http = attacker.clone();
                let cs = cs.clone();
                tokio::spawn(async move {
                    let id = if i % 2 == 0 {
                        "voice-gw".to_owned()
                    } else {
                        format!("gw-{}", rand::random::<u64>())
                    };
                    http.post(format!("{cs}/api/v1/token"))
                        .basic_auth(id, Some("not the secret at all"))
                        .form(&[("username", "alice"), ("pin", "000000")])
                        .send()
                        .await
                        .map(|r| r.status().as_u16())
                        .unwrap_or(0)
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut during = Vec::new();
        for _ in 0..3 {
            during.push(timed_login(&honest, &cs, &password).await);
        }
        let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
        for t in tasks {
            *statuses.entry(t.await.unwrap_or(0)).or_default() += 1;
        }
        let flood_secs = started.elapsed().as_secs_f64();
        let rss_flood = rss_kib(&pid);
        tokio::time::sleep(Duration::from_secs(settle)).await;
        let rss_after = rss_kib(&pid);
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        println!(
            "{}",
            serde_json::json!({
                "flood": flood,
                "flood_secs": (flood_secs * 100.0).round() / 100.0,
                "answers": statuses,
                "honest_login_ms_before_max": (max(&before) * 10.0).round() / 10.0,
                "honest_login_ms_during_max": (max(&during) * 10.0).round() / 10.0,
                "rss_mib_before": rss_before / 1024,
                "rss_mib_end_of_flood": rss_flood / 1024,
                "rss_mib_after_settle": rss_after / 1024,
                "settle_secs": settle,
            })
        );
    });
}
