//! Model calls that survive a failing provider: [`ModelCalls::open`] takes a call's chain —
//! the agent's provider, then its binding's fallback links — and returns the first answer that
//! starts.
//!
//! For each link, in order:
//!
//! 1. the provider's circuit breaker ([`super::breaker`]) must let the call out; an open
//!    breaker skips the link (no call is made);
//! 2. a slot of the provider's outgoing concurrency limit
//!    (`Tracon:ModelConcurrency:MaxConcurrentCallsPerProvider`, per instance) is taken — a
//!    call waiting for one counts against the run's time;
//! 3. the attempt: the call, and its first events up to the first that would reach the
//!    caller (text, reasoning, a tool call), under the model timeout. A failure before that
//!    point is retried on the same link when it is worth it (`429`, `5xx`, a broken
//!    connection, a timeout), after an exponential backoff with jitter that honours
//!    `Retry-After`, at most `Tracon:ModelRetry:MaxRetries` times and never past the run's
//!    time budget;
//! 4. a link that still fails with a class another provider could help with (the same, or an
//!    open breaker; never a refused credential, a rejected request or a cancellation) hands
//!    the call to the next link.
//!
//! Once an answer has started nothing here is involved any more: a failure later in the
//! stream reaches the caller as the run's error, never as a silent switch. What happened on
//! the way — each retry, each move to the next link — is returned as [`Note`]s, which the
//! engine records in the run's log.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::breaker::{Admission, Breaker, BreakerSettings, BreakerStore};
use super::{ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, ProviderErrorKind};
use crate::config::{Config, ConfigError};
use crate::definition::ModelBinding;
use crate::ports::{Clock, millis_between};
use crate::sync::lock;

/// `Tracon:ModelRetry:*`: how often a failed attempt is tried again on the same provider
/// (`MaxRetries`, 2), the first backoff (`InitialDelayMilliseconds`, 500; doubled each time,
/// with jitter) and the longest wait (`MaxDelaySeconds`, 10 — a `Retry-After` asking for
/// more moves the call to the next link instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySettings {
    pub max_retries: u32,
    pub initial_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        Self { max_retries: 2, initial_delay: Duration::from_millis(500), max_delay: Duration::from_secs(10) }
    }
}

/// Everything that shapes a model call's way to an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResilienceSettings {
    pub retry: RetrySettings,
    pub breaker: BreakerSettings,
    /// `Tracon:ModelConcurrency:MaxConcurrentCallsPerProvider`: calls in flight per provider
    /// on this instance (none: no limit).
    pub max_concurrent_calls_per_provider: Option<usize>,
}

impl ResilienceSettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = RetrySettings::default();
        let retry = RetrySettings {
            max_retries: config.parse::<u32>("Tracon:ModelRetry:MaxRetries")?.unwrap_or(d.max_retries),
            initial_delay: config
                .parse::<u64>("Tracon:ModelRetry:InitialDelayMilliseconds")?
                .map_or(d.initial_delay, Duration::from_millis),
            max_delay: config.seconds("Tracon:ModelRetry:MaxDelaySeconds")?.unwrap_or(d.max_delay),
        };
        if retry.max_retries > 10 {
            return Err(ConfigError::Message("Tracon__ModelRetry__MaxRetries is at most 10.".into()));
        }
        let limit = config.parse::<usize>("Tracon:ModelConcurrency:MaxConcurrentCallsPerProvider")?;
        if limit == Some(0) {
            return Err(ConfigError::Message(
                "Tracon__ModelConcurrency__MaxConcurrentCallsPerProvider must be at least 1 (unset: no limit).".into(),
            ));
        }
        Ok(Self { retry, breaker: BreakerSettings::from_config(config)?, max_concurrent_calls_per_provider: limit })
    }
}

/// A link of a call's chain: a provider, and the binding it is called with when it is not the
/// primary (the call's request is rebound to the link's model and settings).
pub struct Link<'a> {
    pub provider: &'a Arc<dyn ModelProvider>,
    pub binding: Option<&'a ModelBinding>,
}

/// What happened on a call's way to an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// Attempt `attempt` (from 1) on a link failed with `kind`; the link is tried again after
    /// `delay`.
    Retried { provider: String, model: String, attempt: u32, kind: ProviderErrorKind, delay: Duration },
    /// A link failed with `kind` (after its retries, or its breaker was open) and the call
    /// moved on to the next one.
    FellBack {
        from_provider: String,
        from_model: String,
        to_provider: String,
        to_model: String,
        kind: ProviderErrorKind,
    },
}

/// An answer that has started: the provider and model of the link that gave it, and its
/// events from the first.
pub struct Opened {
    pub provider: String,
    pub model: String,
    pub stream: ModelStream,
}

/// The call failed on every link it could go to: the last link's provider, and its failure.
pub struct Failed {
    pub provider: String,
    pub error: ProviderError,
}

/// The per-instance side of model calls: the breaker cache and the concurrency slots.
pub struct ModelCalls {
    settings: ResilienceSettings,
    breaker: Breaker,
    clock: Arc<dyn Clock>,
    slots: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl ModelCalls {
    pub fn new(settings: ResilienceSettings, store: Arc<dyn BreakerStore>, clock: Arc<dyn Clock>) -> Self {
        Self {
            breaker: Breaker::new(store, clock.clone(), settings.breaker),
            settings,
            clock,
            slots: Mutex::new(HashMap::new()),
        }
    }

    pub fn settings(&self) -> &ResilienceSettings {
        &self.settings
    }

    /// The first answer that starts: from `primary` with `request`, then along `fallbacks`,
    /// each attempt under `attempt_timeout`, no retry scheduled past `until`. `notes` gets
    /// what happened on the way.
    pub async fn open(
        &self,
        primary: &Arc<dyn ModelProvider>,
        fallbacks: &[Link<'_>],
        request: &ModelRequest,
        attempt_timeout: Duration,
        until: Option<DateTime<Utc>>,
        notes: &mut Vec<Note>,
    ) -> Result<Opened, Failed> {
        let mut link = Link { provider: primary, binding: None };
        let mut next = fallbacks.iter();
        loop {
            let request = match link.binding {
                None => Cow::Borrowed(request),
                Some(binding) => Cow::Owned(request.rebound(binding)),
            };
            let name = link.provider.name();
            let error = match self.link(link.provider, &request, attempt_timeout, until, notes).await {
                Ok(stream) => return Ok(Opened { provider: name.to_owned(), model: request.model.clone(), stream }),
                Err(e) => e,
            };
            // No next link once the run's time is spent.
            let in_time = until.is_none_or(|u| self.clock.now() < u);
            let Some(following) = next.next().filter(|_| error.is_retryable() && in_time) else {
                return Err(Failed { provider: name.to_owned(), error });
            };
            notes.push(Note::FellBack {
                from_provider: name.to_owned(),
                from_model: request.model.clone(),
                to_provider: following.provider.name().to_owned(),
                to_model: following.binding.map_or(request.model.as_str(), |b| b.model.as_str()).to_owned(),
                kind: error.kind,
            });
            link = Link { provider: following.provider, binding: following.binding };
        }
    }

    /// One link: its attempts, retried while that is worth it.
    async fn link(
        &self,
        provider: &Arc<dyn ModelProvider>,
        request: &ModelRequest,
        attempt_timeout: Duration,
        until: Option<DateTime<Utc>>,
        notes: &mut Vec<Note>,
    ) -> Result<ModelStream, ProviderError> {
        let name = provider.name();
        let breaker = provider.breaker_key();
        let mut attempt = 0;
        let mut last: Option<ProviderError> = None;
        loop {
            attempt += 1;
            let probe = match self.breaker.admit(breaker).await {
                // Opened by this call's own failures: the failure is the run's, not "no call".
                Admission::Open { seconds_left } => {
                    return Err(last.unwrap_or_else(|| ProviderError::breaker_open(name, seconds_left)));
                }
                Admission::Probe => true,
                Admission::Closed => false,
            };
            let result = match self.attempt(provider, request, attempt_timeout, until).await {
                // Waiting for a slot of this instance says nothing of the provider's health.
                Err(Attempt::NoSlot(e)) => return Err(e),
                Err(Attempt::Failed(e)) => Err(e),
                Ok(stream) => Ok(stream),
            };
            self.breaker.record(breaker, result.as_ref().map(|_| ()), probe).await;
            let error = match result {
                Ok(stream) => return Ok(stream),
                Err(e) => e,
            };
            if !error.is_worth_retrying() || attempt > self.settings.retry.max_retries {
                return Err(error);
            }
            let Some(delay) = self.backoff(attempt, error.retry_after) else { return Err(error) };
            if until.is_some_and(|u| self.clock.now() + delay >= u) {
                return Err(error);
            }
            notes.push(Note::Retried {
                provider: name.to_owned(),
                model: request.model.clone(),
                attempt,
                kind: error.kind,
                delay,
            });
            self.clock.sleep(delay).await;
            last = Some(error);
        }
    }

    /// How long to wait before attempt `attempt + 1`: the exponential backoff with half of it
    /// random, or longer when the provider asked (`None` when it asked for more than
    /// `MaxDelaySeconds`: the next link is the better bet).
    fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Option<Duration> {
        let retry = &self.settings.retry;
        let base = retry.initial_delay.saturating_mul(1 << (attempt - 1).min(16)).min(retry.max_delay);
        let jittered = base / 2 + base.mul_f64(jitter() / 2.0);
        match retry_after {
            Some(asked) if asked > retry.max_delay => None,
            Some(asked) => Some(jittered.max(asked)),
            None => Some(jittered),
        }
    }

    /// One attempt: a slot, the call, and its events up to the first the caller would see.
    async fn attempt(
        &self,
        provider: &Arc<dyn ModelProvider>,
        request: &ModelRequest,
        timeout: Duration,
        until: Option<DateTime<Utc>>,
    ) -> Result<ModelStream, Attempt> {
        let permit = self.slot(provider.name(), until).await.map_err(Attempt::NoSlot)?;
        let call = async {
            let mut stream = provider.stream(request).await?;
            let mut head = Vec::new();
            while let Some(event) = stream.next().await {
                let event = event?;
                let output = is_output(&event);
                head.push(Ok(event));
                if output {
                    break;
                }
            }
            Ok::<_, ProviderError>((head, stream))
        };
        let (head, rest) = tokio::select! {
            biased;
            r = call => r.map_err(Attempt::Failed)?,
            _ = self.clock.sleep(timeout) => {
                return Err(Attempt::Failed(ProviderError::timeout("no response before the model timeout")));
            }
        };
        let stream = futures::stream::iter(head).chain(rest);
        Ok(match permit {
            // The slot is held until the answer's stream is dropped.
            Some(permit) => stream
                .map(move |event| {
                    let _held: &OwnedSemaphorePermit = &permit;
                    event
                })
                .boxed(),
            None => stream.boxed(),
        })
    }

    /// A slot of `provider`'s concurrency limit (none without one), waited for no longer than
    /// `until`.
    async fn slot(
        &self,
        provider: &str,
        until: Option<DateTime<Utc>>,
    ) -> Result<Option<OwnedSemaphorePermit>, ProviderError> {
        let Some(limit) = self.settings.max_concurrent_calls_per_provider else { return Ok(None) };
        let semaphore =
            lock(&self.slots).entry(provider.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(limit))).clone();
        let out_of_time = || ProviderError::timeout("no call slot for the provider before the run's time ran out");
        let Some(until) = until else {
            return semaphore.acquire_owned().await.map(Some).map_err(|_| out_of_time());
        };
        let wait = Duration::from_millis(millis_between(self.clock.now(), until));
        tokio::select! {
            biased;
            permit = semaphore.acquire_owned() => permit.map(Some).map_err(|_| out_of_time()),
            _ = self.clock.sleep(wait) => Err(out_of_time()),
        }
    }
}

/// How an attempt failed.
enum Attempt {
    /// No slot of this instance's concurrency limit came free in the run's time.
    NoSlot(ProviderError),
    /// The call failed.
    Failed(ProviderError),
}

/// Whether an event would reach the caller (after it, a failure can no longer be retried).
fn is_output(event: &ModelEvent) -> bool {
    matches!(
        event,
        ModelEvent::TextDelta(_)
            | ModelEvent::ReasoningDelta(_)
            | ModelEvent::ReasoningBlock(_)
            | ModelEvent::ToolCall(_)
    )
}

/// A number in `[0, 1)` from the platform's randomness (the same source as ids).
fn jitter() -> f64 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let mut n = [0u8; 8];
    n.copy_from_slice(&bytes[..8]);
    (u64::from_le_bytes(n) >> 11) as f64 / (1u64 << 53) as f64
}
