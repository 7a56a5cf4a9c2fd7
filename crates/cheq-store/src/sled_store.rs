//! [`NonceStore`] on the embedded `sled` database (`PROTOCOL.md` §6).
//!
//! # Layout
//!
//! Two sled trees:
//!
//! - the *nonce tree* (named by the caller, `cheq.nonces` for [`SledNonceStore::open`]):
//!   key = the nonce's UTF-8 bytes, value = the encoded [`NonceEntry`];
//! - the *expiry index* (`<nonce tree>.expiry`): key = the entry's `expires_at` as
//!   an order-preserving big-endian `i64` (sign bit flipped) followed by the nonce,
//!   value empty. [`NonceStore::collect_expired`] walks only the index range below
//!   `now`, never the whole store.
//!
//! Value format, version 1: one byte `0x01`, the 32-byte digest, `expires_at` as a
//! big-endian `i64`, the data length as a big-endian `u32`, then the data. Anything
//! else (another version byte, a wrong length, data over 4 KiB) is
//! [`StoreError::Corrupt`]; decoding never panics.
//!
//! # Atomicity
//!
//! A nonce is claimed with `compare_and_swap(nonce, None, Some(value))`, which is
//! atomic in sled: of any number of concurrent [`record`](NonceStore::record) calls
//! for one nonce exactly one succeeds and returns [`RecordOutcome::Fresh`]; the others
//! receive the winner's value from the failed swap and compare digests. The store
//! holds no lock of its own, so concurrent writers are not serialized.
//!
//! # Why no transaction for the index
//!
//! sled 0.34 coordinates transactions through a process-wide read/write lock: once
//! any transaction has run in the process, every later sled operation (of every
//! database) takes that lock, and each transaction takes it exclusively. Writing the
//! nonce and its index entry in one transaction would therefore serialize every
//! writer, and slow down every other sled user in the process. Measured on the
//! development machine (2 cores, flush after each record, 2,000 records): one
//! two-tree transaction per record gave about 4,400 records/s with 1 writer thread
//! and 4,600–5,000 with 8, below the 8,000/s goal; index insert then
//! compare-and-swap gave about 7,400 with 1 thread and 11,800–18,200 with 8.
//! Instead the two keys
//! are written and removed in an order that makes any crash or race leave at worst
//! a harmless extra index entry:
//!
//! - `record` inserts the index entry *first*, then swaps in the nonce. A crash in
//!   between leaves an index entry with no nonce; a lost race leaves one whose
//!   `expires_at` differs from the winner's (it is removed right away when it does
//!   differ; when it is equal it is the winner's own key).
//! - `collect_expired` removes the nonce *first* (by compare-and-swap against the
//!   value it read, and only when the value's `expires_at` matches the index key),
//!   then the index entry. A crash in between leaves an index entry with no nonce.
//! - `collect_expired` drops every index entry below `now` whose nonce is absent
//!   or carries another `expires_at`, so such leftovers cost one lookup each, once.
//!
//! The only imperfection this ordering allows is a *leak*, never a lost nonce: if
//! an expired nonce is recorded again (which the verifier refuses, since its CHEQ
//! has expired) at the very moment it is being collected, the new entry may lose
//! its index entry and then stay in the store for good. A leaked entry still blocks
//! replays; it only takes space.
//!
//! # Durability
//!
//! Every `record` calls sled's synchronous `flush()` before it returns, whatever the
//! outcome (a [`RecordOutcome::SameAsBefore`] may report an entry that another
//! thread has written but not yet flushed). Concurrent writers share flushes
//! (`store::group_commit`, shared by every store of one database): one flush
//! that starts after a writer's writes stands for all the writers waiting.
//! `record_with(…, Durability::Deferred)` writes the same and leaves the flush to its caller's
//! next durable write in the database: sled writes its log in order, and
//! recovery stops at the first entry missing from it, so a crash keeps a
//! prefix of the writes, and a flush covers every write before it.
//!
//! Caveat: sled 0.34's flush uses `sync_file_range` on Linux: it survives a killed
//! process, not a power loss with a disk write cache. `sync_file_range` writes the
//! file's dirty pages to the device but neither flushes the device's volatile write
//! cache nor commits file metadata, so after a power cut the most recently recorded
//! nonces may be lost unless the disk's write cache is disabled or battery-backed.
//!
//! Collection does not flush: a removal lost in a crash is simply redone by the
//! next collection.

use crate::Durability;
use std::path::Path;

use sled::CompareAndSwapError;

use super::sled_json::Durable;

use super::{
    classify, validate, validate_nonce, NonceEntry, NonceStore, RecordOutcome, StoreError,
};
use super::{MAX_DATA_LEN, MAX_NONCE_LEN};

/// The nonce tree's name in a database opened by [`SledNonceStore::open`].
const DEFAULT_TREE: &str = "cheq.nonces";
/// Suffix appended to the nonce tree's name to name the expiry index tree.
const INDEX_SUFFIX: &str = ".expiry";

/// Version byte of the value format.
const FORMAT_V1: u8 = 1;
/// Bytes before the data in a version 1 value.
const HEADER_LEN: usize = 1 + 32 + 8 + 4;
/// Bytes of the `expires_at` prefix of an index key.
const INDEX_PREFIX_LEN: usize = 8;
/// How many times `record` retries a compare-and-swap that failed without a
/// current value (sled never reports that, but a retry costs nothing).
const CAS_ATTEMPTS: usize = 8;

/// A [`NonceStore`] kept in a sled database.
///
/// Cheap to clone: clones share the same trees.
#[derive(Debug, Clone)]
pub struct SledNonceStore {
    db: Durable,
    nonces: sled::Tree,
    expiry: sled::Tree,
}

impl SledNonceStore {
    /// Opens (creating it if needed) a sled database of its own in `dir`.
    ///
    /// sled locks the directory: opening it a second time while it is open, in
    /// this process or another, fails with [`StoreError::Io`].
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let db = super::sled_json::config(dir)
            .open()
            .map_err(|e| backend_error("open", e))?;
        Self::with_db(db, DEFAULT_TREE)
    }

    /// Uses the tree `tree` (and the tree `<tree>.expiry`, for the expiry index) of
    /// a sled database shared with other users. Neither tree may be used for
    /// anything else.
    pub fn with_db(db: sled::Db, tree: &str) -> Result<Self, StoreError> {
        Self::in_db(Durable::new(db), tree)
    }

    /// As [`with_db`](Self::with_db), sharing the flushes of `db`'s other
    /// stores.
    pub(crate) fn in_db(db: Durable, tree: &str) -> Result<Self, StoreError> {
        let nonces = db
            .db()
            .open_tree(tree.as_bytes())
            .map_err(|e| backend_error("open_tree", e))?;
        let expiry = db
            .db()
            .open_tree(format!("{tree}{INDEX_SUFFIX}").as_bytes())
            .map_err(|e| backend_error("open_tree", e))?;
        Ok(Self { db, nonces, expiry })
    }
}

impl NonceStore for SledNonceStore {
    fn record_with(
        &self,
        nonce: &str,
        entry: &NonceEntry,
        durability: Durability,
    ) -> Result<RecordOutcome, StoreError> {
        let durable = durability == Durability::Now;
        let flush = |store: &Self| if durable { store.db.flush() } else { Ok(()) };
        validate(nonce, entry)?;
        let key = nonce.as_bytes();

        // A re-delivery is the common repeat: answer it without touching the index.
        if let Some(current) = self.nonces.get(key).map_err(|e| backend_error("get", e))? {
            let existing = decode(key, &current)?;
            flush(self)?;
            return Ok(classify(entry, existing));
        }

        let value = encode(entry)?;
        let index_key = index_key(entry.expires_at, key);
        // Index first: a crash before the swap leaves only a stale index entry,
        // which collection tolerates (module docs).
        self.expiry
            .insert(index_key.as_slice(), &[] as &[u8])
            .map_err(|e| backend_error("insert index", e))?;

        for _ in 0..CAS_ATTEMPTS {
            let swap = self
                .nonces
                .compare_and_swap(key, None::<&[u8]>, Some(value.as_slice()))
                .map_err(|e| backend_error("compare_and_swap", e))?;
            match swap {
                Ok(()) => {
                    flush(self)?;
                    return Ok(RecordOutcome::Fresh);
                }
                Err(CompareAndSwapError {
                    current: Some(current),
                    ..
                }) => {
                    let existing = decode(key, &current)?;
                    if existing.expires_at != entry.expires_at {
                        // Our index key is not the winner's: drop it.
                        self.expiry
                            .remove(index_key.as_slice())
                            .map_err(|e| backend_error("remove index", e))?;
                    }
                    flush(self)?;
                    return Ok(classify(entry, existing));
                }
                Err(CompareAndSwapError { current: None, .. }) => continue,
            }
        }
        Err(StoreError::Backend {
            op: "compare_and_swap",
            message: format!(
                "the swap failed {CAS_ATTEMPTS} times without reporting a current value"
            ),
        })
    }

    /// Every write to the database so far (see the module docs for the
    /// caveat).
    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()
    }

    fn get(&self, nonce: &str) -> Result<Option<NonceEntry>, StoreError> {
        validate_nonce(nonce)?;
        let key = nonce.as_bytes();
        match self.nonces.get(key).map_err(|e| backend_error("get", e))? {
            Some(value) => decode(key, &value).map(Some),
            None => Ok(None),
        }
    }

    /// Removes expired entries, walking only the expiry index below `now`.
    ///
    /// A corrupt record (or index key) does not stop the pass: it is left in place
    /// (a corrupt record keeps blocking its nonce, the safe direction), the pass
    /// goes on, and the first such [`StoreError::Corrupt`] is returned at the end.
    fn collect_expired(&self, now: i64) -> Result<usize, StoreError> {
        let mut removed = 0;
        let mut first_corrupt = None;
        for item in self.expiry.range(..index_prefix(now)) {
            let (index_key, _) = item.map_err(|e| backend_error("scan index", e))?;
            match self.collect_one(&index_key) {
                Ok(true) => removed += 1,
                Ok(false) => {}
                Err(e @ StoreError::Corrupt { .. }) => {
                    first_corrupt.get_or_insert(e);
                    continue;
                }
                Err(e) => return Err(e),
            }
            self.expiry
                .remove(&index_key)
                .map_err(|e| backend_error("remove index", e))?;
        }
        match first_corrupt {
            Some(e) => Err(e),
            None => Ok(removed),
        }
    }

    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, NonceEntry)>, StoreError> {
        super::sled_json::page_after(&self.nonces, after, limit, "list nonces")?
            .into_iter()
            .map(|(k, v)| Ok((super::sled_json::key_text(&k)?, decode(&k, &v)?)))
            .collect()
    }
}

impl SledNonceStore {
    /// Removes the nonce an expired index key points at, if the nonce is still
    /// recorded with that expiry. Returns whether a nonce was removed; the caller
    /// removes the index key afterwards.
    fn collect_one(&self, index_key: &[u8]) -> Result<bool, StoreError> {
        let (expires_at, nonce) = parse_index_key(index_key)?;
        let Some(current) = self
            .nonces
            .get(nonce)
            .map_err(|e| backend_error("get", e))?
        else {
            return Ok(false); // stale index entry: crash or lost race (module docs)
        };
        if decode(nonce, &current)?.expires_at != expires_at {
            return Ok(false); // stale index entry of a racer that lost
        }
        let swap = self
            .nonces
            .compare_and_swap(nonce, Some(&current), None::<&[u8]>)
            .map_err(|e| backend_error("compare_and_swap", e))?;
        // A failed swap means another collector removed it first.
        Ok(swap.is_ok())
    }
}

/// Maps a sled error to a [`StoreError`] without exposing sled's type.
pub(crate) fn backend_error(op: &'static str, error: sled::Error) -> StoreError {
    match error {
        sled::Error::Io(source) => StoreError::Io { op, source },
        other => StoreError::Backend {
            op,
            message: other.to_string(),
        },
    }
}

/// Encodes an entry in value format version 1.
fn encode(entry: &NonceEntry) -> Result<Vec<u8>, StoreError> {
    let too_large = || StoreError::DataTooLarge {
        len: entry.data.len(),
        max: MAX_DATA_LEN,
    };
    if entry.data.len() > MAX_DATA_LEN {
        return Err(too_large());
    }
    let data_len = u32::try_from(entry.data.len()).map_err(|_| too_large())?;
    let mut value = Vec::with_capacity(HEADER_LEN + entry.data.len());
    value.push(FORMAT_V1);
    value.extend_from_slice(&entry.digest);
    value.extend_from_slice(&entry.expires_at.to_be_bytes());
    value.extend_from_slice(&data_len.to_be_bytes());
    value.extend_from_slice(&entry.data);
    Ok(value)
}

/// Decodes a stored value; anything but a well-formed version 1 value is `Corrupt`.
fn decode(key: &[u8], value: &[u8]) -> Result<NonceEntry, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        reason,
    };
    let Some((&version, rest)) = value.split_first() else {
        return Err(corrupt("the value is empty".to_owned()));
    };
    if version != FORMAT_V1 {
        return Err(corrupt(format!("unknown format version {version}")));
    }
    if value.len() < HEADER_LEN {
        return Err(corrupt(format!(
            "the value is {} bytes, shorter than the {HEADER_LEN}-byte header",
            value.len()
        )));
    }
    let (digest, rest) = split_array::<32>(rest);
    let (expires_at, rest) = split_array::<8>(rest);
    let (data_len, data) = split_array::<4>(rest);
    let data_len = u32::from_be_bytes(data_len);
    if usize::try_from(data_len) != Ok(data.len()) {
        return Err(corrupt(format!(
            "the header announces {data_len} data bytes but {} follow",
            data.len()
        )));
    }
    if data.len() > MAX_DATA_LEN {
        return Err(corrupt(format!(
            "{} data bytes, more than the {MAX_DATA_LEN} allowed",
            data.len()
        )));
    }
    Ok(NonceEntry {
        digest,
        expires_at: i64::from_be_bytes(expires_at),
        data: data.to_vec(),
    })
}

/// Splits `N` bytes off the front of `bytes`; the caller has checked the length
/// (missing bytes read as zero rather than panicking).
fn split_array<const N: usize>(bytes: &[u8]) -> ([u8; N], &[u8]) {
    let mut head = [0u8; N];
    let n = N.min(bytes.len());
    head[..n].copy_from_slice(&bytes[..n]);
    (head, &bytes[n..])
}

/// `expires_at` as 8 bytes whose lexicographic order is the numeric order
/// (big-endian with the sign bit flipped, so negative times sort first).
fn index_prefix(expires_at: i64) -> [u8; INDEX_PREFIX_LEN] {
    (expires_at ^ i64::MIN).to_be_bytes()
}

/// The expiry index key of a nonce: [`index_prefix`] followed by the nonce.
fn index_key(expires_at: i64, nonce: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(INDEX_PREFIX_LEN + nonce.len());
    key.extend_from_slice(&index_prefix(expires_at));
    key.extend_from_slice(nonce);
    key
}

/// Splits an index key into its `expires_at` and nonce.
fn parse_index_key(key: &[u8]) -> Result<(i64, &[u8]), StoreError> {
    if key.len() <= INDEX_PREFIX_LEN || key.len() > INDEX_PREFIX_LEN + MAX_NONCE_LEN {
        return Err(StoreError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            reason: format!("expiry index key of {} bytes", key.len()),
        });
    }
    let (prefix, nonce) = split_array::<INDEX_PREFIX_LEN>(key);
    Ok((i64::from_be_bytes(prefix) ^ i64::MIN, nonce))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(data: &[u8]) -> NonceEntry {
        NonceEntry {
            digest: [7; 32],
            expires_at: -5,
            data: data.to_vec(),
        }
    }

    #[test]
    fn value_round_trips() {
        for data in [&b""[..], b"accept", &[0xff; MAX_DATA_LEN]] {
            let e = entry(data);
            assert_eq!(decode(b"n", &encode(&e).unwrap()).unwrap(), e);
        }
    }

    #[test]
    fn malformed_values_are_corrupt() {
        let good = encode(&entry(b"accept")).unwrap();
        let mut bad_version = good.clone();
        bad_version[0] = 2;
        let mut long = good.clone();
        long.push(0);
        for value in [
            &[][..],
            &bad_version,
            &good[..HEADER_LEN - 1],
            &good[..good.len() - 1],
            &long,
        ] {
            assert!(matches!(
                decode(b"n", value),
                Err(StoreError::Corrupt { .. })
            ));
        }
    }

    #[test]
    fn index_keys_sort_by_time() {
        let times = [i64::MIN, -1_000, -1, 0, 1, 1_700_000_000, i64::MAX];
        let keys: Vec<_> = times.iter().map(|&t| index_key(t, b"n")).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        for (&t, k) in times.iter().zip(&keys) {
            assert_eq!(parse_index_key(k).unwrap(), (t, &b"n"[..]));
        }
        assert!(parse_index_key(&index_prefix(3)).is_err());
    }
}
