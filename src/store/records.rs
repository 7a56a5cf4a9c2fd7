//! The confirmation server's durable records (PROTOCOL.md §6): one record per
//! nonce it countersigned, holding the decision document and its delivery
//! status, plus the indexes the CS needs (by resource URI, by user, and the
//! deliveries still pending).
//!
//! [`Records::claim`] writes a new record and its indexes, only if no record
//! exists for that nonce (compare-and-swap), and flushes before it returns: a decision is stored before it is delivered, and a nonce is never
//! countersigned twice.

use serde::{Deserialize, Serialize};
use std::path::Path;

const DECISIONS: &str = "cs.decisions";
const BY_RESOURCE: &str = "cs.by_resource";
const BY_USER: &str = "cs.by_user";
const PENDING: &str = "cs.pending";

/// Where a decision stands with the resource server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum Delivery {
    /// Not yet acknowledged; retried until `expires`.
    Pending {
        attempts: u32,
        next_try: i64,
        last_error: Option<String>,
    },
    /// The RS answered 200 with this status (`accepted` / `rejected`).
    Delivered { status: String, at: i64 },
    /// The RS refused the decision (400, 409); not retried.
    Refused {
        status: u16,
        reason: String,
        at: i64,
    },
    /// The CHEQ expired before the RS could be reached (or the RS said 410).
    Expired { at: i64 },
}

impl Delivery {
    /// A short word for pages and the API.
    pub fn label(&self) -> &'static str {
        match self {
            Delivery::Pending { .. } => "delivery pending",
            Delivery::Delivered { .. } => "delivered",
            Delivery::Refused { .. } => "refused by the resource server",
            Delivery::Expired { .. } => "not delivered: expired",
        }
    }
    pub fn is_pending(&self) -> bool {
        matches!(self, Delivery::Pending { .. })
    }
}

/// One countersigned decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    pub nonce: String,
    pub user: String,
    pub resource_uri: String,
    pub resource_origin: String,
    pub operation: String,
    pub operation_name: String,
    /// `accept` or `reject`.
    pub decision: String,
    /// `html`, `voice` or `api`.
    pub channel: String,
    pub decided_at: i64,
    pub expires: i64,
    /// The two-signature document, exactly as delivered; sealed (see
    /// `confirm::seal`) when `sealed`; redacted evidence once a sealed
    /// document's delivery is final.
    pub document: String,
    pub delivery: Delivery,
    #[serde(default)]
    pub sealed: bool,
    /// Keyed digest (HMAC-SHA256, base64url) of each value the user typed (§8).
    #[serde(default)]
    pub collected_hmac: indexmap::IndexMap<String, String>,
}

/// What [`Records::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The record is new and durable.
    Fresh,
    /// A record for this nonce already existed; nothing was written.
    Existing(Box<DecisionRecord>),
}

/// Why a record operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error("records database: {0}")]
    Db(String),
    #[error("record {0} is corrupt")]
    Corrupt(String),
}

impl From<sled::Error> for RecordsError {
    fn from(e: sled::Error) -> Self {
        RecordsError::Db(e.to_string())
    }
}

/// The CS records, on sled.
#[derive(Debug, Clone)]
pub struct Records {
    db: sled::Db,
    decisions: sled::Tree,
    by_resource: sled::Tree,
    by_user: sled::Tree,
    pending: sled::Tree,
}

fn user_key(user: &str, decided_at: i64, nonce: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(user.len() + nonce.len() + 10);
    k.extend_from_slice(user.as_bytes());
    k.push(0);
    // Inverted so that a forward scan is newest first.
    k.extend_from_slice(&(i64::MAX - decided_at).to_be_bytes());
    k.extend_from_slice(nonce.as_bytes());
    k
}

impl Records {
    /// Opens the records in `db`.
    pub fn open(db: sled::Db) -> Result<Self, RecordsError> {
        Ok(Records {
            decisions: db.open_tree(DECISIONS)?,
            by_resource: db.open_tree(BY_RESOURCE)?,
            by_user: db.open_tree(BY_USER)?,
            pending: db.open_tree(PENDING)?,
            db,
        })
    }

    /// Opens a sled database at `dir` and the records in it (tests, tools).
    pub fn open_dir(dir: &Path) -> Result<Self, RecordsError> {
        Self::open(sled::Config::new().path(dir).open()?)
    }

    fn decode(key: &str, bytes: &[u8]) -> Result<DecisionRecord, RecordsError> {
        serde_json::from_slice(bytes).map_err(|_| RecordsError::Corrupt(key.to_owned()))
    }

    /// Stores `record` if its nonce has no record yet, with its indexes, flushed.
    ///
    /// No sled transaction: in sled 0.34 one transaction makes every later
    /// operation of the process take a global lock (see `store::sled_store`).
    /// The indexes are written first and the record is then swapped in only
    /// if absent, which is the atomic claim; a crash or a lost race leaves at
    /// worst an index entry pointing at no record (or at the winner's), which
    /// every reader skips.
    pub fn claim(&self, record: &DecisionRecord) -> Result<Claim, RecordsError> {
        let bytes = serde_json::to_vec(record).map_err(|e| RecordsError::Db(e.to_string()))?;
        let nonce = record.nonce.as_bytes();
        if let Some(old) = self.decisions.get(nonce)? {
            return Ok(Claim::Existing(Box::new(Self::decode(
                &record.nonce,
                &old,
            )?)));
        }
        if record.delivery.is_pending() {
            self.pending.insert(nonce, &[])?;
        }
        self.by_resource
            .insert(record.resource_uri.as_bytes(), nonce)?;
        self.by_user.insert(
            user_key(&record.user, record.decided_at, &record.nonce),
            nonce,
        )?;
        match self
            .decisions
            .compare_and_swap(nonce, None as Option<&[u8]>, Some(bytes))?
        {
            Ok(()) => {
                self.db.flush()?;
                Ok(Claim::Fresh)
            }
            Err(e) => match e.current {
                Some(old) => Ok(Claim::Existing(Box::new(Self::decode(
                    &record.nonce,
                    &old,
                )?))),
                None => Err(RecordsError::Corrupt(record.nonce.clone())),
            },
        }
    }

    /// The record for `nonce`.
    pub fn get(&self, nonce: &str) -> Result<Option<DecisionRecord>, RecordsError> {
        self.decisions
            .get(nonce.as_bytes())?
            .map(|b| Self::decode(nonce, &b))
            .transpose()
    }

    /// The record of the decision on `resource_uri`, if any.
    pub fn by_resource(&self, resource_uri: &str) -> Result<Option<DecisionRecord>, RecordsError> {
        match self.by_resource.get(resource_uri.as_bytes())? {
            Some(nonce) => self.get(&String::from_utf8_lossy(&nonce)),
            None => Ok(None),
        }
    }

    /// Rewrites an existing record (and the pending index), flushed.
    pub fn put(&self, record: &DecisionRecord) -> Result<(), RecordsError> {
        self.put_lazily(record)?;
        self.db.flush()?;
        Ok(())
    }

    /// Rewrites an existing record without waiting for the disk (sled
    /// flushes within half a second). For changes a crash may lose safely.
    pub fn put_lazily(&self, record: &DecisionRecord) -> Result<(), RecordsError> {
        let bytes = serde_json::to_vec(record).map_err(|e| RecordsError::Db(e.to_string()))?;
        let nonce = record.nonce.as_bytes();
        self.decisions.insert(nonce, bytes)?;
        if record.delivery.is_pending() {
            self.pending.insert(nonce, &[])?;
        } else {
            self.pending.remove(nonce)?;
        }
        Ok(())
    }

    /// The nonces of records still holding a sealed document.
    pub fn sealed(&self) -> Result<Vec<String>, RecordsError> {
        let mut out = Vec::new();
        for item in self.decisions.iter() {
            let (k, v) = item?;
            let key = String::from_utf8_lossy(&k).into_owned();
            if Self::decode(&key, &v)?.sealed {
                out.push(key);
            }
        }
        Ok(out)
    }

    /// The nonces whose delivery is still pending.
    pub fn pending(&self) -> Result<Vec<String>, RecordsError> {
        self.pending
            .iter()
            .keys()
            .map(|k| Ok(String::from_utf8_lossy(&k?).into_owned()))
            .collect()
    }

    /// A user's decisions, newest first, at most `limit`.
    pub fn for_user(&self, user: &str, limit: usize) -> Result<Vec<DecisionRecord>, RecordsError> {
        let mut prefix = user.as_bytes().to_vec();
        prefix.push(0);
        let mut out = Vec::new();
        for entry in self.by_user.scan_prefix(&prefix).take(limit) {
            let (_, nonce) = entry?;
            if let Some(r) = self.get(&String::from_utf8_lossy(&nonce))? {
                out.push(r);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(nonce: &str, user: &str, at: i64) -> DecisionRecord {
        DecisionRecord {
            nonce: nonce.into(),
            user: user.into(),
            resource_uri: format!("https://rs.example/cheq/{nonce}"),
            resource_origin: "https://rs.example".into(),
            operation: "https://rs.example/op".into(),
            operation_name: "Op".into(),
            decision: "accept".into(),
            channel: "html".into(),
            decided_at: at,
            expires: at + 600,
            document: "{}".into(),
            delivery: Delivery::Pending {
                attempts: 0,
                next_try: at,
                last_error: None,
            },
            sealed: false,
            collected_hmac: Default::default(),
        }
    }

    #[test]
    fn a_nonce_is_claimed_once() {
        let dir = tempfile::tempdir().unwrap();
        let r = Records::open_dir(dir.path()).unwrap();
        assert_eq!(r.claim(&record("n1", "alice", 10)).unwrap(), Claim::Fresh);
        let mut other = record("n1", "alice", 11);
        other.decision = "reject".into();
        match r.claim(&other).unwrap() {
            Claim::Existing(old) => assert_eq!(old.decision, "accept"),
            Claim::Fresh => panic!("claimed twice"),
        }
        assert_eq!(
            r.by_resource("https://rs.example/cheq/n1")
                .unwrap()
                .unwrap()
                .nonce,
            "n1"
        );
        assert_eq!(r.pending().unwrap(), vec!["n1".to_owned()]);
        let done = Delivery::Delivered {
            status: "accepted".into(),
            at: 12,
        };
        let mut record = r.get("n1").unwrap().unwrap();
        record.delivery = done.clone();
        r.put(&record).unwrap();
        assert!(r.pending().unwrap().is_empty());
        assert_eq!(r.get("n1").unwrap().unwrap().delivery, done);
    }

    #[test]
    fn history_is_per_user_newest_first_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let r = Records::open_dir(dir.path()).unwrap();
            r.claim(&record("a", "alice", 10)).unwrap();
            r.claim(&record("b", "alice", 30)).unwrap();
            r.claim(&record("c", "bob", 20)).unwrap();
            r.claim(&record("d", "alice", 20)).unwrap();
        }
        let r = Records::open_dir(dir.path()).unwrap();
        let nonces: Vec<String> = r
            .for_user("alice", 10)
            .unwrap()
            .into_iter()
            .map(|x| x.nonce)
            .collect();
        assert_eq!(nonces, ["b", "d", "a"]);
        assert_eq!(r.for_user("bob", 10).unwrap().len(), 1);
        assert!(r.for_user("ali", 10).unwrap().is_empty());
    }
}
