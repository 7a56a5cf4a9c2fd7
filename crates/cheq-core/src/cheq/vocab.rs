//! The protocol's words as types (PROTOCOL.md §5, §6, §7, §10), shared by the
//! signing core, both servers and the store, so that no layer passes them
//! around as strings and no stored record needs re-parsing.
//!
//! Each type serialises as the exact wire word (`accept`, `html`,
//! `delivery_pending`, …).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The decision a confirmation signature carries (`cheq_decision`, §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Accept,
    Reject,
}

impl Decision {
    /// The wire word: `accept` or `reject`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Accept => "accept",
            Decision::Reject => "reject",
        }
    }

    /// Reads the wire word; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "accept" => Some(Decision::Accept),
            "reject" => Some(Decision::Reject),
            _ => None,
        }
    }

    /// The status word of a recorded decision (§6, §7, §10): `accepted` or
    /// `rejected`.
    pub fn status_word(self) -> &'static str {
        match self {
            Decision::Accept => "accepted",
            Decision::Reject => "rejected",
        }
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the RS asks of an acceptance beyond the CS's word (payload member
/// `assurance`): `passkey`, an assertion of the user's own authenticator
/// bound to the decision (header member `cheq_passkey`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Assurance {
    Passkey,
}

impl Assurance {
    /// The wire word.
    pub fn as_str(self) -> &'static str {
        match self {
            Assurance::Passkey => "passkey",
        }
    }

    /// Reads the wire word; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        (s == "passkey").then_some(Assurance::Passkey)
    }
}

/// Where the user saw the CHEQ (`cheq_channel`, §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Html,
    Voice,
    Api,
}

impl Channel {
    /// The wire word: `html`, `voice` or `api`.
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Html => "html",
            Channel::Voice => "voice",
            Channel::Api => "api",
        }
    }

    /// Reads the wire word; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "html" => Some(Channel::Html),
            "voice" => Some(Channel::Voice),
            "api" => Some(Channel::Api),
            _ => None,
        }
    }
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The RS's `200` answer to a decision (§6): the decision it recorded.
/// `{"status":"accepted"}` or `{"status":"rejected"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecisionAnswer {
    pub decision: Decision,
}

impl DecisionAnswer {
    /// The §6 body.
    pub fn to_json(self) -> Value {
        json!({"status": self.decision.status_word()})
    }

    /// Reads a §6 `200` body; `None` when it is not one.
    pub fn from_json(body: &Value) -> Option<Self> {
        let decision = match body.get("status").and_then(Value::as_str)? {
            "accepted" => Decision::Accept,
            "rejected" => Decision::Reject,
            _ => return None,
        };
        Some(DecisionAnswer { decision })
    }
}

/// The status of a confirmation as the raw API reports it (§10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfirmationStatus {
    Pending,
    Accepted,
    Rejected,
    Expired,
    DeliveryPending,
}

impl ConfirmationStatus {
    /// The wire word.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfirmationStatus::Pending => "pending",
            ConfirmationStatus::Accepted => "accepted",
            ConfirmationStatus::Rejected => "rejected",
            ConfirmationStatus::Expired => "expired",
            ConfirmationStatus::DeliveryPending => "delivery_pending",
        }
    }

    /// The status of a decision the RS has taken.
    pub fn of(decision: Decision) -> Self {
        match decision {
            Decision::Accept => ConfirmationStatus::Accepted,
            Decision::Reject => ConfirmationStatus::Rejected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_through_serde_and_parse() {
        for d in [Decision::Accept, Decision::Reject] {
            let s = serde_json::to_string(&d).unwrap();
            assert_eq!(s, format!("\"{}\"", d.as_str()));
            assert_eq!(serde_json::from_str::<Decision>(&s).unwrap(), d);
            assert_eq!(Decision::parse(d.as_str()), Some(d));
            let answer = DecisionAnswer { decision: d }.to_json();
            assert_eq!(DecisionAnswer::from_json(&answer).unwrap().decision, d);
        }
        for c in [Channel::Html, Channel::Voice, Channel::Api] {
            let s = serde_json::to_string(&c).unwrap();
            assert_eq!(serde_json::from_str::<Channel>(&s).unwrap(), c);
            assert_eq!(Channel::parse(c.as_str()), Some(c));
        }
        assert!(serde_json::from_str::<Decision>("\"Accept\"").is_err());
        assert!(Decision::parse("ACCEPT").is_none());
        assert!(DecisionAnswer::from_json(&json!({"status": "pending"})).is_none());
        assert_eq!(
            serde_json::to_string(&ConfirmationStatus::DeliveryPending).unwrap(),
            "\"delivery_pending\""
        );
    }
}
