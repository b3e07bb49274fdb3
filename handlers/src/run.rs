//! `POST /api/agents/{name}/run`: compile the agent, run the turn, stream the live frames.
//!
//! Everything that can be refused is refused before the stream starts, with a problem
//! document and its status: a bad name (`400`), a draining server (`503`), a bad body
//! (`400`/`413`/`415`), an unknown agent (`404`), bad parameters (`400`), a definition that
//! no longer compiles (`422`). After the first frame, failures arrive as an `error` frame.
//!
//! The run itself executes on the adapter's spawner so it is independent of the response
//! body; when the caller goes away the body is dropped, which cancels the run (`Canceled`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument;
use tracon_core::catalog::CatalogError;
use tracon_core::engine::{self, RunInput};
use tracon_core::identity::Caller;
use tracon_core::names::RunId;
use tracon_core::ports::new_id;
use utoipa::ToSchema;

use crate::agents::{agent_name, tenant};
use crate::error::{ApiError, ApiResult, ProblemDetails};
use crate::extract::ApiJson;
use crate::sse;
use crate::state::AppState;

/// Events buffered between the run and a slow reader before the run waits.
const EVENT_BUFFER: usize = 64;
/// Longest accepted `culture` value.
const MAX_CULTURE_LEN: usize = 35;

/// The body of a run request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunRequest {
    /// The user's message.
    pub message: String,
    /// Picks culture-specific instructions (`tr`, `tr-TR` …); unmatched falls back to the default.
    #[serde(default)]
    pub culture: Option<String>,
    /// Values for the agent's declared `{{name}}` parameters (strings, numbers or booleans).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub parameters: BTreeMap<String, Value>,
}

/// Run an agent and stream the live turn as server-sent events
/// (`run`, `update`, `approvals`, `done`, `error`).
#[utoipa::path(post, path = "/api/agents/{name}/run", tag = "runs", request_body = RunRequest,
    params(("name" = String, Path, description = "Agent name")),
    responses(
        (status = 200, description = "The live turn", content_type = "text/event-stream", body = String),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "runs.start", skip_all, fields(agent = %name, run_id))]
pub async fn run(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    ApiJson(request): ApiJson<RunRequest>,
) -> ApiResult<Response> {
    let name = agent_name(&name)?;
    if state.drain.is_draining() {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "The server is shutting down and accepts no new runs; retry on another instance.",
        ));
    }
    if request.message.trim().is_empty() {
        return Err(ApiError::bad_request("validation_failed", "'message' must not be empty.").with("field", "message"));
    }
    if request.culture.as_ref().is_some_and(|c| c.len() > MAX_CULTURE_LEN) {
        return Err(ApiError::bad_request(
            "validation_failed",
            format!("'culture' is at most {MAX_CULTURE_LEN} characters."),
        ));
    }
    let parameters = parameter_values(request.parameters)?;

    let runtime = state.runtime.clone();
    let agent = runtime.catalog.compile(&tenant(), &name, request.culture.as_deref(), &parameters).await.map_err(
        |e| match e {
            CatalogError::NotFound => ApiError::agent_not_found(name.as_str()),
            other => other.into(),
        },
    )?;

    let run_id = RunId(new_id(runtime.platform.clock.as_ref()));
    tracing::Span::current().record("run_id", tracing::field::display(run_id));
    let (guard, cancel) = state.drain.enter();
    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
    let input = RunInput {
        tenant: tenant(),
        run_id,
        caller,
        session_id: None,
        history: Vec::new(),
        message: request.message,
        cancel: cancel.clone(),
    };
    let span = tracing::info_span!("runs.execute", agent = %name, run_id = %run_id);
    let task_runtime = runtime.clone();
    runtime.platform.spawner.spawn(Box::pin(
        async move {
            let _guard = guard;
            engine::execute(&task_runtime, Arc::clone(&agent), input, Some(tx)).await;
        }
        .instrument(span),
    ));

    // Dropping the body (the caller went away) cancels the run.
    let frames = sse::LiveFrames::new(rx, run_id, cancel.drop_guard());
    Ok(sse::response(Body::from_stream(frames)))
}

/// Every value travels as a string; numbers and booleans are accepted in their JSON text.
fn parameter_values(raw: BTreeMap<String, Value>) -> ApiResult<BTreeMap<String, String>> {
    raw.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            Value::Number(n) => Ok((k, n.to_string())),
            Value::Bool(b) => Ok((k, b.to_string())),
            _ => Err(ApiError::bad_request(
                "validation_failed",
                format!("Parameter '{k}' must be a string, number or boolean."),
            )
            .with("field", format!("parameters.{k}"))),
        })
        .collect()
}
