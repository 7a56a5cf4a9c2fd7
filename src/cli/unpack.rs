//! `cheq unpack FILE…`: prints the signed documents a database file holds
//! packed (`store::packed`), which a plain search of the file cannot see:
//! for an audit of what a data directory keeps, or a scan for a value that
//! must not be there. Each document goes on one line (made safe for a
//! terminal: `text::one_line`), after its file's name and a tab. Nothing is
//! verified; the files are only read.

use super::{display_path, write_out, CliError};
use std::path::PathBuf;

/// Print every packed document found in database files (read as they are).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Files to read (a sled data directory's files, a PostgreSQL dump, …).
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
}

pub fn run(args: Args, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    for path in &args.files {
        let bytes = std::fs::read(path).map_err(|source| CliError::Read {
            path: display_path(path),
            source,
        })?;
        let name = crate::text::one_line(&display_path(path));
        for document in crate::store::packed::unpack_all_in(&bytes) {
            write_out(
                out,
                &format!("{name}\t{}\n", crate::text::one_line(&document)),
            )?;
        }
    }
    Ok(())
}
