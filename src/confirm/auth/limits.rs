//! Failed-attempt limits per user, address and gateway, with a lock-out that
//! doubles, kept in the store so that they survive a restart and hold across
//! instances. [`Limiter::guarded`] is the one place where a failure is
//! counted before hashing.

use super::{hashing, AuthError};
use crate::confirm::flow::CsError;
use crate::store::cs::{LimitState, Limits};
use crate::store::StoreError;
use std::sync::Arc;

/// How one kind of key is limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Failures allowed before the first lock-out.
    pub free_failures: u32,
    /// First lock-out, in seconds; doubles with each further failure.
    pub base_lock_secs: i64,
    /// Longest lock-out.
    pub max_lock_secs: i64,
    /// Failures are forgotten this long after the last one (once unlocked);
    /// longer than the longest lock-out, so the doubling can escalate.
    pub window_secs: i64,
}

impl Policy {
    /// People: 5 free failures, then 2 s doubling up to 15 min.
    pub const PERSON: Policy = Policy {
        free_failures: 5,
        base_lock_secs: 2,
        max_lock_secs: 900,
        window_secs: 6 * 3600,
    };
    /// A gateway speaks for many users, so it gets more room before a
    /// lock-out and forgets sooner.
    pub const GATEWAY: Policy = Policy {
        free_failures: 20,
        base_lock_secs: 2,
        max_lock_secs: 300,
        window_secs: 600,
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
        if s.failures > self.free_failures {
            let over = (s.failures - self.free_failures - 1).min(20);
            s.locked_until = now + (self.base_lock_secs << over).min(self.max_lock_secs);
        }
        s
    }
}

/// A key the limiter counts failures for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKey {
    /// A user name at the login form.
    LoginUser(String),
    /// A client address at the login form.
    Address(String),
    /// A user name at the voice PIN check.
    PinUser(String),
    /// A gateway (by client id).
    Gateway(String),
}

impl LimitKey {
    fn store_key(&self) -> String {
        match self {
            LimitKey::LoginUser(u) => format!("login-user:{u}"),
            LimitKey::Address(a) => format!("ip:{a}"),
            LimitKey::PinUser(u) => format!("pin-user:{u}"),
            LimitKey::Gateway(g) => format!("gw:{g}"),
        }
    }

    fn policy(&self) -> Policy {
        match self {
            LimitKey::Gateway(_) => Policy::GATEWAY,
            _ => Policy::PERSON,
        }
    }
}

/// Failed-attempt limiting per key, in the store (see [`Policy`]).
#[derive(Clone)]
pub struct Limiter {
    store: Arc<dyn Limits>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter").finish_non_exhaustive()
    }
}

/// Failures counted in advance for an attempt under way; see
/// [`Limiter::guarded`].
#[derive(Debug)]
struct Reserved<'a> {
    limiter: &'a Limiter,
    keys: &'a [LimitKey],
}

impl Reserved<'_> {
    /// The attempt succeeded: a person's keys are forgotten; a gateway, which
    /// speaks for others too, gets back only the failure counted in advance.
    fn succeeded(self, now: i64) -> Result<(), StoreError> {
        for key in self.keys {
            let k = key.store_key();
            match key {
                LimitKey::Gateway(_) => {
                    self.limiter.store.update(&k, &mut |old| {
                        old.map(|mut s| {
                            s.failures = s.failures.saturating_sub(1);
                            s.locked_until = s.locked_until.min(now);
                            s
                        })
                    })?;
                }
                _ => {
                    self.limiter.store.update(&k, &mut |_| None)?;
                }
            }
        }
        Ok(())
    }
}

impl Limiter {
    pub fn new(store: Arc<dyn Limits>) -> Self {
        Limiter { store }
    }

    /// Seconds until the first of `keys` may try again, if any is locked.
    pub fn locked(&self, keys: &[LimitKey], now: i64) -> Result<Option<i64>, StoreError> {
        let mut left = None;
        for key in keys {
            if let Some(s) = self.store.get(&key.store_key())? {
                let l = s.locked_until - now;
                if l > 0 {
                    left = Some(left.map_or(l, |x: i64| x.max(l)));
                }
            }
        }
        Ok(left)
    }

    /// Records a failure for `key`.
    pub fn fail(&self, key: &LimitKey, now: i64) -> Result<(), StoreError> {
        let policy = key.policy();
        self.store
            .update(&key.store_key(), &mut |old| Some(policy.fail(old, now)))?;
        Ok(())
    }

    /// Runs one guarded attempt: refused with `TooManyAttempts` when any of
    /// `keys` is locked; otherwise a failure is counted on every key *before*
    /// `check` runs (so a burst of concurrent guesses cannot all pass the
    /// lock check), and taken back when `check` says it succeeded (`Some`).
    /// `check` runs on the blocking pool, at most [`HASHING_PERMITS`] at once.
    pub async fn guarded<T: Send + 'static>(
        &self,
        keys: &[LimitKey],
        now: i64,
        check: impl FnOnce() -> Result<Option<T>, AuthError> + Send + 'static,
    ) -> Result<Option<T>, CsError> {
        if let Some(retry_after) = self.locked(keys, now)? {
            return Err(CsError::TooManyAttempts { retry_after });
        }
        for key in keys {
            self.fail(key, now)?;
        }
        let reserved = Reserved {
            limiter: self,
            keys,
        };
        let outcome = hashing(check).await??;
        if outcome.is_some() {
            reserved.succeeded(now)?;
        }
        Ok(outcome)
    }

    /// Removes states idle since `cutoff`; returns how many.
    pub fn collect(&self, cutoff: i64) -> Result<usize, StoreError> {
        self.store.collect(cutoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sled_cs;

    fn store() -> (tempfile::TempDir, crate::store::cs::CsStore) {
        sled_cs::temp()
    }

    fn limiter() -> (tempfile::TempDir, Limiter) {
        let (dir, store) = store();
        (dir, Limiter::new(store.limits.clone()))
    }

    #[test]
    fn lockout_doubles_and_is_capped() {
        let p = Policy {
            free_failures: 3,
            base_lock_secs: 2,
            max_lock_secs: 60,
            window_secs: 6 * 3600,
        };
        let mut s = None;
        for _ in 0..3 {
            s = Some(p.fail(s, 0));
        }
        assert_eq!(s.unwrap().locked_until, 0);
        s = Some(p.fail(s, 0));
        assert_eq!(s.unwrap().locked_until, 2);
        s = Some(p.fail(s, 0));
        assert_eq!(s.unwrap().locked_until, 4);
        for _ in 0..10 {
            s = Some(p.fail(s, 0));
        }
        assert_eq!(s.unwrap().locked_until, 60);
    }

    #[test]
    fn failures_are_forgotten_after_a_quiet_window() {
        let p = Policy {
            free_failures: 2,
            base_lock_secs: 2,
            max_lock_secs: 60,
            window_secs: 100,
        };
        let mut s = Some(p.fail(None, 0));
        s = Some(p.fail(s, 50));
        // 200 s of quiet: the next failure is the first again.
        s = Some(p.fail(s, 250));
        assert_eq!(s.unwrap().failures, 1);
        s = Some(p.fail(s, 260));
        assert_eq!(s.unwrap().locked_until, 0);
        s = Some(p.fail(s, 270));
        assert_eq!(s.unwrap().locked_until, 272);
    }

    #[tokio::test]
    async fn a_guarded_attempt_counts_before_checking_and_forgets_on_success() {
        let (_dir, l) = limiter();
        let user = LimitKey::LoginUser("alice".into());
        let keys = [user.clone()];
        for _ in 0..5 {
            let r = l.guarded(&keys, 0, || Ok(None::<()>)).await.unwrap();
            assert!(r.is_none());
        }
        assert_eq!(l.locked(&keys, 0).unwrap(), None);
        l.guarded(&keys, 0, || Ok(None::<()>)).await.unwrap();
        assert_eq!(l.locked(&keys, 0).unwrap(), Some(2));
        // Locked: the check does not even run.
        let refused = l
            .guarded(&keys, 1, || -> Result<Option<()>, AuthError> {
                panic!("must not run while locked")
            })
            .await;
        assert!(matches!(
            refused,
            Err(CsError::TooManyAttempts { retry_after: 1 })
        ));
        // A success forgets a person's failures.
        assert!(l
            .guarded(&keys, 3, || Ok(Some(())))
            .await
            .unwrap()
            .is_some());
        assert_eq!(l.store.get("login-user:alice").unwrap(), None);
    }

    #[tokio::test]
    async fn a_gateway_gets_back_only_the_failure_counted_in_advance() {
        let (_dir, l) = limiter();
        let gw = [LimitKey::Gateway("g".into())];
        for _ in 0..3 {
            l.guarded(&gw, 0, || Ok(None::<()>)).await.unwrap();
        }
        l.guarded(&gw, 0, || Ok(Some(()))).await.unwrap();
        assert_eq!(l.store.get("gw:g").unwrap().unwrap().failures, 3);
    }

    #[test]
    fn limiter_state_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (_db, store) = sled_cs::open_dir(dir.path()).unwrap();
            let l = Limiter::new(store.limits.clone());
            for _ in 0..6 {
                l.fail(&LimitKey::PinUser("bob".into()), 100).unwrap();
            }
        }
        let (_db, store) = sled_cs::open_dir(dir.path()).unwrap();
        let l = Limiter::new(store.limits.clone());
        assert_eq!(
            l.locked(&[LimitKey::PinUser("bob".into())], 100).unwrap(),
            Some(2)
        );
        assert_eq!(l.collect(10_000).unwrap(), 1);
    }
}
