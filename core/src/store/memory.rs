//! In-memory stores: the zero-setup default and the reference for the contract tests.
//! Everything is keyed by tenant first, exactly as the SQL stores are.

use std::collections::{BTreeMap, HashMap};
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

#[derive(Default)]
pub struct MemoryRunStore {
    runs: Mutex<HashMap<(TenantId, RunId), RunRecord>>,
    calls: Mutex<HashMap<(TenantId, RunId), Vec<ToolCallRecord>>>,
}

#[async_trait::async_trait]
impl RunStore for MemoryRunStore {
    async fn create_run(&self, tenant: &TenantId, run: &RunRecord) -> Result<(), StoreError> {
        let mut runs = lock(&self.runs);
        let key = (tenant.clone(), run.id);
        if runs.contains_key(&key) {
            return Err(StoreError::Conflict("A run with this id already exists.".into()));
        }
        let mut row = run.clone();
        row.tenant = Some(tenant.clone());
        runs.insert(key, row);
        Ok(())
    }

    async fn finish_run(&self, tenant: &TenantId, id: RunId, end: &RunEnd) -> Result<(), StoreError> {
        let mut runs = lock(&self.runs);
        let run = runs.get_mut(&(tenant.clone(), id)).ok_or(StoreError::NotFound)?;
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
        Ok(lock(&self.runs).get(&(tenant.clone(), id)).cloned())
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
