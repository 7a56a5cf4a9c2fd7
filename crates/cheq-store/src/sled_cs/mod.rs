//! The confirmation server's state ([`crate::cs`]) on the embedded `sled`
//! database: one tree per kind of record, JSON values.
//!
//! | tree | key | value |
//! |---|---|---|
//! | `cs.confirmations` | confirmation id | [`ConfirmationEntry`] |
//! | `cs.decisions` | [`RecordKey::id`] | [`DecisionRecord`], its document replaced by a reference |
//! | `cs.documents` | record id, NUL, SHA-256 of the document | the document, packed ([`crate::packed`]; text in values written before) |
//! | `cs.by_resource` | resource URI | record id |
//! | `cs.by_user` | user, NUL, inverted time, record id | record id |
//! | `cs.pending` | record id | empty |
//! | `cs.collected` | record id of old history collected | its decision time (8 bytes, big-endian) |
//! | `cs.users` | user name | [`Account`] |
//! | `cs.sessions` | SHA-256 of the cookie | [`Session`] |
//! | `cs.limits` | limiter key | [`LimitState`] |
//! | `cs.registrations`, `cs.registration_tokens`, `cs.meta` | registered RSes (§16.3) | see [`registrations`] |
//! | `log.*` | the transparency log's queue, entries, hashes and head | see [`log`] |
//!
//! No sled transaction (see `sled_store` for why): a decision's indexes are
//! written first and the record is then swapped in only if absent, which is
//! the atomic claim; a crash or a lost race leaves at worst an index entry
//! pointing at no record (or at the winner's), which every reader skips.
//! Accounts are the exception: their writers take one lock of the process
//! (`ACCOUNT_WRITES`), because a new account's checks read every other.
//!
//! A decision's document (about 2.3 KB, most of the record) is written once,
//! in `cs.documents` under a key that names its content, before the record
//! that refers to it; the record, rewritten when its delivery is leased and
//! when it ends, is then small (writing it with every change of the record would leave sled's log
//! full of dead copies until their segment is cleaned). A lost race or a crash between the two writes leaves at worst a
//! document that no record names. When the document changes (a sealed one
//! redacted once its delivery is final, §8), the new one is written, then
//! the record, then the old document is removed. A record written before
//! this layout holds its document inline and is read as it is.
//!
//! Old history (`history_days`) is found through `cs.by_user`, whose keys
//! carry the decision time. The record's id goes into `cs.collected` first
//! (a claim of it is refused from then on, §6), then the URI's entry, the
//! record (compare-and-swap), its document, and the entry by user last, so
//! that a collection stopped half way is finished by the next one; a reader
//! that finds the record and then not its document reads the record again.

mod log;
mod people;
mod records;
mod registrations;

use crate::cs::*;
use crate::sled_json::{decode, encode, key_text, open_db, page_after, tree, Durable};
use crate::sled_store::backend_error;
use crate::StoreError;
use people::{SledAccounts, SledLimits, SledSessions};
use records::SledRecords;
use std::path::Path;
use std::sync::Arc;

/// Opens every CS store in `db`.
pub fn open(db: &sled::Db) -> Result<CsStore, StoreError> {
    let durable = Durable::new(db.clone());
    let log = Arc::new(log::SledLog::open(db, durable.clone())?);
    Ok(CsStore {
        log: log.clone(),
        flusher: Some(durable.async_flush()),
        entries: Arc::new(SledEntries {
            tree: tree(db, "cs.confirmations")?,
        }),
        registrations: Arc::new(registrations::SledRegistrations {
            records: tree(db, "cs.registrations")?,
            tokens: tree(db, "cs.registration_tokens")?,
            meta: tree(db, "cs.meta")?,
            db: durable.clone(),
        }),
        records: Arc::new(SledRecords::open(db, durable, log)?),
        accounts: Arc::new(SledAccounts {
            users: tree(db, "cs.users")?,
        }),
        sessions: Arc::new(SledSessions {
            tree: tree(db, "cs.sessions")?,
        }),
        limits: Arc::new(SledLimits {
            tree: tree(db, "cs.limits")?,
        }),
        readiness: Arc::new(super::AlwaysReady),
    })
}

/// Opens a sled database at `dir` (its files 0600) and every CS store in it.
pub fn open_dir(dir: &Path) -> Result<(sled::Db, CsStore), StoreError> {
    let db = open_db(dir)?;
    let store = open(&db)?;
    Ok((db, store))
}

/// A CS store in a fresh temporary directory: for tests only (this crate's,
/// and other crates' with the feature `test-support`).
#[cfg(any(test, feature = "test-support"))]
pub fn temp() -> (tempfile::TempDir, CsStore) {
    #[allow(clippy::expect_used)]
    let dir = tempfile::tempdir().expect("a temporary directory");
    #[allow(clippy::expect_used)]
    let (_db, store) = open_dir(dir.path()).expect("a sled store");
    (dir, store)
}

// ---- entries ----

struct SledEntries {
    tree: sled::Tree,
}

impl ConfirmationEntries for SledEntries {
    fn start(&self, id: &str, entry: &ConfirmationEntry) -> Result<(), StoreError> {
        let bytes = encode(entry)?;
        self.tree
            .compare_and_swap(id.as_bytes(), None as Option<&[u8]>, Some(bytes))
            .map_err(|e| backend_error("start", e))?
            .ok();
        Ok(())
    }

    fn get(&self, id: &str) -> Result<Option<ConfirmationEntry>, StoreError> {
        self.tree
            .get(id.as_bytes())
            .map_err(|e| backend_error("get", e))?
            .map(|b| decode(id.as_bytes(), &b))
            .transpose()
    }

    fn put(&self, id: &str, entry: &ConfirmationEntry) -> Result<(), StoreError> {
        self.tree
            .insert(id.as_bytes(), encode(entry)?)
            .map_err(|e| backend_error("put", e))?;
        Ok(())
    }

    fn collect_older_than(&self, cutoff: i64) -> Result<usize, StoreError> {
        let mut n = 0;
        for item in self.tree.iter() {
            let (k, v) = item.map_err(|e| backend_error("iter", e))?;
            let old = serde_json::from_slice::<ConfirmationEntry>(&v)
                .map_or(true, |e| e.created < cutoff);
            if old {
                self.tree
                    .remove(k)
                    .map_err(|e| backend_error("remove", e))?;
                n += 1;
            }
        }
        Ok(n)
    }

    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, ConfirmationEntry)>, StoreError> {
        page_after(&self.tree, after, limit, "list entries")?
            .into_iter()
            .map(|(k, v)| Ok((key_text(&k)?, decode(&k, &v)?)))
            .collect()
    }
}
