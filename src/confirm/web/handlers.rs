//! The handlers of the browser front end: parse the request, call the flow,
//! render a page. Who is signed in comes from the [`SignedIn`] extractor.

use super::pages::{
    render, status_line, time_left, when, ConfirmPage, HistoryPage, HistoryRow, LoginPage,
    OutcomePage, PasskeyNeed, ProviderLink, StartPage,
};
use super::{
    check_csrf, removal, safe_next, see_other, session_cookie, set_cookie, to_login, CsState,
    SignedIn, Visitor, WebError, MAX_FORM,
};
use crate::cheq::{Channel, Decision};
use crate::confirm::auth::{identity_of, Authenticator, Budget, LimitKey};
use crate::confirm::flow::{
    BadRequest, Collected, CsError, DecideError, DecisionRequest, InputProblems, Loaded, Open,
};
use crate::store::cs::DecisionRecord;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use indexmap::IndexMap;

type Page = Result<HttpResponse, WebError>;

fn html(status: StatusCode, body: String) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .body(body)
}

fn outcome(state: &CsState, me: &SignedIn, r: &DecisionRecord, earlier: bool) -> Page {
    let page = OutcomePage {
        r,
        user: &me.who.display_name(),
        csrf: state.sessions.csrf_token(&me.session_id),
        earlier,
        when: when(r.decided_at),
        status_line: status_line(r),
        evidence_id: r.key().id(),
        evidence: crate::confirm::seal::evidence_kind(r),
    };
    Ok(html(StatusCode::OK, render(&page)?))
}

/// Whether the page's Accept needs the user's passkey (§14).
fn passkey_need(state: &CsState, me: &SignedIn, open: &Open) -> Result<PasskeyNeed, CsError> {
    if open.verified().cheq().assurance != Some(crate::cheq::Assurance::Passkey) {
        return Ok(PasskeyNeed::None);
    }
    let has = state
        .accounts
        .get(&me.who.sub)?
        .is_some_and(|a| !a.passkeys.is_empty());
    Ok(if has {
        PasskeyNeed::Ask
    } else {
        PasskeyNeed::Missing
    })
}

fn confirm_page(
    state: &CsState,
    me: &SignedIn,
    open: &Open,
    status: StatusCode,
    problems: &InputProblems,
    entered: &IndexMap<String, String>,
) -> Page {
    let page = ConfirmPage {
        id: &open.id,
        v: &open.view,
        user: &me.who.display_name(),
        csrf: state.sessions.csrf_token(&me.session_id),
        problems,
        entered,
        cs_origin: state.cs.cs_origin(),
        expires_in: time_left(&open.view.expires, state.cs.now()),
        passkey: passkey_need(state, me, open)?,
    };
    Ok(html(status, render(&page)?))
}

#[derive(serde::Deserialize)]
pub(super) struct StartForm {
    resource_uri: Option<String>,
}

pub(super) async fn home(
    state: web::Data<CsState>,
    visitor: Visitor,
    query: web::Query<StartForm>,
) -> Page {
    // The link an agent prints: `<confirmation uri>?resource_uri=…` (§2,
    // §11). A GET never starts a confirmation (a link preview or a scanner
    // must not): it checks the URI is registered, sends a visitor through
    // login, and shows the start form filled in; the user's own POST starts.
    let given = query
        .into_inner()
        .resource_uri
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty());
    let mut asker = None;
    if let Some(uri) = &given {
        state.cs.check_registered(uri)?;
        // A registered URI is on its RS's origin (§2), the one the
        // confirmation page names as the requester.
        asker = url::Url::parse(uri)
            .ok()
            .map(|u| u.origin().ascii_serialization());
        if !visitor.signed_in() {
            let query =
                serde_urlencoded::to_string([("resource_uri", uri.as_str())]).unwrap_or_default();
            return Ok(to_login(&format!("{}?{query}", state.start_path)));
        }
    }
    let (user, csrf) = match visitor.0 {
        Some((id, s)) => (s.identity.map(|i| i.sub), state.sessions.csrf_token(&id)),
        None => (None, String::new()),
    };
    let page = StartPage {
        user: user.as_deref(),
        csrf,
        resource_uri: given.as_deref().unwrap_or(""),
        asker: asker.as_deref(),
    };
    Ok(html(StatusCode::OK, render(&page)?))
}

pub(super) async fn start_confirmation(
    state: web::Data<CsState>,
    req: HttpRequest,
    visitor: Visitor,
    query: web::Query<StartForm>,
    body: web::Bytes,
) -> Page {
    if body.len() > MAX_FORM {
        return Err(CsError::PayloadTooLarge.into());
    }
    let form: StartForm = serde_urlencoded::from_bytes(&body)
        .map_err(|e| CsError::BadRequest(BadRequest::Form(e.to_string())))?;
    let uri = form
        .resource_uri
        .or_else(|| query.into_inner().resource_uri)
        .filter(|u| !u.trim().is_empty())
        .ok_or(CsError::BadRequest(BadRequest::MissingField(
            "resource_uri",
        )))?;
    begin(&state, &req, &visitor, &uri)
}

/// §2: a registered resource URI → 303 to its page, through login if needed.
fn begin(state: &CsState, req: &HttpRequest, visitor: &Visitor, uri: &str) -> Page {
    if !visitor.signed_in() {
        // Refuse an unregistered URI at once, but store nothing for a
        // visitor who has not signed in. The sign-in that follows carries
        // this POST (a tag bound to the browser's pre-login cookie) and
        // goes on to the page; see `after_sign_in`.
        state.cs.check_registered(uri)?;
        let (pre_login, fresh) = match super::extract::pre_login_id(req) {
            Some(id) => (id, false),
            None => (crate::sign::b64::encode(rand::random::<[u8; 32]>()), true),
        };
        let uri = uri.trim();
        let query = serde_urlencoded::to_string([
            ("resource_uri", uri),
            (START_TAG, &state.sessions.start_tag(&pre_login, uri)),
        ])
        .unwrap_or_default();
        let mut res = to_login(&format!("{}?{query}", state.start_path));
        if fresh {
            set_cookie(&mut res, &session_cookie(state, &pre_login))?;
        }
        return Ok(res);
    }
    let id = state.cs.start(uri)?;
    Ok(see_other(&format!("/c/{id}")))
}

/// The query member of a start link that carries the user's own `POST`
/// through sign-in.
const START_TAG: &str = "started";

/// §2: where a sign-in goes on to. A sign-in that followed the user's own
/// `POST` of a resource URI in this browser (its `next` is the start link
/// with that POST's tag) starts the confirmation and goes to its page, so no
/// second click is needed; anything else goes to `next`. A start that fails
/// now (the store, a URI no longer registered) goes to `next` as well, whose
/// page then says what is wrong.
pub(super) fn after_sign_in(state: &CsState, pre_login_id: Option<&str>, next: &str) -> String {
    let started = || -> Option<String> {
        let pre_login = pre_login_id?;
        let (path, query) = next.split_once('?')?;
        if path != state.start_path {
            return None;
        }
        let mut uri = None;
        let mut tag = None;
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            match &*k {
                "resource_uri" => uri = Some(v.into_owned()),
                START_TAG => tag = Some(v.into_owned()),
                _ => {}
            }
        }
        let (uri, tag) = (uri?, tag?);
        if !state.sessions.check_start_tag(pre_login, &uri, &tag) {
            return None;
        }
        match state.cs.start(&uri) {
            Ok(id) => Some(format!("/c/{id}")),
            Err(e) => {
                // Its code only: the text of a refusal may name the URI.
                tracing::info!(
                    "a confirmation could not be started after sign-in: {}",
                    crate::confirm::status::of(&e).1
                );
                None
            }
        }
    };
    started().unwrap_or_else(|| next.to_owned())
}

#[derive(serde::Deserialize)]
pub(super) struct NextQuery {
    next: Option<String>,
    /// Set when a fresh sign-in is required (`max_auth_age_secs`): the form
    /// is shown even to someone signed in.
    reauth: Option<i64>,
}

/// The login page: the local form and a link per identity provider.
fn login_page<'a>(
    state: &CsState,
    next: &'a str,
    csrf: &'a str,
    error: Option<&'a str>,
    username: &'a str,
    reauth: Option<i64>,
) -> LoginPage<'a> {
    LoginPage {
        next,
        csrf,
        error,
        username,
        providers: state
            .providers
            .names()
            .into_iter()
            .map(|name| ProviderLink {
                name: name.to_owned(),
                href: super::oidc::start_href(name, next, reauth),
            })
            .collect(),
        notice: None,
        end_session: None,
    }
}

pub(super) async fn login_form(
    state: web::Data<CsState>,
    req: HttpRequest,
    visitor: Visitor,
    q: web::Query<NextQuery>,
) -> Page {
    let next = safe_next(q.next.as_deref());
    if visitor.signed_in() && q.reauth.is_none() {
        return Ok(see_other(&next));
    }
    // Before login nothing is stored: the cookie holds a random value the
    // form's CSRF token is bound to (a double-submit token under our HMAC).
    let (id, fresh) = match super::extract::pre_login_id(&req) {
        Some(id) => (id, false),
        None => (crate::sign::b64::encode(rand::random::<[u8; 32]>()), true),
    };
    let notice = q.reauth.map(|age| {
        format!(
            "This request needs a sign-in from the last {}: please sign in again.",
            super::pages::duration_words(age)
        )
    });
    let csrf = state.sessions.csrf_token(&id);
    let page = LoginPage {
        notice,
        ..login_page(&state, &next, &csrf, None, "", q.reauth)
    };
    let mut res = html(StatusCode::OK, render(&page)?);
    if fresh {
        set_cookie(&mut res, &session_cookie(&state, &id))?;
    }
    Ok(res)
}

#[derive(serde::Deserialize)]
pub(super) struct LoginForm {
    username: Option<String>,
    password: Option<String>,
    csrf: Option<String>,
    next: Option<String>,
}

pub(super) async fn login(
    state: web::Data<CsState>,
    req: HttpRequest,
    visitor: Visitor,
    form: web::Form<LoginForm>,
) -> Page {
    let form = form.into_inner();
    let next = safe_next(form.next.as_deref());
    let Some(old_id) = super::extract::pre_login_id(&req) else {
        // No cookie: the form did not come from our login page.
        return Err(CsError::Csrf.into());
    };
    check_csrf(&state, &old_id, form.csrf.as_deref())?;
    let username = form.username.unwrap_or_default().trim().to_owned();
    let password = form.password.unwrap_or_default();
    let t = state.cs.now().timestamp();
    let ip = crate::confirm::api::client_address(&req, &state.api.trusted_proxies);
    // A name no account can have is refused without hashing and without a
    // limiter key of its own (the address still counts it).
    if crate::confirm::auth::check_username(&username).is_err() {
        state
            .limiter
            .fail(&LimitKey::Address(ip.clone()), t)
            .map_err(CsError::from)?;
        let csrf = state.sessions.csrf_token(&old_id);
        let page = login_page(
            &state,
            &next,
            &csrf,
            Some("The user name or password is wrong."),
            "",
            None,
        );
        return Ok(html(StatusCode::UNAUTHORIZED, render(&page)?));
    }
    let keys = [
        LimitKey::AccountAt {
            account: username.clone(),
            address: ip.clone(),
        },
        LimitKey::Address(ip.clone()),
        LimitKey::Account(username.clone()),
    ];
    let login = state.login.clone();
    let (u, p) = (username.clone(), password);
    let checked = state
        .limiter
        .guarded(&keys, &ip, Budget::People, t, move || {
            login.check_password(&u, &p)
        })
        .await?;
    let Some(account) = checked else {
        log::info!(
            "failed login for {}",
            crate::text::keyed_digest(&state.log_key, &username)
        );
        let csrf = state.sessions.csrf_token(&old_id);
        let page = login_page(
            &state,
            &next,
            &csrf,
            Some("The user name or password is wrong."),
            &username,
            None,
        );
        return Ok(html(StatusCode::UNAUTHORIZED, render(&page)?));
    };
    // A new session id at login (no session fixation).
    state.sessions.remove(&old_id)?;
    if let Some((stored, _)) = visitor.0 {
        state.sessions.remove(&stored)?;
    }
    let id = state
        .sessions
        .create(Some(identity_of(&account, "pwd", t)), t)?;
    let mut res = see_other(&after_sign_in(&state, Some(&old_id), &next));
    set_cookie(&mut res, &session_cookie(&state, &id))?;
    Ok(res)
}

#[derive(serde::Deserialize)]
pub(super) struct CsrfForm {
    csrf: Option<String>,
}

pub(super) async fn logout(
    state: web::Data<CsState>,
    visitor: Visitor,
    form: web::Form<CsrfForm>,
) -> Page {
    let mut end_session = None;
    if let Some((id, session)) = visitor.0 {
        check_csrf(&state, &id, form.csrf.as_deref())?;
        state.sessions.remove(&id)?;
        if let Some(who) = session.identity.filter(|w| w.provider.is_some()) {
            let back = format!("{}/login", state.cs.cs_origin());
            if let Some(href) = state.providers.end_session_url(&who, &back).await {
                end_session = Some(ProviderLink {
                    name: who.provider.clone().unwrap_or_default(),
                    href,
                });
            }
        }
    }
    match end_session {
        // The provider's end-session endpoint is offered as a link: a form
        // may only lead to this origin (CSP form-action), and the person
        // may want to stay signed in there. The page is also the login page,
        // so its form gets a pre-login cookie value and CSRF token, as the
        // login form does.
        Some(link) => {
            let pre_login = crate::sign::b64::encode(rand::random::<[u8; 32]>());
            let csrf = state.sessions.csrf_token(&pre_login);
            let page = LoginPage {
                notice: Some("You are signed out of the confirmation service.".into()),
                end_session: Some(link),
                ..login_page(&state, "/history", &csrf, None, "", None)
            };
            let mut res = html(StatusCode::OK, render(&page)?);
            set_cookie(&mut res, &session_cookie(&state, &pre_login))?;
            Ok(res)
        }
        None => {
            let mut res = see_other("/login");
            set_cookie(
                &mut res,
                &removal(
                    super::session_cookie_name(state.secure_cookies),
                    state.secure_cookies,
                ),
            )?;
            Ok(res)
        }
    }
}

pub(super) async fn confirmation(
    state: web::Data<CsState>,
    me: SignedIn,
    id: web::Path<String>,
) -> Page {
    let loaded = match state.cs.load(&id, &me.who).await {
        Err(CsError::Reauthenticate { max_age_secs }) => {
            return Ok(reauthenticate(&me, &format!("/c/{id}"), max_age_secs))
        }
        other => other?,
    };
    match loaded {
        Loaded::Decided(r) => outcome(&state, &me, &r, true),
        Loaded::Open(open) => confirm_page(
            &state,
            &me,
            &open,
            StatusCode::OK,
            &InputProblems::default(),
            &IndexMap::new(),
        ),
    }
}

/// The decision form: `csrf`, `decision`, `view` (the digest of what was
/// shown), `input:<index>` per value typed, `acknowledge_warnings`.
pub(super) struct DecisionForm {
    pub(super) fields: Vec<(String, String)>,
}

impl DecisionForm {
    pub(super) fn parse(body: &[u8]) -> Result<Self, CsError> {
        if body.len() > MAX_FORM {
            return Err(CsError::PayloadTooLarge);
        }
        let fields = serde_urlencoded::from_bytes(body)
            .map_err(|e| CsError::BadRequest(BadRequest::Form(e.to_string())))?;
        Ok(DecisionForm { fields })
    }

    pub(super) fn field(&self, k: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }

    /// The decision the form asks for; with the fields of a passkey
    /// assertion (`passkey_*`, base64url) when the page's script got one.
    pub(super) fn request(&self) -> Result<DecisionRequest, CsError> {
        let decision = self
            .field("decision")
            .and_then(Decision::parse)
            .ok_or(CsError::BadRequest(BadRequest::Decision))?;
        let bytes = |name: &'static str| {
            self.field(name)
                .and_then(crate::sign::b64::decode)
                .ok_or(CsError::BadRequest(BadRequest::MissingField(name)))
        };
        let passkey = match self.field("passkey_id").filter(|v| !v.is_empty()) {
            None => None,
            Some(id) => Some(crate::confirm::passkeys::AssertionAnswer {
                id: id.to_owned(),
                client_data: bytes("passkey_client_data")?,
                authenticator_data: bytes("passkey_authenticator_data")?,
                signature: bytes("passkey_signature")?,
            }),
        };
        Ok(DecisionRequest {
            decision,
            channel: Channel::Html,
            view_digest: Some(self.field("view").unwrap_or_default().to_owned()),
            collected: Collected::ByIndex(self.inputs()),
            warnings_acknowledged: self.field("acknowledge_warnings") == Some("yes"),
            passkey,
        })
    }

    fn inputs(&self) -> Vec<(usize, String)> {
        self.fields
            .iter()
            .filter_map(|(k, v)| {
                let i = k.strip_prefix("input:")?.parse().ok()?;
                Some((i, v.clone()))
            })
            .collect()
    }
}

pub(super) async fn decide(
    state: web::Data<CsState>,
    me: SignedIn,
    id: web::Path<String>,
    body: web::Bytes,
) -> Page {
    let form = DecisionForm::parse(&body)?;
    check_csrf(&state, &me.session_id, form.field("csrf"))?;
    let request = form.request()?;
    let typed = form.inputs();
    match state.cs.decide(&id, &me.who, request).await {
        Ok(d) => outcome(&state, &me, &d.record, d.earlier),
        Err(DecideError::Other(CsError::Reauthenticate { max_age_secs })) => {
            Ok(reauthenticate(&me, &format!("/c/{id}"), max_age_secs))
        }
        Err(DecideError::Other(e)) => Err(e.into()),
        Err(DecideError::Input { problems, open }) => {
            // The page again, with the problems next to their fields; typed
            // values are shown again, except sensitive ones.
            let entered: IndexMap<String, String> = typed
                .into_iter()
                .filter_map(|(i, v)| {
                    let p = open.view.parameters.get(i)?;
                    let sensitive = p.input.as_ref().is_some_and(|x| x.sensitive);
                    (!sensitive).then(|| (p.raw_name.clone(), v))
                })
                .collect();
            confirm_page(
                &state,
                &me,
                &open,
                StatusCode::UNPROCESSABLE_ENTITY,
                &problems,
                &entered,
            )
        }
    }
}

/// Sends a user whose sign-in is too old to sign in again, the way they
/// signed in (their identity provider, asked for a fresh authentication, or
/// the local form), and back to `next`.
fn reauthenticate(me: &SignedIn, next: &str, max_age_secs: i64) -> HttpResponse {
    match &me.who.provider {
        Some(name) => see_other(&super::oidc::start_href(name, next, Some(max_age_secs))),
        None => {
            let q = serde_urlencoded::to_string([
                ("next", next.to_owned()),
                ("reauth", max_age_secs.to_string()),
            ])
            .unwrap_or_default();
            see_other(&format!("/login?{q}"))
        }
    }
}

pub(super) async fn history(state: web::Data<CsState>, me: SignedIn) -> Page {
    let st = state.clone();
    let who = me.who.clone();
    let rows = web::block(move || st.cs.history_logged(&who))
        .await
        .map_err(|_| CsError::Internal(crate::confirm::flow::Internal::Task("history")))??
        .into_iter()
        .map(|(r, logged)| HistoryRow::of(r, logged))
        .collect();
    let page = HistoryPage {
        user: &me.who.display_name(),
        csrf: state.sessions.csrf_token(&me.session_id),
        rows,
        kept_days: state.cs.history_days(),
    };
    Ok(html(StatusCode::OK, render(&page)?))
}

pub(super) async fn evidence(
    state: web::Data<CsState>,
    me: SignedIn,
    id: web::Path<String>,
) -> Page {
    let evidence = state.cs.evidence(&id, &me.who)?;
    // The file name is ASCII letters, digits, `_`, `-` and `.` only
    // (`evidence_filename`): nothing in it needs quoting or encoding. The
    // signed CHEQ and redacted evidence are both JWS General JSON.
    Ok(HttpResponse::Ok()
        .content_type("application/jose+json")
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{}\"", evidence.filename),
        ))
        .body(evidence.body))
}

pub(super) async fn jwks(state: web::Data<CsState>) -> HttpResponse {
    crate::httpkit::jwks_response(&state.cs.jwks())
}

pub(super) async fn style() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "max-age=3600"))
        .body(include_str!("../../../templates/style.css"))
}
