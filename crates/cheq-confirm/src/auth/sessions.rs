//! Server-side sessions (the store keeps them by the SHA-256 of the cookie
//! value, so a copy of it gives no live cookie) and CSRF tokens, an HMAC of
//! the session id under the session secret (PROTOCOL.md §2).

use super::AuthError;
use cheq_store::cs::{Identity, Session, Sessions};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Server-side sessions and their CSRF tokens.
pub struct SessionService {
    store: Arc<dyn Sessions>,
    /// The CSRF MAC, keyed with the session secret and fed the tokens'
    /// domain once (keying it again for every token would cost two of
    /// its four SHA-256 blocks); `None` if the key was refused.
    csrf: Option<Hmac<Sha256>>,
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
        let csrf = Hmac::<Sha256>::new_from_slice(&secret).ok().map(|mut mac| {
            mac.update(b"cheq csrf\0");
            mac
        });
        SessionService {
            store,
            csrf,
            ttl_secs,
        }
    }

    /// A new session; returns its id (the cookie value).
    pub fn create(&self, identity: Option<Identity>, now: i64) -> Result<String, AuthError> {
        let id = cheq_core::sign::b64::encode(rand::random::<[u8; 32]>());
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
        match &self.csrf {
            Some(mac) => {
                let mut mac = mac.clone();
                mac.update(session_id.as_bytes());
                cheq_core::sign::b64::encode(mac.finalize().into_bytes())
            }
            None => String::new(),
        }
    }

    /// Does `token` belong to this session? (constant time)
    pub fn check_csrf(&self, session_id: &str, token: &str) -> bool {
        let expected = self.csrf_token(session_id);
        !expected.is_empty() && cheq_core::sign::same_secret(expected.as_bytes(), token.as_bytes())
    }

    /// The tag that a user's own `POST` of `resource_uri` (§2) gives the
    /// sign-in that follows it, bound to the browser's pre-login cookie
    /// value: with it the sign-in goes on to start the confirmation, which a
    /// link (a `GET`) never does. The NUL separators keep it apart from any
    /// session's CSRF token (session ids are base64url).
    pub fn start_tag(&self, pre_login_id: &str, resource_uri: &str) -> String {
        self.csrf_token(&format!("start\0{pre_login_id}\0{resource_uri}"))
    }

    /// Did this browser's own `POST` of `resource_uri` give `tag`? (constant time)
    pub fn check_start_tag(&self, pre_login_id: &str, resource_uri: &str, tag: &str) -> bool {
        let expected = self.start_tag(pre_login_id, resource_uri);
        !expected.is_empty() && cheq_core::sign::same_secret(expected.as_bytes(), tag.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cheq_store::sled_cs;

    fn store() -> (tempfile::TempDir, cheq_store::cs::CsStore) {
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

    /// The token is HMAC-SHA256(secret, "cheq csrf\0" || session id), as it
    /// was before the MAC was keyed once: pages served before an upgrade
    /// keep working, and a token under another secret is refused.
    #[test]
    fn the_csrf_token_is_the_hmac_of_the_session_id() {
        let (_dir, store) = store();
        let s = SessionService::new(store.sessions.clone(), vec![9; 32], 100);
        let mut mac = Hmac::<Sha256>::new_from_slice(&[9; 32]).unwrap();
        mac.update(b"cheq csrf\0session one");
        let expected = cheq_core::sign::b64::encode(mac.finalize().into_bytes());
        assert_eq!(s.csrf_token("session one"), expected);
        // The kept MAC is not advanced by a token: the next is the same.
        assert_eq!(s.csrf_token("session one"), expected);
        assert_ne!(s.csrf_token("session two"), expected);
        let other = SessionService::new(store.sessions.clone(), vec![8; 32], 100);
        assert!(!other.check_csrf("session one", &expected));
    }

    /// A start tag holds for its browser and its URI only, and is never a
    /// CSRF token.
    #[test]
    fn a_start_tag_is_bound_to_the_browser_and_the_uri() {
        let (_dir, store) = store();
        let s = SessionService::new(store.sessions.clone(), vec![9; 32], 100);
        let tag = s.start_tag("browser-a", "http://rs/cheq/1");
        assert!(s.check_start_tag("browser-a", "http://rs/cheq/1", &tag));
        assert!(!s.check_start_tag("browser-b", "http://rs/cheq/1", &tag));
        assert!(!s.check_start_tag("browser-a", "http://rs/cheq/2", &tag));
        assert!(!s.check_start_tag("browser-a", "http://rs/cheq/1", ""));
        assert!(!s.check_csrf("browser-a", &tag));
    }
}
