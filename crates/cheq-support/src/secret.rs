//! A secret read from configuration or a form: a string whose `Debug` hides
//! it, so that a configuration or request printed whole never shows it.

use serde::Deserialize;

/// A client secret, session secret, PIN or other value that must never reach
/// a log line. Read it with [`Secret::expose`], at the one place that needs it.
#[derive(Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[derive(Debug, Deserialize)]
    struct Form {
        #[allow(dead_code)]
        pin: Option<Secret>,
    }
    use serde::Deserialize;

    #[test]
    fn debug_never_shows_the_value_but_serde_reads_it_plainly() {
        let form: Form = serde_json::from_str(r#"{"pin":"4821"}"#).unwrap();
        assert_eq!(form.pin.as_ref().map(Secret::expose), Some("4821"));
        let shown = format!("{form:?}");
        assert!(!shown.contains("4821"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }
}
