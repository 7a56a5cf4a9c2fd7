//! The auditor (PROTOCOL.md §15.6): what `cheq audit` checks of a log it
//! can only read, as a chain of named steps, each with its own error.
//!
//! 1. the checkpoint parses and the log's key signed it;
//! 2. the kept checkpoint (the last one this auditor accepted) is its own,
//!    and the new tree extends it: not smaller (truncated), not another
//!    root at the same size (forked), and an RFC 9162 consistency proof
//!    built from tiles the new root authenticates holds;
//! 3. each document's entry is in the tree: found in the entry bundles,
//!    every entry of which hashes to its authenticated leaf, and proven by
//!    an inclusion proof.
//!
//! Tiles come through a [`TileSource`]; nothing here does I/O.

use super::checkpoint::{CheckpointError, LogVerifier, SignedCheckpoint};
use super::entry::Entry;
use super::tiles::{unbundle, TilePath};
use super::tree::{check_record, check_tree, leaf_hash, stored_hash_index};
use super::{Hash, TILE_HEIGHT, TILE_WIDTH};
use std::cell::RefCell;
use std::collections::HashMap;
use tlog_tiles::{HashReader, Tile, TileHashReader, TileReader};

/// Where the auditor reads the log: `checkpoint` and tile paths below the
/// log's prefix. Answers are bounded by the source.
pub trait TileSource {
    fn fetch(&self, path: &str) -> Result<Vec<u8>, String>;
}

/// What the audit found wrong.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("could not read {path}: {cause}")]
    Fetch { path: String, cause: String },
    #[error("the log's checkpoint: {0}")]
    Checkpoint(CheckpointError),
    #[error("the kept checkpoint is not this log's: {0}")]
    Kept(CheckpointError),
    #[error("the log was truncated: it now has {now} entries, but {kept} were kept")]
    Truncated { kept: u64, now: u64 },
    #[error("the log was forked or rewritten: another tree of {size} entries than the one kept")]
    Forked { size: u64 },
    #[error("the log was rewritten: its tree of {now} entries does not extend the kept one of {kept} ({cause})")]
    Inconsistent { kept: u64, now: u64, cause: String },
    #[error("the tiles do not match the checkpoint: {0}")]
    Tiles(String),
    #[error("the entry bundle {path} does not match its tile")]
    Entries { path: String },
    #[error("{name} is not in the log of {size} entries")]
    NotIncluded { name: String, size: u64 },
    #[error("the inclusion proof of {name} fails: {cause}")]
    Inclusion { name: String, cause: String },
}

/// A document to look for: a name to report it by, and its entry.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub name: String,
    pub entry: Vec<u8>,
}

impl Wanted {
    /// A decided document, by its exact bytes.
    pub fn document(name: &str, bytes: &[u8]) -> Wanted {
        Wanted {
            name: name.to_owned(),
            entry: Entry::decision(bytes).to_bytes(),
        }
    }
}

/// What a passing audit saw.
#[derive(Debug, Clone)]
pub struct Report {
    /// The checkpoint now accepted (to keep for the next audit).
    pub checkpoint: SignedCheckpoint,
    /// The size of the kept checkpoint it extends, if one was kept.
    pub extends: Option<u64>,
    /// Each wanted document and its index.
    pub included: Vec<(String, u64)>,
}

/// Audits the log `source` serves under `verifier`'s key.
pub fn audit(
    source: &dyn TileSource,
    verifier: &LogVerifier,
    kept: Option<&[u8]>,
    wanted: &[Wanted],
) -> Result<Report, AuditError> {
    let checkpoint = signed_checkpoint(source, verifier)?;
    let reader = Reader::new(source);
    let extends = match kept {
        Some(kept) => Some(extends_kept(&reader, verifier, kept, &checkpoint)?),
        None => None,
    };
    let included = find_each(&reader, &checkpoint, wanted)?;
    Ok(Report {
        checkpoint,
        extends,
        included,
    })
}

/// Step 1: the served checkpoint, checked.
fn signed_checkpoint(
    source: &dyn TileSource,
    verifier: &LogVerifier,
) -> Result<SignedCheckpoint, AuditError> {
    let note = source
        .fetch("checkpoint")
        .map_err(|cause| AuditError::Fetch {
            path: "checkpoint".into(),
            cause,
        })?;
    verifier.verify(&note).map_err(AuditError::Checkpoint)
}

/// Step 2: the new tree extends the kept one.
fn extends_kept(
    reader: &Reader,
    verifier: &LogVerifier,
    kept: &[u8],
    now: &SignedCheckpoint,
) -> Result<u64, AuditError> {
    let kept = verifier.verify(kept).map_err(AuditError::Kept)?;
    if kept.size > now.size {
        return Err(AuditError::Truncated {
            kept: kept.size,
            now: now.size,
        });
    }
    if kept.size == now.size {
        if kept.root != now.root {
            return Err(AuditError::Forked { size: now.size });
        }
        return Ok(kept.size);
    }
    if kept.size == 0 {
        // Every tree extends the empty one, whose root is fixed.
        if kept.root != tlog_tiles::EMPTY_HASH {
            return Err(AuditError::Forked { size: 0 });
        }
        return Ok(0);
    }
    let hashes = TileHashReader::new(now.size, now.root, reader);
    let proof =
        tlog_tiles::prove_tree(now.size, kept.size, &hashes).map_err(|e| reader.cause(e))?;
    check_tree(&proof, now.size, now.root, kept.size, kept.root).map_err(|e| {
        AuditError::Inconsistent {
            kept: kept.size,
            now: now.size,
            cause: e.to_string(),
        }
    })?;
    Ok(kept.size)
}

/// Step 3: each wanted entry, found in the bundles and proven.
fn find_each(
    reader: &Reader,
    checkpoint: &SignedCheckpoint,
    wanted: &[Wanted],
) -> Result<Vec<(String, u64)>, AuditError> {
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let size = checkpoint.size;
    let mut found: HashMap<Vec<u8>, u64> = HashMap::new();
    let hashes = TileHashReader::new(size, checkpoint.root, reader);
    let mut start = 0u64;
    while start < size && found.len() < wanted.len() {
        let width = (size - start).min(TILE_WIDTH);
        let path = TilePath::entries(start / TILE_WIDTH, width as u16).path();
        let bytes = reader.fetch(&path)?;
        let entries = unbundle(&bytes, width as usize)
            .map_err(|_| AuditError::Entries { path: path.clone() })?;
        let indexes: Vec<u64> = (start..start + width)
            .map(|i| stored_hash_index(0, i))
            .collect();
        let leaves = hashes.read_hashes(&indexes).map_err(|e| reader.cause(e))?;
        for ((i, entry), leaf) in (start..).zip(entries).zip(leaves) {
            if leaf_hash(&entry) != leaf {
                return Err(AuditError::Entries { path });
            }
            if wanted.iter().any(|w| w.entry == entry) {
                found.entry(entry).or_insert(i);
            }
        }
        start += width;
    }
    let mut included = Vec::with_capacity(wanted.len());
    for w in wanted {
        let Some(&index) = found.get(&w.entry) else {
            return Err(AuditError::NotIncluded {
                name: w.name.clone(),
                size,
            });
        };
        let proof = tlog_tiles::prove_record(size, index, &hashes).map_err(|e| reader.cause(e))?;
        check_record(&proof, size, checkpoint.root, index, leaf_hash(&w.entry)).map_err(|e| {
            AuditError::Inclusion {
                name: w.name.clone(),
                cause: e.to_string(),
            }
        })?;
        included.push((w.name.clone(), index));
    }
    Ok(included)
}

/// Tiles read through a [`TileSource`] for `tlog_tiles`, which
/// authenticates them; a fetch that failed is reported as such.
struct Reader<'a> {
    source: &'a dyn TileSource,
    cache: RefCell<HashMap<String, Vec<u8>>>,
    failed: RefCell<Option<AuditError>>,
}

impl<'a> Reader<'a> {
    fn new(source: &'a dyn TileSource) -> Self {
        Reader {
            source,
            cache: RefCell::default(),
            failed: RefCell::default(),
        }
    }

    fn fetch(&self, path: &str) -> Result<Vec<u8>, AuditError> {
        if let Some(b) = self.cache.borrow().get(path) {
            return Ok(b.clone());
        }
        let bytes = self.source.fetch(path).map_err(|cause| AuditError::Fetch {
            path: path.to_owned(),
            cause,
        })?;
        self.cache
            .borrow_mut()
            .insert(path.to_owned(), bytes.clone());
        Ok(bytes)
    }

    /// The error behind a failed tile computation: the fetch that failed,
    /// or tiles that do not hash to the checkpoint.
    fn cause(&self, e: tlog_tiles::Error) -> AuditError {
        self.failed
            .borrow_mut()
            .take()
            .unwrap_or_else(|| AuditError::Tiles(e.to_string()))
    }
}

impl TileReader for Reader<'_> {
    fn height(&self) -> u8 {
        TILE_HEIGHT
    }

    fn read_tiles(&self, tiles: &[Tile]) -> Result<Vec<Vec<u8>>, tlog_tiles::Error> {
        tiles
            .iter()
            .map(|t| {
                self.fetch(&TilePath::of_tlog(t).path()).map_err(|e| {
                    let message = e.to_string();
                    *self.failed.borrow_mut() = Some(e);
                    tlog_tiles::Error::InvalidInput(message)
                })
            })
            .collect()
    }

    fn save_tiles(&self, _tiles: &[Tile], _data: &[Vec<u8>]) {}
}

/// The root hash of the empty tree (SHA-256 of nothing).
pub const EMPTY_ROOT: Hash = tlog_tiles::EMPTY_HASH;

#[cfg(test)]
mod tests;
