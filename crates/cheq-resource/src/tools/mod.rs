//! The reference RS's A2T tools (draft-rosenberg-aiproto-a2t-00 §6–§7)
//! and what their CHEQs show (PROTOCOL.md §1, §4, §8).
//!
//! - `book_flight` (`flight_number`, `flight_date`, `cabin_class`, `price_usd`):
//!   needs confirmation as the rule in force for its user says
//!   ([`crate::rules`]; the default floor: `price_usd` above 100).
//! - `transfer_funds` (optional `payee`, `memo`): always needs confirmation; the CHEQ asks
//!   the user, outside the agent's reach, for `from account`, `to account` and
//!   `amount` (§8). Its result says only whether the transfer was made.
//! - `choose_confirmation_server` and `set_confirmation_policy`: a user's
//!   own CS and rules (§17, [`crate::settings`]); always confirmed.
//!
//! Invocations are validated against the tool's signature; errors are A2T-style
//! 4xx JSON. Execution ([`DemoTools`], in `run`) is idempotent per key, as
//! [`Operation`](crate::cheq_rs::Operation) requires.

mod run;

pub use run::DemoTools;

use super::cheq_rs::MintRequest;
use crate::rules::Needs;
use chrono::{Duration, NaiveDate};
use indexmap::IndexMap;
use serde_json::{json, Map, Value};

/// Why an A2T tool call was refused or failed. No HTTP here: the front
/// end maps each to a status (`resource::error`).
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("no tool \"{0}\"")]
    UnknownTool(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("input parameter \"{name}\": {message}")]
    BadParameter { name: String, message: String },
    #[error("the tool failed: {0}")]
    Failed(String),
}

/// A tool input type (A2T §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    String,
    /// A string holding an ISO 8601 calendar date (`YYYY-MM-DD`).
    Date,
    Int {
        max: i64,
    },
    Enum(&'static [(&'static str, &'static str)]),
    /// A threshold: a number from 0, or the word `always` (a string in the
    /// signature, so that every client can send it; a JSON number is taken
    /// too).
    Threshold,
}

/// One input parameter of a tool signature.
#[derive(Debug, Clone)]
pub struct InputParam {
    pub id: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub kind: InputKind,
    pub required: bool,
    pub max_len: usize,
}

/// A tool signature.
#[derive(Debug, Clone)]
pub struct Tool {
    pub tool_id: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub inputs: Vec<InputParam>,
    pub outputs: Vec<(&'static str, &'static str, &'static str)>,
    /// Asks its user for values (§8), so is confirmed on every call: a rule
    /// may ask for a passkey, never set a threshold.
    pub always_confirmed: bool,
    /// Always confirmed, and no rule can be set on it (the tools that
    /// change a user's CS and rules, §17).
    pub fixed_confirmation: bool,
}

const CABIN_CLASSES: &[(&str, &str)] = &[
    (
        "ECONOMY",
        "Economy class, the least expensive cabin class. Also known as coach.",
    ),
    (
        "PREMIUM_ECONOMY",
        "Premium economy class, the second seat tier. More legroom.",
    ),
    (
        "BUSINESS",
        "Business class, the next to top seat tier. Offers lie-down seating.",
    ),
    (
        "FIRST",
        "The top tier. Lie down seating, luxury meal service, lounge access.",
    ),
];

pub const BOOK_FLIGHT_ID: &str = "6b3f5a0e-2d4c-4b7e-9a61-0f1e2d3c4b5a";
pub const TRANSFER_FUNDS_ID: &str = "c0a8e1f2-7b3d-4e5f-8a9b-1c2d3e4f5a6b";

/// The demo tools.
pub fn catalogue() -> Vec<Tool> {
    vec![
        Tool {
            tool_id: BOOK_FLIGHT_ID,
            name: "book_flight",
            description: "Book a seat on a flight for the user. Bookings above the \
                          confirmation threshold are confirmed by the user first.",
            inputs: vec![
                InputParam {
                    id: "flight_number",
                    name: "flight_number",
                    description: "The flight number, for example UA23.",
                    kind: InputKind::String,
                    required: true,
                    max_len: 8,
                },
                InputParam {
                    id: "flight_date",
                    name: "flight_date",
                    description: "The date of the flight, YYYY-MM-DD.",
                    kind: InputKind::Date,
                    required: true,
                    max_len: 10,
                },
                InputParam {
                    id: "cabin_class",
                    name: "cabin_class",
                    description: "The cabin class for the flight reservation.",
                    kind: InputKind::Enum(CABIN_CLASSES),
                    required: true,
                    max_len: 32,
                },
                InputParam {
                    id: "price_usd",
                    name: "price_usd",
                    description: "The fare in whole US dollars.",
                    kind: InputKind::Int { max: 100_000 },
                    required: true,
                    max_len: 0,
                },
            ],
            outputs: vec![
                ("booking_reference", "Booking reference", "string"),
                ("status", "Booking status", "string"),
            ],
            always_confirmed: false,
            fixed_confirmation: false,
        },
        Tool {
            tool_id: TRANSFER_FUNDS_ID,
            name: "transfer_funds",
            description: "Transfer money between the user's accounts. The user enters \
                          the accounts and the amount when confirming; the agent never \
                          sees them.",
            inputs: vec![
                InputParam {
                    id: "payee",
                    name: "payee",
                    description: "Who is paid, as the agent names them (shown to the user).",
                    kind: InputKind::String,
                    required: false,
                    max_len: 140,
                },
                InputParam {
                    id: "memo",
                    name: "memo",
                    description: "A short note shown to the user with the request.",
                    kind: InputKind::String,
                    required: false,
                    max_len: 140,
                },
            ],
            outputs: vec![
                ("status", "Transfer status", "string"),
                ("message", "What happened", "string"),
            ],
            always_confirmed: true,
            fixed_confirmation: false,
        },
        crate::settings::choose_tool(),
        crate::settings::policy_tool(),
    ]
}

impl Tool {
    /// The A2T ToolSignature (§6.1).
    pub fn signature(&self) -> Value {
        let inputs: Vec<Value> = self
            .inputs
            .iter()
            .map(|p| {
                let mut o = json!({
                    "id": p.id,
                    "name": p.name,
                    "description": p.description,
                    "required": p.required,
                });
                match p.kind {
                    InputKind::String | InputKind::Threshold => o["type"] = "string".into(),
                    InputKind::Date => {
                        o["type"] = "string".into();
                        o["format"] = "date".into();
                    }
                    InputKind::Int { max } => {
                        o["type"] = "int".into();
                        o["max"] = max.into();
                    }
                    InputKind::Enum(values) => {
                        o["type"] = "enum".into();
                        o["allowed-values"] = values
                            .iter()
                            .map(|(n, d)| json!({"name": n, "description": d}))
                            .collect();
                    }
                }
                o
            })
            .collect();
        let outputs: Vec<Value> = self
            .outputs
            .iter()
            .map(|(id, name, ty)| json!({"id": id, "name": name, "type": ty}))
            .collect();
        json!({
            "toolId": self.tool_id,
            "name": self.name,
            "description": self.description,
            "version": "1",
            "currentVersion": "1",
            "tags": ["demo", "cheq"],
            "input_parameters": inputs,
            "output_parameters": outputs,
        })
    }

    /// Validates an A2T invocation object (§7) and returns the inputs by id.
    pub fn parse_invocation(&self, body: &Value) -> Result<IndexMap<String, Value>, ToolError> {
        let obj = body
            .as_object()
            .ok_or_else(|| ToolError::BadRequest("the invocation must be a JSON object".into()))?;
        if let Some(name) = obj.get("name") {
            if name.as_str() != Some(self.name) {
                return Err(ToolError::BadRequest(format!(
                    "\"name\" must be \"{}\"",
                    self.name
                )));
            }
        }
        let given: &[Value] = match obj.get("input_parameters") {
            None => &[],
            Some(Value::Array(list)) => list,
            Some(_) => {
                return Err(ToolError::BadRequest(
                    "\"input_parameters\" must be an array".into(),
                ))
            }
        };
        let mut inputs = IndexMap::new();
        for item in given {
            let (name, value) = match item {
                Value::Object(m) => match (m.get("name").and_then(Value::as_str), m.get("value")) {
                    (Some(n), Some(v)) => (n, v),
                    _ => {
                        return Err(ToolError::BadRequest(
                            "each input parameter needs \"name\" and \"value\"".into(),
                        ))
                    }
                },
                _ => {
                    return Err(ToolError::BadRequest(
                        "each input parameter must be an object".into(),
                    ))
                }
            };
            let param = self
                .inputs
                .iter()
                .find(|p| p.name == name || p.id == name)
                .ok_or_else(|| ToolError::BadParameter {
                    name: name.to_owned(),
                    message: format!("tool {} has no such input", self.name),
                })?;
            if inputs.contains_key(param.id) {
                return Err(ToolError::BadParameter {
                    name: name.to_owned(),
                    message: "given twice".into(),
                });
            }
            inputs.insert(param.id.to_owned(), check_value(param, value)?);
        }
        for p in &self.inputs {
            if p.required && !inputs.contains_key(p.id) {
                return Err(ToolError::BadParameter {
                    name: p.name.to_owned(),
                    message: "is required".into(),
                });
            }
        }
        Ok(inputs)
    }
}

fn check_value(p: &InputParam, value: &Value) -> Result<Value, ToolError> {
    let bad = |message: String| ToolError::BadParameter {
        name: p.name.to_owned(),
        message,
    };
    match p.kind {
        InputKind::Threshold => match value {
            Value::Number(n) if n.as_f64().is_some_and(|n| n >= 0.0) => Ok(value.clone()),
            Value::String(s) if s == "always" => Ok(value.clone()),
            Value::String(s) => match s.trim().parse::<f64>() {
                Ok(n) if n.is_finite() && n >= 0.0 => Ok(Value::from(n)),
                _ => Err(bad("must be a number from 0, or \"always\"".into())),
            },
            _ => Err(bad("must be a number from 0, or \"always\"".into())),
        },
        InputKind::Int { max } => {
            let n = value
                .as_i64()
                .ok_or_else(|| bad("must be an integer".into()))?;
            if !(0..=max).contains(&n) {
                return Err(bad(format!("must be from 0 to {max}")));
            }
            Ok(Value::from(n))
        }
        _ => {
            let s = value
                .as_str()
                .ok_or_else(|| bad("must be a string".into()))?;
            if s.chars().count() > p.max_len {
                return Err(bad(format!("is longer than {} characters", p.max_len)));
            }
            if s.chars().any(char::is_control) {
                return Err(bad("contains control characters".into()));
            }
            match p.kind {
                InputKind::Date => {
                    NaiveDate::parse_from_str(s, "%Y-%m-%d")
                        .map_err(|_| bad("must be a date, YYYY-MM-DD".into()))?;
                }
                InputKind::Enum(values) if !values.iter().any(|(n, _)| *n == s) => {
                    let names: Vec<&str> = values.iter().map(|(n, _)| *n).collect();
                    return Err(bad(format!("must be one of {}", names.join(", "))));
                }
                _ if p.id == "flight_number" => {
                    let ok = s.len() >= 3
                        && s.chars()
                            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
                    if !ok {
                        return Err(bad(
                            "must be 3 to 8 capital letters and digits, like UA23".into()
                        ));
                    }
                }
                _ => {}
            }
            Ok(Value::from(s))
        }
    }
}

/// Finds a tool by toolId or name.
pub fn find(catalogue: &[Tool], id_or_name: &str) -> Option<Tool> {
    catalogue
        .iter()
        .find(|t| t.tool_id == id_or_name || t.name == id_or_name)
        .cloned()
}

fn value_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// The CHEQ to mint for an invocation that needs confirmation.
pub fn cheq_request(
    base_url: &str,
    tool: &Tool,
    inputs: &IndexMap<String, Value>,
    subject: &str,
    ttl: Duration,
    needs: Needs,
) -> MintRequest {
    let operation = format!("{base_url}/tools/{}:invoke", tool.tool_id);
    let (operation_name, parameters) = match tool.name {
        "book_flight" => (
            "Book a flight",
            vec![
                json!({"parameter name": "flight number", "parameter value": value_text(inputs.get("flight_number"))}),
                json!({"parameter name": "flight date", "parameter value": value_text(inputs.get("flight_date"))}),
                json!({"parameter name": "cabin class", "parameter value": value_text(inputs.get("cabin_class"))}),
                json!({"parameter name": "price", "parameter description": "in US dollars", "parameter value": value_text(inputs.get("price_usd")), "parameter unit": "USD"}),
            ],
        ),
        _ => {
            let mut p = Vec::new();
            if let Some(payee) = inputs.get("payee") {
                p.push(json!({"parameter name": "payee", "parameter description": "Who is paid, as named by the agent", "parameter value": value_text(Some(payee))}));
            }
            if let Some(memo) = inputs.get("memo") {
                p.push(json!({"parameter name": "memo", "parameter description": "Note from the agent", "parameter value": value_text(Some(memo))}));
            }
            p.push(json!({"parameter name": "from account", "parameter description": "The account to take the money from",
                "parameter input": {"type": "digits", "required": true, "max length": 20, "pattern": "^[0-9]{6,20}$", "sensitive": true}}));
            p.push(json!({"parameter name": "to account", "parameter description": "The account to pay the money into",
                "parameter input": {"type": "digits", "required": true, "max length": 20, "pattern": "^[0-9]{6,20}$", "sensitive": true}}));
            p.push(json!({"parameter name": "amount", "parameter description": "The amount to transfer, in US dollars", "parameter unit": "USD",
                "parameter input": {"type": "amount", "required": true, "max length": 16, "pattern": "^[0-9]{1,12}(\\.[0-9]{1,2})?$"}}));
            ("Transfer funds", p)
        }
    };
    let action: Map<String, Value> = inputs.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    MintRequest {
        operation,
        operation_name: operation_name.to_owned(),
        parameters,
        subject: subject.to_owned(),
        language: Some("en".to_owned()),
        assurance: (needs == Needs::Passkey).then_some(cheq_core::cheq::Assurance::Passkey),
        ttl,
        action: json!({"tool": tool.name, "inputs": action}),
        confirmation_server: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §4: a view reads a currency only from `parameter unit`, so the CHEQ
    /// says which currency its money parameters are in.
    #[test]
    fn money_parameters_carry_their_currency() {
        let tools = catalogue();
        let flight = find(&tools, "book_flight").unwrap();
        let inputs: IndexMap<String, Value> = [
            ("flight_number", json!("UA23")),
            ("flight_date", json!("2026-12-08")),
            ("cabin_class", json!("BUSINESS")),
            ("price_usd", json!(1200)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let req = cheq_request(
            "https://rs.example",
            &flight,
            &inputs,
            "alice",
            Duration::minutes(5),
            Needs::Any,
        );
        assert_eq!(req.assurance, None);
        let price = req
            .parameters
            .iter()
            .find(|p| p["parameter name"] == "price")
            .unwrap();
        assert_eq!(price["parameter value"], "1200");
        assert_eq!(price["parameter unit"], "USD");
        for p in req
            .parameters
            .iter()
            .filter(|p| p["parameter name"] != "price")
        {
            assert!(p.get("parameter unit").is_none(), "{p}");
        }

        let transfer = find(&tools, "transfer_funds").unwrap();
        let req = cheq_request(
            "https://rs.example",
            &transfer,
            &IndexMap::new(),
            "alice",
            Duration::minutes(5),
            Needs::Passkey,
        );
        assert_eq!(req.assurance, Some(cheq_core::cheq::Assurance::Passkey));
        let amount = req
            .parameters
            .iter()
            .find(|p| p["parameter name"] == "amount")
            .unwrap();
        assert_eq!(amount["parameter unit"], "USD");
    }
}
