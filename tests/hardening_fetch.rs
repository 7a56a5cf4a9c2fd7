//! Hardening of the CS's way out to resource servers, end to end on loopback
//! sockets (the harness is in `tests/common/mod.rs`):
//!
//! - §2: a resource URI whose path hides a separator or a dot segment in
//!   percent-encoding (`/cheq/..%2f..%2foauth%2ftoken`), a backslash or a raw
//!   dot segment is refused, and no connection reaches the RS;
//! - §3: the token endpoint's answer is read bounded (a 64 MiB answer is cut
//!   off after 16 KiB, whether its length is announced or not), and concurrent
//!   page loads of a fresh CS make one token request between them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpResponse, HttpServer};
use common::*;
use serde_json::json;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// §2: encoded path tricks never leave the CS
// ---------------------------------------------------------------------------

/// Paths under `/cheq/` for a URL parser that a server decoding them first
/// could read as somewhere else (or that are not in normal form at all).
const TRICKS: &[&str] = &[
    "/cheq/..%2f..%2foauth%2ftoken",
    "/cheq/..%2F..%2Foauth%2Ftoken",
    "/cheq/confirmations%2f..%2f..%2foauth%2ftoken",
    "/cheq/..%5c..%5coauth%5ctoken",
    "/cheq/..%5C..%5Coauth%5Ctoken",
    "/cheq/..%252f..%252foauth%252ftoken",
    "/cheq/%252e%252e/oauth/token",
    "/cheq/%2e%2e/oauth/token",
    "/cheq/%2E%2E/oauth/token",
    "/cheq/.%2e/oauth/token",
    "/cheq/%2e./oauth/token",
    "/cheq/..;/oauth/token",
    "/cheq/confirmations/../../oauth/token",
    "/cheq/./confirmations/x",
    "/cheq/confirmations/x/../y",
    "/cheq\\..\\oauth\\token",
    "/cheq/confirmations\\x",
];

#[actix_web::test]
async fn encoded_path_tricks_never_reach_the_resource_server() {
    let registered = Counter::start();
    let gw = Gateway::new("voice-gw", "voice-gateway-secret-1");
    let env = Env::start(Options {
        extra: vec![ExtraRs {
            origin: registered.origin(),
        }],
        gateways: vec![gw.clone()],
        ..Options::default()
    })
    .await;
    env.set_pin("alice", "471100");
    let voice = env.voice(&gw);
    let token = voice.user_token("alice", "471100").await;
    let mut anonymous = env.browser();
    let mut signed_in = env.browser();
    signed_in.sign_in("alice", ALICE_PW).await;

    let mut uris = Vec::new();
    for origin in [registered.origin(), env.rs_url.clone()] {
        for path in TRICKS {
            uris.push(format!("{origin}{path}"));
        }
    }
    for uri in &uris {
        for who in [&mut anonymous, &mut signed_in] {
            let page = who.post(START, &[("resource_uri", uri.as_str())]).await;
            assert_eq!(page.status, 400, "{uri}: {}", page.text);
            assert!(
                page.text.contains("did not contact it"),
                "{uri}: {}",
                page.text
            );
            assert!(page.header("location").is_none(), "{uri}");
            let q = serde_urlencoded::to_string([("resource_uri", uri)]).unwrap();
            let page = who.get(&format!("{START}?{q}")).await;
            assert_eq!(page.status, 400, "{uri} (query): {}", page.text);
        }
        // The raw API of voice gateways (§10) goes through the same check.
        let answer = voice.create(Some(&token), uri).await;
        answer.expect(400, uri);
        assert_eq!(answer.error(), "unregistered_resource_server", "{uri}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        registered.count(),
        0,
        "a request left for a refused resource URI"
    );
    assert_eq!(env.rs.executions(), 0);

    // Control: a plain URI under the prefix is fetched (the counter counts).
    let (_, page) = signed_in
        .open(
            START,
            &format!("{}/cheq/confirmations/plain", registered.origin()),
            "alice",
            ALICE_PW,
        )
        .await;
    assert_eq!(page.status, 502, "{}", page.text);
    assert!(registered.count() > 0);
    env.stop().await;
}

// ---------------------------------------------------------------------------
// §3: a huge answer from the token endpoint is cut off
// ---------------------------------------------------------------------------

/// How much the fake token endpoint means to send.
const HUGE: usize = 64 * 1024 * 1024;

/// A resource server on a raw socket whose token endpoint answers a valid
/// token answer of [`HUGE`] bytes (a 64 MiB access token), streamed, and that
/// records how much of it it could write before the CS hung up.
struct HugeTokenRs {
    port: u16,
    /// Body bytes written to token requests, summed over connections.
    written: Arc<AtomicUsize>,
    /// Token answers that ended (written out, or cut off by the CS).
    ended: Arc<AtomicUsize>,
    /// Requests for anything but the token endpoint.
    others: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HugeTokenRs {
    /// `announce`: send `Content-Length: 67108864`; otherwise the answer is
    /// chunked and its length is known only at its end.
    fn start(announce: bool) -> HugeTokenRs {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let written = Arc::new(AtomicUsize::new(0));
        let ended = Arc::new(AtomicUsize::new(0));
        let others = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (w, e, o, s) = (written.clone(), ended.clone(), others.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (w, e, o) = (w.clone(), e.clone(), o.clone());
                        std::thread::spawn(move || serve_huge(stream, announce, &w, &e, &o));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        HugeTokenRs {
            port,
            written,
            ended,
            others,
            stop,
            thread: Some(thread),
        }
    }

    fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Waits (bounded) until `n` token answers ended.
    fn wait_ended(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.ended.load(Ordering::SeqCst) < n {
            assert!(
                Instant::now() < deadline,
                "the token answer never ended: the CS is still reading it"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for HugeTokenRs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one request head (and its body, by Content-Length); its path.
fn read_request(stream: &mut std::net::TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if buf.len() > 64 * 1024 || stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length.min(64 * 1024)];
    stream.read_exact(&mut body).ok()?;
    Some(head.split_whitespace().nth(1)?.to_owned())
}

fn serve_huge(
    mut stream: std::net::TcpStream,
    announce: bool,
    written: &AtomicUsize,
    ended: &AtomicUsize,
    others: &AtomicUsize,
) {
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let Some(path) = read_request(&mut stream) else {
        return;
    };
    if !path.starts_with("/oauth/token") {
        others.fetch_add(1, Ordering::SeqCst);
        let _ = stream.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
        return;
    }
    let prefix = br#"{"access_token":""#;
    let suffix = br#"","token_type":"Bearer","expires_in":3600}"#;
    let framing = if announce {
        format!("content-length: {HUGE}\r\n")
    } else {
        "transfer-encoding: chunked\r\n".to_owned()
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{framing}connection: close\r\n\r\n"
    );
    let mut parts: Vec<Vec<u8>> = vec![prefix.to_vec()];
    let filler = vec![b'a'; 64 * 1024];
    let mut left = HUGE - prefix.len() - suffix.len();
    while left > 0 {
        let n = left.min(filler.len());
        parts.push(filler[..n].to_vec());
        left -= n;
    }
    parts.push(suffix.to_vec());
    let mut sent = 0;
    let mut send = |stream: &mut std::net::TcpStream| -> std::io::Result<()> {
        stream.write_all(head.as_bytes())?;
        for part in &parts {
            if announce {
                stream.write_all(part)?;
            } else {
                stream.write_all(format!("{:x}\r\n", part.len()).as_bytes())?;
                stream.write_all(part)?;
                stream.write_all(b"\r\n")?;
            }
            sent += part.len();
        }
        if !announce {
            stream.write_all(b"0\r\n\r\n")?;
        }
        Ok(())
    };
    let _ = send(&mut stream);
    written.fetch_add(sent, Ordering::SeqCst);
    ended.fetch_add(1, Ordering::SeqCst);
}

async fn huge_token_answer_is_cut_off(announce: bool) {
    let fake = HugeTokenRs::start(announce);
    let env = Env::start(Options {
        extra: vec![ExtraRs {
            origin: fake.origin(),
        }],
        ..Options::default()
    })
    .await;
    let mut b = env.browser();
    b.sign_in("alice", ALICE_PW).await;
    let uri = format!("{}/cheq/confirmations/huge-token", fake.origin());
    let start = b.post(START, &[("resource_uri", uri.as_str())]).await;
    assert_eq!(start.status, 303, "{}", start.text);
    let page = b.get(&start.location()).await;
    assert_eq!(page.status, 502, "{}", page.text);
    assert!(
        page.text
            .contains("token answer is larger than 16384 bytes"),
        "{}",
        page.text
    );
    assert!(!page.raw.contains("name=\"decision\""));
    // The fetch ended, and the CS hung up long before the end of the answer:
    // what it read is bounded, not 64 MiB (socket buffers hold a few MiB).
    fake.wait_ended(1);
    let written = fake.written.load(Ordering::SeqCst);
    assert!(
        written < HUGE / 2,
        "the CS read {written} bytes of the token answer"
    );
    // Without a token, nothing else was asked.
    assert_eq!(fake.others.load(Ordering::SeqCst), 0);
    env.stop().await;
}

#[actix_web::test]
async fn a_huge_streamed_token_answer_is_cut_off() {
    huge_token_answer_is_cut_off(false).await;
}

#[actix_web::test]
async fn a_huge_announced_token_answer_is_refused_unread() {
    huge_token_answer_is_cut_off(true).await;
}

// ---------------------------------------------------------------------------
// §3: concurrent page loads share one token request
// ---------------------------------------------------------------------------

/// A resource server whose token endpoint is slow and counts its requests,
/// and which knows no CHEQ (`404`).
struct SlowTokenRs {
    origin: String,
    tokens: Arc<AtomicUsize>,
    cheqs: Arc<AtomicUsize>,
    /// While set, the token endpoint answers `503`.
    failing: Arc<AtomicBool>,
    handle: ServerHandle,
}

/// How long the fake token endpoint takes to answer: every page load of a
/// wave arrives while the first token request is still in flight.
const TOKEN_DELAY: Duration = Duration::from_millis(3000);
/// The same for a failing answer, longer: a load that came after a failure
/// was given would ask again (a failure is not kept), so on a loaded
/// machine the whole wave must surely arrive while the request is held;
/// yet shorter than the CS's bound on an RS's answer (6 s).
const FAILING_TOKEN_DELAY: Duration = Duration::from_millis(5_000);

impl SlowTokenRs {
    fn start() -> SlowTokenRs {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let origin = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let tokens = Arc::new(AtomicUsize::new(0));
        let cheqs = Arc::new(AtomicUsize::new(0));
        let failing = Arc::new(AtomicBool::new(false));
        let (t, c, f) = (tokens.clone(), cheqs.clone(), failing.clone());
        let server = HttpServer::new(move || {
            let (t, c, f) = (t.clone(), c.clone(), f.clone());
            App::new()
                .route(
                    "/oauth/token",
                    web::post().to(move || {
                        let (t, f) = (t.clone(), f.clone());
                        async move {
                            let n = t.fetch_add(1, Ordering::SeqCst) + 1;
                            let failing = f.load(Ordering::SeqCst);
                            tokio::time::sleep(if failing {
                                FAILING_TOKEN_DELAY
                            } else {
                                TOKEN_DELAY
                            })
                            .await;
                            if failing {
                                HttpResponse::ServiceUnavailable()
                                    .json(json!({"error": "temporarily_unavailable"}))
                            } else {
                                HttpResponse::Ok().json(json!({
                                    "access_token": format!("token-{n}"),
                                    "token_type": "Bearer",
                                    "expires_in": 3600
                                }))
                            }
                        }
                    }),
                )
                .route(
                    "/cheq/confirmations/{id}",
                    web::get().to(move || {
                        let c = c.clone();
                        async move {
                            c.fetch_add(1, Ordering::SeqCst);
                            HttpResponse::NotFound().json(json!({"error": "not_found"}))
                        }
                    }),
                )
        })
        .workers(1)
        .listen(listener)
        .unwrap()
        .run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        SlowTokenRs {
            origin,
            tokens,
            cheqs,
            failing,
            handle,
        }
    }

    fn tokens(&self) -> usize {
        self.tokens.load(Ordering::SeqCst)
    }

    fn cheqs(&self) -> usize {
        self.cheqs.load(Ordering::SeqCst)
    }
}

/// How many page loads a wave makes at once.
const WAVE: usize = 8;

/// Starts `WAVE` confirmations (`wave` names them apart), then loads all
/// their pages at once; the statuses of the pages.
async fn load_wave(b: &mut Browser, rs: &str, wave: &str) -> Vec<u16> {
    let mut paths = Vec::new();
    for i in 0..WAVE {
        let uri = format!("{rs}/cheq/confirmations/{wave}-{i}");
        let start = b.post(START, &[("resource_uri", uri.as_str())]).await;
        assert_eq!(start.status, 303, "{}", start.text);
        paths.push(start.location());
    }
    let cookie = format!("cheq_session={}", b.session.clone().unwrap());
    let tasks: Vec<_> = paths
        .into_iter()
        .map(|path| {
            let (http, url, cookie) = (b.http.clone(), b.url(&path), cookie.clone());
            actix_web::rt::spawn(async move {
                let res = http.get(url).header("cookie", cookie).send().await.unwrap();
                res.status().as_u16()
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    statuses
}

#[actix_web::test]
async fn concurrent_page_loads_of_a_fresh_cs_make_one_token_request() {
    let rs = SlowTokenRs::start();
    let env = Env::start(Options {
        extra: vec![ExtraRs {
            origin: rs.origin.clone(),
        }],
        ..Options::default()
    })
    .await;
    let mut b = env.browser();
    b.sign_in("alice", ALICE_PW).await;

    let statuses = load_wave(&mut b, &rs.origin, "first").await;
    // Each page asked the RS for its CHEQ (the RS knows none), with the one
    // token between them.
    assert_eq!(statuses, vec![404; WAVE]);
    assert_eq!(rs.cheqs(), WAVE);
    assert_eq!(rs.tokens(), 1, "token requests for {WAVE} page loads");

    // The token is kept: another wave asks for none.
    let statuses = load_wave(&mut b, &rs.origin, "second").await;
    assert_eq!(statuses, vec![404; WAVE]);
    assert_eq!(rs.cheqs(), 2 * WAVE);
    assert_eq!(rs.tokens(), 1);
    env.stop().await;
    rs.handle.stop(true).await;
}

#[actix_web::test]
async fn concurrent_page_loads_share_one_failed_token_request() {
    let rs = SlowTokenRs::start();
    rs.failing.store(true, Ordering::SeqCst);
    let env = Env::start(Options {
        extra: vec![ExtraRs {
            origin: rs.origin.clone(),
        }],
        ..Options::default()
    })
    .await;
    let mut b = env.browser();
    b.sign_in("alice", ALICE_PW).await;

    // The waiters get the failure of the request they waited for, rather
    // than each asking again in turn.
    let statuses = load_wave(&mut b, &rs.origin, "failing").await;
    assert_eq!(statuses, vec![502; WAVE]);
    assert_eq!(rs.tokens(), 1, "token requests for {WAVE} page loads");
    assert_eq!(rs.cheqs(), 0);

    // A failure is not kept: the next load asks again, and succeeds.
    rs.failing.store(false, Ordering::SeqCst);
    let statuses = load_wave(&mut b, &rs.origin, "recovered").await;
    assert_eq!(statuses, vec![404; WAVE]);
    assert_eq!(rs.tokens(), 2);
    assert_eq!(rs.cheqs(), WAVE);
    env.stop().await;
    rs.handle.stop(true).await;
}

// ---------------------------------------------------------------------------
// TLS: the CS's clients share one TLS connector (built once, not per
// thread), which still checks the RS's certificate against the system's
// roots. A real `openssl s_server` with a self-signed certificate: refused
// while the system does not trust it, reached once it does.

/// A TLS server (`openssl s_server`) with a new self-signed certificate for
/// 127.0.0.1, killed when dropped.
struct TlsServer {
    child: std::process::Child,
    port: u16,
    cert: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl TlsServer {
    fn start() -> TlsServer {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let made = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"])
            .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("openssl (scripts/pg installs it)");
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new("openssl")
            .args(["s_server", "-quiet", "-www", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "openssl s_server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        TlsServer {
            child,
            port,
            cert,
            _dir: dir,
        }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Set in the child process of
/// [`the_shared_tls_connector_checks_the_rs_certificate`] to the TLS server's
/// origin; the child runs with `SSL_CERT_FILE` naming its certificate.
const TLS_CHILD_ORIGIN: &str = "CHEQ_TLS_CHILD_ORIGIN";
const TLS_REACHED: &str = "TLS-REACHED";

#[actix_web::test]
async fn the_shared_tls_connector_checks_the_rs_certificate() {
    use cheq::confirm::fetch::{FetchError, RsClient};
    const TEST: &str = "the_shared_tls_connector_checks_the_rs_certificate";
    if let Ok(origin) = std::env::var(TLS_CHILD_ORIGIN) {
        // Child: trusted (OpenSSL reads SSL_CERT_FILE when the connector is
        // built), the TLS handshake succeeds, and what fails is the token
        // request, at the HTTP level (s_server answers no OAuth).
        let trusted = RsClient::new(&format!("{origin}/token"), "cs", "secret").unwrap();
        let reached = trusted
            .fetch_cheq(&format!("{origin}/cheq/confirmations/x"))
            .await;
        assert!(
            !matches!(reached, Err(FetchError::Unreachable(_)) | Ok(_)),
            "the trusted server was not reached over TLS: {reached:?}"
        );
        println!("{TLS_REACHED}");
        return;
    }
    let server = TlsServer::start();
    let origin = format!("https://127.0.0.1:{}", server.port);
    let uri = format!("{origin}/cheq/confirmations/x");
    // One client, used from two threads: the second builds its own HTTP
    // client over the shared connector.
    let untrusted = Arc::new(RsClient::new(&format!("{origin}/token"), "cs", "secret").unwrap());
    let other_thread = {
        let (client, uri) = (untrusted.clone(), uri.clone());
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async move { client.fetch_cheq(&uri).await })
        })
    };
    let here = untrusted.fetch_cheq(&uri).await;
    for refused in [here, other_thread.join().unwrap()] {
        assert!(
            matches!(refused, Err(FetchError::Unreachable(_))),
            "a self-signed certificate was not refused: {refused:?}"
        );
    }
    // Trusted, in a child process: the environment is not changed under
    // this process's other threads.
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(TLS_CHILD_ORIGIN, &origin)
        .env("SSL_CERT_FILE", &server.cert)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success() && out.contains(TLS_REACHED),
        "the child did not reach the trusted server: {out}{}",
        String::from_utf8_lossy(&child.stderr)
    );
}
