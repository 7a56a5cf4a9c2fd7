//! The MCP bridge's domain (PROTOCOL.md §11): fronts an A2T resource server
//! for MCP clients, and turns a `202` + URI pack into a URL-mode elicitation
//! whose outcome the client collects later. No MCP framing here: the wire
//! side is [`server`] (on `rmcp`); this module decides what a call gives.
//!
//! Two ways a pending confirmation is carried, one per MCP revision:
//! - **2025-11-25** (sessions): the bridge keeps the pending call in memory,
//!   keyed by the client session, the tool and a digest of its arguments, and
//!   names it to the client by an opaque random `elicitationId`
//!   ([`Bridge::call_in_session`]). The result URI never leaves the bridge.
//!   One task, the poller, reads the results of all pending calls, each no
//!   sooner than the RS's `Retry-After` and less often as the call ages
//!   ([`next_read_in`]); the client is told once per call that its state is
//!   final, whether the poller or the client's retry read it first. The
//!   bounds ([`MAX_PENDING`], [`MAX_PENDING_PER_SESSION`]) count a call from
//!   the moment its RS call starts, so calls made at once cannot pass them.
//! - **2026-07-28** (stateless, multi round-trip requests): the bridge keeps
//!   nothing; the pending call travels in the `requestState`, sealed with
//!   ChaCha20-Poly1305 under a key of this process (so the client can neither
//!   read the result URI in it nor alter it), bound to the tool, a digest of
//!   the arguments and an expiry ([`Bridge::call_stateless`], [`state`]).
//!
//! The elicitation URL is the CS's start link (`<confirmation uri>?resource_uri=…`):
//! no credential, no personal data, not pre-authenticated (§11).
//!
//! The bridge calls the RS as one [`Agent`]: one HTTP client whose
//! connections are reused, and one token until shortly before it expires.

pub mod schema;
pub mod server;
pub mod state;

use crate::resource::agent::{Agent, AgentError, InvokeOutcome, ResultRead, ResultStatus};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The most pending confirmations the bridge keeps for 2025-11-25 sessions;
/// past it a new one is refused (the oldest are swept first).
pub const MAX_PENDING: usize = 10_000;
/// The most pending confirmations one session may hold at once.
pub const MAX_PENDING_PER_SESSION: usize = 64;
/// How long a pending confirmation is kept at most (longer than any CHEQ lives).
pub const PENDING_TTL: Duration = Duration::from_secs(25 * 3600);
/// How long a final outcome waits to be collected before it is dropped.
pub const COLLECT_TTL: Duration = Duration::from_secs(3600);
/// The shortest wait between two reads of a pending call's result: the
/// first read comes this long after the call.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// The longest wait between two reads of a pending call's result that the
/// bridge chooses itself; the RS's `Retry-After` may ask for a longer one
/// (up to [`agent::MAX_RETRY_AFTER`](crate::resource::agent::MAX_RETRY_AFTER)).
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(10);
/// The longest wait after reads that failed in a row.
pub const MAX_ERROR_BACKOFF: Duration = Duration::from_secs(60);
/// How many result reads the poller has under way at once.
pub const POLL_CONCURRENCY: usize = 16;

/// Told the `elicitationId` of a pending call once the RS reports its final
/// state (the bridge calls it once per call, whoever read that state first).
pub type Notifier = Arc<dyn Fn(&str) + Send + Sync>;

/// Where the bridge reaches the RS, and as whom.
#[derive(Clone)]
pub struct BridgeConfig {
    /// The RS's base URL.
    pub rs: String,
    /// The agent's OAuth client id at the RS.
    pub client_id: String,
    /// The agent's client secret at the RS.
    pub secret: String,
}

impl std::fmt::Debug for BridgeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeConfig")
            .field("rs", &self.rs)
            .field("client_id", &self.client_id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Why a call could not be served. Front ends map each to an MCP answer.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The RS refused the call or could not be reached.
    #[error("the resource server: {0}")]
    Rs(#[from] AgentError),
    /// The `requestState` is not one this bridge made for this call.
    #[error("the request state is not valid for this call: {0}")]
    State(#[from] state::StateError),
    /// Too many pending confirmations.
    #[error("too many pending confirmations; collect or let some expire first")]
    Busy,
}

/// The final outcome of a confirmed call (§7).
#[derive(Debug, Clone, PartialEq)]
pub enum Final {
    Accepted(Value),
    Rejected,
    Expired,
}

impl From<ResultStatus> for Final {
    fn from(s: ResultStatus) -> Self {
        match s {
            ResultStatus::Accepted(v) => Final::Accepted(v),
            ResultStatus::Rejected => Final::Rejected,
            ResultStatus::Expired => Final::Expired,
        }
    }
}

/// The URL-mode elicitation that asks the user to confirm at the CS.
#[derive(Debug, Clone, PartialEq)]
pub struct Elicitation {
    /// The CS's start link.
    pub url: String,
    /// "Confirm '<tool>' at <CS origin>".
    pub message: String,
}

/// What a call gives (both revisions).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The RS ran it at once; its A2T output.
    Done(Value),
    /// The user has decided (or the CHEQ expired).
    Final(Final),
    /// Waiting for the user: ask (again) with this elicitation.
    /// `handle` is the `elicitationId` (2025-11-25) or the sealed
    /// `requestState` (2026-07-28).
    Pending {
        elicitation: Elicitation,
        handle: String,
        /// True when this call created the pending confirmation.
        new: bool,
    },
}

/// Where a pending 2025-11-25 call stands.
enum Watch {
    /// Not final yet: the poller reads `result_uri` at `due`.
    Waiting {
        result_uri: String,
        due: Instant,
        /// Reads that failed in a row.
        failures: u32,
    },
    /// Final, since `at`; kept for the retry to collect.
    Final { outcome: Final, at: Instant },
}

struct Pending {
    session: String,
    tool: String,
    digest: String,
    elicitation: Elicitation,
    created: Instant,
    watch: Watch,
    /// Taken by whoever first sees the final state, so that the client is
    /// told exactly once.
    notify: Option<Notifier>,
}

/// The pending 2025-11-25 calls, and the slots held by calls whose RS call
/// is under way (counted against the bounds like the calls they may become).
#[derive(Default)]
struct Calls {
    map: HashMap<String, Pending>,
    reserved: HashMap<String, usize>,
    reserved_total: usize,
}

impl Calls {
    fn release(&mut self, session: &str) {
        self.reserved_total = self.reserved_total.saturating_sub(1);
        if let Some(n) = self.reserved.get_mut(session) {
            *n -= 1;
            if *n == 0 {
                self.reserved.remove(session);
            }
        }
    }

    fn sweep(&mut self, now: Instant) {
        self.map.retain(|_, p| match &p.watch {
            Watch::Final { at, .. } => now.duration_since(*at) < COLLECT_TTL,
            Watch::Waiting { .. } => now.duration_since(p.created) < PENDING_TTL,
        });
    }
}

/// What the bridge and its poller share.
struct Shared {
    agent: Agent,
    calls: Mutex<Calls>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a read of call `id`'s result, and tells the client once it
    /// is final (unless someone already did).
    fn record(&self, id: &str, read: Result<ResultRead, AgentError>) {
        let now = Instant::now();
        let notify = {
            let mut calls = self.lock();
            let Some(p) = calls.map.get_mut(id) else {
                return;
            };
            let Watch::Waiting { due, failures, .. } = &mut p.watch else {
                return;
            };
            match read {
                Ok(ResultRead::Final(status)) => {
                    p.watch = Watch::Final {
                        outcome: status.into(),
                        at: now,
                    };
                    p.notify.take()
                }
                Ok(ResultRead::Pending { retry_after }) => {
                    *failures = 0;
                    *due = now + next_read_in(now.duration_since(p.created), retry_after);
                    None
                }
                Err(e) => {
                    *failures = failures.saturating_add(1);
                    *due = now + error_backoff(*failures);
                    tracing::debug!(error = %e, "a pending call's result could not be read");
                    None
                }
            }
        };
        if let Some(notify) = notify {
            notify(id);
        }
    }

    /// One walk of the pending calls: sweeps, reads every result that is
    /// due ([`POLL_CONCURRENCY`] at a time) and records it. Returns whether
    /// any call is left to watch, and when the next read is due.
    async fn poll_round(self: &Arc<Self>) -> Option<Instant> {
        let now = Instant::now();
        let due: Vec<(String, String)> = {
            let mut calls = self.lock();
            calls.sweep(now);
            calls
                .map
                .iter_mut()
                .filter_map(|(id, p)| match &mut p.watch {
                    Watch::Waiting {
                        result_uri, due, ..
                    } if *due <= now => {
                        // Not read again before this read has ended (or
                        // timed out) and said when.
                        *due = now + crate::resource::agent::REQUEST_TIMEOUT + POLL_INTERVAL;
                        Some((id.clone(), result_uri.clone()))
                    }
                    _ => None,
                })
                .collect()
        };
        let mut queue = due.into_iter();
        let mut reads = tokio::task::JoinSet::new();
        loop {
            while reads.len() < POLL_CONCURRENCY {
                let Some((id, uri)) = queue.next() else {
                    break;
                };
                let shared = self.clone();
                reads.spawn(async move {
                    let read = shared.agent.read_result(&uri).await;
                    shared.record(&id, read);
                });
            }
            if reads.join_next().await.is_none() {
                break;
            }
        }
        let calls = self.lock();
        calls
            .map
            .values()
            .filter_map(|p| match &p.watch {
                Watch::Waiting { due, .. } => Some(*due),
                Watch::Final { .. } => None,
            })
            .min()
    }
}

/// How long until the next read of a call that has been pending for `age`:
/// [`POLL_INTERVAL`] at first, then a tenth of its age (a user who has not
/// decided for a while is read less often), at most [`MAX_POLL_INTERVAL`];
/// never sooner than the RS's `Retry-After`.
pub fn next_read_in(age: Duration, retry_after: Option<Duration>) -> Duration {
    let own = (age / 10).clamp(POLL_INTERVAL, MAX_POLL_INTERVAL);
    own.max(retry_after.unwrap_or(Duration::ZERO))
}

/// How long until the next read after `failures` failed reads in a row.
pub fn error_backoff(failures: u32) -> Duration {
    POLL_INTERVAL
        .saturating_mul(1 << failures.min(8))
        .min(MAX_ERROR_BACKOFF)
}

/// The one task that reads the results of all pending 2025-11-25 calls. It
/// ends with the bridge.
async fn poller(shared: Weak<Shared>, wake: Arc<tokio::sync::Notify>) {
    loop {
        let next = match shared.upgrade() {
            Some(shared) => shared.poll_round().await,
            None => return,
        };
        match next {
            // Rounds at most every quarter second, however the reads fall.
            Some(at) => {
                let soonest = Instant::now() + Duration::from_millis(250);
                tokio::time::sleep_until(at.max(soonest).into()).await;
            }
            // Nothing to watch: until a call is added.
            None => wake.notified().await,
        }
    }
}

/// A slot held for a call whose RS call is under way; given back when
/// dropped unless the call became pending ([`Reservation::fill`]).
struct Reservation<'a> {
    shared: &'a Shared,
    session: &'a str,
    held: bool,
}

impl Reservation<'_> {
    /// Turns the slot into the pending call `id`, under one lock.
    fn fill(mut self, id: String, pending: Pending) {
        let mut calls = self.shared.lock();
        calls.release(self.session);
        calls.map.insert(id, pending);
        self.held = false;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.held {
            self.shared.lock().release(self.session);
        }
    }
}

/// The bridge: the RS it fronts, the pending confirmations of 2025-11-25
/// sessions and their poller, and the key of 2026-07-28 request states.
pub struct Bridge {
    config: BridgeConfig,
    shared: Arc<Shared>,
    wake: Arc<tokio::sync::Notify>,
    poller_started: AtomicBool,
    states: state::StateKey,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The start link of §11: `<confirmation uri>?resource_uri=<encoded>`.
pub use crate::resource::agent::start_link;

/// The elicitation message: the operation and the CS's origin (§11).
pub fn message_for(tool: &str, confirmation_uri: &str) -> String {
    let origin = url::Url::parse(confirmation_uri)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| confirmation_uri.to_owned());
    format!("Confirm '{tool}' at {origin}")
}

/// The SHA-256 (base64url) of the arguments in canonical form (keys sorted
/// at every level), so that the same arguments give the same digest in any
/// key order, and one changed byte gives another.
pub fn args_digest(tool: &str, args: &Map<String, Value>) -> String {
    let canonical = canonical(&Value::Object(args.clone()));
    crate::sign::b64::sha256(format!("{tool}\n{canonical}").as_bytes())
}

fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&m[k])))
                .collect();
            format!("{{{}}}", items.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

fn random_id() -> String {
    let bytes: [u8; 16] = rand::random();
    crate::sign::b64::encode(bytes)
}

/// What a 2025-11-25 call found of an earlier one.
enum Found {
    Final(Final, Option<Notifier>),
    Waiting {
        result_uri: String,
        elicitation: Elicitation,
    },
}

impl Bridge {
    /// A bridge to the RS of `config`, as its agent: one HTTP client and one
    /// token for every call.
    pub fn new(config: BridgeConfig) -> Result<Self, BridgeError> {
        let agent = Agent::new(&config.rs, &config.client_id, &config.secret)?;
        Ok(Bridge {
            config,
            shared: Arc::new(Shared {
                agent,
                calls: Mutex::new(Calls::default()),
            }),
            wake: Arc::new(tokio::sync::Notify::new()),
            poller_started: AtomicBool::new(false),
            states: state::StateKey::generate(),
        })
    }

    pub fn config(&self) -> &BridgeConfig {
        &self.config
    }

    /// The RS's tool signatures (A2T).
    pub async fn tools(&self) -> Result<Vec<Value>, BridgeError> {
        Ok(self.shared.agent.list_tools().await?)
    }

    async fn invoke(
        &self,
        tool: &str,
        args: &Map<String, Value>,
    ) -> Result<InvokeOutcome, BridgeError> {
        Ok(self.shared.agent.invoke(tool, args).await?)
    }

    /// Starts the poller (once, on the runtime of the first pending call)
    /// and wakes it.
    fn watch(&self) {
        if !self.poller_started.swap(true, Ordering::SeqCst) {
            tokio::spawn(poller(Arc::downgrade(&self.shared), self.wake.clone()));
        }
        self.wake.notify_one();
    }

    /// A call from a 2025-11-25 session. A retry of the same tool with the
    /// same arguments from the same session finds its pending confirmation:
    /// the final outcome once there is one (then it is forgotten), else the
    /// same elicitation again. Another session never finds it.
    ///
    /// A new pending call is watched by the bridge's poller; `notify` is
    /// told its `elicitationId` once the RS reports a final state, whether
    /// the poller or a retry read it first.
    pub async fn call_in_session(
        &self,
        session: &str,
        tool: &str,
        args: &Map<String, Value>,
        notify: Option<Notifier>,
    ) -> Result<Outcome, BridgeError> {
        let digest = args_digest(tool, args);
        // The lookup, the bounds and the reservation of a slot, under one
        // lock: calls made at once cannot all pass the check and then all
        // add a pending call.
        let found = {
            let mut calls = self.shared.lock();
            let hit = calls
                .map
                .iter()
                .find(|(_, p)| p.session == session && p.digest == digest && p.tool == tool)
                .map(|(id, _)| id.clone());
            match hit.and_then(|id| calls.map.remove(&id).map(|p| (id, p))) {
                // Final: collected, so forgotten.
                Some((id, p)) => match p.watch {
                    Watch::Final { outcome, .. } => Some((id, Found::Final(outcome, p.notify))),
                    Watch::Waiting { ref result_uri, .. } => {
                        let found = Found::Waiting {
                            result_uri: result_uri.clone(),
                            elicitation: p.elicitation.clone(),
                        };
                        // Still pending: kept.
                        calls.map.insert(id.clone(), p);
                        Some((id, found))
                    }
                },
                None => {
                    calls.sweep(Instant::now());
                    let mine = calls.map.values().filter(|p| p.session == session).count()
                        + calls.reserved.get(session).copied().unwrap_or(0);
                    if calls.map.len() + calls.reserved_total >= MAX_PENDING
                        || mine >= MAX_PENDING_PER_SESSION
                    {
                        return Err(BridgeError::Busy);
                    }
                    *calls.reserved.entry(session.to_owned()).or_default() += 1;
                    calls.reserved_total += 1;
                    None
                }
            }
        };
        match found {
            Some((id, Found::Final(outcome, notify))) => {
                if let Some(notify) = notify {
                    notify(&id);
                }
                Ok(Outcome::Final(outcome))
            }
            Some((
                id,
                Found::Waiting {
                    result_uri,
                    elicitation,
                },
            )) => match self.shared.agent.read_result(&result_uri).await? {
                ResultRead::Final(status) => {
                    // Collected here: forgotten, and the client told, unless
                    // the poller saw it final first and told it already.
                    let notify = self.shared.lock().map.remove(&id).and_then(|p| p.notify);
                    if let Some(notify) = notify {
                        notify(&id);
                    }
                    Ok(Outcome::Final(status.into()))
                }
                ResultRead::Pending { .. } => Ok(Outcome::Pending {
                    elicitation,
                    handle: id,
                    new: false,
                }),
            },
            None => self.call_new(session, tool, args, digest, notify).await,
        }
    }

    /// A new call, for which a slot is reserved.
    async fn call_new(
        &self,
        session: &str,
        tool: &str,
        args: &Map<String, Value>,
        digest: String,
        notify: Option<Notifier>,
    ) -> Result<Outcome, BridgeError> {
        let slot = Reservation {
            shared: &self.shared,
            session,
            held: true,
        };
        let pack = match self.invoke(tool, args).await? {
            InvokeOutcome::Done(output) => return Ok(Outcome::Done(output)),
            InvokeOutcome::NeedsConfirmation(pack) => pack,
        };
        let elicitation = Elicitation {
            url: start_link(&pack.confirmation_uri, &pack.resource_uri),
            message: message_for(tool, &pack.confirmation_uri),
        };
        let id = random_id();
        let now = Instant::now();
        slot.fill(
            id.clone(),
            Pending {
                session: session.to_owned(),
                tool: tool.to_owned(),
                digest,
                elicitation: elicitation.clone(),
                created: now,
                watch: Watch::Waiting {
                    result_uri: pack.result_uri,
                    due: now + POLL_INTERVAL,
                    failures: 0,
                },
                notify,
            },
        );
        self.watch();
        Ok(Outcome::Pending {
            elicitation,
            handle: id,
            new: true,
        })
    }

    /// How many 2025-11-25 confirmations are pending or uncollected.
    pub fn pending_count(&self) -> usize {
        self.shared.lock().map.len()
    }

    /// A 2026-07-28 call. Without `request_state` it invokes the tool; with
    /// one, it must be a state this bridge sealed for this very tool and
    /// these arguments, not expired: then the outcome if final, else the
    /// same elicitation with a refreshed state.
    pub async fn call_stateless(
        &self,
        tool: &str,
        args: &Map<String, Value>,
        request_state: Option<&str>,
    ) -> Result<Outcome, BridgeError> {
        let digest = args_digest(tool, args);
        let now = std::time::SystemTime::now();
        if let Some(sealed) = request_state {
            let pending = self.states.open(sealed, &digest, now)?;
            if let Some(status) = self.shared.agent.check_result(&pending.result_uri).await? {
                return Ok(Outcome::Final(status.into()));
            }
            let elicitation = Elicitation {
                url: pending.url.clone(),
                message: pending.message.clone(),
            };
            let handle = self.states.seal(&pending.refreshed(now), &digest)?;
            return Ok(Outcome::Pending {
                elicitation,
                handle,
                new: false,
            });
        }
        let pack = match self.invoke(tool, args).await? {
            InvokeOutcome::Done(output) => return Ok(Outcome::Done(output)),
            InvokeOutcome::NeedsConfirmation(pack) => pack,
        };
        let pending = state::PendingState::new(
            tool,
            start_link(&pack.confirmation_uri, &pack.resource_uri),
            message_for(tool, &pack.confirmation_uri),
            pack.result_uri,
            now,
        );
        let elicitation = Elicitation {
            url: pending.url.clone(),
            message: pending.message.clone(),
        };
        let handle = self.states.seal(&pending, &digest)?;
        Ok(Outcome::Pending {
            elicitation,
            handle,
            new: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn digest_ignores_key_order_but_not_values_or_tool() {
        let a = obj(json!({"a": 1, "b": {"x": "y", "z": [1, 2]}}));
        let b = obj(json!({"b": {"z": [1, 2], "x": "y"}, "a": 1}));
        assert_eq!(args_digest("t", &a), args_digest("t", &b));
        let c = obj(json!({"a": 1, "b": {"x": "y", "z": [2, 1]}}));
        assert_ne!(args_digest("t", &a), args_digest("t", &c));
        assert_ne!(args_digest("t", &a), args_digest("u", &a));
        let d = obj(json!({"a": "1", "b": {"x": "y", "z": [1, 2]}}));
        assert_ne!(args_digest("t", &a), args_digest("t", &d));
    }

    #[test]
    fn message_names_tool_and_cs_origin_only() {
        assert_eq!(
            message_for("book_flight", "https://confirm.example/confirm?x=1"),
            "Confirm 'book_flight' at https://confirm.example"
        );
    }

    #[test]
    fn reads_wait_for_retry_after_and_thin_out_with_age() {
        let s = Duration::from_secs;
        assert_eq!(next_read_in(s(0), None), POLL_INTERVAL);
        assert_eq!(next_read_in(s(0), Some(s(1))), POLL_INTERVAL);
        assert_eq!(next_read_in(s(0), Some(s(9))), s(9));
        assert_eq!(next_read_in(s(60), None), s(6));
        assert_eq!(next_read_in(s(3600), None), MAX_POLL_INTERVAL);
        assert_eq!(next_read_in(s(3600), Some(s(45))), s(45));
        assert_eq!(error_backoff(1), 2 * POLL_INTERVAL);
        assert!(error_backoff(2) > error_backoff(1));
        assert_eq!(error_backoff(u32::MAX), MAX_ERROR_BACKOFF);
    }

    /// A call whose RS call fails gives its slot back: the bound is not
    /// used up by failures.
    #[tokio::test]
    async fn a_failed_call_gives_its_slot_back() {
        // Nothing listens on port 1 of loopback: every RS call fails.
        let bridge = Bridge::new(BridgeConfig {
            rs: "http://127.0.0.1:1".into(),
            client_id: "agent".into(),
            secret: "secret".into(),
        })
        .unwrap();
        for i in 0..MAX_PENDING_PER_SESSION + 2 {
            let args = obj(json!({"i": i}));
            let err = bridge.call_in_session("s", "t", &args, None).await;
            assert!(matches!(err, Err(BridgeError::Rs(_))), "{err:?}");
        }
        let calls = bridge.shared.lock();
        assert_eq!(calls.reserved_total, 0);
        assert!(calls.reserved.is_empty());
        assert!(calls.map.is_empty());
    }

    #[test]
    fn debug_hides_the_secret() {
        let c = BridgeConfig {
            rs: "http://127.0.0.1:1".into(),
            client_id: "a".into(),
            secret: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
