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
use crate::tools::effect::ToolEffect;
use serde_json::Value;

/// A call of a client-side tool, handed back to the run's caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientToolCall {
    pub call_id: String,
    pub tool_name: String,
    /// The arguments the model gave, as a JSON value (an object for a well-formed call; the
    /// model's raw text as a string when it was not JSON).
    #[schema(value_type = Object)]
    pub arguments: serde_json::Value,
}

impl ClientToolCall {
    pub fn from_call(call: &crate::model::ToolCall) -> Self {
        Self {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            arguments: serde_json::from_str(&call.arguments)
                .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone())),
        }
    }
}

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
        /// The tool's display name, when it has one ([`crate::tools::ToolRegistration::display_name`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        display_name: Option<String>,
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
        /// Calls of client-side tools the caller is to answer on its next request (then
        /// `finish_reason` is `toolCalls`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        client_tool_calls: Vec<ClientToolCall>,
    },
    RunFailed {
        error: RunFailure,
    },
    RunCanceled {
        error: RunFailure,
    },
    /// Reference documents attached to the run: names and sizes, never the content.
    DocumentsAttached {
        documents: Vec<DocumentInfo>,
    },
    /// An event a tool wrote itself. `customType` is 1–128 characters of lowercase ASCII
    /// letters, digits, `.`, `_`, `-`; the `tracon.` prefix is reserved.
    /// A generated agent tool started a child run (written to the tree root's log).
    #[serde(rename_all = "camelCase")]
    ChildStarted {
        child_run_id: RunId,
        parent_run_id: RunId,
        agent_name: String,
        depth: u32,
        call_id: String,
    },
    /// A child run ended (written to the tree root's log): `status` is its run status.
    #[serde(rename_all = "camelCase")]
    ChildCompleted {
        child_run_id: RunId,
        parent_run_id: RunId,
        agent_name: String,
        status: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<RunFailure>,
    },
    /// A wait limit cut a child call: `layer` is `ChildDeadline` (the child was asked to stop
    /// and did) or `WaitTimeout` (the caller stopped waiting; the child's eventual result is
    /// discarded). A provider failure in the child is not a timeout and writes no such event.
    #[serde(rename_all = "camelCase")]
    ChildRunTimedOut {
        child_run_id: RunId,
        parent_run_id: RunId,
        agent_name: String,
        layer: String,
        after_ms: u64,
    },
    /// A harness-loop iteration was evaluated: whether a criterion asked for another one
    /// (`criterion` names it), or which criterion failed to evaluate (`failed`, the loop
    /// stops). `ceilingReached`: the next iteration is the last, and is not evaluated.
    #[serde(rename_all = "camelCase")]
    LoopIterationCompleted {
        iteration: u32,
        continued: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        criterion: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        failed: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        ceiling_reached: bool,
    },
    #[serde(rename_all = "camelCase")]
    Custom {
        custom_type: String,
        payload: String,
    },
    /// A workflow's root run began (after `RunStarted`): which workflow, and, for a resumed
    /// run, the checkpoint it goes on from.
    #[serde(rename_all = "camelCase")]
    WorkflowStarted {
        workflow_name: String,
        workflow_version: Option<u32>,
        kind: crate::workflows::definition::WorkflowKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resumed_from: Option<crate::workflows::checkpoints::CheckpointRef>,
    },
    /// A workflow node started: `executorId` is the graph's node id; `runId` the run an agent
    /// node opened (none for a function node). `executorKind`: `Agent`, `Function`, `Manager`.
    #[serde(rename_all = "camelCase")]
    ExecutorInvoked {
        executor_id: String,
        executor_kind: String,
        super_step: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_id: Option<RunId>,
    },
    /// A workflow node answered.
    #[serde(rename_all = "camelCase")]
    ExecutorCompleted {
        executor_id: String,
        super_step: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_id: Option<RunId>,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        /// Attempts a function node took (more than 1 after transient failures).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempts: Option<u32>,
    },
    /// A workflow node failed; the run fails with it.
    #[serde(rename_all = "camelCase")]
    ExecutorFailed {
        executor_id: String,
        super_step: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_id: Option<RunId>,
        error: RunFailure,
    },
    /// A model call's attempt failed before its answer started (`errorType`: the class it
    /// would have failed the run with); the same provider is tried again after `delayMs`.
    #[serde(rename_all = "camelCase")]
    ModelRetried {
        provider: String,
        model: String,
        /// The attempt that failed, from 1.
        attempt: u32,
        error_type: String,
        delay_ms: u64,
    },
    /// A model call moved on to the next link of its binding's fallback chain: the link it
    /// left failed with `errorType` (after its retries), or its circuit breaker was open
    /// (`breaker_open`: it was not called).
    #[serde(rename_all = "camelCase")]
    ModelFallback {
        from_provider: String,
        from_model: String,
        to_provider: String,
        to_model: String,
        error_type: String,
    },
    /// A model call was answered from the response cache: no call, no tokens spent.
    #[serde(rename_all = "camelCase")]
    ModelCacheHit {
        provider: String,
        model: String,
    },
    /// The model's answer was not the structured output the binding asks for (see
    /// [`crate::structured`]): `problems` say why; with `repairing` the model is asked again.
    #[serde(rename_all = "camelCase")]
    ResponseRejected {
        /// The rejection, from 1.
        attempt: u32,
        problems: Vec<String>,
        repairing: bool,
    },
    /// A checkpoint was written at the end of a super-step.
    #[serde(rename_all = "camelCase")]
    WorkflowCheckpointed {
        checkpoint_id: uuid::Uuid,
        super_step: u32,
    },
    /// The workflow stopped to ask a person (a checkpoint holds where it stands); answer with
    /// `POST /api/workflows/runs/{runId}/requests/{requestId}/respond`.
    RunAwaitingInput {
        requests: Vec<crate::workflows::checkpoints::InputRequest>,
    },
}

/// A document's name and size, as the run record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DocumentInfo {
    pub name: String,
    pub size_bytes: u64,
}

/// An event as the log stores it: numbered by the run's single writer, gapless from 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordedEvent {
    pub sequence: u64,
    pub timestamp: DateTime<Utc>,
    #[serde(flatten)]
    pub event: RunEvent,
}

/// Why a custom event was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidCustomEvent(pub String);

/// Checks a `customType`: 1–128 characters of `[a-z0-9._-]`, not under `tracon.`.
pub fn check_custom_type(custom_type: &str) -> Result<(), InvalidCustomEvent> {
    let ok = (1..=128).contains(&custom_type.len())
        && custom_type.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'));
    if !ok {
        return Err(InvalidCustomEvent(
            "customType is 1-128 characters of lowercase ASCII letters, digits, '.', '_' or '-'.".into(),
        ));
    }
    if custom_type.starts_with("tracon.") {
        return Err(InvalidCustomEvent("The 'tracon.' prefix is reserved for Tracon's own events.".into()));
    }
    Ok(())
}

impl RunEvent {
    /// The SSE frame name of the recorded log (`GET /api/runs/{id}/events`).
    pub fn log_name(&self) -> &'static str {
        match self {
            Self::RunStarted { .. } => "run.started",
            Self::MessageDelta { .. } => "message.delta",
            Self::ReasoningDelta { .. } => "reasoning.delta",
            Self::MessageCompleted { .. } => "message.completed",
            Self::ToolInvoking { .. } => "tool.invoking",
            Self::ToolInvoked { .. } => "tool.invoked",
            Self::ToolFailed { .. } => "tool.failed",
            Self::RunAwaitingApproval { .. } => "run.awaiting_approval",
            Self::RunCompleted { .. } => "run.completed",
            Self::RunFailed { .. } => "run.failed",
            Self::RunCanceled { .. } => "run.canceled",
            Self::DocumentsAttached { .. } => "documents.attached",
            Self::ChildStarted { .. } => "child.started",
            Self::ChildCompleted { .. } => "child.completed",
            Self::ChildRunTimedOut { .. } => "child.timed_out",
            Self::LoopIterationCompleted { .. } => "loop.iteration_completed",
            Self::Custom { .. } => "custom",
            Self::WorkflowStarted { .. } => "workflow.started",
            Self::ExecutorInvoked { .. } => "executor.invoked",
            Self::ExecutorCompleted { .. } => "executor.completed",
            Self::ExecutorFailed { .. } => "executor.failed",
            Self::WorkflowCheckpointed { .. } => "workflow.checkpointed",
            Self::ModelRetried { .. } => "model.retried",
            Self::ModelFallback { .. } => "model.fallback",
            Self::ResponseRejected { .. } => "response.rejected",
            Self::ModelCacheHit { .. } => "model.cache_hit",
            Self::RunAwaitingInput { .. } => "run.awaiting_input",
        }
    }

    /// The event's type name, as its JSON `type` field spells it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::RunStarted { .. } => "RunStarted",
            Self::MessageDelta { .. } => "MessageDelta",
            Self::ReasoningDelta { .. } => "ReasoningDelta",
            Self::MessageCompleted { .. } => "MessageCompleted",
            Self::ToolInvoking { .. } => "ToolInvoking",
            Self::ToolInvoked { .. } => "ToolInvoked",
            Self::ToolFailed { .. } => "ToolFailed",
            Self::RunAwaitingApproval { .. } => "RunAwaitingApproval",
            Self::RunCompleted { .. } => "RunCompleted",
            Self::RunFailed { .. } => "RunFailed",
            Self::RunCanceled { .. } => "RunCanceled",
            Self::DocumentsAttached { .. } => "DocumentsAttached",
            Self::ChildStarted { .. } => "ChildStarted",
            Self::ChildCompleted { .. } => "ChildCompleted",
            Self::ChildRunTimedOut { .. } => "ChildRunTimedOut",
            Self::LoopIterationCompleted { .. } => "LoopIterationCompleted",
            Self::Custom { .. } => "Custom",
            Self::WorkflowStarted { .. } => "WorkflowStarted",
            Self::ExecutorInvoked { .. } => "ExecutorInvoked",
            Self::ExecutorCompleted { .. } => "ExecutorCompleted",
            Self::ExecutorFailed { .. } => "ExecutorFailed",
            Self::WorkflowCheckpointed { .. } => "WorkflowCheckpointed",
            Self::ModelRetried { .. } => "ModelRetried",
            Self::ModelFallback { .. } => "ModelFallback",
            Self::ResponseRejected { .. } => "ResponseRejected",
            Self::ModelCacheHit { .. } => "ModelCacheHit",
            Self::RunAwaitingInput { .. } => "RunAwaitingInput",
        }
    }

    /// Whether this event ends the run.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::RunCompleted { .. }
                | Self::RunFailed { .. }
                | Self::RunCanceled { .. }
                | Self::RunAwaitingApproval { .. }
                | Self::RunAwaitingInput { .. }
        )
    }
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum ToolCallStatus {
    Succeeded,
    /// The authorization handler said no; the reason was the model's result.
    Denied,
    /// Arguments (or the tool name) were refused before the body ran.
    Rejected,
    TimedOut,
    Failed,
    /// The run was cancelled while the call ran.
    Canceled,
    /// Waiting for a person's decision; the body has not run.
    AwaitingApproval,
    /// The body started and has not reported an ending: while the run runs, it is running;
    /// after a crash, its outcome is unknown (the step ledger's open entry).
    Started,
}

impl ToolCallStatus {
    /// Whether the run log records this as `ToolFailed` rather than `ToolInvoked`.
    pub fn is_failure(self) -> bool {
        matches!(self, Self::Rejected | Self::TimedOut | Self::Failed | Self::Canceled)
    }
}

/// A call that waits for a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    pub request_id: uuid::Uuid,
    pub call_id: String,
    pub tool_name: String,
    #[schema(value_type = Object)]
    pub arguments: Value,
    pub effect: ToolEffect,
}

/// What a tool body can write to its run's log: custom events, through the run's recorder.
#[derive(Clone, Default)]
pub struct EventWriter(Option<std::sync::Arc<dyn CustomEvents>>);

/// Where a run's custom events go (the run's recorder).
#[async_trait::async_trait]
pub trait CustomEvents: Send + Sync {
    /// Appends a custom event; an invalid `custom_type` is refused.
    async fn record_custom(&self, custom_type: &str, payload: String) -> Result<Option<u64>, InvalidCustomEvent>;
}

impl EventWriter {
    pub fn new(sink: std::sync::Arc<dyn CustomEvents>) -> Self {
        Self(Some(sink))
    }

    /// A writer that records nothing (outside a run, or with recording off).
    pub fn none() -> Self {
        Self(None)
    }

    /// Appends a custom event. An invalid `custom_type` (or the reserved `tracon.` prefix)
    /// is refused; with recording off the event is dropped and `Ok(None)` returned.
    pub async fn custom(
        &self,
        custom_type: &str,
        payload: impl Into<String>,
    ) -> Result<Option<u64>, InvalidCustomEvent> {
        match &self.0 {
            Some(r) => r.record_custom(custom_type, payload.into()).await,
            None => check_custom_type(custom_type).map(|()| None),
        }
    }
}

impl std::fmt::Debug for EventWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "EventWriter(run)" } else { "EventWriter(none)" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_types_follow_the_rules() {
        assert!(check_custom_type("contoso.preview-ready").is_ok());
        assert!(check_custom_type("a").is_ok());
        for bad in ["", "Upper", "has space", "tracon.quota.threshold", "é"] {
            assert!(check_custom_type(bad).is_err(), "{bad}");
        }
        assert!(check_custom_type(&"a".repeat(129)).is_err());
    }

    #[test]
    fn type_names_match_the_json_tag() {
        let e = RunEvent::Custom { custom_type: "a".into(), payload: "{}".into() };
        assert_eq!(serde_json::to_value(&e).unwrap()["type"], e.type_name());
        let e = RunEvent::RunAwaitingApproval { requests: vec![] };
        assert_eq!(serde_json::to_value(&e).unwrap()["type"], e.type_name());
    }

    #[test]
    fn recorded_events_flatten_the_event() {
        let e = RecordedEvent {
            sequence: 3,
            timestamp: DateTime::from_timestamp(0, 0).unwrap(),
            event: RunEvent::MessageDelta { text: "hi".into() },
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"sequence": 3, "timestamp": "1970-01-01T00:00:00Z", "type": "MessageDelta", "text": "hi"})
        );
        let back: RecordedEvent = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }
}
