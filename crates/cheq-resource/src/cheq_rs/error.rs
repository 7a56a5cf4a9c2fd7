//! Why the RS side of CHEQ refused or failed. No HTTP here: the front end
//! maps each to a status in one place (`resource::error`).

use cheq_core::sign::{SignError, VerifyError};
use cheq_store::StoreError;

/// Why the RS side of CHEQ ([`CheqRs`](super::CheqRs)) refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CheqRsError {
    #[error("no such confirmation")]
    NotFound,
    #[error("no such result")]
    ResultNotFound,
    #[error("the CHEQ has expired")]
    Expired,
    #[error("the CHEQ has already been decided")]
    AlreadyDecided,
    #[error("rule {rule}: {error}")]
    Invalid { rule: u8, error: VerifyError },
    #[error("{0}")]
    InvalidOther(String),
    #[error("nonce already decided with a different document")]
    Replayed,
    #[error("cannot mint the CHEQ: {0}")]
    Mint(String),
    #[error("cannot sign the CHEQ: {0}")]
    Sign(#[from] SignError),
    #[error("no key to sign with: {0}")]
    Keys(String),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("the operation failed: {0}")]
    Operation(String),
}

impl From<VerifyError> for CheqRsError {
    fn from(error: VerifyError) -> Self {
        match error {
            VerifyError::Expired { .. } => CheqRsError::Expired,
            error => CheqRsError::Invalid {
                rule: error.rule(),
                error,
            },
        }
    }
}
