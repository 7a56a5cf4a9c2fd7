//! A bridged call (CHEQ draft §6; PROTOCOL.md "A2A binding"): a message
//! naming a tool becomes one A2T call through the bridge's one [`Agent`];
//! its outcome moves the task ([`tasks`](crate::tasks) keeps the state
//! machine). A call that needs confirmation leaves the task in
//! `TASK_STATE_AUTH_REQUIRED` with the CS's start link, and a task of the
//! bridge reads its result URI on the shared schedule
//! ([`next_read_in`](cheq_resource::agent::next_read_in), never sooner
//! than `Retry-After`) until the RS's final state, the client's cancel, or
//! [`PENDING_TTL`]. The result URI lives in that reading task and in the
//! store's record of the waiting task (a bridge started again reads it
//! there and carries on: [`A2aBridge::resume`]): never in the table, a
//! message, an error or a log line.

use crate::tasks::{
    is_terminal, state_of, InsertError, Owner, Resume, Tasks, MAX_TASKS, PENDING_TTL,
};
use crate::{A2aError, EXTENSION_URI};
use a2a_types::{part, Artifact, Message, Part, Role, Task, TaskState, TaskStatus};
use cheq_resource::agent::{
    error_backoff, next_read_in, start_link, Agent, AgentError, InvokeOutcome, ResultRead,
    ResultStatus, POLL_INTERVAL,
};
use cheq_store::a2a::TaskStore;
use cheq_store::StoreError;
use cheq_support::secret::Secret;
use cheq_support::time::{Clock, SystemClock};
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

/// Why a bridge did not start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Its HTTP client for the RS could not be made.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// Its tasks could not be read from the store.
    #[error("the A2A tasks could not be read from the store: {0}")]
    Store(#[from] StoreError),
}

/// What a bridge started on its store carried on with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resumed {
    /// Tasks waiting for their user, whose result is read again.
    pub following: usize,
    /// Tasks whose RS call was under way when the bridge stopped, now
    /// `FAILED` (whether the call was made is unknown).
    pub interrupted: usize,
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
    /// What the store held that is still under way, until [`A2aBridge::resume`].
    resume: std::sync::Mutex<Vec<Resume>>,
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
    /// A bridge to the RS of `config`, as its agent (one HTTP client and one
    /// token for every call), keeping its tasks in `store`: those it holds
    /// are read now; [`A2aBridge::resume`] carries on with those under way.
    pub fn new(config: A2aConfig, store: Arc<dyn TaskStore>) -> Result<A2aBridge, OpenError> {
        Self::with_clock(config, store, Arc::new(SystemClock), MAX_TASKS)
    }

    /// [`A2aBridge::new`] with the clock that dates its tasks, keeping at
    /// most `max_tasks`.
    pub fn with_clock(
        config: A2aConfig,
        store: Arc<dyn TaskStore>,
        clock: Arc<dyn Clock>,
        max_tasks: usize,
    ) -> Result<A2aBridge, OpenError> {
        let agent = Agent::new(&config.rs, &config.client_id, config.secret.expose())?;
        let (tasks, resume) = Tasks::load(store, clock, max_tasks)?;
        Ok(A2aBridge {
            config,
            shared: Arc::new(Shared {
                agent,
                tasks,
                reads: Semaphore::new(READ_CONCURRENCY),
            }),
            tools: tokio::sync::Mutex::new(None),
            resume: std::sync::Mutex::new(resume),
        })
    }

    /// Carries on with the tasks the store held under way (once; later
    /// calls find nothing): a task waiting for its user has its result read
    /// again, on a task of its own, until the RS's final state; one whose
    /// RS call was under way when the bridge stopped fails, saying that
    /// whether the call was made is unknown.
    pub async fn resume(&self) -> Resumed {
        let pending = std::mem::take(&mut *self.resume.lock().unwrap_or_else(|p| p.into_inner()));
        let mut resumed = Resumed::default();
        for r in pending {
            match r {
                Resume::Follow {
                    id,
                    tool,
                    result_uri,
                    created,
                } => {
                    tracing::info!(task = %id, tool = %tool, "A2A task waits for confirmation (resumed)");
                    tokio::spawn(follow(self.shared.clone(), id, tool, result_uri, created));
                    resumed.following += 1;
                }
                Resume::Interrupted { id, tool } => {
                    let text = format!(
                        "The bridge stopped while it called '{tool}' at the resource server; \
                         whether the call was made is unknown. If it needed its user's \
                         confirmation, no link was given and it expires unconfirmed; a call \
                         that needed none may have run."
                    );
                    let moved = self
                        .shared
                        .tasks
                        .update(&id, None, |t| {
                            set_status(t, TaskState::Failed, vec![text_part(text)]);
                        })
                        .await;
                    tracing::info!(task = %id, tool = %tool, moved = moved.is_ok(), "A2A task interrupted by a restart");
                    resumed.interrupted += 1;
                }
            }
        }
        resumed
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
    pub(crate) async fn start(
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
            .insert(owner, &tool, task)
            .await
            .map_err(|e| match e {
                InsertError::Full => A2aError::Busy,
                InsertError::Taken | InsertError::Store(_) => {
                    tracing::warn!(task = %id, error = %e, "an A2A task could not be kept");
                    A2aError::Unavailable
                }
            })?;
        tracing::info!(task = %id, tool = %tool, "A2A task started");
        tokio::spawn(run(self.shared.clone(), id, tool, args));
        Ok(rx)
    }

    /// Cancels task `id` of `owner` when it is not terminal: `CANCELED`, and
    /// its reading task stops.
    pub(crate) async fn cancel(&self, owner: &Owner, id: &str) -> Result<Task, A2aError> {
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
            .update(id, None, |t| {
                set_status(t, TaskState::Canceled, vec![text_part(text)]);
            })
            .await
            .map_err(|_| A2aError::TaskNotCancelable)
    }
}

/// The RS call of task `id`, and its outcome.
async fn run(shared: Arc<Shared>, id: String, tool: String, args: Map<String, Value>) {
    let outcome = shared.agent.invoke(&tool, &args).await;
    let moved = match outcome {
        Ok(InvokeOutcome::Done(output)) => {
            shared
                .tasks
                .update(&id, None, |t| {
                    t.artifacts.push(result_artifact(&tool, &output));
                    set_status(
                        t,
                        TaskState::Completed,
                        vec![text_part(format!(
                            "The resource server ran '{tool}' (no confirmation needed)."
                        ))],
                    );
                })
                .await
        }
        Ok(InvokeOutcome::NeedsConfirmation(pack)) => {
            let link = start_link(&pack.confirmation_uri, &pack.resource_uri);
            let text = format!(
                "'{tool}' needs its user's confirmation outside the agents. Ask the user to open \
                 {link} , sign in at {} and accept or reject it there. This task completes \
                 when the resource server reports the decision; nothing sent on the task \
                 decides it.",
                origin_of(&pack.confirmation_uri)
            );
            let result_uri = zeroize::Zeroizing::new(pack.result_uri);
            let moved = shared
                .tasks
                .update(&id, Some(&result_uri), |t| {
                    set_status(
                        t,
                        TaskState::AuthRequired,
                        vec![
                            text_part(text),
                            extension_part(json!({"confirmation_url": link})),
                        ],
                    );
                })
                .await;
            if moved.is_ok() {
                tracing::info!(task = %id, tool = %tool, "A2A task waits for confirmation");
                let created = shared
                    .tasks
                    .created(&id)
                    .unwrap_or_else(|| shared.tasks.now());
                follow(shared, id, tool, result_uri, created).await;
                return;
            }
            moved
        }
        Err(e) => {
            tracing::info!(task = %id, tool = %tool, error = %e, "the RS call failed");
            shared
                .tasks
                .update(&id, None, |t| {
                    set_status(
                        t,
                        TaskState::Failed,
                        vec![text_part(format!("The resource server: {e}"))],
                    );
                })
                .await
        }
    };
    if moved.is_err() {
        tracing::debug!(task = %id, "the task moved on before its RS call ended");
    }
}

/// Reads the result URI of task `id` (made at `created`, unix seconds)
/// until a final state moves the task, the task ends otherwise (canceled,
/// forgotten), or [`PENDING_TTL`].
async fn follow(
    shared: Arc<Shared>,
    id: String,
    tool: String,
    result_uri: zeroize::Zeroizing<String>,
    created: i64,
) {
    let Some(mut rx) = shared.tasks.subscribe_any(&id) else {
        return;
    };
    if is_terminal(state_of(&rx.borrow_and_update())) {
        return;
    }
    let mut due = Instant::now() + POLL_INTERVAL;
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
        // The task's age by the wall clock: a bridge started again goes on
        // from where the task stands.
        let age = Duration::from_secs(
            u64::try_from(shared.tasks.now().saturating_sub(created)).unwrap_or(0),
        );
        if age >= PENDING_TTL {
            let _ = shared
                .tasks
                .update(&id, None, |t| {
                    set_status(
                        t,
                        TaskState::Failed,
                        vec![text_part(format!(
                            "No decision on '{tool}' reached the bridge within {} hours.",
                            PENDING_TTL.as_secs() / 3600
                        ))],
                    );
                })
                .await;
            return;
        }
        let read = {
            let _permit = shared.reads.acquire().await;
            shared.agent.read_result(&result_uri).await
        };
        match read {
            Ok(ResultRead::Final(status)) => {
                let (state, text, word) = final_move(&tool, &status);
                let moved = shared
                    .tasks
                    .update(&id, None, |t| {
                        if let ResultStatus::Accepted(result) = &status {
                            t.artifacts.push(result_artifact(&tool, result));
                        }
                        set_status(
                            t,
                            state,
                            vec![text_part(text), extension_part(json!({"status": word}))],
                        );
                    })
                    .await;
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

    #[tokio::test]
    async fn a_restart_fails_the_calls_under_way_and_follows_the_waiting() {
        use cheq_store::a2a::{MemoryTasks, TaskRecord};
        let store = Arc::new(MemoryTasks::default());
        let owner = Owner::from_credential(Some(b"token"));
        let stored = |id: &str, state: TaskState, uri: Option<&str>| {
            let mut task = Task {
                id: id.into(),
                ..Default::default()
            };
            set_status(&mut task, state, vec![text_part("as it was".into())]);
            // What the bridge wrote: the owner's digest, as its own records have it.
            let owner = cheq_core::sign::b64::sha256(b"token");
            store
                .put(&TaskRecord {
                    id: id.into(),
                    owner,
                    tool: "book_flight".into(),
                    created_at: 1,
                    finished_at: None,
                    result_uri: uri.map(str::to_owned),
                    task: serde_json::to_string(&task).unwrap(),
                })
                .unwrap();
        };
        stored("working", TaskState::Working, None);
        stored(
            "waiting",
            TaskState::AuthRequired,
            Some("http://127.0.0.1:1/cheq/results/r"),
        );
        let bridge = A2aBridge::new(
            A2aConfig {
                rs: "http://127.0.0.1:1".into(),
                client_id: "agent".into(),
                secret: "secret".into(),
                endpoint: "http://127.0.0.1:9/".into(),
                bearer: true,
            },
            store.clone(),
        )
        .unwrap();
        assert_eq!(bridge.task_count(), 2);
        let resumed = bridge.resume().await;
        assert_eq!(
            resumed,
            Resumed {
                following: 1,
                interrupted: 1
            }
        );
        let failed = bridge.shared.tasks.get(&owner, "working").unwrap();
        assert_eq!(state_of(&failed), TaskState::Failed as i32);
        let said = serde_json::to_string(&failed).unwrap();
        assert!(
            said.contains("whether the call was made is unknown"),
            "{said}"
        );
        assert!(store.get("working").unwrap().unwrap().finished_at.is_some());
        // The waiting task waits on (its RS cannot be reached: it is read
        // again later), its result URI still kept for the next start.
        let waiting = bridge.shared.tasks.get(&owner, "waiting").unwrap();
        assert_eq!(state_of(&waiting), TaskState::AuthRequired as i32);
        assert!(store.get("waiting").unwrap().unwrap().result_uri.is_some());
        // Once only.
        assert_eq!(bridge.resume().await, Resumed::default());
    }

    #[test]
    fn plain_json_survives_protobuf_values() {
        let v = json!({"a": [1, 2.5, -3, true, null, "s"], "b": {"c": 9007199254740991i64}});
        assert_eq!(plain(&proto_value(&v)), v);
    }
}
