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
//! latest snapshot and every stream sees each change. Tasks are bound to the
//! client that made them ([`Owner`]); another client finds nothing. The
//! table is bounded ([`MAX_TASKS`]); finished tasks are forgotten after
//! [`FINISHED_TTL`], and the oldest finished first when the table is full.
//! The result URI is never in the table: only the task that reads it holds it.

use a2a_types::{Task, TaskState};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The most tasks kept at once, pending and finished.
pub const MAX_TASKS: usize = 10_000;
/// How long a finished task stays readable.
pub const FINISHED_TTL: Duration = Duration::from_secs(3600);
/// How long a task may wait for its user at most (longer than any CHEQ
/// lives); then it fails.
pub const PENDING_TTL: Duration = Duration::from_secs(25 * 3600);

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
    task: watch::Sender<Task>,
    created: Instant,
    finished: Option<Instant>,
}

/// Why a move was not made.
#[derive(Debug, PartialEq, Eq)]
pub enum MoveError {
    /// No such task (forgotten).
    Gone,
    /// The state machine does not allow it (the task is terminal).
    NotAllowed,
}

/// The tasks of one bridge.
pub struct Tasks {
    map: Mutex<HashMap<String, Entry>>,
    max: usize,
}

impl Default for Tasks {
    fn default() -> Self {
        Tasks::with_capacity(MAX_TASKS)
    }
}

impl Tasks {
    /// A table keeping at most `max` tasks.
    pub fn with_capacity(max: usize) -> Tasks {
        Tasks {
            map: Mutex::new(HashMap::new()),
            max,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many tasks are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no task is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets finished tasks older than [`FINISHED_TTL`]; when still full,
    /// the oldest finished ones, until there is room for one.
    fn sweep(map: &mut HashMap<String, Entry>, max: usize, now: Instant) {
        map.retain(|_, e| {
            e.finished
                .is_none_or(|at| now.duration_since(at) < FINISHED_TTL)
        });
        if map.len() < max {
            return;
        }
        let mut finished: Vec<(Instant, String)> = map
            .iter()
            .filter_map(|(id, e)| e.finished.map(|at| (at, id.clone())))
            .collect();
        finished.sort();
        let excess = map.len() + 1 - max;
        for (_, id) in finished.into_iter().take(excess) {
            map.remove(&id);
        }
    }

    /// Adds `task` (its id must be new) for `owner`. `None` when the table
    /// is full of pending tasks.
    pub fn insert(&self, owner: &Owner, task: Task) -> Option<watch::Receiver<Task>> {
        let now = Instant::now();
        let mut map = self.lock();
        Self::sweep(&mut map, self.max, now);
        if map.len() >= self.max || map.contains_key(&task.id) {
            return None;
        }
        let id = task.id.clone();
        let finished = is_terminal(state_of(&task)).then_some(now);
        let (tx, rx) = watch::channel(task);
        map.insert(
            id,
            Entry {
                owner: owner.clone(),
                task: tx,
                created: now,
                finished,
            },
        );
        Some(rx)
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

    /// How long task `id` has existed.
    pub fn age(&self, id: &str) -> Option<Duration> {
        self.lock().get(id).map(|e| e.created.elapsed())
    }

    /// Moves task `id` to the state `change` gives it (applied to a copy;
    /// kept only when [`may_move`] allows the move). Returns the new
    /// snapshot.
    pub fn update(&self, id: &str, change: impl FnOnce(&mut Task)) -> Result<Task, MoveError> {
        let mut map = self.lock();
        let entry = map.get_mut(id).ok_or(MoveError::Gone)?;
        let mut next = entry.task.borrow().clone();
        let from = state_of(&next);
        change(&mut next);
        if !may_move(from, state_of(&next)) {
            return Err(MoveError::NotAllowed);
        }
        if is_terminal(state_of(&next)) {
            entry.finished = Some(Instant::now());
        }
        entry.task.send_replace(next.clone());
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2a_types::TaskStatus;

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

    #[test]
    fn another_owner_finds_nothing() {
        let tasks = Tasks::default();
        let alice = Owner::from_credential(Some(b"alice-token"));
        let bob = Owner::from_credential(Some(b"bob-token"));
        tasks
            .insert(&alice, task("t1", TaskState::AuthRequired))
            .unwrap();
        assert!(tasks.get(&alice, "t1").is_some());
        assert!(tasks.get(&bob, "t1").is_none());
        assert!(tasks.subscribe(&bob, "t1").is_none());
        assert!(tasks.get(&Owner::from_credential(None), "t1").is_none());
        assert!(tasks.get(&alice, "t2").is_none());
    }

    #[test]
    fn a_terminal_task_never_moves() {
        let tasks = Tasks::default();
        let o = Owner::from_credential(None);
        tasks
            .insert(&o, task("t", TaskState::AuthRequired))
            .unwrap();
        tasks.update("t", set(TaskState::Canceled)).unwrap();
        assert_eq!(
            tasks.update("t", set(TaskState::Completed)),
            Err(MoveError::NotAllowed)
        );
        assert_eq!(
            state_of(&tasks.get(&o, "t").unwrap()),
            TaskState::Canceled as i32
        );
        assert_eq!(
            tasks.update("nope", set(TaskState::Completed)),
            Err(MoveError::Gone)
        );
    }

    #[test]
    fn bounded_finished_tasks_make_room_pending_ones_do_not() {
        let tasks = Tasks::with_capacity(3);
        let o = Owner::from_credential(None);
        tasks
            .insert(&o, task("done1", TaskState::Completed))
            .unwrap();
        tasks
            .insert(&o, task("p1", TaskState::AuthRequired))
            .unwrap();
        tasks
            .insert(&o, task("p2", TaskState::AuthRequired))
            .unwrap();
        // Full: the oldest finished task is forgotten for the new one.
        tasks
            .insert(&o, task("p3", TaskState::AuthRequired))
            .unwrap();
        assert!(tasks.get(&o, "done1").is_none());
        assert_eq!(tasks.len(), 3);
        // Full of pending tasks: refused.
        assert!(tasks.insert(&o, task("p4", TaskState::Working)).is_none());
        // The same id twice: refused.
        tasks.update("p1", set(TaskState::Canceled)).unwrap();
        assert!(tasks.insert(&o, task("p2", TaskState::Working)).is_none());
    }

    #[test]
    fn a_change_reaches_subscribers() {
        let tasks = Tasks::default();
        let o = Owner::from_credential(None);
        tasks.insert(&o, task("t", TaskState::Working)).unwrap();
        let mut rx = tasks.subscribe(&o, "t").unwrap();
        tasks.update("t", set(TaskState::AuthRequired)).unwrap();
        assert!(rx.has_changed().unwrap());
        assert_eq!(
            state_of(&rx.borrow_and_update()),
            TaskState::AuthRequired as i32
        );
    }
}
