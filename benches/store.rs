//! Durable records per second of the sled replay store (`PROTOCOL.md` §6).
//!
//! Each iteration records one fresh random nonce and returns only once it is
//! flushed. Writers run on 1 and on 8 threads at once; criterion's throughput line
//! ("thrpt", elements/s) is records/s. The store lives in a temporary directory on
//! the disk that holds the system temp dir.

use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use cheq::store::{NonceEntry, NonceStore, RecordOutcome, SledNonceStore};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn record_fresh(store: &SledNonceStore) {
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
fn run(store: &SledNonceStore, threads: u64, iters: u64) -> Duration {
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
        group.bench_function(format!("{threads}_threads"), |b| {
            b.iter_custom(|iters| run(&store, threads, iters));
        });
    }
    group.finish();
}

criterion_group!(benches, durable_records);
criterion_main!(benches);
