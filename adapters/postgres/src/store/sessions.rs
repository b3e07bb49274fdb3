//! Sessions on Postgres: the row carries the write generation; items are ordered rows.
//!
//! A later save is `UPDATE … WHERE version = $read` and its items go in the same statement,
//! so a writer that lost the race changes nothing. Item contents are protected values bound
//! to their session and position; a branch therefore re-seals the copies for the new session.

use std::sync::Arc;

use crate::driver::Row;
use chrono::{DateTime, Utc};
use tracon_core::error::StoreError;
use tracon_core::model::Message;
use tracon_core::names::{RunId, TenantId};
use tracon_core::sessions::{SessionItem, SessionParent, SessionRecord, SessionStore, SessionWrite};

use super::Db;
use crate::codec::{bigint, item_arrays, open_item};
use crate::params;
use crate::protect::Protection;
use crate::sql;

pub struct PgSessionStore {
    db: Db,
    protection: Arc<Protection>,
}

impl PgSessionStore {
    pub fn new(db: Db, protection: Arc<Protection>) -> Self {
        Self { db, protection }
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
        self.db
            .execute(
                sql::SESSION_CREATE,
                &params![
                    tenant.as_str(),
                    id,
                    agent_name,
                    seqs.len() as i64,
                    now,
                    owner,
                    parent.map(|p| p.session_id.as_str()),
                    parent.map(|p| bigint(p.sequence)),
                    run_id.map(|r| r.0),
                    &seqs,
                    &contents
                ],
            )
            .await
            .map_err(|e| match e {
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

fn record(row: &Row) -> Result<SessionRecord, StoreError> {
    let version: i64 = row.get("version")?;
    let count: i64 = row.get("item_count")?;
    let parent_id: Option<String> = row.get("parent_session_id")?;
    let parent_seq: Option<i64> = row.get("parent_sequence")?;
    Ok(SessionRecord {
        id: row.get("id")?,
        agent_name: row.get("agent_name")?,
        version: version.max(0) as u64,
        item_count: count.max(0) as u64,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
        owner_user_id: row.get("owner_user_id")?,
        parent: match (parent_id, parent_seq) {
            (Some(session_id), Some(seq)) => Some(SessionParent { session_id, sequence: seq.max(0) as u64 }),
            _ => None,
        },
    })
}

#[async_trait::async_trait]
impl SessionStore for PgSessionStore {
    async fn get(&self, tenant: &TenantId, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let row = self.db.query_opt(sql::SESSION_GET, &params![tenant.as_str(), id]).await?;
        row.as_ref().map(record).transpose()
    }

    async fn items(&self, tenant: &TenantId, id: &str) -> Result<Vec<SessionItem>, StoreError> {
        let rows = self.db.query(sql::SESSION_ITEMS, &params![tenant.as_str(), id]).await?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.get("sequence")?;
                let content: Vec<u8> = row.get("content")?;
                Ok(SessionItem {
                    sequence: seq.max(0) as u64,
                    message: open_item(&self.protection, tenant, id, seq, &content)?,
                    run_id: row.get::<Option<uuid::Uuid>>("run_id")?.map(RunId),
                    created_at: row.get("created_at")?,
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
        let rows = self.db.query(sql::SESSION_LIST, &params![tenant.as_str(), owner, skip as i64, take as i64]).await?;
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
        let expected = bigint(expected_version);
        // Positions are known only at the generation read; the write below checks that the
        // generation is still the same, so they cannot be stale when it lands.
        let count: Option<i64> = self
            .db
            .query_opt(sql::SESSION_COUNT_AT, &params![tenant.as_str(), id, expected])
            .await?
            .as_ref()
            .map(Row::first)
            .transpose()?;
        let Some(count) = count else {
            return match self.get(tenant, id).await? {
                None => Err(StoreError::NotFound),
                Some(_) => Err(StoreError::Conflict("Another turn saved this session first.".into())),
            };
        };
        let (seqs, contents) = item_arrays(&self.protection, tenant, id, count.max(0) as u64, &write.messages)?;
        let row = self
            .db
            .query_opt(
                sql::SESSION_APPEND,
                &params![
                    tenant.as_str(),
                    id,
                    expected,
                    seqs.len() as i64,
                    write.now,
                    &write.agent_name,
                    write.run_id.map(|r| r.0),
                    &seqs,
                    &contents
                ],
            )
            .await?;
        if row.is_none() {
            return Err(StoreError::Conflict("Another turn saved this session first.".into()));
        }
        self.get(tenant, id).await?.ok_or(StoreError::NotFound)
    }

    async fn delete(&self, tenant: &TenantId, id: &str) -> Result<bool, StoreError> {
        let done = self.db.execute(sql::SESSION_DELETE, &params![tenant.as_str(), id]).await?;
        Ok(done > 0)
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
        self.get(tenant, source).await?.ok_or(StoreError::NotFound)?;
        let messages: Vec<Message> =
            self.items(tenant, source).await?.into_iter().filter(|i| i.sequence <= up_to).map(|i| i.message).collect();
        let provenance = SessionParent { session_id: source.to_owned(), sequence: up_to };
        self.create(
            tenant,
            new_id,
            // A new conversation: the first agent that runs in it takes it.
            None,
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
