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

fn toml_path(p: &Path) -> Result<String, ConfigTextError> {
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
}

impl LoopbackPair {
    pub fn rs_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.rs_port)
    }

    /// The confirmation URI.
    pub fn cs_url(&self) -> String {
        format!("http://127.0.0.1:{}{}", self.cs_port, self.cs_path)
    }

    /// The RS configuration: the CS as its confirmation server, the CS and the
    /// agent (acting for alice) as its clients.
    pub fn rs_toml(&self) -> Result<String, ConfigTextError> {
        Ok(format!(
            r#"listen = "127.0.0.1:{rs_port}"
public_url = "{rs_url}"
data_dir = "{rs_data}"
signing_key = "{rs_key}"
# On loopback alone: the metrics need no token here.
metrics = "open"
cheq_ttl_secs = 900
retry_after_secs = 1

[confirmation_server]
uri = "{cs_url}"
{cs_jwks}

[[clients]]
client_id = "cs"
client_secret = "{cs_secret}"
role = "cs"

[[clients]]
client_id = "{agent_id}"
client_secret = "{agent_secret}"
role = "agent"
subject = "alice"
"#,
            rs_port = self.rs_port,
            rs_url = self.rs_url(),
            rs_data = toml_path(&self.dir.join("rs"))?,
            rs_key = toml_path(&self.rs_key)?,
            cs_url = self.cs_url(),
            cs_jwks = match &self.cs_jwks {
                Some(file) => format!("jwks_file = \"{}\"", toml_path(file)?),
                None => format!(
                    "jwks_uri = \"http://127.0.0.1:{}/.well-known/jwks.json\"",
                    self.cs_port
                ),
            },
            cs_secret = toml_str(&self.cs_secret)?,
            agent_id = toml_str(&self.agent_id)?,
            agent_secret = toml_str(&self.agent_secret)?,
        ))
    }

    /// The CS configuration: the RS as its one registered resource server.
    /// Further tables (`[[gateways]]`, more resource servers) may follow.
    pub fn cs_toml(&self) -> Result<String, ConfigTextError> {
        Ok(format!(
            r#"listen = "127.0.0.1:{cs_port}"
public_url = "{cs_url}"
data_dir = "{cs_data}"
signing_key = "{cs_key}"
# On loopback alone: the metrics need no token here.
metrics = "open"

[[resource_servers]]
origin = "{rs_url}"
path_prefix = "/cheq/"
{rs_jwks}
token_url = "{rs_url}/oauth/token"
client_id = "cs"
client_secret = "{cs_secret}"
"#,
            cs_port = self.cs_port,
            cs_url = self.cs_url(),
            cs_data = toml_path(&self.dir.join("cs"))?,
            cs_key = toml_path(&self.cs_key)?,
            rs_url = self.rs_url(),
            rs_jwks = match &self.rs_jwks {
                Some(file) => format!("jwks = \"{}\"", toml_path(file)?),
                None => format!("jwks_uri = \"{}/.well-known/jwks.json\"", self.rs_url()),
            },
            cs_secret = toml_str(&self.cs_secret)?,
        ))
    }

    /// The RS configuration of a resource server that serves the
    /// confirmation itself (§12): no confirmation server, no CS client;
    /// `confirmation` is more of its `[confirmation]` table (TOML lines),
    /// and tables of it (`[[confirmation.gateways]]`) may follow.
    pub fn hosted_rs_toml(&self, confirmation: &str) -> Result<String, ConfigTextError> {
        Ok(format!(
            r#"listen = "127.0.0.1:{rs_port}"
public_url = "{rs_url}"
data_dir = "{rs_data}"
signing_key = "{rs_key}"
# On loopback alone: the metrics need no token here.
metrics = "open"
cheq_ttl_secs = 900
retry_after_secs = 1

[[clients]]
client_id = "{agent_id}"
client_secret = "{agent_secret}"
role = "agent"
subject = "alice"

[confirmation]
embedded = true
signing_key = "{cs_key}"
{confirmation}
"#,
            rs_port = self.rs_port,
            rs_url = self.rs_url(),
            rs_data = toml_path(&self.dir.join("rs"))?,
            rs_key = toml_path(&self.rs_key)?,
            cs_key = toml_path(&self.cs_key)?,
            agent_id = toml_str(&self.agent_id)?,
            agent_secret = toml_str(&self.agent_secret)?,
        ))
    }
}
