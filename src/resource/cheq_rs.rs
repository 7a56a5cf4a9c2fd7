//! The resource-server side of CHEQ (PROTOCOL.md §1, §3, §4, §6, §7), for any
//! API server to embed: no HTTP, no database and nothing of the demo tools
//! here.
//!
//! - [`CheqRs::mint`] makes a pending confirmation: resource and result ids
//!   of 128 random bits each and a nonce of 24 random bytes, each after the
//!   time in milliseconds (so that a store keeps a confirmation's records
//!   beside those of its time), `date` now and `expires`
//!   now + TTL (at most 24 h), signs the payload as the resource server and
//!   returns the URI pack (§1). The pending confirmation is kept in the
//!   [`CheqRecords`] store, durably, so it survives a restart.
//! - [`CheqRs::fetch`] serves it to the CS (§3): the signed document, or
//!   `Expired` / `AlreadyDecided` (410) / `NotFound` (404).
//! - [`CheqRs::decide`] takes the countersigned document (§6).
//! - [`CheqRs::result`] answers the agent (§7). It never contains a value the
//!   user typed (§8): collected values are handed to the [`Operation`] and never
//!   stored.
//!
//! # Exactly once, across crashes
//!
//! A decision goes through these steps. Everything they write is durable
//! before the answer. With an operation whose effect is kept elsewhere, the
//! nonce is durable before anything else happens, and step 2's write need
//! not be (the nonce stands for the decision, and step 4's durable write
//! covers it). With an operation whose effect is in the RS's store, steps 1
//! to 3 write unflushed and step 4's flush covers them all; the store keeps
//! its writes in order, so a crash keeps a prefix of the steps, as between
//! durable steps:
//!
//! 1. the nonce is recorded in the [`NonceStore`] with the SHA-256 of the exact
//!    body bytes (§6: "records the nonce durably before it answers"): on disk
//!    at once when the operation's effect is kept elsewhere
//!    ([`Effect::Elsewhere`]); when the operation writes it to the RS's own
//!    store ([`Effect::InStore`], the demo tools), written unflushed, and made
//!    durable with the effect by step 4's flush (the store keeps its writes in
//!    order, so no crash keeps the effect without the nonce): one flush per
//!    decision instead of three. A decision that ends before step 4's write
//!    (a failed operation, a replay), and a re-delivery, flush the store
//!    before the answer;
//! 2. the confirmation record moves from `pending` to `decided` (decision and
//!    digest), when the operation's effect is kept elsewhere: with the effect
//!    in the store, step 3 finds an effect made before under its key, and
//!    step 4's write follows (below, "Awaited durability");
//! 3. on `accept`, the [`Operation`] runs with the confirmation id as its
//!    idempotency key;
//! 4. the record moves to `done` with the operation's result, and only then is
//!    the answer sent.
//!
//! Steps 2 and 4 are compare-and-set moves ([`CheqRecords::advance`]): a
//! record only moves from the state it was read in. Their writes are visible
//! before step 4's flush ends; a decision holds its lock (below) until then,
//! and [`CheqRs::result`] reads a decided record under that lock, so that an
//! agent is never shown a result a crash could still take back.
//!
//! A crash anywhere leaves a state a re-delivery completes: the CS keeps
//! delivering the same bytes until it gets an answer (§6), a byte-identical
//! body is recognised by its digest (in the nonce store or in the record) and
//! the remaining steps run, from the collected values carried, signed, in that
//! body. A *different* document for a decided nonce is `Replayed` whatever step
//! was reached. Step 3 can therefore be re-entered after a crash that happened
//! after the operation's effect but before step 4, so an [`Operation`] MUST be
//! idempotent per key: the demo tools write their effect and its result under
//! that key in one atomic write of their execution log
//! ([`crate::store::rs::Executions`]) and return the stored result when the key
//! is already present; a real API passes the key on as its own idempotency key.
//! Decisions on one confirmation are serialised by a lock (striped by id), so
//! two concurrent deliveries of the same document cannot both run the
//! operation, while different confirmations proceed in parallel.
//!
//! # Awaited durability
//!
//! [`CheqRs::mint_async`] and [`CheqRs::decide_async`] are what an async
//! server calls. On a store with a flusher (sled, [`RsStore::flusher`]),
//! with an operation whose effect is in the store, they take the steps on
//! the caller's task with every write unflushed, and await one flush
//! before they answer: the same prefix-of-the-steps argument as above, since
//! the flush covers every write made before it started. Step 2 is not
//! written then: step 4's write, made before the same flush, would replace
//! it unseen, and a crash keeps the nonce, perhaps the effect, and a
//! pending record, which a re-delivery completes as after step 1 or 3
//! (the effect found under its key). The decision's lock
//! (an async mutex) is held until that flush ends, so a result is still
//! never read before it is on disk. Otherwise they run [`CheqRs::mint`] and
//! [`CheqRs::decide`] on a blocking thread.
//!
//! # Expiry
//!
//! `fetch` refuses from `expires` on (the user could not decide in time). A
//! decision is accepted until `expires` + 60 s (the clock skew of §5 rule 4),
//! and the result only turns `expired` after that, so an agent never sees
//! `expired` for a CHEQ that is then accepted.

use super::error::CheqRsError;
use crate::cheq::{Cheq, Decision, DecisionAnswer, UriPack};
use crate::keyring::KeyRing;
use crate::peerkeys::PeerKeys;
use crate::recent::Recent;
use crate::sign::verify::CLOCK_SKEW_SECS;
use crate::sign::{
    b64, verify_decision, verify_own_decision, Context, TrustStore, VerifiedDecision, VerifyError,
};
use crate::store::rs::{CheqRecord, CheqRecords, CheqState, RsStore, Transition};
use crate::store::{AsyncFlush, Durability};
use crate::store::{NonceEntry, NonceStore, RecordOutcome, StoreError};
use crate::time::Clock;
use chrono::{DateTime, Duration, SecondsFormat, TimeZone, Utc};
use indexmap::IndexMap;
use rand::RngCore;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use tokio::sync::Mutex;

/// Path under the RS origin where resource URIs live.
pub const CONFIRMATIONS_PATH: &str = "/cheq/confirmations/";
/// Path under the RS origin where result URIs live.
pub const RESULTS_PATH: &str = "/cheq/results/";
/// Random bytes in a resource or result id (128 bits), after the time.
pub const ID_BYTES: usize = 16;
/// Random bytes in a nonce, after the time.
pub const NONCE_BYTES: usize = 24;
/// Bytes of the time (the low 32 bits of the Unix time in milliseconds,
/// big-endian) that lead an id or a nonce, before its random bytes.
pub const TIME_BYTES: usize = 4;
/// Longest TTL of a CHEQ (§4).
pub const MAX_TTL_SECS: i64 = 24 * 3600;

/// Stripes of the per-confirmation decision lock.
const LOCK_STRIPES: usize = 64;

/// Where an [`Operation`] keeps its effect, which decides when the RS makes
/// a decision's nonce durable (module docs, "Exactly once").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Outside the RS's store (another service, another database): the
    /// nonce is on disk before the operation runs, so that no crash can
    /// forget a decision whose effect happened.
    Elsewhere,
    /// In the RS's own store (the [`RsStore`] given to [`CheqRs::new`]),
    /// written without a flush of its own
    /// ([`Executions::record_unflushed`](crate::store::rs::Executions::record_unflushed)):
    /// the nonce, the `decided` state, the effect and the final state are
    /// then written in that order and made durable together, by one flush
    /// with the final state, before the answer. A crash keeps a prefix of
    /// them, which a re-delivery completes, as it completes one cut short by
    /// a crash between durable steps. On a store with a flusher (sled),
    /// [`CheqRs::decide_async`] runs such an operation on the server's
    /// async task and writes no `decided` state (module docs, "Awaited
    /// durability"): it must not wait on anything but the store.
    InStore,
}

/// The confirmed action. Runs once per confirmation (see the module docs).
pub trait Operation: Send + Sync + 'static {
    /// Where the effect is kept. [`Effect::Elsewhere`] unless the operation
    /// writes it, unflushed, to the RS's own store.
    fn effect(&self) -> Effect {
        Effect::Elsewhere
    }

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

/// When the CHEQ of `record` expires.
fn expires_at(record: &CheqRecord) -> DateTime<Utc> {
    Utc.timestamp_opt(record.expires, 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The caller data of a nonce entry: the decision's wire word.
fn nonce_data(decision: Decision) -> Vec<u8> {
    decision.as_str().as_bytes().to_vec()
}

/// Reads back the decision [`nonce_data`] wrote in the entry of `nonce`.
fn nonce_decision(nonce: &str, entry: &NonceEntry) -> Result<Decision, StoreError> {
    std::str::from_utf8(&entry.data)
        .ok()
        .and_then(Decision::parse)
        .ok_or_else(|| StoreError::Corrupt {
            key: nonce.to_owned(),
            reason: "the nonce entry does not name a decision".to_owned(),
        })
}

/// The RS side of CHEQ: pending confirmations, decisions, results.
pub struct CheqRs {
    records: Arc<dyn CheqRecords>,
    nonces: Arc<dyn NonceStore>,
    keys: Arc<KeyRing>,
    cs_keys: PeerKeys,
    trust: TrustStore,
    base_url: String,
    confirmation_uri: String,
    clock: Arc<dyn Clock>,
    operation: Arc<dyn Operation>,
    /// Decisions are serialised per confirmation (striped by id): the
    /// at-most-once steps of one record never interleave, while different
    /// confirmations proceed in parallel. (An async mutex: with a flusher,
    /// a decision holds it while it awaits its flush.)
    locks: Vec<Mutex<()>>,
    /// The store's flusher, when it has one (sled): the durable steps of
    /// [`mint_async`](CheqRs::mint_async) and
    /// [`decide_async`](CheqRs::decide_async) then run on the caller's task
    /// and await their flush, instead of holding a thread.
    flusher: Option<AsyncFlush>,
    /// Records this instance minted, still pending as far as it knows
    /// ([`RsStore::recent_records`]; `None` when 0). A record's document,
    /// nonce and expiry never change, so the fetch serves a kept one after
    /// checking its nonce in the store (recorded before any move out of
    /// pending, here or on another instance); a decision takes it out, and
    /// every move it makes is a compare-and-set on the stored state, which
    /// finds a record another instance moved meanwhile.
    recent: Option<Recent<CheqRecord>>,
}

impl std::fmt::Debug for CheqRs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheqRs")
            .field("base_url", &self.base_url)
            .field("confirmation_uri", &self.confirmation_uri)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// `n` random bytes after the time `at` ([`TIME_BYTES`]: the low 32 bits of
/// the Unix time in milliseconds, big-endian, which come round every 49.7
/// days, far longer than a record is kept), in base64url. Ids and nonces
/// made in the same 256 ms share their first four characters, so a store
/// keeps records of one time side by side: a confirmation's look-ups touch
/// recent pages, which the cache holds however much older data is kept,
/// and its writes add to the same few pages (sled rewrites a page it
/// changes). With random keys, every look-up in a tree larger than the
/// cache read a page back from disk. The text is not in time order
/// everywhere: base64url's alphabet is not in ASCII's (`z` is followed by
/// `0`), so where a leading character passes from `z` to `0` (and at `9`,
/// `-`, `_`) new keys sort before the ones just made. They still sit
/// together; what this costs is that a tree's keys are not added at one end
/// only, which no store here relies on (BENCHMARKS.md: ids that sort as
/// text, with the rightmost leaf split near its end, bought nothing).
/// The random part alone carries the bits §1 and §4 ask for.
fn ordered_b64(at: DateTime<Utc>, n: usize) -> String {
    let ms = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    let mut bytes = vec![0u8; TIME_BYTES + n];
    bytes[..TIME_BYTES].copy_from_slice(&ms.to_be_bytes()[8 - TIME_BYTES..]);
    rand::rngs::OsRng.fill_bytes(&mut bytes[TIME_BYTES..]);
    b64::encode(bytes)
}

impl CheqRs {
    /// The RS side of CHEQ on `store` (its `records` and `nonces`).
    ///
    /// `base_url` is the RS origin (`https://api.example`); `keys` is its
    /// own key set (the active key signs; its published keys are trusted for
    /// its own CHEQs, §9); `cs_keys` are the confirmation server's keys;
    /// `confirmation_uri` goes into every URI pack and payload.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: &RsStore,
        keys: Arc<KeyRing>,
        cs_keys: PeerKeys,
        base_url: &str,
        confirmation_uri: &str,
        clock: Arc<dyn Clock>,
        operation: Arc<dyn Operation>,
    ) -> Result<Self, CheqRsError> {
        let base_url = base_url.trim_end_matches('/').to_owned();
        let mut trust = TrustStore::new();
        trust
            .add(true, &base_url, keys.clone())
            .map_err(|e| CheqRsError::Mint(e.to_string()))?;
        trust
            .add(
                false,
                &crate::cheq::uri::origin_of(confirmation_uri),
                cs_keys.source(),
            )
            .map_err(|e| CheqRsError::Mint(e.to_string()))?;
        Ok(CheqRs {
            records: store.records.clone(),
            nonces: store.nonces.clone(),
            keys,
            cs_keys,
            trust,
            base_url,
            confirmation_uri: confirmation_uri.to_owned(),
            clock,
            operation,
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            flusher: store.flusher.clone(),
            recent: (store.recent_records > 0).then(|| Recent::new(store.recent_records)),
        })
    }

    /// The RS public keys (`/.well-known/jwks.json`, §9): active, new and
    /// retiring, each with its state.
    pub fn jwks(&self) -> Value {
        self.keys.published().to_json()
    }

    /// The RS's own key set.
    pub fn keys(&self) -> &Arc<KeyRing> {
        &self.keys
    }

    /// The confirmation server's keys, for the front end to refresh before
    /// a decision is verified (fetching is I/O, verification is not).
    pub fn cs_keys(&self) -> &PeerKeys {
        &self.cs_keys
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
        self.mint_then(req, Durability::Now)
    }

    /// [`mint`](Self::mint) for an async caller: with a flusher, on the
    /// caller's task, the record written unflushed and then awaited durable;
    /// otherwise on a blocking thread.
    pub async fn mint_async(self: &Arc<Self>, req: MintRequest) -> Result<Minted, CheqRsError> {
        match &self.flusher {
            Some(flusher) => {
                let minted = self.mint_then(req, Durability::Deferred)?;
                flusher.flushed().await?;
                Ok(minted)
            }
            None => self.on_blocking_thread(move |rs| rs.mint(req)).await,
        }
    }

    fn mint_then(&self, req: MintRequest, durability: Durability) -> Result<Minted, CheqRsError> {
        if req.ttl <= Duration::zero() || req.ttl > Duration::seconds(MAX_TTL_SECS) {
            return Err(CheqRsError::Mint("the TTL must be from 1 s to 24 h".into()));
        }
        let now = self.clock.now();
        let date = DateTime::<Utc>::from_timestamp(now.timestamp(), 0).unwrap_or(now);
        let expires = date + req.ttl;
        let id = ordered_b64(now, ID_BYTES);
        let result_id = ordered_b64(now, ID_BYTES);
        let nonce = ordered_b64(now, NONCE_BYTES);
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
        let key = self
            .keys
            .signer()
            .map_err(|e| CheqRsError::Keys(e.to_string()))?;
        let document = crate::sign::sign_resource(&payload, &key)?;
        let pack = UriPack::new(&self.confirmation_uri, &resource_uri, &result_uri)
            .map_err(|e| CheqRsError::Mint(e.to_string()))?;
        let record = CheqRecord {
            id: id.clone(),
            result_id: result_id.clone(),
            resource_uri,
            nonce,
            expires: expires.timestamp(),
            document: document.clone(),
            action: req.action,
            state: CheqState::Pending,
        };
        let created = match durability {
            Durability::Now => self.records.create(&record)?,
            Durability::Deferred => self.records.create_unflushed(&record)?,
        };
        if !created {
            return Err(CheqRsError::Mint(
                "a random id is already taken; try again".into(),
            ));
        }
        if let Some(recent) = &self.recent {
            recent.put(&id, record);
        }
        Ok(Minted {
            id,
            result_id,
            pack,
            payload,
            document,
            expires,
        })
    }

    /// A kept record while its CHEQ has not expired: past that, the store
    /// answers (it may have collected the record).
    fn unexpired(&self, kept: Option<CheqRecord>) -> Option<CheqRecord> {
        kept.filter(|record| self.clock.now() < expires_at(record))
    }

    fn stripe(&self, id: &str) -> &Mutex<()> {
        let i = Sha256::digest(id.as_bytes())[0] as usize % self.locks.len().max(1);
        &self.locks[i]
    }

    /// The resource-signed document of confirmation `id`, for the CS (§3).
    pub fn fetch(&self, id: &str) -> Result<String, CheqRsError> {
        let kept = self.recent.as_ref().and_then(|r| r.get(id));
        let record = match self.unexpired(kept) {
            Some(record) => record,
            None => self.records.get(id)?.ok_or(CheqRsError::NotFound)?,
        };
        if record.state != CheqState::Pending || self.nonces.get(&record.nonce)?.is_some() {
            return Err(CheqRsError::AlreadyDecided);
        }
        if self.clock.now() >= expires_at(&record) {
            return Err(CheqRsError::Expired);
        }
        Ok(record.document)
    }

    /// Takes a decision (§6): `body` is the exact bytes POSTed to the resource
    /// URI of `id` with `?accept` or `?reject` (`decision`).
    ///
    /// Blocks: call it from a thread that may. Called on an async task, it
    /// panics (tokio's `blocking_lock`) rather than stall the task's worker:
    /// an async caller has [`decide_async`](Self::decide_async).
    pub fn decide(
        &self,
        id: &str,
        decision: Decision,
        body: &[u8],
    ) -> Result<DecisionAnswer, CheqRsError> {
        let _guard = self.stripe(id).blocking_lock();
        self.decide_locked(id, decision, body, Durability::Now)
    }

    /// [`decide`](Self::decide) for an async caller. With a flusher and an
    /// operation whose effect is in the RS's store, the steps run on the
    /// caller's task, every write unflushed, and one awaited flush makes
    /// them durable before the answer (the decision's lock is held until
    /// then, as the module docs say); otherwise on a blocking thread.
    pub async fn decide_async(
        self: &Arc<Self>,
        id: Arc<String>,
        decision: Decision,
        body: Arc<[u8]>,
    ) -> Result<DecisionAnswer, CheqRsError> {
        match &self.flusher {
            Some(flusher) if self.in_store() => {
                let _guard = self.stripe(&id).lock().await;
                let answer = self.decide_locked(&id, decision, &body, Durability::Deferred);
                // Also after a refusal: what it read may be another
                // decision's write, visible and not yet on disk.
                flusher.flushed().await?;
                answer
            }
            _ => {
                self.on_blocking_thread(move |rs| rs.decide(&id, decision, &body))
                    .await
            }
        }
    }

    /// Runs `f` on this RS on a blocking thread (a store call that may wait
    /// on the disk or the network).
    async fn on_blocking_thread<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&CheqRs) -> Result<T, CheqRsError> + Send + 'static,
    ) -> Result<T, CheqRsError> {
        let rs = self.clone();
        tokio::task::spawn_blocking(move || f(&rs))
            .await
            .map_err(|_| {
                CheqRsError::Store(StoreError::Backend {
                    op: "worker",
                    message: "the blocking task failed".into(),
                })
            })?
    }

    /// [`decide`](Self::decide) under the decision's lock. Deferred
    /// durability applies to an operation whose effect is in the RS's store
    /// ([`Effect::InStore`]) only: an effect kept elsewhere needs its nonce
    /// on disk before it runs.
    fn decide_locked(
        &self,
        id: &str,
        decision: Decision,
        body: &[u8],
        durability: Durability,
    ) -> Result<DecisionAnswer, CheqRsError> {
        // A kept record is taken out: whatever this decision does to the
        // record, a later one reads the store.
        let kept = self.recent.as_ref().and_then(|r| r.take(id));
        let record = match self.unexpired(kept) {
            Some(record) => record,
            None => self.records.get(id)?.ok_or(CheqRsError::NotFound)?,
        };
        let _span =
            crate::text::confirmation_span(&crate::text::confirmation_id(&record.resource_uri))
                .entered();
        let digest_bytes: [u8; 32] = Sha256::digest(body).into();
        let digest = b64::encode(digest_bytes);
        let now = self.clock.now();
        let delivered = Delivered {
            body,
            digest: &digest,
            decision,
            now,
            durability,
        };

        // A byte-identical re-delivery gets the same answer (and completes the
        // steps a crash may have cut short); anything else for a decided nonce
        // is a replay.
        let decided = (record.state.digest().map(str::to_owned)).zip(record.state.decision());
        if let Some((earlier, found)) = decided {
            return self.again(record, &delivered, (&earlier, found));
        }

        // Pending. Its nonce may be recorded all the same (a crash between
        // steps 1 and 2): the record of step 1 below finds that, so the nonce
        // is not read first. Only a body that cannot be taken as new (expired,
        // or no longer verifying) is looked up there, since a re-delivery of
        // recorded bytes completes whatever the time or the keys now say.
        let fresh = if now > expires_at(&record) + Duration::seconds(CLOCK_SKEW_SECS) {
            Err(CheqRsError::Expired)
        } else {
            self.verify(&record, body, Some(decision), now)
        };
        let verified = match fresh {
            Ok(verified) => verified,
            Err(refused) => {
                return match self.nonces.get(&record.nonce)? {
                    Some(entry) => {
                        let earlier = b64::encode(entry.digest);
                        let found = nonce_decision(&record.nonce, &entry)?;
                        self.again(record, &delivered, (&earlier, found))
                    }
                    None => Err(refused),
                };
            }
        };

        let entry = NonceEntry {
            digest: digest_bytes,
            expires_at: record.expires + CLOCK_SKEW_SECS + 1,
            data: nonce_data(decision),
        };
        let nonce = record.nonce.clone();
        let in_store = self.in_store();
        // Deferred durability is for an effect in the store only (the
        // nonce of an effect elsewhere is on disk before it runs).
        let deferred = durability == Durability::Deferred && in_store;
        let recorded = if in_store {
            self.nonces.record_unflushed(&nonce, &entry)?
        } else {
            self.nonces.record(&nonce, &entry)?
        };
        let mut flushed = false;
        let answer = match recorded {
            RecordOutcome::Fresh | RecordOutcome::SameAsBefore(_) => {
                log::info!("decision recorded: {decision}");
                self.complete_verified(record, &digest, &verified, durability, &mut flushed)
            }
            RecordOutcome::Conflict(_) => {
                log::info!("a replay of a decided nonce was refused");
                Err(CheqRsError::Replayed)
            }
        };
        if in_store && !flushed && !deferred {
            // The steps ended before the final state's durable write (a
            // failed operation, a refusal): the nonce is on disk before the
            // answer all the same (§6).
            self.nonces.flush()?;
        }
        answer
    }

    /// Whether the operation keeps its effect in this RS's store, written
    /// unflushed ([`Effect::InStore`]).
    fn in_store(&self) -> bool {
        self.operation.effect() == Effect::InStore
    }

    /// A delivery for a nonce already decided by a body of digest `earlier`
    /// that said `found`: the same bytes complete the steps left, anything
    /// else is refused.
    fn again(
        &self,
        record: CheqRecord,
        delivered: &Delivered<'_>,
        (earlier, found): (&str, Decision),
    ) -> Result<DecisionAnswer, CheqRsError> {
        let decision = delivered.decision;
        if earlier != delivered.digest {
            log::info!("a replay of a decided nonce was refused");
            return Err(CheqRsError::Replayed);
        }
        if found != decision {
            return Err(VerifyError::DecisionMismatch {
                expected: decision,
                found,
            }
            .into());
        }
        let answer = self.complete(record, delivered);
        if self.in_store() && delivered.durability == Durability::Now {
            // What the re-delivery finds may be visible and not yet on disk
            // (a final state whose flush failed): it is before the answer.
            self.nonces.flush()?;
        }
        answer
    }

    /// Verifies a decision for `record` (§5, rules 1–4, the required inputs
    /// of rule 3 included), and that it carries the nonce this RS issued.
    fn verify(
        &self,
        record: &CheqRecord,
        body: &[u8],
        expected: Option<Decision>,
        now: DateTime<Utc>,
    ) -> Result<VerifiedDecision, CheqRsError> {
        let ctx = Context {
            now,
            resource_uri: Some(&record.resource_uri),
            confirmation_uri: None,
        };
        // A pending record still holds the document this RS issued: its own
        // signature in the decision is recognised, not verified again.
        let verified = if record.document.is_empty() {
            verify_decision(body, &self.trust, expected, &ctx)?
        } else {
            verify_own_decision(body, &record.document, &self.trust, expected, &ctx)?
        };
        if verified.fields().nonce != record.nonce {
            return Err(CheqRsError::InvalidOther(
                "the nonce is not the one this resource server issued".into(),
            ));
        }
        Ok(verified)
    }

    /// Steps 2–4 of the module docs, for a body whose nonce is recorded.
    fn complete(
        &self,
        record: CheqRecord,
        delivered: &Delivered<'_>,
    ) -> Result<DecisionAnswer, CheqRsError> {
        if let CheqState::Done { decision, .. } = record.state {
            return Ok(DecisionAnswer { decision });
        }
        // The body was verified when first delivered; verify again to read it,
        // at a time it was valid (it may be re-delivered after expiry).
        let at = delivered.now.min(expires_at(&record));
        let verified = self.verify(&record, delivered.body, None, at)?;
        self.complete_verified(
            record,
            delivered.digest,
            &verified,
            delivered.durability,
            &mut false,
        )
    }

    /// Steps 2–4 for a body just verified (`verified` is what it says;
    /// `digest` is the base64url SHA-256 of the body). `flushed` turns true
    /// with step 4's durable write (everything written before it is then
    /// durable too); with [`Durability::Deferred`] (an effect in the store),
    /// step 4 writes unflushed too.
    fn complete_verified(
        &self,
        mut record: CheqRecord,
        digest: &str,
        verified: &VerifiedDecision,
        durability: Durability,
        flushed: &mut bool,
    ) -> Result<DecisionAnswer, CheqRsError> {
        let decision = verified.decision();
        let decided = CheqState::Decided {
            decision,
            digest: digest.to_owned(),
        };
        match &record.state {
            CheqState::Done { decision, .. } => {
                return Ok(DecisionAnswer {
                    decision: *decision,
                })
            }
            // Not durable on its own: step 4's durable write covers this
            // (and, with the effect kept elsewhere, the nonce of step 1,
            // durable already, stands for the decision meanwhile).
            // With the effect in the store, the move to `decided` is not
            // written: the operation, idempotent per key, finds its effect
            // under that key if it ran before, so the record need not say
            // that it may have. On sled the final state below is written
            // before any of these writes can reach the disk, by the same
            // flush, and would replace it unseen; on PostgreSQL it would be
            // one more statement. A crash keeps the nonce, perhaps the
            // effect, and a pending record, which a re-delivery completes as
            // after step 1 or 3.
            CheqState::Pending if self.in_store() => {}
            CheqState::Pending => {
                let moved = self.records.advance_record(&record, &decided, false)?;
                if let Some(answer) = settled_elsewhere(moved, digest)? {
                    return Ok(answer);
                }
                // Decided now, here or by a delivery of the same bytes.
                record.enter(decided.clone());
            }
            // Decided by these very bytes (the callers check the digest).
            CheqState::Decided { .. } if record.state == decided => {}
            CheqState::Decided { .. } => return Err(CheqRsError::Replayed),
        }
        let result = match decision {
            Decision::Accept => {
                let none = IndexMap::new();
                let collected = verified.claims().collected.as_ref().unwrap_or(&none);
                Some(
                    self.operation
                        .execute(&record.id, &record.action, collected)
                        .map_err(CheqRsError::Operation)?,
                )
            }
            Decision::Reject => None,
        };
        let done = CheqState::Done {
            decision,
            digest: digest.to_owned(),
            result,
        };
        let durable = durability == Durability::Now || !self.in_store();
        let moved = self.records.advance_record(&record, &done, durable)?;
        *flushed = moved == Transition::Moved;
        Ok(settled_elsewhere(moved, digest)?.unwrap_or(DecisionAnswer { decision }))
    }

    /// Forgets what can no longer matter: nonce entries of expired CHEQs (the
    /// record of each confirmation still refuses replays), and confirmation
    /// records (with their results) whose CHEQ expired more than `keep` ago.
    /// Returns how many nonces and records were removed. Blocks, as
    /// [`decide`](Self::decide) does (and panics on an async task).
    pub fn collect_expired(&self, keep: Duration) -> Result<(usize, usize), CheqRsError> {
        // Every stripe, in order: no decision runs while entries go.
        let _guards: Vec<_> = self.locks.iter().map(|l| l.blocking_lock()).collect();
        let now = self.clock.now();
        let nonces = self.nonces.collect_expired(now.timestamp())?;
        let cutoff = (now - keep).timestamp() - CLOCK_SKEW_SECS;
        let records = self.records.collect_expired(cutoff)?;
        Ok((nonces, records))
    }

    /// The result behind `result_id` (§7).
    pub fn result(&self, result_id: &str) -> Result<ResultView, CheqRsError> {
        let mut record = self
            .records
            .by_result(result_id)?
            .ok_or(CheqRsError::ResultNotFound)?;
        if record.state != CheqState::Pending {
            // A decision's writes are visible before its flush (one for all
            // of them, with the final state: `Effect::InStore`); a decision
            // holds its lock until they are durable, so a result read under
            // it is one no crash can take back. While a decision holds it,
            // the result is pending (never a wait: the RS may serve this on
            // its async worker).
            let Ok(_guard) = self.stripe(&record.id).try_lock() else {
                return Ok(ResultView::Pending);
            };
            record = self
                .records
                .get(&record.id)?
                .ok_or(CheqRsError::ResultNotFound)?;
        }
        Ok(match record.state {
            CheqState::Done {
                decision: Decision::Accept,
                result,
                ..
            } => ResultView::Accepted(result.unwrap_or(Value::Null)),
            CheqState::Done {
                decision: Decision::Reject,
                ..
            } => ResultView::Rejected,
            CheqState::Decided { .. } => ResultView::Pending,
            CheqState::Pending => {
                if self.clock.now() > expires_at(&record) + Duration::seconds(CLOCK_SKEW_SECS) {
                    ResultView::Expired
                } else {
                    ResultView::Pending
                }
            }
        })
    }
}

/// After the compare-and-set move of step 2 or 4: `None` to go on (it moved,
/// or another writer took step 2 for the same body); the answer another
/// writer reached for the same body; or `Replayed` when the record holds
/// another body's decision.
fn settled_elsewhere(
    moved: Transition,
    digest: &str,
) -> Result<Option<DecisionAnswer>, CheqRsError> {
    match moved {
        Transition::Moved => Ok(None),
        Transition::Missing => Err(CheqRsError::NotFound),
        Transition::Other(current) => match current.state {
            CheqState::Done {
                decision,
                digest: d,
                ..
            } if d == digest => Ok(Some(DecisionAnswer { decision })),
            CheqState::Decided { digest: d, .. } if d == digest => Ok(None),
            _ => Err(CheqRsError::Replayed),
        },
    }
}

/// One delivery of a decision, as [`CheqRs::decide`] took it.
struct Delivered<'a> {
    /// The exact bytes posted.
    body: &'a [u8],
    /// Their base64url SHA-256.
    digest: &'a str,
    /// The decision the URI's query named.
    decision: Decision,
    /// When it was taken.
    now: DateTime<Utc>,
    /// When its writes are made durable.
    durability: Durability,
}
