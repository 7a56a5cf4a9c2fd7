//! The key set on disk (PROTOCOL.md §9 says what it holds, not how): the
//! manifest `<stem>.keyset.json` and the private key files beside the
//! configured `signing_key`, mode 0600, those `cheq keys` writes given the
//! folder's owner. Changes are made under an exclusive lock
//! (`<stem>.keyset.lock`) and written whole (a rename); servers read the
//! manifest again whenever its stamp changes, and one that cannot be read
//! leaves a running server with the keys it read before.

use super::states::Entry;
use super::{KeyRing, KeyRingError, MAX_KEYS};
use crate::keyfile::{publish_private, write_private, KeyFileError};
use cheq_core::sign::SigningKey;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The manifest file: its format version and its keys.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Manifest {
    version: u32,
    keys: Vec<Entry>,
}

/// Identifies one version of the manifest file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    dev: u64,
    ino: u64,
    mtime_ns: i128,
    len: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some(Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            len: meta.len(),
        })
    }
    #[cfg(not(unix))]
    {
        let mtime = meta
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        Some(Stamp {
            dev: 0,
            ino: 0,
            mtime_ns: mtime.as_nanos() as i128,
            len: meta.len(),
        })
    }
}

/// The manifest as last read, with the keys it names.
#[derive(Debug)]
pub(super) struct Loaded {
    pub(super) stamp: Option<Stamp>,
    pub(super) entries: Vec<Entry>,
    /// Parallel to `entries`; `None` where the file could not be read.
    pub(super) keys: Vec<Option<Arc<SigningKey>>>,
}

fn manifest_error(path: &Path, message: impl ToString) -> KeyRingError {
    KeyRingError::Manifest {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

/// A file name that stays in its folder.
fn plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\'])
        && !name.chars().any(char::is_control)
}

/// Gives `path` the owner of `dir` when they differ (`cheq keys` run as
/// root on a server's folder): a key or manifest the server cannot read
/// would stop it signing at the next activation.
fn match_owner(path: &Path, dir: &Path) -> Result<(), KeyRingError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let io = |source: std::io::Error| {
            KeyRingError::File(KeyFileError::Io {
                path: path.display().to_string(),
                source,
            })
        };
        let (d, f) = (
            std::fs::metadata(dir).map_err(io)?,
            std::fs::metadata(path).map_err(io)?,
        );
        if (d.uid(), d.gid()) != (f.uid(), f.gid()) {
            rustix::fs::chown(
                path,
                Some(rustix::fs::Uid::from_raw(d.uid())),
                Some(rustix::fs::Gid::from_raw(d.gid())),
            )
            .map_err(|e| io(std::io::Error::from(e)))?;
        }
    }
    Ok(())
}

/// Holds the key set's exclusive lock until dropped.
struct Locked {
    _file: std::fs::File,
}

/// Where the key set around a configured `signing_key` lives.
pub(super) struct SetPaths {
    pub(super) dir: PathBuf,
    /// The configured key's file name.
    pub(super) name: String,
    /// That name without `.jwk` / `.json`: the manifest is `<stem>.keyset.json`.
    pub(super) stem: String,
}

impl SetPaths {
    pub(super) fn of(signing_key: &Path) -> SetPaths {
        let dir = signing_key
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_owned();
        let name = signing_key
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "signing.jwk".into());
        let stem = name
            .strip_suffix(".jwk")
            .or_else(|| name.strip_suffix(".json"))
            .unwrap_or(&name)
            .to_owned();
        SetPaths { dir, name, stem }
    }

    pub(super) fn manifest(&self) -> PathBuf {
        self.dir.join(format!("{}.keyset.json", self.stem))
    }
}

impl KeyRing {
    /// Writes the set's first manifest (the first start, or a set from
    /// before key sets): the configured key, generated when missing, becomes
    /// the set's one key, active since its file was written (at the latest,
    /// now).
    pub(super) fn create_manifest(
        &self,
        signing_key: &Path,
        kid: Option<&str>,
        prefix: &str,
        name: &str,
    ) -> Result<(), KeyRingError> {
        let key = crate::keyfile::load_or_create_key(signing_key, kid, prefix)?;
        let _lock = self.lock()?;
        if !self.manifest.exists() {
            let now = self.clock.now().timestamp();
            // It has signed since its file was written (not only from
            // now: a server's clock and a `cheq keys` process's agree
            // on the past).
            let since = std::fs::metadata(signing_key)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .and_then(|d| i64::try_from(d.as_secs()).ok())
                .map_or(now, |t| t.min(now));
            let manifest = Manifest {
                version: 1,
                keys: vec![Entry {
                    kid: key.kid().to_owned(),
                    file: name.to_owned(),
                    created: since,
                    activates: since,
                    retired: None,
                }],
            };
            let bytes = serde_json::to_vec_pretty(&manifest)
                .map_err(|e| manifest_error(&self.manifest, e))?;
            // Another instance starting at the same time may win: fine.
            publish_private(&self.manifest, &bytes)?;
        }
        Ok(())
    }

    fn lock(&self) -> Result<Locked, KeyRingError> {
        let io = |source| {
            KeyRingError::File(KeyFileError::Io {
                path: self.lock.display().to_string(),
                source,
            })
        };
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let file = options.open(&self.lock).map_err(io)?;
        #[cfg(unix)]
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io(std::io::Error::from(e)))?;
        Ok(Locked { _file: file })
    }

    /// Reads the manifest and the keys it names (reusing those already read).
    pub(super) fn read(&self) -> Result<Loaded, KeyRingError> {
        let before = stamp(&self.manifest);
        if before.is_some_and(|s| s.len > 1024 * 1024) {
            return Err(manifest_error(&self.manifest, "larger than 1 MiB"));
        }
        let bytes = std::fs::read(&self.manifest).map_err(|source| {
            KeyRingError::File(KeyFileError::Io {
                path: self.manifest.display().to_string(),
                source,
            })
        })?;
        if bytes.len() > 1024 * 1024 {
            return Err(manifest_error(&self.manifest, "larger than 1 MiB"));
        }
        let manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| manifest_error(&self.manifest, e))?;
        if manifest.version != 1 {
            return Err(manifest_error(
                &self.manifest,
                format!("version {} is not understood", manifest.version),
            ));
        }
        if manifest.keys.len() > MAX_KEYS {
            return Err(manifest_error(
                &self.manifest,
                format!("more than {MAX_KEYS} keys"),
            ));
        }
        let reserved = [self.manifest.file_name(), self.lock.file_name()];
        for (i, e) in manifest.keys.iter().enumerate() {
            if reserved
                .iter()
                .any(|r| *r == Some(std::ffi::OsStr::new(&e.file)))
                || manifest.keys[..i].iter().any(|o| o.file == e.file)
            {
                return Err(manifest_error(
                    &self.manifest,
                    format!("key {}: file {:?} is another's", e.kid, e.file),
                ));
            }
            if !plain_file_name(&e.file) {
                return Err(manifest_error(
                    &self.manifest,
                    format!("key {}: file {:?} is not a plain file name", e.kid, e.file),
                ));
            }
            if manifest.keys[..i].iter().any(|o| o.kid == e.kid) {
                return Err(manifest_error(
                    &self.manifest,
                    format!("two keys with kid {}", e.kid),
                ));
            }
        }
        let old = self.snapshot();
        let keys = manifest
            .keys
            .iter()
            .map(|e| {
                if let Some(k) = old
                    .entries
                    .iter()
                    .zip(&old.keys)
                    .find(|(o, k)| o.kid == e.kid && o.file == e.file && k.is_some())
                    .and_then(|(_, k)| k.clone())
                {
                    return Some(k);
                }
                let path = self.dir.join(&e.file);
                match std::fs::read(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|b| SigningKey::from_jwk_bytes(&b).map_err(|e| e.to_string()))
                {
                    Ok(k) if k.kid() == e.kid => Some(Arc::new(k)),
                    Ok(k) => {
                        log::error!(
                            "key set: {} holds kid {}, not {}",
                            path.display(),
                            k.kid(),
                            e.kid
                        );
                        None
                    }
                    Err(err) => {
                        log::error!("key set: cannot read {}: {err}", path.display());
                        None
                    }
                }
            })
            .collect();
        Ok(Loaded {
            stamp: before,
            entries: manifest.keys,
            keys,
        })
    }

    fn snapshot(&self) -> Arc<Loaded> {
        match self.loaded.read() {
            Ok(g) => g.clone(),
            Err(e) => e.into_inner().clone(),
        }
    }

    /// The key set now: read again when the manifest changed on disk.
    pub(super) fn current(&self) -> Arc<Loaded> {
        let loaded = self.snapshot();
        let now = stamp(&self.manifest);
        if now.is_none() || now == loaded.stamp {
            return loaded;
        }
        if self.failed.lock().is_ok_and(|f| *f == now) {
            return loaded;
        }
        match self.read() {
            Ok(fresh) => {
                let fresh = Arc::new(fresh);
                if let Ok(mut guard) = self.loaded.write() {
                    *guard = fresh.clone();
                }
                fresh
            }
            Err(e) => {
                log::error!("key set: keeping the keys read before: {e}");
                if let Ok(mut f) = self.failed.lock() {
                    *f = now;
                }
                loaded
            }
        }
    }

    /// Reads the manifest under the lock, lets `change` edit its entries,
    /// and writes it back whole.
    pub(super) fn change<T>(
        &self,
        change: impl FnOnce(&mut Vec<Entry>, i64) -> Result<T, KeyRingError>,
    ) -> Result<T, KeyRingError> {
        let _lock = self.lock()?;
        let loaded = self.read()?;
        let mut entries = loaded.entries.clone();
        let now = self.clock.now().timestamp();
        let out = change(&mut entries, now)?;
        let manifest = Manifest {
            version: 1,
            keys: entries,
        };
        let bytes =
            serde_json::to_vec_pretty(&manifest).map_err(|e| manifest_error(&self.manifest, e))?;
        let tmp = self.dir.join(format!(
            ".{}.keyset.{}.tmp",
            self.stem,
            cheq_core::sign::b64::encode(rand::random::<[u8; 9]>())
        ));
        write_private(&tmp, &bytes)?;
        match_owner(&tmp, &self.dir)?;
        std::fs::rename(&tmp, &self.manifest).map_err(|source| {
            let _ = std::fs::remove_file(&tmp);
            KeyRingError::File(KeyFileError::Io {
                path: self.manifest.display().to_string(),
                source,
            })
        })?;
        Ok(out)
    }
    /// Writes a fresh private key file and returns its entry.
    pub(super) fn new_key(
        &self,
        entries: &[Entry],
        now: i64,
        activates: i64,
    ) -> Result<Entry, KeyRingError> {
        if entries.len() >= MAX_KEYS {
            return Err(KeyRingError::Full);
        }
        let kid = loop {
            let kid = format!(
                "{}-{}",
                self.prefix,
                cheq_core::sign::b64::encode(rand::random::<[u8; 6]>())
            );
            if !entries.iter().any(|e| e.kid == kid) {
                break kid;
            }
        };
        let key = SigningKey::generate(&kid, &mut rand::rngs::OsRng).map_err(|source| {
            KeyFileError::Key {
                path: kid.clone(),
                source,
            }
        })?;
        let file = format!("{}.{kid}.jwk", self.stem);
        write_private(&self.dir.join(&file), key.to_private_jwk_json().as_bytes())?;
        match_owner(&self.dir.join(&file), &self.dir)?;
        Ok(Entry {
            kid,
            file,
            created: now,
            activates,
            retired: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::ManualClock;
    use chrono::Utc;

    fn ring(dir: &Path, clock: Arc<ManualClock>) -> Arc<KeyRing> {
        KeyRing::open(&dir.join("keys/cs.jwk"), None, "cs", clock).unwrap()
    }

    #[cfg(unix)]
    #[test]
    fn key_files_and_manifest_are_private_and_a_tampered_manifest_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(Utc::now()));
        let server = ring(dir.path(), clock);
        server.rotate(0).unwrap();
        for k in server.list() {
            let mode = std::fs::metadata(&k.file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", k.file.display());
        }
        let mode = std::fs::metadata(server.manifest_path())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(server.manifest_path()).unwrap();
        assert!(!text.contains("\"d\""), "{text}");
        let tampered = text.replacen("\"file\": \"", "\"file\": \"../", 1);
        std::fs::write(server.manifest_path(), tampered).unwrap();
        assert!(server.read().is_err());
        // A running server keeps the keys it read before.
        assert!(server.signer().is_ok());
    }
}
