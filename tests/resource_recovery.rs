//! The RS side of CHEQ (`resource::cheq_rs`) cut short at each durable step
//! of a decision (PROTOCOL.md §6: the operation runs at most once, a
//! byte-identical re-delivery completes what a crash interrupted, any other
//! document for the nonce is a replay), and its collection of expired state.
//! The crash is simulated by writing, through the store's traits, exactly
//! what the interrupted steps had written.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::cheq::Cheq;
use cheq::keyring::KeyRing;
use cheq::peerkeys::PeerKeys;
use cheq::resource::cheq_rs::{
    CheqRs, Effect, MintRequest, Minted, Operation, ResultView, MAX_TTL_SECS,
};
use cheq::resource::tools::DemoTools;
use cheq::resource::trusted_cs::ConfirmationServer;
use cheq::resource::CheqRsError;
use cheq::sign::{
    b64, countersign, verify_own_decision, verify_resource, Channel, Context, Decision,
    DecisionInput, Jwks, ResourceSignature, SigningKey, TrustStore,
};
use cheq::store::rs::{CheqRecord, CheqRecords, CheqState, RsStore, Step, Transition};
use cheq::store::Durability;
use cheq::store::{AsyncFlush, NonceEntry, NonceStore, RecordOutcome, StoreError};
use cheq::time::{Clock, ManualClock};
use chrono::{Duration, Utc};
use indexmap::IndexMap;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};

#[path = "support/crash.rs"]
mod crash;

struct Fixture {
    _dir: tempfile::TempDir,
    store: RsStore,
    rs: Arc<CheqRs>,
    tools: Arc<DemoTools>,
    cs: SigningKey,
    clock: Arc<ManualClock>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (_db, store) = cheq::store::sled_rs::open_dir(dir.path()).unwrap();
    fixture_on(dir, store, |_, tools| tools)
}

/// A fixture on `store` in `dir`, whose RS runs the operation `op` makes of
/// the demo tools (themselves by default).
fn fixture_on(
    dir: tempfile::TempDir,
    store: RsStore,
    op: impl FnOnce(&RsStore, Arc<DemoTools>) -> Arc<dyn Operation>,
) -> Fixture {
    let cs = SigningKey::from_seed("cs", &[1; 32]).unwrap();
    let cs_keys = PeerKeys::Fixed(Arc::new(Jwks::new(vec![cs.public_key()]).unwrap()));
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let tools = Arc::new(DemoTools::new(&store));
    let rs_keys =
        KeyRing::open(&dir.path().join("rs.jwk"), Some("rs"), "rs", clock.clone()).unwrap();
    let rs = Arc::new(
        CheqRs::new(
            &store,
            rs_keys,
            ConfirmationServer::in_full("http://127.0.0.1:9/confirm", cs_keys),
            "http://127.0.0.1:8",
            clock.clone(),
            op(&store, tools.clone()),
        )
        .unwrap(),
    );
    Fixture {
        _dir: dir,
        store,
        rs,
        tools,
        cs,
        clock,
    }
}

fn mint_request() -> MintRequest {
    MintRequest {
        operation: "http://127.0.0.1:8/tools/x:invoke".into(),
        operation_name: "Book a flight".into(),
        parameters: vec![json!({"parameter name": "flight number", "parameter value": "UA23"})],
        subject: "alice".into(),
        language: None,
        assurance: None,
        ttl: Duration::seconds(600),
        action: json!({"tool": "book_flight", "inputs": {"flight_number": "UA23", "price_usd": 500}}),
    }
}

/// Runs `f` to its end on a runtime of its own.
fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

impl Fixture {
    fn mint(&self) -> Minted {
        self.rs.mint(mint_request()).unwrap()
    }

    /// [`mint`](Self::mint) as the server calls it.
    fn mint_async(&self) -> Minted {
        block(self.rs.mint_async(mint_request())).unwrap()
    }

    /// A decision as the server takes it.
    fn decide_async(
        &self,
        m: &Minted,
        decision: Decision,
        body: &str,
    ) -> Result<cheq::cheq::DecisionAnswer, CheqRsError> {
        block(
            self.rs
                .decide_async(Arc::new(m.id.clone()), decision, Arc::from(body.as_bytes())),
        )
    }

    /// Trust in the RS's own keys, as a CS holds it.
    fn rs_trust(&self) -> TrustStore {
        let mut trust = TrustStore::new();
        trust
            .add_resource_server(
                "http://127.0.0.1:8",
                Jwks::from_value(&self.rs.jwks()).unwrap(),
            )
            .unwrap();
        trust
    }

    fn decide_doc(&self, m: &Minted, decision: Decision, iat_offset: i64) -> String {
        let trust = self.rs_trust();
        let now = self.clock.now();
        let v = verify_resource(m.document.as_bytes(), &trust, &Context::at(now)).unwrap();
        let amr = vec!["pwd".to_owned()];
        countersign(
            &v,
            &self.cs,
            DecisionInput {
                decision,
                sub: "alice",
                also_known_as: &[],
                auth_time: now.timestamp(),
                amr: &amr,
                channel: Channel::Api,
                view_text: "view",
                collected: None,
                passkey: None,
            },
            now + Duration::seconds(iat_offset),
        )
        .unwrap()
    }

    /// A new confirmation, decided as `decision` (countersigned now).
    fn mint_and_decide(
        &self,
        decision: Decision,
    ) -> (Minted, Result<cheq::cheq::DecisionAnswer, CheqRsError>) {
        let m = self.mint();
        let body = self.decide_doc(&m, decision, 0);
        let answer = self.rs.decide(&m.id, decision, body.as_bytes());
        (m, answer)
    }

    /// Step 1, as `decide` writes it.
    fn record_nonce(&self, m: &Minted, body: &str) {
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&Sha256::digest(body.as_bytes()));
        let rec = self.store.records.get(&m.id).unwrap().unwrap();
        let entry = NonceEntry {
            digest,
            expires_at: rec.expires + 61,
            data: b"accept".to_vec(),
        };
        assert_eq!(
            self.store.nonces.record(&rec.nonce, &entry).unwrap(),
            RecordOutcome::Fresh
        );
    }

    /// For a pending `m` whose nonce was recorded with `body` (accepted):
    /// `other` (another document for that nonce) is a replay even though the
    /// record is pending, `body` posted as the other decision is refused
    /// (rule 3), and nothing runs until `body` is delivered again, which
    /// completes it once.
    fn settle_recorded_nonce(&self, m: &Minted, body: &str, other: &str) {
        assert!(matches!(
            self.rs.decide(&m.id, Decision::Accept, other.as_bytes()),
            Err(CheqRsError::Replayed)
        ));
        assert!(matches!(
            self.rs.decide(&m.id, Decision::Reject, body.as_bytes()),
            Err(CheqRsError::Invalid { rule: 3, .. })
        ));
        assert_eq!(self.tools.runs(), 0);
        let a = self
            .rs
            .decide(&m.id, Decision::Accept, body.as_bytes())
            .unwrap();
        assert_eq!(a.decision, Decision::Accept);
        assert_eq!(self.tools.runs(), 1);
    }

    /// Step 2, as `decide` writes it.
    fn mark_decided(&self, m: &Minted, body: &str) {
        let decided = CheqState::Decided {
            decision: Decision::Accept,
            digest: b64::sha256(body.as_bytes()),
        };
        assert_eq!(
            self.store
                .records
                .advance(
                    Step {
                        id: &m.id,
                        from: &CheqState::Pending,
                        to: &decided
                    },
                    Durability::Now
                )
                .unwrap(),
            Transition::Moved
        );
    }
}

/// Ids and nonces lead with the mint time in milliseconds (so that a store
/// keeps the records of one time side by side), then carry their full
/// random part: 16 bytes for an id (§1: 128 bits), 24 for a nonce.
#[test]
fn ids_and_nonces_lead_with_the_time_then_their_random_bytes() {
    use cheq::resource::cheq_rs::{ID_BYTES, NONCE_BYTES, TIME_BYTES};
    let f = fixture();
    let parts = |m: &Minted| {
        let rec = f.store.records.get(&m.id).unwrap().unwrap();
        let decode = |s: &str| b64::decode(s).unwrap();
        (decode(&m.id), decode(&m.result_id), decode(&rec.nonce))
    };
    let ms = |b: &[u8]| {
        let mut be = [0u8; 8];
        be[8 - TIME_BYTES..].copy_from_slice(&b[..TIME_BYTES]);
        u64::from_be_bytes(be)
    };
    let (a, b) = (f.mint(), f.mint());
    let (id_a, result_a, nonce_a) = parts(&a);
    let (id_b, result_b, nonce_b) = parts(&b);
    let at = u64::try_from(f.clock.now().timestamp_millis()).unwrap() % (1 << 32);
    for (x, len) in [
        (&id_a, ID_BYTES),
        (&result_a, ID_BYTES),
        (&nonce_a, NONCE_BYTES),
        (&id_b, ID_BYTES),
        (&nonce_b, NONCE_BYTES),
    ] {
        assert_eq!(x.len(), TIME_BYTES + len);
        assert_eq!(ms(x), at);
    }
    // The same time, different random parts.
    assert_eq!(id_a[..TIME_BYTES], id_b[..TIME_BYTES]);
    assert_ne!(id_a[TIME_BYTES..], id_b[TIME_BYTES..]);
    assert_ne!(result_a[TIME_BYTES..], result_b[TIME_BYTES..]);
    assert_ne!(nonce_a[TIME_BYTES..], nonce_b[TIME_BYTES..]);
    assert_ne!(id_a[TIME_BYTES..], result_a[TIME_BYTES..]);
    // Minted at once, their text shares its first characters.
    assert_eq!(a.id[..5], b.id[..5]);
    assert_ne!(a.id[6..], b.id[6..]);
    f.clock.advance(Duration::milliseconds(1500));
    let (id_c, _, _) = parts(&f.mint());
    assert_eq!(ms(&id_c), (at + 1500) % (1 << 32));
    assert!(a.pack.resource_uri.ends_with(&a.id));
}

#[test]
fn crash_after_recording_the_nonce() {
    let f = fixture();
    let m = f.mint();
    let body = f.decide_doc(&m, Decision::Accept, 0);
    let other = f.decide_doc(&m, Decision::Accept, 1);
    f.record_nonce(&m, &body);
    assert_eq!(f.rs.result(&m.result_id).unwrap(), ResultView::Pending);
    assert!(matches!(
        f.rs.fetch(&m.id),
        Err(CheqRsError::AlreadyDecided)
    ));
    f.settle_recorded_nonce(&m, &body, &other);
    assert!(matches!(
        f.rs.result(&m.result_id).unwrap(),
        ResultView::Accepted(_)
    ));
    f.rs.decide(&m.id, Decision::Accept, body.as_bytes())
        .unwrap();
    assert_eq!(f.tools.runs(), 1);
}

/// A pending record is not looked up in the nonce store before the body is
/// verified (the record of the nonce finds an earlier one); a body that can
/// no longer be taken as new is: past its expiry, a re-delivery of the bytes
/// whose nonce was recorded still completes, and anything else is refused
/// as what it is.
#[test]
fn a_recorded_nonce_is_completed_after_expiry_and_refused_otherwise() {
    let f = fixture();
    let m = f.mint();
    let body = f.decide_doc(&m, Decision::Accept, 0);
    let other = f.decide_doc(&m, Decision::Accept, 1);
    f.record_nonce(&m, &body);
    // Past expiry and the skew of §5 rule 4.
    f.clock.advance(Duration::seconds(600 + 61));
    f.settle_recorded_nonce(&m, &body, &other);

    // Without a recorded nonce, the same lateness is refused as expired.
    let late = f.mint();
    let body = f.decide_doc(&late, Decision::Accept, 0);
    f.clock.advance(Duration::seconds(600 + 61));
    assert!(matches!(
        f.rs.decide(&late.id, Decision::Accept, body.as_bytes()),
        Err(CheqRsError::Expired)
    ));
    assert_eq!(f.tools.runs(), 1);
}

#[test]
fn crash_after_marking_decided_before_the_operation() {
    let f = fixture();
    let m = f.mint();
    let body = f.decide_doc(&m, Decision::Accept, 0);
    f.record_nonce(&m, &body);
    f.mark_decided(&m, &body);
    assert_eq!(f.rs.result(&m.result_id).unwrap(), ResultView::Pending);
    assert!(matches!(
        f.rs.fetch(&m.id),
        Err(CheqRsError::AlreadyDecided)
    ));
    f.rs.decide(&m.id, Decision::Accept, body.as_bytes())
        .unwrap();
    assert_eq!(f.tools.runs(), 1);
    assert!(matches!(
        f.rs.result(&m.result_id).unwrap(),
        ResultView::Accepted(_)
    ));
}

#[test]
fn crash_after_the_operation_before_storing_its_result() {
    let f = fixture();
    let m = f.mint();
    let body = f.decide_doc(&m, Decision::Accept, 0);
    f.record_nonce(&m, &body);
    f.mark_decided(&m, &body);
    let rec = f.store.records.get(&m.id).unwrap().unwrap();
    let ran = f
        .tools
        .execute(&m.id, &rec.action, &IndexMap::new())
        .unwrap();
    assert_eq!(f.tools.runs(), 1);
    f.rs.decide(&m.id, Decision::Accept, body.as_bytes())
        .unwrap();
    assert_eq!(f.tools.runs(), 1, "the operation must not run twice");
    assert_eq!(
        f.rs.result(&m.result_id).unwrap(),
        ResultView::Accepted(ran)
    );
}

/// What an awaited decision leaves when a crash keeps its writes up to the
/// operation's effect but not the final state (it writes no `decided`
/// state): the nonce, the effect, a pending record. The re-delivery
/// completes it without running the operation again.
#[test]
fn crash_after_the_operation_of_an_awaited_decision() {
    let f = fixture();
    let m = f.mint();
    let body = f.decide_doc(&m, Decision::Accept, 0);
    f.record_nonce(&m, &body);
    let rec = f.store.records.get(&m.id).unwrap().unwrap();
    assert_eq!(rec.state, CheqState::Pending);
    let ran = f
        .tools
        .execute(&m.id, &rec.action, &IndexMap::new())
        .unwrap();
    assert_eq!(f.rs.result(&m.result_id).unwrap(), ResultView::Pending);
    assert!(matches!(
        f.rs.fetch(&m.id),
        Err(CheqRsError::AlreadyDecided)
    ));
    let other = f.decide_doc(&m, Decision::Accept, 1);
    assert!(matches!(
        f.decide_async(&m, Decision::Accept, &other),
        Err(CheqRsError::Replayed)
    ));
    f.decide_async(&m, Decision::Accept, &body).unwrap();
    assert_eq!(f.tools.runs(), 1, "the operation must not run twice");
    assert_eq!(
        f.rs.result(&m.result_id).unwrap(),
        ResultView::Accepted(ran)
    );
}

#[test]
fn a_rejection_is_recorded_typed_and_runs_nothing() {
    let f = fixture();
    let m = f.mint();
    let body = f.decide_doc(&m, Decision::Reject, 0);
    let a =
        f.rs.decide(&m.id, Decision::Reject, body.as_bytes())
            .unwrap();
    assert_eq!(a.decision, Decision::Reject);
    assert_eq!(a.to_json(), json!({"status": "rejected"}));
    let rec = f.store.records.get(&m.id).unwrap().unwrap();
    assert_eq!(
        rec.state,
        CheqState::Done {
            decision: Decision::Reject,
            digest: b64::sha256(body.as_bytes()),
            result: None,
        }
    );
    assert_eq!(f.rs.result(&m.result_id).unwrap(), ResultView::Rejected);
    assert_eq!(f.tools.runs(), 0);
}

#[test]
fn collect_expired_keeps_refusing_replays() {
    let f = fixture();
    let m = f.mint();
    let body = f.decide_doc(&m, Decision::Accept, 0);
    let other = f.decide_doc(&m, Decision::Accept, 1);
    f.rs.decide(&m.id, Decision::Accept, body.as_bytes())
        .unwrap();
    f.clock.advance(Duration::seconds(700));
    assert_eq!(f.rs.collect_expired(Duration::days(7)).unwrap(), (1, 0));
    assert!(matches!(
        f.rs.decide(&m.id, Decision::Accept, other.as_bytes()),
        Err(CheqRsError::Replayed)
    ));
    f.rs.decide(&m.id, Decision::Accept, body.as_bytes())
        .unwrap();
    assert_eq!(f.tools.runs(), 1);
    f.clock.advance(Duration::days(8));
    assert_eq!(f.rs.collect_expired(Duration::days(7)).unwrap(), (0, 1));
    assert!(matches!(
        f.rs.result(&m.result_id),
        Err(CheqRsError::ResultNotFound)
    ));
    assert!(matches!(f.rs.fetch(&m.id), Err(CheqRsError::NotFound)));
}

#[test]
fn ttl_is_bounded() {
    let f = fixture();
    let mut req = MintRequest {
        operation: "http://127.0.0.1:8/op".into(),
        operation_name: "Op".into(),
        parameters: vec![],
        subject: "alice".into(),
        language: None,
        assurance: None,
        ttl: Duration::seconds(MAX_TTL_SECS + 1),
        action: Value::Null,
    };
    assert!(f.rs.mint(req.clone()).is_err());
    req.ttl = Duration::seconds(MAX_TTL_SECS);
    let m = f.rs.mint(req).unwrap();
    let cheq = Cheq::parse(&m.payload).unwrap();
    let fields = cheq.countersign_fields().unwrap();
    assert_eq!(
        fields.expires - fields.date,
        Duration::seconds(MAX_TTL_SECS)
    );
    assert!(b64::decode(&fields.nonce).unwrap().len() >= 16);
}

// ---- when a decision's writes are made durable (§6) ----

/// What the RS asked of its store and of its operation, in order.
type Log = Arc<Mutex<Vec<String>>>;

fn note(log: &Log, what: impl Into<String>) {
    log.lock().unwrap().push(what.into());
}

fn durability_word(durable: bool) -> &'static str {
    if durable {
        "durable"
    } else {
        "unflushed"
    }
}

/// The nonce store, noting each record and whether it was durable.
struct SpyNonces(Arc<dyn NonceStore>, Log);

impl NonceStore for SpyNonces {
    fn record(&self, nonce: &str, entry: &NonceEntry) -> Result<RecordOutcome, StoreError> {
        note(&self.1, "nonce durable");
        self.0.record(nonce, entry)
    }
    fn record_with(
        &self,
        nonce: &str,
        entry: &NonceEntry,
        durability: Durability,
    ) -> Result<RecordOutcome, StoreError> {
        if durability == Durability::Now {
            return self.record(nonce, entry);
        }
        note(&self.1, "nonce unflushed");
        self.0.record_with(nonce, entry, durability)
    }
    fn flush(&self) -> Result<(), StoreError> {
        note(&self.1, "flush");
        self.0.flush()
    }
    fn get(&self, nonce: &str) -> Result<Option<NonceEntry>, StoreError> {
        self.0.get(nonce)
    }
    fn collect_expired(&self, now: i64) -> Result<usize, StoreError> {
        self.0.collect_expired(now)
    }
}

/// The CHEQ records, noting each move and whether it was durable, and
/// counting the look-ups by id; with a hold, a move to `done` is held once
/// written until the hold says go on.
struct SpyRecords(
    Arc<dyn CheqRecords>,
    Log,
    Option<Hold>,
    Arc<std::sync::atomic::AtomicUsize>,
);

/// Says when a move to `done` is written, and waits to be told to go on:
/// the window in which a final state is visible while the decision that
/// wrote it has not answered.
struct Hold {
    written: Mutex<std::sync::mpsc::Sender<()>>,
    go_on: Mutex<std::sync::mpsc::Receiver<()>>,
}

fn state_name(state: &CheqState) -> &'static str {
    match state {
        CheqState::Pending => "pending",
        CheqState::Decided { .. } => "decided",
        CheqState::Done { .. } => "done",
    }
}

impl CheqRecords for SpyRecords {
    fn create(&self, record: &CheqRecord) -> Result<bool, StoreError> {
        note(&self.1, "created durable");
        self.0.create(record)
    }
    fn create_with(&self, record: &CheqRecord, durability: Durability) -> Result<bool, StoreError> {
        if durability == Durability::Now {
            return self.create(record);
        }
        note(&self.1, "created unflushed");
        self.0.create_with(record, durability)
    }
    fn get(&self, id: &str) -> Result<Option<CheqRecord>, StoreError> {
        self.3.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.0.get(id)
    }
    fn by_result(&self, result_id: &str) -> Result<Option<CheqRecord>, StoreError> {
        self.0.by_result(result_id)
    }
    fn advance(&self, step: Step<'_>, durability: Durability) -> Result<Transition, StoreError> {
        let durable = durability == Durability::Now;
        note(
            &self.1,
            format!("{} {}", state_name(step.to), durability_word(durable)),
        );
        self.0.advance(step, durability)
    }
    fn advance_record(
        &self,
        record: &CheqRecord,
        to: &CheqState,
        durability: Durability,
    ) -> Result<Transition, StoreError> {
        let durable = durability == Durability::Now;
        note(
            &self.1,
            format!("{} {}", state_name(to), durability_word(durable)),
        );
        let moved = self.0.advance_record(record, to, durability)?;
        if let (Some(hold), CheqState::Done { .. }) = (&self.2, to) {
            hold.written.lock().unwrap().send(()).unwrap();
            hold.go_on.lock().unwrap().recv().unwrap();
        }
        Ok(moved)
    }
    fn collect_expired(&self, cutoff: i64) -> Result<usize, StoreError> {
        self.0.collect_expired(cutoff)
    }
}

/// The demo tools, with the effect said to be kept where `effect` says,
/// failing when `fail`, and noting each run.
struct SpyOperation {
    tools: Arc<DemoTools>,
    effect: Effect,
    fail: bool,
    log: Log,
}

impl Operation for SpyOperation {
    fn effect(&self) -> Effect {
        self.effect
    }
    fn execute(
        &self,
        key: &str,
        action: &Value,
        collected: &IndexMap<String, String>,
    ) -> Result<Value, String> {
        note(&self.log, "execute");
        if self.fail {
            return Err("the operation failed".into());
        }
        self.tools.execute(key, action, collected)
    }
}

/// A fixture whose store and operation note what the RS asks of them.
/// Its flusher notes each flush awaited.
fn spied(effect: Effect, fail: bool) -> (Fixture, Log) {
    let dir = tempfile::tempdir().unwrap();
    let (db, store) = cheq::store::sled_rs::open_dir(dir.path()).unwrap();
    let log = Log::default();
    let flush_log = log.clone();
    let store = RsStore {
        nonces: Arc::new(SpyNonces(store.nonces.clone(), log.clone())),
        records: Arc::new(SpyRecords(
            store.records.clone(),
            log.clone(),
            None,
            Default::default(),
        )),
        flusher: Some(AsyncFlush::new(move || {
            note(&flush_log, "awaited flush");
            db.flush().map(drop).map_err(|e| e.to_string())
        })),
        ..store
    };
    let spy_log = log.clone();
    let f = fixture_on(dir, store, move |_, tools| {
        Arc::new(SpyOperation {
            tools,
            effect,
            fail,
            log: spy_log,
        })
    });
    (f, log)
}

fn taken(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock().unwrap())
}

/// An operation whose effect is outside the RS's store runs only once the
/// nonce is on disk.
#[test]
fn an_effect_kept_elsewhere_runs_after_the_nonce_is_durable() {
    let (f, log) = spied(Effect::Elsewhere, false);
    f.mint_and_decide(Decision::Accept).1.unwrap();
    assert_eq!(
        taken(&log),
        [
            "created durable",
            "nonce durable",
            "decided unflushed",
            "execute",
            "done durable"
        ]
    );
}

/// An operation that keeps its effect in the RS's store has the nonce, the
/// effect and the final state made durable by one flush, the final state's,
/// before the answer; the move to `decided` is not written (the effect,
/// found under its key, says what it would).
#[test]
fn an_effect_in_the_store_is_made_durable_with_the_final_state() {
    let (f, log) = spied(Effect::InStore, false);
    f.mint_and_decide(Decision::Accept).1.unwrap();
    assert_eq!(
        taken(&log),
        [
            "created durable",
            "nonce unflushed",
            "execute",
            "done durable"
        ]
    );
    assert_eq!(f.tools.runs(), 1);
    // A rejection runs nothing and is made durable the same way.
    f.mint_and_decide(Decision::Reject).1.unwrap();
    assert_eq!(
        taken(&log),
        ["created durable", "nonce unflushed", "done durable"]
    );
}

/// When the steps end before the final state's durable write, the nonce is
/// made durable before the answer all the same (§6): after a failed
/// operation, and before a replay's refusal.
#[test]
fn a_decision_ended_early_makes_its_nonce_durable_before_the_answer() {
    let (f, log) = spied(Effect::InStore, true);
    assert!(matches!(
        f.mint_and_decide(Decision::Accept).1,
        Err(CheqRsError::Operation(_))
    ));
    assert_eq!(
        taken(&log),
        ["created durable", "nonce unflushed", "execute", "flush"]
    );

    // Another document for a nonce recorded while the record is pending.
    let m = f.mint();
    let body = f.decide_doc(&m, Decision::Accept, 0);
    let other = f.decide_doc(&m, Decision::Accept, 1);
    f.record_nonce(&m, &body);
    taken(&log);
    assert!(matches!(
        f.rs.decide(&m.id, Decision::Accept, other.as_bytes()),
        Err(CheqRsError::Replayed)
    ));
    assert_eq!(taken(&log), ["nonce unflushed", "flush"]);

    // A byte-identical re-delivery of a decided body: what it finds is on
    // disk before the answer, however the first delivery ended.
    let (m, answer) = f.mint_and_decide(Decision::Reject);
    answer.unwrap();
    taken(&log);
    let body = f.decide_doc(&m, Decision::Reject, 0);
    f.rs.decide(&m.id, Decision::Reject, body.as_bytes())
        .unwrap();
    assert_eq!(taken(&log), ["flush"]);
}

// ---- the same steps awaited on the store's flusher (issue 13) ----

/// As the server takes them on sled, a mint and a decision whose effect is
/// in the store write everything unflushed, then await one flush before
/// they answer; so does a decision ended early, or refused.
#[test]
fn awaited_steps_write_unflushed_then_await_one_flush() {
    let (f, log) = spied(Effect::InStore, false);
    let m = f.mint_async();
    assert_eq!(taken(&log), ["created unflushed", "awaited flush"]);
    let body = f.decide_doc(&m, Decision::Accept, 0);
    f.decide_async(&m, Decision::Accept, &body).unwrap();
    // No move to `decided`: the final state, written before the same flush,
    // would overwrite it unseen.
    assert_eq!(
        taken(&log),
        [
            "nonce unflushed",
            "execute",
            "done unflushed",
            "awaited flush"
        ]
    );
    assert_eq!(f.tools.runs(), 1);
    // A re-delivery reads what may not be on disk yet: awaited too.
    f.decide_async(&m, Decision::Accept, &body).unwrap();
    assert_eq!(taken(&log), ["awaited flush"]);
    // Another document for the decided nonce: refused after the flush.
    let other = f.decide_doc(&m, Decision::Accept, 1);
    assert!(matches!(
        f.decide_async(&m, Decision::Accept, &other),
        Err(CheqRsError::Replayed)
    ));
    assert_eq!(taken(&log), ["awaited flush"]);
    assert_eq!(f.tools.runs(), 1);

    let (f, log) = spied(Effect::InStore, true);
    let m = f.mint_async();
    taken(&log);
    let body = f.decide_doc(&m, Decision::Accept, 0);
    assert!(matches!(
        f.decide_async(&m, Decision::Accept, &body),
        Err(CheqRsError::Operation(_))
    ));
    assert_eq!(taken(&log), ["nonce unflushed", "execute", "awaited flush"]);
}

/// An operation whose effect is kept elsewhere still runs only once its
/// nonce is on disk: its decision is not deferred to a flush awaited after
/// it.
#[test]
fn an_awaited_decision_with_its_effect_elsewhere_keeps_its_durable_steps() {
    let (f, log) = spied(Effect::Elsewhere, false);
    let m = f.mint_async();
    taken(&log);
    let body = f.decide_doc(&m, Decision::Accept, 0);
    f.decide_async(&m, Decision::Accept, &body).unwrap();
    assert_eq!(
        taken(&log),
        [
            "nonce durable",
            "decided unflushed",
            "execute",
            "done durable"
        ]
    );
}

/// A flusher whose flushes each wait for a permit, then flush `db`.
fn gated(db: sled::Db) -> (AsyncFlush, std::sync::mpsc::Sender<()>) {
    let (permit, permits) = std::sync::mpsc::channel::<()>();
    let permits = Mutex::new(permits);
    let flusher = AsyncFlush::new(move || {
        permits
            .lock()
            .unwrap()
            .recv()
            .map_err(|_| "no more permits".to_owned())?;
        db.flush().map(drop).map_err(|e| e.to_string())
    });
    (flusher, permit)
}

/// Nothing is answered before its flush: a mint, and a decision, whose
/// final state is visible in the store meanwhile while the agent reads its
/// result as pending (the decision holds its lock until it is on disk).
#[test]
fn an_awaited_step_answers_only_after_its_flush() {
    let dir = tempfile::tempdir().unwrap();
    let (db, store) = cheq::store::sled_rs::open_dir(dir.path()).unwrap();
    let (flusher, permit) = gated(db);
    let store = RsStore {
        flusher: Some(flusher),
        ..store
    };
    let f = fixture_on(dir, store, |_, tools| tools);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let settle =
        || rt.block_on(async { tokio::time::sleep(std::time::Duration::from_millis(100)).await });

    let minting = rt.spawn({
        let rs = f.rs.clone();
        async move { rs.mint_async(mint_request()).await }
    });
    settle();
    assert!(!minting.is_finished(), "a mint answered before its flush");
    permit.send(()).unwrap();
    let m = rt.block_on(minting).unwrap().unwrap();

    let body = f.decide_doc(&m, Decision::Accept, 0);
    let deciding = rt.spawn({
        let (rs, id, body) = (f.rs.clone(), Arc::new(m.id.clone()), body.clone());
        async move {
            rs.decide_async(id, Decision::Accept, Arc::from(body.as_bytes()))
                .await
        }
    });
    settle();
    assert!(
        !deciding.is_finished(),
        "a decision answered before its flush"
    );
    let state = f.store.records.get(&m.id).unwrap().unwrap().state;
    assert!(matches!(state, CheqState::Done { .. }), "{state:?}");
    assert_eq!(f.rs.result(&m.result_id).unwrap(), ResultView::Pending);
    permit.send(()).unwrap();
    let answer = rt.block_on(deciding).unwrap().unwrap();
    assert_eq!(answer.decision, Decision::Accept);
    assert!(matches!(
        f.rs.result(&m.result_id).unwrap(),
        ResultView::Accepted(_)
    ));
}

/// A flush that fails fails the mint and the decision that awaited it.
#[test]
fn a_failed_awaited_flush_fails_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let (db, store) = cheq::store::sled_rs::open_dir(dir.path()).unwrap();
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let fail = failing.clone();
    let store = RsStore {
        flusher: Some(AsyncFlush::new(move || {
            if fail.load(std::sync::atomic::Ordering::SeqCst) {
                Err("the disk is full".to_owned())
            } else {
                db.flush().map(drop).map_err(|e| e.to_string())
            }
        })),
        ..store
    };
    let f = fixture_on(dir, store, |_, tools| tools);
    let err = block(f.rs.mint_async(mint_request())).unwrap_err();
    assert!(
        matches!(&err, CheqRsError::Store(e) if e.to_string().contains("the disk is full")),
        "{err:?}"
    );
    let m = f.mint();
    let body = f.decide_doc(&m, Decision::Accept, 0);
    let err = f.decide_async(&m, Decision::Accept, &body).unwrap_err();
    assert!(matches!(&err, CheqRsError::Store(_)), "{err:?}");
    // Once the disk takes writes again, a re-delivery completes it.
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    f.decide_async(&m, Decision::Accept, &body).unwrap();
    assert_eq!(f.tools.runs(), 1);
}

const CHILD_DIR_VAR: &str = "CHEQ_TEST_DECIDE_DIR";

/// A decision whose operation keeps its effect in the store (the demo
/// tools: one flush per decision) is on disk, nonce, effect and final state,
/// when `decide` answers: a process killed with SIGKILL right after keeps it
/// all. The database is opened as the servers open it, but without sled's
/// background flush, so only the RS's own flush can have written it.
#[test]
fn a_decision_answered_survives_sigkill() {
    answered_survives_sigkill("a_decision_answered_survives_sigkill", CHILD_DIR_VAR, false);
}

const AWAITED_CHILD_DIR_VAR: &str = "CHEQ_TEST_AWAITED_DECIDE_DIR";

/// The same for a mint and a decision that awaited their flush (as the
/// server takes them on sled).
#[test]
fn an_awaited_decision_answered_survives_sigkill() {
    answered_survives_sigkill(
        "an_awaited_decision_answered_survives_sigkill",
        AWAITED_CHILD_DIR_VAR,
        true,
    );
}

/// Test `test`'s parent and child (the child runs with `var` set); the
/// child's steps are awaited when `awaited`.
fn answered_survives_sigkill(test: &str, var: &str, awaited: bool) {
    let open = |dir: &std::path::Path| {
        cheq::store::sled_config(dir)
            .flush_every_ms(None)
            .open()
            .unwrap()
    };
    if let Some(dir) = std::env::var_os(var) {
        // Child: decide, report the ids, and wait to be killed.
        let dir = std::path::PathBuf::from(dir);
        let store = cheq::store::sled_rs::open(&open(&dir)).unwrap();
        let f = fixture_on(tempfile::tempdir().unwrap(), store, |_, tools| tools);
        let m = if awaited {
            let m = f.mint_async();
            let body = f.decide_doc(&m, Decision::Accept, 0);
            f.decide_async(&m, Decision::Accept, &body).unwrap();
            m
        } else {
            let (m, answer) = f.mint_and_decide(Decision::Accept);
            answer.unwrap();
            m
        };
        crash::report_and_wait("DECIDED", &m.id);
    }

    let dir = tempfile::tempdir().unwrap();
    let (child, id) = crash::start(test, var, dir.path(), "DECIDED");
    crash::kill(child);

    let store = cheq::store::sled_rs::open(&open(dir.path())).unwrap();
    let record = store.records.get(&id).unwrap().expect("the record");
    let CheqState::Done { result, .. } = &record.state else {
        panic!("the final state was lost: {:?}", record.state);
    };
    assert!(
        store.nonces.get(&record.nonce).unwrap().is_some(),
        "the nonce was lost"
    );
    assert_eq!(
        store.executions.get(&id).unwrap().as_ref(),
        result.as_ref(),
        "the effect was lost"
    );
}

/// The agent reads a result only once the decision behind it is on disk: a
/// final state written and not yet flushed reads as pending (§7), and as
/// what it is once the decision has answered.
#[test]
fn a_result_is_read_only_once_its_decision_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, store) = cheq::store::sled_rs::open_dir(dir.path()).unwrap();
    let (written_tx, written) = std::sync::mpsc::channel();
    let (go_on, go_on_rx) = std::sync::mpsc::channel();
    let hold = Hold {
        written: Mutex::new(written_tx),
        go_on: Mutex::new(go_on_rx),
    };
    let store = RsStore {
        records: Arc::new(SpyRecords(
            store.records.clone(),
            Log::default(),
            Some(hold),
            Default::default(),
        )),
        ..store
    };
    let f = fixture_on(dir, store, |_, tools| tools);
    let m = f.mint();
    let body = f.decide_doc(&m, Decision::Accept, 0);
    std::thread::scope(|s| {
        let deciding = s.spawn(|| f.rs.decide(&m.id, Decision::Accept, body.as_bytes()));
        written.recv().unwrap();
        let state = f.store.records.get(&m.id).unwrap().unwrap().state;
        let read = f.rs.result(&m.result_id);
        go_on.send(()).unwrap();
        deciding.join().unwrap().unwrap();
        assert!(matches!(state, CheqState::Done { .. }), "{state:?}");
        assert_eq!(read.unwrap(), ResultView::Pending);
    });
    assert!(matches!(
        f.rs.result(&m.result_id).unwrap(),
        ResultView::Accepted(_)
    ));
}

/// The RS recognises its own signature in a decision only when its pending
/// record hands back the document it issued byte for byte: through the
/// store's packing, the record's document is what `fetch` served, and a
/// decision on it is read as `Issued` (a changed round trip would fall back
/// to verifying, slower but still correct).
#[test]
fn a_pending_record_keeps_the_issued_document_byte_for_byte() {
    let f = fixture();
    let m = f.mint();
    let record = f.store.records.get(&m.id).unwrap().unwrap();
    assert_eq!(record.document, m.document);
    let body = f.decide_doc(&m, Decision::Accept, 0);
    let mut trust = f.rs_trust();
    trust
        .add_confirmation_server(
            "http://127.0.0.1:9",
            Jwks::new(vec![f.cs.public_key()]).unwrap(),
        )
        .unwrap();
    let verified = verify_own_decision(
        body.as_bytes(),
        &record.document,
        &trust,
        Some(Decision::Accept),
        &Context::at(f.clock.now()),
    )
    .unwrap();
    assert_eq!(verified.resource_signature(), ResourceSignature::Issued);
}

/// An RS that keeps the records it minted (as on PostgreSQL), beside a
/// second instance over the same store that keeps none; and the count of
/// the first one's look-ups by id.
fn two_instances() -> (Fixture, Fixture, Arc<std::sync::atomic::AtomicUsize>) {
    let dir = tempfile::tempdir().unwrap();
    let (_db, store) = cheq::store::sled_rs::open_dir(dir.path()).unwrap();
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let other = RsStore {
        nonces: store.nonces.clone(),
        records: store.records.clone(),
        executions: store.executions.clone(),
        assertions: store.assertions.clone(),
        settings: store.settings.clone(),
        readiness: store.readiness.clone(),
        flusher: store.flusher.clone(),
        recent_records: 0,
    };
    let keeping = RsStore {
        records: Arc::new(SpyRecords(
            store.records.clone(),
            Log::default(),
            None,
            reads.clone(),
        )),
        recent_records: 64,
        ..store
    };
    let a = fixture_on(dir, keeping, |_, tools| tools);
    // The same RS keys for both instances.
    let other_dir = tempfile::tempdir().unwrap();
    for file in std::fs::read_dir(a._dir.path()).unwrap() {
        let file = file.unwrap();
        if file.file_type().unwrap().is_file() {
            std::fs::copy(file.path(), other_dir.path().join(file.file_name())).unwrap();
        }
    }
    let b = fixture_on(other_dir, other, |_, tools| tools);
    (a, b, reads)
}

/// A record kept in memory spares the store its look-ups: the CS's fetch
/// and the decision read none.
#[test]
fn a_kept_record_is_fetched_and_decided_without_a_look_up() {
    let (a, _b, reads) = two_instances();
    let m = a.mint();
    assert_eq!(a.rs.fetch(&m.id).unwrap(), m.document);
    let body = a.decide_doc(&m, Decision::Accept, 0);
    let answer =
        a.rs.decide(&m.id, Decision::Accept, body.as_bytes())
            .unwrap();
    assert_eq!(answer.decision, Decision::Accept);
    assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(a.tools.runs(), 1);
    // Decided: it is no longer kept, and the store answers from now on.
    assert!(matches!(
        a.rs.fetch(&m.id),
        Err(CheqRsError::AlreadyDecided)
    ));
    let again =
        a.rs.decide(&m.id, Decision::Accept, body.as_bytes())
            .unwrap();
    assert_eq!(again.decision, Decision::Accept);
    assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(a.tools.runs(), 1);
}

/// A record kept by one instance and decided by another: the first does not
/// serve it again (its nonce is recorded), refuses another document for it
/// as a replay, answers the same bytes as they were answered, and the
/// operation has run once in all.
#[test]
fn a_kept_record_decided_by_another_instance_is_neither_served_nor_run_again() {
    let (a, b, _) = two_instances();
    let m = a.mint();
    let body = a.decide_doc(&m, Decision::Accept, 0);
    let other = a.decide_doc(&m, Decision::Reject, 1);
    let answer =
        b.rs.decide(&m.id, Decision::Accept, body.as_bytes())
            .unwrap();
    assert_eq!(answer.decision, Decision::Accept);
    assert_eq!(b.tools.runs(), 1);
    assert!(matches!(
        a.rs.fetch(&m.id),
        Err(CheqRsError::AlreadyDecided)
    ));
    assert!(matches!(
        a.rs.decide(&m.id, Decision::Reject, other.as_bytes()),
        Err(CheqRsError::Replayed)
    ));
    let same =
        a.rs.decide(&m.id, Decision::Accept, body.as_bytes())
            .unwrap();
    assert_eq!(same.decision, Decision::Accept);
    assert_eq!(a.tools.runs() + b.tools.runs(), 1);
    assert!(matches!(
        a.store.records.get(&m.id).unwrap().unwrap().state,
        CheqState::Done { .. }
    ));
}

/// A kept record whose CHEQ has expired is not what answers: the store
/// does, which has collected it by then.
#[test]
fn a_kept_record_past_its_expiry_is_read_from_the_store() {
    let (a, _b, _) = two_instances();
    let m = a.mint();
    let body = a.decide_doc(&m, Decision::Accept, 0);
    a.clock.advance(Duration::days(8));
    a.rs.collect_expired(Duration::days(1)).unwrap();
    assert!(matches!(a.rs.fetch(&m.id), Err(CheqRsError::NotFound)));
    assert!(matches!(
        a.rs.decide(&m.id, Decision::Accept, body.as_bytes()),
        Err(CheqRsError::NotFound)
    ));
}
