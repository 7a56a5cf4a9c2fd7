//! OAuth 2.0 client credentials grant (RFC 6749 §4.4) at `POST /oauth/token`,
//! and bearer token checks (RFC 6750), for the CS (PROTOCOL.md §3) and agents.
//!
//! Clients authenticate with HTTP Basic (RFC 6749 §2.3.1, form-urlencoded id
//! and secret) or with `client_id`/`client_secret` in the body, not both. The
//! only scope is `cheq`. Tokens are 256-bit random opaque strings kept in
//! memory with their expiry (a restart makes clients fetch new ones).

use super::config::{ClientConfig, ClientRole};
use super::error::TokenError;
use crate::httpkit::{self, AuthHeaderError};
use crate::throttle::{LimitState, Policy};
use crate::time::Clock;
use chrono::{DateTime, Duration, Utc};
use rand::RngCore;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The one scope.
pub const SCOPE: &str = "cheq";

/// The form of a token request.
#[derive(Debug, Default, Deserialize)]
pub struct TokenRequest {
    pub grant_type: Option<String>,
    pub scope: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
}

/// Who a valid token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub client_id: String,
    pub role: ClientRole,
    /// For agents: the CHEQ subject.
    pub subject: Option<String>,
    pub expires: DateTime<Utc>,
}

/// Registered clients and issued tokens.
pub struct TokenService {
    clients: HashMap<String, ClientConfig>,
    tokens: Mutex<HashMap<String, TokenInfo>>,
    ttl: Duration,
    clock: Arc<dyn Clock>,
    /// Failed client authentications per address (in memory: the RS
    /// compares secrets without hashing, so guessing costs it little, and a
    /// restart forgives).
    failures: Mutex<HashMap<String, LimitState>>,
}

/// Failed client authentications allowed per address before a lock-out.
pub const TOKEN_FAILURES_PER_ADDRESS: Policy = Policy {
    free_failures: 20,
    base_secs: 2,
    max_secs: 900,
    window_secs: 3600,
};

impl std::fmt::Debug for TokenService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenService")
            .field("clients", &self.clients.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Reads `Authorization: Basic …` at the token endpoint into (client id,
/// secret): another scheme is a bad request, a malformed header a failed
/// client authentication.
fn basic_credentials(value: &str) -> Result<(String, String), TokenError> {
    httpkit::parse_basic(Some(value)).map_err(|e| match e {
        AuthHeaderError::OtherScheme => TokenError::InvalidRequest(
            "unsupported Authorization scheme at the token endpoint".into(),
        ),
        AuthHeaderError::Missing | AuthHeaderError::Malformed => {
            TokenError::InvalidClient { basic: true }
        }
    })
}

impl TokenService {
    pub fn new(clients: &[ClientConfig], ttl: Duration, clock: Arc<dyn Clock>) -> Self {
        TokenService {
            clients: clients
                .iter()
                .map(|c| (c.client_id.clone(), c.clone()))
                .collect(),
            tokens: Mutex::new(HashMap::new()),
            ttl,
            clock,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Handles a token request. `authorization` is the `Authorization` header.
    /// Returns the RFC 6749 §5.1 body.
    pub fn issue(
        &self,
        authorization: Option<&str>,
        address: &str,
        form: &TokenRequest,
    ) -> Result<Value, TokenError> {
        let now = self.clock.now().timestamp();
        let locked = self
            .failures
            .lock()
            .ok()
            .and_then(|f| f.get(address).map(|s| s.locked_until - now))
            .filter(|left| *left > 0);
        if let Some(retry_after) = locked {
            return Err(TokenError::TooManyAttempts { retry_after });
        }
        let answer = self.issue_unthrottled(authorization, form);
        if let Err(TokenError::InvalidClient { .. }) = &answer {
            if let Ok(mut f) = self.failures.lock() {
                if f.len() > 100_000 {
                    f.retain(|_, s| s.locked_until > now || now - s.last_failure < 3600);
                }
                let old = f.get(address).copied();
                f.insert(
                    address.to_owned(),
                    TOKEN_FAILURES_PER_ADDRESS.fail(old, now),
                );
            }
        }
        answer
    }

    fn issue_unthrottled(
        &self,
        authorization: Option<&str>,
        form: &TokenRequest,
    ) -> Result<Value, TokenError> {
        let body_creds = form.client_id.is_some() || form.client_secret.is_some();
        let (basic, id, secret) = match (authorization, body_creds) {
            (Some(_), true) => {
                return Err(TokenError::InvalidRequest(
                    "use one client authentication method, not two".into(),
                ))
            }
            (Some(h), false) => {
                let (id, secret) = basic_credentials(h)?;
                (true, id, secret)
            }
            (None, true) => (
                false,
                form.client_id.clone().unwrap_or_default(),
                form.client_secret.clone().unwrap_or_default(),
            ),
            (None, false) => return Err(TokenError::InvalidClient { basic: true }),
        };
        let client = self
            .clients
            .get(&id)
            .filter(|c| httpkit::same_secret(c.client_secret.as_bytes(), secret.as_bytes()))
            .ok_or(TokenError::InvalidClient { basic })?;
        match form.grant_type.as_deref() {
            None => return Err(TokenError::InvalidRequest("missing grant_type".into())),
            Some("client_credentials") => {}
            Some(_) => return Err(TokenError::UnsupportedGrantType),
        }
        if let Some(scope) = &form.scope {
            if scope.split(' ').any(|s| s != SCOPE) {
                return Err(TokenError::InvalidScope);
            }
        }
        let mut raw = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut raw);
        let token = crate::sign::b64::encode(raw);
        let now = self.clock.now();
        let info = TokenInfo {
            client_id: client.client_id.clone(),
            role: client.role,
            subject: client.subject.clone(),
            expires: now + self.ttl,
        };
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.retain(|_, t| t.expires > now);
        tokens.insert(token.clone(), info);
        Ok(json!({
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": self.ttl.num_seconds(),
            "scope": SCOPE,
        }))
    }

    /// Checks a bearer token (the `Authorization` header) for `role`.
    pub fn check(
        &self,
        authorization: Option<&str>,
        role: ClientRole,
    ) -> Result<TokenInfo, TokenError> {
        let token = httpkit::parse_bearer(authorization).map_err(|e| match e {
            AuthHeaderError::Missing => TokenError::MissingToken,
            AuthHeaderError::OtherScheme | AuthHeaderError::Malformed => TokenError::InvalidToken,
        })?;
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let info = tokens
            .get(token)
            .filter(|t| t.expires > self.clock.now())
            .ok_or(TokenError::InvalidToken)?;
        if info.role != role {
            return Err(TokenError::WrongRole(match role {
                ClientRole::Cs => "read or decide confirmations",
                ClientRole::Agent => "call tools",
            }));
        }
        Ok(info.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::ManualClock;

    fn service() -> TokenService {
        let clients = [ClientConfig {
            client_id: "cs".into(),
            client_secret: "the-right-secret".into(),
            role: ClientRole::Cs,
            subject: None,
        }];
        TokenService::new(
            &clients,
            Duration::seconds(300),
            Arc::new(ManualClock::new(chrono::Utc::now())),
        )
    }

    fn form(secret: &str) -> TokenRequest {
        TokenRequest {
            grant_type: Some("client_credentials".into()),
            scope: None,
            client_id: Some("cs".into()),
            client_secret: Some(secret.into()),
        }
    }

    /// Guessing client secrets locks the guessing address, not the client.
    #[test]
    fn the_token_endpoint_throttles_per_address() {
        let t = service();
        for i in 0..21 {
            assert!(
                matches!(
                    t.issue(None, "6.6.6.6", &form("wrong")),
                    Err(TokenError::InvalidClient { .. })
                ),
                "guess {i}"
            );
        }
        assert!(matches!(
            t.issue(None, "6.6.6.6", &form("wrong")),
            Err(TokenError::TooManyAttempts { retry_after: 2 })
        ));
        assert!(matches!(
            t.issue(None, "6.6.6.6", &form("the-right-secret")),
            Err(TokenError::TooManyAttempts { .. })
        ));
        assert!(t.issue(None, "10.0.0.1", &form("the-right-secret")).is_ok());
    }
}
