//! Tracon on AWS Lambda.
//!
//! Each endpoint group is its own function (`tracon-agents`, `tracon-runs`,
//! `tracon-sessions`) and `tracon-all` serves every group; which routes a function serves is
//! decided by which binary it is, at build time. The groups that stream server-sent events
//! (agents: the live run; runs: the event log) answer with Lambda response streaming; the
//! others buffer.
//!
//! State lives in Postgres (`DATABASE_URL`, required): the pool is created once per
//! execution environment, lazily (no connection during init), and sized for Lambda (2
//! connections unless `Tracon__PostgreSql__MaxConnections` says otherwise). Migrations are
//! a deploy step (`tracon migrate`), not part of a cold start. There is no loopback here:
//! until `TRACON_AUTH_TOKEN` is set, every route but `/api/meta` answers
//! `503 authentication_not_configured`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::Uri;
use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};
use tower::ServiceBuilder;
use tower::util::MapRequest;
use tracon_core::config::Config;
use tracon_core::ports::tokio_rt;
use tracon_core::setup::{self, HostDefaults};
use tracon_core::store::Stores;
use tracon_handlers::{AppState, HttpSettings};
use tracon_postgres::pg::{self, PgSettings};
use tracon_postgres::protect::Protection;

/// Connections per execution environment: one request at a time runs in an environment,
/// and a run holds at most one connection at a time plus one for a concurrent read.
pub const DEFAULT_POOL_SIZE: u32 = 2;

/// Builds the app state from the environment, with stores over a lazily connecting pool.
pub fn state_from_env(config: &Config) -> Result<AppState, String> {
    let url = config.first(&["DATABASE_URL", "Tracon:PostgreSql:ConnectionString"]).ok_or(
        "DATABASE_URL is not set: Tracon on Lambda keeps every run and session in Postgres; \
         pass the connection string from Secrets Manager or SSM as the DATABASE_URL environment variable",
    )?;
    let mut settings = PgSettings::from_config(url, config).map_err(|e| e.to_string())?;
    if config.get("Tracon:PostgreSql:MaxConnections").is_none() {
        settings.max_connections = DEFAULT_POOL_SIZE;
    }
    let protection = Protection::from_config(config).map_err(|e| e.to_string())?;
    let pool = pg::connect_lazy(&settings).map_err(|e| e.to_string())?;
    state_with_stores(config, pg::stores_on(pool, protection))
}

/// The app state over given stores (tests use in-memory ones).
pub fn state_with_stores(config: &Config, stores: Stores) -> Result<AppState, String> {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .build()
        .map_err(|e| format!("could not build the HTTP client: {e}"))?;
    let runtime =
        setup::runtime_from_config(config, tokio_rt::platform(), stores, client, &HostDefaults { demo_agent: false })?;
    let http = HttpSettings::serverless_from_config(config).map_err(|e| e.to_string())?;
    if http.auth_token_digest.is_none() {
        tracing::error!(
            "TRACON_AUTH_TOKEN is not set: every route but /api/meta answers 503 until it is (set it as an encrypted environment variable)"
        );
    }
    Ok(AppState::new(Arc::new(runtime), http))
}

/// JSON logs to stdout, which Lambda ships to CloudWatch.
pub fn init_logging(config: &Config) {
    let level = config.get("Tracon:Logging:Level").unwrap_or("info");
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(format!("{level},hyper=warn,reqwest=warn,sqlx=warn")))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_env_filter(filter)
        .without_time()
        .try_init();
}

/// The function's handler: the group's routes behind the access layers and
/// [`without_stage`].
pub fn function(state: AppState, routes: Router<AppState>) -> MapRequest<Router, fn(Request) -> Request> {
    ServiceBuilder::new()
        .map_request(without_stage as fn(Request) -> Request)
        .service(tracon_handlers::app(state, routes))
}

/// Takes the API Gateway stage off the path. `lambda_http` puts a named stage (`/prod`) in
/// front of the path it hands on; Tracon's routes are the same on every stage, so a REST API
/// stage or an HTTP API named stage must not turn `/prod/api/runs` into a 404.
pub fn without_stage(mut request: Request) -> Request {
    let stage = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV1(c)) => c.stage.clone(),
        Some(RequestContext::ApiGatewayV2(c)) => c.stage.clone(),
        _ => None,
    };
    let Some(stage) = stage.filter(|s| !s.is_empty() && s != "$default") else {
        return request;
    };
    let path = request.uri().path();
    let Some(rest) = path.strip_prefix('/').and_then(|p| p.strip_prefix(stage.as_str())) else {
        return request;
    };
    if !(rest.is_empty() || rest.starts_with('/')) {
        return request;
    }
    let rest = if rest.is_empty() { "/" } else { rest };
    let path_and_query = match request.uri().query() {
        Some(q) => format!("{rest}?{q}"),
        None => rest.to_owned(),
    };
    let mut parts = request.uri().clone().into_parts();
    if let Ok(pq) = path_and_query.parse() {
        parts.path_and_query = Some(pq);
        if let Ok(uri) = Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
    request
}

/// Runs one function: the group's routes (`tracon_handlers::agents_router()`, …, or
/// `all_routes()`), streaming or buffered.
pub async fn serve(routes: Router<AppState>, streaming: bool) -> Result<(), lambda_http::Error> {
    let config = Config::from_pairs(std::env::vars());
    init_logging(&config);
    let state = state_from_env(&config).map_err(|e| {
        tracing::error!(error = %e, "cannot start");
        lambda_http::Error::from(e)
    })?;
    let handler = function(state, routes);
    // The runtime loop ends on the first failed exchange with the Runtime API (a connection
    // closed under a long poll, say). An execution environment whose process exits is
    // replaced with a cold start, so ask for the next invocation again instead — unless the
    // loop keeps failing straight away, which is not going to get better.
    let mut quick_failures = 0;
    loop {
        let started = std::time::Instant::now();
        let result = if streaming {
            lambda_http::run_with_streaming_response(handler.clone()).await
        } else {
            lambda_http::run(handler.clone()).await
        };
        let Err(e) = result else { return Ok(()) };
        quick_failures = if started.elapsed() < RUNTIME_RETRY_WINDOW { quick_failures + 1 } else { 1 };
        if quick_failures > RUNTIME_RETRIES {
            tracing::error!(error = %e, "the Runtime API keeps failing; exiting");
            return Err(e);
        }
        tracing::warn!(error = %e, "the Runtime API exchange failed; asking for the next invocation again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many times in a row the runtime loop may fail within [`RUNTIME_RETRY_WINDOW`] of
/// starting before the function gives up and exits.
const RUNTIME_RETRIES: u32 = 3;
const RUNTIME_RETRY_WINDOW: Duration = Duration::from_secs(1);
