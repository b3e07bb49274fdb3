//! Workflow checkpoints: the [`CheckpointStore`] port and its in-memory store.
//!
//! A checkpoint is written at each super-step boundary (and as each node of a `Concurrent`
//! step ends). It holds the workflow's own position and pending work, and only the messages
//! produced since the previous checkpoint — never the whole conversation: the conversation at
//! a checkpoint is its run's earlier checkpoints' messages, then its own, after the run it
//! resumed from (`base`). An agent's answer is held by *reference*: the id of the run that
//! recorded it, without its text, which that run's log holds already (read back on resume with
//! [`crate::runs::store::RunStore::answers`]). Only what exists nowhere else — the caller's
//! input, a person's answer, a function's output — is held as text. So storage grows with the
//! work, not with its square, and an answer is never stored twice.

use std::collections::BTreeMap;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::functions::WorkflowMessage;
use crate::error::StoreError;
use crate::names::{RunId, TenantId};
use crate::sync::lock;

/// The envelope generation this build writes. Generation 1 (every message with its text) is
/// still read; generation 2 holds agents' answers by reference.
pub const ENVELOPE: u32 = 2;
/// The oldest envelope generation this build reads.
pub const OLDEST_READ: u32 = 1;
/// The most checkpoints the memory store keeps per run; the oldest go first.
pub const MEMORY_KEEPS: usize = 50;

/// Where a run stands between two super-steps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Position {
    /// Super-steps completed (the run's first is 1; a resumed run counts on).
    pub super_step: u32,
    /// Agent turns taken, what `maxIterations` bounds.
    pub turns: u32,
    /// `Sequential`: the next node's index.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub next_node: usize,
    /// `Handoff`: the agent that has the floor; `GroupChat`/`Magentic`: the participant the
    /// manager picked, and for `Magentic` its instruction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speaker: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
    /// `Concurrent`: the executors of the current step still to answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
    /// `Magentic`: the manager's answers that named no usable step since its last plan.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stalls: u32,
    /// The request a person is to answer, when the run stopped to ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<InputRequest>,
    /// The agent nodes whose runs stopped for a person's approval of a tool call, when the
    /// run stopped with them: once every request of theirs is decided, each goes on as its
    /// own run's approval resumption.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<NodeApproval>,
}

/// An agent node stopped for approval: its executor and the run that stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeApproval {
    pub executor_id: String,
    pub run_id: RunId,
}

/// A count left out of a checkpoint while it is zero (the default it reads back as).
fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

/// A question a workflow asks a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InputRequest {
    pub request_id: Uuid,
    pub executor_id: String,
    pub prompt: String,
}

/// The run and checkpoint a resumed run's conversation starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointRef {
    pub run_id: RunId,
    pub checkpoint_id: Uuid,
}

/// One checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    pub id: Uuid,
    pub run_id: RunId,
    /// 1, 2, … in the order the run wrote them: the order they are listed and read in. A
    /// second checkpoint under the same number is a `Conflict` (one writer per run).
    pub sequence: u32,
    /// The envelope generation that wrote it ([`ENVELOPE`]).
    pub envelope: u32,
    pub created_at: DateTime<Utc>,
    pub position: Position,
    /// The messages produced since the run's previous checkpoint; an agent's answer (a message
    /// with a `run_id`) without its text ([`WorkflowMessage::by_reference`]).
    pub messages: Vec<WorkflowMessage>,
    /// On a resumed run's first checkpoint: where its conversation before this one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<CheckpointRef>,
}

/// Checkpoints of workflow runs.
#[async_trait::async_trait]
pub trait CheckpointStore: Send + Sync {
    /// Writes one checkpoint (one statement). A second with the same id, or the same run and
    /// sequence, is a `Conflict`.
    async fn save(&self, tenant: &TenantId, checkpoint: &Checkpoint) -> Result<(), StoreError>;
    /// A run's checkpoints in sequence order (at most [`MEMORY_KEEPS`] in memory).
    async fn list(&self, tenant: &TenantId, run: RunId) -> Result<Vec<Checkpoint>, StoreError>;
    /// Removes the checkpoints of every run whose newest checkpoint is older than `before`
    /// (retention: a run keeps all of them or none), at most `limit` runs; how many were
    /// removed.
    async fn purge(&self, before: DateTime<Utc>, limit: usize) -> Result<u64, StoreError>;
}

/// Checkpoints in process memory, at most [`MEMORY_KEEPS`] per run: a dropped checkpoint's
/// messages move into the next one, so the oldest kept still resumes the whole conversation.
#[derive(Default)]
pub struct MemoryCheckpointStore {
    rows: Mutex<BTreeMap<(TenantId, RunId), Vec<Checkpoint>>>,
}

#[async_trait::async_trait]
impl CheckpointStore for MemoryCheckpointStore {
    async fn save(&self, tenant: &TenantId, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        check_checkpoint_text(checkpoint)?;
        let mut rows = lock(&self.rows);
        let taken = |c: &Checkpoint| {
            c.id == checkpoint.id || (c.run_id == checkpoint.run_id && c.sequence == checkpoint.sequence)
        };
        if rows.values().flatten().any(taken) {
            return Err(StoreError::Conflict(format!(
                "Checkpoint {} (number {} of run {}) exists.",
                checkpoint.id, checkpoint.sequence, checkpoint.run_id
            )));
        }
        let run = rows.entry((tenant.clone(), checkpoint.run_id)).or_default();
        let at = run.partition_point(|c| c.sequence < checkpoint.sequence);
        run.insert(at, checkpoint.clone());
        if run.len() > MEMORY_KEEPS {
            let dropped = run.remove(0);
            let next = &mut run[0];
            let mut messages = dropped.messages;
            messages.append(&mut next.messages);
            next.messages = messages;
            next.base = next.base.or(dropped.base);
        }
        Ok(())
    }

    async fn list(&self, tenant: &TenantId, run: RunId) -> Result<Vec<Checkpoint>, StoreError> {
        Ok(lock(&self.rows).get(&(tenant.clone(), run)).cloned().unwrap_or_default())
    }

    async fn purge(&self, before: DateTime<Utc>, limit: usize) -> Result<u64, StoreError> {
        let mut rows = lock(&self.rows);
        let old: Vec<(TenantId, RunId)> = rows
            .iter()
            .filter(|(_, v)| v.last().is_none_or(|c| c.created_at < before))
            .map(|(k, _)| k.clone())
            .take(limit)
            .collect();
        let mut removed = 0;
        for key in old {
            removed += rows.remove(&key).map_or(0, |v| v.len() as u64);
        }
        Ok(removed)
    }
}

/// [`crate::error::check_text`] over a checkpoint's text (its column cannot hold U+0000).
pub fn check_checkpoint_text(checkpoint: &Checkpoint) -> Result<(), StoreError> {
    crate::definitions::check_definition_text(checkpoint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflows::functions::WorkflowMessage;

    #[tokio::test]
    async fn memory_keeps_fifty_per_run_and_the_oldest_kept_still_holds_the_whole_conversation() {
        let store = MemoryCheckpointStore::default();
        let tenant = TenantId::default_tenant();
        let run = RunId(Uuid::now_v7());
        for n in 1..=60u32 {
            let c = Checkpoint {
                id: Uuid::now_v7(),
                run_id: run,
                sequence: n,
                envelope: ENVELOPE,
                created_at: Utc::now(),
                position: Position { super_step: n, ..Position::default() },
                messages: vec![WorkflowMessage::user(format!("m{n}"))],
                base: None,
            };
            store.save(&tenant, &c).await.unwrap();
        }
        let kept = store.list(&tenant, run).await.unwrap();
        assert_eq!(kept.len(), MEMORY_KEEPS);
        assert_eq!(kept[0].sequence, 11);
        let conversation: Vec<String> = kept.iter().flat_map(|c| c.messages.iter().map(|m| m.text.clone())).collect();
        assert_eq!(conversation, (1..=60).map(|n| format!("m{n}")).collect::<Vec<_>>());
    }
}
