//! The CS's decision records and their delivery outbox in PostgreSQL
//! (`cs_records`): claims, updates, leases of due deliveries, history.

use crate::cs::*;
use crate::pg::{
    backend, client, corrupt, db_error, decode, encode, pooled, Pg, Source, CALL_TIMEOUT,
};
use crate::Durability;
use crate::{packed, StoreError};

// ---- decision records ----

pub(super) struct PgRecords(pub(super) Pg);

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
/// them (and `packed` the document), so that each is stored once.
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
        let entry = record.log_entry();
        self.0.call("claim", move |pool| async move {
            let err = db_error("claim");
            let c = client(&pool, "claim").await?;
            // With a log entry (§15), the entry is queued by the same
            // statement, only when the record is inserted: one commit.
            let insert = c
                .prepare_cached(if entry.is_some() {
                    "WITH claimed AS (
                       INSERT INTO cs_records (origin, nonce, id, user_name, resource_uri,
                           decided_at, pending, next_try, sealed, body, packed)
                       SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint,
                              $7::boolean, $8::bigint, $9::boolean, $10::text, $11::bytea
                       WHERE NOT EXISTS (SELECT 1 FROM cs_collected WHERE id = $3)
                       ON CONFLICT DO NOTHING
                       RETURNING 1)
                     INSERT INTO tlog_queue (entry) SELECT $12::bytea FROM claimed"
                } else {
                    "INSERT INTO cs_records (origin, nonce, id, user_name, resource_uri,
                        decided_at, pending, next_try, sealed, body, packed)
                     SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint,
                            $7::boolean, $8::bigint, $9::boolean, $10::text, $11::bytea
                     WHERE NOT EXISTS (SELECT 1 FROM cs_collected WHERE id = $3)
                     ON CONFLICT DO NOTHING"
                })
                .await
                .map_err(&err)?;
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
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
            ];
            if let Some(e) = &entry {
                params.push(e);
            }
            // Committed with synchronous_commit on: durable when it returns.
            let n = c.execute(&insert, &params).await.map_err(&err)?;
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

    fn update(&self, record: &DecisionRecord, durability: Durability) -> Result<(), StoreError> {
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
        self.0.call_with("update", durability, update)
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
                let Some(record) = leased(record_of(row), None, until) else {
                    continue;
                };
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
