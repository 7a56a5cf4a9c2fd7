//! What the user is shown (PROTOCOL.md §4, §5 `cheq_view`): a view model built
//! from a [`VerifiedCheq`] only, and the exact text whose SHA-256 becomes
//! `cheq_view` in the countersignature. The HTML page (`templates/confirm.html`)
//! shows the same facts as this text, element by element.
//!
//! A view states only what the CHEQ says (§4): values are shown exactly as
//! written, and a unit only when the parameter carries `parameter unit`.

use super::warnings::{check, visible, Warning};
use cheq_core::cheq::{InputType, Parameter};
use cheq_core::sign::{b64, VerifiedCheq};
use chrono::SecondsFormat;
use std::sync::OnceLock;

/// One parameter as shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamView {
    pub index: usize,
    /// The name exactly as in the CHEQ (the key of `cheq_collected`).
    pub raw_name: String,
    /// The name as shown: hidden characters made visible.
    pub name: String,
    pub description: Option<String>,
    pub value: Option<String>,
    pub input: Option<InputView>,
    /// `parameter unit` as shown (hidden characters made visible); none when
    /// absent or blank. The only source of a currency or unit (§4).
    pub unit: Option<String>,
}

/// A value the user must type (§8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputView {
    pub kind: &'static str,
    pub required: bool,
    pub max_length: Option<usize>,
    pub pattern: Option<String>,
    pub sensitive: bool,
}

/// Everything a confirmation page or voice view shows of a verified CHEQ.
/// The voice reading is made the first time it is asked for (a page never
/// asks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheqView {
    pub resource_origin: String,
    pub resource_uri: String,
    pub operation: String,
    pub operation_name: String,
    pub parameters: Vec<ParamView>,
    pub subject: String,
    pub expires: String,
    pub language: String,
    pub nonce: String,
    /// What could deceive a reader or listener.
    pub warnings: Vec<Warning>,
    /// The exact text shown (see [`view_text`]).
    pub text: String,
    /// base64url SHA-256 of `text`: the `cheq_view` claim of an html decision.
    pub digest: String,
    /// The origin of the CS that shows it (the voice reading names it).
    cs_origin: String,
    voice: Derived<VoiceReading>,
}

/// A view read out (see [`super::voice`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoiceReading {
    /// The words read out.
    pub text: String,
    /// The same as SSML.
    pub ssml: String,
    /// base64url SHA-256 of `text`: `cheq_view` of a voice decision.
    pub digest: String,
}

/// What is made from the rest of a view on first use: it follows from
/// what the view was made of, so two views are equal whether it was made
/// or not.
#[derive(Debug, Clone)]
struct Derived<T>(OnceLock<T>);

impl<T> PartialEq for Derived<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> Eq for Derived<T> {}

fn param_view(index: usize, p: &Parameter) -> ParamView {
    ParamView {
        index,
        raw_name: p.name.clone(),
        name: visible(&p.name),
        description: p.description.as_deref().map(visible),
        value: p.value.as_deref().map(visible),
        input: p.input.as_ref().map(|i| InputView {
            kind: match i.input_type {
                InputType::Text => "text",
                InputType::Digits => "digits",
                InputType::Amount => "amount",
            },
            required: i.required,
            max_length: i.max_length,
            pattern: i.pattern.clone(),
            sensitive: i.sensitive,
        }),
        unit: p
            .unit
            .as_deref()
            .filter(|u| !u.trim().is_empty())
            .map(visible),
    }
}

pub use cheq_core::cheq::uri::origin_of;

/// A short word for a delivery state, as pages and the API say it.
pub fn delivery_label(d: &cheq_store::cs::Delivery) -> &'static str {
    use cheq_store::cs::Delivery;
    match d {
        Delivery::Pending { .. } => "delivery pending",
        Delivery::Delivered { .. } => "delivered",
        Delivery::Refused { .. } => "refused by the resource server",
        Delivery::Expired { .. } => "not delivered: expired",
    }
}

impl CheqView {
    /// The view of a verified CHEQ, as shown by the CS at `cs_origin`.
    pub fn of(verified: &VerifiedCheq, cs_origin: &str) -> Self {
        let cheq = verified.cheq();
        let fields = verified.fields();
        let parameters: Vec<ParamView> = cheq
            .parameters
            .iter()
            .enumerate()
            .map(|(i, p)| param_view(i, p))
            .collect();
        let mut warnings = check("operation name", &cheq.operation_name);
        warnings.extend(check("operation", &cheq.operation));
        for p in &cheq.parameters {
            warnings.extend(check(&p.name, &p.name));
            for text in [&p.description, &p.value, &p.unit].into_iter().flatten() {
                for w in check(&p.name, text) {
                    if !warnings.contains(&w) {
                        warnings.push(w);
                    }
                }
            }
        }
        let mut view = CheqView {
            resource_origin: fields.resource_origin.ascii_serialization(),
            resource_uri: fields.resource_uri.clone(),
            operation: visible(&cheq.operation),
            operation_name: visible(&cheq.operation_name),
            parameters,
            subject: visible(&fields.subject),
            // Every digit of the CHEQ's expiry: fractions of a second are kept.
            expires: fields.expires.to_rfc3339_opts(SecondsFormat::AutoSi, true),
            language: cheq.language.clone(),
            nonce: fields.nonce.clone(),
            warnings,
            text: String::new(),
            digest: String::new(),
            cs_origin: cs_origin.to_owned(),
            voice: Derived(OnceLock::new()),
        };
        view.text = view_text(&view, cs_origin);
        view.digest = b64::sha256(view.text.as_bytes());
        view
    }

    /// The voice reading, made on first use.
    pub fn voice(&self) -> &VoiceReading {
        self.voice.0.get_or_init(|| {
            let (text, ssml) = super::voice::voice_view(self, &self.warnings, &self.cs_origin);
            VoiceReading {
                digest: b64::sha256(text.as_bytes()),
                text,
                ssml,
            }
        })
    }
}

/// The exact text the confirmation page shows, line by line, in page order.
/// Its SHA-256 is `cheq_view`.
pub fn view_text(v: &CheqView, cs_origin: &str) -> String {
    let mut t = String::new();
    t.push_str(&format!(
        "This page belongs to the confirmation service at {cs_origin}, not to the AI agent.\n"
    ));
    t.push_str(&format!("Requested by: {}\n", v.resource_origin));
    t.push_str(&format!("Operation: {}\n", v.operation_name));
    t.push_str(&format!("Operation URI: {}\n", v.operation));
    for p in &v.parameters {
        t.push_str(&format!("Parameter: {}\n", p.name));
        if let Some(d) = &p.description {
            t.push_str(&format!("  Description: {d}\n"));
        }
        match (&p.value, &p.input) {
            (Some(value), _) => t.push_str(&format!("  Value: {value}\n")),
            (None, Some(i)) => t.push_str(&format!(
                "  Value: to be entered by you ({}{}{})\n",
                i.kind,
                if i.required {
                    ", required"
                } else {
                    ", optional"
                },
                if i.sensitive { ", private" } else { "" }
            )),
            (None, None) => t.push_str("  Value: (none)\n"),
        }
        if let Some(u) = &p.unit {
            t.push_str(&format!("  Unit: {u}\n"));
        }
    }
    t.push_str(&format!("For: {}\n", v.subject));
    t.push_str(&format!("Expires: {}\n", v.expires));
    for w in &v.warnings {
        t.push_str(&format!("Warning: {}: {}\n", w.parameter, w.detail));
    }
    t.push_str("Do you accept or reject this request?\n");
    t
}
