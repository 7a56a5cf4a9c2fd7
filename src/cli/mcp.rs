//! `cheq mcp`: the MCP bridge in front of an A2T resource server
//! (PROTOCOL.md §11). Over Streamable HTTP (`--listen ADDR`, endpoint
//! `http://ADDR/mcp`) or standard input and output (`--stdio`); the RS is
//! called as an agent with OAuth client credentials, like `cheq agent`.

use super::agent::{DEMO_AGENT_ID, DEMO_AGENT_SECRET};
use super::CliError;
use crate::mcp::{server, Bridge, BridgeConfig};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

/// Serve the tools of a resource server to MCP clients.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The resource server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    pub rs: String,
    /// Serve Streamable HTTP on this address (endpoint `/mcp`).
    #[arg(
        long,
        value_name = "ADDR",
        conflicts_with = "stdio",
        required_unless_present = "stdio"
    )]
    pub listen: Option<SocketAddr>,
    /// Serve over standard input and output.
    #[arg(long)]
    pub stdio: bool,
    /// Over HTTP, serve only requests carrying `Authorization: Bearer` with
    /// the contents of FILE (made, 0600, with a random token when missing).
    /// Needed to listen on any address that is not loopback.
    #[arg(long, value_name = "FILE", conflicts_with = "stdio")]
    pub token_file: Option<std::path::PathBuf>,
    /// The agent's OAuth client id at the RS. Its secret comes from
    /// `CHEQ_AGENT_SECRET` (the demo's when unset).
    #[arg(long, default_value = DEMO_AGENT_ID)]
    pub client_id: String,
}

/// The bearer secret of a bridge (`--token-file`, made when missing); a
/// bridge without one may listen on loopback only: whoever reaches it calls
/// the RS's tools as its agent. Shared by `cheq mcp` and `cheq a2a`.
pub(super) fn bridge_token(
    token_file: Option<&std::path::Path>,
    addr: SocketAddr,
) -> Result<Option<Arc<crate::keyfile::BearerSecret>>, CliError> {
    match token_file {
        Some(path) => Ok(Some(Arc::new(
            crate::keyfile::BearerSecret::load_or_create(path)
                .map_err(|e| CliError::Server(format!("--token-file {e}")))?,
        ))),
        None if !addr.ip().to_canonical().is_loopback() => Err(CliError::Usage(format!(
            "--listen {addr}: an address beyond loopback needs --token-file FILE (anyone \
             who reaches the bridge calls the RS's tools as its agent)"
        ))),
        None => Ok(None),
    }
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let secret =
        std::env::var("CHEQ_AGENT_SECRET").unwrap_or_else(|_| DEMO_AGENT_SECRET.to_owned());
    let base =
        url::Url::parse(&args.rs).map_err(|e| CliError::Usage(format!("--rs {}: {e}", args.rs)))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(CliError::Usage(format!(
            "--rs {}: not an http(s) URL",
            args.rs
        )));
    }
    let bridge = Arc::new(
        Bridge::new(BridgeConfig {
            rs: args.rs.trim_end_matches('/').to_owned(),
            client_id: args.client_id,
            secret: secret.into(),
        })
        .map_err(|e| CliError::Server(e.to_string()))?,
    );
    let rt = super::servers::runtime()?;
    if args.stdio {
        // Standard output carries MCP: nothing else may be written there.
        return rt
            .block_on(server::serve_stdio(bridge))
            .map_err(|e| CliError::Server(e.to_string()));
    }
    let addr = args
        .listen
        .ok_or_else(|| CliError::Usage("give --listen ADDR or --stdio".into()))?;
    let token = bridge_token(args.token_file.as_deref(), addr)?;
    let guarded = token.is_some();
    if guarded && !addr.ip().to_canonical().is_loopback() {
        log::warn!(
            "the MCP bridge serves plain HTTP on {addr}: put a TLS proxy in front of it, or its \
             bearer token crosses the network in clear (RFC 6750 §5.3)"
        );
    }
    rt.block_on(server::serve_http(bridge, addr, token, |bound| {
        let _ = writeln!(
            out,
            "MCP endpoint: http://{bound}/mcp{}",
            if guarded {
                " (Authorization: Bearer <the token file's contents>)"
            } else {
                ""
            }
        );
        let _ = out.flush();
    }))
    .map_err(|e| CliError::Server(e.to_string()))
}
