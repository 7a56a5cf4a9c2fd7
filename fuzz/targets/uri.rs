//! URI parsing (`cheq::cheq::uri`, PROTOCOL.md §1): the URI pack and the
//! rules every CHEQ URI follows.
//!
//! The same bytes are read both as a URI pack and (as text) as one URI.
//! Properties:
//! - an accepted URI is absolute with a host, `https` or `http` on a
//!   loopback host only (checked here independently), carries no user name,
//!   password or fragment, and reads back the same from its own text;
//! - `same_uri` is reflexive and symmetric, and true between a URI and its
//!   normalised text; `origin_of` agrees with the origin computed here;
//! - an accepted pack has three acceptable URIs, `UriPack::new` accepts the
//!   same three, and the pack written with serde is read back equal;
//!   a pack is accepted exactly when its members are strings that pass.

use super::fixtures::origin;
use super::variant;
use cheq::cheq::uri::{is_loopback, origin_of, parse_cheq_uri, same_uri};
use cheq::cheq::{UriPack, UriPackError};
use std::net::IpAddr;

pub fn run(data: &[u8]) -> u64 {
    let pack = UriPack::parse(data);
    let mut out = variant(0x7572, &pack.as_ref().map(|_| ()));
    match &pack {
        Ok(p) => {
            for u in [&p.confirmation_uri, &p.resource_uri, &p.result_uri] {
                check_one(u);
            }
            let again = UriPack::new(&p.confirmation_uri, &p.resource_uri, &p.result_uri);
            assert_eq!(again.as_ref(), Ok(p));
            let written = serde_json::to_vec(p).unwrap_or_else(|e| panic!("write: {e}"));
            assert_eq!(UriPack::parse(&written).as_ref(), Ok(p));
        }
        Err(UriPackError::BadUri { member, error }) => {
            // The member named is really there and really refused.
            let m = cheq::cheq::json::parse_object(data, 16 * 1024)
                .unwrap_or_else(|e| panic!("BadUri for a document that does not parse: {e}"));
            let text = m.get(*member).and_then(|v| v.as_str());
            let text = text.unwrap_or_else(|| panic!("BadUri names {member}, not a string"));
            assert_eq!(parse_cheq_uri(text).as_ref().err(), Some(error));
        }
        Err(_) => {}
    }
    let text = String::from_utf8_lossy(data);
    for line in text.lines().take(4) {
        out ^= check_one(line).rotate_left(7);
    }
    out
}

/// Checks the properties of one URI; returns the class of the outcome.
fn check_one(s: &str) -> u64 {
    let parsed = parse_cheq_uri(s);
    assert!(same_uri(s, s), "same_uri is not reflexive for {s:?}");
    if let Ok(url) = &parsed {
        let host = url.host_str();
        let host = host.unwrap_or_else(|| panic!("accepted {s:?} without a host"));
        match url.scheme() {
            "https" => {}
            "http" => assert!(
                loopback_host(host),
                "http accepted for {host:?}, not a loopback host: {s:?}"
            ),
            other => panic!("scheme {other:?} accepted in {s:?}"),
        }
        assert!(is_loopback(url) == loopback_host(host) || url.scheme() == "https");
        assert!(
            url.username().is_empty() && url.password().is_none(),
            "{s:?}"
        );
        assert!(url.fragment().is_none(), "fragment accepted in {s:?}");
        assert!(!url.cannot_be_a_base(), "{s:?}");
        // Its own text reads back the same, and names the same resource.
        let again = parse_cheq_uri(url.as_str());
        assert_eq!(again.as_ref(), Ok(url), "{s:?} does not read back the same");
        assert!(
            same_uri(s, url.as_str()) && same_uri(url.as_str(), s),
            "{s:?}"
        );
        assert_eq!(Some(origin_of(s)), origin(s), "origin of {s:?}");
        // A pack of three acceptable URIs is acceptable.
        assert!(UriPack::new(s, s, s).is_ok(), "{s:?}");
        // Symmetry against close variants.
        for other in [
            format!("{s}/"),
            url.as_str().trim_end_matches('/').to_owned(),
            url.as_str().to_ascii_uppercase(),
        ] {
            assert_eq!(
                same_uri(s, &other),
                same_uri(&other, s),
                "{s:?} / {other:?}"
            );
        }
    } else {
        assert!(UriPack::new(s, s, s).is_err(), "{s:?}");
    }
    variant(0x31, &parsed.map(|u| u.scheme().len()))
}

/// Loopback as §1 says: 127.0.0.0/8, `[::1]`, `localhost`.
fn loopback_host(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>().is_ok_and(|ip| match ip {
        IpAddr::V4(v4) => v4.octets()[0] == 127,
        IpAddr::V6(v6) => v6 == std::net::Ipv6Addr::LOCALHOST,
    })
}
