//! How the CS authenticates at an RS's token endpoint (PROTOCOL.md §3,
//! §16.4): the client id and secret the RS issued, or a client assertion
//! signed with the CS's own key.

use super::FetchError;
use cheq_core::sign::assertion::{client_assertion, new_jti, AssertionClaims};
use cheq_support::keyring::KeyRing;
use cheq_support::time::Clock;
use std::sync::Arc;

/// How the CS authenticates at an RS's token endpoint.
pub enum ClientAuth {
    /// The client id and secret the RS issued (`client_secret_basic`).
    Secret {
        client_id: String,
        client_secret: String,
    },
    /// A client assertion signed with the CS's own key (§16.4).
    Assertion(AssertionSigner),
}

/// Signs the CS's client assertions (§16.4): `iss` and `sub` its issuer (its
/// origin), signed by its active key, at the time of its clock.
#[derive(Clone)]
pub struct AssertionSigner {
    keys: Arc<KeyRing>,
    issuer: String,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for AssertionSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AssertionSigner")
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl AssertionSigner {
    pub fn new(keys: Arc<KeyRing>, issuer: &str, clock: Arc<dyn Clock>) -> Self {
        AssertionSigner {
            keys,
            issuer: issuer.to_owned(),
            clock,
        }
    }

    /// A new assertion for the token endpoint `audience`: a fresh `jti` of
    /// 128 random bits, issued now, expiring in 60 s.
    pub fn assertion(&self, audience: &str) -> Result<String, FetchError> {
        let key = self
            .keys
            .signer()
            .map_err(|e| FetchError::CannotSign(e.to_string()))?;
        let jti = new_jti(&mut rand::rngs::OsRng);
        Ok(client_assertion(
            &key,
            &AssertionClaims {
                issuer: &self.issuer,
                audience,
                jti: &jti,
                issued_at: self.clock.now().timestamp(),
            },
        ))
    }
}
