//! Failed-attempt limits (PROTOCOL.md §2, §10: "failed attempts are
//! rate-limited"), kept in the store so that they survive a restart and hold
//! across instances. Two kinds of limit, so that a stranger's wrong guesses
//! never make the right credential fail:
//!
//! - **refusals** for what only the guesser controls: one account from one
//!   address, one address across accounts, one gateway id from one address.
//!   Past a few free failures the key is locked (429 + `Retry-After`), the
//!   lock doubling up to a cap. Only the guessing address is locked out.
//! - **delays** for what anyone can name: an account (or a user's PIN).
//!   Checks for one account run one at a time, each after a delay that grows
//!   with the account's recent failures, so guessing it from many addresses
//!   is slow, while its owner is never refused. An address from which the
//!   account signed in before skips the delay.
//!
//! [`Limiter::guarded`] is the one place where failures are counted (before
//! hashing, so concurrent guesses all count) and delays taken.

use super::{hashing, AuthError, Budget};
use crate::flow::CsError;
use cheq_store::cs::{LimitState, Limits};
pub use cheq_store::throttle::{Policy, MAX_DELAY_SECS};
use cheq_store::StoreError;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// A key the limiter counts failures for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKey {
    /// One account from one address (the login form): refused.
    AccountAt { account: String, address: String },
    /// One address, any account or gateway: refused.
    Address(String),
    /// One gateway id from one address: refused.
    GatewayAt { gateway: String, address: String },
    /// Answers from identity providers that fail, from one address
    /// (`/oidc/callback`): refused. Its own key, so that a provider's
    /// trouble never locks an address out of the password form.
    CallbackAt(String),
    /// One account at the login form, from anywhere: delayed.
    Account(String),
    /// One user's voice PIN, through any gateway: delayed.
    Pin(String),
    /// Registrations of resource servers (§16.3) from one address: every
    /// attempt counts, and past the rate the address is refused.
    RegistrationFrom(String),
    /// Registrations of one resource server's origin, from anywhere: every
    /// attempt counts, and past the rate the origin is refused.
    RegistrationOf(String),
}

/// Registrations from one address (§16.3): 20 within a quiet window of
/// 10 min, then refused for 10 s doubling up to 15 min.
pub const REGISTRATION_ADDRESS: Policy = Policy {
    free_failures: 20,
    base_secs: 10,
    max_secs: 900,
    window_secs: 600,
};

/// Registrations of one origin (§16.3): 10 within a quiet window of 10
/// min, then refused for 10 s doubling up to 15 min. An RS registers once
/// at its start; a refresh now and then stays far below.
pub const REGISTRATION_ORIGIN: Policy = Policy {
    free_failures: 10,
    base_secs: 10,
    max_secs: 900,
    window_secs: 600,
};

impl LimitKey {
    fn store_key(&self) -> String {
        match self {
            LimitKey::AccountAt { account, address } => format!("acct@ip:{account}\0{address}"),
            LimitKey::Address(a) => format!("ip:{a}"),
            LimitKey::GatewayAt { gateway, address } => format!("gw@ip:{gateway}\0{address}"),
            LimitKey::CallbackAt(a) => format!("oidc@ip:{a}"),
            LimitKey::Account(a) => format!("acct:{a}"),
            LimitKey::Pin(u) => format!("pin:{u}"),
            LimitKey::RegistrationFrom(a) => format!("reg@ip:{a}"),
            LimitKey::RegistrationOf(o) => format!("reg:{o}"),
        }
    }

    /// The policy of this key.
    pub fn policy(&self) -> Policy {
        match self {
            LimitKey::AccountAt { .. } => Policy::ACCOUNT_AT_ADDRESS,
            LimitKey::Address(_) | LimitKey::CallbackAt(_) => Policy::ADDRESS,
            LimitKey::GatewayAt { .. } => Policy::GATEWAY_AT_ADDRESS,
            LimitKey::Account(_) | LimitKey::Pin(_) => Policy::ACCOUNT,
            LimitKey::RegistrationFrom(_) => REGISTRATION_ADDRESS,
            LimitKey::RegistrationOf(_) => REGISTRATION_ORIGIN,
        }
    }

    /// Whether this key slows checks down rather than refusing them.
    pub fn delays(&self) -> bool {
        matches!(self, LimitKey::Account(_) | LimitKey::Pin(_))
    }

    /// The key that remembers a success of this delayed key's account from
    /// `address` (an address the account is known at skips its delay).
    fn known_at(&self, address: &str) -> Option<String> {
        match self {
            LimitKey::Account(a) => Some(format!("known:{a}\0{address}")),
            LimitKey::Pin(_) => None,
            _ => None,
        }
    }
}

/// Longest wait for one's turn at a delaying key before "busy".
pub const MAX_TURN_WAIT: Duration = Duration::from_secs(20);

/// How long an address where an account signed in stays known.
pub const KNOWN_ADDRESS_SECS: i64 = 30 * 24 * 3600;
const STRIPES: usize = 256;

/// Failed-attempt limiting per key, in the store (see the module docs).
#[derive(Clone)]
pub struct Limiter {
    store: Arc<dyn Limits>,
    /// Checks of one delayed key run one at a time (striped).
    turns: Arc<Vec<tokio::sync::Mutex<()>>>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter").finish_non_exhaustive()
    }
}

fn stripe(key: &str) -> usize {
    Sha256::digest(key.as_bytes())[0] as usize % STRIPES
}

impl Limiter {
    pub fn new(store: Arc<dyn Limits>) -> Self {
        Limiter {
            store,
            turns: Arc::new((0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect()),
        }
    }

    /// Seconds until the first refusing key of `keys` may try again, if any
    /// is locked. Delaying keys never lock.
    pub fn locked(&self, keys: &[LimitKey], now: i64) -> Result<Option<i64>, StoreError> {
        let mut left = None;
        for key in keys.iter().filter(|k| !k.delays()) {
            if let Some(s) = self.store.get(&key.store_key())? {
                let l = s.locked_until - now;
                if l > 0 {
                    left = Some(left.map_or(l, |x: i64| x.max(l)));
                }
            }
        }
        Ok(left)
    }

    /// Counts one attempt on each of `keys`, each a rate (every attempt
    /// counts, whatever its outcome): the answer is how long to wait when a
    /// key is locked already (then nothing is counted, so that a flood past
    /// the rate costs one read per key), or when this attempt is past a
    /// key's free allowance. Each count is one atomic update of the stored
    /// state, so concurrent attempts on every instance never pass more than
    /// the allowance.
    pub fn count_attempt(&self, keys: &[LimitKey], now: i64) -> Result<Option<i64>, StoreError> {
        if let Some(wait) = self.locked(keys, now)? {
            return Ok(Some(wait));
        }
        let mut wait = None;
        for key in keys {
            let policy = key.policy();
            let state = self
                .store
                .update(&key.store_key(), &mut |old| Some(policy.fail(old, now)))?;
            if let Some(s) = state.filter(|s| s.failures > policy.free_failures) {
                let w = (s.locked_until - now).max(1);
                wait = Some(wait.map_or(w, |x: i64| x.max(w)));
            }
        }
        Ok(wait)
    }

    /// Records a failure for `key`.
    pub fn fail(&self, key: &LimitKey, now: i64) -> Result<(), StoreError> {
        let policy = key.policy();
        self.store
            .update(&key.store_key(), &mut |old| Some(policy.fail(old, now)))?;
        Ok(())
    }

    /// Whether the account of delaying `key` signed in from `address`
    /// within [`KNOWN_ADDRESS_SECS`].
    fn is_known(&self, key: &LimitKey, address: &str, now: i64) -> Result<bool, StoreError> {
        let Some(known) = key.known_at(address) else {
            return Ok(false);
        };
        Ok(self
            .store
            .get(&known)?
            .is_some_and(|s| now - s.last_failure <= KNOWN_ADDRESS_SECS))
    }

    /// The delay `key` imposes on a check from `address` at `now`.
    pub fn delay_of(&self, key: &LimitKey, address: &str, now: i64) -> Result<i64, StoreError> {
        if self.is_known(key, address, now)? {
            return Ok(0);
        }
        Ok(key.policy().delay(self.store.get(&key.store_key())?, now))
    }

    /// Runs one guarded check from `address` and returns what it found:
    /// 1. refused with `TooManyAttempts` when a refusing key is locked;
    /// 2. a failure is counted on every refusing key *before* the check, so a
    ///    burst of concurrent guesses cannot all pass step 1;
    /// 3. for each delaying key, the check waits its turn (one at a time per
    ///    key) and then the key's delay, unless the account is known at
    ///    `address`;
    /// 4. `check` runs on the blocking pool under `budget`; a success
    ///    (`Some`) takes back the failures counted in advance and remembers
    ///    the address; a failure is counted on the delaying keys.
    pub async fn guarded<T: Send + 'static>(
        &self,
        keys: &[LimitKey],
        address: &str,
        budget: Budget,
        now: i64,
        check: impl FnOnce() -> Result<Option<T>, AuthError> + Send + 'static,
    ) -> Result<Option<T>, CsError> {
        if let Some(retry_after) = self.locked(keys, now)? {
            return Err(CsError::TooManyAttempts { retry_after });
        }
        for key in keys.iter().filter(|k| !k.delays()) {
            self.fail(key, now)?;
        }
        // An address the account is known at skips the line and the delay.
        let mut known = true;
        for key in keys.iter().filter(|k| k.delays()) {
            known &= self.is_known(key, address, now)?;
        }
        let mut turns = Vec::new();
        if !known {
            let mut stripes: Vec<usize> = keys
                .iter()
                .filter(|k| k.delays())
                .map(|k| stripe(&k.store_key()))
                .collect();
            stripes.sort_unstable();
            stripes.dedup();
            for i in stripes {
                // The line is bounded in time: past it, "busy" (503), never
                // a lock-out.
                match tokio::time::timeout(MAX_TURN_WAIT, self.turns[i].lock()).await {
                    Ok(turn) => turns.push(turn),
                    Err(_) => return Err(CsError::Busy),
                }
            }
        }
        let mut delay = 0;
        for key in keys.iter().filter(|k| k.delays()) {
            delay = delay.max(self.delay_of(key, address, now)?);
        }
        if delay > 0 {
            tokio::time::sleep(Duration::from_secs(delay.unsigned_abs())).await;
        }
        let outcome = hashing(budget, check).await??;
        match outcome {
            Some(_) => self.succeeded(keys, address, now)?,
            None => {
                for key in keys.iter().filter(|k| k.delays()) {
                    self.fail(key, now)?;
                }
            }
        }
        drop(turns);
        Ok(outcome)
    }

    /// A check succeeded: the failures counted in advance are taken back
    /// (the whole count, for a key that is the account's own), and the
    /// address is remembered for the account.
    fn succeeded(&self, keys: &[LimitKey], address: &str, now: i64) -> Result<(), StoreError> {
        for key in keys {
            let k = key.store_key();
            match key {
                // A shared key (an address, a gateway) gets back only the
                // failure counted in advance.
                LimitKey::Address(_)
                | LimitKey::GatewayAt { .. }
                | LimitKey::CallbackAt(_)
                | LimitKey::RegistrationFrom(_)
                | LimitKey::RegistrationOf(_) => {
                    self.take_back(key, now)?;
                }
                LimitKey::AccountAt { .. } | LimitKey::Account(_) | LimitKey::Pin(_) => {
                    self.store.update(&k, &mut |_| None)?;
                }
            }
            if let Some(known) = key.known_at(address) {
                self.store.update(&known, &mut |_| {
                    Some(LimitState {
                        failures: 0,
                        locked_until: 0,
                        last_failure: now,
                    })
                })?;
            }
        }
        Ok(())
    }

    /// Takes back one failure of `key` counted in advance (the attempt did
    /// not fail, or failed through no doing of the one who made it), and
    /// the lock it may have set.
    pub fn take_back(&self, key: &LimitKey, now: i64) -> Result<(), StoreError> {
        self.store.update(&key.store_key(), &mut |old| {
            old.map(|mut s| {
                s.failures = s.failures.saturating_sub(1);
                s.locked_until = s.locked_until.min(now);
                s
            })
        })?;
        Ok(())
    }

    /// Removes states idle since `cutoff`; returns how many. Known addresses
    /// are kept for [`KNOWN_ADDRESS_SECS`].
    pub fn collect(&self, cutoff: i64) -> Result<usize, StoreError> {
        self.store.collect(cutoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cheq_store::sled_cs;

    fn limiter() -> (tempfile::TempDir, Limiter) {
        let (dir, store) = sled_cs::temp();
        (dir, Limiter::new(store.limits.clone()))
    }

    fn login_keys(account: &str, address: &str) -> Vec<LimitKey> {
        vec![
            LimitKey::AccountAt {
                account: account.into(),
                address: address.into(),
            },
            LimitKey::Address(address.into()),
            LimitKey::Account(account.into()),
        ]
    }

    #[test]
    fn lockout_doubles_and_is_capped() {
        let p = Policy {
            free_failures: 3,
            base_secs: 2,
            max_secs: 60,
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
            base_secs: 2,
            max_secs: 60,
            window_secs: 100,
        };
        let mut s = Some(p.fail(None, 0));
        s = Some(p.fail(s, 50));
        // 200 s of quiet: the next failure is the first again.
        s = Some(p.fail(s, 250));
        assert_eq!(s.unwrap().failures, 1);
        s = Some(p.fail(s, 260));
        assert_eq!(s.unwrap().locked_until, 260);
        s = Some(p.fail(s, 270));
        assert_eq!(s.unwrap().locked_until, 272);
    }

    #[test]
    fn account_delays_grow_to_their_cap() {
        let p = Policy::ACCOUNT;
        let after = |failures| LimitState {
            failures,
            locked_until: 0,
            last_failure: 100,
        };
        // After 5 failures the next check (the 6th) waits 1 s, as the
        // limits table of docs/security.md says; then 2 s, 4 s, … up to 15 s.
        let delays: Vec<i64> = (0..12).map(|f| p.delay(Some(after(f)), 100)).collect();
        assert_eq!(delays, [0, 0, 0, 0, 0, 1, 2, 4, 8, 15, 15, 15]);
        assert_eq!(p.delay(Some(after(8)), 100), 8);
        assert_eq!(p.delay(Some(after(8)), 100 + 24 * 3600 + 1), 0, "forgotten");
    }

    /// A user's PIN: the sixth check after five wrong PINs already waits.
    #[tokio::test]
    async fn the_sixth_pin_check_waits() {
        let (_dir, l) = limiter();
        let pin = LimitKey::Pin("alice".into());
        for _ in 0..4 {
            l.fail(&pin, 0).unwrap();
        }
        assert_eq!(l.delay_of(&pin, "10.0.0.1", 0).unwrap(), 0, "5th check");
        l.fail(&pin, 0).unwrap();
        assert_eq!(l.delay_of(&pin, "10.0.0.1", 0).unwrap(), 1, "6th check");
    }

    #[tokio::test]
    async fn a_guarded_attempt_counts_before_checking_and_forgets_on_success() {
        let (_dir, l) = limiter();
        let keys = login_keys("alice", "10.0.0.1");
        for _ in 0..5 {
            let r = l
                .guarded(&keys, "10.0.0.1", Budget::People, 0, || Ok(None::<()>))
                .await
                .unwrap();
            assert!(r.is_none());
        }
        assert_eq!(l.locked(&keys, 0).unwrap(), None);
        l.guarded(&keys, "10.0.0.1", Budget::People, 0, || Ok(None::<()>))
            .await
            .unwrap();
        assert_eq!(l.locked(&keys, 0).unwrap(), Some(2));
        // Locked: the check does not even run.
        let refused = l
            .guarded(
                &keys,
                "10.0.0.1",
                Budget::People,
                1,
                || -> Result<Option<()>, AuthError> { panic!("must not run while locked") },
            )
            .await;
        assert!(matches!(
            refused,
            Err(CsError::TooManyAttempts { retry_after: 1 })
        ));
    }

    /// A stranger's wrong guesses never refuse the owner from elsewhere:
    /// their address is locked, the account is only slowed.
    #[tokio::test]
    async fn a_strangers_guesses_lock_only_the_strangers_address() {
        let (_dir, l) = limiter();
        let bad = login_keys("alice", "6.6.6.6");
        for _ in 0..6 {
            let _ = l
                .guarded(&bad, "6.6.6.6", Budget::People, 0, || Ok(None::<()>))
                .await;
        }
        assert!(
            l.locked(&bad, 0).unwrap().is_some(),
            "the guesser is locked"
        );
        let good = login_keys("alice", "10.0.0.2");
        assert_eq!(l.locked(&good, 0).unwrap(), None, "the owner is not");
        assert_eq!(
            l.delay_of(&LimitKey::Account("alice".into()), "10.0.0.2", 0)
                .unwrap(),
            2,
            "the account is slowed (6 failures: the 7th check waits 2 s)"
        );
        let ok = l
            .guarded(&good, "10.0.0.2", Budget::People, 0, || Ok(Some(())))
            .await
            .unwrap();
        assert!(ok.is_some());
        // The success forgot the account's failures and remembers the address.
        assert_eq!(l.store.get("acct:alice").unwrap(), None);
        for _ in 0..8 {
            l.fail(&LimitKey::Account("alice".into()), 10).unwrap();
        }
        assert_eq!(
            l.delay_of(&LimitKey::Account("alice".into()), "10.0.0.2", 10)
                .unwrap(),
            0,
            "a known address skips the delay"
        );
        assert!(
            l.delay_of(&LimitKey::Account("alice".into()), "10.0.0.3", 10)
                .unwrap()
                > 0
        );
    }

    #[tokio::test]
    async fn a_shared_key_gets_back_only_the_failure_counted_in_advance() {
        let (_dir, l) = limiter();
        let gw = [LimitKey::GatewayAt {
            gateway: "g".into(),
            address: "10.0.0.9".into(),
        }];
        for _ in 0..3 {
            l.guarded(&gw, "10.0.0.9", Budget::Gateways, 0, || Ok(None::<()>))
                .await
                .unwrap();
        }
        l.guarded(&gw, "10.0.0.9", Budget::Gateways, 0, || Ok(Some(())))
            .await
            .unwrap();
        assert_eq!(
            l.store
                .get("gw@ip:g\u{0}10.0.0.9")
                .unwrap()
                .unwrap()
                .failures,
            3
        );
    }

    /// The callback key is its own (an address locked there is not locked
    /// at the password form), and a failure counted in advance is taken
    /// back with the lock it set.
    #[test]
    fn callback_failures_lock_their_own_key_and_are_taken_back() {
        let dir = tempfile::tempdir().unwrap();
        let (_db, store) = sled_cs::open_dir(dir.path()).unwrap();
        let l = Limiter::new(store.limits.clone());
        let callback = LimitKey::CallbackAt("10.1.1.1".into());
        let address = LimitKey::Address("10.1.1.1".into());
        for _ in 0..21 {
            l.fail(&callback, 100).unwrap();
        }
        assert!(l
            .locked(std::slice::from_ref(&callback), 100)
            .unwrap()
            .is_some());
        assert_eq!(l.locked(std::slice::from_ref(&address), 100).unwrap(), None);
        l.take_back(&callback, 100).unwrap();
        assert_eq!(
            l.locked(std::slice::from_ref(&callback), 100).unwrap(),
            None
        );
        let state = l.store.get(&callback.store_key()).unwrap().unwrap();
        assert_eq!(state.failures, 20);
        // Nothing to take back: nothing is written.
        l.take_back(&address, 100).unwrap();
        assert_eq!(l.store.get(&address.store_key()).unwrap(), None);
    }

    /// A rate lets exactly its allowance through, even to attempts that
    /// race, then refuses without counting until the lock ends.
    #[test]
    fn a_rate_lets_its_allowance_through_and_no_more() {
        let (_dir, l) = limiter();
        let keys = [
            LimitKey::RegistrationFrom("10.0.0.1".into()),
            LimitKey::RegistrationOf("https://rs.example".into()),
        ];
        let passed = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..5 {
                        if l.count_attempt(&keys, 100).unwrap().is_none() {
                            passed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        let allowance = REGISTRATION_ORIGIN.free_failures as usize;
        assert_eq!(passed.into_inner(), allowance);
        let refused = l.count_attempt(&keys, 100).unwrap();
        assert!(
            refused.is_some_and(|w| w >= REGISTRATION_ORIGIN.base_secs),
            "{refused:?}"
        );
        // Another origin from the same address still has its own count.
        let other = [
            LimitKey::RegistrationFrom("10.0.0.2".into()),
            LimitKey::RegistrationOf("https://other.example".into()),
        ];
        assert_eq!(l.count_attempt(&other, 100).unwrap(), None);
    }

    #[test]
    fn limiter_state_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (_db, store) = sled_cs::open_dir(dir.path()).unwrap();
            let l = Limiter::new(store.limits.clone());
            for _ in 0..6 {
                l.fail(&LimitKey::Address("10.1.1.1".into()), 100).unwrap();
            }
        }
        let mut opened = sled_cs::open_dir(dir.path());
        for _ in 0..50 {
            if opened.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
            opened = sled_cs::open_dir(dir.path());
        }
        let (_db, store) = opened.unwrap();
        let l = Limiter::new(store.limits.clone());
        let key = LimitKey::Address("10.1.1.1".into());
        assert_eq!(l.store.get(&key.store_key()).unwrap().unwrap().failures, 6);
        assert_eq!(l.collect(10_000).unwrap(), 1);
    }
}
