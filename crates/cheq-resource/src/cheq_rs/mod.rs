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
//! ([`cheq_store::rs::Executions`]) and return the stored result when the key
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

mod decide;
mod error;
mod mint;
mod operation;
mod records;

pub use error::CheqRsError;
pub use mint::{MintRequest, Minted};
pub use operation::{Effect, Operation};
pub use records::ResultView;

use crate::hosts::Hosts;
use crate::trusted_cs::ConfirmationServer;
use cheq_core::sign::TrustStore;
use cheq_store::rs::{CheqRecord, CheqRecords, RsStore};
use cheq_store::{AsyncFlush, NonceStore, StoreError};
use cheq_support::keyring::KeyRing;
use cheq_support::recent::Recent;
use cheq_support::time::Clock;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::Value;
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

/// When the CHEQ of `record` expires.
fn expires_at(record: &CheqRecord) -> DateTime<Utc> {
    Utc.timestamp_opt(record.expires, 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// This RS's keys for `base_url`, and each CS's of `hosts` for its origin.
fn build_trust(
    base_url: &str,
    keys: &Arc<KeyRing>,
    hosts: &Hosts,
) -> Result<TrustStore, CheqRsError> {
    let mut trust = TrustStore::new();
    trust
        .add(true, base_url, keys.clone())
        .map_err(|e| CheqRsError::Mint(e.to_string()))?;
    for (origin, source) in hosts.trust_entries() {
        trust
            .add(false, &origin, source)
            .map_err(|e| CheqRsError::Mint(e.to_string()))?;
    }
    Ok(trust)
}

/// The RS side of CHEQ: pending confirmations, decisions, results.
pub struct CheqRs {
    records: Arc<dyn CheqRecords>,
    nonces: Arc<dyn NonceStore>,
    keys: Arc<KeyRing>,
    /// The default CS and the ones users chose (§17).
    hosts: Arc<Hosts>,
    /// This RS's keys for its own origin, and each CS's for its origin,
    /// as of the hosts' generation it was built at.
    trust: std::sync::RwLock<(u64, Arc<TrustStore>)>,
    base_url: String,
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
            .field("hosts", &self.hosts)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl CheqRs {
    /// The RS side of CHEQ on `store` (its `records` and `nonces`).
    ///
    /// `base_url` is the RS origin (`https://api.example`); `keys` is its
    /// own key set (the active key signs; its published keys are trusted for
    /// its own CHEQs, §9); `cs` is the confirmation server, whose keys are
    /// trusted for its origin and whose confirmation URI goes into every
    /// URI pack and payload. Its users cannot choose another
    /// ([`with_hosts`](Self::with_hosts) lets them, §17).
    pub fn new(
        store: &RsStore,
        keys: Arc<KeyRing>,
        cs: ConfirmationServer,
        base_url: &str,
        clock: Arc<dyn Clock>,
        operation: Arc<dyn Operation>,
    ) -> Result<Self, CheqRsError> {
        let hosts = Hosts::new(cs, None, clock.clone(), base_url, store.settings.clone());
        Self::with_hosts(store, keys, Arc::new(hosts), base_url, clock, operation)
    }

    /// [`new`](Self::new) with the CSes of `hosts`: its default, and those
    /// its users chose (§17).
    pub fn with_hosts(
        store: &RsStore,
        keys: Arc<KeyRing>,
        hosts: Arc<Hosts>,
        base_url: &str,
        clock: Arc<dyn Clock>,
        operation: Arc<dyn Operation>,
    ) -> Result<Self, CheqRsError> {
        let base_url = base_url.trim_end_matches('/').to_owned();
        let trust = build_trust(&base_url, &keys, &hosts)?;
        Ok(CheqRs {
            records: store.records.clone(),
            nonces: store.nonces.clone(),
            keys,
            trust: std::sync::RwLock::new((hosts.generation(), Arc::new(trust))),
            hosts,
            base_url,
            clock,
            operation,
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            flusher: store.flusher.clone(),
            recent: (store.recent_records > 0).then(|| Recent::new(store.recent_records)),
        })
    }

    /// The keys trusted now: rebuilt when a CS joined the hosts.
    fn trust(&self) -> Arc<TrustStore> {
        let generation = self.hosts.generation();
        let current = match self.trust.read() {
            Ok(g) => g.clone(),
            Err(e) => e.into_inner().clone(),
        };
        if current.0 == generation {
            return current.1;
        }
        match build_trust(&self.base_url, &self.keys, &self.hosts) {
            Ok(trust) => {
                let trust = Arc::new(trust);
                if let Ok(mut g) = self.trust.write() {
                    *g = (generation, trust.clone());
                }
                trust
            }
            // Origins were checked when each CS joined; keep what was
            // built before (and do not try again until another joins).
            Err(e) => {
                log::warn!("the keys of the confirmation servers: {e}");
                if let Ok(mut g) = self.trust.write() {
                    g.0 = generation;
                }
                current.1
            }
        }
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

    /// The default confirmation server, whose keys the front end refreshes
    /// before a decision is verified (fetching is I/O, verification is not).
    pub fn confirmation_server(&self) -> &ConfirmationServer {
        self.hosts.default_cs()
    }

    /// The default CS and those users chose (§17).
    pub fn hosts(&self) -> &Arc<Hosts> {
        &self.hosts
    }

    /// Makes sure a CHEQ can name the CS of `issuer` (`None`: the default
    /// CS): one a user chose that this instance does not know yet is read
    /// from the store's list (a user who moved on another instance) and its
    /// discovery document read now. The default CS's document is read in
    /// the background (until then, [`CheqRsError::ConfirmationServerUnknown`]).
    pub async fn ready_cs(self: &Arc<Self>, issuer: Option<&str>) -> Result<(), CheqRsError> {
        let Some(issuer) = issuer.filter(|i| !self.hosts.is_default(i)) else {
            return Ok(());
        };
        let unknown = || CheqRsError::ConfirmationServerUnknown(issuer.to_owned());
        let cs = match self.hosts.get(Some(issuer)) {
            Some(cs) => cs,
            None => {
                let owned = issuer.to_owned();
                self.on_blocking_thread(move |rs| Ok(rs.hosts.for_issuer(&owned)?))
                    .await?
                    .ok_or_else(unknown)?
            }
        };
        if let Some(discovered) = cs.discovered() {
            if discovered.document().is_none() {
                discovered.discover().await.map_err(|e| {
                    log::warn!("confirmation server {issuer}: {e}");
                    unknown()
                })?;
            }
        }
        Ok(())
    }

    /// Whether the decision `body` on confirmation `id`, whose CHEQ names
    /// the CS `cs` (an origin), is countersigned with the key `kid` of
    /// another CS this RS trusts: the countersignature verifies with that
    /// CS's key of that id. (A key id alone proves nothing: two CSes may
    /// publish the same one.)
    pub fn countersigned_by_another_cs(&self, id: &str, body: &[u8], kid: &str, cs: &str) -> bool {
        let resource_uri = self.resource_uri(id);
        let ctx = cheq_core::sign::Context {
            now: self.clock.now(),
            resource_uri: Some(&resource_uri),
            confirmation_uri: None,
        };
        self.trust()
            .confirmation_keys_named(kid)
            .into_iter()
            .filter(|(origin, _)| origin.ascii_serialization() != cs)
            .any(|(_, key)| {
                let mut trust = TrustStore::new();
                let built = cheq_core::sign::Jwks::new(vec![key])
                    .map_err(|_| ())
                    .and_then(|jwks| {
                        trust
                            .add(true, &self.base_url, self.keys.clone())
                            .map_err(|_| ())?;
                        trust.add(false, cs, Arc::new(jwks)).map_err(|_| ())
                    });
                built.is_ok() && cheq_core::sign::verify_decision(body, &trust, None, &ctx).is_ok()
            })
    }

    /// The RS origin.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The default CS's confirmation URI; `None` while its discovery
    /// document is not read (§16.1).
    pub fn confirmation_uri(&self) -> Option<&str> {
        self.hosts.default_cs().confirmation_uri()
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

    /// A kept record while its CHEQ has not expired: past that, the store
    /// answers (it may have collected the record).
    fn unexpired(&self, kept: Option<CheqRecord>) -> Option<CheqRecord> {
        kept.filter(|record| self.clock.now() < expires_at(record))
    }

    fn stripe(&self, id: &str) -> &Mutex<()> {
        let i = Sha256::digest(id.as_bytes())[0] as usize % self.locks.len().max(1);
        &self.locks[i]
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

    /// Whether the operation keeps its effect in this RS's store, written
    /// unflushed ([`Effect::InStore`]).
    fn in_store(&self) -> bool {
        self.operation.effect() == Effect::InStore
    }
}
