//! Keeping no copy of a sensitive value once it is delivered (PROTOCOL.md §8).
//!
//! A decision that carries a `sensitive` collected value must still be stored
//! before delivery (§6: a decision is never lost). sled is log-structured: an
//! overwritten value can stay in its files long after. So such a document is
//! never written in clear: it is sealed (ChaCha20-Poly1305) under a key of its
//! own, kept in a small file beside the database (mode 0600). Once the
//! delivery is final, the record is replaced by redacted evidence (the
//! resource-signed CHEQ, and keyed digests — HMAC-SHA256 under a secret kept
//! in a 0600 file beside the database — of the confirmation header and of
//! each collected value), flushed, and then the key file is
//! deleted, which makes every copy of the ciphertext unreadable. Keys a crash
//! left behind are swept at the next start.

use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use cheq_core::sign::b64;
use indexmap::IndexMap;
use serde_json::{json, Value};
use sha2::Sha256;
use std::path::{Path, PathBuf};

/// Why sealing or unsealing failed.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("sealed-document key {0}: {1}")]
    Io(String, std::io::Error),
    #[error("the sealed document cannot be opened (its key is gone or it is damaged)")]
    Open,
}

/// The key files, one per sealed decision, and the evidence key.
#[derive(Clone)]
pub struct Sealer {
    dir: PathBuf,
    evidence_key: Vec<u8>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// Key files live in `dir`; `evidence_key` keys the digests kept after.
    pub fn new(dir: &Path, evidence_key: Vec<u8>) -> Self {
        Sealer {
            dir: dir.to_owned(),
            evidence_key,
        }
    }

    /// The key of the digests in redacted evidence.
    pub fn evidence_key(&self) -> &[u8] {
        &self.evidence_key
    }

    fn key_path(&self, nonce: &str) -> PathBuf {
        self.dir
            .join(format!("{}.key", b64::sha256(nonce.as_bytes())))
    }

    /// Seals `document` under a new key written (0600, synced) for `nonce`.
    pub fn seal(&self, nonce: &str, document: &str) -> Result<String, SealError> {
        let key: [u8; 32] = rand::random();
        let path = self.key_path(nonce);
        let _ = std::fs::remove_file(&path);
        cheq_support::keyfile::write_private(&path, &key).map_err(|e| {
            SealError::Io(
                path.display().to_string(),
                std::io::Error::other(e.to_string()),
            )
        })?;
        sync_dir(&self.dir).map_err(|e| SealError::Io(self.dir.display().to_string(), e))?;
        let cipher = ChaCha20Poly1305::new(Key::from_slice(&key));
        let iv: [u8; 12] = rand::random();
        let sealed = cipher
            .encrypt(Nonce::from_slice(&iv), document.as_bytes())
            .map_err(|_| SealError::Open)?;
        let mut out = iv.to_vec();
        out.extend_from_slice(&sealed);
        Ok(b64::encode(out))
    }

    /// Opens a sealed document.
    pub fn open(&self, nonce: &str, sealed: &str) -> Result<String, SealError> {
        let key = std::fs::read(self.key_path(nonce)).map_err(|_| SealError::Open)?;
        if key.len() != 32 {
            return Err(SealError::Open);
        }
        let bytes = b64::decode(sealed).ok_or(SealError::Open)?;
        if bytes.len() < 12 {
            return Err(SealError::Open);
        }
        let cipher = ChaCha20Poly1305::new(Key::from_slice(&key));
        let plain = cipher
            .decrypt(Nonce::from_slice(&bytes[..12]), &bytes[12..])
            .map_err(|_| SealError::Open)?;
        String::from_utf8(plain).map_err(|_| SealError::Open)
    }

    /// Deletes the key of `nonce` (synced): its sealed copies become unreadable.
    pub fn shred(&self, nonce: &str) -> Result<(), SealError> {
        let path = self.key_path(nonce);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SealError::Io(path.display().to_string(), e)),
        }
        sync_dir(&self.dir).map_err(|e| SealError::Io(self.dir.display().to_string(), e))
    }
}

impl Sealer {
    /// Is any key file present?
    pub fn has_keys(&self) -> bool {
        std::fs::read_dir(&self.dir).is_ok_and(|mut entries| {
            entries.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "key")))
        })
    }

    /// Deletes every key file except those of `keep` (nonces); returns how many.
    pub fn sweep(&self, keep: &[String]) -> usize {
        let wanted: std::collections::HashSet<PathBuf> =
            keep.iter().map(|n| self.key_path(n)).collect();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut n = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            let is_key = path.extension().is_some_and(|e| e == "key");
            // Another instance on this data directory may have just sealed
            // a document whose record it has not stored yet: a key is only
            // swept once it is older than any sealing can take.
            let young = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age < SWEEP_MIN_AGE);
            if is_key && !young && !wanted.contains(&path) && std::fs::remove_file(&path).is_ok() {
                n += 1;
            }
        }
        if n > 0 {
            let _ = sync_dir(&self.dir);
        }
        n
    }
}

/// How old a key must be before a sweep may delete it.
pub const SWEEP_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(600);

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::File::open(dir)?.sync_all()
}

/// HMAC-SHA256 under `key`, base64url.
pub fn keyed_digest(key: &[u8], data: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    match <Hmac<Sha256> as Mac>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(data);
            b64::encode(mac.finalize().into_bytes())
        }
        Err(_) => String::new(),
    }
}

/// A keyed digest (HMAC-SHA256 under the CS's evidence key, base64url) of
/// each collected value. Keyed, because a private value is often a short
/// number whose plain hash could be reversed by trying them all.
pub fn collected_digests(
    key: &[u8],
    collected: &IndexMap<String, String>,
) -> IndexMap<String, String> {
    collected
        .iter()
        .map(|(k, v)| (k.clone(), keyed_digest(key, v.as_bytes())))
        .collect()
}

/// Redacted evidence of a delivered decision document (see the module docs).
/// Nothing in it lets a guess at a private value be checked without the
/// evidence key: the confirmation signature (which would verify a guessed
/// header) is left out, and the header is kept as a keyed digest.
pub fn redact(key: &[u8], document: &str, collected_hmac: &IndexMap<String, String>) -> String {
    let doc: Value = serde_json::from_str(document).unwrap_or(Value::Null);
    let payload = doc.get("payload").cloned().unwrap_or(Value::Null);
    let sigs = doc
        .get("signatures")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let resource = sigs.first().cloned().unwrap_or(Value::Null);
    let confirmation = sigs.get(1).cloned().unwrap_or(Value::Null);
    let protected = confirmation["protected"].as_str().unwrap_or_default();
    json!({
        "redacted": "the confirmation signature carried values the user marked private; the confirmation service keeps only keyed digests (HMAC-SHA256) of them",
        "resource_signed": {"payload": payload, "signatures": [resource]},
        "confirmation_protected_hmac_sha256": keyed_digest(key, protected.as_bytes()),
        "collected_hmac_sha256": collected_hmac,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_documents_open_until_shredded() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sealer::new(&dir.path().join("keys"), vec![7; 32]);
        let sealed = s.seal("n1", "account 12345678").unwrap();
        assert!(!sealed.contains("12345678"));
        assert_eq!(s.open("n1", &sealed).unwrap(), "account 12345678");
        assert!(s.open("n2", &sealed).is_err());
        s.shred("n1").unwrap();
        assert!(s.open("n1", &sealed).is_err());
        s.shred("n1").unwrap();
    }

    #[test]
    fn sweep_keeps_only_the_keys_still_needed() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sealer::new(dir.path(), vec![7; 32]);
        let a = s.seal("a", "private a").unwrap();
        let b = s.seal("b", "private b").unwrap();
        let old = std::time::SystemTime::now() - 2 * SWEEP_MIN_AGE;
        for name in ["a", "b"] {
            std::fs::File::options()
                .write(true)
                .open(s.key_path(name))
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        // Just sealed by another instance, its record not yet stored: kept.
        let c = s.seal("c", "private c").unwrap();
        assert!(s.has_keys());
        assert_eq!(s.sweep(&["a".to_owned()]), 1);
        assert_eq!(s.open("a", &a).unwrap(), "private a");
        assert!(s.open("b", &b).is_err());
        assert_eq!(s.open("c", &c).unwrap(), "private c");
    }
}
