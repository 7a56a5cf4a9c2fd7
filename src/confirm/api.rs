//! The raw API for voice gateways (PROTOCOL.md §10): JSON in and out, one
//! implementation of the flow ([`Cs`]) behind two front ends.
//!
//! | route | what |
//! |---|---|
//! | `POST /api/v1/token` | gateway (HTTP Basic) + `username` + `pin` → a short-lived user token |
//! | `POST /api/v1/confirmations` | `{"resource uri"}` → `201` and a confirmation view |
//! | `GET /api/v1/confirmations/{id}` | the confirmation view |
//! | `POST /api/v1/confirmations/{id}/decision` | `{"decision","collected","acknowledge_warnings","view"}` |
//!
//! Errors are `{"error","error_description"}` ([`ApiError`], this front end's
//! only `ResponseError`). A token stands for one user and one gateway; a user
//! only ever sees and decides confirmations whose subject is theirs (403).
//! Failed attempts are limited per user and per gateway (429 + `Retry-After`).

use super::auth::{verify_secret, Accounts, Identity, RateLimiter};
use super::config::GatewayConfig;
use super::decide::{Collected, Cs, DecideError, Decided, DecisionRequest, Loaded, WARNINGS_KEY};
use super::error::CsError;
use super::view::CheqView;
use crate::sign::{Channel, Decision};
use crate::store::records::{DecisionRecord, Delivery};
use crate::time::Clock;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use base64::Engine;
use chrono::{SecondsFormat, TimeZone, Utc};
use indexmap::IndexMap;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Largest JSON body read.
pub const MAX_BODY: usize = 64 * 1024;

/// A JSON error of the raw API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub description: String,
    pub retry_after: Option<i64>,
    pub extra: Option<Box<Value>>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, description: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            description: description.into(),
            retry_after: None,
            extra: None,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.description)
    }
}

impl From<CsError> for ApiError {
    fn from(e: CsError) -> Self {
        let description = e.to_string();
        let (status, code) = match &e {
            CsError::NotRegistered(_) => (StatusCode::BAD_REQUEST, "unregistered_resource_server"),
            CsError::BadRequest(_) | CsError::Csrf => (StatusCode::BAD_REQUEST, "invalid_request"),
            CsError::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            CsError::UnknownAtRs { .. } => (StatusCode::NOT_FOUND, "unknown_at_resource_server"),
            CsError::WrongUser { .. } => (StatusCode::FORBIDDEN, "forbidden"),
            CsError::Unreachable { .. } => (StatusCode::BAD_GATEWAY, "resource_server_unreachable"),
            CsError::Timeout { .. } => (StatusCode::GATEWAY_TIMEOUT, "resource_server_timeout"),
            CsError::Untrusted { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "untrusted_cheq"),
            CsError::NotCountersignable(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "not_countersignable")
            }
            CsError::Expired(_) => (StatusCode::GONE, "expired"),
            CsError::Gone => (StatusCode::GONE, "gone"),
            CsError::Changed => (StatusCode::CONFLICT, "changed"),
            CsError::TooManyAttempts { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_attempts"),
            CsError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            CsError::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            CsError::Internal(detail) => {
                log::error!("internal error: {detail}");
                return ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    "internal error",
                );
            }
        };
        let mut err = ApiError::new(status, code, description);
        if let CsError::TooManyAttempts { retry_after } = e {
            err.retry_after = Some(retry_after);
        }
        err
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut body = json!({"error": self.code, "error_description": self.description});
        if let (Some(extra), Some(map)) = (&self.extra, body.as_object_mut()) {
            if let Some(e) = extra.as_object() {
                map.extend(e.clone());
            }
        }
        let mut res = HttpResponse::build(self.status);
        res.insert_header((header::CACHE_CONTROL, "no-store"));
        if let Some(s) = self.retry_after {
            res.insert_header((header::RETRY_AFTER, s.max(1).to_string()));
        }
        match self.code {
            "invalid_client" => {
                res.insert_header((header::WWW_AUTHENTICATE, "Basic realm=\"cheq\""));
            }
            "invalid_token" => {
                res.insert_header((
                    header::WWW_AUTHENTICATE,
                    "Bearer realm=\"cheq\", error=\"invalid_token\"",
                ));
            }
            _ => {}
        }
        res.json(body)
    }
}

fn bad(code: &'static str, description: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, code, description)
}

/// A user token issued to a gateway.
#[derive(Debug, Clone)]
struct ApiToken {
    identity: Identity,
    gateway: String,
    expires: i64,
}

/// The raw API's state: gateways, tokens, limiters.
pub struct Api {
    cs: Arc<Cs>,
    accounts: Accounts,
    gateways: Vec<GatewayConfig>,
    tokens: Mutex<HashMap<[u8; 32], ApiToken>>,
    token_ttl: i64,
    /// Failed PINs per user.
    pub limiter: RateLimiter,
    /// Failed secrets and PINs per gateway: a gateway speaks for many users,
    /// so it gets more room before a lock-out.
    pub gateway_limiter: RateLimiter,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api").finish_non_exhaustive()
    }
}

impl Api {
    pub fn new(
        cs: Arc<Cs>,
        accounts: Accounts,
        gateways: Vec<GatewayConfig>,
        token_ttl: i64,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Api {
            cs,
            accounts,
            gateways,
            tokens: Mutex::new(HashMap::new()),
            token_ttl,
            limiter: RateLimiter::new(5, 2, 900),
            // A busy gateway fails now and then for honest users.
            gateway_limiter: RateLimiter::new(20, 2, 300).with_window(600),
            clock,
        }
    }

    fn now(&self) -> i64 {
        self.clock.now().timestamp()
    }

    fn locked(&self, user: Option<&str>, gateway: &str) -> Result<(), ApiError> {
        let now = self.now();
        let left = user
            .and_then(|u| self.limiter.locked(u, now))
            .into_iter()
            .chain(self.gateway_limiter.locked(gateway, now))
            .max();
        if let Some(left) = left {
            return Err(CsError::TooManyAttempts { retry_after: left }.into());
        }
        Ok(())
    }

    /// Checks the gateway's HTTP Basic credentials; returns its client id.
    fn gateway(&self, authorization: Option<&str>) -> Result<String, ApiError> {
        let invalid = || {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_client",
                "gateway authentication failed",
            )
        };
        let encoded = authorization
            .and_then(|h| h.strip_prefix("Basic "))
            .ok_or_else(invalid)?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| invalid())?;
        let text = String::from_utf8(decoded).map_err(|_| invalid())?;
        let (id, secret) = text.split_once(':').ok_or_else(invalid)?;
        let id = url::form_urlencoded::parse(format!("a={id}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        let secret = url::form_urlencoded::parse(format!("a={secret}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        let key = format!("gw:{id}");
        self.locked(None, &key)?;
        // Reserved before hashing, so concurrent guesses all count.
        self.gateway_limiter.fail(&key, self.now());
        let hash = self
            .gateways
            .iter()
            .find(|g| g.client_id == id)
            .map(|g| g.secret_hash.clone());
        let ok = match &hash {
            Some(h) => verify_secret(&secret, h),
            None => {
                verify_secret(&secret, super::auth::dummy_hash());
                false
            }
        };
        if !ok {
            log::info!("raw API: failed gateway authentication for {id:?}");
            return Err(invalid());
        }
        self.gateway_limiter.forgive_one(&key, self.now());
        Ok(id)
    }

    /// `POST /api/v1/token`.
    fn issue(&self, authorization: Option<&str>, form: &TokenForm) -> Result<Value, ApiError> {
        let gateway = self.gateway(authorization)?;
        let username = form.username.as_deref().unwrap_or("").trim();
        let pin = form.pin.as_deref().unwrap_or("");
        if username.is_empty() || pin.is_empty() {
            return Err(bad(
                "invalid_request",
                "the fields username and pin are required",
            ));
        }
        let user_key = format!("user:{username}");
        let gw_key = format!("gw:{gateway}");
        self.locked(Some(&user_key), &gw_key)?;
        let now = self.now();
        // Reserved before hashing, so concurrent guesses all count.
        self.limiter.fail(&user_key, now);
        self.gateway_limiter.fail(&gw_key, now);
        let account = self.accounts.get(username).map_err(CsError::from)?;
        // An unknown user (or one without a PIN) costs the same argon2 check,
        // so timing does not tell which user names exist.
        let hash = account
            .as_ref()
            .and_then(|a| a.pin_hash.clone())
            .unwrap_or_else(|| super::auth::dummy_hash().to_owned());
        let ok =
            verify_secret(pin, &hash) && account.as_ref().is_some_and(|a| a.pin_hash.is_some());
        let Some(account) = account.filter(|_| ok) else {
            log::info!("raw API: failed PIN for {username:?} via {gateway:?}");
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_grant",
                "the user name or PIN is wrong",
            ));
        };
        self.limiter.succeed(&user_key);
        self.gateway_limiter.forgive_one(&gw_key, now);
        let token = crate::sign::b64::encode(rand::random::<[u8; 32]>());
        let entry = ApiToken {
            identity: Identity {
                sub: account.username.clone(),
                also_known_as: account.email.clone().into_iter().collect(),
                auth_time: now,
                amr: vec!["pin".into()],
            },
            gateway,
            expires: now + self.token_ttl,
        };
        if let Ok(mut tokens) = self.tokens.lock() {
            tokens.retain(|_, t| t.expires > now);
            tokens.insert(Sha256::digest(token.as_bytes()).into(), entry);
        }
        Ok(json!({"access_token": token, "token_type": "Bearer", "expires_in": self.token_ttl}))
    }

    /// The user a bearer token stands for.
    fn user(&self, authorization: Option<&str>) -> Result<Identity, ApiError> {
        let invalid = |d: &str| ApiError::new(StatusCode::UNAUTHORIZED, "invalid_token", d);
        let token = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| invalid("a bearer token from /api/v1/token is required"))?;
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let found = self.tokens.lock().ok().and_then(|t| t.get(&key).cloned());
        match found {
            Some(t) if t.expires > self.now() => {
                log::debug!("raw API call by {} via {}", t.identity.sub, t.gateway);
                Ok(t.identity)
            }
            Some(_) => Err(invalid("the token has expired")),
            None => Err(invalid("the token is unknown")),
        }
    }
}

#[derive(serde::Deserialize)]
struct TokenForm {
    username: Option<String>,
    pin: Option<String>,
}

impl std::fmt::Debug for TokenForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenForm")
            .field("username", &self.username)
            .field("pin", &"<redacted>")
            .finish()
    }
}

fn auth(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

fn rfc3339(ts: i64) -> String {
    Utc.timestamp_opt(ts, 0)
        .single()
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// The view of an open confirmation (§10).
pub fn open_view(id: &str, v: &CheqView) -> Value {
    let parameters: Vec<Value> = v
        .parameters
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "description": p.description,
                "value": p.value,
                "input": p.input.as_ref().map(|i| json!({
                    "type": i.kind,
                    "required": i.required,
                    "max length": i.max_length,
                    "pattern": i.pattern,
                    "sensitive": i.sensitive,
                    // What a voice gateway asks when it collects this value.
                    "prompt": super::voice::input_prompt(&p.name, p.description.as_deref(), i),
                })),
            })
        })
        .collect();
    json!({
        "id": id,
        "status": "pending",
        "operation": v.operation,
        "operation name": v.operation_name,
        "resource origin": v.resource_origin,
        "subject": v.subject,
        "expires": v.expires,
        "language": v.language,
        "parameters": parameters,
        // `digest` is `cheq_view` for a voice decision: send it back as
        // "view" with the decision to bind it to what was read out.
        "voice": {"text": v.voice_text, "ssml": v.voice_ssml, "digest": v.voice_digest},
        "warnings": v.warnings,
    })
}

/// The §10 status of a decided confirmation.
pub fn decided_status(r: &DecisionRecord) -> &'static str {
    match &r.delivery {
        Delivery::Pending { .. } => "delivery_pending",
        Delivery::Expired { .. } => "expired",
        Delivery::Delivered { .. } | Delivery::Refused { .. } => {
            if r.decision == "accept" {
                "accepted"
            } else {
                "rejected"
            }
        }
    }
}

fn decided_view(id: &str, r: &DecisionRecord) -> Value {
    json!({
        "id": id,
        "status": decided_status(r),
        "operation": r.operation,
        "operation name": r.operation_name,
        "resource origin": r.resource_origin,
        "subject": r.user,
        "expires": rfc3339(r.expires),
        "decision": r.decision,
        "decided_at": rfc3339(r.decided_at),
        "delivery": r.delivery.label(),
    })
}

async fn view(api: &Api, id: &str, who: &Identity) -> Result<Value, ApiError> {
    Ok(match api.cs.load(id, who).await? {
        Loaded::Open(open) => open_view(id, &open.view),
        Loaded::Decided(r) => decided_view(id, &r),
    })
}

/// Registers the raw API's routes.
pub fn configure(cfg: &mut web::ServiceConfig, api: web::Data<Api>) {
    cfg.app_data(api)
        .service(resource("/api/v1/token").route(web::post().to(token)))
        .service(resource("/api/v1/confirmations").route(web::post().to(create)))
        .service(resource("/api/v1/confirmations/{id}").route(web::get().to(get)))
        .service(resource("/api/v1/confirmations/{id}/decision").route(web::post().to(decide)));
}

fn resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(|| async {
        Err::<HttpResponse, _>(ApiError::from(CsError::MethodNotAllowed))
    }))
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    if body.len() > MAX_BODY {
        return Err(CsError::PayloadTooLarge.into());
    }
    let v = crate::cheq::json::parse_value(body, MAX_BODY).map_err(|e| {
        bad(
            "invalid_request",
            format!("the body is not acceptable JSON: {e}"),
        )
    })?;
    if !v.is_object() {
        return Err(bad("invalid_request", "the body must be a JSON object"));
    }
    Ok(v)
}

async fn token(
    api: web::Data<Api>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    if body.len() > MAX_BODY {
        return Err(CsError::PayloadTooLarge.into());
    }
    let form: TokenForm = serde_urlencoded::from_bytes(&body).map_err(|e| {
        bad(
            "invalid_request",
            format!("the body must be application/x-www-form-urlencoded: {e}"),
        )
    })?;
    let authorization = auth(&req).map(str::to_owned);
    let api2 = api.clone();
    let answer = super::auth::hashing(move || api2.issue(authorization.as_deref(), &form))
        .await
        .map_err(ApiError::from)??;
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(answer))
}

async fn create(
    api: web::Data<Api>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let who = api.user(auth(&req))?;
    let body = parse_json(&body)?;
    let uri = body
        .get("resource uri")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| {
            bad(
                "invalid_request",
                "the member \"resource uri\" (a string) is required",
            )
        })?;
    let id = api.cs.start(uri)?;
    let view = view(&api, &id, &who).await?;
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/api/v1/confirmations/{id}")))
        .json(view))
}

async fn get(
    api: web::Data<Api>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let who = api.user(auth(&req))?;
    let view = view(&api, &id, &who).await?;
    Ok(HttpResponse::Ok().json(view))
}

async fn decide(
    api: web::Data<Api>,
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let who = api.user(auth(&req))?;
    let body = parse_json(&body)?;
    let decision = body
        .get("decision")
        .and_then(Value::as_str)
        .and_then(Decision::parse)
        .ok_or_else(|| {
            bad(
                "invalid_request",
                "\"decision\" must be \"accept\" or \"reject\"",
            )
        })?;
    let mut collected = IndexMap::new();
    match body.get("collected") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let v = v.as_str().ok_or_else(|| {
                    bad(
                        "invalid_request",
                        format!("collected \"{k}\" must be a string"),
                    )
                })?;
                collected.insert(k.clone(), v.to_owned());
            }
        }
        Some(_) => return Err(bad("invalid_request", "\"collected\" must be an object")),
    }
    let acknowledged = body
        .get("acknowledge_warnings")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let view_digest = match body.get("view") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.clone()),
        Some(_) => return Err(bad("invalid_request", "\"view\" must be a string")),
    };
    let request = DecisionRequest {
        decision,
        channel: Channel::Voice,
        view_digest,
        collected: Collected::ByName(collected),
        warnings_acknowledged: acknowledged,
    };
    match api.cs.decide(&id, &who, request).await {
        Ok(Decided { record, earlier }) => {
            api.cs.wake();
            let answer = json!({
                "status": decided_status(&record),
                "decided_at": rfc3339(record.decided_at),
                "delivery": record.delivery.label(),
            });
            if let Delivery::Refused { reason, .. } = &record.delivery {
                // Never "accepted" for something the RS will not carry out.
                let mut e = ApiError::new(
                    StatusCode::CONFLICT,
                    "refused_by_resource_server",
                    format!("the resource server refused the decision: {reason}"),
                );
                e.extra = Some(Box::new(json!({
                    "decision": record.decision,
                    "decided_at": rfc3339(record.decided_at),
                    "delivery": record.delivery.label(),
                })));
                return Err(e);
            }
            if earlier && record.decision != decision.as_str() {
                let mut e = ApiError::new(
                    StatusCode::CONFLICT,
                    "already_decided",
                    format!("this confirmation was already decided: {}", record.decision),
                );
                e.extra = Some(Box::new(answer));
                return Err(e);
            }
            Ok(HttpResponse::Ok().json(answer))
        }
        Err(DecideError::Other(e)) => Err(e.into()),
        Err(DecideError::Input(problems)) => {
            let code = if problems.iter().any(|(k, _)| k == WARNINGS_KEY) {
                "warnings_not_acknowledged"
            } else {
                "invalid_input"
            };
            let description = problems
                .iter()
                .map(|(k, m)| {
                    if k == WARNINGS_KEY {
                        format!("{m} (send \"acknowledge_warnings\": true)")
                    } else {
                        format!("{k}: {m}")
                    }
                })
                .collect::<Vec<_>>()
                .join("; ");
            let mut e = ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, description);
            let list: Vec<Value> = problems
                .iter()
                .map(|(k, m)| json!({"parameter": k, "problem": m}))
                .collect();
            e.extra = Some(Box::new(json!({ "problems": list })));
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_maps_to_a_json_status() {
        let cases = [
            (CsError::NotRegistered("x".into()), 400),
            (CsError::NotFound, 404),
            (
                CsError::WrongUser {
                    subject: "b".into(),
                    user: "a".into(),
                },
                403,
            ),
            (
                CsError::Untrusted {
                    origin: "o".into(),
                    reason: "r".into(),
                },
                422,
            ),
            (CsError::Expired("t".into()), 410),
            (CsError::Changed, 409),
            (CsError::TooManyAttempts { retry_after: 3 }, 429),
            (CsError::Timeout { origin: "o".into() }, 504),
            (CsError::Internal("secret detail".into()), 500),
        ];
        for (e, status) in cases {
            let api: ApiError = e.into();
            assert_eq!(api.status.as_u16(), status, "{api}");
            assert!(!api.description.contains("secret detail"));
            let res = api.error_response();
            assert_eq!(
                res.headers().get("content-type").unwrap(),
                "application/json"
            );
        }
        let limited: ApiError = CsError::TooManyAttempts { retry_after: 3 }.into();
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
