//! The resource server's store (`store::rs`, PROTOCOL.md §6, §7): the
//! contract of its traits, written against the trait objects of an
//! [`RsStore`] so that every backend runs the same checks (today: sled, on
//! real files in temporary directories), then what only a real database can
//! show: reopening keeps everything, and records the RS wrote before the
//! traits existed still read.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::cheq::Decision;
use cheq::store::rs::{CheqRecord, CheqState, Execution, RsStore, Step, Transition};
use cheq::store::Durability;
use cheq::store::{NonceEntry, RecordOutcome, StoreError};
use serde_json::{json, Value};
use std::sync::{Arc, Barrier};
mod pg_raw;

fn record(id: &str, result_id: &str, expires: i64) -> CheqRecord {
    CheqRecord {
        id: id.to_owned(),
        result_id: result_id.to_owned(),
        resource_uri: format!("http://127.0.0.1:8/cheq/confirmations/{id}"),
        nonce: format!("nonce-{id}"),
        expires,
        document: "{}".to_owned(),
        action: json!({"tool": "book_flight"}),
        state: CheqState::Pending,
    }
}

fn decided(digest: &str) -> CheqState {
    CheqState::Decided {
        decision: Decision::Accept,
        digest: digest.to_owned(),
    }
}

fn done(digest: &str, result: Value) -> CheqState {
    CheqState::Done {
        decision: Decision::Accept,
        digest: digest.to_owned(),
        result: Some(result),
    }
}

// ---- the contract, for any backend ----

fn records_insert_if_absent(store: &RsStore) {
    let r = record("a", "ra", 100);
    assert!(store.records.create(&r).unwrap());
    assert_eq!(store.records.get("a").unwrap(), Some(r.clone()));
    assert_eq!(store.records.by_result("ra").unwrap(), Some(r.clone()));
    assert_eq!(store.records.get("nobody").unwrap(), None);
    assert_eq!(store.records.by_result("nothing").unwrap(), None);

    // The same id, or the same result id, is refused and changes nothing.
    assert!(!store.records.create(&record("a", "rb", 200)).unwrap());
    assert!(!store.records.create(&record("b", "ra", 200)).unwrap());
    assert_eq!(store.records.get("a").unwrap(), Some(r.clone()));
    assert_eq!(store.records.by_result("ra").unwrap(), Some(r));
    assert_eq!(store.records.get("b").unwrap(), None);
    assert_eq!(store.records.by_result("rb").unwrap(), None);
}

fn records_advance_by_compare_and_set(store: &RsStore) {
    let r = record("c", "rc", 100);
    assert!(store.records.create(&r).unwrap());
    let step2 = decided("d1");
    assert_eq!(
        store
            .records
            .advance(
                Step {
                    id: "c",
                    from: &CheqState::Pending,
                    to: &step2
                },
                Durability::Deferred
            )
            .unwrap(),
        Transition::Moved
    );
    // A second writer that read `pending` loses, and is told what won.
    match store
        .records
        .advance(
            Step {
                id: "c",
                from: &CheqState::Pending,
                to: &decided("d2"),
            },
            Durability::Deferred,
        )
        .unwrap()
    {
        Transition::Other(now) => assert_eq!(now.state, step2),
        other => panic!("expected Other, got {other:?}"),
    }
    // Once decided, the document is dropped (it is no longer served: §3
    // answers 410); the action is kept (the operation has yet to run).
    let mid = store.records.get("c").unwrap().unwrap();
    assert_eq!((mid.document.as_str(), &mid.action), ("", &r.action));
    let step4 = done("d1", json!({"ok": true}));
    assert_eq!(
        store
            .records
            .advance(
                Step {
                    id: "c",
                    from: &step2,
                    to: &step4
                },
                Durability::Now
            )
            .unwrap(),
        Transition::Moved
    );
    let now = store.records.get("c").unwrap().unwrap();
    assert_eq!(now.state, step4);
    // Once done, the document and the action are dropped (issue 13); every
    // other member is kept, and the index still finds it.
    assert_eq!((now.document.as_str(), &now.action), ("", &Value::Null));
    assert_eq!(
        CheqRecord {
            state: r.state.clone(),
            document: r.document.clone(),
            action: r.action.clone(),
            ..now.clone()
        },
        r
    );
    assert_eq!(store.records.by_result("rc").unwrap(), Some(now));
    assert_eq!(
        store
            .records
            .advance(
                Step {
                    id: "missing",
                    from: &CheqState::Pending,
                    to: &step2
                },
                Durability::Now
            )
            .unwrap(),
        Transition::Missing
    );
}

/// `advance_record`: the same compare-and-set, from the record as read.
fn records_advance_a_record_as_read(store: &RsStore) {
    let r = record("ar", "rar", 100);
    assert!(store.records.create(&r).unwrap());
    let read = store.records.get("ar").unwrap().unwrap();
    let step2 = decided("e1");
    assert_eq!(
        store
            .records
            .advance_record(&read, &step2, Durability::Deferred)
            .unwrap(),
        Transition::Moved
    );
    let mid = store.records.get("ar").unwrap().unwrap();
    assert_eq!(mid.state, step2);
    assert_eq!((mid.document.as_str(), &mid.action), ("", &r.action));
    // The record as read before has moved on: nothing is written, and the
    // caller is told what is stored now.
    match store
        .records
        .advance_record(&read, &decided("e2"), Durability::Deferred)
        .unwrap()
    {
        Transition::Other(now) => assert_eq!(*now, mid),
        other => panic!("expected Other, got {other:?}"),
    }
    assert_eq!(store.records.get("ar").unwrap().unwrap(), mid);
    let step4 = done("e1", json!({"n": 1}));
    assert_eq!(
        store
            .records
            .advance_record(&mid, &step4, Durability::Now)
            .unwrap(),
        Transition::Moved
    );
    let now = store.records.get("ar").unwrap().unwrap();
    assert_eq!((&now.state, &now.action), (&step4, &Value::Null));
    assert_eq!(store.records.by_result("rar").unwrap(), Some(now.clone()));
    // A stale copy of a done record moves nothing.
    match store
        .records
        .advance_record(&mid, &step4, Durability::Now)
        .unwrap()
    {
        Transition::Other(stored) => assert_eq!(*stored, now),
        other => panic!("expected Other, got {other:?}"),
    }
    assert_eq!(
        store
            .records
            .advance_record(&record("gone", "rgone", 100), &step2, Durability::Now)
            .unwrap(),
        Transition::Missing
    );
}

fn records_advance_once_under_contention(store: &RsStore) {
    assert!(store.records.create(&record("race", "rrace", 100)).unwrap());
    let threads = 8;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let store = store.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                store
                    .records
                    .advance(
                        Step {
                            id: "race",
                            from: &CheqState::Pending,
                            to: &decided(&format!("d{i}")),
                        },
                        Durability::Deferred,
                    )
                    .unwrap()
            })
        })
        .collect();
    let moved = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|t| *t == Transition::Moved)
        .count();
    assert_eq!(moved, 1);
}

fn records_collect_by_cutoff(store: &RsStore) {
    for (id, expires) in [("old", 10), ("edge", 50), ("new", 90)] {
        assert!(store
            .records
            .create(&record(id, &format!("r{id}"), expires))
            .unwrap());
    }
    assert_eq!(store.records.collect_expired(50).unwrap(), 1);
    assert_eq!(store.records.get("old").unwrap(), None);
    assert_eq!(store.records.by_result("rold").unwrap(), None);
    assert!(store.records.get("edge").unwrap().is_some());
    assert!(store.records.by_result("redge").unwrap().is_some());
    assert_eq!(store.records.collect_expired(50).unwrap(), 0);
    assert_eq!(store.records.collect_expired(91).unwrap(), 2);
    assert_eq!(store.records.get("new").unwrap(), None);
    // A collected id can be minted again.
    assert!(store.records.create(&record("old", "rold", 200)).unwrap());
}

fn executions_once_per_key(store: &RsStore) {
    assert_eq!(store.executions.get("k").unwrap(), None);
    let first = json!({"output_parameters": [{"name": "status", "value": "DONE"}]});
    assert_eq!(
        store.executions.record("k", &first).unwrap(),
        Execution::Fresh
    );
    assert_eq!(
        store.executions.record("k", &json!("second")).unwrap(),
        Execution::Existing(first.clone())
    );
    assert_eq!(store.executions.get("k").unwrap(), Some(first));

    let threads = 8;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let store = store.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                store.executions.record("contended", &json!(i)).unwrap()
            })
        })
        .collect();
    let outcomes: Vec<Execution> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == Execution::Fresh).count(),
        1
    );
    let winner = store.executions.get("contended").unwrap().unwrap();
    for o in outcomes {
        if let Execution::Existing(v) = o {
            assert_eq!(v, winner);
        }
    }
}

fn nonces_in_the_bundle(store: &RsStore) {
    let entry = NonceEntry {
        digest: [1; 32],
        expires_at: 100,
        data: b"accept".to_vec(),
    };
    assert_eq!(
        store.nonces.record("n", &entry).unwrap(),
        RecordOutcome::Fresh
    );
    assert!(matches!(
        store.nonces.record("n", &entry).unwrap(),
        RecordOutcome::SameAsBefore(_)
    ));
    let other = NonceEntry {
        digest: [2; 32],
        ..entry.clone()
    };
    assert_eq!(
        store.nonces.record("n", &other).unwrap(),
        RecordOutcome::Conflict(entry)
    );
    assert_eq!(store.nonces.collect_expired(101).unwrap(), 1);
    assert_eq!(store.nonces.get("n").unwrap(), None);
}

fn assertions_once_until_collected(store: &RsStore) {
    const CS: &str = "https://cs.example";
    let a = store.assertions.as_ref();
    assert!(a.first_use(CS, "jti-one", 100).unwrap());
    assert!(!a.first_use(CS, "jti-one", 100).unwrap());
    // Later uses are refused whatever expiry they claim.
    assert!(!a.first_use(CS, "jti-one", 500).unwrap());
    // Another CS's assertion of the same jti is its own.
    assert!(a
        .first_use("https://other.example", "jti-one", 100)
        .unwrap());
    // Concurrent first uses of one jti: one wins.
    let threads = 8;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let store = store.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                store.assertions.first_use(CS, "contended", 300).unwrap()
            })
        })
        .collect();
    let firsts = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|first| *first)
        .count();
    assert_eq!(firsts, 1);
    // Collection takes what expired before `now`, and only that.
    assert_eq!(a.collect_expired(100).unwrap(), 0);
    assert_eq!(a.collect_expired(101).unwrap(), 2);
    assert!(!a.first_use(CS, "contended", 300).unwrap());
    assert!(a.first_use(CS, "jti-one", 200).unwrap());
    assert_eq!(a.collect_expired(1_000).unwrap(), 2);
}

/// Everything a backend must do, on one fresh store.
fn contract(store: &RsStore) {
    records_insert_if_absent(store);
    records_advance_by_compare_and_set(store);
    records_advance_a_record_as_read(store);
    records_advance_once_under_contention(store);
    records_collect_by_cutoff(store);
    executions_once_per_key(store);
    nonces_in_the_bundle(store);
    assertions_once_until_collected(store);
}

// ---- sled ----

#[test]
fn sled_meets_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, store) = cheq::store::sled_rs::open_dir(dir.path()).unwrap();
    contract(&store);
}

#[test]
fn sled_keeps_everything_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let r = record("x", "rx", 100);
    let step4 = done("dx", json!({"booking_reference": "ABCD"}));
    {
        let (db, store) = cheq::store::sled_rs::open_dir(dir.path()).unwrap();
        assert!(store.records.create(&r).unwrap());
        assert!(store.records.create(&record("y", "ry", 100)).unwrap());
        store
            .records
            .advance(
                Step {
                    id: "x",
                    from: &CheqState::Pending,
                    to: &decided("dx"),
                },
                Durability::Deferred,
            )
            .unwrap();
        store
            .records
            .advance(
                Step {
                    id: "x",
                    from: &decided("dx"),
                    to: &step4,
                },
                Durability::Now,
            )
            .unwrap();
        store.executions.record("x", &json!("ran")).unwrap();
        let entry = NonceEntry {
            digest: [3; 32],
            expires_at: 100,
            data: b"accept".to_vec(),
        };
        store.nonces.record("nonce-x", &entry).unwrap();
        drop(store);
        drop(db);
    }
    let (_db, store) = reopen(dir.path());
    let x = store.records.by_result("rx").unwrap().unwrap();
    assert_eq!(x.state, step4);
    assert_eq!(x.id, "x");
    assert_eq!(
        store.records.get("y").unwrap().unwrap().state,
        CheqState::Pending
    );
    assert_eq!(store.executions.get("x").unwrap(), Some(json!("ran")));
    assert_eq!(
        store.nonces.get("nonce-x").unwrap().unwrap().data,
        b"accept".to_vec()
    );
}

/// sled may take a moment to release its lock after the last handle goes.
fn reopen(dir: &std::path::Path) -> (sled::Db, RsStore) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match cheq::store::sled_rs::open_dir(dir) {
            Ok(opened) => return opened,
            Err(e) => {
                assert!(std::time::Instant::now() < deadline, "reopen: {e}");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
}

#[test]
fn sled_reads_what_the_rs_wrote_before_the_traits() {
    // The trees and JSON values the RS wrote with its own sled code.
    let dir = tempfile::tempdir().unwrap();
    {
        let db = sled::open(dir.path()).unwrap();
        let old = json!({
            "id": "old", "result_id": "rold", "resource_uri": "u", "nonce": "n",
            "expires": 5, "document": "d", "action": {"tool": "transfer_funds"},
            "state": "done", "decision": "reject", "digest": "g"
        });
        db.open_tree("rs.confirmations")
            .unwrap()
            .insert("old", serde_json::to_vec(&old).unwrap())
            .unwrap();
        db.open_tree("rs.results")
            .unwrap()
            .insert("rold", "old")
            .unwrap();
        db.open_tree("rs.executions")
            .unwrap()
            .insert("k", serde_json::to_vec(&json!({"a": 1})).unwrap())
            .unwrap();
        db.flush().unwrap();
    }
    let (db, store) = reopen(dir.path());
    let r = store.records.by_result("rold").unwrap().unwrap();
    assert_eq!(
        r.state,
        CheqState::Done {
            decision: Decision::Reject,
            digest: "g".into(),
            result: None
        }
    );
    assert_eq!(store.executions.get("k").unwrap(), Some(json!({"a": 1})));
    // An unreadable record is an error, never a guess; collection leaves it.
    db.open_tree("rs.confirmations")
        .unwrap()
        .insert("bad", &b"{not json"[..])
        .unwrap();
    assert!(matches!(
        store.records.get("bad"),
        Err(cheq::store::StoreError::Corrupt { .. })
    ));
    assert_eq!(store.records.collect_expired(i64::MAX).unwrap(), 1);
    assert!(store.records.get("bad").is_err());
}

/// A document like the RS serves: base64url, most of it.
fn signed_document() -> String {
    format!(
        r#"{{"payload":"{}","signatures":[{{"protected":"eyJhbGciOiJFZERTQSJ9","signature":"{}"}}]}}"#,
        "eyJ2ZXJzaW9uIjogIjEuMCJ9".repeat(40),
        "A".repeat(86)
    )
}

/// sled keeps a served CHEQ's document packed apart from the record, and
/// drops it once the CHEQ is decided; a record stored as JSON with its
/// document (before packing) still reads and moves on; a damaged packed
/// document is an error, never another document.
#[test]
fn sled_packs_the_document_while_the_cheq_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let (db, store) = cheq::store::sled_rs::open_dir(dir.path()).unwrap();
    let t = db.open_tree("rs.confirmations").unwrap();
    let mut r = record("p1", "rp1", 100);
    r.document = signed_document();
    assert!(store.records.create(&r).unwrap());
    let stored = t.get("p1").unwrap().unwrap();
    assert_eq!(stored[0], 0xC2);
    assert!(
        stored.len() < r.document.len(),
        "{} bytes for a {}-byte document",
        stored.len(),
        r.document.len()
    );
    assert_eq!(store.records.get("p1").unwrap().unwrap(), r);
    assert_eq!(store.records.by_result("rp1").unwrap().unwrap(), r);

    assert_eq!(
        store
            .records
            .advance(
                Step {
                    id: "p1",
                    from: &CheqState::Pending,
                    to: &decided("g")
                },
                Durability::Now
            )
            .unwrap(),
        Transition::Moved
    );
    let now = store.records.get("p1").unwrap().unwrap();
    assert_eq!((now.document.as_str(), now.state), ("", decided("g")));
    assert_eq!(
        t.get("p1").unwrap().unwrap()[0],
        b'{',
        "a decided record is JSON alone"
    );
    store
        .records
        .advance(
            Step {
                id: "p1",
                from: &decided("g"),
                to: &done("g", json!({"ok": true})),
            },
            Durability::Now,
        )
        .unwrap();
    let stored = t.get("p1").unwrap().unwrap();
    assert_eq!(stored[0], b'{', "a done record is JSON alone");
    assert!(store
        .records
        .get("p1")
        .unwrap()
        .unwrap()
        .document
        .is_empty());

    // The layout before: JSON with the document in it.
    let mut old = record("p2", "rp2", 100);
    old.document = signed_document();
    t.insert("p2", serde_json::to_vec(&old).unwrap()).unwrap();
    assert_eq!(store.records.get("p2").unwrap().unwrap(), old);
    store
        .records
        .advance(
            Step {
                id: "p2",
                from: &CheqState::Pending,
                to: &decided("h"),
            },
            Durability::Now,
        )
        .unwrap();
    assert_eq!(t.get("p2").unwrap().unwrap()[0], b'{');
    assert!(store
        .records
        .get("p2")
        .unwrap()
        .unwrap()
        .document
        .is_empty());

    // Damaged: the packed document, and a value cut inside its header.
    let mut p3 = record("p3", "rp3", 100);
    p3.document = signed_document();
    assert!(store.records.create(&p3).unwrap());
    let mut damaged = t.get("p3").unwrap().unwrap().to_vec();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    t.insert("p2", damaged).unwrap();
    assert!(matches!(
        store.records.get("p2"),
        Err(StoreError::Corrupt { .. })
    ));
    t.insert("p2", &[0xC2u8, 9, 0][..]).unwrap();
    assert!(matches!(
        store.records.get("p2"),
        Err(StoreError::Corrupt { .. })
    ));
    t.insert("p2", &[0xC2u8, 200, 0, 0, 0, b'{'][..]).unwrap();
    assert!(matches!(
        store.records.get("p2"),
        Err(StoreError::Corrupt { .. })
    ));
}

// ---- PostgreSQL ----

#[test]
fn postgres_meets_the_contract() {
    let Some(url) = cheq::store::pg::test_database_or_skip("store_rs") else {
        return;
    };
    let store = cheq::store::pg::rs::open(&cheq::store::pg::Pg::new(&url, 16).unwrap()).unwrap();
    contract(&store);
}

#[test]
fn postgres_keeps_everything_across_a_reopen() {
    let Some(url) = cheq::store::pg::test_database_or_skip("store_rs_reopen") else {
        return;
    };
    let r = record("x", "rx", 100);
    let step4 = done("dx", json!({"booking_reference": "ABCD"}));
    {
        let store = cheq::store::pg::rs::open(&cheq::store::pg::Pg::new(&url, 2).unwrap()).unwrap();
        assert!(store.records.create(&r).unwrap());
        store
            .records
            .advance(
                Step {
                    id: "x",
                    from: &CheqState::Pending,
                    to: &decided("dx"),
                },
                Durability::Deferred,
            )
            .unwrap();
        store
            .records
            .advance(
                Step {
                    id: "x",
                    from: &decided("dx"),
                    to: &step4,
                },
                Durability::Now,
            )
            .unwrap();
        store.executions.record("x", &json!("ran")).unwrap();
    }
    let store = cheq::store::pg::rs::open(&cheq::store::pg::Pg::new(&url, 2).unwrap()).unwrap();
    assert_eq!(store.records.by_result("rx").unwrap().unwrap().state, step4);
    assert_eq!(store.executions.get("x").unwrap(), Some(json!("ran")));
}

#[test]
fn postgres_cs_and_rs_tables_share_one_database() {
    let Some(url) = cheq::store::pg::test_database_or_skip("store_shared") else {
        return;
    };
    let pg = cheq::store::pg::Pg::new(&url, 4).unwrap();
    let rs = cheq::store::pg::rs::open(&pg).unwrap();
    let _cs = cheq::store::pg::cs::open(&pg).unwrap();
    assert!(rs.records.create(&record("x", "rx", 100)).unwrap());
    assert_eq!(
        cheq::store::pg::applied(&pg, "cs").unwrap(),
        cheq::store::pg::cs::MIGRATIONS
            .iter()
            .map(|m| m.version)
            .collect::<Vec<_>>()
    );
    assert_eq!(
        cheq::store::pg::applied(&pg, "rs").unwrap(),
        vec![1, 2, 3, 4]
    );
}

/// One statement for many records answers each as it would have been
/// answered alone: fresh once per nonce (the first of a nonce given twice),
/// otherwise the entry found; an invalid item is refused alone.
/// PostgreSQL keeps a served CHEQ's document packed, apart from the
/// record's JSON, and drops it once the CHEQ is decided; a row written before (the document in the body)
/// reads and moves on; a damaged packed value is an error.
#[test]
fn postgres_packs_the_document_while_the_cheq_is_served() {
    let Some((pg, rt, client)) = pg_raw::fresh("store_rs_packed") else {
        return;
    };
    pg.migrate("rs", &cheq::store::pg::rs::MIGRATIONS[..1])
        .unwrap();
    // A row as the RS wrote it before packing: the document in the body,
    // the state's JSON in the state column.
    let row_of_before = |id: &str| {
        let mut old = record(id, &format!("r{id}"), 100);
        old.document = signed_document();
        rt.block_on(client.execute(
            "INSERT INTO rs_cheqs (id, result_id, expires, state, body)
             VALUES ($1, $2, 100, $3, $4)",
            &[
                &old.id,
                &old.result_id,
                &serde_json::to_string(&old.state).unwrap(),
                &serde_json::to_string(&old).unwrap(),
            ],
        ))
        .unwrap();
        old
    };
    let old = row_of_before("pgo");
    let store = cheq::store::pg::rs::open(&pg).unwrap();
    let row = |id: &str| -> (String, Option<Vec<u8>>) {
        let r = rt
            .block_on(client.query_one("SELECT body, packed FROM rs_cheqs WHERE id = $1", &[&id]))
            .unwrap();
        (r.get(0), r.get(1))
    };

    let mut r = record("pgp", "rpgp", 100);
    r.document = signed_document();
    assert!(store.records.create(&r).unwrap());
    let (body, packed) = row("pgp");
    assert!(!body.contains("signatures"), "{body}");
    let packed = packed.expect("packed");
    assert!(
        packed.len() * 2 < r.document.len(),
        "{} bytes",
        packed.len()
    );
    assert_eq!(cheq::store::packed::unpack(&packed).unwrap(), r.document);
    assert_eq!(store.records.get("pgp").unwrap().unwrap(), r);
    assert_eq!(store.records.by_result("rpgp").unwrap().unwrap(), r);

    store
        .records
        .advance(
            Step {
                id: "pgp",
                from: &CheqState::Pending,
                to: &decided("g"),
            },
            Durability::Now,
        )
        .unwrap();
    let (body, packed) = row("pgp");
    assert_eq!(packed, None, "a decided CHEQ keeps its document");
    // The state column is a tag for compare-and-set, not a second copy of
    // the state (a done one carries the result).
    let state_column = |id: &str| -> String {
        rt.block_on(client.query_one("SELECT state FROM rs_cheqs WHERE id = $1", &[&id]))
            .unwrap()
            .get(0)
    };
    assert_eq!(state_column("pgp").len(), 43);
    assert!(!body.contains("signatures"), "{body}");
    store
        .records
        .advance(
            Step {
                id: "pgp",
                from: &decided("g"),
                to: &done("g", json!({"ok": 1})),
            },
            Durability::Now,
        )
        .unwrap();
    assert!(store
        .records
        .get("pgp")
        .unwrap()
        .unwrap()
        .document
        .is_empty());
    assert_eq!(state_column("pgp").len(), 43);

    // The row of before (its state column holds the state's JSON).
    assert_eq!(store.records.get("pgo").unwrap().unwrap(), old);
    store
        .records
        .advance(
            Step {
                id: "pgo",
                from: &CheqState::Pending,
                to: &decided("h"),
            },
            Durability::Now,
        )
        .unwrap();
    let now = store.records.get("pgo").unwrap().unwrap();
    assert_eq!((now.document.as_str(), now.state), ("", decided("h")));
    let (body, packed) = row("pgo");
    assert!(packed.is_none() && !body.contains("signatures"), "{body}");
    // So does one moved from the record as read: its state column holds
    // the state's JSON, not a tag, and the move falls back to reading it.
    let older = row_of_before("pgq");
    let read = store.records.get("pgq").unwrap().unwrap();
    assert_eq!(read, older);
    assert_eq!(
        store
            .records
            .advance_record(&read, &decided("q"), Durability::Now)
            .unwrap(),
        Transition::Moved
    );
    let now = store.records.get("pgq").unwrap().unwrap();
    assert_eq!((now.document.as_str(), &now.state), ("", &decided("q")));
    assert_eq!(state_column("pgq").len(), 43);

    // A damaged packed value.
    let mut d = record("pgd", "rpgd", 100);
    d.document = signed_document();
    store.records.create(&d).unwrap();
    rt.block_on(client.execute(
        "UPDATE rs_cheqs SET packed = overlay(packed placing '\\x00'::bytea from 9) WHERE id = 'pgd'",
        &[],
    ))
    .unwrap();
    assert!(matches!(
        store.records.get("pgd"),
        Err(StoreError::Corrupt { .. })
    ));
}

#[test]
fn postgres_records_many_nonces_at_once() {
    use cheq::store::pg::rs::record_nonces;
    let Some(url) = cheq::store::pg::test_database_or_skip("store_rs_batch") else {
        return;
    };
    let pg = cheq::store::pg::Pg::new(&url, 4).unwrap();
    let store = cheq::store::pg::rs::open(&pg).unwrap();
    let entry = |digest: u8| NonceEntry {
        digest: [digest; 32],
        expires_at: 100 + i64::from(digest),
        data: vec![digest],
    };
    // "old" is there before the batch.
    assert_eq!(
        store.nonces.record("old", &entry(9)).unwrap(),
        RecordOutcome::Fresh
    );
    let (a, b, c, nine) = (entry(1), entry(2), entry(3), entry(9));
    let long = "x".repeat(10_000);
    let answers = record_nonces(
        &pg,
        &[
            ("n1", &a),
            ("n2", &b),
            ("n1", &a),
            ("old", &nine),
            ("n2", &c),
            ("old", &a),
            (long.as_str(), &a),
            ("n3", &c),
        ],
    )
    .unwrap();
    assert_eq!(answers.len(), 8);
    assert_eq!(answers[0].as_ref().unwrap(), &RecordOutcome::Fresh);
    assert_eq!(answers[1].as_ref().unwrap(), &RecordOutcome::Fresh);
    assert_eq!(
        answers[2].as_ref().unwrap(),
        &RecordOutcome::SameAsBefore(a.clone())
    );
    assert_eq!(
        answers[3].as_ref().unwrap(),
        &RecordOutcome::SameAsBefore(nine.clone())
    );
    assert_eq!(
        answers[4].as_ref().unwrap(),
        &RecordOutcome::Conflict(b.clone())
    );
    assert_eq!(
        answers[5].as_ref().unwrap(),
        &RecordOutcome::Conflict(nine.clone())
    );
    assert!(
        matches!(answers[6], Err(StoreError::InvalidNonce { .. })),
        "{:?}",
        answers[6]
    );
    assert_eq!(answers[7].as_ref().unwrap(), &RecordOutcome::Fresh);
    // What the batch wrote is what each first item carried.
    assert_eq!(store.nonces.get("n1").unwrap(), Some(a));
    assert_eq!(store.nonces.get("n2").unwrap(), Some(b));
    assert_eq!(store.nonces.get("n3").unwrap(), Some(c));
    assert_eq!(store.nonces.get("old").unwrap(), Some(nine));
    assert_eq!(store.nonces.get(&long).ok().flatten(), None);
}
