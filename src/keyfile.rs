//! Private key and secret files (PROTOCOL.md §9): read when present, generated
//! when missing, written with mode 0600 and never overwritten.

use crate::sign::{KeyError, SigningKey};
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
        std::fs::create_dir_all(parent).map_err(io(path))?;
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
            crate::sign::b64::encode(rand::random::<[u8; 6]>())
        ),
    };
    let key =
        SigningKey::generate(&kid, &mut rand::rngs::OsRng).map_err(|source| KeyFileError::Key {
            path: path.display().to_string(),
            source,
        })?;
    write_private(path, key.to_private_jwk_json().as_bytes())?;
    log::info!("generated signing key {} at {}", key.kid(), path.display());
    Ok(key)
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
    let secret = crate::sign::b64::encode(rand::random::<[u8; 32]>()).into_bytes();
    write_private(path, &secret)?;
    Ok(secret)
}
