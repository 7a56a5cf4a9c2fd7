//! The confirmation server an RS sends its users to and trusts (PROTOCOL.md
//! §1, §9, §16): named in full in its file (its confirmation URI, and its
//! keys in a file or at a `jwks_uri`), or by its issuer alone.
//!
//! A CS named by its issuer ([`DiscoveredCs`]) is read from its discovery
//! document (`<issuer>/.well-known/cheq-configuration`, §16.1) through the
//! fetcher of outside URLs (`cheq_support::outbound`): the document gives
//! the confirmation URI put in URI packs and the `jwks_uri` of its key set,
//! which is then kept current as §9 says (`FetchedJwks::outside`). The RS
//! starts whether or not the CS answers: [`DiscoveredCs::start`] reads the
//! document in the background, trying again with back-off (1 s, doubling to
//! 60 s) until it has it, and until then nothing can be minted
//! ([`ConfirmationServer::confirmation_uri`] is `None`). When the document
//! offers a `registration_endpoint`, the RS then registers its origin there
//! (§16.3; [`crate::registration`]).
//!
//! Such a CS may authenticate at the RS's token endpoint with its own key
//! (§16.4, [`crate::assertion`]); a CS named in full authenticates with the
//! secret of a `cs` client.

use crate::registration::{self, RegistrationState};
use cheq_core::discovery::{self, CsConfiguration, DiscoveryError, CS_CONFIGURATION_PATH};
use cheq_core::sign::{KeySource, PublicKey};
use cheq_support::outbound::{Outbound, OutboundError};
use cheq_support::peerkeys::{FetchedJwks, JwksError, PeerKeys, Refetch};
use cheq_support::time::Clock;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// The confirmation server of an RS.
#[derive(Debug, Clone)]
pub enum ConfirmationServer {
    /// Named in full: its confirmation URI and where its keys are.
    InFull {
        /// Its confirmation URI (§1).
        uri: String,
        keys: PeerKeys,
    },
    /// Named by its issuer; the rest read from its discovery document.
    Discovered(Arc<DiscoveredCs>),
}

impl ConfirmationServer {
    /// A CS named in full.
    pub fn in_full(uri: &str, keys: PeerKeys) -> Self {
        ConfirmationServer::InFull {
            uri: uri.to_owned(),
            keys,
        }
    }

    /// The origin its keys are trusted for (§5 rule 2): the origin of its
    /// confirmation URI, which for a discovered CS is its issuer (the
    /// document is refused otherwise).
    pub fn origin(&self) -> String {
        match self {
            ConfirmationServer::InFull { uri, .. } => cheq_core::cheq::uri::origin_of(uri),
            ConfirmationServer::Discovered(cs) => cs.issuer().to_owned(),
        }
    }

    /// The confirmation URI put in URI packs (§1); `None` while a
    /// discovered CS's document has not been read.
    pub fn confirmation_uri(&self) -> Option<&str> {
        match self {
            ConfirmationServer::InFull { uri, .. } => Some(uri),
            ConfirmationServer::Discovered(cs) => {
                cs.document().map(|d| d.confirmation_uri.as_str())
            }
        }
    }

    /// The issuer of a CS that may authenticate with its own key (§16.4).
    pub fn issuer(&self) -> Option<&str> {
        match self {
            ConfirmationServer::InFull { .. } => None,
            ConfirmationServer::Discovered(cs) => Some(cs.issuer()),
        }
    }

    /// The discovered CS, when it is one.
    pub fn discovered(&self) -> Option<&Arc<DiscoveredCs>> {
        match self {
            ConfirmationServer::InFull { .. } => None,
            ConfirmationServer::Discovered(cs) => Some(cs),
        }
    }

    /// Its keys, to put in a trust store (asked at each verification).
    pub fn source(&self) -> Arc<dyn KeySource> {
        match self {
            ConfirmationServer::InFull { keys, .. } => keys.source(),
            ConfirmationServer::Discovered(cs) => cs.clone(),
        }
    }

    /// Whether its key set can change while the RS runs (fetched, not a
    /// file): a key it lacks may be "not yet" rather than "never".
    pub fn keys_change(&self) -> bool {
        match self {
            ConfirmationServer::InFull { keys, .. } => matches!(keys, PeerKeys::Fetched(_)),
            ConfirmationServer::Discovered(_) => true,
        }
    }

    /// Fetches its key set again if what was read has expired.
    pub async fn ensure_fresh(&self) {
        match self {
            ConfirmationServer::InFull { keys, .. } => keys.ensure_fresh().await,
            ConfirmationServer::Discovered(cs) => {
                if let Some(keys) = cs.keys() {
                    keys.ensure_fresh().await;
                }
            }
        }
    }

    /// A document names `kid`, which the set lacks: fetches the set again
    /// if its rate limit allows (`Later` while a discovered CS's document is
    /// not read).
    pub async fn refetch_for(&self, kid: &str) -> Refetch {
        match self {
            ConfirmationServer::InFull { keys, .. } => keys.refetch_for(kid).await,
            ConfirmationServer::Discovered(cs) => match cs.keys() {
                Some(keys) => keys.refetch_for(kid).await,
                None => Refetch::Later { retry_after: 1 },
            },
        }
    }

    /// Starts fetching its keys in the background (a CS named in full by
    /// `jwks_uri`), or reading its discovery document and registering
    /// `origin` there (a discovered CS: [`DiscoveredCs::start`]).
    pub fn start(&self, origin: &str) {
        match self {
            ConfirmationServer::InFull { keys, .. } => keys.prefetch(),
            ConfirmationServer::Discovered(cs) => cs.start(origin),
        }
    }
}

/// Why a CS's discovery document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryFailure {
    #[error("{0}")]
    Fetch(#[from] OutboundError),
    #[error("its discovery document: {0}")]
    Document(#[from] DiscoveryError),
    #[error("its key set: {0}")]
    Keys(#[from] JwksError),
}

/// What a discovered CS's document gave.
#[derive(Debug)]
struct Found {
    document: CsConfiguration,
    keys: Arc<FetchedJwks>,
}

/// A CS named by its issuer (§16.1): its document read once, its key set
/// kept current, the RS's registration there.
pub struct DiscoveredCs {
    issuer: String,
    outbound: Outbound,
    clock: Arc<dyn Clock>,
    found: OnceLock<Found>,
    /// One read of the document at a time.
    reading: tokio::sync::Mutex<()>,
    registration: Mutex<RegistrationState>,
}

impl std::fmt::Debug for DiscoveredCs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscoveredCs")
            .field("issuer", &self.issuer)
            .field("found", &self.found.get().is_some())
            .finish_non_exhaustive()
    }
}

/// The first wait after a failed read of the document or a failed
/// registration; each failure doubles it, up to [`MAX_RETRY`].
pub const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between two tries.
pub const MAX_RETRY: Duration = Duration::from_secs(60);
/// The waits between tries: [`FIRST_RETRY`], doubling up to [`MAX_RETRY`].
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            next: FIRST_RETRY,
            max: MAX_RETRY,
        }
    }
}

impl Backoff {
    /// The wait before the next try.
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }
}

/// How loud a failure is after failing for `failing_secs`: as quiet as a
/// peer's key set not read yet during the start-up grace (the CS may be
/// starting too), then a warning.
pub fn failure_level(failing_secs: i64) -> log::Level {
    cheq_support::peerkeys::failure_level(false, failing_secs)
}

impl DiscoveredCs {
    /// The CS of `issuer` (an origin, checked by the configuration), its
    /// document not read yet.
    pub fn new(issuer: &str, outbound: Outbound, clock: Arc<dyn Clock>) -> Arc<Self> {
        let issuer = discovery::origin(issuer).unwrap_or_else(|| issuer.to_owned());
        Arc::new(DiscoveredCs {
            issuer,
            outbound,
            clock,
            found: OnceLock::new(),
            reading: tokio::sync::Mutex::new(()),
            registration: Mutex::new(RegistrationState::Pending),
        })
    }

    /// Its issuer (its origin).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Its discovery document, once read.
    pub fn document(&self) -> Option<&CsConfiguration> {
        self.found.get().map(|f| &f.document)
    }

    /// Its key set, once its document is read.
    pub fn keys(&self) -> Option<&Arc<FetchedJwks>> {
        self.found.get().map(|f| &f.keys)
    }

    /// Where the RS's registration there stands.
    pub fn registration(&self) -> RegistrationState {
        match self.registration.lock() {
            Ok(g) => g.clone(),
            Err(e) => e.into_inner().clone(),
        }
    }

    fn set_registration(&self, state: RegistrationState) {
        match self.registration.lock() {
            Ok(mut g) => *g = state,
            Err(e) => *e.into_inner() = state,
        }
    }

    pub(crate) fn set_registered(&self, endpoint: &str) {
        self.set_registration(RegistrationState::Registered {
            endpoint: endpoint.to_owned(),
        });
    }

    pub(crate) fn set_refused(&self, status: u16) {
        self.set_registration(RegistrationState::Refused { status });
    }

    pub(crate) fn set_retrying(&self, failures: u32, last: String) {
        self.set_registration(RegistrationState::Retrying { failures, last });
    }

    pub(crate) fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now()
    }

    /// The fetcher its URLs are read through.
    pub fn outbound(&self) -> &Outbound {
        &self.outbound
    }

    /// Reads its discovery document (once: later calls answer from what was
    /// read), and makes its key set, fetched on first use.
    pub async fn discover(&self) -> Result<&CsConfiguration, DiscoveryFailure> {
        if let Some(doc) = self.document() {
            return Ok(doc);
        }
        let _one = self.reading.lock().await;
        if let Some(doc) = self.document() {
            return Ok(doc);
        }
        let url = format!("{}{CS_CONFIGURATION_PATH}", self.issuer);
        let fetched = self.outbound.get(&url, "application/json").await?;
        let document = CsConfiguration::read(&fetched.body, &self.issuer)?;
        let keys = FetchedJwks::outside(&document.jwks_uri, self.clock.clone(), &self.outbound)?;
        log::info!(
            "confirmation server {}: discovery document read (confirmation URI {}, keys at {})",
            self.issuer,
            document.confirmation_uri,
            document.jwks_uri
        );
        let found = self.found.get_or_init(|| Found { document, keys });
        Ok(&found.document)
    }

    /// In the background: reads the document, trying again with back-off
    /// until it is read; then fetches the key set, and registers `origin`
    /// at the CS when its document offers registration (§16.3). Ends when
    /// the RS drops this CS.
    pub fn start(self: &Arc<Self>, origin: &str) {
        let weak = Arc::downgrade(self);
        let origin = origin.to_owned();
        tokio::spawn(async move {
            let Some(endpoint) = read_document(&weak).await else {
                return;
            };
            if let Some(endpoint) = endpoint {
                registration::register_until_done(&weak, &endpoint, &origin).await;
            }
        });
    }

    fn secs_since(&self, since: chrono::DateTime<chrono::Utc>) -> i64 {
        (self.clock.now() - since).num_seconds()
    }
}

/// Reads the document of the CS behind `weak` until it is read; then
/// starts fetching its keys. `None` when the CS was dropped meanwhile;
/// else the registration endpoint its document offers, if any.
async fn read_document(weak: &Weak<DiscoveredCs>) -> Option<Option<String>> {
    let mut backoff = Backoff::default();
    let mut failing_since = None;
    loop {
        let cs = weak.upgrade()?;
        match cs.discover().await {
            Ok(doc) => {
                let endpoint = doc.registration_endpoint.clone();
                if endpoint.is_none() {
                    cs.set_registration(RegistrationState::NotOffered);
                }
                if let Some(keys) = cs.keys() {
                    PeerKeys::Fetched(keys.clone()).prefetch();
                }
                return Some(endpoint);
            }
            Err(e) => {
                let since = *failing_since.get_or_insert_with(|| cs.clock.now());
                let wait = backoff.next_wait();
                log::log!(
                    failure_level(cs.secs_since(since)),
                    "confirmation server {}: cannot read its discovery document: {e}; trying again in {} s",
                    cs.issuer,
                    wait.as_secs()
                );
                drop(cs);
                tokio::time::sleep(wait).await;
            }
        }
    }
}

impl KeySource for DiscoveredCs {
    fn key(&self, kid: &str) -> Option<PublicKey> {
        self.keys().and_then(|k| k.key(kid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waits_double_up_to_a_minute() {
        let mut b = Backoff::default();
        let waits: Vec<u64> = (0..9).map(|_| b.next_wait().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn failures_are_quiet_for_a_minute_then_warnings() {
        let grace = cheq_support::peerkeys::STARTUP_GRACE_SECS;
        assert_eq!(failure_level(0), log::Level::Debug);
        assert_eq!(failure_level(grace - 1), log::Level::Debug);
        assert_eq!(failure_level(grace), log::Level::Warn);
    }
}
