//! `cheq keygen --kid KID --dir DIR`: makes a new Ed25519 signing key
//! (PROTOCOL.md §9).
//!
//! Writes `DIR/KID.jwk`, the private JWK, created with mode 0600 and never
//! overwriting an existing file, and `DIR/KID.pub.jwk`, the public JWK (mode
//! 0644, also never overwritten). DIR is created (mode 0700) when missing.
//! Prints the public JWK's path; the private key is never printed.

use super::{write_out, CliError};
use crate::sign::SigningKey;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Make a new Ed25519 signing key.
///
/// Writes DIR/KID.jwk (private, mode 0600) and DIR/KID.pub.jwk (public), and
/// prints the public key's path. An existing key is never overwritten.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Key id: letters, digits, '.', '_' and '-' (not starting with '.'); also the file name.
    #[arg(long, value_name = "KID", value_parser = parse_kid)]
    pub kid: String,
    /// Directory for the key files (created, mode 0700, if missing).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
}

/// A key id that is also a safe file name.
fn parse_kid(kid: &str) -> Result<String, String> {
    let ok = !kid.is_empty()
        && kid.len() <= 128
        && !kid.starts_with('.')
        && kid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(kid.to_owned())
    } else {
        Err("a key id is 1 to 128 of A-Z a-z 0-9 . _ - and does not start with '.'".to_owned())
    }
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&args.dir)
        .map_err(|source| CliError::Write {
            path: args.dir.display().to_string(),
            source,
        })?;
    let private_path = args.dir.join(format!("{}.jwk", args.kid));
    let public_path = args.dir.join(format!("{}.pub.jwk", args.kid));
    // Refuse before generating anything if either file is already there.
    for path in [&private_path, &public_path] {
        if fs::symlink_metadata(path).is_ok() {
            return Err(CliError::Exists(path.display().to_string()));
        }
    }

    let key = SigningKey::generate(&args.kid, &mut rand_core::OsRng)?;
    let private = key.to_private_jwk_json();
    let public = match serde_json::to_string_pretty(&key.public_jwk()) {
        Ok(text) => text + "\n",
        Err(e) => return Err(CliError::Internal(e.to_string())),
    };

    write_new(&private_path, private.as_bytes(), 0o600)?;
    if let Err(e) = write_new(&public_path, public.as_bytes(), 0o644) {
        // Do not leave a private key without its public half.
        let _ = fs::remove_file(&private_path);
        return Err(e);
    }
    write_out(out, &format!("{}\n", public_path.display()))
}

/// Creates `path` (which must not exist) with `mode` and writes `bytes` to it,
/// durably. A partly written file is removed.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), CliError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|source| match source.kind() {
            io::ErrorKind::AlreadyExists => CliError::Exists(path.display().to_string()),
            _ => CliError::Write {
                path: path.display().to_string(),
                source,
            },
        })?;
    if let Err(source) = file.write_all(bytes).and_then(|()| file.sync_all()) {
        drop(file);
        let _ = fs::remove_file(path);
        return Err(CliError::Write {
            path: path.display().to_string(),
            source,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_kid;

    #[test]
    fn kid_must_be_a_safe_file_name() {
        assert!(parse_kid("rs-2026.1_a").is_ok());
        for bad in ["", ".hidden", "../x", "a/b", "a b", "k\n"] {
            assert!(parse_kid(bad).is_err(), "{bad:?}");
        }
    }
}
