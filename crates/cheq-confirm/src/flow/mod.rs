//! The confirmation flow (PROTOCOL.md §2–§6, §8), the domain core of the CS,
//! shared by every front end and knowing nothing of HTTP: start (registered
//! resource servers only), fetch and verify, show, decide (countersign,
//! record durably, deliver), and keep delivering until the RS answers or the
//! CHEQ expires, across restarts.
//!
//! - this module: [`Cs`] and the read side (`start`, `load`, `history`,
//!   `evidence`);
//! - [`decide`]: the decision: checks, countersignature, sealing, the record;
//! - [`deliver`]: the delivery state machine and its worker;
//! - [`inputs`]: values the user types (§8);
//! - [`error`]: the flow's error type, [`CsError`].
//!
//! Only a [`VerifiedCheq`] is shown as trustworthy or countersigned, and the
//! one verified for the page is kept (in a bounded cache) for the decision on
//! it: the decision neither fetches nor verifies again unless the cache lost
//! it (a restart, another instance), and then it fetches the CHEQ again (the
//! RS serves it until it is decided) and checks that the view is the one the
//! user saw. The store keeps only which resource URI a page is for: a pending
//! confirmation costs no copy of its document on disk or in the store's
//! memory.

pub mod decide;
pub mod deliver;
pub mod error;
mod evidence;
pub mod inputs;
mod logged;
pub use evidence::{evidence_filename, Evidence};
pub use logged::Logged;

pub use decide::{DecideError, Decided, DecisionRequest};
pub use error::{BadRequest, CsError, Internal, PasskeyProblem};
pub use inputs::{Collected, InputProblems};

use super::directory::{Directory, Found};
use super::fetch::FetchError;
use super::link::RsLink;
use super::seal::Sealer;
use super::view::{origin_of, CheqView};
use cheq_core::cheq::CountersignFields;
use cheq_core::sign::{verify_resource, Context, VerifiedCheq, VerifyError};
use cheq_store::cs::{ConfirmationEntry, CsStore, DecisionRecord, DecisionRecords, Identity};
use cheq_support::keyring::KeyRing;
use cheq_support::peerkeys::{PeerKeys, Refetch};
use cheq_support::recent::Recent;
use cheq_support::time::Clock;
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Everything a page load may take, fetch included (the user gets an answer
/// within 15 s even from an RS that never answers).
pub const PAGE_DEADLINE: Duration = Duration::from_secs(12);
/// How many verified CHEQs are kept between a page and its decision.
pub const VERIFIED_CACHE: usize = 1024;
/// How many started confirmations are kept in memory besides the store, so
/// that the page and the decision of a confirmation started here read none.
pub const ENTRY_CACHE: usize = 4096;
/// How long a started confirmation is kept (a CHEQ lives at most 24 h, §4;
/// decisions stay in the records); the server collects older ones.
pub const ENTRY_KEEP_SECS: i64 = 48 * 3600;
/// How long a decision (the user's history, its evidence) is kept after it
/// was made (`history_days`). Only [`HistoryWindow::days`] makes one, and it
/// refuses less than [`HistoryWindow::MIN_DAYS`]: until well after its CHEQ
/// has expired (at most 24 h after its `date`, which is at most 60 s ahead
/// of the CS's clock, §4) the record is what stops a second countersignature
/// of the same nonce (§6). So a CS, however its configuration was made, never
/// collects a record that still guards a nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "u32")]
pub struct HistoryWindow {
    days: u32,
}

/// A `history_days` out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "history_days must be from {} to {}: a decision is kept until its CHEQ has expired (§6); {days} is not",
    HistoryWindow::MIN_DAYS,
    HistoryWindow::MAX_DAYS
)]
pub struct HistoryWindowError {
    pub days: u32,
}

impl HistoryWindow {
    /// The least: two days.
    pub const MIN_DAYS: u32 = 2;
    /// The most: a hundred years.
    pub const MAX_DAYS: u32 = 36_500;

    /// A window of `days`, refused outside [`Self::MIN_DAYS`]..=[`Self::MAX_DAYS`].
    pub fn days(days: u32) -> Result<Self, HistoryWindowError> {
        if (Self::MIN_DAYS..=Self::MAX_DAYS).contains(&days) {
            Ok(HistoryWindow { days })
        } else {
            Err(HistoryWindowError { days })
        }
    }

    /// Its length in days.
    pub fn in_days(self) -> u32 {
        self.days
    }

    /// Its length in seconds.
    pub fn in_secs(self) -> i64 {
        i64::from(self.days) * 86400
    }
}

impl TryFrom<u32> for HistoryWindow {
    type Error = HistoryWindowError;

    fn try_from(days: u32) -> Result<Self, Self::Error> {
        HistoryWindow::days(days)
    }
}
const LOCK_STRIPES: usize = 64;

/// What a confirmation page shows.
#[derive(Debug)]
pub enum Loaded {
    /// Verified and open: show it with Accept and Reject.
    Open(Arc<Open>),
    /// Already decided here: show the earlier decision.
    Decided(Box<DecisionRecord>),
}

/// An open, verified confirmation: what was shown, and the proof behind it.
#[derive(Debug)]
pub struct Open {
    pub id: String,
    pub view: CheqView,
    verified: VerifiedCheq,
}

impl Open {
    /// The verified CHEQ behind this view (the proof that it may be shown).
    pub fn verified(&self) -> &VerifiedCheq {
        &self.verified
    }
}

/// A resource server this CS works for (§2): what it needs to reach it,
/// trust it and honour its settings, found together by one look-up.
pub struct RegisteredRs {
    /// How the flow reaches it: the CS's OAuth client at the RS over HTTP
    /// (§3, §6), or the RS in this same process (§12).
    pub client: Arc<dyn RsLink>,
    /// The RS's published keys (§9).
    pub keys: PeerKeys,
    /// The oldest sign-in that may decide for it, in seconds
    /// (`max_auth_age_secs`).
    pub max_auth_age: Option<i64>,
}

impl std::fmt::Debug for RegisteredRs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredRs")
            .field("max_auth_age", &self.max_auth_age)
            .finish_non_exhaustive()
    }
}

/// What the CS is made of.
pub struct Deps {
    pub public_url: String,
    /// The CS's own key set (§9).
    pub keys: Arc<KeyRing>,
    /// The resource servers it works for.
    pub directory: Directory,
    pub store: CsStore,
    pub clock: Arc<dyn Clock>,
    pub sealer: Sealer,
    /// How long a decision is kept after it was made; `None`: for good.
    pub history: Option<HistoryWindow>,
    /// The transparency log every countersignature goes into (§15);
    /// `None` where it is turned off.
    pub log: Option<Arc<crate::transparency::TransparencyLog>>,
}

/// The confirmation server's domain.
pub struct Cs {
    public_url: String,
    cs_origin: String,
    keys: Arc<KeyRing>,
    directory: Directory,
    store: CsStore,
    clock: Arc<dyn Clock>,
    sealer: Sealer,
    history: Option<HistoryWindow>,
    log: Option<Arc<crate::transparency::TransparencyLog>>,
    verified: Recent<Arc<Open>>,
    /// Started confirmations, as stored (they do not change once started).
    entries: Recent<ConfirmationEntry>,
    locks: Vec<Mutex<()>>,
    delivery_locks: Vec<tokio::sync::Mutex<()>>,
    wake: tokio::sync::Notify,
    metrics: cheq_support::metrics::CsMetrics,
    /// When the oldest pending delivery was decided, as the delivery worker
    /// last read the outbox ([`NO_PENDING`] when none was).
    oldest_pending_at: std::sync::atomic::AtomicI64,
}

/// `oldest_pending_at` when the outbox held nothing pending.
const NO_PENDING: i64 = i64::MIN;

impl std::fmt::Debug for Cs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cs")
            .field("public_url", &self.public_url)
            .finish_non_exhaustive()
    }
}

fn id_for(resource_uri: &str) -> String {
    cheq_support::text::confirmation_id(resource_uri)
}

fn stripe(key: &str) -> usize {
    Sha256::digest(key.as_bytes())[0] as usize % LOCK_STRIPES
}

impl Cs {
    /// The CS of `deps`.
    pub fn new(deps: Deps) -> Result<Self, CsError> {
        Ok(Cs {
            cs_origin: origin_of(&deps.public_url),
            public_url: deps.public_url,
            keys: deps.keys,
            directory: deps.directory,
            store: deps.store,
            clock: deps.clock,
            sealer: deps.sealer,
            history: deps.history,
            log: deps.log,
            verified: Recent::new(VERIFIED_CACHE),
            entries: Recent::new(ENTRY_CACHE),
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            delivery_locks: (0..LOCK_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            wake: tokio::sync::Notify::new(),
            metrics: cheq_support::metrics::CsMetrics::new(),
            oldest_pending_at: std::sync::atomic::AtomicI64::new(NO_PENDING),
        })
    }

    /// What this instance counted, and the outbox as the delivery worker
    /// last read it (`GET /metrics`). Reads no store: a scrape costs the
    /// same whatever the outbox holds and however often it comes.
    pub fn metrics_text(&self) -> String {
        let oldest = self
            .oldest_pending_at
            .load(std::sync::atomic::Ordering::Relaxed);
        let age = if oldest == NO_PENDING {
            0
        } else {
            (self.clock.now().timestamp() - oldest).max(0)
        };
        self.metrics.oldest_pending_age.set(age);
        self.metrics.render()
    }

    /// Reads the outbox's size and oldest pending decision into the
    /// metrics (the delivery worker, every [`deliver::OUTBOX_SUMMARY_SECS`]).
    pub(crate) fn summarise_outbox(&self) {
        match self.store.records.pending_summary() {
            Ok((n, oldest)) => {
                self.metrics
                    .deliveries_pending
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
                self.oldest_pending_at.store(
                    oldest.unwrap_or(NO_PENDING),
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
            Err(e) => log::warn!("metrics: cannot read the delivery outbox: {e}"),
        }
    }

    /// The metrics this instance counts.
    pub(crate) fn metrics(&self) -> &cheq_support::metrics::CsMetrics {
        &self.metrics
    }

    /// Whether the store answers now (`GET /readyz`).
    pub fn readiness(&self) -> Arc<dyn cheq_store::Readiness> {
        self.store.readiness.clone()
    }

    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now()
    }

    /// The CS origin, as named on its pages.
    pub fn cs_origin(&self) -> &str {
        &self.cs_origin
    }

    /// The decision records.
    pub fn records(&self) -> &dyn DecisionRecords {
        &*self.store.records
    }

    /// The CS public keys (§9): active, new and retiring, each with its
    /// state.
    pub fn jwks(&self) -> serde_json::Value {
        self.metrics.jwks_served.inc();
        self.keys.published().to_json()
    }

    /// The CS's own key set.
    pub fn keys(&self) -> &Arc<KeyRing> {
        &self.keys
    }

    /// §2: refuses a resource URI that is not under a resource server this
    /// CS serves, or is under one its operator blocked (§16.3).
    pub fn check_registered(&self, resource_uri: &str) -> Result<Arc<RegisteredRs>, CsError> {
        match self.directory.find(resource_uri.trim())? {
            Found::Served(rs) => Ok(rs),
            Found::Blocked(b) => Err(CsError::Blocked {
                origin: b.origin.clone(),
                name: b.name.clone(),
            }),
        }
    }

    /// The registered resource servers and initial access tokens (§16.3).
    pub fn registrations(&self) -> Arc<dyn cheq_store::registrations::Registrations> {
        self.store.registrations.clone()
    }

    /// The resource servers this CS works for.
    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// Reads the registered resource servers again when they changed in
    /// the store (on any instance); `true` when the list was replaced.
    pub fn reload_registered(&self) -> Result<bool, CsError> {
        let changed = self.directory.reload()?;
        if changed {
            // A resource server unblocked may have deliveries waiting.
            self.wake();
        }
        Ok(changed)
    }

    /// Reloads the registered resource servers every
    /// [`crate::directory::RELOAD_EVERY`], forever (a failed read is
    /// logged once until one succeeds, and tried again).
    pub async fn run_reloads(self: Arc<Self>) {
        if !self.directory.takes_registrations() {
            return;
        }
        let mut failing = false;
        loop {
            tokio::time::sleep(crate::directory::RELOAD_EVERY).await;
            let cs = self.clone();
            match tokio::task::spawn_blocking(move || cs.reload_registered()).await {
                Ok(Ok(_)) => failing = false,
                Ok(Err(e)) if !failing => {
                    failing = true;
                    log::warn!("reading the registered resource servers: {e}");
                }
                _ => {}
            }
        }
    }

    /// Refuses `who` when the RS of `resource_uri` wants a fresher sign-in
    /// than theirs (`max_auth_age_secs`); a sign-in whose time no one
    /// reported is never fresh enough.
    pub fn check_fresh(&self, resource_uri: &str, who: &Identity) -> Result<(), CsError> {
        let Some(max) = self.check_registered(resource_uri)?.max_auth_age else {
            return Ok(());
        };
        match who.auth_time {
            Some(t) if self.now().timestamp() - t <= max => Ok(()),
            _ => Err(CsError::Reauthenticate { max_age_secs: max }),
        }
    }

    /// §2: accepts a resource URI of a registered RS and returns the id of its
    /// confirmation page. Nothing is fetched here.
    pub fn start(&self, resource_uri: &str) -> Result<String, CsError> {
        self.check_registered(resource_uri)?;
        let resource_uri = resource_uri.trim();
        let id = id_for(resource_uri);
        let _span = cheq_support::text::confirmation_span(&id).entered();
        let entry = ConfirmationEntry {
            resource_uri: resource_uri.to_owned(),
            created: self.clock.now().timestamp(),
            document: None,
        };
        self.store.entries.start(&id, &entry)?;
        // A start of a URI started before keeps the stored entry; this one
        // stands for it here until the store is read again.
        self.entries.put(&id, entry);
        Ok(id)
    }

    fn entry(&self, id: &str) -> Result<ConfirmationEntry, CsError> {
        self.started(id)?.ok_or(CsError::NotFound)
    }

    /// §3: `GET <resource uri>` within the page deadline.
    async fn fetch(&self, entry: &ConfirmationEntry) -> Result<Vec<u8>, CsError> {
        // Named in errors only: parsed when one is made.
        let origin = || origin_of(&entry.resource_uri);
        let started = std::time::Instant::now();
        let rs = self.check_registered(&entry.resource_uri)?;
        let fetched =
            tokio::time::timeout(PAGE_DEADLINE, rs.client.fetch_cheq(&entry.resource_uri))
                .await
                .map_err(|_| CsError::Timeout { origin: origin() });
        self.metrics
            .fetch_seconds
            .observe(started.elapsed().as_secs_f64());
        let fetched = fetched?;
        if let Err(e @ FetchError::Status { .. }) = &fetched {
            log::warn!("fetching a CHEQ from {}: {e}", origin());
        }
        fetched.map_err(|e| match e {
            FetchError::Timeout => CsError::Timeout { origin: origin() },
            FetchError::Gone => CsError::Gone,
            FetchError::NotFound => CsError::UnknownAtRs { origin: origin() },
            e => CsError::Unreachable {
                origin: origin(),
                detail: e.to_string(),
            },
        })
    }

    /// §5: every rule that applies before anything is shown as trustworthy,
    /// with the RS's keys as fresh as its cache headers allow; a key id not
    /// seen before may fetch them again (at most once a minute, §9).
    async fn verify(&self, resource_uri: &str, document: &[u8]) -> Result<VerifiedCheq, CsError> {
        let rs = self.check_registered(resource_uri)?;
        let peer = Some(&rs.keys);
        if let Some(peer) = peer {
            peer.ensure_fresh().await;
        }
        let ctx = Context {
            now: self.clock.now(),
            resource_uri: Some(resource_uri),
            confirmation_uri: Some(&self.public_url),
        };
        let mut verified = verify_resource(document, self.directory.snapshot().trust(), &ctx);
        if let (Err(VerifyError::UntrustedResourceKey { kid, .. }), Some(peer)) = (&verified, peer)
        {
            match peer.refetch_for(kid).await {
                Refetch::Found => {
                    let ctx = Context {
                        now: self.clock.now(),
                        ..ctx
                    };
                    verified = verify_resource(document, self.directory.snapshot().trust(), &ctx);
                }
                Refetch::Absent => {}
                Refetch::Later { retry_after } => {
                    return Err(CsError::KeysPending {
                        origin: origin_of(resource_uri),
                        retry_after,
                    })
                }
            }
        }
        verified
            .inspect_err(|e| {
                self.metrics
                    .refusals
                    .with_label_values(&[&e.rule().to_string()])
                    .inc();
            })
            .map_err(|e| match e {
                VerifyError::Expired { expires } => CsError::Expired(expires),
                VerifyError::NotCountersignable(reason) => CsError::NotCountersignable(reason),
                e => CsError::Untrusted {
                    origin: origin_of(resource_uri),
                    reason: format!("rule {} of the protocol failed: {e}", e.rule()),
                },
            })
    }

    /// The earlier decision on this resource URI, if any.
    fn earlier(&self, resource_uri: &str) -> Result<Option<DecisionRecord>, CsError> {
        Ok(self.store.records.by_resource(resource_uri)?)
    }

    /// The earlier decision on this CHEQ's RS origin and nonce, if any (§6):
    /// the same CHEQ may come back under another resource URI. The origin
    /// is the one its verification parsed.
    fn earlier_nonce(&self, fields: &CountersignFields) -> Result<Option<DecisionRecord>, CsError> {
        Ok(self.store.records.get(&cheq_store::cs::RecordKey::new(
            &fields.resource_origin.ascii_serialization(),
            &fields.nonce,
        ))?)
    }

    /// Loads a confirmation for `who`: the earlier decision if there is one,
    /// otherwise the CHEQ fetched from the RS and verified.
    pub async fn load(&self, id: &str, who: &Identity) -> Result<Loaded, CsError> {
        use tracing::Instrument;
        self.load_in_span(id, who)
            .instrument(cheq_support::text::confirmation_span(id))
            .await
    }

    async fn load_in_span(&self, id: &str, who: &Identity) -> Result<Loaded, CsError> {
        let entry = self.entry(id)?;
        if let Some(record) = self.earlier(&entry.resource_uri)? {
            return Ok(Loaded::Decided(Box::new(owned(record, who)?)));
        }
        self.check_fresh(&entry.resource_uri, who)?;
        let document = self.fetch(&entry).await?;
        let verified = self.verify(&entry.resource_uri, &document).await?;
        let fields = verified.fields();
        if !who.is(&fields.subject) {
            return Err(CsError::WrongUser {
                subject: fields.subject.clone(),
                user: who.sub.clone(),
            });
        }
        // Looked up by resource URI above; the fetch took time, but a
        // decision made meanwhile on this page holds its nonce too.
        if let Some(record) = self.earlier_nonce(fields)? {
            return Ok(Loaded::Decided(Box::new(owned(record, who)?)));
        }
        let open = Arc::new(Open {
            id: id.to_owned(),
            view: CheqView::of(&verified, &self.cs_origin),
            verified,
        });
        self.remember(open.clone());
        Ok(Loaded::Open(open))
    }

    /// Keeps what a page showed for the decision on it (bounded: the oldest
    /// goes first).
    fn remember(&self, open: Arc<Open>) {
        let id = open.id.clone();
        self.verified.put(&id, open);
    }

    /// The page of `id` kept since it was shown, if it was shown here.
    fn kept(&self, id: &str, entry: &ConfirmationEntry) -> Option<Arc<Open>> {
        self.verified
            .get(id)
            .filter(|o| o.verified.fields().resource_uri == entry.resource_uri)
    }

    /// What the page of `id` showed: from the cache, or else the stored
    /// document verified again (or fetched, when there is none).
    async fn shown(&self, id: &str, entry: &ConfirmationEntry) -> Result<Arc<Open>, CsError> {
        if let Some(open) = self.kept(id, entry) {
            return Ok(open);
        }
        let document = match &entry.document {
            Some(d) => d.as_bytes().to_vec(),
            None => self.fetch(entry).await?,
        };
        let verified = self.verify(&entry.resource_uri, &document).await?;
        let open = Arc::new(Open {
            id: id.to_owned(),
            view: CheqView::of(&verified, &self.cs_origin),
            verified,
        });
        self.remember(open.clone());
        Ok(open)
    }

    /// The stored entry of the started confirmation `id` (what the page
    /// reads before anything is fetched): kept in memory once read or
    /// started here, and read from the store when not kept or when it is
    /// old enough to have been collected ([`ENTRY_KEEP_SECS`]).
    pub fn started(&self, id: &str) -> Result<Option<ConfirmationEntry>, CsError> {
        let now = self.clock.now().timestamp();
        if let Some(entry) = self.entries.get(id) {
            if now - entry.created < ENTRY_KEEP_SECS {
                return Ok(Some(entry));
            }
            self.entries.remove(id);
        }
        let entry = self.store.entries.get(id)?;
        if let Some(e) = entry.as_ref().filter(|e| now - e.created < ENTRY_KEEP_SECS) {
            self.entries.put(id, e.clone());
        }
        Ok(entry)
    }

    /// Forgets the page of `id` (decided).
    fn forget(&self, id: &str) {
        self.verified.remove(id);
    }

    /// Removes started confirmations older than `keep_secs` (a CHEQ lives at
    /// most 24 h, §4; decisions stay in the records). Returns how many.
    pub fn collect_entries(&self, keep_secs: i64) -> Result<usize, CsError> {
        let cutoff = self.clock.now().timestamp() - keep_secs;
        Ok(self.store.entries.collect_older_than(cutoff)?)
    }

    /// Removes the decisions older than the history kept (`history_days`),
    /// once their delivery is final and their document no longer sealed;
    /// none when the history is kept for good. Returns how many.
    pub fn collect_history(&self) -> Result<usize, CsError> {
        let Some(keep) = self.history else {
            return Ok(0);
        };
        let cutoff = self.clock.now().timestamp() - keep.in_secs();
        Ok(self.store.records.collect_decided_before(cutoff)?)
    }

    /// How many days a decision is kept (`history_days`); `None`: for good.
    pub fn history_days(&self) -> Option<u32> {
        self.history.map(HistoryWindow::in_days)
    }

    /// A user's decisions, newest first.
    pub fn history(&self, who: &Identity) -> Result<Vec<DecisionRecord>, CsError> {
        Ok(self.store.records.for_user(&who.sub, 500)?)
    }
}

/// An earlier decision, if it is `who`'s.
fn owned(record: DecisionRecord, who: &Identity) -> Result<DecisionRecord, CsError> {
    if record.user != who.sub {
        return Err(CsError::WrongUser {
            subject: record.user,
            user: who.sub.clone(),
        });
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cheq_store::cs::{Claim, RecordKey};
    use cheq_store::{Durability, StoreError};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A sled store's decision records, counting how often the outbox is
    /// read whole (`pending_summary`).
    struct Counting(Arc<dyn DecisionRecords>, Arc<AtomicUsize>);

    impl DecisionRecords for Counting {
        fn claim(&self, record: &DecisionRecord) -> Result<Claim, StoreError> {
            self.0.claim(record)
        }
        fn claim_with(&self, r: &DecisionRecord, d: Durability) -> Result<Claim, StoreError> {
            self.0.claim_with(r, d)
        }
        fn get(&self, key: &RecordKey) -> Result<Option<DecisionRecord>, StoreError> {
            self.0.get(key)
        }
        fn by_resource(&self, uri: &str) -> Result<Option<DecisionRecord>, StoreError> {
            self.0.by_resource(uri)
        }
        fn by_id_for_user(&self, u: &str, id: &str) -> Result<Option<DecisionRecord>, StoreError> {
            self.0.by_id_for_user(u, id)
        }
        fn update(&self, r: &DecisionRecord, d: Durability) -> Result<(), StoreError> {
            self.0.update(r, d)
        }
        fn lease_due(&self, now: i64, l: i64, n: usize) -> Result<Vec<DecisionRecord>, StoreError> {
            self.0.lease_due(now, l, n)
        }
        fn pending_summary(&self) -> Result<(usize, Option<i64>), StoreError> {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.pending_summary()
        }
        fn sealed(&self) -> Result<Vec<RecordKey>, StoreError> {
            self.0.sealed()
        }
        fn for_user(&self, u: &str, n: usize) -> Result<Vec<DecisionRecord>, StoreError> {
            self.0.for_user(u, n)
        }
        fn collect_decided_before(&self, cutoff: i64) -> Result<usize, StoreError> {
            self.0.collect_decided_before(cutoff)
        }
        fn list_after(
            &self,
            after: Option<&str>,
            n: usize,
        ) -> Result<Vec<(String, DecisionRecord)>, StoreError> {
            self.0.list_after(after, n)
        }
        fn collected_after(
            &self,
            after: Option<&str>,
            n: usize,
        ) -> Result<Vec<(String, i64)>, StoreError> {
            self.0.collected_after(after, n)
        }
        fn restore_collected(&self, id: &str, decided_at: i64) -> Result<(), StoreError> {
            self.0.restore_collected(id, decided_at)
        }
    }

    #[test]
    fn evidence_files_are_named_by_operation_date_and_decision() {
        let mut r = crate::seal::tests::record("{}", false);
        assert_eq!(
            evidence_filename(&r, false),
            "cheq-transfer_funds-2026-12-07-accept.json"
        );
        assert_eq!(
            evidence_filename(&r, true),
            "cheq-transfer_funds-2026-12-07-accept-redacted.json"
        );
        r.decision = cheq_core::cheq::Decision::Reject;
        r.operation_name = "  Book   a \"flight\"/../\r\n; x ".into();
        assert_eq!(
            evidence_filename(&r, false),
            "cheq-book_a_flight_x-2026-12-07-reject.json"
        );
        // No letter or digit in the name: the URI's last segment, else a word.
        r.operation_name = "Überweisung → ✓".into();
        assert_eq!(
            evidence_filename(&r, false),
            "cheq-berweisung-2026-12-07-reject.json"
        );
        r.operation_name = "→ ✓".into();
        assert_eq!(
            evidence_filename(&r, false),
            "cheq-invoke-2026-12-07-reject.json"
        );
        r.operation = "::".into();
        assert_eq!(
            evidence_filename(&r, false),
            "cheq-decision-2026-12-07-reject.json"
        );
        r.operation_name = "x".repeat(500);
        assert_eq!(
            evidence_filename(&r, false).len(),
            "cheq--2026-12-07-reject.json".len() + 48
        );
    }

    /// `GET /metrics` reads no stored record, however often it comes: the
    /// outbox's size is read by the delivery worker now and then
    /// (`summarise_outbox`), and a scrape renders what it read.
    #[test]
    fn a_scrape_reads_no_stored_record() {
        let (dir, mut store) = cheq_store::sled_cs::temp();
        let summaries = Arc::new(AtomicUsize::new(0));
        store.records = Arc::new(Counting(store.records.clone(), summaries.clone()));
        let clock: Arc<dyn Clock> =
            Arc::new(cheq_support::time::ManualClock::new(chrono::Utc::now()));
        let keys = KeyRing::open(&dir.path().join("cs.jwk"), None, "cs", clock.clone()).unwrap();
        let cs = Cs::new(Deps {
            public_url: "http://127.0.0.1:9".into(),
            keys,
            directory: Directory::new(Vec::new(), None).unwrap(),
            store,
            clock,
            sealer: Sealer::new(&dir.path().join("sealed"), vec![7; 32]),
            history: None,
            log: None,
        })
        .unwrap();
        for _ in 0..20 {
            assert!(cs.metrics_text().contains("cheq_deliveries_pending 0"));
        }
        assert_eq!(
            summaries.load(Ordering::SeqCst),
            0,
            "a scrape read the outbox"
        );
        cs.summarise_outbox();
        assert_eq!(summaries.load(Ordering::SeqCst), 1);
    }
}
