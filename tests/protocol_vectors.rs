//! The test vectors of `docs/PROTOCOL.md` (its appendix "Test vectors"),
//! recomputed with the crate's own code and compared byte for byte, and the
//! documented JWS documents run through the verification pipeline (§5), so
//! that the document cannot drift from the code.
//!
//! A vector is a fenced code block whose info string names it:
//! ```` ```json vector:NAME ````. Its value is the text between the fences,
//! lines joined by LF; the LF that ends the last line belongs to the value
//! only for `view-text` (every line of a view text ends with one) and
//! `log-checkpoint` (a signed note ends with one).
//!
//! When a vector no longer matches, the failure prints what the code
//! computes: paste it into the document if the change was meant.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::cheq::Cheq;
use cheq::confirm::view::CheqView;
use cheq::resource::agent::start_link;
use cheq::sign::{
    b64, countersign, sign_resource, verify_decision, verify_resource, Channel, Context, Decision,
    DecisionInput, SigningKey, TrustStore, VerifyError,
};
use cheq::text::confirmation_id;
use chrono::{DateTime, TimeZone, Utc};
use indexmap::IndexMap;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Every vector the document holds, each exactly once.
const NAMES: &[&str] = &[
    "rs-secret-key",
    "cs-secret-key",
    "trust",
    "cheq-payload",
    "confirmation-id",
    "start-link",
    "resource-header",
    "resource-signed",
    "cheq-rs-sig",
    "view-text",
    "cheq-view",
    "confirmation-header-accept",
    "decided-accept",
    "confirmation-header-reject",
    "decided-reject",
    "log-secret",
    "log-entry-accept",
    "log-leaf-accept",
    "log-vkey",
    "log-checkpoint",
    "client-assertion",
];

/// RFC 8032 §7.1, TEST 2: the secret key and public key (hex).
const RFC8032_TEST2_SECRET: &str =
    "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb";
const RFC8032_TEST2_PUBLIC: &str =
    "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";

/// RFC 8037 Appendix A.1, as the repository keeps it.
const RFC8037_JWK: &str = include_str!("fixtures/rfc8037/key.json");

/// The fixed inputs the appendix states in words.
const CS_ORIGIN: &str = "https://confirm.example";
const RS_ORIGIN: &str = "https://api.airline.example";
const SUB: &str = "alice";
const COLLECTED_NAME: &str = "frequent flyer number";
const COLLECTED_VALUE: &str = "123456789";
/// The client assertion's `jti`: the 16 bytes 0x00…0x0f.
const ASSERTION_JTI: &str = "AAECAwQFBgcICQoLDA0ODw";

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 27, 9, 5, 0).unwrap()
}

fn auth_time() -> i64 {
    Utc.with_ymd_and_hms(2026, 11, 27, 9, 1, 0)
        .unwrap()
        .timestamp()
}

/// The vectors of the document, by name.
struct Doc {
    vectors: BTreeMap<String, String>,
}

impl Doc {
    fn read() -> Self {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/PROTOCOL.md");
        let text = std::fs::read_to_string(path).expect("docs/PROTOCOL.md is readable");
        Self::parse(&text)
    }

    fn parse(text: &str) -> Self {
        let mut vectors = BTreeMap::new();
        let mut open: Option<(String, Vec<&str>)> = None;
        for line in text.lines() {
            match open.as_mut() {
                Some((name, lines)) => {
                    if line.trim_end() == "```" {
                        let mut value = lines.join("\n");
                        if name == "view-text" || name == "log-checkpoint" {
                            value.push('\n');
                        }
                        let name = name.clone();
                        assert!(
                            vectors.insert(name.clone(), value).is_none(),
                            "vector {name} appears twice"
                        );
                        open = None;
                    } else {
                        lines.push(line);
                    }
                }
                None => {
                    let Some(info) = line.strip_prefix("```") else {
                        continue;
                    };
                    if let Some(name) = info
                        .split_whitespace()
                        .find_map(|w| w.strip_prefix("vector:"))
                    {
                        open = Some((name.to_owned(), Vec::new()));
                    }
                }
            }
        }
        assert!(open.is_none(), "a vector block is not closed");
        Doc { vectors }
    }

    fn get(&self, name: &str) -> &str {
        self.vectors
            .get(name)
            .unwrap_or_else(|| panic!("docs/PROTOCOL.md has no vector {name}"))
    }

    /// Asserts that the vector `name` is exactly `computed`.
    fn check(&self, name: &str, computed: &str) {
        let documented = self.get(name);
        assert!(
            documented == computed,
            "vector {name} in docs/PROTOCOL.md differs from what the code computes.\n\
             documented:\n{documented}\ncomputed:\n{computed}"
        );
    }
}

/// Everything computed from the documented inputs (keys, payload, time).
struct Computed {
    rs: SigningKey,
    cs: SigningKey,
    trust: TrustStore,
    payload: String,
    resource_uri: String,
    resource_signed: String,
    view_text: String,
    accept: String,
    reject: String,
}

/// The bytes of a hex string.
fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The signing key of a documented 32-byte secret (hex), under `kid`.
fn key_of(secret_hex: &str, kid: &str) -> SigningKey {
    let seed: [u8; 32] = hex(secret_hex.trim())
        .try_into()
        .expect("a documented secret key is 32 bytes");
    let public = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
    let jwk = json!({
        "kty": "OKP",
        "crv": "Ed25519",
        "kid": kid,
        "d": b64::encode(seed),
        "x": b64::encode(public.as_bytes()),
    });
    SigningKey::from_jwk_bytes(jwk.to_string().as_bytes()).unwrap()
}

fn compute(doc: &Doc) -> Computed {
    let rs = key_of(doc.get("rs-secret-key"), "rs-rfc8037");
    let cs = key_of(doc.get("cs-secret-key"), "cs-rfc8032-2");
    let trust = TrustStore::from_bytes(doc.get("trust").as_bytes())
        .expect("the trust vector is a TRUST file");
    let payload = doc.get("cheq-payload").to_owned();
    let cheq = Cheq::parse(payload.as_bytes()).expect("the payload is a CHEQ");
    let fields = cheq
        .countersign_fields()
        .expect("the payload can be countersigned");
    let resource_signed = sign_resource(payload.as_bytes(), &rs).expect("the RS signs it");
    let ctx = Context {
        now: now(),
        resource_uri: Some(&fields.resource_uri),
        confirmation_uri: Some(CS_ORIGIN),
    };
    let verified = verify_resource(resource_signed.as_bytes(), &trust, &ctx)
        .expect("the resource-signed CHEQ verifies");
    let view_text = CheqView::of(&verified, CS_ORIGIN).text;
    let amr = vec!["pwd".to_owned()];
    let decide = |decision, collected| {
        let input = DecisionInput {
            decision,
            sub: SUB,
            also_known_as: &[],
            auth_time: auth_time(),
            amr: &amr,
            channel: Channel::Html,
            view_text: &view_text,
            collected,
            passkey: None,
        };
        countersign(&verified, &cs, input, now()).expect("the CS countersigns")
    };
    let mut collected = IndexMap::new();
    collected.insert(COLLECTED_NAME.to_owned(), COLLECTED_VALUE.to_owned());
    let accept = decide(Decision::Accept, Some(collected));
    let reject = decide(Decision::Reject, None);
    Computed {
        rs,
        cs,
        trust,
        resource_uri: fields.resource_uri,
        payload,
        resource_signed,
        view_text,
        accept,
        reject,
    }
}

/// The decoded protected header of signature `index` of `document`.
fn header(document: &str, index: usize) -> String {
    let v: Value = serde_json::from_str(document).expect("a JSON document");
    let protected = v["signatures"][index]["protected"]
        .as_str()
        .expect("a protected header");
    String::from_utf8(b64::decode(protected).expect("base64url")).expect("UTF-8")
}

fn signature_bytes(document: &str, index: usize) -> Vec<u8> {
    let v: Value = serde_json::from_str(document).expect("a JSON document");
    b64::decode(
        v["signatures"][index]["signature"]
            .as_str()
            .expect("a signature"),
    )
    .expect("base64url")
}

fn context(c: &Computed, at: DateTime<Utc>) -> Context<'_> {
    Context {
        now: at,
        resource_uri: Some(&c.resource_uri),
        confirmation_uri: Some(CS_ORIGIN),
    }
}

#[test]
fn the_document_holds_every_vector_once_and_no_other() {
    let doc = Doc::read();
    let found: Vec<&str> = doc.vectors.keys().map(String::as_str).collect();
    let mut expected = NAMES.to_vec();
    expected.sort_unstable();
    assert_eq!(found, expected);
}

#[test]
fn the_keys_are_the_published_rfc_test_keys() {
    let doc = Doc::read();
    let c = compute(&doc);
    // The RS key is RFC 8037 Appendix A.1's.
    let rfc8037: Value = serde_json::from_str(RFC8037_JWK).unwrap();
    assert_eq!(
        Value::from(b64::encode(hex(doc.get("rs-secret-key")))),
        rfc8037["d"]
    );
    assert_eq!(c.rs.public_jwk()["x"], rfc8037["x"]);
    assert_eq!(c.rs.kid(), "rs-rfc8037");
    // The CS key is RFC 8032 §7.1 TEST 2's.
    assert_eq!(doc.get("cs-secret-key"), RFC8032_TEST2_SECRET);
    assert_eq!(
        c.cs.public_jwk()["x"],
        b64::encode(hex(RFC8032_TEST2_PUBLIC))
    );
    assert_eq!(c.cs.kid(), "cs-rfc8032-2");
    // The trust vector trusts exactly these public keys, per origin.
    let trust: Value = serde_json::from_str(doc.get("trust")).unwrap();
    let published = |key: &SigningKey| json!({"keys": [key.public_jwk()]});
    assert_eq!(trust["resource_servers"][0]["origin"], RS_ORIGIN);
    assert_eq!(trust["resource_servers"][0]["keys"], published(&c.rs));
    assert_eq!(trust["confirmation_servers"][0]["origin"], CS_ORIGIN);
    assert_eq!(trust["confirmation_servers"][0]["keys"], published(&c.cs));
    assert_eq!(trust.as_object().unwrap().len(), 2);
}

#[test]
fn computed_values_match_the_document_byte_for_byte() {
    let doc = Doc::read();
    let c = compute(&doc);
    doc.check("confirmation-id", &confirmation_id(&c.resource_uri));
    doc.check("start-link", &start_link(CS_ORIGIN, &c.resource_uri));
    doc.check("resource-header", &header(&c.resource_signed, 0));
    doc.check("resource-signed", &c.resource_signed);
    doc.check(
        "cheq-rs-sig",
        &b64::sha256(signature_bytes(&c.resource_signed, 0)),
    );
    doc.check("view-text", &c.view_text);
    doc.check("cheq-view", &b64::sha256(c.view_text.as_bytes()));
    doc.check("confirmation-header-accept", &header(&c.accept, 1));
    doc.check("decided-accept", &c.accept);
    doc.check("confirmation-header-reject", &header(&c.reject, 1));
    doc.check("decided-reject", &c.reject);
    // The payload travels as the base64url of its exact bytes.
    let v: Value = serde_json::from_str(&c.resource_signed).unwrap();
    assert_eq!(v["payload"], b64::encode(c.payload.as_bytes()));
}

#[test]
fn the_documented_documents_pass_verification() {
    let doc = Doc::read();
    let c = compute(&doc);
    let at = context(&c, now());
    let verified = verify_resource(doc.get("resource-signed").as_bytes(), &c.trust, &at)
        .expect("the documented resource-signed CHEQ verifies");
    assert_eq!(verified.rs_sig_digest(), doc.get("cheq-rs-sig"));
    assert_eq!(verified.resource_kid(), "rs-rfc8037");

    let accept = verify_decision(
        doc.get("decided-accept").as_bytes(),
        &c.trust,
        Some(Decision::Accept),
        &at,
    )
    .expect("the documented acceptance verifies");
    assert_eq!(accept.decision(), Decision::Accept);
    assert_eq!(accept.confirmation_kid(), "cs-rfc8032-2");
    let claims = accept.claims();
    assert_eq!(claims.view, doc.get("cheq-view"));
    assert_eq!(claims.rs_sig, doc.get("cheq-rs-sig"));
    assert_eq!(claims.sub, SUB);
    assert_eq!(claims.iat, now().timestamp());
    assert_eq!(claims.auth_time, auth_time());
    assert_eq!(
        claims
            .collected
            .as_ref()
            .and_then(|m| m.get(COLLECTED_NAME)),
        Some(&COLLECTED_VALUE.to_owned())
    );

    let reject = verify_decision(
        doc.get("decided-reject").as_bytes(),
        &c.trust,
        Some(Decision::Reject),
        &at,
    )
    .expect("the documented rejection verifies");
    assert_eq!(reject.decision(), Decision::Reject);
    assert!(reject.claims().collected.is_none());
}

#[test]
fn the_documented_documents_fail_where_the_rules_say() {
    let doc = Doc::read();
    let c = compute(&doc);
    let at = context(&c, now());
    let accept = doc.get("decided-accept").as_bytes();
    // Rule 3: an acceptance is not a rejection.
    assert!(matches!(
        verify_decision(accept, &c.trust, Some(Decision::Reject), &at),
        Err(VerifyError::DecisionMismatch { .. })
    ));
    // Rule 4: not after `expires` plus the 60 s clock skew.
    let expires = Utc.with_ymd_and_hms(2026, 11, 27, 21, 0, 0).unwrap();
    let late = context(&c, expires + chrono::Duration::seconds(60));
    assert!(verify_decision(accept, &c.trust, Some(Decision::Accept), &late).is_ok());
    let later = context(&c, expires + chrono::Duration::seconds(61));
    assert!(matches!(
        verify_decision(accept, &c.trust, Some(Decision::Accept), &later),
        Err(VerifyError::Expired { .. })
    ));
    // Rule 4: not before `date` less the clock skew.
    let date = Utc.with_ymd_and_hms(2026, 11, 27, 9, 0, 0).unwrap();
    let early = context(&c, date - chrono::Duration::seconds(61));
    assert!(matches!(
        verify_resource(doc.get("resource-signed").as_bytes(), &c.trust, &early),
        Err(VerifyError::DatedInFuture { .. })
    ));
    // Rule 2: the keys are trusted per origin and per role.
    let swapped = format!(
        r#"{{"resource_servers":[{{"origin":"{RS_ORIGIN}","keys":{}}}],"confirmation_servers":[{{"origin":"{CS_ORIGIN}","keys":{}}}]}}"#,
        json!({"keys": [c.cs.public_jwk()]}),
        json!({"keys": [c.rs.public_jwk()]})
    );
    let swapped = TrustStore::from_bytes(swapped.as_bytes()).unwrap();
    assert!(matches!(
        verify_decision(accept, &swapped, Some(Decision::Accept), &at),
        Err(VerifyError::UntrustedResourceKey { .. })
    ));
    // Rule 1: one changed character of the payload breaks both signatures.
    let text = doc.get("decided-accept");
    let start = text.find("\"payload\":\"").unwrap() + 11;
    let mut tampered = text.as_bytes().to_vec();
    tampered[start + 40] = if tampered[start + 40] == b'A' {
        b'B'
    } else {
        b'A'
    };
    assert!(matches!(
        verify_decision(&tampered, &c.trust, Some(Decision::Accept), &at),
        Err(VerifyError::BadSignature { .. } | VerifyError::Payload(_))
    ));
}

#[test]
fn the_vector_reader_reads_blocks_as_the_appendix_says() {
    let doc = Doc::parse(
        "text\n```json vector:one\n{\"a\": 1,\n \"b\": 2}\n```\n\
         ```text vector:view-text\nline 1\nline 2\n```\n```json\nnot a vector\n```\n",
    );
    assert_eq!(doc.vectors.len(), 2);
    assert_eq!(doc.get("one"), "{\"a\": 1,\n \"b\": 2}");
    assert_eq!(doc.get("view-text"), "line 1\nline 2\n");
}

/// The log's origin line for the documented CS (§15.4).
const LOG_ORIGIN: &str = "confirm.example/cheq-log";

/// §15: the two decided documents, accept then reject, are the log's
/// entries 0 and 1; the checkpoint of that tree, signed by the note key of
/// the documented secret.
#[test]
fn the_log_vectors_match_the_document_byte_for_byte() {
    use cheq::tlog::{tree, Entry, LogKey, LogVerifier};
    let doc = Doc::read();
    let accept = Entry::decision(doc.get("decided-accept").as_bytes()).to_bytes();
    let reject = Entry::decision(doc.get("decided-reject").as_bytes()).to_bytes();
    let line = std::str::from_utf8(&accept).unwrap();
    doc.check("log-entry-accept", line.strip_suffix('\n').unwrap());
    let leaf: String = tree::leaf_hash(&accept)
        .0
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    doc.check("log-leaf-accept", &leaf);
    let appended = tree::append(0, tree::Hashes::default(), &[&accept, &reject]).unwrap();
    assert_eq!(appended.size, 2);
    let key = LogKey::from_secret(doc.get("log-secret").as_bytes(), LOG_ORIGIN).unwrap();
    doc.check("log-vkey", &key.verifier_key());
    let signed = key.sign(2, &appended.root).unwrap();
    doc.check("log-checkpoint", std::str::from_utf8(&signed.note).unwrap());

    // The documented checkpoint verifies under the documented key; one
    // character changed in it does not.
    let verifier = LogVerifier::new(doc.get("log-vkey")).unwrap();
    let note = doc.get("log-checkpoint").as_bytes();
    let read = verifier.verify(note).unwrap();
    assert_eq!((read.size, read.root), (2, appended.root));
    let mut bent = note.to_vec();
    let at = LOG_ORIGIN.len() + 1; // the tree size's first digit
    bent[at] = b'3';
    assert!(verifier.verify(&bent).is_err());
}

#[test]
fn the_client_assertion_vector_matches_and_verifies() {
    use cheq::sign::assertion::{
        client_assertion, verify_client_assertion, AssertionClaims, AssertionError, Expected,
    };
    let doc = Doc::read();
    let cs = key_of(doc.get("cs-secret-key"), "cs-rfc8032-2");
    let token_endpoint = format!("{RS_ORIGIN}/oauth/token");
    let at = now().timestamp();
    let computed = client_assertion(
        &cs,
        &AssertionClaims {
            issuer: CS_ORIGIN,
            audience: &token_endpoint,
            jti: ASSERTION_JTI,
            issued_at: at,
        },
    );
    doc.check("client-assertion", &computed);

    // The documented assertion passes every check at `iat`, under the CS's
    // documented key alone, and fails the ones the appendix names.
    let keys = cheq::sign::Jwks::new(vec![cs.public_key()]).unwrap();
    let documented = doc.get("client-assertion");
    let expected = |now, audience| Expected {
        issuer: CS_ORIGIN,
        audience,
        now,
    };
    let ok = verify_client_assertion(documented, &keys, expected(at, &token_endpoint)).unwrap();
    assert_eq!((ok.jti.as_str(), ok.expires_at), (ASSERTION_JTI, at + 60));
    assert_eq!(
        verify_client_assertion(documented, &keys, expected(at + 60, &token_endpoint)),
        Err(AssertionError::Expired)
    );
    assert_eq!(
        verify_client_assertion(
            documented,
            &keys,
            expected(at, "https://other.example/token")
        ),
        Err(AssertionError::WrongAudience)
    );
    let rs = key_of(doc.get("rs-secret-key"), "cs-rfc8032-2");
    let impostor = cheq::sign::Jwks::new(vec![rs.public_key()]).unwrap();
    assert_eq!(
        verify_client_assertion(documented, &impostor, expected(at, &token_endpoint)),
        Err(AssertionError::BadSignature)
    );
}
