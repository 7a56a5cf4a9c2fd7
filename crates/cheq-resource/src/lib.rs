//! # cheq-resource
//!
//! The resource server's side of CHEQ (`docs/PROTOCOL.md` §1, §3, §6, §7,
//! §16), with no HTTP server in it: the crate an RS written in Rust embeds,
//! and that the reference RS (its HTTP front end is in the crate `cheq`) is
//! built on; the compiler keeps the web framework out (it is not a
//! dependency).
//!
//! - [`cheq_rs`]: mint a CHEQ and its URI pack, serve it, take the decision
//!   once (verify, record the nonce, run the operation exactly once), answer
//!   the result.
//! - [`tools`]: the reference RS's A2T tools and what their CHEQs show.
//! - [`rules`]: when a tool needs confirmation: the operator's floors and
//!   each user's own rules (§17).
//! - [`settings`]: each user's CS and rules, every change itself confirmed
//!   (§17); [`hosts`]: the CSes of this RS's users.
//! - [`trusted_cs`]: the CS this RS trusts, named in full or by its issuer
//!   and read from its discovery document (§16.1), with the RS's
//!   registration there ([`registration`], §16.3).
//! - [`assertion`]: a CS's client assertion at the token endpoint (§16.4).
//! - [`config`]: the RS configuration, validated when read.
//! - [`agent`]: the agent's client of an A2T RS (calls, URI packs, results),
//!   used by `cheq agent` and the MCP bridge.
#![forbid(unsafe_code)]

pub mod agent;
pub mod assertion;
pub mod cheq_rs;
pub mod config;
pub mod hosts;
pub mod registration;
pub mod rules;
pub mod settings;
pub mod tools;
pub mod trusted_cs;

pub use agent::{invoke, poll_result, AgentError, InvokeOutcome, ResultStatus};
pub use cheq_core::cheq::DecisionAnswer;
pub use cheq_rs::{CheqRs, CheqRsError, MintRequest, Minted, Operation, ResultView};
pub use config::{ClientConfig, ClientRole, ConfigError, RsConfig};
pub use trusted_cs::{ConfirmationServer, DiscoveredCs};
