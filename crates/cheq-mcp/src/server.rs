//! The MCP wire side of the bridge (PROTOCOL.md §11), on the Rust MCP SDK
//! (`rmcp`): one endpoint serving both MCP revisions. A client that opens
//! with `initialize` at 2025-11-25 gets a session and that revision; a
//! request carrying the 2026-07-28 per-request `_meta` (or `server/discover`)
//! is served statelessly by that revision. Served over Streamable HTTP at
//! `/mcp` ([`serve_http`]) or over standard input and output ([`serve_stdio`]).
//!
//! Over HTTP, a bridge given a bearer secret (`cheq mcp --token-file`) serves
//! only requests carrying `Authorization: Bearer <secret>` (RFC 6750), under
//! any `Host`; any other gets 401 with a Bearer challenge before MCP sees it.
//! Without one it serves loopback only (the CLI refuses any other address),
//! under its own loopback names (DNS rebinding). A request with a browser's
//! `Origin` is refused either way. A 2025-11-25 client ends its session with
//! `DELETE /mcp` and gets `200 OK` (`404` for a session that is not there;
//! the transport's session management).
//!
//! A call that needs confirmation is answered:
//! - at 2025-11-25: with a `URLElicitationRequiredError` (-32042) naming an
//!   opaque `elicitationId`, then `notifications/elicitation/complete` for it
//!   once the RS reports a final state, exactly once, whether the bridge's
//!   poller or the client's retry read that state first; the retried call
//!   returns the result;
//! - at 2026-07-28: with an `InputRequiredResult` holding a URL-mode
//!   `elicitation/create` and the sealed `requestState`; the retry carrying
//!   it gets the result, or the same elicitation while the user has not
//!   decided;
//! - to a client that declares no URL elicitation, at either revision: with
//!   a tool result naming the start link and a sealed handle, which the
//!   bridge's tool `confirmation_status` ([`STATUS_TOOL`]) takes.

use super::schema::tool_def;
use super::{Bridge, BridgeError, Elicitation, Final, Notifier, Outcome, Status};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomNotification,
    ElicitRequest, ElicitRequestParams, ErrorCode, Implementation, InputRequest,
    InputRequiredResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, ServerNotification, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;

/// The JSON-RPC code of `URLElicitationRequiredError` (MCP 2025-11-25).
pub const URL_ELICITATION_REQUIRED: i32 = -32042;
/// The key of the confirmation in an `InputRequiredResult`'s `inputRequests`.
pub const INPUT_KEY: &str = "cheq_confirmation";
/// The bridge's own tool that tells a client without URL elicitation where a
/// call stands (§11).
pub const STATUS_TOOL: &str = "confirmation_status";
/// The holder of handles given to stateless (2026-07-28) requests, which
/// have no session to bind them to.
const STATELESS_HOLDER: &str = "stateless";
/// How long sending `notifications/elicitation/complete` may take.
pub const NOTIFY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The revisions served.
pub const VERSIONS: &[ProtocolVersion] =
    &[ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28];

/// One MCP service instance: the shared bridge, and the session it serves
/// (a random key per 2025-11-25 session or stdio process; the binding of
/// pending confirmations at that revision).
#[derive(Clone)]
pub struct McpBridge {
    bridge: Arc<Bridge>,
    session: Arc<str>,
}

impl McpBridge {
    pub fn new(bridge: Arc<Bridge>) -> Self {
        let bytes: [u8; 16] = rand::random();
        McpBridge {
            bridge,
            session: cheq_core::sign::b64::encode(bytes).into(),
        }
    }
}

fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

fn supports_url_elicitation(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .and_then(|e| e.url)
        .is_some()
}

/// The one place where a bridge error becomes an MCP answer: a failure the
/// model should read is a tool result with `isError`; a refused request
/// state is an invalid-params protocol error.
fn answer_error(e: BridgeError) -> Result<CallToolResponse, McpError> {
    match e {
        BridgeError::State(s) => Err(McpError::invalid_params(
            format!("requestState refused: {s}"),
            None,
        )),
        BridgeError::Busy => Ok(tool_error(
            "busy",
            "Too many confirmations are pending at this bridge; try again later.",
        )),
        BridgeError::Rs(e) => Ok(tool_error("resource_server_error", &e.to_string())),
    }
}

fn tool_error(status: &str, text: &str) -> CallToolResponse {
    let mut r = CallToolResult::error(vec![ContentBlock::text(text.to_owned())]);
    r.structured_content = Some(json!({"status": status, "message": text}));
    CallToolResponse::Complete(r)
}

/// A final outcome as a tool result (never a protocol error, §11).
pub fn final_result(f: Final) -> CallToolResponse {
    match f {
        Final::Accepted(result) => {
            let body = json!({"status": "accepted", "result": result});
            let mut r = CallToolResult::success(vec![ContentBlock::text(body.to_string())]);
            r.structured_content = Some(body);
            CallToolResponse::Complete(r)
        }
        Final::Rejected => tool_error(
            "rejected",
            "The user rejected this request at the confirmation server. Nothing was done.",
        ),
        Final::Expired => tool_error(
            "expired",
            "The confirmation expired before the user decided. Nothing was done.",
        ),
    }
}

fn done_result(output: Value) -> CallToolResponse {
    let body = json!({"status": "done", "output": output});
    let mut r = CallToolResult::success(vec![ContentBlock::text(body.to_string())]);
    r.structured_content = Some(body);
    CallToolResponse::Complete(r)
}

/// The answer to a call: an error's, a done or final outcome's, or what
/// `pending` makes of a confirmation still to be given (the one thing each
/// way of asking does its own way).
fn respond(
    outcome: Result<Outcome, BridgeError>,
    pending: impl FnOnce(Elicitation, String) -> Result<CallToolResponse, McpError>,
) -> Result<CallToolResponse, McpError> {
    match outcome {
        Err(e) => answer_error(e),
        Ok(Outcome::Done(output)) => Ok(done_result(output)),
        Ok(Outcome::Final(f)) => Ok(final_result(f)),
        Ok(Outcome::Pending {
            elicitation,
            handle,
            ..
        }) => pending(elicitation, handle),
    }
}

fn url_elicitation(e: &Elicitation, id: &str) -> Value {
    json!({"mode": "url", "elicitationId": id, "url": e.url, "message": e.message})
}

impl McpBridge {
    async fn call_legacy(
        &self,
        tool: &str,
        args: &Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let peer = context.peer.clone();
        let notify: Notifier = Arc::new(move |id: &str| {
            let peer = peer.clone();
            let note = CustomNotification::new(
                "notifications/elicitation/complete",
                Some(json!({"elicitationId": id})),
            );
            tokio::spawn(async move {
                // A client that went away, or stopped reading, is not
                // waited for.
                let send = peer.send_notification(ServerNotification::CustomNotification(note));
                let _ = tokio::time::timeout(NOTIFY_TIMEOUT, send).await;
            });
        });
        let outcome = self
            .bridge
            .call_in_session(&self.session, tool, args, Some(notify))
            .await;
        respond(outcome, |elicitation, handle| {
            Err(McpError::new(
                ErrorCode(URL_ELICITATION_REQUIRED),
                "This request needs the user's confirmation at the confirmation server.",
                Some(json!({"elicitations": [url_elicitation(&elicitation, &handle)]})),
            ))
        })
    }

    async fn call_modern(
        &self,
        tool: &str,
        args: &Map<String, Value>,
        request: &CallToolRequestParams,
    ) -> Result<CallToolResponse, McpError> {
        let declined = request
            .input_responses
            .as_ref()
            .and_then(|r| r.get(INPUT_KEY))
            .and_then(|v| v.get("action").and_then(Value::as_str).map(str::to_owned));
        let outcome = self
            .bridge
            .call_stateless(tool, args, request.request_state.as_deref())
            .await;
        respond(outcome, |elicitation, handle| {
            if matches!(declined.as_deref(), Some("decline") | Some("cancel")) {
                return Ok(tool_error(
                    "not_confirmed",
                    "The user did not open the confirmation page, so the request was not confirmed. It stays pending at the confirmation server until it expires; call again with the same arguments to collect its outcome.",
                ));
            }
            let params = ElicitRequestParams::UrlElicitationParams {
                meta: None,
                message: elicitation.message,
                url: elicitation.url,
                elicitation_id: String::new(),
            };
            let mut requests = rmcp::model::InputRequests::new();
            requests.insert(
                INPUT_KEY.to_owned(),
                InputRequest::Elicitation(ElicitRequest::new(params)),
            );
            let mut result = InputRequiredResult::from_request_state(handle);
            result.input_requests = Some(requests);
            Ok(CallToolResponse::InputRequired(result))
        })
    }
}

impl McpBridge {
    /// Whom a handle made for this request is bound to: the session at
    /// 2025-11-25 (and over stdio), one name for all stateless requests.
    fn holder(&self, context: &RequestContext<RoleServer>) -> &str {
        if is_modern(context) {
            STATELESS_HOLDER
        } else {
            &self.session
        }
    }

    /// A call from a client without URL elicitation, on either revision
    /// (§11): a confirmation is a tool result naming the start link and a
    /// handle for [`STATUS_TOOL`].
    async fn call_without_url(
        &self,
        tool: &str,
        args: &Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let outcome = self
            .bridge
            .call_with_handle(self.holder(context), tool, args)
            .await;
        respond(outcome, |elicitation, handle| {
            Ok(confirmation_required(&elicitation, &handle))
        })
    }

    /// [`STATUS_TOOL`]: where the call of a handle stands.
    async fn status(
        &self,
        args: &Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(handle) = args.get("handle").and_then(Value::as_str) else {
            return Ok(tool_error(
                "invalid_arguments",
                "confirmation_status takes {\"handle\": \"<the handle a tool call gave>\"}.",
            ));
        };
        match self.bridge.status(self.holder(context), handle).await {
            Ok(Status::Final(f)) => Ok(final_result(f)),
            Ok(Status::Pending { tool, elicitation }) => {
                let text = format!(
                    "The user has not decided yet. {}: the user opens {} in a browser and decides there. Call confirmation_status again later; nothing is done unless the user accepts.",
                    elicitation.message, elicitation.url
                );
                let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
                r.structured_content = Some(json!({
                    "status": "pending",
                    "tool": tool,
                    "confirmation_url": elicitation.url,
                }));
                Ok(CallToolResponse::Complete(r))
            }
            Err(BridgeError::State(_)) => Ok(tool_error(
                "invalid_handle",
                "This handle was not given to this client by this bridge, was altered, or has expired.",
            )),
            Err(e) => answer_error(e),
        }
    }
}

/// The answer to a client without URL elicitation whose call needs
/// confirmation: not an error, the link and the handle, in the text too
/// (many clients show the model only the text).
fn confirmation_required(e: &Elicitation, handle: &str) -> CallToolResponse {
    let text = format!(
        "{}: this needs the user's confirmation. Ask the user to open {} in a browser and decide there. Then call the tool confirmation_status with {{\"handle\": \"{handle}\"}} to get the outcome; nothing is done unless the user accepts. Do not call this tool again for it: that would ask the user for a second confirmation.",
        e.message, e.url
    );
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(json!({
        "status": "confirmation_required",
        "confirmation_url": e.url,
        "handle": handle,
        "next": "call confirmation_status with the handle; calling this tool again starts a second confirmation",
    }));
    CallToolResponse::Complete(r)
}

/// The definition of [`STATUS_TOOL`].
fn status_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {"handle": {
            "type": "string",
            "description": "The handle a call that needs confirmation gave."
        }},
        "required": ["handle"],
        "additionalProperties": false
    });
    let schema = match schema {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let mut tool = Tool::new(
        STATUS_TOOL,
        "Where a call that needed the user's confirmation stands: pending, accepted (with the result), rejected or expired.",
        Arc::new(schema),
    );
    tool.title = Some("Confirmation status".to_owned());
    tool
}

impl ServerHandler for McpBridge {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("cheq-mcp", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools of a CHEQ resource server. A call that needs the user's confirmation \
                 asks the client to open the confirmation server's page in the user's browser, \
                 and the same call made again gives its outcome. A client that cannot open \
                 that page gets a link for the user and a handle instead: then call \
                 confirmation_status with the handle for the outcome, and do not call the tool \
                 again, which would ask for a second confirmation.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let signatures =
            self.bridge.tools().await.map_err(|e| {
                McpError::internal_error(format!("cannot list the tools: {e}"), None)
            })?;
        let mut tools = vec![status_tool()];
        for sig in &signatures {
            match tool_def(sig) {
                Ok(def) if def.name == STATUS_TOOL => {
                    tracing::warn!(
                        "the RS's tool {STATUS_TOOL} is not offered: the bridge's own has its name"
                    );
                }
                Ok(def) => {
                    let mut tool = Tool::new(def.name, def.description, Arc::new(def.input_schema));
                    tool.title = def.title;
                    tools.push(tool);
                }
                Err(e) => tracing::warn!(error = %e, "a tool of the RS is not offered"),
            }
        }
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tool = request.name.to_string();
        if !super::schema::valid_tool_name(&tool) {
            return Err(McpError::invalid_params("unknown tool", None));
        }
        let args = request.arguments.clone().unwrap_or_default();
        if tool == STATUS_TOOL {
            self.status(&args, &context).await
        } else if !supports_url_elicitation(&context) {
            self.call_without_url(&tool, &args, &context).await
        } else if is_modern(&context) {
            self.call_modern(&tool, &args, &request).await
        } else {
            self.call_legacy(&tool, &args, &context).await
        }
    }
}

/// Serves MCP over Streamable HTTP at `http://{addr}/mcp` until the process
/// ends. `bound` is called with the address actually bound.
pub async fn serve_http(
    bridge: Arc<Bridge>,
    addr: SocketAddr,
    token: Option<Arc<cheq_support::keyfile::BearerSecret>>,
    bound: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::TokioIo;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::session::SessionManager as _;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    use tower_service::Service as _;

    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let host = local.ip().to_string();
    let mut allowed = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
        format!("localhost:{}", local.port()),
        format!("{host}:{}", local.port()),
        host,
    ];
    if local.is_ipv6() {
        allowed.push(format!("[{}]:{}", local.ip(), local.port()));
    }
    let config = StreamableHttpServerConfig::default();
    // Without a token, only the bridge's own loopback names (DNS
    // rebinding); with one, any name the clients reach it by, since a page
    // that rebinds a name still has no token to send.
    let config = if token.is_some() {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(allowed)
    };
    let config = config
        // No browser page of any origin may drive the bridge.
        .enforce_origin_validation()
        .with_stateless_protocol_metadata_required(true);
    let sessions = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(
        move || Ok(McpBridge::new(bridge.clone())),
        sessions.clone(),
        config,
    );
    bound(local);
    loop {
        let (stream, _) = listener.accept().await?;
        let service = service.clone();
        let token = token.clone();
        let sessions = sessions.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(
                move |req: hyper::Request<hyper::body::Incoming>| {
                    let mut service = service.clone();
                    let token = token.clone();
                    let sessions = sessions.clone();
                    async move {
                        let mut req = req;
                        let refuse = |status: u16, body: Value, challenge: Option<&str>| {
                            let mut resp = hyper::Response::builder()
                                .status(status)
                                .header("content-type", "application/json")
                                .header("cache-control", "no-store");
                            if let Some(c) = challenge {
                                resp = resp.header("www-authenticate", c);
                            }
                            resp.body(Full::new(Bytes::from(body.to_string())).boxed())
                                .unwrap_or_default()
                        };
                        if req.uri().path() != "/mcp" {
                            let body = json!({"error": "not_found", "error_description": "the MCP endpoint is /mcp"});
                            return Ok::<_, std::convert::Infallible>(refuse(404, body, None));
                        }
                        if let Some(token) = &token {
                            if let Err(refusal) = bearer_check(token, req.headers()) {
                                let (status, error, description, challenge) = refusal.answer();
                                let body =
                                    json!({"error": error, "error_description": description});
                                return Ok(refuse(status, body, Some(challenge)));
                            }
                            // Checked: MCP has no use for it, so it goes no further.
                            req.headers_mut().remove(hyper::header::AUTHORIZATION);
                        }
                        // A DELETE names the session it ends: was it one?
                        let ended = match req.headers().get("mcp-session-id") {
                            Some(id) if req.method() == hyper::Method::DELETE => {
                                let id: Arc<str> = Arc::from(id.to_str().unwrap_or(""));
                                Some(sessions.has_session(&id).await.unwrap_or(false))
                            }
                            _ => None,
                        };
                        let res = service.call(req).await?;
                        Ok(match ended {
                            Some(known) if res.status() == hyper::StatusCode::ACCEPTED => {
                                let (status, body) = terminated(known);
                                refuse(status, body, None)
                            }
                            _ => res,
                        })
                    }
                },
            );
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// The answer to a `DELETE` that rmcp let through (MCP 2025-11-25,
/// Streamable HTTP, session management), given whether its session existed:
/// rmcp answers `202 Accepted` either way, which the transport does not
/// name and clients read as a failure (the Python SDK warns "Session
/// termination failed: 202"). An ended session is `200 OK`; an id that
/// names no session (ended before, or the bridge restarted) is `404`, as
/// the transport answers any request naming it. Refusals before that (no
/// session id, `405` for a stateless request) pass as rmcp makes them.
fn terminated(known: bool) -> (u16, Value) {
    if known {
        (200, json!({"ended": true}))
    } else {
        (
            404,
            json!({"error": "not_found", "error_description": "no such MCP session: it ended, or the bridge restarted"}),
        )
    }
}

/// Why a request was not let through to MCP.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// No `Authorization` header (RFC 6750 §3.1: no error code).
    Missing,
    /// More than one.
    Several,
    /// Another scheme, or another token.
    Wrong,
}

impl Refusal {
    /// Its status, JSON error and description, and Bearer challenge (RFC
    /// 6750 §3: an error code only when a token was offered).
    fn answer(&self) -> (u16, &'static str, &'static str, &'static str) {
        match self {
            Refusal::Missing => (
                401,
                "unauthorized",
                "the MCP endpoint needs the bearer token of the bridge's --token-file",
                "Bearer realm=\"mcp\"",
            ),
            Refusal::Several => (
                400,
                "invalid_request",
                "one Authorization header, please",
                "Bearer realm=\"mcp\", error=\"invalid_request\"",
            ),
            Refusal::Wrong => (
                401,
                "invalid_token",
                "that is not the bearer token of the bridge's --token-file",
                "Bearer realm=\"mcp\", error=\"invalid_token\"",
            ),
        }
    }
}

/// Whether `headers` carry `token` as `Authorization: Bearer` (RFC 6750:
/// the scheme in any case, the token compared in constant time).
fn bearer_check(
    token: &cheq_support::keyfile::BearerSecret,
    headers: &hyper::HeaderMap,
) -> Result<(), Refusal> {
    let mut values = headers.get_all(hyper::header::AUTHORIZATION).iter();
    let value = match (values.next(), values.next()) {
        (None, _) => return Err(Refusal::Missing),
        (Some(_), Some(_)) => return Err(Refusal::Several),
        (Some(value), None) => value,
    };
    let presented = value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim());
    match presented {
        Some(t) if token.matches(t.as_bytes()) => Ok(()),
        _ => Err(Refusal::Wrong),
    }
}

/// Serves MCP over standard input and output until the client closes it.
pub async fn serve_stdio(bridge: Arc<Bridge>) -> std::io::Result<()> {
    let running = McpBridge::new(bridge)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(())
}
