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
pub const UNDERSTOOD_CRIT: &[&str] = &["cheq_decision", "cheq_passkey"];

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
    /// The passkey assertion bound to this decision (`cheq_passkey`): the
    /// member's JSON object.
    pub passkey: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Serialize)]
struct ResourceHeaderOut<'a> {
    alg: &'a str,
    kid: &'a str,
    typ: &'a str,
    cheq_role: &'a str,
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

/// The confirmation header's JSON text: members in a fixed order, compact.
/// Written by hand (fewer instructions per countersignature than
/// serde_json): the fixed names and the base64url digests need no
/// escaping, and every other string goes through serde_json's escaping. The
/// unit test below holds it to what serde_json writes for the same members.
pub fn confirmation_header_json(alg: Algorithm, kid: &str, c: &ConfirmationClaims) -> String {
    let mut out = String::with_capacity(
        320 + kid.len() + c.sub.len() + c.amr.iter().map(|a| a.len() + 3).sum::<usize>(),
    );
    out.push_str("{\"alg\":\"");
    out.push_str(alg.as_str());
    out.push_str("\",\"kid\":");
    push_json_str(&mut out, kid);
    out.push_str(",\"typ\":\"");
    out.push_str(TYP);
    out.push_str("\",\"cheq_role\":\"");
    out.push_str(Role::Confirmation.as_str());
    out.push_str(if c.passkey.is_some() {
        "\",\"crit\":[\"cheq_decision\",\"cheq_passkey\"],\"cheq_decision\":\""
    } else {
        "\",\"crit\":[\"cheq_decision\"],\"cheq_decision\":\""
    });
    out.push_str(c.decision.as_str());
    out.push_str("\",\"sub\":");
    push_json_str(&mut out, &c.sub);
    out.push_str(",\"iat\":");
    out.push_str(&c.iat.to_string());
    out.push_str(",\"auth_time\":");
    out.push_str(&c.auth_time.to_string());
    out.push_str(",\"amr\":[");
    for (i, a) in c.amr.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_str(&mut out, a);
    }
    out.push_str("],\"cheq_channel\":\"");
    out.push_str(c.channel.as_str());
    out.push_str("\",\"cheq_view\":");
    push_json_str(&mut out, &c.view);
    out.push_str(",\"cheq_rs_sig\":");
    push_json_str(&mut out, &c.rs_sig);
    if let Some(collected) = &c.collected {
        out.push_str(",\"cheq_collected\":{");
        for (i, (name, value)) in collected.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_json_str(&mut out, name);
            out.push(':');
            push_json_str(&mut out, value);
        }
        out.push('}');
    }
    if let Some(passkey) = &c.passkey {
        out.push_str(",\"cheq_passkey\":");
        out.push_str(&serde_json::Value::Object(passkey.clone()).to_string());
    }
    out.push('}');
    out
}

/// Appends `s` as a JSON string. Text that needs no escaping (base64url,
/// plain names) is copied as is; anything else is escaped by serde_json.
fn push_json_str(out: &mut String, s: &str) {
    if s.bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b < 0x7f)
    {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::Value::from(s).to_string());
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What serde_json writes for the confirmation header's members.
    #[derive(Serialize)]
    struct Reference<'a> {
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

    #[test]
    fn confirmation_header_is_what_serde_json_writes() {
        let odd = [
            "",
            "alice",
            "a\"quote",
            "back\\slash",
            "new\nline\u{1}\u{7f}",
            "é 東京 🚀",
            "</script>",
            "\u{2028}",
        ];
        for (i, text) in odd.iter().enumerate() {
            let collected = (i % 2 == 0).then(|| {
                let mut m = IndexMap::new();
                m.insert((*text).to_owned(), format!("{text}{i}"));
                m.insert("plain".to_owned(), (*text).to_owned());
                m
            });
            let claims = ConfirmationClaims {
                decision: if i % 2 == 0 {
                    Decision::Accept
                } else {
                    Decision::Reject
                },
                sub: (*text).to_owned(),
                iat: 1_700_000_000 + i as i64,
                auth_time: -(i as i64),
                amr: (0..i % 3).map(|k| format!("{text}{k}")).collect(),
                channel: if i % 2 == 0 {
                    Channel::Html
                } else {
                    Channel::Voice
                },
                view: format!("v{text}"),
                rs_sig: "AbC-_9".repeat(7),
                collected,
                passkey: None,
            };
            let kid = format!("kid{text}");
            let reference = serde_json::to_string(&Reference {
                alg: Algorithm::EdDsa.as_str(),
                kid: &kid,
                typ: TYP,
                cheq_role: Role::Confirmation.as_str(),
                crit: ["cheq_decision"],
                cheq_decision: claims.decision.as_str(),
                sub: &claims.sub,
                iat: claims.iat,
                auth_time: claims.auth_time,
                amr: &claims.amr,
                cheq_channel: claims.channel.as_str(),
                cheq_view: &claims.view,
                cheq_rs_sig: &claims.rs_sig,
                cheq_collected: claims.collected.as_ref(),
            })
            .unwrap();
            assert_eq!(
                confirmation_header_json(Algorithm::EdDsa, &kid, &claims),
                reference,
                "for {text:?}"
            );
        }
    }

    #[test]
    fn a_passkey_member_is_written_last_and_marked_critical() {
        let mut passkey = serde_json::Map::new();
        passkey.insert("id".into(), "Y3JlZA".into());
        passkey.insert("client_data".into(), "e30\"x".into());
        let claims = ConfirmationClaims {
            decision: Decision::Accept,
            sub: "alice".into(),
            iat: 1,
            auth_time: 1,
            amr: vec!["hwk".into()],
            channel: Channel::Html,
            view: "v".into(),
            rs_sig: "r".into(),
            collected: None,
            passkey: Some(passkey.clone()),
        };
        let text = confirmation_header_json(Algorithm::EdDsa, "k", &claims);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["crit"],
            serde_json::json!(["cheq_decision", "cheq_passkey"])
        );
        assert_eq!(v["cheq_passkey"], serde_json::Value::Object(passkey));
        assert!(text.ends_with("}}"), "{text}");
    }
}
