//! Assembling a [`Runtime`] from configuration — what every host (local server, Lambda,
//! Worker) does at start-up, so they all read the same settings the same way.
//!
//! Providers ([`providers_from_config`]): `scripted` always; `openai` and `openai-responses`
//! with `OPENAI_API_KEY` (or `Tracon:Providers:OpenAI:ApiKey`); `anthropic` with
//! `ANTHROPIC_API_KEY`; `google` with `Tracon:Providers:Google:ApiKey` (or `GOOGLE_API_KEY`,
//! then `GEMINI_API_KEY`, the Google SDK's order); `azure-openai` with
//! `Tracon:Providers:AzureOpenAI:Endpoint` and `:ApiKey` (`:ApiVersion` optional); named
//! compatible endpoints from `Tracon:Providers:Compatible:<name>:Endpoint|ApiKey`, plus
//! `{name}-responses` when `:EnableResponsesSurface` is true. A provider whose configuration
//! is started but incomplete (an endpoint without its key) stops the host. Each provider's
//! model catalog comes from its section's `Models:<i>:*` ([`crate::model::catalog`]). The demo tools are
//! registered by default (`Tracon:Demo:Tools`), the demo agent when `Tracon:Demo:Enabled`
//! (the host picks the default: on locally, off on serverless hosts).

use std::sync::Arc;

use crate::attribution::HeaderLabels;
use crate::config::Config;
use crate::demo;
use crate::model::ModelProvider;
use crate::model::anthropic::AnthropicProvider;
use crate::model::azure::AzureOpenAiProvider;
use crate::model::catalog::ModelCatalog;
use crate::model::google::GoogleProvider;
use crate::model::openai::{OpenAiProvider, StructuredSupport};
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
    let provider_keys = crate::model::byok::ProviderKeySettings::from_config(config).map_err(|e| e.to_string())?;
    let mcp = crate::mcp::McpSettings::from_config(config).map_err(|e| e.to_string())?;
    let mut builder = RuntimeBuilder::new(platform)
        .settings(settings)
        .pricing(pricing)
        .model_catalog(models)
        .stores(stores)
        .quotas(quotas)
        .webhooks(webhooks)
        .provider_keys(provider_keys)
        .mcp(mcp);
    if let Some(prefix) = config.get("Tracon:Attribution:LabelHeaderPrefix") {
        builder = builder.attribution(Arc::new(HeaderLabels::new(prefix)));
    }
    for provider in providers_from_config(config, &client)? {
        builder = builder.add_provider(provider);
    }
    let openai_key = config.first(OPENAI_KEY);
    let anthropic_key = config.first(ANTHROPIC_KEY);

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
        let display = config.get(&key("DisplayName")).unwrap_or_default();
        builder = builder.add_tool(
            crate::tools::ToolRegistration::client(&name, description, schema).map(|t| t.display_name(display)),
        );
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

const OPENAI_KEY: &[&str] = &["Tracon:Providers:OpenAI:ApiKey", "OPENAI_API_KEY"];
const ANTHROPIC_KEY: &[&str] = &["Tracon:Providers:Anthropic:ApiKey", "ANTHROPIC_API_KEY"];
/// The Google SDK reads `GOOGLE_API_KEY` before `GEMINI_API_KEY`; so does Tracon.
const GOOGLE_KEY: &[&str] = &["Tracon:Providers:Google:ApiKey", "GOOGLE_API_KEY", "GEMINI_API_KEY"];

/// The model providers the configuration asks for, `scripted` first. Registering the same
/// name twice is left to the registry, which refuses it at build time.
pub fn providers_from_config(config: &Config, client: &reqwest::Client) -> Result<Vec<Arc<dyn ModelProvider>>, String> {
    let mut out: Vec<Arc<dyn ModelProvider>> = vec![Arc::new(ScriptedProvider::demo())];
    if let Some(key) = config.first(OPENAI_KEY) {
        let base = config.first(&["Tracon:Providers:OpenAI:Endpoint", "OPENAI_BASE_URL"]).map(str::to_owned);
        let openai = OpenAiProvider::openai(client.clone(), key.to_owned(), base);
        // Both official surfaces, always: the spec's EnableResponsesSurface is for compatible
        // endpoints only.
        out.push(Arc::new(openai.responses_surface()));
        out.push(Arc::new(openai));
    }
    if let Some(key) = config.first(ANTHROPIC_KEY) {
        let base = config.first(&["Tracon:Providers:Anthropic:Endpoint", "ANTHROPIC_BASE_URL"]).map(str::to_owned);
        let mut provider = AnthropicProvider::new(client.clone(), key.to_owned(), base);
        if let Some(n) =
            config.parse::<u32>("Tracon:Providers:Anthropic:DefaultMaxOutputTokens").map_err(|e| e.to_string())?
        {
            provider = provider.with_default_max_output_tokens(n);
        }
        out.push(Arc::new(provider));
    }
    let google_endpoint = config.get("Tracon:Providers:Google:Endpoint").map(str::to_owned);
    match config.first(GOOGLE_KEY) {
        Some(key) => out.push(Arc::new(GoogleProvider::new(client.clone(), key.to_owned(), google_endpoint)?)),
        None if google_endpoint.is_some() => {
            return Err("The google provider has an Endpoint but no key (Tracon__Providers__Google__ApiKey, \
                 GOOGLE_API_KEY or GEMINI_API_KEY)."
                .to_owned());
        }
        None => {}
    }
    let azure = |k: &str| config.get(&format!("Tracon:Providers:AzureOpenAI:{k}"));
    match (azure("Endpoint"), azure("ApiKey")) {
        (Some(endpoint), Some(key)) => {
            let version = azure("ApiVersion").map(str::to_owned);
            out.push(Arc::new(AzureOpenAiProvider::new(client.clone(), endpoint, key.to_owned(), version)?));
        }
        (None, None) if azure("ApiVersion").is_none() => {}
        (endpoint, _) => {
            let missing = if endpoint.is_none() { "Endpoint" } else { "ApiKey" };
            return Err(format!(
                "The azure-openai provider needs an {missing} (Tracon__Providers__AzureOpenAI__{missing})."
            ));
        }
    }
    for name in config.child_sections("Tracon:Providers:Compatible") {
        let key = |k: &str| format!("Tracon:Providers:Compatible:{name}:{k}");
        let endpoint = config.get(&key("Endpoint")).ok_or_else(|| {
            format!("Compatible provider '{name}' needs an Endpoint (Tracon__Providers__Compatible__{name}__Endpoint).")
        })?;
        let api_key = config.get(&key("ApiKey")).map(str::to_owned);
        let structured = match config.get(&key("StructuredOutput")) {
            None => StructuredSupport::default(),
            Some(v) => StructuredSupport::parse(v).ok_or_else(|| {
                format!("Tracon__Providers__Compatible__{name}__StructuredOutput is JsonSchema, JsonObject or Instructions, not '{v}'.")
            })?,
        };
        let provider =
            OpenAiProvider::compatible(client.clone(), &name, endpoint, api_key)?.with_structured_support(structured);
        // Only a server that implements /responses gets the second route; off by default.
        if config.bool(&key("EnableResponsesSurface")).map_err(|e| e.to_string())?.unwrap_or(false) {
            out.push(Arc::new(provider.responses_surface()));
        }
        out.push(Arc::new(provider));
    }
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(pairs: &[(&str, &str)]) -> Result<Vec<String>, String> {
        let config = Config::from_pairs(pairs.iter().copied());
        let providers = providers_from_config(&config, &reqwest::Client::new())?;
        let mut names: Vec<String> = providers.iter().map(|p| p.name().to_owned()).collect();
        names.sort();
        Ok(names)
    }

    #[test]
    fn openai_registers_both_surfaces_and_a_compatible_endpoint_only_chat_unless_enabled() {
        assert_eq!(names(&[]).unwrap(), ["scripted"]);
        assert_eq!(names(&[("OPENAI_API_KEY", "sk-test")]).unwrap(), ["openai", "openai-responses", "scripted"]);
        // EnableResponsesSurface does not concern the official endpoint.
        assert_eq!(
            names(&[
                ("Tracon__Providers__OpenAI__ApiKey", "sk"),
                ("Tracon__Providers__OpenAI__EnableResponsesSurface", "false")
            ])
            .unwrap(),
            ["openai", "openai-responses", "scripted"]
        );
        let ollama = ("Tracon__Providers__Compatible__ollama__Endpoint", "http://localhost:11434/v1");
        assert_eq!(names(&[ollama]).unwrap(), ["ollama", "scripted"]);
        assert_eq!(
            names(&[ollama, ("Tracon__Providers__Compatible__ollama__EnableResponsesSurface", "false")]).unwrap(),
            ["ollama", "scripted"]
        );
        assert_eq!(
            names(&[ollama, ("Tracon:Providers:Compatible:ollama:EnableResponsesSurface", "true")]).unwrap(),
            ["ollama", "ollama-responses", "scripted"]
        );
        let err =
            names(&[ollama, ("Tracon__Providers__Compatible__ollama__EnableResponsesSurface", "maybe")]).unwrap_err();
        assert!(err.contains("EnableResponsesSurface"), "{err}");
    }

    #[test]
    fn google_registers_from_any_of_its_keys_and_refuses_an_endpoint_without_one() {
        for key in ["Tracon__Providers__Google__ApiKey", "GOOGLE_API_KEY", "GEMINI_API_KEY"] {
            assert_eq!(names(&[(key, "AIza-test")]).unwrap(), ["google", "scripted"], "{key}");
        }
        assert_eq!(
            names(&[("GEMINI_API_KEY", "AIza-test"), ("Tracon__Providers__Google__Endpoint", "http://127.0.0.1:9")])
                .unwrap(),
            ["google", "scripted"]
        );
        let err = names(&[("Tracon__Providers__Google__Endpoint", "http://127.0.0.1:9")]).unwrap_err();
        assert!(err.contains("GEMINI_API_KEY") && !err.contains("127.0.0.1"), "{err}");
        assert!(names(&[("GEMINI_API_KEY", "k"), ("Tracon__Providers__Google__Endpoint", "not a url")]).is_err());
    }

    #[test]
    fn azure_needs_an_absolute_endpoint_and_a_key() {
        let endpoint = ("Tracon__Providers__AzureOpenAI__Endpoint", "https://my-resource.openai.azure.com/");
        let key = ("Tracon__Providers__AzureOpenAI__ApiKey", "azure-secret");
        assert_eq!(names(&[endpoint, key]).unwrap(), ["azure-openai", "scripted"]);
        assert_eq!(
            names(&[endpoint, key, ("Tracon__Providers__AzureOpenAI__ApiVersion", "2025-04-01-preview")]).unwrap(),
            ["azure-openai", "scripted"]
        );
        let err = names(&[endpoint]).unwrap_err();
        assert!(err.contains("Tracon__Providers__AzureOpenAI__ApiKey"), "{err}");
        let err = names(&[key]).unwrap_err();
        assert!(err.contains("Tracon__Providers__AzureOpenAI__Endpoint") && !err.contains("azure-secret"), "{err}");
        let err =
            names(&[("Tracon__Providers__AzureOpenAI__Endpoint", "my-resource.openai.azure.com"), key]).unwrap_err();
        assert!(err.contains("absolute"), "{err}");
    }
}
