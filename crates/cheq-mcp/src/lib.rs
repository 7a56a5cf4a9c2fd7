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
//! - **Clients without URL elicitation** (either revision): the bridge keeps
//!   nothing; the pending call travels in a sealed `handle`, bound to the
//!   client's session, which the client shows to the bridge's own tool
//!   `confirmation_status` ([`Bridge::call_with_handle`], [`Bridge::status`]).
//!
//! The elicitation URL is the CS's start link (`<confirmation uri>?resource_uri=…`):
//! no credential, no personal data, not pre-authenticated (§11).
//!
//! The bridge calls the RS as one [`Agent`]: one HTTP client whose
//! connections are reused, and one token until shortly before it expires.
#![forbid(unsafe_code)]

pub mod schema;
pub mod server;
pub mod state;

mod pending;

pub use pending::{
    error_backoff, next_read_in, COLLECT_TTL, MAX_ERROR_BACKOFF, MAX_PENDING,
    MAX_PENDING_PER_SESSION, MAX_POLL_INTERVAL, PENDING_TTL, POLL_CONCURRENCY, POLL_INTERVAL,
};

use cheq_resource::agent::{Agent, AgentError, InvokeOutcome, ResultRead, ResultStatus};
use cheq_support::secret::Secret;
use pending::{poller, Calls, Pending, Reservation, Shared, Watch};
use serde_json::{Map, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Told the `elicitationId` of a pending call once the RS reports its final
/// state (the bridge calls it once per call, whoever read that state first).
pub type Notifier = Arc<dyn Fn(&str) + Send + Sync>;

/// Where the bridge reaches the RS, and as whom.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The RS's base URL.
    pub rs: String,
    /// The agent's OAuth client id at the RS.
    pub client_id: String,
    /// The agent's client secret at the RS.
    pub secret: Secret,
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
pub use cheq_resource::agent::start_link;

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
    cheq_core::sign::b64::sha256(format!("{tool}\n{canonical}").as_bytes())
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
    cheq_core::sign::b64::encode(bytes)
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
        let agent = Agent::new(&config.rs, &config.client_id, config.secret.expose())?;
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
        let binding = state::Binding::Request { digest: &digest };
        let now = std::time::SystemTime::now();
        let pending = match request_state {
            Some(sealed) => {
                let pending = self.states.open(sealed, binding, now)?;
                if let Some(status) = self.shared.agent.check_result(&pending.result_uri).await? {
                    return Ok(Outcome::Final(status.into()));
                }
                pending.refreshed(now, state::STATE_TTL)
            }
            None => match self
                .invoke_sealable(tool, args, digest.clone(), now)
                .await?
            {
                Invoked::Pending(pending) => pending,
                Invoked::Done(output) => return Ok(Outcome::Done(output)),
            },
        };
        Ok(Outcome::Pending {
            elicitation: Elicitation {
                url: pending.url.clone(),
                message: pending.message.clone(),
            },
            handle: self.states.seal(&pending, binding)?,
            new: request_state.is_none(),
        })
    }

    /// A call from a client that cannot open a URL elicitation (§11): a
    /// call that needs confirmation gives a sealed `handle`, bound to
    /// `holder` (the client's session), for [`Bridge::status`]. Nothing is
    /// kept at the bridge.
    pub async fn call_with_handle(
        &self,
        holder: &str,
        tool: &str,
        args: &Map<String, Value>,
    ) -> Result<Outcome, BridgeError> {
        let now = std::time::SystemTime::now();
        let digest = args_digest(tool, args);
        let pending = match self.invoke_sealable(tool, args, digest, now).await? {
            Invoked::Pending(pending) => pending.refreshed(now, state::HANDLE_TTL),
            Invoked::Done(output) => return Ok(Outcome::Done(output)),
        };
        Ok(Outcome::Pending {
            elicitation: Elicitation {
                url: pending.url.clone(),
                message: pending.message.clone(),
            },
            handle: self
                .states
                .seal(&pending, state::Binding::Handle { holder })?,
            new: true,
        })
    }

    /// Where the call of a `handle` stands (§11): it must be a handle this
    /// bridge sealed for `holder`, not expired.
    pub async fn status(&self, holder: &str, handle: &str) -> Result<Status, BridgeError> {
        let now = std::time::SystemTime::now();
        let pending = self
            .states
            .open(handle, state::Binding::Handle { holder }, now)?;
        Ok(
            match self.shared.agent.check_result(&pending.result_uri).await? {
                Some(status) => Status::Final(status.into()),
                None => Status::Pending {
                    tool: pending.tool,
                    elicitation: Elicitation {
                        url: pending.url,
                        message: pending.message,
                    },
                },
            },
        )
    }

    /// Invokes the tool for a call that is carried sealed.
    async fn invoke_sealable(
        &self,
        tool: &str,
        args: &Map<String, Value>,
        digest: String,
        now: std::time::SystemTime,
    ) -> Result<Invoked, BridgeError> {
        let pack = match self.invoke(tool, args).await? {
            InvokeOutcome::Done(output) => return Ok(Invoked::Done(output)),
            InvokeOutcome::NeedsConfirmation(pack) => pack,
        };
        let call = state::Call {
            tool: tool.to_owned(),
            digest,
            url: start_link(&pack.confirmation_uri, &pack.resource_uri),
            message: message_for(tool, &pack.confirmation_uri),
        };
        Ok(Invoked::Pending(state::PendingState::new(
            call,
            pack.result_uri,
            now,
            state::STATE_TTL,
        )))
    }
}

/// A tool invoked for a call that is carried sealed.
enum Invoked {
    /// The RS ran it at once; its A2T output.
    Done(Value),
    /// It needs confirmation: the call to seal.
    Pending(state::PendingState),
}

/// Where a call known by its handle stands (§11).
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// The user has not decided yet.
    Pending {
        tool: String,
        elicitation: Elicitation,
    },
    /// The user has decided (or the CHEQ expired).
    Final(Final),
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
