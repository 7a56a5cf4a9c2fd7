//! Waiting for durability without holding a thread (`PROTOCOL.md` §6: a
//! nonce is on disk, flushed, before the RS or the CS answers).
//!
//! [`super::group_commit`] shares one flush among writers that each hold a
//! thread while they wait. A server on sled made each durable step of a
//! flow on a blocking thread for that reason: three hand-offs between
//! threads per flow, and their wake-ups, for writes that take microseconds.
//! Here the writer writes where it runs (sled's writes land in memory) and
//! then *awaits* [`AsyncFlush::flushed`]: one thread per database runs the
//! flushes, each standing for every write made before it started, and wakes
//! the tasks it stood for.
//!
//! The guarantee is [`GroupCommit`](super::group_commit::GroupCommit)'s:
//! `flushed` returns `Ok` once a flush that *started after the call* has
//! succeeded, so that every write the caller made before the call is
//! durable. A flush that fails (or panics) fails every waiter it stood
//! for. The thread starts with the first wait and ends when the last handle
//! is dropped (its flush then finishes first).

use super::StoreError;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// What a flush does: a backend's "make every write so far durable".
type FlushFn = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// A handle on one database's flusher: clone it freely; the thread ends
/// when the last clone is dropped.
#[derive(Clone)]
pub struct AsyncFlush {
    owner: Arc<Owner>,
}

impl std::fmt::Debug for AsyncFlush {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncFlush").finish_non_exhaustive()
    }
}

/// Stops and joins the thread when dropped.
struct Owner {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the thread: a flush was asked for, or the owner is gone.
    kick: Condvar,
    /// Where the flushes stand, for the waiting tasks.
    done: tokio::sync::watch::Sender<Outcome>,
    flush: FlushFn,
}

#[derive(Debug, Default)]
struct State {
    /// The number of the last flush asked for (flushes are numbered from 1).
    requested: u64,
    /// The number of the last flush started.
    started: u64,
    /// Whether the thread was started.
    running: bool,
    /// The owner is gone: the thread ends.
    stop: bool,
}

#[derive(Debug, Clone, Default)]
struct Outcome {
    /// The number of the last flush that ended.
    ended: u64,
    /// The number of the last flush that succeeded.
    succeeded: u64,
    /// Why the last failed flush failed.
    error: Option<Arc<str>>,
}

impl AsyncFlush {
    /// A flusher whose flushes run `flush`; no thread runs until the first
    /// [`flushed`](Self::flushed).
    pub fn new(flush: impl Fn() -> Result<(), String> + Send + Sync + 'static) -> Self {
        let (done, _) = tokio::sync::watch::channel(Outcome::default());
        AsyncFlush {
            owner: Arc::new(Owner {
                shared: Arc::new(Shared {
                    state: Mutex::new(State::default()),
                    kick: Condvar::new(),
                    done,
                    flush: Box::new(flush),
                }),
                thread: Mutex::new(None),
            }),
        }
    }

    /// Returns once a flush that started after this call began has
    /// succeeded: every write made before the call is then durable.
    pub async fn flushed(&self) -> Result<(), StoreError> {
        let shared = &self.owner.shared;
        let mut outcomes = shared.done.subscribe();
        let needed = {
            let mut state = shared.lock();
            if !state.running {
                self.start(&mut state)?;
            }
            // Flush `started + 1` starts after this point (the thread
            // numbers it under this lock), so after the caller's writes.
            let needed = state.started + 1;
            if state.requested < needed {
                state.requested = needed;
                shared.kick.notify_one();
            }
            needed
        };
        let outcome = outcomes
            .wait_for(|o| o.ended >= needed)
            .await
            .map_err(|_| failed("the flusher ended".into()))?;
        if outcome.succeeded >= needed {
            Ok(())
        } else {
            Err(failed(
                outcome
                    .error
                    .as_deref()
                    .unwrap_or("the flush failed")
                    .to_owned(),
            ))
        }
    }

    /// [`flushed`](Self::flushed) for a caller outside any async runtime
    /// (a command that wrote many items and makes them durable at the
    /// end): the calling thread sleeps until the flush has ended.
    pub fn wait(&self) -> Result<(), StoreError> {
        use std::future::Future;
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut flushed = std::pin::pin!(self.flushed());
        loop {
            if let std::task::Poll::Ready(outcome) = flushed.as_mut().poll(&mut cx) {
                return outcome;
            }
            // A wake-up before this park makes it return at once.
            std::thread::park();
        }
    }

    /// Starts the thread (under the state's lock).
    fn start(&self, state: &mut State) -> Result<(), StoreError> {
        let shared = self.owner.shared.clone();
        let handle = std::thread::Builder::new()
            .name("cheq-flusher".into())
            .spawn(move || shared.run())
            .map_err(|e| failed(format!("the flusher thread: {e}")))?;
        state.running = true;
        *self
            .owner
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(handle);
        Ok(())
    }

    /// How many flushes ended so far.
    #[cfg(test)]
    fn flushes(&self) -> u64 {
        self.owner.shared.done.borrow().ended
    }
}

fn failed(message: String) -> StoreError {
    StoreError::Backend {
        op: "flush",
        message,
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent at every unlock.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The thread: one flush at a time, while flushes are asked for.
    fn run(&self) {
        loop {
            let number = {
                let mut state = self.lock();
                while !state.stop && state.requested <= state.started {
                    state = self
                        .kick
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                if state.requested <= state.started {
                    // Stopped, and nothing left to flush.
                    return;
                }
                state.started += 1;
                state.started
            };
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.flush)()))
                .unwrap_or_else(|_| Err("the flush panicked".to_owned()));
            self.done.send_modify(|o| {
                o.ended = number;
                match result {
                    Ok(()) => o.succeeded = number,
                    Err(e) => o.error = Some(e.into()),
                }
            });
        }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.kick.notify_one();
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            // The flush under way (if any) ends first; a panic in it was
            // caught, so the join reports none.
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn no_thread_runs_before_the_first_wait() {
        let flusher = AsyncFlush::new(|| Ok(()));
        assert!(!flusher.owner.shared.lock().running);
        runtime().block_on(flusher.flushed()).unwrap();
        assert!(flusher.owner.shared.lock().running);
        assert_eq!(flusher.flushes(), 1);
    }

    #[test]
    fn a_blocking_wait_is_covered_by_a_flush_that_starts_after_it() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let flusher = AsyncFlush::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        flusher.wait().unwrap();
        flusher.wait().unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        let failing = AsyncFlush::new(|| Err("the disk is full".into()));
        assert!(failing
            .wait()
            .unwrap_err()
            .to_string()
            .contains("the disk is full"));
    }

    /// The thread that awaits the first flush.
    type FirstWait = std::thread::JoinHandle<Result<(), StoreError>>;

    /// A flusher that counts its flushes, and whose first flush, awaited
    /// on a thread of its own (returned), is running when this returns and
    /// ends when the sender says so.
    fn first_flush_held() -> (AsyncFlush, Arc<AtomicUsize>, FirstWait, mpsc::Sender<()>) {
        let (entered, running) = mpsc::channel();
        let (release, gate) = mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let flusher = AsyncFlush::new(move || {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                entered.send(()).unwrap();
                gate.lock().unwrap().recv().unwrap();
            }
            Ok(())
        });
        let first = {
            let f = flusher.clone();
            std::thread::spawn(move || runtime().block_on(f.flushed()))
        };
        running.recv().unwrap();
        (flusher, calls, first, release)
    }

    #[test]
    fn a_wait_is_covered_only_by_a_flush_that_starts_after_it() {
        // The first flush runs until released; a write made while it runs
        // is covered by the second flush, never by the first.
        let (flusher, calls, first, release) = first_flush_held();
        let rt = runtime();
        // Flush 1 is under way: this wait needs flush 2.
        let second = {
            let f = flusher.clone();
            rt.spawn(async move { f.flushed().await })
        };
        rt.block_on(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
        });
        assert!(
            !second.is_finished(),
            "covered by a flush that began before"
        );
        release.send(()).unwrap();
        first.join().unwrap().unwrap();
        rt.block_on(second).unwrap().unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn waiters_that_arrive_during_a_flush_share_the_next() {
        let (flusher, calls, first, release) = first_flush_held();
        let rt = runtime();
        let waiters: Vec<_> = (0..10)
            .map(|_| {
                let f = flusher.clone();
                rt.spawn(async move { f.flushed().await })
            })
            .collect();
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(20)).await });
        release.send(()).unwrap();
        first.join().unwrap().unwrap();
        rt.block_on(async {
            for w in waiters {
                w.await.unwrap().unwrap();
            }
        });
        // One flush for the first wait, one for the ten.
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_failed_flush_fails_its_waiters_and_a_later_one_succeeds() {
        let fail = Arc::new(AtomicBool::new(true));
        let failing = fail.clone();
        let flusher = AsyncFlush::new(move || {
            if failing.load(Ordering::SeqCst) {
                Err("disk full".to_owned())
            } else {
                Ok(())
            }
        });
        let rt = runtime();
        let err = rt.block_on(flusher.flushed()).unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
        fail.store(false, Ordering::SeqCst);
        rt.block_on(flusher.flushed()).unwrap();
    }

    #[test]
    fn a_panicking_flush_fails_its_waiters_and_the_thread_goes_on() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let flusher = AsyncFlush::new(move || {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("boom");
            }
            Ok(())
        });
        let rt = runtime();
        let err = rt.block_on(flusher.flushed()).unwrap_err();
        assert!(err.to_string().contains("panicked"), "{err}");
        rt.block_on(flusher.flushed()).unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn dropping_the_last_handle_ends_the_thread_and_releases_the_flush() {
        // The flush closure owns this Arc; once the thread ends and the
        // handles are gone, only the test holds it.
        let held = Arc::new(());
        let inside = held.clone();
        let flusher = AsyncFlush::new(move || {
            let _ = &inside;
            Ok(())
        });
        runtime().block_on(flusher.flushed()).unwrap();
        assert_eq!(Arc::strong_count(&held), 2);
        drop(flusher);
        assert_eq!(Arc::strong_count(&held), 1);
    }
}
