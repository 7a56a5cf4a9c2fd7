//! Strict JSON reading for signed material (PROTOCOL.md §4, §5).
//!
//! `serde_json` keeps the last of two members with the same name, which would let
//! two parties read different values from the same signed bytes. Everything signed
//! in CHEQ (the payload, each protected header, the JWS object itself) is therefore
//! read here: UTF-8, one JSON value, and no duplicate member name at any depth.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Why a document is not strict JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    #[error("document is {size} bytes, more than the limit of {limit}")]
    TooLarge { size: usize, limit: usize },
    #[error("document is not valid UTF-8")]
    NotUtf8,
    #[error("duplicate member name \"{0}\"")]
    DuplicateMember(String),
    #[error("not valid JSON: {0}")]
    Syntax(String),
    #[error("expected a JSON object")]
    NotAnObject,
}

const DUP_MARKER: &str = "\u{0}cheq-duplicate-member\u{0}";

/// Parses `bytes` as one JSON object of at most `limit` bytes, refusing
/// duplicate member names at any depth.
pub fn parse_object(bytes: &[u8], limit: usize) -> Result<Map<String, Value>, JsonError> {
    match parse_value(bytes, limit)? {
        Value::Object(map) => Ok(map),
        _ => Err(JsonError::NotAnObject),
    }
}

/// Parses `bytes` as one JSON value of at most `limit` bytes, refusing
/// duplicate member names at any depth.
pub fn parse_value(bytes: &[u8], limit: usize) -> Result<Value, JsonError> {
    if bytes.len() > limit {
        return Err(JsonError::TooLarge {
            size: bytes.len(),
            limit,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| JsonError::NotUtf8)?;
    let mut de = serde_json::Deserializer::from_str(text);
    let value = StrictValue.deserialize(&mut de).map_err(map_err)?;
    de.end().map_err(map_err)?;
    Ok(value)
}

fn map_err(e: serde_json::Error) -> JsonError {
    let msg = e.to_string();
    if let Some(rest) = msg.strip_prefix(DUP_MARKER) {
        // The last marker closes the name: a name may itself hold the marker
        // (found by fuzzing), serde_json's " at line …" suffix never does.
        let name = rest.rsplit_once(DUP_MARKER).map_or(rest, |(name, _)| name);
        return JsonError::DuplicateMember(name.to_owned());
    }
    JsonError::Syntax(msg)
}

struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(256));
        while let Some(v) = seq.next_element_seed(StrictValue)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // One lookup per member: the entry says whether the name was seen.
            match out.entry(key) {
                serde_json::map::Entry::Occupied(seen) => {
                    return Err(de::Error::custom(format_args!(
                        "{DUP_MARKER}{}{DUP_MARKER}",
                        seen.key()
                    )));
                }
                serde_json::map::Entry::Vacant(slot) => {
                    slot.insert(map.next_value_seed(StrictValue)?);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_duplicates_at_any_depth() {
        assert_eq!(
            parse_object(br#"{"a":1,"a":2}"#, 100),
            Err(JsonError::DuplicateMember("a".into()))
        );
        assert_eq!(
            parse_object(br#"{"x":[{"b":{"c":1,"c":1}}]}"#, 100),
            Err(JsonError::DuplicateMember("c".into()))
        );
        // Escaped spellings of the same name are the same name.
        assert_eq!(
            parse_object(br#"{"a":1,"\u0061":2}"#, 100),
            Err(JsonError::DuplicateMember("a".into()))
        );
        // A name holding the reader's own internal marker is still named.
        let marker = r#""\u0000cheq-duplicate-member\u0000""#;
        assert_eq!(
            parse_object(format!("{{{marker}:1,{marker}:2}}").as_bytes(), 100),
            Err(JsonError::DuplicateMember(DUP_MARKER.into()))
        );
    }

    #[test]
    fn keeps_member_order_and_accepts_clean_objects() {
        let m = parse_object(br#"{"z":1,"a":{"y":[1,2.5,"s",null,true]}}"#, 100).unwrap();
        assert_eq!(m.keys().collect::<Vec<_>>(), vec!["z", "a"]);
    }

    #[test]
    fn refuses_other_shapes() {
        assert_eq!(parse_object(b"[1]", 100), Err(JsonError::NotAnObject));
        assert_eq!(parse_object(b"\xff{}", 100), Err(JsonError::NotUtf8));
        assert!(matches!(
            parse_object(b"{} {}", 100),
            Err(JsonError::Syntax(_))
        ));
        assert!(matches!(
            parse_object(b"{\"a\":1,}", 100),
            Err(JsonError::Syntax(_))
        ));
        assert_eq!(
            parse_object(b"{}", 1),
            Err(JsonError::TooLarge { size: 2, limit: 1 })
        );
    }
}
