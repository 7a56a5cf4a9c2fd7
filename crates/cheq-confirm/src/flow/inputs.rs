//! Values the user types (PROTOCOL.md §8): how the front ends hand them in,
//! and their validation against each parameter's `parameter input`.

use cheq_core::cheq::{Decision, InputType};
use cheq_core::sign::VerifiedCheq;
use indexmap::IndexMap;

/// Values the user typed (§8). Its `Debug` shows no value.
#[derive(Clone)]
pub enum Collected {
    /// By parameter name (the raw API).
    ByName(IndexMap<String, String>),
    /// By parameter position (the HTML form, whose field names must not
    /// depend on text that may hold hidden characters).
    ByIndex(Vec<(usize, String)>),
}

impl std::fmt::Debug for Collected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Collected::ByName(m) => {
                write!(f, "ByName({:?} = <redacted>)", m.keys().collect::<Vec<_>>())
            }
            Collected::ByIndex(v) => write!(
                f,
                "ByIndex({:?} = <redacted>)",
                v.iter().map(|(i, _)| i).collect::<Vec<_>>()
            ),
        }
    }
}

impl Collected {
    /// The values by parameter name.
    pub fn by_name(&self, verified: &VerifiedCheq) -> IndexMap<String, String> {
        match self {
            Collected::ByName(m) => m.clone(),
            Collected::ByIndex(v) => v
                .iter()
                .filter_map(|(i, value)| {
                    verified
                        .cheq()
                        .parameters
                        .get(*i)
                        .map(|p| (p.name.clone(), value.clone()))
                })
                .collect(),
        }
    }
}

/// What is wrong with a decision the user asked for: the page (or the API
/// answer) lists each problem next to its field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputProblems {
    /// (parameter name, message), one per problem.
    pub fields: Vec<(String, String)>,
    /// The CHEQ carries warnings and the user did not take the extra step
    /// that accepting it needs.
    pub warnings_unacknowledged: bool,
}

impl InputProblems {
    /// The problem of one field.
    pub fn field(name: &str, message: &str) -> Self {
        InputProblems {
            fields: vec![(name.to_owned(), message.to_owned())],
            warnings_unacknowledged: false,
        }
    }

    /// The message for parameter `name`, if it has a problem.
    pub fn for_field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, m)| m.as_str())
    }
}

/// The message a missing required value gets.
pub const REQUIRED: &str = "a value is required";

/// §8: checks the values the user typed against each parameter's `parameter
/// input`. Returns what goes into `cheq_collected` (nothing for a rejection).
/// That every required input has a value is the rule of
/// [`cheq_core::cheq::Cheq::missing_required_input`]; here each missing one is
/// named, so that the page can say so next to each field.
pub fn validate_collected(
    verified: &VerifiedCheq,
    decision: Decision,
    given: &IndexMap<String, String>,
) -> Result<Option<IndexMap<String, String>>, InputProblems> {
    if decision == Decision::Reject {
        return Ok(None);
    }
    let mut out = IndexMap::new();
    let mut problems = Vec::new();
    for p in &verified.cheq().parameters {
        let Some(input) = &p.input else { continue };
        let value = given.get(&p.name).map(|v| v.trim()).unwrap_or("");
        if value.is_empty() {
            if p.requires_input() {
                problems.push((p.name.clone(), REQUIRED.to_owned()));
            }
            continue;
        }
        if let Some(max) = input.max_length {
            if value.chars().count() > max {
                problems.push((p.name.clone(), format!("at most {max} characters")));
                continue;
            }
        }
        let well_typed = match input.input_type {
            InputType::Text => !value.chars().any(char::is_control),
            InputType::Digits => value.chars().all(|c| c.is_ascii_digit()),
            InputType::Amount => is_amount(value),
        };
        if !well_typed {
            let what = match input.input_type {
                InputType::Text => "text without control characters",
                InputType::Digits => "digits only",
                InputType::Amount => "an amount such as 250 or 250.00",
            };
            problems.push((p.name.clone(), format!("must be {what}")));
            continue;
        }
        if let Some(pattern) = &input.pattern {
            match regex::Regex::new(&format!("^(?:{pattern})$")) {
                Ok(re) if re.is_match(value) => {}
                Ok(_) => {
                    problems.push((p.name.clone(), "does not have the expected form".into()));
                    continue;
                }
                Err(_) => {
                    problems.push((p.name.clone(), "the request's pattern is invalid".into()));
                    continue;
                }
            }
        }
        out.insert(p.name.clone(), value.to_owned());
    }
    let out = (!out.is_empty()).then_some(out);
    // The one rule, checked once more on what will be signed.
    if let Some(p) = verified.cheq().missing_required_input(out.as_ref()) {
        if !problems.iter().any(|(n, _)| n == &p.name) {
            problems.push((p.name.clone(), REQUIRED.to_owned()));
        }
    }
    if !problems.is_empty() {
        return Err(InputProblems {
            fields: problems,
            warnings_unacknowledged: false,
        });
    }
    Ok(out)
}

fn is_amount(v: &str) -> bool {
    let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
    !whole.is_empty()
        && whole.len() <= 15
        && whole.chars().all(|c| c.is_ascii_digit())
        && (v.contains('.') && (1..=2).contains(&frac.len()) || !v.contains('.'))
        && frac.chars().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts() {
        for ok in ["1", "250", "250.0", "250.00", "0.5"] {
            assert!(is_amount(ok), "{ok}");
        }
        for bad in ["", ".5", "250.", "250.000", "1e3", "-1", "2,50", "12 3"] {
            assert!(!is_amount(bad), "{bad}");
        }
    }

    #[test]
    fn collected_values_never_show_in_debug() {
        let mut m = IndexMap::new();
        m.insert("pin".to_owned(), "123456".to_owned());
        let by_name = format!("{:?}", Collected::ByName(m));
        let by_index = format!("{:?}", Collected::ByIndex(vec![(0, "secret".into())]));
        assert!(!by_name.contains("123456") && by_name.contains("pin"));
        assert!(!by_index.contains("secret"));
    }
}
