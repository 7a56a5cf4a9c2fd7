//! # cheq-confirm
//!
//! The confirmation server's domain (`docs/PROTOCOL.md` §2–§6, §8, §10):
//! everything a CS decides, with no HTTP server in it. The HTTP front ends
//! (pages, the raw API, the status table, start-up) are in the crate `cheq`
//! and call this one; the compiler keeps the web framework out of here (it
//! is not a dependency).
//!
//! - [`flow`]: start, load, decide, deliver, history, evidence.
//! - [`auth`]: accounts, sessions, failed-attempt limits.
//! - [`registry`]: the resource servers this CS works for (§2).
//! - [`directory`]: those of the configuration and those registered (§16.3)
//!   as one list, reloaded when the registrations change.
//! - [`registration`]: a resource server registering itself (§16.3).
//! - [`link`]: how the flow reaches a resource server: over HTTP ([`fetch`],
//!   bounded) or in the same process (§12).
//! - [`fetch`]: the HTTP client of resource servers (§3, §6), bounded.
//! - [`oidc`]: signing in with an identity provider (OpenID Connect).
//! - [`passkeys`]: adding passkeys and signing in with them (WebAuthn).
//! - [`view`], [`voice`], [`warnings`]: what a person is shown or read.
//! - [`seal`]: private data sealed until delivery is final (§8).
//! - [`transparency`]: the public log of every countersignature and passkey
//!   change: sequencing, checkpoints, tiles, inclusion proofs (§15).
//! - [`config`]: the CS configuration, validated when read.
#![forbid(unsafe_code)]

pub mod auth;
pub mod config;
pub mod directory;
pub mod fetch;
pub mod flow;
pub mod link;
pub mod oidc;
pub mod passkeys;
pub mod registration;
pub mod registry;
pub mod seal;
pub mod transparency;
pub mod view;
pub mod voice;
pub mod warnings;
