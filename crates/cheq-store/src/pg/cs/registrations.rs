//! Registered resource servers and initial access tokens in PostgreSQL
//! ([`crate::registrations`]): `cs_registrations` (one row per origin),
//! `cs_registration_tokens` (digests) and `cs_registration_generation`
//! (one row). Each write is one statement whose CTE also moves the
//! generation, so every instance polling it sees the change.

use crate::pg::{client, db_error, Pg};
use crate::registrations::*;
use crate::StoreError;

pub(super) struct PgRegistrations(pub(super) Pg);

const COLUMNS: &str =
    "origin, name, resource_prefix, jwks_uri, token_endpoint, status, registered_at, updated_at";

fn record(row: &tokio_postgres::Row) -> Result<RegisteredRecord, StoreError> {
    let status: String = row.get(5);
    Ok(RegisteredRecord {
        origin: row.get(0),
        name: row.get(1),
        resource_prefix: row.get(2),
        jwks_uri: row.get(3),
        token_endpoint: row.get(4),
        status: RegistrationStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
            key: row.get(0),
            reason: format!("unknown registration status {status:?}"),
        })?,
        registered_at: row.get(6),
        updated_at: row.get(7),
    })
}

impl PgRegistrations {
    /// Runs `sql` (a statement answering one count) with an origin and a
    /// time; the count.
    fn count(
        &self,
        op: &'static str,
        sql: &'static str,
        origin: &str,
        now: i64,
    ) -> Result<i64, StoreError> {
        let origin = origin.to_owned();
        self.0.call(op, move |pool| async move {
            let c = client(&pool, op).await?;
            let s = c.prepare_cached(sql).await.map_err(db_error(op))?;
            let row = c
                .query_one(&s, &[&origin, &now])
                .await
                .map_err(db_error(op))?;
            Ok(row.get::<_, i64>(0))
        })
    }
}

impl Registrations for PgRegistrations {
    fn register(&self, r: &RegisteredRecord) -> Result<RegisterOutcome, StoreError> {
        let r = r.clone();
        self.0.call("register", move |pool| async move {
            let op = "register";
            let c = client(&pool, op).await?;
            let s = c
                .prepare_cached(
                    "WITH w AS (
                       INSERT INTO cs_registrations AS r (origin, name, resource_prefix, jwks_uri,
                           token_endpoint, status, registered_at, updated_at)
                       VALUES ($1, $2, $3, $4, $5, 'active', $6, $6)
                       ON CONFLICT (origin) DO UPDATE SET name = EXCLUDED.name,
                           resource_prefix = EXCLUDED.resource_prefix,
                           jwks_uri = EXCLUDED.jwks_uri,
                           token_endpoint = EXCLUDED.token_endpoint,
                           updated_at = EXCLUDED.updated_at
                       WHERE r.status = 'active'
                       RETURNING (xmax = 0) AS created),
                     g AS (UPDATE cs_registration_generation SET n = n + 1
                           WHERE id = 1 AND EXISTS (SELECT 1 FROM w))
                     SELECT created FROM w",
                )
                .await
                .map_err(db_error(op))?;
            let row = c
                .query_opt(
                    &s,
                    &[
                        &r.origin,
                        &r.name,
                        &r.resource_prefix,
                        &r.jwks_uri,
                        &r.token_endpoint,
                        &r.updated_at,
                    ],
                )
                .await
                .map_err(db_error(op))?;
            Ok(match row.map(|row| row.get::<_, bool>(0)) {
                None => RegisterOutcome::Blocked,
                Some(true) => RegisterOutcome::Created,
                Some(false) => RegisterOutcome::Refreshed,
            })
        })
    }

    fn get(&self, origin: &str) -> Result<Option<RegisteredRecord>, StoreError> {
        let origin = origin.to_owned();
        self.0.call("get registration", move |pool| async move {
            let op = "get registration";
            let c = client(&pool, op).await?;
            let sql = format!("SELECT {COLUMNS} FROM cs_registrations WHERE origin = $1");
            let row = c.query_opt(&sql, &[&origin]).await.map_err(db_error(op))?;
            row.as_ref().map(record).transpose()
        })
    }

    fn list(&self) -> Result<Vec<RegisteredRecord>, StoreError> {
        self.0.call("list registrations", move |pool| async move {
            let op = "list registrations";
            let c = client(&pool, op).await?;
            let sql = format!("SELECT {COLUMNS} FROM cs_registrations ORDER BY origin");
            let rows = c.query(&sql, &[]).await.map_err(db_error(op))?;
            rows.iter().map(record).collect()
        })
    }

    fn block(&self, origin: &str, now: i64) -> Result<bool, StoreError> {
        self.count(
            "block",
            "WITH w AS (
               INSERT INTO cs_registrations AS r (origin, name, resource_prefix, jwks_uri,
                   token_endpoint, status, registered_at, updated_at)
               VALUES ($1, '', '', '', '', 'blocked', $2, $2)
               ON CONFLICT (origin) DO UPDATE SET status = 'blocked', updated_at = $2
               WHERE r.status <> 'blocked'
               RETURNING 1),
             g AS (UPDATE cs_registration_generation SET n = n + 1
                   WHERE id = 1 AND EXISTS (SELECT 1 FROM w))
             SELECT count(*) FROM w",
            origin,
            now,
        )
        .map(|n| n > 0)
    }

    fn unblock(&self, origin: &str, now: i64) -> Result<bool, StoreError> {
        self.count(
            "unblock",
            "WITH d AS (
               DELETE FROM cs_registrations
               WHERE origin = $1 AND status = 'blocked' AND token_endpoint = '' RETURNING 1),
             u AS (
               UPDATE cs_registrations SET status = 'active', updated_at = $2
               WHERE origin = $1 AND status = 'blocked' AND token_endpoint <> '' RETURNING 1),
             g AS (UPDATE cs_registration_generation SET n = n + 1
                   WHERE id = 1 AND (EXISTS (SELECT 1 FROM d) OR EXISTS (SELECT 1 FROM u)))
             SELECT (SELECT count(*) FROM d) + (SELECT count(*) FROM u)",
            origin,
            now,
        )
        .map(|n| n > 0)
    }

    fn remove(&self, origin: &str) -> Result<bool, StoreError> {
        self.count(
            "remove registration",
            "WITH d AS (DELETE FROM cs_registrations WHERE origin = $1 AND $2::bigint IS NOT NULL RETURNING 1),
             g AS (UPDATE cs_registration_generation SET n = n + 1
                   WHERE id = 1 AND EXISTS (SELECT 1 FROM d))
             SELECT count(*) FROM d",
            origin,
            0,
        )
        .map(|n| n > 0)
    }

    fn generation(&self) -> Result<i64, StoreError> {
        self.0
            .call("registration generation", move |pool| async move {
                let op = "registration generation";
                let c = client(&pool, op).await?;
                let s = c
                    .prepare_cached("SELECT n FROM cs_registration_generation WHERE id = 1")
                    .await
                    .map_err(db_error(op))?;
                let row = c.query_opt(&s, &[]).await.map_err(db_error(op))?;
                Ok(row.map_or(0, |r| r.get::<_, i64>(0)))
            })
    }

    fn restore(&self, r: &RegisteredRecord) -> Result<bool, StoreError> {
        let r = r.clone();
        self.0.call("restore registration", move |pool| async move {
            let op = "restore registration";
            let c = client(&pool, op).await?;
            let s = c
                .prepare_cached(
                    "WITH w AS (
                       INSERT INTO cs_registrations (origin, name, resource_prefix, jwks_uri,
                           token_endpoint, status, registered_at, updated_at)
                       VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                       ON CONFLICT (origin) DO NOTHING
                       RETURNING 1),
                     g AS (UPDATE cs_registration_generation SET n = n + 1
                           WHERE id = 1 AND EXISTS (SELECT 1 FROM w))
                     SELECT count(*) FROM w",
                )
                .await
                .map_err(db_error(op))?;
            let row = c
                .query_one(
                    &s,
                    &[
                        &r.origin,
                        &r.name,
                        &r.resource_prefix,
                        &r.jwks_uri,
                        &r.token_endpoint,
                        &r.status.as_str(),
                        &r.registered_at,
                        &r.updated_at,
                    ],
                )
                .await
                .map_err(db_error(op))?;
            Ok(row.get::<_, i64>(0) > 0)
        })
    }

    fn add_access_token(&self, digest: &str, created: i64) -> Result<bool, StoreError> {
        self.count(
            "add access token",
            "WITH w AS (INSERT INTO cs_registration_tokens (digest, created) VALUES ($1, $2)
                        ON CONFLICT (digest) DO NOTHING RETURNING 1)
             SELECT count(*) FROM w",
            digest,
            created,
        )
        .map(|n| n > 0)
    }

    fn access_tokens(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.0.call("list access tokens", move |pool| async move {
            let op = "list access tokens";
            let c = client(&pool, op).await?;
            let rows = c
                .query(
                    "SELECT digest, created FROM cs_registration_tokens ORDER BY digest",
                    &[],
                )
                .await
                .map_err(db_error(op))?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn take_access_token(&self, digest: &str) -> Result<bool, StoreError> {
        self.count(
            "take access token",
            "WITH d AS (DELETE FROM cs_registration_tokens WHERE digest = $1 AND $2::bigint IS NOT NULL
                        RETURNING 1)
             SELECT count(*) FROM d",
            digest,
            0,
        )
        .map(|n| n > 0)
    }
}
