//! The OpenAPI 3.1 description of the raw API (PROTOCOL.md §10) and of the
//! registration of resource servers (§16.3), generated
//! from the code by `utoipa`: the handlers carry `#[utoipa::path]`, the
//! answers are the types of [`super::views`] and the error body
//! [`ErrorBody`]. It is served at `GET /api/v1/openapi.json` and checked in
//! as `docs/openapi.json` (`tests/openapi.rs` fails when the two differ;
//! `CHEQ_BLESS=1 cargo test --test openapi` rewrites the file).
//!
//! The request bodies are parsed by hand in [`super`] (the strict JSON reader
//! of [`crate::cheq::json`], with a message per member); their types here
//! ([`TokenRequest`], [`CreateRequest`], [`DecisionRequestBody`]) say what
//! that parser takes.

use super::views::{
    ConfirmationView, DecidedView, DecisionAnswer, InputView, OpenView, ParameterView, VoiceView,
    WarningView,
};
use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

/// The security scheme of `POST /api/v1/token`: the gateway's HTTP Basic.
pub const GATEWAY_AUTH: &str = "gateway";
/// The security scheme of the other routes: a user token from `/api/v1/token`.
pub const USER_TOKEN: &str = "user_token";
/// The security scheme of a registration in `token` mode (§16.3).
pub const INITIAL_ACCESS_TOKEN: &str = "initial_access_token";

/// Every answer that is not a success (§10): `{"error","error_description"}`,
/// with more members for some errors.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A machine-readable code (`invalid_request`, `invalid_token`,
    /// `not_found`, `view_changed`, …).
    #[schema(pattern = "^[a-z_]+$")]
    pub error: String,
    /// What went wrong, in words.
    pub error_description: String,
    /// `422 invalid_input`, `422 warnings_not_acknowledged`: each problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problems: Option<Vec<Problem>>,
    /// `409 already_decided`, `409 refused_by_resource_server`: the earlier
    /// decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::decision)]
    pub decision: Option<crate::cheq::Decision>,
    /// `409`: when the earlier decision was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub decided_at: Option<String>,
    /// `409`: what became of its delivery.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::delivery)]
    pub delivery: Option<&'static str>,
    /// `409 already_decided`: the status of the earlier decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schemas::decided_status)]
    pub status: Option<crate::cheq::ConfirmationStatus>,
}

/// One problem of a decision's body (`422`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Problem {
    /// The parameter, or null for the unacknowledged warnings.
    #[schema(required = true)]
    pub parameter: Option<String>,
    pub problem: String,
}

/// The form of `POST /api/v1/token` (`application/x-www-form-urlencoded`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenRequest {
    /// The user's name at the CS: 1 to 64 of `A-Z a-z 0-9 . _ @ -` (any
    /// other name is nobody's: `401`).
    pub username: String,
    /// The user's voice PIN, 6 to 12 digits (any other form is wrong: `401`).
    #[schema(format = Password, pattern = "^[0-9]{6,12}$")]
    pub pin: String,
}

/// The answer of `POST /api/v1/token`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenAnswer {
    /// Stands for the user (`amr` `["pin"]`) and the gateway.
    pub access_token: String,
    #[schema(schema_with = schemas::bearer)]
    pub token_type: &'static str,
    /// Seconds.
    #[schema(minimum = 1)]
    pub expires_in: i64,
}

/// The body of `POST /api/v1/confirmations`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreateRequest {
    /// The resource URI of the URI pack (§1): it must belong to a resource
    /// server registered at this CS (§2).
    #[serde(rename = "resource uri")]
    #[schema(format = "uri", min_length = 1)]
    pub resource_uri: String,
}

/// The body of `POST /api/v1/confirmations/{id}/decision`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DecisionRequestBody {
    #[schema(schema_with = schemas::decision)]
    pub decision: crate::cheq::Decision,
    /// The `voice.digest` of the view that was read out.
    #[schema(min_length = 1)]
    pub view: String,
    /// The values the user supplied (§8), by parameter name.
    pub collected: Option<BTreeMap<String, String>>,
    /// Required (true) to accept a confirmation that carries warnings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acknowledge_warnings: Option<bool>,
}

/// The body of `POST /api/v1/resource-servers` (§16.3).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RegistrationRequest {
    /// The resource server's origin (`https://host[:port]`), where its
    /// discovery document (`/.well-known/cheq-resource`, §16.2) is fetched.
    #[schema(format = "uri", min_length = 1)]
    pub resource: String,
}

/// The answer of a registration (§16.3).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RegistrationAnswer {
    /// The resource server's origin.
    #[schema(format = "uri")]
    pub resource: String,
    /// Its name, as its discovery document gives it.
    pub name: String,
    #[schema(schema_with = schemas::active)]
    pub status: &'static str,
}

impl RegistrationAnswer {
    /// The answer for a stored record (always active: a blocked origin is
    /// refused).
    pub fn of(record: &crate::store::registrations::RegisteredRecord) -> Self {
        RegistrationAnswer {
            resource: record.origin.clone(),
            name: record.name.clone(),
            status: crate::store::registrations::RegistrationStatus::Active.as_str(),
        }
    }
}

/// Schemas of members whose type lives in a layer that knows nothing of
/// OpenAPI: each lists the words the code itself writes.
pub(super) mod schemas {
    use crate::cheq::{ConfirmationStatus, Decision};
    use crate::store::cs::{Delivery, Refusal};
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    use utoipa::openapi::{Object, RefOr, Schema};

    fn words(words: &[&str], description: &str) -> Object {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(words.iter().copied()))
            .description(Some(description))
            .build()
    }

    fn schema(o: Object) -> RefOr<Schema> {
        RefOr::T(Schema::Object(o))
    }

    pub fn open_status() -> RefOr<Schema> {
        schema(words(
            &[ConfirmationStatus::Pending.as_str()],
            "An open confirmation.",
        ))
    }

    /// What [`super::super::views::decided_status`] can say.
    pub const DECIDED: [ConfirmationStatus; 4] = [
        ConfirmationStatus::Accepted,
        ConfirmationStatus::Rejected,
        ConfirmationStatus::Expired,
        ConfirmationStatus::DeliveryPending,
    ];

    pub fn decided_status() -> RefOr<Schema> {
        let w: Vec<&str> = DECIDED.iter().map(|s| s.as_str()).collect();
        schema(words(
            &w,
            "`accepted` or `rejected` once the resource server recorded it, \
             `delivery_pending` until then, `expired` when the CHEQ expired first.",
        ))
    }

    pub fn decision() -> RefOr<Schema> {
        schema(words(
            &[Decision::Accept.as_str(), Decision::Reject.as_str()],
            "The user's decision.",
        ))
    }

    /// Every delivery state, as [`crate::confirm::view::delivery_label`]
    /// words it.
    pub fn delivery_words() -> Vec<&'static str> {
        [
            Delivery::Pending {
                attempts: 0,
                next_try: 0,
                last_error: None,
            },
            Delivery::Delivered {
                decision: Decision::Accept,
                at: 0,
            },
            Delivery::Refused {
                refusal: Refusal::Unregistered,
                at: 0,
            },
            Delivery::Expired { at: 0 },
        ]
        .iter()
        .map(crate::confirm::view::delivery_label)
        .collect()
    }

    pub fn delivery() -> RefOr<Schema> {
        schema(words(
            &delivery_words(),
            "What became of the decision's delivery to the resource server (§6).",
        ))
    }

    pub fn input_type() -> RefOr<Schema> {
        schema(words(
            &["text", "digits", "amount"],
            "§8 `parameter input` type.",
        ))
    }

    pub fn warning_kind() -> RefOr<Schema> {
        schema(words(
            &["bidi_control", "invisible", "mixed_script", "confusable"],
            "What was found (Unicode TS #39).",
        ))
    }

    pub fn bearer() -> RefOr<Schema> {
        schema(words(&["Bearer"], "Always `Bearer`."))
    }

    pub fn active() -> RefOr<Schema> {
        schema(words(
            &[crate::store::registrations::RegistrationStatus::Active.as_str()],
            "Always `active`: the resource server is served.",
        ))
    }
}

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut basic = Http::new(HttpAuthScheme::Basic);
        basic.description = Some(
            "The voice gateway's client id and secret, as registered at the CS \
             (`[[gateways]]`)."
                .into(),
        );
        let mut bearer = Http::new(HttpAuthScheme::Bearer);
        bearer.description = Some(
            "A user token from `POST /api/v1/token` (it stands for one user and one gateway)."
                .into(),
        );
        let mut initial = Http::new(HttpAuthScheme::Bearer);
        initial.description = Some(
            "An initial access token from the operator (`cheq rs token`), needed in `token` \
             mode only; each allows one registration."
                .into(),
        );
        components.add_security_scheme(GATEWAY_AUTH, SecurityScheme::Http(basic));
        components.add_security_scheme(USER_TOKEN, SecurityScheme::Http(bearer));
        components.add_security_scheme(INITIAL_ACCESS_TOKEN, SecurityScheme::Http(initial));
    }
}

/// The raw API's description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "CHEQ confirmation server: raw API for voice gateways, registration of resource servers",
        version = "1",
        description = "PROTOCOL.md §10. Every answer under `/api/v1/` is JSON; every error is \
            `{\"error\",\"error_description\"}` (the `ErrorBody` schema) with the fitting status. \
            On every path, a method not listed here is answered `405 method_not_allowed` \
            (with `Allow`), and a path not listed here `404 not_found`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    paths(
        super::token,
        super::create,
        super::get,
        super::decide,
        super::openapi_document,
        super::registration::register
    ),
    components(schemas(
        ErrorBody,
        Problem,
        TokenRequest,
        TokenAnswer,
        CreateRequest,
        DecisionRequestBody,
        ConfirmationView,
        OpenView,
        DecidedView,
        ParameterView,
        InputView,
        VoiceView,
        WarningView,
        DecisionAnswer,
        RegistrationRequest,
        RegistrationAnswer
    )),
    modifiers(&SecuritySchemes),
    tags(
        (name = "raw API", description = "PROTOCOL.md §10"),
        (name = "registration", description = "PROTOCOL.md §16.3")
    )
)]
pub struct ApiDoc;

/// The description as pretty-printed JSON, ending with a newline: the exact
/// text of `docs/openapi.json`.
pub fn openapi_json() -> String {
    let doc = ApiDoc::openapi();
    // Serialising a value of plain maps, strings and numbers cannot fail.
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_else(|_| "{}".to_owned());
    text.push('\n');
    text
}

/// Every operation the description names, as (method in upper case, path).
pub fn described_operations() -> Vec<(String, String)> {
    let v = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let mut out = Vec::new();
    if let Some(paths) = v.get("paths").and_then(|p| p.as_object()) {
        for (path, item) in paths {
            for method in [
                "get", "put", "post", "delete", "options", "head", "patch", "trace",
            ] {
                if item.get(method).is_some() {
                    out.push((method.to_ascii_uppercase(), path.clone()));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_is_openapi_3_1_with_the_wire_names() {
        let v: serde_json::Value = serde_json::from_str(&openapi_json()).unwrap();
        assert_eq!(v["openapi"], "3.1.0");
        let props = &v["components"]["schemas"]["OpenView"]["properties"];
        for name in ["operation name", "resource origin", "voice", "warnings"] {
            assert!(props.get(name).is_some(), "{name} in {props}");
        }
        assert!(props.get("operation_name").is_none());
        let req = &v["components"]["schemas"]["CreateRequest"];
        assert_eq!(req["required"], serde_json::json!(["resource uri"]));
        let input = &v["components"]["schemas"]["InputView"]["properties"];
        assert!(input.get("max length").is_some(), "{input}");
        assert_eq!(openapi_json(), openapi_json(), "deterministic");
    }

    #[test]
    fn every_delivery_word_is_described() {
        let words = schemas::delivery_words();
        assert_eq!(words.len(), 4);
        assert!(words.contains(&"delivery pending"));
    }
}
