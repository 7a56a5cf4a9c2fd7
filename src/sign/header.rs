//! Protected headers (PROTOCOL.md §5): the resource header and the confirmation
//! header, parsed strictly and built byte-stable.

use super::keys::Algorithm;
use crate::cheq::json::Object;
use indexmap::IndexMap;
use serde::Serialize;

pub use crate::cheq::vocab::{Channel, Decision};

/// The role a signature plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Resource,
    Confirmation,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Resource => "resource",
            Role::Confirmation => "confirmation",
        }
    }
}

/// The `typ` every CHEQ signature carries.
pub const TYP: &str = "cheq+jws";
/// The critical header parameters this implementation understands.
pub const UNDERSTOOD_CRIT: &[&str] = &["cheq_decision"];

/// The claims of a confirmation signature (§5), as verified or as to be signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfirmationClaims {
    pub decision: Decision,
    pub sub: String,
    pub iat: i64,
    pub auth_time: i64,
    pub amr: Vec<String>,
    pub channel: Channel,
    /// base64url SHA-256 of the exact text the user was shown or read.
    pub view: String,
    /// base64url SHA-256 of the decoded resource signature.
    pub rs_sig: String,
    /// Values the user supplied (§8), by parameter name.
    pub collected: Option<IndexMap<String, String>>,
}

#[derive(Serialize)]
struct ResourceHeaderOut<'a> {
    alg: &'a str,
    kid: &'a str,
    typ: &'a str,
    cheq_role: &'a str,
}

#[derive(Serialize)]
struct ConfirmationHeaderOut<'a> {
    alg: &'a str,
    kid: &'a str,
    typ: &'a str,
    cheq_role: &'a str,
    crit: [&'a str; 1],
    cheq_decision: &'a str,
    sub: &'a str,
    iat: i64,
    auth_time: i64,
    amr: &'a [String],
    cheq_channel: &'a str,
    cheq_view: &'a str,
    cheq_rs_sig: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cheq_collected: Option<&'a IndexMap<String, String>>,
}

/// The resource header's JSON text.
pub fn resource_header_json(alg: Algorithm, kid: &str) -> String {
    serde_json::to_string(&ResourceHeaderOut {
        alg: alg.as_str(),
        kid,
        typ: TYP,
        cheq_role: Role::Resource.as_str(),
    })
    .unwrap_or_default()
}

/// The confirmation header's JSON text.
pub fn confirmation_header_json(alg: Algorithm, kid: &str, c: &ConfirmationClaims) -> String {
    serde_json::to_string(&ConfirmationHeaderOut {
        alg: alg.as_str(),
        kid,
        typ: TYP,
        cheq_role: Role::Confirmation.as_str(),
        crit: ["cheq_decision"],
        cheq_decision: c.decision.as_str(),
        sub: &c.sub,
        iat: c.iat,
        auth_time: c.auth_time,
        amr: &c.amr,
        cheq_channel: c.channel.as_str(),
        cheq_view: &c.view,
        cheq_rs_sig: &c.rs_sig,
        cheq_collected: c.collected.as_ref(),
    })
    .unwrap_or_default()
}

/// A protected header after the generic checks of §5.
#[derive(Debug, Clone)]
pub struct Header<'a> {
    pub alg: Algorithm,
    pub kid: String,
    pub role: Role,
    pub members: &'a Object<'static>,
}

pub(crate) fn string_member<'a>(m: &'a Object<'_>, name: &str) -> Option<&'a str> {
    m.get(name).and_then(|v| v.as_str())
}
