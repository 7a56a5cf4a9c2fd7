//! The reference resource server's state ([`crate::rs`]) and its
//! nonces ([`crate::NonceStore`]) in PostgreSQL: the same contract as
//! `sled_rs` and `sled_store`, kept across every RS instance that shares the
//! database, so that a decision runs its operation once whichever instance
//! it reaches (ISSUE 9; PROTOCOL.md §6, §7).
//!
//! | table | key | what |
//! |---|---|---|
//! | `rs_nonces` | nonce | digest of the decision document, expiry, caller data |
//! | `rs_cheqs` | confirmation id (and unique result id) | [`CheqRecord`] (in `body`), a tag of its state for compare-and-set (in `state`), its document packed apart while it has one (in `packed`, [`crate::packed`]; in `body` in rows written before) |
//! | `rs_executions` | idempotency key | the operation's result |
//! | `rs_assertions` | [`assertion_key`] of a client assertion (§16.4) | when it expires |
//! | `rs_settings` | CHEQ `subject` | the user's CS, rules (`json`, the text as given) and generation (§17; [`settings`]) |
//! | `rs_hosts` | issuer of a CS a user chose | when it was first chosen (`added`, a sequence) |

use super::nonce_batch::Gatherer;
use super::{backend, client, corrupt, db_error, decode, encode, Migration, Pg, Source};
use crate::rs::*;
use crate::Durability;
use crate::{
    packed, validate, validate_nonce, NonceEntry, NonceStore, Readiness, RecordOutcome, StoreError,
};
use serde_json::Value;
use std::sync::Arc;

mod settings;

/// The RS schema, step by step (never edit a step once released: add one).
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "resource server tables",
        sql: "
CREATE TABLE rs_nonces (
    nonce text PRIMARY KEY,
    digest bytea NOT NULL,
    expires_at bigint NOT NULL,
    data bytea NOT NULL);
CREATE INDEX rs_nonces_expires ON rs_nonces (expires_at);
CREATE TABLE rs_cheqs (
    id text PRIMARY KEY,
    result_id text NOT NULL UNIQUE,
    expires bigint NOT NULL,
    state text NOT NULL,
    body text NOT NULL);
CREATE INDEX rs_cheqs_expires ON rs_cheqs (expires);
CREATE TABLE rs_executions (
    key text PRIMARY KEY,
    result text NOT NULL);
",
    },
    // A served CHEQ's document packed, apart from the record's JSON (issue
    // 13): about a third of its text, in the row while the CHEQ is served,
    // and gone once it is decided. Stored as it is (`EXTERNAL`: never
    // compressed again).
    Migration {
        version: 2,
        name: "served documents packed",
        sql: "
ALTER TABLE rs_cheqs ADD COLUMN packed bytea;
ALTER TABLE rs_cheqs ALTER COLUMN packed SET STORAGE EXTERNAL;
",
    },
    // The client assertions a CS authenticated with (§16.4), each taken
    // once across every instance until it expires.
    Migration {
        version: 3,
        name: "client assertions taken",
        sql: "
CREATE TABLE rs_assertions (
    key bytea PRIMARY KEY,
    expires_at bigint NOT NULL);
CREATE INDEX rs_assertions_expires ON rs_assertions (expires_at);
",
    },
    // Each user's CS and rules (§17), and every CS a user ever chose, in
    // the order first chosen.
    Migration {
        version: 4,
        name: "each user's confirmation server and rules",
        sql: "
CREATE TABLE rs_settings (
    subject text PRIMARY KEY,
    cs text,
    rules json NOT NULL,
    generation bigint NOT NULL);
CREATE TABLE rs_hosts (
    issuer text PRIMARY KEY,
    added bigserial NOT NULL);
",
    },
];

/// How many pending records the RS keeps in memory on PostgreSQL
/// ([`RsStore::recent_records`]): a bounded few megabytes, for two
/// statements fewer per confirmation (the fetch's and the decision's reads
/// of a record this process just minted; BENCHMARKS.md).
pub const RECENT_RECORDS: usize = 4096;

/// Every RS store on `pg`, after applying the RS schema.
pub fn open(pg: &Pg) -> Result<RsStore, StoreError> {
    pg.migrate("rs", MIGRATIONS)?;
    Ok(RsStore {
        nonces: Arc::new(PgNonces::new(pg)),
        records: Arc::new(PgCheqs(pg.clone())),
        executions: Arc::new(PgExecutions(pg.clone())),
        assertions: Arc::new(PgAssertions(pg.clone())),
        settings: Arc::new(settings::PgSettings(pg.clone())),
        readiness: Arc::new(super::SchemaReadiness::new(pg, "rs", MIGRATIONS))
            as Arc<dyn Readiness>,
        flusher: None,
        recent_records: RECENT_RECORDS,
    })
}

/// The nonce store alone on `pg` (after applying the RS schema).
pub fn nonces(pg: &Pg) -> Result<Arc<dyn NonceStore>, StoreError> {
    pg.migrate("rs", MIGRATIONS)?;
    Ok(Arc::new(PgNonces::new(pg)))
}

/// Records several nonces in one statement and one commit (what the
/// gathering of concurrent records does for each batch:
/// [`super::nonce_batch`]), and answers for each in order, as
/// [`NonceStore::record`] would have: a nonce given twice is recorded for its
/// first item and found by the later one. The outer error is a failed
/// statement (nothing is known of any item).
pub fn record_nonces(
    pg: &Pg,
    items: &[(&str, &NonceEntry)],
) -> Result<Vec<Result<RecordOutcome, StoreError>>, StoreError> {
    let refused: Vec<Option<StoreError>> = items
        .iter()
        .map(|(nonce, entry)| validate(nonce, entry).err())
        .collect();
    let valid: Vec<(String, NonceEntry)> = items
        .iter()
        .zip(&refused)
        .filter(|(_, r)| r.is_none())
        .map(|((nonce, entry), _)| ((*nonce).to_owned(), (*entry).clone()))
        .collect();
    let mut answers = pg
        .call("record nonces", move |pool| async move {
            let items: Vec<(&str, &NonceEntry)> =
                valid.iter().map(|(n, e)| (n.as_str(), e)).collect();
            super::nonce_batch::record_many(&pool, &items).await
        })?
        .into_iter();
    Ok(refused
        .into_iter()
        .map(|r| match r {
            Some(e) => Err(e),
            None => answers
                .next()
                .unwrap_or_else(|| Err(backend("record nonces", "an answer is missing"))),
        })
        .collect())
}

// ---- client assertions taken ----

struct PgAssertions(Pg);

impl UsedAssertions for PgAssertions {
    fn first_use(&self, issuer: &str, jti: &str, expires_at: i64) -> Result<bool, StoreError> {
        let key = assertion_key(issuer, jti).to_vec();
        self.0.call("record assertion", move |pool| async move {
            let err = db_error("record assertion");
            let c = client(&pool, "record assertion").await?;
            let s = c
                .prepare_cached(
                    "INSERT INTO rs_assertions (key, expires_at) VALUES ($1, $2)
                     ON CONFLICT (key) DO NOTHING",
                )
                .await
                .map_err(&err)?;
            Ok(c.execute(&s, &[&key, &expires_at]).await.map_err(&err)? == 1)
        })
    }

    fn collect_expired(&self, now: i64) -> Result<usize, StoreError> {
        self.0.delete_where(
            "collect assertions",
            "DELETE FROM rs_assertions WHERE expires_at < $1",
            now,
        )
    }
}

// ---- nonces ----

struct PgNonces {
    pg: Pg,
    /// Concurrent records share statements ([`super::nonce_batch`]).
    gatherer: Gatherer,
}

impl PgNonces {
    fn new(pg: &Pg) -> Self {
        PgNonces {
            pg: pg.clone(),
            gatherer: pg.gatherer(),
        }
    }
}

pub(super) fn entry_of(row: &tokio_postgres::Row, nonce: &str) -> Result<NonceEntry, StoreError> {
    let digest: &[u8] = row.get("digest");
    let digest: [u8; 32] = digest
        .try_into()
        .map_err(|_| super::corrupt(nonce, "the digest is not 32 bytes"))?;
    Ok(NonceEntry {
        digest,
        expires_at: row.get("expires_at"),
        data: row.get("data"),
    })
}

impl NonceStore for PgNonces {
    /// Every statement commits durably: `Deferred` writes durably too.
    fn record_with(
        &self,
        nonce: &str,
        entry: &NonceEntry,
        _: Durability,
    ) -> Result<RecordOutcome, StoreError> {
        validate(nonce, entry)?;
        self.gatherer
            .record(nonce.to_owned(), entry.clone(), |enqueue| {
                self.pg
                    .call("record nonce", move |_| async move { Ok(enqueue.await) })
                    .unwrap_or(false)
            })
    }

    fn get(&self, nonce: &str) -> Result<Option<NonceEntry>, StoreError> {
        validate_nonce(nonce)?;
        let nonce = nonce.to_owned();
        self.pg.call("get nonce", move |pool| async move {
            let c = client(&pool, "get nonce").await?;
            let s = c
                .prepare_cached("SELECT digest, expires_at, data FROM rs_nonces WHERE nonce = $1")
                .await
                .map_err(db_error("get nonce"))?;
            let row = c
                .query_opt(&s, &[&nonce])
                .await
                .map_err(db_error("get nonce"))?;
            row.map(|r| entry_of(&r, &nonce)).transpose()
        })
    }

    fn collect_expired(&self, now: i64) -> Result<usize, StoreError> {
        self.pg.delete_where(
            "collect nonces",
            "DELETE FROM rs_nonces WHERE expires_at < $1",
            now,
        )
    }

    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, NonceEntry)>, StoreError> {
        self.pg.page(
            "list nonces",
            "SELECT nonce, digest, expires_at, data FROM rs_nonces",
            "nonce",
            after,
            limit,
            |row| {
                let nonce: String = row.get("nonce");
                let entry = entry_of(row, &nonce)?;
                Ok((nonce, entry))
            },
        )
    }
}

// ---- CHEQ records ----

struct PgCheqs(Pg);

/// How often [`CheqRecords::advance`] retries a lost compare-and-set.
const CAS_ATTEMPTS: usize = 64;

impl CheqRecords for PgCheqs {
    fn create(&self, record: &CheqRecord) -> Result<bool, StoreError> {
        let (id, result_id, expires) =
            (record.id.clone(), record.result_id.clone(), record.expires);
        let state = state_tag(&record.state)?;
        let (body, packed) = body_of(record)?;
        self.0.call("create", move |pool| async move {
            let c = client(&pool, "create").await?;
            let s = c
                .prepare_cached(
                    "INSERT INTO rs_cheqs (id, result_id, expires, state, body, packed)
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                )
                .await
                .map_err(db_error("create"))?;
            let n = c
                .execute(&s, &[&id, &result_id, &expires, &state, &body, &packed])
                .await
                .map_err(db_error("create"))?;
            Ok(n == 1)
        })
    }

    fn get(&self, id: &str) -> Result<Option<CheqRecord>, StoreError> {
        self.one("get", "SELECT body, packed FROM rs_cheqs WHERE id = $1", id)
    }

    fn by_result(&self, result_id: &str) -> Result<Option<CheqRecord>, StoreError> {
        self.one(
            "by_result",
            "SELECT body, packed FROM rs_cheqs WHERE result_id = $1",
            result_id,
        )
    }

    fn advance(&self, step: Step<'_>, durability: Durability) -> Result<Transition, StoreError> {
        let id = step.id.to_owned();
        let (from, to) = (step.from.clone(), step.to.clone());
        // Read, then write only if the state is still the one read (a
        // compare-and-set on the stored state's tag, [`state_tag`]: a row
        // written before holds the state's JSON there, compared the same
        // way): two round trips, no lock held in between.
        let advance = move |pool: Source| async move {
            let err = db_error("advance");
            let c = client(&pool, "advance").await?;
            let read = c
                .prepare_cached("SELECT state, body, packed FROM rs_cheqs WHERE id = $1")
                .await
                .map_err(&err)?;
            // The packed document stays as it is while the record keeps it
            // (not packed again), and goes with it.
            let write = c
                .prepare_cached(
                    "UPDATE rs_cheqs SET state = $3, body = $4,
                        packed = CASE WHEN $5 THEN packed END
                     WHERE id = $1 AND state = $2",
                )
                .await
                .map_err(&err)?;
            for _ in 0..CAS_ATTEMPTS {
                let Some(row) = c.query_opt(&read, &[&id]).await.map_err(&err)? else {
                    return Ok(Transition::Missing);
                };
                let old_state: &str = row.get("state");
                let mut record = cheq_record_of(&id, &row)?;
                if record.state != from {
                    return Ok(Transition::Other(Box::new(record)));
                }
                record.enter(to.clone());
                let state = state_tag(&record.state)?;
                let apart = row.get::<_, Option<&[u8]>>("packed").is_some();
                let keep = apart && !record.document.is_empty();
                // A row written before packing keeps its document in the
                // body until it is done.
                let body = if apart {
                    encode(&record.without_document())?
                } else {
                    encode(&record)?
                };
                let n = c
                    .execute(&write, &[&id, &old_state, &state, &body, &keep])
                    .await
                    .map_err(&err)?;
                if n == 1 {
                    return Ok(Transition::Moved);
                }
            }
            Err(backend("advance", "too many concurrent writers"))
        };
        self.0.call_with("advance", durability, advance)
    }

    fn advance_record(
        &self,
        record: &CheqRecord,
        to: &CheqState,
        durability: Durability,
    ) -> Result<Transition, StoreError> {
        let mut next = record.clone();
        next.enter(to.clone());
        // Only a move that drops the document (every move out of `Pending`)
        // is written blind: one that keeps it would have to know where the
        // stored row keeps it.
        if !next.document.is_empty() {
            return self.advance(Step::of(record, to), durability);
        }
        let id = record.id.clone();
        let from = state_tag(&record.state)?;
        let state = state_tag(&next.state)?;
        let body = encode(&next)?;
        // The tag of `from` matches only a row the tags were written for,
        // holding `record` as given (no other member changes while a state
        // does); a row of before, or one moved on, is left to `advance`.
        let write = move |pool: Source| async move {
            let err = db_error("advance");
            let c = client(&pool, "advance").await?;
            let write = c
                .prepare_cached(
                    "UPDATE rs_cheqs SET state = $3, body = $4, packed = NULL
                     WHERE id = $1 AND state = $2",
                )
                .await
                .map_err(&err)?;
            c.execute(&write, &[&id, &from, &state, &body])
                .await
                .map_err(&err)
        };
        let written = self.0.call_with("advance", durability, write)?;
        if written == 1 {
            return Ok(Transition::Moved);
        }
        self.advance(Step::of(record, to), durability)
    }

    fn collect_expired(&self, cutoff: i64) -> Result<usize, StoreError> {
        self.0.delete_where(
            "collect_expired",
            "DELETE FROM rs_cheqs WHERE expires < $1",
            cutoff,
        )
    }

    fn list_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<CheqRecord>, StoreError> {
        self.0.page(
            "list records",
            "SELECT id, body, packed FROM rs_cheqs",
            "id",
            after,
            limit,
            |row| cheq_record_of(row.get("id"), row),
        )
    }
}

/// What the `state` column holds, for the compare-and-set of
/// [`CheqRecords::advance`]: the base64url SHA-256 of the state's JSON, which
/// changes whenever the state does (43 bytes, where the JSON of a done
/// state repeated the operation's result, kept in the body already).
fn state_tag(state: &CheqState) -> Result<String, StoreError> {
    Ok(cheq_core::sign::b64::sha256(encode(state)?))
}

/// `record` as stored: the body (JSON without the document) and the
/// document packed (none once decided).
fn body_of(record: &CheqRecord) -> Result<(String, Option<Vec<u8>>), StoreError> {
    if record.document.is_empty() {
        return Ok((encode(record)?, None));
    }
    Ok((
        encode(&record.without_document())?,
        Some(packed::pack(&record.document)),
    ))
}

/// The record in a row with `body` and `packed`, under `key`.
fn cheq_record_of(key: &str, row: &tokio_postgres::Row) -> Result<CheqRecord, StoreError> {
    let mut record: CheqRecord = decode(key, row.get::<_, &str>("body"))?;
    if let Some(bytes) = row.get::<_, Option<&[u8]>>("packed") {
        record
            .attach_packed(bytes)
            .map_err(|reason| corrupt(key, reason))?;
    }
    Ok(record)
}

impl PgCheqs {
    /// The one record `sql` finds with `key`.
    fn one(
        &self,
        op: &'static str,
        sql: &'static str,
        key: &str,
    ) -> Result<Option<CheqRecord>, StoreError> {
        let key = key.to_owned();
        self.0.call(op, move |pool| async move {
            let c = client(&pool, op).await?;
            let s = c.prepare_cached(sql).await.map_err(db_error(op))?;
            let row = c.query_opt(&s, &[&key]).await.map_err(db_error(op))?;
            row.map(|row| cheq_record_of(&key, &row)).transpose()
        })
    }
}

// ---- the execution log ----

struct PgExecutions(Pg);

impl Executions for PgExecutions {
    fn get(&self, key: &str) -> Result<Option<Value>, StoreError> {
        self.0.json_by_key(
            "get execution",
            "SELECT result FROM rs_executions WHERE key = $1",
            key,
        )
    }

    /// Every statement commits durably: `Deferred` writes durably too.
    fn record_with(
        &self,
        key: &str,
        result: &Value,
        _: Durability,
    ) -> Result<Execution, StoreError> {
        let key = key.to_owned();
        let body = encode(result)?;
        self.0.call("record execution", move |pool| async move {
            let err = db_error("record execution");
            let c = client(&pool, "record execution").await?;
            let s = c
                .prepare_cached(
                    "INSERT INTO rs_executions (key, result) VALUES ($1, $2)
                     ON CONFLICT (key) DO NOTHING",
                )
                .await
                .map_err(&err)?;
            if c.execute(&s, &[&key, &body]).await.map_err(&err)? == 1 {
                return Ok(Execution::Fresh);
            }
            // The earlier writer's row is committed (durably) once visible.
            let s = c
                .prepare_cached("SELECT result FROM rs_executions WHERE key = $1")
                .await
                .map_err(&err)?;
            let row = c.query_one(&s, &[&key]).await.map_err(&err)?;
            Ok(Execution::Existing(decode(&key, row.get::<_, &str>(0))?))
        })
    }

    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Value)>, StoreError> {
        self.0.page(
            "list executions",
            "SELECT key, result FROM rs_executions",
            "key",
            after,
            limit,
            |row| {
                let key: String = row.get("key");
                let result = decode(&key, row.get::<_, &str>("result"))?;
                Ok((key, result))
            },
        )
    }
}
