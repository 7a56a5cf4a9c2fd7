use super::*;
use cheq_core::tlog::audit::{audit, TileSource, Wanted};
use cheq_core::tlog::LogVerifier;

const ORIGIN: &str = "cs.example/cheq-log";

fn key(secret: &[u8]) -> LogKey {
    LogKey::from_secret(secret, ORIGIN).unwrap()
}

fn sled_log() -> (tempfile::TempDir, Arc<dyn LogStore>) {
    let dir = tempfile::tempdir().unwrap();
    let (_db, store) = cheq_store::sled_cs::open_dir(dir.path()).unwrap();
    (dir, store.log)
}

/// The log as a tlog-tiles client reads it.
struct Served<'a>(&'a TransparencyLog);

impl TileSource for Served<'_> {
    fn fetch(&self, path: &str) -> Result<Vec<u8>, String> {
        if path == "checkpoint" {
            return Ok(self.0.checkpoint().unwrap().unwrap().checkpoint);
        }
        let t = TilePath::parse(path).map_err(|e| e.to_string())?;
        self.0
            .tile(&t)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "404".to_owned())
    }
}

#[test]
fn queued_entries_are_sequenced_served_and_proven() {
    let (_dir, store) = sled_log();
    let log =
        TransparencyLog::open(store.clone(), key(b"0123456789abcdef0123456789abcdef")).unwrap();
    let verifier = LogVerifier::new(&log.verifier_key()).unwrap();
    let empty = verifier
        .verify(&log.checkpoint().unwrap().unwrap().checkpoint)
        .unwrap();
    assert_eq!(empty.size, 0);

    let docs: Vec<Vec<u8>> = (0..300).map(|i| format!("doc {i}").into_bytes()).collect();
    for d in &docs[..5] {
        store.queue(&Entry::decision(d).to_bytes()).unwrap();
    }
    let digest = cheq_core::sign::b64::sha256(&docs[2]);
    assert!(
        log.inclusion(&digest).unwrap().is_none(),
        "queued, not yet in the tree"
    );
    assert_eq!(log.sequence().unwrap(), 5);
    assert_eq!(log.sequence().unwrap(), 0, "nothing left");
    let first = log.checkpoint().unwrap().unwrap().checkpoint;
    for d in &docs[5..] {
        store.queue(&Entry::decision(d).to_bytes()).unwrap();
    }
    let jwk: Map<String, Value> = serde_json::from_str(
        r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#,
    )
    .unwrap();
    log.credential("alice", &jwk, CredentialChange::Added)
        .unwrap();
    assert_eq!(log.sequence_all(10).unwrap(), 296);

    let inc = log.inclusion(&digest).unwrap().unwrap();
    assert_eq!((inc.index, inc.tree_size), (2, 301));
    assert!(inc.entry.starts_with("cheq-decision/v1 "));
    let report = audit(
        &Served(&log),
        &verifier,
        Some(&first),
        &[Wanted::document("doc 299", &docs[299])],
    )
    .unwrap();
    assert_eq!(report.extends, Some(5));
    assert_eq!(report.included, vec![("doc 299".to_owned(), 299)]);
    // The full tile and the partial one past it; none beyond.
    assert_eq!(
        log.tile(&TilePath::hashes(0, 0, 256))
            .unwrap()
            .unwrap()
            .len(),
        256 * 32
    );
    assert_eq!(
        log.tile(&TilePath::entries(1, 45))
            .unwrap()
            .map(|b| b.is_empty()),
        Some(false)
    );
    assert!(log.tile(&TilePath::entries(1, 46)).unwrap().is_none());
    assert!(log.tile(&TilePath::hashes(0, 1, 256)).unwrap().is_none());
}

#[test]
fn a_log_begun_with_one_key_refuses_another() {
    let (_dir, store) = sled_log();
    TransparencyLog::open(store.clone(), key(b"0123456789abcdef0123456789abcdef")).unwrap();
    let again = TransparencyLog::open(store.clone(), key(b"0123456789abcdef0123456789abcdef"));
    assert!(again.is_ok());
    let other = TransparencyLog::open(store, key(b"another secret of 32 bytes or more"));
    assert!(matches!(other, Err(LogError::OtherKey { .. })), "{other:?}");
}

#[test]
fn sequencers_racing_on_one_store_make_one_log() {
    let (_dir, store) = sled_log();
    let secret = b"0123456789abcdef0123456789abcdef";
    let logs: Vec<Arc<TransparencyLog>> = (0..3)
        .map(|_| Arc::new(TransparencyLog::open(store.clone(), key(secret)).unwrap()))
        .collect();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    store
                        .queue(&Entry::decision(format!("{w}/{i}").as_bytes()).to_bytes())
                        .unwrap();
                }
            })
        })
        .collect();
    let sequencers: Vec<_> = logs
        .iter()
        .map(|l| {
            let l = l.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    l.sequence().unwrap();
                }
            })
        })
        .collect();
    for t in writers.into_iter().chain(sequencers) {
        t.join().unwrap();
    }
    logs[0].sequence_all(100).unwrap();
    let head = logs[0].checkpoint().unwrap().unwrap();
    assert_eq!(head.size, 800);
    let entries = store.entries(0, 800).unwrap();
    let mut unique = entries.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 800, "each entry once");
    let verifier = LogVerifier::new(&logs[1].verifier_key()).unwrap();
    let wanted: Vec<Wanted> = (0..4)
        .map(|w| Wanted::document(&format!("{w}/199"), format!("{w}/199").as_bytes()))
        .collect();
    audit(&Served(&logs[2]), &verifier, None, &wanted).unwrap();
}
