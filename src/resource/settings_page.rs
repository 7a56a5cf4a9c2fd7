//! The RS's settings page (PROTOCOL.md §17): `GET /settings`, a form that
//! starts `choose_confirmation_server` or `set_confirmation_policy` for the
//! user it names, and sends the browser on to that user's CS to confirm
//! the change, like any other CHEQ (`303` to the start link).
//!
//! The page shows no one's settings: only the operator's floors, which are
//! the same for everyone. Anyone may start a change for any name (it does
//! nothing until that user accepts it at their CS), so starts are counted
//! per address ([`Starts`]) and refused past [`STARTS_PER_MINUTE`].

use super::error::ApiError;
use super::invoke::{call, Called};
use super::server::RsState;
use super::settings::{CHOOSE, SET_POLICY};
use super::tools;
use crate::time::Clock;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use askama::Template;
use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Changes one address may start in a minute.
pub const STARTS_PER_MINUTE: u32 = 10;
/// Addresses counted at most (the oldest minute is forgotten beyond).
const MAX_ADDRESSES: usize = 100_000;
/// The longest user name taken.
const MAX_NAME: usize = 128;

/// Starts of changes per address, in the current minute.
pub struct Starts {
    clock: Arc<dyn Clock>,
    counts: Mutex<HashMap<String, (i64, u32)>>,
}

impl std::fmt::Debug for Starts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Starts").finish_non_exhaustive()
    }
}

impl Starts {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Starts {
            clock,
            counts: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a start from `address`: `false` past the limit.
    fn take(&self, address: &str) -> bool {
        let minute = self.clock.now().timestamp() / 60;
        let mut counts = match self.counts.lock() {
            Ok(g) => g,
            Err(e) => e.into_inner(),
        };
        if counts.len() >= MAX_ADDRESSES {
            counts.retain(|_, (m, _)| *m == minute);
        }
        let entry = counts.entry(address.to_owned()).or_insert((minute, 0));
        if entry.0 != minute {
            *entry = (minute, 0);
        }
        entry.1 += 1;
        entry.1 <= STARTS_PER_MINUTE
    }
}

/// Registers the page's routes.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/settings").route(web::get().to(page)))
        .service(web::resource("/settings/server").route(web::post().to(move_to)))
        .service(web::resource("/settings/rules").route(web::post().to(set_rule)));
}

/// A tool of the rules form, with its floor.
struct ToolFloor {
    name: &'static str,
    floor: String,
}

#[derive(Template)]
#[template(path = "rs_settings.html")]
struct SettingsPage<'a> {
    title: &'a str,
    site: &'a str,
    problem: Option<String>,
    tools: Vec<ToolFloor>,
}

fn html(status: StatusCode, page: SettingsPage<'_>) -> HttpResponse {
    match page.render() {
        Ok(body) => HttpResponse::build(status)
            .insert_header((header::CONTENT_TYPE, "text/html; charset=utf-8"))
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .insert_header((
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
            ))
            .insert_header((header::X_FRAME_OPTIONS, "DENY"))
            .body(body),
        Err(_) => HttpResponse::InternalServerError().finish(),
    }
}

fn settings_page(state: &RsState, problem: Option<(StatusCode, String)>) -> HttpResponse {
    let tools = state
        .catalogue
        .iter()
        .filter(|t| !t.fixed_confirmation)
        .map(|t| ToolFloor {
            name: t.name,
            floor: state
                .users
                .floors()
                .floor(t.name)
                .map_or_else(|| "never".to_owned(), ToString::to_string),
        })
        .collect();
    let (status, title, problem) = match problem {
        Some((status, message)) => (status, "That change cannot be asked for", Some(message)),
        None => (StatusCode::OK, "Confirmation settings", None),
    };
    html(
        status,
        SettingsPage {
            title,
            site: &state.resource_document.name,
            problem,
            tools,
        },
    )
}

/// `GET /settings`.
async fn page(state: web::Data<RsState>) -> HttpResponse {
    settings_page(&state, None)
}

#[derive(Debug, Deserialize)]
struct MoveForm {
    name: String,
    confirmation_server: String,
}

#[derive(Debug, Deserialize)]
struct RuleForm {
    name: String,
    tool: String,
    above: String,
    #[serde(default)]
    assurance: String,
}

/// `POST /settings/server`.
async fn move_to(
    state: web::Data<RsState>,
    req: HttpRequest,
    form: Result<web::Form<MoveForm>, actix_web::Error>,
) -> HttpResponse {
    let Ok(form) = form else {
        return bad_form(&state);
    };
    let inputs = [(
        "confirmation_server".to_owned(),
        Value::from(form.confirmation_server.trim()),
    )];
    start(
        &state,
        &req,
        CHOOSE,
        &form.name,
        inputs.into_iter().collect(),
    )
    .await
}

/// `POST /settings/rules`.
async fn set_rule(
    state: web::Data<RsState>,
    req: HttpRequest,
    form: Result<web::Form<RuleForm>, actix_web::Error>,
) -> HttpResponse {
    let Ok(form) = form else {
        return bad_form(&state);
    };
    let mut inputs: IndexMap<String, Value> = IndexMap::new();
    inputs.insert("tool".into(), Value::from(form.tool.trim()));
    inputs.insert("above".into(), Value::from(form.above.trim()));
    if !form.assurance.is_empty() {
        inputs.insert("assurance".into(), Value::from(form.assurance.trim()));
    }
    start(&state, &req, SET_POLICY, &form.name, inputs).await
}

fn bad_form(state: &RsState) -> HttpResponse {
    settings_page(
        state,
        Some((
            StatusCode::BAD_REQUEST,
            "The form was not filled in: every field is needed.".into(),
        )),
    )
}

/// Starts `tool` for the user `name` and sends the browser to their CS.
async fn start(
    state: &RsState,
    req: &HttpRequest,
    tool: &str,
    name: &str,
    inputs: IndexMap<String, Value>,
) -> HttpResponse {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        return settings_page(
            state,
            Some((
                StatusCode::BAD_REQUEST,
                format!("A user name is 1 to {MAX_NAME} characters."),
            )),
        );
    }
    let address = req
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    if !state.page_starts.take(&address) {
        return settings_page(
            state,
            Some((
                StatusCode::TOO_MANY_REQUESTS,
                format!("At most {STARTS_PER_MINUTE} changes a minute can be asked for from one address; try again in a minute."),
            )),
        );
    }
    let Some(tool) = tools::find(&state.catalogue, tool) else {
        return HttpResponse::NotFound().finish();
    };
    let asked = async {
        // The same checks as a call through the tool API.
        let invocation = serde_json::json!({
            "input_parameters": inputs
                .iter()
                .map(|(k, v)| serde_json::json!({"name": k, "value": v}))
                .collect::<Vec<_>>()
        });
        let inputs = tool.parse_invocation(&invocation).map_err(ApiError::from)?;
        call(state, &tool, inputs, name).await
    };
    match asked.await {
        Ok(Called::Pending(minted)) => {
            let link = cheq_resource::agent::start_link(
                &minted.pack.confirmation_uri,
                &minted.pack.resource_uri,
            );
            HttpResponse::SeeOther()
                .insert_header((header::LOCATION, link))
                .insert_header((header::CACHE_CONTROL, "no-store"))
                .finish()
        }
        // The change tools are always confirmed.
        Ok(Called::Done(_)) => settings_page(
            state,
            Some((
                StatusCode::INTERNAL_SERVER_ERROR,
                "The change was not held for confirmation.".into(),
            )),
        ),
        Err(e) => settings_page(state, Some((e.status, e.description.clone()))),
    }
}
