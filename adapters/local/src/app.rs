//! Builds the runtime and the HTTP state of the local server from configuration.

use std::sync::Arc;
use std::time::Duration;

use tracon_core::attribution::HeaderLabels;
use tracon_core::config::Config;
use tracon_core::model::anthropic::AnthropicProvider;
use tracon_core::model::openai::OpenAiProvider;
use tracon_core::model::scripted::{SCRIPTED, ScriptedProvider};
use tracon_core::ports::tokio_rt;
use tracon_core::pricing::Pricing;
use tracon_core::runtime::{Runtime, RuntimeBuilder, RuntimeSettings};
use tracon_core::store::{Stores, memory};
use tracon_handlers::{AppState, HttpSettings};
use tracon_postgres::pg::{self, PgSettings};
use tracon_postgres::protect::Protection;

use crate::demo;

/// Default demo models when a provider key is set but no default model is configured.
const DEMO_OPENAI_MODEL: &str = "gpt-4o-mini";
const DEMO_ANTHROPIC_MODEL: &str = "claude-3-5-haiku-latest";

/// Reads every setting, opens the stores (Postgres when a database URL is given, memory
/// otherwise), registers providers, tools and the demo agent.
pub async fn build(config: &Config, database_url: Option<&str>) -> Result<AppState, String> {
    let stores = match database_url {
        Some(url) => {
            let settings = PgSettings::from_config(url, config).map_err(|e| e.to_string())?;
            let protection = Protection::from_config(config).map_err(|e| e.to_string())?;
            if protection.enabled() {
                tracing::info!("at-rest content protection is on");
            }
            pg::stores(&settings, protection).await.map_err(|e| e.to_string())?.0
        }
        None => memory_stores(config)?,
    };
    let runtime = build_runtime(config, stores)?;
    let http = HttpSettings::from_config(config).map_err(|e| e.to_string())?;
    Ok(AppState::new(Arc::new(runtime), http))
}

fn memory_stores(config: &Config) -> Result<Stores, String> {
    let max_runs = config
        .parse::<usize>("Tracon:Storage:Memory:MaxRuns")
        .map_err(|e| e.to_string())?
        .unwrap_or(memory::DEFAULT_MAX_RUNS);
    Ok(Stores {
        definitions: Arc::new(memory::MemoryDefinitionStore::default()),
        runs: Arc::new(memory::MemoryRunStore::with_max_runs(max_runs)),
        sessions: Arc::new(memory::MemorySessionStore::default()),
        persistent: false,
    })
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

fn build_runtime(config: &Config, stores: Stores) -> Result<Runtime, String> {
    let client = http_client()?;
    let settings = RuntimeSettings::from_config(config).map_err(|e| e.to_string())?;
    let pricing = Pricing::from_config(config).map_err(|e| e.to_string())?;
    let mut builder = RuntimeBuilder::new(tokio_rt::platform()).settings(settings).pricing(pricing).stores(stores);
    if let Some(prefix) = config.get("Tracon:Attribution:LabelHeaderPrefix") {
        builder = builder.attribution(Arc::new(HeaderLabels::new(prefix)));
    }
    builder = builder.add_provider(Arc::new(ScriptedProvider::demo()));

    let openai_key = config.first(&["Tracon:Providers:OpenAI:ApiKey", "OPENAI_API_KEY"]).map(str::to_owned);
    let anthropic_key = config.first(&["Tracon:Providers:Anthropic:ApiKey", "ANTHROPIC_API_KEY"]).map(str::to_owned);
    if let Some(key) = &openai_key {
        let base = config.first(&["Tracon:Providers:OpenAI:Endpoint", "OPENAI_BASE_URL"]).map(str::to_owned);
        builder = builder.add_provider(Arc::new(OpenAiProvider::openai(client.clone(), key.clone(), base)));
    }
    if let Some(key) = &anthropic_key {
        let base = config.first(&["Tracon:Providers:Anthropic:Endpoint", "ANTHROPIC_BASE_URL"]).map(str::to_owned);
        let mut provider = AnthropicProvider::new(client.clone(), key.clone(), base);
        if let Some(n) =
            config.parse::<u32>("Tracon:Providers:Anthropic:DefaultMaxOutputTokens").map_err(|e| e.to_string())?
        {
            provider = provider.with_default_max_output_tokens(n);
        }
        builder = builder.add_provider(Arc::new(provider));
    }
    for name in config.child_sections("Tracon:Providers:Compatible") {
        let key = |k: &str| format!("Tracon:Providers:Compatible:{name}:{k}");
        let endpoint = config.get(&key("Endpoint")).ok_or_else(|| {
            format!("Compatible provider '{name}' needs an Endpoint (Tracon__Providers__Compatible__{name}__Endpoint).")
        })?;
        let api_key = config.get(&key("ApiKey")).map(str::to_owned);
        let provider = OpenAiProvider::compatible(client.clone(), &name, endpoint, api_key)?;
        builder = builder.add_provider(Arc::new(provider));
    }

    if config.bool("Tracon:Demo:Enabled").map_err(|e| e.to_string())?.unwrap_or(true) {
        let (provider, model) = if openai_key.is_some() {
            ("openai", config.get("Tracon:Providers:OpenAI:DefaultModel").unwrap_or(DEMO_OPENAI_MODEL))
        } else if anthropic_key.is_some() {
            ("anthropic", config.get("Tracon:Providers:Anthropic:DefaultModel").unwrap_or(DEMO_ANTHROPIC_MODEL))
        } else {
            (SCRIPTED, "demo")
        };
        builder = builder
            .add_tool(demo::order_status_tool())
            .add_tool(demo::store_hours_tool())
            .add_agent(demo::agent(provider, model));
    }
    builder.build().map_err(|e| e.to_string())
}
