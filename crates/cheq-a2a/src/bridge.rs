//! A bridged call (CHEQ draft §6; PROTOCOL.md "A2A binding"): a message
//! naming a tool becomes one A2T call through the bridge's one [`Agent`];
//! its outcome moves the task ([`tasks`](crate::tasks) keeps the state
//! machine). A call that needs confirmation leaves the task in
//! `TASK_STATE_AUTH_REQUIRED` with the CS's start link, and a task of the
//! bridge reads its result URI on the shared schedule
//! ([`next_read_in`](cheq_resource::agent::next_read_in), never sooner
//! than `Retry-After`) until the RS's final state, the client's cancel, or
//! [`PENDING_TTL`]. The result URI lives only in that reading task: never
//! in the table, a message, an error or a log line.

use crate::tasks::{is_terminal, state_of, Owner, Tasks, PENDING_TTL};
use crate::{A2aError, EXTENSION_URI};
use a2a_types::{part, Artifact, Message, Part, Role, Task, TaskState, TaskStatus};
use cheq_resource::agent::{
    error_backoff, next_read_in, start_link, Agent, AgentError, InvokeOutcome, ResultRead,
    ResultStatus, POLL_INTERVAL,
};
use cheq_support::secret::Secret;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{watch, Semaphore};

/// How many result reads are under way at once, over all tasks.
pub const READ_CONCURRENCY: usize = 16;
/// How long the tool list behind the Agent Card is reused.
pub const CARD_TTL: Duration = Duration::from_secs(60);

/// Where the bridge reaches the RS, as whom, and where it is reached.
#[derive(Debug, Clone)]
pub struct A2aConfig {
    /// The RS's base URL.
    pub rs: String,
    /// The agent's OAuth client id at the RS.
    pub client_id: String,
    /// The agent's client secret at the RS.
    pub secret: Secret,
    /// The URL of the bridge's JSON-RPC endpoint (named in the card).
    pub endpoint: String,
    /// Whether clients must present the bridge's bearer token.
    pub bearer: bool,
}

/// What the bridge and its reading tasks share.
pub(crate) struct Shared {
    pub(crate) agent: Agent,
    pub(crate) tasks: Tasks,
    reads: Semaphore,
}

/// The bridge: the RS it fronts, its tasks, the card's cached tool list.
pub struct A2aBridge {
    pub(crate) config: A2aConfig,
    pub(crate) shared: Arc<Shared>,
    tools: tokio::sync::Mutex<Option<(Instant, Vec<Value>)>>,
}

impl std::fmt::Debug for A2aBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("A2aBridge")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A random id of 128 bits (tasks, contexts, messages, artifacts).
pub fn new_id() -> String {
    let bytes: [u8; 16] = rand::random();
    cheq_core::sign::b64::encode(bytes)
}

fn now() -> pbjson_types::Timestamp {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    pbjson_types::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// A protobuf `Value` as plain JSON: a number without a fraction (within
/// the integers a double holds exactly) becomes an integer again.
pub fn plain(v: &pbjson_types::Value) -> Value {
    use pbjson_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::NumberValue(n)) => {
            if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
                json!(*n as i64)
            } else {
                json!(n)
            }
        }
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(plain).collect()),
        Some(Kind::StructValue(s)) => {
            let mut keys: Vec<&String> = s.fields.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), plain(&s.fields[k])))
                    .collect(),
            )
        }
    }
}

/// Plain JSON as a protobuf `Value` (any JSON has one).
pub fn proto_value(v: &Value) -> pbjson_types::Value {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

fn proto_struct(v: Value) -> Option<pbjson_types::Struct> {
    serde_json::from_value(v).ok()
}

fn text_part(text: String) -> Part {
    Part {
        content: Some(part::Content::Text(text)),
        ..Default::default()
    }
}

/// A data part shaped by the CHEQ extension: `data`, and the same under the
/// extension's URI in its metadata.
fn extension_part(data: Value) -> Part {
    Part {
        metadata: proto_struct(json!({ EXTENSION_URI: data.clone() })),
        content: Some(part::Content::Data(proto_value(&data))),
        media_type: "application/json".into(),
        ..Default::default()
    }
}

fn agent_message(task: &Task, parts: Vec<Part>) -> Message {
    Message {
        message_id: new_id(),
        context_id: task.context_id.clone(),
        task_id: task.id.clone(),
        role: Role::Agent as i32,
        parts,
        extensions: vec![EXTENSION_URI.into()],
        ..Default::default()
    }
}

/// Sets `task`'s status.
fn set_status(task: &mut Task, state: TaskState, parts: Vec<Part>) {
    let message = agent_message(task, parts);
    task.status = Some(TaskStatus {
        state: state as i32,
        message: Some(message),
        timestamp: Some(now()),
    });
}

fn result_artifact(tool: &str, output: &Value) -> Artifact {
    Artifact {
        artifact_id: new_id(),
        name: format!("{tool} result"),
        description: "the resource server's A2T output".into(),
        parts: vec![Part {
            content: Some(part::Content::Data(proto_value(output))),
            media_type: "application/json".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The origin of a URL, or the URL when it has none.
fn origin_of(u: &str) -> String {
    url::Url::parse(u)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| u.to_owned())
}

/// The move a final result (§7) makes, as (state, what the status says).
pub fn final_move(tool: &str, status: &ResultStatus) -> (TaskState, String, &'static str) {
    match status {
        ResultStatus::Accepted(_) => (
            TaskState::Completed,
            format!(
                "The user accepted '{tool}' at the confirmation server; the resource server ran it."
            ),
            "accepted",
        ),
        ResultStatus::Rejected => (
            TaskState::Rejected,
            format!("The user rejected '{tool}' at the confirmation server. Nothing was done."),
            "rejected",
        ),
        ResultStatus::Expired => (
            TaskState::Failed,
            format!(
                "The confirmation of '{tool}' expired before the user decided. Nothing was done."
            ),
            "expired",
        ),
    }
}

/// The tool call a message makes: its first data part that is an object
/// with a string `tool` (and an object `arguments`, empty when absent).
pub fn tool_call(message: &Message) -> Result<(String, Map<String, Value>), A2aError> {
    let usage = "a message names a tool: a data part {\"tool\": \"<name>\", \"arguments\": {…}}";
    for p in &message.parts {
        let Some(part::Content::Data(data)) = &p.content else {
            continue;
        };
        let Value::Object(mut call) = plain(data) else {
            continue;
        };
        let Some(Value::String(tool)) = call.remove("tool") else {
            continue;
        };
        if tool.is_empty() || tool.len() > 128 || tool.contains(['/', '?', '#', ':']) {
            return Err(A2aError::InvalidParams(format!(
                "{usage}; not a tool name: {}",
                cheq_support::text::snippet(tool.as_bytes(), 40)
            )));
        }
        return match call.remove("arguments") {
            None | Some(Value::Null) => Ok((tool, Map::new())),
            Some(Value::Object(args)) => Ok((tool, args)),
            Some(_) => Err(A2aError::InvalidParams(format!(
                "{usage}; \"arguments\" must be an object"
            ))),
        };
    }
    Err(A2aError::InvalidParams(usage.into()))
}

impl A2aBridge {
    /// A bridge to the RS of `config`, as its agent: one HTTP client and one
    /// token for every call.
    pub fn new(config: A2aConfig) -> Result<A2aBridge, AgentError> {
        let agent = Agent::new(&config.rs, &config.client_id, config.secret.expose())?;
        Ok(A2aBridge {
            config,
            shared: Arc::new(Shared {
                agent,
                tasks: Tasks::default(),
                reads: Semaphore::new(READ_CONCURRENCY),
            }),
            tools: tokio::sync::Mutex::new(None),
        })
    }

    /// How many tasks are kept.
    pub fn task_count(&self) -> usize {
        self.shared.tasks.len()
    }

    /// The Agent Card as JSON: the RS's tools, listed at most every
    /// [`CARD_TTL`] (the last list while the RS cannot be reached).
    pub async fn card(&self) -> Result<Value, AgentError> {
        let mut cached = self.tools.lock().await;
        let fresh = cached
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < CARD_TTL);
        if !fresh {
            match self.shared.agent.list_tools().await {
                Ok(tools) => *cached = Some((Instant::now(), tools)),
                Err(e) if cached.is_none() => return Err(e),
                Err(e) => tracing::warn!(error = %e, "the RS's tool list could not be renewed"),
            }
        }
        let tools = cached.as_ref().map(|(_, t)| t.as_slice()).unwrap_or(&[]);
        let config = crate::card::CardConfig {
            endpoint: self.config.endpoint.clone(),
            rs: self.config.rs.clone(),
            bearer: self.config.bearer,
        };
        Ok(crate::card::card_json(&config, tools))
    }

    /// Starts the task for `message` (a new message naming a tool) for
    /// `owner`: in `WORKING`, its RS call under way on a task of its own,
    /// so that a client that goes away leaves no task stuck.
    pub(crate) fn start(
        &self,
        owner: &Owner,
        mut message: Message,
    ) -> Result<watch::Receiver<Task>, A2aError> {
        let (tool, args) = tool_call(&message)?;
        let id = new_id();
        let context_id = if message.context_id.is_empty() {
            new_id()
        } else {
            message.context_id.clone()
        };
        message.task_id = id.clone();
        message.context_id = context_id.clone();
        let mut task = Task {
            id: id.clone(),
            context_id,
            history: vec![message],
            ..Default::default()
        };
        set_status(
            &mut task,
            TaskState::Working,
            vec![text_part(format!(
                "Calling '{tool}' at the resource server."
            ))],
        );
        let rx = self
            .shared
            .tasks
            .insert(owner, task)
            .ok_or(A2aError::Busy)?;
        tracing::info!(task = %id, tool = %tool, "A2A task started");
        tokio::spawn(run(self.shared.clone(), id, tool, args));
        Ok(rx)
    }

    /// Cancels task `id` of `owner` when it is not terminal: `CANCELED`, and
    /// its reading task stops.
    pub(crate) fn cancel(&self, owner: &Owner, id: &str) -> Result<Task, A2aError> {
        let task = self
            .shared
            .tasks
            .get(owner, id)
            .ok_or(A2aError::TaskNotFound)?;
        if is_terminal(state_of(&task)) {
            return Err(A2aError::TaskNotCancelable);
        }
        let text = "Canceled by the client: the bridge no longer follows this confirmation. \
                    The confirmation link stays valid until the CHEQ expires; if the user \
                    accepts there, the resource server still runs the operation."
            .to_owned();
        self.shared
            .tasks
            .update(id, |t| {
                set_status(t, TaskState::Canceled, vec![text_part(text)]);
            })
            .map_err(|_| A2aError::TaskNotCancelable)
    }
}

/// The RS call of task `id`, and its outcome.
async fn run(shared: Arc<Shared>, id: String, tool: String, args: Map<String, Value>) {
    let outcome = shared.agent.invoke(&tool, &args).await;
    let moved = match outcome {
        Ok(InvokeOutcome::Done(output)) => shared.tasks.update(&id, |t| {
            t.artifacts.push(result_artifact(&tool, &output));
            set_status(
                t,
                TaskState::Completed,
                vec![text_part(format!(
                    "The resource server ran '{tool}' (no confirmation needed)."
                ))],
            );
        }),
        Ok(InvokeOutcome::NeedsConfirmation(pack)) => {
            let link = start_link(&pack.confirmation_uri, &pack.resource_uri);
            let text = format!(
                "'{tool}' needs its user's confirmation outside the agents. Ask the user to open \
                 {link} , sign in at {} and accept or reject it there. This task completes \
                 when the resource server reports the decision; nothing sent on the task \
                 decides it.",
                origin_of(&pack.confirmation_uri)
            );
            let moved = shared.tasks.update(&id, |t| {
                set_status(
                    t,
                    TaskState::AuthRequired,
                    vec![
                        text_part(text),
                        extension_part(json!({"confirmation_url": link})),
                    ],
                );
            });
            if moved.is_ok() {
                tracing::info!(task = %id, tool = %tool, "A2A task waits for confirmation");
                follow(shared, id, tool, zeroize::Zeroizing::new(pack.result_uri)).await;
                return;
            }
            moved
        }
        Err(e) => {
            tracing::info!(task = %id, tool = %tool, error = %e, "the RS call failed");
            shared.tasks.update(&id, |t| {
                set_status(
                    t,
                    TaskState::Failed,
                    vec![text_part(format!("The resource server: {e}"))],
                );
            })
        }
    };
    if moved.is_err() {
        tracing::debug!(task = %id, "the task moved on before its RS call ended");
    }
}

/// Reads the result URI of task `id` until a final state moves the task,
/// the task ends otherwise (canceled, forgotten), or [`PENDING_TTL`].
async fn follow(
    shared: Arc<Shared>,
    id: String,
    tool: String,
    result_uri: zeroize::Zeroizing<String>,
) {
    let Some(mut rx) = shared.tasks.subscribe_any(&id) else {
        return;
    };
    if is_terminal(state_of(&rx.borrow_and_update())) {
        return;
    }
    let started = Instant::now();
    let mut due = started + POLL_INTERVAL;
    let mut failures = 0u32;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(due.into()) => {}
            changed = rx.changed() => {
                if changed.is_err() || is_terminal(state_of(&rx.borrow_and_update())) {
                    tracing::info!(task = %id, "no longer following the confirmation");
                    return;
                }
                continue;
            }
        }
        let age = started.elapsed();
        if age >= PENDING_TTL {
            let _ = shared.tasks.update(&id, |t| {
                set_status(
                    t,
                    TaskState::Failed,
                    vec![text_part(format!(
                        "No decision on '{tool}' reached the bridge within {} hours.",
                        PENDING_TTL.as_secs() / 3600
                    ))],
                );
            });
            return;
        }
        let read = {
            let _permit = shared.reads.acquire().await;
            shared.agent.read_result(&result_uri).await
        };
        match read {
            Ok(ResultRead::Final(status)) => {
                let (state, text, word) = final_move(&tool, &status);
                let moved = shared.tasks.update(&id, |t| {
                    if let ResultStatus::Accepted(result) = &status {
                        t.artifacts.push(result_artifact(&tool, result));
                    }
                    set_status(
                        t,
                        state,
                        vec![text_part(text), extension_part(json!({"status": word}))],
                    );
                });
                tracing::info!(task = %id, outcome = word, moved = moved.is_ok(), "A2A task final");
                return;
            }
            Ok(ResultRead::Pending { retry_after }) => {
                failures = 0;
                due = Instant::now() + next_read_in(age, retry_after);
            }
            Err(e) => {
                // An agent error never names the result URI.
                failures = failures.saturating_add(1);
                due = Instant::now() + error_backoff(failures);
                tracing::debug!(task = %id, error = %e, "the result could not be read");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_message(data: Value) -> Message {
        Message {
            message_id: "m".into(),
            role: Role::User as i32,
            parts: vec![
                text_part("please".into()),
                Part {
                    content: Some(part::Content::Data(proto_value(&data))),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn a_tool_call_is_read_from_the_first_data_part_naming_a_tool() {
        let m = data_message(
            json!({"tool": "book_flight", "arguments": {"price_usd": 1200, "x": "y"}}),
        );
        let (tool, args) = tool_call(&m).unwrap();
        assert_eq!(tool, "book_flight");
        // Integers stay integers through protobuf's doubles.
        assert_eq!(Value::Object(args), json!({"price_usd": 1200, "x": "y"}));
        let m = data_message(json!({"tool": "t"}));
        assert!(tool_call(&m).unwrap().1.is_empty());
    }

    #[test]
    fn a_message_without_a_tool_or_with_a_bad_one_is_invalid_params() {
        for data in [
            json!({"decision": "accepted"}),
            json!({"tool": 3}),
            json!({"tool": "../admin"}),
            json!({"tool": "t", "arguments": [1]}),
            json!("approved"),
        ] {
            let err = tool_call(&data_message(data.clone())).unwrap_err();
            assert!(matches!(err, A2aError::InvalidParams(_)), "{data}: {err:?}");
        }
    }

    #[test]
    fn final_states_map_as_the_binding_says() {
        let s = |r| final_move("t", &r).0;
        assert_eq!(s(ResultStatus::Accepted(json!({}))), TaskState::Completed);
        assert_eq!(s(ResultStatus::Rejected), TaskState::Rejected);
        assert_eq!(s(ResultStatus::Expired), TaskState::Failed);
    }

    #[test]
    fn plain_json_survives_protobuf_values() {
        let v = json!({"a": [1, 2.5, -3, true, null, "s"], "b": {"c": 9007199254740991i64}});
        assert_eq!(plain(&proto_value(&v)), v);
    }
}
