//! `/api/runs` and `/api/stats`: reading what happened.
//!
//! A run is read back from the store, so any instance answers for a run any other
//! instance executed. `GET /api/runs/{id}/events` replays the recorded log after
//! `Last-Event-ID` and follows a live run by polling the store (with backoff) until its
//! terminal event; the frames depend only on stored events, so replay and live are the
//! same bytes. A cancel sets a flag in the store that the executing turn observes.

pub mod replay;

use axum::Router;
use axum::routing;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use chrono::{DateTime, Utc};
use futures::stream;
use serde::Serialize;
use tracon_core::access::{RunAction, is_allowed};
use tracon_core::identity::Caller;
use tracon_core::model::Usage;
use tracon_core::names::{RunId, TenantId};
use tracon_core::runs::drain::{FOLLOW_SIGNAL_EVERY, Signal};
use tracon_core::runs::store::{
    CancelOutcome, RunFilter, RunInputRecord, RunRecord, RunStats, RunStatus, ToolCallRecord,
};
use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult, problem};
use crate::extract::{Ctx, Paging};
use crate::sse;
use crate::state::AppState;

/// The runs group: reading runs, their logs (streams) and statistics; cancelling.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/runs", routing::get(list))
        .route("/api/runs/{id}", routing::get(get))
        .route("/api/runs/{id}/events", routing::get(events))
        .route("/api/runs/{id}/tools", routing::get(tools))
        .route("/api/runs/{id}/input", routing::get(input))
        .route("/api/runs/{id}/tree", routing::get(tree))
        .route("/api/runs/{id}/replay", routing::post(replay::replay))
        .route("/api/runs/{id}/cancel", routing::post(cancel))
        .route("/api/runs/{a}/compare/{b}", routing::get(compare))
        .route("/api/stats", routing::get(stats))
}

/// Events read per store round trip while replaying.
const READ_BATCH: usize = 500;
/// First pause between polls of a live run; doubles up to `follow_poll_max`.
const POLL_START: Duration = Duration::from_millis(25);

fn run_id(raw: &str) -> ApiResult<RunId> {
    // A malformed id cannot name a run: the same answer as a missing one.
    RunId::parse(raw).ok_or_else(run_not_found)
}

fn run_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "run_not_found", "The run does not exist.")
}

/// A run of the tenant the caller may read; a run the policy denies answers exactly as a
/// missing one.
async fn load(state: &AppState, tenant: &TenantId, caller: &Caller, id: RunId) -> ApiResult<RunRecord> {
    let run = state.runtime.stores.runs.get_run(tenant, id).await?.ok_or_else(run_not_found)?;
    if !is_allowed(state.runtime.run_authorizer.as_ref(), caller, tenant, RunAction::ReadRun { run: &run }).await {
        return Err(run_not_found());
    }
    Ok(run)
}

/// The answer to a list the policy denies.
pub(crate) fn list_denied() -> ApiError {
    ApiError::forbidden("access_denied", "The authorization policy does not allow this list.")
}

/// Query parameters of the run list and the statistics, parsed with clear errors.
fn filter(uri: &Uri) -> ApiResult<RunFilter> {
    let mut f = RunFilter::default();
    for (key, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        let value = value.into_owned();
        let bad = |what: &str| ApiError::bad_request("validation_failed", what.to_owned()).with("field", key.as_ref());
        match key.as_ref() {
            "agent" => f.agent = Some(value),
            "status" => {
                f.status = Some(
                    RunStatus::parse(&value)
                        .ok_or_else(|| bad(&format!("'status' is one of {}.", RunStatus::names())))?,
                );
            }
            "sessionId" => f.session_id = Some(value),
            "userId" => f.user_id = Some(value),
            "label" => {
                let (k, v) = value.split_once(':').ok_or_else(|| bad("'label' is written key:value."))?;
                f.labels.insert(k.to_owned(), v.to_owned());
            }
            "from" => f.from = Some(timestamp(&value).ok_or_else(|| bad("'from' is an RFC 3339 timestamp."))?),
            "to" => f.to = Some(timestamp(&value).ok_or_else(|| bad("'to' is an RFC 3339 timestamp."))?),
            _ => {}
        }
    }
    Ok(f)
}

fn timestamp(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s).ok().map(|d| d.with_timezone(&Utc))
}

/// List runs, newest first. Filters: `agent`, `status`, `sessionId`, `userId`,
/// `label=key:value` (repeatable, all must match), `from`/`to` (RFC 3339, on start time).
#[utoipa::path(get, path = "/api/runs", tag = "runs",
    params(
        ("agent" = Option<String>, Query, description = "Agent name"),
        ("status" = Option<String>, Query, description = "Run status"),
        ("sessionId" = Option<String>, Query, description = "Session id"),
        ("userId" = Option<String>, Query, description = "Attributed user id"),
        ("label" = Option<String>, Query, description = "key:value; repeatable"),
        ("from" = Option<String>, Query, description = "Started at or after (RFC 3339)"),
        ("to" = Option<String>, Query, description = "Started before (RFC 3339)"),
        ("skip" = Option<u32>, Query, description = "Items to skip"),
        ("take" = Option<u32>, Query, description = "Items to return, 1..200 (default 50)")),
    responses((status = 200, body = [RunRecord]), problem::BadRequest))]
#[tracing::instrument(name = "runs.list", skip_all)]
pub async fn list(Ctx { state, tenant, caller }: Ctx, uri: Uri, paging: Paging) -> ApiResult<Json<Vec<RunRecord>>> {
    let f = filter(&uri)?;
    if !is_allowed(state.runtime.run_authorizer.as_ref(), &caller, &tenant, RunAction::ListRuns).await {
        return Err(list_denied());
    }
    Ok(Json(state.runtime.stores.runs.list_runs(&tenant, &f, paging.skip, paging.take).await?))
}

/// Read a run's summary: status, timings, usage, cost, error class. Not the conversation.
#[utoipa::path(get, path = "/api/runs/{id}", tag = "runs", params(("id" = String, Path, description = "Run id")),
    responses((status = 200, body = RunRecord), problem::NotFound))]
#[tracing::instrument(name = "runs.get", skip_all)]
pub async fn get(Ctx { state, tenant, caller }: Ctx, Path(id): Path<String>) -> ApiResult<Json<RunRecord>> {
    Ok(Json(load(&state, &tenant, &caller, run_id(&id)?).await?))
}

/// A run's call tree: the root (the run itself when it has no parent) and every child run
/// under it, by depth then start, with what the whole tree spent.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunTree {
    pub root_run_id: RunId,
    /// The root first, then each depth in start order.
    pub runs: Vec<RunRecord>,
    /// Tokens of every run in the tree together.
    pub total_usage: Usage,
    /// Cost of every priced run in the tree together, in `currency`; absent when no run in
    /// the tree has a cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<f64>)]
    pub total_cost: Option<tracon_core::pricing::Money>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
}

/// A run's call tree, readable from any member: its root, every child run an agent tool
/// started under it, and the tokens and cost of the whole tree.
#[utoipa::path(get, path = "/api/runs/{id}/tree", tag = "runs", params(("id" = String, Path, description = "Run id of any member of the tree")),
    responses((status = 200, body = RunTree), problem::NotFound))]
#[tracing::instrument(name = "runs.tree", skip_all)]
pub async fn tree(Ctx { state, tenant, caller }: Ctx, Path(id): Path<String>) -> ApiResult<Json<RunTree>> {
    let member = load(&state, &tenant, &caller, run_id(&id)?).await?;
    let root = member.root_run_id.unwrap_or(member.id);
    let mut runs = state.runtime.stores.runs.list_tree(&tenant, root).await?;
    // A member the policy does not let this caller read is left out, like a missing one.
    let mut readable = Vec::with_capacity(runs.len());
    for run in runs.drain(..) {
        if is_allowed(state.runtime.run_authorizer.as_ref(), &caller, &tenant, RunAction::ReadRun { run: &run }).await {
            readable.push(run);
        }
    }
    let mut total_usage = Usage::default();
    let (mut total_cost, mut currency) = (None::<tracon_core::pricing::Money>, None::<String>);
    for run in &readable {
        if let Some(u) = &run.usage {
            total_usage.add(u);
        }
        if let Some(c) = &run.cost {
            *total_cost.get_or_insert_default() += c.total_cost;
            currency.get_or_insert_with(|| c.currency.clone());
        }
    }
    Ok(Json(RunTree { root_run_id: root, runs: readable, total_usage, total_cost, currency }))
}

/// A run's tool calls, in call order: name, arguments, result, duration, error, effect,
/// late completion.
#[utoipa::path(get, path = "/api/runs/{id}/tools", tag = "runs", params(("id" = String, Path, description = "Run id")),
    responses((status = 200, body = [ToolCallRecord]), problem::NotFound))]
#[tracing::instrument(name = "runs.tools", skip_all)]
pub async fn tools(Ctx { state, tenant, caller }: Ctx, Path(id): Path<String>) -> ApiResult<Json<Vec<ToolCallRecord>>> {
    let (tenant, id) = (tenant, run_id(&id)?);
    load(&state, &tenant, &caller, id).await?;
    Ok(Json(state.runtime.stores.runs.list_tool_calls(&tenant, id).await?))
}

/// What the caller sent, when input recording is on.
#[utoipa::path(get, path = "/api/runs/{id}/input", tag = "runs", params(("id" = String, Path, description = "Run id")),
    responses((status = 200, body = RunInputRecord), problem::NotFound))]
#[tracing::instrument(name = "runs.input", skip_all)]
pub async fn input(Ctx { state, tenant, caller }: Ctx, Path(id): Path<String>) -> ApiResult<Json<RunInputRecord>> {
    let (tenant, id) = (tenant, run_id(&id)?);
    load(&state, &tenant, &caller, id).await?;
    state.runtime.stores.runs.get_input(&tenant, id).await?.map(Json).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "input_not_recorded",
            "This run's input was not recorded (Tracon__RunRecording__RecordInput is off).",
        )
    })
}

/// Two runs side by side.
#[derive(Debug, Serialize, ToSchema)]
pub struct Comparison {
    pub a: RunRecord,
    pub b: RunRecord,
}

/// Both summaries, verbatim; the client draws the comparison.
#[utoipa::path(get, path = "/api/runs/{a}/compare/{b}", tag = "runs",
    params(("a" = String, Path, description = "Run id"), ("b" = String, Path, description = "Run id")),
    responses((status = 200, body = Comparison), problem::NotFound))]
#[tracing::instrument(name = "runs.compare", skip_all)]
pub async fn compare(
    Ctx { state, tenant, caller }: Ctx,
    Path((a, b)): Path<(String, String)>,
) -> ApiResult<Json<Comparison>> {
    let a = load(&state, &tenant, &caller, run_id(&a)?).await?;
    let b = load(&state, &tenant, &caller, run_id(&b)?).await?;
    Ok(Json(Comparison { a, b }))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelAccepted {
    pub run_id: RunId,
    pub status: &'static str,
}

/// Ask a running run to stop. Works from any instance: the flag is in the store, and the
/// executing turn observes it between model chunks and before every model and tool call. A
/// run that ended interrupted and was continued (`continuedByRunId`) stands for its
/// continuation: the latest run of the chain is cancelled, and the answer names it.
#[utoipa::path(post, path = "/api/runs/{id}/cancel", tag = "runs", params(("id" = String, Path, description = "Run id")),
    responses((status = 202, body = CancelAccepted), problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "runs.cancel", skip_all)]
pub async fn cancel(Ctx { state, tenant, caller }: Ctx, Path(id): Path<String>) -> ApiResult<Response> {
    let id = run_id(&id)?;
    let mut run = state.runtime.stores.runs.get_run(&tenant, id).await?.ok_or_else(run_not_found)?;
    if !is_allowed(state.runtime.run_authorizer.as_ref(), &caller, &tenant, RunAction::CancelRun { run: &run }).await {
        return Err(run_not_found());
    }
    // The work of a continued run goes on in its continuation (the same request, tenant and
    // agent): follow the chain to its latest run.
    for _ in 0..tracon_core::runs::continuation::MAX_CHAIN {
        let Some(next) = run.continued_by_run_id else { break };
        match state.runtime.stores.runs.get_run(&tenant, next).await? {
            Some(later) => run = later,
            None => break,
        }
    }
    let id = run.id;
    match state.runtime.stores.runs.request_cancel(&tenant, id).await {
        Ok(CancelOutcome::Requested) => {
            state.runtime.drain.cancel_local(id);
            cancel_descendants(&state, &tenant, &run).await;
            Ok((StatusCode::ACCEPTED, Json(CancelAccepted { run_id: id, status: "CancelRequested" })).into_response())
        }
        Ok(CancelOutcome::AlreadyEnded(status)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "run_not_running",
            format!("The run has already ended ({status:?})."),
        )
        // `status` is the problem document's own (the HTTP status, RFC 9457).
        .with("runStatus", status)),
        Err(tracon_core::error::StoreError::NotFound) => Err(run_not_found()),
        Err(e) => Err(e.into()),
    }
}

/// Asks every run under `run` in its call tree to stop too. Children execute with their
/// parent, whose cancellation reaches them anyway; the flags also stop one another instance
/// runs. A failure is logged: the run itself is already cancelled.
async fn cancel_descendants(state: &AppState, tenant: &TenantId, run: &RunRecord) {
    let runs = &state.runtime.stores.runs;
    let tree = match runs.list_tree(tenant, run.root_run_id.unwrap_or(run.id)).await {
        Ok(tree) => tree,
        Err(e) => return tracing::warn!(run_id = %run.id, error = ?e, "could not read the run's tree to cancel it"),
    };
    let mut under = vec![run.id];
    // By depth, so a parent is always met before its children.
    for member in &tree {
        if member.parent_run_id.is_some_and(|p| under.contains(&p)) {
            under.push(member.id);
            if !member.status.is_terminal() {
                if let Err(e) = runs.request_cancel(tenant, member.id).await {
                    tracing::warn!(run_id = %member.id, error = ?e, "could not cancel a child run");
                }
                state.runtime.drain.cancel_local(member.id);
            }
        }
    }
}

/// Counts by status, error class, agent, user and label; tokens and cost. Takes the run
/// list's filters.
#[utoipa::path(get, path = "/api/stats", tag = "runs",
    params(("agent" = Option<String>, Query, description = "Agent name"),
        ("from" = Option<String>, Query, description = "Started at or after (RFC 3339)"),
        ("to" = Option<String>, Query, description = "Started before (RFC 3339)")),
    responses((status = 200, body = RunStats), problem::BadRequest))]
#[tracing::instrument(name = "runs.stats", skip_all)]
pub async fn stats(Ctx { state, tenant, caller }: Ctx, uri: Uri) -> ApiResult<Json<RunStats>> {
    let f = filter(&uri)?;
    if !is_allowed(state.runtime.run_authorizer.as_ref(), &caller, &tenant, RunAction::ListRuns).await {
        return Err(list_denied());
    }
    Ok(Json(state.runtime.stores.runs.stats(&tenant, &f).await?))
}

/// The recorded event log as server-sent events (`run.started`, `message.delta`,
/// `tool.invoking`, …, each with `id: <sequence>`). Resumes after `Last-Event-ID`; follows a
/// live run until its terminal event.
#[utoipa::path(get, path = "/api/runs/{id}/events", tag = "runs",
    params(("id" = String, Path, description = "Run id"),
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this sequence number")),
    responses((status = 200, description = "The recorded log", content_type = "text/event-stream", body = String), problem::NotFound))]
#[tracing::instrument(name = "runs.events", skip_all)]
pub async fn events(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let (tenant, id) = (tenant, run_id(&id)?);
    load(&state, &tenant, &caller, id).await?;
    let after = match headers.get("last-event-id") {
        None => 0,
        Some(v) => v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()).ok_or_else(|| {
            ApiError::bad_request("validation_failed", "Last-Event-ID is the sequence number of an event.")
        })?,
    };
    let follow = Follow {
        state: state.clone(),
        tenant,
        run: id,
        after,
        pause: Duration::ZERO,
        started: state.runtime.platform.clock.now(),
        done: false,
        quiet_polls_after_end: 0,
        last_write: state.runtime.platform.clock.now(),
        signaled: None,
    };
    let body = stream::unfold(follow, |mut f| async move {
        let chunk = f.next_chunk().await?;
        Some((Ok::<_, std::convert::Infallible>(chunk), f))
    });
    Ok(sse::response(Body::from_stream(body)))
}

/// The state of one follower of a run's log.
struct Follow {
    state: AppState,
    tenant: TenantId,
    run: RunId,
    after: u64,
    pause: Duration,
    started: DateTime<Utc>,
    done: bool,
    /// Polls that found nothing new after the run row said it ended.
    quiet_polls_after_end: u32,
    /// When the stream last wrote anything (frames or a keep-alive).
    last_write: DateTime<Utc>,
    /// When the run's executor was last told it is followed.
    signaled: Option<DateTime<Utc>>,
}

impl Follow {
    /// Tells the run's executor, wherever it runs, that its log has a follower, so it writes
    /// its events promptly (an unfollowed run writes them on size, steps and its end only,
    /// where signals are heard). Repeated while the run is live, at most every
    /// [`FOLLOW_SIGNAL_EVERY`]; a failure only delays the events to the executor's own writes.
    async fn ask_for_events(&mut self, now: DateTime<Utc>) {
        if self.signaled.is_some_and(|at| (now - at).to_std().is_ok_and(|d| d < FOLLOW_SIGNAL_EVERY)) {
            return;
        }
        self.signaled = Some(now);
        let runtime = &self.state.runtime;
        let signal = Signal::Follow(self.run);
        runtime.drain.hear(signal.clone(), now.timestamp_millis());
        if let Err(e) = runtime.stores.runs.signal(signal).await {
            tracing::warn!(run_id = %self.run, error = ?e, "could not signal the run's executor that it is followed");
        }
    }

    /// The next chunk of frames, or `None` when the stream ends.
    async fn next_chunk(&mut self) -> Option<bytes::Bytes> {
        let runtime = self.state.runtime.clone();
        let clock = runtime.platform.clock.clone();
        loop {
            if self.done {
                return None;
            }
            if !self.pause.is_zero() {
                clock.sleep(self.pause).await;
            }
            let events = match runtime.stores.runs.read_events(&self.tenant, self.run, self.after, READ_BATCH).await {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(run_id = %self.run, error = ?e, "reading the run log failed; ending the stream");
                    return None;
                }
            };
            if !events.is_empty() {
                let mut buf = BytesMut::new();
                for e in &events {
                    sse::put_log_frame(&mut buf, e);
                    self.after = e.sequence;
                    if e.event.is_terminal() {
                        self.done = true;
                    }
                }
                self.pause = Duration::ZERO;
                self.quiet_polls_after_end = 0;
                self.last_write = clock.now();
                return Some(buf.freeze());
            }
            // Nothing new: is the run still live?
            let now = clock.now();
            let elapsed = (now - self.started).to_std().unwrap_or_default();
            if elapsed >= self.state.http.follow_timeout {
                return None;
            }
            let keep_alive = self.state.http.sse_keep_alive;
            if !keep_alive.is_zero() && (now - self.last_write).to_std().unwrap_or_default() >= keep_alive {
                self.last_write = now;
                return Some(bytes::Bytes::from_static(sse::KEEP_ALIVE));
            }
            let ended = matches!(
                runtime.stores.runs.get_run(&self.tenant, self.run).await,
                Ok(Some(r)) if r.status.is_terminal()
            );
            if !ended {
                self.ask_for_events(now).await;
            }
            if ended {
                // The row closes just before the terminal event is written; give the
                // writer a few polls, then stop (a log whose end was never recorded).
                self.quiet_polls_after_end += 1;
                if self.quiet_polls_after_end > 8 {
                    return None;
                }
            }
            self.pause =
                if self.pause.is_zero() { POLL_START } else { (self.pause * 2).min(self.state.http.follow_poll_max) };
        }
    }
}
