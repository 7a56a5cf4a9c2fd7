//! The reference resource server over HTTP (actix-web): routes, app state and
//! start-up.
//!
//! | route | who | what |
//! |---|---|---|
//! | `GET /healthz` | anyone | liveness |
//! | `GET /.well-known/jwks.json` | anyone | the RS public keys (PROTOCOL.md §9) |
//! | `GET /.well-known/cheq-resource` | anyone | the RS's discovery document (§16.2) |
//! | `POST /oauth/token` | CS, agents | client credentials grant (RFC 6749 §4.4); a CS trusted by issuer may authenticate with its own key (§16.4) |
//! | `GET /tools`, `GET /tools/{id}` | agents | A2T enumeration (draft §6) |
//! | `POST /tools/{id}:invoke` | agents | A2T invocation (draft §7); `202` + URI pack when confirmation is needed (§1) |
//! | `GET /cheq/confirmations/{id}` | CS | the resource-signed CHEQ (§3) |
//! | `POST /cheq/confirmations/{id}?accept` / `?reject` | CS | the decision (§6) |
//! | `GET /cheq/results/{id}` | anyone holding the URI | the result (§7) |

use super::assertion::TrustedIssuers;
use super::caller::{Agent, Caller, Cs};
use super::cheq_rs::{CheqRs, ResultView, CONFIRMATIONS_PATH, RESULTS_PATH};
use super::config::{CsNamed, RsConfig};
pub use super::discovery::resource_document;
use super::error::{ApiError, CheqRsError, RsError, ToolError};
use super::hosts::Hosts;
use super::oauth::{TokenRequest, TokenService};
use super::settings::Users;
use super::tools::{self, DemoTools, Tool};
use super::trusted_cs::{ConfirmationServer, DiscoveredCs};
use crate::cheq::Decision;
use crate::configfile::ServerConfig as _;
use crate::httpkit::{self, authorization, json_resource};
use crate::keyring::KeyRing;
use crate::peerkeys::{PeerKeys, Refetch};
use crate::sign::VerifyError;
use crate::store::rs::RsStore;
use crate::time::{Clock, SystemClock};
use actix_web::http::{header, StatusCode};
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use cheq_core::discovery::{ResourceDocument, RESOURCE_PATH};
use chrono::Duration;
use serde_json::{json, Value};
use std::sync::Arc;

/// Everything the handlers share.
#[derive(Debug)]
pub struct RsState {
    /// Where the state lives (sled or PostgreSQL).
    pub backend: crate::store::Backend,
    /// Whether the store answers now (`/readyz`).
    pub readiness: Arc<dyn crate::store::Readiness>,
    /// What this instance counted (`/metrics`).
    pub metrics: crate::metrics::RsMetrics,
    pub cheq: Arc<CheqRs>,
    pub tokens: Arc<TokenService>,
    /// What `/.well-known/cheq-resource` answers (§16.2).
    pub resource_document: ResourceDocument,
    pub tools: Arc<DemoTools>,
    pub catalogue: Vec<Tool>,
    /// Each user's CS and rules, under the operator's floors (§17).
    pub users: Arc<Users>,
    /// Starts of the settings page's changes, per address.
    pub page_starts: super::settings_page::Starts,
    pub cheq_ttl: Duration,
    pub retry_after_secs: u64,
    /// The token `GET /metrics` asks for, when one is configured.
    pub metrics_token: Option<crate::httpkit::MetricsToken>,
    /// The keys of the confirmation this RS serves itself (§12), published
    /// beside its own.
    pub hosted_keys: Option<Arc<KeyRing>>,
}

impl RsState {
    /// How many times a tool operation actually ran (for tests).
    pub fn executions(&self) -> u64 {
        self.tools.runs()
    }
}

/// Opens the data directory, keys and trust, and builds the app state of an
/// RS whose confirmation server is elsewhere (`[confirmation_server]`).
pub async fn build_state(
    config: &RsConfig,
    clock: Arc<dyn Clock>,
) -> Result<web::Data<RsState>, RsError> {
    config.validate()?;
    let Some(named) = config.confirmation_server.as_ref().map(|cs| cs.named()) else {
        return Err(RsError::Config(crate::configfile::invalid(
            "confirmation_server",
            "this resource server serves the confirmation itself: run it with its confirmation (`cheq resource-server` does)",
        )));
    };
    let cs = match named {
        CsNamed::InFull {
            uri,
            jwks_file,
            jwks_uri,
        } => ConfirmationServer::in_full(uri, PeerKeys::new(jwks_file, jwks_uri, clock.clone())?),
        CsNamed::Issuer(issuer) => ConfirmationServer::Discovered(DiscoveredCs::new(
            issuer,
            outbound(config)?,
            clock.clone(),
        )),
    };
    // In the background: the keys, or the discovery document and the
    // registration there (the RS starts whether or not the CS answers).
    cs.start(&config.base_url());
    build_state_with(config, clock, cs, None).await
}

/// The fetcher of outside URLs (§16.3), under the file's `allow_addresses`.
fn outbound(config: &RsConfig) -> Result<cheq_support::outbound::Outbound, RsError> {
    cheq_support::outbound::Outbound::new(config.address_policy()?).map_err(|e| RsError::Io {
        what: "the fetcher of outside URLs".into(),
        source: std::io::Error::other(e.to_string()),
    })
}

/// [`build_state`] with the confirmation server given: named in full or by
/// its issuer for a CS elsewhere, or the confirmation this RS serves itself
/// (§12), whose key set `/.well-known/jwks.json` then publishes too
/// (`hosted`).
pub async fn build_state_with(
    config: &RsConfig,
    clock: Arc<dyn Clock>,
    cs: ConfirmationServer,
    hosted: Option<Arc<KeyRing>>,
) -> Result<web::Data<RsState>, RsError> {
    config.validate()?;
    // Everything the RS writes is its owner's alone: the process umask, and
    // a data directory that is not open to others.
    crate::keyfile::private_umask();
    crate::keyfile::ensure_private_dir(&config.data_dir).map_err(|e| RsError::Io {
        what: "data_dir".into(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let keys = KeyRing::open(
        &config.signing_key,
        config.key_id.as_deref(),
        "rs",
        clock.clone(),
    )?;
    keys.signer()?;
    // The one place the RS names its storage backends.
    let (store, backend) = open_store(config)?;
    // Shared by every instance on this data directory.
    let token_secret = crate::keyfile::load_or_create_secret(&config.data_dir.join("token.secret"))
        .map_err(|e| RsError::Io {
            what: "token secret".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
    let metrics_token = crate::httpkit::MetricsToken::for_access(config.metrics, &config.data_dir)
        .map_err(|e| RsError::Io {
            what: "metrics secret".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
    let metrics = crate::metrics::RsMetrics::new();
    let tools = Arc::new(DemoTools::new(&store).counting(metrics.executed.clone()));
    let resource_document = resource_document(config);
    let hosts = Arc::new(Hosts::new(
        cs,
        Some(outbound(config)?),
        clock.clone(),
        &config.base_url(),
        store.settings.clone(),
    ));
    hosts.load()?;
    let tokens = TokenService::new(
        &config.clients,
        Duration::seconds(config.token_ttl_secs),
        clock.clone(),
        &token_secret,
    )
    .trusting(TrustedIssuers::new(
        hosts.clone(),
        &resource_document.token_endpoint,
        store.assertions.clone(),
        clock.clone(),
    ));
    let catalogue = tools::catalogue();
    let users = Users::new(
        store.settings.clone(),
        config.policy.floors(&catalogue)?,
        catalogue.clone(),
    );
    let cheq = CheqRs::with_hosts(
        &store,
        keys,
        hosts,
        &config.base_url(),
        clock.clone(),
        tools.clone(),
    )?;
    Ok(web::Data::new(RsState {
        backend,
        readiness: store.readiness.clone(),
        metrics,
        cheq: Arc::new(cheq),
        tokens: Arc::new(tokens),
        resource_document,
        tools,
        catalogue,
        users: Arc::new(users),
        page_starts: super::settings_page::Starts::new(clock),
        cheq_ttl: Duration::seconds(config.cheq_ttl_secs),
        retry_after_secs: config.retry_after_secs,
        metrics_token,
        hosted_keys: hosted,
    }))
}

/// The token endpoint's path.
pub const TOKEN_PATH: &str = "/oauth/token";

/// Opens the store the configuration names: PostgreSQL when `database_url`
/// is set (its schema applied first), else sled in `data_dir`.
pub fn open_store(config: &RsConfig) -> Result<(RsStore, crate::store::Backend), RsError> {
    match &config.database_url {
        Some(url) => {
            let pg = crate::store::pg::Pg::new(&url.0, PG_POOL)?;
            Ok((
                crate::store::pg::rs::open(&pg)?,
                crate::store::Backend::Postgres,
            ))
        }
        None => {
            let (_db, store) = crate::store::sled_rs::open_dir(&config.data_dir.join("rs.sled"))?;
            Ok((store, crate::store::Backend::Sled))
        }
    }
}

/// Connections each RS instance opens to PostgreSQL at most: two instances (or
/// a demo's two servers) stay under PostgreSQL's default `max_connections`
/// of 100.
pub const PG_POOL: usize = 48;

/// Registers the routes and the state on an actix `App`.
pub fn configure(cfg: &mut web::ServiceConfig, state: web::Data<RsState>) {
    let confirmation = format!("{CONFIRMATIONS_PATH}{{id}}");
    let result = format!("{RESULTS_PATH}{{id}}");
    cfg.app_data(state)
        .service(json_resource("/healthz").route(web::get().to(httpkit::healthz)))
        .service(json_resource("/readyz").route(web::get().to(readyz)))
        .service(json_resource("/metrics").route(web::get().to(metrics)))
        .service(json_resource("/.well-known/jwks.json").route(web::get().to(jwks)))
        .service(json_resource(RESOURCE_PATH).route(web::get().to(cheq_resource)))
        .service(json_resource(TOKEN_PATH).route(web::post().to(token)))
        .service(json_resource("/tools").route(web::get().to(list_tools)))
        .service(
            json_resource("/tools/{tail}")
                .route(web::get().to(get_tool))
                .route(web::post().to(super::invoke::invoke_tool)),
        )
        .configure(super::settings_page::configure)
        .service(
            json_resource(&confirmation)
                .route(web::get().to(get_confirmation))
                .route(web::post().to(post_decision)),
        )
        .service(json_resource(&result).route(web::get().to(get_result)))
        .default_service(web::to(httpkit::json_not_found));
}

/// How long a confirmation record is kept after its CHEQ expired (its
/// result stays readable that long, §7).
pub const KEEP_DECIDED: Duration = Duration::days(7);

/// Largest request body read (a decision is at most 64 KiB of payload, §4,
/// plus signatures).
pub const MAX_BODY: usize = 256 * 1024;

/// Reads a request body, with a JSON 413 beyond [`MAX_BODY`].
pub(super) async fn read_body(payload: web::Payload) -> Result<web::Bytes, ApiError> {
    match payload.to_bytes_limited(MAX_BODY).await {
        Ok(Ok(body)) => Ok(body),
        Err(_) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request",
            format!("the body is larger than {MAX_BODY} bytes"),
        )),
        Ok(Err(e)) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            e.to_string(),
        )),
    }
}

/// Runs the server on an already bound listener (tests bind port 0 first).
pub fn serve(
    listener: std::net::TcpListener,
    state: web::Data<RsState>,
) -> Result<actix_web::dev::Server, RsError> {
    let workers = state.backend;
    let server = HttpServer::new(move || {
        let state = state.clone();
        App::new()
            .wrap(crate::httpkit::request_logger())
            .configure(move |c| configure(c, state))
    })
    .workers(httpkit::workers_for(
        workers == crate::store::Backend::Postgres,
    ))
    .worker_max_blocking_threads(httpkit::blocking_threads_for(
        workers == crate::store::Backend::Postgres,
    ))
    .listen(listener)
    .map_err(|source| RsError::Io {
        what: "listen".into(),
        source,
    })?
    .run();
    Ok(server)
}

/// Runs the reference RS until it is stopped.
pub async fn run(config: RsConfig) -> Result<(), RsError> {
    let state = build_state(&config, Arc::new(SystemClock)).await?;
    let listener = std::net::TcpListener::bind(&config.listen).map_err(|source| RsError::Io {
        what: format!("listen {}", config.listen),
        source,
    })?;
    log::info!(
        "resource server on {} ({})",
        config.listen,
        config.public_url
    );
    let collector = start_collector(&state);
    let served = serve(listener, state)?.await;
    collector.abort();
    served.map_err(|source| RsError::Io {
        what: "server".into(),
        source,
    })
}

/// The RS's background job: expired nonces, old confirmations and used
/// client assertions, collected every [`httpkit::COLLECT_EVERY`]. Abort the
/// handle to stop it.
pub fn start_collector(state: &RsState) -> tokio::task::JoinHandle<()> {
    let cheq = state.cheq.clone();
    let tokens = state.tokens.clone();
    httpkit::spawn_periodic(
        "resource server: expired nonces, old confirmations and used client assertions",
        httpkit::COLLECT_EVERY,
        move || {
            let (cheq, tokens) = (cheq.clone(), tokens.clone());
            async move {
                tokio::task::spawn_blocking(move || {
                    let (nonces, records) = cheq
                        .collect_expired(KEEP_DECIDED)
                        .map_err(|e| e.to_string())?;
                    let assertions = tokens.collect_expired().map_err(|e| e.to_string())?;
                    Ok(nonces + records + assertions)
                })
                .await
                .map_err(|e| e.to_string())?
            }
        },
    )
}

/// Runs reads of the store: on the worker itself with sled, whose reads are
/// look-ups in memory or in the page cache (a hand-off to a blocking thread
/// and back cost more than the read); off it with PostgreSQL,
/// whose calls may wait on the network up to their time limit, which would
/// hold every other connection of the worker.
async fn read<T: Send + 'static>(
    state: &RsState,
    f: impl FnOnce() -> Result<T, CheqRsError> + Send + 'static,
) -> Result<T, ApiError> {
    match state.backend {
        crate::store::Backend::Sled => f().map_err(ApiError::from),
        crate::store::Backend::Postgres => blocking(f).await,
    }
}

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CheqRsError> + Send + 'static,
) -> Result<T, ApiError> {
    match web::block(f).await {
        Ok(r) => r.map_err(ApiError::from),
        Err(_) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "the worker failed",
        )),
    }
}

/// `GET /.well-known/jwks.json` (§9).
async fn jwks(state: web::Data<RsState>) -> HttpResponse {
    state.metrics.jwks_served.inc();
    let mut jwks = state.cheq.jwks();
    if let Some(hosted) = &state.hosted_keys {
        let more = hosted.published().to_json();
        if let (Some(keys), Some(Value::Array(more))) = (
            jwks.get_mut("keys").and_then(Value::as_array_mut),
            more.get("keys").cloned(),
        ) {
            keys.extend(more);
        }
    }
    httpkit::jwks_response(&jwks)
}

/// `GET /.well-known/cheq-resource` (§16.2).
async fn cheq_resource(state: web::Data<RsState>) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "public, max-age=300"))
        .json(&state.resource_document)
}

async fn token(
    state: web::Data<RsState>,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(body).await?;
    let form: TokenRequest = serde_urlencoded::from_bytes(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("the body must be application/x-www-form-urlencoded: {e}"),
        )
    })?;
    let address = req
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|| "?".into());
    let answer = if form.by_assertion() {
        state
            .tokens
            .issue_by_assertion(authorization(&req), &address, &form)
            .await?
    } else {
        state.tokens.issue(authorization(&req), &address, &form)?
    };
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::PRAGMA, "no-cache"))
        .json(answer))
}

async fn list_tools(state: web::Data<RsState>, _: Caller<Agent>) -> Result<HttpResponse, ApiError> {
    let items: Vec<Value> = state.catalogue.iter().map(Tool::signature).collect();
    Ok(HttpResponse::Ok().json(json!({
        "items": items,
        "paging": {"pageLimit": items.len(), "next": null},
    })))
}

async fn get_tool(
    state: web::Data<RsState>,
    _: Caller<Agent>,
    tail: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let tool = tools::find(&state.catalogue, &tail)
        .ok_or_else(|| ToolError::UnknownTool(tail.into_inner()))?;
    Ok(HttpResponse::Ok().json(tool.signature()))
}

async fn get_confirmation(
    state: web::Data<RsState>,
    Caller(who, _): Caller<Cs>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let cheq = state.cheq.clone();
    let id = id.into_inner();
    let by = caller_cs(&state, &who);
    let document = read(&state, move || cheq.fetch_for(&id, Some(&by))).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/jose+json")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(document))
}

/// `?accept` or `?reject` (alone, or among other query parameters, §6).
fn decision_from_query(query: &str) -> Result<Decision, ApiError> {
    let found: Vec<Decision> = query
        .split('&')
        .filter_map(|part| Decision::parse(part.split('=').next().unwrap_or("")))
        .collect();
    match found.as_slice() {
        [d] => Ok(*d),
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "POST to the resource URI with exactly one of ?accept or ?reject",
        )),
    }
}

async fn post_decision(
    state: web::Data<RsState>,
    Caller(who, _): Caller<Cs>,
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let decision = decision_from_query(req.query_string())?;
    let body: Arc<[u8]> = Arc::from(&read_body(body).await?[..]);
    let id = Arc::new(id.into_inner());
    // Whether the caller authenticated with its own key (§16.4), and the
    // CS it is: the only one whose CHEQs it decides.
    let by_key = who.cs.is_some();
    let by: Arc<str> = Arc::from(caller_cs(&state, &who));
    let decide = || {
        state
            .cheq
            .decide_async_by(id.clone(), decision, body.clone(), Some(by.clone()))
    };
    let cs = known_cs(&state, &by).await?;
    // The CS's keys as its cache headers allow; a key id this RS has not
    // seen may fetch them again (at most once a minute, §9).
    cs.ensure_fresh().await;
    let mut answer = decide().await;
    let mut later = None;
    if let Err(CheqRsError::Invalid {
        error: VerifyError::UntrustedConfirmationKey { kid, .. },
        ..
    }) = &answer
    {
        // A countersignature that verifies with another trusted CS's key
        // (§17) is that CS's: no key the caller may yet publish.
        let elsewhere = by_key && state.cheq.countersigned_by_another_cs(&id, &body, kid, &by);
        let refetched = if elsewhere {
            Refetch::Absent
        } else {
            cs.refetch_for(kid).await
        };
        match refetched {
            Refetch::Found => answer = decide().await,
            // Only the CS (authenticated above) posts decisions: a key it
            // signs with and this RS cannot find yet (a cache in front of
            // its key set, another instance's newer key) is "try again",
            // never a refusal that would lose the decision; the CS gives up
            // when the CHEQ expires. (Keys from a file never change while
            // the RS runs: refused.) A CS that authenticated with its own
            // key has had its set read again just now: a key not in it is
            // not its key (below).
            Refetch::Absent => {
                if cs.keys_change() && !by_key {
                    later = Some(crate::peerkeys::REFETCH_EVERY_SECS);
                }
            }
            Refetch::Later { retry_after } => later = Some(retry_after),
        }
    }
    let answer = match answer {
        _ if later.is_some() => {
            let mut e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "keys_unavailable",
                "the confirmation server signed with a key this resource server has not read yet; try again later",
            );
            e.retry_after = later;
            Err(e)
        }
        // Another CS's countersignature, delivered by the CS the token
        // names: refused, nothing runs, the CHEQ stays pending (§16.4).
        Err(e) if by_key && e.countersigned_elsewhere() => {
            log::info!(
                "a decision countersigned by another confirmation server was refused ({})",
                crate::text::snippet(e.to_string().as_bytes(), 200)
            );
            Err(ApiError::from(CheqRsError::WrongConfirmationServer))
        }
        answer => answer.map_err(ApiError::from),
    };
    match &answer {
        Ok(_) => state
            .metrics
            .decisions
            .with_label_values(&[decision.as_str()])
            .inc(),
        Err(e) => state.metrics.refusals.with_label_values(&[e.code]).inc(),
    }
    let answer = answer?;
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(answer.to_json()))
}

/// The CS a caller of the CS routes is: the one its token names (a CS that
/// authenticated with its own key, §16.4), else the default CS (its
/// client secret is the default CS's).
fn caller_cs(state: &RsState, who: &super::oauth::TokenInfo) -> String {
    who.cs
        .clone()
        .unwrap_or_else(|| state.cheq.confirmation_server().origin())
}

/// The CS of `issuer`, read from the store's list when this instance does
/// not know it yet (a user who moved on another instance, §17).
async fn known_cs(state: &RsState, issuer: &str) -> Result<ConfirmationServer, ApiError> {
    if let Some(cs) = state.cheq.hosts().get(Some(issuer)) {
        return Ok(cs);
    }
    let hosts = state.cheq.hosts().clone();
    let issuer = issuer.to_owned();
    blocking(move || hosts.for_issuer(&issuer).map_err(CheqRsError::from))
        .await?
        .ok_or_else(|| ApiError::from(CheqRsError::WrongConfirmationServer))
}

/// `GET /readyz`: 200 only when the store answers.
async fn readyz(state: web::Data<RsState>) -> HttpResponse {
    let readiness = state.readiness.clone();
    httpkit::readyz(move || readiness.ready()).await
}

/// `GET /metrics` (Prometheus text format).
async fn metrics(state: web::Data<RsState>, req: HttpRequest) -> HttpResponse {
    if let Some(refused) = httpkit::metrics_refused(state.metrics_token.as_ref(), &req) {
        return refused;
    }
    httpkit::metrics_response(state.metrics.render())
}

async fn get_result(
    state: web::Data<RsState>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let cheq = state.cheq.clone();
    let id = id.into_inner();
    let view = read(&state, move || cheq.result(&id)).await?;
    let mut res = if view == ResultView::Pending {
        let mut r = HttpResponse::Accepted();
        r.insert_header((header::RETRY_AFTER, state.retry_after_secs.to_string()));
        r
    } else {
        HttpResponse::Ok()
    };
    Ok(res
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(view.to_json()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signing_key_is_created_0600_and_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/rs.jwk");
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let open = |kid| KeyRing::open(&path, kid, "rs", clock.clone());
        let key = open(Some("rs-test")).unwrap().signer().unwrap();
        assert_eq!(key.kid(), "rs-test");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let before = std::fs::read(&path).unwrap();
        let again = open(Some("other")).unwrap().signer().unwrap();
        assert_eq!(again.kid(), "rs-test");
        assert_eq!(std::fs::read(&path).unwrap(), before);
        // A damaged key file is refused, not replaced.
        std::fs::write(&path, b"{}").unwrap();
        let err = open(None).unwrap().signer().unwrap_err();
        assert!(err.to_string().contains("rs.jwk"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
    }

    #[test]
    fn decision_query() {
        assert_eq!(decision_from_query("accept").unwrap(), Decision::Accept);
        assert_eq!(decision_from_query("x=1&reject").unwrap(), Decision::Reject);
        assert!(decision_from_query("").is_err());
        assert!(decision_from_query("accept&reject").is_err());
        assert!(decision_from_query("accept&accept").is_err());
    }
}
