//! Per-model prices and the cost snapshot a run keeps.
//!
//! Prices come from configuration only — Tracon never invents one — through the model
//! catalog ([`crate::model::catalog`]): a provider's `Models:<i>:…PerMillion`, or the older
//! spelling, which the catalog reads as well:
//!
//! ```text
//! Tracon__Pricing__Currency=USD
//! Tracon__Pricing__Models__0__Provider=openai
//! Tracon__Pricing__Models__0__Model=gpt-4o-mini
//! Tracon__Pricing__Models__0__InputPerMillion=0.15
//! Tracon__Pricing__Models__0__OutputPerMillion=0.60
//! Tracon__Pricing__Models__0__CachedInputPerMillion=0.075
//! ```
//!
//! A run's cost is a snapshot: it carries the unit prices applied, computed once when the
//! run ends, and is `null` when usage was not measured or no price is known.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::config::{Config, ConfigError};
use crate::model::Usage;
use crate::model::catalog::ModelCatalog;
pub use crate::model::catalog::ModelPrice;

/// What a run cost, with the prices that were applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostSnapshot {
    pub currency: String,
    pub input_cost: f64,
    pub output_cost: f64,
    pub total_cost: f64,
    pub input_per_million: f64,
    pub output_per_million: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_per_million: Option<f64>,
}

/// The sum of two costs in one currency (`None` once they differ: no made-up exchange); the
/// prices shown are the first's.
pub fn add_cost(total: Option<CostSnapshot>, more: Option<&CostSnapshot>) -> Option<CostSnapshot> {
    match (total, more) {
        (None, more) => more.cloned(),
        (total, None) => total,
        (Some(mut t), Some(m)) if t.currency == m.currency => {
            t.input_cost += m.input_cost;
            t.output_cost += m.output_cost;
            t.total_cost += m.total_cost;
            Some(t)
        }
        _ => None,
    }
}

/// The configured price list.
#[derive(Debug, Clone, Default)]
pub struct Pricing {
    pub currency: String,
    prices: BTreeMap<(String, String), ModelPrice>,
}

impl Pricing {
    pub fn new(currency: &str) -> Self {
        Self { currency: currency.to_owned(), prices: BTreeMap::new() }
    }

    pub fn with_price(mut self, provider: &str, model: &str, price: ModelPrice) -> Self {
        self.prices.insert((provider.to_ascii_lowercase(), model.to_owned()), price);
        self
    }

    /// The prices of the catalog the configuration describes, in `Tracon:Pricing:Currency`
    /// (`USD`).
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        Ok(Self::from_catalog(Self::configured_currency(config), &ModelCatalog::from_config(config)?))
    }

    /// `Tracon:Pricing:Currency`, `USD` when unset.
    pub fn configured_currency(config: &Config) -> &str {
        config.get("Tracon:Pricing:Currency").unwrap_or("USD")
    }

    /// Every price `catalog` holds.
    pub fn from_catalog(currency: &str, catalog: &ModelCatalog) -> Self {
        Self::new(currency).with_catalog(catalog)
    }

    /// These prices and `catalog`'s (the catalog's win for a model priced in both).
    pub fn with_catalog(self, catalog: &ModelCatalog) -> Self {
        catalog.prices().fold(self, |pricing, (provider, model, price)| pricing.with_price(provider, model, price))
    }

    /// The cost of `usage` on `provider`/`model`, or `None` when either is unknown.
    pub fn cost(&self, provider: &str, model: &str, usage: Option<&Usage>) -> Option<CostSnapshot> {
        let usage = usage?;
        let price = self.prices.get(&(provider.to_ascii_lowercase(), model.to_owned()))?;
        let cached = usage.cached_input_tokens.unwrap_or(0).min(usage.input_tokens);
        let (uncached, cached_price) = match price.cached_input_per_million {
            Some(p) => (usage.input_tokens - cached, Some(p)),
            None => (usage.input_tokens, None),
        };
        let input_cost =
            (uncached as f64 * price.input_per_million + cached_price.map_or(0.0, |p| cached as f64 * p)) / 1_000_000.0;
        let output_cost = usage.output_tokens as f64 * price.output_per_million / 1_000_000.0;
        Some(CostSnapshot {
            currency: self.currency.clone(),
            input_cost,
            output_cost,
            total_cost: input_cost + output_cost,
            input_per_million: price.input_per_million,
            output_per_million: price.output_per_million,
            cached_input_per_million: price.cached_input_per_million,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_uses_configured_prices_and_is_null_when_unknown() {
        let c = Config::from_pairs([
            ("Tracon__Pricing__Models__0__Provider", "openai"),
            ("Tracon__Pricing__Models__0__Model", "m"),
            ("Tracon__Pricing__Models__0__InputPerMillion", "2"),
            ("Tracon__Pricing__Models__0__OutputPerMillion", "8"),
            ("Tracon__Pricing__Models__0__CachedInputPerMillion", "1"),
        ]);
        let p = Pricing::from_config(&c).unwrap();
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 500_000,
            total_tokens: 1_500_000,
            cached_input_tokens: Some(200_000),
            reasoning_tokens: None,
        };
        let cost = p.cost("OpenAI", "m", Some(&usage)).unwrap();
        assert!((cost.input_cost - (0.8 * 2.0 + 0.2)).abs() < 1e-9);
        assert!((cost.output_cost - 4.0).abs() < 1e-9);
        assert_eq!(cost.currency, "USD");
        assert!(p.cost("openai", "other", Some(&usage)).is_none());
        assert!(p.cost("openai", "m", None).is_none());
    }

    #[test]
    fn incomplete_price_entries_are_configuration_errors() {
        let c = Config::from_pairs([("Tracon__Pricing__Models__0__Provider", "openai")]);
        assert!(Pricing::from_config(&c).is_err());
    }
}
