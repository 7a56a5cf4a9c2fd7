//! `cheq countersign`: the confirmation signature (PROTOCOL.md §5), made by
//! an operator at the command line.
//!
//! The resource-signed CHEQ is first verified (§5 rules 1–4, through
//! [`verify_resource`]) at `--now` or the current time; only then is the
//! decision signed and the two-signature CHEQ printed on stdout.
//!
//! Header values the command line fills in:
//! - `sub`: `--sub`, which must equal the payload's `subject`;
//! - `iat` and `auth_time`: both the time of signing (`--now`, or now);
//! - `amr`: `["user"]` (RFC 8176 "user presence"): the operator at the
//!   terminal is present, but no password or second factor was checked here;
//! - `cheq_channel`: `--channel`, `api` by default;
//! - `cheq_view`: base64url SHA-256 of the payload text `cheq inspect` prints
//!   (see [`super::inspect::payload_text`]), the text an operator is shown.

use super::{inspect, now_or_current, parse_now, read_input, read_signing_key, read_trust};
use super::{write_out, CliError};
use crate::sign::{countersign, verify_resource, Channel, Context, Decision, DecisionInput};
use chrono::{DateTime, Utc};
use std::io::Write;
use std::path::PathBuf;

/// The RFC 8176 `amr` value the CLI signs with: user presence.
pub const CLI_AMR: &str = "user";

/// Countersign a resource-signed CHEQ with a decision.
///
/// Verifies the resource signature (PROTOCOL.md §5 rules 1-4) at --now or the
/// current time, then prints the CHEQ with both signatures. In the
/// confirmation header: iat = auth_time = the time of signing; amr = ["user"]
/// (RFC 8176 user presence: no password was checked by the CLI);
/// cheq_view = base64url SHA-256 of the payload text `cheq inspect` prints
/// (pretty JSON, two-space indent, no trailing newline).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The confirmation server's private JWK.
    #[arg(long, value_name = "CS.jwk")]
    pub key: PathBuf,
    /// The TRUST file: keys trusted per resource-server origin.
    #[arg(long, value_name = "TRUST.json")]
    pub trust: PathBuf,
    /// The decision to sign.
    #[arg(long, value_enum)]
    pub decision: DecisionArg,
    /// The user's id at the confirmation server; must equal the payload's "subject".
    #[arg(long, value_name = "USER")]
    pub sub: String,
    /// Where the user saw the CHEQ.
    #[arg(long, value_enum, default_value_t = ChannelArg::Api)]
    pub channel: ChannelArg,
    /// Sign and check expiry at this time (RFC 3339) instead of now.
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<DateTime<Utc>>,
    /// The resource-signed CHEQ; `-` reads standard input.
    #[arg(value_name = "SIGNED.json")]
    pub file: PathBuf,
}

/// `--decision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DecisionArg {
    Accept,
    Reject,
}

impl From<DecisionArg> for Decision {
    fn from(d: DecisionArg) -> Self {
        match d {
            DecisionArg::Accept => Decision::Accept,
            DecisionArg::Reject => Decision::Reject,
        }
    }
}

/// `--channel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ChannelArg {
    Html,
    Voice,
    Api,
}

impl From<ChannelArg> for Channel {
    fn from(c: ChannelArg) -> Self {
        match c {
            ChannelArg::Html => Channel::Html,
            ChannelArg::Voice => Channel::Voice,
            ChannelArg::Api => Channel::Api,
        }
    }
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let key = read_signing_key(&args.key)?;
    let trust = read_trust(&args.trust)?;
    let document = read_input(&args.file)?;
    let now = now_or_current(args.now);
    let verified = verify_resource(&document, &trust, &Context::at(now))?;
    let view_text = inspect::payload_text(verified.cheq().raw())?;
    let amr = [CLI_AMR.to_owned()];
    let input = DecisionInput {
        decision: args.decision.into(),
        sub: &args.sub,
        also_known_as: &[],
        auth_time: now.timestamp(),
        amr: &amr,
        channel: args.channel.into(),
        view_text: &view_text,
        collected: None,
        passkey: None,
    };
    let decided = countersign(&verified, &key, input, now)?;
    write_out(out, &decided)?;
    write_out(out, "\n")
}
