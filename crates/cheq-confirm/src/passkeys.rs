//! Passkeys of an account, the relying party's side of WebAuthn: the
//! options given to the browser's `navigator.credentials.create()` and
//! `.get()`, and the checks of what it answers when a passkey is added
//! (registration) and when someone signs in with one. User verification is
//! required, credentials are discoverable (a sign-in names no user), no
//! attestation is asked for (`none`: the CS trusts the user's own device,
//! not a vendor's certificate). An assertion is checked by the signing
//! core's steps ([`cheq_core::sign::passkey`]), the same that check a
//! passkey-bound decision.

use cheq_core::sign::b64;
use cheq_core::sign::passkey::{
    check_authenticator_data, check_client_data, verify, CredentialKey, Expected, PasskeyAssertion,
    PasskeyError,
};
use cheq_store::cs::{Account, Passkey};
use serde_json::{json, Map, Value};

/// COSE algorithms offered, most preferred first: EdDSA, ES256, RS256.
pub const ALGORITHMS: [i64; 3] = [-8, -7, -257];
/// How long the browser may take (ms).
pub const TIMEOUT_MS: u64 = 120_000;
/// The longest attestation object read.
pub const MAX_ATTESTATION: usize = 16 * 1024;
/// The longest name of a passkey.
pub const MAX_NAME: usize = 64;

/// The relying party: this CS, as WebAuthn names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelyingParty {
    /// The RP ID: the host of the confirmation URI.
    pub id: String,
    /// The origin of the confirmation URI.
    pub origin: String,
}

impl RelyingParty {
    /// The relying party of the confirmation URI `public_url`.
    pub fn of(public_url: &str) -> Option<Self> {
        let url = url::Url::parse(public_url).ok()?;
        Some(RelyingParty {
            id: url.host_str()?.to_owned(),
            origin: url.origin().ascii_serialization(),
        })
    }

    fn expected<'a>(&'a self, challenge: &'a [u8; 32]) -> Expected<'a> {
        Expected {
            challenge,
            origin: &self.origin,
            rp_id: &self.id,
        }
    }
}

/// Why a passkey was not added or did not sign in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CeremonyError {
    #[error("{0}")]
    Assertion(#[from] PasskeyError),
    #[error("the attestation object is not what a browser sends")]
    BadAttestation,
    #[error("the authenticator data names no new credential")]
    NoCredential,
    #[error("the credential's key is not an EdDSA, ES256 or RS256 key")]
    UnsupportedKey,
    #[error("the credential id in the answer is not the one its authenticator data names")]
    IdMismatch,
    #[error("this passkey is already registered")]
    AlreadyRegistered,
    #[error("this passkey is not one of this account")]
    UnknownPasskey,
    #[error("the authenticator's signature counter went back: the passkey may have been copied")]
    CounterWentBack,
    #[error("the name of a passkey is 1 to {MAX_NAME} characters with no control character")]
    BadName,
}

/// `PublicKeyCredentialCreationOptions` for adding a passkey to `account`,
/// whose user handle is `handle`.
pub fn creation_options(
    rp: &RelyingParty,
    account: &Account,
    handle: &str,
    challenge: &[u8; 32],
) -> Value {
    json!({
        "challenge": b64::encode(challenge),
        "rp": {"id": rp.id, "name": rp.id},
        "user": {"id": handle, "name": account.username, "displayName": account.username},
        "pubKeyCredParams": ALGORITHMS.iter().map(|a| json!({"type": "public-key", "alg": a})).collect::<Vec<_>>(),
        "authenticatorSelection": {
            "residentKey": "required",
            "requireResidentKey": true,
            "userVerification": "required",
        },
        "attestation": "none",
        "excludeCredentials": account.passkeys.iter().map(|p| json!({"type": "public-key", "id": p.id})).collect::<Vec<_>>(),
        "timeout": TIMEOUT_MS,
    })
}

/// `PublicKeyCredentialRequestOptions`: for a sign-in (no `allow`: any
/// passkey of this RP), or for a decision (`allow`: the user's passkeys).
pub fn request_options(rp: &RelyingParty, challenge: &[u8; 32], allow: &[Passkey]) -> Value {
    json!({
        "challenge": b64::encode(challenge),
        "rpId": rp.id,
        "userVerification": "required",
        "allowCredentials": allow.iter().map(|p| json!({"type": "public-key", "id": p.id})).collect::<Vec<_>>(),
        "timeout": TIMEOUT_MS,
    })
}

/// Checks a passkey's name.
pub fn check_name(name: &str) -> Result<String, CeremonyError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(CeremonyError::BadName);
    }
    Ok(name.to_owned())
}

/// A credential that registered: its id, public JWK and counter.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCredential {
    pub id: String,
    pub key: Map<String, Value>,
    pub sign_count: u32,
}

/// Checks the answer of `navigator.credentials.create()`: the client data
/// (`webauthn.create`, the challenge, this origin), the authenticator data
/// in the attestation object (this RP ID, UP and UV, a new credential), and
/// reads the credential's key.
pub fn finish_registration(
    rp: &RelyingParty,
    challenge: &[u8; 32],
    credential_id: &str,
    client_data: &[u8],
    attestation_object: &[u8],
) -> Result<NewCredential, CeremonyError> {
    check_client_data(client_data, "webauthn.create", rp.expected(challenge))?;
    if attestation_object.len() > MAX_ATTESTATION {
        return Err(CeremonyError::BadAttestation);
    }
    let auth_data = auth_data_of(attestation_object)?;
    let sign_count = check_authenticator_data(&auth_data, &rp.id)?;
    // Flag AT: attested credential data follows the 37 bytes.
    if auth_data[32] & 0x40 == 0 {
        return Err(CeremonyError::NoCredential);
    }
    let rest = auth_data
        .get(37 + 16..)
        .ok_or(CeremonyError::NoCredential)?;
    let (len, rest) = rest
        .split_at_checked(2)
        .ok_or(CeremonyError::NoCredential)?;
    let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
    let (id, cose) = rest
        .split_at_checked(len)
        .ok_or(CeremonyError::NoCredential)?;
    if id.is_empty() || b64::encode(id) != credential_id {
        return Err(CeremonyError::IdMismatch);
    }
    let key = jwk_of_cose(cose)?;
    // The key must be one the verifier takes.
    CredentialKey::from_jwk(&key).map_err(|_| CeremonyError::UnsupportedKey)?;
    Ok(NewCredential {
        id: credential_id.to_owned(),
        key,
        sign_count,
    })
}

/// The `authData` of an attestation object (a CBOR map with `fmt`,
/// `attStmt` and `authData`; the statement is not checked: none was asked).
fn auth_data_of(attestation_object: &[u8]) -> Result<Vec<u8>, CeremonyError> {
    let value: ciborium::Value =
        ciborium::from_reader(attestation_object).map_err(|_| CeremonyError::BadAttestation)?;
    let map = value.as_map().ok_or(CeremonyError::BadAttestation)?;
    map.iter()
        .find(|(k, _)| k.as_text() == Some("authData"))
        .and_then(|(_, v)| v.as_bytes().cloned())
        .ok_or(CeremonyError::BadAttestation)
}

/// A COSE_Key (RFC 9053) as a JWK: OKP Ed25519, EC2 P-256, or RSA. What
/// follows the key (extensions) is ignored.
fn jwk_of_cose(cose: &[u8]) -> Result<Map<String, Value>, CeremonyError> {
    let value: ciborium::Value =
        ciborium::de::from_reader(cose).map_err(|_| CeremonyError::UnsupportedKey)?;
    let map = value.as_map().ok_or(CeremonyError::UnsupportedKey)?;
    let get = |label: i64| {
        map.iter()
            .find(|(k, _)| k.as_integer().and_then(|i| i64::try_from(i).ok()) == Some(label))
            .map(|(_, v)| v)
    };
    let int = |label: i64| {
        get(label)
            .and_then(ciborium::Value::as_integer)
            .and_then(|i| i64::try_from(i).ok())
    };
    let bytes = |label: i64| {
        get(label)
            .and_then(ciborium::Value::as_bytes)
            .map(|b| Value::from(b64::encode(b)))
            .ok_or(CeremonyError::UnsupportedKey)
    };
    let mut jwk = Map::new();
    match (int(1), int(3), int(-1)) {
        // kty OKP, alg EdDSA, crv Ed25519
        (Some(1), Some(-8), Some(6)) => {
            jwk.insert("kty".into(), "OKP".into());
            jwk.insert("crv".into(), "Ed25519".into());
            jwk.insert("x".into(), bytes(-2)?);
        }
        // kty EC2, alg ES256, crv P-256
        (Some(2), Some(-7), Some(1)) => {
            jwk.insert("kty".into(), "EC".into());
            jwk.insert("crv".into(), "P-256".into());
            jwk.insert("x".into(), bytes(-2)?);
            jwk.insert("y".into(), bytes(-3)?);
        }
        // kty RSA, alg RS256: n is label -1, e is -2
        (Some(3), Some(-257), _) => {
            jwk.insert("kty".into(), "RSA".into());
            jwk.insert("n".into(), bytes(-1)?);
            jwk.insert("e".into(), bytes(-2)?);
        }
        _ => return Err(CeremonyError::UnsupportedKey),
    }
    Ok(jwk)
}

/// What `navigator.credentials.get()` answered.
#[derive(Debug, Clone)]
pub struct AssertionAnswer {
    /// The credential id, base64url.
    pub id: String,
    pub client_data: Vec<u8>,
    pub authenticator_data: Vec<u8>,
    pub signature: Vec<u8>,
}

/// Checks an assertion by `passkey` for `challenge`, and gives the counter
/// to keep: it must have grown, unless the authenticator keeps none (0).
pub fn check_assertion(
    rp: &RelyingParty,
    challenge: &[u8; 32],
    passkey: &Passkey,
    answer: &AssertionAnswer,
) -> Result<u32, CeremonyError> {
    if answer.id != passkey.id {
        return Err(CeremonyError::UnknownPasskey);
    }
    let assertion = PasskeyAssertion {
        id: b64::decode(&passkey.id).ok_or(CeremonyError::UnknownPasskey)?,
        key: CredentialKey::from_jwk(&passkey.key)?,
        authenticator_data: answer.authenticator_data.clone(),
        client_data: answer.client_data.clone(),
        signature: answer.signature.clone(),
    };
    let bound = verify(&assertion, rp.expected(challenge))?;
    counter_after(passkey.sign_count, bound.sign_count)
}

/// The counter to keep after an assertion that gave `seen`.
pub fn counter_after(kept: u32, seen: u32) -> Result<u32, CeremonyError> {
    if (kept != 0 || seen != 0) && seen <= kept {
        return Err(CeremonyError::CounterWentBack);
    }
    Ok(seen)
}

#[cfg(test)]
#[path = "passkeys_tests.rs"]
mod tests;
