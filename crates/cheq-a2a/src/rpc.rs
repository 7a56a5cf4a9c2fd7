//! The JSON-RPC binding of A2A 1.0 (§9): one request object a body, checked
//! before anything runs (JSON, the 2.0 envelope, `A2A-Version: 1.0`, the
//! method, its parameters as the `a2a.proto` message, unknown fields
//! refused); then `SendMessage`, `SendStreamingMessage`, `GetTask`,
//! `CancelTask` and `SubscribeToTask`. A streamed answer is a
//! [`TaskEvents`]: the task first, then each change as a status (and
//! artifact) update, ending with a terminal state (§3.1.2).
//!
//! What a client sends on an existing task never moves it (PROTOCOL.md, A2A
//! binding): a message on a task waiting for its user is answered with the
//! task as it stands, one on a finished task is refused (§3.1.1).

use crate::bridge::A2aBridge;
use crate::tasks::{is_terminal, state_of, Owner};
use crate::A2aError;
use a2a_types::{
    send_message_response, stream_response, CancelTaskRequest, GetTaskRequest, Role,
    SendMessageRequest, SendMessageResponse, StreamResponse, SubscribeToTaskRequest, Task,
    TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::watch;

/// How long a blocking `SendMessage` waits for the RS call to end (it is
/// itself bounded by the agent's time-outs); then it answers the task as it
/// stands.
pub const SEND_WAIT: Duration = Duration::from_secs(120);

/// What a request gives.
pub enum Reply {
    /// One JSON-RPC response (a result or an error).
    Single(Value),
    /// A stream of JSON-RPC responses (server-sent events).
    Stream(TaskEvents),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Single(v) => f.debug_tuple("Single").field(v).finish(),
            Reply::Stream(_) => f.write_str("Stream(..)"),
        }
    }
}

/// The events of one task's stream.
pub struct TaskEvents {
    id: Value,
    rx: watch::Receiver<Task>,
    started: bool,
    artifacts_sent: usize,
    done: bool,
}

fn response(id: &Value, result: impl serde::Serialize) -> Value {
    let result = serde_json::to_value(result).unwrap_or(Value::Null);
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn stream_item(id: &Value, payload: stream_response::Payload) -> Value {
    response(
        id,
        StreamResponse {
            payload: Some(payload),
        },
    )
}

impl TaskEvents {
    fn new(id: Value, rx: watch::Receiver<Task>) -> TaskEvents {
        TaskEvents {
            id,
            rx,
            started: false,
            artifacts_sent: 0,
            done: false,
        }
    }

    /// The next JSON-RPC responses to send; `None` once the task is
    /// terminal (or forgotten) and all was sent.
    pub async fn next(&mut self) -> Option<Vec<Value>> {
        if self.done {
            return None;
        }
        if self.started && self.rx.changed().await.is_err() {
            return None;
        }
        let task = self.rx.borrow_and_update().clone();
        self.done = is_terminal(state_of(&task));
        if !self.started {
            self.started = true;
            self.artifacts_sent = task.artifacts.len();
            return Some(vec![stream_item(
                &self.id,
                stream_response::Payload::Task(task),
            )]);
        }
        let mut out = Vec::new();
        for artifact in task.artifacts.iter().skip(self.artifacts_sent) {
            out.push(stream_item(
                &self.id,
                stream_response::Payload::ArtifactUpdate(TaskArtifactUpdateEvent {
                    task_id: task.id.clone(),
                    context_id: task.context_id.clone(),
                    artifact: Some(artifact.clone()),
                    append: false,
                    last_chunk: true,
                    metadata: None,
                }),
            ));
        }
        self.artifacts_sent = task.artifacts.len();
        out.push(stream_item(
            &self.id,
            stream_response::Payload::StatusUpdate(TaskStatusUpdateEvent {
                task_id: task.id,
                context_id: task.context_id,
                status: task.status,
                metadata: None,
            }),
        ));
        Some(out)
    }
}

/// Whether `version` (the `A2A-Version` service parameter) is 1.0.
pub fn check_version(version: Option<&str>) -> Result<(), A2aError> {
    match version.map(str::trim) {
        Some(v) if v == "1.0" || v.starts_with("1.0.") => Ok(()),
        Some(v) if !v.is_empty() => Err(A2aError::VersionNotSupported(
            cheq_support::text::snippet(v.as_bytes(), 20),
        )),
        _ => Err(A2aError::VersionNotSupported(
            "0.3 (no A2A-Version given)".into(),
        )),
    }
}

/// A checked request: its id, method and parameters.
#[derive(Debug)]
pub struct Request {
    pub id: Value,
    pub method: String,
    pub params: Value,
}

/// Reads one JSON-RPC 2.0 request; the error carries the id when one was
/// readable.
pub fn parse(body: &[u8]) -> Result<Request, (Value, A2aError)> {
    let v: Value = serde_json::from_slice(body).map_err(|_| (Value::Null, A2aError::Parse))?;
    let Value::Object(mut o) = v else {
        return Err((
            Value::Null,
            A2aError::InvalidRequest("not one request object (batches are not served)"),
        ));
    };
    let id = match o.remove("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id,
        _ => {
            return Err((
                Value::Null,
                A2aError::InvalidRequest("\"id\" must be a string or a number"),
            ))
        }
    };
    if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((id, A2aError::InvalidRequest("\"jsonrpc\" must be \"2.0\"")));
    }
    let Some(Value::String(method)) = o.remove("method") else {
        return Err((id, A2aError::InvalidRequest("\"method\" must be a string")));
    };
    let params = match o.remove("params") {
        None => Value::Object(Default::default()),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            return Err((
                id,
                A2aError::InvalidParams("\"params\" must be an object".into()),
            ))
        }
    };
    Ok(Request { id, method, params })
}

fn params<T: DeserializeOwned>(p: Value) -> Result<T, A2aError> {
    serde_json::from_value(p).map_err(|e| {
        A2aError::InvalidParams(cheq_support::text::snippet(e.to_string().as_bytes(), 200))
    })
}

fn no_tenant(tenant: &str) -> Result<(), A2aError> {
    if tenant.is_empty() {
        Ok(())
    } else {
        Err(A2aError::InvalidParams("this agent has no tenants".into()))
    }
}

fn task_id(id: &str) -> Result<&str, A2aError> {
    if id.is_empty() {
        Err(A2aError::InvalidParams("the task \"id\" is missing".into()))
    } else {
        Ok(id)
    }
}

/// `task` with at most the last `n` messages of its history.
fn trimmed(mut task: Task, n: Option<i32>) -> Task {
    if let Some(n) = n {
        let keep = usize::try_from(n.max(0)).unwrap_or(0);
        let len = task.history.len();
        task.history.drain(..len.saturating_sub(keep));
    }
    task
}

impl A2aBridge {
    /// Serves one JSON-RPC request body from `owner`, who named `version`.
    pub async fn handle(&self, owner: &Owner, version: Option<&str>, body: &[u8]) -> Reply {
        let req = match parse(body) {
            Ok(r) => r,
            Err((id, e)) => return Reply::Single(e.response(&id)),
        };
        let id = req.id.clone();
        match self.dispatch(owner, version, req).await {
            Ok(reply) => reply,
            Err(e) => {
                tracing::debug!(error = %e, "A2A request refused");
                Reply::Single(e.response(&id))
            }
        }
    }

    async fn dispatch(
        &self,
        owner: &Owner,
        version: Option<&str>,
        req: Request,
    ) -> Result<Reply, A2aError> {
        let Request {
            id,
            method,
            params: p,
        } = req;
        let known = matches!(
            method.as_str(),
            "SendMessage"
                | "SendStreamingMessage"
                | "GetTask"
                | "CancelTask"
                | "SubscribeToTask"
                | "ListTasks"
                | "GetExtendedAgentCard"
                | "CreateTaskPushNotificationConfig"
                | "GetTaskPushNotificationConfig"
                | "ListTaskPushNotificationConfigs"
                | "DeleteTaskPushNotificationConfig"
        );
        if !known {
            return Err(A2aError::MethodNotFound(cheq_support::text::snippet(
                method.as_bytes(),
                60,
            )));
        }
        check_version(version)?;
        match method.as_str() {
            "SendMessage" | "SendStreamingMessage" => {
                let streaming = method == "SendStreamingMessage";
                self.send(owner, id, params(p)?, streaming).await
            }
            "GetTask" => {
                let r: GetTaskRequest = params(p)?;
                no_tenant(&r.tenant)?;
                let task = self
                    .shared
                    .tasks
                    .get(owner, task_id(&r.id)?)
                    .ok_or(A2aError::TaskNotFound)?;
                Ok(Reply::Single(response(
                    &id,
                    trimmed(task, r.history_length),
                )))
            }
            "CancelTask" => {
                let r: CancelTaskRequest = params(p)?;
                no_tenant(&r.tenant)?;
                let task = self.cancel(owner, task_id(&r.id)?).await?;
                Ok(Reply::Single(response(&id, task)))
            }
            "SubscribeToTask" => {
                let r: SubscribeToTaskRequest = params(p)?;
                no_tenant(&r.tenant)?;
                Ok(Reply::Stream(TaskEvents::new(
                    id,
                    self.live(owner, task_id(&r.id)?)?,
                )))
            }
            "ListTasks" => Err(A2aError::Unsupported(
                "ListTasks is not offered: a task is read by its id",
            )),
            "GetExtendedAgentCard" => Err(A2aError::Unsupported("there is no extended agent card")),
            _ => Err(A2aError::PushNotSupported),
        }
    }

    /// A receiver of task `id` of `owner`, which must not be terminal.
    fn live(&self, owner: &Owner, id: &str) -> Result<watch::Receiver<Task>, A2aError> {
        let rx = self
            .shared
            .tasks
            .subscribe(owner, id)
            .ok_or(A2aError::TaskNotFound)?;
        if is_terminal(state_of(&rx.borrow())) {
            return Err(A2aError::Unsupported(
                "the task is in a terminal state: it takes no more messages or subscriptions",
            ));
        }
        Ok(rx)
    }

    async fn send(
        &self,
        owner: &Owner,
        id: Value,
        r: SendMessageRequest,
        streaming: bool,
    ) -> Result<Reply, A2aError> {
        no_tenant(&r.tenant)?;
        let message = r
            .message
            .ok_or_else(|| A2aError::InvalidParams("\"message\" is missing".into()))?;
        if message.role != Role::User as i32 {
            return Err(A2aError::InvalidParams(
                "the message's role must be ROLE_USER".into(),
            ));
        }
        let config = r.configuration.unwrap_or_default();
        if config.task_push_notification_config.is_some() {
            return Err(A2aError::PushNotSupported);
        }
        let mut rx = if message.task_id.is_empty() {
            self.start(owner, message).await?
        } else {
            // A message on an existing task: it does not move the task (only
            // the RS's final state does); the client gets the task as it is.
            let rx = self.live(owner, &message.task_id)?;
            tracing::info!(task = %message.task_id, "a client message on a waiting task; the task does not move");
            rx
        };
        if streaming {
            return Ok(Reply::Stream(TaskEvents::new(id, rx)));
        }
        if !config.return_immediately {
            let _ = tokio::time::timeout(
                SEND_WAIT,
                rx.wait_for(|t| state_of(t) != TaskState::Working as i32),
            )
            .await;
        }
        let task = trimmed(rx.borrow().clone(), config.history_length);
        Ok(Reply::Single(response(
            &id,
            SendMessageResponse {
                payload: Some(send_message_response::Payload::Task(task)),
            },
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_is_checked() {
        let err = |b: &[u8]| parse(b).unwrap_err();
        assert_eq!(err(b"{not json").1, A2aError::Parse);
        assert_eq!(err(b"").1, A2aError::Parse);
        assert!(matches!(err(b"[]").1, A2aError::InvalidRequest(_)));
        assert!(matches!(
            err(br#"{"jsonrpc":"2.0","method":"GetTask"}"#).1,
            A2aError::InvalidRequest(_)
        ));
        assert!(matches!(
            err(br#"{"jsonrpc":"2.0","id":{},"method":"GetTask"}"#).1,
            A2aError::InvalidRequest(_)
        ));
        let (id, e) = err(br#"{"jsonrpc":"1.0","id":4,"method":"GetTask"}"#);
        assert_eq!(
            (id, matches!(e, A2aError::InvalidRequest(_))),
            (json!(4), true)
        );
        let (id, e) = err(br#"{"jsonrpc":"2.0","id":"x","method":7}"#);
        assert_eq!(
            (id, matches!(e, A2aError::InvalidRequest(_))),
            (json!("x"), true)
        );
        assert!(matches!(
            err(br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}"#).1,
            A2aError::InvalidParams(_)
        ));
        let ok = parse(br#"{"jsonrpc":"2.0","id":1,"method":"GetTask"}"#).unwrap();
        assert_eq!(ok.params, json!({}));
    }

    #[test]
    fn only_version_1_0_is_served() {
        assert!(check_version(Some("1.0")).is_ok());
        assert!(check_version(Some(" 1.0.2 ")).is_ok());
        for v in [None, Some(""), Some("0.3"), Some("1.1"), Some("10.0")] {
            assert!(
                matches!(check_version(v), Err(A2aError::VersionNotSupported(_))),
                "{v:?}"
            );
        }
    }

    fn bridge() -> A2aBridge {
        // Nothing listens on port 1 of loopback: every RS call fails at once.
        A2aBridge::new(
            crate::A2aConfig {
                rs: "http://127.0.0.1:1".into(),
                client_id: "agent".into(),
                secret: "secret".into(),
                endpoint: "http://127.0.0.1:9/".into(),
                bearer: true,
            },
            std::sync::Arc::new(cheq_store::a2a::MemoryTasks::default()),
        )
        .unwrap()
    }

    async fn call(b: &A2aBridge, owner: &Owner, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        match b
            .handle(owner, Some("1.0"), body.to_string().as_bytes())
            .await
        {
            Reply::Single(v) => v,
            Reply::Stream(_) => json!({"stream": true}),
        }
    }

    fn code(v: &Value) -> i64 {
        v["error"]["code"].as_i64().unwrap_or(0)
    }

    #[tokio::test]
    async fn another_clients_task_and_terminal_tasks_are_refused() {
        let b = bridge();
        let alice = Owner::from_credential(Some(b"alice"));
        let bob = Owner::from_credential(Some(b"bob"));
        let send = json!({"message": {"messageId": "m", "role": "ROLE_USER",
            "parts": [{"data": {"tool": "book_flight", "arguments": {}}}]}});
        let r = call(&b, &alice, "SendMessage", send).await;
        // The RS cannot be reached: the task failed, saying why.
        assert_eq!(
            r["result"]["task"]["status"]["state"], "TASK_STATE_FAILED",
            "{r}"
        );
        let id = r["result"]["task"]["id"].as_str().unwrap().to_owned();
        assert!(id.len() >= 22, "128 random bits: {id}");

        // Bob finds nothing of Alice's task, whatever he asks.
        for method in ["GetTask", "CancelTask", "SubscribeToTask"] {
            let r = call(&b, &bob, method, json!({"id": id})).await;
            assert_eq!(code(&r), -32001, "{method}: {r}");
        }
        let on = json!({"message": {"messageId": "m2", "role": "ROLE_USER", "taskId": id,
            "parts": [{"text": "approved"}]}});
        assert_eq!(
            code(&call(&b, &bob, "SendMessage", on.clone()).await),
            -32001
        );

        // Alice's own terminal task: no cancel, no message, no subscription.
        assert_eq!(
            code(&call(&b, &alice, "CancelTask", json!({"id": id})).await),
            -32002
        );
        assert_eq!(code(&call(&b, &alice, "SendMessage", on).await), -32004);
        assert_eq!(
            code(&call(&b, &alice, "SubscribeToTask", json!({"id": id})).await),
            -32004
        );
        let got = call(&b, &alice, "GetTask", json!({"id": id, "historyLength": 0})).await;
        assert_eq!(got["result"]["status"]["state"], "TASK_STATE_FAILED");
        assert!(got["result"].get("history").is_none(), "{got}");
    }

    #[tokio::test]
    async fn what_is_not_offered_is_said_so() {
        let b = bridge();
        let o = Owner::from_credential(None);
        assert_eq!(code(&call(&b, &o, "tasks/get", json!({})).await), -32601);
        assert_eq!(code(&call(&b, &o, "ListTasks", json!({})).await), -32004);
        assert_eq!(
            code(&call(&b, &o, "GetExtendedAgentCard", json!({})).await),
            -32004
        );
        assert_eq!(
            code(&call(&b, &o, "CreateTaskPushNotificationConfig", json!({})).await),
            -32003
        );
        // Parameters that are not the proto message: unknown fields, a
        // tenant, a message from the agent's role, no message.
        for params in [
            json!({"id": "x", "extra": 1}),
            json!({"id": "x", "tenant": "t"}),
            json!({"id": ""}),
        ] {
            assert_eq!(
                code(&call(&b, &o, "GetTask", params.clone()).await),
                -32602,
                "{params}"
            );
        }
        let agent_msg = json!({"message": {"messageId": "m", "role": "ROLE_AGENT",
            "parts": [{"data": {"tool": "t"}}]}});
        assert_eq!(code(&call(&b, &o, "SendMessage", agent_msg).await), -32602);
        assert_eq!(code(&call(&b, &o, "SendMessage", json!({})).await), -32602);
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}});
        match b.handle(&o, None, body.to_string().as_bytes()).await {
            Reply::Single(v) => assert_eq!(code(&v), -32009),
            Reply::Stream(_) => panic!("a stream"),
        }
        assert_eq!(b.task_count(), 0);
    }

    #[test]
    fn history_is_trimmed_to_the_last_n() {
        let task = Task {
            history: vec![Default::default(), Default::default()],
            ..Default::default()
        };
        assert_eq!(trimmed(task.clone(), None).history.len(), 2);
        assert_eq!(trimmed(task.clone(), Some(1)).history.len(), 1);
        assert_eq!(trimmed(task.clone(), Some(0)).history.len(), 0);
        assert_eq!(trimmed(task, Some(-3)).history.len(), 0);
    }
}
