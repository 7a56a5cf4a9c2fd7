//! Moving a host's durable state from one store to another (`cheq store
//! export`, `cheq store import`): a versioned stream of JSON lines, written
//! from the store traits and read back through them, so that either backend
//! (sled, PostgreSQL) can be the source and either the target.
//!
//! The stream is UTF-8 text, one JSON object a line. The first line is the
//! header, `{"format":"cheq-store-export","version":2,"server":"cs",
//! "exported_at":"…","log_key":"…"}` (`server`: `cs` or `rs`; `log_key`:
//! the verifier key a CS's transparency log is bound to, absent when it has
//! none); then one object per item, each with a `kind`; the last line is
//! `{"kind":"end","items":N}`, so that a stream cut at a line boundary is
//! refused as well as one cut inside a line.
//!
//! | kind | server | what |
//! |---|---|---|
//! | `account` | CS | an [`Account`]: its password and PIN hashes as stored (hashes, never a secret in clear) |
//! | `entry` | CS | a started confirmation: `id` and the [`ConfirmationEntry`] members |
//! | `decision` | CS | a [`DecisionRecord`] as stored: its document (a sealed one stays sealed: its key is a file in the data directory) and its delivery, so that a pending delivery (the outbox) goes on from the new store |
//! | `collected` | CS | the id of a decision collected as old history (`history_days`) and its decision time: its key is never countersigned again (§6) |
//! | `registration` | CS | a resource server that registered itself (§16.3), a [`RegisteredRecord`]: active or blocked, with its times; an origin blocked before it ever registered is one with empty endpoints, so that it stays refused |
//! | `initial_access_token` | CS | an initial access token not used yet (§16.3): `digest` (its SHA-256, hex, never the token) and `created` |
//! | `log_head` | CS | the transparency log's signed head (PROTOCOL.md §15): `size`, `root` (base64url), `checkpoint` (the signed note as served) |
//! | `log_entry` | CS | an entry of the log's tree: `index`, `entry` (base64url), every index from 0 in order |
//! | `log_queued` | CS | an entry queued and not yet in the tree: `entry` (base64url), oldest first |
//! | `cheq` | RS | a [`CheqRecord`] in its state |
//! | `nonce` | RS | a decided nonce: the digest of its decision document and its data (base64url), its expiry |
//! | `execution` | RS | an idempotency key of the demo tools and the operation's result |
//! | `chosen_cs` | RS | `issuer`: a CS a user chose (§17), in the order first chosen; kept when no user has it any more, since a pending CHEQ may still name it |
//! | `settings` | RS | one user's choice (§17): `subject`, `cs` (the issuer of the CS they chose; absent: the RS's default), `rules` (as the RS wrote them), `generation` (1 or more: changes applied) |
//!
//! The log's lines come last, `log_head` first, and only in a stream of
//! version 2 whose header names the log's key: a log, its queue included,
//! travels only with its key (an import clears the queue the decisions'
//! claims fill and puts the stream's back). The tree's stored hashes
//! are not in the stream: an import computes them again from the entries
//! and refuses a log whose root is not the one its checkpoint signs, so the
//! moved host serves the same tiles. A log travels only with the key it is
//! bound to: the header names it, and an import refuses it before writing
//! anything unless the target will sign with that key ([`TargetLog`]).
//! Version 1 (before the log) is read as well: its decisions' entries are
//! queued again, into a log that begins anew.
//!
//! The version changes when a line an older cheq reads would mean something
//! else, or its absence would. Lines of a kind an older cheq does not know
//! keep the version otherwise: every reader refuses a kind it does not know
//! rather than skip it, so an older cheq refuses such a stream and never
//! reads it short. A stream without `registration`,
//! `initial_access_token`, `chosen_cs` or `settings` lines, of either
//! version, is of a host that has none.
//!
//! Left out: the CS's sessions (whoever was signed in signs in again; a
//! session can hold a provider's ID token, which has no business in a
//! file) and its limiter state (failures counted over minutes: a move
//! forgives them).
//!
//! Import goes into an empty store only ([`ImportError::NotEmpty`]), and
//! writes each item through the trait method that creates it (a claim, an
//! insert if absent), which keeps the state given as it is; so each backend
//! builds its own indexes, and an item given twice is refused (a
//! registration's origin or a token's digest given twice already when the
//! stream is read: they are few). A registration is written by
//! [`crate::registrations::Registrations::restore`], which keeps its status
//! and times and moves the generation that running instances reload on. A
//! user's settings are written by [`crate::rs::Settings::restore`], which
//! keeps their generation (a change asked for before the move applies
//! after it only if nothing changed since), and the chosen CSes by
//! [`crate::rs::Settings::restore_host`] before them, in the stream's
//! order (a CS given twice is refused when the stream is read; a subject
//! given twice, by the store).

mod errors;
mod import;
mod read;
mod write;

mod tree;

pub use errors::{HeaderError, ImportError, LineError, LogLineError, TargetLog};
pub use import::{ensure_empty_cs, ensure_empty_rs, import_cs, import_rs, Imported};
pub use read::{check, read_stream};
pub use write::{export_cs, export_rs, ExportError};

use crate::cs::{Account, ConfirmationEntry, DecisionRecord};
use crate::registrations::{RegisteredRecord, RegistrationStatus};
use crate::rs::{CheqRecord, Execution, UserSettings};
use crate::tlog::LogHead;
use crate::NonceEntry;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The `format` of the header line.
pub const FORMAT: &str = "cheq-store-export";

/// The version of the stream this cheq writes.
pub const VERSION: u64 = 2;

/// The versions this cheq reads: 1 (no transparency log) and 2.
pub const READS: std::ops::RangeInclusive<u64> = 1..=VERSION;

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
    /// The verifier key the CS's transparency log is bound to (§15); the
    /// log's lines are signed by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_key: Option<String>,
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
    Registration(Box<RegisteredRecord>),
    AccessToken {
        digest: String,
        created: i64,
    },
    LogHead(LogHead),
    LogEntry {
        index: u64,
        entry: Vec<u8>,
    },
    LogQueued(Vec<u8>),
    Cheq(Box<CheqRecord>),
    Nonce {
        nonce: String,
        entry: NonceEntry,
    },
    Execution {
        key: String,
        result: Value,
    },
    ChosenCs(String),
    Settings {
        subject: String,
        settings: UserSettings,
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

/// A registered RS as a line holds it (the members of [`RegisteredRecord`],
/// none other).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegistrationItem {
    origin: String,
    name: String,
    resource_prefix: String,
    jwks_uri: String,
    token_endpoint: String,
    status: RegistrationStatus,
    registered_at: i64,
    updated_at: i64,
}

impl From<RegisteredRecord> for RegistrationItem {
    fn from(r: RegisteredRecord) -> Self {
        RegistrationItem {
            origin: r.origin,
            name: r.name,
            resource_prefix: r.resource_prefix,
            jwks_uri: r.jwks_uri,
            token_endpoint: r.token_endpoint,
            status: r.status,
            registered_at: r.registered_at,
            updated_at: r.updated_at,
        }
    }
}

impl From<RegistrationItem> for RegisteredRecord {
    fn from(r: RegistrationItem) -> Self {
        RegisteredRecord {
            origin: r.origin,
            name: r.name,
            resource_prefix: r.resource_prefix,
            jwks_uri: r.jwks_uri,
            token_endpoint: r.token_endpoint,
            status: r.status,
            registered_at: r.registered_at,
            updated_at: r.updated_at,
        }
    }
}

/// An initial access token as a line holds it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AccessTokenItem {
    digest: String,
    created: i64,
}

/// The log's head as a line holds it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogHeadItem {
    size: u64,
    root: String,
    checkpoint: String,
}

/// An entry of the log's tree as a line holds it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogEntryItem {
    index: u64,
    entry: String,
}

/// A queued entry of the log as a line holds it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogQueuedItem {
    entry: String,
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

/// A CS a user chose as a line holds it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChosenCsItem {
    issuer: String,
}

/// A user's settings as a line holds them.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsItem {
    subject: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cs: Option<String>,
    rules: Value,
    generation: u64,
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
            Item::Registration(_) => "registration",
            Item::AccessToken { .. } => "initial_access_token",
            Item::LogHead(_) => "log_head",
            Item::LogEntry { .. } => "log_entry",
            Item::LogQueued(_) => "log_queued",
            Item::Cheq(_) => "cheq",
            Item::Nonce { .. } => "nonce",
            Item::Execution { .. } => "execution",
            Item::ChosenCs(_) => "chosen_cs",
            Item::Settings { .. } => "settings",
        }
    }

    /// Whether the item is one of the transparency log's (they come last).
    pub fn is_log(&self) -> bool {
        matches!(
            self,
            Item::LogHead(_) | Item::LogEntry { .. } | Item::LogQueued(_)
        )
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
            Item::Registration(r) => {
                serde_json::to_value(RegistrationItem::from(r.as_ref().clone()))?
            }
            Item::AccessToken { digest, created } => serde_json::to_value(AccessTokenItem {
                digest: digest.clone(),
                created: *created,
            })?,
            Item::LogHead(head) => serde_json::to_value(LogHeadItem {
                size: head.size,
                root: cheq_core::sign::b64::encode(head.root),
                checkpoint: String::from_utf8_lossy(&head.checkpoint).into_owned(),
            })?,
            Item::LogEntry { index, entry } => serde_json::to_value(LogEntryItem {
                index: *index,
                entry: cheq_core::sign::b64::encode(entry),
            })?,
            Item::LogQueued(entry) => serde_json::to_value(LogQueuedItem {
                entry: cheq_core::sign::b64::encode(entry),
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
            Item::ChosenCs(issuer) => serde_json::to_value(ChosenCsItem {
                issuer: issuer.clone(),
            })?,
            Item::Settings { subject, settings } => serde_json::to_value(SettingsItem {
                subject: subject.clone(),
                cs: settings.cs.clone(),
                rules: settings.rules.clone(),
                generation: settings.generation,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every item of the stream `text` of `server`, read back.
    fn read_all(text: &str, server: Server) -> Vec<Item> {
        let mut read = Vec::new();
        read_stream(
            &mut text.as_bytes(),
            server,
            &mut |_| Ok(()),
            &mut |_, item| {
                read.push(item);
                Ok(())
            },
        )
        .unwrap();
        read
    }

    fn stream(lines: &[&str]) -> Vec<u8> {
        let mut s = lines.join("\n");
        s.push('\n');
        s.into_bytes()
    }

    const HEADER: &str = r#"{"format":"cheq-store-export","version":1,"server":"rs","exported_at":"2026-01-01T00:00:00Z"}"#;

    fn checked(bytes: &[u8]) -> Result<Counts, ImportError> {
        check(&mut &bytes[..], Server::Rs, &TargetLog::Off).map(|(_, counts)| counts)
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

    const CS_HEADER: &str = r#"{"format":"cheq-store-export","version":2,"server":"cs","exported_at":"2026-01-01T00:00:00Z"}"#;
    const A: &str = r#""origin":"https://a.example","name":"A","resource_prefix":"https://a.example/cheq/","jwks_uri":"https://a.example/jwks.json","token_endpoint":"https://a.example/token","status":"blocked","registered_at":1,"updated_at":2"#;
    const DIGEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn registration(members: &str) -> String {
        format!(r#"{{"kind":"registration",{members}}}"#)
    }

    fn token(digest: &str) -> String {
        format!(r#"{{"kind":"initial_access_token","digest":"{digest}","created":5}}"#)
    }

    fn checked_cs(lines: &[&str]) -> Result<Counts, ImportError> {
        let mut all = vec![CS_HEADER];
        all.extend_from_slice(lines);
        let end = format!(r#"{{"kind":"end","items":{}}}"#, lines.len());
        all.push(&end);
        check(&mut &stream(&all)[..], Server::Cs, &TargetLog::Off).map(|(_, counts)| counts)
    }

    #[test]
    fn registrations_and_tokens_are_read_back_as_written() {
        let record = RegisteredRecord {
            origin: "https://a.example".into(),
            name: "A".into(),
            resource_prefix: "https://a.example/cheq/".into(),
            jwks_uri: "https://a.example/jwks.json".into(),
            token_endpoint: "https://a.example/token".into(),
            status: RegistrationStatus::Blocked,
            registered_at: 1,
            updated_at: 2,
        };
        let items = [
            Item::Registration(Box::new(record)),
            Item::AccessToken {
                digest: DIGEST.into(),
                created: 5,
            },
        ];
        let lines: Vec<String> = items.iter().map(|i| i.to_line().unwrap()).collect();
        assert_eq!(lines[0], registration(A));
        let mut all = vec![CS_HEADER.to_owned()];
        all.extend(lines);
        all.push(r#"{"kind":"end","items":2}"#.into());
        let text = all.join("\n") + "\n";
        assert_eq!(read_all(&text, Server::Cs), items);
    }

    #[test]
    fn every_fault_of_a_registration_or_token_line_is_its_own() {
        let placeholder = r#""origin":"https://b.example","name":"","resource_prefix":"","jwks_uri":"","token_endpoint":"","status":"blocked","registered_at":1,"updated_at":1"#;
        assert_eq!(
            checked_cs(&[&registration(A), &registration(placeholder), &token(DIGEST)])
                .unwrap()
                .to_string(),
            "3 items (1 initial_access_token, 2 registration)"
        );
        let off = |member: &str| {
            A.replace(
                &format!("{member}\":\"https://a.example"),
                &format!("{member}\":\"https://evil.example"),
            )
        };
        let cases: Vec<(String, &str)> = vec![
            (registration(&A.replace(r#","updated_at":2"#, "")), "the registration item is malformed: missing field `updated_at`"),
            (registration(&format!("{A},\"extra\":1")), "the registration item is malformed: unknown field `extra`"),
            (registration(&A.replace("\"blocked\"", "\"paused\"")), "the registration item is malformed: unknown variant `paused`"),
            (registration(&A.replace("\"origin\":\"https://a.example\"", "\"origin\":\"https://a.example/\"")), "the registration item's origin is invalid"),
            (registration(&A.replace("\"origin\":\"https://a.example\"", "\"origin\":\"https://A.example:443\"")), "the registration item's origin is invalid"),
            (registration(&A.replace("\"origin\":\"https://a.example\"", "\"origin\":\"ftp://a.example\"")), "the registration item's origin is invalid"),
            (registration(&off("resource_prefix")), "the registration item's resource_prefix is invalid: not on the record's origin"),
            (registration(&off("jwks_uri")), "the registration item's jwks_uri is invalid: not on the record's origin"),
            (registration(&off("token_endpoint")), "the registration item's token_endpoint is invalid: not on the record's origin"),
            (registration(&placeholder.replace("blocked", "active")), "the registration item's status is invalid: active, and the record has no token_endpoint"),
            (token(&DIGEST[1..]), "the initial_access_token item's digest is invalid: not a SHA-256 digest in lowercase hex"),
            (token(&DIGEST.to_uppercase()), "the initial_access_token item's digest is invalid"),
            (r#"{"kind":"initial_access_token","digest":"x"}"#.into(), "the initial_access_token item is malformed: missing field `created`"),
        ];
        for (line, expected) in &cases {
            let e = checked_cs(&[line]).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("line 2: {expected}")),
                "{expected:?}: got {e:?}"
            );
        }
        let e = checked_cs(&[&registration(A), &token(DIGEST), &registration(A)])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "line 4: the registration https://a.example is given on line 2 already"
        );
        let e = checked_cs(&[&token(DIGEST), &token(DIGEST)])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!("line 3: the initial_access_token {DIGEST} is given on line 2 already")
        );
        // A CS's kinds in an RS's stream.
        let rs = stream(&[HEADER, &token(DIGEST), r#"{"kind":"end","items":1}"#]);
        assert!(checked(&rs).unwrap_err().to_string().starts_with(
            "line 2: initial_access_token items belong to a confirmation server's export"
        ));
    }

    #[test]
    fn settings_and_chosen_cses_are_read_back_as_written() {
        let items = [
            Item::ChosenCs("https://z.example".into()),
            Item::Settings {
                subject: "alice".into(),
                settings: UserSettings {
                    cs: Some("https://z.example".into()),
                    rules: serde_json::json!([{"tool": "pay", "always": true}]),
                    generation: 2,
                },
            },
            Item::Settings {
                subject: "bob".into(),
                settings: UserSettings {
                    cs: None,
                    rules: serde_json::json!([]),
                    generation: 1,
                },
            },
        ];
        let lines: Vec<String> = items.iter().map(|i| i.to_line().unwrap()).collect();
        assert_eq!(
            lines,
            [
                r#"{"kind":"chosen_cs","issuer":"https://z.example"}"#,
                r#"{"kind":"settings","subject":"alice","cs":"https://z.example","rules":[{"tool":"pay","always":true}],"generation":2}"#,
                r#"{"kind":"settings","subject":"bob","rules":[],"generation":1}"#,
            ]
        );
        let mut all = vec![HEADER.to_owned()];
        all.extend(lines);
        all.push(r#"{"kind":"end","items":3}"#.into());
        let text = all.join("\n") + "\n";
        assert_eq!(read_all(&text, Server::Rs), items);
        // A CS's stream holds none.
        let cs = stream(&[
            CS_HEADER,
            r#"{"kind":"chosen_cs","issuer":"https://z.example"}"#,
            r#"{"kind":"end","items":1}"#,
        ]);
        let e = check(&mut &cs[..], Server::Cs, &TargetLog::Off).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("line 2: chosen_cs items belong to a resource server's export"));
    }

    #[test]
    fn every_fault_names_its_line() {
        let end = r#"{"kind":"end","items":0}"#;
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "the export is empty"),
            (stream(&["{"]), "line 1: it is not JSON"),
            (stream(&[r#"{"format":"other"}"#]), "line 1: it is not the header"),
            (
                stream(&[&HEADER.replace("\"version\":1", "\"version\":3")]),
                "line 1: version 3 of the export format is unknown",
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
            (
                stream(&[HEADER, r#"{"kind":"chosen_cs","issuer":""}"#, end]),
                "line 2: the chosen_cs item's issuer is invalid: not an origin",
            ),
            (
                stream(&[HEADER, r#"{"kind":"chosen_cs","issuer":"https://z.example/path"}"#, end]),
                "line 2: the chosen_cs item's issuer is invalid: not an origin",
            ),
            (
                stream(&[HEADER, r#"{"kind":"chosen_cs","issuer":"https://z.example","order":1}"#, end]),
                "line 2: the chosen_cs item is malformed: unknown field `order`",
            ),
            (
                stream(&[HEADER, r#"{"kind":"settings","subject":"a","rules":[]}"#, end]),
                "line 2: the settings item is malformed: missing field `generation`",
            ),
            (
                stream(&[HEADER, r#"{"kind":"settings","subject":"a","generation":1}"#, end]),
                "line 2: the settings item is malformed: missing field `rules`",
            ),
            (
                stream(&[HEADER, r#"{"kind":"settings","subject":"a","rules":[],"generation":-1}"#, end]),
                "line 2: the settings item is malformed",
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
