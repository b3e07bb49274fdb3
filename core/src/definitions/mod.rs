//! Agent definitions as stored: the port ([`DefinitionStore`], every version kept) and its
//! in-memory implementation ([`memory`]).

pub mod memory;

use chrono::{DateTime, Utc};

use crate::definition::AgentDefinition;
use crate::error::StoreError;
use crate::names::{AgentName, TenantId};

/// [`crate::error::check_text`] over every string of a definition (its `jsonb` column cannot hold U+0000).
pub fn check_definition_text(definition: &AgentDefinition) -> Result<(), StoreError> {
    let value = serde_json::to_value(definition).map_err(|e| StoreError::Internal { detail: e.to_string() })?;
    match crate::text::nul_path(&value) {
        Some(path) => Err(StoreError::InvalidText { field: path }),
        None => Ok(()),
    }
}

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
