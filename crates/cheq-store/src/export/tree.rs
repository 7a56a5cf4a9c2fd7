//! The transparency log's tree built again from a stream's entries, a
//! batch at a time, keeping only its right edge in memory: what a reader
//! checks the stream's head against, and what an import stores.

use crate::tlog::Restored;
use cheq_core::tlog::tree::{self, Hashes, TreeError};

/// Entries hashed into the tree at a time.
pub(super) const BATCH: usize = 1024;

/// A tree of the entries given so far.
#[derive(Debug, Default)]
pub(super) struct TreeBuilder {
    /// The entries given before the pending ones.
    size: u64,
    /// The hashes of the right edge of the tree of `size`.
    edge: Hashes,
    pending: Vec<Vec<u8>>,
}

impl TreeBuilder {
    /// How many entries were given.
    pub(super) fn len(&self) -> u64 {
        self.size + self.pending.len() as u64
    }

    /// Adds the next entry; a full batch is hashed and handed back.
    pub(super) fn push(&mut self, entry: Vec<u8>) -> Result<Option<Restored>, TreeError> {
        self.pending.push(entry);
        if self.pending.len() < BATCH {
            return Ok(None);
        }
        self.hash_pending().map(Some)
    }

    /// Hashes what is pending: the last part, and the tree's root.
    pub(super) fn finish(&mut self) -> Result<(Restored, [u8; 32]), TreeError> {
        let part = self.hash_pending()?;
        let root = tree::root(self.size, &self.edge)?;
        Ok((part, root.0))
    }

    fn hash_pending(&mut self) -> Result<Restored, TreeError> {
        let entries = std::mem::take(&mut self.pending);
        let from = self.size;
        let old = std::mem::take(&mut self.edge);
        let appended = tree::append(from, old.clone(), &entries)?;
        // The new right edge: hashes this batch stored, or the old edge's
        // (a complete subtree on the left that the batch did not touch).
        let mut known = Hashes::default();
        for i in tree::edge(appended.size) {
            let h = appended
                .hashes
                .iter()
                .rev()
                .find(|(j, _)| *j == i)
                .map(|(_, h)| *h)
                .or_else(|| old.0.get(&i).copied())
                .ok_or(TreeError::Missing(i))?;
            known.0.insert(i, h);
        }
        self.edge = known;
        self.size = appended.size;
        Ok(Restored {
            from,
            leaves: entries.iter().map(|e| tree::leaf_hash(e).0).collect(),
            entries,
            hashes: appended.hashes.iter().map(|(i, h)| (*i, h.0)).collect(),
            queued: Vec::new(),
        })
    }
}
