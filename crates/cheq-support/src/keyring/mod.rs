//! A server's own signing keys over time (PROTOCOL.md §9): one active key
//! that signs, plus published keys that are `new` (not signing yet) or
//! `retiring` (no longer signing, published until every CHEQ they may have
//! signed has expired).
//!
//! The key set lives next to the configured `signing_key` file `DIR/NAME.jwk`:
//! a manifest `DIR/NAME.keyset.json` lists each key's id, file, and the
//! times it was made, starts signing, and was retired; each further key is a
//! private JWK `DIR/NAME.<kid>.jwk` (mode 0600). States are computed from
//! those times and the clock, so every instance that shares the folder agrees
//! without talking to the others, and an activation needs no one to act.
//!
//! Servers read the manifest again whenever it changes (one `stat` per use);
//! `cheq keys rotate | retire | remove` change it under an exclusive lock and
//! replace it whole (rename), while the servers run.
//!
//! The parts: `states` computes each key's state from the manifest's times
//! and a time (pure: no I/O); `files` reads and writes the manifest and the
//! key files, under the lock, with the folder's owner.

mod files;
mod states;

pub use states::RETIRING_SECS;

use crate::keyfile::KeyFileError;
use crate::time::Clock;
use cheq_core::sign::{Jwks, KeySource, KeyState, PublicKey, SigningKey};
use chrono::{DateTime, Utc};
use files::{Loaded, SetPaths, Stamp};
use states::{index_of, states, time, Entry};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// The default delay between `keys rotate` and the new key's first
/// signature: well beyond the 5 minutes peers may cache a JWKS
/// (`Cache-Control: max-age=300`) and the hour this project's fetcher
/// keeps one at most.
pub const DEFAULT_ACTIVATE_AFTER_SECS: i64 = 2 * 3600;

/// The longest delay `keys rotate --activate-after` accepts (30 days).
pub const MAX_ACTIVATE_AFTER_SECS: i64 = 30 * 24 * 3600;

/// The most keys a set may hold (published or retired but not removed).
pub const MAX_KEYS: usize = 64;

/// Why the key set could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum KeyRingError {
    #[error(transparent)]
    File(#[from] KeyFileError),
    #[error("{path}: {message}")]
    Manifest { path: String, message: String },
    #[error(
        "no key is active: every key is new or retired; run `cheq keys rotate --activate-after 0`"
    )]
    NoActiveKey,
    #[error("the active key {kid} cannot be read from {path}")]
    ActiveKeyUnreadable { kid: String, path: String },
    #[error("no key {0} in this key set (see `cheq keys list`)")]
    UnknownKid(String),
    #[error("key {kid} is {state}: {hint}")]
    Refused {
        kid: String,
        state: KeyState,
        hint: &'static str,
    },
    #[error("--activate-after must be between 0 and {MAX_ACTIVATE_AFTER_SECS} seconds")]
    BadDelay,
    #[error("the key set already holds {MAX_KEYS} keys; remove retired ones first")]
    Full,
}

/// What `keys list` shows of one key: no private material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    pub kid: String,
    pub state: KeyState,
    pub created: DateTime<Utc>,
    /// When it starts (or started) signing.
    pub activates: DateTime<Utc>,
    /// When it stopped signing, if it has.
    pub stopped: Option<DateTime<Utc>>,
    /// Until when it is published, once it has stopped.
    pub published_until: Option<DateTime<Utc>>,
    /// Its private JWK file.
    pub file: PathBuf,
}

/// A server's key set.
pub struct KeyRing {
    dir: PathBuf,
    stem: String,
    prefix: String,
    manifest: PathBuf,
    lock: PathBuf,
    clock: Arc<dyn Clock>,
    loaded: RwLock<Arc<Loaded>>,
    /// The version of the manifest that could not be read (not tried again
    /// until it changes).
    failed: std::sync::Mutex<Option<Stamp>>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing")
            .field("manifest", &self.manifest)
            .finish_non_exhaustive()
    }
}

impl KeyRing {
    /// Whether the key set around `signing_key` has anything yet: its
    /// manifest, or the configured key it would be made from. When not,
    /// [`KeyRing::open`] would generate a key; a command that only reads
    /// (`cheq keys list`) asks this first.
    pub fn exists(signing_key: &Path) -> Result<bool, KeyRingError> {
        let present = |path: &Path| {
            path.try_exists().map_err(|source| {
                KeyRingError::File(KeyFileError::Io {
                    path: path.display().to_string(),
                    source,
                })
            })
        };
        Ok(present(signing_key)? || present(&SetPaths::of(signing_key).manifest())?)
    }

    /// The manifest of the key set around `signing_key` (whether or not it
    /// exists yet).
    pub fn manifest_for(signing_key: &Path) -> PathBuf {
        SetPaths::of(signing_key).manifest()
    }
    /// The key set around `signing_key`: read, or made from that key (which
    /// is generated, kid `kid` or `<prefix>-<random>`, when missing). A
    /// server then asks [`KeyRing::signer`] once, to refuse to start without
    /// an active key; `cheq keys` need not.
    pub fn open(
        signing_key: &Path,
        kid: Option<&str>,
        prefix: &str,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<KeyRing>, KeyRingError> {
        let SetPaths { dir, name, stem } = SetPaths::of(signing_key);
        let ring = KeyRing {
            manifest: SetPaths::of(signing_key).manifest(),
            lock: dir.join(format!("{stem}.keyset.lock")),
            dir,
            stem,
            prefix: prefix.to_owned(),
            clock,
            loaded: RwLock::new(Arc::new(Loaded {
                stamp: None,
                entries: Vec::new(),
                keys: Vec::new(),
            })),
            failed: std::sync::Mutex::new(None),
        };
        if !ring.manifest.exists() {
            ring.create_manifest(signing_key, kid, prefix, &name)?;
        }
        let loaded = ring.read()?;
        if let Ok(mut guard) = ring.loaded.write() {
            *guard = Arc::new(loaded);
        }
        Ok(Arc::new(ring))
    }

    /// The manifest's path.
    pub fn manifest_path(&self) -> &Path {
        &self.manifest
    }

    /// The key that signs now.
    pub fn signer(&self) -> Result<Arc<SigningKey>, KeyRingError> {
        let loaded = self.current();
        let now = self.clock.now().timestamp();
        let states = states(&loaded.entries, now);
        let i = states
            .iter()
            .position(|(s, _)| *s == KeyState::Active)
            .ok_or(KeyRingError::NoActiveKey)?;
        loaded.keys[i]
            .clone()
            .ok_or_else(|| KeyRingError::ActiveKeyUnreadable {
                kid: loaded.entries[i].kid.clone(),
                path: self.dir.join(&loaded.entries[i].file).display().to_string(),
            })
    }

    /// The public keys to publish now (`/.well-known/jwks.json`): the active,
    /// new and retiring ones, each with its state.
    pub fn published(&self) -> Jwks {
        let loaded = self.current();
        let now = self.clock.now().timestamp();
        let keys = states(&loaded.entries, now)
            .into_iter()
            .zip(&loaded.keys)
            .filter(|((s, _), _)| s.is_published())
            .filter_map(|((s, _), k)| k.as_ref().map(|k| k.public_key().with_state(s)))
            .collect();
        // Kids are distinct in a manifest that was read.
        Jwks::new(keys).unwrap_or_default()
    }

    /// Every key of the set, with its state and dates.
    pub fn list(&self) -> Vec<KeyInfo> {
        let loaded = self.current();
        self.infos(&loaded.entries)
    }

    fn infos(&self, entries: &[Entry]) -> Vec<KeyInfo> {
        let now = self.clock.now().timestamp();
        states(entries, now)
            .into_iter()
            .zip(entries)
            .map(|((state, stopped), e)| KeyInfo {
                kid: e.kid.clone(),
                state,
                created: time(e.created),
                activates: time(e.activates),
                stopped: stopped.map(time),
                published_until: stopped.map(|s| time(s.saturating_add(RETIRING_SECS))),
                file: self.dir.join(&e.file),
            })
            .collect()
    }
    /// Makes a new key (mode 0600), published at once and signing from
    /// `activate_after` seconds from now; the key that signs until then
    /// becomes retiring at that moment.
    pub fn rotate(&self, activate_after: i64) -> Result<KeyInfo, KeyRingError> {
        if !(0..=MAX_ACTIVATE_AFTER_SECS).contains(&activate_after) {
            return Err(KeyRingError::BadDelay);
        }
        let kid = self.change(|entries, now| {
            let entry = self.new_key(entries, now, now + activate_after)?;
            let kid = entry.kid.clone();
            entries.push(entry);
            Ok(kid)
        })?;
        self.info(&kid)
    }
    fn info(&self, kid: &str) -> Result<KeyInfo, KeyRingError> {
        self.list()
            .into_iter()
            .find(|k| k.kid == kid)
            .ok_or_else(|| KeyRingError::UnknownKid(kid.to_owned()))
    }

    /// Stops `kid` signing now. When it is the active key, the next `new`
    /// key takes over at once, or a fresh key is made to; that key's id is
    /// returned. The key stays published (retiring) so that what it signed
    /// still verifies: a compromised key is then removed with `--force`.
    pub fn retire(&self, kid: &str) -> Result<Option<KeyInfo>, KeyRingError> {
        let successor = self.change(|entries, now| {
            let states = states(entries, now);
            let i = index_of(entries, kid)?;
            match states[i].0 {
                KeyState::Retiring | KeyState::Retired => Err(KeyRingError::Refused {
                    kid: kid.to_owned(),
                    state: states[i].0,
                    hint: "it signs nothing already",
                }),
                KeyState::New => {
                    entries[i].retired = Some(now);
                    Ok(None)
                }
                KeyState::Active => {
                    entries[i].retired = Some(now);
                    let newest = (0..entries.len())
                        .filter(|&j| states[j].0 == KeyState::New)
                        .min_by_key(|&j| (entries[j].activates, j));
                    let successor = match newest {
                        Some(j) => {
                            entries[j].activates = now;
                            entries[j].kid.clone()
                        }
                        None => {
                            let entry = self.new_key(entries, now, now)?;
                            let kid = entry.kid.clone();
                            entries.push(entry);
                            kid
                        }
                    };
                    Ok(Some(successor))
                }
            }
        })?;
        successor.map(|k| self.info(&k)).transpose()
    }

    /// Removes `kid` from the set and deletes its file. A key that may still
    /// be needed (new or retiring) is kept unless `force`; the active key is
    /// never removed (retire it first).
    pub fn remove(&self, kid: &str, force: bool) -> Result<KeyInfo, KeyRingError> {
        let removed = self.change(|entries, now| {
            let states = states(entries, now);
            let i = index_of(entries, kid)?;
            let state = states[i].0;
            match state {
                KeyState::Active => Err(KeyRingError::Refused {
                    kid: kid.to_owned(),
                    state,
                    hint: "it is the signing key; retire it first (`cheq keys retire`)",
                }),
                KeyState::New | KeyState::Retiring if !force => Err(KeyRingError::Refused {
                    kid: kid.to_owned(),
                    state,
                    hint: "peers may still need it (CHEQs it signed may not have expired); \
                           --force removes it anyway",
                }),
                _ => {
                    let info = self.infos(entries).swap_remove(i);
                    entries.remove(i);
                    Ok(info)
                }
            }
        })?;
        match std::fs::remove_file(&removed.file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(KeyRingError::File(KeyFileError::Io {
                    path: removed.file.display().to_string(),
                    source,
                }))
            }
        }
        Ok(removed)
    }
}

/// The server's own published keys, as trusted for its own signatures.
impl KeySource for KeyRing {
    fn key(&self, kid: &str) -> Option<PublicKey> {
        let loaded = self.current();
        let i = loaded.entries.iter().position(|e| e.kid == kid)?;
        let (state, _) = states(&loaded.entries, self.clock.now().timestamp())[i];
        let key = loaded.keys[i].as_ref()?;
        state
            .is_published()
            .then(|| key.public_key().with_state(state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::ManualClock;
    use chrono::Duration;

    fn ring(dir: &Path, clock: Arc<ManualClock>) -> Arc<KeyRing> {
        KeyRing::open(&dir.join("keys/cs.jwk"), None, "cs", clock).unwrap()
    }

    #[test]
    fn rotate_publishes_at_once_and_signs_after_the_delay() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(Utc::now()));
        let server = ring(dir.path(), clock.clone());
        let admin = ring(dir.path(), clock.clone());
        let old = server.signer().unwrap().kid().to_owned();
        let new = admin.rotate(600).unwrap();
        assert_eq!(new.state, KeyState::New);
        // The running server sees the new key at once, published not signing.
        assert_eq!(server.published().keys().len(), 2);
        assert_eq!(
            server.published().get(&new.kid).unwrap().state(),
            Some(KeyState::New)
        );
        assert_eq!(server.signer().unwrap().kid(), old);
        clock.advance(Duration::seconds(600));
        assert_eq!(server.signer().unwrap().kid(), new.kid);
        assert_eq!(
            server.published().get(&old).unwrap().state(),
            Some(KeyState::Retiring)
        );
        // The old key is trusted for its own CHEQs until it retires.
        assert!(server.key(&old).is_some());
        clock.advance(Duration::seconds(RETIRING_SECS));
        assert!(server.key(&old).is_none());
        assert_eq!(server.published().keys().len(), 1);
        // A retired key may go without --force, and its file goes with it.
        let file = admin.info(&old).unwrap().file;
        admin.remove(&old, false).unwrap();
        assert!(!file.exists());
        assert_eq!(server.list().len(), 1);
    }

    #[test]
    fn retire_stops_signing_now_and_remove_refuses_what_may_be_needed() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(Utc::now()));
        let server = ring(dir.path(), clock.clone());
        let first = server.signer().unwrap().kid().to_owned();
        // Retiring the only key makes a fresh one that signs at once.
        let next = server.retire(&first).unwrap().unwrap();
        assert_eq!(next.state, KeyState::Active);
        assert_eq!(server.signer().unwrap().kid(), next.kid);
        assert!(matches!(
            server.retire(&first),
            Err(KeyRingError::Refused { .. })
        ));
        // With a new key waiting, retiring the active key promotes it.
        let waiting = server.rotate(3600).unwrap();
        let promoted = server.retire(&next.kid).unwrap().unwrap();
        assert_eq!(promoted.kid, waiting.kid);
        assert_eq!(server.signer().unwrap().kid(), waiting.kid);
        // Remove: never the active key; a retiring one only with --force.
        let active = waiting.kid;
        for force in [false, true] {
            assert!(matches!(
                server.remove(&active, force),
                Err(KeyRingError::Refused {
                    state: KeyState::Active,
                    ..
                })
            ));
        }
        assert!(matches!(
            server.remove(&first, false),
            Err(KeyRingError::Refused {
                state: KeyState::Retiring,
                ..
            })
        ));
        server.remove(&first, true).unwrap();
        assert!(server.key(&first).is_none());
        assert!(matches!(
            server.remove(&first, true),
            Err(KeyRingError::UnknownKid(_))
        ));
        assert!(matches!(server.rotate(-1), Err(KeyRingError::BadDelay)));
    }
}
