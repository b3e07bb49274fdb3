//! Definitions as stored — agents, and workflows — : the port ([`DefinitionStore`], every
//! version kept) and its in-memory implementation ([`memory`]). One port for every kind of
//! definition ([`Definition`]): the same history, the same refusals.

pub mod memory;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::definition::AgentDefinition;
use crate::error::StoreError;
use crate::names::{AgentName, TenantId};

/// A kind of definition the [`DefinitionStore`] keeps.
pub trait Definition:
    Clone + PartialEq + std::fmt::Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// The parsed name that addresses one.
    type Name: AsRef<str> + Send + Sync;
    /// What a refusal calls one, with its article ("An agent", "A workflow").
    const NOUN: &'static str;
    fn name(&self) -> &str;
}

impl Definition for AgentDefinition {
    type Name = AgentName;
    const NOUN: &'static str = "An agent";
    fn name(&self) -> &str {
        &self.name
    }
}

/// One page of a catalog that puts definitions registered in code before the tenant's stored
/// ones (agents, skills): code definitions by name, then stored ones by name that no code
/// definition shadows, each made an entry by `from_code` or `from_store`.
pub async fn code_then_stored<D: Definition, E>(
    code: &std::collections::BTreeMap<String, std::sync::Arc<D>>,
    store: &dyn DefinitionStore<D>,
    tenant: &TenantId,
    (skip, take): (usize, usize),
    from_code: impl Fn(&std::sync::Arc<D>) -> E,
    from_store: impl Fn(StoredDefinition<D>) -> E,
) -> Result<Vec<E>, StoreError> {
    let mut out: Vec<E> = code.values().skip(skip).take(take).map(from_code).collect();
    let remaining = take - out.len();
    if remaining > 0 {
        let stored_skip = skip.saturating_sub(code.len());
        for s in store.list(tenant, stored_skip, remaining).await? {
            if !code.contains_key(s.definition.name()) {
                out.push(from_store(s));
            }
        }
    }
    Ok(out)
}

/// The refusal of a second definition under a taken name.
pub fn name_taken<D: Definition>(definition: &D) -> StoreError {
    StoreError::Conflict(format!("{} named '{}' already exists.", D::NOUN, definition.name()))
}

/// [`crate::error::check_text`] over every string of a definition (its `jsonb` column cannot hold U+0000).
pub fn check_definition_text(definition: &impl Serialize) -> Result<(), StoreError> {
    let value = serde_json::to_value(definition).map_err(|e| StoreError::Internal { detail: e.to_string() })?;
    match crate::text::nul_path(&value) {
        Some(path) => Err(StoreError::InvalidText { field: path }),
        None => Ok(()),
    }
}

/// A definition as stored, with its version.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDefinition<D = AgentDefinition> {
    pub definition: D,
    /// 1 for the first save; every save appends a version.
    pub version: u32,
    pub created_at: DateTime<Utc>,
    /// When this version was written.
    pub updated_at: DateTime<Utc>,
}

/// A tenant's definitions generation: a number that moves on with every write (create, new
/// version, delete) of any of the tenant's agent or skill definitions, `0` before the first.
/// What an agent compiles from is one tenant's agents and skills, so a compiled agent cached
/// with the generation it was compiled under is current exactly while the generation is: the
/// catalog keeps compiled agents without reading their definitions again, and the run row's
/// write carries the generation as its guard ([`crate::runs::store::RunStore::create_run_at`]).
///
/// The in-memory stores share one [`Generations`] ([`crate::stores::Stores::in_memory`]); on
/// Postgres a trigger on the definition tables moves `definition_generations`.
#[derive(Clone, Default)]
pub struct Generations(std::sync::Arc<std::sync::Mutex<std::collections::HashMap<TenantId, u64>>>);

impl Generations {
    pub fn current(&self, tenant: &TenantId) -> u64 {
        crate::sync::lock(&self.0).get(tenant).copied().unwrap_or(0)
    }

    pub fn bump(&self, tenant: &TenantId) {
        *crate::sync::lock(&self.0).entry(tenant.clone()).or_insert(0) += 1;
    }
}

/// Definitions written through the API, with every version kept.
#[async_trait::async_trait]
pub trait DefinitionStore<D: Definition = AgentDefinition>: Send + Sync {
    /// The current (newest) version.
    async fn get(&self, tenant: &TenantId, name: &D::Name) -> Result<Option<StoredDefinition<D>>, StoreError>;
    /// Current versions, ordered by name.
    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<StoredDefinition<D>>, StoreError>;
    /// Version 1. `Conflict` when the name exists in this tenant.
    async fn create(
        &self,
        tenant: &TenantId,
        definition: D,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition<D>, StoreError>;
    /// Appends a new version; `NotFound` when the definition does not exist.
    async fn update(
        &self,
        tenant: &TenantId,
        definition: D,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition<D>, StoreError>;
    /// Removes the definition and its history; `false` when there was nothing to delete.
    async fn delete(&self, tenant: &TenantId, name: &D::Name) -> Result<bool, StoreError>;
    /// The tenant's definitions [`Generations`] as of now (one number for its agents and skills
    /// together, whichever kind of store is asked).
    async fn generation(&self, tenant: &TenantId) -> Result<u64, StoreError>;
    /// Every version, newest first: full snapshots, not deltas.
    async fn versions(&self, tenant: &TenantId, name: &D::Name) -> Result<Vec<StoredDefinition<D>>, StoreError>;
    /// One version.
    async fn version(
        &self,
        tenant: &TenantId,
        name: &D::Name,
        version: u32,
    ) -> Result<Option<StoredDefinition<D>>, StoreError>;
}
