//! Calling a tool (A2T draft §7) for a user, under their rules and at
//! their CS (PROTOCOL.md §1, §17): the one path the A2T route and the
//! settings page share.
//!
//! The rule in force for the user ([`Users::in_force`](super::settings::Users::in_force))
//! says whether the call needs confirmation and what assurance; the CHEQ
//! names the CS the user chose. A change of the user's CS or rules is always
//! confirmed, at the CS they have now, and checked before anything is
//! minted ([`super::settings`]).

use super::caller::{Agent, Caller};
use super::cheq_rs::Minted;
use super::error::{ApiError, CheqRsError, ToolError};
use super::server::{blocking, read_body, RsState};
use super::settings::{self, ChangeError};
use super::tools::{self, Tool};
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpResponse};
use indexmap::IndexMap;
use serde_json::Value;
use sha2::Digest;

/// What a call came to.
pub(super) enum Called {
    /// It needed no confirmation and ran: its result.
    Done(Value),
    /// It waits for its user's confirmation.
    Pending(Box<Minted>),
}

/// `POST /tools/{id}:invoke`.
pub(super) async fn invoke_tool(
    state: web::Data<RsState>,
    Caller(who, _): Caller<Agent>,
    tail: web::Path<String>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(body).await?;
    let tail = tail.into_inner();
    let Some(id) = tail.strip_suffix(":invoke") else {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request",
            "POST /tools/{toolId}:invoke to invoke a tool",
        ));
    };
    let tool =
        tools::find(&state.catalogue, id).ok_or_else(|| ToolError::UnknownTool(id.into()))?;
    let invocation: Value = serde_json::from_slice(&body)
        .map_err(|e| ToolError::BadRequest(format!("the body is not JSON: {e}")))?;
    let inputs = tool.parse_invocation(&invocation)?;
    let subject = who.subject.unwrap_or_default();
    match call(&state, &tool, inputs, &subject).await? {
        Called::Done(result) => Ok(HttpResponse::Ok().json(result)),
        Called::Pending(minted) => {
            // The resource and result URIs are capabilities: never logged.
            log::info!(
                "{} {} needs confirmation (#{})",
                crate::text::one_line(&who.client_id),
                tool.name,
                crate::sign::b64::encode(&sha2::Sha256::digest(minted.id.as_bytes())[..6])
            );
            Ok(HttpResponse::Accepted()
                .insert_header((header::LOCATION, minted.pack.result_uri.as_str()))
                .insert_header((header::CACHE_CONTROL, "no-store"))
                .json(&minted.pack))
        }
    }
}

/// Calls `tool` with `inputs` for `subject`.
pub(super) async fn call(
    state: &RsState,
    tool: &Tool,
    inputs: IndexMap<String, Value>,
    subject: &str,
) -> Result<Called, ApiError> {
    let users = state.users.clone();
    let who = subject.to_owned();
    let choice = blocking(move || users.of(&who).map_err(CheqRsError::from)).await?;
    let request = if settings::is_settings_tool(tool.name) {
        let hosts = state.cheq.hosts();
        let change = if tool.name == settings::CHOOSE {
            let origin = inputs
                .get("confirmation_server")
                .and_then(Value::as_str)
                .unwrap_or("");
            let current = choice
                .cs
                .clone()
                .unwrap_or_else(|| hosts.default_cs().origin());
            let to = hosts.prepare(origin).await.map_err(ChangeError::from)?;
            state.users.move_to(subject, &choice, &current, &to)?
        } else {
            let lacks = hosts.lacks_passkeys(choice.cs.as_deref());
            state.users.rule_change(subject, &choice, &inputs, lacks)?
        };
        change.mint_request(state.cheq.base_url(), tool.tool_id, subject, state.cheq_ttl)
    } else {
        match state.users.in_force(&choice, tool.name) {
            Some(rule) if rule.needs_confirmation(&inputs) => {
                let mut request = tools::cheq_request(
                    state.cheq.base_url(),
                    tool,
                    &inputs,
                    subject,
                    state.cheq_ttl,
                    rule.needs,
                );
                request.confirmation_server = choice.cs.clone();
                request
            }
            _ => {
                let tools = state.tools.clone();
                let tool = tool.clone();
                let result = web::block(move || tools.run_now(&tool, &inputs))
                    .await
                    .map_err(|_| ToolError::Failed("the worker failed".into()))??;
                return Ok(Called::Done(result));
            }
        }
    };
    state
        .cheq
        .ready_cs(request.confirmation_server.as_deref())
        .await?;
    let minted = state.cheq.mint_async(request).await?;
    Ok(Called::Pending(Box::new(minted)))
}
