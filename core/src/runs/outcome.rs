//! How a run ended ([`RunOutcome`]), and what a queued run was accepted as ([`Accepted`]).

use crate::events::{ApprovalRequest, ClientToolCall};
use crate::failure::RunFailure;
use crate::model::{FinishReason, Usage};
use crate::names::{RunId, SessionId};
use crate::pricing::CostSnapshot;
use crate::runs::store::RunStatus;

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub run_id: RunId,
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub status: RunStatus,
    /// The final answer's text (the last model turn's).
    pub text: String,
    pub usage: Option<Usage>,
    pub cost: Option<CostSnapshot>,
    pub failure: Option<RunFailure>,
    pub approvals: Vec<ApprovalRequest>,
    pub model_provider: Option<String>,
    pub model: Option<String>,
    pub finish_reason: Option<FinishReason>,
    /// How many store writes recording the events took.
    pub event_writes: u64,
    /// Client-side calls handed back to the caller (status `Completed`, finish reason
    /// `toolCalls`); it answers them on its next request in `session_id`.
    pub client_tool_calls: Vec<ClientToolCall>,
    /// The session the run saved to, when it handed client-side calls back.
    pub session_id: Option<SessionId>,
}

/// What [`enqueue`] accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    pub run_id: RunId,
    pub job_id: uuid::Uuid,
}
