//! The seed corpus, written by `scripts/fuzz seeds` into `fuzz/seeds/` (and
//! committed). Realistic, valid documents first — the draft's Figure 4, CHEQs
//! signed and countersigned by this project's own signer, the joserfc interop
//! documents, URI packs — then the tricky ones each target is about.
//! Ed25519 is deterministic and the keys are fixed, so the output is
//! byte-stable: running it again changes nothing.

use crate::targets::fixtures::{self, CS_LOOPBACK, CS_URI, RS_LOOPBACK, RS_ORIGIN};
use crate::targets::signed::HEADERS;
use cheq::sign::{
    countersign, sign_resource, verify_resource, Channel, Context, Decision, DecisionInput,
};
use indexmap::IndexMap;
use serde_json::{json, Value};
use std::path::Path;

/// The draft's Figure 4 exactly as printed (trailing commas included).
const FIGURE_4_AS_PRINTED: &str = r#"{
   "version" : 1.0,
   "operation" : "https://airline.com/api/v1/book-flight",
   "operation name" : "Book airline",

   "inputs" : {
      "parameters" : [
         {
            "parameter name" : "flight number",
            "parameter description" : "The overnight flight from EWR to MAD",
            "parameter value" : "UA23"
         },
         {
            "parameter name" : "flight date",
            "parameter value" : "8 August 2025, 12:20 EDT"
         },
         {
            "parameter name" : "flight cost",
            "parameter value" : "$1200 USD"
         },

      ]

   },

   "date" : "July 23, 2025, 11:59 UTC",
}
"#;

/// Figure 4 with its trailing commas removed (PROTOCOL.md §4: displayable,
/// not countersignable).
fn figure_4() -> String {
    FIGURE_4_AS_PRINTED
        .replace("},\n\n      ]", "}\n\n      ]")
        .replace(
            "\"July 23, 2025, 11:59 UTC\",",
            "\"July 23, 2025, 11:59 UTC\"",
        )
}

const INTEROP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/interop/");

fn interop(file: &str) -> Vec<u8> {
    std::fs::read(format!("{INTEROP}{file}")).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// A countersignable payload for `resource_uri`, valid at `fixtures::now()`.
fn payload(resource_uri: &str, confirmation_uri: &str, extra: Value) -> Value {
    let mut p = json!({
        "version": "1.0",
        "operation": "https://api.airline.example/api/v1/book-flight",
        "operation name": "Book flight",
        "inputs": {"parameters": [
            {"parameter name": "flight number", "parameter description": "The overnight flight from EWR to MAD", "parameter value": "UA23"},
            {"parameter name": "flight date", "parameter value": "2026-12-01"},
            {"parameter name": "price", "parameter value": "1200.00", "parameter unit": "USD"}
        ]},
        "date": "2026-11-22T09:00:00Z",
        "nonce": "Q3ONTdR0soidHLd4ue3DgQ",
        "resource uri": resource_uri,
        "confirmation uri": confirmation_uri,
        "subject": "alice",
        "expires": "2026-11-22T21:00:00Z",
        "language": "en"
    });
    if let (Some(p), Value::Object(extra)) = (p.as_object_mut(), extra) {
        for (k, v) in extra {
            p.insert(k, v);
        }
    }
    p
}

fn with_inputs() -> Value {
    json!({"operation": "https://bank.example/api/transfer", "operation name": "Transfer funds",
        "inputs": {"parameters": [
            {"parameter name": "payee", "parameter value": "ACME"},
            {"parameter name": "from account", "parameter input": {"type": "digits", "required": true, "sensitive": true, "max length": 20, "pattern": "^[0-9]+$"}},
            {"parameter name": "amount", "parameter input": {"type": "amount", "required": true}, "parameter unit": "EUR"},
            {"parameter name": "memo", "parameter input": {"type": "text", "required": false}}
        ]},
        "x-extension": {"kept": [true, null, 1.5]}})
}

/// The payloads every signing seed starts from: (name, bytes).
fn payloads() -> Vec<(&'static str, Vec<u8>)> {
    let rs = format!("{RS_ORIGIN}/cheq/confirmations/5E2LaHeetDrPkbXPvnPfVg");
    let rs_lo = format!("{RS_LOOPBACK}/cheq/confirmations/AAECAwQFBgcICQoLDA0ODw");
    let text = |v: Value| v.to_string().into_bytes();
    vec![
        ("flight", text(payload(&rs, CS_URI, json!({})))),
        ("inputs", text(payload(&rs, CS_URI, with_inputs()))),
        (
            "loopback",
            text(payload(&rs_lo, CS_LOOPBACK, json!({"language": "pt-BR"}))),
        ),
        (
            "full-day",
            text(payload(
                &rs,
                &format!("{CS_URI}/"),
                json!({"date": "2026-11-22T00:00:00+01:00", "expires": "2026-11-22T23:00:00Z", "version": 1.0}),
            )),
        ),
        (
            "untrusted-origin",
            text(payload(
                "https://evil.example/cheq/x1x2x3x4x5x6x7x8",
                CS_URI,
                json!({}),
            )),
        ),
        (
            "untrusted-cs",
            text(payload(&rs, "https://other-confirm.example", json!({}))),
        ),
        (
            "pretty",
            serde_json::to_string_pretty(&payload(
                &rs,
                CS_URI,
                json!({"x-note": "é \u{202e} \u{0}"}),
            ))
            .unwrap_or_default()
            .into_bytes(),
        ),
        // "http://127.0.0" is the host 127.0.0.0, and so is "http://127.0.0x".
        (
            "untrusted-cs-short-ipv4",
            text(payload(&rs_lo, "http://127.0.0", json!({}))),
        ),
        ("interop", interop("payload.json")),
    ]
}

pub fn write_all(root: &Path) -> std::io::Result<()> {
    let seeds = root.join("seeds");
    if seeds.exists() {
        std::fs::remove_dir_all(&seeds)?;
    }
    let mut n = 0;
    let mut put = |target: &str, name: &str, bytes: &[u8]| -> std::io::Result<()> {
        let dir = seeds.join(target);
        std::fs::create_dir_all(&dir)?;
        n += 1;
        std::fs::write(dir.join(name), bytes)
    };
    let signed = signed_documents();

    // json: the reader on everything signed, and on the shapes it refuses.
    put("json", "figure-4.json", figure_4().as_bytes())?;
    put(
        "json",
        "figure-4-as-printed.json",
        FIGURE_4_AS_PRINTED.as_bytes(),
    )?;
    for (name, p) in payloads() {
        put("json", &format!("payload-{name}.json"), &p)?;
    }
    put("json", "trust.json", &interop("trust.json"))?;
    put("json", "document-resource.json", &signed[0].1)?;
    put("json", "header-confirmation.json", br#"{"alg":"EdDSA","kid":"cs-1","typ":"cheq+jws","cheq_role":"confirmation","crit":["cheq_decision"],"cheq_decision":"accept","sub":"alice","iat":1795341600,"auth_time":1795340600,"amr":["pwd"],"cheq_channel":"html","cheq_view":"47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU","cheq_rs_sig":"47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"}"#)?;
    for (i, doc) in [
        &b"{}"[..],
        b"[]",
        b"{\"a\":1,\"a\":2}",
        b"{\"a\":1,\"\\u0061\":2}",
        b"{\"x\":[{\"b\":{\"c\":1,\"c\":1}}]}",
        b"{\"\xc3\xa9\":1,\"e\\u0301\":2,\"\\u00e9\":3}",
        b"{\"\\ud83d\\ude00\":[\"\\ud800\",\"\\u0000\",\"\\/\"]}",
        b"[1e308,-0,0.1e-7,18446744073709551616,-9223372036854775809,1E+2]",
        b"{\"a\":1} {}",
        b"{\"a\":1,}",
        b"\xef\xbb\xbf{}",
        b"{\"a\":\"\xff\"}",
        b" \t\r\n{ \"k\" : [ true , false , null ] } \n",
        b"{\"\\u0000cheq-duplicate-member\\u0000\":1}",
    ]
    .into_iter()
    .enumerate()
    {
        put("json", &format!("shape-{i:02}.json"), doc)?;
    }
    let deep = |n: usize| format!("{}{}", "[{\"a\":".repeat(n), "0}]".repeat(n));
    put("json", "deep-60.json", deep(60).as_bytes())?;
    put("json", "deep-70.json", deep(70).as_bytes())?;

    // uri: packs and bare URIs (one per line).
    put("uri", "pack-draft.json", br#"{"confirmation uri":"https://confirm.example","resource uri":"https://api.airline.example/cheq/confirmations/8asdjd8g9g0as","result uri":"https://api.airline.example/cheq/results/nn88kak0s0d8jj39sla"}"#)?;
    put("uri", "pack-loopback.json", br#"{"confirmation uri":"http://127.0.0.1:8080","resource uri":"http://127.0.0.1:8081/cheq/confirmations/AAECAwQFBgcICQoLDA0ODw","result uri":"http://[::1]:8081/cheq/results/AAECAwQFBgcICQoLDA0ODw"}"#)?;
    put("uri", "pack-pretty.json", b"{\n  \"confirmation uri\": \"https://confirm.example/\",\n  \"resource uri\": \"https://api.airline.example:443/cheq/c/x?y=1\",\n  \"result uri\": \"https://api.airline.example/cheq/r/x\",\n  \"x-extra\": 1\n}\n")?;
    put("uri", "pack-http.json", br#"{"confirmation uri":"https://confirm.example","resource uri":"http://api.airline.example/cheq/x","result uri":"https://api.airline.example/cheq/r"}"#)?;
    put("uri", "pack-missing.json", br#"{"confirmation uri":"https://confirm.example","resource uri":"https://api.airline.example/cheq/x"}"#)?;
    put("uri", "pack-duplicate.json", br#"{"confirmation uri":"https://confirm.example","resource uri":"https://api.airline.example/cheq/x","result uri":"https://api.airline.example/cheq/r","resource uri":"https://evil.example/x"}"#)?;
    put(
        "uri",
        "pack-not-strings.json",
        br#"{"confirmation uri":1,"resource uri":null,"result uri":["https://a.example/"]}"#,
    )?;
    for (i, lines) in [
        "https://api.airline.example/cheq/confirmations/8asdjd8g9g0as\nhttps://confirm.example\nhttps://API.Airline.Example:443/./cheq/../cheq/x?q=1",
        "http://127.0.0.1:8081/cheq/x\nhttp://127.9.9.9/x\nhttp://localhost:1/x\nhttp://[::1]:80/x",
        "http://127.1/x\nhttp://0x7f.0.0.1/x\nhttp://2130706433/x\nhttp://[::ffff:127.0.0.1]/x",
        "http://localhost./x\nhttp://LOCALHOST/x\nhttp://localhost.evil.example/x\nhttp://127.0.0.1.evil.example/x",
        "https://u:p@a.example/\nhttps://@a.example/\nhttps://a.example/#f\nhttps://a.example/#",
        "http://api.airline.example/x\nhttp://10.0.0.1/x\nftp://localhost/x\nfile:///etc/passwd",
        "/cheq/x\nmailto:a@b\nhttps:\nhttps://",
        "https:\\\\evil.example\\cheq\\x\nhttps://ex%61mple.com/\nhttps://xn--nxasmq6b.example/\nhttps://\u{0430}pi.example/",
        "  https://a.example/x  \nhttps://a.exa\tmple/x\nhttps://a.example:0/\nhttps://a.example:65536/",
        "https://[::1]:443/x\nhttps://[::1/x\nhttps://a.example/%00\nhttps://a.example/?\u{0}",
    ]
    .into_iter()
    .enumerate()
    {
        put("uri", &format!("uris-{i:02}.txt"), lines.as_bytes())?;
    }

    // payload: Figure 4, the signing payloads, and every limit of §4.
    put("payload", "figure-4.json", figure_4().as_bytes())?;
    put(
        "payload",
        "figure-4-as-printed.json",
        FIGURE_4_AS_PRINTED.as_bytes(),
    )?;
    for (name, p) in payloads() {
        put("payload", &format!("{name}.json"), &p)?;
    }
    let rs = format!("{RS_ORIGIN}/cheq/confirmations/5E2LaHeetDrPkbXPvnPfVg");
    let base = payload(&rs, CS_URI, json!({}));
    let variant = |changes: Value| -> Vec<u8> {
        let mut p = base.clone();
        if let (Some(p), Value::Object(c)) = (p.as_object_mut(), changes) {
            for (k, v) in c {
                if v == json!("<remove>") {
                    p.remove(&k);
                } else {
                    p.insert(k, v);
                }
            }
        }
        p.to_string().into_bytes()
    };
    let mut hundred_and_one: Vec<Value> = (0..101)
        .map(|i| json!({"parameter name": format!("p{i}"), "parameter value": "v"}))
        .collect();
    hundred_and_one.rotate_left(1);
    let long_name: Value = Value::Object([("k".repeat(4097), json!(1))].into_iter().collect());
    let hundred: Vec<Value> = (0..100)
        .map(|i| json!({"parameter name": format!("p{i}"), "parameter value": "v"}))
        .collect();
    for (name, changes) in [
        ("validity-24h", json!({"expires": "2026-11-23T09:00:00Z"})),
        (
            "validity-24h-1s",
            json!({"expires": "2026-11-23T09:00:01Z"}),
        ),
        ("expires-before", json!({"expires": "2026-11-22T08:59:59Z"})),
        (
            "offsets",
            json!({"date": "2026-11-22T23:00:00+14:00", "expires": "2026-11-22t10:00:00.123456789z"}),
        ),
        (
            "leap-second",
            json!({"date": "2026-12-31T23:59:60Z", "expires": "2027-01-01T01:00:00Z"}),
        ),
        ("nonce-short", json!({"nonce": "AAECAwQFBgcICQoLDA0O"})),
        ("nonce-padded", json!({"nonce": "AAECAwQFBgcICQoLDA0ODw=="})),
        (
            "nonce-noncanonical",
            json!({"nonce": "AAECAwQFBgcICQoLDA0ODx"}),
        ),
        ("subject-blank", json!({"subject": " \t"})),
        (
            "missing-all",
            json!({"nonce": "<remove>", "resource uri": "<remove>", "confirmation uri": "<remove>", "subject": "<remove>", "expires": "<remove>"}),
        ),
        ("wrong-types", json!({"nonce": 1, "subject": null})),
        ("version-2", json!({"version": "2.0"})),
        ("version-number-1", json!({"version": 1})),
        ("language-bad", json!({"language": "en_US"})),
        ("language-long", json!({"language": "x-abcdefgh-12345678"})),
        ("operation-not-uri", json!({"operation": "book flight"})),
        (
            "params-100",
            json!({"inputs": {"parameters": hundred.clone()}}),
        ),
        (
            "params-101",
            json!({"inputs": {"parameters": hundred_and_one}}),
        ),
        (
            "param-both",
            json!({"inputs": {"parameters": [{"parameter name": "a", "parameter value": "1", "parameter input": {"type": "text"}}]}}),
        ),
        (
            "param-neither",
            json!({"inputs": {"parameters": [{"parameter name": "a"}]}}),
        ),
        (
            "param-twice",
            json!({"inputs": {"parameters": [{"parameter name": "a", "parameter value": "1"}, {"parameter name": "a", "parameter value": "2"}]}}),
        ),
        (
            "input-bad",
            json!({"inputs": {"parameters": [{"parameter name": "a", "parameter input": {"type": "password", "max length": 0}}]}}),
        ),
        (
            "input-max-length",
            json!({"inputs": {"parameters": [{"parameter name": "a", "parameter input": {"type": "text", "max length": 4096, "required": false, "sensitive": true}}]}}),
        ),
        ("string-4096", json!({"x-pad": "x".repeat(4096)})),
        ("string-4097", json!({"x-pad": ["x".repeat(4097)]})),
        ("name-4097", json!({"x-pad": long_name})),
        (
            "resource-http",
            json!({"resource uri": "http://api.airline.example/cheq/x"}),
        ),
        (
            "resource-fragment",
            json!({"resource uri": "https://api.airline.example/cheq/x#f"}),
        ),
    ] {
        put("payload", &format!("{name}.json"), &variant(changes))?;
    }

    // jws: documents as they come off the wire.
    for (name, doc) in &signed {
        put("jws", &format!("{name}.json"), doc)?;
    }
    for f in [
        "resource_signed.json",
        "decided_accept.json",
        "decided_reject.json",
    ] {
        put("jws", &format!("interop-{f}"), &interop(f))?;
    }
    let doc = String::from_utf8_lossy(&signed[0].1).into_owned();
    for (name, broken) in [
        (
            "unprotected-header",
            doc.replacen(
                "\"signature\":",
                "\"header\":{\"kid\":\"x\"},\"signature\":",
                1,
            ),
        ),
        (
            "padded-payload",
            doc.replacen("\",\"signatures\"", "=\",\"signatures\"", 1),
        ),
        (
            "extra-member",
            doc.replacen("{\"payload\"", "{\"x\":1,\"payload\"", 1),
        ),
        (
            "duplicate-payload",
            doc.replacen("{\"payload\"", "{\"payload\":\"e30\",\"payload\"", 1),
        ),
        (
            "no-signatures",
            doc.split(",\"signatures\"")
                .next()
                .unwrap_or_default()
                .to_owned()
                + ",\"signatures\":[]}",
        ),
        (
            "compact",
            doc.replace("{\"payload\":\"", "")
                .replace("\",\"signatures\":[{\"protected\":\"", ".")
                .replace("\",\"signature\":\"", ".")
                .replace("\"}]}", ""),
        ),
    ] {
        put("jws", &format!("broken-{name}.json"), broken.as_bytes())?;
    }

    // signed: two option bytes, then a payload (see fuzz/targets/signed.rs).
    let signer = (HEADERS.len() + 2) as u8;
    for (name, p) in payloads() {
        for (opts, a, b) in [
            ("signer", signer, 0u8),
            ("signer-accept", signer | 0x80, 0),
            ("signer-reject-voice", signer | 0x80, 0x01 | 0x08),
            ("signer-accept-missing-input", signer | 0x80, 0x20),
            ("signer-other-user", signer | 0x80, 0x02),
            ("signer-extra-collected", signer | 0x80, 0x40 | 0x10),
            ("header-1-accept", 0x81, 0x80),
        ] {
            put(
                "signed",
                &format!("{name}-{opts}.bin"),
                &[&[a, b][..], &p].concat(),
            )?;
        }
    }
    let flight = &payloads()[0].1;
    for i in 0..HEADERS.len() + 2 {
        put(
            "signed",
            &format!("flight-header-{i:02}.bin"),
            &[&[i as u8, 0][..], flight].concat(),
        )?;
    }
    put(
        "signed",
        "figure-4.bin",
        &[&[signer | 0x80, 0][..], figure_4().as_bytes()].concat(),
    )?;

    // registry: resource URIs, good and tricky.
    for (i, uri) in [
        "https://api.airline.example/cheq/confirmations/5E2LaHeetDrPkbXPvnPfVg",
        "https://api.airline.example:443/cheq/x?y=1",
        "http://127.0.0.1:8081/cheq/confirmations/AAECAwQFBgcICQoLDA0ODw",
        "https://rs.example:8443/api/v1/cheq/x",
        "http://[::1]:9000/c/x",
        "http://[0:0::1]:9000/c/x",
        "https://bank.example/x",
        "https://api.airline.example/cheq/..%2f..%2foauth%2ftoken",
        "https://api.airline.example/cheq/%2e%2e/admin",
        "https://api.airline.example/cheq/.%2e/admin",
        "https://api.airline.example/cheq/%2e%2e%2fadmin",
        "https://api.airline.example/cheq/..%5cadmin",
        "https://api.airline.example/cheq/%252e%252e/admin",
        "https://api.airline.example/cheq/../admin",
        "https://api.airline.example/cheq/./x",
        "https://api.airline.example\\cheq\\..\\admin",
        "https://api.airline.example/cheq\\..\\admin",
        "https://api.airline.example/cheq/x\\..\\..\\admin",
        "https://api.airline.example/cheq//evil.example/x",
        "https://api.airline.example/cheq/x?y=/../admin",
        "https://api.airline.example/cheq/x#frag",
        "https://api.airline.example/cheq/%00",
        "https://api.airline.example/ch\teq/x",
        "https://API.AIRLINE.EXAMPLE/cheq/x",
        "https://api.airline.example./cheq/x",
        "https://api.airline.example:8443/cheq/x",
        "http://api.airline.example/cheq/x",
        "https://user@api.airline.example/cheq/x",
        "https://api.airline.example.evil.example/cheq/x",
        "https://evil.example/cheq/x",
        "https://api.airline.example/cheq/",
        "https://api.airline.example/cheq",
        "https://api.airline.example/CHEQ/x",
        "https://api.airline.example/%63heq/x",
        "https://rs.example:8443/api/v1/cheq/..%2F..%2Fadmin",
        "https://bank.example/%2e%2e/%2e%2e/etc/passwd",
        "http://127.0.0.1:8081/cheq/..;/admin",
        "http://127.1:8081/cheq/x",
        "file:///etc/passwd",
        "",
    ]
    .into_iter()
    .enumerate()
    {
        put("registry", &format!("uri-{i:02}.txt"), uri.as_bytes())?;
    }

    let dict = root.join("dict");
    std::fs::create_dir_all(&dict)?;
    std::fs::write(dict.join("cheq.dict"), crate::mutate::libfuzzer_dict())?;
    println!("fuzz: wrote {n} seeds under {}", seeds.display());
    Ok(())
}

/// Signed documents from this project's own signer: resource-signed, then
/// countersigned (accept, reject, with collected values, by voice).
fn signed_documents() -> Vec<(String, Vec<u8>)> {
    let fx = fixtures::get();
    let now = fixtures::now();
    let ctx = Context::at(now);
    let mut out = Vec::new();
    for (name, p) in payloads() {
        let Ok(doc) = sign_resource(&p, &fx.rs) else {
            continue;
        };
        out.push((format!("resource-{name}"), doc.clone().into_bytes()));
        let Ok(v) = verify_resource(doc.as_bytes(), &fx.trust, &ctx) else {
            continue;
        };
        let asked: IndexMap<String, String> = v
            .cheq()
            .parameters
            .iter()
            .filter(|p| p.input.is_some())
            .map(|p| (p.name.clone(), format!("{} value", p.name)))
            .collect();
        for (decision, channel) in [
            (Decision::Accept, Channel::Html),
            (Decision::Reject, Channel::Voice),
        ] {
            let input = DecisionInput {
                decision,
                sub: "alice",
                also_known_as: &[],
                auth_time: now.timestamp() - 1000,
                amr: &["pwd".to_owned(), "otp".to_owned()],
                channel,
                view_text: "the page alice read",
                collected: (!asked.is_empty()).then(|| asked.clone()),
                passkey: None,
            };
            if let Ok(decided) = countersign(&v, &fx.cs, input, now) {
                out.push((
                    format!("decided-{}-{name}", decision.as_str()),
                    decided.into_bytes(),
                ));
            }
        }
    }
    out
}
