//! The JSON views of the raw API (PROTOCOL.md §10): an open confirmation, a
//! decided one, and the §10 status of a decision.

use crate::cheq::ConfirmationStatus;
use crate::confirm::view::CheqView;
use crate::store::cs::{DecisionRecord, Delivery};
use chrono::{SecondsFormat, TimeZone, Utc};
use serde_json::{json, Value};

pub(super) fn rfc3339(ts: i64) -> String {
    Utc.timestamp_opt(ts, 0)
        .single()
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// The view of an open confirmation (§10).
pub fn open_view(id: &str, v: &CheqView) -> Value {
    let parameters: Vec<Value> = v
        .parameters
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "description": p.description,
                "value": p.value,
                // The only source of a currency or unit (§4).
                "unit": p.unit,
                "input": p.input.as_ref().map(|i| json!({
                    "type": i.kind,
                    "required": i.required,
                    "max length": i.max_length,
                    "pattern": i.pattern,
                    "sensitive": i.sensitive,
                    // What a voice gateway asks when it collects this value.
                    "prompt": crate::confirm::voice::input_prompt(&p.name, p.description.as_deref(), i),
                })),
            })
        })
        .collect();
    json!({
        "id": id,
        "status": ConfirmationStatus::Pending,
        "operation": v.operation,
        "operation name": v.operation_name,
        "resource origin": v.resource_origin,
        "subject": v.subject,
        "expires": v.expires,
        "language": v.language,
        "parameters": parameters,
        // `digest` is `cheq_view` for a voice decision: send it back as
        // "view" with the decision to bind it to what was read out.
        "voice": {"text": v.voice_text, "ssml": v.voice_ssml, "digest": v.voice_digest},
        "warnings": v.warnings,
    })
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

pub(super) fn decided_view(id: &str, r: &DecisionRecord) -> Value {
    json!({
        "id": id,
        "status": decided_status(r),
        "operation": r.operation,
        "operation name": r.operation_name,
        "resource origin": r.resource_origin,
        "subject": r.user,
        "expires": rfc3339(r.expires),
        "decision": r.decision,
        "decided_at": rfc3339(r.decided_at),
        "delivery": delivery_word(&r.delivery),
    })
}
