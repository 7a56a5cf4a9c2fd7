//! Trust (PROTOCOL.md §5 rule 2, §9): which keys are trusted for which
//! resource-server origin and which confirmation-server origin.
//!
//! A resource key is trusted only for payloads whose `resource uri` has that
//! origin; a confirmation key only for those whose `confirmation uri` has it.
//! The TRUST file:
//! `{"resource_servers":[{"origin":"https://api.example","keys":{"keys":[…]}}],
//!   "confirmation_servers":[{"origin":"https://confirm.example","keys":{"keys":[…]}}]}`

use super::keys::{Jwks, KeyError, PublicKey};
use crate::cheq::json::{self, JsonError};
use serde_json::Value;
use url::Url;

/// Why a trust file or entry is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    #[error("trust file: {0}")]
    Json(#[from] JsonError),
    #[error("trust file: {0}")]
    Shape(String),
    #[error("trust file: origin \"{0}\" is not an origin (scheme://host[:port])")]
    BadOrigin(String),
    #[error("trust file: keys for {origin}: {error}")]
    Key { origin: String, error: KeyError },
}

/// An origin: scheme, host and port.
pub type Origin = url::Origin;

/// The origin of a URI, if it has one.
pub fn origin_of(uri: &str) -> Option<Origin> {
    let url = Url::parse(uri).ok()?;
    match url.origin() {
        o @ url::Origin::Tuple(..) => Some(o),
        url::Origin::Opaque(_) => None,
    }
}

fn parse_origin(text: &str) -> Result<Origin, TrustError> {
    let url = Url::parse(text).map_err(|_| TrustError::BadOrigin(text.to_owned()))?;
    let bare = url.path() == "/" && url.query().is_none() && url.fragment().is_none();
    match url.origin() {
        o @ url::Origin::Tuple(..) if bare && url.username().is_empty() => Ok(o),
        _ => Err(TrustError::BadOrigin(text.to_owned())),
    }
}

/// Keys trusted per origin, for both roles.
#[derive(Debug, Clone, Default)]
pub struct TrustStore {
    resource_servers: Vec<(Origin, Jwks)>,
    confirmation_servers: Vec<(Origin, Jwks)>,
}

impl TrustStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a TRUST file.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TrustError> {
        let map = json::parse_object(bytes, 4 * 1024 * 1024)?;
        let mut store = TrustStore::new();
        for (member, resource) in [("resource_servers", true), ("confirmation_servers", false)] {
            let list = match map.get(member) {
                None => continue,
                Some(Value::Array(list)) => list,
                Some(_) => return Err(TrustError::Shape(format!("\"{member}\" must be an array"))),
            };
            for entry in list {
                let origin = entry.get("origin").and_then(Value::as_str).ok_or_else(|| {
                    TrustError::Shape(format!("an entry of \"{member}\" has no \"origin\""))
                })?;
                let keys = entry
                    .get("keys")
                    .ok_or_else(|| TrustError::Shape(format!("{origin}: no \"keys\"")))?;
                let jwks = Jwks::from_value(keys).map_err(|error| TrustError::Key {
                    origin: origin.to_owned(),
                    error,
                })?;
                if resource {
                    store.add_resource_server(origin, jwks)?;
                } else {
                    store.add_confirmation_server(origin, jwks)?;
                }
            }
        }
        Ok(store)
    }

    /// Trusts `keys` to sign as the resource server at `origin`.
    pub fn add_resource_server(&mut self, origin: &str, keys: Jwks) -> Result<(), TrustError> {
        let origin = parse_origin(origin)?;
        self.resource_servers.push((origin, keys));
        Ok(())
    }

    /// Trusts `keys` to countersign as the confirmation server at `origin`.
    pub fn add_confirmation_server(&mut self, origin: &str, keys: Jwks) -> Result<(), TrustError> {
        let origin = parse_origin(origin)?;
        self.confirmation_servers.push((origin, keys));
        Ok(())
    }

    /// The key `kid` trusted for resource signatures on payloads whose
    /// `resource uri` is `resource_uri`.
    pub fn resource_key(&self, resource_uri: &str, kid: &str) -> Option<&PublicKey> {
        find(&self.resource_servers, resource_uri, kid)
    }

    /// The key `kid` trusted for confirmation signatures on payloads whose
    /// `confirmation uri` is `confirmation_uri`.
    pub fn confirmation_key(&self, confirmation_uri: &str, kid: &str) -> Option<&PublicKey> {
        find(&self.confirmation_servers, confirmation_uri, kid)
    }
}

fn find<'a>(list: &'a [(Origin, Jwks)], uri: &str, kid: &str) -> Option<&'a PublicKey> {
    let origin = origin_of(uri)?;
    list.iter()
        .filter(|(o, _)| *o == origin)
        .find_map(|(_, keys)| keys.get(kid))
}
