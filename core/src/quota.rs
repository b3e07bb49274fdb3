//! Quotas: runs, tokens or cost per day or month, for a tenant or one agent, checked before a
//! run starts.
//!
//! Enabled with an empty rule set: nothing is refused until a rule exists. What a rule
//! counts is what the run records already hold — the runs started in the current period
//! (UTC day or month) and their measured tokens and cost — so counting after a run costs
//! nothing extra and every host counts the same way. The check reads one aggregate per
//! applicable rule; a run that is still going counts as a run, and its tokens once it ends.
//!
//! Rules come from configuration, numbered from 0:
//!
//! ```text
//! Tracon__Quotas__Rules__0__Name=daily-runs
//! Tracon__Quotas__Rules__0__Metric=Runs          # Runs | Tokens | Cost
//! Tracon__Quotas__Rules__0__Limit=1000
//! Tracon__Quotas__Rules__0__Period=Day           # Day | Month (UTC)
//! Tracon__Quotas__Rules__0__Agent=support        # optional: one agent; otherwise the tenant
//! Tracon__Quotas__Rules__0__Tenant=acme          # optional: one tenant; otherwise every tenant
//! Tracon__Quotas__Rules__0__Currency=USD         # Cost only (default USD)
//! ```

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};
use serde::Serialize;

use crate::config::{Config, ConfigError};
use crate::names::TenantId;
use crate::store::{RunFilter, RunStore, StoreError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Metric {
    Runs,
    Tokens,
    Cost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Period {
    Day,
    Month,
}

impl Period {
    /// The period containing `now`: its start and its end (the reset time).
    pub fn bounds(self, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        let day = now.date_naive();
        let (start, end) = match self {
            Period::Day => (day, day + Duration::days(1)),
            Period::Month => {
                let first = NaiveDate::from_ymd_opt(day.year(), day.month(), 1).unwrap_or(day);
                let next = if day.month() == 12 {
                    NaiveDate::from_ymd_opt(day.year() + 1, 1, 1)
                } else {
                    NaiveDate::from_ymd_opt(day.year(), day.month() + 1, 1)
                };
                (first, next.unwrap_or(first))
            }
        };
        let at = |d: NaiveDate| Utc.from_utc_datetime(&d.and_hms_opt(0, 0, 0).unwrap_or_default());
        (at(start), at(end))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct QuotaRule {
    pub name: String,
    pub metric: Metric,
    pub limit: f64,
    pub period: Period,
    /// One agent; `None` counts the whole tenant.
    pub agent: Option<String>,
    /// One tenant; `None` applies to every tenant (each counted on its own).
    pub tenant: Option<TenantId>,
    /// Cost rules: the currency counted.
    pub currency: String,
}

/// A quota a run would cross.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaExceeded {
    pub quota: String,
    pub metric: Metric,
    pub limit: f64,
    pub used: f64,
    pub resets_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Quotas {
    pub rules: Vec<QuotaRule>,
}

impl Quotas {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let mut rules = Vec::new();
        for i in 0.. {
            let key = |k: &str| format!("Tracon:Quotas:Rules:{i}:{k}");
            let Some(name) = config.get(&key("Name")) else { break };
            let bad = |what: &str| ConfigError::Message(format!("quota rule {i} ('{name}'): {what}"));
            let metric = match config.get(&key("Metric")).unwrap_or("Runs") {
                m if m.eq_ignore_ascii_case("runs") => Metric::Runs,
                m if m.eq_ignore_ascii_case("tokens") => Metric::Tokens,
                m if m.eq_ignore_ascii_case("cost") => Metric::Cost,
                _ => return Err(bad("Metric is Runs, Tokens or Cost")),
            };
            let period = match config.get(&key("Period")).unwrap_or("Day") {
                p if p.eq_ignore_ascii_case("day") => Period::Day,
                p if p.eq_ignore_ascii_case("month") => Period::Month,
                _ => return Err(bad("Period is Day or Month")),
            };
            let limit = config
                .get(&key("Limit"))
                .and_then(|l| l.parse::<f64>().ok())
                .filter(|l| l.is_finite() && *l >= 0.0)
                .ok_or_else(|| bad("Limit is a number, 0 or more"))?;
            let tenant = config
                .get(&key("Tenant"))
                .map(TenantId::parse)
                .transpose()
                .map_err(|e| bad(&format!("Tenant: {}", e.0)))?;
            rules.push(QuotaRule {
                name: name.to_owned(),
                metric,
                limit,
                period,
                agent: config.get(&key("Agent")).map(str::to_owned),
                tenant,
                currency: config.get(&key("Currency")).unwrap_or("USD").to_owned(),
            });
        }
        Ok(Self { rules })
    }

    /// The first rule a new run of `agent` in `tenant` would cross at `now`, if any.
    pub async fn check(
        &self,
        runs: &dyn RunStore,
        tenant: &TenantId,
        agent: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<QuotaExceeded>, StoreError> {
        for rule in &self.rules {
            if rule.tenant.as_ref().is_some_and(|t| t != tenant) || rule.agent.as_deref().is_some_and(|a| a != agent) {
                continue;
            }
            let (start, end) = rule.period.bounds(now);
            let filter =
                RunFilter { agent: rule.agent.clone(), from: Some(start), to: Some(end), ..RunFilter::default() };
            let stats = runs.stats(tenant, &filter).await?;
            let used = match rule.metric {
                Metric::Runs => stats.total_runs as f64,
                Metric::Tokens => stats.total_tokens as f64,
                Metric::Cost => stats
                    .cost
                    .iter()
                    .filter(|(currency, _)| currency.eq_ignore_ascii_case(&rule.currency))
                    .map(|(_, v)| *v)
                    .sum(),
            };
            // A run is refused when the quota is used up: the next run would exceed it. A
            // use that is not a number refuses too (fail closed).
            if used.is_nan() || used >= rule.limit {
                return Ok(Some(QuotaExceeded {
                    quota: rule.name.clone(),
                    metric: rule.metric,
                    limit: rule.limit,
                    used,
                    resets_at: end,
                }));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_utc_days_and_months_and_end_at_the_reset() {
        let now = Utc.with_ymd_and_hms(2026, 12, 31, 23, 59, 59).unwrap();
        assert_eq!(
            Period::Day.bounds(now),
            (Utc.with_ymd_and_hms(2026, 12, 31, 0, 0, 0).unwrap(), Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap())
        );
        assert_eq!(
            Period::Month.bounds(now),
            (Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(), Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap())
        );
    }

    #[test]
    fn rules_are_read_from_numbered_settings_and_bad_ones_are_refused() {
        let config =
            |pairs: &[(&str, &str)]| Config::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let q = Quotas::from_config(&config(&[
            ("Tracon__Quotas__Rules__0__Name", "daily"),
            ("Tracon__Quotas__Rules__0__Limit", "100"),
            ("Tracon__Quotas__Rules__1__Name", "spend"),
            ("Tracon__Quotas__Rules__1__Metric", "Cost"),
            ("Tracon__Quotas__Rules__1__Limit", "25.5"),
            ("Tracon__Quotas__Rules__1__Period", "Month"),
            ("Tracon__Quotas__Rules__1__Agent", "support"),
        ]))
        .unwrap();
        assert_eq!(q.rules.len(), 2);
        assert_eq!((q.rules[0].metric, q.rules[0].period, q.rules[0].limit), (Metric::Runs, Period::Day, 100.0));
        assert_eq!((q.rules[1].metric, q.rules[1].agent.as_deref()), (Metric::Cost, Some("support")));
        for bad in [("Limit", "-1"), ("Limit", "lots"), ("Metric", "Calls"), ("Period", "Week")] {
            let mut pairs = vec![("Tracon__Quotas__Rules__0__Name", "x"), ("Tracon__Quotas__Rules__0__Limit", "1")];
            let key = format!("Tracon__Quotas__Rules__0__{}", bad.0);
            pairs.retain(|(k, _)| *k != key);
            pairs.push((key.as_str(), bad.1));
            assert!(Quotas::from_config(&config(&pairs)).is_err(), "{bad:?}");
        }
        assert!(Quotas::from_config(&config(&[])).unwrap().rules.is_empty(), "no rule, nothing refused");
    }
}
