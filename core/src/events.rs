//! The run event vocabulary: a closed set, written in order by the run's single writer.
//!
//! The live stream of `POST /api/agents/{name}/run` and the recorded log both derive from
//! these events; each transport maps them to its own frame names.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::failure::RunFailure;
use crate::model::{FinishReason, Usage};
use crate::names::RunId;
use crate::pricing::CostSnapshot;
use crate::tools::pipeline::{ApprovalRequest, ToolCallStatus};

/// Something that happened in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type")]
pub enum RunEvent {
    #[serde(rename_all = "camelCase")]
    RunStarted {
        run_id: RunId,
        agent_name: String,
        agent_version: Option<u32>,
        started_at: DateTime<Utc>,
    },
    MessageDelta {
        text: String,
    },
    ReasoningDelta {
        text: String,
    },
    /// One model turn's complete text.
    MessageCompleted {
        text: String,
    },
    #[serde(rename_all = "camelCase")]
    ToolInvoking {
        call_id: String,
        tool_name: String,
        arguments: String,
    },
    /// The call produced a result the model saw (including a denial's reason).
    #[serde(rename_all = "camelCase")]
    ToolInvoked {
        call_id: String,
        tool_name: String,
        status: ToolCallStatus,
        result: String,
        duration_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        omitted_bytes: Option<u64>,
    },
    /// The call was rejected, failed, timed out or was canceled.
    #[serde(rename_all = "camelCase")]
    ToolFailed {
        call_id: String,
        tool_name: String,
        status: ToolCallStatus,
        error: String,
        duration_ms: u64,
    },
    RunAwaitingApproval {
        requests: Vec<ApprovalRequest>,
    },
    #[serde(rename_all = "camelCase")]
    RunCompleted {
        text: String,
        usage: Option<Usage>,
        cost: Option<CostSnapshot>,
        finish_reason: Option<FinishReason>,
    },
    RunFailed {
        error: RunFailure,
    },
    RunCanceled {
        error: RunFailure,
    },
}

impl RunEvent {
    /// Whether this event ends the run.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::RunCompleted { .. }
                | Self::RunFailed { .. }
                | Self::RunCanceled { .. }
                | Self::RunAwaitingApproval { .. }
        )
    }
}
