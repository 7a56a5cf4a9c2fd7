//! What the A2A bridge keeps (PROTOCOL.md §13, the A2A binding): its tasks,
//! so that a bridge started again on the same data still answers `GetTask`
//! and goes on following the confirmations its tasks wait for. A trait, so
//! that PostgreSQL ([`super::pg::a2a`]) keeps them as the embedded sled
//! backend ([`super::sled_a2a`]) does.
//!
//! A [`TaskRecord`] is plain data: the task itself is the bridge's text (its
//! wire form), opaque to the store, beside what the store needs to bound
//! and expire the table (who made it, when, when it finished) and what the
//! bridge needs to carry on (the tool, the result URI).
//!
//! The result URI is a capability (§7: whoever holds it reads the
//! result): it is kept only while the task waits, never printed by
//! [`TaskRecord`]'s `Debug`, and never in a store error.

use super::StoreError;
use serde::{Deserialize, Serialize};

/// One task of the bridge, as kept.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The task id (the bridge's, 128 random bits).
    pub id: String,
    /// Who made it: the digest of the credential of the client (empty for
    /// the one owner of a bridge without a token).
    pub owner: String,
    /// The tool the task calls.
    pub tool: String,
    /// When it was made, unix seconds.
    pub created_at: i64,
    /// When it reached a terminal state, unix seconds; `None` while it is
    /// under way. Finished records are collected ([`TaskStore::collect_finished`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
    /// The RS's result URI, while the task waits for its user (§7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_uri: Option<String>,
    /// The task as the bridge serves it (JSON text).
    pub task: String,
}

impl std::fmt::Debug for TaskRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskRecord")
            .field("id", &self.id)
            .field("owner", &self.owner)
            .field("tool", &self.tool)
            .field("created_at", &self.created_at)
            .field("finished_at", &self.finished_at)
            .field(
                "result_uri",
                &self.result_uri.as_ref().map(|_| "<redacted>"),
            )
            .field("task", &self.task)
            .finish()
    }
}

/// The bridge's tasks, by id. Every write is durable before it returns.
pub trait TaskStore: Send + Sync {
    /// Stores `record` under its id, in place of what was there.
    fn put(&self, record: &TaskRecord) -> Result<(), StoreError>;
    /// The record with id `id`.
    fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError>;
    /// Removes the record with id `id`; whether there was one.
    fn remove(&self, id: &str) -> Result<bool, StoreError>;
    /// Removes the records that finished before `cutoff` (unix seconds);
    /// returns how many went. Records under way stay.
    fn collect_finished(&self, cutoff: i64) -> Result<usize, StoreError>;
    /// Up to `limit` records, in the order of their ids, from the first
    /// after `after` (from the first of all with `None`): every record, a
    /// page at a time (what a bridge reads when it starts).
    fn list_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<TaskRecord>, StoreError>;
}

/// A record read under `key` that names another id is corrupt.
pub(crate) fn check_id(key: &str, record: TaskRecord) -> Result<TaskRecord, StoreError> {
    if record.id == key {
        Ok(record)
    } else {
        Err(StoreError::Corrupt {
            key: key.to_owned(),
            reason: "the task record names another id".into(),
        })
    }
}

/// Tasks in memory, for tests: nothing survives the process.
#[cfg(any(test, feature = "test-support"))]
#[derive(Debug, Default)]
pub struct MemoryTasks {
    map: std::sync::Mutex<std::collections::BTreeMap<String, TaskRecord>>,
}

#[cfg(any(test, feature = "test-support"))]
impl MemoryTasks {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, TaskRecord>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(any(test, feature = "test-support"))]
impl TaskStore for MemoryTasks {
    fn put(&self, record: &TaskRecord) -> Result<(), StoreError> {
        self.lock().insert(record.id.clone(), record.clone());
        Ok(())
    }

    fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        Ok(self.lock().get(id).cloned())
    }

    fn remove(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.lock().remove(id).is_some())
    }

    fn collect_finished(&self, cutoff: i64) -> Result<usize, StoreError> {
        let mut map = self.lock();
        let before = map.len();
        map.retain(|_, r| r.finished_at.is_none_or(|at| at >= cutoff));
        Ok(before - map.len())
    }

    fn list_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        use std::ops::Bound;
        let map = self.lock();
        let range = match after {
            Some(a) => map.range::<str, _>((Bound::Excluded(a), Bound::Unbounded)),
            None => map.range::<str, _>(..),
        };
        Ok(range.take(limit).map(|(_, r)| r.clone()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_result_uri() {
        let r = TaskRecord {
            id: "t".into(),
            owner: String::new(),
            tool: "book_flight".into(),
            created_at: 1,
            finished_at: None,
            result_uri: Some("http://rs.example/cheq/results/secret-capability".into()),
            task: "{}".into(),
        };
        let shown = format!("{r:?}");
        assert!(!shown.contains("secret-capability"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }
}
