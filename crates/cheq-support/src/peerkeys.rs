//! A peer's public keys fetched by `jwks_uri` (PROTOCOL.md §9): the CS
//! trusting a resource server, the RS trusting its confirmation server, and
//! `cheq verify` reading a trust file.
//!
//! - A fetch is bounded: `https` only (`http` for loopback hosts), 3 s to
//!   connect, 10 s in all, at most [`MAX_JWKS_BYTES`], no redirect followed.
//! - A fetched set is kept as long as its HTTP cache headers say
//!   (`Cache-Control: max-age` less `Age`, else `Expires`, else
//!   [`DEFAULT_TTL_SECS`]), bounded to [`MIN_TTL_SECS`]..[`MAX_TTL_SECS`];
//!   [`FetchedJwks::ensure_fresh`] fetches it again once that has passed, so
//!   a key the peer removed stops being trusted then. When that fetch fails
//!   the set read before is kept (and the failure logged) for at most
//!   [`STALE_GRACE_SECS`] more: a peer that is down a moment does not stop
//!   every confirmation, and one that stays unreachable does not keep a
//!   removed key trusted.
//! - A document that names a key id the set lacks may fetch it again
//!   ([`FetchedJwks::refetch_for`]), so a peer's new key is picked up without
//!   a restart — but at most once per [`REFETCH_EVERY_SECS`] per origin, so
//!   that no one can make the server fetch in a loop. (Until a first fetch
//!   has succeeded, a failed one may be tried again after
//!   [`RETRY_EMPTY_MS`] ms.)
//!
//! Times come from the server's [`Clock`], so tests move them at will.

use crate::time::Clock;
use cheq_core::sign::{Jwks, KeySource, PublicKey};
use chrono::{DateTime, Duration, Utc};
use std::sync::{Arc, RwLock};

/// Largest JWKS read from a file or a peer.
pub const MAX_JWKS_BYTES: usize = 64 * 1024;
/// Kept this long when the peer's answer says nothing of caching.
pub const DEFAULT_TTL_SECS: i64 = 300;
/// Kept at least this long, whatever the headers say.
pub const MIN_TTL_SECS: i64 = 60;
/// Kept at most this long, whatever the headers say.
pub const MAX_TTL_SECS: i64 = 3600;
/// At most one fetch per origin in this many seconds.
pub const REFETCH_EVERY_SECS: i64 = 60;
/// While no fetch has ever succeeded, a failed one may be tried again after
/// this many milliseconds (the peer may be starting at the same time; one
/// fetch is in flight at a time whatever happens).
pub const RETRY_EMPTY_MS: i64 = 200;
/// A set that could not be read again is used this long past its expiry,
/// then no longer: keys a peer removed are not trusted for ever just because
/// its set cannot be reached.
pub const STALE_GRACE_SECS: i64 = 3600;

/// Why a JWKS could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{where_}: {message}")]
pub struct JwksError {
    pub where_: String,
    pub message: String,
}

/// How long an answer may be kept, from its headers.
pub fn ttl_from_headers(headers: &reqwest::header::HeaderMap, now: DateTime<Utc>) -> i64 {
    let text = |name: reqwest::header::HeaderName| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",")
    };
    let cache_control = text(reqwest::header::CACHE_CONTROL).to_ascii_lowercase();
    let mut ttl = None;
    for directive in cache_control.split(',').map(str::trim) {
        let (name, value) = directive.split_once('=').unwrap_or((directive, ""));
        match name.trim() {
            "no-store" | "no-cache" => ttl = Some(0),
            "max-age" if ttl != Some(0) => {
                ttl = value.trim().trim_matches('"').parse::<i64>().ok().or(ttl);
            }
            _ => {}
        }
    }
    let ttl = match ttl {
        Some(t) => {
            let age = text(reqwest::header::AGE)
                .trim()
                .parse::<i64>()
                .unwrap_or(0);
            t.saturating_sub(age.max(0))
        }
        None => match DateTime::parse_from_rfc2822(text(reqwest::header::EXPIRES).trim()) {
            Ok(expires) => (expires.with_timezone(&Utc) - now).num_seconds(),
            Err(_) => DEFAULT_TTL_SECS,
        },
    };
    ttl.clamp(MIN_TTL_SECS, MAX_TTL_SECS)
}

/// An HTTP client for JWKS fetches: bounded in time, no redirects.
pub fn client() -> Result<reqwest::Client, JwksError> {
    reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(3))
        .timeout(std::time::Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| JwksError {
            where_: "JWKS client".into(),
            message: e.to_string(),
        })
}

/// Fetches the JWKS at `uri` once: the set and how long it may be kept.
pub async fn fetch(
    client: &reqwest::Client,
    uri: &str,
    now: DateTime<Utc>,
) -> Result<(Jwks, i64), JwksError> {
    let err = |message: String| JwksError {
        where_: uri.to_owned(),
        message,
    };
    let url = cheq_core::cheq::uri::parse_cheq_uri(uri).map_err(|e| err(e.to_string()))?;
    let mut res = client
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| err(e.without_url().to_string()))?;
    if !res.status().is_success() {
        return Err(err(format!("HTTP {}", res.status().as_u16())));
    }
    if res
        .content_length()
        .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
    {
        return Err(err(format!("larger than {MAX_JWKS_BYTES} bytes")));
    }
    let ttl = ttl_from_headers(res.headers(), now);
    let mut body = Vec::new();
    while let Some(chunk) = res
        .chunk()
        .await
        .map_err(|e| err(e.without_url().to_string()))?
    {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(err(format!("larger than {MAX_JWKS_BYTES} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    let jwks = Jwks::from_bytes(&body).map_err(|e| err(e.to_string()))?;
    Ok((jwks, ttl))
}

/// Reads a JWKS file (bounded in size).
pub fn read_file(path: &std::path::Path) -> Result<Jwks, JwksError> {
    let err = |message: String| JwksError {
        where_: path.display().to_string(),
        message,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if meta.len() > MAX_JWKS_BYTES as u64 {
        return Err(err(format!("larger than {MAX_JWKS_BYTES} bytes")));
    }
    let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    if bytes.len() > MAX_JWKS_BYTES {
        return Err(err(format!("larger than {MAX_JWKS_BYTES} bytes")));
    }
    Jwks::from_bytes(&bytes).map_err(|e| err(e.to_string()))
}

#[derive(Debug, Default)]
struct Cached {
    keys: Arc<Jwks>,
    /// Fetched successfully at least once.
    have: bool,
    /// Kept until then.
    fresh_until: Option<DateTime<Utc>>,
    /// The last fetch started then (successful or not).
    last_attempt: Option<DateTime<Utc>>,
}

/// What a fetch for an unknown key id found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refetch {
    /// The set now has the key.
    Found,
    /// The peer's current set does not have it (or the keys are a file).
    Absent,
    /// The set could not be fetched now (the once-a-minute limit, or the
    /// peer did not answer): ask again in this many seconds.
    Later { retry_after: i64 },
}

/// One peer's key set, fetched by `jwks_uri` and kept per its cache headers.
pub struct FetchedJwks {
    uri: String,
    client: reqwest::Client,
    clock: Arc<dyn Clock>,
    cached: RwLock<Cached>,
    /// One fetch at a time; the others wait for it and read its result.
    fetching: tokio::sync::Mutex<()>,
    fetches: std::sync::atomic::AtomicU64,
    /// When this set was made: a peer that does not answer in the first
    /// [`STARTUP_GRACE_SECS`] is most likely still starting.
    born: DateTime<Utc>,
}

/// How long after start a peer that never answered is not yet worth a
/// word at the default level (servers started together fetch each other's
/// keys before the other listens).
pub const STARTUP_GRACE_SECS: i64 = 60;

/// How loud a failed fetch is: a peer not up yet during start-up is the
/// normal course of a start (debug); one that stopped answering, or never
/// answered past the grace period, is a warning.
pub fn failure_level(have_keys: bool, secs_since_start: i64) -> log::Level {
    if !have_keys && secs_since_start < STARTUP_GRACE_SECS {
        log::Level::Debug
    } else {
        log::Level::Warn
    }
}

/// Whether the start-up prefetch tries again after a fetch: while no keys
/// are read and the grace period lasts. Its last failed try is past the
/// grace period, so a peer that never answers is one warning, not one a
/// second.
pub fn prefetch_goes_on(have_keys: bool, secs_since_start: i64) -> bool {
    !have_keys && secs_since_start < STARTUP_GRACE_SECS
}

impl std::fmt::Debug for FetchedJwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchedJwks")
            .field("uri", &self.uri)
            .finish_non_exhaustive()
    }
}

impl FetchedJwks {
    /// Nothing fetched yet: the first use fetches.
    pub fn new(uri: &str, clock: Arc<dyn Clock>) -> Result<Arc<Self>, JwksError> {
        Self::with_client(uri, clock, client()?)
    }

    /// As [`FetchedJwks::new`], fetching through the outside fetcher's
    /// rules (§16.3): for a key set named by a peer rather than by the
    /// operator.
    pub fn outside(
        uri: &str,
        clock: Arc<dyn Clock>,
        outbound: &crate::outbound::Outbound,
    ) -> Result<Arc<Self>, JwksError> {
        let err = |message: String| JwksError {
            where_: uri.to_owned(),
            message,
        };
        outbound.check(uri).map_err(|e| err(e.to_string()))?;
        Self::with_client(uri, clock, outbound.client().clone())
    }

    fn with_client(
        uri: &str,
        clock: Arc<dyn Clock>,
        client: reqwest::Client,
    ) -> Result<Arc<Self>, JwksError> {
        cheq_core::cheq::uri::parse_cheq_uri(uri).map_err(|e| JwksError {
            where_: uri.to_owned(),
            message: e.to_string(),
        })?;
        Ok(Arc::new(FetchedJwks {
            uri: uri.to_owned(),
            client,
            cached: RwLock::new(Cached::default()),
            fetching: tokio::sync::Mutex::new(()),
            fetches: std::sync::atomic::AtomicU64::new(0),
            born: clock.now(),
            clock,
        }))
    }

    /// Where the set is published.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// How many fetches were started.
    pub fn fetches(&self) -> u64 {
        self.fetches.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn with<T>(&self, f: impl FnOnce(&Cached) -> T) -> T {
        match self.cached.read() {
            Ok(g) => f(&g),
            Err(e) => f(&e.into_inner()),
        }
    }

    fn may_fetch(&self, now: DateTime<Utc>) -> bool {
        self.with(|c| {
            let every = if c.have {
                Duration::seconds(REFETCH_EVERY_SECS)
            } else {
                Duration::milliseconds(RETRY_EMPTY_MS)
            };
            c.last_attempt.is_none_or(|t| now >= t + every)
        })
    }

    /// Seconds until the rate limit lets a fetch through.
    fn wait_secs(&self, now: DateTime<Utc>) -> i64 {
        self.with(|c| {
            let every = if c.have {
                Duration::seconds(REFETCH_EVERY_SECS)
            } else {
                Duration::milliseconds(RETRY_EMPTY_MS)
            };
            c.last_attempt
                .map_or(0, |t| (t + every - now).num_seconds())
                .max(1)
        })
    }

    /// Fetches now if the rate limit allows; true when a fetch succeeded.
    async fn fetch_if_allowed(&self, still_needed: impl Fn(&Cached) -> bool) -> bool {
        let _one = self.fetching.lock().await;
        // Another task may have fetched while this one waited.
        if !self.with(&still_needed) {
            return false;
        }
        let now = self.clock.now();
        if !self.may_fetch(now) {
            return false;
        }
        if let Ok(mut c) = self.cached.write() {
            c.last_attempt = Some(now);
        }
        self.fetches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match fetch(&self.client, &self.uri, now).await {
            Ok((keys, ttl)) => {
                let now = self.clock.now();
                if let Ok(mut c) = self.cached.write() {
                    c.keys = Arc::new(keys);
                    c.have = true;
                    c.fresh_until = Some(now + Duration::seconds(ttl));
                }
                true
            }
            Err(e) => {
                let have = self.with(|c| c.have);
                let level = failure_level(have, (self.clock.now() - self.born).num_seconds());
                if have {
                    log::log!(
                        level,
                        "fetching trusted keys: {e}; keeping the keys read before"
                    );
                } else {
                    log::log!(
                        level,
                        "fetching trusted keys: {e}; none read yet, trying again"
                    );
                }
                false
            }
        }
    }

    /// Fetches the set now, whatever the rate limit, and says why it
    /// cannot be read: for a peer's set checked before it is relied on.
    pub async fn fetch_now(&self) -> Result<(), JwksError> {
        let _one = self.fetching.lock().await;
        let now = self.clock.now();
        if let Ok(mut c) = self.cached.write() {
            c.last_attempt = Some(now);
        }
        self.fetches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (keys, ttl) = fetch(&self.client, &self.uri, now).await?;
        let now = self.clock.now();
        if let Ok(mut c) = self.cached.write() {
            c.keys = Arc::new(keys);
            c.have = true;
            c.fresh_until = Some(now + Duration::seconds(ttl));
        }
        Ok(())
    }

    /// Fetches the set again when what was read has expired (or nothing was).
    pub async fn ensure_fresh(&self) {
        let stale = |c: &Cached| c.fresh_until.is_none_or(|until| self.clock.now() >= until);
        if self.with(stale) {
            self.fetch_if_allowed(stale).await;
        }
    }

    /// A document names `kid`, which the set lacks (or holds only in a copy
    /// too stale to use): fetches the set again if the rate limit allows,
    /// and says what came of it.
    pub async fn refetch_for(&self, kid: &str) -> Refetch {
        let lacks = |c: &Cached| {
            c.keys.get(kid).is_none()
                || c.fresh_until.is_none_or(|until| {
                    self.clock.now() >= until + Duration::seconds(STALE_GRACE_SECS)
                })
        };
        let fetched = self.with(lacks) && self.fetch_if_allowed(lacks).await;
        if !self.with(lacks) {
            Refetch::Found
        } else if fetched {
            Refetch::Absent
        } else {
            Refetch::Later {
                retry_after: self.wait_secs(self.clock.now()),
            }
        }
    }
}

impl KeySource for FetchedJwks {
    fn key(&self, kid: &str) -> Option<PublicKey> {
        let now = self.clock.now();
        self.with(|c| {
            let usable = c
                .fresh_until
                .is_some_and(|until| now < until + Duration::seconds(STALE_GRACE_SECS));
            if usable {
                c.keys.get(kid).cloned()
            } else {
                None
            }
        })
    }
}

/// Where one peer's keys come from: a file read at start-up, its published
/// set, or its key set in this same process (a confirmation inside the
/// resource server, §12: the two sides' keys are read where they live).
#[derive(Debug, Clone)]
pub enum PeerKeys {
    Fixed(Arc<Jwks>),
    Fetched(Arc<FetchedJwks>),
    Local(Arc<crate::keyring::KeyRing>),
}

impl PeerKeys {
    /// From a file (`file`) or a `jwks_uri` (`uri`); nothing is fetched yet.
    pub fn new(
        file: Option<&std::path::Path>,
        uri: Option<&str>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, JwksError> {
        match (file, uri) {
            (Some(file), _) => Ok(PeerKeys::Fixed(Arc::new(read_file(file)?))),
            (None, Some(uri)) => Ok(PeerKeys::Fetched(FetchedJwks::new(uri, clock)?)),
            (None, None) => Err(JwksError {
                where_: "keys".into(),
                message: "neither a file nor a jwks_uri".into(),
            }),
        }
    }

    /// The source to put in a trust store.
    pub fn source(&self) -> Arc<dyn KeySource> {
        match self {
            PeerKeys::Fixed(j) => j.clone(),
            PeerKeys::Fetched(f) => f.clone(),
            PeerKeys::Local(ring) => ring.clone(),
        }
    }

    /// See [`FetchedJwks::ensure_fresh`]; nothing for a file.
    pub async fn ensure_fresh(&self) {
        if let PeerKeys::Fetched(f) = self {
            f.ensure_fresh().await;
        }
    }

    /// See [`FetchedJwks::refetch_for`]; `Absent` for a file.
    pub async fn refetch_for(&self, kid: &str) -> Refetch {
        match self {
            PeerKeys::Fixed(_) | PeerKeys::Local(_) => Refetch::Absent,
            PeerKeys::Fetched(f) => f.refetch_for(kid).await,
        }
    }

    /// Fetches in the background now, trying again each second while the
    /// peer is not up yet, so that the first confirmation finds the keys
    /// read. The misses of the start-up grace period are logged at debug;
    /// the first try past it (a wrong `jwks_uri`, a peer that is down) is a
    /// warning, and the last try of this task.
    pub fn prefetch(&self) {
        if let PeerKeys::Fetched(f) = self {
            let f = f.clone();
            tokio::spawn(async move {
                // Bounded also when the clock does not move (a test's).
                for _ in 0..STARTUP_GRACE_SECS + 5 {
                    f.ensure_fresh().await;
                    let since = (f.clock.now() - f.born).num_seconds();
                    if !prefetch_goes_on(f.with(|c| c.have), since) {
                        return;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue, AGE, CACHE_CONTROL, EXPIRES};

    fn headers(pairs: &[(reqwest::header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn cache_headers_are_read_and_bounded() {
        let now = DateTime::from_timestamp(Utc::now().timestamp(), 0).unwrap();
        let ttl =
            |pairs: &[(reqwest::header::HeaderName, &str)]| ttl_from_headers(&headers(pairs), now);
        assert_eq!(ttl(&[]), DEFAULT_TTL_SECS);
        assert_eq!(ttl(&[(CACHE_CONTROL, "public, max-age=600")]), 600);
        assert_eq!(ttl(&[(CACHE_CONTROL, "max-age=600"), (AGE, "100")]), 500);
        assert_eq!(ttl(&[(CACHE_CONTROL, "max-age=5")]), MIN_TTL_SECS);
        assert_eq!(
            ttl(&[(CACHE_CONTROL, "no-store, max-age=600")]),
            MIN_TTL_SECS
        );
        assert_eq!(ttl(&[(CACHE_CONTROL, "max-age=99999999")]), MAX_TTL_SECS);
        let in_20_min = (now + Duration::seconds(1200)).to_rfc2822();
        assert_eq!(ttl(&[(EXPIRES, &in_20_min)]), 1200);
        assert_eq!(ttl(&[(EXPIRES, "not a date")]), DEFAULT_TTL_SECS);
        // max-age wins over Expires.
        assert_eq!(
            ttl(&[(CACHE_CONTROL, "max-age=120"), (EXPIRES, &in_20_min)]),
            120
        );
    }

    /// A one-shot HTTP server on loopback that answers `response` to
    /// every connection (a real socket, for the fetch limits).
    fn serve(response: Vec<u8>) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(4) {
                let Ok(mut stream) = stream else { continue };
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(&response);
            }
        });
        format!("http://127.0.0.1:{port}/jwks.json")
    }

    fn answer(head: &str, body: &[u8]) -> Vec<u8> {
        let mut r = format!(
            "HTTP/1.1 {head}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    }

    #[tokio::test]
    async fn a_fetch_is_bounded_and_follows_no_redirect() {
        let client = client().unwrap();
        let now = Utc::now();
        let key = cheq_core::sign::SigningKey::from_seed("rs-1", &[7; 32]).unwrap();
        let set = serde_json::json!({"keys": [key.public_jwk()]}).to_string();
        // A good answer, kept as its max-age says.
        let uri = serve(answer(
            "200 OK\r\ncache-control: max-age=120",
            set.as_bytes(),
        ));
        let (jwks, ttl) = fetch(&client, &uri, now).await.unwrap();
        assert!(jwks.get("rs-1").is_some());
        assert_eq!(ttl, 120);
        // Larger than the limit: refused, whatever it holds.
        let big = format!("{{\"keys\":[],\"pad\":\"{}\"}}", "x".repeat(MAX_JWKS_BYTES));
        let uri = serve(answer("200 OK", big.as_bytes()));
        let err = fetch(&client, &uri, now).await.unwrap_err();
        assert!(err.message.contains("larger than"), "{err}");
        // A redirect is not followed.
        let uri = serve(answer("302 Found\r\nlocation: http://127.0.0.1:9/", b""));
        let err = fetch(&client, &uri, now).await.unwrap_err();
        assert!(err.message.contains("302"), "{err}");
        // Not a key set.
        let uri = serve(answer(
            "200 OK",
            b"{\"keys\":[{\"kty\":\"oct\",\"kid\":\"h\",\"k\":\"AAAA\"}]}",
        ));
        assert!(fetch(&client, &uri, now).await.is_err());
        // A private key in a published set is refused.
        let private = format!("{{\"keys\":[{}]}}", &*key.to_private_jwk_json());
        let uri = serve(answer("200 OK", private.as_bytes()));
        let err = fetch(&client, &uri, now).await.unwrap_err();
        assert!(err.message.contains("private"), "{err}");
    }

    #[tokio::test]
    async fn a_peer_that_never_answers_is_given_up_on_in_time() {
        // Accepts, reads, never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let held: Vec<_> = listener.incoming().take(1).collect();
            std::thread::sleep(std::time::Duration::from_secs(40));
            drop(held);
        });
        // The client's bound is 10 s: given up on well before the peer
        // would answer, with room for a loaded machine.
        let client = client().unwrap();
        let started = std::time::Instant::now();
        let err = fetch(
            &client,
            &format!("http://127.0.0.1:{port}/jwks.json"),
            Utc::now(),
        )
        .await
        .unwrap_err();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(25),
            "{err}"
        );
    }

    #[test]
    fn only_https_or_loopback_is_fetched() {
        let clock: Arc<dyn Clock> = Arc::new(crate::time::SystemClock);
        assert!(FetchedJwks::new("http://keys.example/jwks.json", clock.clone()).is_err());
        assert!(FetchedJwks::new("file:///etc/passwd", clock.clone()).is_err());
        assert!(FetchedJwks::new("https://keys.example/jwks.json", clock.clone()).is_ok());
        assert!(FetchedJwks::new("http://127.0.0.1:9/jwks.json", clock).is_ok());
    }

    /// A peer not up yet during start-up is worth a debug line only; one
    /// that stops answering, or never answers past the grace period, is a
    /// warning.
    #[test]
    fn a_peer_still_starting_is_not_a_warning() {
        assert_eq!(failure_level(false, 0), log::Level::Debug);
        assert_eq!(
            failure_level(false, STARTUP_GRACE_SECS - 1),
            log::Level::Debug
        );
        assert_eq!(failure_level(false, STARTUP_GRACE_SECS), log::Level::Warn);
        assert_eq!(failure_level(true, 0), log::Level::Warn);
    }

    /// The prefetch goes on through the grace period (its misses at debug)
    /// and stops after its first miss past it: a peer that never answers
    /// is one warning at start-up.
    #[test]
    fn the_prefetch_warns_once_when_the_peer_never_answers() {
        let warnings = (0..STARTUP_GRACE_SECS + 5)
            .take_while(|&secs| {
                // A try at `secs` failed; is it a warning, and is there another?
                secs == 0 || prefetch_goes_on(false, secs - 1)
            })
            .filter(|&secs| failure_level(false, secs) == log::Level::Warn)
            .count();
        assert_eq!(warnings, 1);
        assert!(prefetch_goes_on(false, STARTUP_GRACE_SECS - 1));
        assert!(!prefetch_goes_on(false, STARTUP_GRACE_SECS));
        assert!(!prefetch_goes_on(true, 0));
    }
}
