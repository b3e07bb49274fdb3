//! The OpenAI Responses API wire format: named `response.*` SSE events with sequence
//! numbers, the whole `response` object, and (shared with Chat Completions) OpenAI's error
//! envelope.

use serde_json::{Value, json};

use super::Frame;
use super::script::{MockFinish, ResolvedTurn, fragments};

/// Default call id prefix (the `call_id` a `function_call_output` answers).
pub const CALL_PREFIX: &str = "call_";

/// The response's status and `incomplete_details.reason` for a finish.
fn status(finish: MockFinish) -> (&'static str, Option<&'static str>) {
    match finish {
        MockFinish::Stop | MockFinish::ToolCalls => ("completed", None),
        MockFinish::Length => ("incomplete", Some("max_output_tokens")),
        MockFinish::ContentFilter | MockFinish::PromptFiltered => ("incomplete", Some("content_filter")),
    }
}

fn usage(turn: &ResolvedTurn) -> Value {
    turn.usage.map_or(Value::Null, |u| {
        json!({"input_tokens": u.input, "input_tokens_details": {"cached_tokens": 0},
               "output_tokens": u.output, "output_tokens_details": {"reasoning_tokens": 0},
               "total_tokens": u.input + u.output})
    })
}

/// The `response` object; `status` and the rest as given.
fn response(
    id: &str,
    model: &str,
    created: u64,
    status: &str,
    output: Vec<Value>,
    usage: Value,
    incomplete: Option<&str>,
) -> Value {
    json!({
        "id": id, "object": "response", "created_at": created, "status": status, "error": null,
        "incomplete_details": incomplete.map(|reason| json!({"reason": reason})),
        "model": model, "output": output, "parallel_tool_calls": true, "store": false,
        "text": {"format": {"type": "text"}}, "tool_choice": "auto", "usage": usage,
    })
}

/// The finished output items of a turn: a message when it has text, a `function_call` per call.
fn output_items(turn: &ResolvedTurn, id: &str, item_status: &str) -> Vec<Value> {
    let mut items = Vec::new();
    if !turn.text.is_empty() {
        items.push(json!({"id": format!("msg_{id}"), "type": "message", "status": item_status, "role": "assistant",
                          "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": turn.text}]}));
    }
    for call in &turn.calls {
        items.push(json!({"id": format!("fc_{}", call.number), "type": "function_call", "status": "completed",
                          "arguments": call.arguments, "call_id": call.id_or(CALL_PREFIX), "name": call.name}));
    }
    items
}

/// The streamed answer: `response.created`, `response.in_progress`, a message item with its
/// text deltas when there is text, one `function_call` item per call with its argument
/// deltas, then `response.completed` (or `response.incomplete` for a length or
/// content-filter finish). A turn without usage carries `usage: null`.
pub fn stream_frames(turn: &ResolvedTurn, model: &str, id: &str, created: u64) -> Vec<Frame> {
    let (status, incomplete) = status(turn.finish);
    let item_status = if status == "completed" { "completed" } else { "incomplete" };
    let started = response(id, model, created, "in_progress", Vec::new(), Value::Null, None);
    // (payload, carries content)
    let mut events: Vec<(Value, bool)> = vec![
        (json!({"type": "response.created", "response": started}), false),
        (json!({"type": "response.in_progress", "response": started}), false),
    ];
    let done = output_items(turn, id, item_status);
    let mut index = 0;
    if !turn.text.is_empty() {
        let item_id = format!("msg_{id}");
        events.push((
            json!({"type": "response.output_item.added", "output_index": index,
            "item": {"id": item_id, "type": "message", "status": "in_progress", "content": [], "role": "assistant"}}),
            false,
        ));
        events.push((
            json!({"type": "response.content_part.added", "item_id": item_id, "output_index": index, "content_index": 0,
            "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}}),
            false,
        ));
        for piece in turn.text_pieces() {
            events.push((
                json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": index,
                "content_index": 0, "delta": piece, "logprobs": []}),
                true,
            ));
        }
        events.push((
            json!({"type": "response.output_text.done", "item_id": item_id, "output_index": index,
            "content_index": 0, "text": turn.text, "logprobs": []}),
            false,
        ));
        events.push((
            json!({"type": "response.content_part.done", "item_id": item_id, "output_index": index, "content_index": 0,
            "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": turn.text}}),
            false,
        ));
        events.push((json!({"type": "response.output_item.done", "output_index": index, "item": done[0]}), false));
        index += 1;
    }
    for call in &turn.calls {
        let item_id = format!("fc_{}", call.number);
        events.push((
            json!({"type": "response.output_item.added", "output_index": index,
            "item": {"id": item_id, "type": "function_call", "status": "in_progress", "arguments": "",
                     "call_id": call.id_or(CALL_PREFIX), "name": call.name}}),
            true,
        ));
        for fragment in fragments(&call.arguments) {
            events.push((
                json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
                "output_index": index, "delta": fragment}),
                true,
            ));
        }
        events.push((
            json!({"type": "response.function_call_arguments.done", "item_id": item_id,
            "output_index": index, "arguments": call.arguments}),
            false,
        ));
        events.push((json!({"type": "response.output_item.done", "output_index": index, "item": done[index]}), false));
        index += 1;
    }
    let terminal = if status == "completed" { "response.completed" } else { "response.incomplete" };
    let finished = response(id, model, created, status, done, usage(turn), incomplete);
    events.push((json!({"type": terminal, "response": finished}), false));
    events
        .into_iter()
        .enumerate()
        .map(|(n, (mut payload, content))| {
            payload["sequence_number"] = json!(n);
            let name = payload["type"].as_str().unwrap_or_default().to_owned();
            let frame = Frame::event(&name, &payload);
            if content { frame.content() } else { frame }
        })
        .collect()
}

/// The whole answer when the request did not ask for a stream.
pub fn whole(turn: &ResolvedTurn, model: &str, id: &str, created: u64) -> Value {
    let (status, incomplete) = status(turn.finish);
    let item_status = if status == "completed" { "completed" } else { "incomplete" };
    response(id, model, created, status, output_items(turn, id, item_status), usage(turn), incomplete)
}
