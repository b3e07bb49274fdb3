//! Store ports: one trait per aggregate, every method tenant-first.
//!
//! The in-memory implementations in [`memory`] are the zero-setup default of the local
//! server and the reference the contract tests hold every other implementation to. A
//! resource of another tenant is indistinguishable from a missing one: no method can reach
//! across tenants.

pub mod memory;

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::definition::AgentDefinition;
use crate::failure::RunFailure;
use crate::model::Usage;
use crate::names::{AgentName, RunId, TenantId};
use crate::pricing::CostSnapshot;
use crate::tools::ToolEffect;
use crate::tools::pipeline::{LateCompletion, ToolCallStatus};

/// A store failure. `detail` is for the log; it never reaches a response.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness rule refused the write (the display text is ours).
    #[error("{0}")]
    Conflict(String),
    #[error("not found")]
    NotFound,
    /// The store cannot be reached right now (a `503` at the edge).
    #[error("store unavailable")]
    Unavailable { detail: String },
    #[error("store failure")]
    Internal { detail: String },
}

/// A definition as stored, with its version.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDefinition {
    pub definition: AgentDefinition,
    /// 1 for the first save; every save appends a version.
    pub version: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Agent definitions written through the API.
#[async_trait::async_trait]
pub trait DefinitionStore: Send + Sync {
    async fn get(&self, tenant: &TenantId, name: &AgentName) -> Result<Option<StoredDefinition>, StoreError>;
    /// Ordered by name.
    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<StoredDefinition>, StoreError>;
    /// `Conflict` when the name exists in this tenant.
    async fn create(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError>;
    /// Replaces the definition as a new version; `NotFound` when it does not exist.
    async fn update(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError>;
    /// `false` when there was nothing to delete.
    async fn delete(&self, tenant: &TenantId, name: &AgentName) -> Result<bool, StoreError>;
}

/// A run's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
pub enum RunStatus {
    Running,
    Completed,
    Failed,
    Canceled,
    AwaitingApproval,
    AwaitingInput,
}

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Running)
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

/// Runs and their tool calls.
#[async_trait::async_trait]
pub trait RunStore: Send + Sync {
    async fn create_run(&self, tenant: &TenantId, run: &RunRecord) -> Result<(), StoreError>;
    async fn finish_run(&self, tenant: &TenantId, id: RunId, end: &RunEnd) -> Result<(), StoreError>;
    async fn get_run(&self, tenant: &TenantId, id: RunId) -> Result<Option<RunRecord>, StoreError>;
    async fn record_tool_call(&self, tenant: &TenantId, call: &ToolCallRecord) -> Result<(), StoreError>;
    /// Writes a late result onto the same call's record (no second record).
    async fn complete_tool_call_late(&self, tenant: &TenantId, late: &LateCompletion) -> Result<(), StoreError>;
    /// In call order.
    async fn list_tool_calls(&self, tenant: &TenantId, run: RunId) -> Result<Vec<ToolCallRecord>, StoreError>;
}

/// Every store the runtime uses.
#[derive(Clone)]
pub struct Stores {
    pub definitions: Arc<dyn DefinitionStore>,
    pub runs: Arc<dyn RunStore>,
    /// Whether the stores survive a restart.
    pub persistent: bool,
}

impl Stores {
    pub fn in_memory() -> Self {
        Self {
            definitions: Arc::new(memory::MemoryDefinitionStore::default()),
            runs: Arc::new(memory::MemoryRunStore::default()),
            persistent: false,
        }
    }
}
