//! What a run-starting surface asks for ([`RunRequest`]) and why a start is refused
//! ([`StartError`]).

use std::collections::BTreeMap;

use crate::approvals::ApprovalRecord;
use crate::attribution::Attribution;
use crate::catalog::CatalogError;
use crate::error::StoreError;
use crate::identity::Caller;
use crate::names::{AgentName, RunId, SessionId, TenantId};
use crate::runs::preflight::ContextWindowExceeded;
use crate::runs::store::DocumentInput;

/// A request to run an agent.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub tenant: TenantId,
    pub agent: AgentName,
    pub message: String,
    pub culture: Option<String>,
    pub parameters: BTreeMap<String, String>,
    pub documents: Vec<DocumentInput>,
    pub session_id: Option<SessionId>,
    pub caller: Caller,
    pub attribution: Attribution,
    /// Set when this run continues one that stopped for approval (then `message` is empty).
    pub resume: Option<Resume>,
    /// Set when a worker executes a queued run: its placeholder row exists under this id.
    pub queued: Option<RunId>,
    /// The caller's answers to the client-side calls the session's last run handed back
    /// (then `message` is empty): the turn continues with them.
    pub tool_results: Vec<ClientToolResult>,
}

impl RunRequest {
    /// A fresh run of `agent` on `message`: no culture, parameters, documents or session,
    /// and neither a resumption, a queued run nor an answer to client-side calls.
    pub fn new(tenant: TenantId, agent: AgentName, message: String, caller: Caller, attribution: Attribution) -> Self {
        RunRequest {
            tenant,
            agent,
            message,
            culture: None,
            parameters: BTreeMap::new(),
            documents: Vec::new(),
            session_id: None,
            caller,
            attribution,
            resume: None,
            queued: None,
            tool_results: Vec::new(),
        }
    }
}

/// The caller's answer to a client-side tool call: a result, or an error message.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientToolResult {
    /// The `callId` the call was handed back under.
    pub call_id: String,
    /// What the tool produced: a string goes to the model as is, any other JSON value as
    /// its JSON text.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub result: Option<serde_json::Value>,
    /// The tool failed, or the caller has no implementation for it: the model gets this
    /// text as a failed call's result.
    #[serde(default)]
    pub error_message: Option<String>,
}

/// Longest result or error text a client-side call may return.
pub const MAX_CLIENT_RESULT_BYTES: usize = 256 * 1024;

/// What the model gets for a client-side call nobody answered.
pub const CLIENT_UNANSWERED: &str = "The client did not answer this tool call.";

/// Continuing a run that stopped at `AwaitingApproval`, once every one of its requests is
/// decided. The stopped run is never rewritten: this is a new run in the same session.
#[derive(Debug, Clone)]
pub struct Resume {
    /// The new run's id, claimed beforehand ([`crate::approvals::ApprovalStore::claim_resume`]).
    pub run_id: RunId,
    pub from_run: RunId,
    /// Every request of the stopped run, each `Approved` or `Denied`.
    pub decided: Vec<ApprovalRecord>,
}

/// What the model gets for a call a person denied.
pub fn refusal(reason: Option<&str>) -> String {
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(r) => format!("A person denied this tool call: {r}"),
        None => "A person denied this tool call.".to_owned(),
    }
}

/// What the model gets for a call that waited for a decision that never came.
pub const UNDECIDED: &str = "This tool call waited for approval and was not decided; it did not run.";

/// Why a run could not start.
#[derive(Debug, Clone)]
pub enum StartError {
    Agent(CatalogError),
    /// The documents break a rule (the message is ours).
    Documents(String),
    /// The session cannot be resumed (the message is ours).
    Resume(String),
    /// The client-side tool results do not fit the calls they answer (the message is ours).
    ToolResults(String),
    /// The session is another agent's conversation.
    Session(crate::sessions::AgentMismatch),
    /// The request's input breaks a rule: a message over the limit, a culture that is not a
    /// language tag ([`crate::runs::input`]).
    Input(crate::runs::input::InputRefusal),
    /// The pre-flight check estimated the prompt over its model's context window less the
    /// reserve ([`crate::runs::preflight`]); no provider was called.
    ContextWindow(ContextWindowExceeded),
    /// What an OpenAI-compatible caller added breaks a rule or what the agent allows.
    Caller(crate::runs::caller::CallerRefusal),
    Store(StoreError),
}

impl From<CatalogError> for StartError {
    fn from(e: CatalogError) -> Self {
        Self::Agent(e)
    }
}

impl From<StoreError> for StartError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}
