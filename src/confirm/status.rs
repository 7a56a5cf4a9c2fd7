//! The one table from the flow's errors to HTTP statuses and error codes,
//! used by both front ends (the pages of [`super::web`] and the JSON of
//! [`super::api`], PROTOCOL.md §10), so that the same error never gets two
//! statuses.

use super::flow::{CsError, PasskeyProblem};
use super::registration::RegistrationError;
use actix_web::http::StatusCode;

/// Seconds a client is asked to wait when the CS cannot sign (an operator
/// has to act: a key rotated in, a key file restored).
pub const SIGNING_RETRY_AFTER: i64 = 60;

/// The status and the §10 `error` code of `e`.
pub fn of(e: &CsError) -> (StatusCode, &'static str) {
    match e {
        CsError::NotRegistered(_) => (StatusCode::BAD_REQUEST, "unregistered_resource_server"),
        CsError::Blocked { .. } => (StatusCode::FORBIDDEN, "resource_server_blocked"),
        CsError::BadRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
        CsError::NotFound => (StatusCode::NOT_FOUND, "not_found"),
        CsError::UnknownAtRs { .. } => (StatusCode::NOT_FOUND, "unknown_at_resource_server"),
        CsError::Csrf => (StatusCode::FORBIDDEN, "invalid_csrf_token"),
        CsError::Reauthenticate { .. } => (StatusCode::UNAUTHORIZED, "reauthentication_required"),
        CsError::WrongUser { .. } => (StatusCode::FORBIDDEN, "forbidden"),
        CsError::Unreachable { .. } => (StatusCode::BAD_GATEWAY, "resource_server_unreachable"),
        CsError::Untrusted { .. } => (StatusCode::BAD_GATEWAY, "untrusted_cheq"),
        CsError::KeysPending { .. } => (StatusCode::SERVICE_UNAVAILABLE, "keys_pending"),
        CsError::Timeout { .. } => (StatusCode::GATEWAY_TIMEOUT, "resource_server_timeout"),
        CsError::NotCountersignable(_) => (StatusCode::UNPROCESSABLE_ENTITY, "not_countersignable"),
        CsError::Expired(_) => (StatusCode::GONE, "expired"),
        CsError::Gone => (StatusCode::GONE, "gone"),
        CsError::DecidedBefore => (StatusCode::GONE, "decided_before"),
        CsError::Changed => (StatusCode::CONFLICT, "view_changed"),
        CsError::TooManyAttempts { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_attempts"),
        CsError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        CsError::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        CsError::Busy => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
        CsError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        CsError::SigningUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "signing_unavailable"),
        CsError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "server_error"),
        CsError::Passkey(PasskeyProblem::NoPasskey | PasskeyProblem::Required) => {
            (StatusCode::FORBIDDEN, "passkey_required")
        }
        CsError::Passkey(PasskeyProblem::NotYours | PasskeyProblem::CounterWentBack) => {
            (StatusCode::FORBIDDEN, "passkey_refused")
        }
    }
}

/// The status and `error` code of a refused registration (§16.3).
pub fn registration(e: &RegistrationError) -> (StatusCode, &'static str) {
    match e {
        RegistrationError::Off => (StatusCode::NOT_FOUND, "not_found"),
        RegistrationError::TokenMissing | RegistrationError::TokenRefused => {
            (StatusCode::UNAUTHORIZED, "invalid_token")
        }
        RegistrationError::Blocked { .. } => (StatusCode::FORBIDDEN, "blocked"),
        RegistrationError::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_resource"),
        RegistrationError::TooMany { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_requests"),
        RegistrationError::Store(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
    }
}

/// Every variant once, for the tests of both front ends.
#[cfg(test)]
pub fn every_error() -> Vec<(CsError, u16)> {
    vec![
        (
            CsError::NotRegistered(crate::confirm::registry::RegistryError::NotRegistered(
                "http://x/cheq/y".into(),
            )),
            400,
        ),
        (
            CsError::BadRequest(crate::confirm::flow::BadRequest::MissingField(
                "resource_uri",
            )),
            400,
        ),
        (CsError::NotFound, 404),
        (
            CsError::Blocked {
                origin: "https://rs.example".into(),
                name: "Example Air".into(),
            },
            403,
        ),
        (
            CsError::UnknownAtRs {
                origin: "http://rs".into(),
            },
            404,
        ),
        (CsError::Csrf, 403),
        (CsError::Reauthenticate { max_age_secs: 300 }, 401),
        (
            CsError::WrongUser {
                subject: "bob".into(),
                user: "alice".into(),
            },
            403,
        ),
        (
            CsError::Unreachable {
                origin: "http://rs".into(),
                detail: "refused".into(),
            },
            502,
        ),
        (
            CsError::Untrusted {
                origin: "http://rs".into(),
                reason: "bad".into(),
            },
            502,
        ),
        (
            CsError::Timeout {
                origin: "http://rs".into(),
            },
            504,
        ),
        (
            CsError::NotCountersignable(crate::cheq::CountersignableError::BadNonce),
            422,
        ),
        (
            CsError::Expired(
                chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
                    .unwrap()
                    .to_utc(),
            ),
            410,
        ),
        (CsError::Gone, 410),
        (CsError::DecidedBefore, 410),
        (CsError::Changed, 409),
        (CsError::TooManyAttempts { retry_after: 8 }, 429),
        (CsError::MethodNotAllowed, 405),
        (CsError::PayloadTooLarge, 413),
        (CsError::Busy, 503),
        (CsError::Passkey(PasskeyProblem::NoPasskey), 403),
        (CsError::Passkey(PasskeyProblem::Required), 403),
        (CsError::Passkey(PasskeyProblem::NotYours), 403),
        (CsError::Passkey(PasskeyProblem::CounterWentBack), 403),
        (
            CsError::KeysPending {
                origin: "http://rs".into(),
                retry_after: 42,
            },
            503,
        ),
        (
            CsError::Unavailable(std::sync::Arc::new(crate::store::StoreError::Unavailable {
                op: "claim",
                message: "connection refused".into(),
            })),
            503,
        ),
        (
            CsError::SigningUnavailable(std::sync::Arc::new(
                crate::keyring::KeyRingError::NoActiveKey,
            )),
            503,
        ),
        (
            CsError::Internal(crate::confirm::flow::Internal::Cookie(
                "sled exploded".into(),
            )),
            500,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::ResponseError;

    /// Both front ends answer every error with the status of the table.
    #[test]
    fn pages_and_json_agree_status_by_status() {
        for (e, status) in every_error() {
            assert_eq!(of(&e).0.as_u16(), status, "{e:?}");
            let json = crate::confirm::api::json_error(e.clone());
            assert_eq!(json.status_code().as_u16(), status, "api: {e:?}");
            let page = crate::confirm::web::WebError::Cs(e.clone()).error_response();
            assert_eq!(page.status().as_u16(), status, "page: {e:?}");
        }
    }
}
