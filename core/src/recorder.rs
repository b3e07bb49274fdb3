//! The run recorder: the single writer of a run's event log.
//!
//! Every event gets the next sequence number (gapless from 1) and a timestamp, goes to the
//! registered [`RunEventSink`]s at once, and is buffered for the store. Deltas (and the
//! start, the end of a model turn, attached documents) are batched, so the number of store
//! writes does not grow with the number of tokens: the buffer is written when a tool call
//! starts or settles or a custom event arrives (followers see those at once), when
//! `flush_interval` has passed since the last write (checked on each event and on the run's
//! poll tick, so a silent model does not hide what was already said), and — only as a memory bound — when it
//! holds `flush_max_events`. Each write is one [`RunStore::append_events`] call; the last
//! batch, with the terminal event, is written by the statement that closes the run row. A
//! run without tool calls is therefore two round trips: open the row, close it.
//!
//! Recording never breaks a run: a failed write is logged and its batch kept for the next
//! write (up to `max_buffered_events`, beyond which the oldest are dropped and logged); a
//! sink that fails is disabled for the rest of that run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::{Config, ConfigError};
use crate::events::{InvalidCustomEvent, RecordedEvent, RunEvent, check_custom_type};
use crate::names::{RunId, TenantId};
use crate::ports::Clock;
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
            flush_interval: Duration::from_millis(200),
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
                last_write: now,
                sink_disabled: vec![false; sink_count],
            }),
            write_lock: tokio::sync::Mutex::new(()),
            writes: AtomicU64::new(0),
        }
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
            let due = (now - st.last_write).to_std().is_ok_and(|d| d >= self.settings.flush_interval);
            let write_now = !hold && (!batchable || st.pending.len() >= self.settings.flush_max_events || due);
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
        let _writer = self.write_lock.lock().await;
        std::mem::take(&mut self.state().pending)
    }

    /// Puts events taken by [`take_pending`](Self::take_pending) back in front.
    pub fn restore(&self, mut events: Vec<RecordedEvent>) {
        let mut st = self.state();
        events.append(&mut st.pending);
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
            !st.pending.is_empty()
                && (self.clock.now() - st.last_write).to_std().is_ok_and(|d| d >= self.settings.flush_interval)
        };
        if due {
            self.flush().await;
        }
    }

    /// Writes everything buffered (one store call). Failures are logged, never raised.
    pub async fn flush(&self) {
        let _writer = self.write_lock.lock().await;
        let batch = std::mem::take(&mut self.state().pending);
        if batch.is_empty() {
            return;
        }
        let now = self.clock.now();
        self.writes.fetch_add(1, Ordering::Relaxed);
        match self.store.append_events(&self.tenant, self.run_id, &batch, now).await {
            Ok(()) => self.state().last_write = now,
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
                st.pending = kept;
                st.last_write = now;
            }
        }
    }
}

#[async_trait::async_trait]
impl crate::events::CustomEvents for Recorder {
    async fn record_custom(&self, custom_type: &str, payload: String) -> Result<Option<u64>, InvalidCustomEvent> {
        Recorder::record_custom(self, custom_type, payload).await
    }
}
