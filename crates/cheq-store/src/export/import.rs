//! Putting a read stream into an empty store, through its traits.

use super::tree::TreeBuilder;
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
/// an import writes none). A transparency log begun by a server's first
/// start, with no entry yet, is empty.
pub fn ensure_empty_cs(store: &CsStore) -> Result<(), ImportError> {
    let log_failed = |source| ImportError::Store {
        line: 0,
        kind: "the transparency log",
        key: "(its head)".into(),
        source,
    };
    if let Some(head) = store.log.head().map_err(log_failed)? {
        if head.size > 0 {
            return Err(ImportError::NotEmpty {
                what: "a transparency log",
                first: format!("a tree of {} entries", head.size),
            });
        }
    }
    refuse_if_any("queued log entries", store.log.queued(1), |(id, _)| {
        format!("queue id {id}")
    })?;
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
    )?;
    refuse_if_any(
        "registered resource servers",
        store.registrations.list(),
        |r| format!("{} ({})", r.origin, r.status.as_str()),
    )?;
    // A digest is no secret, and names the token to the operator who
    // issued it no better than its time does.
    refuse_if_any(
        "initial access tokens",
        store.registrations.access_tokens(),
        |(_, created)| format!("one issued at {created} (unix time)"),
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
    )?;
    refuse_if_any(
        "users' settings",
        store.settings.list_after(None, 1),
        |(subject, _)| format!("{subject:?}"),
    )?;
    refuse_if_any("chosen confirmation servers", store.settings.hosts(), |h| {
        h.clone()
    })
}

/// What a CS import brought.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The stream's header.
    pub header: Header,
    /// Its items, by kind.
    pub counts: Counts,
}

/// Reads a CS stream into `store`, which must be empty, and makes it
/// durable. A stream whose transparency log `target` would not sign, or
/// that the store's log is bound against, is refused before anything is
/// written. A failure part way leaves the items before it written:
/// [`check`] the stream first where it can be read twice.
pub fn import_cs(
    store: &CsStore,
    input: &mut dyn BufRead,
    target: &TargetLog,
) -> Result<Imported, ImportError> {
    ensure_empty_cs(store)?;
    let mut import = CsImport {
        store,
        tree: TreeBuilder::default(),
        head: None,
        queued: Vec::new(),
        cleared: false,
    };
    let mut header = None;
    let counts = read_stream(
        input,
        Server::Cs,
        &mut |h| {
            target.accepts(h)?;
            bind_log(store, h)?;
            header = Some(h.clone());
            Ok(())
        },
        &mut |line, item| {
            let at = At {
                line,
                kind: item.kind(),
            };
            import.put(at, item)
        },
    )?;
    let header = header.ok_or(ImportError::Empty)?;
    if header.log_key.is_some() {
        import.finish()?;
    }
    if let Some(flusher) = &store.flusher {
        flusher.wait().map_err(ImportError::Flush)?;
    }
    Ok(Imported { header, counts })
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

/// Binds the store's log to the key of the stream's log (refused when the
/// store's log is bound to another), before any item is written.
fn bind_log(store: &CsStore, header: &Header) -> Result<(), ImportError> {
    let Some(key) = &header.log_key else {
        return Ok(());
    };
    let bound = store
        .log
        .bind_key(key)
        .map_err(|source| ImportError::Store {
            line: 1,
            kind: "the transparency log",
            key: "(its key)".into(),
            source,
        })?;
    if &bound != key {
        return Err(ImportError::LogBound {
            bound,
            stream: key.clone(),
        });
    }
    Ok(())
}

/// A CS import under way: the transparency log's lines are written as
/// they come (its entries a batch at a time, hashed again), its head last.
struct CsImport<'s> {
    store: &'s CsStore,
    tree: TreeBuilder,
    head: Option<(At, crate::tlog::LogHead)>,
    queued: Vec<Vec<u8>>,
    /// Whether the queue the decisions' claims filled was emptied.
    cleared: bool,
}

/// Queued entries written at a time.
const QUEUED_BATCH: usize = 1024;

impl CsImport<'_> {
    /// Empties the queue once: the decisions' claims queued their entries
    /// again, and the moved log's entries and queue hold them already.
    fn clear_queue(&mut self, at: At) -> Result<(), ImportError> {
        if !self.cleared {
            self.store
                .log
                .clear_queue()
                .map_err(at.failed("(the queue)".into()))?;
            self.cleared = true;
        }
        Ok(())
    }

    /// Writes one item.
    fn put(&mut self, at: At, item: Item) -> Result<(), ImportError> {
        if item.is_log() {
            // The log's lines come after every decision.
            self.clear_queue(at)?;
        }
        match item {
            Item::LogHead(head) => {
                self.head = Some((at, head));
                Ok(())
            }
            Item::LogEntry { index, entry } => {
                let part = self.tree.push(entry).map_err(|e| ImportError::Line {
                    line: at.line,
                    cause: LineError::Log(LogLineError::Tree(e)),
                })?;
                match part {
                    Some(part) => self.restore(at, &part, format!("entries up to index {index}")),
                    None => Ok(()),
                }
            }
            Item::LogQueued(entry) => {
                self.queued.push(entry);
                if self.queued.len() >= QUEUED_BATCH {
                    let part = crate::tlog::Restored {
                        queued: std::mem::take(&mut self.queued),
                        ..Default::default()
                    };
                    self.restore(at, &part, "(the queue)".into())?;
                }
                Ok(())
            }
            other => put_cs(self.store, at, other),
        }
    }

    /// Writes a part of the log; `what` names it in an error.
    fn restore(
        &self,
        at: At,
        part: &crate::tlog::Restored,
        what: String,
    ) -> Result<(), ImportError> {
        self.store.log.restore(part).map_err(at.failed(what))
    }

    /// The rest of a stream's log: its last entries, its queue, then its
    /// head.
    fn finish(mut self) -> Result<(), ImportError> {
        let at = self.head.as_ref().map_or(
            At {
                line: 0,
                kind: "log_queued",
            },
            |(at, _)| *at,
        );
        // The queue is the stream's once a log line came (see `put`); with
        // none, what the decisions queued stays, to be sequenced afresh:
        // a stream cut before its log loses no decision from the log.
        let (mut part, _) = self.tree.finish().map_err(|e| ImportError::Line {
            line: at.line,
            cause: LineError::Log(LogLineError::Tree(e)),
        })?;
        part.queued = std::mem::take(&mut self.queued);
        let what = format!("entries from index {} and the queue", part.from);
        self.restore(at, &part, what)?;
        if let Some((at, head)) = &self.head {
            self.store
                .log
                .restore_head(head)
                .map_err(at.failed(format!("a tree of {} entries", head.size)))?;
        }
        Ok(())
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
        Item::Registration(record) => {
            let key = record.origin.clone();
            if store
                .registrations
                .restore(&record)
                .map_err(at.failed(key.clone()))?
            {
                Ok(())
            } else {
                Err(at.twice(key))
            }
        }
        Item::AccessToken { digest, created } => {
            let key = format!("of digest {digest}");
            if store
                .registrations
                .add_access_token(&digest, created)
                .map_err(at.failed(key.clone()))?
            {
                Ok(())
            } else {
                Err(at.twice(key))
            }
        }
        // Written by `CsImport::put`.
        Item::LogHead(_) | Item::LogEntry { .. } | Item::LogQueued(_) => Ok(()),
        Item::Cheq(_)
        | Item::Nonce { .. }
        | Item::Execution { .. }
        | Item::ChosenCs(_)
        | Item::Settings { .. } => Err(at.elsewhere(Server::Rs)),
    }
}

/// Reads an RS stream into `store`, which must be empty, and makes it
/// durable. A failure part way leaves the items before it written:
/// [`check`] the stream first where it can be read twice.
pub fn import_rs(store: &RsStore, input: &mut dyn BufRead) -> Result<Counts, ImportError> {
    ensure_empty_rs(store)?;
    let counts = read_stream(input, Server::Rs, &mut |_| Ok(()), &mut |line, item| {
        let at = At {
            line,
            kind: item.kind(),
        };
        put_rs(store, at, item)
    })?;
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
        // Given once (the reader refuses a repeat); there already when a
        // settings line before it named it.
        Item::ChosenCs(issuer) => store
            .settings
            .restore_host(&issuer)
            .map_err(at.failed(issuer)),
        Item::Settings { subject, settings } => {
            let key = format!("{subject:?}");
            if store
                .settings
                .get(&subject)
                .map_err(at.failed(key.clone()))?
                .is_some()
            {
                return Err(at.twice(key));
            }
            store
                .settings
                .restore(&subject, &settings)
                .map_err(at.failed(key))
        }
        Item::Account(_)
        | Item::Entry { .. }
        | Item::Decision(_)
        | Item::Collected { .. }
        | Item::Registration(_)
        | Item::AccessToken { .. }
        | Item::LogHead(_)
        | Item::LogEntry { .. }
        | Item::LogQueued(_) => Err(at.elsewhere(Server::Cs)),
    }
}
