//! The A2A bridge's tasks ([`super::a2a`]) on the embedded `sled` database:
//! one tree, `a2a.tasks`, from a task id to its [`TaskRecord`] as JSON.
//! Each write is flushed before it returns ("durable" as in `sled_store`:
//! it survives a killed process). The database is the bridge's own
//! (`a2a.sled` in its data directory); sled locks it, so a second bridge on
//! the same directory does not start.

use super::a2a::{check_id, TaskRecord, TaskStore};
use super::sled_json::{decode, encode, open_db, page_after, tree, Durable};
use super::sled_store::backend_error;
use super::StoreError;
use std::path::Path;
use std::sync::Arc;

const TASKS_TREE: &str = "a2a.tasks";

/// The task store in `db`.
pub fn open(db: &sled::Db) -> Result<Arc<dyn TaskStore>, StoreError> {
    Ok(Arc::new(SledTasks {
        tree: tree(db, TASKS_TREE)?,
        db: Durable::new(db.clone()),
    }))
}

/// Opens (creating it if needed) a sled database at `dir` and the task
/// store in it. sled locks the directory: a second open while it is open
/// fails.
pub fn open_dir(dir: &Path) -> Result<(sled::Db, Arc<dyn TaskStore>), StoreError> {
    let db = open_db(dir)?;
    let store = open(&db)?;
    Ok((db, store))
}

struct SledTasks {
    db: Durable,
    tree: sled::Tree,
}

fn decode_record(key: &[u8], bytes: &[u8]) -> Result<TaskRecord, StoreError> {
    let record: TaskRecord = decode(key, bytes)?;
    check_id(&String::from_utf8_lossy(key), record)
}

impl TaskStore for SledTasks {
    fn put(&self, record: &TaskRecord) -> Result<(), StoreError> {
        self.tree
            .insert(record.id.as_bytes(), encode(record)?)
            .map_err(|e| backend_error("put task", e))?;
        self.db.flush()
    }

    fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        self.tree
            .get(id.as_bytes())
            .map_err(|e| backend_error("get task", e))?
            .map(|b| decode_record(id.as_bytes(), &b))
            .transpose()
    }

    fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let gone = self
            .tree
            .remove(id.as_bytes())
            .map_err(|e| backend_error("remove task", e))?
            .is_some();
        if gone {
            self.db.flush()?;
        }
        Ok(gone)
    }

    fn collect_finished(&self, cutoff: i64) -> Result<usize, StoreError> {
        let err = |e| backend_error("collect tasks", e);
        let mut n = 0;
        for item in self.tree.iter() {
            let (key, bytes) = item.map_err(err)?;
            // A record that cannot be read cannot say when it finished: it
            // stays for an operator to look at.
            let Ok(record) = serde_json::from_slice::<TaskRecord>(&bytes) else {
                continue;
            };
            if record.finished_at.is_some_and(|at| at < cutoff) {
                self.tree.remove(key).map_err(err)?;
                n += 1;
            }
        }
        if n > 0 {
            self.db.flush()?;
        }
        Ok(n)
    }

    fn list_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        page_after(&self.tree, after, limit, "list tasks")?
            .into_iter()
            .map(|(k, v)| decode_record(&k, &v))
            .collect()
    }
}
