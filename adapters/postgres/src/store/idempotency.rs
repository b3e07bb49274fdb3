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
use tracon_core::error::StoreError;
use tracon_core::idempotency::{Claim, IdempotencyStore, KeyRef};

use super::Db;
use crate::codec::{ClaimColumns, IDEMPOTENCY_CLAIM_ATTEMPTS, IDEMPOTENCY_CONTENDED, idempotency_response};
use crate::params;
use crate::protect::Protection;
use crate::sql;

pub struct PgIdempotencyStore {
    db: Db,
    protection: Arc<Protection>,
}

impl PgIdempotencyStore {
    pub fn new(db: Db, protection: Arc<Protection>) -> Self {
        Self { db, protection }
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
            let row = self
                .db
                .query_opt(
                    sql::IDEMPOTENCY_CLAIM,
                    &params![key.tenant.as_str(), key.operation, key.key, request_hash, now, expires_at],
                )
                .await?;
            if let Some(row) = row {
                return ClaimColumns {
                    claimed: row.get("claimed")?,
                    request_hash: row.get("request_hash")?,
                    response_status: row.get("response_status")?,
                    response_body: row.get("response_body")?,
                }
                .claim(&self.protection, key);
            }
        }
        Err(StoreError::Conflict(IDEMPOTENCY_CONTENDED.into()))
    }

    async fn complete(&self, key: KeyRef<'_>, status: u16, body: &Value, now: DateTime<Utc>) -> Result<(), StoreError> {
        let (status, body) = idempotency_response(&self.protection, key, status, body)?;
        let done = self
            .db
            .execute(
                sql::IDEMPOTENCY_COMPLETE,
                &params![key.tenant.as_str(), key.operation, key.key, status, body, now],
            )
            .await?;
        if done == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn release(&self, key: KeyRef<'_>) -> Result<(), StoreError> {
        self.db.execute(sql::IDEMPOTENCY_RELEASE, &params![key.tenant.as_str(), key.operation, key.key]).await?;
        Ok(())
    }
}
