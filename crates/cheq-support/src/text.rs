//! Text helpers shared by every layer: making untrusted text safe for one line
//! of a log or a terminal, and bounding what is quoted from a peer.

/// Folds text onto one line and makes it safe for a terminal: newlines become
/// spaces, other control and bidirectional-override characters are escaped.
pub fn one_line(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\r' | '\t' => s.push(' '),
            c if is_unsafe_char(c) => s.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => s.push(c),
        }
    }
    s
}

/// Control characters and the Unicode bidirectional controls, which could
/// rewrite a terminal or reorder what a reader sees.
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The start of a peer's body (at most `max` bytes, cut at a character
/// boundary), on one safe line: for a log, never for a page.
pub fn snippet(body: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(max)]);
    one_line(&text)
}

/// A short keyed digest of something a user typed (a user name, a client id),
/// for a log line: the same input gives the same digest under one key, so an
/// operator can follow one name across lines, yet the log does not carry what
/// was typed (which may be a password typed into the wrong field).
pub fn keyed_digest(key: &[u8], value: &str) -> String {
    use base64::Engine as _;
    use hmac::{Hmac, Mac};
    let Ok(mut mac) = Hmac::<sha2::Sha256>::new_from_slice(key) else {
        return "#?".to_owned();
    };
    mac.update(b"cheq log\0");
    mac.update(value.as_bytes());
    let bytes = mac.finalize().into_bytes();
    format!(
        "#{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&bytes[..9])
    )
}

/// The id that names one confirmation in log lines at both servers, from
/// its start to its delivery: the base64url SHA-256 of its resource URI
/// (also the CS's confirmation id).
pub fn confirmation_id(resource_uri: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(resource_uri.as_bytes()))
}

/// The tracing span of everything about one confirmation.
pub fn confirmation_span(confirmation_id: &str) -> tracing::Span {
    tracing::info_span!("confirmation", confirmation_id = %confirmation_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_digests_hide_the_value_and_are_stable() {
        let a = keyed_digest(b"key", "correct horse battery");
        assert_eq!(a, keyed_digest(b"key", "correct horse battery"));
        assert_ne!(a, keyed_digest(b"other key", "correct horse battery"));
        assert_ne!(a, keyed_digest(b"key", "alice"));
        assert!(!a.contains("horse"));
        assert_eq!(a.len(), 13);
    }

    #[test]
    fn snippets_are_bounded_and_on_one_line() {
        assert_eq!(snippet(b"ab\ncd", 100), "ab cd");
        assert_eq!(snippet(b"abcdef", 3), "abc");
        assert_eq!(snippet("\u{202e}x".as_bytes(), 100), "\\u{202e}x");
    }
}
