//! The confirmation server's state ([`crate::cs`]) in PostgreSQL:
//! the same contract as `sled_cs`, kept across every instance that shares
//! the database (ISSUE 9; PROTOCOL.md §2, §6, §8).
//!
//! | table | key | what |
//! |---|---|---|
//! | `cs_entries` | confirmation id | [`ConfirmationEntry`] |
//! | `cs_records` | id: SHA-256 of (RS origin, nonce) ([`RecordKey::id`]) | [`DecisionRecord`] without its document and the members its columns hold (in `body`), the document packed (in `packed`, [`crate::packed`], written only when it changes; rows written before hold it as text in `document`, or in `body`), with its id, user, resource URI and delivery columns |
//! | `cs_accounts` | user name | [`Account`], with case-folded name and e-mail |
//! | `cs_sessions` | SHA-256 of the cookie | [`Session`] |
//! | `cs_limits` | limiter key | [`LimitState`] |
//! | `cs_registrations`, `cs_registration_tokens`, `cs_registration_generation` | RS origin; token digest | registered RSes (§16.3), see [`registrations`] |
//! | `tlog_*` | the transparency log's queue, entries, hashes, head | see [`log`] |
//!
//! Values are JSON text, stored byte for byte.

mod log;
mod people;
mod records;
mod registrations;
mod schema;

pub use schema::MIGRATIONS;

use crate::cs::*;
use crate::pg::{decode, encode, Pg};
use crate::StoreError;
use people::{PgAccounts, PgLimits, PgSessions};
use records::PgRecords;
use std::sync::Arc;

/// Every CS store on `pg`, after applying the CS schema.
pub fn open(pg: &Pg) -> Result<CsStore, StoreError> {
    pg.migrate("cs", MIGRATIONS)?;
    Ok(open_migrated(pg))
}

/// Every CS store on `pg`, whose schema is applied.
pub fn open_migrated(pg: &Pg) -> CsStore {
    CsStore {
        entries: Arc::new(PgEntries(pg.clone())),
        records: Arc::new(PgRecords(pg.clone())),
        accounts: Arc::new(PgAccounts(pg.clone())),
        sessions: Arc::new(PgSessions(pg.clone())),
        limits: Arc::new(PgLimits(pg.clone())),
        log: Arc::new(log::PgLog(pg.clone())),
        registrations: Arc::new(registrations::PgRegistrations(pg.clone())),
        readiness: Arc::new(super::SchemaReadiness::new(pg, "cs", MIGRATIONS)),
        flusher: None,
    }
}

// ---- entries ----

struct PgEntries(Pg);

impl ConfirmationEntries for PgEntries {
    fn start(&self, id: &str, entry: &ConfirmationEntry) -> Result<(), StoreError> {
        self.0.put_json(
            "start",
            "INSERT INTO cs_entries (id, created, body) VALUES ($1, $2, $3)
             ON CONFLICT (id) DO NOTHING",
            false,
            id.to_owned(),
            entry.created,
            encode(entry)?,
        )
    }

    fn get(&self, id: &str) -> Result<Option<ConfirmationEntry>, StoreError> {
        self.0
            .json_by_key("get", "SELECT body FROM cs_entries WHERE id = $1", id)
    }

    fn put(&self, id: &str, entry: &ConfirmationEntry) -> Result<(), StoreError> {
        // Not durable: the document can be fetched again.
        self.0.put_json(
            "put",
            "INSERT INTO cs_entries (id, created, body) VALUES ($1, $2, $3)
             ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body",
            true,
            id.to_owned(),
            entry.created,
            encode(entry)?,
        )
    }

    fn collect_older_than(&self, cutoff: i64) -> Result<usize, StoreError> {
        self.0.delete_where(
            "collect entries",
            "DELETE FROM cs_entries WHERE created < $1",
            cutoff,
        )
    }

    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, ConfirmationEntry)>, StoreError> {
        self.0.page(
            "list entries",
            "SELECT id, body FROM cs_entries",
            "id",
            after,
            limit,
            |row| {
                let id: String = row.get("id");
                let entry = decode(&id, row.get::<_, &str>("body"))?;
                Ok((id, entry))
            },
        )
    }
}
