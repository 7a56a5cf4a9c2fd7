//! Sealed pending calls (PROTOCOL.md §11): the `requestState` of MCP
//! 2026-07-28 (multi round-trip requests), and the `handle` given to a client
//! without URL elicitation (§11). The MRTR pattern says a server MUST treat
//! an echoed state as attacker-controlled and reject one that fails
//! verification, and SHOULD bind it to the originating request and a short
//! expiry. Here a state is ChaCha20-Poly1305 over a small JSON record (so the
//! client cannot read the result URI in it), with what it is bound to as
//! associated data ([`Binding`]): a request state to the digest of the call's
//! tool and arguments, a handle to the client session it was given to. Shown
//! for another call or session, as the other kind, after its expiry, or
//! altered by one byte, it does not open.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use zeroize::Zeroizing;

/// How long a state is good for; each retry that finds the call still
/// pending gets a fresh one.
pub const STATE_TTL: Duration = Duration::from_secs(3600);
/// How long a handle is good for: longer than a CHEQ lives (at most 24 h),
/// so the outcome can be collected whenever the user decides.
pub const HANDLE_TTL: Duration = Duration::from_secs(25 * 3600);
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

/// What a sealed state is bound to: it opens only for the same binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding<'a> {
    /// A `requestState`: the digest of the call's tool and arguments.
    Request { digest: &'a str },
    /// A `handle`: the client it was given to (the session key at
    /// 2025-11-25 and over stdio; one name for all stateless requests).
    Handle { holder: &'a str },
}

impl Binding<'_> {
    fn aad(&self) -> String {
        match self {
            Binding::Request { digest } => format!("{VERSION}\nrequest\n{digest}"),
            Binding::Handle { holder } => format!("{VERSION}\nhandle\n{holder}"),
        }
    }
}

/// What a pending call carries.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PendingState {
    v: String,
    pub tool: String,
    /// The digest of the tool and arguments ([`crate::args_digest`]).
    pub digest: String,
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
    /// A state good for `ttl` from `now`.
    pub fn new(call: Call, result_uri: String, now: SystemTime, ttl: Duration) -> Self {
        PendingState {
            v: VERSION.to_owned(),
            tool: call.tool,
            digest: call.digest,
            url: call.url,
            message: call.message,
            result_uri,
            exp: secs(now) + ttl.as_secs(),
        }
    }

    /// The same state with a new expiry.
    pub fn refreshed(&self, now: SystemTime, ttl: Duration) -> Self {
        PendingState {
            exp: secs(now) + ttl.as_secs(),
            ..self.clone()
        }
    }
}

/// The call a state stands for, and what the user is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub tool: String,
    pub digest: String,
    /// The CS's start link.
    pub url: String,
    pub message: String,
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

    /// Seals `state` under `binding`.
    pub fn seal(&self, state: &PendingState, binding: Binding<'_>) -> Result<String, StateError> {
        let plain = serde_json::to_vec(state).map_err(|e| StateError::Internal(e.to_string()))?;
        let iv: [u8; 12] = rand::random();
        let aad = binding.aad();
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
        let text = cheq_core::sign::b64::encode(&out);
        // Refused now rather than when it comes back: a state that does not
        // open would leave a decided call without its outcome.
        if text.len() > MAX_STATE_LEN {
            return Err(StateError::TooLong);
        }
        Ok(text)
    }

    /// Opens a state shown under `binding`.
    pub fn open(
        &self,
        text: &str,
        binding: Binding<'_>,
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
        let aad = binding.aad();
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
            Call {
                tool: "book_flight".into(),
                digest: "d1".into(),
                url: "http://127.0.0.1:1/confirm?resource_uri=x".into(),
                message: "Confirm 'book_flight' at http://127.0.0.1:1".into(),
            },
            "http://127.0.0.1:2/cheq/results/secret-result".into(),
            now,
            STATE_TTL,
        )
    }

    const D1: Binding<'static> = Binding::Request { digest: "d1" };

    #[test]
    fn round_trip_and_the_result_uri_is_not_readable() {
        let key = StateKey::generate();
        let now = SystemTime::now();
        let sealed = key.seal(&sample(now), D1).unwrap();
        assert!(!sealed.contains("secret-result"));
        let raw = cheq_core::sign::b64::decode(&sealed).unwrap();
        assert!(!String::from_utf8_lossy(&raw).contains("secret-result"));
        assert_eq!(key.open(&sealed, D1, now).unwrap(), sample(now));
    }

    #[test]
    fn refusals() {
        let key = StateKey::generate();
        let now = SystemTime::now();
        let sealed = key.seal(&sample(now), D1).unwrap();
        // another call (tool or arguments)
        let d2 = Binding::Request { digest: "d2" };
        assert_eq!(key.open(&sealed, d2, now), Err(StateError::Seal));
        // another bridge
        assert_eq!(
            StateKey::generate().open(&sealed, D1, now),
            Err(StateError::Seal)
        );
        // every single-byte change
        let raw = cheq_core::sign::b64::decode(&sealed).unwrap();
        for i in 0..raw.len() {
            let mut bent = raw.clone();
            bent[i] ^= 1;
            let text = cheq_core::sign::b64::encode(&bent);
            assert_eq!(key.open(&text, D1, now), Err(StateError::Seal), "byte {i}");
        }
        // expiry
        let later = now + STATE_TTL + Duration::from_secs(1);
        assert_eq!(key.open(&sealed, D1, later), Err(StateError::Expired));
        // A state too long to come back is refused when sealed.
        let mut long = sample(now);
        long.result_uri = format!("http://127.0.0.1:2/{}", "r".repeat(MAX_STATE_LEN));
        assert_eq!(key.seal(&long, D1), Err(StateError::TooLong));
        // encoding and size
        assert_eq!(key.open("not base64!", D1, now), Err(StateError::Encoding));
        assert_eq!(key.open("AAAA", D1, now), Err(StateError::Seal));
        assert_eq!(
            key.open(&"A".repeat(MAX_STATE_LEN + 1), D1, now),
            Err(StateError::TooLong)
        );
    }

    #[test]
    fn a_handle_opens_only_for_its_holder_and_never_as_a_request_state() {
        let key = StateKey::generate();
        let now = SystemTime::now();
        let mine = Binding::Handle {
            holder: "session-a",
        };
        let handle = key.seal(&sample(now), mine).unwrap();
        assert_eq!(key.open(&handle, mine, now).unwrap(), sample(now));
        let theirs = Binding::Handle {
            holder: "session-b",
        };
        assert_eq!(key.open(&handle, theirs, now), Err(StateError::Seal));
        // A handle is not a request state, nor the other way round, even
        // when the holder's name equals the call's digest.
        assert_eq!(
            key.open(
                &handle,
                Binding::Request {
                    digest: "session-a"
                },
                now
            ),
            Err(StateError::Seal)
        );
        let state = key.seal(&sample(now), D1).unwrap();
        assert_eq!(
            key.open(&state, Binding::Handle { holder: "d1" }, now),
            Err(StateError::Seal)
        );
    }

    #[test]
    fn debug_hides_the_key() {
        assert_eq!(format!("{:?}", StateKey::generate()), "StateKey(<secret>)");
    }
}
