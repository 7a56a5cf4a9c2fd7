//! A resource server registering itself at this CS (PROTOCOL.md §16.3):
//! `{"resource": "<origin>"}` in, a stored record out, every refusal a
//! variant of [`RegistrationError`] (the front end maps each to its status
//! in one place).
//!
//! Fetching the RS's discovery document from its origin is the proof that
//! whoever registers speaks for that origin, so the CS fetches it, and the
//! key set it names, through the one fetcher of outside URLs
//! (`cheq_support::outbound`): `https` (loopback `http` only where the
//! operator allows it), 64 KiB, 5 s to connect and 10 s in all, no
//! redirect, and never to an address the operator did not allow, checked
//! on the address connected to. The document must keep everything on its
//! origin (`ResourceDocument::read`), name a plain path prefix, and list
//! `private_key_jwt` (this CS holds no secret of any registered RS); the
//! key set must hold at least one key. Nothing is stored unless all of it
//! holds.
//!
//! Abuse is bounded before anything is fetched: a rate per address and a
//! rate per origin (every attempt counts, in the store, on every instance;
//! past the rate `TooMany`), and at most [`MAX_IN_FLIGHT`] registrations
//! fetching at once per instance. In `token` mode an initial access token
//! the operator issued (`cheq rs token`, kept as its SHA-256 only) is used
//! up by the registration it allowed, and by no failed one.

use crate::auth::{LimitKey, Limiter};
use crate::config::RegistrationMode;
use cheq_core::discovery::{DiscoveryError, ResourceDocument, RESOURCE_PATH};
use cheq_core::sign::Jwks;
use cheq_store::registrations::{
    RegisterOutcome, RegisteredRecord, RegistrationStatus, Registrations,
};
use cheq_store::StoreError;
use cheq_support::outbound::{Outbound, OutboundError};
use cheq_support::time::Clock;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Registrations fetching at once on one instance; more are refused as
/// too many until one ends.
pub const MAX_IN_FLIGHT: usize = 16;

/// Why a resource server's documents are refused (`invalid_resource`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidResource {
    #[error("\"resource\" must be an origin (scheme://host[:port], no path, query or fragment), not {0:?}")]
    NotAnOrigin(String),
    #[error("its discovery document could not be read: {0}")]
    Document(OutboundError),
    #[error("its discovery document is refused: {0}")]
    Discovery(DiscoveryError),
    #[error("its discovery document does not list \"private_key_jwt\" in token_endpoint_auth_methods_supported: this confirmation service holds no client secret for a resource server that registers itself")]
    NoPrivateKeyJwt,
    #[error("its resource_prefix {prefix:?} {reason}")]
    Prefix {
        prefix: String,
        reason: &'static str,
    },
    #[error("its key set could not be read: {0}")]
    KeySet(OutboundError),
    #[error("its key set is not a usable JWKS: {0}")]
    BadKeySet(String),
    #[error("its key set holds no key")]
    NoKeys,
    #[error("{0} is this confirmation service's own origin or one of its configuration's resource servers")]
    Reserved(String),
}

/// Why a registration was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    #[error("this confirmation service does not accept registrations of resource servers")]
    Off,
    #[error("an initial access token is required (Authorization: Bearer …)")]
    TokenMissing,
    #[error("the initial access token is unknown or was used already")]
    TokenRefused,
    #[error("{origin} is blocked by the operator of this confirmation service")]
    Blocked { origin: String },
    #[error("{0}")]
    Invalid(#[from] InvalidResource),
    #[error("too many registrations; try again in {retry_after} s")]
    TooMany { retry_after: i64 },
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// A registration that was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registered {
    /// A new record.
    Created(RegisteredRecord),
    /// A record of the same origin refreshed.
    Refreshed(RegisteredRecord),
}

impl Registered {
    pub fn record(&self) -> &RegisteredRecord {
        match self {
            Registered::Created(r) | Registered::Refreshed(r) => r,
        }
    }
}

/// One registration as the front end read it.
#[derive(Debug, Clone, Copy)]
pub struct RegistrationRequest<'a> {
    /// The `resource` member: the RS's origin.
    pub resource: &'a str,
    /// The bearer token, if any.
    pub token: Option<&'a str>,
    /// The caller's address as limits count it.
    pub address: &'a str,
}

/// The SHA-256 of an initial access token, in hex: what the store keeps.
pub fn token_digest(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A new initial access token: 256 random bits, base64url.
pub fn new_token(rng: &mut impl rand::RngCore) -> String {
    let mut bytes = [0u8; 32];
    rng.fill_bytes(&mut bytes);
    cheq_core::sign::b64::encode(bytes)
}

/// `resource` as an origin, when it is one (a trailing `/` tolerated, the
/// default port left out).
pub fn parse_origin(resource: &str) -> Result<String, InvalidResource> {
    cheq_core::discovery::bare_origin(resource).ok_or_else(|| {
        InvalidResource::NotAnOrigin(cheq_support::text::snippet(resource.as_bytes(), 200))
    })
}

/// Takes registrations (§16.3).
pub struct Registrar {
    mode: RegistrationMode,
    outbound: Outbound,
    store: Arc<dyn Registrations>,
    limiter: Limiter,
    clock: Arc<dyn Clock>,
    in_flight: tokio::sync::Semaphore,
    /// Origins no registration may take: this CS's own, and those of the
    /// resource servers of its configuration (which win over a
    /// registration, so one would be stored unused and go live unnoticed
    /// the day the file drops the origin).
    reserved: Vec<String>,
}

impl std::fmt::Debug for Registrar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registrar")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Registrar {
    pub fn new(
        mode: RegistrationMode,
        outbound: Outbound,
        store: Arc<dyn Registrations>,
        limiter: Limiter,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Registrar {
            mode,
            outbound,
            store,
            limiter,
            clock,
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
            reserved: Vec::new(),
        }
    }

    /// Refuses registrations of `origins` (this CS's own, those of its
    /// configuration).
    pub fn reserving(mut self, origins: impl IntoIterator<Item = String>) -> Self {
        self.reserved = origins
            .into_iter()
            .filter_map(|o| parse_origin(&o).ok())
            .collect();
        self
    }

    /// The mode it runs in.
    pub fn mode(&self) -> RegistrationMode {
        self.mode
    }

    /// Registers the RS of `request.resource`: checks, fetches, stores.
    pub async fn register(
        &self,
        request: RegistrationRequest<'_>,
    ) -> Result<Registered, RegistrationError> {
        if !self.mode.is_on() {
            return Err(RegistrationError::Off);
        }
        let origin = parse_origin(request.resource.trim())?;
        let token = match (self.mode, request.token) {
            (RegistrationMode::Token, None) => return Err(RegistrationError::TokenMissing),
            (RegistrationMode::Token, Some(t)) => Some(token_digest(t)),
            _ => None,
        };
        // Past the cap of registrations at once, refused before it is
        // counted: a burst does not use up an origin's allowance.
        let Ok(_slot) = self.in_flight.try_acquire() else {
            return Err(RegistrationError::TooMany { retry_after: 1 });
        };
        let now = self.clock.now().timestamp();
        // The address first; the origin only for a caller that holds a
        // good token (in token mode): nobody without one can use up the
        // allowance of an origin that is not theirs.
        self.count(LimitKey::RegistrationFrom(request.address.to_owned()), now)
            .await?;
        // Counted against the address like any other attempt, so that the
        // address's allowance bounds every refusal it can cause.
        if self.reserved.contains(&origin) {
            return Err(InvalidResource::Reserved(origin).into());
        }
        let held = match token {
            Some(digest) => {
                let store = self.store.clone();
                let d = digest.clone();
                if !blocking(move || store.take_access_token(&d)).await? {
                    return Err(RegistrationError::TokenRefused);
                }
                Some(HeldToken {
                    store: self.store.clone(),
                    digest: Some(digest),
                    created: now,
                })
            }
            None => None,
        };
        self.count(LimitKey::RegistrationOf(origin.clone()), now)
            .await?;
        let store = self.store.clone();
        let o = origin.clone();
        let existing = blocking(move || store.get(&o)).await?;
        if existing.is_some_and(|r| r.status == RegistrationStatus::Blocked) {
            return Err(RegistrationError::Blocked { origin });
        }
        let outcome = self.fetch_and_store(&origin, now).await;
        if outcome.is_ok() {
            // Used up by the registration it allowed; on any other way out
            // (a refusal, an error, the request dropped while fetching) the
            // held token is given back.
            if let Some(held) = held {
                held.keep();
            }
        }
        match &outcome {
            Ok(Registered::Created(r)) => {
                log::info!(
                    "registered resource server {} ({})",
                    r.origin,
                    cheq_support::text::one_line(&r.name)
                );
            }
            Ok(Registered::Refreshed(r)) => {
                log::info!("refreshed the registration of resource server {}", r.origin);
            }
            // At debug only: anyone can send refused registrations, as many
            // as the rates let through.
            Err(e) => log::debug!(
                "registration of {origin} refused: {}",
                cheq_support::text::one_line(&e.to_string())
            ),
        }
        outcome
    }

    /// Counts one attempt against `key`; `TooMany` past its rate.
    async fn count(&self, key: LimitKey, now: i64) -> Result<(), RegistrationError> {
        let limiter = self.limiter.clone();
        match blocking(move || limiter.count_attempt(&[key], now)).await? {
            Some(retry_after) => Err(RegistrationError::TooMany { retry_after }),
            None => Ok(()),
        }
    }

    /// Fetches and checks `origin`'s documents, and stores the record.
    async fn fetch_and_store(
        &self,
        origin: &str,
        now: i64,
    ) -> Result<Registered, RegistrationError> {
        let document_uri = format!("{origin}{RESOURCE_PATH}");
        let fetched = self
            .outbound
            .get(&document_uri, "application/json")
            .await
            .map_err(InvalidResource::Document)?;
        let doc =
            ResourceDocument::read(&fetched.body, origin).map_err(InvalidResource::Discovery)?;
        if !doc.takes_private_key_jwt() {
            return Err(InvalidResource::NoPrivateKeyJwt.into());
        }
        let prefix = doc.path_prefix();
        crate::registry::check_path_prefix(&prefix)
            .map_err(|reason| InvalidResource::Prefix { prefix, reason })?;
        let keys = self
            .outbound
            .get(&doc.jwks_uri, "application/json")
            .await
            .map_err(InvalidResource::KeySet)?;
        let jwks =
            Jwks::from_bytes(&keys.body).map_err(|e| InvalidResource::BadKeySet(e.to_string()))?;
        if jwks.keys().is_empty() {
            return Err(InvalidResource::NoKeys.into());
        }
        let record = RegisteredRecord {
            origin: origin.to_owned(),
            name: doc.name,
            resource_prefix: doc.resource_prefix,
            jwks_uri: doc.jwks_uri,
            token_endpoint: doc.token_endpoint,
            status: RegistrationStatus::Active,
            registered_at: now,
            updated_at: now,
        };
        let store = self.store.clone();
        let r = record.clone();
        match blocking(move || store.register(&r)).await? {
            RegisterOutcome::Created => Ok(Registered::Created(record)),
            RegisterOutcome::Refreshed => {
                let store = self.store.clone();
                let o = origin.to_owned();
                let stored = blocking(move || store.get(&o)).await?.unwrap_or(record);
                Ok(Registered::Refreshed(stored))
            }
            RegisterOutcome::Blocked => Err(RegistrationError::Blocked {
                origin: origin.to_owned(),
            }),
        }
    }
}

/// An initial access token taken from the store for one registration: given
/// back when dropped, unless the registration it allowed was stored.
struct HeldToken {
    store: Arc<dyn Registrations>,
    digest: Option<String>,
    created: i64,
}

impl HeldToken {
    /// The registration succeeded: the token stays used.
    fn keep(mut self) {
        self.digest = None;
    }
}

impl Drop for HeldToken {
    fn drop(&mut self) {
        let Some(digest) = self.digest.take() else {
            return;
        };
        let (store, created) = (self.store.clone(), self.created);
        let give_back = move || {
            if let Err(e) = store.add_access_token(&digest, created) {
                log::warn!("could not give back an initial access token: {e}");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(give_back)),
            Err(_) => give_back(),
        }
    }
}

/// Runs a store call on the blocking pool (PostgreSQL waits on the network).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| StoreError::Unavailable {
            op: "registration",
            message: "the worker ended".into(),
        })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_origin_is_a_resource() {
        for ok in [
            "https://api.airline.example",
            "https://api.airline.example/",
            "http://127.0.0.1:8081",
            "https://api.airline.example:8443",
        ] {
            assert!(parse_origin(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            parse_origin("https://api.airline.example:443/").unwrap(),
            "https://api.airline.example"
        );
        for bad in [
            "",
            "api.airline.example",
            "https://api.airline.example/cheq",
            "https://api.airline.example/?x=1",
            "https://api.airline.example/#x",
            "https://user@api.airline.example",
            "ftp://api.airline.example",
            "file:///etc/passwd",
            "https://",
        ] {
            assert!(
                matches!(parse_origin(bad), Err(InvalidResource::NotAnOrigin(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn tokens_are_random_and_kept_as_digests() {
        let a = new_token(&mut rand::rngs::OsRng);
        let b = new_token(&mut rand::rngs::OsRng);
        assert_ne!(a, b);
        assert_eq!(a.len(), 43, "256 bits in base64url");
        let d = token_digest(&a);
        assert_eq!(d.len(), 64);
        assert!(!d.contains(&a));
        assert_eq!(d, token_digest(&a));
    }
}
