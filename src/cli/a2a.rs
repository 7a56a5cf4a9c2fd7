//! `cheq a2a`: the A2A bridge in front of an A2T resource server (CHEQ
//! draft §6; PROTOCOL.md "A2A binding"). Serves A2A 1.0 over HTTP
//! (`--listen ADDR`: the Agent Card at `/.well-known/agent-card.json`,
//! JSON-RPC at `/`); the RS is called as an agent with OAuth client
//! credentials, like `cheq agent` and `cheq mcp`, whose arguments it takes.
//! Its tasks are kept in a store, so that a bridge started again answers
//! for them and carries on with those waiting for their user: sled in
//! `--data-dir` (made 0700), or PostgreSQL at `--database-url` /
//! `CHEQ_DATABASE_URL` (the `a2a` schema applied first). This is the one
//! place the bridge opens a backend.

use super::agent::{DEMO_AGENT_ID, DEMO_AGENT_SECRET};
use super::CliError;
use crate::a2a::{A2aBridge, A2aConfig};
use crate::store::a2a::TaskStore;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the tasks are kept when neither `--data-dir` nor a database is
/// named (relative to the working directory, like the demo's `data/demo`).
pub const DEFAULT_DATA_DIR: &str = "data/a2a";

/// The bridge's sled database in its data directory.
pub const SLED_DIR: &str = "a2a.sled";

/// Connections the bridge opens to PostgreSQL at most (the pool's least).
const PG_POOL: usize = 8;

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
    /// Keep the tasks in DIR (an embedded database, `a2a.sled`; DIR is
    /// made 0700, and refused when open to others). Default: `data/a2a`
    /// under the working directory. One bridge per directory.
    #[arg(long, value_name = "DIR", conflicts_with = "database_url")]
    pub data_dir: Option<PathBuf>,
    /// Keep the tasks in this PostgreSQL database instead
    /// (postgres://user@host:port/dbname; table `a2a_tasks`); also
    /// `CHEQ_DATABASE_URL`, unless `--data-dir` is given. One bridge per
    /// database.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
}

/// Where the bridge keeps its tasks.
#[derive(Debug, PartialEq, Eq)]
pub enum Place {
    /// sled in this data directory.
    DataDir(PathBuf),
    /// This PostgreSQL database.
    Database(crate::configfile::DatabaseUrl),
}

impl Place {
    /// The place the arguments name: `--database-url`, else `--data-dir`,
    /// else `CHEQ_DATABASE_URL` (`env`), else [`DEFAULT_DATA_DIR`].
    pub fn of(args: &Args, env: Option<String>) -> Result<Place, CliError> {
        let url = match (&args.database_url, &args.data_dir) {
            (Some(url), _) => Some(url.clone()),
            (None, Some(dir)) => return Ok(Place::DataDir(dir.clone())),
            (None, None) => env.filter(|u| !u.is_empty()),
        };
        match url {
            Some(url) => {
                let url = crate::configfile::DatabaseUrl(url);
                url.validate()
                    .map_err(|e| CliError::Usage(format!("--database-url: {e}")))?;
                Ok(Place::Database(url))
            }
            None => Ok(Place::DataDir(PathBuf::from(DEFAULT_DATA_DIR))),
        }
    }

    /// Opens the task store here (the sled database stays open as long as
    /// the store).
    pub fn open(&self) -> Result<Arc<dyn TaskStore>, CliError> {
        match self {
            Place::DataDir(dir) => open_dir(dir),
            Place::Database(url) => {
                let pg = crate::store::pg::Pg::new(&url.0, PG_POOL)
                    .map_err(|e| CliError::Server(format!("--database-url: {e}")))?;
                crate::store::pg::a2a::open(&pg)
                    .map_err(|e| CliError::Server(format!("the A2A tasks' database: {e}")))
            }
        }
    }
}

/// The task store in `dir` (made 0700 when missing).
fn open_dir(dir: &Path) -> Result<Arc<dyn TaskStore>, CliError> {
    crate::keyfile::ensure_private_dir(dir)
        .map_err(|e| CliError::Server(format!("--data-dir {e}")))?;
    let path = dir.join(SLED_DIR);
    let (_db, store) = crate::store::sled_a2a::open_dir(&path).map_err(|e| {
        CliError::Server(format!(
            "the A2A tasks' database {} (is another cheq a2a running on it?): {e}",
            path.display()
        ))
    })?;
    Ok(store)
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
    let store = Place::of(&args, std::env::var("CHEQ_DATABASE_URL").ok())?.open()?;
    let guarded = token.is_some();
    if guarded && !addr.ip().to_canonical().is_loopback() {
        log::warn!(
            "the A2A bridge serves plain HTTP on {addr}: put a TLS proxy in front of it, or its \
             bearer token crosses the network in clear (RFC 6750 §5.3)"
        );
    }
    let bridge = Arc::new(
        A2aBridge::new(
            A2aConfig {
                rs: args.rs.trim_end_matches('/').to_owned(),
                client_id: args.client_id,
                secret: secret.into(),
                endpoint: endpoint.clone(),
                bearer: guarded,
            },
            store,
        )
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
        let resumed = bridge.resume().await;
        log::info!(
            "A2A tasks: {} kept, {} waiting for their user followed again, {} interrupted by the restart",
            bridge.task_count(),
            resumed.following,
            resumed.interrupted
        );
        crate::a2a::serve(listener, bridge, token)
            .map_err(|e| CliError::Server(e.to_string()))?
            .await
            .map_err(|e| CliError::Server(e.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(extra: &[&str]) -> Result<Args, clap::Error> {
        let mut argv = vec!["a2a", "--listen", "127.0.0.1:0"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|c| c.args)
    }

    const URL: &str = "postgres://u@db.example/cheq";

    #[test]
    fn the_place_of_the_tasks() {
        let dir = |d: &str| Place::DataDir(PathBuf::from(d));
        let db = |u: &str| Place::Database(crate::configfile::DatabaseUrl(u.into()));
        assert_eq!(
            Place::of(&args(&[]).unwrap(), None).unwrap(),
            dir(DEFAULT_DATA_DIR)
        );
        assert_eq!(
            Place::of(&args(&["--data-dir", "/d"]).unwrap(), None).unwrap(),
            dir("/d")
        );
        assert_eq!(
            Place::of(&args(&["--database-url", URL]).unwrap(), None).unwrap(),
            db(URL)
        );
        // The environment's database, unless a data directory is named.
        assert_eq!(
            Place::of(&args(&[]).unwrap(), Some(URL.into())).unwrap(),
            db(URL)
        );
        assert_eq!(
            Place::of(&args(&["--data-dir", "/d"]).unwrap(), Some(URL.into())).unwrap(),
            dir("/d")
        );
        assert_eq!(
            Place::of(&args(&[]).unwrap(), Some(String::new())).unwrap(),
            dir(DEFAULT_DATA_DIR)
        );
    }

    #[test]
    fn both_places_or_a_bad_url_are_refused() {
        assert!(args(&["--data-dir", "/d", "--database-url", URL]).is_err());
        for bad in ["mysql://u@h/db", "postgres://", "/var/lib/db"] {
            let err = Place::of(&args(&["--database-url", bad]).unwrap(), None).unwrap_err();
            let said = err.to_string();
            assert!(said.contains("database_url"), "{said}");
        }
        let err = Place::of(&args(&[]).unwrap(), Some("sqlite:x".into())).unwrap_err();
        assert!(matches!(err, CliError::Usage(_)));
    }

    #[test]
    fn a_data_dir_open_to_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        let Err(err) = open_dir(&open) else {
            panic!("opened a directory open to others")
        };
        assert!(err.to_string().contains("--data-dir"), "{err}");
        // A new one is made 0700.
        let made = tmp.path().join("new/a2a");
        open_dir(&made).unwrap();
        let mode = std::fs::metadata(&made).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }
}
