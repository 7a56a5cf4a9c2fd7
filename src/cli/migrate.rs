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
    use crate::store::pg::{cs, rs};
    // An RS that serves the confirmation itself holds both schemas.
    let (url, components): (_, Vec<(&str, &[crate::store::pg::Migration])>) =
        match super::store::Configured::load(&args.config)? {
            super::store::Configured::Rs(c) if c.embedded() => (
                c.database_url.clone(),
                vec![("rs", rs::MIGRATIONS), ("cs", cs::MIGRATIONS)],
            ),
            super::store::Configured::Rs(c) => (c.database_url, vec![("rs", rs::MIGRATIONS)]),
            super::store::Configured::Cs(c) => (c.database_url, vec![("cs", cs::MIGRATIONS)]),
        };
    let Some(url) = url else {
        return Err(CliError::Server(format!(
            "{}: no database_url (nor CHEQ_DATABASE_URL): the embedded database needs no migration",
            args.config.display()
        )));
    };
    let pg = crate::store::pg::Pg::new(&url.0, 1).map_err(|e| CliError::Server(e.to_string()))?;
    for (component, steps) in components {
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
        )?;
    }
    Ok(())
}
