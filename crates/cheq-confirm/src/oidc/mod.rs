//! Sign-in with the identity provider people already use (the draft's "work
//! with existing user authentication techniques"): the CS as an OpenID
//! Connect relying party, authorization code flow with PKCE, `state` and
//! `nonce` (OpenID Connect Core 1.0 §3.1), on the `openidconnect` crate.
//!
//! - [`Providers::begin`] discovers the provider (cached; a failure too, for
//!   [`DISCOVERY_RETRY_SECS`]), and returns the authorization URL and a
//!   [`Pending`] login sealed for a cookie: nothing is stored for a visitor
//!   who has not finished signing in.
//! - [`Providers::finish`] checks the callback against that cookie (`state`),
//!   redeems the code (PKCE verifier, `client_secret_basic` or
//!   `client_secret_post`), and checks the ID token as Core §3.1.3.7 says, one
//!   named step at a time ([`IdTokenProblem`] says which failed): signature by
//!   a key of the provider's JWKS (fetched again, at most once a minute, when
//!   a token names an unknown `kid`), an algorithm of [`ALLOWED_ALGS`] (never
//!   `none`, never HMAC), issuer, audience, `azp`, expiry, `iat`, `nonce`,
//!   and `auth_time` when a fresh sign-in was asked for (`max_age`, which
//!   obliges the provider to send it). Without one, a provider that sends no
//!   `auth_time` leaves the time of the sign-in unknown: never taken to be
//!   the callback's, so that no freshness rule passes on it.
//! - Every answer of a provider (discovery, JWKS, token, UserInfo) is read
//!   through [`super::fetch::send_capped`]: timeouts, no redirect, and at
//!   most [`Endpoint::limit`] bytes.
//! - [`account_for`] maps (issuer, `sub`) to a CS account; an e-mail becomes a
//!   name the user may decide for only when `email_verified` is true, and the
//!   store refuses an e-mail that another account (local, or of another
//!   provider) already holds.
//!
//! This file is the public face: [`Providers`], the errors, and what callers
//! hold. The work is in its parts, by job:
//! - `discovery`: the provider's metadata and key set, cached, and the capped
//!   exchange every request to a provider goes through (OpenID Connect
//!   Discovery 1.0 §4);
//! - `login`: begin and finish of the code flow (Core §3.1.2, §3.1.3), PKCE
//!   (RFC 7636), the pending sign-in sealed in a cookie, RP-initiated logout;
//! - `id_token`: the ID-token rules of Core §3.1.3.7, one named check each;
//! - `userinfo`: the e-mail of the UserInfo answer (Core §5.3);
//! - `accounts`: the CS account and identity of an external login (account
//!   policy, not OpenID Connect).
//!
//! The CS's one other way out besides [`super::fetch`]; no actix here.

mod accounts;
mod discovery;
mod id_token;
mod login;
mod userinfo;

pub use accounts::{account_for, account_name, amr_of, identity_of, EXTERNAL_AMR, RFC8176_AMR};
pub use discovery::{Endpoint, DISCOVERY_RETRY_SECS, DISCOVERY_TTL_SECS, JWKS_REFETCH_SECS};
pub use id_token::{IdTokenProblem, ALLOWED_ALGS, MAX_IAT_AGE_SECS, SKEW_SECS};
pub use login::{Callback, Pending, PENDING_TTL_SECS};

use super::config::{IdentityProviderConfig, TokenEndpointAuth};
use cheq_store::StoreError;
use cheq_support::bearer::TokenKey;
use cheq_support::secret::Secret;
use cheq_support::time::Clock;
use discovery::Discovered;
use openidconnect::RedirectUrl;
use std::sync::{Arc, Mutex};

/// Connect timeout of every request to a provider.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Total time one request to a provider may take, reading its answer
/// included.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a request to a provider brought no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderHttpError {
    #[error("its {0} could not be fetched: {1}")]
    Transport(Endpoint, String),
    #[error("its {0} did not come in time")]
    Timeout(Endpoint),
    #[error("its {what} answered HTTP {status}")]
    Status { what: Endpoint, status: u16 },
    #[error("its {what} is larger than {limit} bytes, and was not read")]
    TooLarge { what: Endpoint, limit: usize },
}

/// Why a sign-in with a provider failed. Each has a page a person
/// understands (`confirm::web`); nothing is stored before success.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoginError {
    #[error("no identity provider is called {0:?} here")]
    UnknownProvider(String),
    /// The provider could not be asked, or did not answer (in time, or in
    /// the bounds of [`Endpoint::limit`]).
    #[error("{provider} could not be used: {cause}")]
    Unreachable {
        provider: String,
        cause: ProviderHttpError,
    },
    #[error("{provider} is not set up correctly: {detail}")]
    Misconfigured { provider: String, detail: String },
    #[error("this sign-in was not started in this browser, or it took too long")]
    NoPendingLogin,
    #[error("the answer from the identity provider does not belong to the sign-in started in this browser")]
    StateMismatch,
    #[error("{provider} did not sign you in ({error})")]
    Refused { provider: String, error: String },
    /// The token endpoint refused the code (`invalid_grant`, RFC 6749
    /// §5.2): already redeemed, expired, or not issued for this sign-in's
    /// PKCE verifier. The visitor's doing: a replayed or made-up callback.
    #[error("{provider} refused the code of this sign-in: it was used already, or is not this sign-in's")]
    CodeRefused { provider: String },
    #[error("{provider} refused to complete the sign-in: {detail}")]
    TokenRequest { provider: String, detail: String },
    #[error("{provider}'s answer cannot be trusted: {problem}")]
    IdToken {
        provider: String,
        problem: IdTokenProblem,
    },
    #[error("the e-mail address {email} already belongs to another account here")]
    EmailTaken { email: String },
    #[error("account {0:?} exists here and is not this provider's")]
    AccountClash(String),
    #[error("{message}")]
    Store { message: String, unavailable: bool },
}

impl From<StoreError> for LoginError {
    fn from(e: StoreError) -> Self {
        LoginError::Store {
            unavailable: matches!(e, StoreError::Unavailable { .. }),
            message: e.to_string(),
        }
    }
}

/// Who a provider says signed in, after every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalLogin {
    pub provider: String,
    pub issuer: String,
    pub subject: String,
    /// The e-mail, only if the provider said it verified it.
    pub verified_email: Option<String>,
    /// When the user authenticated, as the provider reported it (`None`
    /// when its ID token has no `auth_time`).
    pub auth_time: Option<i64>,
    pub amr: Vec<String>,
    pub id_token: String,
}

struct Provider {
    name: String,
    issuer: String,
    client_id: String,
    secret: Secret,
    scopes: Vec<String>,
    auth: Option<TokenEndpointAuth>,
    discovered: Mutex<Option<Arc<Discovered>>>,
    /// The last discovery that failed, and when: the answer until
    /// [`DISCOVERY_RETRY_SECS`] have passed.
    failed: Mutex<Option<(i64, LoginError)>>,
    /// Held while discovery is fetched: one fetch at a time, which every
    /// caller that waited for it shares.
    discovering: tokio::sync::Mutex<()>,
}

/// The configured identity providers and what the CS learned of them.
pub struct Providers {
    list: Vec<Provider>,
    http: reqwest::Client,
    redirect: RedirectUrl,
    key: TokenKey,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Providers")
            .field("names", &self.names())
            .finish_non_exhaustive()
    }
}

fn unreachable(provider: &str, cause: ProviderHttpError) -> LoginError {
    LoginError::Unreachable {
        provider: provider.to_owned(),
        cause,
    }
}

fn misconfigured(provider: &str, detail: impl Into<String>) -> LoginError {
    LoginError::Misconfigured {
        provider: provider.to_owned(),
        detail: detail.into(),
    }
}

impl Providers {
    /// The providers of the configuration; `public_origin` is the CS's
    /// (`<origin>/oidc/callback` is the redirect URI); `secret` seals the
    /// pending-login cookies.
    pub fn new(
        configs: &[IdentityProviderConfig],
        public_origin: &str,
        secret: &[u8],
        clock: Arc<dyn Clock>,
    ) -> Result<Self, String> {
        let mut list = Vec::new();
        for c in configs {
            list.push(Provider {
                name: c.name.clone(),
                issuer: c.issuer.clone(),
                client_id: c.client_id.clone(),
                secret: c.secret().map_err(|e| e.to_string())?,
                scopes: c.scopes.clone(),
                auth: c.token_endpoint_auth_method,
                discovered: Mutex::new(None),
                failed: Mutex::new(None),
                discovering: tokio::sync::Mutex::new(()),
            });
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            // A provider's endpoints are taken as discovery names them; a
            // redirect could carry the client secret elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| e.to_string())?;
        let redirect = RedirectUrl::new(format!(
            "{}/oidc/callback",
            public_origin.trim_end_matches('/')
        ))
        .map_err(|e| e.to_string())?;
        Ok(Providers {
            list,
            http,
            redirect,
            key: TokenKey::new(secret, "cheq oidc pending login"),
            clock,
        })
    }

    /// The providers' names, in configuration order.
    pub fn names(&self) -> Vec<&str> {
        self.list.iter().map(|p| p.name.as_str()).collect()
    }

    /// Whether any provider is configured.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The redirect URI to register at the providers.
    pub fn redirect_uri(&self) -> &str {
        self.redirect.as_str()
    }

    fn provider(&self, name: &str) -> Result<&Provider, LoginError> {
        self.list
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| LoginError::UnknownProvider(name.to_owned()))
    }

    fn now(&self) -> i64 {
        self.clock.now().timestamp()
    }
}
