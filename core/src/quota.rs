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
use crate::error::StoreError;
use crate::names::{RunId, TenantId};
use crate::runs::store::{RunFilter, RunStore};
use crate::sync::lock;
use std::sync::Mutex;

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

#[derive(Debug, Clone, PartialEq)]
pub struct Quotas {
    pub rules: Vec<QuotaRule>,
    /// `Tracon:Quotas:ThresholdPercents` (`80,100`): a notice as the counter crosses each,
    /// once per period. Empty (the setting `none`) turns the notices off.
    pub threshold_percents: Vec<u32>,
    /// `Tracon:Quotas:PublishThresholdToRunStream` (off): also write the notice into the
    /// triggering run's own stream, before its terminal event.
    pub publish_to_run_stream: bool,
}

impl Default for Quotas {
    fn default() -> Self {
        Self { rules: Vec::new(), threshold_percents: vec![80, 100], publish_to_run_stream: false }
    }
}

/// A quota counter crossed one of the configured percentages.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThresholdNotice {
    /// Stable for one quota, period and threshold (for deduplication).
    pub notice_id: String,
    pub tenant_id: String,
    pub run_id: RunId,
    pub user_id: Option<String>,
    pub quota: String,
    pub metric: Metric,
    pub period: Period,
    pub limit: f64,
    pub consumption: f64,
    /// The percentage crossed.
    pub threshold: u32,
    pub resets_at: DateTime<Utc>,
}

/// The custom event type of a notice in a run's stream.
pub const THRESHOLD_EVENT: &str = "tracon.quota.threshold";

/// Claims a threshold for notification: `true` for exactly one caller per tenant, quota,
/// period and threshold — across restarts and instances.
#[async_trait::async_trait]
pub trait QuotaNoticeStore: Send + Sync {
    async fn claim(
        &self,
        tenant: &TenantId,
        quota: &str,
        period_start: DateTime<Utc>,
        threshold: u32,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
}

/// Receives each claimed notice (the webhook publisher plugs in here). A notice stops
/// nothing: `429` remains the only refusal.
#[async_trait::async_trait]
pub trait QuotaNoticeSink: Send + Sync {
    async fn notify(&self, notice: &ThresholdNotice);
}

/// What the run that may cross a threshold consumed itself (its row does not carry it yet).
#[derive(Debug, Clone, Default)]
pub struct RunConsumption {
    pub tokens: u64,
    pub cost: Option<(String, crate::pricing::Money)>,
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
        let threshold_percents = match config.get("Tracon:Quotas:ThresholdPercents") {
            // An empty setting is no setting (configuration ignores empty values): `none`
            // is the empty list.
            Some(list) if list.trim().eq_ignore_ascii_case("none") => Some(Vec::new()),
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| p.parse::<u32>().ok().filter(|p| (1..=1000).contains(p)))
                .collect::<Option<Vec<u32>>>(),
            None => {
                let children = config.child_sections("Tracon:Quotas:ThresholdPercents");
                if children.is_empty() {
                    Some(Self::default().threshold_percents)
                } else {
                    children
                        .iter()
                        .map(|c| {
                            config
                                .get(&format!("Tracon:Quotas:ThresholdPercents:{c}"))
                                .and_then(|p| p.trim().parse::<u32>().ok())
                                .filter(|p| (1..=1000).contains(p))
                        })
                        .collect()
                }
            }
        };
        let mut threshold_percents = threshold_percents.ok_or_else(|| {
            ConfigError::Message(
                "Tracon__Quotas__ThresholdPercents is a list of whole percentages from 1 to 1000 (\"80,100\"; \"none\" turns the notices off).".into(),
            )
        })?;
        threshold_percents.sort_unstable();
        threshold_percents.dedup();
        let publish_to_run_stream = config.bool("Tracon:Quotas:PublishThresholdToRunStream")?.unwrap_or(false);
        Ok(Self { rules, threshold_percents, publish_to_run_stream })
    }

    /// Thresholds the run `run` crossed (its own consumption added to what the records
    /// hold), each claimed so it is announced once per period. A store failure is logged
    /// and announces nothing.
    #[allow(clippy::too_many_arguments)]
    pub async fn crossed(
        &self,
        runs: &dyn RunStore,
        claims: &dyn QuotaNoticeStore,
        tenant: &TenantId,
        agent: &str,
        run: RunId,
        user: Option<&str>,
        own: &RunConsumption,
        now: DateTime<Utc>,
    ) -> Vec<ThresholdNotice> {
        let mut notices = Vec::new();
        if self.threshold_percents.is_empty() {
            return notices;
        }
        for rule in self.applicable(tenant, agent) {
            let (start, end) = rule.period.bounds(now);
            let used = match self.used(runs, tenant, rule, now).await {
                Ok(u) => u,
                Err(e) => {
                    tracing::warn!(quota = %rule.name, error = ?e, "could not read a quota's use for its threshold notices");
                    continue;
                }
            };
            let used = match rule.metric {
                Metric::Runs => used,
                Metric::Tokens => used + own.tokens as f64,
                // Money adds up in nano-units: `used` came from one, so it converts back exactly.
                Metric::Cost => own
                    .cost
                    .as_ref()
                    .filter(|(c, _)| c.eq_ignore_ascii_case(&rule.currency))
                    .and_then(|(_, v)| crate::pricing::Money::from_units(used).map(|u| (u + *v).units()))
                    .unwrap_or(used),
            };
            if rule.limit <= 0.0 || !used.is_finite() {
                continue;
            }
            for &threshold in &self.threshold_percents {
                if used < rule.limit * f64::from(threshold) / 100.0 {
                    break;
                }
                match claims.claim(tenant, &rule.name, start, threshold, now).await {
                    Ok(true) => notices.push(ThresholdNotice {
                        notice_id: notice_id(tenant, &rule.name, start, threshold),
                        tenant_id: tenant.as_str().to_owned(),
                        run_id: run,
                        user_id: user.map(str::to_owned),
                        quota: rule.name.clone(),
                        metric: rule.metric,
                        period: rule.period,
                        limit: rule.limit,
                        consumption: used,
                        threshold,
                        resets_at: end,
                    }),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(quota = %rule.name, threshold, error = ?e, "could not claim a quota threshold notice");
                    }
                }
            }
        }
        notices
    }

    fn applicable<'a>(&'a self, tenant: &'a TenantId, agent: &'a str) -> impl Iterator<Item = &'a QuotaRule> + 'a {
        self.rules.iter().filter(move |r| {
            r.tenant.as_ref().is_none_or(|t| t == tenant) && r.agent.as_deref().is_none_or(|a| a == agent)
        })
    }

    /// What the records hold for `rule` in the period around `now`.
    async fn used(
        &self,
        runs: &dyn RunStore,
        tenant: &TenantId,
        rule: &QuotaRule,
        now: DateTime<Utc>,
    ) -> Result<f64, StoreError> {
        let (start, end) = rule.period.bounds(now);
        let filter = RunFilter { agent: rule.agent.clone(), from: Some(start), to: Some(end), ..RunFilter::default() };
        let stats = runs.stats(tenant, &filter).await?;
        Ok(match rule.metric {
            Metric::Runs => stats.total_runs as f64,
            Metric::Tokens => stats.total_tokens as f64,
            Metric::Cost => stats
                .cost
                .iter()
                .filter(|(currency, _)| currency.eq_ignore_ascii_case(&rule.currency))
                .map(|(_, v)| *v)
                .sum::<crate::pricing::Money>()
                .units(),
        })
    }

    /// The first rule a new run of `agent` in `tenant` would cross at `now`, if any.
    pub async fn check(
        &self,
        runs: &dyn RunStore,
        tenant: &TenantId,
        agent: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<QuotaExceeded>, StoreError> {
        for rule in self.applicable(tenant, agent) {
            let (_, end) = rule.period.bounds(now);
            let used = self.used(runs, tenant, rule, now).await?;
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

/// Stable per tenant, quota, period and threshold.
fn notice_id(tenant: &TenantId, quota: &str, period_start: DateTime<Utc>, threshold: u32) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{}\n{quota}\n{}\n{threshold}", tenant.as_str(), period_start.timestamp()));
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

// ---- memory --------------------------------------------------------------------------------

/// One announced threshold: tenant, quota, period start, percentage.
type NoticeKey = (TenantId, String, DateTime<Utc>, u32);

/// Thresholds already announced.
#[derive(Default)]
pub struct MemoryQuotaNoticeStore {
    claimed: Mutex<std::collections::HashSet<NoticeKey>>,
}

#[async_trait::async_trait]
impl crate::quota::QuotaNoticeStore for MemoryQuotaNoticeStore {
    async fn claim(
        &self,
        tenant: &TenantId,
        quota: &str,
        period_start: DateTime<Utc>,
        threshold: u32,
        _at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Ok(lock(&self.claimed).insert((tenant.clone(), quota.to_owned(), period_start, threshold)))
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

    #[test]
    fn threshold_percents_default_to_80_and_100_and_an_empty_list_turns_them_off() {
        let config =
            |pairs: &[(&str, &str)]| Config::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let percents = |pairs: &[(&str, &str)]| Quotas::from_config(&config(pairs)).map(|q| q.threshold_percents);
        assert_eq!(percents(&[]).unwrap(), [80, 100]);
        assert_eq!(percents(&[("Tracon__Quotas__ThresholdPercents", "100, 50,50")]).unwrap(), [50, 100]);
        assert!(percents(&[("Tracon__Quotas__ThresholdPercents", "None")]).unwrap().is_empty());
        assert_eq!(percents(&[("Tracon__Quotas__ThresholdPercents", "")]).unwrap(), [80, 100], "empty is unset");
        assert_eq!(
            percents(&[("Tracon__Quotas__ThresholdPercents__0", "90"), ("Tracon__Quotas__ThresholdPercents__1", "75")])
                .unwrap(),
            [75, 90]
        );
        for bad in ["eighty", "0", "80,x", "-5"] {
            assert!(percents(&[("Tracon__Quotas__ThresholdPercents", bad)]).is_err(), "{bad}");
        }
        let q = Quotas::from_config(&config(&[("Tracon__Quotas__PublishThresholdToRunStream", "true")])).unwrap();
        assert!(q.publish_to_run_stream);
    }
}
