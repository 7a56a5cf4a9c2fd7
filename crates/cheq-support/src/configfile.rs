//! Reading a TOML configuration file (the CS's `cheq.toml`, the RS's
//! `rs.toml`) with errors that name the file or the key at fault.

use serde::de::DeserializeOwned;
use std::path::Path;

/// Why a configuration is not usable. Every message names the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Toml { path: String, message: String },
    #[error("config key `{key}`: {message}")]
    Invalid { key: String, message: String },
}

/// A [`ConfigError::Invalid`] for `key`.
pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

/// Parses TOML `text`; `name` names it in errors.
pub fn parse_toml<T: DeserializeOwned>(text: &str, name: &str) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Toml {
        path: name.to_owned(),
        message: e.to_string(),
    })
}

/// Reads and parses the TOML file at `path`.
pub fn read_toml<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_toml(&text, &path.display().to_string())
}

/// A server's configuration file: read, overridden by `CHEQ_*` environment
/// variables, then checked. A configuration built any other way goes through
/// [`ServerConfig::validate`] before a server takes it.
pub trait ServerConfig: DeserializeOwned {
    /// The file's usual name (`cheq.toml`), named in errors about its text.
    const FILE_NAME: &'static str;

    /// Applies the `CHEQ_*` overrides read from `env` (they win over the file).
    fn apply_env(&mut self, env: &Env<'_>) -> Result<(), ConfigError>;

    /// Checks what serde cannot.
    fn validate(&self) -> Result<(), ConfigError>;

    /// Reads a TOML file, applies the process environment and checks it.
    fn load(path: &Path) -> Result<Self, ConfigError> {
        let mut config: Self = read_toml(path)?;
        config.apply_env(&Env::new(&|k| std::env::var(k).ok()))?;
        config.validate()?;
        Ok(config)
    }

    /// Parses and checks TOML text (no environment).
    fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let config: Self = parse_toml(text, Self::FILE_NAME)?;
        config.validate()?;
        Ok(config)
    }
}

/// Where `CHEQ_*` overrides are read from: the process environment, or a
/// function in tests.
pub struct Env<'a> {
    var: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> Env<'a> {
    /// Overrides read through `var`.
    pub fn new(var: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Env { var }
    }

    /// Sets `slot` from `name` when it is set.
    pub fn set<T: From<String>>(&self, name: &str, slot: &mut T) {
        if let Some(v) = (self.var)(name) {
            *slot = T::from(v);
        }
    }

    /// Sets an optional `slot` from `name` when it is set.
    pub fn set_some<T: From<String>>(&self, name: &str, slot: &mut Option<T>) {
        if let Some(v) = (self.var)(name) {
            *slot = Some(T::from(v));
        }
    }

    /// Parses `name` into `slot` when it is set.
    pub fn parse<T: std::str::FromStr<Err = ConfigError>>(
        &self,
        name: &str,
        slot: &mut T,
    ) -> Result<(), ConfigError> {
        if let Some(v) = (self.var)(name) {
            *slot = v.parse()?;
        }
        Ok(())
    }

    /// The overrides both servers read: `CHEQ_LISTEN`, `CHEQ_DATABASE_URL`,
    /// `CHEQ_LOG_FORMAT`.
    pub fn apply_common(
        &self,
        listen: &mut String,
        database_url: &mut Option<DatabaseUrl>,
        log_format: &mut LogFormat,
    ) -> Result<(), ConfigError> {
        self.set("CHEQ_LISTEN", listen);
        self.set_some("CHEQ_DATABASE_URL", database_url);
        self.parse("CHEQ_LOG_FORMAT", log_format)
    }
}

/// `database_url`: the PostgreSQL database that holds a server's state when
/// set. Its `Debug` hides it: it may carry a password.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(pub String);

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DatabaseUrl(<redacted>)")
    }
}

impl From<String> for DatabaseUrl {
    fn from(url: String) -> Self {
        DatabaseUrl(url)
    }
}

impl DatabaseUrl {
    /// Checks the form (the driver checks the rest when connecting); the
    /// message never repeats the URL.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let ok = ["postgres://", "postgresql://"]
            .iter()
            .any(|p| self.0.starts_with(p) && self.0.len() > p.len());
        if ok {
            Ok(())
        } else {
            Err(invalid(
                "database_url",
                "must be a PostgreSQL URL: postgres://user@host:port/dbname",
            ))
        }
    }
}

/// `log_format`: how log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One readable line per event (the default).
    #[default]
    Text,
    /// One JSON object per line, for a log collector.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(invalid("log_format", "must be \"text\" or \"json\"")),
        }
    }
}
