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
//! left behind are swept at the next start. What is kept is the evidence's
//! statement (§8.1); the service signs it each time it serves it.

use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use cheq_core::evidence::{split_decided, EvidenceError, RedactedEvidence};
use cheq_core::sign::b64;
use cheq_store::cs::DecisionRecord;
use indexmap::IndexMap;
use serde_json::Value;
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

/// Why redacted evidence could not be made or served.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RedactError {
    #[error("the decided document: {0}")]
    Document(EvidenceError),
    #[error("the decision time {0} is out of range")]
    Time(i64),
    #[error("no evidence is kept: the sealed document could not be opened before its delivery was final")]
    Lost,
}

/// What the stored document of a record is, as evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvidenceKind {
    /// The signed document as delivered (both signatures).
    Signed,
    /// Redacted evidence (§8.1): sealed still, or redacted after delivery.
    Redacted,
    /// Nothing left to serve (a sealed document whose key was lost).
    Lost,
}

/// The members that tell stored documents apart.
#[derive(serde::Deserialize)]
struct Shape {
    signatures: Option<serde::de::IgnoredAny>,
    resource_signed: Option<serde::de::IgnoredAny>,
}

/// What `record`'s stored document is, as evidence.
pub fn evidence_kind(record: &DecisionRecord) -> EvidenceKind {
    if record.sealed {
        return EvidenceKind::Redacted;
    }
    match serde_json::from_str::<Shape>(&record.document) {
        Ok(Shape {
            signatures: Some(_),
            ..
        }) => EvidenceKind::Signed,
        Ok(Shape {
            resource_signed: Some(_),
            ..
        }) => EvidenceKind::Redacted,
        _ => EvidenceKind::Lost,
    }
}

fn decided_at(record: &DecisionRecord) -> Result<chrono::DateTime<chrono::Utc>, RedactError> {
    chrono::DateTime::from_timestamp(record.decided_at, 0)
        .ok_or(RedactError::Time(record.decided_at))
}

/// The statement of redacted evidence (§8.1) of `record`'s decided
/// `document`, in clear. Nothing in it lets a guess at a private value be
/// checked without the evidence key: the confirmation signature (which
/// would verify a guessed header) is left out, and the header is kept as a
/// keyed digest. The confirmation service signs it when it serves it.
pub fn redacted(
    key: &[u8],
    document: &str,
    record: &DecisionRecord,
) -> Result<RedactedEvidence, RedactError> {
    let split = split_decided(document.as_bytes()).map_err(RedactError::Document)?;
    Ok(RedactedEvidence {
        resource_signed: split.resource_signed,
        decision: record.decision,
        decided_at: decided_at(record)?,
        sub: record.user.clone(),
        collected: record.collected_hmac.clone(),
        confirmation_protected: keyed_digest(key, split.confirmation_protected_b64.as_bytes()),
        log_digest: record.log_digest.clone(),
    })
}

/// What a record keeps once its sealed document is delivered: the
/// statement of [`redacted`], as text.
pub fn redact(key: &[u8], document: &str, record: &DecisionRecord) -> Result<String, RedactError> {
    redacted(key, document, record).map(|e| e.to_json())
}

/// The statement a redacted record serves, from what it stores: the
/// resource-signed CHEQ and the digests, in the current format or in the
/// older, unversioned shape (written before the format had a version),
/// completed with what the record knows (the decision, its time, the
/// account and the log digest), which is what the confirmation service
/// signs to.
pub fn served(record: &DecisionRecord) -> Result<RedactedEvidence, RedactError> {
    let stored: Value = serde_json::from_str(&record.document).map_err(|_| RedactError::Lost)?;
    let (Some(resource_signed @ Value::Object(_)), Some(Value::String(protected))) = (
        stored.get("resource_signed"),
        stored.get("confirmation_protected_hmac_sha256"),
    ) else {
        return Err(RedactError::Lost);
    };
    let collected = match stored.get("collected_hmac_sha256") {
        Some(Value::Object(m)) => m
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect(),
        _ => record.collected_hmac.clone(),
    };
    Ok(RedactedEvidence {
        resource_signed: resource_signed.to_string(),
        decision: record.decision,
        decided_at: decided_at(record)?,
        sub: record.user.clone(),
        collected,
        confirmation_protected: protected.clone(),
        log_digest: record.log_digest.clone(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use cheq_core::cheq::{Channel, Decision};
    use cheq_store::cs::Delivery;

    pub(crate) fn record(document: &str, sealed: bool) -> DecisionRecord {
        DecisionRecord {
            nonce: "n".into(),
            user: "alice".into(),
            resource_uri: "https://rs.example/cheq/c/1".into(),
            resource_origin: "https://rs.example".into(),
            operation: "https://rs.example/tools/2b5e:invoke".into(),
            operation_name: "Transfer funds".into(),
            decision: Decision::Accept,
            channel: Channel::Html,
            decided_at: 1_796_637_600,
            expires: 1_796_641_200,
            document: document.into(),
            delivery: Delivery::Delivered {
                decision: Decision::Accept,
                at: 1_796_637_601,
            },
            sealed,
            collected_hmac: [("account".to_owned(), b64::sha256(b"A"))].into(),
            log_digest: Some(b64::sha256(b"L")),
        }
    }

    /// Evidence stored before the format had a version and evidence stored
    /// in the current one serve the same statement, completed from the
    /// record.
    #[test]
    fn stored_evidence_of_either_shape_serves_the_statement() {
        let resource_signed = serde_json::json!({"payload": "cA", "signatures": [{"protected": "cA", "signature": "cw"}]});
        let old = serde_json::json!({
            "redacted": "the confirmation signature carried values the user marked private",
            "resource_signed": resource_signed,
            "confirmation_protected_hmac_sha256": b64::sha256(b"C"),
            "collected_hmac_sha256": {"account": b64::sha256(b"D")},
        })
        .to_string();
        let r = record(&old, false);
        assert_eq!(evidence_kind(&r), EvidenceKind::Redacted);
        let read = served(&r).unwrap();
        assert_eq!(read.decision, Decision::Accept);
        assert_eq!(read.decided_at.timestamp(), r.decided_at);
        assert_eq!(read.sub, "alice");
        assert_eq!(read.log_digest, r.log_digest);
        assert_eq!(read.confirmation_protected, b64::sha256(b"C"));
        assert_eq!(read.collected["account"], b64::sha256(b"D"));
        assert_eq!(
            serde_json::from_str::<Value>(&read.resource_signed).unwrap(),
            resource_signed
        );
        // The statement as stored in the current format serves the same.
        let text = read.to_json();
        assert_eq!(RedactedEvidence::parse(text.as_bytes()).unwrap(), read);
        assert_eq!(served(&record(&text, false)).unwrap(), read);
    }

    #[test]
    fn each_stored_document_is_told_apart() {
        let lost = record(
            "{\"redacted\":\"the sealed document could not be opened\"}",
            false,
        );
        assert_eq!(evidence_kind(&lost), EvidenceKind::Lost);
        assert!(matches!(served(&lost), Err(RedactError::Lost)));
        let signed = record("{\"payload\":\"cA\",\"signatures\":[]}", false);
        assert_eq!(evidence_kind(&signed), EvidenceKind::Signed);
        assert_eq!(
            evidence_kind(&record("sealed bytes", true)),
            EvidenceKind::Redacted
        );
        assert_eq!(
            evidence_kind(&record("not json", false)),
            EvidenceKind::Lost
        );
        // A document that is not a decided one is not redacted.
        assert!(matches!(
            redact(&[7; 32], "{\"payload\":\"cA\"}", &signed),
            Err(RedactError::Document(_))
        ));
    }

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
