//! The duplicate-refusing JSON reader (`cheq::cheq::json`, PROTOCOL.md §4, §5).
//!
//! Properties:
//! - a document with a duplicate member name, at any depth and in any
//!   spelling, is never accepted: every accepted document has exactly as
//!   many members (counted by an independent reader) as the value it gave,
//!   and the same document with one member written twice (plainly, or with
//!   the name fully `\u`-escaped) is refused with that name;
//! - what is accepted is what `serde_json` reads from the same bytes, and
//!   what `serde_json` refuses is refused;
//! - an accepted value, written back out, is accepted again and equal;
//! - the size limit and UTF-8 are enforced, and `parse_object` is
//!   `parse_value` restricted to objects.

use super::shape;
use cheq::cheq::json::{parse_object, parse_value, JsonError};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;

const LIMIT: usize = 1 << 20;

pub fn run(data: &[u8]) -> u64 {
    let strict = parse_value(data, LIMIT);

    // parse_object is parse_value restricted to objects.
    match (&strict, parse_object(data, LIMIT)) {
        (Ok(Value::Object(a)), Ok(b)) => assert_eq!(a, &b),
        (Ok(_), Err(JsonError::NotAnObject)) => {}
        (Err(a), Err(b)) => assert_eq!(a, &b),
        (a, b) => panic!("parse_value gave {a:?} but parse_object {b:?}"),
    }
    // The limit: one byte too few is always refused for size, nothing else.
    if !data.is_empty() {
        assert_eq!(
            parse_value(data, data.len() - 1),
            Err(JsonError::TooLarge {
                size: data.len(),
                limit: data.len() - 1
            })
        );
    }
    if std::str::from_utf8(data).is_err() {
        assert_eq!(strict, Err(JsonError::NotUtf8));
    }

    let lenient = serde_json::from_slice::<Value>(data);
    match &strict {
        Ok(value) => {
            match &lenient {
                Ok(l) => assert_eq!(l, value, "strict and serde_json read different values"),
                Err(e) => panic!("accepted, but serde_json refuses it: {e}"),
            }
            let written = members_in(value);
            let read = count_members(data);
            assert_eq!(
                read,
                Some(written),
                "the document has {read:?} members but the value only {written}: a duplicate was accepted"
            );
            // Written back out, it is read again the same (floats to within
            // serde_json's own rounding: it reads decimals to the nearest
            // f64 or the one next to it; CHEQ never re-serialises what it signs).
            let again = serde_json::to_vec(value).unwrap_or_else(|e| panic!("write: {e}"));
            let reread = parse_value(&again, LIMIT);
            let reread = reread.unwrap_or_else(|e| panic!("its own writing is refused: {e}"));
            assert!(same(&reread, value), "{value:?} reads back as {reread:?}");
            // One member written twice is refused, whatever its spelling.
            let pick = super::fnv(data);
            for escaped in [false, true] {
                if let Some((doc, name)) = with_duplicate(value, pick, escaped) {
                    assert_eq!(
                        parse_value(doc.as_bytes(), LIMIT),
                        Err(JsonError::DuplicateMember(name.clone())),
                        "a duplicate of {name:?} was not refused by name in {doc}"
                    );
                }
            }
        }
        Err(JsonError::DuplicateMember(_)) => {}
        Err(JsonError::Syntax(msg)) => {
            assert!(
                lenient.is_err(),
                "refused as {msg:?}, but serde_json reads it"
            );
        }
        Err(_) => {}
    }
    shape(0x6a73, &strict.as_ref().map(|_| ())) ^ outline(&strict).rotate_left(11)
}

/// A coarse outline of what was read: the kind of value and, in powers of
/// two, its depth and number of members.
fn outline(r: &Result<Value, JsonError>) -> u64 {
    fn depth(v: &Value) -> u32 {
        match v {
            Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
            Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }
    match r {
        Ok(v) => {
            let kind = match v {
                Value::Null => 1,
                Value::Bool(_) => 2,
                Value::Number(n) if n.is_f64() => 3,
                Value::Number(_) => 4,
                Value::String(_) => 5,
                Value::Array(_) => 6,
                Value::Object(_) => 7,
            };
            let log = |n: usize| u64::from(usize::BITS - n.leading_zeros());
            kind | log(depth(v) as usize) << 4 | log(members_in(v)) << 10
        }
        Err(JsonError::Syntax(msg)) => super::fnv(
            msg.split(" at line")
                .next()
                .unwrap_or_default()
                .trim_end_matches(|c: char| c.is_ascii_digit())
                .as_bytes(),
        ),
        Err(_) => 0,
    }
}

/// Equal, with floats equal to within a few units in the last place.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x == y || (x - y).abs() <= x.abs().max(y.abs()) * 1e-15,
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((kx, vx), (ky, vy))| kx == ky && same(vx, vy))
        }
        _ => a == b,
    }
}

/// Members of every object in `v`, added up.
fn members_in(v: &Value) -> usize {
    match v {
        Value::Object(m) => m.len() + m.values().map(members_in).sum::<usize>(),
        Value::Array(a) => a.iter().map(members_in).sum(),
        _ => 0,
    }
}

/// Members of every object in the document, counted while reading it with
/// `serde_json` and no map at all (so a repeated name counts twice).
fn count_members(data: &[u8]) -> Option<usize> {
    let mut de = serde_json::Deserializer::from_slice(data);
    let n = Counter.deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(n)
}

struct Counter;

impl<'de> DeserializeSeed<'de> for Counter {
    type Value = usize;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Counter {
    type Value = usize;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_i64<E>(self, _: i64) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_u64<E>(self, _: u64) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_f64<E>(self, _: f64) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_str<E>(self, _: &str) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_unit<E>(self) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut n = 0;
        while let Some(k) = seq.next_element_seed(Counter)? {
            n += k;
        }
        Ok(n)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let mut n = 0;
        while map.next_key::<IgnoredAny>()?.is_some() {
            n += 1 + map.next_value_seed(Counter)?;
        }
        Ok(n)
    }
}

/// `v` written out with one member of one object written twice (the second
/// time with the name fully `\u`-escaped when `escaped`); `pick` chooses which.
/// `None` when `v` has no member at all.
fn with_duplicate(v: &Value, pick: u64, escaped: bool) -> Option<(String, String)> {
    let total = members_in(v);
    if total == 0 {
        return None;
    }
    let mut target = (pick % total as u64) as usize;
    let mut out = String::new();
    let mut name = None;
    write(v, &mut target, escaped, &mut out, &mut name);
    name.map(|n| (out, n))
}

fn write(
    v: &Value,
    target: &mut usize,
    escaped: bool,
    out: &mut String,
    name: &mut Option<String>,
) {
    match v {
        Value::Object(m) => {
            out.push('{');
            for (i, (k, val)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let hit = name.is_none() && *target == 0;
                *target = target.wrapping_sub(1);
                push_str(out, k);
                out.push(':');
                write(val, target, escaped, out, name);
                if hit {
                    out.push(',');
                    if escaped {
                        out.push('"');
                        for unit in k.encode_utf16() {
                            out.push_str(&format!("\\u{unit:04x}"));
                        }
                        out.push('"');
                    } else {
                        push_str(out, k);
                    }
                    out.push_str(":null");
                    *name = Some(k.clone());
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, target, escaped, out, name);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn push_str(out: &mut String, s: &str) {
    out.push_str(&Value::String(s.to_owned()).to_string());
}
