//! What the CS learns of a provider, and how it asks: OpenID Connect
//! Discovery 1.0 (§4, the provider's metadata from its issuer) and the key
//! set its `jwks_uri` names (Core §10.1.1: fetched again when a token names
//! an unknown `kid`, at most once per [`JWKS_REFETCH_SECS`]). Discovery is
//! cached for [`DISCOVERY_TTL_SECS`], a failure for [`DISCOVERY_RETRY_SECS`],
//! one fetch at a time per provider.
//!
//! Every request to a provider (discovery, JWKS, token, UserInfo) goes
//! through [`capped`]: the timeouts of the client, no redirect, and at most
//! [`Endpoint::limit`] bytes of the answer.

use super::{misconfigured, unreachable, LoginError, Provider, ProviderHttpError, Providers};
use openidconnect::core::CoreJsonWebKeySet;
use openidconnect::{IssuerUrl, ProviderMetadataWithLogout};
use std::sync::Arc;

/// The least time between two fetches of a provider's JWKS for an unknown
/// `kid`, so that a stream of forged tokens cannot make the CS fetch in a loop.
pub const JWKS_REFETCH_SECS: i64 = 60;
/// Discovery is read again after this long.
pub const DISCOVERY_TTL_SECS: i64 = 3600;
/// A failed discovery is the answer, without asking the provider again, for
/// this long: a sign-in can be started by anyone, and a stream of them must
/// not make the CS fetch in a loop while the provider is down.
pub const DISCOVERY_RETRY_SECS: i64 = 30;

/// Which of a provider's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Discovery,
    Jwks,
    Token,
    UserInfo,
}

impl Endpoint {
    /// The longest answer of this kind read: a discovery document is a few
    /// KiB, a key set a few keys (some with certificate chains), a token
    /// answer an ID token and an access token, UserInfo a few claims.
    pub fn limit(self) -> usize {
        match self {
            Endpoint::Discovery | Endpoint::Token | Endpoint::UserInfo => 64 * 1024,
            Endpoint::Jwks => 256 * 1024,
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Endpoint::Discovery => "discovery document",
            Endpoint::Jwks => "key set (JWKS)",
            Endpoint::Token => "token answer",
            Endpoint::UserInfo => "UserInfo answer",
        })
    }
}

/// What discovery brought of a provider, and when.
pub(super) struct Discovered {
    pub(super) metadata: ProviderMetadataWithLogout,
    pub(super) at: i64,
    /// When the JWKS was last fetched again for an unknown `kid`.
    pub(super) refetched_at: Option<i64>,
}

/// One request to a provider, as the `openidconnect` crate makes it, sent
/// the way [`crate::fetch`] sends the RS's token request: through the
/// client's timeouts (the total one covers reading the answer), with no
/// redirect followed, reading at most [`Endpoint::limit`] bytes of the
/// answer, and refusing a longer one as soon as it is announced or read.
pub(super) async fn capped(
    http: reqwest::Client,
    what: Endpoint,
    request: openidconnect::HttpRequest,
) -> Result<openidconnect::HttpResponse, ProviderHttpError> {
    use crate::fetch::Capped;
    crate::fetch::send_capped(&http, request, what.limit())
        .await
        .map_err(|e| match e {
            Capped::TooLarge => ProviderHttpError::TooLarge {
                what,
                limit: what.limit(),
            },
            Capped::Http(e) if e.is_timeout() => ProviderHttpError::Timeout(what),
            // Without the URL: the endpoint names it.
            Capped::Http(e) => ProviderHttpError::Transport(
                what,
                cheq_support::text::one_line(&e.without_url().to_string()),
            ),
        })
}

impl Providers {
    /// The provider's discovery document and keys (cached for
    /// [`DISCOVERY_TTL_SECS`]; a failure for [`DISCOVERY_RETRY_SECS`]).
    pub(super) async fn discovered(&self, p: &Provider) -> Result<Arc<Discovered>, LoginError> {
        if let Some(known) = self.known_discovery(p) {
            return known;
        }
        // One fetch at a time; a caller that waited finds its result.
        let _fetching = p.discovering.lock().await;
        if let Some(known) = self.known_discovery(p) {
            return known;
        }
        let now = self.now();
        match self.discover(p).await {
            Ok(metadata) => {
                let d = Arc::new(Discovered {
                    metadata,
                    at: now,
                    refetched_at: None,
                });
                if let Ok(mut g) = p.discovered.lock() {
                    *g = Some(d.clone());
                }
                if let Ok(mut f) = p.failed.lock() {
                    *f = None;
                }
                Ok(d)
            }
            Err(e) => {
                if let Ok(mut f) = p.failed.lock() {
                    *f = Some((now, e.clone()));
                }
                Err(e)
            }
        }
    }

    /// What is known of the provider's discovery without asking it: a
    /// document younger than [`DISCOVERY_TTL_SECS`], or a failure younger
    /// than [`DISCOVERY_RETRY_SECS`].
    fn known_discovery(&self, p: &Provider) -> Option<Result<Arc<Discovered>, LoginError>> {
        let now = self.now();
        if let Some(d) = p.discovered.lock().ok().and_then(|g| g.clone()) {
            if (0..DISCOVERY_TTL_SECS).contains(&(now - d.at)) {
                return Some(Ok(d));
            }
        }
        let failed = p.failed.lock().ok()?;
        let (at, e) = failed.as_ref()?;
        (0..DISCOVERY_RETRY_SECS)
            .contains(&(now - at))
            .then(|| Err(e.clone()))
    }

    /// Fetches the provider's discovery document, then its key set.
    async fn discover(&self, p: &Provider) -> Result<ProviderMetadataWithLogout, LoginError> {
        use openidconnect::DiscoveryError as D;
        let issuer =
            IssuerUrl::new(p.issuer.clone()).map_err(|e| misconfigured(&p.name, e.to_string()))?;
        // The crate fetches both documents through this client; the path
        // says which one is asked.
        let http = |request: openidconnect::HttpRequest| {
            let what = if request
                .uri()
                .path()
                .ends_with("/.well-known/openid-configuration")
            {
                Endpoint::Discovery
            } else {
                Endpoint::Jwks
            };
            capped(self.http.clone(), what, request)
        };
        let metadata = ProviderMetadataWithLogout::discover_async(issuer, &http)
            .await
            .map_err(|e| match e {
                D::Request(cause) => unreachable(&p.name, cause),
                D::Response(status, _, _) => unreachable(
                    &p.name,
                    ProviderHttpError::Status {
                        what: Endpoint::Discovery,
                        status: status.as_u16(),
                    },
                ),
                D::Validation(v) => misconfigured(&p.name, v),
                D::Parse(e) => misconfigured(
                    &p.name,
                    format!("its discovery document or key set cannot be read: {e}"),
                ),
                e => misconfigured(&p.name, e.to_string()),
            })?;
        check_endpoints(&metadata).map_err(|detail| misconfigured(&p.name, detail))?;
        Ok(metadata)
    }

    /// Fetches the provider's JWKS again, unless it was fetched less than
    /// [`JWKS_REFETCH_SECS`] ago; `None` when it was not fetched.
    pub(super) async fn refetch_jwks(
        &self,
        p: &Provider,
        d: &Discovered,
    ) -> Option<Arc<Discovered>> {
        let now = self.now();
        {
            // Check and claim the refetch under one lock, before the request,
            // so that concurrent callers do not fetch too.
            let mut guard = p.discovered.lock().ok()?;
            let current = guard.as_ref()?;
            if current
                .refetched_at
                .is_some_and(|t| now - t < JWKS_REFETCH_SECS)
            {
                return None;
            }
            let claimed = Arc::new(Discovered {
                metadata: current.metadata.clone(),
                at: current.at,
                refetched_at: Some(now),
            });
            *guard = Some(claimed);
        }
        let http = |request| capped(self.http.clone(), Endpoint::Jwks, request);
        let jwks = CoreJsonWebKeySet::fetch_async(d.metadata.jwks_uri(), &http)
            .await
            .ok()?;
        let fresh = Arc::new(Discovered {
            metadata: d.metadata.clone().set_jwks(jwks),
            at: d.at,
            refetched_at: Some(now),
        });
        if let Ok(mut g) = p.discovered.lock() {
            *g = Some(fresh.clone());
        }
        Some(fresh)
    }
}

/// Every endpoint the CS talks to, or sends a person to, is https (plain
/// http on loopback only), as for the issuer itself; a token endpoint is
/// required.
fn check_endpoints(metadata: &ProviderMetadataWithLogout) -> Result<(), String> {
    let mut urls = vec![
        (
            "authorization_endpoint",
            metadata.authorization_endpoint().as_str(),
        ),
        ("jwks_uri", metadata.jwks_uri().as_str()),
    ];
    match metadata.token_endpoint() {
        Some(t) => urls.push(("token_endpoint", t.as_str())),
        None => return Err("discovery names no token_endpoint".into()),
    }
    if let Some(u) = metadata.userinfo_endpoint() {
        urls.push(("userinfo_endpoint", u.as_str()));
    }
    if let Some(e) = &metadata.additional_metadata().end_session_endpoint {
        urls.push(("end_session_endpoint", e.as_str()));
    }
    for (what, url) in urls {
        cheq_core::cheq::uri::parse_cheq_uri(url).map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oidc::Callback;
    use cheq_support::time::Clock;
    use openidconnect::core::{CoreIdToken, CoreIdTokenClaims, CoreJwsSigningAlgorithm};
    use openidconnect::{IssuerUrl, Nonce};
    use std::sync::Mutex;

    #[test]
    fn endpoints_must_be_https_except_on_loopback() {
        let meta = |token: &str, end: Option<&str>| -> ProviderMetadataWithLogout {
            let mut v = serde_json::json!({
                "issuer": "https://idp.example",
                "authorization_endpoint": "https://idp.example/auth",
                "token_endpoint": token,
                "jwks_uri": "https://idp.example/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
            });
            if let Some(e) = end {
                v["end_session_endpoint"] = e.into();
            }
            serde_json::from_value(v).unwrap()
        };
        check_endpoints(&meta(
            "https://idp.example/token",
            Some("https://idp.example/end"),
        ))
        .unwrap();
        check_endpoints(&meta("http://127.0.0.1:9/token", None)).unwrap();
        let e = check_endpoints(&meta("http://idp.example/token", None)).unwrap_err();
        assert!(e.starts_with("token_endpoint"), "{e}");
        let e = check_endpoints(&meta(
            "https://idp.example/token",
            Some("http://idp.example/end"),
        ))
        .unwrap_err();
        assert!(e.starts_with("end_session_endpoint"), "{e}");
    }

    /// What the tiny provider answers to a path.
    enum Reply {
        Json(String),
        Status(u16),
        /// A 200 of [`HUGE`] bytes, its length announced or not (chunked).
        Huge {
            announced: bool,
        },
    }

    const HUGE: usize = 200 * 1024 * 1024;

    /// A tiny HTTP server on a real loopback socket, one request per
    /// connection: it records the paths asked, and for each huge answer
    /// sends how many of its bytes it could write before the CS hung up.
    struct Tiny {
        origin: String,
        asked: Arc<Mutex<Vec<String>>>,
        written: tokio::sync::mpsc::UnboundedReceiver<usize>,
    }

    impl Tiny {
        async fn start(answer: impl Fn(&str, &str) -> Reply + Send + Sync + 'static) -> Tiny {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let origin = format!("http://{}", listener.local_addr().unwrap());
            let asked = Arc::new(Mutex::new(Vec::new()));
            let (tx, written) = tokio::sync::mpsc::unbounded_channel();
            let answer = Arc::new(answer);
            let (o, a) = (origin.clone(), asked.clone());
            tokio::spawn(async move {
                while let Ok((sock, _)) = listener.accept().await {
                    let (o, a, tx, answer) = (o.clone(), a.clone(), tx.clone(), answer.clone());
                    tokio::spawn(async move { serve(sock, &o, &a, &tx, &*answer).await });
                }
            });
            Tiny {
                origin,
                asked,
                written,
            }
        }

        fn count(&self, path: &str) -> usize {
            self.asked
                .lock()
                .unwrap()
                .iter()
                .filter(|p| *p == path)
                .count()
        }

        /// The bytes written of the next huge answer, once it is over.
        async fn huge_written(&mut self) -> usize {
            tokio::time::timeout(std::time::Duration::from_secs(60), self.written.recv())
                .await
                .expect("the huge answer ends once the CS hangs up")
                .unwrap()
        }
    }

    async fn serve(
        mut sock: tokio::net::TcpStream,
        origin: &str,
        asked: &Mutex<Vec<String>>,
        written: &tokio::sync::mpsc::UnboundedSender<usize>,
        answer: &(dyn Fn(&str, &str) -> Reply + Send + Sync),
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        let end = loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
            if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let text = String::from_utf8_lossy(&head[..end]).into_owned();
        // The request's body (the token request's form), read whole.
        let length: usize = text
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let mut body = head.len() - end;
        while body < length {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => body += n,
            }
        }
        let mut line = text.split_whitespace();
        let method = line.next().unwrap_or("").to_owned();
        let path = line
            .next()
            .unwrap_or("")
            .split('?')
            .next()
            .unwrap_or("")
            .to_owned();
        asked.lock().unwrap().push(path.clone());
        match answer(origin, &format!("{method} {path}")) {
            Reply::Json(body) => {
                let res = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(res.as_bytes()).await;
            }
            Reply::Status(status) => {
                let res = format!(
                    "HTTP/1.1 {status} Nope\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = sock.write_all(res.as_bytes()).await;
            }
            Reply::Huge { announced } => {
                let framing = if announced {
                    format!("content-length: {HUGE}")
                } else {
                    "transfer-encoding: chunked".to_owned()
                };
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{framing}\r\nconnection: close\r\n\r\n"
                );
                let mut sent = 0;
                if sock.write_all(head.as_bytes()).await.is_ok() {
                    let chunk = vec![b' '; 64 * 1024];
                    while sent < HUGE {
                        let ok = if announced {
                            sock.write_all(&chunk).await
                        } else {
                            let framed =
                                [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"]
                                    .concat();
                            sock.write_all(&framed).await
                        };
                        if ok.is_err() {
                            break;
                        }
                        sent += chunk.len();
                    }
                }
                let _ = written.send(sent);
            }
        }
    }

    fn discovery_of(origin: &str) -> String {
        serde_json::json!({
            "issuer": origin,
            "authorization_endpoint": format!("{origin}/authorize"),
            "token_endpoint": format!("{origin}/token"),
            "jwks_uri": format!("{origin}/jwks"),
            "userinfo_endpoint": format!("{origin}/userinfo"),
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        })
        .to_string()
    }

    fn providers_of(issuer: &str, clock: Arc<dyn Clock>) -> Providers {
        let config: crate::config::IdentityProviderConfig = toml::from_str(&format!(
            "name = \"example\"\nissuer = \"{issuer}\"\nclient_id = \"cheq\"\nclient_secret = \"s\""
        ))
        .unwrap();
        Providers::new(&[config], "http://127.0.0.1:8080", &[1; 32], clock).unwrap()
    }

    /// Every answer of a provider is read up to its bound: a longer one is
    /// refused with a clear error as soon as its length is announced, or as
    /// soon as its bytes pass the bound, and the rest is never read.
    #[actix_web::test]
    async fn an_oversized_answer_from_a_provider_is_refused_unread() {
        let cases = [
            (
                "GET /.well-known/openid-configuration",
                true,
                Endpoint::Discovery,
            ),
            ("GET /jwks", false, Endpoint::Jwks),
            ("POST /token", false, Endpoint::Token),
        ];
        for (huge_at, announced, what) in cases {
            let mut tiny = Tiny::start(move |origin, asked| match asked {
                a if a == huge_at => Reply::Huge { announced },
                "GET /.well-known/openid-configuration" => Reply::Json(discovery_of(origin)),
                "GET /jwks" => Reply::Json(r#"{"keys":[]}"#.into()),
                _ => Reply::Status(404),
            })
            .await;
            let p = providers_of(&tiny.origin, Arc::new(cheq_support::time::SystemClock));
            let failed = if what == Endpoint::Token {
                let (_, sealed) = p.begin("example", "/", None).await.unwrap();
                let pending = p.pending(Some(&sealed)).unwrap();
                let callback = Callback {
                    state: Some(pending.s.clone()),
                    code: Some("code".into()),
                    ..Callback::default()
                };
                p.finish(Some(pending), &callback).await.map(|_| ())
            } else {
                p.begin("example", "/", None).await.map(|_| ())
            };
            match failed {
                Err(LoginError::Unreachable {
                    cause: ProviderHttpError::TooLarge { what: w, limit },
                    ..
                }) => {
                    assert_eq!((w, limit), (what, what.limit()));
                }
                other => panic!("{huge_at}: {other:?}"),
            }
            let written = tiny.huge_written().await;
            assert!(written < HUGE / 2, "{huge_at}: {written} bytes sent");
        }
    }

    /// The UserInfo answer is bounded like the others. On the way there, an
    /// honest token answer of normal size passes through the capped client.
    #[actix_web::test]
    async fn an_oversized_userinfo_answer_is_refused_unread() {
        use openidconnect::core::{CoreEdDsaPrivateSigningKey, CoreJsonWebKeySet};
        use openidconnect::{
            Audience, EmptyAdditionalClaims, PrivateSigningKey, StandardClaims, SubjectIdentifier,
        };
        // A throwaway Ed25519 key, for this test only.
        const PEM: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEICj85RSLHK8ec/5o+MZCnUr457cWjqm+qnuExD0Of+64\n-----END PRIVATE KEY-----\n";
        let key = CoreEdDsaPrivateSigningKey::from_ed25519_pem(
            PEM,
            Some(openidconnect::JsonWebKeyId::new("k1".into())),
        )
        .unwrap();
        let jwks = serde_json::to_string(&CoreJsonWebKeySet::new(vec![key.as_verification_key()]))
            .unwrap();
        let token_answer = Arc::new(Mutex::new(String::new()));
        let answer = token_answer.clone();
        let mut tiny = Tiny::start(move |origin, asked| match asked {
            "GET /.well-known/openid-configuration" => Reply::Json(discovery_of(origin)),
            "GET /jwks" => Reply::Json(jwks.clone()),
            "POST /token" => Reply::Json(answer.lock().unwrap().clone()),
            "GET /userinfo" => Reply::Huge { announced: false },
            _ => Reply::Status(404),
        })
        .await;
        let p = providers_of(&tiny.origin, Arc::new(cheq_support::time::SystemClock));
        let (_, sealed) = p.begin("example", "/", None).await.unwrap();
        let pending = p.pending(Some(&sealed)).unwrap();
        let now = chrono::Utc::now();
        // No e-mail in the ID token: the CS asks UserInfo for it.
        let claims = CoreIdTokenClaims::new(
            IssuerUrl::new(tiny.origin.clone()).unwrap(),
            vec![Audience::new("cheq".into())],
            now + chrono::Duration::seconds(300),
            now,
            StandardClaims::new(SubjectIdentifier::new("u1".into())),
            EmptyAdditionalClaims {},
        )
        .set_nonce(Some(Nonce::new(pending.n.clone())));
        let id_token =
            CoreIdToken::new(claims, &key, CoreJwsSigningAlgorithm::EdDsa, None, None).unwrap();
        *token_answer.lock().unwrap() = serde_json::json!({
            "access_token": "at",
            "token_type": "Bearer",
            "id_token": id_token.to_string(),
        })
        .to_string();
        let callback = Callback {
            state: Some(pending.s.clone()),
            code: Some("code".into()),
            ..Callback::default()
        };
        match p.finish(Some(pending), &callback).await {
            Err(LoginError::Unreachable {
                cause:
                    ProviderHttpError::TooLarge {
                        what: Endpoint::UserInfo,
                        limit,
                    },
                ..
            }) => assert_eq!(limit, Endpoint::UserInfo.limit()),
            other => panic!("{other:?}"),
        }
        assert_eq!(tiny.count("/token"), 1);
        let written = tiny.huge_written().await;
        assert!(written < HUGE / 2, "{written} bytes sent");
    }

    /// A provider that is down is asked once per [`DISCOVERY_RETRY_SECS`],
    /// whoever starts a sign-in, however many at once.
    #[actix_web::test]
    async fn a_failed_discovery_is_the_answer_for_a_while() {
        let tiny = Tiny::start(|_, _| Reply::Status(503)).await;
        let clock = Arc::new(cheq_support::time::ManualClock::new(chrono::Utc::now()));
        let p = providers_of(&tiny.origin, clock.clone());
        let discovery = "/.well-known/openid-configuration";
        let down = |r: Result<(String, String), LoginError>| {
            matches!(
                r,
                Err(LoginError::Unreachable {
                    cause: ProviderHttpError::Status {
                        what: Endpoint::Discovery,
                        status: 503
                    },
                    ..
                })
            )
        };
        let (a, b, c) = tokio::join!(
            p.begin("example", "/", None),
            p.begin("example", "/", None),
            p.begin("example", "/", None)
        );
        assert!(down(a) && down(b) && down(c));
        assert_eq!(tiny.count(discovery), 1, "one fetch for three at once");
        for _ in 0..5 {
            assert!(down(p.begin("example", "/", None).await));
        }
        clock.advance(chrono::Duration::seconds(DISCOVERY_RETRY_SECS - 1));
        assert!(down(p.begin("example", "/", None).await));
        assert_eq!(tiny.count(discovery), 1);
        clock.advance(chrono::Duration::seconds(1));
        assert!(down(p.begin("example", "/", None).await));
        assert_eq!(tiny.count(discovery), 2, "asked again once the time is up");
    }
}
