//! `cheq inspect FILE`: shows a signed CHEQ without verifying anything.
//!
//! Prints the payload and every protected header as pretty JSON, each
//! labelled (`signature 0 (resource, kid "…")`), under a banner saying that
//! nothing was verified. Only the envelope is read (`RawDocument::parse`):
//! strict JSON, canonical base64url, no duplicate names. Characters that could
//! rewrite a terminal or reorder text (control and bidirectional characters)
//! are shown as `\uXXXX` escapes, which keeps the JSON valid.
//!
//! [`payload_text`] is also the text whose SHA-256 `cheq countersign` puts in
//! `cheq_view`: what a CLI operator is shown of the payload.

use super::{is_unsafe_char, read_input, write_out, CliError};
use crate::cheq::json;
use crate::cheq::payload::MAX_PAYLOAD_BYTES;
use crate::sign::jws::RawDocument;
use serde_json::Value;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

/// Show a signed CHEQ's payload and protected headers, without verifying.
///
/// Nothing is verified: not the signatures, not trust, not expiry. Use
/// `cheq verify` for that.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The signed CHEQ (JWS General JSON); `-` reads standard input.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let bytes = read_input(&args.file)?;
    let text = render(&bytes)?;
    write_out(out, &text)
}

/// The whole `inspect` output for a signed CHEQ.
pub fn render(document: &[u8]) -> Result<String, CliError> {
    let raw = RawDocument::parse(document).map_err(|e| CliError::Malformed(e.to_string()))?;
    let payload = payload_text(&raw.payload)?;
    let count = raw.signatures.len();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "NOT VERIFIED: signatures, trust and expiry were not checked (use `cheq verify`)."
    );
    let _ = writeln!(s, "{count} signature{}", if count == 1 { "" } else { "s" });
    let _ = writeln!(s);
    let _ = writeln!(s, "payload ({} bytes):", raw.payload.len());
    s.push_str(&payload);
    s.push('\n');
    for (index, sig) in raw.signatures.iter().enumerate() {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{} protected header:",
            signature_label(index, &sig.header.to_map())
        );
        s.push_str(&pretty(&Value::Object(sig.header.to_map()))?);
        s.push('\n');
    }
    Ok(s)
}

/// The text shown for a payload: its members, pretty-printed as JSON in
/// document order (two-space indent, no trailing newline), with control and
/// bidirectional characters escaped as `\uXXXX`.
pub fn payload_text(payload: &[u8]) -> Result<String, CliError> {
    let value = json::parse_value(payload, MAX_PAYLOAD_BYTES)
        .map_err(|e| CliError::Malformed(format!("payload: {e}")))?;
    pretty(&value)
}

fn pretty(value: &Value) -> Result<String, CliError> {
    let text =
        serde_json::to_string_pretty(value).map_err(|e| CliError::Internal(e.to_string()))?;
    Ok(escape_unsafe(&text))
}

/// Replaces unsafe characters (never structural in JSON text) by `\uXXXX`.
fn escape_unsafe(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        if c != '\n' && is_unsafe_char(c) {
            let _ = write!(s, "\\u{:04x}", c as u32);
        } else {
            s.push(c);
        }
    }
    s
}

/// `signature 0 (resource, kid "rs1", alg EdDSA)`; a confirmation signature
/// also names its decision.
fn signature_label(index: usize, header: &serde_json::Map<String, Value>) -> String {
    let member = |name: &str| match header.get(name) {
        Some(Value::String(v)) => escape_unsafe(&Value::String(v.clone()).to_string()),
        Some(other) => escape_unsafe(&other.to_string()),
        None => "(none)".to_owned(),
    };
    let role = match header.get("cheq_role") {
        Some(Value::String(r)) if r == "resource" || r == "confirmation" => r.clone(),
        _ => format!("role {}", member("cheq_role")),
    };
    let mut label = format!(
        "signature {index} ({role}, kid {}, alg {}",
        member("kid"),
        member("alg")
    );
    if header.contains_key("cheq_decision") {
        let _ = write!(label, ", decision {}", member("cheq_decision"));
    }
    label.push(')');
    label
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_terminal_controls_but_keeps_json_valid() {
        let text = super::payload_text(br#"{"a":"x\u001b[2J\u202e\u0085y"}"#).unwrap();
        assert!(!text.contains('\u{1b}') && !text.contains('\u{202e}') && !text.contains('\u{85}'));
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["a"], "x\u{1b}[2J\u{202e}\u{85}y");
    }
}
