//! The circuit breaker every instance shares, one per provider: after
//! `FailureThreshold` consecutive failures that say something about the provider's health
//! (timeouts, `5xx`, broken connections — [`ProviderError::counts_against_breaker`]) it
//! opens, and calls skip the provider (an open breaker is a retryable class: the next
//! fallback link is tried) until `BreakDurationSeconds` have passed. Then exactly one call,
//! the half-open probe, goes through: its success closes the breaker, its failure opens it
//! again.
//!
//! The state is a row per provider in the store ([`BreakerStore`]), so Lambda functions,
//! Workers and local servers sharing a database agree. An instance ([`Breaker`]) reads a
//! provider's row the first time it calls it, and again at most once a second while what it
//! read is not a clean, closed breaker; it writes only what changes the row: every counted
//! failure (the write answers the row as it now is), and a success only when there was
//! something to reset. So a healthy provider costs no statement per call at all. An instance
//! that has seen only successes learns that the breaker opened elsewhere from its own next
//! call: if the provider is down, that call fails, and its failure's write answers the open
//! breaker — one call per instance per outage, what the shared breaker costs to keep the
//! hot path free. "Consecutive" is as each instance sees it: a success here resets failures
//! counted elsewhere only once this instance has read them.
//!
//! The breaker never breaks a run: a store that cannot be read or written lets the call
//! through.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::ProviderError;
use crate::config::{Config, ConfigError};
use crate::error::StoreError;
use crate::ports::Clock;
use crate::sync::lock;

/// `Tracon:CircuitBreaker:*`: on, 5 consecutive failures, one half-open attempt after 30 s
/// (the spec's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    pub enabled: bool,
    pub failure_threshold: u32,
    pub break_duration: Duration,
    /// How long an instance trusts what it last read of a breaker.
    pub cache_for: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            failure_threshold: 5,
            break_duration: Duration::from_secs(30),
            cache_for: Duration::from_secs(1),
        }
    }
}

impl BreakerSettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        let s = Self {
            enabled: config.bool("Tracon:CircuitBreaker:Enabled")?.unwrap_or(d.enabled),
            failure_threshold: config
                .parse::<u32>("Tracon:CircuitBreaker:FailureThreshold")?
                .unwrap_or(d.failure_threshold),
            break_duration: config.seconds("Tracon:CircuitBreaker:BreakDurationSeconds")?.unwrap_or(d.break_duration),
            cache_for: d.cache_for,
        };
        if s.failure_threshold == 0 || s.break_duration.is_zero() {
            return Err(ConfigError::Message(
                "Tracon__CircuitBreaker__FailureThreshold and BreakDurationSeconds must be positive.".into(),
            ));
        }
        Ok(s)
    }
}

/// A provider's breaker as stored (a provider never seen is closed, with no failures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BreakerState {
    pub consecutive_failures: u32,
    /// While open: when it opened.
    pub opened_at: Option<DateTime<Utc>>,
    /// The half-open probe in flight: until when its claim holds.
    pub probe_until: Option<DateTime<Utc>>,
}

/// The shared breaker state, a record per provider. Not tenant-scoped: a provider (its
/// endpoint and the host's credential) is the installation's, and so is its health.
#[async_trait::async_trait]
pub trait BreakerStore: Send + Sync {
    /// The provider's state.
    async fn get(&self, provider: &str) -> Result<BreakerState, StoreError>;
    /// A counted failure at `now` (one round trip): one more in a row; the breaker opens at
    /// `now` when they reach `threshold`, or opens again at `now` when `probe` (the half-open
    /// probe failed, and its claim is released). An open breaker's opening time does not
    /// move for a failure that is not the probe's. The state after.
    async fn failed(
        &self,
        provider: &str,
        now: DateTime<Utc>,
        threshold: u32,
        probe: bool,
    ) -> Result<BreakerState, StoreError>;
    /// A success: the breaker closes, its count and probe cleared (one round trip).
    async fn succeeded(&self, provider: &str, now: DateTime<Utc>) -> Result<(), StoreError>;
    /// Claims the one half-open probe of a breaker that opened at or before `due` (its break is
    /// over), held until `until`; `false` when it is not open, not due, or another caller holds
    /// an unexpired claim (one round trip; of racing callers exactly one wins).
    async fn claim_probe(
        &self,
        provider: &str,
        now: DateTime<Utc>,
        due: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
}

/// The breakers in process memory.
#[derive(Default)]
pub struct MemoryBreakerStore {
    rows: Mutex<HashMap<String, BreakerState>>,
}

#[async_trait::async_trait]
impl BreakerStore for MemoryBreakerStore {
    async fn get(&self, provider: &str) -> Result<BreakerState, StoreError> {
        Ok(lock(&self.rows).get(provider).copied().unwrap_or_default())
    }

    async fn failed(
        &self,
        provider: &str,
        now: DateTime<Utc>,
        threshold: u32,
        probe: bool,
    ) -> Result<BreakerState, StoreError> {
        let mut rows = lock(&self.rows);
        let s = rows.entry(provider.to_owned()).or_default();
        s.consecutive_failures = s.consecutive_failures.saturating_add(1);
        // A probe's failure opens the breaker again, unless another caller closed it meanwhile.
        if probe && s.opened_at.is_some() {
            s.opened_at = Some(now);
            s.probe_until = None;
        } else if s.opened_at.is_none() && s.consecutive_failures >= threshold {
            s.opened_at = Some(now);
        }
        Ok(*s)
    }

    async fn succeeded(&self, provider: &str, _now: DateTime<Utc>) -> Result<(), StoreError> {
        lock(&self.rows).remove(provider);
        Ok(())
    }

    async fn claim_probe(
        &self,
        provider: &str,
        now: DateTime<Utc>,
        due: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut rows = lock(&self.rows);
        let Some(s) = rows.get_mut(provider) else { return Ok(false) };
        let free = s.probe_until.is_none_or(|u| u < now);
        if s.opened_at.is_some_and(|at| at <= due) && free {
            s.probe_until = Some(until);
            return Ok(true);
        }
        Ok(false)
    }
}

/// What the breaker says of a call about to be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Closed: call.
    Closed,
    /// Half-open, and this call is the probe: call, and report how it went with `probe`.
    Probe,
    /// Open: skip the provider, for about this many seconds more.
    Open { seconds_left: i64 },
}

/// The breakers as one instance sees them: the shared store, read at most once per
/// [`BreakerSettings::cache_for`] per provider.
pub struct Breaker {
    store: Arc<dyn BreakerStore>,
    clock: Arc<dyn Clock>,
    settings: BreakerSettings,
    seen: Mutex<HashMap<String, (Seen, DateTime<Utc>)>>,
}

/// What an instance last read of a breaker.
#[derive(Debug, Clone, Copy)]
enum Seen {
    State(BreakerState),
    /// The store could not be read: calls go out, and nothing is written on success.
    Unreadable,
}

impl Seen {
    fn is_clean(&self) -> bool {
        matches!(self, Seen::State(s) if s.consecutive_failures == 0 && s.opened_at.is_none())
    }
}

impl Breaker {
    pub fn new(store: Arc<dyn BreakerStore>, clock: Arc<dyn Clock>, settings: BreakerSettings) -> Self {
        Self { store, clock, settings, seen: Mutex::new(HashMap::new()) }
    }

    pub fn settings(&self) -> &BreakerSettings {
        &self.settings
    }

    /// Whether a call to `provider` may go out now.
    pub async fn admit(&self, provider: &str) -> Admission {
        if !self.settings.enabled {
            return Admission::Closed;
        }
        let now = self.clock.now();
        let Some(state) = self.state(provider, now).await else { return Admission::Closed };
        let Some(opened_at) = state.opened_at else { return Admission::Closed };
        let reopens = opened_at + self.settings.break_duration;
        if now < reopens {
            return Admission::Open { seconds_left: (reopens - now).num_seconds() + 1 };
        }
        if state.probe_until.is_some_and(|until| until >= now) {
            return Admission::Open { seconds_left: 1 };
        }
        // The break is over: one caller, across every instance, gets to try.
        let until = now + self.settings.break_duration;
        match self.store.claim_probe(provider, now, now - self.settings.break_duration, until).await {
            Ok(true) => {
                self.remember(provider, BreakerState { probe_until: Some(until), ..state }, now);
                Admission::Probe
            }
            Ok(false) => {
                // Another caller probes: this instance does not ask again until it reads anew.
                let probing = now + self.settings.cache_for;
                self.remember(provider, BreakerState { probe_until: Some(probing), ..state }, now);
                Admission::Open { seconds_left: 1 }
            }
            Err(e) => {
                tracing::warn!(provider, error = ?e, "could not claim the circuit breaker's probe; calling anyway");
                Admission::Probe
            }
        }
    }

    /// How a call that `admit` let through ended.
    pub async fn record(&self, provider: &str, outcome: Result<(), &ProviderError>, probe: bool) {
        if !self.settings.enabled {
            return;
        }
        let now = self.clock.now();
        match outcome {
            Err(e) if e.counts_against_breaker() => {
                match self.store.failed(provider, now, self.settings.failure_threshold, probe).await {
                    Ok(state) => self.remember(provider, state, now),
                    Err(e) => tracing::warn!(provider, error = ?e, "could not record a failure on the circuit breaker"),
                }
            }
            // Neither a success nor a sign of ill health (a refusal, a rate limit): a probe that
            // ends this way hands its claim back by expiring.
            Err(_) => {}
            Ok(()) => {
                let nothing_to_reset =
                    lock(&self.seen).get(provider).is_some_and(|(s, _)| s.is_clean() || matches!(s, Seen::Unreadable));
                if nothing_to_reset && !probe {
                    return;
                }
                match self.store.succeeded(provider, now).await {
                    Ok(()) => self.remember(provider, BreakerState::default(), now),
                    Err(e) => tracing::warn!(provider, error = ?e, "could not record a success on the circuit breaker"),
                }
            }
        }
    }

    /// The breaker as this instance knows it: a clean one as last read (no statement), any
    /// other re-read at most every `cache_for`. `None` when the store could not be read.
    async fn state(&self, provider: &str, now: DateTime<Utc>) -> Option<BreakerState> {
        if let Some((seen, read_at)) = lock(&self.seen).get(provider).copied() {
            let fresh = (now - read_at).to_std().is_ok_and(|age| age < self.settings.cache_for);
            match seen {
                Seen::State(state) if fresh || seen.is_clean() => return Some(state),
                Seen::Unreadable if fresh => return None,
                _ => {}
            }
        }
        match self.store.get(provider).await {
            Ok(state) => {
                self.remember(provider, state, now);
                Some(state)
            }
            Err(e) => {
                tracing::warn!(provider, error = ?e, "could not read the circuit breaker; calling anyway");
                lock(&self.seen).insert(provider.to_owned(), (Seen::Unreadable, now));
                None
            }
        }
    }

    fn remember(&self, provider: &str, state: BreakerState, at: DateTime<Utc>) {
        lock(&self.seen).insert(provider.to_owned(), (Seen::State(state), at));
    }
}
