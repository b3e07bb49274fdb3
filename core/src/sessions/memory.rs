//! Sessions in process memory: the zero-setup default and the contract suite's reference.

use std::collections::HashMap;
use std::sync::Mutex;

use chrono::{DateTime, Utc};

use super::{SessionItem, SessionParent, SessionRecord, SessionStore, SessionWrite};
use crate::error::StoreError;
use crate::names::TenantId;
use crate::sync::lock;

/// A session and its items, keyed by tenant and id.
type SessionRows = HashMap<(TenantId, String), (SessionRecord, Vec<SessionItem>)>;

#[derive(Default)]
pub struct MemorySessionStore {
    rows: Mutex<SessionRows>,
}

fn items_from(start: u64, write: &SessionWrite) -> impl Iterator<Item = SessionItem> + '_ {
    write.messages.iter().enumerate().map(move |(i, m)| SessionItem {
        sequence: start + i as u64,
        message: m.clone(),
        run_id: write.run_id,
        created_at: write.now,
    })
}

#[async_trait::async_trait]
impl SessionStore for MemorySessionStore {
    async fn get(&self, tenant: &TenantId, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        Ok(lock(&self.rows).get(&(tenant.clone(), id.to_owned())).map(|(r, _)| r.clone()))
    }

    async fn items(&self, tenant: &TenantId, id: &str) -> Result<Vec<SessionItem>, StoreError> {
        Ok(lock(&self.rows).get(&(tenant.clone(), id.to_owned())).map(|(_, i)| i.clone()).unwrap_or_default())
    }

    async fn list(
        &self,
        tenant: &TenantId,
        owner: Option<&str>,
        skip: usize,
        take: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        let rows = lock(&self.rows);
        let mut list: Vec<&SessionRecord> = rows
            .iter()
            .filter(|((t, _), (r, _))| t == tenant && owner.is_none_or(|o| r.owner_user_id.as_deref() == Some(o)))
            .map(|(_, (r, _))| r)
            .collect();
        list.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.id.cmp(&b.id)));
        Ok(list.into_iter().skip(skip).take(take).cloned().collect())
    }

    async fn try_create(&self, tenant: &TenantId, id: &str, write: &SessionWrite) -> Result<SessionRecord, StoreError> {
        let mut rows = lock(&self.rows);
        let key = (tenant.clone(), id.to_owned());
        if rows.contains_key(&key) {
            return Err(StoreError::Conflict("The session was created by another turn.".into()));
        }
        let items: Vec<SessionItem> = items_from(0, write).collect();
        let record = SessionRecord {
            id: id.to_owned(),
            agent_name: Some(write.agent_name.clone()),
            version: 1,
            item_count: items.len() as u64,
            created_at: write.now,
            updated_at: write.now,
            owner_user_id: write.owner_user_id.clone(),
            parent: None,
        };
        rows.insert(key, (record.clone(), items));
        Ok(record)
    }

    async fn try_append(
        &self,
        tenant: &TenantId,
        id: &str,
        expected_version: u64,
        write: &SessionWrite,
    ) -> Result<SessionRecord, StoreError> {
        let mut rows = lock(&self.rows);
        let (record, items) = rows.get_mut(&(tenant.clone(), id.to_owned())).ok_or(StoreError::NotFound)?;
        if record.version != expected_version {
            return Err(StoreError::Conflict("Another turn saved this session first.".into()));
        }
        items.extend(items_from(record.item_count, write));
        record.item_count = items.len() as u64;
        record.version += 1;
        record.updated_at = write.now;
        record.agent_name = Some(write.agent_name.clone());
        Ok(record.clone())
    }

    async fn delete(&self, tenant: &TenantId, id: &str) -> Result<bool, StoreError> {
        Ok(lock(&self.rows).remove(&(tenant.clone(), id.to_owned())).is_some())
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
        let mut rows = lock(&self.rows);
        let (_, parent_items) = rows.get(&(tenant.clone(), source.to_owned())).ok_or(StoreError::NotFound)?;
        let new_key = (tenant.clone(), new_id.to_owned());
        if rows.contains_key(&new_key) {
            return Err(StoreError::Conflict(format!("A session named '{new_id}' already exists.")));
        }
        let items: Vec<SessionItem> = parent_items
            .iter()
            .filter(|i| i.sequence <= up_to)
            .map(|i| SessionItem { created_at: now, ..i.clone() })
            .collect();
        let record = SessionRecord {
            id: new_id.to_owned(),
            // A new conversation: the first agent that runs in it takes it.
            agent_name: None,
            version: 1,
            item_count: items.len() as u64,
            created_at: now,
            updated_at: now,
            owner_user_id,
            parent: Some(SessionParent { session_id: source.to_owned(), sequence: up_to }),
        };
        rows.insert(new_key, (record.clone(), items));
        Ok(record)
    }
}
