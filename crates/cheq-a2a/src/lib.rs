//! The A2A bridge's domain (CHEQ draft §6; PROTOCOL.md "A2A binding"):
//! fronts an A2T resource server as an A2A 1.0 agent. No HTTP server here:
//! the crate `cheq` serves it (`cheq a2a`); this crate decides what each
//! JSON-RPC request gives.
//!
//! - [`card`]: the Agent Card, one skill per A2T tool, the CHEQ extension
//!   ([`EXTENSION_URI`], `required: false`).
//! - [`tasks`]: the task table and the one state machine of a bridged call,
//!   kept in the store's `TaskStore` (sled or PostgreSQL, opened by the
//!   front end) so that a bridge started again answers for its tasks and
//!   carries on with those waiting for their user.
//! - [`bridge`]: a message naming a tool (a data part `{"tool": …,
//!   "arguments": {…}}`) becomes an RS call through the one
//!   [`Agent`](cheq_resource::agent::Agent) of the bridge (one HTTP client,
//!   one token, `Retry-After` honoured, every answer bounded). A `202` +
//!   URI pack leaves the task in `TASK_STATE_AUTH_REQUIRED`, its status
//!   message carrying the CS's start link; a task of the bridge reads the
//!   result URI (which never leaves it) until the RS's final state.
//! - [`rpc`]: the JSON-RPC binding (A2A 1.0 §9): `SendMessage`,
//!   `SendStreamingMessage`, `GetTask`, `CancelTask`, `SubscribeToTask`.
//! - [`error`]: the errors and their one mapping to JSON-RPC codes.
//!
//! Types: the crate `a2a-types`, generated from the canonical `a2a.proto`
//! with ProtoJSON serialisation (the wire form of the JSON-RPC binding).
#![forbid(unsafe_code)]

pub mod bridge;
pub mod card;
pub mod error;
pub mod rpc;
pub mod tasks;

pub use a2a_types as types;
pub use bridge::{A2aBridge, A2aConfig, OpenError, Resumed};
pub use error::A2aError;
pub use rpc::{Reply, TaskEvents};
pub use tasks::Owner;

/// The URI of the CHEQ extension of A2A (declared in the Agent Card,
/// named in the `extensions` of the messages it shapes, and the key of
/// its part metadata).
pub const EXTENSION_URI: &str = "https://cheq.dev/a2a/cheq/v1";

/// The A2A protocol version served (`A2A-Version`, `protocolVersion`).
pub const PROTOCOL_VERSION: &str = "1.0";

/// The service parameter (HTTP header) naming the client's A2A version.
pub const VERSION_HEADER: &str = "A2A-Version";
