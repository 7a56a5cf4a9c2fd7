//! Tests of the sled replay store (`PROTOCOL.md` §6) on real files in temporary
//! directories. No mocks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::store::Durability;
use std::sync::{Arc, Barrier};

use cheq::store::{
    NonceEntry, NonceStore, RecordOutcome, SledNonceStore, StoreError, MAX_DATA_LEN,
};

#[path = "support/crash.rs"]
mod crash;

fn entry(digest: u8, expires_at: i64, data: &[u8]) -> NonceEntry {
    NonceEntry {
        digest: [digest; 32],
        expires_at,
        data: data.to_vec(),
    }
}

fn open(dir: &tempfile::TempDir) -> SledNonceStore {
    SledNonceStore::open(dir.path()).expect("open store")
}

/// The key of the expiry index as documented in `crates/cheq-store/src/sled_store.rs`.
fn index_key(expires_at: i64, nonce: &str) -> Vec<u8> {
    let mut key = (expires_at ^ i64::MIN).to_be_bytes().to_vec();
    key.extend_from_slice(nonce.as_bytes());
    key
}

/// A fresh PostgreSQL nonce store (the same tests run on both backends).
fn pg_store(name: &str) -> Option<Arc<dyn NonceStore>> {
    let url = cheq::store::pg::test_database_or_skip(name)?;
    Some(cheq::store::pg::rs::nonces(&cheq::store::pg::Pg::new(&url, 20).unwrap()).unwrap())
}

#[test]
fn fresh_then_same_as_before_then_conflict() {
    let dir = tempfile::tempdir().unwrap();
    fresh_same_conflict(&open(&dir));
    if let Some(pg) = pg_store("nonce_fresh") {
        fresh_same_conflict(&*pg);
    }
}

/// `record_unflushed` answers as `record` does, and its entry is what the
/// index and collection know (only its flush is left to the caller).
#[test]
fn an_unflushed_record_answers_as_a_durable_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let accept = entry(1, 1_000, b"accept");
    assert_eq!(
        store
            .record_with("n1", &accept, Durability::Deferred)
            .unwrap(),
        RecordOutcome::Fresh
    );
    assert_eq!(store.get("n1").unwrap(), Some(accept.clone()));
    assert_eq!(
        store
            .record_with("n1", &accept, Durability::Deferred)
            .unwrap(),
        RecordOutcome::SameAsBefore(accept.clone())
    );
    assert_eq!(
        store
            .record_with("n1", &entry(2, 1_000, b""), Durability::Deferred)
            .unwrap(),
        RecordOutcome::Conflict(accept.clone())
    );
    assert_eq!(
        store.record("n1", &accept).unwrap(),
        RecordOutcome::SameAsBefore(accept)
    );
    assert!(store
        .record_with("", &entry(1, 1, b""), Durability::Deferred)
        .is_err());
    assert_eq!(store.collect_expired(1_001).unwrap(), 1);
    assert_eq!(store.get("n1").unwrap(), None);
}

fn fresh_same_conflict(store: &dyn NonceStore) {
    let accept = entry(1, 1_900_000_000, b"accept");

    assert_eq!(store.get("n1").unwrap(), None);
    assert_eq!(store.record("n1", &accept).unwrap(), RecordOutcome::Fresh);
    assert_eq!(store.get("n1").unwrap(), Some(accept.clone()));

    // Byte-identical re-delivery: the earlier entry (with its data) comes back,
    // even when the caller's data or expiry differ this time.
    assert_eq!(
        store.record("n1", &accept).unwrap(),
        RecordOutcome::SameAsBefore(accept.clone())
    );
    assert_eq!(
        store.record("n1", &entry(1, 5, b"reject")).unwrap(),
        RecordOutcome::SameAsBefore(accept.clone())
    );

    // Any other document with the same nonce is a conflict; nothing is overwritten.
    assert_eq!(
        store
            .record("n1", &entry(2, 1_900_000_000, b"reject"))
            .unwrap(),
        RecordOutcome::Conflict(accept.clone())
    );
    assert_eq!(store.get("n1").unwrap(), Some(accept));

    // Other nonces are independent.
    assert_eq!(
        store.record("n2", &entry(2, 1, b"")).unwrap(),
        RecordOutcome::Fresh
    );
    assert_eq!(store.get("n2").unwrap(), Some(entry(2, 1, b"")));
}

#[test]
fn input_limits() {
    let dir = tempfile::tempdir().unwrap();
    limits(&open(&dir));
    if let Some(pg) = pg_store("nonce_limits") {
        limits(&*pg);
    }
}

fn limits(store: &dyn NonceStore) {
    let max = entry(1, 10, &vec![0xAA; MAX_DATA_LEN]);
    assert_eq!(store.record("max", &max).unwrap(), RecordOutcome::Fresh);
    assert_eq!(store.get("max").unwrap(), Some(max));

    let too_big = entry(1, 10, &vec![0xAA; MAX_DATA_LEN + 1]);
    assert!(matches!(
        store.record("big", &too_big),
        Err(StoreError::DataTooLarge { len, max }) if len == MAX_DATA_LEN + 1 && max == MAX_DATA_LEN
    ));
    assert_eq!(store.get("big").unwrap(), None);

    assert!(matches!(
        store.record("", &entry(1, 10, b"")),
        Err(StoreError::InvalidNonce { .. })
    ));
    assert!(matches!(
        store.get(&"x".repeat(4097)),
        Err(StoreError::InvalidNonce { .. })
    ));
}

/// Runs `THREADS` concurrent `record`s of the nonce `raced-<round>` and returns
/// the outcomes. `digest_of(i)` is thread `i`'s digest; with `vary_expiry` each
/// thread also has its own `expires_at`.
fn race(
    store: &dyn NonceStore,
    round: usize,
    digest_of: fn(usize) -> u8,
    vary_expiry: bool,
) -> Vec<RecordOutcome> {
    const THREADS: usize = 16;
    let nonce = format!("raced-{round}");
    let barrier = Arc::new(Barrier::new(THREADS));
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (barrier, nonce) = (Arc::clone(&barrier), nonce.clone());
                scope.spawn(move || {
                    let expires_at = 1_900_000_000
                        + if vary_expiry {
                            i64::try_from(i).unwrap()
                        } else {
                            0
                        };
                    let e = entry(digest_of(i), expires_at, format!("t{i}").as_bytes());
                    barrier.wait();
                    store.record(&nonce, &e).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn racing_writers_with_different_digests_get_one_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let store = SledNonceStore::with_db(db.clone(), "replay").unwrap();
    different_digests(&store);
    assert_index_holds_exactly_the_winners(&db, &store);
    if let Some(pg) = pg_store("nonce_race_diff") {
        different_digests(&*pg);
        assert_eq!(pg.collect_expired(2_000_000_000).unwrap(), 20);
    }
}

fn different_digests(store: &dyn NonceStore) {
    for round in 0..20 {
        let outcomes = race(store, round, |i| u8::try_from(i).unwrap(), true);
        let stored = store.get(&format!("raced-{round}")).unwrap().unwrap();
        assert_eq!(
            outcomes
                .iter()
                .filter(|o| **o == RecordOutcome::Fresh)
                .count(),
            1,
            "round {round}: {outcomes:?}"
        );
        for (i, outcome) in outcomes.iter().enumerate() {
            match outcome {
                RecordOutcome::Fresh => assert_eq!(stored.digest, [u8::try_from(i).unwrap(); 32]),
                RecordOutcome::Conflict(e) => assert_eq!(*e, stored),
                other => panic!("round {round}, thread {i}: {other:?}"),
            }
        }
    }
}

/// After the 20 rounds of [`race`]: losers left no index entries behind, and the
/// winners' entries are indexed (collection removes all 20).
fn assert_index_holds_exactly_the_winners(db: &sled::Db, store: &SledNonceStore) {
    let index = db.open_tree("replay.expiry").unwrap();
    assert_eq!(index.len(), 20);
    assert_eq!(store.collect_expired(2_000_000_000).unwrap(), 20);
    assert!(index.is_empty());
}

#[test]
fn racing_writers_with_the_same_digest_get_one_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let store = SledNonceStore::with_db(db.clone(), "replay").unwrap();
    same_digest(&store);
    assert_index_holds_exactly_the_winners(&db, &store);
    if let Some(pg) = pg_store("nonce_race_same") {
        same_digest(&*pg);
        assert_eq!(pg.collect_expired(2_000_000_000).unwrap(), 20);
    }
}

fn same_digest(store: &dyn NonceStore) {
    for round in 0..20 {
        let outcomes = race(store, round, |_| 9, false);
        let stored = store.get(&format!("raced-{round}")).unwrap().unwrap();
        assert_eq!(
            outcomes
                .iter()
                .filter(|o| **o == RecordOutcome::Fresh)
                .count(),
            1,
            "round {round}: {outcomes:?}"
        );
        for outcome in &outcomes {
            match outcome {
                RecordOutcome::Fresh => {}
                RecordOutcome::SameAsBefore(e) => assert_eq!(*e, stored),
                other => panic!("round {round}: {other:?}"),
            }
        }
    }
}

/// `collect_expired(now)` removes exactly the entries with `expires_at < now`.
///
/// Once collected, a nonce can be recorded `Fresh` again. That is acceptable: its
/// CHEQ has expired, and the verifier refuses expired CHEQs (`410`, §6) before it
/// consults the store.
#[test]
fn collect_expired_removes_only_expired_entries() {
    let dir = tempfile::tempdir().unwrap();
    collects(&open(&dir));
    if let Some(pg) = pg_store("nonce_collect") {
        collects(&*pg);
    }
}

fn collects(store: &dyn NonceStore) {
    for (nonce, expires_at) in [("neg", -50), ("a", 100), ("b", 200), ("c", 300), ("z", 100)] {
        assert_eq!(
            store
                .record(nonce, &entry(1, expires_at, b"accept"))
                .unwrap(),
            RecordOutcome::Fresh
        );
    }
    let present = |store: &dyn NonceStore| -> Vec<&str> {
        ["neg", "a", "b", "c", "z"]
            .into_iter()
            .filter(|n| store.get(n).unwrap().is_some())
            .collect()
    };

    assert_eq!(store.collect_expired(-50).unwrap(), 0);
    assert_eq!(store.collect_expired(0).unwrap(), 1);
    assert_eq!(present(store), ["a", "b", "c", "z"]);
    assert_eq!(store.collect_expired(100).unwrap(), 0, "100 is not < 100");
    assert_eq!(store.collect_expired(200).unwrap(), 2);
    assert_eq!(present(store), ["b", "c"]);
    assert_eq!(store.collect_expired(200).unwrap(), 0);
    assert_eq!(store.collect_expired(301).unwrap(), 2);
    assert!(present(store).is_empty());

    // A collected nonce is forgotten: it records Fresh again (see above).
    assert_eq!(
        store.record("a", &entry(2, 100, b"reject")).unwrap(),
        RecordOutcome::Fresh
    );
    assert_eq!(store.get("a").unwrap(), Some(entry(2, 100, b"reject")));
    assert_eq!(store.collect_expired(101).unwrap(), 1);
    assert_eq!(store.get("a").unwrap(), None);
}

/// Index entries left by a crash or a lost race (documented in the module) are
/// dropped by collection without touching live entries.
#[test]
fn collect_expired_tolerates_stale_index_entries() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let store = SledNonceStore::with_db(db.clone(), "replay").unwrap();
    store.record("live", &entry(1, 500, b"accept")).unwrap();
    let index = db.open_tree("replay.expiry").unwrap();
    assert!(index.contains_key(index_key(500, "live")).unwrap());
    // A crash between index insert and swap; a racer that lost with another expiry.
    index.insert(index_key(10, "never-recorded"), &[]).unwrap();
    index.insert(index_key(20, "live"), &[]).unwrap();

    assert_eq!(store.collect_expired(100).unwrap(), 0);
    assert_eq!(store.get("live").unwrap(), Some(entry(1, 500, b"accept")));
    let keys: Vec<_> = index.iter().keys().map(|k| k.unwrap().to_vec()).collect();
    assert_eq!(keys, [index_key(500, "live")]);
    assert_eq!(store.collect_expired(501).unwrap(), 1);
    assert!(index.is_empty());
}

#[test]
fn entries_persist_across_a_clean_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(&dir);
        assert_eq!(
            store
                .record("kept", &entry(3, 1_900_000_000, b"reject"))
                .unwrap(),
            RecordOutcome::Fresh
        );
        store.record("gone", &entry(3, 5, b"")).unwrap();
        assert_eq!(store.collect_expired(6).unwrap(), 1);
    }
    let store = open(&dir);
    assert_eq!(
        store.get("kept").unwrap(),
        Some(entry(3, 1_900_000_000, b"reject"))
    );
    assert_eq!(store.get("gone").unwrap(), None);
    assert_eq!(
        store
            .record("kept", &entry(4, 1_900_000_000, b"accept"))
            .unwrap(),
        RecordOutcome::Conflict(entry(3, 1_900_000_000, b"reject"))
    );
    // The expiry index survived too.
    assert_eq!(store.collect_expired(1_900_000_001).unwrap(), 1);
}

#[test]
fn stores_sharing_a_db_are_independent() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let rs = SledNonceStore::with_db(db.clone(), "rs.nonces").unwrap();
    let cs = SledNonceStore::with_db(db.clone(), "cs.nonces").unwrap();
    let other = db.open_tree("something-else").unwrap();
    other.insert("n", "unrelated").unwrap();

    assert_eq!(
        rs.record("n", &entry(1, 10, b"")).unwrap(),
        RecordOutcome::Fresh
    );
    assert_eq!(
        cs.record("n", &entry(2, 10, b"")).unwrap(),
        RecordOutcome::Fresh
    );
    assert_eq!(rs.collect_expired(11).unwrap(), 1);
    assert_eq!(rs.get("n").unwrap(), None);
    assert_eq!(cs.get("n").unwrap(), Some(entry(2, 10, b"")));
    assert_eq!(other.get("n").unwrap().unwrap(), "unrelated");
}

#[test]
fn a_corrupt_record_is_reported_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let tree = db.open_tree("replay").unwrap();
    tree.insert("garbage", &b"\x01not a record"[..]).unwrap();
    tree.insert("future-version", &[2u8; 45][..]).unwrap();
    tree.insert("empty", &b""[..]).unwrap();
    let store = SledNonceStore::with_db(db.clone(), "replay").unwrap();

    for nonce in ["garbage", "future-version", "empty"] {
        assert!(
            matches!(store.get(nonce), Err(StoreError::Corrupt { ref key, .. }) if key == nonce),
            "{nonce}"
        );
        assert!(matches!(
            store.record(nonce, &entry(1, 10, b"")),
            Err(StoreError::Corrupt { .. })
        ));
    }
    // The corrupt value was not overwritten.
    assert_eq!(
        tree.get("garbage").unwrap().unwrap(),
        &b"\x01not a record"[..]
    );

    // Collection reports the corrupt record, keeps it, and still collects the rest.
    let index = db.open_tree("replay.expiry").unwrap();
    index.insert(index_key(5, "garbage"), &[]).unwrap();
    store.record("expired", &entry(1, 7, b"")).unwrap();
    assert!(matches!(
        store.collect_expired(100),
        Err(StoreError::Corrupt { .. })
    ));
    assert_eq!(store.get("expired").unwrap(), None);
    assert!(tree.contains_key("garbage").unwrap());
}

/// Set in the child process of [`durability_survives_sigkill`] to the store's directory.
const CHILD_DIR_VAR: &str = "CHEQ_STORE_CHILD_DIR";
const KILLED_NONCE: &str = "recorded-then-killed";

/// A nonce for which `record` returned `Fresh` is there after the process is
/// killed with SIGKILL (no destructor, no clean shutdown).
#[test]
fn durability_survives_sigkill() {
    if let Some(dir) = std::env::var_os(CHILD_DIR_VAR) {
        // Child: record, report, and wait to be killed.
        let store = SledNonceStore::open(std::path::Path::new(&dir)).unwrap();
        let outcome = store
            .record(KILLED_NONCE, &entry(0xAB, 1_900_000_000, b"accept"))
            .unwrap();
        assert_eq!(outcome, RecordOutcome::Fresh);
        crash::report_and_wait("RECORDED", KILLED_NONCE);
    }

    let dir = tempfile::tempdir().unwrap();
    let (child, _) = crash::start(
        "durability_survives_sigkill",
        CHILD_DIR_VAR,
        dir.path(),
        "RECORDED",
    );
    crash::kill(child);

    let store = open(&dir);
    let recorded = entry(0xAB, 1_900_000_000, b"accept");
    assert_eq!(store.get(KILLED_NONCE).unwrap(), Some(recorded.clone()));
    assert_eq!(
        store.record(KILLED_NONCE, &recorded).unwrap(),
        RecordOutcome::SameAsBefore(recorded)
    );
}

/// The patched sled writes short log entries in raw zstd frames and longer
/// ones compressed (`vendor/sled/PATCHES.md`): values of every size around
/// the limit, compressible or not, read back the same from the log after a
/// reopen (nothing left in the page cache).
#[test]
fn values_of_every_size_read_back_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let sizes = [
        0, 1, 7, 100, 200, 255, 256, 257, 600, 900, 1000, 1010, 1023, 1024, 1025, 3000, 9000,
        70_000,
    ];
    let mut seed = 0x9e37_79b9_u32;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                seed as u8
            })
            .collect()
    };
    let mut expected = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        expected.push((format!("noise-{i:02}"), noise(n)));
        expected.push((
            format!("text-{i:02}"),
            b"cheq ".repeat(n / 5 + 1)[..n].to_vec(),
        ));
    }
    {
        let db = open_again(dir.path());
        for (k, v) in &expected {
            db.insert(k, v.as_slice()).unwrap();
        }
        // An update of each, so that the log holds deltas beside the nodes.
        for (k, v) in &expected {
            db.insert(k, v.as_slice()).unwrap();
        }
        db.flush().unwrap();
    }
    let conf = std::fs::read(dir.path().join("conf")).unwrap();
    assert!(String::from_utf8_lossy(&conf).contains("use_compression: true"));
    let db = open_again(dir.path());
    assert_eq!(db.len(), expected.len());
    for (k, v) in &expected {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()), "{k}");
    }
}

/// A key of the split tests: `ordered` ones lead with a counter (as the RS's
/// ids lead with the time, so that they land in the rightmost leaf), the
/// others with a hash of it (anywhere in the tree).
fn split_key(writer: u64, i: u64, ordered: bool) -> Vec<u8> {
    let n = writer << 32 | i;
    let lead = if ordered {
        i << 8 | writer
    } else {
        n.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29)
    };
    let mut key = lead.to_be_bytes().to_vec();
    key.extend_from_slice(format!("-{writer}-{i}").as_bytes());
    key
}

fn split_value(key: &[u8]) -> Vec<u8> {
    let len = 40 + (key.iter().map(|&b| b as usize).sum::<usize>() % 700);
    key.iter().cycle().take(len).copied().collect()
}

/// Every key the tree should hold, in order, and what it holds: by `get`
/// of each, by a forward and a backward scan, and by `len`.
fn assert_holds(db: &sled::Db, expected: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in expected {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()), "{k:?}");
    }
    let forward: Vec<(Vec<u8>, Vec<u8>)> = db
        .iter()
        .map(|kv| {
            let (k, v) = kv.unwrap();
            (k.to_vec(), v.to_vec())
        })
        .collect();
    let wanted: Vec<(Vec<u8>, Vec<u8>)> = expected.clone().into_iter().collect();
    assert_eq!(forward.len(), wanted.len());
    assert!(forward == wanted, "a forward scan differs");
    let backward: Vec<Vec<u8>> = db
        .iter()
        .keys()
        .rev()
        .map(|k| k.unwrap().to_vec())
        .collect();
    assert!(
        backward.iter().rev().eq(expected.keys()),
        "a backward scan differs"
    );
    assert_eq!(db.len(), expected.len());
}

/// Splits (in the patched sled, leaves of small entries split later than
/// in sled as published: `vendor/sled/PATCHES.md`). Writers racing on the same leaves (ordered keys all land in the
/// rightmost one) and on random ones, with removals and readers scanning
/// meanwhile, leave every key readable, in order, in memory and after a
/// reopen, where each node is rebuilt from its last full image and the
/// entries after it.
#[test]
fn splits_under_racing_writers_keep_every_key() {
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().unwrap();
    const WRITERS: u64 = 4;
    const PER_WRITER: u64 = 4_000;
    let mut expected = BTreeMap::new();
    {
        let db = open_again(dir.path());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                // At least one scan, however late this thread is scheduled.
                let mut scans = 0;
                loop {
                    let keys: Vec<_> = db.iter().keys().map(|k| k.unwrap()).collect();
                    assert!(keys.windows(2).all(|w| w[0] < w[1]), "a scan out of order");
                    scans += 1;
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                }
                scans
            })
        };
        let barrier = Arc::new(Barrier::new(WRITERS as usize));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (db, barrier) = (db.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let mut kept = Vec::new();
                    for i in 0..PER_WRITER {
                        let ordered = i % 3 != 0;
                        let key = split_key(w, i, ordered);
                        let value = split_value(&key);
                        db.insert(&key, value.as_slice()).unwrap();
                        // Every seventh key goes again, later.
                        if i % 7 == 0 && i > 0 {
                            let gone = split_key(w, i - 7, (i - 7) % 3 != 0);
                            db.remove(&gone).unwrap();
                        }
                        // Removed above, once the key seven on is in.
                        if !(i % 7 == 0 && i + 7 < PER_WRITER) {
                            kept.push((key, value));
                        }
                    }
                    kept
                })
            })
            .collect();
        for writer in writers {
            expected.extend(writer.join().unwrap());
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        assert!(expected.len() > 12_000);
        assert_holds(&db, &expected);
        db.flush().unwrap();
    }
    let db = open_again(dir.path());
    assert_holds(&db, &expected);
    // And on from there: more splits of the nodes rebuilt from the log.
    for i in PER_WRITER..PER_WRITER + 2_000 {
        let key = split_key(WRITERS, i, i % 2 == 0);
        let value = split_value(&key);
        db.insert(&key, value.as_slice()).unwrap();
        expected.insert(key, value);
    }
    db.flush().unwrap();
    drop(db);
    let db = open_again(dir.path());
    assert_holds(&db, &expected);
}

/// Set in the child process of [`splits_survive_sigkill`] to its directory.
const SPLIT_CHILD_VAR: &str = "CHEQ_SPLIT_CHILD_DIR";

/// A process killed with SIGKILL while it splits nodes (it inserts without
/// end, flushing now and then, after it says how many it flushed) leaves a
/// tree that opens, holds every key flushed before, and reads the same by
/// `get`, by scans and by `len`.
#[test]
fn splits_survive_sigkill() {
    const FLUSHED: u64 = 3_500;
    if let Some(dir) = std::env::var_os(SPLIT_CHILD_VAR) {
        let db = cheq::store::sled_config(std::path::Path::new(&dir))
            .open()
            .unwrap();
        for i in 0..FLUSHED {
            let key = split_key(0, i, i % 4 != 0);
            db.insert(&key, split_value(&key)).unwrap();
            if i % 64 == 0 {
                db.flush().unwrap();
            }
        }
        db.flush().unwrap();
        println!("FLUSHED {FLUSHED}");
        let mut i = FLUSHED;
        loop {
            let key = split_key(0, i, !i.is_multiple_of(4));
            db.insert(&key, split_value(&key)).unwrap();
            if i.is_multiple_of(64) {
                db.flush().unwrap();
            }
            i += 1;
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let (child, _) = crash::start(
        "splits_survive_sigkill",
        SPLIT_CHILD_VAR,
        dir.path(),
        "FLUSHED",
    );
    // Killed while it goes on writing, however far it got.
    std::thread::sleep(std::time::Duration::from_millis(200));
    crash::kill(child);

    let db = open_again(dir.path());
    let mut expected = std::collections::BTreeMap::new();
    for (k, _) in db.iter().map(|kv| kv.unwrap()) {
        expected.insert(k.to_vec(), split_value(&k));
    }
    for i in 0..FLUSHED {
        let key = split_key(0, i, i % 4 != 0);
        assert!(expected.contains_key(&key), "flushed key {i} lost");
    }
    assert_holds(&db, &expected);
}

/// Every database is opened at zstd's fast level −1
/// (`cheq::store::SLED_COMPRESSION_LEVEL`), which sled 0.34 refused
/// (`vendor/sled/PATCHES.md`): it opens, still compresses what repeats
/// (records of JSON around the same names) to well under half, and reads
/// back the same after a reopen. A level past the patched bound is refused
/// with an error, not a panic.
#[test]
fn the_fast_zstd_level_still_compresses() {
    const { assert!(cheq::store::SLED_COMPRESSION_LEVEL < 1) };
    let dir = tempfile::tempdir().unwrap();
    let record = |i: u32| {
        format!(
            "{{\"id\":\"{i:08}\",\"state\":\"decided\",\"decision\":\"approve\",\"subject\":\
             \"Transfer {i} EUR to account {i:012}\",\"resource uri\":\"https://rs.example/cheq/{i:08}\"}}"
        )
        .repeat(8)
    };
    let mut raw = 0;
    {
        let db = open_again(dir.path());
        for i in 0..2_000 {
            let value = record(i);
            raw += value.len();
            db.insert(i.to_be_bytes(), value.as_bytes()).unwrap();
        }
        db.flush().unwrap();
    }
    fn size(path: &std::path::Path) -> u64 {
        std::fs::read_dir(path)
            .unwrap()
            .flatten()
            .map(|e| match e.metadata().unwrap() {
                m if m.is_dir() => size(&e.path()),
                m => m.len(),
            })
            .sum()
    }
    let on_disk = size(dir.path());
    let db = open_again(dir.path());
    for i in 0..2_000u32 {
        assert_eq!(
            db.get(i.to_be_bytes()).unwrap().as_deref(),
            Some(record(i).as_bytes())
        );
    }
    assert!(
        on_disk * 2 < raw as u64,
        "{on_disk} bytes on disk for {raw} bytes of records"
    );
    let refused = cheq::store::sled_config(tempfile::tempdir().unwrap().path())
        .compression_factor(-8)
        .open();
    assert!(refused.is_err());
}

/// The patched sled lets a leaf of small entries (an index: a URI to an id,
/// a nonce to its digest) hold up to 32 of them, or 4 KiB of keys and
/// values, before it splits, since it keeps every page's bookkeeping in
/// memory, cached or not; a leaf of larger entries still splits past 16
/// (`vendor/sled/PATCHES.md`). The leaves are rebuilt the same from the log
/// after a reopen.
#[test]
fn leaves_of_small_entries_hold_more_than_leaves_of_large_ones() {
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().unwrap();
    let mut expected = BTreeMap::new();
    let (small_sizes, medium_sizes, large_sizes);
    {
        let db = open_again(dir.path());
        let small = db.open_tree("small").unwrap();
        let medium = db.open_tree("medium").unwrap();
        let large = db.open_tree("large").unwrap();
        for i in 0..2_000u64 {
            let key = split_key(0, i, false);
            small.insert(&key, &i.to_be_bytes()[..]).unwrap();
            medium.insert(&key, vec![7u8; 200]).unwrap();
            large.insert(&key, vec![7u8; 400]).unwrap();
            expected.insert(key, i.to_be_bytes().to_vec());
        }
        small_sizes = small.leaf_sizes().unwrap();
        medium_sizes = medium.leaf_sizes().unwrap();
        large_sizes = large.leaf_sizes().unwrap();
        db.flush().unwrap();
    }
    let mean = |sizes: &[usize]| sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
    for sizes in [&small_sizes, &medium_sizes, &large_sizes] {
        assert_eq!(sizes.iter().sum::<usize>(), 2_000);
    }
    assert!(small_sizes.iter().all(|&n| n <= 33), "{small_sizes:?}");
    // Entries of about 214 bytes: 4 KiB is 19 of them, so a leaf splits
    // once it has 20 (at 2 KiB it split past 16, as large ones do).
    let medium_max = medium_sizes.iter().max().copied().unwrap_or(0);
    assert!((18..=20).contains(&medium_max), "{medium_sizes:?}");
    assert!(large_sizes.iter().all(|&n| n <= 17), "{large_sizes:?}");
    assert!(
        mean(&small_sizes) > 1.5 * mean(&large_sizes),
        "small entries: {:.1} a leaf; large: {:.1}",
        mean(&small_sizes),
        mean(&large_sizes)
    );
    let db = open_again(dir.path());
    let small = db.open_tree("small").unwrap();
    assert_eq!(
        small.leaf_sizes().unwrap(),
        small_sizes,
        "the leaves rebuilt differ"
    );
    let medium = db.open_tree("medium").unwrap();
    assert_eq!(
        medium.leaf_sizes().unwrap(),
        medium_sizes,
        "the medium leaves rebuilt differ"
    );
    let got: BTreeMap<Vec<u8>, Vec<u8>> = small
        .iter()
        .map(|kv| kv.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect();
    assert!(got == expected, "the small tree reads back otherwise");
}

/// Opens the sled database in `dir`, waiting (at most 5 s) for a handle
/// just dropped to let go of the directory's lock: sled's I/O threads may
/// still be writing a sealed buffer of it for a moment.
fn open_again(dir: &std::path::Path) -> sled::Db {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match cheq::store::sled_config(dir).open() {
            Ok(db) => return db,
            Err(e)
                if e.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            Err(e) => panic!("open {}: {e}", dir.display()),
        }
    }
}
