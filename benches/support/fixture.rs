//! The booking CHEQ, keys and trust shared by `benches/core.rs` and
//! `examples/instructions.rs`, so that the criterion figures and the
//! instruction counts measure the same thing. Not every user reads every
//! field.
#![allow(dead_code)]

use cheq::sign::{
    countersign, sign_resource, verify_resource, Channel, Context, Decision, DecisionInput, Jwks,
    SigningKey, TrustStore,
};
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use ed25519_dalek::Signer;
use serde_json::json;

pub const RS: &str = "https://api.airline.example";
pub const CS: &str = "https://confirm.example";
pub const RESOURCE_URI: &str = "https://api.airline.example/cheq/confirmations/8asdjd8g9g0as8d7f6";

/// A realistic booking payload (about 1.1 KB).
pub fn payload(now: DateTime<Utc>) -> Vec<u8> {
    json!({
        "version": "1.0",
        "operation": "https://api.airline.example/api/v1/book-flight",
        "operation name": "Book airline",
        "inputs": {"parameters": [
            {"parameter name": "flight number", "parameter description": "The overnight flight from EWR to MAD", "parameter value": "UA23"},
            {"parameter name": "flight date", "parameter description": "Departure date, local time at the origin", "parameter value": "2026-12-08"},
            {"parameter name": "cabin class", "parameter description": "Economy, premium economy, business or first", "parameter value": "BUSINESS"},
            {"parameter name": "passenger", "parameter description": "As on the passport", "parameter value": "Alice Example"},
            {"parameter name": "price", "parameter description": "Total fare including taxes, in US dollars", "parameter value": "1200"},
            {"parameter name": "card", "parameter description": "Card on file to charge", "parameter value": "Visa ending 4242"}
        ]},
        "date": now.to_rfc3339_opts(SecondsFormat::Secs, true),
        "nonce": "a2V5LWZvci10aGUtYmVuY2htYXJrLW5vbmNl",
        "resource uri": RESOURCE_URI,
        "confirmation uri": CS,
        "subject": "alice",
        "expires": (now + Duration::hours(1)).to_rfc3339_opts(SecondsFormat::Secs, true),
        "language": "en"
    })
    .to_string()
    .into_bytes()
}

/// Everything a measurement needs, built once.
pub struct Fixture {
    pub now: DateTime<Utc>,
    pub cs: SigningKey,
    pub trust: TrustStore,
    pub payload_len: usize,
    /// The resource-signed CHEQ.
    pub signed: String,
    /// The same, countersigned (accept).
    pub decided: String,
    amr: Vec<String>,
    /// The raw primitive: keys, a message as long as `signed`, its signatures.
    pub dalek_rs: ed25519_dalek::SigningKey,
    pub dalek_cs: ed25519_dalek::SigningKey,
    pub message: Vec<u8>,
    pub rs_sig: ed25519_dalek::Signature,
    pub cs_sig: ed25519_dalek::Signature,
}

impl Fixture {
    pub fn new() -> Self {
        let now = Utc::now();
        let rs = SigningKey::from_seed("rs-1", &[1u8; 32]).expect("key");
        let cs = SigningKey::from_seed("cs-1", &[2u8; 32]).expect("key");
        let mut trust = TrustStore::new();
        trust
            .add_resource_server(RS, Jwks::new(vec![rs.public_key()]).expect("jwks"))
            .expect("trust");
        trust
            .add_confirmation_server(CS, Jwks::new(vec![cs.public_key()]).expect("jwks"))
            .expect("trust");
        let payload = payload(now);
        let signed = sign_resource(&payload, &rs).expect("sign");
        let dalek_rs = ed25519_dalek::SigningKey::from_bytes(&[1u8; 32]);
        let dalek_cs = ed25519_dalek::SigningKey::from_bytes(&[2u8; 32]);
        let message = vec![b'x'; signed.len()];
        let mut f = Fixture {
            now,
            payload_len: payload.len(),
            rs_sig: dalek_rs.sign(&message),
            cs_sig: dalek_cs.sign(&message),
            dalek_rs,
            dalek_cs,
            message,
            cs,
            trust,
            signed,
            decided: String::new(),
            amr: vec!["pwd".to_owned()],
        };
        let verified = verify_resource(f.signed.as_bytes(), &f.trust, &f.cs_ctx()).expect("verify");
        f.decided = countersign(&verified, &f.cs, f.input(), now).expect("countersign");
        f
    }

    /// What the CS knows when it verifies before countersigning.
    pub fn cs_ctx(&self) -> Context<'static> {
        Context {
            now: self.now,
            resource_uri: Some(RESOURCE_URI),
            confirmation_uri: Some(CS),
        }
    }

    /// What the RS knows when it verifies a decision.
    pub fn rs_ctx(&self) -> Context<'static> {
        Context {
            now: self.now,
            resource_uri: Some(RESOURCE_URI),
            confirmation_uri: None,
        }
    }

    /// The user's decision.
    pub fn input(&self) -> DecisionInput<'_> {
        DecisionInput {
            decision: Decision::Accept,
            sub: "alice",
            also_known_as: &[],
            auth_time: self.now.timestamp() - 60,
            amr: &self.amr,
            channel: Channel::Html,
            view_text: "This page belongs to the confirmation service …",
            collected: None,
            passkey: None,
        }
    }
}
