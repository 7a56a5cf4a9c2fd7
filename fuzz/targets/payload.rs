//! CHEQ payload validation (`Cheq::parse`, `Cheq::countersign_fields`,
//! PROTOCOL.md §4).
//!
//! Properties, each checked against the parsed members rather than trusted:
//! - accepted ⇒ at most 64 KiB, strict JSON (the members are exactly what the
//!   strict reader gives, unknown ones kept), the exact bytes kept, version
//!   "1.0", every typed field equal to its member, at most 100 parameters
//!   with unique names and exactly one of value and input each, no string
//!   (names included) over 4 KiB at any depth, a well-formed language tag;
//! - refused ⇒ for the strict reader's reason when it refuses;
//! - countersignable ⇒ an unpadded base64url nonce of at least 16 bytes,
//!   acceptable resource and confirmation URIs, a subject that is not blank,
//!   RFC 3339 dates with `date` < `expires` <= `date` + 24 h;
//! - not countersignable for missing members ⇒ exactly those are missing.

use super::variant;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use cheq::cheq::json::parse_object;
use cheq::cheq::payload::{MAX_PARAMETERS, MAX_PAYLOAD_BYTES, MAX_STRING_BYTES};
use cheq::cheq::uri::parse_cheq_uri;
use cheq::cheq::{Cheq, CheqError, CountersignableError};
use chrono::DateTime;
use serde_json::{Map, Value};

pub fn run(data: &[u8]) -> u64 {
    let parsed = Cheq::parse(data);
    let strict = parse_object(data, MAX_PAYLOAD_BYTES);
    let mut out = variant(0x7061, &parsed.as_ref().map(|_| ()));
    // Which member is missing or of the wrong type (names the code writes,
    // so a bounded set) also tells outcomes apart.
    if let Err(CheqError::Missing(m) | CheqError::WrongType { member: m, .. }) = &parsed {
        let m: Vec<u8> = m.bytes().filter(|b| !b.is_ascii_digit()).collect();
        out ^= super::fnv(&m);
    }
    match (&parsed, &strict) {
        (Ok(cheq), Ok(members)) => {
            check_displayable(data, cheq, members);
            let fields = cheq.countersign_fields();
            out ^= variant(0x6373, &fields.as_ref().map(|_| ())).rotate_left(3);
            check_countersignable(cheq, members, &fields);
        }
        (Ok(_), Err(e)) => panic!("accepted, but the strict reader refuses it: {e}"),
        (Err(CheqError::Json(a)), Err(b)) => assert_eq!(a, b),
        (Err(e), Err(b)) => panic!("refused as {e:?}, not for the reader's {b:?}"),
        (Err(_), Ok(_)) => {}
    }
    out
}

fn check_displayable(data: &[u8], cheq: &Cheq, m: &Map<String, Value>) {
    assert!(data.len() <= MAX_PAYLOAD_BYTES);
    assert_eq!(cheq.raw(), data, "the exact bytes are not kept");
    assert_eq!(
        &cheq.members(),
        m,
        "members differ from the strict reader's"
    );
    assert_eq!(cheq.version, "1.0");
    match m.get("version") {
        Some(Value::String(s)) => assert_eq!(s, "1.0"),
        Some(Value::Number(n)) => assert_eq!(n.as_f64(), Some(1.0)),
        other => panic!("version {other:?} accepted"),
    }
    let s = |name: &str| m.get(name).and_then(Value::as_str).map(str::to_owned);
    assert_eq!(Some(cheq.operation.clone()), s("operation"));
    assert!(
        url::Url::parse(&cheq.operation).is_ok(),
        "operation is not a URI"
    );
    assert_eq!(Some(cheq.operation_name.clone()), s("operation name"));
    assert_eq!(Some(cheq.date.clone()), s("date"));
    for (field, name) in [
        (&cheq.nonce, "nonce"),
        (&cheq.resource_uri, "resource uri"),
        (&cheq.confirmation_uri, "confirmation uri"),
        (&cheq.subject, "subject"),
        (&cheq.expires, "expires"),
    ] {
        assert_eq!(field, &s(name), "{name}");
        if field.is_none() {
            assert!(!m.contains_key(name), "{name} is there but not a string");
        }
    }
    match s("language") {
        Some(tag) => assert_eq!(cheq.language, tag),
        None => {
            assert!(!m.contains_key("language"));
            assert_eq!(cheq.language, "en");
        }
    }
    assert!(language_tag(&cheq.language), "language {:?}", cheq.language);
    let longest = longest_string(&Value::Object(m.clone()));
    assert!(longest <= MAX_STRING_BYTES, "a string of {longest} bytes");

    let list = m
        .get("inputs")
        .and_then(|i| i.get("parameters"))
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("accepted without inputs.parameters"));
    assert!(list.len() <= MAX_PARAMETERS);
    assert_eq!(list.len(), cheq.parameters.len());
    for (i, (p, raw)) in cheq.parameters.iter().zip(list).enumerate() {
        let get = |name: &str| raw.get(name).and_then(Value::as_str).map(str::to_owned);
        assert_eq!(Some(p.name.clone()), get("parameter name"));
        assert_eq!(p.value, get("parameter value"));
        assert_eq!(p.description, get("parameter description"));
        assert_eq!(p.input.is_some(), raw.get("parameter input").is_some());
        assert!(
            p.value.is_some() != p.input.is_some(),
            "parameter {i} has both or neither of value and input"
        );
        if let Some(input) = &p.input {
            if let Some(n) = input.max_length {
                assert!((1..=MAX_STRING_BYTES).contains(&n));
            }
        }
        let twins = cheq.parameters.iter().filter(|q| q.name == p.name).count();
        assert_eq!(twins, 1, "two parameters named {:?}", p.name);
    }
}

fn check_countersignable(
    cheq: &Cheq,
    m: &Map<String, Value>,
    fields: &Result<cheq::cheq::CountersignFields, CountersignableError>,
) {
    const NEEDED: [&str; 5] = [
        "nonce",
        "resource uri",
        "confirmation uri",
        "subject",
        "expires",
    ];
    match fields {
        Ok(f) => {
            let nonce = URL_SAFE_NO_PAD.decode(&f.nonce);
            assert!(nonce.is_ok_and(|n| n.len() >= 16), "nonce {:?}", f.nonce);
            assert!(!f.nonce.contains('='));
            assert!(parse_cheq_uri(&f.resource_uri).is_ok());
            assert!(parse_cheq_uri(&f.confirmation_uri).is_ok());
            assert!(!f.subject.trim().is_empty());
            assert!(f.date < f.expires, "expires is not after date");
            assert!((f.expires - f.date).num_seconds() <= 24 * 3600);
            let date = DateTime::parse_from_rfc3339(&cheq.date);
            assert_eq!(date.map(|d| d.to_utc()).ok(), Some(f.date));
            let exp = cheq.expires.as_deref().map(DateTime::parse_from_rfc3339);
            assert_eq!(
                exp.and_then(Result::ok).map(|d| d.to_utc()),
                Some(f.expires)
            );
            assert_eq!(Some(&f.nonce), cheq.nonce.as_ref());
            assert_eq!(Some(&f.resource_uri), cheq.resource_uri.as_ref());
            assert_eq!(Some(&f.confirmation_uri), cheq.confirmation_uri.as_ref());
            assert_eq!(Some(&f.subject), cheq.subject.as_ref());
        }
        Err(CountersignableError::MissingMembers(list)) => {
            let absent: Vec<&str> = NEEDED.into_iter().filter(|n| !m.contains_key(*n)).collect();
            assert_eq!(list, &absent, "missing members misnamed");
            assert!(!list.is_empty());
        }
        Err(_) => assert!(NEEDED.iter().all(|n| m.contains_key(*n))),
    }
}

/// The longest string in `v`, member names included, in UTF-8 bytes.
fn longest_string(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Array(a) => a.iter().map(longest_string).max().unwrap_or(0),
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| k.len().max(longest_string(v)))
            .max()
            .unwrap_or(0),
        _ => 0,
    }
}

/// RFC 5646 §2.1 shape, written again here: subtags of 1–8 letters or
/// digits separated by `-`, the first letters only.
fn language_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.split('-').enumerate().all(|(i, p)| {
            (1..=8).contains(&p.len())
                && p.chars()
                    .all(|c| c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()))
        })
}
