//! Registered resource servers and initial access tokens on sled
//! ([`crate::registrations`]).
//!
//! | tree | key | value |
//! |---|---|---|
//! | `cs.registrations` | RS origin | [`RegisteredRecord`] |
//! | `cs.registration_tokens` | SHA-256 of the token | when it was issued (8 bytes, big-endian) |
//! | `cs.meta` | `registrations.generation` | the generation (8 bytes, big-endian) |
//!
//! sled opens a database in one process only, so one lock of the process
//! (`WRITES`) makes each read-modify-write of a record atomic, as a row's
//! lock does on PostgreSQL.

use crate::registrations::*;
use crate::sled_json::{decode, encode, Durable};
use crate::sled_store::backend_error;
use crate::StoreError;

const GENERATION: &[u8] = b"registrations.generation";

static WRITES: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(super) struct SledRegistrations {
    pub(super) records: sled::Tree,
    pub(super) tokens: sled::Tree,
    pub(super) meta: sled::Tree,
    pub(super) db: Durable,
}

impl SledRegistrations {
    /// Writes `record` (or removes `origin` when `None`), moves the
    /// generation, and makes both durable.
    fn write(&self, origin: &str, record: Option<&RegisteredRecord>) -> Result<(), StoreError> {
        let err = |e| backend_error("write registration", e);
        match record {
            Some(r) => {
                self.records
                    .insert(origin.as_bytes(), encode(r)?)
                    .map_err(err)?;
            }
            None => {
                self.records.remove(origin.as_bytes()).map_err(err)?;
            }
        }
        self.meta
            .update_and_fetch(GENERATION, |old| {
                let n = old
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map_or(0, u64::from_be_bytes);
                Some(n.wrapping_add(1).to_be_bytes().to_vec())
            })
            .map_err(err)?;
        self.db.flush()
    }
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    // A writer that panicked left no half-done state worth refusing: each
    // write is one insert and one counter update.
    WRITES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Registrations for SledRegistrations {
    fn register(&self, record: &RegisteredRecord) -> Result<RegisterOutcome, StoreError> {
        let _w = lock();
        let old = self.get(&record.origin)?;
        let (outcome, registered_at) = match &old {
            Some(o) if o.status == RegistrationStatus::Blocked => {
                return Ok(RegisterOutcome::Blocked)
            }
            Some(o) => (RegisterOutcome::Refreshed, o.registered_at),
            None => (RegisterOutcome::Created, record.updated_at),
        };
        let new = RegisteredRecord {
            status: RegistrationStatus::Active,
            registered_at,
            ..record.clone()
        };
        self.write(&record.origin, Some(&new))?;
        Ok(outcome)
    }

    fn get(&self, origin: &str) -> Result<Option<RegisteredRecord>, StoreError> {
        self.records
            .get(origin.as_bytes())
            .map_err(|e| backend_error("get registration", e))?
            .map(|b| decode(origin.as_bytes(), &b))
            .transpose()
    }

    fn list(&self) -> Result<Vec<RegisteredRecord>, StoreError> {
        self.records
            .iter()
            .map(|item| {
                let (k, v) = item.map_err(|e| backend_error("list registrations", e))?;
                decode(&k, &v)
            })
            .collect()
    }

    fn block(&self, origin: &str, now: i64) -> Result<bool, StoreError> {
        let _w = lock();
        let new = match self.get(origin)? {
            Some(o) if o.status == RegistrationStatus::Blocked => return Ok(false),
            Some(o) => RegisteredRecord {
                status: RegistrationStatus::Blocked,
                updated_at: now,
                ..o
            },
            None => RegisteredRecord {
                origin: origin.to_owned(),
                name: String::new(),
                resource_prefix: String::new(),
                jwks_uri: String::new(),
                token_endpoint: String::new(),
                status: RegistrationStatus::Blocked,
                registered_at: now,
                updated_at: now,
            },
        };
        self.write(origin, Some(&new))?;
        Ok(true)
    }

    fn unblock(&self, origin: &str, now: i64) -> Result<bool, StoreError> {
        let _w = lock();
        match self.get(origin)? {
            Some(o) if o.status == RegistrationStatus::Blocked => {
                if o.is_placeholder() {
                    self.write(origin, None)?;
                } else {
                    let new = RegisteredRecord {
                        status: RegistrationStatus::Active,
                        updated_at: now,
                        ..o
                    };
                    self.write(origin, Some(&new))?;
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn remove(&self, origin: &str) -> Result<bool, StoreError> {
        let _w = lock();
        if self.get(origin)?.is_none() {
            return Ok(false);
        }
        self.write(origin, None)?;
        Ok(true)
    }

    fn generation(&self) -> Result<i64, StoreError> {
        Ok(self
            .meta
            .get(GENERATION)
            .map_err(|e| backend_error("registration generation", e))?
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map_or(0, |b| u64::from_be_bytes(b) as i64))
    }

    fn restore(&self, record: &RegisteredRecord) -> Result<bool, StoreError> {
        let _w = lock();
        if self.get(&record.origin)?.is_some() {
            return Ok(false);
        }
        self.write(&record.origin, Some(record))?;
        Ok(true)
    }

    fn add_access_token(&self, digest: &str, created: i64) -> Result<bool, StoreError> {
        let added = self
            .tokens
            .compare_and_swap(
                digest.as_bytes(),
                None as Option<&[u8]>,
                Some(&created.to_be_bytes()[..]),
            )
            .map_err(|e| backend_error("add access token", e))?
            .is_ok();
        if added {
            self.db.flush()?;
        }
        Ok(added)
    }

    fn access_tokens(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.tokens
            .iter()
            .map(|item| {
                let (k, v) = item.map_err(|e| backend_error("list access tokens", e))?;
                let corrupt = |reason: &str| StoreError::Corrupt {
                    key: String::from_utf8_lossy(&k).into_owned(),
                    reason: format!("an initial access token's {reason}"),
                };
                let digest = std::str::from_utf8(&k)
                    .map_err(|_| corrupt("digest is not UTF-8"))?
                    .to_owned();
                let created =
                    <[u8; 8]>::try_from(v.as_ref()).map_err(|_| corrupt("time is not 8 bytes"))?;
                Ok((digest, i64::from_be_bytes(created)))
            })
            .collect()
    }

    fn take_access_token(&self, digest: &str) -> Result<bool, StoreError> {
        let taken = self
            .tokens
            .remove(digest.as_bytes())
            .map_err(|e| backend_error("take access token", e))?
            .is_some();
        if taken {
            self.db.flush()?;
        }
        Ok(taken)
    }
}
