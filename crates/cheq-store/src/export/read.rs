//! Reading a stream back: its header, each line by kind, with the line
//! number of whatever is wrong; the transparency log's lines checked as a
//! whole (every entry in order, the tree they make the one the signed head
//! names, signed by the key the header names).

use super::tree::TreeBuilder;
use super::*;
use cheq_core::tlog::LogVerifier;
use serde_json::{Map, Value};
use std::io::{BufRead, Read};

// ---- reading a stream ----

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
        Some(v) if READS.contains(&v) => {}
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
    if let Some(key) = &header.log_key {
        if header.version == 1 {
            return Err(HeaderError::LogKeyInVersion1);
        }
        LogVerifier::new(key).map_err(|_| HeaderError::BadLogKey(key.clone()))?;
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
        "registration" => ("registration", Server::Cs),
        "initial_access_token" => ("initial_access_token", Server::Cs),
        "log_head" => ("log_head", Server::Cs),
        "log_entry" => ("log_entry", Server::Cs),
        "log_queued" => ("log_queued", Server::Cs),
        "cheq" => ("cheq", Server::Rs),
        "nonce" => ("nonce", Server::Rs),
        "execution" => ("execution", Server::Rs),
        "chosen_cs" => ("chosen_cs", Server::Rs),
        "settings" => ("settings", Server::Rs),
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
        "registration" => {
            let r: RegistrationItem = members(kind, fields)?;
            let record = RegisteredRecord::from(r);
            check_registration(&record)?;
            Item::Registration(Box::new(record))
        }
        "initial_access_token" => {
            let t: AccessTokenItem = members(kind, fields)?;
            let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
            if t.digest.len() != 64 || !t.digest.chars().all(hex) {
                return Err(LineError::Invalid {
                    kind,
                    member: "digest",
                    reason: "not a SHA-256 digest in lowercase hex",
                });
            }
            Item::AccessToken {
                digest: t.digest,
                created: t.created,
            }
        }
        "log_head" => {
            let h: LogHeadItem = members(kind, fields)?;
            let root: [u8; 32] =
                bytes_of(kind, "root", &h.root)?
                    .try_into()
                    .map_err(|_| LineError::Invalid {
                        kind,
                        member: "root",
                        reason: "not 32 bytes",
                    })?;
            Item::LogHead(LogHead {
                size: h.size,
                root,
                checkpoint: h.checkpoint.into_bytes(),
            })
        }
        "log_entry" => {
            let e: LogEntryItem = members(kind, fields)?;
            Item::LogEntry {
                index: e.index,
                entry: bytes_of(kind, "entry", &e.entry)?,
            }
        }
        "log_queued" => {
            let q: LogQueuedItem = members(kind, fields)?;
            Item::LogQueued(bytes_of(kind, "entry", &q.entry)?)
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
        "chosen_cs" => {
            let c: ChosenCsItem = members(kind, fields)?;
            if !is_origin(&c.issuer) {
                return Err(LineError::Invalid {
                    kind,
                    member: "issuer",
                    reason: "not an origin (scheme://host[:port])",
                });
            }
            Item::ChosenCs(c.issuer)
        }
        "settings" => {
            let s: SettingsItem = members(kind, fields)?;
            let invalid = |member, reason| LineError::Invalid {
                kind,
                member,
                reason,
            };
            if s.subject.is_empty() {
                return Err(invalid("subject", "empty"));
            }
            if s.cs.as_deref().is_some_and(|cs| !is_origin(cs)) {
                return Err(invalid(
                    "cs",
                    "not an origin (a user of the RS's default CS has none)",
                ));
            }
            if s.generation == 0 {
                return Err(invalid(
                    "generation",
                    "0, and stored settings are at generation 1 or more",
                ));
            }
            Item::Settings {
                subject: s.subject,
                settings: UserSettings {
                    cs: s.cs,
                    rules: s.rules,
                    generation: s.generation,
                },
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

/// What a registration's record holds as a CS writes it: its origin as
/// `scheme://host[:port]`, its endpoints on that origin, or no
/// token_endpoint when it is an origin blocked before it registered (which
/// stays blocked). Its times are as the instances' clocks gave them, unchecked.
fn check_registration(r: &RegisteredRecord) -> Result<(), LineError> {
    let invalid = |member, reason| LineError::Invalid {
        kind: "registration",
        member,
        reason,
    };
    let is_web = r.origin.starts_with("https://") || r.origin.starts_with("http://");
    if !is_web || cheq_core::discovery::origin(&r.origin).as_deref() != Some(r.origin.as_str()) {
        return Err(invalid(
            "origin",
            "not an http(s) origin as a registration names it (scheme://host[:port])",
        ));
    }
    if r.is_placeholder() {
        if r.status != RegistrationStatus::Blocked {
            return Err(invalid(
                "status",
                "active, and the record has no token_endpoint (only an origin blocked before \
                 it registered has none)",
            ));
        }
    } else {
        for (member, uri) in [
            ("resource_prefix", &r.resource_prefix),
            ("jwks_uri", &r.jwks_uri),
            ("token_endpoint", &r.token_endpoint),
        ] {
            if cheq_core::discovery::origin(uri).as_deref() != Some(r.origin.as_str()) {
                return Err(invalid(member, "not on the record's origin"));
            }
        }
    }
    Ok(())
}

/// The registrations' keys, and the chosen CSes, read so far, with their
/// lines: a key given twice is refused when the stream is read, before an
/// import writes anything. They are few (one per RS a host serves, the
/// tokens its operator issued, the CSes its users chose), unlike the other
/// kinds, whose repeats the store refuses as they are written.
#[derive(Default)]
struct Keys {
    origins: std::collections::HashMap<String, u64>,
    digests: std::collections::HashMap<String, u64>,
    hosts: std::collections::HashMap<String, u64>,
}

impl Keys {
    fn next(&mut self, line: u64, item: &Item) -> Result<(), LineError> {
        let (seen, key) = match item {
            Item::Registration(r) => (&mut self.origins, &r.origin),
            Item::AccessToken { digest, .. } => (&mut self.digests, digest),
            Item::ChosenCs(issuer) => (&mut self.hosts, issuer),
            _ => return Ok(()),
        };
        match seen.entry(key.clone()) {
            std::collections::hash_map::Entry::Occupied(first) => Err(LineError::Repeated {
                kind: item.kind(),
                key: key.clone(),
                first: *first.get(),
            }),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(line);
                Ok(())
            }
        }
    }
}

/// The transparency log's lines read so far, checked as they come.
struct LogLines {
    /// The stream's version: one of 1 holds no log lines.
    version: u64,
    /// The key the header names: a stream without one holds no log lines
    /// (its decisions queue their entries again when imported).
    verifier: Option<LogVerifier>,
    head: Option<LogHead>,
    tree: TreeBuilder,
    queued: bool,
    /// Whether a log line was read: every other kind comes before.
    begun: bool,
}

impl LogLines {
    fn new(header: &Header) -> LogLines {
        LogLines {
            version: header.version,
            // Checked when the header was read.
            verifier: header
                .log_key
                .as_deref()
                .and_then(|k| LogVerifier::new(k).ok()),
            head: None,
            tree: TreeBuilder::default(),
            queued: false,
            begun: false,
        }
    }

    /// Checks the next item against the lines before it.
    fn next(&mut self, item: &Item) -> Result<(), LineError> {
        if !item.is_log() {
            return if self.begun {
                Err(LineError::AfterLog(item.kind()))
            } else {
                Ok(())
            };
        }
        self.begun = true;
        let log = LineError::Log;
        if self.version == 1 {
            return Err(log(LogLineError::InVersion1(item.kind())));
        }
        let verifier = self
            .verifier
            .as_ref()
            .ok_or(log(LogLineError::NoKey(item.kind())))?;
        match item {
            Item::LogHead(head) => {
                // An entry before any head is refused as it comes: a tree
                // begun means a head was read.
                if self.head.is_some() {
                    return Err(log(LogLineError::SecondHead));
                }
                if self.queued {
                    return Err(log(LogLineError::HeadAfterQueued));
                }
                let signed = verifier
                    .verify(&head.checkpoint)
                    .map_err(|e| log(LogLineError::Checkpoint(e)))?;
                if signed.size != head.size || signed.root.0 != head.root {
                    return Err(log(LogLineError::HeadNotSigned {
                        said: head.size,
                        root: cheq_core::sign::b64::encode(head.root),
                    }));
                }
                self.head = Some(head.clone());
            }
            Item::LogEntry { index, entry } => {
                let size = self
                    .head
                    .as_ref()
                    .ok_or(log(LogLineError::EntryWithoutHead))?
                    .size;
                let expected = self.tree.len();
                if *index != expected || self.queued {
                    return Err(log(LogLineError::EntryOutOfOrder {
                        expected,
                        found: *index,
                    }));
                }
                if expected >= size {
                    return Err(log(LogLineError::EntryPastHead(size)));
                }
                self.tree
                    .push(entry.clone())
                    .map_err(|e| log(LogLineError::Tree(e)))?;
            }
            Item::LogQueued(_) => {
                let size = self.head.as_ref().map_or(0, |h| h.size);
                if self.tree.len() < size {
                    return Err(log(LogLineError::QueuedBeforeTree {
                        size,
                        given: self.tree.len(),
                    }));
                }
                self.queued = true;
            }
            // Answered before the log's lines are looked at.
            Item::Account(_)
            | Item::Entry { .. }
            | Item::Decision(_)
            | Item::Collected { .. }
            | Item::Registration(_)
            | Item::AccessToken { .. }
            | Item::Cheq(_)
            | Item::Nonce { .. }
            | Item::Execution { .. }
            | Item::ChosenCs(_)
            | Item::Settings { .. } => {}
        }
        Ok(())
    }

    /// At the end line (`line`): the tree is whole, and its root is the
    /// signed head's.
    fn end(mut self, line: u64) -> Result<(), ImportError> {
        let Some(head) = self.head.take() else {
            return Ok(());
        };
        let given = self.tree.len();
        if given != head.size {
            return Err(ImportError::LogCut {
                line,
                given,
                size: head.size,
            });
        }
        let (_, root) = self.tree.finish().map_err(|e| ImportError::Line {
            line,
            cause: LineError::Log(LogLineError::Tree(e)),
        })?;
        if root != head.root {
            return Err(ImportError::LogRoot { line });
        }
        Ok(())
    }
}

/// Reads a whole stream of `server`, handing its header to `header` (which
/// may refuse it before any item is read) and each item with its line
/// number to `sink`; checks that it ends with its end line, that the line
/// counts its items, that a transparency log is whole and signed, and that
/// no registration's origin or token's digest comes twice.
pub fn read_stream(
    input: &mut dyn BufRead,
    server: Server,
    header: &mut dyn FnMut(&Header) -> Result<(), ImportError>,
    sink: &mut dyn FnMut(u64, Item) -> Result<(), ImportError>,
) -> Result<Counts, ImportError> {
    let mut buf = Vec::new();
    let Some(first) = next_line(input, &mut buf, 1)? else {
        return Err(ImportError::Empty);
    };
    let read = read_header(first, server).map_err(ImportError::Header)?;
    header(&read)?;
    let mut log = LogLines::new(&read);
    let mut keys = Keys::default();
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
                log.next(&item).map_err(at)?;
                keys.next(line, &item).map_err(at)?;
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
        Some((line, _)) => {
            log.end(line)?;
            Ok(counts)
        }
    }
}

/// Reads a whole stream of `server` without writing anything: what an
/// import would find wrong with it before it writes, with a log the
/// `target` would not sign. Its header and counts.
pub fn check(
    input: &mut dyn BufRead,
    server: Server,
    target: &TargetLog,
) -> Result<(Header, Counts), ImportError> {
    let mut seen = None;
    let counts = read_stream(
        input,
        server,
        &mut |h| {
            target.accepts(h)?;
            seen = Some(h.clone());
            Ok(())
        },
        &mut |_, _| Ok(()),
    )?;
    match seen {
        Some(h) => Ok((h, counts)),
        None => Err(ImportError::Empty),
    }
}

/// Whether `text` is an origin as the RS keeps a CS's issuer: exactly
/// what `cheq_core::discovery::bare_origin` makes of it.
fn is_origin(text: &str) -> bool {
    cheq_core::discovery::bare_origin(text).as_deref() == Some(text)
}
