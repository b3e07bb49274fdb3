//! In-memory stores: the zero-setup default and the reference for the contract tests.
//! Everything is keyed by tenant first, exactly as the SQL stores are.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};

use super::{
    CancelOutcome, DefinitionStore, RunEnd, RunFilter, RunInputRecord, RunRecord, RunStats, RunStatus, RunStore,
    SessionItem, SessionParent, SessionRecord, SessionStore, SessionWrite, StaleRun, StoreError, StoredDefinition,
    ToolCallRecord,
};
use crate::approvals::{ApprovalDecision, ApprovalRecord, ApprovalRule, ApprovalStatus, ApprovalStore};
use crate::audit::{AuditEntry, AuditFilter, AuditStore, NewAuditEntry};
use crate::definition::AgentDefinition;
use crate::events::RecordedEvent;
use crate::idempotency::{Claim, IdempotencyStore, KeyRef};
use crate::jobs::{JobError, JobFilter, JobRecord, JobStatus, JobStore, Lease, LeaseRequest, Outcome};
use crate::keys::{ApiKeyRecord, ApiKeyStore};
use crate::names::{AgentName, RunId, TenantId};
use crate::tenants::{TenantRecord, TenantStore};
use crate::tools::pipeline::LateCompletion;

/// Locks, recovering from a poisoned lock: every critical section below leaves the maps
/// consistent before it could panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---- definitions ----------------------------------------------------------------------------

/// Every version of every definition, per tenant and name (oldest first).
#[derive(Default)]
pub struct MemoryDefinitionStore {
    rows: Mutex<BTreeMap<(TenantId, String), Vec<StoredDefinition>>>,
}

#[async_trait::async_trait]
impl DefinitionStore for MemoryDefinitionStore {
    async fn get(&self, tenant: &TenantId, name: &AgentName) -> Result<Option<StoredDefinition>, StoreError> {
        Ok(lock(&self.rows).get(&(tenant.clone(), name.as_str().to_owned())).and_then(|v| v.last().cloned()))
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<StoredDefinition>, StoreError> {
        Ok(lock(&self.rows)
            .iter()
            .filter(|((t, _), _)| t == tenant)
            .filter_map(|(_, v)| v.last().cloned())
            .skip(skip)
            .take(take)
            .collect())
    }

    async fn create(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError> {
        crate::store::check_definition_text(&definition)?;
        let mut rows = lock(&self.rows);
        let key = (tenant.clone(), definition.name.clone());
        if rows.contains_key(&key) {
            return Err(StoreError::Conflict(format!("An agent named '{}' already exists.", definition.name)));
        }
        let stored = StoredDefinition { definition, version: 1, created_at: now, updated_at: now };
        rows.insert(key, vec![stored.clone()]);
        Ok(stored)
    }

    async fn update(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError> {
        crate::store::check_definition_text(&definition)?;
        let mut rows = lock(&self.rows);
        let key = (tenant.clone(), definition.name.clone());
        let history = rows.get_mut(&key).ok_or(StoreError::NotFound)?;
        let (version, created_at) = match history.last() {
            Some(last) => (last.version + 1, last.created_at),
            None => (1, now),
        };
        let stored = StoredDefinition { definition, version, created_at, updated_at: now };
        history.push(stored.clone());
        Ok(stored)
    }

    async fn delete(&self, tenant: &TenantId, name: &AgentName) -> Result<bool, StoreError> {
        Ok(lock(&self.rows).remove(&(tenant.clone(), name.as_str().to_owned())).is_some())
    }

    async fn versions(&self, tenant: &TenantId, name: &AgentName) -> Result<Vec<StoredDefinition>, StoreError> {
        Ok(lock(&self.rows)
            .get(&(tenant.clone(), name.as_str().to_owned()))
            .map(|v| v.iter().rev().cloned().collect())
            .unwrap_or_default())
    }

    async fn version(
        &self,
        tenant: &TenantId,
        name: &AgentName,
        version: u32,
    ) -> Result<Option<StoredDefinition>, StoreError> {
        Ok(lock(&self.rows)
            .get(&(tenant.clone(), name.as_str().to_owned()))
            .and_then(|v| v.iter().find(|d| d.version == version).cloned()))
    }
}

// ---- runs -----------------------------------------------------------------------------------

/// Runs kept by default before the oldest are forgotten: memory is the zero-setup store,
/// and a long-running local server must not grow without bound.
pub const DEFAULT_MAX_RUNS: usize = 10_000;

pub struct MemoryRunStore {
    inner: Mutex<Runs>,
    max_runs: usize,
}

/// Everything recorded about one run.
struct RunEntry {
    row: RunRecord,
    events: Vec<RecordedEvent>,
    calls: Vec<ToolCallRecord>,
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

impl Default for MemoryRunStore {
    fn default() -> Self {
        Self::with_max_runs(DEFAULT_MAX_RUNS)
    }
}

impl MemoryRunStore {
    /// Keeps at most `max_runs` runs with everything recorded about them; the oldest go first.
    pub fn with_max_runs(max_runs: usize) -> Self {
        Self { inner: Mutex::default(), max_runs: max_runs.max(1) }
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
        let mut row = run.clone();
        row.tenant = Some(tenant.clone());
        inner.rows.insert(key.clone(), RunEntry { row, events: Vec::new(), calls: Vec::new(), input: input.cloned() });
        inner.order.push_back(key);
        while inner.rows.len() > self.max_runs {
            let Some(oldest) = inner.order.pop_front() else { break };
            inner.rows.remove(&oldest);
        }
        Ok(())
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
    ) -> Result<(), StoreError> {
        self.with_entry(tenant, run, |e| {
            append_checked(&mut e.events, events)?;
            e.row.heartbeat_at = Some(now);
            Ok(())
        })
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
            match e.calls.iter_mut().find(|c| c.call_id == call.call_id) {
                Some(existing) => *existing = call.clone(),
                None => e.calls.push(call.clone()),
            }
            Ok(())
        })
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
        Ok(lock(&self.inner).rows.get(&(tenant.clone(), run)).is_some_and(|e| e.row.cancel_requested))
    }

    async fn heartbeat(&self, tenant: &TenantId, run: RunId, now: DateTime<Utc>) -> Result<(), StoreError> {
        if let Some(e) = lock(&self.inner).rows.get_mut(&(tenant.clone(), run))
            && e.row.status == RunStatus::Running
        {
            e.row.heartbeat_at = Some(now);
        }
        Ok(())
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

// ---- sessions ---------------------------------------------------------------------------------

/// A session and its items, keyed by tenant and id.
type SessionRows = HashMap<(TenantId, String), (SessionRecord, Vec<SessionItem>)>;

#[derive(Default)]
pub struct MemorySessionStore {
    rows: Mutex<SessionRows>,
}

fn items_from(start: u64, write: &SessionWrite) -> impl Iterator<Item = SessionItem> + '_ {
    write.messages.iter().enumerate().map(move |(i, m)| SessionItem {
        sequence: start + i as u64,
        message: m.clone(),
        run_id: write.run_id,
        created_at: write.now,
    })
}

#[async_trait::async_trait]
impl SessionStore for MemorySessionStore {
    async fn get(&self, tenant: &TenantId, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        Ok(lock(&self.rows).get(&(tenant.clone(), id.to_owned())).map(|(r, _)| r.clone()))
    }

    async fn items(&self, tenant: &TenantId, id: &str) -> Result<Vec<SessionItem>, StoreError> {
        Ok(lock(&self.rows).get(&(tenant.clone(), id.to_owned())).map(|(_, i)| i.clone()).unwrap_or_default())
    }

    async fn list(
        &self,
        tenant: &TenantId,
        owner: Option<&str>,
        skip: usize,
        take: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        let rows = lock(&self.rows);
        let mut list: Vec<&SessionRecord> = rows
            .iter()
            .filter(|((t, _), (r, _))| t == tenant && owner.is_none_or(|o| r.owner_user_id.as_deref() == Some(o)))
            .map(|(_, (r, _))| r)
            .collect();
        list.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.id.cmp(&b.id)));
        Ok(list.into_iter().skip(skip).take(take).cloned().collect())
    }

    async fn try_create(&self, tenant: &TenantId, id: &str, write: &SessionWrite) -> Result<SessionRecord, StoreError> {
        let mut rows = lock(&self.rows);
        let key = (tenant.clone(), id.to_owned());
        if rows.contains_key(&key) {
            return Err(StoreError::Conflict("The session was created by another turn.".into()));
        }
        let items: Vec<SessionItem> = items_from(0, write).collect();
        let record = SessionRecord {
            id: id.to_owned(),
            agent_name: Some(write.agent_name.clone()),
            version: 1,
            item_count: items.len() as u64,
            created_at: write.now,
            updated_at: write.now,
            owner_user_id: write.owner_user_id.clone(),
            parent: None,
        };
        rows.insert(key, (record.clone(), items));
        Ok(record)
    }

    async fn try_append(
        &self,
        tenant: &TenantId,
        id: &str,
        expected_version: u64,
        write: &SessionWrite,
    ) -> Result<SessionRecord, StoreError> {
        let mut rows = lock(&self.rows);
        let (record, items) = rows.get_mut(&(tenant.clone(), id.to_owned())).ok_or(StoreError::NotFound)?;
        if record.version != expected_version {
            return Err(StoreError::Conflict("Another turn saved this session first.".into()));
        }
        items.extend(items_from(record.item_count, write));
        record.item_count = items.len() as u64;
        record.version += 1;
        record.updated_at = write.now;
        record.agent_name = Some(write.agent_name.clone());
        Ok(record.clone())
    }

    async fn delete(&self, tenant: &TenantId, id: &str) -> Result<bool, StoreError> {
        Ok(lock(&self.rows).remove(&(tenant.clone(), id.to_owned())).is_some())
    }

    async fn branch(
        &self,
        tenant: &TenantId,
        source: &str,
        up_to: u64,
        new_id: &str,
        owner_user_id: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        let mut rows = lock(&self.rows);
        let (parent, parent_items) = rows.get(&(tenant.clone(), source.to_owned())).ok_or(StoreError::NotFound)?;
        let new_key = (tenant.clone(), new_id.to_owned());
        if rows.contains_key(&new_key) {
            return Err(StoreError::Conflict(format!("A session named '{new_id}' already exists.")));
        }
        let items: Vec<SessionItem> = parent_items
            .iter()
            .filter(|i| i.sequence <= up_to)
            .map(|i| SessionItem { created_at: now, ..i.clone() })
            .collect();
        let record = SessionRecord {
            id: new_id.to_owned(),
            agent_name: parent.agent_name.clone(),
            version: 1,
            item_count: items.len() as u64,
            created_at: now,
            updated_at: now,
            owner_user_id,
            parent: Some(SessionParent { session_id: source.to_owned(), sequence: up_to }),
        };
        rows.insert(new_key, (record.clone(), items));
        Ok(record)
    }
}

// ---- API keys -------------------------------------------------------------------------------

/// Keys by id; the id is globally unique, the tenant is a field checked on every scoped call.
#[derive(Default)]
pub struct MemoryApiKeyStore {
    rows: Mutex<BTreeMap<String, ApiKeyRecord>>,
}

impl MemoryApiKeyStore {
    fn scoped<'a>(
        rows: &'a mut BTreeMap<String, ApiKeyRecord>,
        tenant: &TenantId,
        id: &str,
    ) -> Result<&'a mut ApiKeyRecord, StoreError> {
        rows.get_mut(id).filter(|k| &k.tenant == tenant).ok_or(StoreError::NotFound)
    }
}

#[async_trait::async_trait]
impl ApiKeyStore for MemoryApiKeyStore {
    async fn create(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        let mut rows = lock(&self.rows);
        if rows.contains_key(&key.id) {
            return Err(StoreError::Conflict(format!("an API key with id '{}' already exists", key.id)));
        }
        rows.insert(key.id.clone(), key.clone());
        Ok(())
    }

    async fn find(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        Ok(lock(&self.rows).get(id).cloned())
    }

    async fn get(&self, tenant: &TenantId, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        Ok(lock(&self.rows).get(id).filter(|k| &k.tenant == tenant).cloned())
    }

    async fn list(&self, tenant: &TenantId) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let mut keys: Vec<ApiKeyRecord> = lock(&self.rows).values().filter(|k| &k.tenant == tenant).cloned().collect();
        keys.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
        Ok(keys)
    }

    async fn revoke(&self, tenant: &TenantId, id: &str, at: DateTime<Utc>) -> Result<ApiKeyRecord, StoreError> {
        let mut rows = lock(&self.rows);
        let key = Self::scoped(&mut rows, tenant, id)?;
        key.revoked_at.get_or_insert(at);
        Ok(key.clone())
    }

    async fn rotate(
        &self,
        tenant: &TenantId,
        id: &str,
        hash: [u8; 32],
        at: DateTime<Utc>,
    ) -> Result<ApiKeyRecord, StoreError> {
        let mut rows = lock(&self.rows);
        let key = Self::scoped(&mut rows, tenant, id)?;
        if key.revoked_at.is_some() {
            return Err(StoreError::Conflict("a revoked API key cannot be rotated".into()));
        }
        key.hash = hash;
        key.rotated_at = Some(at);
        Ok(key.clone())
    }

    async fn touch(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        if let Some(key) = lock(&self.rows).get_mut(id) {
            key.last_used_at = Some(at);
        }
        Ok(())
    }
}

// ---- audit trail ----------------------------------------------------------------------------

/// Each tenant's chain, in sequence order.
#[derive(Default)]
pub struct MemoryAuditStore {
    chains: Mutex<HashMap<TenantId, Vec<AuditEntry>>>,
}

impl MemoryAuditStore {
    /// Test support: edits or removes entries behind the chain's back.
    pub fn tamper(&self, tenant: &TenantId, f: impl FnOnce(&mut Vec<AuditEntry>)) {
        f(lock(&self.chains).entry(tenant.clone()).or_default());
    }
}

#[async_trait::async_trait]
impl AuditStore for MemoryAuditStore {
    async fn append(&self, tenant: &TenantId, entry: NewAuditEntry) -> Result<AuditEntry, StoreError> {
        let mut chains = lock(&self.chains);
        let chain = chains.entry(tenant.clone()).or_default();
        let (sequence, previous) = chain.last().map_or((1, [0; 32]), |e| (e.sequence + 1, e.hash));
        let stored = AuditEntry::chained(tenant, sequence, &previous, entry);
        chain.push(stored.clone());
        Ok(stored)
    }

    async fn list(
        &self,
        tenant: &TenantId,
        filter: &AuditFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        filter.check_text()?;
        let chains = lock(&self.chains);
        let chain = chains.get(tenant).map(Vec::as_slice).unwrap_or_default();
        Ok(chain.iter().rev().filter(|e| filter.matches(e)).skip(skip).take(take).cloned().collect())
    }

    async fn chain(&self, tenant: &TenantId) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(lock(&self.chains).get(tenant).cloned().unwrap_or_default())
    }
}

// ---- approvals --------------------------------------------------------------------------------

/// Pending requests and rules, per tenant, in creation order.
#[derive(Default)]
pub struct MemoryApprovalStore {
    requests: Mutex<Vec<ApprovalRecord>>,
    rules: Mutex<Vec<ApprovalRule>>,
}

#[async_trait::async_trait]
impl ApprovalStore for MemoryApprovalStore {
    async fn create(&self, records: &[ApprovalRecord]) -> Result<(), StoreError> {
        let mut rows = lock(&self.requests);
        if records.iter().any(|r| rows.iter().any(|x| x.id == r.id)) {
            return Err(StoreError::Conflict("An approval request with this id exists.".into()));
        }
        rows.extend(records.iter().cloned());
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: uuid::Uuid) -> Result<Option<ApprovalRecord>, StoreError> {
        Ok(lock(&self.requests).iter().find(|r| r.tenant == *tenant && r.id == id).cloned())
    }

    async fn list_pending(
        &self,
        tenant: &TenantId,
        now: DateTime<Utc>,
        take: usize,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let rows = lock(&self.requests);
        let mut pending: Vec<ApprovalRecord> = rows
            .iter()
            .filter(|r| r.tenant == *tenant && r.status == ApprovalStatus::Pending && now < r.expires_at)
            .cloned()
            .collect();
        pending.sort_by_key(|r| (r.created_at, r.id));
        pending.truncate(take);
        Ok(pending)
    }

    async fn list_for_run(&self, tenant: &TenantId, run_id: RunId) -> Result<Vec<ApprovalRecord>, StoreError> {
        let mut rows: Vec<ApprovalRecord> =
            lock(&self.requests).iter().filter(|r| r.tenant == *tenant && r.run_id == run_id).cloned().collect();
        rows.sort_by_key(|r| (r.created_at, r.id));
        Ok(rows)
    }

    async fn decide(
        &self,
        tenant: &TenantId,
        id: uuid::Uuid,
        decision: &ApprovalDecision,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, StoreError> {
        let mut rows = lock(&self.requests);
        let row = rows.iter_mut().find(|r| r.tenant == *tenant && r.id == id).ok_or(StoreError::NotFound)?;
        if row.status != ApprovalStatus::Pending || now >= row.expires_at {
            return Err(StoreError::Conflict("This approval request can no longer be decided.".into()));
        }
        row.status = if decision.approved { ApprovalStatus::Approved } else { ApprovalStatus::Denied };
        row.decided_at = Some(now);
        row.decided_by = Some(decision.decided_by.clone());
        row.reason.clone_from(&decision.reason);
        Ok(row.clone())
    }

    async fn claim_resume(&self, tenant: &TenantId, run_id: RunId, resumed: RunId) -> Result<bool, StoreError> {
        let mut rows = lock(&self.requests);
        let mut of_run = rows.iter_mut().filter(|r| r.tenant == *tenant && r.run_id == run_id).peekable();
        if of_run.peek().is_none() {
            return Ok(false);
        }
        let of_run: Vec<&mut ApprovalRecord> = of_run.collect();
        if of_run.iter().any(|r| r.status == ApprovalStatus::Pending || r.resumed_run_id.is_some()) {
            return Ok(false);
        }
        for r in of_run {
            r.resumed_run_id = Some(resumed);
        }
        Ok(true)
    }

    async fn create_rule(&self, rule: &ApprovalRule) -> Result<(), StoreError> {
        let mut rules = lock(&self.rules);
        if rules.iter().any(|r| r.id == rule.id) {
            return Err(StoreError::Conflict("An approval rule with this id exists.".into()));
        }
        rules.push(rule.clone());
        Ok(())
    }

    async fn list_rules(&self, tenant: &TenantId, tool: Option<&str>) -> Result<Vec<ApprovalRule>, StoreError> {
        crate::store::check_text_opt("toolName", tool)?;
        Ok(lock(&self.rules)
            .iter()
            .filter(|r| r.tenant == *tenant && tool.is_none_or(|t| r.tool_name == t))
            .cloned()
            .collect())
    }

    async fn get_rule(&self, tenant: &TenantId, id: uuid::Uuid) -> Result<Option<ApprovalRule>, StoreError> {
        Ok(lock(&self.rules).iter().find(|r| r.tenant == *tenant && r.id == id).cloned())
    }

    async fn delete_rule(&self, tenant: &TenantId, id: uuid::Uuid) -> Result<ApprovalRule, StoreError> {
        let mut rules = lock(&self.rules);
        let at = rules.iter().position(|r| r.tenant == *tenant && r.id == id).ok_or(StoreError::NotFound)?;
        Ok(rules.remove(at))
    }
}

// ---- tenants ----------------------------------------------------------------------------------

#[derive(Default)]
pub struct MemoryTenantStore {
    rows: Mutex<BTreeMap<TenantId, TenantRecord>>,
}

#[async_trait::async_trait]
impl TenantStore for MemoryTenantStore {
    async fn create(&self, record: &TenantRecord) -> Result<(), StoreError> {
        let mut rows = lock(&self.rows);
        if rows.contains_key(&record.id) {
            return Err(StoreError::Conflict(format!("A tenant named '{}' exists.", record.id)));
        }
        rows.insert(record.id.clone(), record.clone());
        Ok(())
    }

    async fn get(&self, id: &TenantId) -> Result<Option<TenantRecord>, StoreError> {
        Ok(lock(&self.rows).get(id).cloned())
    }

    async fn list(&self, skip: usize, take: usize) -> Result<Vec<TenantRecord>, StoreError> {
        Ok(lock(&self.rows).values().skip(skip).take(take).cloned().collect())
    }

    async fn update(&self, id: &TenantId, display_name: &str, now: DateTime<Utc>) -> Result<TenantRecord, StoreError> {
        let mut rows = lock(&self.rows);
        let row = rows.get_mut(id).ok_or(StoreError::NotFound)?;
        row.display_name = display_name.to_owned();
        row.updated_at = now;
        Ok(row.clone())
    }

    async fn delete(&self, id: &TenantId) -> Result<TenantRecord, StoreError> {
        lock(&self.rows).remove(id).ok_or(StoreError::NotFound)
    }
}

// ---- quota notices ----------------------------------------------------------------------------

/// One announced threshold: tenant, quota, period start, percentage.
type NoticeKey = (TenantId, String, DateTime<Utc>, u32);

/// Thresholds already announced.
#[derive(Default)]
pub struct MemoryQuotaNoticeStore {
    claimed: Mutex<std::collections::HashSet<NoticeKey>>,
}

#[async_trait::async_trait]
impl crate::quota::QuotaNoticeStore for MemoryQuotaNoticeStore {
    async fn claim(
        &self,
        tenant: &TenantId,
        quota: &str,
        period_start: DateTime<Utc>,
        threshold: u32,
        _at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Ok(lock(&self.claimed).insert((tenant.clone(), quota.to_owned(), period_start, threshold)))
    }
}

// ---- jobs -------------------------------------------------------------------------------------

/// Jobs in creation order.
#[derive(Default)]
pub struct MemoryJobStore {
    rows: Mutex<Vec<JobRecord>>,
}

impl MemoryJobStore {
    /// Leases `job` when the rules allow it at `request.now`; closes it `Failed` when it is
    /// out of attempts.
    fn try_lease(job: &mut JobRecord, request: &LeaseRequest) -> Option<Lease> {
        let now = request.now;
        let leasable = match job.status {
            JobStatus::Queued => job.available_at <= now,
            JobStatus::Running => job.lease_expires_at.is_some_and(|at| at <= now),
            _ => false,
        };
        if !leasable || !request.handler_keys.contains(&job.handler_key) {
            return None;
        }
        if job.attempts >= job.max_attempts || job.cancel_requested {
            job.status = if job.cancel_requested { JobStatus::Canceled } else { JobStatus::Failed };
            if job.status == JobStatus::Failed && job.error.is_none() {
                job.error = Some(JobError {
                    code: "tracon.job.attempts-exhausted".into(),
                    message: "The job's lease expired on its last attempt.".into(),
                });
            }
            job.lease_owner = None;
            job.lease_token = None;
            job.lease_expires_at = None;
            job.updated_at = now;
            job.completed_at = Some(now);
            return None;
        }
        let token = uuid::Uuid::new_v4();
        job.status = JobStatus::Running;
        job.attempts += 1;
        job.lease_owner = Some(request.owner.clone());
        job.lease_token = Some(token);
        job.lease_expires_at = Some(now + request.lease_for);
        job.heartbeat_at = Some(now);
        job.updated_at = now;
        Some(Lease { job: job.clone(), token })
    }
}

#[async_trait::async_trait]
impl JobStore for MemoryJobStore {
    async fn enqueue(&self, job: &JobRecord) -> Result<(), StoreError> {
        let mut rows = lock(&self.rows);
        if rows.iter().any(|j| j.id == job.id) {
            return Err(StoreError::Conflict("A job with this id exists.".into()));
        }
        rows.push(job.clone());
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: uuid::Uuid) -> Result<Option<JobRecord>, StoreError> {
        Ok(lock(&self.rows).iter().find(|j| j.tenant == *tenant && j.id == id).cloned())
    }

    async fn list(
        &self,
        tenant: &TenantId,
        filter: &JobFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        filter.check_text()?;
        let rows = lock(&self.rows);
        let mut jobs: Vec<JobRecord> = rows
            .iter()
            .filter(|j| {
                j.tenant == *tenant
                    && filter.status.is_none_or(|s| j.status == s)
                    && filter.handler_key.as_deref().is_none_or(|k| j.handler_key == k)
            })
            .cloned()
            .collect();
        jobs.sort_by_key(|j| std::cmp::Reverse((j.created_at, j.id)));
        Ok(jobs.into_iter().skip(skip).take(take).collect())
    }

    async fn lease(&self, request: &LeaseRequest, limit: usize) -> Result<Vec<Lease>, StoreError> {
        let mut rows = lock(&self.rows);
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| (rows[i].available_at, rows[i].id));
        let mut leases = Vec::new();
        for i in order {
            if leases.len() >= limit {
                break;
            }
            if let Some(lease) = Self::try_lease(&mut rows[i], request) {
                leases.push(lease);
            }
        }
        Ok(leases)
    }

    async fn due(
        &self,
        now: DateTime<Utc>,
        quiet_since: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<uuid::Uuid>, StoreError> {
        let rows = lock(&self.rows);
        let mut due: Vec<&JobRecord> = rows
            .iter()
            .filter(|j| match j.status {
                JobStatus::Queued => j.available_at <= now && (j.attempts > 0 || j.created_at <= quiet_since),
                JobStatus::Running => j.lease_expires_at.is_some_and(|at| at <= now),
                _ => false,
            })
            .collect();
        due.sort_by_key(|j| (j.available_at, j.id));
        Ok(due.into_iter().take(limit).map(|j| j.id).collect())
    }

    async fn lease_one(&self, id: uuid::Uuid, request: &LeaseRequest) -> Result<Option<Lease>, StoreError> {
        let mut rows = lock(&self.rows);
        Ok(rows.iter_mut().find(|j| j.id == id).and_then(|j| Self::try_lease(j, request)))
    }

    async fn heartbeat(
        &self,
        id: uuid::Uuid,
        token: uuid::Uuid,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Option<bool>, StoreError> {
        let mut rows = lock(&self.rows);
        let Some(job) = rows.iter_mut().find(|j| j.id == id && j.lease_token == Some(token)) else { return Ok(None) };
        if job.status != JobStatus::Running {
            return Ok(None);
        }
        job.lease_expires_at = Some(until);
        job.heartbeat_at = Some(now);
        job.updated_at = now;
        Ok(Some(job.cancel_requested))
    }

    async fn finish(
        &self,
        id: uuid::Uuid,
        token: uuid::Uuid,
        outcome: &Outcome,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut rows = lock(&self.rows);
        let Some(job) = rows.iter_mut().find(|j| j.id == id && j.lease_token == Some(token)) else { return Ok(false) };
        if job.status != JobStatus::Running {
            return Ok(false);
        }
        job.lease_owner = None;
        job.lease_token = None;
        job.lease_expires_at = None;
        job.updated_at = now;
        match outcome {
            Outcome::Succeeded(result) => {
                job.status = JobStatus::Succeeded;
                job.result.clone_from(result);
                job.error = None;
                job.completed_at = Some(now);
            }
            Outcome::Retry { error, retry_at } if job.attempts < job.max_attempts && !job.cancel_requested => {
                job.status = JobStatus::Queued;
                job.available_at = *retry_at;
                job.error = Some(error.clone());
            }
            Outcome::Retry { error, .. } | Outcome::Failed(error) => {
                job.status = if job.cancel_requested { JobStatus::Canceled } else { JobStatus::Failed };
                job.error = Some(error.clone());
                job.completed_at = Some(now);
            }
            Outcome::Canceled => {
                job.status = JobStatus::Canceled;
                job.completed_at = Some(now);
            }
        }
        Ok(true)
    }

    async fn cancel(&self, tenant: &TenantId, id: uuid::Uuid, now: DateTime<Utc>) -> Result<JobRecord, StoreError> {
        let mut rows = lock(&self.rows);
        let job = rows.iter_mut().find(|j| j.tenant == *tenant && j.id == id).ok_or(StoreError::NotFound)?;
        match job.status {
            JobStatus::Queued => {
                job.status = JobStatus::Canceled;
                job.cancel_requested = true;
                job.completed_at = Some(now);
            }
            JobStatus::Running => job.cancel_requested = true,
            _ => return Err(StoreError::Conflict("The job has already ended.".into())),
        }
        job.updated_at = now;
        Ok(job.clone())
    }
}

// ---- idempotency ------------------------------------------------------------------------------

/// One key's state: the request hash, the response once done, the expiry.
#[derive(Debug, Clone)]
struct IdempotencyRow {
    request_hash: String,
    response: Option<(u16, serde_json::Value)>,
    expires_at: DateTime<Utc>,
}

/// Idempotency records per tenant, operation and key.
#[derive(Default)]
pub struct MemoryIdempotencyStore {
    rows: Mutex<HashMap<(TenantId, String, String), IdempotencyRow>>,
}

fn idempotency_key(k: KeyRef<'_>) -> (TenantId, String, String) {
    (k.tenant.clone(), k.operation.to_owned(), k.key.to_owned())
}

#[async_trait::async_trait]
impl IdempotencyStore for MemoryIdempotencyStore {
    async fn claim(
        &self,
        key: KeyRef<'_>,
        request_hash: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> Result<Claim, StoreError> {
        let mut rows = lock(&self.rows);
        let id = idempotency_key(key);
        if let Some(row) = rows.get(&id).filter(|r| r.expires_at > now) {
            return Ok(match &row.response {
                None => Claim::InProgress { request_hash: row.request_hash.clone() },
                Some((status, body)) => {
                    Claim::Completed { request_hash: row.request_hash.clone(), status: *status, body: body.clone() }
                }
            });
        }
        rows.insert(id, IdempotencyRow { request_hash: request_hash.to_owned(), response: None, expires_at });
        Ok(Claim::Claimed)
    }

    async fn complete(
        &self,
        key: KeyRef<'_>,
        status: u16,
        body: &serde_json::Value,
        _now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut rows = lock(&self.rows);
        let row = rows.get_mut(&idempotency_key(key)).ok_or(StoreError::NotFound)?;
        row.response = Some((status, body.clone()));
        Ok(())
    }

    async fn release(&self, key: KeyRef<'_>) -> Result<(), StoreError> {
        let mut rows = lock(&self.rows);
        let id = idempotency_key(key);
        if rows.get(&id).is_some_and(|r| r.response.is_none()) {
            rows.remove(&id);
        }
        Ok(())
    }
}
