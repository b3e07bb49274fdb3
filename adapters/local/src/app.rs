//! Builds the runtime and the HTTP state of the local server from configuration.

use std::sync::Arc;
use std::time::Duration;

use tracon_core::config::Config;
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::Runtime;
use tracon_core::setup::{self, HostDefaults};
use tracon_core::stores::Stores;
use tracon_handlers::{AppState, HttpSettings};
use tracon_postgres::pg::{self, PgSettings};
use tracon_postgres::protect::Protection;

/// Reads every setting, opens the stores (Postgres when a database URL is given, memory
/// otherwise), registers providers, tools and the demo agent.
pub async fn build(
    config: &Config,
    database_url: Option<&str>,
    extend: crate::cli::Extend,
) -> Result<AppState, String> {
    let (stores, pool) = match database_url {
        Some(url) => {
            let settings = PgSettings::from_config(url, config).map_err(|e| e.to_string())?;
            let protection = Protection::from_config(config).map_err(|e| e.to_string())?;
            if protection.enabled() {
                tracing::info!("at-rest content protection is on");
            }
            let (stores, pool) = pg::stores(&settings, protection).await.map_err(|e| e.to_string())?;
            (stores, Some(pool))
        }
        None => (memory_stores(config)?, None),
    };
    let runtime = build_runtime(config, stores, extend)?;
    // How runs hear cancels and followers (tracon_core::runs::drain): over memory stores this
    // process is the only instance; over Postgres, through LISTEN. Off, they poll as on a Worker.
    if config.bool("Tracon:Runs:HearSignals").map_err(|e| e.to_string())?.unwrap_or(true) {
        match pool {
            None => runtime.drain.set_heard(true),
            Some(pool) => {
                pg::listen(pool, runtime.drain.clone());
            }
        }
    }
    let http = HttpSettings::from_config(config).map_err(|e| e.to_string())?;
    // The start-up boundary of the MCP server and of A2A (tracon_core::exposure): no exposed
    // agent may cross an approval boundary, and remote exposure needs an ExternalInvoke key in
    // a persistent store (in memory there can be none yet; every call needs one anyway).
    let remote = http.allow_remote_access && runtime.stores.persistent;
    tracon_core::exposure::check_startup(&runtime, &http.mcp_server.exposure, remote, "Tracon:McpServer").await?;
    tracon_core::exposure::check_startup(&runtime, &http.a2a.exposure, remote, "Tracon:A2A").await?;
    let consumer = crate::jobs::ConsumerSettings::from_config(config)?;
    Ok(crate::jobs::start(AppState::new(Arc::new(runtime), http), consumer))
}

fn memory_stores(config: &Config) -> Result<Stores, String> {
    let max_runs = config
        .parse::<usize>("Tracon:Storage:Memory:MaxRuns")
        .map_err(|e| e.to_string())?
        .unwrap_or(tracon_core::runs::memory::DEFAULT_MAX_RUNS);
    Ok(Stores::in_memory_keeping(max_runs))
}

pub fn http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| format!("could not build the HTTP client: {e}"))
}

/// The runtime the configuration describes, over `stores`, with the host's registrations.
pub fn build_runtime(config: &Config, stores: Stores, extend: crate::cli::Extend) -> Result<Runtime, String> {
    let defaults = HostDefaults { demo_agent: true };
    let builder = setup::builder_from_config(config, tokio_rt::platform(), stores, http_client()?, &defaults)?;
    extend(builder).build().map_err(|e| e.to_string())
}
