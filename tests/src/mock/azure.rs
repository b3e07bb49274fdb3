//! The Azure OpenAI Chat Completions wire format: OpenAI's chunks after a leading
//! prompt-filter chunk, the whole completion with its filter results, Azure's error envelope
//! and its `400 content_filter` refusal of a prompt.

use serde_json::{Value, json};

use super::Frame;
use super::openai;
use super::script::ResolvedTurn;

fn filter_results() -> Value {
    let safe = json!({"filtered": false, "severity": "safe"});
    json!({"hate": safe, "self_harm": safe, "sexual": safe, "violence": safe})
}

/// The streamed answer: Azure's prompt-filter chunk (empty id and model), then OpenAI's.
pub fn stream_frames(turn: &ResolvedTurn, model: &str, id: &str, created: u64, include_usage: bool) -> Vec<Frame> {
    let filter = json!({"choices": [], "created": 0, "id": "", "model": "", "object": "",
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": filter_results()}]});
    let mut frames = vec![Frame::data(&filter)];
    frames.extend(openai::stream_frames(turn, model, id, created, include_usage));
    frames
}

/// The whole answer when the request did not ask for a stream.
pub fn completion(turn: &ResolvedTurn, model: &str, id: &str, created: u64) -> Value {
    let mut body = openai::completion(turn, model, id, created);
    body["prompt_filter_results"] = json!([{"prompt_index": 0, "content_filter_results": filter_results()}]);
    body
}

/// Azure's error envelope for an HTTP status.
pub fn error_body(status: u16) -> Value {
    let message = match status {
        401 => "Access denied due to invalid subscription key or wrong API endpoint. (mock)",
        404 => "The API deployment for this resource does not exist. (mock)",
        429 => "Requests to the ChatCompletions_Create Operation have exceeded token rate limit. (mock)",
        500..=599 => "The server had an error while processing your request. (mock)",
        _ => "Invalid request. (mock)",
    };
    json!({"error": {"code": status.to_string(), "message": message}})
}

/// A key Azure does not accept; the mock quotes it back so callers' redaction is tested.
pub fn refused_key(key: &str) -> Value {
    json!({"error": {"code": "401", "message": format!("Access denied due to invalid subscription key {key} (mock).")}})
}

/// Azure's refusal of a prompt its content filter flagged.
pub fn prompt_filtered() -> Value {
    json!({"error": {"message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. (mock)",
        "type": null, "param": "prompt", "code": "content_filter", "status": 400,
        "innererror": {"code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {"hate": {"filtered": false, "severity": "safe"}, "jailbreak": {"filtered": false, "detected": false},
                "self_harm": {"filtered": false, "severity": "safe"}, "sexual": {"filtered": false, "severity": "safe"},
                "violence": {"filtered": true, "severity": "high"}}}}})
}
