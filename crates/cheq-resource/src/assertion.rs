//! Taking a CS's client assertion at the RS's token endpoint (PROTOCOL.md
//! §16.4): the CS the assertion claims to be must be one this RS trusts by
//! issuer (its configured one, or one a user chose, §17: [`Hosts`]), the
//! assertion must pass every
//! check of `cheq_core::sign::assertion` against that CS's key set (its
//! audience this RS's token endpoint exactly as its discovery document
//! says), and its `jti` must never have been taken before, on any instance
//! (the store's [`UsedAssertions`], durable before the token is issued).
//!
//! Each refusal is an [`AssertionRefusal`] of its own, for the log; the
//! front end answers every one but [`AssertionRefusal::NotReady`] and
//! [`AssertionRefusal::Store`] with `401 invalid_client`.

use crate::hosts::Hosts;
use crate::trusted_cs::DiscoveredCs;
use cheq_core::sign::assertion::{
    claimed_issuer, verify_client_assertion, AssertionError, Expected, VerifiedAssertion,
};
use cheq_store::rs::UsedAssertions;
use cheq_store::StoreError;
use cheq_support::peerkeys::{FetchedJwks, Refetch};
use cheq_support::time::Clock;
use std::sync::Arc;

/// Why an assertion was not taken.
#[derive(Debug, thiserror::Error)]
pub enum AssertionRefusal {
    /// `client_assertion_type` is not the JWT bearer type.
    #[error("client_assertion_type is not urn:ietf:params:oauth:client-assertion-type:jwt-bearer")]
    WrongAssertionType,
    /// The assertion names a CS this RS does not trust.
    #[error(
        "the assertion's issuer ({0}) is not a confirmation server this resource server trusts"
    )]
    Untrusted(String),
    /// A check of the assertion failed.
    #[error("{0}")]
    Check(#[from] AssertionError),
    /// Its `jti` was taken before.
    #[error("the assertion's \"jti\" was used before")]
    Replayed,
    /// `client_id` is given and is not the assertion's issuer.
    #[error("client_id is not the assertion's issuer")]
    OtherClientId,
    /// The trusted CS's discovery document is not read yet.
    #[error("the discovery document of {0} is not read yet")]
    NotReady(String),
    /// The record of used assertions failed.
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// The CSes this RS trusts by issuer, with what takes their assertions.
pub struct TrustedIssuers {
    hosts: Arc<Hosts>,
    /// This RS's token endpoint, the audience of every assertion.
    audience: String,
    used: Arc<dyn UsedAssertions>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for TrustedIssuers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustedIssuers")
            .field("hosts", &self.hosts)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

impl TrustedIssuers {
    /// The CSes of `hosts` named by issuer take assertions for `audience`
    /// (this RS's token endpoint); their `jti`s are kept in `used`.
    pub fn new(
        hosts: Arc<Hosts>,
        audience: &str,
        used: Arc<dyn UsedAssertions>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        TrustedIssuers {
            hosts,
            audience: audience.to_owned(),
            used,
            clock,
        }
    }

    /// Whether any CS is trusted by issuer (the token endpoint then takes
    /// `private_key_jwt`): the default one, or the ones users choose.
    pub fn any(&self) -> bool {
        self.hosts.default_cs().discovered().is_some() || self.hosts.users_choose()
    }

    /// Whether a token that names `issuer` is honoured: one issued after
    /// an assertion of a CS this RS trusted then (a CS users chose is never
    /// forgotten, [`Hosts`]); the default one when users cannot choose.
    pub fn trusts(&self, issuer: &str) -> bool {
        self.hosts.users_choose() || self.hosts.get(Some(issuer)).is_some()
    }

    /// The CS of `issuer`, reading the store's list of chosen CSes when
    /// this instance does not know it.
    async fn find(&self, issuer: &str) -> Result<Option<Arc<DiscoveredCs>>, AssertionRefusal> {
        if let Some(cs) = self.hosts.get(Some(issuer)) {
            return Ok(cs.discovered().cloned());
        }
        let hosts = self.hosts.clone();
        let issuer = issuer.to_owned();
        Ok(
            tokio::task::spawn_blocking(move || hosts.discovered(&issuer))
                .await
                .map_err(|_| StoreError::Backend {
                    op: "chosen confirmation servers",
                    message: "the blocking task failed".into(),
                })??,
        )
    }

    /// Takes `assertion`: the issuer of the CS it authenticates, or why not.
    pub async fn take(&self, assertion: &str) -> Result<String, AssertionRefusal> {
        let issuer = claimed_issuer(assertion)?;
        let cs = self
            .find(&issuer)
            .await?
            .ok_or_else(|| AssertionRefusal::Untrusted(shown(&issuer)))?;
        if cs.keys().is_none() {
            // Known from the store, its document not read yet here.
            let _ = cs.discover().await;
        }
        let keys = cs
            .keys()
            .ok_or_else(|| AssertionRefusal::NotReady(cs.issuer().to_owned()))?;
        keys.ensure_fresh().await;
        let verified = match self.verify(assertion, &cs, keys) {
            Err(AssertionError::UnknownKey(kid)) => {
                // A key the CS added since its set was read (§9).
                match keys.refetch_for(&kid).await {
                    Refetch::Found => self.verify(assertion, &cs, keys)?,
                    Refetch::Absent | Refetch::Later { .. } => {
                        return Err(AssertionError::UnknownKey(kid).into())
                    }
                }
            }
            other => other?,
        };
        let used = self.used.clone();
        let VerifiedAssertion {
            issuer,
            jti,
            expires_at,
        } = verified;
        let first = {
            let issuer = issuer.clone();
            tokio::task::spawn_blocking(move || used.first_use(&issuer, &jti, expires_at))
                .await
                .map_err(|_| StoreError::Backend {
                    op: "record assertion",
                    message: "the blocking task failed".into(),
                })??
        };
        if !first {
            return Err(AssertionRefusal::Replayed);
        }
        Ok(issuer)
    }

    fn verify(
        &self,
        assertion: &str,
        cs: &DiscoveredCs,
        keys: &FetchedJwks,
    ) -> Result<VerifiedAssertion, AssertionError> {
        verify_client_assertion(
            assertion,
            keys,
            Expected {
                issuer: cs.issuer(),
                audience: &self.audience,
                now: self.clock.now().timestamp(),
            },
        )
    }

    /// The refusal of an assertion when no CS is trusted by issuer.
    pub fn untrusted(assertion: &str) -> AssertionRefusal {
        match claimed_issuer(assertion) {
            Ok(issuer) => AssertionRefusal::Untrusted(shown(&issuer)),
            Err(e) => AssertionRefusal::Check(e),
        }
    }

    /// Forgets the used assertions that expired; how many went. Blocks.
    /// A `jti` is kept a clock skew past its `exp`: another instance whose
    /// clock runs behind this one's still takes the assertion until then.
    pub fn collect_expired(&self) -> Result<usize, StoreError> {
        self.used.collect_expired(
            self.clock.now().timestamp() - cheq_core::sign::assertion::CLOCK_SKEW_SECS,
        )
    }
}

/// An issuer an assertion claims, as a log line may show it: on one line,
/// and cut short.
fn shown(issuer: &str) -> String {
    const LONGEST: usize = 120;
    let line = cheq_support::text::one_line(issuer);
    match line.char_indices().nth(LONGEST) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}
