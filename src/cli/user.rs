//! `cheq user add NAME [--email E] [--password-stdin] (--config FILE | --data-dir DIR)`
//! `cheq user set-password NAME [--password-stdin] (…)` and
//! `cheq user set-pin NAME [--pin-stdin] (…)`: local accounts of the
//! confirmation server. Works before the first start and while the server
//! runs (through its admin socket, [`crate::confirm::admin`]).

use super::{write_out, CliError};
use crate::confirm::admin;
use crate::confirm::auth::{hash_secret, new_account};
use std::io::{BufRead, Write};
use std::path::PathBuf;

/// Manage the confirmation server's local accounts.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: UserCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum UserCommand {
    /// Add a user (the password is asked for, or read from standard input).
    Add(AddArgs),
    /// Set a user's voice PIN (6 to 12 digits) for voice gateways; tokens
    /// issued for the old PIN stop working.
    SetPin(PinArgs),
    /// Set a user's password (asked for, or read from standard input); the
    /// sessions signed in with the old one end.
    SetPassword(PasswordArgs),
}

#[derive(Debug, clap::Args)]
pub struct PasswordArgs {
    pub name: String,
    /// Read the password as one line from standard input.
    #[arg(long)]
    pub password_stdin: bool,
    #[command(flatten)]
    pub place: Place,
}

/// Where the CS keeps its data.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct Place {
    /// The CS configuration file, or that of a resource server serving the
    /// confirmation itself (its data_dir is used).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The CS data directory.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// The user name (`sub` in countersignatures).
    pub name: String,
    /// A verified e-mail address; a CHEQ's subject may name the user by it.
    #[arg(long)]
    pub email: Option<String>,
    /// Read the password as one line from standard input.
    #[arg(long)]
    pub password_stdin: bool,
    #[command(flatten)]
    pub place: Place,
}

#[derive(Debug, clap::Args)]
pub struct PinArgs {
    pub name: String,
    /// Read the PIN as one line from standard input.
    #[arg(long)]
    pub pin_stdin: bool,
    #[command(flatten)]
    pub place: Place,
}

/// The data directory (secrets such as the PIN pepper live there) and where
/// the accounts are: the database of `database_url` / `CHEQ_DATABASE_URL`
/// when set, else the data directory's own.
fn data_dir(place: &Place) -> Result<(PathBuf, admin::Place), CliError> {
    let (_, dir, at) = locate(place)?;
    Ok((dir, at))
}

/// The CS configuration `place` names (when it names a file), its data
/// directory, and where its store is.
pub(super) fn locate(
    place: &Place,
) -> Result<(Option<crate::confirm::CsConfig>, PathBuf, admin::Place), CliError> {
    let (config, dir, url) = match (&place.config, &place.data_dir) {
        (Some(config), _) => crate::colocated::confirmation_config(config)
            .map(|c| {
                let (dir, url) = (c.data_dir.clone(), c.database_url.clone());
                (Some(c), dir, url)
            })
            .map_err(|e| CliError::Server(e.to_string()))?,
        (None, Some(dir)) => (
            None,
            dir.clone(),
            std::env::var("CHEQ_DATABASE_URL")
                .ok()
                .map(crate::configfile::DatabaseUrl),
        ),
        (None, None) => {
            return Err(CliError::Usage(
                "usage: give --config FILE or --data-dir DIR".into(),
            ))
        }
    };
    let at = match url {
        Some(url) => admin::Place::Database(url),
        None => admin::Place::DataDir(dir.clone()),
    };
    Ok((config, dir, at))
}

/// One line from standard input, without its line ending.
fn read_line_stdin(what: &str) -> Result<zeroize::Zeroizing<String>, CliError> {
    let mut line = zeroize::Zeroizing::new(String::new());
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|source| CliError::Read {
            path: "standard input".into(),
            source,
        })?;
    let trimmed = line.trim_end_matches(['\n', '\r']).to_owned();
    if trimmed.is_empty() {
        return Err(CliError::Usage(format!(
            "usage: no {what} on standard input"
        )));
    }
    Ok(zeroize::Zeroizing::new(trimmed))
}

fn prompt(what: &str) -> Result<zeroize::Zeroizing<String>, CliError> {
    let first = rpassword::prompt_password(format!("{what}: ")).map_err(|e| {
        CliError::Usage(format!(
            "usage: cannot ask for the {what} ({e}); use --{}-stdin",
            if what == "PIN" { "pin" } else { "password" }
        ))
    })?;
    let again = rpassword::prompt_password(format!("{what} again: "))
        .map_err(|e| CliError::Server(e.to_string()))?;
    if first != again {
        return Err(CliError::Server(format!("the two {what}s differ")));
    }
    Ok(zeroize::Zeroizing::new(first))
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    match args.command {
        UserCommand::Add(a) => {
            let (_, at) = data_dir(&a.place)?;
            let password = if a.password_stdin {
                read_line_stdin("password")?
            } else {
                prompt("password")?
            };
            let account = new_account(&a.name, a.email.as_deref(), &password)
                .map_err(|e| CliError::Server(e.to_string()))?;
            admin::put_user(&at, account, false).map_err(|e| CliError::Server(e.to_string()))?;
            write_out(out, &format!("added user {}\n", a.name))
        }
        UserCommand::SetPassword(a) => {
            let (_, at) = data_dir(&a.place)?;
            let password = if a.password_stdin {
                read_line_stdin("password")?
            } else {
                prompt("password")?
            };
            // The same rules as a new account's password.
            let checked = new_account(&a.name, None, &password)
                .map_err(|e| CliError::Server(e.to_string()))?;
            admin::set_password(&at, &a.name, checked.password_hash)
                .map_err(|e| CliError::Server(e.to_string()))?;
            write_out(out, &format!("set the password of {}\n", a.name))
        }
        UserCommand::SetPin(a) => {
            let (dir, at) = data_dir(&a.place)?;
            let pin = if a.pin_stdin {
                read_line_stdin("PIN")?
            } else {
                prompt("PIN")?
            };
            crate::confirm::auth::check_pin_format(&pin)
                .map_err(|e| CliError::Server(e.to_string()))?;
            std::fs::create_dir_all(&dir).map_err(|source| CliError::Write {
                path: dir.display().to_string(),
                source,
            })?;
            let pepper = crate::keyfile::load_or_create_secret(
                &dir.join(crate::confirm::auth::PIN_PEPPER_FILE),
            )
            .map_err(|e| CliError::Server(e.to_string()))?;
            let hash = crate::confirm::auth::pin_hash(&pepper, &pin)
                .map_err(|e| CliError::Server(e.to_string()))?;
            admin::set_pin(&at, &a.name, hash).map_err(|e| CliError::Server(e.to_string()))?;
            write_out(out, &format!("set the PIN of {}\n", a.name))
        }
    }
}

/// Print the argon2 hash of a secret read from standard input (for
/// `secret_hash` of a `[[gateways]]` entry in the CS configuration).
#[derive(Debug, clap::Args)]
pub struct HashArgs {}

pub fn hash_secret_cmd(_args: HashArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let secret = read_line_stdin("secret")?;
    if secret.len() < 16 {
        return Err(CliError::Server(
            "a gateway secret must be at least 16 characters".into(),
        ));
    }
    let hash = hash_secret(&secret).map_err(|e| CliError::Server(e.to_string()))?;
    write_out(out, &format!("{hash}\n"))
}
