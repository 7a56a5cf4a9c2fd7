//! The `cheq` command line, run as a real process (PROTOCOL.md §4, §5, §9).
//!
//! Inputs are built with the library itself; every time-dependent command gets
//! `--now`, so the tests do not depend on the clock.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use cheq::sign::SigningKey;
use serde_json::{json, Value};
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const NOW: &str = "2026-11-22T10:00:00Z";
const AFTER_EXPIRY: &str = "2026-11-22T21:05:00Z";

const PAYLOAD: &str = r#"{
  "version": "1.0",
  "operation": "https://api.airline.example/api/v1/book-flight",
  "operation name": "Book flight",
  "inputs": {"parameters": [
    {"parameter name": "flight number", "parameter description": "The overnight flight from EWR to MAD", "parameter value": "UA23"},
    {"parameter name": "flight cost", "parameter value": "$1200 USD"}
  ]},
  "date": "2026-11-22T09:00:00Z",
  "nonce": "AAECAwQFBgcICQoLDA0ODw",
  "resource uri": "https://api.airline.example/cheq/confirmations/8asdjd8g9g0as",
  "confirmation uri": "https://confirm.example",
  "subject": "alice",
  "expires": "2026-11-22T21:00:00Z"
}
"#;

/// Unusual whitespace, member order and escapes: a re-serialisation would change it.
const ODD_PAYLOAD: &str = "{\"subject\":\"alice\" ,\t\"expires\" :\"2026-11-22T21:00:00Z\",\r\n\
  \"nonce\":\"AAECAwQFBgcICQoLDA0ODw\",   \"resource uri\":\"https://api.airline.example/cheq/confirmations/x1\",\n\
  \"confirmation uri\":\"https://confirm.example\",\"date\":\"2026-11-22T09:00:00Z\",\n\n\
  \"inputs\":{\"parameters\":[{\"parameter value\":\"\\u0055A23\",\"parameter name\":\"flight\"}]},\
  \"operation name\":\"Book \\u00e9\",\"operation\":\"https://api.airline.example/book\",\"version\":1.0,\
  \"x-extra\":[1.50, 2e3, {}]   }";

/// The draft's Figure 4, trailing commas removed: displayable, not countersignable.
const FIGURE_4: &str = r#"{
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
         }
      ]
   },
   "date" : "July 23, 2025, 11:59 UTC"
}"#;

/// Keys, trust file and payload in a temporary directory.
struct Fixture {
    dir: tempfile::TempDir,
    rs_key: PathBuf,
    cs_key: PathBuf,
    trust: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let rs = SigningKey::generate("rs-1", &mut rand_core::OsRng).unwrap();
        let cs = SigningKey::generate("cs-1", &mut rand_core::OsRng).unwrap();
        let rs_key = dir.path().join("rs-1.jwk");
        let cs_key = dir.path().join("cs-1.jwk");
        std::fs::write(&rs_key, rs.to_private_jwk_json().as_bytes()).unwrap();
        std::fs::write(&cs_key, cs.to_private_jwk_json().as_bytes()).unwrap();
        let trust = dir.path().join("trust.json");
        write_trust(&trust, &rs.public_jwk(), &cs.public_jwk());
        Fixture {
            dir,
            rs_key,
            cs_key,
            trust,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// The resource-signed PAYLOAD, written to `signed.json`.
    fn signed(&self) -> PathBuf {
        let payload = self.write("payload.json", PAYLOAD);
        let out = cheq(&["sign", "--key", s(&self.rs_key), s(&payload)], None);
        assert_success(&out);
        self.write("signed.json", &out.stdout)
    }

    /// `signed()` countersigned with `decision`, written to `decided.json`.
    fn decided(&self, decision: &str) -> PathBuf {
        let signed = self.signed();
        let out = self.countersign(&signed, decision, "alice", NOW);
        assert_success(&out);
        self.write("decided.json", &out.stdout)
    }

    fn countersign(&self, signed: &Path, decision: &str, sub: &str, now: &str) -> Output {
        cheq(
            &[
                "countersign",
                "--key",
                s(&self.cs_key),
                "--trust",
                s(&self.trust),
                "--decision",
                decision,
                "--sub",
                sub,
                "--now",
                now,
                s(signed),
            ],
            None,
        )
    }

    fn verify(&self, file: &Path, expect: Option<&str>) -> Output {
        let mut args = vec!["verify", "--trust", s(&self.trust), "--now", NOW];
        if let Some(expect) = expect {
            args.extend(["--expect", expect]);
        }
        args.push(s(file));
        cheq(&args, None)
    }
}

fn write_trust(path: &Path, rs_public: &Value, cs_public: &Value) {
    let trust = json!({
        "resource_servers": [{"origin": "https://api.airline.example", "keys": {"keys": [rs_public]}}],
        "confirmation_servers": [{"origin": "https://confirm.example", "keys": {"keys": [cs_public]}}]
    });
    std::fs::write(path, serde_json::to_vec_pretty(&trust).unwrap()).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs the real binary with `args`, feeding `stdin` if given.
fn cheq(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cheq"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(bytes) = stdin {
        child.stdin.take().unwrap().write_all(bytes).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_success(out: &Output) {
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(out));
}

/// Asserts exit `code` and the error contract: one line on stderr, starting
/// `cheq: `, no panic, no backtrace. Returns that line.
fn assert_fails(out: &Output, code: i32) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(err.starts_with("cheq: "), "stderr: {err}");
    assert!(
        err.ends_with('\n') && err.lines().count() == 1,
        "stderr: {err:?}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
    err
}

/// The payload bytes of a signed document.
fn payload_of(doc: &[u8]) -> Vec<u8> {
    let v: Value = serde_json::from_slice(doc).unwrap();
    URL_SAFE_NO_PAD
        .decode(v["payload"].as_str().unwrap())
        .unwrap()
}

/// The decoded protected header of signature `index`.
fn header_of(doc: &[u8], index: usize) -> Value {
    let v: Value = serde_json::from_slice(doc).unwrap();
    let b = URL_SAFE_NO_PAD
        .decode(v["signatures"][index]["protected"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&b).unwrap()
}

// ---- keygen -----------------------------------------------------------------

#[test]
fn keygen_writes_private_0600_and_public_without_d() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("new/keys");
    let out = cheq(&["keygen", "--kid", "rs-1", "--dir", s(&keys)], None);
    assert_success(&out);
    let private = keys.join("rs-1.jwk");
    let public = keys.join("rs-1.pub.jwk");
    let err_text = stderr(&out);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains(s(&public)), "{stdout}");

    let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "private key mode {mode:o}");
    let private_text = std::fs::read_to_string(&private).unwrap();
    let key = SigningKey::from_jwk_bytes(private_text.as_bytes()).unwrap();
    assert_eq!(key.kid(), "rs-1");
    let d = serde_json::from_str::<Value>(&private_text).unwrap()["d"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!stdout.contains(&d) && !err_text.contains(&d));

    let public_json: Value = serde_json::from_slice(&std::fs::read(&public).unwrap()).unwrap();
    assert!(public_json.get("d").is_none(), "{public_json}");
    assert_eq!(public_json, key.public_jwk());
}

#[test]
fn keygen_never_overwrites_an_existing_key() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["keygen", "--kid", "cs-1", "--dir", s(dir.path())];
    assert_success(&cheq(&args, None));
    let private = dir.path().join("cs-1.jwk");
    let public = dir.path().join("cs-1.pub.jwk");
    let before = (
        std::fs::read(&private).unwrap(),
        std::fs::read(&public).unwrap(),
    );
    let err = assert_fails(&cheq(&args, None), 1);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read(&private).unwrap(), before.0);
    assert_eq!(std::fs::read(&public).unwrap(), before.1);

    // Only the public half left over: still refused, nothing written.
    std::fs::remove_file(&private).unwrap();
    assert_fails(&cheq(&args, None), 1);
    assert!(!private.exists());
    assert_eq!(std::fs::read(&public).unwrap(), before.1);
}

#[test]
fn keygen_refuses_a_kid_that_is_not_a_file_name() {
    let dir = tempfile::tempdir().unwrap();
    for kid in ["../escape", "a/b", ".hidden", ""] {
        assert_fails(
            &cheq(&["keygen", "--kid", kid, "--dir", s(dir.path())], None),
            2,
        );
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

// ---- sign -------------------------------------------------------------------

#[test]
fn sign_prints_a_verifiable_resource_signed_cheq() {
    let f = Fixture::new();
    let signed = f.signed();
    let doc = std::fs::read(&signed).unwrap();
    assert_eq!(payload_of(&doc), PAYLOAD.as_bytes());
    assert_eq!(
        header_of(&doc, 0),
        json!({"alg": "EdDSA", "kid": "rs-1", "typ": "cheq+jws", "cheq_role": "resource"})
    );
    assert_success(&f.verify(&signed, Some("resource")));
}

#[test]
fn sign_keeps_the_exact_payload_bytes() {
    let f = Fixture::new();
    let payload = f.write("odd.json", ODD_PAYLOAD);
    let out = cheq(&["sign", "--key", s(&f.rs_key), s(&payload)], None);
    assert_success(&out);
    assert_eq!(payload_of(&out.stdout), ODD_PAYLOAD.as_bytes());
    let signed = f.write("odd.signed.json", &out.stdout);
    assert_success(&f.verify(&signed, None));

    // The same through standard input.
    let out = cheq(
        &["sign", "--key", s(&f.rs_key), "-"],
        Some(ODD_PAYLOAD.as_bytes()),
    );
    assert_success(&out);
    assert_eq!(payload_of(&out.stdout), ODD_PAYLOAD.as_bytes());
}

#[test]
fn sign_refuses_figure_4_naming_the_missing_members() {
    let f = Fixture::new();
    let payload = f.write("figure4.json", FIGURE_4);
    let out = cheq(&["sign", "--key", s(&f.rs_key), s(&payload)], None);
    let err = assert_fails(&out, 1);
    for member in [
        "nonce",
        "resource uri",
        "confirmation uri",
        "subject",
        "expires",
    ] {
        assert!(err.contains(member), "{member} not named: {err}");
    }
    assert!(out.stdout.is_empty());
}

#[test]
fn sign_refuses_a_payload_without_nonce() {
    let f = Fixture::new();
    let mut v: Value = serde_json::from_str(PAYLOAD).unwrap();
    v.as_object_mut().unwrap().remove("nonce");
    let payload = f.write("no-nonce.json", serde_json::to_vec(&v).unwrap());
    let err = assert_fails(
        &cheq(&["sign", "--key", s(&f.rs_key), s(&payload)], None),
        1,
    );
    assert!(err.contains("missing nonce"), "{err}");
}

#[test]
fn sign_refuses_bad_inputs_with_one_line() {
    let f = Fixture::new();
    let payload = f.write("payload.json", PAYLOAD);
    let public = f.write(
        "public.jwk",
        serde_json::to_vec(
            &SigningKey::generate("p", &mut rand_core::OsRng)
                .unwrap()
                .public_jwk(),
        )
        .unwrap(),
    );
    // A public key cannot sign.
    let err = assert_fails(&cheq(&["sign", "--key", s(&public), s(&payload)], None), 1);
    assert!(err.contains("private part"), "{err}");
    // Missing files.
    assert_fails(
        &cheq(
            &["sign", "--key", s(&f.path("nope.jwk")), s(&payload)],
            None,
        ),
        1,
    );
    assert_fails(
        &cheq(
            &["sign", "--key", s(&f.rs_key), s(&f.path("nope.json"))],
            None,
        ),
        1,
    );
    // Duplicate member names.
    let dup = f.write(
        "dup.json",
        PAYLOAD.replacen("\"subject\"", "\"version\": \"1.0\", \"subject\"", 1),
    );
    let err = assert_fails(&cheq(&["sign", "--key", s(&f.rs_key), s(&dup)], None), 1);
    assert!(err.contains("duplicate"), "{err}");
}

// ---- countersign ------------------------------------------------------------

#[test]
fn countersign_accept_then_verify() {
    let f = Fixture::new();
    let decided = f.decided("accept");
    let doc = std::fs::read(&decided).unwrap();
    assert_eq!(payload_of(&doc), PAYLOAD.as_bytes());
    let h = header_of(&doc, 1);
    assert_eq!(h["cheq_role"], "confirmation");
    assert_eq!(h["cheq_decision"], "accept");
    assert_eq!(h["kid"], "cs-1");
    assert_eq!(h["sub"], "alice");
    assert_eq!(h["amr"], json!(["user"]));
    assert_eq!(h["cheq_channel"], "api");
    assert_eq!(h["iat"], json!(1_795_341_600_i64));
    assert_eq!(h["auth_time"], h["iat"]);
    assert_eq!(h["crit"], json!(["cheq_decision"]));

    assert_success(&f.verify(&decided, Some("accept")));
    assert_success(&f.verify(&decided, None));
    let err = assert_fails(&f.verify(&decided, Some("reject")), 1);
    assert!(err.contains("rule 3"), "{err}");
    let err = assert_fails(&f.verify(&decided, Some("resource")), 1);
    assert!(err.contains("rule 2"), "{err}");
}

#[test]
fn countersign_reject_with_channel() {
    let f = Fixture::new();
    let signed = f.signed();
    let out = cheq(
        &[
            "countersign",
            "--key",
            s(&f.cs_key),
            "--trust",
            s(&f.trust),
            "--decision",
            "reject",
            "--sub",
            "alice",
            "--channel",
            "voice",
            "--now",
            NOW,
            "-",
        ],
        Some(&std::fs::read(&signed).unwrap()),
    );
    assert_success(&out);
    assert_eq!(header_of(&out.stdout, 1)["cheq_channel"], "voice");
    let decided = f.write("rejected.json", &out.stdout);
    assert_success(&f.verify(&decided, Some("reject")));
    assert_fails(&f.verify(&decided, Some("accept")), 1);
}

#[test]
fn countersign_view_is_the_hash_of_the_inspected_payload() {
    use sha2::Digest as _;
    let f = Fixture::new();
    let decided = f.decided("accept");
    let inspect = cheq(&["inspect", s(&decided)], None);
    assert_success(&inspect);
    let text = String::from_utf8(inspect.stdout).unwrap();
    let start = text.find("payload (").unwrap();
    let body = &text[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let shown = &body[..body.find("\n\nsignature 0").unwrap()];
    let doc = std::fs::read(&decided).unwrap();
    assert_eq!(
        header_of(&doc, 1)["cheq_view"],
        URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(shown.as_bytes()))
    );
}

#[test]
fn countersign_refuses_an_untrusted_resource_key() {
    let f = Fixture::new();
    let signed = f.signed();
    // A trust file that knows another resource key under the same kid.
    let other = SigningKey::generate("rs-1", &mut rand_core::OsRng).unwrap();
    let cs = SigningKey::from_jwk_bytes(&std::fs::read(&f.cs_key).unwrap()).unwrap();
    write_trust(&f.trust, &other.public_jwk(), &cs.public_jwk());
    let out = f.countersign(&signed, "accept", "alice", NOW);
    let err = assert_fails(&out, 1);
    assert!(err.contains("rule 1"), "{err}"); // same kid, wrong key: signature fails
    assert!(out.stdout.is_empty());

    // No key for that kid at all.
    let other = SigningKey::generate("rs-9", &mut rand_core::OsRng).unwrap();
    write_trust(&f.trust, &other.public_jwk(), &cs.public_jwk());
    let err = assert_fails(&f.countersign(&signed, "accept", "alice", NOW), 1);
    assert!(
        err.starts_with("cheq: refused: rule 2: resource key \"rs-1\" is not trusted"),
        "{err}"
    );
}

#[test]
fn countersign_refuses_the_wrong_user() {
    let f = Fixture::new();
    let signed = f.signed();
    let out = f.countersign(&signed, "accept", "mallory", NOW);
    let err = assert_fails(&out, 1);
    assert!(err.contains("alice") && err.contains("mallory"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn countersign_refuses_an_expired_cheq() {
    let f = Fixture::new();
    let signed = f.signed();
    let out = f.countersign(&signed, "accept", "alice", AFTER_EXPIRY);
    let err = assert_fails(&out, 1);
    assert!(err.contains("rule 4") && err.contains("expired"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn countersign_refuses_an_already_decided_cheq() {
    let f = Fixture::new();
    let decided = f.decided("accept");
    let err = assert_fails(&f.countersign(&decided, "reject", "alice", NOW), 1);
    assert!(err.contains("rule 2"), "{err}");
}

#[test]
fn countersign_usage_errors() {
    let f = Fixture::new();
    let signed = f.signed();
    for (flag, value) in [
        ("--decision", "maybe"),
        ("--channel", "fax"),
        ("--now", "tomorrow"),
    ] {
        let mut args = vec![
            "countersign",
            "--key",
            s(&f.cs_key),
            "--trust",
            s(&f.trust),
            "--sub",
            "alice",
        ];
        if flag != "--decision" {
            args.extend(["--decision", "accept"]);
        }
        args.extend([flag, value, s(&signed)]);
        assert_fails(&cheq(&args, None), 2);
    }
}

// ---- verify -----------------------------------------------------------------

#[test]
fn verify_prints_a_json_summary() {
    let f = Fixture::new();
    let signed = f.signed();
    let out = f.verify(&signed, None);
    assert_success(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["stage"], "resource");
    assert!(v.get("decision").is_none());
    assert_eq!(v["kids"], json!({"resource": "rs-1"}));
    assert_eq!(
        v["operation"],
        "https://api.airline.example/api/v1/book-flight"
    );
    assert_eq!(v["subject"], "alice");
    assert_eq!(v["nonce"], "AAECAwQFBgcICQoLDA0ODw");
    assert_eq!(v["expires"], "2026-11-22T21:00:00Z");
    assert!(v["note"].as_str().unwrap().contains("rule 5"));

    let decided = f.decided("reject");
    let out = f.verify(&decided, None);
    assert_success(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stage"], "decided");
    assert_eq!(v["decision"], "reject");
    assert_eq!(
        v["kids"],
        json!({"resource": "rs-1", "confirmation": "cs-1"})
    );
    assert_eq!(v["confirmation"]["sub"], "alice");
}

#[test]
fn verify_reads_standard_input() {
    let f = Fixture::new();
    let decided = std::fs::read(f.decided("accept")).unwrap();
    let out = cheq(
        &[
            "verify",
            "--trust",
            s(&f.trust),
            "--now",
            NOW,
            "--expect",
            "accept",
            "-",
        ],
        Some(&decided),
    );
    assert_success(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "accept");
}

#[test]
fn verify_refuses_a_tampered_payload() {
    let f = Fixture::new();
    let signed = f.signed();
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&signed).unwrap()).unwrap();
    let tampered = PAYLOAD.replace("$1200 USD", "$9200 USD");
    doc["payload"] = json!(URL_SAFE_NO_PAD.encode(tampered.as_bytes()));
    let path = f.write("tampered.json", serde_json::to_vec(&doc).unwrap());
    let out = f.verify(&path, None);
    let err = assert_fails(&out, 1);
    assert!(
        err.contains("rule 1") && err.contains("does not verify"),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    // Tampering with the decided document too.
    let decided = f.decided("accept");
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&decided).unwrap()).unwrap();
    doc["payload"] = json!(URL_SAFE_NO_PAD.encode(tampered.as_bytes()));
    let path = f.write("tampered2.json", serde_json::to_vec(&doc).unwrap());
    assert_fails(&f.verify(&path, Some("accept")), 1);
}

#[test]
fn verify_refuses_an_expired_cheq() {
    let f = Fixture::new();
    let decided = f.decided("accept");
    let out = cheq(
        &[
            "verify",
            "--trust",
            s(&f.trust),
            "--now",
            AFTER_EXPIRY,
            s(&decided),
        ],
        None,
    );
    let err = assert_fails(&out, 1);
    assert!(err.contains("rule 4"), "{err}");
}

#[test]
fn verify_usage_errors_exit_2_and_missing_files_exit_1() {
    let f = Fixture::new();
    let signed = f.signed();
    let t = s(&f.trust);
    let file = s(&signed);
    assert_fails(&cheq(&["verify", "--trust", t, "--bogus", file], None), 2);
    assert_fails(
        &cheq(&["verify", "--trust", t, "--expect", "maybe", file], None),
        2,
    );
    assert_fails(
        &cheq(&["verify", "--trust", t, "--now", "yesterday", file], None),
        2,
    );
    assert_fails(&cheq(&["verify", file], None), 2);
    assert_fails(&cheq(&["frobnicate"], None), 2);
    assert_fails(&cheq(&[], None), 2);
    let missing = f.path("missing.json");
    let err = assert_fails(&cheq(&["verify", "--trust", t, s(&missing)], None), 1);
    assert!(err.contains("missing.json"), "{err}");
    assert_fails(&cheq(&["verify", "--trust", s(&missing), file], None), 1);
    // A trust file that is not one.
    let bad_trust = f.write("bad-trust.json", "{\"resource_servers\": 3}");
    assert_fails(&cheq(&["verify", "--trust", s(&bad_trust), file], None), 1);
}

#[test]
fn help_and_version_exit_0() {
    for args in [&["--help"][..], &["--version"], &["verify", "--help"]] {
        let out = cheq(args, None);
        assert_success(&out);
        assert!(!out.stdout.is_empty());
    }
    let help = String::from_utf8(cheq(&["countersign", "--help"], None).stdout).unwrap();
    assert!(help.contains("amr") && help.contains("user") && help.contains("cheq_view"));
}

// ---- the command reference in docs/operations.md ----------------------------

/// The reference in docs/operations.md is what the commands' own help
/// says: a changed flag or doc comment without the regenerated reference
/// fails here, naming the command that regenerates it.
#[test]
fn the_command_reference_in_the_docs_is_the_help() {
    use cheq::cli::reference::{between_markers, REGENERATE};
    let out = cheq(&["help-reference"], None);
    assert_success(&out);
    let generated = String::from_utf8(out.stdout).unwrap();
    for wanted in [
        "### `cheq audit`",
        "--colocated",
        "--passkeys",
        "--confirmation",
    ] {
        assert!(generated.contains(wanted), "{wanted} is not in the help");
    }
    let doc = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md");
    let text = std::fs::read_to_string(doc).unwrap();
    let kept = between_markers(&text)
        .unwrap_or_else(|| panic!("docs/operations.md lost the marker lines of the reference"));
    if kept != generated {
        let first = kept
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(kept.lines().count().min(generated.lines().count()));
        panic!(
            "docs/operations.md's command reference differs from the commands' help \
             (first at line {} of the reference: {:?} in the file, {:?} in the help); \
             regenerate it: {REGENERATE}",
            first + 1,
            kept.lines().nth(first).unwrap_or("(its end)"),
            generated.lines().nth(first).unwrap_or("(its end)"),
        );
    }
}

/// `--update` rewrites only what lies between the markers, and refuses a
/// file without them (one line, exit 1), leaving it as it was.
#[test]
fn help_reference_update_keeps_the_rest_and_refuses_a_file_without_markers() {
    use cheq::cli::reference::{BEGIN, END};
    let f = Fixture::new();
    let doc = f.write(
        "doc.md",
        format!("# Mine\n\nhand-written\n{BEGIN} -->\nstale\n{END}\nalso mine\n"),
    );
    assert_success(&cheq(&["help-reference", "--update", s(&doc)], None));
    let text = std::fs::read_to_string(&doc).unwrap();
    assert!(text.starts_with(&format!("# Mine\n\nhand-written\n{BEGIN} -->\n")));
    assert!(text.ends_with(&format!("{END}\nalso mine\n")));
    assert!(!text.contains("stale") && text.contains("### `cheq demo`"));

    let plain = f.write("plain.md", "# No markers\n");
    let err = assert_fails(&cheq(&["help-reference", "--update", s(&plain)], None), 1);
    assert!(err.contains("no marker lines"), "{err}");
    assert_eq!(std::fs::read_to_string(&plain).unwrap(), "# No markers\n");
    let missing = f.path("missing.md");
    assert_fails(&cheq(&["help-reference", "--update", s(&missing)], None), 1);
    // Hidden: not among the commands `cheq --help` lists.
    let help = String::from_utf8(cheq(&["--help"], None).stdout).unwrap();
    assert!(!help.contains("help-reference"), "{help}");
}

// ---- inspect ----------------------------------------------------------------

#[test]
fn inspect_shows_payload_and_headers_unverified() {
    let f = Fixture::new();
    let decided = f.decided("accept");
    let out = cheq(&["inspect", s(&decided)], None);
    assert_success(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("NOT VERIFIED"), "{text}");
    assert!(
        text.contains("\"operation name\": \"Book flight\""),
        "{text}"
    );
    assert!(
        text.contains("\"parameter value\": \"$1200 USD\""),
        "{text}"
    );
    assert!(
        text.contains("signature 0 (resource, kid \"rs-1\""),
        "{text}"
    );
    assert!(
        text.contains("signature 1 (confirmation, kid \"cs-1\""),
        "{text}"
    );
    assert!(text.contains("\"cheq_decision\": \"accept\""), "{text}");
    assert!(text.contains("\"cheq_role\": \"resource\""), "{text}");

    // Nothing is verified: an untrusted, expired document is still shown.
    let out = cheq(&["inspect", "-"], Some(&std::fs::read(&decided).unwrap()));
    assert_success(&out);
}

#[test]
fn inspect_refuses_garbage() {
    let f = Fixture::new();
    let garbage = f.write("garbage.json", "this is not a CHEQ");
    assert_fails(&cheq(&["inspect", s(&garbage)], None), 1);
    assert_fails(&cheq(&["inspect", "-"], Some(b"{\"payload\":\"e30\"}")), 1);
    assert_fails(&cheq(&["inspect", "-"], Some(b"\xff\xfe")), 1);
    let err = assert_fails(&cheq(&["inspect", "-"], Some(b"[1,2]")), 1);
    assert!(err.contains("not a signed CHEQ"), "{err}");
}

#[test]
fn inspect_escapes_terminal_controls() {
    let f = Fixture::new();
    let evil = PAYLOAD.replace("Book flight", "Book \\u001b[2J\\u009b31m\u{202e}flight");
    let payload = f.write("evil.json", &evil);
    let out = cheq(&["sign", "--key", s(&f.rs_key), s(&payload)], None);
    assert_success(&out);
    let out = cheq(&["inspect", "-"], Some(&out.stdout));
    assert_success(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{9b}') && !text.contains('\u{202e}'),
        "{text:?}"
    );
    assert!(text.contains("\\u202e"), "{text}");
}

/// `cheq unpack` prints the documents a file keeps packed, each on one safe
/// line after its file's name; a file without any prints nothing; a missing
/// file is a one-line error.
#[test]
fn unpack_prints_the_packed_documents_of_a_file() {
    let f = Fixture::new();
    let doc = r#"{"payload":"eyJ2ZXJzaW9uIjogIjEuMCJ9","signatures":[]}"#;
    let evil = "{\"x\":\"\u{1b}[2J\u{202e}\"}";
    let mut raw = b"sled page\x00\xc1".to_vec();
    raw.extend_from_slice(&cheq::store::packed::pack(doc));
    raw.extend_from_slice(b"\x00more");
    raw.extend_from_slice(&cheq::store::packed::pack(evil));
    let file = f.dir.path().join("db");
    std::fs::write(&file, &raw).unwrap();
    let out = cheq(&["unpack", s(&file)], None);
    assert_success(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0], format!("{}\t{doc}", file.display()));
    assert!(
        lines[1].contains("\\u{001b}") && lines[1].contains("\\u{202e}"),
        "{text}"
    );
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{202e}'),
        "{text}"
    );

    let plain = f.write("plain.txt", "nothing packed here");
    let out = cheq(&["unpack", s(&plain)], None);
    assert_success(&out);
    assert!(out.stdout.is_empty());
    let err = assert_fails(&cheq(&["unpack", "/nonexistent/db"], None), 1);
    assert!(err.contains("/nonexistent/db"), "{err}");
}

/// `scripts/demo` runs the binary it finds only when nothing it is built
/// from is newer: every workspace member's directory, the patched crates,
/// the templates the pages are compiled from, and the manifests are in the
/// list it checks.
#[test]
fn scripts_demo_rebuilds_when_any_source_of_the_binary_changes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = std::fs::read_to_string(root.join("scripts/demo")).unwrap();
    let checked: Vec<&str> = script
        .lines()
        .find_map(|l| {
            let at = l.find("$(find ")?;
            let rest = &l[at + "$(find ".len()..];
            Some(rest[..rest.find(" -newer")?].split_whitespace().collect())
        })
        .expect("scripts/demo checks its sources with find … -newer");
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
    let mut sources = vec![
        "Cargo.toml".to_owned(),
        "Cargo.lock".to_owned(),
        "src".to_owned(),
        "templates".to_owned(),
    ];
    let members = manifest["workspace"]["members"].as_array().unwrap();
    let patched = manifest["patch"]["crates-io"].as_table().unwrap();
    let paths = members.iter().filter_map(|m| m.as_str()).chain(
        patched
            .values()
            .filter_map(|p| p.get("path").and_then(|p| p.as_str())),
    );
    for path in paths.filter(|p| *p != ".") {
        let top = path.split('/').next().unwrap().to_owned();
        if !sources.contains(&top) {
            sources.push(top);
        }
    }
    for source in &sources {
        assert!(
            checked.contains(&source.as_str()),
            "scripts/demo does not look at {source} (it checks {checked:?})"
        );
    }
}
