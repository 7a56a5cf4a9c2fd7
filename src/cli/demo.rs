//! `cheq demo [--data-dir DIR] [--cs-port N] [--rs-port N] [--colocated]
//! [--two-hosts]`: the main job for a newcomer. Generates keys on first run (in the data
//! directory, mode 0600, never committed), writes the two servers'
//! configurations there, starts the confirmation server and the reference
//! resource server on loopback (with `--colocated`, the resource server alone,
//! serving the confirmation itself, §12), creates the demo user `alice`
//! (password from `CHEQ_DEMO_PASSWORD`, or generated and printed), and says
//! what to do next. With `--two-hosts`, a second confirmation server (with
//! alice too) that the RS's users may move to (§17).

mod evidence;
mod second;

use super::agent::DEMO_AGENT_ID;
use super::{write_out, CliError};
use crate::configfile::ServerConfig as _;
use crate::confirm::auth::new_account;
use crate::testkit::LoopbackPair;
use crate::time::SystemClock;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Run the demo: the confirmation server and the reference RS on loopback.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where keys, configurations and databases are kept.
    #[arg(long, default_value = "data/demo")]
    pub data_dir: PathBuf,
    /// The confirmation server's port.
    #[arg(long, default_value_t = 8080)]
    pub cs_port: u16,
    /// The resource server's port.
    #[arg(long, default_value_t = 8081)]
    pub rs_port: u16,
    /// Keep both servers' state in this PostgreSQL database
    /// (postgres://user@host:port/dbname) instead of the embedded one.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Also run the test OpenID provider (node's oidc-provider, from
    /// tests/oidc/ of a checkout, after tests/oidc/install.sh) with the user
    /// carol; the agent then acts for carol@example.com, who signs in there.
    #[arg(long)]
    pub with_idp: bool,
    /// The test identity provider's port (with --with-idp).
    #[arg(long, default_value_t = 8082)]
    pub idp_port: u16,
    /// Run the resource server with the confirmation inside it (§12), on
    /// one port (--rs-port): no separate confirmation server.
    #[arg(long)]
    pub colocated: bool,
    /// Passkeys: serve on http://localhost:PORT rather than
    /// http://127.0.0.1:PORT (browsers use passkeys on `localhost` and
    /// refuse them on an IP address), and let the RS ask for the user's
    /// passkey to accept its tools' confirmations (add one at /account).
    #[arg(long)]
    pub passkeys: bool,
    /// Also run a second confirmation server (--cs2-port), where alice has
    /// an account too: move her there from the first (PROTOCOL.md §17),
    /// with the tool choose_confirmation_server or the RS's /settings page.
    #[arg(long)]
    pub two_hosts: bool,
    /// The second confirmation server's port (with --two-hosts).
    #[arg(long, default_value_t = 8082)]
    pub cs2_port: u16,
}

/// The test identity provider of `--with-idp`: a node process, ended with
/// the demo.
struct DemoIdp {
    child: std::process::Child,
    issuer: String,
    password_line: String,
}

impl Drop for DemoIdp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The subject the demo agent acts for with `--with-idp`.
pub const IDP_SUBJECT: &str = "carol@example.com";

/// Where the test provider's script is: `CHEQ_IDP_SCRIPT`, or
/// `tests/oidc/provider.mjs` under the working directory or the checkout
/// that holds this binary (`target/<profile>/cheq`).
fn idp_script() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("CHEQ_IDP_SCRIPT") {
        return Some(PathBuf::from(p));
    }
    let rel = Path::new("tests/oidc/provider.mjs");
    if rel.exists() {
        return Some(rel.to_owned());
    }
    let exe = std::env::current_exe().ok()?;
    let root = exe.parent()?.parent()?.parent()?;
    Some(root.join(rel)).filter(|p| p.exists())
}

fn start_idp(port: u16, cs_origin: &str, client_secret: &str) -> Result<DemoIdp, CliError> {
    use std::io::BufRead;
    let script = idp_script().ok_or_else(|| {
        CliError::Usage(
            "--with-idp runs the test identity provider of a checkout of this repository \
             (tests/oidc/provider.mjs, installed by tests/oidc/install.sh); it was not found \
             (or set CHEQ_IDP_SCRIPT)"
                .into(),
        )
    })?;
    let (password, password_line) = match std::env::var("CHEQ_DEMO_IDP_PASSWORD") {
        Ok(p) if !p.is_empty() => (p, "password from CHEQ_DEMO_IDP_PASSWORD".to_owned()),
        _ => {
            let p = crate::sign::b64::encode(rand::random::<[u8; 9]>());
            (p.clone(), format!("password {p}"))
        }
    };
    let config = serde_json::json!({
        "port": port,
        "client_id": "cheq",
        "client_secret": client_secret,
        "redirect_uris": [format!("{cs_origin}/oidc/callback")],
        "post_logout_redirect_uris": [format!("{cs_origin}/login")],
        "accounts": {"carol": {"password": password, "email": IDP_SUBJECT,
                                "email_verified": true, "amr": ["pwd"]}},
    });
    let mut child = std::process::Command::new("node")
        .arg(&script)
        .env("CHEQ_IDP", config.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| CliError::Server(format!("--with-idp needs node (Debian: nodejs): {e}")))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| CliError::Internal("no output from the identity provider".into()))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(issuer) = line.strip_prefix("ready ") {
                let _ = tx.send(issuer.to_owned());
            }
        }
    });
    let mut idp = DemoIdp {
        child,
        issuer: String::new(),
        password_line,
    };
    idp.issuer = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .map_err(|_| {
            CliError::Server(format!(
                "the identity provider ({}) did not start on port {port}: is the port free, \
                 and were its packages installed (tests/oidc/install.sh)?",
                script.display()
            ))
        })?;
    Ok(idp)
}

/// `--with-idp`: starts the test provider for the sign-in page at `origin`,
/// adds it to `tables` under `key` (the table of identity providers), and
/// lets the agent act for its user carol in `rs_toml`.
fn with_idp(
    args: &Args,
    origin: &str,
    tables: &mut String,
    rs_toml: &mut String,
    key: &str,
) -> Result<Option<DemoIdp>, CliError> {
    if !args.with_idp {
        return Ok(None);
    }
    let secret = crate::sign::b64::encode(rand::random::<[u8; 24]>());
    let idp = start_idp(args.idp_port, origin, &secret)?;
    tables.push_str(&format!(
        "\n[[{key}]]\nname = \"demo-idp\"\nissuer = \"{}\"\nclient_id = \"cheq\"\nclient_secret = \"{secret}\"\n",
        idp.issuer
    ));
    *rs_toml = rs_toml.replace(
        "subject = \"alice\"",
        &format!("subject = \"{IDP_SUBJECT}\""),
    );
    Ok(Some(idp))
}

impl DemoIdp {
    /// What the demo says of the provider.
    fn told(&self) -> String {
        format!(
            "\nWith --with-idp: the identity provider demo-idp runs at {issuer}\
             \n  its user carol ({IDP_SUBJECT}), {line}\
             \nThe agent now acts for {IDP_SUBJECT}: on the login page choose\
             \n\"Sign in with demo-idp\" and sign in there as carol.\n",
            issuer = self.issuer,
            line = self.password_line,
        )
    }
}

fn server(e: impl std::fmt::Display) -> CliError {
    CliError::Server(e.to_string())
}

/// Writes a file that holds secrets: created with mode 0600 (never readable
/// by others, not even for a moment), replaced if it exists.
fn write_0600(path: &Path, text: &str) -> Result<(), CliError> {
    let write_err = |source| CliError::Write {
        path: path.display().to_string(),
        source,
    };
    let _ = std::fs::remove_file(path);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(write_err)?;
    file.write_all(text.as_bytes()).map_err(write_err)
}

fn set_pin(
    accounts: &dyn crate::store::cs::Accounts,
    data_dir: &Path,
    pin: &str,
) -> Result<(), CliError> {
    crate::confirm::auth::check_pin_format(pin)
        .map_err(|_| CliError::Server("CHEQ_DEMO_PIN must be 6 to 12 digits".into()))?;
    let pepper = crate::keyfile::load_or_create_secret(
        &data_dir.join(crate::confirm::auth::PIN_PEPPER_FILE),
    )
    .map_err(server)?;
    let mut alice = accounts
        .get("alice")
        .map_err(server)?
        .ok_or_else(|| CliError::Internal("alice was not created".into()))?;
    alice.pin_hash = Some(crate::confirm::auth::pin_hash(&pepper, pin).map_err(server)?);
    accounts.put(&alice, true).map_err(server)
}

/// Creates alice (or keeps her) and her voice PIN: the lines that say how
/// she signs in.
fn demo_user(
    cs_state: &crate::confirm::CsState,
    data_dir: &Path,
) -> Result<(String, String), CliError> {
    let password_line = match std::env::var("CHEQ_DEMO_PASSWORD") {
        Ok(p) => {
            // A new password; a PIN or e-mail set earlier is kept.
            let mut account = new_account("alice", None, &p).map_err(server)?;
            if let Some(old) = cs_state.accounts.get("alice").map_err(server)? {
                account.email = old.email;
                account.pin_hash = old.pin_hash;
            }
            cs_state.accounts.put(&account, true).map_err(server)?;
            "the password from CHEQ_DEMO_PASSWORD".to_owned()
        }
        Err(_) => match cs_state.accounts.get("alice").map_err(server)? {
            Some(_) => "her password from the first run (unchanged; forgotten it? start \
                        the demo again with CHEQ_DEMO_PASSWORD set to a new one)"
                .to_owned(),
            None => {
                let p = crate::sign::b64::encode(rand::random::<[u8; 9]>());
                let account = new_account("alice", None, &p).map_err(server)?;
                cs_state.accounts.put(&account, false).map_err(server)?;
                format!("password {p}")
            }
        },
    };

    let pin_line = match std::env::var("CHEQ_DEMO_PIN") {
        Ok(pin) if !pin.is_empty() => {
            set_pin(&*cs_state.accounts, data_dir, &pin)?;
            "PIN from CHEQ_DEMO_PIN".to_owned()
        }
        _ => match cs_state.accounts.get("alice").map_err(server)? {
            Some(a) if a.pin_hash.is_some() => "PIN from an earlier run (unchanged)".to_owned(),
            _ => {
                let pin = format!("{:06}", rand::random::<u32>() % 1_000_000);
                set_pin(&*cs_state.accounts, data_dir, &pin)?;
                format!("PIN {pin}")
            }
        },
    };
    Ok((password_line, pin_line))
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    super::logging::init(crate::configfile::LogFormat::Text, "demo");
    let dir = &args.data_dir;
    let keys = dir.join("keys");
    std::fs::create_dir_all(&keys).map_err(|source| CliError::Write {
        path: keys.display().to_string(),
        source,
    })?;

    // Keys: generated at the first start, kept in the data directory; each
    // server trusts the other's published set (`jwks_uri`), so that
    // `cheq keys rotate` on either is seen by the other (§9).
    let cs_secret = crate::sign::b64::encode(rand::random::<[u8; 24]>());
    // The voice gateway of the raw API (§10).
    let (gateway_secret, gateway_line) = match std::env::var("CHEQ_DEMO_GATEWAY_SECRET") {
        Ok(s) if !s.is_empty() => (s, "secret from CHEQ_DEMO_GATEWAY_SECRET".to_owned()),
        _ => {
            let s = crate::sign::b64::encode(rand::random::<[u8; 18]>());
            (s.clone(), format!("secret {s}"))
        }
    };
    let gateway_hash = crate::confirm::auth::hash_secret(&gateway_secret).map_err(server)?;
    let agent_secret = std::env::var("CHEQ_AGENT_SECRET")
        .unwrap_or_else(|_| super::agent::DEMO_AGENT_SECRET.to_owned());
    let pair = LoopbackPair {
        dir: dir.clone(),
        rs_port: args.rs_port,
        cs_port: args.cs_port,
        cs_path: String::new(),
        rs_key: keys.join("rs.jwk"),
        cs_key: keys.join("cs.jwk"),
        rs_jwks: None,
        cs_jwks: None,
        cs_secret,
        agent_id: DEMO_AGENT_ID.to_owned(),
        agent_secret,
        host: if args.passkeys {
            "localhost"
        } else {
            "127.0.0.1"
        }
        .into(),
    };
    let (cs_url, rs_url) = (pair.cs_url(), pair.rs_url());
    // Top-level keys come before any table.
    let database = match &args.database_url {
        Some(url) if url.chars().any(|c| c.is_control() || c == '"' || c == '\\') => {
            return Err(CliError::Usage(
                "--database-url holds a character a URL cannot have".into(),
            ))
        }
        Some(url) => format!("database_url = \"{url}\"\n"),
        None => String::new(),
    };
    if args.two_hosts && args.colocated {
        return Err(CliError::Usage(
            "--two-hosts runs two confirmation servers beside the resource server;              --colocated has none: choose one"
                .into(),
        ));
    }
    if args.two_hosts && args.with_idp && args.cs2_port == args.idp_port {
        return Err(CliError::Usage(format!(
            "--two-hosts and --with-idp both want port {}: give --cs2-port or --idp-port",
            args.cs2_port
        )));
    }
    if args.colocated {
        let gateway = Gateway {
            hash: gateway_hash,
            line: gateway_line,
        };
        return run_colocated(&args, &pair, &database, gateway, out);
    }
    let second = args
        .two_hosts
        .then(|| second::SecondHost::new(&args, &pair.host));
    let mut rs_toml = format!(
        "# Written by `cheq demo`: the reference resource server.\n{database}{}{}",
        second::rs_head(second.as_ref()),
        pair.rs_toml().map_err(server)?
    );
    rs_toml.push_str(passkey_policy(&args));
    let mut cs_toml = format!(
        "# Written by `cheq demo`: the confirmation server.\n{database}{}{}\n[[gateways]]\nclient_id = \"voice-gw\"\nsecret_hash = \"{gateway_hash}\"\n",
        second::first_head(second.as_ref()),
        pair.cs_toml().map_err(server)?
    );
    let idp = with_idp(
        &args,
        &cs_url,
        &mut cs_toml,
        &mut rs_toml,
        "identity_providers",
    )?;
    write_0600(&dir.join("rs.toml"), &rs_toml)?;
    write_0600(&dir.join("cs.toml"), &cs_toml)?;
    let rs_config = crate::resource::RsConfig::from_toml(&rs_toml).map_err(server)?;
    let cs_config = crate::confirm::CsConfig::from_toml(&cs_toml).map_err(server)?;
    let cs2_config = match &second {
        Some(host) => Some(host.config(&database)?),
        None => None,
    };

    let rt = super::servers::runtime()?;
    rt.block_on(async move {
        let rs_state = crate::resource::build_state(&rs_config, Arc::new(SystemClock))
            .await
            .map_err(server)?;
        let cs_state = crate::confirm::build_state(&cs_config, Arc::new(SystemClock))
            .await
            .map_err(server)?;

        let (password_line, pin_line) = demo_user(&cs_state, &cs_config.data_dir)?;
        let second_host = match (&second, &cs2_config) {
            (Some(host), Some(config)) => Some(host.start(config).await?),
            _ => None,
        };

        let rs_listener = std::net::TcpListener::bind(&rs_config.listen).map_err(|e| {
            server(format!("cannot listen on {}: {e}", rs_config.listen))
        })?;
        let cs_listener = std::net::TcpListener::bind(&cs_config.listen).map_err(|e| {
            server(format!("cannot listen on {}: {e}", cs_config.listen))
        })?;
        let command = evidence::command_name();
        let watch = evidence::Watch {
            cs: Arc::clone(&cs_state.cs),
            accounts: Arc::clone(&cs_state.accounts),
            rs_jwks: {
                let cheq = Arc::clone(&rs_state.cheq);
                Box::new(move || cheq.jwks())
            },
            rs_origin: rs_url.clone(),
            cs_origin: cs_url.clone(),
            log_url: cs_state.cs.transparency().map(|_| format!("{cs_url}/log/")),
            dir: dir.clone(),
            command: command.clone(),
        };
        let evidence_lines = told_evidence(&watch)?;
        let _watching = tokio::spawn(watch.run());
        let rs_server = crate::resource::serve(rs_listener, rs_state).map_err(server)?;
        let _background = crate::confirm::server::start_background(&cs_state, &cs_config.data_dir);
        let cs_server = crate::confirm::serve(cs_listener, cs_state).map_err(server)?;

        write_out(
            out,
            &format!(
                "CHEQ demo is running.\n\
                 \n  confirmation server  {cs_url}   (config {cs_cfg})\
                 \n  resource server      {rs_url}   (config {rs_cfg})\
                 \n  user                 alice, {password_line}; voice {pin_line}\
                 \n  voice gateway        voice-gw, {gateway_line} (raw API: {cs_url}/api/v1/)\
                 \n\nIn another terminal, play the agent:\n\
                 \n  {command} agent --rs {rs_url} --tool book_flight --param flight_number=UA23 \\\
                 \n      --param flight_date=2026-12-08 --param cabin_class=BUSINESS --param price_usd=1200\n\
                 \nIt prints the URI pack and a link; open the link in a browser, sign in as alice,\
                 \nand accept or reject. The agent then prints the outcome. Past decisions: {cs_url}/history\
                 \n\nOr let an MCP client be the agent (PROTOCOL.md §11): run the bridge\
                 \n\n  {command} mcp --rs {rs_url} --listen 127.0.0.1:8090\
                 \n\nand connect the client to http://127.0.0.1:8090/mcp (Streamable HTTP), or give\
                 \na desktop client the command `{absolute} mcp --rs {rs_url} --stdio` (see docs/mcp.md).\
                 \nA call that needs confirmation opens the confirmation server in your browser.\
                 {evidence_lines}\nStop the demo with Ctrl-C.\n",
                absolute = evidence::absolute_command(),
                cs_cfg = dir.join("cs.toml").display(),
                rs_cfg = dir.join("rs.toml").display(),
            ),
        )?;
        if let Some(idp) = &idp {
            write_out(out, &idp.told())?;
        }
        if let Some(host) = &second_host {
            write_out(out, &host.told(&command, &cs_url, &rs_url))?;
        }
        out.flush().ok();
        let (rs, cs) = tokio::join!(rs_server, cs_server);
        drop(idp);
        drop(second_host);
        rs.and(cs).map_err(server)
    })
}

/// Writes the TRUST file of both servers' keys; what the banner says of
/// the public log and of the evidence each decision leaves.
fn told_evidence(watch: &evidence::Watch) -> Result<String, CliError> {
    watch.write_trust().map_err(|source| CliError::Write {
        path: watch.trust_path().display().to_string(),
        source,
    })?;
    let mut text = String::new();
    if let (Some(url), Some(log)) = (&watch.log_url, watch.cs.transparency()) {
        text.push_str(&format!(
            "\n\nEvery decision goes into the public log at {url}\
             \n  its key: {key}",
            key = log.verifier_key()
        ));
    }
    text.push_str(&format!(
        "\n\nAfter each decision the demo writes its evidence to {evidence}/ and prints\
         \nthe commands that check it: `{cmd} verify` with {trust} (both servers' keys),\
         \nand `{cmd} audit` against the public log.\n",
        evidence = watch.dir.join("evidence").display(),
        trust = watch.trust_path().display(),
        cmd = watch.command,
    ));
    Ok(text)
}

/// `--passkeys`: the RS asks for the user's passkey on its two tools (§14).
fn passkey_policy(args: &Args) -> &'static str {
    if args.passkeys {
        "\n[policy]\npasskey_tools = [\"book_flight\", \"transfer_funds\"]\n"
    } else {
        ""
    }
}

/// The demo's voice gateway: its secret's hash, and how the demo names it.
struct Gateway {
    hash: String,
    line: String,
}

/// `cheq demo --colocated`: the resource server with the confirmation inside
/// it (§12), on one port.
fn run_colocated(
    args: &Args,
    pair: &LoopbackPair,
    database: &str,
    gateway: Gateway,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let rs_url = pair.rs_url();
    let confirmation = format!(
        "\n[[confirmation.gateways]]\nclient_id = \"voice-gw\"\nsecret_hash = \"{}\"\n",
        gateway.hash
    );
    let mut rs_toml = format!(
        "# Written by `cheq demo --colocated`: the reference resource server, serving the confirmation itself.\n{database}{}",
        pair.hosted_rs_toml("").map_err(server)?
    );
    rs_toml.push_str(&confirmation);
    let mut tables = String::new();
    let idp = with_idp(
        args,
        &rs_url,
        &mut tables,
        &mut rs_toml,
        "confirmation.identity_providers",
    )?;
    rs_toml.push_str(&tables);
    rs_toml.push_str(passkey_policy(args));
    let dir = &args.data_dir;
    // The two-server demo's files would name another shape: gone.
    let _ = std::fs::remove_file(dir.join("cs.toml"));
    write_0600(&dir.join("rs.toml"), &rs_toml)?;
    let rs_config = crate::resource::RsConfig::from_toml(&rs_toml).map_err(server)?;
    let rt = super::servers::runtime()?;
    rt.block_on(async move {
        let state = crate::colocated::build_state(&rs_config, Arc::new(SystemClock))
            .await
            .map_err(server)?;
        let (password_line, pin_line) = demo_user(&state.cs, &state.cs_config.data_dir)?;
        let listener = std::net::TcpListener::bind(&rs_config.listen)
            .map_err(|e| server(format!("cannot listen on {}: {e}", rs_config.listen)))?;
        let _background =
            crate::confirm::server::start_background(&state.cs, &state.cs_config.data_dir);
        let collector = crate::resource::server::start_collector(&state.rs);
        let command = evidence::command_name();
        let watch = evidence::Watch {
            cs: Arc::clone(&state.cs.cs),
            accounts: Arc::clone(&state.cs.accounts),
            rs_jwks: {
                let cheq = Arc::clone(&state.rs.cheq);
                Box::new(move || cheq.jwks())
            },
            rs_origin: rs_url.clone(),
            cs_origin: rs_url.clone(),
            // The confirmation's URI is `<rs>/confirm`; its log is under it.
            log_url: state
                .cs
                .cs
                .transparency()
                .map(|_| format!("{rs_url}/confirm/log/")),
            dir: dir.clone(),
            command: command.clone(),
        };
        let evidence_lines = told_evidence(&watch)?;
        let _watching = tokio::spawn(watch.run());
        let running = crate::colocated::serve(listener, &state).map_err(server)?;
        write_out(
            out,
            &format!(
                "CHEQ demo is running: the resource server serves the confirmation itself.\n\
                 \n  resource server      {rs_url}   (config {rs_cfg})\
                 \n  confirmation         {rs_url}/confirm (the same process and origin)\
                 \n  user                 alice, {password_line}; voice {pin_line}\
                 \n  voice gateway        voice-gw, {gateway_line} (raw API: {rs_url}/api/v1/)\
                 \n\nIn another terminal, play the agent:\n\
                 \n  {command} agent --rs {rs_url} --tool book_flight --param flight_number=UA23 \\\
                 \n      --param flight_date=2026-12-08 --param cabin_class=BUSINESS --param price_usd=1200\n\
                 \nIt prints the URI pack and a link to this same server; open it, sign in as alice,\
                 \nand accept or reject. Past decisions: {rs_url}/history\
                 {evidence_lines}\nStop the demo with Ctrl-C.\n",
                rs_cfg = dir.join("rs.toml").display(),
                gateway_line = gateway.line,
            ),
        )?;
        if let Some(idp) = &idp {
            write_out(out, &idp.told())?;
        }
        out.flush().ok();
        let served = running.await;
        collector.abort();
        drop(idp);
        served.map_err(server)
    })
}
