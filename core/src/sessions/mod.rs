//! Sessions as stored: a conversation's items with a write generation ([`SessionStore`]),
//! and its in-memory implementation ([`memory`]).
//!
//! A session is one agent's conversation ([`SessionRecord::check_agent`]): the first turn
//! names the agent, and a run of another agent in it is refused ([`AgentMismatch`]) — its
//! history holds that agent's instructions' answers and tool calls. A reserved conversation
//! and a branch have no agent until their first turn: a branch is how a conversation goes on
//! with another agent.

pub mod memory;
pub mod ownership;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::StoreError;
use crate::model::Message;
use crate::names::{RunId, TenantId};

/// Where a branched session came from (provenance only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionParent {
    pub session_id: String,
    /// The last item copied.
    pub sequence: u64,
}

/// A session: metadata and its write generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    pub id: String,
    /// The agent whose conversation it is; `null` (or empty) until its first turn.
    pub agent_name: Option<String>,
    /// The write generation: 1 after the first save, +1 on every save.
    pub version: u64,
    pub item_count: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub owner_user_id: Option<String>,
    pub parent: Option<SessionParent>,
}

impl SessionRecord {
    /// The agent whose conversation this is; `None` while no agent has spoken in it (a
    /// reserved conversation, a branch).
    pub fn agent(&self) -> Option<&str> {
        self.agent_name.as_deref().filter(|a| !a.is_empty())
    }

    /// Refuses a run of `agent` in another agent's conversation.
    pub fn check_agent(&self, agent: &str) -> Result<(), AgentMismatch> {
        match self.agent() {
            Some(owner) if owner != agent => Err(AgentMismatch {
                session: self.id.clone(),
                session_agent: owner.to_owned(),
                agent: agent.to_owned(),
            }),
            _ => Ok(()),
        }
    }
}

/// A run of one agent in another agent's conversation (`409 session_agent_mismatch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentMismatch {
    pub session: String,
    /// The agent whose conversation the session is.
    pub session_agent: String,
    /// The agent the run asked for.
    pub agent: String,
}

impl AgentMismatch {
    pub fn message(&self) -> String {
        use crate::names::truncate_for_message as short;
        format!(
            "Session '{}' is a conversation of agent '{}'; it cannot be continued by agent '{}'. Branch it (POST /api/sessions/{{id}}/branch) to go on with another agent.",
            short(&self.session),
            short(&self.session_agent),
            short(&self.agent)
        )
    }
}

/// One conversation item, at its position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionItem {
    /// 0-based position: the number the branch endpoint takes.
    pub sequence: u64,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub message: Message,
    pub run_id: Option<RunId>,
    pub created_at: DateTime<Utc>,
}

/// What a turn appends to a session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionWrite {
    pub agent_name: String,
    pub run_id: Option<RunId>,
    pub messages: Vec<Message>,
    pub owner_user_id: Option<String>,
    pub now: DateTime<Utc>,
}

/// Sessions with optimistic concurrency: the first save creates, every later save must
/// name the generation it read. Neither overwrites.
#[async_trait::async_trait]
pub trait SessionStore: Send + Sync {
    async fn get(&self, tenant: &TenantId, id: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// Every item, in sequence order.
    async fn items(&self, tenant: &TenantId, id: &str) -> Result<Vec<SessionItem>, StoreError>;
    /// Newest update first. `owner` narrows the list to that user's sessions, before paging
    /// (session ownership); `None` lists every session of the tenant.
    async fn list(
        &self,
        tenant: &TenantId,
        owner: Option<&str>,
        skip: usize,
        take: usize,
    ) -> Result<Vec<SessionRecord>, StoreError>;
    /// First save. `Conflict` when the id already exists.
    async fn try_create(&self, tenant: &TenantId, id: &str, write: &SessionWrite) -> Result<SessionRecord, StoreError>;
    /// A later save: appends the items only if the generation is still `expected_version`;
    /// otherwise `Conflict` and nothing is written. `NotFound` if the session is gone.
    async fn try_append(
        &self,
        tenant: &TenantId,
        id: &str,
        expected_version: u64,
        write: &SessionWrite,
    ) -> Result<SessionRecord, StoreError>;
    /// Deletes the session and its items; `false` when there was nothing to delete.
    async fn delete(&self, tenant: &TenantId, id: &str) -> Result<bool, StoreError>;
    /// Copies items `0..=up_to` of `source` into a new session `new_id` whose parent is
    /// recorded. `NotFound` when the source does not exist; `Conflict` when `new_id` does.
    async fn branch(
        &self,
        tenant: &TenantId,
        source: &str,
        up_to: u64,
        new_id: &str,
        owner_user_id: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError>;
}
