//! Durable records per second of the replay store (`PROTOCOL.md` §6), on
//! sled and on PostgreSQL in the same run.
//!
//! Each iteration records one fresh random nonce and returns only once it is
//! durable (sled: flushed; PostgreSQL: committed with `synchronous_commit =
//! on`, so concurrent writers share WAL flushes: group commit). Writers run on
//! 1 and on 8 threads at once (and 32 on PostgreSQL); criterion's throughput
//! line ("thrpt", elements/s) is records/s. The sled store lives in a
//! temporary directory on the disk that holds the system temp dir; the
//! PostgreSQL one in a fresh database of `CHEQ_TEST_DATABASE_URL`
//! (`scripts/bench` starts a throwaway server; without it, PostgreSQL is
//! skipped with a note).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use cheq::store::{NonceEntry, NonceStore, RecordOutcome, SledNonceStore};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn record_fresh(store: &dyn NonceStore) {
    let nonce = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>());
    let entry = NonceEntry {
        digest: rand::random(),
        expires_at: 1_900_000_000,
        data: b"accept".to_vec(),
    };
    match store.record(&nonce, &entry) {
        Ok(RecordOutcome::Fresh) => {}
        other => panic!("expected Fresh, got {other:?}"),
    }
}

/// Records `iters` nonces spread over `threads` threads; returns the wall time.
fn run(store: &dyn NonceStore, threads: u64, iters: u64) -> Duration {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let share = iters / threads + u64::from(t < iters % threads);
            scope.spawn(move || {
                for _ in 0..share {
                    record_fresh(store);
                }
            });
        }
    });
    start.elapsed()
}

fn durable_records(c: &mut Criterion) {
    let mut group = c.benchmark_group("store/durable_record");
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    for threads in [1u64, 8] {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SledNonceStore::open(dir.path()).expect("open store");
        group.bench_function(format!("sled_{threads}_threads"), |b| {
            b.iter_custom(|iters| run(&store, threads, iters));
        });
    }
    match cheq::store::pg::test_database("bench_store") {
        Ok(url) => {
            let pg = cheq::store::pg::Pg::new(&url, 40).expect("pool");
            let store = cheq::store::pg::rs::nonces(&pg).expect("schema");
            for threads in [1u64, 8, 32] {
                group.bench_function(format!("postgres_{threads}_threads"), |b| {
                    b.iter_custom(|iters| run(&*store, threads, iters));
                });
            }
        }
        Err(e) => eprintln!("store: PostgreSQL skipped: {e}"),
    }
    group.finish();
}

criterion_group!(benches, durable_records);
criterion_main!(benches);
