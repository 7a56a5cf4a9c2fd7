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
//!
//! Values are JSON text, stored byte for byte.

use super::{
    backend, client, corrupt, db_error, decode, encode, pooled, Migration, Pg, Source, CALL_TIMEOUT,
};
use crate::cs::*;
use crate::{packed, StoreError};
use std::sync::Arc;

/// The CS schema, step by step (never edit a step once released: add one).
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "confirmation server tables",
        sql: "
CREATE TABLE cs_entries (
    id text PRIMARY KEY,
    created bigint NOT NULL,
    body text NOT NULL);
CREATE INDEX cs_entries_created ON cs_entries (created);
CREATE TABLE cs_records (
    origin text NOT NULL,
    nonce text NOT NULL,
    id text NOT NULL UNIQUE,
    user_name text NOT NULL,
    resource_uri text NOT NULL,
    decided_at bigint NOT NULL,
    pending boolean NOT NULL,
    next_try bigint,
    sealed boolean NOT NULL,
    body text NOT NULL,
    PRIMARY KEY (origin, nonce));
CREATE INDEX cs_records_resource ON cs_records (resource_uri, decided_at DESC);
CREATE INDEX cs_records_user ON cs_records (user_name, decided_at DESC, id);
CREATE INDEX cs_records_due ON cs_records (next_try) WHERE pending;
CREATE INDEX cs_records_sealed ON cs_records (decided_at) WHERE sealed;
CREATE TABLE cs_accounts (
    username text PRIMARY KEY,
    username_fold text NOT NULL,
    email_fold text,
    body text NOT NULL);
CREATE UNIQUE INDEX cs_accounts_email ON cs_accounts (email_fold);
CREATE INDEX cs_accounts_username_fold ON cs_accounts (username_fold);
CREATE TABLE cs_sessions (
    key bytea PRIMARY KEY,
    expires bigint NOT NULL,
    body text NOT NULL);
CREATE INDEX cs_sessions_expires ON cs_sessions (expires);
CREATE TABLE cs_limits (
    key bytea PRIMARY KEY,
    last_failure bigint NOT NULL,
    locked_until bigint NOT NULL,
    body text NOT NULL);
",
    },
    // A decision's document in its own column (issue 13): a lease or the end
    // of a delivery rewrites `body`, and the document, stored out of line by
    // TOAST, is then kept as it is rather than written again. NULL: the
    // document is in `body` (rows written before).
    Migration {
        version: 2,
        name: "decision documents apart from the record",
        sql: "ALTER TABLE cs_records ADD COLUMN document text;",
    },
    // One unique key for a record, not two (issue 13): its id is the SHA-256
    // of (origin, nonce), unique already, so the primary key on (origin,
    // nonce) was a second index over the same key, written at every insert
    // and every update. Every statement now finds a record by its id (and
    // checks the origin and nonce of the row it found).
    Migration {
        version: 3,
        name: "decision records keyed by their id alone",
        sql: "
ALTER TABLE cs_records DROP CONSTRAINT cs_records_pkey;
ALTER TABLE cs_records ADD CONSTRAINT cs_records_pkey PRIMARY KEY (id);
ALTER TABLE cs_records DROP CONSTRAINT cs_records_id_key;
",
    },
    // Documents packed (issue 13): about 700 bytes where PostgreSQL's own
    // compression left 1,535 of the demo's 2,075, small enough to stay in
    // the row (no TOAST chunk, no entry in its index). Stored as it is
    // (`EXTERNAL`: never compressed again; out of line only in a row over
    // PostgreSQL's 2 KB threshold). The text column stays for rows written
    // before, and is emptied when such a row is next written.
    Migration {
        version: 4,
        name: "decision documents packed",
        sql: "
ALTER TABLE cs_records ADD COLUMN packed bytea;
ALTER TABLE cs_records ALTER COLUMN packed SET STORAGE EXTERNAL;
",
    },
    // Old history collected (`history_days`): records are written in the
    // order of their decision time, so a block-range index finds the old
    // ones at almost no cost to each insert; the ids of those collected stay,
    // so that a claim of one is refused (§6).
    Migration {
        version: 5,
        name: "old history collected",
        sql: "
CREATE INDEX cs_records_decided ON cs_records USING brin (decided_at);
CREATE TABLE cs_collected (
    id text PRIMARY KEY,
    decided_at bigint NOT NULL);
",
    },
];

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
        readiness: Arc::new(super::SchemaReadiness::new(pg, "cs", MIGRATIONS)),
        flusher: None,
    }
}

// ---- entries ----

struct PgEntries(Pg);

impl ConfirmationEntries for PgEntries {
    fn start(&self, id: &str, entry: &ConfirmationEntry) -> Result<(), StoreError> {
        let (id, created, body) = (id.to_owned(), entry.created, encode(entry)?);
        self.0.call("start", move |pool| async move {
            let c = client(&pool, "start").await?;
            let s = c
                .prepare_cached(
                    "INSERT INTO cs_entries (id, created, body) VALUES ($1, $2, $3)
                     ON CONFLICT (id) DO NOTHING",
                )
                .await
                .map_err(db_error("start"))?;
            c.execute(&s, &[&id, &created, &body])
                .await
                .map_err(db_error("start"))?;
            Ok(())
        })
    }

    fn get(&self, id: &str) -> Result<Option<ConfirmationEntry>, StoreError> {
        self.0
            .json_by_key("get", "SELECT body FROM cs_entries WHERE id = $1", id)
    }

    fn put(&self, id: &str, entry: &ConfirmationEntry) -> Result<(), StoreError> {
        let (id, created, body) = (id.to_owned(), entry.created, encode(entry)?);
        // Not durable: the document can be fetched again.
        self.0.call_lazy("put", move |pool| async move {
            let err = db_error("put");
            let c = client(&pool, "put").await?;
            let s = c
                .prepare_cached(
                    "INSERT INTO cs_entries (id, created, body) VALUES ($1, $2, $3)
                     ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body",
                )
                .await
                .map_err(&err)?;
            c.execute(&s, &[&id, &created, &body]).await.map_err(&err)?;
            Ok(())
        })
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

// ---- decision records ----

struct PgRecords(Pg);

/// The columns a record is found by, beside its JSON.
struct RecordRow {
    origin: String,
    nonce: String,
    id: String,
    user: String,
    resource_uri: String,
    decided_at: i64,
    pending: bool,
    next_try: Option<i64>,
    sealed: bool,
    /// The record without its document.
    body: String,
    /// The document, packed.
    packed: Vec<u8>,
}

impl RecordRow {
    fn of(record: &DecisionRecord) -> Result<Self, StoreError> {
        let next_try = match &record.delivery {
            Delivery::Pending { next_try, .. } => Some(*next_try),
            _ => None,
        };
        Ok(RecordRow {
            origin: record.resource_origin.clone(),
            nonce: record.nonce.clone(),
            id: record.key().id(),
            user: record.user.clone(),
            resource_uri: record.resource_uri.clone(),
            decided_at: record.decided_at,
            pending: record.delivery.is_pending(),
            next_try,
            sealed: record.sealed,
            body: compact_body(record)?,
            packed: packed::pack(&record.document),
        })
    }
}

/// Members of a record that `body` leaves out: the row's own columns hold
/// them (and `packed` the document), so that each is stored once (issue 13).
const IN_COLUMNS: [&str; 7] = [
    "resource_origin",
    "nonce",
    "user",
    "resource_uri",
    "decided_at",
    "sealed",
    "document",
];

/// `record` as `body` keeps it: JSON without [`IN_COLUMNS`].
fn compact_body(record: &DecisionRecord) -> Result<String, StoreError> {
    let mut value = serde_json::to_value(record).map_err(|e| backend("encode", e.to_string()))?;
    if let serde_json::Value::Object(members) = &mut value {
        for m in IN_COLUMNS {
            members.remove(m);
        }
    }
    Ok(value.to_string())
}

/// A record from a row that has `id`, the columns of [`IN_COLUMNS`],
/// `body`, `document` and `packed`. A body written before holds every
/// member: the columns, written from the same record, agree with it.
fn record_of(row: &tokio_postgres::Row) -> Result<DecisionRecord, StoreError> {
    use serde_json::Value;
    let id: &str = row.get("id");
    let mut body: Value = decode(id, row.get::<_, &str>("body"))?;
    let Value::Object(members) = &mut body else {
        return Err(corrupt(id, "the record's body is not an object"));
    };
    for (member, column) in [
        ("resource_origin", "origin"),
        ("nonce", "nonce"),
        ("user", "user_name"),
        ("resource_uri", "resource_uri"),
    ] {
        members.insert(member.into(), Value::String(row.get(column)));
    }
    members.insert(
        "decided_at".into(),
        Value::from(row.get::<_, i64>("decided_at")),
    );
    members.insert("sealed".into(), Value::Bool(row.get("sealed")));
    members
        .entry("document")
        .or_insert_with(|| Value::String(String::new()));
    let mut record: DecisionRecord =
        serde_json::from_value(body).map_err(|e| corrupt(id, format!("its body: {e}")))?;
    if let Some(bytes) = row.get::<_, Option<&[u8]>>("packed") {
        record.document =
            packed::unpack(bytes).map_err(|e| corrupt(id, format!("its document: {e}")))?;
    } else if let Some(document) = row.get::<_, Option<String>>("document") {
        record.document = document;
    }
    Ok(record)
}

/// Whether the row keeps its document apart from `body` (packed, or as text
/// in a row written before).
fn document_apart(row: &tokio_postgres::Row) -> bool {
    row.get::<_, Option<&[u8]>>("packed").is_some()
        || row.get::<_, Option<&str>>("document").is_some()
}

impl PgRecords {
    /// The one record `sql` finds with the text parameters `params`.
    fn one(
        &self,
        op: &'static str,
        sql: &'static str,
        params: Vec<String>,
    ) -> Result<Option<DecisionRecord>, StoreError> {
        self.0.call(op, move |pool| async move {
            let c = client(&pool, op).await?;
            let s = c.prepare_cached(sql).await.map_err(db_error(op))?;
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                .iter()
                .map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync))
                .collect();
            let row = c.query_opt(&s, &params).await.map_err(db_error(op))?;
            row.as_ref().map(record_of).transpose()
        })
    }
}

impl DecisionRecords for PgRecords {
    fn claim(&self, record: &DecisionRecord) -> Result<Claim, StoreError> {
        let r = RecordRow::of(record)?;
        self.0.call("claim", move |pool| async move {
            let err = db_error("claim");
            let c = client(&pool, "claim").await?;
            let insert = c
                .prepare_cached(
                    "INSERT INTO cs_records (origin, nonce, id, user_name, resource_uri,
                        decided_at, pending, next_try, sealed, body, packed)
                     SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint,
                            $7::boolean, $8::bigint, $9::boolean, $10::text, $11::bytea
                     WHERE NOT EXISTS (SELECT 1 FROM cs_collected WHERE id = $3)
                     ON CONFLICT DO NOTHING",
                )
                .await
                .map_err(&err)?;
            // Committed with synchronous_commit on: durable when it returns.
            let n = c
                .execute(
                    &insert,
                    &[
                        &r.origin,
                        &r.nonce,
                        &r.id,
                        &r.user,
                        &r.resource_uri,
                        &r.decided_at,
                        &r.pending,
                        &r.next_try,
                        &r.sealed,
                        &r.body,
                        &r.packed,
                    ],
                )
                .await
                .map_err(&err)?;
            if n == 1 {
                return Ok(Claim::Fresh);
            }
            let s = c
                .prepare_cached(
                    "SELECT id, origin, nonce, user_name, resource_uri, decided_at, sealed, body, document, packed,
                            origin = $2 AND nonce = $3 AS same_key
                     FROM cs_records WHERE id = $1",
                )
                .await
                .map_err(&err)?;
            match c
                .query_opt(&s, &[&r.id, &r.origin, &r.nonce])
                .await
                .map_err(&err)?
            {
                Some(row) if row.get::<_, bool>("same_key") => {
                    Ok(Claim::Existing(Box::new(record_of(&row)?)))
                }
                Some(_) => Err(corrupt(
                    &r.id,
                    "the record's id is taken by another key",
                )),
                None => {
                    let s = c
                        .prepare_cached("SELECT 1 FROM cs_collected WHERE id = $1")
                        .await
                        .map_err(&err)?;
                    match c.query_opt(&s, &[&r.id]).await.map_err(&err)? {
                        Some(_) => Ok(Claim::Collected),
                        None => Err(corrupt(&r.id, "the record vanished during its claim")),
                    }
                }
            }
        })
    }

    fn get(&self, key: &RecordKey) -> Result<Option<DecisionRecord>, StoreError> {
        self.one(
            "get",
            "SELECT id, origin, nonce, user_name, resource_uri, decided_at, sealed, body, document, packed FROM cs_records
             WHERE id = $1 AND origin = $2 AND nonce = $3",
            vec![key.id(), key.origin.clone(), key.nonce.clone()],
        )
    }

    fn by_resource(&self, resource_uri: &str) -> Result<Option<DecisionRecord>, StoreError> {
        self.one(
            "by_resource",
            "SELECT id, origin, nonce, user_name, resource_uri, decided_at, sealed, body, document, packed FROM cs_records WHERE resource_uri = $1
             ORDER BY decided_at DESC LIMIT 1",
            vec![resource_uri.to_owned()],
        )
    }

    fn by_id_for_user(&self, user: &str, id: &str) -> Result<Option<DecisionRecord>, StoreError> {
        self.one(
            "by_id_for_user",
            "SELECT id, origin, nonce, user_name, resource_uri, decided_at, sealed, body, document, packed FROM cs_records WHERE id = $1 AND user_name = $2",
            vec![id.to_owned(), user.to_owned()],
        )
    }

    fn update(&self, record: &DecisionRecord, durable: bool) -> Result<(), StoreError> {
        let r = RecordRow::of(record)?;
        let update = move |pool: Source| async move {
            let err = db_error("update");
            let c = client(&pool, "update").await?;
            let s = c
                .prepare_cached(
                    // The document is written only when it changed (a
                    // sealed one redacted, or a row written before packing):
                    // otherwise its stored value, out of line, is kept as it
                    // is. (Packing is deterministic.)
                    "UPDATE cs_records SET pending = $3, next_try = $4, sealed = $5, body = $6,
                        packed = CASE WHEN packed IS NOT DISTINCT FROM $7
                                      THEN packed ELSE $7 END,
                        document = NULL
                     WHERE id = $8 AND origin = $1 AND nonce = $2",
                )
                .await
                .map_err(&err)?;
            let n = c
                .execute(
                    &s,
                    &[
                        &r.origin,
                        &r.nonce,
                        &r.pending,
                        &r.next_try,
                        &r.sealed,
                        &r.body,
                        &r.packed,
                        &r.id,
                    ],
                )
                .await
                .map_err(&err)?;
            if n == 0 {
                return Err(backend("update", "no such record"));
            }
            Ok(())
        };
        if durable {
            self.0.call("update", update)
        } else {
            self.0.call_lazy("update", update)
        }
    }

    fn lease_due(
        &self,
        now: i64,
        lease_secs: i64,
        limit: usize,
    ) -> Result<Vec<DecisionRecord>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // A lease lost in a crash only makes the delivery due again.
        self.0.call_pooled("lease_due", CALL_TIMEOUT, true, move |pool| async move {
            let err = db_error("lease_due");
            let mut c = pooled(&pool, "lease_due").await?;
            let tx = c.transaction().await.map_err(&err)?;
            // Rows another instance is leasing right now are skipped, not
            // waited for: two instances never take the same delivery.
            let rows = tx
                .query(
                    "SELECT id, origin, nonce, user_name, resource_uri, decided_at, sealed, body, document, packed FROM cs_records
                     WHERE pending AND next_try <= $1
                     ORDER BY next_try LIMIT $2
                     FOR UPDATE SKIP LOCKED",
                    &[&now, &limit],
                )
                .await
                .map_err(&err)?;
            let until = now + lease_secs;
            let mut out = Vec::with_capacity(rows.len());
            for row in &rows {
                // An unreadable record must not stop every other delivery.
                let mut record = match record_of(row) {
                    Ok(r) => r,
                    Err(e) => {
                        log::error!("delivery outbox: skipping an unreadable record: {e}");
                        continue;
                    }
                };
                let Delivery::Pending { next_try, .. } = &mut record.delivery else {
                    continue;
                };
                *next_try = until;
                // The body only: the document's column is left as it is.
                let body = if document_apart(row) {
                    compact_body(&record)?
                } else {
                    encode(&record)?
                };
                let id: &str = row.get("id");
                tx.execute(
                    "UPDATE cs_records SET next_try = $2, body = $3 WHERE id = $1",
                    &[&id, &until, &body],
                )
                .await
                .map_err(&err)?;
                out.push(record);
            }
            tx.commit().await.map_err(&err)?;
            Ok(out)
        })
    }

    fn pending_summary(&self) -> Result<(usize, Option<i64>), StoreError> {
        self.0.call("pending", move |pool| async move {
            let c = client(&pool, "pending").await?;
            let row = c
                .query_one(
                    "SELECT count(*), min(decided_at) FROM cs_records WHERE pending",
                    &[],
                )
                .await
                .map_err(db_error("pending"))?;
            let n: i64 = row.get(0);
            Ok((usize::try_from(n).unwrap_or(0), row.get(1)))
        })
    }

    fn sealed(&self) -> Result<Vec<RecordKey>, StoreError> {
        self.0.call("sealed", move |pool| async move {
            let c = client(&pool, "sealed").await?;
            let rows = c
                .query("SELECT origin, nonce FROM cs_records WHERE sealed", &[])
                .await
                .map_err(db_error("sealed"))?;
            Ok(rows
                .iter()
                .map(|r| RecordKey::new(r.get(0), r.get(1)))
                .collect())
        })
    }

    fn for_user(&self, user: &str, limit: usize) -> Result<Vec<DecisionRecord>, StoreError> {
        let user = user.to_owned();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.0.call("for_user", move |pool| async move {
            let c = client(&pool, "for_user").await?;
            let s = c
                .prepare_cached(
                    "SELECT id, origin, nonce, user_name, resource_uri, decided_at, sealed, body, document, packed FROM cs_records WHERE user_name = $1
                     ORDER BY decided_at DESC, id LIMIT $2",
                )
                .await
                .map_err(db_error("for_user"))?;
            let rows = c
                .query(&s, &[&user, &limit])
                .await
                .map_err(db_error("for_user"))?;
            rows.iter().map(record_of).collect()
        })
    }

    fn collect_decided_before(&self, cutoff: i64) -> Result<usize, StoreError> {
        // In batches, each its own statement: a first collection after a
        // long history holds no lock and no transaction for long.
        let mut n = 0;
        loop {
            // The conditions again on the rows deleted: a row changed since
            // the inner look-up is judged as it is now. Each id stays in
            // `cs_collected`, in the same statement.
            let batch = self.0.delete_where(
                "collect decisions",
                "WITH gone AS (
                     DELETE FROM cs_records WHERE id IN (SELECT id FROM cs_records
                         WHERE decided_at < $1 AND NOT pending AND NOT sealed LIMIT 2000)
                       AND decided_at < $1 AND NOT pending AND NOT sealed
                     RETURNING id, decided_at)
                 INSERT INTO cs_collected (id, decided_at) SELECT id, decided_at FROM gone
                 ON CONFLICT (id) DO NOTHING",
                cutoff,
            )?;
            n += batch;
            if batch < 2000 {
                return Ok(n);
            }
        }
    }

    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, DecisionRecord)>, StoreError> {
        self.0.page(
            "list decisions",
            "SELECT id, origin, nonce, user_name, resource_uri, decided_at, sealed, body, document, packed
             FROM cs_records",
            "id",
            after,
            limit,
            |row| Ok((row.get("id"), record_of(row)?)),
        )
    }

    fn collected_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        self.0.page(
            "list collected",
            "SELECT id, decided_at FROM cs_collected",
            "id",
            after,
            limit,
            |row| Ok((row.get("id"), row.get("decided_at"))),
        )
    }

    fn restore_collected(&self, id: &str, decided_at: i64) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.0.call("restore collected", move |pool| async move {
            let c = client(&pool, "restore collected").await?;
            c.execute(
                "INSERT INTO cs_collected (id, decided_at) VALUES ($1, $2)
                 ON CONFLICT (id) DO NOTHING",
                &[&id, &decided_at],
            )
            .await
            .map_err(db_error("restore collected"))?;
            Ok(())
        })
    }
}

// ---- accounts ----

struct PgAccounts(Pg);

impl Accounts for PgAccounts {
    fn put(&self, account: &Account, replace: bool) -> Result<(), AccountPutError> {
        let username = account.username.clone();
        let name_fold = account.username.to_ascii_lowercase();
        let email = account.email.clone();
        let email_fold = account.email.as_ref().map(|e| e.to_ascii_lowercase());
        let body = encode(account)?;
        self.0
            .call_pooled("put account", CALL_TIMEOUT, false, move |pool| async move {
                let err = db_error("put account");
                let mut c = pooled(&pool, "put account").await?;
                let tx = c.transaction().await.map_err(&err)?;
                // One account writer at a time, on every instance: the
                // checks below then see every other account. Readers go on.
                tx.batch_execute("LOCK TABLE cs_accounts IN SHARE ROW EXCLUSIVE MODE")
                    .await
                    .map_err(&err)?;
                // No user name may be another account's e-mail…
                let clash = tx
                    .query_opt(
                        "SELECT 1 FROM cs_accounts WHERE username <> $1 AND email_fold = $2",
                        &[&username, &name_fold],
                    )
                    .await
                    .map_err(&err)?;
                if clash.is_some() {
                    return Ok(Err(AccountPutError::Ambiguous(username)));
                }
                // …and no e-mail another account's name or e-mail.
                if let (Some(email), Some(fold)) = (&email, &email_fold) {
                    let clash = tx
                        .query_opt(
                            "SELECT 1 FROM cs_accounts WHERE username <> $1
                             AND (username_fold = $2 OR email_fold = $2)",
                            &[&username, fold],
                        )
                        .await
                        .map_err(&err)?;
                    if clash.is_some() {
                        return Ok(Err(AccountPutError::Ambiguous(email.clone())));
                    }
                }
                let sql = if replace {
                    "INSERT INTO cs_accounts (username, username_fold, email_fold, body)
                     VALUES ($1, $2, $3, $4)
                     ON CONFLICT (username) DO UPDATE SET username_fold = EXCLUDED.username_fold,
                        email_fold = EXCLUDED.email_fold, body = EXCLUDED.body"
                } else {
                    "INSERT INTO cs_accounts (username, username_fold, email_fold, body)
                     VALUES ($1, $2, $3, $4) ON CONFLICT (username) DO NOTHING"
                };
                let n = tx
                    .execute(sql, &[&username, &name_fold, &email_fold, &body])
                    .await
                    .map_err(&err)?;
                if n == 0 {
                    return Ok(Err(AccountPutError::Exists(username)));
                }
                tx.commit().await.map_err(&err)?;
                Ok(Ok(()))
            })
            .map_err(AccountPutError::Store)?
    }

    fn get(&self, username: &str) -> Result<Option<Account>, StoreError> {
        self.0.json_by_key(
            "get account",
            "SELECT body FROM cs_accounts WHERE username = $1",
            username,
        )
    }

    fn list_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<Account>, StoreError> {
        self.0.page(
            "list accounts",
            "SELECT username, body FROM cs_accounts",
            "username",
            after,
            limit,
            |row| decode(row.get("username"), row.get::<_, &str>("body")),
        )
    }
}

// ---- sessions ----

struct PgSessions(Pg);

impl Sessions for PgSessions {
    fn put(&self, key: &[u8; 32], session: &Session) -> Result<(), StoreError> {
        let (key, expires, body) = (key.to_vec(), session.expires, encode(session)?);
        // Not durable: a session lost in a crash means signing in again.
        self.0.call_lazy("put session", move |pool| async move {
            let c = client(&pool, "put session").await?;
            let s = c
                .prepare_cached(
                    "INSERT INTO cs_sessions (key, expires, body) VALUES ($1, $2, $3)
                     ON CONFLICT (key) DO UPDATE SET expires = EXCLUDED.expires,
                        body = EXCLUDED.body",
                )
                .await
                .map_err(db_error("put session"))?;
            c.execute(&s, &[&key, &expires, &body])
                .await
                .map_err(db_error("put session"))?;
            Ok(())
        })
    }

    fn get(&self, key: &[u8; 32]) -> Result<Option<Session>, StoreError> {
        let key = key.to_vec();
        self.0.call("get session", move |pool| async move {
            let err = db_error("get session");
            let c = client(&pool, "get session").await?;
            let s = c
                .prepare_cached("SELECT body FROM cs_sessions WHERE key = $1")
                .await
                .map_err(&err)?;
            let Some(row) = c.query_opt(&s, &[&key]).await.map_err(&err)? else {
                return Ok(None);
            };
            match serde_json::from_str::<Session>(row.get(0)) {
                Ok(session) => Ok(Some(session)),
                Err(_) => {
                    // An unreadable session is no session.
                    c.execute("DELETE FROM cs_sessions WHERE key = $1", &[&key])
                        .await
                        .map_err(&err)?;
                    Ok(None)
                }
            }
        })
    }

    fn remove(&self, key: &[u8; 32]) -> Result<(), StoreError> {
        let key = key.to_vec();
        self.0.call("remove session", move |pool| async move {
            let c = client(&pool, "remove session").await?;
            c.execute("DELETE FROM cs_sessions WHERE key = $1", &[&key])
                .await
                .map_err(db_error("remove session"))?;
            Ok(())
        })
    }

    fn collect_expired(&self, now: i64) -> Result<usize, StoreError> {
        self.0.delete_where(
            "collect sessions",
            "DELETE FROM cs_sessions WHERE expires <= $1",
            now,
        )
    }
}

// ---- limiter state ----

struct PgLimits(Pg);

/// How often [`Limits::update`] retries a lost compare-and-set.
const CAS_ATTEMPTS: usize = 64;

impl PgLimits {
    fn read(&self, key: &str) -> Result<Option<String>, StoreError> {
        // Limiter keys join their parts with NUL: bytes, not text.
        self.0.text_by_key(
            "get limit",
            "SELECT body FROM cs_limits WHERE key = $1",
            key.as_bytes().to_vec(),
        )
    }

    /// Replaces `old` by `new` under `key` if `old` is still there.
    fn swap(
        &self,
        key: &str,
        old: Option<String>,
        new: Option<&LimitState>,
    ) -> Result<bool, StoreError> {
        let key = key.as_bytes().to_vec();
        let new = new
            .map(|s| Ok::<_, StoreError>((s.last_failure, s.locked_until, encode(s)?)))
            .transpose()?;
        // Not durable: a crash may forgive a few failures; every instance
        // sees the new state at once.
        self.0.call_lazy("update limit", move |pool| async move {
            let err = db_error("update limit");
            let c = client(&pool, "update limit").await?;
            let n = match (&old, &new) {
                (None, None) => return Ok(true),
                (None, Some((last, until, body))) => c
                    .execute(
                        "INSERT INTO cs_limits (key, last_failure, locked_until, body)
                         VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO NOTHING",
                        &[&key, last, until, body],
                    )
                    .await
                    .map_err(&err)?,
                (Some(old), Some((last, until, body))) => c
                    .execute(
                        "UPDATE cs_limits SET last_failure = $3, locked_until = $4, body = $5
                         WHERE key = $1 AND body = $2",
                        &[&key, old, last, until, body],
                    )
                    .await
                    .map_err(&err)?,
                (Some(old), None) => c
                    .execute(
                        "DELETE FROM cs_limits WHERE key = $1 AND body = $2",
                        &[&key, old],
                    )
                    .await
                    .map_err(&err)?,
            };
            Ok(n == 1)
        })
    }
}

impl Limits for PgLimits {
    fn get(&self, key: &str) -> Result<Option<LimitState>, StoreError> {
        self.read(key)?.map(|b| decode(key, &b)).transpose()
    }

    fn update(
        &self,
        key: &str,
        f: &mut dyn FnMut(Option<LimitState>) -> Option<LimitState>,
    ) -> Result<Option<LimitState>, StoreError> {
        for _ in 0..CAS_ATTEMPTS {
            let old = self.read(key)?;
            // An unreadable state counts as none (a limiter must not wedge).
            let state = old
                .as_deref()
                .and_then(|b| serde_json::from_str::<LimitState>(b).ok());
            let new = f(state);
            if self.swap(key, old, new.as_ref())? {
                return Ok(new);
            }
        }
        Err(backend("update limit", "too many concurrent writers"))
    }

    fn collect(&self, cutoff: i64) -> Result<usize, StoreError> {
        self.0.delete_where(
            "collect limits",
            "DELETE FROM cs_limits WHERE last_failure < $1 AND locked_until <= $1",
            cutoff,
        )
    }
}
