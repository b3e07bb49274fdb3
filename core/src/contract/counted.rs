//! [`CountedRuns`]: a run store that counts what is asked of it, call by call — each call is
//! one statement on Postgres — and relays signals between instances as Postgres `NOTIFY`
//! does, for tests and benchmarks of what a run costs the store.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use chrono::{DateTime, Utc};

use crate::error::StoreError;
use crate::events::RecordedEvent;
use crate::model::Usage;
use crate::names::{RunId, TenantId};
use crate::runs::drain::{Drain, Signal};
use crate::runs::store::{
    CancelOutcome, LateCompletion, ModelStep, RunEnd, RunFilter, RunInputRecord, RunRecord, RunStats, RunStore,
    StaleRun, ToolCallRecord,
};

/// Wraps a run store: counts every call by method name and the events written, and tells the
/// drains [`relay_to`](Self::relay_to) names what a cancel or a follower asks (as the
/// Postgres store's `NOTIFY` tells every listening instance).
pub struct CountedRuns {
    inner: Arc<dyn RunStore>,
    calls: Mutex<BTreeMap<&'static str, u64>>,
    events: AtomicU64,
    relay: Mutex<Vec<Weak<Drain>>>,
    /// When set, each run row's write waits for a permit (to hold a run between its model
    /// call and its row).
    creates: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
}

impl CountedRuns {
    pub fn new(inner: Arc<dyn RunStore>) -> Self {
        Self {
            inner,
            calls: Mutex::default(),
            events: AtomicU64::new(0),
            relay: Mutex::default(),
            creates: Mutex::default(),
        }
    }

    /// From now on each run row's write waits for one of `gate`'s permits.
    pub fn gate_creates(&self, gate: Arc<tokio::sync::Semaphore>) {
        *self.creates.lock().unwrap() = Some(gate);
    }

    /// Signals through this store reach `drain` from now on.
    pub fn relay_to(&self, drain: &Arc<Drain>) {
        self.relay.lock().unwrap().push(Arc::downgrade(drain));
    }

    /// Calls of `method` so far.
    pub fn calls(&self, method: &str) -> u64 {
        self.calls.lock().unwrap().get(method).copied().unwrap_or(0)
    }

    /// Every call so far, by method.
    pub fn all_calls(&self) -> BTreeMap<&'static str, u64> {
        self.calls.lock().unwrap().clone()
    }

    /// Calls that write (the statements a run makes while it executes, reads aside).
    pub fn writes(&self) -> u64 {
        let calls = self.calls.lock().unwrap();
        calls.iter().filter(|(m, _)| !is_read(m)).map(|(_, n)| n).sum()
    }

    /// Events written so far (by event writes and closes).
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::SeqCst)
    }

    /// Forgets every count.
    pub fn reset(&self) {
        self.calls.lock().unwrap().clear();
        self.events.store(0, Ordering::SeqCst);
    }

    fn count(&self, method: &'static str) {
        *self.calls.lock().unwrap().entry(method).or_default() += 1;
    }

    fn tell(&self, signal: Signal) {
        let now = Utc::now().timestamp_millis();
        for drain in self.relay.lock().unwrap().iter().filter_map(Weak::upgrade) {
            drain.hear(signal.clone(), now);
        }
    }
}

fn is_read(method: &str) -> bool {
    matches!(
        method,
        "get_run"
            | "list_tree"
            | "list_runs"
            | "stats"
            | "read_events"
            | "last_sequence"
            | "answers"
            | "list_steps"
            | "list_tool_calls"
            | "get_input"
            | "is_cancel_requested"
            | "stale_runs"
    )
}

/// The impl: each listed method counted and delegated, then the methods written out.
macro_rules! counted {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)* { $($rest:tt)* }) => {
        #[async_trait::async_trait]
        impl RunStore for CountedRuns {
            $(async fn $name(&self, $($arg: $ty),*) -> Result<$out, StoreError> {
                self.count(stringify!($name));
                self.inner.$name($($arg),*).await
            })*
            $($rest)*
        }
    };
}

counted! {
        fn get_run(tenant: &TenantId, id: RunId) -> Option<RunRecord>;
        fn list_tree(tenant: &TenantId, root: RunId) -> Vec<RunRecord>;
        fn list_runs(tenant: &TenantId, filter: &RunFilter, skip: usize, take: usize) -> Vec<RunRecord>;
        fn stats(tenant: &TenantId, filter: &RunFilter) -> RunStats;
        fn read_events(tenant: &TenantId, run: RunId, after: u64, limit: usize) -> Vec<RecordedEvent>;
        fn last_sequence(tenant: &TenantId, run: RunId) -> u64;
        fn answers(tenant: &TenantId, runs: &[RunId]) -> BTreeMap<RunId, String>;
        fn record_tool_call(tenant: &TenantId, call: &ToolCallRecord) -> ();
        fn begin_step(tenant: &TenantId, run: RunId, step: Option<&ModelStep>, starts: &[ToolCallRecord]) -> bool;
        fn list_steps(tenant: &TenantId, run: RunId) -> Vec<ModelStep>;
        fn resume_yielded(tenant: &TenantId, run: RunId, now: DateTime<Utc>) -> bool;
        fn open_continuation(tenant: &TenantId, from: RunId, next: &RunRecord) -> bool;
        fn complete_tool_call_late(tenant: &TenantId, late: &LateCompletion) -> ();
        fn list_tool_calls(tenant: &TenantId, run: RunId) -> Vec<ToolCallRecord>;
        fn record_input(tenant: &TenantId, run: RunId, input: &RunInputRecord) -> ();
        fn get_input(tenant: &TenantId, run: RunId) -> Option<RunInputRecord>;
        fn start_queued(tenant: &TenantId, run: RunId, now: DateTime<Utc>) -> Option<bool>;
        fn is_cancel_requested(tenant: &TenantId, run: RunId) -> bool;
        fn heartbeat(tenant: &TenantId, run: RunId, now: DateTime<Utc>) -> bool;
        fn stale_runs(stale_before: DateTime<Utc>, limit: usize) -> Vec<StaleRun>;
    {
    async fn create_run(
        &self,
        tenant: &TenantId,
        run: &RunRecord,
        input: Option<&RunInputRecord>,
    ) -> Result<(), StoreError> {
        self.count("create_run");
        let gate = self.creates.lock().unwrap().clone();
        if let Some(gate) = gate {
            gate.acquire().await.map_err(|_| StoreError::Unavailable { detail: "gate closed".into() })?.forget();
        }
        self.inner.create_run(tenant, run, input).await
    }

    async fn create_run_at(
        &self,
        tenant: &TenantId,
        run: &RunRecord,
        input: Option<&RunInputRecord>,
        definitions: u64,
    ) -> Result<bool, StoreError> {
        self.count("create_run");
        let gate = self.creates.lock().unwrap().clone();
        if let Some(gate) = gate {
            gate.acquire().await.map_err(|_| StoreError::Unavailable { detail: "gate closed".into() })?.forget();
        }
        self.inner.create_run_at(tenant, run, input, definitions).await
    }

    async fn begin_step_with(
        &self,
        tenant: &TenantId,
        run: RunId,
        step: Option<&ModelStep>,
        starts: &[ToolCallRecord],
        events: &[RecordedEvent],
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.count("begin_step_with");
        self.events.fetch_add(events.len() as u64, Ordering::SeqCst);
        self.inner.begin_step_with(tenant, run, step, starts, events, now).await
    }

    async fn record_tool_call_with(
        &self,
        tenant: &TenantId,
        call: &ToolCallRecord,
        events: &[RecordedEvent],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.count("record_tool_call_with");
        self.events.fetch_add(events.len() as u64, Ordering::SeqCst);
        self.inner.record_tool_call_with(tenant, call, events, now).await
    }

    async fn finish_run(
        &self,
        tenant: &TenantId,
        id: RunId,
        end: &RunEnd,
        events: &[RecordedEvent],
    ) -> Result<(), StoreError> {
        self.count("finish_run");
        self.events.fetch_add(events.len() as u64, Ordering::SeqCst);
        self.inner.finish_run(tenant, id, end, events).await
    }

    async fn append_events(
        &self,
        tenant: &TenantId,
        run: RunId,
        events: &[RecordedEvent],
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.count("append_events");
        self.events.fetch_add(events.len() as u64, Ordering::SeqCst);
        self.inner.append_events(tenant, run, events, now).await
    }

    async fn yield_run(
        &self,
        tenant: &TenantId,
        run: RunId,
        events: &[RecordedEvent],
        usage: Option<&Usage>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.count("yield_run");
        self.events.fetch_add(events.len() as u64, Ordering::SeqCst);
        self.inner.yield_run(tenant, run, events, usage, now).await
    }

    async fn close_stale(
        &self,
        tenant: &TenantId,
        id: RunId,
        stale_before: DateTime<Utc>,
        end: &RunEnd,
        events: &[RecordedEvent],
    ) -> Result<bool, StoreError> {
        self.count("close_stale");
        self.inner.close_stale(tenant, id, stale_before, end, events).await
    }

    async fn request_cancel(&self, tenant: &TenantId, run: RunId) -> Result<CancelOutcome, StoreError> {
        self.count("request_cancel");
        let outcome = self.inner.request_cancel(tenant, run).await?;
        if outcome == CancelOutcome::Requested {
            self.tell(Signal::Cancel(run));
        }
        Ok(outcome)
    }

    async fn signal(&self, signal: Signal) -> Result<(), StoreError> {
        self.count("signal");
        self.tell(signal.clone());
        self.inner.signal(signal).await
    }
}
}
