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
//!
//! Money is [`Money`]: whole nano-units (10⁻⁹) of the currency, so costs add up exactly —
//! `0.00005 + 0.00008` is `0.00013`, never `0.00013000000000000002` — and each amount is
//! written as a JSON number with at most nine decimals. Prices stay as configured.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::config::{Config, ConfigError};
use crate::model::Usage;
use crate::model::catalog::ModelCatalog;
pub use crate::model::catalog::ModelPrice;

/// An amount of money in whole nano-units (10⁻⁹) of its currency: sums are exact, and it
/// reads and writes as a JSON number of units rounded to nine decimals (`0.00013`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money(i64);

impl Money {
    pub const ZERO: Money = Money(0);

    /// Nano-units in one unit of the currency.
    pub const NANOS_PER_UNIT: i64 = 1_000_000_000;

    pub const fn from_nanos(nanos: i64) -> Self {
        Self(nanos)
    }

    pub const fn nanos(self) -> i64 {
        self.0
    }

    /// The amount nearest to `units` (a configured price, a stored number), rounded to the
    /// nano-unit; `None` for a number that is not finite or out of range.
    pub fn from_units(units: f64) -> Option<Self> {
        let nanos = (units * Self::NANOS_PER_UNIT as f64).round();
        (nanos.is_finite() && nanos.abs() < i64::MAX as f64).then_some(Self(nanos as i64))
    }

    /// The amount in units, the nearest `f64` (what JSON carries).
    pub fn units(self) -> f64 {
        self.0 as f64 / Self::NANOS_PER_UNIT as f64
    }

    /// The cost of `tokens` at `per_million` nano-units per million tokens, rounded half away
    /// from zero to the nano-unit.
    fn of_tokens(tokens: u64, per_million: Money) -> Money {
        Money::rounded(i128::from(tokens) * i128::from(per_million.0), 1_000_000)
    }

    /// `numerator / denominator` nano-units, rounded half away from zero (saturating).
    fn rounded(numerator: i128, denominator: i128) -> Money {
        let half = denominator / 2;
        let quotient = if numerator >= 0 { (numerator + half) / denominator } else { (numerator - half) / denominator };
        Money(i64::try_from(quotient).unwrap_or(if quotient > 0 { i64::MAX } else { i64::MIN }))
    }
}

impl std::ops::Add for Money {
    type Output = Money;
    fn add(self, other: Money) -> Money {
        Money(self.0.saturating_add(other.0))
    }
}

impl std::ops::AddAssign for Money {
    fn add_assign(&mut self, other: Money) {
        *self = *self + other;
    }
}

impl std::iter::Sum for Money {
    fn sum<I: Iterator<Item = Money>>(amounts: I) -> Money {
        amounts.fold(Money::ZERO, |total, m| total + m)
    }
}

impl Serialize for Money {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The nearest f64 to a whole number of nano-units over 10⁹ prints as that decimal.
        serializer.serialize_f64(self.units())
    }
}

impl<'de> Deserialize<'de> for Money {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Older records hold float sums (`0.00013000000000000002`): they read back rounded.
        let units = f64::deserialize(deserializer)?;
        Money::from_units(units).ok_or_else(|| serde::de::Error::custom("an amount of money out of range"))
    }
}

/// What a run cost, with the prices that were applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostSnapshot {
    pub currency: String,
    #[schema(value_type = f64)]
    pub input_cost: Money,
    #[schema(value_type = f64)]
    pub output_cost: Money,
    #[schema(value_type = f64)]
    pub total_cost: Money,
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
        // In nano-units per million tokens: a token's share is computed exactly, rounded once.
        let per_million = |p: f64| Money::from_units(p).unwrap_or(Money::ZERO);
        let input_cost = Money::of_tokens(uncached, per_million(price.input_per_million))
            + cached_price.map_or(Money::ZERO, |p| Money::of_tokens(cached, per_million(p)));
        let output_cost = Money::of_tokens(usage.output_tokens, per_million(price.output_per_million));
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
        assert_eq!(cost.input_cost, Money::from_units(0.8 * 2.0 + 0.2).unwrap());
        assert_eq!(cost.output_cost, Money::from_units(4.0).unwrap());
        assert_eq!(cost.currency, "USD");
        assert!(p.cost("openai", "other", Some(&usage)).is_none());
        assert!(p.cost("openai", "m", None).is_none());
    }

    #[test]
    fn costs_are_exact_and_written_as_clean_decimals() {
        // In f64: 100 × 0.5 / 10⁶ + 40 × 2 / 10⁶ = 0.00013000000000000002.
        let p = Pricing::new("USD").with_price(
            "openai",
            "m",
            ModelPrice { input_per_million: 0.5, output_per_million: 2.0, cached_input_per_million: None },
        );
        let usage = Usage { input_tokens: 100, output_tokens: 40, total_tokens: 140, ..Usage::default() };
        let cost = p.cost("openai", "m", Some(&usage)).unwrap();
        assert_eq!(cost.total_cost, Money::from_nanos(130_000));
        let json = serde_json::to_string(&cost).unwrap();
        assert!(json.contains(r#""totalCost":0.00013"#) && !json.contains("0000000"), "{json}");
        // Sums stay exact: 0.1 + 0.2 is 0.3, three of 0.00013 are 0.00039.
        let tenth = Money::from_units(0.1).unwrap();
        assert_eq!(serde_json::to_string(&(tenth + Money::from_units(0.2).unwrap())).unwrap(), "0.3");
        let three = add_cost(add_cost(Some(cost.clone()), Some(&cost)), Some(&cost)).unwrap();
        assert_eq!(serde_json::to_string(&three.total_cost).unwrap(), "0.00039");
        // A float-noisy amount stored before reads back rounded to the nano-unit.
        let stored: Money = serde_json::from_str("0.00013000000000000002").unwrap();
        assert_eq!(stored, Money::from_nanos(130_000));
        // A token's share below a nano-unit is kept until the sum is rounded.
        let cheap = Pricing::new("USD").with_price(
            "openai",
            "m",
            ModelPrice { input_per_million: 0.0375, output_per_million: 0.0, cached_input_per_million: None },
        );
        let usage = Usage { input_tokens: 3, output_tokens: 0, total_tokens: 3, ..Usage::default() };
        assert_eq!(
            cheap.cost("openai", "m", Some(&usage)).unwrap().input_cost,
            Money::from_nanos(113),
            "112.5 rounds up"
        );
    }

    #[test]
    fn incomplete_price_entries_are_configuration_errors() {
        let c = Config::from_pairs([("Tracon__Pricing__Models__0__Provider", "openai")]);
        assert!(Pricing::from_config(&c).is_err());
    }
}
