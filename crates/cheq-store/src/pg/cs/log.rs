//! The transparency log ([`crate::tlog`]) in PostgreSQL: one log for every
//! instance that shares the database.
//!
//! | table | key | what |
//! |---|---|---|
//! | `tlog_queue` | queue id (`bigserial`) | an entry to sequence |
//! | `tlog_entries` | index | the entry |
//! | `tlog_hashes` | stored-hash index | 32 bytes |
//! | `tlog_index` | leaf hash | its index |
//! | `tlog_head` | the one row | size, root, checkpoint, the bound verifier key |
//!
//! A step is one transaction that locks the head row first: a second
//! instance's step waits, finds the size moved, and writes nothing.
//! `tlog_index` keeps the index an entry was first given (a second
//! mapping of the same leaf is not inserted).

use crate::pg::{client, db_error, pooled, Pg, CALL_TIMEOUT};
use crate::tlog::{hash32, Integration, LogHead, LogStore, Restored};
use crate::StoreError;

pub(super) struct PgLog(pub(super) Pg);

fn idx(i: u64) -> i64 {
    // Sizes are bounded far below 2^63 (cheq_core::tlog::MAX_TREE_SIZE).
    i64::try_from(i).unwrap_or(i64::MAX)
}

/// Writes entries at `indexes`.
async fn insert_entries(
    tx: &tokio_postgres::Transaction<'_>,
    indexes: &[i64],
    entries: &[Vec<u8>],
) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        "INSERT INTO tlog_entries (idx, entry) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
        &[&indexes, &entries],
    )
    .await
    .map(|_| ())
}

/// Writes the index mappings of entries (an entry logged twice keeps its
/// first index) and stored hashes.
async fn insert_index_and_hashes(
    tx: &tokio_postgres::Transaction<'_>,
    leaves: &[[u8; 32]],
    indexes: &[i64],
    hashes: &[(u64, [u8; 32])],
) -> Result<(), tokio_postgres::Error> {
    let leaves: Vec<Vec<u8>> = leaves.iter().map(|l| l.to_vec()).collect();
    // Of one leaf twice in the same statement, the first row (the lower
    // index) is inserted and the second does nothing; WITH ORDINALITY keeps
    // the rows in the order given.
    tx.execute(
        "INSERT INTO tlog_index (leaf, idx)
         SELECT leaf, idx FROM unnest($1::bytea[], $2::bigint[]) WITH ORDINALITY AS t(leaf, idx, n)
         ORDER BY n
         ON CONFLICT (leaf) DO NOTHING",
        &[&leaves, &indexes],
    )
    .await?;
    let (hi, hv): (Vec<i64>, Vec<Vec<u8>>) =
        hashes.iter().map(|(i, h)| (idx(*i), h.to_vec())).unzip();
    tx.execute(
        "INSERT INTO tlog_hashes (idx, hash) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
        &[&hi, &hv],
    )
    .await
    .map(|_| ())
}

impl LogStore for PgLog {
    fn queue(&self, entry: &[u8]) -> Result<(), StoreError> {
        let entry = entry.to_vec();
        self.0.call("log queue", move |pool| async move {
            let c = client(&pool, "log queue").await?;
            let s = c
                .prepare_cached("INSERT INTO tlog_queue (entry) VALUES ($1)")
                .await
                .map_err(db_error("log queue"))?;
            c.execute(&s, &[&entry])
                .await
                .map_err(db_error("log queue"))?;
            Ok(())
        })
    }

    fn queued_after(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // Queue ids are positive (bigserial): -1 is before the first.
        let after = after.map_or(-1, idx);
        self.0.call("log queued", move |pool| async move {
            let c = client(&pool, "log queued").await?;
            let s = c
                .prepare_cached(
                    "SELECT id, entry FROM tlog_queue WHERE id > $1 ORDER BY id LIMIT $2",
                )
                .await
                .map_err(db_error("log queued"))?;
            let rows = c
                .query(&s, &[&after, &limit])
                .await
                .map_err(db_error("log queued"))?;
            Ok(rows
                .iter()
                .map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, Vec<u8>>(1)))
                .collect())
        })
    }

    fn head(&self) -> Result<Option<LogHead>, StoreError> {
        self.0.call("log head", move |pool| async move {
            let c = client(&pool, "log head").await?;
            let s = c
                .prepare_cached(
                    "SELECT size, root, checkpoint FROM tlog_head WHERE id = 1 AND size IS NOT NULL",
                )
                .await
                .map_err(db_error("log head"))?;
            let Some(row) = c.query_opt(&s, &[]).await.map_err(db_error("log head"))? else {
                return Ok(None);
            };
            Ok(Some(LogHead {
                size: row.get::<_, i64>(0) as u64,
                root: hash32("tlog_head", row.get::<_, &[u8]>(1))?,
                checkpoint: row.get::<_, Vec<u8>>(2),
            }))
        })
    }

    fn hashes(&self, indexes: &[u64]) -> Result<Vec<[u8; 32]>, StoreError> {
        let wanted: Vec<i64> = indexes.iter().map(|i| idx(*i)).collect();
        self.0.call("log hashes", move |pool| async move {
            let c = client(&pool, "log hashes").await?;
            let s = c
                .prepare_cached("SELECT idx, hash FROM tlog_hashes WHERE idx = ANY($1)")
                .await
                .map_err(db_error("log hashes"))?;
            let rows = c
                .query(&s, &[&wanted])
                .await
                .map_err(db_error("log hashes"))?;
            let mut by: std::collections::HashMap<i64, [u8; 32]> = Default::default();
            for r in &rows {
                by.insert(r.get(0), hash32("tlog_hashes", r.get::<_, &[u8]>(1))?);
            }
            wanted
                .iter()
                .map(|i| {
                    by.get(i).copied().ok_or_else(|| StoreError::Corrupt {
                        key: format!("tlog_hashes {i}"),
                        reason: "a stored hash of the log is missing".into(),
                    })
                })
                .collect()
        })
    }

    fn entries(&self, start: u64, count: u64) -> Result<Vec<Vec<u8>>, StoreError> {
        let (lo, hi) = (idx(start), idx(start.saturating_add(count)));
        self.0.call("log entries", move |pool| async move {
            let c = client(&pool, "log entries").await?;
            let s = c
                .prepare_cached(
                    "SELECT entry FROM tlog_entries WHERE idx >= $1 AND idx < $2 ORDER BY idx",
                )
                .await
                .map_err(db_error("log entries"))?;
            let rows = c
                .query(&s, &[&lo, &hi])
                .await
                .map_err(db_error("log entries"))?;
            if rows.len() as u64 != count {
                return Err(StoreError::Corrupt {
                    key: format!("tlog_entries {start}"),
                    reason: "an entry of the log is missing".into(),
                });
            }
            Ok(rows.iter().map(|r| r.get::<_, Vec<u8>>(0)).collect())
        })
    }

    fn integrate(&self, step: &Integration) -> Result<bool, StoreError> {
        let step = step.clone();
        self.0.call_pooled(
            "log integrate",
            CALL_TIMEOUT,
            false,
            move |pool| async move {
                let err = db_error("log integrate");
                let mut c = pooled(&pool, "log integrate").await?;
                let tx = c.transaction().await.map_err(&err)?;
                // The head row is locked for the step: sequencers on other
                // instances wait here, then find the size moved.
                let size: Option<i64> = tx
                    .query_opt("SELECT size FROM tlog_head WHERE id = 1 FOR UPDATE", &[])
                    .await
                    .map_err(&err)?
                    .and_then(|r| r.get(0));
                if size.unwrap_or(0) != idx(step.from) {
                    return Ok(false);
                }
                let n = step.entries.len();
                let indexes: Vec<i64> = (0..n as u64).map(|i| idx(step.from + i)).collect();
                insert_entries(&tx, &indexes, &step.entries)
                    .await
                    .map_err(&err)?;
                insert_index_and_hashes(&tx, &step.leaves, &indexes, &step.hashes)
                    .await
                    .map_err(&err)?;
                let taken: Vec<i64> = step.taken.iter().map(|i| idx(*i)).collect();
                tx.execute("DELETE FROM tlog_queue WHERE id = ANY($1)", &[&taken])
                    .await
                    .map_err(&err)?;
                let updated = tx
                    .execute(
                        "UPDATE tlog_head SET size = $1, root = $2, checkpoint = $3 WHERE id = 1",
                        &[
                            &idx(step.head.size),
                            &step.head.root.to_vec(),
                            &step.head.checkpoint,
                        ],
                    )
                    .await
                    .map_err(&err)?;
                if updated != 1 {
                    return Err(crate::pg::backend(
                        "log integrate",
                        "the log has no head row: its key was never bound",
                    ));
                }
                tx.commit().await.map_err(&err)?;
                Ok(true)
            },
        )
    }

    fn index_of(&self, leaf: &[u8; 32]) -> Result<Option<u64>, StoreError> {
        let leaf = leaf.to_vec();
        self.0.call("log index", move |pool| async move {
            let c = client(&pool, "log index").await?;
            let s = c
                .prepare_cached("SELECT idx FROM tlog_index WHERE leaf = $1")
                .await
                .map_err(db_error("log index"))?;
            Ok(c.query_opt(&s, &[&leaf])
                .await
                .map_err(db_error("log index"))?
                .map(|r| r.get::<_, i64>(0) as u64))
        })
    }

    fn bind_key(&self, vkey: &str) -> Result<String, StoreError> {
        let vkey = vkey.to_owned();
        self.0.call("log key", move |pool| async move {
            let c = client(&pool, "log key").await?;
            let s = c
                .prepare_cached(
                    "INSERT INTO tlog_head (id, vkey) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
                )
                .await
                .map_err(db_error("log key"))?;
            c.execute(&s, &[&vkey]).await.map_err(db_error("log key"))?;
            let s = c
                .prepare_cached("SELECT vkey FROM tlog_head WHERE id = 1")
                .await
                .map_err(db_error("log key"))?;
            let row = c.query_one(&s, &[]).await.map_err(db_error("log key"))?;
            Ok(row.get::<_, String>(0))
        })
    }

    fn bound_key(&self) -> Result<Option<String>, StoreError> {
        self.0.call("log key", move |pool| async move {
            let c = client(&pool, "log key").await?;
            let s = c
                .prepare_cached("SELECT vkey FROM tlog_head WHERE id = 1")
                .await
                .map_err(db_error("log key"))?;
            Ok(c.query_opt(&s, &[])
                .await
                .map_err(db_error("log key"))?
                .map(|row| row.get::<_, String>(0)))
        })
    }

    fn restore(&self, part: &Restored) -> Result<(), StoreError> {
        let part = part.clone();
        self.0
            .call_pooled("log restore", CALL_TIMEOUT, false, move |pool| async move {
                let err = db_error("log restore");
                let mut c = pooled(&pool, "log restore").await?;
                let tx = c.transaction().await.map_err(&err)?;
                let n = part.entries.len() as u64;
                let indexes: Vec<i64> = (0..n).map(|i| idx(part.from + i)).collect();
                insert_entries(&tx, &indexes, &part.entries)
                    .await
                    .map_err(&err)?;
                insert_index_and_hashes(&tx, &part.leaves, &indexes, &part.hashes)
                    .await
                    .map_err(&err)?;
                tx.execute(
                    "INSERT INTO tlog_queue (entry) SELECT e FROM unnest($1::bytea[]) WITH ORDINALITY AS t(e, n) ORDER BY n",
                    &[&part.queued],
                )
                .await
                .map_err(&err)?;
                tx.commit().await.map_err(&err)?;
                Ok(())
            })
    }

    fn restore_head(&self, head: &LogHead) -> Result<(), StoreError> {
        let head = head.clone();
        self.0.call("log restore", move |pool| async move {
            let c = client(&pool, "log restore").await?;
            let updated = c
                .execute(
                    "UPDATE tlog_head SET size = $1, root = $2, checkpoint = $3 WHERE id = 1",
                    &[&idx(head.size), &head.root.to_vec(), &head.checkpoint],
                )
                .await
                .map_err(db_error("log restore"))?;
            if updated != 1 {
                return Err(crate::pg::backend(
                    "log restore",
                    "the log has no head row: its key was never bound",
                ));
            }
            Ok(())
        })
    }

    fn clear_queue(&self) -> Result<(), StoreError> {
        self.0.call("log queue", move |pool| async move {
            let c = client(&pool, "log queue").await?;
            c.execute("DELETE FROM tlog_queue", &[])
                .await
                .map_err(db_error("log queue"))?;
            Ok(())
        })
    }
}
