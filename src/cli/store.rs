//! `cheq store export --config FILE` and `cheq store import --config FILE`:
//! a host's durable state out of the store its configuration names (sled in
//! `data_dir`, or PostgreSQL at `database_url`), as the JSON lines of
//! [`crate::store::export`], and into the empty store of another
//! configuration, of either backend. FILE is either server's configuration
//! (`cheq serve`'s or `cheq resource-server`'s); the store is opened as the
//! server opens it at start-up, so the server must not be running (sled
//! locks its directory; a database server's state would move on meanwhile).
//!
//! What the stream does not hold travels beside it: export names on
//! standard error every key and secret file of the host that a move must
//! copy (the transparency log's key among them), and where each goes on the
//! new host, under the name it reads first. Import refuses, before it
//! writes anything, a transparency log that the target configuration would
//! not sign with the key the log is bound to, and names the file that must
//! hold the old host's key.

use super::{display_path, CliError};
use crate::configfile::ServerConfig as _;
use crate::confirm::server::{HostFile, HostPlace};
use crate::store::export::{self, Server, TargetLog};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Move a server's durable state between stores: export, import.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: StoreCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum StoreCommand {
    /// Write the durable state of a server's store as versioned JSON lines.
    Export(ExportArgs),
    /// Read an export into the empty store of a server's configuration.
    Import(ImportArgs),
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The CS or RS configuration file (TOML) whose store is read.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Write to this new file (mode 0600) rather than to standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// With an RS that serves the confirmation itself (§12): the
    /// confirmation's store (accounts, decisions, history), not the RS's.
    #[arg(long)]
    pub confirmation: bool,
}

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The CS or RS configuration file (TOML) whose store is written.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Read this file (checked whole before anything is written) rather
    /// than standard input.
    #[arg(long = "in", value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// With an RS that serves the confirmation itself (§12): the
    /// confirmation's store (accounts, decisions, history), not the RS's.
    #[arg(long)]
    pub confirmation: bool,
}

/// A server's configuration, either kind.
#[derive(Debug)]
pub enum Configured {
    Cs(Box<crate::confirm::CsConfig>),
    Rs(Box<crate::resource::RsConfig>),
}

impl Configured {
    /// Reads the configuration at `path`: an RS's when it names its
    /// confirmation (`[confirmation_server]` or `[confirmation]`), else a CS's.
    pub fn load(path: &Path) -> Result<Self, CliError> {
        let is_rs = crate::colocated::is_resource_server_file(path).map_err(|e| match e {
            crate::configfile::ConfigError::Read { source, .. } => CliError::Read {
                path: display_path(path),
                source,
            },
            e => CliError::Server(e.to_string()),
        })?;
        let load_err = |e: &dyn std::fmt::Display| CliError::Server(e.to_string());
        Ok(if is_rs {
            Configured::Rs(Box::new(
                crate::resource::RsConfig::load(path).map_err(|e| load_err(&e))?,
            ))
        } else {
            Configured::Cs(Box::new(
                crate::confirm::CsConfig::load(path).map_err(|e| load_err(&e))?,
            ))
        })
    }

    /// The part of the configuration whose store is meant: with
    /// `confirmation`, the confirmation an RS serves itself (§12).
    fn part(self, confirmation: bool) -> Result<Self, CliError> {
        match self {
            Configured::Rs(rs) if confirmation => crate::colocated::cs_config(&rs)
                .map(|cs| Configured::Cs(Box::new(cs)))
                .map_err(|e| CliError::Usage(format!("--confirmation: {e}"))),
            Configured::Cs(_) if confirmation => Err(CliError::Usage(
                "--confirmation is for a resource server that serves the confirmation itself; this file is a confirmation server's".into(),
            )),
            other => Ok(other),
        }
    }

    fn server(&self) -> Server {
        match self {
            Configured::Cs(_) => Server::Cs,
            Configured::Rs(_) => Server::Rs,
        }
    }
}

/// The store a configuration names, opened as its server opens it.
enum Opened {
    Cs(crate::store::cs::CsStore, crate::store::Backend),
    Rs(crate::store::rs::RsStore, crate::store::Backend),
}

impl Opened {
    fn open(config: &Configured) -> Result<Self, CliError> {
        let failed = |e: &dyn std::fmt::Display| CliError::Server(format!("the store: {e}"));
        Ok(match config {
            Configured::Cs(c) => {
                let (store, backend) =
                    crate::confirm::server::open_store(c).map_err(|e| failed(&e))?;
                Opened::Cs(store, backend)
            }
            Configured::Rs(c) => {
                let (store, backend) =
                    crate::resource::server::open_store(c).map_err(|e| failed(&e))?;
                Opened::Rs(store, backend)
            }
        })
    }

    fn described(&self) -> String {
        let (server, backend) = match self {
            Opened::Cs(_, b) => (Server::Cs, b),
            Opened::Rs(_, b) => (Server::Rs, b),
        };
        let backend = match backend {
            crate::store::Backend::Sled => "sled",
            crate::store::Backend::Postgres => "PostgreSQL",
        };
        format!("the store of {server} ({backend})")
    }
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    match args.command {
        StoreCommand::Export(args) => export_cmd(args, out),
        StoreCommand::Import(args) => import_cmd(args, out),
    }
}

fn export_to(opened: &Opened, out: &mut dyn Write) -> Result<export::Counts, CliError> {
    let now = chrono::Utc::now();
    let mut out = BufWriter::new(out);
    let counts = match opened {
        Opened::Cs(store, _) => export::export_cs(store, &mut out, now),
        Opened::Rs(store, _) => export::export_rs(store, &mut out, now),
    }?;
    out.flush()
        .map_err(|e| CliError::Export(export::ExportError::Write(e)))?;
    Ok(counts)
}

fn export_cmd(args: ExportArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let config = Configured::load(&args.config)?.part(args.confirmation)?;
    let opened = Opened::open(&config)?;
    let Some(path) = args.out else {
        export_to(&opened, out)?;
        say_files(&config);
        return Ok(());
    };
    let name = display_path(&path);
    let mut file = create_private(&path)?;
    let written = export_to(&opened, &mut file).and_then(|counts| {
        file.sync_all().map_err(|source| CliError::Write {
            path: name.clone(),
            source,
        })?;
        Ok(counts)
    });
    match written {
        Ok(counts) => {
            super::write_out(
                out,
                &format!("exported {counts} from {} to {name}\n", opened.described()),
            )?;
            say_files(&config);
            Ok(())
        }
        Err(e) => {
            // A partial export is no export.
            drop(file);
            let _ = std::fs::remove_file(&path);
            Err(e.in_file(&path))
        }
    }
}

/// The files of a host that a move must copy beside its export (the
/// stream holds none of them), those that exist, each with where it goes
/// on the new host and what it is.
pub fn files_to_copy(config: &Configured) -> Vec<HostFile> {
    let files = match config {
        Configured::Cs(c) => crate::confirm::server::host_files(c),
        Configured::Rs(c) => {
            let d = &c.data_dir;
            let mut files = crate::confirm::server::signing_files(&c.signing_key);
            for (name, what) in [
                ("token.secret", "the key of issued access tokens"),
                (crate::httpkit::METRICS_SECRET_FILE, "the /metrics token"),
            ] {
                files.push(HostFile {
                    path: d.join(name),
                    to: HostPlace::DataDir(name),
                    what,
                });
            }
            files
        }
    };
    files.into_iter().filter(|f| f.path.exists()).collect()
}

/// Says on standard error which files must travel beside the export, and
/// where each goes: under the name the new host reads first, which is not
/// always its name here (a data directory made by an older cheq).
fn say_files(config: &Configured) {
    let mut text = String::from(
        "cheq store export: copy these files to the new host before its server first starts \
         there (the export does not hold them), each to the place after \"->\" in the terms of \
         the new host's configuration, under the name given there:\n",
    );
    for file in files_to_copy(config) {
        text.push_str(&format!(
            "  {}  ->  {}  ({})\n",
            file.path.display(),
            file.to,
            file.what
        ));
    }
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// The key the configuration's transparency log would sign with.
fn target_log(config: &Configured) -> Result<TargetLog, CliError> {
    let Configured::Cs(c) = config else {
        return Ok(TargetLog::Off);
    };
    if !c.transparency_log.enabled {
        return Ok(TargetLog::Off);
    }
    let path = c.log_key_file();
    let secret = match std::fs::read(&path) {
        Ok(secret) => zeroize::Zeroizing::new(secret),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(TargetLog::NoKeyFile(display_path(&path)))
        }
        Err(source) => {
            return Err(CliError::Read {
                path: display_path(&path),
                source,
            })
        }
    };
    let (origin, _) = c.log_origin();
    let key = crate::tlog::LogKey::from_secret(&secret, &origin).map_err(|e| {
        CliError::Server(format!(
            "the transparency log's key {}: {e}",
            path.display()
        ))
    })?;
    Ok(TargetLog::Key {
        key: key.verifier_key(),
        file: display_path(&path),
    })
}

/// A new file only its owner reads (an export holds password hashes and
/// the evidence of every decision); an existing one is not overwritten.
fn create_private(path: &Path) -> Result<std::fs::File, CliError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::AlreadyExists {
            CliError::Exists(display_path(path))
        } else {
            CliError::Write {
                path: display_path(path),
                source,
            }
        }
    })
}

/// What an import brought: its counts, and the stream's header for a CS.
struct Imported {
    counts: export::Counts,
    header: Option<export::Header>,
}

fn import_from(
    opened: &Opened,
    input: &mut dyn BufRead,
    target: &TargetLog,
) -> Result<Imported, export::ImportError> {
    Ok(match opened {
        Opened::Cs(store, _) => {
            let done = export::import_cs(store, input, target)?;
            Imported {
                counts: done.counts,
                header: Some(done.header),
            }
        }
        Opened::Rs(store, _) => Imported {
            counts: export::import_rs(store, input)?,
            header: None,
        },
    })
}

fn import_cmd(args: ImportArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let config = Configured::load(&args.config)?.part(args.confirmation)?;
    let server = config.server();
    let target = target_log(&config)?;
    let (imported, described) = match args.input.filter(|p| p != Path::new("-")) {
        Some(path) => {
            let open = || {
                std::fs::File::open(&path)
                    .map(BufReader::new)
                    .map_err(|source| CliError::Read {
                        path: display_path(&path),
                        source,
                    })
            };
            // Checked whole first: a stream found wrong part way would
            // leave the target holding part of it.
            export::check(&mut open()?, server, &target)
                .map_err(|e| CliError::from(e).in_file(&path))?;
            let opened = Opened::open(&config)?;
            let imported = import_from(&opened, &mut open()?, &target)
                .map_err(|e| CliError::from(e).in_file(&path))?;
            (imported, opened.described())
        }
        None => {
            let opened = Opened::open(&config)?;
            let stdin = std::io::stdin();
            let imported = import_from(&opened, &mut stdin.lock(), &target).map_err(|e| {
                if e.wrote_some() {
                    CliError::PartialImport(e)
                } else {
                    CliError::Import(e)
                }
                .in_file(Path::new("-"))
            })?;
            (imported, opened.described())
        }
    };
    super::write_out(
        out,
        &format!("imported {} into {described}\n", imported.counts),
    )?;
    if let Some(header) = &imported.header {
        say_log(header, &target);
    }
    Ok(())
}

/// Says on standard error what became of the transparency log, where it
/// is not the moved log under its own key.
fn say_log(header: &export::Header, target: &TargetLog) {
    let text = match (&header.log_key, target) {
        (None, TargetLog::Key { .. } | TargetLog::NoKeyFile(_)) if header.version == 1 => {
            "cheq store import: an export of version 1 holds no transparency log: the decisions \
             it holds are logged again, in a log that begins anew here, which an auditor's kept \
             checkpoint of the old log will not match\n"
        }
        (Some(_), TargetLog::Off) => {
            "cheq store import: the configuration turns the transparency log off: the moved log \
             is kept, and grows again once it is turned on with the log's key\n"
        }
        _ => return,
    };
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}
