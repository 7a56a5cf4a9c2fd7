//! The transparency log's store (`store::tlog`, PROTOCOL.md §15): the
//! contract every backend keeps, run on sled and on PostgreSQL, and the log
//! moved between them by `store export` / `store import`:
//!
//! - an entry logged more than once is found at the index it was first
//!   given, on both backends;
//! - a moved log is the same tree (head, entries, stored hashes, index),
//!   with the same queue in its order, bound to the same key, and grows
//!   from there exactly as the log it left would have;
//! - an import refuses, before it writes anything, a log the target would
//!   not sign (another key, no key file, a store bound to another key) and
//!   a log that is not whole or not the tree its head signs;
//! - a stream of version 1 (before the log) still imports.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::cheq::{Channel, Decision};
use cheq::confirm::transparency::TransparencyLog;
use cheq::store::cs::{Claim, CsStore, DecisionRecord, Delivery};
use cheq::store::export::{self, ImportError, LineError, LogLineError, TargetLog};
use cheq::store::sled_cs;
use cheq::store::Durability;
use cheq::tlog::tree::leaf_hash;
use cheq::tlog::LogKey;

const ORIGIN: &str = "cs.example/cheq-log";

fn key() -> LogKey {
    LogKey::from_secret(b"the note key secret of the test log, 32+ bytes", ORIGIN).unwrap()
}

fn other_key() -> LogKey {
    LogKey::from_secret(b"another note key secret, also 32 bytes long", ORIGIN).unwrap()
}

fn sled_store() -> (tempfile::TempDir, sled::Db, CsStore) {
    let dir = tempfile::tempdir().unwrap();
    let (db, store) = sled_cs::open_dir(dir.path()).unwrap();
    (dir, db, store)
}

fn pg_store(prefix: &str) -> Option<CsStore> {
    let url = cheq::store::pg::test_database_or_skip(prefix)?;
    Some(cheq::store::pg::cs::open(&cheq::store::pg::Pg::new(&url, 8).unwrap()).unwrap())
}

fn open_log(store: &CsStore) -> TransparencyLog {
    TransparencyLog::open(store.log.clone(), key()).unwrap()
}

/// A decision whose claim queues its log entry (the digest `digest`).
fn decision(nonce: &str, digest: &str) -> DecisionRecord {
    DecisionRecord {
        nonce: nonce.into(),
        user: "alice".into(),
        resource_uri: format!("https://rs.example/cheq/confirmations/{nonce}"),
        resource_origin: "https://rs.example".into(),
        operation: "https://rs.example/op".into(),
        operation_name: "Pay".into(),
        decision: Decision::Accept,
        channel: Channel::Html,
        decided_at: 1_900_000_000,
        expires: 1_900_000_600,
        document: format!(r#"{{"payload":"{nonce}","signatures":[]}}"#),
        delivery: Delivery::Delivered {
            decision: Decision::Accept,
            at: 1_900_000_001,
        },
        sealed: false,
        collected_hmac: Default::default(),
        log_digest: Some(digest.into()),
    }
}

fn index_of(store: &CsStore, entry: &[u8]) -> Option<u64> {
    store.log.index_of(&leaf_hash(entry).0).unwrap()
}

// ---- the contract, for any backend ----

/// A passkey added, removed and added again logs the same entry twice: its
/// index is the first it was given, in one step or in later ones.
fn an_entry_logged_twice_keeps_its_first_index(store: &CsStore) {
    let log = open_log(store);
    let (a, b, c) = (
        b"entry A".as_slice(),
        b"entry B".as_slice(),
        b"entry C".as_slice(),
    );
    store.log.queue(a).unwrap();
    assert_eq!(log.sequence_all(10).unwrap(), 1);
    store.log.queue(b).unwrap();
    store.log.queue(a).unwrap();
    assert_eq!(log.sequence_all(10).unwrap(), 2);
    assert_eq!(index_of(store, a), Some(0), "A again in a later step");
    assert_eq!(index_of(store, b), Some(1));
    // Twice in one step.
    store.log.queue(c).unwrap();
    store.log.queue(b).unwrap();
    store.log.queue(c).unwrap();
    store.log.queue(a).unwrap();
    assert_eq!(log.sequence_all(10).unwrap(), 4);
    assert_eq!(store.log.head().unwrap().unwrap().size, 7);
    assert_eq!(index_of(store, c), Some(3), "C twice in one step");
    assert_eq!(index_of(store, b), Some(1));
    assert_eq!(index_of(store, a), Some(0));
    assert_eq!(index_of(store, b"never logged"), None);
    // Every index holds its entry all the same.
    let entries = store.log.entries(0, 7).unwrap();
    let expected: Vec<&[u8]> = vec![a, b, a, c, b, c, a];
    assert_eq!(entries, expected);
}

#[test]
fn sled_keeps_the_log_contract() {
    let (_dir, _db, store) = sled_store();
    an_entry_logged_twice_keeps_its_first_index(&store);
}

#[test]
fn postgres_keeps_the_log_contract() {
    let Some(store) = pg_store("store_log") else {
        return;
    };
    an_entry_logged_twice_keeps_its_first_index(&store);
}

// ---- moving a log ----

/// Fills `store` with a log: decisions sequenced over several steps (more
/// than one tile and one import batch), one entry logged twice, and
/// decisions still queued. Returns the log.
fn fill(store: &CsStore) -> TransparencyLog {
    let log = open_log(store);
    let mut n = 0;
    for step in [700, 600, 3] {
        for _ in 0..step {
            let d = decision(&format!("n{n}"), &format!("digest-{n}"));
            // Made durable by the sequencing step's flush.
            let claim = store.records.claim_with(&d, Durability::Deferred).unwrap();
            assert_eq!(claim, Claim::Fresh);
            n += 1;
        }
        store.log.queue(b"a passkey entry").unwrap();
        log.sequence_all(10).unwrap();
    }
    assert_eq!(store.log.head().unwrap().unwrap().size, 1306);
    for _ in 0..3 {
        let d = decision(&format!("n{n}"), &format!("digest-{n}"));
        store.records.claim_with(&d, Durability::Deferred).unwrap();
        n += 1;
    }
    assert_eq!(store.log.queued(100).unwrap().len(), 3);
    log
}

fn export_of(store: &CsStore) -> Vec<u8> {
    let mut out = Vec::new();
    export::export_cs(store, &mut out, chrono::Utc::now()).unwrap();
    out
}

/// The key file of the targets these tests name.
const KEY_FILE: &str = "/new/host/data/transparency-log-key.secret";

fn signs_with(key: &LogKey) -> TargetLog {
    TargetLog::Key {
        key: key.verifier_key(),
        file: KEY_FILE.into(),
    }
}

/// Everything a log store holds that a reader sees.
type LogState = (
    Option<cheq::store::tlog::LogHead>,
    Vec<Vec<u8>>,
    Vec<[u8; 32]>,
    Vec<Vec<u8>>,
    Option<String>,
);

fn log_state(store: &CsStore) -> LogState {
    let head = store.log.head().unwrap();
    let size = head.as_ref().map_or(0, |h| h.size);
    let entries = store.log.entries(0, size).unwrap();
    let count = cheq::store::tlog::stored_hash_count(size);
    let hashes = store.log.hashes(&(0..count).collect::<Vec<_>>()).unwrap();
    let queued = store
        .log
        .queued(10_000)
        .unwrap()
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    (
        head,
        entries,
        hashes,
        queued,
        store.log.bound_key().unwrap(),
    )
}

/// Moves the log of `from` into the empty `to`, checks it is the same log,
/// then grows both by the same queue: the same checkpoint, byte for byte.
fn a_log_moves(from: &CsStore, to: &CsStore) {
    let old = fill(from);
    let stream = export_of(from);
    let (header, counts) = export::check(
        &mut stream.as_slice(),
        export::Server::Cs,
        &signs_with(&key()),
    )
    .unwrap();
    assert_eq!(header.version, 2);
    assert_eq!(header.log_key, Some(key().verifier_key()));
    assert_eq!(
        (
            counts.of("log_head"),
            counts.of("log_entry"),
            counts.of("log_queued")
        ),
        (1, 1306, 3)
    );
    let done = export::import_cs(to, &mut stream.as_slice(), &signs_with(&key())).unwrap();
    assert_eq!(done.counts.of("decision"), 1306);

    let before = log_state(from);
    assert_eq!(log_state(to), before, "the same tree, queue and key");
    for i in [0u64, 1, 699, 700, 1305] {
        let entry = &before.1[i as usize];
        assert_eq!(index_of(to, entry), index_of(from, entry), "entry {i}");
    }
    assert_eq!(
        index_of(to, b"a passkey entry"),
        Some(700),
        "its first index"
    );

    // The moved log grows as the old one would have.
    let moved = open_log(to);
    assert_eq!(moved.sequence_all(10).unwrap(), 3);
    assert_eq!(old.sequence_all(10).unwrap(), 3);
    let (a, b) = (
        from.log.head().unwrap().unwrap(),
        to.log.head().unwrap().unwrap(),
    );
    assert_eq!(b.size, 1309);
    assert_eq!(a, b, "the same checkpoint after the move");
    let proof_from = old.inclusion("digest-1305").unwrap().unwrap();
    let proof_to = moved.inclusion("digest-1305").unwrap().unwrap();
    assert_eq!(proof_to.index, 1308);
    assert_eq!(proof_to.proof, proof_from.proof);
}

#[test]
fn a_log_moves_from_sled_to_sled() {
    let (_d1, _db1, from) = sled_store();
    let (_d2, _db2, to) = sled_store();
    a_log_moves(&from, &to);
}

#[test]
fn a_log_moves_from_sled_to_postgresql_and_back() {
    let Some(pg) = pg_store("store_log_to") else {
        return;
    };
    let (_d1, _db1, from) = sled_store();
    a_log_moves(&from, &pg);
    let Some(pg) = pg_store("store_log_from") else {
        return;
    };
    let (_d2, _db2, back) = sled_store();
    a_log_moves(&pg, &back);
}

/// Whether nothing of the import reached `store`.
fn untouched(store: &CsStore) {
    export::ensure_empty_cs(store).unwrap();
    assert_eq!(store.log.bound_key().unwrap(), None, "the log was bound");
}

#[test]
fn a_log_under_a_key_the_target_does_not_sign_with_is_refused_before_writing() {
    let (_d1, _db1, from) = sled_store();
    fill(&from);
    let stream = export_of(&from);
    let (_d2, _db2, to) = sled_store();

    let e = export::import_cs(&to, &mut stream.as_slice(), &signs_with(&other_key())).unwrap_err();
    assert!(matches!(e, ImportError::OtherLogKey { .. }), "{e}");
    assert!(!e.wrote_some());
    assert!(e.to_string().contains(&key().verifier_key()), "{e}");
    // It names the file that must hold the old host's key.
    assert!(
        e.to_string().contains(&format!(
            "the key in {KEY_FILE}: replace {KEY_FILE} with the old host's key file"
        )),
        "{e}"
    );
    assert!(e.to_string().contains("nothing was written"), "{e}");
    untouched(&to);
    // The same, found by the check of a file before the store is opened.
    let e = export::check(
        &mut stream.as_slice(),
        export::Server::Cs,
        &signs_with(&other_key()),
    )
    .unwrap_err();
    assert!(matches!(e, ImportError::OtherLogKey { .. }), "{e}");

    let none = TargetLog::NoKeyFile("/somewhere/transparency-log-key.secret".into());
    let e = export::import_cs(&to, &mut stream.as_slice(), &none).unwrap_err();
    assert!(matches!(e, ImportError::NoLogKey { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("/somewhere/transparency-log-key.secret"),
        "{e}"
    );
    untouched(&to);

    // A store whose log a first start bound to another key.
    TransparencyLog::open(to.log.clone(), other_key()).unwrap();
    let e = export::import_cs(&to, &mut stream.as_slice(), &signs_with(&key())).unwrap_err();
    assert!(matches!(e, ImportError::LogBound { .. }), "{e}");
    assert!(!e.wrote_some());
    export::ensure_empty_cs(&to).unwrap();
    assert_eq!(to.log.head().unwrap().unwrap().size, 0);

    // The right key, into a store whose first start bound that key: moved.
    let (_d3, _db3, started) = sled_store();
    open_log(&started);
    export::import_cs(&started, &mut stream.as_slice(), &signs_with(&key())).unwrap();
    assert_eq!(log_state(&started), log_state(&from));

    // A target with its log off keeps the log as it is.
    let (_d4, _db4, off) = sled_store();
    export::import_cs(&off, &mut stream.as_slice(), &TargetLog::Off).unwrap();
    assert_eq!(log_state(&off), log_state(&from));
}

#[test]
fn a_store_holding_a_log_is_not_empty() {
    let (_d1, _db1, full) = sled_store();
    let log = open_log(&full);
    full.log.queue(b"queued").unwrap();
    let e = export::ensure_empty_cs(&full).unwrap_err();
    assert!(e.to_string().contains("it holds queued log entries"), "{e}");
    log.sequence_all(1).unwrap();
    let e = export::ensure_empty_cs(&full).unwrap_err();
    assert!(
        e.to_string()
            .contains("it holds a transparency log (the first: a tree of 1 entries)"),
        "{e}"
    );
}

/// The lines of a stream, to change.
fn lines(stream: &[u8]) -> Vec<String> {
    String::from_utf8(stream.to_vec())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn joined(lines: &[String]) -> Vec<u8> {
    (lines.join("\n") + "\n").into_bytes()
}

fn checked(lines: &[String]) -> Result<export::Counts, ImportError> {
    export::check(
        &mut joined(lines).as_slice(),
        export::Server::Cs,
        &signs_with(&key()),
    )
    .map(|(_, c)| c)
}

fn first_of(lines: &[String], kind: &str) -> usize {
    lines
        .iter()
        .position(|l| l.contains(&format!("\"kind\":\"{kind}\"")))
        .unwrap()
}

#[test]
fn a_log_that_is_not_whole_or_not_the_signed_tree_is_refused() {
    let (_d1, _db1, from) = sled_store();
    fill(&from);
    let good = lines(&export_of(&from));
    checked(&good).unwrap();
    let head_at = first_of(&good, "log_head");
    let entry_at = first_of(&good, "log_entry");

    // An entry changed: the tree is another.
    let mut changed = good.clone();
    let e: serde_json::Value = serde_json::from_str(&changed[entry_at + 5]).unwrap();
    changed[entry_at + 5] = serde_json::json!({
        "kind": "log_entry",
        "index": e["index"],
        "entry": cheq::sign::b64::encode(b"cheq-decision/v1 forged\n"),
    })
    .to_string();
    let err = checked(&changed).unwrap_err().to_string();
    assert!(
        err.contains("make a tree whose root is not the one its signed head names"),
        "{err}"
    );

    // Two entries swapped.
    let mut swapped = good.clone();
    swapped.swap(entry_at + 1, entry_at + 2);
    let err = checked(&swapped).unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "line {}: the transparency log: the log_entry of index 2, where index 1 comes",
            entry_at + 2
        )),
        "{err}"
    );

    // An entry missing (the end line counts one item fewer).
    let mut cut = good.clone();
    cut.remove(entry_at + 1306 - 1);
    let end = cut.len() - 1;
    let items: u64 = (cut.len() - 2) as u64;
    cut[end] = format!("{{\"kind\":\"end\",\"items\":{items}}}");
    let err = checked(&cut).unwrap_err().to_string();
    assert!(
        err.contains("a log_queued before all 1306 entries of the tree (only 1305 given)"),
        "{err}"
    );

    // A head whose checkpoint another key signed.
    let mut resigned = good.clone();
    let h: serde_json::Value = serde_json::from_str(&resigned[head_at]).unwrap();
    let note = other_key()
        .sign(h["size"].as_u64().unwrap(), &{
            let root: [u8; 32] = cheq::sign::b64::decode(h["root"].as_str().unwrap())
                .unwrap()
                .try_into()
                .unwrap();
            cheq::tlog::Hash(root)
        })
        .unwrap()
        .note;
    resigned[head_at] = serde_json::json!({
        "kind": "log_head",
        "size": h["size"],
        "root": h["root"],
        "checkpoint": String::from_utf8(note).unwrap(),
    })
    .to_string();
    let err = checked(&resigned).unwrap_err().to_string();
    assert!(
        err.contains("the log_head's checkpoint: the checkpoint is not signed by the log's key"),
        "{err}"
    );

    // A head that says another size than its checkpoint.
    let mut bigger = good.clone();
    bigger[head_at] = bigger[head_at].replace("\"size\":1306", "\"size\":1307");
    let err = checked(&bigger).unwrap_err().to_string();
    assert!(
        err.contains("the log_head says a tree of 1307 entries"),
        "{err}"
    );

    // A decision after the log's lines.
    let mut late = good.clone();
    let decision_at = first_of(&good, "decision");
    let d = late.remove(decision_at);
    let end = late.len() - 1;
    late.insert(end, d);
    let err = checked(&late).unwrap_err().to_string();
    assert!(
        err.contains("a decision item after the transparency log's lines"),
        "{err}"
    );

    // Log lines in a stream whose header names no key.
    let mut keyless = good.clone();
    let mut header: serde_json::Value = serde_json::from_str(&keyless[0]).unwrap();
    header.as_object_mut().unwrap().remove("log_key");
    keyless[0] = header.to_string();
    let err = checked(&keyless).unwrap_err();
    assert!(
        matches!(
            &err,
            ImportError::Line {
                cause: LineError::Log(LogLineError::NoKey("log_head")),
                ..
            }
        ),
        "{err}"
    );

    // Cut inside the entries, at the end line: the tree is not whole.
    let mut short = good[..entry_at + 10].to_vec();
    short.push(format!(
        "{{\"kind\":\"end\",\"items\":{}}}",
        short.len() - 1
    ));
    let err = checked(&short).unwrap_err().to_string();
    assert!(
        err.contains("the transparency log holds 10 of the 1306 entries its head names"),
        "{err}"
    );

    // None of these wrote anything where an import read them from a file
    // (checked first); from a stream read once, the first fault stops it
    // before the log's head is set.
    let (_d2, _db2, to) = sled_store();
    let e =
        export::import_cs(&to, &mut joined(&changed).as_slice(), &signs_with(&key())).unwrap_err();
    assert!(e.wrote_some());
    assert!(
        to.log.head().unwrap().is_none(),
        "a head set for a log found wrong"
    );
}

/// A stream of `header` and `items`, with its end line.
fn stream_of(header: &serde_json::Value, items: &[String]) -> Vec<String> {
    let mut lines = vec![header.to_string()];
    lines.extend(items.iter().cloned());
    lines.push(format!("{{\"kind\":\"end\",\"items\":{}}}", items.len()));
    lines
}

/// The import of `lines` into a new store is refused as `expected`, and
/// writes nothing (but the binding of the log to the header's key, where
/// it names one); the check of a file before an import refuses it too.
fn refused_untouched(lines: &[String], expected: fn(&ImportError) -> bool) -> ImportError {
    let e = checked(lines).unwrap_err();
    assert!(expected(&e), "checked: {e}");
    let (_d, _db, to) = sled_store();
    let e = export::import_cs(&to, &mut joined(lines).as_slice(), &signs_with(&key())).unwrap_err();
    assert!(expected(&e), "imported: {e}");
    export::ensure_empty_cs(&to).unwrap();
    assert!(to.log.queued(1).unwrap().is_empty());
    assert_eq!(to.log.head().unwrap(), None);
    let header: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    if header.get("log_key").is_none() || header["version"] == 1 {
        assert_eq!(to.log.bound_key().unwrap(), None, "the log was bound");
    }
    e
}

#[test]
fn log_lines_without_the_key_or_in_version_1_or_out_of_order_are_refused() {
    let (_d1, _db1, from) = sled_store();
    fill(&from);
    let good = lines(&export_of(&from));
    let header: serde_json::Value = serde_json::from_str(&good[0]).unwrap();
    let queued = good[first_of(&good, "log_queued")].clone();
    let head = good[first_of(&good, "log_head")].clone();
    let mut keyless = header.clone();
    keyless.as_object_mut().unwrap().remove("log_key");

    // A keyless stream's queue: refused, not cleared and dropped.
    let e = refused_untouched(&stream_of(&keyless, std::slice::from_ref(&queued)), |e| {
        matches!(
            e,
            ImportError::Line {
                line: 2,
                cause: LineError::Log(LogLineError::NoKey("log_queued")),
            }
        )
    });
    assert!(
        e.to_string().contains(
            "line 2: the transparency log: a log_queued line, and the header names no log key"
        ),
        "{e}"
    );
    // The same after decisions: the check of a file refuses it before
    // any is written.
    let decisions: Vec<String> = good
        .iter()
        .filter(|l| l.contains("\"kind\":\"decision\""))
        .cloned()
        .collect();
    let mut items = decisions.clone();
    items.push(queued.clone());
    let e = checked(&stream_of(&keyless, &items)).unwrap_err();
    assert!(
        matches!(
            &e,
            ImportError::Line {
                cause: LineError::Log(LogLineError::NoKey("log_queued")),
                ..
            }
        ),
        "{e}"
    );

    // A stream of version 1 holds no log line, nor a log key.
    let mut v1 = keyless.clone();
    v1["version"] = 1.into();
    let e = refused_untouched(&stream_of(&v1, std::slice::from_ref(&queued)), |e| {
        matches!(
            e,
            ImportError::Line {
                line: 2,
                cause: LineError::Log(LogLineError::InVersion1("log_queued")),
            }
        )
    });
    assert!(
        e.to_string()
            .contains("a log_queued line in an export of version 1"),
        "{e}"
    );
    let mut items = decisions;
    items.push(head.clone());
    let e = checked(&stream_of(&v1, &items)).unwrap_err();
    assert!(
        matches!(
            &e,
            ImportError::Line {
                cause: LineError::Log(LogLineError::InVersion1("log_head")),
                ..
            }
        ),
        "{e}"
    );
    let mut v1_keyed = header.clone();
    v1_keyed["version"] = 1.into();
    let e = refused_untouched(&stream_of(&v1_keyed, &[]), |e| {
        matches!(
            e,
            ImportError::Header(export::HeaderError::LogKeyInVersion1)
        )
    });
    assert!(
        e.to_string()
            .starts_with("line 1: a log_key in a header of version 1"),
        "{e}"
    );

    // A head after the queue is not taken for a second head.
    let e = refused_untouched(&stream_of(&header, &[queued, head.clone()]), |e| {
        matches!(
            e,
            ImportError::Line {
                line: 3,
                cause: LineError::Log(LogLineError::HeadAfterQueued),
            }
        )
    });
    assert!(
        e.to_string().contains("a log_head after a log_queued line"),
        "{e}"
    );
    refused_untouched(&stream_of(&header, &[head.clone(), head]), |e| {
        matches!(
            e,
            ImportError::Line {
                line: 3,
                cause: LineError::Log(LogLineError::SecondHead),
            }
        )
    });
}

#[test]
fn a_queue_bound_to_no_key_is_not_exported() {
    let (_d, _db, store) = sled_store();
    store.log.queue(b"an entry of a log never opened").unwrap();
    let mut out = Vec::new();
    let e = export::export_cs(&store, &mut out, chrono::Utc::now()).unwrap_err();
    assert!(matches!(e, export::ExportError::QueueWithoutKey), "{e}");
    assert!(out.is_empty(), "a header was written");
    // Once the log is opened (bound), its queue travels with its key.
    open_log(&store);
    let stream = export_of(&store);
    let (header, counts) = export::check(
        &mut stream.as_slice(),
        export::Server::Cs,
        &signs_with(&key()),
    )
    .unwrap();
    assert_eq!(header.log_key, Some(key().verifier_key()));
    assert_eq!((counts.of("log_head"), counts.of("log_queued")), (1, 1));
}

#[test]
fn a_stream_of_version_1_still_imports_and_its_decisions_are_logged_anew() {
    let (_d1, _db1, from) = sled_store();
    fill(&from);
    let v2 = lines(&export_of(&from));
    // What cheq wrote before the log moved: no key, no log lines.
    let mut header: serde_json::Value = serde_json::from_str(&v2[0]).unwrap();
    header["version"] = 1.into();
    header.as_object_mut().unwrap().remove("log_key");
    let mut v1: Vec<String> = vec![header.to_string()];
    v1.extend(
        v2[1..v2.len() - 1]
            .iter()
            .filter(|l| !l.contains("\"kind\":\"log_"))
            .cloned(),
    );
    v1.push(format!("{{\"kind\":\"end\",\"items\":{}}}", v1.len() - 1));
    let (_d2, _db2, to) = sled_store();
    let done = export::import_cs(&to, &mut joined(&v1).as_slice(), &signs_with(&key())).unwrap();
    assert_eq!(done.header.version, 1);
    assert_eq!(done.counts.total(), 1306);
    // Each decision's entry is queued, for a log that begins here.
    assert_eq!(to.log.queued(10_000).unwrap().len(), 1306);
    assert_eq!(to.log.head().unwrap(), None);
    let log = open_log(&to);
    assert_eq!(log.sequence_all(10).unwrap(), 1306);
}

#[test]
fn the_log_survives_a_reopen_after_an_import() {
    let (_d1, _db1, from) = sled_store();
    fill(&from);
    let stream = export_of(&from);
    let dir = tempfile::tempdir().unwrap();
    {
        let (_db, to) = sled_cs::open_dir(dir.path()).unwrap();
        export::import_cs(&to, &mut stream.as_slice(), &signs_with(&key())).unwrap();
    }
    let (_db, reopened) = sled_cs::open_dir(dir.path()).unwrap();
    assert_eq!(log_state(&reopened), log_state(&from));
}

#[test]
fn a_keyed_stream_cut_before_its_log_keeps_its_decisions_queued() {
    let (_d1, _db1, from) = sled_store();
    fill(&from);
    let good = lines(&export_of(&from));
    let header: serde_json::Value = serde_json::from_str(&good[0]).unwrap();
    let decisions: Vec<String> = good[1..good.len() - 1]
        .iter()
        .filter(|l| !l.contains("\"kind\":\"log_"))
        .cloned()
        .collect();
    let (_d2, _db2, to) = sled_store();
    export::import_cs(
        &to,
        &mut joined(&stream_of(&header, &decisions)).as_slice(),
        &signs_with(&key()),
    )
    .unwrap();
    // No decision is lost from the log: each is queued, to be sequenced
    // into a tree that begins here.
    assert_eq!(to.log.queued(10_000).unwrap().len(), 1306);
    assert_eq!(to.log.head().unwrap(), None);
    assert_eq!(open_log(&to).sequence_all(10).unwrap(), 1306);
}
