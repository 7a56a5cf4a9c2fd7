//! Each user's CS and rules (PROTOCOL.md §17) in PostgreSQL: [`Settings`]
//! on `rs_settings` and `rs_hosts`.
//!
//! [`Settings::apply`] is one transaction, on every instance alike: the
//! result is claimed in `rs_executions` first (`INSERT … ON CONFLICT DO
//! NOTHING`: a concurrent apply under the same key waits for this one to
//! end, then finds its result), then the settings move only from the
//! generation expected (`UPDATE … WHERE generation =`, or for a user with
//! none an `INSERT … ON CONFLICT` that updates only a row at generation 0:
//! of racing applies against one generation, the first to write wins and
//! the others find the row moved), and the chosen CS joins the hosts in the
//! same statement. A stale generation rolls the claim back: nothing is
//! written. Each transaction takes its row locks in that order (result,
//! settings, host), so two never wait on each other.
//!
//! The rules are a `json` column: checked as JSON by the database, and kept
//! as the text given (`jsonb` would reorder an object's members), as the
//! store keeps a CHEQ record's action.

use super::super::{backend, client, corrupt, db_error, decode, encode, pooled, Pg, CALL_TIMEOUT};
use crate::rs::{Applied, Settings, UserSettings};
use crate::{Durability, StoreError};
use serde_json::Value;

pub(super) struct PgSettings(pub(super) Pg);

/// Moves the settings of a user with none stored (or stored at generation
/// 0, which only an import could have written): `$1` subject, `$2` CS,
/// `$3` rules, `$4` the new generation. Answers how many rows it wrote.
const WRITE_FIRST: &str = "
WITH written AS (
    INSERT INTO rs_settings (subject, cs, rules, generation)
    VALUES ($1, $2, $3::text::json, $4)
    ON CONFLICT (subject) DO UPDATE
        SET cs = EXCLUDED.cs, rules = EXCLUDED.rules, generation = EXCLUDED.generation
        WHERE rs_settings.generation = 0
    RETURNING cs),
host AS (
    INSERT INTO rs_hosts (issuer) SELECT cs FROM written WHERE cs IS NOT NULL
    ON CONFLICT (issuer) DO NOTHING)
SELECT count(*) FROM written";

/// Moves the settings from generation `$5` to `$4` (the rest as
/// [`WRITE_FIRST`]).
const WRITE_NEXT: &str = "
WITH written AS (
    UPDATE rs_settings SET cs = $2, rules = $3::text::json, generation = $4
    WHERE subject = $1 AND generation = $5
    RETURNING cs),
host AS (
    INSERT INTO rs_hosts (issuer) SELECT cs FROM written WHERE cs IS NOT NULL
    ON CONFLICT (issuer) DO NOTHING)
SELECT count(*) FROM written";

/// Writes the settings as given (`$4`: their generation) and their CS
/// among the hosts.
const RESTORE: &str = "
WITH host AS (
    INSERT INTO rs_hosts (issuer) SELECT $2::text WHERE $2::text IS NOT NULL
    ON CONFLICT (issuer) DO NOTHING)
INSERT INTO rs_settings (subject, cs, rules, generation)
VALUES ($1, $2, $3::text::json, $4)
ON CONFLICT (subject) DO UPDATE
    SET cs = EXCLUDED.cs, rules = EXCLUDED.rules, generation = EXCLUDED.generation";

/// A generation as stored (`bigint`).
fn stored(generation: u64) -> Result<i64, StoreError> {
    i64::try_from(generation)
        .map_err(|_| backend("settings", "a generation past the largest bigint"))
}

/// A generation as read.
fn read(subject: &str, generation: i64) -> Result<u64, StoreError> {
    u64::try_from(generation).map_err(|_| corrupt(subject, "a negative generation"))
}

/// The settings in a row of `rs_settings` (its rules as text).
fn settings_of(subject: &str, row: &tokio_postgres::Row) -> Result<UserSettings, StoreError> {
    Ok(UserSettings {
        cs: row.get("cs"),
        rules: decode(subject, row.get::<_, &str>("rules"))?,
        generation: read(subject, row.get("generation"))?,
    })
}

impl Settings for PgSettings {
    fn get(&self, subject: &str) -> Result<Option<UserSettings>, StoreError> {
        let subject = subject.to_owned();
        self.0.call("get settings", move |pool| async move {
            let err = db_error("get settings");
            let c = client(&pool, "get settings").await?;
            let s = c
                .prepare_cached(
                    "SELECT cs, rules::text AS rules, generation FROM rs_settings
                     WHERE subject = $1",
                )
                .await
                .map_err(&err)?;
            let row = c.query_opt(&s, &[&subject]).await.map_err(&err)?;
            row.map(|row| settings_of(&subject, &row)).transpose()
        })
    }

    fn apply(
        &self,
        subject: &str,
        key: &str,
        expected: u64,
        settings: &UserSettings,
        result: &Value,
        durability: Durability,
    ) -> Result<Applied, StoreError> {
        let next = expected
            .checked_add(1)
            .ok_or_else(|| backend("apply settings", "the generation is at its largest"))?;
        let (from, to) = (stored(expected)?, stored(next)?);
        let (subject, key) = (subject.to_owned(), key.to_owned());
        let (cs, rules) = (settings.cs.clone(), encode(&settings.rules)?);
        let result = encode(result)?;
        let lazy = durability == Durability::Deferred;
        let apply = move |pool| async move {
            let err = db_error("apply settings");
            let mut c = pooled(&pool, "apply settings").await?;
            let tx = c.transaction().await.map_err(&err)?;
            let claim = tx
                .prepare_cached(
                    "INSERT INTO rs_executions (key, result) VALUES ($1, $2)
                     ON CONFLICT (key) DO NOTHING",
                )
                .await
                .map_err(&err)?;
            if tx.execute(&claim, &[&key, &result]).await.map_err(&err)? == 0 {
                // Committed once seen: the writer it waited for ended.
                let row = tx
                    .query_one("SELECT result FROM rs_executions WHERE key = $1", &[&key])
                    .await
                    .map_err(&err)?;
                let before = decode(&key, row.get::<_, &str>(0))?;
                tx.rollback().await.map_err(&err)?;
                return Ok(Applied::Existing(before));
            }
            let written: i64 = if from == 0 {
                let s = tx.prepare_cached(WRITE_FIRST).await.map_err(&err)?;
                tx.query_one(&s, &[&subject, &cs, &rules, &to])
                    .await
                    .map_err(&err)?
                    .get(0)
            } else {
                let s = tx.prepare_cached(WRITE_NEXT).await.map_err(&err)?;
                tx.query_one(&s, &[&subject, &cs, &rules, &to, &from])
                    .await
                    .map_err(&err)?
                    .get(0)
            };
            if written == 0 {
                let now = tx
                    .query_opt(
                        "SELECT generation FROM rs_settings WHERE subject = $1",
                        &[&subject],
                    )
                    .await
                    .map_err(&err)?;
                tx.rollback().await.map_err(&err)?;
                let now = match now {
                    Some(row) => read(&subject, row.get(0))?,
                    None => 0,
                };
                return Ok(Applied::Stale(now));
            }
            tx.commit().await.map_err(&err)?;
            Ok(Applied::Fresh)
        };
        self.0
            .call_pooled("apply settings", CALL_TIMEOUT, lazy, apply)
    }

    fn hosts(&self) -> Result<Vec<String>, StoreError> {
        self.0.call("list hosts", |pool| async move {
            let c = client(&pool, "list hosts").await?;
            let rows = c
                .query("SELECT issuer FROM rs_hosts ORDER BY added", &[])
                .await
                .map_err(db_error("list hosts"))?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, UserSettings)>, StoreError> {
        self.0.page(
            "list settings",
            "SELECT subject, cs, rules::text AS rules, generation FROM rs_settings",
            "subject",
            after,
            limit,
            |row| {
                let subject: String = row.get("subject");
                let settings = settings_of(&subject, row)?;
                Ok((subject, settings))
            },
        )
    }

    fn restore(&self, subject: &str, settings: &UserSettings) -> Result<(), StoreError> {
        let subject = subject.to_owned();
        let (cs, rules) = (settings.cs.clone(), encode(&settings.rules)?);
        let generation = stored(settings.generation)?;
        self.0.call("restore settings", move |pool| async move {
            let err = db_error("restore settings");
            let c = client(&pool, "restore settings").await?;
            let s = c.prepare_cached(RESTORE).await.map_err(&err)?;
            c.execute(&s, &[&subject, &cs, &rules, &generation])
                .await
                .map_err(&err)?;
            Ok(())
        })
    }

    fn restore_host(&self, issuer: &str) -> Result<(), StoreError> {
        let issuer = issuer.to_owned();
        self.0.call("restore host", move |pool| async move {
            let err = db_error("restore host");
            let c = client(&pool, "restore host").await?;
            let s = c
                .prepare_cached(
                    "INSERT INTO rs_hosts (issuer) VALUES ($1) ON CONFLICT (issuer) DO NOTHING",
                )
                .await
                .map_err(&err)?;
            c.execute(&s, &[&issuer]).await.map_err(&err)?;
            Ok(())
        })
    }
}
