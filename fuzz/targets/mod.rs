//! The fuzz targets of cheq, shared by two drivers:
//!
//! - `examples/fuzz.rs`, on stable Rust: a time-bounded mutation loop seeded
//!   from `fuzz/seeds/` (no coverage guidance; `scripts/fuzz check` runs it);
//! - `fuzz/fuzz_targets/*.rs`, libFuzzer through `libfuzzer-sys`, with
//!   coverage guidance (`scripts/fuzz run TARGET SECS`, or `cargo fuzz` on
//!   nightly with AddressSanitizer).
//!
//! Each target takes arbitrary bytes, and panics when a property is broken,
//! not only when the code under test panics. It returns a small number that
//! names what happened (which error, or accepted): the stable driver keeps an
//! input that gives a number not seen before, a coarse stand-in for coverage.

#![allow(dead_code)]

pub mod fixtures;
pub mod json;
pub mod jws;
pub mod payload;
pub mod registry;
pub mod signed;
pub mod uri;

/// A target: bytes in, a class of outcome out; panics on a broken property.
pub type Target = fn(&[u8]) -> u64;

/// Every target, by name.
pub const TARGETS: &[(&str, Target)] = &[
    ("json", json::run),
    ("uri", uri::run),
    ("payload", payload::run),
    ("jws", jws::run),
    ("signed", signed::run),
    ("registry", registry::run),
];

/// The target called `name`.
pub fn by_name(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// A stable, cheap hash of a value's debug text: used to name outcomes.
pub fn class(tag: u64, what: &impl std::fmt::Debug) -> u64 {
    fnv(format!("{what:?}").as_bytes()) ^ tag
}

/// The class of an outcome without the data it carries: its debug text with
/// every digit and the contents of long strings left out, so `Payload(Json(
/// Syntax("…")))` is one class whatever the message says, while
/// `Missing("subject")` and `Missing("nonce")` are two.
pub fn shape(tag: u64, what: &impl std::fmt::Debug) -> u64 {
    let text = format!("{what:?}");
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(start) = rest.find('"') {
        out.extend(rest[..=start].bytes().filter(|b| !b.is_ascii_digit()));
        let body = &rest[start + 1..];
        // The closing quote: the first one not escaped.
        let mut end = body.len();
        let mut escaped = false;
        for (i, c) in body.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        if end <= 24 {
            out.extend(body[..end].bytes().filter(|b| !b.is_ascii_digit()));
        }
        rest = body.get(end..).unwrap_or_default();
        if let Some(r) = rest.strip_prefix('"') {
            out.push(b'"');
            rest = r;
        }
    }
    out.extend(rest.bytes().filter(|b| !b.is_ascii_digit()));
    fnv(&out) ^ tag
}

/// The class of an outcome by its variants alone: its debug text with every
/// digit and the contents of every string left out.
pub fn variant(tag: u64, what: &impl std::fmt::Debug) -> u64 {
    let text = format!("{what:?}");
    let mut out = Vec::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
                out.push(b);
            }
        } else if b == b'"' {
            in_string = true;
            out.push(b);
        } else if !b.is_ascii_digit() {
            out.push(b);
        }
    }
    fnv(&out) ^ tag
}

/// FNV-1a, 64 bits.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
