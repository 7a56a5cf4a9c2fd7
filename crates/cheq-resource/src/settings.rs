//! Each user's confirmation server and rules at the RS (PROTOCOL.md §17).
//!
//! A user (a CHEQ `subject`) may move to another CS and tighten the
//! operator's floors ([`crate::rules`]). Each change is itself an operation
//! of the RS, offered as two tools, `choose_confirmation_server` and
//! `set_confirmation_policy`, that are always confirmed, at the CS the user
//! has *now*: [`Users::move_to`] and [`Users::rule_change`] check the change
//! and make its CHEQ ([`Change::mint_request`]), which says what changes
//! (the new CS's origin and name; the rule before and after). Nothing is
//! written until that CS's accept: the operation ([`apply`]) then writes
//! the new settings and its result in one atomic write of the store
//! ([`cheq_store::rs::Settings::apply`]), only if the user's settings are
//! still those the change was asked against (their generation), so a change
//! confirmed late never undoes one confirmed since.
//!
//! So neither an agent nor anyone who knows a user's name can move them to
//! another host or loosen their rules: only the person's accept, at the
//! host they have, applies a change.

use crate::hosts::{HostRefusal, Prepared};
use crate::rules::{self, Floors, Needs, Rule, RuleError, RuleRecord, When};
use crate::tools::{InputKind, InputParam, Tool, ToolError};
use cheq_store::rs::{Applied, Settings, UserSettings};
use cheq_store::{Durability, StoreError};
use chrono::Duration;
use indexmap::IndexMap;
use serde_json::{json, Value};
use std::sync::Arc;

/// The tool that moves a user to another CS.
pub const CHOOSE: &str = "choose_confirmation_server";
/// The tool that sets one of a user's rules.
pub const SET_POLICY: &str = "set_confirmation_policy";
pub const CHOOSE_ID: &str = "5d1c7e2a-8f4b-4a3e-9c6d-2b7a1e0f3c84";
pub const SET_POLICY_ID: &str = "9e4b2c1d-3a5f-4e6b-8d7c-0f1a2b3c4d5e";

const ASSURANCES: &[(&str, &str)] = &[
    (
        "any",
        "Any confirmation of yours at your confirmation server.",
    ),
    ("passkey", "A confirmation bound to your passkey."),
];

/// The signature of `choose_confirmation_server`.
pub fn choose_tool() -> Tool {
    Tool {
        tool_id: CHOOSE_ID,
        name: CHOOSE,
        description: "Move the user to another confirmation server: where they confirm \
                      from then on. The user confirms the move at the server they use now.",
        inputs: vec![InputParam {
            id: "confirmation_server",
            name: "confirmation_server",
            description: "The origin of the confirmation server, like https://confirm.example.",
            kind: InputKind::String,
            required: true,
            max_len: 200,
        }],
        outputs: vec![
            ("status", "Change status", "string"),
            ("message", "What happened", "string"),
        ],
        always_confirmed: true,
        fixed_confirmation: true,
    }
}

/// The signature of `set_confirmation_policy`.
pub fn policy_tool() -> Tool {
    Tool {
        tool_id: SET_POLICY_ID,
        name: SET_POLICY,
        description: "Set when one of the user's tools needs their confirmation. Rules may \
                      only be as strict as the operator's or stricter. The user confirms \
                      the change at their confirmation server.",
        inputs: vec![
            InputParam {
                id: "tool",
                name: "tool",
                description: "The tool's name, like book_flight.",
                kind: InputKind::String,
                required: true,
                max_len: 64,
            },
            InputParam {
                id: "above",
                name: "above",
                description: "Confirm when the tool's amount is above this number; or \"always\".",
                kind: InputKind::Threshold,
                required: true,
                max_len: 0,
            },
            InputParam {
                id: "assurance",
                name: "assurance",
                description:
                    "What a confirmation needs: any, or passkey (unchanged when not given).",
                kind: InputKind::Enum(ASSURANCES),
                required: false,
                max_len: 16,
            },
        ],
        outputs: vec![
            ("status", "Change status", "string"),
            ("message", "What happened", "string"),
        ],
        always_confirmed: true,
        fixed_confirmation: true,
    }
}

/// Whether `tool` is one of the two tools of this module.
pub fn is_settings_tool(tool: &str) -> bool {
    tool == CHOOSE || tool == SET_POLICY
}

/// A user's settings as the RS reads them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UserChoice {
    /// The issuer of the CS they chose; `None`: the RS's default.
    pub cs: Option<String>,
    /// Their own rules, each within its floor.
    pub rules: Vec<Rule>,
    /// The stored generation (0: never changed).
    pub generation: u64,
}

/// A change checked and ready to be confirmed.
#[derive(Debug, Clone)]
pub struct Change {
    /// The CS the user has now, where the change is confirmed (`None`: the
    /// default).
    pub confirm_at: Option<String>,
    operation_name: &'static str,
    parameters: Vec<Value>,
    /// What the accept applies.
    action: Value,
    /// Whether the accept must be bound to the user's passkey (§14): when
    /// any rule in force for them asks for one, a change of their CS or
    /// rules does too, or a password alone would undo it.
    passkey: bool,
}

/// Why a change is refused before anything is minted.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error("{0}")]
    Rule(#[from] RuleError),
    #[error("{0}")]
    Host(#[from] HostRefusal),
    #[error("{0}")]
    Input(#[from] ToolError),
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// Each user's settings, read from the store and checked against the
/// floors and the tools.
pub struct Users {
    store: Arc<dyn Settings>,
    floors: Floors,
    catalogue: Vec<Tool>,
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Users")
            .field("floors", &self.floors)
            .finish_non_exhaustive()
    }
}

impl Users {
    /// The settings kept in `store`, under `floors`, for `catalogue`.
    pub fn new(store: Arc<dyn Settings>, floors: Floors, catalogue: Vec<Tool>) -> Self {
        Users {
            store,
            floors,
            catalogue,
        }
    }

    /// The operator's floors.
    pub fn floors(&self) -> &Floors {
        &self.floors
    }

    /// The settings of `subject`. Blocks on the store.
    pub fn of(&self, subject: &str) -> Result<UserChoice, StoreError> {
        Ok(match self.store.get(subject)? {
            None => UserChoice::default(),
            Some(stored) => UserChoice {
                cs: stored.cs,
                // A rule the floors no longer allow (the operator raised
                // one since) gives way to the floor.
                rules: rules::read_user_rules(&stored.rules, &self.catalogue)
                    .into_iter()
                    .filter(|rule| match self.floors.check(rule) {
                        Ok(()) => true,
                        Err(e) => {
                            log::info!("a user's stored rule gives way to the floor: {e}");
                            false
                        }
                    })
                    .collect(),
                generation: stored.generation,
            },
        })
    }

    /// The rule in force for `tool` for a user with `choice`; `None`: the
    /// tool needs no confirmation.
    pub fn in_force<'a>(&'a self, choice: &'a UserChoice, tool: &str) -> Option<&'a Rule> {
        self.floors.in_force(&choice.rules, tool)
    }

    /// A move of the user with `choice` to the CS `to` (checked by
    /// `Hosts::prepare`): refused when it is theirs already, or when their
    /// rules need a passkey it does not offer.
    pub fn move_to(
        &self,
        subject: &str,
        choice: &UserChoice,
        current: &str,
        to: &Prepared,
    ) -> Result<Change, ChangeError> {
        if current == to.origin {
            return Err(HostRefusal::Already(to.origin.clone()).into());
        }
        if !to.passkeys && self.floors.any_passkey(&choice.rules, &self.catalogue) {
            return Err(HostRefusal::NoPasskeys(to.origin.clone()).into());
        }
        let settings = UserSettings {
            cs: (!to.is_default).then(|| to.origin.clone()),
            rules: rules::user_rules_json(&choice.rules),
            generation: 0,
        };
        Ok(Change {
            passkey: self.floors.any_passkey(&choice.rules, &self.catalogue),
            confirm_at: choice.cs.clone(),
            operation_name: "Change your confirmation server",
            parameters: vec![
                json!({"parameter name": "new confirmation server",
                       "parameter description": "Where you will confirm from now on",
                       "parameter value": to.origin}),
                json!({"parameter name": "its name",
                       "parameter description": "As that server names itself",
                       "parameter value": to.name}),
                json!({"parameter name": "confirmation server now",
                       "parameter description": "Where you confirm until this change",
                       "parameter value": current}),
            ],
            action: action(
                CHOOSE,
                subject,
                choice.generation,
                &settings,
                json!({"confirmation_server": to.origin}),
                format!(
                    "Your confirmation server is now {} ({}).",
                    to.name, to.origin
                ),
            ),
        })
    }

    /// A change of one of the user's rules, from the inputs of
    /// `set_confirmation_policy`: refused when it names no tool that takes
    /// a rule, would loosen the floor, or needs a passkey their CS does not
    /// offer (`cs_lacks_passkeys`).
    pub fn rule_change(
        &self,
        subject: &str,
        choice: &UserChoice,
        inputs: &IndexMap<String, Value>,
        cs_lacks_passkeys: bool,
    ) -> Result<Change, ChangeError> {
        let tool_name = inputs.get("tool").and_then(Value::as_str).unwrap_or("");
        let before = self.in_force(choice, tool_name).cloned();
        let needs = match inputs.get("assurance").and_then(Value::as_str) {
            Some(word) => Needs::parse(word).ok_or_else(|| ToolError::BadParameter {
                name: "assurance".into(),
                message: "must be any or passkey".into(),
            })?,
            None => before.as_ref().map(|r| r.needs).unwrap_or_default(),
        };
        let above = match inputs.get("above") {
            Some(Value::String(s)) if s == "always" => None,
            Some(v) => Some(v.as_f64().ok_or_else(|| ToolError::BadParameter {
                name: "above".into(),
                message: "must be a number from 0, or \"always\"".into(),
            })?),
            None => None,
        };
        let rule = Rule::from_record(
            &RuleRecord {
                tool: tool_name.to_owned(),
                param: None,
                above,
                assurance: needs,
            },
            &self.catalogue,
        )?;
        self.floors.check(&rule)?;
        if rule.needs == Needs::Passkey && cs_lacks_passkeys {
            return Err(HostRefusal::NoPasskeys(
                choice
                    .cs
                    .clone()
                    .unwrap_or_else(|| "your confirmation server".into()),
            )
            .into());
        }
        let mut rules: Vec<Rule> = choice
            .rules
            .iter()
            .filter(|r| r.tool != rule.tool)
            .cloned()
            .collect();
        rules.push(rule.clone());
        let settings = UserSettings {
            cs: choice.cs.clone(),
            rules: rules::user_rules_json(&rules),
            generation: 0,
        };
        let before_text = match &before {
            Some(r) if self.floors.floor(&r.tool) == Some(r) => {
                format!("{r} (the operator's rule)")
            }
            Some(r) => r.to_string(),
            None => "never".to_owned(),
        };
        let record = rule.record();
        Ok(Change {
            passkey: self.floors.any_passkey(&choice.rules, &self.catalogue),
            confirm_at: choice.cs.clone(),
            operation_name: "Change when you confirm",
            parameters: vec![
                json!({"parameter name": "tool", "parameter value": rule.tool}),
                json!({"parameter name": "confirm now",
                       "parameter description": "When this tool needs your confirmation until this change",
                       "parameter value": before_text}),
                json!({"parameter name": "confirm after",
                       "parameter description": "When it will need your confirmation",
                       "parameter value": rule.to_string()}),
            ],
            action: action(
                SET_POLICY,
                subject,
                choice.generation,
                &settings,
                json!({"tool": record.tool, "above": record.above, "param": record.param, "assurance": needs.as_str()}),
                format!(
                    "{} now needs your confirmation {}.",
                    rule.tool,
                    rule_phrase(&rule)
                ),
            ),
        })
    }
}

fn rule_phrase(rule: &Rule) -> String {
    match &rule.when {
        When::Always => format!(
            "on every call{}",
            if rule.needs == Needs::Passkey {
                ", with a passkey"
            } else {
                ""
            }
        ),
        When::Above { .. } => rule.to_string(),
    }
}

fn action(
    tool: &str,
    subject: &str,
    expected: u64,
    settings: &UserSettings,
    inputs: Value,
    done: String,
) -> Value {
    json!({
        "tool": tool,
        "inputs": inputs,
        "subject": subject,
        "expected": expected,
        "settings": {"cs": settings.cs, "rules": settings.rules},
        "done": done,
    })
}

impl Change {
    /// The CHEQ that asks for this change, minted at the user's CS now.
    pub fn mint_request(
        self,
        base_url: &str,
        tool_id: &str,
        subject: &str,
        ttl: Duration,
    ) -> crate::cheq_rs::MintRequest {
        crate::cheq_rs::MintRequest {
            operation: format!("{base_url}/tools/{tool_id}:invoke"),
            operation_name: self.operation_name.to_owned(),
            parameters: self.parameters,
            subject: subject.to_owned(),
            language: Some("en".to_owned()),
            ttl,
            assurance: self.passkey.then_some(cheq_core::cheq::Assurance::Passkey),
            action: self.action,
            confirmation_server: self.confirm_at,
        }
    }
}

/// The outputs of a change's result.
fn outputs(status: &str, message: &str) -> Value {
    json!({"output_parameters": [
        {"name": "status", "value": status},
        {"name": "message", "value": message},
    ]})
}

/// Applies the change `action` (made by [`Change::mint_request`]) once per
/// `key`, as the module docs say: its result, and whether it was applied
/// now.
pub fn apply(
    store: &dyn Settings,
    key: &str,
    action: &Value,
    durability: Durability,
) -> Result<(Value, bool), String> {
    let unreadable = || "a stored change cannot be read".to_owned();
    let subject = action["subject"].as_str().ok_or_else(unreadable)?;
    let expected = action["expected"].as_u64().ok_or_else(unreadable)?;
    let settings = UserSettings {
        cs: action["settings"]["cs"].as_str().map(str::to_owned),
        rules: action["settings"]["rules"].clone(),
        generation: 0,
    };
    let done = outputs("DONE", action["done"].as_str().unwrap_or("Changed."));
    match store
        .apply(subject, key, expected, &settings, &done, durability)
        .map_err(|e| e.to_string())?
    {
        Applied::Fresh => Ok((done, true)),
        Applied::Existing(result) => Ok((result, false)),
        Applied::Stale(_) => Ok((
            outputs(
                "FAILED",
                "Your settings changed after this change was asked for; nothing was changed.",
            ),
            false,
        )),
    }
}
