//! Provider health: a cost-free reachability check ([`super::ModelProvider::health`] — a model
//! list with the provider's own credential, never a completion), classified, timed and cached.
//!
//! | the check | status |
//! |---|---|
//! | answered 2xx | `Healthy` |
//! | answered 429 (reachable, throttled) | `Degraded` |
//! | refused the credential, a server error, another 4xx, no answer within [`CHECK_TIMEOUT`], unreachable, unreadable | `Unhealthy` |
//! | the provider has no check | `Unknown` |
//!
//! A result is kept [`CACHE_TTL`] per provider per instance ([`HealthChecks`]): nothing is
//! stored, so each instance of a serverless deployment checks on its own. The upstream's own
//! text never reaches a report: it is logged under the `(ref: …)` the report's message names.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::{ModelProvider, ProviderError, ProviderErrorKind};
use crate::ports::{Clock, millis_between};

/// How long a check's result is answered from memory (the spec's health cache).
pub const CACHE_TTL: Duration = Duration::from_secs(60);

/// How long a check may take before the provider counts as `Unhealthy` (`timeout`).
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub enum HealthStatus {
    Healthy,
    Degraded,
    Unhealthy,
    /// The provider has no health check.
    Unknown,
}

/// Why a check did not find the provider healthy, in our words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthFailure {
    /// `unauthorized`, `rate_limited`, `server_error`, `rejected`, `timeout`, `unreachable`,
    /// `protocol` or `circuit_open`.
    pub kind: &'static str,
    /// The provider's HTTP status, when it answered.
    pub http_status: Option<u16>,
    /// What happened, with the `(ref: …)` of the log line that holds the provider's own text.
    pub message: String,
}

/// One provider's health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderHealth {
    pub provider: String,
    pub status: HealthStatus,
    /// When the check ran; `null` for a provider without one.
    pub checked_at: Option<DateTime<Utc>>,
    /// How long the check took; `null` for a provider without one.
    pub latency_ms: Option<u64>,
    /// Whether this answer came from this instance's cache, which keeps a check a minute.
    pub cached: bool,
    pub failure: Option<HealthFailure>,
}

/// Checks `provider` now, under [`CHECK_TIMEOUT`].
pub async fn probe(provider: &dyn ModelProvider, clock: &dyn Clock) -> ProviderHealth {
    let name = provider.name().to_owned();
    let started = clock.now();
    let check = provider.health();
    let timeout = clock.sleep(CHECK_TIMEOUT);
    let outcome = match futures::future::select(check, timeout).await {
        futures::future::Either::Left((outcome, _)) => outcome,
        futures::future::Either::Right(((), _)) => Some(Err(ProviderError::timeout("no answer to the health check"))),
    };
    let Some(outcome) = outcome else {
        return ProviderHealth {
            provider: name,
            status: HealthStatus::Unknown,
            checked_at: None,
            latency_ms: None,
            cached: false,
            failure: None,
        };
    };
    let ended = clock.now();
    let (status, failure) = match outcome {
        Ok(()) => (HealthStatus::Healthy, None),
        Err(e) => classify(&name, &e),
    };
    ProviderHealth {
        provider: name,
        status,
        checked_at: Some(ended),
        latency_ms: Some(millis_between(started, ended)),
        cached: false,
        failure,
    }
}

/// The status and failure of a check that failed with `error`, whose detail is logged.
fn classify(provider: &str, error: &ProviderError) -> (HealthStatus, Option<HealthFailure>) {
    let reference = crate::failure::new_ref();
    tracing::warn!(provider, r#ref = %reference, kind = ?error.kind, status = ?error.status, detail = %error.detail, "provider health check failed");
    let status_text = error.status.map(|s| format!(" (HTTP {s})")).unwrap_or_default();
    let (status, kind, what) = match error.kind {
        ProviderErrorKind::RateLimited => {
            (HealthStatus::Degraded, "rate_limited", "The provider is reachable but throttling this credential")
        }
        ProviderErrorKind::Unauthorized => {
            (HealthStatus::Unhealthy, "unauthorized", "The provider refused the configured credential")
        }
        ProviderErrorKind::ServerError => {
            (HealthStatus::Unhealthy, "server_error", "The provider answered with a server error")
        }
        ProviderErrorKind::Timeout => (HealthStatus::Unhealthy, "timeout", "The provider did not answer in time"),
        ProviderErrorKind::Transport | ProviderErrorKind::Canceled => {
            (HealthStatus::Unhealthy, "unreachable", "The provider could not be reached")
        }
        ProviderErrorKind::Protocol | ProviderErrorKind::ContentFiltered => {
            (HealthStatus::Unhealthy, "protocol", "The provider's answer could not be read")
        }
        ProviderErrorKind::Rejected => (HealthStatus::Unhealthy, "rejected", "The provider refused the check"),
        // A check calls the provider directly, past the breaker; a provider may still say so.
        ProviderErrorKind::BreakerOpen => {
            (HealthStatus::Unhealthy, "circuit_open", "Calls to the provider are held back by the circuit breaker")
        }
    };
    let message = format!("{what}{status_text}. (ref: {reference})");
    (status, Some(HealthFailure { kind, http_status: error.status, message }))
}

/// Health results kept per provider in this instance for [`CACHE_TTL`].
#[derive(Default)]
pub struct HealthChecks {
    cache: Mutex<HashMap<String, ProviderHealth>>,
}

impl HealthChecks {
    /// `provider`'s health: from the cache while it is fresh (unless `refresh`), otherwise
    /// checked now and kept.
    pub async fn check(&self, provider: &Arc<dyn ModelProvider>, clock: &dyn Clock, refresh: bool) -> ProviderHealth {
        let key = provider.name().to_ascii_lowercase();
        let now = clock.now();
        if !refresh && let Some(kept) = self.lock().get(&key).filter(|h| is_fresh(h, now)) {
            return ProviderHealth { cached: true, ..kept.clone() };
        }
        let health = probe(provider.as_ref(), clock).await;
        if health.status != HealthStatus::Unknown {
            self.lock().insert(key, health.clone());
        }
        health
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ProviderHealth>> {
        crate::sync::lock(&self.cache)
    }
}

fn is_fresh(health: &ProviderHealth, now: DateTime<Utc>) -> bool {
    let ttl = chrono::Duration::from_std(CACHE_TTL).unwrap_or_default();
    health.checked_at.is_some_and(|at| now - at < ttl)
}
