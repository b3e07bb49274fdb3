//! Agent definitions and their version history on Postgres: one row per version.

use crate::driver::Row;
use chrono::{DateTime, Utc};
use tracon_core::definition::AgentDefinition;
use tracon_core::definitions::{DefinitionStore, StoredDefinition};
use tracon_core::error::StoreError;
use tracon_core::names::{AgentName, TenantId};

use super::Db;
use crate::codec::corrupt;
use crate::params;
use crate::sql;

pub struct PgDefinitionStore {
    db: Db,
}

impl PgDefinitionStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

fn stored(row: &Row) -> Result<StoredDefinition, StoreError> {
    let version: i32 = row.get("version")?;
    let definition: serde_json::Value = row.get("definition")?;
    Ok(StoredDefinition {
        definition: serde_json::from_value(definition).map_err(|e| corrupt("definition", e))?,
        version: version.max(0) as u32,
        created_at: row.get("created_at")?,
        updated_at: row.get("written_at")?,
    })
}

fn json(def: &AgentDefinition) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(def).map_err(|e| corrupt("definition", e))
}

#[async_trait::async_trait]
impl DefinitionStore for PgDefinitionStore {
    async fn get(&self, tenant: &TenantId, name: &AgentName) -> Result<Option<StoredDefinition>, StoreError> {
        let row = self.db.query_opt(sql::DEF_GET, &params![tenant.as_str(), name.as_str()]).await?;
        row.as_ref().map(stored).transpose()
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<StoredDefinition>, StoreError> {
        let rows = self.db.query(sql::DEF_LIST, &params![tenant.as_str(), skip as i64, take as i64]).await?;
        rows.iter().map(stored).collect()
    }

    async fn create(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError> {
        tracon_core::definitions::check_definition_text(&definition)?;
        let body = json(&definition)?;
        self.db.execute(sql::DEF_CREATE, &params![tenant.as_str(), &definition.name, &body, now]).await.map_err(
            |e| match e {
                StoreError::Conflict(_) => {
                    StoreError::Conflict(format!("An agent named '{}' already exists.", definition.name))
                }
                other => other,
            },
        )?;
        Ok(StoredDefinition { definition, version: 1, created_at: now, updated_at: now })
    }

    async fn update(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError> {
        tracon_core::definitions::check_definition_text(&definition)?;
        let body = json(&definition)?;
        // Two concurrent saves can pick the same next version; the loser retries on top.
        let mut attempts = 0;
        loop {
            let result =
                self.db.query_opt(sql::DEF_UPDATE, &params![tenant.as_str(), &definition.name, &body, now]).await;
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

    async fn delete(&self, tenant: &TenantId, name: &AgentName) -> Result<bool, StoreError> {
        let done = self.db.execute(sql::DEF_DELETE, &params![tenant.as_str(), name.as_str()]).await?;
        Ok(done > 0)
    }

    async fn versions(&self, tenant: &TenantId, name: &AgentName) -> Result<Vec<StoredDefinition>, StoreError> {
        let rows = self.db.query(sql::DEF_VERSIONS, &params![tenant.as_str(), name.as_str()]).await?;
        rows.iter().map(stored).collect()
    }

    async fn version(
        &self,
        tenant: &TenantId,
        name: &AgentName,
        version: u32,
    ) -> Result<Option<StoredDefinition>, StoreError> {
        let row = self
            .db
            .query_opt(
                sql::DEF_VERSION,
                &params![tenant.as_str(), name.as_str(), i32::try_from(version).unwrap_or(i32::MAX)],
            )
            .await?;
        row.as_ref().map(stored).transpose()
    }
}
