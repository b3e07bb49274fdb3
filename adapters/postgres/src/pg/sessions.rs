//! Sessions on Postgres: the row carries the write generation; items are ordered rows.
//!
//! A later save is `UPDATE … WHERE version = $read` and its items go in the same statement,
//! so a writer that lost the race changes nothing. Item contents are protected values bound
//! to their session and position; a branch therefore re-seals the copies for the new session.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tracon_core::model::Message;
use tracon_core::names::{RunId, TenantId};
use tracon_core::store::{SessionItem, SessionParent, SessionRecord, SessionStore, SessionWrite, StoreError};

use super::map_err;
use crate::codec::{item_arrays, open_item};
use crate::protect::Protection;
use crate::sql;

pub struct PgSessionStore {
    pool: PgPool,
    protection: Arc<Protection>,
}

impl PgSessionStore {
    pub fn new(pool: PgPool, protection: Arc<Protection>) -> Self {
        Self { pool, protection }
    }

    #[allow(clippy::too_many_arguments)]
    async fn create(
        &self,
        tenant: &TenantId,
        id: &str,
        agent_name: Option<&str>,
        messages: &[Message],
        run_id: Option<RunId>,
        owner: Option<&str>,
        parent: Option<&SessionParent>,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        let (seqs, contents) = item_arrays(&self.protection, tenant, id, 0, messages)?;
        sqlx::query(sql::SESSION_CREATE)
            .bind(tenant.as_str())
            .bind(id)
            .bind(agent_name)
            .bind(seqs.len() as i64)
            .bind(now)
            .bind(owner)
            .bind(parent.map(|p| p.session_id.as_str()))
            .bind(parent.map(|p| i64::try_from(p.sequence).unwrap_or(i64::MAX)))
            .bind(run_id.map(|r| r.0))
            .bind(&seqs)
            .bind(&contents)
            .execute(&self.pool)
            .await
            .map_err(|e| match map_err(e) {
                StoreError::Conflict(_) => StoreError::Conflict("The session already exists.".into()),
                other => other,
            })?;
        Ok(SessionRecord {
            id: id.to_owned(),
            agent_name: agent_name.map(str::to_owned),
            version: 1,
            item_count: seqs.len() as u64,
            created_at: now,
            updated_at: now,
            owner_user_id: owner.map(str::to_owned),
            parent: parent.cloned(),
        })
    }
}

fn record(row: &PgRow) -> Result<SessionRecord, StoreError> {
    let version: i64 = row.try_get("version").map_err(map_err)?;
    let count: i64 = row.try_get("item_count").map_err(map_err)?;
    let parent_id: Option<String> = row.try_get("parent_session_id").map_err(map_err)?;
    let parent_seq: Option<i64> = row.try_get("parent_sequence").map_err(map_err)?;
    Ok(SessionRecord {
        id: row.try_get("id").map_err(map_err)?,
        agent_name: row.try_get("agent_name").map_err(map_err)?,
        version: version.max(0) as u64,
        item_count: count.max(0) as u64,
        created_at: row.try_get("created_at").map_err(map_err)?,
        updated_at: row.try_get("updated_at").map_err(map_err)?,
        owner_user_id: row.try_get("owner_user_id").map_err(map_err)?,
        parent: match (parent_id, parent_seq) {
            (Some(session_id), Some(seq)) => Some(SessionParent { session_id, sequence: seq.max(0) as u64 }),
            _ => None,
        },
    })
}

#[async_trait::async_trait]
impl SessionStore for PgSessionStore {
    async fn get(&self, tenant: &TenantId, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let row = sqlx::query(sql::SESSION_GET)
            .bind(tenant.as_str())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(record).transpose()
    }

    async fn items(&self, tenant: &TenantId, id: &str) -> Result<Vec<SessionItem>, StoreError> {
        let rows = sqlx::query(sql::SESSION_ITEMS)
            .bind(tenant.as_str())
            .bind(id)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.try_get("sequence").map_err(map_err)?;
                let content: Vec<u8> = row.try_get("content").map_err(map_err)?;
                Ok(SessionItem {
                    sequence: seq.max(0) as u64,
                    message: open_item(&self.protection, tenant, id, seq, &content)?,
                    run_id: row.try_get::<Option<uuid::Uuid>, _>("run_id").map_err(map_err)?.map(RunId),
                    created_at: row.try_get("created_at").map_err(map_err)?,
                })
            })
            .collect()
    }

    async fn list(
        &self,
        tenant: &TenantId,
        owner: Option<&str>,
        skip: usize,
        take: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        let rows = sqlx::query(sql::SESSION_LIST)
            .bind(tenant.as_str())
            .bind(owner)
            .bind(skip as i64)
            .bind(take as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(record).collect()
    }

    async fn try_create(&self, tenant: &TenantId, id: &str, write: &SessionWrite) -> Result<SessionRecord, StoreError> {
        self.create(
            tenant,
            id,
            Some(&write.agent_name),
            &write.messages,
            write.run_id,
            write.owner_user_id.as_deref(),
            None,
            write.now,
        )
        .await
    }

    async fn try_append(
        &self,
        tenant: &TenantId,
        id: &str,
        expected_version: u64,
        write: &SessionWrite,
    ) -> Result<SessionRecord, StoreError> {
        let expected = i64::try_from(expected_version).unwrap_or(i64::MAX);
        // Positions are known only at the generation read; the write below checks that the
        // generation is still the same, so they cannot be stale when it lands.
        let count: Option<i64> = sqlx::query_scalar(sql::SESSION_COUNT_AT)
            .bind(tenant.as_str())
            .bind(id)
            .bind(expected)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        let Some(count) = count else {
            return match self.get(tenant, id).await? {
                None => Err(StoreError::NotFound),
                Some(_) => Err(StoreError::Conflict("Another turn saved this session first.".into())),
            };
        };
        let (seqs, contents) = item_arrays(&self.protection, tenant, id, count.max(0) as u64, &write.messages)?;
        let row = sqlx::query(sql::SESSION_APPEND)
            .bind(tenant.as_str())
            .bind(id)
            .bind(expected)
            .bind(seqs.len() as i64)
            .bind(write.now)
            .bind(&write.agent_name)
            .bind(write.run_id.map(|r| r.0))
            .bind(&seqs)
            .bind(&contents)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        if row.is_none() {
            return Err(StoreError::Conflict("Another turn saved this session first.".into()));
        }
        self.get(tenant, id).await?.ok_or(StoreError::NotFound)
    }

    async fn delete(&self, tenant: &TenantId, id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(sql::SESSION_DELETE)
            .bind(tenant.as_str())
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() > 0)
    }

    async fn branch(
        &self,
        tenant: &TenantId,
        source: &str,
        up_to: u64,
        new_id: &str,
        owner_user_id: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        let parent = self.get(tenant, source).await?.ok_or(StoreError::NotFound)?;
        let messages: Vec<Message> =
            self.items(tenant, source).await?.into_iter().filter(|i| i.sequence <= up_to).map(|i| i.message).collect();
        let provenance = SessionParent { session_id: source.to_owned(), sequence: up_to };
        self.create(
            tenant,
            new_id,
            parent.agent_name.as_deref(),
            &messages,
            None,
            owner_user_id.as_deref(),
            Some(&provenance),
            now,
        )
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => StoreError::Conflict(format!("A session named '{new_id}' already exists.")),
            other => other,
        })
    }
}
