//! Talking to a registered resource server (PROTOCOL.md §3, §6): an OAuth 2.0
//! client-credentials token (RFC 6749 §4.4, scope `cheq`) cached until
//! shortly before it expires, `GET <resource uri>` for the resource-signed
//! CHEQ, and `POST <resource uri>?accept|reject` for the decision.
//!
//! The CS authenticates at the token endpoint in one of two ways
//! ([`ClientAuth`]): with the client id and secret the RS issued (HTTP Basic,
//! through the `oauth2` crate), or with a client assertion signed by its own
//! active key (§16.4, RFC 7523 §2.2: `private_key_jwt`), made afresh for each
//! token request (a new `jti`, `aud` the token endpoint, 60 s of life).
//!
//! A resource server that registered itself (§16.3) is reached through
//! clients built from `cheq_support::outbound::client_builder`: the
//! operator's address policy applies to every connection, so a registered
//! origin whose name comes to resolve to a refused address is not reached.
//!
//! Everything read from an RS is bounded: a connect timeout, a total timeout
//! per request that covers reading the body (so a user gets an answer within
//! 15 s even from an RS that never answers), a cap on every body read — the
//! token endpoint's answer included, which goes through [`read_limited`] like
//! the CHEQ and the answer to a decision rather than through the `oauth2`
//! crate's own reqwest client (that one reads a body of any size) — and no
//! redirect followed at all.
//!
//! Concurrent callers that find no valid token share one request to the token
//! endpoint (single flight): the first one asks, the others wait for its
//! answer, success or failure, instead of each asking on its own.

use cheq_core::cheq::{Decision, DecisionAnswer};
use cheq_core::sign::assertion::ASSERTION_TYPE;
use cheq_support::outbound::AddressPolicy;
use oauth2::basic::BasicClient;
use oauth2::{ClientId, ClientSecret, Scope, TokenResponse, TokenUrl};
use reqwest::header;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use thread_local::ThreadLocal;
use tokio::sync::Mutex as AsyncMutex;

mod auth;
mod capped;

pub use auth::{AssertionSigner, ClientAuth};
pub(crate) use capped::{read_capped, send_capped, Capped};

/// Longest resource-signed CHEQ read: 64 KiB of payload (§4) is 87,382
/// base64url characters, plus the header and signature.
pub const MAX_CHEQ_BODY: usize = 96 * 1024;
/// Longest answer to a decision read.
pub const MAX_ANSWER_BODY: usize = 16 * 1024;
/// Longest answer of a token endpoint read (a token answer is a few hundred
/// bytes).
pub const MAX_TOKEN_BODY: usize = 16 * 1024;
/// Connect timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Total time one request (token, fetch or decision) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(6);
/// A token is renewed this long before it expires.
const TOKEN_MARGIN: Duration = Duration::from_secs(30);

/// Why talking to the RS failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("the resource server could not be reached: {0}")]
    Unreachable(String),
    #[error("the resource server did not answer in time")]
    Timeout,
    #[error("the resource server's {what} is larger than {limit} bytes")]
    TooLarge { what: &'static str, limit: usize },
    #[error("the resource server redirected to {0}, which is not followed")]
    Redirected(String),
    #[error("the resource server refused this confirmation service's credentials: {0}")]
    Unauthorized(String),
    #[error("the resource server does not know this confirmation")]
    NotFound,
    #[error("the resource server says this confirmation has expired or was already decided")]
    Gone,
    /// An unexpected status; `body` (its start) is for the log, not for users.
    #[error("the resource server answered HTTP {status}")]
    Status { status: u16, body: String },
    /// This service could not sign its client assertion (§16.4): no key is
    /// active, or its file cannot be read.
    #[error("this confirmation service cannot sign its client assertion: {0}")]
    CannotSign(String),
}

impl FetchError {
    /// Worth trying again later (the RS may come back)?
    pub fn is_transient(&self) -> bool {
        match self {
            FetchError::Unreachable(_) | FetchError::Timeout | FetchError::CannotSign(_) => true,
            FetchError::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}

/// The RS's answer to a delivered decision (§6), read into protocol words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RsAnswer {
    /// `200 {"status":"accepted"|"rejected"}`: recorded.
    Recorded(DecisionAnswer),
    /// `410`: the CHEQ expired before the decision arrived.
    Expired,
    /// `401`/`403`: our credentials were refused (worth trying again later).
    Unauthorized { status: u16 },
    /// Any other answer: the RS will not take this decision (400, 409, …).
    Refused {
        status: u16,
        /// The `error` code, bounded and on one line.
        error: String,
        /// The RS's own `error_description`, bounded and on one line.
        description: String,
    },
}

/// Longest `error` or `error_description` kept from an RS's answer.
pub const MAX_RS_WORDS: usize = 200;

/// A client for one resource server.
pub struct RsClient {
    /// One HTTP client per thread: hyper drives a connection on the runtime
    /// that opened it, so with one client shared by the server's workers, a
    /// request on a connection another worker opened was handed to that
    /// worker's thread, and its answer back: wake-ups of another worker on
    /// every flow.
    clients: ThreadLocal<reqwest::Client>,
    /// The TLS connector every thread's client shares (see [`http_client`]).
    tls: native_tls::TlsConnector,
    /// The addresses that may be connected to, for an RS that registered
    /// itself; `None` for one of the operator's configuration.
    policy: Option<AddressPolicy>,
    /// The client of the thread that made this one, also used by a thread
    /// whose own could not be built.
    shared: reqwest::Client,
    /// How a token is asked for.
    auth: TokenAuth,
    /// The cached token and until when it may be used.
    token: Mutex<Option<(String, Instant)>>,
    /// Held while a token is being requested (single flight); it keeps the
    /// last failure and when it came, for the callers that waited for it.
    refresh: AsyncMutex<Option<(FetchError, Instant)>>,
}

impl std::fmt::Debug for RsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RsClient").finish_non_exhaustive()
    }
}

fn classify(e: reqwest::Error) -> FetchError {
    if e.is_timeout() {
        FetchError::Timeout
    } else if e.is_redirect() {
        FetchError::Redirected(
            e.url()
                .map(|u| u.origin().ascii_serialization())
                .unwrap_or_default(),
        )
    } else {
        // Without the URL: it may carry the capability.
        FetchError::Unreachable(e.without_url().to_string())
    }
}

/// How [`RsClient`] asks for a token.
enum TokenAuth {
    /// Through the `oauth2` crate, with the client id and secret.
    Secret(
        Box<
            BasicClient<
                oauth2::EndpointNotSet,
                oauth2::EndpointNotSet,
                oauth2::EndpointNotSet,
                oauth2::EndpointNotSet,
                oauth2::EndpointSet,
            >,
        >,
    ),
    /// With a client assertion for `token_url`, whose audience is the
    /// token endpoint exactly as the RS's document (or the configuration)
    /// writes it (§16.4), not as the URL parser normalises it.
    Assertion {
        signer: AssertionSigner,
        token_url: url::Url,
        audience: String,
    },
}

/// The TLS connector of the CS's clients: what reqwest builds by default
/// (the system's root certificates, host names and certificates checked,
/// SNI), built once. Building it reads and parses the system's root
/// certificates, twice over: each thread's first request to an RS paid
/// that when every client built its own, and the first confirmations after
/// a start waited for it (BENCHMARKS.md: the p99 of a fresh demo). The
/// clients of registered resource servers share one
/// ([`RsClient::with`]).
pub fn tls_connector() -> Result<native_tls::TlsConnector, String> {
    native_tls::TlsConnector::builder()
        .build()
        .map_err(|e| e.to_string())
}

/// An HTTP client as the CS talks to resource servers, over `tls`, under
/// `policy` when the RS registered itself.
fn http_client(
    tls: &native_tls::TlsConnector,
    policy: Option<&AddressPolicy>,
) -> Result<reqwest::Client, String> {
    let builder = match policy {
        Some(policy) => cheq_support::outbound::client_builder(policy),
        None => reqwest::Client::builder(),
    };
    builder
        .use_preconfigured_tls(tls.clone())
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        // No redirect is followed: a CHEQ lives at its resource URI, and
        // a redirect could lead outside the registered prefix with our token.
        .redirect(reqwest::redirect::Policy::none())
        // Per thread, as the shared client had: the idle connections are
        // only those that were in use together on one thread.
        .pool_max_idle_per_host(64)
        .build()
        .map_err(|e| e.to_string())
}

impl RsClient {
    /// A client for the RS whose token endpoint is `token_url`, with the
    /// client id and secret it issued.
    pub fn new(token_url: &str, client_id: &str, client_secret: &str) -> Result<Self, String> {
        Self::with(
            token_url,
            ClientAuth::Secret {
                client_id: client_id.to_owned(),
                client_secret: client_secret.to_owned(),
            },
            None,
            &tls_connector()?,
        )
    }

    /// A client for the RS whose token endpoint is `token_url`,
    /// authenticating as `auth` says, connecting only where `policy`
    /// permits when one is given (an RS that registered itself), over the
    /// TLS connector `tls`.
    pub fn with(
        token_url: &str,
        auth: ClientAuth,
        policy: Option<AddressPolicy>,
        tls: &native_tls::TlsConnector,
    ) -> Result<Self, String> {
        let shared = http_client(tls, policy.as_ref())?;
        let auth = match auth {
            ClientAuth::Secret {
                client_id,
                client_secret,
            } => {
                let token_url = TokenUrl::new(token_url.to_owned()).map_err(|e| e.to_string())?;
                TokenAuth::Secret(Box::new(
                    BasicClient::new(ClientId::new(client_id))
                        .set_client_secret(ClientSecret::new(client_secret))
                        .set_token_uri(token_url),
                ))
            }
            ClientAuth::Assertion(signer) => TokenAuth::Assertion {
                signer,
                token_url: cheq_core::cheq::uri::parse_cheq_uri(token_url)
                    .map_err(|e| e.to_string())?,
                audience: token_url.to_owned(),
            },
        };
        let clients = ThreadLocal::new();
        clients.get_or(|| shared.clone());
        Ok(RsClient {
            clients,
            tls: tls.clone(),
            policy,
            shared,
            auth,
            token: Mutex::new(None),
            refresh: AsyncMutex::new(None),
        })
    }

    /// This thread's HTTP client.
    fn http(&self) -> &reqwest::Client {
        self.clients.get_or(|| {
            http_client(&self.tls, self.policy.as_ref()).unwrap_or_else(|e| {
                log::warn!("cannot build an HTTP client for this thread ({e}); sharing one");
                self.shared.clone()
            })
        })
    }

    fn cached_token(&self) -> Option<String> {
        let guard = self.token.lock().ok()?;
        guard
            .as_ref()
            .filter(|(_, until)| Instant::now() < *until)
            .map(|(t, _)| t.clone())
    }

    /// Forgets `token` (refused by the RS), unless it was already replaced.
    fn forget_token(&self, token: &str) {
        if let Ok(mut guard) = self.token.lock() {
            if guard.as_ref().is_some_and(|(t, _)| t == token) {
                *guard = None;
            }
        }
    }

    /// A bearer token for this RS, from the cache or the token endpoint; one
    /// request at a time, shared by every caller that waits for it.
    pub async fn token(&self) -> Result<String, FetchError> {
        if let Some(t) = self.cached_token() {
            return Ok(t);
        }
        let asked = Instant::now();
        let mut last_failure = self.refresh.lock().await;
        // The request this caller waited for may have brought a token …
        if let Some(t) = self.cached_token() {
            return Ok(t);
        }
        // … or failed: its answer is this caller's too.
        if let Some((e, at)) = last_failure.as_ref() {
            if *at >= asked {
                return Err(e.clone());
            }
        }
        match self.request_token().await {
            Ok((token, lifetime)) => {
                if let Ok(mut guard) = self.token.lock() {
                    *guard = Some((token.clone(), Instant::now() + lifetime));
                }
                *last_failure = None;
                Ok(token)
            }
            Err(e) => {
                *last_failure = Some((e.clone(), Instant::now()));
                Err(e)
            }
        }
    }

    /// One client-credentials request (RFC 6749 §4.4): the token and how long
    /// to keep it.
    async fn request_token(&self) -> Result<(String, Duration), FetchError> {
        let oauth = match &self.auth {
            TokenAuth::Secret(oauth) => oauth,
            TokenAuth::Assertion {
                signer,
                token_url,
                audience,
            } => {
                return self
                    .request_token_by_assertion(signer, token_url, audience)
                    .await
            }
        };
        // The client is a handle (cloning it shares its pool); a future that
        // owns one borrows nothing, which keeps the caller's future `Send`.
        let bounded = |request: oauth2::HttpRequest| token_http(self.http().clone(), request);
        let answer = oauth
            .exchange_client_credentials()
            .add_scope(Scope::new("cheq".to_owned()))
            .request_async(&bounded)
            .await
            .map_err(|e| match e {
                oauth2::RequestTokenError::ServerResponse(r) => FetchError::Unauthorized(
                    cheq_support::text::snippet(r.error().to_string().as_bytes(), MAX_RS_WORDS),
                ),
                oauth2::RequestTokenError::Request(e) => e,
                other => FetchError::Unreachable(format!("token endpoint: {other}")),
            })?;
        let token = answer.access_token().secret().clone();
        let lifetime = answer
            .expires_in()
            .unwrap_or(Duration::from_secs(60))
            .saturating_sub(TOKEN_MARGIN)
            .max(Duration::from_secs(1));
        Ok((token, lifetime))
    }

    /// One client-credentials request authenticated by a client assertion
    /// (§16.4; RFC 7523 §2.2): the token and how long to keep it. The
    /// answer is read as RFC 6749 §5.1 and §5.2 say, at most
    /// [`MAX_TOKEN_BODY`] bytes of it.
    async fn request_token_by_assertion(
        &self,
        signer: &AssertionSigner,
        token_url: &url::Url,
        audience: &str,
    ) -> Result<(String, Duration), FetchError> {
        let assertion = signer.assertion(audience)?;
        let res = self
            .http()
            .post(token_url.clone())
            .header(header::ACCEPT, "application/json")
            .form(&[
                ("grant_type", "client_credentials"),
                ("scope", "cheq"),
                ("client_assertion_type", ASSERTION_TYPE),
                ("client_assertion", assertion.as_str()),
            ])
            .send()
            .await
            .map_err(classify)?;
        let status = res.status().as_u16();
        let body = read_limited(res, "token answer", MAX_TOKEN_BODY).await?;
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let word = |k: &str| {
            let t = json.get(k).and_then(|v| v.as_str()).unwrap_or("");
            cheq_support::text::snippet(t.as_bytes(), MAX_RS_WORDS)
        };
        match status {
            200 => {}
            300..=399 => return Err(FetchError::Redirected("elsewhere".into())),
            400 | 401 | 403 => {
                let error = word("error");
                return Err(FetchError::Unauthorized(if error.is_empty() {
                    format!("HTTP {status}")
                } else {
                    error
                }));
            }
            _ => {
                return Err(FetchError::Status {
                    status,
                    body: snippet(&body),
                })
            }
        }
        let token = json
            .get("access_token")
            .and_then(|v| v.as_str())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| FetchError::Status {
                status,
                body: "the token answer holds no access_token".into(),
            })?;
        let bearer = json
            .get("token_type")
            .and_then(|v| v.as_str())
            .is_some_and(|t| t.eq_ignore_ascii_case("bearer"));
        if !bearer {
            return Err(FetchError::Status {
                status,
                body: "the token answer's token_type is not Bearer".into(),
            });
        }
        let lifetime = json
            .get("expires_in")
            .and_then(serde_json::Value::as_u64)
            .map_or(Duration::from_secs(60), Duration::from_secs)
            .saturating_sub(TOKEN_MARGIN)
            .max(Duration::from_secs(1));
        Ok((token.to_owned(), lifetime))
    }

    /// Sends a request made by `make` with a bearer token; a 401 (the RS may
    /// have restarted and forgotten our token) is retried once with a new one.
    async fn send(
        &self,
        make: impl Fn(&str) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, FetchError> {
        for attempt in 0..2 {
            let token = self.token().await?;
            let res = make(&token).send().await.map_err(classify)?;
            if res.status() == reqwest::StatusCode::UNAUTHORIZED && attempt == 0 {
                self.forget_token(&token);
                continue;
            }
            return Ok(res);
        }
        Err(FetchError::Unauthorized("HTTP 401".into()))
    }

    /// `GET <resource uri>` (§3): the resource-signed CHEQ's bytes.
    pub async fn fetch_cheq(&self, resource_uri: &str) -> Result<Vec<u8>, FetchError> {
        let res = self
            .send(|token| {
                self.http()
                    .get(resource_uri)
                    .header(header::ACCEPT, "application/jose+json")
                    .bearer_auth(token)
            })
            .await?;
        let status = res.status().as_u16();
        let body = read_limited(res, "CHEQ", MAX_CHEQ_BODY).await?;
        match status {
            200 => Ok(body),
            300..=399 => Err(FetchError::Redirected("elsewhere".into())),
            401 | 403 => Err(FetchError::Unauthorized(format!("HTTP {status}"))),
            404 => Err(FetchError::NotFound),
            410 => Err(FetchError::Gone),
            _ => Err(FetchError::Status {
                status,
                body: snippet(&body),
            }),
        }
    }

    /// `POST <resource uri>?accept|reject` (§6) with the two-signature document.
    pub async fn deliver(
        &self,
        resource_uri: &str,
        decision: Decision,
        document: &str,
    ) -> Result<RsAnswer, FetchError> {
        let sep = if resource_uri.contains('?') { '&' } else { '?' };
        let url = format!("{resource_uri}{sep}{decision}");
        let res = self
            .send(|token| {
                self.http()
                    .post(&url)
                    .header(header::CONTENT_TYPE, "application/jose+json")
                    .bearer_auth(token)
                    .body(document.to_owned())
            })
            .await?;
        let status = res.status().as_u16();
        let body = read_limited(res, "answer to the decision", MAX_ANSWER_BODY).await?;
        if status >= 500 || status == 429 || (300..400).contains(&status) {
            return Err(FetchError::Status {
                status,
                body: snippet(&body),
            });
        }
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let text = |k: &str| {
            let t = json.get(k).and_then(|v| v.as_str()).unwrap_or("");
            cheq_support::text::snippet(t.as_bytes(), MAX_RS_WORDS)
        };
        Ok(match status {
            200 => match DecisionAnswer::from_json(&json) {
                Some(a) => RsAnswer::Recorded(a),
                None => RsAnswer::Refused {
                    status,
                    error: "unreadable_answer".into(),
                    description: format!("the answer names no decision: {}", text("status")),
                },
            },
            410 => RsAnswer::Expired,
            401 | 403 => RsAnswer::Unauthorized { status },
            _ => RsAnswer::Refused {
                status,
                error: text("error"),
                description: text("error_description"),
            },
        })
    }
}

/// The HTTP client the `oauth2` crate sends the token request through: the
/// bounded client of [`RsClient`] (timeouts, no redirect) and a body read of
/// at most [`MAX_TOKEN_BODY`] bytes.
async fn token_http(
    http: reqwest::Client,
    request: oauth2::HttpRequest,
) -> Result<oauth2::HttpResponse, FetchError> {
    send_capped(&http, request, MAX_TOKEN_BODY)
        .await
        .map_err(|e| match e {
            Capped::TooLarge => FetchError::TooLarge {
                what: "token answer",
                limit: MAX_TOKEN_BODY,
            },
            Capped::Http(e) => classify(e),
        })
}

/// [`read_capped`] for an RS's answer (`what`, for the error).
async fn read_limited(
    res: reqwest::Response,
    what: &'static str,
    limit: usize,
) -> Result<Vec<u8>, FetchError> {
    read_capped(res, limit).await.map_err(|e| match e {
        Capped::TooLarge => FetchError::TooLarge { what, limit },
        Capped::Http(e) => classify(e),
    })
}

/// The start of a body, for an error message.
fn snippet(body: &[u8]) -> String {
    cheq_support::text::snippet(body, 200)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cheq_core::sign::assertion::{verify_client_assertion, Expected};
    use cheq_support::keyring::KeyRing;
    use cheq_support::time::{Clock, ManualClock};
    use std::collections::HashSet;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::Arc;

    /// What the token endpoint read of one request.
    #[derive(Debug, Clone)]
    struct Seen {
        form: Vec<(String, String)>,
        authorization: Option<String>,
    }

    impl Seen {
        fn value(&self, name: &str) -> Option<&str> {
            self.form
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        }
    }

    /// A token endpoint on a real loopback socket, answering each request
    /// with `answer(its own URL, the request)`: (status, JSON body). Every
    /// request it read is kept in the returned list.
    fn token_endpoint(
        answer: impl Fn(&str, &Seen) -> (u16, String) + Send + 'static,
    ) -> (String, Arc<Mutex<Vec<Seen>>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "http://127.0.0.1:{}/oauth/token",
            listener.local_addr().unwrap().port()
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (own, kept) = (url.clone(), seen.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let (mut length, mut authorization) = (0, None);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    if let Some((k, v)) = line.split_once(':') {
                        match k.to_ascii_lowercase().as_str() {
                            "content-length" => length = v.trim().parse().unwrap_or(0),
                            "authorization" => authorization = Some(v.trim().to_owned()),
                            _ => {}
                        }
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                let request = Seen {
                    form: url::form_urlencoded::parse(&body).into_owned().collect(),
                    authorization,
                };
                let (status, text) = answer(&own, &request);
                kept.lock().unwrap().push(request);
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        (url, seen)
    }

    const ISSUER: &str = "https://confirm.example";

    /// The CS's client assertion at a real token endpoint that checks it as
    /// §16.4 says (`verify_client_assertion` against the CS's published
    /// keys, `aud` its own URL, each `jti` once): no secret is sent, a
    /// token is asked for once and cached, and a new request (the token
    /// forgotten) carries a fresh assertion. An assertion by another key is
    /// refused there, and that refusal is `Unauthorized` here.
    #[tokio::test]
    async fn the_client_assertion_is_what_the_token_endpoint_checks() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        let keys = KeyRing::open(&dir.path().join("cs.jwk"), None, "cs", clock.clone()).unwrap();
        let published = keys.published();
        let jtis = Mutex::new(HashSet::new());
        let endpoint_clock = clock.clone();
        let (url, seen) = token_endpoint(move |own, s| {
            let refuse = |why: String| {
                (
                    401,
                    serde_json::json!({"error": "invalid_client", "error_description": why})
                        .to_string(),
                )
            };
            if s.value("grant_type") != Some("client_credentials")
                || s.value("client_assertion_type") != Some(ASSERTION_TYPE)
            {
                return refuse("not a client-credentials request with an assertion".into());
            }
            let Some(assertion) = s.value("client_assertion") else {
                return refuse("no assertion".into());
            };
            let expected = Expected {
                issuer: ISSUER,
                audience: own,
                now: endpoint_clock.now().timestamp(),
            };
            match verify_client_assertion(assertion, &published, expected) {
                Ok(v) if jtis.lock().unwrap().insert(v.jti.clone()) => (
                    200,
                    format!(
                        r#"{{"access_token":"token-{n}","token_type":"Bearer","expires_in":3600}}"#,
                        n = jtis.lock().unwrap().len()
                    ),
                ),
                Ok(_) => refuse("jti seen before".into()),
                Err(e) => refuse(e.to_string()),
            }
        });
        let tls = tls_connector().unwrap();
        let signer = AssertionSigner::new(keys.clone(), ISSUER, clock.clone());
        let client = RsClient::with(&url, ClientAuth::Assertion(signer), None, &tls).unwrap();
        assert_eq!(client.token().await.unwrap(), "token-1");
        assert_eq!(client.token().await.unwrap(), "token-1", "cached");
        assert_eq!(seen.lock().unwrap().len(), 1);
        client.forget_token("token-1");
        assert_eq!(
            client.token().await.unwrap(),
            "token-2",
            "a fresh assertion, accepted"
        );
        {
            let seen = seen.lock().unwrap();
            assert_eq!(seen.len(), 2);
            for s in seen.iter() {
                assert_eq!(s.authorization, None, "no secret is sent");
                assert_eq!(s.value("scope"), Some("cheq"));
                assert_eq!(s.value("client_id"), None);
            }
            assert_ne!(
                seen[0].value("client_assertion"),
                seen[1].value("client_assertion")
            );
        }

        // The same CS name with a key of another set: refused there.
        let other = tempfile::tempdir().unwrap();
        let impostor =
            KeyRing::open(&other.path().join("cs.jwk"), None, "cs", clock.clone()).unwrap();
        let client = RsClient::with(
            &url,
            ClientAuth::Assertion(AssertionSigner::new(impostor, ISSUER, clock.clone())),
            None,
            &tls,
        )
        .unwrap();
        match client.token().await {
            Err(FetchError::Unauthorized(code)) => assert_eq!(code, "invalid_client"),
            other => panic!("{other:?}"),
        }
    }

    /// An assertion names the CS as `iss` and `sub`, the token endpoint as
    /// `aud`, and lives 60 s from the clock's now.
    #[test]
    fn an_assertion_is_for_one_token_endpoint_and_a_minute() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        let keys = KeyRing::open(&dir.path().join("cs.jwk"), None, "cs", clock.clone()).unwrap();
        let signer = AssertionSigner::new(keys.clone(), ISSUER, clock.clone());
        let aud = "https://rs.example/oauth/token";
        let assertion = signer.assertion(aud).unwrap();
        let now = clock.now().timestamp();
        let expected = |audience, now| Expected {
            issuer: ISSUER,
            audience,
            now,
        };
        let ok = verify_client_assertion(&assertion, &keys.published(), expected(aud, now));
        assert_eq!(ok.unwrap().expires_at, now + 60);
        for (audience, at) in [("https://other.example/oauth/token", now), (aud, now + 61)] {
            assert!(
                verify_client_assertion(&assertion, &keys.published(), expected(audience, at))
                    .is_err(),
                "{audience} at {at}"
            );
        }
    }
}
