//! The flow's side of the transparency log (PROTOCOL.md §15): where a
//! user's decisions are in it, and the passkey changes it must name before
//! they are made.

use super::{owned, Cs, CsError, Internal};
use crate::transparency::{Inclusion, LogError, TransparencyLog};
use cheq_core::tlog::CredentialChange;
use cheq_store::cs::{DecisionRecord, Identity};
use serde_json::{Map, Value};
use std::sync::Arc;

/// A decision's place in the log as the history shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logged {
    pub index: u64,
    /// The size of the tree of the latest checkpoint (which covers it).
    pub tree_size: u64,
}

fn internal(e: LogError) -> CsError {
    match e {
        LogError::Store(e) => CsError::from(e),
        e => CsError::Internal(Internal::Log(Arc::new(e))),
    }
}

impl Cs {
    /// The transparency log (§15), when it is on.
    pub fn transparency(&self) -> Option<&Arc<TransparencyLog>> {
        self.log.as_ref()
    }

    /// The user's decisions, newest first, each with its place in the log
    /// once it is sequenced.
    pub fn history_logged(
        &self,
        who: &Identity,
    ) -> Result<Vec<(DecisionRecord, Option<Logged>)>, CsError> {
        let records = self.history(who)?;
        let Some(log) = &self.log else {
            return Ok(records.into_iter().map(|r| (r, None)).collect());
        };
        let size = log.checkpoint().map_err(internal)?.map_or(0, |h| h.size);
        records
            .into_iter()
            .map(|r| {
                let logged = match &r.log_digest {
                    Some(d) => log
                        .index_of_decision(d)
                        .map_err(internal)?
                        .map(|index| Logged {
                            index,
                            tree_size: size.max(index + 1),
                        }),
                    None => None,
                };
                Ok((r, logged))
            })
            .collect()
    }

    /// The inclusion proof of one of the user's decisions, by record id:
    /// `None` while it waits to be sequenced, or where it has no entry.
    pub fn inclusion(&self, record_id: &str, who: &Identity) -> Result<Option<Inclusion>, CsError> {
        let record = self
            .store
            .records
            .by_id_for_user(&who.sub, record_id)?
            .ok_or(CsError::NotFound)?;
        let record = owned(record, who)?;
        match (&self.log, &record.log_digest) {
            (Some(log), Some(d)) => log.inclusion(d).map_err(internal),
            _ => Ok(None),
        }
    }

    /// Names a passkey's addition or removal in the log, before it is made.
    pub fn log_credential(
        &self,
        sub: &str,
        key: &Map<String, Value>,
        change: CredentialChange,
    ) -> Result<(), CsError> {
        match &self.log {
            Some(log) => log.credential(sub, key, change).map_err(internal),
            None => Ok(()),
        }
    }
}
