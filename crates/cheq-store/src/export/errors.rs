//! Why a stream is refused: its header, a line (by kind), the log's lines
//! as a whole, or the import itself; and the key the target would sign its
//! log with.

use super::*;
use crate::cs::AccountPutError;
use crate::StoreError;

/// What is wrong with the header line.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("it is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("it is not the header of a cheq store export (format {FORMAT:?})")]
    NotAnExport,
    #[error(
        "version {0} of the export format is unknown to this cheq, which reads versions \
         {first} to {last}",
        first = READS.start(),
        last = READS.end()
    )]
    UnknownVersion(u64),
    #[error("the log key {0:?} is not a signed-note verifier key")]
    BadLogKey(String),
    #[error("a log_key in a header of version 1, which holds no transparency log")]
    LogKeyInVersion1,
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
    #[error("a {0} item after the transparency log's lines, which come last")]
    AfterLog(&'static str),
    #[error("the transparency log: {0}")]
    Log(#[source] LogLineError),
    #[error("the {kind} {key} is given on line {first} already")]
    Repeated {
        kind: &'static str,
        key: String,
        first: u64,
    },
}

/// What is wrong with the transparency log's lines.
#[derive(Debug, thiserror::Error)]
pub enum LogLineError {
    #[error(
        "a {0} line in an export of version 1, which holds no transparency log: the export \
         was changed"
    )]
    InVersion1(&'static str),
    #[error(
        "a {0} line, and the header names no log key: a log's lines travel only with the key \
         the log is bound to"
    )]
    NoKey(&'static str),
    #[error("a second log_head")]
    SecondHead,
    #[error("a log_head after a log_queued line: the head comes first, then the tree's entries, then the queue")]
    HeadAfterQueued,
    #[error("the log_head's checkpoint: {0}")]
    Checkpoint(#[source] cheq_core::tlog::checkpoint::CheckpointError),
    #[error("the log_head says a tree of {said} entries with root {root}, and its checkpoint signs another")]
    HeadNotSigned { said: u64, root: String },
    #[error("a log_entry before the log_head")]
    EntryWithoutHead,
    #[error("the log_entry of index {found}, where index {expected} comes")]
    EntryOutOfOrder { expected: u64, found: u64 },
    #[error("a log_entry past the head's {0} entries")]
    EntryPastHead(u64),
    #[error("a log_queued before all {size} entries of the tree (only {given} given)")]
    QueuedBeforeTree { size: u64, given: u64 },
    #[error("the tree: {0}")]
    Tree(#[source] cheq_core::tlog::tree::TreeError),
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
    #[error(
        "the export's transparency log is signed with the key {stream}, and this \
         configuration signs with {target}, the key in {file}: replace {file} with the old \
         host's key file (and keep the old host's public_url), or the moved log could not \
         grow; nothing was written"
    )]
    OtherLogKey {
        stream: String,
        target: String,
        file: String,
    },
    #[error(
        "the export's transparency log is signed with the key {stream}, and this \
         configuration has no key file yet: copy the old host's key file to {file} first; \
         nothing was written"
    )]
    NoLogKey { stream: String, file: String },
    #[error(
        "the store's transparency log is bound to the key {bound}, and the export's is \
         signed with {stream}; nothing was written"
    )]
    LogBound { bound: String, stream: String },
    #[error(
        "the export stops at line {line}: the transparency log holds {given} of the {size} \
         entries its head names"
    )]
    LogCut { line: u64, given: u64, size: u64 },
    #[error(
        "line {line}: the transparency log's entries make a tree whose root is not the one \
         its signed head names: the export was changed or its log is damaged"
    )]
    LogRoot { line: u64 },
}

/// The key a target configuration will sign its transparency log's
/// checkpoints with: an export's log is imported only under its own key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetLog {
    /// Its verifier `key`, made from the key file `file` (which a refusal
    /// names: the old host's key file replaces it).
    Key { key: String, file: String },
    /// None yet: the key file named is absent, and the server would make a
    /// new key at its first start.
    NoKeyFile(String),
    /// The log is off in the configuration: a log is kept as it is, for the
    /// day it is turned on with its key (the server refuses another).
    Off,
}

impl TargetLog {
    /// Refuses a stream whose log the target would not sign.
    pub fn accepts(&self, header: &Header) -> Result<(), ImportError> {
        let Some(stream) = &header.log_key else {
            return Ok(());
        };
        match self {
            TargetLog::Key { key, .. } if key == stream => Ok(()),
            TargetLog::Key { key, file } => Err(ImportError::OtherLogKey {
                stream: stream.clone(),
                target: key.clone(),
                file: file.clone(),
            }),
            TargetLog::NoKeyFile(file) => Err(ImportError::NoLogKey {
                stream: stream.clone(),
                file: file.clone(),
            }),
            TargetLog::Off => Ok(()),
        }
    }
}

impl ImportError {
    /// Whether the import may have written items before it failed: any
    /// failure after the header was read into an empty store.
    pub fn wrote_some(&self) -> bool {
        !matches!(
            self,
            ImportError::Empty
                | ImportError::Header(_)
                | ImportError::NotEmpty { .. }
                | ImportError::OtherLogKey { .. }
                | ImportError::NoLogKey { .. }
                | ImportError::LogBound { .. }
        )
    }
}
