//! Workflow checkpoints on Postgres: one `workflow_checkpoints` row each, its state (position,
//! pending work, the messages since the run's previous checkpoint) a protected value. A save
//! is one statement.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tracon_core::error::StoreError;
use tracon_core::names::{RunId, TenantId};
use tracon_core::workflows::checkpoints::{
    Checkpoint, CheckpointRef, CheckpointStore, Position, check_checkpoint_text,
};
use tracon_core::workflows::functions::WorkflowMessage;

use super::Db;
use crate::codec::{corrupt, unreadable};
use crate::params;
use crate::protect::{Place, Protection};
use crate::sql;

pub struct PgCheckpointStore {
    db: Db,
    protection: Arc<Protection>,
}

impl PgCheckpointStore {
    pub fn new(db: Db, protection: Arc<Protection>) -> Self {
        Self { db, protection }
    }
}

/// The `state` column's JSON.
#[derive(Serialize, Deserialize)]
struct State {
    position: Position,
    messages: Vec<WorkflowMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    base: Option<CheckpointRef>,
}

fn place<'a>(tenant: &'a TenantId, row: &'a str) -> Place<'a> {
    Place { tenant: tenant.as_str(), table: "workflow_checkpoints", column: "state", row }
}

#[async_trait::async_trait]
impl CheckpointStore for PgCheckpointStore {
    async fn save(&self, tenant: &TenantId, c: &Checkpoint) -> Result<(), StoreError> {
        check_checkpoint_text(c)?;
        let state = State { position: c.position.clone(), messages: c.messages.clone(), base: c.base };
        let json = serde_json::to_string(&state).map_err(|e| corrupt("checkpoint", e))?;
        let row = c.id.to_string();
        let sealed = self.protection.seal(&place(tenant, &row), &json);
        let envelope = i32::try_from(c.envelope).unwrap_or(i32::MAX);
        let sequence = i32::try_from(c.sequence).unwrap_or(i32::MAX);
        let (run, at) = (c.run_id.0, c.created_at);
        self.db
            .execute(sql::CHECKPOINT_SAVE, &params![tenant.as_str(), run, c.id, sequence, envelope, at, sealed])
            .await?;
        Ok(())
    }

    async fn list(&self, tenant: &TenantId, run: RunId) -> Result<Vec<Checkpoint>, StoreError> {
        let rows = self.db.query(sql::CHECKPOINT_LIST, &params![tenant.as_str(), run.0]).await?;
        rows.iter()
            .map(|r| {
                let id: uuid::Uuid = r.get("id")?;
                let envelope: i32 = r.get("envelope")?;
                let sequence: i32 = r.get("seq")?;
                let sealed: Vec<u8> = r.get("state")?;
                let json = self.protection.open(&place(tenant, &id.to_string()), &sealed).map_err(unreadable)?;
                let state: State = serde_json::from_str(&json).map_err(|e| corrupt("checkpoint", e))?;
                Ok(Checkpoint {
                    id,
                    run_id: run,
                    sequence: sequence.max(0) as u32,
                    envelope: envelope.max(0) as u32,
                    created_at: r.get("created_at")?,
                    position: state.position,
                    messages: state.messages,
                    base: state.base,
                })
            })
            .collect()
    }

    async fn purge(&self, before: DateTime<Utc>, limit: usize) -> Result<u64, StoreError> {
        self.db.execute(sql::CHECKPOINT_PURGE, &params![before, limit as i64]).await
    }
}
