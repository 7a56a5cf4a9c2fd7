//! The PostgreSQL backend of every store trait (ISSUE 9: several instances of
//! either server over one database), beside the embedded sled default.
//!
//! - [`Pg`] holds the connections (tokio-postgres), and the store traits
//!   stay synchronous like sled's: a call runs its statements on a
//!   connection that the calling thread drives itself ([`local`]: no
//!   runtime, one wake-up per round trip), or, when all of those are busy
//!   or the call needs a transaction, hands them to a pool
//!   (deadpool-postgres) on a small runtime of its own. Either way the
//!   answer is bounded by [`CALL_TIMEOUT`]. The calling thread waits, as it
//!   would for sled's flush; the servers run more worker threads on
//!   PostgreSQL for that reason.
//! - Every connection runs with `synchronous_commit = on`: a write a method
//!   calls durable is on the database's disk (WAL flushed) before it returns,
//!   which survives a power loss, not only a killed process. Writes that may
//!   be lost (a lease, a cache of a fetched document, a session) go through
//!   a second pool whose sessions run with `synchronous_commit = off`
//!   ([`Pg::call_lazy`]): one round trip, visible to every instance at once,
//!   on disk a moment later.
//! - Connections use TLS as the URL's `sslmode` and `sslrootcert` say, with
//!   libpq's meaning of each ([`tls`]).
//! - [`migrate`] applies the versioned schema of one server ([`cs::MIGRATIONS`],
//!   [`rs::MIGRATIONS`]; the A2A bridge's [`a2a::MIGRATIONS`]) under a
//!   transaction-level advisory lock, so that instances starting at once
//!   apply each step once; the tables of the CS (`cs_*`), of the RS
//!   (`rs_*`) and of the A2A bridge (`a2a_*`) can share one database.
//! - The guarantees across instances come from the database, never from a
//!   lock in one process: a claim is `INSERT … ON CONFLICT DO NOTHING`, a
//!   compare-and-set is an `UPDATE … WHERE` the old value, and the delivery
//!   outbox is leased with `FOR UPDATE SKIP LOCKED`.

pub mod a2a;
pub mod cs;
mod local;
mod nonce_batch;
pub mod rs;
mod schema;
#[cfg(any(test, feature = "test-support"))]
mod testdb;
pub mod tls;

pub use schema::{applied, Migration, SchemaReadiness};
#[cfg(any(test, feature = "test-support"))]
pub use testdb::{fresh_database, test_database, test_database_or_skip, TEST_DATABASE_ENV};

use super::{Durability, StoreError};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::NoTls;

/// What a store call does with the database: given where its connection
/// comes from (`A`: a [`Source`], or the [`Pool`] for a transaction), the
/// future that does the work, which may run on the calling thread or on the
/// pool's runtime.
pub(crate) trait Work<A, T>:
    FnOnce(A) -> <Self as Work<A, T>>::Fut + Send + 'static
{
    /// The work under way.
    type Fut: Future<Output = Result<T, StoreError>> + Send + 'static;
}

impl<A, T, F, Fut> Work<A, T> for F
where
    F: FnOnce(A) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
{
    type Fut = Fut;
}

/// How long one store call may take, waiting for a connection included,
/// before it fails with an error (a database that hangs does not hang the
/// server).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a readiness check waits for the database.
pub const PING_TIMEOUT: Duration = Duration::from_secs(3);

/// How long opening a connection may take (unless the URL says otherwise).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The runtime the pool's connections live on; shut down without waiting
/// when the last handle goes (dropping a runtime inside another would panic).
struct Rt(Option<tokio::runtime::Runtime>);

impl Drop for Rt {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

struct Inner {
    /// Connections that the calling thread drives itself ([`local`]): every
    /// call tries these first.
    local: local::LocalPool,
    /// The same with `synchronous_commit = off`.
    local_lazy: local::LocalPool,
    /// Connections on the runtime: the nonce gatherer's, calls that need a
    /// transaction, and calls made while every local connection is busy.
    pool: Pool,
    /// Connections whose commits do not wait for the disk: for the writes
    /// a crash may lose (one round trip instead of a transaction with
    /// `SET LOCAL`).
    lazy: Pool,
    handle: tokio::runtime::Handle,
    // Last: dropped after the pool.
    _rt: Rt,
}

/// A pool of connections to one PostgreSQL database. Cloning shares it.
#[derive(Clone)]
pub struct Pg {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Pg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: never shown.
        f.debug_struct("Pg").finish_non_exhaustive()
    }
}

/// A backend error of operation `op`.
pub(crate) fn backend(op: &'static str, message: impl Into<String>) -> StoreError {
    StoreError::Backend {
        op,
        message: message.into(),
    }
}

/// An outage: the database cannot be reached now.
pub(crate) fn unavailable(op: &'static str, message: impl Into<String>) -> StoreError {
    StoreError::Unavailable {
        op,
        message: message.into(),
    }
}

/// A database error, with what the server said when it said something; a
/// lost or refused connection (or a server shutting down) is an outage.
pub(crate) fn db_error(op: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError {
    move |e| {
        let message = match e.as_db_error() {
            Some(db) => {
                let code = db.code().code();
                let message = format!("{} ({code})", db.message());
                // Class 08: connection exception; 57P: operator intervention.
                if code.starts_with("08") || code.starts_with("57P") {
                    return unavailable(op, message);
                }
                return backend(op, message);
            }
            None => {
                let mut m = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    m.push_str(": ");
                    m.push_str(&s.to_string());
                    source = s.source();
                }
                m
            }
        };
        unavailable(op, message)
    }
}

/// A stored value that cannot be read.
pub(crate) fn corrupt(key: &str, reason: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        key: key.to_owned(),
        reason: reason.to_string(),
    }
}

/// Reads a JSON value stored under `key`.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    key: &str,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(key, e))
}

/// A value as stored (JSON text, kept byte for byte: no key reordering).
pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| backend("encode", e.to_string()))
}

/// What a store call is given to run its statements on: a connection the
/// calling thread drives ([`local`]), or the pool on the runtime.
#[derive(Clone)]
pub(crate) enum Source {
    Pool(Pool),
    Local(Arc<local::LocalClient>),
}

/// A connection taken for one call.
pub(crate) enum ClientRef {
    Pooled(Box<Object>),
    Local(Arc<local::LocalClient>),
}

impl ClientRef {
    /// `sql` prepared once per connection.
    pub(crate) async fn prepare_cached(
        &self,
        sql: &str,
    ) -> Result<tokio_postgres::Statement, tokio_postgres::Error> {
        match self {
            ClientRef::Pooled(c) => c.prepare_cached(sql).await,
            ClientRef::Local(c) => c.prepare_cached(sql).await,
        }
    }
}

impl std::ops::Deref for ClientRef {
    type Target = tokio_postgres::Client;

    fn deref(&self) -> &tokio_postgres::Client {
        match self {
            ClientRef::Pooled(c) => c,
            ClientRef::Local(c) => c.client(),
        }
    }
}

/// The connection of a call.
pub(crate) async fn client(source: &Source, op: &'static str) -> Result<ClientRef, StoreError> {
    match source {
        Source::Pool(pool) => pooled(pool, op)
            .await
            .map(|c| ClientRef::Pooled(Box::new(c))),
        Source::Local(c) => Ok(ClientRef::Local(c.clone())),
    }
}

/// A connection of the pool on the runtime.
pub(crate) async fn pooled(pool: &Pool, op: &'static str) -> Result<Object, StoreError> {
    pool.get().await.map_err(|e| match e {
        deadpool_postgres::PoolError::Backend(e) => db_error(op)(e),
        deadpool_postgres::PoolError::Timeout(_) => {
            unavailable(op, "no database connection could be had in time")
        }
        other => unavailable(op, other.to_string()),
    })
}

/// Why a database URL was refused (its text is never repeated: it may hold
/// a password).
#[derive(Debug, thiserror::Error)]
#[error("database_url is not a PostgreSQL URL (postgres://user@host:port/dbname): {0}")]
pub struct UrlError(String);

impl Pg {
    /// Connections to the database at `url`, at most `max_size` of them
    /// (at least 6: one of each kind, and the nonce gatherer's). Nothing is
    /// connected yet: the first call (or [`Pg::ping`]) connects.
    pub fn new(url: &str, max_size: usize) -> Result<Pg, StoreError> {
        let (url, settings) = tls::split(url)?;
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e: tokio_postgres::Error| {
                backend("database_url", UrlError(e.to_string()).to_string())
            })?;
        tls::warn_if_unchecked(&settings, &config);
        // A Unix socket never leaves the machine, and PostgreSQL offers no
        // TLS on one: as libpq does, sslmode is not applied there (and no
        // root file is read).
        #[cfg(unix)]
        let unix_only = !config.get_hosts().is_empty()
            && config
                .get_hosts()
                .iter()
                .all(|h| matches!(h, tokio_postgres::config::Host::Unix(_)));
        #[cfg(not(unix))]
        let unix_only = false;
        let tls = if unix_only {
            config.ssl_mode(tokio_postgres::config::SslMode::Disable);
            None
        } else {
            tls::connector(&settings)?
        };
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("cheq");
        }
        // Durable means flushed to the database's disk, whatever the
        // server's default says.
        let with = |setting: &str| match config.get_options() {
            Some(o) if !o.is_empty() => format!("{o} -c synchronous_commit={setting}"),
            _ => format!("-c synchronous_commit={setting}"),
        };
        let mut lazy_config = config.clone();
        lazy_config.options(with("off"));
        config.options(with("on"));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cheq-db")
            .enable_all()
            .build()
            .map_err(|source| StoreError::Io {
                op: "start the database runtime",
                source,
            })?;
        let build = |config: tokio_postgres::Config, size: usize| {
            let manager_config = ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            };
            let manager = match &tls {
                Some(tls) => Manager::from_config(config, tls.clone(), manager_config),
                None => Manager::from_config(config, NoTls, manager_config),
            };
            Pool::builder(manager)
                .max_size(size.max(1))
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(CALL_TIMEOUT))
                .create_timeout(Some(CONNECT_TIMEOUT))
                .recycle_timeout(Some(CONNECT_TIMEOUT))
                .build()
                .map_err(|e| backend("pool", e.to_string()))
        };
        // The runtime's pool keeps a few for the nonce gatherer,
        // transactions and calls past the calling threads' bound; the
        // calling threads drive the rest themselves, a quarter of the bound
        // for writes a crash may lose. Every connection is opened only when
        // needed. Of 48: 30 driven durable, 12 driven lazy, 4 and 2 pooled.
        let pooled = (max_size / 12).max(nonce_batch::IN_FLIGHT + 1);
        let pooled_lazy = (max_size / 24).max(1);
        let local_lazy_max = (max_size / 4).max(1);
        let local_max = max_size
            .saturating_sub(pooled + pooled_lazy + local_lazy_max)
            .max(1);
        let local = local::LocalPool::new(config.clone(), tls.clone(), local_max);
        let local_lazy = local::LocalPool::new(lazy_config.clone(), tls.clone(), local_lazy_max);
        let pool = build(config, pooled)?;
        let lazy = build(lazy_config, pooled_lazy)?;
        Ok(Pg {
            inner: Arc::new(Inner {
                local,
                local_lazy,
                pool,
                lazy,
                handle: rt.handle().clone(),
                _rt: Rt(Some(rt)),
            }),
        })
    }

    /// Runs `f` and waits for it, at most [`CALL_TIMEOUT`]: on a connection
    /// this thread drives when one is free ([`local`]), otherwise on the
    /// pool's runtime. Safe to call from any thread, async or not (it never
    /// enters a runtime on the calling thread).
    pub(crate) fn call<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl Work<Source, T>,
    ) -> Result<T, StoreError> {
        self.run(op, CALL_TIMEOUT, false, f)
    }

    /// Like [`Pg::call`], on connections whose commits do not wait for the
    /// disk: only for writes a crash may lose.
    pub(crate) fn call_lazy<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl Work<Source, T>,
    ) -> Result<T, StoreError> {
        self.run(op, CALL_TIMEOUT, true, f)
    }

    /// [`Pg::call`] for a write made durable as `durability` says, or
    /// [`Pg::call_lazy`] for one whose caller makes a later write durable
    /// ([`Durability::Deferred`]).
    pub(crate) fn call_with<T: Send + 'static>(
        &self,
        op: &'static str,
        durability: Durability,
        f: impl Work<Source, T>,
    ) -> Result<T, StoreError> {
        self.run(op, CALL_TIMEOUT, durability == Durability::Deferred, f)
    }

    fn run<T: Send + 'static>(
        &self,
        op: &'static str,
        limit: Duration,
        lazy: bool,
        f: impl Work<Source, T>,
    ) -> Result<T, StoreError> {
        let (local, pool) = if lazy {
            (&self.inner.local_lazy, &self.inner.lazy)
        } else {
            (&self.inner.local, &self.inner.pool)
        };
        match local.try_run(op, Instant::now() + limit, f) {
            Ok(answer) => answer,
            Err(f) => self.hand_off(op, limit, pool.clone(), move |pool| f(Source::Pool(pool))),
        }
    }

    /// Runs `f` with the pool, on the pool's runtime: for a call that needs
    /// a transaction ([`Object::transaction`]).
    pub(crate) fn call_pooled<T: Send + 'static>(
        &self,
        op: &'static str,
        limit: Duration,
        lazy: bool,
        f: impl Work<Pool, T>,
    ) -> Result<T, StoreError> {
        let pool = if lazy {
            &self.inner.lazy
        } else {
            &self.inner.pool
        };
        self.hand_off(op, limit, pool.clone(), f)
    }

    /// Puts `f` on the pool's runtime and waits for its answer.
    fn hand_off<T: Send + 'static>(
        &self,
        op: &'static str,
        limit: Duration,
        pool: Pool,
        f: impl Work<Pool, T>,
    ) -> Result<T, StoreError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.inner.handle.spawn(async move {
            let answer = match tokio::time::timeout(limit, f(pool)).await {
                Ok(answer) => answer,
                Err(_) => Err(unavailable(op, "the database did not answer in time")),
            };
            let _ = tx.send(answer);
        });
        rx.recv()
            .unwrap_or_else(|_| Err(unavailable(op, "the database task ended without an answer")))
    }

    /// A task gathering concurrent nonce records into shared statements,
    /// on this pool's runtime ([`nonce_batch`]).
    fn gatherer(&self) -> nonce_batch::Gatherer {
        nonce_batch::Gatherer::start(&self.inner.handle, self.inner.pool.clone())
    }

    /// A page of a listing: the rows of `sql`, a `SELECT … FROM {table}`
    /// whose key column is `key`, after the key `after` (from the first
    /// with `None`), at most `limit`, in the order of the keys, each made
    /// into a `T` by `each`. The order is the column's collation, and so is
    /// the comparison with `after`: the pages follow each other.
    pub(crate) fn page<T: Send + 'static>(
        &self,
        op: &'static str,
        sql: &'static str,
        key: &'static str,
        after: Option<&str>,
        limit: usize,
        each: fn(&tokio_postgres::Row) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let after = after.map(str::to_owned);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.call(op, move |pool| async move {
            let c = client(&pool, op).await?;
            let rows = match &after {
                Some(after) => {
                    let sql = format!("{sql} WHERE {key} > $1 ORDER BY {key} LIMIT $2");
                    c.query(&sql, &[after, &limit]).await
                }
                None => {
                    let sql = format!("{sql} ORDER BY {key} LIMIT $1");
                    c.query(&sql, &[&limit]).await
                }
            }
            .map_err(db_error(op))?;
            rows.iter().map(each).collect()
        })
    }

    /// The one text column that `sql` (a `SELECT` by `$1`) finds for `key`.
    pub(crate) fn text_by_key<K>(
        &self,
        op: &'static str,
        sql: &'static str,
        key: K,
    ) -> Result<Option<String>, StoreError>
    where
        K: tokio_postgres::types::ToSql + Sync + Send + 'static,
    {
        self.call(op, move |pool| async move {
            let c = client(&pool, op).await?;
            let s = c.prepare_cached(sql).await.map_err(db_error(op))?;
            let row = c.query_opt(&s, &[&key]).await.map_err(db_error(op))?;
            Ok(row.map(|r| r.get::<_, String>(0)))
        })
    }

    /// The JSON value that `sql` (a `SELECT` of one text column by `$1`)
    /// finds for `key`, decoded.
    pub(crate) fn json_by_key<T: serde::de::DeserializeOwned>(
        &self,
        op: &'static str,
        sql: &'static str,
        key: &str,
    ) -> Result<Option<T>, StoreError> {
        self.text_by_key(op, sql, key.to_owned())?
            .map(|text| decode(key, &text))
            .transpose()
    }

    /// Writes one row of a table of JSON bodies kept by key, with the time
    /// they are collected by: `sql`, an `INSERT` of `(key, time, body)` as
    /// `($1, $2, $3)`, prepared once per connection; on the connections
    /// whose commits do not wait for the disk when `lazy` ([`Pg::call_lazy`]).
    pub(crate) fn put_json<K>(
        &self,
        op: &'static str,
        sql: &'static str,
        lazy: bool,
        key: K,
        time: i64,
        body: String,
    ) -> Result<(), StoreError>
    where
        K: tokio_postgres::types::ToSql + Sync + Send + 'static,
    {
        self.run(op, CALL_TIMEOUT, lazy, move |pool| async move {
            let c = client(&pool, op).await?;
            let s = c.prepare_cached(sql).await.map_err(db_error(op))?;
            c.execute(&s, &[&key, &time, &body])
                .await
                .map_err(db_error(op))?;
            Ok(())
        })
    }

    /// Runs one `DELETE … WHERE … $1` with `bound` and returns how many rows
    /// went (the collection of expired state).
    pub(crate) fn delete_where(
        &self,
        op: &'static str,
        sql: &'static str,
        bound: i64,
    ) -> Result<usize, StoreError> {
        self.call(op, move |pool| async move {
            let c = client(&pool, op).await?;
            let n = c.execute(sql, &[&bound]).await.map_err(db_error(op))?;
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        })
    }

    /// Whether this pool's connections are encrypted, as the database sees
    /// the one this call is given (`pg_stat_ssl`).
    pub fn encrypted(&self) -> Result<bool, StoreError> {
        self.call("tls", |pool| async move {
            let c = client(&pool, "tls").await?;
            let row = c
                .query_one(
                    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                    &[],
                )
                .await
                .map_err(db_error("tls"))?;
            Ok(row.get::<_, bool>(0))
        })
    }

    /// Does the database answer (`SELECT 1`) within [`PING_TIMEOUT`]?
    pub fn ping(&self) -> Result<(), StoreError> {
        self.run("ping", PING_TIMEOUT, false, |pool| async move {
            let c = client(&pool, "ping").await?;
            c.simple_query("SELECT 1").await.map_err(db_error("ping"))?;
            Ok(())
        })
    }

    /// Applies the steps of `component`'s schema not yet applied; returns
    /// how many were applied now.
    pub fn migrate(
        &self,
        component: &'static str,
        steps: &'static [Migration],
    ) -> Result<usize, StoreError> {
        // Long enough for a big migration; instances starting at once wait
        // here for the first.
        self.call_pooled(
            "migrate",
            Duration::from_secs(120),
            false,
            move |pool| async move { schema::migrate(&pool, component, steps).await },
        )
    }
}
