//! The transparency log over HTTP (PROTOCOL.md §15): the C2SP `tlog-tiles`
//! resources under `<public_url>/log/`, the note key, and a user's proof
//! that a decision of theirs is in the log.
//!
//! | route | what | caching |
//! |---|---|---|
//! | `GET <log>/checkpoint` | the signed checkpoint (`text/plain; charset=utf-8`) | `no-store`: it moves |
//! | `GET <log>/key` | the note key's verifier key (signed-note text form) | an hour |
//! | `GET <log>/tile/<L>/<N>[.p/<W>]` | hash tiles | immutable |
//! | `GET <log>/tile/entries/<N>[.p/<W>]` | entry bundles | immutable |
//! | `GET /history/{id}/inclusion.json` | the inclusion proof of one of the user's decisions | private |
//!
//! A tile the tree does not hold yet is `404`, never a shorter one.

use super::{CsState, SignedIn, WebError};
use crate::confirm::flow::CsError;
use crate::confirm::transparency::TransparencyLog;
use crate::httpkit::JsonError;
use crate::tlog::tiles::TilePath;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpResponse};
use std::sync::Arc;

/// Where the log's resources are served: `<start path>/log`.
pub fn log_path(start_path: &str) -> String {
    match start_path.trim_end_matches('/') {
        "" => "/log".to_owned(),
        p => format!("{p}/log"),
    }
}

/// Mounts the log's resources.
pub(super) fn configure(cfg: &mut web::ServiceConfig, start_path: &str) {
    let at = log_path(start_path);
    cfg.service(web::resource(format!("{at}/checkpoint")).route(web::get().to(checkpoint)))
        .service(web::resource(format!("{at}/key")).route(web::get().to(key)))
        .service(web::resource(format!("{at}/tile/{{path:.*}}")).route(web::get().to(tile)))
        .service(web::resource("/history/{id}/inclusion.json").route(web::get().to(inclusion)));
}

fn the_log(state: &CsState) -> Result<Arc<TransparencyLog>, JsonError> {
    state.cs.transparency().cloned().ok_or_else(|| {
        JsonError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this service publishes no transparency log",
        )
    })
}

fn unavailable(e: impl std::fmt::Display) -> JsonError {
    log::error!("transparency log: {e}");
    JsonError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "the log cannot be read right now; try again",
    )
}

async fn checkpoint(state: web::Data<CsState>) -> Result<HttpResponse, JsonError> {
    let log = the_log(&state)?;
    let head = web::block(move || log.checkpoint())
        .await
        .map_err(unavailable)?
        .map_err(unavailable)?
        .ok_or_else(|| unavailable("the log has no checkpoint yet"))?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(head.checkpoint))
}

async fn key(state: web::Data<CsState>) -> Result<HttpResponse, JsonError> {
    let log = the_log(&state)?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .body(format!("{}\n", log.verifier_key())))
}

async fn tile(
    state: web::Data<CsState>,
    path: web::Path<String>,
) -> Result<HttpResponse, JsonError> {
    let log = the_log(&state)?;
    let not_found = || JsonError::new(StatusCode::NOT_FOUND, "not_found", "no such tile");
    let tile = TilePath::parse(&format!("tile/{path}")).map_err(|_| not_found())?;
    let bytes = web::block(move || log.tile(&tile))
        .await
        .map_err(unavailable)?
        .map_err(unavailable)?
        .ok_or_else(not_found)?;
    Ok(HttpResponse::Ok()
        .content_type("application/octet-stream")
        .insert_header((header::CACHE_CONTROL, "public, max-age=31536000, immutable"))
        .body(bytes))
}

async fn inclusion(
    state: web::Data<CsState>,
    me: SignedIn,
    id: web::Path<String>,
) -> Result<HttpResponse, WebError> {
    let st = state.clone();
    let proof = web::block(move || st.cs.inclusion(&id, &me.who))
        .await
        .map_err(|_| CsError::Internal(crate::confirm::flow::Internal::Task("log")))??;
    let Some(proof) = proof else {
        return Err(CsError::NotFound.into());
    };
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "private, no-store"))
        .insert_header((
            header::CONTENT_DISPOSITION,
            "attachment; filename=\"cheq-inclusion.json\"",
        ))
        .json(proof))
}
