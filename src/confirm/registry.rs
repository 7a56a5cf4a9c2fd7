//! Which resource servers this CS works for (PROTOCOL.md §2): a resource URI is
//! accepted only when it has the same scheme, host and port as a registered
//! resource server and lies under its registered path prefix. Anything else is
//! refused before any network request is made (no server-side request forgery).

use crate::cheq::uri::parse_cheq_uri;
use url::Url;

/// One registered resource server, as the registry sees it.
#[derive(Debug, Clone)]
pub struct Registered {
    origin: Url,
    path_prefix: String,
}

/// Why a resource URI is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("\"{0}\" is not a valid resource URI: {1}")]
    BadUri(String, String),
    #[error("{0} is not under a resource server registered with this confirmation service")]
    NotRegistered(String),
}

/// The registered resource servers, in configuration order.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    entries: Vec<Registered>,
}

impl Registry {
    /// Builds the registry from `(origin, path_prefix)` pairs (already validated
    /// by the configuration).
    pub fn new<'a>(servers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let entries = servers
            .into_iter()
            .filter_map(|(origin, prefix)| {
                Url::parse(origin).ok().map(|origin| Registered {
                    origin,
                    path_prefix: prefix.to_owned(),
                })
            })
            .collect();
        Registry { entries }
    }

    /// The index of the resource server `resource_uri` belongs to.
    pub fn find(&self, resource_uri: &str) -> Result<usize, RegistryError> {
        let url = parse_cheq_uri(resource_uri)
            .map_err(|e| RegistryError::BadUri(resource_uri.to_owned(), e.to_string()))?;
        // The parsed URL has its dot segments resolved, so "/cheq/../admin" is
        // "/admin" here and does not pass for "/cheq/…".
        self.entries
            .iter()
            .position(|r| {
                r.origin.scheme() == url.scheme()
                    && r.origin.host() == url.host()
                    && r.origin.port_or_known_default() == url.port_or_known_default()
                    && url.path().starts_with(&r.path_prefix)
                    && url.path().len() > r.path_prefix.len()
            })
            .ok_or_else(|| RegistryError::NotRegistered(resource_uri.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Registry {
        Registry::new([
            ("https://api.airline.example", "/cheq/"),
            ("http://127.0.0.1:8081", "/cheq/"),
        ])
    }

    #[test]
    fn registered_uris_are_found() {
        let r = registry();
        assert_eq!(
            r.find("https://api.airline.example/cheq/confirmations/abc")
                .unwrap(),
            0
        );
        assert_eq!(r.find("https://api.airline.example:443/cheq/x").unwrap(), 0);
        assert_eq!(
            r.find("http://127.0.0.1:8081/cheq/confirmations/x?y=1")
                .unwrap(),
            1
        );
    }

    #[test]
    fn everything_else_is_refused() {
        let r = registry();
        for uri in [
            "https://evil.example/cheq/confirmations/abc",
            "http://api.airline.example/cheq/confirmations/abc",
            "https://api.airline.example:8443/cheq/confirmations/abc",
            "https://api.airline.example/admin",
            "https://api.airline.example/cheq/",
            "https://api.airline.example/cheq",
            "https://api.airline.example/cheq/../admin",
            "https://api.airline.example/cheq/%2e%2e/admin",
            "http://127.0.0.1:8082/cheq/x",
            "http://127.0.0.2:8081/cheq/x",
            "https://api.airline.example.evil.example/cheq/x",
            "https://user@api.airline.example/cheq/x",
            "file:///etc/passwd",
            "/cheq/confirmations/abc",
            "",
        ] {
            assert!(r.find(uri).is_err(), "{uri} was accepted");
        }
    }
}
