//! Running the servers from the command line: `cheq resource-server --config
//! rs.toml` (the reference RS, PROTOCOL.md §1, §3, §6, §7).

use super::CliError;
use std::io::Write;
use std::path::PathBuf;

/// Run the reference resource server.
#[derive(Debug, clap::Args)]
pub struct ResourceServerArgs {
    /// The RS configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
}

/// A tokio runtime for a server command.
pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Internal(format!("cannot start the async runtime: {e}")))
}

pub fn resource_server(args: ResourceServerArgs, _out: &mut dyn Write) -> Result<(), CliError> {
    init_logging();
    let config = crate::resource::RsConfig::load(&args.config)
        .map_err(|e| CliError::Server(e.to_string()).in_file(&args.config))?;
    runtime()?
        .block_on(crate::resource::run(config))
        .map_err(|e| CliError::Server(e.to_string()))
}

/// Run the confirmation server.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The CS configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
}

pub fn serve(args: ServeArgs, _out: &mut dyn Write) -> Result<(), CliError> {
    init_logging();
    let config = crate::confirm::CsConfig::load(&args.config)
        .map_err(|e| CliError::Server(e.to_string()))?;
    runtime()?
        .block_on(crate::confirm::run(config))
        .map_err(|e| CliError::Server(e.to_string()))
}

/// Logs to stderr at `info` unless `RUST_LOG` says otherwise.
pub fn init_logging() {
    use std::io::Write as _;
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format(|buf, record| {
            let line = bounded_line(&record.args().to_string());
            writeln!(
                buf,
                "[{} {} {}] {line}",
                buf.timestamp(),
                record.level(),
                record.target()
            )
        })
        .try_init();
}

/// Longest message of one log line, in bytes.
pub const MAX_LOG_LINE: usize = 2048;

/// A log message on one safe line of at most [`MAX_LOG_LINE`] bytes: what a
/// peer or a user sent can neither forge other lines nor flood the log.
pub fn bounded_line(message: &str) -> String {
    let mut line = crate::text::one_line(message);
    if line.len() > MAX_LOG_LINE {
        let mut cut = MAX_LOG_LINE;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push_str(" …(cut)");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_are_one_bounded_line() {
        let long = "é".repeat(5000);
        let line = bounded_line(&format!("a\nforged [INFO] line {long}"));
        assert!(!line.contains('\n'));
        assert!(line.len() <= MAX_LOG_LINE + 10, "{}", line.len());
        assert!(line.ends_with("…(cut)"));
        assert_eq!(bounded_line("short"), "short");
    }
}
