//! The URI pack and the URI rules of PROTOCOL.md §1.
//!
//! All three URIs are absolute; `https` is required except that `http` is allowed
//! for loopback hosts (127.0.0.0/8, `[::1]`, `localhost`).

use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use url::{Host, Url};

/// Why a URI is not acceptable in CHEQ.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    #[error("\"{0}\" is not an absolute URI")]
    NotAbsolute(String),
    #[error("\"{0}\" must use https (http is allowed only for loopback hosts)")]
    SchemeNotAllowed(String),
    #[error("\"{0}\" must not carry user name or password")]
    HasCredentials(String),
    #[error("\"{0}\" must not carry a fragment")]
    HasFragment(String),
}

/// Parses and checks one CHEQ URI (§1).
pub fn parse_cheq_uri(s: &str) -> Result<Url, UriError> {
    let url = Url::parse(s).map_err(|_| UriError::NotAbsolute(s.to_owned()))?;
    if url.cannot_be_a_base() || url.host().is_none() {
        return Err(UriError::NotAbsolute(s.to_owned()));
    }
    match url.scheme() {
        "https" => {}
        "http" if is_loopback(&url) => {}
        _ => return Err(UriError::SchemeNotAllowed(s.to_owned())),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UriError::HasCredentials(s.to_owned()));
    }
    if url.fragment().is_some() {
        return Err(UriError::HasFragment(s.to_owned()));
    }
    Ok(url)
}

/// True for 127.0.0.0/8, `[::1]` and `localhost`.
pub fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
        None => false,
    }
}

/// Two URIs name the same resource: equal after parsing, where a lone trailing
/// slash on the path does not count (so `https://c.example` and
/// `https://c.example/` are the same confirmation URI).
pub fn same_uri(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (Url::parse(a), Url::parse(b)) {
        (Ok(a), Ok(b)) => {
            a.scheme() == b.scheme()
                && a.host() == b.host()
                && a.port_or_known_default() == b.port_or_known_default()
                && a.path().trim_end_matches('/') == b.path().trim_end_matches('/')
                && a.query() == b.query()
                && a.fragment() == b.fragment()
        }
        _ => false,
    }
}

/// The URI pack an RS returns with `202 Accepted` (§1). Member names contain
/// spaces, exactly as in the draft.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UriPack {
    #[serde(rename = "confirmation uri")]
    pub confirmation_uri: String,
    #[serde(rename = "resource uri")]
    pub resource_uri: String,
    #[serde(rename = "result uri")]
    pub result_uri: String,
}

/// Why a URI pack is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriPackError {
    #[error("URI pack is not valid JSON: {0}")]
    Json(#[from] super::json::JsonError),
    #[error("URI pack member \"{0}\" is missing or not a string")]
    Missing(&'static str),
    #[error("URI pack member \"{member}\": {error}")]
    BadUri {
        member: &'static str,
        error: UriError,
    },
}

impl UriPack {
    /// Builds a pack from three URIs, checking each.
    pub fn new(
        confirmation_uri: &str,
        resource_uri: &str,
        result_uri: &str,
    ) -> Result<Self, UriPackError> {
        let pack = UriPack {
            confirmation_uri: confirmation_uri.to_owned(),
            resource_uri: resource_uri.to_owned(),
            result_uri: result_uri.to_owned(),
        };
        pack.validate()?;
        Ok(pack)
    }

    /// Parses a URI pack strictly (no duplicate members) and checks its URIs.
    pub fn parse(bytes: &[u8]) -> Result<Self, UriPackError> {
        let map = super::json::parse_object(bytes, 16 * 1024)?;
        let get = |name: &'static str| {
            map.get(name)
                .and_then(|v| v.as_str())
                .map(str::to_owned)
                .ok_or(UriPackError::Missing(name))
        };
        let pack = UriPack {
            confirmation_uri: get("confirmation uri")?,
            resource_uri: get("resource uri")?,
            result_uri: get("result uri")?,
        };
        pack.validate()?;
        Ok(pack)
    }

    /// Checks every URI of the pack (§1).
    pub fn validate(&self) -> Result<(), UriPackError> {
        for (member, value) in [
            ("confirmation uri", &self.confirmation_uri),
            ("resource uri", &self.resource_uri),
            ("result uri", &self.result_uri),
        ] {
            parse_cheq_uri(value).map_err(|error| UriPackError::BadUri { member, error })?;
        }
        Ok(())
    }
}

/// The origin (`scheme://host[:port]`) of a URI, as text; the input itself
/// when it does not parse.
pub fn origin_of(uri: &str) -> String {
    url::Url::parse(uri)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| uri.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_anywhere_http_only_on_loopback() {
        assert!(parse_cheq_uri("https://api.airline.example/cheq/x").is_ok());
        for ok in [
            "http://127.0.0.1:8081/cheq/x",
            "http://127.9.9.9/x",
            "http://localhost:1/x",
            "http://[::1]:80/x",
        ] {
            assert!(parse_cheq_uri(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            parse_cheq_uri("http://api.airline.example/x"),
            Err(UriError::SchemeNotAllowed(
                "http://api.airline.example/x".into()
            ))
        );
        assert!(matches!(
            parse_cheq_uri("http://10.0.0.1/x"),
            Err(UriError::SchemeNotAllowed(_))
        ));
        assert!(matches!(
            parse_cheq_uri("ftp://localhost/x"),
            Err(UriError::SchemeNotAllowed(_))
        ));
        assert!(matches!(
            parse_cheq_uri("/cheq/x"),
            Err(UriError::NotAbsolute(_))
        ));
        assert!(matches!(
            parse_cheq_uri("mailto:a@b"),
            Err(UriError::NotAbsolute(_))
        ));
        assert!(matches!(
            parse_cheq_uri("https://u:p@a.example/"),
            Err(UriError::HasCredentials(_))
        ));
        assert!(matches!(
            parse_cheq_uri("https://a.example/#f"),
            Err(UriError::HasFragment(_))
        ));
    }

    #[test]
    fn uri_pack_round_trip_and_refusals() {
        let text = br#"{"confirmation uri":"https://confirm.example","resource uri":"https://api.example/cheq/a","result uri":"https://api.example/cheq/r"}"#;
        let pack = UriPack::parse(text).unwrap();
        assert_eq!(pack.resource_uri, "https://api.example/cheq/a");
        let json = serde_json::to_string(&pack).unwrap();
        assert!(json.contains("\"confirmation uri\""));
        assert_eq!(UriPack::parse(json.as_bytes()).unwrap(), pack);
        assert!(matches!(
            UriPack::parse(br#"{"confirmation uri":"https://c","resource uri":"https://r/x"}"#),
            Err(UriPackError::Missing("result uri"))
        ));
        assert!(matches!(
            UriPack::new("https://c", "http://evil.example/x", "https://r/y"),
            Err(UriPackError::BadUri {
                member: "resource uri",
                ..
            })
        ));
    }

    #[test]
    fn same_uri_ignores_one_trailing_slash_only() {
        assert!(same_uri("https://c.example", "https://c.example/"));
        assert!(same_uri("http://127.0.0.1:8080/", "http://127.0.0.1:8080"));
        assert!(same_uri("https://c.example:443/a", "https://c.example/a/"));
        assert!(!same_uri("https://c.example", "https://d.example"));
        assert!(!same_uri("https://c.example/a", "https://c.example/b"));
        assert!(!same_uri("http://c.example", "https://c.example"));
    }
}
