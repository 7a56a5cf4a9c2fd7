//! # cheq
//!
//! A Rust implementation of CHEQ, the protocol by which a human confirms, outside
//! the AI agent, an action the agent wants to take. The wire contract is
//! `docs/PROTOCOL.md` (version 1), in this repository; "PROTOCOL.md §N" in
//! the code cites its sections.
//!
//! Layout by role:
//! - [`cheq`] and [`sign`]: the signing core, the crate `cheq-core`
//!   (re-exported here): the CHEQ object and URI pack (§1, §4); keys, trust,
//!   JWS, signing, countersigning and verification (§5, §9). No I/O.
//! - [`store`]: the durable replay store (§6).
//! - [`confirm`]: the confirmation server (§2–§6, §8).
//! - [`configfile`]: reading TOML configuration, errors naming the key.
//! - [`keyfile`]: private key and secret files (0600, generated when missing).
//! - [`resource`]: the reference resource server and agent client (§1, §3, §6, §7).
//! - [`mcp`]: the MCP bridge in front of an A2T resource server (§11).
//! - [`time`]: time as a parameter (`Clock`), shared by every layer.
//! - [`throttle`]: the arithmetic of failed-attempt limits, for both servers.
//! - [`text`]: making untrusted text safe for one line of a log.
//! - [`testkit`]: the loopback CS + RS configurations of the tests, benches and demo.
//! - [`colocated`]: the confirmation inside the resource server (§12): both
//!   sides in one process, the CS flow reaching the RS without HTTP.
//! - [`cli`]: the `cheq` command line.

pub use cheq_core::{cheq, discovery, evidence, sign, tlog};
pub use cheq_mcp as mcp;
pub use cheq_store as store;
pub use cheq_store::throttle;
pub use cheq_support::{
    bearer, configfile, keyfile, keyring, metrics, peerkeys, recent, secret, text, time,
};

pub mod a2a;
pub mod cli;
pub mod colocated;
pub mod confirm;
pub mod httpkit;
pub mod resource;
pub mod testkit;
