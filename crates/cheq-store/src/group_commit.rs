//! Group commit: one flush to disk stands for every write made before it
//! started (`PROTOCOL.md` §6: a nonce is on disk, flushed, before the RS or
//! the CS answers).
//!
//! A writer that needs its writes durable calls [`GroupCommit::flush`] after
//! making them. If no flush is running, it runs one; if one is running, that
//! flush began before the writer's writes may have landed, so the writer
//! waits for it to end and then for the *next* flush, which one of the
//! waiting writers runs for all of them. Under load, many writers share one
//! flush (sled's flush writes and syncs its log buffer, and hands the write
//! to a thread of its own: a complete flow made five such flushes);
//! alone, a writer pays one flush, as before.
//!
//! A flush that fails fails every writer it stood for; a later flush that
//! succeeds covers writers that were waiting for it, as it covers their
//! writes too.
//!
//! A writer on an async task awaits [`super::AsyncFlush`] instead, whose
//! thread runs the flushes. Here the writer's own thread leads the flush,
//! with no hand-off to another, which is what synchronous writers keep:
//! the CLI, the steps off a flow's hot path, many threads recording nonces
//! at once.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// Why [`GroupCommit::flush`] failed.
#[derive(Debug, PartialEq, Eq)]
pub enum Failed<E> {
    /// The flush this writer ran failed with this error.
    Own(E),
    /// The flush another writer ran for this one failed (its error, as text).
    Shared(String),
}

/// Flushes shared by concurrent writers of one database.
///
/// A writer needing flush number `n` waits on `ended[n % 2]`: when flush `n`
/// ends, its writers are released, and one writer of flush `n + 1` (if any)
/// is woken to lead it; the others of `n + 1` sleep on until it ends. (With
/// one condition variable, every writer was woken twice.)
#[derive(Debug, Default)]
pub struct GroupCommit {
    state: Mutex<State>,
    ended: [Condvar; 2],
}

#[derive(Debug, Default)]
struct State {
    /// The number of the last flush started (flushes are numbered from 1).
    started: u64,
    /// The number of the last flush that ended.
    ended: u64,
    /// The number of the last flush that succeeded.
    succeeded: u64,
    /// Whether a flush is running now.
    running: bool,
    /// Writers waiting for a flush.
    waiting: usize,
    /// Why the last failed flush failed.
    error: Option<String>,
    /// How many times a waiting writer was woken (for tests).
    wakeups: u64,
}

impl GroupCommit {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent at every unlock: a panic elsewhere
        // cannot leave it half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns once a flush (`flush`, run here or by another writer) that
    /// started after this call began has succeeded; every write made before
    /// this call is then durable.
    pub fn flush<E: std::fmt::Display>(
        &self,
        flush: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), Failed<E>> {
        let mut state = self.lock();
        let needed = state.started + 1;
        while state.running && state.ended < needed {
            state.waiting += 1;
            state = self.ended[parity(needed)]
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.waiting -= 1;
            state.wakeups += 1;
        }
        if state.ended >= needed {
            // A flush that started after this call has ended.
            return if state.succeeded >= needed {
                Ok(())
            } else {
                Err(Failed::Shared(
                    state
                        .error
                        .clone()
                        .unwrap_or_else(|| "the flush failed".to_owned()),
                ))
            };
        }
        // No flush runs, and none since this call began: lead the next one,
        // for this writer and every waiting one.
        state.running = true;
        state.started += 1;
        let leading = Leading {
            group: self,
            number: state.started,
            ended: false,
        };
        drop(state);
        let result = flush();
        leading.end(result.as_ref().map(drop).map_err(ToString::to_string));
        result.map_err(Failed::Own)
    }

    /// Ends flush `number` with `result`, and wakes every writer of it and
    /// one of the next, to lead it.
    fn end(&self, number: u64, result: Result<(), String>) {
        let mut state = self.lock();
        state.running = false;
        state.ended = number;
        match result {
            Ok(()) => state.succeeded = number,
            Err(e) => state.error = Some(e),
        }
        drop(state);
        self.ended[parity(number)].notify_all();
        self.ended[parity(number + 1)].notify_one();
    }

    /// How many writers wait for a flush now (for tests).
    pub fn waiting(&self) -> usize {
        self.lock().waiting
    }

    /// How many times a waiting writer was woken so far (for tests).
    pub fn wakeups(&self) -> u64 {
        self.lock().wakeups
    }
}

/// The flush this writer leads: ended by [`Leading::end`], or as failed if
/// the flush panicked, so that the writers waiting for it (and every later
/// one) are not left waiting for ever.
struct Leading<'a> {
    group: &'a GroupCommit,
    number: u64,
    ended: bool,
}

impl Leading<'_> {
    fn end(mut self, result: Result<(), String>) {
        self.ended = true;
        self.group.end(self.number, result);
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.group
                .end(self.number, Err("the flush panicked".to_owned()));
        }
    }
}

/// Which of the two condition variables the writers of flush `n` wait on.
fn parity(n: u64) -> usize {
    usize::from(n % 2 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    /// A writer whose flush runs, then waits until the returned sender says
    /// go, then ends as `outcome` says. Returns once that flush is running.
    fn gated_leader(
        group: &Arc<GroupCommit>,
        outcome: impl FnOnce() -> Result<(), String> + Send + 'static,
    ) -> (
        std::thread::JoinHandle<Result<(), Failed<String>>>,
        mpsc::Sender<()>,
    ) {
        let (entered, running) = mpsc::channel();
        let (release, gate) = mpsc::channel::<()>();
        let group = group.clone();
        let leader = std::thread::spawn(move || {
            group.flush(|| {
                entered.send(()).unwrap();
                gate.recv().unwrap();
                outcome()
            })
        });
        running.recv().unwrap();
        (leader, release)
    }

    /// Returns once `n` writers wait for a flush.
    fn until_waiting(group: &GroupCommit, n: usize) {
        while group.waiting() < n {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_lone_writer_flushes_once_each_time() {
        let group = GroupCommit::new();
        let runs = AtomicUsize::new(0);
        for _ in 0..3 {
            group
                .flush(|| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(())
                })
                .unwrap();
        }
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    /// Seven writers arrive while a flush runs: one more flush covers all.
    #[test]
    fn writers_during_a_flush_share_the_next_one() {
        let group = Arc::new(GroupCommit::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let (first, release) = {
            let runs = runs.clone();
            gated_leader(&group, move || {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        };
        let others: Vec<_> = (0..7)
            .map(|_| {
                let (group, runs) = (group.clone(), runs.clone());
                std::thread::spawn(move || {
                    group.flush(|| {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, String>(())
                    })
                })
            })
            .collect();
        until_waiting(&group, 7);
        release.send(()).unwrap();
        assert_eq!(first.join().unwrap(), Ok(()));
        for o in others {
            assert_eq!(o.join().unwrap(), Ok(()));
        }
        // The first flush started before the others wrote: it cannot stand
        // for them; exactly one more does.
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    /// When a flush ends, of the writers waiting for the next one only the
    /// one that leads it wakes; the others sleep until it ends.
    #[test]
    fn the_end_of_a_flush_wakes_only_the_leader_of_the_next() {
        let group = Arc::new(GroupCommit::new());
        let (entered, running) = mpsc::channel();
        let (release, gate) = mpsc::channel::<()>();
        let gate = Arc::new(std::sync::Mutex::new(gate));
        let writer = || {
            let (group, entered, gate) = (group.clone(), entered.clone(), gate.clone());
            std::thread::spawn(move || {
                group.flush(|| {
                    entered.send(()).unwrap();
                    gate.lock().unwrap().recv().unwrap();
                    Ok::<_, String>(())
                })
            })
        };
        let mut writers = vec![writer()];
        running.recv().unwrap();
        writers.extend((0..7).map(|_| writer()));
        until_waiting(&group, 7);
        release.send(()).unwrap();
        // The second flush runs, led by one of the seven.
        running.recv().unwrap();
        // Time for any other writer woken by the first flush's end to run.
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(group.wakeups(), 1);
        assert_eq!(group.waiting(), 6);
        release.send(()).unwrap();
        for w in writers {
            assert_eq!(w.join().unwrap(), Ok(()));
        }
        assert_eq!(group.wakeups(), 7);
    }

    /// A flush that panics fails the writers waiting for it, and the next
    /// writer still gets a flush of its own.
    #[test]
    fn a_panicking_flush_leaves_no_writer_waiting() {
        let group = Arc::new(GroupCommit::new());
        let (leader, release) = gated_leader(&group, || panic!("the disk went away"));
        let (done, waited) = mpsc::channel();
        {
            let group = group.clone();
            std::thread::spawn(move || done.send(group.flush(|| Ok::<_, String>(()))));
        }
        until_waiting(&group, 1);
        release.send(()).unwrap();
        assert!(leader.join().is_err(), "the leader's flush panicked");
        // The waiter needed the flush after the one that panicked: it leads
        // its own, which succeeds.
        let waited = waited
            .recv_timeout(Duration::from_secs(10))
            .expect("the waiter was left waiting");
        assert_eq!(waited, Ok(()));
        assert_eq!(group.flush(|| Ok::<_, String>(())), Ok(()));
    }

    #[test]
    fn a_failed_flush_fails_the_writers_it_stood_for() {
        let group = GroupCommit::new();
        let failed = group.flush(|| Err("disk full"));
        assert_eq!(failed, Err(Failed::Own("disk full")));
        // The next writer gets a flush of its own, which may succeed.
        assert_eq!(group.flush(|| Ok::<_, String>(())), Ok(()));
    }

    /// A writer waiting for a flush that fails hears of it.
    #[test]
    fn writers_waiting_for_a_failed_flush_hear_of_it() {
        let group = Arc::new(GroupCommit::new());
        let (first, release) = gated_leader(&group, || Ok(()));
        // Two writers arrive: one leads the next flush, which fails; the
        // other waits for it (or leads it), and fails too.
        let (entered2, second_running) = mpsc::channel();
        let (release2, gate2) = mpsc::channel::<()>();
        let gate2 = Arc::new(Mutex::new(gate2));
        let others: Vec<_> = (0..2)
            .map(|_| {
                let (group, entered2, gate2) = (group.clone(), entered2.clone(), gate2.clone());
                std::thread::spawn(move || {
                    group.flush(|| {
                        entered2.send(()).unwrap();
                        gate2.lock().unwrap().recv().unwrap();
                        Err("disk full".to_owned())
                    })
                })
            })
            .collect();
        until_waiting(&group, 2);
        release.send(()).unwrap();
        assert_eq!(first.join().unwrap(), Ok(()));
        second_running.recv().unwrap();
        until_waiting(&group, 1);
        release2.send(()).unwrap();
        let mut results: Vec<_> = others.into_iter().map(|o| o.join().unwrap()).collect();
        results.sort_by_key(|r| matches!(r, Err(Failed::Shared(_))));
        assert_eq!(
            results,
            vec![
                Err(Failed::Own("disk full".to_owned())),
                Err(Failed::Shared("disk full".to_owned()))
            ]
        );
    }
}
