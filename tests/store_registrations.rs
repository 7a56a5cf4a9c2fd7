//! The registered resource servers and initial access tokens of a CS
//! (`store::registrations`, PROTOCOL.md §16.3): one contract, run on sled
//! and on PostgreSQL: a registration creates then refreshes, a blocked
//! origin is never touched by one, a block of an origin never registered
//! holds, every write moves the generation, a token is taken once even by
//! racing callers, and a record restored (an import's write) is kept
//! exactly as given, into an origin that has none only.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::store::cs::CsStore;
use cheq::store::registrations::{RegisterOutcome, RegisteredRecord, RegistrationStatus};
use cheq::store::sled_cs;
use std::sync::{Arc, Barrier};

fn rs(origin: &str, name: &str, at: i64) -> RegisteredRecord {
    RegisteredRecord {
        origin: origin.into(),
        name: name.into(),
        resource_prefix: format!("{origin}/cheq/confirmations/"),
        jwks_uri: format!("{origin}/.well-known/jwks.json"),
        token_endpoint: format!("{origin}/oauth/token"),
        status: RegistrationStatus::Blocked, // the store's to set
        registered_at: 0,
        updated_at: at,
    }
}

const A: &str = "https://a.example";
const B: &str = "https://b.example";
const C: &str = "https://c.example";
const D: &str = "https://d.example:8443";
const E: &str = "https://e.example";

/// D as a moved store holds it: blocked after it registered, its times
/// those of the old host.
fn restored_d() -> RegisteredRecord {
    RegisteredRecord {
        status: RegistrationStatus::Blocked,
        registered_at: 5,
        ..rs(D, "D", 7)
    }
}

fn registrations_keep_their_contract(store: &CsStore) {
    let r = &store.registrations;
    let g0 = r.generation().unwrap();
    assert_eq!(
        r.register(&rs(A, "A", 10)).unwrap(),
        RegisterOutcome::Created
    );
    let g1 = r.generation().unwrap();
    assert_ne!(g0, g1, "a write moves the generation");
    let a = r.get(A).unwrap().unwrap();
    assert_eq!(a.status, RegistrationStatus::Active);
    assert_eq!((a.registered_at, a.updated_at), (10, 10));

    // A second registration refreshes, keeping the first time.
    assert_eq!(
        r.register(&rs(A, "A renamed", 20)).unwrap(),
        RegisterOutcome::Refreshed
    );
    let a = r.get(A).unwrap().unwrap();
    assert_eq!(
        (a.name.as_str(), a.registered_at, a.updated_at),
        ("A renamed", 10, 20)
    );
    assert_ne!(r.generation().unwrap(), g1);

    // Blocked: a registration changes nothing, not even the generation.
    assert!(r.block(A, 30).unwrap());
    assert!(!r.block(A, 31).unwrap(), "already blocked");
    let g2 = r.generation().unwrap();
    assert_eq!(
        r.register(&rs(A, "sneaky", 40)).unwrap(),
        RegisterOutcome::Blocked
    );
    assert_eq!(r.generation().unwrap(), g2);
    let a = r.get(A).unwrap().unwrap();
    assert_eq!(
        (a.name.as_str(), a.status),
        ("A renamed", RegistrationStatus::Blocked)
    );

    // An origin never registered can be blocked, and then not register.
    assert!(r.block(B, 50).unwrap());
    assert!(r.get(B).unwrap().unwrap().is_placeholder());
    assert_eq!(
        r.register(&rs(B, "B", 51)).unwrap(),
        RegisterOutcome::Blocked
    );
    // Unblocking it forgets it; unblocking A serves it again as it was.
    assert!(r.unblock(B, 52).unwrap());
    assert_eq!(r.get(B).unwrap(), None);
    assert!(r.unblock(A, 53).unwrap());
    assert!(!r.unblock(A, 54).unwrap(), "not blocked");
    let a = r.get(A).unwrap().unwrap();
    assert_eq!(
        (a.name.as_str(), a.status),
        ("A renamed", RegistrationStatus::Active)
    );

    // Listed in the order of the origins; removed for good.
    assert_eq!(
        r.register(&rs(C, "C", 60)).unwrap(),
        RegisterOutcome::Created
    );
    let listed: Vec<_> = r.list().unwrap().into_iter().map(|x| x.origin).collect();
    assert_eq!(listed, vec![A.to_owned(), C.to_owned()]);
    let g3 = r.generation().unwrap();
    assert!(r.remove(C).unwrap());
    assert!(!r.remove(C).unwrap());
    assert_ne!(r.generation().unwrap(), g3);
    assert_eq!(r.get(C).unwrap(), None);
    assert_eq!(
        r.register(&rs(C, "C", 70)).unwrap(),
        RegisterOutcome::Created
    );
}

fn an_access_token_is_taken_once(store: &CsStore) {
    let r = store.registrations.clone();
    assert!(!r.take_access_token("never-issued").unwrap());
    r.add_access_token("d1", 1).unwrap();
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (r, barrier) = (r.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                r.take_access_token("d1").unwrap()
            })
        })
        .collect();
    let taken = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|t| *t)
        .count();
    assert_eq!(taken, 1, "one of eight racing callers gets the token");
    assert!(!r.take_access_token("d1").unwrap());

    // Each digest kept once; listed with its time until it is used.
    assert!(r.add_access_token("d3", 30).unwrap());
    assert!(r.add_access_token("d2", 20).unwrap());
    assert!(!r.add_access_token("d2", 21).unwrap(), "kept already");
    assert_eq!(
        r.access_tokens().unwrap(),
        vec![("d2".to_owned(), 20), ("d3".to_owned(), 30)]
    );
    assert!(r.take_access_token("d2").unwrap());
    assert_eq!(r.access_tokens().unwrap(), vec![("d3".to_owned(), 30)]);
    assert!(r.take_access_token("d3").unwrap());
    assert!(r.access_tokens().unwrap().is_empty());
}

fn a_restored_record_is_kept_as_given(store: &CsStore) {
    let r = &store.registrations;
    let g0 = r.generation().unwrap();
    assert!(r.restore(&restored_d()).unwrap());
    assert_ne!(
        r.generation().unwrap(),
        g0,
        "a restore moves the generation"
    );
    assert_eq!(
        r.get(D).unwrap(),
        Some(restored_d()),
        "status and times kept"
    );
    // Blocked as it was: a registration of it is refused.
    assert_eq!(
        r.register(&rs(D, "D again", 90)).unwrap(),
        RegisterOutcome::Blocked
    );

    // An origin with a record already: nothing written, not even the
    // generation.
    let g1 = r.generation().unwrap();
    let other = RegisteredRecord {
        status: RegistrationStatus::Active,
        ..rs(D, "another D", 8)
    };
    assert!(!r.restore(&other).unwrap());
    assert_eq!(r.get(D).unwrap(), Some(restored_d()));
    assert_eq!(r.generation().unwrap(), g1);

    // A placeholder (an origin blocked before it registered) stays one:
    // unblocking it forgets it.
    let placeholder = RegisteredRecord {
        origin: E.into(),
        name: String::new(),
        resource_prefix: String::new(),
        jwks_uri: String::new(),
        token_endpoint: String::new(),
        status: RegistrationStatus::Blocked,
        registered_at: 3,
        updated_at: 3,
    };
    assert!(r.restore(&placeholder).unwrap());
    assert!(r.get(E).unwrap().unwrap().is_placeholder());
    assert_eq!(
        r.register(&rs(E, "E", 91)).unwrap(),
        RegisterOutcome::Blocked
    );
    assert!(r.unblock(E, 92).unwrap());
    assert_eq!(r.get(E).unwrap(), None);

    // An active record restored is served, and a registration refreshes
    // it keeping its first time.
    let active = RegisteredRecord {
        status: RegistrationStatus::Active,
        registered_at: 1,
        ..rs(E, "E", 2)
    };
    assert!(r.restore(&active).unwrap());
    assert_eq!(
        r.register(&rs(E, "E renamed", 93)).unwrap(),
        RegisterOutcome::Refreshed
    );
    let e = r.get(E).unwrap().unwrap();
    assert_eq!((e.registered_at, e.updated_at), (1, 93));
    assert!(r.remove(E).unwrap());
}

fn contract(store: &CsStore) {
    registrations_keep_their_contract(store);
    an_access_token_is_taken_once(store);
    a_restored_record_is_kept_as_given(store);
}

/// What the contract leaves: A, C, and D as restored.
fn left(store: &CsStore) {
    let listed: Vec<_> = store
        .registrations
        .list()
        .unwrap()
        .into_iter()
        .map(|x| x.origin)
        .collect();
    assert_eq!(listed, vec![A.to_owned(), C.to_owned(), D.to_owned()]);
    assert_eq!(store.registrations.get(D).unwrap(), Some(restored_d()));
}

#[test]
fn sled_keeps_the_registrations_contract() {
    let dir = tempfile::tempdir().unwrap();
    let (db, store) = sled_cs::open_dir(dir.path()).unwrap();
    contract(&store);
    // What was written is there after the database is opened again.
    drop(store);
    drop(db);
    let (_db, store) = sled_cs::open_dir(dir.path()).unwrap();
    left(&store);
}

#[test]
fn postgres_keeps_the_registrations_contract() {
    let Some(url) = cheq::store::pg::test_database_or_skip("store_registrations") else {
        return;
    };
    let pg = cheq::store::pg::Pg::new(&url, 8).unwrap();
    let store = cheq::store::pg::cs::open(&pg).unwrap();
    contract(&store);
    // A second instance on the same database reads the same records.
    let other = cheq::store::pg::cs::open(&cheq::store::pg::Pg::new(&url, 2).unwrap()).unwrap();
    left(&other);
    assert_eq!(
        other.registrations.generation().unwrap(),
        store.registrations.generation().unwrap()
    );
}
