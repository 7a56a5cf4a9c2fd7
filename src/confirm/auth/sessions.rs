//! Server-side sessions (the store keeps them by the SHA-256 of the cookie
//! value, so a copy of it gives no live cookie) and CSRF tokens, an HMAC of
//! the session id under the session secret (PROTOCOL.md §2).

use super::AuthError;
use crate::store::cs::{Identity, Session, Sessions};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::sync::Arc;

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
        !expected.is_empty() && crate::sign::same_secret(expected.as_bytes(), token.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sled_cs;

    fn store() -> (tempfile::TempDir, crate::store::cs::CsStore) {
        sled_cs::temp()
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
}
