//! What the sled backends of [`super::cs`] and [`super::rs`] share: opening
//! a database, and JSON values in its trees (decoding never panics, an
//! unreadable value is [`StoreError::Corrupt`]).

use super::async_flush::AsyncFlush;
use super::group_commit::{Failed, GroupCommit};
use super::sled_store::backend_error;
use super::StoreError;

/// A stored value that cannot be read.
pub(crate) fn corrupt(key: &[u8], reason: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: reason.to_string(),
    }
}

/// Reads a JSON value stored under `key`.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    key: &[u8],
    bytes: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| corrupt(key, e))
}

/// A value as stored (JSON).
pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|e| StoreError::Backend {
        op: "encode",
        message: e.to_string(),
    })
}

/// Up to `limit` items of `tree` whose keys come after `after` (from the
/// first with `None`), in the order of the keys (a listing's page).
pub(crate) fn page_after(
    tree: &sled::Tree,
    after: Option<&str>,
    limit: usize,
    op: &'static str,
) -> Result<Vec<(sled::IVec, sled::IVec)>, StoreError> {
    use std::ops::Bound;
    let items = match after {
        Some(after) => {
            tree.range::<&[u8], _>((Bound::Excluded(after.as_bytes()), Bound::Unbounded))
        }
        None => tree.iter(),
    };
    items
        .take(limit)
        .map(|item| item.map_err(|e| backend_error(op, e)))
        .collect()
}

/// A key that the store wrote as text.
pub(crate) fn key_text(key: &[u8]) -> Result<String, StoreError> {
    String::from_utf8(key.to_vec()).map_err(|_| corrupt(key, "the key is not UTF-8"))
}

/// Opens a tree of `db`.
pub(crate) fn tree(db: &sled::Db, name: &str) -> Result<sled::Tree, StoreError> {
    db.open_tree(name)
        .map_err(|e| backend_error("open_tree", e))
}

/// Opens (creating it if needed) a sled database at `dir`. sled locks the
/// directory: a second open while it is open fails.
pub(crate) fn open_db(dir: &std::path::Path) -> Result<sled::Db, StoreError> {
    config(dir).open().map_err(|e| backend_error("open", e))
}

/// A sled database and the [`GroupCommit`] that every store in it shares:
/// concurrent writers that need their writes on disk share one flush; and
/// its [`AsyncFlush`], for writers that await theirs.
#[derive(Debug, Clone)]
pub(crate) struct Durable {
    db: sled::Db,
    group: std::sync::Arc<GroupCommit>,
    flusher: AsyncFlush,
}

impl Durable {
    pub(crate) fn new(db: sled::Db) -> Self {
        let flushed = db.clone();
        Durable {
            db,
            group: std::sync::Arc::new(GroupCommit::new()),
            flusher: AsyncFlush::new(move || flushed.flush().map(drop).map_err(|e| e.to_string())),
        }
    }

    /// The database's flusher for writers that await their flush.
    pub(crate) fn async_flush(&self) -> AsyncFlush {
        self.flusher.clone()
    }

    /// The database.
    pub(crate) fn db(&self) -> &sled::Db {
        &self.db
    }

    /// Makes every write made before this call durable (sled's `flush`,
    /// shared with concurrent callers).
    pub(crate) fn flush(&self) -> Result<(), StoreError> {
        self.group
            .flush(|| self.db.flush().map(drop))
            .map_err(|e| match e {
                Failed::Own(e) => backend_error("flush", e),
                Failed::Shared(message) => StoreError::Backend {
                    op: "flush",
                    message,
                },
            })
    }
}

/// sled's page cache per database, in bytes of memory: the nodes it holds
/// as they are in memory (the patched sled counts them so, where sled 0.34
/// counted their compressed size in its log, about a third: `vendor/sled/
/// PATCHES.md`). sled's default is 1 GiB, which a server fills as its data
/// grows (measured: 17 KB resident per decided confirmation); what
/// is read again is recent, so a small cache holds it.
pub const CACHE_BYTES: u64 = 32 * 1024 * 1024;

/// The zstd level of a compressed database: the first of zstd's fast
/// levels, which skip the entropy coding of literals (the patched sled takes
/// levels down to −7; sled 0.34 refused any below 1). The records are JSON
/// around base64url text, and the documents in them are packed (compressed)
/// already: level 1 spent more instructions per confirmation than −1 for
/// little less disk, and higher levels several times the CPU for little
/// more (BENCHMARKS.md). The level is
/// not stored: a database written at any level reads at any other.
pub const COMPRESSION_LEVEL: i32 = -1;

/// How every sled database of this project is opened: at `dir`, with the
/// page cache bounded to [`CACHE_BYTES`], and compressed (zstd, per log
/// entry) unless the database was created without compression: sled refuses
/// to open a database with another setting than the one it was created with,
/// so an existing database keeps its own (read from its `conf` file).
pub fn config(dir: &std::path::Path) -> sled::Config {
    sled::Config::new()
        .path(dir)
        .cache_capacity(CACHE_BYTES)
        .use_compression(use_compression(
            compressed(dir),
            std::env::var(COMPRESSION_VAR).ok().as_deref(),
        ))
        .compression_factor(COMPRESSION_LEVEL)
}

/// The environment variable that, set to `off`, makes new databases
/// uncompressed (so that plain tools can read their files; the browser test
/// scans them for values a user typed). An existing database keeps its own
/// setting whatever this says.
pub const COMPRESSION_VAR: &str = "CHEQ_SLED_COMPRESSION";

/// Whether to open a database compressed: as it was made if it exists,
/// otherwise compressed unless [`COMPRESSION_VAR`] says `off`.
fn use_compression(existing: Option<bool>, setting: Option<&str>) -> bool {
    existing.unwrap_or(setting != Some("off"))
}

/// Whether the sled database at `dir` was created compressed; `None` when
/// there is none yet (or its `conf` file does not say).
fn compressed(dir: &std::path::Path) -> Option<bool> {
    // Text lines, then a binary checksum.
    let conf = std::fs::read(dir.join("conf")).ok()?;
    String::from_utf8_lossy(&conf)
        .lines()
        .filter_map(|l| l.strip_prefix("use_compression:"))
        .find_map(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_decides_for_new_databases_only() {
        assert!(use_compression(None, None));
        assert!(use_compression(None, Some("on")));
        assert!(!use_compression(None, Some("off")));
        assert!(use_compression(Some(true), Some("off")));
        assert!(!use_compression(Some(false), None));
    }

    #[test]
    fn new_databases_are_compressed_and_old_ones_keep_their_setting() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("new");
        let db = config(&new).open().unwrap();
        db.insert("k", "v").unwrap();
        drop(db);
        assert_eq!(compressed(&new), Some(true));
        assert!(config(&new).open().is_ok());

        // A database made before compression opens as it was made.
        let old = dir.path().join("old");
        drop(sled::Config::new().path(&old).open().unwrap());
        assert_eq!(compressed(&old), Some(false));
        let db = config(&old).open().unwrap();
        db.insert("k", "v").unwrap();
        assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"v"[..]));
        drop(db);
        // Without this, sled would refuse it.
        assert!(sled::Config::new()
            .path(&old)
            .use_compression(true)
            .open()
            .is_err());
    }
}
