//! Runs in process memory (the newest `max_runs` of them): the zero-setup default and the
//! contract suite's reference.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use chrono::{DateTime, Utc};

use super::store::{
    CancelOutcome, LateCompletion, MAX_TREE_RUNS, ModelStep, RunEnd, RunFilter, RunInputRecord, RunRecord, RunStats,
    RunStatus, RunStore, StaleRun, ToolCallRecord,
};
use crate::definitions::Generations;
use crate::error::StoreError;
use crate::events::{RecordedEvent, RunEvent};
use crate::names::{RunId, TenantId};
use crate::sync::lock;

/// Runs kept by default before the oldest are forgotten: memory is the zero-setup store,
/// and a long-running local server must not grow without bound.
pub const DEFAULT_MAX_RUNS: usize = 10_000;

pub struct MemoryRunStore {
    inner: Mutex<Runs>,
    max_runs: usize,
    /// The definition stores' generations, which [`RunStore::create_run_at`] guards on.
    generations: Generations,
}

/// Everything recorded about one run.
struct RunEntry {
    row: RunRecord,
    events: Vec<RecordedEvent>,
    calls: Vec<ToolCallRecord>,
    steps: Vec<ModelStep>,
    input: Option<RunInputRecord>,
}

#[derive(Default)]
struct Runs {
    rows: HashMap<(TenantId, RunId), RunEntry>,
    /// Creation order, for eviction.
    order: VecDeque<(TenantId, RunId)>,
}

/// Appends a batch all-or-nothing, like one INSERT statement: a sequence already stored
/// (or out of order within the batch) refuses the whole batch.
fn append_checked(log: &mut Vec<RecordedEvent>, events: &[RecordedEvent]) -> Result<(), StoreError> {
    let last = log.last().map_or(0, |l| l.sequence);
    let mut expected = last;
    for ev in events {
        if ev.sequence <= last {
            return Err(StoreError::Conflict(format!("event {} of this run is already stored", ev.sequence)));
        }
        if ev.sequence <= expected {
            return Err(StoreError::Conflict("event sequences in a batch must increase".into()));
        }
        expected = ev.sequence;
    }
    log.extend_from_slice(events);
    Ok(())
}

/// Writes a new run's entry, forgetting the oldest beyond `max_runs`.
fn insert(inner: &mut Runs, max_runs: usize, tenant: &TenantId, run: &RunRecord, input: Option<&RunInputRecord>) {
    let key = (tenant.clone(), run.id);
    let mut row = run.clone();
    row.tenant = Some(tenant.clone());
    let entry = RunEntry { row, events: Vec::new(), calls: Vec::new(), steps: Vec::new(), input: input.cloned() };
    inner.rows.insert(key.clone(), entry);
    inner.order.push_back(key);
    while inner.rows.len() > max_runs {
        let Some(oldest) = inner.order.pop_front() else { break };
        inner.rows.remove(&oldest);
    }
}

/// Inserts or replaces a call's record by its id, keeping its place.
fn upsert_call(calls: &mut Vec<ToolCallRecord>, call: &ToolCallRecord) {
    match calls.iter_mut().find(|c| c.call_id == call.call_id) {
        Some(existing) => *existing = call.clone(),
        None => calls.push(call.clone()),
    }
}

impl Default for MemoryRunStore {
    fn default() -> Self {
        Self::with_max_runs(DEFAULT_MAX_RUNS)
    }
}

impl MemoryRunStore {
    /// Keeps at most `max_runs` runs with everything recorded about them; the oldest go first.
    pub fn with_max_runs(max_runs: usize) -> Self {
        Self { inner: Mutex::default(), max_runs: max_runs.max(1), generations: Generations::default() }
    }

    /// Guards [`RunStore::create_run_at`] on `generations`, the definition stores' own.
    pub fn sharing(mut self, generations: Generations) -> Self {
        self.generations = generations;
        self
    }

    fn with_entry<T>(
        &self,
        tenant: &TenantId,
        run: RunId,
        f: impl FnOnce(&mut RunEntry) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut inner = lock(&self.inner);
        let entry = inner.rows.get_mut(&(tenant.clone(), run)).ok_or(StoreError::NotFound)?;
        f(entry)
    }
}

#[async_trait::async_trait]
impl RunStore for MemoryRunStore {
    async fn create_run(
        &self,
        tenant: &TenantId,
        run: &RunRecord,
        input: Option<&RunInputRecord>,
    ) -> Result<(), StoreError> {
        let mut inner = lock(&self.inner);
        let key = (tenant.clone(), run.id);
        if inner.rows.contains_key(&key) {
            return Err(StoreError::Conflict("A run with this id already exists.".into()));
        }
        insert(&mut inner, self.max_runs, tenant, run, input);
        Ok(())
    }

    async fn create_run_at(
        &self,
        tenant: &TenantId,
        run: &RunRecord,
        input: Option<&RunInputRecord>,
        definitions: u64,
    ) -> Result<bool, StoreError> {
        let mut inner = lock(&self.inner);
        // The guard first, as Postgres's `INSERT … SELECT … WHERE` selects no row to insert.
        if self.generations.current(tenant) != definitions {
            return Ok(false);
        }
        let key = (tenant.clone(), run.id);
        if inner.rows.contains_key(&key) {
            return Err(StoreError::Conflict("A run with this id already exists.".into()));
        }
        insert(&mut inner, self.max_runs, tenant, run, input);
        Ok(true)
    }

    async fn finish_run(
        &self,
        tenant: &TenantId,
        id: RunId,
        end: &RunEnd,
        events: &[RecordedEvent],
    ) -> Result<(), StoreError> {
        self.with_entry(tenant, id, |e| {
            append_checked(&mut e.events, events)?;
            let run = &mut e.row;
            run.status = end.status;
            run.ended_at = Some(end.ended_at);
            run.duration_ms = Some(end.duration_ms);
            run.usage = end.usage;
            run.cost = end.cost.clone();
            run.model_provider = end.model_provider.clone();
            run.model = end.model.clone();
            run.error = end.error.clone();
            run.heartbeat_at = Some(end.ended_at);
            Ok(())
        })
    }

    async fn get_run(&self, tenant: &TenantId, id: RunId) -> Result<Option<RunRecord>, StoreError> {
        Ok(lock(&self.inner).rows.get(&(tenant.clone(), id)).map(|e| e.row.clone()))
    }

    async fn list_tree(&self, tenant: &TenantId, root: RunId) -> Result<Vec<RunRecord>, StoreError> {
        let inner = lock(&self.inner);
        let mut tree: Vec<RunRecord> = inner
            .rows
            .iter()
            .filter(|((t, id), e)| t == tenant && (*id == root || e.row.root_run_id == Some(root)))
            .map(|(_, e)| e.row.clone())
            .collect();
        tree.sort_by_key(|r| (r.depth, r.started_at, r.id.0));
        tree.truncate(MAX_TREE_RUNS);
        Ok(tree)
    }

    async fn list_runs(
        &self,
        tenant: &TenantId,
        filter: &RunFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        filter.check_text()?;
        let inner = lock(&self.inner);
        let mut rows: Vec<&RunRecord> = inner
            .rows
            .iter()
            .filter(|((t, _), e)| t == tenant && filter.matches(&e.row))
            .map(|(_, e)| &e.row)
            .collect();
        // Newest first; ids are UUIDv7, so they break ties in creation order.
        rows.sort_by(|a, b| b.started_at.cmp(&a.started_at).then(b.id.cmp(&a.id)));
        Ok(rows.into_iter().skip(skip).take(take).cloned().collect())
    }

    async fn stats(&self, tenant: &TenantId, filter: &RunFilter) -> Result<RunStats, StoreError> {
        filter.check_text()?;
        let inner = lock(&self.inner);
        let mut stats = RunStats::default();
        for ((t, _), e) in &inner.rows {
            if t == tenant && filter.matches(&e.row) {
                stats.add(&e.row);
            }
        }
        Ok(stats)
    }

    async fn append_events(
        &self,
        tenant: &TenantId,
        run: RunId,
        events: &[RecordedEvent],
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.with_entry(tenant, run, |e| {
            append_checked(&mut e.events, events)?;
            e.row.heartbeat_at = Some(now);
            Ok(to_stop(e))
        })
    }

    async fn answers(&self, tenant: &TenantId, runs: &[RunId]) -> Result<BTreeMap<RunId, String>, StoreError> {
        let inner = lock(&self.inner);
        let answer = |run: &RunId| {
            let entry = inner.rows.get(&(tenant.clone(), *run))?;
            entry.events.iter().rev().find_map(|e| match &e.event {
                RunEvent::RunCompleted { text, .. } => Some((*run, text.clone())),
                _ => None,
            })
        };
        Ok(runs.iter().filter_map(answer).collect())
    }

    async fn read_events(
        &self,
        tenant: &TenantId,
        run: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let inner = lock(&self.inner);
        let Some(e) = inner.rows.get(&(tenant.clone(), run)) else {
            return Ok(Vec::new());
        };
        let start = e.events.partition_point(|ev| ev.sequence <= after);
        Ok(e.events[start..].iter().take(limit).cloned().collect())
    }

    async fn record_tool_call(&self, tenant: &TenantId, call: &ToolCallRecord) -> Result<(), StoreError> {
        self.with_entry(tenant, call.run_id, |e| {
            upsert_call(&mut e.calls, call);
            Ok(())
        })
    }

    async fn last_sequence(&self, tenant: &TenantId, run: RunId) -> Result<u64, StoreError> {
        let inner = lock(&self.inner);
        Ok(inner.rows.get(&(tenant.clone(), run)).and_then(|e| e.events.last()).map_or(0, |e| e.sequence))
    }

    async fn begin_step(
        &self,
        tenant: &TenantId,
        run: RunId,
        step: Option<&ModelStep>,
        starts: &[ToolCallRecord],
    ) -> Result<bool, StoreError> {
        let mut inner = lock(&self.inner);
        let Some(e) = inner.rows.get_mut(&(tenant.clone(), run)) else { return Ok(false) };
        if e.row.status != RunStatus::Running {
            return Ok(false);
        }
        if let Some(step) = step {
            if e.steps.iter().any(|s| s.step == step.step) {
                return Err(StoreError::Conflict(format!("step {} of this run is already stored", step.step)));
            }
            e.steps.push(step.clone());
            e.steps.sort_by_key(|s| s.step);
        }
        for call in starts {
            upsert_call(&mut e.calls, call);
        }
        Ok(true)
    }

    async fn yield_run(
        &self,
        tenant: &TenantId,
        run: RunId,
        events: &[RecordedEvent],
        usage: Option<&crate::model::Usage>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut inner = lock(&self.inner);
        let Some(e) = inner.rows.get_mut(&(tenant.clone(), run)) else { return Ok(false) };
        if e.row.status != RunStatus::Running || e.row.yielded_at.is_some() {
            return Ok(false);
        }
        append_checked(&mut e.events, events)?;
        e.row.usage = usage.copied();
        e.row.yielded_at = Some(now);
        e.row.heartbeat_at = Some(now);
        Ok(true)
    }

    async fn resume_yielded(&self, tenant: &TenantId, run: RunId, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let mut inner = lock(&self.inner);
        let Some(e) = inner.rows.get_mut(&(tenant.clone(), run)) else { return Ok(false) };
        if e.row.status != RunStatus::Running || e.row.yielded_at.is_none() {
            return Ok(false);
        }
        e.row.yielded_at = None;
        e.row.heartbeat_at = Some(now);
        Ok(true)
    }

    async fn list_steps(&self, tenant: &TenantId, run: RunId) -> Result<Vec<ModelStep>, StoreError> {
        Ok(lock(&self.inner).rows.get(&(tenant.clone(), run)).map(|e| e.steps.clone()).unwrap_or_default())
    }

    async fn open_continuation(&self, tenant: &TenantId, from: RunId, next: &RunRecord) -> Result<bool, StoreError> {
        let mut inner = lock(&self.inner);
        if inner.rows.contains_key(&(tenant.clone(), next.id)) {
            return Err(StoreError::Conflict("A run with this id already exists.".into()));
        }
        let Some(e) = inner.rows.get_mut(&(tenant.clone(), from)) else { return Ok(false) };
        if !e.row.status.is_terminal() || e.row.continued_by_run_id.is_some() {
            return Ok(false);
        }
        e.row.continued_by_run_id = Some(next.id);
        let mut row = next.clone();
        row.continued_from_run_id = Some(from);
        insert(&mut inner, self.max_runs, tenant, &row, None);
        Ok(true)
    }

    async fn complete_tool_call_late(&self, tenant: &TenantId, late: &LateCompletion) -> Result<(), StoreError> {
        self.with_entry(tenant, late.run_id, |e| {
            let call = e.calls.iter_mut().find(|c| c.call_id == late.call_id).ok_or(StoreError::NotFound)?;
            call.late_completed_at = Some(late.completed_at);
            call.late_duration_ms = Some(late.duration_ms);
            match &late.result {
                Ok(text) => call.late_result = Some(text.clone()),
                Err(err) => call.late_error = Some(err.clone()),
            }
            Ok(())
        })
    }

    async fn list_tool_calls(&self, tenant: &TenantId, run: RunId) -> Result<Vec<ToolCallRecord>, StoreError> {
        Ok(lock(&self.inner).rows.get(&(tenant.clone(), run)).map(|e| e.calls.clone()).unwrap_or_default())
    }

    async fn record_input(&self, tenant: &TenantId, run: RunId, input: &RunInputRecord) -> Result<(), StoreError> {
        self.with_entry(tenant, run, |e| {
            e.input = Some(input.clone());
            Ok(())
        })
    }

    async fn get_input(&self, tenant: &TenantId, run: RunId) -> Result<Option<RunInputRecord>, StoreError> {
        Ok(lock(&self.inner).rows.get(&(tenant.clone(), run)).and_then(|e| e.input.clone()))
    }

    async fn start_queued(
        &self,
        tenant: &TenantId,
        run: RunId,
        now: DateTime<Utc>,
    ) -> Result<Option<bool>, StoreError> {
        let mut inner = lock(&self.inner);
        let Some(e) = inner.rows.get_mut(&(tenant.clone(), run)) else { return Ok(None) };
        if e.row.status != RunStatus::Queued {
            return Ok(None);
        }
        e.row.status = RunStatus::Running;
        e.row.started_at = now;
        e.row.heartbeat_at = Some(now);
        Ok(Some(e.row.cancel_requested))
    }

    async fn request_cancel(&self, tenant: &TenantId, run: RunId) -> Result<CancelOutcome, StoreError> {
        self.with_entry(tenant, run, |e| {
            if !matches!(e.row.status, RunStatus::Running | RunStatus::Queued) {
                return Ok(CancelOutcome::AlreadyEnded(e.row.status));
            }
            e.row.cancel_requested = true;
            Ok(CancelOutcome::Requested)
        })
    }

    async fn is_cancel_requested(&self, tenant: &TenantId, run: RunId) -> Result<bool, StoreError> {
        Ok(lock(&self.inner).rows.get(&(tenant.clone(), run)).is_some_and(to_stop))
    }

    async fn heartbeat(&self, tenant: &TenantId, run: RunId, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let mut inner = lock(&self.inner);
        let Some(e) = inner.rows.get_mut(&(tenant.clone(), run)) else { return Ok(true) };
        if e.row.status == RunStatus::Running {
            e.row.heartbeat_at = Some(now);
        }
        Ok(to_stop(e))
    }

    async fn stale_runs(&self, stale_before: DateTime<Utc>, limit: usize) -> Result<Vec<StaleRun>, StoreError> {
        let inner = lock(&self.inner);
        let mut stale: Vec<(DateTime<Utc>, StaleRun)> = inner
            .rows
            .iter()
            .filter_map(|((tenant, id), e)| {
                let seen = e.row.heartbeat_at.unwrap_or(e.row.started_at);
                (e.row.status == RunStatus::Running && seen < stale_before).then(|| {
                    let last_sequence = e.events.last().map_or(0, |ev| ev.sequence);
                    (seen, StaleRun { tenant: tenant.clone(), id: *id, started_at: e.row.started_at, last_sequence })
                })
            })
            .collect();
        stale.sort_by_key(|(seen, s)| (*seen, s.id.0));
        Ok(stale.into_iter().take(limit).map(|(_, s)| s).collect())
    }

    async fn close_stale(
        &self,
        tenant: &TenantId,
        id: RunId,
        stale_before: DateTime<Utc>,
        end: &RunEnd,
        events: &[RecordedEvent],
    ) -> Result<bool, StoreError> {
        {
            let inner = lock(&self.inner);
            let Some(e) = inner.rows.get(&(tenant.clone(), id)) else { return Ok(false) };
            if e.row.status != RunStatus::Running || e.row.heartbeat_at.unwrap_or(e.row.started_at) >= stale_before {
                return Ok(false);
            }
        }
        self.finish_run(tenant, id, end, events).await.map(|()| true)
    }
}

/// Whether a run's executor is to stop: a cancel was asked, or the run no longer runs.
fn to_stop(e: &RunEntry) -> bool {
    e.row.cancel_requested || !matches!(e.row.status, RunStatus::Running | RunStatus::Queued)
}
