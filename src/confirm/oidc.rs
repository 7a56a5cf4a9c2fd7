//! Sign-in with the identity provider people already use (ISSUE 10; the
//! draft's "work with existing user authentication techniques"): the CS as an
//! OpenID Connect relying party, authorization code flow with PKCE, `state`
//! and `nonce` (OpenID Connect Core 1.0 §3.1), on the `openidconnect` crate.
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
//! The CS's one other way out besides [`super::fetch`]; no actix here.

use super::config::{IdentityProviderConfig, TokenEndpointAuth};
use crate::bearer::TokenKey;
use crate::store::cs::{Account, AccountPutError, Accounts, ExternalId, Identity};
use crate::store::StoreError;
use crate::time::Clock;
use openidconnect::core::{
    CoreAuthPrompt, CoreAuthenticationFlow, CoreClient, CoreClientAuthMethod, CoreIdToken,
    CoreIdTokenClaims, CoreIdTokenVerifier, CoreJsonWebKeySet, CoreJwsSigningAlgorithm,
    CoreTokenResponse,
};
use openidconnect::{
    AuthType, AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken,
    IssuerUrl, Nonce, PkceCodeChallenge, PkceCodeVerifier, PostLogoutRedirectUrl,
    ProviderMetadataWithLogout, RedirectUrl, Scope, SignatureVerificationError, TokenResponse,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};

/// ID-token signature algorithms accepted: the asymmetric ones providers use
/// (RS256 is the OpenID Connect default, ES256 common). `none` and HMAC
/// (which a verifier must never run with a public key) are absent.
pub const ALLOWED_ALGS: [CoreJwsSigningAlgorithm; 8] = [
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha384,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha512,
    CoreJwsSigningAlgorithm::RsaSsaPssSha256,
    CoreJwsSigningAlgorithm::RsaSsaPssSha384,
    CoreJwsSigningAlgorithm::EcdsaP256Sha256,
    CoreJwsSigningAlgorithm::EcdsaP384Sha384,
    CoreJwsSigningAlgorithm::EdDsa,
];

/// How long a started sign-in may take (the cookie's life).
pub const PENDING_TTL_SECS: i64 = 600;
/// Clock skew allowed between the CS and a provider.
pub const SKEW_SECS: i64 = 60;
/// An ID token issued longer ago than this is refused (Core §3.1.3.7 step 10).
pub const MAX_IAT_AGE_SECS: i64 = 600;
/// The least time between two fetches of a provider's JWKS for an unknown
/// `kid`, so that a stream of forged tokens cannot make the CS fetch in a loop.
pub const JWKS_REFETCH_SECS: i64 = 60;
/// Discovery is read again after this long.
pub const DISCOVERY_TTL_SECS: i64 = 3600;
/// A failed discovery is the answer, without asking the provider again, for
/// this long: a sign-in can be started by anyone, and a stream of them must
/// not make the CS fetch in a loop while the provider is down.
pub const DISCOVERY_RETRY_SECS: i64 = 30;
/// Connect timeout of every request to a provider.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Total time one request to a provider may take, reading its answer
/// included.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Longest local path carried through a sign-in.
const MAX_NEXT: usize = 1024;

/// The RFC 8176 authentication method reference values.
pub const RFC8176_AMR: [&str; 21] = [
    "face", "fpt", "geo", "hwk", "iris", "kba", "mca", "mfa", "otp", "pin", "pop", "pwd", "rba",
    "retina", "sc", "sms", "swk", "tel", "user", "vbm", "wia",
];
/// The `amr` of a sign-in whose provider named no RFC 8176 method: "by an
/// external identity provider" (documented in the README).
pub const EXTERNAL_AMR: &str = "ext";

/// Why an ID token was refused: one variant per check of Core §3.1.3.7.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdTokenProblem {
    #[error("the token answer carried no ID token")]
    Missing,
    #[error("the ID token is not well-formed: {0}")]
    Malformed(String),
    #[error("the ID token was issued by someone else: {0}")]
    Issuer(String),
    #[error("the ID token is for another client: {0}")]
    Audience(String),
    #[error("the ID token's authorized party (azp) is not this client")]
    AuthorizedParty,
    #[error("the ID token's algorithm is not allowed: {0}")]
    Algorithm(String),
    #[error("no key of the provider matches the ID token")]
    UnknownKey,
    #[error("the ID token's signature does not verify: {0}")]
    Signature(String),
    #[error("the ID token has expired: {0}")]
    Expired(String),
    #[error("the ID token's issue time (iat) is not acceptable: {0}")]
    IssuedAt(String),
    #[error("the ID token's nonce is not the one of this sign-in")]
    Nonce,
    #[error("the sign-in is not fresh enough: {0}")]
    AuthTime(String),
}

/// Which of a provider's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Discovery,
    Jwks,
    Token,
    UserInfo,
}

impl Endpoint {
    /// The longest answer of this kind read: a discovery document is a few
    /// KiB, a key set a few keys (some with certificate chains), a token
    /// answer an ID token and an access token, UserInfo a few claims.
    pub fn limit(self) -> usize {
        match self {
            Endpoint::Discovery | Endpoint::Token | Endpoint::UserInfo => 64 * 1024,
            Endpoint::Jwks => 256 * 1024,
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Endpoint::Discovery => "discovery document",
            Endpoint::Jwks => "key set (JWKS)",
            Endpoint::Token => "token answer",
            Endpoint::UserInfo => "UserInfo answer",
        })
    }
}

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

/// A sign-in started in a browser: what the callback is checked against.
/// Sealed into a cookie (never stored at the CS).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pending {
    /// The provider's name.
    p: String,
    /// `state`.
    s: String,
    /// `nonce`.
    n: String,
    /// The PKCE verifier.
    v: String,
    /// Where to go after.
    next: String,
    /// When it started.
    t: i64,
    /// The `max_age` asked for, if a fresh sign-in was required.
    m: Option<i64>,
}

impl Pending {
    /// The local path to return to.
    pub fn next(&self) -> &str {
        &self.next
    }
}

/// What the callback brought: the query of `/oidc/callback`.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct Callback {
    pub state: Option<String>,
    pub code: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
    /// The issuer, from a provider that names it (RFC 9207): it must be
    /// the one the sign-in was started with.
    pub iss: Option<String>,
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

struct Discovered {
    metadata: ProviderMetadataWithLogout,
    at: i64,
    /// When the JWKS was last fetched again for an unknown `kid`.
    refetched_at: Option<i64>,
}

struct Provider {
    name: String,
    issuer: String,
    client_id: String,
    secret: String,
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

/// One request to a provider, as the `openidconnect` crate makes it, sent
/// the way [`super::fetch`] sends the RS's token request: through the
/// client's timeouts (the total one covers reading the answer), with no
/// redirect followed, reading at most [`Endpoint::limit`] bytes of the
/// answer, and refusing a longer one as soon as it is announced or read.
async fn capped(
    http: reqwest::Client,
    what: Endpoint,
    request: openidconnect::HttpRequest,
) -> Result<openidconnect::HttpResponse, ProviderHttpError> {
    use super::fetch::Capped;
    super::fetch::send_capped(&http, request, what.limit())
        .await
        .map_err(|e| match e {
            Capped::TooLarge => ProviderHttpError::TooLarge {
                what,
                limit: what.limit(),
            },
            Capped::Http(e) if e.is_timeout() => ProviderHttpError::Timeout(what),
            // Without the URL: the endpoint names it.
            Capped::Http(e) => ProviderHttpError::Transport(
                what,
                crate::text::one_line(&e.without_url().to_string()),
            ),
        })
}

fn misconfigured(provider: &str, detail: impl Into<String>) -> LoginError {
    LoginError::Misconfigured {
        provider: provider.to_owned(),
        detail: detail.into(),
    }
}

/// The name of the CS account that (issuer, `sub`) stands for: stable,
/// opaque, and a valid user name (`oidc-` and 22 base64url characters).
pub fn account_name(issuer: &str, subject: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"cheq oidc account\0");
    h.update(issuer.as_bytes());
    h.update([0]);
    h.update(subject.as_bytes());
    let digest = crate::sign::b64::encode(h.finalize());
    format!("oidc-{}", &digest[..22])
}

/// The `amr` to countersign with: the provider's values that RFC 8176
/// registers, or [`EXTERNAL_AMR`] when none remains.
pub fn amr_of(provider_amr: &[String]) -> Vec<String> {
    let mut kept: Vec<String> = Vec::new();
    for a in provider_amr {
        if RFC8176_AMR.contains(&a.as_str()) && !kept.contains(a) {
            kept.push(a.clone());
        }
    }
    if kept.is_empty() {
        kept.push(EXTERNAL_AMR.to_owned());
    }
    kept
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

    /// The provider's discovery document and keys (cached for
    /// [`DISCOVERY_TTL_SECS`]; a failure for [`DISCOVERY_RETRY_SECS`]).
    async fn discovered(&self, p: &Provider) -> Result<Arc<Discovered>, LoginError> {
        if let Some(known) = self.known_discovery(p) {
            return known;
        }
        // One fetch at a time; a caller that waited finds its result.
        let _fetching = p.discovering.lock().await;
        if let Some(known) = self.known_discovery(p) {
            return known;
        }
        let now = self.now();
        match self.discover(p).await {
            Ok(metadata) => {
                let d = Arc::new(Discovered {
                    metadata,
                    at: now,
                    refetched_at: None,
                });
                if let Ok(mut g) = p.discovered.lock() {
                    *g = Some(d.clone());
                }
                if let Ok(mut f) = p.failed.lock() {
                    *f = None;
                }
                Ok(d)
            }
            Err(e) => {
                if let Ok(mut f) = p.failed.lock() {
                    *f = Some((now, e.clone()));
                }
                Err(e)
            }
        }
    }

    /// What is known of the provider's discovery without asking it: a
    /// document younger than [`DISCOVERY_TTL_SECS`], or a failure younger
    /// than [`DISCOVERY_RETRY_SECS`].
    fn known_discovery(&self, p: &Provider) -> Option<Result<Arc<Discovered>, LoginError>> {
        let now = self.now();
        if let Some(d) = p.discovered.lock().ok().and_then(|g| g.clone()) {
            if (0..DISCOVERY_TTL_SECS).contains(&(now - d.at)) {
                return Some(Ok(d));
            }
        }
        let failed = p.failed.lock().ok()?;
        let (at, e) = failed.as_ref()?;
        (0..DISCOVERY_RETRY_SECS)
            .contains(&(now - at))
            .then(|| Err(e.clone()))
    }

    /// Fetches the provider's discovery document, then its key set.
    async fn discover(&self, p: &Provider) -> Result<ProviderMetadataWithLogout, LoginError> {
        use openidconnect::DiscoveryError as D;
        let issuer =
            IssuerUrl::new(p.issuer.clone()).map_err(|e| misconfigured(&p.name, e.to_string()))?;
        // The crate fetches both documents through this client; the path
        // says which one is asked.
        let http = |request: openidconnect::HttpRequest| {
            let what = if request
                .uri()
                .path()
                .ends_with("/.well-known/openid-configuration")
            {
                Endpoint::Discovery
            } else {
                Endpoint::Jwks
            };
            capped(self.http.clone(), what, request)
        };
        let metadata = ProviderMetadataWithLogout::discover_async(issuer, &http)
            .await
            .map_err(|e| match e {
                D::Request(cause) => unreachable(&p.name, cause),
                D::Response(status, _, _) => unreachable(
                    &p.name,
                    ProviderHttpError::Status {
                        what: Endpoint::Discovery,
                        status: status.as_u16(),
                    },
                ),
                D::Validation(v) => misconfigured(&p.name, v),
                D::Parse(e) => misconfigured(
                    &p.name,
                    format!("its discovery document or key set cannot be read: {e}"),
                ),
                e => misconfigured(&p.name, e.to_string()),
            })?;
        check_endpoints(&metadata).map_err(|detail| misconfigured(&p.name, detail))?;
        Ok(metadata)
    }

    /// Fetches the provider's JWKS again, unless it was fetched less than
    /// [`JWKS_REFETCH_SECS`] ago; `None` when it was not fetched.
    async fn refetch_jwks(&self, p: &Provider, d: &Discovered) -> Option<Arc<Discovered>> {
        let now = self.now();
        {
            // Check and claim the refetch under one lock, before the request,
            // so that concurrent callers do not fetch too.
            let mut guard = p.discovered.lock().ok()?;
            let current = guard.as_ref()?;
            if current
                .refetched_at
                .is_some_and(|t| now - t < JWKS_REFETCH_SECS)
            {
                return None;
            }
            let claimed = Arc::new(Discovered {
                metadata: current.metadata.clone(),
                at: current.at,
                refetched_at: Some(now),
            });
            *guard = Some(claimed);
        }
        let http = |request| capped(self.http.clone(), Endpoint::Jwks, request);
        let jwks = CoreJsonWebKeySet::fetch_async(d.metadata.jwks_uri(), &http)
            .await
            .ok()?;
        let fresh = Arc::new(Discovered {
            metadata: d.metadata.clone().set_jwks(jwks),
            at: d.at,
            refetched_at: Some(now),
        });
        if let Ok(mut g) = p.discovered.lock() {
            *g = Some(fresh.clone());
        }
        Some(fresh)
    }

    fn client(
        &self,
        p: &Provider,
        d: &Discovered,
    ) -> CoreClient<
        openidconnect::EndpointSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointMaybeSet,
        openidconnect::EndpointMaybeSet,
    > {
        let supported = d.metadata.token_endpoint_auth_methods_supported();
        let post_only = supported.is_some_and(|m| {
            m.contains(&CoreClientAuthMethod::ClientSecretPost)
                && !m.contains(&CoreClientAuthMethod::ClientSecretBasic)
        });
        let auth = match p.auth {
            Some(TokenEndpointAuth::ClientSecretPost) => AuthType::RequestBody,
            Some(TokenEndpointAuth::ClientSecretBasic) => AuthType::BasicAuth,
            None if post_only => AuthType::RequestBody,
            None => AuthType::BasicAuth,
        };
        CoreClient::from_provider_metadata(
            d.metadata.clone(),
            ClientId::new(p.client_id.clone()),
            Some(ClientSecret::new(p.secret.clone())),
        )
        .set_redirect_uri(self.redirect.clone())
        .set_auth_type(auth)
    }

    /// Starts a sign-in at provider `name`: the URL to send the browser to,
    /// and the sealed [`Pending`] for the cookie. With `max_age`, the
    /// provider is asked for a fresh authentication (`max_age`,
    /// `prompt=login`) and the callback checks `auth_time`.
    pub async fn begin(
        &self,
        name: &str,
        next: &str,
        max_age: Option<i64>,
    ) -> Result<(String, String), LoginError> {
        let p = self.provider(name)?;
        let d = self.discovered(p).await?;
        let client = self.client(p, &d);
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .set_pkce_challenge(challenge);
        for s in p.scopes.iter().filter(|s| *s != "openid") {
            request = request.add_scope(Scope::new(s.clone()));
        }
        if let Some(m) = max_age {
            request = request
                .set_max_age(std::time::Duration::from_secs(m.max(0) as u64))
                .add_prompt(CoreAuthPrompt::Login);
        }
        let (url, state, nonce) = request.url();
        let next = if next.len() <= MAX_NEXT {
            next.to_owned()
        } else {
            "/history".to_owned()
        };
        let pending = Pending {
            p: p.name.clone(),
            s: state.secret().clone(),
            n: nonce.secret().clone(),
            v: verifier.secret().clone(),
            next,
            t: self.now(),
            m: max_age,
        };
        let sealed = self
            .key
            .seal(&pending)
            .ok_or_else(|| misconfigured(name, "the sign-in could not be sealed"))?;
        Ok((url.to_string(), sealed))
    }

    /// Opens a pending sign-in from its cookie (`None` when missing, forged
    /// or expired).
    pub fn pending(&self, sealed: Option<&str>) -> Option<Pending> {
        let pending: Pending = self.key.open(sealed?)?;
        let age = self.now() - pending.t;
        ((0 - SKEW_SECS..=PENDING_TTL_SECS).contains(&age)).then_some(pending)
    }

    /// Completes a sign-in: the callback's `state` must be the cookie's, the
    /// code is redeemed, the ID token checked. Returns who signed in.
    pub async fn finish(
        &self,
        pending: Option<Pending>,
        callback: &Callback,
    ) -> Result<(ExternalLogin, Pending), LoginError> {
        let pending = pending.ok_or(LoginError::NoPendingLogin)?;
        let state_ok = callback
            .state
            .as_deref()
            .is_some_and(|s| crate::sign::same_secret(s.as_bytes(), pending.s.as_bytes()));
        if !state_ok {
            return Err(LoginError::StateMismatch);
        }
        let p = self.provider(&pending.p)?;
        if callback.iss.as_ref().is_some_and(|iss| iss != &p.issuer) {
            return Err(LoginError::IdToken {
                provider: p.name.clone(),
                problem: IdTokenProblem::Issuer("the answer names another issuer (iss)".into()),
            });
        }
        if let Some(error) = &callback.error {
            let error = crate::text::one_line(error);
            return Err(LoginError::Refused {
                provider: p.name.clone(),
                error: error.chars().take(100).collect(),
            });
        }
        let code = callback
            .code
            .clone()
            .filter(|c| !c.is_empty() && c.len() <= 4096)
            .ok_or_else(|| LoginError::Refused {
                provider: p.name.clone(),
                error: "no code".into(),
            })?;
        let d = self.discovered(p).await?;
        let client = self.client(p, &d);
        let http = |request| capped(self.http.clone(), Endpoint::Token, request);
        let response: CoreTokenResponse = client
            .exchange_code(AuthorizationCode::new(code))
            .map_err(|e| misconfigured(&p.name, e.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(pending.v.clone()))
            .request_async(&http)
            .await
            .map_err(|e| token_error(&p.name, e))?;
        let id_token = response.id_token().ok_or_else(|| LoginError::IdToken {
            provider: p.name.clone(),
            problem: IdTokenProblem::Missing,
        })?;
        let claims = match self.verify(p, &d, id_token, &pending) {
            Err(IdTokenProblem::UnknownKey) => match self.refetch_jwks(p, &d).await {
                Some(fresh) => self.verify(p, &fresh, id_token, &pending),
                None => Err(IdTokenProblem::UnknownKey),
            },
            other => other,
        }
        .map_err(|problem| LoginError::IdToken {
            provider: p.name.clone(),
            problem,
        })?;
        let mut verified_email = match (claims.email(), claims.email_verified()) {
            (Some(e), Some(true)) => Some(e.as_str().to_owned()),
            _ => None,
        };
        // Many providers put the e-mail in the UserInfo answer only (Core
        // §5.4): asked for when the ID token has none, for the same `sub`
        // (§5.3.2; the crate checks it).
        if claims.email().is_none() && p.scopes.iter().any(|s| s == "email") {
            verified_email = self
                .userinfo_email(p, &d, &response, claims.subject().clone())
                .await?;
        }
        let amr: Vec<String> = claims
            .auth_method_refs()
            .map(|v| v.iter().map(|a| a.as_str().to_owned()).collect())
            .unwrap_or_default();
        let login = ExternalLogin {
            provider: p.name.clone(),
            issuer: p.issuer.clone(),
            subject: claims.subject().as_str().to_owned(),
            verified_email,
            auth_time: claims.auth_time().map(|t| t.timestamp()),
            amr: amr_of(&amr),
            id_token: id_token.to_string(),
        };
        Ok((login, pending))
    }

    /// The verified e-mail of the UserInfo answer, if the provider has the
    /// endpoint and says it verified the address.
    async fn userinfo_email(
        &self,
        p: &Provider,
        d: &Discovered,
        response: &CoreTokenResponse,
        subject: openidconnect::SubjectIdentifier,
    ) -> Result<Option<String>, LoginError> {
        use openidconnect::OAuth2TokenResponse;
        if d.metadata.userinfo_endpoint().is_none() {
            return Ok(None);
        }
        let client = self.client(p, d);
        let http = |request| capped(self.http.clone(), Endpoint::UserInfo, request);
        let info: openidconnect::core::CoreUserInfoClaims = client
            .user_info(response.access_token().clone(), Some(subject))
            .map_err(|e| misconfigured(&p.name, e.to_string()))?
            .request_async(&http)
            .await
            .map_err(|e| match e {
                openidconnect::UserInfoError::Request(cause) => unreachable(&p.name, cause),
                openidconnect::UserInfoError::Response(status, _, _) => unreachable(
                    &p.name,
                    ProviderHttpError::Status {
                        what: Endpoint::UserInfo,
                        status: status.as_u16(),
                    },
                ),
                e => LoginError::TokenRequest {
                    provider: p.name.clone(),
                    detail: crate::text::one_line(&format!("userinfo: {e}")),
                },
            })?;
        Ok(match (info.email(), info.email_verified()) {
            (Some(e), Some(true)) => Some(e.as_str().to_owned()),
            _ => None,
        })
    }

    /// The checks of Core §3.1.3.7 on one ID token.
    fn verify(
        &self,
        p: &Provider,
        d: &Discovered,
        id_token: &CoreIdToken,
        pending: &Pending,
    ) -> Result<CoreIdTokenClaims, IdTokenProblem> {
        let now = self.clock.now();
        let verifier = CoreIdTokenVerifier::new_confidential_client(
            ClientId::new(p.client_id.clone()),
            ClientSecret::new(p.secret.clone()),
            d.metadata.issuer().clone(),
            d.metadata.jwks().clone(),
        )
        .set_allowed_algs(ALLOWED_ALGS)
        .set_time_fn(move || now);
        let claims = id_token
            .claims(&verifier, &Nonce::new(pending.n.clone()))
            .map_err(problem_of)?
            .clone();
        check_azp(&claims, &p.client_id)?;
        check_iat(claims.issue_time().timestamp(), now.timestamp())?;
        check_auth_time(
            claims.auth_time().map(|t| t.timestamp()),
            pending.m,
            pending.t,
            now.timestamp(),
        )?;
        Ok(claims)
    }

    /// Where to send a browser to end its session at the provider (RP-
    /// initiated logout), when the provider has an end-session endpoint.
    pub async fn end_session_url(&self, who: &Identity, back_to: &str) -> Option<String> {
        let p = self.provider(who.provider.as_deref()?).ok()?;
        let d = self.discovered(p).await.ok()?;
        let endpoint = d
            .metadata
            .additional_metadata()
            .end_session_endpoint
            .clone()?;
        let mut url = endpoint.url().clone();
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("client_id", &p.client_id);
            if let Some(t) = &who.id_token {
                q.append_pair("id_token_hint", t);
            }
            if let Ok(back) = PostLogoutRedirectUrl::new(back_to.to_owned()) {
                q.append_pair("post_logout_redirect_uri", back.as_str());
            }
        }
        Some(url.to_string())
    }
}

/// Every endpoint the CS talks to, or sends a person to, is https (plain
/// http on loopback only), as for the issuer itself; a token endpoint is
/// required.
fn check_endpoints(metadata: &ProviderMetadataWithLogout) -> Result<(), String> {
    let mut urls = vec![
        (
            "authorization_endpoint",
            metadata.authorization_endpoint().as_str(),
        ),
        ("jwks_uri", metadata.jwks_uri().as_str()),
    ];
    match metadata.token_endpoint() {
        Some(t) => urls.push(("token_endpoint", t.as_str())),
        None => return Err("discovery names no token_endpoint".into()),
    }
    if let Some(u) = metadata.userinfo_endpoint() {
        urls.push(("userinfo_endpoint", u.as_str()));
    }
    if let Some(e) = &metadata.additional_metadata().end_session_endpoint {
        urls.push(("end_session_endpoint", e.as_str()));
    }
    for (what, url) in urls {
        crate::cheq::uri::parse_cheq_uri(url).map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(())
}

fn token_error(
    provider: &str,
    e: openidconnect::RequestTokenError<
        ProviderHttpError,
        openidconnect::StandardErrorResponse<openidconnect::core::CoreErrorResponseType>,
    >,
) -> LoginError {
    use openidconnect::RequestTokenError;
    match e {
        RequestTokenError::ServerResponse(r)
            if *r.error() == openidconnect::core::CoreErrorResponseType::InvalidGrant =>
        {
            LoginError::CodeRefused {
                provider: provider.to_owned(),
            }
        }
        RequestTokenError::ServerResponse(r) => LoginError::TokenRequest {
            provider: provider.to_owned(),
            detail: crate::text::one_line(r.error().as_ref()),
        },
        RequestTokenError::Request(cause) => unreachable(provider, cause),
        RequestTokenError::Parse(e, _) => LoginError::TokenRequest {
            provider: provider.to_owned(),
            detail: crate::text::one_line(&e.to_string()),
        },
        RequestTokenError::Other(e) => LoginError::TokenRequest {
            provider: provider.to_owned(),
            detail: crate::text::one_line(&e),
        },
    }
}

fn problem_of(e: ClaimsVerificationError) -> IdTokenProblem {
    let short = |s: String| {
        crate::text::one_line(&s)
            .chars()
            .take(200)
            .collect::<String>()
    };
    match e {
        ClaimsVerificationError::InvalidIssuer(s) => IdTokenProblem::Issuer(short(s)),
        ClaimsVerificationError::InvalidAudience(s) => IdTokenProblem::Audience(short(s)),
        ClaimsVerificationError::Expired(s) => IdTokenProblem::Expired(short(s)),
        ClaimsVerificationError::InvalidNonce(_) => IdTokenProblem::Nonce,
        ClaimsVerificationError::SignatureVerification(s) => match s {
            SignatureVerificationError::NoMatchingKey => IdTokenProblem::UnknownKey,
            SignatureVerificationError::DisallowedAlg(a)
            | SignatureVerificationError::UnsupportedAlg(a) => IdTokenProblem::Algorithm(short(a)),
            SignatureVerificationError::NoSignature => {
                IdTokenProblem::Algorithm("the token is not signed (alg none)".into())
            }
            other => IdTokenProblem::Signature(short(other.to_string())),
        },
        other => IdTokenProblem::Malformed(short(other.to_string())),
    }
}

/// Core §3.1.3.7 steps 4–5: with several audiences `azp` is required; when
/// present it must be this client.
fn check_azp(claims: &CoreIdTokenClaims, client_id: &str) -> Result<(), IdTokenProblem> {
    match claims.authorized_party() {
        Some(azp) if azp.as_str() != client_id => Err(IdTokenProblem::AuthorizedParty),
        None if claims.audiences().len() > 1 => Err(IdTokenProblem::AuthorizedParty),
        _ => Ok(()),
    }
}

/// Step 10: issued neither in the future nor too long ago.
fn check_iat(iat: i64, now: i64) -> Result<(), IdTokenProblem> {
    if iat > now + SKEW_SECS {
        return Err(IdTokenProblem::IssuedAt(format!(
            "issued {} s in the future",
            iat - now
        )));
    }
    if iat < now - MAX_IAT_AGE_SECS {
        return Err(IdTokenProblem::IssuedAt(format!(
            "issued {} s ago",
            now - iat
        )));
    }
    Ok(())
}

/// Step 13: when a fresh sign-in was asked (`max_age`), `auth_time` is
/// present, within `max_age`, and not before the sign-in was started.
/// Without `max_age` it may be absent (the time stays unknown), but a time
/// reported is never in the future.
fn check_auth_time(
    auth_time: Option<i64>,
    max_age: Option<i64>,
    started: i64,
    now: i64,
) -> Result<(), IdTokenProblem> {
    let t = match (auth_time, max_age) {
        (Some(t), _) => t,
        (None, None) => return Ok(()),
        (None, Some(_)) => {
            return Err(IdTokenProblem::AuthTime(
                "the provider sent no auth_time".into(),
            ))
        }
    };
    if t > now + SKEW_SECS {
        return Err(IdTokenProblem::AuthTime(
            "auth_time is in the future".into(),
        ));
    }
    let Some(max_age) = max_age else {
        return Ok(());
    };
    if now - t > max_age + SKEW_SECS || t < started - SKEW_SECS {
        return Err(IdTokenProblem::AuthTime(format!(
            "the provider reports a sign-in {} s ago; a new one was required",
            now - t
        )));
    }
    Ok(())
}

/// The CS account of an external login: created at its first sign-in,
/// its e-mail brought up to date at each (only a verified one is kept).
/// Refused when the e-mail belongs to another account (local, or another
/// provider's), so that one CHEQ subject never names two accounts.
pub fn account_for(accounts: &dyn Accounts, login: &ExternalLogin) -> Result<Account, LoginError> {
    let name = account_name(&login.issuer, &login.subject);
    let id = ExternalId {
        issuer: login.issuer.clone(),
        subject: login.subject.clone(),
    };
    let existing = accounts.get(&name)?;
    if let Some(a) = &existing {
        if a.external.as_ref() != Some(&id) {
            return Err(LoginError::AccountClash(name));
        }
        let same = match (&a.email, &login.verified_email) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
            (None, None) => true,
            _ => false,
        };
        if same {
            return Ok(a.clone());
        }
    }
    let account = Account {
        username: name,
        email: login.verified_email.clone(),
        password_hash: String::new(),
        pin_hash: existing.and_then(|a| a.pin_hash),
        external: Some(id),
    };
    match accounts.put(&account, true) {
        Ok(()) => Ok(account),
        Err(AccountPutError::Ambiguous(_)) | Err(AccountPutError::Exists(_)) => {
            Err(LoginError::EmailTaken {
                email: login.verified_email.clone().unwrap_or_default(),
            })
        }
        Err(AccountPutError::Store(e)) => Err(e.into()),
    }
}

/// The identity a session holds for an external login.
pub fn identity_of(account: &Account, login: &ExternalLogin) -> Identity {
    Identity {
        sub: account.username.clone(),
        also_known_as: account.email.clone().into_iter().collect(),
        auth_time: login.auth_time,
        amr: login.amr.clone(),
        provider: Some(login.provider.clone()),
        id_token: Some(login.id_token.clone()),
        credential: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_names_are_stable_distinct_and_valid() {
        let a = account_name("https://idp.example", "248289761001");
        assert_eq!(a, account_name("https://idp.example", "248289761001"));
        assert_ne!(a, account_name("https://other.example", "248289761001"));
        assert_ne!(a, account_name("https://idp.example", "248289761002"));
        // No confusion by moving the separator.
        assert_ne!(account_name("ab", "c"), account_name("a", "bc"));
        crate::confirm::auth::check_username(&a).unwrap();
        assert_eq!(a.len(), 27);
    }

    #[test]
    fn amr_keeps_rfc8176_values_only() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            amr_of(&v(&["pwd", "mfa", "otp"])),
            v(&["pwd", "mfa", "otp"])
        );
        assert_eq!(amr_of(&v(&["pwd", "urn:custom", "pwd"])), v(&["pwd"]));
        assert_eq!(amr_of(&v(&["urn:custom"])), v(&["ext"]));
        assert_eq!(amr_of(&[]), v(&["ext"]));
    }

    #[test]
    fn iat_and_auth_time_rules() {
        let now = 1_000_000;
        check_iat(now, now).unwrap();
        check_iat(now + SKEW_SECS, now).unwrap();
        assert!(matches!(
            check_iat(now + SKEW_SECS + 1, now),
            Err(IdTokenProblem::IssuedAt(_))
        ));
        assert!(matches!(
            check_iat(now - MAX_IAT_AGE_SECS - 1, now),
            Err(IdTokenProblem::IssuedAt(_))
        ));
        let started = now - 30;
        check_auth_time(Some(now - 10), Some(300), started, now).unwrap();
        // Without max_age: absent or old is fine (unknown, or as reported),
        // never in the future.
        check_auth_time(None, None, started, now).unwrap();
        check_auth_time(Some(now - 100_000), None, started, now).unwrap();
        assert!(matches!(
            check_auth_time(Some(now + 120), None, started, now),
            Err(IdTokenProblem::AuthTime(_))
        ));
        for bad in [
            None,
            Some(now - 1000),
            Some(started - SKEW_SECS - 1),
            Some(now + 120),
        ] {
            assert!(
                matches!(
                    check_auth_time(bad, Some(300), started, now),
                    Err(IdTokenProblem::AuthTime(_))
                ),
                "{bad:?}"
            );
        }
    }

    fn login(sub: &str, email: Option<&str>) -> ExternalLogin {
        ExternalLogin {
            provider: "example".into(),
            issuer: "http://127.0.0.1:9000".into(),
            subject: sub.into(),
            verified_email: email.map(str::to_owned),
            auth_time: Some(5),
            amr: vec!["pwd".into()],
            id_token: "t".into(),
        }
    }

    #[test]
    fn accounts_follow_the_provider_and_never_share_an_email() {
        let (_dir, store) = crate::store::sled_cs::temp();
        let accounts = &*store.accounts;
        let a = account_for(accounts, &login("u1", Some("ann@example.com"))).unwrap();
        assert!(a.username.starts_with("oidc-"));
        assert_eq!(a.email.as_deref(), Some("ann@example.com"));
        // Nothing verifies against an external account's empty hash.
        assert!(!crate::confirm::auth::verify_secret("", &a.password_hash));
        // The same login again: the same account.
        assert_eq!(
            account_for(accounts, &login("u1", Some("ann@example.com"))).unwrap(),
            a
        );
        // E-mail no longer verified: dropped.
        let b = account_for(accounts, &login("u1", None)).unwrap();
        assert_eq!(b.email, None);
        account_for(accounts, &login("u1", Some("ann@example.com"))).unwrap();
        // Another subject (or provider) cannot take that e-mail.
        assert!(matches!(
            account_for(accounts, &login("u2", Some("ANN@example.com"))),
            Err(LoginError::EmailTaken { .. })
        ));
        // Nor the e-mail of a local account.
        let local =
            crate::confirm::auth::new_account("carl", Some("carl@example.com"), "long enough")
                .unwrap();
        accounts.put(&local, false).unwrap();
        assert!(matches!(
            account_for(accounts, &login("u3", Some("carl@example.com"))),
            Err(LoginError::EmailTaken { .. })
        ));
        // A local account that happens to bear the derived name is not taken over.
        let name = account_name("http://127.0.0.1:9000", "u4");
        let squatter = crate::confirm::auth::new_account(&name, None, "long enough").unwrap();
        accounts.put(&squatter, false).unwrap();
        assert!(matches!(
            account_for(accounts, &login("u4", None)),
            Err(LoginError::AccountClash(_))
        ));
        let who = identity_of(&a, &login("u1", Some("ann@example.com")));
        assert!(who.is("ann@example.com") && who.is(&a.username));
        assert_eq!(who.provider.as_deref(), Some("example"));
    }

    #[test]
    fn endpoints_must_be_https_except_on_loopback() {
        let meta = |token: &str, end: Option<&str>| -> ProviderMetadataWithLogout {
            let mut v = serde_json::json!({
                "issuer": "https://idp.example",
                "authorization_endpoint": "https://idp.example/auth",
                "token_endpoint": token,
                "jwks_uri": "https://idp.example/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
            });
            if let Some(e) = end {
                v["end_session_endpoint"] = e.into();
            }
            serde_json::from_value(v).unwrap()
        };
        check_endpoints(&meta(
            "https://idp.example/token",
            Some("https://idp.example/end"),
        ))
        .unwrap();
        check_endpoints(&meta("http://127.0.0.1:9/token", None)).unwrap();
        let e = check_endpoints(&meta("http://idp.example/token", None)).unwrap_err();
        assert!(e.starts_with("token_endpoint"), "{e}");
        let e = check_endpoints(&meta(
            "https://idp.example/token",
            Some("http://idp.example/end"),
        ))
        .unwrap_err();
        assert!(e.starts_with("end_session_endpoint"), "{e}");
    }

    /// The callback is matched to the sign-in before anything is fetched:
    /// no `state`, another `state`, or another issuer's `iss` (RFC 9207).
    #[actix_web::test]
    async fn a_callback_must_carry_the_state_and_issuer_of_its_sign_in() {
        let config: crate::confirm::config::IdentityProviderConfig = toml::from_str(
            "name = \"example\"\nissuer = \"http://127.0.0.1:9\"\nclient_id = \"cheq\"\nclient_secret = \"s\"",
        )
        .unwrap();
        let p = Providers::new(
            &[config],
            "http://127.0.0.1:8080",
            &[1; 32],
            Arc::new(crate::time::SystemClock),
        )
        .unwrap();
        let pending = || Pending {
            p: "example".into(),
            s: "the-state".into(),
            n: "nonce".into(),
            v: "verifier".into(),
            next: "/".into(),
            t: chrono::Utc::now().timestamp(),
            m: None,
        };
        let cb = |state: Option<&str>, iss: Option<&str>| Callback {
            state: state.map(str::to_owned),
            code: Some("code".into()),
            iss: iss.map(str::to_owned),
            ..Callback::default()
        };
        for c in [cb(None, None), cb(Some("other-state"), None)] {
            assert!(matches!(
                p.finish(Some(pending()), &c).await,
                Err(LoginError::StateMismatch)
            ));
        }
        assert!(matches!(
            p.finish(None, &cb(Some("the-state"), None)).await,
            Err(LoginError::NoPendingLogin)
        ));
        assert!(matches!(
            p.finish(
                Some(pending()),
                &cb(Some("the-state"), Some("http://127.0.0.1:1"))
            )
            .await,
            Err(LoginError::IdToken {
                problem: IdTokenProblem::Issuer(_),
                ..
            })
        ));
        // With the right state and issuer it goes on to the provider (which
        // does not listen here).
        assert!(matches!(
            p.finish(
                Some(pending()),
                &cb(Some("the-state"), Some("http://127.0.0.1:9"))
            )
            .await,
            Err(LoginError::Unreachable { .. })
        ));
    }

    /// What the tiny provider answers to a path.
    enum Reply {
        Json(String),
        Status(u16),
        /// A 200 of [`HUGE`] bytes, its length announced or not (chunked).
        Huge {
            announced: bool,
        },
    }

    const HUGE: usize = 200 * 1024 * 1024;

    /// A tiny HTTP server on a real loopback socket, one request per
    /// connection: it records the paths asked, and for each huge answer
    /// sends how many of its bytes it could write before the CS hung up.
    struct Tiny {
        origin: String,
        asked: Arc<Mutex<Vec<String>>>,
        written: tokio::sync::mpsc::UnboundedReceiver<usize>,
    }

    impl Tiny {
        async fn start(answer: impl Fn(&str, &str) -> Reply + Send + Sync + 'static) -> Tiny {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let origin = format!("http://{}", listener.local_addr().unwrap());
            let asked = Arc::new(Mutex::new(Vec::new()));
            let (tx, written) = tokio::sync::mpsc::unbounded_channel();
            let answer = Arc::new(answer);
            let (o, a) = (origin.clone(), asked.clone());
            tokio::spawn(async move {
                while let Ok((sock, _)) = listener.accept().await {
                    let (o, a, tx, answer) = (o.clone(), a.clone(), tx.clone(), answer.clone());
                    tokio::spawn(async move { serve(sock, &o, &a, &tx, &*answer).await });
                }
            });
            Tiny {
                origin,
                asked,
                written,
            }
        }

        fn count(&self, path: &str) -> usize {
            self.asked
                .lock()
                .unwrap()
                .iter()
                .filter(|p| *p == path)
                .count()
        }

        /// The bytes written of the next huge answer, once it is over.
        async fn huge_written(&mut self) -> usize {
            tokio::time::timeout(std::time::Duration::from_secs(60), self.written.recv())
                .await
                .expect("the huge answer ends once the CS hangs up")
                .unwrap()
        }
    }

    async fn serve(
        mut sock: tokio::net::TcpStream,
        origin: &str,
        asked: &Mutex<Vec<String>>,
        written: &tokio::sync::mpsc::UnboundedSender<usize>,
        answer: &(dyn Fn(&str, &str) -> Reply + Send + Sync),
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        let end = loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
            if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let text = String::from_utf8_lossy(&head[..end]).into_owned();
        // The request's body (the token request's form), read whole.
        let length: usize = text
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let mut body = head.len() - end;
        while body < length {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => body += n,
            }
        }
        let mut line = text.split_whitespace();
        let method = line.next().unwrap_or("").to_owned();
        let path = line
            .next()
            .unwrap_or("")
            .split('?')
            .next()
            .unwrap_or("")
            .to_owned();
        asked.lock().unwrap().push(path.clone());
        match answer(origin, &format!("{method} {path}")) {
            Reply::Json(body) => {
                let res = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(res.as_bytes()).await;
            }
            Reply::Status(status) => {
                let res = format!(
                    "HTTP/1.1 {status} Nope\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = sock.write_all(res.as_bytes()).await;
            }
            Reply::Huge { announced } => {
                let framing = if announced {
                    format!("content-length: {HUGE}")
                } else {
                    "transfer-encoding: chunked".to_owned()
                };
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{framing}\r\nconnection: close\r\n\r\n"
                );
                let mut sent = 0;
                if sock.write_all(head.as_bytes()).await.is_ok() {
                    let chunk = vec![b' '; 64 * 1024];
                    while sent < HUGE {
                        let ok = if announced {
                            sock.write_all(&chunk).await
                        } else {
                            let framed =
                                [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"]
                                    .concat();
                            sock.write_all(&framed).await
                        };
                        if ok.is_err() {
                            break;
                        }
                        sent += chunk.len();
                    }
                }
                let _ = written.send(sent);
            }
        }
    }

    fn discovery_of(origin: &str) -> String {
        serde_json::json!({
            "issuer": origin,
            "authorization_endpoint": format!("{origin}/authorize"),
            "token_endpoint": format!("{origin}/token"),
            "jwks_uri": format!("{origin}/jwks"),
            "userinfo_endpoint": format!("{origin}/userinfo"),
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        })
        .to_string()
    }

    fn providers_of(issuer: &str, clock: Arc<dyn Clock>) -> Providers {
        let config: crate::confirm::config::IdentityProviderConfig = toml::from_str(&format!(
            "name = \"example\"\nissuer = \"{issuer}\"\nclient_id = \"cheq\"\nclient_secret = \"s\""
        ))
        .unwrap();
        Providers::new(&[config], "http://127.0.0.1:8080", &[1; 32], clock).unwrap()
    }

    /// Every answer of a provider is read up to its bound: a longer one is
    /// refused with a clear error as soon as its length is announced, or as
    /// soon as its bytes pass the bound, and the rest is never read.
    #[actix_web::test]
    async fn an_oversized_answer_from_a_provider_is_refused_unread() {
        let cases = [
            (
                "GET /.well-known/openid-configuration",
                true,
                Endpoint::Discovery,
            ),
            ("GET /jwks", false, Endpoint::Jwks),
            ("POST /token", false, Endpoint::Token),
        ];
        for (huge_at, announced, what) in cases {
            let mut tiny = Tiny::start(move |origin, asked| match asked {
                a if a == huge_at => Reply::Huge { announced },
                "GET /.well-known/openid-configuration" => Reply::Json(discovery_of(origin)),
                "GET /jwks" => Reply::Json(r#"{"keys":[]}"#.into()),
                _ => Reply::Status(404),
            })
            .await;
            let p = providers_of(&tiny.origin, Arc::new(crate::time::SystemClock));
            let failed = if what == Endpoint::Token {
                let (_, sealed) = p.begin("example", "/", None).await.unwrap();
                let pending = p.pending(Some(&sealed)).unwrap();
                let callback = Callback {
                    state: Some(pending.s.clone()),
                    code: Some("code".into()),
                    ..Callback::default()
                };
                p.finish(Some(pending), &callback).await.map(|_| ())
            } else {
                p.begin("example", "/", None).await.map(|_| ())
            };
            match failed {
                Err(LoginError::Unreachable {
                    cause: ProviderHttpError::TooLarge { what: w, limit },
                    ..
                }) => {
                    assert_eq!((w, limit), (what, what.limit()));
                }
                other => panic!("{huge_at}: {other:?}"),
            }
            let written = tiny.huge_written().await;
            assert!(written < HUGE / 2, "{huge_at}: {written} bytes sent");
        }
    }

    /// The UserInfo answer is bounded like the others. On the way there, an
    /// honest token answer of normal size passes through the capped client.
    #[actix_web::test]
    async fn an_oversized_userinfo_answer_is_refused_unread() {
        use openidconnect::core::{CoreEdDsaPrivateSigningKey, CoreJsonWebKeySet};
        use openidconnect::{
            Audience, EmptyAdditionalClaims, PrivateSigningKey, StandardClaims, SubjectIdentifier,
        };
        // A throwaway Ed25519 key, for this test only.
        const PEM: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEICj85RSLHK8ec/5o+MZCnUr457cWjqm+qnuExD0Of+64\n-----END PRIVATE KEY-----\n";
        let key = CoreEdDsaPrivateSigningKey::from_ed25519_pem(
            PEM,
            Some(openidconnect::JsonWebKeyId::new("k1".into())),
        )
        .unwrap();
        let jwks = serde_json::to_string(&CoreJsonWebKeySet::new(vec![key.as_verification_key()]))
            .unwrap();
        let token_answer = Arc::new(Mutex::new(String::new()));
        let answer = token_answer.clone();
        let mut tiny = Tiny::start(move |origin, asked| match asked {
            "GET /.well-known/openid-configuration" => Reply::Json(discovery_of(origin)),
            "GET /jwks" => Reply::Json(jwks.clone()),
            "POST /token" => Reply::Json(answer.lock().unwrap().clone()),
            "GET /userinfo" => Reply::Huge { announced: false },
            _ => Reply::Status(404),
        })
        .await;
        let p = providers_of(&tiny.origin, Arc::new(crate::time::SystemClock));
        let (_, sealed) = p.begin("example", "/", None).await.unwrap();
        let pending = p.pending(Some(&sealed)).unwrap();
        let now = chrono::Utc::now();
        // No e-mail in the ID token: the CS asks UserInfo for it.
        let claims = CoreIdTokenClaims::new(
            IssuerUrl::new(tiny.origin.clone()).unwrap(),
            vec![Audience::new("cheq".into())],
            now + chrono::Duration::seconds(300),
            now,
            StandardClaims::new(SubjectIdentifier::new("u1".into())),
            EmptyAdditionalClaims {},
        )
        .set_nonce(Some(Nonce::new(pending.n.clone())));
        let id_token =
            CoreIdToken::new(claims, &key, CoreJwsSigningAlgorithm::EdDsa, None, None).unwrap();
        *token_answer.lock().unwrap() = serde_json::json!({
            "access_token": "at",
            "token_type": "Bearer",
            "id_token": id_token.to_string(),
        })
        .to_string();
        let callback = Callback {
            state: Some(pending.s.clone()),
            code: Some("code".into()),
            ..Callback::default()
        };
        match p.finish(Some(pending), &callback).await {
            Err(LoginError::Unreachable {
                cause:
                    ProviderHttpError::TooLarge {
                        what: Endpoint::UserInfo,
                        limit,
                    },
                ..
            }) => assert_eq!(limit, Endpoint::UserInfo.limit()),
            other => panic!("{other:?}"),
        }
        assert_eq!(tiny.count("/token"), 1);
        let written = tiny.huge_written().await;
        assert!(written < HUGE / 2, "{written} bytes sent");
    }

    /// A provider that is down is asked once per [`DISCOVERY_RETRY_SECS`],
    /// whoever starts a sign-in, however many at once.
    #[actix_web::test]
    async fn a_failed_discovery_is_the_answer_for_a_while() {
        let tiny = Tiny::start(|_, _| Reply::Status(503)).await;
        let clock = Arc::new(crate::time::ManualClock::new(chrono::Utc::now()));
        let p = providers_of(&tiny.origin, clock.clone());
        let discovery = "/.well-known/openid-configuration";
        let down = |r: Result<(String, String), LoginError>| {
            matches!(
                r,
                Err(LoginError::Unreachable {
                    cause: ProviderHttpError::Status {
                        what: Endpoint::Discovery,
                        status: 503
                    },
                    ..
                })
            )
        };
        let (a, b, c) = tokio::join!(
            p.begin("example", "/", None),
            p.begin("example", "/", None),
            p.begin("example", "/", None)
        );
        assert!(down(a) && down(b) && down(c));
        assert_eq!(tiny.count(discovery), 1, "one fetch for three at once");
        for _ in 0..5 {
            assert!(down(p.begin("example", "/", None).await));
        }
        clock.advance(chrono::Duration::seconds(DISCOVERY_RETRY_SECS - 1));
        assert!(down(p.begin("example", "/", None).await));
        assert_eq!(tiny.count(discovery), 1);
        clock.advance(chrono::Duration::seconds(1));
        assert!(down(p.begin("example", "/", None).await));
        assert_eq!(tiny.count(discovery), 2, "asked again once the time is up");
    }

    #[test]
    fn a_pending_login_opens_only_with_its_key_and_in_time() {
        use crate::time::Clock;
        struct At(i64);
        impl Clock for At {
            fn now(&self) -> chrono::DateTime<chrono::Utc> {
                chrono::DateTime::from_timestamp(self.0, 0).unwrap_or_default()
            }
        }
        let make = |t: i64, secret: &[u8]| {
            Providers::new(&[], "http://127.0.0.1:8080", secret, Arc::new(At(t))).unwrap()
        };
        let p = make(1000, &[1; 32]);
        assert_eq!(p.redirect_uri(), "http://127.0.0.1:8080/oidc/callback");
        let pending = Pending {
            p: "example".into(),
            s: "state".into(),
            n: "nonce".into(),
            v: "verifier".into(),
            next: "/c/x".into(),
            t: 1000,
            m: None,
        };
        let sealed = p.key.seal(&pending).unwrap();
        assert_eq!(p.pending(Some(&sealed)).unwrap().next(), "/c/x");
        assert!(make(1000, &[2; 32]).pending(Some(&sealed)).is_none());
        assert!(make(1000 + PENDING_TTL_SECS + 1, &[1; 32])
            .pending(Some(&sealed))
            .is_none());
        assert!(p.pending(None).is_none());
        assert!(p.pending(Some("garbage")).is_none());
    }
}
