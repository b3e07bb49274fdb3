//! The Gemini Developer API wire format: `streamGenerateContent` chunks (as SSE with CRLF
//! line ends when `alt=sse`, as one JSON array otherwise), the whole `generateContent`
//! response, and Google's error envelope.

use serde_json::{Value, json};

use super::Frame;
use super::script::{MockFinish, ResolvedTurn};

fn finish_reason(finish: MockFinish) -> &'static str {
    match finish {
        MockFinish::Stop | MockFinish::ToolCalls => "STOP",
        MockFinish::Length => "MAX_TOKENS",
        MockFinish::ContentFilter | MockFinish::PromptFiltered => "SAFETY",
    }
}

/// Usage as Google counts it; `partial` is what a chunk before the last carries (the prompt only).
fn usage(turn: &ResolvedTurn, partial: bool) -> Option<Value> {
    turn.usage.map(|u| {
        if partial {
            json!({"promptTokenCount": u.input, "totalTokenCount": u.input})
        } else {
            json!({"promptTokenCount": u.input, "candidatesTokenCount": u.output, "totalTokenCount": u.input + u.output})
        }
    })
}

fn call_parts(turn: &ResolvedTurn) -> Vec<Value> {
    turn.calls
        .iter()
        .map(|c| {
            // Gemini's args are an object; a scripted raw text that is no JSON goes as a string.
            let args: Value = serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!(c.arguments));
            let mut call = json!({"name": c.name, "args": args});
            // Gemini gives no ids; a scripted one is sent, as newer models do.
            if let Some(id) = &c.id {
                call["id"] = json!(id);
            }
            json!({"functionCall": call})
        })
        .collect()
}

fn chunk(parts: Option<Vec<Value>>, finish: Option<&str>, usage: Option<Value>, model: &str, id: &str) -> Value {
    let mut candidate = json!({"index": 0});
    if let Some(parts) = parts {
        candidate["content"] = json!({"parts": parts, "role": "model"});
    }
    if let Some(f) = finish {
        candidate["finishReason"] = json!(f);
    }
    let mut c = json!({"candidates": [candidate], "modelVersion": model, "responseId": id});
    if let Some(u) = usage {
        c["usageMetadata"] = u;
    }
    c
}

fn prompt_blocked(turn: &ResolvedTurn, model: &str, id: &str) -> Value {
    let mut c = json!({"promptFeedback": {"blockReason": "SAFETY"}, "modelVersion": model, "responseId": id});
    if let Some(u) = turn.usage {
        c["usageMetadata"] = json!({"promptTokenCount": u.input, "totalTokenCount": u.input});
    }
    c
}

/// The streamed chunks, each with whether it carries content: one per text piece, one with
/// every call (Gemini sends a turn's calls whole, together), and a last one with the finish
/// reason and the full usage. A refused prompt is one chunk with `promptFeedback.blockReason`.
pub fn stream_chunks(turn: &ResolvedTurn, model: &str, id: &str) -> Vec<(Value, bool)> {
    if turn.finish == MockFinish::PromptFiltered {
        return vec![(prompt_blocked(turn, model, id), false)];
    }
    let mut chunks = Vec::new();
    for piece in turn.text_pieces() {
        chunks.push((chunk(Some(vec![json!({"text": piece})]), None, usage(turn, true), model, id), true));
    }
    if !turn.calls.is_empty() {
        chunks.push((chunk(Some(call_parts(turn)), None, usage(turn, true), model, id), true));
    }
    let filtered = turn.finish == MockFinish::ContentFilter;
    let last = (!filtered).then(|| vec![json!({"text": ""})]);
    chunks.push((chunk(last, Some(finish_reason(turn.finish)), usage(turn, false), model, id), false));
    chunks
}

/// The chunks as SSE frames, with the CRLF line ends the real service uses.
pub fn stream_frames(turn: &ResolvedTurn, model: &str, id: &str) -> Vec<Frame> {
    stream_chunks(turn, model, id)
        .into_iter()
        .map(|(c, content)| {
            let frame = Frame::crlf_data(&c);
            if content { frame.content() } else { frame }
        })
        .collect()
}

/// The whole `generateContent` answer.
pub fn whole(turn: &ResolvedTurn, model: &str, id: &str) -> Value {
    if turn.finish == MockFinish::PromptFiltered {
        return prompt_blocked(turn, model, id);
    }
    let mut parts = Vec::new();
    if !turn.text.is_empty() && turn.finish != MockFinish::ContentFilter {
        parts.push(json!({"text": turn.text}));
    }
    parts.extend(call_parts(turn));
    chunk((!parts.is_empty()).then_some(parts), Some(finish_reason(turn.finish)), usage(turn, false), model, id)
}

/// Google's error envelope for an HTTP status.
pub fn error_body(status: u16) -> Value {
    let (name, message) = match status {
        400 => ("INVALID_ARGUMENT", "Request contains an invalid argument. (mock)"),
        401 => ("UNAUTHENTICATED", "Request had invalid authentication credentials. (mock)"),
        403 => ("PERMISSION_DENIED", "Method doesn't allow unregistered callers. (mock)"),
        404 => ("NOT_FOUND", "models/x is not found for API version v1beta. (mock)"),
        429 => ("RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota). (mock)"),
        503 => ("UNAVAILABLE", "The model is overloaded. Please try again later. (mock)"),
        504 => ("DEADLINE_EXCEEDED", "The request timed out. (mock)"),
        500..=599 => ("INTERNAL", "An internal error has occurred. (mock)"),
        _ => ("FAILED_PRECONDITION", "Precondition check failed. (mock)"),
    };
    let mut body = json!({"error": {"code": status, "message": message, "status": name}});
    if status == 429 {
        // Google says when to come back in the body, not in a Retry-After header.
        body["error"]["details"] = json!([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}]);
    }
    body
}

/// What Google answers a key it does not know: `400`, reason `API_KEY_INVALID` (not a 401).
/// The mock quotes the key back, as a provider's answer can, so callers' redaction is tested.
pub fn refused_key(key: &str) -> Value {
    json!({"error": {"code": 400, "message": format!("API key not valid: {key} (mock). Please pass a valid API key."),
        "status": "INVALID_ARGUMENT",
        "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                     "domain": "googleapis.com", "metadata": {"service": "generativelanguage.googleapis.com"}}]}})
}
