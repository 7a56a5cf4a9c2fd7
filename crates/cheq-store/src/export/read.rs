//! Reading a stream back: its header, each line by kind, with the line
//! number of whatever is wrong.

use super::*;
use crate::cs::AccountPutError;
use crate::StoreError;
use serde_json::{Map, Value};
use std::io::{BufRead, Read};

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
            crate::validate(&n.nonce, &entry).map_err(|_| LineError::Invalid {
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
