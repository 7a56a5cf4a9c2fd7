//! The local admin socket: lets `cheq user add` and `cheq rs` work while the
//! server runs.
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
use crate::store::registrations::{RegisteredRecord, Registrations};
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
    /// Every registered resource server (§16.3).
    RsList,
    RsBlock {
        origin: String,
        now: i64,
    },
    RsUnblock {
        origin: String,
        now: i64,
    },
    RsRemove {
        origin: String,
    },
    /// Keeps a new initial access token, by its digest.
    RsToken {
        digest: String,
        now: i64,
    },
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Answer {
    #[serde(default)]
    error: Option<String>,
    /// What [`Request::RsList`] read.
    #[serde(default)]
    records: Option<Vec<RegisteredRecord>>,
    /// Whether a block, an unblock or a removal changed anything.
    #[serde(default)]
    changed: Option<bool>,
}

/// What an applied request gives back.
#[derive(Debug, Default)]
struct Done {
    records: Option<Vec<RegisteredRecord>>,
    changed: Option<bool>,
}

impl Done {
    fn changed(changed: bool) -> Self {
        Done {
            records: None,
            changed: Some(changed),
        }
    }
}

/// The parts of the store the admin requests write.
#[derive(Clone)]
pub struct AdminStores {
    pub accounts: Arc<dyn Accounts>,
    pub registrations: Arc<dyn Registrations>,
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

fn apply(stores: &AdminStores, request: Request) -> Result<Done, String> {
    let accounts = &*stores.accounts;
    let registrations = &*stores.registrations;
    let store_err = |e: crate::store::StoreError| e.to_string();
    match request {
        Request::PutUser { account, replace } => add_account(accounts, &account, replace)
            .map(|()| Done::default())
            .map_err(|e| e.to_string()),
        Request::SetPin { username, pin_hash } => {
            let mut account = accounts
                .get(&username)
                .map_err(store_err)?
                .ok_or_else(|| format!("no user {username:?}"))?;
            account.pin_hash = Some(pin_hash);
            accounts.put(&account, true).map_err(|e| e.to_string())?;
            Ok(Done::default())
        }
        Request::SetPassword {
            username,
            password_hash,
        } => {
            let mut account = accounts
                .get(&username)
                .map_err(store_err)?
                .ok_or_else(|| format!("no user {username:?}"))?;
            if account.external.is_some() {
                return Err(format!(
                    "{username:?} signs in with an identity provider and has no password here"
                ));
            }
            account.password_hash = password_hash;
            accounts.put(&account, true).map_err(|e| e.to_string())?;
            Ok(Done::default())
        }
        Request::RsList => Ok(Done {
            records: Some(registrations.list().map_err(store_err)?),
            changed: None,
        }),
        Request::RsBlock { origin, now } => registrations
            .block(&origin, now)
            .map(Done::changed)
            .map_err(store_err),
        Request::RsUnblock { origin, now } => registrations
            .unblock(&origin, now)
            .map(Done::changed)
            .map_err(store_err),
        Request::RsRemove { origin } => registrations
            .remove(&origin)
            .map(Done::changed)
            .map_err(store_err),
        Request::RsToken { digest, now } => registrations
            .add_access_token(&digest, now)
            .map(|_| Done::default())
            .map_err(store_err),
    }
}

/// Serves the admin socket until the task is dropped.
pub async fn listen(data_dir: &Path, stores: AdminStores) -> std::io::Result<()> {
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
        let stores = stores.clone();
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
                    let result = tokio::task::spawn_blocking(move || apply(&stores, request)).await;
                    match result {
                        Ok(Ok(done)) => Answer {
                            error: None,
                            records: done.records,
                            changed: done.changed,
                        },
                        Ok(Err(e)) => Answer {
                            error: Some(e),
                            ..Answer::default()
                        },
                        Err(_) => Answer {
                            error: Some("the worker failed".into()),
                            ..Answer::default()
                        },
                    }
                }
                Err(e) => Answer {
                    error: Some(format!("bad request: {e}")),
                    ..Answer::default()
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

fn send(data_dir: &Path, request: Request) -> Result<Done, AdminError> {
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
                None => Ok(Done {
                    records: answer.records,
                    changed: answer.changed,
                }),
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
            let done = apply(&stores_of(&store), request).map_err(AdminError::Refused)?;
            db.flush().map_err(|e| AdminError::Io(e.to_string()))?;
            Ok(done)
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

/// The parts of `store` the admin requests write.
pub fn stores_of(store: &crate::store::cs::CsStore) -> AdminStores {
    AdminStores {
        accounts: store.accounts.clone(),
        registrations: store.registrations.clone(),
    }
}

/// Applies `request` at `place`.
fn apply_at(place: &Place, request: Request) -> Result<Done, AdminError> {
    match place {
        Place::DataDir(dir) => send(dir, request),
        Place::Database(url) => {
            url.validate().map_err(|e| AdminError::Io(e.to_string()))?;
            let pg =
                crate::store::pg::Pg::new(&url.0, 1).map_err(|e| AdminError::Io(e.to_string()))?;
            let store =
                crate::store::pg::cs::open(&pg).map_err(|e| AdminError::Io(e.to_string()))?;
            apply(&stores_of(&store), request).map_err(AdminError::Refused)
        }
    }
}

/// Adds (or, with `replace`, overwrites) an account, through the running
/// server when there is one.
pub fn put_user(place: &Place, account: Account, replace: bool) -> Result<(), AdminError> {
    apply_at(place, Request::PutUser { account, replace }).map(drop)
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
    .map(drop)
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
    .map(drop)
}

/// Every registered resource server (§16.3), through the running server
/// when there is one.
pub fn rs_list(place: &Place) -> Result<Vec<RegisteredRecord>, AdminError> {
    Ok(apply_at(place, Request::RsList)?
        .records
        .unwrap_or_default())
}

/// Blocks `origin` (recorded even when it never registered); `true` when
/// its status changed.
pub fn rs_block(place: &Place, origin: &str, now: i64) -> Result<bool, AdminError> {
    let origin = origin.to_owned();
    Ok(apply_at(place, Request::RsBlock { origin, now })?
        .changed
        .unwrap_or(false))
}

/// Serves a blocked `origin` again; `true` when it was blocked.
pub fn rs_unblock(place: &Place, origin: &str, now: i64) -> Result<bool, AdminError> {
    let origin = origin.to_owned();
    Ok(apply_at(place, Request::RsUnblock { origin, now })?
        .changed
        .unwrap_or(false))
}

/// Forgets `origin`; `true` when it was recorded.
pub fn rs_remove(place: &Place, origin: &str) -> Result<bool, AdminError> {
    let origin = origin.to_owned();
    Ok(apply_at(place, Request::RsRemove { origin })?
        .changed
        .unwrap_or(false))
}

/// Keeps a new initial access token by its `digest`.
pub fn rs_add_token(place: &Place, digest: &str, now: i64) -> Result<(), AdminError> {
    let digest = digest.to_owned();
    apply_at(place, Request::RsToken { digest, now }).map(drop)
}
