//! An A2T tool signature (draft A2T §6.1) as an MCP tool definition: name,
//! description and a JSON Schema 2020-12 `inputSchema` drawn from the
//! signature's input parameters (PROTOCOL.md §11).

use serde_json::{json, Map, Value};

/// Why a signature cannot be offered as an MCP tool.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SchemaError {
    #[error("a tool signature has no usable \"name\"")]
    NoName,
    #[error("tool {tool}: input parameter {index} has no \"name\"")]
    NoInputName { tool: String, index: usize },
}

/// An MCP tool definition.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    pub input_schema: Map<String, Value>,
}

/// MCP tool names: 1–128 of `A-Z a-z 0-9 _ - .` (MCP 2025-11-25 "Tool names").
pub fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn param_schema(p: &Value) -> Value {
    let mut s = Map::new();
    match p["type"].as_str() {
        Some("int") | Some("integer") => {
            s.insert("type".into(), "integer".into());
            if let Some(max) = p["max"].as_i64() {
                s.insert("maximum".into(), max.into());
            }
        }
        Some("number") | Some("float") => {
            s.insert("type".into(), "number".into());
        }
        Some("boolean") | Some("bool") => {
            s.insert("type".into(), "boolean".into());
        }
        Some("enum") => {
            let values: Vec<Value> = p["allowed-values"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v["name"].as_str().map(Value::from))
                        .collect()
                })
                .unwrap_or_default();
            s.insert("type".into(), "string".into());
            s.insert("enum".into(), Value::Array(values));
        }
        _ => {
            s.insert("type".into(), "string".into());
            if let Some(f) = p["format"].as_str() {
                s.insert("format".into(), f.into());
            }
        }
    }
    let mut description = p["description"].as_str().unwrap_or("").to_owned();
    if let Some(values) = p["allowed-values"].as_array() {
        let lines: Vec<String> = values
            .iter()
            .filter_map(|v| {
                Some(format!(
                    "{}: {}",
                    v["name"].as_str()?,
                    v["description"].as_str().unwrap_or("")
                ))
            })
            .collect();
        if !lines.is_empty() {
            description = format!("{description} ({})", lines.join("; "));
        }
    }
    if !description.is_empty() {
        s.insert("description".into(), description.into());
    }
    Value::Object(s)
}

/// The MCP tool for one A2T signature. The MCP name is the signature's
/// `name` when it is a valid MCP tool name, else its `toolId`.
pub fn tool_def(signature: &Value) -> Result<ToolDef, SchemaError> {
    let a2t_name = signature["name"].as_str().unwrap_or("");
    let name = if valid_tool_name(a2t_name) {
        a2t_name.to_owned()
    } else {
        match signature["toolId"].as_str() {
            Some(id) if valid_tool_name(id) => id.to_owned(),
            _ => return Err(SchemaError::NoName),
        }
    };
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (index, p) in signature["input_parameters"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .enumerate()
    {
        let pname = p["name"]
            .as_str()
            .or_else(|| p["id"].as_str())
            .ok_or_else(|| SchemaError::NoInputName {
                tool: name.clone(),
                index,
            })?;
        properties.insert(pname.to_owned(), param_schema(p));
        if p["required"].as_bool().unwrap_or(false) {
            required.push(Value::from(pname));
        }
    }
    let schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    let input_schema = match schema {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    Ok(ToolDef {
        title: (a2t_name != name && !a2t_name.is_empty()).then(|| a2t_name.to_owned()),
        description: signature["description"].as_str().unwrap_or("").to_owned(),
        name,
        input_schema,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cheq_resource::tools::catalogue;

    #[test]
    fn book_flight_signature_becomes_a_schema() {
        let sig = catalogue()
            .into_iter()
            .find(|t| t.name == "book_flight")
            .unwrap()
            .signature();
        let def = tool_def(&sig).unwrap();
        assert_eq!(def.name, "book_flight");
        let props = &def.input_schema["properties"];
        assert_eq!(props["flight_number"]["type"], "string");
        assert_eq!(props["flight_date"]["format"], "date");
        assert_eq!(props["cabin_class"]["enum"][0], "ECONOMY");
        assert!(props["cabin_class"]["description"]
            .as_str()
            .unwrap()
            .contains("FIRST: The top tier"));
        let required = def.input_schema["required"].as_array().unwrap();
        assert!(required.contains(&Value::from("flight_number")));
        assert_eq!(def.input_schema["additionalProperties"], false);
    }

    #[test]
    fn int_with_max_and_names() {
        let sig = json!({"name": "Pay someone", "toolId": "pay-1",
            "input_parameters": [{"name": "amount", "type": "int", "max": 500, "required": true}]});
        let def = tool_def(&sig).unwrap();
        assert_eq!(def.name, "pay-1");
        assert_eq!(def.title.as_deref(), Some("Pay someone"));
        assert_eq!(def.input_schema["properties"]["amount"]["maximum"], 500);
        assert_eq!(
            tool_def(&json!({"name": "no good"})),
            Err(SchemaError::NoName)
        );
        assert!(matches!(
            tool_def(&json!({"name": "t", "input_parameters": [{"type": "int"}]})),
            Err(SchemaError::NoInputName { .. })
        ));
    }
}
