//! How memory and disk grow with work: the resident memory of one
//! `cheq demo` (both servers in one process) and the data it keeps on disk,
//! over many complete flows, and with many confirmations left pending.
//!
//! `scripts/bench soak [--postgres]` starts the demo and passes its addresses
//! (`CHEQ_BENCH_CS`, `CHEQ_BENCH_RS`), its process id (`CHEQ_BENCH_PID`, for
//! `VmRSS` from `/proc`), its data directory (`CHEQ_BENCH_DATA`) and, on
//! PostgreSQL, its database (`CHEQ_BENCH_DATABASE_URL`, whose size is read
//! with `pg_database_size`). Then, in order:
//!
//! 1. **pending**: mints `CHEQ_SOAK_PENDING` (default 10,000) CHEQs and opens
//!    each confirmation page (the CS fetches, verifies and keeps it) without
//!    deciding; memory before and after;
//! 2. **soak**: rounds of `CHEQ_SOAK_ROUND` (default 15,000) complete flows up
//!    to `CHEQ_SOAK_FLOWS` (default 90,000), 32 at a time; after each round,
//!    flows/s, memory, and the data on disk per decided confirmation since
//!    the soak began.
//!
//! The last line is one JSON object with the figures BENCHMARKS.md quotes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[path = "support/web.rs"]
mod web;
use web::{flow, login, mint, open, rss_kib};

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_mib(pid: &str) -> f64 {
    rss_kib(pid) as f64 / 1024.0
}

/// Bytes allocated on disk under `dir` (what `du` counts).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// The data the demo keeps: its data directory, plus its PostgreSQL database.
async fn data_bytes(dir: &Path, pg: Option<&tokio_postgres::Client>) -> u64 {
    let mut total = disk_bytes(dir);
    if let Some(pg) = pg {
        if let Ok(row) = pg
            .query_one("SELECT pg_database_size(current_database())", &[])
            .await
        {
            total += row.get::<_, i64>(0).max(0) as u64;
        }
    }
    total
}

/// Runs `f` over `uris`, `concurrency` at a time; returns (ok, failed, seconds).
async fn run_all<F, Fut>(uris: Vec<String>, concurrency: usize, f: F) -> (usize, usize, f64)
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let queue = Arc::new(Mutex::new(uris));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (queue, f) = (queue.clone(), f.clone());
        workers.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0, 0);
            loop {
                let next = queue.lock().ok().and_then(|mut q| q.pop());
                let Some(uri) = next else { break };
                match f(uri).await {
                    Ok(()) => ok += 1,
                    Err(e) => {
                        if failed == 0 {
                            eprintln!("soak: first failure: {e}");
                        }
                        failed += 1
                    }
                }
            }
            (ok, failed)
        }));
    }
    let (mut ok, mut failed) = (0, 0);
    for w in workers {
        if let Ok((o, f)) = w.await {
            ok += o;
            failed += f;
        }
    }
    (ok, failed, started.elapsed().as_secs_f64())
}

fn main() {
    let (Ok(cs), Ok(pid), Ok(data)) = (
        std::env::var("CHEQ_BENCH_CS"),
        std::env::var("CHEQ_BENCH_PID"),
        std::env::var("CHEQ_BENCH_DATA"),
    ) else {
        eprintln!(
            "soak: set CHEQ_BENCH_CS, CHEQ_BENCH_RS, CHEQ_BENCH_PID and CHEQ_BENCH_DATA \
             (scripts/bench soak does); skipping"
        );
        return;
    };
    let data = std::path::PathBuf::from(data);
    let rs = env("CHEQ_BENCH_RS", "http://127.0.0.1:8081");
    let password = env("CHEQ_DEMO_PASSWORD", "");
    let pending_n = env_usize("CHEQ_SOAK_PENDING", 10_000);
    let total = env_usize("CHEQ_SOAK_FLOWS", 90_000);
    let round = env_usize("CHEQ_SOAK_ROUND", 15_000).max(1);
    let concurrency = 32;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let pg = match std::env::var("CHEQ_BENCH_DATABASE_URL") {
            Ok(url) => {
                let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .expect("connect to the demo's database");
                tokio::spawn(conn);
                Some(client)
            }
            Err(_) => None,
        };
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(concurrency * 2)
            .build()
            .expect("client");
        let session = Arc::new(login(&http, &cs, &password).await);
        let started_rss = rss_mib(&pid);

        // 1. Pending confirmations: opened, never decided.
        let uris = mint(&http, &rs, pending_n).await;
        let (opened, failed, secs) = {
            let (http, cs, session) = (http.clone(), cs.clone(), session.clone());
            run_all(uris, concurrency, move |uri| {
                let (http, cs, session) = (http.clone(), cs.clone(), session.clone());
                async move { open(&http, &cs, &session, &uri).await.map(|_| ()) }
            })
            .await
        };
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let pending_rss = rss_mib(&pid);
        println!(
            "pending: {opened} pages opened ({failed} failed) in {secs:.1} s; resident {started_rss:.1} MiB at start, {pending_rss:.1} MiB with {opened} pending"
        );

        // 2. The soak: rounds of complete flows.
        let soak_disk = data_bytes(&data, pg.as_ref()).await;
        let (mut done, mut failed_total) = (0usize, 0usize);
        let mut rounds = Vec::new();
        while done + failed_total < total {
            let n = round.min(total - done - failed_total);
            let uris = mint(&http, &rs, n).await;
            let (http2, cs2, session2) = (http.clone(), cs.clone(), session.clone());
            let (ok, failed, secs) = run_all(uris, concurrency, move |uri| {
                let (http, cs, session) = (http2.clone(), cs2.clone(), session2.clone());
                async move { flow(&http, &cs, &session, &uri).await }
            })
            .await;
            done += ok;
            failed_total += failed;
            let rss = rss_mib(&pid);
            let disk = data_bytes(&data, pg.as_ref()).await;
            let per = disk.saturating_sub(soak_disk) as f64 / done.max(1) as f64;
            println!(
                "round {}: {ok} flows ({failed} failed), {:.0} flows/s; {done} in all; resident {rss:.1} MiB; data {:.1} MiB, {:.0} bytes per decided confirmation",
                rounds.len() + 1,
                ok as f64 / secs,
                disk as f64 / 1048576.0,
                per
            );
            rounds.push(serde_json::json!({
                "flows": done,
                "flows_per_s": (ok as f64 / secs).round(),
                "rss_mib": (rss * 10.0).round() / 10.0,
                "data_mib": (disk as f64 / 104857.6).round() / 10.0,
                "bytes_per_confirmation": per.round(),
            }));
            if ok == 0 {
                break;
            }
        }
        let last = rounds.last().cloned().unwrap_or_default();
        println!(
            "{}",
            serde_json::json!({
                "store": env("CHEQ_BENCH_STORE", "sled"),
                "start_rss_mib": (started_rss * 10.0).round() / 10.0,
                "pending": opened,
                "pending_rss_mib": (pending_rss * 10.0).round() / 10.0,
                "flows": done,
                "failed": failed_total,
                "max_rss_mib": rounds.iter().filter_map(|r| r["rss_mib"].as_f64()).fold(0.0, f64::max),
                "final_rss_mib": last["rss_mib"],
                "bytes_per_confirmation": last["bytes_per_confirmation"],
                "rounds": rounds,
            })
        );
    });
}
