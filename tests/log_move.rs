//! The public log (PROTOCOL.md §15) across a move between stores, with the
//! real `cheq` binary as an operator runs it:
//!
//! - a CS on sled makes decisions and an auditor keeps its checkpoint
//!   (`cheq audit --state`); the CS is stopped, `cheq store export` names
//!   the files that must travel and where, they are copied to a new data
//!   directory,
//!   `cheq store import` puts the stream into PostgreSQL, and the CS started
//!   there serves the same signed checkpoint; a new decision grows the log,
//!   and the auditor's kept state passes; then the same from PostgreSQL
//!   back to sled;
//! - an import refuses, and writes nothing, when the target configuration
//!   would sign the log with another key or has no key file yet, from a
//!   file and from standard input;
//! - a data directory made before the secret files were renamed keeps its
//!   keys (`tlog-note.secret`, `log.secret`), and the export says the name
//!   each takes on the new host; the log's key copied to a host that has
//!   started once under the name the export gives, or to the file the
//!   refusal names, moves the log, and under its old name does not.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use cheq::configfile::ServerConfig as _;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

async fn checkpoint(base: &str) -> String {
    let (status, text) = get_text(&format!("{base}/log/checkpoint")).await;
    assert_eq!(status, 200);
    text
}

/// Waits until the checkpoint covers `n` entries (at most 10 s).
async fn wait_for_size(base: &str, n: u64) {
    let start = Instant::now();
    loop {
        let size = log_size(base).await;
        if size >= n {
            assert_eq!(size, n, "more entries than decisions");
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the log has {size} entries, not {n}, after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `cheq audit` of the log at `base` with the kept state `state`: its
/// summary, or the failure's text.
fn audit(base: &str, key: &str, state: &Path, documents: &[PathBuf]) -> Result<Value, String> {
    let documents: Vec<&Path> = documents.iter().map(|d| d.as_path()).collect();
    let (ok, out, err) = audit_log(base, key, state, &documents);
    if ok {
        Ok(serde_json::from_str(&out).unwrap())
    } else {
        Err(format!("{out}{err}"))
    }
}

/// Signs in (a moved host has no sessions) and accepts one new booking;
/// every decided document as alice's history serves it, each in a file of
/// `dir`.
async fn decide_one(setup: &Setup, base: &str, dir: &Path) -> Vec<PathBuf> {
    let mut b = Browser::new(base);
    accept_bookings(setup, &mut b, 1).await;
    let mut files = Vec::new();
    for doc in history_documents(&mut b).await {
        let name = cheq::sign::b64::sha256(doc.as_bytes());
        let file = dir.join(format!("decision-{name}.json"));
        std::fs::write(&file, doc).unwrap();
        files.push(file);
    }
    files
}

/// A copy of `cs.toml` over another data directory, on PostgreSQL when
/// `database` is given.
fn config_over(setup: &Setup, name: &str, data: &str, database: Option<&str>) -> PathBuf {
    let text = std::fs::read_to_string(setup.path("cs.toml")).unwrap();
    let old = format!("data_dir = \"{}\"", toml_path(&setup.dir.path().join("cs")));
    assert!(text.contains(&old), "{text}");
    let new = format!("data_dir = \"{}\"", toml_path(&setup.dir.path().join(data)));
    let mut text = text.replacen(&old, &new, 1);
    if let Some(url) = database {
        text = format!("database_url = \"{url}\"\n{text}");
    }
    let path = setup.dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `cheq args…` with `stdin`, no database from the environment:
/// (exit code, stdout, stderr).
fn cheq_in(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cheq"))
        .args(args)
        .env_remove("CHEQ_DATABASE_URL")
        .env_remove("CHEQ_DATA_DIR")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A file `cheq store export` says must travel: where it is, and where it
/// goes on the new host ("data_dir/NAME", "the path signing_key names", …).
type Carried = (PathBuf, String);

/// `cheq store export --config FILE`: the stream, and the files its
/// standard error says must travel beside it.
fn export(config: &Path) -> (Vec<u8>, Vec<Carried>) {
    let (code, out, err) = cheq_in(
        &["store", "export", "--config", config.to_str().unwrap()],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.starts_with("cheq store export: copy these files"),
        "{err}"
    );
    let files = err
        .lines()
        .skip(1)
        .map(|l| {
            let l = l.strip_prefix("  ").unwrap();
            let (from, rest) = l.split_once("  ->  ").unwrap();
            let to = &rest[..rest.find("  (").unwrap()];
            (PathBuf::from(from), to.to_owned())
        })
        .collect();
    (out.into_bytes(), files)
}

fn import(config: &Path, stream: &[u8]) -> (i32, String, String) {
    cheq_in(
        &["store", "import", "--config", config.to_str().unwrap()],
        stream,
    )
}

/// Copies what the export named for the data directory into the data
/// directory `to` (made 0700 when missing), under the name the export gave;
/// what lies elsewhere (the signing key) stays where both configurations
/// name it.
fn copy_named(files: &[Carried], to: &Path) {
    private_dir(to);
    for (file, place) in files {
        let Some(name) = place.strip_prefix("data_dir/") else {
            continue;
        };
        copy_tree(file, &to.join(name));
    }
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            copy_tree(&e.path(), &to.join(e.file_name()));
        }
    } else {
        std::fs::copy(from, to).unwrap();
    }
}

/// Stops the CS at `cs`, moves its store (configuration `from`) to the
/// configuration `to` over the new data directory `to_dir`, copying the
/// files the export names.
fn move_host(cs: &mut Proc, from: &Path, to: &Path, to_dir: &Path) {
    cs.kill();
    let (stream, files) = export(from);
    let names: Vec<String> = files
        .iter()
        .map(|(f, _)| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for needed in [
        "transparency-log-key.secret",
        "cs.jwk",
        "evidence.secret",
        "pin.pepper",
    ] {
        assert!(
            names.iter().any(|n| n == needed),
            "{needed} not in {names:?}"
        );
    }
    copy_named(&files, to_dir);
    let (code, out, err) = import(to, &stream);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("log_head"), "{out}");
    assert!(err.is_empty(), "{err}");
}

#[test]
fn the_log_moves_from_sled_to_postgresql_and_back_and_the_auditor_follows() {
    if !cheq::store::testing::can_run(
        "the log moved to PostgreSQL",
        &[cheq::store::testing::Outside::Postgres],
    ) {
        return;
    }
    let setup = Setup::new();
    let db = cheq::store::pg::test_database("log_move").unwrap();
    let sled_config = PathBuf::from(setup.path("cs.toml"));
    let (ok, out) = user_add(
        "alice",
        ALICE_PW,
        &["--config", sled_config.to_str().unwrap()],
    );
    assert!(ok, "{out}");
    let root = setup.dir.path().to_owned();
    let docs_dir = root.join("docs");
    std::fs::create_dir_all(&docs_dir).unwrap();
    let state = root.join("kept.checkpoint");
    let base = setup.cs_url.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let _rs = setup.start_rs().await;
        let mut cs = setup.start_cs().await;
        let key = log_key(&base).await;
        let mut docs = Vec::new();
        for _ in 0..3 {
            docs = decide_one(&setup, &base, &docs_dir).await;
        }
        assert_eq!(docs.len(), 3);
        wait_for_size(&base, 3).await;
        let kept = audit(&base, &key, &state, &docs).unwrap();
        assert_eq!(kept["tree_size"], 3, "{kept}");
        let before = checkpoint(&base).await;

        // sled -> PostgreSQL, on a new data directory.
        let pg_config = config_over(&setup, "pg.toml", "cs-pg", Some(&db));
        move_host(&mut cs, &sled_config, &pg_config, &root.join("cs-pg"));
        let log = root.join("cs-pg.log");
        let mut cs = start_server(
            "CS on PostgreSQL",
            &["serve", "--config", pg_config.to_str().unwrap()],
            &log,
            &base,
        )
        .await;
        assert_eq!(log_key(&base).await, key, "the same key");
        assert_eq!(checkpoint(&base).await, before, "the same signed tree");
        let summary = audit(&base, &key, &state, &docs)
            .map_err(|e| format!("{e}\n{}", cs.log()))
            .unwrap();
        assert_eq!(summary["tree_size"], 3, "{summary}");
        docs = decide_one(&setup, &base, &docs_dir).await;
        wait_for_size(&base, 4).await;
        let summary = audit(&base, &key, &state, &docs)
            .map_err(|e| format!("{e}\n{}", cs.log()))
            .unwrap();
        assert_eq!(summary["tree_size"], 4, "the checkpoint grew: {summary}");
        assert_eq!(
            audited_indexes(&summary),
            vec![0, 1, 2, 3],
            "each decision once"
        );
        let before = checkpoint(&base).await;

        // PostgreSQL -> sled, on another new data directory.
        let back_config = config_over(&setup, "back.toml", "cs-back", None);
        move_host(&mut cs, &pg_config, &back_config, &root.join("cs-back"));
        let log = root.join("cs-back.log");
        let cs = start_server(
            "CS on sled again",
            &["serve", "--config", back_config.to_str().unwrap()],
            &log,
            &base,
        )
        .await;
        assert_eq!(log_key(&base).await, key, "the same key");
        assert_eq!(checkpoint(&base).await, before, "the same signed tree");
        docs = decide_one(&setup, &base, &docs_dir).await;
        wait_for_size(&base, 5).await;
        let summary = audit(&base, &key, &state, &docs)
            .map_err(|e| format!("{e}\n{}", cs.log()))
            .unwrap();
        assert_eq!(summary["tree_size"], 5, "the checkpoint grew: {summary}");
        assert_eq!(
            audited_indexes(&summary),
            vec![0, 1, 2, 3, 4],
            "each decision once"
        );
    });
}

/// A new data directory, 0700 as a server makes it.
fn private_dir(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// A CS's store on sled whose log holds an entry under the key file of its
/// data directory (made as the server makes it).
fn store_with_a_log(config: &Path) {
    let config = cheq::confirm::CsConfig::load(config).unwrap();
    private_dir(&config.data_dir);
    let (store, _) = cheq::confirm::server::open_store(&config).unwrap();
    let secret = cheq::keyfile::load_or_create_secret(&config.log_key_file()).unwrap();
    let key = cheq::tlog::LogKey::from_secret(&secret, &config.log_origin().0).unwrap();
    let log = cheq::confirm::transparency::TransparencyLog::open(store.log.clone(), key).unwrap();
    store.log.queue(b"an entry\n").unwrap();
    assert_eq!(log.sequence_all(1).unwrap(), 1);
}

/// Whether the store of `config` holds nothing an import writes: a second
/// import into it is not refused as "not empty" for that reason.
fn holds_nothing(config: &Path) {
    let config = cheq::confirm::CsConfig::load(config).unwrap();
    let (store, _) = cheq::confirm::server::open_store(&config).unwrap();
    cheq::store::export::ensure_empty_cs(&store).unwrap();
    assert_eq!(store.log.bound_key().unwrap(), None, "the log was bound");
}

#[test]
fn an_import_under_another_log_key_is_refused_and_writes_nothing() {
    let setup = Setup::new();
    let root = setup.dir.path().to_owned();
    let from = config_over(&setup, "from.toml", "from", None);
    store_with_a_log(&from);
    let (stream, _) = export(&from);
    let file = root.join("from.jsonl");
    std::fs::write(&file, &stream).unwrap();

    // A host whose key file is another (made by its own first start).
    let other = config_over(&setup, "other.toml", "other", None);
    private_dir(&root.join("other"));
    cheq::keyfile::load_or_create_secret(&root.join("other/transparency-log-key.secret")).unwrap();
    for (how, (code, _, err)) in [
        ("stdin", import(&other, &stream)),
        (
            "file",
            cheq_in(
                &[
                    "store",
                    "import",
                    "--config",
                    other.to_str().unwrap(),
                    "--in",
                    file.to_str().unwrap(),
                ],
                b"",
            ),
        ),
    ] {
        assert_eq!(code, 1, "{how}: {err}");
        assert!(
            err.contains("the export's transparency log is signed with the key"),
            "{how}: {err}"
        );
        assert!(
            err.contains("and this configuration signs with"),
            "{how}: {err}"
        );
        assert!(err.contains("nothing was written"), "{how}: {err}");
        assert!(
            !err.contains("the store holds the items read before"),
            "{how}: {err}"
        );
        holds_nothing(&other);
    }

    // A host with no key file yet: the import names the file and makes none.
    let bare = config_over(&setup, "bare.toml", "bare", None);
    private_dir(&root.join("bare"));
    let (code, _, err) = import(&bare, &stream);
    assert_eq!(code, 1, "{err}");
    let wanted = root.join("bare/transparency-log-key.secret");
    assert!(
        err.contains(&format!(
            "has no key file yet: copy the old host's key file to {} first",
            wanted.display()
        )),
        "{err}"
    );
    assert!(!wanted.exists(), "the import made a key");
    holds_nothing(&bare);

    // With the old host's key file copied, the same stream imports.
    std::fs::copy(root.join("from/transparency-log-key.secret"), &wanted).unwrap();
    let (code, out, err) = import(&bare, &stream);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1 log_entry, 1 log_head"), "{out}");
}

#[test]
fn a_data_directory_made_before_the_renaming_keeps_its_keys() {
    let setup = Setup::new();
    let (ok, out) = user_add("alice", ALICE_PW, &["--config", &setup.path("cs.toml")]);
    assert!(ok, "{out}");
    let data = setup.dir.path().join("cs");
    // The files under their old names, as an older cheq left them.
    let (old_log_key, old_pseudonyms) = (data.join("tlog-note.secret"), data.join("log.secret"));
    std::fs::write(
        &old_log_key,
        "an old transparency log key secret, 32 bytes+",
    )
    .unwrap();
    std::fs::write(
        &old_pseudonyms,
        "an old key of log pseudonyms, 32 bytes or more",
    )
    .unwrap();
    let config = cheq::confirm::CsConfig::load(Path::new(&setup.path("cs.toml"))).unwrap();
    let expected = cheq::tlog::LogKey::from_secret(
        &std::fs::read(&old_log_key).unwrap(),
        &config.log_origin().0,
    )
    .unwrap()
    .verifier_key();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let cs = setup.start_cs().await;
        assert_eq!(log_key(&setup.cs_url).await, expected, "{}", cs.log());
    });
    assert!(!data.join("transparency-log-key.secret").exists());
    assert!(!data.join("log-pseudonym.secret").exists());
    // The export names the files in use, and the names they take.
    let (_, files) = export(Path::new(&setup.path("cs.toml")));
    let log_key_to = (old_log_key, "data_dir/transparency-log-key.secret".into());
    assert!(files.contains(&log_key_to), "{files:?}");
    let pseudonyms_to = (old_pseudonyms, "data_dir/log-pseudonym.secret".into());
    assert!(files.contains(&pseudonyms_to), "{files:?}");

    // A new data directory gets the new names.
    let fresh = Setup::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let _cs = fresh.start_cs().await;
    });
    let data = fresh.dir.path().join("cs");
    assert!(data.join("transparency-log-key.secret").exists());
    assert!(data.join("log-pseudonym.secret").exists());
    assert!(!data.join("tlog-note.secret").exists());
    assert!(!data.join("log.secret").exists());
}

/// A new host that has started once (its own key file under the present
/// name) and the old host's key file under its old name
/// (`tlog-note.secret`): the copy the export asks for, and the one the
/// refusal asks for, each make the import pass; a copy under the old name
/// does not, and the refusal names the file to replace.
#[test]
fn a_log_key_under_its_old_name_moves_to_a_host_that_has_started() {
    let setup = Setup::new();
    let root = setup.dir.path().to_owned();
    let from = config_over(&setup, "from.toml", "from", None);
    private_dir(&root.join("from"));
    let old_key = root.join("from/tlog-note.secret");
    std::fs::write(&old_key, "an old transparency log key secret, 32 bytes+").unwrap();
    store_with_a_log(&from);
    assert!(!root.join("from/transparency-log-key.secret").exists());
    let (stream, files) = export(&from);
    assert!(
        files.contains(&(
            old_key.clone(),
            "data_dir/transparency-log-key.secret".into()
        )),
        "{files:?}"
    );

    // A host whose first start made its own key.
    let started = |name: &str| {
        let config = config_over(&setup, &format!("{name}.toml"), name, None);
        private_dir(&root.join(name));
        let own = root.join(name).join("transparency-log-key.secret");
        cheq::keyfile::load_or_create_secret(&own).unwrap();
        (config, own)
    };

    // The old file copied under its old name changes nothing: the new
    // host reads its own first. The refusal names that file.
    let (to, own) = started("to");
    std::fs::copy(&old_key, root.join("to/tlog-note.secret")).unwrap();
    let (code, _, err) = import(&to, &stream);
    assert_eq!(code, 1, "{err}");
    let own_shown = own.display().to_string();
    assert!(
        err.contains(&format!(
            "the key in {own_shown}: replace {own_shown} with the old host's key file"
        )),
        "{err}"
    );
    holds_nothing(&to);
    // Doing what it says.
    std::fs::copy(&old_key, &own).unwrap();
    let (code, out, err) = import(&to, &stream);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1 log_entry, 1 log_head"), "{out}");

    // Doing what the export said, on another started host.
    let (to, _) = started("to2");
    copy_named(&files, &root.join("to2"));
    let (code, out, err) = import(&to, &stream);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1 log_entry, 1 log_head"), "{out}");
}
