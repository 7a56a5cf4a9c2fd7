//! The log's entries (PROTOCOL.md §15.1): one line each, naming no content.
//!
//! - a decision: `cheq-decision/v1 <D>` LF, `<D>` the unpadded base64url
//!   SHA-256 of the decided document's exact bytes;
//! - a passkey: `cheq-credential/v1 <S> <added|removed> <K>` LF, `<S>` the
//!   base64url SHA-256 of the account's `sub`, `<K>` the RFC 7638 thumbprint
//!   of the credential's public key.

use crate::sign::b64;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

const DECISION: &str = "cheq-decision/v1";
const CREDENTIAL: &str = "cheq-credential/v1";

/// What happened to a passkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialChange {
    Added,
    Removed,
}

impl CredentialChange {
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialChange::Added => "added",
            CredentialChange::Removed => "removed",
        }
    }
}

/// One entry of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A countersigned document, by the digest of its exact bytes.
    Decision { digest: String },
    /// A passkey added to or removed from an account.
    Credential {
        subject: String,
        change: CredentialChange,
        thumbprint: String,
    },
}

/// Why an entry's bytes are not an entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a cheq log entry")]
pub struct NotAnEntry;

impl Entry {
    /// The entry for a decided document: its digest.
    pub fn decision(document: &[u8]) -> Entry {
        Entry::Decision {
            digest: b64::sha256(document),
        }
    }

    /// The entry for a passkey of `sub`, by its public key (a JWK).
    pub fn credential(
        sub: &str,
        key: &Map<String, Value>,
        change: CredentialChange,
    ) -> Result<Entry, ThumbprintError> {
        Ok(Entry::Credential {
            subject: b64::sha256(sub.as_bytes()),
            change,
            thumbprint: thumbprint(key)?,
        })
    }

    /// The entry's bytes, as logged (and hashed into the tree).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Entry::Decision { digest } => format!("{DECISION} {digest}\n"),
            Entry::Credential {
                subject,
                change,
                thumbprint,
            } => format!("{CREDENTIAL} {subject} {} {thumbprint}\n", change.as_str()),
        }
        .into_bytes()
    }

    /// Reads an entry, exactly as [`Entry::to_bytes`] writes it.
    pub fn parse(bytes: &[u8]) -> Result<Entry, NotAnEntry> {
        let text = std::str::from_utf8(bytes).map_err(|_| NotAnEntry)?;
        let line = text.strip_suffix('\n').ok_or(NotAnEntry)?;
        let digest = |s: &str| -> Result<String, NotAnEntry> {
            match b64::decode(s) {
                Some(d) if d.len() == 32 => Ok(s.to_owned()),
                _ => Err(NotAnEntry),
            }
        };
        let parts: Vec<&str> = line.split(' ').collect();
        let entry = match parts.as_slice() {
            [DECISION, d] => Entry::Decision { digest: digest(d)? },
            [CREDENTIAL, s, change, k] => Entry::Credential {
                subject: digest(s)?,
                change: match *change {
                    "added" => CredentialChange::Added,
                    "removed" => CredentialChange::Removed,
                    _ => return Err(NotAnEntry),
                },
                thumbprint: digest(k)?,
            },
            _ => return Err(NotAnEntry),
        };
        // Canonical only: one spelling per entry.
        if entry.to_bytes() != bytes {
            return Err(NotAnEntry);
        }
        Ok(entry)
    }
}

/// Why a key has no RFC 7638 thumbprint here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThumbprintError {
    #[error("the key has no `kty` this thumbprint knows (EC, OKP, RSA)")]
    UnknownKeyType,
    #[error("the key lacks its member `{0}`")]
    Missing(&'static str),
}

/// The RFC 7638 thumbprint (SHA-256, base64url) of a public JWK: the hash of
/// its required members, in lexical order, without whitespace.
pub fn thumbprint(key: &Map<String, Value>) -> Result<String, ThumbprintError> {
    let members: &[&'static str] = match key.get("kty").and_then(Value::as_str) {
        Some("EC") => &["crv", "kty", "x", "y"],
        Some("OKP") => &["crv", "kty", "x"],
        Some("RSA") => &["e", "kty", "n"],
        _ => return Err(ThumbprintError::UnknownKeyType),
    };
    let mut canonical = Map::new();
    for m in members {
        let v = key
            .get(*m)
            .and_then(Value::as_str)
            .ok_or(ThumbprintError::Missing(m))?;
        canonical.insert((*m).to_owned(), Value::String(v.to_owned()));
    }
    // `preserve_order` keeps insertion order, which is the lexical order
    // of `members`; strings are escaped as RFC 7638 §3 requires (JSON).
    let json = serde_json::to_string(&Value::Object(canonical))
        .map_err(|_| ThumbprintError::UnknownKeyType)?;
    Ok(b64::encode(Sha256::digest(json.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_refuse_any_other_spelling() {
        let d = Entry::decision(b"{\"payload\":\"x\"}");
        let bytes = d.to_bytes();
        assert!(bytes.starts_with(b"cheq-decision/v1 "));
        assert!(bytes.ends_with(b"\n"));
        assert_eq!(Entry::parse(&bytes), Ok(d));
        let key: Map<String, Value> = serde_json::from_str(
            r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#,
        )
        .unwrap();
        let c = Entry::credential("alice", &key, CredentialChange::Removed).unwrap();
        let bytes = c.to_bytes();
        assert_eq!(Entry::parse(&bytes), Ok(c));
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.contains(" removed "), "{text}");
        for bad in [
            "cheq-decision/v1 abc\n".to_owned(),
            text.trim_end().to_owned(),
            text.replace(" removed ", " deleted "),
            text.replace(' ', "  "),
            format!("{text}x"),
            "cheq-decision/v2 47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU\n".to_owned(),
        ] {
            assert_eq!(Entry::parse(bad.as_bytes()), Err(NotAnEntry), "{bad:?}");
        }
    }

    /// RFC 7638 §3.1's own example.
    #[test]
    fn thumbprint_matches_rfc_7638() {
        let key: Map<String, Value> = serde_json::from_str(
            r#"{"kty":"RSA","n":"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw","e":"AQAB","alg":"RS256","kid":"2011-04-29"}"#,
        )
        .unwrap();
        assert_eq!(
            thumbprint(&key).unwrap(),
            "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
        );
        let mut no_x = key.clone();
        no_x.remove("n");
        assert_eq!(thumbprint(&no_x), Err(ThumbprintError::Missing("n")));
        let mut other = key;
        other.insert("kty".into(), "oct".into());
        assert_eq!(thumbprint(&other), Err(ThumbprintError::UnknownKeyType));
    }
}
