//! Moving a host's data (`cheq store export`, `cheq store import`): the
//! `cheq` binary run as an operator would, on configurations of both
//! servers, from sled to PostgreSQL and back to sled, every item compared;
//! what a decided nonce is after the move (still decided), a registered
//! resource server (as it was: blocked stays blocked) and an initial access
//! token (usable once); and the streams and stores an import refuses (a
//! store not empty, a line garbled or cut, a registration or token line
//! malformed, a stream of the other server, an unknown version), each
//! naming why.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::cheq::{Channel, Decision};
use cheq::configfile::ServerConfig as _;
use cheq::confirm::registration::token_digest;
use cheq::confirm::CsConfig;
use cheq::resource::RsConfig;
use cheq::store::cs::{
    Account, Claim, ConfirmationEntry, CsStore, DecisionRecord, Delivery, ExternalId, RecordKey,
    Refusal,
};
use cheq::store::export::Item;
use cheq::store::registrations::{RegisterOutcome, RegisteredRecord, RegistrationStatus};
use cheq::store::rs::{Applied, CheqRecord, CheqState, RsStore, UserSettings};
use cheq::store::{NonceEntry, RecordOutcome};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const RS_A: &str = "https://rs-a.example";
const RS_B: &str = "https://rs-b.example";
/// Resource servers that registered themselves at the CS (§16.3): one
/// served, one blocked after it registered, one blocked before it ever did.
const REG_ACTIVE: &str = "https://active.example";
const REG_BLOCKED: &str = "https://blocked.example:8443";
const REG_NEVER: &str = "https://never.example";

// ---- configurations and the binary ----

/// A CS configuration over `data_dir`, on PostgreSQL when `database` is given.
fn cs_toml(dir: &Path, data_dir: &str, database: Option<&str>) -> PathBuf {
    let database = database
        .map(|url| format!("database_url = \"{url}\"\n"))
        .unwrap_or_default();
    let text = format!(
        "{database}listen = \"127.0.0.1:0\"\npublic_url = \"http://127.0.0.1:9/\"\n\
         data_dir = \"{}\"\nsigning_key = \"{}\"\n\n[[resource_servers]]\n\
         origin = \"http://127.0.0.1:8\"\npath_prefix = \"/cheq/confirmations/\"\n\
         jwks = \"{}\"\ntoken_url = \"http://127.0.0.1:8/oauth/token\"\n\
         client_id = \"cs\"\nclient_secret = \"a secret of the CS\"\n",
        dir.join(data_dir).display(),
        dir.join("cs.jwk").display(),
        dir.join("rs.jwks").display(),
    );
    let path = dir.join(format!("{data_dir}.cs.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// An RS configuration over `data_dir`, on PostgreSQL when `database` is given.
fn rs_toml(dir: &Path, data_dir: &str, database: Option<&str>) -> PathBuf {
    let database = database
        .map(|url| format!("database_url = \"{url}\"\n"))
        .unwrap_or_default();
    let text = format!(
        "{database}listen = \"127.0.0.1:0\"\npublic_url = \"http://127.0.0.1:8\"\n\
         data_dir = \"{}\"\nsigning_key = \"{}\"\n\n[confirmation_server]\n\
         uri = \"http://127.0.0.1:9/\"\njwks_file = \"{}\"\n",
        dir.join(data_dir).display(),
        dir.join("rs.jwk").display(),
        dir.join("cs.jwks").display(),
    );
    let path = dir.join(format!("{data_dir}.rs.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `cheq` with `args`, `stdin` as its input; no database from the
/// environment (each configuration says where its store is).
fn cheq(args: &[&str], stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_cheq"))
        .args(args)
        .env_remove("CHEQ_DATABASE_URL")
        .env_remove("CHEQ_DATA_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "cheq failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The one-line reason of a refusal (exit code 1).
fn refused(out: Output) -> String {
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "not refused: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

fn export(config: &Path) -> String {
    ok(cheq(
        &["store", "export", "--config", config.to_str().unwrap()],
        b"",
    ))
}

fn import(config: &Path, stream: &[u8]) -> Output {
    cheq(
        &["store", "import", "--config", config.to_str().unwrap()],
        stream,
    )
}

fn import_file(config: &Path, file: &Path) -> Output {
    cheq(
        &[
            "store",
            "import",
            "--config",
            config.to_str().unwrap(),
            "--in",
            file.to_str().unwrap(),
        ],
        b"",
    )
}

/// The header of an export, checked, and its items' lines in order of
/// their text (the backends list in different orders).
fn items(stream: &str, server: &str) -> Vec<String> {
    let lines: Vec<&str> = stream.lines().collect();
    let header: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(header["format"], "cheq-store-export");
    assert_eq!(header["version"], 2);
    assert_eq!(header["server"], server);
    assert!(header["exported_at"].as_str().unwrap().ends_with('Z'));
    let end: serde_json::Value = serde_json::from_str(lines[lines.len() - 1]).unwrap();
    assert_eq!(end, json!({"kind": "end", "items": lines.len() - 2}));
    let mut items: Vec<String> = lines[1..lines.len() - 1]
        .iter()
        .map(|l| (*l).to_owned())
        .collect();
    items.sort();
    items
}

fn lines_of(items: &[Item]) -> Vec<String> {
    let mut lines: Vec<String> = items.iter().map(|i| i.to_line().unwrap()).collect();
    lines.sort();
    lines
}

// ---- what a CS holds ----

fn decision(origin: &str, nonce: &str, user: &str, at: i64, delivery: Delivery) -> DecisionRecord {
    DecisionRecord {
        nonce: nonce.into(),
        user: user.into(),
        resource_uri: format!("{origin}/cheq/confirmations/{nonce}"),
        resource_origin: origin.into(),
        operation: format!("{origin}/op"),
        operation_name: "Pay".into(),
        decision: Decision::Accept,
        channel: Channel::Html,
        decided_at: at,
        expires: at + 600,
        document: format!(r#"{{"payload":"{nonce}","signatures":[]}}"#),
        delivery,
        sealed: false,
        collected_hmac: Default::default(),
        log_digest: None,
    }
}

fn cs_store(config: &Path) -> CsStore {
    let text = std::fs::read_to_string(config).unwrap();
    let config = CsConfig::from_toml(&text).unwrap();
    cheq::confirm::server::open_store(&config).unwrap().0
}

fn rs_store(config: &Path) -> RsStore {
    let text = std::fs::read_to_string(config).unwrap();
    let config = RsConfig::from_toml(&text).unwrap();
    cheq::resource::server::open_store(&config).unwrap().0
}

/// Fills a CS store with one of everything it keeps for good; returns the
/// items an export of it must hold, and the kept (collected) decision.
fn fill_cs(store: &CsStore) -> (Vec<Item>, DecisionRecord) {
    let accounts = vec![
        Account {
            username: "alice".into(),
            email: Some("alice@example.com".into()),
            password_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
            pin_hash: Some("$argon2id$v=19$m=19456,t=2,p=1$cGlu$cGlu".into()),
            external: None,
            user_handle: None,
            passkeys: Vec::new(),
        },
        Account {
            username: "bob".into(),
            email: None,
            password_hash: "$argon2id$v=19$m=19456,t=2,p=1$Ym9i$Ym9i".into(),
            pin_hash: None,
            external: None,
            user_handle: None,
            passkeys: Vec::new(),
        },
        Account {
            username: "carol@idp".into(),
            email: Some("carol@example.org".into()),
            password_hash: String::new(),
            pin_hash: None,
            external: Some(ExternalId {
                issuer: "https://idp.example".into(),
                subject: "c-123".into(),
            }),
            user_handle: None,
            passkeys: Vec::new(),
        },
    ];
    let mut out = Vec::new();
    for a in &accounts {
        store.accounts.put(a, false).unwrap();
        out.push(Item::Account(a.clone()));
    }
    let entry = ConfirmationEntry {
        resource_uri: format!("{RS_A}/cheq/confirmations/started"),
        created: 1_700_000_000,
        document: None,
    };
    store.entries.start("entry-1", &entry).unwrap();
    out.push(Item::Entry {
        id: "entry-1".into(),
        entry,
    });

    let pending = decision(
        RS_A,
        "n-pending",
        "alice",
        1_900_000_000,
        Delivery::Pending {
            attempts: 2,
            next_try: 1_900_000_030,
            last_error: Some("connection refused".into()),
        },
    );
    let mut sealed = decision(
        RS_A,
        "n-sealed",
        "alice",
        1_900_000_100,
        Delivery::Pending {
            attempts: 0,
            next_try: 1_900_000_100,
            last_error: None,
        },
    );
    sealed.sealed = true;
    sealed.document = "c2VhbGVkIGJ5IGEga2V5IGZpbGU".into();
    let mut refused = decision(
        RS_B,
        "n-refused",
        "bob",
        1_900_000_200,
        Delivery::Refused {
            refusal: Refusal::ResourceServer {
                status: 409,
                error: "conflict".into(),
                description: "already decided".into(),
            },
            at: 1_900_000_201,
        },
    );
    refused.decision = Decision::Reject;
    refused.channel = Channel::Voice;
    refused
        .collected_hmac
        .insert("amount".into(), "aG1hYw".into());
    // The same nonce at another RS is another decision (§6).
    let same_nonce = decision(
        RS_B,
        "n-pending",
        "bob",
        1_900_000_300,
        Delivery::Delivered {
            decision: Decision::Accept,
            at: 1_900_000_301,
        },
    );
    // Old history, collected before the move: only its key stays.
    let old = decision(
        RS_A,
        "n-old",
        "alice",
        1_000,
        Delivery::Expired { at: 1_700 },
    );
    for r in [&pending, &sealed, &refused, &same_nonce, &old] {
        assert_eq!(store.records.claim(r).unwrap(), Claim::Fresh);
    }
    assert_eq!(store.records.collect_decided_before(1_000_000).unwrap(), 1);
    for r in [pending, sealed, refused, same_nonce] {
        out.push(Item::Decision(Box::new(r)));
    }
    out.push(Item::Collected {
        id: old.key().id(),
        decided_at: old.decided_at,
    });
    out.extend(fill_registrations(store));
    (out, old)
}

/// A registration of `origin` as the CS reads it from the RS's document.
fn registered(origin: &str, name: &str, at: i64) -> RegisteredRecord {
    RegisteredRecord {
        origin: origin.into(),
        name: name.into(),
        resource_prefix: format!("{origin}/cheq/confirmations/"),
        jwks_uri: format!("{origin}/.well-known/jwks.json"),
        token_endpoint: format!("{origin}/oauth/token"),
        status: RegistrationStatus::Active,
        registered_at: at,
        updated_at: at,
    }
}

/// Registers three RSes (one served, refreshed since; one blocked after it
/// registered; one blocked before it ever did) and issues three initial
/// access tokens, one of them used; returns the items an export must hold.
fn fill_registrations(store: &CsStore) -> Vec<Item> {
    let r = &store.registrations;
    let register = |record: RegisteredRecord| {
        assert_ne!(r.register(&record).unwrap(), RegisterOutcome::Blocked)
    };
    register(registered(REG_ACTIVE, "Active", 1_800_000_000));
    register(registered(REG_ACTIVE, "Active, renamed", 1_800_000_500));
    register(registered(REG_BLOCKED, "Blocked", 1_800_000_100));
    assert!(r.block(REG_BLOCKED, 1_800_000_200).unwrap());
    assert!(r.block(REG_NEVER, 1_800_000_300).unwrap());
    for (token, at) in [
        ("tok-unused", 1_800_000_010),
        ("tok-used", 1_800_000_020),
        ("tok-later", 1_800_000_030),
    ] {
        assert!(r.add_access_token(&token_digest(token), at).unwrap());
    }
    assert!(r.take_access_token(&token_digest("tok-used")).unwrap());

    let records = [
        RegisteredRecord {
            registered_at: 1_800_000_000,
            ..registered(REG_ACTIVE, "Active, renamed", 1_800_000_500)
        },
        RegisteredRecord {
            status: RegistrationStatus::Blocked,
            registered_at: 1_800_000_100,
            ..registered(REG_BLOCKED, "Blocked", 1_800_000_200)
        },
        RegisteredRecord {
            origin: REG_NEVER.into(),
            name: String::new(),
            resource_prefix: String::new(),
            jwks_uri: String::new(),
            token_endpoint: String::new(),
            status: RegistrationStatus::Blocked,
            registered_at: 1_800_000_300,
            updated_at: 1_800_000_300,
        },
    ];
    let mut out: Vec<Item> = records
        .into_iter()
        .map(|r| Item::Registration(Box::new(r)))
        .collect();
    for (token, created) in [("tok-unused", 1_800_000_010), ("tok-later", 1_800_000_030)] {
        out.push(Item::AccessToken {
            digest: token_digest(token),
            created,
        });
    }
    out
}

/// After the move the registrations are as they were: the served RS is
/// served (a registration refreshes it, keeping its first time), a blocked
/// origin is refused, an unused token is taken once and a used one never;
/// and the generation moved, so that an instance polling it reloads.
fn registrations_stay(store: &CsStore) {
    let r = &store.registrations;
    assert_ne!(r.generation().unwrap(), 0, "a new store's generation is 0");
    for origin in [REG_BLOCKED, REG_NEVER] {
        assert_eq!(
            r.register(&registered(origin, "again", 1_950_000_000))
                .unwrap(),
            RegisterOutcome::Blocked,
            "{origin} registered again after the move"
        );
        assert_eq!(
            r.get(origin).unwrap().unwrap().status,
            RegistrationStatus::Blocked
        );
    }
    assert_eq!(
        r.register(&registered(REG_ACTIVE, "Active", 1_950_000_000))
            .unwrap(),
        RegisterOutcome::Refreshed
    );
    assert_eq!(
        r.get(REG_ACTIVE).unwrap().unwrap().registered_at,
        1_800_000_000
    );
    assert!(r.take_access_token(&token_digest("tok-unused")).unwrap());
    assert!(
        !r.take_access_token(&token_digest("tok-unused")).unwrap(),
        "a token used twice"
    );
    assert!(
        !r.take_access_token(&token_digest("tok-used")).unwrap(),
        "a used token came back"
    );
    assert!(r.take_access_token(&token_digest("tok-later")).unwrap());
}

/// A decision already taken before the move is refused after it: the same
/// key claimed again finds the record (or, collected, finds it collected),
/// never a fresh claim.
fn decided_keys_stay_decided(store: &CsStore, collected: &DecisionRecord) {
    let mut again = decision(
        RS_A,
        "n-pending",
        "mallory",
        1_950_000_000,
        Delivery::Pending {
            attempts: 0,
            next_try: 0,
            last_error: None,
        },
    );
    again.decision = Decision::Reject;
    match store.records.claim(&again).unwrap() {
        Claim::Existing(old) => {
            assert_eq!(old.user, "alice");
            assert_eq!(old.decision, Decision::Accept);
        }
        other => panic!("a decided nonce was claimed again after the move: {other:?}"),
    }
    let mut collected_again = collected.clone();
    collected_again.decided_at = 1_950_000_000;
    assert_eq!(
        store.records.claim(&collected_again).unwrap(),
        Claim::Collected,
        "a nonce collected as old history was claimed again after the move"
    );
    // A nonce never decided still is claimed (the store works).
    let fresh = decision(
        RS_A,
        "n-new",
        "alice",
        1_950_000_000,
        Delivery::Expired { at: 1 },
    );
    assert_eq!(store.records.claim(&fresh).unwrap(), Claim::Fresh);
    let pending = store
        .records
        .get(&RecordKey::new(RS_A, "n-pending"))
        .unwrap();
    assert!(pending.unwrap().delivery.is_pending(), "the outbox moved");
}

#[test]
fn a_confirmation_server_moves_from_sled_to_postgresql_and_back() {
    let Some(url) = cheq::store::pg::test_database_or_skip("store_export_cs") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let from = cs_toml(dir.path(), "from", None);
    let expected = {
        let store = cs_store(&from);
        fill_cs(&store)
    };
    let (expected, collected) = (lines_of(&expected.0), expected.1);

    // Out of sled, into a file only its owner reads.
    let file = dir.path().join("cs.jsonl");
    let said = ok(cheq(
        &[
            "store",
            "export",
            "--config",
            from.to_str().unwrap(),
            "--out",
            file.to_str().unwrap(),
        ],
        b"",
    ));
    assert!(
        said.starts_with(
            "exported 14 items (3 account, 1 collected, 4 decision, 1 entry, \
             2 initial_access_token, 3 registration)"
        ),
        "{said}"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let first = std::fs::read_to_string(&file).unwrap();
    assert_eq!(items(&first, "cs"), expected, "the export holds every item");

    // Into PostgreSQL, and out of it.
    let pg = cs_toml(dir.path(), "pg", Some(&url));
    let said = ok(import_file(&pg, &file));
    assert!(
        said.contains("into the store of a confirmation server (PostgreSQL)"),
        "{said}"
    );
    let second = export(&pg);
    assert_eq!(
        items(&second, "cs"),
        expected,
        "PostgreSQL holds every item"
    );

    // An import into a store that holds anything is refused, saying what.
    let e = refused(import_file(&pg, &file));
    assert!(
        e.contains("the store is not empty: it holds accounts"),
        "{e}"
    );

    // Back into a new sled directory, from standard input.
    let back = cs_toml(dir.path(), "back", None);
    ok(import(&back, second.as_bytes()));
    let third = export(&back);
    assert_eq!(items(&third, "cs"), expected, "sled again holds every item");

    let pg_store = {
        let pool = cheq::store::pg::Pg::new(&url, 6).unwrap();
        cheq::store::pg::cs::open(&pool).unwrap()
    };
    decided_keys_stay_decided(&pg_store, &collected);
    registrations_stay(&pg_store);
    let back = cs_store(&back);
    decided_keys_stay_decided(&back, &collected);
    registrations_stay(&back);
}

// ---- what an RS holds ----

fn cheq_record(id: &str, state: CheqState) -> CheqRecord {
    let pending = state == CheqState::Pending;
    CheqRecord {
        id: id.into(),
        result_id: format!("result-{id}"),
        resource_uri: format!("{RS_A}/cheq/confirmations/{id}"),
        nonce: format!("nonce-{id}"),
        expires: 1_900_000_000,
        document: if pending {
            format!(r#"{{"payload":"{id}","signatures":[{{"protected":"x"}}]}}"#)
        } else {
            String::new()
        },
        action: if pending {
            json!({"tool": "pay", "amount": 12.5})
        } else {
            serde_json::Value::Null
        },
        state,
    }
}

fn nonce_entry(digest: u8, data: &[u8]) -> NonceEntry {
    NonceEntry {
        digest: [digest; 32],
        expires_at: 1_900_000_000,
        data: data.to_vec(),
    }
}

/// Fills an RS store; returns the items an export of it must hold.
fn fill_rs(store: &RsStore) -> Vec<Item> {
    let mut out = Vec::new();
    let records = [
        cheq_record("c-pending", CheqState::Pending),
        cheq_record(
            "c-decided",
            CheqState::Decided {
                decision: Decision::Accept,
                digest: "ZGlnZXN0".into(),
            },
        ),
        cheq_record(
            "c-done",
            CheqState::Done {
                decision: Decision::Accept,
                digest: "ZG9uZQ".into(),
                result: Some(json!({"booked": "LH 123", "price": {"usd": 340}})),
            },
        ),
        cheq_record(
            "c-rejected",
            CheqState::Done {
                decision: Decision::Reject,
                digest: "cmVq".into(),
                result: None,
            },
        ),
    ];
    for r in records {
        assert!(store.records.create(&r).unwrap());
        out.push(Item::Cheq(Box::new(r)));
    }
    for (nonce, entry) in [
        ("nonce-c-decided", nonce_entry(1, b"accept")),
        ("nonce-c-done", nonce_entry(2, b"accept")),
        ("nonce-c-rejected", nonce_entry(3, b"")),
    ] {
        assert_eq!(
            store.nonces.record(nonce, &entry).unwrap(),
            RecordOutcome::Fresh
        );
        out.push(Item::Nonce {
            nonce: nonce.into(),
            entry,
        });
    }
    let result = json!({"sent": true, "to": "bob@example.com"});
    store.executions.record("c-done", &result).unwrap();
    out.push(Item::Execution {
        key: "c-done".into(),
        result,
    });
    out.extend(fill_settings(store));
    out
}

/// CSes users chose (§17), in another order than their names': Z first.
const CS_Z: &str = "https://z-cs.example";
const CS_A: &str = "https://a-cs.example:8443";

/// Alice's rules once she went back to the RS's default CS: members in
/// no sorted order, kept as written.
fn alice_rules() -> serde_json::Value {
    json!([{"tool": "pay", "param": "amount", "above": 50, "assurance": "passkey"}])
}

/// Each user's CS and rules, each change applied with its result: Alice
/// chose Z, then A, then went back to the default; Bob chose A. Returns
/// the items an export of them holds.
fn fill_settings(store: &RsStore) -> Vec<Item> {
    let changes = [
        ("alice", "chg-1", 0, Some(CS_Z), json!([])),
        ("alice", "chg-2", 1, Some(CS_A), json!([])),
        ("alice", "chg-3", 2, None, alice_rules()),
        ("bob", "chg-4", 0, Some(CS_A), json!([])),
    ];
    let mut out = Vec::new();
    for (subject, key, expected, cs, rules) in changes {
        let settings = UserSettings {
            cs: cs.map(str::to_owned),
            rules,
            generation: 0,
        };
        let result = json!({"changed": key});
        let applied = store
            .settings
            .apply(
                subject,
                key,
                expected,
                &settings,
                &result,
                cheq::store::Durability::Now,
            )
            .unwrap();
        assert_eq!(applied, Applied::Fresh);
        out.push(Item::Execution {
            key: key.into(),
            result,
        });
    }
    out.push(Item::ChosenCs(CS_Z.into()));
    out.push(Item::ChosenCs(CS_A.into()));
    out.push(Item::Settings {
        subject: "alice".into(),
        settings: UserSettings {
            cs: None,
            rules: alice_rules(),
            generation: 3,
        },
    });
    out.push(Item::Settings {
        subject: "bob".into(),
        settings: UserSettings {
            cs: Some(CS_A.into()),
            rules: json!([]),
            generation: 1,
        },
    });
    out
}

/// After the move, each user's settings are as they were: the CSes in
/// the order first chosen, a change delivered again finds its result, and
/// one asked against the generation of before the last change is stale.
fn settings_stay(store: &RsStore) {
    let s = &store.settings;
    assert_eq!(s.hosts().unwrap(), vec![CS_Z.to_owned(), CS_A.to_owned()]);
    let alice = s.get("alice").unwrap().unwrap();
    assert_eq!((alice.cs, alice.generation), (None, 3));
    assert_eq!(
        serde_json::to_string(&alice.rules).unwrap(),
        serde_json::to_string(&alice_rules()).unwrap()
    );
    let again = UserSettings {
        cs: Some(CS_Z.into()),
        rules: json!([]),
        generation: 0,
    };
    let now = cheq::store::Durability::Now;
    assert_eq!(
        s.apply("alice", "chg-2", 1, &again, &json!(0), now)
            .unwrap(),
        Applied::Existing(json!({"changed": "chg-2"}))
    );
    assert_eq!(
        s.apply("alice", "chg-9", 2, &again, &json!(0), now)
            .unwrap(),
        Applied::Stale(3)
    );
    assert_eq!(store.executions.get("chg-9").unwrap(), None);
}

/// After the move, a nonce decided before it is decided: the same document
/// again is the same decision, another is a conflict, never fresh.
fn decided_nonces_stay_decided(store: &RsStore) {
    let entry = nonce_entry(2, b"accept");
    assert_eq!(
        store.nonces.get("nonce-c-done").unwrap(),
        Some(entry.clone())
    );
    assert!(matches!(
        store.nonces.record("nonce-c-done", &entry).unwrap(),
        RecordOutcome::SameAsBefore(_)
    ));
    match store
        .nonces
        .record("nonce-c-done", &nonce_entry(9, b"reject"))
        .unwrap()
    {
        RecordOutcome::Conflict(old) => assert_eq!(old, entry),
        other => panic!("a decided nonce was fresh again after the move: {other:?}"),
    }
    // The execution log still holds the effect: it does not run again.
    assert!(matches!(
        store
            .executions
            .record("c-done", &json!({"sent": "again"}))
            .unwrap(),
        cheq::store::rs::Execution::Existing(_)
    ));
    let done = store.records.by_result("result-c-done").unwrap().unwrap();
    assert_eq!(done.state.decision(), Some(Decision::Accept));
}

#[test]
fn a_resource_server_moves_from_sled_to_postgresql_and_back() {
    let Some(url) = cheq::store::pg::test_database_or_skip("store_export_rs") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let from = rs_toml(dir.path(), "from", None);
    let expected = lines_of(&fill_rs(&rs_store(&from)));

    let first = export(&from);
    assert_eq!(items(&first, "rs"), expected, "the export holds every item");

    let pg = rs_toml(dir.path(), "pg", Some(&url));
    let said = ok(import(&pg, first.as_bytes()));
    assert!(said.starts_with("imported 16 items (4 cheq, 2 chosen_cs, 5 execution, 3 nonce, 2 settings) into the store of a resource server (PostgreSQL)"), "{said}");
    let second = export(&pg);
    assert_eq!(
        items(&second, "rs"),
        expected,
        "PostgreSQL holds every item"
    );
    let e = refused(import(&pg, first.as_bytes()));
    assert!(e.contains("the store is not empty: it holds nonces"), "{e}");

    let back = rs_toml(dir.path(), "back", None);
    ok(import(&back, second.as_bytes()));
    let third = export(&back);
    assert_eq!(items(&third, "rs"), expected, "sled again holds every item");

    let pg_store = {
        let pool = cheq::store::pg::Pg::new(&url, 6).unwrap();
        cheq::store::pg::rs::open(&pool).unwrap()
    };
    decided_nonces_stay_decided(&pg_store);
    settings_stay(&pg_store);
    let back = rs_store(&back);
    decided_nonces_stay_decided(&back);
    settings_stay(&back);
}

// ---- what an import refuses (sled only: these need no database) ----

/// An RS export of a few items, and a directory for configurations.
fn rs_export() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let from = rs_toml(dir.path(), "from", None);
    fill_rs(&rs_store(&from));
    let stream = export(&from);
    (dir, stream)
}

#[test]
fn an_import_into_a_store_that_holds_anything_is_refused() {
    let (dir, stream) = rs_export();
    let to = rs_toml(dir.path(), "to", None);
    // One execution is enough to make a store not empty.
    rs_store(&to).executions.record("k", &json!(1)).unwrap();
    let e = refused(import(&to, stream.as_bytes()));
    assert!(
        e.contains("the store is not empty: it holds executions (the first: \"k\")"),
        "{e}"
    );
    // Nothing was written.
    assert_eq!(items(&export(&to), "rs").len(), 1);
}

#[test]
fn a_garbled_or_cut_stream_is_refused_by_line_and_nothing_is_written() {
    let (dir, stream) = rs_export();
    let lines: Vec<&str> = stream.lines().collect();
    let to = rs_toml(dir.path(), "to", None);

    // Line 4 cut in half, as a truncated copy would be, in a file: the
    // whole file is checked before anything is written.
    let mut garbled = lines.clone();
    let half = &lines[3][..lines[3].len() / 2];
    garbled[3] = half;
    let file = dir.path().join("garbled.jsonl");
    std::fs::write(&file, garbled.join("\n") + "\n").unwrap();
    let e = refused(import_file(&to, &file));
    assert!(e.contains("line 4: the line is not JSON"), "{e}");
    assert!(
        items(&export(&to), "rs").is_empty(),
        "a refused file wrote items"
    );

    // Cut at a line boundary: the end line is missing.
    let cut = lines[..lines.len() - 1].join("\n") + "\n";
    let file = dir.path().join("cut.jsonl");
    std::fs::write(&file, &cut).unwrap();
    let e = refused(import_file(&to, &file));
    assert!(e.contains("without its end line: it was cut short"), "{e}");
    assert!(
        items(&export(&to), "rs").is_empty(),
        "a refused file wrote items"
    );

    // From standard input a stream is read once: the error says the line,
    // and that what came before it is written.
    let e = refused(import(&to, (garbled.join("\n") + "\n").as_bytes()));
    assert!(e.contains("line 4: the line is not JSON"), "{e}");
    assert!(e.contains("the store holds the items read before"), "{e}");
}

#[test]
fn an_export_of_the_other_server_or_of_an_unknown_version_is_refused() {
    let (dir, stream) = rs_export();
    let cs = cs_toml(dir.path(), "cs", None);
    let e = refused(import(&cs, stream.as_bytes()));
    assert!(
        e.contains(
            "line 1: this is an export of a resource server, and the configuration is of a \
             confirmation server"
        ),
        "{e}"
    );
    let rs = rs_toml(dir.path(), "rs", None);
    let newer = stream.replacen("\"version\":2", "\"version\":3", 1);
    let e = refused(import(&rs, newer.as_bytes()));
    assert!(
        e.contains(
            "line 1: version 3 of the export format is unknown to this cheq, which reads \
             versions 1 to 2"
        ),
        "{e}"
    );
    // A CS item in an RS stream, even with the right header.
    let mut lines: Vec<&str> = stream.lines().collect();
    let account = r#"{"kind":"account","username":"eve","password_hash":"x"}"#;
    lines.insert(1, account);
    let e = refused(import(&rs, (lines.join("\n") + "\n").as_bytes()));
    assert!(
        e.contains("line 2: account items belong to a confirmation server's export"),
        "{e}"
    );
    for config in [&cs, &rs] {
        let server = if config == &cs { "cs" } else { "rs" };
        assert!(items(&export(config), server).is_empty());
    }
}

/// `lines` as a stream, its end line counting its items.
fn restream(lines: &[String]) -> String {
    let mut all: Vec<String> = lines.to_vec();
    let end = format!(r#"{{"kind":"end","items":{}}}"#, all.len() - 1);
    all.push(end);
    all.join("\n") + "\n"
}

#[test]
fn a_settings_line_or_store_with_settings_is_refused_naming_why() {
    let (dir, stream) = rs_export();
    // The stream without its end line.
    let lines: Vec<String> = stream.lines().map(str::to_owned).collect();
    let lines = &lines[..lines.len() - 1];
    let at = |prefix: &str| lines.iter().position(|l| l.starts_with(prefix)).unwrap();
    let host = at(r#"{"kind":"chosen_cs""#);
    let alice = at(r#"{"kind":"settings","subject":"alice""#);

    // A store that holds a user's settings, or only a chosen CS, is not empty.
    let to = rs_toml(dir.path(), "with-settings", None);
    let carol = UserSettings {
        cs: None,
        rules: json!([]),
        generation: 1,
    };
    rs_store(&to).settings.restore("carol", &carol).unwrap();
    let e = refused(import(&to, stream.as_bytes()));
    assert!(
        e.contains("the store is not empty: it holds users' settings (the first: \"carol\")"),
        "{e}"
    );
    let to = rs_toml(dir.path(), "with-host", None);
    rs_store(&to).settings.restore_host(CS_A).unwrap();
    let e = refused(import(&to, stream.as_bytes()));
    assert!(
        e.contains(&format!(
            "the store is not empty: it holds chosen confirmation servers (the first: {CS_A})"
        )),
        "{e}"
    );
    assert_eq!(
        items(&export(&to), "rs"),
        vec![format!(r#"{{"kind":"chosen_cs","issuer":"{CS_A}"}}"#)]
    );

    let to = rs_toml(dir.path(), "to", None);
    let refuse = |name: &str, changed: Vec<String>, expected: &str| {
        let file = dir.path().join(format!("{name}.jsonl"));
        std::fs::write(&file, restream(&changed)).unwrap();
        let e = refused(import_file(&to, &file));
        assert!(e.contains(expected), "{name}: {e}");
    };
    // A chosen CS given twice: refused as the file is read.
    let mut twice = lines.to_vec();
    twice.insert(host + 1, lines[host].clone());
    refuse(
        "host-twice",
        twice,
        &format!(
            "line {}: the chosen_cs {CS_Z} is given on line {} already",
            host + 2,
            host + 1
        ),
    );
    let alice_line = &lines[alice];
    for (name, line, expected) in [
        (
            "generation-0",
            alice_line.replace(r#""generation":3"#, r#""generation":0"#),
            "the settings item's generation is invalid: 0, and stored settings are at generation 1 or more",
        ),
        (
            "no-rules",
            alice_line.replace(r#""rules":"#, r#""rulez":"#),
            "the settings item is malformed: unknown field `rulez`",
        ),
        (
            "empty-cs",
            alice_line.replace(r#""subject":"alice","#, r#""subject":"alice","cs":"","#),
            "the settings item's cs is invalid: not an origin",
        ),
        (
            "cs-not-an-origin",
            alice_line.replace(r#""subject":"alice","#, r#""subject":"alice","cs":"ftp://x","#),
            "the settings item's cs is invalid: not an origin",
        ),
        (
            "no-subject",
            alice_line.replace(r#""subject":"alice""#, r#""subject":"""#),
            "the settings item's subject is invalid: empty",
        ),
    ] {
        let mut changed = lines.to_vec();
        changed[alice] = line;
        refuse(name, changed, &format!("line {}: {expected}", alice + 1));
    }
    assert!(
        items(&export(&to), "rs").is_empty(),
        "a refused file wrote items"
    );

    // A user given twice: the store finds it when it comes.
    let mut twice = lines.to_vec();
    twice.push(lines[alice].clone());
    let e = refused(import(&to, restream(&twice).as_bytes()));
    assert!(
        e.contains(&format!(
            "line {}: the settings \"alice\" is in the store already (given twice?)",
            twice.len()
        )),
        "{e}"
    );
}

#[test]
fn an_export_never_overwrites_a_file() {
    let (dir, _) = rs_export();
    let from = dir.path().join("from.rs.toml");
    let file = dir.path().join("taken.jsonl");
    std::fs::write(&file, "mine").unwrap();
    let e = refused(cheq(
        &[
            "store",
            "export",
            "--config",
            from.to_str().unwrap(),
            "--out",
            file.to_str().unwrap(),
        ],
        b"",
    ));
    assert!(
        e.contains("already exists; refusing to overwrite it"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}

#[test]
fn an_export_of_version_1_still_imports() {
    // What cheq wrote before the transparency log moved with the store:
    // the same lines under version 1.
    let (dir, stream) = rs_export();
    let old = stream.replacen("\"version\":2", "\"version\":1", 1);
    let rs = rs_toml(dir.path(), "rs-v1", None);
    let said = ok(import(&rs, old.as_bytes()));
    assert!(said.starts_with("imported 16 items"), "{said}");
    assert_eq!(items(&export(&rs), "rs"), items(&stream, "rs"));

    let from = cs_toml(dir.path(), "cs-from", None);
    fill_cs(&cs_store(&from));
    // A version 1 stream holds no registration: cheq wrote it before.
    let stream = without_registrations(&export(&from));
    let old = stream.replacen("\"version\":2", "\"version\":1", 1);
    let cs = cs_toml(dir.path(), "cs-v1", None);
    let out = import(&cs, old.as_bytes());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let said = ok(out);
    assert!(said.starts_with("imported 9 items"), "{said}");
    assert!(
        stderr.contains("an export of version 1 holds no transparency log"),
        "{stderr}"
    );
    assert_eq!(items(&export(&cs), "cs"), items(&stream, "cs"));
}

/// `stream` without its registration and token lines, its end line
/// counting what is left: a stream of a cheq that did not carry them.
fn without_registrations(stream: &str) -> String {
    let kept: Vec<&str> = stream
        .lines()
        .filter(|l| {
            !l.starts_with(r#"{"kind":"registration""#)
                && !l.starts_with(r#"{"kind":"initial_access_token""#)
        })
        .collect();
    assert!(kept.len() < stream.lines().count(), "no line was taken out");
    let end = format!(r#"{{"kind":"end","items":{}}}"#, kept.len() - 2);
    let mut lines = kept[..kept.len() - 1].to_vec();
    lines.push(&end);
    lines.join("\n") + "\n"
}

/// A CS export holding registrations and tokens, and a directory for
/// configurations.
fn cs_export() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let from = cs_toml(dir.path(), "from", None);
    fill_cs(&cs_store(&from));
    let stream = export(&from);
    (dir, stream)
}

#[test]
fn an_export_without_registration_lines_imports_into_a_host_with_none() {
    let (dir, stream) = cs_export();
    let old = without_registrations(&stream);
    let cs = cs_toml(dir.path(), "cs-old", None);
    let said = ok(import(&cs, old.as_bytes()));
    assert!(
        said.starts_with("imported 9 items (3 account, 1 collected, 4 decision, 1 entry)"),
        "{said}"
    );
    let store = cs_store(&cs);
    assert!(store.registrations.list().unwrap().is_empty());
    assert!(store.registrations.access_tokens().unwrap().is_empty());
    // The store works: an RS registers into it.
    assert_eq!(
        store
            .registrations
            .register(&registered(REG_NEVER, "New", 1))
            .unwrap(),
        RegisterOutcome::Created
    );
}

#[test]
fn a_malformed_registration_or_token_line_is_refused_and_nothing_is_written() {
    let (dir, stream) = cs_export();
    let lines: Vec<&str> = stream.lines().collect();
    let at = |kind: &str| {
        let prefix = format!(r#"{{"kind":"{kind}""#);
        lines.iter().position(|l| l.starts_with(&prefix)).unwrap()
    };
    // The indexes of the first registration and token lines (three
    // registrations, then two tokens); line numbers count from 1.
    let (reg, tok) = (at("registration"), at("initial_access_token"));
    assert_eq!(tok, reg + 3);
    let to = cs_toml(dir.path(), "to", None);
    let active_origin = format!(r#""origin":"{REG_ACTIVE}""#);
    let active = *lines.iter().find(|l| l.contains(&active_origin)).unwrap();
    let digest = token_digest("tok-unused");
    let placeholder_active = r#"{"kind":"registration","origin":"https://x.example","name":"","resource_prefix":"","jwks_uri":"","token_endpoint":"","status":"active","registered_at":1,"updated_at":1}"#;
    // (the index of the line replaced, its new text, the line refused, why)
    let cases: Vec<(usize, String, usize, String)> = vec![
        (
            reg,
            active.replace(r#","updated_at":1800000500"#, ""),
            reg + 1,
            "the registration item is malformed: missing field `updated_at`".into(),
        ),
        (
            reg,
            active.replace(r#""status":"active""#, r#""status":"paused""#),
            reg + 1,
            "the registration item is malformed: unknown variant `paused`".into(),
        ),
        (
            reg,
            active.replace(&active_origin, r#""origin":"https://active.example/path""#),
            reg + 1,
            "the registration item's origin is invalid: not an http(s) origin".into(),
        ),
        (
            reg,
            active.replace(
                &format!("{REG_ACTIVE}/oauth/token"),
                "http://169.254.169.254/latest",
            ),
            reg + 1,
            "the registration item's token_endpoint is invalid: not on the record's origin".into(),
        ),
        (
            reg,
            active.replace(
                &format!("{REG_ACTIVE}/.well-known/jwks.json"),
                "https://other.example/jwks.json",
            ),
            reg + 1,
            "the registration item's jwks_uri is invalid: not on the record's origin".into(),
        ),
        (
            reg,
            placeholder_active.into(),
            reg + 1,
            "the registration item's status is invalid: active, and the record has no \
             token_endpoint"
                .into(),
        ),
        (
            tok,
            format!(r#"{{"kind":"initial_access_token","digest":"{digest}"}}"#),
            tok + 1,
            "the initial_access_token item is malformed: missing field `created`".into(),
        ),
        (
            tok,
            r#"{"kind":"initial_access_token","digest":"tok-unused","created":1}"#.into(),
            tok + 1,
            "the initial_access_token item's digest is invalid: not a SHA-256 digest in \
             lowercase hex"
                .into(),
        ),
        // The first registration again, in the place of the first token.
        (
            tok,
            lines[reg].into(),
            tok + 1,
            format!(
                "the registration {} is given on line {} already",
                origin_of(lines[reg]),
                reg + 1
            ),
        ),
        // The second token again, in the place of the second registration.
        (
            reg + 1,
            lines[tok + 1].into(),
            tok + 2,
            format!(
                "the initial_access_token {} is given on line {} already",
                digest_of(lines[tok + 1]),
                reg + 2
            ),
        ),
    ];
    for (i, (index, line, refused_at, why)) in cases.iter().enumerate() {
        let mut bad = lines.clone();
        bad[*index] = line;
        let file = dir.path().join(format!("bad-{i}.jsonl"));
        std::fs::write(&file, bad.join("\n") + "\n").unwrap();
        let e = refused(import_file(&to, &file));
        assert!(
            e.contains(&format!("line {refused_at}: {why}")),
            "{why:?}: {e}"
        );
        assert!(
            items(&export(&to), "cs").is_empty(),
            "a refused file wrote items ({why})"
        );
    }
    // From standard input too, before the line's item is written: the
    // registration lines come before any other of the stream here.
    let header_and =
        |line: &str| format!("{}\n{line}\n{{\"kind\":\"end\",\"items\":1}}\n", lines[0]);
    let e = refused(import(&to, header_and(placeholder_active).as_bytes()));
    assert!(
        e.contains("line 2: the registration item's status is invalid"),
        "{e}"
    );
    assert!(items(&export(&to), "cs").is_empty());
}

/// The `origin` of a registration line.
fn origin_of(line: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["origin"].as_str().unwrap().to_owned()
}

/// The `digest` of a token line.
fn digest_of(line: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["digest"].as_str().unwrap().to_owned()
}

#[test]
fn an_import_into_a_store_with_a_registration_or_a_token_is_refused() {
    let (dir, stream) = cs_export();
    // An origin the operator blocked on the new host before the import:
    // the import would otherwise have to choose between two records.
    let blocked = cs_toml(dir.path(), "blocked", None);
    assert!(cs_store(&blocked)
        .registrations
        .block(REG_ACTIVE, 5)
        .unwrap());
    let e = refused(import(&blocked, stream.as_bytes()));
    assert!(
        e.contains(&format!(
            "the store is not empty: it holds registered resource servers (the first: \
             {REG_ACTIVE} (blocked))"
        )),
        "{e}"
    );
    let store = cs_store(&blocked);
    assert_eq!(
        store.registrations.list().unwrap().len(),
        1,
        "the import wrote"
    );
    assert!(
        store.accounts.list_after(None, 1).unwrap().is_empty(),
        "the import wrote"
    );
    drop(store);

    let token = cs_toml(dir.path(), "token", None);
    assert!(cs_store(&token)
        .registrations
        .add_access_token(&token_digest("issued here"), 7)
        .unwrap());
    let e = refused(import(&token, stream.as_bytes()));
    assert!(
        e.contains(
            "the store is not empty: it holds initial access tokens (the first: one issued at 7"
        ),
        "{e}"
    );
    assert!(
        cs_store(&token).registrations.list().unwrap().is_empty(),
        "the import wrote"
    );
}
