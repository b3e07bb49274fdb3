//! `POST /api/agents/{name}/run`: compile the agent, run the turn, stream the live frames.
//!
//! Everything that can be refused is refused before the stream starts, with a problem
//! document and its status: a bad name or session id (`400`), a draining server (`503`), a
//! bad body (`400`/`413`/`415`), labels over their limits (`400`), an unknown agent
//! (`404`), bad parameters or documents (`400`), a definition that no longer compiles
//! (`422`). After the first frame, failures arrive as an `error` frame — including a lost
//! session race (`errorType: session_conflict`).
//!
//! The run executes on the adapter's spawner, independent of the response body; when the
//! caller goes away the body is dropped, which cancels the run (`Canceled`).

use std::collections::BTreeMap;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument;
use tracon_core::access::{RunAction, is_allowed};
use tracon_core::attribution::{self, Attribution, AttributionRequest};
use tracon_core::catalog::CatalogError;
use tracon_core::idempotency;
use tracon_core::identity::Caller;
use tracon_core::names::{SessionId, TenantId};
use tracon_core::runs;
use tracon_core::runs::request::{RunRequest, StartError};
use tracon_core::runs::store::DocumentInput;
use utoipa::ToSchema;

use crate::agents::agent_name;
use crate::approvals::{self, InBandDecision};
use crate::error::{ApiError, ApiResult, ProblemDetails};
use crate::extract::{ApiJson, Tenant};
use crate::sse;
use crate::state::AppState;

/// Events buffered between the run and a slow reader before the run waits.
const EVENT_BUFFER: usize = 64;
/// Most client-side tool results one request may carry.
const MAX_TOOL_RESULTS: usize = 64;
/// Longest accepted `culture` value.
const MAX_CULTURE_LEN: usize = 35;

/// The body of a run request.
#[derive(Debug, serde::Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunBody {
    /// The user's message. Empty (or absent) only when `approvals` decides a stopped run.
    #[serde(default)]
    pub message: String,
    /// Continue (or open) this session: its history is loaded and this turn appended.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Picks culture-specific instructions (`tr`, `tr-TR` …); unmatched falls back to the default.
    #[serde(default)]
    pub culture: Option<String>,
    /// Values for the agent's declared `{{name}}` parameters (strings, numbers or booleans).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub parameters: BTreeMap<String, Value>,
    /// Reference text kept apart from instructions: delimited in the user turn, recorded by
    /// name and size in its own event.
    #[serde(default)]
    pub documents: Vec<DocumentInput>,
    /// In-band decisions: with `sessionId` and no `message`, decides every request the
    /// session's stopped run waits for, and the stream is the run that resumes it.
    #[serde(default)]
    pub approvals: Vec<InBandDecision>,
    /// Answers to the client-side tool calls the session's last run handed back (its `done`
    /// frame's `clientToolCalls`): with `sessionId` and no `message`, the stream is the run
    /// that continues the turn. A call left out is answered as failed.
    #[serde(default)]
    pub tool_results: Vec<tracon_core::runs::request::ClientToolResult>,
}

/// Run an agent and stream the live turn as server-sent events
/// (`run`, `update`, `approvals`, `done`, `error`).
#[utoipa::path(post, path = "/api/agents/{name}/run", tag = "runs", request_body = RunBody,
    params(("name" = String, Path, description = "Agent name"),
        ("Prefer" = Option<String>, Header, description = "`respond-async`: queue the run and answer 202 (hosts with a job consumer)"),
        ("Idempotency-Key" = Option<String>, Header, description = "1–255 visible ASCII characters: the run executes once and the answer is one JSON document, replayed for 24 hours")),
    responses(
        (status = 200, description = "The live turn as server-sent events (`run`, `update`, `approvals`, `done`, `error`); with an `Idempotency-Key`, the whole run as one JSON document", content(
            (String = "text/event-stream"),
            (RunAnswer = "application/json"))),
        (status = 202, description = "Queued (`Prefer: respond-async`, on hosts that run a job consumer): the run's id and where to follow it", body = QueuedRunAccepted),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "A request under the same Idempotency-Key is still running", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "A definition that no longer compiles, or an Idempotency-Key used for another request", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "runs.start", skip_all, fields(agent = %name, run_id))]
pub async fn run(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<RunBody>,
) -> ApiResult<Response> {
    let name = agent_name(&name)?;
    let Some(raw_key) = headers.get("idempotency-key") else {
        return start(&state, tenant, caller, name, &headers, body, false).await.map(Started::into_response);
    };
    let key = raw_key.to_str().ok().filter(|k| idempotency::is_valid_key(k)).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_idempotency_key",
            format!("'Idempotency-Key' is 1 to {} visible ASCII characters.", idempotency::MAX_KEY_LEN),
        )
    })?;
    // What the key stands for: the body, and whether the answer was to come at once.
    let asked = serde_json::json!({ "body": &body, "respondAsync": prefers_async(&headers) });
    let hash = tracon_core::approvals::arguments_hash(&asked);
    let operation = format!("run:{name}");
    let owner = tenant.clone();
    let key_ref = idempotency::KeyRef { tenant: &owner, operation: &operation, key };
    let store = state.runtime.stores.idempotency.clone();
    let now = state.runtime.platform.clock.now();
    let expires_at = now + chrono::Duration::hours(IDEMPOTENCY_HOURS);
    match store.claim(key_ref, &hash, now, expires_at).await? {
        idempotency::Claim::Claimed => {}
        idempotency::Claim::InProgress { request_hash } if request_hash == hash => {
            return Err(ApiError::new(
                axum::http::StatusCode::CONFLICT,
                "idempotency_in_progress",
                "A request with this Idempotency-Key is still running; retry to get its response.",
            )
            .with_retry_after(1));
        }
        idempotency::Claim::Completed { request_hash, status, body } if request_hash == hash => {
            return Ok(json_answer(status, &body, true));
        }
        idempotency::Claim::InProgress { .. } | idempotency::Claim::Completed { .. } => {
            return Err(ApiError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "This Idempotency-Key was used for a different request.",
            ));
        }
    }
    match start(&state, tenant, caller, name, &headers, body, true).await {
        Ok(Started::Json { status, body }) => {
            let at = state.runtime.platform.clock.now();
            if let Err(e) = store.complete(key_ref, status.as_u16(), &body, at).await {
                tracing::warn!(error = ?e, "could not store the idempotent response; a retry will run again");
                let _ = store.release(key_ref).await;
            }
            Ok(json_answer(status.as_u16(), &body, false))
        }
        Ok(streamed) => Ok(streamed.into_response()),
        Err(e) => {
            // Nothing happened: the key is free for the retry.
            if let Err(release) = store.release(key_ref).await {
                tracing::warn!(error = ?release, "could not release an idempotency claim");
            }
            Err(e)
        }
    }
}

/// How long a stored idempotent response is kept.
const IDEMPOTENCY_HOURS: i64 = 24;

/// What [`start`] produced.
enum Started {
    /// The live stream.
    Stream(Response),
    /// A JSON answer (a queued run, or any run under an `Idempotency-Key`).
    Json { status: axum::http::StatusCode, body: serde_json::Value },
}

impl Started {
    fn into_response(self) -> Response {
        match self {
            Started::Stream(r) => r,
            Started::Json { status, body } => json_answer(status.as_u16(), &body, false),
        }
    }
}

/// A JSON answer, with `Location` and `Preference-Applied` when it names a queued run, and
/// `Idempotent-Replayed: true` when it is a stored one.
fn json_answer(status: u16, body: &serde_json::Value, replayed: bool) -> Response {
    use axum::response::IntoResponse;
    let status = axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::OK);
    let mut response = (status, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    if status == axum::http::StatusCode::ACCEPTED
        && let Some(location) = body["location"].as_str().and_then(|l| axum::http::HeaderValue::from_str(l).ok())
    {
        headers.insert(axum::http::header::LOCATION, location);
        headers.insert("preference-applied", axum::http::HeaderValue::from_static("respond-async"));
    }
    if replayed {
        headers.insert("idempotent-replayed", axum::http::HeaderValue::from_static("true"));
    }
    response
}

/// Starts a run: streamed live, or — `json` — queued when asked and possible, otherwise run
/// to its end and answered as one JSON document (a replay cannot be rebuilt from a stream).
async fn start(
    state: &AppState,
    tenant: TenantId,
    caller: Caller,
    name: tracon_core::names::AgentName,
    headers: &HeaderMap,
    body: RunBody,
    json: bool,
) -> ApiResult<Started> {
    let state = state.clone();
    let deciding = !body.approvals.is_empty();
    let answering = !body.tool_results.is_empty();
    if answering
        && (deciding || !body.message.trim().is_empty() || !body.documents.is_empty() || body.session_id.is_none())
    {
        return Err(ApiError::bad_request(
            "validation_failed",
            "A request with 'toolResults' names its 'sessionId' and carries no 'message', 'documents' or 'approvals': it continues the turn that handed the calls back.",
        )
        .with("field", "toolResults"));
    }
    if body.tool_results.len() > MAX_TOOL_RESULTS {
        return Err(ApiError::bad_request(
            "validation_failed",
            format!("At most {MAX_TOOL_RESULTS} tool results per request."),
        )
        .with("field", "toolResults"));
    }
    if deciding && (!body.message.trim().is_empty() || !body.documents.is_empty() || body.session_id.is_none()) {
        return Err(ApiError::bad_request(
            "validation_failed",
            "A request with 'approvals' names its 'sessionId' and carries no 'message' or 'documents': it resumes the stopped run.",
        )
        .with("field", "approvals"));
    }
    if !deciding && !answering && body.message.trim().is_empty() {
        return Err(ApiError::bad_request("validation_failed", "'message' must not be empty.").with("field", "message"));
    }
    if body.culture.as_ref().is_some_and(|c| c.len() > MAX_CULTURE_LEN) {
        return Err(ApiError::bad_request(
            "validation_failed",
            format!("'culture' is at most {MAX_CULTURE_LEN} characters."),
        ));
    }
    let session_id = body
        .session_id
        .as_deref()
        .map(SessionId::parse)
        .transpose()
        .map_err(|e| ApiError::bad_request("validation_failed", e.0).with("field", "sessionId"))?;
    let parameters = parameter_values(body.parameters)?;
    let attribution = admit(&state, &tenant, &caller, &name, session_id.as_ref(), headers).await?;

    let runtime = state.runtime.clone();
    let request = match &session_id {
        Some(session) if deciding => {
            let mut request = approvals::in_band(&state, &tenant, &caller, &name, session, &body.approvals).await?;
            request.attribution = attribution;
            request
        }
        _ => RunRequest {
            tenant,
            agent: name.clone(),
            message: body.message,
            culture: body.culture,
            parameters,
            documents: body.documents,
            session_id,
            caller,
            attribution,
            resume: None,
            queued: None,
            tool_results: body.tool_results,
        },
    };
    if let Some(jobs) = &state.jobs
        && !deciding
        && !answering
        && prefers_async(headers)
    {
        let accepted = runs::queued::enqueue(&runtime, request, jobs.max_attempts)
            .await
            .map_err(|e| start_error(name.as_str(), e))?;
        if let Err(e) = jobs.transport.wake(accepted.job_id).await {
            // The row is the truth: the consumer's poll finds the job anyway.
            tracing::warn!(job = %accepted.job_id, error = %e, "could not wake the job consumer");
        }
        return Ok(Started::Json { status: axum::http::StatusCode::ACCEPTED, body: accepted_body(accepted) });
    }
    let prepared = runs::prepare::prepare(&runtime, request).await.map_err(|e| start_error(name.as_str(), e))?;

    let run_id = prepared.run_id;
    tracing::Span::current().record("run_id", tracing::field::display(run_id));
    let (guard, cancel) = state.drain.enter(run_id);
    if json {
        let session = prepared.request.session_id.as_ref().map(|s| s.as_str().to_owned());
        let outcome = runs::execute::execute(&runtime, prepared, cancel, None).await;
        drop(guard);
        let session = outcome.session_id.as_ref().map(|s| s.as_str().to_owned()).or(session);
        let answer = RunAnswer {
            run_id: outcome.run_id,
            status: outcome.status,
            session_id: session,
            text: outcome.text,
            usage: outcome.usage,
            cost: outcome.cost,
            finish_reason: outcome.finish_reason,
            error: outcome.failure,
            approvals: outcome.approvals,
            client_tool_calls: outcome.client_tool_calls,
        };
        let body = serde_json::to_value(&answer).map_err(|e| ApiError::internal("RunAnswer", &e.to_string()))?;
        return Ok(Started::Json { status: axum::http::StatusCode::OK, body });
    }

    // A run without a session that stops (approval, client-side calls) opens one named
    // after the run: the caller continues there.
    let session = prepared.request.session_id.as_ref().map_or_else(|| run_id.to_string(), |s| s.as_str().to_owned());
    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
    let span = tracing::info_span!("runs.execute", agent = %name, run_id = %run_id);
    let task_runtime = runtime.clone();
    let run_cancel = cancel.clone();
    runtime.platform.spawner.spawn(Box::pin(
        async move {
            let _guard = guard;
            runs::execute::execute(&task_runtime, prepared, run_cancel, Some(tx)).await;
        }
        .instrument(span),
    ));

    // Dropping the body (the caller went away) cancels the run.
    let keep_alive = sse::KeepAlive::new(state.http.sse_keep_alive, runtime.platform.clock.clone());
    let frames = sse::LiveFrames::new(rx, run_id, keep_alive, cancel.drop_guard()).with_session(session);
    Ok(Started::Stream(sse::response(Body::from_stream(frames))))
}

/// The checks every run-starting endpoint makes, in this order, before anything runs: the
/// server is not draining (`503`), the run policy allows it (`403`), the caller's attribution
/// (labels within their limits, `400`), session ownership (`403`), the quotas (`429`).
/// Returns the run's attribution — one for the whole run, so the owner checked is the user
/// recorded.
pub(crate) async fn admit(
    state: &AppState,
    tenant: &TenantId,
    caller: &Caller,
    agent: &tracon_core::names::AgentName,
    session_id: Option<&SessionId>,
    headers: &HeaderMap,
) -> ApiResult<Attribution> {
    if state.drain.is_draining() {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "The server is shutting down and accepts no new runs; retry on another instance.",
        ));
    }
    let start = RunAction::StartRun { agent: agent.as_str(), session: session_id.map(SessionId::as_str) };
    if !is_allowed(state.runtime.run_authorizer.as_ref(), caller, tenant, start).await {
        return Err(ApiError::forbidden("run_denied", "The authorization policy does not allow this run."));
    }
    let attribution = attribute(state, tenant, caller, headers)?;
    let ownership = state.http.session_ownership;
    if ownership.enabled
        && let Some(id) = session_id
    {
        let existing = state.runtime.stores.sessions.get(tenant, id.as_str()).await?;
        ownership.may_run(attribution.user_id.as_deref(), existing.as_ref())?;
    }
    let now = state.runtime.platform.clock.now();
    if let Some(over) =
        state.runtime.quotas.check(state.runtime.stores.runs.as_ref(), tenant, agent.as_str(), now).await?
    {
        return Err(quota_exceeded(&over, now));
    }
    Ok(attribution)
}

pub(crate) fn start_error(agent: &str, e: StartError) -> ApiError {
    match e {
        StartError::Agent(CatalogError::NotFound) => ApiError::agent_not_found(agent),
        StartError::Agent(other) => other.into(),
        StartError::Documents(message) => {
            ApiError::bad_request("validation_failed", message).with("field", "documents")
        }
        StartError::Resume(message) => ApiError::new(axum::http::StatusCode::CONFLICT, "cannot_resume", message),
        StartError::ToolResults(message) => {
            ApiError::bad_request("validation_failed", message).with("field", "toolResults")
        }
        StartError::Store(s) => s.into(),
    }
}

/// Whether the request asks to be answered before the run ends (RFC 7240
/// `Prefer: respond-async`, among other preferences).
fn prefers_async(headers: &HeaderMap) -> bool {
    headers.get_all("prefer").iter().filter_map(|v| v.to_str().ok()).any(|v| {
        v.split(',')
            .any(|p| p.split(';').next().is_some_and(|token| token.trim().eq_ignore_ascii_case("respond-async")))
    })
}

/// A whole run in one JSON document: what a run under an `Idempotency-Key` answers (and
/// replays) instead of the live stream.
#[derive(Debug, serde::Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAnswer {
    #[schema(value_type = String, format = Uuid)]
    pub run_id: tracon_core::names::RunId,
    pub status: tracon_core::runs::store::RunStatus,
    /// The session the turn was saved to (or opened for a stop), if any.
    pub session_id: Option<String>,
    /// The final answer's text.
    pub text: String,
    pub usage: Option<tracon_core::model::Usage>,
    pub cost: Option<tracon_core::pricing::CostSnapshot>,
    pub finish_reason: Option<tracon_core::model::FinishReason>,
    pub error: Option<tracon_core::failure::RunFailure>,
    /// The tool calls waiting for a decision (status `AwaitingApproval`).
    pub approvals: Vec<tracon_core::events::ApprovalRequest>,
    /// The client-side calls the caller answers next, in `sessionId`.
    pub client_tool_calls: Vec<tracon_core::events::ClientToolCall>,
}

/// The answer to a queued run.
#[derive(Debug, serde::Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuedRunAccepted {
    #[schema(value_type = String)]
    pub run_id: tracon_core::names::RunId,
    pub job_id: uuid::Uuid,
    /// `Queued`.
    pub status: &'static str,
    /// The run's record.
    pub location: String,
    /// Its event log, which follows the run live once a worker starts it.
    pub events_location: String,
}

fn accepted_body(accepted: runs::outcome::Accepted) -> serde_json::Value {
    let location = format!("/api/runs/{}", accepted.run_id);
    let body = QueuedRunAccepted {
        run_id: accepted.run_id,
        job_id: accepted.job_id,
        status: "Queued",
        events_location: format!("{location}/events"),
        location,
    };
    serde_json::to_value(body).unwrap_or_default()
}

/// Resolves the run's user and labels through the attribution port. A failing port leaves
/// the run unattributed; labels over their limits refuse the request.
pub(crate) fn attribute(
    state: &AppState,
    tenant: &TenantId,
    caller: &Caller,
    headers: &HeaderMap,
) -> ApiResult<Attribution> {
    let headers: Vec<(String, String)> =
        headers.iter().filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_owned(), v.to_owned()))).collect();
    let raw = match state.runtime.attribution.attribute(&AttributionRequest { tenant, caller, headers: &headers }) {
        Ok(a) => a,
        Err(detail) => {
            tracing::warn!(detail = %detail, "run attribution failed; the run is recorded without user and labels");
            Attribution::default()
        }
    };
    attribution::check(raw).map_err(|e| ApiError::bad_request("invalid_labels", e.0))
}

/// The caller's user id as the attribution port names it (labels are not checked here: this
/// is for session ownership, not for recording a run).
pub(crate) fn user_id(state: &AppState, tenant: &TenantId, caller: &Caller, headers: &HeaderMap) -> Option<String> {
    let headers: Vec<(String, String)> =
        headers.iter().filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_owned(), v.to_owned()))).collect();
    let request = AttributionRequest { tenant, caller, headers: &headers };
    // The same rule `attribution::check` applies before a user id is recorded: an id the
    // run would drop is no identity here either.
    state
        .runtime
        .attribution
        .attribute(&request)
        .ok()
        .and_then(|a| a.user_id)
        .filter(|u| !u.is_empty() && u.chars().count() <= tracon_core::attribution::MAX_USER_ID)
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

/// `429 quota_exceeded`: which quota, its limit and use, when it resets (also `Retry-After`).
pub(crate) fn quota_exceeded(over: &tracon_core::quota::QuotaExceeded, now: chrono::DateTime<chrono::Utc>) -> ApiError {
    let retry = (over.resets_at - now).num_seconds().max(1).unsigned_abs();
    ApiError::new(
        axum::http::StatusCode::TOO_MANY_REQUESTS,
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
