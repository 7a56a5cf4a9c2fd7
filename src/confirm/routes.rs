//! The browser front end of the confirmation server (PROTOCOL.md §2–§6):
//! routes, thin handlers (parse, call [`Cs`], render) and the security
//! headers every page carries.
//!
//! | route | what |
//! |---|---|
//! | `GET <start path>` | a form to paste a resource URI |
//! | `POST <start path>` | §2: `resource_uri` → 303 to the confirmation page (through login) |
//! | `GET /login`, `POST /login`, `POST /logout` | the embedded login |
//! | `GET /c/{id}` | the confirmation page (§3, §5) |
//! | `POST /c/{id}` | the decision (§5, §6) |
//! | `GET /history`, `GET /history/{nonce}.json` | past decisions and their signed CHEQs |
//! | `GET /.well-known/jwks.json`, `GET /healthz`, `GET /static/style.css` | |

use super::auth::{Accounts, Authenticator, Identity, RateLimiter, Sessions};
use super::decide::{Collected, Cs, DecideError, DecisionRequest, Loaded, WARNINGS_KEY};
use super::error::CsError;
use super::view::CheqView;
use crate::sign::{Channel, Decision};
use crate::store::records::{DecisionRecord, Delivery};
use actix_web::cookie::{Cookie, SameSite};
use actix_web::http::header;
use actix_web::middleware::DefaultHeaders;
use actix_web::{web, HttpRequest, HttpResponse};
use askama::Template;
use chrono::{TimeZone, Utc};
use indexmap::IndexMap;
use std::sync::Arc;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "cheq_session";
/// Largest form body read.
pub const MAX_FORM: usize = 64 * 1024;

/// The Content-Security-Policy of every response: no script at all, styles
/// from this origin only, forms post only here, never framed.
pub const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Everything the handlers share.
pub struct CsState {
    pub cs: Arc<Cs>,
    pub accounts: Accounts,
    pub sessions: Sessions,
    pub login_limiter: RateLimiter,
    pub start_path: String,
    pub secure_cookies: bool,
    /// The raw API (§10), sharing `cs`.
    pub api: web::Data<super::api::Api>,
}

impl std::fmt::Debug for CsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsState").finish_non_exhaustive()
    }
}

/// The headers every response carries (clickjacking, referrer, sniffing);
/// over https also HSTS.
pub fn security_headers(https: bool) -> DefaultHeaders {
    let headers = DefaultHeaders::new()
        .add((header::CONTENT_SECURITY_POLICY, CSP))
        .add((header::X_FRAME_OPTIONS, "DENY"))
        .add((header::REFERRER_POLICY, "no-referrer"))
        .add((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .add((header::CACHE_CONTROL, "no-store"));
    if https {
        headers.add((header::STRICT_TRANSPORT_SECURITY, "max-age=31536000"))
    } else {
        headers
    }
}

/// Registers the routes and the state (used by the server and by tests).
pub fn configure(cfg: &mut web::ServiceConfig, state: web::Data<CsState>) {
    let start = state.start_path.clone();
    super::api::configure(cfg, state.api.clone());
    cfg.app_data(state)
        .app_data(
            web::FormConfig::default()
                .limit(MAX_FORM)
                .error_handler(|e, _| {
                    let err = match e {
                        actix_web::error::UrlencodedError::Overflow { .. } => {
                            CsError::PayloadTooLarge
                        }
                        e => CsError::BadRequest(format!("the form could not be read: {e}")),
                    };
                    err.into()
                }),
        )
        .app_data(web::QueryConfig::default().error_handler(|e, _| {
            CsError::BadRequest(format!("the query could not be read: {e}")).into()
        }))
        .service(
            resource(&start)
                .route(web::get().to(home))
                .route(web::post().to(start_confirmation)),
        )
        .service(
            resource("/login")
                .route(web::get().to(login_form))
                .route(web::post().to(login)),
        )
        .service(resource("/logout").route(web::post().to(logout)))
        .service(
            resource("/c/{id}")
                .route(web::get().to(confirmation))
                .route(web::post().to(decide)),
        )
        .service(resource("/history").route(web::get().to(history)))
        .service(resource("/history/{nonce}.json").route(web::get().to(evidence)))
        .service(resource("/.well-known/jwks.json").route(web::get().to(jwks)))
        .service(resource("/healthz").route(web::get().to(healthz)))
        .service(resource("/static/style.css").route(web::get().to(style)))
        .default_service(web::to(not_found));
}

fn resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(|| async {
        Err::<HttpResponse, _>(CsError::MethodNotAllowed)
    }))
}

async fn not_found() -> Result<HttpResponse, CsError> {
    Err(CsError::NotFound)
}

fn now(state: &CsState) -> i64 {
    state.cs.now().timestamp()
}

fn html(status: actix_web::http::StatusCode, body: String) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .body(body)
}

fn render(t: &impl Template) -> Result<String, CsError> {
    t.render()
        .map_err(|e| CsError::Internal(format!("template: {e}")))
}

fn see_other(location: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .finish()
}

fn session_cookie(state: &CsState, id: &str) -> Cookie<'static> {
    Cookie::build(SESSION_COOKIE, id.to_owned())
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(state.secure_cookies)
        .finish()
}

/// The session id and session of this request, if it has a live one.
fn current(
    state: &CsState,
    req: &HttpRequest,
) -> Result<Option<(String, super::auth::Session)>, CsError> {
    let Some(cookie) = req.cookie(SESSION_COOKIE) else {
        return Ok(None);
    };
    let id = cookie.value().to_owned();
    Ok(state.sessions.get(&id, now(state))?.map(|s| (id, s)))
}

/// The value of the session cookie, whether or not it names a stored session
/// (before login it is only what the login form's CSRF token is bound to).
fn pre_login_id(req: &HttpRequest) -> Option<String> {
    req.cookie(SESSION_COOKIE)
        .map(|c| c.value().to_owned())
        .filter(|v| v.len() >= 32 && v.len() <= 64)
}

/// The signed-in user, or a redirect through login back to this page.
fn signed_in(
    state: &CsState,
    req: &HttpRequest,
) -> Result<Result<(String, Identity), HttpResponse>, CsError> {
    match current(state, req)? {
        Some((id, s)) => match s.identity {
            Some(who) => Ok(Ok((id, who))),
            None => Ok(Err(to_login(req.path()))),
        },
        None => Ok(Err(to_login(req.path()))),
    }
}

fn to_login(next: &str) -> HttpResponse {
    let q = serde_urlencoded::to_string([("next", next)]).unwrap_or_default();
    see_other(&format!("/login?{q}"))
}

/// Only local paths are followed after login (no open redirect).
fn safe_next(next: Option<&str>) -> String {
    // A local path of plain URL characters only: browsers drop tabs and line
    // breaks before parsing, so "/\t/evil.example" would become "//evil…".
    let plain = |n: &str| {
        n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/_.~%?=&-+:@!$'()*,;".contains(&b))
    };
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && plain(n) && n.len() <= 4096 => {
            n.to_owned()
        }
        _ => "/history".to_owned(),
    }
}

fn check_csrf(state: &CsState, session_id: &str, token: Option<&str>) -> Result<(), CsError> {
    match token {
        Some(t) if state.sessions.check_csrf(session_id, t) => Ok(()),
        _ => Err(CsError::Csrf),
    }
}

// ---- pages ----

#[derive(Template)]
#[template(path = "start.html")]
struct StartPage<'a> {
    user: Option<&'a str>,
    csrf: String,
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage<'a> {
    next: &'a str,
    csrf: &'a str,
    error: Option<&'a str>,
    username: &'a str,
}

#[derive(Template)]
#[template(path = "confirm.html")]
struct ConfirmPage<'a> {
    id: &'a str,
    v: &'a CheqView,
    user: &'a str,
    csrf: String,
    errors: &'a [(String, String)],
    entered: &'a IndexMap<String, String>,
    cs_origin: &'a str,
    /// How long is left until `v.expires`, in words ("in 9 minutes").
    expires_in: String,
}

impl ConfirmPage<'_> {
    fn error_for(&self, name: &str) -> Option<&str> {
        self.errors
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, m)| m.as_str())
    }
    fn warnings_error(&self) -> Option<&str> {
        self.error_for(WARNINGS_KEY)
    }
    fn entered_for(&self, name: &str) -> &str {
        self.entered.get(name).map(String::as_str).unwrap_or("")
    }
}

#[derive(Template)]
#[template(path = "outcome.html")]
struct OutcomePage<'a> {
    r: &'a DecisionRecord,
    user: &'a str,
    csrf: String,
    earlier: bool,
    when: String,
    status_line: String,
}

#[derive(Template)]
#[template(path = "history.html")]
struct HistoryPage<'a> {
    user: &'a str,
    csrf: String,
    rows: Vec<HistoryRow>,
}

struct HistoryRow {
    nonce: String,
    operation_name: String,
    resource_origin: String,
    decision: String,
    when: String,
    delivery: String,
}

fn when(ts: i64) -> String {
    Utc.timestamp_opt(ts, 0)
        .single()
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// How long is left from `now` until `expires` (RFC 3339), in words, rounded
/// down: "in 9 minutes", "in 2 hours 5 minutes", "in 3 days".
fn time_left(expires: &str, now: chrono::DateTime<Utc>) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(expires) else {
        return String::new();
    };
    let plural = |n: i64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    match (t.with_timezone(&Utc) - now).num_seconds() {
        s if s <= 0 => "already expired".into(),
        s if s < 60 => "in less than a minute".into(),
        s if s < 3600 => format!("in {}", plural(s / 60, "minute")),
        s if s < 86400 && s % 3600 < 60 => format!("in {}", plural(s / 3600, "hour")),
        s if s < 86400 => format!(
            "in {} {}",
            plural(s / 3600, "hour"),
            plural(s % 3600 / 60, "minute")
        ),
        s => format!("in {}", plural(s / 86400, "day")),
    }
}

fn status_line(r: &DecisionRecord) -> String {
    match &r.delivery {
        Delivery::Pending { .. } => "Delivery pending: the resource server has not been reached yet. This service keeps trying until it answers or the request expires; you need not do anything.".into(),
        Delivery::Delivered { status, .. } => format!("Delivered: the resource server recorded the decision ({status})."),
        Delivery::Refused { reason, .. } => format!("The resource server refused the decision: {reason}"),
        Delivery::Expired { .. } => "The request expired before the resource server could be reached; it was not carried out.".into(),
    }
}

fn outcome(
    state: &CsState,
    session_id: &str,
    who: &Identity,
    r: &DecisionRecord,
    earlier: bool,
) -> Result<HttpResponse, CsError> {
    let page = OutcomePage {
        r,
        user: &who.sub,
        csrf: state.sessions.csrf_token(session_id),
        earlier,
        when: when(r.decided_at),
        status_line: status_line(r),
    };
    Ok(html(actix_web::http::StatusCode::OK, render(&page)?))
}

// ---- handlers ----

async fn home(
    state: web::Data<CsState>,
    req: HttpRequest,
    query: web::Query<StartForm>,
) -> Result<HttpResponse, CsError> {
    // The link an agent prints: `<confirmation uri>?resource_uri=…` (§2).
    if let Some(uri) = query
        .into_inner()
        .resource_uri
        .filter(|u| !u.trim().is_empty())
    {
        return begin(&state, &req, &uri);
    }
    let (user, csrf) = match current(&state, &req)? {
        Some((id, s)) => (s.identity.map(|i| i.sub), state.sessions.csrf_token(&id)),
        None => (None, String::new()),
    };
    let page = StartPage {
        user: user.as_deref(),
        csrf,
    };
    Ok(html(actix_web::http::StatusCode::OK, render(&page)?))
}

#[derive(serde::Deserialize)]
struct StartForm {
    resource_uri: Option<String>,
}

async fn start_confirmation(
    state: web::Data<CsState>,
    req: HttpRequest,
    query: web::Query<StartForm>,
    body: web::Bytes,
) -> Result<HttpResponse, CsError> {
    if body.len() > MAX_FORM {
        return Err(CsError::PayloadTooLarge);
    }
    let form: StartForm = serde_urlencoded::from_bytes(&body)
        .map_err(|e| CsError::BadRequest(format!("the form could not be read: {e}")))?;
    let uri = form
        .resource_uri
        .or_else(|| query.into_inner().resource_uri)
        .filter(|u| !u.trim().is_empty())
        .ok_or_else(|| CsError::BadRequest("the field resource_uri is missing".into()))?;
    begin(&state, &req, &uri)
}

/// §2: a registered resource URI → 303 to its page, through login if needed.
fn begin(state: &CsState, req: &HttpRequest, uri: &str) -> Result<HttpResponse, CsError> {
    let logged_in = current(state, req)?.is_some_and(|(_, s)| s.identity.is_some());
    if !logged_in {
        // Refuse an unregistered URI at once, but store nothing for a
        // visitor who has not signed in: come back here after login.
        state.cs.check_registered(uri)?;
        let query = serde_urlencoded::to_string([("resource_uri", uri.trim())]).unwrap_or_default();
        return Ok(to_login(&format!("{}?{query}", state.start_path)));
    }
    let id = state.cs.start(uri)?;
    Ok(see_other(&format!("/c/{id}")))
}

#[derive(serde::Deserialize)]
struct NextQuery {
    next: Option<String>,
}

async fn login_form(
    state: web::Data<CsState>,
    req: HttpRequest,
    q: web::Query<NextQuery>,
) -> Result<HttpResponse, CsError> {
    let next = safe_next(q.next.as_deref());
    if current(&state, &req)?.is_some_and(|(_, s)| s.identity.is_some()) {
        return Ok(see_other(&next));
    }
    // Before login nothing is stored: the cookie holds a random value the
    // form's CSRF token is bound to (a double-submit token under our HMAC).
    let (id, fresh) = match pre_login_id(&req) {
        Some(id) => (id, false),
        None => (crate::sign::b64::encode(rand::random::<[u8; 32]>()), true),
    };
    let page = LoginPage {
        next: &next,
        csrf: &state.sessions.csrf_token(&id),
        error: None,
        username: "",
    };
    let mut res = html(actix_web::http::StatusCode::OK, render(&page)?);
    if fresh {
        res.add_cookie(&session_cookie(&state, &id))
            .map_err(|e| CsError::Internal(e.to_string()))?;
    }
    Ok(res)
}

#[derive(serde::Deserialize)]
struct LoginForm {
    username: Option<String>,
    password: Option<String>,
    csrf: Option<String>,
    next: Option<String>,
}

async fn login(
    state: web::Data<CsState>,
    req: HttpRequest,
    form: web::Form<LoginForm>,
) -> Result<HttpResponse, CsError> {
    let form = form.into_inner();
    let next = safe_next(form.next.as_deref());
    let Some(old_id) = pre_login_id(&req) else {
        // No cookie: the form did not come from our login page.
        return Err(CsError::Csrf);
    };
    check_csrf(&state, &old_id, form.csrf.as_deref())?;
    let username = form.username.unwrap_or_default().trim().to_owned();
    let password = form.password.unwrap_or_default();
    let t = now(&state);
    let ip = req
        .peer_addr()
        .map(|a| format!("ip:{}", a.ip()))
        .unwrap_or_else(|| "ip:?".into());
    let user_key = format!("user:{username}");
    let locked = state
        .login_limiter
        .locked(&user_key, t)
        .into_iter()
        .chain(state.login_limiter.locked(&ip, t))
        .max();
    if let Some(retry_after) = locked {
        return Err(CsError::TooManyAttempts { retry_after });
    }
    // Counted as a failure before hashing, so that a burst of concurrent
    // guesses cannot all pass the check above; a success forgets it.
    state.login_limiter.fail(&user_key, t);
    state.login_limiter.fail(&ip, t);
    let accounts = state.accounts.clone();
    let (u, p) = (username.clone(), password);
    let checked = super::auth::hashing(move || accounts.check_password(&u, &p)).await??;
    let Some(account) = checked else {
        log::info!("failed login for {username:?}");
        let page = LoginPage {
            next: &next,
            csrf: &state.sessions.csrf_token(&old_id),
            error: Some("The user name or password is wrong."),
            username: &username,
        };
        return Ok(html(
            actix_web::http::StatusCode::UNAUTHORIZED,
            render(&page)?,
        ));
    };
    state.login_limiter.succeed(&user_key);
    state.login_limiter.succeed(&ip);
    let identity = Identity {
        sub: account.username.clone(),
        also_known_as: account.email.clone().into_iter().collect(),
        auth_time: t,
        amr: vec!["pwd".into()],
    };
    // A new session id at login (no session fixation).
    state.sessions.remove(&old_id)?;
    if let Some((stored, _)) = current(&state, &req)? {
        state.sessions.remove(&stored)?;
    }
    let id = state.sessions.create(Some(identity), t)?;
    let mut res = see_other(&next);
    res.add_cookie(&session_cookie(&state, &id))
        .map_err(|e| CsError::Internal(e.to_string()))?;
    Ok(res)
}

#[derive(serde::Deserialize)]
struct CsrfForm {
    csrf: Option<String>,
}

async fn logout(
    state: web::Data<CsState>,
    req: HttpRequest,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, CsError> {
    if let Some((id, _)) = current(&state, &req)? {
        check_csrf(&state, &id, form.csrf.as_deref())?;
        state.sessions.remove(&id)?;
    }
    let mut res = see_other("/login");
    let mut gone = Cookie::build(SESSION_COOKIE, "").path("/").finish();
    gone.make_removal();
    res.add_cookie(&gone)
        .map_err(|e| CsError::Internal(e.to_string()))?;
    Ok(res)
}

async fn confirmation(
    state: web::Data<CsState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, CsError> {
    let (session_id, who) = match signed_in(&state, &req)? {
        Ok(s) => s,
        Err(redirect) => return Ok(redirect),
    };
    match state.cs.load(&id, &who).await? {
        Loaded::Decided(r) => outcome(&state, &session_id, &who, &r, true),
        Loaded::Open(open) => {
            let page = ConfirmPage {
                id: &open.id,
                v: &open.view,
                user: &who.sub,
                csrf: state.sessions.csrf_token(&session_id),
                errors: &[],
                entered: &IndexMap::new(),
                cs_origin: &state.cs_origin(),
                expires_in: time_left(&open.view.expires, state.cs.now()),
            };
            Ok(html(actix_web::http::StatusCode::OK, render(&page)?))
        }
    }
}

impl CsState {
    fn cs_origin(&self) -> String {
        self.cs.cs_origin().to_owned()
    }
}

async fn decide(
    state: web::Data<CsState>,
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, CsError> {
    let (session_id, who) = match signed_in(&state, &req)? {
        Ok(s) => s,
        Err(redirect) => return Ok(redirect),
    };
    if body.len() > MAX_FORM {
        return Err(CsError::PayloadTooLarge);
    }
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(&body)
        .map_err(|e| CsError::BadRequest(format!("the form could not be read: {e}")))?;
    let field = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    check_csrf(&state, &session_id, field("csrf"))?;
    let decision = field("decision")
        .and_then(Decision::parse)
        .ok_or_else(|| CsError::BadRequest("the decision must be accept or reject".into()))?;
    let view_digest = field("view").unwrap_or_default().to_owned();
    let by_index: Vec<(usize, String)> = fields
        .iter()
        .filter_map(|(k, v)| {
            let i = k.strip_prefix("input:")?.parse().ok()?;
            Some((i, v.clone()))
        })
        .collect();
    let request = DecisionRequest {
        decision,
        channel: Channel::Html,
        view_digest: Some(view_digest),
        collected: Collected::ByIndex(by_index.clone()),
        warnings_acknowledged: field("acknowledge_warnings") == Some("yes"),
    };
    match state.cs.decide(&id, &who, request).await {
        Ok(d) => {
            state.cs.wake();
            outcome(&state, &session_id, &who, &d.record, d.earlier)
        }
        Err(DecideError::Other(e)) => Err(e),
        Err(DecideError::Input(errors)) => {
            // Show the page again with the problems next to their fields.
            match state.cs.load(&id, &who).await? {
                Loaded::Decided(r) => outcome(&state, &session_id, &who, &r, true),
                Loaded::Open(open) => {
                    // Typed values are shown again, except sensitive ones.
                    let entered: IndexMap<String, String> = by_index
                        .into_iter()
                        .filter_map(|(i, v)| {
                            let p = open.view.parameters.get(i)?;
                            let sensitive = p.input.as_ref().is_some_and(|x| x.sensitive);
                            (!sensitive).then(|| (p.raw_name.clone(), v))
                        })
                        .collect();
                    let page = ConfirmPage {
                        id: &open.id,
                        v: &open.view,
                        user: &who.sub,
                        csrf: state.sessions.csrf_token(&session_id),
                        errors: &errors,
                        entered: &entered,
                        cs_origin: &state.cs_origin(),
                        expires_in: time_left(&open.view.expires, state.cs.now()),
                    };
                    Ok(html(
                        actix_web::http::StatusCode::UNPROCESSABLE_ENTITY,
                        render(&page)?,
                    ))
                }
            }
        }
    }
}

async fn history(state: web::Data<CsState>, req: HttpRequest) -> Result<HttpResponse, CsError> {
    let (session_id, who) = match signed_in(&state, &req)? {
        Ok(s) => s,
        Err(redirect) => return Ok(redirect),
    };
    let rows = state
        .cs
        .history(&who)?
        .into_iter()
        .map(|r| HistoryRow {
            when: when(r.decided_at),
            delivery: r.delivery.label().to_owned(),
            nonce: r.nonce,
            operation_name: r.operation_name,
            resource_origin: r.resource_origin,
            decision: r.decision,
        })
        .collect();
    let page = HistoryPage {
        user: &who.sub,
        csrf: state.sessions.csrf_token(&session_id),
        rows,
    };
    Ok(html(actix_web::http::StatusCode::OK, render(&page)?))
}

async fn evidence(
    state: web::Data<CsState>,
    req: HttpRequest,
    nonce: web::Path<String>,
) -> Result<HttpResponse, CsError> {
    let (_, who) = match signed_in(&state, &req)? {
        Ok(s) => s,
        Err(redirect) => return Ok(redirect),
    };
    let document = state.cs.evidence(&nonce, &who)?;
    Ok(HttpResponse::Ok()
        .content_type("application/jose+json")
        .insert_header((
            header::CONTENT_DISPOSITION,
            "attachment; filename=\"cheq-decision.json\"",
        ))
        .body(document))
}

async fn jwks(state: web::Data<CsState>) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "max-age=300"))
        .json(state.cs.jwks())
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

async fn style() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "max-age=3600"))
        .body(include_str!("../../templates/style.css"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn hsts_only_over_https() {
        use actix_web::{test, App};
        for https in [false, true] {
            let app = test::init_service(
                App::new()
                    .wrap(security_headers(https))
                    .route("/", web::get().to(HttpResponse::Ok)),
            )
            .await;
            let res =
                test::call_service(&app, test::TestRequest::get().uri("/").to_request()).await;
            let h = res.headers();
            assert_eq!(h.contains_key(header::STRICT_TRANSPORT_SECURITY), https);
            assert_eq!(h.get(header::X_FRAME_OPTIONS).unwrap(), "DENY");
            assert_eq!(h.get(header::CONTENT_SECURITY_POLICY).unwrap(), CSP);
        }
    }

    #[test]
    fn only_plain_local_paths_are_followed_after_login() {
        for ok in [
            "/c/abc",
            "/history",
            "/?resource_uri=http%3A%2F%2F127.0.0.1%3A8081%2Fcheq%2Fx",
        ] {
            assert_eq!(safe_next(Some(ok)), ok);
        }
        for bad in [
            "//evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\\evil.example",
            "https://evil.example/",
            "evil",
            "/caf\u{e9}",
            "",
        ] {
            assert_eq!(safe_next(Some(bad)), "/history", "{bad:?}");
        }
        assert_eq!(safe_next(None), "/history");
    }

    #[test]
    fn time_left_in_words() {
        let now = Utc.with_ymd_and_hms(2026, 5, 1, 12, 0, 0).unwrap();
        for (expires, words) in [
            ("2026-05-01T11:59:00Z", "already expired"),
            ("2026-05-01T12:00:00Z", "already expired"),
            ("2026-05-01T12:00:59Z", "in less than a minute"),
            ("2026-05-01T12:01:59Z", "in 1 minute"),
            ("2026-05-01T12:09:30Z", "in 9 minutes"),
            ("2026-05-01T13:00:30Z", "in 1 hour"),
            ("2026-05-01T14:05:00Z", "in 2 hours 5 minutes"),
            ("2026-05-04T13:00:00Z", "in 3 days"),
            ("not a time", ""),
        ] {
            assert_eq!(time_left(expires, now), words, "{expires}");
        }
    }
}
