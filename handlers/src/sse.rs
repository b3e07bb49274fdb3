//! Server-sent event framing and the live-turn frame contract of
//! `POST /api/agents/{name}/run`: `run` · `update` · `approvals` · `done` · `error`.
//!
//! | run event | frame(s) |
//! |---|---|
//! | `RunStarted` | `run` `{runId, agentName, agentVersion, startedAt}` |
//! | `MessageDelta` | `update` `{kind: "text", text}` |
//! | `ReasoningDelta` | `update` `{kind: "reasoning", text}` |
//! | `ToolInvoking` | `update` `{kind: "toolCall", callId, toolName, arguments}` |
//! | `ToolInvoked` / `ToolFailed` | `update` `{kind: "toolResult", callId, toolName, status, result \| error}` |
//! | `RunAwaitingApproval` | `approvals` `[{requestId, callId, toolName, arguments, effect}]`, then `done` |
//! | `RunCompleted` | `done` `{runId, status: "Completed", text, usage, cost, finishReason}` |
//! | `RunFailed` / `RunCanceled` | `error` `{runId, status, errorClass, errorType, message}` |
//!
//! `MessageCompleted` belongs to the recorded log only.

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;
use serde_json::json;
use tracon_core::events::RunEvent;
use tracon_core::names::RunId;

pub const EVENT_STREAM: &str = "text/event-stream";

/// One SSE frame: `event: <name>\ndata: <json>\n\n`. serde_json never emits a raw
/// newline, so the data is always a single line.
pub fn frame(event: &str, data: &impl Serialize) -> Bytes {
    let mut buf = BytesMut::with_capacity(64);
    buf.put_slice(b"event: ");
    buf.put_slice(event.as_bytes());
    buf.put_slice(b"\ndata: ");
    let mut writer = buf.writer();
    if serde_json::to_writer(&mut writer, data).is_err() {
        // Serialising our own types cannot fail; keep the frame well-formed regardless.
        writer.get_mut().put_slice(b"null");
    }
    let mut buf = writer.into_inner();
    buf.put_slice(b"\n\n");
    buf.freeze()
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

/// The live-turn frames for one run event (at most two).
pub fn live_frames(run_id: RunId, event: &RunEvent) -> [Option<Bytes>; 2] {
    let one = |b| [Some(b), None];
    match event {
        RunEvent::RunStarted { run_id, agent_name, agent_version, started_at } => one(frame(
            "run",
            &json!({"runId": run_id, "agentName": agent_name, "agentVersion": agent_version, "startedAt": started_at}),
        )),
        RunEvent::MessageDelta { text } => one(frame("update", &json!({"kind": "text", "text": text}))),
        RunEvent::ReasoningDelta { text } => one(frame("update", &json!({"kind": "reasoning", "text": text}))),
        RunEvent::MessageCompleted { .. } => [None, None],
        RunEvent::ToolInvoking { call_id, tool_name, arguments } => one(frame(
            "update",
            &json!({"kind": "toolCall", "callId": call_id, "toolName": tool_name, "arguments": arguments}),
        )),
        RunEvent::ToolInvoked { call_id, tool_name, status, result, omitted_bytes, .. } => one(frame(
            "update",
            &json!({"kind": "toolResult", "callId": call_id, "toolName": tool_name, "status": status,
                    "result": result, "omittedBytes": omitted_bytes}),
        )),
        RunEvent::ToolFailed { call_id, tool_name, status, error, .. } => one(frame(
            "update",
            &json!({"kind": "toolResult", "callId": call_id, "toolName": tool_name, "status": status, "error": error}),
        )),
        RunEvent::RunAwaitingApproval { requests } => [
            Some(frame("approvals", requests)),
            Some(frame("done", &json!({"runId": run_id, "status": "AwaitingApproval", "approvals": requests.len()}))),
        ],
        RunEvent::RunCompleted { text, usage, cost, finish_reason } => one(frame(
            "done",
            &json!({"runId": run_id, "status": "Completed", "text": text, "usage": usage, "cost": cost,
                    "finishReason": finish_reason}),
        )),
        RunEvent::RunFailed { error } => one(frame(
            "error",
            &json!({"runId": run_id, "status": "Failed", "errorClass": error.error_class, "errorType": error.error_type,
                    "message": error.message}),
        )),
        RunEvent::RunCanceled { error } => one(frame(
            "error",
            &json!({"runId": run_id, "status": "Canceled", "errorClass": error.error_class, "errorType": error.error_type,
                    "message": error.message}),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_single_line_json() {
        let f = frame("update", &json!({"text": "a\nb"}));
        assert_eq!(&f[..], b"event: update\ndata: {\"text\":\"a\\nb\"}\n\n");
    }
}
