//! The A2A bridge's tasks ([`crate::a2a`]) in PostgreSQL: the same contract
//! as `sled_a2a`, for a bridge whose state lives in a database server (the
//! servers' own, beside their tables, or another).
//!
//! | table | key | what |
//! |---|---|---|
//! | `a2a_tasks` | task id | [`TaskRecord`] (in `body`), when it finished (in `finished_at`, for collection) |
//!
//! Every statement commits durably (`synchronous_commit = on`).

use super::{client, db_error, decode, encode, Migration, Pg};
use crate::a2a::{check_id, TaskRecord, TaskStore};
use crate::StoreError;
use std::sync::Arc;

/// The bridge's schema, step by step (never edit a step once released: add
/// one). A component of its own (`a2a`), numbered apart from the servers'.
pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "A2A bridge tasks",
    sql: "
CREATE TABLE a2a_tasks (
    id text PRIMARY KEY,
    finished_at bigint,
    body text NOT NULL);
CREATE INDEX a2a_tasks_finished ON a2a_tasks (finished_at) WHERE finished_at IS NOT NULL;
",
}];

/// The task store on `pg`, after applying the bridge's schema.
pub fn open(pg: &Pg) -> Result<Arc<dyn TaskStore>, StoreError> {
    pg.migrate("a2a", MIGRATIONS)?;
    Ok(Arc::new(PgTasks(pg.clone())))
}

struct PgTasks(Pg);

fn record_of(id: &str, body: &str) -> Result<TaskRecord, StoreError> {
    check_id(id, decode(id, body)?)
}

impl TaskStore for PgTasks {
    fn put(&self, record: &TaskRecord) -> Result<(), StoreError> {
        let (id, finished_at, body) = (record.id.clone(), record.finished_at, encode(record)?);
        self.0.call("put task", move |pool| async move {
            let c = client(&pool, "put task").await?;
            let s = c
                .prepare_cached(
                    "INSERT INTO a2a_tasks (id, finished_at, body) VALUES ($1, $2, $3)
                     ON CONFLICT (id) DO UPDATE
                     SET finished_at = EXCLUDED.finished_at, body = EXCLUDED.body",
                )
                .await
                .map_err(db_error("put task"))?;
            c.execute(&s, &[&id, &finished_at, &body])
                .await
                .map_err(db_error("put task"))?;
            Ok(())
        })
    }

    fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        self.0
            .text_by_key(
                "get task",
                "SELECT body FROM a2a_tasks WHERE id = $1",
                id.to_owned(),
            )?
            .map(|body| record_of(id, &body))
            .transpose()
    }

    fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.0.call("remove task", move |pool| async move {
            let c = client(&pool, "remove task").await?;
            let s = c
                .prepare_cached("DELETE FROM a2a_tasks WHERE id = $1")
                .await
                .map_err(db_error("remove task"))?;
            let n = c
                .execute(&s, &[&id])
                .await
                .map_err(db_error("remove task"))?;
            Ok(n > 0)
        })
    }

    fn collect_finished(&self, cutoff: i64) -> Result<usize, StoreError> {
        self.0.delete_where(
            "collect tasks",
            "DELETE FROM a2a_tasks WHERE finished_at < $1",
            cutoff,
        )
    }

    fn list_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        self.0.page(
            "list tasks",
            "SELECT id, body FROM a2a_tasks",
            "id",
            after,
            limit,
            |row| record_of(row.get("id"), row.get("body")),
        )
    }
}
