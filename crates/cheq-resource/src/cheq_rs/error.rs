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
    /// The discovery document of the CS named by its issuer (§16.1) is not
    /// read yet: nothing can be minted until it names the confirmation URI.
    #[error("the confirmation server {0} has not been reached yet; try again in a moment")]
    ConfirmationServerUnknown(String),
    /// The caller is a CS that authenticated with its own key (§16.4), and
    /// the CHEQ or the countersignature is another CS's.
    #[error("this CHEQ's decision is not this confirmation server's to make")]
    WrongConfirmationServer,
}

impl CheqRsError {
    /// Whether the decision's countersignature failed on its key: not in
    /// the set trusted for the CHEQ's confirmation server, or not
    /// verifying with the key of that id there (§5 rule 2). With a caller
    /// that authenticated as a CS (§16.4), that is another CS's signature.
    pub fn countersigned_elsewhere(&self) -> bool {
        matches!(
            self,
            CheqRsError::Invalid {
                error: VerifyError::UntrustedConfirmationKey { .. }
                    | VerifyError::BadSignature { index: 1, .. }
                    | VerifyError::AlgorithmKeyMismatch { index: 1 },
                ..
            }
        )
    }
}

impl CheqRsError {
    /// Whether the countersignature's key was looked up for a CHEQ whose
    /// confirmation URI is not on `cs` (an origin): a decision on a CHEQ
    /// that is another CS's.
    pub fn names_another_cs(&self, cs: &str) -> bool {
        match self {
            CheqRsError::Invalid {
                error:
                    VerifyError::UntrustedConfirmationKey {
                        confirmation_uri, ..
                    },
                ..
            } => cheq_core::discovery::origin(confirmation_uri).as_deref() != Some(cs),
            _ => false,
        }
    }
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
