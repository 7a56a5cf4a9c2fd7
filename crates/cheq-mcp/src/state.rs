//! The sealed `requestState` of MCP 2026-07-28 (multi round-trip requests;
//! PROTOCOL.md §11). The MRTR pattern says a server MUST treat an echoed
//! state as attacker-controlled and reject one that fails verification, and
//! SHOULD bind it to the originating request and a short expiry. Here a state
//! is ChaCha20-Poly1305 over a small JSON record (so the client cannot read
//! the result URI in it), with the digest of the call's tool and arguments as
//! associated data: shown with another tool, other arguments, after its
//! expiry, or altered by one byte, it does not open.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use zeroize::Zeroizing;

/// How long a state is good for; each retry that finds the call still
/// pending gets a fresh one.
pub const STATE_TTL: Duration = Duration::from_secs(3600);
/// The longest state accepted (characters); longer is refused unread.
pub const MAX_STATE_LEN: usize = 4096;
const VERSION: &str = "cheq-mcp-state/1";

/// Why a state was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    #[error("longer than {MAX_STATE_LEN} characters")]
    TooLong,
    #[error("not base64url")]
    Encoding,
    #[error("does not verify (altered, from another call, or from another bridge)")]
    Seal,
    #[error("expired")]
    Expired,
    #[error("cannot be sealed: {0}")]
    Internal(String),
}

/// What a pending 2026-07-28 call carries.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PendingState {
    v: String,
    pub tool: String,
    pub url: String,
    pub message: String,
    pub result_uri: String,
    /// Expiry, seconds since the epoch.
    pub exp: u64,
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl PendingState {
    pub fn new(
        tool: &str,
        url: String,
        message: String,
        result_uri: String,
        now: SystemTime,
    ) -> Self {
        PendingState {
            v: VERSION.to_owned(),
            tool: tool.to_owned(),
            url,
            message,
            result_uri,
            exp: secs(now) + STATE_TTL.as_secs(),
        }
    }

    /// The same state with a new expiry.
    pub fn refreshed(&self, now: SystemTime) -> Self {
        PendingState {
            exp: secs(now) + STATE_TTL.as_secs(),
            ..self.clone()
        }
    }
}

/// The key of this bridge's states (random per process; zeroized on drop).
pub struct StateKey(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for StateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateKey(<secret>)")
    }
}

impl StateKey {
    pub fn generate() -> Self {
        StateKey(Zeroizing::new(rand::random()))
    }

    fn cipher(&self) -> ChaCha20Poly1305 {
        ChaCha20Poly1305::new(Key::from_slice(self.0.as_slice()))
    }

    /// Seals `state` for the call whose digest is `digest`.
    pub fn seal(&self, state: &PendingState, digest: &str) -> Result<String, StateError> {
        let plain = serde_json::to_vec(state).map_err(|e| StateError::Internal(e.to_string()))?;
        let iv: [u8; 12] = rand::random();
        let aad = format!("{VERSION}\n{digest}");
        let sealed = self
            .cipher()
            .encrypt(
                Nonce::from_slice(&iv),
                Payload {
                    msg: &plain,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| StateError::Internal("encryption failed".into()))?;
        let mut out = iv.to_vec();
        out.extend_from_slice(&sealed);
        Ok(cheq_core::sign::b64::encode(&out))
    }

    /// Opens a state shown with the call whose digest is `digest`.
    pub fn open(
        &self,
        text: &str,
        digest: &str,
        now: SystemTime,
    ) -> Result<PendingState, StateError> {
        if text.len() > MAX_STATE_LEN {
            return Err(StateError::TooLong);
        }
        let raw = cheq_core::sign::b64::decode(text).ok_or(StateError::Encoding)?;
        if raw.len() < 12 + 16 {
            return Err(StateError::Seal);
        }
        let (iv, sealed) = raw.split_at(12);
        let aad = format!("{VERSION}\n{digest}");
        let plain = self
            .cipher()
            .decrypt(
                Nonce::from_slice(iv),
                Payload {
                    msg: sealed,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| StateError::Seal)?;
        let state: PendingState = serde_json::from_slice(&plain).map_err(|_| StateError::Seal)?;
        if state.v != VERSION {
            return Err(StateError::Seal);
        }
        if secs(now) >= state.exp {
            return Err(StateError::Expired);
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(now: SystemTime) -> PendingState {
        PendingState::new(
            "book_flight",
            "http://127.0.0.1:1/confirm?resource_uri=x".into(),
            "Confirm 'book_flight' at http://127.0.0.1:1".into(),
            "http://127.0.0.1:2/cheq/results/secret-result".into(),
            now,
        )
    }

    #[test]
    fn round_trip_and_the_result_uri_is_not_readable() {
        let key = StateKey::generate();
        let now = SystemTime::now();
        let sealed = key.seal(&sample(now), "d1").unwrap();
        assert!(!sealed.contains("secret-result"));
        let raw = cheq_core::sign::b64::decode(&sealed).unwrap();
        assert!(!String::from_utf8_lossy(&raw).contains("secret-result"));
        assert_eq!(key.open(&sealed, "d1", now).unwrap(), sample(now));
    }

    #[test]
    fn refusals() {
        let key = StateKey::generate();
        let now = SystemTime::now();
        let sealed = key.seal(&sample(now), "d1").unwrap();
        // another call (tool or arguments)
        assert_eq!(key.open(&sealed, "d2", now), Err(StateError::Seal));
        // another bridge
        assert_eq!(
            StateKey::generate().open(&sealed, "d1", now),
            Err(StateError::Seal)
        );
        // every single-byte change
        let raw = cheq_core::sign::b64::decode(&sealed).unwrap();
        for i in 0..raw.len() {
            let mut bent = raw.clone();
            bent[i] ^= 1;
            let text = cheq_core::sign::b64::encode(&bent);
            assert_eq!(
                key.open(&text, "d1", now),
                Err(StateError::Seal),
                "byte {i}"
            );
        }
        // expiry
        let later = now + STATE_TTL + Duration::from_secs(1);
        assert_eq!(key.open(&sealed, "d1", later), Err(StateError::Expired));
        // encoding and size
        assert_eq!(
            key.open("not base64!", "d1", now),
            Err(StateError::Encoding)
        );
        assert_eq!(key.open("AAAA", "d1", now), Err(StateError::Seal));
        assert_eq!(
            key.open(&"A".repeat(MAX_STATE_LEN + 1), "d1", now),
            Err(StateError::TooLong)
        );
    }

    #[test]
    fn debug_hides_the_key() {
        assert_eq!(format!("{:?}", StateKey::generate()), "StateKey(<secret>)");
    }
}
