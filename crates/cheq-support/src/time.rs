//! Time as a parameter (`Clock`), so that expiry and replay (PROTOCOL.md §4,
//! §5 rule 4, §6, §7) can be tested without waiting. Shared by every layer.

use chrono::{DateTime, Duration, Utc};
use std::sync::Mutex;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// Now.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to (tests).
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// A clock stopped at `now`.
    pub fn new(now: DateTime<Utc>) -> Self {
        ManualClock {
            now: Mutex::new(now),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut guard = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *guard += by;
    }

    /// Sets the clock.
    pub fn set(&self, now: DateTime<Utc>) {
        let mut guard = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *guard = now;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}
