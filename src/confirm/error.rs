//! The confirmation server's errors and their single mapping to HTTP statuses
//! and pages (the only `ResponseError` of the browser front end). Every
//! failure gets a page a person understands; none shows internals.

use super::auth::AuthError;
use crate::store::records::RecordsError;
use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use askama::Template;

/// Why a confirmation could not go on.
#[derive(Debug, thiserror::Error)]
pub enum CsError {
    #[error("{0}")]
    NotRegistered(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("no such confirmation")]
    NotFound,
    #[error("the form's security token is missing or wrong")]
    Csrf,
    #[error("this request is for \"{subject}\", and you are signed in as \"{user}\"")]
    WrongUser { subject: String, user: String },
    #[error("{origin} could not be reached: {detail}")]
    Unreachable { origin: String, detail: String },
    #[error("{origin} did not answer in time")]
    Timeout { origin: String },
    #[error("{reason}")]
    Untrusted { origin: String, reason: String },
    #[error("{0}")]
    NotCountersignable(String),
    #[error("this request expired at {0}")]
    Expired(String),
    #[error("the resource server says this request has expired or was already decided")]
    Gone,
    #[error(
        "{origin} does not know this request: it may have been withdrawn, or the link is wrong"
    )]
    UnknownAtRs { origin: String },
    #[error("the request changed since it was shown to you")]
    Changed,
    #[error("too many failed attempts; try again in {retry_after} s")]
    TooManyAttempts { retry_after: i64 },
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("the request body is too large")]
    PayloadTooLarge,
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<RecordsError> for CsError {
    fn from(e: RecordsError) -> Self {
        CsError::Internal(e.to_string())
    }
}

impl From<AuthError> for CsError {
    fn from(e: AuthError) -> Self {
        CsError::Internal(e.to_string())
    }
}

impl From<sled::Error> for CsError {
    fn from(e: sled::Error) -> Self {
        CsError::Internal(e.to_string())
    }
}

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage<'a> {
    pub title: &'a str,
    pub message: String,
    pub untrusted: bool,
    pub status: u16,
}

impl CsError {
    /// The page title.
    pub fn title(&self) -> &'static str {
        match self {
            CsError::NotRegistered(_) => "Unknown resource server",
            CsError::BadRequest(_) => "Bad request",
            CsError::NotFound => "Not found",
            CsError::Csrf => "Form expired",
            CsError::WrongUser { .. } => "Not your request",
            CsError::Unreachable { .. } => "Resource server unreachable",
            CsError::Timeout { .. } => "Resource server too slow",
            CsError::Untrusted { .. } => "Do not trust this request",
            CsError::NotCountersignable(_) => "This request cannot be confirmed",
            CsError::Expired(_) => "Request expired",
            CsError::Gone => "Request no longer open",
            CsError::UnknownAtRs { .. } => "Unknown request",
            CsError::Changed => "The request changed",
            CsError::TooManyAttempts { .. } => "Too many attempts",
            CsError::MethodNotAllowed => "Method not allowed",
            CsError::PayloadTooLarge => "Too large",
            CsError::Internal(_) => "Something went wrong",
        }
    }

    /// What the person reads.
    pub fn message(&self) -> String {
        match self {
            CsError::NotRegistered(detail) => format!(
                "This confirmation service does not work for that resource server, so it did not contact it. {detail}"
            ),
            CsError::Csrf => "The form's security token was missing or did not match your session. Go back, reload the page and try again.".into(),
            CsError::Untrusted { origin, reason } => format!(
                "The request that claims to come from {origin} failed verification: {reason}. Nothing was signed. Do not act on it."
            ),
            CsError::NotCountersignable(reason) => format!(
                "The request is missing what is needed to confirm it safely: {reason}."
            ),
            CsError::Changed => "The request is not the one you were shown. Review it again before deciding.".into(),
            CsError::Internal(_) => "The confirmation service had an internal problem. Nothing was signed. Try again later.".into(),
            other => {
                let mut s = other.to_string();
                if let Some(first) = s.get(..1) {
                    let upper = first.to_uppercase();
                    s.replace_range(..1, &upper);
                }
                s.push('.');
                s
            }
        }
    }
}

impl ResponseError for CsError {
    fn status_code(&self) -> StatusCode {
        match self {
            CsError::NotRegistered(_) | CsError::BadRequest(_) => StatusCode::BAD_REQUEST,
            CsError::NotFound | CsError::UnknownAtRs { .. } => StatusCode::NOT_FOUND,
            CsError::Csrf | CsError::WrongUser { .. } => StatusCode::FORBIDDEN,
            CsError::Unreachable { .. } | CsError::Untrusted { .. } => StatusCode::BAD_GATEWAY,
            CsError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            CsError::NotCountersignable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            CsError::Expired(_) | CsError::Gone => StatusCode::GONE,
            CsError::Changed => StatusCode::CONFLICT,
            CsError::TooManyAttempts { .. } => StatusCode::TOO_MANY_REQUESTS,
            CsError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            CsError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            CsError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        if let CsError::Internal(detail) = self {
            log::error!("internal error: {detail}");
        }
        let page = ErrorPage {
            title: self.title(),
            message: self.message(),
            untrusted: matches!(self, CsError::Untrusted { .. }),
            status: status.as_u16(),
        };
        let body = page
            .render()
            .unwrap_or_else(|_| "<!doctype html><title>Error</title><p>Error</p>".to_owned());
        let mut res = HttpResponse::build(status);
        res.content_type("text/html; charset=utf-8")
            .insert_header((header::CACHE_CONTROL, "no-store"));
        if let CsError::TooManyAttempts { retry_after } = self {
            res.insert_header((header::RETRY_AFTER, retry_after.to_string()));
        }
        res.body(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::MessageBody;

    fn body(e: &CsError) -> (u16, String) {
        let res = e.error_response();
        let status = res.status().as_u16();
        let bytes = res.into_body().try_into_bytes().unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[test]
    fn every_variant_has_its_status_and_a_page() {
        let cases: Vec<(CsError, u16, &str)> = vec![
            (
                CsError::NotRegistered("x".into()),
                400,
                "does not work for that resource server",
            ),
            (
                CsError::BadRequest("missing resource_uri".into()),
                400,
                "Missing resource_uri",
            ),
            (CsError::NotFound, 404, "No such confirmation"),
            (CsError::Csrf, 403, "security token"),
            (
                CsError::WrongUser {
                    subject: "bob".into(),
                    user: "alice".into(),
                },
                403,
                "signed in as &quot;alice&quot;",
            ),
            (
                CsError::Unreachable {
                    origin: "http://rs".into(),
                    detail: "refused".into(),
                },
                502,
                "could not be reached",
            ),
            (
                CsError::Untrusted {
                    origin: "http://rs".into(),
                    reason: "bad".into(),
                },
                502,
                "Do not act on it",
            ),
            (
                CsError::Timeout {
                    origin: "http://rs".into(),
                },
                504,
                "did not answer in time",
            ),
            (
                CsError::NotCountersignable("no nonce".into()),
                422,
                "no nonce",
            ),
            (
                CsError::Expired("2026-01-01T00:00:00Z".into()),
                410,
                "expired",
            ),
            (CsError::Gone, 410, "already decided"),
            (
                CsError::UnknownAtRs {
                    origin: "http://rs".into(),
                },
                404,
                "does not know this request",
            ),
            (CsError::Changed, 409, "Review it again"),
            (CsError::TooManyAttempts { retry_after: 8 }, 429, "8 s"),
            (CsError::MethodNotAllowed, 405, "Method not allowed"),
            (CsError::PayloadTooLarge, 413, "too large"),
            (
                CsError::Internal("sled exploded".into()),
                500,
                "internal problem",
            ),
        ];
        for (e, status, text) in cases {
            let (got, html) = body(&e);
            assert_eq!(got, status, "{e:?}");
            assert!(html.contains(text), "{e:?}: {html}");
            assert!(!html.contains("sled exploded"), "internal detail leaked");
        }
        let res = CsError::TooManyAttempts { retry_after: 8 }.error_response();
        assert_eq!(res.headers().get("retry-after").unwrap(), "8");
        let (_, html) = body(&CsError::Untrusted {
            origin: "o".into(),
            reason: "r".into(),
        });
        assert!(
            !html.contains("name=\"decision\""),
            "no decision button on an error page"
        );
    }
}
