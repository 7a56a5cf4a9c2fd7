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

use crate::keyfile::{publish_private, write_private, KeyFileError};
use crate::sign::{Jwks, KeySource, KeyState, PublicKey, SigningKey};
use crate::time::Clock;
use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// How long a key stays published after its last signature: the longest
/// CHEQ lifetime (24 h, §4) plus the clock skew (60 s).
pub const RETIRING_SECS: i64 = 24 * 3600 + 60;

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

/// One key of the manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Entry {
    kid: String,
    /// The private JWK's file name, in the manifest's folder.
    file: String,
    /// Unix seconds.
    created: i64,
    /// Unix seconds: it signs from then (if no later key has started).
    activates: i64,
    /// Unix seconds: it was told to stop signing then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retired: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Manifest {
    version: u32,
    keys: Vec<Entry>,
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

/// The state of every entry at `now`, and when each stopped signing.
fn states(entries: &[Entry], now: i64) -> Vec<(KeyState, Option<i64>)> {
    // The active key: the latest to have started (later in the list wins a
    // tie) among those not retired by now.
    let order = |i: usize| (entries[i].activates, i);
    let active = (0..entries.len())
        .filter(|&i| entries[i].activates <= now && entries[i].retired.map_or(true, |r| r > now))
        .max_by_key(|&i| order(i));
    (0..entries.len())
        .map(|i| {
            let e = &entries[i];
            if Some(i) == active {
                return (KeyState::Active, None);
            }
            // Superseded when a key that comes after it in order started.
            let superseded = (0..entries.len())
                .filter(|&j| {
                    order(j) > order(i)
                        && entries[j].activates <= now
                        // A key retired before it started never signed.
                        && entries[j].retired.map_or(true, |r| r > entries[j].activates)
                })
                .map(|j| entries[j].activates)
                .min();
            let retired = e.retired.filter(|&r| r <= now);
            let stopped = match (retired, superseded) {
                (Some(r), Some(s)) => Some(r.min(s)),
                (r, s) => r.or(s),
            };
            match stopped {
                None => (KeyState::New, None),
                Some(s) if now < s.saturating_add(RETIRING_SECS) => (KeyState::Retiring, Some(s)),
                Some(s) => (KeyState::Retired, Some(s)),
            }
        })
        .collect()
}

fn time(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(secs, 0).single().unwrap_or_default()
}

/// Identifies one version of the manifest file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
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
struct Loaded {
    stamp: Option<Stamp>,
    entries: Vec<Entry>,
    /// Parallel to `entries`; `None` where the file could not be read.
    keys: Vec<Option<Arc<SigningKey>>>,
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

/// Where `kid` is in the manifest.
fn index_of(entries: &[Entry], kid: &str) -> Result<usize, KeyRingError> {
    entries
        .iter()
        .position(|e| e.kid == kid)
        .ok_or_else(|| KeyRingError::UnknownKid(kid.to_owned()))
}

/// Holds the key set's exclusive lock until dropped.
struct Locked {
    _file: std::fs::File,
}

/// Where the key set around a configured `signing_key` lives.
struct SetPaths {
    dir: PathBuf,
    /// The configured key's file name.
    name: String,
    /// That name without `.jwk` / `.json`: the manifest is `<stem>.keyset.json`.
    stem: String,
}

impl SetPaths {
    fn of(signing_key: &Path) -> SetPaths {
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

    fn manifest(&self) -> PathBuf {
        self.dir.join(format!("{}.keyset.json", self.stem))
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
            // The first start (or a set from before key sets): the configured
            // key becomes the set's one key, active from now.
            let key = crate::keyfile::load_or_create_key(signing_key, kid, prefix)?;
            let _lock = ring.lock()?;
            if !ring.manifest.exists() {
                let now = ring.clock.now().timestamp();
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
                        file: name.clone(),
                        created: since,
                        activates: since,
                        retired: None,
                    }],
                };
                let bytes = serde_json::to_vec_pretty(&manifest)
                    .map_err(|e| manifest_error(&ring.manifest, e))?;
                // Another instance starting at the same time may win: fine.
                publish_private(&ring.manifest, &bytes)?;
            }
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
    fn read(&self) -> Result<Loaded, KeyRingError> {
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
    fn current(&self) -> Arc<Loaded> {
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

    /// Reads the manifest under the lock, lets `change` edit its entries,
    /// and writes it back whole.
    fn change<T>(
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
            crate::sign::b64::encode(rand::random::<[u8; 9]>())
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

    /// Writes a fresh private key file and returns its entry.
    fn new_key(&self, entries: &[Entry], now: i64, activates: i64) -> Result<Entry, KeyRingError> {
        if entries.len() >= MAX_KEYS {
            return Err(KeyRingError::Full);
        }
        let kid = loop {
            let kid = format!(
                "{}-{}",
                self.prefix,
                crate::sign::b64::encode(rand::random::<[u8; 6]>())
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

    fn entry(kid: &str, activates: i64, retired: Option<i64>) -> Entry {
        Entry {
            kid: kid.into(),
            file: format!("{kid}.jwk"),
            created: 0,
            activates,
            retired,
        }
    }

    fn state_names(entries: &[Entry], now: i64) -> Vec<&'static str> {
        states(entries, now)
            .iter()
            .map(|(s, _)| s.as_str())
            .collect()
    }

    #[test]
    fn states_follow_the_clock() {
        let set = [entry("a", 0, None), entry("b", 100, None)];
        assert_eq!(state_names(&set, 50), ["active", "new"]);
        assert_eq!(state_names(&set, 100), ["retiring", "active"]);
        assert_eq!(states(&set, 100)[0].1, Some(100));
        assert_eq!(
            state_names(&set, 100 + RETIRING_SECS - 1),
            ["retiring", "active"]
        );
        assert_eq!(
            state_names(&set, 100 + RETIRING_SECS),
            ["retired", "active"]
        );
        // Retired before it was superseded: it stopped then.
        let set = [
            entry("a", 0, Some(30)),
            entry("b", 40, None),
            entry("c", 100, None),
        ];
        assert_eq!(state_names(&set, 50), ["retiring", "active", "new"]);
        assert_eq!(states(&set, 50)[0].1, Some(30));
        // Nothing active: the only key retired.
        assert_eq!(state_names(&[entry("a", 0, Some(10))], 20), ["retiring"]);
        // A new key retired before it started signing.
        let set = [entry("a", 0, None), entry("b", 100, Some(50))];
        assert_eq!(state_names(&set, 60), ["active", "retiring"]);
        // …and it does not cut short the key that went on signing: when a
        // later key starts, that is when the first one stopped.
        let set = [
            entry("a", 0, None),
            entry("b", 100, Some(50)),
            entry("c", 1_000_000, None),
        ];
        let at = 1_000_000 + 10;
        assert_eq!(state_names(&set, at), ["retiring", "retired", "active"]);
        assert_eq!(states(&set, at)[0].1, Some(1_000_000));
    }

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
