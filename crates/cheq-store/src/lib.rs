//! The durable replay (nonce) store.
//!
//! `PROTOCOL.md` §6 requires the resource server to record a CHEQ's nonce durably
//! ("on disk, flushed") before it answers a decision, so that the operation runs at
//! most once: a byte-identical re-delivery gets the same answer again, and any other
//! document carrying an already decided nonce is refused as `replayed`. The
//! confirmation server keeps the same kind of record for every nonce it countersigned
//! and refuses to countersign a nonce twice (also §6).
//!
//! This module provides that record:
//!
//! - [`NonceStore`], the backend-neutral trait (nothing of a particular database
//!   appears in it, so another backend, e.g. PostgreSQL, can implement it later);
//! - [`NonceEntry`], what the caller records with a nonce: the SHA-256 of the exact
//!   decision document bytes, the CHEQ's expiry, and a few bytes of caller data;
//! - [`RecordOutcome`], which tells a first recording ([`RecordOutcome::Fresh`]) from
//!   a byte-identical re-delivery ([`RecordOutcome::SameAsBefore`]) and from a replay
//!   of a different document ([`RecordOutcome::Conflict`]);
//! - [`SledNonceStore`], the implementation on the embedded `sled` database.
//!
//! # Expiry
//!
//! Entries are kept until [`NonceStore::collect_expired`] removes those whose
//! `expires_at` has passed. Once collected, a nonce can be recorded
//! [`RecordOutcome::Fresh`] again. That is acceptable because the CHEQ carrying it
//! has expired and the verifier refuses expired CHEQs (`410 {"error":"expired"}`,
//! §6) before the store is ever consulted; callers MUST check expiry first and
//! collect only with `now` taken from the same clock.

pub mod a2a;
mod async_flush;
pub mod cs;
pub mod export;
pub mod group_commit;
pub mod packed;
pub mod pg;
pub mod registrations;
pub mod rs;
pub mod sled_a2a;
pub mod sled_cs;
mod sled_json;
pub mod sled_rs;
mod sled_store;
/// For tests only (this crate's, and other crates' with `test-support`).
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod throttle;
pub mod tlog;

pub use self::async_flush::AsyncFlush;
pub use self::sled_json::{
    config as sled_config, CACHE_BYTES as SLED_CACHE_BYTES,
    COMPRESSION_LEVEL as SLED_COMPRESSION_LEVEL,
};
pub use self::sled_store::SledNonceStore;

/// When a domain step's writes are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// By the step's own durable writes, before it returns.
    Now,
    /// By its caller, which awaits the store's [`AsyncFlush`] after the
    /// step and before it answers: the step's writes may stay unflushed.
    Deferred,
}

/// Largest [`NonceEntry::data`] accepted, in bytes (4 KiB).
pub const MAX_DATA_LEN: usize = 4096;

/// Largest nonce accepted, in bytes. §4 caps every CHEQ string at 4 KiB.
pub const MAX_NONCE_LEN: usize = 4096;

/// What the caller records with a nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonceEntry {
    /// SHA-256 of the exact decision document bytes.
    pub digest: [u8; 32],
    /// Unix seconds after which the entry may be collected (the CHEQ's expiry).
    pub expires_at: i64,
    /// Small opaque caller data (e.g. b"accept"), returned on SameAsBefore/Conflict. At most 4 KiB.
    pub data: Vec<u8>,
}

/// The result of [`NonceStore::record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    /// First time this nonce is recorded; it is now durable.
    Fresh,
    /// The nonce was recorded before with the same digest (a byte-identical re-delivery).
    SameAsBefore(NonceEntry),
    /// The nonce was recorded before with a different digest.
    Conflict(NonceEntry),
}

/// Why a replay store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The operating system reported an I/O error.
    #[error("replay store I/O error during {op}: {source}")]
    Io {
        /// The store operation that failed (e.g. `"flush"`).
        op: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The storage backend failed for a reason other than plain I/O (it detected
    /// corruption in its own files, was used in an unsupported way, hit a bug, …).
    #[error("replay store backend error during {op}: {message}")]
    Backend {
        /// The store operation that failed.
        op: &'static str,
        /// The backend's description of the failure.
        message: String,
    },
    /// A stored record could not be decoded. The store never guesses: the nonce
    /// must be treated as already used until an operator repairs the record.
    #[error("corrupt replay store record {key:?}: {reason}")]
    Corrupt {
        /// The record's key (the nonce, or an index key), rendered lossily as UTF-8.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The database could not be reached or did not answer in time (a
    /// database server's outage): try again later; nothing is known to
    /// have been written.
    #[error("the database is unavailable during {op}: {message}")]
    Unavailable {
        /// The store operation that failed.
        op: &'static str,
        /// What happened.
        message: String,
    },
    /// [`NonceEntry::data`] is larger than [`MAX_DATA_LEN`].
    #[error("nonce entry data is {len} bytes; at most {max} are allowed")]
    DataTooLarge {
        /// The length given.
        len: usize,
        /// The limit, [`MAX_DATA_LEN`].
        max: usize,
    },
    /// The nonce is empty or longer than [`MAX_NONCE_LEN`].
    #[error("invalid nonce: {reason}")]
    InvalidNonce {
        /// Why it was refused.
        reason: &'static str,
    },
}

/// A durable record of the nonces already decided (`PROTOCOL.md` §6).
///
/// Implementations are shared between threads and must not serialize concurrent
/// writers more than their durability mechanism requires.
pub trait NonceStore: Send + Sync {
    /// Atomically record `nonce` if absent; durable (flushed) before it returns Fresh.
    ///
    /// When the nonce is already present, nothing is written and the earlier entry
    /// is returned as [`RecordOutcome::SameAsBefore`] (same digest) or
    /// [`RecordOutcome::Conflict`] (different digest).
    fn record(&self, nonce: &str, entry: &NonceEntry) -> Result<RecordOutcome, StoreError> {
        self.record_with(nonce, entry, Durability::Now)
    }

    /// [`record`](Self::record), made durable as `durability` says. With
    /// [`Durability::Deferred`] what it writes need not be on disk when it
    /// returns: it is once a later write to the same database is made
    /// durable, and a crash before that loses it together with everything
    /// written after it (sled keeps its log in order and recovers a prefix of
    /// it; a database server commits each statement durably anyway). For a
    /// caller that makes a later write of its own durable before anything
    /// relies on the nonce: the RS when its operation keeps its effect in the
    /// RS's own store. A backend that commits every write durably anyway
    /// (PostgreSQL) does so either way.
    fn record_with(
        &self,
        nonce: &str,
        entry: &NonceEntry,
        durability: Durability,
    ) -> Result<RecordOutcome, StoreError>;

    /// Makes every write so far through this store durable, with those of
    /// a deferred [`record_with`](Self::record_with) (sled: and every other
    /// write to its database). The default does nothing: it goes with the
    /// default `record_with`, which writes durably; a backend that
    /// overrides one overrides both.
    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// The entry recorded for `nonce`, if any.
    fn get(&self, nonce: &str) -> Result<Option<NonceEntry>, StoreError>;

    /// Remove entries whose expires_at < now (unix seconds); returns how many were removed.
    ///
    /// A collected nonce can afterwards be recorded [`RecordOutcome::Fresh`] again;
    /// see the module documentation for why that is safe.
    fn collect_expired(&self, now: i64) -> Result<usize, StoreError>;

    /// Up to `limit` nonces with their entries, in the order of the nonces,
    /// from the first after `after` (from the first of all with `None`):
    /// every nonce, a page at a time (`store export`). The default (a store
    /// that only wraps another, in tests) says it cannot.
    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, NonceEntry)>, StoreError> {
        let _ = (after, limit);
        Err(cannot_list())
    }
}

/// What a store that cannot list what it holds answers.
pub(crate) fn cannot_list() -> StoreError {
    StoreError::Backend {
        op: "list",
        message: "this store cannot list what it holds".into(),
    }
}

/// Where a server keeps its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded sled database in the data directory (one process).
    Sled,
    /// A PostgreSQL database ([`pg`]; any number of instances).
    Postgres,
}

/// Whether a backend can serve requests now (`GET /readyz`): the embedded
/// database always can once open; a database server must answer.
pub trait Readiness: Send + Sync + std::fmt::Debug {
    fn ready(&self) -> Result<(), StoreError>;
}

/// The readiness of an embedded backend: ready once open.
#[derive(Debug, Clone, Copy)]
pub struct AlwaysReady;

impl Readiness for AlwaysReady {
    fn ready(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// What a record of `entry` finds when its nonce was recorded before with
/// `existing`: the same decision again, or another one.
pub(crate) fn classify(entry: &NonceEntry, existing: NonceEntry) -> RecordOutcome {
    if existing.digest == entry.digest {
        RecordOutcome::SameAsBefore(existing)
    } else {
        RecordOutcome::Conflict(existing)
    }
}

/// Checks the limits every backend enforces on its inputs.
pub(crate) fn validate(nonce: &str, entry: &NonceEntry) -> Result<(), StoreError> {
    validate_nonce(nonce)?;
    if entry.data.len() > MAX_DATA_LEN {
        return Err(StoreError::DataTooLarge {
            len: entry.data.len(),
            max: MAX_DATA_LEN,
        });
    }
    Ok(())
}

/// Checks a nonce's length.
pub(crate) fn validate_nonce(nonce: &str) -> Result<(), StoreError> {
    if nonce.is_empty() {
        return Err(StoreError::InvalidNonce {
            reason: "the nonce is empty",
        });
    }
    if nonce.len() > MAX_NONCE_LEN {
        return Err(StoreError::InvalidNonce {
            reason: "the nonce is longer than 4096 bytes",
        });
    }
    Ok(())
}
