//! The MCP bridge (`cheq mcp`, PROTOCOL.md §11) with a client the project did
//! not write: the official MCP Python SDK (`mcp` on PyPI, installed by
//! `tests/mcp/install.sh`), driven through `tests/mcp/client.py`, against the
//! in-process CS and RS and the bridge as a real process. The user's side is
//! done over HTTP as a browser would (the Chromium run is
//! `tests/browser/mcp.test.mjs`). Both MCP revisions the SDK speaks are
//! covered: 2025-11-25 (`URLElicitationRequiredError` and
//! `notifications/elicitation/complete`) and 2026-07-28 (`input_required`
//! with a sealed `requestState`). A bridge given `--token-file` serves only
//! its bearer, to the SDK as to a raw request, and the CLI refuses to serve
//! beyond loopback without one.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use serde_json::{json, Map, Value};
use std::process::{Command, Stdio};
use std::time::Duration;

const LEGACY: &str = "legacy";
const MODERN: &str = "2026-07-28";

/// The bridge as a real process, in front of the test RS.
struct BridgeProc {
    _proc: Proc,
    url: String,
}

async fn start_bridge(env: &Env, dir: &std::path::Path) -> BridgeProc {
    start_bridge_with(env, dir, &[]).await
}

/// The same, with `extra` arguments to `cheq mcp`.
async fn start_bridge_with(env: &Env, dir: &std::path::Path, extra: &[&str]) -> BridgeProc {
    start_bridge_to(&env.rs_url, dir, extra).await
}

/// The bridge in front of the RS at `rs_url`.
async fn start_bridge_to(rs_url: &str, dir: &std::path::Path, extra: &[&str]) -> BridgeProc {
    let (proc, base) = spawn_bridge("mcp", rs_url, dir, extra, "/nothing", 404).await;
    BridgeProc {
        _proc: proc,
        url: format!("{base}/mcp"),
    }
}

/// The MCP Python SDK client (`tests/mcp/client.py`); notifications are
/// kept in `seen` and passed over when waiting for an answer.
struct Py(LineClient);

impl std::ops::Deref for Py {
    type Target = LineClient;
    fn deref(&self) -> &LineClient {
        &self.0
    }
}

impl std::ops::DerefMut for Py {
    fn deref_mut(&mut self) -> &mut LineClient {
        &mut self.0
    }
}

impl Py {
    fn start(args: &[&str]) -> Py {
        Py::start_with(args, &[])
    }

    fn start_with(args: &[&str], envs: &[(&str, &str)]) -> Py {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
        let mut all = vec![
            ("CHEQ_AGENT_ID", "agent"),
            ("CHEQ_AGENT_SECRET", AGENT_SECRET),
        ];
        all.extend_from_slice(envs);
        let mut py = Py(LineClient::python(script, args, &all, &["message"]));
        let ready = py.next("ready");
        assert!(ready["protocol_version"].is_string(), "{ready}");
        py
    }

    fn connect(url: &str, mode: &str) -> Py {
        Py::start(&[url, mode])
    }

    /// 2026-07-28: retries with `state` until the outcome (the RS reports
    /// it a moment after the decision); each interim answer must be
    /// `input_required`.
    async fn collect(&mut self, tool: &str, args: &Map<String, Value>, state: &str) -> Value {
        for _ in 0..50 {
            self.send(json!({"op": "call_once", "tool": tool, "args": args, "state": state}));
            let event = self.next_any();
            if event["event"] == "result" {
                return event["result"].clone();
            }
            assert_eq!(event["event"], "input_required", "{event}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no outcome for {tool}: {:#?}", self.seen);
    }
}

fn cheap_flight() -> Map<String, Value> {
    let mut m = flight_params();
    m.insert("price_usd".into(), json!(100));
    m
}

/// The value of an A2T output parameter.
fn output_value(result: &Value, name: &str) -> Value {
    result["output_parameters"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .map(|p| p["value"].clone())
        .unwrap_or(Value::Null)
}

/// What a user does with the elicitation URL in a browser: open it, sign in,
/// continue, decide. Returns the decision's outcome page.
async fn decide_at_link(env: &Env, link: &str, decision: &str, fill: &[(&str, &str)]) -> Page {
    assert!(
        link.starts_with(&env.cs_url),
        "{link} is at the CS {}",
        env.cs_url
    );
    let mut b = env.browser();
    let path = link.trim_start_matches(&env.cs_origin).to_owned();
    let res = b.get(&path).await;
    assert_eq!(
        res.status, 303,
        "a GET of the link sends a visitor to login: {}",
        res.text
    );
    let res = b.login_at(&res.location(), "alice", ALICE_PW).await;
    assert_eq!(res.status, 303, "{}", res.text);
    let page_path = b.after_login(res.location()).await;
    let page = b.get(&page_path).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let csrf = page.hidden("csrf").unwrap();
    let view = page.hidden("view").unwrap();
    let mut fields = vec![
        ("csrf", csrf.as_str()),
        ("view", view.as_str()),
        ("decision", decision),
    ];
    fields.extend_from_slice(fill);
    let outcome = b.post(&page_path, &fields).await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    outcome
}

fn check_elicitation(env: &Env, el: &Value) {
    assert_eq!(el["mode"], "url", "{el}");
    let url = el["url"].as_str().unwrap();
    assert!(
        url.starts_with(&format!(
            "{}/?resource_uri=",
            env.cs_url.trim_end_matches('/')
        )) || url.starts_with(&format!("{}?resource_uri=", env.cs_url)),
        "{url}"
    );
    assert_eq!(
        el["message"],
        format!("Confirm 'book_flight' at {}", env.cs_origin),
        "{el}"
    );
    // No credential, no personal data: only the resource URI (§11).
    let parsed = url::Url::parse(url).unwrap();
    let keys: Vec<String> = parsed.query_pairs().map(|(k, _)| k.into_owned()).collect();
    assert_eq!(keys, vec!["resource_uri".to_owned()], "{url}");
    assert!(!url.contains("alice"), "{url}");
}

/// Whether MCP tests with the official Python SDK can run here (else they are skipped,
/// saying so; `scripts/test` installs what they need).
fn python_sdk() -> bool {
    cheq::store::testing::can_run(
        "the MCP tests with the official Python SDK",
        &[cheq::store::testing::Outside::Python("mcp")],
    )
}

#[actix_web::test]
async fn revision_2025_11_25_accept_reject_and_sessions() {
    if !python_sdk() {
        return;
    }
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let bridge = start_bridge(&env, dir.path()).await;
    let mut a = Py::connect(&bridge.url, LEGACY);
    let mut b = Py::connect(&bridge.url, LEGACY);

    // The tools, with input schemas from the A2T signatures.
    a.send(json!({"op": "list"}));
    let tools = a.next("tools")["tools"].clone();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec![
            "book_flight",
            "choose_confirmation_server",
            "confirmation_status",
            "set_confirmation_policy",
            "transfer_funds"
        ]
    );
    let schema = &tools[0]["inputSchema"];
    assert_eq!(
        schema["properties"]["price_usd"]["type"], "integer",
        "{schema}"
    );
    assert_eq!(
        schema["properties"]["cabin_class"]["enum"][1],
        "PREMIUM_ECONOMY"
    );

    // A call under the threshold runs at once.
    a.send(json!({"op": "call", "tool": "book_flight", "args": cheap_flight()}));
    let done = a.next("result")["result"].clone();
    assert_eq!(done["structuredContent"]["status"], "done", "{done}");
    assert_ne!(done["isError"], true, "{done}");

    // Above it: URLElicitationRequiredError at once.
    a.send(json!({"op": "call", "tool": "book_flight", "args": flight_params()}));
    let first = a.next("elicit");
    assert_eq!(first["error"]["code"], -32042, "{first}");
    let el = first["params"].clone();
    check_elicitation(&env, &el);
    let id = el["elicitationId"].as_str().unwrap().to_owned();
    assert!(id.len() >= 22, "an opaque id of 128 bits: {id}");
    // A retry before the decision asks again with the same URL and id.
    a.send(json!({"op": "call", "tool": "book_flight", "args": flight_params()}));
    let again = a.next("elicit")["params"].clone();
    assert_eq!(again, el);

    // Another session calling the same tool with the same arguments gets its
    // own confirmation, never the first session's.
    b.send(json!({"op": "call", "tool": "book_flight", "args": flight_params()}));
    let b_el = b.next("elicit")["params"].clone();
    assert_ne!(b_el["elicitationId"], el["elicitationId"]);
    assert_ne!(b_el["url"], el["url"]);

    // The user accepts the first: the bridge notifies that session, and its
    // retry returns the RS's result.
    decide_at_link(&env, el["url"].as_str().unwrap(), "accept", &[]).await;
    a.send(json!({"op": "wait_complete", "id": id, "secs": 30}));
    a.next("complete");
    a.send(json!({"op": "call", "tool": "book_flight", "args": flight_params()}));
    let accepted = a.next("result")["result"].clone();
    assert_eq!(
        accepted["structuredContent"]["status"], "accepted",
        "{accepted}"
    );
    assert_eq!(
        output_value(&accepted["structuredContent"]["result"], "status"),
        json!("CONFIRMED"),
        "{accepted}"
    );
    assert_ne!(accepted["isError"], true);

    // B's confirmation is still its own and still pending; the user rejects
    // it: a tool result (not a protocol error) says so.
    b.send(json!({"op": "call", "tool": "book_flight", "args": flight_params()}));
    assert_eq!(b.next("elicit")["params"], b_el);
    decide_at_link(&env, b_el["url"].as_str().unwrap(), "reject", &[]).await;
    b.send(json!({"op": "wait_complete", "id": b_el["elicitationId"], "secs": 30}));
    b.next("complete");
    b.send(json!({"op": "call", "tool": "book_flight", "args": flight_params()}));
    let rejected = b.next("result")["result"].clone();
    assert_eq!(rejected["isError"], true, "{rejected}");
    assert_eq!(
        rejected["structuredContent"]["status"], "rejected",
        "{rejected}"
    );

    // Once collected, the same call starts a new confirmation.
    a.send(json!({"op": "call", "tool": "book_flight", "args": flight_params()}));
    let fresh = a.next("elicit")["params"].clone();
    assert_ne!(fresh["elicitationId"], el["elicitationId"]);

    // The result URIs never reached a client.
    for everything in [a.everything(), b.everything()] {
        assert!(!everything.contains("/cheq/results/"), "{everything}");
    }
    env.stop().await;
}

/// Calls `confirmation_status` with `handle`: the tool result.
fn status_of(py: &mut Py, handle: &str) -> Value {
    py.send(json!({"op": "call", "tool": "confirmation_status", "args": {"handle": handle}}));
    py.next("result")["result"].clone()
}

/// Asks `confirmation_status` until the state is not pending any more (the
/// RS reports it a moment after the decision); it must then be `want`.
async fn status_until(py: &mut Py, handle: &str, want: &str) -> Value {
    for _ in 0..100 {
        let r = status_of(py, handle);
        let status = r["structuredContent"]["status"].as_str().unwrap_or("");
        if status != "pending" {
            assert_eq!(status, want, "{r}");
            return r;
        }
        assert_ne!(r["isError"], true, "{r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("still pending: {:#?}", py.seen);
}

/// A call that needs confirmation, from a client without URL elicitation:
/// a tool result (not an error) with the start link and a handle, both in
/// the text too. Returns (link, handle).
fn confirmation_required(env: &Env, py: &mut Py) -> (String, String) {
    py.send(json!({"op": "call", "tool": "book_flight", "args": flight_params()}));
    let r = py.next("result")["result"].clone();
    assert_ne!(r["isError"], true, "{r}");
    let sc = &r["structuredContent"];
    assert_eq!(sc["status"], "confirmation_required", "{r}");
    let link = sc["confirmation_url"].as_str().unwrap().to_owned();
    let handle = sc["handle"].as_str().unwrap().to_owned();
    check_elicitation(
        env,
        &json!({"mode": "url", "url": link, "message": format!("Confirm 'book_flight' at {}", env.cs_origin)}),
    );
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(&link) && text.contains(&handle), "{text}");
    assert!(text.contains("confirmation_status"), "{text}");
    assert!(text.contains("Do not call this tool again"), "{text}");
    (link, handle)
}

/// §11: clients that declare no elicitation, or form only, on both
/// revisions, get the link and a handle, and collect the outcome with
/// `confirmation_status`. A handle works only for the client it was given
/// to, and only as given.
#[actix_web::test]
async fn clients_without_url_elicitation_confirm_through_a_link_and_a_handle() {
    if !python_sdk() {
        return;
    }
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let bridge = start_bridge(&env, dir.path()).await;
    let client = |mode: &str, elicit: &str| {
        Py::start_with(&[bridge.url.as_str(), mode], &[("CHEQ_MCP_ELICIT", elicit)])
    };
    let cases = [
        (LEGACY, "none", "accept"),
        (LEGACY, "form", "reject"),
        (MODERN, "none", "reject"),
        (MODERN, "form", "accept"),
    ];
    let mut seen = Vec::new();
    for (mode, elicit, decision) in cases {
        let mut py = client(mode, elicit);
        let mut other = client(mode, elicit);
        // The status tool is listed, with its one argument.
        py.send(json!({"op": "list"}));
        let tools = py.next("tools")["tools"].clone();
        let status_tool = tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "confirmation_status")
            .cloned()
            .unwrap_or_else(|| panic!("{tools}"));
        assert_eq!(status_tool["inputSchema"]["required"], json!(["handle"]));

        // A cheap call still runs at once.
        py.send(json!({"op": "call", "tool": "book_flight", "args": cheap_flight()}));
        let done = py.next("result")["result"].clone();
        assert_eq!(done["structuredContent"]["status"], "done", "{done}");

        let (link, handle) = confirmation_required(&env, &mut py);
        if decision == "accept" && mode == LEGACY {
            // Why the model is told not to call again: a second call is a
            // second confirmation, with a link and a handle of its own.
            let (link2, handle2) = confirmation_required(&env, &mut py);
            assert_ne!(link2, link);
            assert_ne!(handle2, handle);
        }
        let pending = status_of(&mut py, &handle);
        assert_eq!(
            pending["structuredContent"]["status"], "pending",
            "{pending}"
        );
        assert_eq!(
            pending["structuredContent"]["confirmation_url"],
            link.as_str()
        );
        assert_ne!(pending["isError"], true, "{pending}");

        // Refused: altered, or shown by another session (at 2025-11-25),
        // or by a client of the other revision; no content of the call
        // comes back.
        for bad in [
            tamper(&handle, 7),
            tamper(&handle, handle.len() - 3),
            String::new(),
        ] {
            let r = status_of(&mut py, &bad);
            assert_eq!(r["isError"], true, "{r}");
            assert_eq!(r["structuredContent"]["status"], "invalid_handle", "{r}");
        }
        let mut strangers = vec![client(if mode == LEGACY { MODERN } else { LEGACY }, elicit)];
        if mode == LEGACY {
            strangers.push(other);
        } else {
            // Stateless requests have no session: any client of this
            // bridge at 2026-07-28 can read a handle it is shown.
            let r = status_of(&mut other, &handle);
            assert_eq!(r["structuredContent"]["status"], "pending", "{r}");
        }
        for stranger in &mut strangers {
            let r = status_of(stranger, &handle);
            assert_eq!(r["structuredContent"]["status"], "invalid_handle", "{r}");
            assert!(!r.to_string().contains("book_flight"), "{r}");
        }
        let r = {
            py.send(json!({"op": "call", "tool": "confirmation_status", "args": {}}));
            py.next("result")["result"].clone()
        };
        assert_eq!(r["structuredContent"]["status"], "invalid_arguments", "{r}");

        decide_at_link(&env, &link, decision, &[]).await;
        let want = if decision == "accept" {
            "accepted"
        } else {
            "rejected"
        };
        let end = status_until(&mut py, &handle, want).await;
        if decision == "accept" {
            assert_ne!(end["isError"], true, "{end}");
            assert_eq!(
                output_value(&end["structuredContent"]["result"], "status"),
                json!("CONFIRMED"),
                "{end}"
            );
        } else {
            assert_eq!(end["isError"], true, "{end}");
        }
        seen.push(py.everything());
        for mut s in strangers {
            seen.push(s.everything());
        }
    }
    // The result URIs never reached a client.
    for everything in seen {
        assert!(!everything.contains("/cheq/results/"), "{everything}");
    }
    env.stop().await;
}

/// Flips one character of a request state (kept base64url).
fn tamper(state: &str, at: usize) -> String {
    let mut chars: Vec<char> = state.chars().collect();
    let i = at % chars.len();
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

#[actix_web::test]
async fn revision_2026_07_28_request_state_binding_accept_and_reject() {
    if !python_sdk() {
        return;
    }
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let bridge = start_bridge(&env, dir.path()).await;
    let mut c = Py::connect(&bridge.url, MODERN);

    c.send(json!({"op": "list"}));
    assert_eq!(c.next("tools")["tools"].as_array().unwrap().len(), 5); // the RS's four and confirmation_status

    c.send(json!({"op": "call_once", "tool": "book_flight", "args": cheap_flight()}));
    let done = c.next("result")["result"].clone();
    assert_eq!(done["structuredContent"]["status"], "done", "{done}");

    // input_required at once: the URL elicitation and an opaque state.
    c.send(json!({"op": "call_once", "tool": "book_flight", "args": flight_params()}));
    let first = c.next("input_required");
    let state = first["state"].as_str().unwrap().to_owned();
    let req = &first["result"]["inputRequests"]["cheq_confirmation"];
    assert_eq!(req["method"], "elicitation/create", "{first}");
    let el = req["params"].clone();
    check_elicitation(&env, &el);

    // A retry before the decision asks again with the same URL.
    c.send(
        json!({"op": "call_once", "tool": "book_flight", "args": flight_params(),
                  "state": state, "responses": {"cheq_confirmation": {"action": "accept"}}}),
    );
    let again = c.next("input_required");
    assert_eq!(
        again["result"]["inputRequests"]["cheq_confirmation"]["params"],
        el
    );
    // The user declines to open the page: a tool result says it was not
    // confirmed (nothing ran); the state still collects the outcome later.
    c.send(
        json!({"op": "call_once", "tool": "book_flight", "args": flight_params(),
                  "state": state, "responses": {"cheq_confirmation": {"action": "decline"}}}),
    );
    let declined = c.next("result")["result"].clone();
    assert_eq!(declined["isError"], true, "{declined}");
    assert_eq!(
        declined["structuredContent"]["status"], "not_confirmed",
        "{declined}"
    );

    // The state is bound to its call: another tool, other arguments, or one
    // character changed, and it is refused.
    let mut other_args = flight_params();
    other_args.insert("price_usd".into(), json!(1201));
    let refusals = [
        json!({"op": "call_once", "tool": "transfer_funds", "args": transfer_params(Some("ACME"), None), "state": state}),
        json!({"op": "call_once", "tool": "book_flight", "args": other_args, "state": state}),
        json!({"op": "call_once", "tool": "book_flight", "args": flight_params(), "state": tamper(&state, 5)}),
        json!({"op": "call_once", "tool": "book_flight", "args": flight_params(), "state": tamper(&state, state.len() - 3)}),
        json!({"op": "call_once", "tool": "book_flight", "args": flight_params(), "state": "not a state"}),
    ];
    for cmd in refusals {
        c.send(cmd.clone());
        let err = c.next("error");
        assert_eq!(err["error"]["code"], -32602, "{cmd}: {err}");
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .contains("requestState"),
            "{err}"
        );
    }

    // Accepted at the CS: the retry carrying the state gets the result.
    decide_at_link(&env, el["url"].as_str().unwrap(), "accept", &[]).await;
    let result = c.collect("book_flight", &flight_params(), &state).await;
    assert_eq!(
        result["structuredContent"]["status"], "accepted",
        "{result}"
    );
    assert_eq!(
        output_value(&result["structuredContent"]["result"], "status"),
        json!("CONFIRMED")
    );

    // The SDK's own multi-round-trip driver: the user rejects this one.
    let mut cheaper = flight_params();
    cheaper.insert("price_usd".into(), json!(999));
    c.send(json!({"op": "call", "tool": "book_flight", "args": cheaper}));
    let el = c.next("elicit")["params"].clone();
    check_elicitation(&env, &el);
    decide_at_link(&env, el["url"].as_str().unwrap(), "reject", &[]).await;
    c.send(json!({"action": "accept"}));
    let rejected = loop {
        let event = c.next_any();
        match event["event"].as_str() {
            // Asked again while the RS has not yet reported: same URL.
            Some("elicit") => {
                assert_eq!(event["params"]["url"], el["url"]);
                c.send(json!({"action": "accept"}));
            }
            Some("result") => break event["result"].clone(),
            _ => panic!("{event}"),
        }
    };
    assert_eq!(rejected["isError"], true, "{rejected}");
    assert_eq!(rejected["structuredContent"]["status"], "rejected");

    // A second client (no state) never collects the first one's result: it
    // gets a confirmation of its own.
    let mut d = Py::connect(&bridge.url, MODERN);
    d.send(json!({"op": "call_once", "tool": "book_flight", "args": flight_params()}));
    let theirs = d.next("input_required");
    assert_ne!(
        theirs["result"]["inputRequests"]["cheq_confirmation"]["params"]["url"],
        el["url"]
    );
    for everything in [c.everything(), d.everything()] {
        assert!(!everything.contains("/cheq/results/"), "{everything}");
    }
    env.stop().await;
}

#[actix_web::test]
async fn expiry_in_both_revisions_is_a_tool_result() {
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
    let bridge = start_bridge(&env, dir.path()).await;
    let mut legacy = Py::connect(&bridge.url, LEGACY);
    let mut modern = Py::connect(&bridge.url, MODERN);
    legacy.send(json!({"op": "call", "tool": "book_flight", "args": flight_params()}));
    let el = legacy.next("elicit")["params"].clone();
    modern.send(json!({"op": "call_once", "tool": "book_flight", "args": flight_params()}));
    let state = modern.next("input_required")["state"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut formless = Py::start_with(
        &[bridge.url.as_str(), MODERN],
        &[("CHEQ_MCP_ELICIT", "none")],
    );
    let (_, handle) = confirmation_required(&env, &mut formless);

    // Past the CHEQ's expiry and the skew: the RS reports "expired".
    env.advance(24 * 3600);
    let expired = status_until(&mut formless, &handle, "expired").await;
    assert_eq!(expired["isError"], true, "{expired}");
    legacy.send(json!({"op": "wait_complete", "id": el["elicitationId"], "secs": 30}));
    legacy.next("complete");
    legacy.send(json!({"op": "call", "tool": "book_flight", "args": flight_params()}));
    let expired = legacy.next("result")["result"].clone();
    assert_eq!(expired["isError"], true, "{expired}");
    assert_eq!(
        expired["structuredContent"]["status"], "expired",
        "{expired}"
    );

    modern.send(
        json!({"op": "call_once", "tool": "book_flight", "args": flight_params(), "state": state}),
    );
    let expired = modern.next("result")["result"].clone();
    assert_eq!(
        expired["structuredContent"]["status"], "expired",
        "{expired}"
    );
    env.stop().await;
}

/// §8 and §11: what the user types at the CS never reaches the client.
#[actix_web::test]
async fn a_private_value_typed_at_the_cs_never_reaches_the_client() {
    if !python_sdk() {
        return;
    }
    const FROM: &str = "31415926535";
    const TO: &str = "27182818284";
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let bridge = start_bridge(&env, dir.path()).await;
    let mut c = Py::connect(&bridge.url, MODERN);
    let args = transfer_params(Some("ACME"), None);
    c.send(json!({"op": "call_once", "tool": "transfer_funds", "args": args}));
    let first = c.next("input_required");
    let state = first["state"].as_str().unwrap().to_owned();
    let link = first["result"]["inputRequests"]["cheq_confirmation"]["params"]["url"]
        .as_str()
        .unwrap()
        .to_owned();

    // The page's inputs, in order: from account, to account, amount.
    let mut b = env.browser();
    let path = link.trim_start_matches(&env.cs_origin).to_owned();
    let res = b.get(&path).await;
    let res = b.login_at(&res.location(), "alice", ALICE_PW).await;
    let page_path = b.after_login(res.location()).await;
    let page = b.get(&page_path).await;
    let outcome = b
        .accept_typing(&page_path, &page, [FROM, TO, "12.50"])
        .await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);

    let result = c.collect("transfer_funds", &args, &state).await;
    assert_eq!(
        result["structuredContent"]["status"], "accepted",
        "{result}"
    );
    let everything = c.everything();
    for secret in [FROM, TO] {
        assert!(
            !everything.contains(secret),
            "{secret} reached the client: {everything}"
        );
    }
    // Control: the search does see what reached the client.
    assert!(everything.contains("\"DONE\""), "{everything}");
    env.stop().await;
}

/// `cheq mcp --stdio`, launched by the SDK as a subprocess, in both revisions.
#[actix_web::test]
async fn stdio_in_both_revisions() {
    if !python_sdk() {
        return;
    }
    let env = Env::start(Options::default()).await;
    let bin = env!("CARGO_BIN_EXE_cheq");
    // Let the in-process servers start before this thread blocks on the client.
    let res = http_client()
        .get(format!("{}/healthz", env.rs_url))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    for mode in [LEGACY, MODERN] {
        let mut c = Py::start(&["--stdio", mode, bin, &env.rs_url]);
        c.send(json!({"op": "list"}));
        assert_eq!(
            c.next("tools")["tools"].as_array().unwrap().len(),
            5,
            "{mode}"
        );
        c.send(json!({"op": "call", "tool": "book_flight", "args": cheap_flight()}));
        let done = c.next("result")["result"].clone();
        assert_eq!(
            done["structuredContent"]["status"], "done",
            "{mode}: {done}"
        );
    }
    env.stop().await;
}

/// A `server/discover` POST (2026-07-28) to the bridge at `url`, as a
/// client sends it, before any test-specific header.
fn discover_request(url: &str) -> reqwest::RequestBuilder {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    http_client()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "server/discover")
        .json(&body)
}

/// Streamable HTTP security (MCP transports): a request carrying a browser
/// `Origin`, or a `Host` that is not the bridge's loopback address (DNS
/// rebinding), is refused before any MCP processing; other paths are 404.
#[actix_web::test]
async fn origin_and_host_are_checked() {
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let bridge = start_bridge(&env, dir.path()).await;
    let post = |origin: Option<&str>, host: Option<&str>| {
        let mut req = discover_request(&bridge.url);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        if let Some(h) = host {
            req = req.header("host", h);
        }
        req.send()
    };
    let ok = post(None, None).await.unwrap();
    assert_eq!(ok.status(), 200);
    let text = ok.text().await.unwrap();
    assert!(
        text.contains("2026-07-28") && text.contains("2025-11-25"),
        "{text}"
    );
    assert_eq!(
        post(Some("http://evil.example"), None)
            .await
            .unwrap()
            .status(),
        403
    );
    let rebound = post(None, Some("evil.example")).await.unwrap().status();
    assert!(rebound.is_client_error(), "{rebound}");
    env.stop().await;
}

/// `--token-file`: the bridge serves only `Authorization: Bearer <token>`
/// (RFC 6750), under any `Host`; anything else is 401 with a Bearer
/// challenge before MCP is reached. The SDK, given the token, works as
/// without one. Beyond loopback, no token means no start.
#[actix_web::test]
async fn a_bridge_with_a_token_serves_only_its_bearer() {
    if !python_sdk() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcp.token");
    let bridge =
        start_bridge_with(&env, dir.path(), &["--token-file", file.to_str().unwrap()]).await;
    // Made at the first start, 0600, 32 random bytes in base64url.
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let token = std::fs::read_to_string(&file).unwrap();
    assert_eq!(token.len(), 43, "{token}");

    let post = |authorization: Option<String>, extra: Option<(&'static str, &'static str)>| {
        let mut req = discover_request(&bridge.url);
        if let Some(a) = authorization {
            req = req.header("authorization", a);
        }
        if let Some((name, value)) = extra {
            req = req.header(name, value);
        }
        req.send()
    };
    // Refused, each with the challenge and a JSON error.
    let missing = post(None, None).await.unwrap();
    assert_eq!(missing.status(), 401);
    assert_eq!(
        missing.headers()["www-authenticate"],
        "Bearer realm=\"mcp\""
    );
    let error: Value = missing.json().await.unwrap();
    assert_eq!(error["error"], "unauthorized", "{error}");
    // Two Authorization headers, one of them right: 400.
    let twice = discover_request(&bridge.url)
        .header("authorization", format!("Bearer {token}"))
        .header("authorization", "Bearer other")
        .send()
        .await
        .unwrap();
    assert_eq!(twice.status(), 400);
    for wrong in [
        format!("Bearer {}x", token),
        format!("Bearer {}", &token[..42]),
        "Bearer ".to_owned(),
        format!("Basic {token}"),
        token.clone(),
    ] {
        let res = post(Some(wrong.clone()), None).await.unwrap();
        assert_eq!(res.status(), 401, "{wrong}");
        assert_eq!(
            res.headers()["www-authenticate"],
            "Bearer realm=\"mcp\", error=\"invalid_token\"",
            "{wrong}"
        );
    }
    // The token, in either case of the scheme and under any Host.
    for (authorization, extra) in [
        (format!("Bearer {token}"), None),
        (format!("bearer {token}"), None),
        (
            format!("Bearer {token}"),
            Some(("host", "bridge.internal:443")),
        ),
    ] {
        let res = post(Some(authorization), extra).await.unwrap();
        assert_eq!(res.status(), 200, "{extra:?}");
    }
    // A browser page is refused even with it.
    let page = post(
        Some(format!("Bearer {token}")),
        Some(("origin", "http://evil.example")),
    )
    .await
    .unwrap();
    assert_eq!(page.status(), 403);

    // The SDK, given the token, lists and calls the tools.
    let mut py = Py::start_with(
        &[&bridge.url, MODERN],
        &[("CHEQ_MCP_TOKEN", token.as_str())],
    );
    py.send(json!({"op": "list"}));
    let tools = py.next("tools")["tools"].clone();
    assert_eq!(tools.as_array().map(Vec::len), Some(5), "{tools}");
    py.send(json!({"op": "call", "tool": "book_flight", "args": cheap_flight()}));
    let done = py.next("result")["result"].clone();
    assert_eq!(done["structuredContent"]["status"], "done", "{done}");
    drop(py);

    // Beyond loopback: no start without a token, and a token file that is
    // too short is refused by name.
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_cheq"))
            .args(args)
            .env("CHEQ_AGENT_SECRET", AGENT_SECRET)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, text) = cli(&["mcp", "--rs", &env.rs_url, "--listen", "0.0.0.0:0"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("--token-file") && !text.contains("panicked"),
        "{text}"
    );
    // A token file others may read, whatever it holds, and one too short:
    // refused, each by name.
    for (name, contents, mode, said) in [
        ("open.token", format!("{token}\n"), 0o644, "chmod 600"),
        (
            "short.token",
            "too short\n".to_owned(),
            0o600,
            "shorter than 32 bytes",
        ),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, contents).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        let (code, text) = cli(&[
            "mcp",
            "--rs",
            &env.rs_url,
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            file.to_str().unwrap(),
        ]);
        assert_ne!(code, Some(0), "{text}");
        assert!(text.contains(name) && text.contains(said), "{text}");
    }
    env.stop().await;
}

/// How many lines the client printed for a `notifications/elicitation/complete`
/// naming `id`.
fn completions(py: &mut Py, id: &str) -> usize {
    py.everything()
        .lines()
        .filter(|l| l.contains("notifications/elicitation/complete") && l.contains(id))
        .count()
}

/// §11 and MCP 2025-11-25: the completion notice is sent once the RS reports
/// a final state, also when the client's retry read that state before the
/// bridge's own watch did, and exactly once either way.
#[actix_web::test]
async fn the_completion_notice_comes_once_whoever_collects_first() {
    if !python_sdk() {
        return;
    }
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let bridge = start_bridge(&env, dir.path()).await;
    let mut c = Py::connect(&bridge.url, LEGACY);

    // The retry comes right after the decision: it reads the final state
    // before the bridge's watch does, and collects the result.
    c.send(json!({"op": "call", "tool": "book_flight", "args": flight_params()}));
    let el = c.next("elicit")["params"].clone();
    let id = el["elicitationId"].as_str().unwrap().to_owned();
    decide_at_link(&env, el["url"].as_str().unwrap(), "accept", &[]).await;
    c.send(json!({"op": "call", "tool": "book_flight", "args": flight_params()}));
    let accepted = c.next("result")["result"].clone();
    assert_eq!(
        accepted["structuredContent"]["status"], "accepted",
        "{accepted}"
    );
    c.send(json!({"op": "wait_complete", "id": id, "secs": 30}));
    c.next("complete");

    // The client waits for the notice before its retry: the watch reads the
    // final state first.
    let mut other = flight_params();
    other.insert("price_usd".into(), json!(1300));
    c.send(json!({"op": "call", "tool": "book_flight", "args": other}));
    let el2 = c.next("elicit")["params"].clone();
    let id2 = el2["elicitationId"].as_str().unwrap().to_owned();
    decide_at_link(&env, el2["url"].as_str().unwrap(), "reject", &[]).await;
    c.send(json!({"op": "wait_complete", "id": id2, "secs": 30}));
    c.next("complete");
    c.send(json!({"op": "call", "tool": "book_flight", "args": other}));
    let rejected = c.next("result")["result"].clone();
    assert_eq!(
        rejected["structuredContent"]["status"], "rejected",
        "{rejected}"
    );

    // One notice each, even after the bridge had time to read again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.send(json!({"op": "list"}));
    c.next("tools");
    assert_eq!(completions(&mut c, &id), 1, "{:#?}", c.seen);
    assert_eq!(completions(&mut c, &id2), 1, "{:#?}", c.seen);
    env.stop().await;
}

/// The pending-call bound of a session holds for calls made all at once:
/// the slot is taken when the call is checked, before the RS is asked.
#[actix_web::test]
async fn calls_made_at_once_in_one_session_stay_within_its_bound() {
    if !python_sdk() {
        return;
    }
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let bridge = start_bridge(&env, dir.path()).await;
    let mut c = Py::connect(&bridge.url, LEGACY);
    let bound = cheq::mcp::MAX_PENDING_PER_SESSION;
    let calls = bound + bound / 2;
    let args_list: Vec<Map<String, Value>> = (0..calls)
        .map(|i| {
            let mut args = flight_params();
            args.insert("price_usd".into(), json!(1_000 + i));
            args
        })
        .collect();
    c.send(json!({"op": "call_many", "tool": "book_flight", "args_list": args_list}));
    let outcomes = c.next("many")["outcomes"].clone();
    let outcomes = outcomes.as_array().unwrap();
    assert_eq!(outcomes.len(), calls);
    let mut pending = std::collections::HashSet::new();
    let mut busy = 0;
    for o in outcomes {
        if o["error"]["code"] == -32042 {
            let id = o["error"]["data"]["elicitations"][0]["elicitationId"].clone();
            assert!(id.is_string(), "{o}");
            pending.insert(id.to_string());
        } else if o["result"]["structuredContent"]["status"] == "busy" {
            busy += 1;
        } else {
            panic!("neither pending nor busy: {o}");
        }
    }
    assert_eq!(pending.len(), bound, "{busy} busy");
    assert_eq!(busy, calls - bound);

    // Full: one more is refused.
    let mut more = flight_params();
    more.insert("price_usd".into(), json!(5_000));
    c.send(json!({"op": "call", "tool": "book_flight", "args": more}));
    let refused = c.next("result")["result"].clone();
    assert_eq!(refused["structuredContent"]["status"], "busy", "{refused}");
    env.stop().await;
}

/// What the bridge sent the RS, counted by a TCP relay in front of it.
#[derive(Default)]
struct Counts {
    connections: std::sync::atomic::AtomicUsize,
    requests: std::sync::atomic::AtomicUsize,
    tokens: std::sync::atomic::AtomicUsize,
    reads: std::sync::atomic::AtomicUsize,
}

impl Counts {
    fn get(&self) -> (usize, usize, usize, usize) {
        use std::sync::atomic::Ordering::SeqCst;
        (
            self.connections.load(SeqCst),
            self.requests.load(SeqCst),
            self.tokens.load(SeqCst),
            self.reads.load(SeqCst),
        )
    }
}

fn occurrences(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// A TCP relay on loopback in front of the RS at `rs` (real sockets both
/// ways), as a reverse proxy whose address the RS's answers give as its own
/// (the RS's `host:port` in them becomes the relay's, of the same length),
/// so that result URIs are read through it too. It counts the connections
/// the bridge opens, its requests, its token requests and its reads of
/// result URIs, and makes the RS's `Retry-After: 1` on a pending result say
/// 9 s. It runs on a thread of its own, since the test's thread blocks while
/// it waits for the client.
fn counting_relay(rs: &str) -> (String, std::sync::Arc<Counts>) {
    let target = rs.trim_start_matches("http://").to_owned();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let me = listener.local_addr().unwrap().to_string();
    assert_eq!(me.len(), target.len(), "{me} and {target}");
    let url = format!("http://{me}");
    let counts = std::sync::Arc::new(Counts::default());
    let all = counts.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(relay(listener, target, me, all));
    });
    (url, counts)
}

/// Replaces every `from` in `bytes` with `to` (of the same length).
fn replace_all(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    let mut i = 0;
    while i + from.len() <= bytes.len() {
        if &bytes[i..i + from.len()] == from {
            bytes[i..i + from.len()].copy_from_slice(to);
            i += from.len();
        } else {
            i += 1;
        }
    }
}

async fn relay(
    listener: std::net::TcpListener,
    target: String,
    me: String,
    all: std::sync::Arc<Counts>,
) {
    use std::sync::atomic::Ordering::SeqCst;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    while let Ok((inbound, _)) = listener.accept().await {
        all.connections.fetch_add(1, SeqCst);
        let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
            continue;
        };
        let (mut from_bridge, mut to_bridge) = inbound.into_split();
        let (mut from_rs, mut to_rs) = outbound.into_split();
        let counts = all.clone();
        let (rs_host, relay_host) = (target.clone(), me.clone());
        tokio::spawn(async move {
            // Everything the bridge sent on this connection, so that a
            // request cut across two reads is counted once.
            let mut sent = Vec::new();
            let mut buf = vec![0u8; 16 * 1024];
            let mut seen = (0, 0, 0);
            while let Ok(n) = from_bridge.read(&mut buf).await {
                if n == 0 || to_rs.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                sent.extend_from_slice(&buf[..n]);
                let now = (
                    occurrences(&sent, b" HTTP/1.1\r\n"),
                    occurrences(&sent, b"POST /oauth/token "),
                    occurrences(&sent, b"GET /cheq/results/"),
                );
                counts.requests.fetch_add(now.0 - seen.0, SeqCst);
                counts.tokens.fetch_add(now.1 - seen.1, SeqCst);
                counts.reads.fetch_add(now.2 - seen.2, SeqCst);
                seen = now;
            }
            let _ = to_rs.shutdown().await;
        });
        tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            while let Ok(n) = from_rs.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let chunk = &mut buf[..n];
                replace_all(chunk, rs_host.as_bytes(), relay_host.as_bytes());
                let lower = chunk.to_ascii_lowercase();
                let needle = b"retry-after: 1\r\n";
                if let Some(at) = lower.windows(needle.len()).position(|w| w == needle) {
                    chunk[at + needle.len() - 3] = b'9';
                }
                if to_bridge.write_all(chunk).await.is_err() {
                    break;
                }
            }
            let _ = to_bridge.shutdown().await;
        });
    }
}

/// The bridge talks to the RS as one agent: one token for all its calls (not
/// one per call), its connections kept and reused (not one per request),
/// and a pending call's result read no sooner than the RS's `Retry-After`.
#[actix_web::test]
async fn the_bridge_keeps_one_token_and_its_connections_and_honours_retry_after() {
    if !python_sdk() {
        return;
    }
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let (relay, counts) = counting_relay(&env.rs_url);
    let bridge = start_bridge_to(&relay, dir.path(), &[]).await;
    let mut c = Py::connect(&bridge.url, LEGACY);
    c.send(json!({"op": "list"}));
    c.next("tools");
    for price in 10..16 {
        let mut args = cheap_flight();
        args.insert("price_usd".into(), json!(price));
        c.send(json!({"op": "call", "tool": "book_flight", "args": args}));
        let done = c.next("result")["result"].clone();
        assert_eq!(done["structuredContent"]["status"], "done", "{done}");
    }
    c.send(json!({"op": "call", "tool": "book_flight", "args": flight_params()}));
    c.next("elicit");

    // The bridge's first read of the result, then none before the 9 s
    // the RS (through the relay) asked for.
    let mut first = None;
    for _ in 0..200 {
        if counts.get().3 >= 1 {
            first = Some(std::time::Instant::now());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(first.is_some(), "the bridge never read the result");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (connections, requests, tokens, reads) = counts.get();
    // Read after the counts: a second read seen then was made sooner.
    let waited = first.map(|f| f.elapsed()).unwrap_or_default();
    assert_eq!(tokens, 1, "{requests} requests");
    assert!(requests >= 9, "{requests}");
    assert!(
        connections <= 2,
        "{connections} connections for {requests} requests"
    );
    assert!(
        reads == 1 || waited >= Duration::from_secs(9),
        "read again {waited:?} after the first, before Retry-After"
    );
    env.stop().await;
}

/// An `initialize` POST (2025-11-25) to the bridge at `url`: its session id.
async fn open_session(url: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let res = http_client()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.headers()["mcp-session-id"].to_str().unwrap().to_owned()
}

/// `DELETE /mcp` with its session id.
async fn delete(url: &str, session: Option<&str>, version: &str) -> u16 {
    let mut req = http_client()
        .delete(url)
        .header("mcp-protocol-version", version);
    if let Some(id) = session {
        req = req.header("mcp-session-id", id);
    }
    req.send().await.unwrap().status().as_u16()
}

/// MCP 2025-11-25, Streamable HTTP, session management: a client ends its
/// session with `DELETE`; the bridge answers `200 OK` (a status the
/// transport's clients read as success), then knows the session no more
/// (`404`, to a second `DELETE` and to a request in it). No session id is
/// `400`; a stateless (2026-07-28) `DELETE` is `405`. The official Python
/// SDK closes its session this way and warns nothing.
#[actix_web::test]
async fn a_session_ends_with_delete_and_the_sdk_warns_nothing() {
    let env = Env::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let bridge = start_bridge(&env, dir.path()).await;
    let url = bridge.url.as_str();

    let id = open_session(url).await;
    assert_eq!(delete(url, Some(&id), "2025-11-25").await, 200);
    assert_eq!(delete(url, Some(&id), "2025-11-25").await, 404);
    let in_ended = http_client()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", &id)
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(in_ended.status(), 404);
    assert_eq!(
        delete(url, Some("no-such-session"), "2025-11-25").await,
        404
    );
    assert_eq!(delete(url, None, "2025-11-25").await, 400);
    assert_eq!(delete(url, None, MODERN).await, 405);
    // Another session is not touched by the end of one.
    let kept = open_session(url).await;
    let other = open_session(url).await;
    assert_eq!(delete(url, Some(&other), "2025-11-25").await, 200);
    assert_eq!(delete(url, Some(&kept), "2025-11-25").await, 200);

    if !python_sdk() {
        env.stop().await;
        return;
    }
    // The SDK: a session opened, used and closed; what it says on stderr.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
    let mut child = Command::new("python3")
        .args([script, url, LEGACY])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{}", json!({"op": "list"})).unwrap();
        writeln!(stdin, "{}", json!({"op": "quit"})).unwrap();
    }
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("\"event\": \"tools\"") && stdout.contains("book_flight"),
        "{stdout}"
    );
    assert!(
        !stderr.contains("Session termination failed"),
        "the SDK's close was not understood: {stderr}"
    );
    env.stop().await;
}
