//! The model catalog: what the host says about each provider's models — context window,
//! capability flags, prices. Configured, never invented, and **metadata, not permission**: a
//! definition may name a model the catalog does not list.
//!
//! One flag is enforced: an agent asking for JSON output fails compilation when its model is
//! *found* here with `supportsStructuredOutput` explicitly `false` (`crate::compiler::check`).
//! The others (`supportsTools`, `supportsStreaming`, `supportsReasoning`) are advisory. The
//! context window feeds the pre-flight check and `POST /api/agents/{name}/estimate`
//! (`crate::runs::estimate`); the prices feed [`crate::pricing::Pricing`], the one place a
//! run's cost is computed.
//!
//! Configuration, per provider section (a flag or a number left out is "not known"):
//!
//! ```text
//! Tracon__Providers__OpenAI__Models__0__Id=gpt-4o-mini
//! Tracon__Providers__OpenAI__Models__0__ContextWindowTokens=128000
//! Tracon__Providers__OpenAI__Models__0__SupportsStructuredOutput=true
//! Tracon__Providers__OpenAI__Models__0__SupportsTools=true
//! Tracon__Providers__OpenAI__Models__0__SupportsStreaming=true
//! Tracon__Providers__OpenAI__Models__0__SupportsReasoning=false
//! Tracon__Providers__OpenAI__Models__0__InputPerMillion=0.15
//! Tracon__Providers__OpenAI__Models__0__OutputPerMillion=0.60
//! Tracon__Providers__OpenAI__Models__0__CachedInputPerMillion=0.075
//! ```
//!
//! The sections are [`SECTIONS`] (a section may serve two provider names: `OpenAI` is both
//! `openai` and `openai-responses`) and `Tracon:Providers:Compatible:<name>` (`<name>` and
//! `<name>-responses`). The older `Tracon:Pricing:Models:<i>:{Provider,Model,…PerMillion}`
//! entries are read into the same catalog as price-only entries, so there is one list of
//! prices; a model priced in both places is a start-up error.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::config::{Config, ConfigError};

/// Unit prices per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelPrice {
    pub input_per_million: f64,
    pub output_per_million: f64,
    pub cached_input_per_million: Option<f64>,
}

/// One model of a provider's catalog. `None` is "not configured": nothing is assumed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelDescriptor {
    /// The model id a binding's `model.model` names (compared exactly).
    pub id: String,
    /// The model's context window, in tokens: drives the pre-flight check and the estimate.
    pub context_window_tokens: Option<u64>,
    /// Enforced: explicitly `false` makes a JSON or JSON Schema `responseFormat` fail
    /// compilation.
    pub supports_structured_output: Option<bool>,
    /// Advisory only.
    pub supports_tools: Option<bool>,
    /// Advisory only.
    pub supports_streaming: Option<bool>,
    /// Advisory only.
    pub supports_reasoning: Option<bool>,
    /// What the model costs; a run's cost is `null` without it.
    pub price: Option<ModelPrice>,
}

impl ModelDescriptor {
    /// A model known by id only.
    pub fn new(id: &str) -> Self {
        Self { id: id.to_owned(), ..Self::default() }
    }

    pub fn context_window(mut self, tokens: u64) -> Self {
        self.context_window_tokens = Some(tokens);
        self
    }

    pub fn structured_output(mut self, supported: bool) -> Self {
        self.supports_structured_output = Some(supported);
        self
    }

    pub fn priced(mut self, price: ModelPrice) -> Self {
        self.price = Some(price);
        self
    }
}

/// The configuration sections that hold a catalog, and the provider names each serves.
pub const SECTIONS: &[(&str, &[&str])] = &[
    ("OpenAI", &["openai", "openai-responses"]),
    ("Anthropic", &["anthropic"]),
    ("Google", &["google"]),
    ("AzureOpenAI", &["azure-openai"]),
    ("Scripted", &["scripted"]),
];

/// Every provider's models, by lowercase provider name.
#[derive(Debug, Clone, Default)]
pub struct ModelCatalog {
    by_provider: BTreeMap<String, Vec<ModelDescriptor>>,
}

impl ModelCatalog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces, by id) a model of `provider`.
    pub fn with_model(mut self, provider: &str, model: ModelDescriptor) -> Self {
        self.insert(provider, model);
        self
    }

    fn insert(&mut self, provider: &str, model: ModelDescriptor) {
        let models = self.by_provider.entry(provider.to_ascii_lowercase()).or_default();
        match models.iter_mut().find(|m| m.id == model.id) {
            Some(existing) => *existing = model,
            None => models.push(model),
        }
    }

    /// Adds `other`'s models, replacing those with the same provider and id.
    pub fn merge(&mut self, other: ModelCatalog) {
        for (provider, models) in other.by_provider {
            for model in models {
                self.insert(&provider, model);
            }
        }
    }

    /// The models configured for `provider` (case-insensitive), in configuration order.
    pub fn models(&self, provider: &str) -> &[ModelDescriptor] {
        self.by_provider.get(&provider.to_ascii_lowercase()).map_or(&[], Vec::as_slice)
    }

    /// `provider`'s entry for `model`, when the catalog lists it.
    pub fn find(&self, provider: &str, model: &str) -> Option<&ModelDescriptor> {
        self.models(provider).iter().find(|m| m.id == model)
    }

    /// Every priced model: `(provider, model, price)`.
    pub fn prices(&self) -> impl Iterator<Item = (&str, &str, ModelPrice)> {
        self.by_provider.iter().flat_map(|(p, models)| {
            models.iter().filter_map(move |m| m.price.map(|price| (p.as_str(), m.id.as_str(), price)))
        })
    }

    /// The catalog the configuration describes (see the module documentation).
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let mut catalog = Self::new();
        let mut sections: Vec<(String, Vec<String>)> = SECTIONS
            .iter()
            .map(|(section, names)| {
                (format!("Tracon:Providers:{section}"), names.iter().map(|n| (*n).to_owned()).collect())
            })
            .collect();
        for name in config.child_sections("Tracon:Providers:Compatible") {
            sections.push((format!("Tracon:Providers:Compatible:{name}"), vec![format!("{name}-responses"), name]));
        }
        for (section, names) in sections {
            for model in section_models(config, &section)? {
                for name in &names {
                    catalog.insert(name, model.clone());
                }
            }
        }
        for (index, provider, model, price) in legacy_prices(config)? {
            let mut entry = catalog.find(&provider, &model).cloned().unwrap_or_else(|| ModelDescriptor::new(&model));
            if entry.price.is_some_and(|p| p != price) {
                return Err(ConfigError::Message(format!(
                    "Tracon:Pricing:Models:{index} prices {provider}/{model}, which its provider's Models catalog prices differently; keep one."
                )));
            }
            entry.price = Some(price);
            catalog.insert(&provider, entry);
        }
        Ok(catalog)
    }
}

/// The models of one provider section (`Tracon:Providers:OpenAI` → its `Models:<i>` entries).
fn section_models(config: &Config, section: &str) -> Result<Vec<ModelDescriptor>, ConfigError> {
    let mut out: Vec<ModelDescriptor> = Vec::new();
    let mut indices = config.child_sections(&format!("{section}:Models"));
    // `child_sections` sorts as text: 10 would come before 2.
    indices.sort_by_key(|i| (i.parse::<u64>().unwrap_or(u64::MAX), i.clone()));
    for index in indices {
        let entry = format!("{section}:Models:{index}");
        let key = |k: &str| format!("{entry}:{k}");
        let id = config.get(&key("Id")).map(str::trim).filter(|id| !id.is_empty()).ok_or_else(|| {
            ConfigError::Message(format!("{entry} needs an Id ({}).", crate::config::env_name(&key("Id"))))
        })?;
        if out.iter().any(|m| m.id == id) {
            return Err(ConfigError::Message(format!("{section}:Models lists the model '{id}' twice.")));
        }
        let context_window_tokens = match config.parse::<u64>(&key("ContextWindowTokens"))? {
            Some(0) => {
                return Err(ConfigError::Message(format!("{entry}:ContextWindowTokens must be a positive number.")));
            }
            other => other,
        };
        out.push(ModelDescriptor {
            id: id.to_owned(),
            context_window_tokens,
            supports_structured_output: config.bool(&key("SupportsStructuredOutput"))?,
            supports_tools: config.bool(&key("SupportsTools"))?,
            supports_streaming: config.bool(&key("SupportsStreaming"))?,
            supports_reasoning: config.bool(&key("SupportsReasoning"))?,
            price: price(config, &entry)?,
        });
    }
    Ok(out)
}

/// The price under `entry` (`…PerMillion` keys): none, or input and output together.
fn price(config: &Config, entry: &str) -> Result<Option<ModelPrice>, ConfigError> {
    let key = |k: &str| format!("{entry}:{k}");
    let input = config.parse::<f64>(&key("InputPerMillion"))?;
    let output = config.parse::<f64>(&key("OutputPerMillion"))?;
    let cached = config.parse::<f64>(&key("CachedInputPerMillion"))?;
    let (input, output) = match (input, output, cached) {
        (None, None, None) => return Ok(None),
        (Some(input), Some(output), _) => (input, output),
        _ => {
            return Err(ConfigError::Message(format!(
                "{entry} needs InputPerMillion and OutputPerMillion together (CachedInputPerMillion only with them)."
            )));
        }
    };
    if [Some(input), Some(output), cached].into_iter().flatten().any(|p| !p.is_finite() || p < 0.0) {
        return Err(ConfigError::Message(format!("{entry} has a negative price.")));
    }
    Ok(Some(ModelPrice { input_per_million: input, output_per_million: output, cached_input_per_million: cached }))
}

/// `Tracon:Pricing:Models:<i>`: `(index, lowercase provider, model, price)`.
fn legacy_prices(config: &Config) -> Result<Vec<(String, String, String, ModelPrice)>, ConfigError> {
    let mut out = Vec::new();
    for index in config.child_sections("Tracon:Pricing:Models") {
        let entry = format!("Tracon:Pricing:Models:{index}");
        let key = |k: &str| format!("{entry}:{k}");
        let (Some(provider), Some(model)) = (config.get(&key("Provider")), config.get(&key("Model"))) else {
            return Err(ConfigError::Message(format!("{entry} needs both Provider and Model.")));
        };
        let Some(price) = price(config, &entry)? else {
            return Err(ConfigError::Message(format!("{entry} needs InputPerMillion and OutputPerMillion.")));
        };
        out.push((index, provider.to_ascii_lowercase(), model.to_owned(), price));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Config {
        Config::from_pairs(pairs.iter().copied())
    }

    #[test]
    fn a_section_lists_its_models_with_what_was_configured_and_nothing_else() {
        let c = config(&[
            ("Tracon__Providers__OpenAI__Models__0__Id", "gpt-a"),
            ("Tracon__Providers__OpenAI__Models__0__ContextWindowTokens", "128000"),
            ("Tracon__Providers__OpenAI__Models__0__SupportsStructuredOutput", "false"),
            ("Tracon__Providers__OpenAI__Models__0__InputPerMillion", "1"),
            ("Tracon__Providers__OpenAI__Models__0__OutputPerMillion", "2"),
            ("Tracon__Providers__OpenAI__Models__1__Id", "gpt-b"),
            ("Tracon__Providers__OpenAI__Models__10__Id", "gpt-k"),
            ("Tracon__Providers__OpenAI__Models__2__Id", "gpt-c"),
        ]);
        let catalog = ModelCatalog::from_config(&c).unwrap();
        let ids: Vec<&str> = catalog.models("OpenAI").iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["gpt-a", "gpt-b", "gpt-c", "gpt-k"], "configuration order, numerically");
        let a = catalog.find("openai", "gpt-a").unwrap();
        assert_eq!(a.context_window_tokens, Some(128_000));
        assert_eq!(a.supports_structured_output, Some(false));
        assert_eq!((a.supports_tools, a.supports_streaming, a.supports_reasoning), (None, None, None));
        assert_eq!(a.price.map(|p| (p.input_per_million, p.output_per_million)), Some((1.0, 2.0)));
        assert_eq!(catalog.find("openai", "gpt-b").unwrap(), &ModelDescriptor::new("gpt-b"));
        // The section serves the Responses route too; other providers have none.
        assert_eq!(catalog.models("openai-responses").len(), 4);
        assert!(catalog.models("anthropic").is_empty());
        assert!(catalog.find("openai", "GPT-A").is_none(), "model ids compare exactly");
    }

    #[test]
    fn a_compatible_endpoint_has_its_own_catalog() {
        let c = config(&[
            ("Tracon__Providers__Compatible__ollama__Endpoint", "http://localhost:11434/v1"),
            ("Tracon__Providers__Compatible__ollama__Models__0__Id", "llama3"),
            ("Tracon__Providers__Compatible__ollama__Models__0__ContextWindowTokens", "8192"),
        ]);
        let catalog = ModelCatalog::from_config(&c).unwrap();
        assert_eq!(catalog.find("ollama", "llama3").and_then(|m| m.context_window_tokens), Some(8192));
        assert!(catalog.find("ollama-responses", "llama3").is_some());
        assert!(catalog.find("openai", "llama3").is_none());
    }

    #[test]
    fn the_older_pricing_keys_are_catalog_prices() {
        let c = config(&[
            ("Tracon__Providers__OpenAI__Models__0__Id", "gpt-a"),
            ("Tracon__Providers__OpenAI__Models__0__ContextWindowTokens", "1000"),
            ("Tracon__Pricing__Models__0__Provider", "OpenAI"),
            ("Tracon__Pricing__Models__0__Model", "gpt-a"),
            ("Tracon__Pricing__Models__0__InputPerMillion", "3"),
            ("Tracon__Pricing__Models__0__OutputPerMillion", "4"),
            ("Tracon__Pricing__Models__1__Provider", "anthropic"),
            ("Tracon__Pricing__Models__1__Model", "claude-x"),
            ("Tracon__Pricing__Models__1__InputPerMillion", "5"),
            ("Tracon__Pricing__Models__1__OutputPerMillion", "6"),
        ]);
        let catalog = ModelCatalog::from_config(&c).unwrap();
        let a = catalog.find("openai", "gpt-a").unwrap();
        assert_eq!((a.context_window_tokens, a.price.map(|p| p.input_per_million)), (Some(1000), Some(3.0)));
        let claude = catalog.find("anthropic", "claude-x").unwrap();
        assert_eq!((claude.context_window_tokens, claude.price.map(|p| p.output_per_million)), (None, Some(6.0)));
        let mut prices: Vec<(&str, &str)> = catalog.prices().map(|(p, m, _)| (p, m)).collect();
        prices.sort();
        // A price under Tracon:Pricing names its provider exactly: the Responses route is not priced.
        assert_eq!(prices, [("anthropic", "claude-x"), ("openai", "gpt-a")]);
    }

    #[test]
    fn a_model_priced_twice_differently_is_refused() {
        let c = config(&[
            ("Tracon__Providers__Anthropic__Models__0__Id", "claude-x"),
            ("Tracon__Providers__Anthropic__Models__0__InputPerMillion", "1"),
            ("Tracon__Providers__Anthropic__Models__0__OutputPerMillion", "2"),
            ("Tracon__Pricing__Models__0__Provider", "anthropic"),
            ("Tracon__Pricing__Models__0__Model", "claude-x"),
            ("Tracon__Pricing__Models__0__InputPerMillion", "9"),
            ("Tracon__Pricing__Models__0__OutputPerMillion", "2"),
        ]);
        let err = ModelCatalog::from_config(&c).unwrap_err().to_string();
        assert!(err.contains("Tracon:Pricing:Models:0") && err.contains("claude-x"), "{err}");
    }

    #[test]
    fn incomplete_or_impossible_entries_are_configuration_errors_naming_the_key() {
        for (pairs, names) in [
            (vec![("Tracon__Providers__OpenAI__Models__0__ContextWindowTokens", "10")], "Id"),
            (
                vec![
                    ("Tracon__Providers__OpenAI__Models__0__Id", "m"),
                    ("Tracon__Providers__OpenAI__Models__0__ContextWindowTokens", "0"),
                ],
                "ContextWindowTokens",
            ),
            (
                vec![
                    ("Tracon__Providers__OpenAI__Models__0__Id", "m"),
                    ("Tracon__Providers__OpenAI__Models__0__ContextWindowTokens", "lots"),
                ],
                "ContextWindowTokens",
            ),
            (
                vec![
                    ("Tracon__Providers__OpenAI__Models__0__Id", "m"),
                    ("Tracon__Providers__OpenAI__Models__0__SupportsTools", "maybe"),
                ],
                "SupportsTools",
            ),
            (
                vec![
                    ("Tracon__Providers__OpenAI__Models__0__Id", "m"),
                    ("Tracon__Providers__OpenAI__Models__0__InputPerMillion", "1"),
                ],
                "OutputPerMillion",
            ),
            (
                vec![
                    ("Tracon__Providers__OpenAI__Models__0__Id", "m"),
                    ("Tracon__Providers__OpenAI__Models__0__InputPerMillion", "-1"),
                    ("Tracon__Providers__OpenAI__Models__0__OutputPerMillion", "1"),
                ],
                "negative",
            ),
            (
                vec![
                    ("Tracon__Providers__OpenAI__Models__0__Id", "m"),
                    ("Tracon__Providers__OpenAI__Models__1__Id", "m"),
                ],
                "twice",
            ),
            (vec![("Tracon__Pricing__Models__0__Provider", "openai")], "Provider and Model"),
        ] {
            let err = ModelCatalog::from_config(&config(&pairs)).unwrap_err().to_string();
            assert!(err.contains(names), "{pairs:?}: {err}");
        }
    }
}
