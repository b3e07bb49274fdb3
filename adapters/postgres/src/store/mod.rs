//! Every store port on Postgres, written once over the [`Driver`] seam: the same code runs on
//! sqlx natively and on tokio-postgres in the Worker. One file per aggregate; the statements
//! are [`crate::sql`]'s, the column codecs [`crate::codec`]'s.
//!
//! [`stores`] bundles them over one driver, with content protection for the columns a tenant's
//! users wrote.

mod approvals;
mod audit;
mod breakers;
mod cache;
mod checkpoints;
mod definitions;
mod idempotency;
mod jobs;
mod keys;
mod mcp_oauth;
mod mcp_servers;
mod runs;
mod schedules;
mod sessions;
mod tenant_providers;
mod tenants;
mod triggers;
mod webhooks;

use std::sync::Arc;

use tracon_core::stores::Stores;

pub use approvals::PgApprovalStore;
pub use audit::PgAuditStore;
pub use breakers::PgBreakerStore;
pub use cache::PgResponseCache;
pub use checkpoints::PgCheckpointStore;
pub use definitions::PgDefinitionStore;
pub use idempotency::PgIdempotencyStore;
pub use jobs::PgJobStore;
pub use keys::PgApiKeyStore;
pub use mcp_oauth::PgMcpOAuthStore;
pub use mcp_servers::PgMcpServerStore;
pub use runs::PgRunStore;
pub use schedules::PgScheduleStore;
pub use sessions::PgSessionStore;
pub use tenant_providers::PgTenantProviderStore;
pub use tenants::{PgQuotaNoticeStore, PgTenantStore};
pub use triggers::PgTriggerStore;
pub use webhooks::PgWebhookStore;

use crate::driver::Driver;
use crate::protect::Protection;

/// The driver every store of one bundle shares.
pub type Db = Arc<dyn Driver>;

/// Every store over `db` (persistent).
pub fn stores(db: Db, protection: Protection) -> Stores {
    let protection = Arc::new(protection);
    Stores {
        definitions: Arc::new(PgDefinitionStore::new(db.clone())),
        workflows: Arc::new(PgDefinitionStore::<tracon_core::workflows::WorkflowDefinition>::new(db.clone())),
        skills: Arc::new(PgDefinitionStore::<tracon_core::skills::SkillDefinition>::new(db.clone())),
        checkpoints: Arc::new(PgCheckpointStore::new(db.clone(), protection.clone())),
        runs: Arc::new(PgRunStore::new(db.clone(), protection.clone())),
        sessions: Arc::new(PgSessionStore::new(db.clone(), protection.clone())),
        keys: Arc::new(PgApiKeyStore::new(db.clone())),
        audit: Arc::new(PgAuditStore::new(db.clone())),
        approvals: Arc::new(PgApprovalStore::new(db.clone(), protection.clone())),
        tenants: Arc::new(PgTenantStore::new(db.clone())),
        quota_notices: Arc::new(PgQuotaNoticeStore::new(db.clone())),
        jobs: Arc::new(PgJobStore::new(db.clone(), protection.clone())),
        schedules: Arc::new(PgScheduleStore::new(db.clone(), protection.clone())),
        webhooks: Arc::new(PgWebhookStore::new(db.clone())),
        triggers: Arc::new(PgTriggerStore::new(db.clone())),
        breakers: Arc::new(PgBreakerStore::new(db.clone())),
        response_cache: Arc::new(PgResponseCache::new(db.clone(), protection.clone())),
        tenant_providers: Arc::new(PgTenantProviderStore::new(db.clone())),
        mcp_servers: Arc::new(PgMcpServerStore::new(db.clone())),
        mcp_oauth: Arc::new(PgMcpOAuthStore::new(db.clone(), protection.clone())),
        idempotency: Arc::new(PgIdempotencyStore::new(db, protection)),
        persistent: true,
    }
}
