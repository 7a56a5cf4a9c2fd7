//! The JSON views of the raw API (PROTOCOL.md §10): an open confirmation, a
//! decided one, and the §10 status of a decision.
//!
//! Each view is a type that is both what the handlers serialise and what the
//! OpenAPI description says ([`utoipa::ToSchema`], see [`super::doc`]), so the
//! two cannot drift apart. Member names with spaces are the wire names.

use super::doc::schemas;
use crate::cheq::{ConfirmationStatus, Decision};
use crate::confirm::view::CheqView;
use crate::store::cs::{DecisionRecord, Delivery};
use chrono::{SecondsFormat, TimeZone, Utc};
use serde::Serialize;
use utoipa::ToSchema;

pub(super) fn rfc3339(ts: i64) -> String {
    Utc.timestamp_opt(ts, 0)
        .single()
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// A value the user must supply (§8), and how a voice gateway asks for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct InputView {
    /// `text`, `digits` or `amount`.
    #[serde(rename = "type")]
    #[schema(schema_with = schemas::input_type)]
    pub kind: &'static str,
    pub required: bool,
    #[serde(rename = "max length")]
    #[schema(required = true, minimum = 0)]
    pub max_length: Option<usize>,
    /// A regular expression the whole value must match.
    #[schema(required = true)]
    pub pattern: Option<String>,
    /// A sensitive value is never stored in clear (§8).
    pub sensitive: bool,
    /// What a voice gateway asks when it collects this value.
    pub prompt: String,
}

/// One parameter of the CHEQ, in display order (§4); hidden characters are
/// shown as `⟨U+XXXX⟩`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ParameterView {
    pub name: String,
    #[schema(required = true)]
    pub description: Option<String>,
    /// The exact value the API will receive; null when the user supplies it
    /// (`input`).
    #[schema(required = true)]
    pub value: Option<String>,
    /// `parameter unit`: the only source of a currency or unit (§4).
    #[schema(required = true)]
    pub unit: Option<String>,
    /// Present when the user must supply the value (§8).
    #[schema(required = true)]
    pub input: Option<InputView>,
}

/// What a voice gateway reads out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct VoiceView {
    /// Every fact the browser page shows, ending with the question.
    pub text: String,
    /// The same as SSML 1.1.
    pub ssml: String,
    /// base64url SHA-256 of `text`: send it back as `view` with the decision
    /// (`cheq_view` of a voice decision, §5).
    #[schema(pattern = "^[A-Za-z0-9_-]{43}$")]
    pub digest: String,
}

/// A value that could deceive a reader or listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct WarningView {
    /// The parameter name, or `operation name` for the operation.
    pub parameter: String,
    #[schema(schema_with = schemas::warning_kind)]
    pub kind: &'static str,
    /// What was found, in words (hidden characters made visible).
    pub detail: String,
}

/// An open confirmation (`status` `pending`): everything needed to read it
/// out and decide.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct OpenView {
    pub id: String,
    #[schema(schema_with = schemas::open_status)]
    pub status: ConfirmationStatus,
    /// The API operation that will run (a URI).
    pub operation: String,
    #[serde(rename = "operation name")]
    pub operation_name: String,
    /// Who asks: the resource server's origin.
    #[serde(rename = "resource origin")]
    pub resource_origin: String,
    /// The user who must confirm.
    pub subject: String,
    #[schema(format = DateTime)]
    pub expires: String,
    /// BCP 47.
    pub language: String,
    pub parameters: Vec<ParameterView>,
    pub voice: VoiceView,
    pub warnings: Vec<WarningView>,
}

/// A decided confirmation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct DecidedView {
    pub id: String,
    #[schema(schema_with = schemas::decided_status)]
    pub status: ConfirmationStatus,
    pub operation: String,
    #[serde(rename = "operation name")]
    pub operation_name: String,
    #[serde(rename = "resource origin")]
    pub resource_origin: String,
    pub subject: String,
    #[schema(format = DateTime)]
    pub expires: String,
    #[schema(schema_with = schemas::decision)]
    pub decision: Decision,
    #[schema(format = DateTime)]
    pub decided_at: String,
    #[schema(schema_with = schemas::delivery)]
    pub delivery: &'static str,
}

/// A confirmation view (§10): open (`pending`) or decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum ConfirmationView {
    Open(OpenView),
    Decided(DecidedView),
}

/// The answer to a decision (§10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct DecisionAnswer {
    #[schema(schema_with = schemas::decided_status)]
    pub status: ConfirmationStatus,
    #[schema(format = DateTime)]
    pub decided_at: String,
    #[schema(schema_with = schemas::delivery)]
    pub delivery: &'static str,
}

impl DecisionAnswer {
    pub(super) fn of(r: &DecisionRecord) -> Self {
        DecisionAnswer {
            status: decided_status(r),
            decided_at: rfc3339(r.decided_at),
            delivery: delivery_word(&r.delivery),
        }
    }
}

/// The view of an open confirmation (§10).
pub fn open_view(id: &str, v: &CheqView) -> OpenView {
    let parameters = v
        .parameters
        .iter()
        .map(|p| ParameterView {
            name: p.name.clone(),
            description: p.description.clone(),
            value: p.value.clone(),
            // The only source of a currency or unit (§4).
            unit: p.unit.clone(),
            input: p.input.as_ref().map(|i| InputView {
                kind: i.kind,
                required: i.required,
                max_length: i.max_length,
                pattern: i.pattern.clone(),
                sensitive: i.sensitive,
                // What a voice gateway asks when it collects this value.
                prompt: crate::confirm::voice::input_prompt(&p.name, p.description.as_deref(), i),
            }),
        })
        .collect();
    OpenView {
        id: id.to_owned(),
        status: ConfirmationStatus::Pending,
        operation: v.operation.clone(),
        operation_name: v.operation_name.clone(),
        resource_origin: v.resource_origin.clone(),
        subject: v.subject.clone(),
        expires: v.expires.clone(),
        language: v.language.clone(),
        parameters,
        // `digest` is `cheq_view` for a voice decision: send it back as
        // "view" with the decision to bind it to what was read out.
        voice: {
            let reading = v.voice();
            VoiceView {
                text: reading.text.clone(),
                ssml: reading.ssml.clone(),
                digest: reading.digest.clone(),
            }
        },
        warnings: v
            .warnings
            .iter()
            .map(|w| WarningView {
                parameter: w.parameter.clone(),
                kind: w.kind,
                detail: w.detail.clone(),
            })
            .collect(),
    }
}

/// The §10 status of a decided confirmation.
pub fn decided_status(r: &DecisionRecord) -> ConfirmationStatus {
    match &r.delivery {
        Delivery::Pending { .. } => ConfirmationStatus::DeliveryPending,
        Delivery::Expired { .. } => ConfirmationStatus::Expired,
        // What the RS recorded (the same as the decision, by §6).
        Delivery::Delivered { decision, .. } => ConfirmationStatus::of(*decision),
        // Not carried out: the front end answers 409 rather than this.
        Delivery::Refused { .. } => ConfirmationStatus::of(r.decision),
    }
}

pub(super) use crate::confirm::view::delivery_label as delivery_word;

pub(super) fn decided_view(id: &str, r: &DecisionRecord) -> DecidedView {
    DecidedView {
        id: id.to_owned(),
        status: decided_status(r),
        operation: r.operation.clone(),
        operation_name: r.operation_name.clone(),
        resource_origin: r.resource_origin.clone(),
        subject: r.user.clone(),
        expires: rfc3339(r.expires),
        decision: r.decision,
        decided_at: rfc3339(r.decided_at),
        delivery: delivery_word(&r.delivery),
    }
}
