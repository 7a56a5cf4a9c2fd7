//! Keeping no copy of a sensitive value once it is delivered (PROTOCOL.md §8).
//!
//! A decision that carries a `sensitive` collected value must still be stored
//! before delivery (§6: a decision is never lost). sled is log-structured: an
//! overwritten value can stay in its files long after. So such a document is
//! never written in clear: it is sealed (ChaCha20-Poly1305) under a key of its
//! own, kept in a small file beside the database (mode 0600). Once the
//! delivery is final, the record is replaced by redacted evidence (the
//! resource-signed CHEQ, a digest of the confirmation signature and header,
//! and the SHA-256 of each collected value), flushed, and then the key file is
//! deleted, which makes every copy of the ciphertext unreadable. Keys a crash
//! left behind are swept at the next start.

use crate::sign::b64;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use indexmap::IndexMap;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Why sealing or unsealing failed.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("sealed-document key {0}: {1}")]
    Io(String, std::io::Error),
    #[error("the sealed document cannot be opened (its key is gone or it is damaged)")]
    Open,
}

/// The key files, one per sealed decision.
#[derive(Debug, Clone)]
pub struct Sealer {
    dir: PathBuf,
}

impl Sealer {
    pub fn new(dir: &Path) -> Self {
        Sealer {
            dir: dir.to_owned(),
        }
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
        crate::keyfile::write_private(&path, &key).map_err(|e| {
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
            if is_key && !wanted.contains(&path) && std::fs::remove_file(&path).is_ok() {
                n += 1;
            }
        }
        if n > 0 {
            let _ = sync_dir(&self.dir);
        }
        n
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::File::open(dir)?.sync_all()
}

/// The SHA-256 (base64url) of each collected value.
pub fn collected_digests(collected: &IndexMap<String, String>) -> IndexMap<String, String> {
    collected
        .iter()
        .map(|(k, v)| (k.clone(), b64::sha256(v.as_bytes())))
        .collect()
}

/// Redacted evidence of a delivered decision document (see the module docs).
pub fn redact(document: &str, collected_sha256: &IndexMap<String, String>) -> String {
    let doc: Value = serde_json::from_str(document).unwrap_or(Value::Null);
    let payload = doc.get("payload").cloned().unwrap_or(Value::Null);
    let sigs = doc
        .get("signatures")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let resource = sigs.first().cloned().unwrap_or(Value::Null);
    let confirmation = sigs.get(1).cloned().unwrap_or(Value::Null);
    let digest = |v: &Value| {
        v.as_str()
            .map(|s| b64::encode(Sha256::digest(s.as_bytes())))
            .unwrap_or_default()
    };
    json!({
        "redacted": "the confirmation signature carried values the user marked private; the confirmation service keeps only their SHA-256",
        "resource_signed": {"payload": payload, "signatures": [resource]},
        "confirmation_protected_sha256": digest(&confirmation["protected"]),
        "confirmation_signature": confirmation["signature"],
        "collected_sha256": collected_sha256,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_documents_open_until_shredded() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sealer::new(&dir.path().join("keys"));
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
        let s = Sealer::new(dir.path());
        let a = s.seal("a", "private a").unwrap();
        let b = s.seal("b", "private b").unwrap();
        assert_eq!(s.sweep(&["a".to_owned()]), 1);
        assert_eq!(s.open("a", &a).unwrap(), "private a");
        assert!(s.open("b", &b).is_err());
    }
}
