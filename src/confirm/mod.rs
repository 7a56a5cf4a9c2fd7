//! The confirmation server (CS): the product's core (PROTOCOL.md §2–§6, §8, §9).
//!
//! - [`config`]: `cheq.toml` and its environment overrides.
//! - [`registry`]: which resource URIs may be fetched at all (§2).
//! - [`fetch`]: the OAuth client and the bounded HTTP client towards an RS (§3, §6).
//! - [`auth`]: local accounts, sessions, CSRF tokens, failed-login limits.
//! - [`view`]: what the user is shown, and the text `cheq_view` hashes (§5).
//! - [`voice`]: the speakable text and SSML of the voice view (§10).
//! - [`warnings`]: deceptive-text warnings (§10).
//! - [`decide`]: the flow shared by every front end: start, load, decide,
//!   deliver with retries (§2–§6).
//! - [`routes`]: the browser front end (actix-web, askama pages).
//! - [`api`]: the raw JSON API for voice gateways (§10).
//! - [`admin`]: the local admin socket (`cheq user add` while the server runs).
//! - [`seal`]: sensitive collected values never stored in clear (§8).
//! - [`server`]: start-up: keys, trust, database, state, listener.
//! - [`error`]: the error type and its single mapping to statuses and pages.

pub mod admin;
pub mod api;
pub mod auth;
pub mod config;
pub mod decide;
pub mod error;
pub mod fetch;
pub mod registry;
pub mod routes;
pub mod seal;
pub mod server;
pub mod view;
pub mod voice;
pub mod warnings;

pub use config::{ConfigError, CsConfig};
pub use decide::Cs;
pub use error::CsError;
pub use routes::{configure, CsState};
pub use server::{build_state, run, serve, ServerError};
