//! The two discovery documents (PROTOCOL.md §16.1, §16.2): what a CS and an
//! RS publish at `/.well-known/` so that two servers that never met can
//! find each other's endpoints and keys.
//!
//! A document is read only through [`CsConfiguration::read`] or
//! [`ResourceDocument::read`], which check it against the origin it was
//! fetched from: everything it names must be on that origin, so a document
//! cannot point a reader at another host (or at an address inside the
//! reader's network through another name). Unknown members are ignored.

use crate::cheq::json::parse_value;
use crate::cheq::uri::parse_cheq_uri;
use serde::{Deserialize, Serialize};
use url::Url;

/// Where a CS publishes its document.
pub const CS_CONFIGURATION_PATH: &str = "/.well-known/cheq-configuration";
/// Where an RS publishes its document.
pub const RESOURCE_PATH: &str = "/.well-known/cheq-resource";
/// The protocol versions this implementation speaks.
pub const VERSIONS: [&str; 1] = ["1.0"];
/// Longest `name` kept.
pub const MAX_NAME_LEN: usize = 100;
/// Longest document read.
pub const MAX_DOCUMENT: usize = 64 * 1024;

/// `token_endpoint_auth_methods_supported`'s `client_secret_basic`.
pub const CLIENT_SECRET_BASIC: &str = "client_secret_basic";
/// `token_endpoint_auth_methods_supported`'s `private_key_jwt` (§16.4).
pub const PRIVATE_KEY_JWT: &str = "private_key_jwt";

/// Why a document is refused; each names the member at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    #[error("the document is not JSON of the expected shape: {0}")]
    NotJson(String),
    #[error("\"{member}\" is {found}, not the origin it was fetched from ({origin})")]
    NotTheOrigin {
        member: &'static str,
        found: String,
        origin: String,
    },
    #[error("\"{member}\" ({found}) is not on the origin {origin}")]
    OffOrigin {
        member: &'static str,
        found: String,
        origin: String,
    },
    #[error("\"{member}\" is not a usable URI: {reason}")]
    BadUri {
        member: &'static str,
        reason: String,
    },
    #[error(
        "\"name\" is empty, longer than {MAX_NAME_LEN} characters, or holds control characters"
    )]
    BadName,
    #[error("the document supports no version this reader speaks (1.0)")]
    NoVersion,
}

/// The log member of a CS's document (§15).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogInfo {
    pub prefix: String,
    pub key: String,
}

/// A CS's discovery document (§16.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CsConfiguration {
    pub issuer: String,
    /// What the CS calls itself, for a person choosing it (§17); readers
    /// fall back to its host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub confirmation_uri: String,
    pub jwks_uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registration_endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_api: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogInfo>,
    #[serde(default)]
    pub assurances_supported: Vec<String>,
    #[serde(default)]
    pub versions: Vec<String>,
}

/// An RS's discovery document (§16.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceDocument {
    pub resource: String,
    pub name: String,
    pub resource_prefix: String,
    pub jwks_uri: String,
    pub token_endpoint: String,
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Vec<String>,
}

/// The origin of an absolute URI (`scheme://host[:port]`), if it has one.
pub fn origin(uri: &str) -> Option<String> {
    crate::sign::trust::origin_of(uri).map(|o| o.ascii_serialization())
}

/// `text` when it is an origin and nothing more (`http` or `https`, a host,
/// no path but `/`, no query, fragment or user information), written as
/// origins are compared (the default port left out).
pub fn bare_origin(text: &str) -> Option<String> {
    let url = Url::parse(text).ok()?;
    let bare = matches!(url.scheme(), "https" | "http")
        && url.host().is_some()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none();
    bare.then(|| url.origin().ascii_serialization())
}

/// `member` as a CHEQ URI (https, or http on loopback) on `origin`.
fn on_origin(member: &'static str, uri: &str, origin_: &str) -> Result<Url, DiscoveryError> {
    let url = parse_cheq_uri(uri).map_err(|e| DiscoveryError::BadUri {
        member,
        reason: e.to_string(),
    })?;
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err(DiscoveryError::BadUri {
            member,
            reason: "it carries a query, a fragment or user information".into(),
        });
    }
    if origin(uri).as_deref() != Some(origin_) {
        return Err(DiscoveryError::OffOrigin {
            member,
            found: uri.to_owned(),
            origin: origin_.to_owned(),
        });
    }
    Ok(url)
}

/// `member` is the origin `origin_` and nothing more, however it is
/// spelled (`https://API.example:443/` is `https://api.example`).
fn is_origin(member: &'static str, value: &str, origin_: &str) -> Result<(), DiscoveryError> {
    if bare_origin(value).as_deref() != Some(origin_) {
        return Err(DiscoveryError::NotTheOrigin {
            member,
            found: value.to_owned(),
            origin: origin_.to_owned(),
        });
    }
    Ok(())
}

/// A name a person is shown: 1 to [`MAX_NAME_LEN`] characters once
/// trimmed, none of them a control character.
pub fn good_name(name: &str) -> bool {
    let name = name.trim();
    !name.is_empty() && name.chars().count() <= MAX_NAME_LEN && !name.chars().any(char::is_control)
}

fn read_json<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, DiscoveryError> {
    let value =
        parse_value(bytes, MAX_DOCUMENT).map_err(|e| DiscoveryError::NotJson(e.to_string()))?;
    serde_json::from_value(value).map_err(|e| DiscoveryError::NotJson(e.to_string()))
}

impl CsConfiguration {
    /// Reads and checks the document fetched from `fetched_origin`.
    pub fn read(bytes: &[u8], fetched_origin: &str) -> Result<Self, DiscoveryError> {
        let doc: CsConfiguration = read_json(bytes)?;
        is_origin("issuer", &doc.issuer, fetched_origin)?;
        if doc.name.as_deref().is_some_and(|n| !good_name(n)) {
            return Err(DiscoveryError::BadName);
        }
        on_origin("confirmation_uri", &doc.confirmation_uri, fetched_origin)?;
        on_origin("jwks_uri", &doc.jwks_uri, fetched_origin)?;
        if let Some(r) = &doc.registration_endpoint {
            on_origin("registration_endpoint", r, fetched_origin)?;
        }
        if let Some(r) = &doc.raw_api {
            on_origin("raw_api", r, fetched_origin)?;
        }
        if let Some(r) = &doc.inbox {
            on_origin("inbox", r, fetched_origin)?;
        }
        if !doc.versions.is_empty() && !doc.versions.iter().any(|v| VERSIONS.contains(&v.as_str()))
        {
            return Err(DiscoveryError::NoVersion);
        }
        Ok(CsConfiguration {
            issuer: fetched_origin.to_owned(),
            ..doc
        })
    }
}

impl ResourceDocument {
    /// Reads and checks the document fetched from `fetched_origin`.
    pub fn read(bytes: &[u8], fetched_origin: &str) -> Result<Self, DiscoveryError> {
        let doc: ResourceDocument = read_json(bytes)?;
        is_origin("resource", &doc.resource, fetched_origin)?;
        let name = doc.name.trim();
        if !good_name(name) {
            return Err(DiscoveryError::BadName);
        }
        on_origin("resource_prefix", &doc.resource_prefix, fetched_origin)?;
        on_origin("jwks_uri", &doc.jwks_uri, fetched_origin)?;
        on_origin("token_endpoint", &doc.token_endpoint, fetched_origin)?;
        Ok(ResourceDocument {
            resource: fetched_origin.to_owned(),
            name: name.to_owned(),
            ..doc
        })
    }

    /// The path prefix resource URIs lie under.
    pub fn path_prefix(&self) -> String {
        Url::parse(&self.resource_prefix)
            .map(|u| u.path().to_owned())
            .unwrap_or_else(|_| "/".into())
    }

    /// Whether the RS takes a CS's client assertion (§16.4).
    pub fn takes_private_key_jwt(&self) -> bool {
        self.token_endpoint_auth_methods_supported
            .iter()
            .any(|m| m == PRIVATE_KEY_JWT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RS: &str = "https://api.airline.example";

    fn rs_doc() -> serde_json::Value {
        json!({
            "resource": RS,
            "name": "Example Air",
            "resource_prefix": "https://api.airline.example/cheq/confirmations/",
            "jwks_uri": "https://api.airline.example/.well-known/jwks.json",
            "token_endpoint": "https://api.airline.example/oauth/token",
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "private_key_jwt"],
            "unknown": true
        })
    }

    fn read_rs(v: &serde_json::Value) -> Result<ResourceDocument, DiscoveryError> {
        ResourceDocument::read(v.to_string().as_bytes(), RS)
    }

    #[test]
    fn the_example_reads() {
        let doc = read_rs(&rs_doc()).unwrap();
        assert_eq!(doc.path_prefix(), "/cheq/confirmations/");
        assert!(doc.takes_private_key_jwt());
        let cs = json!({
            "issuer": "https://confirm.example",
            "confirmation_uri": "https://confirm.example/confirm",
            "jwks_uri": "https://confirm.example/.well-known/jwks.json",
            "registration_endpoint": "https://confirm.example/api/v1/resource-servers",
            "versions": ["1.0"]
        });
        let read = CsConfiguration::read(cs.to_string().as_bytes(), "https://confirm.example");
        assert_eq!(
            read.unwrap().confirmation_uri,
            "https://confirm.example/confirm"
        );
    }

    #[test]
    fn the_origin_may_be_spelled_in_any_way_that_names_it() {
        let mut spelled = rs_doc();
        spelled["resource"] = json!("https://API.airline.example:443/");
        assert_eq!(read_rs(&spelled).unwrap().resource, RS);
        for not in [
            "https://api.airline.example/cheq",
            "https://api.airline.example/?x",
            "https://user@api.airline.example",
            "https://api.airline.example:8443",
        ] {
            let mut doc = rs_doc();
            doc["resource"] = json!(not);
            assert!(
                matches!(read_rs(&doc), Err(DiscoveryError::NotTheOrigin { .. })),
                "{not}"
            );
        }
    }

    #[test]
    fn a_document_that_points_elsewhere_is_refused() {
        let mut other = rs_doc();
        other["resource"] = json!("https://evil.example");
        assert!(matches!(
            read_rs(&other),
            Err(DiscoveryError::NotTheOrigin {
                member: "resource",
                ..
            })
        ));
        for member in ["resource_prefix", "jwks_uri", "token_endpoint"] {
            let mut off = rs_doc();
            off[member] = json!("https://169.254.169.254/latest/");
            assert!(
                matches!(read_rs(&off), Err(DiscoveryError::OffOrigin { member: m, .. }) if m == member),
                "{member}"
            );
            let mut port = rs_doc();
            port[member] = json!("https://api.airline.example:8443/x");
            assert!(read_rs(&port).is_err(), "{member} on another port");
        }
        let mut http = rs_doc();
        http["jwks_uri"] = json!("http://api.airline.example/jwks");
        assert!(matches!(read_rs(&http), Err(DiscoveryError::BadUri { .. })));
        let mut name = rs_doc();
        name["name"] = json!("line\nbreak");
        assert_eq!(read_rs(&name), Err(DiscoveryError::BadName));
        let mut missing = rs_doc();
        missing.as_object_mut().unwrap().remove("token_endpoint");
        assert!(matches!(read_rs(&missing), Err(DiscoveryError::NotJson(_))));
        assert!(matches!(
            ResourceDocument::read(b"<html>", RS),
            Err(DiscoveryError::NotJson(_))
        ));
        let cs = json!({
            "issuer": "https://confirm.example",
            "confirmation_uri": "https://confirm.example/confirm",
            "jwks_uri": "https://keys.example/jwks.json"
        });
        assert!(matches!(
            CsConfiguration::read(cs.to_string().as_bytes(), "https://confirm.example"),
            Err(DiscoveryError::OffOrigin {
                member: "jwks_uri",
                ..
            })
        ));
        let cs = json!({
            "issuer": "https://other.example",
            "confirmation_uri": "https://confirm.example/confirm",
            "jwks_uri": "https://confirm.example/jwks.json"
        });
        assert!(matches!(
            CsConfiguration::read(cs.to_string().as_bytes(), "https://confirm.example"),
            Err(DiscoveryError::NotTheOrigin {
                member: "issuer",
                ..
            })
        ));
    }
}
