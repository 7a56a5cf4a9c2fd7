//! RFC 8037 Appendix A.4: the signing core reproduces the published Ed25519 JWS
//! for the published key and payload, byte for byte (and A.5: verifies it).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::sign::{assemble, b64, sign_entry, PublicKey, SigningKey};

/// The published key of RFC 8037 Appendix A.1 (a test vector, not a secret).
const JWK: &str = include_str!("fixtures/rfc8037/key.json");
const PROTECTED: &str = "eyJhbGciOiJFZERTQSJ9";
const PAYLOAD: &str = "RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc";
const SIGNATURE: &str =
    "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg";

#[test]
fn appendix_a4_signature_byte_for_byte() {
    let key = SigningKey::from_jwk_bytes(JWK.as_bytes()).unwrap();
    assert_eq!(b64::decode(PAYLOAD).unwrap(), b"Example of Ed25519 signing");
    let (protected, signature) = sign_entry(&key, r#"{"alg":"EdDSA"}"#, PAYLOAD);
    assert_eq!(protected, PROTECTED);
    assert_eq!(signature, SIGNATURE);
    assert_eq!(
        format!("{protected}.{PAYLOAD}.{signature}"),
        "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc.hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg"
    );
    assert_eq!(
        assemble(PAYLOAD, &[(&protected, &signature)]),
        format!(
            r#"{{"payload":"{PAYLOAD}","signatures":[{{"protected":"{PROTECTED}","signature":"{SIGNATURE}"}}]}}"#
        )
    );
    // The public JWK is the published one.
    assert_eq!(
        key.public_jwk()["x"],
        "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
    );
}

#[test]
fn appendix_a5_verification() {
    let public = serde_json::json!({"kty":"OKP","crv":"Ed25519","kid":"rfc8037",
        "x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
    let key = PublicKey::from_jwk(public.as_object().unwrap()).unwrap();
    let sig = b64::decode(SIGNATURE).unwrap();
    let input = format!("{PROTECTED}.{PAYLOAD}");
    assert!(key.verify(input.as_bytes(), &sig));
    let mut bad = sig.clone();
    bad[0] ^= 1;
    assert!(!key.verify(input.as_bytes(), &bad));
    assert!(!key.verify(b"eyJhbGciOiJFZERTQSJ9.other", &sig));
}
