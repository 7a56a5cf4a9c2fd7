//! A small agent-side client of the reference RS: get a token (RFC 6749 §4.4),
//! invoke an A2T tool (draft §7), and poll a result URI (PROTOCOL.md §7),
//! honouring `Retry-After`. Used by `cheq agent`.

use crate::cheq::UriPack;
use reqwest::header;
use serde_json::{json, Map, Value};
use std::time::{Duration, Instant};

/// Why an agent call failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("HTTP: {0}")]
    Http(#[from] reqwest::Error),
    #[error("{url} answered {status}: {error}: {description}")]
    Status {
        url: String,
        status: u16,
        error: String,
        description: String,
    },
    #[error("unexpected answer from {url}: {message}")]
    Protocol { url: String, message: String },
    #[error("no decision within {0:?}")]
    Timeout(Duration),
}

/// What an invocation gave.
#[derive(Debug, Clone, PartialEq)]
pub enum InvokeOutcome {
    /// It ran at once (`200`); the A2T output object.
    Done(Value),
    /// It needs the user's confirmation (`202`): the URI pack (§1).
    NeedsConfirmation(UriPack),
}

/// A final result (§7).
#[derive(Debug, Clone, PartialEq)]
pub enum ResultStatus {
    Accepted(Value),
    Rejected,
    Expired,
}

fn client() -> Result<reqwest::Client, AgentError> {
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?)
}

async fn error_of(url: &str, res: reqwest::Response) -> AgentError {
    let status = res.status().as_u16();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    AgentError::Status {
        url: url.to_owned(),
        status,
        error: body["error"].as_str().unwrap_or("").to_owned(),
        description: body["error_description"].as_str().unwrap_or("").to_owned(),
    }
}

fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Gets an access token (scope `cheq`) from `{rs_base_url}/oauth/token`.
pub async fn get_token(
    rs_base_url: &str,
    client_id: &str,
    secret: &str,
) -> Result<String, AgentError> {
    let url = format!("{}/oauth/token", rs_base_url.trim_end_matches('/'));
    let res = client()?
        .post(&url)
        .basic_auth(enc(client_id), Some(enc(secret)))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body("grant_type=client_credentials&scope=cheq")
        .send()
        .await?;
    if !res.status().is_success() {
        return Err(error_of(&url, res).await);
    }
    let body: Value = res.json().await?;
    body["access_token"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| AgentError::Protocol {
            url,
            message: "no access_token".into(),
        })
}

/// Invokes `tool` (its name or toolId) with `params` (input name → value).
pub async fn invoke(
    rs_base_url: &str,
    client_id: &str,
    secret: &str,
    tool: &str,
    params: &Map<String, Value>,
) -> Result<InvokeOutcome, AgentError> {
    let token = get_token(rs_base_url, client_id, secret).await?;
    let url = format!(
        "{}/tools/{}:invoke",
        rs_base_url.trim_end_matches('/'),
        tool
    );
    let inputs: Vec<Value> = params
        .iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    let res = client()?
        .post(&url)
        .bearer_auth(token)
        .json(&json!({"name": tool, "input_parameters": inputs}))
        .send()
        .await?;
    match res.status().as_u16() {
        200 => Ok(InvokeOutcome::Done(res.json().await?)),
        202 => {
            let location = res
                .headers()
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let bytes = res.bytes().await?;
            let pack = UriPack::parse(&bytes).map_err(|e| AgentError::Protocol {
                url: url.clone(),
                message: e.to_string(),
            })?;
            if location.as_deref() != Some(pack.result_uri.as_str()) {
                return Err(AgentError::Protocol {
                    url,
                    message: "Location is not the result uri of the URI pack".into(),
                });
            }
            Ok(InvokeOutcome::NeedsConfirmation(pack))
        }
        _ => Err(error_of(&url, res).await),
    }
}

/// Lists the RS's A2T tool signatures (`GET {rs}/tools`, draft A2T §6).
pub async fn list_tools(
    rs_base_url: &str,
    client_id: &str,
    secret: &str,
) -> Result<Vec<Value>, AgentError> {
    let token = get_token(rs_base_url, client_id, secret).await?;
    let url = format!("{}/tools", rs_base_url.trim_end_matches('/'));
    let res = client()?.get(&url).bearer_auth(token).send().await?;
    if !res.status().is_success() {
        return Err(error_of(&url, res).await);
    }
    let body: Value = res.json().await?;
    match body.get("items") {
        Some(Value::Array(items)) => Ok(items.clone()),
        _ => Err(AgentError::Protocol {
            url,
            message: "the tool list has no \"items\" array".into(),
        }),
    }
}

/// Reads a result URI once (§7): `None` while the decision is pending.
pub async fn check_result(result_uri: &str) -> Result<Option<ResultStatus>, AgentError> {
    let res = client()?
        .get(result_uri)
        .header(header::ACCEPT, "application/json")
        .send()
        .await?;
    match res.status().as_u16() {
        200 => {
            let body: Value = res.json().await?;
            final_status(result_uri, &body).map(Some)
        }
        202 => Ok(None),
        _ => Err(error_of(result_uri, res).await),
    }
}

fn final_status(result_uri: &str, body: &Value) -> Result<ResultStatus, AgentError> {
    match body["status"].as_str() {
        Some("accepted") => Ok(ResultStatus::Accepted(body["result"].clone())),
        Some("rejected") => Ok(ResultStatus::Rejected),
        Some("expired") => Ok(ResultStatus::Expired),
        _ => Err(AgentError::Protocol {
            url: result_uri.to_owned(),
            message: format!("unknown status in {body}"),
        }),
    }
}

/// Polls a result URI until a final answer or `timeout`, waiting as
/// `Retry-After` says (1–30 s, 2 s when absent).
pub async fn poll_result(result_uri: &str, timeout: Duration) -> Result<ResultStatus, AgentError> {
    let deadline = Instant::now() + timeout;
    let http = client()?;
    loop {
        let res = http
            .get(result_uri)
            .header(header::ACCEPT, "application/json")
            .send()
            .await?;
        let status = res.status().as_u16();
        let retry = res
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(2)
            .clamp(1, 30);
        match status {
            200 => {
                let body: Value = res.json().await?;
                return final_status(result_uri, &body);
            }
            202 => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(AgentError::Timeout(timeout));
                }
                let wait = Duration::from_secs(retry).min(deadline - now);
                tokio::time::sleep(wait).await;
            }
            _ => return Err(error_of(result_uri, res).await),
        }
    }
}

/// The link a browser opens to start confirming: the CS's start page with the
/// resource URI as a query parameter (§2, §11).
pub fn start_link(confirmation_uri: &str, resource_uri: &str) -> String {
    match url::Url::parse(confirmation_uri) {
        Ok(mut u) => {
            u.query_pairs_mut()
                .append_pair("resource_uri", resource_uri);
            u.to_string()
        }
        Err(_) => {
            let enc: String =
                url::form_urlencoded::byte_serialize(resource_uri.as_bytes()).collect();
            let sep = if confirmation_uri.contains('?') {
                '&'
            } else {
                '?'
            };
            format!("{confirmation_uri}{sep}resource_uri={enc}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::start_link;

    #[test]
    fn start_link_encodes_the_resource_uri() {
        assert_eq!(
            start_link("https://cs.example", "https://rs.example/cheq/a?b=c&d"),
            "https://cs.example/?resource_uri=https%3A%2F%2Frs.example%2Fcheq%2Fa%3Fb%3Dc%26d"
        );
        assert_eq!(
            start_link("https://cs.example/confirm?x=1", "https://rs.example/r"),
            "https://cs.example/confirm?x=1&resource_uri=https%3A%2F%2Frs.example%2Fr"
        );
    }
}
