//! The log's Merkle tree (PROTOCOL.md §15.2): RFC 9162 hashing (leaf
//! `SHA-256(0x00 || entry)`, interior `SHA-256(0x01 || left || right)`) and
//! the "stored hashes" of Go's `sumdb/tlog` layout, which hold every level
//! a tile serves. The arithmetic is `tlog_tiles`'; this module gives it the
//! shapes a store and a server use: a batch appended to a tree of known
//! right edge, and the hashes a proof needs, asked for before they are read.

use std::cell::RefCell;
use std::collections::HashMap;
use tlog_tiles::{Hash, HashReader};

pub use tlog_tiles::{check_record, check_tree, record_hash as leaf_hash, stored_hash_index};

/// Why the tree arithmetic failed.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// A hash the computation needs was not given.
    #[error("the stored hash {0} is missing")]
    Missing(u64),
    #[error("the tree is larger than this implementation reads")]
    TooLarge,
    #[error("{0}")]
    Tlog(#[from] tlog_tiles::Error),
}

/// The stored-hash indexes of the roots of the complete subtrees that make
/// a tree of `size` leaves (its right edge): what appending to it, and its
/// root, need.
pub fn edge(size: u64) -> Vec<u64> {
    tlog_tiles::sub_tree_index(0, size, vec![])
}

/// Hashes by stored-hash index, read from memory.
#[derive(Debug, Default, Clone)]
pub struct Hashes(pub HashMap<u64, Hash>);

impl HashReader for Hashes {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        indexes
            .iter()
            .map(|i| {
                self.0
                    .get(i)
                    .copied()
                    .ok_or_else(|| tlog_tiles::Error::InvalidInput(format!("missing hash {i}")))
            })
            .collect()
    }
}

/// Entries appended to a tree: the hashes to store, by stored-hash index,
/// and the new tree.
#[derive(Debug, Clone)]
pub struct Appended {
    pub hashes: Vec<(u64, Hash)>,
    pub size: u64,
    pub root: Hash,
}

/// Appends `entries` to the tree of `size` leaves whose right edge
/// ([`edge`]) is in `known`.
pub fn append<E: AsRef<[u8]>>(
    size: u64,
    known: Hashes,
    entries: &[E],
) -> Result<Appended, TreeError> {
    let mut known = known;
    for i in edge(size) {
        if !known.0.contains_key(&i) {
            return Err(TreeError::Missing(i));
        }
    }
    let end = size + entries.len() as u64;
    if end > crate::tlog::MAX_TREE_SIZE {
        return Err(TreeError::TooLarge);
    }
    let mut stored = Vec::with_capacity(entries.len() * 2);
    for (n, entry) in (size..).zip(entries) {
        let new = tlog_tiles::stored_hashes(n, entry.as_ref(), &known)?;
        let first = stored_hash_index(0, n);
        for (i, h) in (first..).zip(new) {
            known.0.insert(i, h);
            stored.push((i, h));
        }
    }
    let root = tlog_tiles::tree_hash(end, &known)?;
    Ok(Appended {
        hashes: stored,
        size: end,
        root,
    })
}

/// Records the indexes a computation reads, answering with placeholders:
/// which indexes a proof needs depends only on the sizes, so a first pass
/// learns them and the store is read once.
#[derive(Default)]
struct Recorder(RefCell<Vec<u64>>);

impl HashReader for Recorder {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        self.0.borrow_mut().extend_from_slice(indexes);
        Ok(vec![tlog_tiles::EMPTY_HASH; indexes.len()])
    }
}

/// The stored hashes an inclusion proof of leaf `index` in a tree of `size`
/// needs.
pub fn inclusion_needs(size: u64, index: u64) -> Result<Vec<u64>, TreeError> {
    let r = Recorder::default();
    tlog_tiles::prove_record(size, index, &r)?;
    Ok(r.0.into_inner())
}

/// The RFC 9162 inclusion proof of leaf `index` in the tree of `size`, from
/// the hashes [`inclusion_needs`] named.
pub fn prove_inclusion(size: u64, index: u64, known: &Hashes) -> Result<Vec<Hash>, TreeError> {
    Ok(tlog_tiles::prove_record(size, index, known)?)
}

/// The root of a tree of `size`, from the hashes of its [`edge`].
pub fn root(size: u64, known: &Hashes) -> Result<Hash, TreeError> {
    Ok(tlog_tiles::tree_hash(size, known)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    /// RFC 9162 §2.1.1 by hand, for a check that does not use `tlog_tiles`.
    fn mth(leaves: &[Vec<u8>]) -> [u8; 32] {
        match leaves.len() {
            0 => Sha256::digest([]).into(),
            1 => {
                let mut h = Sha256::new();
                h.update([0]);
                h.update(&leaves[0]);
                h.finalize().into()
            }
            n => {
                // The largest power of two below n.
                let k = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
                let mut h = Sha256::new();
                h.update([1]);
                h.update(mth(&leaves[..k]));
                h.update(mth(&leaves[k..]));
                h.finalize().into()
            }
        }
    }

    fn entries(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("entry {i}\n").into_bytes())
            .collect()
    }

    #[test]
    fn batches_of_any_size_give_the_rfc_root_and_valid_proofs() {
        let all = entries(600);
        let mut known = Hashes::default();
        let mut size = 0u64;
        for batch in [1usize, 2, 5, 120, 128, 1, 300, 43] {
            let start = size as usize;
            let edge_only = Hashes(edge(size).into_iter().map(|i| (i, known.0[&i])).collect());
            let a = append(size, edge_only, &all[start..start + batch]).unwrap();
            for (i, h) in &a.hashes {
                known.0.insert(*i, *h);
            }
            size = a.size;
            assert_eq!(a.root.0, mth(&all[..size as usize]), "size {size}");
            for index in [0, size / 2, size - 1] {
                let proof = prove_inclusion(size, index, &known).unwrap();
                let needs = inclusion_needs(size, index).unwrap();
                assert!(needs.iter().all(|i| known.0.contains_key(i)));
                let leaf = leaf_hash(&all[index as usize]);
                check_record(&proof, size, a.root, index, leaf).unwrap();
                let other = leaf_hash(b"not this\n");
                assert!(check_record(&proof, size, a.root, index, other).is_err());
            }
        }
    }

    #[test]
    fn an_append_without_the_right_edge_is_refused() {
        let mut known = Hashes::default();
        let a = append(0, known.clone(), &entries(3)).unwrap();
        known.0.extend(a.hashes);
        let first_edge = edge(3)[0];
        known.0.remove(&first_edge);
        assert!(matches!(
            append(3, known, &entries(1)),
            Err(TreeError::Missing(i)) if i == first_edge
        ));
    }
}
