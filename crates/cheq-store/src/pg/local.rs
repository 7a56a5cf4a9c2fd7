//! Connections driven by the thread that calls (for PostgreSQL's flow
//! rate).
//!
//! The store traits are synchronous ([`super`]). Through the pool, a call
//! was a hand-off: the calling thread put its query on the pool's runtime
//! and slept; a runtime thread woke to send it, woke again when the answer
//! came, and woke the caller. Three threads woke for every statement, where
//! one round trip needs one, and a flow on PostgreSQL made far more thread
//! switches than one on sled (BENCHMARKS.md: what driving them here bought).
//!
//! Here a connection belongs to no runtime. Its socket is non-blocking and
//! registered with a poller of its own ([`mio`]); the thread that takes the
//! connection polls the call's future and the connection's beside it, and
//! sleeps in the poller until the database answers, the call's deadline
//! passes, or something else the call waits for wakes it (a waker from
//! another thread writes to the poller's wake-up descriptor). No runtime is
//! entered, so this runs on any thread, an async worker's included, where
//! the hand-off ran too (the caller blocks either way).
//!
//! [`LocalPool::try_run`] takes an idle connection or opens one, up to its
//! bound; past it, the call is handed back, and goes through the pool as
//! before. A connection that ended, or whose call timed out (an answer may
//! still be on its way), is closed rather than kept. Each keeps its own
//! prepared statements ([`LocalClient::prepare_cached`]), as the pool's do.
//!
//! TLS is as the URL says ([`super::tls`]): the same connector, over this
//! socket; over a Unix socket there is none, as in libpq.

use super::{db_error, unavailable, StoreError};
use mio::{Events, Interest, Token};
use postgres_native_tls::MakeTlsConnector;
use std::collections::HashMap;
use std::future::Future;
use std::io::{self, Read, Write};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::Host;
use tokio_postgres::tls::{MakeTlsConnect, NoTls, TlsConnect};
use tokio_postgres::{Client, Config, Statement};

const SOCKET: Token = Token(0);
const WAKE: Token = Token(1);

/// A connection's socket: non-blocking, registered with its own poller.
/// Reads and writes that would block return `Pending` without a waker: the
/// driving loop ([`Driver::drive`]) polls again when the poller says the
/// socket is ready.
#[derive(Debug)]
pub(super) enum Socket {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
}

/// `Pending` for an operation that would block, the error otherwise.
fn ready<T>(result: io::Result<T>) -> Poll<io::Result<T>> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        other => Poll::Ready(other),
    }
}

/// `op` again while a signal interrupts it.
fn uninterrupted<T>(mut op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match op() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

impl Socket {
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        uninterrupted(|| match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Unix(s) => s.read(buf),
        })
    }

    fn write_some(&mut self, buf: &[u8]) -> io::Result<usize> {
        uninterrupted(|| match self {
            Socket::Tcp(s) => s.write(buf),
            Socket::Unix(s) => s.write(buf),
        })
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let n = match ready(this.read_some(buf.initialize_unfilled())) {
            Poll::Ready(Ok(n)) => n,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        };
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready(self.get_mut().write_some(buf))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Nothing is buffered here: a write went to the kernel.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let shut = match self.get_mut() {
            Socket::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            Socket::Unix(s) => s.shutdown(std::net::Shutdown::Write),
        };
        match shut {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Poll::Ready(Ok(())),
            other => ready(other),
        }
    }
}

/// The waker of a driven call. A wake from the driving thread itself (the
/// connection handing an answer to the call) only marks that there is more
/// to poll; one from another thread while the driver sleeps also wakes the
/// poller.
struct Flag {
    woken: AtomicBool,
    sleeping: AtomicBool,
    poller: mio::Waker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            // Failing means the poller is gone: nobody waits.
            let _ = self.poller.wake();
        }
    }
}

/// Why a driven future did not finish.
#[derive(Debug)]
pub(super) enum Stop {
    /// The deadline passed first.
    Deadline,
    /// The poller failed.
    Poller(io::Error),
}

/// What a connection's protocol task is once connected: the tokio-postgres
/// `Connection`, boxed so that plain and TLS ones are one type.
type Protocol = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

/// One connection's poller and waker.
struct Driver {
    poll: mio::Poll,
    events: Events,
    flag: Arc<Flag>,
    waker: Waker,
}

impl Driver {
    fn new() -> io::Result<Driver> {
        let poll = mio::Poll::new()?;
        let poller = mio::Waker::new(poll.registry(), WAKE)?;
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            poller,
        });
        Ok(Driver {
            poll,
            events: Events::with_capacity(4),
            waker: Waker::from(flag.clone()),
            flag,
        })
    }

    fn register(&self, socket: &mut Socket) -> io::Result<()> {
        let interest = Interest::READABLE | Interest::WRITABLE;
        let registry = self.poll.registry();
        match socket {
            Socket::Tcp(s) => registry.register(s, SOCKET, interest),
            Socket::Unix(s) => registry.register(s, SOCKET, interest),
        }
    }

    /// Polls `fut` (and `protocol` beside it, while it runs) until `fut` is
    /// ready, sleeping in the poller between rounds, at most until
    /// `deadline`. A protocol task that ends is dropped, which fails the
    /// requests it still held.
    fn drive<F: Future + ?Sized>(
        &mut self,
        mut fut: Pin<&mut F>,
        protocol: &mut Option<Protocol>,
        deadline: Instant,
    ) -> Result<F::Output, Stop> {
        let waker = self.waker.clone();
        let mut cx = Context::from_waker(&waker);
        loop {
            self.flag.woken.store(false, Ordering::SeqCst);
            if let Poll::Ready(output) = fut.as_mut().poll(&mut cx) {
                return Ok(output);
            }
            if let Some(task) = protocol.as_mut() {
                if task.as_mut().poll(&mut cx).is_ready() {
                    *protocol = None;
                    continue;
                }
            }
            self.flag.sleeping.store(true, Ordering::SeqCst);
            let slept = if self.flag.woken.load(Ordering::SeqCst) {
                Ok(())
            } else {
                match deadline.checked_duration_since(Instant::now()) {
                    None => Err(Stop::Deadline),
                    Some(left) => match self.poll.poll(&mut self.events, Some(left)) {
                        Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(Stop::Poller(e)),
                        _ => Ok(()),
                    },
                }
            };
            self.flag.sleeping.store(false, Ordering::SeqCst);
            slept?;
        }
    }
}

/// The client half of a connection, which a call's future holds: its
/// statements are prepared once per connection.
pub(crate) struct LocalClient {
    client: Client,
    statements: Mutex<HashMap<String, Statement>>,
}

impl LocalClient {
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// `sql` prepared on this connection, once.
    pub(crate) async fn prepare_cached(
        &self,
        sql: &str,
    ) -> Result<Statement, tokio_postgres::Error> {
        if let Some(s) = self.statements().get(sql) {
            return Ok(s.clone());
        }
        let statement = self.client.prepare(sql).await?;
        self.statements().insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    fn statements(&self) -> std::sync::MutexGuard<'_, HashMap<String, Statement>> {
        // A panic while the map was held leaves it whole (one insert).
        self.statements
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// An open connection. Dropping it closes it and gives its place in the
/// pool's bound back, however it goes (a call that panics included).
struct Conn {
    driver: Driver,
    client: Arc<LocalClient>,
    protocol: Option<Protocol>,
    /// The pool's count of open connections.
    slot: Arc<AtomicUsize>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.slot.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Conn {
    /// Whether nothing has ended the connection yet, as far as is known.
    fn up(&self) -> bool {
        self.protocol.is_some() && !self.client.client.is_closed()
    }

    /// Whether the connection is still up, its protocol task polled once
    /// without waiting (the server may have closed it while it was idle).
    fn alive(&mut self) -> bool {
        let waker = self.driver.waker.clone();
        let mut cx = Context::from_waker(&waker);
        if let Some(task) = self.protocol.as_mut() {
            if task.as_mut().poll(&mut cx).is_ready() {
                self.protocol = None;
            }
        }
        self.up()
    }
}

/// Where the socket of the `i`th host goes.
enum Target {
    Tcp(std::net::SocketAddr, String),
    Unix(std::path::PathBuf),
}

/// Opens a connection as `config` says (its hosts in order, the first that
/// answers), with `tls` over TCP.
fn connect(
    config: &Config,
    tls: Option<&MakeTlsConnector>,
    op: &'static str,
    deadline: Instant,
    slot: &Arc<AtomicUsize>,
) -> Result<Conn, StoreError> {
    let hosts = config.get_hosts();
    let ports = config.get_ports();
    let addrs = config.get_hostaddrs();
    let mut last = unavailable(op, "the database URL names no host");
    for (i, host) in hosts.iter().enumerate() {
        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        let targets: Vec<Target> = match host {
            Host::Unix(dir) => vec![Target::Unix(dir.join(format!(".s.PGSQL.{port}")))],
            Host::Tcp(name) => match addrs.get(i) {
                Some(ip) => vec![Target::Tcp((*ip, port).into(), name.clone())],
                None => match std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), port)) {
                    Ok(found) => found.map(|a| Target::Tcp(a, name.clone())).collect(),
                    Err(e) => {
                        last = unavailable(op, format!("could not resolve the database host: {e}"));
                        continue;
                    }
                },
            },
        };
        for target in targets {
            match open(config, tls, target, op, deadline, slot) {
                Ok(conn) => return Ok(conn),
                Err(e) => last = e,
            }
        }
    }
    Err(last)
}

fn open(
    config: &Config,
    tls: Option<&MakeTlsConnector>,
    target: Target,
    op: &'static str,
    deadline: Instant,
    slot: &Arc<AtomicUsize>,
) -> Result<Conn, StoreError> {
    let refused = |e: io::Error| unavailable(op, format!("could not connect to the database: {e}"));
    let left = deadline
        .checked_duration_since(Instant::now())
        .ok_or_else(|| unavailable(op, "no database connection could be had in time"))?;
    let (mut socket, name) = match target {
        Target::Tcp(addr, name) => {
            let s = std::net::TcpStream::connect_timeout(&addr, left).map_err(refused)?;
            s.set_nodelay(true).map_err(refused)?;
            s.set_nonblocking(true).map_err(refused)?;
            (Socket::Tcp(mio::net::TcpStream::from_std(s)), Some(name))
        }
        Target::Unix(path) => {
            let s = std::os::unix::net::UnixStream::connect(path).map_err(refused)?;
            s.set_nonblocking(true).map_err(refused)?;
            (Socket::Unix(mio::net::UnixStream::from_std(s)), None)
        }
    };
    let driver = Driver::new().map_err(refused)?;
    driver.register(&mut socket).map_err(refused)?;
    match (tls, name) {
        (Some(tls), Some(name)) => {
            let connector = <MakeTlsConnector as MakeTlsConnect<Socket>>::make_tls_connect(
                &mut tls.clone(),
                &name,
            )
            .map_err(|e| unavailable(op, format!("TLS to the database: {e}")))?;
            handshake(driver, config, socket, connector, op, deadline, slot)
        }
        _ => handshake(driver, config, socket, NoTls, op, deadline, slot),
    }
}

/// The protocol's start-up (and TLS's, when `tls` does it) over `socket`.
fn handshake<T>(
    mut driver: Driver,
    config: &Config,
    socket: Socket,
    tls: T,
    op: &'static str,
    deadline: Instant,
    slot: &Arc<AtomicUsize>,
) -> Result<Conn, StoreError>
where
    T: TlsConnect<Socket>,
    T::Stream: Send + 'static,
{
    let started = pin!(config.connect_raw(socket, tls));
    let (client, connection) = match driver.drive(started, &mut None, deadline) {
        Ok(connected) => connected.map_err(db_error(op))?,
        Err(Stop::Deadline) => {
            return Err(unavailable(
                op,
                "no database connection could be had in time",
            ))
        }
        Err(Stop::Poller(e)) => return Err(unavailable(op, e.to_string())),
    };
    Ok(Conn {
        driver,
        client: Arc::new(LocalClient {
            client,
            statements: Mutex::new(HashMap::new()),
        }),
        protocol: Some(Box::pin(connection)),
        slot: slot.clone(),
    })
}

/// Connections for calling threads to drive, at most `max` open.
pub(super) struct LocalPool {
    config: Config,
    tls: Option<MakeTlsConnector>,
    idle: Mutex<Vec<Conn>>,
    open: Arc<AtomicUsize>,
    max: usize,
}

impl LocalPool {
    pub(super) fn new(config: Config, tls: Option<MakeTlsConnector>, max: usize) -> LocalPool {
        LocalPool {
            config,
            tls,
            idle: Mutex::new(Vec::new()),
            open: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many connections are open (idle or in a call).
    #[cfg(test)]
    pub(super) fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// An idle connection that is still up, if any.
    fn take(&self) -> Option<Conn> {
        loop {
            let mut conn = self.idle().pop()?;
            if conn.alive() {
                return Some(conn);
            }
        }
    }

    /// A place for one more connection, if under the bound.
    fn reserve(&self) -> bool {
        self.open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Runs `f` on a connection of this pool, on the calling thread, at
    /// most until `deadline`; hands `f` back when every connection is busy
    /// and the bound is reached.
    pub(super) fn try_run<T, F, Fut>(
        &self,
        op: &'static str,
        deadline: Instant,
        f: F,
    ) -> Result<Result<T, StoreError>, F>
    where
        F: FnOnce(super::Source) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut conn = match self.take() {
            Some(conn) => conn,
            None if self.reserve() => {
                let by = match self.config.get_connect_timeout() {
                    Some(limit) => deadline.min(Instant::now() + *limit),
                    None => deadline,
                };
                match connect(&self.config, self.tls.as_ref(), op, by, &self.open) {
                    Ok(conn) => conn,
                    Err(e) => {
                        self.open.fetch_sub(1, Ordering::SeqCst);
                        return Ok(Err(e));
                    }
                }
            }
            None => return Err(f),
        };
        let driven = {
            let call = pin!(f(super::Source::Local(conn.client.clone())));
            conn.driver.drive(call, &mut conn.protocol, deadline)
        };
        match driven {
            Ok(answer) => {
                // Otherwise dropped, and so closed.
                if conn.up() {
                    self.idle().push(conn);
                }
                Ok(answer)
            }
            Err(stop) => {
                // An answer may still be on its way: not reused.
                drop(conn);
                Ok(Err(match stop {
                    Stop::Deadline => unavailable(op, "the database did not answer in time"),
                    Stop::Poller(e) => unavailable(op, e.to_string()),
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::{client, db_error, test_database_or_skip, Pg};
    use std::time::Duration;

    fn pool(url: &str, max: usize) -> LocalPool {
        let (url, settings) = crate::pg::tls::split(url).unwrap();
        let config: Config = url.parse().unwrap();
        LocalPool::new(config, crate::pg::tls::connector(&settings).unwrap(), max)
    }

    /// The backend's process id: which connection a call ran on.
    fn backend_pid(pool: &LocalPool, limit: Duration) -> Result<Result<i32, StoreError>, ()> {
        pool.try_run("pid", Instant::now() + limit, |source| async move {
            let c = client(&source, "pid").await?;
            let row = c
                .query_one("SELECT pg_backend_pid()", &[])
                .await
                .map_err(db_error("pid"))?;
            Ok(row.get::<_, i32>(0))
        })
        .map_err(|_| ())
    }

    #[test]
    fn calls_reuse_the_connection_the_caller_drove() {
        let Some(url) = test_database_or_skip("local_reuse") else {
            return;
        };
        let pool = pool(&url, 2);
        let first = backend_pid(&pool, Duration::from_secs(5)).unwrap().unwrap();
        for _ in 0..5 {
            assert_eq!(
                backend_pid(&pool, Duration::from_secs(5)).unwrap().unwrap(),
                first
            );
        }
        assert_eq!(pool.open(), 1);
        // Prepared once per connection, and the same statement after.
        let prepared = |pool: &LocalPool| {
            pool.try_run(
                "prepared",
                Instant::now() + Duration::from_secs(5),
                |source| async move {
                    let c = client(&source, "prepared").await?;
                    let s = c
                        .prepare_cached("SELECT $1::int + 1")
                        .await
                        .map_err(db_error("p"))?;
                    let row = c.query_one(&s, &[&41i32]).await.map_err(db_error("p"))?;
                    Ok(row.get::<_, i32>(0))
                },
            )
            .map_err(|_| ())
            .unwrap()
            .unwrap()
        };
        assert_eq!(prepared(&pool), 42);
        assert_eq!(prepared(&pool), 42);
        let cached = pool.idle()[0].client.statements().len();
        assert_eq!(cached, 1);
    }

    #[test]
    fn a_call_past_its_deadline_fails_and_its_connection_is_closed() {
        let Some(url) = test_database_or_skip("local_deadline") else {
            return;
        };
        let pool = pool(&url, 2);
        let before = backend_pid(&pool, Duration::from_secs(5)).unwrap().unwrap();
        let slow = pool
            .try_run(
                "slow",
                Instant::now() + Duration::from_millis(300),
                |source| async move {
                    let c = client(&source, "slow").await?;
                    c.simple_query("SELECT pg_sleep(3)")
                        .await
                        .map_err(db_error("slow"))?;
                    Ok(())
                },
            )
            .map_err(|_| ())
            .unwrap();
        match slow {
            Err(StoreError::Unavailable { op, message }) => {
                assert_eq!(op, "slow");
                assert!(message.contains("did not answer in time"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            pool.open(),
            0,
            "the connection of a call that timed out is closed"
        );
        let after = backend_pid(&pool, Duration::from_secs(5)).unwrap().unwrap();
        assert_ne!(after, before);
    }

    #[test]
    fn a_connection_the_server_closed_while_idle_is_replaced() {
        let Some(url) = test_database_or_skip("local_closed") else {
            return;
        };
        let pool = pool(&url, 2);
        let first = backend_pid(&pool, Duration::from_secs(5)).unwrap().unwrap();
        let pg = Pg::new(&url, 1).unwrap();
        pg.call_pooled(
            "terminate",
            Duration::from_secs(5),
            false,
            move |pool| async move {
                let c = crate::pg::pooled(&pool, "terminate").await?;
                c.execute("SELECT pg_terminate_backend($1)", &[&first])
                    .await
                    .map_err(db_error("terminate"))?;
                Ok(())
            },
        )
        .unwrap();
        // The server's goodbye reaches the socket a moment later.
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.idle()[0].alive() {
            assert!(
                Instant::now() < deadline,
                "the closed connection looks alive"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // The call is not failed by the closed connection: another is opened.
        let next = backend_pid(&pool, Duration::from_secs(5)).unwrap().unwrap();
        assert_ne!(next, first);
        assert_eq!(pool.open(), 1);
    }

    #[test]
    fn a_wake_from_another_thread_ends_the_wait() {
        let Some(url) = test_database_or_skip("local_wake") else {
            return;
        };
        let pool = pool(&url, 1);
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            tx.send(7).unwrap();
        });
        let answer = pool
            .try_run(
                "wait",
                Instant::now() + Duration::from_secs(3),
                |_source| async move { rx.await.map_err(|_| unavailable("wait", "sender gone")) },
            )
            .map_err(|_| ())
            .unwrap();
        sender.join().unwrap();
        assert_eq!(answer.unwrap(), 7);
    }

    #[test]
    fn a_call_past_the_bound_is_handed_back() {
        let Some(url) = test_database_or_skip("local_bound") else {
            return;
        };
        let pool = pool(&url, 1);
        let (taken_tx, taken_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let pool = &pool;
            let holder = scope.spawn(move || {
                pool.try_run(
                    "hold",
                    Instant::now() + Duration::from_secs(5),
                    |source| async move {
                        let c = client(&source, "hold").await?;
                        let _ = taken_tx.send(());
                        c.simple_query("SELECT pg_sleep(0.5)")
                            .await
                            .map_err(db_error("hold"))?;
                        Ok(())
                    },
                )
                .map_err(|_| ())
                .unwrap()
                .unwrap();
            });
            taken_rx.recv().unwrap();
            // The one connection is busy: the call comes back untouched.
            let handed = pool.try_run(
                "second",
                Instant::now() + Duration::from_secs(5),
                |_| async { Ok(1) },
            );
            assert!(handed.is_err());
            holder.join().unwrap();
        });
        assert_eq!(pool.open(), 1);
        // Through `Pg`, a call past the bound goes through the runtime's pool.
        let pg = Pg::new(&url, 1).unwrap();
        let barrier = std::sync::Barrier::new(2);
        // Each call holds its connection until both are inside one: two at
        // once, however the threads are scheduled (were they served one
        // after the other, the first would wait past the call's bound).
        let both_in = std::sync::Arc::new(tokio::sync::Barrier::new(2));
        let pids: Vec<i32> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let (pg, barrier, both_in) = (&pg, &barrier, both_in.clone());
                    scope.spawn(move || {
                        barrier.wait();
                        pg.call("pid", |source| async move {
                            let c = client(&source, "pid").await?;
                            let row = c
                                .query_one("SELECT pg_backend_pid()", &[])
                                .await
                                .map_err(db_error("pid"))?;
                            both_in.wait().await;
                            Ok(row.get::<_, i32>(0))
                        })
                        .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_ne!(pids[0], pids[1], "{pids:?}");
        assert_eq!(pg.inner.local.open(), 1);
    }

    #[test]
    fn a_call_that_panics_gives_its_place_back() {
        let Some(url) = test_database_or_skip("local_panic") else {
            return;
        };
        let pool = pool(&url, 1);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = pool.try_run(
                "panics",
                Instant::now() + Duration::from_secs(5),
                |source| async move {
                    let c = client(&source, "panics").await?;
                    c.simple_query("SELECT 1")
                        .await
                        .map_err(db_error("panics"))?;
                    if c.is_closed() {
                        return Ok(());
                    }
                    panic!("a bug in a call");
                },
            );
        }));
        assert!(panicked.is_err());
        assert_eq!(pool.open(), 0);
        // The one place is free again: a call runs.
        assert!(backend_pid(&pool, Duration::from_secs(5)).unwrap().is_ok());
        assert_eq!(pool.open(), 1);
    }

    #[test]
    fn an_unreachable_database_is_an_outage_by_name() {
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pool = pool(
            &format!("postgres://cheq@127.0.0.1:{port}/cheq?sslmode=disable"),
            1,
        );
        match backend_pid(&pool, Duration::from_secs(2)).unwrap() {
            Err(StoreError::Unavailable { op, message }) => {
                assert_eq!(op, "pid");
                assert!(message.contains("could not connect"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(pool.open(), 0);
    }
}
