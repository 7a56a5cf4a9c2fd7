//! Start-up of the confirmation server: keys, trust, database, state, and the
//! listener (PROTOCOL.md §3, §9).

use super::auth::{Limiter, LocalLogin, SessionService};
use super::config::{ConfigError, CsConfig, RsAuth};
use super::directory::{Directory, RegisteredLinks};
use super::fetch::{AssertionSigner, ClientAuth, RsClient};
use super::flow::{Cs, Deps, RegisteredRs};
use super::registration::Registrar;
use super::web::{configure, security_headers, CsState};
use crate::configfile::ServerConfig as _;
use crate::httpkit::{spawn_periodic, COLLECT_EVERY};
use crate::keyfile::{load_or_create_secret, KeyFileError};
use crate::keyring::{KeyRing, KeyRingError};
use crate::peerkeys::PeerKeys;
use crate::store::Backend;
use crate::time::{Clock, SystemClock};
use actix_web::{web, App, HttpServer};
use std::sync::Arc;

/// Why the CS could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("key file {0}")]
    KeyFile(#[from] KeyFileError),
    #[error("signing keys: {0}")]
    Keys(#[from] KeyRingError),
    #[error("resource_servers[{index}] keys: {message}")]
    Jwks { index: usize, message: String },
    #[error("resource_servers[{index}] client (token_url, HTTP): {message}")]
    RsClient { index: usize, message: String },
    #[error("data_dir {path}: {message}")]
    Db { path: String, message: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

/// Opens everything the CS needs and builds its state.
pub async fn build_state(
    config: &CsConfig,
    clock: Arc<dyn Clock>,
) -> Result<web::Data<CsState>, ServerError> {
    let keys = open_keys(config, clock.clone())?;
    build_state_with(config, clock, keys, None).await
}

/// The CS's own key set (§9), opened and able to sign.
pub fn open_keys(config: &CsConfig, clock: Arc<dyn Clock>) -> Result<Arc<KeyRing>, ServerError> {
    // Everything the CS writes is its owner's alone: the process umask, and
    // a data directory that is not open to others.
    crate::keyfile::private_umask();
    crate::keyfile::ensure_private_dir(&config.data_dir)?;
    let keys = KeyRing::open(&config.signing_key, config.key_id.as_deref(), "cs", clock)?;
    keys.signer()?;
    Ok(keys)
}

/// A resource server the CS reaches in its own process (§12): where its
/// resource URIs are (origin and path prefix), and the RS itself.
pub struct HostedRs {
    pub origin: String,
    pub path_prefix: String,
    pub rs: RegisteredRs,
}

/// [`build_state`] with the CS's key set given, and with the resource server
/// that hosts this confirmation (§12), if any, registered beside those of
/// the configuration.
pub async fn build_state_with(
    config: &CsConfig,
    clock: Arc<dyn Clock>,
    keys: Arc<KeyRing>,
    hosted: Option<HostedRs>,
) -> Result<web::Data<CsState>, ServerError> {
    config.validate()?;
    crate::keyfile::private_umask();
    crate::keyfile::ensure_private_dir(&config.data_dir)?;
    if hosted.is_some() != config.embedded
        || (config.embedded && !config.resource_servers.is_empty())
    {
        return Err(ServerError::Other(
            "a confirmation served by a resource server itself works for that resource server alone".into(),
        ));
    }
    let issuer = config.origin();
    // One TLS connector for every resource server's client.
    let tls = crate::confirm::fetch::tls_connector()
        .map_err(|e| ServerError::Other(format!("TLS for resource servers: {e}")))?;
    let mut fixed = Vec::new();
    for (i, rs) in config.resource_servers.iter().enumerate() {
        let peer_keys = PeerKeys::new(rs.jwks.as_deref(), rs.jwks_uri.as_deref(), clock.clone())
            .map_err(|e| ServerError::Jwks {
                index: i,
                message: e.to_string(),
            })?;
        peer_keys.prefetch();
        let auth = match rs.auth {
            RsAuth::ClientSecretBasic => ClientAuth::Secret {
                client_id: rs.client_id.clone(),
                client_secret: rs
                    .client_secret
                    .as_ref()
                    .map(|s| s.expose().to_owned())
                    .unwrap_or_default(),
            },
            RsAuth::PrivateKeyJwt => {
                ClientAuth::Assertion(AssertionSigner::new(keys.clone(), &issuer, clock.clone()))
            }
        };
        let client = RsClient::with(&rs.token_url, auth, None, &tls)
            .map_err(|message| ServerError::RsClient { index: i, message })?;
        fixed.push((
            rs.origin.clone(),
            rs.path_prefix.clone(),
            RegisteredRs {
                client: Arc::new(client),
                keys: peer_keys,
                max_auth_age: config.max_auth_age(i),
            },
        ));
    }
    fixed.extend(hosted.map(|h| (h.origin, h.path_prefix, h.rs)));
    let policy = config.registration.address_policy()?;
    let links = RegisteredLinks::new(
        keys.clone(),
        &issuer,
        clock.clone(),
        policy,
        config.max_auth_age_secs,
        &tls,
    )
    .map_err(ServerError::Other)?;
    let outbound = links.outbound().clone();
    let (store, backend) = open_store(config)?;
    // The mode governs new registrations only: an RS registered while it
    // was on is served until the operator removes or blocks it, so that
    // turning registration off never strands a pending decision. A
    // confirmation hosted inside an RS works for that RS alone (§12).
    let registrations = (!config.embedded).then(|| (store.registrations.clone(), links));
    let directory = Directory::new(fixed, registrations)
        .map_err(|e| ServerError::Other(format!("resource_servers: {e}")))?;
    let secret = match &config.session_secret {
        Some(s) => s.expose().as_bytes().to_vec(),
        None => load_or_create_secret(&config.data_dir.join(SESSION_SECRET_FILE))?,
    };
    let ceremonies = crate::confirm::passkeys::Ceremonies::new(&secret, &config.public_url)
        .ok_or_else(|| ServerError::Other("public_url has no host".into()))?;
    let sealer = super::seal::Sealer::new(
        &config.data_dir.join(SEALED_DIR),
        load_or_create_secret(&config.data_dir.join(EVIDENCE_SECRET_FILE))?,
    );
    let log = open_log(config, &store)?;
    let clock_kept = clock.clone();
    let cs = Arc::new(
        Cs::new(Deps {
            public_url: config.public_url.clone(),
            keys,
            directory,
            store: store.clone(),
            clock,
            sealer,
            history: config.history_days,
            log,
        })
        .map_err(|e| ServerError::Other(e.to_string()))?,
    );
    let providers = super::oidc::Providers::new(
        &config.identity_providers,
        &config.origin(),
        &secret,
        clock_kept.clone(),
    )
    .map_err(ServerError::Other)?;
    let login = LocalLogin {
        accounts: store.accounts.clone(),
        pin_pepper: load_or_create_secret(&config.data_dir.join(super::auth::PIN_PEPPER_FILE))?
            .into(),
    };
    // The registered resource servers, read before the first request.
    cs.reload_registered().map_err(|e| ServerError::Db {
        path: "registered resource servers".into(),
        message: e.to_string(),
    })?;
    if config.resource_servers.is_empty() && !config.embedded && !config.registration.mode.is_on() {
        log::warn!(
            "no [[resource_servers]] in the file and [registration] is off: only resource servers \
             registered earlier are served"
        );
    }
    let limiter = Limiter::new(store.limits.clone());
    let registrar = Arc::new(
        Registrar::new(
            config.registration.mode,
            outbound,
            store.registrations.clone(),
            limiter.clone(),
            clock_kept.clone(),
        )
        .reserving(
            std::iter::once(config.origin())
                .chain(config.resource_servers.iter().map(|r| r.origin.clone())),
        ),
    );
    let discovery = discovery_document(config, cs.transparency().map(|l| l.verifier_key()));
    let log_key = load_or_create_secret(&config.log_pseudonym_file())?;
    let mut api = super::api::Api::new(
        cs.clone(),
        login.clone(),
        config.gateways.clone(),
        config.api_token_ttl_secs,
        limiter.clone(),
        log_key.clone(),
        // Shared by every instance on this data directory.
        &load_or_create_secret(&config.data_dir.join(API_TOKEN_SECRET_FILE))?,
    )
    .with_registrar(registrar);
    api.trusted_proxies = config.trusted_proxies.clone();
    Ok(web::Data::new(CsState {
        backend,
        cs,
        api: web::Data::new(api),
        accounts: store.accounts.clone(),
        login,
        sessions: SessionService::new(store.sessions.clone(), secret, config.session_ttl_secs),
        limiter,
        start_path: config.start_path(),
        providers: Arc::new(providers),
        secure_cookies: config.is_https(),
        log_key,
        metrics_token: crate::httpkit::MetricsToken::for_access(config.metrics, &config.data_dir)?,
        ceremonies,
        discovery: Arc::new(discovery),
    }))
}

/// The CS's discovery document (§16.1), as served at
/// `/.well-known/cheq-configuration`: on the origin of `public_url` (a
/// confirmation hosted by a resource server, §12, serves it on the RS's
/// origin, with the RS's key set, which publishes the confirmation's keys
/// too). `log_key` is the transparency log's verifier key, when the log is
/// kept.
pub fn discovery_document(config: &CsConfig, log_key: Option<String>) -> String {
    use crate::discovery::{CsConfiguration, LogInfo, VERSIONS};
    let origin = config.origin();
    let (_, log_path) = config.log_origin();
    let document = CsConfiguration {
        issuer: origin.clone(),
        name: config.name.clone().map(|n| n.trim().to_owned()),
        confirmation_uri: config.public_url.clone(),
        jwks_uri: format!("{origin}/.well-known/jwks.json"),
        registration_endpoint: config
            .registration
            .mode
            .is_on()
            .then(|| format!("{origin}{}", super::api::REGISTRATION_PATH)),
        raw_api: Some(format!("{origin}/api/v1")),
        inbox: None,
        push_key: None,
        log: log_key.map(|key| LogInfo {
            prefix: format!("{origin}{log_path}/"),
            key,
        }),
        assurances_supported: ASSURANCES.iter().map(|s| (*s).to_owned()).collect(),
        versions: VERSIONS.iter().map(|s| (*s).to_owned()).collect(),
    };
    // Plain strings and lists: serialising cannot fail.
    serde_json::to_string(&document).unwrap_or_else(|_| "{}".to_owned())
}

/// How a decision may be made here (§16.1 `assurances_supported`): by a
/// signed-in user (password or an identity provider), and bound to the
/// user's passkey (§14).
pub const ASSURANCES: [&str; 2] = ["password", "passkey"];

/// The sealed documents' keys, a folder in the data directory.
pub const SEALED_DIR: &str = "sealed";
/// The key of the digests of values the user typed (§8).
pub const EVIDENCE_SECRET_FILE: &str = "evidence.secret";
/// The key sessions are sealed under, unless `session_secret` is given.
pub const SESSION_SECRET_FILE: &str = "session.secret";
/// The key of the raw API's user tokens (§10).
pub const API_TOKEN_SECRET_FILE: &str = "api-token.secret";

/// A file of a host that its store does not hold: what a move to another
/// host or store copies beside the export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFile {
    /// Where it is on this host.
    pub path: std::path::PathBuf,
    /// Where it goes on the new host.
    pub to: HostPlace,
    /// What it is.
    pub what: &'static str,
}

/// Where a [`HostFile`] goes on the new host, in the terms of its
/// configuration, under the name that host reads first: a file an older
/// cheq named otherwise takes its present name, which a server that has
/// started once holds already and reads before the old one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPlace {
    /// The path a setting names (`signing_key`).
    Setting(&'static str),
    /// Beside the file `signing_key` names, under this name (a key set's
    /// manifest is named after its key).
    BesideSigningKey(String),
    /// In the data directory, under this name.
    DataDir(&'static str),
}

impl std::fmt::Display for HostPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostPlace::Setting(setting) => write!(f, "the path {setting} names"),
            HostPlace::BesideSigningKey(name) => write!(f, "{name} beside signing_key"),
            HostPlace::DataDir(name) => write!(f, "data_dir/{name}"),
        }
    }
}

/// The signing key and its key set, of either server.
pub fn signing_files(signing_key: &std::path::Path) -> Vec<HostFile> {
    let manifest = KeyRing::manifest_for(signing_key);
    let name = manifest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    vec![
        HostFile {
            path: signing_key.to_owned(),
            to: HostPlace::Setting("signing_key"),
            what: "the signing key",
        },
        HostFile {
            path: manifest,
            to: HostPlace::BesideSigningKey(name),
            what: "its key set, with the key files it lists beside it",
        },
    ]
}

/// The files of a CS's host that its store does not hold: what a move to
/// another host or store copies beside the export, and what instances
/// sharing one database share.
pub fn host_files(config: &CsConfig) -> Vec<HostFile> {
    use crate::confirm::config::{LOG_KEY_FILE, LOG_PSEUDONYM_FILE};
    let d = &config.data_dir;
    let in_dir = |name: &'static str, what: &'static str| HostFile {
        path: d.join(name),
        to: HostPlace::DataDir(name),
        what,
    };
    let mut files = signing_files(&config.signing_key);
    files.push(HostFile {
        path: config.log_key_file(),
        to: if config.transparency_log.key_file.is_some() {
            HostPlace::Setting("[transparency_log] key_file")
        } else {
            HostPlace::DataDir(LOG_KEY_FILE)
        },
        what: "the transparency log's key: without it the moved log cannot grow",
    });
    files.extend([
        in_dir(SEALED_DIR, "the sealed documents' keys"),
        in_dir(
            EVIDENCE_SECRET_FILE,
            "the key of the digests of collected values",
        ),
        in_dir(super::auth::PIN_PEPPER_FILE, "the pepper of voice PINs"),
        in_dir(API_TOKEN_SECRET_FILE, "the key of raw-API tokens"),
        HostFile {
            path: config.log_pseudonym_file(),
            to: HostPlace::DataDir(LOG_PSEUDONYM_FILE),
            what: "the key of the pseudonyms of names in log lines",
        },
        in_dir(crate::httpkit::METRICS_SECRET_FILE, "the /metrics token"),
    ]);
    if config.session_secret.is_none() {
        files.push(in_dir(SESSION_SECRET_FILE, "the key of sessions"));
    }
    files
}

/// The transparency log (§15), unless the configuration turns it off: its
/// note key is read (or made) first, and a log begun with another key is
/// refused.
fn open_log(
    config: &CsConfig,
    store: &crate::store::cs::CsStore,
) -> Result<Option<Arc<crate::confirm::transparency::TransparencyLog>>, ServerError> {
    if !config.transparency_log.enabled {
        return Ok(None);
    }
    let secret = load_or_create_secret(&config.log_key_file())?;
    let (origin, _) = config.log_origin();
    let key = crate::tlog::LogKey::from_secret(&secret, &origin)
        .map_err(|e| ServerError::Other(format!("transparency log: {e}")))?;
    let log = crate::confirm::transparency::TransparencyLog::open(store.log.clone(), key)
        .map_err(|e| ServerError::Other(format!("transparency log: {e}")))?;
    Ok(Some(Arc::new(log)))
}

/// How often queued log entries are sequenced into a new checkpoint.
pub const SEQUENCE_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Opens the store the configuration names: PostgreSQL when `database_url`
/// is set (its schema applied first), else sled in `data_dir`.
pub fn open_store(config: &CsConfig) -> Result<(crate::store::cs::CsStore, Backend), ServerError> {
    match &config.database_url {
        Some(url) => {
            let db_err = |message: String| ServerError::Db {
                path: "database_url".into(),
                message,
            };
            let pg =
                crate::store::pg::Pg::new(&url.0, PG_POOL).map_err(|e| db_err(e.to_string()))?;
            let store = crate::store::pg::cs::open(&pg)
                .map_err(|e| db_err(format!("cannot open the database: {e}")))?;
            Ok((store, Backend::Postgres))
        }
        None => {
            let db = crate::store::sled_config(&super::admin::db_path(&config.data_dir))
                .open()
                .map_err(|e| ServerError::Db {
                    path: config.data_dir.display().to_string(),
                    message: format!("cannot open the database (is another server using it?): {e}"),
                })?;
            let store = crate::store::sled_cs::open(&db).map_err(|e| ServerError::Db {
                path: config.data_dir.display().to_string(),
                message: e.to_string(),
            })?;
            Ok((store, Backend::Sled))
        }
    }
}

/// Connections each instance opens to PostgreSQL at most: two instances (or
/// a demo's two servers) stay under PostgreSQL's default `max_connections`
/// of 100.
pub const PG_POOL: usize = 48;

/// Serves the CS on an already bound listener (tests bind port 0 first).
pub fn serve(
    listener: std::net::TcpListener,
    state: web::Data<CsState>,
) -> Result<actix_web::dev::Server, ServerError> {
    let https = state.secure_cookies;
    let state_backend = state.backend;
    let workers = crate::httpkit::workers_for(state_backend == Backend::Postgres);
    let server = HttpServer::new(move || {
        let state = state.clone();
        App::new()
            .wrap(security_headers(https))
            .wrap(crate::httpkit::request_logger())
            .configure(move |c| configure(c, state))
    })
    .workers(workers)
    .worker_max_blocking_threads(crate::httpkit::blocking_threads_for(
        state_backend == Backend::Postgres,
    ))
    .listen(listener)
    .map_err(|source| ServerError::Io {
        what: "listen".into(),
        source,
    })?
    .run();
    Ok(server)
}

/// Background jobs of a running CS: the delivery worker (which also picks up
/// decisions left pending by an earlier run), the admin socket, and the
/// hourly collection of expired sessions. Dropping the handle stops them.
pub struct Background {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Background {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts the background jobs.
pub fn start_background(state: &web::Data<CsState>, data_dir: &std::path::Path) -> Background {
    match state.cs.sweep_keys() {
        Ok(n) if n > 0 => log::info!("deleted {n} sealed-document keys no longer needed"),
        Err(e) => log::warn!("sweeping sealed-document keys: {e}"),
        _ => {}
    }
    let cs = state.cs.clone();
    let deliveries = tokio::spawn(cs.run_deliveries());
    let reloads = tokio::spawn(state.cs.clone().run_reloads());
    let stores = super::admin::AdminStores {
        accounts: state.accounts.clone(),
        registrations: state.cs.registrations(),
    };
    let dir = data_dir.to_owned();
    // On PostgreSQL, `cheq user` writes to the database itself: no socket
    // (several instances share the data directory).
    let sled = state.backend == Backend::Sled;
    let admin = tokio::spawn(async move {
        if !sled {
            return;
        }
        if let Err(e) = super::admin::listen(&dir, stores).await {
            log::warn!("admin socket: {e}");
        }
    });
    let st = state.clone();
    let collector = spawn_periodic("collecting expired state", COLLECT_EVERY, move || {
        let st = st.clone();
        // On a blocking thread: a first collection of a long history may
        // take a while, and must not hold up the deliveries' task.
        async move {
            tokio::task::spawn_blocking(move || collect_expired(&st))
                .await
                .map_err(|e| e.to_string())?
        }
    });
    let mut tasks = vec![deliveries, reloads, admin, collector];
    if let Some(log) = state.cs.transparency().cloned() {
        tasks.push(tokio::spawn(sequence(log)));
    }
    Background { tasks }
}

/// Sequences the log's queued entries every [`SEQUENCE_EVERY`], on a
/// blocking thread (a step signs and writes durably). A failed step is
/// logged and tried again: the entries stay queued.
async fn sequence(log: Arc<crate::confirm::transparency::TransparencyLog>) {
    let mut tick = tokio::time::interval(SEQUENCE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let l = log.clone();
        match tokio::task::spawn_blocking(move || l.sequence_all(16)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => log::warn!("transparency log: sequencing: {e}"),
            Err(e) => log::warn!("transparency log: sequencing: {e}"),
        }
    }
}

/// Removes expired sessions, old started confirmations and limiter state,
/// and the history older than `history_days`. Returns how many went.
fn collect_expired(st: &CsState) -> Result<usize, String> {
    let now = st.cs.now().timestamp();
    let sessions = st
        .sessions
        .collect_expired(now)
        .map_err(|e| e.to_string())?;
    let entries = st
        .cs
        .collect_entries(crate::confirm::flow::ENTRY_KEEP_SECS)
        .map_err(|e| e.to_string())?;
    let limits = st
        .limiter
        .collect(now - super::auth::limits::KNOWN_ADDRESS_SECS)
        .map_err(|e| e.to_string())?;
    let history = st.cs.collect_history().map_err(|e| e.to_string())?;
    Ok(sessions + entries + limits + history)
}

/// Runs the CS until it is stopped.
pub async fn run(config: CsConfig) -> Result<(), ServerError> {
    let state = build_state(&config, Arc::new(SystemClock)).await?;
    let listener =
        std::net::TcpListener::bind(&config.listen).map_err(|source| ServerError::Io {
            what: format!("listen {}", config.listen),
            source,
        })?;
    log::info!(
        "confirmation server on {} ({})",
        config.listen,
        config.public_url
    );
    let _background = start_background(&state, &config.data_dir);
    serve(listener, state)?
        .await
        .map_err(|source| ServerError::Io {
            what: "server".into(),
            source,
        })
}
