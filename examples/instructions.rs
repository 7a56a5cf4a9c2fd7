//! Runs one operation of the signing core many times, for instruction counts
//! under `valgrind --tool=callgrind` (deterministic, unlike wall time on a
//! shared machine). `scripts/bench` runs it; see BENCHMARKS.md.
//!
//! usage: instructions raw-countersign|countersign|raw-verify2|verify-decision [N]

use cheq::sign::{
    countersign, sign_resource, verify_decision, verify_resource, Channel, Context, Decision,
    DecisionInput, Jwks, SigningKey, TrustStore,
};
use chrono::{Duration, SecondsFormat, Utc};
use ed25519_dalek::Signer;
use serde_json::json;
use std::hint::black_box;

const RS: &str = "https://api.airline.example";
const CS: &str = "https://confirm.example";
const RESOURCE_URI: &str = "https://api.airline.example/cheq/confirmations/8asdjd8g9g0as8d7f6";

fn payload() -> Vec<u8> {
    let now = Utc::now();
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let op = args.get(1).map(String::as_str).unwrap_or("countersign");
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(200);
    let rs = SigningKey::from_seed("rs-1", &[1u8; 32]).expect("key");
    let cs = SigningKey::from_seed("cs-1", &[2u8; 32]).expect("key");
    let mut trust = TrustStore::new();
    trust
        .add_resource_server(RS, Jwks::new(vec![rs.public_key()]).expect("jwks"))
        .expect("trust");
    trust
        .add_confirmation_server(CS, Jwks::new(vec![cs.public_key()]).expect("jwks"))
        .expect("trust");
    let signed = sign_resource(&payload(), &rs).expect("sign");
    let now = Utc::now();
    let ctx = Context {
        now,
        resource_uri: Some(RESOURCE_URI),
        confirmation_uri: Some(CS),
    };
    let amr = vec!["pwd".to_owned()];
    let input = || DecisionInput {
        decision: Decision::Accept,
        sub: "alice",
        also_known_as: &[],
        auth_time: now.timestamp() - 60,
        amr: &amr,
        channel: Channel::Html,
        view_text: "This page belongs to the confirmation service …",
        collected: None,
    };
    let verified = verify_resource(signed.as_bytes(), &trust, &ctx).expect("verify");
    let decided = countersign(&verified, &cs, input(), now).expect("countersign");
    let dalek_rs = ed25519_dalek::SigningKey::from_bytes(&[1u8; 32]);
    let dalek_cs = ed25519_dalek::SigningKey::from_bytes(&[2u8; 32]);
    let message = vec![b'x'; signed.len()];
    let (rs_sig, cs_sig) = (dalek_rs.sign(&message), dalek_cs.sign(&message));
    let (rs_pub, cs_pub) = (dalek_rs.verifying_key(), dalek_cs.verifying_key());
    let rs_ctx = Context {
        now,
        resource_uri: Some(RESOURCE_URI),
        confirmation_uri: None,
    };
    for _ in 0..n {
        match op {
            "raw-countersign" => {
                assert!(rs_pub.verify_strict(black_box(&message), &rs_sig).is_ok());
                black_box(dalek_cs.sign(black_box(&message)));
            }
            "countersign" => {
                let v = verify_resource(black_box(signed.as_bytes()), &trust, &ctx).expect("v");
                black_box(countersign(&v, &cs, input(), now).expect("c"));
            }
            "raw-verify2" => {
                assert!(rs_pub.verify_strict(black_box(&message), &rs_sig).is_ok());
                assert!(cs_pub.verify_strict(black_box(&message), &cs_sig).is_ok());
            }
            "verify-decision" => {
                black_box(
                    verify_decision(
                        black_box(decided.as_bytes()),
                        &trust,
                        Some(Decision::Accept),
                        &rs_ctx,
                    )
                    .expect("d"),
                );
            }
            other => {
                eprintln!("unknown operation {other}");
                std::process::exit(2);
            }
        }
    }
}
