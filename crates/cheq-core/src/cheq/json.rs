//! Strict JSON reading for signed material (PROTOCOL.md §4, §5).
//!
//! `serde_json` keeps the last of two members with the same name, which would let
//! two parties read different values from the same signed bytes. Everything signed
//! in CHEQ (the payload, each protected header, the JWS object itself) is therefore
//! read here: UTF-8, one JSON value (RFC 8259), and no duplicate member name at
//! any depth.
//!
//! [`parse_node`] reads into a [`Node`] tree that borrows its strings from the
//! input (a string is copied only when it holds an escape), with members kept
//! in document order in a vector: no hashing, few allocations. This is the
//! verification path (most of a verification's time outside the Ed25519
//! arithmetic went to building `serde_json` maps). [`parse_value`] and
//! [`parse_object`] give the same reading as a `serde_json::Value`, for
//! everything else. The fuzz target `json` checks that what is accepted is
//! exactly what `serde_json` accepts, read to the same value.

use serde_json::{Map, Value};
use std::borrow::Cow;

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

/// Nesting deeper than this is refused (as `serde_json` does).
const MAX_DEPTH: usize = 128;
/// Objects with more members than this find duplicates through a hash set.
const LINEAR_MEMBERS: usize = 24;

/// A JSON value read strictly. Strings borrow from the input unless they held
/// an escape; a number is kept as its text (it was checked to be a JSON
/// number that fits an `f64`).
#[derive(Debug, Clone, PartialEq)]
pub enum Node<'a> {
    Null,
    Bool(bool),
    Number(Cow<'a, str>),
    String(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    Object(Object<'a>),
}

/// The members of a JSON object, in document order, names all distinct.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Object<'a>(Vec<(Cow<'a, str>, Node<'a>)>);

impl<'a> Object<'a> {
    pub fn get(&self, name: &str) -> Option<&Node<'a>> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
    /// Removes and returns the member `name`.
    pub fn remove(&mut self, name: &str) -> Option<Node<'a>> {
        let i = self.0.iter().position(|(k, _)| k == name)?;
        Some(self.0.remove(i).1)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Node<'a>)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), v))
    }
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_ref())
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The same members, owning their strings.
    pub fn into_owned(self) -> Object<'static> {
        Object(
            self.0
                .into_iter()
                .map(|(k, v)| (Cow::Owned(k.into_owned()), v.into_owned()))
                .collect(),
        )
    }
    /// The same members as a `serde_json` map.
    pub fn to_map(&self) -> Map<String, Value> {
        self.0
            .iter()
            .map(|(k, v)| (k.clone().into_owned(), v.to_value()))
            .collect()
    }
}

impl<'a> Node<'a> {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Node<'a>]> {
        match self {
            Node::Array(a) => Some(a),
            _ => None,
        }
    }
    pub fn as_object(&self) -> Option<&Object<'a>> {
        match self {
            Node::Object(o) => Some(o),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Node::Bool(b) => Some(*b),
            _ => None,
        }
    }
    /// An integer written without fraction or exponent that fits an `i64`,
    /// as `serde_json::Value::as_i64` reads it (`-0` is a float there).
    pub fn as_i64(&self) -> Option<i64> {
        self.integer_text().and_then(|t| t.parse().ok())
    }
    /// As [`Node::as_i64`], for `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        self.integer_text().and_then(|t| t.parse().ok())
    }
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Node::Number(t) => t.parse().ok(),
            _ => None,
        }
    }
    fn integer_text(&self) -> Option<&str> {
        match self {
            Node::Number(t) if t != "-0" && !t.contains(['.', 'e', 'E']) => Some(t),
            _ => None,
        }
    }
    /// The same value, owning its strings.
    pub fn into_owned(self) -> Node<'static> {
        match self {
            Node::Null => Node::Null,
            Node::Bool(b) => Node::Bool(b),
            Node::Number(t) => Node::Number(Cow::Owned(t.into_owned())),
            Node::String(s) => Node::String(Cow::Owned(s.into_owned())),
            Node::Array(a) => Node::Array(a.into_iter().map(Node::into_owned).collect()),
            Node::Object(o) => Node::Object(o.into_owned()),
        }
    }
    /// The same value as `serde_json` reads it (numbers by `serde_json` itself,
    /// so that floats round the same way).
    pub fn to_value(&self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(t) => serde_json::from_str::<serde_json::Number>(t)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            Node::String(s) => Value::String(s.clone().into_owned()),
            Node::Array(a) => Value::Array(a.iter().map(Node::to_value).collect()),
            Node::Object(o) => Value::Object(o.to_map()),
        }
    }
}

impl std::fmt::Display for Node<'_> {
    /// Compact JSON.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Node::Number(t) => f.write_str(t),
            other => write!(f, "{}", other.to_value()),
        }
    }
}

/// Parses `bytes` as one JSON value of at most `limit` bytes, refusing
/// duplicate member names at any depth.
pub fn parse_node(bytes: &[u8], limit: usize) -> Result<Node<'_>, JsonError> {
    if bytes.len() > limit {
        return Err(JsonError::TooLarge {
            size: bytes.len(),
            limit,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| JsonError::NotUtf8)?;
    let mut p = Reader {
        text,
        bytes,
        pos: 0,
        depth: MAX_DEPTH,
    };
    p.skip_ws();
    let value = p.value()?;
    p.skip_ws();
    if p.pos < bytes.len() {
        return Err(p.error("trailing characters"));
    }
    Ok(value)
}

/// As [`parse_node`], for a JSON object.
pub fn parse_node_object(bytes: &[u8], limit: usize) -> Result<Object<'_>, JsonError> {
    match parse_node(bytes, limit)? {
        Node::Object(o) => Ok(o),
        _ => Err(JsonError::NotAnObject),
    }
}

/// Parses `bytes` as one JSON object of at most `limit` bytes, refusing
/// duplicate member names at any depth.
pub fn parse_object(bytes: &[u8], limit: usize) -> Result<Map<String, Value>, JsonError> {
    parse_node_object(bytes, limit).map(|o| o.to_map())
}

/// Parses `bytes` as one JSON value of at most `limit` bytes, refusing
/// duplicate member names at any depth.
pub fn parse_value(bytes: &[u8], limit: usize) -> Result<Value, JsonError> {
    parse_node(bytes, limit).map(|n| n.to_value())
}

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, what: &str) -> JsonError {
        JsonError::Syntax(format!("{what} at byte {}", self.pos))
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn literal(&mut self, word: &str, node: Node<'a>) -> Result<Node<'a>, JsonError> {
        if self
            .bytes
            .get(self.pos..)
            .is_some_and(|rest| rest.starts_with(word.as_bytes()))
        {
            self.pos += word.len();
            Ok(node)
        } else {
            Err(self.error("expected value"))
        }
    }

    fn value(&mut self) -> Result<Node<'a>, JsonError> {
        match self.peek() {
            Some(b'{') => self.nested(Self::object),
            Some(b'[') => self.nested(Self::array),
            Some(b'"') => self.string().map(Node::String),
            Some(b't') => self.literal("true", Node::Bool(true)),
            Some(b'f') => self.literal("false", Node::Bool(false)),
            Some(b'n') => self.literal("null", Node::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("expected value")),
            None => Err(self.error("EOF while parsing a value")),
        }
    }

    fn nested(
        &mut self,
        read: fn(&mut Self) -> Result<Node<'a>, JsonError>,
    ) -> Result<Node<'a>, JsonError> {
        self.depth -= 1;
        if self.depth == 0 {
            return Err(self.error("recursion limit exceeded"));
        }
        self.pos += 1;
        let node = read(self);
        self.depth += 1;
        node
    }

    fn array(&mut self) -> Result<Node<'a>, JsonError> {
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Node::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value()?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Node::Array(items));
                }
                Some(_) => return Err(self.error("expected `,` or `]`")),
                None => return Err(self.error("EOF while parsing a list")),
            }
        }
    }

    fn object(&mut self) -> Result<Node<'a>, JsonError> {
        let mut members: Vec<(Cow<'a, str>, Node<'a>)> = Vec::new();
        let mut seen: Option<std::collections::HashSet<Cow<'a, str>>> = None;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Node::Object(Object(members)));
        }
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b'"') => {}
                Some(_) => return Err(self.error("key must be a string")),
                None => return Err(self.error("EOF while parsing an object")),
            }
            let key = self.string()?;
            let duplicate = match &mut seen {
                Some(set) => !set.insert(key.clone()),
                None => {
                    let dup = members.iter().any(|(k, _)| *k == key);
                    if !dup && members.len() >= LINEAR_MEMBERS {
                        let mut set: std::collections::HashSet<Cow<'a, str>> =
                            members.iter().map(|(k, _)| k.clone()).collect();
                        set.insert(key.clone());
                        seen = Some(set);
                    }
                    dup
                }
            };
            if duplicate {
                return Err(JsonError::DuplicateMember(key.into_owned()));
            }
            self.skip_ws();
            match self.peek() {
                Some(b':') => self.pos += 1,
                Some(_) => return Err(self.error("expected `:`")),
                None => return Err(self.error("EOF while parsing an object")),
            }
            self.skip_ws();
            let value = self.value()?;
            members.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Node::Object(Object(members)));
                }
                Some(_) => return Err(self.error("expected `,` or `}`")),
                None => return Err(self.error("EOF while parsing an object")),
            }
        }
    }

    /// Moves to the next `"`, `\\` or control character (or the end).
    ///
    /// Eight bytes at a time: in each word, the lowest flagged byte is the
    /// first special one (a borrow of the bit trick only ever flags bytes
    /// *after* a real match), so its position comes from the mask without a
    /// byte loop. Past two clean words the string is long (most of a signed
    /// document is long base64url strings), and 32-byte chunks go first: a
    /// loop the compiler turns into vector compares.
    fn skip_plain(&mut self) {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
        let mut clean = 0u32;
        while let Some(chunk) = self.bytes.get(self.pos..self.pos + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let x = u64::from_le_bytes(word);
            let special = has_zero(x ^ (ONES * u64::from(b'"')))
                | has_zero(x ^ (ONES * u64::from(b'\\')))
                | (x.wrapping_sub(ONES * 0x20) & !x & HIGH);
            if special != 0 {
                self.pos += (special.trailing_zeros() / 8) as usize;
                return;
            }
            self.pos += 8;
            clean += 1;
            if clean == 2 {
                while let Some(chunk) = self
                    .bytes
                    .get(self.pos..self.pos + 32)
                    .and_then(|c| <&[u8; 32]>::try_from(c).ok())
                {
                    let special = chunk.iter().fold(0u8, |acc, &b| {
                        acc | u8::from(b == b'"') | u8::from(b == b'\\') | u8::from(b < 0x20)
                    });
                    if special != 0 {
                        break;
                    }
                    self.pos += 32;
                }
            }
        }
        while let Some(b) = self.peek() {
            if b == b'"' || b == b'\\' || b < 0x20 {
                return;
            }
            self.pos += 1;
        }
    }

    /// A string starting at the opening quote; borrowed unless it holds an escape.
    fn string(&mut self) -> Result<Cow<'a, str>, JsonError> {
        self.pos += 1;
        let start = self.pos;
        self.skip_plain();
        match self.peek() {
            Some(b'"') => {
                let s = self.text.get(start..self.pos).unwrap_or_default();
                self.pos += 1;
                return Ok(Cow::Borrowed(s));
            }
            Some(b'\\') => {}
            Some(_) => return Err(self.error("control character in string")),
            None => return Err(self.error("EOF while parsing a string")),
        }
        let mut out = String::from(self.text.get(start..self.pos).unwrap_or_default());
        loop {
            let run = self.pos;
            self.skip_plain();
            out.push_str(self.text.get(run..self.pos).unwrap_or_default());
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                }
                Some(_) => return Err(self.error("control character in string")),
                None => return Err(self.error("EOF while parsing a string")),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), JsonError> {
        let c = match self.peek() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                self.pos += 1;
                let first = self.hex4()?;
                let c = match first {
                    0xD800..=0xDBFF => {
                        if self.bytes.get(self.pos..self.pos + 2) != Some(b"\\u") {
                            return Err(self.error("lone leading surrogate in hex escape"));
                        }
                        self.pos += 2;
                        let second = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return Err(self.error("lone leading surrogate in hex escape"));
                        }
                        let code = 0x10000
                            + ((u32::from(first) - 0xD800) << 10)
                            + (u32::from(second) - 0xDC00);
                        char::from_u32(code)
                    }
                    0xDC00..=0xDFFF => None,
                    _ => char::from_u32(u32::from(first)),
                };
                let c = c.ok_or_else(|| self.error("lone surrogate in hex escape"))?;
                out.push(c);
                return Ok(());
            }
            Some(_) => return Err(self.error("invalid escape")),
            None => return Err(self.error("EOF while parsing a string")),
        };
        self.pos += 1;
        out.push(c);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u16, JsonError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.error("EOF while parsing a string"))?;
        let mut n: u16 = 0;
        for &d in digits {
            let v = (d as char)
                .to_digit(16)
                .ok_or_else(|| self.error("invalid escape"))?;
            n = n * 16 + v as u16;
        }
        self.pos += 4;
        Ok(n)
    }

    /// A number as RFC 8259 writes it; a non-integer (or an integer too large
    /// for 64 bits) must be a finite `f64`.
    fn number(&mut self) -> Result<Node<'a>, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.error("invalid number")),
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            integer = false;
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error("invalid number"));
            }
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            integer = false;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error("invalid number"));
            }
            self.digits();
        }
        let text = self.text.get(start..self.pos).unwrap_or_default();
        let fits = integer && (text.parse::<u64>().is_ok() || text.parse::<i64>().is_ok());
        if !fits && !text.parse::<f64>().is_ok_and(f64::is_finite) {
            return Err(self.error("number out of range"));
        }
        Ok(Node::Number(Cow::Borrowed(text)))
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
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
            Err(JsonError::DuplicateMember(
                "\u{0}cheq-duplicate-member\u{0}".into()
            ))
        );
    }

    #[test]
    fn reads_strings_as_serde_json_does_at_every_offset() {
        // The scan for the end of a string goes eight and then 32 bytes at a
        // time, and takes the position from a bit mask: put each special
        // byte at every offset of a long string.
        for special in [
            "\\\"",
            "\\\\",
            "\\u00e9",
            "\\ud83d\\ude00",
            "\u{1}",
            "\u{1f}",
            "\t",
            "\u{7f}",
            "é",
            "é\u{1}",
            "\u{80}\"",
            "\"",
        ] {
            for at in 0..100 {
                let text = format!("{}{special}{}", "a".repeat(at), "b".repeat(100 - at));
                let doc = format!("{{\"k\":\"{text}\"}}");
                let ours = parse_value(doc.as_bytes(), 1000);
                let theirs = serde_json::from_str::<Value>(&doc);
                match (&ours, &theirs) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "{doc}"),
                    (Err(JsonError::Syntax(_)), Err(_)) => {}
                    _ => panic!("{doc}: ours {ours:?}, serde_json {theirs:?}"),
                }
            }
        }
        // Numbers: what serde_json takes, as it reads them; the rest refused.
        for n in [
            "0",
            "-0",
            "1.5e3",
            "1E+2",
            "18446744073709551616",
            "-9223372036854775809",
        ] {
            assert_eq!(
                parse_value(n.as_bytes(), 100).ok(),
                serde_json::from_str::<Value>(n).ok(),
                "{n}"
            );
        }
        for n in ["01", "1.", ".5", "-", "1e", "1e400", "+1", "0x1"] {
            assert!(
                matches!(parse_value(n.as_bytes(), 100), Err(JsonError::Syntax(_))),
                "{n}"
            );
        }
        let deep = format!("{}{}", "[".repeat(127), "]".repeat(127));
        assert!(parse_value(deep.as_bytes(), 1000).is_ok());
        let deeper = format!("{}{}", "[".repeat(128), "]".repeat(128));
        assert!(matches!(
            parse_value(deeper.as_bytes(), 1000),
            Err(JsonError::Syntax(_))
        ));
        assert!(serde_json::from_str::<Value>(&deeper).is_err());
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
