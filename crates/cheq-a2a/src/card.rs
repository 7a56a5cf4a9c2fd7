//! The Agent Card (A2A 1.0 §4.4, served at `/.well-known/agent-card.json`):
//! one skill per A2T tool signature of the RS (draft A2T §6.1), the JSON-RPC
//! interface, streaming, and the CHEQ extension under
//! `capabilities.extensions` (`required: false`).

use crate::EXTENSION_URI;
use a2a_types::{
    security_scheme, AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentSkill,
    HttpAuthSecurityScheme, SecurityRequirement, SecurityScheme, StringList,
};
use serde_json::{json, Value};
use std::collections::HashMap;

/// The name of the bearer scheme in a guarded bridge's card.
pub const BEARER_SCHEME: &str = "bearer";

/// What the card says about where and how it is reached.
#[derive(Debug, Clone)]
pub struct CardConfig {
    /// The JSON-RPC endpoint's URL.
    pub endpoint: String,
    /// The RS fronted (named in the description).
    pub rs: String,
    /// Whether requests need `Authorization: Bearer`.
    pub bearer: bool,
}

/// The skill for one A2T tool signature: its id is the tool's name (or
/// `toolId`), the description lists the arguments. `None` for a signature
/// without a usable name.
pub fn skill(signature: &Value) -> Option<AgentSkill> {
    let id = signature["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or_else(|| signature["toolId"].as_str())?
        .to_owned();
    let params: Vec<String> = signature["input_parameters"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter_map(|p| {
            let name = p["name"].as_str().or_else(|| p["id"].as_str())?;
            let required = p["required"].as_bool().unwrap_or(false);
            let kind = p["type"].as_str().unwrap_or("string");
            Some(format!(
                "{name} ({kind}{})",
                if required { ", required" } else { "" }
            ))
        })
        .collect();
    let own = signature["description"].as_str().unwrap_or("").trim();
    let description = format!(
        "{}{}Send a data part {{\"tool\": \"{id}\", \"arguments\": {{…}}}}. Arguments: {}. \
         It may need its user's confirmation at a CHEQ confirmation server \
         (TASK_STATE_AUTH_REQUIRED, extension {EXTENSION_URI}).",
        own,
        if own.is_empty() { "" } else { " " },
        if params.is_empty() {
            "none".to_owned()
        } else {
            params.join(", ")
        }
    );
    let example = json!({"tool": id, "arguments": {}}).to_string();
    Some(AgentSkill {
        name: signature["title"].as_str().unwrap_or(&id).to_owned(),
        description,
        tags: vec!["a2t".into(), "cheq".into()],
        examples: vec![example],
        input_modes: vec!["application/json".into()],
        output_modes: vec!["application/json".into(), "text/plain".into()],
        id,
        ..Default::default()
    })
}

/// The card for the RS whose tool signatures are `tools`.
pub fn card(config: &CardConfig, tools: &[Value]) -> AgentCard {
    let mut card = AgentCard {
        name: "cheq A2A bridge".into(),
        description: format!(
            "The tools of the A2T resource server {} as an A2A agent. An action that needs its \
             user's confirmation waits in TASK_STATE_AUTH_REQUIRED with a link to the CHEQ \
             confirmation server; only the resource server's final state moves the task.",
            config.rs
        ),
        supported_interfaces: vec![AgentInterface {
            url: config.endpoint.clone(),
            protocol_binding: "JSONRPC".into(),
            protocol_version: crate::PROTOCOL_VERSION.into(),
            ..Default::default()
        }],
        version: env!("CARGO_PKG_VERSION").into(),
        capabilities: Some(AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extended_agent_card: Some(false),
            extensions: vec![AgentExtension {
                uri: EXTENSION_URI.into(),
                description: "CHEQ (draft-rosenberg-aiproto-cheq §6): a task in \
                              TASK_STATE_AUTH_REQUIRED carries the confirmation link as a \
                              data part {\"confirmation_url\": …}; the user decides there, \
                              outside the agents; nothing a client sends on the task decides."
                    .into(),
                required: false,
                params: None,
            }],
        }),
        default_input_modes: vec!["application/json".into()],
        default_output_modes: vec!["application/json".into(), "text/plain".into()],
        skills: tools.iter().filter_map(skill).collect(),
        ..Default::default()
    };
    if config.bearer {
        card.security_schemes = HashMap::from([(
            BEARER_SCHEME.to_owned(),
            SecurityScheme {
                scheme: Some(security_scheme::Scheme::HttpAuthSecurityScheme(
                    HttpAuthSecurityScheme {
                        description: "the contents of the bridge's --token-file".into(),
                        scheme: "Bearer".into(),
                        bearer_format: String::new(),
                    },
                )),
            },
        )]);
        card.security_requirements = vec![SecurityRequirement {
            schemes: HashMap::from([(BEARER_SCHEME.to_owned(), StringList { list: vec![] })]),
        }];
    }
    card
}

/// The card as JSON. ProtoJSON leaves out a `false`; the extension's
/// `required: false` is written out all the same, for whoever reads the
/// card without the proto.
pub fn card_json(config: &CardConfig, tools: &[Value]) -> Value {
    let mut v = serde_json::to_value(card(config, tools)).unwrap_or(Value::Null);
    if let Some(exts) = v["capabilities"]["extensions"].as_array_mut() {
        for e in exts.iter_mut().filter_map(Value::as_object_mut) {
            e.entry("required").or_insert(Value::Bool(false));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(bearer: bool) -> CardConfig {
        CardConfig {
            endpoint: "http://127.0.0.1:8092/".into(),
            rs: "http://127.0.0.1:8081".into(),
            bearer,
        }
    }

    #[test]
    fn one_skill_per_tool_and_the_extension_not_required() {
        let tools = vec![
            json!({"name": "book_flight", "description": "Books a flight.",
                   "input_parameters": [{"name": "price_usd", "type": "int", "required": true}]}),
            json!({"toolId": "t2"}),
            json!({"description": "no name"}),
        ];
        let card = card_json(&config(false), &tools);
        let ids: Vec<&str> = card["skills"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["book_flight", "t2"]);
        assert!(card["skills"][0]["description"]
            .as_str()
            .unwrap()
            .contains("price_usd (int, required)"));
        let ext = &card["capabilities"]["extensions"][0];
        assert_eq!(ext["uri"], EXTENSION_URI);
        assert_eq!(ext["required"], false, "{card}");
        assert_eq!(card["capabilities"]["streaming"], true);
        assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
        assert_eq!(card["supportedInterfaces"][0]["protocolVersion"], "1.0");
        assert!(card.get("securitySchemes").is_none(), "{card}");
    }

    #[test]
    fn a_guarded_bridge_declares_its_bearer() {
        let card = serde_json::to_value(card(&config(true), &[])).unwrap();
        assert_eq!(
            card["securitySchemes"][BEARER_SCHEME]["httpAuthSecurityScheme"]["scheme"], "Bearer",
            "{card}"
        );
        assert!(card["securityRequirements"][0]["schemes"][BEARER_SCHEME].is_object());
    }
}
