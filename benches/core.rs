//! The signing core against the raw Ed25519 primitive, in the same run
//! (PROTOCOL.md §5).
//!
//! - `countersign`: verify the resource signature and every §5 rule, parse the
//!   payload, sign the confirmation header — beside `raw/verify+sign`
//!   (ed25519-dalek `verify_strict` + `sign` over the same bytes).
//! - `verify_decision`: both signatures and all rules — beside
//!   `raw/2x_verify` (two `verify_strict`).
//!
//! The payload is about 900 bytes, like a real booking CHEQ. Criterion's
//! "thrpt" line is operations per second.

use cheq::sign::{
    countersign, sign_resource, verify_decision, verify_resource, Channel, Context, Decision,
    DecisionInput, Jwks, SigningKey, TrustStore,
};
use chrono::{Duration, SecondsFormat, Utc};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ed25519_dalek::Signer;
use serde_json::json;

const RS: &str = "https://api.airline.example";
const CS: &str = "https://confirm.example";
const RESOURCE_URI: &str = "https://api.airline.example/cheq/confirmations/8asdjd8g9g0as8d7f6";

fn payload() -> Vec<u8> {
    let now = Utc::now();
    let p = json!({
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
    });
    p.to_string().into_bytes()
}

fn bench(c: &mut Criterion) {
    let rs = SigningKey::from_seed("rs-1", &[1u8; 32]).unwrap();
    let cs = SigningKey::from_seed("cs-1", &[2u8; 32]).unwrap();
    let mut trust = TrustStore::new();
    trust
        .add_resource_server(RS, Jwks::new(vec![rs.public_key()]).unwrap())
        .unwrap();
    trust
        .add_confirmation_server(CS, Jwks::new(vec![cs.public_key()]).unwrap())
        .unwrap();
    let payload = payload();
    let signed = sign_resource(&payload, &rs).unwrap();
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
    let verified = verify_resource(signed.as_bytes(), &trust, &ctx).unwrap();
    let decided = countersign(&verified, &cs, input(), now).unwrap();
    println!(
        "payload {} bytes, resource-signed {} bytes, decided {} bytes",
        payload.len(),
        signed.len(),
        decided.len()
    );

    // The raw primitive over inputs of the same sizes.
    let dalek_rs = ed25519_dalek::SigningKey::from_bytes(&[1u8; 32]);
    let dalek_cs = ed25519_dalek::SigningKey::from_bytes(&[2u8; 32]);
    let (rs_pub, cs_pub) = (dalek_rs.verifying_key(), dalek_cs.verifying_key());
    let message = vec![b'x'; signed.len()];
    let rs_sig = dalek_rs.sign(&message);
    let cs_sig = dalek_cs.sign(&message);

    let mut g = c.benchmark_group("countersign");
    g.throughput(Throughput::Elements(1));
    g.bench_function("raw/verify+sign", |b| {
        b.iter(|| {
            rs_pub.verify_strict(black_box(&message), &rs_sig).unwrap();
            black_box(dalek_cs.sign(black_box(&message)))
        })
    });
    g.bench_function("cheq/countersign", |b| {
        b.iter(|| {
            let v = verify_resource(black_box(signed.as_bytes()), &trust, &ctx).unwrap();
            black_box(countersign(&v, &cs, input(), now).unwrap())
        })
    });
    // Its two halves, to see where the time goes.
    g.bench_function("cheq/part_verify_resource", |b| {
        b.iter(|| black_box(verify_resource(black_box(signed.as_bytes()), &trust, &ctx).unwrap()))
    });
    g.bench_function("cheq/part_countersign_only", |b| {
        b.iter(|| black_box(countersign(&verified, &cs, input(), now).unwrap()))
    });
    g.finish();

    let mut g = c.benchmark_group("verify_decision");
    g.throughput(Throughput::Elements(1));
    g.bench_function("raw/2x_verify", |b| {
        b.iter(|| {
            rs_pub.verify_strict(black_box(&message), &rs_sig).unwrap();
            cs_pub.verify_strict(black_box(&message), &cs_sig).unwrap();
        })
    });
    let rs_ctx = Context {
        now,
        resource_uri: Some(RESOURCE_URI),
        confirmation_uri: None,
    };
    g.bench_function("cheq/verify_decision", |b| {
        b.iter(|| {
            black_box(
                verify_decision(
                    black_box(decided.as_bytes()),
                    &trust,
                    Some(Decision::Accept),
                    &rs_ctx,
                )
                .unwrap(),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
