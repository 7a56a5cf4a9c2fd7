//! The local admin socket: lets `cheq user add` work while the server runs.
//!
//! sled lets one process open a data directory, so a second process cannot
//! write accounts into it while the CS runs. The CS therefore listens on a
//! Unix socket in its data directory (`admin.sock`, mode 0600: only the owner
//! of the data directory can use it); the CLI hands the account (already
//! hashed) to the running server through it, and opens the database itself
//! when no server answers. One JSON line in, one JSON line out.
//!
//! On PostgreSQL (`database_url`), any number of processes can write, so the
//! CLI writes to the database itself, while instances run.

use super::auth::{add_account, Account};
use crate::store::cs::Accounts;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The CS database inside a data directory.
pub fn db_path(data_dir: &Path) -> PathBuf {
    data_dir.join("cs.sled")
}

/// The admin socket inside a data directory (in a 0700 folder of its own,
/// so that no one else can reach it even before its own mode is set).
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("admin").join("admin.sock")
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    PutUser {
        account: Account,
        replace: bool,
    },
    SetPin {
        username: String,
        pin_hash: String,
    },
    SetPassword {
        username: String,
        password_hash: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    #[serde(default)]
    error: Option<String>,
}

/// Why an admin operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    Refused(String),
    #[error("the data directory {0} is in use by another process, and no server answered on its admin socket")]
    Busy(String),
    #[error("{0}")]
    Io(String),
}

fn apply(accounts: &dyn Accounts, request: Request) -> Result<(), String> {
    match request {
        Request::PutUser { account, replace } => {
            add_account(accounts, &account, replace).map_err(|e| e.to_string())
        }
        Request::SetPin { username, pin_hash } => {
            let mut account = accounts
                .get(&username)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("no user {username:?}"))?;
            account.pin_hash = Some(pin_hash);
            accounts.put(&account, true).map_err(|e| e.to_string())
        }
        Request::SetPassword {
            username,
            password_hash,
        } => {
            let mut account = accounts
                .get(&username)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("no user {username:?}"))?;
            if account.external.is_some() {
                return Err(format!(
                    "{username:?} signs in with an identity provider and has no password here"
                ));
            }
            account.password_hash = password_hash;
            accounts.put(&account, true).map_err(|e| e.to_string())
        }
    }
}

/// Serves the admin socket until the task is dropped.
pub async fn listen(data_dir: &Path, accounts: Arc<dyn Accounts>) -> std::io::Result<()> {
    let path = socket_path(data_dir);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    // A stale socket from an earlier run: we hold the database, so no other
    // server can be using it.
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    loop {
        let (stream, _) = listener.accept().await?;
        let accounts = accounts.clone();
        tokio::spawn(async move {
            use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
            let (read, mut write) = stream.into_split();
            let mut line = String::new();
            let mut reader = tokio::io::BufReader::new(read.take_limit());
            let read = reader.read_line(&mut line);
            match tokio::time::timeout(std::time::Duration::from_secs(5), read).await {
                Ok(Ok(_)) => {}
                _ => return,
            }
            let answer = match serde_json::from_str::<Request>(&line) {
                Ok(request) => {
                    let result =
                        tokio::task::spawn_blocking(move || apply(&*accounts, request)).await;
                    match result {
                        Ok(Ok(())) => Answer { error: None },
                        Ok(Err(e)) => Answer { error: Some(e) },
                        Err(_) => Answer {
                            error: Some("the worker failed".into()),
                        },
                    }
                }
                Err(e) => Answer {
                    error: Some(format!("bad request: {e}")),
                },
            };
            let mut out = serde_json::to_string(&answer).unwrap_or_else(|_| "{}".into());
            out.push('\n');
            let _ = write.write_all(out.as_bytes()).await;
        });
    }
}

trait TakeLimit: Sized {
    fn take_limit(self) -> tokio::io::Take<Self>;
}

impl<R: tokio::io::AsyncRead> TakeLimit for R {
    fn take_limit(self) -> tokio::io::Take<Self> {
        tokio::io::AsyncReadExt::take(self, 64 * 1024)
    }
}

fn send(data_dir: &Path, request: Request) -> Result<(), AdminError> {
    let path = socket_path(data_dir);
    match std::os::unix::net::UnixStream::connect(&path) {
        Ok(mut stream) => {
            let mut line =
                serde_json::to_string(&request).map_err(|e| AdminError::Io(e.to_string()))?;
            line.push('\n');
            stream
                .write_all(line.as_bytes())
                .map_err(|e| AdminError::Io(format!("admin socket: {e}")))?;
            let mut answer = String::new();
            BufReader::new(stream)
                .read_line(&mut answer)
                .map_err(|e| AdminError::Io(format!("admin socket: {e}")))?;
            let answer: Answer = serde_json::from_str(&answer).map_err(|_| {
                AdminError::Io("the server gave no answer on its admin socket".into())
            })?;
            match answer.error {
                Some(e) => Err(AdminError::Refused(e)),
                None => Ok(()),
            }
        }
        Err(_) => {
            // No server: open the database ourselves.
            std::fs::create_dir_all(data_dir)
                .map_err(|e| AdminError::Io(format!("{}: {e}", data_dir.display())))?;
            let db = crate::store::sled_config(&db_path(data_dir))
                .open()
                .map_err(|_| AdminError::Busy(data_dir.display().to_string()))?;
            let store =
                crate::store::sled_cs::open(&db).map_err(|e| AdminError::Io(e.to_string()))?;
            apply(&*store.accounts, request).map_err(AdminError::Refused)?;
            db.flush().map_err(|e| AdminError::Io(e.to_string()))?;
            Ok(())
        }
    }
}

/// Where the CS keeps its accounts: a data directory (sled, maybe held by a
/// running server), or a PostgreSQL database.
#[derive(Debug, Clone)]
pub enum Place {
    DataDir(PathBuf),
    Database(crate::configfile::DatabaseUrl),
}

/// Applies `request` at `place`.
fn apply_at(place: &Place, request: Request) -> Result<(), AdminError> {
    match place {
        Place::DataDir(dir) => send(dir, request),
        Place::Database(url) => {
            url.validate().map_err(|e| AdminError::Io(e.to_string()))?;
            let pg =
                crate::store::pg::Pg::new(&url.0, 1).map_err(|e| AdminError::Io(e.to_string()))?;
            let store =
                crate::store::pg::cs::open(&pg).map_err(|e| AdminError::Io(e.to_string()))?;
            apply(&*store.accounts, request).map_err(AdminError::Refused)
        }
    }
}

/// Adds (or, with `replace`, overwrites) an account, through the running
/// server when there is one.
pub fn put_user(place: &Place, account: Account, replace: bool) -> Result<(), AdminError> {
    apply_at(place, Request::PutUser { account, replace })
}

/// Sets a user's password hash, through the running server when there is
/// one; the user's sessions signed in with the old password end.
pub fn set_password(
    place: &Place,
    username: &str,
    password_hash: String,
) -> Result<(), AdminError> {
    apply_at(
        place,
        Request::SetPassword {
            username: username.to_owned(),
            password_hash,
        },
    )
}

/// Sets a user's voice PIN hash, through the running server when there is one.
pub fn set_pin(place: &Place, username: &str, pin_hash: String) -> Result<(), AdminError> {
    apply_at(
        place,
        Request::SetPin {
            username: username.to_owned(),
            pin_hash,
        },
    )
}
