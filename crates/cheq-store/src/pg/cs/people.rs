//! Who signs in at the CS, in PostgreSQL: accounts (`cs_accounts`),
//! sessions (`cs_sessions`) and the limiter's state (`cs_limits`).

use crate::cs::*;
use crate::pg::{backend, client, db_error, decode, encode, pooled, Pg, CALL_TIMEOUT};
use crate::StoreError;

// ---- accounts ----

pub(super) struct PgAccounts(pub(super) Pg);

impl Accounts for PgAccounts {
    fn put(&self, account: &Account, replace: bool) -> Result<(), AccountPutError> {
        let username = account.username.clone();
        let name_fold = account.username.to_ascii_lowercase();
        let email = account.email.clone();
        let email_fold = account.email.as_ref().map(|e| e.to_ascii_lowercase());
        let body = encode(account)?;
        self.0
            .call_pooled("put account", CALL_TIMEOUT, false, move |pool| async move {
                let err = db_error("put account");
                let mut c = pooled(&pool, "put account").await?;
                let tx = c.transaction().await.map_err(&err)?;
                // One account writer at a time, on every instance: the
                // checks below then see every other account. Readers go on.
                tx.batch_execute("LOCK TABLE cs_accounts IN SHARE ROW EXCLUSIVE MODE")
                    .await
                    .map_err(&err)?;
                // No user name may be another account's e-mail…
                let clash = tx
                    .query_opt(
                        "SELECT 1 FROM cs_accounts WHERE username <> $1 AND email_fold = $2",
                        &[&username, &name_fold],
                    )
                    .await
                    .map_err(&err)?;
                if clash.is_some() {
                    return Ok(Err(AccountPutError::Ambiguous(username)));
                }
                // …and no e-mail another account's name or e-mail.
                if let (Some(email), Some(fold)) = (&email, &email_fold) {
                    let clash = tx
                        .query_opt(
                            "SELECT 1 FROM cs_accounts WHERE username <> $1
                             AND (username_fold = $2 OR email_fold = $2)",
                            &[&username, fold],
                        )
                        .await
                        .map_err(&err)?;
                    if clash.is_some() {
                        return Ok(Err(AccountPutError::Ambiguous(email.clone())));
                    }
                }
                let sql = if replace {
                    "INSERT INTO cs_accounts (username, username_fold, email_fold, body)
                     VALUES ($1, $2, $3, $4)
                     ON CONFLICT (username) DO UPDATE SET username_fold = EXCLUDED.username_fold,
                        email_fold = EXCLUDED.email_fold, body = EXCLUDED.body"
                } else {
                    "INSERT INTO cs_accounts (username, username_fold, email_fold, body)
                     VALUES ($1, $2, $3, $4) ON CONFLICT (username) DO NOTHING"
                };
                let n = tx
                    .execute(sql, &[&username, &name_fold, &email_fold, &body])
                    .await
                    .map_err(&err)?;
                if n == 0 {
                    return Ok(Err(AccountPutError::Exists(username)));
                }
                tx.commit().await.map_err(&err)?;
                Ok(Ok(()))
            })
            .map_err(AccountPutError::Store)?
    }

    fn get(&self, username: &str) -> Result<Option<Account>, StoreError> {
        self.0.json_by_key(
            "get account",
            "SELECT body FROM cs_accounts WHERE username = $1",
            username,
        )
    }

    fn by_handle(&self, handle: &str) -> Result<Option<Account>, StoreError> {
        self.0.json_by_key(
            "account by handle",
            "SELECT body FROM cs_accounts WHERE (body::jsonb ->> 'user_handle') = $1",
            handle,
        )
    }

    fn list_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<Account>, StoreError> {
        self.0.page(
            "list accounts",
            "SELECT username, body FROM cs_accounts",
            "username",
            after,
            limit,
            |row| decode(row.get("username"), row.get::<_, &str>("body")),
        )
    }
}

// ---- sessions ----

pub(super) struct PgSessions(pub(super) Pg);

impl Sessions for PgSessions {
    fn put(&self, key: &[u8; 32], session: &Session) -> Result<(), StoreError> {
        // Not durable: a session lost in a crash means signing in again.
        self.0.put_json(
            "put session",
            "INSERT INTO cs_sessions (key, expires, body) VALUES ($1, $2, $3)
             ON CONFLICT (key) DO UPDATE SET expires = EXCLUDED.expires,
                body = EXCLUDED.body",
            true,
            key.to_vec(),
            session.expires,
            encode(session)?,
        )
    }

    fn get(&self, key: &[u8; 32]) -> Result<Option<Session>, StoreError> {
        let key = key.to_vec();
        self.0.call("get session", move |pool| async move {
            let err = db_error("get session");
            let c = client(&pool, "get session").await?;
            let s = c
                .prepare_cached("SELECT body FROM cs_sessions WHERE key = $1")
                .await
                .map_err(&err)?;
            let Some(row) = c.query_opt(&s, &[&key]).await.map_err(&err)? else {
                return Ok(None);
            };
            match serde_json::from_str::<Session>(row.get(0)) {
                Ok(session) => Ok(Some(session)),
                Err(_) => {
                    // An unreadable session is no session.
                    c.execute("DELETE FROM cs_sessions WHERE key = $1", &[&key])
                        .await
                        .map_err(&err)?;
                    Ok(None)
                }
            }
        })
    }

    fn remove(&self, key: &[u8; 32]) -> Result<(), StoreError> {
        let key = key.to_vec();
        self.0.call("remove session", move |pool| async move {
            let c = client(&pool, "remove session").await?;
            c.execute("DELETE FROM cs_sessions WHERE key = $1", &[&key])
                .await
                .map_err(db_error("remove session"))?;
            Ok(())
        })
    }

    fn collect_expired(&self, now: i64) -> Result<usize, StoreError> {
        self.0.delete_where(
            "collect sessions",
            "DELETE FROM cs_sessions WHERE expires <= $1",
            now,
        )
    }
}

// ---- limiter state ----

pub(super) struct PgLimits(pub(super) Pg);

/// How often [`Limits::update`] retries a lost compare-and-set.
const CAS_ATTEMPTS: usize = 64;

impl PgLimits {
    fn read(&self, key: &str) -> Result<Option<String>, StoreError> {
        // Limiter keys join their parts with NUL: bytes, not text.
        self.0.text_by_key(
            "get limit",
            "SELECT body FROM cs_limits WHERE key = $1",
            key.as_bytes().to_vec(),
        )
    }

    /// Replaces `old` by `new` under `key` if `old` is still there.
    fn swap(
        &self,
        key: &str,
        old: Option<String>,
        new: Option<&LimitState>,
    ) -> Result<bool, StoreError> {
        let key = key.as_bytes().to_vec();
        let new = new
            .map(|s| Ok::<_, StoreError>((s.last_failure, s.locked_until, encode(s)?)))
            .transpose()?;
        // Not durable: a crash may forgive a few failures; every instance
        // sees the new state at once.
        self.0.call_lazy("update limit", move |pool| async move {
            let err = db_error("update limit");
            let c = client(&pool, "update limit").await?;
            let n = match (&old, &new) {
                (None, None) => return Ok(true),
                (None, Some((last, until, body))) => c
                    .execute(
                        "INSERT INTO cs_limits (key, last_failure, locked_until, body)
                         VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO NOTHING",
                        &[&key, last, until, body],
                    )
                    .await
                    .map_err(&err)?,
                (Some(old), Some((last, until, body))) => c
                    .execute(
                        "UPDATE cs_limits SET last_failure = $3, locked_until = $4, body = $5
                         WHERE key = $1 AND body = $2",
                        &[&key, old, last, until, body],
                    )
                    .await
                    .map_err(&err)?,
                (Some(old), None) => c
                    .execute(
                        "DELETE FROM cs_limits WHERE key = $1 AND body = $2",
                        &[&key, old],
                    )
                    .await
                    .map_err(&err)?,
            };
            Ok(n == 1)
        })
    }
}

impl Limits for PgLimits {
    fn get(&self, key: &str) -> Result<Option<LimitState>, StoreError> {
        self.read(key)?.map(|b| decode(key, &b)).transpose()
    }

    fn update(
        &self,
        key: &str,
        f: &mut dyn FnMut(Option<LimitState>) -> Option<LimitState>,
    ) -> Result<Option<LimitState>, StoreError> {
        for _ in 0..CAS_ATTEMPTS {
            let old = self.read(key)?;
            // An unreadable state counts as none (a limiter must not wedge).
            let state = old
                .as_deref()
                .and_then(|b| serde_json::from_str::<LimitState>(b).ok());
            let new = f(state);
            if self.swap(key, old, new.as_ref())? {
                return Ok(new);
            }
        }
        Err(backend("update limit", "too many concurrent writers"))
    }

    fn collect(&self, cutoff: i64) -> Result<usize, StoreError> {
        self.0.delete_where(
            "collect limits",
            "DELETE FROM cs_limits WHERE last_failure < $1 AND locked_until <= $1",
            cutoff,
        )
    }
}
