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
