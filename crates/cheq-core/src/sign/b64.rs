//! Unpadded, canonical base64url (RFC 7515 §2, PROTOCOL.md §5).

//!
//! base64-simd does the work (vector instructions where the CPU has them,
//! chosen at run time): a signed document is mostly base64url, and the
//! `base64` crate's scalar decoder was a measurable part of each
//! verification (BENCHMARKS.md). Its decoder is as strict as ours
//! must be; the unit test below and the fuzz target `b64` hold it to the
//! `base64` crate's strict decoder.

use base64_simd::URL_SAFE_NO_PAD;

/// Encodes bytes as unpadded base64url.
pub fn encode(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode_to_string(bytes)
}

/// Decodes unpadded base64url, refusing padding, other alphabets and
/// non-canonical trailing bits.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode_to_vec(text).ok()
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

    /// The same answers as the `base64` crate's strict decoder: every string
    /// of up to three characters over the alphabet and its near misses, and
    /// longer encodings with one character changed.
    #[test]
    fn agrees_with_the_base64_crate() {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine as _;
        let same = |s: &str| {
            assert_eq!(
                super::decode(s),
                URL_SAFE_NO_PAD.decode(s).ok(),
                "decoders differ on {s:?}"
            );
        };
        let alphabet: Vec<char> =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=+/ .\né"
                .chars()
                .collect();
        same("");
        for a in &alphabet {
            same(&a.to_string());
            for b in &alphabet {
                same(&format!("{a}{b}"));
                for c in &alphabet {
                    same(&format!("{a}{b}{c}"));
                }
            }
        }
        for len in 0..200usize {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
            let text = super::encode(&bytes);
            assert_eq!(text, URL_SAFE_NO_PAD.encode(&bytes));
            assert_eq!(super::decode(&text), Some(bytes));
            for (i, c) in text.char_indices() {
                for other in ['A', 'B', 'Q', 'g', 'w', '_', '-', '=', '+'] {
                    if other != c {
                        let mut changed = text.clone();
                        changed.replace_range(i..i + 1, &other.to_string());
                        same(&changed);
                    }
                }
            }
        }
    }
}
