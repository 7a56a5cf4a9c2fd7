//! The pending calls of 2025-11-25 sessions: their bounds, their
//! bookkeeping (reserved slots, what each call is waiting for), and the one
//! poller task that reads their results.

use super::{Elicitation, Final, Notifier};
use cheq_resource::agent::{Agent, AgentError, ResultRead};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The schedule of result reads, shared with the A2A bridge.
pub use cheq_resource::agent::{
    error_backoff, next_read_in, MAX_ERROR_BACKOFF, MAX_POLL_INTERVAL, POLL_INTERVAL,
};

/// The most pending confirmations the bridge keeps for 2025-11-25 sessions;
/// past it a new one is refused (the oldest are swept first).
pub const MAX_PENDING: usize = 10_000;
/// The most pending confirmations one session may hold at once.
pub const MAX_PENDING_PER_SESSION: usize = 64;
/// How long a pending confirmation is kept at most (longer than any CHEQ lives).
pub const PENDING_TTL: Duration = Duration::from_secs(25 * 3600);
/// How long a final outcome waits to be collected before it is dropped.
pub const COLLECT_TTL: Duration = Duration::from_secs(3600);
/// How many result reads the poller has under way at once.
pub const POLL_CONCURRENCY: usize = 16;

/// Where a pending 2025-11-25 call stands.
pub(super) enum Watch {
    /// Not final yet: the poller reads `result_uri` at `due`.
    Waiting {
        result_uri: String,
        due: Instant,
        /// Reads that failed in a row.
        failures: u32,
    },
    /// Final, since `at`; kept for the retry to collect.
    Final { outcome: Final, at: Instant },
}

pub(super) struct Pending {
    pub(super) session: String,
    pub(super) tool: String,
    pub(super) digest: String,
    pub(super) elicitation: Elicitation,
    pub(super) created: Instant,
    pub(super) watch: Watch,
    /// Taken by whoever first sees the final state, so that the client is
    /// told exactly once.
    pub(super) notify: Option<Notifier>,
}

/// The pending 2025-11-25 calls, and the slots held by calls whose RS call
/// is under way (counted against the bounds like the calls they may become).
#[derive(Default)]
pub(super) struct Calls {
    pub(super) map: HashMap<String, Pending>,
    pub(super) reserved: HashMap<String, usize>,
    pub(super) reserved_total: usize,
}

impl Calls {
    fn release(&mut self, session: &str) {
        self.reserved_total = self.reserved_total.saturating_sub(1);
        if let Some(n) = self.reserved.get_mut(session) {
            *n -= 1;
            if *n == 0 {
                self.reserved.remove(session);
            }
        }
    }

    pub(super) fn sweep(&mut self, now: Instant) {
        self.map.retain(|_, p| match &p.watch {
            Watch::Final { at, .. } => now.duration_since(*at) < COLLECT_TTL,
            Watch::Waiting { .. } => now.duration_since(p.created) < PENDING_TTL,
        });
    }
}

/// What the bridge and its poller share.
pub(super) struct Shared {
    pub(super) agent: Agent,
    pub(super) calls: Mutex<Calls>,
}

impl Shared {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a read of call `id`'s result, and tells the client once it
    /// is final (unless someone already did).
    fn record(&self, id: &str, read: Result<ResultRead, AgentError>) {
        let now = Instant::now();
        let notify = {
            let mut calls = self.lock();
            let Some(p) = calls.map.get_mut(id) else {
                return;
            };
            let Watch::Waiting { due, failures, .. } = &mut p.watch else {
                return;
            };
            match read {
                Ok(ResultRead::Final(status)) => {
                    p.watch = Watch::Final {
                        outcome: status.into(),
                        at: now,
                    };
                    p.notify.take()
                }
                Ok(ResultRead::Pending { retry_after }) => {
                    *failures = 0;
                    *due = now + next_read_in(now.duration_since(p.created), retry_after);
                    None
                }
                Err(e) => {
                    *failures = failures.saturating_add(1);
                    *due = now + error_backoff(*failures);
                    tracing::debug!(error = %e, "a pending call's result could not be read");
                    None
                }
            }
        };
        if let Some(notify) = notify {
            notify(id);
        }
    }

    /// One walk of the pending calls: sweeps, reads every result that is
    /// due ([`POLL_CONCURRENCY`] at a time) and records it. Returns whether
    /// any call is left to watch, and when the next read is due.
    async fn poll_round(self: &Arc<Self>) -> Option<Instant> {
        let now = Instant::now();
        let due: Vec<(String, String)> = {
            let mut calls = self.lock();
            calls.sweep(now);
            calls
                .map
                .iter_mut()
                .filter_map(|(id, p)| match &mut p.watch {
                    Watch::Waiting {
                        result_uri, due, ..
                    } if *due <= now => {
                        // Not read again before this read has ended (or
                        // timed out) and said when.
                        *due = now + cheq_resource::agent::REQUEST_TIMEOUT + POLL_INTERVAL;
                        Some((id.clone(), result_uri.clone()))
                    }
                    _ => None,
                })
                .collect()
        };
        let mut queue = due.into_iter();
        let mut reads = tokio::task::JoinSet::new();
        loop {
            while reads.len() < POLL_CONCURRENCY {
                let Some((id, uri)) = queue.next() else {
                    break;
                };
                let shared = self.clone();
                reads.spawn(async move {
                    let read = shared.agent.read_result(&uri).await;
                    shared.record(&id, read);
                });
            }
            if reads.join_next().await.is_none() {
                break;
            }
        }
        let calls = self.lock();
        calls
            .map
            .values()
            .filter_map(|p| match &p.watch {
                Watch::Waiting { due, .. } => Some(*due),
                Watch::Final { .. } => None,
            })
            .min()
    }
}

/// The one task that reads the results of all pending 2025-11-25 calls. It
/// ends with the bridge.
pub(super) async fn poller(shared: Weak<Shared>, wake: Arc<tokio::sync::Notify>) {
    loop {
        let next = match shared.upgrade() {
            Some(shared) => shared.poll_round().await,
            None => return,
        };
        match next {
            // Rounds at most every quarter second, however the reads fall.
            Some(at) => {
                let soonest = Instant::now() + Duration::from_millis(250);
                tokio::time::sleep_until(at.max(soonest).into()).await;
            }
            // Nothing to watch: until a call is added.
            None => wake.notified().await,
        }
    }
}

/// A slot held for a call whose RS call is under way; given back when
/// dropped unless the call became pending ([`Reservation::fill`]).
pub(super) struct Reservation<'a> {
    pub(super) shared: &'a Shared,
    pub(super) session: &'a str,
    pub(super) held: bool,
}

impl Reservation<'_> {
    /// Turns the slot into the pending call `id`, under one lock.
    pub(super) fn fill(mut self, id: String, pending: Pending) {
        let mut calls = self.shared.lock();
        calls.release(self.session);
        calls.map.insert(id, pending);
        self.held = false;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.held {
            self.shared.lock().release(self.session);
        }
    }
}
