//! The browser's side of signing in with an identity provider:
//! `GET /oidc/login/{name}` sends the browser to the provider with a sealed
//! cookie of the pending sign-in; `GET /oidc/callback` completes it through
//! [`crate::confirm::oidc`], creates the session and goes back to `next`.
//! Failures are pages ([`LoginFailure`]), one status per kind, in one place.

use super::{
    removal, safe_next, see_other, session_cookie, set_cookie, CsState, Visitor, WebError,
};
use crate::confirm::auth::limits::LimitKey;
use crate::confirm::flow::{CsError, Internal};
use crate::confirm::oidc::{account_for, identity_of, Callback, LoginError};
use actix_web::cookie::{Cookie, SameSite};
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};

/// The pending sign-in's cookie over plain http (loopback only).
pub const PENDING_COOKIE: &str = "cheq_oidc";
/// The same over https (`__Host-`: this host only, Secure, path `/`).
pub const SECURE_PENDING_COOKIE: &str = "__Host-cheq_oidc";

fn pending_cookie_name(secure: bool) -> &'static str {
    if secure {
        SECURE_PENDING_COOKIE
    } else {
        PENDING_COOKIE
    }
}

/// The link that starts a sign-in at provider `name` and comes back to
/// `next`; with `max_age`, a fresh authentication is asked for.
pub fn start_href(name: &str, next: &str, max_age: Option<i64>) -> String {
    let mut q = vec![("next", next.to_owned())];
    if let Some(m) = max_age {
        q.push(("max_age", m.to_string()));
    }
    let path: String = url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
    format!(
        "/oidc/login/{path}?{}",
        serde_urlencoded::to_string(q).unwrap_or_default()
    )
}

/// A sign-in at a provider that failed: its page and status.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LoginFailure(pub LoginError);

/// The status of each sign-in failure.
pub fn status_of(e: &LoginError) -> StatusCode {
    match e {
        LoginError::UnknownProvider(_) => StatusCode::NOT_FOUND,
        LoginError::Unreachable { .. }
        | LoginError::Misconfigured { .. }
        | LoginError::TokenRequest { .. } => StatusCode::BAD_GATEWAY,
        LoginError::NoPendingLogin | LoginError::StateMismatch | LoginError::CodeRefused { .. } => {
            StatusCode::BAD_REQUEST
        }
        LoginError::Refused { .. } | LoginError::IdToken { .. } => StatusCode::UNAUTHORIZED,
        LoginError::EmailTaken { .. } | LoginError::AccountClash(_) => StatusCode::CONFLICT,
        LoginError::Store {
            unavailable: true, ..
        } => StatusCode::SERVICE_UNAVAILABLE,
        LoginError::Store { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ResponseError for LoginFailure {
    fn status_code(&self) -> StatusCode {
        status_of(&self.0)
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        // What failed goes to the log (never a token or a secret: the
        // errors carry none); the person gets a page.
        tracing::warn!(
            "sign-in with an identity provider failed: {}",
            crate::text::one_line(&self.0.to_string())
        );
        let mut res = HttpResponse::build(status);
        res.content_type("text/html; charset=utf-8")
            .insert_header((header::CACHE_CONTROL, "no-store"));
        if status == StatusCode::SERVICE_UNAVAILABLE {
            res.insert_header((header::RETRY_AFTER, "1"));
        }
        res.body(super::pages::login_error_page(&self.0, status.as_u16()))
    }
}

#[derive(serde::Deserialize)]
pub(super) struct StartQuery {
    next: Option<String>,
    max_age: Option<i64>,
}

/// `GET /oidc/login/{name}`: to the provider, with the pending sign-in sealed
/// in a cookie (nothing stored here).
pub(super) async fn start(
    state: web::Data<CsState>,
    name: web::Path<String>,
    q: web::Query<StartQuery>,
) -> Result<HttpResponse, LoginFailure> {
    let next = safe_next(q.next.as_deref());
    let max_age = q.max_age.filter(|m| (0..=30 * 86400).contains(m));
    let (url, sealed) = state
        .providers
        .begin(&name, &next, max_age)
        .await
        .map_err(LoginFailure)?;
    let cookie = Cookie::build(pending_cookie_name(state.secure_cookies), sealed)
        .path("/")
        .http_only(true)
        // Lax: the provider's redirect back is a top-level GET navigation.
        .same_site(SameSite::Lax)
        .secure(state.secure_cookies)
        .max_age(actix_web::cookie::time::Duration::seconds(
            crate::confirm::oidc::PENDING_TTL_SECS,
        ))
        .finish();
    let mut res = see_other(&url);
    res.add_cookie(&cookie).map_err(|e| {
        LoginFailure(LoginError::Store {
            message: e.to_string(),
            unavailable: false,
        })
    })?;
    Ok(res)
}

/// Whether a failed callback is the visitor's doing: an answer that does
/// not belong to a sign-in started in this browser, or a code the provider
/// refused to redeem (`invalid_grant`: replayed or made up; any other
/// refusal of the token endpoint counts too, so that callbacks cannot make
/// the CS ask the provider without end). Not the provider's trouble (unreachable, a token
/// that fails a rule), the CS's (misconfigured, a store error), nor a
/// person's choice (cancelled at the provider, an account that clashes).
fn counts_as_failure(e: &LoginError) -> bool {
    matches!(
        e,
        LoginError::NoPendingLogin
            | LoginError::StateMismatch
            | LoginError::CodeRefused { .. }
            | LoginError::TokenRequest { .. }
    )
}

/// `GET /oidc/callback`: completes the sign-in, then a new session.
pub(super) async fn callback(
    state: web::Data<CsState>,
    req: HttpRequest,
    visitor: Visitor,
    q: web::Query<Callback>,
) -> Result<HttpResponse, WebError> {
    // Failed callbacks count against the address (§2: failed attempts are
    // rate-limited), under a key of their own. The failure is counted
    // before the provider is asked to redeem a code, so that a burst of
    // made-up answers cannot all pass the check, and taken back when the
    // answer was good or the failure was not the visitor's doing.
    let now = state.cs.now().timestamp();
    let key = LimitKey::CallbackAt(crate::confirm::api::client_address(
        &req,
        &state.api.trusted_proxies,
    ));
    if let Some(retry_after) = state
        .limiter
        .locked(std::slice::from_ref(&key), now)
        .map_err(CsError::from)?
    {
        return Err(CsError::TooManyAttempts { retry_after }.into());
    }
    state.limiter.fail(&key, now).map_err(CsError::from)?;
    let cookie = req.cookie(pending_cookie_name(state.secure_cookies));
    let pending = state.providers.pending(cookie.as_ref().map(|c| c.value()));
    let finished = state.providers.finish(pending, &q).await;
    if !finished.as_ref().is_err_and(counts_as_failure) {
        state.limiter.take_back(&key, now).map_err(CsError::from)?;
    }
    let (login, pending) = finished.map_err(LoginFailure)?;
    let accounts = state.accounts.clone();
    let login_for_store = login.clone();
    let account = web::block(move || account_for(&*accounts, &login_for_store))
        .await
        .map_err(|_| CsError::Internal(Internal::Task("account")))?
        .map_err(LoginFailure)?;
    let now = state.cs.now().timestamp();
    // A new session id at sign-in (no session fixation).
    if let Some((old, _)) = visitor.0 {
        state.sessions.remove(&old)?;
    }
    let id = state
        .sessions
        .create(Some(identity_of(&account, &login)), now)?;
    tracing::info!(
        provider = %login.provider,
        "signed in with an identity provider as {}",
        account.username
    );
    let next = safe_next(Some(pending.next()));
    let pre_login = super::extract::pre_login_id(&req);
    let mut res = see_other(&super::handlers::after_sign_in(
        &state,
        pre_login.as_deref(),
        &next,
    ));
    set_cookie(&mut res, &session_cookie(&state, &id))?;
    set_cookie(
        &mut res,
        &removal(
            pending_cookie_name(state.secure_cookies),
            state.secure_cookies,
        ),
    )?;
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::confirm::oidc::{Endpoint, IdTokenProblem, ProviderHttpError};
    use actix_web::body::MessageBody;

    #[test]
    fn start_links_carry_next_and_max_age() {
        assert_eq!(
            start_href("example", "/c/abc", None),
            "/oidc/login/example?next=%2Fc%2Fabc"
        );
        assert_eq!(
            start_href("example", "/c/abc", Some(300)),
            "/oidc/login/example?next=%2Fc%2Fabc&max_age=300"
        );
    }

    /// Every failure has its status and a page that says what happened and
    /// leads back to the sign-in page, with no token in it.
    #[test]
    fn every_failure_has_a_status_and_a_page() {
        let p = || "example".to_owned();
        let cases = [
            (
                LoginError::UnknownProvider("x".into()),
                404,
                "Unknown sign-in provider",
            ),
            (
                LoginError::Unreachable {
                    provider: p(),
                    cause: ProviderHttpError::Transport(Endpoint::Discovery, "refused".into()),
                },
                502,
                "could not be reached",
            ),
            (
                LoginError::Unreachable {
                    provider: p(),
                    cause: ProviderHttpError::TooLarge {
                        what: Endpoint::Token,
                        limit: 65536,
                    },
                },
                502,
                "sent a token answer too large to read",
            ),
            (
                LoginError::Misconfigured {
                    provider: p(),
                    detail: "x".into(),
                },
                502,
                "not set up correctly",
            ),
            (
                LoginError::NoPendingLogin,
                400,
                "not started in this browser",
            ),
            (
                LoginError::StateMismatch,
                400,
                "does not belong to the sign-in started in this browser",
            ),
            (
                LoginError::Refused {
                    provider: p(),
                    error: "access_denied".into(),
                },
                401,
                "did not sign you in",
            ),
            (
                LoginError::CodeRefused { provider: p() },
                400,
                "was used already",
            ),
            (
                LoginError::TokenRequest {
                    provider: p(),
                    detail: "invalid_client".into(),
                },
                502,
                "refused to complete",
            ),
            (
                LoginError::IdToken {
                    provider: p(),
                    problem: IdTokenProblem::Nonce,
                },
                401,
                "nonce",
            ),
            (
                LoginError::EmailTaken {
                    email: "a@example.com".into(),
                },
                409,
                "a@example.com already belongs",
            ),
            (
                LoginError::AccountClash("oidc-x".into()),
                409,
                "Ask the operator",
            ),
            (
                LoginError::Store {
                    message: "down".into(),
                    unavailable: true,
                },
                503,
                "Try again",
            ),
            (
                LoginError::Store {
                    message: "broken".into(),
                    unavailable: false,
                },
                500,
                "Try again",
            ),
        ];
        for (e, status, words) in cases {
            let res = LoginFailure(e).error_response();
            assert_eq!(res.status().as_u16(), status, "{words}");
            let body = res.into_body().try_into_bytes().unwrap();
            let html = String::from_utf8(body.to_vec()).unwrap();
            assert!(html.contains(words), "{words}: {html}");
            assert!(html.contains("href=\"/login\""), "{html}");
        }
    }
}
