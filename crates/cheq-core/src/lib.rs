//! # cheq-core
//!
//! The signing core of CHEQ, the protocol by which a human confirms, outside
//! the AI agent, an action the agent wants to take (`docs/PROTOCOL.md`,
//! version 1). It is what a resource server written in Rust, or an offline
//! verifier, depends on: no I/O, no async runtime, no HTTP (the compiler
//! holds it to that: none of those crates is a dependency).
//!
//! - [`cheq`]: the CHEQ object and URI pack, the strict JSON reader, and
//!   their validation (§1, §4); the protocol words as types.
//! - [`sign`]: keys and trust, JWS General JSON Serialization, signing,
//!   countersigning and the verification pipeline (§5, §9).
//! - [`tlog`]: the transparency log's entries, tree, tiles, checkpoints
//!   and the auditor's checks (§15).
//! - [`discovery`]: the CS's and the RS's discovery documents, read
//!   against the origin they came from (§16.1, §16.2).
//! - [`evidence`]: redacted evidence of a decision with private values,
//!   its format and its checks (§8.1).
#![forbid(unsafe_code)]

pub mod cheq;
pub mod discovery;
pub mod evidence;
pub mod sign;
pub mod tlog;
