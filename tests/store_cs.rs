//! The confirmation server's store (`store::cs`, PROTOCOL.md §2, §6, §8): the
//! contract of its traits, written against the trait objects of a [`CsStore`]
//! so that every backend runs the same checks (today: sled, on real files in
//! temporary directories), then what only a real database can show:
//! reopening keeps everything.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::cheq::{Channel, Decision};
use cheq::store::cs::{
    Account, AccountPutError, Claim, ConfirmationEntry, CsStore, DecisionRecord, Delivery,
    Identity, LimitState, RecordKey, Session,
};
use cheq::store::Durability;
use cheq::store::{packed, sled_cs};
use std::sync::{Arc, Barrier};
#[path = "support/crash.rs"]
mod crash;
mod pg_raw;

fn record(origin: &str, nonce: &str, user: &str, at: i64) -> DecisionRecord {
    DecisionRecord {
        nonce: nonce.into(),
        user: user.into(),
        resource_uri: format!("{origin}/cheq/confirmations/{nonce}"),
        resource_origin: origin.into(),
        operation: format!("{origin}/op"),
        operation_name: "Op".into(),
        decision: Decision::Accept,
        channel: Channel::Html,
        decided_at: at,
        expires: at + 600,
        document: "{}".into(),
        delivery: Delivery::Pending {
            attempts: 0,
            next_try: at,
            last_error: None,
        },
        sealed: false,
        collected_hmac: Default::default(),
        log_digest: None,
    }
}

const A: &str = "https://a.example";
const B: &str = "https://b.example";

// ---- the contract, for any backend ----

fn a_record_key_is_claimed_once(store: &CsStore) {
    let r = &store.records;
    assert_eq!(
        r.claim(&record(A, "n1", "alice", 10)).unwrap(),
        Claim::Fresh
    );
    let mut other = record(A, "n1", "alice", 11);
    other.decision = Decision::Reject;
    other.document = r#"{"the":"loser"}"#.into();
    match r.claim(&other).unwrap() {
        Claim::Existing(old) => {
            assert_eq!(old.decision, Decision::Accept);
            assert_eq!(old.document, "{}", "the winner's document, not the loser's");
        }
        other => panic!("claimed twice: {other:?}"),
    }
    assert_eq!(
        r.get(&RecordKey::new(A, "n1")).unwrap().unwrap().document,
        "{}"
    );
    // §6: another RS's CHEQ with the same nonce is another record.
    assert_eq!(r.claim(&record(B, "n1", "bob", 12)).unwrap(), Claim::Fresh);
    assert_eq!(
        r.get(&RecordKey::new(A, "n1")).unwrap().unwrap().user,
        "alice"
    );
    assert_eq!(
        r.get(&RecordKey::new(B, "n1")).unwrap().unwrap().user,
        "bob"
    );
    assert_eq!(
        r.by_resource(&format!("{A}/cheq/confirmations/n1"))
            .unwrap()
            .unwrap()
            .resource_origin,
        A
    );
    assert_eq!(r.get(&RecordKey::new(A, "nope")).unwrap(), None);
}

fn concurrent_claims_make_one_record(store: &CsStore) {
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let records = store.records.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut r = record(A, "race", "alice", 100 + i);
                r.decision = if i % 2 == 0 {
                    Decision::Accept
                } else {
                    Decision::Reject
                };
                barrier.wait();
                records.claim(&r).unwrap()
            })
        })
        .collect();
    let outcomes: Vec<Claim> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let fresh = outcomes.iter().filter(|c| **c == Claim::Fresh).count();
    assert_eq!(fresh, 1, "{outcomes:?}");
    let stored = store
        .records
        .get(&RecordKey::new(A, "race"))
        .unwrap()
        .unwrap();
    for c in outcomes {
        if let Claim::Existing(old) = c {
            assert_eq!(*old, stored, "every loser sees the winner's record");
        }
    }
}

fn due_deliveries_are_leased_to_one_worker(store: &CsStore) {
    let r = &store.records;
    r.claim(&record(A, "d1", "carol", 1000)).unwrap();
    let mut later = record(A, "d2", "carol", 1000);
    later.delivery = Delivery::Pending {
        attempts: 1,
        next_try: 5000,
        last_error: Some("down".into()),
    };
    r.claim(&later).unwrap();
    let leased = r.lease_due(1000, 30, 100).unwrap();
    let nonces: Vec<&str> = leased
        .iter()
        .filter(|x| x.user == "carol")
        .map(|x| x.nonce.as_str())
        .collect();
    assert_eq!(nonces, ["d1"], "only the due one");
    // Leased: nobody else gets it until the lease runs out.
    assert!(r
        .lease_due(1001, 30, 100)
        .unwrap()
        .iter()
        .all(|x| x.nonce != "d1"));
    assert!(r
        .lease_due(1031, 30, 100)
        .unwrap()
        .iter()
        .any(|x| x.nonce == "d1"));
    // A final state leaves the outbox.
    let mut done = r.get(&RecordKey::new(A, "d1")).unwrap().unwrap();
    done.delivery = Delivery::Delivered {
        decision: Decision::Accept,
        at: 1040,
    };
    r.update(&done, Durability::Now).unwrap();
    assert!(r
        .lease_due(9999, 30, 100)
        .unwrap()
        .iter()
        .all(|x| x.nonce != "d1"));
    assert_eq!(r.get(&RecordKey::new(A, "d1")).unwrap().unwrap(), done);
    let (pending, oldest) = r.pending_summary().unwrap();
    assert!(pending >= 1);
    assert!(oldest.is_some());
}

fn history_is_per_user_newest_first(store: &CsStore) {
    let r = &store.records;
    for (nonce, at) in [("h1", 10), ("h2", 30), ("h3", 20)] {
        r.claim(&record(A, nonce, "dave", at)).unwrap();
    }
    r.claim(&record(A, "h4", "erin", 40)).unwrap();
    let nonces: Vec<String> = r
        .for_user("dave", 10)
        .unwrap()
        .into_iter()
        .map(|x| x.nonce)
        .collect();
    assert_eq!(nonces, ["h2", "h3", "h1"]);
    assert_eq!(r.for_user("dave", 2).unwrap().len(), 2);
    assert!(r.for_user("dav", 10).unwrap().is_empty());
    let id = RecordKey::new(A, "h4").id();
    assert!(r.by_id_for_user("erin", &id).unwrap().is_some());
    assert!(
        r.by_id_for_user("dave", &id).unwrap().is_none(),
        "not someone else's"
    );
}

fn sealed_records_are_listed(store: &CsStore) {
    let mut s = record(A, "s1", "frank", 10);
    s.sealed = true;
    store.records.claim(&s).unwrap();
    assert!(store
        .records
        .sealed()
        .unwrap()
        .contains(&RecordKey::new(A, "s1")));
}

fn entries_start_once_and_are_collected(store: &CsStore) {
    let e = ConfirmationEntry {
        resource_uri: format!("{A}/cheq/confirmations/x"),
        created: 100,
        document: None,
    };
    store.entries.start("x", &e).unwrap();
    let mut again = e.clone();
    again.created = 200;
    store.entries.start("x", &again).unwrap();
    assert_eq!(store.entries.get("x").unwrap(), Some(e.clone()));
    let mut fetched = e.clone();
    fetched.document = Some("{\"doc\":1}".into());
    store.entries.put("x", &fetched).unwrap();
    assert_eq!(store.entries.get("x").unwrap(), Some(fetched));
    assert_eq!(store.entries.collect_older_than(150).unwrap(), 1);
    assert_eq!(store.entries.get("x").unwrap(), None);
}

fn account(name: &str, email: Option<&str>) -> Account {
    Account {
        username: name.into(),
        email: email.map(str::to_owned),
        password_hash: "$argon2id$stand-in".into(),
        pin_hash: None,
        external: None,
        user_handle: None,
        passkeys: Vec::new(),
    }
}

fn accounts_name_one_subject_each(store: &CsStore) {
    let a = &store.accounts;
    a.put(&account("gina", Some("gina@example.com")), false)
        .unwrap();
    assert!(matches!(
        a.put(&account("gina", None), false),
        Err(AccountPutError::Exists(_))
    ));
    assert!(matches!(
        a.put(&account("gina@example.com", None), false),
        Err(AccountPutError::Ambiguous(_))
    ));
    assert!(matches!(
        a.put(&account("hank", Some("GINA@example.com")), false),
        Err(AccountPutError::Ambiguous(_))
    ));
    let mut pinned = account("gina", Some("gina@example.com"));
    pinned.pin_hash = Some("$argon2id$pin".into());
    a.put(&pinned, true).unwrap();
    assert_eq!(a.get("gina").unwrap(), Some(pinned));
    assert_eq!(a.get("nobody").unwrap(), None);
    // An identity provider's account: kept with who it is there, and held to
    // the same rule (no e-mail taken twice, whoever claims it).
    let mut external = account("oidc-abc", Some("GINA@example.com"));
    external.password_hash = String::new();
    external.external = Some(cheq::store::cs::ExternalId {
        issuer: "http://127.0.0.1:9000".into(),
        subject: "248289761001".into(),
    });
    assert!(matches!(
        a.put(&external, false),
        Err(AccountPutError::Ambiguous(_))
    ));
    external.email = Some("ivy@example.com".into());
    a.put(&external, false).unwrap();
    assert_eq!(a.get("oidc-abc").unwrap(), Some(external.clone()));
    external.email = None;
    a.put(&external, true).unwrap();
    assert_eq!(a.get("oidc-abc").unwrap().unwrap().email, None);
}

/// Many first sign-ins that bring the same e-mail at once, each under an
/// account name of its own: one account gets the e-mail, every other put is
/// refused, so the e-mail (a CHEQ `subject`) names one account. The same for
/// a user name that races an e-mail of that text. `fillers` accounts are put
/// first, so that each put's checks take a while.
fn concurrent_puts_never_share_a_name(store: &CsStore, fillers: usize) {
    const THREADS: usize = 12;
    for i in 0..fillers {
        store
            .accounts
            .put(&account(&format!("filler{i}"), None), false)
            .unwrap();
    }
    for round in 0..8 {
        let email = format!("race{round}@example.com");
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let accounts = store.accounts.clone();
                let barrier = barrier.clone();
                let email = email.clone();
                std::thread::spawn(move || {
                    // One claims the e-mail as its user name.
                    let mut a = if i == THREADS - 1 {
                        account(&email.to_ascii_uppercase(), None)
                    } else {
                        account(&format!("oidc-race{round}-{i}"), Some(&email))
                    };
                    // Half of them the way a provider's login writes (replace).
                    let replace = i % 2 == 0;
                    if replace {
                        a.password_hash = String::new();
                    }
                    barrier.wait();
                    accounts.put(&a, replace)
                })
            })
            .collect();
        let outcomes: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let stored = outcomes.iter().filter(|o| o.is_ok()).count();
        assert_eq!(stored, 1, "round {round}: {outcomes:?}");
        for o in &outcomes {
            assert!(
                matches!(o, Ok(()) | Err(AccountPutError::Ambiguous(_))),
                "{o:?}"
            );
        }
    }
}

fn sessions_expire(store: &CsStore) {
    let s = &store.sessions;
    let live = Session {
        identity: Some(Identity {
            sub: "ivy".into(),
            also_known_as: vec![],
            auth_time: Some(1),
            amr: vec!["pwd".into()],
            provider: Some("example".into()),
            id_token: Some("eyJ.x.y".into()),
            credential: Some("bound".into()),
        }),
        expires: 500,
    };
    s.put(&[1; 32], &live).unwrap();
    s.put(
        &[2; 32],
        &Session {
            identity: None,
            expires: 100,
        },
    )
    .unwrap();
    assert_eq!(s.get(&[1; 32]).unwrap(), Some(live));
    assert_eq!(s.collect_expired(200).unwrap(), 1);
    assert_eq!(s.get(&[2; 32]).unwrap(), None);
    s.remove(&[1; 32]).unwrap();
    assert_eq!(s.get(&[1; 32]).unwrap(), None);
}

fn limits_update_atomically(store: &CsStore) {
    let l = &store.limits;
    // Limiter keys join their parts with NUL.
    let joined = "acct\0alice\0\x31.2.3.4";
    l.update(joined, &mut |_| {
        Some(LimitState {
            failures: 1,
            locked_until: 0,
            last_failure: 1,
        })
    })
    .unwrap();
    assert_eq!(l.get(joined).unwrap().unwrap().failures, 1);
    l.update(joined, &mut |_| None).unwrap();
    assert_eq!(l.get(joined).unwrap(), None);
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let l = l.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..25 {
                    l.update("k", &mut |old| {
                        let mut s = old.unwrap_or_default();
                        s.failures += 1;
                        s.last_failure = 10;
                        Some(s)
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(l.get("k").unwrap().unwrap().failures, 200, "no lost update");
    l.update("locked", &mut |_| {
        Some(LimitState {
            failures: 9,
            locked_until: 1000,
            last_failure: 10,
        })
    })
    .unwrap();
    assert_eq!(
        l.collect(500).unwrap(),
        1,
        "the idle one goes, the locked one stays"
    );
    assert!(l.get("locked").unwrap().is_some());
    l.update("locked", &mut |_| None).unwrap();
    assert_eq!(l.get("locked").unwrap(), None);
}

/// A record's document as delivered, then replaced (a sealed document
/// redacted once its delivery is final, §8): every read gives the current one.
fn a_changed_document_replaces_the_old(store: &CsStore) {
    let r = &store.records;
    let mut rec = record(A, "doc1", "dora", 40);
    rec.document = SEALED.into();
    rec.sealed = true;
    assert_eq!(r.claim(&rec).unwrap(), Claim::Fresh);
    let key = RecordKey::new(A, "doc1");
    assert_eq!(r.get(&key).unwrap().unwrap().document, SEALED);
    let leased = r.lease_due(40, 30, 100).unwrap();
    let mine = leased.iter().find(|l| l.key() == key).unwrap();
    assert_eq!(
        mine.document, SEALED,
        "a leased record carries its document"
    );
    rec.document = REDACTED.into();
    rec.sealed = false;
    rec.delivery = Delivery::Delivered {
        decision: Decision::Accept,
        at: 41,
    };
    r.update(&rec, Durability::Now).unwrap();
    let now = r.get(&key).unwrap().unwrap();
    assert_eq!(now.document, REDACTED);
    assert!(!now.sealed);
    assert_eq!(
        r.by_resource(&rec.resource_uri).unwrap().unwrap().document,
        REDACTED
    );
    let history = r.for_user("dora", 10).unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].document, REDACTED);
    // Rewriting the same document again changes nothing.
    r.update(&rec, Durability::Deferred).unwrap();
    assert_eq!(r.get(&key).unwrap().unwrap().document, REDACTED);
}

const SEALED: &str = "c2VhbGVkLXByaXZhdGUtdmFsdWUtMTIzNDU2Nzg5MA";
const REDACTED: &str = r#"{"payload":"e30","signatures":[]}"#;

/// Old history goes (`history_days`), but never a record still to deliver
/// nor one still sealed; with it, what finds it by URI and by user. (Times
/// below zero: the other checks of the contract write theirs above it.)
fn old_final_decisions_are_collected(store: &CsStore) {
    let r = &store.records;
    let delivered = |mut rec: DecisionRecord| {
        rec.delivery = Delivery::Delivered {
            decision: Decision::Accept,
            at: rec.decided_at + 1,
        };
        rec
    };
    let old = delivered(record(A, "old-1", "olga", -10_000));
    let pending = record(A, "old-2", "olga", -10_000);
    let mut sealed = delivered(record(A, "old-3", "olga", -10_000));
    sealed.sealed = true;
    let recent = delivered(record(A, "recent-1", "olga", -100));
    for rec in [&old, &pending, &sealed, &recent] {
        assert_eq!(r.claim(rec).unwrap(), Claim::Fresh);
    }
    assert_eq!(r.collect_decided_before(-10_000).unwrap(), 0, "only before");
    assert_eq!(r.collect_decided_before(-1_000).unwrap(), 1);
    assert_eq!(r.get(&old.key()).unwrap(), None);
    assert_eq!(r.by_resource(&old.resource_uri).unwrap(), None);
    assert_eq!(r.by_id_for_user("olga", &old.key().id()).unwrap(), None);
    for kept in [&pending, &sealed, &recent] {
        assert_eq!(r.get(&kept.key()).unwrap().as_ref(), Some(kept));
        assert_eq!(
            r.by_resource(&kept.resource_uri).unwrap().as_ref(),
            Some(kept)
        );
    }
    let history: Vec<String> = r
        .for_user("olga", 10)
        .unwrap()
        .into_iter()
        .map(|x| x.nonce)
        .collect();
    // Newest first; the two of one time in either order.
    let mut older = history[1..].to_vec();
    older.sort();
    assert_eq!(history[0], "recent-1");
    assert_eq!(older, ["old-2", "old-3"]);
    assert_eq!(r.collect_decided_before(-1_000).unwrap(), 0, "once");
    // §6: its key is never claimed again, whatever the new record says.
    assert_eq!(r.claim(&old).unwrap(), Claim::Collected);
    let mut again = record(A, "old-1", "olga", 5);
    again.decision = Decision::Reject;
    assert_eq!(r.claim(&again).unwrap(), Claim::Collected);
    assert_eq!(r.get(&old.key()).unwrap(), None);
    // Another RS's CHEQ with that nonce is another key.
    assert_eq!(
        r.claim(&record(B, "old-1", "olga", 5)).unwrap(),
        Claim::Fresh
    );
}

/// Passkeys stay with their account, and a sign-in with one finds the
/// account by its user handle alone.
fn accounts_are_found_by_their_passkeys_user_handle(store: &CsStore) {
    let a = &store.accounts;
    assert_eq!(a.by_handle("h-1").unwrap(), None);
    let mut hana = account("hana", None);
    hana.user_handle = Some("h-1".into());
    let mut key = serde_json::Map::new();
    key.insert("kty".into(), "OKP".into());
    hana.passkeys.push(cheq::store::cs::Passkey {
        id: "cred-1".into(),
        key,
        name: "laptop".into(),
        added: 100,
        last_used: None,
        sign_count: 3,
    });
    a.put(&hana, false).unwrap();
    a.put(&account("ida", None), false).unwrap();
    assert_eq!(a.by_handle("h-1").unwrap(), Some(hana.clone()));
    assert_eq!(a.get("hana").unwrap(), Some(hana.clone()));
    assert_eq!(a.by_handle("h-2").unwrap(), None);
    // The counter moves on; a removed passkey is gone.
    hana.passkeys[0].sign_count = 4;
    a.put(&hana, true).unwrap();
    assert_eq!(
        a.by_handle("h-1").unwrap().unwrap().passkeys[0].sign_count,
        4
    );
    hana.passkeys.clear();
    a.put(&hana, true).unwrap();
    assert!(a.get("hana").unwrap().unwrap().passkeys.is_empty());
}

fn contract(store: &CsStore) {
    a_record_key_is_claimed_once(store);
    a_changed_document_replaces_the_old(store);
    concurrent_claims_make_one_record(store);
    due_deliveries_are_leased_to_one_worker(store);
    history_is_per_user_newest_first(store);
    sealed_records_are_listed(store);
    entries_start_once_and_are_collected(store);
    accounts_name_one_subject_each(store);
    accounts_are_found_by_their_passkeys_user_handle(store);
    concurrent_puts_never_share_a_name(store, 300);
    sessions_expire(store);
    limits_update_atomically(store);
    old_final_decisions_are_collected(store);
}

#[test]
fn sled_keeps_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, store) = sled_cs::open_dir(dir.path()).unwrap();
    contract(&store);
}

/// Every value of `tree`, concatenated.
fn tree_bytes(db: &sled::Db, tree: &str) -> Vec<u8> {
    let t = db.open_tree(tree).unwrap();
    t.iter()
        .flat_map(|kv| {
            let (_, v) = kv.unwrap();
            v.to_vec()
        })
        .collect()
}

/// Every document in sled's `cs.documents`, unpacked (text as it is),
/// concatenated; each value must be packed.
fn documents(db: &sled::Db) -> Vec<u8> {
    let t = db.open_tree("cs.documents").unwrap();
    t.iter()
        .flat_map(|kv| {
            let (_, v) = kv.unwrap();
            assert!(packed::is_packed(&v), "a document stored unpacked");
            packed::unpack(&v).unwrap().into_bytes()
        })
        .collect()
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// sled keeps a decision's document apart from its record, written once: the
/// record rewritten on every lease and at the end of its delivery stays
/// small. A redacted document's sealed predecessor is gone from the files'
/// trees, a lost claim leaves no document behind, and a record of the
/// layout before (document inline) still reads and moves on its next write.
#[test]
fn sled_keeps_documents_apart_and_drops_replaced_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (db, store) = sled_cs::open_dir(dir.path()).unwrap();
    let r = &store.records;
    let mut rec = record(A, "lay1", "lee", 50);
    rec.document = SEALED.into();
    rec.sealed = true;
    r.claim(&rec).unwrap();
    let mut loser = rec.clone();
    loser.document = r#"{"lost":"race"}"#.into();
    assert!(matches!(r.claim(&loser).unwrap(), Claim::Existing(_)));
    assert!(!contains(&tree_bytes(&db, "cs.decisions"), SEALED));
    let docs = documents(&db);
    assert!(contains(&docs, SEALED));
    assert!(!contains(&docs, "lost"), "the loser's document was kept");
    assert_eq!(db.open_tree("cs.documents").unwrap().len(), 1);

    rec.document = REDACTED.into();
    rec.sealed = false;
    rec.delivery = Delivery::Delivered {
        decision: Decision::Accept,
        at: 51,
    };
    r.update(&rec, Durability::Now).unwrap();
    let docs = documents(&db);
    assert!(
        !contains(&docs, SEALED),
        "the sealed document outlived its redaction"
    );
    assert!(contains(&docs, REDACTED));
    assert_eq!(db.open_tree("cs.documents").unwrap().len(), 1);

    // The layout before: the document inline in the record.
    let mut old = record(B, "inline1", "lee", 60);
    old.document = r#"{"inline":"d0c-in-the-record"}"#.into();
    let id = old.key().id();
    db.open_tree("cs.decisions")
        .unwrap()
        .insert(id.as_bytes(), serde_json::to_vec(&old).unwrap())
        .unwrap();
    let read = r.get(&old.key()).unwrap().unwrap();
    assert_eq!(read, old);
    old.delivery = Delivery::Expired { at: 61 };
    r.update(&old, Durability::Now).unwrap();
    assert_eq!(r.get(&old.key()).unwrap().unwrap(), old);
    assert!(contains(&documents(&db), "d0c-in-the-record"));
    assert!(!contains(
        &tree_bytes(&db, "cs.decisions"),
        "d0c-in-the-record"
    ));

    // A document that looks like a reference is refused, not stored.
    let mut odd = record(A, "odd1", "lee", 70);
    odd.document = "\u{1}doc:elsewhere".into();
    assert!(r.claim(&odd).is_err());
    assert!(r.get(&odd.key()).unwrap().is_none());
}

/// sled: a collected decision leaves nothing in any tree; a collection that
/// stopped half way (the record gone, its documents and its entry by user
/// left) is finished by the next one.
#[test]
fn sled_collects_a_decision_from_every_tree() {
    let dir = tempfile::tempdir().unwrap();
    let (db, store) = sled_cs::open_dir(dir.path()).unwrap();
    let r = &store.records;
    let trees = [
        "cs.decisions",
        "cs.documents",
        "cs.by_resource",
        "cs.by_user",
        "cs.pending",
        "cs.collected",
    ];
    let counts = || trees.map(|t| db.open_tree(t).unwrap().len());
    let mut rec = record(A, "gone1", "dee", 100);
    rec.document = r#"{"evidence":"e-1"}"#.into();
    r.claim(&rec).unwrap();
    assert_eq!(counts(), [1, 1, 1, 1, 1, 0]);
    // Still pending: it stays.
    assert_eq!(r.collect_decided_before(1_000).unwrap(), 0);
    rec.delivery = Delivery::Refused {
        refusal: cheq::store::cs::Refusal::Unregistered,
        at: 101,
    };
    r.update(&rec, Durability::Now).unwrap();
    assert_eq!(counts(), [1, 1, 1, 1, 0, 0]);
    assert_eq!(r.collect_decided_before(1_000).unwrap(), 1);
    assert_eq!(counts(), [0, 0, 0, 0, 0, 1], "only its key is left");

    // Half way: the record removed by a collection that stopped there.
    let mut half = record(B, "half1", "dee", 200);
    half.delivery = Delivery::Expired { at: 201 };
    r.claim(&half).unwrap();
    let half_id = half.key().id();
    db.open_tree("cs.collected")
        .unwrap()
        .insert(half_id.as_bytes(), &200i64.to_be_bytes())
        .unwrap();
    db.open_tree("cs.by_resource")
        .unwrap()
        .remove(half.resource_uri.as_bytes())
        .unwrap();
    db.open_tree("cs.decisions")
        .unwrap()
        .remove(half_id.as_bytes())
        .unwrap();
    assert_eq!(counts(), [0, 1, 0, 1, 0, 2]);
    assert_eq!(
        r.collect_decided_before(1_000).unwrap(),
        0,
        "no record went now"
    );
    assert_eq!(counts(), [0, 0, 0, 0, 0, 2]);

    // A record newer than the cutoff, found through a stale entry by user
    // under an old time, stays.
    let mut newer = record(A, "newer1", "dee", 9_000);
    newer.delivery = Delivery::Expired { at: 9_001 };
    r.claim(&newer).unwrap();
    let mut stale = b"dee\0".to_vec();
    stale.extend_from_slice(&(i64::MAX - 50).to_be_bytes());
    stale.extend_from_slice(newer.key().id().as_bytes());
    db.open_tree("cs.by_user")
        .unwrap()
        .insert(stale, newer.key().id().as_bytes())
        .unwrap();
    assert_eq!(r.collect_decided_before(1_000).unwrap(), 0);
    assert_eq!(r.get(&newer.key()).unwrap().as_ref(), Some(&newer));

    // Another record on the same URI keeps its entry by URI.
    let mut first = record(A, "uri1", "dee", 300);
    first.delivery = Delivery::Expired { at: 301 };
    let mut second = record(A, "uri2", "dee", 5_000);
    second.resource_uri = first.resource_uri.clone();
    r.claim(&first).unwrap();
    r.claim(&second).unwrap();
    assert_eq!(r.collect_decided_before(1_000).unwrap(), 1);
    assert_eq!(
        r.by_resource(&first.resource_uri).unwrap().map(|x| x.nonce),
        Some("uri2".to_owned())
    );
}

/// sled: readers running while old history is collected read each record
/// whole or not at all, never one without its document.
#[test]
fn sled_readers_never_see_a_record_without_its_document_during_collection() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, store) = sled_cs::open_dir(dir.path()).unwrap();
    let records: Vec<DecisionRecord> = (0..3_000)
        .map(|i| {
            let mut r = record(A, &format!("race{i}"), "rae", 100 + i);
            r.document = format!(r#"{{"evidence":"{i}"}}"#);
            r.delivery = Delivery::Expired { at: 200 + i };
            r
        })
        .collect();
    for r in &records {
        store.records.claim_with(r, Durability::Deferred).unwrap();
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let (reads, errors) = std::thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let (mut reads, mut errors) = (0, Vec::new());
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        for r in records.iter().step_by(7) {
                            reads += 1;
                            match store.records.get(&r.key()) {
                                Ok(Some(got)) => assert_eq!(&got, r),
                                Ok(None) => {}
                                Err(e) => errors.push(e.to_string()),
                            }
                        }
                        if let Err(e) = store.records.for_user("rae", 50) {
                            errors.push(e.to_string());
                        }
                    }
                    (reads, errors)
                })
            })
            .collect();
        assert_eq!(
            store.records.collect_decided_before(100_000).unwrap(),
            records.len()
        );
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        readers.into_iter().map(|h| h.join().unwrap()).fold(
            (0, Vec::new()),
            |(n, mut all), (r, e)| {
                all.extend(e);
                (n + r, all)
            },
        )
    });
    assert!(reads > 0);
    assert!(
        errors.is_empty(),
        "{} of {reads} reads failed: {:?}",
        errors.len(),
        &errors[..errors.len().min(3)]
    );
}

/// sled stores a document packed, smaller than its text; one stored as text
/// (before packing) still reads, and a damaged one is an error, never
/// another document.
#[test]
fn sled_packs_documents_and_reads_the_text_of_before() {
    let dir = tempfile::tempdir().unwrap();
    let (db, store) = sled_cs::open_dir(dir.path()).unwrap();
    let r = &store.records;
    let mut rec = record(A, "pack1", "lee", 80);
    rec.document = format!(
        r#"{{"payload":"{}","signatures":[{{"protected":"eyJhbGciOiJFZERTQSJ9","signature":"{}"}}]}}"#,
        "eyJ2ZXJzaW9uIjogIjEuMCJ9".repeat(40),
        "A".repeat(86)
    );
    r.claim(&rec).unwrap();
    let t = db.open_tree("cs.documents").unwrap();
    let (doc_key, stored) = t.iter().next().unwrap().unwrap();
    assert!(packed::is_packed(&stored));
    assert!(
        stored.len() * 2 < rec.document.len(),
        "{} bytes",
        stored.len()
    );
    assert_eq!(r.get(&rec.key()).unwrap().unwrap(), rec);

    // The text of before.
    t.insert(&doc_key, rec.document.as_bytes()).unwrap();
    assert_eq!(r.get(&rec.key()).unwrap().unwrap(), rec);

    // A damaged packed value.
    let mut damaged = stored.to_vec();
    let at = damaged.len() / 2;
    damaged[at] ^= 1;
    t.insert(&doc_key, damaged).unwrap();
    let err = r.get(&rec.key()).unwrap_err();
    assert!(
        matches!(err, cheq::store::StoreError::Corrupt { .. }),
        "{err:?}"
    );
}

#[test]
fn sled_keeps_everything_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (db, store) = sled_cs::open_dir(dir.path()).unwrap();
        store.records.claim(&record(A, "r1", "jo", 10)).unwrap();
        store.accounts.put(&account("jo", None), false).unwrap();
        store
            .limits
            .update("ip:1.2.3.4", &mut |_| {
                Some(LimitState {
                    failures: 3,
                    locked_until: 0,
                    last_failure: 5,
                })
            })
            .unwrap();
        db.flush().unwrap();
    }
    let (_db, store) = sled_cs::open_dir(dir.path()).unwrap();
    assert_eq!(
        store
            .records
            .get(&RecordKey::new(A, "r1"))
            .unwrap()
            .unwrap()
            .user,
        "jo"
    );
    assert!(store.accounts.get("jo").unwrap().is_some());
    assert_eq!(store.limits.get("ip:1.2.3.4").unwrap().unwrap().failures, 3);
    assert_eq!(store.records.lease_due(10, 30, 10).unwrap().len(), 1);
}

/// Set in the child process of [`an_awaited_claim_survives_sigkill`].
const CLAIM_CHILD_DIR_VAR: &str = "CHEQ_STORE_CS_CLAIM_DIR";

/// A record claimed unflushed, then awaited on the store's flusher (as the
/// CS takes a decision on sled), is on disk once the wait returns: a
/// process killed with SIGKILL right after keeps it. The database is opened
/// without sled's background flush, so only the awaited flush can have
/// written it.
#[test]
fn an_awaited_claim_survives_sigkill() {
    let open = |dir: &std::path::Path| {
        let db = cheq::store::sled_config(dir)
            .flush_every_ms(None)
            .open()
            .unwrap();
        let store = sled_cs::open(&db).unwrap();
        (db, store)
    };
    if let Some(dir) = std::env::var_os(CLAIM_CHILD_DIR_VAR) {
        let (_db, store) = open(std::path::Path::new(&dir));
        let claimed = record(A, "awaited", "alice", 10);
        assert_eq!(
            store
                .records
                .claim_with(&claimed, Durability::Deferred)
                .unwrap(),
            Claim::Fresh
        );
        // Claimed once, as `claim`.
        assert!(matches!(
            store.records.claim_with(&record(A, "awaited", "bob", 11), Durability::Deferred),
            Ok(Claim::Existing(old)) if old.user == "alice"
        ));
        let flusher = store.flusher.clone().expect("sled has a flusher");
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(flusher.flushed())
            .unwrap();
        crash::report_and_wait("CLAIMED", "awaited");
    }
    let dir = tempfile::tempdir().unwrap();
    let (child, _) = crash::start(
        "an_awaited_claim_survives_sigkill",
        CLAIM_CHILD_DIR_VAR,
        dir.path(),
        "CLAIMED",
    );
    crash::kill(child);
    let (_db, store) = open(dir.path());
    let kept = store
        .records
        .get(&RecordKey::new(A, "awaited"))
        .unwrap()
        .expect("the claimed record was lost");
    assert_eq!(kept, record(A, "awaited", "alice", 10));
    assert_eq!(store.records.lease_due(10, 30, 10).unwrap().len(), 1);
}

// ---- PostgreSQL ----

#[test]
fn postgres_keeps_the_contract() {
    let Some(url) = cheq::store::pg::test_database_or_skip("store_cs") else {
        return;
    };
    let store = cheq::store::pg::cs::open(&cheq::store::pg::Pg::new(&url, 16).unwrap()).unwrap();
    contract(&store);
}

#[test]
fn postgres_keeps_everything_across_a_reopen() {
    let Some(url) = cheq::store::pg::test_database_or_skip("store_cs_reopen") else {
        return;
    };
    {
        let store = cheq::store::pg::cs::open(&cheq::store::pg::Pg::new(&url, 2).unwrap()).unwrap();
        store.records.claim(&record(A, "r1", "jo", 10)).unwrap();
        store.accounts.put(&account("jo", None), false).unwrap();
        store
            .limits
            .update("ip:1.2.3.4", &mut |_| {
                Some(LimitState {
                    failures: 3,
                    locked_until: 0,
                    last_failure: 5,
                })
            })
            .unwrap();
    }
    let store = cheq::store::pg::cs::open(&cheq::store::pg::Pg::new(&url, 2).unwrap()).unwrap();
    assert_eq!(
        store
            .records
            .get(&RecordKey::new(A, "r1"))
            .unwrap()
            .unwrap()
            .user,
        "jo"
    );
    assert!(store.accounts.get("jo").unwrap().is_some());
    assert_eq!(store.limits.get("ip:1.2.3.4").unwrap().unwrap().failures, 3);
    assert_eq!(store.records.lease_due(10, 30, 10).unwrap().len(), 1);
}

#[test]
fn postgres_stores_on_two_pools_are_one_store() {
    // Two pools stand for two instances of the CS on one database.
    let Some(url) = cheq::store::pg::test_database_or_skip("store_cs_two") else {
        return;
    };
    let one = cheq::store::pg::cs::open(&cheq::store::pg::Pg::new(&url, 4).unwrap()).unwrap();
    let two = cheq::store::pg::cs::open(&cheq::store::pg::Pg::new(&url, 4).unwrap()).unwrap();
    one.records.claim(&record(A, "r1", "jo", 10)).unwrap();
    match two.records.claim(&record(A, "r1", "al", 11)).unwrap() {
        Claim::Existing(old) => assert_eq!(old.user, "jo"),
        other => panic!("claimed on both instances: {other:?}"),
    }
    one.accounts
        .put(&account("jo", Some("jo@x.example")), false)
        .unwrap();
    assert!(matches!(
        two.accounts.put(&account("JO@X.EXAMPLE", None), false),
        Err(AccountPutError::Ambiguous(_))
    ));
    let key = [7u8; 32];
    one.sessions
        .put(
            &key,
            &Session {
                identity: None,
                expires: 100,
            },
        )
        .unwrap();
    assert_eq!(two.sessions.get(&key).unwrap().unwrap().expires, 100);
    one.limits
        .update("acct:jo", &mut |old| {
            Some(LimitState {
                failures: old.map_or(0, |s| s.failures) + 1,
                locked_until: 0,
                last_failure: 1,
            })
        })
        .unwrap();
    let after = two
        .limits
        .update("acct:jo", &mut |old| {
            Some(LimitState {
                failures: old.map_or(0, |s| s.failures) + 1,
                locked_until: 0,
                last_failure: 2,
            })
        })
        .unwrap()
        .unwrap();
    assert_eq!(after.failures, 2, "a failure counted on one counts on all");
    // A due delivery goes to one instance only.
    let a = one.records.lease_due(10, 30, 10).unwrap();
    let b = two.records.lease_due(10, 30, 10).unwrap();
    assert_eq!(a.len() + b.len(), 1);
    assert!(one.readiness.ready().is_ok());
}

#[test]
fn postgres_migrations_apply_once_when_instances_start_together() {
    let Some(url) = cheq::store::pg::test_database_or_skip("store_cs_migrate") else {
        return;
    };
    let applied: Vec<usize> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| {
                let url = url.clone();
                s.spawn(move || {
                    let pg = cheq::store::pg::Pg::new(&url, 1).unwrap();
                    pg.migrate("cs", cheq::store::pg::cs::MIGRATIONS).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        applied.iter().sum::<usize>(),
        cheq::store::pg::cs::MIGRATIONS.len(),
        "{applied:?}"
    );
    let pg = cheq::store::pg::Pg::new(&url, 1).unwrap();
    let versions: Vec<i32> = cheq::store::pg::cs::MIGRATIONS
        .iter()
        .map(|m| m.version)
        .collect();
    assert_eq!(versions, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(cheq::store::pg::applied(&pg, "cs").unwrap(), versions);
    assert_eq!(
        cheq::store::pg::applied(&pg, "rs").unwrap(),
        Vec::<i32>::new()
    );
}

#[test]
fn postgres_refuses_a_schema_newer_than_it_knows() {
    static NEWER: &[cheq::store::pg::Migration] = &[
        cheq::store::pg::Migration {
            version: 1,
            name: "one",
            sql: "CREATE TABLE t1 (x int)",
        },
        cheq::store::pg::Migration {
            version: 2,
            name: "two",
            sql: "CREATE TABLE t2 (x int)",
        },
    ];
    let Some(url) = cheq::store::pg::test_database_or_skip("store_cs_newer") else {
        return;
    };
    let pg = cheq::store::pg::Pg::new(&url, 1).unwrap();
    assert_eq!(pg.migrate("probe", NEWER).unwrap(), 2);
    let e = pg.migrate("probe", &NEWER[..1]).unwrap_err().to_string();
    assert!(e.contains("newer than this cheq knows"), "{e}");
}

/// A document like the ones the CS keeps: base64url, most of it.
fn signed_document(n: usize) -> String {
    format!(
        r#"{{"payload":"{}","signatures":[{{"protected":"eyJhbGciOiJFZERTQSJ9","signature":"{}"}}]}}"#,
        "eyJ2ZXJzaW9uIjogIjEuMCJ9".repeat(n),
        "A".repeat(86)
    )
}

/// PostgreSQL keeps a decision's document packed in its own column, and the
/// members its other columns hold out of the body; a redacted document replaces the sealed one; rows written before
/// (the document inside `body`, or as text in `document`) still read, and
/// move to the packed column on their next write; a damaged packed value is
/// an error, never another document.
#[test]
fn postgres_keeps_documents_packed_in_their_own_column() {
    let Some((pg, rt, client)) = pg_raw::fresh("store_cs_docs") else {
        return;
    };
    let insert = |rec: &DecisionRecord, body: &str, document: Option<&str>| {
        rt.block_on(client.execute(
            "INSERT INTO cs_records (origin, nonce, id, user_name, resource_uri, decided_at,
                 pending, next_try, sealed, body)
             VALUES ($1, $2, $3, $4, $5, $6, true, $6, false, $7)",
            &[
                &rec.resource_origin,
                &rec.nonce,
                &rec.key().id(),
                &rec.user,
                &rec.resource_uri,
                &rec.decided_at,
                &body,
            ],
        ))
        .unwrap();
        if let Some(document) = document {
            rt.block_on(client.execute(
                "UPDATE cs_records SET document = $2 WHERE nonce = $1",
                &[&rec.nonce, &document],
            ))
            .unwrap();
        }
    };
    // The first schema, with a row of its own: the document in the body.
    pg.migrate("cs", &cheq::store::pg::cs::MIGRATIONS[..1])
        .unwrap();
    let mut v1 = record(B, "pgold1", "pia", 90);
    v1.document = r#"{"inline":"d0c-in-the-body"}"#.into();
    insert(&v1, &serde_json::to_string(&v1).unwrap(), None);
    // The schema before this one: the document as text in its column.
    pg.migrate("cs", &cheq::store::pg::cs::MIGRATIONS[..3])
        .unwrap();
    let mut v3 = record(B, "pgold3", "pia", 95);
    v3.document = signed_document(20);
    let body = serde_json::to_string(&DecisionRecord {
        document: String::new(),
        ..v3.clone()
    })
    .unwrap();
    insert(&v3, &body, Some(&v3.document));
    // Then this version's schema.
    let store = cheq::store::pg::cs::open(&pg).unwrap();
    let row = |nonce: &str| -> (String, Option<String>, Option<Vec<u8>>) {
        let r = rt
            .block_on(client.query_one(
                "SELECT body, document, packed FROM cs_records WHERE nonce = $1",
                &[&nonce],
            ))
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    let unpacked = |p: Option<Vec<u8>>| packed::unpack(&p.expect("packed")).unwrap();

    let r = &store.records;
    let mut rec = record(A, "pgdoc1", "pia", 80);
    rec.document = signed_document(40);
    rec.sealed = true;
    r.claim(&rec).unwrap();
    let (body, document, stored) = row("pgdoc1");
    assert!(
        !body.contains("signatures"),
        "the document is in the body: {body}"
    );
    // Nor what the row's columns hold.
    for member in [
        "\"nonce\"",
        "\"resource_uri\"",
        "\"user\"",
        "\"decided_at\"",
    ] {
        assert!(!body.contains(member), "{member} twice: {body}");
    }
    assert_eq!(document, None);
    let stored_len = stored.as_ref().map_or(0, Vec::len);
    assert!(stored_len * 2 < rec.document.len(), "{stored_len} bytes");
    assert_eq!(unpacked(stored), rec.document);
    // A lease rewrites the row, not the document.
    let leased = r.lease_due(80, 30, 100).unwrap();
    let mine = leased.iter().find(|l| l.nonce == "pgdoc1").unwrap();
    assert_eq!(mine.document, rec.document);
    rec.delivery = Delivery::Pending {
        attempts: 1,
        next_try: 85,
        last_error: Some("timed out".into()),
    };
    r.update(&rec, Durability::Now).unwrap();
    assert_eq!(r.get(&rec.key()).unwrap().unwrap(), rec);

    rec.document = REDACTED.into();
    rec.sealed = false;
    rec.delivery = Delivery::Delivered {
        decision: Decision::Accept,
        at: 81,
    };
    r.update(&rec, Durability::Now).unwrap();
    let (body, document, stored) = row("pgdoc1");
    assert!(!body.contains("signatures"), "{body}");
    assert_eq!(document, None);
    assert_eq!(unpacked(stored), REDACTED);
    assert_eq!(r.get(&rec.key()).unwrap().unwrap(), rec);

    // The rows of the schemas before read, are leased and move on their next write.
    assert_eq!(r.get(&v1.key()).unwrap().unwrap(), v1);
    assert_eq!(r.get(&v3.key()).unwrap().unwrap(), v3);
    let leased = r.lease_due(100, 30, 100).unwrap();
    for (old, marker) in [(&mut v1, "d0c-in-the-body"), (&mut v3, "eyJ2ZXJz")] {
        let mine = leased.iter().find(|l| l.nonce == old.nonce).unwrap();
        assert_eq!(mine.document, old.document, "a lease keeps the document");
        assert_eq!(
            r.get(&old.key()).unwrap().unwrap().document,
            old.document,
            "a lease keeps the document"
        );
        old.delivery = Delivery::Expired { at: 101 };
        r.update(old, Durability::Now).unwrap();
        assert_eq!(&r.get(&old.key()).unwrap().unwrap(), &*old);
        let (body, document, stored) = row(&old.nonce);
        assert!(!body.contains(marker), "{body}");
        assert_eq!(document, None);
        assert_eq!(unpacked(stored), old.document);
    }

    // A damaged packed value.
    rt.block_on(client.execute(
        "UPDATE cs_records SET packed = overlay(packed placing '\\x00'::bytea from 9)
         WHERE nonce = 'pgold3'",
        &[],
    ))
    .unwrap();
    let e = r.get(&v3.key()).unwrap_err();
    assert!(
        matches!(e, cheq::store::StoreError::Corrupt { .. }),
        "{e:?}"
    );
}

#[test]
fn postgres_is_not_ready_when_nothing_answers_and_says_so_in_time() {
    // A port nobody listens on: the check fails quickly, with a reason.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let pg = cheq::store::pg::Pg::new(&format!("postgres://cheq@127.0.0.1:{port}/x"), 1).unwrap();
    let started = std::time::Instant::now();
    let e = pg.ping().unwrap_err().to_string();
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{e}");
    assert!(e.contains("ping"), "{e}");
}

#[test]
fn a_bad_database_url_is_refused_without_repeating_it() {
    let e = cheq::store::pg::Pg::new("postgres://u:s3cret@host:notaport/db", 1)
        .unwrap_err()
        .to_string();
    assert!(!e.contains("s3cret"), "{e}");
    assert!(e.contains("database_url"), "{e}");
}

/// Migration 3: a record is keyed by its id alone (one unique index, not
/// two over the same key); a row written under the schema before is found,
/// claimed again and updated through it.
#[test]
fn postgres_keys_records_by_their_id_alone() {
    let Some((pg, rt, client)) = pg_raw::fresh("store_cs_key") else {
        return;
    };
    pg.migrate("cs", &cheq::store::pg::cs::MIGRATIONS[..2])
        .unwrap();
    // A row as the version before wrote it: the document as text.
    let mut old = record(A, "pgkey1", "pia", 70);
    let body = serde_json::to_string(&DecisionRecord {
        document: String::new(),
        ..old.clone()
    })
    .unwrap();
    rt.block_on(client.execute(
        "INSERT INTO cs_records (origin, nonce, id, user_name, resource_uri, decided_at,
             pending, next_try, sealed, body, document)
         VALUES ($1, $2, $3, $4, $5, $6, true, $6, false, $7, $8)",
        &[
            &old.resource_origin,
            &old.nonce,
            &old.key().id(),
            &old.user,
            &old.resource_uri,
            &old.decided_at,
            &body,
            &old.document,
        ],
    ))
    .unwrap();

    let store = cheq::store::pg::cs::open(&pg).unwrap();
    let indexes: Vec<String> = rt
        .block_on(client.query(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'cs_records' AND indexdef LIKE 'CREATE UNIQUE%'",
            &[],
        ))
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(indexes.len(), 1, "{indexes:?}");
    assert!(indexes[0].contains("(id)"), "{indexes:?}");

    let r = &store.records;
    assert_eq!(r.get(&old.key()).unwrap().unwrap(), old);
    // The same key claimed again finds the row; another origin's is its own.
    let mut again = record(A, "pgkey1", "pia", 71);
    again.operation = "another".into();
    assert_eq!(
        r.claim(&again).unwrap(),
        Claim::Existing(Box::new(old.clone()))
    );
    assert_eq!(
        r.claim(&record(B, "pgkey1", "pia", 72)).unwrap(),
        Claim::Fresh
    );
    old.delivery = Delivery::Delivered {
        decision: Decision::Accept,
        at: 73,
    };
    r.update(&old, Durability::Now).unwrap();
    assert_eq!(r.get(&old.key()).unwrap().unwrap(), old);
    assert_eq!(r.get(&RecordKey::new(B, "pgkey2")).unwrap(), None);
}
