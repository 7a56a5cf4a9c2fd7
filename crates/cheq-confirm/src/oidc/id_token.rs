//! The rules an ID token must pass (OpenID Connect Core 1.0 §3.1.3.7), one
//! named check each, an [`IdTokenProblem`] saying which failed. The
//! `openidconnect` crate checks the signature (a key of the provider's JWKS,
//! an algorithm of [`ALLOWED_ALGS`]), issuer, audience, expiry and `nonce`;
//! the steps it leaves to the client are here: `azp` (steps 4–5), `iat`
//! (step 10) and `auth_time` (step 13).

use super::discovery::Discovered;
use super::{Pending, Provider, Providers};
use openidconnect::core::{
    CoreIdToken, CoreIdTokenClaims, CoreIdTokenVerifier, CoreJwsSigningAlgorithm,
};
use openidconnect::{
    ClaimsVerificationError, ClientId, ClientSecret, Nonce, SignatureVerificationError,
};

/// ID-token signature algorithms accepted: the asymmetric ones providers use
/// (RS256 is the OpenID Connect default, ES256 common). `none` and HMAC
/// (which a verifier must never run with a public key) are absent.
pub const ALLOWED_ALGS: [CoreJwsSigningAlgorithm; 8] = [
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha384,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha512,
    CoreJwsSigningAlgorithm::RsaSsaPssSha256,
    CoreJwsSigningAlgorithm::RsaSsaPssSha384,
    CoreJwsSigningAlgorithm::EcdsaP256Sha256,
    CoreJwsSigningAlgorithm::EcdsaP384Sha384,
    CoreJwsSigningAlgorithm::EdDsa,
];

/// Clock skew allowed between the CS and a provider.
pub const SKEW_SECS: i64 = 60;
/// An ID token issued longer ago than this is refused (Core §3.1.3.7 step 10).
pub const MAX_IAT_AGE_SECS: i64 = 600;

/// Why an ID token was refused: one variant per check of Core §3.1.3.7.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdTokenProblem {
    #[error("the token answer carried no ID token")]
    Missing,
    #[error("the ID token is not well-formed: {0}")]
    Malformed(String),
    #[error("the ID token was issued by someone else: {0}")]
    Issuer(String),
    #[error("the ID token is for another client: {0}")]
    Audience(String),
    #[error("the ID token's authorized party (azp) is not this client")]
    AuthorizedParty,
    #[error("the ID token's algorithm is not allowed: {0}")]
    Algorithm(String),
    #[error("no key of the provider matches the ID token")]
    UnknownKey,
    #[error("the ID token's signature does not verify: {0}")]
    Signature(String),
    #[error("the ID token has expired: {0}")]
    Expired(String),
    #[error("the ID token's issue time (iat) is not acceptable: {0}")]
    IssuedAt(String),
    #[error("the ID token's nonce is not the one of this sign-in")]
    Nonce,
    #[error("the sign-in is not fresh enough: {0}")]
    AuthTime(String),
}

impl Providers {
    /// The checks of Core §3.1.3.7 on one ID token.
    pub(super) fn verify(
        &self,
        p: &Provider,
        d: &Discovered,
        id_token: &CoreIdToken,
        pending: &Pending,
    ) -> Result<CoreIdTokenClaims, IdTokenProblem> {
        let now = self.clock.now();
        let verifier = CoreIdTokenVerifier::new_confidential_client(
            ClientId::new(p.client_id.clone()),
            ClientSecret::new(p.secret.expose().to_owned()),
            d.metadata.issuer().clone(),
            d.metadata.jwks().clone(),
        )
        .set_allowed_algs(ALLOWED_ALGS)
        .set_time_fn(move || now);
        let claims = id_token
            .claims(&verifier, &Nonce::new(pending.n.clone()))
            .map_err(problem_of)?
            .clone();
        check_azp(&claims, &p.client_id)?;
        check_iat(claims.issue_time().timestamp(), now.timestamp())?;
        check_auth_time(
            claims.auth_time().map(|t| t.timestamp()),
            pending.m,
            pending.t,
            now.timestamp(),
        )?;
        Ok(claims)
    }
}

fn problem_of(e: ClaimsVerificationError) -> IdTokenProblem {
    let short = |s: String| {
        cheq_support::text::one_line(&s)
            .chars()
            .take(200)
            .collect::<String>()
    };
    match e {
        ClaimsVerificationError::InvalidIssuer(s) => IdTokenProblem::Issuer(short(s)),
        ClaimsVerificationError::InvalidAudience(s) => IdTokenProblem::Audience(short(s)),
        ClaimsVerificationError::Expired(s) => IdTokenProblem::Expired(short(s)),
        ClaimsVerificationError::InvalidNonce(_) => IdTokenProblem::Nonce,
        ClaimsVerificationError::SignatureVerification(s) => match s {
            SignatureVerificationError::NoMatchingKey => IdTokenProblem::UnknownKey,
            SignatureVerificationError::DisallowedAlg(a)
            | SignatureVerificationError::UnsupportedAlg(a) => IdTokenProblem::Algorithm(short(a)),
            SignatureVerificationError::NoSignature => {
                IdTokenProblem::Algorithm("the token is not signed (alg none)".into())
            }
            other => IdTokenProblem::Signature(short(other.to_string())),
        },
        other => IdTokenProblem::Malformed(short(other.to_string())),
    }
}

/// Core §3.1.3.7 steps 4–5: with several audiences `azp` is required; when
/// present it must be this client.
fn check_azp(claims: &CoreIdTokenClaims, client_id: &str) -> Result<(), IdTokenProblem> {
    match claims.authorized_party() {
        Some(azp) if azp.as_str() != client_id => Err(IdTokenProblem::AuthorizedParty),
        None if claims.audiences().len() > 1 => Err(IdTokenProblem::AuthorizedParty),
        _ => Ok(()),
    }
}

/// Step 10: issued neither in the future nor too long ago.
fn check_iat(iat: i64, now: i64) -> Result<(), IdTokenProblem> {
    if iat > now + SKEW_SECS {
        return Err(IdTokenProblem::IssuedAt(format!(
            "issued {} s in the future",
            iat - now
        )));
    }
    if iat < now - MAX_IAT_AGE_SECS {
        return Err(IdTokenProblem::IssuedAt(format!(
            "issued {} s ago",
            now - iat
        )));
    }
    Ok(())
}

/// Step 13: when a fresh sign-in was asked (`max_age`), `auth_time` is
/// present, within `max_age`, and not before the sign-in was started.
/// Without `max_age` it may be absent (the time stays unknown), but a time
/// reported is never in the future.
fn check_auth_time(
    auth_time: Option<i64>,
    max_age: Option<i64>,
    started: i64,
    now: i64,
) -> Result<(), IdTokenProblem> {
    let t = match (auth_time, max_age) {
        (Some(t), _) => t,
        (None, None) => return Ok(()),
        (None, Some(_)) => {
            return Err(IdTokenProblem::AuthTime(
                "the provider sent no auth_time".into(),
            ))
        }
    };
    if t > now + SKEW_SECS {
        return Err(IdTokenProblem::AuthTime(
            "auth_time is in the future".into(),
        ));
    }
    let Some(max_age) = max_age else {
        return Ok(());
    };
    if now - t > max_age + SKEW_SECS || t < started - SKEW_SECS {
        return Err(IdTokenProblem::AuthTime(format!(
            "the provider reports a sign-in {} s ago; a new one was required",
            now - t
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iat_and_auth_time_rules() {
        let now = 1_000_000;
        check_iat(now, now).unwrap();
        check_iat(now + SKEW_SECS, now).unwrap();
        assert!(matches!(
            check_iat(now + SKEW_SECS + 1, now),
            Err(IdTokenProblem::IssuedAt(_))
        ));
        assert!(matches!(
            check_iat(now - MAX_IAT_AGE_SECS - 1, now),
            Err(IdTokenProblem::IssuedAt(_))
        ));
        let started = now - 30;
        check_auth_time(Some(now - 10), Some(300), started, now).unwrap();
        // Without max_age: absent or old is fine (unknown, or as reported),
        // never in the future.
        check_auth_time(None, None, started, now).unwrap();
        check_auth_time(Some(now - 100_000), None, started, now).unwrap();
        assert!(matches!(
            check_auth_time(Some(now + 120), None, started, now),
            Err(IdTokenProblem::AuthTime(_))
        ));
        for bad in [
            None,
            Some(now - 1000),
            Some(started - SKEW_SECS - 1),
            Some(now + 120),
        ] {
            assert!(
                matches!(
                    check_auth_time(bad, Some(300), started, now),
                    Err(IdTokenProblem::AuthTime(_))
                ),
                "{bad:?}"
            );
        }
    }
}
