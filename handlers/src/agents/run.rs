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

use axum::body::Body;
use axum::extract::Path;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;
use tracon_core::idempotency::{self, Reservation};
use tracon_core::identity::Caller;
use tracon_core::names::{SessionId, TenantId};
use tracon_core::runs;
use tracon_core::runs::admission::{Admission, Attributed, admit};
use tracon_core::runs::launch::{Delivery, Launched, Start, launch};
use tracon_core::runs::request::RunRequest;
use tracon_core::runs::store::DocumentInput;
use utoipa::ToSchema;

use crate::agents::definitions::agent_name;
use crate::approvals::{self, InBandDecision};
use crate::error::{ApiError, ApiResult, ProblemDetails, problem, start_error};
use crate::extract::{ApiJson, Ctx, header_pairs};
use crate::sse;
use crate::state::AppState;

/// Most client-side tool results one request may carry.
const MAX_TOOL_RESULTS: usize = 64;

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
    /// A BCP 47 tag (`tr`, `tr-TR` …) picking culture-specific instructions; unmatched: the default.
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
        (status = 202, description = "Queued (`Prefer: respond-async`, on hosts that run a job consumer): the run's id and where to follow it", body = QueuedRunAccepted), problem::BadRequest, problem::NotFound,
        (status = 409, description = "A request under the same Idempotency-Key is still running", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "A definition that no longer compiles, or an Idempotency-Key used for another request", body = ProblemDetails, content_type = "application/problem+json"), problem::Unavailable))]
#[tracing::instrument(name = "runs.start", skip_all, fields(agent = %name, run_id))]
pub async fn run(
    Ctx { state, tenant, caller }: Ctx,
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
    match store.claim(key_ref, &hash, now, expires_at).await?.for_request(&hash) {
        Reservation::Fresh => {}
        Reservation::Running => {
            return Err(ApiError::new(
                axum::http::StatusCode::CONFLICT,
                "idempotency_in_progress",
                "A request with this Idempotency-Key is still running; retry to get its response.",
            )
            .with_retry_after(1));
        }
        Reservation::Replay { status, body } => return Ok(json_answer(status, &body, true)),
        Reservation::Reused => {
            return Err(ApiError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "This Idempotency-Key was used for a different request.",
            ));
        }
    }
    let started = start(&state, tenant, caller, name, &headers, body, true).await;
    // A JSON answer is kept for the duplicates; anything else started nothing to replay, and
    // the key is free for the retry.
    let answer = match &started {
        Ok(Started::Json { status, body }) => Some((status.as_u16(), body)),
        _ => None,
    };
    let at = state.runtime.platform.clock.now();
    idempotency::settle(store.as_ref(), key_ref, answer, at).await;
    match started {
        Ok(Started::Json { status, body }) => Ok(json_answer(status.as_u16(), &body, false)),
        Ok(streamed) => Ok(streamed.into_response()),
        Err(e) => Err(e),
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
pub(crate) fn json_answer(status: u16, body: &serde_json::Value, replayed: bool) -> Response {
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
    if !deciding && !answering {
        message_given(&body.message)?;
    }
    let (session_id, parameters) = checked_input(body.culture.as_deref(), body.session_id.as_deref(), body.parameters)?;
    let runtime = state.runtime.clone();
    let pairs = header_pairs(headers);
    let admission = Admission {
        tenant: &tenant,
        caller: &caller,
        agent: &name,
        session: session_id.as_ref(),
        attribution: Attributed::Port(&pairs),
    };
    let attribution = admit(&runtime, admission).await?;

    let request = match &session_id {
        Some(session) if deciding => {
            let mut request =
                approvals::decide::in_band(&state, &tenant, &caller, &name, session, &body.approvals).await?;
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
    let requested_session = request.session_id.as_ref().map(|s| s.as_str().to_owned());
    let queue = runtime.queue().filter(|_| !deciding && !answering && prefers_async(headers));
    let delivery = match queue {
        Some(queue) => Delivery::from(queue),
        None if json => Delivery::Buffered,
        None => Delivery::Live,
    };
    let launched = launch(&runtime, Start::new(request, delivery)).await.map_err(|e| start_error(name.as_str(), e))?;
    tracing::Span::current().record("run_id", tracing::field::display(launched.run_id()));
    match launched {
        Launched::Queued(accepted) => {
            Ok(Started::Json { status: axum::http::StatusCode::ACCEPTED, body: accepted_body(accepted) })
        }
        Launched::Finished(outcome) => {
            let answer = RunAnswer {
                run_id: outcome.run_id,
                status: outcome.status,
                session_id: outcome.session_id.as_ref().map(|s| s.as_str().to_owned()).or(requested_session),
                text: outcome.text,
                usage: outcome.usage,
                cost: outcome.cost,
                finish_reason: outcome.finish_reason,
                error: outcome.failure,
                approvals: outcome.approvals,
                client_tool_calls: outcome.client_tool_calls,
            };
            let body = serde_json::to_value(&answer).map_err(|e| ApiError::internal("RunAnswer", &e.to_string()))?;
            Ok(Started::Json { status: axum::http::StatusCode::OK, body })
        }
        Launched::Live(live) => {
            // A run without a session that stops (approval, client-side calls) opens one
            // named after the run: the caller continues there.
            let session = live.session_id.as_ref().map_or_else(|| live.run_id.to_string(), |s| s.as_str().to_owned());
            // Dropping the body (the caller went away) cancels the run.
            let keep_alive = sse::KeepAlive::new(state.http.sse_keep_alive, runtime.platform.clock.clone());
            let frames = sse::LiveFrames::new(live.events, live.run_id, keep_alive, live.cancel.drop_guard())
                .with_session(session);
            Ok(Started::Stream(sse::response(Body::from_stream(frames))))
        }
        Launched::Started(run_id) => Err(ApiError::internal("RunDelivery", &format!("run {run_id} started detached"))),
    }
}

/// Whether the request asks to be answered before the run ends (RFC 7240
/// `Prefer: respond-async`, among other preferences).
pub(crate) fn prefers_async(headers: &HeaderMap) -> bool {
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

pub(crate) fn accepted_body(accepted: runs::outcome::Accepted) -> serde_json::Value {
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

/// A new turn's message must not be empty.
pub(crate) fn message_given(message: &str) -> ApiResult<()> {
    if message.trim().is_empty() {
        return Err(ApiError::bad_request("validation_failed", "'message' must not be empty.").with("field", "message"));
    }
    Ok(())
}

/// What every run-like body carries, checked the same way: the culture (a BCP 47 tag), the
/// session id, and the parameter values (as strings).
pub(crate) fn checked_input(
    culture: Option<&str>,
    session_id: Option<&str>,
    parameters: BTreeMap<String, Value>,
) -> ApiResult<(Option<SessionId>, BTreeMap<String, String>)> {
    if let Some(culture) = culture {
        tracon_core::runs::input::check_culture("culture", culture)
            .map_err(|refusal| crate::error::input_refused(&refusal))?;
    }
    let session_id = session_id
        .map(SessionId::parse)
        .transpose()
        .map_err(|e| ApiError::bad_request("validation_failed", e.0).with("field", "sessionId"))?;
    Ok((session_id, parameter_values(parameters)?))
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
