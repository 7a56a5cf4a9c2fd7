//! The reference resource server (RS): the API that asks for human confirmation
//! (PROTOCOL.md §1, §3, §6, §7, §8, §9, §16) and exposes its operations as A2T tools
//! (draft-rosenberg-aiproto-a2t-00 §6–§7).
//!
//! Layout:
//! - [`cheq_rs`]: the RS side of CHEQ, embeddable by any API server: minting a
//!   pending confirmation, serving it (§3), taking the decision exactly once
//!   (§6) and answering the result (§7). No HTTP, no database, no demo
//!   specifics: its state lives behind the traits of [`crate::store::rs`].
//! - [`oauth`]: the OAuth 2.0 client credentials token endpoint (RFC 6749 §4.4)
//!   used by the CS (§3) and by agents; a CS trusted by issuer authenticates
//!   with its own key ([`assertion`], §16.4).
//! - [`trusted_cs`]: the CS this RS trusts, named in full or by its issuer
//!   and read from its discovery document (§16.1); [`registration`]: the
//!   RS registering itself there (§16.3).
//! - [`tools`]: the two demo A2T tools (`book_flight`, `transfer_funds`), their
//!   validation, confirmation policy and execution.
//! - [`config`]: the settings, read from `rs.toml`.
//! - [`server`]: the actix-web routes, app state, [`server::run`]; `caller`:
//!   the caller of a route as an extractor (its token checked for the role);
//!   `discovery`: this RS's discovery document (§16.2).
//! - [`agent`]: a small agent-side client (`invoke`, `poll_result`).
//! - [`error`]: the front end's error types and the single HTTP mapping of
//!   every error, the domain's included (into [`crate::httpkit::JsonError`],
//!   shared with the CS).
//!
//! Only [`server::build_state`] chooses the storage backend.

pub use cheq_resource::{
    agent, assertion, cheq_rs, config, hosts, registration, rules, settings, tools, trusted_cs,
};
pub use cheq_resource::{
    invoke, poll_result, AgentError, CheqRs, CheqRsError, ClientConfig, ClientRole, ConfigError,
    DecisionAnswer, InvokeOutcome, MintRequest, Minted, Operation, ResultStatus, ResultView,
    RsConfig,
};

mod caller;
mod discovery;
pub mod error;
mod invoke;
pub mod oauth;
pub mod server;
mod settings_page;
pub use error::{ApiError, RsError};
pub use server::{build_state, configure, run, serve, RsState};
