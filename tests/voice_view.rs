//! The voice view (PROTOCOL.md §10) and deceptive-text warnings, from a real
//! signed and verified CHEQ; the SSML is rendered to audio by a real speech
//! synthesiser (Debian's espeak-ng, installed by tests/voice/install.sh).

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
            {"parameter name": "price", "parameter description": "in US dollars", "parameter value": "1200"}
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
    let t = &v.voice_text;
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
    assert_ne!(v.voice_digest, v.digest, "each channel hashes its own text");
}

#[test]
fn the_ssml_is_well_formed_and_marks_characters_dates_and_money() {
    let v = flight();
    let s = &v.voice_ssml;
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
    assert!(
        s.contains("<say-as interpret-as=\"currency\">1,200 US dollars</say-as>"),
        "{s}"
    );
}

#[test]
fn values_that_look_like_markup_are_escaped() {
    let v = view_of(
        json!([{"parameter name": "memo", "parameter value": "<break time=\"9s\"/> & </speak>"}]),
        "Send <b>note</b>",
    );
    well_formed_xml(&v.voice_ssml).unwrap();
    assert!(!v.voice_ssml.contains("<break"), "{}", v.voice_ssml);
    assert!(v
        .voice_ssml
        .contains("&lt;break time=&quot;9s&quot;/&gt; &amp; &lt;/speak&gt;"));
}

#[test]
fn deceptive_text_is_warned_about_in_both_views() {
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
    assert!(!v.voice_text.contains('\u{202E}'));
    // The voice view says the warning aloud before the question.
    let t = &v.voice_text;
    let warning = t
        .find("Warning: the parameter payee")
        .expect("spoken warning");
    let question = t.find("Do you accept").unwrap();
    assert!(warning < question, "{t}");
    assert!(
        t.contains("Warning: the parameter memo mixes writing systems"),
        "{t}"
    );
    well_formed_xml(&v.voice_ssml).unwrap();
    assert!(v.voice_ssml.contains("Warning: the parameter payee"));
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
    let v = flight();
    let dir = tempfile::tempdir().unwrap();
    let ssml = dir.path().join("view.ssml");
    let wav = dir.path().join("view.wav");
    std::fs::write(&ssml, &v.voice_ssml).unwrap();
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
        v.voice_text.len()
    );
    let samples = &bytes[bytes.len() - data..];
    assert!(
        samples.iter().filter(|b| **b != 0).count() > data / 4,
        "the audio is mostly silence"
    );
}
