//! Passkey-bound decisions: the WebAuthn assertion that binds the user's own
//! authenticator to exactly one decision. Two parts, both pure (no I/O, no
//! clock):
//!
//! - [`challenge`]: the 32 bytes the assertion signs,
//!   `SHA-256("CHEQ passkey v1" || 0x00 || RS || VIEW || DECISION || COLLECTED)`,
//!   where `RS` and `VIEW` are the bytes that `cheq_rs_sig` and `cheq_view`
//!   encode, `DECISION` is `accept` or `reject` in ASCII and `COLLECTED` is
//!   SHA-256 of the RFC 8785 (JCS) text of `cheq_collected`, or 32 zero bytes
//!   without one.
//! - [`verify`]: the checks of a `cheq_passkey` header member against what the
//!   decision says, as a chain of small named steps, each failing with its own
//!   [`PasskeyError`]: the member is well formed; `client_data` is JSON of
//!   `type` `webauthn.get` with the challenge above, the origin of the
//!   payload's `confirmation uri` and no `crossOrigin: true`; the
//!   authenticator data starts with SHA-256 of the RP ID (the host of the
//!   confirmation URI) and has the flags UP and UV; the signature verifies
//!   over `authenticator_data || SHA-256(client_data)` with the credential's
//!   key (ES256, EdDSA or RS256).
//!
//! A small verifier on the crates the project has (dalek, josekit) rather
//! than a WebAuthn library: the ones maintained in Rust derive the challenge
//! themselves and do not take one the caller computes.

use super::b64;
use super::header::Decision;
use crate::cheq::json::{parse_node_object, Node};
use indexmap::IndexMap;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// What the challenge starts with, before its separator byte 0.
pub const DOMAIN: &[u8] = b"CHEQ passkey v1";

/// The longest `client_data` read (a browser's is a few hundred bytes).
pub const MAX_CLIENT_DATA: usize = 4096;

/// Why a passkey assertion does not bind this decision. Each check has its
/// own variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasskeyError {
    #[error("cheq_passkey: member \"{0}\" is missing or not what it must be")]
    Malformed(&'static str),
    #[error("cheq_passkey: the credential key is not an ES256, EdDSA or RS256 public key")]
    UnsupportedKey,
    #[error("client_data is not a JSON object")]
    ClientDataNotJson,
    #[error("client_data type is not the one of this ceremony")]
    WrongType,
    #[error("client_data challenge is not the one of this decision")]
    WrongChallenge,
    #[error("client_data origin is not the origin of the confirmation URI")]
    WrongOrigin,
    #[error("client_data says crossOrigin: true")]
    CrossOrigin,
    #[error("authenticator data is shorter than 37 bytes")]
    ShortAuthenticatorData,
    #[error("authenticator data is not for the RP ID of the confirmation URI")]
    WrongRpId,
    #[error("the user was not present (flag UP)")]
    UserNotPresent,
    #[error("the user was not verified (flag UV)")]
    UserNotVerified,
    #[error("the assertion's signature does not verify with the credential key")]
    BadSignature,
}

/// The RFC 8785 (JCS) text of an object whose values are strings: members
/// sorted by the UTF-16 code units of their names, strings escaped as
/// ECMAScript's `JSON.stringify` does.
pub fn jcs_string_map(map: &IndexMap<String, String>) -> String {
    let mut members: Vec<(&String, &String)> = map.iter().collect();
    members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
    let mut out = String::from("{");
    for (i, (k, v)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        jcs_string(&mut out, k);
        out.push(':');
        jcs_string(&mut out, v);
    }
    out.push('}');
    out
}

fn jcs_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The challenge a passkey assertion must sign for this decision.
pub fn challenge(
    rs_sig: &[u8; 32],
    view: &[u8; 32],
    decision: Decision,
    collected: Option<&IndexMap<String, String>>,
) -> [u8; 32] {
    let collected: [u8; 32] = match collected {
        Some(map) => Sha256::digest(jcs_string_map(map).as_bytes()).into(),
        None => [0; 32],
    };
    let mut h = Sha256::new();
    h.update(DOMAIN);
    h.update([0u8]);
    h.update(rs_sig);
    h.update(view);
    h.update(decision.as_str().as_bytes());
    h.update(collected);
    h.finalize().into()
}

/// [`challenge`] from the header's base64url digests (`cheq_rs_sig`,
/// `cheq_view`); `None` unless both are 32 bytes.
pub fn challenge_of(
    rs_sig: &str,
    view: &str,
    decision: Decision,
    collected: Option<&IndexMap<String, String>>,
) -> Option<[u8; 32]> {
    let digest = |s: &str| -> Option<[u8; 32]> { b64::decode(s)?.try_into().ok() };
    Some(challenge(
        &digest(rs_sig)?,
        &digest(view)?,
        decision,
        collected,
    ))
}

/// The signature counter of authenticator data (bytes 33 to 36), if it
/// is long enough to hold one.
pub fn sign_count(authenticator_data: &[u8]) -> Option<u32> {
    let b = authenticator_data.get(33..37)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// A credential's public key, ready to verify an assertion.
pub enum CredentialKey {
    Es256(Box<josekit::jws::alg::ecdsa::EcdsaJwsVerifier>),
    EdDsa(ed25519_dalek::VerifyingKey),
    Rs256(Box<josekit::jws::alg::rsassa::RsassaJwsVerifier>),
}

impl std::fmt::Debug for CredentialKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CredentialKey::Es256(_) => "CredentialKey(ES256)",
            CredentialKey::EdDsa(_) => "CredentialKey(EdDSA)",
            CredentialKey::Rs256(_) => "CredentialKey(RS256)",
        })
    }
}

impl CredentialKey {
    /// Reads a public JWK: EC P-256, OKP Ed25519 or RSA. A private part is
    /// refused.
    pub fn from_jwk(map: &Map<String, Value>) -> Result<Self, PasskeyError> {
        if map.contains_key("d") {
            return Err(PasskeyError::UnsupportedKey);
        }
        let member = |m: &str| map.get(m).and_then(Value::as_str);
        let jwk =
            || josekit::jwk::Jwk::from_map(map.clone()).map_err(|_| PasskeyError::UnsupportedKey);
        match (member("kty"), member("crv")) {
            (Some("EC"), Some("P-256")) => josekit::jws::ES256
                .verifier_from_jwk(&jwk()?)
                .map(|v| CredentialKey::Es256(Box::new(v)))
                .map_err(|_| PasskeyError::UnsupportedKey),
            (Some("OKP"), Some("Ed25519")) => {
                let x: [u8; 32] = member("x")
                    .and_then(b64::decode)
                    .and_then(|x| x.try_into().ok())
                    .ok_or(PasskeyError::UnsupportedKey)?;
                let key = ed25519_dalek::VerifyingKey::from_bytes(&x)
                    .map_err(|_| PasskeyError::UnsupportedKey)?;
                if key.is_weak() {
                    return Err(PasskeyError::UnsupportedKey);
                }
                Ok(CredentialKey::EdDsa(key))
            }
            (Some("RSA"), None) => josekit::jws::RS256
                .verifier_from_jwk(&jwk()?)
                .map(|v| CredentialKey::Rs256(Box::new(v)))
                .map_err(|_| PasskeyError::UnsupportedKey),
            _ => Err(PasskeyError::UnsupportedKey),
        }
    }

    /// Verifies a WebAuthn signature over `message` (ES256: ASN.1 DER, as
    /// authenticators give it; EdDSA: 64 bytes, `verify_strict`; RS256:
    /// PKCS #1 v1.5).
    fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        use josekit::jws::JwsVerifier as _;
        match self {
            CredentialKey::Es256(v) => {
                der_to_raw(signature).is_some_and(|raw| v.verify(message, &raw).is_ok())
            }
            CredentialKey::EdDsa(key) => ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|sig| key.verify_strict(message, &sig).is_ok()),
            CredentialKey::Rs256(v) => v.verify(message, signature).is_ok(),
        }
    }
}

/// An ECDSA P-256 signature in ASN.1 DER (`SEQUENCE { r INTEGER, s INTEGER }`)
/// as the 64 bytes `r || s`; `None` unless it is exactly that, in DER.
pub fn der_to_raw(der: &[u8]) -> Option<[u8; 64]> {
    let (&tag, rest) = der.split_first()?;
    let (&len, body) = rest.split_first()?;
    if tag != 0x30 || usize::from(len) != body.len() || len >= 0x80 {
        return None;
    }
    let (r, rest) = der_integer(body)?;
    let (s, rest) = der_integer(rest)?;
    if !rest.is_empty() {
        return None;
    }
    let mut raw = [0u8; 64];
    raw[32 - r.len()..32].copy_from_slice(r);
    raw[64 - s.len()..].copy_from_slice(s);
    Some(raw)
}

/// One positive DER INTEGER of at most 32 significant bytes, minimally
/// encoded; its bytes without the sign padding, and what follows.
fn der_integer(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&len, rest) = rest.split_first()?;
    let len = usize::from(len);
    if tag != 0x02 || len == 0 || len > 33 || rest.len() < len {
        return None;
    }
    let (value, rest) = rest.split_at(len);
    let value = match value {
        // A leading zero only before a byte with its top bit set.
        [0, next, ..] if next & 0x80 != 0 => &value[1..],
        [0, ..] if len > 1 => return None,
        [first, ..] if first & 0x80 != 0 => return None,
        _ => value,
    };
    (value.len() <= 32).then_some((value, rest))
}

/// The `cheq_passkey` header member, read.
#[derive(Debug)]
pub struct PasskeyAssertion {
    /// The credential id.
    pub id: Vec<u8>,
    pub key: CredentialKey,
    pub authenticator_data: Vec<u8>,
    /// The exact clientDataJSON bytes.
    pub client_data: Vec<u8>,
    pub signature: Vec<u8>,
}

impl PasskeyAssertion {
    /// Reads the member: an object with exactly `id`, `key`,
    /// `authenticator_data`, `client_data` and `signature`.
    pub fn from_json(value: &Value) -> Result<Self, PasskeyError> {
        const MEMBERS: [&str; 5] = [
            "id",
            "key",
            "authenticator_data",
            "client_data",
            "signature",
        ];
        let map = value
            .as_object()
            .ok_or(PasskeyError::Malformed("cheq_passkey"))?;
        if map.len() != MEMBERS.len() || !MEMBERS.iter().all(|m| map.contains_key(*m)) {
            return Err(PasskeyError::Malformed("cheq_passkey"));
        }
        let bytes = |m: &'static str| {
            map.get(m)
                .and_then(Value::as_str)
                .and_then(b64::decode)
                .filter(|b| !b.is_empty())
                .ok_or(PasskeyError::Malformed(m))
        };
        let key = map
            .get("key")
            .and_then(Value::as_object)
            .ok_or(PasskeyError::Malformed("key"))?;
        let client_data = bytes("client_data")?;
        if client_data.len() > MAX_CLIENT_DATA {
            return Err(PasskeyError::Malformed("client_data"));
        }
        Ok(PasskeyAssertion {
            id: bytes("id")?,
            key: CredentialKey::from_jwk(key)?,
            authenticator_data: bytes("authenticator_data")?,
            client_data,
            signature: bytes("signature")?,
        })
    }
}

/// What an assertion must say for this decision.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// [`challenge`] of the decision.
    pub challenge: &'a [u8; 32],
    /// The origin of the payload's `confirmation uri` (`https://host[:port]`).
    pub origin: &'a str,
    /// The host of the payload's `confirmation uri` (the RP ID).
    pub rp_id: &'a str,
}

/// An assertion that binds the decision: the credential and the
/// authenticator's signature counter (0 when it keeps none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundAssertion {
    pub credential_id: Vec<u8>,
    pub sign_count: u32,
}

/// Checks `assertion` against `expected`, step by step.
pub fn verify(
    assertion: &PasskeyAssertion,
    expected: Expected<'_>,
) -> Result<BoundAssertion, PasskeyError> {
    check_client_data(&assertion.client_data, "webauthn.get", expected)?;
    let sign_count = check_authenticator_data(&assertion.authenticator_data, expected.rp_id)?;
    check_signature(assertion)?;
    Ok(BoundAssertion {
        credential_id: assertion.id.clone(),
        sign_count,
    })
}

/// Checks the `cheq_passkey` member of a confirmation header against what
/// the same header and the payload say (§5 rule 6): the challenge of its
/// `cheq_rs_sig`, `cheq_view`, decision and `cheq_collected`, the origin
/// and RP ID of `confirmation_uri`.
pub fn check_member(
    member: &Map<String, Value>,
    claims: &super::header::ConfirmationClaims,
    confirmation_uri: &str,
) -> Result<BoundAssertion, PasskeyError> {
    let assertion = PasskeyAssertion::from_json(&Value::Object(member.clone()))?;
    let challenge = challenge_of(
        &claims.rs_sig,
        &claims.view,
        claims.decision,
        claims.collected.as_ref(),
    )
    .ok_or(PasskeyError::WrongChallenge)?;
    let url = url::Url::parse(confirmation_uri).map_err(|_| PasskeyError::WrongOrigin)?;
    let origin = url.origin().ascii_serialization();
    let rp_id = url.host_str().ok_or(PasskeyError::WrongRpId)?;
    verify(
        &assertion,
        Expected {
            challenge: &challenge,
            origin: &origin,
            rp_id,
        },
    )
}

/// `client_data`: strict JSON (no duplicate member), `type` (`webauthn.get`
/// for an assertion, `webauthn.create` when a credential is registered),
/// `challenge`, `origin`, `crossOrigin`.
pub fn check_client_data(
    bytes: &[u8],
    kind: &str,
    expected: Expected<'_>,
) -> Result<(), PasskeyError> {
    let object =
        parse_node_object(bytes, MAX_CLIENT_DATA).map_err(|_| PasskeyError::ClientDataNotJson)?;
    let text = |name: &str| object.get(name).and_then(Node::as_str);
    if text("type") != Some(kind) {
        return Err(PasskeyError::WrongType);
    }
    if text("challenge") != Some(b64::encode(expected.challenge).as_str()) {
        return Err(PasskeyError::WrongChallenge);
    }
    if text("origin") != Some(expected.origin) {
        return Err(PasskeyError::WrongOrigin);
    }
    match object.get("crossOrigin") {
        None | Some(Node::Bool(false)) => Ok(()),
        Some(_) => Err(PasskeyError::CrossOrigin),
    }
}

/// The authenticator data: the RP ID hash, the flags UP (0x01) and UV
/// (0x04); gives the signature counter.
pub fn check_authenticator_data(data: &[u8], rp_id: &str) -> Result<u32, PasskeyError> {
    if data.len() < 37 {
        return Err(PasskeyError::ShortAuthenticatorData);
    }
    let rp_hash: [u8; 32] = Sha256::digest(rp_id.as_bytes()).into();
    if !super::same_secret(&data[..32], &rp_hash) {
        return Err(PasskeyError::WrongRpId);
    }
    let flags = data[32];
    if flags & 0x01 == 0 {
        return Err(PasskeyError::UserNotPresent);
    }
    if flags & 0x04 == 0 {
        return Err(PasskeyError::UserNotVerified);
    }
    sign_count(data).ok_or(PasskeyError::ShortAuthenticatorData)
}

/// The signature over `authenticator_data || SHA-256(client_data)`.
fn check_signature(assertion: &PasskeyAssertion) -> Result<(), PasskeyError> {
    let mut message = assertion.authenticator_data.clone();
    message.extend_from_slice(&Sha256::digest(&assertion.client_data));
    if assertion.key.verify(&message, &assertion.signature) {
        Ok(())
    } else {
        Err(PasskeyError::BadSignature)
    }
}

#[cfg(test)]
#[path = "passkey_tests.rs"]
mod tests;
