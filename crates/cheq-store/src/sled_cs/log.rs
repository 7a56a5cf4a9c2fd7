//! The transparency log ([`crate::tlog`]) on sled: one process sequences.
//!
//! | tree | key | value |
//! |---|---|---|
//! | `log.queue` | queue id (8 bytes, big-endian, sled's counter) | the entry |
//! | `log.entries` | index (8 bytes, big-endian) | the entry |
//! | `log.hashes` | stored-hash index (8 bytes, big-endian) | 32 bytes |
//! | `log.index` | leaf hash | index (8 bytes, big-endian) |
//! | `log.head` | `head`, `key` | the head (JSON), the bound verifier key |
//!
//! A step writes its entries, hashes and index first (a crash leaves them
//! past the head, where nothing reads them and the next step writes over
//! them), then the head and the queue's removals in one transaction, then
//! flushes; only then is the head answered (`published`), so that a
//! checkpoint once served survives a crash.
//!
//! `log.index` keeps the index an entry was first given: a mapping is
//! replaced only when it is not an entry's of the durable tree (left past
//! the head by a step a crash cut short, or naming an index a later step
//! gave another entry).

use crate::sled_json::{corrupt, tree, Durable};
use crate::sled_store::backend_error;
use crate::tlog::{hash32, Integration, LogHead, LogStore, Restored};
use crate::StoreError;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use std::sync::RwLock;

pub(crate) struct SledLog {
    db: Durable,
    counter: sled::Db,
    pub(crate) queue: sled::Tree,
    entries: sled::Tree,
    hashes: sled::Tree,
    index: sled::Tree,
    head: sled::Tree,
    published: RwLock<Option<LogHead>>,
    /// One step at a time: a step writes its entries, leaves and hashes
    /// before the transaction that moves the head, so two steps from the
    /// same size must not interleave (a losing step would overwrite the
    /// winner's entries). One process holds a sled database, so a lock in
    /// it serialises every sequencer.
    integrating: std::sync::Mutex<()>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StoredHead {
    size: u64,
    root: String,
    checkpoint: String,
}

fn be(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

fn read_be(key: &[u8]) -> Result<u64, StoreError> {
    let b: [u8; 8] = key
        .try_into()
        .map_err(|_| corrupt(key, "a log key is not 8 bytes"))?;
    Ok(u64::from_be_bytes(b))
}

/// The head as `log.head` holds it.
fn stored(head: &LogHead) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(&StoredHead {
        size: head.size,
        root: cheq_core::sign::b64::encode(head.root),
        checkpoint: String::from_utf8_lossy(&head.checkpoint).into_owned(),
    })
    .map_err(|e| StoreError::Backend {
        op: "log head",
        message: e.to_string(),
    })
}

fn err(op: &'static str) -> impl Fn(sled::Error) -> StoreError {
    move |e| backend_error(op, e)
}

impl SledLog {
    pub(crate) fn open(db: &sled::Db, durable: Durable) -> Result<SledLog, StoreError> {
        let log = SledLog {
            db: durable,
            counter: db.clone(),
            queue: tree(db, "log.queue")?,
            entries: tree(db, "log.entries")?,
            hashes: tree(db, "log.hashes")?,
            index: tree(db, "log.index")?,
            head: tree(db, "log.head")?,
            published: RwLock::new(None),
            integrating: std::sync::Mutex::new(()),
        };
        // What is on disk at open is durable.
        let head = log.stored_head()?;
        if let Ok(mut p) = log.published.write() {
            *p = head;
        }
        Ok(log)
    }

    fn stored_head(&self) -> Result<Option<LogHead>, StoreError> {
        let Some(bytes) = self.head.get(b"head").map_err(err("log head"))? else {
            return Ok(None);
        };
        let s: StoredHead = serde_json::from_slice(&bytes).map_err(|e| corrupt(b"log.head", e))?;
        let root = cheq_core::sign::b64::decode(&s.root)
            .ok_or_else(|| corrupt(b"log.head", "the root is not base64url"))?;
        Ok(Some(LogHead {
            size: s.size,
            root: hash32("log.head", &root)?,
            checkpoint: s.checkpoint.into_bytes(),
        }))
    }

    /// Writes entries at `from..` with their index mappings and stored
    /// hashes, past the durable head `from` (nothing reads them before the
    /// head moves). An entry keeps the index it was first given.
    fn write_entries(
        &self,
        op: &'static str,
        from: u64,
        entries: &[Vec<u8>],
        leaves: &[[u8; 32]],
        hashes: &[(u64, [u8; 32])],
    ) -> Result<(), StoreError> {
        let mut mapped_here = std::collections::HashSet::new();
        for ((i, entry), leaf) in (from..).zip(entries).zip(leaves) {
            self.entries
                .insert(be(i), entry.as_slice())
                .map_err(err(op))?;
            if mapped_here.contains(leaf) || self.first_index(leaf, from)?.is_some() {
                continue;
            }
            self.index.insert(leaf, &be(i)).map_err(err(op))?;
            mapped_here.insert(*leaf);
        }
        for (i, h) in hashes {
            self.hashes.insert(be(*i), &h[..]).map_err(err(op))?;
        }
        Ok(())
    }

    /// The index `leaf` maps to, if it is the index of that entry in the
    /// tree of the first `size` entries.
    fn first_index(&self, leaf: &[u8; 32], size: u64) -> Result<Option<u64>, StoreError> {
        let Some(v) = self.index.get(leaf).map_err(err("log index"))? else {
            return Ok(None);
        };
        let i = read_be(&v)?;
        // A mapping left by a step a crash cut short may name an index past
        // the head, or one a later step gave another entry.
        if i >= size {
            return Ok(None);
        }
        let entry = self.entries(i, 1)?;
        Ok((cheq_core::tlog::tree::leaf_hash(&entry[0]).0 == *leaf).then_some(i))
    }

    /// A queue key: sled's counter, so that the queue is read oldest first.
    pub(crate) fn queue_key(&self) -> Result<[u8; 8], StoreError> {
        Ok(be(self.counter.generate_id().map_err(err("log queue"))?))
    }
}

impl LogStore for SledLog {
    fn queue(&self, entry: &[u8]) -> Result<(), StoreError> {
        self.queue
            .insert(self.queue_key()?, entry)
            .map_err(err("log queue"))?;
        self.db.flush()
    }

    fn queued_after(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let from = match after {
            Some(id) => match id.checked_add(1) {
                Some(next) => be(next),
                None => return Ok(Vec::new()),
            },
            None => be(0),
        };
        self.queue
            .range(from..)
            .take(limit)
            .map(|item| {
                let (k, v) = item.map_err(err("log queued"))?;
                Ok((read_be(&k)?, v.to_vec()))
            })
            .collect()
    }

    fn head(&self) -> Result<Option<LogHead>, StoreError> {
        self.published
            .read()
            .map(|h| h.clone())
            .map_err(|_| StoreError::Backend {
                op: "log head",
                message: "a lock was poisoned".into(),
            })
    }

    fn hashes(&self, indexes: &[u64]) -> Result<Vec<[u8; 32]>, StoreError> {
        indexes
            .iter()
            .map(|i| {
                let v = self
                    .hashes
                    .get(be(*i))
                    .map_err(err("log hashes"))?
                    .ok_or_else(|| corrupt(&be(*i), "a stored hash of the log is missing"))?;
                hash32("log.hashes", &v)
            })
            .collect()
    }

    fn entries(&self, start: u64, count: u64) -> Result<Vec<Vec<u8>>, StoreError> {
        let end = start.saturating_add(count);
        let got: Vec<Vec<u8>> = self
            .entries
            .range(be(start)..be(end))
            .map(|item| item.map(|(_, v)| v.to_vec()).map_err(err("log entries")))
            .collect::<Result<_, _>>()?;
        if got.len() as u64 != count {
            return Err(corrupt(&be(start), "an entry of the log is missing"));
        }
        Ok(got)
    }

    fn integrate(&self, step: &Integration) -> Result<bool, StoreError> {
        let _one = match self.integrating.lock() {
            Ok(g) => g,
            Err(e) => e.into_inner(),
        };
        let current = self.stored_head()?.map_or(0, |h| h.size);
        if current != step.from {
            return Ok(false);
        }
        self.write_entries(
            "log integrate",
            step.from,
            &step.entries,
            &step.leaves,
            &step.hashes,
        )?;
        let head = stored(&step.head)?;
        let from = step.from;
        let moved = (&self.head, &self.queue)
            .transaction(|(h, q)| {
                let now = match h.get(b"head")? {
                    Some(b) => serde_json::from_slice::<StoredHead>(&b)
                        .map(|s| s.size)
                        .map_err(|_| ConflictableTransactionError::Abort(()))?,
                    None => 0,
                };
                if now != from {
                    return Ok(false);
                }
                h.insert(&b"head"[..], head.as_slice())?;
                for id in &step.taken {
                    q.remove(&be(*id))?;
                }
                Ok(true)
            })
            .map_err(|e| match e {
                TransactionError::Abort(()) => corrupt(b"log.head", "the head is unreadable"),
                TransactionError::Storage(e) => backend_error("log integrate", e),
            })?;
        if !moved {
            return Ok(false);
        }
        self.db.flush()?;
        if let Ok(mut p) = self.published.write() {
            *p = Some(step.head.clone());
        }
        Ok(true)
    }

    fn index_of(&self, leaf: &[u8; 32]) -> Result<Option<u64>, StoreError> {
        let size = self.head()?.map_or(0, |h| h.size);
        self.first_index(leaf, size)
    }

    fn bind_key(&self, vkey: &str) -> Result<String, StoreError> {
        match self
            .head
            .compare_and_swap(b"key", None as Option<&[u8]>, Some(vkey.as_bytes()))
            .map_err(err("log key"))?
        {
            Ok(()) => {
                self.db.flush()?;
                Ok(vkey.to_owned())
            }
            Err(e) => Ok(e
                .current
                .map(|c| String::from_utf8_lossy(&c).into_owned())
                .unwrap_or_default()),
        }
    }

    fn bound_key(&self) -> Result<Option<String>, StoreError> {
        Ok(self
            .head
            .get(b"key")
            .map_err(err("log key"))?
            .map(|k| String::from_utf8_lossy(&k).into_owned()))
    }

    fn restore(&self, part: &Restored) -> Result<(), StoreError> {
        self.write_entries(
            "log restore",
            part.from,
            &part.entries,
            &part.leaves,
            &part.hashes,
        )?;
        for entry in &part.queued {
            self.queue
                .insert(self.queue_key()?, entry.as_slice())
                .map_err(err("log restore"))?;
        }
        Ok(())
    }

    fn restore_head(&self, head: &LogHead) -> Result<(), StoreError> {
        self.head
            .insert(&b"head"[..], stored(head)?)
            .map_err(err("log restore"))?;
        self.db.flush()?;
        if let Ok(mut p) = self.published.write() {
            *p = Some(head.clone());
        }
        Ok(())
    }

    fn clear_queue(&self) -> Result<(), StoreError> {
        self.queue.clear().map_err(err("log queue"))
    }
}
