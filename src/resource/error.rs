//! Errors of each layer of the resource server, and their single HTTP mapping
//! into [`ApiError`] (the shared [`JsonError`] of both servers). The RS
//! domain's errors are its own, free of HTTP ([`CheqRsError`] in
//! [`super::cheq_rs`], [`ToolError`] in [`super::tools`]); their statuses
//! are chosen here. Every HTTP error is JSON `{"error","error_description"}`
//! (PROTOCOL.md §3, §6, §7, RFC 6749 §5.2, RFC 6750 §3).

use super::assertion::AssertionRefusal;
use super::config::ConfigError;
use crate::httpkit::JsonError;
use crate::peerkeys::JwksError;
use crate::sign::{KeyError, TrustError};
use crate::store::StoreError;
use actix_web::http::StatusCode;

pub use super::cheq_rs::CheqRsError;
pub use super::hosts::HostRefusal;
pub use super::rules::RuleError;
pub use super::settings::ChangeError;
pub use super::tools::ToolError;

/// An HTTP error answer of the RS: status, `error` code, `error_description`
/// and, for 401 answers, the `WWW-Authenticate` challenge.
pub type ApiError = JsonError;

/// The token endpoint and bearer tokens ([`super::oauth`]).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("client authentication failed")]
    InvalidClient { basic: bool },
    #[error("only the client_credentials grant is supported")]
    UnsupportedGrantType,
    #[error("only the scope \"cheq\" is available")]
    InvalidScope,
    #[error("missing bearer token")]
    MissingToken,
    #[error("the bearer token is unknown or expired")]
    InvalidToken,
    #[error("this client may not {0}")]
    WrongRole(&'static str),
    #[error("too many failed attempts; try again in {retry_after} s")]
    TooManyAttempts { retry_after: i64 },
    /// A client assertion not taken (§16.4), with why.
    #[error("client authentication failed: {0}")]
    Assertion(#[from] AssertionRefusal),
}

impl TokenError {
    /// Whether a refused assertion counts as a failed client
    /// authentication (the lock-out per address): every refusal but the
    /// RS's own trouble.
    pub fn counts_as_failure(refusal: &AssertionRefusal) -> bool {
        !matches!(
            refusal,
            AssertionRefusal::NotReady(_) | AssertionRefusal::Store(_)
        )
    }
}

/// Start-up of the resource server.
#[derive(Debug, thiserror::Error)]
pub enum RsError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Key {
        what: String,
        #[source]
        source: KeyError,
    },
    #[error("trust: {0}")]
    Trust(#[from] TrustError),
    #[error("cannot read the confirmation server's keys: {0}")]
    CsJwks(#[from] JwksError),
    #[error("signing keys: {0}")]
    Keys(#[from] crate::keyring::KeyRingError),
    #[error("data store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    CheqRs(#[from] CheqRsError),
}

impl From<CheqRsError> for JsonError {
    fn from(e: CheqRsError) -> Self {
        use CheqRsError::*;
        let (status, code) = match &e {
            NotFound | ResultNotFound => (StatusCode::NOT_FOUND, "not_found"),
            Expired => (StatusCode::GONE, "expired"),
            AlreadyDecided => (StatusCode::GONE, "already_decided"),
            Invalid { .. } | InvalidOther(_) => (StatusCode::BAD_REQUEST, "invalid_cheq"),
            Replayed => (StatusCode::CONFLICT, "replayed"),
            Operation(_) => (StatusCode::INTERNAL_SERVER_ERROR, "operation_failed"),
            WrongConfirmationServer => (StatusCode::FORBIDDEN, "wrong_confirmation_server"),
            ConfirmationServerUnknown(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "confirmation_server_unavailable",
            ),
            Store(StoreError::Unavailable { .. }) => {
                log::warn!("resource server: {e}");
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            Keys(_) => {
                log::error!("resource server: {e}");
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            Mint(_) | Sign(_) | Store(_) => {
                log::error!("resource server: {e}");
                (StatusCode::INTERNAL_SERVER_ERROR, "server_error")
            }
        };
        let description = match &e {
            Replayed => {
                "this CHEQ's nonce was already decided with a different document".to_owned()
            }
            Store(StoreError::Unavailable { .. }) => {
                "the resource server cannot reach its database; try again in a moment".to_owned()
            }
            Store(_) => "internal storage error".to_owned(),
            Keys(_) => "the resource server has no signing key in service".to_owned(),
            _ => e.to_string(),
        };
        let mut err = JsonError::new(status, code, description);
        if status == StatusCode::SERVICE_UNAVAILABLE {
            err.retry_after = Some(1);
        }
        err
    }
}

impl From<TokenError> for JsonError {
    fn from(e: TokenError) -> Self {
        use TokenError::*;
        let description = e.to_string();
        match e {
            InvalidRequest(_) => {
                JsonError::new(StatusCode::BAD_REQUEST, "invalid_request", description)
            }
            InvalidClient { basic } => {
                let e = JsonError::new(StatusCode::UNAUTHORIZED, "invalid_client", description);
                if basic {
                    e.with_challenge("Basic realm=\"cheq\"")
                } else {
                    e
                }
            }
            UnsupportedGrantType => JsonError::new(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                description,
            ),
            InvalidScope => JsonError::new(StatusCode::BAD_REQUEST, "invalid_scope", description),
            MissingToken => JsonError::new(StatusCode::UNAUTHORIZED, "invalid_token", description)
                .with_challenge("Bearer realm=\"cheq\""),
            InvalidToken => JsonError::new(StatusCode::UNAUTHORIZED, "invalid_token", description)
                .with_challenge("Bearer realm=\"cheq\", error=\"invalid_token\""),
            WrongRole(_) => {
                JsonError::new(StatusCode::FORBIDDEN, "insufficient_scope", description)
            }
            TooManyAttempts { retry_after } => {
                let mut e = JsonError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too_many_attempts",
                    description,
                );
                e.retry_after = Some(retry_after);
                e
            }
            Assertion(AssertionRefusal::NotReady(_)) => {
                let mut e = JsonError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "temporarily_unavailable",
                    "the resource server has not read the confirmation server's keys yet; try again in a moment",
                );
                e.retry_after = Some(5);
                e
            }
            Assertion(AssertionRefusal::Store(e)) => JsonError::from(CheqRsError::Store(e)),
            Assertion(_) => JsonError::new(StatusCode::UNAUTHORIZED, "invalid_client", description),
        }
    }
}

impl From<ToolError> for JsonError {
    fn from(e: ToolError) -> Self {
        use ToolError::*;
        let description = e.to_string();
        match e {
            UnknownTool(_) => JsonError::new(StatusCode::NOT_FOUND, "not_found", description),
            BadRequest(_) => {
                JsonError::new(StatusCode::BAD_REQUEST, "invalid_request", description)
            }
            BadParameter { .. } => {
                JsonError::new(StatusCode::BAD_REQUEST, "invalid_parameter", description)
            }
            Failed(_) => JsonError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "tool_failed",
                description,
            ),
        }
    }
}

impl From<ChangeError> for JsonError {
    fn from(e: ChangeError) -> Self {
        let description = e.to_string();
        let status = |status, code| JsonError::new(status, code, description.clone());
        match e {
            ChangeError::Input(e) => e.into(),
            ChangeError::Store(e) => CheqRsError::from(e).into(),
            ChangeError::Rule(RuleError::Loosens { .. }) => {
                status(StatusCode::FORBIDDEN, "loosens_floor")
            }
            ChangeError::Rule(_) => status(StatusCode::BAD_REQUEST, "invalid_parameter"),
            ChangeError::Host(refusal) => match refusal {
                HostRefusal::NotAnOrigin(_) => status(StatusCode::BAD_REQUEST, "invalid_parameter"),
                HostRefusal::NotOffered => status(StatusCode::FORBIDDEN, "not_offered"),
                HostRefusal::Already(_) => status(StatusCode::CONFLICT, "already_chosen"),
                HostRefusal::Unreachable { .. } => status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "confirmation_server_unreachable",
                ),
                HostRefusal::Refused { .. } => status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "confirmation_server_refused",
                ),
                HostRefusal::NoPasskeys(_) => {
                    status(StatusCode::UNPROCESSABLE_ENTITY, "passkeys_not_offered")
                }
                HostRefusal::Busy => {
                    let mut e = status(StatusCode::SERVICE_UNAVAILABLE, "busy");
                    e.retry_after = Some(1);
                    e
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sign::{SignError, VerifyError};

    /// Every refusal of a change of a user's CS or rules (§17), status by
    /// status.
    #[test]
    fn each_refused_change_has_its_status_and_code() {
        let origin = || "https://cs.example".to_owned();
        let cases: Vec<(ChangeError, u16, &str)> = vec![
            (
                RuleError::Loosens {
                    tool: "book_flight".into(),
                    floor: "always".into(),
                    why: "x",
                }
                .into(),
                403,
                "loosens_floor",
            ),
            (
                RuleError::UnknownTool("x".into()).into(),
                400,
                "invalid_parameter",
            ),
            (RuleError::BadThreshold.into(), 400, "invalid_parameter"),
            (
                HostRefusal::NotAnOrigin("x".into()).into(),
                400,
                "invalid_parameter",
            ),
            (HostRefusal::NotOffered.into(), 403, "not_offered"),
            (HostRefusal::Already(origin()).into(), 409, "already_chosen"),
            (
                HostRefusal::Unreachable {
                    origin: origin(),
                    why: "x".into(),
                }
                .into(),
                422,
                "confirmation_server_unreachable",
            ),
            (
                HostRefusal::Refused {
                    origin: origin(),
                    why: "x".into(),
                }
                .into(),
                422,
                "confirmation_server_refused",
            ),
            (
                HostRefusal::NoPasskeys(origin()).into(),
                422,
                "passkeys_not_offered",
            ),
            (
                ToolError::BadParameter {
                    name: "above".into(),
                    message: "x".into(),
                }
                .into(),
                400,
                "invalid_parameter",
            ),
            (
                StoreError::Unavailable {
                    op: "get",
                    message: "down".into(),
                }
                .into(),
                503,
                "unavailable",
            ),
        ];
        for (error, status, code) in cases {
            let said = error.to_string();
            let own_words = !matches!(error, ChangeError::Store(_));
            let e = JsonError::from(error);
            assert_eq!((e.status.as_u16(), e.code), (status, code), "{said}");
            if own_words {
                assert_eq!(e.description, said);
            }
        }
    }

    /// Every refusal of the RS side of CHEQ, status by status: the one
    /// mapping of the domain's errors to HTTP.
    #[test]
    fn each_cheq_rs_error_has_its_status_and_code() {
        let unavailable = || StoreError::Unavailable {
            op: "get",
            message: "down".into(),
        };
        let backend = || StoreError::Backend {
            op: "get",
            message: "broken".into(),
        };
        let sign = || match crate::cheq::Cheq::parse(b"not json") {
            Err(e) => SignError::Payload(e),
            Ok(_) => unreachable!("a payload that is not JSON parses"),
        };
        let cases: Vec<(CheqRsError, u16, &str, Option<i64>)> = vec![
            (CheqRsError::NotFound, 404, "not_found", None),
            (CheqRsError::ResultNotFound, 404, "not_found", None),
            (CheqRsError::Expired, 410, "expired", None),
            (CheqRsError::AlreadyDecided, 410, "already_decided", None),
            (
                CheqRsError::Invalid {
                    rule: 3,
                    error: VerifyError::RsSigMismatch,
                },
                400,
                "invalid_cheq",
                None,
            ),
            (
                CheqRsError::InvalidOther("x".into()),
                400,
                "invalid_cheq",
                None,
            ),
            (CheqRsError::Replayed, 409, "replayed", None),
            (
                CheqRsError::Operation("x".into()),
                500,
                "operation_failed",
                None,
            ),
            (
                CheqRsError::Store(unavailable()),
                503,
                "unavailable",
                Some(1),
            ),
            (CheqRsError::Keys("x".into()), 503, "unavailable", Some(1)),
            (CheqRsError::Mint("x".into()), 500, "server_error", None),
            (CheqRsError::Sign(sign()), 500, "server_error", None),
            (CheqRsError::Store(backend()), 500, "server_error", None),
            (
                CheqRsError::WrongConfirmationServer,
                403,
                "wrong_confirmation_server",
                None,
            ),
            (
                CheqRsError::ConfirmationServerUnknown("https://cs.example".into()),
                503,
                "confirmation_server_unavailable",
                Some(1),
            ),
        ];
        for (error, status, code, retry_after) in cases {
            let shown = format!("{error:?}");
            let answer = JsonError::from(error);
            assert_eq!(answer.status.as_u16(), status, "{shown}");
            assert_eq!(answer.code, code, "{shown}");
            assert_eq!(answer.retry_after, retry_after, "{shown}");
        }
        let store = JsonError::from(CheqRsError::Store(backend()));
        assert_eq!(store.description, "internal storage error");
        let expired = JsonError::from(CheqRsError::from(VerifyError::Expired {
            expires: chrono::Utc::now(),
        }));
        assert_eq!(expired.code, "expired");
    }

    /// Each refusal of a client assertion (§16.4): `401 invalid_client`,
    /// with no Basic challenge (the client did not use Basic), except the
    /// RS's own trouble; and which of them count towards the lock-out.
    #[test]
    fn each_refused_assertion_has_its_status() {
        use crate::sign::assertion::AssertionError;
        let refusals = vec![
            (
                AssertionRefusal::WrongAssertionType,
                401,
                "invalid_client",
                true,
            ),
            (
                AssertionRefusal::Untrusted("https://x.example".into()),
                401,
                "invalid_client",
                true,
            ),
            (
                AssertionRefusal::Check(AssertionError::Expired),
                401,
                "invalid_client",
                true,
            ),
            (AssertionRefusal::Replayed, 401, "invalid_client", true),
            (AssertionRefusal::OtherClientId, 401, "invalid_client", true),
            (
                AssertionRefusal::NotReady("https://cs.example".into()),
                503,
                "temporarily_unavailable",
                false,
            ),
            (
                AssertionRefusal::Store(StoreError::Unavailable {
                    op: "x",
                    message: "down".into(),
                }),
                503,
                "unavailable",
                false,
            ),
        ];
        for (refusal, status, code, counts) in refusals {
            let shown = format!("{refusal:?}");
            assert_eq!(TokenError::counts_as_failure(&refusal), counts, "{shown}");
            let said = refusal.to_string();
            let answer = JsonError::from(TokenError::from(refusal));
            assert_eq!(answer.status.as_u16(), status, "{shown}");
            assert_eq!(answer.code, code, "{shown}");
            assert!(answer.challenge.is_none(), "{shown}");
            if status == 401 {
                assert!(answer.description.contains(&said), "{shown}");
            }
        }
    }
}
