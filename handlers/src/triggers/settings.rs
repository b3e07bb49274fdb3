//! The inbound-trigger settings (`Tracon:InboundTriggers:*`) and the accept endpoint's rate
//! limits, held by the HTTP state.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use tracon_core::config::{Config, ConfigError};
use tracon_core::names::TenantId;
use tracon_core::secret_names::SecretNamespace;
use tracon_core::triggers::{self as core_triggers};

use crate::error::ApiError;

/// Default `Tracon:InboundTriggers:TimestampToleranceSeconds` (five minutes).
pub const DEFAULT_TOLERANCE_SECONDS: u64 = 300;
/// Default `Tracon:InboundTriggers:MaxBodyBytes` (256 KB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 262_144;
/// Default `Tracon:InboundTriggers:MaxRequestsPerMinute`.
pub const DEFAULT_MAX_REQUESTS_PER_MINUTE: u32 = 60;

/// `Tracon:InboundTriggers:*`, validated at start-up, and the configuration snapshot the
/// signing secrets are read from at request time (by key name; nothing else is taken).
#[derive(Clone)]
pub struct TriggerSettings {
    pub timestamp_tolerance_seconds: u64,
    pub max_body_bytes: usize,
    /// Verified requests one trigger accepts per minute (per process).
    pub max_requests_per_minute: u32,
    /// Requests that fail verification one source address may send per minute (per
    /// process); counted apart, so forgeries never use up a trigger's own limit.
    pub max_unverified_per_minute: u32,
    /// Which key names a tenant's triggers may name (`AllowedConfigurationPrefix`, per
    /// tenant, plus the operator's `TenantPrefixes` grants).
    pub secret_names: SecretNamespace,
    secrets: Config,
}

impl std::fmt::Debug for TriggerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TriggerSettings")
            .field("timestamp_tolerance_seconds", &self.timestamp_tolerance_seconds)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_requests_per_minute", &self.max_requests_per_minute)
            .field("max_unverified_per_minute", &self.max_unverified_per_minute)
            .field("secret_names", &self.secret_names)
            .finish_non_exhaustive()
    }
}

impl Default for TriggerSettings {
    fn default() -> Self {
        Self {
            timestamp_tolerance_seconds: DEFAULT_TOLERANCE_SECONDS,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_requests_per_minute: DEFAULT_MAX_REQUESTS_PER_MINUTE,
            max_unverified_per_minute: DEFAULT_MAX_REQUESTS_PER_MINUTE,
            secret_names: SecretNamespace::new(core_triggers::DEFAULT_SECRET_PREFIX),
            secrets: Config::default(),
        }
    }
}

const SECTION: &str = "Tracon:InboundTriggers";

impl TriggerSettings {
    /// Reads `Tracon:InboundTriggers:{TimestampToleranceSeconds|MaxBodyBytes|
    /// MaxRequestsPerMinute|MaxUnverifiedRequestsPerMinute|AllowedConfigurationPrefix|
    /// TenantPrefixes:*}` (also `TimestampTolerance` as `hh:mm:ss`); a zero, a value that does
    /// not parse, or a malformed prefix is a start-up error. `config` is kept to resolve
    /// signing secrets by key name.
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        let positive = |key: &str| ConfigError::Message(format!("{} must be positive.", env(key)));
        let tolerance = match (
            config.parse::<u64>(&format!("{SECTION}:TimestampToleranceSeconds"))?,
            config.get(&format!("{SECTION}:TimestampTolerance")),
        ) {
            (Some(0), _) => return Err(positive("TimestampToleranceSeconds")),
            (Some(s), _) => s,
            (None, Some(span)) => match time_span_seconds(span) {
                Some(s) if s > 0 => s,
                _ => {
                    return Err(ConfigError::Message(format!(
                        "{} is not a positive hh:mm:ss time span.",
                        env("TimestampTolerance")
                    )));
                }
            },
            (None, None) => d.timestamp_tolerance_seconds,
        };
        let max_body_bytes = match config.parse::<usize>(&format!("{SECTION}:MaxBodyBytes"))? {
            Some(0) => return Err(positive("MaxBodyBytes")),
            Some(n) => n,
            None => d.max_body_bytes,
        };
        let per_minute = |setting: &str, default: u32| match config.parse::<u32>(&format!("{SECTION}:{setting}"))? {
            Some(0) => Err(positive(setting)),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        let max_requests_per_minute = per_minute("MaxRequestsPerMinute", d.max_requests_per_minute)?;
        let max_unverified_per_minute = per_minute("MaxUnverifiedRequestsPerMinute", max_requests_per_minute)?;
        Ok(Self {
            timestamp_tolerance_seconds: tolerance,
            max_body_bytes,
            max_requests_per_minute,
            max_unverified_per_minute,
            secret_names: SecretNamespace::from_config(config, SECTION, core_triggers::DEFAULT_SECRET_PREFIX)?,
            secrets: config.clone(),
        })
    }

    /// The signing secret `tenant`'s trigger resolves to now; `None` when its key name is
    /// not (or no longer) one the tenant may resolve, or has no value.
    pub fn secret(&self, tenant: &TenantId, key_name: &str) -> Option<&str> {
        if !self.secret_names.may_resolve(tenant, key_name) {
            return None;
        }
        self.secrets.get(key_name).filter(|v| !v.is_empty())
    }
}

fn env(setting: &str) -> String {
    format!("Tracon__InboundTriggers__{setting}")
}

/// `hh:mm:ss` (the spec's TimeSpan spelling) as seconds.
fn time_span_seconds(span: &str) -> Option<u64> {
    let parts: Vec<&str> = span.trim().split(':').collect();
    let [h, m, s] = parts.as_slice() else { return None };
    let (h, m, s) = (h.parse::<u64>().ok()?, m.parse::<u64>().ok()?, s.parse::<u64>().ok()?);
    (m < 60 && s < 60).then(|| h * 3600 + m * 60 + s)
}

// ---- the per-trigger rate limit -------------------------------------------------------------

/// Token buckets in process memory: per trigger for verified requests, per source address
/// for requests that fail verification. In a fleet the limits apply per instance.
#[derive(Default)]
pub struct TriggerLimiter {
    buckets: Mutex<HashMap<String, (f64, DateTime<Utc>)>>,
}

/// Buckets kept before idle (full) ones are swept.
const SWEEP_AFTER_BUCKETS: usize = 10_000;

impl TriggerLimiter {
    /// Takes a permit, or says how many seconds until one is free.
    pub fn check(&self, key: &str, per_minute: u32, now: DateTime<Utc>) -> Result<(), u64> {
        self.refill(key, per_minute, now, true)
    }

    /// Whether a permit is free, without taking it.
    pub fn peek(&self, key: &str, per_minute: u32, now: DateTime<Utc>) -> Result<(), u64> {
        self.refill(key, per_minute, now, false)
    }

    fn refill(&self, key: &str, per_minute: u32, now: DateTime<Utc>, take: bool) -> Result<(), u64> {
        let capacity = f64::from(per_minute.max(1));
        let per_second = capacity / 60.0;
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() > SWEEP_AFTER_BUCKETS {
            buckets.retain(|_, (_, at)| (now - *at).num_seconds() < 60);
        }
        let (tokens, at) = buckets.entry(key.to_owned()).or_insert((capacity, now));
        let elapsed = (now - *at).num_microseconds().unwrap_or(i64::MAX).max(0) as f64 / 1e6;
        *tokens = (*tokens + elapsed * per_second).min(capacity);
        *at = now;
        if *tokens >= 1.0 {
            if take {
                *tokens -= 1.0;
            }
            return Ok(());
        }
        Err(((1.0 - *tokens) / per_second).ceil().max(1.0) as u64)
    }
}

/// The bucket of requests from `source` that failed verification (one shared bucket when
/// the host does not know the address).
pub(crate) fn unverified_bucket(source: Option<IpAddr>) -> String {
    match source {
        Some(ip) => format!("unverified:{ip}"),
        None => "unverified:unknown".to_owned(),
    }
}

pub(crate) fn rate_limited(detail: &str, wait: u64) -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", format!("{detail}; retry in {wait} s."))
        .with_retry_after(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_have_defaults_and_refuse_nonsense_at_start_up() {
        let d = TriggerSettings::from_config(&Config::default()).unwrap();
        assert_eq!((d.timestamp_tolerance_seconds, d.max_body_bytes, d.max_requests_per_minute), (300, 262_144, 60));
        assert_eq!((d.secret_names.prefix(), d.max_unverified_per_minute), ("Tracon:TriggerSecrets:", 60));
        let s = TriggerSettings::from_config(&Config::from_pairs([
            ("Tracon__InboundTriggers__TimestampTolerance", "00:02:00"),
            ("Tracon__InboundTriggers__MaxBodyBytes", "1024"),
            ("Tracon__InboundTriggers__MaxRequestsPerMinute", "5"),
            ("Tracon__InboundTriggers__AllowedConfigurationPrefix", "Hooks__Secrets__"),
        ]))
        .unwrap();
        assert_eq!((s.timestamp_tolerance_seconds, s.max_body_bytes, s.max_requests_per_minute), (120, 1024, 5));
        assert_eq!(s.secret_names.prefix(), "Hooks:Secrets:");
        assert_eq!(s.max_unverified_per_minute, 5, "defaults to the per-trigger limit");
        for (key, value) in [
            ("Tracon__InboundTriggers__TimestampToleranceSeconds", "0"),
            ("Tracon__InboundTriggers__TimestampToleranceSeconds", "soon"),
            ("Tracon__InboundTriggers__TimestampTolerance", "5 minutes"),
            ("Tracon__InboundTriggers__MaxBodyBytes", "0"),
            ("Tracon__InboundTriggers__MaxRequestsPerMinute", "-1"),
            ("Tracon__InboundTriggers__MaxUnverifiedRequestsPerMinute", "0"),
            ("Tracon__InboundTriggers__TenantPrefixes__acme", "NoColon"),
            ("Tracon__InboundTriggers__AllowedConfigurationPrefix", "Tracon:TriggerSecrets"),
            ("Tracon__InboundTriggers__AllowedConfigurationPrefix", ":"),
        ] {
            assert!(TriggerSettings::from_config(&Config::from_pairs([(key, value)])).is_err(), "{key}={value}");
        }
    }

    #[test]
    fn secrets_resolve_by_key_name_in_either_spelling_and_only_under_the_prefix() {
        let s = TriggerSettings::from_config(&Config::from_pairs([
            ("Tracon__TriggerSecrets__Slack", "whsec_1"),
            ("Tracon__Providers__OpenAI__ApiKey", "sk-not-for-triggers"),
        ]))
        .unwrap();
        let d = TenantId::default_tenant();
        assert_eq!(s.secret(&d, "Tracon:TriggerSecrets:Slack"), Some("whsec_1"));
        assert_eq!(s.secret(&d, "Tracon__TriggerSecrets__Slack"), Some("whsec_1"));
        assert_eq!(s.secret(&d, "Tracon:TriggerSecrets:Missing"), None);
        assert_eq!(s.secret(&d, "Tracon:Providers:OpenAI:ApiKey"), None, "outside the prefix");
        assert!(!format!("{s:?}").contains("whsec_1"));
    }

    #[test]
    fn the_limiter_allows_a_burst_per_trigger_then_says_when_to_retry() {
        let l = TriggerLimiter::default();
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert!(l.check("t/a", 2, now).is_ok());
        assert!(l.check("t/a", 2, now).is_ok());
        assert_eq!(l.check("t/a", 2, now), Err(30));
        assert!(l.check("t/b", 2, now).is_ok(), "per trigger");
        assert!(l.check("t/a", 2, now + chrono::Duration::seconds(30)).is_ok(), "refilled");
        assert!(l.peek("t/c", 1, now).is_ok() && l.peek("t/c", 1, now).is_ok(), "a peek takes nothing");
        assert!(l.check("t/c", 1, now).is_ok());
        assert_eq!(l.peek("t/c", 1, now), Err(60));
    }
}
