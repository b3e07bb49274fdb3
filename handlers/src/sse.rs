//! Server-sent event framing and the live-turn frame contract of
//! `POST /api/agents/{name}/run`: `run` · `update` · `approvals` · `done` · `error`.
//!
//! | run event | frame(s) |
//! |---|---|
//! | `RunStarted` | `run` `{runId, agentName, agentVersion, startedAt}` |
//! | `MessageDelta` | `update` `{kind: "text", text}` |
//! | `ReasoningDelta` | `update` `{kind: "reasoning", text}` |
//! | `ToolInvoking` | `update` `{kind: "toolCall", callId, toolName, arguments, displayName?}` |
//! | `ToolInvoked` / `ToolFailed` | `update` `{kind: "toolResult", callId, toolName, status, result \| error}` |
//! | `RunAwaitingApproval` | `approvals` `[{requestId, callId, toolName, arguments, effect}]`, then `done` (`{runId, status: "AwaitingApproval", approvals, sessionId}`) |
//! | `RunCompleted` | `done` `{runId, status: "Completed", text, usage, cost, finishReason}`; after client-side tool calls also `clientToolCalls: [{callId, toolName, arguments}]` and `sessionId` |
//! | `RunFailed` / `RunCanceled` | `error` `{runId, status, errorClass, errorType, message}` |
//! | `ExecutorInvoked` (a workflow node started) | `update` `{kind: "executorInvoked", executorId, executorKind, superStep, runId}` |
//! | `ExecutorCompleted` | `update` `{kind: "executorCompleted", executorId, superStep, runId, text}` |
//! | `ExecutorFailed` | `update` `{kind: "executorFailed", executorId, superStep, runId, error}` |
//! | `RunAwaitingInput` (a workflow asks a person) | `done` `{runId, status: "AwaitingInput", requests: [{requestId, executorId, prompt}]}` |
//!
//! `MessageCompleted`, `WorkflowStarted`, `WorkflowCheckpointed`, `ModelRetried`,
//! `ModelFallback`, `ModelCacheHit` and `ResponseRejected` belong to the recorded log only.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use chrono::{DateTime, Utc};
use futures::Stream;
use futures::future::BoxFuture;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::DropGuard;
use tracon_core::events::ToolCallStatus;
use tracon_core::events::{ClientToolCall, RecordedEvent, RunEvent};
use tracon_core::failure::ErrorClass;
use tracon_core::model::{FinishReason, Usage};
use tracon_core::names::RunId;
use tracon_core::ports::Clock;
use tracon_core::pricing::CostSnapshot;

pub const EVENT_STREAM: &str = "text/event-stream";

/// One SSE frame: `event: <name>\ndata: <json>\n\n`. serde_json never emits a raw
/// newline, so the data is always a single line.
pub fn frame(event: &str, data: &impl Serialize) -> Bytes {
    let mut buf = BytesMut::with_capacity(128);
    put_frame(&mut buf, event, data);
    buf.freeze()
}

/// Appends one frame to `buf`.
pub fn put_frame(buf: &mut BytesMut, event: &str, data: &impl Serialize) {
    buf.put_slice(b"event: ");
    buf.put_slice(event.as_bytes());
    buf.put_slice(b"\ndata: ");
    let mut writer = std::mem::take(buf).writer();
    if serde_json::to_writer(&mut writer, data).is_err() {
        // Serialising our own types cannot fail; keep the frame well-formed regardless.
        writer.get_mut().put_slice(b"null");
    }
    *buf = writer.into_inner();
    buf.put_slice(b"\n\n");
}

/// Appends one frame of the recorded log (`GET /api/runs/{id}/events`):
/// `id: <sequence>\nevent: <log name>\ndata: <recorded event>\n\n`. The bytes depend only on
/// the stored event, so a replay and a live follow produce the same frames.
pub fn put_log_frame(buf: &mut BytesMut, event: &RecordedEvent) {
    buf.put_slice(b"id: ");
    buf.put_slice(event.sequence.to_string().as_bytes());
    buf.put_slice(b"\n");
    put_frame(buf, event.event.log_name(), event);
}

/// A streaming `text/event-stream` response.
pub fn response(body: Body) -> Response {
    let mut response = Response::new(body);
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Ask reverse proxies not to buffer the stream.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RunFrame<'a> {
    run_id: RunId,
    agent_name: &'a str,
    agent_version: Option<u32>,
    started_at: &'a DateTime<Utc>,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum UpdateFrame<'a> {
    Text {
        text: &'a str,
    },
    Reasoning {
        text: &'a str,
    },
    #[serde(rename_all = "camelCase")]
    ToolCall {
        call_id: &'a str,
        tool_name: &'a str,
        arguments: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        display_name: Option<&'a str>,
    },
    #[serde(rename_all = "camelCase")]
    ToolResult {
        call_id: &'a str,
        tool_name: &'a str,
        status: ToolCallStatus,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        omitted_bytes: Option<u64>,
    },
    #[serde(rename_all = "camelCase")]
    ExecutorInvoked {
        executor_id: &'a str,
        executor_kind: &'a str,
        super_step: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        run_id: Option<RunId>,
    },
    #[serde(rename_all = "camelCase")]
    ExecutorCompleted {
        executor_id: &'a str,
        super_step: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        run_id: Option<RunId>,
        text: &'a str,
    },
    #[serde(rename_all = "camelCase")]
    ExecutorFailed {
        executor_id: &'a str,
        super_step: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        run_id: Option<RunId>,
        error: &'a tracon_core::failure::RunFailure,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DoneFrame<'a> {
    run_id: RunId,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    approvals: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<&'a Usage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost: Option<Option<&'a CostSnapshot>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_reason: Option<Option<FinishReason>>,
    /// The client-side calls the caller answers next, in `sessionId`.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    client_tool_calls: &'a [ClientToolCall],
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<&'a str>,
    /// What a workflow that stopped `AwaitingInput` asks.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    requests: &'a [tracon_core::workflows::InputRequest],
}

impl DoneFrame<'_> {
    /// The run ended (or stopped) with `status`, and nothing more to say.
    fn bare(run_id: RunId, status: &'static str) -> Self {
        DoneFrame {
            run_id,
            status,
            text: None,
            approvals: None,
            usage: None,
            cost: None,
            finish_reason: None,
            client_tool_calls: &[],
            session_id: None,
            requests: &[],
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ErrorFrame<'a> {
    run_id: RunId,
    status: &'static str,
    error_class: ErrorClass,
    error_type: &'a str,
    message: &'a str,
}

/// Appends the live-turn frames of one run event to `buf` (none for `MessageCompleted`,
/// two for an approval stop).
pub fn put_live_frames(buf: &mut BytesMut, run_id: RunId, session_id: Option<&str>, event: &RunEvent) {
    match event {
        RunEvent::RunStarted { run_id, agent_name, agent_version, started_at } => {
            put_frame(buf, "run", &RunFrame { run_id: *run_id, agent_name, agent_version: *agent_version, started_at })
        }
        RunEvent::MessageDelta { text } => put_frame(buf, "update", &UpdateFrame::Text { text }),
        RunEvent::ReasoningDelta { text } => put_frame(buf, "update", &UpdateFrame::Reasoning { text }),
        // The recorded log's own events; the live turn has no frame for them.
        // (The child events are written to the root's log by the tree, never sent live.)
        RunEvent::MessageCompleted { .. }
        | RunEvent::DocumentsAttached { .. }
        | RunEvent::Custom { .. }
        | RunEvent::ChildStarted { .. }
        | RunEvent::ChildCompleted { .. }
        | RunEvent::ChildRunTimedOut { .. }
        | RunEvent::LoopIterationCompleted { .. }
        | RunEvent::WorkflowStarted { .. }
        | RunEvent::WorkflowCheckpointed { .. }
        | RunEvent::ModelRetried { .. }
        | RunEvent::ModelFallback { .. }
        | RunEvent::ResponseRejected { .. }
        | RunEvent::ModelCacheHit { .. } => {}
        RunEvent::ExecutorInvoked { executor_id, executor_kind, super_step, run_id } => put_frame(
            buf,
            "update",
            &UpdateFrame::ExecutorInvoked { executor_id, executor_kind, super_step: *super_step, run_id: *run_id },
        ),
        RunEvent::ExecutorCompleted { executor_id, super_step, run_id, text, .. } => put_frame(
            buf,
            "update",
            &UpdateFrame::ExecutorCompleted { executor_id, super_step: *super_step, run_id: *run_id, text },
        ),
        RunEvent::ExecutorFailed { executor_id, super_step, run_id, error } => put_frame(
            buf,
            "update",
            &UpdateFrame::ExecutorFailed { executor_id, super_step: *super_step, run_id: *run_id, error },
        ),
        RunEvent::RunAwaitingInput { requests } => {
            put_frame(buf, "done", &DoneFrame { requests, ..DoneFrame::bare(run_id, "AwaitingInput") })
        }
        RunEvent::ToolInvoking { call_id, tool_name, arguments, display_name } => put_frame(
            buf,
            "update",
            &UpdateFrame::ToolCall { call_id, tool_name, arguments, display_name: display_name.as_deref() },
        ),
        RunEvent::ToolInvoked { call_id, tool_name, status, result, omitted_bytes, .. } => put_frame(
            buf,
            "update",
            &UpdateFrame::ToolResult {
                call_id,
                tool_name,
                status: *status,
                result: Some(result),
                error: None,
                omitted_bytes: *omitted_bytes,
            },
        ),
        RunEvent::ToolFailed { call_id, tool_name, status, error, .. } => put_frame(
            buf,
            "update",
            &UpdateFrame::ToolResult {
                call_id,
                tool_name,
                status: *status,
                result: None,
                error: Some(error),
                omitted_bytes: None,
            },
        ),
        RunEvent::RunAwaitingApproval { requests } => {
            put_frame(buf, "approvals", requests);
            put_frame(
                buf,
                "done",
                &DoneFrame {
                    approvals: Some(requests.len()),
                    session_id,
                    ..DoneFrame::bare(run_id, "AwaitingApproval")
                },
            );
        }
        RunEvent::RunCompleted { text, usage, cost, finish_reason, client_tool_calls } => put_frame(
            buf,
            "done",
            &DoneFrame {
                text: Some(text),
                usage: Some(usage.as_ref()),
                cost: Some(cost.as_ref()),
                finish_reason: Some(*finish_reason),
                client_tool_calls,
                session_id: (!client_tool_calls.is_empty()).then_some(session_id).flatten(),
                ..DoneFrame::bare(run_id, "Completed")
            },
        ),
        RunEvent::RunFailed { error } | RunEvent::RunCanceled { error } => put_frame(
            buf,
            "error",
            &ErrorFrame {
                run_id,
                status: if matches!(event, RunEvent::RunFailed { .. }) { "Failed" } else { "Canceled" },
                error_class: error.error_class,
                error_type: &error.error_type,
                message: &error.message,
            },
        ),
    }
}

/// An SSE comment: ignored by every client, it keeps proxies from closing a quiet stream.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// A stream's keep-alive: after `every` without a write, a [`KEEP_ALIVE`] comment.
pub struct KeepAlive {
    every: Duration,
    clock: Arc<dyn Clock>,
    timer: Option<BoxFuture<'static, ()>>,
}

impl KeepAlive {
    /// `None` when `every` is zero (keep-alives off).
    pub fn new(every: Duration, clock: Arc<dyn Clock>) -> Option<Self> {
        (!every.is_zero()).then_some(Self { every, clock, timer: None })
    }

    /// Something was written: the silence starts again.
    fn reset(&mut self) {
        self.timer = None;
    }

    /// Ready when the stream has been silent for `every`.
    fn poll_due(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let timer = self.timer.get_or_insert_with(|| self.clock.sleep(self.every));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.timer = None;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The live-turn frames, as a body stream that writes every event already waiting in the
/// channel as one chunk (fewer writes and TCP segments when the model streams fast), and a
/// keep-alive comment while the run is quiet (a long tool call, a model that thinks).
pub struct LiveFrames {
    rx: mpsc::Receiver<RunEvent>,
    run_id: RunId,
    /// The run's session, named in the `done` frame of a stop (approval, client-side calls).
    session_id: Option<String>,
    keep_alive: Option<KeepAlive>,
    /// Dropped with the body: the caller went away, so the run is cancelled.
    _on_drop: DropGuard,
}

/// Largest chunk assembled from waiting events.
const MAX_CHUNK: usize = 16 * 1024;

impl LiveFrames {
    pub fn new(rx: mpsc::Receiver<RunEvent>, run_id: RunId, keep_alive: Option<KeepAlive>, on_drop: DropGuard) -> Self {
        Self { rx, run_id, session_id: None, keep_alive, _on_drop: on_drop }
    }

    /// Names the run's session in the `done` frame of a stop.
    pub fn with_session(mut self, session_id: String) -> Self {
        self.session_id = Some(session_id);
        self
    }
}

impl Stream for LiveFrames {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let mut buf = BytesMut::new();
        loop {
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(event)) => {
                    put_live_frames(&mut buf, this.run_id, this.session_id.as_deref(), &event);
                    while buf.len() < MAX_CHUNK {
                        match this.rx.try_recv() {
                            Ok(event) => put_live_frames(&mut buf, this.run_id, this.session_id.as_deref(), &event),
                            Err(_) => break,
                        }
                    }
                    if !buf.is_empty() {
                        if let Some(k) = this.keep_alive.as_mut() {
                            k.reset();
                        }
                        return Poll::Ready(Some(Ok(buf.freeze())));
                    }
                }
                Poll::Ready(None) if buf.is_empty() => return Poll::Ready(None),
                Poll::Ready(None) => return Poll::Ready(Some(Ok(buf.freeze()))),
                Poll::Pending => {
                    return match this.keep_alive.as_mut().map(|k| k.poll_due(cx)) {
                        Some(Poll::Ready(())) => Poll::Ready(Some(Ok(Bytes::from_static(KEEP_ALIVE)))),
                        _ => Poll::Pending,
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_single_line_json() {
        let f = frame("update", &serde_json::json!({"text": "a\nb"}));
        assert_eq!(&f[..], b"event: update\ndata: {\"text\":\"a\\nb\"}\n\n");
    }
}
