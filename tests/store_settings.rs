//! Each user's CS and rules at the RS (`store::rs::Settings`, PROTOCOL.md
//! §17): one contract, run on sled and on PostgreSQL. A change is applied
//! once, with its operation's result, against the generation it was asked
//! against: a key seen before gives its result and writes nothing, a
//! generation that moved writes nothing; of racing changes against one
//! generation exactly one is applied. The CSes users chose are kept, in the
//! order first chosen, when users move on; settings list by page and
//! restore as given (an import's write).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::store::rs::{Applied, RsStore, UserSettings};
use cheq::store::{Durability, StoreError};
use serde_json::{json, Value};
use std::sync::{Arc, Barrier};

/// Issuers that sort in another order than the one they are chosen in.
const Z: &str = "https://z-cs.example";
const A: &str = "https://a-cs.example:8443";
const M: &str = "https://m-cs.example";
const D: &str = "https://d-cs.example";
const E: &str = "https://e-cs.example";

fn chose(cs: Option<&str>, rules: Value) -> UserSettings {
    UserSettings {
        cs: cs.map(str::to_owned),
        rules,
        // The store's to set: ignored by `apply`.
        generation: 99,
    }
}

/// Rules whose members are not in any sorted order: kept as given.
fn rules() -> Value {
    json!([{"tool": "transfer_funds", "param": "amount_usd", "above": 100, "assurance": "passkey"}])
}

fn apply(
    store: &RsStore,
    subject: &str,
    key: &str,
    expected: u64,
    settings: &UserSettings,
) -> Applied {
    let result = json!({"applied": key});
    store
        .settings
        .apply(subject, key, expected, settings, &result, Durability::Now)
        .unwrap()
}

fn hosts(store: &RsStore) -> Vec<String> {
    store.settings.hosts().unwrap()
}

fn owned(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

// ---- the contract, for any backend ----

fn a_change_is_applied_once(store: &RsStore) {
    let s = &store.settings;
    assert_eq!(s.get("alice").unwrap(), None, "nobody has settings yet");
    assert!(hosts(store).is_empty());

    let first = chose(Some(Z), rules());
    assert_eq!(apply(store, "alice", "k1", 0, &first), Applied::Fresh);
    let now = s.get("alice").unwrap().unwrap();
    assert_eq!(
        now,
        UserSettings {
            generation: 1,
            ..first.clone()
        }
    );
    assert_eq!(
        serde_json::to_string(&now.rules).unwrap(),
        serde_json::to_string(&rules()).unwrap(),
        "the rules are kept as given, their members in order"
    );
    assert_eq!(
        store.executions.get("k1").unwrap(),
        Some(json!({"applied": "k1"})),
        "the result is in the execution log"
    );
    assert_eq!(hosts(store), owned(&[Z]));

    // The same key again (a re-delivery): its result, nothing written,
    // whatever generation and settings it is asked with.
    for (subject, expected) in [("alice", 1), ("alice", 0), ("bob", 0)] {
        let other = chose(Some(M), json!([]));
        let got = s
            .apply(
                subject,
                "k1",
                expected,
                &other,
                &json!("another result"),
                Durability::Now,
            )
            .unwrap();
        assert_eq!(got, Applied::Existing(json!({"applied": "k1"})));
    }
    assert_eq!(s.get("alice").unwrap().unwrap().generation, 1);
    assert_eq!(s.get("bob").unwrap(), None);
    assert_eq!(
        store.executions.get("k1").unwrap(),
        Some(json!({"applied": "k1"}))
    );
    assert_eq!(hosts(store), owned(&[Z]), "the other CS is not a host");

    // A generation that moved: nothing written, the generation now said.
    for expected in [0, 2, 7] {
        let got = apply(store, "alice", "k2", expected, &chose(Some(M), json!([])));
        assert_eq!(got, Applied::Stale(1));
    }
    assert_eq!(
        apply(store, "bob", "k2", 1, &chose(Some(M), json!([]))),
        Applied::Stale(0)
    );
    assert_eq!(store.executions.get("k2").unwrap(), None, "no result");
    assert_eq!(s.get("alice").unwrap().unwrap().cs.as_deref(), Some(Z));
    assert_eq!(s.get("bob").unwrap(), None);
    assert_eq!(hosts(store), owned(&[Z]));

    // No generation past the largest: refused, nothing written.
    let refused = s.apply(
        "alice",
        "k-max",
        u64::MAX,
        &chose(Some(M), json!([])),
        &json!(1),
        Durability::Now,
    );
    assert!(
        matches!(refused, Err(StoreError::Backend { .. })),
        "{refused:?}"
    );
    assert_eq!(store.executions.get("k-max").unwrap(), None);
    assert_eq!(s.get("alice").unwrap().unwrap().generation, 1);
}

fn the_chosen_hosts_stay_in_order(store: &RsStore) {
    let s = &store.settings;
    // Alice moves on to A, Bob chooses A too, Alice goes back to the
    // default, then to Z again, Carol chooses M: each CS once, in the
    // order first chosen, none dropped.
    assert_eq!(
        apply(store, "alice", "k3", 1, &chose(Some(A), json!([]))),
        Applied::Fresh
    );
    assert_eq!(
        apply(store, "bob", "k4", 0, &chose(Some(A), json!([]))),
        Applied::Fresh
    );
    assert_eq!(hosts(store), owned(&[Z, A]));
    // Written unflushed: the result and settings are there all the same.
    assert_eq!(
        s.apply(
            "alice",
            "k5",
            2,
            &chose(None, rules()),
            &json!("back to the default"),
            Durability::Deferred,
        )
        .unwrap(),
        Applied::Fresh
    );
    if let Some(flusher) = &store.flusher {
        flusher.wait().unwrap();
    }
    assert_eq!(
        s.get("alice").unwrap().unwrap(),
        UserSettings {
            cs: None,
            rules: rules(),
            generation: 3
        }
    );
    assert_eq!(
        store.executions.get("k5").unwrap(),
        Some(json!("back to the default"))
    );
    assert_eq!(hosts(store), owned(&[Z, A]), "kept after moving on");
    assert_eq!(
        apply(store, "alice", "k6", 3, &chose(Some(Z), json!([]))),
        Applied::Fresh
    );
    assert_eq!(
        apply(store, "carol", "k7", 0, &chose(Some(M), json!([]))),
        Applied::Fresh
    );
    assert_eq!(hosts(store), owned(&[Z, A, M]));
    assert_eq!(s.get("alice").unwrap().unwrap().generation, 4);
}

fn settings_list_by_page(store: &RsStore) {
    let s = &store.settings;
    let subjects = |page: Vec<(String, UserSettings)>| -> Vec<String> {
        page.into_iter().map(|(subject, _)| subject).collect()
    };
    assert_eq!(
        subjects(s.list_after(None, 2).unwrap()),
        owned(&["alice", "bob"])
    );
    assert_eq!(
        subjects(s.list_after(Some("bob"), 2).unwrap()),
        owned(&["carol"])
    );
    assert!(s.list_after(Some("carol"), 2).unwrap().is_empty());
    let all = s.list_after(None, 10).unwrap();
    assert_eq!(all.len(), 3);
    for (subject, settings) in all {
        assert_eq!(s.get(&subject).unwrap(), Some(settings));
    }
}

fn settings_restore_as_given(store: &RsStore) {
    let s = &store.settings;
    let dave = UserSettings {
        cs: Some(D.to_owned()),
        rules: rules(),
        generation: 7,
    };
    s.restore("dave", &dave).unwrap();
    assert_eq!(
        s.get("dave").unwrap(),
        Some(dave.clone()),
        "its generation kept"
    );
    assert_eq!(hosts(store), owned(&[Z, A, M, D]));
    // A change goes on from the generation restored.
    assert_eq!(
        apply(store, "dave", "k8", 6, &chose(None, json!([]))),
        Applied::Stale(7)
    );
    assert_eq!(
        apply(store, "dave", "k8", 7, &chose(None, json!([]))),
        Applied::Fresh
    );
    assert_eq!(s.get("dave").unwrap().unwrap().generation, 8);

    // A host alone, after the others; one there already stays where it is.
    s.restore_host(E).unwrap();
    s.restore_host(Z).unwrap();
    assert_eq!(hosts(store), owned(&[Z, A, M, D, E]));
    // Settings of a user of the default CS add no host.
    let erin = UserSettings {
        cs: None,
        rules: json!([]),
        generation: 2,
    };
    s.restore("erin", &erin).unwrap();
    assert_eq!(s.get("erin").unwrap(), Some(erin));
    assert_eq!(hosts(store).len(), 5);
}

/// Eight callers apply a change to `subject` against generation `expected`
/// at once, each under its own key: one is applied, the others find the
/// generation moved, and only the winner's result is in the log.
fn racing_changes_apply_once(store: &RsStore, subject: &str, expected: u64, tag: &str) {
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (store, barrier) = (store.clone(), barrier.clone());
            let (subject, key) = (subject.to_owned(), format!("{tag}-{i}"));
            let cs = format!("https://cs-{tag}-{i}.example");
            std::thread::spawn(move || {
                let settings = chose(Some(&cs), json!([i]));
                barrier.wait();
                let got = store
                    .settings
                    .apply(
                        &subject,
                        &key,
                        expected,
                        &settings,
                        &json!(i),
                        Durability::Now,
                    )
                    .unwrap();
                (i, got)
            })
        })
        .collect();
    let outcomes: Vec<(usize, Applied)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let fresh: Vec<usize> = outcomes
        .iter()
        .filter(|(_, got)| *got == Applied::Fresh)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(fresh.len(), 1, "exactly one applied: {outcomes:?}");
    let winner = fresh[0];
    for (i, got) in &outcomes {
        if *i != winner {
            assert_eq!(*got, Applied::Stale(expected + 1), "caller {i}");
        }
    }
    let now = store.settings.get(subject).unwrap().unwrap();
    assert_eq!((now.generation, now.rules), (expected + 1, json!([winner])));
    for i in 0..8 {
        let result = store.executions.get(&format!("{tag}-{i}")).unwrap();
        assert_eq!(result, (i == winner).then(|| json!(i)), "the result of {i}");
    }
    let winner_cs = format!("https://cs-{tag}-{winner}.example");
    let chosen: Vec<String> = hosts(store)
        .into_iter()
        .filter(|h| h.starts_with(&format!("https://cs-{tag}-")))
        .collect();
    assert_eq!(chosen, vec![winner_cs], "only the winner's CS is a host");
}

/// Eight callers deliver the same change at once (one key): one applies
/// it, the others get its result.
fn a_change_delivered_at_once_is_applied_once(store: &RsStore) {
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (store, barrier) = (store.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                store
                    .settings
                    .apply(
                        "grace",
                        "same-key",
                        0,
                        &chose(Some(M), json!([])),
                        &json!("done"),
                        Durability::Now,
                    )
                    .unwrap()
            })
        })
        .collect();
    let outcomes: Vec<Applied> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(outcomes.iter().filter(|o| **o == Applied::Fresh).count(), 1);
    for o in outcomes.iter().filter(|o| **o != Applied::Fresh) {
        assert_eq!(*o, Applied::Existing(json!("done")));
    }
    assert_eq!(store.settings.get("grace").unwrap().unwrap().generation, 1);
}

fn contract(store: &RsStore) {
    a_change_is_applied_once(store);
    the_chosen_hosts_stay_in_order(store);
    settings_list_by_page(store);
    settings_restore_as_given(store);
    // Against a user with none (an insert), then against one with some
    // (an update).
    racing_changes_apply_once(store, "frank", 0, "first");
    racing_changes_apply_once(store, "frank", 1, "next");
    a_change_delivered_at_once_is_applied_once(store);
}

/// What the contract leaves, as a second opening of the store reads it.
fn left(store: &RsStore) {
    let alice = store.settings.get("alice").unwrap().unwrap();
    assert_eq!((alice.cs.as_deref(), alice.generation), (Some(Z), 4));
    assert_eq!(&hosts(store)[..5], &owned(&[Z, A, M, D, E])[..]);
    assert_eq!(
        store.executions.get("k5").unwrap(),
        Some(json!("back to the default"))
    );
}

// ---- sled ----

#[test]
fn sled_meets_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let (db, store) = cheq::store::sled_rs::open_dir(dir.path()).unwrap();
    contract(&store);
    drop(store);
    drop(db);
    let (_db, store) = cheq::store::sled_rs::open_dir(dir.path()).unwrap();
    left(&store);
}

/// A value that cannot be read is an error, never a guess, and a change
/// against it writes nothing.
#[test]
fn sled_refuses_what_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let (db, store) = cheq::store::sled_rs::open_dir(dir.path()).unwrap();
    db.open_tree("rs.settings")
        .unwrap()
        .insert("mallory", &b"{not json"[..])
        .unwrap();
    assert!(matches!(
        store.settings.get("mallory"),
        Err(StoreError::Corrupt { .. })
    ));
    let got = store.settings.apply(
        "mallory",
        "km",
        0,
        &chose(Some(Z), json!([])),
        &json!(1),
        Durability::Now,
    );
    assert!(matches!(got, Err(StoreError::Corrupt { .. })), "{got:?}");
    assert_eq!(store.executions.get("km").unwrap(), None);
    assert!(hosts(&store).is_empty());
    // A stored result that cannot be read, under the key asked with.
    db.open_tree("rs.executions")
        .unwrap()
        .insert("kx", &b"\xff"[..])
        .unwrap();
    let got = store.settings.apply(
        "nina",
        "kx",
        0,
        &chose(None, json!([])),
        &json!(1),
        Durability::Now,
    );
    assert!(matches!(got, Err(StoreError::Corrupt { .. })), "{got:?}");
    assert_eq!(store.settings.get("nina").unwrap(), None);
    // A host's order that is not 8 bytes.
    db.open_tree("rs.hosts")
        .unwrap()
        .insert(Z, &b"x"[..])
        .unwrap();
    assert!(matches!(
        store.settings.hosts(),
        Err(StoreError::Corrupt { .. })
    ));
}

// ---- PostgreSQL ----

#[test]
fn postgres_meets_the_contract() {
    let Some(url) = cheq::store::pg::test_database_or_skip("store_settings") else {
        return;
    };
    let store = cheq::store::pg::rs::open(&cheq::store::pg::Pg::new(&url, 16).unwrap()).unwrap();
    contract(&store);
    // A second instance on the same database reads the same.
    let other = cheq::store::pg::rs::open(&cheq::store::pg::Pg::new(&url, 2).unwrap()).unwrap();
    left(&other);
}

/// Two instances racing: one change applied across both.
#[test]
fn postgres_applies_a_change_once_across_instances() {
    let Some(url) = cheq::store::pg::test_database_or_skip("store_settings_two") else {
        return;
    };
    let one = cheq::store::pg::rs::open(&cheq::store::pg::Pg::new(&url, 8).unwrap()).unwrap();
    let two = cheq::store::pg::rs::open(&cheq::store::pg::Pg::new(&url, 8).unwrap()).unwrap();
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let store = if i % 2 == 0 { one.clone() } else { two.clone() };
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                store
                    .settings
                    .apply(
                        "ivan",
                        &format!("two-{i}"),
                        0,
                        &chose(Some(Z), json!([i])),
                        &json!(i),
                        Durability::Now,
                    )
                    .unwrap()
            })
        })
        .collect();
    let outcomes: Vec<Applied> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == Applied::Fresh).count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| **o == Applied::Stale(1)).count(),
        7,
        "{outcomes:?}"
    );
    assert_eq!(two.settings.hosts().unwrap(), owned(&[Z]));
}
