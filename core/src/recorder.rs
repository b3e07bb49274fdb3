//! The run recorder: the single writer of a run's event log.
//!
//! Every event gets the next sequence number (gapless from 1) and a timestamp, goes to the
//! registered [`RunEventSink`]s at once, and is buffered for the store. Deltas (and the
//! start, the end of a model turn, attached documents) are batched, so the number of store
//! writes does not grow with the number of tokens, nor with how long the answer streams: the
//! buffer is written
//!
//! - with the statement of a step that the run writes anyway: a tool round's calls' starts
//!   travel with the step ledger's write, a call's ending with its record
//!   ([`Recorder::along`]), so a tool call costs one statement, not three;
//! - when a custom event arrives (a follower needs it at once);
//! - when it holds `flush_max_events` events or `flush_max_bytes` of text (a memory bound);
//! - when `flush_interval` has passed since the last write, **only while someone follows the
//!   log** (a follow signal, [`crate::runs::drain::Signal::Follow`], reached this instance in
//!   the last few seconds) — or always, on a host that does not hear signals (a Worker, a
//!   Lambda function), where nobody could say so; checked on each event and on the run's poll
//!   tick, so a silent model does not hide what was already said;
//! - with the run's heartbeat ([`crate::runs::execute::with_heartbeat`]), so a crash loses at
//!   most a heartbeat's worth of an unfollowed run's deltas;
//! - and last, with the terminal event, by the statement that closes the run row.
//!
//! A run without tool calls is therefore two round trips whatever its length: open the row,
//! close it. Each write returns the run's cancel flag ([`RunStore::append_events`]), which the
//! run's cancel watch reads instead of asking the store itself.
//!
//! Recording never breaks a run: a failed write is logged and its batch kept for the next
//! write (up to `max_buffered_events`, beyond which the oldest are dropped and logged); a
//! sink that fails is disabled for the rest of that run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::{Config, ConfigError};
use crate::events::{InvalidCustomEvent, RecordedEvent, RunEvent, check_custom_type};
use crate::names::{RunId, TenantId};
use crate::ports::Clock;
use crate::runs::drain::{Drain, LocalRun};
use crate::runs::store::RunStore;

/// What is recorded, and how writes are batched (`Tracon:RunRecording:*`).
#[derive(Debug, Clone)]
pub struct RecordingSettings {
    /// Record runs at all (default on).
    pub enabled: bool,
    /// Record reasoning deltas (default off: they can run far longer than the answer and
    /// restate user input). They still stream to the caller.
    pub record_reasoning_deltas: bool,
    /// Keep the run's input for `GET /api/runs/{id}/input` (default on).
    pub record_input: bool,
    pub flush_max_events: usize,
    /// Text (deltas' characters, in bytes) buffered before a write (`FlushMaxBytes`, 256 KiB).
    pub flush_max_bytes: usize,
    /// The longest a batch waits while the log is followed, or on a host that hears no
    /// signals (`FlushIntervalSeconds`, 0.5).
    pub flush_interval: Duration,
    pub max_buffered_events: usize,
}

impl Default for RecordingSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            record_reasoning_deltas: false,
            record_input: true,
            flush_max_events: 4096,
            flush_max_bytes: 256 * 1024,
            flush_interval: Duration::from_millis(500),
            max_buffered_events: 10_000,
        }
    }
}

impl RecordingSettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            enabled: config.bool("Tracon:RunRecording:Enabled")?.unwrap_or(d.enabled),
            record_reasoning_deltas: config
                .bool("Tracon:RunRecording:RecordReasoningDeltas")?
                .unwrap_or(d.record_reasoning_deltas),
            record_input: config.bool("Tracon:RunRecording:RecordInput")?.unwrap_or(d.record_input),
            flush_max_events: config
                .parse::<usize>("Tracon:RunRecording:FlushMaxEvents")?
                .unwrap_or(d.flush_max_events)
                .max(1),
            flush_max_bytes: config
                .parse::<usize>("Tracon:RunRecording:FlushMaxBytes")?
                .unwrap_or(d.flush_max_bytes)
                .max(1),
            flush_interval: config.seconds("Tracon:RunRecording:FlushIntervalSeconds")?.unwrap_or(d.flush_interval),
            max_buffered_events: d.max_buffered_events,
        })
    }
}

/// Receives every recorded event as it is written, in addition to the store. It runs on the
/// hot path: queue the event and return. An `Err` disables the sink for the rest of the run.
#[async_trait::async_trait]
pub trait RunEventSink: Send + Sync {
    async fn on_event(&self, tenant: &TenantId, run: RunId, event: &RecordedEvent) -> Result<(), String>;
}

struct State {
    next_sequence: u64,
    pending: Vec<RecordedEvent>,
    /// The text the pending deltas carry, in bytes.
    pending_bytes: usize,
    last_write: DateTime<Utc>,
    sink_disabled: Vec<bool>,
}

/// The single writer of one run's log.
pub struct Recorder {
    tenant: TenantId,
    run_id: RunId,
    store: Arc<dyn RunStore>,
    clock: Arc<dyn Clock>,
    settings: RecordingSettings,
    sinks: Vec<Arc<dyn RunEventSink>>,
    state: Mutex<State>,
    /// Serialises store writes so batches land in sequence order.
    write_lock: tokio::sync::Mutex<()>,
    writes: AtomicU64,
    /// Where signals reach this run: whether the host hears them, whether a follower asked.
    signals: Option<(Arc<Drain>, Option<Arc<LocalRun>>)>,
    /// The last write said the run's executor is to stop.
    stop: AtomicBool,
    /// The run row, which every write waits for.
    opening: crate::runs::opening::Opening,
}

impl Recorder {
    pub fn new(
        tenant: TenantId,
        run_id: RunId,
        store: Arc<dyn RunStore>,
        clock: Arc<dyn Clock>,
        settings: RecordingSettings,
        sinks: Vec<Arc<dyn RunEventSink>>,
    ) -> Self {
        let now = clock.now();
        let sink_count = sinks.len();
        Self {
            tenant,
            run_id,
            store,
            clock,
            settings,
            sinks,
            state: Mutex::new(State {
                next_sequence: 1,
                pending: Vec::new(),
                pending_bytes: 0,
                last_write: now,
                sink_disabled: vec![false; sink_count],
            }),
            write_lock: tokio::sync::Mutex::new(()),
            writes: AtomicU64::new(0),
            signals: None,
            stop: AtomicBool::new(false),
            opening: crate::runs::opening::Opening::written(),
        }
    }

    /// The run row is still being written ([`crate::runs::opening`]): writes wait for it.
    pub fn opening(mut self, opening: crate::runs::opening::Opening) -> Self {
        self.opening = opening;
        self
    }

    /// The run row, as [`Self::opening`] set it.
    pub fn row(&self) -> &crate::runs::opening::Opening {
        &self.opening
    }

    /// Writes on the time bound only while the run is followed, when `drain` hears signals
    /// (see the module's documentation); without this, always on the time bound.
    pub fn hearing(mut self, drain: Arc<Drain>) -> Self {
        let local = drain.local(self.run_id);
        self.signals = Some((drain, local));
        self
    }

    /// Whether a write said the run's executor is to stop (a cancel, or the run was closed).
    pub fn told_to_stop(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The time bound of a batch while the log is followed.
    pub fn flush_interval(&self) -> Duration {
        self.settings.flush_interval
    }

    /// When the store last answered a write (and so said whether to stop).
    pub fn last_write(&self) -> DateTime<Utc> {
        self.state().last_write
    }

    /// How long a batch may wait now: the time bound, or none (size, steps and the end only)
    /// for an unfollowed run on a host that hears signals.
    fn time_bound(&self, now: DateTime<Utc>) -> Option<Duration> {
        match &self.signals {
            // A run registered here (a queued run's is not) hears its follow signals.
            Some((drain, Some(local))) if drain.heard().is_some() => {
                local.followed(now.timestamp_millis()).then_some(self.settings.flush_interval)
            }
            _ => Some(self.settings.flush_interval),
        }
    }

    fn is_due(&self, st: &State, now: DateTime<Utc>) -> bool {
        self.time_bound(now).is_some_and(|bound| (now - st.last_write).to_std().is_ok_and(|d| d >= bound))
    }

    /// Numbers the next event `after + 1`: a run going on in a later attempt appends to its log.
    pub fn continue_after(self, after: u64) -> Self {
        crate::sync::lock(&self.state).next_sequence = after + 1;
        self
    }

    pub fn run_id(&self) -> RunId {
        self.run_id
    }

    pub fn enabled(&self) -> bool {
        self.settings.enabled
    }

    /// Events recorded but not yet written.
    pub fn pending(&self) -> usize {
        self.state().pending.len()
    }

    /// Store writes so far (for tests and the recording benchmark).
    pub fn store_writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one event; returns its sequence number, or `None` when it is not recorded.
    pub async fn record(&self, event: &RunEvent) -> Option<u64> {
        self.record_inner(event, false).await
    }

    /// Records an event but leaves writing it to [`take_pending`](Self::take_pending) — the
    /// terminal event, which travels with the statement that closes the run row.
    pub async fn record_held(&self, event: &RunEvent) -> Option<u64> {
        self.record_inner(event, true).await
    }

    async fn record_inner(&self, event: &RunEvent, hold: bool) -> Option<u64> {
        if !self.settings.enabled {
            return None;
        }
        if matches!(event, RunEvent::ReasoningDelta { .. }) && !self.settings.record_reasoning_deltas {
            return None;
        }
        let now = self.clock.now();
        // What a follower needs promptly (a tool call starting or settling, a custom event)
        // is written at once; the rest rides with the next write.
        let batchable = hold
            || matches!(
                event,
                RunEvent::RunStarted { .. }
                    | RunEvent::MessageDelta { .. }
                    | RunEvent::ReasoningDelta { .. }
                    | RunEvent::MessageCompleted { .. }
                    | RunEvent::DocumentsAttached { .. }
            );
        let (recorded, write_now, live_sinks) = {
            let mut st = self.state();
            let recorded = RecordedEvent { sequence: st.next_sequence, timestamp: now, event: event.clone() };
            st.next_sequence += 1;
            st.pending.push(recorded.clone());
            st.pending_bytes += text_bytes(event);
            let full =
                st.pending.len() >= self.settings.flush_max_events || st.pending_bytes >= self.settings.flush_max_bytes;
            let write_now = !hold && (!batchable || full || self.is_due(&st, now));
            let live: Vec<usize> = (0..self.sinks.len()).filter(|i| !st.sink_disabled[*i]).collect();
            (recorded, write_now, live)
        };
        for i in live_sinks {
            if let Some(sink) = self.sinks.get(i)
                && let Err(detail) = sink.on_event(&self.tenant, self.run_id, &recorded).await
            {
                tracing::warn!(run_id = %self.run_id, sink = i, detail = %detail, "run event sink failed; disabled for the rest of this run");
                self.state().sink_disabled[i] = true;
            }
        }
        if write_now {
            self.flush().await;
        }
        Some(recorded.sequence)
    }

    /// Records a tool's own event (`RunEventType.Custom`).
    pub async fn record_custom(&self, custom_type: &str, payload: String) -> Result<Option<u64>, InvalidCustomEvent> {
        check_custom_type(custom_type)?;
        Ok(self.record(&RunEvent::Custom { custom_type: custom_type.to_owned(), payload }).await)
    }

    /// Takes every event not yet written (for the statement that closes the run). Give them
    /// back with [`restore`](Self::restore) if that statement fails.
    pub async fn take_pending(&self) -> Vec<RecordedEvent> {
        // The row first (already written, by the time a run closes it).
        let _ = self.opening.wait().await;
        let _writer = self.write_lock.lock().await;
        let mut st = self.state();
        st.pending_bytes = 0;
        std::mem::take(&mut st.pending)
    }

    /// The buffered events, taken to travel with another statement of the run's (the step
    /// ledger's write, a tool call's record) under the recorder's write lock, so no later
    /// batch overtakes them. [`Along::written`] once that statement succeeded; dropped
    /// otherwise (a failure, a cancelled write), the events go back in front of the buffer.
    /// Empty when the run's row was never written (the run is abandoned unwritten).
    pub async fn along(&self) -> Along<'_> {
        let opened = self.opening.wait().await.is_ok();
        let writer = self.write_lock.lock().await;
        let events = if opened {
            let mut st = self.state();
            st.pending_bytes = 0;
            std::mem::take(&mut st.pending)
        } else {
            Vec::new()
        };
        Along { recorder: self, _writer: writer, events, now: self.clock.now(), done: false }
    }

    /// Puts events taken by [`take_pending`](Self::take_pending) back in front.
    pub fn restore(&self, mut events: Vec<RecordedEvent>) {
        let mut st = self.state();
        events.append(&mut st.pending);
        st.pending_bytes = events.iter().map(|e| text_bytes(&e.event)).sum();
        st.pending = events;
    }

    /// Counts one store write made on the recorder's behalf.
    pub fn count_write(&self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes the buffer when `flush_interval` has passed since the last write. Called on
    /// the run's poll tick while the model is silent, so a follower of the log is never
    /// further behind than that, even when no new event would trigger a write.
    pub async fn flush_if_due(&self) {
        let due = {
            let st = self.state();
            !st.pending.is_empty() && self.is_due(&st, self.clock.now())
        };
        if due {
            self.flush().await;
        }
    }

    /// Writes everything buffered (one store call). Failures are logged, never raised.
    pub async fn flush(&self) {
        // Nothing is written before the row; a run whose row failed is abandoned unwritten.
        if self.opening.wait().await.is_err() {
            return;
        }
        let _writer = self.write_lock.lock().await;
        let batch = {
            let mut st = self.state();
            st.pending_bytes = 0;
            std::mem::take(&mut st.pending)
        };
        if batch.is_empty() {
            return;
        }
        let now = self.clock.now();
        self.writes.fetch_add(1, Ordering::Relaxed);
        match self.store.append_events(&self.tenant, self.run_id, &batch, now).await {
            Ok(stop) => {
                self.state().last_write = now;
                if stop {
                    self.stop.store(true, Ordering::Relaxed);
                }
            }
            Err(e) => {
                tracing::warn!(run_id = %self.run_id, events = batch.len(), error = ?e, "could not record run events; keeping them for the next write");
                let mut st = self.state();
                let mut kept = batch;
                kept.append(&mut st.pending);
                if kept.len() > self.settings.max_buffered_events {
                    let drop = kept.len() - self.settings.max_buffered_events;
                    tracing::error!(run_id = %self.run_id, dropped = drop, "run event buffer full; dropping the oldest unrecorded events");
                    kept.drain(..drop);
                }
                st.pending_bytes = kept.iter().map(|e| text_bytes(&e.event)).sum();
                st.pending = kept;
                st.last_write = now;
            }
        }
    }
}

/// Buffered events on their way with another statement: see [`Recorder::along`].
pub struct Along<'a> {
    recorder: &'a Recorder,
    _writer: tokio::sync::MutexGuard<'a, ()>,
    events: Vec<RecordedEvent>,
    now: DateTime<Utc>,
    done: bool,
}

impl Along<'_> {
    pub fn events(&self) -> &[RecordedEvent] {
        &self.events
    }

    /// When the statement is made (the run's heartbeat moves to it with the events).
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// The statement carrying the events succeeded.
    pub fn written(mut self) {
        self.done = true;
        if !self.events.is_empty() {
            self.recorder.writes.fetch_add(1, Ordering::Relaxed);
            self.recorder.state().last_write = self.now;
        }
    }
}

impl Drop for Along<'_> {
    fn drop(&mut self) {
        if !self.done && !self.events.is_empty() {
            tracing::warn!(run_id = %self.recorder.run_id, events = self.events.len(), "could not record run events with their step; keeping them for the next write");
            self.recorder.restore(std::mem::take(&mut self.events));
        }
    }
}

/// The text an event carries that can grow without bound (a delta's), in bytes.
fn text_bytes(event: &RunEvent) -> usize {
    match event {
        RunEvent::MessageDelta { text } | RunEvent::ReasoningDelta { text } | RunEvent::MessageCompleted { text } => {
            text.len()
        }
        _ => 0,
    }
}

#[async_trait::async_trait]
impl crate::events::CustomEvents for Recorder {
    async fn record_custom(&self, custom_type: &str, payload: String) -> Result<Option<u64>, InvalidCustomEvent> {
        Recorder::record_custom(self, custom_type, payload).await
    }
}
