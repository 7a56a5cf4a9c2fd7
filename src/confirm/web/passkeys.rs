//! Passkeys in the browser front end: the account page (`GET /account`),
//! adding and removing a passkey (a sign-in of the last 5 minutes), and
//! signing in with one. The page's one script (`/static/passkey.js`) talks
//! JSON to these routes; the checks are the domain's
//! ([`crate::confirm::passkeys`]), and each refusal is a JSON error.
//!
//! | route | what |
//! |---|---|
//! | `GET /account[?back=/c/{id}]` | the passkeys of the signed-in account; with a confirmation to go back to once one is added |
//! | `POST /account/passkeys/begin`, `…/finish` | adding a passkey (JSON) |
//! | `POST /account/passkeys/remove` | removing one (a form) |
//! | `POST /login/passkey/begin`, `…/finish` | signing in with one (JSON) |
//! | `POST /c/{id}/passkey` | the options of an acceptance with one (§14) |

use super::handlers::{after_sign_in, DecisionForm};
use super::pages::{render, when, AccountPage, PasskeyRow};
use super::{
    check_csrf, see_other, session_cookie, set_cookie, CsState, SignedIn, Visitor, WebError,
};
use crate::confirm::auth::identity_of_passkey;
use crate::confirm::flow::{CsError, DecideError};
use crate::confirm::passkeys::{AssertionAnswer, CeremonyError};
use crate::httpkit::JsonError;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;

/// How recent a sign-in must be to add or remove a passkey.
pub const RECENT_SECS: i64 = 300;

/// Where to sign in again before adding or removing a passkey.
const REAUTH: &str = "/login?reauth=300&next=%2Faccount";

/// The return target of the account page (`/account?back=…`) when it is a
/// confirmation page of this service: `/c/` and a confirmation id (the
/// base64url SHA-256 of a resource URI), nothing else. Anything else (an
/// absolute or protocol-relative URL, another path, a dot segment, an
/// escape) is no target at all, so the page never sends a person elsewhere.
pub fn confirmation_path(back: &str) -> Option<String> {
    let id = back.strip_prefix("/c/")?;
    let plain = id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (id.len() == 43 && plain).then(|| back.to_owned())
}

/// The account page's own address, with its return target.
fn account_path(back: Option<&str>) -> String {
    match back {
        Some(b) => format!("/account?{}", query(&[("back", b)])),
        None => "/account".to_owned(),
    }
}

/// Where to sign in again, coming back to the account page (and from there
/// to the confirmation, when there is one).
fn reauth_link(back: Option<&str>) -> String {
    match back {
        Some(_) => format!(
            "/login?{}",
            query(&[("reauth", "300"), ("next", &account_path(back))])
        ),
        None => REAUTH.to_owned(),
    }
}

fn query(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

fn recent(state: &CsState, me: &SignedIn) -> bool {
    let now = state.cs.now().timestamp();
    me.who.auth_time.is_some_and(|t| now - t <= RECENT_SECS)
}

/// The one mapping of a passkey route's failure to its JSON answer.
fn json_error(e: CeremonyError) -> JsonError {
    match e {
        CeremonyError::Store(_) | CeremonyError::Account(_) | CeremonyError::Log(_) => {
            log::error!("passkeys: {e}");
            JsonError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "the service could not complete this; try again",
            )
        }
        CeremonyError::BadCeremony => {
            JsonError::new(StatusCode::BAD_REQUEST, "expired", e.to_string())
        }
        e => JsonError::new(StatusCode::BAD_REQUEST, "passkey_refused", e.to_string()),
    }
}

fn csrf_refused() -> JsonError {
    JsonError::new(
        StatusCode::FORBIDDEN,
        "csrf",
        "this request did not come from this service's page; reload it",
    )
}

fn internal(e: impl std::fmt::Display) -> JsonError {
    log::error!("passkeys: {e}");
    JsonError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        "the service could not complete this; try again",
    )
}

fn b64(field: &'static str, text: &str) -> Result<Vec<u8>, JsonError> {
    crate::sign::b64::decode(text).ok_or_else(|| {
        JsonError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("{field} is not base64url"),
        )
    })
}

#[derive(serde::Deserialize)]
pub(super) struct AccountQuery {
    added: Option<String>,
    removed: Option<String>,
    /// The confirmation page that sent the person here to add a passkey.
    back: Option<String>,
}

/// `GET /account`.
pub(super) async fn account(
    state: web::Data<CsState>,
    me: SignedIn,
    q: web::Query<AccountQuery>,
) -> Result<HttpResponse, WebError> {
    let account = state.accounts.get(&me.who.sub).map_err(CsError::from)?;
    let passkeys = account
        .map(|a| a.passkeys)
        .unwrap_or_default()
        .into_iter()
        .map(|p| PasskeyRow {
            id: p.id,
            name: p.name,
            added: when(p.added),
            last_used: p.last_used.map(when),
        })
        .collect();
    let notice = match (&q.added, &q.removed) {
        (Some(_), _) => Some("The passkey was added.".to_owned()),
        (_, Some(_)) => Some("The passkey was removed.".to_owned()),
        _ => None,
    };
    let back = q.back.as_deref().and_then(confirmation_path);
    let page = AccountPage {
        user: &me.who.display_name(),
        csrf: state.sessions.csrf_token(&me.session_id),
        passkeys,
        recent: recent(&state, &me),
        notice,
        reauth: reauth_link(back.as_deref()),
        back,
    };
    Ok(HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(render(&page)?))
}

#[derive(serde::Deserialize)]
pub(super) struct BeginAdd {
    csrf: Option<String>,
    name: Option<String>,
}

/// The checks every change of the account's passkeys makes: the page's
/// CSRF token, and a recent sign-in.
fn may_change(state: &CsState, me: &SignedIn, csrf: Option<&str>) -> Result<(), JsonError> {
    check_csrf(state, &me.session_id, csrf).map_err(|_| csrf_refused())?;
    if !recent(state, me) {
        return Err(JsonError::new(
            StatusCode::FORBIDDEN,
            "reauthenticate",
            "adding or removing a passkey needs a sign-in of the last 5 minutes",
        )
        .with_extra(json!({ "reauth": REAUTH })));
    }
    Ok(())
}

/// `POST /account/passkeys/begin`: the creation options and the ceremony.
pub(super) async fn begin_add(
    state: web::Data<CsState>,
    me: SignedIn,
    body: web::Json<BeginAdd>,
) -> Result<HttpResponse, JsonError> {
    may_change(&state, &me, body.csrf.as_deref())?;
    let mut account = state
        .accounts
        .get(&me.who.sub)
        .map_err(internal)?
        .ok_or_else(|| internal("the signed-in account is gone"))?;
    let handle = match &account.user_handle {
        Some(h) => h.clone(),
        None => {
            let h = crate::sign::b64::encode(rand::random::<[u8; 32]>());
            account.user_handle = Some(h.clone());
            state.accounts.put(&account, true).map_err(internal)?;
            h
        }
    };
    let now = state.cs.now().timestamp();
    let (options, ceremony) = state
        .ceremonies
        .begin_registration(
            &account,
            &handle,
            body.name.as_deref().unwrap_or(""),
            &me.session_id,
            now,
        )
        .map_err(json_error)?;
    Ok(HttpResponse::Ok().json(json!({"options": options, "ceremony": ceremony})))
}

#[derive(serde::Deserialize)]
pub(super) struct FinishAdd {
    csrf: Option<String>,
    ceremony: String,
    id: String,
    client_data: String,
    attestation_object: String,
}

/// `POST /account/passkeys/finish`.
pub(super) async fn finish_add(
    state: web::Data<CsState>,
    me: SignedIn,
    body: web::Json<FinishAdd>,
) -> Result<HttpResponse, JsonError> {
    may_change(&state, &me, body.csrf.as_deref())?;
    let client_data = b64("client_data", &body.client_data)?;
    let attestation = b64("attestation_object", &body.attestation_object)?;
    let now = state.cs.now().timestamp();
    let added = state
        .ceremonies
        .finish_registration(
            &*state.accounts,
            state.cs.transparency().map(|l| &**l),
            &body.ceremony,
            &me.session_id,
            now,
            &body.id,
            &client_data,
            &attestation,
        )
        .map_err(json_error)?;
    log::info!(
        "passkey added for {}",
        crate::text::keyed_digest(&state.log_key, &added.account.username)
    );
    Ok(HttpResponse::Ok().json(json!({"added": added.name})))
}

#[derive(serde::Deserialize)]
pub(super) struct RemoveForm {
    csrf: Option<String>,
    id: Option<String>,
}

/// `POST /account/passkeys/remove`: a form of the account page.
pub(super) async fn remove(
    state: web::Data<CsState>,
    me: SignedIn,
    form: web::Form<RemoveForm>,
) -> Result<HttpResponse, WebError> {
    check_csrf(&state, &me.session_id, form.csrf.as_deref())?;
    if !recent(&state, &me) {
        return Ok(see_other(REAUTH));
    }
    let Some(mut account) = state.accounts.get(&me.who.sub).map_err(CsError::from)? else {
        return Ok(see_other("/login"));
    };
    let Some(gone) = account
        .passkeys
        .iter()
        .position(|p| Some(p.id.as_str()) == form.id.as_deref())
    else {
        return Ok(see_other("/account"));
    };
    // Named in the log before it goes (§15).
    state.cs.log_credential(
        &account.username,
        &account.passkeys[gone].key,
        crate::tlog::CredentialChange::Removed,
    )?;
    account.passkeys.remove(gone);
    state.accounts.put(&account, true).map_err(|e| {
        CsError::from(crate::store::StoreError::Backend {
            op: "remove passkey",
            message: e.to_string(),
        })
    })?;
    log::info!(
        "passkey removed for {}",
        crate::text::keyed_digest(&state.log_key, &account.username)
    );
    Ok(see_other("/account?removed=1"))
}

#[derive(serde::Deserialize)]
pub(super) struct BeginSignIn {
    csrf: Option<String>,
}

/// The pre-login cookie value a sign-in form is bound to, checked with the
/// form's CSRF token.
fn pre_login(state: &CsState, req: &HttpRequest, csrf: Option<&str>) -> Result<String, JsonError> {
    let id = super::extract::pre_login_id(req).ok_or_else(csrf_refused)?;
    check_csrf(state, &id, csrf).map_err(|_| csrf_refused())?;
    Ok(id)
}

/// `POST /login/passkey/begin`: request options for any passkey of this
/// service, and the ceremony.
pub(super) async fn begin_sign_in(
    state: web::Data<CsState>,
    req: HttpRequest,
    body: web::Json<BeginSignIn>,
) -> Result<HttpResponse, JsonError> {
    let id = pre_login(&state, &req, body.csrf.as_deref())?;
    let (options, ceremony) = state
        .ceremonies
        .begin_sign_in(&id, state.cs.now().timestamp())
        .map_err(json_error)?;
    Ok(HttpResponse::Ok().json(json!({"options": options, "ceremony": ceremony})))
}

#[derive(serde::Deserialize)]
pub(super) struct FinishSignIn {
    csrf: Option<String>,
    next: Option<String>,
    ceremony: String,
    id: String,
    client_data: String,
    authenticator_data: String,
    signature: String,
    user_handle: String,
}

/// `POST /login/passkey/finish`: a new session, as a password sign-in
/// makes; answers where to go on.
pub(super) async fn finish_sign_in(
    state: web::Data<CsState>,
    req: HttpRequest,
    visitor: Visitor,
    body: web::Json<FinishSignIn>,
) -> Result<HttpResponse, JsonError> {
    let old_id = pre_login(&state, &req, body.csrf.as_deref())?;
    let answer = AssertionAnswer {
        id: body.id.clone(),
        client_data: b64("client_data", &body.client_data)?,
        authenticator_data: b64("authenticator_data", &body.authenticator_data)?,
        signature: b64("signature", &body.signature)?,
    };
    let now = state.cs.now().timestamp();
    let who = state
        .ceremonies
        .finish_sign_in(
            &*state.accounts,
            &body.ceremony,
            &old_id,
            now,
            &body.user_handle,
            &answer,
        )
        .map_err(|e| {
            log::info!("failed passkey sign-in: {e}");
            json_error(e)
        })?;
    // A new session id at sign-in (no session fixation).
    state.sessions.remove(&old_id).map_err(internal)?;
    if let Some((stored, _)) = visitor.0 {
        state.sessions.remove(&stored).map_err(internal)?;
    }
    let id = state
        .sessions
        .create(
            Some(identity_of_passkey(&who.account, &who.passkey_id, now)),
            now,
        )
        .map_err(internal)?;
    let next = super::safe_next(body.next.as_deref());
    let mut res =
        HttpResponse::Ok().json(json!({"next": after_sign_in(&state, Some(&old_id), &next)}));
    set_cookie(&mut res, &session_cookie(&state, &id)).map_err(internal)?;
    Ok(res)
}

/// `POST /c/{id}/passkey`: the request options of an acceptance with the
/// user's passkey (§14), for the decision form as filled in (JSON; the
/// page's script asks the authenticator with them, then posts the form).
pub(super) async fn decision_passkey(
    state: web::Data<CsState>,
    me: SignedIn,
    id: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, JsonError> {
    let json_error = |e: CsError| {
        let (status, code) = crate::confirm::status::of(&e);
        JsonError::new(status, code, super::pages::message(&e))
    };
    let mut form = DecisionForm::parse(&body).map_err(json_error)?;
    check_csrf(&state, &me.session_id, form.field("csrf")).map_err(json_error)?;
    // Only an acceptance needs the passkey.
    form.fields.retain(|(k, _)| k != "decision");
    form.fields.push(("decision".into(), "accept".into()));
    let request = form.request().map_err(json_error)?;
    match state.cs.passkey_options(&id, &me.who, &request).await {
        Ok(options) => Ok(HttpResponse::Ok().json(serde_json::json!({ "options": options }))),
        Err(DecideError::Other(e)) => Err(json_error(e)),
        Err(DecideError::Input { .. }) => Err(JsonError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            "some values are missing or not valid: submit the form to see which",
        )),
    }
}

/// `GET /static/passkey.js`.
pub(super) async fn script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header((actix_web::http::header::CACHE_CONTROL, "max-age=3600"))
        .body(include_str!("../../../templates/passkey.js"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "Ujc6X0hQ3o0xTkq2v9Zl1mFJ0d6QbqR9y3c2Xo5YtUQ";

    /// Only a confirmation page of this service is a return target: no
    /// other site (an open redirect), no other page of this one.
    #[test]
    fn only_a_confirmation_path_is_a_return_target() {
        let ok = format!("/c/{ID}");
        assert_eq!(confirmation_path(&ok), Some(ok.clone()));
        for bad in [
            "https://evil.example/".to_owned(),
            format!("https://evil.example/c/{ID}"),
            format!("//evil.example/c/{ID}"),
            "//evil.example".to_owned(),
            format!("/\\evil.example/c/{ID}"),
            format!("/c/{ID}/../../account"),
            format!("/c/../{}", &ID[3..]),
            format!("/c/{ID}/passkey"),
            format!("/c/{ID}?x=1"),
            format!("/c/{ID}#x"),
            format!("/c/%2F%2Fevil.example{}", &ID[16..]),
            format!("/c/{}", &ID[1..]),
            format!("/c/{ID}A"),
            format!("/C/{ID}"),
            format!("c/{ID}"),
            format!(" /c/{ID}"),
            format!("/c/{}	", &ID[1..]),
            format!("javascript:/c/{ID}"),
            "/history".to_owned(),
            "/c/".to_owned(),
            String::new(),
        ] {
            assert_eq!(confirmation_path(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_reauth_link_comes_back_with_the_target() {
        assert_eq!(reauth_link(None), REAUTH);
        let back = format!("/c/{ID}");
        let link = reauth_link(Some(&back));
        assert_eq!(
            link,
            format!("/login?reauth=300&next=%2Faccount%3Fback%3D%252Fc%252F{ID}")
        );
        assert_eq!(
            account_path(Some(&back)),
            format!("/account?back=%2Fc%2F{ID}")
        );
    }
}
