//! The confirmation flow, shared by every front end (PROTOCOL.md §2–§6, §8):
//! start (registered resource servers only), fetch and verify, show, decide
//! (countersign, record durably, deliver), and keep delivering until the RS
//! answers or the CHEQ expires, across restarts.
//!
//! Only a [`VerifiedCheq`] is shown as trustworthy or countersigned. A nonce is
//! countersigned at most once: decisions on one nonce are serialised by a
//! striped lock, the records are consulted under it, and the record is stored
//! (flushed) before the lock is released and before delivery.

use super::auth::Identity;
use super::error::CsError;
use super::fetch::{FetchError, RsClient};
use super::registry::Registry;
use super::seal::{collected_digests, redact, Sealer};
use super::view::{origin_of, CheqView};
use crate::cheq::InputType;
use crate::sign::verify::CLOCK_SKEW_SECS;
use crate::sign::{
    countersign, verify_resource, Channel, Context, CountersignError, Decision, DecisionInput,
    SigningKey, TrustStore, VerifiedCheq, VerifyError,
};
use crate::store::records::{Claim, DecisionRecord, Delivery, Records};
use crate::time::Clock;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CONFIRMATIONS: &str = "cs.confirmations";
/// Everything a page load may take, fetch included (the user gets an answer
/// within 15 s even from an RS that never answers).
pub const PAGE_DEADLINE: Duration = Duration::from_secs(12);
/// Longest wait between two delivery attempts.
pub const MAX_BACKOFF_SECS: i64 = 30;
const LOCK_STRIPES: usize = 64;
/// Deliveries the worker starts at once (the rest wait for the next round).
const MAX_DELIVERIES_PER_ROUND: usize = 32;

/// A started confirmation: which resource URI, and the document last fetched.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    resource_uri: String,
    /// When it was started (unix seconds); old entries are collected.
    #[serde(default)]
    created: i64,
    #[serde(default)]
    document: Option<String>,
}

/// What a confirmation page shows.
#[derive(Debug)]
pub enum Loaded {
    /// Verified and open: show it with Accept and Reject.
    Open(Box<Open>),
    /// Already decided here: show the earlier decision.
    Decided(Box<DecisionRecord>),
}

/// An open, verified confirmation.
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

/// The outcome of a decision request.
#[derive(Debug, Clone)]
pub struct Decided {
    pub record: DecisionRecord,
    /// True when the nonce had been decided before: nothing new was signed.
    pub earlier: bool,
}

impl Decided {
    fn earlier(record: DecisionRecord, who: &Identity) -> Result<Self, CsError> {
        if record.user != who.sub {
            return Err(CsError::WrongUser {
                subject: record.user,
                user: who.sub.clone(),
            });
        }
        Ok(Decided {
            record,
            earlier: true,
        })
    }
}

/// The key of the "acknowledge the warnings" problem in [`DecideError::Input`].
pub const WARNINGS_KEY: &str = "#warnings";

/// Values the user typed (§8). Its `Debug` shows no value.
#[derive(Clone)]
pub enum Collected {
    /// By parameter name (the raw API).
    ByName(IndexMap<String, String>),
    /// By parameter position (the HTML form, whose field names must not
    /// depend on text that may hold hidden characters).
    ByIndex(Vec<(usize, String)>),
}

impl std::fmt::Debug for Collected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Collected::ByName(m) => {
                write!(f, "ByName({:?} = <redacted>)", m.keys().collect::<Vec<_>>())
            }
            Collected::ByIndex(v) => write!(
                f,
                "ByIndex({:?} = <redacted>)",
                v.iter().map(|(i, _)| i).collect::<Vec<_>>()
            ),
        }
    }
}

impl Collected {
    fn by_name(&self, verified: &VerifiedCheq) -> IndexMap<String, String> {
        match self {
            Collected::ByName(m) => m.clone(),
            Collected::ByIndex(v) => v
                .iter()
                .filter_map(|(i, value)| {
                    verified
                        .cheq()
                        .parameters
                        .get(*i)
                        .map(|p| (p.name.clone(), value.clone()))
                })
                .collect(),
        }
    }
}

/// What the user decided, and how.
#[derive(Debug, Clone)]
pub struct DecisionRequest {
    pub decision: Decision,
    pub channel: Channel,
    /// The `cheq_view` digest of the view the user decided on, when the
    /// front end knows it (the HTML form carries it).
    pub view_digest: Option<String>,
    pub collected: Collected,
    /// The user took the extra step that accepting despite warnings needs.
    pub warnings_acknowledged: bool,
}

/// The text shown on `channel` and its digest (`cheq_view`).
fn shown(view: &CheqView, channel: Channel) -> (&str, &str) {
    match channel {
        Channel::Voice => (&view.voice_text, &view.voice_digest),
        _ => (&view.text, &view.digest),
    }
}

/// Why a decision could not be made (the page is shown again with these).
#[derive(Debug)]
pub enum DecideError {
    /// Values the user typed are not acceptable; one message per problem.
    Input(Vec<(String, String)>),
    Other(CsError),
}

impl From<CsError> for DecideError {
    fn from(e: CsError) -> Self {
        DecideError::Other(e)
    }
}

/// The confirmation server's domain.
pub struct Cs {
    public_url: String,
    cs_origin: String,
    key: SigningKey,
    trust: TrustStore,
    registry: Registry,
    clients: Vec<RsClient>,
    records: Records,
    confirmations: sled::Tree,
    clock: Arc<dyn Clock>,
    locks: Vec<Mutex<()>>,
    delivery_locks: Vec<tokio::sync::Mutex<()>>,
    wake: tokio::sync::Notify,
    sealer: Sealer,
}

impl std::fmt::Debug for Cs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cs")
            .field("public_url", &self.public_url)
            .finish_non_exhaustive()
    }
}

fn id_for(resource_uri: &str) -> String {
    crate::sign::b64::encode(Sha256::digest(resource_uri.as_bytes()))
}

impl Cs {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        db: &sled::Db,
        public_url: &str,
        key: SigningKey,
        trust: TrustStore,
        registry: Registry,
        clients: Vec<RsClient>,
        records: Records,
        clock: Arc<dyn Clock>,
        sealer: Sealer,
    ) -> Result<Self, CsError> {
        Ok(Cs {
            public_url: public_url.to_owned(),
            cs_origin: origin_of(public_url),
            key,
            trust,
            registry,
            clients,
            records,
            confirmations: db.open_tree(CONFIRMATIONS)?,
            clock,
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            delivery_locks: (0..LOCK_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            wake: tokio::sync::Notify::new(),
            sealer,
        })
    }

    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now()
    }

    /// The CS origin, as named on its pages.
    pub fn cs_origin(&self) -> &str {
        &self.cs_origin
    }

    pub fn records(&self) -> &Records {
        &self.records
    }

    /// The CS public keys (§9).
    pub fn jwks(&self) -> serde_json::Value {
        serde_json::json!({"keys": [self.key.public_jwk()]})
    }

    /// §2: refuses a resource URI that is not under a registered RS.
    pub fn check_registered(&self, resource_uri: &str) -> Result<usize, CsError> {
        self.registry
            .find(resource_uri.trim())
            .map_err(|e| CsError::NotRegistered(e.to_string()))
    }

    /// §2: accepts a resource URI of a registered RS and returns the id of its
    /// confirmation page. Nothing is fetched here.
    pub fn start(&self, resource_uri: &str) -> Result<String, CsError> {
        self.check_registered(resource_uri)?;
        let resource_uri = resource_uri.trim();
        let id = id_for(resource_uri);
        if self.confirmations.get(id.as_bytes())?.is_none() {
            let entry = Entry {
                resource_uri: resource_uri.to_owned(),
                created: self.clock.now().timestamp(),
                document: None,
            };
            let bytes = serde_json::to_vec(&entry).map_err(|e| CsError::Internal(e.to_string()))?;
            self.confirmations.insert(id.as_bytes(), bytes)?;
        }
        Ok(id)
    }

    fn entry(&self, id: &str) -> Result<Entry, CsError> {
        let bytes = self
            .confirmations
            .get(id.as_bytes())?
            .ok_or(CsError::NotFound)?;
        serde_json::from_slice(&bytes).map_err(|_| CsError::Internal(format!("entry {id} corrupt")))
    }

    fn save_document(&self, id: &str, entry: &Entry, document: &[u8]) -> Result<(), CsError> {
        let mut entry = entry.clone();
        entry.document = Some(String::from_utf8_lossy(document).into_owned());
        let bytes = serde_json::to_vec(&entry).map_err(|e| CsError::Internal(e.to_string()))?;
        self.confirmations.insert(id.as_bytes(), bytes)?;
        Ok(())
    }

    /// The client of the RS a resource URI belongs to, looked up in the
    /// registry every time (the configuration may have changed since).
    fn client(&self, entry: &Entry) -> Result<&RsClient, CsError> {
        let rs = self.check_registered(&entry.resource_uri)?;
        self.clients
            .get(rs)
            .ok_or_else(|| CsError::Internal("resource server no longer configured".into()))
    }

    /// §3: `GET <resource uri>` within the page deadline.
    async fn fetch(&self, entry: &Entry) -> Result<Vec<u8>, CsError> {
        let origin = origin_of(&entry.resource_uri);
        let fetched = tokio::time::timeout(
            PAGE_DEADLINE,
            self.client(entry)?.fetch_cheq(&entry.resource_uri),
        )
        .await
        .map_err(|_| CsError::Timeout {
            origin: origin.clone(),
        })?;
        if let Err(e @ FetchError::Status { .. }) = &fetched {
            log::warn!("fetching a CHEQ from {origin}: {e:?}");
        }
        fetched.map_err(|e| match e {
            FetchError::Timeout => CsError::Timeout { origin },
            FetchError::Gone => CsError::Gone,
            FetchError::NotFound => CsError::UnknownAtRs { origin },
            e => CsError::Unreachable {
                origin,
                detail: e.to_string(),
            },
        })
    }

    /// §5: every rule that applies before anything is shown as trustworthy.
    fn verify(&self, entry: &Entry, document: &[u8]) -> Result<VerifiedCheq, CsError> {
        let ctx = Context {
            now: self.clock.now(),
            resource_uri: Some(&entry.resource_uri),
            confirmation_uri: Some(&self.public_url),
        };
        verify_resource(document, &self.trust, &ctx).map_err(|e| match e {
            VerifyError::Expired { expires } => CsError::Expired(expires),
            VerifyError::NotCountersignable(reason) => {
                CsError::NotCountersignable(reason.to_string())
            }
            e => CsError::Untrusted {
                origin: origin_of(&entry.resource_uri),
                reason: format!("rule {} of the protocol failed: {e}", e.rule()),
            },
        })
    }

    fn earlier(
        &self,
        nonce_or_uri: Option<&str>,
        uri: &str,
    ) -> Result<Option<DecisionRecord>, CsError> {
        if let Some(r) = self.records.by_resource(uri)? {
            return Ok(Some(r));
        }
        match nonce_or_uri {
            Some(nonce) => Ok(self.records.get(nonce)?),
            None => Ok(None),
        }
    }

    fn owned(record: DecisionRecord, who: &Identity) -> Result<Loaded, CsError> {
        Ok(Loaded::Decided(Box::new(
            Decided::earlier(record, who)?.record,
        )))
    }

    /// Loads a confirmation for `who`: the earlier decision if there is one,
    /// otherwise the CHEQ fetched from the RS and verified.
    pub async fn load(&self, id: &str, who: &Identity) -> Result<Loaded, CsError> {
        let entry = self.entry(id)?;
        if let Some(record) = self.earlier(None, &entry.resource_uri)? {
            return Self::owned(record, who);
        }
        let document = self.fetch(&entry).await?;
        let verified = self.verify(&entry, &document)?;
        let fields = verified.fields();
        if !who.is(&fields.subject) {
            return Err(CsError::WrongUser {
                subject: fields.subject.clone(),
                user: who.sub.clone(),
            });
        }
        if let Some(record) = self.earlier(Some(&fields.nonce), &entry.resource_uri)? {
            return Self::owned(record, who);
        }
        self.save_document(id, &entry, &document)?;
        let view = CheqView::of(&verified, &self.cs_origin);
        Ok(Loaded::Open(Box::new(Open {
            id: id.to_owned(),
            view,
            verified,
        })))
    }

    /// Decides: re-verifies what was shown, countersigns once, records
    /// durably, then delivers. Returns the record (its delivery status says
    /// whether the RS has it yet).
    pub async fn decide(
        self: &Arc<Self>,
        id: &str,
        who: &Identity,
        request: DecisionRequest,
    ) -> Result<Decided, DecideError> {
        let entry = self.entry(id)?;
        if let Some(record) = self.earlier(None, &entry.resource_uri)? {
            return Ok(Decided::earlier(record, who)?);
        }
        let document = match &entry.document {
            Some(d) => d.as_bytes().to_vec(),
            None => self.fetch(&entry).await?,
        };
        let verified = self.verify(&entry, &document)?;
        let view = CheqView::of(&verified, &self.cs_origin);
        if !who.is(&verified.fields().subject) {
            return Err(CsError::WrongUser {
                subject: verified.fields().subject.clone(),
                user: who.sub.clone(),
            }
            .into());
        }
        let (_, digest) = shown(&view, request.channel);
        if request.view_digest.as_deref().is_some_and(|d| d != digest) {
            return Err(CsError::Changed.into());
        }
        let by_name = request.collected.by_name(&verified);
        let collected = validate_collected(&verified, request.decision, &by_name)
            .map_err(DecideError::Input)?;
        if request.decision == Decision::Accept
            && !view.warnings.is_empty()
            && !request.warnings_acknowledged
        {
            return Err(DecideError::Input(vec![(
                WARNINGS_KEY.to_owned(),
                "this request carries warnings: confirm that you have read them before accepting"
                    .to_owned(),
            )]));
        }
        // Signing and the flushed record run off the async worker.
        let cs = self.clone();
        let who2 = who.clone();
        let decided = tokio::task::spawn_blocking(move || {
            cs.sign_and_record(&verified, &view, &entry, &who2, &request, collected)
        })
        .await
        .map_err(|_| CsError::Internal("the signing task failed".into()))??;
        if decided.earlier || !decided.record.delivery.is_pending() {
            return Ok(decided);
        }
        // The user hears back within the page deadline; a slower RS is left
        // to the worker (the record says "delivery pending").
        let record =
            match tokio::time::timeout(PAGE_DEADLINE, self.deliver(&decided.record.nonce)).await {
                Ok(Some(r)) => r,
                _ => self
                    .records
                    .get(&decided.record.nonce)
                    .ok()
                    .flatten()
                    .unwrap_or(decided.record),
            };
        Ok(Decided {
            record,
            earlier: false,
        })
    }

    fn sign_and_record(
        &self,
        verified: &VerifiedCheq,
        view: &CheqView,
        entry: &Entry,
        who: &Identity,
        request: &DecisionRequest,
        collected: Option<IndexMap<String, String>>,
    ) -> Result<Decided, DecideError> {
        let nonce = &verified.fields().nonce;
        let stripe = Sha256::digest(nonce.as_bytes())[0] as usize % LOCK_STRIPES;
        let _guard = self.locks[stripe]
            .lock()
            .map_err(|_| CsError::Internal("lock poisoned".into()))?;
        if let Some(record) = self.records.get(nonce).map_err(CsError::from)? {
            // A double click, a second tab, a replayed form: no second signature.
            return Ok(Decided::earlier(record, who)?);
        }
        let now = self.clock.now();
        let document = countersign(
            verified,
            &self.key,
            DecisionInput {
                decision: request.decision,
                sub: &who.sub,
                also_known_as: &who.also_known_as,
                auth_time: who.auth_time,
                amr: &who.amr,
                channel: request.channel,
                view_text: shown(view, request.channel).0,
                collected: collected.clone(),
            },
            now,
        )
        .map_err(|e| match e {
            CountersignError::Expired(at) => DecideError::Other(CsError::Expired(at)),
            CountersignError::SubjectMismatch { subject, user } => {
                DecideError::Other(CsError::WrongUser { subject, user })
            }
            CountersignError::RequiredInputMissing(name) => {
                DecideError::Input(vec![(name, "a value is required to accept".into())])
            }
            e => DecideError::Other(CsError::BadRequest(e.to_string())),
        })?;
        // §8: a sensitive value is never written in clear, even before delivery.
        let sensitive =
            collected.as_ref().is_some_and(|c| {
                verified.cheq().parameters.iter().any(|p| {
                    p.input.as_ref().is_some_and(|i| i.sensitive) && c.contains_key(&p.name)
                })
            });
        let collected_hmac = collected
            .as_ref()
            .map(|c| collected_digests(self.sealer.evidence_key(), c))
            .unwrap_or_default();
        let document = if sensitive {
            self.sealer
                .seal(nonce, &document)
                .map_err(|e| CsError::Internal(e.to_string()))?
        } else {
            document
        };
        let record = DecisionRecord {
            sealed: sensitive,
            collected_hmac,
            nonce: nonce.clone(),
            user: who.sub.clone(),
            resource_uri: entry.resource_uri.clone(),
            resource_origin: view.resource_origin.clone(),
            operation: view.operation.clone(),
            operation_name: view.operation_name.clone(),
            decision: request.decision.as_str().to_owned(),
            channel: request.channel.as_str().to_owned(),
            decided_at: now.timestamp(),
            expires: verified.fields().expires.timestamp(),
            document,
            delivery: Delivery::Pending {
                attempts: 0,
                // The immediate delivery below goes first; the worker waits.
                next_try: now.timestamp() + 15,
                last_error: None,
            },
        };
        match self.records.claim(&record).map_err(CsError::from)? {
            Claim::Fresh => {
                log::info!(
                    "{} decided {} on {} ({})",
                    record.user,
                    record.decision,
                    record.operation_name,
                    record.resource_origin
                );
                Ok(Decided {
                    record,
                    earlier: false,
                })
            }
            Claim::Existing(old) => Ok(Decided::earlier(*old, who)?),
        }
    }

    /// One delivery attempt of a pending decision; returns the updated record.
    pub async fn deliver(self: &Arc<Self>, nonce: &str) -> Option<DecisionRecord> {
        // One delivery of a decision at a time: the immediate one and the
        // worker's must not overwrite each other's outcome.
        let stripe = Sha256::digest(nonce.as_bytes())[0] as usize % LOCK_STRIPES;
        let _guard = self.delivery_locks[stripe].lock().await;
        let record = self.records.get(nonce).ok().flatten()?;
        let Delivery::Pending { attempts, .. } = record.delivery else {
            return Some(record);
        };
        let now = self.clock.now().timestamp();
        let document = if record.sealed {
            match self.sealer.open(nonce, &record.document) {
                Ok(d) => d,
                Err(e) => {
                    log::error!("decision on {}: {e}", record.resource_origin);
                    let refused = Delivery::Refused {
                        status: 0,
                        reason: e.to_string(),
                        at: now,
                    };
                    return self.finish_blocking(record, refused, None).await;
                }
            }
        } else {
            record.document.clone()
        };
        // Past expiry one more try is still made: the RS may have recorded
        // the decision before a crash here lost the word of it, and then it
        // answers the same again.
        let late = now > record.expires + CLOCK_SKEW_SECS;
        let Ok(rs) = self.registry.find(&record.resource_uri) else {
            let gone = Delivery::Refused {
                status: 0,
                reason: "the resource server is no longer registered".into(),
                at: now,
            };
            return self.finish_blocking(record, gone, Some(document)).await;
        };
        let client = self.clients.get(rs)?;
        let answer = client
            .deliver(&record.resource_uri, &record.decision, &document)
            .await;
        let now = self.clock.now().timestamp();
        let delivery = match answer {
            Ok(a) if a.status == 200 => Delivery::Delivered {
                status: a.code,
                at: now,
            },
            Ok(a) if a.status == 410 => Delivery::Expired { at: now },
            _ if late => Delivery::Expired { at: now },
            Ok(a) if a.status == 401 || a.status == 403 => Delivery::Pending {
                attempts: attempts + 1,
                next_try: now + backoff(attempts + 1),
                last_error: Some(format!("HTTP {}: {}", a.status, a.code)),
            },
            Ok(a) => Delivery::Refused {
                status: a.status,
                reason: if a.description.is_empty() {
                    a.code
                } else {
                    format!("{}: {}", a.code, a.description)
                },
                at: now,
            },
            Err(e) => Delivery::Pending {
                attempts: attempts + 1,
                next_try: now + backoff(attempts + 1),
                last_error: Some(e.to_string()),
            },
        };
        match &delivery {
            Delivery::Pending { last_error, .. } => log::warn!(
                "delivery to {} pending: {}",
                record.resource_origin,
                last_error.as_deref().unwrap_or("")
            ),
            other => log::info!("delivery to {}: {}", record.resource_origin, other.label()),
        }
        self.finish_blocking(record, delivery, Some(document)).await
    }

    /// [`Cs::finish`] off the async worker (it flushes).
    async fn finish_blocking(
        self: &Arc<Self>,
        record: DecisionRecord,
        delivery: Delivery,
        clear: Option<String>,
    ) -> Option<DecisionRecord> {
        let cs = self.clone();
        tokio::task::spawn_blocking(move || cs.finish(record, delivery, clear.as_deref()))
            .await
            .ok()
            .flatten()
    }

    /// Stores a new delivery status. When it is final and the document was
    /// sealed, the key is shredded first and the record keeps redacted
    /// evidence only (§8).
    fn finish(
        &self,
        mut record: DecisionRecord,
        delivery: Delivery,
        clear: Option<&str>,
    ) -> Option<DecisionRecord> {
        let done = !delivery.is_pending();
        record.delivery = delivery;
        if done && record.sealed {
            // The redacted record is made durable first, then the key goes;
            // a crash in between leaves a key whose record no longer needs
            // it, which `sweep_keys` deletes at the next start.
            record.document = match clear {
                Some(d) => redact(self.sealer.evidence_key(), d, &record.collected_hmac),
                None => "{\"redacted\":\"the sealed document could not be opened\"}".to_owned(),
            };
            record.sealed = false;
            if let Err(e) = self.records.put(&record) {
                log::error!("cannot store a delivery status: {e}");
                return None;
            }
            if let Err(e) = self.sealer.shred(&record.nonce) {
                log::error!("cannot delete a sealed-document key: {e}");
            }
            return Some(record);
        }
        // A lost "delivered" is harmless (the next start delivers the same
        // bytes again and the RS answers the same), so no flush here; a
        // still-pending status is worth keeping.
        let stored = if done {
            self.records.put_lazily(&record)
        } else {
            self.records.put(&record)
        };
        match stored {
            Ok(()) => Some(record),
            Err(e) => {
                log::error!("cannot store a delivery status: {e}");
                None
            }
        }
    }

    /// Removes started confirmations older than `keep_secs` (a CHEQ lives at
    /// most 24 h, §4; decisions stay in the records). Returns how many.
    pub fn collect_entries(&self, keep_secs: i64) -> Result<usize, CsError> {
        let cutoff = self.clock.now().timestamp() - keep_secs;
        let mut n = 0;
        for item in self.confirmations.iter() {
            let (k, v) = item?;
            let old = serde_json::from_slice::<Entry>(&v).map_or(true, |e| e.created < cutoff);
            if old {
                self.confirmations.remove(k)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Deletes sealed-document keys whose records no longer need them (left
    /// by a crash between storing redacted evidence and deleting the key).
    pub fn sweep_keys(&self) -> Result<usize, CsError> {
        // Usually there is no key at all: then no record needs reading.
        if !self.sealer.has_keys() {
            return Ok(0);
        }
        let keep: Vec<String> = self.records.sealed()?;
        Ok(self.sealer.sweep(&keep))
    }

    /// Wakes the delivery worker.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Delivers pending decisions whose time has come, forever: started with
    /// the server, so decisions left pending by a previous run go out too.
    pub async fn run_deliveries(self: Arc<Self>) {
        loop {
            let now = self.clock.now().timestamp();
            let due: Vec<String> = self
                .records
                .pending()
                .unwrap_or_default()
                .into_iter()
                .filter(|n| {
                    self.records.get(n).ok().flatten().is_some_and(|r| {
                        matches!(r.delivery, Delivery::Pending { next_try, .. } if next_try <= now)
                    })
                })
                .take(MAX_DELIVERIES_PER_ROUND)
                .collect();
            let tasks: Vec<_> = due
                .into_iter()
                .map(|nonce| {
                    let cs = self.clone();
                    tokio::spawn(async move { cs.deliver(&nonce).await })
                })
                .collect();
            for t in tasks {
                let _ = t.await;
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), self.wake.notified()).await;
        }
    }

    /// A user's decisions, newest first.
    pub fn history(&self, who: &Identity) -> Result<Vec<DecisionRecord>, CsError> {
        Ok(self.records.for_user(&who.sub, 500)?)
    }

    /// The signed document of one of the user's decisions (evidence);
    /// redacted when it carries private values.
    pub fn evidence(&self, nonce: &str, who: &Identity) -> Result<String, CsError> {
        match self.records.get(nonce)? {
            Some(r) if r.user == who.sub && r.sealed => {
                let clear = self
                    .sealer
                    .open(nonce, &r.document)
                    .map_err(|e| CsError::Internal(e.to_string()))?;
                Ok(redact(
                    self.sealer.evidence_key(),
                    &clear,
                    &r.collected_hmac,
                ))
            }
            Some(r) if r.user == who.sub => Ok(r.document),
            _ => Err(CsError::NotFound),
        }
    }
}

/// Problems with typed values: (parameter name, message).
pub type Problems = Vec<(String, String)>;

/// Seconds before the next delivery attempt: 1, 2, 4, … capped at 30.
pub fn backoff(attempts: u32) -> i64 {
    (1i64 << attempts.min(5)).min(MAX_BACKOFF_SECS)
}

/// §8: checks the values the user typed against each parameter's `parameter
/// input`. Returns what goes into `cheq_collected` (nothing for a rejection).
pub fn validate_collected(
    verified: &VerifiedCheq,
    decision: Decision,
    given: &IndexMap<String, String>,
) -> Result<Option<IndexMap<String, String>>, Problems> {
    if decision == Decision::Reject {
        return Ok(None);
    }
    let mut out = IndexMap::new();
    let mut problems = Vec::new();
    for p in &verified.cheq().parameters {
        let Some(input) = &p.input else { continue };
        let value = given.get(&p.name).map(|v| v.trim()).unwrap_or("");
        if value.is_empty() {
            if input.required {
                problems.push((p.name.clone(), "a value is required".to_owned()));
            }
            continue;
        }
        if let Some(max) = input.max_length {
            if value.chars().count() > max {
                problems.push((p.name.clone(), format!("at most {max} characters")));
                continue;
            }
        }
        let well_typed = match input.input_type {
            InputType::Text => !value.chars().any(char::is_control),
            InputType::Digits => value.chars().all(|c| c.is_ascii_digit()),
            InputType::Amount => is_amount(value),
        };
        if !well_typed {
            let what = match input.input_type {
                InputType::Text => "text without control characters",
                InputType::Digits => "digits only",
                InputType::Amount => "an amount such as 250 or 250.00",
            };
            problems.push((p.name.clone(), format!("must be {what}")));
            continue;
        }
        if let Some(pattern) = &input.pattern {
            match regex::Regex::new(&format!("^(?:{pattern})$")) {
                Ok(re) if re.is_match(value) => {}
                Ok(_) => {
                    problems.push((p.name.clone(), "does not have the expected form".into()));
                    continue;
                }
                Err(_) => {
                    problems.push((p.name.clone(), "the request's pattern is invalid".into()));
                    continue;
                }
            }
        }
        out.insert(p.name.clone(), value.to_owned());
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(if out.is_empty() { None } else { Some(out) })
}

fn is_amount(v: &str) -> bool {
    let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
    !whole.is_empty()
        && whole.len() <= 15
        && whole.chars().all(|c| c.is_ascii_digit())
        && (v.contains('.') && (1..=2).contains(&frac.len()) || !v.contains('.'))
        && frac.chars().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_capped_at_30_seconds() {
        assert_eq!(
            (1..=8).map(backoff).collect::<Vec<_>>(),
            [2, 4, 8, 16, 30, 30, 30, 30]
        );
        assert_eq!(backoff(0), 1);
    }

    #[test]
    fn amounts() {
        for ok in ["1", "250", "250.0", "250.00", "0.5"] {
            assert!(is_amount(ok), "{ok}");
        }
        for bad in ["", ".5", "250.", "250.000", "1e3", "-1", "2,50", "12 3"] {
            assert!(!is_amount(bad), "{bad}");
        }
    }
}
