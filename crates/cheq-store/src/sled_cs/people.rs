//! Who signs in at the CS, on sled: accounts, sessions and the limiter's
//! state.

use crate::cs::*;
use crate::sled_json::{decode, encode, page_after};
use crate::sled_store::backend_error;
use crate::StoreError;

// ---- accounts ----

pub(super) struct SledAccounts {
    pub(super) users: sled::Tree,
}

/// Held by every account writer from its checks to its write. The checks
/// read every account and the write is another operation, so two writers
/// that ran them side by side could both pass and give one e-mail (or a
/// user name and an e-mail of the same text) to two accounts. sled opens a
/// database in one process only (it locks its files), so a lock of the
/// process serializes every writer of its accounts, as PostgreSQL's table
/// lock does across instances. Account writes are rare (a new account, a
/// first sign-in with a provider, a changed e-mail or PIN).
static ACCOUNT_WRITES: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Accounts for SledAccounts {
    fn put(&self, account: &Account, replace: bool) -> Result<(), AccountPutError> {
        let err = |e| AccountPutError::Store(backend_error("put account", e));
        // A writer that panicked held no half-done state: the write is one
        // insert, so a poisoned lock is taken as it is.
        let _writing = ACCOUNT_WRITES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for item in self.users.iter() {
            let (_, bytes) = item.map_err(err)?;
            let Ok(other) = serde_json::from_slice::<Account>(&bytes) else {
                continue;
            };
            if other.username == account.username {
                continue;
            }
            let other_email = other.email.as_deref().unwrap_or("");
            if other_email.eq_ignore_ascii_case(&account.username) {
                return Err(AccountPutError::Ambiguous(account.username.clone()));
            }
            if let Some(email) = &account.email {
                if other.username.eq_ignore_ascii_case(email)
                    || other_email.eq_ignore_ascii_case(email)
                {
                    return Err(AccountPutError::Ambiguous(email.clone()));
                }
            }
        }
        let bytes = encode(account)?;
        let key = account.username.as_bytes();
        if replace {
            self.users.insert(key, bytes).map_err(err)?;
        } else {
            let swapped = self
                .users
                .compare_and_swap(key, None as Option<&[u8]>, Some(bytes))
                .map_err(err)?;
            if swapped.is_err() {
                return Err(AccountPutError::Exists(account.username.clone()));
            }
        }
        self.users.flush().map_err(err)?;
        Ok(())
    }

    fn get(&self, username: &str) -> Result<Option<Account>, StoreError> {
        self.users
            .get(username.as_bytes())
            .map_err(|e| backend_error("get account", e))?
            .map(|b| decode(username.as_bytes(), &b))
            .transpose()
    }

    /// A scan, as the writers' checks are: one machine's accounts are few.
    fn by_handle(&self, handle: &str) -> Result<Option<Account>, StoreError> {
        for item in self.users.iter() {
            let (key, bytes) = item.map_err(|e| backend_error("account by handle", e))?;
            let account: Account = decode(&key, &bytes)?;
            if account.user_handle.as_deref() == Some(handle) {
                return Ok(Some(account));
            }
        }
        Ok(None)
    }

    fn list_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<Account>, StoreError> {
        page_after(&self.users, after, limit, "list accounts")?
            .into_iter()
            .map(|(k, v)| decode(&k, &v))
            .collect()
    }
}

// ---- sessions ----

pub(super) struct SledSessions {
    pub(super) tree: sled::Tree,
}

impl Sessions for SledSessions {
    fn put(&self, key: &[u8; 32], session: &Session) -> Result<(), StoreError> {
        self.tree
            .insert(key, encode(session)?)
            .map_err(|e| backend_error("put session", e))?;
        Ok(())
    }

    fn get(&self, key: &[u8; 32]) -> Result<Option<Session>, StoreError> {
        let Some(bytes) = self
            .tree
            .get(key)
            .map_err(|e| backend_error("get session", e))?
        else {
            return Ok(None);
        };
        match serde_json::from_slice::<Session>(&bytes) {
            Ok(s) => Ok(Some(s)),
            Err(_) => {
                // An unreadable session is no session.
                self.remove(key)?;
                Ok(None)
            }
        }
    }

    fn remove(&self, key: &[u8; 32]) -> Result<(), StoreError> {
        self.tree
            .remove(key)
            .map_err(|e| backend_error("remove session", e))?;
        Ok(())
    }

    fn collect_expired(&self, now: i64) -> Result<usize, StoreError> {
        let mut n = 0;
        for entry in self.tree.iter() {
            let (k, v) = entry.map_err(|e| backend_error("collect sessions", e))?;
            let dead = serde_json::from_slice::<Session>(&v).map_or(true, |s| s.expires <= now);
            if dead {
                self.tree
                    .remove(k)
                    .map_err(|e| backend_error("collect sessions", e))?;
                n += 1;
            }
        }
        Ok(n)
    }
}

// ---- limiter state ----

pub(super) struct SledLimits {
    pub(super) tree: sled::Tree,
}

impl Limits for SledLimits {
    fn get(&self, key: &str) -> Result<Option<LimitState>, StoreError> {
        self.tree
            .get(key.as_bytes())
            .map_err(|e| backend_error("get limit", e))?
            .map(|b| decode(key.as_bytes(), &b))
            .transpose()
    }

    fn update(
        &self,
        key: &str,
        f: &mut dyn FnMut(Option<LimitState>) -> Option<LimitState>,
    ) -> Result<Option<LimitState>, StoreError> {
        loop {
            let old = self
                .tree
                .get(key.as_bytes())
                .map_err(|e| backend_error("update limit", e))?;
            // An unreadable state counts as none (a limiter must not wedge).
            let state = old
                .as_ref()
                .and_then(|b| serde_json::from_slice::<LimitState>(b).ok());
            let new = f(state);
            let bytes = new.as_ref().map(encode).transpose()?;
            let swapped = self
                .tree
                .compare_and_swap(key.as_bytes(), old, bytes)
                .map_err(|e| backend_error("update limit", e))?;
            if swapped.is_ok() {
                return Ok(new);
            }
        }
    }

    fn collect(&self, cutoff: i64) -> Result<usize, StoreError> {
        let mut n = 0;
        for entry in self.tree.iter() {
            let (k, v) = entry.map_err(|e| backend_error("collect limits", e))?;
            let dead = serde_json::from_slice::<LimitState>(&v).map_or(true, |s| {
                s.last_failure < cutoff && s.locked_until <= cutoff
            });
            if dead {
                self.tree
                    .remove(k)
                    .map_err(|e| backend_error("collect limits", e))?;
                n += 1;
            }
        }
        Ok(n)
    }
}
