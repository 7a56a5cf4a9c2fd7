//! The CS's decision records on sled: the record, its document apart, its
//! indexes by resource URI and by user, the outbox of pending deliveries and
//! the keys of collected history (see the table in the parent module).

use crate::cs::*;
use crate::packed;
use crate::sled_json::{corrupt, decode, encode, key_text, page_after, tree, Durable};
use crate::sled_store::backend_error;
use crate::Durability;
use crate::StoreError;

// ---- decision records ----

pub(super) struct SledRecords {
    pub(super) db: Durable,
    pub(super) decisions: sled::Tree,
    pub(super) documents: sled::Tree,
    pub(super) by_resource: sled::Tree,
    pub(super) by_user: sled::Tree,
    pub(super) pending: sled::Tree,
    /// The ids of records collected as old history, with their decision
    /// time: never claimed again (§6).
    pub(super) collected: sled::Tree,
    /// The transparency log, whose queue takes each claimed decision.
    pub(super) log: std::sync::Arc<super::log::SledLog>,
}

fn user_key(user: &str, decided_at: i64, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(user.len() + id.len() + 10);
    k.extend_from_slice(user.as_bytes());
    k.push(0);
    k.extend_from_slice(&inverted(decided_at).to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

/// A time inverted so that a forward scan is newest first: `i64::MAX - t`,
/// in 64 bits without a sign so that no time overflows (the same bytes as
/// the signed difference for every time from 1970 on).
fn inverted(t: i64) -> u64 {
    (i128::from(i64::MAX) - i128::from(t)) as u64
}

impl SledRecords {
    pub(super) fn open(
        db: &sled::Db,
        durable: Durable,
        log: std::sync::Arc<super::log::SledLog>,
    ) -> Result<Self, StoreError> {
        Ok(SledRecords {
            log,
            decisions: tree(db, "cs.decisions")?,
            documents: tree(db, "cs.documents")?,
            by_resource: tree(db, "cs.by_resource")?,
            by_user: tree(db, "cs.by_user")?,
            pending: tree(db, "cs.pending")?,
            collected: tree(db, "cs.collected")?,
            db: durable,
        })
    }

    fn get_id(&self, id: &[u8]) -> Result<Option<DecisionRecord>, StoreError> {
        let read = || self.decisions.get(id).map_err(|e| backend_error("get", e));
        let Some(bytes) = read()? else {
            return Ok(None);
        };
        match self.with_document(id, decode(id, &bytes)?) {
            Ok(record) => Ok(Some(record)),
            // Collected (old history) between the two reads: the record
            // goes before its document, so it is gone by now; read again.
            Err(e) => match read()? {
                None => Ok(None),
                Some(again) if again != bytes => {
                    Ok(Some(self.with_document(id, decode(id, &again)?)?))
                }
                Some(_) => Err(e),
            },
        }
    }

    /// Puts the document a stored record refers to back into it.
    fn with_document(
        &self,
        id: &[u8],
        mut record: DecisionRecord,
    ) -> Result<DecisionRecord, StoreError> {
        if let Some(doc_key) = document_ref(&record.document) {
            let bytes = self
                .documents
                .get(doc_key.as_bytes())
                .map_err(|e| backend_error("get", e))?
                .ok_or_else(|| corrupt(id, "the record's document is missing"))?;
            record.document = if packed::is_packed(&bytes) {
                packed::unpack(&bytes).map_err(|e| corrupt(id, format!("its document: {e}")))?
            } else {
                // Written before documents were packed.
                String::from_utf8(bytes.to_vec())
                    .map_err(|_| corrupt(id, "the record's document is not UTF-8"))?
            };
        }
        Ok(record)
    }

    /// The key `record`'s document goes under; refuses a document that looks
    /// like a reference (not one this server wrote).
    fn document_key_of(id: &str, record: &DecisionRecord) -> Result<String, StoreError> {
        if document_ref(&record.document).is_some() {
            return Err(corrupt(
                id.as_bytes(),
                "a document that looks like a reference",
            ));
        }
        Ok(document_key(id, &record.document))
    }

    /// Writes `document` under `doc_key` unless it is there already; says
    /// whether it was.
    fn put_document(&self, doc_key: &str, document: &str) -> Result<bool, StoreError> {
        let present = self
            .documents
            .contains_key(doc_key.as_bytes())
            .map_err(|e| backend_error("update", e))?;
        if !present {
            self.documents
                .insert(doc_key.as_bytes(), packed::pack(document))
                .map_err(|e| backend_error("update", e))?;
        }
        Ok(present)
    }

    /// `record` as stored: its document replaced by the reference `doc_key`.
    fn stored_form(record: &DecisionRecord, doc_key: &str) -> Result<Vec<u8>, StoreError> {
        encode(&DecisionRecord {
            document: format!("{DOC_REF}{doc_key}"),
            ..record.clone()
        })
    }

    /// The key of the document the stored record under `id` refers to.
    fn stored_document_key(&self, id: &[u8]) -> Result<Option<String>, StoreError> {
        let Some(bytes) = self
            .decisions
            .get(id)
            .map_err(|e| backend_error("update", e))?
        else {
            return Ok(None);
        };
        let old: DecisionRecord = decode(id, &bytes)?;
        Ok(document_ref(&old.document).map(str::to_owned))
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()
    }

    fn write(&self, record: &DecisionRecord) -> Result<(), StoreError> {
        let id = record.key().id();
        let doc_key = Self::document_key_of(&id, record)?;
        // The stored record is read only when the document is new here (it
        // changed, or the record is of the layout before).
        let old_doc = if self.put_document(&doc_key, &record.document)? {
            None
        } else {
            self.stored_document_key(id.as_bytes())?
        };
        self.decisions
            .insert(id.as_bytes(), Self::stored_form(record, &doc_key)?)
            .map_err(|e| backend_error("update", e))?;
        if record.delivery.is_pending() {
            self.pending
                .insert(id.as_bytes(), &[])
                .map_err(|e| backend_error("update", e))?;
        } else {
            self.pending
                .remove(id.as_bytes())
                .map_err(|e| backend_error("update", e))?;
        }
        // A replaced document (a sealed one redacted) goes, after the record
        // that no longer names it.
        if let Some(old) = old_doc {
            if old != doc_key {
                self.documents
                    .remove(old.as_bytes())
                    .map_err(|e| backend_error("update", e))?;
            }
        }
        Ok(())
    }
}

/// What a stored record holds in place of its document: this, then the key
/// in `cs.documents`. A document never starts with a control character (it
/// is JSON, or base64url when sealed).
const DOC_REF: &str = "\u{1}doc:";

fn document_ref(document: &str) -> Option<&str> {
    document.strip_prefix(DOC_REF)
}

/// The key of `document` in `cs.documents`: the record id, NUL, and the
/// base64url SHA-256 of the document.
fn document_key(id: &str, document: &str) -> String {
    format!(
        "{id}\u{0}{}",
        cheq_core::sign::b64::sha256(document.as_bytes())
    )
}

impl DecisionRecords for SledRecords {
    fn claim(&self, record: &DecisionRecord) -> Result<Claim, StoreError> {
        let claim = self.claim_with(record, Durability::Deferred)?;
        if claim == Claim::Fresh {
            self.flush()?;
        }
        Ok(claim)
    }

    fn claim_with(
        &self,
        record: &DecisionRecord,
        durability: Durability,
    ) -> Result<Claim, StoreError> {
        if durability == Durability::Now {
            return self.claim(record);
        }
        let id = record.key().id();
        let key = id.as_bytes();
        let was_collected = || {
            self.collected
                .contains_key(key)
                .map_err(|e| backend_error("claim", e))
        };
        if was_collected()? {
            return Ok(Claim::Collected);
        }
        if let Some(old) = self.get_id(key)? {
            return Ok(Claim::Existing(Box::new(old)));
        }
        let doc_key = Self::document_key_of(&id, record)?;
        self.put_document(&doc_key, &record.document)?;
        let bytes = Self::stored_form(record, &doc_key)?;
        let err = |e| backend_error("claim", e);
        // The log's entry is queued before the record is swapped in, and
        // made durable by the same flush as the record (§15).
        let queued = match record.log_entry() {
            Some(entry) => {
                let k = self.log.queue_key()?;
                self.log.queue.insert(k, entry).map_err(err)?;
                Some(k)
            }
            None => None,
        };
        let unqueue = || -> Result<(), StoreError> {
            if let Some(k) = queued {
                self.log.queue.remove(k).map_err(err)?;
            }
            Ok(())
        };
        if record.delivery.is_pending() {
            self.pending.insert(key, &[]).map_err(err)?;
        }
        self.by_resource
            .insert(record.resource_uri.as_bytes(), key)
            .map_err(err)?;
        self.by_user
            .insert(user_key(&record.user, record.decided_at, &id), key)
            .map_err(err)?;
        match self
            .decisions
            .compare_and_swap(key, None as Option<&[u8]>, Some(bytes))
            .map_err(err)?
        {
            Ok(()) if was_collected()? => {
                // The old record was collected while this claim ran (its key
                // is put aside before the record goes): this one is undone.
                self.decisions.remove(key).map_err(err)?;
                unqueue()?;
                Ok(Claim::Collected)
            }
            Ok(()) => Ok(Claim::Fresh),
            Err(e) => {
                unqueue()?;
                // The winner's document is another (its decision or its
                // time differ); ours is named by no record.
                let winner = match &e.current {
                    Some(old) => Some(decode::<DecisionRecord>(key, old)?),
                    None => None,
                };
                if winner
                    .as_ref()
                    .and_then(|w| document_ref(&w.document))
                    .is_none_or(|k| k != doc_key)
                {
                    self.documents.remove(doc_key.as_bytes()).map_err(err)?;
                }
                match winner {
                    Some(w) => Ok(Claim::Existing(Box::new(self.with_document(key, w)?))),
                    None => Err(corrupt(key, "the record vanished during its claim")),
                }
            }
        }
    }

    fn get(&self, key: &RecordKey) -> Result<Option<DecisionRecord>, StoreError> {
        self.get_id(key.id().as_bytes())
    }

    fn by_resource(&self, resource_uri: &str) -> Result<Option<DecisionRecord>, StoreError> {
        match self
            .by_resource
            .get(resource_uri.as_bytes())
            .map_err(|e| backend_error("by_resource", e))?
        {
            Some(id) => self.get_id(&id),
            None => Ok(None),
        }
    }

    fn by_id_for_user(&self, user: &str, id: &str) -> Result<Option<DecisionRecord>, StoreError> {
        Ok(self.get_id(id.as_bytes())?.filter(|r| r.user == user))
    }

    fn update(&self, record: &DecisionRecord, durability: Durability) -> Result<(), StoreError> {
        let durable = durability == Durability::Now;
        self.write(record)?;
        if durable {
            self.flush()?;
        }
        Ok(())
    }

    fn lease_due(
        &self,
        now: i64,
        lease_secs: i64,
        limit: usize,
    ) -> Result<Vec<DecisionRecord>, StoreError> {
        let mut out = Vec::new();
        for item in self.pending.iter().keys() {
            if out.len() >= limit {
                break;
            }
            let id = item.map_err(|e| backend_error("lease_due", e))?;
            let Some(old) = self
                .decisions
                .get(&id)
                .map_err(|e| backend_error("lease_due", e))?
            else {
                continue;
            };
            let Some(record) = leased(decode(&id, &old), Some(now), now + lease_secs) else {
                continue;
            };
            // Taken only if nobody changed it meanwhile (the lease).
            let swapped = self
                .decisions
                .compare_and_swap(&id, Some(old), Some(encode(&record)?))
                .map_err(|e| backend_error("lease_due", e))?;
            if swapped.is_ok() {
                out.push(self.with_document(&id, record)?);
            }
        }
        Ok(out)
    }

    fn pending_summary(&self) -> Result<(usize, Option<i64>), StoreError> {
        let mut n = 0;
        let mut oldest: Option<i64> = None;
        for item in self.pending.iter().keys() {
            let id = item.map_err(|e| backend_error("pending", e))?;
            // The record alone: its document is not needed here.
            let stored = self
                .decisions
                .get(&id)
                .map_err(|e| backend_error("pending", e))?;
            if let Some(r) = stored
                .map(|b| decode::<DecisionRecord>(&id, &b))
                .transpose()?
            {
                if r.delivery.is_pending() {
                    n += 1;
                    oldest = Some(oldest.map_or(r.decided_at, |o| o.min(r.decided_at)));
                }
            }
        }
        Ok((n, oldest))
    }

    fn sealed(&self) -> Result<Vec<RecordKey>, StoreError> {
        let mut out = Vec::new();
        for item in self.decisions.iter() {
            let (k, v) = item.map_err(|e| backend_error("sealed", e))?;
            let r: DecisionRecord = decode(&k, &v)?;
            if r.sealed {
                out.push(r.key());
            }
        }
        Ok(out)
    }

    fn for_user(&self, user: &str, limit: usize) -> Result<Vec<DecisionRecord>, StoreError> {
        let mut prefix = user.as_bytes().to_vec();
        prefix.push(0);
        let mut out = Vec::new();
        for entry in self.by_user.scan_prefix(&prefix) {
            if out.len() >= limit {
                break;
            }
            let (_, id) = entry.map_err(|e| backend_error("for_user", e))?;
            if let Some(r) = self.get_id(&id)? {
                if r.user == user {
                    out.push(r);
                }
            }
        }
        Ok(out)
    }

    fn collect_decided_before(&self, cutoff: i64) -> Result<usize, StoreError> {
        let err = |e| backend_error("collect_decided_before", e);
        let mut n = 0;
        // `cs.by_user` holds one entry per record with its decision time,
        // and is the smallest tree that does.
        for item in self.by_user.iter() {
            let (k, id) = item.map_err(err)?;
            match decided_at_of(&k) {
                Some(at) if at < cutoff => {}
                _ => continue,
            }
            if self.collect_one(&id, cutoff)? {
                n += 1;
            }
            // The record is gone (now, or by an earlier collection that
            // stopped half way): the entry that finds it goes last.
            if !self.decisions.contains_key(&id).map_err(err)? {
                self.by_user.remove(&k).map_err(err)?;
            }
        }
        Ok(n)
    }

    fn list_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, DecisionRecord)>, StoreError> {
        page_after(&self.decisions, after, limit, "list decisions")?
            .into_iter()
            .map(|(k, v)| Ok((key_text(&k)?, self.with_document(&k, decode(&k, &v)?)?)))
            .collect()
    }

    fn collected_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        page_after(&self.collected, after, limit, "list collected")?
            .into_iter()
            .map(|(k, v)| {
                let at: [u8; 8] = v
                    .as_ref()
                    .try_into()
                    .map_err(|_| corrupt(&k, "a collected key's time is not 8 bytes"))?;
                Ok((key_text(&k)?, i64::from_be_bytes(at)))
            })
            .collect()
    }

    fn restore_collected(&self, id: &str, decided_at: i64) -> Result<(), StoreError> {
        self.collected
            .insert(id.as_bytes(), &decided_at.to_be_bytes())
            .map_err(|e| backend_error("restore collected", e))?;
        Ok(())
    }
}

/// The decision time a `cs.by_user` key carries ([`user_key`]): the 8 bytes
/// before the record id (43 characters, base64url SHA-256).
fn decided_at_of(key: &[u8]) -> Option<i64> {
    const ID: usize = 43;
    let end = key.len().checked_sub(ID)?;
    let start = end.checked_sub(8)?;
    let bytes: [u8; 8] = key.get(start..end)?.try_into().ok()?;
    i64::try_from(i128::from(i64::MAX) - i128::from(u64::from_be_bytes(bytes))).ok()
}

impl SledRecords {
    /// Removes the record under `id` if it was decided before `cutoff`, its
    /// delivery is final and its document not sealed, in an order that a
    /// crash at any step leaves readable: its key put aside in
    /// `cs.collected` (so that it is never claimed again), the URI's index
    /// entry (put back if the record changed meanwhile), the record
    /// (compare-and-swap against what was read), then its document. Says
    /// whether it went. Of a record gone already (a collection stopped half
    /// way), the documents left are removed.
    fn collect_one(&self, id: &[u8], cutoff: i64) -> Result<bool, StoreError> {
        let err = |e| backend_error("collect_decided_before", e);
        let Some(bytes) = self.decisions.get(id).map_err(err)? else {
            if self.collected.contains_key(id).map_err(err)? {
                self.remove_documents(id)?;
            }
            return Ok(false);
        };
        let record: DecisionRecord = match decode(id, &bytes) {
            Ok(r) => r,
            Err(e) => {
                log::error!("collecting old decisions: skipping an unreadable record: {e}");
                return Ok(false);
            }
        };
        if record.decided_at >= cutoff || record.delivery.is_pending() || record.sealed {
            return Ok(false);
        }
        self.collected
            .insert(id, &record.decided_at.to_be_bytes())
            .map_err(err)?;
        let uri = record.resource_uri.as_bytes();
        let unindexed = self
            .by_resource
            .compare_and_swap(uri, Some(id), None as Option<&[u8]>)
            .map_err(err)?
            .is_ok();
        if self
            .decisions
            .compare_and_swap(id, Some(bytes), None as Option<&[u8]>)
            .map_err(err)?
            .is_err()
        {
            // Rewritten meanwhile: it stays, and so do its entries.
            if unindexed {
                let _ = self
                    .by_resource
                    .compare_and_swap(uri, None as Option<&[u8]>, Some(id))
                    .map_err(err)?;
            }
            self.collected.remove(id).map_err(err)?;
            return Ok(false);
        }
        self.pending.remove(id).map_err(err)?;
        // (A record of the layout before held its document itself.)
        if let Some(doc_key) = document_ref(&record.document) {
            self.documents.remove(doc_key.as_bytes()).map_err(err)?;
        }
        Ok(true)
    }

    /// Removes every document stored for the record `id` (`id`, NUL, …).
    fn remove_documents(&self, id: &[u8]) -> Result<(), StoreError> {
        let err = |e| backend_error("collect_decided_before", e);
        let mut prefix = id.to_vec();
        prefix.push(0);
        for key in self.documents.scan_prefix(&prefix).keys() {
            self.documents.remove(key.map_err(err)?).map_err(err)?;
        }
        Ok(())
    }
}
