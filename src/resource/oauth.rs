//! OAuth 2.0 client credentials grant (RFC 6749 §4.4) at `POST /oauth/token`,
//! and bearer token checks (RFC 6750), for the CS (PROTOCOL.md §3) and agents.
//!
//! Clients authenticate with HTTP Basic (RFC 6749 §2.3.1, form-urlencoded id
//! and secret) or with `client_id`/`client_secret` in the body, not both; a
//! CS this RS trusts by issuer may instead present a client assertion signed
//! with its own key (`private_key_jwt`, PROTOCOL.md §16.4; taken by
//! [`super::assertion`]), with neither. The only scope is `cheq`.
//! Tokens are sealed claims ([`crate::bearer`]: the client id, the expiry,
//! and for a token issued by assertion the CS's issuer) under a key
//! generated in the data directory, so that every RS instance sharing that
//! directory honours every token. Failed client authentications, by secret
//! or by assertion, count towards one lock-out per address.

use super::assertion::{AssertionRefusal, TrustedIssuers};
use super::config::{ClientConfig, ClientRole};
use super::error::TokenError;
use crate::bearer::TokenKey;
use crate::httpkit::{self, AuthHeaderError};
use crate::sign::assertion::{claimed_issuer, ASSERTION_TYPE};
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
    /// `urn:ietf:params:oauth:client-assertion-type:jwt-bearer` (§16.4).
    pub client_assertion_type: Option<String>,
    /// A CS's client assertion (§16.4).
    pub client_assertion: Option<String>,
}

impl TokenRequest {
    /// Whether the client authenticates with an assertion.
    pub fn by_assertion(&self) -> bool {
        self.client_assertion.is_some() || self.client_assertion_type.is_some()
    }
}

/// Who a valid token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub client_id: String,
    pub role: ClientRole,
    /// For agents: the CHEQ subject.
    pub subject: Option<String>,
    pub expires: DateTime<Utc>,
    /// For a token issued by assertion (§16.4): the issuer of the CS it
    /// names, the only CS whose CHEQs it reads and decides.
    pub cs: Option<String>,
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
    /// The CSes that may authenticate with their own key (§16.4).
    issuers: Option<TrustedIssuers>,
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
            issuers: None,
        }
    }

    /// Takes client assertions of the CSes of `issuers` (§16.4).
    pub fn trusting(mut self, issuers: TrustedIssuers) -> Self {
        self.issuers = Some(issuers);
        self
    }

    /// The CSes trusted by issuer, if any.
    pub fn issuers(&self) -> Option<&TrustedIssuers> {
        self.issuers.as_ref()
    }

    /// How long `address` is still locked out, if it is.
    fn locked(&self, address: &str, now: i64) -> Option<i64> {
        self.failures
            .lock()
            .ok()
            .and_then(|f| f.get(address).map(|s| s.locked_until - now))
            .filter(|left| *left > 0)
    }

    /// Counts a failed client authentication of `address`.
    fn failed(&self, address: &str, now: i64) {
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

    /// Now, or the refusal of an address locked out by its failures.
    fn not_locked(&self, address: &str) -> Result<i64, TokenError> {
        let now = self.clock.now().timestamp();
        match self.locked(address, now) {
            Some(retry_after) => Err(TokenError::TooManyAttempts { retry_after }),
            None => Ok(now),
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
        let now = self.not_locked(address)?;
        let answer = self.issue_unthrottled(authorization, form);
        if let Err(TokenError::InvalidClient { .. }) = &answer {
            self.failed(address, now);
        }
        answer
    }

    /// Handles a token request whose client authenticates with an
    /// assertion (§16.4; [`TokenRequest::by_assertion`]). Each refusal of
    /// the assertion is logged with its reason (never the assertion).
    pub async fn issue_by_assertion(
        &self,
        authorization: Option<&str>,
        address: &str,
        form: &TokenRequest,
    ) -> Result<Value, TokenError> {
        let now = self.not_locked(address)?;
        let answer = self.by_assertion(authorization, form).await;
        if let Err(TokenError::Assertion(refusal)) = &answer {
            log::info!(
                "token endpoint: a client assertion from {} was refused: {}",
                crate::text::one_line(address),
                crate::text::snippet(refusal.to_string().as_bytes(), 200)
            );
            if TokenError::counts_as_failure(refusal) {
                self.failed(address, now);
            }
        }
        answer
    }

    async fn by_assertion(
        &self,
        authorization: Option<&str>,
        form: &TokenRequest,
    ) -> Result<Value, TokenError> {
        if authorization.is_some() || form.client_secret.is_some() {
            return Err(TokenError::InvalidRequest(
                "use one client authentication method, not two".into(),
            ));
        }
        if form.client_assertion_type.as_deref() != Some(ASSERTION_TYPE) {
            return Err(AssertionRefusal::WrongAssertionType.into());
        }
        let Some(assertion) = form.client_assertion.as_deref() else {
            return Err(TokenError::InvalidRequest(
                "client_assertion is missing".into(),
            ));
        };
        check_grant(form)?;
        if let Some(id) = &form.client_id {
            if claimed_issuer(assertion).ok().as_ref() != Some(id) {
                return Err(AssertionRefusal::OtherClientId.into());
            }
        }
        let Some(issuers) = &self.issuers else {
            return Err(TrustedIssuers::untrusted(assertion).into());
        };
        let issuer = issuers.take(assertion).await?;
        let claims = Claims {
            client_id: issuer.clone(),
            expires: (self.clock.now() + self.ttl).timestamp(),
            issuer: Some(issuer),
        };
        self.answer(&claims, false)
    }

    /// The RFC 6749 §5.1 body of a token carrying `claims`.
    fn answer(&self, claims: &Claims, basic: bool) -> Result<Value, TokenError> {
        let token = self
            .key
            .seal(claims)
            .ok_or(TokenError::InvalidClient { basic })?;
        Ok(json!({
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": self.ttl.num_seconds(),
            "scope": SCOPE,
        }))
    }

    fn issue_unthrottled(
        &self,
        authorization: Option<&str>,
        form: &TokenRequest,
    ) -> Result<Value, TokenError> {
        if form.by_assertion() {
            return Err(TokenError::InvalidRequest(
                "a client assertion is not taken here".into(),
            ));
        }
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
        check_grant(form)?;
        let claims = Claims {
            client_id: client.client_id.clone(),
            expires: (self.clock.now() + self.ttl).timestamp(),
            issuer: None,
        };
        self.answer(&claims, basic)
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
        let expires =
            DateTime::<Utc>::from_timestamp(claims.expires, 0).ok_or(TokenError::InvalidToken)?;
        if let Some(issuer) = claims.issuer {
            // A CS trusted now: one no longer trusted loses its tokens at
            // the next restart.
            if !self.issuers.as_ref().is_some_and(|i| i.trusts(&issuer)) {
                return Err(TokenError::InvalidToken);
            }
            if role != ClientRole::Cs {
                return Err(TokenError::WrongRole(role.denied()));
            }
            return Ok(TokenInfo {
                client_id: issuer.clone(),
                role: ClientRole::Cs,
                subject: None,
                expires,
                cs: Some(issuer),
            });
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
            expires,
            cs: None,
        };
        if info.role != role {
            return Err(TokenError::WrongRole(role.denied()));
        }
        Ok(info)
    }

    /// Forgets the used client assertions that expired (§16.4); how many
    /// went. Blocks.
    pub fn collect_expired(&self) -> Result<usize, crate::store::StoreError> {
        self.issuers
            .as_ref()
            .map_or(Ok(0), TrustedIssuers::collect_expired)
    }
}

/// What a client of `role` may do, as a refusal says it.
trait Denied {
    fn denied(self) -> &'static str;
}

impl Denied for ClientRole {
    fn denied(self) -> &'static str {
        match self {
            ClientRole::Cs => "read or decide confirmations",
            ClientRole::Agent => "call tools",
        }
    }
}

/// The grant and the scope of a token request: client credentials, `cheq`.
fn check_grant(form: &TokenRequest) -> Result<(), TokenError> {
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
    Ok(())
}

/// What an access token carries.
#[derive(Debug, serde::Serialize, Deserialize)]
struct Claims {
    #[serde(rename = "c")]
    client_id: String,
    #[serde(rename = "e")]
    expires: i64,
    /// The CS's issuer, for a token issued by assertion (§16.4).
    #[serde(rename = "i", default, skip_serializing_if = "Option::is_none")]
    issuer: Option<String>,
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
            ..TokenRequest::default()
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

    /// A token issued by assertion names its CS: honoured for the CS's
    /// routes while that CS is trusted, never for an agent's, and not by
    /// an RS that does not trust that CS (whatever it shares).
    #[test]
    fn a_token_by_assertion_names_its_cs() {
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        let secret = b"0123456789abcdef0123456789abcdef";
        let dir = tempfile::tempdir().unwrap();
        let (_db, store) = crate::store::sled_rs::open_dir(&dir.path().join("rs.sled")).unwrap();
        let outbound = cheq_support::outbound::Outbound::new(Default::default()).unwrap();
        let cs = super::super::trusted_cs::DiscoveredCs::new(
            "https://cs.example",
            outbound,
            clock.clone(),
        );
        // The CS by issuer; its users cannot choose another.
        let hosts = super::super::hosts::Hosts::new(
            super::super::trusted_cs::ConfirmationServer::Discovered(cs),
            None,
            clock.clone(),
            "https://rs.example",
            store.settings.clone(),
        );
        let trusting = TokenService::new(&[], Duration::seconds(300), clock.clone(), secret)
            .trusting(TrustedIssuers::new(
                Arc::new(hosts),
                "https://rs.example/oauth/token",
                store.assertions.clone(),
                clock.clone(),
            ));
        let not_trusting = TokenService::new(&[], Duration::seconds(300), clock.clone(), secret);
        let token = trusting
            .answer(
                &Claims {
                    client_id: "https://cs.example".into(),
                    expires: (clock.now() + Duration::seconds(300)).timestamp(),
                    issuer: Some("https://cs.example".into()),
                },
                false,
            )
            .unwrap();
        let header = format!("Bearer {}", token["access_token"].as_str().unwrap());
        let info = trusting.check(Some(&header), ClientRole::Cs).unwrap();
        assert_eq!(info.cs.as_deref(), Some("https://cs.example"));
        assert_eq!(info.role, ClientRole::Cs);
        assert!(matches!(
            trusting.check(Some(&header), ClientRole::Agent),
            Err(TokenError::WrongRole(_))
        ));
        assert!(matches!(
            not_trusting.check(Some(&header), ClientRole::Cs),
            Err(TokenError::InvalidToken)
        ));
    }
}
