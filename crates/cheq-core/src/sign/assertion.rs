//! A CS's client assertion at an RS's token endpoint (PROTOCOL.md §16.4;
//! RFC 7523 §2.2, OpenID Connect Core §9 `private_key_jwt`): a compact JWS
//! signed with one of the CS's own keys, instead of a secret each RS issues.
//!
//! Verification is a chain of small named checks, each with its own error:
//! the three parts, the header (`alg` `EdDSA`, `typ`
//! `client-authentication+jwt`, a `kid`, nothing critical), the key in the
//! CS's set, the signature, then the claims (`iss` = `sub` = the CS's
//! issuer, `aud` = this token endpoint, `exp` in the future and at most
//! [`MAX_LIFETIME_SECS`] after `iat`, `iat` not in the future, a `jti` long
//! enough to hold 128 random bits). The `jti`'s single use is the caller's
//! to enforce (it needs a store shared by every instance).

use super::b64;
use super::keys::{Algorithm, SigningKey};
use super::trust::KeySource;
use crate::cheq::json::parse_object;
use serde_json::{json, Map, Value};

/// The `typ` of an assertion's header: no other document the CS signs can
/// pass for an assertion, and no assertion for anything else.
pub const TYP: &str = "client-authentication+jwt";
/// `client_assertion_type` of the token request.
pub const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// The longest an assertion may live (`exp` − `iat`).
pub const MAX_LIFETIME_SECS: i64 = 60;
/// How far a signer's clock may run ahead of the verifier's (the
/// contract's clock skew).
pub const CLOCK_SKEW_SECS: i64 = 60;
/// The shortest `jti`: 22 base64url characters hold 128 bits.
pub const MIN_JTI_LEN: usize = 22;
/// Longest assertion read.
pub const MAX_ASSERTION_LEN: usize = 8 * 1024;

/// Why an assertion is refused; each is one check of the chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssertionError {
    #[error("the assertion is not a compact JWS of three base64url parts")]
    Malformed,
    #[error("the assertion is longer than {MAX_ASSERTION_LEN} bytes")]
    TooLong,
    #[error("the assertion's header is not a JSON object: {0}")]
    BadHeader(String),
    #[error("the assertion's \"alg\" is not \"EdDSA\"")]
    WrongAlgorithm,
    #[error("the assertion's \"typ\" is not \"{TYP}\"")]
    WrongType,
    #[error("the assertion's header names no \"kid\"")]
    NoKeyId,
    #[error("the assertion's header carries \"crit\"")]
    Critical,
    #[error("the key \"{0}\" is not in the confirmation server's key set")]
    UnknownKey(String),
    #[error("the assertion's signature does not verify")]
    BadSignature,
    #[error("the assertion's claims are not a JSON object: {0}")]
    BadClaims(String),
    #[error("the assertion's \"iss\" or \"sub\" is not the confirmation server's issuer")]
    WrongIssuer,
    #[error("the assertion's \"aud\" is not this token endpoint")]
    WrongAudience,
    #[error("the assertion lacks \"{0}\" or it has the wrong type")]
    MissingClaim(&'static str),
    #[error("the assertion has expired")]
    Expired,
    #[error("the assertion was issued in the future")]
    IssuedInFuture,
    #[error("the assertion lives longer than {MAX_LIFETIME_SECS} s")]
    TooLongLived,
    #[error("the assertion's \"jti\" is shorter than {MIN_JTI_LEN} characters")]
    WeakJti,
}

/// What a signer puts in an assertion; `exp` is `issued_at` +
/// [`MAX_LIFETIME_SECS`].
#[derive(Debug, Clone)]
pub struct AssertionClaims<'a> {
    /// The CS's issuer (its origin).
    pub issuer: &'a str,
    /// The RS's token endpoint.
    pub audience: &'a str,
    /// At least 128 random bits, base64url.
    pub jti: &'a str,
    pub issued_at: i64,
}

/// The header's exact JSON text.
fn header_json(kid: &str) -> String {
    json!({"alg": "EdDSA", "kid": kid, "typ": TYP}).to_string()
}

/// Signs a client assertion.
pub fn client_assertion(key: &SigningKey, claims: &AssertionClaims<'_>) -> String {
    let header = b64::encode(header_json(key.kid()));
    let payload = b64::encode(
        json!({
            "iss": claims.issuer,
            "sub": claims.issuer,
            "aud": claims.audience,
            "jti": claims.jti,
            "iat": claims.issued_at,
            "exp": claims.issued_at + MAX_LIFETIME_SECS,
        })
        .to_string(),
    );
    let input = format!("{header}.{payload}");
    let signature = b64::encode(key.sign(input.as_bytes()));
    format!("{input}.{signature}")
}

/// 128 random bits as a `jti`.
pub fn new_jti(rng: &mut impl rand_core::CryptoRngCore) -> String {
    let mut bytes = [0u8; 16];
    rng.fill_bytes(&mut bytes);
    b64::encode(bytes)
}

/// An assertion that passed every check but the `jti`'s single use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedAssertion {
    /// The CS it names (its issuer).
    pub issuer: String,
    pub jti: String,
    /// Until when the `jti` must be remembered.
    pub expires_at: i64,
}

/// What the verifier expects.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// The CS's issuer.
    pub issuer: &'a str,
    /// This token endpoint.
    pub audience: &'a str,
    pub now: i64,
}

/// Verifies `assertion` against the CS's keys.
pub fn verify_client_assertion(
    assertion: &str,
    keys: &dyn KeySource,
    expected: Expected<'_>,
) -> Result<VerifiedAssertion, AssertionError> {
    let parts = split(assertion)?;
    let header = read_header(parts.header)?;
    let kid = check_header(&header)?;
    check_signature(&parts, kid, keys)?;
    let claims = read_claims(parts.payload)?;
    check_issuer(&claims, expected.issuer)?;
    check_audience(&claims, expected.audience)?;
    let expires_at = check_times(&claims, expected.now)?;
    let jti = check_jti(&claims)?;
    Ok(VerifiedAssertion {
        issuer: expected.issuer.to_owned(),
        jti,
        expires_at,
    })
}

/// The `iss` an assertion claims, read without checking anything else:
/// only to choose whose keys to verify it with ([`verify_client_assertion`]
/// then checks every claim, this one included).
pub fn claimed_issuer(assertion: &str) -> Result<String, AssertionError> {
    let parts = split(assertion)?;
    let claims = read_claims(parts.payload)?;
    Ok(text(&claims, "iss")?.to_owned())
}

struct Parts<'a> {
    header: &'a str,
    payload: &'a str,
    signature: &'a str,
}

fn split(assertion: &str) -> Result<Parts<'_>, AssertionError> {
    if assertion.len() > MAX_ASSERTION_LEN {
        return Err(AssertionError::TooLong);
    }
    let mut it = assertion.split('.');
    match (it.next(), it.next(), it.next(), it.next()) {
        (Some(header), Some(payload), Some(signature), None)
            if !header.is_empty() && !payload.is_empty() && !signature.is_empty() =>
        {
            Ok(Parts {
                header,
                payload,
                signature,
            })
        }
        _ => Err(AssertionError::Malformed),
    }
}

fn read_header(header: &str) -> Result<Map<String, Value>, AssertionError> {
    let bytes = b64::decode(header).ok_or(AssertionError::Malformed)?;
    parse_object(&bytes, MAX_ASSERTION_LEN).map_err(|e| AssertionError::BadHeader(e.to_string()))
}

fn check_header(header: &Map<String, Value>) -> Result<&str, AssertionError> {
    if header.get("alg").and_then(Value::as_str) != Some(Algorithm::EdDsa.as_str()) {
        return Err(AssertionError::WrongAlgorithm);
    }
    if header.get("typ").and_then(Value::as_str) != Some(TYP) {
        return Err(AssertionError::WrongType);
    }
    if header.contains_key("crit") {
        return Err(AssertionError::Critical);
    }
    header
        .get("kid")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
        .ok_or(AssertionError::NoKeyId)
}

fn check_signature(
    parts: &Parts<'_>,
    kid: &str,
    keys: &dyn KeySource,
) -> Result<(), AssertionError> {
    let key = keys
        .key(kid)
        .filter(|k| k.algorithm() == Algorithm::EdDsa)
        .ok_or_else(|| AssertionError::UnknownKey(kid.to_owned()))?;
    let signature = b64::decode(parts.signature).ok_or(AssertionError::Malformed)?;
    let input = format!("{}.{}", parts.header, parts.payload);
    if key.verify(input.as_bytes(), &signature) {
        Ok(())
    } else {
        Err(AssertionError::BadSignature)
    }
}

fn read_claims(payload: &str) -> Result<Map<String, Value>, AssertionError> {
    let bytes = b64::decode(payload).ok_or(AssertionError::Malformed)?;
    parse_object(&bytes, MAX_ASSERTION_LEN).map_err(|e| AssertionError::BadClaims(e.to_string()))
}

fn text<'a>(claims: &'a Map<String, Value>, name: &'static str) -> Result<&'a str, AssertionError> {
    claims
        .get(name)
        .and_then(Value::as_str)
        .ok_or(AssertionError::MissingClaim(name))
}

fn number(claims: &Map<String, Value>, name: &'static str) -> Result<i64, AssertionError> {
    claims
        .get(name)
        .and_then(Value::as_i64)
        .ok_or(AssertionError::MissingClaim(name))
}

fn check_issuer(claims: &Map<String, Value>, issuer: &str) -> Result<(), AssertionError> {
    if text(claims, "iss")? != issuer || text(claims, "sub")? != issuer {
        return Err(AssertionError::WrongIssuer);
    }
    Ok(())
}

/// `aud` is the token endpoint, alone or as the only member of an array.
fn check_audience(claims: &Map<String, Value>, audience: &str) -> Result<(), AssertionError> {
    let ok = match claims.get("aud") {
        Some(Value::String(a)) => a == audience,
        Some(Value::Array(a)) => a.len() == 1 && a[0].as_str() == Some(audience),
        None => return Err(AssertionError::MissingClaim("aud")),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(AssertionError::WrongAudience)
    }
}

fn check_times(claims: &Map<String, Value>, now: i64) -> Result<i64, AssertionError> {
    let iat = number(claims, "iat")?;
    let exp = number(claims, "exp")?;
    if exp <= now {
        return Err(AssertionError::Expired);
    }
    if iat > now + CLOCK_SKEW_SECS {
        return Err(AssertionError::IssuedInFuture);
    }
    if exp - iat > MAX_LIFETIME_SECS || exp < iat {
        return Err(AssertionError::TooLongLived);
    }
    Ok(exp)
}

fn check_jti(claims: &Map<String, Value>) -> Result<String, AssertionError> {
    let jti = text(claims, "jti")?;
    if jti.len() < MIN_JTI_LEN {
        return Err(AssertionError::WeakJti);
    }
    Ok(jti.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sign::Jwks;

    const ISS: &str = "https://confirm.example";
    const AUD: &str = "https://api.airline.example/oauth/token";
    const JTI: &str = "c2V2ZW50ZWVuIHJhbmRvbSBieXRlcw";

    fn key(kid: &str, seed: u8) -> SigningKey {
        SigningKey::from_seed(kid, &[seed; 32]).unwrap()
    }

    fn set(keys: &[&SigningKey]) -> Jwks {
        Jwks::new(keys.iter().map(|k| k.public_key()).collect()).unwrap()
    }

    fn claims(now: i64) -> AssertionClaims<'static> {
        AssertionClaims {
            issuer: ISS,
            audience: AUD,
            jti: JTI,
            issued_at: now,
        }
    }

    fn expected(now: i64) -> Expected<'static> {
        Expected {
            issuer: ISS,
            audience: AUD,
            now,
        }
    }

    /// Signs `header` and `payload` as given, for documents a signer of
    /// this module would never make.
    fn forged(key: &SigningKey, header: &Value, payload: &Value) -> String {
        let input = format!(
            "{}.{}",
            b64::encode(header.to_string()),
            b64::encode(payload.to_string())
        );
        format!("{input}.{}", b64::encode(key.sign(input.as_bytes())))
    }

    fn payload(now: i64) -> Value {
        json!({"iss": ISS, "sub": ISS, "aud": AUD, "jti": JTI, "iat": now, "exp": now + 60})
    }

    #[test]
    fn a_signed_assertion_verifies() {
        let k = key("cs-1", 7);
        let a = client_assertion(&k, &claims(1000));
        let v = verify_client_assertion(&a, &set(&[&k]), expected(1010)).unwrap();
        assert_eq!(v.issuer, ISS);
        assert_eq!(v.jti, JTI);
        assert_eq!(v.expires_at, 1060);
    }

    #[test]
    fn the_claimed_issuer_is_read_unverified() {
        let k = key("cs-1", 7);
        let a = client_assertion(&k, &claims(1000));
        assert_eq!(claimed_issuer(&a).unwrap(), ISS);
        let other = forged(
            &k,
            &json!({"alg": "EdDSA"}),
            &json!({"iss": "https://x.example"}),
        );
        assert_eq!(claimed_issuer(&other).unwrap(), "https://x.example");
        assert_eq!(claimed_issuer("a.b"), Err(AssertionError::Malformed));
        let none = forged(&k, &json!({}), &json!({"sub": ISS}));
        assert_eq!(
            claimed_issuer(&none),
            Err(AssertionError::MissingClaim("iss"))
        );
    }

    #[test]
    fn each_deviation_is_refused_with_its_reason() {
        let k = key("cs-1", 7);
        let keys = set(&[&k]);
        let good = client_assertion(&k, &claims(1000));
        let verify = |a: &str, now| verify_client_assertion(a, &keys, expected(now));
        assert_eq!(verify(&good, 1060), Err(AssertionError::Expired));
        assert_eq!(
            verify_client_assertion(
                &good,
                &keys,
                Expected {
                    audience: "https://other.example/oauth/token",
                    ..expected(1000)
                }
            ),
            Err(AssertionError::WrongAudience)
        );
        assert_eq!(
            verify_client_assertion(
                &good,
                &keys,
                Expected {
                    issuer: "https://other-cs.example",
                    ..expected(1000)
                }
            ),
            Err(AssertionError::WrongIssuer)
        );
        let stranger = key("cs-1", 8);
        assert_eq!(
            verify(&client_assertion(&stranger, &claims(1000)), 1000),
            Err(AssertionError::BadSignature)
        );
        let unknown = key("cs-9", 7);
        assert_eq!(
            verify(&client_assertion(&unknown, &claims(1000)), 1000),
            Err(AssertionError::UnknownKey("cs-9".into()))
        );
        let header = |typ: &str| json!({"alg": "EdDSA", "kid": "cs-1", "typ": typ});
        assert_eq!(
            verify(&forged(&k, &header("JWT"), &payload(1000)), 1000),
            Err(AssertionError::WrongType)
        );
        assert_eq!(
            verify(
                &forged(&k, &header("cheq-evidence+jws"), &payload(1000)),
                1000
            ),
            Err(AssertionError::WrongType)
        );
        assert_eq!(
            verify(
                &forged(
                    &k,
                    &json!({"alg": "none", "kid": "cs-1", "typ": TYP}),
                    &payload(1000)
                ),
                1000
            ),
            Err(AssertionError::WrongAlgorithm)
        );
        assert_eq!(
            verify(
                &forged(
                    &k,
                    &json!({"alg": "EdDSA", "kid": "cs-1", "typ": TYP, "crit": ["x"]}),
                    &payload(1000)
                ),
                1000
            ),
            Err(AssertionError::Critical)
        );
        assert_eq!(
            verify(
                &forged(&k, &json!({"alg": "EdDSA", "typ": TYP}), &payload(1000)),
                1000
            ),
            Err(AssertionError::NoKeyId)
        );
        let mut long = payload(1000);
        long["exp"] = json!(1000 + 61);
        assert_eq!(
            verify(&forged(&k, &header(TYP), &long), 1000),
            Err(AssertionError::TooLongLived)
        );
        let mut future = payload(2000);
        future["exp"] = json!(2030);
        assert_eq!(
            verify(&forged(&k, &header(TYP), &future), 1000),
            Err(AssertionError::IssuedInFuture)
        );
        let mut weak = payload(1000);
        weak["jti"] = json!("1");
        assert_eq!(
            verify(&forged(&k, &header(TYP), &weak), 1000),
            Err(AssertionError::WeakJti)
        );
        let mut sub = payload(1000);
        sub["sub"] = json!("someone");
        assert_eq!(
            verify(&forged(&k, &header(TYP), &sub), 1000),
            Err(AssertionError::WrongIssuer)
        );
        let mut two = payload(1000);
        two["aud"] = json!([AUD, "https://other.example/oauth/token"]);
        assert_eq!(
            verify(&forged(&k, &header(TYP), &two), 1000),
            Err(AssertionError::WrongAudience)
        );
        let mut no_iat = payload(1000);
        no_iat.as_object_mut().unwrap().remove("iat");
        assert_eq!(
            verify(&forged(&k, &header(TYP), &no_iat), 1000),
            Err(AssertionError::MissingClaim("iat"))
        );
        assert_eq!(verify("a.b", 1000), Err(AssertionError::Malformed));
        assert_eq!(verify("a..c", 1000), Err(AssertionError::Malformed));
        assert_eq!(
            verify(&"a".repeat(MAX_ASSERTION_LEN + 1), 1000),
            Err(AssertionError::TooLong)
        );
        // A duplicate member is refused by the strict reader.
        let dup = format!(
            "{}.{}",
            b64::encode(
                r#"{"alg":"EdDSA","kid":"cs-1","typ":"client-authentication+jwt","typ":"JWT"}"#
            ),
            b64::encode(payload(1000).to_string())
        );
        let dup = format!("{dup}.{}", b64::encode(k.sign(dup.as_bytes())));
        assert!(matches!(
            verify(&dup, 1000),
            Err(AssertionError::BadHeader(_))
        ));
    }

    #[test]
    fn a_jti_holds_128_bits() {
        let mut rng = rand_core::OsRng;
        let (a, b) = (new_jti(&mut rng), new_jti(&mut rng));
        assert_eq!(a.len(), MIN_JTI_LEN);
        assert_ne!(a, b);
    }
}
