//! Model calls that survive a failing provider ([`ModelCalls::open`]): retries before the
//! answer starts and never after, `Retry-After`, fallback links and what moves a call to the
//! next one, the shared circuit breaker and its half-open probe, the concurrency limit, and the
//! run's time budget.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use support::ShiftedClock;
use tracon_core::definition::ModelBinding;
use tracon_core::model::breaker::{BreakerSettings, BreakerStore, MemoryBreakerStore};
use tracon_core::model::resilience::{Link, ModelCalls, Note, ResilienceSettings, RetrySettings};
use tracon_core::model::{ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, ProviderErrorKind};
use tracon_core::ports::Clock;

/// What one call to a [`Staged`] provider does.
#[derive(Clone)]
enum Step {
    /// Fails before anything streams.
    Fail(ProviderError),
    /// Starts answering, then breaks.
    BreakAfterText(&'static str),
    /// Answers.
    Answer(&'static str),
}

/// A provider that plays its steps in order (the last one repeats) and counts its calls.
struct Staged {
    name: &'static str,
    steps: Mutex<VecDeque<Step>>,
    calls: AtomicUsize,
    models: Mutex<Vec<String>>,
}

impl Staged {
    fn new(name: &'static str, steps: Vec<Step>) -> Arc<Self> {
        Arc::new(Self { name, steps: Mutex::new(steps.into()), calls: AtomicUsize::new(0), models: Mutex::default() })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl ModelProvider for Staged {
    fn name(&self) -> &str {
        self.name
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.models.lock().unwrap().push(request.model.clone());
        let step = {
            let mut steps = self.steps.lock().unwrap();
            if steps.len() > 1 { steps.pop_front().unwrap() } else { steps.front().cloned().unwrap() }
        };
        let events = match step {
            Step::Fail(e) => return Err(e),
            Step::BreakAfterText(t) => {
                vec![Ok(ModelEvent::TextDelta(t.into())), Err(ProviderError::from_status(502, "broke mid-answer"))]
            }
            Step::Answer(t) => vec![Ok(ModelEvent::Model("served".into())), Ok(ModelEvent::TextDelta(t.into()))],
        };
        Ok(futures::stream::iter(events).boxed())
    }
}

fn status(code: u16) -> Step {
    Step::Fail(ProviderError::from_status(code, "upstream said no"))
}

fn settings(max_retries: u32) -> ResilienceSettings {
    ResilienceSettings {
        retry: RetrySettings {
            max_retries,
            initial_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(50),
        },
        ..ResilienceSettings::default()
    }
}

struct World {
    calls: ModelCalls,
    clock: Arc<ShiftedClock>,
    breakers: Arc<MemoryBreakerStore>,
}

fn world(settings: ResilienceSettings) -> World {
    let clock = Arc::new(ShiftedClock::default());
    let breakers = Arc::new(MemoryBreakerStore::default());
    World { calls: ModelCalls::new(settings, breakers.clone(), clock.clone()), clock, breakers }
}

fn request() -> ModelRequest {
    ModelRequest::from_binding(&ModelBinding { provider: "primary".into(), model: "big".into(), ..Default::default() })
}

fn binding(provider: &str, model: &str) -> ModelBinding {
    ModelBinding { provider: provider.into(), model: model.into(), ..Default::default() }
}

/// Opens a call on `primary` then `fallbacks`; the answer's text, or the failure's kind and
/// provider; and the notes.
async fn open(
    w: &World,
    primary: &Arc<dyn ModelProvider>,
    fallbacks: &[(Arc<dyn ModelProvider>, ModelBinding)],
) -> (Result<(String, String), (ProviderErrorKind, String)>, Vec<Note>) {
    let links: Vec<Link<'_>> = fallbacks.iter().map(|(p, b)| Link { provider: p, binding: Some(b) }).collect();
    let mut notes = Vec::new();
    let opened = w.calls.open(primary, &links, &request(), Duration::from_secs(5), None, &mut notes).await;
    let result = match opened {
        Ok(o) => {
            let events: Vec<_> = o.stream.collect().await;
            let text = events.iter().filter_map(|e| match e {
                Ok(ModelEvent::TextDelta(t)) => Some(t.as_str()),
                _ => None,
            });
            Ok((o.provider.clone(), text.collect()))
        }
        Err(f) => Err((f.error.kind, f.provider)),
    };
    (result, notes)
}

#[tokio::test]
async fn a_failure_before_the_answer_is_retried_on_the_same_provider_with_backoff() {
    let w = world(settings(2));
    let flaky =
        Staged::new("primary", vec![status(503), Step::Fail(ProviderError::timeout("slow")), Step::Answer("hi")]);
    let primary: Arc<dyn ModelProvider> = flaky.clone();
    let (answer, notes) = open(&w, &primary, &[]).await;
    assert_eq!(answer, Ok(("primary".into(), "hi".into())));
    assert_eq!(flaky.calls(), 3);
    let retried: Vec<(u32, ProviderErrorKind)> = notes
        .iter()
        .map(|n| match n {
            Note::Retried { attempt, kind, .. } => (*attempt, *kind),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(retried, [(1, ProviderErrorKind::ServerError), (2, ProviderErrorKind::Timeout)]);
}

#[tokio::test]
async fn retries_stop_at_the_limit_and_the_failure_is_the_last_attempts() {
    let w = world(settings(2));
    let down = Staged::new("primary", vec![status(500)]);
    let primary: Arc<dyn ModelProvider> = down.clone();
    let (answer, notes) = open(&w, &primary, &[]).await;
    assert_eq!(answer, Err((ProviderErrorKind::ServerError, "primary".into())));
    assert_eq!((down.calls(), notes.len()), (3, 2), "one call and two retries");
}

#[tokio::test]
async fn a_refusal_is_neither_retried_nor_passed_to_a_fallback() {
    for code in [401, 403, 400, 404] {
        let w = world(settings(2));
        let refusing = Staged::new("primary", vec![status(code)]);
        let backup = Staged::new("backup", vec![Step::Answer("from backup")]);
        let primary: Arc<dyn ModelProvider> = refusing.clone();
        let (answer, notes) = open(&w, &primary, &[(backup.clone(), binding("backup", "small"))]).await;
        assert!(answer.is_err(), "{code}");
        assert_eq!((refusing.calls(), backup.calls(), notes.len()), (1, 0, 0), "{code}");
    }
}

#[tokio::test]
async fn a_failure_after_the_answer_started_is_never_retried() {
    let w = world(settings(2));
    let breaking = Staged::new("primary", vec![Step::BreakAfterText("half an ans")]);
    let primary: Arc<dyn ModelProvider> = breaking.clone();
    let links: Vec<Link<'_>> = Vec::new();
    let mut notes = Vec::new();
    let opened = w.calls.open(&primary, &links, &request(), Duration::from_secs(5), None, &mut notes).await;
    let events: Vec<_> = opened.ok().unwrap().stream.collect().await;
    assert!(matches!(&events[0], Ok(ModelEvent::TextDelta(t)) if t == "half an ans"));
    assert!(matches!(&events[1], Err(e) if e.kind == ProviderErrorKind::ServerError), "the error reaches the caller");
    assert_eq!((breaking.calls(), notes.len()), (1, 0));
}

#[tokio::test]
async fn retry_after_is_honoured_and_one_longer_than_the_longest_wait_moves_on_at_once() {
    let w = world(settings(3));
    let asked = ProviderError::from_status(429, "slow down").with_retry_after(Some("0"));
    let throttled = Staged::new("primary", vec![Step::Fail(asked), Step::Answer("ok")]);
    let primary: Arc<dyn ModelProvider> = throttled.clone();
    let (answer, notes) = open(&w, &primary, &[]).await;
    assert_eq!(answer, Ok(("primary".into(), "ok".into())));
    assert!(matches!(notes[..], [Note::Retried { kind: ProviderErrorKind::RateLimited, .. }]), "{notes:?}");

    // An hour is more than this installation waits (50 ms here): the next link, without waiting.
    let w = world(settings(3));
    let hour = ProviderError::from_status(429, "come back later").with_retry_after(Some("3600"));
    assert_eq!(hour.retry_after, Some(Duration::from_secs(3600)));
    let throttled = Staged::new("primary", vec![Step::Fail(hour)]);
    let backup = Staged::new("backup", vec![Step::Answer("from backup")]);
    let primary: Arc<dyn ModelProvider> = throttled.clone();
    let (answer, notes) = open(&w, &primary, &[(backup.clone(), binding("backup", "small"))]).await;
    assert_eq!(answer, Ok(("backup".into(), "from backup".into())));
    assert_eq!(throttled.calls(), 1);
    assert!(matches!(&notes[..], [Note::FellBack { kind: ProviderErrorKind::RateLimited, .. }]), "{notes:?}");
}

#[tokio::test]
async fn a_failing_primary_falls_back_to_the_next_link_with_its_own_model() {
    let w = world(settings(1));
    let down = Staged::new("primary", vec![status(502)]);
    let also_down = Staged::new(
        "second",
        vec![Step::Fail(ProviderError::new(ProviderErrorKind::Transport, "HttpRequestError", "connection reset"))],
    );
    let backup = Staged::new("third", vec![Step::Answer("third time lucky")]);
    let primary: Arc<dyn ModelProvider> = down.clone();
    let chain: Vec<(Arc<dyn ModelProvider>, ModelBinding)> =
        vec![(also_down.clone(), binding("second", "medium")), (backup.clone(), binding("third", "small"))];
    let (answer, notes) = open(&w, &primary, &chain).await;
    assert_eq!(answer, Ok(("third".into(), "third time lucky".into())));
    assert_eq!((down.calls(), also_down.calls(), backup.calls()), (2, 2, 1));
    assert_eq!(*backup.models.lock().unwrap(), ["small"], "the link's own model");
    let moves: Vec<(&str, &str, &str)> = notes
        .iter()
        .filter_map(|n| match n {
            Note::FellBack { from_provider, to_provider, to_model, .. } => {
                Some((from_provider.as_str(), to_provider.as_str(), to_model.as_str()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(moves, [("primary", "second", "medium"), ("second", "third", "small")]);
    // Every link failed: the failure is the last link's.
    let w = world(settings(0));
    let (answer, _) =
        open(&w, &primary, &[(Staged::new("second", vec![status(500)]), binding("second", "medium"))]).await;
    assert_eq!(answer, Err((ProviderErrorKind::ServerError, "second".into())));
}

#[tokio::test]
async fn the_breaker_opens_after_five_failures_skips_the_provider_and_one_probe_closes_it() {
    let breaker = BreakerSettings { break_duration: Duration::from_secs(30), ..BreakerSettings::default() };
    let w = world(ResilienceSettings { breaker, ..settings(0) });
    let flaky = Staged::new(
        "primary",
        vec![status(500), status(500), status(500), status(500), status(500), Step::Answer("back")],
    );
    let backup = Staged::new("backup", vec![Step::Answer("from backup")]);
    let primary: Arc<dyn ModelProvider> = flaky.clone();
    let chain: Vec<(Arc<dyn ModelProvider>, ModelBinding)> = vec![(backup.clone(), binding("backup", "small"))];
    for _ in 0..5 {
        let (answer, _) = open(&w, &primary, &chain).await;
        assert_eq!(answer.unwrap().0, "backup");
    }
    assert!(w.breakers.get("primary").await.unwrap().opened_at.is_some(), "open after the fifth failure");
    // Open: the primary is not called at all; the move names the open breaker.
    for _ in 0..20 {
        let (answer, notes) = open(&w, &primary, &chain).await;
        assert_eq!(answer.unwrap().0, "backup");
        assert!(matches!(&notes[..], [Note::FellBack { kind: ProviderErrorKind::BreakerOpen, .. }]), "{notes:?}");
    }
    assert_eq!(flaky.calls(), 5, "no call while open");
    // Without a fallback, an open breaker fails the call without calling.
    let (answer, _) = open(&w, &primary, &[]).await;
    assert_eq!(answer, Err((ProviderErrorKind::BreakerOpen, "primary".into())));
    // The break is over: one probe goes out, answers, and the breaker closes.
    w.clock.advance(31_000);
    let (answer, _) = open(&w, &primary, &chain).await;
    assert_eq!(answer.unwrap(), ("primary".into(), "back".into()));
    assert_eq!(flaky.calls(), 6);
    let state = w.breakers.get("primary").await.unwrap();
    assert_eq!((state.consecutive_failures, state.opened_at), (0, None));
}

#[tokio::test]
async fn a_failed_probe_opens_the_breaker_again_for_another_break() {
    let breaker = BreakerSettings { failure_threshold: 2, ..BreakerSettings::default() };
    let w = world(ResilienceSettings { breaker, ..settings(0) });
    let down = Staged::new("primary", vec![status(500)]);
    let primary: Arc<dyn ModelProvider> = down.clone();
    for _ in 0..2 {
        let _ = open(&w, &primary, &[]).await;
    }
    w.clock.advance(31_000);
    let (answer, _) = open(&w, &primary, &[]).await;
    assert_eq!(answer, Err((ProviderErrorKind::ServerError, "primary".into())), "the probe went out and failed");
    let (answer, _) = open(&w, &primary, &[]).await;
    assert_eq!(answer, Err((ProviderErrorKind::BreakerOpen, "primary".into())), "open again");
    assert_eq!(down.calls(), 3);
}

#[tokio::test]
async fn a_rate_limit_or_a_refusal_does_not_count_against_the_breaker() {
    let breaker = BreakerSettings { failure_threshold: 2, ..BreakerSettings::default() };
    let w = world(ResilienceSettings { breaker, ..settings(0) });
    let primary: Arc<dyn ModelProvider> =
        Staged::new("primary", vec![status(429), status(400), status(429), status(401)]);
    for _ in 0..4 {
        let _ = open(&w, &primary, &[]).await;
    }
    assert_eq!(w.breakers.get("primary").await.unwrap().consecutive_failures, 0);
}

#[tokio::test]
async fn no_retry_is_scheduled_past_the_runs_time_budget() {
    let w = world(settings(5));
    let down = Staged::new("primary", vec![status(503)]);
    let primary: Arc<dyn ModelProvider> = down.clone();
    let links: Vec<Link<'_>> = Vec::new();
    let mut notes = Vec::new();
    let until = Some(w.clock.now());
    let opened = w.calls.open(&primary, &links, &request(), Duration::from_secs(5), until, &mut notes).await;
    assert!(opened.is_err());
    assert_eq!((down.calls(), notes.len()), (1, 0));
}

/// A provider whose answers stay open until the test says so.
struct Held {
    gate: Arc<tokio::sync::Semaphore>,
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl ModelProvider for Held {
    fn name(&self) -> &str {
        "held"
    }

    async fn stream(&self, _: &ModelRequest) -> Result<ModelStream, ProviderError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let gate = self.gate.clone();
        let rest = futures::stream::once(async move {
            let _ = gate.acquire().await;
            Ok(ModelEvent::TextDelta(" done".into()))
        });
        Ok(futures::stream::iter([Ok(ModelEvent::TextDelta("started".into()))]).chain(rest).boxed())
    }
}

#[tokio::test]
async fn a_call_waits_for_a_slot_of_the_providers_concurrency_limit() {
    let w = Arc::new(world(ResilienceSettings { max_concurrent_calls_per_provider: Some(1), ..settings(0) }));
    let held = Arc::new(Held { gate: Arc::new(tokio::sync::Semaphore::new(0)), calls: AtomicUsize::new(0) });
    let provider: Arc<dyn ModelProvider> = held.clone();
    let links: Vec<Link<'_>> = Vec::new();
    let mut notes = Vec::new();
    let first = w.calls.open(&provider, &links, &request(), Duration::from_secs(5), None, &mut notes).await;
    let first = first.ok().unwrap();
    // The second call cannot start while the first answer streams.
    let (w2, p2) = (w.clone(), provider.clone());
    let second = tokio::spawn(async move {
        let links: Vec<Link<'_>> = Vec::new();
        let mut notes = Vec::new();
        w2.calls.open(&p2, &links, &request(), Duration::from_secs(5), None, &mut notes).await.is_ok()
    });
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert_eq!(held.calls.load(Ordering::SeqCst), 1, "the second call waits for the slot");
    held.gate.add_permits(10);
    let rest: Vec<_> = first.stream.collect().await;
    assert_eq!(rest.len(), 2);
    assert!(second.await.unwrap(), "the slot freed, the second call went out");
    assert_eq!(held.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_cancellation_is_neither_retried_nor_passed_to_a_fallback() {
    let w = world(settings(3));
    let canceled = Staged::new("primary", vec![Step::Fail(ProviderError::canceled())]);
    let backup = Staged::new("backup", vec![Step::Answer("from backup")]);
    let primary: Arc<dyn ModelProvider> = canceled.clone();
    let (answer, notes) = open(&w, &primary, &[(backup.clone(), binding("backup", "small"))]).await;
    assert_eq!(answer, Err((ProviderErrorKind::Canceled, "primary".into())));
    assert_eq!((canceled.calls(), backup.calls(), notes.len()), (1, 0, 0));
}

#[tokio::test]
async fn a_breaker_opened_by_the_calls_own_failures_still_fails_it_with_the_real_error() {
    let breaker = BreakerSettings { failure_threshold: 1, ..BreakerSettings::default() };
    let w = world(ResilienceSettings { breaker, ..settings(2) });
    let slow = Staged::new("primary", vec![Step::Fail(ProviderError::timeout("slow"))]);
    let primary: Arc<dyn ModelProvider> = slow.clone();
    let (answer, _) = open(&w, &primary, &[]).await;
    assert_eq!(answer, Err((ProviderErrorKind::Timeout, "primary".into())), "a timeout, not 'no call was made'");
    assert_eq!(slow.calls(), 1, "the breaker it opened stopped the retries");
}

#[tokio::test]
async fn waiting_for_a_slot_past_the_runs_time_never_counts_against_the_breaker_nor_moves_on() {
    let breaker = BreakerSettings { failure_threshold: 1, ..BreakerSettings::default() };
    let w = world(ResilienceSettings { breaker, max_concurrent_calls_per_provider: Some(1), ..settings(0) });
    let held = Arc::new(Held { gate: Arc::new(tokio::sync::Semaphore::new(0)), calls: AtomicUsize::new(0) });
    let provider: Arc<dyn ModelProvider> = held.clone();
    let links: Vec<Link<'_>> = Vec::new();
    let mut notes = Vec::new();
    let first = w.calls.open(&provider, &links, &request(), Duration::from_secs(5), None, &mut notes).await;
    assert!(first.is_ok(), "the only slot is taken");
    // The next call's time is already up: it gets no slot, and the provider is not blamed.
    let backup = Staged::new("backup", vec![Step::Answer("from backup")]);
    let chain: Vec<(Arc<dyn ModelProvider>, ModelBinding)> = vec![(backup.clone(), binding("backup", "small"))];
    let links: Vec<Link<'_>> = chain.iter().map(|(p, b)| Link { provider: p, binding: Some(b) }).collect();
    let until = Some(w.clock.now());
    let second = w.calls.open(&provider, &links, &request(), Duration::from_secs(5), until, &mut notes).await;
    assert!(matches!(second, Err(ref f) if f.error.kind == ProviderErrorKind::Timeout && f.provider == "held"));
    assert_eq!(w.breakers.get("held").await.unwrap(), Default::default(), "nothing counted");
    assert_eq!(backup.calls(), 0, "no link is tried once the run's time is spent");
}

/// A breaker store that counts its statements.
#[derive(Default)]
struct Counting {
    inner: MemoryBreakerStore,
    reads: AtomicUsize,
    writes: AtomicUsize,
}

#[async_trait::async_trait]
impl BreakerStore for Counting {
    async fn get(&self, p: &str) -> Result<tracon_core::model::breaker::BreakerState, tracon_core::error::StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.get(p).await
    }
    async fn failed(
        &self,
        p: &str,
        now: chrono::DateTime<chrono::Utc>,
        threshold: u32,
        probe: bool,
    ) -> Result<tracon_core::model::breaker::BreakerState, tracon_core::error::StoreError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.failed(p, now, threshold, probe).await
    }
    async fn succeeded(
        &self,
        p: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), tracon_core::error::StoreError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.succeeded(p, now).await
    }
    async fn claim_probe(
        &self,
        p: &str,
        now: chrono::DateTime<chrono::Utc>,
        due: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
    ) -> Result<bool, tracon_core::error::StoreError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.claim_probe(p, now, due, until).await
    }
}

#[tokio::test]
async fn a_healthy_provider_costs_the_breaker_one_read_per_instance_and_no_statement_per_call() {
    let store = Arc::new(Counting::default());
    let clock = Arc::new(ShiftedClock::default());
    let calls = ModelCalls::new(settings(0), store.clone(), clock.clone());
    let w = World { calls, clock, breakers: Arc::new(MemoryBreakerStore::default()) };
    let primary: Arc<dyn ModelProvider> = Staged::new("primary", vec![Step::Answer("hi")]);
    for _ in 0..50 {
        w.clock.advance(5_000);
        assert!(open(&w, &primary, &[]).await.0.is_ok());
    }
    assert_eq!((store.reads.load(Ordering::SeqCst), store.writes.load(Ordering::SeqCst)), (1, 0));
    // After a failure it reads (at most once a second) and writes until a success resets it.
    let flaky: Arc<dyn ModelProvider> = Staged::new("flaky", vec![status(500), Step::Answer("back")]);
    assert!(open(&w, &flaky, &[]).await.0.is_err());
    w.clock.advance(2_000);
    assert!(open(&w, &flaky, &[]).await.0.is_ok());
    let (reads, writes) = (store.reads.load(Ordering::SeqCst), store.writes.load(Ordering::SeqCst));
    assert_eq!(
        (reads, writes),
        (3, 2),
        "flaky: its first read, a re-read of the dirty state; the failure and the reset"
    );
    for _ in 0..10 {
        w.clock.advance(5_000);
        open(&w, &flaky, &[]).await.0.ok();
    }
    assert_eq!(
        (store.reads.load(Ordering::SeqCst), store.writes.load(Ordering::SeqCst)),
        (3, 2),
        "clean again: silent"
    );
}
