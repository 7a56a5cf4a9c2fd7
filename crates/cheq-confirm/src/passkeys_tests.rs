use super::*;
use ciborium::Value as Cbor;
use ed25519_dalek::Signer as _;
use sha2::{Digest, Sha256};

fn rp() -> RelyingParty {
    RelyingParty::of("https://confirm.example/confirm").unwrap()
}

fn key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[9u8; 32])
}

fn cbor(v: &Cbor) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(v, &mut out).unwrap();
    out
}

fn ed25519_cose() -> Cbor {
    Cbor::Map(vec![
        (Cbor::Integer(1.into()), Cbor::Integer(1.into())),
        (Cbor::Integer(3.into()), Cbor::Integer((-8).into())),
        (Cbor::Integer((-1).into()), Cbor::Integer(6.into())),
        (
            Cbor::Integer((-2).into()),
            Cbor::Bytes(key().verifying_key().to_bytes().to_vec()),
        ),
    ])
}

fn client_data(kind: &str, challenge: &[u8; 32], origin: &str) -> Vec<u8> {
    format!(
        r#"{{"type":"{kind}","challenge":"{}","origin":"{origin}","crossOrigin":false}}"#,
        b64::encode(challenge)
    )
    .into_bytes()
}

fn auth_data(rp_id: &str, flags: u8, count: u32, credential: Option<(&[u8], &Cbor)>) -> Vec<u8> {
    let mut d = Sha256::digest(rp_id.as_bytes()).to_vec();
    d.push(flags);
    d.extend_from_slice(&count.to_be_bytes());
    if let Some((id, cose)) = credential {
        d.extend_from_slice(&[0u8; 16]);
        d.extend_from_slice(&(id.len() as u16).to_be_bytes());
        d.extend_from_slice(id);
        d.extend(cbor(cose));
    }
    d
}

fn attestation(auth_data: Vec<u8>) -> Vec<u8> {
    cbor(&Cbor::Map(vec![
        (Cbor::Text("fmt".into()), Cbor::Text("none".into())),
        (Cbor::Text("attStmt".into()), Cbor::Map(vec![])),
        (Cbor::Text("authData".into()), Cbor::Bytes(auth_data)),
    ]))
}

const ID: &[u8] = b"cred-0001";

fn register(challenge: &[u8; 32]) -> Result<NewCredential, CeremonyError> {
    let att = attestation(auth_data(
        "confirm.example",
        0x45,
        0,
        Some((ID, &ed25519_cose())),
    ));
    finish_registration(
        &rp(),
        challenge,
        &b64::encode(ID),
        &client_data("webauthn.create", challenge, "https://confirm.example"),
        &att,
    )
}

fn passkey(new: NewCredential) -> Passkey {
    Passkey {
        id: new.id,
        key: new.key,
        name: "laptop".into(),
        added: 1,
        last_used: None,
        sign_count: new.sign_count,
    }
}

fn answer(challenge: &[u8; 32], count: u32) -> AssertionAnswer {
    let cd = client_data("webauthn.get", challenge, "https://confirm.example");
    let ad = auth_data("confirm.example", 0x05, count, None);
    let mut message = ad.clone();
    message.extend_from_slice(&Sha256::digest(&cd));
    AssertionAnswer {
        id: b64::encode(ID),
        client_data: cd,
        authenticator_data: ad,
        signature: key().sign(&message).to_bytes().to_vec(),
    }
}

#[test]
fn a_registered_passkey_signs_in_and_its_counter_must_grow() {
    let c = [3u8; 32];
    let new = register(&c).unwrap();
    assert_eq!(new.key["kty"], "OKP");
    assert_eq!(new.key["x"], b64::encode(key().verifying_key().to_bytes()));
    let mut pk = passkey(new);
    let c2 = [4u8; 32];
    pk.sign_count = check_assertion(&rp(), &c2, &pk, &answer(&c2, 5)).unwrap();
    assert_eq!(pk.sign_count, 5);
    assert_eq!(
        check_assertion(&rp(), &c2, &pk, &answer(&c2, 5)),
        Err(CeremonyError::CounterWentBack)
    );
    // Another challenge (a replayed answer) is refused by the core's step.
    assert_eq!(
        check_assertion(&rp(), &[5u8; 32], &pk, &answer(&c2, 6)),
        Err(CeremonyError::Assertion(PasskeyError::WrongChallenge))
    );
    // A counter kept at 0 by the authenticator stays acceptable.
    assert_eq!(counter_after(0, 0), Ok(0));
}

#[test]
fn registrations_are_refused_for_their_own_reasons() {
    let c = [3u8; 32];
    let origin = "https://confirm.example";
    let cose = ed25519_cose();
    let good_ad = || auth_data("confirm.example", 0x45, 0, Some((ID, &cose)));
    let try_with = |cd: Vec<u8>, ad: Vec<u8>, id: &[u8]| {
        finish_registration(&rp(), &c, &b64::encode(id), &cd, &attestation(ad))
    };
    let create = || client_data("webauthn.create", &c, origin);
    assert_eq!(
        try_with(client_data("webauthn.get", &c, origin), good_ad(), ID),
        Err(CeremonyError::Assertion(PasskeyError::WrongType))
    );
    assert_eq!(
        try_with(
            client_data("webauthn.create", &c, "https://evil.example"),
            good_ad(),
            ID
        ),
        Err(CeremonyError::Assertion(PasskeyError::WrongOrigin))
    );
    assert_eq!(
        try_with(
            create(),
            auth_data("evil.example", 0x45, 0, Some((ID, &cose))),
            ID
        ),
        Err(CeremonyError::Assertion(PasskeyError::WrongRpId))
    );
    assert_eq!(
        try_with(
            create(),
            auth_data("confirm.example", 0x41, 0, Some((ID, &cose))),
            ID
        ),
        Err(CeremonyError::Assertion(PasskeyError::UserNotVerified))
    );
    assert_eq!(
        try_with(create(), auth_data("confirm.example", 0x05, 0, None), ID),
        Err(CeremonyError::NoCredential)
    );
    assert_eq!(
        try_with(create(), good_ad(), b"another-id"),
        Err(CeremonyError::IdMismatch)
    );
    let p384 = Cbor::Map(vec![
        (Cbor::Integer(1.into()), Cbor::Integer(2.into())),
        (Cbor::Integer(3.into()), Cbor::Integer((-35).into())),
        (Cbor::Integer((-1).into()), Cbor::Integer(2.into())),
    ]);
    assert_eq!(
        try_with(
            create(),
            auth_data("confirm.example", 0x45, 0, Some((ID, &p384))),
            ID
        ),
        Err(CeremonyError::UnsupportedKey)
    );
    assert_eq!(
        finish_registration(&rp(), &c, &b64::encode(ID), &create(), b"not cbor"),
        Err(CeremonyError::BadAttestation)
    );
}

#[test]
fn an_es256_cose_key_becomes_a_jwk_the_verifier_takes() {
    let pair = josekit::jws::ES256.generate_key_pair().unwrap();
    let jwk = pair.to_jwk_public_key();
    let x = b64::decode(jwk.parameter("x").unwrap().as_str().unwrap()).unwrap();
    let y = b64::decode(jwk.parameter("y").unwrap().as_str().unwrap()).unwrap();
    let cose = Cbor::Map(vec![
        (Cbor::Integer(1.into()), Cbor::Integer(2.into())),
        (Cbor::Integer(3.into()), Cbor::Integer((-7).into())),
        (Cbor::Integer((-1).into()), Cbor::Integer(1.into())),
        (Cbor::Integer((-2).into()), Cbor::Bytes(x)),
        (Cbor::Integer((-3).into()), Cbor::Bytes(y)),
    ]);
    let got = jwk_of_cose(&cbor(&cose)).unwrap();
    assert_eq!(got["kty"], "EC");
    assert_eq!(got["x"], jwk.parameter("x").unwrap().clone());
    assert!(CredentialKey::from_jwk(&got).is_ok());
}

#[test]
fn names_and_options() {
    assert_eq!(check_name("  laptop "), Ok("laptop".into()));
    assert_eq!(check_name(""), Err(CeremonyError::BadName));
    assert_eq!(check_name("a\u{7}b"), Err(CeremonyError::BadName));
    assert_eq!(check_name(&"x".repeat(65)), Err(CeremonyError::BadName));
    let account = Account {
        username: "alice".into(),
        email: None,
        password_hash: String::new(),
        pin_hash: None,
        external: None,
        user_handle: Some("h".into()),
        passkeys: vec![],
    };
    let o = creation_options(&rp(), &account, "h", &[1; 32]);
    assert_eq!(o["authenticatorSelection"]["userVerification"], "required");
    assert_eq!(o["authenticatorSelection"]["residentKey"], "required");
    assert_eq!(o["rp"]["id"], "confirm.example");
    assert_eq!(o["user"]["id"], "h");
    let o = request_options(&rp(), &[1; 32], &[]);
    assert_eq!(o["userVerification"], "required");
    assert_eq!(o["allowCredentials"], serde_json::json!([]));
}

fn challenge_of(options: &serde_json::Value) -> [u8; 32] {
    b64::decode(options["challenge"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap()
}

#[test]
fn ceremonies_add_a_passkey_and_sign_in_with_it_once_bound_and_in_time() {
    let (_dir, store) = cheq_store::sled_cs::temp();
    let accounts = &*store.accounts;
    let mut alice = crate::auth::new_account("alice", None, "a-password-1").unwrap();
    alice.user_handle = Some(b64::encode([8u8; 32]));
    accounts.put(&alice, false).unwrap();
    let c = Ceremonies::new(
        b"secret-secret-secret-secret-sec",
        "https://confirm.example/confirm",
    )
    .unwrap();
    let handle = alice.user_handle.clone().unwrap();
    let (options, token) = c
        .begin_registration(&alice, &handle, "laptop", "session-1", 1000)
        .unwrap();
    let ch = challenge_of(&options);
    let cd = client_data("webauthn.create", &ch, "https://confirm.example");
    let att = attestation(auth_data(
        "confirm.example",
        0x45,
        0,
        Some((ID, &ed25519_cose())),
    ));
    let id = b64::encode(ID);
    let finish = |binding: &str, now: i64, token: &str| {
        c.finish_registration(accounts, None, token, binding, now, &id, &cd, &att)
    };
    assert!(matches!(
        finish("session-2", 1000, &token),
        Err(CeremonyError::BadCeremony)
    ));
    assert!(matches!(
        finish("session-1", 1000 + CEREMONY_SECS + 1, &token),
        Err(CeremonyError::BadCeremony)
    ));
    let added = finish("session-1", 1010, &token).unwrap();
    assert_eq!(added.name, "laptop");
    assert_eq!(accounts.get("alice").unwrap().unwrap().passkeys.len(), 1);
    assert!(matches!(
        finish("session-1", 1010, &token),
        Err(CeremonyError::AlreadyRegistered)
    ));

    // Sign in: the token of a registration does not do for a sign-in.
    let (options, token) = c.begin_sign_in("pre-login", 2000).unwrap();
    let ch = challenge_of(&options);
    let a = answer(&ch, 9);
    assert!(matches!(
        c.finish_sign_in(
            accounts,
            &added_token_for_kind_check(&c),
            "pre-login",
            2000,
            &handle,
            &a
        ),
        Err(CeremonyError::BadCeremony)
    ));
    assert!(matches!(
        c.finish_sign_in(accounts, &token, "pre-login", 2000, "no-such-handle", &a),
        Err(CeremonyError::NoAccount)
    ));
    let who = c
        .finish_sign_in(accounts, &token, "pre-login", 2001, &handle, &a)
        .unwrap();
    assert_eq!(who.account.username, "alice");
    let kept = accounts.get("alice").unwrap().unwrap();
    assert_eq!(kept.passkeys[0].sign_count, 9);
    assert_eq!(kept.passkeys[0].last_used, Some(2001));
    // The same answer again: the counter did not grow.
    assert!(matches!(
        c.finish_sign_in(accounts, &token, "pre-login", 2002, &handle, &a),
        Err(CeremonyError::CounterWentBack)
    ));
}

/// A registration token, to show it is refused for a sign-in.
fn added_token_for_kind_check(c: &Ceremonies) -> String {
    let account = crate::auth::new_account("zed", None, "a-password-1").unwrap();
    c.begin_registration(&account, "h", "x", "pre-login", 2000)
        .unwrap()
        .1
}
