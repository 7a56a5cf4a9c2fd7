//! The HTTP pieces both servers share, so that each lives in one place: the
//! JSON error answer (PROTOCOL.md §6, §10, RFC 6749 §5.2), `Authorization`
//! header parsing (HTTP Basic, RFC 6749 §2.3.1; Bearer, RFC 6750), constant-time
//! comparison of secrets, reading a peer's JWKS (§9), the `healthz` and
//! `jwks.json` answers, JSON 404/405 fallbacks, the hourly collector and each
//! request's root span.
//!
//! This is a front-end layer: the domain modules (`confirm::flow`,
//! `resource::cheq_rs`) never import it.

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{json, Value};
use std::future::Future;
use std::time::Duration;

/// The root span of each request, for `tracing_actix_web::TracingLogger`:
/// the method, the route *pattern* (`/cheq/confirmations/{id}`), the
/// request id and, at the end, the status. Never the path or the query as sent: a path may be a
/// capability (a resource or result URI) and a query may carry an
/// authorization code, and every event inside the request is printed with
/// its span's fields. Built only when a subscriber takes INFO spans, so
/// that nothing is computed for a span that would be dropped. A server
/// error (5xx) is one ERROR event naming the route and what failed (error
/// texts never hold a token or a capability); refusals (4xx) are the
/// client's business and are not logged here.
pub struct RequestSpan;

/// What the request span names a request no route matched.
const UNMATCHED: &str = "(unmatched)";

impl tracing_actix_web::RootSpanBuilder for RequestSpan {
    fn on_request_start(request: &actix_web::dev::ServiceRequest) -> tracing::Span {
        if tracing::enabled!(tracing::Level::INFO) {
            use actix_web::HttpMessage as _;
            let route = request.match_pattern();
            let id = request
                .extensions()
                .get::<tracing_actix_web::RequestId>()
                .copied();
            tracing::info_span!(
                "HTTP request",
                http.method = %request.method(),
                http.route = %route.as_deref().unwrap_or(UNMATCHED),
                http.status_code = tracing::field::Empty,
                request_id = tracing::field::display(id.map(|i| i.to_string()).unwrap_or_default()),
            )
        } else {
            tracing::Span::none()
        }
    }

    fn on_request_end<B: actix_web::body::MessageBody>(
        span: tracing::Span,
        outcome: &Result<actix_web::dev::ServiceResponse<B>, actix_web::Error>,
    ) {
        let (status, error) = match outcome {
            Ok(res) => (res.status(), res.response().error()),
            Err(e) => (e.as_response_error().status_code(), Some(e)),
        };
        span.record("http.status_code", status.as_u16());
        if let (true, Some(e)) = (status.is_server_error(), error) {
            span.in_scope(|| {
                tracing::error!(
                    "answered {}: {}",
                    status.as_u16(),
                    crate::text::one_line(&e.to_string())
                )
            });
        }
    }
}

/// The request logger both servers wrap their apps in ([`RequestSpan`]).
pub fn request_logger() -> tracing_actix_web::TracingLogger<RequestSpan> {
    tracing_actix_web::TracingLogger::new()
}

/// A JSON error answer: `{"error": code, "error_description": description}`
/// plus optional members, with `Cache-Control: no-store`, and `Retry-After` or
/// `WWW-Authenticate` when set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    pub status: StatusCode,
    pub code: &'static str,
    pub description: String,
    /// `WWW-Authenticate` value, for 401 answers.
    pub challenge: Option<String>,
    /// `Retry-After` seconds, for 429 and 503 answers.
    pub retry_after: Option<i64>,
    /// More members of the body (an object), e.g. the problems of a form.
    pub extra: Option<Box<Value>>,
}

impl JsonError {
    pub fn new(status: StatusCode, code: &'static str, description: impl Into<String>) -> Self {
        JsonError {
            status,
            code,
            description: description.into(),
            challenge: None,
            retry_after: None,
            extra: None,
        }
    }

    /// The same error with a `WWW-Authenticate` challenge.
    pub fn with_challenge(mut self, challenge: impl Into<String>) -> Self {
        self.challenge = Some(challenge.into());
        self
    }

    /// The same error with more members in its body.
    pub fn with_extra(mut self, extra: Value) -> Self {
        self.extra = Some(Box::new(extra));
        self
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        let mut body = json!({"error": self.code, "error_description": self.description});
        if let (Some(extra), Some(map)) = (&self.extra, body.as_object_mut()) {
            if let Some(e) = extra.as_object() {
                for (k, v) in e {
                    map.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
        body
    }
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.description
        )
    }
}

impl std::error::Error for JsonError {}

impl ResponseError for JsonError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut res = HttpResponse::build(self.status);
        res.insert_header((header::CACHE_CONTROL, "no-store"));
        if let Some(challenge) = &self.challenge {
            res.insert_header((header::WWW_AUTHENTICATE, challenge.as_str()));
        }
        if let Some(s) = self.retry_after {
            res.insert_header((header::RETRY_AFTER, s.max(1).to_string()));
        }
        res.json(self.body())
    }
}

/// A JSON 404 for any path no route knows.
pub async fn json_not_found() -> Result<HttpResponse, JsonError> {
    Err(JsonError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such resource",
    ))
}

/// A JSON 405 for a method a route does not take.
pub async fn json_method_not_allowed() -> Result<HttpResponse, JsonError> {
    Err(JsonError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "method not allowed here",
    ))
}

/// A route whose unsupported methods get a JSON 405.
pub fn json_resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(json_method_not_allowed))
}

/// The `Authorization` header, if it is readable text.
pub fn authorization(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

/// Why an `Authorization` header could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthHeaderError {
    #[error("no Authorization header")]
    Missing,
    #[error("the Authorization header uses another scheme")]
    OtherScheme,
    #[error("the Authorization header is malformed")]
    Malformed,
}

fn form_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// Reads `Authorization: Basic …` into (client id, secret), each
/// form-urldecoded (RFC 6749 §2.3.1). The scheme name is case-insensitive.
pub fn parse_basic(value: Option<&str>) -> Result<(String, String), AuthHeaderError> {
    let value = value.ok_or(AuthHeaderError::Missing)?.trim();
    let (scheme, rest) = value.split_once(' ').ok_or(AuthHeaderError::Malformed)?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(AuthHeaderError::OtherScheme);
    }
    let bytes = STANDARD
        .decode(rest.trim())
        .map_err(|_| AuthHeaderError::Malformed)?;
    let text = String::from_utf8(bytes).map_err(|_| AuthHeaderError::Malformed)?;
    let (id, secret) = text.split_once(':').ok_or(AuthHeaderError::Malformed)?;
    Ok((form_decode(id), form_decode(secret)))
}

/// Reads `Authorization: Bearer …` (RFC 6750 §2.1); the scheme name is
/// case-insensitive.
pub fn parse_bearer(value: Option<&str>) -> Result<&str, AuthHeaderError> {
    let value = value.ok_or(AuthHeaderError::Missing)?.trim();
    match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
            let token = token.trim();
            if token.is_empty() {
                Err(AuthHeaderError::Malformed)
            } else {
                Ok(token)
            }
        }
        Some(_) => Err(AuthHeaderError::OtherScheme),
        None => Err(AuthHeaderError::Malformed),
    }
}

pub use crate::cheq::uri::origin_of;
pub use crate::sign::same_secret;

/// `GET /healthz`: alive.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// `GET /readyz`: 200 when the store answers (within the store's own
/// bound, 3 s for PostgreSQL) with a schema this binary knows, else 503
/// with the reason; `/healthz` stays a liveness check that never touches
/// the store.
pub async fn readyz<E: std::fmt::Display + Send + 'static>(
    check: impl FnOnce() -> Result<(), E> + Send + 'static,
) -> HttpResponse {
    let checked = actix_web::web::block(check).await;
    let problem = match checked {
        Ok(Ok(())) => {
            return HttpResponse::Ok()
                .insert_header((header::CACHE_CONTROL, "no-store"))
                .json(json!({"status": "ready"}))
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "the readiness check did not finish".to_owned(),
    };
    let mut e = JsonError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "not_ready",
        format!("the database is not ready for this instance: {problem}"),
    );
    e.retry_after = Some(1);
    e.error_response()
}

pub use crate::metrics::MetricsAccess;

/// The name of the metrics token's file in a data directory.
pub const METRICS_SECRET_FILE: &str = "metrics.secret";

/// The bearer token `GET /metrics` asks for ([`MetricsAccess::Token`]).
/// Its `Debug` shows nothing of it, and its bytes are wiped when dropped.
#[derive(Debug)]
pub struct MetricsToken(crate::keyfile::BearerSecret);

impl MetricsToken {
    /// What `access` asks for, with the token read from (or generated into)
    /// `data_dir`'s [`METRICS_SECRET_FILE`].
    pub fn for_access(
        access: MetricsAccess,
        data_dir: &std::path::Path,
    ) -> Result<Option<MetricsToken>, crate::keyfile::KeyFileError> {
        match access {
            MetricsAccess::Open => Ok(None),
            MetricsAccess::Token => Ok(Some(MetricsToken(
                crate::keyfile::BearerSecret::load_or_create(&data_dir.join(METRICS_SECRET_FILE))?,
            ))),
        }
    }

    /// Whether `req` carries this token (compared in constant time).
    pub fn allows(&self, req: &HttpRequest) -> bool {
        parse_bearer(authorization(req)).is_ok_and(|t| self.0.matches(t.as_bytes()))
    }
}

/// `GET /metrics` when `token` is required and `req` lacks it: 401 with a
/// Bearer challenge (a JSON error: a scraper reads it, not a person).
pub fn metrics_refused(token: Option<&MetricsToken>, req: &HttpRequest) -> Option<HttpResponse> {
    let token = token?;
    if token.allows(req) {
        return None;
    }
    Some(
        JsonError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            "the metrics need the bearer token of metrics.secret",
        )
        .with_challenge("Bearer realm=\"metrics\"")
        .error_response(),
    )
}

/// `GET /metrics`: the Prometheus text exposition.
pub fn metrics_response(text: String) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .content_type(crate::metrics::CONTENT_TYPE)
        .body(text)
}

/// `GET /.well-known/jwks.json` (§9): a server's public keys.
pub fn jwks_response(jwks: &Value) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "max-age=300"))
        .json(jwks)
}

/// Runs `job` every `every` (the first run after one period) on the tokio
/// runtime, until the handle is aborted. `what` names the job in logs; a job
/// returns how many things it collected, which is logged when not zero.
pub fn spawn_periodic<F, Fut>(
    what: &'static str,
    every: Duration,
    job: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Result<usize, String>> + Send,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tick.tick().await;
            match job().await {
                Ok(0) => {}
                Ok(n) => log::info!("{what}: collected {n}"),
                Err(e) => log::warn!("{what}: {e}"),
            }
        }
    })
}

/// The period of the collectors of expired state.
pub const COLLECT_EVERY: Duration = Duration::from_secs(3600);

/// HTTP worker threads for a server whose store calls wait on the network
/// (PostgreSQL) or not (sled answers from memory, and flushes on a blocking
/// thread): waiting threads leave the CPU to others.
pub fn workers_for(store_waits_on_network: bool) -> usize {
    if store_waits_on_network {
        16
    } else {
        2
    }
}

/// Blocking threads per HTTP worker (store calls and signing run there).
/// actix's default is 512 shared by the workers, and every thread that ever
/// ran holds its stack and its share of the allocator's memory: 32 requests
/// at once grew the demo past a hundred threads. A sled call waits for
/// a flush of a few milliseconds at most, and concurrent flushes are shared
/// (`store::group_commit`), so a few threads keep the CPU busy; a
/// PostgreSQL call waits on the network, so more may wait at once.
pub fn blocking_threads_for(store_waits_on_network: bool) -> usize {
    if store_waits_on_network {
        64
    } else {
        16
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::MessageBody;

    /// What a subscriber was told of spans: each new span's name and
    /// fields, then each value recorded later, as `name=value;`.
    #[derive(Clone, Default)]
    struct Spans(std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>);

    /// The values a span's `record` visits, as `name=value;`.
    fn fields(record: impl FnOnce(&mut dyn tracing::field::Visit)) -> String {
        let mut out = String::new();
        record(&mut |f: &tracing::field::Field, v: &dyn std::fmt::Debug| {
            out.push_str(&format!("{}={:?};", f.name(), v));
        });
        out
    }

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spans {
        fn on_new_span(
            &self,
            attrs: &tracing::span::Attributes<'_>,
            _id: &tracing::span::Id,
            _ctx: tracing_subscriber::layer::Context<'_, S>,
        ) {
            let name = attrs.metadata().name().to_owned();
            self.0
                .lock()
                .unwrap()
                .push((name, fields(|v| attrs.record(v))));
        }

        fn on_record(
            &self,
            _id: &tracing::span::Id,
            values: &tracing::span::Record<'_>,
            _ctx: tracing_subscriber::layer::Context<'_, S>,
        ) {
            let recorded = fields(|v| values.record(v));
            self.0.lock().unwrap().push(("record".to_owned(), recorded));
        }
    }

    /// Each request's root span is `tracing_actix_web`'s, with its fields and
    /// the status recorded at the end, when the subscriber takes INFO; under
    /// WARN none is made, and the request is answered the same.
    #[actix_web::test]
    async fn the_request_span_is_made_when_info_is_taken() {
        use tracing_subscriber::layer::SubscriberExt;
        for (level, wanted) in [
            (tracing_subscriber::filter::LevelFilter::INFO, true),
            (tracing_subscriber::filter::LevelFilter::WARN, false),
        ] {
            let spans = Spans::default();
            let subscriber = tracing_subscriber::registry()
                .with(level)
                .with(spans.clone());
            let _guard = tracing::subscriber::set_default(subscriber);
            let app =
                actix_web::test::init_service(actix_web::App::new().wrap(request_logger()).route(
                    "/x/{id}",
                    web::get().to(|| async { HttpResponse::Ok().finish() }),
                ))
                .await;
            let request = actix_web::test::TestRequest::get()
                .uri("/x/7?code=secret-code")
                .to_request();
            let res = actix_web::test::call_service(&app, request).await;
            assert_eq!(res.status(), StatusCode::OK);
            let seen = spans.0.lock().unwrap().clone();
            let roots: Vec<_> = seen.iter().filter(|(n, _)| n == "HTTP request").collect();
            if wanted {
                assert_eq!(roots.len(), 1, "{seen:?}");
                assert!(roots[0].1.contains("http.route=/x/{id};"), "{seen:?}");
                assert!(roots[0].1.contains("http.method=GET;"), "{seen:?}");
                // Neither the path as sent nor its query.
                assert!(
                    !seen
                        .iter()
                        .any(|(_, f)| f.contains("/x/7") || f.contains("secret-code")),
                    "{seen:?}"
                );
                assert!(
                    seen.iter()
                        .any(|(n, f)| n == "record" && f.contains("http.status_code=200;")),
                    "{seen:?}"
                );
            } else {
                assert!(roots.is_empty(), "{seen:?}");
            }
        }
    }

    /// A hand-written metrics token may end with a newline, but what is
    /// left must be 32 bytes or more; the token is compared whole.
    #[test]
    fn metrics_token_from_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(METRICS_SECRET_FILE);
        assert!(MetricsToken::for_access(MetricsAccess::Open, dir.path())
            .unwrap()
            .is_none());
        use std::os::unix::fs::PermissionsExt;
        let private = |file: &std::path::Path| {
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)).unwrap()
        };
        std::fs::write(&file, format!("{}\n\n\n\n\n", "s".repeat(31))).unwrap();
        private(&file);
        let short = MetricsToken::for_access(MetricsAccess::Token, dir.path()).unwrap_err();
        assert!(
            short.to_string().contains("shorter than 32 bytes"),
            "{short}"
        );
        let secret = "t".repeat(40);
        std::fs::write(&file, format!("{secret}\n")).unwrap();
        // Written by hand with the usual 0644: refused until made private.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let open = MetricsToken::for_access(MetricsAccess::Token, dir.path()).unwrap_err();
        assert!(open.to_string().contains("chmod 600"), "{open}");
        private(&file);
        let token = MetricsToken::for_access(MetricsAccess::Token, dir.path())
            .unwrap()
            .unwrap();
        assert_eq!(format!("{token:?}"), "MetricsToken(BearerSecret(..))");
        let with = |value: &str| {
            actix_web::test::TestRequest::default()
                .insert_header((header::AUTHORIZATION, value))
                .to_http_request()
        };
        assert!(token.allows(&with(&format!("Bearer {secret}"))));
        assert!(!token.allows(&with(&format!("Bearer {secret}x"))));
        assert!(!token.allows(&with(&format!("Bearer {}", &secret[..39]))));
        assert!(!token.allows(&actix_web::test::TestRequest::default().to_http_request()));
    }

    #[test]
    fn basic_and_bearer_headers() {
        let h = format!("Basic {}", STANDARD.encode("voice%2Dgw:s%3Ae:cret"));
        assert_eq!(
            parse_basic(Some(&h)).unwrap(),
            ("voice-gw".to_owned(), "s:e:cret".to_owned())
        );
        let lower = format!("basic {}", STANDARD.encode("a:b"));
        assert_eq!(parse_basic(Some(&lower)).unwrap().0, "a");
        assert_eq!(parse_basic(None), Err(AuthHeaderError::Missing));
        assert_eq!(
            parse_basic(Some("Bearer x")),
            Err(AuthHeaderError::OtherScheme)
        );
        assert_eq!(
            parse_basic(Some("Basic !!!")),
            Err(AuthHeaderError::Malformed)
        );
        let no_colon = format!("Basic {}", STANDARD.encode("abc"));
        assert_eq!(
            parse_basic(Some(&no_colon)),
            Err(AuthHeaderError::Malformed)
        );
        assert_eq!(parse_bearer(Some("Bearer  tok ")).unwrap(), "tok");
        assert_eq!(parse_bearer(Some("bearer tok")).unwrap(), "tok");
        assert_eq!(
            parse_bearer(Some("Bearer ")),
            Err(AuthHeaderError::Malformed)
        );
        assert_eq!(
            parse_bearer(Some("Basic tok")),
            Err(AuthHeaderError::OtherScheme)
        );
        assert_eq!(parse_bearer(None), Err(AuthHeaderError::Missing));
    }

    #[test]
    fn json_errors_carry_their_headers_and_members() {
        let mut e = JsonError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_attempts", "wait")
            .with_extra(json!({"problems": [], "error": "not overridden"}));
        e.retry_after = Some(0);
        let res = e.error_response();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(res.headers().get(header::RETRY_AFTER).unwrap(), "1");
        assert_eq!(
            res.headers().get(header::CACHE_CONTROL).unwrap(),
            "no-store"
        );
        let body = res.into_body().try_into_bytes().unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], "too_many_attempts");
        assert_eq!(v["error_description"], "wait");
        assert!(v["problems"].is_array());
        let e = JsonError::new(StatusCode::UNAUTHORIZED, "invalid_token", "no")
            .with_challenge("Bearer realm=\"cheq\"");
        assert_eq!(
            e.error_response()
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .unwrap(),
            "Bearer realm=\"cheq\""
        );
    }

    #[test]
    fn origins() {
        assert_eq!(
            origin_of("http://127.0.0.1:8081/cheq/x?y"),
            "http://127.0.0.1:8081"
        );
        assert_eq!(origin_of("https://a.example:443/"), "https://a.example");
        assert_eq!(origin_of("not a uri"), "not a uri");
    }
}
