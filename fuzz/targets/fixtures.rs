//! What the targets share: fixed keys (test-only, derived from constant
//! seeds), the trust store built from them and from the interop fixtures,
//! and the time at which documents are verified.

use cheq::sign::{SigningKey, TrustStore};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};
use std::sync::OnceLock;

/// The resource server the seeds are signed for.
pub const RS_ORIGIN: &str = "https://api.airline.example";
/// A second, loopback resource server (http is allowed there).
pub const RS_LOOPBACK: &str = "http://127.0.0.1:8081";
/// The confirmation server.
pub const CS_URI: &str = "https://confirm.example";
/// A second, loopback confirmation server.
pub const CS_LOOPBACK: &str = "http://127.0.0.1:8080";
/// An origin that is trusted for nothing.
pub const UNTRUSTED_ORIGIN: &str = "https://evil.example";

/// The public keys of the joserfc interop fixtures (their signed documents
/// are seeds of the `jws` target).
const INTEROP_RS: &[u8] = include_bytes!("../../tests/fixtures/interop/rs.public.json");
const INTEROP_CS: &[u8] = include_bytes!("../../tests/fixtures/interop/cs.public.json");

/// The keys and trust every target uses. The private keys come from constant
/// seeds: they sign the seed corpus and must never be trusted anywhere else.
pub struct Fixtures {
    /// Trusted for [`RS_ORIGIN`] and [`RS_LOOPBACK`].
    pub rs: SigningKey,
    /// Trusted for [`CS_URI`] and [`CS_LOOPBACK`].
    pub cs: SigningKey,
    /// Trusted for nothing (same kid as `rs`).
    pub rogue: SigningKey,
    pub trust: TrustStore,
}

/// The shared fixtures, built once.
pub fn get() -> &'static Fixtures {
    static FX: OnceLock<Fixtures> = OnceLock::new();
    FX.get_or_init(|| {
        let key = |kid: &str, seed: u8| match SigningKey::from_seed(kid, &[seed; 32]) {
            Ok(k) => k,
            Err(e) => panic!("fixture key {kid}: {e}"),
        };
        let rs = key("fuzz-rs-1", 0x11);
        let cs = key("fuzz-cs-1", 0x22);
        let rogue = key("fuzz-rs-1", 0x33);
        let interop = |bytes: &[u8]| -> Value {
            serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("interop key: {e}"))
        };
        let (irs, ics) = (interop(INTEROP_RS), interop(INTEROP_CS));
        let trust_file = json!({
            "resource_servers": [
                {"origin": RS_ORIGIN, "keys": {"keys": [rs.public_jwk(), irs]}},
                {"origin": RS_LOOPBACK, "keys": {"keys": [rs.public_jwk()]}}
            ],
            "confirmation_servers": [
                {"origin": CS_URI, "keys": {"keys": [cs.public_jwk(), ics]}},
                {"origin": CS_LOOPBACK, "keys": {"keys": [cs.public_jwk()]}}
            ]
        });
        let trust = TrustStore::from_bytes(trust_file.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("fixture trust: {e}"));
        Fixtures {
            rs,
            cs,
            rogue,
            trust,
        }
    })
}

/// When documents are verified, unless a target picks another time:
/// 2026-11-22T10:00:00Z, inside the validity of every signed seed.
pub fn now() -> DateTime<Utc> {
    Utc.timestamp_opt(1_795_341_600, 0)
        .single()
        .unwrap_or_else(|| panic!("fixed time"))
}

/// Is `origin` (as `scheme://host[:port]`) one whose resource key is trusted?
pub fn rs_trusted(origin: &str) -> bool {
    origin == RS_ORIGIN || origin == RS_LOOPBACK
}

/// Is `origin` one whose confirmation key is trusted?
pub fn cs_trusted(origin: &str) -> bool {
    origin == CS_URI || origin == CS_LOOPBACK
}

/// The origin of a URI as `scheme://host[:port]` (default port left out),
/// computed here rather than by the code under test.
pub fn origin(uri: &str) -> Option<String> {
    let url = url::Url::parse(uri).ok()?;
    let host = url.host_str()?;
    Some(match url.port() {
        Some(p) => format!("{}://{}:{}", url.scheme(), host, p),
        None => format!("{}://{}", url.scheme(), host),
    })
}

/// Percent-decodes `s` (`%XX` with two hex digits; anything else as is).
pub fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The part of `data` after the first `n` bytes (empty when shorter).
pub fn tail(data: &[u8], n: usize) -> &[u8] {
    data.get(n..).unwrap_or_default()
}
