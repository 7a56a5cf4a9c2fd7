//! Versioned schemas (each server's [`Migration`] steps, applied once under
//! an advisory lock) and the readiness that follows them during a rolling
//! upgrade.

use super::{backend, client, db_error, pooled, Pg, PING_TIMEOUT};
use crate::StoreError;
use deadpool_postgres::Pool;

/// The readiness of one server's stores on PostgreSQL (`/readyz`): the
/// database answers within [`PING_TIMEOUT`], and its schema of `component`
/// is not newer than this binary knows. An instance left on the old
/// version while a newer one migrated the database then answers 503, so
/// that a load balancer drains it during a rolling upgrade, instead of
/// serving requests its statements may no longer fit.
#[derive(Debug, Clone)]
pub struct SchemaReadiness {
    pg: Pg,
    component: &'static str,
    known: i32,
}

impl SchemaReadiness {
    pub fn new(pg: &Pg, component: &'static str, steps: &'static [Migration]) -> Self {
        SchemaReadiness {
            pg: pg.clone(),
            component,
            known: steps.iter().map(|s| s.version).max().unwrap_or(0),
        }
    }
}

impl crate::Readiness for SchemaReadiness {
    fn ready(&self) -> Result<(), StoreError> {
        let component = self.component;
        let newest = self
            .pg
            .run("ready", PING_TIMEOUT, false, move |pool| async move {
                let c = client(&pool, "ready").await?;
                let s = c
                    .prepare_cached("SELECT max(version) FROM cheq_migrations WHERE component = $1")
                    .await
                    .map_err(db_error("ready"))?;
                let row = c
                    .query_one(&s, &[&component])
                    .await
                    .map_err(db_error("ready"))?;
                Ok(row.get::<_, Option<i32>>(0))
            })?;
        match newest {
            Some(newer) if newer > self.known => Err(backend(
                "ready",
                format!(
                    "the database's {component} schema is at version {newer}, newer than this \
                     instance knows ({}): run the newer cheq here",
                    self.known
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// One versioned step of a schema.
#[derive(Debug)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// An arbitrary but fixed key for the migration lock.
const MIGRATION_LOCK: i64 = 0x6368_6571_6d69_6772; // "cheqmigr"

pub(super) async fn migrate(
    pool: &Pool,
    component: &'static str,
    steps: &'static [Migration],
) -> Result<usize, StoreError> {
    let err = db_error("migrate");
    let mut c = pooled(pool, "migrate").await?;
    let tx = c.transaction().await.map_err(&err)?;
    // Held until commit: a second instance waits here, then finds the
    // steps applied.
    // "already exists, skipping" is no news.
    tx.batch_execute("SET LOCAL client_min_messages TO warning")
        .await
        .map_err(&err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(&err)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS cheq_migrations (
            component text NOT NULL,
            version integer NOT NULL,
            name text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (component, version))",
    )
    .await
    .map_err(&err)?;
    let rows = tx
        .query(
            "SELECT version FROM cheq_migrations WHERE component = $1",
            &[&component],
        )
        .await
        .map_err(&err)?;
    let applied: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    let known = steps.iter().map(|s| s.version).max().unwrap_or(0);
    if let Some(newer) = applied.iter().copied().filter(|v| *v > known).max() {
        return Err(backend(
            "migrate",
            format!(
                "the database's {component} schema is at version {newer}, newer than this \
                 cheq knows ({known}): run the newer cheq, or restore a matching database"
            ),
        ));
    }
    let mut n = 0;
    for step in steps {
        if applied.contains(&step.version) {
            continue;
        }
        tx.batch_execute(step.sql).await.map_err(&err)?;
        tx.execute(
            "INSERT INTO cheq_migrations (component, version, name) VALUES ($1, $2, $3)",
            &[&component, &step.version, &step.name],
        )
        .await
        .map_err(&err)?;
        n += 1;
    }
    tx.commit().await.map_err(&err)?;
    Ok(n)
}

/// The schema versions applied for `component`, oldest first (for `cheq
/// migrate` and tests).
pub fn applied(pg: &Pg, component: &'static str) -> Result<Vec<i32>, StoreError> {
    pg.call("migrations", move |pool| async move {
        let err = db_error("migrations");
        let c = client(&pool, "migrations").await?;
        let exists: bool = c
            .query_one("SELECT to_regclass('cheq_migrations') IS NOT NULL", &[])
            .await
            .map_err(&err)?
            .get(0);
        if !exists {
            return Ok(Vec::new());
        }
        let rows = c
            .query(
                "SELECT version FROM cheq_migrations WHERE component = $1 ORDER BY version",
                &[&component],
            )
            .await
            .map_err(&err)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    })
}
