//! `cheq migrate --config FILE`: applies the PostgreSQL schema of the server
//! that FILE configures (a CS's `cs.toml` or an RS's `rs.toml`), alone,
//! before instances start (they also apply it at start-up, safely at once).

use super::CliError;
use std::io::Write;
use std::path::PathBuf;

/// Apply the database schema migrations of a server's configuration.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The CS or RS configuration file (TOML) naming `database_url` (or
    /// `CHEQ_DATABASE_URL` in the environment).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let text = std::fs::read_to_string(&args.config).map_err(|source| CliError::Read {
        path: args.config.display().to_string(),
        source,
    })?;
    // An RS configuration has a [confirmation_server] table; a CS's has not.
    let is_rs = text
        .parse::<toml::Table>()
        .map(|t| t.contains_key("confirmation_server"))
        .unwrap_or(false);
    let (component, url, steps) = if is_rs {
        let c = crate::resource::RsConfig::load(&args.config)
            .map_err(|e| CliError::Server(e.to_string()))?;
        ("rs", c.database_url, crate::store::pg::rs::MIGRATIONS)
    } else {
        let c = crate::confirm::CsConfig::load(&args.config)
            .map_err(|e| CliError::Server(e.to_string()))?;
        ("cs", c.database_url, crate::store::pg::cs::MIGRATIONS)
    };
    let Some(url) = url else {
        return Err(CliError::Server(format!(
            "{}: no database_url (nor CHEQ_DATABASE_URL): the embedded database needs no migration",
            args.config.display()
        )));
    };
    let pg = crate::store::pg::Pg::new(&url.0, 1).map_err(|e| CliError::Server(e.to_string()))?;
    let applied = pg
        .migrate(component, steps)
        .map_err(|e| CliError::Server(e.to_string()))?;
    let version = steps.iter().map(|s| s.version).max().unwrap_or(0);
    super::write_out(
        out,
        &format!(
            "{component} schema at version {version} ({applied} step{} applied now)\n",
            if applied == 1 { "" } else { "s" }
        ),
    )
}
