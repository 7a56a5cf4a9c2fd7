//! How the memory of the CS's sled store behaves when `history_days` collects
//! its oldest decisions: writes decisions in rounds, collecting
//! all but the newest `CHEQ_KEEP` after each round once that many are kept,
//! and prints the resident memory and the data directory's size after each
//! round. Without collection
//! (`CHEQ_KEEP=0`) it grows with the decisions kept.
//!
//! `cargo run --release --example history_memory` (`CHEQ_ROUNDS`,
//! `CHEQ_ROUND`, `CHEQ_KEEP` change the run; `CHEQ_DATABASE_URL` runs it on
//! PostgreSQL). Each round also says how long its collection took.
#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::cheq::{Channel, Decision};
use cheq::store::cs::{DecisionRecord, Delivery};
use cheq::store::sled_cs;
use cheq::store::Durability;

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn env(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn disk_mib(dir: &std::path::Path) -> f64 {
    fn walk(p: &std::path::Path) -> u64 {
        std::fs::read_dir(p).map_or(0, |entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => walk(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
    }
    walk(dir) as f64 / (1024.0 * 1024.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (rounds, round, keep) = (
        env("CHEQ_ROUNDS", 12),
        env("CHEQ_ROUND", 25_000),
        env("CHEQ_KEEP", 50_000),
    );
    let dir = tempfile::tempdir()?;
    // sled in a temporary directory, or the database `CHEQ_DATABASE_URL`
    // names (its memory is the database's, not this process's).
    let store = match std::env::var("CHEQ_DATABASE_URL") {
        Ok(url) => {
            let pg = cheq::store::pg::Pg::new(&url, 8)?;
            cheq::store::pg::cs::open(&pg)?
        }
        Err(_) => sled_cs::open_dir(dir.path())?.1,
    };
    // A document of the demo's size, different for each decision.
    let filler: String = (0..2_000)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect();
    let mut t = 0i64;
    println!("round,decisions_written,kept,collected,collect_ms,rss_mib,disk_mib");
    for r in 1..=rounds {
        for _ in 0..round {
            t += 1;
            let nonce = format!("n{t:012}");
            let record = DecisionRecord {
                nonce: nonce.clone(),
                user: format!("user{}", t % 1_000),
                resource_uri: format!("https://rs.example/cheq/confirmations/{nonce}"),
                resource_origin: "https://rs.example".into(),
                operation: "https://rs.example/op".into(),
                operation_name: "Book a flight".into(),
                decision: Decision::Accept,
                channel: Channel::Html,
                decided_at: t,
                expires: t + 600,
                document: format!(r#"{{"payload":"{nonce}{filler}"}}"#),
                delivery: Delivery::Delivered {
                    decision: Decision::Accept,
                    at: t,
                },
                sealed: false,
                collected_hmac: Default::default(),
                log_digest: None,
            };
            store.records.claim_with(&record, Durability::Deferred)?;
        }
        let started = std::time::Instant::now();
        let collected = if keep > 0 && t > keep {
            store.records.collect_decided_before(t - keep + 1)?
        } else {
            0
        };
        let collect_ms = started.elapsed().as_secs_f64() * 1000.0;
        let kept = if keep > 0 { t.min(keep) } else { t };
        println!(
            "{r},{t},{kept},{collected},{collect_ms:.0},{:.1},{:.1}",
            rss_mib(),
            disk_mib(dir.path())
        );
    }
    Ok(())
}
