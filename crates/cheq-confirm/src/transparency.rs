//! The CS's transparency log (PROTOCOL.md §15): it sequences the entries
//! the store queued (decisions with their claims, passkey changes), signs a
//! checkpoint of each new tree, and answers what the log serves: the
//! checkpoint, tiles, entry bundles, and a decision's inclusion proof.
//!
//! Sequencing is a compare-and-set on the tree's size
//! ([`LogStore::integrate`]): any number of instances may run it at once
//! on one database, and the log has one sequence.

use cheq_core::tlog::tiles::{bundle, TilePath};
use cheq_core::tlog::tree::{self, Hashes};
use cheq_core::tlog::{CredentialChange, Entry, Hash, LogKey};
use cheq_store::tlog::{Integration, LogHead, LogStore};
use cheq_store::StoreError;
use serde_json::{Map, Value};
use std::sync::Arc;

/// Entries sequenced in one step at most.
pub const BATCH: usize = 4096;

/// Why the log could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("this log's checkpoints are signed with the key {bound}, not this instance's {ours}: give every instance the same transparency log key")]
    OtherKey { bound: String, ours: String },
    #[error("the log's tree: {0}")]
    Tree(#[from] tree::TreeError),
    #[error("the checkpoint: {0}")]
    Checkpoint(#[from] cheq_core::tlog::checkpoint::CheckpointError),
    #[error("an entry bundle: {0}")]
    Bundle(#[from] cheq_core::tlog::tiles::EntryTooLong),
    #[error("the passkey has no thumbprint: {0}")]
    Credential(#[from] cheq_core::tlog::entry::ThumbprintError),
}

/// A decision's place in the log, and the proof of it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Inclusion {
    /// The entry (its text, a line).
    pub entry: String,
    pub index: u64,
    pub tree_size: u64,
    /// Base64 (standard, as in the checkpoint) of the tree's root hash.
    pub root_hash: String,
    /// The RFC 9162 inclusion proof, base64 hashes.
    pub proof: Vec<String>,
    /// The signed checkpoint of that tree.
    pub checkpoint: String,
}

/// The transparency log of one CS (every instance on its database).
pub struct TransparencyLog {
    store: Arc<dyn LogStore>,
    key: LogKey,
}

impl std::fmt::Debug for TransparencyLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransparencyLog")
            .field("origin", &self.key.origin())
            .finish_non_exhaustive()
    }
}

fn std_b64(h: &Hash) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(h.0)
}

impl TransparencyLog {
    /// Opens the log kept in `store`, signed with `key`: refused when the
    /// log was begun with another key; an empty log gets its first
    /// checkpoint (size 0) here.
    pub fn open(store: Arc<dyn LogStore>, key: LogKey) -> Result<TransparencyLog, LogError> {
        let ours = key.verifier_key();
        let bound = store.bind_key(&ours)?;
        if bound != ours {
            return Err(LogError::OtherKey { bound, ours });
        }
        let log = TransparencyLog { store, key };
        if log.store.head()?.is_none() {
            let empty = log.key.sign(0, &cheq_core::tlog::audit::EMPTY_ROOT)?;
            let step = Integration {
                from: 0,
                taken: Vec::new(),
                entries: Vec::new(),
                leaves: Vec::new(),
                hashes: Vec::new(),
                head: LogHead {
                    size: 0,
                    root: empty.root.0,
                    checkpoint: empty.note,
                },
            };
            // Another instance may have begun it meanwhile: either is fine.
            log.store.integrate(&step)?;
        }
        Ok(log)
    }

    /// The log's origin line (and its key's name).
    pub fn origin(&self) -> &str {
        self.key.origin()
    }

    /// The note key's verifier key, in the signed-note text form.
    pub fn verifier_key(&self) -> String {
        self.key.verifier_key()
    }

    /// Queues a passkey's addition or removal (before it is made: a change
    /// the log does not name is never made).
    pub fn credential(
        &self,
        sub: &str,
        key: &Map<String, Value>,
        change: CredentialChange,
    ) -> Result<(), LogError> {
        let entry = Entry::credential(sub, key, change)?;
        Ok(self.store.queue(&entry.to_bytes())?)
    }

    /// One sequencing step: the queued entries (up to [`BATCH`]) appended,
    /// a new checkpoint signed. Returns how many were sequenced; 0 when
    /// none were queued or another instance's step came first (the next
    /// step takes what is left).
    pub fn sequence(&self) -> Result<usize, LogError> {
        // The head before the queue: a step that another sequencer takes
        // meanwhile moves the head and takes its entries off the queue in
        // one write, so a queue read after this head either still holds
        // them (and the compare-and-set on this head's size fails if that
        // step lands first) or no longer does (and that step moved the
        // head past this one: the same). Read the other way round, a queue
        // read before such a step, with a head read after it, would
        // sequence its entries a second time.
        let Some(head) = self.store.head()? else {
            return Ok(0);
        };
        let queued = self.store.queued(BATCH)?;
        if queued.is_empty() {
            return Ok(0);
        }
        let edge = tree::edge(head.size);
        let known = Hashes(
            edge.iter()
                .copied()
                .zip(self.store.hashes(&edge)?.into_iter().map(Hash))
                .collect(),
        );
        let (taken, entries): (Vec<u64>, Vec<Vec<u8>>) = queued.into_iter().unzip();
        let appended = tree::append(head.size, known, &entries)?;
        let checkpoint = self.key.sign(appended.size, &appended.root)?;
        let step = Integration {
            from: head.size,
            taken,
            leaves: entries.iter().map(|e| tree::leaf_hash(e).0).collect(),
            entries,
            hashes: appended.hashes.iter().map(|(i, h)| (*i, h.0)).collect(),
            head: LogHead {
                size: appended.size,
                root: appended.root.0,
                checkpoint: checkpoint.note,
            },
        };
        let n = step.entries.len();
        Ok(if self.store.integrate(&step)? { n } else { 0 })
    }

    /// Sequences until nothing is queued (or `rounds` steps were taken).
    pub fn sequence_all(&self, rounds: usize) -> Result<usize, LogError> {
        let mut total = 0;
        for _ in 0..rounds {
            let n = self.sequence()?;
            total += n;
            if n < BATCH && self.store.queued(1)?.is_empty() {
                break;
            }
        }
        Ok(total)
    }

    /// The latest checkpoint.
    pub fn checkpoint(&self) -> Result<Option<LogHead>, LogError> {
        Ok(self.store.head()?)
    }

    /// A tile or entry bundle of the current tree; `None` when the tree
    /// does not hold it (yet).
    pub fn tile(&self, tile: &TilePath) -> Result<Option<Vec<u8>>, LogError> {
        let size = self.store.head()?.map_or(0, |h| h.size);
        if !tile.within(size) {
            return Ok(None);
        }
        let positions = tile.positions();
        Ok(Some(match tile.level {
            Some(_) => self.store.hashes(&positions)?.concat(),
            None => {
                let (start, count) = tile.span();
                bundle(&self.store.entries(start, count)?)?
            }
        }))
    }

    /// The index of the decision whose document digest is `digest`, once
    /// sequenced.
    pub fn index_of_decision(&self, digest: &str) -> Result<Option<u64>, LogError> {
        let entry = Entry::Decision {
            digest: digest.to_owned(),
        };
        Ok(self.store.index_of(&tree::leaf_hash(&entry.to_bytes()).0)?)
    }

    /// Where the decision whose document digest is `digest` is in the log,
    /// with its proof in the current tree; `None` while it is queued.
    pub fn inclusion(&self, digest: &str) -> Result<Option<Inclusion>, LogError> {
        let entry = Entry::Decision {
            digest: digest.to_owned(),
        }
        .to_bytes();
        let leaf = tree::leaf_hash(&entry);
        let Some(index) = self.store.index_of(&leaf.0)? else {
            return Ok(None);
        };
        let Some(head) = self.store.head()? else {
            return Ok(None);
        };
        if index >= head.size {
            return Ok(None);
        }
        let needs = tree::inclusion_needs(head.size, index)?;
        let known = Hashes(
            needs
                .iter()
                .copied()
                .zip(self.store.hashes(&needs)?.into_iter().map(Hash))
                .collect(),
        );
        let proof = tree::prove_inclusion(head.size, index, &known)?;
        let root = Hash(head.root);
        // Checked before it is given: a proof that fails here is a store
        // that lost its integrity, not something to hand a user.
        tree::check_record(&proof, head.size, root, index, leaf).map_err(tree::TreeError::from)?;
        Ok(Some(Inclusion {
            entry: String::from_utf8_lossy(&entry).into_owned(),
            index,
            tree_size: head.size,
            root_hash: std_b64(&root),
            proof: proof.iter().map(std_b64).collect(),
            checkpoint: String::from_utf8_lossy(&head.checkpoint).into_owned(),
        }))
    }
}

#[cfg(test)]
mod tests;
