//! `cheq agent`: plays the AI agent against a resource server. Invokes an A2T
//! tool; when the RS asks for confirmation (`202`, PROTOCOL.md §1) prints the
//! URI pack as one JSON line on stdout before anything else, then polls the
//! result URI (§7) until the outcome, unless `--no-wait`.

use super::{write_out, CliError};
use crate::resource::{agent, InvokeOutcome, ResultStatus};
use serde_json::{Map, Value};
use std::io::Write;
use std::time::Duration;

/// The demo agent's OAuth client id at the reference RS.
pub const DEMO_AGENT_ID: &str = "demo-agent";
/// The demo agent's secret when `CHEQ_AGENT_SECRET` is not set. The demo RS
/// listens on loopback only; a real deployment configures its own clients.
pub const DEMO_AGENT_SECRET: &str = "demo-agent-secret";

/// Invoke a tool at a resource server as the AI agent would.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The resource server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    pub rs: String,
    /// The tool to invoke (its id or name, e.g. book_flight).
    #[arg(long)]
    pub tool: String,
    /// A tool input as KEY=VALUE; repeat for each. Whole numbers and
    /// true/false are sent as JSON numbers and booleans, the rest as strings.
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
    pub params: Vec<(String, Value)>,
    /// Print the URI pack and exit without waiting for the decision.
    #[arg(long)]
    pub no_wait: bool,
    /// The agent's OAuth client id at the RS.
    #[arg(long, default_value = DEMO_AGENT_ID)]
    pub client_id: String,
    /// How long to wait for the user's decision, in seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
}

fn parse_param(text: &str) -> Result<(String, Value), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    if key.is_empty() {
        return Err(format!("{text:?} has an empty KEY"));
    }
    let value = if let Ok(n) = value.parse::<i64>() {
        Value::from(n)
    } else if value == "true" || value == "false" {
        Value::Bool(value == "true")
    } else {
        Value::String(value.to_owned())
    };
    Ok((key.to_owned(), value))
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let secret =
        std::env::var("CHEQ_AGENT_SECRET").unwrap_or_else(|_| DEMO_AGENT_SECRET.to_owned());
    let params: Map<String, Value> = args.params.into_iter().collect();
    let rt = super::servers::runtime()?;
    let outcome = rt
        .block_on(agent::invoke(
            &args.rs,
            &args.client_id,
            &secret,
            &args.tool,
            &params,
        ))
        .map_err(|e| CliError::Server(e.to_string()))?;
    let pack = match outcome {
        InvokeOutcome::Done(output) => {
            write_out(
                out,
                &format!(
                    "{}\n",
                    serde_json::json!({"status": "done", "output": output})
                ),
            )?;
            return Ok(());
        }
        InvokeOutcome::NeedsConfirmation(pack) => pack,
    };
    let line = serde_json::to_string(&pack).map_err(|e| CliError::Internal(e.to_string()))?;
    write_out(out, &format!("{line}\n"))?;
    out.flush().ok();
    if args.no_wait {
        return Ok(());
    }
    let mut err = std::io::stderr();
    let _ = writeln!(
        err,
        "Confirmation needed. Open {} in a browser (you are asked to sign in, then shown the request),\n\
         or POST resource_uri={} to it from a user app. Waiting for the decision…",
        start_link(&pack.confirmation_uri, &pack.resource_uri),
        pack.resource_uri
    );
    let status = rt
        .block_on(agent::poll_result(
            &pack.result_uri,
            Duration::from_secs(args.timeout),
        ))
        .map_err(|e| CliError::Server(e.to_string()))?;
    let result = match status {
        ResultStatus::Accepted(result) => {
            serde_json::json!({"status": "accepted", "result": result})
        }
        ResultStatus::Rejected => serde_json::json!({"status": "rejected"}),
        ResultStatus::Expired => serde_json::json!({"status": "expired"}),
    };
    write_out(out, &format!("{result}\n"))
}

pub use crate::resource::agent::start_link;
