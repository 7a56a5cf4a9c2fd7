//! The resource servers this CS works for, as one list (PROTOCOL.md §2,
//! §16.3): those of its configuration (and the one that hosts it, §12), and
//! those that registered themselves, read from the store. The rest of the
//! CS asks this list alone which RS a resource URI belongs to, and which
//! keys it trusts for it.
//!
//! The list is a snapshot replaced whole: [`Directory::reload`] reads the
//! store's generation and, when it moved, the registrations, and builds a
//! new snapshot (registry, trust store, look-up cache) from them, so that a
//! resource server registered, blocked, unblocked or removed on any
//! instance is served or refused here as soon as this instance reloads
//! (the server polls every [`RELOAD_EVERY`]). A registered RS whose record
//! did not change keeps its client and key cache across reloads.
//!
//! What a registered RS is made of ([`RegisteredLinks`]): a client that
//! authenticates with a client assertion signed by this CS's own key
//! (§16.4), whose every connection is under the operator's address policy
//! (`cheq_support::outbound`), and its key set fetched by its `jwks_uri`
//! under the same rules. A configured RS wins over a registered one of the
//! same origin. A blocked RS stays in the list as blocked: its resource
//! URIs are refused with that reason, and its pending deliveries wait.

use crate::fetch::{AssertionSigner, ClientAuth, RsClient};
use crate::flow::RegisteredRs;
use crate::registry::{Registry, RegistryError};
use cheq_core::sign::TrustStore;
use cheq_store::registrations::{RegisteredRecord, RegistrationStatus, Registrations};
use cheq_store::StoreError;
use cheq_support::keyring::KeyRing;
use cheq_support::outbound::{AddressPolicy, Outbound};
use cheq_support::peerkeys::{FetchedJwks, PeerKeys};
use cheq_support::recent::Recent;
use cheq_support::time::Clock;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// How often a running server reads the registrations' generation.
pub const RELOAD_EVERY: Duration = Duration::from_millis(500);
/// How many resource URIs' look-ups each snapshot keeps.
const FOUND_CACHE: usize = 4096;

/// A resource server the operator blocked (`cheq rs block`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedRs {
    pub origin: String,
    /// Its name as it registered (empty for an origin blocked before it
    /// ever registered).
    pub name: String,
}

/// What a resource URI belongs to.
#[derive(Debug, Clone)]
pub enum Found {
    /// A resource server this CS serves.
    Served(Arc<RegisteredRs>),
    /// A registered resource server the operator blocked.
    Blocked(Arc<BlockedRs>),
}

/// One state of the list, replaced whole by a reload.
pub struct Snapshot {
    /// The registrations' generation it was read at (`None`: none read).
    generation: Option<i64>,
    served: Registry<RegisteredRs>,
    blocked: Registry<BlockedRs>,
    trust: TrustStore,
    /// What each resource URI looked up last found (a flow asks four or
    /// five times, and each look-up parses the URI).
    found: Recent<Found>,
    /// How many served RSes registered themselves.
    registered: usize,
}

impl Snapshot {
    /// The keys trusted for each served resource server (§5, §9).
    pub fn trust(&self) -> &TrustStore {
        &self.trust
    }
}

/// Builds what a registered resource server is made of.
pub struct RegisteredLinks {
    keys: Arc<KeyRing>,
    issuer: String,
    clock: Arc<dyn Clock>,
    outbound: Outbound,
    /// Shared by every registered RS's client (reading the system's root
    /// certificates once).
    tls: native_tls::TlsConnector,
    /// The top-level `max_auth_age_secs`.
    max_auth_age: Option<i64>,
}

impl RegisteredLinks {
    /// Registered RSes are reached as `issuer` (the CS's origin), with
    /// assertions signed by `keys`, under `policy`, over `tls`.
    pub fn new(
        keys: Arc<KeyRing>,
        issuer: &str,
        clock: Arc<dyn Clock>,
        policy: AddressPolicy,
        max_auth_age: Option<i64>,
        tls: &native_tls::TlsConnector,
    ) -> Result<Self, String> {
        Ok(RegisteredLinks {
            keys,
            issuer: issuer.to_owned(),
            clock,
            outbound: Outbound::new(policy).map_err(|e| e.to_string())?,
            tls: tls.clone(),
            max_auth_age,
        })
    }

    /// The fetcher of everything a registered RS names.
    pub fn outbound(&self) -> &Outbound {
        &self.outbound
    }

    /// The client and keys of the RS of `record`.
    fn build(&self, record: &RegisteredRecord) -> Result<RegisteredRs, String> {
        let signer = AssertionSigner::new(self.keys.clone(), &self.issuer, self.clock.clone());
        let client = RsClient::with(
            &record.token_endpoint,
            ClientAuth::Assertion(signer),
            Some(self.outbound.policy().clone()),
            &self.tls,
        )?;
        let keys = FetchedJwks::outside(&record.jwks_uri, self.clock.clone(), &self.outbound)
            .map_err(|e| e.to_string())?;
        Ok(RegisteredRs {
            client: Arc::new(client),
            keys: PeerKeys::Fetched(keys),
            max_auth_age: self.max_auth_age,
        })
    }
}

/// The registrations a directory serves, and what it built of them.
struct Registered {
    store: Arc<dyn Registrations>,
    links: RegisteredLinks,
    /// Each registered origin's record and what was built of it, kept while
    /// the record does not change.
    built: Mutex<HashMap<String, (RegisteredRecord, Arc<RegisteredRs>)>>,
}

/// The resource servers this CS works for.
pub struct Directory {
    /// The configuration's (and the hosting RS's): `(origin, path prefix,
    /// the RS)`.
    fixed: Vec<(String, String, Arc<RegisteredRs>)>,
    /// The origins of `fixed`, normalised: they win over registrations.
    fixed_origins: HashSet<String>,
    registered: Option<Registered>,
    current: RwLock<Arc<Snapshot>>,
    /// One reload at a time.
    reloading: Mutex<()>,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("fixed", &self.fixed.len())
            .finish_non_exhaustive()
    }
}

/// `origin` as registrations name it (`scheme://host[:port]`, the default
/// port left out), or as written when it does not parse.
fn normalised(origin: &str) -> String {
    cheq_core::discovery::origin(origin).unwrap_or_else(|| origin.to_owned())
}

/// The path of a registered RS's `resource_prefix`.
fn prefix_path(resource_prefix: &str) -> Option<String> {
    url::Url::parse(resource_prefix)
        .ok()
        .map(|u| u.path().to_owned())
}

impl Directory {
    /// The list of the `fixed` resource servers (`(origin, path prefix,
    /// RS)`), and of those registered in `registrations` when they are
    /// served (`None`: a confirmation hosted inside its RS). Nothing is read from the store
    /// until [`Directory::reload`]. Fails when a fixed RS's keys cannot be
    /// trusted for its origin.
    pub fn new(
        fixed: Vec<(String, String, RegisteredRs)>,
        registrations: Option<(Arc<dyn Registrations>, RegisteredLinks)>,
    ) -> Result<Self, cheq_core::sign::TrustError> {
        let fixed: Vec<(String, String, Arc<RegisteredRs>)> = fixed
            .into_iter()
            .map(|(o, p, rs)| (o, p, Arc::new(rs)))
            .collect();
        let mut trust = TrustStore::new();
        for (origin, _, rs) in &fixed {
            trust.add(true, origin, rs.keys.source())?;
        }
        let snapshot = Snapshot {
            generation: None,
            served: Registry::new(
                fixed
                    .iter()
                    .map(|(o, p, rs)| (o.as_str(), p.as_str(), rs.clone())),
            ),
            blocked: Registry::default(),
            trust,
            found: Recent::new(FOUND_CACHE),
            registered: 0,
        };
        Ok(Directory {
            fixed_origins: fixed.iter().map(|(o, _, _)| normalised(o)).collect(),
            fixed,
            registered: registrations.map(|(store, links)| Registered {
                store,
                links,
                built: Mutex::new(HashMap::new()),
            }),
            current: RwLock::new(Arc::new(snapshot)),
            reloading: Mutex::new(()),
        })
    }

    /// The list as it is now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(e) => e.into_inner().clone(),
        }
    }

    /// Whether registered resource servers are served at all.
    pub fn takes_registrations(&self) -> bool {
        self.registered.is_some()
    }

    /// How many served resource servers registered themselves.
    pub fn registered_count(&self) -> usize {
        self.snapshot().registered
    }

    /// What `resource_uri` belongs to: a served RS, a blocked one, or none
    /// (§2; nothing is fetched).
    pub fn find(&self, resource_uri: &str) -> Result<Found, RegistryError> {
        let snapshot = self.snapshot();
        if let Some(found) = snapshot.found.get(resource_uri) {
            return Ok(found);
        }
        let found = match snapshot.served.find(resource_uri) {
            Ok(rs) => Found::Served(rs.clone()),
            Err(RegistryError::NotRegistered(uri)) => match snapshot.blocked.find(resource_uri) {
                Ok(b) => Found::Blocked(b.clone()),
                Err(_) => return Err(RegistryError::NotRegistered(uri)),
            },
            Err(e) => return Err(e),
        };
        snapshot.found.put(resource_uri, found.clone());
        Ok(found)
    }

    /// Reads the registrations again when their generation moved, and
    /// replaces the list; `true` when it did. A record whose RS cannot be
    /// built (its key set's URI refused, say) is left out, and logged.
    pub fn reload(&self) -> Result<bool, StoreError> {
        let Some(registered) = &self.registered else {
            return Ok(false);
        };
        let _one = self
            .reloading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The generation is read before the list: a write in between moves
        // it again, and the next reload reads the list once more.
        let generation = registered.store.generation()?;
        if self.snapshot().generation == Some(generation) {
            return Ok(false);
        }
        let records = registered.store.list()?;
        let mut built = registered
            .built
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut trust = TrustStore::new();
        let mut served: Vec<(String, String, Arc<RegisteredRs>)> = Vec::new();
        for (origin, prefix, rs) in &self.fixed {
            // Checked when the directory was made.
            let _ = trust.add(true, origin, rs.keys.source());
            served.push((origin.clone(), prefix.clone(), rs.clone()));
        }
        let mut blocked = Vec::new();
        let mut kept = HashMap::new();
        let mut count = 0;
        for record in records {
            let origin = normalised(&record.origin);
            if self.fixed_origins.contains(&origin) {
                continue;
            }
            if record.status == RegistrationStatus::Blocked {
                blocked.push(BlockedRs {
                    origin: record.origin.clone(),
                    name: record.name.clone(),
                });
                continue;
            }
            let Some(prefix) = prefix_path(&record.resource_prefix) else {
                log::warn!(
                    "registered resource server {}: its resource_prefix is not a URI; not served",
                    record.origin
                );
                continue;
            };
            let rs = match built.remove(&record.origin) {
                Some((was, rs)) if same_links(&was, &record) => rs,
                _ => match registered.links.build(&record) {
                    Ok(rs) => Arc::new(rs),
                    Err(e) => {
                        log::warn!(
                            "registered resource server {}: {e}; not served",
                            record.origin
                        );
                        continue;
                    }
                },
            };
            if let Err(e) = trust.add(true, &record.origin, rs.keys.source()) {
                log::warn!(
                    "registered resource server {}: {e}; not served",
                    record.origin
                );
                continue;
            }
            served.push((record.origin.clone(), prefix, rs.clone()));
            kept.insert(record.origin.clone(), (record, rs));
            count += 1;
        }
        *built = kept;
        let snapshot = Snapshot {
            generation: Some(generation),
            served: Registry::new(
                served
                    .iter()
                    .map(|(o, p, rs)| (o.as_str(), p.as_str(), rs.clone())),
            ),
            // Any URI of a blocked origin is refused as blocked.
            blocked: Registry::new(blocked.iter().map(|b| (b.origin.as_str(), "/", b.clone()))),
            trust,
            found: Recent::new(FOUND_CACHE),
            registered: count,
        };
        match self.current.write() {
            Ok(mut g) => *g = Arc::new(snapshot),
            Err(e) => *e.into_inner() = Arc::new(snapshot),
        }
        Ok(true)
    }
}

/// Whether two records of one origin make the same client and keys.
fn same_links(a: &RegisteredRecord, b: &RegisteredRecord) -> bool {
    a.resource_prefix == b.resource_prefix
        && a.jwks_uri == b.jwks_uri
        && a.token_endpoint == b.token_endpoint
}
