//! The CHEQ object and the URI pack, and their validation (PROTOCOL.md §1, §4).
//!
//! This module does no I/O and knows nothing of HTTP: it reads bytes and says
//! whether they are a CHEQ that can be displayed, and whether it can be
//! countersigned.

pub mod json;
pub mod payload;
pub mod uri;
pub mod vocab;

pub use payload::{
    Cheq, CheqError, CountersignFields, CountersignableError, InputType, Parameter, ParameterInput,
};
pub use uri::{UriPack, UriPackError};
pub use vocab::{Assurance, Channel, ConfirmationStatus, Decision, DecisionAnswer};
