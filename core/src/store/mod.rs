//! Store ports: one trait per aggregate, every method tenant-first.
//!
//! - [`DefinitionStore`] — stored agent definitions and their append-only version history;
//! - [`RunStore`] — run rows, the numbered event log, tool calls, recorded input, the
//!   cancel flag and statistics;
//! - [`SessionStore`] — sessions with a write generation and their ordered items.
//!
//! The in-memory implementations in [`memory`] are the zero-setup default of the local
//! server and the reference the contract tests ([`contract`], feature `contract-tests`)
//! hold every implementation to. A resource of another tenant is indistinguishable from a
//! missing one: no method can reach across tenants.

#[cfg(feature = "contract-tests")]
pub mod contract;
#[cfg(feature = "contract-tests")]
pub mod idempotency_contract;
#[cfg(feature = "contract-tests")]
pub mod job_contract;
pub mod memory;
#[cfg(feature = "contract-tests")]
pub mod trigger_contract;
#[cfg(feature = "contract-tests")]
pub mod webhook_contract;

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::definition::AgentDefinition;
use crate::events::RecordedEvent;
use crate::failure::{ErrorClass, RunFailure};
use crate::model::{Message, Usage};
use crate::names::{AgentName, RunId, TenantId};
use crate::pricing::CostSnapshot;
use crate::tools::ToolEffect;
use crate::tools::pipeline::{LateCompletion, ToolCallStatus};

/// A store failure. `detail` is for the log; it never reaches a response.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness or concurrency rule refused the write (the display text is ours).
    #[error("{0}")]
    Conflict(String),
    #[error("not found")]
    NotFound,
    /// The store cannot be reached right now (a `503` at the edge).
    #[error("store unavailable")]
    Unavailable { detail: String },
    #[error("store failure")]
    Internal { detail: String },
    /// A text value no store can hold: U+0000 ([`crate::text`]). Every store refuses it the
    /// same way, before it writes or queries anything; `field` names where it was.
    #[error("'{field}' contains U+0000")]
    InvalidText { field: String },
}

/// `Err(InvalidText)` when `value` holds U+0000 (see [`crate::text`]).
pub fn check_text(field: &str, value: &str) -> Result<(), StoreError> {
    if crate::text::has_nul(value) {
        return Err(StoreError::InvalidText { field: field.to_owned() });
    }
    Ok(())
}

/// [`check_text`] for an optional value.
pub fn check_text_opt(field: &str, value: Option<&str>) -> Result<(), StoreError> {
    value.map_or(Ok(()), |v| check_text(field, v))
}

/// [`check_text`] over every string of a definition (its `jsonb` column cannot hold U+0000).
pub fn check_definition_text(definition: &AgentDefinition) -> Result<(), StoreError> {
    let value = serde_json::to_value(definition).map_err(|e| StoreError::Internal { detail: e.to_string() })?;
    match crate::text::nul_path(&value) {
        Some(path) => Err(StoreError::InvalidText { field: path }),
        None => Ok(()),
    }
}

// ---- definitions ------------------------------------------------------------------------

/// A definition as stored, with its version.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDefinition {
    pub definition: AgentDefinition,
    /// 1 for the first save; every save appends a version.
    pub version: u32,
    pub created_at: DateTime<Utc>,
    /// When this version was written.
    pub updated_at: DateTime<Utc>,
}

/// Agent definitions written through the API, with every version kept.
#[async_trait::async_trait]
pub trait DefinitionStore: Send + Sync {
    /// The current (newest) version.
    async fn get(&self, tenant: &TenantId, name: &AgentName) -> Result<Option<StoredDefinition>, StoreError>;
    /// Current versions, ordered by name.
    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<StoredDefinition>, StoreError>;
    /// Version 1. `Conflict` when the name exists in this tenant.
    async fn create(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError>;
    /// Appends a new version; `NotFound` when the definition does not exist.
    async fn update(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError>;
    /// Removes the definition and its history; `false` when there was nothing to delete.
    async fn delete(&self, tenant: &TenantId, name: &AgentName) -> Result<bool, StoreError>;
    /// Every version, newest first: full snapshots, not deltas.
    async fn versions(&self, tenant: &TenantId, name: &AgentName) -> Result<Vec<StoredDefinition>, StoreError>;
    /// One version.
    async fn version(
        &self,
        tenant: &TenantId,
        name: &AgentName,
        version: u32,
    ) -> Result<Option<StoredDefinition>, StoreError>;
}

// ---- runs -------------------------------------------------------------------------------

/// A run's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
pub enum RunStatus {
    /// Accepted and waiting for a worker (`Prefer: respond-async`, triggers).
    Queued,
    Running,
    Completed,
    Failed,
    Canceled,
    AwaitingApproval,
    AwaitingInput,
}

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Running | Self::Queued)
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "Queued" => Self::Queued,
            "Running" => Self::Running,
            "Completed" => Self::Completed,
            "Failed" => Self::Failed,
            "Canceled" => Self::Canceled,
            "AwaitingApproval" => Self::AwaitingApproval,
            "AwaitingInput" => Self::AwaitingInput,
            _ => return None,
        })
    }
}

/// The run row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub id: RunId,
    #[serde(skip)]
    pub tenant: Option<TenantId>,
    pub agent_name: String,
    pub agent_version: Option<u32>,
    pub status: RunStatus,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub duration_ms: Option<u64>,
    /// `null` when no model call reported usage: unmeasured is not zero.
    pub usage: Option<Usage>,
    pub cost: Option<CostSnapshot>,
    /// The provider and model that actually answered.
    pub model_provider: Option<String>,
    pub model: Option<String>,
    pub error: Option<RunFailure>,
    pub session_id: Option<String>,
    pub parent_run_id: Option<RunId>,
    pub root_run_id: Option<RunId>,
    pub depth: u32,
    pub user_id: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// Somebody asked this run to stop; the executing turn observes it.
    #[serde(default)]
    pub cancel_requested: bool,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEnd {
    pub status: RunStatus,
    pub ended_at: DateTime<Utc>,
    pub duration_ms: u64,
    pub usage: Option<Usage>,
    pub cost: Option<CostSnapshot>,
    pub model_provider: Option<String>,
    pub model: Option<String>,
    pub error: Option<RunFailure>,
}

/// One tool call, stored individually so "which tool failed with what input" is a query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRecord {
    pub run_id: RunId,
    pub call_id: String,
    pub tool_name: String,
    pub arguments: String,
    pub effect: Option<ToolEffect>,
    pub status: ToolCallStatus,
    pub result: Option<String>,
    pub error: Option<String>,
    pub omitted_bytes: Option<u64>,
    pub started_at: DateTime<Utc>,
    pub duration_ms: u64,
    pub timed_out: bool,
    /// Set when a call that outlived its timeout finished after all.
    pub late_completed_at: Option<DateTime<Utc>>,
    pub late_duration_ms: Option<u64>,
    pub late_result: Option<String>,
    pub late_error: Option<String>,
}

/// What the caller sent, when input recording is on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunInputRecord {
    pub message: String,
    pub culture: Option<String>,
    pub parameters: BTreeMap<String, String>,
    pub documents: Vec<DocumentInput>,
}

/// A reference document sent with a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DocumentInput {
    pub name: String,
    pub content: String,
}

/// Filters of the run list and the statistics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    pub agent: Option<String>,
    pub status: Option<RunStatus>,
    pub session_id: Option<String>,
    pub user_id: Option<String>,
    /// Every pair must be present on the run.
    pub labels: BTreeMap<String, String>,
    /// Started at or after.
    pub from: Option<DateTime<Utc>>,
    /// Started before.
    pub to: Option<DateTime<Utc>>,
}

impl RunFilter {
    /// [`check_text`] over the filter's text: what every store checks first.
    pub fn check_text(&self) -> Result<(), StoreError> {
        check_text_opt("agent", self.agent.as_deref())?;
        check_text_opt("sessionId", self.session_id.as_deref())?;
        check_text_opt("userId", self.user_id.as_deref())?;
        self.labels.iter().try_for_each(|(k, v)| check_text("label", k).and_then(|()| check_text("label", v)))
    }

    pub fn matches(&self, run: &RunRecord) -> bool {
        self.agent.as_deref().is_none_or(|a| run.agent_name == a)
            && self.status.is_none_or(|s| run.status == s)
            && self.session_id.as_deref().is_none_or(|s| run.session_id.as_deref() == Some(s))
            && self.user_id.as_deref().is_none_or(|u| run.user_id.as_deref() == Some(u))
            && self.labels.iter().all(|(k, v)| run.labels.get(k) == Some(v))
            && self.from.is_none_or(|f| run.started_at >= f)
            && self.to.is_none_or(|t| run.started_at < t)
    }
}

/// Aggregates over the runs a filter selects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStats {
    pub total_runs: u64,
    pub by_status: BTreeMap<RunStatus, u64>,
    pub by_error_class: BTreeMap<ErrorClass, u64>,
    pub by_agent: BTreeMap<String, u64>,
    pub by_user: BTreeMap<String, u64>,
    /// `key:value` → runs. A run with three labels counts in three rows.
    pub by_label: BTreeMap<String, u64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    /// Runs whose usage was measured.
    pub runs_with_usage: u64,
    /// Currency → total cost of the runs with a known cost.
    pub cost: BTreeMap<String, f64>,
    pub runs_with_cost: u64,
}

impl RunStats {
    /// Adds one run (the reference aggregation every store must match).
    pub fn add(&mut self, run: &RunRecord) {
        self.total_runs += 1;
        *self.by_status.entry(run.status).or_default() += 1;
        if let Some(e) = &run.error {
            *self.by_error_class.entry(e.error_class).or_default() += 1;
        }
        *self.by_agent.entry(run.agent_name.clone()).or_default() += 1;
        if let Some(u) = &run.user_id {
            *self.by_user.entry(u.clone()).or_default() += 1;
        }
        for (k, v) in &run.labels {
            *self.by_label.entry(format!("{k}:{v}")).or_default() += 1;
        }
        if let Some(u) = &run.usage {
            self.input_tokens += u.input_tokens;
            self.output_tokens += u.output_tokens;
            self.total_tokens += u.total_tokens;
            self.runs_with_usage += 1;
        }
        if let Some(c) = &run.cost {
            *self.cost.entry(c.currency.clone()).or_default() += c.total_cost;
            self.runs_with_cost += 1;
        }
    }
}

/// The answer to a cancel request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The flag is set; the executing turn will stop.
    Requested,
    /// The run had already ended with this status.
    AlreadyEnded(RunStatus),
}

/// Runs and everything recorded about them.
#[async_trait::async_trait]
pub trait RunStore: Send + Sync {
    /// Writes the run row, with its recorded input when there is one (one round trip).
    async fn create_run(
        &self,
        tenant: &TenantId,
        run: &RunRecord,
        input: Option<&RunInputRecord>,
    ) -> Result<(), StoreError>;
    /// Closes the run row and appends its last events, together (one round trip): whoever
    /// sees the terminal event finds the row ended. The events follow the
    /// [`append_events`](Self::append_events) rules; `NotFound` for a missing run.
    async fn finish_run(
        &self,
        tenant: &TenantId,
        id: RunId,
        end: &RunEnd,
        events: &[RecordedEvent],
    ) -> Result<(), StoreError>;
    async fn get_run(&self, tenant: &TenantId, id: RunId) -> Result<Option<RunRecord>, StoreError>;
    /// Newest first.
    async fn list_runs(
        &self,
        tenant: &TenantId,
        filter: &RunFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<RunRecord>, StoreError>;
    async fn stats(&self, tenant: &TenantId, filter: &RunFilter) -> Result<RunStats, StoreError>;

    /// Appends a batch of events (one round trip) and moves the run's heartbeat to `now`.
    /// Sequence numbers come from the run's single writer; a sequence already stored is a
    /// `Conflict` and nothing of the batch is written.
    async fn append_events(
        &self,
        tenant: &TenantId,
        run: RunId,
        events: &[RecordedEvent],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError>;
    /// Events with a sequence above `after`, in order, at most `limit`.
    async fn read_events(
        &self,
        tenant: &TenantId,
        run: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError>;

    async fn record_tool_call(&self, tenant: &TenantId, call: &ToolCallRecord) -> Result<(), StoreError>;
    /// Writes a late result onto the same call's record (no second record).
    async fn complete_tool_call_late(&self, tenant: &TenantId, late: &LateCompletion) -> Result<(), StoreError>;
    /// In call order.
    async fn list_tool_calls(&self, tenant: &TenantId, run: RunId) -> Result<Vec<ToolCallRecord>, StoreError>;

    async fn record_input(&self, tenant: &TenantId, run: RunId, input: &RunInputRecord) -> Result<(), StoreError>;
    async fn get_input(&self, tenant: &TenantId, run: RunId) -> Result<Option<RunInputRecord>, StoreError>;

    /// Moves a queued run to `Running` as its worker starts it (`started_at` and the heartbeat
    /// are `now`), answering whether a cancel was asked while it waited (one round trip for
    /// both). `None` when it is not queued — an earlier attempt started it, or it ended;
    /// `NotFound` is not used (a missing run is `None` too).
    async fn start_queued(&self, tenant: &TenantId, run: RunId, now: DateTime<Utc>)
    -> Result<Option<bool>, StoreError>;
    /// Sets the cancel flag of a queued or running run (a queued one stops as its worker
    /// starts it). `NotFound` for a run that does not exist.
    async fn request_cancel(&self, tenant: &TenantId, run: RunId) -> Result<CancelOutcome, StoreError>;
    async fn is_cancel_requested(&self, tenant: &TenantId, run: RunId) -> Result<bool, StoreError>;

    /// Moves a running run's heartbeat to `now` (its executor is alive). A run that is not
    /// running is left alone.
    async fn heartbeat(&self, tenant: &TenantId, run: RunId, now: DateTime<Utc>) -> Result<(), StoreError>;
    /// Running runs of any tenant whose heartbeat (or start, without one) is older than
    /// `stale_before`, oldest first, at most `limit` — reconciliation's candidates.
    async fn stale_runs(&self, stale_before: DateTime<Utc>, limit: usize) -> Result<Vec<StaleRun>, StoreError>;
    /// Closes a stale run like [`Self::finish_run`], but only while it is still running with
    /// a heartbeat older than `stale_before`; `false` when it moved on (it finished, or its
    /// executor came back) and nothing was written.
    async fn close_stale(
        &self,
        tenant: &TenantId,
        id: RunId,
        stale_before: DateTime<Utc>,
        end: &RunEnd,
        events: &[RecordedEvent],
    ) -> Result<bool, StoreError>;
}

/// A running run whose executor stopped heartbeating.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleRun {
    pub tenant: TenantId,
    pub id: RunId,
    pub started_at: DateTime<Utc>,
    /// The last stored event's sequence (0 without events): the closing event follows it.
    pub last_sequence: u64,
}

// ---- sessions -----------------------------------------------------------------------------

/// Where a branched session came from (provenance only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionParent {
    pub session_id: String,
    /// The last item copied.
    pub sequence: u64,
}

/// A session: metadata and its write generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    pub id: String,
    /// The agent that last spoke in it.
    pub agent_name: Option<String>,
    /// The write generation: 1 after the first save, +1 on every save.
    pub version: u64,
    pub item_count: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub owner_user_id: Option<String>,
    pub parent: Option<SessionParent>,
}

/// One conversation item, at its position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionItem {
    /// 0-based position: the number the branch endpoint takes.
    pub sequence: u64,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub message: Message,
    pub run_id: Option<RunId>,
    pub created_at: DateTime<Utc>,
}

/// What a turn appends to a session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionWrite {
    pub agent_name: String,
    pub run_id: Option<RunId>,
    pub messages: Vec<Message>,
    pub owner_user_id: Option<String>,
    pub now: DateTime<Utc>,
}

/// Sessions with optimistic concurrency: the first save creates, every later save must
/// name the generation it read. Neither overwrites.
#[async_trait::async_trait]
pub trait SessionStore: Send + Sync {
    async fn get(&self, tenant: &TenantId, id: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// Every item, in sequence order.
    async fn items(&self, tenant: &TenantId, id: &str) -> Result<Vec<SessionItem>, StoreError>;
    /// Newest update first. `owner` narrows the list to that user's sessions, before paging
    /// (session ownership); `None` lists every session of the tenant.
    async fn list(
        &self,
        tenant: &TenantId,
        owner: Option<&str>,
        skip: usize,
        take: usize,
    ) -> Result<Vec<SessionRecord>, StoreError>;
    /// First save. `Conflict` when the id already exists.
    async fn try_create(&self, tenant: &TenantId, id: &str, write: &SessionWrite) -> Result<SessionRecord, StoreError>;
    /// A later save: appends the items only if the generation is still `expected_version`;
    /// otherwise `Conflict` and nothing is written. `NotFound` if the session is gone.
    async fn try_append(
        &self,
        tenant: &TenantId,
        id: &str,
        expected_version: u64,
        write: &SessionWrite,
    ) -> Result<SessionRecord, StoreError>;
    /// Deletes the session and its items; `false` when there was nothing to delete.
    async fn delete(&self, tenant: &TenantId, id: &str) -> Result<bool, StoreError>;
    /// Copies items `0..=up_to` of `source` into a new session `new_id` whose parent is
    /// recorded. `NotFound` when the source does not exist; `Conflict` when `new_id` does.
    async fn branch(
        &self,
        tenant: &TenantId,
        source: &str,
        up_to: u64,
        new_id: &str,
        owner_user_id: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError>;
}

// ---- the bundle ---------------------------------------------------------------------------

/// Every store the runtime uses.
#[derive(Clone)]
pub struct Stores {
    pub definitions: Arc<dyn DefinitionStore>,
    pub runs: Arc<dyn RunStore>,
    pub sessions: Arc<dyn SessionStore>,
    pub keys: Arc<dyn crate::keys::ApiKeyStore>,
    pub audit: Arc<dyn crate::audit::AuditStore>,
    pub approvals: Arc<dyn crate::approvals::ApprovalStore>,
    pub tenants: Arc<dyn crate::tenants::TenantStore>,
    /// Quota thresholds already announced (once per period, durably).
    pub quota_notices: Arc<dyn crate::quota::QuotaNoticeStore>,
    /// The durable job queue.
    pub jobs: Arc<dyn crate::jobs::JobStore>,
    /// `Idempotency-Key` records.
    pub idempotency: Arc<dyn crate::idempotency::IdempotencyStore>,
    /// One-time and cron schedules.
    pub schedules: Arc<dyn crate::schedules::ScheduleStore>,
    /// Inbound trigger definitions.
    pub triggers: Arc<dyn crate::triggers::TriggerStore>,
    /// Webhook subscriptions and their delivery history.
    pub webhooks: Arc<dyn crate::webhooks::WebhookStore>,
    /// Whether the stores survive a restart.
    pub persistent: bool,
}

impl Stores {
    pub fn in_memory() -> Self {
        Self {
            definitions: Arc::new(memory::MemoryDefinitionStore::default()),
            runs: Arc::new(memory::MemoryRunStore::default()),
            sessions: Arc::new(memory::MemorySessionStore::default()),
            keys: Arc::new(memory::MemoryApiKeyStore::default()),
            audit: Arc::new(memory::MemoryAuditStore::default()),
            approvals: Arc::new(memory::MemoryApprovalStore::default()),
            tenants: Arc::new(memory::MemoryTenantStore::default()),
            quota_notices: Arc::new(memory::MemoryQuotaNoticeStore::default()),
            jobs: Arc::new(memory::MemoryJobStore::default()),
            idempotency: Arc::new(memory::MemoryIdempotencyStore::default()),
            schedules: Arc::new(crate::schedules::MemoryScheduleStore::default()),
            triggers: Arc::new(crate::triggers::MemoryTriggerStore::default()),
            webhooks: Arc::new(crate::webhooks::memory::MemoryWebhookStore::default()),
            persistent: false,
        }
    }
}
