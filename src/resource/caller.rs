//! Who calls a route of the RS (PROTOCOL.md §3, §6; A2T): the caller as an
//! extractor, its bearer token checked for the route's role before the
//! handler runs.

use super::config::ClientRole;
use super::error::ApiError;
use super::oauth::TokenInfo;
use super::server::RsState;
use crate::httpkit::authorization;
use actix_web::http::StatusCode;
use actix_web::{web, FromRequest, HttpRequest};
use std::marker::PhantomData;

/// Who may call a route: the role its bearer token must be issued for.
pub trait Role {
    const ROLE: ClientRole;
}

/// The routes of agents (A2T).
pub enum Agent {}

impl Role for Agent {
    const ROLE: ClientRole = ClientRole::Agent;
}

/// The routes of the CS (§3, §6).
pub enum Cs {}

impl Role for Cs {
    const ROLE: ClientRole = ClientRole::Cs;
}

/// The caller of a route for `R`, its bearer token checked before the
/// handler runs: a request without a valid token for that role never
/// reaches it.
pub struct Caller<R>(pub TokenInfo, pub PhantomData<R>);

impl<R: Role> FromRequest for Caller<R> {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        std::future::ready(match req.app_data::<web::Data<RsState>>() {
            Some(state) => state
                .tokens
                .check(authorization(req), R::ROLE)
                .map(|who| Caller(who, PhantomData))
                .map_err(ApiError::from),
            None => Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "the server's state is missing",
            )),
        })
    }
}
