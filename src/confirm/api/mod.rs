//! The raw API for voice gateways (PROTOCOL.md §10): JSON in and out, a thin
//! front end over the same flow as the pages ([`crate::confirm::flow`]).
//!
//! | route | what |
//! |---|---|
//! | `POST /api/v1/token` | gateway (HTTP Basic) + `username` + `pin` → a short-lived user token |
//! | `POST /api/v1/confirmations` | `{"resource uri"}` → `201` and a confirmation view |
//! | `GET /api/v1/confirmations/{id}` | the confirmation view |
//! | `POST /api/v1/confirmations/{id}/decision` | `{"decision","collected","acknowledge_warnings","view"}` |
//! | `POST /api/v1/resource-servers` | a resource server registers itself (§16.3) |
//!
//! Errors are [`JsonError`]s; a flow error gets its status from the one table
//! of [`crate::confirm::status`] ([`json_error`]). A token stands for one user
//! and one gateway ([`ApiUser`]); a user only ever sees and decides
//! confirmations whose subject is theirs (403). Failed attempts are limited
//! per user and per gateway (429 + `Retry-After`).

pub mod doc;
mod gateway;
mod registration;
mod views;

pub use gateway::{ApiUser, TokenForm, Tokens};
pub use registration::registration_error;
pub use views::{decided_status, open_view, ConfirmationView, DecisionAnswer};

use crate::cheq::{Channel, Decision};
use crate::confirm::auth::{Limiter, LocalLogin};
use crate::confirm::config::GatewayConfig;
use crate::confirm::flow::{Collected, Cs, CsError, DecideError, Decided, DecisionRequest};
use crate::httpkit::{authorization, JsonError};
use crate::store::cs::{Delivery, Refusal};
use actix_web::http::{header, Method, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use indexmap::IndexMap;
use serde_json::{json, Value};
use std::sync::Arc;

/// Largest JSON body read.
pub const MAX_BODY: usize = 64 * 1024;

/// The JSON error of a flow error: status and code from the one table.
pub fn json_error(e: CsError) -> JsonError {
    let (status, code) = crate::confirm::status::of(&e);
    let description = match &e {
        CsError::Internal(detail) => {
            log::error!(
                "internal error: {}",
                crate::text::one_line(&detail.to_string())
            );
            "internal error".to_owned()
        }
        CsError::Unavailable(detail) => {
            log::warn!("{}", crate::text::one_line(&detail.to_string()));
            e.to_string()
        }
        CsError::SigningUnavailable(detail) => {
            log::error!(
                "cannot sign: {}",
                crate::text::one_line(&detail.to_string())
            );
            e.to_string()
        }
        e => e.to_string(),
    };
    let mut err = JsonError::new(status, code, description);
    err.retry_after = match e {
        CsError::TooManyAttempts { retry_after } | CsError::KeysPending { retry_after, .. } => {
            Some(retry_after)
        }
        CsError::Busy | CsError::Unavailable(_) => Some(1),
        CsError::SigningUnavailable(_) => Some(crate::confirm::status::SIGNING_RETRY_AFTER),
        _ => None,
    };
    err
}

/// Where resource servers register (§16.3).
pub const REGISTRATION_PATH: &str = "/api/v1/resource-servers";

fn bad(description: impl Into<String>) -> JsonError {
    JsonError::new(StatusCode::BAD_REQUEST, "invalid_request", description)
}

/// The raw API's state: gateways, tokens, limiter.
pub struct Api {
    cs: Arc<Cs>,
    login: LocalLogin,
    gateways: Vec<GatewayConfig>,
    tokens: Tokens,
    token_ttl: i64,
    limiter: Limiter,
    log_key: Vec<u8>,
    /// Takes registrations of resource servers (§16.3); none: they are
    /// refused as off.
    registrar: Option<Arc<crate::confirm::registration::Registrar>>,
    /// See [`client_address`].
    pub trusted_proxies: Vec<std::net::IpAddr>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api").finish_non_exhaustive()
    }
}

impl Api {
    pub fn new(
        cs: Arc<Cs>,
        login: LocalLogin,
        gateways: Vec<GatewayConfig>,
        token_ttl: i64,
        limiter: Limiter,
        log_key: Vec<u8>,
        token_secret: &[u8],
    ) -> Self {
        Api {
            cs,
            login,
            gateways,
            tokens: Tokens::new(token_secret),
            token_ttl,
            limiter,
            log_key,
            registrar: None,
            trusted_proxies: Vec::new(),
        }
    }

    /// The same API, taking registrations of resource servers (§16.3)
    /// through `registrar`.
    pub fn with_registrar(
        mut self,
        registrar: Arc<crate::confirm::registration::Registrar>,
    ) -> Self {
        self.registrar = Some(registrar);
        self
    }

    /// The key of the digests that stand for typed names in log lines.
    fn log_key(&self) -> &[u8] {
        &self.log_key
    }
}

/// The client's address, as limits count it: the connecting peer, or, when
/// the peer is one of `trusted` proxies, the nearest address in
/// `X-Forwarded-For` that is not a trusted proxy; an IPv6 address counts as
/// its /64 (one network hands out a whole /64).
pub(crate) fn client_address(req: &HttpRequest, trusted: &[std::net::IpAddr]) -> String {
    let Some(peer) = req.peer_addr().map(|a| a.ip()) else {
        return "?".into();
    };
    let mut client = peer;
    if trusted.contains(&peer) {
        let forwarded = req
            .headers()
            .get_all("x-forwarded-for")
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|a| a.trim().parse::<std::net::IpAddr>())
            .collect::<Vec<_>>();
        for hop in forwarded.iter().rev() {
            match hop {
                Ok(ip) if trusted.contains(ip) => continue,
                Ok(ip) => {
                    client = *ip;
                    break;
                }
                // An unreadable hop: count the proxy's own address.
                Err(_) => break,
            }
        }
    }
    counted_address(client)
}

/// An address as limits count it: IPv4 as is, IPv6 by its /64.
pub(crate) fn counted_address(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
}

/// One route of the raw API: its method, its path, and how its handler is
/// added to the path's resource. [`configure`] registers exactly these, and
/// the OpenAPI description ([`doc::ApiDoc`]) must name exactly these
/// (`tests/openapi.rs` checks both, over a real socket).
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    add: fn(actix_web::Resource) -> actix_web::Resource,
}

/// Every route of the raw API.
pub static ROUTES: [Route; 6] = [
    Route {
        method: Method::POST,
        path: "/api/v1/token",
        add: |r| r.route(web::post().to(token)),
    },
    Route {
        method: Method::POST,
        path: "/api/v1/confirmations",
        add: |r| r.route(web::post().to(create)),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/confirmations/{id}",
        add: |r| r.route(web::get().to(get)),
    },
    Route {
        method: Method::POST,
        path: "/api/v1/confirmations/{id}/decision",
        add: |r| r.route(web::post().to(decide)),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/openapi.json",
        add: |r| r.route(web::get().to(openapi_document)),
    },
    Route {
        method: Method::POST,
        path: REGISTRATION_PATH,
        add: |r| r.route(web::post().to(registration::register)),
    },
];

/// Registers the raw API's routes ([`ROUTES`]). Every answer under
/// `/api/v1/` is JSON (§10): an unknown path is a JSON 404, a wrong method a
/// JSON 405 that names the methods of the path in `Allow`, an unreadable
/// path parameter a JSON 404.
pub fn configure(cfg: &mut web::ServiceConfig, api: web::Data<Api>) {
    cfg.app_data(api);
    let mut paths: Vec<&'static str> = Vec::new();
    for r in &ROUTES {
        if !paths.contains(&r.path) {
            paths.push(r.path);
        }
    }
    for path in paths {
        let routes: Vec<&Route> = ROUTES.iter().filter(|r| r.path == path).collect();
        let allow = routes
            .iter()
            .map(|r| r.method.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let mut resource = web::resource(path)
            .app_data(web::PathConfig::default().error_handler(|_, _| {
                JsonError::new(StatusCode::NOT_FOUND, "not_found", "no such resource").into()
            }))
            .default_service(web::to(move || {
                let allow = allow.clone();
                async move { method_not_allowed(&allow) }
            }));
        for r in routes {
            resource = (r.add)(resource);
        }
        cfg.service(resource);
    }
    cfg.service(web::resource("/api/v1").to(crate::httpkit::json_not_found))
        .service(web::resource("/api/v1/{tail:.*}").to(crate::httpkit::json_not_found));
}

/// The JSON 405 of a path that takes only the methods `allow` (named in
/// `Allow`, RFC 9110 §15.5.6).
fn method_not_allowed(allow: &str) -> HttpResponse {
    use actix_web::ResponseError;
    let mut res = JsonError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("method not allowed here (allowed: {allow})"),
    )
    .error_response();
    if let Ok(value) = header::HeaderValue::from_str(allow) {
        res.headers_mut().insert(header::ALLOW, value);
    }
    res
}

/// Reads a body of at most [`MAX_BODY`] bytes of media type `media`
/// (`application/json` or `application/x-www-form-urlencoded`); JSON 413
/// and 415 otherwise.
async fn read_body(
    req: &HttpRequest,
    payload: web::Payload,
    media: &str,
) -> Result<web::Bytes, JsonError> {
    let given = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    if given.as_deref() != Some(media) {
        return Err(JsonError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("the body must be {media}"),
        ));
    }
    match payload.to_bytes_limited(MAX_BODY).await {
        Ok(Ok(body)) => Ok(body),
        Err(_) => Err(json_error(CsError::PayloadTooLarge)),
        Ok(Err(e)) => Err(bad(format!("the body could not be read: {e}"))),
    }
}

fn parse_json(body: &[u8]) -> Result<Value, JsonError> {
    let v = crate::cheq::json::parse_value(body, MAX_BODY)
        .map_err(|e| bad(format!("the body is not acceptable JSON: {e}")))?;
    if !v.is_object() {
        return Err(bad("the body must be a JSON object"));
    }
    Ok(v)
}

/// `POST /api/v1/token` (§10): a user token for a gateway that knows the
/// user's voice PIN.
#[utoipa::path(
    post,
    path = "/api/v1/token",
    tag = "raw API",
    operation_id = "token",
    request_body(content = doc::TokenRequest, content_type = "application/x-www-form-urlencoded"),
    security(("gateway" = [])),
    responses(
        (status = 200, description = "A user token (`Cache-Control: no-store`).", body = doc::TokenAnswer),
        (status = 400, description = "`invalid_request`: the form is unreadable, or `username` or `pin` is missing.", body = doc::ErrorBody),
        (status = 401, description = "`invalid_client`: the gateway's Basic credentials are missing or wrong (with `WWW-Authenticate`); `invalid_grant`: the user name or PIN is wrong.", body = doc::ErrorBody,
            headers(("WWW-Authenticate" = String, description = "With `invalid_client`: `Basic realm=\"cheq\"`."))),
        (status = 413, description = "`too_large`: the body is over 64 KiB.", body = doc::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: the body is not `application/x-www-form-urlencoded`.", body = doc::ErrorBody),
        (status = 429, description = "`too_many_attempts`: too many failed attempts from this address or for this gateway.", body = doc::ErrorBody,
            headers(("Retry-After" = i64, description = "Seconds to wait."))),
        (status = 500, description = "`server_error`.", body = doc::ErrorBody),
        (status = 503, description = "`busy`: too many checks waiting; `unavailable`: the database does not answer.", body = doc::ErrorBody,
            headers(("Retry-After" = i64, description = "Seconds to wait."))),
    )
)]
async fn token(
    api: web::Data<Api>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, JsonError> {
    let body = read_body(&req, payload, "application/x-www-form-urlencoded").await?;
    let form: TokenForm = serde_urlencoded::from_bytes(&body).map_err(|e| {
        bad(format!(
            "the body must be application/x-www-form-urlencoded: {e}"
        ))
    })?;
    let address = client_address(&req, &api.trusted_proxies);
    let answer = api.issue(authorization(&req), &address, form).await?;
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(answer))
}

async fn view(api: &Api, id: &str, who: &ApiUser) -> Result<ConfirmationView, JsonError> {
    Ok(match api.cs.load(id, &who.0).await.map_err(json_error)? {
        crate::confirm::flow::Loaded::Open(open) => {
            ConfirmationView::Open(open_view(id, &open.view))
        }
        crate::confirm::flow::Loaded::Decided(r) => match refused(&r) {
            Some(e) => return Err(e),
            None => ConfirmationView::Decided(views::decided_view(id, &r)),
        },
    })
}

/// `GET /api/v1/openapi.json`: this API's OpenAPI description (see `doc`).
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "raw API",
    operation_id = "openapi",
    security(()),
    responses(
        (status = 200, description = "This description (OpenAPI 3.1), as checked in at `docs/openapi.json`.", body = Object),
    )
)]
async fn openapi_document() -> HttpResponse {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HttpResponse::Ok()
        .content_type("application/json")
        .body(TEXT.get_or_init(doc::openapi_json).as_str())
}

/// `POST /api/v1/confirmations` (§10, §2): starts a confirmation of a
/// resource URI and answers its view.
#[utoipa::path(
    post,
    path = "/api/v1/confirmations",
    tag = "raw API",
    operation_id = "create_confirmation",
    request_body(content = doc::CreateRequest, content_type = "application/json"),
    security(("user_token" = [])),
    responses(
        (status = 201, description = "The confirmation view: open, or decided when it was decided before.", body = ConfirmationView,
            headers(("Location" = String, description = "`/api/v1/confirmations/{id}`."))),
        (status = 400, description = "`invalid_request`: the body is not a JSON object with a non-blank string `resource uri`; `unregistered_resource_server`: the resource URI is not under a registered resource server (§2; nothing is fetched).", body = doc::ErrorBody),
        (status = 401, description = "`invalid_token`: the bearer token is missing, unknown or expired (with `WWW-Authenticate`); `reauthentication_required`: this resource server wants a fresher sign-in.", body = doc::ErrorBody,
            headers(("WWW-Authenticate" = String, description = "With `invalid_token`."))),
        (status = 403, description = "`forbidden`: the CHEQ is for another user.", body = doc::ErrorBody),
        (status = 404, description = "`unknown_at_resource_server`: the resource server does not know this resource URI.", body = doc::ErrorBody),
        (status = 409, description = "`refused_by_resource_server`: the resource server refused the earlier decision.", body = doc::ErrorBody),
        (status = 410, description = "`expired`: the CHEQ has expired; `gone`: the resource server says it expired or was decided.", body = doc::ErrorBody),
        (status = 413, description = "`too_large`: the body is over 64 KiB.", body = doc::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: the body is not `application/json`.", body = doc::ErrorBody),
        (status = 422, description = "`not_countersignable`: the CHEQ lacks what a countersignature needs (§4).", body = doc::ErrorBody),
        (status = 500, description = "`server_error`.", body = doc::ErrorBody),
        (status = 502, description = "`resource_server_unreachable`; `untrusted_cheq`: the CHEQ failed a rule of §5.", body = doc::ErrorBody),
        (status = 503, description = "`unavailable`: the database does not answer; `keys_pending`: the RS signed with a key not read yet (§9), ask again after `Retry-After`.", body = doc::ErrorBody,
            headers(("Retry-After" = i64, description = "Seconds to wait."))),
        (status = 504, description = "`resource_server_timeout`.", body = doc::ErrorBody),
    )
)]
async fn create(
    api: web::Data<Api>,
    who: ApiUser,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, JsonError> {
    let body = parse_json(&read_body(&req, payload, "application/json").await?)?;
    let uri = body
        .get("resource uri")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| bad("the member \"resource uri\" (a string) is required"))?;
    let id = api.cs.start(uri).map_err(json_error)?;
    let view = view(&api, &id, &who).await?;
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/api/v1/confirmations/{id}")))
        .json(view))
}

/// `GET /api/v1/confirmations/{id}` (§10): the confirmation view.
#[utoipa::path(
    get,
    path = "/api/v1/confirmations/{id}",
    tag = "raw API",
    operation_id = "get_confirmation",
    params(("id" = String, Path, description = "The confirmation's id (the `id` of its view).")),
    security(("user_token" = [])),
    responses(
        (status = 200, description = "The confirmation view: open, or decided.", body = ConfirmationView),
        (status = 400, description = "`unregistered_resource_server`: its resource server is no longer registered.", body = doc::ErrorBody),
        (status = 401, description = "`invalid_token` (with `WWW-Authenticate`); `reauthentication_required`.", body = doc::ErrorBody,
            headers(("WWW-Authenticate" = String, description = "With `invalid_token`."))),
        (status = 403, description = "`forbidden`: the confirmation is another user's.", body = doc::ErrorBody),
        (status = 404, description = "`not_found`: no such confirmation; `unknown_at_resource_server`.", body = doc::ErrorBody),
        (status = 409, description = "`refused_by_resource_server`: the resource server refused the decision.", body = doc::ErrorBody),
        (status = 410, description = "`expired`; `gone`.", body = doc::ErrorBody),
        (status = 422, description = "`not_countersignable`.", body = doc::ErrorBody),
        (status = 500, description = "`server_error`.", body = doc::ErrorBody),
        (status = 502, description = "`resource_server_unreachable`; `untrusted_cheq`.", body = doc::ErrorBody),
        (status = 503, description = "`unavailable`; `keys_pending` (§9).", body = doc::ErrorBody,
            headers(("Retry-After" = i64, description = "Seconds to wait."))),
        (status = 504, description = "`resource_server_timeout`.", body = doc::ErrorBody),
    )
)]
async fn get(
    api: web::Data<Api>,
    who: ApiUser,
    id: web::Path<String>,
) -> Result<HttpResponse, JsonError> {
    let view = view(&api, &id, &who).await?;
    Ok(HttpResponse::Ok().json(view))
}

/// The answer for a decision the RS refused: never "accepted" for something
/// the RS will not carry out (the same for `GET` and for the decision).
fn refused(record: &crate::store::cs::DecisionRecord) -> Option<JsonError> {
    let Delivery::Refused { refusal, .. } = &record.delivery else {
        return None;
    };
    let reason = match refusal {
        Refusal::ResourceServer { error, .. } => error.as_str(),
        Refusal::Unregistered => "the resource server is no longer registered",
        Refusal::Unsealable => "the sealed decision could not be opened",
    };
    Some(
        JsonError::new(
            StatusCode::CONFLICT,
            "refused_by_resource_server",
            format!(
                "the resource server refused the decision: {}",
                crate::text::snippet(reason.as_bytes(), 200)
            ),
        )
        .with_extra(json!({
            "decision": record.decision,
            "decided_at": views::rfc3339(record.decided_at),
            "delivery": views::delivery_word(&record.delivery),
        })),
    )
}

/// The body of a decision: `decision`, `collected`, `acknowledge_warnings`,
/// `view`.
fn decision_request(body: &Value) -> Result<DecisionRequest, JsonError> {
    let decision = body
        .get("decision")
        .and_then(Value::as_str)
        .and_then(Decision::parse)
        .ok_or_else(|| bad("\"decision\" must be \"accept\" or \"reject\""))?;
    let mut collected = IndexMap::new();
    match body.get("collected") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let v = v
                    .as_str()
                    .ok_or_else(|| bad(format!("collected \"{k}\" must be a string")))?;
                collected.insert(k.clone(), v.to_owned());
            }
        }
        Some(_) => return Err(bad("\"collected\" must be an object")),
    }
    let warnings_acknowledged = body
        .get("acknowledge_warnings")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // §10: the digest of the view read out is required, so that
    // `cheq_view` always names text that was actually read.
    let view_digest = match body.get("view") {
        Some(Value::String(d)) if !d.is_empty() => d.clone(),
        None | Some(Value::Null) => {
            return Err(bad(
                "\"view\" is required: the voice.digest of the view that was read out",
            ))
        }
        Some(_) => return Err(bad("\"view\" must be the string voice.digest")),
    };
    Ok(DecisionRequest {
        decision,
        channel: Channel::Voice,
        view_digest: Some(view_digest),
        collected: Collected::ByName(collected),
        warnings_acknowledged,
        // A voice decision cannot carry a passkey (§14).
        passkey: None,
    })
}

/// `POST /api/v1/confirmations/{id}/decision` (§10, §5, §6): the user's
/// decision on the view that was read out.
#[utoipa::path(
    post,
    path = "/api/v1/confirmations/{id}/decision",
    tag = "raw API",
    operation_id = "decide",
    params(("id" = String, Path, description = "The confirmation's id.")),
    request_body(content = doc::DecisionRequestBody, content_type = "application/json"),
    security(("user_token" = [])),
    responses(
        (status = 200, description = "The decision was countersigned and recorded (or the same decision was made before).", body = DecisionAnswer),
        (status = 400, description = "`invalid_request`: `decision` is not `accept` or `reject`, `view` is missing or not a string, `collected` is not an object of strings, or the body is not a JSON object; `unregistered_resource_server`.", body = doc::ErrorBody),
        (status = 401, description = "`invalid_token` (with `WWW-Authenticate`); `reauthentication_required`.", body = doc::ErrorBody,
            headers(("WWW-Authenticate" = String, description = "With `invalid_token`."))),
        (status = 403, description = "`forbidden`: the confirmation is another user's.", body = doc::ErrorBody),
        (status = 404, description = "`not_found`: no such confirmation; `unknown_at_resource_server`.", body = doc::ErrorBody),
        (status = 409, description = "`view_changed`: `view` is not the digest of the current view; `already_decided`: the other decision was made before (with `status`, `decided_at`, `delivery`); `refused_by_resource_server` (with `decision`, `decided_at`, `delivery`).", body = doc::ErrorBody),
        (status = 410, description = "`expired`; `gone`; `decided_before`: this nonce was decided here before and that decision is no longer kept (`history_days`), so it is not confirmed again.", body = doc::ErrorBody),
        (status = 413, description = "`too_large`: the body is over 64 KiB.", body = doc::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: the body is not `application/json`.", body = doc::ErrorBody),
        (status = 422, description = "`invalid_input`: a collected value is missing or wrong (§8; `problems`); `warnings_not_acknowledged`: accepting needs `acknowledge_warnings` (`problems`); `not_countersignable`.", body = doc::ErrorBody),
        (status = 500, description = "`server_error`.", body = doc::ErrorBody),
        (status = 502, description = "`resource_server_unreachable`; `untrusted_cheq`.", body = doc::ErrorBody),
        (status = 503, description = "`unavailable`; `keys_pending` (§9); `signing_unavailable`: the service cannot sign now (its signing key is not available), ask again after `Retry-After`.", body = doc::ErrorBody,
            headers(("Retry-After" = i64, description = "Seconds to wait."))),
        (status = 504, description = "`resource_server_timeout`.", body = doc::ErrorBody),
    )
)]
async fn decide(
    api: web::Data<Api>,
    who: ApiUser,
    id: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, JsonError> {
    let body = parse_json(&read_body(&req, payload, "application/json").await?)?;
    let request = decision_request(&body)?;
    let asked = request.decision;
    match api.cs.decide(&id, &who.0, request).await {
        Ok(Decided { record, earlier }) => {
            let answer = DecisionAnswer::of(&record);
            if let Some(refused) = refused(&record) {
                return Err(refused);
            }
            if earlier && record.decision != asked {
                return Err(JsonError::new(
                    StatusCode::CONFLICT,
                    "already_decided",
                    format!("this confirmation was already decided: {}", record.decision),
                )
                .with_extra(serde_json::to_value(&answer).unwrap_or_default()));
            }
            Ok(HttpResponse::Ok().json(answer))
        }
        Err(DecideError::Other(e)) => Err(json_error(e)),
        Err(DecideError::Input { problems, .. }) => {
            let code = if problems.warnings_unacknowledged {
                "warnings_not_acknowledged"
            } else {
                "invalid_input"
            };
            let mut lines: Vec<String> = problems
                .fields
                .iter()
                .map(|(k, m)| format!("{k}: {m}"))
                .collect();
            let mut list: Vec<Value> = problems
                .fields
                .iter()
                .map(|(k, m)| json!({"parameter": k, "problem": m}))
                .collect();
            if problems.warnings_unacknowledged {
                let m = "this request carries warnings: confirm that you have read them before accepting";
                lines.push(format!("{m} (send \"acknowledge_warnings\": true)"));
                list.push(json!({"parameter": null, "problem": m}));
            }
            Err(
                JsonError::new(StatusCode::UNPROCESSABLE_ENTITY, code, lines.join("; "))
                    .with_extra(json!({ "problems": list })),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::ResponseError;

    #[test]
    fn limits_count_the_client_behind_a_trusted_proxy_and_ipv6_by_its_64() {
        use actix_web::test::TestRequest;
        let proxy: std::net::IpAddr = "10.0.0.1".parse().unwrap();
        let direct = TestRequest::default()
            .peer_addr("192.0.2.7:5000".parse().unwrap())
            .insert_header(("x-forwarded-for", "203.0.113.9"))
            .to_http_request();
        // Not from a trusted proxy: the header is ignored.
        assert_eq!(client_address(&direct, &[proxy]), "192.0.2.7");
        let proxied = TestRequest::default()
            .peer_addr("10.0.0.1:5000".parse().unwrap())
            .insert_header(("x-forwarded-for", "6.6.6.6, 203.0.113.9, 10.0.0.1"))
            .to_http_request();
        // The nearest untrusted hop, not what the client claims further left.
        assert_eq!(client_address(&proxied, &[proxy]), "203.0.113.9");
        assert_eq!(client_address(&proxied, &[]), "10.0.0.1");
        let bad = TestRequest::default()
            .peer_addr("10.0.0.1:5000".parse().unwrap())
            .insert_header(("x-forwarded-for", "not an address"))
            .to_http_request();
        assert_eq!(client_address(&bad, &[proxy]), "10.0.0.1");
        let v6 = TestRequest::default()
            .peer_addr("[2001:db8:1:2:3:4:5:6]:5000".parse().unwrap())
            .to_http_request();
        assert_eq!(client_address(&v6, &[]), "2001:db8:1:2::/64");
        assert_eq!(
            counted_address("::ffff:192.0.2.1".parse().unwrap()),
            "192.0.2.1"
        );
    }

    #[test]
    fn every_error_maps_to_a_json_status_without_internals() {
        for (e, status) in crate::confirm::status::every_error() {
            let api = json_error(e.clone());
            assert_eq!(api.status.as_u16(), status, "{api}");
            assert!(!api.description.contains("sled exploded"));
            let res = api.error_response();
            assert_eq!(
                res.headers().get("content-type").unwrap(),
                "application/json"
            );
        }
        let limited = json_error(CsError::TooManyAttempts { retry_after: 3 });
        assert_eq!(
            limited
                .error_response()
                .headers()
                .get("retry-after")
                .unwrap(),
            "3"
        );
    }
}
