//! Fixtures shared by the tests, the benchmarks and the demo: a confirmation
//! server and a reference resource server on loopback that trust each other,
//! as the two TOML configurations they are started from (no I/O: the caller
//! writes the files and starts the servers). What parts of the test suite
//! need besides Rust is `cheq_store::testing`, for tests only.

use std::path::{Path, PathBuf};

/// A value that cannot go into a configuration file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigTextError(pub String);

/// A TOML basic string's content: backslashes and quotes escaped, control
/// characters refused (they cannot come from a sane secret or path).
fn toml_str(s: &str) -> Result<String, ConfigTextError> {
    if s.chars().any(char::is_control) {
        return Err(ConfigTextError(format!(
            "{s:?} holds a control character and cannot go into a configuration file"
        )));
    }
    Ok(s.replace('\\', "\\\\").replace('"', "\\\""))
}

pub fn toml_path(p: &Path) -> Result<String, ConfigTextError> {
    toml_str(&p.display().to_string())
}

/// A confirmation server and a reference resource server on loopback that
/// trust each other: their two configurations (the demo's, and the tests').
#[derive(Debug, Clone)]
pub struct LoopbackPair {
    /// Holds the data directories `rs/` and `cs/`.
    pub dir: PathBuf,
    pub rs_port: u16,
    pub cs_port: u16,
    /// The path of the confirmation URI ("" for the root).
    pub cs_path: String,
    pub rs_key: PathBuf,
    pub cs_key: PathBuf,
    /// The RS public keys the CS trusts: a file, or (`None`) the RS's
    /// published set, fetched by `jwks_uri` (§9: key rotation is seen).
    pub rs_jwks: Option<PathBuf>,
    /// The CS public keys the RS trusts: a file, or (`None`) its `jwks_uri`.
    pub cs_jwks: Option<PathBuf>,
    /// The CS's client secret at the RS.
    pub cs_secret: String,
    pub agent_id: String,
    pub agent_secret: String,
    /// The host name in the servers' public URLs: `127.0.0.1`, or
    /// `localhost`, which browsers take as a WebAuthn RP ID where they
    /// refuse an IP address. Both listen on 127.0.0.1 either way.
    pub host: String,
}

impl LoopbackPair {
    pub fn rs_url(&self) -> String {
        format!("http://{}:{}", self.host, self.rs_port)
    }

    /// The confirmation URI.
    pub fn cs_url(&self) -> String {
        format!("http://{}:{}{}", self.host, self.cs_port, self.cs_path)
    }

    /// What every server's file starts with: where it listens and is
    /// reached, its data directory and signing key, open metrics.
    fn server_head(
        port: u16,
        url: &str,
        data: &Path,
        key: &Path,
    ) -> Result<String, ConfigTextError> {
        Ok(format!(
            "listen = \"127.0.0.1:{port}\"\npublic_url = \"{url}\"\ndata_dir = \"{data}\"\nsigning_key = \"{key}\"\n\
             # On loopback alone: the metrics need no token here.\nmetrics = \"open\"\n",
            data = toml_path(data)?,
            key = toml_path(key)?,
        ))
    }

    /// What both RS configurations start with: the server itself, and the
    /// agent (acting for alice) as a client.
    fn rs_head(&self) -> Result<String, ConfigTextError> {
        let head = Self::server_head(
            self.rs_port,
            &self.rs_url(),
            &self.dir.join("rs"),
            &self.rs_key,
        )?;
        Ok(format!(
            "{head}cheq_ttl_secs = 900\nretry_after_secs = 1\n\n\
             [[clients]]\nclient_id = \"{agent_id}\"\nclient_secret = \"{agent_secret}\"\nrole = \"agent\"\nsubject = \"alice\"\n",
            agent_id = toml_str(&self.agent_id)?,
            agent_secret = toml_str(&self.agent_secret)?,
        ))
    }

    /// The RS configuration: the CS as its confirmation server, the CS and the
    /// agent (acting for alice) as its clients.
    pub fn rs_toml(&self) -> Result<String, ConfigTextError> {
        let cs_jwks = match &self.cs_jwks {
            Some(file) => format!("jwks_file = \"{}\"", toml_path(file)?),
            None => format!(
                "jwks_uri = \"http://{}:{}/.well-known/jwks.json\"",
                self.host, self.cs_port
            ),
        };
        Ok(format!(
            "{head}\n[[clients]]\nclient_id = \"cs\"\nclient_secret = \"{cs_secret}\"\nrole = \"cs\"\n\n[confirmation_server]\nuri = \"{cs_url}\"\n{cs_jwks}\n",
            head = self.rs_head()?,
            cs_secret = toml_str(&self.cs_secret)?,
            cs_url = self.cs_url(),
        ))
    }

    /// The CS configuration: the RS as its one registered resource server.
    /// Further tables (`[[gateways]]`, more resource servers) may follow.
    pub fn cs_toml(&self) -> Result<String, ConfigTextError> {
        let head = Self::server_head(
            self.cs_port,
            &self.cs_url(),
            &self.dir.join("cs"),
            &self.cs_key,
        )?;
        let rs_url = self.rs_url();
        let rs_jwks = match &self.rs_jwks {
            Some(file) => format!("jwks = \"{}\"", toml_path(file)?),
            None => format!("jwks_uri = \"{rs_url}/.well-known/jwks.json\""),
        };
        Ok(format!(
            "{head}\n[[resource_servers]]\norigin = \"{rs_url}\"\npath_prefix = \"/cheq/\"\n{rs_jwks}\n\
             token_url = \"{rs_url}/oauth/token\"\nclient_id = \"cs\"\nclient_secret = \"{cs_secret}\"\n",
            cs_secret = toml_str(&self.cs_secret)?,
        ))
    }

    /// The RS configuration of a resource server that serves the
    /// confirmation itself (§12): no confirmation server, no CS client;
    /// `confirmation` is more of its `[confirmation]` table (TOML lines),
    /// and tables of it (`[[confirmation.gateways]]`) may follow.
    pub fn hosted_rs_toml(&self, confirmation: &str) -> Result<String, ConfigTextError> {
        Ok(format!(
            "{head}\n[confirmation]\nembedded = true\nsigning_key = \"{cs_key}\"\n{confirmation}\n",
            head = self.rs_head()?,
            cs_key = toml_path(&self.cs_key)?,
        ))
    }
}
