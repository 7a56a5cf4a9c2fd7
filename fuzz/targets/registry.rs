//! The registry check of the CS (`Registry::new`, `Registry::find`,
//! PROTOCOL.md §2): a resource URI is fetched only when it has the scheme,
//! host and port of a registered resource server and lies under its path
//! prefix.
//!
//! The input, as text, is the resource URI. Properties of an accepted URI:
//! - it is an acceptable CHEQ URI (§1);
//! - its scheme, host and port are those of the resource server found;
//! - its path, as sent and percent-decoded, starts with the prefix and goes
//!   on past it;
//! - STRICT: its path, percent-decoded and with dot segments resolved as a
//!   server that decodes `%2F` would, still lies under the prefix.
//!
//! And completeness: `origin + prefix + a token made from the input` is
//! always accepted, for the right server.
//!
//! STRICT is checked unless `CHEQ_FUZZ_REGISTRY_STRICT=0`: the registry
//! refuses encoded separators and dot segments before any request leaves
//! (issue 8; `registry_refuses_encoded_dot_segments` in `tests/fuzz_seeds.rs`).

use super::fixtures::percent_decode;
use cheq::cheq::uri::parse_cheq_uri;
use cheq::confirm::registry::{Registry, RegistryError};
use std::sync::OnceLock;

/// The registered resource servers: `(origin, path prefix)`, as a CS
/// configuration gives them (prefixes start and end with `/`).
pub const SERVERS: &[(&str, &str)] = &[
    ("https://api.airline.example", "/cheq/"),
    ("http://127.0.0.1:8081", "/cheq/"),
    ("https://rs.example:8443", "/api/v1/cheq/"),
    ("http://[::1]:9000", "/c/"),
    ("https://bank.example", "/"),
];

/// The registry of [`SERVERS`], each valued with its position.
fn registry() -> &'static Registry<usize> {
    static R: OnceLock<Registry<usize>> = OnceLock::new();
    R.get_or_init(|| {
        Registry::new(
            SERVERS
                .iter()
                .enumerate()
                .map(|(i, (origin, prefix))| (*origin, *prefix, i)),
        )
    })
}

/// Is the STRICT property checked?
pub fn strict() -> bool {
    static S: OnceLock<bool> = OnceLock::new();
    *S.get_or_init(|| std::env::var("CHEQ_FUZZ_REGISTRY_STRICT").map_or(true, |v| v != "0"))
}

pub fn run(data: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(data);
    let r = registry();
    let found = r.find(&text).map(|i| **i);
    if let Ok(i) = found {
        check_accepted(&text, i);
        if strict() {
            if let Some(why) = escapes_prefix(&text, i) {
                panic!("{why}");
            }
        }
    }
    // Completeness: a plain token under each prefix is accepted.
    let token = cheq::sign::b64::encode(&data[..data.len().min(48)]);
    let pick = (super::fnv(data) % SERVERS.len() as u64) as usize;
    let (origin, prefix) = SERVERS[pick];
    let plain = format!("{origin}{prefix}confirmations/{token}");
    assert_eq!(r.find(&plain).map(|i| **i), Ok(pick), "{plain} refused");
    let path = url::Url::parse(&text)
        .map(|u| u.path().to_owned())
        .unwrap_or_default();
    let lower = path.to_ascii_lowercase();
    let features = ["%2f", "%5c", "%2e", "..", "//"]
        .iter()
        .enumerate()
        .filter(|(_, f)| lower.contains(*f))
        .fold(0u64, |acc, (i, _)| acc | 1 << i);
    let outcome = match &found {
        Ok(i) => *i as u64,
        Err(RegistryError::BadUri(..)) => 100,
        Err(RegistryError::NotRegistered(_)) => 101,
        Err(RegistryError::UnsafePath { .. }) => 102,
    };
    super::fnv(&[outcome.to_le_bytes(), features.to_le_bytes()].concat())
}

/// Checks an accepted URI against the server it was found for.
pub fn check_accepted(uri: &str, i: usize) {
    let (origin, prefix) = SERVERS
        .get(i)
        .copied()
        .unwrap_or_else(|| panic!("found index {i} of {}", SERVERS.len()));
    let url = parse_cheq_uri(uri).unwrap_or_else(|e| panic!("{uri:?} accepted: {e}"));
    let registered = url::Url::parse(origin).unwrap_or_else(|e| panic!("{origin}: {e}"));
    assert_eq!(url.scheme(), registered.scheme(), "{uri:?}");
    assert_eq!(url.host(), registered.host(), "{uri:?}");
    assert_eq!(
        url.port_or_known_default(),
        registered.port_or_known_default()
    );
    let path = url.path();
    assert!(
        path.starts_with(prefix) && path.len() > prefix.len(),
        "{uri:?}"
    );
    let decoded = percent_decode(path);
    assert!(
        decoded.starts_with(prefix.as_bytes()),
        "{uri:?} decodes out of {prefix}"
    );
}

/// STRICT: why `uri`, accepted for server `i`, leaves its prefix once
/// percent-decoded and resolved; `None` when it stays under it.
pub fn escapes_prefix(uri: &str, i: usize) -> Option<String> {
    let prefix = SERVERS.get(i)?.1;
    let url = parse_cheq_uri(uri).ok()?;
    let resolved = resolve(&percent_decode(url.path()));
    let under = resolved.starts_with(prefix.as_bytes()) && resolved.len() > prefix.len();
    (!under).then(|| {
        format!(
            "{uri:?} is accepted for {prefix}, but is {:?} once decoded",
            String::from_utf8_lossy(&resolved)
        )
    })
}

/// STRICT on one URI: `Err` when the registry accepts it and it leaves its
/// prefix once decoded.
pub fn run_strict(uri: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(uri);
    match registry().find(&text) {
        Ok(i) => escapes_prefix(&text, **i).map_or(Ok(()), Err),
        Err(_) => Ok(()),
    }
}

/// A decoded path with `\` read as `/` and its dot segments resolved
/// (RFC 3986 §5.2.4).
pub fn resolve(decoded: &[u8]) -> Vec<u8> {
    let text: Vec<u8> = decoded
        .iter()
        .map(|&b| if b == b'\\' { b'/' } else { b })
        .collect();
    let mut out: Vec<&[u8]> = Vec::new();
    let segments: Vec<&[u8]> = text.split(|&b| b == b'/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            b"." => {
                if i == last {
                    out.push(b"");
                }
            }
            b".." => {
                out.pop();
                if i == last {
                    out.push(b"");
                }
            }
            s => out.push(s),
        }
    }
    let mut path = Vec::with_capacity(text.len());
    for seg in out {
        path.push(b'/');
        path.extend_from_slice(seg);
    }
    if path.is_empty() {
        path.push(b'/');
    }
    path
}
