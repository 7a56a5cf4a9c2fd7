//! Who the user is (the CS's embedded login; PROTOCOL.md §2, §5 `sub`,
//! `auth_time`, `amr`).
//!
//! - [`Accounts`]: local accounts in sled, argon2id password hashes. Behind the
//!   [`Authenticator`] trait, so that an OpenID Connect login can sit beside it.
//! - [`Sessions`]: server-side sessions in sled, keyed by the SHA-256 of the
//!   cookie value (a stolen database does not give live cookies). A session
//!   exists before login (it carries the login form's CSRF token) and gets a
//!   new id at login. CSRF tokens are an HMAC of the session id under the
//!   session secret.
//! - [`RateLimiter`]: failed logins, per user name and per client address,
//!   with a lock-out that doubles.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;

const USERS: &str = "cs.users";
const SESSIONS: &str = "cs.sessions";

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
    Db(String),
    #[error("password hashing: {0}")]
    Hash(String),
}

impl From<sled::Error> for AuthError {
    fn from(e: sled::Error) -> Self {
        AuthError::Db(e.to_string())
    }
}

/// A local account.
#[derive(Clone, Serialize, Deserialize)]
pub struct Account {
    pub username: String,
    #[serde(default)]
    pub email: Option<String>,
    pub password_hash: String,
    #[serde(default)]
    pub pin_hash: Option<String>,
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("username", &self.username)
            .field("email", &self.email)
            .finish_non_exhaustive()
    }
}

/// Someone the CS has authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// `sub` in the countersignature: the local user name.
    pub sub: String,
    /// Other names a CHEQ `subject` may use for this user (a verified e-mail).
    pub also_known_as: Vec<String>,
    /// When they authenticated (unix seconds).
    pub auth_time: i64,
    /// How (RFC 8176).
    pub amr: Vec<String>,
}

impl Identity {
    /// Is `subject` (a CHEQ's) this user?
    pub fn is(&self, subject: &str) -> bool {
        self.sub == subject
            || self
                .also_known_as
                .iter()
                .any(|a| a.eq_ignore_ascii_case(subject))
    }
}

/// A way to log a user in. The embedded one is [`Accounts`].
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
) -> Result<T, crate::confirm::CsError> {
    static PERMITS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(HASHING_PERMITS);
    let _permit = PERMITS
        .acquire()
        .await
        .map_err(|_| crate::confirm::CsError::Internal("hashing closed".into()))?;
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| crate::confirm::CsError::Internal("the hashing task failed".into()))
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

/// Local accounts in sled.
#[derive(Debug, Clone)]
pub struct Accounts {
    users: sled::Tree,
}

impl Accounts {
    pub fn open(db: &sled::Db) -> Result<Self, AuthError> {
        Ok(Accounts {
            users: db.open_tree(USERS)?,
        })
    }

    /// Adds an account; with `replace`, an existing one is overwritten. A
    /// CHEQ's `subject` must name one account only, so no user name may be
    /// another account's e-mail and no e-mail may be taken twice.
    pub fn put(&self, account: &Account, replace: bool) -> Result<(), AuthError> {
        check_username(&account.username)?;
        for item in self.users.iter() {
            let (_, bytes) = item?;
            let Ok(other) = serde_json::from_slice::<Account>(&bytes) else {
                continue;
            };
            if other.username == account.username {
                continue;
            }
            let other_email = other.email.as_deref().unwrap_or("");
            if other_email.eq_ignore_ascii_case(&account.username) {
                return Err(AuthError::Ambiguous(account.username.clone()));
            }
            if let Some(email) = &account.email {
                if other.username.eq_ignore_ascii_case(email)
                    || other_email.eq_ignore_ascii_case(email)
                {
                    return Err(AuthError::Ambiguous(email.clone()));
                }
            }
        }
        let bytes = serde_json::to_vec(account).map_err(|e| AuthError::Db(e.to_string()))?;
        let key = account.username.as_bytes();
        if replace {
            self.users.insert(key, bytes)?;
        } else {
            let swapped = self
                .users
                .compare_and_swap(key, None as Option<&[u8]>, Some(bytes))?;
            if swapped.is_err() {
                return Err(AuthError::Exists(account.username.clone()));
            }
        }
        self.users.flush()?;
        Ok(())
    }

    pub fn get(&self, username: &str) -> Result<Option<Account>, AuthError> {
        match self.users.get(username.as_bytes())? {
            Some(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|_| AuthError::Db(format!("account {username:?} is corrupt"))),
            None => Ok(None),
        }
    }
}

impl Authenticator for Accounts {
    fn check_password(&self, username: &str, password: &str) -> Result<Option<Account>, AuthError> {
        if check_username(username).is_err() {
            verify_secret(password, dummy_hash());
            return Ok(None);
        }
        match self.get(username)? {
            Some(a) if verify_secret(password, &a.password_hash) => Ok(Some(a)),
            Some(_) => Ok(None),
            None => {
                verify_secret(password, dummy_hash());
                Ok(None)
            }
        }
    }
}

/// What a session holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Session {
    pub identity: Option<Identity>,
    pub expires: i64,
}

/// Server-side sessions in sled.
pub struct Sessions {
    tree: sled::Tree,
    secret: Vec<u8>,
    ttl_secs: i64,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("ttl_secs", &self.ttl_secs)
            .finish_non_exhaustive()
    }
}

fn session_key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Sessions {
    pub fn open(db: &sled::Db, secret: Vec<u8>, ttl_secs: i64) -> Result<Self, AuthError> {
        Ok(Sessions {
            tree: db.open_tree(SESSIONS)?,
            secret,
            ttl_secs,
        })
    }

    /// A new session; returns its id (the cookie value).
    pub fn create(&self, identity: Option<Identity>, now: i64) -> Result<String, AuthError> {
        let id = crate::sign::b64::encode(rand::random::<[u8; 32]>());
        let session = Session {
            identity,
            expires: now + self.ttl_secs,
        };
        let bytes = serde_json::to_vec(&session).map_err(|e| AuthError::Db(e.to_string()))?;
        self.tree.insert(session_key(&id), bytes)?;
        Ok(id)
    }

    /// The live session with this id.
    pub fn get(&self, id: &str, now: i64) -> Result<Option<Session>, AuthError> {
        let Some(bytes) = self.tree.get(session_key(id))? else {
            return Ok(None);
        };
        match serde_json::from_slice::<Session>(&bytes) {
            Ok(s) if s.expires > now => Ok(Some(s)),
            _ => {
                self.tree.remove(session_key(id))?;
                Ok(None)
            }
        }
    }

    /// Ends a session.
    pub fn remove(&self, id: &str) -> Result<(), AuthError> {
        self.tree.remove(session_key(id))?;
        Ok(())
    }

    /// Removes expired sessions; returns how many.
    pub fn collect_expired(&self, now: i64) -> Result<usize, AuthError> {
        let mut n = 0;
        for entry in self.tree.iter() {
            let (k, v) = entry?;
            let dead = serde_json::from_slice::<Session>(&v).map_or(true, |s| s.expires <= now);
            if dead {
                self.tree.remove(k)?;
                n += 1;
            }
        }
        Ok(n)
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
        use subtle::ConstantTimeEq;
        let expected = self.csrf_token(session_id);
        !expected.is_empty() && bool::from(expected.as_bytes().ct_eq(token.as_bytes()))
    }
}

/// Failed-attempt limiting with a doubling lock-out, per key (a user name, a
/// client address, a gateway). Failures are forgotten after a quiet
/// `window_secs`, so an honest key that fails now and then never ends up
/// locked for good. In memory: a restart forgives, which is fine for a
/// limiter whose job is to slow guessing down.
#[derive(Debug, Default)]
pub struct RateLimiter {
    /// key → (failures, locked until, last failure)
    state: Mutex<HashMap<String, (u32, i64, i64)>>,
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

impl RateLimiter {
    pub fn new(free_failures: u32, base_lock_secs: i64, max_lock_secs: i64) -> Self {
        RateLimiter {
            state: Mutex::new(HashMap::new()),
            free_failures,
            base_lock_secs,
            max_lock_secs,
            window_secs: 6 * 3600,
        }
    }

    /// The same limiter, forgetting failures after `secs` of quiet.
    pub fn with_window(mut self, secs: i64) -> Self {
        self.window_secs = secs;
        self
    }

    /// Seconds until `key` may try again, if it is locked out.
    pub fn locked(&self, key: &str, now: i64) -> Option<i64> {
        let guard = self.state.lock().ok()?;
        guard
            .get(key)
            .map(|(_, until, _)| *until - now)
            .filter(|left| *left > 0)
    }

    /// Records a failure for `key`.
    pub fn fail(&self, key: &str, now: i64) {
        if let Ok(mut guard) = self.state.lock() {
            let window = self.window_secs;
            if guard.len() > 100_000 {
                guard.retain(|_, (_, until, last)| *until > now || now - *last <= window);
            }
            let entry = guard.entry(key.to_owned()).or_insert((0, 0, now));
            if entry.1 <= now && now - entry.2 > window {
                // A quiet window since the last failure: start afresh.
                entry.0 = 0;
            }
            entry.2 = now;
            entry.0 += 1;
            if entry.0 > self.free_failures {
                let over = (entry.0 - self.free_failures - 1).min(20);
                let lock = (self.base_lock_secs << over).min(self.max_lock_secs);
                entry.1 = now + lock;
            }
        }
    }

    /// Takes back one failure counted in advance for `key` (the attempt it
    /// reserved succeeded, but `key` speaks for others too): the count goes
    /// down and the lock-out that failure may have started is lifted (the
    /// attempt was only made because `key` was not locked).
    pub fn forgive_one(&self, key: &str, now: i64) {
        if let Ok(mut guard) = self.state.lock() {
            if let Some(entry) = guard.get_mut(key) {
                entry.0 = entry.0.saturating_sub(1);
                entry.1 = entry.1.min(now);
            }
        }
    }

    /// Forgets `key`'s failures (after a success).
    pub fn succeed(&self, key: &str) {
        if let Ok(mut guard) = self.state.lock() {
            guard.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_verify_and_names_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let accounts = Accounts::open(&db).unwrap();
        let a = new_account("alice", Some("alice@example.com"), "correct horse").unwrap();
        assert!(!a.password_hash.contains("correct horse"));
        accounts.put(&a, false).unwrap();
        assert!(matches!(accounts.put(&a, false), Err(AuthError::Exists(_))));
        assert!(accounts
            .check_password("alice", "correct horse")
            .unwrap()
            .is_some());
        assert!(accounts
            .check_password("alice", "wrong horse")
            .unwrap()
            .is_none());
        assert!(accounts
            .check_password("bob", "correct horse")
            .unwrap()
            .is_none());
        assert!(accounts
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
            accounts.put(&bob, false),
            Err(AuthError::Ambiguous(_))
        ));
        let carol = new_account("carol", Some("ALICE@example.com"), "long enough").unwrap();
        assert!(matches!(
            accounts.put(&carol, false),
            Err(AuthError::Ambiguous(_))
        ));
        let dave = new_account("dave", Some("dave@example.com"), "long enough").unwrap();
        accounts.put(&dave, false).unwrap();
    }

    #[test]
    fn sessions_expire_and_csrf_is_bound_to_the_session() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let s = Sessions::open(&db, vec![9; 32], 100).unwrap();
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

    #[test]
    fn lockout_doubles_and_success_forgets() {
        let r = RateLimiter::new(3, 2, 60);
        for _ in 0..3 {
            r.fail("u", 0);
        }
        assert_eq!(r.locked("u", 0), None);
        r.fail("u", 0);
        assert_eq!(r.locked("u", 0), Some(2));
        r.fail("u", 0);
        assert_eq!(r.locked("u", 0), Some(4));
        for _ in 0..10 {
            r.fail("u", 0);
        }
        assert_eq!(r.locked("u", 0), Some(60));
        assert_eq!(r.locked("u", 61), None);
        r.succeed("u");
        r.fail("u", 100);
        assert_eq!(r.locked("u", 100), None);
    }

    #[test]
    fn failures_are_forgotten_after_a_quiet_window() {
        let mut r = RateLimiter::new(2, 2, 60);
        r.window_secs = 100;
        r.fail("g", 0);
        r.fail("g", 50);
        // 200 s of quiet: the next failure is the first again.
        r.fail("g", 250);
        assert_eq!(r.locked("g", 250), None);
        r.fail("g", 260);
        assert_eq!(r.locked("g", 260), None);
        r.fail("g", 270);
        assert_eq!(r.locked("g", 270), Some(2));
    }

    #[test]
    fn a_reserved_failure_that_succeeds_is_taken_back() {
        let r = RateLimiter::new(1, 2, 60);
        r.fail("g", 0);
        // Reserved before an attempt that then succeeds.
        r.fail("g", 10);
        assert_eq!(r.locked("g", 10), Some(2));
        r.forgive_one("g", 10);
        assert_eq!(r.locked("g", 10), None);
        // The count went back to one failure: the next one locks again.
        r.fail("g", 11);
        assert_eq!(r.locked("g", 11), Some(2));
    }
}
