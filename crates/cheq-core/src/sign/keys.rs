//! Keys (PROTOCOL.md §9): Ed25519 signing keys as private JWKs, public JWKs and
//! JWK sets, with ES256 public keys accepted for verification.
//!
//! The Ed25519 work is done by `ed25519-dalek` (strict verification, fast);
//! ES256, which CHEQ allows but does not require, is verified through `josekit`.
//! A [`SigningKey`] hides its secret from `Debug` and zeroizes it on drop.

use super::b64;
use crate::cheq::json;
use ed25519_dalek::Signer as _;
use rand_core::CryptoRngCore;
use serde_json::{json, Map, Value};
use std::fmt;
use zeroize::Zeroizing;

/// Why a key could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("key is not a JSON object: {0}")]
    Json(#[from] json::JsonError),
    #[error("key has no \"kid\" (a key id is required)")]
    MissingKid,
    #[error("key id is not acceptable: {0}")]
    BadKid(String),
    #[error("unsupported key type (kty {kty:?}, crv {crv:?}): only OKP/Ed25519 and EC/P-256 are accepted")]
    Unsupported {
        kty: Option<String>,
        crv: Option<String>,
    },
    #[error("key member \"{0}\" is missing or not canonical base64url of the right length")]
    BadMember(&'static str),
    #[error("a public key was expected but this JWK carries a private part (\"d\")")]
    PrivatePartInPublicKey,
    #[error("this JWK has no private part (\"d\"): a signing key is needed")]
    NotPrivate,
    #[error("the private and public parts of the key do not match")]
    Mismatch,
    #[error("key \"x\" is not a valid Ed25519 point")]
    BadPoint,
    #[error("JWK set has two keys with kid \"{0}\"")]
    DuplicateKid(String),
    #[error("JWK set must be {{\"keys\":[…]}}")]
    NotASet,
}

/// A signature algorithm CHEQ accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    EdDsa,
    Es256,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::EdDsa => "EdDSA",
            Algorithm::Es256 => "ES256",
        }
    }
}

fn check_kid(kid: &str) -> Result<(), KeyError> {
    if kid.is_empty() || kid.len() > 256 || kid.chars().any(char::is_control) {
        return Err(KeyError::BadKid(kid.escape_debug().to_string()));
    }
    Ok(())
}

/// An Ed25519 private key with its key id.
pub struct SigningKey {
    kid: String,
    key: ed25519_dalek::SigningKey,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .field("alg", &"EdDSA")
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl SigningKey {
    /// Generates a new Ed25519 key.
    pub fn generate(kid: &str, rng: &mut impl CryptoRngCore) -> Result<Self, KeyError> {
        check_kid(kid)?;
        Ok(SigningKey {
            kid: kid.to_owned(),
            key: ed25519_dalek::SigningKey::generate(rng),
        })
    }

    /// Builds a key from its 32-byte seed.
    pub fn from_seed(kid: &str, seed: &[u8; 32]) -> Result<Self, KeyError> {
        check_kid(kid)?;
        Ok(SigningKey {
            kid: kid.to_owned(),
            key: ed25519_dalek::SigningKey::from_bytes(seed),
        })
    }

    /// Reads a private OKP/Ed25519 JWK (RFC 8037).
    pub fn from_jwk_bytes(bytes: &[u8]) -> Result<Self, KeyError> {
        let map = json::parse_object(bytes, 16 * 1024)?;
        Self::from_jwk(&map)
    }

    /// Reads a private OKP/Ed25519 JWK from parsed members.
    pub fn from_jwk(map: &Map<String, Value>) -> Result<Self, KeyError> {
        let kid = jwk_kid(map)?;
        let (kty, crv) = (str_member(map, "kty"), str_member(map, "crv"));
        if kty.as_deref() != Some("OKP") || crv.as_deref() != Some("Ed25519") {
            return Err(KeyError::Unsupported { kty, crv });
        }
        let d = map
            .get("d")
            .and_then(Value::as_str)
            .ok_or(KeyError::NotPrivate)?;
        let seed = Zeroizing::new(fixed::<32>(d).ok_or(KeyError::BadMember("d"))?);
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        if let Some(x) = map.get("x").and_then(Value::as_str) {
            let x = fixed::<32>(x).ok_or(KeyError::BadMember("x"))?;
            if x != key.verifying_key().to_bytes() {
                return Err(KeyError::Mismatch);
            }
        }
        Ok(SigningKey {
            kid: kid.to_owned(),
            key,
        })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The private JWK, as JSON text. Keep it secret: write it with mode 0600.
    pub fn to_private_jwk_json(&self) -> Zeroizing<String> {
        let d = Zeroizing::new(b64::encode(self.key.to_bytes()));
        let x = b64::encode(self.key.verifying_key().to_bytes());
        let kid = Value::String(self.kid.clone()).to_string();
        Zeroizing::new(format!(
            "{{\n  \"kty\": \"OKP\",\n  \"crv\": \"Ed25519\",\n  \"kid\": {kid},\n  \"alg\": \"EdDSA\",\n  \"x\": \"{x}\",\n  \"d\": \"{}\"\n}}\n",
            d.as_str()
        ))
    }

    /// The public JWK.
    pub fn public_jwk(&self) -> Value {
        json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "kid": self.kid,
            "alg": "EdDSA",
            "use": "sig",
            "x": b64::encode(self.key.verifying_key().to_bytes()),
        })
    }

    /// The public key, ready to verify.
    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            kid: self.kid.clone(),
            inner: PublicInner::Ed25519(self.key.verifying_key()),
            state: None,
        }
    }

    pub(crate) fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message).to_bytes()
    }
}

/// A JWK's key id, present and acceptable ([`check_kid`]).
fn jwk_kid(map: &Map<String, Value>) -> Result<&str, KeyError> {
    let kid = map
        .get("kid")
        .and_then(Value::as_str)
        .ok_or(KeyError::MissingKid)?;
    check_kid(kid)?;
    Ok(kid)
}

fn str_member(map: &Map<String, Value>, name: &str) -> Option<String> {
    map.get(name).and_then(Value::as_str).map(str::to_owned)
}

fn fixed<const N: usize>(text: &str) -> Option<[u8; N]> {
    b64::decode(text)?.try_into().ok()
}

#[derive(Clone)]
enum PublicInner {
    Ed25519(ed25519_dalek::VerifyingKey),
    Es256(Box<josekit::jws::alg::ecdsa::EcdsaJwsVerifier>),
}

/// Where a key is in its life (§9). A key set publishes `New`, `Active` and
/// `Retiring` keys; only the `Active` one signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyState {
    /// Published, not yet signing: peers learn it before it signs.
    New,
    /// The one key that signs.
    Active,
    /// No longer signing; published until every CHEQ it may have signed has
    /// expired.
    Retiring,
    /// No longer signing and no longer published: it may be removed.
    Retired,
}

impl KeyState {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::New => "new",
            KeyState::Active => "active",
            KeyState::Retiring => "retiring",
            KeyState::Retired => "retired",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "new" => KeyState::New,
            "active" => KeyState::Active,
            "retiring" => KeyState::Retiring,
            "retired" => KeyState::Retired,
            _ => return None,
        })
    }

    /// Whether a key in this state is published (and so trusted by peers).
    pub fn is_published(self) -> bool {
        !matches!(self, KeyState::Retired)
    }
}

impl fmt::Display for KeyState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The JWK member that carries a published key's state (RFC 7517 §4: other
/// implementations ignore members they do not understand).
pub const STATE_MEMBER: &str = "cheq_key_state";

/// A public key with its key id, ready to verify.
#[derive(Clone)]
pub struct PublicKey {
    kid: String,
    inner: PublicInner,
    /// The state its publisher gave it (`cheq_key_state`), if any.
    state: Option<KeyState>,
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicKey")
            .field("kid", &self.kid)
            .field("alg", &self.algorithm().as_str())
            .finish()
    }
}

impl PublicKey {
    /// Reads a public JWK: OKP/Ed25519, or EC/P-256 for ES256. A JWK with a
    /// private part is refused: trust material must be public.
    pub fn from_jwk(map: &Map<String, Value>) -> Result<Self, KeyError> {
        let kid = jwk_kid(map)?;
        if map.contains_key("d") {
            return Err(KeyError::PrivatePartInPublicKey);
        }
        let (kty, crv) = (str_member(map, "kty"), str_member(map, "crv"));
        let inner = match (kty.as_deref(), crv.as_deref()) {
            (Some("OKP"), Some("Ed25519")) => {
                let x = map
                    .get("x")
                    .and_then(Value::as_str)
                    .and_then(fixed::<32>)
                    .ok_or(KeyError::BadMember("x"))?;
                let key =
                    ed25519_dalek::VerifyingKey::from_bytes(&x).map_err(|_| KeyError::BadPoint)?;
                if key.is_weak() {
                    return Err(KeyError::BadPoint);
                }
                PublicInner::Ed25519(key)
            }
            (Some("EC"), Some("P-256")) => {
                for m in ["x", "y"] {
                    map.get(m)
                        .and_then(Value::as_str)
                        .and_then(fixed::<32>)
                        .ok_or(KeyError::BadMember(if m == "x" { "x" } else { "y" }))?;
                }
                let jwk = josekit::jwk::Jwk::from_map(map.clone())
                    .map_err(|_| KeyError::BadMember("x"))?;
                let verifier = josekit::jws::ES256
                    .verifier_from_jwk(&jwk)
                    .map_err(|_| KeyError::BadPoint)?;
                PublicInner::Es256(Box::new(verifier))
            }
            _ => return Err(KeyError::Unsupported { kty, crv }),
        };
        Ok(PublicKey {
            kid: kid.to_owned(),
            inner,
            state: map
                .get(STATE_MEMBER)
                .and_then(Value::as_str)
                .and_then(KeyState::parse),
        })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The state its publisher gave it, if it said.
    pub fn state(&self) -> Option<KeyState> {
        self.state
    }

    /// The same key, published in `state`.
    pub fn with_state(mut self, state: KeyState) -> Self {
        self.state = Some(state);
        self
    }

    pub fn algorithm(&self) -> Algorithm {
        match self.inner {
            PublicInner::Ed25519(_) => Algorithm::EdDsa,
            PublicInner::Es256(_) => Algorithm::Es256,
        }
    }

    /// Verifies `signature` over `message`: `verify_strict` for Ed25519 (no
    /// malleable or small-order signatures).
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        match &self.inner {
            PublicInner::Ed25519(key) => match ed25519_dalek::Signature::from_slice(signature) {
                Ok(sig) => key.verify_strict(message, &sig).is_ok(),
                Err(_) => false,
            },
            PublicInner::Es256(verifier) => {
                use josekit::jws::JwsVerifier as _;
                signature.len() == 64 && verifier.verify(message, signature).is_ok()
            }
        }
    }

    /// The public JWK (Ed25519 keys only; ES256 keys are echoed as read).
    pub fn to_jwk(&self) -> Option<Value> {
        match &self.inner {
            PublicInner::Ed25519(key) => {
                let mut jwk = json!({
                    "kty": "OKP", "crv": "Ed25519", "kid": self.kid, "alg": "EdDSA", "use": "sig",
                    "x": b64::encode(key.to_bytes()),
                });
                if let (Some(state), Some(map)) = (self.state, jwk.as_object_mut()) {
                    map.insert(STATE_MEMBER.into(), state.as_str().into());
                }
                Some(jwk)
            }
            PublicInner::Es256(_) => None,
        }
    }
}

/// A JWK set: `{"keys":[…]}` with distinct key ids.
#[derive(Debug, Clone, Default)]
pub struct Jwks {
    keys: Vec<PublicKey>,
}

impl Jwks {
    pub fn new(keys: Vec<PublicKey>) -> Result<Self, KeyError> {
        let mut set = Jwks::default();
        for k in keys {
            set.push(k)?;
        }
        Ok(set)
    }

    /// Reads `{"keys":[…]}`, or a single public JWK as a set of one.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, KeyError> {
        let map = json::parse_object(bytes, 1024 * 1024)?;
        Self::from_value(&Value::Object(map))
    }

    pub fn from_value(v: &Value) -> Result<Self, KeyError> {
        let Value::Object(map) = v else {
            return Err(KeyError::NotASet);
        };
        match map.get("keys") {
            Some(Value::Array(items)) => {
                let mut set = Jwks::default();
                for item in items {
                    let Value::Object(k) = item else {
                        return Err(KeyError::NotASet);
                    };
                    set.push(PublicKey::from_jwk(k)?)?;
                }
                Ok(set)
            }
            Some(_) => Err(KeyError::NotASet),
            None if map.contains_key("kty") => Jwks::new(vec![PublicKey::from_jwk(map)?]),
            None => Err(KeyError::NotASet),
        }
    }

    fn push(&mut self, key: PublicKey) -> Result<(), KeyError> {
        if self.get(key.kid()).is_some() {
            return Err(KeyError::DuplicateKid(key.kid().to_owned()));
        }
        self.keys.push(key);
        Ok(())
    }

    pub fn get(&self, kid: &str) -> Option<&PublicKey> {
        self.keys.iter().find(|k| k.kid() == kid)
    }

    pub fn keys(&self) -> &[PublicKey] {
        &self.keys
    }

    /// `{"keys":[…]}` for publication at `/.well-known/jwks.json`.
    pub fn to_json(&self) -> Value {
        json!({ "keys": self.keys.iter().filter_map(PublicKey::to_jwk).collect::<Vec<_>>() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_jwk_round_trip_and_debug_hides_secret() {
        let key = SigningKey::generate("k1", &mut rand_core::OsRng).unwrap();
        let text = key.to_private_jwk_json();
        let back = SigningKey::from_jwk_bytes(text.as_bytes()).unwrap();
        assert_eq!(back.public_jwk(), key.public_jwk());
        let dbg = format!("{key:?}");
        let d = b64::encode(key.key.to_bytes());
        assert!(!dbg.contains(&d) && dbg.contains("redacted"));
    }

    #[test]
    fn public_key_refusals() {
        let key = SigningKey::generate("k1", &mut rand_core::OsRng).unwrap();
        let private = json::parse_object(key.to_private_jwk_json().as_bytes(), 4096).unwrap();
        assert_eq!(
            PublicKey::from_jwk(&private).unwrap_err(),
            KeyError::PrivatePartInPublicKey
        );
        let mut public = key.public_jwk().as_object().unwrap().clone();
        public.remove("kid");
        assert_eq!(
            PublicKey::from_jwk(&public).unwrap_err(),
            KeyError::MissingKid
        );
        let mut public = key.public_jwk().as_object().unwrap().clone();
        public.insert("crv".into(), "X25519".into());
        assert!(matches!(
            PublicKey::from_jwk(&public),
            Err(KeyError::Unsupported { .. })
        ));
        let mut public = key.public_jwk().as_object().unwrap().clone();
        public.insert("x".into(), "AAAA".into());
        assert_eq!(
            PublicKey::from_jwk(&public).unwrap_err(),
            KeyError::BadMember("x")
        );
        let mut private2 = private.clone();
        let other = SigningKey::generate("k1", &mut rand_core::OsRng).unwrap();
        private2.insert("x".into(), other.public_jwk()["x"].clone());
        assert_eq!(
            SigningKey::from_jwk(&private2).unwrap_err(),
            KeyError::Mismatch
        );
    }

    #[test]
    fn jwks_refuses_duplicate_kids() {
        let a = SigningKey::generate("same", &mut rand_core::OsRng).unwrap();
        let b = SigningKey::generate("same", &mut rand_core::OsRng).unwrap();
        let set = json!({"keys": [a.public_jwk(), b.public_jwk()]});
        assert_eq!(
            Jwks::from_value(&set).unwrap_err(),
            KeyError::DuplicateKid("same".into())
        );
    }
}
