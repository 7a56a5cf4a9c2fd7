//! The confirmation server (CS): the product's core (PROTOCOL.md §2–§6, §8–§10).
//!
//! The domain, which knows nothing of HTTP:
//! - [`flow`]: the confirmation flow shared by every front end: start, load,
//!   decide, deliver with retries, history, evidence (§2–§6, §8).
//! - [`auth`]: accounts, sessions and CSRF tokens, failed-attempt limits.
//! - [`registry`]: which resource URIs may be fetched at all (§2).
//! - [`directory`]: the configured and the registered resource servers as
//!   one list, reloaded when registrations change (§16.3).
//! - [`registration`]: a resource server registering itself (§16.3).
//! - [`view`]: what the user is shown, and the text `cheq_view` hashes (§5).
//! - [`voice`]: the speakable text and SSML of the voice view (§10).
//! - [`warnings`]: deceptive-text warnings (§10).
//! - [`seal`]: sensitive collected values never stored in clear (§8).
//! - [`fetch`]: the OAuth client and the bounded HTTP client towards an RS
//!   (§3, §6), the flow's one way out.
//!
//! The front ends, thin: parse, call the flow, render.
//! - [`web`]: the browser pages (actix-web, askama).
//! - [`api`]: the raw JSON API for voice gateways (§10).
//! - [`status`]: the one table from flow errors to HTTP statuses, for both.
//!
//! Around them: [`config`] (`cs.toml`), [`server`] (start-up, background
//! jobs), [`admin`] (the local admin socket).

pub use cheq_confirm::{
    auth, config, directory, fetch, flow, link, oidc, passkeys, registration, registry, seal,
    transparency, view, voice, warnings,
};

pub mod admin;
pub mod api;
pub mod server;
pub mod status;
pub mod web;

pub use config::{ConfigError, CsConfig};
pub use flow::{Cs, CsError};
pub use server::{build_state, run, serve, ServerError};
pub use web::{configure, CsState};
