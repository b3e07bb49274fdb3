//! Definitions in process memory, every version kept: the zero-setup default and the
//! contract suite's reference.

use std::collections::BTreeMap;
use std::sync::Mutex;

use chrono::{DateTime, Utc};

use super::{Definition, DefinitionStore, Generations, StoredDefinition, name_taken};
use crate::definition::AgentDefinition;
use crate::error::StoreError;
use crate::names::TenantId;
use crate::sync::lock;

/// One definition's versions, oldest first.
type History<D> = Vec<StoredDefinition<D>>;

/// Every version of every definition, per tenant and name.
pub struct MemoryDefinitionStore<D = AgentDefinition> {
    rows: Mutex<BTreeMap<(TenantId, String), History<D>>>,
    generations: Generations,
}

impl<D> Default for MemoryDefinitionStore<D> {
    fn default() -> Self {
        Self { rows: Mutex::new(BTreeMap::new()), generations: Generations::default() }
    }
}

impl<D> MemoryDefinitionStore<D> {
    /// A store whose writes move `generations` (shared with the other definition stores and
    /// the run store that guards on it).
    pub fn sharing(generations: Generations) -> Self {
        Self { rows: Mutex::new(BTreeMap::new()), generations }
    }
}

#[async_trait::async_trait]
impl<D: Definition> DefinitionStore<D> for MemoryDefinitionStore<D> {
    async fn get(&self, tenant: &TenantId, name: &D::Name) -> Result<Option<StoredDefinition<D>>, StoreError> {
        Ok(lock(&self.rows).get(&(tenant.clone(), name.as_ref().to_owned())).and_then(|v| v.last().cloned()))
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<StoredDefinition<D>>, StoreError> {
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
        definition: D,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition<D>, StoreError> {
        crate::definitions::check_definition_text(&definition)?;
        let mut rows = lock(&self.rows);
        let key = (tenant.clone(), definition.name().to_owned());
        if rows.contains_key(&key) {
            return Err(name_taken(&definition));
        }
        let stored = StoredDefinition { definition, version: 1, created_at: now, updated_at: now };
        rows.insert(key, vec![stored.clone()]);
        self.generations.bump(tenant);
        Ok(stored)
    }

    async fn update(
        &self,
        tenant: &TenantId,
        definition: D,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition<D>, StoreError> {
        crate::definitions::check_definition_text(&definition)?;
        let mut rows = lock(&self.rows);
        let key = (tenant.clone(), definition.name().to_owned());
        let history = rows.get_mut(&key).ok_or(StoreError::NotFound)?;
        let (version, created_at) = match history.last() {
            Some(last) => (last.version + 1, last.created_at),
            None => (1, now),
        };
        let stored = StoredDefinition { definition, version, created_at, updated_at: now };
        history.push(stored.clone());
        self.generations.bump(tenant);
        Ok(stored)
    }

    async fn delete(&self, tenant: &TenantId, name: &D::Name) -> Result<bool, StoreError> {
        let removed = lock(&self.rows).remove(&(tenant.clone(), name.as_ref().to_owned())).is_some();
        if removed {
            self.generations.bump(tenant);
        }
        Ok(removed)
    }

    async fn generation(&self, tenant: &TenantId) -> Result<u64, StoreError> {
        Ok(self.generations.current(tenant))
    }

    async fn versions(&self, tenant: &TenantId, name: &D::Name) -> Result<Vec<StoredDefinition<D>>, StoreError> {
        Ok(lock(&self.rows)
            .get(&(tenant.clone(), name.as_ref().to_owned()))
            .map(|v| v.iter().rev().cloned().collect())
            .unwrap_or_default())
    }

    async fn version(
        &self,
        tenant: &TenantId,
        name: &D::Name,
        version: u32,
    ) -> Result<Option<StoredDefinition<D>>, StoreError> {
        Ok(lock(&self.rows)
            .get(&(tenant.clone(), name.as_ref().to_owned()))
            .and_then(|v| v.iter().find(|d| d.version == version).cloned()))
    }
}
