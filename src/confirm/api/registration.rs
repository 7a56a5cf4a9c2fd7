//! `POST /api/v1/resource-servers` (PROTOCOL.md §16.3): a resource server
//! registers itself. A thin front end over
//! [`crate::confirm::registration::Registrar`]: the body read, the bearer
//! token (`token` mode) and the caller's address taken, the outcome
//! answered; every refusal gets its status from the one table of
//! [`crate::confirm::status::registration`].

use super::{bad, client_address, doc, parse_json, read_body, Api};
use crate::confirm::registration::{Registered, RegistrationError, RegistrationRequest};
use crate::httpkit::{authorization, parse_bearer, AuthHeaderError, JsonError};
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::Value;

/// The JSON error of a refused registration.
pub fn registration_error(e: &RegistrationError) -> JsonError {
    let (status, code) = crate::confirm::status::registration(e);
    let description = match e {
        RegistrationError::Store(detail) => {
            log::warn!(
                "registration: {}",
                crate::text::one_line(&detail.to_string())
            );
            "the service cannot reach its database; try again in a moment".to_owned()
        }
        e => e.to_string(),
    };
    let mut err = JsonError::new(status, code, description);
    match e {
        RegistrationError::TokenMissing | RegistrationError::TokenRefused => {
            err = err.with_challenge("Bearer realm=\"cheq\", error=\"invalid_token\"");
        }
        RegistrationError::TooMany { retry_after } => err.retry_after = Some(*retry_after),
        RegistrationError::Store(_) => err.retry_after = Some(1),
        _ => {}
    }
    err
}

/// `POST /api/v1/resource-servers` (§16.3).
#[utoipa::path(
    post,
    path = "/api/v1/resource-servers",
    tag = "registration",
    operation_id = "register_resource_server",
    request_body(content = doc::RegistrationRequest, content_type = "application/json"),
    security((), ("initial_access_token" = [])),
    responses(
        (status = 201, description = "The resource server is registered; every instance of this service serves it within 5 s.", body = doc::RegistrationAnswer),
        (status = 200, description = "The registration of this origin was refreshed (its document read again).", body = doc::RegistrationAnswer),
        (status = 400, description = "`invalid_request`: the body is not a JSON object with a string `resource`; `invalid_resource`: `resource` is not an origin, or its discovery document (`/.well-known/cheq-resource`) or key set could not be fetched under the fetching rules (https, 64 KiB, 10 s, no redirect, no refused address) or breaks §16.2, or it does not list `private_key_jwt`, or the key set holds no key. Nothing is stored.", body = doc::ErrorBody),
        (status = 401, description = "`invalid_token`: in `token` mode, the initial access token is missing, unknown or used already (with `WWW-Authenticate`).", body = doc::ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"cheq\", error=\"invalid_token\"`."))),
        (status = 403, description = "`blocked`: the operator blocked this origin.", body = doc::ErrorBody),
        (status = 404, description = "`not_found`: this service accepts no registrations (`mode = \"off\"`).", body = doc::ErrorBody),
        (status = 413, description = "`too_large`: the body is over 64 KiB.", body = doc::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: the body is not `application/json`.", body = doc::ErrorBody),
        (status = 429, description = "`too_many_requests`: past the rate of registrations from this address or of this origin, or too many at once.", body = doc::ErrorBody,
            headers(("Retry-After" = i64, description = "Seconds to wait."))),
        (status = 503, description = "`unavailable`: the database does not answer.", body = doc::ErrorBody,
            headers(("Retry-After" = i64, description = "Seconds to wait."))),
    )
)]
pub(super) async fn register(
    api: web::Data<Api>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, JsonError> {
    let registrar = match &api.registrar {
        Some(r) if r.mode().is_on() => r,
        _ => return Err(registration_error(&RegistrationError::Off)),
    };
    let body = parse_json(&read_body(&req, payload, "application/json").await?)?;
    let resource = body
        .get("resource")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| {
            bad("the member \"resource\" (a string: the resource server's origin) is required")
        })?;
    let token = match parse_bearer(authorization(&req)) {
        Ok(t) => Some(t),
        Err(AuthHeaderError::Missing) => None,
        Err(_) => return Err(registration_error(&RegistrationError::TokenRefused)),
    };
    let address = client_address(&req, &api.trusted_proxies);
    let registered = registrar
        .register(RegistrationRequest {
            resource,
            token,
            address: &address,
        })
        .await
        .map_err(|e| registration_error(&e))?;
    let answer = doc::RegistrationAnswer::of(registered.record());
    let mut res = match registered {
        Registered::Created(_) => HttpResponse::Created(),
        Registered::Refreshed(_) => HttpResponse::Ok(),
    };
    Ok(res
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(answer))
}
