//! How a failed run is classified and described.
//!
//! A failed run carries an [`ErrorClass`] (for statistics and alerting) and a display-safe
//! message. Tracon's own failures get a stable sentence; a foreign failure's text never
//! reaches a response or a stored row — it becomes `"{Type} failed. (ref: {id})"` and the
//! detail goes to the log under the same ref.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::{ProviderError, ProviderErrorKind};

/// The class of a failed (or canceled) run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
pub enum ErrorClass {
    /// The provider failed: 5xx, a transport failure, a malformed response.
    ProviderUnavailable,
    /// The provider answered 429.
    RateLimited,
    /// The provider refused the credential (401/403): a configuration mistake.
    ProviderAuthentication,
    /// The provider refused the request (other 4xx).
    ProviderRejected,
    /// The tenant bound its own credential to a provider that takes none: the run does not
    /// go out with the host's key instead.
    ProviderCredentialUnsupported,
    /// The tenant's credential binding names a configuration key that holds no value.
    ProviderCredentialMissing,
    /// A model call never came back. Not a cancellation.
    Timeout,
    /// The provider's own safety filter cut the response.
    ContentFiltered,
    /// Our guard refused the content.
    ContentBlocked,
    QuotaExceeded,
    StructuredResponseRejected,
    ToolFailure,
    /// Somebody asked the run to stop.
    Canceled,
    /// Another turn saved the session first; retry the turn.
    SessionConflict,
    /// The agent could not be compiled.
    Configuration,
    /// The process executing the run went away: its heartbeat expired and reconciliation
    /// closed it.
    Orphaned,
    /// A continuation stopped before a call whose outcome is unknown (it started before the
    /// interruption and never reported an ending) and that may not run twice: a `Destructive`
    /// or `External` tool that does not declare `SafeToRepeat`. The message names the tool.
    ContinuationBlocked,
    /// The run's call tree reached one of its shared limits (`Tracon:AgentGraph`: tokens,
    /// cost, duration), checked between model turns. The message names the limit.
    TreeBudgetExceeded,
    /// A child run (one agent called by another) needed a person's approval, or handed tool
    /// calls back to a client: a child cannot wait in the middle of its parent's tree.
    ChildCannotWait,
    /// A replay in `ReplayTools` mode called a tool in a way the source run never did: no
    /// recorded answer fits, and nothing runs for real. The message names the tool.
    ReplayMismatch,
    /// A workflow's function node failed (its message is the function's own), or a node
    /// could not start.
    WorkflowNodeFailed,
    /// A `Handoff` or `Magentic` workflow used its `maxIterations` without reaching an answer.
    MaxIterationsReached,
    /// A workflow asked a person for input with checkpointing off: with nothing to resume
    /// from, it fails instead of waiting forever.
    InputUnavailable,
    /// The pre-flight check estimated the prompt over its model's context window less the
    /// reserve (`Tracon:Preflight`); no provider was called.
    ContextWindowExceeded,
    Internal,
}

impl ErrorClass {
    /// The class of a provider failure of `kind`.
    pub fn of_provider(kind: ProviderErrorKind) -> Self {
        match kind {
            ProviderErrorKind::Timeout => Self::Timeout,
            ProviderErrorKind::Canceled => Self::Canceled,
            ProviderErrorKind::Unauthorized => Self::ProviderAuthentication,
            ProviderErrorKind::RateLimited => Self::RateLimited,
            ProviderErrorKind::ServerError
            | ProviderErrorKind::Transport
            | ProviderErrorKind::Protocol
            | ProviderErrorKind::BreakerOpen => Self::ProviderUnavailable,
            ProviderErrorKind::Rejected => Self::ProviderRejected,
            ProviderErrorKind::ContentFiltered => Self::ContentFiltered,
        }
    }

    /// The stable `errorType` used in problem documents and `error` frames.
    pub fn error_type(self) -> &'static str {
        match self {
            Self::ProviderUnavailable => "provider_unavailable",
            Self::RateLimited => "provider_rate_limited",
            Self::ProviderAuthentication => "provider_authentication_failed",
            Self::ProviderRejected => "provider_rejected",
            Self::ProviderCredentialUnsupported => "provider_credential_unsupported",
            Self::ProviderCredentialMissing => "provider_credential_missing",
            Self::Timeout => "timeout",
            Self::ContentFiltered => "content_filtered",
            Self::ContentBlocked => "content_blocked",
            Self::QuotaExceeded => "quota_exceeded",
            Self::StructuredResponseRejected => "structured_response_rejected",
            Self::ToolFailure => "tool_failed",
            Self::Canceled => "canceled",
            Self::SessionConflict => "session_conflict",
            Self::Configuration => "configuration_error",
            Self::Orphaned => "orphaned",
            Self::ContinuationBlocked => "continuation_blocked",
            Self::TreeBudgetExceeded => "tree_budget_exceeded",
            Self::ChildCannotWait => "child_cannot_wait",
            Self::ReplayMismatch => "replay_mismatch",
            Self::WorkflowNodeFailed => "workflow_node_failed",
            Self::MaxIterationsReached => "max_iterations_reached",
            Self::InputUnavailable => "input_unavailable",
            Self::ContextWindowExceeded => "context_window_exceeded",
            Self::Internal => "internal_error",
        }
    }
}

/// A run's failure, safe to show and to store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunFailure {
    pub error_class: ErrorClass,
    pub error_type: String,
    pub message: String,
}

impl RunFailure {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Self { error_class: class, error_type: class.error_type().to_owned(), message: message.into() }
    }

    /// Classifies a provider failure. The message names what happened in our words plus a
    /// ref; the upstream detail is logged under that ref.
    pub fn from_provider(provider: &str, error: &ProviderError) -> Self {
        let reference = new_ref();
        tracing::warn!(
            provider,
            r#ref = %reference,
            kind = ?error.kind,
            status = ?error.status,
            detail = %error.detail,
            "model call failed"
        );
        let what = match error.kind {
            ProviderErrorKind::Timeout => "The model provider did not answer in time.".to_owned(),
            ProviderErrorKind::Canceled => "The run was canceled.".to_owned(),
            ProviderErrorKind::Unauthorized => {
                format!("The model provider refused the configured credential (HTTP {}).", error.status.unwrap_or(401))
            }
            ProviderErrorKind::RateLimited => "The model provider rate-limited the request (HTTP 429).".to_owned(),
            ProviderErrorKind::ServerError => {
                format!("The model provider failed (HTTP {}).", error.status.unwrap_or(500))
            }
            ProviderErrorKind::Transport | ProviderErrorKind::Protocol => format!("{} failed.", error.type_name),
            ProviderErrorKind::Rejected => {
                format!("The model provider rejected the request (HTTP {}).", error.status.unwrap_or(400))
            }
            ProviderErrorKind::ContentFiltered => {
                "The model provider's content filter stopped the response.".to_owned()
            }
            ProviderErrorKind::BreakerOpen => {
                "The model provider failed too often in a row: its circuit breaker is open, and no call was made."
                    .to_owned()
            }
        };
        let class = ErrorClass::of_provider(error.kind);
        Self::new(class, format!("{what} (ref: {reference})"))
    }

    /// A foreign failure of our own code path: only the type name and a ref are kept.
    pub fn foreign(type_name: &str, detail: &str) -> Self {
        let reference = new_ref();
        tracing::error!(r#ref = %reference, error_type = type_name, detail, "run failed");
        Self::new(ErrorClass::Internal, format!("{type_name} failed. (ref: {reference})"))
    }

    pub fn canceled() -> Self {
        Self::new(ErrorClass::Canceled, "The run was canceled.")
    }

    /// Why a tenant's call could not go out with the tenant's own credential.
    pub fn from_credential(error: &crate::model::byok::CredentialError) -> Self {
        use crate::model::byok::CredentialError;
        match error {
            CredentialError::Unsupported(p) => Self::new(
                ErrorClass::ProviderCredentialUnsupported,
                format!(
                    "This tenant bound its own credential to '{p}', which does not take one; the host's credential is never used in its place."
                ),
            ),
            CredentialError::Missing(p) => Self::new(
                ErrorClass::ProviderCredentialMissing,
                format!("This tenant's credential for '{p}' names a configuration key that holds no value."),
            ),
            CredentialError::EndpointRefused(why) => Self::new(
                ErrorClass::Configuration,
                format!("This tenant's provider endpoint is refused by the egress guard: {why}."),
            ),
            CredentialError::Store(e) => Self::foreign("StoreError", &format!("{e:?}")),
        }
    }
}

/// A short random correlation id for log lines (8 hex characters).
pub fn new_ref() -> String {
    let id = uuid::Uuid::new_v4();
    let b = id.as_bytes();
    format!("{:02x}{:02x}{:02x}{:02x}", b[12], b[13], b[14], b[15])
}
