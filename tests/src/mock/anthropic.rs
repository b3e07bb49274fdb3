//! The Anthropic Messages wire format: named SSE events, the whole `message` object, and
//! Anthropic's error envelope.

use serde_json::{Value, json};

use super::Frame;
use super::script::{ResolvedTurn, fragments};

/// Default tool-use id prefix.
pub const CALL_PREFIX: &str = "toolu_";

/// The streamed answer: `message_start`, `ping`, a text block (index 0) when there is text,
/// one `tool_use` block per call, `message_delta`, `message_stop`. A turn without usage
/// leaves the usage objects out entirely.
pub fn stream_frames(turn: &ResolvedTurn, model: &str, id: &str) -> Vec<Frame> {
    let mut message = json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
    });
    if let Some(u) = turn.usage {
        message["usage"] = json!({"input_tokens": u.input, "output_tokens": 1});
    }
    let mut frames = vec![
        Frame::event("message_start", &json!({"type": "message_start", "message": message})),
        Frame::event("ping", &json!({"type": "ping"})),
    ];
    let mut index = 0;
    if !turn.text.is_empty() {
        frames.push(Frame::event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        ));
        for piece in turn.text_pieces() {
            let delta = json!({"type": "content_block_delta", "index": index,
                               "delta": {"type": "text_delta", "text": piece}});
            frames.push(Frame::event("content_block_delta", &delta).content());
        }
        frames.push(Frame::event("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    for call in &turn.calls {
        let block = json!({"type": "tool_use", "id": call.id_or(CALL_PREFIX), "name": call.name, "input": {}});
        frames.push(Frame::event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        for fragment in fragments(&call.arguments) {
            let delta = json!({"type": "content_block_delta", "index": index,
                               "delta": {"type": "input_json_delta", "partial_json": fragment}});
            frames.push(Frame::event("content_block_delta", &delta).content());
        }
        frames.push(Frame::event("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    let mut delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": turn.finish.anthropic(), "stop_sequence": null},
    });
    if let Some(u) = turn.usage {
        delta["usage"] = json!({"output_tokens": u.output});
    }
    frames.push(Frame::event("message_delta", &delta));
    frames.push(Frame::event("message_stop", &json!({"type": "message_stop"})));
    frames
}

/// The whole answer when the request did not ask for a stream. A tool call whose raw
/// arguments are not JSON carries them as a string `input` (the real API never does).
pub fn message(turn: &ResolvedTurn, model: &str, id: &str) -> Value {
    let mut content = Vec::new();
    if !turn.text.is_empty() {
        content.push(json!({"type": "text", "text": turn.text}));
    }
    for call in &turn.calls {
        let input: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!(call.arguments));
        content.push(json!({"type": "tool_use", "id": call.id_or(CALL_PREFIX), "name": call.name, "input": input}));
    }
    let mut body = json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": turn.finish.anthropic(),
        "stop_sequence": null,
    });
    if let Some(u) = turn.usage {
        body["usage"] = json!({"input_tokens": u.input, "output_tokens": u.output});
    }
    body
}

/// Anthropic's error envelope for an HTTP status.
pub fn error_body(status: u16) -> Value {
    error_with(status, default_message(status))
}

/// Anthropic's error envelope with a given message.
pub fn error_with(status: u16, message: &str) -> Value {
    let kind = match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_mock"})
}

fn default_message(status: u16) -> &'static str {
    match status {
        401 => "invalid x-api-key (mock)",
        403 => "Your API key does not have permission to use the specified resource (mock).",
        404 => "model not found (mock)",
        429 => "Number of requests has exceeded your rate limit (mock).",
        503 | 529 => "Overloaded (mock)",
        500..=599 => "Internal server error (mock)",
        _ => "Invalid request (mock)",
    }
}
