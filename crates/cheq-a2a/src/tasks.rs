//! The task table (A2A 1.0 §4.1.1 Task, §4.1.3 TaskState) and the one state
//! machine of a bridged call: `WORKING` while the RS is called, then
//! `COMPLETED` (it ran at once), `AUTH_REQUIRED` (it waits for its user at
//! the CHEQ confirmation server), or `FAILED` (the RS refused); from
//! `AUTH_REQUIRED` only the RS's final state (§7 of PROTOCOL.md: `accepted`
//! → `COMPLETED`, `rejected` → `REJECTED`, `expired` → `FAILED`), the
//! client's `CancelTask` (→ `CANCELED`) or the bridge's own time limit
//! (→ `FAILED`) moves it, and a terminal state never moves again.
//!
//! Each task is held in a `watch` channel, so that `GetTask` reads its
//! latest snapshot and every stream sees each change; and in the bridge's
//! store (the store's [`TaskStore`]: sled or PostgreSQL), written before the
//! change is seen, so that a bridge started again on the same store answers
//! for its tasks ([`Tasks::load`]) and carries on with those that wait
//! ([`Resume`]). The moves of one task are made one at a time, each written
//! in turn. A store that fails refuses a new task; a move is made all the
//! same (the call happened), and said in the log.
//!
//! Tasks are bound to the client that made them ([`Owner`], kept with the
//! task); another client finds nothing. The table is bounded
//! ([`MAX_TASKS`]); finished tasks are forgotten after [`FINISHED_TTL`], and
//! the oldest finished first when the table is full, in memory and in the
//! store alike. The result URI is never in the table: it is in the store's
//! record while the task waits (a restarted bridge needs it), and in the
//! task that reads it.

use a2a_types::{Task, TaskState};
use cheq_store::a2a::{TaskRecord, TaskStore};
use cheq_store::StoreError;
use cheq_support::time::Clock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use zeroize::Zeroizing;

/// The most tasks kept at once, pending and finished.
pub const MAX_TASKS: usize = 10_000;
/// How long a finished task stays readable.
pub const FINISHED_TTL: Duration = Duration::from_secs(3600);
/// How long a task may wait for its user at most (longer than any CHEQ
/// lives); then it fails.
pub const PENDING_TTL: Duration = Duration::from_secs(25 * 3600);
/// How many records a bridge reads from its store at a time when it starts.
const LOAD_PAGE: usize = 500;

/// Who made a task: a digest of the credential its client presented (the
/// same for every request of a client), or the one anonymous owner of an
/// unguarded loopback bridge.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner(String);

impl Owner {
    /// The owner presenting `credential` (`None`: no credential).
    pub fn from_credential(credential: Option<&[u8]>) -> Owner {
        match credential {
            Some(c) => Owner(cheq_core::sign::b64::sha256(c)),
            None => Owner(String::new()),
        }
    }
}

/// Whether `state` is terminal (A2A 1.0 §4.1.3).
pub fn is_terminal(state: i32) -> bool {
    [
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Canceled,
        TaskState::Rejected,
    ]
    .iter()
    .any(|s| *s as i32 == state)
}

/// The state of `task` (unspecified when it has no status).
pub fn state_of(task: &Task) -> i32 {
    task.status.as_ref().map_or(0, |s| s.state)
}

/// Whether a task in `from` may move to `to`: never out of a terminal
/// state, never back to `WORKING`, and `AUTH_REQUIRED` only from `WORKING`.
pub fn may_move(from: i32, to: i32) -> bool {
    if is_terminal(from) || to == TaskState::Working as i32 || to == from {
        return false;
    }
    if to == TaskState::AuthRequired as i32 {
        return from == TaskState::Working as i32;
    }
    is_terminal(to)
}

struct Entry {
    owner: Owner,
    tool: String,
    task: watch::Sender<Task>,
    /// Unix seconds.
    created: i64,
    /// Unix seconds.
    finished: Option<i64>,
    /// Held while the task moves: one move, and its write, at a time.
    moving: Arc<tokio::sync::Mutex<()>>,
}

/// Why a move was not made.
#[derive(Debug, PartialEq, Eq)]
pub enum MoveError {
    /// No such task (forgotten).
    Gone,
    /// The state machine does not allow it (the task is terminal).
    NotAllowed,
}

/// Why a task was not added.
#[derive(Debug, thiserror::Error)]
pub enum InsertError {
    /// The table is full of tasks under way.
    #[error("the task table is full of tasks under way")]
    Full,
    /// A task has this id already.
    #[error("a task has this id already")]
    Taken,
    /// The store did not keep it (the task is not added).
    #[error("the task could not be stored: {0}")]
    Store(StoreError),
}

/// What a bridge started on its store carries on with.
pub enum Resume {
    /// A task waiting for its user: its result URI is read again.
    Follow {
        id: String,
        tool: String,
        result_uri: Zeroizing<String>,
        /// When the task was made, unix seconds.
        created: i64,
    },
    /// A task whose RS call was under way when the bridge stopped: its
    /// outcome is unknown.
    Interrupted { id: String, tool: String },
}

impl std::fmt::Debug for Resume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Resume::Follow { id, tool, .. } => f
                .debug_struct("Follow")
                .field("id", id)
                .field("tool", tool)
                .finish_non_exhaustive(),
            Resume::Interrupted { id, tool } => f
                .debug_struct("Interrupted")
                .field("id", id)
                .field("tool", tool)
                .finish(),
        }
    }
}

/// The tasks of one bridge.
pub struct Tasks {
    map: Mutex<HashMap<String, Entry>>,
    max: usize,
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
}

fn ttl_secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

impl Tasks {
    /// The tasks kept in `store` (at most `max`, finished ones forgotten as
    /// the table's bounds say), and what to carry on with. A record whose
    /// task cannot be read is left in the store, said in the log, and
    /// skipped.
    pub fn load(
        store: Arc<dyn TaskStore>,
        clock: Arc<dyn Clock>,
        max: usize,
    ) -> Result<(Tasks, Vec<Resume>), StoreError> {
        let now = clock.now().timestamp();
        store.collect_finished(now.saturating_sub(ttl_secs(FINISHED_TTL)))?;
        let mut map = HashMap::new();
        let mut resume = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = store.list_after(after.as_deref(), LOAD_PAGE)?;
            let full = page.len() == LOAD_PAGE;
            after = page.last().map(|r| r.id.clone());
            for record in page {
                let task = match serde_json::from_str::<Task>(&record.task) {
                    Ok(task) if task.id == record.id => task,
                    Ok(_) => {
                        tracing::warn!(task = %record.id, "a stored A2A task names another id; skipped");
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(task = %record.id, error = %e, "a stored A2A task cannot be read; skipped");
                        continue;
                    }
                };
                let state = state_of(&task);
                let terminal = is_terminal(state);
                if !terminal {
                    resume.push(match record.result_uri {
                        Some(uri) if state == TaskState::AuthRequired as i32 => Resume::Follow {
                            id: record.id.clone(),
                            tool: record.tool.clone(),
                            result_uri: Zeroizing::new(uri),
                            created: record.created_at,
                        },
                        _ => Resume::Interrupted {
                            id: record.id.clone(),
                            tool: record.tool.clone(),
                        },
                    });
                }
                let (tx, _) = watch::channel(task);
                map.insert(
                    record.id,
                    Entry {
                        owner: Owner(record.owner),
                        tool: record.tool,
                        task: tx,
                        created: record.created_at,
                        finished: if terminal {
                            Some(record.finished_at.unwrap_or(now))
                        } else {
                            None
                        },
                        moving: Arc::default(),
                    },
                );
            }
            if !full {
                break;
            }
        }
        for id in Self::sweep(&mut map, max, now, 0) {
            store.remove(&id)?;
        }
        Ok((
            Tasks {
                map: Mutex::new(map),
                max,
                store,
                clock,
            },
            resume,
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Now, unix seconds, by the table's clock.
    pub fn now(&self) -> i64 {
        self.clock.now().timestamp()
    }

    /// How many tasks are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no task is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets finished tasks older than [`FINISHED_TTL`]; when still too
    /// many, the oldest finished ones, until there is room for `room` more.
    /// Returns the ids forgotten.
    fn sweep(map: &mut HashMap<String, Entry>, max: usize, now: i64, room: usize) -> Vec<String> {
        let cutoff = now.saturating_sub(ttl_secs(FINISHED_TTL));
        let mut gone: Vec<String> = map
            .iter()
            .filter(|(_, e)| e.finished.is_some_and(|at| at < cutoff))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            map.remove(id);
        }
        if map.len() + room <= max {
            return gone;
        }
        let mut finished: Vec<(i64, String)> = map
            .iter()
            .filter_map(|(id, e)| e.finished.map(|at| (at, id.clone())))
            .collect();
        finished.sort();
        let excess = map.len() + room - max;
        for (_, id) in finished.into_iter().take(excess) {
            map.remove(&id);
            gone.push(id);
        }
        gone
    }

    /// The store's record of a task.
    fn record(
        id: &str,
        owner: &Owner,
        tool: &str,
        created: i64,
        finished: Option<i64>,
        result_uri: Option<&str>,
        task: &Task,
    ) -> Result<TaskRecord, StoreError> {
        Ok(TaskRecord {
            id: id.to_owned(),
            owner: owner.0.clone(),
            tool: tool.to_owned(),
            created_at: created,
            finished_at: finished,
            // Kept only while the task waits: the capability goes with it.
            result_uri: finished
                .is_none()
                .then(|| result_uri.map(str::to_owned))
                .flatten(),
            task: serde_json::to_string(task).map_err(|e| StoreError::Backend {
                op: "encode task",
                message: e.to_string(),
            })?,
        })
    }

    /// Writes `record` on a blocking thread (the store's calls wait for
    /// the disk or the database).
    async fn persist(&self, record: TaskRecord) -> Result<(), StoreError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.put(&record))
            .await
            .unwrap_or_else(|e| {
                Err(StoreError::Backend {
                    op: "put task",
                    message: e.to_string(),
                })
            })
    }

    /// Removes the tasks `ids` from the store (they are gone from the
    /// table already); a failure is said in the log, and the next start
    /// collects what is finished.
    async fn forget(&self, ids: Vec<String>) {
        if ids.is_empty() {
            return;
        }
        let store = self.store.clone();
        let done = tokio::task::spawn_blocking(move || {
            ids.iter()
                .map(|id| store.remove(id).map(drop))
                .find(Result::is_err)
                .unwrap_or(Ok(()))
        })
        .await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "finished A2A tasks could not be removed from the store")
            }
            Err(e) => {
                tracing::warn!(error = %e, "finished A2A tasks could not be removed from the store")
            }
        }
    }

    /// Adds `task` (its id must be new), a call of `tool` for `owner`, kept
    /// in the store before it is seen.
    pub async fn insert(
        &self,
        owner: &Owner,
        tool: &str,
        task: Task,
    ) -> Result<watch::Receiver<Task>, InsertError> {
        let now = self.now();
        let finished = is_terminal(state_of(&task)).then_some(now);
        let record = Self::record(&task.id, owner, tool, now, finished, None, &task)
            .map_err(InsertError::Store)?;
        let (swept, admitted) = {
            let mut map = self.lock();
            let swept = Self::sweep(&mut map, self.max, now, 1);
            let admitted = if map.len() >= self.max {
                Err(InsertError::Full)
            } else if map.contains_key(&task.id) {
                Err(InsertError::Taken)
            } else {
                let id = task.id.clone();
                let (tx, rx) = watch::channel(task);
                map.insert(
                    id,
                    Entry {
                        owner: owner.clone(),
                        tool: tool.to_owned(),
                        task: tx,
                        created: now,
                        finished,
                        moving: Arc::default(),
                    },
                );
                Ok(rx)
            };
            (swept, admitted)
        };
        self.forget(swept).await;
        let rx = admitted?;
        if let Err(e) = self.persist(record.clone()).await {
            self.lock().remove(&record.id);
            return Err(InsertError::Store(e));
        }
        Ok(rx)
    }

    /// The latest snapshot of task `id`, when `owner` made it.
    pub fn get(&self, owner: &Owner, id: &str) -> Option<Task> {
        let map = self.lock();
        map.get(id)
            .filter(|e| &e.owner == owner)
            .map(|e| e.task.borrow().clone())
    }

    /// A receiver of task `id`'s changes, when `owner` made it.
    pub fn subscribe(&self, owner: &Owner, id: &str) -> Option<watch::Receiver<Task>> {
        let map = self.lock();
        map.get(id)
            .filter(|e| &e.owner == owner)
            .map(|e| e.task.subscribe())
    }

    /// A receiver of task `id`'s changes, for the bridge itself.
    pub(crate) fn subscribe_any(&self, id: &str) -> Option<watch::Receiver<Task>> {
        self.lock().get(id).map(|e| e.task.subscribe())
    }

    /// When task `id` was made, unix seconds.
    pub fn created(&self, id: &str) -> Option<i64> {
        self.lock().get(id).map(|e| e.created)
    }

    /// Moves task `id` to the state `change` gives it (applied to a copy;
    /// kept only when [`may_move`] allows the move), with `result_uri` in
    /// the store's record while the task waits. The store is written before
    /// the change is seen. Returns the new snapshot.
    pub async fn update(
        &self,
        id: &str,
        result_uri: Option<&str>,
        change: impl FnOnce(&mut Task),
    ) -> Result<Task, MoveError> {
        let moving = self
            .lock()
            .get(id)
            .map(|e| e.moving.clone())
            .ok_or(MoveError::Gone)?;
        let _turn = moving.lock().await;
        let (mut next, owner, tool, created) = {
            let map = self.lock();
            let e = map.get(id).ok_or(MoveError::Gone)?;
            let task = e.task.borrow().clone();
            (task, e.owner.clone(), e.tool.clone(), e.created)
        };
        let from = state_of(&next);
        change(&mut next);
        if !may_move(from, state_of(&next)) {
            return Err(MoveError::NotAllowed);
        }
        let finished = is_terminal(state_of(&next)).then(|| self.now());
        let stored = match Self::record(id, &owner, &tool, created, finished, result_uri, &next) {
            Ok(record) => self.persist(record).await,
            Err(e) => Err(e),
        };
        if let Err(e) = stored {
            tracing::warn!(task = %id, error = %e, "the task's new state could not be stored: a restarted bridge would find it as it was");
        }
        let mut map = self.lock();
        let entry = map.get_mut(id).ok_or(MoveError::Gone)?;
        entry.finished = finished;
        entry.task.send_replace(next.clone());
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2a_types::TaskStatus;
    use cheq_store::a2a::MemoryTasks;
    use cheq_support::time::ManualClock;

    fn task(id: &str, state: TaskState) -> Task {
        Task {
            id: id.into(),
            status: Some(TaskStatus {
                state: state as i32,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn set(state: TaskState) -> impl FnOnce(&mut Task) {
        move |t: &mut Task| {
            if let Some(s) = t.status.as_mut() {
                s.state = state as i32;
            }
        }
    }

    struct Fixture {
        store: Arc<MemoryTasks>,
        clock: Arc<ManualClock>,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture {
                store: Arc::new(MemoryTasks::default()),
                clock: Arc::new(ManualClock::new(chrono::Utc::now())),
            }
        }

        /// The table on this store, as a bridge starting on it finds it.
        fn open(&self, max: usize) -> (Tasks, Vec<Resume>) {
            Tasks::load(self.store.clone(), self.clock.clone(), max).unwrap()
        }

        fn tasks(&self) -> Tasks {
            self.open(MAX_TASKS).0
        }
    }

    fn tasks() -> Tasks {
        Fixture::new().tasks()
    }

    #[test]
    fn the_state_machine() {
        use TaskState::*;
        let ok = |a: TaskState, b: TaskState| may_move(a as i32, b as i32);
        assert!(ok(Working, AuthRequired));
        assert!(ok(Working, Completed));
        assert!(ok(Working, Failed));
        assert!(ok(AuthRequired, Completed));
        assert!(ok(AuthRequired, Rejected));
        assert!(ok(AuthRequired, Failed));
        assert!(ok(AuthRequired, Canceled));
        // Nothing leaves a terminal state, nothing goes back to WORKING,
        // and AUTH_REQUIRED is entered once.
        for terminal in [Completed, Failed, Canceled, Rejected] {
            for to in [Working, AuthRequired, Completed, Failed, Canceled, Rejected] {
                assert!(!ok(terminal, to), "{terminal:?} -> {to:?}");
            }
        }
        assert!(!ok(AuthRequired, Working));
        assert!(!ok(AuthRequired, AuthRequired));
        assert!(!ok(AuthRequired, InputRequired));
    }

    #[tokio::test]
    async fn another_owner_finds_nothing() {
        let tasks = tasks();
        let alice = Owner::from_credential(Some(b"alice-token"));
        let bob = Owner::from_credential(Some(b"bob-token"));
        tasks
            .insert(&alice, "t", task("t1", TaskState::AuthRequired))
            .await
            .unwrap();
        assert!(tasks.get(&alice, "t1").is_some());
        assert!(tasks.get(&bob, "t1").is_none());
        assert!(tasks.subscribe(&bob, "t1").is_none());
        assert!(tasks.get(&Owner::from_credential(None), "t1").is_none());
        assert!(tasks.get(&alice, "t2").is_none());
    }

    #[tokio::test]
    async fn a_terminal_task_never_moves() {
        let tasks = tasks();
        let o = Owner::from_credential(None);
        tasks
            .insert(&o, "t", task("t", TaskState::AuthRequired))
            .await
            .unwrap();
        tasks
            .update("t", None, set(TaskState::Canceled))
            .await
            .unwrap();
        assert_eq!(
            tasks.update("t", None, set(TaskState::Completed)).await,
            Err(MoveError::NotAllowed)
        );
        assert_eq!(
            state_of(&tasks.get(&o, "t").unwrap()),
            TaskState::Canceled as i32
        );
        assert_eq!(
            tasks.update("nope", None, set(TaskState::Completed)).await,
            Err(MoveError::Gone)
        );
    }

    #[tokio::test]
    async fn bounded_finished_tasks_make_room_pending_ones_do_not() {
        let f = Fixture::new();
        let tasks = f.open(3).0;
        let o = Owner::from_credential(None);
        for (id, state) in [
            ("done1", TaskState::Completed),
            ("p1", TaskState::AuthRequired),
            ("p2", TaskState::AuthRequired),
        ] {
            tasks.insert(&o, "t", task(id, state)).await.unwrap();
        }
        // Full: the oldest finished task is forgotten for the new one, in
        // the store too.
        tasks
            .insert(&o, "t", task("p3", TaskState::AuthRequired))
            .await
            .unwrap();
        assert!(tasks.get(&o, "done1").is_none());
        assert_eq!(f.store.get("done1").unwrap(), None);
        assert_eq!(tasks.len(), 3);
        // Full of pending tasks: refused, and not stored.
        assert!(matches!(
            tasks.insert(&o, "t", task("p4", TaskState::Working)).await,
            Err(InsertError::Full)
        ));
        assert_eq!(f.store.get("p4").unwrap(), None);
        // The same id twice: refused.
        tasks
            .update("p1", None, set(TaskState::Canceled))
            .await
            .unwrap();
        assert!(matches!(
            tasks.insert(&o, "t", task("p2", TaskState::Working)).await,
            Err(InsertError::Taken)
        ));
    }

    #[tokio::test]
    async fn a_change_reaches_subscribers() {
        let tasks = tasks();
        let o = Owner::from_credential(None);
        tasks
            .insert(&o, "t", task("t", TaskState::Working))
            .await
            .unwrap();
        let mut rx = tasks.subscribe(&o, "t").unwrap();
        tasks
            .update(
                "t",
                Some("http://rs/cheq/results/r"),
                set(TaskState::AuthRequired),
            )
            .await
            .unwrap();
        assert!(rx.has_changed().unwrap());
        assert_eq!(
            state_of(&rx.borrow_and_update()),
            TaskState::AuthRequired as i32
        );
    }

    #[tokio::test]
    async fn tasks_are_found_again_by_their_owner_only_after_a_restart() {
        let f = Fixture::new();
        let alice = Owner::from_credential(Some(b"alice-token"));
        let uri = "http://rs.example/cheq/results/the-capability";
        {
            let tasks = f.tasks();
            for id in ["waits", "works", "done"] {
                tasks
                    .insert(&alice, "book_flight", task(id, TaskState::Working))
                    .await
                    .unwrap();
            }
            tasks
                .update("waits", Some(uri), set(TaskState::AuthRequired))
                .await
                .unwrap();
            tasks
                .update("done", None, set(TaskState::Completed))
                .await
                .unwrap();
        }
        // The result URI is kept while the task waits, and only then.
        assert_eq!(
            f.store.get("waits").unwrap().unwrap().result_uri.as_deref(),
            Some(uri)
        );
        assert_eq!(f.store.get("done").unwrap().unwrap().result_uri, None);

        let (tasks, resume) = f.open(MAX_TASKS);
        assert_eq!(tasks.len(), 3);
        for id in ["waits", "works", "done"] {
            assert!(tasks.get(&alice, id).is_some(), "{id}");
            // Another client, or none, finds nothing after the restart either.
            assert!(tasks
                .get(&Owner::from_credential(Some(b"bob-token")), id)
                .is_none());
            assert!(tasks.get(&Owner::from_credential(None), id).is_none());
            assert!(tasks
                .subscribe(&Owner::from_credential(Some(b"bob-token")), id)
                .is_none());
        }
        assert_eq!(
            state_of(&tasks.get(&alice, "waits").unwrap()),
            TaskState::AuthRequired as i32
        );
        let mut follow = Vec::new();
        let mut interrupted = Vec::new();
        for r in resume {
            match r {
                Resume::Follow {
                    id,
                    tool,
                    result_uri,
                    ..
                } => follow.push((id, tool, result_uri.to_string())),
                Resume::Interrupted { id, .. } => interrupted.push(id),
            }
        }
        assert_eq!(
            follow,
            vec![("waits".to_owned(), "book_flight".to_owned(), uri.to_owned())]
        );
        assert_eq!(interrupted, vec!["works".to_owned()]);
        // A finished task stays finished.
        assert_eq!(
            tasks.update("done", None, set(TaskState::Failed)).await,
            Err(MoveError::NotAllowed)
        );
    }

    #[tokio::test]
    async fn finished_tasks_expire_in_the_table_and_the_store() {
        let f = Fixture::new();
        let o = Owner::from_credential(None);
        let tasks = f.tasks();
        tasks
            .insert(&o, "t", task("old", TaskState::Working))
            .await
            .unwrap();
        tasks
            .update("old", None, set(TaskState::Completed))
            .await
            .unwrap();
        tasks
            .insert(&o, "t", task("waits", TaskState::AuthRequired))
            .await
            .unwrap();
        f.clock
            .advance(chrono::Duration::seconds(ttl_secs(FINISHED_TTL) - 1));
        tasks
            .insert(&o, "t", task("x", TaskState::Completed))
            .await
            .unwrap();
        assert!(tasks.get(&o, "old").is_some(), "not yet expired");
        f.clock.advance(chrono::Duration::seconds(2));
        tasks
            .insert(&o, "t", task("y", TaskState::Completed))
            .await
            .unwrap();
        assert!(tasks.get(&o, "old").is_none());
        assert_eq!(f.store.get("old").unwrap(), None);
        // A task under way never expires.
        assert!(tasks.get(&o, "waits").is_some());

        // A bridge started later finds the expired ones gone as well.
        f.clock
            .advance(chrono::Duration::seconds(ttl_secs(FINISHED_TTL) + 1));
        let (again, _) = f.open(MAX_TASKS);
        assert!(again.get(&o, "x").is_none());
        assert!(again.get(&o, "y").is_none());
        assert!(again.get(&o, "waits").is_some());
        assert_eq!(f.store.get("x").unwrap(), None);
    }

    #[tokio::test]
    async fn a_start_on_a_fuller_store_keeps_the_bound() {
        let f = Fixture::new();
        let o = Owner::from_credential(None);
        {
            let tasks = f.tasks();
            for id in ["f1", "f2", "f3"] {
                tasks
                    .insert(&o, "t", task(id, TaskState::Completed))
                    .await
                    .unwrap();
                f.clock.advance(chrono::Duration::seconds(1));
            }
            tasks
                .insert(&o, "t", task("p", TaskState::AuthRequired))
                .await
                .unwrap();
        }
        let (tasks, _) = f.open(2);
        assert_eq!(tasks.len(), 2);
        // The oldest finished went first; the pending one stays.
        assert!(tasks.get(&o, "p").is_some());
        assert!(tasks.get(&o, "f3").is_some());
        assert_eq!(f.store.get("f1").unwrap(), None);
        assert_eq!(f.store.get("f2").unwrap(), None);
    }

    #[tokio::test]
    async fn an_unreadable_record_is_skipped_and_kept() {
        let f = Fixture::new();
        f.store
            .put(&TaskRecord {
                id: "bad".into(),
                owner: String::new(),
                tool: "t".into(),
                created_at: 0,
                finished_at: None,
                result_uri: None,
                task: "{not json".into(),
            })
            .unwrap();
        let (tasks, resume) = f.open(MAX_TASKS);
        assert!(tasks.is_empty());
        assert!(resume.is_empty());
        assert!(f.store.get("bad").unwrap().is_some());
    }

    /// A store that refuses every write.
    struct Broken;

    impl TaskStore for Broken {
        fn put(&self, _: &TaskRecord) -> Result<(), StoreError> {
            Err(StoreError::Unavailable {
                op: "put task",
                message: "down".into(),
            })
        }
        fn get(&self, _: &str) -> Result<Option<TaskRecord>, StoreError> {
            Ok(None)
        }
        fn remove(&self, _: &str) -> Result<bool, StoreError> {
            Ok(false)
        }
        fn collect_finished(&self, _: i64) -> Result<usize, StoreError> {
            Ok(0)
        }
        fn list_after(&self, _: Option<&str>, _: usize) -> Result<Vec<TaskRecord>, StoreError> {
            Ok(Vec::new())
        }
    }

    #[tokio::test]
    async fn a_failing_store_refuses_a_new_task_but_not_a_move() {
        let (tasks, _) = Tasks::load(
            Arc::new(Broken),
            Arc::new(ManualClock::new(chrono::Utc::now())),
            MAX_TASKS,
        )
        .unwrap();
        let o = Owner::from_credential(None);
        assert!(matches!(
            tasks.insert(&o, "t", task("t", TaskState::Working)).await,
            Err(InsertError::Store(StoreError::Unavailable { .. }))
        ));
        assert!(tasks.get(&o, "t").is_none());
        assert!(tasks.is_empty());
    }

    #[tokio::test]
    async fn a_move_is_made_when_the_store_fails_after_the_start() {
        // A store that takes the first write only.
        struct Once(Mutex<bool>, MemoryTasks);
        impl TaskStore for Once {
            fn put(&self, r: &TaskRecord) -> Result<(), StoreError> {
                let mut done = self.0.lock().unwrap();
                if *done {
                    return Broken.put(r);
                }
                *done = true;
                self.1.put(r)
            }
            fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
                self.1.get(id)
            }
            fn remove(&self, id: &str) -> Result<bool, StoreError> {
                self.1.remove(id)
            }
            fn collect_finished(&self, c: i64) -> Result<usize, StoreError> {
                self.1.collect_finished(c)
            }
            fn list_after(&self, a: Option<&str>, l: usize) -> Result<Vec<TaskRecord>, StoreError> {
                self.1.list_after(a, l)
            }
        }
        let store = Arc::new(Once(Mutex::new(false), MemoryTasks::default()));
        let (tasks, _) = Tasks::load(
            store.clone(),
            Arc::new(ManualClock::new(chrono::Utc::now())),
            MAX_TASKS,
        )
        .unwrap();
        let o = Owner::from_credential(None);
        tasks
            .insert(&o, "t", task("t", TaskState::Working))
            .await
            .unwrap();
        let moved = tasks
            .update("t", None, set(TaskState::Completed))
            .await
            .unwrap();
        assert_eq!(state_of(&moved), TaskState::Completed as i32);
        assert_eq!(
            state_of(&tasks.get(&o, "t").unwrap()),
            TaskState::Completed as i32
        );
        // The store still has the task as it started.
        assert!(store.get("t").unwrap().unwrap().task.contains("WORKING"));
    }
}
