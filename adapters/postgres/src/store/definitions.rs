//! Definitions (agents, workflows, skills) and their version history on Postgres: one row per
//! version, one table per kind.

use std::marker::PhantomData;

use crate::driver::Row;
use chrono::{DateTime, Utc};
use tracon_core::definition::AgentDefinition;
use tracon_core::definitions::{Definition, DefinitionStore, StoredDefinition, name_taken};
use tracon_core::error::StoreError;
use tracon_core::names::TenantId;
use tracon_core::skills::SkillDefinition;
use tracon_core::workflows::WorkflowDefinition;

use super::Db;
use crate::codec::corrupt;
use crate::params;
use crate::sql::{self, DefinitionSql};

/// A kind of definition and the table that holds it.
pub trait Table: Definition {
    const SQL: &'static DefinitionSql;
}

impl Table for AgentDefinition {
    const SQL: &'static DefinitionSql = &sql::AGENT_DEFINITIONS;
}

impl Table for WorkflowDefinition {
    const SQL: &'static DefinitionSql = &sql::WORKFLOW_DEFINITIONS;
}

impl Table for SkillDefinition {
    const SQL: &'static DefinitionSql = &sql::SKILL_DEFINITIONS;
}

pub struct PgDefinitionStore<D = AgentDefinition> {
    db: Db,
    kind: PhantomData<fn() -> D>,
}

impl<D> PgDefinitionStore<D> {
    pub fn new(db: Db) -> Self {
        Self { db, kind: PhantomData }
    }
}

fn stored<D: Definition>(row: &Row) -> Result<StoredDefinition<D>, StoreError> {
    let version: i32 = row.get("version")?;
    let definition: serde_json::Value = row.get("definition")?;
    Ok(StoredDefinition {
        definition: serde_json::from_value(definition).map_err(|e| corrupt("definition", e))?,
        version: version.max(0) as u32,
        created_at: row.get("created_at")?,
        updated_at: row.get("written_at")?,
    })
}

fn json(def: &impl serde::Serialize) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(def).map_err(|e| corrupt("definition", e))
}

#[async_trait::async_trait]
impl<D: Table> DefinitionStore<D> for PgDefinitionStore<D> {
    async fn get(&self, tenant: &TenantId, name: &D::Name) -> Result<Option<StoredDefinition<D>>, StoreError> {
        let row = self.db.query_opt(D::SQL.get, &params![tenant.as_str(), name.as_ref()]).await?;
        row.as_ref().map(stored::<D>).transpose()
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<StoredDefinition<D>>, StoreError> {
        let rows = self.db.query(D::SQL.list, &params![tenant.as_str(), skip as i64, take as i64]).await?;
        rows.iter().map(stored::<D>).collect()
    }

    async fn create(
        &self,
        tenant: &TenantId,
        definition: D,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition<D>, StoreError> {
        tracon_core::definitions::check_definition_text(&definition)?;
        let body = json(&definition)?;
        let name = definition.name();
        self.db.execute(D::SQL.create, &params![tenant.as_str(), name, &body, now]).await.map_err(|e| match e {
            StoreError::Conflict(_) => name_taken(&definition),
            other => other,
        })?;
        Ok(StoredDefinition { definition, version: 1, created_at: now, updated_at: now })
    }

    async fn update(
        &self,
        tenant: &TenantId,
        definition: D,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition<D>, StoreError> {
        tracon_core::definitions::check_definition_text(&definition)?;
        let body = json(&definition)?;
        // Two concurrent saves can pick the same next version; the loser retries on top.
        let mut attempts = 0;
        loop {
            let result =
                self.db.query_opt(D::SQL.update, &params![tenant.as_str(), definition.name(), &body, now]).await;
            match result {
                Ok(Some(row)) => {
                    let version: i32 = row.get("version")?;
                    return Ok(StoredDefinition {
                        definition,
                        version: version.max(0) as u32,
                        created_at: row.get("created_at")?,
                        updated_at: now,
                    });
                }
                Ok(None) => return Err(StoreError::NotFound),
                Err(StoreError::Conflict(_)) if attempts < 5 => attempts += 1,
                Err(e) => return Err(e),
            }
        }
    }

    async fn delete(&self, tenant: &TenantId, name: &D::Name) -> Result<bool, StoreError> {
        let done = self.db.execute(D::SQL.delete, &params![tenant.as_str(), name.as_ref()]).await?;
        Ok(done > 0)
    }

    async fn generation(&self, tenant: &TenantId) -> Result<u64, StoreError> {
        let row = self.db.query_opt(sql::DEFINITIONS_GENERATION, &params![tenant.as_str()]).await?;
        let generation: i64 = match row {
            Some(row) => row.get("generation")?,
            None => 0,
        };
        Ok(u64::try_from(generation).unwrap_or(0))
    }

    async fn versions(&self, tenant: &TenantId, name: &D::Name) -> Result<Vec<StoredDefinition<D>>, StoreError> {
        let rows = self.db.query(D::SQL.versions, &params![tenant.as_str(), name.as_ref()]).await?;
        rows.iter().map(stored::<D>).collect()
    }

    async fn version(
        &self,
        tenant: &TenantId,
        name: &D::Name,
        version: u32,
    ) -> Result<Option<StoredDefinition<D>>, StoreError> {
        let row = self
            .db
            .query_opt(
                D::SQL.version,
                &params![tenant.as_str(), name.as_ref(), i32::try_from(version).unwrap_or(i32::MAX)],
            )
            .await?;
        row.as_ref().map(stored::<D>).transpose()
    }
}
