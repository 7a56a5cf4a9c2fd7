//! The reference resource server's state ([`super::rs`]) on the embedded
//! `sled` database (PROTOCOL.md §6, §7): one tree per kind of record, JSON
//! values, the tree names the RS has always used (an existing `rs.sled`
//! keeps working).
//!
//! | tree | key | value |
//! |---|---|---|
//! | `rs.confirmations` | confirmation id | [`CheqRecord`]: JSON, its document (while it has one) packed apart ([`encode_record`]) |
//! | `rs.results` | result id | confirmation id |
//! | `rs.nonces` (and `rs.nonces.expiry`) | nonce | see [`SledNonceStore`] |
//! | `rs.executions` | idempotency key | the operation's result |
//! | `rs.assertions` | [`assertion_key`] of a client assertion (§16.4) | when it expires (unix seconds, 8 bytes big-endian) |
//! | `rs.settings` | CHEQ `subject` | [`UserSettings`] (§17): JSON, its rules as given |
//! | `rs.hosts` | issuer of a CS a user chose | when it was first chosen (sled's id counter, 8 bytes big-endian) |
//!
//! One sled transaction, and one only: [`Settings::apply`] writes a user's
//! settings, the operation's result in `rs.executions` and the chosen CS in
//! `rs.hosts` together, or none of them, so that a change is applied once
//! and only against the generation it was asked against (§6, §17). sled
//! 0.34 coordinates transactions through a process-wide lock (see
//! `sled_store`): once one has run, every later operation of the process
//! takes that lock shared. A user changes their CS or rules seldom, and no
//! order of separate writes keeps "the result is there if and only if the
//! settings moved": a crash between them would either apply a change twice
//! or answer a re-delivery as stale with the change applied.
//!
//! Everywhere else, each compare-and-set of [`super::rs`] is one sled
//! `compare_and_swap`; where two trees change together, they change in an
//! order a crash cannot turn into a wrong answer:
//!
//! - [`CheqRecords::create`] writes the record, then its index entry: a crash
//!   in between leaves a record no result URI reaches (its URI pack was never
//!   handed out), which collection removes like any other;
//! - [`CheqRecords::collect_expired`] removes the index entry, then the
//!   record: a crash in between leaves a record the next pass removes;
//! - [`Settings::restore`] (an import's write) puts the CS among the hosts,
//!   then the settings: a crash in between leaves a CS among the hosts that
//!   no user has, as a user who moved on leaves one (§17).
//!
//! "Durable" means sled's `flush()` (with the caveat spelled out in
//! `sled_store`: it survives a killed process, not every power loss).

use super::packed;
use super::rs::*;
use super::sled_json::{corrupt, decode, encode, key_text, open_db, page_after, tree, Durable};
use super::sled_store::backend_error;
use super::{SledNonceStore, StoreError};
use crate::Durability;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

const CONFIRMATIONS_TREE: &str = "rs.confirmations";
const RESULTS_TREE: &str = "rs.results";
const NONCES_TREE: &str = "rs.nonces";
const EXECUTIONS_TREE: &str = "rs.executions";
const ASSERTIONS_TREE: &str = "rs.assertions";
const SETTINGS_TREE: &str = "rs.settings";
const HOSTS_TREE: &str = "rs.hosts";

/// How many times a compare-and-swap is retried after losing a race before
/// the store gives up with an error (each retry re-reads what won).
const CAS_ATTEMPTS: usize = 16;

fn lost_races(op: &'static str) -> StoreError {
    StoreError::Backend {
        op,
        message: format!("lost {CAS_ATTEMPTS} compare-and-swap races in a row"),
    }
}

/// Opens every RS store in `db`.
pub fn open(db: &sled::Db) -> Result<RsStore, StoreError> {
    let durable = Durable::new(db.clone());
    Ok(RsStore {
        nonces: Arc::new(SledNonceStore::in_db(durable.clone(), NONCES_TREE)?),
        records: Arc::new(SledRecords {
            records: tree(db, CONFIRMATIONS_TREE)?,
            results: tree(db, RESULTS_TREE)?,
            db: durable.clone(),
        }),
        flusher: Some(durable.async_flush()),
        executions: Arc::new(SledExecutions {
            tree: tree(db, EXECUTIONS_TREE)?,
            db: durable.clone(),
        }),
        assertions: Arc::new(SledAssertions {
            tree: tree(db, ASSERTIONS_TREE)?,
            db: durable.clone(),
        }),
        settings: Arc::new(SledSettings {
            settings: tree(db, SETTINGS_TREE)?,
            hosts: tree(db, HOSTS_TREE)?,
            executions: tree(db, EXECUTIONS_TREE)?,
            db: durable,
        }),
        readiness: Arc::new(super::AlwaysReady),
        recent_records: 0,
    })
}

/// Opens (creating it if needed) a sled database at `dir` and every RS store
/// in it. sled locks the directory: a second open while it is open fails.
pub fn open_dir(dir: &Path) -> Result<(sled::Db, RsStore), StoreError> {
    let db = open_db(dir)?;
    let store = open(&db)?;
    Ok((db, store))
}

// ---- CHEQ records ----

/// First byte of a record stored with its document packed apart: `0xC2`
/// never starts UTF-8 (a record of before is JSON, `{`).
const PACKED_RECORD: u8 = 0xC2;

/// `record` as stored. While it has a document (a CHEQ still served), the
/// document is packed ([`packed`]: a third of its text) after the rest as
/// JSON: [`PACKED_RECORD`], the JSON's length (u32, little-endian), the JSON
/// with an empty document, the packed document. Once decided (no document), it
/// is JSON alone. `packed_doc` is the document's packed form when the caller
/// has it already (a record moving on with its document unchanged).
fn encode_record(record: &CheqRecord, packed_doc: Option<&[u8]>) -> Result<Vec<u8>, StoreError> {
    if record.document.is_empty() {
        return encode(record);
    }
    let json = encode(&record.without_document())?;
    let packed_here;
    let doc = match packed_doc {
        Some(doc) => doc,
        None => {
            packed_here = packed::pack(&record.document);
            &packed_here
        }
    };
    let len = u32::try_from(json.len()).map_err(|_| StoreError::Backend {
        op: "encode",
        message: "a CHEQ record over 4 GiB".into(),
    })?;
    let mut out = Vec::with_capacity(5 + json.len() + doc.len());
    out.push(PACKED_RECORD);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(doc);
    Ok(out)
}

/// A stored record's JSON and its packed document, if stored apart.
fn split_record<'a>(
    key: &[u8],
    bytes: &'a [u8],
) -> Result<(&'a [u8], Option<&'a [u8]>), StoreError> {
    let Some((&PACKED_RECORD, rest)) = bytes.split_first() else {
        return Ok((bytes, None));
    };
    let cut = || corrupt(key, "a record with a packed document, cut short");
    let (len, rest) = rest.split_first_chunk::<4>().ok_or_else(cut)?;
    let len = usize::try_from(u32::from_le_bytes(*len)).map_err(|_| cut())?;
    if len > rest.len() {
        return Err(cut());
    }
    let (json, doc) = rest.split_at(len);
    Ok((json, Some(doc)))
}

/// The record stored as `bytes` under `key`.
fn decode_record(key: &[u8], bytes: &[u8]) -> Result<CheqRecord, StoreError> {
    let (json, doc) = split_record(key, bytes)?;
    let mut record: CheqRecord = decode(key, json)?;
    if let Some(doc) = doc {
        record
            .attach_packed(doc)
            .map_err(|reason| corrupt(key, reason))?;
    }
    Ok(record)
}

struct SledRecords {
    db: Durable,
    records: sled::Tree,
    results: sled::Tree,
}

impl CheqRecords for SledRecords {
    fn create(&self, record: &CheqRecord) -> Result<bool, StoreError> {
        let created = self.create_with(record, Durability::Deferred)?;
        if created {
            self.db.flush()?;
        }
        Ok(created)
    }

    fn create_with(&self, record: &CheqRecord, durability: Durability) -> Result<bool, StoreError> {
        if durability == Durability::Now {
            return self.create(record);
        }
        let err = |e| backend_error("create", e);
        let id = record.id.as_bytes();
        let taken = self
            .records
            .compare_and_swap(
                id,
                None as Option<&[u8]>,
                Some(encode_record(record, None)?),
            )
            .map_err(err)?
            .is_err();
        if taken {
            return Ok(false);
        }
        let taken = self
            .results
            .compare_and_swap(record.result_id.as_bytes(), None as Option<&[u8]>, Some(id))
            .map_err(err)?
            .is_err();
        if taken {
            // Ours, never published: no one else can have changed it.
            self.records.remove(id).map_err(err)?;
            return Ok(false);
        }
        Ok(true)
    }

    fn get(&self, id: &str) -> Result<Option<CheqRecord>, StoreError> {
        self.records
            .get(id.as_bytes())
            .map_err(|e| backend_error("get", e))?
            .map(|b| decode_record(id.as_bytes(), &b))
            .transpose()
    }

    fn by_result(&self, result_id: &str) -> Result<Option<CheqRecord>, StoreError> {
        let Some(id) = self
            .results
            .get(result_id.as_bytes())
            .map_err(|e| backend_error("by_result", e))?
        else {
            return Ok(None);
        };
        let Some(bytes) = self
            .records
            .get(&id)
            .map_err(|e| backend_error("by_result", e))?
        else {
            return Ok(None);
        };
        let record = decode_record(&id, &bytes)?;
        Ok((record.result_id == result_id).then_some(record))
    }

    fn advance(&self, step: Step<'_>, durability: Durability) -> Result<Transition, StoreError> {
        let durable = durability == Durability::Now;
        let err = |e| backend_error("advance", e);
        let key = step.id.as_bytes();
        for _ in 0..CAS_ATTEMPTS {
            let Some(old) = self.records.get(key).map_err(err)? else {
                return Ok(Transition::Missing);
            };
            let mut record = decode_record(key, &old)?;
            if &record.state != step.from {
                return Ok(Transition::Other(Box::new(record)));
            }
            record.enter(step.to.clone());
            // The document, when kept, moves on packed as it was.
            let new = encode_record(&record, split_record(key, &old)?.1)?;
            let swapped = self
                .records
                .compare_and_swap(key, Some(old), Some(new))
                .map_err(err)?;
            if swapped.is_ok() {
                if durable {
                    self.db.flush()?;
                }
                return Ok(Transition::Moved);
            }
        }
        Err(lost_races("advance"))
    }

    fn collect_expired(&self, cutoff: i64) -> Result<usize, StoreError> {
        let err = |e| backend_error("collect_expired", e);
        let mut n = 0;
        for item in self.records.iter() {
            let (key, bytes) = item.map_err(err)?;
            // A record that cannot be read cannot say when it expires: it
            // stays (it keeps refusing its nonce) for an operator to look at.
            let Ok((json, _)) = split_record(&key, &bytes) else {
                continue;
            };
            let Ok(record) = serde_json::from_slice::<CheqRecord>(json) else {
                continue;
            };
            if record.expires < cutoff {
                self.results
                    .remove(record.result_id.as_bytes())
                    .map_err(err)?;
                self.records.remove(key).map_err(err)?;
                n += 1;
            }
        }
        self.db.flush()?;
        Ok(n)
    }

    fn list_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<CheqRecord>, StoreError> {
        page_after(&self.records, after, limit, "list records")?
            .into_iter()
            .map(|(k, v)| decode_record(&k, &v))
            .collect()
    }
}

// ---- the execution log ----

struct SledExecutions {
    db: Durable,
    tree: sled::Tree,
}

impl Executions for SledExecutions {
    fn get(&self, key: &str) -> Result<Option<Value>, StoreError> {
        self.tree
            .get(key.as_bytes())
            .map_err(|e| backend_error("get execution", e))?
            .map(|b| decode(key.as_bytes(), &b))
            .transpose()
    }

    fn record_with(
        &self,
        key: &str,
        result: &Value,
        durability: Durability,
    ) -> Result<Execution, StoreError> {
        let durable = durability == Durability::Now;
        let err = |e| backend_error("record execution", e);
        let bytes = encode(result)?;
        for _ in 0..CAS_ATTEMPTS {
            let swapped = self
                .tree
                .compare_and_swap(
                    key.as_bytes(),
                    None as Option<&[u8]>,
                    Some(bytes.as_slice()),
                )
                .map_err(err)?;
            let outcome = match swapped {
                Ok(()) => Execution::Fresh,
                Err(sled::CompareAndSwapError {
                    current: Some(current),
                    ..
                }) => Execution::Existing(decode(key.as_bytes(), &current)?),
                // sled never reports a failed swap with nothing there; retry.
                Err(_) => continue,
            };
            // Also for `Existing`: another thread's write may not be flushed yet.
            if durable {
                self.db.flush()?;
            }
            return Ok(outcome);
        }
        Err(lost_races("record execution"))
    }

    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Value)>, StoreError> {
        page_after(&self.tree, after, limit, "list executions")?
            .into_iter()
            .map(|(k, v)| Ok((key_text(&k)?, decode(&k, &v)?)))
            .collect()
    }
}

// ---- client assertions taken ----

struct SledAssertions {
    db: Durable,
    tree: sled::Tree,
}

impl UsedAssertions for SledAssertions {
    fn first_use(&self, issuer: &str, jti: &str, expires_at: i64) -> Result<bool, StoreError> {
        let key = assertion_key(issuer, jti);
        let swapped = self
            .tree
            .compare_and_swap(
                key,
                None as Option<&[u8]>,
                Some(&expires_at.to_be_bytes()[..]),
            )
            .map_err(|e| backend_error("record assertion", e))?;
        if swapped.is_err() {
            return Ok(false);
        }
        self.db.flush()?;
        Ok(true)
    }

    fn collect_expired(&self, now: i64) -> Result<usize, StoreError> {
        let err = |e| backend_error("collect assertions", e);
        let mut n = 0;
        for item in self.tree.iter() {
            let (key, value) = item.map_err(err)?;
            // A value that cannot be read says nothing of its expiry: it
            // goes (it can only refuse an assertion, which expires in a
            // minute anyway).
            let expires_at = <[u8; 8]>::try_from(&value[..])
                .map(i64::from_be_bytes)
                .unwrap_or(i64::MIN);
            if expires_at < now {
                self.tree.remove(key).map_err(err)?;
                n += 1;
            }
        }
        if n > 0 {
            self.db.flush()?;
        }
        Ok(n)
    }
}

// ---- each user's CS and rules ----

struct SledSettings {
    db: Durable,
    settings: sled::Tree,
    hosts: sled::Tree,
    /// The execution log's tree (the one [`SledExecutions`] writes).
    executions: sled::Tree,
}

/// The generation stored settings move to from `expected`.
fn next_generation(expected: u64) -> Result<u64, StoreError> {
    expected.checked_add(1).ok_or_else(|| StoreError::Backend {
        op: "apply settings",
        message: "the generation is at its largest".into(),
    })
}

/// When a host was first chosen, as stored.
fn host_order(issuer: &[u8], value: &[u8]) -> Result<u64, StoreError> {
    <[u8; 8]>::try_from(value)
        .map(u64::from_be_bytes)
        .map_err(|_| corrupt(issuer, "a host's order is not 8 bytes"))
}

impl Settings for SledSettings {
    fn get(&self, subject: &str) -> Result<Option<UserSettings>, StoreError> {
        self.settings
            .get(subject.as_bytes())
            .map_err(|e| backend_error("get settings", e))?
            .map(|b| decode(subject.as_bytes(), &b))
            .transpose()
    }

    fn apply(
        &self,
        subject: &str,
        key: &str,
        expected: u64,
        settings: &UserSettings,
        result: &Value,
        durability: Durability,
    ) -> Result<Applied, StoreError> {
        use sled::transaction::{ConflictableTransactionError, TransactionError};
        use sled::Transactional;
        let stored = encode(&UserSettings {
            generation: next_generation(expected)?,
            ..settings.clone()
        })?;
        let result = encode(result)?;
        let abort = ConflictableTransactionError::Abort;
        let applied = (&self.settings, &self.hosts, &self.executions)
            .transaction(|(s, h, e)| {
                if let Some(before) = e.get(key.as_bytes())? {
                    return decode(key.as_bytes(), &before)
                        .map(Applied::Existing)
                        .map_err(abort);
                }
                let now = match s.get(subject.as_bytes())? {
                    Some(b) => {
                        decode::<UserSettings>(subject.as_bytes(), &b)
                            .map_err(abort)?
                            .generation
                    }
                    None => 0,
                };
                if now != expected {
                    return Ok(Applied::Stale(now));
                }
                s.insert(subject.as_bytes(), stored.as_slice())?;
                e.insert(key.as_bytes(), result.as_slice())?;
                if let Some(cs) = &settings.cs {
                    if h.get(cs.as_bytes())?.is_none() {
                        let order = h.generate_id()?;
                        h.insert(cs.as_bytes(), &order.to_be_bytes()[..])?;
                    }
                }
                Ok(Applied::Fresh)
            })
            .map_err(|e| match e {
                TransactionError::Abort(e) => e,
                TransactionError::Storage(e) => backend_error("apply settings", e),
            })?;
        // Whatever the outcome: what it found may be another thread's
        // write, not flushed yet.
        if durability == Durability::Now {
            self.db.flush()?;
        }
        Ok(applied)
    }

    fn hosts(&self) -> Result<Vec<String>, StoreError> {
        let mut hosts = Vec::new();
        for item in self.hosts.iter() {
            let (issuer, order) = item.map_err(|e| backend_error("list hosts", e))?;
            hosts.push((host_order(&issuer, &order)?, key_text(&issuer)?));
        }
        hosts.sort_unstable();
        Ok(hosts.into_iter().map(|(_, issuer)| issuer).collect())
    }

    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, UserSettings)>, StoreError> {
        page_after(&self.settings, after, limit, "list settings")?
            .into_iter()
            .map(|(k, v)| Ok((key_text(&k)?, decode(&k, &v)?)))
            .collect()
    }

    fn restore(&self, subject: &str, settings: &UserSettings) -> Result<(), StoreError> {
        if let Some(cs) = &settings.cs {
            self.add_host(cs)?;
        }
        self.settings
            .insert(subject.as_bytes(), encode(settings)?)
            .map_err(|e| backend_error("restore settings", e))?;
        self.db.flush()
    }

    fn restore_host(&self, issuer: &str) -> Result<(), StoreError> {
        self.add_host(issuer)?;
        self.db.flush()
    }
}

impl SledSettings {
    /// Puts `issuer` among the hosts, last, unless it is there (not flushed).
    fn add_host(&self, issuer: &str) -> Result<(), StoreError> {
        let err = |e| backend_error("restore host", e);
        if self.hosts.get(issuer.as_bytes()).map_err(err)?.is_some() {
            return Ok(());
        }
        let order = self.db.db().generate_id().map_err(err)?;
        // Lost to another writer of the same issuer: theirs stays, earlier.
        let _ = self
            .hosts
            .compare_and_swap(
                issuer.as_bytes(),
                None as Option<&[u8]>,
                Some(&order.to_be_bytes()[..]),
            )
            .map_err(err)?;
        Ok(())
    }
}
