//! The confirmation servers this RS's users confirm at (PROTOCOL.md §17):
//! its default CS, and every CS a user chose.
//!
//! A CS a user wants to move to is checked before the change is even asked
//! for ([`Hosts::prepare`]): its discovery document read (§16.1) and its
//! key set fetched through the fetcher of outside URLs (§16.3's rules, the
//! RS's `allow_addresses`), and, when it offers registration, this RS
//! registered there (§16.3). A CS that cannot be reached or refuses is
//! refused with its reason ([`HostRefusal`]).
//!
//! The CSes users chose are kept in the store ([`cheq_store::rs::Settings::hosts`],
//! never forgotten while the RS runs, since a pending CHEQ may name a CS its
//! user has left). Each instance reads that list at start
//! ([`Hosts::load`]) and again when it meets an issuer it does not know (a
//! user who moved on another instance: [`Hosts::for_issuer`]). Each CS's
//! keys are trusted for its own origin only ([`Hosts::trust_entries`]), so
//! a countersignature verifies only with the keys of the CS its CHEQ names.

use crate::registration::{outcome, register_once, Outcome};
use crate::trusted_cs::{ConfirmationServer, DiscoveredCs, DiscoveryFailure};
use cheq_core::discovery::{self, CsConfiguration};
use cheq_core::sign::KeySource;
use cheq_store::StoreError;
use cheq_support::outbound::Outbound;
use cheq_support::time::Clock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Why a CS cannot be a user's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostRefusal {
    /// Not an origin (`https://host[:port]`).
    #[error("\"{0}\" is not the origin of a confirmation server (https://host[:port])")]
    NotAnOrigin(String),
    /// This RS reaches no CS by issuer (it has no fetcher of outside URLs).
    #[error("this resource server does not let its users choose a confirmation server")]
    NotOffered,
    /// Its document or key set could not be read.
    #[error("the confirmation server {origin} cannot be used: {why}")]
    Unreachable { origin: String, why: String },
    /// It refused this RS's registration.
    #[error("the confirmation server {origin} refused to register this resource server: {why}")]
    Refused { origin: String, why: String },
    /// It does not offer passkeys, and the user's rules need one.
    #[error("the confirmation server {0} does not offer passkeys, and your rules ask for one")]
    NoPasskeys(String),
    /// It is the user's CS already.
    #[error("{0} is your confirmation server already")]
    Already(String),
    /// [`MAX_CHECKS`] checks of other CSes are running.
    #[error("too many confirmation servers are being checked at once; try again in a moment")]
    Busy,
}

/// Checks of a CS a user wants to move to, running at once at most: each
/// makes up to three outside fetches, and any agent may ask for one.
pub const MAX_CHECKS: usize = 8;

/// A CS a user may move to, as [`Hosts::prepare`] found it.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Its issuer (origin).
    pub origin: String,
    /// The name its document gives, or its host.
    pub name: String,
    /// Whether it offers passkey-bound decisions (§14).
    pub passkeys: bool,
    /// Whether it is this RS's default CS (a move there clears the choice).
    pub is_default: bool,
}

/// The CSes of this RS's users.
pub struct Hosts {
    default: ConfirmationServer,
    chosen: RwLock<Vec<Arc<DiscoveredCs>>>,
    /// Moves by one whenever a CS joins `chosen`.
    generation: AtomicU64,
    outbound: Option<Outbound>,
    clock: Arc<dyn Clock>,
    /// This RS's origin, registered at the CSes its users choose.
    origin: String,
    store: Arc<dyn cheq_store::rs::Settings>,
    /// The checks of [`Hosts::prepare`] running now.
    checks: tokio::sync::Semaphore,
}

impl std::fmt::Debug for Hosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hosts")
            .field("default", &self.default)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl Hosts {
    /// The default CS `default` of the RS at `origin`; the CSes users
    /// choose are reached through `outbound` (`None`: users cannot choose).
    pub fn new(
        default: ConfirmationServer,
        outbound: Option<Outbound>,
        clock: Arc<dyn Clock>,
        origin: &str,
        store: Arc<dyn cheq_store::rs::Settings>,
    ) -> Self {
        Hosts {
            default,
            chosen: RwLock::new(Vec::new()),
            generation: AtomicU64::new(0),
            outbound,
            clock,
            origin: origin.trim_end_matches('/').to_owned(),
            store,
            checks: tokio::sync::Semaphore::new(MAX_CHECKS),
        }
    }

    /// Whether users may choose a CS (this RS reaches CSes by issuer).
    pub fn users_choose(&self) -> bool {
        self.outbound.is_some()
    }

    /// The RS's default CS.
    pub fn default_cs(&self) -> &ConfirmationServer {
        &self.default
    }

    /// Moves whenever a CS joins (the trust built from
    /// [`trust_entries`](Self::trust_entries) is then rebuilt).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn chosen(&self) -> Vec<Arc<DiscoveredCs>> {
        match self.chosen.read() {
            Ok(g) => g.clone(),
            Err(e) => e.into_inner().clone(),
        }
    }

    fn known(&self, issuer: &str) -> Option<Arc<DiscoveredCs>> {
        self.chosen().into_iter().find(|cs| cs.issuer() == issuer)
    }

    /// Whether `issuer` is the default CS's.
    pub fn is_default(&self, issuer: &str) -> bool {
        self.default.origin() == issuer
    }

    /// The CS of `issuer` this instance knows, `None` for the default.
    pub fn get(&self, issuer: Option<&str>) -> Option<ConfirmationServer> {
        match issuer {
            None => Some(self.default.clone()),
            Some(i) if self.is_default(i) => Some(self.default.clone()),
            Some(i) => self.known(i).map(ConfirmationServer::Discovered),
        }
    }

    /// Every CS with the origin its keys are trusted for.
    pub fn trust_entries(&self) -> Vec<(String, Arc<dyn KeySource>)> {
        let mut all = vec![(self.default.origin(), self.default.source())];
        for cs in self.chosen() {
            if !self.is_default(cs.issuer()) {
                all.push((cs.issuer().to_owned(), cs.clone() as Arc<dyn KeySource>));
            }
        }
        all
    }

    /// Keeps `cs` among the ones known, unless another of its issuer is
    /// known already (added meanwhile): the one kept, and whether it is
    /// `cs`.
    fn keep(&self, cs: Arc<DiscoveredCs>) -> (Arc<DiscoveredCs>, bool) {
        let mut chosen = match self.chosen.write() {
            Ok(g) => g,
            Err(e) => e.into_inner(),
        };
        if let Some(there) = chosen.iter().find(|c| c.issuer() == cs.issuer()) {
            return (there.clone(), false);
        }
        chosen.push(cs.clone());
        self.generation.fetch_add(1, Ordering::AcqRel);
        (cs, true)
    }

    /// Reads the CSes users chose from the store and starts reading each
    /// one's document and keys in the background (and registering there).
    /// Blocks on the store.
    pub fn load(&self) -> Result<usize, StoreError> {
        let listed = self.store.hosts()?;
        let mut started = 0;
        let Some(outbound) = &self.outbound else {
            return Ok(0);
        };
        for issuer in listed {
            if self.is_default(&issuer) || self.known(&issuer).is_some() {
                continue;
            }
            let (cs, fresh) = self.keep(DiscoveredCs::new(
                &issuer,
                outbound.clone(),
                self.clock.clone(),
            ));
            if fresh {
                cs.start(&self.origin);
                started += 1;
            }
        }
        Ok(started)
    }

    /// The CS of `issuer` (default included), reading the store's list
    /// again when this instance does not know it (a user who moved on
    /// another instance); `None` when no user ever chose it. Blocks on the
    /// store for an unknown issuer: call it off an async worker.
    pub fn for_issuer(&self, issuer: &str) -> Result<Option<ConfirmationServer>, StoreError> {
        if let Some(cs) = self.get(Some(issuer)) {
            return Ok(Some(cs));
        }
        if self.outbound.is_none() {
            return Ok(None);
        }
        self.load()?;
        Ok(self.get(Some(issuer)))
    }

    /// The discovered CS of `issuer` for a client assertion (§16.4): the
    /// default when it is named by issuer, or one a user chose.
    pub fn discovered(&self, issuer: &str) -> Result<Option<Arc<DiscoveredCs>>, StoreError> {
        Ok(self
            .for_issuer(issuer)?
            .and_then(|cs| cs.discovered().cloned()))
    }

    /// Checks the CS at `origin` for a user's move there, as the module
    /// docs say. It is not trusted for that: only a move confirmed and
    /// stored makes it one of this RS's CSes.
    pub async fn prepare(&self, origin: &str) -> Result<Prepared, HostRefusal> {
        let origin = discovery::bare_origin(origin)
            .ok_or_else(|| HostRefusal::NotAnOrigin(cheq_support::text::one_line(origin)))?;
        if self.is_default(&origin) {
            return Ok(Prepared {
                name: self
                    .default
                    .discovered()
                    .and_then(|cs| cs.document().map(name_of))
                    .unwrap_or_else(|| host_of(&origin)),
                passkeys: self
                    .default
                    .discovered()
                    .and_then(|cs| cs.document().map(offers_passkeys))
                    .unwrap_or(true),
                origin,
                is_default: true,
            });
        }
        let outbound = self.outbound.as_ref().ok_or(HostRefusal::NotOffered)?;
        let _check = self.checks.try_acquire().map_err(|_| HostRefusal::Busy)?;
        let unreachable = |why: String| HostRefusal::Unreachable {
            origin: origin.clone(),
            why,
        };
        let cs = match self.known(&origin) {
            Some(cs) => cs,
            None => DiscoveredCs::new(&origin, outbound.clone(), self.clock.clone()),
        };
        let document = cs
            .discover()
            .await
            .map_err(|e: DiscoveryFailure| unreachable(e.to_string()))?
            .clone();
        if let Some(keys) = cs.keys() {
            keys.fetch_now()
                .await
                .map_err(|e| unreachable(format!("its key set: {e}")))?;
        }
        if let Some(endpoint) = &document.registration_endpoint {
            let answer = register_once(outbound, endpoint, &self.origin).await;
            match outcome(&answer) {
                Outcome::Registered => cs.set_registered(endpoint),
                Outcome::GiveUp(status) => {
                    return Err(HostRefusal::Refused {
                        origin,
                        why: format!("HTTP {status}"),
                    })
                }
                Outcome::Retry(why) => return Err(HostRefusal::Refused { origin, why }),
            }
        }
        // Not kept here: a CS joins the ones this RS trusts only once a
        // move to it is confirmed and stored (`load`, `for_issuer`).
        drop(cs);
        Ok(Prepared {
            name: name_of(&document),
            passkeys: offers_passkeys(&document),
            origin,
            is_default: false,
        })
    }

    /// Whether the CS of `issuer` (the default for `None`) is known to
    /// offer no passkeys (a CS named in full, or not read yet: not known).
    pub fn lacks_passkeys(&self, issuer: Option<&str>) -> bool {
        self.get(issuer)
            .and_then(|cs| {
                cs.discovered()
                    .and_then(|d| d.document().map(offers_passkeys))
            })
            .is_some_and(|offers| !offers)
    }
}

/// The name a CS's document gives, or its host.
fn name_of(document: &CsConfiguration) -> String {
    document
        .name
        .clone()
        .unwrap_or_else(|| host_of(&document.issuer))
}

fn host_of(origin: &str) -> String {
    url::Url::parse(origin)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_else(|| origin.to_owned())
}

fn offers_passkeys(document: &CsConfiguration) -> bool {
    document.assurances_supported.iter().any(|a| a == "passkey")
}
