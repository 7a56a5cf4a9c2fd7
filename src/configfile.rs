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
