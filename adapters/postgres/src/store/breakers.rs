//! The model providers' circuit breakers on Postgres: a `model_breakers` row per provider,
//! each change one statement (a failure is an upsert that returns the state after it; the
//! probe's claim an `UPDATE … RETURNING` that one caller wins).

use chrono::{DateTime, Utc};
use tracon_core::error::StoreError;
use tracon_core::model::breaker::{BreakerState, BreakerStore};

use super::Db;
use crate::driver::Row;
use crate::params;
use crate::sql;

pub struct PgBreakerStore {
    db: Db,
}

impl PgBreakerStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

fn state(row: &Row) -> Result<BreakerState, StoreError> {
    let failures: i32 = row.get("consecutive_failures")?;
    Ok(BreakerState {
        consecutive_failures: u32::try_from(failures).unwrap_or_default(),
        opened_at: row.get("opened_at")?,
        probe_until: row.get("probe_until")?,
    })
}

#[async_trait::async_trait]
impl BreakerStore for PgBreakerStore {
    async fn get(&self, provider: &str) -> Result<BreakerState, StoreError> {
        let row = self.db.query_opt(sql::BREAKER_GET, &params![provider]).await?;
        row.as_ref().map(state).transpose().map(Option::unwrap_or_default)
    }

    async fn failed(
        &self,
        provider: &str,
        now: DateTime<Utc>,
        threshold: u32,
        probe: bool,
    ) -> Result<BreakerState, StoreError> {
        let threshold = i32::try_from(threshold).unwrap_or(i32::MAX);
        let row = self.db.query_opt(sql::BREAKER_FAILED, &params![provider, now, threshold, probe]).await?;
        row.as_ref()
            .map(state)
            .transpose()?
            .ok_or_else(|| StoreError::Internal { detail: "the breaker upsert returned no row".into() })
    }

    async fn succeeded(&self, provider: &str, now: DateTime<Utc>) -> Result<(), StoreError> {
        self.db.execute(sql::BREAKER_SUCCEEDED, &params![provider, now]).await?;
        Ok(())
    }

    async fn claim_probe(
        &self,
        provider: &str,
        now: DateTime<Utc>,
        due: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Ok(self.db.execute(sql::BREAKER_CLAIM_PROBE, &params![provider, now, due, until]).await? == 1)
    }
}
