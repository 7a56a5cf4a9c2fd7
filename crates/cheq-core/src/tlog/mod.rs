//! The transparency log (PROTOCOL.md §15): what the confirmation server
//! publishes so that anyone can check it signed no decision in secret, none
//! twice, and never rewrote its history.
//!
//! - [`entry`]: the two kinds of entry (a decision's digest, a passkey added
//!   or removed) and nothing of their content;
//! - [`tree`]: RFC 9162 hashing and the stored hashes of a growing tree (the
//!   arithmetic is `tlog_tiles`', a port of Go's `sumdb/tlog`);
//! - [`tiles`]: the C2SP `tlog-tiles` paths, tiles and entry bundles;
//! - [`checkpoint`]: C2SP `tlog-checkpoint` notes, signed and checked with a
//!   C2SP `signed-note` Ed25519 key (`signed_note`);
//! - [`audit`]: the auditor's chain of checks over what a log serves:
//!   signature, consistency with a kept checkpoint, inclusion.
//!
//! No I/O: the auditor reads tiles through a [`audit::TileSource`] it is
//! given.

pub mod audit;
pub mod checkpoint;
pub mod entry;
pub mod tiles;
pub mod tree;

pub use checkpoint::{LogKey, LogVerifier, SignedCheckpoint};
pub use entry::{CredentialChange, Entry};
pub use tlog_tiles::Hash;

/// Tiles are 2^8 = 256 hashes wide (C2SP `tlog-tiles`).
pub const TILE_HEIGHT: u8 = 8;
/// Hashes (or entries) in a full tile.
pub const TILE_WIDTH: u64 = 1 << TILE_HEIGHT;
/// The largest tree this implementation reads: far beyond any CS, and small
/// enough that no tile arithmetic overflows.
pub const MAX_TREE_SIZE: u64 = 1 << 48;
