//! Start-up of the confirmation server: keys, trust, database, state, and the
//! listener (PROTOCOL.md §3, §9).

use super::auth::{Accounts, RateLimiter, Sessions};
use super::config::{ConfigError, CsConfig};
use super::decide::Cs;
use super::fetch::RsClient;
use super::registry::Registry;
use super::routes::{configure, security_headers, CsState};
use crate::keyfile::{load_or_create_key, load_or_create_secret, KeyFileError};
use crate::sign::{Jwks, TrustStore};
use crate::store::records::Records;
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
    #[error("resource_servers[{index}] keys: {message}")]
    Jwks { index: usize, message: String },
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

async fn load_jwks(config: &CsConfig, index: usize) -> Result<Jwks, ServerError> {
    let rs = &config.resource_servers[index];
    let err = |message: String| ServerError::Jwks { index, message };
    if let Some(file) = &rs.jwks {
        let bytes = std::fs::read(file).map_err(|e| err(format!("{}: {e}", file.display())))?;
        return Jwks::from_bytes(&bytes).map_err(|e| err(format!("{}: {e}", file.display())));
    }
    let uri = rs.jwks_uri.clone().unwrap_or_default();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| err(e.to_string()))?;
    let res = client
        .get(&uri)
        .send()
        .await
        .map_err(|e| err(format!("{uri}: {e}")))?;
    if !res.status().is_success() {
        return Err(err(format!("{uri}: HTTP {}", res.status())));
    }
    let bytes = res.bytes().await.map_err(|e| err(format!("{uri}: {e}")))?;
    Jwks::from_bytes(&bytes).map_err(|e| err(format!("{uri}: {e}")))
}

/// Opens everything the CS needs and builds its state.
pub async fn build_state(
    config: &CsConfig,
    clock: Arc<dyn Clock>,
) -> Result<web::Data<CsState>, ServerError> {
    config.validate()?;
    std::fs::create_dir_all(&config.data_dir).map_err(|source| ServerError::Io {
        what: format!("data_dir {}", config.data_dir.display()),
        source,
    })?;
    let key = load_or_create_key(&config.signing_key, config.key_id.as_deref(), "cs")?;
    let mut trust = TrustStore::new();
    let mut clients = Vec::new();
    for (i, rs) in config.resource_servers.iter().enumerate() {
        let jwks = load_jwks(config, i).await?;
        trust
            .add_resource_server(&rs.origin, jwks)
            .map_err(|e| ServerError::Jwks {
                index: i,
                message: e.to_string(),
            })?;
        clients.push(
            RsClient::new(&rs.token_url, &rs.client_id, &rs.client_secret)
                .map_err(|message| ServerError::Jwks { index: i, message })?,
        );
    }
    let registry = Registry::new(
        config
            .resource_servers
            .iter()
            .map(|r| (r.origin.as_str(), r.path_prefix.as_str())),
    );
    let db_path = super::admin::db_path(&config.data_dir);
    let db = sled::Config::new()
        .path(&db_path)
        .open()
        .map_err(|e| ServerError::Db {
            path: config.data_dir.display().to_string(),
            message: format!("cannot open the database (is another server using it?): {e}"),
        })?;
    let db_err = |e: String| ServerError::Db {
        path: config.data_dir.display().to_string(),
        message: e,
    };
    let secret = match &config.session_secret {
        Some(s) => s.as_bytes().to_vec(),
        None => load_or_create_secret(&config.data_dir.join("session.secret"))?,
    };
    let records = Records::open(db.clone()).map_err(|e| db_err(e.to_string()))?;
    let accounts = Accounts::open(&db).map_err(|e| db_err(e.to_string()))?;
    let sessions =
        Sessions::open(&db, secret, config.session_ttl_secs).map_err(|e| db_err(e.to_string()))?;
    let cs = Cs::new(
        &db,
        &config.public_url,
        key,
        trust,
        registry,
        clients,
        records,
        clock.clone(),
        super::seal::Sealer::new(
            &config.data_dir.join("sealed"),
            load_or_create_secret(&config.data_dir.join("evidence.secret"))?,
        ),
    )
    .map_err(|e| db_err(e.to_string()))?;
    let cs = Arc::new(cs);
    let api = super::api::Api::new(
        cs.clone(),
        accounts.clone(),
        config.gateways.clone(),
        config.api_token_ttl_secs,
        clock,
    );
    Ok(web::Data::new(CsState {
        cs,
        api: web::Data::new(api),
        accounts,
        sessions,
        login_limiter: RateLimiter::new(5, 2, 900),
        start_path: config.start_path(),
        secure_cookies: config.is_https(),
    }))
}

/// Serves the CS on an already bound listener (tests bind port 0 first).
pub fn serve(
    listener: std::net::TcpListener,
    state: web::Data<CsState>,
) -> Result<actix_web::dev::Server, ServerError> {
    let https = state.secure_cookies;
    let server = HttpServer::new(move || {
        let state = state.clone();
        App::new()
            .wrap(security_headers(https))
            .configure(move |c| configure(c, state))
    })
    .workers(2)
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
    let accounts = state.accounts.clone();
    let dir = data_dir.to_owned();
    let admin = tokio::spawn(async move {
        if let Err(e) = super::admin::listen(&dir, accounts).await {
            log::warn!("admin socket: {e}");
        }
    });
    let st = state.clone();
    let collector = tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(3600));
        loop {
            tick.tick().await;
            let now = st.cs.now().timestamp();
            if let Ok(n) = st.sessions.collect_expired(now) {
                if n > 0 {
                    log::info!("collected {n} expired sessions");
                }
            }
            match st.cs.collect_entries(48 * 3600) {
                Ok(n) if n > 0 => log::info!("collected {n} old confirmation entries"),
                Err(e) => log::warn!("collecting old entries: {e}"),
                _ => {}
            }
        }
    });
    Background {
        tasks: vec![deliveries, admin, collector],
    }
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
