//! `Idempotency-Key` records on Postgres: one `idempotency_keys` row per tenant, operation
//! and key, its stored response body a protected value.
//!
//! A claim is one statement ([`sql::IDEMPOTENCY_CLAIM`]): insert, or replace an expired row,
//! or return the live row — the primary key lets exactly one of concurrent claimers win.
//! When the row it conflicted with was committed after its snapshot the statement returns
//! no row, and it is run again (a new snapshot sees that row, or claims a key freed meanwhile).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgPool, Row};
use tracon_core::idempotency::{Claim, IdempotencyStore, KeyRef};
use tracon_core::store::StoreError;

use super::{map_err, retrying};
use crate::codec::{ClaimColumns, IDEMPOTENCY_CLAIM_ATTEMPTS, IDEMPOTENCY_CONTENDED, idempotency_response};
use crate::protect::Protection;
use crate::sql;

pub struct PgIdempotencyStore {
    pool: PgPool,
    protection: Arc<Protection>,
}

impl PgIdempotencyStore {
    pub fn new(pool: PgPool, protection: Arc<Protection>) -> Self {
        Self { pool, protection }
    }
}

#[async_trait::async_trait]
impl IdempotencyStore for PgIdempotencyStore {
    async fn claim(
        &self,
        key: KeyRef<'_>,
        request_hash: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> Result<Claim, StoreError> {
        for _ in 0..IDEMPOTENCY_CLAIM_ATTEMPTS {
            let row = retrying(|| {
                sqlx::query(sql::IDEMPOTENCY_CLAIM)
                    .bind(key.tenant.as_str())
                    .bind(key.operation)
                    .bind(key.key)
                    .bind(request_hash)
                    .bind(now)
                    .bind(expires_at)
                    .fetch_optional(&self.pool)
            })
            .await?;
            if let Some(row) = row {
                return ClaimColumns {
                    claimed: row.try_get("claimed").map_err(map_err)?,
                    request_hash: row.try_get("request_hash").map_err(map_err)?,
                    response_status: row.try_get("response_status").map_err(map_err)?,
                    response_body: row.try_get("response_body").map_err(map_err)?,
                }
                .claim(&self.protection, key);
            }
        }
        Err(StoreError::Conflict(IDEMPOTENCY_CONTENDED.into()))
    }

    async fn complete(&self, key: KeyRef<'_>, status: u16, body: &Value, now: DateTime<Utc>) -> Result<(), StoreError> {
        let (status, body) = idempotency_response(&self.protection, key, status, body)?;
        let done = sqlx::query(sql::IDEMPOTENCY_COMPLETE)
            .bind(key.tenant.as_str())
            .bind(key.operation)
            .bind(key.key)
            .bind(status)
            .bind(body)
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        if done.rows_affected() == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn release(&self, key: KeyRef<'_>) -> Result<(), StoreError> {
        sqlx::query(sql::IDEMPOTENCY_RELEASE)
            .bind(key.tenant.as_str())
            .bind(key.operation)
            .bind(key.key)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }
}
