//! The on-disk format of cheq's sled databases (vendor/sled/PATCHES.md):
//! a data directory cheq writes opens with sled 0.34.7 as published, which
//! reads every item of every tree, so that a host is never tied to cheq's
//! patched sled; and a directory that an earlier cheq wrote, when it kept
//! splits as links in sled's log, still opens here.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::cheq::{Channel, Decision};
use cheq::store::cs::{Account, Claim, DecisionRecord, Delivery};
use cheq::store::rs::{CheqRecord, CheqState};
use cheq::store::Durability;
use cheq::store::{sled_cs, sled_rs, NonceEntry, RecordOutcome};
use std::path::{Path, PathBuf};

/// FNV-1a over a length (8 bytes, little-endian) and the bytes: the digest
/// `tests/sled_published` prints.
fn fnv(hash: &mut u64, bytes: &[u8]) {
    let len = (bytes.len() as u64).to_le_bytes();
    for b in len.iter().chain(bytes) {
        *hash ^= u64::from(*b);
        *hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
}

/// Every tree of the database at `dir` as `tests/sled_published` prints it
/// (name, items, digest), read with cheq's sled.
fn trees(dir: &Path) -> String {
    let db = cheq::store::sled_config(dir).open().unwrap();
    let mut names = db.tree_names();
    names.sort();
    let mut out = String::new();
    for name in names {
        let tree = db.open_tree(&name).unwrap();
        let mut count = 0u64;
        let mut digest = 0xcbf2_9ce4_8422_2325u64;
        for item in tree.iter() {
            let (k, v) = item.unwrap();
            count += 1;
            fnv(&mut digest, &k);
            fnv(&mut digest, &v);
        }
        out.push_str(&format!(
            "{}\t{count}\t{digest:016x}\n",
            String::from_utf8_lossy(&name)
        ));
    }
    out
}

/// The most leaves of any tree in the database at `dir`: more than one
/// means that its nodes were split.
fn most_leaves(dir: &Path) -> usize {
    let db = cheq::store::sled_config(dir).open().unwrap();
    db.tree_names()
        .iter()
        .map(|n| db.open_tree(n).unwrap().leaf_sizes().unwrap().len())
        .max()
        .unwrap_or(0)
}

/// The target directory this test was built in (its binary is in
/// `<target>/debug/deps/`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .nth(3)
        .map(Path::to_owned)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// Runs `tests/sled_published` (sled 0.34.7 from crates.io, built in a
/// target directory of its own) on the database at `dir`.
fn published_sled(dir: &Path) -> std::process::Output {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sled_published/Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    std::process::Command::new(cargo)
        .args(["run", "--quiet", "--locked", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir().join("sled_published"))
        .arg("--")
        .arg(dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap()
}

fn decision(i: u32) -> DecisionRecord {
    let origin = "https://rs.example";
    let nonce = format!("nonce-{i:06}");
    DecisionRecord {
        resource_uri: format!("{origin}/cheq/confirmations/{nonce}"),
        resource_origin: origin.into(),
        nonce,
        user: format!("user-{}", i % 7),
        operation: format!("{origin}/op"),
        operation_name: "Pay".into(),
        decision: Decision::Accept,
        channel: Channel::Html,
        decided_at: 1_800_000_000 + i64::from(i),
        expires: 1_800_000_600 + i64::from(i),
        document: format!(
            r#"{{"payload":"{i}","signatures":["{}"]}}"#,
            "s".repeat(200)
        ),
        delivery: Delivery::Delivered {
            decision: Decision::Accept,
            at: 1_800_000_001 + i64::from(i),
        },
        sealed: false,
        collected_hmac: Default::default(),
        log_digest: None,
    }
}

#[test]
fn a_database_cheq_writes_opens_with_published_sled() {
    let dir = tempfile::tempdir().unwrap();
    let cs = dir.path().join("cs.sled");
    let rs = dir.path().join("rs.sled");
    {
        let (db, store) = sled_cs::open_dir(&cs).unwrap();
        for i in 0..3000 {
            let claimed = store
                .records
                .claim_with(&decision(i), Durability::Deferred)
                .unwrap();
            assert_eq!(claimed, Claim::Fresh);
        }
        store
            .accounts
            .put(
                &Account {
                    username: "alice".into(),
                    email: None,
                    password_hash: "$argon2id$x".into(),
                    pin_hash: None,
                    external: None,
                    user_handle: None,
                    passkeys: Vec::new(),
                },
                false,
            )
            .unwrap();
        // Old history collected: removals, and a tree of collected keys.
        store.records.collect_decided_before(1_800_000_500).unwrap();
        db.flush().unwrap();
    }
    {
        let (db, store) = sled_rs::open_dir(&rs).unwrap();
        for i in 0..3000u32 {
            let nonce = format!("rs-nonce-{i:06}");
            let entry = NonceEntry {
                digest: [(i % 251) as u8; 32],
                expires_at: 1_800_000_000 + i64::from(i),
                data: b"accept".to_vec(),
            };
            let fresh = store
                .nonces
                .record_with(&nonce, &entry, Durability::Deferred)
                .unwrap();
            assert_eq!(fresh, RecordOutcome::Fresh);
            let record = CheqRecord {
                id: format!("id-{i:06}"),
                result_id: format!("result-{i:06}"),
                resource_uri: format!("https://rs.example/cheq/confirmations/id-{i:06}"),
                nonce,
                expires: 1_800_000_000,
                document: String::new(),
                action: serde_json::Value::Null,
                state: CheqState::Done {
                    decision: Decision::Accept,
                    digest: "ZA".into(),
                    result: Some(serde_json::json!({"n": i})),
                },
            };
            assert!(store
                .records
                .create_with(&record, Durability::Deferred)
                .unwrap());
        }
        db.flush().unwrap();
    }
    for db in [&cs, &rs] {
        assert!(most_leaves(db) > 10, "no splits in {}", db.display());
        let expected = trees(db);
        assert!(expected.lines().count() > 3, "{expected}");
        let out = published_sled(db);
        assert!(
            out.status.success(),
            "published sled 0.34.7 cannot read {}: {}",
            db.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
    }
}

/// `tests/fixtures/sled_split_links` was written by the sled of an earlier
/// cheq, which wrote a split as two links (`Link::ChildSplit`,
/// `Link::ParentSplit`) that published sled refuses as corrupt: key
/// `key-{(i × 7919) mod 600:08}` holds `value-{i}` for i below 600, in a
/// tree `t` of 27 leaves.
#[test]
fn a_database_an_earlier_cheq_wrote_still_opens() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sled_split_links");
    let dir = tempfile::tempdir().unwrap();
    for file in ["conf", "db"] {
        std::fs::copy(fixture.join(file), dir.path().join(file)).unwrap();
    }
    let db = cheq::store::sled_config(dir.path()).open().unwrap();
    let tree = db.open_tree("t").unwrap();
    let mut expected: Vec<(String, String)> = (0..600u64)
        .map(|i| (format!("key-{:08}", (i * 7919) % 600), format!("value-{i}")))
        .collect();
    expected.sort();
    let found: Vec<(String, String)> = tree
        .iter()
        .map(|item| {
            let (k, v) = item.unwrap();
            (
                String::from_utf8(k.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            )
        })
        .collect();
    assert_eq!(found, expected);
    assert!(tree.leaf_sizes().unwrap().len() > 1);
}
