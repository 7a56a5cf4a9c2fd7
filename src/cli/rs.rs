//! `cheq rs list | block ORIGIN | unblock ORIGIN | remove ORIGIN | token`
//! `(--config FILE | --data-dir DIR)`: the resource servers that registered
//! themselves at a confirmation server (PROTOCOL.md §16.3), and the initial
//! access tokens of `token` mode. Works while the server runs: through its
//! admin socket on sled ([`crate::confirm::admin`]), in the database itself
//! on PostgreSQL; every instance acts on a change within 5 s.

use super::user::Place;
use super::{write_out, CliError};
use crate::confirm::admin;
use crate::store::registrations::{RegisteredRecord, RegistrationStatus};
use std::io::Write;

/// Manage the resource servers registered at the confirmation server.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: RsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum RsCommand {
    /// List the registered resource servers: origin, name, status, when
    /// each registered first.
    List(PlaceArgs),
    /// Stop serving a resource server: its start links show a page saying
    /// so, its pending deliveries wait, and its registration is refused. An
    /// origin that never registered may be blocked ahead.
    Block(OriginArgs),
    /// Serve a blocked resource server again (its waiting deliveries go
    /// out).
    Unblock(OriginArgs),
    /// Forget a registered resource server: it is no longer served, and may
    /// register again.
    Remove(OriginArgs),
    /// Print a new initial access token for `[registration] mode = "token"`:
    /// it allows one registration, and only its SHA-256 is kept.
    Token(PlaceArgs),
}

#[derive(Debug, clap::Args)]
pub struct PlaceArgs {
    #[command(flatten)]
    pub place: Place,
}

#[derive(Debug, clap::Args)]
pub struct OriginArgs {
    /// The resource server's origin (https://host[:port]).
    pub origin: String,
    #[command(flatten)]
    pub place: Place,
}

/// Where the registrations are, and the origins of the configuration's
/// resource servers (they win over registrations).
fn place(place: &Place) -> Result<(admin::Place, Vec<String>), CliError> {
    let (config, _, at) = super::user::locate(place)?;
    let configured = config
        .map(|c| {
            c.resource_servers
                .iter()
                .filter_map(|r| crate::discovery::origin(&r.origin))
                .collect()
        })
        .unwrap_or_default();
    Ok((at, configured))
}

/// `origin` as registrations name it; a usage error when it is no origin.
fn origin(text: &str) -> Result<String, CliError> {
    crate::confirm::registration::parse_origin(text.trim())
        .map_err(|e| CliError::Usage(format!("usage: {e}")))
}

fn failed(e: admin::AdminError) -> CliError {
    CliError::Server(e.to_string())
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    match args.command {
        RsCommand::List(a) => {
            let (at, configured) = place(&a.place)?;
            let records = admin::rs_list(&at).map_err(failed)?;
            write_out(out, &listing(&records, &configured))
        }
        RsCommand::Block(a) => {
            let origin = origin(&a.origin)?;
            let (at, configured) = place(&a.place)?;
            let changed = admin::rs_block(&at, &origin, now()).map_err(failed)?;
            let mut text = if changed {
                format!("blocked {origin}: within 5 s no instance serves it\n")
            } else {
                format!("{origin} was already blocked\n")
            };
            if configured.contains(&origin) {
                text.push_str(&configured_note(&origin));
            }
            write_out(out, &text)
        }
        RsCommand::Unblock(a) => {
            let origin = origin(&a.origin)?;
            let (at, _) = place(&a.place)?;
            let changed = admin::rs_unblock(&at, &origin, now()).map_err(failed)?;
            write_out(
                out,
                &if changed {
                    format!("unblocked {origin}: within 5 s every instance serves it again\n")
                } else {
                    format!("{origin} was not blocked\n")
                },
            )
        }
        RsCommand::Remove(a) => {
            let origin = origin(&a.origin)?;
            let (at, configured) = place(&a.place)?;
            let changed = admin::rs_remove(&at, &origin).map_err(failed)?;
            let mut text = if changed {
                format!(
                    "removed {origin}: within 5 s no instance serves it; it may register again\n"
                )
            } else {
                return Err(CliError::Server(format!(
                    "{origin} is not registered here (see `cheq rs list`)"
                )));
            };
            if configured.contains(&origin) {
                text.push_str(&configured_note(&origin));
            }
            write_out(out, &text)
        }
        RsCommand::Token(a) => {
            let (at, _) = place(&a.place)?;
            let token = crate::confirm::registration::new_token(&mut rand::rngs::OsRng);
            let digest = crate::confirm::registration::token_digest(&token);
            admin::rs_add_token(&at, &digest, now()).map_err(failed)?;
            write_out(out, &format!("{token}\n"))
        }
    }
}

/// The note on an origin that the configuration names too.
fn configured_note(origin: &str) -> String {
    format!(
        "note: {origin} is also in the configuration file, which wins: it stays served until it is taken out there\n"
    )
}

/// The list as a table, or a sentence when it is empty.
fn listing(records: &[RegisteredRecord], configured: &[String]) -> String {
    if records.is_empty() {
        return "no resource server has registered\n".to_owned();
    }
    let rows: Vec<[String; 4]> = records
        .iter()
        .map(|r| {
            let name = if r.is_placeholder() {
                "(never registered)".to_owned()
            } else {
                crate::text::one_line(&r.name)
            };
            let mut status = match r.status {
                RegistrationStatus::Active => "active".to_owned(),
                RegistrationStatus::Blocked => "blocked".to_owned(),
            };
            if configured.contains(&r.origin) {
                status.push_str(" (configured: served)");
            }
            let when = chrono::DateTime::from_timestamp(r.registered_at, 0)
                .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                .unwrap_or_else(|| r.registered_at.to_string());
            [crate::text::one_line(&r.origin), name, status, when]
        })
        .collect();
    let head = ["ORIGIN", "NAME", "STATUS", "REGISTERED"];
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([head[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths = [width(0), width(1), width(2)];
    let line = |cells: [&str; 4]| {
        format!(
            "{:w0$}  {:w1$}  {:w2$}  {}\n",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        )
    };
    let mut out = line(head);
    for r in &rows {
        out.push_str(&line([&r[0], &r[1], &r[2], &r[3]]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(origin: &str, name: &str, status: RegistrationStatus) -> RegisteredRecord {
        RegisteredRecord {
            origin: origin.into(),
            name: name.into(),
            resource_prefix: format!("{origin}/cheq/"),
            jwks_uri: format!("{origin}/jwks.json"),
            token_endpoint: if name.is_empty() {
                String::new()
            } else {
                format!("{origin}/token")
            },
            status,
            registered_at: 1_796_000_000,
            updated_at: 1_796_000_000,
        }
    }

    #[test]
    fn the_list_is_a_table_with_a_header() {
        assert_eq!(listing(&[], &[]), "no resource server has registered\n");
        let text = listing(
            &[
                record(
                    "https://air.example",
                    "Example Air",
                    RegistrationStatus::Active,
                ),
                record("https://bad.example", "", RegistrationStatus::Blocked),
            ],
            &["https://air.example".into()],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("ORIGIN"), "{text}");
        assert!(
            lines[1].contains("Example Air") && lines[1].contains("active (configured: served)"),
            "{text}"
        );
        assert!(lines[1].contains("2026-"), "{text}");
        assert!(
            lines[2].contains("(never registered)") && lines[2].contains("blocked"),
            "{text}"
        );
        // Columns line up.
        assert_eq!(lines[1].find("Example"), lines[2].find("(never"));
    }

    #[test]
    fn an_origin_is_required() {
        assert_eq!(
            origin("https://Air.Example:443/").unwrap(),
            "https://air.example"
        );
        for bad in ["air.example", "https://air.example/cheq", ""] {
            assert!(matches!(origin(bad), Err(CliError::Usage(_))), "{bad}");
        }
    }
}
