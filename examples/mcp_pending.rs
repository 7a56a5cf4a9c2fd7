//! What a pending MCP call costs the bridge (PROTOCOL.md §11): holds
//! `CHEQ_PENDING` pending 2025-11-25 calls (64 per session) against a real
//! reference RS, the test configuration of `cheq::testkit` run in a child
//! process, and prints the CPU time the bridge's process and the RS's spent
//! per pending call per minute, measured from `/proc/<pid>/stat` over
//! `CHEQ_SECS` seconds after `CHEQ_WARMUP` seconds.
//!
//! `cargo run --release --example mcp_pending` (defaults: 640 calls, 60 s
//! measured after 5 s).
#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a failed unwrap is a failed run

use cheq::configfile::ServerConfig as _;
use cheq::mcp::{Bridge, BridgeConfig, Outcome};
use cheq::testkit::LoopbackPair;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const AGENT_SECRET: &str = "bench-agent-secret";
/// The child's environment variable: run the RS of this configuration.
const CHILD: &str = "CHEQ_BENCH_RS_CONFIG";

type Error = Box<dyn std::error::Error>;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// User and system CPU time of process `pid` (`self` for this one), in
/// clock ticks of `/proc` (USER_HZ, 100 a second on Linux).
fn cpu_ticks(pid: &str) -> Result<u64, Error> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').ok_or("no ) in stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5): 12 and 13 here.
    let utime: u64 = fields.get(11).ok_or("no utime")?.parse()?;
    let stime: u64 = fields.get(12).ok_or("no stime")?.parse()?;
    Ok(utime + stime)
}

fn free_port() -> Result<u16, Error> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn flight(price: u64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("flight_number".into(), json!("UA23"));
    m.insert("flight_date".into(), json!("2026-12-08"));
    m.insert("cabin_class".into(), json!("BUSINESS"));
    m.insert("price_usd".into(), json!(price));
    m
}

/// The child: the reference RS of the configuration file `config`.
fn run_rs(config: &str) -> Result<(), Error> {
    let text = std::fs::read_to_string(config)?;
    let config = cheq::resource::RsConfig::from_toml(&text)?;
    actix_web::rt::System::new().block_on(cheq::resource::run(config))?;
    Ok(())
}

/// Kills the RS child when the run ends, however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() -> Result<(), Error> {
    if let Ok(config) = std::env::var(CHILD) {
        return run_rs(&config);
    }
    let (pending, secs, warmup) = (
        env("CHEQ_PENDING", 640),
        env("CHEQ_SECS", 60),
        env("CHEQ_WARMUP", 5),
    );
    let dir = tempfile::tempdir()?;
    let keys = dir.path().join("keys");
    let cs_key = cheq::keyfile::load_or_create_key(&keys.join("cs.jwk"), None, "cs")?;
    let cs_jwks = keys.join("cs.pub.jwks.json");
    std::fs::write(&cs_jwks, json!({"keys": [cs_key.public_jwk()]}).to_string())?;
    let pair = LoopbackPair {
        dir: dir.path().to_owned(),
        rs_port: free_port()?,
        cs_port: free_port()?,
        cs_path: String::new(),
        rs_key: keys.join("rs.jwk"),
        cs_key: keys.join("cs.jwk"),
        rs_jwks: None,
        cs_jwks: Some(cs_jwks),
        cs_secret: "bench-cs-secret".into(),
        agent_id: "agent".into(),
        agent_secret: AGENT_SECRET.into(),
        host: "127.0.0.1".into(),
    };
    let config = dir.path().join("rs.toml");
    std::fs::write(&config, pair.rs_toml()?)?;
    let child = Child(
        std::process::Command::new(std::env::current_exe()?)
            .env(CHILD, &config)
            .stdin(std::process::Stdio::null())
            .spawn()?,
    );
    let rs_pid = child.0.id().to_string();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let rs = pair.rs_url();
        let http = reqwest::Client::new();
        let started = Instant::now();
        while http.get(format!("{rs}/healthz")).send().await.is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err::<(), Error>("the RS did not start".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let bridge = Arc::new(Bridge::new(BridgeConfig {
            rs,
            client_id: "agent".into(),
            secret: AGENT_SECRET.into(),
        })?);
        // The calls, 32 at a time.
        for batch in (0..pending).collect::<Vec<_>>().chunks(32) {
            let mut calls = tokio::task::JoinSet::new();
            for &i in batch {
                let bridge = bridge.clone();
                calls.spawn(async move {
                    let session = format!("session-{}", i / 64);
                    let outcome = bridge
                        .call_in_session(&session, "book_flight", &flight(1_000 + i), None)
                        .await;
                    match outcome {
                        Ok(Outcome::Pending { .. }) => Ok(()),
                        Ok(other) => Err(format!("not pending: {other:?}")),
                        Err(e) => Err(e.to_string()),
                    }
                });
            }
            while let Some(done) = calls.join_next().await {
                done.map_err(|e| e.to_string())??;
            }
        }
        if bridge.pending_count() as u64 != pending {
            return Err(format!("{} pending, not {pending}", bridge.pending_count()).into());
        }
        tokio::time::sleep(Duration::from_secs(warmup)).await;
        let (bridge0, rs0) = (cpu_ticks("self")?, cpu_ticks(&rs_pid)?);
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let (bridge1, rs1) = (cpu_ticks("self")?, cpu_ticks(&rs_pid)?);
        // Ticks are 10 ms; per call per minute.
        let per = |ticks: u64| {
            if pending == 0 {
                0.0
            } else {
                ticks as f64 * 10.0 * 60.0 / secs as f64 / pending as f64
            }
        };
        println!("pending,seconds,bridge_cpu_ms,rs_cpu_ms,bridge_ms_per_call_minute,rs_ms_per_call_minute");
        println!(
            "{pending},{secs},{},{},{:.2},{:.2}",
            (bridge1 - bridge0) * 10,
            (rs1 - rs0) * 10,
            per(bridge1 - bridge0),
            per(rs1 - rs0)
        );
        Ok(())
    })?;
    drop(child);
    Ok(())
}
