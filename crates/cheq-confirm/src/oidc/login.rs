//! The authorization code flow (OpenID Connect Core 1.0 §3.1.2–§3.1.3),
//! with PKCE (RFC 7636), `state` and `nonce`: [`Providers::begin`] sends the
//! browser to the provider and seals what the callback is checked against
//! into a cookie ([`Pending`]: nothing is stored at the CS);
//! [`Providers::finish`] matches the callback to it (`state`, and the `iss`
//! of RFC 9207), redeems the code at the token endpoint
//! (`client_secret_basic` or `client_secret_post`), has the ID token checked
//! (`id_token`), and asks UserInfo for an e-mail the token lacks. Also
//! RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0 §2).

use super::discovery::{capped, Discovered, Endpoint};
use super::{
    amr_of, misconfigured, unreachable, ExternalLogin, IdTokenProblem, LoginError, Provider,
    ProviderHttpError, Providers, SKEW_SECS,
};
use crate::config::TokenEndpointAuth;
use cheq_store::cs::Identity;
use openidconnect::core::{
    CoreAuthPrompt, CoreAuthenticationFlow, CoreClient, CoreClientAuthMethod, CoreTokenResponse,
};
use openidconnect::{
    AuthType, AuthorizationCode, ClientId, ClientSecret, CsrfToken, Nonce, PkceCodeChallenge,
    PkceCodeVerifier, PostLogoutRedirectUrl, Scope, TokenResponse,
};
use serde::{Deserialize, Serialize};

/// How long a started sign-in may take (the cookie's life).
pub const PENDING_TTL_SECS: i64 = 600;
/// Longest local path carried through a sign-in.
const MAX_NEXT: usize = 1024;

/// A sign-in started in a browser: what the callback is checked against.
/// Sealed into a cookie (never stored at the CS).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pending {
    /// The provider's name.
    pub(super) p: String,
    /// `state`.
    pub(super) s: String,
    /// `nonce`.
    pub(super) n: String,
    /// The PKCE verifier.
    pub(super) v: String,
    /// Where to go after.
    pub(super) next: String,
    /// When it started.
    pub(super) t: i64,
    /// The `max_age` asked for, if a fresh sign-in was required.
    pub(super) m: Option<i64>,
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

impl Providers {
    /// The `openidconnect` client of provider `p`, authenticating at its
    /// token endpoint as configured, or as its discovery says it can.
    pub(super) fn client(
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
            Some(ClientSecret::new(p.secret.expose().to_owned())),
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
            .is_some_and(|s| cheq_core::sign::same_secret(s.as_bytes(), pending.s.as_bytes()));
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
            let error = cheq_support::text::one_line(error);
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
            detail: cheq_support::text::one_line(r.error().as_ref()),
        },
        RequestTokenError::Request(cause) => unreachable(provider, cause),
        RequestTokenError::Parse(e, _) => LoginError::TokenRequest {
            provider: provider.to_owned(),
            detail: cheq_support::text::one_line(&e.to_string()),
        },
        RequestTokenError::Other(e) => LoginError::TokenRequest {
            provider: provider.to_owned(),
            detail: cheq_support::text::one_line(&e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The callback is matched to the sign-in before anything is fetched:
    /// no `state`, another `state`, or another issuer's `iss` (RFC 9207).
    #[actix_web::test]
    async fn a_callback_must_carry_the_state_and_issuer_of_its_sign_in() {
        let config: crate::config::IdentityProviderConfig = toml::from_str(
            "name = \"example\"\nissuer = \"http://127.0.0.1:9\"\nclient_id = \"cheq\"\nclient_secret = \"s\"",
        )
        .unwrap();
        let p = Providers::new(
            &[config],
            "http://127.0.0.1:8080",
            &[1; 32],
            Arc::new(cheq_support::time::SystemClock),
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

    #[test]
    fn a_pending_login_opens_only_with_its_key_and_in_time() {
        use cheq_support::time::Clock;
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
