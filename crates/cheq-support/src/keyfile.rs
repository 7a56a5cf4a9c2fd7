//! Private key and secret files (PROTOCOL.md §9): read when present, generated
//! when missing, written with mode 0600 and never overwritten; and the data
//! directories that hold them and the databases: 0700, and a server refuses
//! to start in one that is open to others.

use cheq_core::sign::{KeyError, SigningKey};
use std::io::Write;
use std::path::Path;

/// Why a key or secret file could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Key {
        path: String,
        #[source]
        source: KeyError,
    },
    #[error("{path} is open to others (mode {mode:o}): its keys, hashes and decisions must be its owner's alone; run `chmod 700 {path}`")]
    OpenToOthers { path: String, mode: u32 },
    #[error("{path} is open to others (mode {mode:o}): a secret others may read is no secret; run `chmod 600 {path}`")]
    SecretOpenToOthers { path: String, mode: u32 },
}

/// Makes every file and folder this process creates its owner's alone
/// (umask 0077): sled's files, sealed-document keys, sockets, logs.
pub fn private_umask() {
    #[cfg(unix)]
    {
        rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    }
}

/// Creates `dir` and its missing parents with mode 0700, or checks that an
/// existing `dir` is not open to others (no group or other permission bits).
pub fn ensure_private_dir(dir: &Path) -> Result<(), KeyFileError> {
    if !dir.exists() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder.create(dir).map_err(io(dir))?;
    }
    if let Some(mode) = open_to_others(dir)? {
        return Err(KeyFileError::OpenToOthers {
            path: dir.display().to_string(),
            mode,
        });
    }
    Ok(())
}

/// The mode of `path` when its group or others have any access to it.
fn open_to_others(path: &Path) -> Result<Option<u32>, KeyFileError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(io(path))?
            .permissions()
            .mode()
            & 0o777;
        if mode & 0o077 != 0 {
            return Ok(Some(mode));
        }
    }
    Ok(None)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KeyFileError + '_ {
    move |source| KeyFileError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Creates `path` (and its parent directories) with mode 0600 and writes
/// `bytes`, flushed; fails if the file exists.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), KeyFileError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.exists() {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::DirBuilderExt;
                builder.mode(0o700);
            }
            builder.create(parent).map_err(io(path))?;
        }
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(io(path))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(io(path))
}

/// Reads the signing key at `path`, or generates one (kid `kid`, or
/// `<prefix>-<random>`) and writes it there.
pub fn load_or_create_key(
    path: &Path,
    kid: Option<&str>,
    prefix: &str,
) -> Result<SigningKey, KeyFileError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            return SigningKey::from_jwk_bytes(&bytes).map_err(|source| KeyFileError::Key {
                path: path.display().to_string(),
                source,
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(path)(e)),
    }
    let kid = match kid {
        Some(k) => k.to_owned(),
        None => format!(
            "{prefix}-{}",
            cheq_core::sign::b64::encode(rand::random::<[u8; 6]>())
        ),
    };
    let key =
        SigningKey::generate(&kid, &mut rand::rngs::OsRng).map_err(|source| KeyFileError::Key {
            path: path.display().to_string(),
            source,
        })?;
    if !publish_private(path, key.to_private_jwk_json().as_bytes())? {
        // Another instance starting at the same time wrote it first.
        return load_or_create_key(path, None, prefix);
    }
    log::info!("generated signing key {} at {}", key.kid(), path.display());
    Ok(key)
}

/// Writes `bytes` to `path` (mode 0600) whole or not at all: into a
/// temporary file first, then linked into place only if `path` does not
/// exist. Returns `false` when `path` existed (someone else's file wins), so
/// that instances starting together on one data directory agree on one
/// generated secret, and none ever reads a half-written one.
pub fn publish_private(path: &Path, bytes: &[u8]) -> Result<bool, KeyFileError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(
        ".{name}.{}.tmp",
        cheq_core::sign::b64::encode(rand::random::<[u8; 9]>())
    ));
    write_private(&tmp, bytes)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io(path)(e)),
    }
}

/// Reads a secret file, or generates 32 random bytes (base64url) into it.
pub fn load_or_create_secret(path: &Path) -> Result<Vec<u8>, KeyFileError> {
    match std::fs::read(path) {
        Ok(bytes) if bytes.len() >= 32 => return Ok(bytes),
        Ok(_) => {
            return Err(io(path)(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "secret file is shorter than 32 bytes",
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(path)(e)),
    }
    let secret = cheq_core::sign::b64::encode(rand::random::<[u8; 32]>()).into_bytes();
    if publish_private(path, &secret)? {
        Ok(secret)
    } else {
        // Another instance starting at the same time wrote it first.
        load_or_create_secret(path)
    }
}

/// A bearer secret read from (or generated into) a file: what a client
/// must present whole (`GET /metrics` of either server, the MCP bridge).
/// Its `Debug` shows nothing of it, and its bytes are wiped when dropped.
pub struct BearerSecret(zeroize::Zeroizing<Vec<u8>>);

impl std::fmt::Debug for BearerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerSecret(..)")
    }
}

impl BearerSecret {
    /// The secret of the file at `path`, made (0600, 32 random bytes in
    /// base64url) when there is none. A file edited by hand may end with a
    /// newline; what is left must still be 32 bytes or more.
    pub fn load_or_create(path: &Path) -> Result<BearerSecret, KeyFileError> {
        let bytes = zeroize::Zeroizing::new(load_or_create_secret(path)?);
        // A token others may read is not a secret (one written by hand with
        // the usual 0644, say): refused, as ssh refuses such a key.
        if let Some(mode) = open_to_others(path)? {
            return Err(KeyFileError::SecretOpenToOthers {
                path: path.display().to_string(),
                mode,
            });
        }
        let token = bytes.trim_ascii();
        if token.len() < 32 {
            return Err(io(path)(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the token is shorter than 32 bytes",
            )));
        }
        Ok(BearerSecret(zeroize::Zeroizing::new(token.to_vec())))
    }

    /// Whether `presented` is this secret (compared in constant time).
    pub fn matches(&self, presented: &[u8]) -> bool {
        cheq_core::sign::same_secret(presented, &self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_starting_together_agree_on_one_secret_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("session.secret");
        let key = dir.path().join("cs.jwk");
        let (secrets, kids): (Vec<_>, Vec<_>) = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        (
                            load_or_create_secret(&secret).unwrap(),
                            load_or_create_key(&key, None, "cs")
                                .unwrap()
                                .kid()
                                .to_owned(),
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).unzip()
        });
        assert!(secrets.iter().all(|s| *s == secrets[0]));
        assert!(kids.iter().all(|k| *k == kids[0]));
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[cfg(unix)]
    #[test]
    fn data_directories_are_made_private_and_open_ones_refused() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let made = root.path().join("a/b/data");
        ensure_private_dir(&made).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&made), 0o700);
        ensure_private_dir(&made).unwrap();
        for open in [0o755, 0o750, 0o701, 0o707] {
            std::fs::set_permissions(&made, std::fs::Permissions::from_mode(open)).unwrap();
            let err = ensure_private_dir(&made).unwrap_err().to_string();
            assert!(
                err.contains("open to others") && err.contains("chmod 700"),
                "{err}"
            );
        }
        let key = root.path().join("k/deeper/key.secret");
        write_private(&key, b"x").unwrap();
        assert_eq!(mode(&key), 0o600);
        assert_eq!(mode(key.parent().unwrap()), 0o700);
    }
}
