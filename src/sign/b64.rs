//! Unpadded, canonical base64url (RFC 7515 §2, PROTOCOL.md §5).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// Encodes bytes as unpadded base64url.
pub fn encode(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes unpadded base64url, refusing padding, other alphabets and
/// non-canonical trailing bits.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text).ok()
}

/// base64url of the SHA-256 of `bytes`.
pub fn sha256(bytes: impl AsRef<[u8]>) -> String {
    use sha2::Digest as _;
    encode(sha2::Sha256::digest(bytes.as_ref()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn canonical_only() {
        assert_eq!(super::decode("AQ"), Some(vec![1]));
        assert_eq!(super::decode("AR"), None, "non-canonical trailing bits");
        assert_eq!(super::decode("AQ=="), None, "padding");
        assert_eq!(super::decode("A+/"), None, "standard alphabet");
    }
}
