//! Tenant records: the registry behind `/api/tenants`.
//!
//! Tenancy works without it — a tenant id is a partition key every store call carries — but
//! an operator needs a place to name tenants and see which exist. Records are platform-wide
//! (not partitioned by tenant); the handlers confine a caller of a non-default tenant to its
//! own record.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::error::StoreError;
use crate::names::TenantId;
use crate::sync::lock;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Longest display name.
pub const MAX_DISPLAY_NAME: usize = 200;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantRecord {
    #[schema(value_type = String)]
    pub id: TenantId,
    pub display_name: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[async_trait::async_trait]
pub trait TenantStore: Send + Sync {
    /// `Conflict` when the id exists.
    async fn create(&self, record: &TenantRecord) -> Result<(), StoreError>;
    async fn get(&self, id: &TenantId) -> Result<Option<TenantRecord>, StoreError>;
    /// Ordered by id.
    async fn list(&self, skip: usize, take: usize) -> Result<Vec<TenantRecord>, StoreError>;
    /// Replaces the display name; `NotFound` when there is no such tenant. Returns the
    /// record after the change.
    async fn update(&self, id: &TenantId, display_name: &str, now: DateTime<Utc>) -> Result<TenantRecord, StoreError>;
    /// Removes the record (not the tenant's data); `NotFound` when there is none.
    async fn delete(&self, id: &TenantId) -> Result<TenantRecord, StoreError>;
}

// ---- memory --------------------------------------------------------------------------------

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
