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
//!
//! The router sees the path the client asked for: an API Gateway stage and a custom
//! domain's base path (`Tracon__Http__BasePath`) are taken off it ([`without_stage`]). An
//! invocation is run at most once: one the Runtime API hands out again after its response
//! failed to post is answered `502 invocation_replayed` ([`Function`]).
//!
//! Background work: with `Tracon:Queue:SqsQueueUrl` set, `Prefer: respond-async` queues a run
//! and wakes the consumer with an SQS message ([`queue`]); `tracon-jobs` is that consumer (an
//! SQS event source reporting partial batch failures) and `tracon-tick` the periodic tick on
//! an EventBridge schedule ([`consumer`]).

pub mod consumer;
pub mod queue;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};
use tower::Service;
use tracon_core::config::{Config, env_name};
use tracon_core::ports::tokio_rt;
use tracon_core::setup::{self, HostDefaults};
use tracon_core::stores::Stores;
use tracon_handlers::error::ApiError;
use tracon_handlers::groups::Deployment;
use tracon_handlers::{AppState, HttpSettings, PeerAddr};
use tracon_postgres::pg::{self, PgSettings};
use tracon_postgres::protect::Protection;

/// Connections per execution environment: one request at a time runs in an environment,
/// and a run holds at most one connection at a time plus one for a concurrent read.
pub const DEFAULT_POOL_SIZE: u32 = 2;

/// Builds the app state from the environment, with stores over a lazily connecting pool.
pub fn state_from_env(config: &Config) -> Result<AppState, String> {
    state_with_stores(config, stores_from_env(config, DEFAULT_POOL_SIZE)?)
}

/// The stores over a lazily connecting pool of `pool_size` connections (unless
/// `Tracon:PostgreSql:MaxConnections` says otherwise).
pub fn stores_from_env(config: &Config, pool_size: u32) -> Result<Stores, String> {
    let url = config.first(&["DATABASE_URL", "Tracon:PostgreSql:ConnectionString"]).ok_or(
        "DATABASE_URL is not set: Tracon on Lambda keeps every run and session in Postgres; \
         pass the connection string from Secrets Manager or SSM as the DATABASE_URL environment variable",
    )?;
    let mut settings = PgSettings::from_config(url, config).map_err(|e| e.to_string())?;
    if config.get("Tracon:PostgreSql:MaxConnections").is_none() {
        settings.max_connections = pool_size;
    }
    let protection = Protection::from_config(config).map_err(|e| e.to_string())?;
    let pool = pg::connect_lazy(&settings).map_err(|e| e.to_string())?;
    pg::stores_on(pool, protection).map_err(|e| e.to_string())
}

/// The runtime over given stores: what the HTTP functions, the job consumer and the tick share.
pub fn runtime_with_stores(config: &Config, stores: Stores) -> Result<tracon_core::runtime::Runtime, String> {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .build()
        .map_err(|e| format!("could not build the HTTP client: {e}"))?;
    setup::runtime_from_config(config, tokio_rt::platform(), stores, client, &HostDefaults { demo_agent: false })
}

/// The app state over given stores (tests use in-memory ones). With a queue configured
/// (`Tracon:Queue:SqsQueueUrl`), `Prefer: respond-async` queues runs ([`queue`]).
pub fn state_with_stores(config: &Config, stores: Stores) -> Result<AppState, String> {
    let runtime = runtime_with_stores(config, stores)?;
    let mut http = HttpSettings::serverless_from_config(config).map_err(|e| e.to_string())?;
    // The environment freezes once a response is sent: nothing may be left running.
    http.background_outlives_response = false;
    if http.auth_token_digest.is_none() {
        tracing::error!(
            "TRACON_AUTH_TOKEN is not set: every route but /api/meta answers 503 until it is (set it as an encrypted environment variable)"
        );
    }
    queue::with_queue(AppState::new(Arc::new(runtime), http), config)
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

/// The function's handler: the group's routes behind the access layers, reached through
/// [`without_stage`], each invocation run at most once.
pub fn function(state: AppState, routes: Router<AppState>, base_path: BasePath) -> Function {
    Function { router: tracon_handlers::app(state, routes), base_path, last_invocation: Arc::default() }
}

/// A Lambda function's handler (see [`function`]). Clones share what they remember, so the
/// runtime loop restarted by [`serve`] still knows which invocation it last started.
#[derive(Clone)]
pub struct Function {
    router: Router,
    base_path: BasePath,
    /// The request id of the last invocation whose handling started.
    last_invocation: Arc<Mutex<Option<String>>>,
}

impl Function {
    /// Whether the invocation `request_id` is new, remembering it as the last one started.
    /// Invocations come one at a time and the Runtime API hands a redelivered one out again
    /// straight away, so the last id is all there is to compare with.
    fn starts(&self, request_id: &str) -> bool {
        let mut last = self.last_invocation.lock().unwrap_or_else(PoisonError::into_inner);
        if last.as_deref() == Some(request_id) {
            return false;
        }
        *last = Some(request_id.to_owned());
        true
    }
}

impl Service<Request> for Function {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Service::<Request>::poll_ready(&mut self.router, cx)
    }

    /// When posting a response to the Runtime API fails, [`serve`] asks for the next
    /// invocation and gets the same one again, although its handler already ran: running it
    /// twice would start a second agent run, with its model cost and tool side effects. A
    /// request without a Lambda context (built by hand) is not an invocation and passes.
    fn call(&mut self, request: Request) -> Self::Future {
        if let Some(context) = request.lambda_context_ref()
            && !self.starts(&context.request_id)
        {
            tracing::warn!(request_id = %context.request_id, "invocation handed out again; not running it twice");
            let replayed = ApiError::new(
                StatusCode::BAD_GATEWAY,
                "invocation_replayed",
                "This invocation was already handled; it is not run twice.",
            );
            return Box::pin(std::future::ready(Ok(replayed.into_response())));
        }
        let mut request = without_stage(request, &self.base_path);
        if let Some(source) = source_address(&request) {
            request.extensions_mut().insert(source);
        }
        Box::pin(self.router.call(request))
    }
}

/// The client's address as API Gateway saw it (`requestContext.identity.sourceIp`, or
/// `requestContext.http.sourceIp`), for the limits kept per address (the inbound triggers'
/// unverified requests, `PartitionBy: Address`). Serverless hosts never trust loopback, so
/// the address grants nothing else.
fn source_address(request: &Request) -> Option<PeerAddr> {
    let ip = match request.request_context_ref()? {
        RequestContext::ApiGatewayV1(c) => c.identity.source_ip.as_deref(),
        RequestContext::ApiGatewayV2(c) => c.http.source_ip.as_deref(),
        _ => None,
    }?;
    let ip: std::net::IpAddr = ip.trim().parse().ok()?;
    Some(PeerAddr(std::net::SocketAddr::new(ip, 0)))
}

/// Makes the path the one Tracon's routes are written for, keeping the query string as
/// `lambda_http` built it. Tracon's routes are the same on every stage and behind every
/// base path mapping, so neither may turn `/api/runs` into a 404:
///
/// - A REST API event's `path` is the path the client sent, base path mapping included
///   and stage not, so it is taken as is. (`lambda_http` puts the stage in front of it
///   unless it already starts with the stage's name: a stage named `api` left `/api/runs`
///   alone, and taking the stage off again broke it.)
/// - An HTTP API event on a named stage has `/prod` in front (from the client or from
///   `lambda_http`), which is taken off; `$default`, function URLs and ALB have none.
/// - Then `base_path`, when the path starts with it.
pub fn without_stage(mut request: Request, base_path: &BasePath) -> Request {
    let path = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV1(_)) => encode_path(request.raw_http_path()),
        Some(RequestContext::ApiGatewayV2(c)) => {
            let path = request.uri().path();
            match c.stage.as_deref().filter(|s| !s.is_empty() && *s != "$default") {
                Some(stage) => strip_segments(path, &format!("/{stage}")).unwrap_or(path).to_owned(),
                None => path.to_owned(),
            }
        }
        _ => request.uri().path().to_owned(),
    };
    let path = base_path.strip(&path);
    if path == request.uri().path() {
        return request;
    }
    let path_and_query = match request.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
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

/// What is left of `path` after `prefix` (`/prod`), when `path` starts with it at a
/// segment boundary: `/prod/x` → `/x`, `/prod` → `/`, `/product` → none.
fn strip_segments<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    match path.strip_prefix(prefix)? {
        "" => Some("/"),
        rest if rest.starts_with('/') => Some(rest),
        _ => None,
    }
}

/// A REST API event's `path`, percent-encoded where a URI path may not hold a character
/// (API Gateway may hand it over decoded); a `%` already there is left alone.
fn encode_path(path: &str) -> String {
    if path.is_empty() {
        return "/".to_owned();
    }
    let mut encoded = String::with_capacity(path.len());
    for byte in path.bytes() {
        if is_path_byte(byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// The bytes a URI path segment holds as they are (RFC 3986 `pchar`), plus `/` and `%`.
fn is_path_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&byte)
}

/// A base path the function's routes sit under (`Tracon:Http:BasePath`, e.g. `/v1`): a
/// custom domain's base path mapping that the client's path keeps in front of `/api/…`.
/// None by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BasePath(Option<String>);

impl BasePath {
    pub const KEY: &str = "Tracon:Http:BasePath";

    /// Reads [`Self::KEY`]; a value that is not a clean absolute path is a start-up error,
    /// not a base path that never matches.
    pub fn from_config(config: &Config) -> Result<Self, String> {
        config.get(Self::KEY).map_or(Ok(Self::default()), Self::new)
    }

    /// `/v1` or `/tracon/v1`: starts with `/`, no trailing `/`, no empty or `..` segment.
    pub fn new(path: &str) -> Result<Self, String> {
        let valid = path.strip_prefix('/').is_some_and(|rest| rest.split('/').all(|s| !s.is_empty() && s != "."))
            && !path.contains("..")
            && path.bytes().all(is_path_byte);
        if !valid {
            return Err(format!(
                "{} ({}) must be a path such as /v1: starting with /, without a trailing /, without '..'",
                Self::KEY,
                env_name(Self::KEY)
            ));
        }
        Ok(Self(Some(path.to_owned())))
    }

    /// `path` without the base path in front; `path` itself when it does not start with it
    /// (at a segment boundary: `/v1x/api` is not under `/v1`).
    pub fn strip<'a>(&self, path: &'a str) -> &'a str {
        self.0.as_deref().and_then(|base| strip_segments(path, base)).unwrap_or(path)
    }
}

/// Runs one function: what `deployment` serves (`tracon_handlers::groups::deployments::AGENTS`,
/// …, `groups::deployments::ALL`), streaming when the deployment does.
pub async fn serve(deployment: &'static Deployment) -> Result<(), lambda_http::Error> {
    let (routes, streaming) = (deployment.routes(), deployment.streams);
    let config = Config::from_pairs(std::env::vars());
    init_logging(&config);
    let handler = match BasePath::from_config(&config)
        .and_then(|base_path| Ok(function(state_from_env(&config)?, routes, base_path)))
    {
        Ok(handler) => handler,
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            report_init_error(&e).await;
            return Err(e.into());
        }
    };
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

/// Tells the Runtime API why the function cannot start, so an invocation fails with
/// `Runtime.ConfigError` and the reason (what to set) instead of a bare exit status. Best
/// effort: outside Lambda (no `AWS_LAMBDA_RUNTIME_API`) or when the post fails, the log line
/// written before is all there is.
pub async fn report_init_error(message: &str) {
    let Ok(api) = std::env::var("AWS_LAMBDA_RUNTIME_API") else { return };
    let body = serde_json::json!({"errorMessage": message, "errorType": "Runtime.ConfigError", "stackTrace": []});
    let post = reqwest::Client::new()
        .post(format!("http://{api}/2018-06-01/runtime/init/error"))
        .header("Lambda-Runtime-Function-Error-Type", "Runtime.ConfigError")
        .timeout(Duration::from_secs(2))
        .json(&body)
        .send()
        .await;
    if let Err(e) = post.and_then(|r| r.error_for_status()) {
        tracing::warn!(error = %e, "could not report the start-up failure to the Runtime API");
    }
}

/// How many times in a row the runtime loop may fail within [`RUNTIME_RETRY_WINDOW`] of
/// starting before the function gives up and exits.
const RUNTIME_RETRIES: u32 = 3;
const RUNTIME_RETRY_WINDOW: Duration = Duration::from_secs(1);
