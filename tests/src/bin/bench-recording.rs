//! `bench-recording`: what recording a run costs.
//!
//! 1. **Store writes per streamed run.** Runs an agent whose (scripted) model streams N
//!    text deltas, for N = 10 … 10 000, through the real run service against the in-memory
//!    store wrapped in a counter, and reports `append_events` calls and events recorded.
//!    Deltas are batched: the writes must not grow with N.
//! 2. **Events per second the recorder sustains.** Records M message deltas through one
//!    [`Recorder`] into (a) a store that does nothing and (b) the in-memory store, with the
//!    default batching and with a write per event (`flush_max_events = 1`), and reports the
//!    medians of several rounds and the ratio.
//! 3. **What a tool round and a child run add.** Runs three agents many times through the
//!    run service — a plain answer, one tool round, and one call to another agent (whose
//!    child run is the plain answer) — and reports store calls and microseconds per
//!    run (medians of rounds): the step ledger's share of a tool round, and the child-run
//!    overhead beyond a tool round whose body is a plain run.
//!
//! ```text
//! cargo run --release -p tracon-tests --bin bench-recording
//! ```

// A report tool: its output is the point.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tracon_core::definition::AgentDefinition;
use tracon_core::error::StoreError;
use tracon_core::events::{RecordedEvent, RunEvent};
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::names::{AgentName, RunId, TenantId};
use tracon_core::ports::{Clock, tokio_rt};
use tracon_core::recorder::{Recorder, RecordingSettings};
use tracon_core::runs;
use tracon_core::runs::memory::MemoryRunStore;
use tracon_core::runs::request::RunRequest;
use tracon_core::runs::store::LateCompletion;
use tracon_core::runs::store::{
    CancelOutcome, ModelStep, RunEnd, RunFilter, RunInputRecord, RunRecord, RunStats, RunStore, StaleRun,
    ToolCallRecord,
};
use tracon_core::runtime::RuntimeBuilder;
use tracon_core::stores::Stores;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Wraps a store and counts event writes and every call (statement); `inner = None`
/// discards everything.
struct Counting {
    inner: Option<MemoryRunStore>,
    appends: AtomicU64,
    events: AtomicU64,
    calls: AtomicU64,
}

impl Counting {
    fn new(inner: Option<MemoryRunStore>) -> Self {
        Self { inner, appends: AtomicU64::new(0), events: AtomicU64::new(0), calls: AtomicU64::new(0) }
    }
}

macro_rules! delegate {
    ($self:ident, $default:expr, $s:ident => $call:expr) => {
        match {
            $self.calls.fetch_add(1, Ordering::Relaxed);
            &$self.inner
        } {
            Some($s) => $call.await,
            None => Ok($default),
        }
    };
}

#[async_trait::async_trait]
impl RunStore for Counting {
    async fn create_run(&self, t: &TenantId, r: &RunRecord, i: Option<&RunInputRecord>) -> Result<(), StoreError> {
        delegate!(self, (), s => s.create_run(t, r, i))
    }
    async fn create_run_at(
        &self,
        t: &TenantId,
        r: &RunRecord,
        i: Option<&RunInputRecord>,
        g: u64,
    ) -> Result<bool, StoreError> {
        delegate!(self, true, s => s.create_run_at(t, r, i, g))
    }
    async fn finish_run(&self, t: &TenantId, id: RunId, e: &RunEnd, ev: &[RecordedEvent]) -> Result<(), StoreError> {
        if !ev.is_empty() {
            self.appends.fetch_add(1, Ordering::Relaxed);
            self.events.fetch_add(ev.len() as u64, Ordering::Relaxed);
        }
        delegate!(self, (), s => s.finish_run(t, id, e, ev))
    }
    async fn get_run(&self, t: &TenantId, id: RunId) -> Result<Option<RunRecord>, StoreError> {
        delegate!(self, None, s => s.get_run(t, id))
    }
    async fn list_tree(&self, t: &TenantId, root: RunId) -> Result<Vec<RunRecord>, StoreError> {
        delegate!(self, Vec::new(), s => s.list_tree(t, root))
    }
    async fn list_runs(&self, t: &TenantId, f: &RunFilter, a: usize, b: usize) -> Result<Vec<RunRecord>, StoreError> {
        delegate!(self, Vec::new(), s => s.list_runs(t, f, a, b))
    }
    async fn stats(&self, t: &TenantId, f: &RunFilter) -> Result<RunStats, StoreError> {
        delegate!(self, RunStats::default(), s => s.stats(t, f))
    }
    async fn append_events(
        &self,
        t: &TenantId,
        id: RunId,
        ev: &[RecordedEvent],
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.appends.fetch_add(1, Ordering::Relaxed);
        self.events.fetch_add(ev.len() as u64, Ordering::Relaxed);
        delegate!(self, false, s => s.append_events(t, id, ev, now))
    }
    async fn read_events(
        &self,
        t: &TenantId,
        id: RunId,
        after: u64,
        n: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        delegate!(self, Vec::new(), s => s.read_events(t, id, after, n))
    }
    async fn answers(&self, t: &TenantId, runs: &[RunId]) -> Result<BTreeMap<RunId, String>, StoreError> {
        delegate!(self, BTreeMap::new(), s => s.answers(t, runs))
    }
    async fn record_tool_call(&self, t: &TenantId, c: &ToolCallRecord) -> Result<(), StoreError> {
        delegate!(self, (), s => s.record_tool_call(t, c))
    }
    async fn complete_tool_call_late(&self, t: &TenantId, l: &LateCompletion) -> Result<(), StoreError> {
        delegate!(self, (), s => s.complete_tool_call_late(t, l))
    }
    async fn last_sequence(&self, t: &TenantId, id: RunId) -> Result<u64, StoreError> {
        delegate!(self, 0, s => s.last_sequence(t, id))
    }
    async fn begin_step(
        &self,
        t: &TenantId,
        id: RunId,
        step: Option<&ModelStep>,
        starts: &[ToolCallRecord],
    ) -> Result<bool, StoreError> {
        delegate!(self, true, s => s.begin_step(t, id, step, starts))
    }
    async fn yield_run(
        &self,
        t: &TenantId,
        id: RunId,
        ev: &[RecordedEvent],
        usage: Option<&tracon_core::model::Usage>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        delegate!(self, false, s => s.yield_run(t, id, ev, usage, now))
    }
    async fn resume_yielded(&self, t: &TenantId, id: RunId, now: DateTime<Utc>) -> Result<bool, StoreError> {
        delegate!(self, false, s => s.resume_yielded(t, id, now))
    }
    async fn list_steps(&self, t: &TenantId, id: RunId) -> Result<Vec<ModelStep>, StoreError> {
        delegate!(self, Vec::new(), s => s.list_steps(t, id))
    }
    async fn open_continuation(&self, t: &TenantId, from: RunId, next: &RunRecord) -> Result<bool, StoreError> {
        delegate!(self, false, s => s.open_continuation(t, from, next))
    }
    async fn list_tool_calls(&self, t: &TenantId, id: RunId) -> Result<Vec<ToolCallRecord>, StoreError> {
        delegate!(self, Vec::new(), s => s.list_tool_calls(t, id))
    }
    async fn record_input(&self, t: &TenantId, id: RunId, i: &RunInputRecord) -> Result<(), StoreError> {
        delegate!(self, (), s => s.record_input(t, id, i))
    }
    async fn get_input(&self, t: &TenantId, id: RunId) -> Result<Option<RunInputRecord>, StoreError> {
        delegate!(self, None, s => s.get_input(t, id))
    }
    async fn start_queued(&self, t: &TenantId, id: RunId, now: DateTime<Utc>) -> Result<Option<bool>, StoreError> {
        delegate!(self, None, s => s.start_queued(t, id, now))
    }
    async fn request_cancel(&self, t: &TenantId, id: RunId) -> Result<CancelOutcome, StoreError> {
        delegate!(self, CancelOutcome::Requested, s => s.request_cancel(t, id))
    }
    async fn is_cancel_requested(&self, t: &TenantId, id: RunId) -> Result<bool, StoreError> {
        delegate!(self, false, s => s.is_cancel_requested(t, id))
    }
    async fn heartbeat(&self, t: &TenantId, id: RunId, now: DateTime<Utc>) -> Result<bool, StoreError> {
        delegate!(self, false, s => s.heartbeat(t, id, now))
    }
    async fn stale_runs(&self, before: DateTime<Utc>, n: usize) -> Result<Vec<StaleRun>, StoreError> {
        delegate!(self, Vec::new(), s => s.stale_runs(before, n))
    }
    async fn close_stale(
        &self,
        t: &TenantId,
        id: RunId,
        before: DateTime<Utc>,
        e: &RunEnd,
        ev: &[RecordedEvent],
    ) -> Result<bool, StoreError> {
        delegate!(self, false, s => s.close_stale(t, id, before, e, ev))
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The benches' run: `agent` asked to "go" by the platform itself.
fn go(agent: &str) -> Result<RunRequest, BoxError> {
    let caller = tracon_core::identity::Caller::internal();
    Ok(RunRequest::new(TenantId::default_tenant(), AgentName::parse(agent)?, "go".into(), caller, Default::default()))
}

async fn writes_per_run(deltas: usize) -> Result<(u64, u64, f64), BoxError> {
    let counting = Arc::new(Counting::new(Some(MemoryRunStore::default())));
    let mut stores = Stores::in_memory();
    stores.runs = counting.clone();
    let text: String = (0..deltas).map(|i| format!("t{i} ")).collect();
    let provider =
        ScriptedProvider::with_turns("script", vec![ScriptedTurn::text(text.trim_end()).with_usage(10, deltas as u64)]);
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .stores(stores)
        .add_provider(Arc::new(provider) as Arc<dyn ModelProvider>)
        .add_agent(AgentDefinition::new("a", "script", "m"))
        .build()?;
    let runtime = Arc::new(runtime);
    let prepared = runs::prepare::prepare(&runtime, go("a")?, None).await.map_err(|e| format!("{e:?}"))?;
    let started = Instant::now();
    let outcome = runs::execute::execute(&runtime, prepared, CancellationToken::new(), None).await;
    let seconds = started.elapsed().as_secs_f64();
    let events = counting.events.load(Ordering::Relaxed);
    Ok((outcome.event_writes, events, events as f64 / seconds))
}

async fn recorder_rate(store: Option<MemoryRunStore>, settings: RecordingSettings, events: usize) -> f64 {
    let counting: Arc<dyn RunStore> = Arc::new(Counting::new(store));
    let clock: Arc<dyn Clock> = Arc::new(tokio_rt::TokioClock);
    let run_id = RunId(uuid_v7());
    let tenant = TenantId::default_tenant();
    let row = RunRecord {
        heartbeat_at: None,
        ..RunRecord::opened(run_id, "a", None, tracon_core::runs::store::RunStatus::Running, clock.now())
    };
    let _ = counting.create_run(&tenant, &row, None).await;
    let recorder = Recorder::new(tenant, run_id, counting, clock, settings, Vec::new());
    let delta = RunEvent::MessageDelta { text: "token ".into() };
    let started = Instant::now();
    for _ in 0..events {
        recorder.record(&delta).await;
    }
    recorder.flush().await;
    events as f64 / started.elapsed().as_secs_f64()
}

/// Store statements and microseconds per run of each shape (median of `rounds` rounds of
/// `runs` runs, one after another).
async fn shapes(rounds: usize, runs: usize) -> Result<Vec<(&'static str, f64, f64)>, BoxError> {
    use serde_json::json;
    use tracon_core::model::Message;
    let counting = Arc::new(Counting::new(Some(MemoryRunStore::with_max_runs(1_000))));
    let mut stores = Stores::in_memory();
    stores.runs = counting.clone();
    let provider = ScriptedProvider::from_fn("script", |request| {
        let answered = matches!(request.messages.last(), Some(Message::Tool { .. }));
        match (request.system.as_deref(), answered) {
            (Some("TOOLED"), false) => ScriptedTurn::tool_call("lookup", json!({"id": 7})),
            (Some("PARENT"), false) => ScriptedTurn::tool_call("ask_plain", json!({"task": "go"})),
            _ => ScriptedTurn::text("done"),
        }
        .with_usage(10, 5)
    });
    let lookup = tracon_core::tools::ToolRegistration::new(
        "lookup",
        "Looks up.",
        json!({"type": "object"}),
        tracon_core::tools::tool_fn(|_, _| async { Ok(tracon_core::tools::ToolOutput::from("found")) }),
    );
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .stores(stores)
        .add_provider(Arc::new(provider) as Arc<dyn ModelProvider>)
        .add_tool(lookup)
        .add_agent(AgentDefinition::new("plain", "script", "m").with_instructions("PLAIN"))
        .add_agent(AgentDefinition::new("tooled", "script", "m").with_instructions("TOOLED").with_tools(&["lookup"]))
        .add_agent(AgentDefinition {
            callable_agent_names: vec!["plain".into()],
            ..AgentDefinition::new("parent", "script", "m").with_instructions("PARENT")
        })
        .build()?;
    let runtime = Arc::new(runtime);
    let mut out = Vec::new();
    for (label, agent) in [("plain answer", "plain"), ("one tool round", "tooled"), ("one child run", "parent")] {
        let (mut micros, mut statements) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let before = counting.calls.load(Ordering::Relaxed);
            let started = Instant::now();
            for _ in 0..runs {
                let prepared =
                    runs::prepare::prepare(&runtime, go(agent)?, None).await.map_err(|e| format!("{e:?}"))?;
                let outcome = runs::execute::execute(&runtime, prepared, CancellationToken::new(), None).await;
                if outcome.text != "done" {
                    return Err(format!("{agent}: the run answered {:?} ({:?})", outcome.text, outcome.failure).into());
                }
            }
            micros.push(started.elapsed().as_secs_f64() * 1e6 / runs as f64);
            statements.push((counting.calls.load(Ordering::Relaxed) - before) as f64 / runs as f64);
        }
        out.push((label, median(statements), median(micros)));
    }
    Ok(out)
}

fn uuid_v7() -> uuid::Uuid {
    tracon_core::ports::new_id(&tokio_rt::TokioClock)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    println!("== Tracon recording cost ==");
    println!("command: cargo run --release -p tracon-tests --bin bench-recording");
    println!();
    println!("-- store writes per streamed run (scripted model, in-memory store) --");
    println!("{:>8} {:>14} {:>16} {:>18}", "deltas", "store writes", "events recorded", "events/s (run)");
    for deltas in [10, 100, 1_000, 10_000] {
        let (writes, events, rate) = writes_per_run(deltas).await?;
        println!("{deltas:>8} {writes:>14} {events:>16} {rate:>18.0}");
    }
    println!();
    println!("-- events/second one recorder sustains (median of 7 rounds of 200 000 deltas) --");
    const EVENTS: usize = 200_000;
    let batched = RecordingSettings::default();
    let per_event = RecordingSettings { flush_max_events: 1, ..RecordingSettings::default() };
    let mut rows = Vec::new();
    for (label, memory, settings) in [
        ("no-op store, batched", false, batched.clone()),
        ("memory store, batched", true, batched),
        ("no-op store, write per event", false, per_event.clone()),
        ("memory store, write per event", true, per_event),
    ] {
        let mut rates = Vec::new();
        for _ in 0..7 {
            let store = memory.then(|| MemoryRunStore::with_max_runs(10));
            rates.push(recorder_rate(store, settings.clone(), EVENTS).await);
        }
        rows.push((label, median(rates)));
    }
    for (label, rate) in &rows {
        println!("{label:<32} {rate:>14.0} events/s");
    }
    if let (Some(b), Some(p)) = (rows.get(1), rows.get(3)) {
        println!("batched / write-per-event on the memory store: {:.1}x", b.1 / p.1);
    }
    println!();
    println!("-- one run's store calls and time (scripted model, memory store, median of 7 rounds of 2 000 runs) --");
    println!("{:<18} {:>16} {:>10}", "shape", "store calls/run", "us/run");
    let shapes = shapes(7, 2_000).await?;
    for (label, statements, micros) in &shapes {
        println!("{label:<18} {statements:>16.1} {micros:>10.1}");
    }
    if let [(_, ps, pt), (_, ts, tt), (_, cs, ct)] = shapes.as_slice() {
        println!(
            "a tool round adds {:.1} store calls and {:.1} us (one is the step ledger's: the model step and the call's start together)",
            ts - ps,
            tt - pt
        );
        println!(
            "a child run adds {:.1} store calls and {:.1} us over a tool round whose body is a plain run",
            cs - ts - ps,
            ct - tt - pt
        );
    }
    Ok(())
}
