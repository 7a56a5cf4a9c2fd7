//! Trust (PROTOCOL.md §5 rule 2, §9): which keys are trusted for which
//! resource-server origin and which confirmation-server origin.
//!
//! A resource key is trusted only for payloads whose `resource uri` has that
//! origin; a confirmation key only for those whose `confirmation uri` has it.
//! The TRUST file:
//! `{"resource_servers":[{"origin":"https://api.example","keys":{"keys":[…]}}],
//!   "confirmation_servers":[{"origin":"https://confirm.example","keys":{"keys":[…]}}]}`
//! where an entry may name its keys by `"jwks_uri"` (a peer's published set)
//! or `"jwks_file"` instead of `"keys"`: [`TrustEntry`] says which, and the
//! caller, which may do I/O, reads them.
//!
//! Keys come from a [`KeySource`]: a fixed [`Jwks`], or a set that changes
//! over time (a server's own key set, a peer's set fetched by `jwks_uri`),
//! asked at the moment of each verification.

use super::keys::{Jwks, KeyError, PublicKey};
use crate::cheq::json::{self, JsonError};
use serde_json::Value;
use std::sync::Arc;
use url::Url;

/// Where trusted keys come from when a signature is checked: asked for one
/// key id at a time, so that a set may change between two verifications.
pub trait KeySource: Send + Sync + std::fmt::Debug {
    /// The trusted key `kid`, if this source has it now.
    fn key(&self, kid: &str) -> Option<PublicKey>;
}

impl KeySource for Jwks {
    fn key(&self, kid: &str) -> Option<PublicKey> {
        self.get(kid).cloned()
    }
}

/// Where a TRUST file entry's keys are.
#[derive(Debug, Clone)]
pub enum EntryKeys {
    /// In the entry (`"keys"`).
    Inline(Jwks),
    /// Published at a URI (`"jwks_uri"`).
    Uri(String),
    /// In a file (`"jwks_file"`, relative to the TRUST file's folder).
    File(String),
}

/// One entry of a TRUST file.
#[derive(Debug, Clone)]
pub struct TrustEntry {
    /// A resource server (`true`) or a confirmation server.
    pub resource: bool,
    pub origin: String,
    pub keys: EntryKeys,
}

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

/// Reads the entries of a TRUST file, without reading what they point at.
pub fn trust_entries(bytes: &[u8]) -> Result<Vec<TrustEntry>, TrustError> {
    let map = json::parse_object(bytes, 4 * 1024 * 1024)?;
    let mut entries = Vec::new();
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
            parse_origin(origin)?;
            let named: Vec<&str> = ["keys", "jwks_uri", "jwks_file"]
                .into_iter()
                .filter(|m| entry.get(*m).is_some())
                .collect();
            let keys = match named.as_slice() {
                ["keys"] => EntryKeys::Inline(entry.get("keys").map_or(
                    Err(KeyError::NotASet),
                    Jwks::from_value,
                )
                .map_err(|error| TrustError::Key {
                    origin: origin.to_owned(),
                    error,
                })?),
                [m] => {
                    let text = entry.get(*m).and_then(Value::as_str).ok_or_else(|| {
                        TrustError::Shape(format!("{origin}: \"{m}\" must be a string"))
                    })?;
                    if *m == "jwks_uri" {
                        EntryKeys::Uri(text.to_owned())
                    } else {
                        EntryKeys::File(text.to_owned())
                    }
                }
                _ => {
                    return Err(TrustError::Shape(format!(
                        "{origin}: exactly one of \"keys\", \"jwks_uri\" and \"jwks_file\" must be given"
                    )))
                }
            };
            entries.push(TrustEntry {
                resource,
                origin: origin.to_owned(),
                keys,
            });
        }
    }
    Ok(entries)
}

/// Keys trusted per origin, for both roles.
#[derive(Debug, Clone, Default)]
pub struct TrustStore {
    resource_servers: Vec<(Origin, Arc<dyn KeySource>)>,
    confirmation_servers: Vec<(Origin, Arc<dyn KeySource>)>,
}

impl TrustStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a TRUST file whose entries all carry their keys (`"keys"`).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TrustError> {
        let mut store = TrustStore::new();
        for entry in trust_entries(bytes)? {
            let EntryKeys::Inline(jwks) = entry.keys else {
                return Err(TrustError::Shape(format!(
                    "{}: keys by \"jwks_uri\" or \"jwks_file\" must be read first",
                    entry.origin
                )));
            };
            store.add(entry.resource, &entry.origin, Arc::new(jwks))?;
        }
        Ok(store)
    }

    /// Trusts the keys of `source` for `origin`, as a resource server
    /// (`resource`) or a confirmation server.
    pub fn add(
        &mut self,
        resource: bool,
        origin: &str,
        source: Arc<dyn KeySource>,
    ) -> Result<(), TrustError> {
        let origin = parse_origin(origin)?;
        if resource {
            self.resource_servers.push((origin, source));
        } else {
            self.confirmation_servers.push((origin, source));
        }
        Ok(())
    }

    /// Trusts `keys` to sign as the resource server at `origin`.
    pub fn add_resource_server(&mut self, origin: &str, keys: Jwks) -> Result<(), TrustError> {
        self.add(true, origin, Arc::new(keys))
    }

    /// Trusts `keys` to countersign as the confirmation server at `origin`.
    pub fn add_confirmation_server(&mut self, origin: &str, keys: Jwks) -> Result<(), TrustError> {
        self.add(false, origin, Arc::new(keys))
    }

    /// The key `kid` trusted for resource signatures on payloads whose
    /// `resource uri` is `resource_uri`.
    pub fn resource_key(&self, resource_uri: &str, kid: &str) -> Option<PublicKey> {
        find(&self.resource_servers, resource_uri, kid)
    }

    /// The key `kid` trusted for confirmation signatures on payloads whose
    /// `confirmation uri` is `confirmation_uri`.
    pub fn confirmation_key(&self, confirmation_uri: &str, kid: &str) -> Option<PublicKey> {
        find(&self.confirmation_servers, confirmation_uri, kid)
    }

    /// [`TrustStore::resource_key`] for an origin already parsed.
    pub fn resource_key_at(&self, origin: &Origin, kid: &str) -> Option<PublicKey> {
        find_at(&self.resource_servers, origin, kid)
    }

    /// [`TrustStore::confirmation_key`] for an origin already parsed.
    pub fn confirmation_key_at(&self, origin: &Origin, kid: &str) -> Option<PublicKey> {
        find_at(&self.confirmation_servers, origin, kid)
    }

    /// Every confirmation key `kid`, with the origin it is trusted for: to
    /// tell a signature by another confirmation server (trusted, but not
    /// for the origin at hand) from one by a key no one trusts.
    pub fn confirmation_keys_named(&self, kid: &str) -> Vec<(Origin, PublicKey)> {
        self.confirmation_servers
            .iter()
            .filter_map(|(o, keys)| keys.key(kid).map(|k| (o.clone(), k)))
            .collect()
    }
}

fn find(list: &[(Origin, Arc<dyn KeySource>)], uri: &str, kid: &str) -> Option<PublicKey> {
    find_at(list, &origin_of(uri)?, kid)
}

fn find_at(list: &[(Origin, Arc<dyn KeySource>)], origin: &Origin, kid: &str) -> Option<PublicKey> {
    list.iter()
        .filter(|(o, _)| o == origin)
        .find_map(|(_, keys)| keys.key(kid))
}
