//! The browser front end of the confirmation server (PROTOCOL.md §2–§6): the
//! routes, the security headers every page carries, and the one mapping of
//! errors to pages ([`WebError`]). Handlers are thin: parse, call the flow
//! ([`crate::confirm::flow`]), render ([`pages`]).
//!
//! | route | what |
//! |---|---|
//! | `GET <start path>` | a form to paste a resource URI |
//! | `POST <start path>` | §2: `resource_uri` → 303 to the confirmation page (through login) |
//! | `GET /login`, `POST /login`, `POST /logout` | the embedded login |
//! | `GET /oidc/login/{name}`, `GET /oidc/callback` | sign-in with an identity provider ([`oidc`]) |
//! | `GET /c/{id}` | the confirmation page (§3, §5) |
//! | `POST /c/{id}` | the decision (§5, §6) |
//! | `GET /history`, `GET /history/{id}.json` | past decisions and their signed CHEQs |
//! | `GET /account`, `/account/passkeys/…`, `/login/passkey/…` | passkeys ([`passkeys`]) |
//! | `GET <start path>/log/…`, `GET /history/{id}/inclusion.json` | the transparency log ([`tlog`]) |
//! | `GET /.well-known/cheq-configuration` | the discovery document (§16.1) |
//! | `GET /.well-known/jwks.json`, `GET /healthz`, `GET /static/style.css` | |

pub mod extract;
mod handlers;
pub mod oidc;
pub mod pages;
mod passkeys;
pub mod tlog;

pub use extract::{SignedIn, Visitor};

use crate::confirm::auth::{Limiter, LocalLogin, SessionService};
use crate::confirm::flow::{Cs, CsError};
use crate::store::cs::Accounts;
use actix_web::cookie::{Cookie, SameSite};
use actix_web::http::{header, StatusCode};
use actix_web::middleware::DefaultHeaders;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use std::sync::Arc;

/// The session cookie's name over plain http (loopback only, §1).
pub const SESSION_COOKIE: &str = "cheq_session";
/// The session cookie's name over https: the `__Host-` prefix makes the
/// browser keep it only if it is Secure, for this host alone and path `/`,
/// so that no sibling domain can plant or shadow it.
pub const SECURE_SESSION_COOKIE: &str = "__Host-cheq_session";

/// The session cookie's name for a CS served over https or not.
pub fn session_cookie_name(secure: bool) -> &'static str {
    if secure {
        SECURE_SESSION_COOKIE
    } else {
        SESSION_COOKIE
    }
}
/// Largest form body read.
pub const MAX_FORM: usize = 64 * 1024;

/// The Content-Security-Policy of every response: scripts and styles from
/// this origin only (one script, for passkeys; no inline code), requests
/// only here, forms post only here, never framed.
pub const CSP: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Everything the handlers share.
pub struct CsState {
    /// Where the state lives (sled or PostgreSQL).
    pub backend: crate::store::Backend,
    pub cs: Arc<Cs>,
    pub accounts: Arc<dyn Accounts>,
    pub login: LocalLogin,
    pub sessions: SessionService,
    pub limiter: Limiter,
    pub start_path: String,
    /// The OpenID Connect providers people may sign in with.
    pub providers: Arc<crate::confirm::oidc::Providers>,
    pub secure_cookies: bool,
    /// The key of the digests that stand for typed names in log lines.
    pub log_key: Vec<u8>,
    /// The raw API (§10), sharing `cs`.
    pub api: web::Data<crate::confirm::api::Api>,
    /// The token `GET /metrics` asks for, when one is configured.
    pub metrics_token: Option<crate::httpkit::MetricsToken>,
    /// Passkey ceremonies (adding one, signing in with one).
    pub ceremonies: crate::confirm::passkeys::Ceremonies,
    /// The discovery document (§16.1), its JSON text.
    pub discovery: Arc<String>,
}

impl std::fmt::Debug for CsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsState").finish_non_exhaustive()
    }
}

/// Why a page could not be shown: a flow error (an error page, its status
/// from [`crate::confirm::status`]), or a visitor who must sign in first.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("{0}")]
    Cs(#[from] CsError),
    #[error("sign in first")]
    SignIn { next: String },
    #[error("{0}")]
    Login(#[from] oidc::LoginFailure),
}

impl From<crate::confirm::auth::AuthError> for WebError {
    fn from(e: crate::confirm::auth::AuthError) -> Self {
        WebError::Cs(e.into())
    }
}

impl ResponseError for WebError {
    fn status_code(&self) -> StatusCode {
        match self {
            WebError::Cs(e) => crate::confirm::status::of(e).0,
            WebError::SignIn { .. } => StatusCode::SEE_OTHER,
            WebError::Login(f) => f.status_code(),
        }
    }

    fn error_response(&self) -> HttpResponse {
        let e = match self {
            WebError::SignIn { next } => return to_login(next),
            WebError::Login(f) => return f.error_response(),
            WebError::Cs(e) => e,
        };
        let status = self.status_code();
        match e {
            CsError::Internal(detail) => {
                log::error!(
                    "internal error: {}",
                    crate::text::one_line(&detail.to_string())
                );
            }
            CsError::Unavailable(detail) => {
                log::warn!("{}", crate::text::one_line(&detail.to_string()))
            }
            CsError::SigningUnavailable(detail) => {
                log::error!(
                    "cannot sign: {}",
                    crate::text::one_line(&detail.to_string())
                );
            }
            _ => {}
        }
        let mut res = HttpResponse::build(status);
        res.content_type("text/html; charset=utf-8")
            .insert_header((header::CACHE_CONTROL, "no-store"));
        match e {
            CsError::TooManyAttempts { retry_after } | CsError::KeysPending { retry_after, .. } => {
                res.insert_header((header::RETRY_AFTER, retry_after.to_string()));
            }
            CsError::Busy | CsError::Unavailable(_) => {
                res.insert_header((header::RETRY_AFTER, "1"));
            }
            CsError::SigningUnavailable(_) => {
                res.insert_header((
                    header::RETRY_AFTER,
                    crate::confirm::status::SIGNING_RETRY_AFTER.to_string(),
                ));
            }
            _ => {}
        }
        res.body(pages::error_page(e, status.as_u16()))
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
    configure_confirmation(cfg, state);
    cfg.service(resource("/.well-known/jwks.json").route(web::get().to(handlers::jwks)))
        .service(resource("/healthz").route(web::get().to(crate::httpkit::healthz)))
        .service(resource("/readyz").route(web::get().to(readyz)))
        .service(resource("/metrics").route(web::get().to(metrics)))
        .default_service(web::to(not_found));
}

/// The routes of the confirmation itself (start, sign-in, the page, the
/// decision, history, the voice API), without those a server has once
/// (keys, health, metrics, the default answer): a resource server that
/// serves the confirmation itself (§12) adds these to its own.
pub fn configure_confirmation(cfg: &mut web::ServiceConfig, state: web::Data<CsState>) {
    use handlers::*;
    let start = state.start_path.clone();
    crate::confirm::api::configure(cfg, state.api.clone());
    tlog::configure(cfg, &start);
    cfg.app_data(state)
        .app_data(
            web::FormConfig::default()
                .limit(MAX_FORM)
                .error_handler(|e, _| {
                    let err = match e {
                        actix_web::error::UrlencodedError::Overflow { .. } => {
                            CsError::PayloadTooLarge
                        }
                        e => CsError::BadRequest(crate::confirm::flow::BadRequest::Form(
                            e.to_string(),
                        )),
                    };
                    WebError::from(err).into()
                }),
        )
        .app_data(web::QueryConfig::default().error_handler(|e, _| {
            WebError::from(CsError::BadRequest(
                crate::confirm::flow::BadRequest::Query(e.to_string()),
            ))
            .into()
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
        .service(resource(crate::discovery::CS_CONFIGURATION_PATH).route(web::get().to(discovery)))
        .service(resource("/oidc/login/{name}").route(web::get().to(oidc::start)))
        .service(resource("/oidc/callback").route(web::get().to(oidc::callback)))
        .service(
            resource("/c/{id}")
                .route(web::get().to(confirmation))
                .route(web::post().to(decide)),
        )
        .service(resource("/c/{id}/passkey").route(web::post().to(passkeys::decision_passkey)))
        .service(resource("/history").route(web::get().to(history)))
        .service(resource("/history/{id}.json").route(web::get().to(evidence)))
        .service(resource("/static/style.css").route(web::get().to(style)))
        .service(resource("/static/passkey.js").route(web::get().to(passkeys::script)))
        .service(resource("/account").route(web::get().to(passkeys::account)))
        .service(
            resource("/account/passkeys/begin")
                .app_data(json_config())
                .route(web::post().to(passkeys::begin_add)),
        )
        .service(
            resource("/account/passkeys/finish")
                .app_data(json_config())
                .route(web::post().to(passkeys::finish_add)),
        )
        .service(resource("/account/passkeys/remove").route(web::post().to(passkeys::remove)))
        .service(
            resource("/login/passkey/begin")
                .app_data(json_config())
                .route(web::post().to(passkeys::begin_sign_in)),
        )
        .service(
            resource("/login/passkey/finish")
                .app_data(json_config())
                .route(web::post().to(passkeys::finish_sign_in)),
        );
}

/// The passkey routes' JSON bodies: bounded, a JSON error otherwise.
fn json_config() -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(MAX_FORM)
        .error_handler(|e, _| {
            crate::httpkit::JsonError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                e.to_string(),
            )
            .into()
        })
}

/// How long a reader may keep the discovery document (§16.1: at most a
/// day): an hour, so that a change of the configuration reaches readers
/// soon.
pub const DISCOVERY_MAX_AGE_SECS: u32 = 3600;

/// `GET /.well-known/cheq-configuration` (§16.1).
async fn discovery(state: web::Data<CsState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .insert_header((
            header::CACHE_CONTROL,
            format!("public, max-age={DISCOVERY_MAX_AGE_SECS}"),
        ))
        .body(state.discovery.as_str().to_owned())
}

/// `GET /readyz`: 200 only when the store answers.
async fn readyz(state: web::Data<CsState>) -> HttpResponse {
    let readiness = state.cs.readiness();
    crate::httpkit::readyz(move || readiness.ready()).await
}

/// `GET /metrics` (Prometheus text format).
async fn metrics(state: web::Data<CsState>, req: HttpRequest) -> HttpResponse {
    if let Some(refused) = crate::httpkit::metrics_refused(state.metrics_token.as_ref(), &req) {
        return refused;
    }
    crate::httpkit::metrics_response(state.cs.metrics_text())
}

fn resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(|| async {
        Err::<HttpResponse, _>(WebError::from(CsError::MethodNotAllowed))
    }))
}

async fn not_found() -> Result<HttpResponse, WebError> {
    Err(CsError::NotFound.into())
}

fn see_other(location: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .finish()
}

fn to_login(next: &str) -> HttpResponse {
    let q = serde_urlencoded::to_string([("next", next)]).unwrap_or_default();
    see_other(&format!("/login?{q}"))
}

fn session_cookie(state: &CsState, id: &str) -> Cookie<'static> {
    Cookie::build(session_cookie_name(state.secure_cookies), id.to_owned())
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(state.secure_cookies)
        .finish()
}

/// Adds `cookie` to `res` (a cookie that cannot be encoded is the CS's fault).
fn set_cookie(res: &mut HttpResponse, cookie: &Cookie<'_>) -> Result<(), CsError> {
    res.add_cookie(cookie)
        .map_err(|e| CsError::Internal(crate::confirm::flow::Internal::Cookie(e.to_string())))
}

/// A cookie that removes the cookie `name` (path `/`).
fn removal(name: &'static str, secure: bool) -> Cookie<'static> {
    let mut gone = Cookie::build(name, "").path("/").secure(secure).finish();
    gone.make_removal();
    gone
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

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::MessageBody;

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
    fn over_https_the_session_cookie_is_host_bound() {
        assert_eq!(session_cookie_name(false), "cheq_session");
        let name = session_cookie_name(true);
        assert!(name.starts_with("__Host-"));
        let cookie = Cookie::build(name, "v")
            .path("/")
            .http_only(true)
            .same_site(SameSite::Lax)
            .secure(true)
            .finish();
        let text = cookie.to_string();
        // What browsers require of a __Host- cookie.
        assert!(text.contains("Secure") && text.contains("Path=/"), "{text}");
        assert!(!text.contains("Domain"), "{text}");
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

    fn body(e: &WebError) -> (u16, String) {
        let res = e.error_response();
        let status = res.status().as_u16();
        let bytes = res.into_body().try_into_bytes().unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[test]
    fn every_error_has_a_page_a_person_understands() {
        let words = [
            "does not work for that resource server",
            "The field resource_uri is missing",
            "No such confirmation",
            "no longer serves Example Air (https://rs.example)",
            "does not know this request",
            "security token",
            "within the last 5 minutes",
            "signed in as &quot;alice&quot;",
            "could not be reached",
            "Do not act on it",
            "did not answer in time",
            "must be unpadded base64url",
            "expired",
            "already decided",
            "no longer kept",
            "Review it again",
            "8 s",
            "Method not allowed",
            "too large",
            "busy",
            "your account has none",
            "on a page that can ask for it",
            "not one of your account",
            "counter went back",
            "has not read yet",
            "cannot reach its database",
            "cannot sign decisions right now",
            "internal problem",
        ];
        let errors = crate::confirm::status::every_error();
        assert_eq!(errors.len(), words.len());
        for ((e, status), text) in errors.into_iter().zip(words) {
            let (got, html) = body(&WebError::Cs(e.clone()));
            assert_eq!(got, status, "{e:?}");
            assert!(html.contains(text), "{e:?}: {html}");
            assert!(!html.contains("sled exploded"), "internal detail leaked");
            assert!(
                !html.contains("name=\"decision\""),
                "no decision button on an error page"
            );
        }
        let res = WebError::Cs(CsError::TooManyAttempts { retry_after: 8 }).error_response();
        assert_eq!(res.headers().get("retry-after").unwrap(), "8");
        let res = WebError::SignIn {
            next: "/c/x".into(),
        }
        .error_response();
        assert_eq!(res.status(), StatusCode::SEE_OTHER);
        assert_eq!(
            res.headers().get("location").unwrap(),
            "/login?next=%2Fc%2Fx"
        );
    }
}
