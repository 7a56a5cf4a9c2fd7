//! Every fuzz target (`fuzz/targets/`) on every committed seed
//! (`fuzz/seeds/`): the properties the fuzzers check hold on the realistic
//! documents, as part of `cargo test`. The time-bounded runs are
//! `scripts/fuzz check` (stable) and `scripts/fuzz run TARGET SECS`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

#[path = "../fuzz/targets/mod.rs"]
mod targets;

use std::path::PathBuf;

fn seeds(name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(name);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(&f).unwrap();
            (f, bytes)
        })
        .collect()
}

fn replay(name: &str) {
    let target = targets::by_name(name).unwrap();
    let all = seeds(name);
    assert!(all.len() >= 10, "{name}: only {} seeds", all.len());
    for (path, bytes) in all {
        let r = std::panic::catch_unwind(|| target(&bytes));
        assert!(r.is_ok(), "{name} fails on {}", path.display());
    }
}

#[test]
fn json_seeds() {
    replay("json");
}

#[test]
fn uri_seeds() {
    replay("uri");
}

#[test]
fn payload_seeds() {
    replay("payload");
}

#[test]
fn jws_seeds() {
    replay("jws");
}

#[test]
fn signed_seeds() {
    replay("signed");
}

#[test]
fn registry_seeds() {
    replay("registry");
}

/// The seeds are realistic: the signed documents among them verify.
#[test]
fn signed_seed_documents_verify() {
    use cheq::sign::{verify_decision, verify_resource, Context};
    let fx = targets::fixtures::get();
    let ctx = Context::at(targets::fixtures::now());
    let mut resource = 0;
    let mut decided = 0;
    for (path, bytes) in seeds("jws") {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.contains("untrusted") || name.starts_with("broken-") {
            continue;
        }
        if name.starts_with("resource-") || name == "interop-resource_signed.json" {
            verify_resource(&bytes, &fx.trust, &ctx).unwrap_or_else(|e| panic!("{name}: {e}"));
            resource += 1;
        } else {
            verify_decision(&bytes, &fx.trust, None, &ctx)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            decided += 1;
        }
    }
    assert!(resource >= 5 && decided >= 10, "{resource} {decided}");
}

/// STRICT registry property (fuzz/targets/registry.rs): a resource URI whose
/// path leaves the registered prefix once percent-decoded must be refused
/// (PROTOCOL.md §2); `Registry::find` refuses encoded separators and dot
/// segments before any request leaves.
#[test]
fn registry_refuses_encoded_dot_segments() {
    for uri in [
        "https://api.airline.example/cheq/..%2f..%2foauth%2ftoken",
        "https://api.airline.example/cheq/..%5c..%5cadmin",
        "https://rs.example:8443/api/v1/cheq/..%2F..%2Fadmin",
    ] {
        let found = targets::registry::run_strict(uri.as_bytes());
        assert!(found.is_ok(), "{uri}: {}", found.unwrap_err());
    }
}
