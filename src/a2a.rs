//! The A2A bridge's HTTP front end (`cheq a2a`; PROTOCOL.md "A2A binding",
//! CHEQ draft §6): the Agent Card at `/.well-known/agent-card.json`, the
//! JSON-RPC endpoint at `/` (A2A 1.0 §9; a streamed answer as server-sent
//! events), `/healthz`. What each request gives is decided in the crate
//! `cheq-a2a`, re-exported here.
//!
//! Like `cheq mcp`: a bridge given a bearer secret (`--token-file`) serves
//! only requests carrying `Authorization: Bearer <secret>` (the card
//! included: it lists the RS's tools), under any `Host`; without one it
//! serves loopback only, under its own loopback names (DNS rebinding). A
//! request carrying a browser's `Origin` is refused either way. Tasks are
//! bound to the credential that made them.

pub use cheq_a2a::*;

use crate::keyfile::BearerSecret;
use actix_web::http::header;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use std::sync::Arc;
use std::time::Duration;

/// Longest JSON-RPC request body.
pub const MAX_BODY: usize = 1024 * 1024;
/// A comment is sent on an idle event stream this often (proxies close
/// silent connections).
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The path of the Agent Card (A2A 1.0 §8.2, the well-known URI).
pub const CARD_PATH: &str = "/.well-known/agent-card.json";

struct Front {
    bridge: Arc<A2aBridge>,
    token: Option<Arc<BearerSecret>>,
    /// The loopback `Host` values served without a token.
    hosts: Vec<String>,
}

/// Why a request was refused before the bridge saw it.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A browser's `Origin`.
    Origin,
    /// Not one of the bridge's loopback host names (no token configured).
    Host,
    /// No bearer token, or another scheme.
    NoToken,
    /// Not the bridge's token.
    BadToken,
}

impl Refusal {
    fn response(&self) -> HttpResponse {
        let (status, error, description, challenge) = match self {
            Refusal::Origin => (
                403,
                "forbidden",
                "a request from a web page (with Origin) is not served",
                None,
            ),
            Refusal::Host => (
                403,
                "forbidden",
                "not one of the bridge's loopback host names",
                None,
            ),
            Refusal::NoToken => (
                401,
                "unauthorized",
                "the A2A bridge needs the bearer token of its --token-file",
                Some("Bearer realm=\"a2a\""),
            ),
            Refusal::BadToken => (
                401,
                "invalid_token",
                "that is not the bearer token of the bridge's --token-file",
                Some("Bearer realm=\"a2a\", error=\"invalid_token\""),
            ),
        };
        let mut res = HttpResponse::build(
            actix_web::http::StatusCode::from_u16(status)
                .unwrap_or(actix_web::http::StatusCode::FORBIDDEN),
        );
        if let Some(c) = challenge {
            res.insert_header((header::WWW_AUTHENTICATE, c));
        }
        res.json(serde_json::json!({"error": error, "error_description": description}))
    }
}

/// The loopback `Host` values of a bridge bound to `port`.
pub fn loopback_hosts(port: u16) -> Vec<String> {
    ["127.0.0.1", "localhost", "[::1]"]
        .iter()
        .map(|h| format!("{h}:{port}"))
        .collect()
}

/// The checks every request passes, and the owner of the tasks it makes.
fn admit(front: &Front, req: &HttpRequest) -> Result<Owner, Refusal> {
    if req.headers().contains_key(header::ORIGIN) {
        return Err(Refusal::Origin);
    }
    match &front.token {
        None => {
            let host = req
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("");
            if front.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
                Ok(Owner::from_credential(None))
            } else {
                Err(Refusal::Host)
            }
        }
        Some(token) => {
            let presented = crate::httpkit::parse_bearer(crate::httpkit::authorization(req))
                .map_err(|_| Refusal::NoToken)?;
            if token.matches(presented.as_bytes()) {
                Ok(Owner::from_credential(Some(presented.as_bytes())))
            } else {
                Err(Refusal::BadToken)
            }
        }
    }
}

async fn card(front: web::Data<Front>, req: HttpRequest) -> HttpResponse {
    if let Err(r) = admit(&front, &req) {
        return r.response();
    }
    match front.bridge.card().await {
        Ok(card) => HttpResponse::Ok().json(card),
        Err(e) => {
            tracing::warn!(error = %e, "the RS's tool list could not be read for the card");
            HttpResponse::ServiceUnavailable()
                .insert_header((header::RETRY_AFTER, "5"))
                .json(serde_json::json!({
                    "error": "unavailable",
                    "error_description": "the resource server's tools could not be listed",
                }))
        }
    }
}

/// The `A2A-Version` service parameter: the header, else the query
/// parameter (A2A 1.0 §3.2.6).
fn version(req: &HttpRequest) -> Option<String> {
    if let Some(v) = req.headers().get(VERSION_HEADER) {
        return v.to_str().ok().map(str::to_owned);
    }
    url::form_urlencoded::parse(req.query_string().as_bytes())
        .find(|(k, _)| k.eq_ignore_ascii_case(VERSION_HEADER))
        .map(|(_, v)| v.into_owned())
}

async fn rpc(front: web::Data<Front>, req: HttpRequest, payload: web::Payload) -> HttpResponse {
    let owner = match admit(&front, &req) {
        Ok(o) => o,
        Err(r) => return r.response(),
    };
    let body = match payload.to_bytes_limited(MAX_BODY).await {
        Ok(Ok(body)) => body,
        Err(_) => {
            return HttpResponse::PayloadTooLarge().json(
                A2aError::InvalidRequest("the body is larger than 1 MiB")
                    .response(&serde_json::Value::Null),
            )
        }
        Ok(Err(_)) => {
            return HttpResponse::BadRequest()
                .json(A2aError::Parse.response(&serde_json::Value::Null))
        }
    };
    match front
        .bridge
        .handle(&owner, version(&req).as_deref(), &body)
        .await
    {
        Reply::Single(v) => HttpResponse::Ok().json(v),
        Reply::Stream(events) => sse(events),
    }
}

fn sse_event(v: &serde_json::Value) -> web::Bytes {
    web::Bytes::from(format!("data: {v}\n\n"))
}

/// A task's events as server-sent events, a keep-alive comment while idle;
/// the stream ends after the terminal state.
fn sse(events: TaskEvents) -> HttpResponse {
    let stream = futures_util::stream::unfold(Some(events), |state| async move {
        let mut events = state?;
        tokio::select! {
            items = events.next() => {
                let items = items?;
                let bytes: Vec<u8> = items.iter().flat_map(|v| sse_event(v).to_vec()).collect();
                Some((Ok::<_, std::convert::Infallible>(web::Bytes::from(bytes)), Some(events)))
            }
            _ = tokio::time::sleep(KEEP_ALIVE) => {
                Some((Ok(web::Bytes::from_static(b": keep-alive\n\n")), Some(events)))
            }
        }
    });
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .streaming(stream)
}

async fn not_found() -> HttpResponse {
    HttpResponse::NotFound().json(serde_json::json!({"error": "not_found"}))
}

/// Serves `bridge` on `listener` (already bound) until stopped.
pub fn serve(
    listener: std::net::TcpListener,
    bridge: Arc<A2aBridge>,
    token: Option<Arc<BearerSecret>>,
) -> std::io::Result<actix_web::dev::Server> {
    let port = listener.local_addr()?.port();
    let front = web::Data::new(Front {
        bridge,
        token,
        hosts: loopback_hosts(port),
    });
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(front.clone())
            .wrap(crate::httpkit::request_logger())
            .route(CARD_PATH, web::get().to(card))
            .route("/", web::post().to(rpc))
            .route("/healthz", web::get().to(crate::httpkit::healthz))
            .default_service(web::to(not_found))
    })
    .workers(2)
    .listen(listener)?
    .run())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn front(token: Option<&[u8]>) -> Front {
        let dir = tempfile::tempdir().unwrap();
        let token = token.map(|t| {
            let path = dir.path().join("token");
            std::fs::write(&path, t).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            Arc::new(BearerSecret::load_or_create(&path).unwrap())
        });
        Front {
            bridge: Arc::new(
                A2aBridge::new(
                    A2aConfig {
                        rs: "http://127.0.0.1:1".into(),
                        client_id: "agent".into(),
                        secret: "s".into(),
                        endpoint: "http://127.0.0.1:9/".into(),
                        bearer: token.is_some(),
                    },
                    Arc::new(crate::store::a2a::MemoryTasks::default()),
                )
                .unwrap(),
            ),
            token,
            hosts: loopback_hosts(9),
        }
    }

    const TOKEN: &[u8] = b"0123456789abcdef0123456789abcdef-token";

    #[test]
    fn a_browser_origin_is_refused_with_or_without_a_token() {
        for f in [front(None), front(Some(TOKEN))] {
            let req = TestRequest::default()
                .insert_header((header::HOST, "127.0.0.1:9"))
                .insert_header((header::ORIGIN, "https://evil.example"))
                .insert_header((
                    header::AUTHORIZATION,
                    "Bearer 0123456789abcdef0123456789abcdef-token",
                ))
                .to_http_request();
            assert_eq!(admit(&f, &req), Err(Refusal::Origin));
        }
    }

    #[test]
    fn without_a_token_only_loopback_host_names() {
        let f = front(None);
        let ok = TestRequest::default()
            .insert_header((header::HOST, "localhost:9"))
            .to_http_request();
        assert!(admit(&f, &ok).is_ok());
        for host in ["rebound.example:9", "127.0.0.1:10", ""] {
            let req = TestRequest::default()
                .insert_header((header::HOST, host))
                .to_http_request();
            assert_eq!(admit(&f, &req), Err(Refusal::Host), "{host}");
        }
    }

    #[test]
    fn with_a_token_only_its_bearer() {
        let f = front(Some(TOKEN));
        let with = |v: Option<&str>| {
            let mut r = TestRequest::default().insert_header((header::HOST, "any.example"));
            if let Some(v) = v {
                r = r.insert_header((header::AUTHORIZATION, v));
            }
            admit(&f, &r.to_http_request())
        };
        assert!(with(Some("Bearer 0123456789abcdef0123456789abcdef-token")).is_ok());
        assert_eq!(with(None), Err(Refusal::NoToken));
        assert_eq!(with(Some("Basic eDp5")), Err(Refusal::NoToken));
        assert_eq!(
            with(Some("Bearer 0123456789abcdef0123456789abcdef-tokeN")),
            Err(Refusal::BadToken)
        );
    }
}
