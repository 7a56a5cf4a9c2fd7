//! Putting a read stream into an empty store, through its traits.

use super::*;
use crate::cs::{AccountPutError, Claim, CsStore};
use crate::rs::RsStore;
use crate::Durability;
use crate::{RecordOutcome, StoreError};
use std::io::BufRead;

// ---- import ----

/// Refuses a store that holds anything an import writes.
fn refuse_if_any<T>(
    what: &'static str,
    first: Result<Vec<T>, StoreError>,
    name: impl Fn(&T) -> String,
) -> Result<(), ImportError> {
    let first = first.map_err(|source| ImportError::Store {
        line: 0,
        kind: what,
        key: "(the first)".into(),
        source,
    })?;
    match first.first() {
        Some(item) => Err(ImportError::NotEmpty {
            what,
            first: name(item),
        }),
        None => Ok(()),
    }
}

/// Refuses a CS store that is not empty (sessions and limiter state aside:
/// an import writes none).
pub fn ensure_empty_cs(store: &CsStore) -> Result<(), ImportError> {
    refuse_if_any("accounts", store.accounts.list_after(None, 1), |a| {
        format!("{:?}", a.username)
    })?;
    refuse_if_any(
        "started confirmations",
        store.entries.list_after(None, 1),
        |(id, _)| format!("{id:?}"),
    )?;
    refuse_if_any(
        "decision records",
        store.records.list_after(None, 1),
        |(_, r)| format!("nonce {:?} of {}", r.nonce, r.resource_origin),
    )?;
    refuse_if_any(
        "collected decision keys",
        store.records.collected_after(None, 1),
        |(id, _)| format!("{id:?}"),
    )
}

/// Refuses an RS store that is not empty.
pub fn ensure_empty_rs(store: &RsStore) -> Result<(), ImportError> {
    refuse_if_any("nonces", store.nonces.list_after(None, 1), |(n, _)| {
        format!("{n:?}")
    })?;
    refuse_if_any("CHEQ records", store.records.list_after(None, 1), |r| {
        format!("{:?}", r.id)
    })?;
    refuse_if_any(
        "executions",
        store.executions.list_after(None, 1),
        |(k, _)| format!("{k:?}"),
    )
}

/// Reads a CS stream into `store`, which must be empty, and makes it
/// durable. A failure part way leaves the items before it written:
/// [`check`] the stream first where it can be read twice.
pub fn import_cs(store: &CsStore, input: &mut dyn BufRead) -> Result<Counts, ImportError> {
    ensure_empty_cs(store)?;
    let counts = put_each(input, Server::Cs, &mut |at, item| put_cs(store, at, item))?;
    if let Some(flusher) = &store.flusher {
        flusher.wait().map_err(ImportError::Flush)?;
    }
    Ok(counts)
}

/// Reads a stream of `server`'s items and hands each to `put` with where it
/// is in the stream.
fn put_each(
    input: &mut dyn BufRead,
    server: Server,
    put: &mut dyn FnMut(At, Item) -> Result<(), ImportError>,
) -> Result<Counts, ImportError> {
    read_stream(input, server, &mut |line, item| {
        let at = At {
            line,
            kind: item.kind(),
        };
        put(at, item)
    })
}

/// Where an item is in the stream, for what its import may fail with.
#[derive(Clone, Copy)]
struct At {
    line: u64,
    kind: &'static str,
}

impl At {
    /// The store refused the item's write.
    fn failed(self, key: String) -> impl FnOnce(StoreError) -> ImportError {
        move |source| ImportError::Store {
            line: self.line,
            kind: self.kind,
            key,
            source,
        }
    }

    /// The store holds the item already.
    fn twice(self, key: String) -> ImportError {
        ImportError::Duplicate {
            line: self.line,
            kind: self.kind,
            key,
        }
    }

    /// The item belongs in a stream of the `other` server (the reader
    /// refuses such a line before it is put).
    fn elsewhere(self, other: Server) -> ImportError {
        ImportError::Line {
            line: self.line,
            cause: LineError::OtherServer {
                kind: self.kind,
                server: other,
            },
        }
    }
}

/// Writes one item of a CS stream.
fn put_cs(store: &CsStore, at: At, item: Item) -> Result<(), ImportError> {
    match item {
        Item::Account(account) => match store.accounts.put(&account, false) {
            Ok(()) => Ok(()),
            Err(AccountPutError::Exists(name)) => Err(at.twice(format!("{name:?}"))),
            Err(source) => Err(ImportError::Account {
                line: at.line,
                key: account.username,
                source,
            }),
        },
        Item::Entry { id, entry } => {
            let key = format!("{id:?}");
            if store
                .entries
                .get(&id)
                .map_err(at.failed(key.clone()))?
                .is_some()
            {
                return Err(at.twice(key));
            }
            store.entries.start(&id, &entry).map_err(at.failed(key))
        }
        Item::Decision(record) => {
            let key = format!("nonce {:?} of {}", record.nonce, record.resource_origin);
            match store
                .records
                .claim_with(&record, Durability::Deferred)
                .map_err(at.failed(key.clone()))?
            {
                Claim::Fresh => Ok(()),
                Claim::Existing(_) | Claim::Collected => Err(at.twice(key)),
            }
        }
        Item::Collected { id, decided_at } => store
            .records
            .restore_collected(&id, decided_at)
            .map_err(at.failed(format!("{id:?}"))),
        Item::Cheq(_) | Item::Nonce { .. } | Item::Execution { .. } => {
            Err(at.elsewhere(Server::Rs))
        }
    }
}

/// Reads an RS stream into `store`, which must be empty, and makes it
/// durable. A failure part way leaves the items before it written:
/// [`check`] the stream first where it can be read twice.
pub fn import_rs(store: &RsStore, input: &mut dyn BufRead) -> Result<Counts, ImportError> {
    ensure_empty_rs(store)?;
    let counts = put_each(input, Server::Rs, &mut |at, item| put_rs(store, at, item))?;
    // Every write so far, of every store in the database (sled); a
    // database server's writes are durable each already.
    store.nonces.flush().map_err(ImportError::Flush)?;
    Ok(counts)
}

/// Writes one item of an RS stream.
fn put_rs(store: &RsStore, at: At, item: Item) -> Result<(), ImportError> {
    match item {
        Item::Cheq(record) => {
            let key = format!("{:?}", record.id);
            if store
                .records
                .create_with(&record, Durability::Deferred)
                .map_err(at.failed(key.clone()))?
            {
                Ok(())
            } else {
                Err(at.twice(format!("{key} (or its result id)")))
            }
        }
        Item::Nonce { nonce, entry } => {
            let key = format!("{nonce:?}");
            match store
                .nonces
                .record_with(&nonce, &entry, Durability::Deferred)
                .map_err(at.failed(key.clone()))?
            {
                RecordOutcome::Fresh => Ok(()),
                RecordOutcome::SameAsBefore(_) | RecordOutcome::Conflict(_) => Err(at.twice(key)),
            }
        }
        Item::Execution { key, result } => {
            let shown = format!("{key:?}");
            match store
                .executions
                .record_with(&key, &result, Durability::Deferred)
                .map_err(at.failed(shown.clone()))?
            {
                Execution::Fresh => Ok(()),
                Execution::Existing(_) => Err(at.twice(shown)),
            }
        }
        Item::Account(_) | Item::Entry { .. } | Item::Decision(_) | Item::Collected { .. } => {
            Err(at.elsewhere(Server::Cs))
        }
    }
}
