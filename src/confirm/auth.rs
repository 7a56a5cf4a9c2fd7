//! Who the user is (the CS's embedded login; PROTOCOL.md §2, §5 `sub`,
//! `auth_time`, `amr`), on the store traits of [`crate::store::cs`]:
//!
//! - local accounts with argon2id hashes, checked by [`LocalLogin`] behind the
//!   [`Authenticator`] trait, so that an OpenID Connect login can sit beside it;
//! - [`SessionService`]: server-side sessions (the store keeps them by the
//!   SHA-256 of the cookie value) and CSRF tokens, an HMAC of the session id
//!   under the session secret;
//! - [`Limiter`]: failed attempts per user, address and gateway, with a
//!   lock-out that doubles, kept in the store; [`Limiter::guarded`] is the one
//!   place where a failure is counted before hashing.
//!
//! No HTTP here.

use super::flow::CsError;
pub use crate::store::cs::{Account, Identity, LimitState, Session};
use crate::store::cs::{AccountPutError, Accounts, Limits, Sessions};
use crate::store::StoreError;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Why an account or session operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("user name {0:?} is not allowed: use 1 to 64 letters, digits, '.', '_', '-' or '@'")]
    BadUserName(String),
    #[error("e-mail address {0:?} is not valid")]
    BadEmail(String),
    #[error("the password must be at least 8 characters")]
    WeakPassword,
    #[error("the PIN must be 4 to 12 digits")]
    BadPin,
    #[error("user {0:?} already exists")]
    Exists(String),
    #[error("no user {0:?}")]
    NoSuchUser(String),
    #[error("{0:?} already names another account (as its user name or e-mail)")]
    Ambiguous(String),
    #[error("accounts database: {0}")]
    Store(#[from] StoreError),
    #[error("password hashing: {0}")]
    Hash(String),
}

impl From<AccountPutError> for AuthError {
    fn from(e: AccountPutError) -> Self {
        match e {
            AccountPutError::Exists(u) => AuthError::Exists(u),
            AccountPutError::Ambiguous(u) => AuthError::Ambiguous(u),
            AccountPutError::Store(e) => AuthError::Store(e),
        }
    }
}

/// A way to log a user in. The embedded one is [`LocalLogin`].
pub trait Authenticator: Send + Sync {
    /// Checks a user name and password; `None` when they do not match.
    fn check_password(&self, username: &str, password: &str) -> Result<Option<Account>, AuthError>;
}

/// Checks a user name: 1 to 64 of `[A-Za-z0-9._@-]`.
pub fn check_username(name: &str) -> Result<(), AuthError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
    if ok {
        Ok(())
    } else {
        Err(AuthError::BadUserName(name.to_owned()))
    }
}

/// Hashes a secret with argon2id and a random salt.
pub fn hash_secret(secret: &str) -> Result<String, AuthError> {
    let salt = SaltString::generate(&mut rand::rngs::OsRng);
    Argon2::default()
        .hash_password(secret.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AuthError::Hash(e.to_string()))
}

/// Checks a secret against an argon2 hash.
pub fn verify_secret(secret: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|h| {
            Argon2::default()
                .verify_password(secret.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

/// A hash to compare against when the user does not exist, so that a login
/// for an unknown name takes as long as one for a known name.
pub(crate) fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| hash_secret("not a password of anyone").unwrap_or_default())
}

/// Password, PIN and secret checks (argon2, about 19 MiB and tens of
/// milliseconds each) run at most this many at once.
pub const HASHING_PERMITS: usize = 2;

/// Runs an argon2 check on the blocking pool, at most [`HASHING_PERMITS`] at
/// a time, so that a burst of logins cannot exhaust memory or the pool.
pub async fn hashing<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, CsError> {
    static PERMITS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(HASHING_PERMITS);
    let _permit = PERMITS
        .acquire()
        .await
        .map_err(|_| CsError::Internal("hashing closed".into()))?;
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| CsError::Internal("the hashing task failed".into()))
}

/// Builds a new account record (the hashing is done by the caller's process).
pub fn new_account(
    username: &str,
    email: Option<&str>,
    password: &str,
) -> Result<Account, AuthError> {
    check_username(username)?;
    if let Some(e) = email {
        let valid = e.len() <= 254
            && e.split_once('@')
                .is_some_and(|(l, d)| !l.is_empty() && d.contains('.') && !d.contains('@'))
            && !e.chars().any(char::is_whitespace);
        if !valid {
            return Err(AuthError::BadEmail(e.to_owned()));
        }
    }
    if password.chars().count() < 8 {
        return Err(AuthError::WeakPassword);
    }
    Ok(Account {
        username: username.to_owned(),
        email: email.map(str::to_owned),
        password_hash: hash_secret(password)?,
        pin_hash: None,
    })
}

/// Stores a new account after checking its names (see [`Accounts::put`]).
pub fn add_account(
    accounts: &dyn Accounts,
    account: &Account,
    replace: bool,
) -> Result<(), AuthError> {
    check_username(&account.username)?;
    accounts.put(account, replace)?;
    Ok(())
}

/// The embedded login: local accounts and their argon2 hashes.
#[derive(Clone)]
pub struct LocalLogin {
    pub accounts: Arc<dyn Accounts>,
}

impl std::fmt::Debug for LocalLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLogin").finish_non_exhaustive()
    }
}

impl LocalLogin {
    /// Checks a user's voice PIN (§10). An unknown user, or one without a PIN,
    /// costs the same argon2 check, so timing does not tell which names exist.
    pub fn check_pin(&self, username: &str, pin: &str) -> Result<Option<Account>, AuthError> {
        let account = if check_username(username).is_ok() {
            self.accounts.get(username)?
        } else {
            None
        };
        let hash = account
            .as_ref()
            .and_then(|a| a.pin_hash.as_deref())
            .unwrap_or_else(|| dummy_hash());
        let ok = verify_secret(pin, hash) && account.as_ref().is_some_and(|a| a.pin_hash.is_some());
        Ok(account.filter(|_| ok))
    }
}

impl Authenticator for LocalLogin {
    fn check_password(&self, username: &str, password: &str) -> Result<Option<Account>, AuthError> {
        if check_username(username).is_err() {
            verify_secret(password, dummy_hash());
            return Ok(None);
        }
        match self.accounts.get(username)? {
            Some(a) if verify_secret(password, &a.password_hash) => Ok(Some(a)),
            Some(_) => Ok(None),
            None => {
                verify_secret(password, dummy_hash());
                Ok(None)
            }
        }
    }
}

/// The identity of an account that just authenticated with `amr` at `now`.
pub fn identity_of(account: &Account, amr: &str, now: i64) -> Identity {
    Identity {
        sub: account.username.clone(),
        also_known_as: account.email.clone().into_iter().collect(),
        auth_time: now,
        amr: vec![amr.to_owned()],
    }
}

/// Server-side sessions and their CSRF tokens.
pub struct SessionService {
    store: Arc<dyn Sessions>,
    secret: Vec<u8>,
    ttl_secs: i64,
}

impl std::fmt::Debug for SessionService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionService")
            .field("ttl_secs", &self.ttl_secs)
            .finish_non_exhaustive()
    }
}

fn session_key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl SessionService {
    pub fn new(store: Arc<dyn Sessions>, secret: Vec<u8>, ttl_secs: i64) -> Self {
        SessionService {
            store,
            secret,
            ttl_secs,
        }
    }

    /// A new session; returns its id (the cookie value).
    pub fn create(&self, identity: Option<Identity>, now: i64) -> Result<String, AuthError> {
        let id = crate::sign::b64::encode(rand::random::<[u8; 32]>());
        let session = Session {
            identity,
            expires: now + self.ttl_secs,
        };
        self.store.put(&session_key(&id), &session)?;
        Ok(id)
    }

    /// The live session with this id.
    pub fn get(&self, id: &str, now: i64) -> Result<Option<Session>, AuthError> {
        match self.store.get(&session_key(id))? {
            Some(s) if s.expires > now => Ok(Some(s)),
            Some(_) => {
                self.store.remove(&session_key(id))?;
                Ok(None)
            }
            None => Ok(None),
        }
    }

    /// Ends a session.
    pub fn remove(&self, id: &str) -> Result<(), AuthError> {
        self.store.remove(&session_key(id))?;
        Ok(())
    }

    /// Removes expired sessions; returns how many.
    pub fn collect_expired(&self, now: i64) -> Result<usize, AuthError> {
        Ok(self.store.collect_expired(now)?)
    }

    /// The CSRF token bound to a session id.
    pub fn csrf_token(&self, session_id: &str) -> String {
        match Hmac::<Sha256>::new_from_slice(&self.secret) {
            Ok(mut mac) => {
                mac.update(b"cheq csrf\0");
                mac.update(session_id.as_bytes());
                crate::sign::b64::encode(mac.finalize().into_bytes())
            }
            Err(_) => String::new(),
        }
    }

    /// Does `token` belong to this session? (constant time)
    pub fn check_csrf(&self, session_id: &str, token: &str) -> bool {
        let expected = self.csrf_token(session_id);
        !expected.is_empty() && crate::httpkit::same_secret(expected.as_bytes(), token.as_bytes())
    }
}

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
        let dir = tempfile::tempdir().unwrap();
        let (_db, store) = sled_cs::open_dir(dir.path()).unwrap();
        (dir, store)
    }

    #[test]
    fn passwords_verify_and_names_are_checked() {
        let (_dir, store) = store();
        let accounts = store.accounts.clone();
        let login = LocalLogin {
            accounts: accounts.clone(),
        };
        let a = new_account("alice", Some("alice@example.com"), "correct horse").unwrap();
        assert!(!a.password_hash.contains("correct horse"));
        add_account(&*accounts, &a, false).unwrap();
        assert!(matches!(
            add_account(&*accounts, &a, false),
            Err(AuthError::Exists(_))
        ));
        assert!(login
            .check_password("alice", "correct horse")
            .unwrap()
            .is_some());
        assert!(login
            .check_password("alice", "wrong horse")
            .unwrap()
            .is_none());
        assert!(login
            .check_password("bob", "correct horse")
            .unwrap()
            .is_none());
        assert!(login
            .check_password("../x", "correct horse")
            .unwrap()
            .is_none());
        assert!(new_account("a b", None, "long enough").is_err());
        assert!(new_account("bob", Some("nope"), "long enough").is_err());
        assert!(new_account("bob", None, "short").is_err());
        assert!(!format!("{a:?}").contains("argon2"));
        // A subject must name one account only.
        let bob = new_account("alice@example.com", None, "long enough").unwrap();
        assert!(matches!(
            add_account(&*accounts, &bob, false),
            Err(AuthError::Ambiguous(_))
        ));
        let carol = new_account("carol", Some("ALICE@example.com"), "long enough").unwrap();
        assert!(matches!(
            add_account(&*accounts, &carol, false),
            Err(AuthError::Ambiguous(_))
        ));
        let dave = new_account("dave", Some("dave@example.com"), "long enough").unwrap();
        add_account(&*accounts, &dave, false).unwrap();
        // PINs: none set yet, then set.
        assert!(login.check_pin("dave", "123456").unwrap().is_none());
        let mut dave = accounts.get("dave").unwrap().unwrap();
        dave.pin_hash = Some(hash_secret("123456").unwrap());
        add_account(&*accounts, &dave, true).unwrap();
        assert!(login.check_pin("dave", "123456").unwrap().is_some());
        assert!(login.check_pin("dave", "654321").unwrap().is_none());
        assert!(login.check_pin("nobody", "123456").unwrap().is_none());
    }

    #[test]
    fn sessions_expire_and_csrf_is_bound_to_the_session() {
        let (_dir, store) = store();
        let s = SessionService::new(store.sessions.clone(), vec![9; 32], 100);
        let id = s.create(None, 1000).unwrap();
        assert!(s.get(&id, 1050).unwrap().is_some());
        assert!(s.get(&id, 1100).unwrap().is_none());
        let other = s.create(None, 1000).unwrap();
        let token = s.csrf_token(&id);
        assert!(s.check_csrf(&id, &token));
        assert!(!s.check_csrf(&other, &token));
        assert!(!s.check_csrf(&id, ""));
        assert_eq!(s.collect_expired(5000).unwrap(), 1);
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
