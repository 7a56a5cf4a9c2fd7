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
use cheq_store::cs::{Account, AccountPutError, Accounts, Passkey};
use cheq_store::StoreError;
use cheq_support::bearer::TokenKey;
use serde::{Deserialize, Serialize};
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
#[derive(Debug, thiserror::Error)]
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
    #[error(
        "this passkey request is not one this service started in this browser, or it has expired"
    )]
    BadCeremony,
    #[error("no account has this passkey")]
    NoAccount,
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Account(#[from] AccountPutError),
    #[error("{0}")]
    Log(#[from] crate::transparency::LogError),
}

/// Equal when of the same kind (and, for an assertion, the same step); a
/// store's failure equals none.
impl PartialEq for CeremonyError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (CeremonyError::Assertion(a), CeremonyError::Assertion(b)) => a == b,
            (CeremonyError::Store(_) | CeremonyError::Account(_), _) => false,
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
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

/// How long a ceremony may take, from its options to its answer.
pub const CEREMONY_SECS: i64 = 180;

/// What a ceremony's token carries: sealed, so that the browser can neither
/// read nor change it; bound to the session (or the pre-login cookie) that
/// began it.
#[derive(Debug, Serialize, Deserialize)]
struct Pending {
    /// `reg` (adding a passkey) or `in` (signing in).
    k: String,
    /// A digest of the session or pre-login cookie value that began it.
    b: String,
    /// The challenge.
    c: [u8; 32],
    /// The account (adding) and the passkey's name.
    u: Option<String>,
    n: Option<String>,
    /// Expiry (unix seconds).
    e: i64,
}

/// Begins and finishes the ceremonies of one CS: options with a fresh
/// challenge and a sealed ceremony token, then the checks of the answer
/// that comes back with the token. Nothing is stored between the two.
#[derive(Debug)]
pub struct Ceremonies {
    key: TokenKey,
    rp: RelyingParty,
}

/// A passkey added to an account.
#[derive(Debug)]
pub struct Added {
    pub account: Account,
    pub name: String,
}

/// Who signed in with a passkey.
#[derive(Debug)]
pub struct SignedInWith {
    pub account: Account,
    pub passkey_id: String,
}

/// A digest of the session (or pre-login cookie) value: the value itself
/// never goes into a token, even a sealed one.
fn binding_of(binding: &str) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(b"cheq passkey ceremony binding\0");
    h.update(binding.as_bytes());
    b64::encode(h.finalize())
}

impl Ceremonies {
    /// The ceremonies of the CS at `public_url`, sealing with a key derived
    /// from `secret`; `None` when the URL has no host.
    pub fn new(secret: &[u8], public_url: &str) -> Option<Self> {
        Some(Ceremonies {
            key: TokenKey::new(secret, "cheq passkey ceremony"),
            rp: RelyingParty::of(public_url)?,
        })
    }

    /// The relying party.
    pub fn rp(&self) -> &RelyingParty {
        &self.rp
    }

    fn seal(&self, pending: &Pending) -> Result<String, CeremonyError> {
        self.key.seal(pending).ok_or(CeremonyError::BadCeremony)
    }

    fn open(
        &self,
        token: &str,
        kind: &str,
        binding: &str,
        now: i64,
    ) -> Result<Pending, CeremonyError> {
        let p: Pending = self.key.open(token).ok_or(CeremonyError::BadCeremony)?;
        let bound = binding_of(binding);
        if p.k != kind
            || now > p.e
            || !cheq_core::sign::same_secret(p.b.as_bytes(), bound.as_bytes())
        {
            return Err(CeremonyError::BadCeremony);
        }
        Ok(p)
    }

    /// Options to add a passkey named `name` to `account` (whose user handle
    /// is `handle`), and the ceremony token; `binding` is the session.
    pub fn begin_registration(
        &self,
        account: &Account,
        handle: &str,
        name: &str,
        binding: &str,
        now: i64,
    ) -> Result<(Value, String), CeremonyError> {
        let name = check_name(name)?;
        let challenge: [u8; 32] = rand::random();
        let token = self.seal(&Pending {
            k: "reg".into(),
            b: binding_of(binding),
            c: challenge,
            u: Some(account.username.clone()),
            n: Some(name),
            e: now + CEREMONY_SECS,
        })?;
        Ok((
            creation_options(&self.rp, account, handle, &challenge),
            token,
        ))
    }

    /// Checks the browser's answer and adds the passkey to the account the
    /// ceremony was begun for (read again, then written back).
    #[allow(clippy::too_many_arguments)]
    pub fn finish_registration(
        &self,
        accounts: &dyn Accounts,
        log: Option<&crate::transparency::TransparencyLog>,
        token: &str,
        binding: &str,
        now: i64,
        credential_id: &str,
        client_data: &[u8],
        attestation_object: &[u8],
    ) -> Result<Added, CeremonyError> {
        let p = self.open(token, "reg", binding, now)?;
        let new = finish_registration(
            &self.rp,
            &p.c,
            credential_id,
            client_data,
            attestation_object,
        )?;
        let username = p.u.ok_or(CeremonyError::BadCeremony)?;
        let name = p.n.ok_or(CeremonyError::BadCeremony)?;
        let mut account = accounts.get(&username)?.ok_or(CeremonyError::NoAccount)?;
        if account.passkeys.iter().any(|k| k.id == new.id) {
            return Err(CeremonyError::AlreadyRegistered);
        }
        // Named in the log before it is added (§15): a passkey the log does
        // not name is never one of the account's.
        if let Some(log) = log {
            log.credential(
                &account.username,
                &new.key,
                cheq_core::tlog::CredentialChange::Added,
            )?;
        }
        account.passkeys.push(Passkey {
            id: new.id,
            key: new.key,
            name: name.clone(),
            added: now,
            last_used: None,
            sign_count: new.sign_count,
        });
        accounts.put(&account, true)?;
        Ok(Added { account, name })
    }

    /// Options to sign in with any passkey of this CS, and the token.
    pub fn begin_sign_in(&self, binding: &str, now: i64) -> Result<(Value, String), CeremonyError> {
        let challenge: [u8; 32] = rand::random();
        let token = self.seal(&Pending {
            k: "in".into(),
            b: binding_of(binding),
            c: challenge,
            u: None,
            n: None,
            e: now + CEREMONY_SECS,
        })?;
        Ok((request_options(&self.rp, &challenge, &[]), token))
    }

    /// Checks a sign-in's answer: the account of its user handle, its
    /// passkey, the assertion; keeps the new counter and the time of use.
    pub fn finish_sign_in(
        &self,
        accounts: &dyn Accounts,
        token: &str,
        binding: &str,
        now: i64,
        user_handle: &str,
        answer: &AssertionAnswer,
    ) -> Result<SignedInWith, CeremonyError> {
        let p = self.open(token, "in", binding, now)?;
        let mut account = accounts
            .by_handle(user_handle)?
            .ok_or(CeremonyError::NoAccount)?;
        let i = account
            .passkeys
            .iter()
            .position(|k| k.id == answer.id)
            .ok_or(CeremonyError::UnknownPasskey)?;
        let count = check_assertion(&self.rp, &p.c, &account.passkeys[i], answer)?;
        account.passkeys[i].sign_count = count;
        account.passkeys[i].last_used = Some(now);
        let passkey_id = account.passkeys[i].id.clone();
        accounts.put(&account, true)?;
        Ok(SignedInWith {
            account,
            passkey_id,
        })
    }
}

#[cfg(test)]
#[path = "passkeys_tests.rs"]
mod tests;
