//! What the sled backends of [`super::cs`] and [`super::rs`] share: opening
//! a database, and JSON values in its trees (decoding never panics, an
//! unreadable value is [`StoreError::Corrupt`]).

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

/// sled's page cache per database. sled's default is 1 GiB, which a server
/// fills as its data grows (issue 13 measured 17 KB resident per decided
/// confirmation); what is read again is recent, so a small cache holds it.
pub const CACHE_BYTES: u64 = 16 * 1024 * 1024;

/// How every sled database of this project is opened: at `dir`, with the
/// page cache bounded to [`CACHE_BYTES`].
pub fn config(dir: &std::path::Path) -> sled::Config {
    sled::Config::new().path(dir).cache_capacity(CACHE_BYTES)
}
