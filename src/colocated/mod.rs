//! The confirmation inside the resource server (PROTOCOL.md §12; draft §3,
//! §5): one process and one origin serve the RS (tools, CHEQs, results) and
//! the confirmation (sign-in, the page, the voice API, warnings, private data,
//! history and evidence). Both are the same code as when they run apart: the
//! CS flow reaches the RS through [`InProcess`] instead of HTTP, so no CHEQ
//! travels on the wire (no fetch of the resource URI, no delivery `POST`),
//! and the RS verifies the decision and runs the operation once, as always.
//!
//! Configured in the RS's file: `[confirmation]` with `embedded = true` and
//! the CS's own settings, instead of `[confirmation_server]`. The
//! confirmation URI is `<public_url>/confirm`; accounts live in the RS's data
//! directory (`cheq user add --config rs.toml`).

mod link;

pub use link::InProcess;

use crate::configfile::ConfigError;
use crate::confirm::config::{CsConfig, HostSettings};
use crate::confirm::flow::RegisteredRs;
use crate::confirm::server::HostedRs;
use crate::confirm::web::{configure_confirmation, security_headers};
use crate::confirm::{CsState, ServerError};
use crate::peerkeys::PeerKeys;
use crate::resource::cheq_rs::CONFIRMATIONS_PATH;
use crate::resource::config::RsConfig;
use crate::resource::trusted_cs::ConfirmationServer;
use crate::resource::{RsError, RsState};
use crate::time::{Clock, SystemClock};
use actix_web::{web, App, HttpServer};
use std::sync::Arc;

/// Why a resource server that hosts its confirmation could not start.
#[derive(Debug, thiserror::Error)]
pub enum ColocatedError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("the resource server: {0}")]
    Rs(#[from] RsError),
    #[error("the confirmation: {0}")]
    Cs(#[from] ServerError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// The configuration of the confirmation `config` hosts (its
/// `[confirmation]` table), checked; an error when it hosts none.
pub fn cs_config(config: &RsConfig) -> Result<CsConfig, ConfigError> {
    let table = match &config.confirmation {
        Some(table) if config.embedded() => table,
        _ => {
            return Err(crate::configfile::invalid(
                "confirmation",
                "this resource server does not serve the confirmation itself ([confirmation] embedded = true)",
            ))
        }
    };
    let host = HostSettings {
        listen: config.listen.clone(),
        public_url: format!(
            "{}{}",
            config.base_url(),
            crate::resource::config::EMBEDDED_CONFIRMATION_PATH
        ),
        data_dir: config.data_dir.clone(),
        database_url: config.database_url.clone(),
        log_format: config.log_format,
        metrics: config.metrics,
    };
    CsConfig::embedded(host, table)
}

/// The configuration of the confirmation that the file at `path` configures:
/// a CS's own file, or an RS's that hosts its confirmation (§12). For the
/// commands that manage a confirmation's accounts and keys.
pub fn confirmation_config(path: &std::path::Path) -> Result<CsConfig, ConfigError> {
    use crate::configfile::ServerConfig as _;
    if is_resource_server_file(path)? {
        cs_config(&RsConfig::load(path)?)
    } else {
        CsConfig::load(path)
    }
}

/// Whether the TOML file at `path` is a resource server's (it names its
/// confirmation: `[confirmation_server]` or `[confirmation]`).
pub fn is_resource_server_file(path: &std::path::Path) -> Result<bool, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    Ok(text
        .parse::<toml::Table>()
        .map(|t| t.contains_key("confirmation_server") || t.contains_key("confirmation"))
        .unwrap_or(false))
}

/// Both sides' state, built together.
pub struct Colocated {
    pub rs: web::Data<RsState>,
    pub cs: web::Data<CsState>,
    pub cs_config: CsConfig,
}

/// Opens the keys, the stores and the state of both sides: the RS trusts
/// the confirmation's keys as they are in this process, and the
/// confirmation reaches the RS through [`InProcess`].
pub async fn build_state(
    config: &RsConfig,
    clock: Arc<dyn Clock>,
) -> Result<Colocated, ColocatedError> {
    let cs_config = cs_config(config)?;
    let cs_keys = crate::confirm::server::open_keys(&cs_config, clock.clone())?;
    let rs = crate::resource::server::build_state_with(
        config,
        clock.clone(),
        ConfirmationServer::in_full(&cs_config.public_url, PeerKeys::Local(cs_keys.clone())),
        Some(cs_keys.clone()),
    )
    .await?;
    check_keys_apart(rs.cheq.keys(), &cs_keys)?;
    let hosted = HostedRs {
        origin: config.base_url(),
        path_prefix: CONFIRMATIONS_PATH.to_owned(),
        rs: RegisteredRs {
            client: Arc::new(InProcess::new(rs.cheq.clone(), rs.metrics.clone())),
            keys: PeerKeys::Local(rs.cheq.keys().clone()),
            max_auth_age: cs_config.max_auth_age_secs,
        },
    };
    let cs =
        crate::confirm::server::build_state_with(&cs_config, clock, cs_keys, Some(hosted)).await?;
    Ok(Colocated { rs, cs, cs_config })
}

/// The RS and the confirmation it hosts sign with keys of their own (§12),
/// under key ids of their own: one published set holds both, and a set
/// with one kid twice is refused by whoever reads it.
fn check_keys_apart(
    rs_keys: &crate::keyring::KeyRing,
    cs_keys: &crate::keyring::KeyRing,
) -> Result<(), ColocatedError> {
    let apart = |message: String| {
        ColocatedError::Config(crate::configfile::invalid(
            "confirmation.signing_key",
            message,
        ))
    };
    if rs_keys.manifest_path() == cs_keys.manifest_path() {
        return Err(apart(
            "is the resource server's own signing_key: the confirmation signs with a key of its own".into(),
        ));
    }
    let rs_published = rs_keys.published();
    if let Some(k) = cs_keys
        .published()
        .keys()
        .iter()
        .find(|k| rs_published.get(k.kid()).is_some())
    {
        return Err(apart(format!(
            "its key id {:?} is also one of the resource server's: give the confirmation another key_id",
            k.kid()
        )));
    }
    Ok(())
}

/// Serves both on an already bound listener (tests bind port 0 first).
pub fn serve(
    listener: std::net::TcpListener,
    state: &Colocated,
) -> Result<actix_web::dev::Server, ColocatedError> {
    let (rs, cs) = (state.rs.clone(), state.cs.clone());
    let https = cs.secure_cookies;
    let pg = rs.backend == crate::store::Backend::Postgres;
    let server = HttpServer::new(move || {
        let (rs, cs) = (rs.clone(), cs.clone());
        App::new()
            .wrap(security_headers(https))
            .wrap(crate::httpkit::request_logger())
            .configure(move |c| {
                configure_confirmation(c, cs);
                crate::resource::configure(c, rs);
            })
    })
    .workers(crate::httpkit::workers_for(pg))
    .worker_max_blocking_threads(crate::httpkit::blocking_threads_for(pg))
    .listen(listener)
    .map_err(|source| ColocatedError::Io {
        what: "listen".into(),
        source,
    })?
    .run();
    Ok(server)
}

/// Runs the resource server with its confirmation until it is stopped.
pub async fn run(config: RsConfig) -> Result<(), ColocatedError> {
    let state = build_state(&config, Arc::new(SystemClock)).await?;
    let listener =
        std::net::TcpListener::bind(&config.listen).map_err(|source| ColocatedError::Io {
            what: format!("listen {}", config.listen),
            source,
        })?;
    log::info!(
        "resource server with its confirmation on {} ({}; confirmation URI {})",
        config.listen,
        config.public_url,
        state.cs_config.public_url
    );
    let _background = crate::confirm::server::start_background(&state.cs, &config.data_dir);
    let collector = crate::resource::server::start_collector(&state.rs);
    let served = serve(listener, &state)?.await;
    collector.abort();
    served.map_err(|source| ColocatedError::Io {
        what: "server".into(),
        source,
    })
}
