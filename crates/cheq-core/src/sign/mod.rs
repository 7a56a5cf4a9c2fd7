//! Keys, trust, JWS General JSON Serialization, signing, countersigning and
//! verification (PROTOCOL.md §5, §9).
//!
//! This module does no I/O and knows nothing of HTTP. The Ed25519 primitive is
//! `ed25519-dalek` (`sign`, `verify_strict`); `josekit` verifies ES256. The JWS
//! layer is written here rather than taken from a JOSE library because CHEQ
//! needs every signature of a General JSON document verified, `crit` honoured
//! in that form, and duplicate members refused, which generic libraries do not
//! do. [`passkey`] derives the challenge of a passkey-bound decision and
//! checks its WebAuthn assertion. [`assertion`] signs and verifies a CS's
//! client assertion at an RS's token endpoint (§16.4).

pub mod assertion;
pub mod b64;
pub mod header;
pub mod jws;
pub mod keys;
pub mod passkey;
pub mod secret;
pub mod signer;
pub mod trust;
pub mod verify;

pub use header::{Channel, ConfirmationClaims, Decision, Role};
pub use keys::{Algorithm, Jwks, KeyError, KeyState, PublicKey, SigningKey};
pub use secret::same_secret;
pub use signer::{
    assemble, countersign, sign_entry, sign_resource, CountersignError, DecisionInput, SignError,
    AUTH_TIME_UNKNOWN,
};
pub use trust::{KeySource, TrustError, TrustStore};
pub use verify::{
    verify_decision, verify_own_decision, verify_resource, Context, ResourceSignature,
    VerifiedCheq, VerifiedDecision, VerifyError,
};
