//! The resource-server side of CHEQ (PROTOCOL.md §1, §3, §4, §6, §7), for any
//! API server to embed: no HTTP and nothing of the demo tools here.
//!
//! - [`CheqRs::mint`] makes a pending confirmation: random resource and result
//!   ids (128 bits each), a nonce of 24 random bytes, `date` now and `expires`
//!   now + TTL (at most 24 h), signs the payload as the resource server and
//!   returns the URI pack (§1). The pending confirmation is kept in sled, so it
//!   survives a restart.
//! - [`CheqRs::fetch`] serves it to the CS (§3): the signed document, or
//!   `Expired` / `AlreadyDecided` (410) / `NotFound` (404).
//! - [`CheqRs::decide`] takes the countersigned document (§6).
//! - [`CheqRs::result`] answers the agent (§7). It never contains a value the
//!   user typed (§8): collected values are handed to the [`Operation`] and never
//!   stored.
//!
//! # Exactly once, across crashes
//!
//! A decision goes through these steps (the nonce is flushed before anything
//! else happens; the operation's effect and the final record are flushed
//! before the answer; step 2's write is covered by step 4's flush, since the
//! nonce of step 1 already stands for the decision):
//!
//! 1. the nonce is recorded in the [`NonceStore`] with the SHA-256 of the exact
//!    body bytes (§6: "records the nonce durably before it answers");
//! 2. the confirmation record moves from `pending` to `decided` (decision and
//!    digest);
//! 3. on `accept`, the [`Operation`] runs with the confirmation id as its
//!    idempotency key;
//! 4. the record moves to `done` with the operation's result, and only then is
//!    the answer sent.
//!
//! A crash anywhere leaves a state a re-delivery completes: the CS keeps
//! delivering the same bytes until it gets an answer (§6), a byte-identical
//! body is recognised by its digest (in the nonce store or in the record) and
//! the remaining steps run, from the collected values carried, signed, in that
//! body. A *different* document for a decided nonce is `Replayed` whatever step
//! was reached. Step 3 can therefore be re-entered after a crash that happened
//! after the operation's effect but before step 4, so an [`Operation`] MUST be
//! idempotent per key: the demo tools write their effect and its result under
//! that key in one sled insert and return the stored result when the key is
//! already present; a real API passes the key on as its own idempotency key.
//! Decisions on one confirmation are serialised by a lock (striped by id), so
//! two concurrent deliveries of the same document cannot both run the
//! operation, while different confirmations proceed in parallel.
//!
//! # Expiry
//!
//! `fetch` refuses from `expires` on (the user could not decide in time). A
//! decision is accepted until `expires` + 60 s (the clock skew of §5 rule 4),
//! and the result only turns `expired` after that, so an agent never sees
//! `expired` for a CHEQ that is then accepted.

use super::error::CheqRsError;
use crate::cheq::{Cheq, UriPack};
use crate::sign::verify::CLOCK_SKEW_SECS;
use crate::sign::{b64, verify_decision, Context, Decision, Jwks, SigningKey, TrustStore};
use crate::store::{NonceEntry, NonceStore, RecordOutcome, SledNonceStore};
use crate::time::Clock;
use chrono::{DateTime, Duration, SecondsFormat, TimeZone, Utc};
use indexmap::IndexMap;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};

/// Path under the RS origin where resource URIs live.
pub const CONFIRMATIONS_PATH: &str = "/cheq/confirmations/";
/// Path under the RS origin where result URIs live.
pub const RESULTS_PATH: &str = "/cheq/results/";
/// Random bytes in a resource or result id (128 bits).
pub const ID_BYTES: usize = 16;
/// Random bytes in a nonce.
pub const NONCE_BYTES: usize = 24;
/// Longest TTL of a CHEQ (§4).
pub const MAX_TTL_SECS: i64 = 24 * 3600;

/// Stripes of the per-confirmation decision lock.
const LOCK_STRIPES: usize = 64;

const CONFIRMATIONS_TREE: &str = "rs.confirmations";
const RESULTS_TREE: &str = "rs.results";
const NONCES_TREE: &str = "rs.nonces";

/// The confirmed action. Runs once per confirmation (see the module docs).
pub trait Operation: Send + Sync + 'static {
    /// Runs `action` (the opaque value given to [`CheqRs::mint`]) with the
    /// values the user supplied (§8). MUST be idempotent per `key` (the
    /// confirmation id): called again with the same key, it must not repeat the
    /// effect and must return the same result. The result is what the agent
    /// reads (§7): it MUST NOT contain any of the `collected` values.
    fn execute(
        &self,
        key: &str,
        action: &Value,
        collected: &IndexMap<String, String>,
    ) -> Result<Value, String>;
}

/// What to ask the user to confirm.
#[derive(Debug, Clone)]
pub struct MintRequest {
    /// The operation's URI.
    pub operation: String,
    /// Its short human name.
    pub operation_name: String,
    /// The §4 parameter objects, in display order.
    pub parameters: Vec<Value>,
    /// The user at the CS who must confirm.
    pub subject: String,
    /// BCP 47 tag; `en` when `None`.
    pub language: Option<String>,
    /// Lifetime; at most 24 h.
    pub ttl: Duration,
    /// What to run when accepted, given back to [`Operation::execute`]. Stored
    /// at rest: it must not hold anything the user alone may see.
    pub action: Value,
}

/// A pending confirmation just made.
#[derive(Debug, Clone)]
pub struct Minted {
    pub id: String,
    pub result_id: String,
    pub pack: UriPack,
    /// The exact payload bytes that were signed.
    pub payload: Vec<u8>,
    /// The resource-signed document (§5).
    pub document: String,
    pub expires: DateTime<Utc>,
}

/// The answer to a decision (§6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecisionAnswer {
    pub decision: Decision,
}

impl DecisionAnswer {
    /// `{"status":"accepted"}` or `{"status":"rejected"}`.
    pub fn to_json(self) -> Value {
        json!({"status": status_word(self.decision)})
    }
}

fn status_word(d: Decision) -> &'static str {
    match d {
        Decision::Accept => "accepted",
        Decision::Reject => "rejected",
    }
}

/// The result as the agent sees it (§7).
#[derive(Debug, Clone, PartialEq)]
pub enum ResultView {
    Pending,
    Accepted(Value),
    Rejected,
    Expired,
}

impl ResultView {
    /// The §7 body.
    pub fn to_json(&self) -> Value {
        match self {
            ResultView::Pending => json!({"status": "pending"}),
            ResultView::Accepted(result) => json!({"status": "accepted", "result": result}),
            ResultView::Rejected => json!({"status": "rejected"}),
            ResultView::Expired => json!({"status": "expired"}),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "state", rename_all = "lowercase")]
enum State {
    Pending,
    Decided {
        decision: String,
        digest: String,
    },
    Done {
        decision: String,
        digest: String,
        #[serde(default)]
        result: Option<Value>,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    id: String,
    result_id: String,
    resource_uri: String,
    nonce: String,
    /// Unix seconds.
    expires: i64,
    document: String,
    action: Value,
    #[serde(flatten)]
    state: State,
}

impl Record {
    fn expires_at(&self) -> DateTime<Utc> {
        Utc.timestamp_opt(self.expires, 0)
            .single()
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }
}

/// The RS side of CHEQ: pending confirmations, decisions, results.
pub struct CheqRs {
    db: sled::Db,
    confirmations: sled::Tree,
    results: sled::Tree,
    nonces: Arc<dyn NonceStore>,
    key: SigningKey,
    trust: TrustStore,
    base_url: String,
    confirmation_uri: String,
    clock: Arc<dyn Clock>,
    operation: Arc<dyn Operation>,
    /// Decisions are serialised per confirmation (striped by id): the
    /// at-most-once steps of one record never interleave, while different
    /// confirmations proceed in parallel.
    locks: Vec<Mutex<()>>,
}

impl std::fmt::Debug for CheqRs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheqRs")
            .field("base_url", &self.base_url)
            .field("confirmation_uri", &self.confirmation_uri)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

fn random_b64(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    b64::encode(bytes)
}

fn digest_b64(body: &[u8]) -> String {
    b64::encode(Sha256::digest(body))
}

impl CheqRs {
    /// Opens the RS state in `db` (its trees `rs.*`).
    ///
    /// `base_url` is the RS origin (`https://api.example`); `trust` must trust
    /// the confirmation server's keys (the RS's own key is added here);
    /// `confirmation_uri` goes into every URI pack and payload.
    pub fn open(
        db: sled::Db,
        key: SigningKey,
        trust: TrustStore,
        base_url: &str,
        confirmation_uri: &str,
        clock: Arc<dyn Clock>,
        operation: Arc<dyn Operation>,
    ) -> Result<Self, CheqRsError> {
        let base_url = base_url.trim_end_matches('/').to_owned();
        let mut trust = trust;
        let own =
            Jwks::new(vec![key.public_key()]).map_err(|e| CheqRsError::Mint(e.to_string()))?;
        trust
            .add_resource_server(&base_url, own)
            .map_err(|e| CheqRsError::Mint(e.to_string()))?;
        let nonces = SledNonceStore::with_db(db.clone(), NONCES_TREE)?;
        Ok(CheqRs {
            confirmations: db.open_tree(CONFIRMATIONS_TREE)?,
            results: db.open_tree(RESULTS_TREE)?,
            db,
            nonces: Arc::new(nonces),
            key,
            trust,
            base_url,
            confirmation_uri: confirmation_uri.to_owned(),
            clock,
            operation,
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
        })
    }

    /// The RS public keys (`/.well-known/jwks.json`, §9).
    pub fn jwks(&self) -> Value {
        json!({"keys": [self.key.public_jwk()]})
    }

    /// The RS origin.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The confirmation URI put in URI packs.
    pub fn confirmation_uri(&self) -> &str {
        &self.confirmation_uri
    }

    /// The canonical resource URI of confirmation `id`.
    pub fn resource_uri(&self, id: &str) -> String {
        format!("{}{CONFIRMATIONS_PATH}{id}", self.base_url)
    }

    /// The canonical result URI of result `result_id`.
    pub fn result_uri(&self, result_id: &str) -> String {
        format!("{}{RESULTS_PATH}{result_id}", self.base_url)
    }

    /// The current time of this RS.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Makes, signs and stores a pending confirmation.
    pub fn mint(&self, req: MintRequest) -> Result<Minted, CheqRsError> {
        if req.ttl <= Duration::zero() || req.ttl > Duration::seconds(MAX_TTL_SECS) {
            return Err(CheqRsError::Mint("the TTL must be from 1 s to 24 h".into()));
        }
        let now = self.clock.now();
        let date = DateTime::<Utc>::from_timestamp(now.timestamp(), 0).unwrap_or(now);
        let expires = date + req.ttl;
        let id = random_b64(ID_BYTES);
        let result_id = random_b64(ID_BYTES);
        let nonce = random_b64(NONCE_BYTES);
        let resource_uri = self.resource_uri(&id);
        let result_uri = self.result_uri(&result_id);
        let payload = json!({
            "version": "1.0",
            "operation": req.operation,
            "operation name": req.operation_name,
            "inputs": {"parameters": req.parameters},
            "date": date.to_rfc3339_opts(SecondsFormat::Secs, true),
            "nonce": nonce,
            "resource uri": resource_uri,
            "confirmation uri": self.confirmation_uri,
            "subject": req.subject,
            "expires": expires.to_rfc3339_opts(SecondsFormat::Secs, true),
            "language": req.language.unwrap_or_else(|| "en".to_owned()),
        });
        let payload =
            serde_json::to_vec_pretty(&payload).map_err(|e| CheqRsError::Mint(e.to_string()))?;
        Cheq::parse(&payload).map_err(|e| CheqRsError::Mint(e.to_string()))?;
        let document = crate::sign::sign_resource(&payload, &self.key)?;
        let pack = UriPack::new(&self.confirmation_uri, &resource_uri, &result_uri)
            .map_err(|e| CheqRsError::Mint(e.to_string()))?;
        let record = Record {
            id: id.clone(),
            result_id: result_id.clone(),
            resource_uri,
            nonce,
            expires: expires.timestamp(),
            document: document.clone(),
            action: req.action,
            state: State::Pending,
        };
        self.results.insert(result_id.as_bytes(), id.as_bytes())?;
        self.save(&record)?;
        Ok(Minted {
            id,
            result_id,
            pack,
            payload,
            document,
            expires,
        })
    }

    fn load(&self, id: &str) -> Result<Option<Record>, CheqRsError> {
        match self.confirmations.get(id.as_bytes())? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|_| CheqRsError::Corrupt(id.to_owned())),
        }
    }

    /// Writes a record and flushes it (and every earlier write) to disk.
    fn save(&self, record: &Record) -> Result<(), CheqRsError> {
        self.write(record)?;
        self.db.flush()?;
        Ok(())
    }

    /// Writes a record without waiting for the disk.
    fn write(&self, record: &Record) -> Result<(), CheqRsError> {
        let bytes =
            serde_json::to_vec(record).map_err(|_| CheqRsError::Corrupt(record.id.clone()))?;
        self.confirmations.insert(record.id.as_bytes(), bytes)?;
        Ok(())
    }

    fn stripe(&self, id: &str) -> &Mutex<()> {
        let i = Sha256::digest(id.as_bytes())[0] as usize % self.locks.len().max(1);
        &self.locks[i]
    }

    /// The resource-signed document of confirmation `id`, for the CS (§3).
    pub fn fetch(&self, id: &str) -> Result<String, CheqRsError> {
        let record = self.load(id)?.ok_or(CheqRsError::NotFound)?;
        if record.state != State::Pending || self.nonces.get(&record.nonce)?.is_some() {
            return Err(CheqRsError::AlreadyDecided);
        }
        if self.clock.now() >= record.expires_at() {
            return Err(CheqRsError::Expired);
        }
        Ok(record.document)
    }

    /// Takes a decision (§6): `body` is the exact bytes POSTed to the resource
    /// URI of `id` with `?accept` or `?reject` (`decision`).
    pub fn decide(
        &self,
        id: &str,
        decision: Decision,
        body: &[u8],
    ) -> Result<DecisionAnswer, CheqRsError> {
        let _guard = self.stripe(id).lock().unwrap_or_else(|e| e.into_inner());
        let record = self.load(id)?.ok_or(CheqRsError::NotFound)?;
        let digest = digest_b64(body);
        let now = self.clock.now();

        // A byte-identical re-delivery gets the same answer (and completes the
        // steps a crash may have cut short); anything else for a decided nonce
        // is a replay.
        let recorded = self.nonces.get(&record.nonce)?;
        let earlier = match (&record.state, &recorded) {
            (
                State::Decided {
                    digest: d,
                    decision: e,
                }
                | State::Done {
                    digest: d,
                    decision: e,
                    ..
                },
                _,
            ) => Some((d.clone(), e.as_bytes().to_vec())),
            (State::Pending, Some(entry)) => Some((b64::encode(entry.digest), entry.data.clone())),
            (State::Pending, None) => None,
        };
        if let Some((earlier, earlier_decision)) = earlier {
            if earlier != digest {
                return Err(CheqRsError::Replayed);
            }
            let found = std::str::from_utf8(&earlier_decision)
                .ok()
                .and_then(Decision::parse)
                .ok_or_else(|| CheqRsError::Corrupt(record.id.clone()))?;
            if found != decision {
                return Err(crate::sign::VerifyError::DecisionMismatch {
                    expected: decision,
                    found,
                }
                .into());
            }
            return self.complete(record, body, now);
        }

        if now > record.expires_at() + Duration::seconds(CLOCK_SKEW_SECS) {
            return Err(CheqRsError::Expired);
        }
        let verified = self.verify(&record, body, Some(decision), now)?;

        let mut digest_bytes = [0u8; 32];
        digest_bytes.copy_from_slice(&Sha256::digest(body));
        let entry = NonceEntry {
            digest: digest_bytes,
            expires_at: record.expires + CLOCK_SKEW_SECS + 1,
            data: decision.as_str().as_bytes().to_vec(),
        };
        match self.nonces.record(&record.nonce, &entry)? {
            RecordOutcome::Fresh | RecordOutcome::SameAsBefore(_) => {
                self.complete_verified(record, body, verified)
            }
            RecordOutcome::Conflict(_) => Err(CheqRsError::Replayed),
        }
    }

    /// Verifies a decision for `record`, and checks what the RS needs besides §5.
    fn verify(
        &self,
        record: &Record,
        body: &[u8],
        expected: Option<Decision>,
        now: DateTime<Utc>,
    ) -> Result<(Decision, IndexMap<String, String>), CheqRsError> {
        let ctx = Context {
            now,
            resource_uri: Some(&record.resource_uri),
            confirmation_uri: None,
        };
        let verified = verify_decision(body, &self.trust, expected, &ctx)?;
        if verified.fields().nonce != record.nonce {
            return Err(CheqRsError::InvalidOther(
                "the nonce is not the one this resource server issued".into(),
            ));
        }
        let collected = verified.claims().collected.clone().unwrap_or_default();
        if verified.decision() == Decision::Accept {
            for p in &verified.cheq().parameters {
                if let Some(input) = &p.input {
                    let missing = !matches!(collected.get(&p.name), Some(v) if !v.is_empty());
                    if input.required && missing {
                        return Err(CheqRsError::InvalidOther(format!(
                            "rule 3: the required input \"{}\" was not collected",
                            p.name
                        )));
                    }
                }
            }
        }
        Ok((verified.decision(), collected))
    }

    /// Steps 2–4 of the module docs, for a body whose nonce is recorded.
    fn complete(
        &self,
        record: Record,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<DecisionAnswer, CheqRsError> {
        if let State::Done { decision, .. } = &record.state {
            return answer(decision, &record.id);
        }
        // The body was verified when first delivered; verify again to read it,
        // at a time it was valid (it may be re-delivered after expiry).
        let at = now.min(record.expires_at());
        let verified = self.verify(&record, body, None, at)?;
        self.complete_verified(record, body, verified)
    }

    /// Steps 2–4 for a body just verified (`verified` is what it says).
    fn complete_verified(
        &self,
        mut record: Record,
        body: &[u8],
        (decision, collected): (Decision, IndexMap<String, String>),
    ) -> Result<DecisionAnswer, CheqRsError> {
        let digest = digest_b64(body);
        if let State::Done { decision, .. } = &record.state {
            return answer(decision, &record.id);
        }
        if record.state == State::Pending {
            record.state = State::Decided {
                decision: decision.as_str().to_owned(),
                digest: digest.clone(),
            };
            // Not flushed on its own: the flushed nonce of step 1 already
            // stands for the decision, and step 4's flush covers this write.
            self.write(&record)?;
        }
        let result = match decision {
            Decision::Accept => Some(
                self.operation
                    .execute(&record.id, &record.action, &collected)
                    .map_err(CheqRsError::Operation)?,
            ),
            Decision::Reject => None,
        };
        record.state = State::Done {
            decision: decision.as_str().to_owned(),
            digest,
            result,
        };
        self.save(&record)?;
        Ok(DecisionAnswer { decision })
    }

    /// Forgets what can no longer matter: nonce entries of expired CHEQs (the
    /// record of each confirmation still refuses replays), and confirmation
    /// records (with their results) whose CHEQ expired more than `keep` ago.
    /// Returns how many nonces and records were removed.
    pub fn collect_expired(&self, keep: Duration) -> Result<(usize, usize), CheqRsError> {
        // Every stripe, in order: no decision runs while entries go.
        let _guards: Vec<_> = self
            .locks
            .iter()
            .map(|l| l.lock().unwrap_or_else(|e| e.into_inner()))
            .collect();
        let now = self.clock.now();
        let nonces = self.nonces.collect_expired(now.timestamp())?;
        let cutoff = (now - keep).timestamp() - CLOCK_SKEW_SECS;
        let mut records = 0;
        for item in self.confirmations.iter() {
            let (key, bytes) = item?;
            let Ok(record) = serde_json::from_slice::<Record>(&bytes) else {
                continue;
            };
            if record.expires < cutoff {
                self.results.remove(record.result_id.as_bytes())?;
                self.confirmations.remove(key)?;
                records += 1;
            }
        }
        self.db.flush()?;
        Ok((nonces, records))
    }

    /// The result behind `result_id` (§7).
    pub fn result(&self, result_id: &str) -> Result<ResultView, CheqRsError> {
        let id = self
            .results
            .get(result_id.as_bytes())?
            .ok_or(CheqRsError::ResultNotFound)?;
        let id = String::from_utf8_lossy(&id).into_owned();
        let record = self.load(&id)?.ok_or(CheqRsError::ResultNotFound)?;
        Ok(match record.state {
            State::Done {
                decision, result, ..
            } => match Decision::parse(&decision) {
                Some(Decision::Accept) => ResultView::Accepted(result.unwrap_or(Value::Null)),
                Some(Decision::Reject) => ResultView::Rejected,
                None => return Err(CheqRsError::Corrupt(id)),
            },
            State::Decided { .. } => ResultView::Pending,
            State::Pending => {
                if self.clock.now() > record.expires_at() + Duration::seconds(CLOCK_SKEW_SECS) {
                    ResultView::Expired
                } else {
                    ResultView::Pending
                }
            }
        })
    }
}

fn answer(decision: &str, id: &str) -> Result<DecisionAnswer, CheqRsError> {
    Decision::parse(decision)
        .map(|decision| DecisionAnswer { decision })
        .ok_or_else(|| CheqRsError::Corrupt(id.to_owned()))
}

#[cfg(test)]
mod tests {
    //! Crash recovery: each durable step of the module docs, cut short.
    use super::*;
    use crate::resource::tools::DemoTools;
    use crate::sign::{countersign, verify_resource, Channel, DecisionInput};
    use crate::time::ManualClock;

    struct Fixture {
        _dir: tempfile::TempDir,
        db: sled::Db,
        rs: CheqRs,
        tools: Arc<DemoTools>,
        cs: SigningKey,
        clock: Arc<ManualClock>,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let cs = SigningKey::from_seed("cs", &[1; 32]).unwrap();
        let mut trust = TrustStore::new();
        trust
            .add_confirmation_server(
                "http://127.0.0.1:9",
                Jwks::new(vec![cs.public_key()]).unwrap(),
            )
            .unwrap();
        let clock = Arc::new(ManualClock::new(Utc::now()));
        let tools = Arc::new(DemoTools::open(db.clone()).unwrap());
        let rs = CheqRs::open(
            db.clone(),
            SigningKey::from_seed("rs", &[2; 32]).unwrap(),
            trust,
            "http://127.0.0.1:8",
            "http://127.0.0.1:9/confirm",
            clock.clone(),
            tools.clone(),
        )
        .unwrap();
        Fixture {
            _dir: dir,
            db,
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
                    parameters: vec![json!({"parameter name": "flight number", "parameter value": "UA23"})],
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

        fn record_nonce(&self, m: &Minted, body: &str) {
            let nonces = SledNonceStore::with_db(self.db.clone(), NONCES_TREE).unwrap();
            let mut digest = [0u8; 32];
            digest.copy_from_slice(&Sha256::digest(body.as_bytes()));
            let rec = self.rs.load(&m.id).unwrap().unwrap();
            let entry = NonceEntry {
                digest,
                expires_at: rec.expires + 61,
                data: b"accept".to_vec(),
            };
            assert_eq!(
                nonces.record(&rec.nonce, &entry).unwrap(),
                RecordOutcome::Fresh
            );
        }

        fn mark_decided(&self, m: &Minted, body: &str) {
            let mut rec = self.rs.load(&m.id).unwrap().unwrap();
            rec.state = State::Decided {
                decision: "accept".into(),
                digest: digest_b64(body.as_bytes()),
            };
            self.rs.save(&rec).unwrap();
        }
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
        // Another document for that nonce is a replay, even though the record is pending.
        assert!(matches!(
            f.rs.decide(&m.id, Decision::Accept, other.as_bytes()),
            Err(CheqRsError::Replayed)
        ));
        assert_eq!(f.tools.runs(), 0);
        // The re-delivery completes it.
        let a =
            f.rs.decide(&m.id, Decision::Accept, body.as_bytes())
                .unwrap();
        assert_eq!(a.decision, Decision::Accept);
        assert_eq!(f.tools.runs(), 1);
        assert!(matches!(
            f.rs.result(&m.result_id).unwrap(),
            ResultView::Accepted(_)
        ));
        f.rs.decide(&m.id, Decision::Accept, body.as_bytes())
            .unwrap();
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
        let rec = f.rs.load(&m.id).unwrap().unwrap();
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
}
