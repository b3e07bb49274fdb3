//! `SendMessage` and `SendStreamingMessage`: a message starts a run of the published agent
//! (through `admission::admit` and `launch::launch`, on its own call-tree budget), and the
//! answer is the task: at its end (`SendMessage`), at once (`returnImmediately`: a queued
//! run on a host with a job consumer), or as it happens (the stream: the task, then status
//! and artifact updates mapped from the run's live events, closing at its terminal state).

use std::collections::VecDeque;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::DropGuard;
use tracon_core::catalog::CatalogEntry;
use tracon_core::events::RunEvent;
use tracon_core::exposure::ExposureRefusal;
use tracon_core::names::{RunId, SessionId};
use tracon_core::ports::Clock;
use tracon_core::runs::admission::{Admission, Attributed, admit};
use tracon_core::runs::launch::{Delivery, Launched, Start, launch, new_run_id};
use tracon_core::runs::request::RunRequest;
use tracon_core::runs::store::{RunRecord, RunStatus};
use tracon_core::webhooks::a2a::TASK_LABEL;

use super::Called;
use super::push::{self, PushIn};
use super::rpc::{self, CONTENT_TYPE_NOT_SUPPORTED, PUSH_NOT_SUPPORTED, RpcError, UNSUPPORTED_OPERATION};
use super::wire::{self, InMessage};
use crate::error::{ApiError, start_error};
use crate::extract::header_pairs;

/// What a method answers: a JSON-RPC result, or a stream of them.
pub enum Sent {
    Result(Value),
    Stream(LiveTask),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendParams {
    message: InMessage,
    #[serde(default)]
    configuration: Option<SendConfig>,
    #[serde(default)]
    tenant: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendConfig {
    #[serde(default)]
    accepted_output_modes: Vec<String>,
    #[serde(default)]
    task_push_notification_config: Option<PushIn>,
    #[serde(default)]
    history_length: Option<i64>,
    #[serde(default)]
    return_immediately: bool,
}

/// The published agent in the key's tenant, or why an external caller may not run it: an
/// approval boundary is `UnsupportedOperation` (naming the tool); an agent missing in this
/// tenant is the same refusal as any missing agent.
pub(crate) async fn exposed_agent(called: &Called<'_>) -> Result<CatalogEntry, RpcError> {
    let exposure = &called.state.http.a2a.exposure;
    match exposure.agent(&called.state.runtime, called.tenant, called.agent.as_str()).await {
        Ok(entry) => Ok(entry),
        Err(refusal @ ExposureRefusal::ApprovalRequired { .. }) => {
            let tool = match &refusal {
                ExposureRefusal::ApprovalRequired { tool, .. } => tool.clone(),
                _ => String::new(),
            };
            Err(RpcError::new(UNSUPPORTED_OPERATION, refusal.message()).with("tool", tool))
        }
        Err(other) => Err(ApiError::from(other).into()),
    }
}

pub(crate) async fn send(called: &Called<'_>, params: Value, streaming: bool) -> Result<Sent, RpcError> {
    let params: SendParams = rpc::params(params)?;
    wire::check_tenant(called.tenant, params.tenant.as_deref())?;
    let message = params.message.text()?;
    let config = params.configuration.unwrap_or_default();
    let history = wire::history_length(config.history_length)?;
    if !wire::accepts_text(&config.accepted_output_modes) {
        return Err(RpcError::new(
            CONTENT_TYPE_NOT_SUPPORTED,
            "This agent answers in text/plain, which 'acceptedOutputModes' leaves out.",
        ));
    }
    if let Some(task) = params.message.task_id.as_deref().filter(|t| !t.is_empty()) {
        // Every task here is one run: it takes no second message, finished or not.
        let run = super::tasks::find(called, task).await?;
        let reason = if wire::is_terminal(wire::state(&run)) { "has ended" } else { "is still working" };
        return Err(RpcError::new(
            UNSUPPORTED_OPERATION,
            format!(
                "The task {reason} and accepts no further message; send a new message with its contextId to go on in the same conversation."
            ),
        ));
    }
    let runtime = &called.state.runtime;
    let session = match params.message.context_id.as_deref().filter(|c| !c.is_empty()) {
        Some(context) => {
            SessionId::parse(context).map_err(|e| RpcError::params(format!("'message.contextId': {}", e.0)))?
        }
        None => SessionId::parse(&format!("a2a-{}", new_run_id(runtime))).map_err(|e| RpcError::params(e.0))?,
    };
    if config.task_push_notification_config.is_some() && called.state.http.a2a.push_secret_name.is_none() {
        return Err(RpcError::new(PUSH_NOT_SUPPORTED, "Push notifications are not configured on this server."));
    }
    let entry = exposed_agent(called).await?;

    let pairs = header_pairs(called.headers);
    let admission = Admission {
        tenant: called.tenant,
        caller: called.caller,
        agent: called.agent,
        session: Some(&session),
        attribution: Attributed::Port(&pairs),
    };
    let mut attribution = admit(runtime, admission).await.map_err(|e| RpcError::from(ApiError::from(e)))?;
    // The mark of a task: GetTask and push notifications know A2A's runs by it.
    attribution.labels.insert(TASK_LABEL.to_owned(), called.agent.to_string());

    let run_id = new_run_id(runtime);
    let push_config = match config.task_push_notification_config {
        Some(push) => Some(push::subscribe(called, run_id, push).await?),
        None => None,
    };
    let input = message.clone();
    let mut request =
        RunRequest::new(called.tenant.clone(), called.agent.clone(), message, called.caller.clone(), attribution);
    request.session_id = Some(session.clone());
    let queue = runtime.queue().filter(|_| config.return_immediately && !streaming);
    let delivery = match queue {
        Some(queue) => Delivery::from(queue),
        None if streaming => Delivery::Live,
        None if config.return_immediately && called.state.http.background_outlives_response => Delivery::Background,
        None => Delivery::Buffered,
    };
    let mut start = Start::new(request, delivery);
    start.run_id = Some(run_id);
    start.budget = Some(called.state.http.a2a.exposure.limits(&runtime.settings.agent_graph));
    let launched = match launch(runtime, start).await {
        Ok(launched) => launched,
        Err(e) => {
            if let Some(id) = push_config {
                push::unsubscribe(called, id).await;
            }
            return Err(start_error(called.agent.as_str(), e).into());
        }
    };
    let context = session.as_str().to_owned();
    let opened = |status: RunStatus, run_id: RunId| {
        let mut row =
            RunRecord::opened(run_id, called.agent.as_str(), entry.version, status, runtime.platform.clock.now());
        row.session_id = Some(context.clone());
        row
    };
    match launched {
        Launched::Queued(accepted) => Ok(Sent::Result(
            json!({ "task": wire::task(&opened(RunStatus::Queued, accepted.run_id), None, None, Some(0)) }),
        )),
        Launched::Started(run_id) => {
            Ok(Sent::Result(json!({ "task": wire::task(&opened(RunStatus::Running, run_id), None, None, Some(0)) })))
        }
        Launched::Finished(outcome) => {
            let mut row = opened(outcome.status, outcome.run_id);
            row.started_at = outcome.started_at;
            row.ended_at = Some(runtime.platform.clock.now());
            row.usage = outcome.usage;
            row.error = outcome.failure.clone();
            Ok(Sent::Result(json!({ "task": wire::task(&row, Some(&outcome.text), Some(&input), history) })))
        }
        Launched::Live(live) => Ok(Sent::Stream(LiveTask {
            task_id: live.run_id.to_string(),
            context,
            events: live.events,
            clock: runtime.platform.clock.clone(),
            cancel_on_drop: live.cancel.drop_guard(),
        })),
    }
}

/// A run followed live, for the stream.
pub struct LiveTask {
    task_id: String,
    context: String,
    events: mpsc::Receiver<RunEvent>,
    clock: Arc<dyn Clock>,
    /// A stream the caller drops cancels the run, as every live surface does.
    cancel_on_drop: DropGuard,
}

/// Where the stream stands.
struct Frames {
    live: LiveTask,
    id: rpc::Id,
    pending: VecDeque<Value>,
    /// Whether a chunk of the answer was sent (later chunks append to it).
    chunked: bool,
    done: bool,
}

impl Frames {
    fn status(&mut self, state: &str, message: Option<&str>, at: chrono::DateTime<chrono::Utc>) {
        let status = wire::status(&self.live.task_id, &self.live.context, state, at, message);
        self.pending.push_back(json!({ "statusUpdate": {
            "taskId": self.live.task_id, "contextId": self.live.context, "status": status,
        } }));
        self.done |= wire::is_terminal(state);
    }

    fn artifact(&mut self, text: &str, append: bool, last: bool) {
        self.pending.push_back(json!({ "artifactUpdate": {
            "taskId": self.live.task_id,
            "contextId": self.live.context,
            "artifact": wire::answer_artifact(text),
            "append": append,
            "lastChunk": last,
        } }));
    }

    /// What one run event says to an A2A client (most events say nothing).
    fn map(&mut self, event: RunEvent) {
        let now = self.live.clock.now();
        match event {
            RunEvent::RunStarted { .. } => self.status("TASK_STATE_WORKING", None, now),
            RunEvent::MessageDelta { text } if !text.is_empty() => {
                self.artifact(&text, self.chunked, false);
                self.chunked = true;
            }
            RunEvent::ToolInvoking { tool_name, display_name, .. } => {
                let doing = display_name.unwrap_or_else(|| format!("Calling {tool_name}"));
                self.status("TASK_STATE_WORKING", Some(&doing), now);
            }
            // The final answer replaces the chunks (a turn that went on to call tools
            // streamed text that is not the answer).
            RunEvent::RunCompleted { text, .. } => {
                self.artifact(&text, false, true);
                self.status("TASK_STATE_COMPLETED", None, now);
            }
            RunEvent::RunFailed { error } => self.status("TASK_STATE_FAILED", Some(&error.message), now),
            RunEvent::RunCanceled { error } => self.status("TASK_STATE_CANCELED", Some(&error.message), now),
            RunEvent::RunAwaitingApproval { .. } | RunEvent::RunAwaitingInput { .. } => {
                let said = wire::status_message(RunStatus::AwaitingApproval, None);
                self.status("TASK_STATE_REJECTED", said.as_deref(), now);
            }
            _ => {}
        }
    }
}

/// One SSE frame: `data: <JSON-RPC response>`.
fn frame(id: &rpc::Id, result: &Value) -> Bytes {
    let body = json!({ "jsonrpc": "2.0", "id": id, "result": result });
    Bytes::from(format!("data: {body}\n\n"))
}

/// The stream: the task as submitted, then its updates, closing at its terminal state.
pub fn stream_response(live: LiveTask, id: rpc::Id) -> Response {
    let submitted = wire::status(&live.task_id, &live.context, "TASK_STATE_SUBMITTED", live.clock.now(), None);
    let first = json!({ "task": { "id": live.task_id, "contextId": live.context, "status": submitted } });
    let frames = Frames { live, id, pending: VecDeque::from([first]), chunked: false, done: false };
    let stream = futures::stream::unfold(frames, |mut frames| async move {
        loop {
            if let Some(next) = frames.pending.pop_front() {
                let bytes = frame(&frames.id, &next);
                return Some((Ok::<Bytes, std::convert::Infallible>(bytes), frames));
            }
            if frames.done {
                // Ending the stream drops the guard: the run has ended already.
                let _ = &frames.live.cancel_on_drop;
                return None;
            }
            match frames.live.events.recv().await {
                Some(event) => frames.map(event),
                None => {
                    let said = "The run ended without a terminal event.";
                    let now = frames.live.clock.now();
                    frames.status("TASK_STATE_FAILED", Some(said), now);
                }
            }
        }
    });
    crate::sse::response(Body::from_stream(stream))
}
