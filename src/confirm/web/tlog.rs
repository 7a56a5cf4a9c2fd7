//! The transparency log over HTTP (PROTOCOL.md §15): the C2SP `tlog-tiles`
//! resources under `<public_url>/log/`, the note key, and a user's proof
//! that a decision of theirs is in the log.
//!
//! | route | what | caching |
//! |---|---|---|
//! | `GET <log>/checkpoint` | the signed checkpoint (`text/plain; charset=utf-8`) | `no-store`: it moves |
//! | `GET <log>/key` | the note key's verifier key (signed-note text form) | an hour |
//! | `GET <log>/tile/<L>/<N>[.p/<W>]` | hash tiles | immutable |
//! | `GET <log>/tile/entries/<N>[.p/<W>]` | entry bundles, gzip-compressed for a client that accepts it | immutable |
//! | `GET /history/{id}/inclusion.json` | the inclusion proof of one of the user's decisions | private |
//!
//! A tile the tree does not hold yet is `404`, never a shorter one. Entry
//! bundles are compressed at the HTTP layer, as C2SP `tlog-tiles` asks,
//! when the request's `Accept-Encoding` takes gzip (`Vary` says so to
//! caches); hash tiles are hashes, which do not compress.

use super::{CsState, SignedIn, WebError};
use crate::confirm::flow::CsError;
use crate::confirm::transparency::TransparencyLog;
use crate::httpkit::JsonError;
use crate::tlog::tiles::TilePath;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use std::io::Write as _;
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
    req: HttpRequest,
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
    let mut res = HttpResponse::Ok();
    res.content_type("application/octet-stream")
        .insert_header((header::CACHE_CONTROL, "public, max-age=31536000, immutable"));
    if tile.level.is_some() {
        return Ok(res.body(bytes));
    }
    res.insert_header((header::VARY, "Accept-Encoding"));
    if !accepts_gzip(&req) {
        return Ok(res.body(bytes));
    }
    let gzipped = web::block(move || gzip(&bytes))
        .await
        .map_err(unavailable)?
        .map_err(unavailable)?;
    Ok(res
        .insert_header((header::CONTENT_ENCODING, "gzip"))
        .body(gzipped))
}

/// Whether the request's `Accept-Encoding` takes gzip (RFC 9110 §12.5.3:
/// gzip named with a weight above zero, or else `*` so).
fn accepts_gzip(req: &HttpRequest) -> bool {
    let mut named = None;
    let mut any = None;
    for coding in req
        .headers()
        .get_all(header::ACCEPT_ENCODING)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
    {
        let mut parts = coding.split(';').map(str::trim);
        let name = parts.next().unwrap_or_default();
        let taken = !parts.any(|p| {
            p.strip_prefix("q=")
                .or_else(|| p.strip_prefix("Q="))
                .and_then(|q| q.parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        if name.eq_ignore_ascii_case("gzip") {
            named = Some(taken);
        } else if name == "*" {
            any = Some(taken);
        }
    }
    named.or(any).unwrap_or(false)
}

fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes)?;
    enc.finish()
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

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn with(value: &str) -> bool {
        accepts_gzip(
            &TestRequest::default()
                .insert_header((header::ACCEPT_ENCODING, value))
                .to_http_request(),
        )
    }

    #[test]
    fn gzip_is_sent_only_where_it_is_accepted() {
        assert!(with("gzip"));
        assert!(with("identity, GZIP;q=0.5"));
        assert!(with("*"));
        assert!(!with("identity"));
        assert!(!with("gzip;q=0"));
        assert!(!with("br, gzip; q=0.0"));
        assert!(!with("x-gzip-like"));
        assert!(!with("gzip;q=0, *"));
        assert!(!accepts_gzip(&TestRequest::default().to_http_request()));
    }
}
