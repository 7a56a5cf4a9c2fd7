//! Runs one operation of the signing core many times, for instruction counts
//! under `valgrind --tool=callgrind` (deterministic, unlike wall time on a
//! shared machine). `scripts/bench` runs it; see BENCHMARKS.md. The CHEQ is
//! the one `benches/core.rs` measures.
//!
//! usage: instructions raw-countersign|countersign|raw-verify2|verify-decision [N]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

#[path = "../benches/support/fixture.rs"]
mod fixture;

use cheq::sign::{countersign, verify_decision, verify_resource, Decision};
use ed25519_dalek::Signer;
use fixture::Fixture;
use std::hint::black_box;

/// The allocator the `cheq` binary ships with (src/main.rs), so that the
/// counts are those of the servers.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let op = args.get(1).map(String::as_str).unwrap_or("countersign");
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(200);
    let f = Fixture::new();
    let (cs_ctx, rs_ctx) = (f.cs_ctx(), f.rs_ctx());
    let (rs_pub, cs_pub) = (f.dalek_rs.verifying_key(), f.dalek_cs.verifying_key());
    for _ in 0..n {
        match op {
            "raw-countersign" => {
                assert!(rs_pub
                    .verify_strict(black_box(&f.message), &f.rs_sig)
                    .is_ok());
                black_box(f.dalek_cs.sign(black_box(&f.message)));
            }
            "countersign" => {
                let v = verify_resource(black_box(f.signed.as_bytes()), &f.trust, &cs_ctx)
                    .expect("verify");
                black_box(countersign(&v, &f.cs, f.input(), f.now).expect("countersign"));
            }
            "raw-verify2" => {
                assert!(rs_pub
                    .verify_strict(black_box(&f.message), &f.rs_sig)
                    .is_ok());
                assert!(cs_pub
                    .verify_strict(black_box(&f.message), &f.cs_sig)
                    .is_ok());
            }
            "verify-decision" => {
                let d = f.decided.as_bytes();
                let ok = verify_decision(black_box(d), &f.trust, Some(Decision::Accept), &rs_ctx);
                black_box(ok.expect("verify decision"));
            }
            other => {
                eprintln!("unknown operation {other}");
                std::process::exit(2);
            }
        }
    }
}
