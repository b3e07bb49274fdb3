//! The OpenAI-compatible surface: `POST /v1/chat/completions` and `GET /v1/models`, for
//! clients that take a base URL (the official SDKs, frameworks, tools).
//!
//! `model` is an **agent name**: which model answers is the agent's business. Every call is
//! a recorded run with the same checks as `POST /api/agents/{name}/run` — the run policy,
//! attribution, quotas, tenancy and the caller's scopes (`RunsWrite`). A chat request
//! carries its whole conversation: the earlier turns go to the model before the new user
//! message and nothing is saved as a session. The caller's `system`/`developer` messages are
//! appended to the agent's own instructions, never replace them.
//!
//! Client-side tools: when the model calls one of the agent's client-side tools, the answer
//! is an assistant message with `tool_calls` and `finish_reason: "tool_calls"` (streamed: a
//! `tool_calls` delta). The caller runs the tool and sends the conversation again with that
//! assistant message and one `tool` message per call; the turn goes on. Only client-side
//! calls may appear in the history — a server-side tool's result cannot come from outside.
//!
//! What the caller adds (`caller.rs`, decided by `tracon_core::runs::caller`): its `tools`
//! join the run as client-side tools when the agent's `openAi.callerTools` is `ClientSide`
//! (a tool the agent declares client-side already is always accepted); `tool_choice` and
//! `parallel_tool_calls` reach the model for the whole tool set; its `response_format`
//! (Responses: `text.format`) holds when `openAi.callerResponseFormat` is `Allow`.
//!
//! Errors use OpenAI's envelope, `{"error": {"message", "type", "param", "code"}}`, with
//! `type` and `code` the same stable `errorType` the native endpoints use. A request field
//! whose silent omission would change the answer (`n` > 1, `logprobs`, audio) or that the
//! agent does not take is refused with `400` and `param` naming it; sampling
//! settings (`temperature`, `max_tokens` …) are accepted and left to the agent's definition.

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing;
use serde_json::{Value, json};
use tracon_core::access::{RunAction, is_allowed};
use tracon_core::failure::{ErrorClass, RunFailure};
use tracon_core::names::AgentName;

use crate::error::ApiError;
use crate::extract::Ctx;
use crate::state::AppState;

/// The OpenAI-compatible group.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/chat/completions", routing::post(chat::chat_completions))
        .route("/v1/models", routing::get(models))
        .route("/v1/models/{id}", routing::get(model))
        .route("/v1/responses", routing::post(responses::create_response))
        .route("/v1/responses/{id}", routing::get(responses::get_response).delete(responses::delete_response))
        .route("/v1/responses/{id}/input_items", routing::get(input_items::list_input_items))
        .route("/v1/conversations", routing::post(conversations::create_conversation))
        .route(
            "/v1/conversations/{id}",
            routing::get(conversations::get_conversation).delete(conversations::delete_conversation),
        )
        .route("/v1/conversations/{id}/items", routing::get(conversations::list_conversation_items))
}

/// An error in OpenAI's envelope.
pub struct OpenAiError(pub ApiError);

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl From<tracon_core::runs::admission::Refusal> for OpenAiError {
    fn from(e: tracon_core::runs::admission::Refusal) -> Self {
        Self(e.into())
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let e = self.0;
        let param = e.extensions.get("field").cloned().unwrap_or(Value::Null);
        let body = json!({"error": {"message": e.detail, "type": e.error_type, "param": param, "code": e.error_type}});
        let mut response = (e.status, axum::Json(body)).into_response();
        if let Some(seconds) = e.retry_after
            && let Ok(v) = axum::http::HeaderValue::from_str(&seconds.to_string())
        {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, v);
        }
        response
    }
}

pub(crate) type OpenAiResult<T> = Result<T, OpenAiError>;

/// Largest problem document [`envelope`] rewrites (every one Tracon writes is far smaller).
const MAX_PROBLEM_BYTES: usize = 64 * 1024;

/// Gives OpenAI clients OpenAI's envelope for the answers the shared layers write as problem
/// documents before a `/v1` handler runs (authentication, scopes, rate limits, unknown
/// routes and methods): same status and headers, `{"error": {"message", "type", "param",
/// "code"}}` instead of `application/problem+json`.
pub async fn envelope(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let is_v1 = request.uri().path().starts_with("/v1/");
    let response = next.run(request).await;
    let is_problem = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"));
    if !is_v1 || !is_problem {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_PROBLEM_BYTES).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let problem: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let error_type = problem["errorType"].as_str().unwrap_or("error");
    let envelope = json!({"error": {
        "message": problem["detail"].as_str().unwrap_or_default(),
        "type": error_type,
        "param": problem.get("field").cloned().unwrap_or(Value::Null),
        "code": error_type,
    }});
    parts.headers.insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(envelope.to_string()))
}

pub(crate) fn invalid(param: &str, message: impl Into<String>) -> OpenAiError {
    OpenAiError(ApiError::bad_request("invalid_request_error", message).with("field", param))
}

/// The agents of the caller's tenant that the caller may run, as OpenAI models (`model` in a
/// request is an agent name).
#[utoipa::path(get, path = "/v1/models", tag = "openai",
    responses((status = 200, description = "`{\"object\": \"list\", \"data\": [{\"id\", \"object\": \"model\", \"created\", \"owned_by\"}]}`: the agents the caller may run", body = Object)))]
#[tracing::instrument(name = "openai.models", skip_all)]
pub async fn models(Ctx { state, tenant, caller }: Ctx) -> OpenAiResult<Response> {
    let entries = state.runtime.catalog.list(&tenant, 0, 1000).await.map_err(ApiError::from)?;
    let mut data = Vec::with_capacity(entries.len());
    for e in &entries {
        // The agents the host's run policy lets this caller start; a throwing policy denies.
        let start = RunAction::StartRun { agent: &e.definition.name, session: None };
        if !is_allowed(state.runtime.run_authorizer.as_ref(), &caller, &tenant, start).await {
            continue;
        }
        let created = e.created_at.map_or(0, |t| t.timestamp());
        data.push(json!({"id": e.definition.name, "object": "model", "created": created, "owned_by": "tracon"}));
    }
    Ok(axum::Json(json!({"object": "list", "data": data})).into_response())
}

/// One agent the caller may run, as an OpenAI model (`models.retrieve`). An agent the caller
/// may not run, another tenant's and an unknown name all answer `404 model_not_found`.
#[utoipa::path(get, path = "/v1/models/{id}", tag = "openai",
    params(("id" = String, Path, description = "The agent's name")),
    responses(
        (status = 200, description = "`{\"id\", \"object\": \"model\", \"created\", \"owned_by\"}`", body = Object),
        (status = 404, description = "`{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`", body = Object)))]
#[tracing::instrument(name = "openai.model", skip_all)]
pub async fn model(
    Ctx { state, tenant, caller }: Ctx,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> OpenAiResult<Response> {
    let missing = || {
        let shown =
            tracon_core::names::AgentName::parse(&id).map_or_else(|_| "that name".to_owned(), |n| format!("'{n}'"));
        OpenAiError(
            ApiError::new(StatusCode::NOT_FOUND, "model_not_found", format!("No model (agent) named {shown} exists."))
                .with("field", "model"),
        )
    };
    let Ok(name) = AgentName::parse(&id) else { return Err(missing()) };
    let Some(entry) = state.runtime.catalog.get(&tenant, &name).await.map_err(ApiError::from)? else {
        return Err(missing());
    };
    let start = RunAction::StartRun { agent: &entry.definition.name, session: None };
    if !is_allowed(state.runtime.run_authorizer.as_ref(), &caller, &tenant, start).await {
        return Err(missing());
    }
    let created = entry.created_at.map_or(0, |t| t.timestamp());
    Ok(axum::Json(json!({"id": entry.definition.name, "object": "model", "created": created, "owned_by": "tracon"}))
        .into_response())
}

/// Fields accepted and left to the agent's definition: they tune how a model samples, and
/// the agent decides its model and settings.
pub(crate) const LEFT_TO_THE_AGENT: &[&str] = &[
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
    "user",
    "metadata",
    "store",
    "service_tier",
    "reasoning_effort",
    "logit_bias",
    "prediction",
    "safety_identifier",
    "prompt_cache_key",
    "verbosity",
];

/// A run that ended without an answer, as an OpenAI error.
pub(crate) fn failure_error(failure: &RunFailure) -> ApiError {
    let status = match failure.error_class {
        ErrorClass::RateLimited | ErrorClass::QuotaExceeded => StatusCode::TOO_MANY_REQUESTS,
        ErrorClass::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorClass::ProviderUnavailable | ErrorClass::ProviderAuthentication | ErrorClass::ProviderRejected => {
            StatusCode::BAD_GATEWAY
        }
        ErrorClass::ContentBlocked | ErrorClass::StructuredResponseRejected => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorClass::SessionConflict => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let error_type: &'static str = failure.error_class.error_type();
    ApiError::new(status, error_type, failure.message.clone())
}

pub(crate) fn approval_error() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "approval_required",
        "A tool call of this run waits for a person's approval; decide it in the approval mailbox (/api/approvals/pending).",
    )
}

/// The request body's fields, checked the way both routes check them: every field is known
/// (its own, or one [`LEFT_TO_THE_AGENT`]), and one whose silent omission would change the
/// answer — `changes_meaning(field, value)` says which — is refused with `400`, naming it.
/// Returns the agent `model` names; `n` must be 1 (`one` names what there is one of).
pub(crate) fn checked_fields(
    body: &Value,
    own: &[&str],
    changes_meaning: impl Fn(&str, &Value) -> bool,
    one: &str,
) -> OpenAiResult<AgentName> {
    let Some(object) = body.as_object() else {
        return Err(invalid("", "The body must be a JSON object."));
    };
    for (key, value) in object {
        if !own.contains(&key.as_str()) && !LEFT_TO_THE_AGENT.contains(&key.as_str()) {
            return Err(invalid(key, format!("Unrecognized request argument supplied: {key}")));
        }
        if changes_meaning(key, value) {
            return Err(invalid(
                key,
                format!("'{key}' is not supported here: the agent's definition decides its tools and output."),
            ));
        }
    }
    let model = object
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("model", "'model' (an agent name) is required."))?;
    let agent = AgentName::parse(model).map_err(|e| invalid("model", e.0))?;
    if object.get("n").is_some_and(|n| !n.is_null() && n.as_u64() != Some(1)) {
        return Err(invalid("n", format!("Only one {one} per request is supported ('n' must be 1).")));
    }
    Ok(agent)
}

mod caller;
pub mod chat;
pub mod conversations;
pub mod input_items;
mod limits;
pub mod responses;
