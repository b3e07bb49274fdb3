//! The OpenAI Chat Completions wire format: `chat.completion.chunk` SSE frames, the whole
//! `chat.completion` object, and OpenAI's error envelope.

use serde_json::{Value, json};

use super::Frame;
use super::script::{ResolvedTurn, fragments};

/// Default tool-call id prefix.
pub const CALL_PREFIX: &str = "call_";

/// The streamed answer: role chunk, content chunks, finish chunk, the usage chunk when the
/// client asked for it (`stream_options.include_usage`) and the turn has usage, `[DONE]`.
pub fn stream_frames(turn: &ResolvedTurn, model: &str, id: &str, created: u64, include_usage: bool) -> Vec<Frame> {
    let chunk = |choices: Value| {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_mock",
            "choices": choices,
        });
        // Like the real service: with include_usage every chunk carries `usage: null`
        // except the last one, which carries the numbers.
        if include_usage {
            c["usage"] = Value::Null;
        }
        c
    };
    let choice = |delta: Value| json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]);

    let mut frames = vec![Frame::data(&chunk(choice(json!({"role": "assistant", "content": "", "refusal": null}))))];
    for piece in turn.text_pieces() {
        frames.push(Frame::data(&chunk(choice(json!({"content": piece})))).content());
    }
    for (index, call) in turn.calls.iter().enumerate() {
        let head = json!({"tool_calls": [{
            "index": index,
            "id": call.id_or(CALL_PREFIX),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }]});
        frames.push(Frame::data(&chunk(choice(head))).content());
        for fragment in fragments(&call.arguments) {
            let delta = json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]});
            frames.push(Frame::data(&chunk(choice(delta))).content());
        }
    }
    let finish = json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": turn.finish.openai()}]);
    frames.push(Frame::data(&chunk(finish)));
    if include_usage && let Some(u) = turn.usage {
        let mut last = chunk(json!([]));
        last["usage"] = usage(u.input, u.output);
        frames.push(Frame::data(&last));
    }
    frames.push(Frame::raw_data("[DONE]"));
    frames
}

/// The whole answer when the request did not ask for a stream.
pub fn completion(turn: &ResolvedTurn, model: &str, id: &str, created: u64) -> Value {
    let content = if turn.text.is_empty() && !turn.calls.is_empty() { Value::Null } else { json!(turn.text) };
    let mut message = json!({"role": "assistant", "content": content, "refusal": null});
    if !turn.calls.is_empty() {
        message["tool_calls"] = turn
            .calls
            .iter()
            .map(|c| {
                json!({"id": c.id_or(CALL_PREFIX), "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
    }
    let mut body = json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_mock",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": turn.finish.openai()}],
    });
    if let Some(u) = turn.usage {
        body["usage"] = usage(u.input, u.output);
    }
    body
}

fn usage(input: u64, output: u64) -> Value {
    json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output})
}

/// OpenAI's error envelope for an HTTP status.
pub fn error_body(status: u16) -> Value {
    let (kind, code, message) = match status {
        401 => ("invalid_request_error", json!("invalid_api_key"), "Incorrect API key provided (mock)."),
        403 => ("invalid_request_error", json!("unsupported_country_region_territory"), "Request forbidden (mock)."),
        404 => ("invalid_request_error", json!("model_not_found"), "The model does not exist (mock)."),
        429 => ("requests", json!("rate_limit_exceeded"), "Rate limit reached for requests (mock)."),
        500..=599 => ("server_error", Value::Null, "The server had an error while processing your request (mock)."),
        _ => ("invalid_request_error", Value::Null, "Invalid request (mock)."),
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}
