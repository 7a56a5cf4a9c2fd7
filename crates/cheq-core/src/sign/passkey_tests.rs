use super::*;
use josekit::jws::JwsSigner as _;
use serde_json::json;

const ORIGIN: &str = "https://confirm.example";
const RP_ID: &str = "confirm.example";

/// Signs as an authenticator does (ES256 in DER).
type Sign = Box<dyn Fn(&[u8]) -> Vec<u8>>;

/// A credential of one kind: its public JWK and its signer.
struct Credential {
    jwk: Value,
    sign: Sign,
}

/// `r || s` as DER, as an authenticator gives it.
fn raw_to_der(raw: &[u8]) -> Vec<u8> {
    let int = |b: &[u8]| {
        let mut v: Vec<u8> = b.iter().copied().skip_while(|&x| x == 0).collect();
        if v.is_empty() || v[0] & 0x80 != 0 {
            v.insert(0, 0);
        }
        let mut out = vec![0x02, v.len() as u8];
        out.extend(v);
        out
    };
    let body = [int(&raw[..32]), int(&raw[32..])].concat();
    let mut der = vec![0x30, body.len() as u8];
    der.extend(body);
    der
}

fn es256() -> Credential {
    let pair = josekit::jws::ES256.generate_key_pair().unwrap();
    let signer = josekit::jws::ES256
        .signer_from_jwk(&pair.to_jwk_private_key())
        .unwrap();
    let jwk = Value::Object(pair.to_jwk_public_key().as_ref().clone());
    Credential {
        jwk,
        sign: Box::new(move |m| raw_to_der(&signer.sign(m).unwrap())),
    }
}

fn eddsa() -> Credential {
    let key = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    let jwk =
        json!({"kty": "OKP", "crv": "Ed25519", "x": b64::encode(key.verifying_key().to_bytes())});
    Credential {
        jwk,
        sign: Box::new(move |m| {
            use ed25519_dalek::Signer as _;
            key.sign(m).to_bytes().to_vec()
        }),
    }
}

fn rs256() -> Credential {
    let pair = josekit::jws::RS256.generate_key_pair(2048).unwrap();
    let signer = josekit::jws::RS256
        .signer_from_jwk(&pair.to_jwk_private_key())
        .unwrap();
    let jwk = Value::Object(pair.to_jwk_public_key().as_ref().clone());
    Credential {
        jwk,
        sign: Box::new(move |m| signer.sign(m).unwrap()),
    }
}

/// What an authenticator and a browser put together.
struct Made {
    client_data: Vec<u8>,
    authenticator_data: Vec<u8>,
}

fn made(challenge: &[u8; 32], origin: &str, rp_id: &str, flags: u8, extra: &str) -> Made {
    let client_data = format!(
        r#"{{"type":"webauthn.get","challenge":"{}","origin":"{origin}"{extra}}}"#,
        b64::encode(challenge)
    )
    .into_bytes();
    let mut authenticator_data = Sha256::digest(rp_id.as_bytes()).to_vec();
    authenticator_data.push(flags);
    authenticator_data.extend_from_slice(&7u32.to_be_bytes());
    Made {
        client_data,
        authenticator_data,
    }
}

/// The `cheq_passkey` member for `made`, signed by `cred`.
fn member(cred: &Credential, m: &Made) -> Value {
    let mut message = m.authenticator_data.clone();
    message.extend_from_slice(&Sha256::digest(&m.client_data));
    json!({
        "id": b64::encode(b"credential-1"),
        "key": cred.jwk,
        "authenticator_data": b64::encode(&m.authenticator_data),
        "client_data": b64::encode(&m.client_data),
        "signature": b64::encode((cred.sign)(&message)),
    })
}

fn decision_challenge(decision: Decision) -> [u8; 32] {
    let mut collected = IndexMap::new();
    collected.insert("amount".to_owned(), "12.50".to_owned());
    challenge(&[1; 32], &[2; 32], decision, Some(&collected))
}

fn check(member: &Value, challenge: &[u8; 32]) -> Result<BoundAssertion, PasskeyError> {
    let assertion = PasskeyAssertion::from_json(member)?;
    verify(
        &assertion,
        Expected {
            challenge,
            origin: ORIGIN,
            rp_id: RP_ID,
        },
    )
}

const UP_UV: u8 = 0x05;

#[test]
fn an_assertion_of_each_key_type_binds_its_decision() {
    let c = decision_challenge(Decision::Accept);
    for cred in [es256(), eddsa(), rs256()] {
        let m = made(&c, ORIGIN, RP_ID, UP_UV, "");
        let bound = check(&member(&cred, &m), &c).unwrap();
        assert_eq!(bound.sign_count, 7);
        assert_eq!(bound.credential_id, b"credential-1");
        // crossOrigin false is fine too.
        let m = made(&c, ORIGIN, RP_ID, UP_UV, r#","crossOrigin":false"#);
        assert!(check(&member(&cred, &m), &c).is_ok());
    }
}

#[test]
fn each_check_fails_with_its_own_error() {
    let cred = es256();
    let c = decision_challenge(Decision::Accept);
    let cases: Vec<(Made, PasskeyError)> = vec![
        (
            made(
                &decision_challenge(Decision::Reject),
                ORIGIN,
                RP_ID,
                UP_UV,
                "",
            ),
            PasskeyError::WrongChallenge,
        ),
        (
            made(&c, "https://evil.example", RP_ID, UP_UV, ""),
            PasskeyError::WrongOrigin,
        ),
        (
            made(&c, ORIGIN, RP_ID, UP_UV, r#","crossOrigin":true"#),
            PasskeyError::CrossOrigin,
        ),
        (
            made(&c, ORIGIN, "evil.example", UP_UV, ""),
            PasskeyError::WrongRpId,
        ),
        (
            made(&c, ORIGIN, RP_ID, 0x04, ""),
            PasskeyError::UserNotPresent,
        ),
        (
            made(&c, ORIGIN, RP_ID, 0x01, ""),
            PasskeyError::UserNotVerified,
        ),
        (
            made(
                &c,
                ORIGIN,
                RP_ID,
                UP_UV,
                r#","origin":"https://confirm.example""#,
            ),
            PasskeyError::ClientDataNotJson,
        ),
    ];
    for (m, want) in cases {
        assert_eq!(check(&member(&cred, &m), &c), Err(want.clone()), "{want}");
    }
    let mut m = made(&c, ORIGIN, RP_ID, UP_UV, "");
    let text = String::from_utf8(m.client_data.clone()).unwrap();
    m.client_data = text.replace("webauthn.get", "webauthn.create").into_bytes();
    assert_eq!(check(&member(&cred, &m), &c), Err(PasskeyError::WrongType));
    let mut m = made(&c, ORIGIN, RP_ID, UP_UV, "");
    m.authenticator_data.truncate(36);
    assert_eq!(
        check(&member(&cred, &m), &c),
        Err(PasskeyError::ShortAuthenticatorData)
    );
    // Another credential's signature, and one altered byte.
    let m = made(&c, ORIGIN, RP_ID, UP_UV, "");
    let mut v = member(&cred, &m);
    v["key"] = es256().jwk;
    assert_eq!(check(&v, &c), Err(PasskeyError::BadSignature));
    let mut v = member(&cred, &m);
    let mut sig = b64::decode(v["signature"].as_str().unwrap()).unwrap();
    let last = sig.len() - 1;
    sig[last] ^= 1;
    v["signature"] = b64::encode(&sig).into();
    assert_eq!(check(&v, &c), Err(PasskeyError::BadSignature));
}

#[test]
fn the_challenge_changes_with_every_input() {
    let collected = |v: &str| {
        let mut m = IndexMap::new();
        m.insert("amount".to_owned(), v.to_owned());
        m
    };
    let base = challenge(&[1; 32], &[2; 32], Decision::Accept, Some(&collected("1")));
    let others = [
        challenge(&[9; 32], &[2; 32], Decision::Accept, Some(&collected("1"))),
        challenge(&[1; 32], &[9; 32], Decision::Accept, Some(&collected("1"))),
        challenge(&[1; 32], &[2; 32], Decision::Reject, Some(&collected("1"))),
        challenge(&[1; 32], &[2; 32], Decision::Accept, Some(&collected("2"))),
        challenge(&[1; 32], &[2; 32], Decision::Accept, None),
    ];
    for other in others {
        assert_ne!(other, base);
    }
    // By hand: the bytes the challenge is the digest of.
    let mut bytes = b"CHEQ passkey v1\0".to_vec();
    bytes.extend([1; 32]);
    bytes.extend([2; 32]);
    bytes.extend(b"accept");
    bytes.extend([0; 32]);
    let want: [u8; 32] = Sha256::digest(&bytes).into();
    assert_eq!(challenge(&[1; 32], &[2; 32], Decision::Accept, None), want);
}

/// RFC 8785 §3.2.3: members sorted by UTF-16 code units.
#[test]
fn jcs_sorts_and_escapes_as_rfc_8785_says() {
    let mut m = IndexMap::new();
    for (k, v) in [
        ("\u{20ac}", "Euro Sign"),
        ("\r", "Carriage Return"),
        ("\u{fb33}", "Hebrew Letter Dalet With Dagesh"),
        ("1", "One"),
        ("\u{1f600}", "Emoji: Grinning Face"),
        ("\u{80}", "Control"),
        ("\u{f6}", "Latin Small Letter O With Diaeresis"),
    ] {
        m.insert(k.to_owned(), v.to_owned());
    }
    let text = jcs_string_map(&m);
    let order: Vec<&str> = [
        "\\r",
        "1",
        "\u{80}",
        "\u{f6}",
        "\u{20ac}",
        "\u{1f600}",
        "\u{fb33}",
    ]
    .into_iter()
    .collect();
    let mut at = 0;
    for key in order {
        let found = text[at..]
            .find(&format!("\"{key}\":"))
            .unwrap_or_else(|| panic!("{key:?} in {text}"));
        at += found + 1;
    }
    let mut m = IndexMap::new();
    m.insert("a".to_owned(), "q\"\\\u{1}\u{1f}\n".to_owned());
    assert_eq!(jcs_string_map(&m), r#"{"a":"q\"\\\u0001\u001f\n"}"#);
}

#[test]
fn the_member_must_be_whole_and_its_key_public() {
    let cred = eddsa();
    let c = decision_challenge(Decision::Accept);
    let good = member(&cred, &made(&c, ORIGIN, RP_ID, UP_UV, ""));
    for name in [
        "id",
        "key",
        "authenticator_data",
        "client_data",
        "signature",
    ] {
        let mut v = good.clone();
        v.as_object_mut().unwrap().remove(name);
        assert!(
            matches!(check(&v, &c), Err(PasskeyError::Malformed(_))),
            "{name}"
        );
    }
    let mut v = good.clone();
    v["extra"] = json!(1);
    assert_eq!(check(&v, &c), Err(PasskeyError::Malformed("cheq_passkey")));
    let mut v = good.clone();
    v["signature"] = json!("not base64!");
    assert_eq!(check(&v, &c), Err(PasskeyError::Malformed("signature")));
    let mut v = good.clone();
    v["key"]["d"] = json!(b64::encode([7u8; 32]));
    assert_eq!(check(&v, &c), Err(PasskeyError::UnsupportedKey));
    let mut v = good;
    v["key"] = json!({"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"});
    assert_eq!(check(&v, &c), Err(PasskeyError::UnsupportedKey));
}

#[test]
fn der_signatures_are_read_strictly() {
    let raw: Vec<u8> = (1..=64).collect();
    let der = raw_to_der(&raw);
    assert_eq!(der_to_raw(&der).map(|r| r.to_vec()), Some(raw.clone()));
    // Trailing bytes, a wrong length, a needless leading zero, a negative.
    let mut longer = der.clone();
    longer.push(0);
    assert_eq!(der_to_raw(&longer), None);
    let mut bad_len = der.clone();
    bad_len[1] += 1;
    assert_eq!(der_to_raw(&bad_len), None);
    let padded = [0x30, 0x07, 0x02, 0x02, 0x00, 0x01, 0x02, 0x01, 0x01];
    assert_eq!(der_to_raw(&padded), None);
    let negative = [0x30, 0x06, 0x02, 0x01, 0x81, 0x02, 0x01, 0x01];
    assert_eq!(der_to_raw(&negative), None);
    let small = [0x30, 0x06, 0x02, 0x01, 0x05, 0x02, 0x01, 0x06];
    let r = der_to_raw(&small).unwrap();
    assert_eq!((r[31], r[63]), (5, 6));
}
