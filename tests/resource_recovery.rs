//! The RS side of CHEQ (`resource::cheq_rs`) cut short at each durable step
//! of a decision (PROTOCOL.md §6: the operation runs at most once, a
//! byte-identical re-delivery completes what a crash interrupted, any other
//! document for the nonce is a replay), and its collection of expired state.
//! The crash is simulated by writing, through the store's traits, exactly
//! what the interrupted steps had written.

use cheq::cheq::Cheq;
use cheq::keyring::KeyRing;
use cheq::peerkeys::PeerKeys;
use cheq::resource::cheq_rs::{CheqRs, MintRequest, Minted, Operation, ResultView, MAX_TTL_SECS};
use cheq::resource::tools::DemoTools;
use cheq::resource::CheqRsError;
use cheq::sign::{
    b64, countersign, verify_resource, Channel, Context, Decision, DecisionInput, Jwks, SigningKey,
    TrustStore,
};
use cheq::store::rs::{CheqState, RsStore, Transition};
use cheq::store::{NonceEntry, RecordOutcome};
use cheq::time::{Clock, ManualClock};
use chrono::{Duration, Utc};
use indexmap::IndexMap;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::Arc;

struct Fixture {
    _dir: tempfile::TempDir,
    store: RsStore,
    rs: CheqRs,
    tools: Arc<DemoTools>,
    cs: SigningKey,
    clock: Arc<ManualClock>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (_db, store) = cheq::store::sled_rs::open_dir(dir.path()).unwrap();
    let cs = SigningKey::from_seed("cs", &[1; 32]).unwrap();
    let cs_keys = PeerKeys::Fixed(Arc::new(Jwks::new(vec![cs.public_key()]).unwrap()));
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let tools = Arc::new(DemoTools::new(store.executions.clone()));
    let rs_keys =
        KeyRing::open(&dir.path().join("rs.jwk"), Some("rs"), "rs", clock.clone()).unwrap();
    let rs = CheqRs::new(
        &store,
        rs_keys,
        cs_keys,
        "http://127.0.0.1:8",
        "http://127.0.0.1:9/confirm",
        clock.clone(),
        tools.clone(),
    )
    .unwrap();
    Fixture {
        _dir: dir,
        store,
        rs,
        tools,
        cs,
        clock,
    }
}

impl Fixture {
    fn mint(&self) -> Minted {
        self.rs
            .mint(MintRequest {
                operation: "http://127.0.0.1:8/tools/x:invoke".into(),
                operation_name: "Book a flight".into(),
                parameters: vec![
                    json!({"parameter name": "flight number", "parameter value": "UA23"}),
                ],
                subject: "alice".into(),
                language: None,
                ttl: Duration::seconds(600),
                action: json!({"tool": "book_flight", "inputs": {"flight_number": "UA23", "price_usd": 500}}),
            })
            .unwrap()
    }

    fn decide_doc(&self, m: &Minted, decision: Decision, iat_offset: i64) -> String {
        let mut trust = TrustStore::new();
        trust
            .add_resource_server(
                "http://127.0.0.1:8",
                Jwks::from_value(&self.rs.jwks()).unwrap(),
            )
            .unwrap();
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
            },
            now + Duration::seconds(iat_offset),
        )
        .unwrap()
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
                .advance(&m.id, &CheqState::Pending, &decided, true)
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
