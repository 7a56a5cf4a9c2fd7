//! Which resource servers this CS works for (PROTOCOL.md §2): a resource URI is
//! accepted only when it has the same scheme, host and port as a registered
//! resource server and lies under its registered path prefix. Anything else is
//! refused before any network request is made (no server-side request forgery).
//!
//! The prefix is checked on the path as the resource server will read it: the
//! percent-decoded path. A resource URI is a capability URL made by the RS, so
//! it has no reason to hide anything in its path; one whose path is not in
//! normal form is refused outright rather than normalised, because the CS and
//! the RS (or a proxy in front of it) might normalise it differently
//! (`/cheq/..%2f..%2foauth%2ftoken` is under `/cheq/` for a URL parser and is
//! `/oauth/token` for a server that decodes first). Refused are: a raw `\`; a
//! path the URL parser would change (raw `/./` or `/../`, `%2e%2e`, `.%2e`,
//! tabs or line breaks); and a segment that, decoded once or more
//! (`%252f` → `%2f` → `/`), holds `/`, `\`, `?`, `#` or a control character,
//! or is `.` or `..` (also before a `;` parameter).

use cheq_core::cheq::uri::parse_cheq_uri;
use std::collections::HashMap;
use std::sync::Arc;
use url::Url;

/// How many rounds of percent-decoding a path may take before it stops
/// changing; `%25252f` (three rounds) is already more than any honest URI has.
const MAX_DECODING_ROUNDS: usize = 3;

/// One registered resource server: where its URIs are, and what the caller
/// keeps for it (for the CS, its client, keys and settings).
#[derive(Debug)]
struct Registered<T> {
    origin: Url,
    path_prefix: String,
    value: Arc<T>,
}

/// Why a resource URI is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("\"{0}\" is not a valid resource URI: {1}")]
    BadUri(String, String),
    #[error("{0} is not under a resource server registered with this confirmation service")]
    NotRegistered(String),
    #[error("{uri} is refused: its path {reason}")]
    UnsafePath { uri: String, reason: &'static str },
}

/// The registered resource servers, in configuration order, each with its
/// value: a look-up gives the resource server itself, not a position in
/// lists kept beside the registry.
#[derive(Debug)]
pub struct Registry<T> {
    entries: Vec<Registered<T>>,
    /// The positions of each origin's entries (`scheme://host:port`, the
    /// port always written): a look-up reads the entries of one origin,
    /// however many resource servers a public host serves.
    by_origin: HashMap<String, Vec<usize>>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry {
            entries: Vec::new(),
            by_origin: HashMap::new(),
        }
    }
}

/// The key of [`Registry::by_origin`]: scheme, host and port (the default
/// port written out, so that `https://a` and `https://a:443` meet).
fn origin_key(url: &Url) -> Option<String> {
    Some(format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str()?,
        url.port_or_known_default()?
    ))
}

/// Why a path prefix cannot delimit a resource server's URIs (§2), if it
/// cannot: it must start and end with `/` (so that it matches whole path
/// segments) and be a plain path, since it is compared with the
/// percent-decoded path.
pub fn check_path_prefix(prefix: &str) -> Result<(), &'static str> {
    if !prefix.starts_with('/') || !prefix.ends_with('/') {
        return Err(
            "must start and end with '/' (\"/cheq/\"), so that it matches whole path segments",
        );
    }
    if prefix.contains(['%', '\\', '?', '#'])
        || prefix.split('/').any(|s| s == "." || s == "..")
        || prefix.chars().any(char::is_control)
    {
        return Err(
            "must be a plain path: no '%', '\\', '?', '#', control characters or dot segments",
        );
    }
    Ok(())
}

impl<T> Registry<T> {
    /// Builds the registry from `(origin, path_prefix, value)` triples, the
    /// origins and prefixes already validated; an origin that does not
    /// parse is left out.
    pub fn new<'a, V: Into<Arc<T>>>(
        servers: impl IntoIterator<Item = (&'a str, &'a str, V)>,
    ) -> Self {
        let mut registry = Registry::default();
        for (origin, prefix, value) in servers {
            let Ok(origin) = Url::parse(origin) else {
                continue;
            };
            let Some(key) = origin_key(&origin) else {
                continue;
            };
            registry
                .by_origin
                .entry(key)
                .or_default()
                .push(registry.entries.len());
            registry.entries.push(Registered {
                origin,
                path_prefix: prefix.to_owned(),
                value: value.into(),
            });
        }
        registry
    }

    /// How many resource servers it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Each registered resource server's origin and value, in order.
    pub fn iter(&self) -> impl Iterator<Item = (String, &Arc<T>)> + '_ {
        self.entries
            .iter()
            .map(|r| (r.origin.origin().ascii_serialization(), &r.value))
    }

    /// The resource server `resource_uri` belongs to.
    pub fn find(&self, resource_uri: &str) -> Result<&Arc<T>, RegistryError> {
        let unsafe_path = |reason| RegistryError::UnsafePath {
            uri: resource_uri.to_owned(),
            reason,
        };
        if resource_uri.contains('\\') {
            return Err(unsafe_path("holds a backslash"));
        }
        let url = parse_cheq_uri(resource_uri)
            .map_err(|e| RegistryError::BadUri(resource_uri.to_owned(), e.to_string()))?;
        // The URL parser resolves dot segments ("/cheq/../admin" is "/admin"
        // to it) and drops tabs and line breaks: a path it changed was not in
        // normal form, and what the RS would read is not what was checked.
        let raw =
            raw_path(resource_uri).ok_or_else(|| unsafe_path("is not after scheme://host"))?;
        if raw != url.path() && !(raw.is_empty() && url.path() == "/") {
            return Err(unsafe_path(
                "is not in normal form (dot segments, or characters the URL parser changes)",
            ));
        }
        let decoded = decoded_path(url.path()).map_err(unsafe_path)?;
        let candidates = origin_key(&url)
            .and_then(|k| self.by_origin.get(&k))
            .map(Vec::as_slice)
            .unwrap_or_default();
        candidates
            .iter()
            .filter_map(|&i| self.entries.get(i))
            .find(|r| {
                r.origin.scheme() == url.scheme()
                    && r.origin.host() == url.host()
                    && r.origin.port_or_known_default() == url.port_or_known_default()
                    // The prefix as written and as the RS decodes it.
                    && url.path().starts_with(&r.path_prefix)
                    && decoded.starts_with(&r.path_prefix)
                    && decoded.len() > r.path_prefix.len()
            })
            .map(|r| &r.value)
            .ok_or_else(|| RegistryError::NotRegistered(resource_uri.to_owned()))
    }
}

/// The path of an absolute URI as written (after `scheme://authority`, up to
/// `?` or `#`); `None` when there is no `://`.
fn raw_path(uri: &str) -> Option<&str> {
    let rest = &uri[uri.find("://")? + 3..];
    let rest = &rest[rest.find(['/', '?', '#']).unwrap_or(rest.len())..];
    Some(&rest[..rest.find(['?', '#']).unwrap_or(rest.len())])
}

/// The path as a server that percent-decodes it reads it, decoded until it
/// no longer changes; refused (with the reason) when any decoding round of
/// any segment hides a separator, a delimiter, a control character or a dot
/// segment.
fn decoded_path(path: &str) -> Result<String, &'static str> {
    let mut segments = Vec::new();
    for segment in path.split('/') {
        let mut current = segment.as_bytes().to_vec();
        let mut rounds = 0;
        loop {
            check_segment(&current)?;
            let next = percent_decode(&current);
            if next == current {
                break;
            }
            rounds += 1;
            if rounds > MAX_DECODING_ROUNDS {
                return Err("is percent-encoded too many times over");
            }
            current = next;
        }
        segments.push(String::from_utf8(current).map_err(|_| "is not UTF-8 once decoded")?);
    }
    Ok(segments.join("/"))
}

/// One path segment (raw or decoded) that a server could read as more than
/// one name.
fn check_segment(segment: &[u8]) -> Result<(), &'static str> {
    if segment.contains(&b'/') || segment.contains(&b'\\') {
        return Err("hides a '/' or '\\' in percent-encoding");
    }
    if segment.iter().any(|&b| b == b'?' || b == b'#') {
        return Err("hides a '?' or '#' in percent-encoding");
    }
    if segment.iter().any(|&b| b < 0x20 || b == 0x7f) {
        return Err("holds a control character");
    }
    // "..;x" is ".." to servers that drop path parameters.
    let name = segment.split(|&b| b == b';').next().unwrap_or_default();
    if name == b"." || name == b".." {
        return Err("holds a dot segment ('.' or '..') in some form");
    }
    Ok(())
}

/// One round of percent-decoding; a `%` not followed by two hex digits stays.
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let pair = (bytes.get(i + 1).copied(), bytes.get(i + 2).copied());
        if let (b'%', (Some(h), Some(l))) = (bytes[i], pair) {
            if let (Some(h), Some(l)) = (hex(h), hex(l)) {
                // Two hex digits are at most 255.
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two resource servers, whose values are their positions.
    fn registry() -> Registry<usize> {
        Registry::new([
            ("https://api.airline.example", "/cheq/", 0),
            ("http://127.0.0.1:8081", "/cheq/", 1),
        ])
    }

    #[test]
    fn registered_uris_are_found() {
        let r = registry();
        assert_eq!(
            **r.find("https://api.airline.example/cheq/confirmations/abc")
                .unwrap(),
            0
        );
        assert_eq!(
            **r.find("https://api.airline.example:443/cheq/x").unwrap(),
            0
        );
        assert_eq!(
            **r.find("http://127.0.0.1:8081/cheq/confirmations/x?y=1")
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

    #[test]
    fn encoded_separators_and_dot_segments_are_refused() {
        let r = registry();
        for path in [
            // Encoded slashes and backslashes, either case, once or twice.
            "/cheq/..%2f..%2foauth%2ftoken",
            "/cheq/..%2F..%2Foauth%2Ftoken",
            "/cheq/x%2fy",
            "/cheq/..%5c..%5coauth%5ctoken",
            "/cheq/..%5C..%5Coauth",
            "/cheq/..%252f..%252foauth%252ftoken",
            "/cheq/..%255c..%255coauth",
            "/cheq/x%25252fy",
            // Dot segments, raw or encoded in any mix.
            "/cheq/./x",
            "/cheq/../oauth/token",
            "/cheq/x/../y",
            "/cheq/x/./y",
            "/cheq/%2e%2e/oauth/token",
            "/cheq/%2E%2E/oauth/token",
            "/cheq/.%2e/oauth/token",
            "/cheq/%2e./oauth/token",
            "/cheq/%2e/x",
            "/cheq/x/%2e%2e",
            "/cheq/%252e%252e/oauth/token",
            "/cheq/%25252e%25252e/x",
            "/cheq/..;/oauth/token",
            "/cheq/%2e%2e;x/oauth/token",
            // Raw backslashes (a URL parser reads them as '/').
            "/cheq\\..\\oauth\\token",
            "/cheq/x\\y",
            // Delimiters and control characters hidden in encoding.
            "/cheq/x%3f/y",
            "/cheq/x%23y",
            "/cheq/x%00y",
            "/cheq/x%0ay",
            "/cheq/.\t./oauth",
            // Percent-encoded too many times over.
            "/cheq/x%2525252541",
        ] {
            for origin in ["https://api.airline.example", "http://127.0.0.1:8081"] {
                let uri = format!("{origin}{path}");
                match r.find(&uri) {
                    Err(RegistryError::UnsafePath { .. }) => {}
                    other => panic!("{uri}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn the_prefix_is_checked_on_the_decoded_path() {
        let r = registry();
        // Honest encodings inside a segment stay acceptable …
        assert_eq!(
            **r.find("https://api.airline.example/cheq/a%20b").unwrap(),
            0
        );
        assert_eq!(
            **r.find("https://api.airline.example/cheq/a%2Bb").unwrap(),
            0
        );
        assert_eq!(
            **r.find("https://api.airline.example/cheq/a%25b").unwrap(),
            0
        );
        assert_eq!(
            **r.find("https://api.airline.example/cheq/x.y/..z").unwrap(),
            0
        );
        // … and the prefix must hold as written and as the RS reads it.
        assert!(r.find("https://api.airline.example/%63heq/x").is_err());
        assert!(r.find("https://api.airline.example/ch%65q").is_err());
        assert!(r.find("https://api.airline.example/cheq%2f").is_err());
        assert!(r
            .find("https://api.airline.example/admin/%2e%2e/cheq/x")
            .is_err());
    }

    #[test]
    fn percent_decoding_is_one_round() {
        assert_eq!(percent_decode(b"%252f"), b"%2f");
        assert_eq!(percent_decode(b"%2F%5c"), b"/\\");
        assert_eq!(percent_decode(b"100%"), b"100%");
        assert_eq!(percent_decode(b"%zz%4"), b"%zz%4");
        assert_eq!(decoded_path("/cheq/a%2520b"), Ok("/cheq/a b".to_owned()));
    }
}
