//! Who is asking, as actix extractors: a handler that takes [`SignedIn`]
//! runs only for a signed-in user (anyone else is sent through login and back
//! to the page they asked for); [`Visitor`] is the session, if any, of
//! someone who may not be signed in yet.

use super::{session_cookie_name, CsState, WebError};
use crate::confirm::flow::CsError;
use crate::store::cs::{Identity, Session};
use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpRequest};
use std::future::{ready, Ready};

/// A signed-in user and their session id.
#[derive(Debug, Clone)]
pub struct SignedIn {
    pub session_id: String,
    pub who: Identity,
}

/// The live session of this request, if any (signed in or not).
#[derive(Debug, Clone)]
pub struct Visitor(pub Option<(String, Session)>);

impl Visitor {
    /// Whether someone is signed in.
    pub fn signed_in(&self) -> bool {
        self.0.as_ref().is_some_and(|(_, s)| s.identity.is_some())
    }
}

fn state(req: &HttpRequest) -> Result<&web::Data<CsState>, CsError> {
    req.app_data::<web::Data<CsState>>()
        .ok_or(CsError::Internal(crate::confirm::flow::Internal::Missing(
            "the server's state",
        )))
}

fn visitor(req: &HttpRequest) -> Result<Visitor, CsError> {
    let state = state(req)?;
    let Some(cookie) = req.cookie(session_cookie_name(state.secure_cookies)) else {
        return Ok(Visitor(None));
    };
    let id = cookie.value().to_owned();
    let now = state.cs.now().timestamp();
    let Some(session) = state.sessions.get(&id, now)? else {
        return Ok(Visitor(None));
    };
    // A sign-in whose credential has changed since (a new password) is
    // over: its session ends here, on whichever instance sees it first.
    if let Some(who) = &session.identity {
        if !crate::confirm::auth::credential_holds(&*state.accounts, who)? {
            state.sessions.remove(&id)?;
            return Ok(Visitor(None));
        }
    }
    Ok(Visitor(Some((id, session))))
}

impl FromRequest for Visitor {
    type Error = WebError;
    type Future = Ready<Result<Self, WebError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(visitor(req).map_err(WebError::from))
    }
}

impl FromRequest for SignedIn {
    type Error = WebError;
    type Future = Ready<Result<Self, WebError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let signed_in = visitor(req)
            .map_err(WebError::from)
            .and_then(|v| match v.0 {
                Some((
                    session_id,
                    Session {
                        identity: Some(who),
                        ..
                    },
                )) => Ok(SignedIn { session_id, who }),
                // Back to the same page after sign-in, its query too (the
                // account page's return target); `safe_next` checks it.
                _ => Err(WebError::SignIn {
                    next: req
                        .uri()
                        .path_and_query()
                        .map_or_else(|| req.path().to_owned(), |p| p.as_str().to_owned()),
                }),
            });
        ready(signed_in)
    }
}

/// The value of the session cookie, whether or not it names a stored session
/// (before login it is only what the login form's CSRF token is bound to).
pub fn pre_login_id(req: &HttpRequest) -> Option<String> {
    let secure = state(req).is_ok_and(|s| s.secure_cookies);
    req.cookie(session_cookie_name(secure))
        .map(|c| c.value().to_owned())
        .filter(|v| v.len() >= 32 && v.len() <= 64)
}
