//! The tables of the CS's configuration file below its top level: the
//! resource servers it works for (§2, §3, §16.4), identity providers, voice
//! gateways (§10), the transparency log (§15) and `[registration]` (§16.3).
//! Each is checked where the whole file is ([`super::CsConfig`]).

use cheq_support::configfile::{invalid, ConfigError};
use cheq_support::outbound::AddressPolicy;
use cheq_support::secret::Secret;
use serde::Deserialize;
use std::path::PathBuf;

/// How the CS authenticates at a configured resource server's token
/// endpoint (§3, §16.4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RsAuth {
    /// `client_id` and `client_secret`, issued by the RS (HTTP Basic).
    #[default]
    ClientSecretBasic,
    /// A client assertion signed with the CS's own key (§16.4): no secret.
    PrivateKeyJwt,
}

/// One resource server this CS works for (§2, §3).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceServerConfig {
    /// scheme://host[:port] of the RS.
    pub origin: String,
    /// Resource URIs must be under this path.
    pub path_prefix: String,
    /// A JWKS file with the RS public keys.
    #[serde(default)]
    pub jwks: Option<PathBuf>,
    /// Or a URL to fetch them from at start-up.
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// The RS token endpoint (client credentials, §3).
    pub token_url: String,
    /// How the CS authenticates there.
    #[serde(default)]
    pub auth: RsAuth,
    /// With `client_secret_basic` (the default).
    #[serde(default)]
    pub client_id: String,
    #[serde(default)]
    pub client_secret: Option<Secret>,
    /// A sign-in older than this must be renewed before deciding for this
    /// RS (replaces the top-level `max_auth_age_secs`).
    #[serde(default)]
    pub max_auth_age_secs: Option<i64>,
}

/// How the CS authenticates at a provider's token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenEndpointAuth {
    /// HTTP Basic (RFC 6749 §2.3.1), the OpenID Connect default.
    ClientSecretBasic,
    /// `client_id` and `client_secret` in the form body.
    ClientSecretPost,
}

/// An OpenID Connect provider people may sign in with.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityProviderConfig {
    /// Shown on the login page ("Sign in with …") and used in its URL.
    pub name: String,
    /// The issuer identifier; discovery is read from
    /// `<issuer>/.well-known/openid-configuration`.
    pub issuer: String,
    pub client_id: String,
    #[serde(default)]
    pub client_secret: Option<Secret>,
    /// A file holding the client secret (trimmed), instead of `client_secret`.
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    /// Scopes asked for; `openid` must be one of them.
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// Default: `client_secret_basic` unless the provider's discovery
    /// document names only `client_secret_post`.
    #[serde(default)]
    pub token_endpoint_auth_method: Option<TokenEndpointAuth>,
}

fn default_scopes() -> Vec<String> {
    vec!["openid".into(), "email".into()]
}

impl IdentityProviderConfig {
    /// The client secret, from the configuration or its file.
    pub fn secret(&self) -> Result<Secret, ConfigError> {
        match (&self.client_secret, &self.client_secret_file) {
            (Some(s), None) => Ok(s.clone()),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    invalid(
                        format!("identity_providers ({}).client_secret_file", self.name),
                        format!("{}: {e}", path.display()),
                    )
                })?;
                let secret = text.trim().to_owned();
                if secret.is_empty() {
                    return Err(invalid(
                        format!("identity_providers ({}).client_secret_file", self.name),
                        format!("{} is empty", path.display()),
                    ));
                }
                Ok(Secret::from(secret))
            }
            _ => Err(invalid(
                format!("identity_providers ({}).client_secret", self.name),
                "exactly one of `client_secret` and `client_secret_file` must be given",
            )),
        }
    }
}

/// A voice gateway registered for the raw API (§10).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    pub client_id: String,
    /// The argon2 hash of its secret (`cheq hash-secret` makes one).
    pub secret_hash: Secret,
}

/// The transparency log (§15): on unless turned off; its checkpoints are
/// signed with a note key of its own, kept in `key_file` (default
/// [`LOG_KEY_FILE`] in `data_dir`; instances sharing a database must
/// share it, and a moved host must bring it).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransparencyLogConfig {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

fn yes() -> bool {
    true
}

impl Default for TransparencyLogConfig {
    fn default() -> Self {
        TransparencyLogConfig {
            enabled: true,
            key_file: None,
        }
    }
}

/// Whether resource servers may register themselves (§16.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegistrationMode {
    /// Only the resource servers of the configuration (the default).
    #[default]
    Off,
    /// A registration presents an initial access token the operator issued
    /// (`cheq rs token`), good for one registration.
    Token,
    /// Anyone may register a resource server (a public host).
    Open,
}

impl RegistrationMode {
    /// Whether registrations are taken at all.
    pub fn is_on(self) -> bool {
        self != RegistrationMode::Off
    }
}

/// `[registration]`: self-service registration of resource servers (§16.3).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrationConfig {
    #[serde(default)]
    pub mode: RegistrationMode,
    /// Networks (CIDR) or addresses that registered resource servers'
    /// documents may be fetched from although they are private, loopback,
    /// link-local or unspecified (`127.0.0.0/8` also allows plain `http`
    /// to a loopback address: for development only).
    #[serde(default)]
    pub allow_addresses: Vec<String>,
}

impl RegistrationConfig {
    /// The addresses registered resource servers may be fetched from.
    pub fn address_policy(&self) -> Result<AddressPolicy, ConfigError> {
        AddressPolicy::new(&self.allow_addresses)
            .map_err(|e| invalid("registration.allow_addresses", e.to_string()))
    }
}
