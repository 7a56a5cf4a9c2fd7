//! The A2A bridge's task store (`store::a2a`, PROTOCOL.md §13): the
//! contract of its trait, written against the trait object so that sled
//! (on real files) and PostgreSQL (a fresh database on the test server)
//! run the same checks; then what only a real database shows: a reopened
//! store keeps every record, each write is durable before it returns (a
//! killed process loses nothing written), and sled's files are the owner's
//! alone.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use cheq::store::a2a::{TaskRecord, TaskStore};
use std::sync::Arc;
mod pg_raw;

fn record(id: &str, finished_at: Option<i64>) -> TaskRecord {
    TaskRecord {
        id: id.to_owned(),
        owner: "owner-digest".to_owned(),
        tool: "book_flight".to_owned(),
        created_at: 100,
        finished_at,
        result_uri: finished_at
            .is_none()
            .then(|| format!("http://127.0.0.1:8/cheq/results/r-{id}")),
        task: format!(r#"{{"id":"{id}","status":{{"state":"TASK_STATE_AUTH_REQUIRED"}}}}"#),
    }
}

// ---- the contract, for any backend ----

fn put_get_and_replace(store: &dyn TaskStore) {
    let r = record("a", None);
    store.put(&r).unwrap();
    assert_eq!(store.get("a").unwrap(), Some(r.clone()));
    assert_eq!(store.get("nobody").unwrap(), None);
    // A later state replaces the record whole: the result URI goes with it.
    let mut done = record("a", Some(200));
    done.task = r#"{"id":"a","status":{"state":"TASK_STATE_COMPLETED"}}"#.into();
    store.put(&done).unwrap();
    let now = store.get("a").unwrap().unwrap();
    assert_eq!(now, done);
    assert_eq!(now.result_uri, None);
    // Text is kept byte for byte, whatever it holds.
    let mut odd = record("b", None);
    odd.task = "{\"id\":\"b\",\"x\":\"ünïcödé \\\" \\n ✓\"}".into();
    odd.owner = String::new();
    store.put(&odd).unwrap();
    assert_eq!(store.get("b").unwrap(), Some(odd));
}

fn remove(store: &dyn TaskStore) {
    store.put(&record("gone", None)).unwrap();
    assert!(store.remove("gone").unwrap());
    assert_eq!(store.get("gone").unwrap(), None);
    assert!(!store.remove("gone").unwrap());
    assert!(!store.remove("never").unwrap());
}

fn collect_finished_only(store: &dyn TaskStore) {
    store.put(&record("c-old", Some(1_000))).unwrap();
    store.put(&record("c-edge", Some(2_000))).unwrap();
    store.put(&record("c-new", Some(3_000))).unwrap();
    store.put(&record("c-waits", None)).unwrap();
    // Strictly before the cutoff; a task under way never goes, however old.
    assert_eq!(store.collect_finished(2_000).unwrap(), 1);
    assert_eq!(store.get("c-old").unwrap(), None);
    assert!(store.get("c-edge").unwrap().is_some());
    assert!(store.get("c-new").unwrap().is_some());
    assert_eq!(store.collect_finished(i64::MAX).unwrap(), 2);
    assert!(store.get("c-waits").unwrap().is_some());
    assert_eq!(store.collect_finished(i64::MAX).unwrap(), 0);
}

fn list_every_record_a_page_at_a_time(store: &dyn TaskStore) {
    let mut ids: Vec<String> = (0..25).map(|i| format!("l{i:02}")).collect();
    for id in &ids {
        store.put(&record(id, None)).unwrap();
    }
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.list_after(after.as_deref(), 7).unwrap();
        assert!(page.len() <= 7);
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        seen.extend(page.into_iter().map(|r| r.id));
    }
    let listed: Vec<String> = seen.into_iter().filter(|id| id.starts_with('l')).collect();
    ids.sort();
    assert_eq!(listed, ids);
    // Every listed record is whole.
    let first = store.list_after(Some("l04"), 1).unwrap();
    assert_eq!(first, vec![record("l05", None)]);
    assert!(store.list_after(Some("zzzz"), 10).unwrap().is_empty());
}

fn contract(store: &dyn TaskStore) {
    // First: its counts are of an empty store's records.
    collect_finished_only(store);
    put_get_and_replace(store);
    remove(store);
    list_every_record_a_page_at_a_time(store);
}

// ---- sled ----

#[test]
fn sled_meets_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, store) = cheq::store::sled_a2a::open_dir(&dir.path().join("a2a.sled")).unwrap();
    contract(&*store);
}

#[test]
fn sled_keeps_everything_across_a_reopen_and_locks_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a2a.sled");
    {
        let (_db, store) = cheq::store::sled_a2a::open_dir(&path).unwrap();
        store.put(&record("kept", None)).unwrap();
        store.put(&record("done", Some(5))).unwrap();
        // A second bridge on the same directory does not start.
        assert!(cheq::store::sled_a2a::open_dir(&path).is_err());
    }
    let (_db, store) = cheq::store::sled_a2a::open_dir(&path).unwrap();
    assert_eq!(store.get("kept").unwrap(), Some(record("kept", None)));
    assert_eq!(store.get("done").unwrap(), Some(record("done", Some(5))));
}

/// Set in the child process of [`sled_a_write_is_durable_before_it_returns`]:
/// the database it writes to.
const CHILD_ENV: &str = "CHEQ_A2A_STORE_CHILD";
const TEST: &str = "sled_a_write_is_durable_before_it_returns";

#[test]
fn sled_a_write_is_durable_before_it_returns() {
    use std::io::{BufRead, Write};
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        // The child: writes, says so, and waits to be killed.
        let (_db, store) = cheq::store::sled_a2a::open_dir(std::path::Path::new(&path)).unwrap();
        for i in 0..20 {
            store.put(&record(&format!("k{i:02}"), None)).unwrap();
        }
        println!("WRITTEN");
        std::io::stdout().flush().unwrap();
        std::thread::sleep(std::time::Duration::from_secs(120));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a2a.sled");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut written = false;
    for line in out.lines() {
        if line.unwrap().contains("WRITTEN") {
            written = true;
            break;
        }
    }
    // SIGKILL: no destructor, no flush on the way out.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(written, "the child did not write");
    let (_db, store) = cheq::store::sled_a2a::open_dir(&path).unwrap();
    let all = store.list_after(None, 100).unwrap();
    assert_eq!(all.len(), 20);
    assert_eq!(all[19], record("k19", None));
}

#[test]
fn sled_files_are_the_owners_alone() {
    use std::os::unix::fs::PermissionsExt;
    // What `cheq` does first (src/cli/mod.rs): every file it makes is 0600.
    cheq::keyfile::private_umask();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a2a.sled");
    let (_db, store) = cheq::store::sled_a2a::open_dir(&path).unwrap();
    store.put(&record("t", None)).unwrap();
    let mut files = Vec::new();
    let mut stack = vec![path.clone()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::metadata(&p).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", p.display());
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else {
            files.push(p);
        }
    }
    assert!(files.len() >= 2, "{files:?}");
}

// ---- PostgreSQL ----

fn pg(prefix: &str) -> Option<Arc<dyn TaskStore>> {
    let url = cheq::store::pg::test_database_or_skip(prefix)?;
    let pg = cheq::store::pg::Pg::new(&url, 8).unwrap();
    Some(cheq::store::pg::a2a::open(&pg).unwrap())
}

#[test]
fn postgres_meets_the_contract() {
    let Some(store) = pg("store_a2a") else {
        return;
    };
    contract(&*store);
}

#[test]
fn postgres_keeps_everything_across_a_reopen_and_applies_its_schema_once() {
    let Some(url) = cheq::store::pg::test_database_or_skip("store_a2a_reopen") else {
        return;
    };
    {
        let pg = cheq::store::pg::Pg::new(&url, 8).unwrap();
        let store = cheq::store::pg::a2a::open(&pg).unwrap();
        store.put(&record("kept", None)).unwrap();
        store.put(&record("done", Some(5))).unwrap();
    }
    let pg = cheq::store::pg::Pg::new(&url, 8).unwrap();
    let store = cheq::store::pg::a2a::open(&pg).unwrap();
    assert_eq!(store.get("kept").unwrap(), Some(record("kept", None)));
    assert_eq!(store.get("done").unwrap(), Some(record("done", Some(5))));
    assert_eq!(cheq::store::pg::applied(&pg, "a2a").unwrap(), vec![1]);
    // Beside the servers' tables, in one database: each schema its own.
    let _rs = cheq::store::pg::rs::open(&pg).unwrap();
    assert_eq!(cheq::store::pg::applied(&pg, "a2a").unwrap(), vec![1]);
    assert_eq!(
        cheq::store::pg::applied(&pg, "rs").unwrap(),
        vec![1, 2, 3, 4]
    );
    assert!(store.get("kept").unwrap().is_some());
}

#[test]
fn postgres_refuses_a_record_stored_under_another_id() {
    let Some((pg, rt, client)) = pg_raw::fresh("store_a2a_corrupt") else {
        return;
    };
    let store = cheq::store::pg::a2a::open(&pg).unwrap();
    store.put(&record("x", None)).unwrap();
    // A row whose body names another task, written below the trait.
    rt.block_on(client.execute(
        "UPDATE a2a_tasks SET body = replace(body, '\"id\":\"x\"', '\"id\":\"y\"') WHERE id = 'x'",
        &[],
    ))
    .unwrap();
    let err = store.get("x").unwrap_err();
    assert!(
        matches!(err, cheq::store::StoreError::Corrupt { .. }),
        "{err}"
    );
    // Never with the result URI in what it says.
    assert!(!err.to_string().contains("/cheq/results/"), "{err}");
    assert!(store.list_after(None, 10).is_err());
}
