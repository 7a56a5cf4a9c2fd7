//! `cheq demo --two-hosts`: a second confirmation server beside the first,
//! where alice has an account too, so that a newcomer can move her from
//! one host to the other (PROTOCOL.md §17) and see her next CHEQ confirmed
//! there. It takes registrations from loopback (§16.3), and the RS may
//! fetch from loopback, where both hosts are.

use super::{server, Args, CliError};
use crate::configfile::ServerConfig as _;
use crate::testkit::toml_path;
use std::path::PathBuf;
use std::sync::Arc;

/// The second host, before it starts.
pub(super) struct SecondHost {
    port: u16,
    url: String,
    dir: PathBuf,
}

/// The second host, running: ended with the demo.
pub(super) struct Running {
    url: String,
    config: PathBuf,
    password_line: String,
    _background: crate::confirm::server::Background,
    _server: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// What the RS's file starts with (top-level keys): with two hosts, the
/// RS may fetch from loopback, where the second host is.
pub(super) fn rs_head(second: Option<&SecondHost>) -> &'static str {
    match second {
        Some(_) => "allow_addresses = [\"127.0.0.0/8\", \"::1/128\"]\n",
        None => "",
    }
}

/// What the first host's file starts with: its name, beside the second's.
pub(super) fn first_head(second: Option<&SecondHost>) -> &'static str {
    match second {
        Some(_) => "name = \"First demo host\"\n",
        None => "",
    }
}

impl SecondHost {
    pub(super) fn new(args: &Args, host: &str) -> Self {
        SecondHost {
            port: args.cs2_port,
            url: format!("http://{host}:{}", args.cs2_port),
            dir: args.data_dir.join("second"),
        }
    }

    /// Writes its file (mode 0600) and reads it back, checked.
    pub(super) fn config(&self, database: &str) -> Result<crate::confirm::CsConfig, CliError> {
        let path = |p: PathBuf| toml_path(&p).map_err(server);
        let text = format!(
            "# Written by `cheq demo --two-hosts`: the second confirmation server.\n{database}\
             name = \"Second demo host\"\nlisten = \"127.0.0.1:{port}\"\npublic_url = \"{url}\"\n\
             data_dir = \"{data}\"\nsigning_key = \"{key}\"\nmetrics = \"open\"\n\n\
             [registration]\nmode = \"open\"\nallow_addresses = [\"127.0.0.0/8\", \"::1/128\"]\n",
            port = self.port,
            url = self.url,
            data = path(self.dir.join("cs"))?,
            key = path(self.dir.join("keys/cs.jwk"))?,
        );
        std::fs::create_dir_all(self.dir.join("keys")).map_err(|source| CliError::Write {
            path: self.dir.display().to_string(),
            source,
        })?;
        super::write_0600(&self.dir.join("cs.toml"), &text)?;
        crate::confirm::CsConfig::from_toml(&text).map_err(server)
    }

    /// Starts it, with alice.
    pub(super) async fn start(
        &self,
        config: &crate::confirm::CsConfig,
    ) -> Result<Running, CliError> {
        let state = crate::confirm::build_state(config, Arc::new(crate::time::SystemClock))
            .await
            .map_err(server)?;
        let password_line = alice(&state)?;
        let listener = std::net::TcpListener::bind(&config.listen)
            .map_err(|e| server(format!("cannot listen on {}: {e}", config.listen)))?;
        let background = crate::confirm::server::start_background(&state, &config.data_dir);
        let running = crate::confirm::serve(listener, state).map_err(server)?;
        Ok(Running {
            url: self.url.clone(),
            config: self.dir.join("cs.toml"),
            password_line,
            _background: background,
            _server: tokio::spawn(running),
        })
    }
}

/// Creates alice on the second host (kept when she is there): with the
/// password of `CHEQ_DEMO_PASSWORD` when it is set, else a new one.
fn alice(state: &crate::confirm::CsState) -> Result<String, CliError> {
    use crate::confirm::auth::new_account;
    if let Ok(p) = std::env::var("CHEQ_DEMO_PASSWORD") {
        let account = new_account("alice", None, &p).map_err(server)?;
        state.accounts.put(&account, true).map_err(server)?;
        return Ok("the password from CHEQ_DEMO_PASSWORD".into());
    }
    if state.accounts.get("alice").map_err(server)?.is_some() {
        return Ok("her password there from the first run (unchanged)".into());
    }
    let p = crate::sign::b64::encode(rand::random::<[u8; 9]>());
    let account = new_account("alice", None, &p).map_err(server)?;
    state.accounts.put(&account, false).map_err(server)?;
    Ok(format!("password {p}"))
}

impl Running {
    /// What the banner says of the second host and of a move.
    pub(super) fn told(&self, command: &str, first: &str, rs: &str) -> String {
        format!(
            "\nWith --two-hosts: a second confirmation server runs at {url}   (config {cfg})\
             \n  user alice there, {pw}\
             \nMove alice to it (confirmed at {first}, where she is now):\
             \n\n  {command} agent --rs {rs} --tool choose_confirmation_server \\\
             \n      --param confirmation_server={url}\
             \n\nor open {rs}/settings. Once she accepts, her next booking is confirmed at {url}.\n",
            url = self.url,
            cfg = self.config.display(),
            pw = self.password_line,
        )
    }
}
