//! Who the user is (the CS's embedded login; PROTOCOL.md §2, §5 `sub`,
//! `auth_time`, `amr`), on the store traits of [`cheq_store::cs`]:
//!
//! - this module: local accounts with argon2id hashes, checked by
//!   [`LocalLogin`] behind the [`Authenticator`] trait, so that an OpenID
//!   Connect login can sit beside it;
//! - [`sessions`]: server-side sessions and their CSRF tokens;
//! - [`limits`]: failed attempts per user, address and gateway, with a
//!   lock-out that doubles, kept in the store.
//!
//! No HTTP here.

pub mod limits;
pub mod sessions;

pub use limits::{LimitKey, Limiter, Policy};
pub use sessions::SessionService;

use super::flow::CsError;
use argon2::password_hash::{PasswordHash, PasswordHasher, SaltString};
use argon2::Argon2;
pub use cheq_store::cs::{Account, ExternalId, Identity, LimitState, Session};
use cheq_store::cs::{AccountPutError, Accounts};
use cheq_store::StoreError;
use sha2::Digest as _;
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
    #[error("the PIN must be 6 to 12 digits")]
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

/// Argon2 checks made by this process so far (tests assert that what must
/// not hash does not).
static CHECKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many argon2 checks this process has made.
pub fn checks_made() -> u64 {
    CHECKS.load(std::sync::atomic::Ordering::SeqCst)
}

/// Checks a secret against an argon2 hash. The argon2 working memory (about
/// 19 MiB) comes from a small pool that is reused rather than freed, so that
/// a burst of checks leaves no trail of freed blocks that the C allocator
/// keeps resident (measured in BENCHMARKS.md: a flood of bad credentials).
pub fn verify_secret(secret: &str, hash: &str) -> bool {
    CHECKS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    let (Ok(algorithm), Some(expected), Some(salt)) = (
        argon2::Algorithm::try_from(parsed.algorithm),
        parsed.hash,
        parsed.salt,
    ) else {
        return false;
    };
    let version = parsed
        .version
        .map(argon2::Version::try_from)
        .transpose()
        .ok()
        .flatten()
        .unwrap_or_default();
    let Ok(params) = argon2::Params::try_from(&parsed) else {
        return false;
    };
    let mut salt_buf = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_buf) else {
        return false;
    };
    let mut out = vec![0u8; expected.len()];
    let argon = Argon2::new(algorithm, version, params.clone());
    let mut blocks = memory::take(params.block_count());
    let hashed =
        argon.hash_password_into_with_memory(secret.as_bytes(), salt, &mut out, &mut blocks);
    memory::give_back(blocks);
    hashed.is_ok() && cheq_core::sign::same_secret(&out, expected.as_bytes())
}

/// Reused argon2 working memory.
mod memory {
    use argon2::Block;
    use std::sync::Mutex;

    /// Buffers kept for reuse: as many as checks may run at once.
    const KEPT: usize = 2 * super::HASHING_PERMITS;
    static POOL: Mutex<Vec<Vec<Block>>> = Mutex::new(Vec::new());

    /// A buffer of `n` blocks, reused when one is free.
    pub fn take(n: usize) -> Vec<Block> {
        let reused = POOL.lock().ok().and_then(|mut p| {
            p.iter()
                .position(|b| b.len() == n)
                .map(|i| p.swap_remove(i))
        });
        reused.unwrap_or_else(|| vec![Block::default(); n])
    }

    /// Returns a buffer for the next check (or drops it, past [`KEPT`]).
    pub fn give_back(blocks: Vec<Block>) {
        if let Ok(mut p) = POOL.lock() {
            if p.len() < KEPT {
                p.push(blocks);
            }
        }
    }
}

/// A hash to compare against when the user does not exist, so that a login
/// for an unknown name takes as long as one for a known name.
pub(crate) fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| hash_secret("not a password of anyone").unwrap_or_default())
}

/// Who a hash is checked for: people (passwords at the login form, PINs) and
/// gateways (their client secrets) have budgets of their own, so that a flood
/// of bad gateway secrets cannot slow a person's login, nor the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    People,
    Gateways,
}

/// Argon2 checks (about 19 MiB and tens of milliseconds each) running at once,
/// per budget.
pub const HASHING_PERMITS: usize = 2;
/// Checks that may wait for a permit, per budget; one more is refused at once
/// (503 + `Retry-After`), so a flood cannot queue without bound.
pub const HASHING_QUEUE: usize = 32;

struct HashingBudget {
    permits: tokio::sync::Semaphore,
    waiting: std::sync::atomic::AtomicUsize,
}

impl HashingBudget {
    const fn new() -> Self {
        HashingBudget {
            permits: tokio::sync::Semaphore::const_new(HASHING_PERMITS),
            waiting: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

static PEOPLE: HashingBudget = HashingBudget::new();
static GATEWAYS: HashingBudget = HashingBudget::new();

/// Counts a waiter for as long as it lives.
struct Waiting(&'static std::sync::atomic::AtomicUsize);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Runs an argon2 check on the blocking pool, at most [`HASHING_PERMITS`] at
/// a time per budget, with at most [`HASHING_QUEUE`] waiting: a burst cannot
/// exhaust memory or the pool, and is refused with [`CsError::Busy`] beyond.
pub async fn hashing<T: Send + 'static>(
    budget: Budget,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, CsError> {
    use std::sync::atomic::Ordering;
    let b = match budget {
        Budget::People => &PEOPLE,
        Budget::Gateways => &GATEWAYS,
    };
    if b.waiting.fetch_add(1, Ordering::SeqCst) >= HASHING_QUEUE + HASHING_PERMITS {
        b.waiting.fetch_sub(1, Ordering::SeqCst);
        return Err(CsError::Busy);
    }
    let _waiting = Waiting(&b.waiting);
    let _permit = b
        .permits
        .acquire()
        .await
        .map_err(|_| CsError::Internal(crate::flow::Internal::Task("hashing")))?;
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| CsError::Internal(crate::flow::Internal::Task("hashing")))
}

/// The name of the file, in the data directory, of the PIN pepper: a secret
/// every PIN is keyed with before hashing, so that a copy of the database
/// alone does not let anyone try the million 6-digit PINs.
pub const PIN_PEPPER_FILE: &str = "pin.pepper";

/// Checks a PIN: 6 to 12 digits.
pub fn check_pin_format(pin: &str) -> Result<(), AuthError> {
    if (6..=12).contains(&pin.len()) && pin.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(AuthError::BadPin)
    }
}

/// What is hashed for a PIN: its HMAC under the pepper.
fn peppered(pepper: &[u8], pin: &str) -> String {
    use hmac::{Hmac, Mac};
    match Hmac::<sha2::Sha256>::new_from_slice(pepper) {
        Ok(mut mac) => {
            mac.update(b"cheq pin\0");
            mac.update(pin.as_bytes());
            cheq_core::sign::b64::encode(mac.finalize().into_bytes())
        }
        Err(_) => String::new(),
    }
}

/// The stored hash of a PIN: argon2id of the PIN keyed with the pepper.
pub fn pin_hash(pepper: &[u8], pin: &str) -> Result<String, AuthError> {
    check_pin_format(pin)?;
    if pepper.len() < 16 {
        return Err(AuthError::Hash("the PIN pepper is too short".into()));
    }
    hash_secret(&peppered(pepper, pin))
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
        external: None,
        user_handle: None,
        passkeys: Vec::new(),
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
    /// The key of PINs before hashing (see [`PIN_PEPPER_FILE`]).
    pub pin_pepper: Arc<[u8]>,
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
        let ok = verify_secret(&peppered(&self.pin_pepper, pin), hash)
            && account.as_ref().is_some_and(|a| a.pin_hash.is_some());
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
        auth_time: Some(now),
        amr: vec![amr.to_owned()],
        provider: None,
        id_token: None,
        credential: credential_of(account, amr),
    }
}

/// The identity of a sign-in with the passkey `passkey_id` of `account`
/// (`amr` `hwk`, RFC 8176): it holds while the passkey is the account's.
pub fn identity_of_passkey(account: &Account, passkey_id: &str, now: i64) -> Identity {
    Identity {
        credential: Some(passkey_digest(passkey_id)),
        ..identity_of(account, PASSKEY_AMR, now)
    }
}

/// The `amr` of a sign-in with a passkey (RFC 8176: proof of possession of
/// a hardware-secured key).
pub const PASSKEY_AMR: &str = "hwk";

fn passkey_digest(passkey_id: &str) -> String {
    let mut h = sha2::Sha256::new();
    h.update(b"cheq credential\0passkey\0");
    h.update(passkey_id.as_bytes());
    cheq_core::sign::b64::encode(&h.finalize()[..16])
}

/// The digest that binds a local sign-in to the credential it used: the
/// PIN's hash for `amr` `pin`, else the password's. Each hash has its own
/// random salt, so setting a credential again (even to the same secret)
/// changes it.
fn credential_of(account: &Account, amr: &str) -> Option<String> {
    let hash = if amr == "pin" {
        account.pin_hash.as_deref()?
    } else {
        account.password_hash.as_str()
    };
    if hash.is_empty() {
        return None;
    }
    let mut h = sha2::Sha256::new();
    h.update(b"cheq credential\0");
    h.update(hash.as_bytes());
    Some(cheq_core::sign::b64::encode(&h.finalize()[..16]))
}

/// Whether the sign-in `who` still stands (§10: a token is bound to the
/// credential it was issued for, and so is a session): for a local account,
/// while the account exists and its credential is the one signed in with.
/// A sign-in at an identity provider is the provider's to end.
pub fn credential_holds(accounts: &dyn Accounts, who: &Identity) -> Result<bool, StoreError> {
    if who.provider.is_some() {
        return Ok(true);
    }
    let Some(bound) = &who.credential else {
        return Ok(false);
    };
    let amr = who.amr.first().map(String::as_str).unwrap_or("pwd");
    if amr == PASSKEY_AMR {
        return Ok(accounts.get(&who.sub)?.is_some_and(|a| {
            a.passkeys.iter().any(|p| {
                cheq_core::sign::same_secret(passkey_digest(&p.id).as_bytes(), bound.as_bytes())
            })
        }));
    }
    Ok(accounts
        .get(&who.sub)?
        .and_then(|a| credential_of(&a, amr))
        .is_some_and(|now| cheq_core::sign::same_secret(now.as_bytes(), bound.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cheq_store::sled_cs;

    fn store() -> (tempfile::TempDir, cheq_store::cs::CsStore) {
        sled_cs::temp()
    }

    #[test]
    fn passwords_verify_and_names_are_checked() {
        let (_dir, store) = store();
        let accounts = store.accounts.clone();
        let login = LocalLogin {
            accounts: accounts.clone(),
            pin_pepper: Arc::from(&[7u8; 32][..]),
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
        // A PIN hashed without the pepper (a copy of the database) is useless.
        dave.pin_hash = Some(hash_secret("123456").unwrap());
        add_account(&*accounts, &dave, true).unwrap();
        assert!(login.check_pin("dave", "123456").unwrap().is_none());
        dave.pin_hash = Some(pin_hash(&[7u8; 32], "123456").unwrap());
        add_account(&*accounts, &dave, true).unwrap();
        assert!(login.check_pin("dave", "123456").unwrap().is_some());
        assert!(matches!(
            pin_hash(&[7u8; 32], "12345"),
            Err(AuthError::BadPin)
        ));
        assert!(matches!(
            pin_hash(&[7u8; 32], "12345a"),
            Err(AuthError::BadPin)
        ));
        assert!(pin_hash(&[7u8; 32], "1234567890123").is_err());
        assert!(login.check_pin("dave", "654321").unwrap().is_none());
        assert!(login.check_pin("nobody", "123456").unwrap().is_none());
    }
}
