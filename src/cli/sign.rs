//! `cheq sign --key PRIVATE.jwk PAYLOAD.json`: the resource signature
//! (PROTOCOL.md §5).
//!
//! Signs the payload file's exact bytes (never re-serialised) and prints the
//! resource-signed CHEQ, a JWS in General JSON Serialization, on stdout. A
//! payload that fails §4, including the members needed to countersign, is
//! refused with the reason.

use super::{read_input, read_signing_key, write_out, CliError};
use crate::sign::sign_resource;
use std::io::Write;
use std::path::PathBuf;

/// Resource-sign a CHEQ payload.
///
/// Prints the signed CHEQ (JWS General JSON Serialization) on stdout. The
/// payload's exact bytes are signed. A payload that fails PROTOCOL.md §4
/// (including nonce, resource uri, confirmation uri, subject, expires) is
/// refused.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The resource server's private JWK (from `cheq keygen`).
    #[arg(long, value_name = "PRIVATE.jwk")]
    pub key: PathBuf,
    /// The payload (JSON); `-` reads standard input.
    #[arg(value_name = "PAYLOAD.json")]
    pub payload: PathBuf,
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let key = read_signing_key(&args.key)?;
    let payload = read_input(&args.payload)?;
    let document = sign_resource(&payload, &key)?;
    write_out(out, &document)?;
    write_out(out, "\n")
}
