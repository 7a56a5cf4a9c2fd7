//! Voice gateways and the user tokens they hold (PROTOCOL.md §10): a gateway
//! authenticates with HTTP Basic; with a user's name and voice PIN it gets a
//! short-lived token that stands for that user (`amr` `["pin"]`) and that
//! gateway. [`ApiUser`] is the extractor of the user a request's bearer token
//! stands for.

use super::{json_error, Api};
use crate::bearer::TokenKey;
use crate::confirm::auth::{identity_of, verify_secret, Budget, LimitKey};
use crate::confirm::config::GatewayConfig;
use crate::confirm::flow::CsError;
use crate::httpkit::{authorization, parse_basic, parse_bearer, JsonError};
use crate::secret::Secret;
use crate::store::cs::Identity;
use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{web, FromRequest, HttpRequest};
use serde_json::{json, Value};
use std::future::{ready, Ready};

/// What a user token issued to a gateway carries (sealed: the gateway can
/// neither read nor alter it).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct ApiToken {
    identity: Identity,
    gateway: String,
    /// A digest of the gateway's configured secret hash when the token was
    /// issued: the token holds while that gateway is configured with it.
    #[serde(default)]
    gateway_secret: Option<String>,
    expires: i64,
}

/// What binds a token to its gateway's configured secret (each
/// `secret_hash` has its own salt, so a new secret changes it).
fn secret_digest(secret_hash: &str) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(b"cheq gateway\0");
    h.update(secret_hash.as_bytes());
    crate::sign::b64::encode(&h.finalize()[..16])
}

/// Issues and opens user tokens: sealed claims ([`crate::bearer`]) under a
/// key generated in the data directory, so that a token issued by one CS
/// instance works on every other.
#[derive(Debug)]
pub struct Tokens {
    key: TokenKey,
}

impl Tokens {
    pub fn new(secret: &[u8]) -> Self {
        Tokens {
            key: TokenKey::new(secret, "cheq cs api token"),
        }
    }
}

fn invalid_client() -> JsonError {
    JsonError::new(
        StatusCode::UNAUTHORIZED,
        "invalid_client",
        "gateway authentication failed",
    )
    .with_challenge("Basic realm=\"cheq\"")
}

fn invalid_token(d: &str) -> JsonError {
    JsonError::new(StatusCode::UNAUTHORIZED, "invalid_token", d)
        .with_challenge("Bearer realm=\"cheq\", error=\"invalid_token\"")
}

/// The form of `POST /api/v1/token`. Its `Debug` hides the PIN.
#[derive(Debug, serde::Deserialize)]
pub struct TokenForm {
    pub username: Option<String>,
    pub pin: Option<Secret>,
}

fn gateway_hash<'a>(gateways: &'a [GatewayConfig], id: &str) -> Option<&'a str> {
    gateways
        .iter()
        .find(|g| g.client_id == id)
        .map(|g| g.secret_hash.expose())
}

impl Api {
    /// Checks the gateway's HTTP Basic credentials, from `address`; returns
    /// its client id. An unknown id is refused before any hashing; every
    /// failure counts against the address (and the id from that address), so
    /// guessing from one place cannot lock the real gateway out elsewhere.
    async fn gateway(
        &self,
        authorization: Option<&str>,
        address: &str,
    ) -> Result<String, JsonError> {
        let now = self.cs.now().timestamp();
        let by_address = [LimitKey::Address(address.to_owned())];
        if let Some(retry_after) = self.limiter.locked(&by_address, now).map_err(cs)? {
            return Err(json_error(CsError::TooManyAttempts { retry_after }));
        }
        let (id, secret) = parse_basic(authorization).map_err(|_| invalid_client())?;
        let Some(hash) = gateway_hash(&self.gateways, &id).map(str::to_owned) else {
            self.limiter.fail(&by_address[0], now).map_err(cs)?;
            log::info!(
                "raw API: unknown gateway {}",
                crate::text::keyed_digest(self.log_key(), &id)
            );
            return Err(invalid_client());
        };
        let keys = [
            LimitKey::GatewayAt {
                gateway: id.clone(),
                address: address.to_owned(),
            },
            LimitKey::Address(address.to_owned()),
        ];
        let checked = self
            .limiter
            .guarded(&keys, address, Budget::Gateways, now, move || {
                Ok(verify_secret(&secret, &hash).then_some(()))
            })
            .await
            .map_err(json_error)?;
        if checked.is_none() {
            log::info!(
                "raw API: failed authentication of gateway {}",
                crate::text::keyed_digest(self.log_key(), &id)
            );
            return Err(invalid_client());
        }
        Ok(id)
    }

    /// `POST /api/v1/token`.
    pub(super) async fn issue(
        &self,
        authorization: Option<&str>,
        address: &str,
        form: TokenForm,
    ) -> Result<Value, JsonError> {
        let gateway = self.gateway(authorization, address).await?;
        let username = form.username.as_deref().unwrap_or("").trim().to_owned();
        let pin = form.pin.unwrap_or_default();
        if username.is_empty() || pin.is_empty() {
            return Err(JsonError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "the fields username and pin are required",
            ));
        }
        if crate::confirm::auth::check_username(&username).is_err() {
            return Err(JsonError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_grant",
                "the user name or PIN is wrong",
            ));
        }
        let now = self.cs.now().timestamp();
        // A PIN is only slowed down per user, never refused: a caller who
        // guesses cannot lock the user out (see `auth::limits`).
        let keys = [LimitKey::Pin(username.clone())];
        let login = self.login.clone();
        let u = username.clone();
        let account = self
            .limiter
            .guarded(&keys, address, Budget::People, now, move || {
                login.check_pin(&u, pin.expose())
            })
            .await
            .map_err(json_error)?;
        let Some(account) = account else {
            log::info!(
                "raw API: failed PIN for user {} via gateway {}",
                crate::text::keyed_digest(self.log_key(), &username),
                crate::text::keyed_digest(self.log_key(), &gateway)
            );
            return Err(JsonError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_grant",
                "the user name or PIN is wrong",
            ));
        };
        let entry = ApiToken {
            identity: identity_of(&account, "pin", now),
            gateway_secret: gateway_hash(&self.gateways, &gateway).map(secret_digest),
            gateway,
            expires: now + self.token_ttl,
        };
        let token = self.tokens.key.seal(&entry).ok_or_else(|| {
            JsonError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "the token could not be made",
            )
        })?;
        Ok(json!({"access_token": token, "token_type": "Bearer", "expires_in": self.token_ttl}))
    }

    /// The user a bearer token stands for.
    fn user(&self, authorization: Option<&str>) -> Result<Identity, JsonError> {
        let token = parse_bearer(authorization)
            .map_err(|_| invalid_token("a bearer token from /api/v1/token is required"))?;
        let found: Option<ApiToken> = self.tokens.key.open(token);
        let t = match found {
            Some(t) if t.expires > self.cs.now().timestamp() => t,
            Some(_) => return Err(invalid_token("the token has expired")),
            None => return Err(invalid_token("the token is unknown")),
        };
        // §10: a token stops working when its gateway is removed (or its
        // secret changed) or the user's PIN changed since it was issued.
        let gateway_holds = gateway_hash(&self.gateways, &t.gateway)
            .is_some_and(|hash| t.gateway_secret.as_deref() == Some(&*secret_digest(hash)));
        if !gateway_holds {
            return Err(invalid_token(
                "the token's gateway is no longer registered with these credentials",
            ));
        }
        if !crate::confirm::auth::credential_holds(&*self.login.accounts, &t.identity)
            .map_err(cs)?
        {
            return Err(invalid_token(
                "the credential the token was issued for has changed",
            ));
        }
        log::debug!("raw API call by {} via {}", t.identity.sub, t.gateway);
        Ok(t.identity)
    }
}

fn cs(e: crate::store::StoreError) -> JsonError {
    json_error(CsError::from(e))
}

/// The user a request's bearer token stands for (§10).
#[derive(Debug, Clone)]
pub struct ApiUser(pub Identity);

impl FromRequest for ApiUser {
    type Error = JsonError;
    type Future = Ready<Result<Self, JsonError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let user = match req.app_data::<web::Data<Api>>() {
            Some(api) => api.user(authorization(req)).map(ApiUser),
            None => Err(json_error(CsError::Internal(
                crate::confirm::flow::Internal::Missing("the API's state"),
            ))),
        };
        ready(user)
    }
}
