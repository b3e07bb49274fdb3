//! The [`Stores`] bundle: every store port the runtime uses, each an `Arc<dyn …>`, and the
//! in-memory set (the zero-setup default of the local server, and the tests'). Only the
//! runtime, the services above it and the adapters name the bundle; no port module does.

use std::sync::Arc;

use crate::definitions::DefinitionStore;
use crate::runs::store::RunStore;
use crate::sessions::SessionStore;

/// Every store the runtime uses.
#[derive(Clone)]
pub struct Stores {
    pub definitions: Arc<dyn DefinitionStore>,
    /// Workflow definitions, every version kept.
    pub workflows: Arc<dyn DefinitionStore<crate::workflows::definition::WorkflowDefinition>>,
    /// Skills written through the API, every version kept.
    pub skills: Arc<dyn DefinitionStore<crate::skills::SkillDefinition>>,
    /// Workflow checkpoints.
    pub checkpoints: Arc<dyn crate::workflows::checkpoints::CheckpointStore>,
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
    /// The model providers' circuit breakers, shared by every instance.
    pub breakers: Arc<dyn crate::model::breaker::BreakerStore>,
    /// Cached model answers (`model.responseCache`).
    pub response_cache: Arc<dyn crate::model::cache::ResponseCacheStore>,
    /// Tenants' own provider credentials (BYOK) and egress policies.
    pub tenant_providers: Arc<dyn crate::model::byok::TenantProviderStore>,
    /// Tenants' remote MCP servers and what each last said it offers.
    pub mcp_servers: Arc<dyn crate::mcp::McpServerStore>,
    /// Pending OAuth authorizations of MCP servers and their tokens.
    pub mcp_oauth: Arc<dyn crate::mcp::oauth::McpOAuthStore>,
    /// Whether the stores survive a restart.
    pub persistent: bool,
}

impl Stores {
    pub fn in_memory() -> Self {
        Self::in_memory_keeping(crate::runs::memory::DEFAULT_MAX_RUNS)
    }

    /// [`Self::in_memory`] with at most `max_runs` runs kept.
    pub fn in_memory_keeping(max_runs: usize) -> Self {
        use crate::definitions::memory::MemoryDefinitionStore;
        // Agents and skills move one generation, which the run rows' writes guard on.
        let generations = crate::definitions::Generations::default();
        Self {
            definitions: Arc::new(MemoryDefinitionStore::sharing(generations.clone())),
            workflows: Arc::new(MemoryDefinitionStore::default()),
            skills: Arc::new(MemoryDefinitionStore::sharing(generations.clone())),
            checkpoints: Arc::new(crate::workflows::checkpoints::MemoryCheckpointStore::default()),
            runs: Arc::new(crate::runs::memory::MemoryRunStore::with_max_runs(max_runs).sharing(generations)),
            sessions: Arc::new(crate::sessions::memory::MemorySessionStore::default()),
            keys: Arc::new(crate::keys::MemoryApiKeyStore::default()),
            audit: Arc::new(crate::audit::MemoryAuditStore::default()),
            approvals: Arc::new(crate::approvals::MemoryApprovalStore::default()),
            tenants: Arc::new(crate::tenants::MemoryTenantStore::default()),
            quota_notices: Arc::new(crate::quota::MemoryQuotaNoticeStore::default()),
            jobs: Arc::new(crate::jobs::MemoryJobStore::default()),
            idempotency: Arc::new(crate::idempotency::MemoryIdempotencyStore::default()),
            schedules: Arc::new(crate::schedules::MemoryScheduleStore::default()),
            triggers: Arc::new(crate::triggers::MemoryTriggerStore::default()),
            webhooks: Arc::new(crate::webhooks::memory::MemoryWebhookStore::default()),
            breakers: Arc::new(crate::model::breaker::MemoryBreakerStore::default()),
            response_cache: Arc::new(crate::model::cache::MemoryResponseCache::default()),
            tenant_providers: Arc::new(crate::model::byok::MemoryTenantProviderStore::default()),
            mcp_servers: Arc::new(crate::mcp::MemoryMcpServerStore::default()),
            mcp_oauth: Arc::new(crate::mcp::oauth::MemoryMcpOAuthStore::default()),
            persistent: false,
        }
    }
}
