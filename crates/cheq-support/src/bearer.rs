//! Self-contained bearer tokens (RFC 6750): the claims a server would keep
//! in a table, sealed (ChaCha20-Poly1305) under a key only the server's
//! instances share, so that a token issued by one instance is honoured by
//! every other without a shared token table, and a client can
//! neither read nor forge one. Used for the RS's OAuth access tokens
//! (PROTOCOL.md §3) and the CS's raw-API user tokens (§10).
//!
//! A token is base64url(12-byte random nonce ‖ ciphertext ‖ tag) of the
//! claims' JSON. Expiry is a claim that the caller checks: this module only
//! seals and opens.

use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Longest token accepted for opening (anything longer is not ours).
pub const MAX_TOKEN_LEN: usize = 2048;

/// The key tokens are sealed under. Its `Debug` shows no key.
#[derive(Clone)]
pub struct TokenKey {
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(<redacted>)")
    }
}

impl TokenKey {
    /// The key for `purpose` (so that one secret never seals two kinds of
    /// token alike) from a generated `secret`.
    pub fn new(secret: &[u8], purpose: &str) -> Self {
        let mut h = Sha256::new();
        h.update(purpose.as_bytes());
        h.update([0]);
        h.update(secret);
        let key = h.finalize();
        TokenKey {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        }
    }

    /// Seals `claims` into a token; `None` only if they cannot be encoded.
    pub fn seal<T: Serialize>(&self, claims: &T) -> Option<String> {
        let plain = serde_json::to_vec(claims).ok()?;
        let iv: [u8; 12] = rand::random();
        let sealed = self
            .cipher
            .encrypt(Nonce::from_slice(&iv), plain.as_slice())
            .ok()?;
        let mut out = iv.to_vec();
        out.extend_from_slice(&sealed);
        Some(cheq_core::sign::b64::encode(out))
    }

    /// The claims of a token this key sealed; `None` for anything else.
    pub fn open<T: DeserializeOwned>(&self, token: &str) -> Option<T> {
        if token.len() > MAX_TOKEN_LEN {
            return None;
        }
        let bytes = cheq_core::sign::b64::decode(token)?;
        if bytes.len() < 12 + 16 {
            return None;
        }
        let plain = self
            .cipher
            .decrypt(Nonce::from_slice(&bytes[..12]), &bytes[12..])
            .ok()?;
        serde_json::from_slice(&plain).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_opens_only_under_its_key_and_purpose_and_unaltered() {
        let k = TokenKey::new(b"0123456789abcdef0123456789abcdef", "rs");
        let t = k.seal(&("cs", 10)).unwrap();
        assert_eq!(k.open::<(String, i64)>(&t), Some(("cs".into(), 10)));
        // Another instance with the same secret opens it too.
        let same = TokenKey::new(b"0123456789abcdef0123456789abcdef", "rs");
        assert!(same.open::<(String, i64)>(&t).is_some());
        let other_purpose = TokenKey::new(b"0123456789abcdef0123456789abcdef", "api");
        assert!(other_purpose.open::<(String, i64)>(&t).is_none());
        let other_secret = TokenKey::new(b"0123456789abcdef0123456789abcdeX", "rs");
        assert!(other_secret.open::<(String, i64)>(&t).is_none());
        // One changed character anywhere is no token.
        for i in 0..t.len() {
            let mut b = t.clone().into_bytes();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(b).unwrap();
            assert!(k.open::<(String, i64)>(&altered).is_none(), "at {i}");
        }
        assert!(k.open::<(String, i64)>("").is_none());
        assert!(k
            .open::<(String, i64)>(&"A".repeat(MAX_TOKEN_LEN + 1))
            .is_none());
        // Two seals of the same claims differ (random nonce).
        assert_ne!(k.seal(&("cs", 10)).unwrap(), t);
    }
}
