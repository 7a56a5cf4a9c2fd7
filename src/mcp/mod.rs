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
//! - **2026-07-28** (stateless, multi round-trip requests): the bridge keeps
//!   nothing; the pending call travels in the `requestState`, sealed with
//!   ChaCha20-Poly1305 under a key of this process (so the client can neither
//!   read the result URI in it nor alter it), bound to the tool, a digest of
//!   the arguments and an expiry ([`Bridge::call_stateless`], [`state`]).
//!
//! The elicitation URL is the CS's start link (`<confirmation uri>?resource_uri=…`):
//! no credential, no personal data, not pre-authenticated (§11).

pub mod schema;
pub mod server;
pub mod state;

use crate::resource::agent::{self, AgentError, InvokeOutcome, ResultStatus};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most pending confirmations the bridge keeps for 2025-11-25 sessions;
/// past it a new one is refused (the oldest are swept first).
pub const MAX_PENDING: usize = 10_000;
/// The most pending confirmations one session may hold at once.
pub const MAX_PENDING_PER_SESSION: usize = 64;
/// How long a pending confirmation is kept at most (longer than any CHEQ lives).
pub const PENDING_TTL: Duration = Duration::from_secs(25 * 3600);
/// How often the bridge reads the RS's result of a pending 2025-11-25 call.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// How long a final outcome waits to be collected before it is dropped.
pub const COLLECT_TTL: Duration = Duration::from_secs(3600);

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

struct Pending {
    session: String,
    tool: String,
    digest: String,
    result_uri: String,
    elicitation: Elicitation,
    created: Instant,
    outcome: Option<(Final, Instant)>,
}

/// The bridge: the RS it fronts, the pending confirmations of 2025-11-25
/// sessions, and the key of 2026-07-28 request states.
pub struct Bridge {
    config: BridgeConfig,
    pending: Mutex<HashMap<String, Pending>>,
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

impl Bridge {
    pub fn new(config: BridgeConfig) -> Self {
        Bridge {
            config,
            pending: Mutex::new(HashMap::new()),
            states: state::StateKey::generate(),
        }
    }

    pub fn config(&self) -> &BridgeConfig {
        &self.config
    }

    /// The RS's tool signatures (A2T).
    pub async fn tools(&self) -> Result<Vec<Value>, BridgeError> {
        Ok(agent::list_tools(&self.config.rs, &self.config.client_id, &self.config.secret).await?)
    }

    async fn invoke(
        &self,
        tool: &str,
        args: &Map<String, Value>,
    ) -> Result<InvokeOutcome, BridgeError> {
        Ok(agent::invoke(
            &self.config.rs,
            &self.config.client_id,
            &self.config.secret,
            tool,
            args,
        )
        .await?)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sweep(map: &mut HashMap<String, Pending>, now: Instant) {
        map.retain(|_, p| match &p.outcome {
            Some((_, at)) => now.duration_since(*at) < COLLECT_TTL,
            None => now.duration_since(p.created) < PENDING_TTL,
        });
    }

    /// A call from a 2025-11-25 session. A retry of the same tool with the
    /// same arguments from the same session finds its pending confirmation:
    /// the final outcome once there is one (then it is forgotten), else the
    /// same elicitation again. Another session never finds it.
    pub async fn call_in_session(
        &self,
        session: &str,
        tool: &str,
        args: &Map<String, Value>,
    ) -> Result<Outcome, BridgeError> {
        let digest = args_digest(tool, args);
        let found = {
            let map = self.lock();
            map.iter()
                .find(|(_, p)| p.session == session && p.digest == digest && p.tool == tool)
                .map(|(id, p)| (id.clone(), p.result_uri.clone(), p.outcome.clone()))
        };
        if let Some((id, result_uri, outcome)) = found {
            let outcome = match outcome {
                Some((f, _)) => Some(f),
                None => agent::check_result(&result_uri).await?.map(Final::from),
            };
            let mut map = self.lock();
            return Ok(match outcome {
                Some(f) => {
                    map.remove(&id);
                    Outcome::Final(f)
                }
                None => match map.get(&id) {
                    Some(p) => Outcome::Pending {
                        elicitation: p.elicitation.clone(),
                        handle: id,
                        new: false,
                    },
                    None => return Err(BridgeError::Busy),
                },
            });
        }
        {
            let mut map = self.lock();
            Self::sweep(&mut map, Instant::now());
            let mine = map.values().filter(|p| p.session == session).count();
            if map.len() >= MAX_PENDING || mine >= MAX_PENDING_PER_SESSION {
                return Err(BridgeError::Busy);
            }
        }
        let pack = match self.invoke(tool, args).await? {
            InvokeOutcome::Done(output) => return Ok(Outcome::Done(output)),
            InvokeOutcome::NeedsConfirmation(pack) => pack,
        };
        let elicitation = Elicitation {
            url: start_link(&pack.confirmation_uri, &pack.resource_uri),
            message: message_for(tool, &pack.confirmation_uri),
        };
        let id = random_id();
        self.lock().insert(
            id.clone(),
            Pending {
                session: session.to_owned(),
                tool: tool.to_owned(),
                digest,
                result_uri: pack.result_uri,
                elicitation: elicitation.clone(),
                created: Instant::now(),
                outcome: None,
            },
        );
        Ok(Outcome::Pending {
            elicitation,
            handle: id,
            new: true,
        })
    }

    /// Waits (polling the result URI, as `Retry-After` says) until the
    /// pending confirmation `id` has a final outcome, records it for the
    /// retry to collect, and returns it; `None` when it is gone or failed.
    ///
    /// It stops as soon as the entry is gone (collected by a retry, or
    /// swept), so a collected call costs the RS nothing more; between reads
    /// it waits [`POLL_INTERVAL`], so 10,000 pending calls cost the RS at
    /// most 5,000 reads a second, and typically far fewer.
    pub async fn wait_final(&self, id: &str) -> Option<Final> {
        let deadline = Instant::now() + PENDING_TTL;
        loop {
            let result_uri = self.lock().get(id).map(|p| p.result_uri.clone())?;
            // A transient failure of the RS is retried; the call stays pending.
            if let Ok(Some(status)) = agent::check_result(&result_uri).await {
                let f = Final::from(status);
                let mut map = self.lock();
                let p = map.get_mut(id)?;
                p.outcome = Some((f.clone(), Instant::now()));
                return Some(f);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// How many 2025-11-25 confirmations are pending or uncollected.
    pub fn pending_count(&self) -> usize {
        self.lock().len()
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
            if let Some(status) = agent::check_result(&pending.result_uri).await? {
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
    fn debug_hides_the_secret() {
        let c = BridgeConfig {
            rs: "http://127.0.0.1:1".into(),
            client_id: "a".into(),
            secret: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
