//! Errors of each layer of the resource server, and their single HTTP mapping
//! ([`ApiError`], the only `ResponseError`). Every HTTP error is JSON
//! `{"error","error_description"}` (PROTOCOL.md §6, RFC 6749 §5.2).

use super::config::ConfigError;
use crate::sign::{KeyError, SignError, TrustError, VerifyError};
use crate::store::StoreError;
use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;
use std::fmt;

/// The RS side of CHEQ ([`super::cheq_rs`]).
#[derive(Debug, thiserror::Error)]
pub enum CheqRsError {
    #[error("no such confirmation")]
    NotFound,
    #[error("no such result")]
    ResultNotFound,
    #[error("the CHEQ has expired")]
    Expired,
    #[error("the CHEQ has already been decided")]
    AlreadyDecided,
    #[error("rule {rule}: {error}")]
    Invalid { rule: u8, error: VerifyError },
    #[error("{0}")]
    InvalidOther(String),
    #[error("nonce already decided with a different document")]
    Replayed,
    #[error("cannot mint the CHEQ: {0}")]
    Mint(String),
    #[error("cannot sign the CHEQ: {0}")]
    Sign(#[from] SignError),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("database: {0}")]
    Db(String),
    #[error("stored record {0} is corrupt")]
    Corrupt(String),
    #[error("the operation failed: {0}")]
    Operation(String),
}

impl From<sled::Error> for CheqRsError {
    fn from(e: sled::Error) -> Self {
        CheqRsError::Db(e.to_string())
    }
}

impl From<VerifyError> for CheqRsError {
    fn from(error: VerifyError) -> Self {
        match error {
            VerifyError::Expired { .. } => CheqRsError::Expired,
            error => CheqRsError::Invalid {
                rule: error.rule(),
                error,
            },
        }
    }
}

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
}

/// The A2T tool API ([`super::tools`]).
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("no tool \"{0}\"")]
    UnknownTool(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("input parameter \"{name}\": {message}")]
    BadParameter { name: String, message: String },
    #[error("the tool failed: {0}")]
    Failed(String),
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
    #[error("cannot fetch the confirmation server's keys from {uri}: {message}")]
    JwksFetch { uri: String, message: String },
    #[error("data store: {0}")]
    Store(#[from] StoreError),
    #[error("data store: {0}")]
    Db(#[from] sled::Error),
    #[error("{0}")]
    CheqRs(#[from] CheqRsError),
}

/// An HTTP error answer: status, `error` code and `error_description`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub description: String,
    /// `WWW-Authenticate` value, for 401 answers.
    pub challenge: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, description: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            description: description.into(),
            challenge: None,
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.description
        )
    }
}

impl std::error::Error for ApiError {}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut res = HttpResponse::build(self.status);
        res.insert_header((header::CACHE_CONTROL, "no-store"));
        if let Some(challenge) = &self.challenge {
            res.insert_header((header::WWW_AUTHENTICATE, challenge.as_str()));
        }
        res.json(json!({"error": self.code, "error_description": self.description}))
    }
}

impl From<CheqRsError> for ApiError {
    fn from(e: CheqRsError) -> Self {
        use CheqRsError::*;
        let (status, code) = match &e {
            NotFound | ResultNotFound => (StatusCode::NOT_FOUND, "not_found"),
            Expired => (StatusCode::GONE, "expired"),
            AlreadyDecided => (StatusCode::GONE, "already_decided"),
            Invalid { .. } | InvalidOther(_) => (StatusCode::BAD_REQUEST, "invalid_cheq"),
            Replayed => (StatusCode::CONFLICT, "replayed"),
            Operation(_) => (StatusCode::INTERNAL_SERVER_ERROR, "operation_failed"),
            Mint(_) | Sign(_) | Store(_) | Db(_) | Corrupt(_) => {
                log::error!("resource server: {e}");
                (StatusCode::INTERNAL_SERVER_ERROR, "server_error")
            }
        };
        let description = match &e {
            Replayed => {
                "this CHEQ's nonce was already decided with a different document".to_owned()
            }
            Store(_) | Db(_) | Corrupt(_) => "internal storage error".to_owned(),
            _ => e.to_string(),
        };
        ApiError::new(status, code, description)
    }
}

impl From<TokenError> for ApiError {
    fn from(e: TokenError) -> Self {
        use TokenError::*;
        let description = e.to_string();
        match e {
            InvalidRequest(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", description)
            }
            InvalidClient { basic } => ApiError {
                challenge: basic.then(|| "Basic realm=\"cheq\"".to_owned()),
                ..ApiError::new(StatusCode::UNAUTHORIZED, "invalid_client", description)
            },
            UnsupportedGrantType => ApiError::new(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                description,
            ),
            InvalidScope => ApiError::new(StatusCode::BAD_REQUEST, "invalid_scope", description),
            MissingToken => ApiError {
                challenge: Some("Bearer realm=\"cheq\"".to_owned()),
                ..ApiError::new(StatusCode::UNAUTHORIZED, "invalid_token", description)
            },
            InvalidToken => ApiError {
                challenge: Some("Bearer realm=\"cheq\", error=\"invalid_token\"".to_owned()),
                ..ApiError::new(StatusCode::UNAUTHORIZED, "invalid_token", description)
            },
            WrongRole(_) => ApiError::new(StatusCode::FORBIDDEN, "insufficient_scope", description),
        }
    }
}

impl From<ToolError> for ApiError {
    fn from(e: ToolError) -> Self {
        use ToolError::*;
        let description = e.to_string();
        match e {
            UnknownTool(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", description),
            BadRequest(_) => ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", description),
            BadParameter { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_parameter", description)
            }
            Failed(_) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "tool_failed",
                description,
            ),
        }
    }
}
