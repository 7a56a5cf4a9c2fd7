//! Writing a store out as the JSON lines of [`super::FORMAT`].

use super::*;
use crate::cs::CsStore;
use crate::rs::RsStore;
use crate::StoreError;
use std::io::Write;

// ---- export ----

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("reading the store: {0}")]
    Store(#[from] StoreError),
    #[error("writing the export: {0}")]
    Write(#[source] std::io::Error),
    #[error("encoding a {kind} item: {source}")]
    Encode {
        kind: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("the store listed the {what} after {after:?} again: it does not move on")]
    Stuck { what: &'static str, after: String },
    #[error("the transparency log has a head and is bound to no key")]
    LogWithoutKey,
    #[error(
        "the transparency log has queued entries and is bound to no key: a log's lines \
         travel only with its key; start the confirmation server once with its log on \
         (which binds the log to its key), stop it, and export again"
    )]
    QueueWithoutKey,
}

/// Writes the header, the items and the end line.
struct Writer<'a> {
    out: &'a mut dyn Write,
    counts: Counts,
}

impl<'a> Writer<'a> {
    fn start(
        out: &'a mut dyn Write,
        server: Server,
        now: chrono::DateTime<chrono::Utc>,
        log_key: Option<String>,
    ) -> Result<Self, ExportError> {
        let header = Header {
            format: FORMAT.into(),
            version: VERSION,
            server,
            exported_at: now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            log_key,
        };
        let mut w = Writer {
            out,
            counts: Counts::default(),
        };
        let line = serde_json::to_string(&header).map_err(|source| ExportError::Encode {
            kind: "header",
            source,
        })?;
        w.line(&line)?;
        Ok(w)
    }

    fn line(&mut self, line: &str) -> Result<(), ExportError> {
        self.out
            .write_all(line.as_bytes())
            .and_then(|()| self.out.write_all(b"\n"))
            .map_err(ExportError::Write)
    }

    fn item(&mut self, item: &Item) -> Result<(), ExportError> {
        let kind = item.kind();
        let line = item
            .to_line()
            .map_err(|source| ExportError::Encode { kind, source })?;
        self.line(&line)?;
        self.counts.add(kind);
        Ok(())
    }

    fn end(mut self) -> Result<Counts, ExportError> {
        let line = with_kind("end", serde_json::json!({ "items": self.counts.total() }));
        self.line(&line)?;
        self.out.flush().map_err(ExportError::Write)?;
        Ok(self.counts)
    }
}

/// Every item `page` lists, a page at a time: `page(after)` gives the
/// items after the key `after`, `key` names an item's key.
fn each_page<T>(
    what: &'static str,
    mut page: impl FnMut(Option<&str>) -> Result<Vec<T>, StoreError>,
    key: impl Fn(&T) -> String,
    mut each: impl FnMut(T) -> Result<(), ExportError>,
) -> Result<(), ExportError> {
    let mut after: Option<String> = None;
    loop {
        let items = page(after.as_deref())?;
        let full = items.len() >= PAGE;
        let Some(last) = items.last().map(&key) else {
            return Ok(());
        };
        if after.as_deref() == Some(last.as_str()) {
            return Err(ExportError::Stuck { what, after: last });
        }
        for item in items {
            each(item)?;
        }
        if !full {
            return Ok(());
        }
        after = Some(last);
    }
}

/// Writes everything durable of a CS store to `out`.
pub fn export_cs(
    store: &CsStore,
    out: &mut dyn Write,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Counts, ExportError> {
    let log_key = store.log.bound_key()?;
    let head = store.log.head()?;
    if log_key.is_none() {
        // A stream's log lines need the key they are bound to; a store's
        // decisions queue their entries only into a log that has one.
        if head.is_some() {
            return Err(ExportError::LogWithoutKey);
        }
        if !store.log.queued(1)?.is_empty() {
            return Err(ExportError::QueueWithoutKey);
        }
    }
    let mut w = Writer::start(out, Server::Cs, now, log_key)?;
    each_page(
        "accounts",
        |after| store.accounts.list_after(after, PAGE),
        |a| a.username.clone(),
        |a| w.item(&Item::Account(a)),
    )?;
    each_page(
        "started confirmations",
        |after| store.entries.list_after(after, PAGE),
        |(id, _)| id.clone(),
        |(id, entry)| w.item(&Item::Entry { id, entry }),
    )?;
    each_page(
        "decisions",
        |after| store.records.list_after(after, PAGE),
        |(id, _)| id.clone(),
        |(_, r)| w.item(&Item::Decision(Box::new(r))),
    )?;
    each_page(
        "collected decisions",
        |after| store.records.collected_after(after, PAGE),
        |(id, _)| id.clone(),
        |(id, decided_at)| w.item(&Item::Collected { id, decided_at }),
    )?;
    // A host's registrations are few (one per RS it serves): read whole.
    for record in store.registrations.list()? {
        w.item(&Item::Registration(Box::new(record)))?;
    }
    for (digest, created) in store.registrations.access_tokens()? {
        w.item(&Item::AccessToken { digest, created })?;
    }
    export_log(store.log.as_ref(), head, &mut w)?;
    w.end()
}

/// The transparency log's lines: its head, every entry of its tree in
/// order, then its queue, oldest first.
fn export_log(
    log: &dyn crate::tlog::LogStore,
    head: Option<LogHead>,
    w: &mut Writer<'_>,
) -> Result<(), ExportError> {
    if let Some(head) = head {
        let size = head.size;
        w.item(&Item::LogHead(head))?;
        let mut index = 0;
        while index < size {
            let count = (size - index).min(PAGE as u64);
            for entry in log.entries(index, count)? {
                w.item(&Item::LogEntry { index, entry })?;
                index += 1;
            }
        }
    }
    each_page(
        "queued log entries",
        |after| {
            let after = after.and_then(|a| a.parse().ok());
            log.queued_after(after, PAGE)
        },
        |(id, _)| id.to_string(),
        |(_, entry)| w.item(&Item::LogQueued(entry)),
    )
}

/// Writes everything durable of an RS store to `out`.
pub fn export_rs(
    store: &RsStore,
    out: &mut dyn Write,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Counts, ExportError> {
    let mut w = Writer::start(out, Server::Rs, now, None)?;
    each_page(
        "nonces",
        |after| store.nonces.list_after(after, PAGE),
        |(nonce, _)| nonce.clone(),
        |(nonce, entry)| w.item(&Item::Nonce { nonce, entry }),
    )?;
    each_page(
        "CHEQ records",
        |after| store.records.list_after(after, PAGE),
        |r| r.id.clone(),
        |r| w.item(&Item::Cheq(Box::new(r))),
    )?;
    each_page(
        "executions",
        |after| store.executions.list_after(after, PAGE),
        |(key, _)| key.clone(),
        |(key, result)| w.item(&Item::Execution { key, result }),
    )?;
    // The CSes users chose are few: read whole, before the settings that
    // name them, so that an import keeps the order they were first chosen.
    for issuer in store.settings.hosts()? {
        w.item(&Item::ChosenCs(issuer))?;
    }
    each_page(
        "users' settings",
        |after| store.settings.list_after(after, PAGE),
        |(subject, _)| subject.clone(),
        |(subject, settings)| w.item(&Item::Settings { subject, settings }),
    )?;
    w.end()
}
