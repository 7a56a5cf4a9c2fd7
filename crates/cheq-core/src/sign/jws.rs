//! JWS General JSON Serialization (RFC 7515 §7.2.1) as CHEQ uses it
//! (PROTOCOL.md §5): `{"payload":…,"signatures":[{"protected":…,"signature":…},…]}`,
//! with no unprotected header, canonical unpadded base64url, and no other members.

use super::b64;
use super::verify::VerifyError;
use crate::cheq::json::{self, Node, Object};
use crate::cheq::payload::MAX_PAYLOAD_BYTES;
use std::borrow::Cow;

/// The largest signed document read: a full payload in base64url plus headers.
pub const MAX_DOCUMENT_BYTES: usize = MAX_PAYLOAD_BYTES * 4 / 3 + 96 * 1024;
/// The largest protected header (decoded).
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// One entry of `signatures`, decoded but not yet checked. The base64url
/// texts borrow from the document read.
#[derive(Debug, Clone)]
pub struct RawSignature<'a> {
    pub protected_b64: Cow<'a, str>,
    pub header: Object<'static>,
    pub signature_b64: Cow<'a, str>,
    pub signature: Vec<u8>,
}

/// A signed CHEQ as read from the wire, before any signature is checked.
#[derive(Debug, Clone)]
pub struct RawDocument<'a> {
    pub payload_b64: Cow<'a, str>,
    pub payload: Vec<u8>,
    pub signatures: Vec<RawSignature<'a>>,
}

impl<'a> RawDocument<'a> {
    /// Reads the envelope: strict JSON, exactly `payload` and `signatures`,
    /// each signature exactly `protected` and `signature`.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, VerifyError> {
        Self::parse_within(bytes, MAX_DOCUMENT_BYTES, MAX_PAYLOAD_BYTES)
    }

    /// [`RawDocument::parse`] for a document of another kind than a CHEQ,
    /// whose limits are its own: at most `max_document` bytes, the decoded
    /// payload at most `max_payload`.
    pub fn parse_within(
        bytes: &'a [u8],
        max_document: usize,
        max_payload: usize,
    ) -> Result<Self, VerifyError> {
        let mut map =
            json::parse_node_object(bytes, max_document).map_err(VerifyError::Envelope)?;
        for key in map.keys() {
            match key {
                "payload" | "signatures" => {}
                "header" => return Err(VerifyError::UnprotectedHeader { index: None }),
                other => return Err(VerifyError::EnvelopeMember(other.to_owned())),
            }
        }
        let payload_b64 = match map.remove("payload") {
            Some(Node::String(s)) => s,
            _ => return Err(VerifyError::EnvelopeMember("payload".to_owned())),
        };
        let list = match map.remove("signatures") {
            Some(Node::Array(list)) if !list.is_empty() => list,
            _ => return Err(VerifyError::EnvelopeMember("signatures".to_owned())),
        };
        let payload = b64::decode(&payload_b64).ok_or(VerifyError::NonCanonicalBase64 {
            part: "payload",
            index: None,
        })?;
        if payload.len() > max_payload {
            return Err(VerifyError::PayloadTooLarge(payload.len()));
        }
        let mut signatures = Vec::with_capacity(list.len());
        for (index, entry) in list.into_iter().enumerate() {
            signatures.push(parse_signature(index, entry)?);
        }
        Ok(RawDocument {
            payload_b64,
            payload,
            signatures,
        })
    }
}

fn parse_signature(index: usize, entry: Node<'_>) -> Result<RawSignature<'_>, VerifyError> {
    let Node::Object(mut map) = entry else {
        return Err(VerifyError::EnvelopeMember(format!("signatures[{index}]")));
    };
    for key in map.keys() {
        match key {
            "protected" | "signature" => {}
            "header" => return Err(VerifyError::UnprotectedHeader { index: Some(index) }),
            other => {
                return Err(VerifyError::EnvelopeMember(format!(
                    "signatures[{index}].{other}"
                )))
            }
        }
    }
    let (Some(Node::String(protected_b64)), Some(Node::String(signature_b64))) =
        (map.remove("protected"), map.remove("signature"))
    else {
        return Err(VerifyError::EnvelopeMember(format!(
            "signatures[{index}] needs \"protected\" and \"signature\" strings"
        )));
    };
    let header_bytes = b64::decode(&protected_b64).ok_or(VerifyError::NonCanonicalBase64 {
        part: "protected",
        index: Some(index),
    })?;
    let header = json::parse_node_object(&header_bytes, MAX_HEADER_BYTES)
        .map_err(|error| VerifyError::HeaderJson { index, error })?
        .into_owned();
    let signature = b64::decode(&signature_b64).ok_or(VerifyError::NonCanonicalBase64 {
        part: "signature",
        index: Some(index),
    })?;
    Ok(RawSignature {
        protected_b64,
        header,
        signature_b64,
        signature,
    })
}

/// The JWS signing input: `protected "." payload`.
pub(crate) fn signing_input(protected_b64: &str, payload_b64: &str) -> Vec<u8> {
    let mut m = Vec::with_capacity(protected_b64.len() + 1 + payload_b64.len());
    m.extend_from_slice(protected_b64.as_bytes());
    m.push(b'.');
    m.extend_from_slice(payload_b64.as_bytes());
    m
}

/// Writes a General JSON Serialization document. Every string is base64url,
/// so no escaping is needed and the output is byte-stable.
pub(crate) fn write_document(payload_b64: &str, sigs: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(
        payload_b64.len()
            + sigs
                .iter()
                .map(|(p, s)| p.len() + s.len() + 32)
                .sum::<usize>()
            + 32,
    );
    for_each_piece(payload_b64, sigs, |piece| {
        out.push_str(piece);
        true
    });
    out
}

/// Whether `doc` is exactly what [`write_document`] writes for these parts,
/// compared piece by piece without writing it.
pub(crate) fn is_document(doc: &str, payload_b64: &str, sigs: &[(&str, &str)]) -> bool {
    let mut rest = doc.as_bytes();
    for_each_piece(payload_b64, sigs, |piece| {
        match rest.strip_prefix(piece.as_bytes()) {
            Some(after) => {
                rest = after;
                true
            }
            None => false,
        }
    }) && rest.is_empty()
}

/// The pieces of a document in order, each handed to `f` until it answers
/// false; answers whether every piece was taken.
fn for_each_piece(
    payload_b64: &str,
    sigs: &[(&str, &str)],
    mut f: impl FnMut(&str) -> bool,
) -> bool {
    if !(f("{\"payload\":\"") && f(payload_b64) && f("\",\"signatures\":[")) {
        return false;
    }
    for (i, (protected, signature)) in sigs.iter().enumerate() {
        if !((i == 0 || f(","))
            && f("{\"protected\":\"")
            && f(protected)
            && f("\",\"signature\":\"")
            && f(signature)
            && f("\"}"))
        {
            return false;
        }
    }
    f("]}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_is_recognised_exactly() {
        let sigs = [("aGVhZA", "c2ln"), ("b3RoZXI", "c2lnMg")];
        for n in 1..=2 {
            let doc = write_document("cGF5", &sigs[..n]);
            assert!(is_document(&doc, "cGF5", &sigs[..n]));
            assert!(!is_document(&format!("{doc} "), "cGF5", &sigs[..n]));
            assert!(!is_document(&doc[..doc.len() - 1], "cGF5", &sigs[..n]));
            assert!(!is_document(&doc, "cGF6", &sigs[..n]));
            assert!(!is_document(&doc, "cGF5", &[("aGVhZA", "c2lo")]));
        }
        let two = write_document("cGF5", &sigs);
        assert!(!is_document(&two, "cGF5", &sigs[..1]));
        assert!(!is_document("", "cGF5", &sigs[..1]));
    }
}
