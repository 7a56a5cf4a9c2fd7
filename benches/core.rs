//! The signing core against the raw Ed25519 primitive, in the same run
//! (PROTOCOL.md §5).
//!
//! - `countersign`: verify the resource signature and every §5 rule, parse the
//!   payload, sign the confirmation header — beside `raw/verify+sign`
//!   (ed25519-dalek `verify_strict` + `sign` over as many bytes), and its two
//!   halves;
//! - `verify_decision`: both signatures and all rules — beside
//!   `raw/2x_verify` (two `verify_strict`).
//!
//! The CHEQ is a realistic booking (support/fixture.rs). Criterion's "thrpt"
//! line is operations per second.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

#[path = "support/fixture.rs"]
mod fixture;

use cheq::sign::{countersign, verify_decision, verify_resource, Decision};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ed25519_dalek::Signer;
use fixture::Fixture;

fn bench(c: &mut Criterion) {
    let f = Fixture::new();
    println!(
        "payload {} bytes, resource-signed {} bytes, decided {} bytes",
        f.payload_len,
        f.signed.len(),
        f.decided.len()
    );
    let (cs_ctx, rs_ctx) = (f.cs_ctx(), f.rs_ctx());
    let (rs_pub, cs_pub) = (f.dalek_rs.verifying_key(), f.dalek_cs.verifying_key());
    let verified = verify_resource(f.signed.as_bytes(), &f.trust, &cs_ctx).unwrap();

    let mut g = c.benchmark_group("countersign");
    g.throughput(Throughput::Elements(1));
    g.bench_function("raw/verify+sign", |b| {
        b.iter(|| {
            rs_pub
                .verify_strict(black_box(&f.message), &f.rs_sig)
                .unwrap();
            black_box(f.dalek_cs.sign(black_box(&f.message)))
        })
    });
    g.bench_function("cheq/countersign", |b| {
        b.iter(|| {
            let v = verify_resource(black_box(f.signed.as_bytes()), &f.trust, &cs_ctx).unwrap();
            black_box(countersign(&v, &f.cs, f.input(), f.now).unwrap())
        })
    });
    // Its two halves, to see where the time goes.
    g.bench_function("cheq/part_verify_resource", |b| {
        b.iter(|| {
            black_box(verify_resource(black_box(f.signed.as_bytes()), &f.trust, &cs_ctx).unwrap())
        })
    });
    g.bench_function("cheq/part_countersign_only", |b| {
        b.iter(|| black_box(countersign(&verified, &f.cs, f.input(), f.now).unwrap()))
    });
    g.finish();

    let mut g = c.benchmark_group("verify_decision");
    g.throughput(Throughput::Elements(1));
    g.bench_function("raw/2x_verify", |b| {
        b.iter(|| {
            rs_pub
                .verify_strict(black_box(&f.message), &f.rs_sig)
                .unwrap();
            cs_pub
                .verify_strict(black_box(&f.message), &f.cs_sig)
                .unwrap();
        })
    });
    g.bench_function("cheq/verify_decision", |b| {
        b.iter(|| {
            let d = f.decided.as_bytes();
            black_box(
                verify_decision(black_box(d), &f.trust, Some(Decision::Accept), &rs_ctx).unwrap(),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
