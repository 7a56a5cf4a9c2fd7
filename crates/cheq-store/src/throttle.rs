//! Throttling arithmetic shared by both servers (PROTOCOL.md §2, §10: failed
//! attempts are rate-limited): the state of one key and how a policy turns
//! failures into a lock-out or a delay. Pure functions of the time given.

use serde::{Deserialize, Serialize};

/// The failed attempts of one limiter key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitState {
    pub failures: u32,
    /// Locked until (unix seconds).
    pub locked_until: i64,
    /// Last failure (unix seconds).
    pub last_failure: i64,
}

/// How one kind of key is limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Failures allowed before the first lock-out (or delay).
    pub free_failures: u32,
    /// First lock-out (or delay), in seconds; doubles with each further failure.
    pub base_secs: i64,
    /// Longest lock-out (or delay).
    pub max_secs: i64,
    /// Failures are forgotten this long after the last one (once unlocked).
    pub window_secs: i64,
}

impl Policy {
    /// One account from one address: 5 free failures, then 2 s doubling up
    /// to 15 min.
    pub const ACCOUNT_AT_ADDRESS: Policy = Policy {
        free_failures: 5,
        base_secs: 2,
        max_secs: 900,
        window_secs: 6 * 3600,
    };
    /// One address, whatever account it names (password spraying; a NAT may
    /// hide several people): 20 free failures, then 2 s doubling up to 15 min.
    pub const ADDRESS: Policy = Policy {
        free_failures: 20,
        base_secs: 2,
        max_secs: 900,
        window_secs: 6 * 3600,
    };
    /// One gateway id from one address: 10 free failures, then 2 s doubling
    /// up to 5 min; forgotten after 10 min of quiet.
    pub const GATEWAY_AT_ADDRESS: Policy = Policy {
        free_failures: 10,
        base_secs: 2,
        max_secs: 300,
        window_secs: 600,
    };
    /// One account (or PIN) from anywhere: a delay, never a refusal. 5 free
    /// failures, then 1 s doubling up to [`MAX_DELAY_SECS`].
    pub const ACCOUNT: Policy = Policy {
        free_failures: 5,
        base_secs: 1,
        max_secs: MAX_DELAY_SECS,
        window_secs: 24 * 3600,
    };

    /// The state after one more failure at `now`.
    pub fn fail(&self, old: Option<LimitState>, now: i64) -> LimitState {
        let mut s = old.unwrap_or(LimitState {
            failures: 0,
            locked_until: 0,
            last_failure: now,
        });
        if s.locked_until <= now && now - s.last_failure > self.window_secs {
            // A quiet window since the last failure: start afresh.
            s.failures = 0;
        }
        s.last_failure = now;
        s.failures = s.failures.saturating_add(1);
        s.locked_until = now + self.penalty(s.failures);
        s
    }

    /// Seconds of lock-out (or delay) after `failures` failures.
    pub fn penalty(&self, failures: u32) -> i64 {
        if failures <= self.free_failures {
            return 0;
        }
        let over = (failures - self.free_failures - 1).min(20);
        (self.base_secs << over).min(self.max_secs)
    }

    /// The delay before a check under this (delay) policy, given the state:
    /// once the free failures are spent, the very next check waits (the
    /// same as a refusing key would lock it out for one more failure).
    pub fn delay(&self, state: Option<LimitState>, now: i64) -> i64 {
        match state {
            Some(s) if now - s.last_failure <= self.window_secs => {
                self.penalty(s.failures.saturating_add(1))
            }
            _ => 0,
        }
    }
}

/// Longest delay before a check of one account.
pub const MAX_DELAY_SECS: i64 = 15;
