//! In-memory stores: the zero-setup default and the reference for the contract tests.
//! Everything is keyed by tenant first, exactly as the SQL stores are.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};

use super::{DefinitionStore, RunEnd, RunRecord, RunStore, StoreError, StoredDefinition, ToolCallRecord};
use crate::definition::AgentDefinition;
use crate::names::{AgentName, RunId, TenantId};
use crate::tools::pipeline::LateCompletion;

/// Locks, recovering from a poisoned lock: the maps stay consistent because every
/// critical section below is a single insert or update.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
pub struct MemoryDefinitionStore {
    rows: Mutex<BTreeMap<(TenantId, String), StoredDefinition>>,
}

#[async_trait::async_trait]
impl DefinitionStore for MemoryDefinitionStore {
    async fn get(&self, tenant: &TenantId, name: &AgentName) -> Result<Option<StoredDefinition>, StoreError> {
        Ok(lock(&self.rows).get(&(tenant.clone(), name.as_str().to_owned())).cloned())
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<StoredDefinition>, StoreError> {
        Ok(lock(&self.rows)
            .iter()
            .filter(|((t, _), _)| t == tenant)
            .skip(skip)
            .take(take)
            .map(|(_, v)| v.clone())
            .collect())
    }

    async fn create(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError> {
        let mut rows = lock(&self.rows);
        let key = (tenant.clone(), definition.name.clone());
        if rows.contains_key(&key) {
            return Err(StoreError::Conflict(format!("An agent named '{}' already exists.", definition.name)));
        }
        let stored = StoredDefinition { definition, version: 1, created_at: now, updated_at: now };
        rows.insert(key, stored.clone());
        Ok(stored)
    }

    async fn update(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError> {
        let mut rows = lock(&self.rows);
        let key = (tenant.clone(), definition.name.clone());
        let Some(row) = rows.get_mut(&key) else {
            return Err(StoreError::NotFound);
        };
        row.definition = definition;
        row.version += 1;
        row.updated_at = now;
        Ok(row.clone())
    }

    async fn delete(&self, tenant: &TenantId, name: &AgentName) -> Result<bool, StoreError> {
        Ok(lock(&self.rows).remove(&(tenant.clone(), name.as_str().to_owned())).is_some())
    }
}

/// Runs kept by default before the oldest are forgotten: memory is the zero-setup store,
/// and a long-running local server must not grow without bound.
pub const DEFAULT_MAX_RUNS: usize = 10_000;

pub struct MemoryRunStore {
    runs: Mutex<Runs>,
    calls: Mutex<HashMap<(TenantId, RunId), Vec<ToolCallRecord>>>,
    max_runs: usize,
}

#[derive(Default)]
struct Runs {
    rows: HashMap<(TenantId, RunId), RunRecord>,
    /// Creation order, for eviction.
    order: VecDeque<(TenantId, RunId)>,
}

impl Default for MemoryRunStore {
    fn default() -> Self {
        Self::with_max_runs(DEFAULT_MAX_RUNS)
    }
}

impl MemoryRunStore {
    /// Keeps at most `max_runs` runs (and their tool calls); the oldest go first.
    pub fn with_max_runs(max_runs: usize) -> Self {
        Self { runs: Mutex::default(), calls: Mutex::default(), max_runs: max_runs.max(1) }
    }
}

#[async_trait::async_trait]
impl RunStore for MemoryRunStore {
    async fn create_run(&self, tenant: &TenantId, run: &RunRecord) -> Result<(), StoreError> {
        let evicted = {
            let mut runs = lock(&self.runs);
            let key = (tenant.clone(), run.id);
            if runs.rows.contains_key(&key) {
                return Err(StoreError::Conflict("A run with this id already exists.".into()));
            }
            let mut row = run.clone();
            row.tenant = Some(tenant.clone());
            runs.rows.insert(key.clone(), row);
            runs.order.push_back(key);
            let mut evicted = Vec::new();
            while runs.rows.len() > self.max_runs {
                let Some(oldest) = runs.order.pop_front() else { break };
                runs.rows.remove(&oldest);
                evicted.push(oldest);
            }
            evicted
        };
        if !evicted.is_empty() {
            let mut calls = lock(&self.calls);
            for key in evicted {
                calls.remove(&key);
            }
        }
        Ok(())
    }

    async fn finish_run(&self, tenant: &TenantId, id: RunId, end: &RunEnd) -> Result<(), StoreError> {
        let mut runs = lock(&self.runs);
        let run = runs.rows.get_mut(&(tenant.clone(), id)).ok_or(StoreError::NotFound)?;
        run.status = end.status;
        run.ended_at = Some(end.ended_at);
        run.duration_ms = Some(end.duration_ms);
        run.usage = end.usage;
        run.cost = end.cost.clone();
        run.model_provider = end.model_provider.clone();
        run.model = end.model.clone();
        run.error = end.error.clone();
        Ok(())
    }

    async fn get_run(&self, tenant: &TenantId, id: RunId) -> Result<Option<RunRecord>, StoreError> {
        Ok(lock(&self.runs).rows.get(&(tenant.clone(), id)).cloned())
    }

    async fn record_tool_call(&self, tenant: &TenantId, call: &ToolCallRecord) -> Result<(), StoreError> {
        let mut calls = lock(&self.calls);
        let list = calls.entry((tenant.clone(), call.run_id)).or_default();
        match list.iter_mut().find(|c| c.call_id == call.call_id) {
            Some(existing) => *existing = call.clone(),
            None => list.push(call.clone()),
        }
        Ok(())
    }

    async fn complete_tool_call_late(&self, tenant: &TenantId, late: &LateCompletion) -> Result<(), StoreError> {
        let mut calls = lock(&self.calls);
        let call = calls
            .get_mut(&(tenant.clone(), late.run_id))
            .and_then(|list| list.iter_mut().find(|c| c.call_id == late.call_id))
            .ok_or(StoreError::NotFound)?;
        call.late_completed_at = Some(late.completed_at);
        call.late_duration_ms = Some(late.duration_ms);
        match &late.result {
            Ok(text) => call.late_result = Some(text.clone()),
            Err(e) => call.late_error = Some(e.clone()),
        }
        Ok(())
    }

    async fn list_tool_calls(&self, tenant: &TenantId, run: RunId) -> Result<Vec<ToolCallRecord>, StoreError> {
        Ok(lock(&self.calls).get(&(tenant.clone(), run)).cloned().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(clock_ms: i64) -> RunRecord {
        let at = chrono::DateTime::from_timestamp_millis(clock_ms).unwrap_or_default();
        RunRecord {
            id: RunId(uuid::Uuid::new_v4()),
            tenant: None,
            agent_name: "a".into(),
            agent_version: None,
            status: crate::store::RunStatus::Running,
            started_at: at,
            ended_at: None,
            duration_ms: None,
            usage: None,
            cost: None,
            model_provider: None,
            model: None,
            error: None,
            session_id: None,
            parent_run_id: None,
            root_run_id: None,
            depth: 0,
            user_id: None,
            labels: BTreeMap::new(),
            heartbeat_at: None,
        }
    }

    #[tokio::test]
    async fn the_oldest_runs_are_forgotten_beyond_the_cap() {
        let store = MemoryRunStore::with_max_runs(2);
        let t = TenantId::default_tenant();
        let (a, b, c) = (run(1), run(2), run(3));
        for r in [&a, &b, &c] {
            store.create_run(&t, r).await.unwrap();
        }
        assert!(store.get_run(&t, a.id).await.unwrap().is_none());
        assert!(store.get_run(&t, b.id).await.unwrap().is_some());
        assert!(store.get_run(&t, c.id).await.unwrap().is_some());
    }
}
