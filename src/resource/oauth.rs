//! OAuth 2.0 client credentials grant (RFC 6749 §4.4) at `POST /oauth/token`,
//! and bearer token checks (RFC 6750), for the CS (PROTOCOL.md §3) and agents.
//!
//! Clients authenticate with HTTP Basic (RFC 6749 §2.3.1, form-urlencoded id
//! and secret) or with `client_id`/`client_secret` in the body, not both. The
//! only scope is `cheq`. Tokens are sealed claims ([`crate::bearer`]: the
//! client id and the expiry) under a key generated in the data directory,
//! so that every RS instance sharing that directory honours every token.

use super::config::{ClientConfig, ClientRole};
use super::error::TokenError;
use crate::bearer::TokenKey;
use crate::httpkit::{self, AuthHeaderError};
use crate::throttle::{LimitState, Policy};
use crate::time::Clock;
use chrono::{DateTime, Duration, Utc};
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
    key: TokenKey,
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
    /// `secret` is the generated token secret of the data directory.
    pub fn new(
        clients: &[ClientConfig],
        ttl: Duration,
        clock: Arc<dyn Clock>,
        secret: &[u8],
    ) -> Self {
        TokenService {
            clients: clients
                .iter()
                .map(|c| (c.client_id.clone(), c.clone()))
                .collect(),
            key: TokenKey::new(secret, "cheq rs access token"),
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
            .filter(|c| {
                httpkit::same_secret(c.client_secret.expose().as_bytes(), secret.as_bytes())
            })
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
        let claims = Claims {
            client_id: client.client_id.clone(),
            expires: (self.clock.now() + self.ttl).timestamp(),
        };
        let token = self
            .key
            .seal(&claims)
            .ok_or(TokenError::InvalidClient { basic })?;
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
        let claims: Claims = self.key.open(token).ok_or(TokenError::InvalidToken)?;
        if claims.expires <= self.clock.now().timestamp() {
            return Err(TokenError::InvalidToken);
        }
        // The client as configured now: a client removed from the
        // configuration loses its tokens at the next restart.
        let client = self
            .clients
            .get(&claims.client_id)
            .ok_or(TokenError::InvalidToken)?;
        let info = TokenInfo {
            client_id: client.client_id.clone(),
            role: client.role,
            subject: client.subject.clone(),
            expires: DateTime::<Utc>::from_timestamp(claims.expires, 0)
                .ok_or(TokenError::InvalidToken)?,
        };
        if info.role != role {
            return Err(TokenError::WrongRole(match role {
                ClientRole::Cs => "read or decide confirmations",
                ClientRole::Agent => "call tools",
            }));
        }
        Ok(info)
    }
}

/// What an access token carries.
#[derive(Debug, serde::Serialize, Deserialize)]
struct Claims {
    #[serde(rename = "c")]
    client_id: String,
    #[serde(rename = "e")]
    expires: i64,
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
            b"0123456789abcdef0123456789abcdef",
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

    /// A token from one instance works on another with the same data
    /// directory secret, until it expires; forged and foreign ones do not.
    #[test]
    fn a_token_is_honoured_by_every_instance_until_it_expires() {
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        let clients = [ClientConfig {
            client_id: "cs".into(),
            client_secret: "the-right-secret".into(),
            role: ClientRole::Cs,
            subject: None,
        }];
        let secret = b"0123456789abcdef0123456789abcdef";
        let one = TokenService::new(&clients, Duration::seconds(300), clock.clone(), secret);
        let two = TokenService::new(&clients, Duration::seconds(300), clock.clone(), secret);
        let other = TokenService::new(
            &clients,
            Duration::seconds(300),
            clock.clone(),
            b"another secret, another host....",
        );
        let answer = one
            .issue(None, "1.2.3.4", &form("the-right-secret"))
            .unwrap();
        let token = answer["access_token"].as_str().unwrap();
        let header = format!("Bearer {token}");
        let info = two.check(Some(&header), ClientRole::Cs).unwrap();
        assert_eq!(info.client_id, "cs");
        assert!(matches!(
            two.check(Some(&header), ClientRole::Agent),
            Err(TokenError::WrongRole(_))
        ));
        assert!(matches!(
            other.check(Some(&header), ClientRole::Cs),
            Err(TokenError::InvalidToken)
        ));
        clock.advance(chrono::Duration::seconds(301));
        assert!(matches!(
            two.check(Some(&header), ClientRole::Cs),
            Err(TokenError::InvalidToken)
        ));
    }
}
