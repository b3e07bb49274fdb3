//! The response cache on Postgres: a `model_response_cache` row per tenant and key, the
//! answer a protected value (it holds what the model said), each read and write one statement.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tracon_core::error::{StoreError, check_text};
use tracon_core::model::cache::{CachedAnswer, ResponseCacheStore};
use tracon_core::names::TenantId;

use super::Db;
use crate::codec::{corrupt, unreadable};
use crate::params;
use crate::protect::{Place, Protection};
use crate::sql;

pub struct PgResponseCache {
    db: Db,
    protection: Arc<Protection>,
}

impl PgResponseCache {
    pub fn new(db: Db, protection: Arc<Protection>) -> Self {
        Self { db, protection }
    }
}

fn place<'a>(tenant: &'a TenantId, key: &'a str) -> Place<'a> {
    Place { tenant: tenant.as_str(), table: "model_response_cache", column: "answer", row: key }
}

#[async_trait::async_trait]
impl ResponseCacheStore for PgResponseCache {
    async fn get(&self, tenant: &TenantId, key: &str, now: DateTime<Utc>) -> Result<Option<CachedAnswer>, StoreError> {
        let Some(row) = self.db.query_opt(sql::CACHE_GET, &params![tenant.as_str(), key, now]).await? else {
            return Ok(None);
        };
        let sealed: Vec<u8> = row.get("answer")?;
        let json = self.protection.open(&place(tenant, key), &sealed).map_err(unreadable)?;
        serde_json::from_str(&json).map(Some).map_err(|e| corrupt("cached answer", e))
    }

    async fn put(
        &self,
        tenant: &TenantId,
        key: &str,
        answer: &CachedAnswer,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        check_text("answer", &answer.text)?;
        let json = serde_json::to_string(answer).map_err(|e| corrupt("cached answer", e))?;
        let sealed = self.protection.seal(&place(tenant, key), &json);
        self.db.execute(sql::CACHE_PUT, &params![tenant.as_str(), key, sealed, expires_at]).await?;
        Ok(())
    }

    async fn purge_expired(&self, now: DateTime<Utc>, limit: usize) -> Result<u64, StoreError> {
        self.db.execute(sql::CACHE_PURGE, &params![now, limit as i64]).await
    }
}
