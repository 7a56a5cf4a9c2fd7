//! The voice view (PROTOCOL.md §10) and deceptive-text warnings, from a real
//! signed and verified CHEQ; the SSML is rendered to audio by a real speech
//! synthesiser (Debian's espeak-ng, installed by tests/voice/install.sh).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::confirm::view::CheqView;
use cheq::sign::{sign_resource, verify_resource, Context, Jwks, SigningKey, TrustStore};
use chrono::{Duration, SecondsFormat, Utc};
use serde_json::json;
use std::io::Write;
use std::process::{Command, Stdio};

const RS: &str = "https://api.airline.example";
const CS: &str = "https://confirm.example";

fn view_of(parameters: serde_json::Value, operation_name: &str) -> CheqView {
    let now = Utc::now();
    let payload = json!({
        "version": "1.0",
        "operation": "https://api.airline.example/api/v1/book-flight",
        "operation name": operation_name,
        "inputs": {"parameters": parameters},
        "date": now.to_rfc3339_opts(SecondsFormat::Secs, true),
        "nonce": "c2l4dGVlbi1ieXRlcy1vZi1ub25jZQ",
        "resource uri": format!("{RS}/cheq/confirmations/8asdjd8g9g0asXYZ"),
        "confirmation uri": CS,
        "subject": "alice",
        "expires": (now + Duration::minutes(15)).to_rfc3339_opts(SecondsFormat::Secs, true),
        "language": "en"
    });
    let key = SigningKey::from_seed("rs-1", &[3u8; 32]).unwrap();
    let doc = sign_resource(payload.to_string().as_bytes(), &key).unwrap();
    let mut trust = TrustStore::new();
    trust
        .add_resource_server(RS, Jwks::new(vec![key.public_key()]).unwrap())
        .unwrap();
    let ctx = Context {
        now,
        resource_uri: Some(&format!("{RS}/cheq/confirmations/8asdjd8g9g0asXYZ")),
        confirmation_uri: Some(CS),
    };
    let verified = verify_resource(doc.as_bytes(), &trust, &ctx).unwrap();
    CheqView::of(&verified, CS)
}

fn flight() -> CheqView {
    view_of(
        json!([
            {"parameter name": "flight number", "parameter description": "The overnight flight from EWR to MAD", "parameter value": "UA23"},
            {"parameter name": "flight date", "parameter value": "2026-12-08"},
            {"parameter name": "cabin class", "parameter value": "BUSINESS"},
            {"parameter name": "price", "parameter description": "in US dollars", "parameter value": "1200", "parameter unit": "USD"}
        ]),
        "Book a flight",
    )
}

fn well_formed_xml(text: &str) -> Result<(), String> {
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import sys, xml.dom.minidom; xml.dom.minidom.parseString(sys.stdin.buffer.read())",
        ])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn the_voice_text_reads_every_fact_speakably() {
    let v = flight();
    let t = &v.voice().text;
    for fact in [
        "confirmation service at https://confirm.example, not the AI agent",
        "https://api.airline.example asks you to confirm this request: Book a flight.",
        "https://api.airline.example/api/v1/book-flight",
        "flight number, The overnight flight from EWR to MAD: U A 2 3.",
        "flight date: December 8, 2026.",
        "cabin class: business.",
        "price, in US dollars: 1,200 US dollars.",
        "This request is for alice.",
        "It expires on ",
    ] {
        assert!(t.contains(fact), "missing {fact:?} in\n{t}");
    }
    assert!(
        t.trim_end()
            .ends_with("Do you accept this request? Answer yes or no."),
        "{t}"
    );
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    assert_ne!(
        v.voice().digest,
        v.digest,
        "each channel hashes its own text"
    );
}

#[test]
fn the_ssml_is_well_formed_and_marks_characters_dates_and_money() {
    if !cheq::store::testing::can_run(
        "the voice tests that parse SSML with Python",
        &[cheq::store::testing::Outside::Python("xml.dom.minidom")],
    ) {
        return;
    }
    let v = flight();
    let s = &v.voice().ssml;
    well_formed_xml(s).unwrap();
    assert!(s.contains("<speak version=\"1.1\""), "{s}");
    assert!(s.contains("xml:lang=\"en\""), "{s}");
    assert!(
        s.contains("<say-as interpret-as=\"characters\">UA23</say-as>"),
        "{s}"
    );
    assert!(
        s.contains("<say-as interpret-as=\"date\" format=\"ymd\">2026-12-08</say-as>"),
        "{s}"
    );
    // Money is said in words, never handed to a synthesiser's currency
    // rules (which may round).
    assert!(
        s.contains("price, in US dollars: 1,200 US dollars.</s>"),
        "{s}"
    );
    assert!(!s.contains("interpret-as=\"currency\""), "{s}");
}

#[test]
fn values_that_look_like_markup_are_escaped() {
    if !cheq::store::testing::can_run(
        "the voice tests that parse SSML with Python",
        &[cheq::store::testing::Outside::Python("xml.dom.minidom")],
    ) {
        return;
    }
    let v = view_of(
        json!([{"parameter name": "memo", "parameter value": "<break time=\"9s\"/> & </speak>"}]),
        "Send <b>note</b>",
    );
    well_formed_xml(&v.voice().ssml).unwrap();
    assert!(!v.voice().ssml.contains("<break"), "{}", v.voice().ssml);
    assert!(v
        .voice()
        .ssml
        .contains("&lt;break time=&quot;9s&quot;/&gt; &amp; &lt;/speak&gt;"));
}

#[test]
fn deceptive_text_is_warned_about_in_both_views() {
    if !cheq::store::testing::can_run(
        "the voice tests that parse SSML with Python",
        &[cheq::store::testing::Outside::Python("xml.dom.minidom")],
    ) {
        return;
    }
    let v = view_of(
        json!([
            {"parameter name": "payee", "parameter value": "Acme \u{202E}gnp.exe"},
            {"parameter name": "memo", "parameter value": "Pay Amаzon today"},
            {"parameter name": "amount", "parameter value": "100 USD"}
        ]),
        "Transfer funds",
    );
    let kinds: Vec<(&str, &str)> = v
        .warnings
        .iter()
        .map(|w| (w.parameter.as_str(), w.kind))
        .collect();
    assert!(kinds.contains(&("payee", "bidi_control")), "{kinds:?}");
    assert!(kinds.contains(&("memo", "mixed_script")), "{kinds:?}");
    assert!(kinds.contains(&("memo", "confusable")), "{kinds:?}");
    assert!(!kinds.iter().any(|(p, _)| *p == "amount"), "{kinds:?}");
    // The hidden character is shown, not obeyed, on the page and in voice.
    let payee = &v.parameters[0];
    assert_eq!(payee.value.as_deref(), Some("Acme ⟨U+202E⟩gnp.exe"));
    assert!(!v.text.contains('\u{202E}') && v.text.contains("⟨U+202E⟩"));
    assert!(!v.voice().text.contains('\u{202E}'));
    // The voice view says the warning aloud before the question.
    let t = &v.voice().text;
    let warning = t
        .find("Warning: the parameter payee")
        .expect("spoken warning");
    let question = t.find("Do you accept").unwrap();
    assert!(warning < question, "{t}");
    assert!(
        t.contains("Warning: the parameter memo mixes writing systems"),
        "{t}"
    );
    well_formed_xml(&v.voice().ssml).unwrap();
    assert!(v.voice().ssml.contains("Warning: the parameter payee"));
}

/// The line of the voice text that reads the parameter `name`.
fn line_of<'a>(v: &'a CheqView, name: &str) -> &'a str {
    v.voice()
        .text
        .lines()
        .find(|l| l.starts_with(&format!("{name}:")) || l.starts_with(&format!("{name},")))
        .unwrap_or_else(|| panic!("no line for {name:?} in\n{}", v.voice().text))
}

/// Names and descriptions in several languages that speak of money. With no
/// `parameter unit`, no currency is read: the value is a bare number (§4).
#[test]
fn names_and_descriptions_never_supply_a_currency() {
    let v = view_of(
        json!([
            {"parameter name": "Preis (EUR)", "parameter value": "45"},
            {"parameter name": "料金 (円)", "parameter value": "120000"},
            {"parameter name": "fare", "parameter description": "in Japanese yen", "parameter value": "120000"},
            {"parameter name": "amount", "parameter description": "amount in yen", "parameter value": "98000"},
            {"parameter name": "price in EUR", "parameter value": "99.90"},
            {"parameter name": "prix", "parameter description": "montant en dollars US", "parameter value": "300"},
            {"parameter name": "cost", "parameter value": "1200 USD"}
        ]),
        "Book a hotel",
    );
    for (name, line) in [
        ("Preis (EUR)", "Preis (EUR): 45."),
        ("料金 (円)", "料金 (円): 1 2 0 0 0 0."),
        ("fare", "fare, in Japanese yen: 1 2 0 0 0 0."),
        ("amount", "amount, amount in yen: 9 8 0 0 0."),
        ("price in EUR", "price in EUR: 99.90."),
        ("prix", "prix, montant en dollars US: 300."),
        // A currency written in the value is the value, read as written.
        ("cost", "cost: 1200 USD."),
    ] {
        assert_eq!(line_of(&v, name), line);
    }
    let t = &v.voice().text;
    for invented in ["US dollars", "euros", "120,000"] {
        assert!(!t.contains(invented), "{invented:?} was invented:\n{t}");
    }
    // The page shows no unit either.
    assert!(v.parameters.iter().all(|p| p.unit.is_none()));
    assert!(!v.text.contains("Unit:"), "{}", v.text);
}

/// `parameter unit` is the one source of a currency or unit, whatever the
/// name or description claims; the page and the voice both carry it.
#[test]
fn parameter_unit_names_the_currency_or_unit() {
    if !cheq::store::testing::can_run(
        "the voice tests that parse SSML with Python",
        &[cheq::store::testing::Outside::Python("xml.dom.minidom")],
    ) {
        return;
    }
    let v = view_of(
        json!([
            {"parameter name": "料金 (円)", "parameter value": "120000", "parameter unit": "JPY"},
            {"parameter name": "fare", "parameter description": "in US dollars", "parameter value": "120000", "parameter unit": "JPY"},
            {"parameter name": "Preis (EUR)", "parameter value": "250.00", "parameter unit": "EUR"},
            {"parameter name": "gold", "parameter value": "12", "parameter unit": "XAU"},
            {"parameter name": "stay", "parameter value": "3", "parameter unit": "nights"},
            {"parameter name": "baggage", "parameter value": "0023", "parameter unit": "kg"},
            {"parameter name": "total", "parameter description": "to be entered", "parameter unit": "USD",
             "parameter input": {"type": "amount"}}
        ]),
        "Book a hotel",
    );
    for (name, line) in [
        ("料金 (円)", "料金 (円): 120,000 Japanese yen."),
        // The description lies; the unit member is what the CHEQ says.
        ("fare", "fare, in US dollars: 120,000 Japanese yen."),
        // Trailing zeros stay.
        ("Preis (EUR)", "Preis (EUR): 250.00 euros."),
        // A code this reader does not know, spelled as written.
        ("gold", "gold: 12 XAU."),
        ("stay", "stay: 3 nights."),
        // A leading zero stays: every digit is said.
        ("baggage", "baggage: 0 0 2 3 kg."),
        (
            "total",
            "total, to be entered: you will be asked for this; the unit is US dollars. Say the amount when prompted.",
        ),
    ] {
        assert_eq!(line_of(&v, name), line);
    }
    assert!(
        v.voice()
            .ssml
            .contains("<s>料金 (円): 120,000 Japanese yen.</s>"),
        "{}",
        v.voice().ssml
    );
    assert!(
        v.voice()
            .ssml
            .contains("<say-as interpret-as=\"characters\">0023</say-as> kg"),
        "{}",
        v.voice().ssml
    );
    well_formed_xml(&v.voice().ssml).unwrap();
    // The page's text (what `cheq_view` hashes for html) shows the value as
    // written and the unit as written, in their own lines.
    assert!(
        v.text.contains(
            "Parameter: fare\n  Description: in US dollars\n  Value: 120000\n  Unit: JPY\n"
        ),
        "{}",
        v.text
    );
    assert!(
        v.text.contains(
            "Parameter: total\n  Description: to be entered\n  Value: to be entered by you (amount, required)\n  Unit: USD\n"
        ),
        "{}",
        v.text
    );
    assert_eq!(v.parameters[4].unit.as_deref(), Some("nights"));
    assert_eq!(v.parameters[4].value.as_deref(), Some("3"));
    assert_eq!(
        v.digest,
        cheq::sign::b64::sha256(v.text.as_bytes()),
        "cheq_view for html names the page's text"
    );
    assert_eq!(
        v.voice().digest,
        cheq::sign::b64::sha256(v.voice().text.as_bytes())
    );
}

/// A unit can deceive like any other text: it is warned about and shown, not
/// obeyed, on the page and in voice.
#[test]
fn a_deceptive_unit_is_warned_about() {
    let v = view_of(
        json!([{"parameter name": "fare", "parameter value": "5", "parameter unit": "US\u{200B}D"}]),
        "Book a hotel",
    );
    assert!(
        v.warnings.iter().any(|w| w.parameter == "fare"),
        "{:?}",
        v.warnings
    );
    assert_eq!(v.parameters[0].unit.as_deref(), Some("US⟨U+200B⟩D"));
    assert_eq!(line_of(&v, "fare"), "fare: 5 US⟨U+200B⟩D.");
    assert!(v.text.contains("  Unit: US⟨U+200B⟩D\n"), "{}", v.text);
}

/// (sample rate, channels, bits per sample, data bytes) of a WAV file.
fn wav_info(bytes: &[u8]) -> (u32, u16, u16, usize) {
    assert!(bytes.len() > 44, "WAV too short");
    assert_eq!(&bytes[..4], b"RIFF");
    assert_eq!(&bytes[8..12], b"WAVE");
    let mut i = 12;
    let (mut rate, mut channels, mut bits, mut data) = (0, 0, 0, 0);
    while i + 8 <= bytes.len() {
        let id = &bytes[i..i + 4];
        let len = u32::from_le_bytes(bytes[i + 4..i + 8].try_into().unwrap()) as usize;
        let body = i + 8;
        if id == b"fmt " {
            channels = u16::from_le_bytes(bytes[body + 2..body + 4].try_into().unwrap());
            rate = u32::from_le_bytes(bytes[body + 4..body + 8].try_into().unwrap());
            bits = u16::from_le_bytes(bytes[body + 14..body + 16].try_into().unwrap());
        } else if id == b"data" {
            // espeak-ng writes a placeholder length when streaming; trust the file.
            data = bytes.len() - body;
            break;
        }
        i = body + len + (len & 1);
    }
    (rate, channels, bits, data)
}

#[test]
fn espeak_ng_speaks_the_ssml() {
    if !cheq::store::testing::can_run(
        "the speech test with espeak-ng",
        &[cheq::store::testing::Outside::Program("espeak-ng")],
    ) {
        return;
    }
    let v = flight();
    let dir = tempfile::tempdir().unwrap();
    let ssml = dir.path().join("view.ssml");
    let wav = dir.path().join("view.wav");
    std::fs::write(&ssml, &v.voice().ssml).unwrap();
    let out = Command::new("espeak-ng")
        .arg("-m")
        .arg("-w")
        .arg(&wav)
        .arg("-f")
        .arg(&ssml)
        .output()
        .expect("espeak-ng must be installed (tests/voice/install.sh)");
    assert!(
        out.status.success(),
        "espeak-ng failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&wav).unwrap();
    let (rate, channels, bits, data) = wav_info(&bytes);
    assert!(
        rate >= 8000 && channels >= 1 && bits >= 8,
        "{rate} {channels} {bits}"
    );
    let seconds = data as f64 / (rate as f64 * channels as f64 * (bits as f64 / 8.0));
    // About 600 characters of text: a plausible reading takes 20 s to 2 min.
    assert!(
        (15.0..150.0).contains(&seconds),
        "{seconds:.1} s of audio for {} characters",
        v.voice().text.len()
    );
    let samples = &bytes[bytes.len() - data..];
    assert!(
        samples.iter().filter(|b| **b != 0).count() > data / 4,
        "the audio is mostly silence"
    );
}
