//! Tracon as a Cloudflare Worker.
//!
//! `fetch` hands every request to the handlers' router for the endpoint group this bundle
//! was built for (cargo feature `group-all`, `group-agents`, `group-runs` or
//! `group-sessions`; one bundle per wrangler environment). State lives in Postgres, reached
//! through the `HYPERDRIVE` binding with tokio-postgres ([`store`]); configuration comes
//! from the Worker's vars and secrets with the usual `Tracon__Section__Key` names. Without
//! `TRACON_AUTH_TOKEN` every route but `/api/meta` answers `503`.
//!
//! The app state is built once per isolate and reused. Runs execute as tasks of the isolate
//! registered with the request's `ctx.wait_until` (see [`platform`]), so a run and the
//! recording of its tail finish even when the client disconnects mid-stream.
//!
//! Background work ([`jobs`]): with the `TRACON_JOBS` queue bound, `Prefer: respond-async`
//! queues a run and answers 202; the `queue` handler runs queued jobs and the `scheduled`
//! handler (a cron trigger) runs the periodic tick.

mod jobs;
mod log;
mod platform;
mod store;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use axum::Router;
use tower_service::Service;
use tracon_core::config::Config;
use tracon_core::runtime::RunQueue;
use tracon_core::setup::{self, HostDefaults};
use tracon_handlers::groups::{self, Deployment};
use tracon_handlers::{AppState, HttpSettings};
use tracon_postgres::protect::Protection;
use tracon_postgres::settings::PgSettings;
use wasm_bindgen::JsCast;
use worker::{Context, Env, HttpRequest, MessageBatch, ScheduleContext, ScheduledEvent, event};

#[cfg(any(
    all(feature = "group-agents", any(feature = "group-runs", feature = "group-sessions", feature = "group-all")),
    all(feature = "group-runs", any(feature = "group-sessions", feature = "group-all")),
    all(feature = "group-sessions", feature = "group-all"),
))]
compile_error!(
    "a Worker bundle serves one group: enable exactly one of group-all, group-agents, group-runs, group-sessions"
);

/// The deployment this bundle is built for (`group-<name>`, named in
/// `tracon_handlers::groups`); the other deployments' groups are not linked in.
#[cfg(feature = "group-agents")]
const DEPLOYMENT: &Deployment = &groups::deployments::AGENTS;
#[cfg(feature = "group-runs")]
const DEPLOYMENT: &Deployment = &groups::deployments::RUNS;
#[cfg(feature = "group-sessions")]
const DEPLOYMENT: &Deployment = &groups::deployments::SESSIONS;
#[cfg(not(any(feature = "group-agents", feature = "group-runs", feature = "group-sessions")))]
const DEPLOYMENT: &Deployment = &groups::deployments::ALL;

/// What the isolate builds once: the router for `fetch`, the job consumer and tick for
/// `queue` and `scheduled`.
#[derive(Clone)]
struct App {
    router: Router,
    background: Rc<jobs::Background>,
}

thread_local! {
    static APP: RefCell<Option<App>> = const { RefCell::new(None) };
}

/// Every string var and secret of the Worker, as configuration.
fn config_from(env: &Env) -> Config {
    let object: &js_sys::Object = env.unchecked_ref();
    let entries = js_sys::Object::entries(object);
    let pairs: Vec<(String, String)> = entries
        .iter()
        .filter_map(|entry| {
            let pair: js_sys::Array = entry.unchecked_into();
            Some((pair.get(0).as_string()?, pair.get(1).as_string()?))
        })
        .collect();
    Config::from_pairs(pairs)
}

fn build(env: &Env) -> Result<App, String> {
    let config = config_from(env);
    log::init(config.first(&["RUST_LOG", "Tracon:Logging:Level"]).unwrap_or("info"));
    let hyperdrive = env.hyperdrive("HYPERDRIVE").map_err(|_| {
        "The HYPERDRIVE binding is missing: Tracon keeps every run and session in Postgres; bind a Hyperdrive configuration as HYPERDRIVE in wrangler.toml".to_owned()
    })?;
    let settings = PgSettings::from_config("", &config).map_err(|e| e.to_string())?;
    let target = store::PgTarget {
        host: hyperdrive.host(),
        port: hyperdrive.port(),
        user: hyperdrive.user(),
        password: hyperdrive.password(),
        database: hyperdrive.database(),
        settings,
    };
    let protection = Protection::from_config(&config).map_err(|e| e.to_string())?;
    let stores = tracon_postgres::store::stores(Arc::new(store::WorkerDriver { target }), protection);
    let client = reqwest::Client::new();
    let runtime =
        setup::runtime_from_config(&config, platform::platform(), stores, client, &HostDefaults { demo_agent: false })?;
    let http = HttpSettings::serverless_from_config(&config).map_err(|e| e.to_string())?;
    let runtime = Arc::new(runtime);
    let background = Rc::new(jobs::Background::new(runtime.clone(), &config, env)?);
    // With the job queue bound, `Prefer: respond-async` queues runs for the `queue` handler.
    if let Some(transport) = background.transport() {
        runtime.set_queue(RunQueue { transport, max_attempts: background.settings.max_attempts });
    }
    // A cancel reaching this isolate reaches the run through the store, in the run's own
    // request context (see `Drain::isolate_requests`).
    runtime.drain.isolate_requests();
    let state = AppState::new(runtime, http);
    Ok(App { router: tracon_handlers::deployment_app(state, DEPLOYMENT), background })
}

/// The isolate's app, built on first use.
fn app(env: &Env) -> Result<App, String> {
    if let Some(app) = APP.with(|a| a.borrow().clone()) {
        return Ok(app);
    }
    let app = build(env)?;
    APP.with(|a| *a.borrow_mut() = Some(app.clone()));
    Ok(app)
}

fn startup_failure(message: &str) -> axum::http::Response<axum::body::Body> {
    let body = serde_json::json!({
        "type": "urn:tracon:problem:startup_failed",
        "title": "Service Unavailable",
        "status": 503,
        "detail": message,
        "errorType": "startup_failed",
    });
    let mut response = axum::http::Response::new(axum::body::Body::from(body.to_string()));
    *response.status_mut() = axum::http::StatusCode::SERVICE_UNAVAILABLE;
    response
        .headers_mut()
        .insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/problem+json"));
    response
}

#[event(fetch)]
async fn fetch(req: HttpRequest, env: Env, ctx: Context) -> worker::Result<axum::http::Response<axum::body::Body>> {
    console_error_panic_hook::set_once();
    let mut router = match app(&env) {
        Ok(app) => app.router,
        Err(message) => {
            tracing::error!(%message, "cannot start");
            return Ok(startup_failure(&message));
        }
    };
    let mut req = req;
    // Cloudflare sets `CF-Connecting-IP` to the client's address at its edge (a client's own
    // header of that name is replaced), for the limits kept per address. A Worker never
    // trusts loopback, so the address grants nothing else.
    let source =
        req.headers().get("cf-connecting-ip").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    if let Some(ip) = source {
        req.extensions_mut().insert(tracon_handlers::PeerAddr(std::net::SocketAddr::new(ip, 0)));
    }
    Ok(platform::WithContext::new(Rc::new(ctx), router.call(req)).await?)
}

/// The job queue's consumer: each message's job runs to its end in this invocation. Never
/// an `Err` (the glue would panic): a batch that cannot be handled is retried whole.
#[event(queue)]
async fn queue(batch: MessageBatch<String>, env: Env, ctx: Context) -> worker::Result<()> {
    console_error_panic_hook::set_once();
    match app(&env) {
        Ok(app) => app.background.consume(batch.raw_iter().collect(), Rc::new(ctx)).await,
        Err(message) => {
            tracing::error!(%message, "cannot start; the job batch is retried");
            batch.retry_all();
        }
    }
    Ok(())
}

/// The cron trigger: one tick.
#[event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, ctx: ScheduleContext) {
    console_error_panic_hook::set_once();
    match app(&env) {
        Ok(app) => {
            app.background.tick(Rc::new(ctx)).await;
        }
        Err(message) => tracing::error!(%message, "cannot start; the tick did not run"),
    }
}
