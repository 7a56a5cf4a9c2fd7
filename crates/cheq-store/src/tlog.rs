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
//!   that was served is never lost by a crash.

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

/// The log's storage.
pub trait LogStore: Send + Sync {
    /// Queues `entry`, durable before it returns.
    fn queue(&self, entry: &[u8]) -> Result<(), StoreError>;
    /// Up to `limit` queued entries, oldest first, with their queue ids.
    fn queued(&self, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, StoreError>;
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
    /// The index of the entry whose leaf hash is `leaf`, if integrated.
    fn index_of(&self, leaf: &[u8; 32]) -> Result<Option<u64>, StoreError>;
    /// Binds the log to its note key's verifier key at its first use;
    /// later, answers the key it is bound to (another key than the
    /// caller's must not sign this log's checkpoints).
    fn bind_key(&self, vkey: &str) -> Result<String, StoreError>;
}

/// The stored hash as bytes of 32, or a corrupt-value error.
pub(crate) fn hash32(key: &str, bytes: &[u8]) -> Result<[u8; 32], StoreError> {
    bytes.try_into().map_err(|_| StoreError::Corrupt {
        key: key.to_owned(),
        reason: "a stored hash is not 32 bytes".into(),
    })
}
