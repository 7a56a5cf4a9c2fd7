//! The confirmation server's configuration, `cheq.toml`, with environment
//! overrides (PROTOCOL.md §2, §3, §9).
//!
//! ```toml
//! listen = "127.0.0.1:8080"
//! public_url = "http://127.0.0.1:8080"       # the confirmation URI (§1)
//! # name = "Example Confirm"                 # in its discovery document (§16.1); default: its host
//! data_dir = "data"                          # sled database, generated secrets
//! signing_key = "keys/cs.jwk"                # generated (mode 0600) when missing
//! # key_id = "cs-1"                          # kid of a generated key (default: random)
//! # session_secret = "…"                     # default: generated in data_dir
//! # session_ttl_secs = 28800                 # how long a login lasts
//! # history_days = 400                       # how long decisions are kept (default: for good)
//!
//! [[resource_servers]]
//! origin = "http://127.0.0.1:8081"
//! path_prefix = "/cheq/"
//! jwks = "keys/rs.pub.jwks.json"             # a file, or:
//! # jwks_uri = "http://127.0.0.1:8081/.well-known/jwks.json"
//! token_url = "http://127.0.0.1:8081/oauth/token"
//! client_id = "cs"
//! client_secret = "…"
//! # auth = "private_key_jwt"                # instead of client_id and client_secret:
//!                                            # a client assertion signed with the CS's key (§16.4)
//!
//! [registration]                             # resource servers that register themselves (§16.3)
//! mode = "off"                               # "off" (default), "token" or "open"
//! allow_addresses = ["127.0.0.0/8"]          # networks fetched although private or loopback
//!
//! [[gateways]]                               # voice gateways for the raw API (§10)
//! client_id = "voice-gw"
//! secret_hash = "$argon2id$…"                # `cheq hash-secret` makes one
//! # api_token_ttl_secs = 300                 # (top level) lifetime of a user token
//!
//! [[identity_providers]]                     # OpenID Connect sign-in
//! name = "example"                           # "Sign in with example"
//! issuer = "https://idp.example"             # discovery at <issuer>/.well-known/openid-configuration
//! client_id = "cheq"
//! client_secret = "…"                        # or client_secret_file = "…"
//! # scopes = ["openid", "email"]
//! # token_endpoint_auth_method = "client_secret_basic"   # or "client_secret_post"
//! ```
//!
//! The redirect URI to register at a provider is `<public_url origin>/oidc/callback`.
//! `max_auth_age_secs` (top level, and per resource server where it replaces
//! the top-level value) sends a user whose last sign-in is older back to
//! sign in again before they can decide.
//!
//! Every URL the CS reads from (`origin`, `token_url`, `jwks_uri`) uses
//! `https`; plain `http` is accepted only for loopback hosts (127.0.0.0/8,
//! `[::1]`, `localhost`), as for the URIs of PROTOCOL.md §1, so that a client
//! secret or a trusted key never crosses a network in clear.
//!
//! With `[registration] mode = "token"` or `"open"`, resource servers the
//! file does not name register themselves (§16.3) and are served without a
//! restart. `resource_servers` may be empty: the RSes registered (while
//! registration was on, §16.3) are served in any mode until removed. Whatever such a server's
//! documents name is fetched under the rules of `cheq_support::outbound`:
//! `https`, bounded, no redirect, and never to a private, loopback,
//! link-local or unspecified address unless `allow_addresses` lists its
//! network (plain `http` then only to an allowed loopback address). A
//! resource server of the file wins over a registered one of the same
//! origin.
//!
//! Environment overrides (they win over the file): `CHEQ_LISTEN`,
//! `CHEQ_PUBLIC_URL`, `CHEQ_DATA_DIR`, `CHEQ_SIGNING_KEY`, `CHEQ_SESSION_SECRET`,
//! `CHEQ_DATABASE_URL`, `CHEQ_LOG_FORMAT`.
//!
//! Top-level keys for a host running several instances:
//!
//! ```toml
//! database_url = "postgres://cheq@127.0.0.1:5432/cheq"  # state in PostgreSQL
//! log_format = "json"                                    # or "text" (default)
//! ```
//! Relative paths are taken relative to the working directory.

use cheq_core::cheq::uri::parse_cheq_uri;
use serde::Deserialize;
use std::path::{Path, PathBuf};

pub use cheq_support::configfile::ConfigError;
pub use cheq_support::configfile::ServerConfig;
use cheq_support::configfile::{invalid, Env};
pub use cheq_support::configfile::{DatabaseUrl, LogFormat};
use cheq_support::secret::Secret;

mod tables;

pub use tables::*;

/// The file of the transparency log's note key when none is named.
pub const LOG_KEY_FILE: &str = "transparency-log-key.secret";

/// The name [`LOG_KEY_FILE`] had before: read when the file of that name
/// is absent, so that a data directory made before keeps its log's key.
pub const OLD_LOG_KEY_FILE: &str = "tlog-note.secret";

/// The file of the key under which a name in a log line (a user name or a
/// client id that failed) is written as a keyed digest, a pseudonym.
pub const LOG_PSEUDONYM_FILE: &str = "log-pseudonym.secret";

/// The name [`LOG_PSEUDONYM_FILE`] had before, read when it is absent.
pub const OLD_LOG_PSEUDONYM_FILE: &str = "log.secret";

/// The file `name` in `dir`, or the file of its `old` name when only that
/// one exists: a data directory made before a file was renamed keeps its
/// secret (a new secret is made under the new name).
pub fn renamed_file(dir: &Path, name: &str, old: &str) -> PathBuf {
    let new = dir.join(name);
    let before = dir.join(old);
    if !new.exists() && before.exists() {
        before
    } else {
        new
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsConfig {
    pub listen: String,
    /// The confirmation URI (§1): where user apps POST resource URIs.
    pub public_url: String,
    /// What this host calls itself in its discovery document (§16.1), for
    /// a person choosing it at an RS (§17); its host when not given.
    #[serde(default)]
    pub name: Option<String>,
    pub data_dir: PathBuf,
    pub signing_key: PathBuf,
    #[serde(default)]
    pub key_id: Option<String>,
    #[serde(default)]
    pub session_secret: Option<Secret>,
    #[serde(default = "default_session_ttl")]
    pub session_ttl_secs: i64,
    #[serde(default)]
    pub resource_servers: Vec<ResourceServerConfig>,
    /// Voice gateways allowed to use the raw API (§10).
    #[serde(default)]
    pub gateways: Vec<GatewayConfig>,
    /// Lifetime of a raw-API user token.
    #[serde(default = "default_api_token_ttl")]
    pub api_token_ttl_secs: i64,
    /// Reverse proxies in front of the CS (their addresses): from these
    /// alone, the client's address is read from `X-Forwarded-For`, so that
    /// limits count clients, not the proxy.
    #[serde(default)]
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// PostgreSQL holds all state when set (several instances can share
    /// it); otherwise the embedded sled database in `data_dir`.
    #[serde(default)]
    pub database_url: Option<DatabaseUrl>,
    /// `text` (default) or `json` log lines.
    #[serde(default)]
    pub log_format: LogFormat,
    /// Who may read `GET /metrics`: `token` (default: a bearer token, the
    /// contents of `metrics.secret` in `data_dir`) or `open`.
    #[serde(default)]
    pub metrics: cheq_support::metrics::MetricsAccess,
    /// OpenID Connect providers people may sign in with, beside local accounts.
    #[serde(default)]
    pub identity_providers: Vec<IdentityProviderConfig>,
    /// A sign-in older than this must be renewed before deciding (default:
    /// none; a resource server's own value replaces it).
    #[serde(default)]
    pub max_auth_age_secs: Option<i64>,
    /// How long a decision (the user's history, its evidence) is kept after
    /// it was made, in days; default: for good. At least 2 (the record
    /// stops a second countersignature until its CHEQ has expired, §6).
    #[serde(default)]
    pub history_days: Option<crate::flow::HistoryWindow>,
    /// The public log of every countersignature (§15).
    #[serde(default)]
    pub transparency_log: TransparencyLogConfig,
    /// Resource servers that register themselves (§16.3).
    #[serde(default)]
    pub registration: RegistrationConfig,
    /// Served by a resource server itself (§12, [`CsConfig::embedded`]): its
    /// one resource server is registered in the process, not here.
    #[serde(skip)]
    pub embedded: bool,
}

/// What a confirmation served by a resource server itself (§12) takes from
/// the RS's own configuration.
#[derive(Debug, Clone)]
pub struct HostSettings {
    pub listen: String,
    /// The confirmation URI, on the RS's origin.
    pub public_url: String,
    pub data_dir: PathBuf,
    pub database_url: Option<DatabaseUrl>,
    pub log_format: LogFormat,
    pub metrics: cheq_support::metrics::MetricsAccess,
}

/// Keys of the CS that an RS hosting the confirmation sets itself, at the
/// top of its own file.
const HOST_KEYS: &[&str] = &[
    "listen",
    "public_url",
    "data_dir",
    "database_url",
    "log_format",
    "metrics",
    "resource_servers",
];

/// The signing key of a hosted confirmation when `[confirmation]` names
/// none: in the RS's data directory, apart from the RS's own key.
pub const EMBEDDED_SIGNING_KEY: &str = "cs-signing.jwk";

fn default_api_token_ttl() -> i64 {
    300
}

fn default_session_ttl() -> i64 {
    8 * 3600
}

impl ServerConfig for CsConfig {
    const FILE_NAME: &'static str = "cheq.toml";

    fn apply_env(&mut self, env: &Env<'_>) -> Result<(), ConfigError> {
        env.set("CHEQ_PUBLIC_URL", &mut self.public_url);
        env.set("CHEQ_DATA_DIR", &mut self.data_dir);
        env.set("CHEQ_SIGNING_KEY", &mut self.signing_key);
        env.set_some("CHEQ_SESSION_SECRET", &mut self.session_secret);
        env.apply_common(
            &mut self.listen,
            &mut self.database_url,
            &mut self.log_format,
        )
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(url) = &self.database_url {
            url.validate()?;
        }
        if self
            .name
            .as_deref()
            .is_some_and(|n| !cheq_core::discovery::good_name(n))
        {
            return Err(invalid(
                "name",
                format!(
                    "must be 1 to {} characters, none of them a control character",
                    cheq_core::discovery::MAX_NAME_LEN
                ),
            ));
        }
        if self.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(invalid(
                "listen",
                format!(
                    "\"{}\" is not an address such as 127.0.0.1:8080",
                    self.listen
                ),
            ));
        }
        let url =
            parse_cheq_uri(&self.public_url).map_err(|e| invalid("public_url", e.to_string()))?;
        if url.query().is_some() {
            return Err(invalid("public_url", "must not carry a query"));
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir", "must not be empty"));
        }
        if self.signing_key.as_os_str().is_empty() {
            return Err(invalid("signing_key", "must not be empty"));
        }
        if let Some(s) = &self.session_secret {
            if s.len() < 32 {
                return Err(invalid("session_secret", "must be at least 32 characters"));
            }
        }
        if self.session_ttl_secs < 60 {
            return Err(invalid("session_ttl_secs", "must be at least 60"));
        }
        self.registration.address_policy()?;
        if self.embedded && self.registration.mode.is_on() {
            return Err(invalid(
                "registration.mode",
                "a confirmation served by a resource server itself works for that resource server alone: leave it \"off\"",
            ));
        }
        for (i, rs) in self.resource_servers.iter().enumerate() {
            let key = |k: &str| format!("resource_servers[{i}].{k}");
            let origin =
                parse_cheq_uri(&rs.origin).map_err(|e| invalid(key("origin"), e.to_string()))?;
            if origin.path() != "/" || origin.query().is_some() {
                return Err(invalid(
                    key("origin"),
                    "must be an origin (scheme://host[:port]) with no path",
                ));
            }
            crate::registry::check_path_prefix(&rs.path_prefix)
                .map_err(|reason| invalid(key("path_prefix"), reason))?;
            match (&rs.jwks, &rs.jwks_uri) {
                (Some(_), None) => {}
                (None, Some(uri)) => {
                    parse_cheq_uri(uri).map_err(|e| invalid(key("jwks_uri"), e.to_string()))?;
                }
                _ => {
                    return Err(invalid(
                        key("jwks"),
                        "exactly one of `jwks` (a file) and `jwks_uri` must be given",
                    ))
                }
            }
            parse_cheq_uri(&rs.token_url).map_err(|e| invalid(key("token_url"), e.to_string()))?;
            match rs.auth {
                RsAuth::ClientSecretBasic => {
                    if rs.client_id.is_empty() {
                        return Err(invalid(key("client_id"), "must not be empty"));
                    }
                    if rs.client_secret.as_ref().is_none_or(|s| s.is_empty()) {
                        return Err(invalid(
                            key("client_secret"),
                            "must be given and not empty (or set auth = \"private_key_jwt\")",
                        ));
                    }
                }
                RsAuth::PrivateKeyJwt => {
                    if !rs.client_id.is_empty() || rs.client_secret.is_some() {
                        return Err(invalid(
                            key("client_secret"),
                            "auth = \"private_key_jwt\" signs a client assertion with this service's key: give no client_id or client_secret",
                        ));
                    }
                }
            }
        }
        for (i, g) in self.gateways.iter().enumerate() {
            if g.client_id.is_empty() || g.client_id.contains(':') {
                return Err(invalid(
                    format!("gateways[{i}].client_id"),
                    "must be non-empty and contain no ':'",
                ));
            }
            if argon2::password_hash::PasswordHash::new(g.secret_hash.expose()).is_err() {
                return Err(invalid(
                    format!("gateways[{i}].secret_hash"),
                    "must be an argon2 hash ($argon2id$…); make one with `cheq hash-secret`",
                ));
            }
        }
        if !(10..=3600).contains(&self.api_token_ttl_secs) {
            return Err(invalid("api_token_ttl_secs", "must be from 10 to 3600"));
        }
        let age_ok = |a: Option<i64>| a.is_none_or(|a| (1..=30 * 86400).contains(&a));
        if !age_ok(self.max_auth_age_secs) {
            return Err(invalid(
                "max_auth_age_secs",
                "must be from 1 to 2592000 (30 days)",
            ));
        }
        for (i, rs) in self.resource_servers.iter().enumerate() {
            if !age_ok(rs.max_auth_age_secs) {
                return Err(invalid(
                    format!("resource_servers[{i}].max_auth_age_secs"),
                    "must be from 1 to 2592000 (30 days)",
                ));
            }
        }
        self.validate_identity_providers()
    }
}

impl CsConfig {
    fn validate_identity_providers(&self) -> Result<(), ConfigError> {
        let mut names = std::collections::HashSet::new();
        let mut issuers = std::collections::HashSet::new();
        for (i, p) in self.identity_providers.iter().enumerate() {
            let key = |k: &str| format!("identity_providers[{i}].{k}");
            let name_ok = !p.name.is_empty()
                && p.name.len() <= 64
                && p.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !name_ok {
                return Err(invalid(
                    key("name"),
                    "use 1 to 64 letters, digits, '.', '_' or '-'",
                ));
            }
            if !names.insert(p.name.to_ascii_lowercase()) {
                return Err(invalid(key("name"), format!("{:?} is used twice", p.name)));
            }
            let issuer =
                parse_cheq_uri(&p.issuer).map_err(|e| invalid(key("issuer"), e.to_string()))?;
            if issuer.query().is_some() || issuer.fragment().is_some() {
                return Err(invalid(key("issuer"), "must carry no query or fragment"));
            }
            if !issuers.insert(p.issuer.trim_end_matches('/').to_owned()) {
                return Err(invalid(
                    key("issuer"),
                    "the same issuer is configured twice",
                ));
            }
            if p.client_id.is_empty() {
                return Err(invalid(key("client_id"), "must not be empty"));
            }
            match (&p.client_secret, &p.client_secret_file) {
                (Some(s), None) if s.is_empty() => {
                    return Err(invalid(key("client_secret"), "must not be empty"))
                }
                (Some(_), None) | (None, Some(_)) => {}
                _ => {
                    return Err(invalid(
                        key("client_secret"),
                        "exactly one of `client_secret` and `client_secret_file` must be given",
                    ))
                }
            }
            if !p.scopes.iter().any(|s| s == "openid") {
                return Err(invalid(key("scopes"), "must include \"openid\""));
            }
            if p.scopes.iter().any(|s| {
                s.is_empty()
                    || !s
                        .bytes()
                        .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
            }) {
                return Err(invalid(key("scopes"), "a scope is empty or not plain text"));
            }
        }
        Ok(())
    }

    /// The largest age of a sign-in that may decide for resource server
    /// `index` (its own value, else the top-level one).
    pub fn max_auth_age(&self, index: usize) -> Option<i64> {
        self.resource_servers
            .get(index)
            .and_then(|r| r.max_auth_age_secs)
            .or(self.max_auth_age_secs)
    }

    /// The configuration of the confirmation a resource server serves itself
    /// (§12): `table` is the RS's `[confirmation]` (`embedded = true` and the
    /// CS's own settings: accounts' sessions, identity providers, gateways,
    /// `max_auth_age_secs`, `history_days`, its `signing_key`); `host` is
    /// what the RS's configuration already says. Checked as any CS
    /// configuration, errors naming `confirmation.<key>`.
    pub fn embedded(host: HostSettings, table: &toml::Table) -> Result<Self, ConfigError> {
        let named = |e: ConfigError| match e {
            ConfigError::Invalid { key, message } => ConfigError::Invalid {
                key: format!("confirmation.{key}"),
                message,
            },
            e => e,
        };
        let mut t = table.clone();
        t.remove("embedded");
        if let Some(k) = HOST_KEYS.iter().find(|k| t.contains_key(**k)) {
            return Err(invalid(
                format!("confirmation.{k}"),
                "is the resource server's own: set it at the top of its file",
            ));
        }
        let text = |s: &str| toml::Value::String(s.to_owned());
        let path = |p: &Path| toml::Value::String(p.display().to_string());
        t.insert("listen".into(), text(&host.listen));
        t.insert("public_url".into(), text(&host.public_url));
        t.insert("data_dir".into(), path(&host.data_dir));
        if !t.contains_key("signing_key") {
            let key = host.data_dir.join(EMBEDDED_SIGNING_KEY);
            t.insert("signing_key".into(), path(&key));
        }
        let mut config: CsConfig =
            toml::Value::Table(t)
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError::Toml {
                    path: "[confirmation]".into(),
                    message: e.message().to_owned(),
                })?;
        config.database_url = host.database_url;
        config.log_format = host.log_format;
        config.metrics = host.metrics;
        config.embedded = true;
        config.validate().map_err(named)?;
        Ok(config)
    }

    /// Is this URL served over https (cookies then get `Secure`)?
    pub fn is_https(&self) -> bool {
        self.public_url.starts_with("https:")
    }

    /// The path of the confirmation URI, where `POST` starts a confirmation.
    pub fn start_path(&self) -> String {
        url::Url::parse(&self.public_url)
            .map(|u| u.path().trim_end_matches('/').to_owned())
            .map(|p| if p.is_empty() { "/".to_owned() } else { p })
            .unwrap_or_else(|_| "/".to_owned())
    }

    /// The transparency log's origin line, `<host[:port] of public_url>/cheq-log`
    /// (the log's prefix, `<public_url>/log/`, without its scheme), and
    /// the path its resources are served under (`<start path>/log`).
    pub fn log_origin(&self) -> (String, String) {
        let host = url::Url::parse(&self.public_url)
            .ok()
            .and_then(|u| {
                let host = u.host_str()?.to_owned();
                Some(match u.port() {
                    Some(p) => format!("{host}:{p}"),
                    None => host,
                })
            })
            .unwrap_or_default();
        let path = match self.start_path().as_str() {
            "/" => "/log".to_owned(),
            p => format!("{p}/log"),
        };
        (format!("{host}/cheq-log"), path)
    }

    /// The file of the transparency log's note key: `key_file`, or
    /// [`LOG_KEY_FILE`] in the data directory ([`OLD_LOG_KEY_FILE`] where
    /// only that one is there).
    pub fn log_key_file(&self) -> PathBuf {
        self.transparency_log
            .key_file
            .clone()
            .unwrap_or_else(|| renamed_file(&self.data_dir, LOG_KEY_FILE, OLD_LOG_KEY_FILE))
    }

    /// The file of the key of the pseudonyms in log lines:
    /// [`LOG_PSEUDONYM_FILE`] in the data directory
    /// ([`OLD_LOG_PSEUDONYM_FILE`] where only that one is there).
    pub fn log_pseudonym_file(&self) -> PathBuf {
        renamed_file(&self.data_dir, LOG_PSEUDONYM_FILE, OLD_LOG_PSEUDONYM_FILE)
    }

    /// The CS origin (scheme://host[:port]), for links.
    pub fn origin(&self) -> String {
        url::Url::parse(&self.public_url)
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const GOOD: &str = r#"
listen = "127.0.0.1:8080"
public_url = "http://127.0.0.1:8080"
data_dir = "data"
signing_key = "keys/cs.jwk"

[[resource_servers]]
origin = "http://127.0.0.1:8081"
path_prefix = "/cheq/"
jwks = "keys/rs.pub.jwks.json"
token_url = "http://127.0.0.1:8081/oauth/token"
client_id = "cs"
client_secret = "s3cret-s3cret"
"#;

    #[test]
    fn the_documented_config_parses() {
        let c = CsConfig::from_toml(GOOD).unwrap();
        assert_eq!(c.start_path(), "/");
        assert_eq!(c.origin(), "http://127.0.0.1:8080");
        assert!(!c.is_https());
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("s3cret"), "{dbg}");
    }

    /// Each case replaces `from` by `to` in `base`; the error must name `key`.
    fn refused_naming(base: &str, cases: &[(&str, &str, &str)]) {
        for (from, to, key) in cases {
            assert!(base.contains(from), "{from}");
            let e = CsConfig::from_toml(&base.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }

    #[test]
    fn errors_name_the_key() {
        refused_naming(
            GOOD,
            &[
                ("listen = \"127.0.0.1:8080\"", "listen = \"x\"", "listen"),
                ("http://127.0.0.1:8080", "http://cs.example", "public_url"),
                ("\"/cheq/\"", "\"cheq\"", "resource_servers[0].path_prefix"),
                ("\"/cheq/\"", "\"/cheq\"", "resource_servers[0].path_prefix"),
                (
                    "jwks = \"keys/rs.pub.jwks.json\"",
                    "",
                    "resource_servers[0].jwks",
                ),
                ("client_id = \"cs\"\n", "", "client_id"),
                ("data_dir", "data_directory", "data_dir"),
            ],
        );
    }

    #[test]
    fn registration_is_off_unless_asked_and_its_networks_are_checked() {
        let c = CsConfig::from_toml(GOOD).unwrap();
        assert_eq!(c.registration.mode, RegistrationMode::Off);
        assert!(c.registration.allow_addresses.is_empty());
        let with = |table: &str| CsConfig::from_toml(&format!("{GOOD}\n[registration]\n{table}"));
        let c = with("mode = \"open\"\nallow_addresses = [\"127.0.0.0/8\", \"::1\"]").unwrap();
        assert_eq!(c.registration.mode, RegistrationMode::Open);
        let policy = c.registration.address_policy().unwrap();
        assert!(policy.permits("127.0.0.9".parse().unwrap()));
        assert!(!policy.permits("10.0.0.1".parse().unwrap()));
        assert_eq!(
            with("mode = \"token\"").unwrap().registration.mode,
            RegistrationMode::Token
        );
        for (bad, key) in [
            (
                "allow_addresses = [\"nowhere\"]",
                "registration.allow_addresses",
            ),
            (
                "allow_addresses = [\"10.0.0.0/33\"]",
                "registration.allow_addresses",
            ),
            ("mode = \"sometimes\"", "mode"),
            ("modes = \"open\"", "modes"),
        ] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
        // No resource server of the file: those registered (earlier, or
        // from now on) are served.
        let head = &GOOD[..GOOD.find("[[resource_servers]]").unwrap()];
        assert!(CsConfig::from_toml(head)
            .unwrap()
            .resource_servers
            .is_empty());
        let open =
            CsConfig::from_toml(&format!("{head}[registration]\nmode = \"open\"\n")).unwrap();
        assert!(open.resource_servers.is_empty());
    }

    #[test]
    fn a_resource_server_takes_a_secret_or_the_cs_key() {
        let c = CsConfig::from_toml(GOOD).unwrap();
        assert_eq!(c.resource_servers[0].auth, RsAuth::ClientSecretBasic);
        let jwt = GOOD.replace(
            "client_id = \"cs\"\nclient_secret = \"s3cret-s3cret\"",
            "auth = \"private_key_jwt\"",
        );
        let c = CsConfig::from_toml(&jwt).unwrap();
        assert_eq!(c.resource_servers[0].auth, RsAuth::PrivateKeyJwt);
        assert!(c.resource_servers[0].client_secret.is_none());
        // Both at once, or neither: refused by name.
        let both = GOOD.replace(
            "client_secret = \"s3cret-s3cret\"",
            "client_secret = \"s3cret-s3cret\"\nauth = \"private_key_jwt\"",
        );
        let e = CsConfig::from_toml(&both).unwrap_err().to_string();
        assert!(e.contains("resource_servers[0].client_secret"), "{e}");
        let neither = GOOD.replace("client_secret = \"s3cret-s3cret\"", "");
        let e = CsConfig::from_toml(&neither).unwrap_err().to_string();
        assert!(e.contains("resource_servers[0].client_secret"), "{e}");
        let other = GOOD.replace(
            "client_id = \"cs\"",
            "auth = \"client_secret_post\"\nclient_id = \"cs\"",
        );
        assert!(CsConfig::from_toml(&other).is_err());
    }

    #[test]
    fn history_days_is_kept_at_least_until_the_cheq_has_expired() {
        assert_eq!(CsConfig::from_toml(GOOD).unwrap().history_days, None);
        let with = |days: &str| CsConfig::from_toml(&format!("history_days = {days}\n{GOOD}"));
        let days = |d: &str| with(d).unwrap().history_days.map(|h| h.in_days());
        assert_eq!(days("2"), Some(2));
        assert_eq!(days("36500"), Some(36_500));
        for bad in ["0", "1", "36501"] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains("history_days"), "{bad}: {e}");
        }
        assert!(with("-3").is_err());
    }

    #[test]
    fn plain_http_only_for_loopback() {
        let jwks_uri = |uri: &str| {
            GOOD.replace(
                "jwks = \"keys/rs.pub.jwks.json\"",
                &format!("jwks_uri = \"{uri}\""),
            )
        };
        let token_url = |uri: &str| {
            GOOD.replace(
                "token_url = \"http://127.0.0.1:8081/oauth/token\"",
                &format!("token_url = \"{uri}\""),
            )
        };
        let origin = |uri: &str| {
            GOOD.replace(
                "origin = \"http://127.0.0.1:8081\"",
                &format!("origin = \"{uri}\""),
            )
        };
        for (text, key) in [
            (token_url("http://rs.example/oauth/token"), "token_url"),
            (token_url("http://10.0.0.7:8081/oauth/token"), "token_url"),
            (token_url("http://[2001:db8::1]/oauth/token"), "token_url"),
            (token_url("http://localhost.rs.example/t"), "token_url"),
            (token_url("ftp://127.0.0.1/t"), "token_url"),
            (token_url("https://u:p@rs.example/t"), "token_url"),
            (
                jwks_uri("http://rs.example/.well-known/jwks.json"),
                "jwks_uri",
            ),
            (jwks_uri("http://192.168.1.2/jwks.json"), "jwks_uri"),
            (jwks_uri("file:///etc/jwks.json"), "jwks_uri"),
            (origin("http://rs.example"), "origin"),
        ] {
            let e = CsConfig::from_toml(&text).unwrap_err().to_string();
            assert!(e.contains(&format!("resource_servers[0].{key}")), "{e}");
        }
        for text in [
            token_url("https://rs.example/oauth/token"),
            token_url("http://localhost:8081/oauth/token"),
            token_url("http://127.3.2.1/oauth/token"),
            token_url("http://[::1]:8081/oauth/token"),
            jwks_uri("https://rs.example/.well-known/jwks.json"),
            jwks_uri("http://localhost:8081/.well-known/jwks.json"),
            jwks_uri("http://[::1]/jwks.json"),
            origin("https://rs.example"),
        ] {
            CsConfig::from_toml(&text).unwrap();
        }
    }

    #[test]
    fn the_path_prefix_is_a_plain_path() {
        for prefix in ["/che%71/", "/cheq/../", "/./cheq/", "/ch\\\\eq/", "/cheq?/"] {
            let text = GOOD.replace(
                "path_prefix = \"/cheq/\"",
                &format!("path_prefix = \"{prefix}\""),
            );
            let e = CsConfig::from_toml(&text).unwrap_err().to_string();
            assert!(
                e.contains("resource_servers[0].path_prefix"),
                "{prefix}: {e}"
            );
        }
    }

    #[test]
    fn environment_overrides_win() {
        let mut c = CsConfig::from_toml(GOOD).unwrap();
        c.apply_env(&Env::new(&|k| match k {
            "CHEQ_LISTEN" => Some("127.0.0.1:9999".into()),
            "CHEQ_PUBLIC_URL" => Some("https://confirm.example/start/".into()),
            "CHEQ_DATABASE_URL" => Some("postgres://cheq:pw@127.0.0.1:5432/cheq".into()),
            "CHEQ_LOG_FORMAT" => Some("json".into()),
            _ => None,
        }))
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.listen, "127.0.0.1:9999");
        assert_eq!(c.start_path(), "/start");
        assert!(c.is_https());
        assert_eq!(c.log_format, LogFormat::Json);
        assert!(c.database_url.is_some());
        // The URL may hold a password: never in a Debug line.
        assert!(!format!("{c:?}").contains("pw@"), "{c:?}");
    }

    #[test]
    fn a_bad_log_format_or_database_url_is_refused_by_name() {
        let mut c = CsConfig::from_toml(GOOD).unwrap();
        let e = c
            .apply_env(&Env::new(&|k| {
                (k == "CHEQ_LOG_FORMAT").then(|| "xml".into())
            }))
            .unwrap_err();
        assert!(e.to_string().contains("log_format"), "{e}");
        let mut c = CsConfig::from_toml(GOOD).unwrap();
        let mysql = |k: &str| (k == "CHEQ_DATABASE_URL").then(|| "mysql://x:secretpw@h/db".into());
        c.apply_env(&Env::new(&mysql)).unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("database_url") && !e.contains("secretpw"), "{e}");
        // Top-level keys come before any table.
        let text = format!("log_format = \"json\"\ndatabase_url = \"postgres://u@h/d\"\n{GOOD}");
        let c = CsConfig::from_toml(&text).unwrap();
        assert_eq!(c.log_format, LogFormat::Json);
        let text = format!("log_format = \"yaml\"\n{GOOD}");
        assert!(CsConfig::from_toml(&text).is_err());
    }

    const IDP: &str = r#"
[[identity_providers]]
name = "example"
issuer = "http://127.0.0.1:9000"
client_id = "cheq"
client_secret = "idp-s3cret-value"
"#;

    #[test]
    fn identity_providers_parse_and_hide_their_secret() {
        let c = CsConfig::from_toml(&format!("max_auth_age_secs = 600\n{GOOD}{IDP}")).unwrap();
        let p = &c.identity_providers[0];
        assert_eq!(p.scopes, ["openid", "email"]);
        assert_eq!(p.secret().unwrap().expose(), "idp-s3cret-value");
        assert_eq!(c.max_auth_age(0), Some(600));
        assert_eq!(c.max_auth_age(7), Some(600));
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("idp-s3cret"), "{dbg}");
        let per_rs = GOOD.replace(
            "client_secret = \"s3cret-s3cret\"",
            "client_secret = \"s3cret-s3cret\"\nmax_auth_age_secs = 30",
        );
        let c = CsConfig::from_toml(&format!("max_auth_age_secs = 600\n{per_rs}")).unwrap();
        assert_eq!(c.max_auth_age(0), Some(30));
        // From a file, trimmed.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "from-a-file\n").unwrap();
        let text = IDP.replace(
            "client_secret = \"idp-s3cret-value\"",
            &format!("client_secret_file = {:?}", file.display().to_string()),
        );
        let c = CsConfig::from_toml(&format!("{GOOD}{text}")).unwrap();
        assert_eq!(
            c.identity_providers[0].secret().unwrap().expose(),
            "from-a-file"
        );
    }

    #[test]
    fn bad_identity_providers_are_refused_by_key() {
        let with_idp = format!("{GOOD}{IDP}");
        let name = "identity_providers[0].name";
        let issuer = "identity_providers[0].issuer";
        let secret = "identity_providers[0].client_secret";
        refused_naming(
            &with_idp,
            &[
                ("\"example\"", "\"ex ample\"", name),
                ("http://127.0.0.1:9000", "http://idp.example", issuer),
                ("http://127.0.0.1:9000", "https://idp.example/?x=1", issuer),
                (
                    "client_id = \"cheq\"",
                    "client_id = \"\"",
                    "identity_providers[0].client_id",
                ),
                ("client_secret = \"idp-s3cret-value\"", "", secret),
                (
                    "\"idp-s3cret-value\"",
                    "\"a\"\nclient_secret_file = \"b\"",
                    secret,
                ),
            ],
        );
        for (idp, key) in [
            (
                format!("{IDP}scopes = [\"email\"]\n"),
                "identity_providers[0].scopes",
            ),
            (
                format!("{IDP}token_endpoint_auth_method = \"private_key_jwt\"\n"),
                "token_endpoint_auth_method",
            ),
            (format!("{IDP}{IDP}"), "identity_providers[1].name"),
        ] {
            let e = CsConfig::from_toml(&format!("{GOOD}{idp}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
        for bad in ["0", "-5", "2592001"] {
            let e = CsConfig::from_toml(&format!("max_auth_age_secs = {bad}\n{GOOD}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("max_auth_age_secs"), "{e}");
        }
        let missing = IDP.replace(
            "client_secret = \"idp-s3cret-value\"",
            "client_secret_file = \"/nonexistent/secret\"",
        );
        let c = CsConfig::from_toml(&format!("{GOOD}{missing}")).unwrap();
        let e = c.identity_providers[0].secret().unwrap_err().to_string();
        assert!(
            e.contains("client_secret_file") && e.contains("/nonexistent/secret"),
            "{e}"
        );
    }
}
