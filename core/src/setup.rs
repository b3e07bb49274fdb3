//! Assembling a [`Runtime`] from configuration — what every host (local server, Lambda,
//! Worker) does at start-up, so they all read the same settings the same way.
//!
//! Providers: `scripted` always; `openai` with `OPENAI_API_KEY` (or
//! `Tracon:Providers:OpenAI:ApiKey`); `anthropic` with `ANTHROPIC_API_KEY`; named compatible
//! endpoints from `Tracon:Providers:Compatible:<name>:Endpoint|ApiKey`; each provider's model
//! catalog from its section's `Models:<i>:*` ([`crate::model::catalog`]). The demo tools are
//! registered by default (`Tracon:Demo:Tools`), the demo agent when `Tracon:Demo:Enabled`
//! (the host picks the default: on locally, off on serverless hosts).

use std::sync::Arc;

use crate::attribution::HeaderLabels;
use crate::config::Config;
use crate::demo;
use crate::model::anthropic::AnthropicProvider;
use crate::model::catalog::ModelCatalog;
use crate::model::openai::OpenAiProvider;
use crate::model::scripted::{SCRIPTED, ScriptedProvider};
use crate::ports::Platform;
use crate::pricing::Pricing;
use crate::runtime::{Runtime, RuntimeBuilder, RuntimeSettings};
use crate::stores::Stores;

/// Default demo models when a provider key is set but no default model is configured.
const DEMO_OPENAI_MODEL: &str = "gpt-4o-mini";
const DEMO_ANTHROPIC_MODEL: &str = "claude-3-5-haiku-latest";

/// What the host decides.
pub struct HostDefaults {
    /// Register the demo agent unless `Tracon:Demo:Enabled` says otherwise.
    pub demo_agent: bool,
}

/// A builder with every provider, setting and demo registration the configuration asks
/// for; the host may add its own tools and agents before `build()`.
pub fn builder_from_config(
    config: &Config,
    platform: Platform,
    stores: Stores,
    client: reqwest::Client,
    defaults: &HostDefaults,
) -> Result<RuntimeBuilder, String> {
    let settings = RuntimeSettings::from_config(config).map_err(|e| e.to_string())?;
    // The model catalog holds every configured price; the builder hands them to pricing.
    let models = ModelCatalog::from_config(config).map_err(|e| e.to_string())?;
    let pricing = Pricing::new(Pricing::configured_currency(config));
    let quotas = crate::quota::Quotas::from_config(config).map_err(|e| e.to_string())?;
    let webhooks = crate::webhooks::WebhookSettings::from_config(config).map_err(|e| e.to_string())?;
    let mut builder = RuntimeBuilder::new(platform)
        .settings(settings)
        .pricing(pricing)
        .model_catalog(models)
        .stores(stores)
        .quotas(quotas)
        .webhooks(webhooks);
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

    // Client-side tools declared in configuration: the prebuilt hosts' equivalent of
    // `add_client_tool` in code (no body runs here; the caller answers).
    for name in config.child_sections("Tracon:ClientTools") {
        let key = |k: &str| format!("Tracon:ClientTools:{name}:{k}");
        let description = config.get(&key("Description")).ok_or_else(|| {
            format!("Client-side tool '{name}' needs a Description (Tracon__ClientTools__{name}__Description).")
        })?;
        let schema = match config.get(&key("Schema")) {
            None => serde_json::json!({"type": "object", "properties": {}}),
            Some(raw) => serde_json::from_str(raw).map_err(|e| {
                format!("Client-side tool '{name}': Tracon__ClientTools__{name}__Schema is not JSON ({e}).")
            })?,
        };
        builder = builder.add_client_tool(&name, description, schema);
    }
    if config.bool("Tracon:Demo:Tools").map_err(|e| e.to_string())?.unwrap_or(true) {
        builder = builder
            .add_tool(demo::order_status_tool())
            .add_tool(demo::store_hours_tool())
            .add_tool(demo::cancel_order_tool())
            .add_tool(demo::local_time_client_tool());
        if config.bool("Tracon:Demo:Enabled").map_err(|e| e.to_string())?.unwrap_or(defaults.demo_agent) {
            let (provider, model) = if openai_key.is_some() {
                ("openai", config.get("Tracon:Providers:OpenAI:DefaultModel").unwrap_or(DEMO_OPENAI_MODEL))
            } else if anthropic_key.is_some() {
                ("anthropic", config.get("Tracon:Providers:Anthropic:DefaultModel").unwrap_or(DEMO_ANTHROPIC_MODEL))
            } else {
                (SCRIPTED, "demo")
            };
            builder = builder.add_agent(demo::agent(provider, model));
        }
    }
    Ok(builder)
}

/// [`builder_from_config`] built.
pub fn runtime_from_config(
    config: &Config,
    platform: Platform,
    stores: Stores,
    client: reqwest::Client,
    defaults: &HostDefaults,
) -> Result<Runtime, String> {
    builder_from_config(config, platform, stores, client, defaults)?.build().map_err(|e| e.to_string())
}

/// The stored triggers and webhook subscriptions whose key names a write would refuse today
/// (saved before names were partitioned by tenant, [`crate::secret_names`]), each logged as a warning that names the
/// record and the partition it should move to. They keep working for their own tenant; the
/// operator moves them (or grants the prefix). Start-up and `tracon migrate` call this.
pub async fn report_foreign_references(
    stores: &crate::stores::Stores,
    triggers: &crate::secret_names::SecretNamespace,
    webhooks: &crate::secret_names::SecretNamespace,
) -> Result<Vec<(&'static str, crate::secret_names::SecretReference)>, crate::error::StoreError> {
    let mut foreign = Vec::new();
    for (kind, namespace, references) in [
        ("trigger", triggers, stores.triggers.secret_references().await?),
        ("webhook", webhooks, stores.webhooks.secret_references().await?),
    ] {
        for r in references.into_iter().filter(|r| namespace.is_foreign(&r.tenant, &r.key_name)) {
            tracing::warn!(
                kind,
                tenant = %r.tenant,
                record = %r.record,
                key_name = %r.key_name,
                allowed_prefix = %namespace.tenant_prefix(&r.tenant),
                "a stored record names a secret key outside its tenant's partition; it keeps working for this tenant, \
                 but a write that changes the name must use the allowed prefix"
            );
            foreign.push((kind, r));
        }
    }
    Ok(foreign)
}
