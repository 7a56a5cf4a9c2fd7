use super::*;
use crate::tlog::tiles::bundle;
use crate::tlog::tree::{append, edge, Hashes};
use crate::tlog::LogKey;

const ORIGIN: &str = "cs.example/cheq-log";
const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

/// A log served from memory, as the CS serves one: tiles computed from the
/// stored hashes, bundles from the entries, a signed checkpoint.
struct Log {
    entries: Vec<Vec<u8>>,
    hashes: Hashes,
    checkpoint: Vec<u8>,
    bent: HashMap<String, Vec<u8>>,
}

impl Log {
    fn of(entries: Vec<Vec<u8>>, secret: &[u8]) -> Log {
        let mut hashes = Hashes::default();
        let mut size = 0;
        let mut root = EMPTY_ROOT;
        // In uneven batches, as a sequencer appends.
        for chunk in entries.chunks(37) {
            let known = Hashes(edge(size).into_iter().map(|i| (i, hashes.0[&i])).collect());
            let a = append(size, known, chunk).unwrap();
            hashes.0.extend(a.hashes);
            size = a.size;
            root = a.root;
        }
        let key = LogKey::from_secret(secret, ORIGIN).unwrap();
        Log {
            checkpoint: key.sign(size, &root).unwrap().note,
            entries,
            hashes,
            bent: HashMap::new(),
        }
    }
}

impl TileSource for Log {
    fn fetch(&self, path: &str) -> Result<Vec<u8>, String> {
        if let Some(b) = self.bent.get(path) {
            return Ok(b.clone());
        }
        if path == "checkpoint" {
            return Ok(self.checkpoint.clone());
        }
        let t = TilePath::parse(path).map_err(|e| e.to_string())?;
        if !t.within(self.entries.len() as u64) {
            return Err("404".into());
        }
        Ok(match t.level {
            Some(_) => t
                .positions()
                .iter()
                .flat_map(|i| self.hashes.0[i].0)
                .collect(),
            None => bundle(
                &t.positions()
                    .iter()
                    .map(|&i| self.entries[i as usize].clone())
                    .collect::<Vec<_>>(),
            )
            .map_err(|e| e.to_string())?,
        })
    }
}

fn docs(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{{\"document\":{i}}}").into_bytes())
        .collect()
}

fn entries(docs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    docs.iter().map(|d| Entry::decision(d).to_bytes()).collect()
}

fn verifier() -> LogVerifier {
    LogVerifier::new(&LogKey::from_secret(SECRET, ORIGIN).unwrap().verifier_key()).unwrap()
}

#[test]
fn a_growing_log_passes_and_each_document_is_found_at_its_index() {
    let d = docs(700);
    let first = Log::of(entries(&d[..300]), SECRET);
    let r = audit(&first, &verifier(), None, &[Wanted::document("d5", &d[5])]).unwrap();
    assert_eq!(r.included, vec![("d5".to_owned(), 5)]);
    assert_eq!(r.extends, None);
    let kept = r.checkpoint.note;
    let later = Log::of(entries(&d), SECRET);
    let wanted = [
        Wanted::document("d699", &d[699]),
        Wanted::document("d256", &d[256]),
    ];
    let r = audit(&later, &verifier(), Some(&kept), &wanted).unwrap();
    assert_eq!(r.extends, Some(300));
    assert_eq!(r.checkpoint.size, 700);
    assert_eq!(
        r.included,
        vec![("d699".to_owned(), 699), ("d256".to_owned(), 256)]
    );
    // The same checkpoint again is consistent with itself.
    let r = audit(&later, &verifier(), Some(&r.checkpoint.note), &[]).unwrap();
    assert_eq!(r.extends, Some(700));
}

#[test]
fn a_rewritten_log_is_caught_with_the_kept_checkpoint() {
    let d = docs(520);
    let kept = Log::of(entries(&d[..300]), SECRET).checkpoint;

    // Truncated.
    let short = Log::of(entries(&d[..299]), SECRET);
    assert!(matches!(
        audit(&short, &verifier(), Some(&kept), &[]),
        Err(AuditError::Truncated {
            kept: 300,
            now: 299
        })
    ));
    // One entry removed, the rest appended again: a larger tree that does
    // not extend the kept one.
    let mut removed = entries(&d);
    removed.remove(17);
    let removed = Log::of(removed, SECRET);
    assert!(matches!(
        audit(&removed, &verifier(), Some(&kept), &[]),
        Err(AuditError::Inconsistent {
            kept: 300,
            now: 519,
            ..
        })
    ));
    // A fresh log under the same key.
    let fresh = Log::of(entries(&docs(1)), SECRET);
    assert!(matches!(
        audit(&fresh, &verifier(), Some(&kept), &[]),
        Err(AuditError::Truncated { .. })
    ));
    let mut other = entries(&d);
    other[0] = b"cheq-decision/v1 47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU\n".to_vec();
    let fresh = Log::of(other.clone(), SECRET);
    assert!(matches!(
        audit(&fresh, &verifier(), Some(&kept), &[]),
        Err(AuditError::Inconsistent { .. })
    ));
    // The same size, another tree.
    let forked = Log::of(other[..300].to_vec(), SECRET);
    assert!(matches!(
        audit(&forked, &verifier(), Some(&kept), &[]),
        Err(AuditError::Forked { size: 300 })
    ));
    // A kept checkpoint of another key is refused, not trusted.
    let foreign = Log::of(entries(&d[..10]), b"some other secret of 32 bytes or more");
    let honest = Log::of(entries(&d), SECRET);
    assert!(matches!(
        audit(&honest, &verifier(), Some(&foreign.checkpoint), &[]),
        Err(AuditError::Kept(_))
    ));
}

#[test]
fn tiles_bundles_and_documents_that_do_not_match_are_named() {
    let d = docs(300);
    let mut log = Log::of(entries(&d), SECRET);
    assert!(matches!(
        audit(&log, &verifier(), None, &[Wanted::document("nope", b"{}")]),
        Err(AuditError::NotIncluded { ref name, size: 300 }) if name == "nope"
    ));

    // A bundle whose entry is not the one the tree holds.
    let mut bent = entries(&d[..256]);
    bent[3] = Entry::decision(b"swapped").to_bytes();
    log.bent
        .insert("tile/entries/000".into(), bundle(&bent).unwrap());
    assert!(matches!(
        audit(
            &log,
            &verifier(),
            None,
            &[Wanted::document("d299", &d[299])]
        ),
        Err(AuditError::Entries { .. })
    ));
    log.bent.clear();

    // A tile that does not hash to the checkpoint.
    let kept = Log::of(entries(&d[..200]), SECRET).checkpoint;
    log.bent.insert("tile/0/001.p/44".into(), vec![9; 44 * 32]);
    assert!(matches!(
        audit(&log, &verifier(), Some(&kept), &[]),
        Err(AuditError::Tiles(_))
    ));
    // A tile that cannot be fetched.
    log.bent.clear();
    let mut missing = Log::of(entries(&d), SECRET);
    missing.entries.truncate(100);
    assert!(matches!(
        audit(&missing, &verifier(), Some(&kept), &[]),
        Err(AuditError::Fetch { .. })
    ));
    // A checkpoint of another key.
    let foreign = Log::of(entries(&d), b"some other secret of 32 bytes or more");
    assert!(matches!(
        audit(&foreign, &verifier(), None, &[]),
        Err(AuditError::Checkpoint(CheckpointError::BadSignature(_)))
    ));
}
