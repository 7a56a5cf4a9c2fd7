//! The CHEQ payload (PROTOCOL.md §4): typed model, parsing and validation.
//!
//! Parsing yields a [`Cheq`] that can be *displayed*: the members that are always
//! needed are present and within limits. [`Cheq::countersign_fields`] then says
//! whether it also carries what is needed to countersign, naming every missing
//! member when it does not.

use super::json::{self, JsonError, Node, Object};
use super::uri::{parse_cheq_uri, UriError};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

/// A payload is at most 64 KiB.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// Every string in the payload is at most 4 KiB (UTF-8 bytes).
pub const MAX_STRING_BYTES: usize = 4 * 1024;
/// At most 100 parameters.
pub const MAX_PARAMETERS: usize = 100;
/// `expires` is at most 24 h after `date` (exactly 24 h is allowed).
pub const MAX_VALIDITY_SECS: i64 = 24 * 3600;
/// A nonce carries at least 16 random bytes.
pub const MIN_NONCE_BYTES: usize = 16;

/// Why a payload cannot be displayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheqError {
    #[error("payload: {0}")]
    Json(#[from] JsonError),
    #[error("payload member \"assurance\" is {0:?}; only \"passkey\" is understood")]
    UnknownAssurance(String),
    #[error("payload member \"{0}\" is missing")]
    Missing(String),
    #[error("payload member \"{member}\" must be {expected}")]
    WrongType {
        member: String,
        expected: &'static str,
    },
    #[error("unsupported CHEQ version {0} (only \"1.0\" is known)")]
    UnsupportedVersion(String),
    #[error("payload member \"{member}\" is not a valid URI: {error}")]
    BadUri { member: String, error: UriError },
    #[error("a string in \"{0}\" is longer than 4 KiB")]
    StringTooLong(String),
    #[error("{0} parameters, more than the limit of 100")]
    TooManyParameters(usize),
    #[error(
        "parameter {index} (\"{name}\") has neither \"parameter value\" nor \"parameter input\""
    )]
    ParameterWithoutValue { index: usize, name: String },
    #[error("parameter {index} (\"{name}\") has both \"parameter value\" and \"parameter input\"")]
    ParameterValueAndInput { index: usize, name: String },
    #[error("two parameters are named \"{0}\"")]
    DuplicateParameterName(String),
    #[error("parameter \"{name}\": \"parameter input\" is invalid: {reason}")]
    BadInput { name: String, reason: String },
    #[error("\"language\" is not a BCP 47 language tag: {0}")]
    BadLanguage(String),
}

/// Why a displayable payload cannot be countersigned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CountersignableError {
    #[error("cannot be countersigned: missing {}", .0.join(", "))]
    MissingMembers(Vec<&'static str>),
    #[error("\"{member}\" is not an RFC 3339 date-time: {value}")]
    BadDate { member: &'static str, value: String },
    #[error("\"nonce\" must be unpadded base64url of at least 16 bytes")]
    BadNonce,
    #[error("payload member \"{member}\" is not a valid URI: {error}")]
    BadUri {
        member: &'static str,
        error: UriError,
    },
    #[error("\"subject\" is empty")]
    EmptySubject,
    #[error("\"expires\" is not after \"date\"")]
    ExpiresBeforeDate,
    #[error("\"expires\" is more than 24 hours after \"date\"")]
    ValidityTooLong,
}

/// The kind of value a user is asked to supply (§8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputType {
    Text,
    Digits,
    Amount,
}

impl InputType {
    pub fn as_str(self) -> &'static str {
        match self {
            InputType::Text => "text",
            InputType::Digits => "digits",
            InputType::Amount => "amount",
        }
    }
}

/// `parameter input` (§8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParameterInput {
    pub input_type: InputType,
    pub required: bool,
    pub max_length: Option<usize>,
    pub pattern: Option<String>,
    pub sensitive: bool,
}

/// One parameter, in display order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parameter {
    pub name: String,
    pub description: Option<String>,
    pub value: Option<String>,
    pub input: Option<ParameterInput>,
    /// `parameter unit` (§4): an ISO 4217 currency code (`USD`, `JPY`) for
    /// money, otherwise a unit word (`nights`, `kg`). The only place a view
    /// may take a currency or unit from: never guessed from a name or a
    /// description.
    pub unit: Option<String>,
}

impl Parameter {
    /// Does this parameter ask the user for a value that an acceptance must
    /// carry (§8 `"required": true`)?
    pub fn requires_input(&self) -> bool {
        self.input.as_ref().is_some_and(|i| i.required)
    }
}

/// A parsed, displayable CHEQ payload. The exact bytes it was read from are kept:
/// they, not a re-serialisation, are what is signed.
#[derive(Debug, Clone)]
pub struct Cheq {
    raw: Vec<u8>,
    pub version: String,
    pub operation: String,
    pub operation_name: String,
    pub parameters: Vec<Parameter>,
    pub date: String,
    pub nonce: Option<String>,
    pub resource_uri: Option<String>,
    pub confirmation_uri: Option<String>,
    pub subject: Option<String>,
    pub expires: Option<String>,
    pub language: String,
    /// What an acceptance must carry beyond the CS's word (`assurance`).
    pub assurance: Option<super::vocab::Assurance>,
}

/// What a countersignable payload guarantees, already parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountersignFields {
    pub nonce: String,
    pub resource_uri: String,
    pub confirmation_uri: String,
    pub subject: String,
    pub date: DateTime<Utc>,
    pub expires: DateTime<Utc>,
    /// The origins of `resource uri` and `confirmation uri`, from the one
    /// parse that checked them (keys are trusted per origin, §5 rule 2).
    pub resource_origin: url::Origin,
    pub confirmation_origin: url::Origin,
}

impl Cheq {
    /// The first parameter whose required input (§8) has no non-empty value in
    /// `collected`: an acceptance without it is refused (§5 rule 3). The one
    /// place this rule is checked, by the countersigner, every verifier and
    /// the CS's form.
    pub fn missing_required_input(
        &self,
        collected: Option<&indexmap::IndexMap<String, String>>,
    ) -> Option<&Parameter> {
        self.parameters.iter().find(|p| {
            p.requires_input()
                && collected
                    .and_then(|c| c.get(&p.name))
                    .is_none_or(|v| v.is_empty())
        })
    }

    /// Parses and validates a payload for display (§4).
    pub fn parse(bytes: &[u8]) -> Result<Self, CheqError> {
        let members = json::parse_node_object(bytes, MAX_PAYLOAD_BYTES)?;
        members
            .iter()
            .try_for_each(|(k, v)| check_member_lengths(k, v))?;

        let version = match members.get("version") {
            None => return Err(CheqError::Missing("version".into())),
            Some(Node::String(s)) if s == "1.0" => "1.0".to_owned(),
            Some(n @ Node::Number(_)) if n.as_f64() == Some(1.0) => "1.0".to_owned(),
            Some(other) => return Err(CheqError::UnsupportedVersion(other.to_string())),
        };
        let operation = required_str(&members, "operation")?;
        parse_cheq_uri_or_any(&operation).map_err(|error| CheqError::BadUri {
            member: "operation".into(),
            error,
        })?;
        let operation_name = required_str(&members, "operation name")?;
        let date = required_str(&members, "date")?;
        let parameters = parse_parameters(&members)?;
        let language = match optional_str(&members, "language")? {
            None => "en".to_owned(),
            Some(tag) if is_language_tag(&tag) => tag,
            Some(tag) => return Err(CheqError::BadLanguage(tag)),
        };
        let nonce = optional_str(&members, "nonce")?;
        let resource_uri = optional_str(&members, "resource uri")?;
        let confirmation_uri = optional_str(&members, "confirmation uri")?;
        let subject = optional_str(&members, "subject")?;
        let expires = optional_str(&members, "expires")?;
        let assurance = match optional_str(&members, "assurance")? {
            None => None,
            Some(word) => Some(
                super::vocab::Assurance::parse(&word).ok_or(CheqError::UnknownAssurance(word))?,
            ),
        };
        drop(members);
        Ok(Cheq {
            raw: bytes.to_vec(),
            version,
            operation,
            operation_name,
            parameters,
            date,
            nonce,
            resource_uri,
            confirmation_uri,
            subject,
            expires,
            language,
            assurance,
        })
    }

    /// The exact payload bytes.
    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    /// Every member, unknown ones included, in document order (read again
    /// from the exact bytes, which were read strictly when parsed).
    pub fn members(&self) -> Map<String, Value> {
        json::parse_object(&self.raw, MAX_PAYLOAD_BYTES).unwrap_or_default()
    }

    /// Checks the members needed to countersign (§4) and returns them parsed,
    /// `date` and `expires` as RFC 3339 date-times. A payload lacking some gets
    /// an error naming all of them. What needs the current time (not expired,
    /// `date` not in the future) is checked by verification (§5 rule 4),
    /// since this module has no clock.
    pub fn countersign_fields(&self) -> Result<CountersignFields, CountersignableError> {
        let mut missing = Vec::new();
        let mut need = |name: &'static str, v: &Option<String>| {
            if v.is_none() {
                missing.push(name);
            }
        };
        need("nonce", &self.nonce);
        need("resource uri", &self.resource_uri);
        need("confirmation uri", &self.confirmation_uri);
        need("subject", &self.subject);
        need("expires", &self.expires);
        let (Some(nonce), Some(resource_uri), Some(confirmation_uri), Some(subject), Some(expires)) = (
            &self.nonce,
            &self.resource_uri,
            &self.confirmation_uri,
            &self.subject,
            &self.expires,
        ) else {
            return Err(CountersignableError::MissingMembers(missing));
        };
        let date = parse_rfc3339("date", &self.date)?;
        let expires_at = parse_rfc3339("expires", expires)?;
        // Canonical unpadded base64url of at least MIN_NONCE_BYTES, checked
        // without decoding into a buffer.
        let b64 = base64_simd::URL_SAFE_NO_PAD;
        match b64.decoded_length(nonce.as_bytes()) {
            Ok(len) if len >= MIN_NONCE_BYTES && b64.check(nonce.as_bytes()).is_ok() => {}
            _ => return Err(CountersignableError::BadNonce),
        }
        let origin = |member: &'static str, uri: &str| {
            parse_cheq_uri(uri)
                .map(|u| u.origin())
                .map_err(|error| CountersignableError::BadUri { member, error })
        };
        let resource_origin = origin("resource uri", resource_uri)?;
        let confirmation_origin = origin("confirmation uri", confirmation_uri)?;
        if subject.trim().is_empty() {
            return Err(CountersignableError::EmptySubject);
        }
        if expires_at <= date {
            return Err(CountersignableError::ExpiresBeforeDate);
        }
        if expires_at - date > chrono::Duration::seconds(MAX_VALIDITY_SECS) {
            return Err(CountersignableError::ValidityTooLong);
        }
        Ok(CountersignFields {
            nonce: nonce.clone(),
            resource_uri: resource_uri.clone(),
            confirmation_uri: confirmation_uri.clone(),
            subject: subject.clone(),
            date,
            expires: expires_at,
            resource_origin,
            confirmation_origin,
        })
    }
}

/// Parses an RFC 3339 date-time into UTC.
pub fn parse_rfc3339(
    member: &'static str,
    value: &str,
) -> Result<DateTime<Utc>, CountersignableError> {
    DateTime::parse_from_rfc3339(value)
        .map(|d| d.with_timezone(&Utc))
        .map_err(|_| CountersignableError::BadDate {
            member,
            value: value.to_owned(),
        })
}

/// `operation` is a URI, but not necessarily an https one we would fetch: any
/// absolute URI is accepted.
fn parse_cheq_uri_or_any(s: &str) -> Result<(), UriError> {
    match url::Url::parse(s) {
        Ok(_) => Ok(()),
        Err(_) => Err(UriError::NotAbsolute(s.to_owned())),
    }
}

fn required_str(m: &Object<'_>, name: &str) -> Result<String, CheqError> {
    optional_str(m, name)?.ok_or_else(|| CheqError::Missing(name.to_owned()))
}

fn optional_str(m: &Object<'_>, name: &str) -> Result<Option<String>, CheqError> {
    match m.get(name) {
        None => Ok(None),
        Some(Node::String(s)) => Ok(Some(s.clone().into_owned())),
        Some(_) => Err(CheqError::WrongType {
            member: name.to_owned(),
            expected: "a string",
        }),
    }
}

fn check_member_lengths(name: &str, v: &Node<'_>) -> Result<(), CheqError> {
    if name.len() > MAX_STRING_BYTES {
        return Err(CheqError::StringTooLong("payload".to_owned()));
    }
    check_string_lengths(name, v)
}

fn check_string_lengths(path: &str, v: &Node<'_>) -> Result<(), CheqError> {
    match v {
        Node::String(s) if s.len() > MAX_STRING_BYTES => {
            Err(CheqError::StringTooLong(path.to_owned()))
        }
        Node::Array(items) => items.iter().try_for_each(|i| check_string_lengths(path, i)),
        Node::Object(map) => map.iter().try_for_each(|(k, v)| check_member_lengths(k, v)),
        _ => Ok(()),
    }
}

fn parse_parameters(m: &Object<'_>) -> Result<Vec<Parameter>, CheqError> {
    let inputs = match m.get("inputs") {
        None => return Err(CheqError::Missing("inputs".into())),
        Some(Node::Object(o)) => o,
        Some(_) => {
            return Err(CheqError::WrongType {
                member: "inputs".into(),
                expected: "an object",
            })
        }
    };
    let list = match inputs.get("parameters") {
        None => return Err(CheqError::Missing("inputs.parameters".into())),
        Some(Node::Array(a)) => a,
        Some(_) => {
            return Err(CheqError::WrongType {
                member: "inputs.parameters".into(),
                expected: "an array",
            })
        }
    };
    if list.len() > MAX_PARAMETERS {
        return Err(CheqError::TooManyParameters(list.len()));
    }
    let mut out: Vec<Parameter> = Vec::with_capacity(list.len());
    for (index, item) in list.iter().enumerate() {
        let Node::Object(p) = item else {
            return Err(CheqError::WrongType {
                member: format!("inputs.parameters[{index}]"),
                expected: "an object",
            });
        };
        let field = |name: &str| format!("inputs.parameters[{index}].{name}");
        let get = |name: &str| match p.get(name) {
            None => Ok(None),
            Some(Node::String(s)) => Ok(Some(s.clone().into_owned())),
            Some(_) => Err(CheqError::WrongType {
                member: field(name),
                expected: "a string",
            }),
        };
        let name =
            get("parameter name")?.ok_or_else(|| CheqError::Missing(field("parameter name")))?;
        let description = get("parameter description")?;
        let value = get("parameter value")?;
        let unit = get("parameter unit")?;
        let input = match p.get("parameter input") {
            None => None,
            Some(v) => Some(parse_input(&name, v)?),
        };
        match (&value, &input) {
            (None, None) => return Err(CheqError::ParameterWithoutValue { index, name }),
            (Some(_), Some(_)) => return Err(CheqError::ParameterValueAndInput { index, name }),
            _ => {}
        }
        if out.iter().any(|q| q.name == name) {
            return Err(CheqError::DuplicateParameterName(name));
        }
        out.push(Parameter {
            name,
            description,
            value,
            input,
            unit,
        });
    }
    Ok(out)
}

fn parse_input(name: &str, v: &Node<'_>) -> Result<ParameterInput, CheqError> {
    let bad = |reason: &str| CheqError::BadInput {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    let Node::Object(o) = v else {
        return Err(bad("must be an object"));
    };
    let input_type = match o.get("type").and_then(Node::as_str) {
        Some("text") => InputType::Text,
        Some("digits") => InputType::Digits,
        Some("amount") => InputType::Amount,
        Some(_) => return Err(bad("\"type\" must be text, digits or amount")),
        None => return Err(bad("\"type\" is missing")),
    };
    let flag = |key: &str, default: bool| match o.get(key) {
        None => Ok(default),
        Some(Node::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(&format!("\"{key}\" must be true or false"))),
    };
    let max_length = match o.get("max length") {
        None => None,
        Some(n @ Node::Number(_)) => match n.as_u64() {
            Some(len) if (1..=MAX_STRING_BYTES as u64).contains(&len) => Some(len as usize),
            _ => return Err(bad("\"max length\" must be a whole number from 1 to 4096")),
        },
        Some(_) => return Err(bad("\"max length\" must be a number")),
    };
    let pattern = match o.get("pattern") {
        None => None,
        Some(Node::String(s)) => Some(s.clone().into_owned()),
        Some(_) => return Err(bad("\"pattern\" must be a string")),
    };
    Ok(ParameterInput {
        input_type,
        required: flag("required", true)?,
        max_length,
        pattern,
        sensitive: flag("sensitive", false)?,
    })
}

/// A well-formed BCP 47 tag, checked for shape (RFC 5646 §2.1 syntax: subtags of
/// 1–8 letters or digits, the first all letters).
fn is_language_tag(tag: &str) -> bool {
    let mut parts = tag.split('-');
    let first_ok = parts
        .next()
        .is_some_and(|p| (1..=8).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_alphabetic()));
    first_ok
        && parts.all(|p| (1..=8).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_alphanumeric()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The draft's Figure 4, with its trailing commas removed.
    pub const FIGURE_4: &str = r#"{
   "version" : 1.0,
   "operation" : "https://airline.com/api/v1/book-flight",
   "operation name" : "Book airline",

   "inputs" : {
      "parameters" : [
         {
            "parameter name" : "flight number",
            "parameter description" : "The overnight flight from EWR to MAD",
            "parameter value" : "UA23"
         },
         {
            "parameter name" : "flight date",
            "parameter value" : "8 August 2025, 12:20 EDT"
         },
         {
            "parameter name" : "flight cost",
            "parameter value" : "$1200 USD"
         }
      ]
   },
   "date" : "July 23, 2025, 11:59 UTC"
}"#;

    fn full() -> serde_json::Value {
        serde_json::json!({
            "version": "1.0",
            "operation": "https://api.airline.example/api/v1/book-flight",
            "operation name": "Book flight",
            "inputs": {"parameters": [
                {"parameter name": "flight number", "parameter value": "UA23"},
                {"parameter name": "account", "parameter input": {"type": "digits", "sensitive": true, "max length": 20}}
            ]},
            "date": "2026-11-22T09:00:00Z",
            "nonce": "AAECAwQFBgcICQoLDA0ODw",
            "resource uri": "https://api.airline.example/cheq/confirmations/abc",
            "confirmation uri": "https://confirm.example",
            "subject": "alice",
            "expires": "2026-11-23T09:00:00Z",
            "x-extension": {"kept": true}
        })
    }

    fn parse(v: &serde_json::Value) -> Result<Cheq, CheqError> {
        Cheq::parse(serde_json::to_string(v).unwrap().as_bytes())
    }

    #[test]
    fn figure_4_is_displayable_but_not_countersignable() {
        let cheq = Cheq::parse(FIGURE_4.as_bytes()).unwrap();
        assert_eq!(cheq.version, "1.0");
        assert_eq!(cheq.operation_name, "Book airline");
        assert_eq!(cheq.parameters.len(), 3);
        assert_eq!(cheq.parameters[2].value.as_deref(), Some("$1200 USD"));
        assert_eq!(cheq.language, "en");
        let err = cheq.countersign_fields().unwrap_err();
        assert_eq!(
            err,
            CountersignableError::MissingMembers(vec![
                "nonce",
                "resource uri",
                "confirmation uri",
                "subject",
                "expires"
            ])
        );
        assert_eq!(
            err.to_string(),
            "cannot be countersigned: missing nonce, resource uri, confirmation uri, subject, expires"
        );
    }

    #[test]
    fn full_payload_is_countersignable_and_keeps_unknown_members() {
        let cheq = parse(&full()).unwrap();
        let f = cheq.countersign_fields().unwrap();
        assert_eq!(f.subject, "alice");
        assert_eq!((f.expires - f.date).num_hours(), 24);
        assert!(cheq.members().contains_key("x-extension"));
        let input = cheq.parameters[1].input.as_ref().unwrap();
        assert_eq!(input.input_type, InputType::Digits);
        assert!(input.required && input.sensitive);
        assert_eq!(input.max_length, Some(20));
    }

    #[test]
    fn validity_limits() {
        let mut v = full();
        v["expires"] = "2026-11-23T09:00:01Z".into();
        assert_eq!(
            parse(&v).unwrap().countersign_fields(),
            Err(CountersignableError::ValidityTooLong)
        );
        v["expires"] = "2026-11-22T08:00:00Z".into();
        assert_eq!(
            parse(&v).unwrap().countersign_fields(),
            Err(CountersignableError::ExpiresBeforeDate)
        );
        v["expires"] = "tomorrow".into();
        assert!(matches!(
            parse(&v).unwrap().countersign_fields(),
            Err(CountersignableError::BadDate {
                member: "expires",
                ..
            })
        ));
        let mut v = full();
        v["date"] = "July 23, 2025".into();
        assert!(matches!(
            parse(&v).unwrap().countersign_fields(),
            Err(CountersignableError::BadDate { member: "date", .. })
        ));
    }

    #[test]
    fn nonce_and_uris_are_checked() {
        for bad in [
            "short",
            "AAECAwQFBgcICQoLDA0ODw==",
            "AAECAwQFBgcICQoLDA0ODx",
            "!!!!!!!!!!!!!!!!!!!!!!",
        ] {
            let mut v = full();
            v["nonce"] = bad.into();
            assert_eq!(
                parse(&v).unwrap().countersign_fields(),
                Err(CountersignableError::BadNonce),
                "{bad}"
            );
        }
        let mut v = full();
        v["resource uri"] = "http://api.airline.example/x".into();
        assert!(matches!(
            parse(&v).unwrap().countersign_fields(),
            Err(CountersignableError::BadUri {
                member: "resource uri",
                ..
            })
        ));
        let mut v = full();
        v["subject"] = " ".into();
        assert_eq!(
            parse(&v).unwrap().countersign_fields(),
            Err(CountersignableError::EmptySubject)
        );
    }

    #[test]
    fn parameter_unit_is_read_checked_and_kept_signed() {
        let mut v = full();
        v["inputs"]["parameters"][0]["parameter unit"] = "JPY".into();
        v["inputs"]["parameters"][0]["x-unknown"] = "kept".into();
        let cheq = parse(&v).unwrap();
        assert_eq!(cheq.parameters[0].unit.as_deref(), Some("JPY"));
        assert_eq!(cheq.parameters[1].unit, None);
        // The exact bytes, unknown members included, are what is signed.
        assert!(String::from_utf8_lossy(cheq.raw()).contains("\"x-unknown\":\"kept\""));
        assert!(cheq.countersign_fields().is_ok());
        // A string, like every other member.
        v["inputs"]["parameters"][0]["parameter unit"] = 392.into();
        assert_eq!(
            parse(&v).unwrap_err(),
            CheqError::WrongType {
                member: "inputs.parameters[0].parameter unit".into(),
                expected: "a string"
            }
        );
        // At most 4 KiB, like every string.
        v["inputs"]["parameters"][0]["parameter unit"] = "k".repeat(4096).into();
        assert!(parse(&v).is_ok());
        v["inputs"]["parameters"][0]["parameter unit"] = "k".repeat(4097).into();
        assert!(matches!(parse(&v), Err(CheqError::StringTooLong(_))));
    }

    #[test]
    fn display_refusals() {
        let mut v = full();
        v["version"] = "2.0".into();
        assert!(matches!(parse(&v), Err(CheqError::UnsupportedVersion(_))));
        let mut v = full();
        v.as_object_mut().unwrap().remove("operation name");
        assert_eq!(
            parse(&v).unwrap_err(),
            CheqError::Missing("operation name".into())
        );
        let mut v = full();
        v["inputs"]["parameters"][0]
            .as_object_mut()
            .unwrap()
            .remove("parameter value");
        assert!(matches!(
            parse(&v),
            Err(CheqError::ParameterWithoutValue { index: 0, .. })
        ));
        let mut v = full();
        v["inputs"]["parameters"][1]["parameter value"] = "1".into();
        assert!(matches!(
            parse(&v),
            Err(CheqError::ParameterValueAndInput { index: 1, .. })
        ));
        let mut v = full();
        v["inputs"]["parameters"][1]["parameter name"] = "flight number".into();
        assert!(matches!(
            parse(&v),
            Err(CheqError::DuplicateParameterName(_))
        ));
        let mut v = full();
        v["inputs"]["parameters"] = (0..101)
            .map(|i| serde_json::json!({"parameter name": format!("p{i}"), "parameter value": "v"}))
            .collect::<Vec<_>>()
            .into();
        assert_eq!(parse(&v).unwrap_err(), CheqError::TooManyParameters(101));
        let mut v = full();
        v["x-extension"] = "x".repeat(4097).into();
        assert!(matches!(parse(&v), Err(CheqError::StringTooLong(_))));
        let mut v = full();
        v["language"] = "en_US".into();
        assert!(matches!(parse(&v), Err(CheqError::BadLanguage(_))));
        let mut v = full();
        v["language"] = "pt-BR".into();
        assert_eq!(parse(&v).unwrap().language, "pt-BR");
        let mut v = full();
        v["inputs"]["parameters"][1]["parameter input"]["type"] = "password".into();
        assert!(matches!(parse(&v), Err(CheqError::BadInput { .. })));
        let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(MAX_PAYLOAD_BYTES));
        assert!(matches!(
            Cheq::parse(big.as_bytes()),
            Err(CheqError::Json(JsonError::TooLarge { .. }))
        ));
        assert!(matches!(
            Cheq::parse(br#"{"version":"1.0","version":"1.0"}"#),
            Err(CheqError::Json(JsonError::DuplicateMember(_)))
        ));
    }
}
