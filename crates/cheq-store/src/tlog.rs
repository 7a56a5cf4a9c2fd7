//! What the transparency log keeps (PROTOCOL.md §15): entries queued with
//! the writes that make them (a decision's claim, a passkey change), the
//! entries and stored hashes of the tree, and its signed head.
//!
//! The contract every backend keeps:
//!
//! - an entry queued with a decision's claim is durable with the claim
//!   (one write: a decision on record is always queued or in the tree);
//! - [`LogStore::integrate`] is a compare-and-set on the tree's size: of
//!   two sequencers extending the same head (two instances on one
//!   database), one wins and the other's step changes nothing, so the log
//!   has one sequence and never forks;
//! - [`LogStore::head`] answers only a head that is durable: a checkpoint
//!   that was served is never lost by a crash;
//! - an entry logged more than once (a passkey added, removed and added
//!   again) is found by [`LogStore::index_of`] at the index it was first
//!   given: an index once answered never changes;
//! - a log moved in by `store import` ([`LogStore::restore`],
//!   [`LogStore::restore_head`]) is the tree it was, entry for entry, under
//!   the head it had, and goes on growing from there.

use super::StoreError;

/// The tree's signed head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogHead {
    pub size: u64,
    pub root: [u8; 32],
    /// The signed checkpoint note of this tree, as served.
    pub checkpoint: Vec<u8>,
}

/// One sequencing step: queued entries given their indexes.
#[derive(Debug, Clone)]
pub struct Integration {
    /// The size of the tree this step extends.
    pub from: u64,
    /// The queue ids of the entries taken, removed from the queue.
    pub taken: Vec<u64>,
    /// The entries, at indexes `from..`.
    pub entries: Vec<Vec<u8>>,
    /// Their leaf hashes, in the same order (for [`LogStore::index_of`]).
    pub leaves: Vec<[u8; 32]>,
    /// The new stored hashes, by stored-hash index.
    pub hashes: Vec<(u64, [u8; 32])>,
    /// The new head.
    pub head: LogHead,
}

/// A part of a log written by `store import` into an empty log: entries
/// given their indexes as they had them, and the stored hashes they make.
/// The head is set once every part is written ([`LogStore::restore_head`]).
#[derive(Debug, Clone, Default)]
pub struct Restored {
    /// The index of the first entry.
    pub from: u64,
    /// The entries, at indexes `from..`.
    pub entries: Vec<Vec<u8>>,
    /// Their leaf hashes, in the same order.
    pub leaves: Vec<[u8; 32]>,
    /// The stored hashes they make, by stored-hash index.
    pub hashes: Vec<(u64, [u8; 32])>,
    /// Entries to queue after every queued one, oldest first.
    pub queued: Vec<Vec<u8>>,
}

/// The log's storage.
pub trait LogStore: Send + Sync {
    /// Queues `entry`, durable before it returns.
    fn queue(&self, entry: &[u8]) -> Result<(), StoreError>;
    /// Up to `limit` queued entries, oldest first, with their queue ids.
    fn queued(&self, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.queued_after(None, limit)
    }
    /// Up to `limit` queued entries whose queue ids come after `after`
    /// (from the oldest with `None`), oldest first: the whole queue, a page
    /// at a time (`store export`).
    fn queued_after(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError>;
    /// The durable head; `None` before the first.
    fn head(&self) -> Result<Option<LogHead>, StoreError>;
    /// The stored hashes at `indexes`; one missing is an error.
    fn hashes(&self, indexes: &[u64]) -> Result<Vec<[u8; 32]>, StoreError>;
    /// The entries at `start..start + count`; one missing is an error.
    fn entries(&self, start: u64, count: u64) -> Result<Vec<Vec<u8>>, StoreError>;
    /// Applies `step` if the tree still has `step.from` entries (its head
    /// unchanged since it was read); durable before it returns `true`.
    /// `false`: another sequencer moved the head; nothing was written
    /// that a reader sees.
    fn integrate(&self, step: &Integration) -> Result<bool, StoreError>;
    /// The index of the entry whose leaf hash is `leaf`, if integrated;
    /// of an entry integrated more than once, the first.
    fn index_of(&self, leaf: &[u8; 32]) -> Result<Option<u64>, StoreError>;
    /// Binds the log to its note key's verifier key at its first use;
    /// later, answers the key it is bound to (another key than the
    /// caller's must not sign this log's checkpoints).
    fn bind_key(&self, vkey: &str) -> Result<String, StoreError>;
    /// The verifier key the log is bound to; `None` before its first use.
    fn bound_key(&self) -> Result<Option<String>, StoreError>;
    /// Writes a part of a log being moved in (`store import`) into a log
    /// that holds no entries: what a reader sees moves only with
    /// [`restore_head`](Self::restore_head). Made durable with the
    /// import's last flush (sled) or by each statement (PostgreSQL).
    fn restore(&self, part: &Restored) -> Result<(), StoreError>;
    /// Sets the head of a log moved in, once all its parts are written.
    fn restore_head(&self, head: &LogHead) -> Result<(), StoreError>;
    /// Empties the queue (`store import`, before the moved log's own queue
    /// is put back: the decisions it imported queued their entries again).
    fn clear_queue(&self) -> Result<(), StoreError>;
}

/// The number of stored hashes of a tree of `size` entries: the stored
/// hashes of a tree are those at indexes `0..stored_hash_count(size)`.
pub fn stored_hash_count(size: u64) -> u64 {
    cheq_core::tlog::tree::stored_hash_index(0, size)
}

/// The stored hash as bytes of 32, or a corrupt-value error.
pub(crate) fn hash32(key: &str, bytes: &[u8]) -> Result<[u8; 32], StoreError> {
    bytes.try_into().map_err(|_| StoreError::Corrupt {
        key: key.to_owned(),
        reason: "a stored hash is not 32 bytes".into(),
    })
}
