//! Agent definitions and their version history on Postgres: one row per version.

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};
use tracon_core::definition::AgentDefinition;
use tracon_core::names::{AgentName, TenantId};
use tracon_core::store::{DefinitionStore, StoreError, StoredDefinition};

use super::{map_err, retrying};
use crate::codec::corrupt;
use crate::sql;

pub struct PgDefinitionStore {
    pool: PgPool,
}

impl PgDefinitionStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

fn stored(row: &sqlx::postgres::PgRow) -> Result<StoredDefinition, StoreError> {
    let version: i32 = row.try_get("version").map_err(map_err)?;
    let definition: serde_json::Value = row.try_get("definition").map_err(map_err)?;
    Ok(StoredDefinition {
        definition: serde_json::from_value(definition).map_err(|e| corrupt("definition", e))?,
        version: version.max(0) as u32,
        created_at: row.try_get("created_at").map_err(map_err)?,
        updated_at: row.try_get("written_at").map_err(map_err)?,
    })
}

fn json(def: &AgentDefinition) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(def).map_err(|e| corrupt("definition", e))
}

#[async_trait::async_trait]
impl DefinitionStore for PgDefinitionStore {
    async fn get(&self, tenant: &TenantId, name: &AgentName) -> Result<Option<StoredDefinition>, StoreError> {
        let row = sqlx::query(sql::DEF_GET)
            .bind(tenant.as_str())
            .bind(name.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(stored).transpose()
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<StoredDefinition>, StoreError> {
        let rows = sqlx::query(sql::DEF_LIST)
            .bind(tenant.as_str())
            .bind(skip as i64)
            .bind(take as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(stored).collect()
    }

    async fn create(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError> {
        tracon_core::store::check_definition_text(&definition)?;
        let body = json(&definition)?;
        sqlx::query(sql::DEF_CREATE)
            .bind(tenant.as_str())
            .bind(&definition.name)
            .bind(&body)
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(|e| match map_err(e) {
                StoreError::Conflict(_) => {
                    StoreError::Conflict(format!("An agent named '{}' already exists.", definition.name))
                }
                other => other,
            })?;
        Ok(StoredDefinition { definition, version: 1, created_at: now, updated_at: now })
    }

    async fn update(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError> {
        tracon_core::store::check_definition_text(&definition)?;
        let body = json(&definition)?;
        // Two concurrent saves can pick the same next version; the loser retries on top.
        let mut attempts = 0;
        loop {
            let result = retrying(|| {
                sqlx::query(sql::DEF_UPDATE)
                    .bind(tenant.as_str())
                    .bind(&definition.name)
                    .bind(&body)
                    .bind(now)
                    .fetch_optional(&self.pool)
            })
            .await;
            match result {
                Ok(Some(row)) => {
                    let version: i32 = row.try_get("version").map_err(map_err)?;
                    return Ok(StoredDefinition {
                        definition,
                        version: version.max(0) as u32,
                        created_at: row.try_get("created_at").map_err(map_err)?,
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
        let done = sqlx::query(sql::DEF_DELETE)
            .bind(tenant.as_str())
            .bind(name.as_str())
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() > 0)
    }

    async fn versions(&self, tenant: &TenantId, name: &AgentName) -> Result<Vec<StoredDefinition>, StoreError> {
        let rows = sqlx::query(sql::DEF_VERSIONS)
            .bind(tenant.as_str())
            .bind(name.as_str())
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(stored).collect()
    }

    async fn version(
        &self,
        tenant: &TenantId,
        name: &AgentName,
        version: u32,
    ) -> Result<Option<StoredDefinition>, StoreError> {
        let row = sqlx::query(sql::DEF_VERSION)
            .bind(tenant.as_str())
            .bind(name.as_str())
            .bind(i32::try_from(version).unwrap_or(i32::MAX))
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(stored).transpose()
    }
}
