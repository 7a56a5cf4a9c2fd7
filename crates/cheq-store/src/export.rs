//! Moving a host's durable state from one store to another (`cheq store
//! export`, `cheq store import`): a versioned stream of JSON lines, written
//! from the store traits and read back through them, so that either backend
//! (sled, PostgreSQL) can be the source and either the target.
//!
//! The stream is UTF-8 text, one JSON object a line. The first line is the
//! header, `{"format":"cheq-store-export","version":1,"server":"cs",
//! "exported_at":"…"}` (`server`: `cs` or `rs`); then one object per item,
//! each with a `kind`; the last line is `{"kind":"end","items":N}`, so that
//! a stream cut at a line boundary is refused as well as one cut inside a
//! line.
//!
//! | kind | server | what |
//! |---|---|---|
//! | `account` | CS | an [`Account`]: its password and PIN hashes as stored (hashes, never a secret in clear) |
//! | `entry` | CS | a started confirmation: `id` and the [`ConfirmationEntry`] members |
//! | `decision` | CS | a [`DecisionRecord`] as stored: its document (a sealed one stays sealed: its key is a file in the data directory) and its delivery, so that a pending delivery (the outbox) goes on from the new store |
//! | `collected` | CS | the id of a decision collected as old history (`history_days`) and its decision time: its key is never countersigned again (§6) |
//! | `cheq` | RS | a [`CheqRecord`] in its state |
//! | `nonce` | RS | a decided nonce: the digest of its decision document and its data (base64url), its expiry |
//! | `execution` | RS | an idempotency key of the demo tools and the operation's result |
//!
//! Left out: the CS's sessions (whoever was signed in signs in again; a
//! session can hold a provider's ID token, which has no business in a
//! file) and its limiter state (failures counted over minutes: a move
//! forgives them).
//!
//! Import goes into an empty store only ([`ImportError::NotEmpty`]), and
//! writes each item through the trait method that creates it (a claim, an
//! insert if absent), which keeps the state given as it is; so each backend
//! builds its own indexes, and an item given twice is refused.

use super::cs::{Account, AccountPutError, Claim, ConfirmationEntry, CsStore, DecisionRecord};
use super::rs::{CheqRecord, Execution, RsStore};
use super::{NonceEntry, RecordOutcome, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};

/// The `format` of the header line.
pub const FORMAT: &str = "cheq-store-export";

/// The version of the stream this cheq writes and reads.
pub const VERSION: u64 = 1;

/// The longest line read, in bytes (an item is a few KiB; a demo tool's
/// result or a large document may be more).
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// How many items are read from a store at a time.
const PAGE: usize = 256;

/// Which server a stream is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Server {
    /// The confirmation server (`cheq serve`).
    Cs,
    /// The reference resource server (`cheq resource-server`).
    Rs,
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Server::Cs => "a confirmation server",
            Server::Rs => "a resource server",
        })
    }
}

/// The first line of a stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u64,
    pub server: Server,
    /// When the export began (RFC 3339).
    pub exported_at: String,
}

/// One item of a stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Account(Account),
    Entry {
        id: String,
        entry: ConfirmationEntry,
    },
    Decision(Box<DecisionRecord>),
    Collected {
        id: String,
        decided_at: i64,
    },
    Cheq(Box<CheqRecord>),
    Nonce {
        nonce: String,
        entry: NonceEntry,
    },
    Execution {
        key: String,
        result: Value,
    },
}

/// A started confirmation as a line holds it.
#[derive(Serialize, Deserialize)]
struct EntryItem {
    id: String,
    #[serde(flatten)]
    entry: ConfirmationEntry,
}

/// A collected decision key as a line holds it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CollectedItem {
    id: String,
    decided_at: i64,
}

/// A nonce as a line holds it: bytes in base64url.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NonceItem {
    nonce: String,
    digest: String,
    expires_at: i64,
    data: String,
}

/// An execution as a line holds it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecutionItem {
    key: String,
    result: Value,
}

/// The end line.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndItem {
    items: u64,
}

impl Item {
    /// The item's `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Item::Account(_) => "account",
            Item::Entry { .. } => "entry",
            Item::Decision(_) => "decision",
            Item::Collected { .. } => "collected",
            Item::Cheq(_) => "cheq",
            Item::Nonce { .. } => "nonce",
            Item::Execution { .. } => "execution",
        }
    }

    /// The item as a line (without its newline).
    pub fn to_line(&self) -> Result<String, serde_json::Error> {
        let value = match self {
            Item::Account(a) => serde_json::to_value(a)?,
            Item::Entry { id, entry } => serde_json::to_value(EntryItem {
                id: id.clone(),
                entry: entry.clone(),
            })?,
            Item::Decision(r) => serde_json::to_value(r)?,
            Item::Collected { id, decided_at } => serde_json::to_value(CollectedItem {
                id: id.clone(),
                decided_at: *decided_at,
            })?,
            Item::Cheq(r) => serde_json::to_value(r)?,
            Item::Nonce { nonce, entry } => serde_json::to_value(NonceItem {
                nonce: nonce.clone(),
                digest: cheq_core::sign::b64::encode(entry.digest),
                expires_at: entry.expires_at,
                data: cheq_core::sign::b64::encode(&entry.data),
            })?,
            Item::Execution { key, result } => serde_json::to_value(ExecutionItem {
                key: key.clone(),
                result: result.clone(),
            })?,
        };
        Ok(with_kind(self.kind(), value))
    }
}

/// `{"kind": kind, …value's members}` as text.
fn with_kind(kind: &str, value: Value) -> String {
    let mut line = Map::new();
    line.insert("kind".into(), Value::String(kind.into()));
    match value {
        Value::Object(members) => line.extend(members),
        other => {
            line.insert("value".into(), other);
        }
    }
    Value::Object(line).to_string()
}

/// How many items of each kind a stream held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts(BTreeMap<&'static str, u64>);

impl Counts {
    fn add(&mut self, kind: &'static str) {
        *self.0.entry(kind).or_default() += 1;
    }

    /// All items.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// The items of `kind`.
    pub fn of(&self, kind: &str) -> u64 {
        self.0.get(kind).copied().unwrap_or(0)
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let total = self.total();
        write!(f, "{total} item{}", if total == 1 { "" } else { "s" })?;
        if total > 0 {
            let parts: Vec<String> = self.0.iter().map(|(k, n)| format!("{n} {k}")).collect();
            write!(f, " ({})", parts.join(", "))?;
        }
        Ok(())
    }
}

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
    ) -> Result<Self, ExportError> {
        let header = Header {
            format: FORMAT.into(),
            version: VERSION,
            server,
            exported_at: now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
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
    let mut w = Writer::start(out, Server::Cs, now)?;
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
    w.end()
}

/// Writes everything durable of an RS store to `out`.
pub fn export_rs(
    store: &RsStore,
    out: &mut dyn Write,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Counts, ExportError> {
    let mut w = Writer::start(out, Server::Rs, now)?;
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
    w.end()
}

// ---- reading a stream ----

/// What is wrong with the header line.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("it is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("it is not the header of a cheq store export (format {FORMAT:?})")]
    NotAnExport,
    #[error(
        "version {0} of the export format is unknown to this cheq, which reads version {VERSION}"
    )]
    UnknownVersion(u64),
    #[error("the header is malformed: {0}")]
    Malformed(#[source] serde_json::Error),
    #[error("this is an export of {stream}, and the configuration is of {target}")]
    WrongServer { stream: Server, target: Server },
}

/// What is wrong with an item's line.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("the line is longer than {MAX_LINE} bytes")]
    TooLong,
    #[error("the line is not UTF-8")]
    NotUtf8,
    #[error("the line is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("the line is not a JSON object")]
    NotAnObject,
    #[error("the line has no \"kind\"")]
    NoKind,
    #[error("unknown kind {0:?}")]
    UnknownKind(String),
    #[error("{kind} items belong to {server}'s export")]
    OtherServer { kind: &'static str, server: Server },
    #[error("the {kind} item is malformed: {source}")]
    Malformed {
        kind: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("the {kind} item's {member} is invalid: {reason}")]
    Invalid {
        kind: &'static str,
        member: &'static str,
        reason: &'static str,
    },
    #[error("a line after the end line")]
    AfterEnd,
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("reading the export: {0}")]
    Read(#[source] std::io::Error),
    #[error("the export is empty: its first line must be the header")]
    Empty,
    #[error("line 1: {0}")]
    Header(#[source] HeaderError),
    #[error("line {line}: {cause}")]
    Line {
        line: u64,
        #[source]
        cause: LineError,
    },
    #[error("the export stops at line {lines} without its end line: it was cut short")]
    Truncated { lines: u64 },
    #[error("line {line}: the end line counts {said} items, and the export holds {read}")]
    Count { line: u64, said: u64, read: u64 },
    #[error(
        "the store is not empty: it holds {what} (the first: {first}); import goes into an \
         empty store only"
    )]
    NotEmpty { what: &'static str, first: String },
    #[error("line {line}: the {kind} {key} is in the store already (given twice?)")]
    Duplicate {
        line: u64,
        kind: &'static str,
        key: String,
    },
    #[error("line {line}: writing the {kind} {key}: {source}")]
    Store {
        line: u64,
        kind: &'static str,
        key: String,
        #[source]
        source: StoreError,
    },
    #[error("line {line}: the account {key:?}: {source}")]
    Account {
        line: u64,
        key: String,
        #[source]
        source: AccountPutError,
    },
    #[error("making the import durable: {0}")]
    Flush(#[source] StoreError),
}

impl ImportError {
    /// Whether the import may have written items before it failed: any
    /// failure after the header was read into an empty store.
    pub fn wrote_some(&self) -> bool {
        !matches!(
            self,
            ImportError::Empty | ImportError::Header(_) | ImportError::NotEmpty { .. }
        )
    }
}

/// Reads the next line into `buf`; `None` at the end of the input.
fn next_line<'b>(
    input: &mut dyn BufRead,
    buf: &'b mut Vec<u8>,
    line: u64,
) -> Result<Option<&'b str>, ImportError> {
    buf.clear();
    let limit = u64::try_from(MAX_LINE).unwrap_or(u64::MAX) + 1;
    let n = (&mut *input)
        .take(limit)
        .read_until(b'\n', buf)
        .map_err(ImportError::Read)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    } else if buf.len() > MAX_LINE {
        return Err(ImportError::Line {
            line,
            cause: LineError::TooLong,
        });
    }
    std::str::from_utf8(buf)
        .map(Some)
        .map_err(|_| ImportError::Line {
            line,
            cause: LineError::NotUtf8,
        })
}

/// Checks the header line against the server the stream is for.
fn read_header(text: &str, target: Server) -> Result<Header, HeaderError> {
    let value: Value = serde_json::from_str(text).map_err(HeaderError::NotJson)?;
    if value.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return Err(HeaderError::NotAnExport);
    }
    match value.get("version").and_then(Value::as_u64) {
        Some(VERSION) => {}
        Some(other) => return Err(HeaderError::UnknownVersion(other)),
        None => {}
    }
    let header: Header = serde_json::from_value(value).map_err(HeaderError::Malformed)?;
    if header.server != target {
        return Err(HeaderError::WrongServer {
            stream: header.server,
            target,
        });
    }
    Ok(header)
}

/// A line read: an item, or the end line.
enum Parsed {
    Item(Item),
    End(u64),
}

/// The members of a line, as a `T`.
fn members<T: serde::de::DeserializeOwned>(
    kind: &'static str,
    members: Map<String, Value>,
) -> Result<T, LineError> {
    serde_json::from_value(Value::Object(members))
        .map_err(|source| LineError::Malformed { kind, source })
}

/// base64url bytes of an item's member.
fn bytes_of(kind: &'static str, member: &'static str, text: &str) -> Result<Vec<u8>, LineError> {
    cheq_core::sign::b64::decode(text).ok_or(LineError::Invalid {
        kind,
        member,
        reason: "not base64url",
    })
}

/// Reads one item's line of a stream of `server`.
fn read_line(text: &str, server: Server) -> Result<Parsed, LineError> {
    let value: Value = serde_json::from_str(text).map_err(LineError::NotJson)?;
    let Value::Object(mut fields) = value else {
        return Err(LineError::NotAnObject);
    };
    let kind = match fields.remove("kind") {
        Some(Value::String(kind)) => kind,
        _ => return Err(LineError::NoKind),
    };
    let (kind, of): (&'static str, Server) = match kind.as_str() {
        "end" => {
            let end: EndItem = members("end", fields)?;
            return Ok(Parsed::End(end.items));
        }
        "account" => ("account", Server::Cs),
        "entry" => ("entry", Server::Cs),
        "decision" => ("decision", Server::Cs),
        "collected" => ("collected", Server::Cs),
        "cheq" => ("cheq", Server::Rs),
        "nonce" => ("nonce", Server::Rs),
        "execution" => ("execution", Server::Rs),
        _ => return Err(LineError::UnknownKind(kind)),
    };
    if of != server {
        return Err(LineError::OtherServer { kind, server: of });
    }
    let item = match kind {
        "account" => Item::Account(members(kind, fields)?),
        "entry" => {
            let e: EntryItem = members(kind, fields)?;
            Item::Entry {
                id: e.id,
                entry: e.entry,
            }
        }
        "decision" => Item::Decision(Box::new(members(kind, fields)?)),
        "collected" => {
            let c: CollectedItem = members(kind, fields)?;
            Item::Collected {
                id: c.id,
                decided_at: c.decided_at,
            }
        }
        "cheq" => Item::Cheq(Box::new(members(kind, fields)?)),
        "nonce" => {
            let n: NonceItem = members(kind, fields)?;
            let digest: [u8; 32] =
                bytes_of(kind, "digest", &n.digest)?
                    .try_into()
                    .map_err(|_| LineError::Invalid {
                        kind,
                        member: "digest",
                        reason: "not 32 bytes",
                    })?;
            let entry = NonceEntry {
                digest,
                expires_at: n.expires_at,
                data: bytes_of(kind, "data", &n.data)?,
            };
            super::validate(&n.nonce, &entry).map_err(|_| LineError::Invalid {
                kind,
                member: "nonce",
                reason: "an empty or oversized nonce, or oversized data",
            })?;
            Item::Nonce {
                nonce: n.nonce,
                entry,
            }
        }
        _ => {
            let e: ExecutionItem = members(kind, fields)?;
            Item::Execution {
                key: e.key,
                result: e.result,
            }
        }
    };
    Ok(Parsed::Item(item))
}

/// Reads a whole stream of `server`, handing each item and its line number
/// to `sink`; checks that it ends with its end line and that the line
/// counts its items.
pub fn read_stream(
    input: &mut dyn BufRead,
    server: Server,
    sink: &mut dyn FnMut(u64, Item) -> Result<(), ImportError>,
) -> Result<Counts, ImportError> {
    let mut buf = Vec::new();
    let Some(first) = next_line(input, &mut buf, 1)? else {
        return Err(ImportError::Empty);
    };
    read_header(first, server).map_err(ImportError::Header)?;
    let mut counts = Counts::default();
    let mut end: Option<(u64, u64)> = None;
    let mut line = 1;
    loop {
        line += 1;
        let Some(text) = next_line(input, &mut buf, line)? else {
            break;
        };
        let at = |cause| ImportError::Line { line, cause };
        if end.is_some() {
            return Err(at(LineError::AfterEnd));
        }
        match read_line(text, server).map_err(at)? {
            Parsed::End(said) => end = Some((line, said)),
            Parsed::Item(item) => {
                let kind = item.kind();
                sink(line, item)?;
                counts.add(kind);
            }
        }
    }
    match end {
        None => Err(ImportError::Truncated { lines: line - 1 }),
        Some((line, said)) if said != counts.total() => Err(ImportError::Count {
            line,
            said,
            read: counts.total(),
        }),
        Some(_) => Ok(counts),
    }
}

/// Reads a whole stream of `server` without writing anything: what an
/// import would find wrong with it before it writes.
pub fn check(input: &mut dyn BufRead, server: Server) -> Result<Counts, ImportError> {
    read_stream(input, server, &mut |_, _| Ok(()))
}

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
    let counts = read_stream(input, Server::Cs, &mut |line, item| {
        put_cs(store, line, item)
    })?;
    if let Some(flusher) = &store.flusher {
        flusher.wait().map_err(ImportError::Flush)?;
    }
    Ok(counts)
}

/// Writes one item of a CS stream.
fn put_cs(store: &CsStore, line: u64, item: Item) -> Result<(), ImportError> {
    let kind = item.kind();
    let failed = |key: String| {
        move |source| ImportError::Store {
            line,
            kind,
            key,
            source,
        }
    };
    let twice = |key: String| ImportError::Duplicate { line, kind, key };
    match item {
        Item::Account(account) => match store.accounts.put(&account, false) {
            Ok(()) => Ok(()),
            Err(AccountPutError::Exists(name)) => Err(twice(format!("{name:?}"))),
            Err(source) => Err(ImportError::Account {
                line,
                key: account.username,
                source,
            }),
        },
        Item::Entry { id, entry } => {
            let key = format!("{id:?}");
            if store
                .entries
                .get(&id)
                .map_err(failed(key.clone()))?
                .is_some()
            {
                return Err(twice(key));
            }
            store.entries.start(&id, &entry).map_err(failed(key))
        }
        Item::Decision(record) => {
            let key = format!("nonce {:?} of {}", record.nonce, record.resource_origin);
            match store
                .records
                .claim_unflushed(&record)
                .map_err(failed(key.clone()))?
            {
                Claim::Fresh => Ok(()),
                Claim::Existing(_) | Claim::Collected => Err(twice(key)),
            }
        }
        Item::Collected { id, decided_at } => store
            .records
            .restore_collected(&id, decided_at)
            .map_err(failed(format!("{id:?}"))),
        Item::Cheq(_) | Item::Nonce { .. } | Item::Execution { .. } => Err(ImportError::Line {
            line,
            cause: LineError::OtherServer {
                kind,
                server: Server::Rs,
            },
        }),
    }
}

/// Reads an RS stream into `store`, which must be empty, and makes it
/// durable. A failure part way leaves the items before it written:
/// [`check`] the stream first where it can be read twice.
pub fn import_rs(store: &RsStore, input: &mut dyn BufRead) -> Result<Counts, ImportError> {
    ensure_empty_rs(store)?;
    let counts = read_stream(input, Server::Rs, &mut |line, item| {
        put_rs(store, line, item)
    })?;
    // Every write so far, of every store in the database (sled); a
    // database server's writes are durable each already.
    store.nonces.flush().map_err(ImportError::Flush)?;
    Ok(counts)
}

/// Writes one item of an RS stream.
fn put_rs(store: &RsStore, line: u64, item: Item) -> Result<(), ImportError> {
    let kind = item.kind();
    let failed = |key: String| {
        move |source| ImportError::Store {
            line,
            kind,
            key,
            source,
        }
    };
    let twice = |key: String| ImportError::Duplicate { line, kind, key };
    match item {
        Item::Cheq(record) => {
            let key = format!("{:?}", record.id);
            if store
                .records
                .create_unflushed(&record)
                .map_err(failed(key.clone()))?
            {
                Ok(())
            } else {
                Err(twice(format!("{key} (or its result id)")))
            }
        }
        Item::Nonce { nonce, entry } => {
            let key = format!("{nonce:?}");
            match store
                .nonces
                .record_unflushed(&nonce, &entry)
                .map_err(failed(key.clone()))?
            {
                RecordOutcome::Fresh => Ok(()),
                RecordOutcome::SameAsBefore(_) | RecordOutcome::Conflict(_) => Err(twice(key)),
            }
        }
        Item::Execution { key, result } => {
            let shown = format!("{key:?}");
            match store
                .executions
                .record_unflushed(&key, &result)
                .map_err(failed(shown.clone()))?
            {
                Execution::Fresh => Ok(()),
                Execution::Existing(_) => Err(twice(shown)),
            }
        }
        Item::Account(_) | Item::Entry { .. } | Item::Decision(_) | Item::Collected { .. } => {
            Err(ImportError::Line {
                line,
                cause: LineError::OtherServer {
                    kind,
                    server: Server::Cs,
                },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(lines: &[&str]) -> Vec<u8> {
        let mut s = lines.join("\n");
        s.push('\n');
        s.into_bytes()
    }

    const HEADER: &str = r#"{"format":"cheq-store-export","version":1,"server":"rs","exported_at":"2026-01-01T00:00:00Z"}"#;

    fn checked(bytes: &[u8]) -> Result<Counts, ImportError> {
        check(&mut &bytes[..], Server::Rs)
    }

    #[test]
    fn a_well_formed_stream_is_counted() {
        let nonce = r#"{"kind":"nonce","nonce":"n1","digest":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","expires_at":5,"data":"YWNjZXB0"}"#;
        let exec = r#"{"kind":"execution","key":"k","result":{"ok":true}}"#;
        let counts = checked(&stream(&[
            HEADER,
            nonce,
            exec,
            r#"{"kind":"end","items":2}"#,
        ]))
        .unwrap();
        assert_eq!((counts.of("nonce"), counts.of("execution")), (1, 1));
        assert_eq!(counts.to_string(), "2 items (1 execution, 1 nonce)");
    }

    #[test]
    fn every_fault_names_its_line() {
        let end = r#"{"kind":"end","items":0}"#;
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "the export is empty"),
            (stream(&["{"]), "line 1: it is not JSON"),
            (stream(&[r#"{"format":"other"}"#]), "line 1: it is not the header"),
            (
                stream(&[&HEADER.replace("\"version\":1", "\"version\":2")]),
                "line 1: version 2 of the export format is unknown",
            ),
            (
                stream(&[&HEADER.replace("\"rs\"", "\"cs\"")]),
                "line 1: this is an export of a confirmation server, and the configuration is of a resource server",
            ),
            (stream(&[HEADER, "{\"kind\":\"nonce\",", end]), "line 2: the line is not JSON"),
            (stream(&[HEADER, "[1]", end]), "line 2: the line is not a JSON object"),
            (stream(&[HEADER, "{}", end]), "line 2: the line has no \"kind\""),
            (stream(&[HEADER, r#"{"kind":"x"}"#, end]), "line 2: unknown kind \"x\""),
            (
                stream(&[HEADER, r#"{"kind":"account","username":"a"}"#, end]),
                "line 2: account items belong to a confirmation server's export",
            ),
            (
                stream(&[HEADER, r#"{"kind":"execution","key":1,"result":null}"#, end]),
                "line 2: the execution item is malformed",
            ),
            (
                stream(&[HEADER, r#"{"kind":"nonce","nonce":"n","digest":"AA","expires_at":1,"data":""}"#, end]),
                "line 2: the nonce item's digest is invalid: not 32 bytes",
            ),
            (stream(&[HEADER]), "the export stops at line 1 without its end line"),
            (
                stream(&[HEADER, r#"{"kind":"end","items":3}"#]),
                "line 2: the end line counts 3 items, and the export holds 0",
            ),
            (stream(&[HEADER, end, end]), "line 3: a line after the end line"),
        ];
        for (bytes, expected) in cases {
            let e = checked(&bytes).unwrap_err().to_string();
            assert!(e.starts_with(expected), "{expected:?}: got {e:?}");
        }
        let mut not_utf8 = stream(&[HEADER]);
        not_utf8.extend_from_slice(b"\xff\n");
        assert!(checked(&not_utf8)
            .unwrap_err()
            .to_string()
            .starts_with("line 2: the line is not UTF-8"));
    }
}
