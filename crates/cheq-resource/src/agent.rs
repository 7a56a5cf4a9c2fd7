//! The agent's client of an A2T resource server: a token (RFC 6749 §4.4,
//! scope `cheq`), A2T tool calls (draft §7), and reads of a result URI
//! (PROTOCOL.md §7), honouring `Retry-After`; and the schedule on which a
//! bridge reads a pending confirmation's result ([`next_read_in`]). Used by
//! `cheq agent`, the MCP bridge (§11) and the A2A bridge.
//!
//! An [`Agent`] is made once per RS and shared: one HTTP client (so its
//! connections are kept and reused) and one token, cached until shortly
//! before it expires; concurrent callers that find no valid token share one
//! request to the token endpoint. Every answer read is bounded: a connect
//! timeout, a total timeout per request that covers the body, and a cap on
//! each body's size.
//!
//! A result URI is a capability (§1): no error made here names it, only its
//! origin and the path above it.

use cheq_core::cheq::UriPack;
use reqwest::header;
use serde_json::{json, Map, Value};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// Connect timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Total time one request may take, its body included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest body read from the RS (a tool list, a tool's output, a result).
pub const MAX_BODY: usize = 1024 * 1024;
/// Longest token answer read (a token answer is a few hundred bytes).
pub const MAX_TOKEN_BODY: usize = 16 * 1024;
/// A token is renewed this long before it expires.
pub const TOKEN_MARGIN: Duration = Duration::from_secs(30);
/// How long a token is kept when its answer gives no `expires_in`.
const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(300);
/// The longest `Retry-After` taken from a result (longer is read as this).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

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
    #[error("the answer of {url} is larger than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    #[error("no decision within {0:?}")]
    Timeout(Duration),
}

impl AgentError {
    /// Whether trying again later may succeed (the RS may come back).
    pub fn is_transient(&self) -> bool {
        match self {
            AgentError::Http(_) | AgentError::Timeout(_) => true,
            AgentError::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
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

/// One read of a result URI (§7).
#[derive(Debug, Clone, PartialEq)]
pub enum ResultRead {
    /// The final state.
    Final(ResultStatus),
    /// Not decided yet; the RS's `Retry-After`, when it gave one (at most
    /// [`MAX_RETRY_AFTER`]).
    Pending { retry_after: Option<Duration> },
}

/// A result URI as errors may name it: its origin and the path above it.
pub fn redacted(uri: &str) -> String {
    match url::Url::parse(uri) {
        Ok(u) => {
            let path = u.path();
            let above = path.rsplit_once('/').map_or("", |(head, _)| head);
            format!("{}{above}/…", u.origin().ascii_serialization())
        }
        Err(_) => "the result URI".to_owned(),
    }
}

fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Reads a body of at most `limit` bytes; `name` is how errors name its URL.
async fn read_limited(
    mut res: reqwest::Response,
    name: &str,
    limit: usize,
) -> Result<Vec<u8>, AgentError> {
    let too_large = || AgentError::TooLarge {
        url: name.to_owned(),
        limit,
    };
    if res.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = res.chunk().await.map_err(|e| e.without_url())? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A JSON body of at most `limit` bytes.
async fn read_json(res: reqwest::Response, name: &str, limit: usize) -> Result<Value, AgentError> {
    let body = read_limited(res, name, limit).await?;
    serde_json::from_slice(&body).map_err(|e| AgentError::Protocol {
        url: name.to_owned(),
        message: format!("not JSON: {e}"),
    })
}

/// The error an unexpected answer stands for; its words bounded and on one
/// line.
async fn error_of(name: &str, res: reqwest::Response) -> AgentError {
    let status = res.status().as_u16();
    let body = read_json(res, name, MAX_TOKEN_BODY)
        .await
        .unwrap_or(Value::Null);
    let words =
        |key: &str| cheq_support::text::snippet(body[key].as_str().unwrap_or("").as_bytes(), 200);
    AgentError::Status {
        url: name.to_owned(),
        status,
        error: words("error"),
        description: words("error_description"),
    }
}

fn retry_after(res: &reqwest::Response) -> Option<Duration> {
    res.headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER))
}

fn final_status(name: &str, body: &Value) -> Result<ResultStatus, AgentError> {
    match body["status"].as_str() {
        Some("accepted") => Ok(ResultStatus::Accepted(body["result"].clone())),
        Some("rejected") => Ok(ResultStatus::Rejected),
        Some("expired") => Ok(ResultStatus::Expired),
        other => Err(AgentError::Protocol {
            url: name.to_owned(),
            message: format!(
                "unknown status {}",
                cheq_support::text::snippet(other.unwrap_or("(none)").as_bytes(), 40)
            ),
        }),
    }
}

/// The agent at one RS: its HTTP client and its cached token.
pub struct Agent {
    base: String,
    client_id: String,
    secret: Zeroizing<String>,
    http: reqwest::Client,
    /// The cached token and until when it may be used.
    token: Mutex<Option<(Zeroizing<String>, Instant)>>,
    /// Held while a token is being requested (single flight).
    refresh: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("rs", &self.base)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// The agent `client_id` (with `secret`) at the RS whose base URL is
    /// `rs_base_url`.
    pub fn new(rs_base_url: &str, client_id: &str, secret: &str) -> Result<Agent, AgentError> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .build()?;
        Ok(Agent {
            base: rs_base_url.trim_end_matches('/').to_owned(),
            client_id: client_id.to_owned(),
            secret: Zeroizing::new(secret.to_owned()),
            http,
            token: Mutex::new(None),
            refresh: tokio::sync::Mutex::new(()),
        })
    }

    /// The RS's base URL.
    pub fn rs(&self) -> &str {
        &self.base
    }

    fn cached_token(&self) -> Option<String> {
        let guard = self.token.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .filter(|(_, until)| Instant::now() < *until)
            .map(|(t, _)| t.to_string())
    }

    /// Forgets `token` (refused by the RS), unless it was already replaced.
    fn forget_token(&self, token: &str) {
        let mut guard = self.token.lock().unwrap_or_else(|p| p.into_inner());
        if guard.as_ref().is_some_and(|(t, _)| t.as_str() == token) {
            *guard = None;
        }
    }

    /// An access token (scope `cheq`): the cached one while it has more
    /// than [`TOKEN_MARGIN`] to live, else a new one from
    /// `{rs}/oauth/token`, asked for once however many callers wait.
    pub async fn token(&self) -> Result<String, AgentError> {
        if let Some(t) = self.cached_token() {
            return Ok(t);
        }
        let _flight = self.refresh.lock().await;
        // The request this caller waited for may have brought one.
        if let Some(t) = self.cached_token() {
            return Ok(t);
        }
        let (token, lifetime) = self.request_token().await?;
        let until = Instant::now() + lifetime.saturating_sub(TOKEN_MARGIN);
        *self.token.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Zeroizing::new(token.clone()), until));
        Ok(token)
    }

    async fn request_token(&self) -> Result<(String, Duration), AgentError> {
        let url = format!("{}/oauth/token", self.base);
        let res = self
            .http
            .post(&url)
            .basic_auth(enc(&self.client_id), Some(enc(&self.secret)))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials&scope=cheq")
            .send()
            .await?;
        if !res.status().is_success() {
            return Err(error_of(&url, res).await);
        }
        let body = read_json(res, &url, MAX_TOKEN_BODY).await?;
        let token = body["access_token"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| AgentError::Protocol {
                url,
                message: "no access_token".into(),
            })?;
        let lifetime = body["expires_in"]
            .as_u64()
            .map_or(DEFAULT_TOKEN_LIFETIME, Duration::from_secs);
        Ok((token, lifetime))
    }

    /// Sends the request `make` builds with a token; a `401` (the RS may
    /// have restarted, or the token been revoked) is retried once with a
    /// new token.
    async fn send_with_token(
        &self,
        make: impl Fn(&str) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, AgentError> {
        let token = self.token().await?;
        let res = make(&token).send().await?;
        if res.status().as_u16() != 401 {
            return Ok(res);
        }
        self.forget_token(&token);
        let token = self.token().await?;
        Ok(make(&token).send().await?)
    }

    /// Invokes `tool` (its name or toolId) with `params` (input name → value).
    pub async fn invoke(
        &self,
        tool: &str,
        params: &Map<String, Value>,
    ) -> Result<InvokeOutcome, AgentError> {
        let url = format!("{}/tools/{}:invoke", self.base, tool);
        let inputs: Vec<Value> = params
            .iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect();
        let body = json!({"name": tool, "input_parameters": inputs});
        let res = self
            .send_with_token(|token| self.http.post(&url).bearer_auth(token).json(&body))
            .await?;
        match res.status().as_u16() {
            200 => Ok(InvokeOutcome::Done(read_json(res, &url, MAX_BODY).await?)),
            202 => {
                let location = res
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let bytes = read_limited(res, &url, MAX_BODY).await?;
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
    pub async fn list_tools(&self) -> Result<Vec<Value>, AgentError> {
        let url = format!("{}/tools", self.base);
        let res = self
            .send_with_token(|token| self.http.get(&url).bearer_auth(token))
            .await?;
        if !res.status().is_success() {
            return Err(error_of(&url, res).await);
        }
        match read_json(res, &url, MAX_BODY).await? {
            Value::Object(mut body) => match body.remove("items") {
                Some(Value::Array(items)) => Ok(items),
                _ => Err(AgentError::Protocol {
                    url,
                    message: "the tool list has no \"items\" array".into(),
                }),
            },
            _ => Err(AgentError::Protocol {
                url,
                message: "the tool list is not an object".into(),
            }),
        }
    }

    /// Reads a result URI once (§7).
    pub async fn read_result(&self, result_uri: &str) -> Result<ResultRead, AgentError> {
        let name = redacted(result_uri);
        let res = self
            .http
            .get(result_uri)
            .header(header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| e.without_url())?;
        match res.status().as_u16() {
            200 => {
                let body = read_json(res, &name, MAX_BODY).await?;
                Ok(ResultRead::Final(final_status(&name, &body)?))
            }
            202 => Ok(ResultRead::Pending {
                retry_after: retry_after(&res),
            }),
            _ => Err(error_of(&name, res).await),
        }
    }

    /// Reads a result URI once (§7): `None` while the decision is pending.
    pub async fn check_result(&self, result_uri: &str) -> Result<Option<ResultStatus>, AgentError> {
        Ok(match self.read_result(result_uri).await? {
            ResultRead::Final(s) => Some(s),
            ResultRead::Pending { .. } => None,
        })
    }

    /// Polls a result URI until a final answer or `timeout`, waiting as
    /// `Retry-After` says (at least 1 s, 2 s when absent).
    pub async fn poll_result(
        &self,
        result_uri: &str,
        timeout: Duration,
    ) -> Result<ResultStatus, AgentError> {
        let deadline = Instant::now() + timeout;
        loop {
            let wait = match self.read_result(result_uri).await? {
                ResultRead::Final(s) => return Ok(s),
                ResultRead::Pending { retry_after } => retry_after
                    .unwrap_or(Duration::from_secs(2))
                    .max(Duration::from_secs(1)),
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(AgentError::Timeout(timeout));
            }
            tokio::time::sleep(wait.min(deadline - now)).await;
        }
    }
}

/// Gets an access token (scope `cheq`) from `{rs_base_url}/oauth/token`.
pub async fn get_token(
    rs_base_url: &str,
    client_id: &str,
    secret: &str,
) -> Result<String, AgentError> {
    Agent::new(rs_base_url, client_id, secret)?.token().await
}

/// Invokes `tool` once, as a new [`Agent`] (a token of its own).
pub async fn invoke(
    rs_base_url: &str,
    client_id: &str,
    secret: &str,
    tool: &str,
    params: &Map<String, Value>,
) -> Result<InvokeOutcome, AgentError> {
    Agent::new(rs_base_url, client_id, secret)?
        .invoke(tool, params)
        .await
}

/// Lists the RS's A2T tool signatures once, as a new [`Agent`].
pub async fn list_tools(
    rs_base_url: &str,
    client_id: &str,
    secret: &str,
) -> Result<Vec<Value>, AgentError> {
    Agent::new(rs_base_url, client_id, secret)?
        .list_tools()
        .await
}

/// Reads a result URI once (§7): `None` while the decision is pending. A
/// result URI needs no token.
pub async fn check_result(result_uri: &str) -> Result<Option<ResultStatus>, AgentError> {
    Agent::new("", "", "")?.check_result(result_uri).await
}

/// Polls a result URI until a final answer or `timeout`, waiting as
/// `Retry-After` says (1–60 s, 2 s when absent).
pub async fn poll_result(result_uri: &str, timeout: Duration) -> Result<ResultStatus, AgentError> {
    Agent::new("", "", "")?
        .poll_result(result_uri, timeout)
        .await
}

// The schedule of a bridge that watches pending confirmations (the MCP and
// A2A bridges): when to read a result URI again.

/// The shortest wait between two reads of a pending call's result: the
/// first read comes this long after the call.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// The longest wait between two reads of a pending call's result that the
/// bridge chooses itself; the RS's `Retry-After` may ask for a longer one
/// (up to [`MAX_RETRY_AFTER`]).
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(10);
/// The longest wait after reads that failed in a row.
pub const MAX_ERROR_BACKOFF: Duration = Duration::from_secs(60);
/// How long until the next read of a pending confirmation that has been pending for `age`:
/// [`POLL_INTERVAL`] at first, then a tenth of its age (a user who has not
/// decided for a while is read less often), at most [`MAX_POLL_INTERVAL`];
/// never sooner than the RS's `Retry-After`.
pub fn next_read_in(age: Duration, retry_after: Option<Duration>) -> Duration {
    let own = (age / 10).clamp(POLL_INTERVAL, MAX_POLL_INTERVAL);
    own.max(retry_after.unwrap_or(Duration::ZERO))
}

/// How long until the next read after `failures` failed reads in a row.
pub fn error_backoff(failures: u32) -> Duration {
    POLL_INTERVAL
        .saturating_mul(1 << failures.min(8))
        .min(MAX_ERROR_BACKOFF)
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
    use super::{redacted, start_link, Agent};

    #[test]
    fn a_result_uri_is_named_without_its_secret_part() {
        assert_eq!(
            redacted("https://rs.example/cheq/results/s3cr3t"),
            "https://rs.example/cheq/results/…"
        );
        assert_eq!(redacted("not a URI s3cr3t"), "the result URI");
    }

    #[tokio::test]
    async fn a_failed_read_does_not_name_the_result_uri() {
        // Nothing listens on port 1 of loopback: the connection is refused.
        let agent = Agent::new("http://127.0.0.1:1", "agent", "secret").unwrap();
        let err = agent
            .read_result("http://127.0.0.1:1/cheq/results/s3cr3t")
            .await
            .unwrap_err();
        assert!(err.is_transient(), "{err:?}");
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
        assert!(!format!("{err:?}").contains("s3cr3t"), "{err:?}");
    }

    #[test]
    fn reads_wait_for_retry_after_and_thin_out_with_age() {
        use super::{
            error_backoff, next_read_in, MAX_ERROR_BACKOFF, MAX_POLL_INTERVAL, POLL_INTERVAL,
        };
        use std::time::Duration;
        let s = Duration::from_secs;
        assert_eq!(next_read_in(s(0), None), POLL_INTERVAL);
        assert_eq!(next_read_in(s(0), Some(s(1))), POLL_INTERVAL);
        assert_eq!(next_read_in(s(0), Some(s(9))), s(9));
        assert_eq!(next_read_in(s(60), None), s(6));
        assert_eq!(next_read_in(s(3600), None), MAX_POLL_INTERVAL);
        assert_eq!(next_read_in(s(3600), Some(s(45))), s(45));
        assert_eq!(error_backoff(1), 2 * POLL_INTERVAL);
        assert!(error_backoff(2) > error_backoff(1));
        assert_eq!(error_backoff(u32::MAX), MAX_ERROR_BACKOFF);
    }

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
