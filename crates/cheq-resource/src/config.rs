//! The resource server's configuration, `rs.toml`.
//!
//! ```toml
//! listen = "127.0.0.1:8081"
//! public_url = "http://127.0.0.1:8081"     # the RS origin; URIs in URI packs start with it
//! data_dir = "rs-data"                     # the RS database (confirmations, nonces, executions)
//! signing_key = "rs-data/rs-key.jwk"       # private JWK; generated (mode 0600) when missing
//! # key_id = "rs-1"                        # kid of a generated key (default: random)
//! # cheq_ttl_secs = 900                    # CHEQ lifetime, 1..=86400 (PROTOCOL.md §4)
//! # token_ttl_secs = 3600                  # access token lifetime
//! # retry_after_secs = 2                   # Retry-After on a pending result (§7)
//!
//! [confirmation_server]
//! issuer = "https://confirm.example"       # its origin: the rest is read from its
//!                                          # /.well-known/cheq-configuration (§16.1)
//! # or, named in full (no discovery):
//! # uri = "http://127.0.0.1:8080/confirm"  # its confirmation URI (§1)
//! # jwks_file = "cs-jwks.json"             # its public keys, or:
//! # jwks_uri = "http://127.0.0.1:8080/.well-known/jwks.json"  (fetched at start-up)
//!
//! # Or, instead of [confirmation_server], the confirmation served by this RS
//! # itself (§12), at <public_url>/confirm, with the CS's own settings
//! # (accounts in data_dir, identity providers, gateways, …; see
//! # docs/configuration.md):
//! # [confirmation]
//! # embedded = true
//!
//! [[clients]]
//! client_id = "cs"
//! client_secret = "cs-secret"
//! role = "cs"                              # may GET and POST resource URIs (§3, §6)
//!
//! [[clients]]
//! client_id = "agent"
//! client_secret = "agent-secret"
//! role = "agent"                           # may call the tools
//! subject = "alice"                        # the CHEQ subject for this agent's user
//!
//! # name = "Example Air"                  # (top level) the name in /.well-known/cheq-resource
//! # allow_addresses = ["127.0.0.0/8"]      # (top level) networks an outside fetch may reach
//! # database_url = "postgres://cheq@127.0.0.1:5432/cheq"  # (top level) state in PostgreSQL
//! # log_format = "json"                    # (top level) or "text" (default)
//! # Environment overrides: CHEQ_LISTEN, CHEQ_DATABASE_URL, CHEQ_LOG_FORMAT.
//!
//! [[policy.rules]]                        # floors each user may only tighten (§17)
//! tool = "book_flight"
//! param = "price_usd"                      # with `above`: confirmation above this value;
//! above = 100                              # without both: always (the default floor)
//! assurance = "any"                        # or "passkey" (§14)
//! # [policy] book_flight_threshold_usd = 100 and passkey_tools = ["…"], the older
//! # form, are read as floors too.
//! ```
//!
//! The CS's URLs (`confirmation_server.uri`, `confirmation_server.jwks_uri`)
//! use `https`; plain `http` is accepted only for loopback hosts
//! (127.0.0.0/8, `[::1]`, `localhost`), as in PROTOCOL.md §1, so that the
//! keys this RS trusts never cross a network in clear.
//!
//! A CS named by `issuer` (§16) is reached only through the fetcher of
//! outside URLs (`cheq_support::outbound`): `https`, and none of the
//! private, loopback, link-local or unspecified addresses unless the
//! top-level `allow_addresses` lists their network (a loopback one also
//! lets plain `http` through, for development). The issuer is checked
//! against that list when the file is read.

use cheq_core::cheq::uri::parse_cheq_uri;
use serde::Deserialize;
use std::collections::HashSet;
use std::path::PathBuf;

pub use cheq_support::configfile::ServerConfig;
use cheq_support::configfile::{invalid, Env};
pub use cheq_support::configfile::{ConfigError, DatabaseUrl, LogFormat};
use cheq_support::outbound::{AddressPolicy, Outbound};
use cheq_support::secret::Secret;

/// What a registered client may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientRole {
    /// A confirmation server: GET and POST on resource URIs.
    Cs,
    /// An agent: the tool API.
    Agent,
}

/// One OAuth client registered at the RS.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    pub client_id: String,
    pub client_secret: Secret,
    pub role: ClientRole,
    /// For agents: the CHEQ `subject` (the user at the CS) on whose behalf it acts.
    #[serde(default)]
    pub subject: Option<String>,
}

/// The confirmation server this RS sends its users to: by its issuer
/// alone (§16), or named in full.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmationServerConfig {
    /// Its issuer (its origin): its confirmation URI and key set are read
    /// from its discovery document (§16.1), and it authenticates here with
    /// its own key (§16.4).
    #[serde(default)]
    pub issuer: Option<String>,
    /// Or its confirmation URI (§1), also its identity for trust (origin).
    #[serde(default)]
    pub uri: Option<String>,
    /// With `uri`: a JWKS file with its public keys.
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// Or a URL to fetch its JWKS from at start-up.
    #[serde(default)]
    pub jwks_uri: Option<String>,
}

/// How a checked [`ConfirmationServerConfig`] names its CS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsNamed<'a> {
    /// By issuer: the rest comes from its discovery document (§16.1).
    Issuer(&'a str),
    /// In full: its confirmation URI, and a key file or a `jwks_uri`.
    InFull {
        uri: &'a str,
        jwks_file: Option<&'a std::path::Path>,
        jwks_uri: Option<&'a str>,
    },
}

/// When confirmation is needed: the operator's floors (§17), which each
/// user may only tighten.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// `[[policy.rules]]`: one floor per tool.
    #[serde(default)]
    pub rules: Vec<crate::rules::RuleRecord>,
    /// The older form of a floor: `book_flight` needs confirmation when
    /// `price_usd` is above this (100 when no rule names `book_flight`).
    #[serde(default)]
    pub book_flight_threshold_usd: Option<i64>,
    /// The older form: the tools whose floors ask for a passkey (§14).
    #[serde(default)]
    pub passkey_tools: Vec<String>,
}

/// `book_flight`'s floor when the file sets none.
pub const DEFAULT_BOOK_FLIGHT_THRESHOLD: i64 = 100;

impl PolicyConfig {
    /// The floors this section sets for the tools of `catalogue`: its
    /// rules, with the older keys read as floors too.
    pub fn floors(
        &self,
        catalogue: &[crate::tools::Tool],
    ) -> Result<crate::rules::Floors, ConfigError> {
        use crate::rules::{Needs, RuleRecord};
        let mut records = self.rules.clone();
        let names_flight = records.iter().any(|r| r.tool == "book_flight");
        match self.book_flight_threshold_usd {
            Some(_) if names_flight => {
                return Err(invalid(
                    "policy.book_flight_threshold_usd",
                    "a [[policy.rules]] rule names book_flight too: keep one of them",
                ))
            }
            Some(n) if n < 0 => {
                return Err(invalid(
                    "policy.book_flight_threshold_usd",
                    "must be 0 or more",
                ))
            }
            _ if names_flight => {}
            threshold => records.push(RuleRecord {
                tool: "book_flight".into(),
                param: Some("price_usd".into()),
                above: Some(threshold.unwrap_or(DEFAULT_BOOK_FLIGHT_THRESHOLD) as f64),
                assurance: Needs::Any,
            }),
        }
        for tool in &self.passkey_tools {
            match records.iter_mut().find(|r| &r.tool == tool) {
                Some(r) => r.assurance = Needs::Passkey,
                None => records.push(RuleRecord {
                    tool: tool.clone(),
                    param: None,
                    above: None,
                    assurance: Needs::Passkey,
                }),
            }
        }
        crate::rules::Floors::new(&records, catalogue)
            .map_err(|e| invalid("policy.rules", e.to_string()))
    }
}

fn default_cheq_ttl() -> i64 {
    900
}
fn default_token_ttl() -> i64 {
    3600
}
fn default_retry_after() -> u64 {
    2
}

/// The whole of `rs.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RsConfig {
    pub listen: String,
    pub public_url: String,
    pub data_dir: PathBuf,
    pub signing_key: PathBuf,
    #[serde(default)]
    pub key_id: Option<String>,
    /// The name in this RS's discovery document (§16.2), what a CS shows
    /// its users; the host of `public_url` when not given.
    #[serde(default)]
    pub name: Option<String>,
    /// Networks (CIDR) or addresses exempt from the refusal of outside
    /// fetches (§16.3): the CS named by `issuer` and what its document
    /// names. Empty by default: only public addresses, over `https`.
    #[serde(default)]
    pub allow_addresses: Vec<String>,
    // `database_url`, `log_format` and `metrics` mean what they mean in the
    // CS's `cheq.toml` (docs/configuration.md).
    #[serde(default)]
    pub database_url: Option<DatabaseUrl>,
    #[serde(default)]
    pub log_format: LogFormat,
    #[serde(default)]
    pub metrics: cheq_support::metrics::MetricsAccess,
    #[serde(default = "default_cheq_ttl")]
    pub cheq_ttl_secs: i64,
    #[serde(default = "default_token_ttl")]
    pub token_ttl_secs: i64,
    #[serde(default = "default_retry_after")]
    pub retry_after_secs: u64,
    /// The third-party CS this RS sends its users to; or `confirmation`.
    #[serde(default)]
    pub confirmation_server: Option<ConfirmationServerConfig>,
    /// `[confirmation]`, `embedded = true`: the confirmation is served by
    /// this RS itself (§12). The RS knows only that it is there; its other
    /// keys are the CS's settings, read and checked by the CS's own
    /// configuration (`cheq_confirm::config`).
    #[serde(default)]
    pub confirmation: Option<toml::Table>,
    #[serde(default)]
    pub clients: Vec<ClientConfig>,
    #[serde(default)]
    pub policy: PolicyConfig,
}

impl ServerConfig for RsConfig {
    const FILE_NAME: &'static str = "rs.toml";

    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(url) = &self.database_url {
            url.validate()?;
        }
        let url =
            parse_cheq_uri(&self.public_url).map_err(|e| invalid("public_url", e.to_string()))?;
        if url.path() != "/" || url.query().is_some() {
            return Err(invalid(
                "public_url",
                "must be an origin (scheme://host[:port]) with no path or query",
            ));
        }
        if let Some(name) = &self.name {
            let name = name.trim();
            if name.is_empty()
                || name.chars().count() > cheq_core::discovery::MAX_NAME_LEN
                || name.chars().any(char::is_control)
            {
                return Err(invalid(
                    "name",
                    format!(
                        "must be 1 to {} characters, none of them a control character",
                        cheq_core::discovery::MAX_NAME_LEN
                    ),
                ));
            }
        }
        self.policy.floors(&crate::tools::catalogue())?;
        let policy = self.address_policy()?;
        match (&self.confirmation_server, self.embedded()) {
            (Some(cs), false) => cs.validate(&policy)?,
            (None, true) => {
                // No CHEQ leaves an RS that confirms itself (§12).
                if let Some(i) = self.clients.iter().position(|c| c.role == ClientRole::Cs) {
                    return Err(invalid(
                        format!("clients[{i}].role"),
                        "a resource server that serves the confirmation itself has no confirmation-server client",
                    ));
                }
            }
            (None, false) if self.confirmation.is_some() => {
                return Err(invalid(
                    "confirmation.embedded",
                    "must be true (or give [confirmation_server] instead)",
                ))
            }
            _ => {
                return Err(invalid(
                    "confirmation_server",
                    "give exactly one of [confirmation_server] (a confirmation server elsewhere) and [confirmation] with embedded = true (served by this RS)",
                ))
            }
        }
        if !(1..=86_400).contains(&self.cheq_ttl_secs) {
            return Err(invalid(
                "cheq_ttl_secs",
                "must be from 1 to 86400 (a CHEQ lives at most 24 h)",
            ));
        }
        if self.token_ttl_secs < 1 {
            return Err(invalid("token_ttl_secs", "must be at least 1"));
        }
        let mut ids = HashSet::new();
        for (i, c) in self.clients.iter().enumerate() {
            if c.client_id.is_empty() || c.client_id.contains(':') {
                return Err(invalid(
                    format!("clients[{i}].client_id"),
                    "must be non-empty and contain no ':'",
                ));
            }
            if !ids.insert(c.client_id.as_str()) {
                return Err(invalid(
                    format!("clients[{i}].client_id"),
                    format!("\"{}\" is registered twice", c.client_id),
                ));
            }
            if c.client_secret.len() < 8 {
                return Err(invalid(
                    format!("clients[{i}].client_secret"),
                    "must be at least 8 characters",
                ));
            }
            match (c.role, &c.subject) {
                (ClientRole::Agent, None) => {
                    return Err(invalid(
                        format!("clients[{i}].subject"),
                        "an agent needs the subject (user at the CS) it acts for",
                    ))
                }
                (ClientRole::Agent, Some(s)) if s.is_empty() => {
                    return Err(invalid(
                        format!("clients[{i}].subject"),
                        "must not be empty",
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn apply_env(&mut self, env: &Env<'_>) -> Result<(), ConfigError> {
        env.apply_common(
            &mut self.listen,
            &mut self.database_url,
            &mut self.log_format,
        )
    }
}

impl ConfirmationServerConfig {
    fn validate(&self, policy: &AddressPolicy) -> Result<(), ConfigError> {
        let Some(uri) = &self.uri else {
            let Some(issuer) = &self.issuer else {
                return Err(invalid(
                    "confirmation_server.issuer",
                    "missing: give `issuer` (the confirmation server's origin), or `uri` with `jwks_file` or `jwks_uri`",
                ));
            };
            if self.jwks_file.is_some() || self.jwks_uri.is_some() {
                let key = if self.jwks_file.is_some() {
                    "confirmation_server.jwks_file"
                } else {
                    "confirmation_server.jwks_uri"
                };
                return Err(invalid(
                    key,
                    "not with `issuer`: the keys are read from the confirmation server's discovery document",
                ));
            }
            return check_issuer(issuer, policy);
        };
        if self.issuer.is_some() {
            return Err(invalid(
                "confirmation_server.issuer",
                "give `issuer` alone, or `uri` with `jwks_file` or `jwks_uri`, not both",
            ));
        }
        parse_cheq_uri(uri).map_err(|e| invalid("confirmation_server.uri", e.to_string()))?;
        match (&self.jwks_file, &self.jwks_uri) {
            (Some(_), None) => Ok(()),
            (None, Some(uri)) => parse_cheq_uri(uri)
                .map(|_| ())
                .map_err(|e| invalid("confirmation_server.jwks_uri", e.to_string())),
            _ => Err(invalid(
                "confirmation_server.jwks_file",
                "exactly one of `jwks_file` and `jwks_uri` must be given",
            )),
        }
    }

    /// How it names its CS (on a checked configuration).
    pub fn named(&self) -> CsNamed<'_> {
        match (&self.issuer, &self.uri) {
            (Some(issuer), None) => CsNamed::Issuer(issuer),
            (_, uri) => CsNamed::InFull {
                uri: uri.as_deref().unwrap_or_default(),
                jwks_file: self.jwks_file.as_deref(),
                jwks_uri: self.jwks_uri.as_deref(),
            },
        }
    }
}

/// An issuer is an origin that the fetcher of outside URLs may reach
/// under `policy`.
fn check_issuer(issuer: &str, policy: &AddressPolicy) -> Result<(), ConfigError> {
    let key = "confirmation_server.issuer";
    parse_cheq_uri(issuer).map_err(|e| invalid(key, e.to_string()))?;
    if cheq_core::discovery::bare_origin(issuer).is_none() {
        return Err(invalid(
            key,
            "must be an origin (scheme://host[:port]) with no path or query",
        ));
    }
    let outbound = Outbound::new(policy.clone()).map_err(|e| invalid(key, e.to_string()))?;
    outbound.check(issuer).map_err(|e| {
        invalid(
            key,
            format!("{e}: list its network in the top-level allow_addresses to reach it"),
        )
    })?;
    Ok(())
}

/// The path of the confirmation URI of a confirmation served by the RS
/// itself (§12).
pub const EMBEDDED_CONFIRMATION_PATH: &str = "/confirm";

impl RsConfig {
    /// Whether this RS serves the confirmation itself (§12).
    pub fn embedded(&self) -> bool {
        self.confirmation
            .as_ref()
            .and_then(|t| t.get("embedded"))
            .and_then(toml::Value::as_bool)
            .unwrap_or(false)
    }

    /// The confirmation URI put in URI packs (§1) when the file names it:
    /// the CS's `uri`, or this RS's own (§12). `None` for a CS named by its
    /// issuer, whose document names it (§16.1).
    pub fn confirmation_uri(&self) -> Option<String> {
        match &self.confirmation_server {
            Some(cs) => cs.uri.clone(),
            None => Some(format!("{}{EMBEDDED_CONFIRMATION_PATH}", self.base_url())),
        }
    }

    /// The networks outside fetches may reach (`allow_addresses`).
    pub fn address_policy(&self) -> Result<AddressPolicy, ConfigError> {
        AddressPolicy::new(&self.allow_addresses)
            .map_err(|e| invalid("allow_addresses", e.to_string()))
    }

    /// The name in the discovery document (§16.2): `name`, or the host
    /// (and port) of `public_url`.
    pub fn display_name(&self) -> String {
        if let Some(name) = &self.name {
            return name.trim().to_owned();
        }
        let base = self.base_url();
        base.split_once("://")
            .map_or(base.as_str(), |(_, rest)| rest)
            .to_owned()
    }

    /// The RS origin without a trailing slash.
    pub fn base_url(&self) -> String {
        self.public_url.trim_end_matches('/').to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
listen = "127.0.0.1:8081"
public_url = "http://127.0.0.1:8081"
data_dir = "d"
signing_key = "d/k.jwk"
[confirmation_server]
uri = "http://127.0.0.1:8080/confirm"
jwks_file = "cs.json"
[[clients]]
client_id = "agent"
client_secret = "agent-secret"
role = "agent"
subject = "alice"
"#;

    #[test]
    fn good_config_parses() {
        let c = RsConfig::from_toml(GOOD).unwrap();
        let floors = c.policy.floors(&crate::tools::catalogue()).unwrap();
        assert_eq!(
            floors.floor("book_flight").unwrap().to_string(),
            "when price_usd is above 100"
        );
        assert_eq!(c.cheq_ttl_secs, 900);
    }

    #[test]
    fn floors_are_checked_when_the_file_is_read() {
        let with = |policy: &str| RsConfig::from_toml(&format!("{GOOD}\n{policy}"));
        let floors = |c: RsConfig| c.policy.floors(&crate::tools::catalogue()).unwrap();
        let c =
            with("[[policy.rules]]\ntool = \"book_flight\"\nassurance = \"passkey\"\n").unwrap();
        assert_eq!(
            floors(c).floor("book_flight").unwrap().to_string(),
            "always, with a passkey"
        );
        let c = with(
            "[policy]\nbook_flight_threshold_usd = 250\npasskey_tools = [\"transfer_funds\"]\n",
        )
        .unwrap();
        let f = floors(c);
        assert_eq!(
            f.floor("book_flight").unwrap().to_string(),
            "when price_usd is above 250"
        );
        assert_eq!(
            f.floor("transfer_funds").unwrap().to_string(),
            "always, with a passkey"
        );
        for (bad, says) in [
            ("[[policy.rules]]\ntool = \"fly\"\n", "no tool \"fly\""),
            (
                "[[policy.rules]]\ntool = \"book_flight\"\nparam = \"cabin_class\"\nabove = 1\n",
                "numeric",
            ),
            (
                "[[policy.rules]]\ntool = \"book_flight\"\n[[policy.rules]]\ntool = \"book_flight\"\n",
                "second rule",
            ),
            (
                "[policy]\nbook_flight_threshold_usd = 5\n[[policy.rules]]\ntool = \"book_flight\"\n",
                "keep one",
            ),
            (
                "[[policy.rules]]\ntool = \"transfer_funds\"\nabove = 5\n",
                "numeric parameter",
            ),
        ] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains("policy") && e.contains(says), "{bad}: {e}");
        }
        let e = with("[[policy.rules]]\ntool = \"book_flight\"\nassurance = \"retina\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("retina") && e.contains("passkey"), "{e}");
    }

    #[test]
    fn missing_key_is_named() {
        let e = RsConfig::from_toml(&GOOD.replace("public_url", "public_uri")).unwrap_err();
        assert!(e.to_string().contains("public_ur"), "{e}");
        let e = RsConfig::from_toml(&GOOD.replace("subject = \"alice\"", "")).unwrap_err();
        assert!(e.to_string().contains("clients[0].subject"), "{e}");
        let e = RsConfig::from_toml(&GOOD.replace("jwks_file = \"cs.json\"", "")).unwrap_err();
        assert!(e.to_string().contains("jwks_file"), "{e}");
        let e = RsConfig::from_toml(&GOOD.replace("http://127.0.0.1:8081", "http://rs.example"))
            .unwrap_err();
        assert!(e.to_string().contains("public_url"), "{e}");
    }

    #[test]
    fn plain_http_only_for_loopback() {
        let jwks_uri =
            |uri: &str| GOOD.replace("jwks_file = \"cs.json\"", &format!("jwks_uri = \"{uri}\""));
        let cs_uri = |uri: &str| {
            GOOD.replace(
                "uri = \"http://127.0.0.1:8080/confirm\"",
                &format!("uri = \"{uri}\""),
            )
        };
        for (text, key) in [
            (
                jwks_uri("http://cs.example/.well-known/jwks.json"),
                "confirmation_server.jwks_uri",
            ),
            (
                jwks_uri("http://10.1.2.3:8080/jwks.json"),
                "confirmation_server.jwks_uri",
            ),
            (
                jwks_uri("http://localhost.cs.example/jwks.json"),
                "confirmation_server.jwks_uri",
            ),
            (
                jwks_uri("file:///etc/jwks.json"),
                "confirmation_server.jwks_uri",
            ),
            (
                cs_uri("http://cs.example/confirm"),
                "confirmation_server.uri",
            ),
            (
                cs_uri("http://[2001:db8::2]/confirm"),
                "confirmation_server.uri",
            ),
        ] {
            let e = RsConfig::from_toml(&text).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
        for text in [
            jwks_uri("https://cs.example/.well-known/jwks.json"),
            jwks_uri("http://localhost:8080/.well-known/jwks.json"),
            jwks_uri("http://127.0.0.2/jwks.json"),
            jwks_uri("http://[::1]:8080/jwks.json"),
            cs_uri("https://cs.example/confirm"),
            cs_uri("http://localhost:8080/confirm"),
        ] {
            RsConfig::from_toml(&text).unwrap();
        }
    }

    /// The file with `[confirmation_server]` replaced by `cs`, and `top`
    /// added at the top level.
    fn with_cs(top: &str, cs: &str) -> String {
        let head = GOOD.split("[confirmation_server]").next().unwrap();
        let clients = &GOOD[GOOD.find("[[clients]]").unwrap()..];
        format!("{top}\n{head}[confirmation_server]\n{cs}\n{clients}")
    }

    const LOOPBACK: &str = "allow_addresses = [\"127.0.0.0/8\"]";

    #[test]
    fn a_cs_named_by_its_issuer_alone() {
        let c = RsConfig::from_toml(&with_cs("", "issuer = \"https://cs.example\"")).unwrap();
        let cs = c.confirmation_server.as_ref().unwrap();
        assert_eq!(cs.named(), CsNamed::Issuer("https://cs.example"));
        assert_eq!(c.confirmation_uri(), None);
        let c = RsConfig::from_toml(GOOD).unwrap();
        assert!(matches!(
            c.confirmation_server.as_ref().unwrap().named(),
            CsNamed::InFull {
                uri: "http://127.0.0.1:8080/confirm",
                jwks_file: Some(_),
                jwks_uri: None
            }
        ));
        // Loopback http when allowed.
        RsConfig::from_toml(&with_cs(LOOPBACK, "issuer = \"http://127.0.0.1:8080\"")).unwrap();
        RsConfig::from_toml(&with_cs(
            "allow_addresses = [\"10.1.0.0/16\"]",
            "issuer = \"https://10.1.2.3\"",
        ))
        .unwrap();
    }

    #[test]
    fn each_wrong_naming_of_the_cs_is_named() {
        for (top, cs, key) in [
            // Both forms.
            (
                "",
                "issuer = \"https://cs.example\"\nuri = \"https://cs.example/confirm\"\njwks_file = \"k.json\"",
                "confirmation_server.issuer",
            ),
            (
                "",
                "issuer = \"https://cs.example\"\njwks_file = \"k.json\"",
                "confirmation_server.jwks_file",
            ),
            (
                "",
                "issuer = \"https://cs.example\"\njwks_uri = \"https://cs.example/k\"",
                "confirmation_server.jwks_uri",
            ),
            // Neither.
            ("", "", "confirmation_server.issuer"),
            ("", "jwks_file = \"k.json\"", "confirmation_server.issuer"),
            // Not an origin.
            (
                "",
                "issuer = \"https://cs.example/confirm\"",
                "confirmation_server.issuer",
            ),
            ("", "issuer = \"cs.example\"", "confirmation_server.issuer"),
            // Not reachable under allow_addresses.
            (
                "",
                "issuer = \"http://127.0.0.1:8080\"",
                "confirmation_server.issuer",
            ),
            ("", "issuer = \"https://10.1.2.3\"", "confirmation_server.issuer"),
            (
                "",
                "issuer = \"https://169.254.169.254\"",
                "confirmation_server.issuer",
            ),
            (
                LOOPBACK,
                "issuer = \"http://cs.example\"",
                "confirmation_server.issuer",
            ),
            // The list itself.
            (
                "allow_addresses = [\"not a network\"]",
                "issuer = \"https://cs.example\"",
                "allow_addresses",
            ),
            ("name = \"  \"", "issuer = \"https://cs.example\"", "name"),
            (
                "name = \"a\\nb\"",
                "issuer = \"https://cs.example\"",
                "name",
            ),
        ] {
            let e = RsConfig::from_toml(&with_cs(top, cs)).unwrap_err().to_string();
            assert!(e.contains(key), "{top} {cs}: {e}");
        }
        let long = format!("name = \"{}\"", "x".repeat(101));
        let e = RsConfig::from_toml(&with_cs(&long, "issuer = \"https://cs.example\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("name"), "{e}");
        // The loopback error says what to do.
        let e = RsConfig::from_toml(&with_cs("", "issuer = \"http://127.0.0.1:8080\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("allow_addresses"), "{e}");
    }

    #[test]
    fn the_name_defaults_to_the_host() {
        let c = RsConfig::from_toml(GOOD).unwrap();
        assert_eq!(c.display_name(), "127.0.0.1:8081");
        let c = RsConfig::from_toml(&format!("name = \" Example Air \"\n{GOOD}")).unwrap();
        assert_eq!(c.display_name(), "Example Air");
    }
}
