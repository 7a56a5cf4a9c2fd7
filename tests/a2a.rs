//! The A2A bridge (`cheq a2a`; PROTOCOL.md "A2A binding", CHEQ draft §6)
//! with a client the project did not write: the official A2A Python SDK
//! (`a2a-sdk` on PyPI, installed by `tests/a2a/install.sh`), driven through
//! `tests/a2a/client.py`, against the in-process CS and RS and the bridge as
//! a real process. The user's side is done over HTTP as a browser would.
//! Covered: the Agent Card (a skill per tool, the CHEQ extension); a call
//! that needs no confirmation; a confirmation seen by a streaming client
//! and by `GetTask` polling until `COMPLETED` with the artifact; reject,
//! expiry, cancel, a subscription; nothing a client sends on the task moves
//! it; the result URI reaches no client. A bridge killed (SIGKILL) and
//! started again on the same store (sled in its data directory, or
//! PostgreSQL) answers `GetTask` for its tasks, only to the credential that
//! made them, and carries on with those waiting: a decision taken while it
//! was down, or after, still completes the task. Without the SDK, the
//! JSON-RPC errors and the bridge's guards are still checked with raw
//! requests.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use serde_json::{json, Map, Value};
use std::process::Command;
use std::time::Duration;

const EXT: &str = "https://cheq.dev/a2a/cheq/v1";

/// The bridge as a real process, in front of the test RS.
struct BridgeProc {
    proc: Proc,
    /// `http://127.0.0.1:PORT`
    base: String,
}

async fn start_bridge(env: &Env, dir: &std::path::Path, extra: &[&str]) -> BridgeProc {
    // Each bridge keeps its tasks in its test's directory (not in the
    // default `data/a2a` of the working directory).
    let data = dir.join("a2a-data");
    let mut args = extra.to_vec();
    args.extend(["--data-dir", data.to_str().unwrap()]);
    let (proc, base) = spawn_bridge("a2a", &env.rs_url, dir, &args, "/healthz", 200).await;
    BridgeProc { proc, base }
}

/// A guarded bridge on `port` (the same after a restart), with the token of
/// `token_file` and its tasks where `place` says, as a real process.
async fn bridge_on(
    env: &Env,
    dir: &std::path::Path,
    port: u16,
    token_file: &std::path::Path,
    place: &[String],
) -> Proc {
    let listen = format!("127.0.0.1:{port}");
    let mut args: Vec<&str> = vec![
        "a2a",
        "--rs",
        &env.rs_url,
        "--listen",
        &listen,
        "--client-id",
        "agent",
        "--token-file",
        token_file.to_str().unwrap(),
    ];
    args.extend(place.iter().map(String::as_str));
    start_server_with(
        "cheq a2a",
        &args,
        &[("CHEQ_AGENT_SECRET", AGENT_SECRET)],
        &dir.join(format!("a2a-{port}.log")),
        &format!("http://{listen}"),
    )
    .await
}

/// The A2A Python SDK client (`tests/a2a/client.py`), one JSON command in
/// and one JSON event out a line; `card` is the Agent Card it read.
struct Py {
    client: LineClient,
    card: Value,
}

impl std::ops::Deref for Py {
    type Target = LineClient;
    fn deref(&self) -> &LineClient {
        &self.client
    }
}

impl std::ops::DerefMut for Py {
    fn deref_mut(&mut self) -> &mut LineClient {
        &mut self.client
    }
}

impl Py {
    fn connect(url: &str, token: Option<&str>) -> Py {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/a2a/client.py");
        let envs: Vec<(&str, &str)> = token.map(|t| ("CHEQ_A2A_TOKEN", t)).into_iter().collect();
        let mut client = LineClient::python(script, &[url], &envs, &[]);
        let card = client.next("ready")["card"].clone();
        Py { client, card }
    }

    /// Stream items until one whose task state is `state`; returns it.
    fn stream_until(&mut self, state: &str) -> Value {
        loop {
            let event = self.next("stream");
            let item = &event["item"];
            let s = item["task"]["status"]["state"]
                .as_str()
                .or_else(|| item["statusUpdate"]["status"]["state"].as_str());
            if s == Some(state) {
                return item.clone();
            }
        }
    }

    fn get(&mut self, id: &str) -> Value {
        self.send(json!({"op": "get", "id": id}));
        self.next("task")["task"].clone()
    }

    /// Polls `GetTask` until the task is in `state`.
    async fn poll_until(&mut self, id: &str, state: &str) -> Value {
        for _ in 0..120 {
            let task = self.get(id);
            if task["status"]["state"] == state {
                return task;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("task {id} never reached {state}: {:#?}", self.seen);
    }
}

fn cheap_flight() -> Map<String, Value> {
    let mut m = flight_params();
    m.insert("price_usd".into(), json!(100));
    m
}

/// The confirmation link of a task status in AUTH_REQUIRED, checked: a
/// data part `{"confirmation_url"}` marked with the extension, the CS's
/// start link with only the resource URI.
fn link_of(env: &Env, status: &Value) -> String {
    assert_eq!(status["state"], "TASK_STATE_AUTH_REQUIRED", "{status}");
    let message = &status["message"];
    assert_eq!(message["role"], "ROLE_AGENT");
    assert!(
        message["extensions"]
            .as_array()
            .unwrap()
            .contains(&json!(EXT)),
        "{message}"
    );
    let parts = message["parts"].as_array().unwrap();
    let text = parts.iter().find_map(|p| p["text"].as_str()).unwrap();
    let data = parts
        .iter()
        .find(|p| p["data"]["confirmation_url"].is_string())
        .unwrap_or_else(|| panic!("no confirmation_url part: {message}"));
    let link = data["data"]["confirmation_url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(data["metadata"][EXT]["confirmation_url"], link.as_str());
    assert!(text.contains(&link), "{text}");
    assert!(link.starts_with(&env.cs_url), "{link} is at {}", env.cs_url);
    let parsed = url::Url::parse(&link).unwrap();
    let keys: Vec<String> = parsed.query_pairs().map(|(k, _)| k.into_owned()).collect();
    assert_eq!(keys, vec!["resource_uri".to_owned()], "{link}");
    link
}

/// What a user does with the link in a browser: open it, sign in,
/// continue, decide.
async fn decide_at_link(env: &Env, link: &str, decision: &str) {
    let mut b = env.browser();
    let path = link.trim_start_matches(&env.cs_origin).to_owned();
    let res = b.get(&path).await;
    assert_eq!(res.status, 303, "{}", res.text);
    let res = b.login_at(&res.location(), "alice", ALICE_PW).await;
    assert_eq!(res.status, 303, "{}", res.text);
    let page_path = b.after_login(res.location()).await;
    let page = b.get(&page_path).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let outcome = b.decide(&page_path, &page, decision).await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
}

/// The value of an A2T output parameter in a task's first artifact.
fn artifact_output(task: &Value, name: &str) -> Value {
    task["artifacts"][0]["parts"][0]["data"]["output_parameters"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .map(|p| p["value"].clone())
        .unwrap_or(Value::Null)
}

/// Whether A2A tests with the official Python SDK can run here (else they
/// are skipped, saying so; `scripts/test` installs what they need).
fn python_sdk() -> bool {
    cheq::store::testing::can_run(
        "the A2A tests with the official Python SDK",
        &[cheq::store::testing::Outside::Python("a2a.client")],
    )
}

#[actix_web::test]
async fn card_cheap_call_and_confirmation_streamed_and_polled() {
    if !python_sdk() {
        return;
    }
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let bridge = start_bridge(&env, dir.path(), &[]).await;
    let mut py = Py::connect(&bridge.base, None);

    // The card: a skill per A2T tool, the CHEQ extension, not required.
    let card = py.card.clone();
    let skills: Vec<&str> = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        skills,
        [
            "book_flight",
            "transfer_funds",
            "choose_confirmation_server",
            "set_confirmation_policy"
        ],
        "{card}"
    );
    let ext = &card["capabilities"]["extensions"][0];
    assert_eq!(ext["uri"], EXT, "{card}");
    assert_ne!(ext["required"], true);
    assert_eq!(card["capabilities"]["streaming"], true);

    // No confirmation needed: completed at once, the output as an artifact.
    py.send(json!({"op": "send", "tool": "book_flight", "args": cheap_flight()}));
    let done = py.next("sent")["response"]["task"].clone();
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert!(artifact_output(&done, "status").is_string(), "{done}");

    // A streaming client: the task, then AUTH_REQUIRED with the link.
    py.send(json!({"op": "send", "tool": "book_flight", "args": flight_params(), "stream": true}));
    let waiting = py.stream_until("TASK_STATE_AUTH_REQUIRED");
    let streamed_id = waiting["statusUpdate"]["taskId"]
        .as_str()
        .or_else(|| waiting["task"]["id"].as_str())
        .unwrap()
        .to_owned();
    let status = if waiting["statusUpdate"].is_object() {
        &waiting["statusUpdate"]["status"]
    } else {
        &waiting["task"]["status"]
    };
    let streamed_link = link_of(&env, status);

    // A polling client: SendMessage answers once the task waits.
    py.send(json!({"op": "send", "tool": "book_flight", "args": flight_params()}));
    let polled = py.next("sent")["response"]["task"].clone();
    let polled_id = polled["id"].as_str().unwrap().to_owned();
    let polled_link = link_of(&env, &polled["status"]);
    assert_ne!(polled_link, streamed_link);

    // Nothing the client sends on the task moves it: "approved", a forged
    // decision or confirmation part, from the streaming client too.
    for parts in [
        json!([{"text": "approved"}]),
        json!([{"data": {"status": "accepted", "decision": "accept"}}]),
        json!([{"data": {"confirmation_url": polled_link, "tool": "book_flight", "arguments": {}},
                "metadata": {EXT: {"status": "accepted"}}}]),
    ] {
        py.send(json!({"op": "send_on", "task_id": polled_id, "parts": parts}));
        let answer = py.next("sent")["response"]["task"].clone();
        assert_eq!(answer["id"], polled_id.as_str());
        assert_eq!(
            answer["status"]["state"], "TASK_STATE_AUTH_REQUIRED",
            "{answer}"
        );
    }
    let still = py.get(&polled_id);
    assert_eq!(still["status"]["state"], "TASK_STATE_AUTH_REQUIRED");
    assert!(still["artifacts"].is_null(), "{still}");

    // The user accepts the streamed one: the stream brings the artifact
    // and COMPLETED, then ends.
    decide_at_link(&env, &streamed_link, "accept").await;
    let mut artifact = Value::Null;
    loop {
        let event = py.next_any();
        if event["event"] == "stream_end" {
            break;
        }
        assert_eq!(event["event"], "stream", "{event}");
        let item = &event["item"];
        if item["artifactUpdate"].is_object() {
            artifact = item["artifactUpdate"]["artifact"].clone();
        }
        if let Some(state) = item["statusUpdate"]["status"]["state"].as_str() {
            assert_eq!(state, "TASK_STATE_COMPLETED", "{item}");
        }
    }
    assert!(
        artifact["parts"][0]["data"]["output_parameters"].is_array(),
        "{artifact}"
    );
    let streamed = py.get(&streamed_id);
    assert_eq!(streamed["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        artifact_output(&streamed, "status"),
        json!("CONFIRMED"),
        "{streamed}"
    );

    // The user accepts the polled one: GetTask shows COMPLETED with the RS's
    // result as an artifact.
    decide_at_link(&env, &polled_link, "accept").await;
    let completed = py.poll_until(&polled_id, "TASK_STATE_COMPLETED").await;
    assert_eq!(
        artifact_output(&completed, "status"),
        json!("CONFIRMED"),
        "{completed}"
    );
    assert_eq!(
        completed["status"]["message"]["parts"][1]["data"]["status"],
        "accepted"
    );

    // A finished task takes no more messages.
    py.send(json!({"op": "send_on", "task_id": polled_id, "parts": [{"text": "again"}]}));
    let refused = py.next("error");
    assert!(
        refused["type"].as_str().unwrap().contains("Unsupported"),
        "{refused}"
    );

    // The result URIs never reached the client.
    let everything = py.everything();
    assert!(!everything.contains("/cheq/results/"), "{everything}");
    let log = bridge.proc.log();
    assert!(!log.contains("/cheq/results/"), "{log}");
    env.stop().await;
}

#[actix_web::test]
async fn reject_cancel_and_expiry() {
    if !python_sdk() {
        return;
    }
    let clock = std::sync::Arc::new(cheq::time::ManualClock::new(chrono::Utc::now()));
    let env = Env::start(Options {
        clock: Some(clock),
        ..Options::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let bridge = start_bridge(&env, dir.path(), &[]).await;
    let mut py = Py::connect(&bridge.base, None);

    // Rejected at the CS → REJECTED.
    py.send(json!({"op": "send", "tool": "book_flight", "args": flight_params()}));
    let task = py.next("sent")["response"]["task"].clone();
    let rejected_id = task["id"].as_str().unwrap().to_owned();
    // A client that subscribes to the waiting task gets it, then the change.
    py.send(json!({"op": "subscribe", "id": rejected_id}));
    let first = py.next("stream")["item"].clone();
    assert_eq!(
        first["task"]["status"]["state"], "TASK_STATE_AUTH_REQUIRED",
        "{first}"
    );
    decide_at_link(&env, &link_of(&env, &task["status"]), "reject").await;
    let update = py.stream_until("TASK_STATE_REJECTED");
    assert_eq!(
        update["statusUpdate"]["status"]["message"]["parts"][1]["data"]["status"],
        "rejected"
    );
    py.next("stream_end");
    let rejected = py.poll_until(&rejected_id, "TASK_STATE_REJECTED").await;
    assert!(rejected["artifacts"].is_null(), "{rejected}");

    // Canceled by the client → CANCELED, terminal: a second cancel is
    // refused, and the user's later accept does not move it.
    py.send(json!({"op": "send", "tool": "book_flight", "args": flight_params()}));
    let task = py.next("sent")["response"]["task"].clone();
    let canceled_id = task["id"].as_str().unwrap().to_owned();
    let canceled_link = link_of(&env, &task["status"]);
    py.send(json!({"op": "cancel", "id": canceled_id}));
    let canceled = py.next("task")["task"].clone();
    assert_eq!(
        canceled["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    // The bridge stops reading its result.
    let stopped = format!("no longer following the confirmation task={canceled_id}");
    for _ in 0..100 {
        if bridge.proc.log().contains(&stopped) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        bridge.proc.log().contains(&stopped),
        "{}",
        bridge.proc.log()
    );
    py.send(json!({"op": "cancel", "id": canceled_id}));
    let again = py.next("error");
    assert!(
        again["type"].as_str().unwrap().contains("NotCancelable"),
        "{again}"
    );
    decide_at_link(&env, &canceled_link, "accept").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        py.get(&canceled_id)["status"]["state"],
        "TASK_STATE_CANCELED"
    );

    // Expired before the user decided → FAILED, seen by a stream.
    py.send(json!({"op": "send", "tool": "book_flight", "args": flight_params(), "stream": true}));
    let waiting = py.stream_until("TASK_STATE_AUTH_REQUIRED");
    let id = waiting["statusUpdate"]["taskId"]
        .as_str()
        .or_else(|| waiting["task"]["id"].as_str())
        .unwrap()
        .to_owned();
    env.advance(24 * 3600);
    let failed = py.stream_until("TASK_STATE_FAILED");
    assert_eq!(
        failed["statusUpdate"]["status"]["message"]["parts"][1]["data"]["status"], "expired",
        "{failed}"
    );
    py.next("stream_end");
    assert_eq!(py.get(&id)["status"]["state"], "TASK_STATE_FAILED");

    // Unknown ids: TaskNotFound.
    py.send(json!({"op": "get", "id": "no-such-task"}));
    let e = py.next("error");
    assert!(e["type"].as_str().unwrap().contains("TaskNotFound"), "{e}");

    let everything = py.everything();
    assert!(!everything.contains("/cheq/results/"), "{everything}");
    env.stop().await;
}

#[actix_web::test]
async fn a_guarded_bridge_serves_its_bearer_only() {
    if !python_sdk() {
        return;
    }
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("a2a.token");
    let bridge = start_bridge(
        &env,
        dir.path(),
        &["--token-file", token_file.to_str().unwrap()],
    )
    .await;
    let token = std::fs::read_to_string(&token_file).unwrap();

    let mut py = Py::connect(&bridge.base, Some(token.trim()));
    assert_eq!(
        py.card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    py.send(json!({"op": "send", "tool": "book_flight", "args": flight_params()}));
    let task = py.next("sent")["response"]["task"].clone();
    let id = task["id"].as_str().unwrap();

    // Without the token, or with another, nothing: not the card, not the task.
    let http = http_client();
    let get = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}});
    for auth in [
        None,
        Some("Bearer not-the-token-not-the-token-not-the-token"),
    ] {
        let mut card = http.get(format!("{}/.well-known/agent-card.json", bridge.base));
        let mut rpc = http
            .post(format!("{}/", bridge.base))
            .header("A2A-Version", "1.0")
            .json(&get);
        if let Some(a) = auth {
            card = card.header("Authorization", a);
            rpc = rpc.header("Authorization", a);
        }
        assert_eq!(card.send().await.unwrap().status(), 401);
        let res = rpc.send().await.unwrap();
        assert_eq!(res.status(), 401);
        assert!(res.headers().contains_key("www-authenticate"));
        let body = res.text().await.unwrap();
        assert!(!body.contains("AUTH_REQUIRED"), "{body}");
    }
    env.stop().await;
}

/// One raw JSON-RPC request to the bridge; the status and the JSON body.
async fn raw(base: &str, body: &str, version: Option<&str>) -> (u16, Value) {
    let mut req = http_client()
        .post(format!("{base}/"))
        .header("Content-Type", "application/json")
        .body(body.to_owned());
    if let Some(v) = version {
        req = req.header("A2A-Version", v);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

#[actix_web::test]
async fn json_rpc_errors_and_the_guards() {
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let bridge = start_bridge(&env, dir.path(), &[]).await;
    let b = bridge.base.as_str();
    let v = Some("1.0");
    let code = |r: &(u16, Value)| r.1["error"]["code"].as_i64().unwrap_or(0);

    // The card, read raw: the extension with `required: false` written out.
    let card: Value = http_client()
        .get(format!("{b}/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ext = &card["capabilities"]["extensions"][0];
    assert_eq!(
        (&ext["uri"], &ext["required"]),
        (&json!(EXT), &json!(false)),
        "{card}"
    );
    assert_eq!(card["skills"].as_array().map(Vec::len), Some(4), "{card}");

    assert_eq!(code(&raw(b, "{not json", v).await), -32700);
    assert_eq!(code(&raw(b, "[]", v).await), -32600);
    assert_eq!(
        code(&raw(b, r#"{"jsonrpc":"2.0","method":"GetTask"}"#, v).await),
        -32600
    );
    assert_eq!(
        code(&raw(b, r#"{"jsonrpc":"2.0","id":1,"method":"Nope"}"#, v).await),
        -32601
    );
    let r = raw(
        b,
        r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":7}}"#,
        v,
    )
    .await;
    assert_eq!((code(&r), r.1["id"].clone()), (-32602, json!(1)));
    let r = raw(
        b,
        r#"{"jsonrpc":"2.0","id":"q","method":"GetTask","params":{"id":"x"}}"#,
        v,
    )
    .await;
    assert_eq!((code(&r), r.1["id"].clone()), (-32001, json!("q")));
    assert_eq!(
        code(
            &raw(
                b,
                r#"{"jsonrpc":"2.0","id":1,"method":"CancelTask","params":{"id":"x"}}"#,
                v
            )
            .await
        ),
        -32001
    );
    assert_eq!(
        code(
            &raw(
                b,
                r#"{"jsonrpc":"2.0","id":1,"method":"GetTaskPushNotificationConfig","params":{}}"#,
                v
            )
            .await
        ),
        -32003
    );
    assert_eq!(
        code(
            &raw(
                b,
                r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#,
                None
            )
            .await
        ),
        -32009
    );
    assert_eq!(
        code(
            &raw(
                b,
                r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#,
                Some("0.3")
            )
            .await
        ),
        -32009
    );
    // A message naming no tool, or a forged decision: invalid parameters.
    let send = |data: Value| {
        json!({"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": {
            "messageId": "m1", "role": "ROLE_USER", "parts": [{"data": data}]}}})
        .to_string()
    };
    assert_eq!(
        code(&raw(b, &send(json!({"decision": "accepted"})), v).await),
        -32602
    );
    // A cheap call completes; its task cannot be canceled.
    let r = raw(
        b,
        &send(json!({"tool": "book_flight", "arguments": cheap_flight()})),
        v,
    )
    .await;
    assert_eq!(
        r.1["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{}",
        r.1
    );
    let id = r.1["result"]["task"]["id"].as_str().unwrap();
    let cancel = json!({"jsonrpc": "2.0", "id": 3, "method": "CancelTask", "params": {"id": id}});
    assert_eq!(code(&raw(b, &cancel.to_string(), v).await), -32002);

    // A browser's Origin, and a name that is not the bridge's (DNS rebinding).
    let http = http_client();
    let res = http
        .post(format!("{b}/"))
        .header("Origin", "https://evil.example")
        .header("A2A-Version", "1.0")
        .body(cancel.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let res = http
        .get(format!("{b}/.well-known/agent-card.json"))
        .header("Host", "rebound.example")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);

    // Beyond loopback without a token, the command refuses to start.
    let out = Command::new(env!("CARGO_BIN_EXE_cheq"))
        .args(["a2a", "--rs", &env.rs_url, "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--token-file"));
    env.stop().await;
}

/// Where a restarted bridge keeps its tasks.
enum Kept {
    Sled,
    Postgres(String),
}

/// The modes of `path` and everything under it that others may use.
fn open_to_others(path: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut open = Vec::new();
    let mut stack = vec![path.to_owned()];
    let mut files = 0;
    while let Some(p) = stack.pop() {
        let meta = std::fs::metadata(&p).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            open.push(format!("{} {mode:o}", p.display()));
        }
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else {
            files += 1;
        }
    }
    assert!(files >= 2, "no database under {}", path.display());
    open
}

/// The task id of a streamed or sent answer.
fn sent_task(py: &mut Py, tool_args: Map<String, Value>) -> Value {
    py.send(json!({"op": "send", "tool": "book_flight", "args": tool_args}));
    py.next("sent")["response"]["task"].clone()
}

async fn tasks_survive_a_killed_bridge(kept: Kept) {
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a2a-data");
    let place: Vec<String> = match &kept {
        Kept::Sled => vec!["--data-dir".into(), data.to_str().unwrap().into()],
        Kept::Postgres(url) => vec!["--database-url".into(), url.clone()],
    };
    let token_file = dir.path().join("a2a.token");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut bridge = bridge_on(&env, dir.path(), port, &token_file, &place).await;
    let token = std::fs::read_to_string(&token_file).unwrap();
    let token = token.trim();

    let mut py = Py::connect(&base, Some(token));
    // Two tasks wait for their user; one completed at once.
    let waiting = sent_task(&mut py, flight_params());
    let accepted_id = waiting["id"].as_str().unwrap().to_owned();
    let accepted_link = link_of(&env, &waiting["status"]);
    let waiting = sent_task(&mut py, flight_params());
    let rejected_id = waiting["id"].as_str().unwrap().to_owned();
    let rejected_link = link_of(&env, &waiting["status"]);
    let done = sent_task(&mut py, cheap_flight());
    let done_id = done["id"].as_str().unwrap().to_owned();
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    drop(py);

    // Killed: no shutdown, no last write.
    bridge.kill();
    if let Kept::Sled = kept {
        let open = open_to_others(&data);
        assert!(open.is_empty(), "open to others: {open:?}");
    }
    // The user rejects one while the bridge is down.
    decide_at_link(&env, &rejected_link, "reject").await;

    let bridge = bridge_on(&env, dir.path(), port, &token_file, &place).await;
    let mut py = Py::connect(&base, Some(token));
    // GetTask answers each task as it stood.
    let again = py.get(&accepted_id);
    assert_eq!(link_of(&env, &again["status"]), accepted_link);
    assert!(again["artifacts"].is_null(), "{again}");
    let again = py.get(&done_id);
    assert_eq!(again["status"]["state"], "TASK_STATE_COMPLETED", "{again}");
    assert!(artifact_output(&again, "status").is_string(), "{again}");
    // The decision taken while it was down reaches its task.
    let rejected = py.poll_until(&rejected_id, "TASK_STATE_REJECTED").await;
    assert!(rejected["artifacts"].is_null(), "{rejected}");
    // A subscription to a task kept across the restart sees it complete
    // when the user accepts now.
    py.send(json!({"op": "subscribe", "id": accepted_id}));
    let first = py.next("stream")["item"].clone();
    assert_eq!(
        first["task"]["status"]["state"], "TASK_STATE_AUTH_REQUIRED",
        "{first}"
    );
    decide_at_link(&env, &accepted_link, "accept").await;
    py.stream_until("TASK_STATE_COMPLETED");
    py.next("stream_end");
    let completed = py.get(&accepted_id);
    assert_eq!(
        artifact_output(&completed, "status"),
        json!("CONFIRMED"),
        "{completed}"
    );
    let log = bridge.log();
    assert!(
        log.contains("3 kept, 2 waiting for their user followed again, 0 interrupted"),
        "{log}"
    );
    // The result URIs reached no client and no log line, before the
    // restart or after (one log file: the same port).
    let everything = py.everything();
    assert!(!everything.contains("/cheq/results/"), "{everything}");
    assert!(!log.contains("/cheq/results/"), "{log}");
    drop(py);
    drop(bridge);

    // Started again under another token, the tasks are another client's:
    // the new credential finds none of them, and the old one is refused.
    let other_file = dir.path().join("other.token");
    let bridge = bridge_on(&env, dir.path(), port, &other_file, &place).await;
    let other = std::fs::read_to_string(&other_file).unwrap();
    assert_ne!(other.trim(), token);
    let mut py = Py::connect(&base, Some(other.trim()));
    for id in [&accepted_id, &rejected_id, &done_id] {
        py.send(json!({"op": "get", "id": id}));
        let e = py.next("error");
        assert!(e["type"].as_str().unwrap().contains("TaskNotFound"), "{e}");
    }
    let res = http_client()
        .post(format!("{base}/"))
        .header("A2A-Version", "1.0")
        .header("Authorization", format!("Bearer {token}"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                      "params": {"id": accepted_id}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    drop(bridge);
    env.stop().await;
}

#[actix_web::test]
async fn tasks_survive_a_killed_bridge_on_sled() {
    if !python_sdk() {
        return;
    }
    tasks_survive_a_killed_bridge(Kept::Sled).await;
}

#[actix_web::test]
async fn tasks_survive_a_killed_bridge_on_postgres() {
    if !python_sdk() {
        return;
    }
    let Some(url) = cheq::store::pg::test_database_or_skip("a2a_restart") else {
        return;
    };
    tasks_survive_a_killed_bridge(Kept::Postgres(url)).await;
}

#[actix_web::test]
async fn a_second_bridge_on_one_data_dir_does_not_start() {
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let first = start_bridge(&env, dir.path(), &[]).await;
    let data = dir.path().join("a2a-data");
    let out = Command::new(env!("CARGO_BIN_EXE_cheq"))
        .args([
            "a2a",
            "--rs",
            &env.rs_url,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another cheq a2a"), "{err}");
    // Two places at once: refused before anything starts.
    let out = Command::new(env!("CARGO_BIN_EXE_cheq"))
        .args([
            "a2a",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            "x",
            "--database-url",
            "postgres://u@h/db",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!std::path::Path::new("x").exists());
    drop(first);
    env.stop().await;
}
