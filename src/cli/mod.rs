//! The `cheq` command line: argument types, dispatch, errors and exit codes.
//!
//! Exit codes: `0` success, `1` refusal or failure (one line on stderr,
//! starting `cheq: `), `2` usage error (unknown flag, bad value). Help and
//! version go to stdout with exit code `0`.
//!
//! Adding a subcommand: write `src/cli/<name>.rs` with a `clap::Args` struct
//! `Args` and a `pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError>`,
//! then add a variant to [`Command`] and an arm to [`dispatch`]. Files named
//! `FILE` on the command line are read with [`read_input`], so `-` means
//! standard input everywhere.

pub mod a2a;
pub mod agent;
pub mod audit;
pub mod countersign;
pub mod demo;
pub mod inspect;
pub mod keygen;
pub mod keys;
pub mod logging;
pub mod mcp;
pub mod migrate;
pub mod reference;
pub mod rs;
pub mod servers;
pub mod sign;
pub mod store;
pub mod unpack;
pub mod user;
pub mod verify;

use crate::cheq::CheqError;
use crate::sign::{CountersignError, KeyError, SignError, TrustError, VerifyError};
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::path::Path;

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: a refusal or a failure (the reason is on stderr).
pub const EXIT_FAILURE: i32 = 1;
/// Exit code: the command line itself is wrong.
pub const EXIT_USAGE: i32 = 2;

/// The most bytes read from any input file (keys, trust, payloads, documents).
/// The library applies the protocol's own, smaller limits after reading.
pub const MAX_INPUT_BYTES: u64 = 8 * 1024 * 1024;

/// CHEQ: human confirmation of AI-agent actions (signing core).
#[derive(Debug, Parser)]
#[command(name = "cheq", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    Keygen(keygen::Args),
    Sign(sign::Args),
    Countersign(countersign::Args),
    Verify(verify::Args),
    Inspect(inspect::Args),
    /// Run the reference resource server.
    ResourceServer(servers::ResourceServerArgs),
    /// Play the AI agent: invoke a tool, print the URI pack, wait for the outcome.
    Agent(agent::Args),
    /// Run the confirmation server.
    Serve(servers::ServeArgs),
    /// Manage the confirmation server's local accounts.
    User(user::Args),
    /// Manage the resource servers registered at the confirmation server
    /// (list, block, unblock, remove) and its initial access tokens.
    Rs(rs::Args),
    /// Manage a server's signing keys: rotate, list, retire, remove (§9).
    Keys(keys::Args),
    /// Run the demo: confirmation server + reference resource server + user alice.
    Demo(demo::Args),
    /// Print the argon2 hash of a secret read from standard input.
    HashSecret(user::HashArgs),
    /// Serve a resource server's tools to MCP clients (Streamable HTTP or stdio).
    Mcp(mcp::Args),
    /// Serve a resource server's tools to A2A clients (an A2A 1.0 agent over HTTP).
    A2a(a2a::Args),
    /// Apply the PostgreSQL schema of a server's configuration (`database_url`).
    Migrate(migrate::Args),
    /// Move a server's durable state between stores (sled, PostgreSQL).
    Store(store::Args),
    Unpack(unpack::Args),
    Audit(audit::Args),
    /// Print the reference of every command in markdown (docs/operations.md).
    #[command(hide = true)]
    HelpReference(reference::Args),
}

/// Runs one parsed command, writing its result to `out`.
pub fn dispatch(command: Command, out: &mut dyn Write) -> Result<(), CliError> {
    match command {
        Command::Keygen(args) => keygen::run(args, out),
        Command::Sign(args) => sign::run(args, out),
        Command::Countersign(args) => countersign::run(args, out),
        Command::Verify(args) => verify::run(args, out),
        Command::Inspect(args) => inspect::run(args, out),
        Command::ResourceServer(args) => servers::resource_server(args, out),
        Command::Agent(args) => agent::run(args, out),
        Command::Serve(args) => servers::serve(args, out),
        Command::User(args) => user::run(args, out),
        Command::Rs(args) => rs::run(args, out),
        Command::Keys(args) => keys::run(args, out),
        Command::Demo(args) => demo::run(args, out),
        Command::HashSecret(args) => user::hash_secret_cmd(args, out),
        Command::Migrate(args) => migrate::run(args, out),
        Command::Store(args) => store::run(args, out),
        Command::Mcp(args) => mcp::run(args, out),
        Command::A2a(args) => a2a::run(args, out),
        Command::Unpack(args) => unpack::run(args, out),
        Command::Audit(args) => audit::run(args, out),
        Command::HelpReference(args) => reference::run(args, out),
    }
}

/// Entry point of the `cheq` binary: parses `std::env::args_os()`, runs the
/// command and returns the process exit code. Never panics outward: a panic
/// (a bug) becomes one line on stderr and exit code 1.
pub fn main() -> i32 {
    // Every file and folder a command creates (keys, secrets, databases) is
    // its owner's alone.
    crate::keyfile::private_umask();
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_owned());
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let _ = writeln!(
            io::stderr(),
            "cheq: internal error{place}: {}",
            one_line(&message)
        );
    }));
    std::panic::catch_unwind(|| run(std::env::args_os())).unwrap_or(EXIT_FAILURE)
}

/// Parses `args` (the first is the program name), runs the command, prints any
/// error as one line on stderr, and returns the exit code.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version: print as clap formats them, to stdout.
            let _ = e.print();
            return EXIT_OK;
        }
        Err(e) => return report(&CliError::Usage(clap_message(&e))),
    };
    // Not locked for the whole command: `cheq mcp --stdio` writes MCP to
    // standard output from the async runtime's threads.
    let mut out = io::stdout();
    let result = dispatch(cli.command, &mut out).and_then(|()| {
        out.flush().map_err(|source| CliError::Write {
            path: "standard output".to_owned(),
            source,
        })
    });
    match result {
        Ok(()) => EXIT_OK,
        Err(e) => report(&e),
    }
}

/// Prints `e` as one line on stderr and returns its exit code.
fn report(e: &CliError) -> i32 {
    // Not eprintln!, which panics when stderr cannot be written.
    let _ = writeln!(io::stderr(), "cheq: {}", one_line(&e.to_string()));
    e.exit_code()
}

/// Clap's multi-line error, folded into one line (without the usage block).
fn clap_message(e: &clap::Error) -> String {
    use clap::CommandFactory;
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let names: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        return format!(
            "usage: a subcommand is needed: {} (see 'cheq --help')",
            names.join(", ")
        );
    }
    let text = e.render().to_string();
    let mut parts = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if !line.is_empty() {
            parts.push(line.strip_prefix("error: ").unwrap_or(line));
        }
    }
    format!("usage: {} (see 'cheq --help')", parts.join(" "))
}

pub use crate::text::{is_unsafe_char, one_line};

/// Everything that can go wrong in a command. [`CliError::exit_code`] says
/// which exit code it gets; its `Display` is the one-line reason.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line is wrong (exit code 2).
    #[error("{0}")]
    Usage(String),
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: io::Error },
    #[error("{path} is larger than {limit} bytes")]
    TooLarge { path: String, limit: u64 },
    #[error("{0} already exists; refusing to overwrite it")]
    Exists(String),
    #[error("key: {0}")]
    Key(#[from] KeyError),
    #[error("{0}")]
    Trust(#[from] TrustError),
    #[error("refused: {0}")]
    Payload(#[from] CheqError),
    #[error("refused: {0}")]
    Sign(#[from] SignError),
    #[error("refused: rule {rule}: {0}", rule = .0.rule())]
    Verify(#[from] VerifyError),
    /// Redacted evidence (PROTOCOL.md §8.1) that fails a check.
    #[error("refused: {0}")]
    Evidence(#[from] crate::evidence::EvidenceError),
    #[error("refused: {0}")]
    Countersign(#[from] CountersignError),
    /// Input that is not a signed CHEQ at all (for `inspect`).
    #[error("not a signed CHEQ: {0}")]
    Malformed(String),
    /// A server or network failure.
    #[error("{0}")]
    Server(String),
    /// A transparency log that failed its audit.
    #[error("log audit failed: {0}")]
    Audit(String),
    #[error("export: {0}")]
    Export(#[from] crate::store::export::ExportError),
    #[error("import: {0}")]
    Import(#[from] crate::store::export::ImportError),
    /// An import from standard input that failed after it began writing.
    #[error(
        "import: {0}; the store holds the items read before: empty it (or take a new one) \
         before importing again"
    )]
    PartialImport(#[source] crate::store::export::ImportError),
    /// Something that should not happen (a bug), reported rather than panicking.
    #[error("internal error: {0}")]
    Internal(String),
    /// A markdown file without the marker lines of the generated command
    /// reference (`cheq help-reference --update`).
    #[error(
        "{path} has no marker lines for the command reference: a line starting \
         {begin} and, below it, the line {end}",
        begin = reference::BEGIN,
        end = reference::END
    )]
    NoReferenceMarkers { path: String },
    /// An error about a named file.
    #[error("{path}: {error}")]
    InFile { path: String, error: Box<CliError> },
}

impl CliError {
    /// The process exit code for this error: 2 for usage errors, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            CliError::InFile { error, .. } => error.exit_code(),
            _ => EXIT_FAILURE,
        }
    }

    /// The same error, said to be about the file `path`.
    pub fn in_file(self, path: &Path) -> CliError {
        CliError::InFile {
            path: display_path(path),
            error: Box::new(self),
        }
    }
}

/// How a path is named in messages (`-` is standard input).
pub fn display_path(path: &Path) -> String {
    if path == Path::new("-") {
        "standard input".to_owned()
    } else {
        path.display().to_string()
    }
}

/// Reads a whole input file, or standard input when `path` is `-`, up to
/// [`MAX_INPUT_BYTES`].
pub fn read_input(path: &Path) -> Result<Vec<u8>, CliError> {
    let name = display_path(path);
    let read_err = |source| CliError::Read {
        path: name.clone(),
        source,
    };
    let mut bytes = Vec::new();
    if path == Path::new("-") {
        io::stdin()
            .lock()
            .take(MAX_INPUT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes))
            .map_err(read_err)?;
    }
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(CliError::TooLarge {
            path: name,
            limit: MAX_INPUT_BYTES,
        });
    }
    Ok(bytes)
}

/// Reads a private signing key (a private OKP/Ed25519 JWK).
pub fn read_signing_key(path: &Path) -> Result<crate::sign::SigningKey, CliError> {
    let bytes = zeroize::Zeroizing::new(read_input(path)?);
    crate::sign::SigningKey::from_jwk_bytes(&bytes).map_err(|e| CliError::from(e).in_file(path))
}

/// Reads a TRUST file. An entry's keys may be in it (`"keys"`), in a file
/// (`"jwks_file"`, relative to the TRUST file's folder) or published at a
/// URI (`"jwks_uri"`: fetched now, `https` except loopback, bounded in size
/// and time; see [`crate::peerkeys`]).
pub fn read_trust(path: &Path) -> Result<crate::sign::TrustStore, CliError> {
    use crate::sign::trust::{trust_entries, EntryKeys};
    let bytes = read_input(path)?;
    let entries = trust_entries(&bytes).map_err(|e| CliError::from(e).in_file(path))?;
    let base = match path.parent() {
        Some(p) if path != Path::new("-") && !p.as_os_str().is_empty() => p.to_owned(),
        _ => std::path::PathBuf::from("."),
    };
    let mut runtime = None;
    let mut store = crate::sign::TrustStore::new();
    for entry in entries {
        let keys = match entry.keys {
            EntryKeys::Inline(jwks) => jwks,
            EntryKeys::File(file) => crate::peerkeys::read_file(&base.join(file))
                .map_err(|e| CliError::Server(format!("keys of {}: {e}", entry.origin)))?,
            EntryKeys::Uri(uri) => {
                let rt = match &mut runtime {
                    Some(rt) => rt,
                    None => runtime.insert(
                        tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .map_err(|e| CliError::Internal(e.to_string()))?,
                    ),
                };
                let client =
                    crate::peerkeys::client().map_err(|e| CliError::Server(e.to_string()))?;
                rt.block_on(crate::peerkeys::fetch(&client, &uri, Utc::now()))
                    .map(|(jwks, _)| jwks)
                    .map_err(|e| CliError::Server(format!("keys of {}: {e}", entry.origin)))?
            }
        };
        store
            .add(entry.resource, &entry.origin, std::sync::Arc::new(keys))
            .map_err(|e| CliError::from(e).in_file(path))?;
    }
    Ok(store)
}

/// Writes `text` to `out` (standard output), mapping failures to [`CliError`].
pub fn write_out(out: &mut dyn Write, text: &str) -> Result<(), CliError> {
    out.write_all(text.as_bytes())
        .map_err(|source| CliError::Write {
            path: "standard output".to_owned(),
            source,
        })
}

/// Parses `--now`: an RFC 3339 date-time (a bad value is a usage error).
pub fn parse_now(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("not an RFC 3339 date-time ({e}), e.g. 2026-11-22T10:00:00Z"))
}

/// The time to check against: `--now` if given, else the current time.
pub fn now_or_current(now: Option<DateTime<Utc>>) -> DateTime<Utc> {
    now.unwrap_or_else(Utc::now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn one_line_escapes() {
        assert_eq!(
            one_line("a\nb\u{1b}[2J\u{202e}"),
            "a b\\u{001b}[2J\\u{202e}"
        );
    }
}
