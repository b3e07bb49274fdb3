//! One error type for the HTTP layer, answered as `application/problem+json`.
//!
//! Every failure a handler returns is an [`ApiError`]: a status, a stable `errorType`, a
//! human `detail` written by us, and optional extension members. A foreign failure (a
//! store, a bug) is logged with a short ref and answered with `"{Type} failed. (ref: …)"`
//! only — its own text never reaches the response.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};
use tracon_core::catalog::CatalogError;
use tracon_core::error::StoreError;
use tracon_core::failure::new_ref;
use tracon_core::quota::QuotaExceeded;
use tracon_core::report::Problem;
use tracon_core::runs::admission::Refusal;
use tracon_core::runs::input::InputRefusal;
use tracon_core::runs::preflight::ContextWindowExceeded;
use tracon_core::runs::request::StartError;
use tracon_core::sessions::AgentMismatch as SessionAgentMismatch;
use tracon_core::sessions::ownership::SessionRefusal;
use utoipa::ToSchema;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem document with Tracon's `errorType`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProblemDetails {
    /// `urn:tracon:problem:{errorType}`.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// Stable, machine-matchable (`agent_not_found`, `validation_failed`, …).
    pub error_type: String,
    /// Extension members (`problems`, `missing`, …) depending on the error type.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extensions: Map<String, Value>,
}

/// The problem responses of the OpenAPI document without a description of their own, one type
/// a status, for a route's `responses(…)`:
/// `responses((status = 200, body = AgentView), problem::BadRequest, problem::NotFound)`. Each is
/// `application/problem+json` with a [`ProblemDetails`] body. (No doc comments on the types:
/// utoipa would make them the responses' descriptions.)
pub mod problem {
    #![allow(missing_docs, dead_code)]

    use super::ProblemDetails;

    #[derive(utoipa::IntoResponses)]
    #[response(status = 400, content_type = "application/problem+json")]
    pub struct BadRequest(ProblemDetails);

    #[derive(utoipa::IntoResponses)]
    #[response(status = 403, content_type = "application/problem+json")]
    pub struct Forbidden(ProblemDetails);

    #[derive(utoipa::IntoResponses)]
    #[response(status = 404, content_type = "application/problem+json")]
    pub struct NotFound(ProblemDetails);

    #[derive(utoipa::IntoResponses)]
    #[response(status = 409, content_type = "application/problem+json")]
    pub struct Conflict(ProblemDetails);

    #[derive(utoipa::IntoResponses)]
    #[response(status = 413, content_type = "application/problem+json")]
    pub struct TooLarge(ProblemDetails);

    #[derive(utoipa::IntoResponses)]
    #[response(status = 429, content_type = "application/problem+json")]
    pub struct TooMany(ProblemDetails);

    #[derive(utoipa::IntoResponses)]
    #[response(status = 503, content_type = "application/problem+json")]
    pub struct Unavailable(ProblemDetails);
}

/// The members a problem document has of its own, which no extension may repeat.
const RESERVED_MEMBERS: [&str; 6] = ["type", "title", "status", "detail", "instance", "errorType"];

/// A handler failure.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub error_type: &'static str,
    pub detail: String,
    pub extensions: Map<String, Value>,
    /// Extra headers (e.g. `WWW-Authenticate`).
    pub www_authenticate: bool,
    /// `Retry-After`, in seconds (`429`).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, error_type: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            error_type,
            detail: detail.into(),
            extensions: Map::new(),
            www_authenticate: false,
            retry_after: None,
        }
    }

    pub fn with(mut self, key: &str, value: impl Serialize) -> Self {
        self.extensions.insert(key.to_owned(), serde_json::to_value(value).unwrap_or(Value::Null));
        self
    }

    /// Sets `Retry-After` (and the `retryAfterSeconds` member).
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self.with("retryAfterSeconds", seconds)
    }

    pub fn bad_request(error_type: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, error_type, detail)
    }

    pub fn validation(problems: Vec<Problem>) -> Self {
        let detail = match problems.as_slice() {
            [one] => format!("The definition is invalid: {}", one.message),
            many => format!("The definition is invalid ({} problems).", many.len()),
        };
        Self::bad_request("validation_failed", detail).with("problems", problems)
    }

    pub fn agent_not_found(name: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "agent_not_found", format!("No agent named '{name}' exists."))
    }

    pub fn unauthorized(detail: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::UNAUTHORIZED, "unauthorized", detail);
        e.www_authenticate = true;
        e
    }

    pub fn forbidden(error_type: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, error_type, detail)
    }

    /// A failure whose own text must not be shown: logged under a ref.
    pub fn internal(type_name: &str, detail: &str) -> Self {
        let reference = new_ref();
        tracing::error!(r#ref = %reference, error_type = type_name, detail, "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            format!("{type_name} failed. (ref: {reference})"),
        )
    }

    pub fn problem(&self) -> ProblemDetails {
        let mut extensions = self.extensions.clone();
        // An extension never shadows one of the document's own members: a JSON client keeps
        // only one of two equal keys, and `status` must stay the HTTP status (RFC 9457).
        extensions.retain(|key, _| {
            let reserved = RESERVED_MEMBERS.contains(&key.as_str());
            if reserved {
                tracing::warn!(member = %key, error_type = self.error_type, "an extension member shadows a problem member; left out");
            }
            !reserved
        });
        ProblemDetails {
            kind: format!("urn:tracon:problem:{}", self.error_type),
            title: self.status.canonical_reason().unwrap_or("Error").to_owned(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
            error_type: self.error_type.to_owned(),
            extensions,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(message) => Self::new(StatusCode::CONFLICT, "conflict", message),
            StoreError::NotFound => Self::new(StatusCode::NOT_FOUND, "not_found", "The resource does not exist."),
            StoreError::Unavailable { detail } => {
                let reference = new_ref();
                tracing::error!(r#ref = %reference, detail = %detail, "store unavailable");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    format!("The store is unavailable; retry shortly. (ref: {reference})"),
                )
                .with_retry_after(STORE_RETRY_AFTER_SECONDS)
            }
            StoreError::Internal { detail } => Self::internal("StoreError", &detail),
            StoreError::InvalidText { field } => nul_refused(&field),
            StoreError::DefinitionsMoved => Self::new(
                StatusCode::CONFLICT,
                "conflict",
                "The agent's definition kept changing while the run started; try again.",
            ),
        }
    }
}

impl From<CatalogError> for ApiError {
    fn from(e: CatalogError) -> Self {
        match e {
            CatalogError::NotFound => Self::new(StatusCode::NOT_FOUND, "agent_not_found", "The agent does not exist."),
            CatalogError::Invalid(problems) => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "agent_invalid",
                "The agent's definition no longer compiles; fix it through the management API.",
            )
            .with("problems", problems),
            CatalogError::Parameters(p) => Self::bad_request("invalid_parameters", p.describe())
                .with("missing", &p.missing)
                .with("unknown", &p.unknown),
            CatalogError::Store(s) => s.into(),
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Draining => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                "The server is shutting down and accepts no new runs; retry on another instance.",
            ),
            Refusal::Denied => Self::forbidden("run_denied", "The authorization policy does not allow this run."),
            Refusal::InvalidLabels(message) => Self::bad_request("invalid_labels", message),
            Refusal::Session(refusal) => refusal.into(),
            Refusal::SessionAgent(mismatch) => session_agent_mismatch(&mismatch, "sessionId"),
            Refusal::Quota { over, now } => quota_exceeded(&over, now),
            Refusal::Store(e) => e.into(),
        }
    }
}

impl From<SessionRefusal> for ApiError {
    fn from(refusal: SessionRefusal) -> Self {
        match refusal {
            SessionRefusal::Forbidden => Self::forbidden("session_forbidden", "The session belongs to another user."),
            SessionRefusal::OwnerRequired => Self::forbidden(
                "session_owner_required",
                "Session ownership is on and this session has no owner the caller can be matched with.",
            ),
        }
    }
}

/// An external surface's refusal (`tracon_core::exposure`, the MCP and A2A servers): a
/// caller that is not an `ExternalInvoke` key is `403 insufficient_scope`; an agent not
/// exposed (or another tenant's) is `404 agent_not_found`, as a missing one; an agent that
/// would cross an approval boundary is `403 external_approval_required`.
impl From<tracon_core::exposure::ExposureRefusal> for ApiError {
    fn from(refusal: tracon_core::exposure::ExposureRefusal) -> Self {
        use tracon_core::exposure::ExposureRefusal as R;
        let message = refusal.message();
        match refusal {
            R::Credential(_) => Self::forbidden("insufficient_scope", message).with("requiredScope", "ExternalInvoke"),
            R::NotExposed => Self::new(StatusCode::NOT_FOUND, "agent_not_found", message),
            R::ApprovalRequired { tool, .. } => {
                Self::forbidden("external_approval_required", message).with("tool", tool)
            }
            R::Store(e) => e.into(),
        }
    }
}

/// Why a run could not start, for the run of `agent`.
pub fn start_error(agent: &str, e: StartError) -> ApiError {
    match e {
        StartError::Agent(CatalogError::NotFound) => ApiError::agent_not_found(agent),
        StartError::Agent(other) => other.into(),
        StartError::Documents(message) => {
            ApiError::bad_request("validation_failed", message).with("field", "documents")
        }
        StartError::Resume(message) => ApiError::new(StatusCode::CONFLICT, "cannot_resume", message),
        StartError::ToolResults(message) => {
            ApiError::bad_request("validation_failed", message).with("field", "toolResults")
        }
        StartError::ContextWindow(over) => context_window_exceeded(&over),
        StartError::Caller(refusal) => {
            ApiError::bad_request("invalid_request_error", refusal.message).with("field", refusal.field)
        }
        StartError::Session(mismatch) => session_agent_mismatch(&mismatch, "sessionId"),
        StartError::Input(refusal) => input_refused(&refusal),
        StartError::Store(s) => s.into(),
    }
}

/// `409 session_agent_mismatch`: the session (named by `field`) is another agent's
/// conversation; `sessionAgent` says whose.
pub fn session_agent_mismatch(mismatch: &SessionAgentMismatch, field: &str) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "session_agent_mismatch", mismatch.message())
        .with("field", field)
        .with("sessionAgent", &mismatch.session_agent)
        .with("agent", &mismatch.agent)
}

/// `400 validation_failed` for input that breaks a rule, naming the field (and, for a message
/// over the limit, `maxChars`).
pub fn input_refused(refusal: &InputRefusal) -> ApiError {
    let e = ApiError::bad_request("validation_failed", refusal.message()).with("field", refusal.field());
    match refusal {
        InputRefusal::MessageTooLong { max_chars, .. } => e.with("maxChars", max_chars),
        InputRefusal::Culture { .. } => e,
    }
}

/// `400 context_window_exceeded`: the pre-flight check refused the prompt, with the counted
/// and allowed token numbers; no provider was called.
pub fn context_window_exceeded(over: &ContextWindowExceeded) -> ApiError {
    ApiError::bad_request("context_window_exceeded", over.message())
        .with("provider", &over.provider)
        .with("model", &over.model)
        .with("estimatedPromptTokens", over.estimated_prompt_tokens)
        .with("allowedPromptTokens", over.allowed_prompt_tokens)
        .with("contextWindowTokens", over.context_window_tokens)
        .with("reserveRatio", over.reserve_ratio)
        .with("approximate", true)
}

impl From<tracon_core::workflows::execute::WorkflowError> for ApiError {
    fn from(e: tracon_core::workflows::execute::WorkflowError) -> Self {
        use tracon_core::workflows::execute::WorkflowError;
        match e {
            WorkflowError::NoCheckpoint(m) => Self::new(StatusCode::CONFLICT, "no_checkpoint", m),
            WorkflowError::Conflict(m) => Self::new(StatusCode::CONFLICT, "request_not_pending", m),
            WorkflowError::Unreadable(m) => Self::new(StatusCode::CONFLICT, "checkpoint_unreadable", m),
            WorkflowError::Store(s) => s.into(),
        }
    }
}

/// `429 quota_exceeded`: which quota, its limit and use, when it resets (also `Retry-After`).
pub fn quota_exceeded(over: &QuotaExceeded, now: chrono::DateTime<chrono::Utc>) -> ApiError {
    let retry = (over.resets_at - now).num_seconds().max(1).unsigned_abs();
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "quota_exceeded",
        format!("The quota '{}' is used up until {}.", over.quota, over.resets_at.to_rfc3339()),
    )
    .with("quota", &over.quota)
    .with("metric", over.metric)
    .with("limit", over.limit)
    .with("used", over.used)
    .with("resetsAt", over.resets_at)
    .with_retry_after(retry)
}

/// `Retry-After` of a `503 store_unavailable`: the database refused or dropped the
/// connection, and a pool reconnects on its own.
pub const STORE_RETRY_AFTER_SECONDS: u64 = 2;

/// The `400` for text holding U+0000 ([`tracon_core::text`]), naming where it was.
pub fn nul_refused(field: &str) -> ApiError {
    let detail = if field.is_empty() {
        "The request body contains the character U+0000 (NUL), which is not accepted.".to_owned()
    } else {
        format!("'{field}' contains the character U+0000 (NUL), which is not accepted.")
    };
    ApiError::bad_request("validation_failed", detail).with("field", field)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.problem())).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if self.www_authenticate {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
