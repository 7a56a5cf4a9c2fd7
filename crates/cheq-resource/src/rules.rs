//! When a tool needs its user's confirmation (PROTOCOL.md §17): rules,
//! the operator's floors and each user's own.
//!
//! A [`Rule`] names a tool and when it needs confirmation: [`When::Always`],
//! or above a threshold on one numeric parameter; and the assurance the
//! decision needs ([`Needs::Any`], or [`Needs::Passkey`], §14). The
//! operator's rules are floors ([`Floors`], from `[[policy.rules]]` and the
//! older `[policy]` keys); a user's rule may only tighten the floor of its
//! tool ([`Rule::check_against`]): `always` instead of a threshold, a lower
//! threshold, a passkey instead of any assurance. A tool with no floor
//! needs no confirmation until its user gives it a rule. The rule in force
//! for a user is theirs when they set one, else the floor
//! ([`Floors::in_force`]).
//!
//! A rule is kept (in the file, and in the store for a user) as a flat
//! [`RuleRecord`]; [`Rule::from_record`] checks one against the tools.

use crate::tools::{InputKind, Tool};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// The assurance a rule asks of the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Needs {
    /// Any decision of the user at their CS.
    #[default]
    Any,
    /// A decision bound to the user's passkey (§14).
    Passkey,
}

impl Needs {
    /// The word of the file and of the tools.
    pub fn as_str(self) -> &'static str {
        match self {
            Needs::Any => "any",
            Needs::Passkey => "passkey",
        }
    }

    /// Reads `any` or `passkey`.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "any" => Some(Needs::Any),
            "passkey" => Some(Needs::Passkey),
            _ => None,
        }
    }
}

/// When a rule asks for confirmation.
#[derive(Debug, Clone, PartialEq)]
pub enum When {
    /// On every call.
    Always,
    /// When the numeric parameter `param` is above `above`.
    Above { param: String, above: f64 },
}

/// A rule: a tool, when it needs confirmation and what assurance.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The tool's name.
    pub tool: String,
    pub when: When,
    pub needs: Needs,
}

/// A rule as the file and the store keep it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleRecord {
    pub tool: String,
    /// With `above`: the numeric parameter compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// Confirmation above this value of `param`; without it, always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<f64>,
    #[serde(default)]
    pub assurance: Needs,
}

/// Why a rule cannot be taken.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuleError {
    #[error("there is no tool \"{0}\"")]
    UnknownTool(String),
    #[error("the tool {0} is always confirmed; its rule cannot be set")]
    Fixed(String),
    #[error("the tool {tool} has no numeric parameter \"{param}\"")]
    NotNumeric { tool: String, param: String },
    #[error("the tool {0} has no numeric parameter to set a threshold on")]
    NoThreshold(String),
    #[error("\"param\" needs \"above\" (without both, the rule is \"always\")")]
    ParamWithoutAbove,
    #[error("the threshold must be a number from 0 to 1e15")]
    BadThreshold,
    #[error("a second rule for the tool {0}")]
    Twice(String),
    /// A user's rule that would loosen the operator's floor.
    #[error("this would loosen the floor the operator set for {tool} ({floor}): {why}")]
    Loosens {
        tool: String,
        floor: String,
        why: &'static str,
    },
}

/// The largest threshold taken (beyond it, a float no longer holds every
/// whole number of cents).
const MAX_THRESHOLD: f64 = 1e15;

impl Rule {
    /// Checks `record` against the tools of `catalogue`.
    pub fn from_record(record: &RuleRecord, catalogue: &[Tool]) -> Result<Rule, RuleError> {
        let tool = catalogue
            .iter()
            .find(|t| t.name == record.tool)
            .ok_or_else(|| RuleError::UnknownTool(record.tool.clone()))?;
        if tool.fixed_confirmation {
            return Err(RuleError::Fixed(tool.name.to_owned()));
        }
        let when = match (&record.param, record.above) {
            (None, None) => When::Always,
            (Some(_), None) => return Err(RuleError::ParamWithoutAbove),
            (param, Some(above)) => {
                if !above.is_finite() || !(0.0..=MAX_THRESHOLD).contains(&above) {
                    return Err(RuleError::BadThreshold);
                }
                let param = match param {
                    Some(p) => p.clone(),
                    None => threshold_param(tool)
                        .ok_or_else(|| RuleError::NoThreshold(tool.name.to_owned()))?
                        .to_owned(),
                };
                let numeric = tool
                    .inputs
                    .iter()
                    .any(|i| i.id == param && matches!(i.kind, InputKind::Int { .. }));
                if !numeric {
                    return Err(RuleError::NotNumeric {
                        tool: tool.name.to_owned(),
                        param,
                    });
                }
                When::Above { param, above }
            }
        };
        Ok(Rule {
            tool: tool.name.to_owned(),
            when,
            needs: record.assurance,
        })
    }

    /// The record the file and the store keep.
    pub fn record(&self) -> RuleRecord {
        let (param, above) = match &self.when {
            When::Always => (None, None),
            When::Above { param, above } => (Some(param.clone()), Some(*above)),
        };
        RuleRecord {
            tool: self.tool.clone(),
            param,
            above,
            assurance: self.needs,
        }
    }

    /// Whether a call with `inputs` needs confirmation under this rule (a
    /// threshold's parameter that is missing or not a number: it does).
    pub fn needs_confirmation(&self, inputs: &IndexMap<String, Value>) -> bool {
        match &self.when {
            When::Always => true,
            When::Above { param, above } => match inputs.get(param).and_then(Value::as_f64) {
                Some(value) => value > *above,
                None => true,
            },
        }
    }

    /// Refuses a user's rule that would loosen `floor` (the operator's
    /// rule for the same tool), naming the floor.
    pub fn check_against(&self, floor: &Rule) -> Result<(), RuleError> {
        let loosens = |why| RuleError::Loosens {
            tool: floor.tool.clone(),
            floor: floor.to_string(),
            why,
        };
        match (&floor.when, &self.when) {
            (_, When::Always) => {}
            (When::Always, When::Above { .. }) => {
                return Err(loosens("it is confirmed on every call"))
            }
            (When::Above { param: p, above: f }, When::Above { param: q, above: u }) => {
                if p != q {
                    return Err(loosens(
                        "a threshold can only be set on the floor's parameter",
                    ));
                }
                if u > f {
                    return Err(loosens("the threshold can only be lowered"));
                }
            }
        }
        if floor.needs == Needs::Passkey && self.needs != Needs::Passkey {
            return Err(loosens("it asks for a passkey"));
        }
        Ok(())
    }
}

/// The parameter a threshold of `tool` is on: its one numeric input.
pub fn threshold_param(tool: &Tool) -> Option<&'static str> {
    let mut numeric = tool
        .inputs
        .iter()
        .filter(|i| matches!(i.kind, InputKind::Int { .. }));
    match (numeric.next(), numeric.next()) {
        (Some(one), None) => Some(one.id),
        _ => None,
    }
}

/// A threshold as a person reads it: a whole number without a point.
pub fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < MAX_THRESHOLD {
        format!("{n:.0}")
    } else {
        n.to_string()
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.when {
            When::Always => f.write_str("always")?,
            When::Above { param, above } => {
                write!(f, "when {param} is above {}", number_text(*above))?
            }
        }
        match self.needs {
            Needs::Any => Ok(()),
            Needs::Passkey => f.write_str(", with a passkey"),
        }
    }
}

/// The operator's floors: at most one rule per tool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Floors {
    rules: Vec<Rule>,
}

impl Floors {
    /// The floors of `rules`, each checked against `catalogue`; the tools
    /// that are always confirmed (`fixed_confirmation`, or that ask the
    /// user for values) get `always` when no rule names them.
    pub fn new(records: &[RuleRecord], catalogue: &[Tool]) -> Result<Floors, RuleError> {
        let mut rules: Vec<Rule> = Vec::new();
        for record in records {
            let rule = Rule::from_record(record, catalogue)?;
            if rules.iter().any(|r| r.tool == rule.tool) {
                return Err(RuleError::Twice(rule.tool));
            }
            rules.push(rule);
        }
        for tool in catalogue.iter().filter(|t| t.always_confirmed) {
            match rules.iter_mut().find(|r| r.tool == tool.name) {
                // Asking the user for values needs a confirmation on every
                // call: a threshold cannot be set on such a tool.
                Some(rule) if rule.when != When::Always => {
                    return Err(RuleError::NoThreshold(tool.name.to_owned()))
                }
                Some(_) => {}
                None => rules.push(Rule {
                    tool: tool.name.to_owned(),
                    when: When::Always,
                    needs: Needs::Any,
                }),
            }
        }
        Ok(Floors { rules })
    }

    /// The floor of `tool`, if it has one.
    pub fn floor(&self, tool: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.tool == tool)
    }

    /// Every floor.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Checks a user's rule: known tool, and no looser than its floor.
    pub fn check(&self, rule: &Rule) -> Result<(), RuleError> {
        match self.floor(&rule.tool) {
            Some(floor) => rule.check_against(floor),
            None => Ok(()),
        }
    }

    /// The rule in force for `tool` given a user's `own` rules: theirs, else
    /// the floor; `None`: no confirmation.
    pub fn in_force<'a>(&'a self, own: &'a [Rule], tool: &str) -> Option<&'a Rule> {
        own.iter()
            .find(|r| r.tool == tool)
            .or_else(|| self.floor(tool))
    }

    /// Whether any rule in force, given `own`, asks for a passkey.
    pub fn any_passkey(&self, own: &[Rule], catalogue: &[Tool]) -> bool {
        catalogue.iter().any(|t| {
            self.in_force(own, t.name)
                .is_some_and(|r| r.needs == Needs::Passkey)
        })
    }
}

/// Reads a user's stored rules (the JSON array the store keeps), each
/// checked against the tools; a rule the tools no longer take is dropped
/// (the floor then applies), and said in the log.
pub fn read_user_rules(stored: &Value, catalogue: &[Tool]) -> Vec<Rule> {
    let records: Vec<RuleRecord> = match serde_json::from_value(stored.clone()) {
        Ok(records) => records,
        Err(e) => {
            log::warn!("a user's stored rules cannot be read ({e}); the floors apply");
            return Vec::new();
        }
    };
    records
        .iter()
        .filter_map(|r| match Rule::from_record(r, catalogue) {
            Ok(rule) => Some(rule),
            Err(e) => {
                log::warn!("a user's stored rule is dropped ({e}); the floor applies");
                None
            }
        })
        .collect()
}

/// The JSON array a user's `rules` are stored as.
pub fn user_rules_json(rules: &[Rule]) -> Value {
    Value::Array(
        rules
            .iter()
            .filter_map(|r| serde_json::to_value(r.record()).ok())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::catalogue;
    use serde_json::json;

    fn rule(tool: &str, above: Option<f64>, needs: Needs) -> Rule {
        Rule::from_record(
            &RuleRecord {
                tool: tool.into(),
                param: None,
                above,
                assurance: needs,
            },
            &catalogue(),
        )
        .unwrap()
    }

    fn floors() -> Floors {
        Floors::new(
            &[RuleRecord {
                tool: "book_flight".into(),
                param: Some("price_usd".into()),
                above: Some(100.0),
                assurance: Needs::Any,
            }],
            &catalogue(),
        )
        .unwrap()
    }

    #[test]
    fn a_user_may_only_tighten_a_floor() {
        let f = floors();
        for ok in [
            rule("book_flight", Some(50.0), Needs::Any),
            rule("book_flight", Some(100.0), Needs::Any),
            rule("book_flight", None, Needs::Any),
            rule("book_flight", Some(100.0), Needs::Passkey),
            rule("transfer_funds", None, Needs::Passkey),
        ] {
            f.check(&ok).unwrap();
        }
        let e = f
            .check(&rule("book_flight", Some(500.0), Needs::Any))
            .unwrap_err();
        assert!(e.to_string().contains("when price_usd is above 100"), "{e}");
        let strict = Floors::new(
            &[RuleRecord {
                tool: "book_flight".into(),
                param: None,
                above: None,
                assurance: Needs::Passkey,
            }],
            &catalogue(),
        )
        .unwrap();
        assert!(matches!(
            strict.check(&rule("book_flight", Some(10.0), Needs::Passkey)),
            Err(RuleError::Loosens { .. })
        ));
        let e = strict
            .check(&rule("book_flight", None, Needs::Any))
            .unwrap_err();
        assert!(e.to_string().contains("passkey"), "{e}");
    }

    #[test]
    fn a_tool_asking_for_values_is_always_confirmed() {
        let f = floors();
        assert_eq!(f.floor("transfer_funds").unwrap().when, When::Always);
        let e = Rule::from_record(
            &RuleRecord {
                tool: "transfer_funds".into(),
                param: None,
                above: Some(10.0),
                assurance: Needs::Any,
            },
            &catalogue(),
        )
        .unwrap_err();
        assert_eq!(e, RuleError::NoThreshold("transfer_funds".into()));
        let e = Rule::from_record(
            &RuleRecord {
                tool: "choose_confirmation_server".into(),
                param: None,
                above: None,
                assurance: Needs::Passkey,
            },
            &catalogue(),
        )
        .unwrap_err();
        assert!(matches!(e, RuleError::Fixed(_)), "{e}");
    }

    #[test]
    fn records_are_checked() {
        let cat = catalogue();
        let bad = |param: Option<&str>, above: Option<f64>, tool: &str| {
            Rule::from_record(
                &RuleRecord {
                    tool: tool.into(),
                    param: param.map(Into::into),
                    above,
                    assurance: Needs::Any,
                },
                &cat,
            )
            .unwrap_err()
        };
        assert!(matches!(bad(None, None, "nope"), RuleError::UnknownTool(_)));
        assert!(matches!(
            bad(Some("cabin_class"), Some(1.0), "book_flight"),
            RuleError::NotNumeric { .. }
        ));
        assert_eq!(
            bad(Some("price_usd"), None, "book_flight"),
            RuleError::ParamWithoutAbove
        );
        assert_eq!(
            bad(None, Some(-1.0), "book_flight"),
            RuleError::BadThreshold
        );
        assert_eq!(
            bad(None, Some(f64::NAN), "book_flight"),
            RuleError::BadThreshold
        );
        let twice = RuleRecord {
            tool: "book_flight".into(),
            param: None,
            above: None,
            assurance: Needs::Any,
        };
        assert_eq!(
            Floors::new(&[twice.clone(), twice], &cat).unwrap_err(),
            RuleError::Twice("book_flight".into())
        );
    }

    #[test]
    fn the_users_rule_wins_over_the_floor_and_decides() {
        let f = floors();
        let own = vec![rule("book_flight", Some(50.0), Needs::Any)];
        let inputs = |price: i64| -> IndexMap<String, Value> {
            [("price_usd".to_owned(), json!(price))]
                .into_iter()
                .collect()
        };
        let floor = f.in_force(&[], "book_flight").unwrap();
        assert!(!floor.needs_confirmation(&inputs(60)));
        assert!(floor.needs_confirmation(&inputs(101)));
        let mine = f.in_force(&own, "book_flight").unwrap();
        assert!(mine.needs_confirmation(&inputs(60)));
        assert!(!mine.needs_confirmation(&inputs(50)));
        assert!(mine.needs_confirmation(&IndexMap::new()));
        // Kept and read back as the store keeps it.
        let stored = user_rules_json(&own);
        assert_eq!(read_user_rules(&stored, &catalogue()), own);
        assert_eq!(read_user_rules(&json!({"x": 1}), &catalogue()), vec![]);
        assert_eq!(mine.to_string(), "when price_usd is above 50");
        assert_eq!(number_text(12.5), "12.5");
    }
}
