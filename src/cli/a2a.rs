//! `cheq a2a`: the A2A bridge in front of an A2T resource server (CHEQ
//! draft §6; PROTOCOL.md "A2A binding"). Serves A2A 1.0 over HTTP
//! (`--listen ADDR`: the Agent Card at `/.well-known/agent-card.json`,
//! JSON-RPC at `/`); the RS is called as an agent with OAuth client
//! credentials, like `cheq agent` and `cheq mcp`, whose arguments it takes.

use super::agent::{DEMO_AGENT_ID, DEMO_AGENT_SECRET};
use super::CliError;
use crate::a2a::{A2aBridge, A2aConfig};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

/// Serve the tools of a resource server to A2A clients.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The resource server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    pub rs: String,
    /// Serve A2A (JSON-RPC over HTTP) on this address.
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Serve only requests carrying `Authorization: Bearer` with the
    /// contents of FILE (made, 0600, with a random token when missing).
    /// Needed to listen on any address that is not loopback.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// The agent's OAuth client id at the RS. Its secret comes from
    /// `CHEQ_AGENT_SECRET` (the demo's when unset).
    #[arg(long, default_value = DEMO_AGENT_ID)]
    pub client_id: String,
    /// The URL clients reach the bridge by, named in the Agent Card (a TLS
    /// proxy's); `http://ADDR/` when not given.
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
}

fn http_url(what: &str, value: &str) -> Result<url::Url, CliError> {
    let u = url::Url::parse(value).map_err(|e| CliError::Usage(format!("{what} {value}: {e}")))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(CliError::Usage(format!(
            "{what} {value}: not an http(s) URL"
        )));
    }
    Ok(u)
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let secret =
        std::env::var("CHEQ_AGENT_SECRET").unwrap_or_else(|_| DEMO_AGENT_SECRET.to_owned());
    http_url("--rs", &args.rs)?;
    let addr = args.listen;
    let token = super::mcp::bridge_token(args.token_file.as_deref(), addr)?;
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| CliError::Server(format!("--listen {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::Server(format!("--listen {addr}: {e}")))?;
    let endpoint = match &args.public_url {
        Some(u) => http_url("--public-url", u)?.to_string(),
        None => format!("http://{bound}/"),
    };
    super::logging::init(
        crate::configfile::LogFormat::Text,
        &super::logging::instance_name(&bound.to_string()),
    );
    let guarded = token.is_some();
    if guarded && !addr.ip().to_canonical().is_loopback() {
        log::warn!(
            "the A2A bridge serves plain HTTP on {addr}: put a TLS proxy in front of it, or its \
             bearer token crosses the network in clear (RFC 6750 §5.3)"
        );
    }
    let bridge = Arc::new(
        A2aBridge::new(A2aConfig {
            rs: args.rs.trim_end_matches('/').to_owned(),
            client_id: args.client_id,
            secret: secret.into(),
            endpoint: endpoint.clone(),
            bearer: guarded,
        })
        .map_err(|e| CliError::Server(e.to_string()))?,
    );
    let _ = writeln!(
        out,
        "A2A agent: {endpoint} (card: http://{bound}{}){}",
        crate::a2a::CARD_PATH,
        if guarded {
            ", Authorization: Bearer <the token file's contents>"
        } else {
            ""
        }
    );
    let _ = out.flush();
    let rt = super::servers::runtime()?;
    rt.block_on(async move {
        crate::a2a::serve(listener, bridge, token)
            .map_err(|e| CliError::Server(e.to_string()))?
            .await
            .map_err(|e| CliError::Server(e.to_string()))
    })
}
