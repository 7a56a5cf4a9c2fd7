//! Running the servers from the command line: `cheq resource-server --config
//! rs.toml` (the reference RS, PROTOCOL.md §1, §3, §6, §7).

use super::CliError;
use crate::configfile::ServerConfig as _;
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
    let config = crate::resource::RsConfig::load(&args.config)
        .map_err(|e| CliError::Server(e.to_string()).in_file(&args.config))?;
    super::logging::init(
        config.log_format,
        &super::logging::instance_name(&config.listen),
    );
    if config.embedded() {
        return runtime()?
            .block_on(crate::colocated::run(config))
            .map_err(|e| CliError::Server(e.to_string()));
    }
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
    let config = crate::confirm::CsConfig::load(&args.config)
        .map_err(|e| CliError::Server(e.to_string()))?;
    super::logging::init(
        config.log_format,
        &super::logging::instance_name(&config.listen),
    );
    runtime()?
        .block_on(crate::confirm::run(config))
        .map_err(|e| CliError::Server(e.to_string()))
}
