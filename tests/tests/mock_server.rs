//! The mock model server speaks both wire formats the way the real services do.

// Test helpers outside #[test] functions may fail loudly too (clippy.toml covers only the tests).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tracon_tests::mock::{MockConfig, MockFinish, MockServer, MockTurn};

/// One parsed SSE frame: the `event:` name (if any) and the `data:` payload.
#[derive(Debug)]
struct Sse {
    event: Option<String>,
    data: String,
}

impl Sse {
    fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("frame is not JSON ({e}): {}", self.data))
    }
}

fn parse_sse(text: &str) -> Vec<Sse> {
    assert!(text.ends_with("\n\n"), "an SSE body ends with a blank line: {text:?}");
    parse_sse_prefix(text)
}

/// The complete frames at the start of a possibly unfinished SSE body.
fn parse_sse_prefix(text: &str) -> Vec<Sse> {
    let complete = text.rfind("\n\n").map_or("", |end| &text[..end]);
    complete
        .split("\n\n")
        .filter(|f| !f.is_empty())
        .map(|frame| {
            let mut event = None;
            let mut data = Vec::new();
            for line in frame.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = Some(e.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push(d);
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            Sse { event, data: data.join("\n") }
        })
        .collect()
}

async fn server() -> MockServer {
    MockServer::start(MockConfig::default()).await.unwrap()
}

fn openai_body(model: &str, messages: Value) -> Value {
    json!({"model": model, "messages": messages, "stream": true, "stream_options": {"include_usage": true}})
}

async fn post_openai(mock: &MockServer, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", mock.base_url()))
        .bearer_auth("test-key")
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn post_anthropic(mock: &MockServer, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/messages", mock.base_url()))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

fn anthropic_body(model: &str, messages: Value) -> Value {
    json!({"model": model, "max_tokens": 256, "messages": messages, "stream": true})
}

fn openai_text(frames: &[Sse]) -> String {
    frames
        .iter()
        .filter(|f| f.data != "[DONE]")
        .filter_map(|f| f.json().pointer("/choices/0/delta/content").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn openai_streams_text_in_word_pieces_then_finish_usage_and_done() {
    let mock = server().await;
    mock.script("gpt-test", vec![MockTurn::text("The order shipped on Monday.").with_usage(30, 7)]);
    let response = post_openai(&mock, &openai_body("gpt-test", json!([{"role": "user", "content": "hi"}]))).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let frames = parse_sse(&response.text().await.unwrap());

    assert!(frames.iter().all(|f| f.event.is_none()), "OpenAI frames are unnamed");
    assert_eq!(frames.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = frames[..frames.len() - 1].iter().map(Sse::json).collect();
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], "gpt-test");
        assert!(c["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert!(c["created"].is_u64());
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let pieces: Vec<&str> =
        chunks.iter().filter_map(|c| c.pointer("/choices/0/delta/content").and_then(Value::as_str)).collect();
    assert_eq!(pieces, ["", "The ", "order ", "shipped ", "on ", "Monday."]);
    assert_eq!(openai_text(&frames), "The order shipped on Monday.");

    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["delta"], json!({}));
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"], json!({"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}));
}

#[tokio::test]
async fn openai_usage_chunk_is_left_out_when_not_asked_for_or_when_the_turn_has_none() {
    let mock = server().await;
    mock.script("no-usage", vec![MockTurn::text("hi").without_usage()]);
    let frames = parse_sse(&post_openai(&mock, &openai_body("no-usage", json!([]))).await.text().await.unwrap());
    assert!(frames.iter().filter(|f| f.data != "[DONE]").all(|f| f.json()["usage"].is_null()));

    let mut body = openai_body("default-model", json!([]));
    body["stream_options"]["include_usage"] = json!(false);
    let frames = parse_sse(&post_openai(&mock, &body).await.text().await.unwrap());
    assert!(frames.iter().filter(|f| f.data != "[DONE]").all(|f| f.json().get("usage").is_none()));
    assert_eq!(openai_text(&frames), "Hello from the mock model.");
}

#[tokio::test]
async fn openai_streams_tool_calls_as_a_header_then_argument_fragments() {
    let mock = server().await;
    mock.script(
        "tools",
        vec![
            MockTurn::tool_call("get_weather", json!({"city": "Paris", "unit": "celsius"}))
                .and_raw_tool_call("lookup", "{not json")
                .with_usage(40, 12),
        ],
    );
    let frames = parse_sse(&post_openai(&mock, &openai_body("tools", json!([]))).await.text().await.unwrap());
    let chunks: Vec<Value> = frames.iter().filter(|f| f.data != "[DONE]").map(Sse::json).collect();

    for (index, id, name, arguments) in [
        (0, "call_1", "get_weather", json!({"city": "Paris", "unit": "celsius"}).to_string()),
        (1, "call_2", "lookup", "{not json".to_owned()),
    ] {
        let parts: Vec<&Value> = chunks
            .iter()
            .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0"))
            .filter(|t| t["index"] == index)
            .collect();
        assert_eq!(parts[0]["id"], id);
        assert_eq!(parts[0]["type"], "function");
        assert_eq!(parts[0]["function"], json!({"name": name, "arguments": ""}));
        let fragments: Vec<&str> = parts[1..].iter().map(|p| p["function"]["arguments"].as_str().unwrap()).collect();
        assert!(fragments.len() >= 2, "arguments arrive in fragments: {fragments:?}");
        assert!(parts[1..].iter().all(|p| p.get("id").is_none() && p["function"].get("name").is_none()));
        assert_eq!(fragments.concat(), arguments);
    }
    let finish = chunks.iter().find_map(|c| c.pointer("/choices/0/finish_reason").and_then(Value::as_str));
    assert_eq!(finish, Some("tool_calls"));
}

#[tokio::test]
async fn openai_without_stream_answers_a_whole_completion() {
    let mock = server().await;
    mock.script("whole", vec![MockTurn::text("Done.").and_tool_call("t", json!({"a": 1})).with_usage(5, 2)]);
    let mut body = openai_body("whole", json!([]));
    body.as_object_mut().unwrap().remove("stream");
    let response = post_openai(&mock, &body).await;
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], "Done.");
    assert_eq!(v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], r#"{"a":1}"#);
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(v["usage"]["total_tokens"], 7);
}

#[tokio::test]
async fn anthropic_streams_named_events_in_the_real_order() {
    let mock = server().await;
    mock.script(
        "claude-test",
        vec![MockTurn::text("Let me check.").and_tool_call("get_weather", json!({"city": "Paris"})).with_usage(50, 20)],
    );
    let response =
        post_anthropic(&mock, &anthropic_body("claude-test", json!([{"role": "user", "content": "x"}]))).await;
    assert_eq!(response.status(), 200);
    let frames = parse_sse(&response.text().await.unwrap());
    for f in &frames {
        assert_eq!(Some(f.json()["type"].as_str().unwrap()), f.event.as_deref(), "event name matches data.type");
    }
    let names: Vec<&str> = frames.iter().map(|f| f.event.as_deref().unwrap()).collect();
    let expected_head = ["message_start", "ping", "content_block_start"];
    assert_eq!(names[..3], expected_head);
    assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"]);

    let start = frames[0].json();
    assert_eq!(start["message"]["model"], "claude-test");
    assert!(start["message"]["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(start["message"]["usage"], json!({"input_tokens": 50, "output_tokens": 1}));

    // Block 0 is the text, block 1 the tool use; each opens, streams, closes in turn.
    let blocks: Vec<(String, u64)> = frames
        .iter()
        .filter(|f| f.event.as_deref().unwrap().starts_with("content_block"))
        .map(|f| (f.event.clone().unwrap(), f.json()["index"].as_u64().unwrap()))
        .collect();
    let opened: Vec<u64> = blocks.iter().filter(|(e, _)| e == "content_block_start").map(|(_, i)| *i).collect();
    assert_eq!(opened, [0, 1]);
    let mut open = None;
    for (event, index) in &blocks {
        match event.as_str() {
            "content_block_start" => assert_eq!(open.replace(*index), None),
            "content_block_delta" => assert_eq!(open, Some(*index)),
            "content_block_stop" => assert_eq!(open.take(), Some(*index)),
            other => panic!("{other}"),
        }
    }
    let deltas: Vec<Value> =
        frames.iter().filter(|f| f.event.as_deref() == Some("content_block_delta")).map(|f| f.json()).collect();
    let text: String = deltas
        .iter()
        .filter(|d| d["delta"]["type"] == "text_delta")
        .map(|d| d["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Let me check.");
    let json_parts: Vec<&str> = deltas
        .iter()
        .filter(|d| d["delta"]["type"] == "input_json_delta")
        .map(|d| d["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert!(json_parts.len() >= 2);
    assert_eq!(json_parts.concat(), r#"{"city":"Paris"}"#);
    let tool_start = frames.iter().find(|f| f.json()["content_block"]["type"] == "tool_use").unwrap().json();
    assert_eq!(tool_start["content_block"]["id"], "toolu_1");
    assert_eq!(tool_start["content_block"]["name"], "get_weather");

    let delta = frames[frames.len() - 2].json();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 20);
}

#[tokio::test]
async fn anthropic_maps_finish_reasons_and_answers_whole_messages() {
    let mock = server().await;
    for (finish, wire) in
        [(MockFinish::Stop, "end_turn"), (MockFinish::Length, "max_tokens"), (MockFinish::ContentFilter, "refusal")]
    {
        mock.script("c", vec![MockTurn::text("a b").with_finish(finish)]);
        let mut body = anthropic_body("c", json!([]));
        body["stream"] = json!(false);
        let v: Value = post_anthropic(&mock, &body).await.json().await.unwrap();
        assert_eq!(v["type"], "message");
        assert_eq!(v["content"], json!([{"type": "text", "text": "a b"}]));
        assert_eq!(v["stop_reason"], wire);
        assert_eq!(v["usage"], json!({"input_tokens": 12, "output_tokens": 3}));
    }
}

#[tokio::test]
async fn anthropic_requires_its_key_and_version_headers() {
    let mock = server().await;
    let response = reqwest::Client::new()
        .post(format!("{}/v1/messages", mock.base_url()))
        .header("x-api-key", "k")
        .json(&anthropic_body("m", json!([])))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "authentication_error");
}

#[tokio::test]
async fn the_turn_is_the_number_of_assistant_messages_and_the_last_one_repeats() {
    let mock = server().await;
    let turns = vec![MockTurn::text("first"), MockTurn::text("second"), MockTurn::text("third")];
    mock.script("walk", turns.clone());
    mock.script("claude-walk", turns);
    let mut openai_messages = vec![json!({"role": "user", "content": "q"})];
    let mut anthropic_messages = vec![json!({"role": "user", "content": "q"})];
    for expected in ["first", "second", "third", "third"] {
        let frames =
            parse_sse(&post_openai(&mock, &openai_body("walk", json!(openai_messages))).await.text().await.unwrap());
        assert_eq!(openai_text(&frames), expected);
        let v: Value =
            post_anthropic(&mock, &json!({"model": "claude-walk", "max_tokens": 10, "messages": anthropic_messages}))
                .await
                .json()
                .await
                .unwrap();
        assert_eq!(v["content"][0]["text"], expected);
        openai_messages.push(json!({"role": "assistant", "content": expected}));
        openai_messages.push(json!({"role": "user", "content": "more"}));
        anthropic_messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": expected}]}));
        anthropic_messages.push(json!({"role": "user", "content": "more"}));
    }
}

#[tokio::test]
async fn concurrent_conversations_each_walk_the_script_from_the_start() {
    let mock = server().await;
    mock.script("shared", vec![MockTurn::tool_call("t", json!({})), MockTurn::text("done")]);
    let fresh = openai_body("shared", json!([{"role": "user", "content": "q"}]));
    let (a, b) = tokio::join!(post_openai(&mock, &fresh), post_openai(&mock, &fresh));
    for response in [a, b] {
        let frames = parse_sse(&response.text().await.unwrap());
        assert!(frames.iter().any(|f| f.data.contains("\"tool_calls\"")), "both conversations get turn 0");
    }
}

#[tokio::test]
async fn status_turns_answer_with_each_formats_error_envelope() {
    let mock = server().await;
    for (status, openai_type, anthropic_type) in [
        (401, "invalid_request_error", "authentication_error"),
        (403, "invalid_request_error", "permission_error"),
        (429, "requests", "rate_limit_error"),
        (500, "server_error", "api_error"),
        (503, "server_error", "overloaded_error"),
    ] {
        mock.script("err", vec![MockTurn::status(status)]);
        let response = post_openai(&mock, &openai_body("err", json!([]))).await;
        assert_eq!(response.status(), status);
        let v: Value = response.json().await.unwrap();
        assert_eq!(v["error"]["type"], openai_type);
        assert!(v["error"]["message"].is_string());
        assert!(v["error"]["param"].is_null());
        assert!(v["error"].get("code").is_some());

        let response = post_anthropic(&mock, &anthropic_body("err", json!([]))).await;
        assert_eq!(response.status(), status);
        let v: Value = response.json().await.unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], anthropic_type);
        assert!(v["error"]["message"].is_string());
    }
}

#[tokio::test]
async fn a_hanging_turn_never_answers_so_the_client_times_out() {
    let mock = server().await;
    mock.script("hang", vec![MockTurn::hang()]);
    let client = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
    let err = client
        .post(format!("{}/v1/chat/completions", mock.base_url()))
        .json(&openai_body("hang", json!([])))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(mock.requests("hang").len(), 1, "the request was accepted");
}

#[tokio::test]
async fn hang_after_chunks_sends_that_many_content_chunks_then_stalls_open() {
    let mock = server().await;
    mock.script("stall", vec![MockTurn::text("one two three four").hang_after_chunks(2)]);
    let response = post_openai(&mock, &openai_body("stall", json!([]))).await;
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut text = String::new();
    // Read until both content chunks are in (however long that takes) ...
    while openai_text(&parse_sse_prefix(&text)).len() < "one two ".len() {
        let chunk = body.next().await.expect("the stream closed early").unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    // ... then nothing more comes, and the stream stays open.
    match tokio::time::timeout(Duration::from_millis(300), body.next()).await {
        Err(_) => {}
        Ok(next) => panic!("expected a stall after two chunks, got {next:?} after {text:?}"),
    }
    assert_eq!(openai_text(&parse_sse(&text)), "one two ");
    assert!(!text.contains("finish_reason\":\"stop"));
}

#[tokio::test]
async fn every_request_is_recorded_with_header_presence_but_no_header_value() {
    let mock = server().await;
    post_openai(&mock, &openai_body("rec", json!([{"role": "user", "content": "hello"}]))).await.text().await.unwrap();
    reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", mock.base_url()))
        .json(&openai_body("rec", json!([])))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    post_anthropic(&mock, &anthropic_body("rec", json!([]))).await.text().await.unwrap();

    let recorded = mock.requests("rec");
    assert_eq!(recorded.len(), 3);
    assert_eq!(recorded[0]["path"], "/v1/chat/completions");
    assert_eq!(recorded[0]["body"]["messages"][0]["content"], "hello");
    assert_eq!(recorded[0]["hasAuthorization"], true);
    assert_eq!(recorded[1]["hasAuthorization"], false);
    assert_eq!(recorded[2]["path"], "/v1/messages");
    assert_eq!(recorded[2]["hasApiKey"], true);
    assert!(!serde_json::to_string(&recorded).unwrap().contains("test-key"));
    assert!(mock.requests("other").is_empty());

    let over_http: Value =
        reqwest::get(format!("{}/_mock/requests/rec", mock.base_url())).await.unwrap().json().await.unwrap();
    assert_eq!(over_http, Value::Array(recorded));
}

#[tokio::test]
async fn scripts_register_and_delete_over_http() {
    let mock = server().await;
    let client = reqwest::Client::new();
    assert_eq!(reqwest::get(format!("{}/_mock/health", mock.base_url())).await.unwrap().status(), 200);
    let url = format!("{}/_mock/scripts/http-model", mock.base_url());
    let response = client
        .post(&url)
        .json(&json!({"turns": [{"text": "from http", "usage": {"input": 1, "output": 2}, "chunkDelayMs": 1}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let frames = parse_sse(&post_openai(&mock, &openai_body("http-model", json!([]))).await.text().await.unwrap());
    assert_eq!(openai_text(&frames), "from http");

    let bad = client.post(&url).json(&json!({"turns": [{"txt": "typo"}]})).send().await.unwrap();
    assert_eq!(bad.status(), 400);

    assert_eq!(client.delete(&url).send().await.unwrap().status(), 204);
    let frames = parse_sse(&post_openai(&mock, &openai_body("http-model", json!([]))).await.text().await.unwrap());
    assert_eq!(openai_text(&frames), "Hello from the mock model.");
    let usage = frames.iter().rev().nth(1).unwrap().json();
    assert_eq!(usage["usage"]["prompt_tokens"], 12);
    assert_eq!(usage["usage"]["completion_tokens"], 6);
}

#[cfg(unix)]
#[tokio::test]
async fn the_binary_prints_its_address_and_stops_on_sigterm() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let mut child = Command::new(env!("CARGO_BIN_EXE_mock-model")).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.trim().strip_prefix("mock-model listening on ").unwrap_or_else(|| panic!("{line:?}")).to_owned();
    assert!(url.starts_with("http://127.0.0.1:"));
    assert_eq!(reqwest::get(format!("{url}/_mock/health")).await.unwrap().status(), 200);

    let killed = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn global_latency_and_chunk_delay_apply_without_changing_the_answer() {
    let mock = MockServer::start(MockConfig { latency_ms: 2, chunk_delay_ms: 1 }).await.unwrap();
    let frames = parse_sse(&post_openai(&mock, &openai_body("slow", json!([]))).await.text().await.unwrap());
    assert_eq!(openai_text(&frames), "Hello from the mock model.");
    let v: Value =
        post_anthropic(&mock, &json!({"model": "slow", "max_tokens": 5, "messages": []})).await.json().await.unwrap();
    assert_eq!(v["content"][0]["text"], "Hello from the mock model.");
}

#[tokio::test]
async fn responses_streams_named_events_in_the_real_order_with_sequence_numbers() {
    let mock = server().await;
    mock.script(
        "gpt-r",
        vec![MockTurn::text("Checking now.").and_tool_call("lookup", json!({"q": "4182"})).with_usage(30, 9)],
    );
    let body = json!({"model": "gpt-r", "input": [{"role": "user", "content": "hi"}], "stream": true});
    let response =
        reqwest::Client::new().post(format!("{}/v1/responses", mock.base_url())).json(&body).send().await.unwrap();
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let frames = parse_sse(&response.text().await.unwrap());
    let payloads: Vec<Value> = frames.iter().map(Sse::json).collect();
    for (n, (frame, payload)) in frames.iter().zip(&payloads).enumerate() {
        assert_eq!(frame.event.as_deref(), payload["type"].as_str(), "the event name repeats the type");
        assert_eq!(payload["sequence_number"], n);
    }
    let kinds: Vec<&str> = payloads.iter().map(|p| p["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(payloads[9]["item"]["call_id"], "call_1");
    let arguments: String = payloads[10..12].iter().map(|p| p["delta"].as_str().unwrap()).collect();
    assert_eq!(arguments, r#"{"q":"4182"}"#);
    let done = &payloads[14]["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["usage"]["input_tokens"], 30);
    assert_eq!(done["usage"]["output_tokens"], 9);
    assert_eq!(done["output"].as_array().unwrap().len(), 2);

    // A length finish is an incomplete response; without `stream` the whole response.
    mock.script("gpt-r", vec![MockTurn::text("Cut").with_finish(MockFinish::Length)]);
    let whole: Value = reqwest::Client::new()
        .post(format!("{}/v1/responses", mock.base_url()))
        .json(&json!({"model": "gpt-r", "input": "hi"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(whole["status"], "incomplete");
    assert_eq!(whole["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(whole["output"][0]["content"][0]["text"], "Cut");
}

#[tokio::test]
async fn google_streams_crlf_chunks_and_wants_a_key() {
    let mock = server().await;
    mock.script("gemini-t", vec![MockTurn::text("Shipped Monday.").with_usage(20, 3)]);
    let url = |action: &str, query: &str| format!("{}/v1beta/models/gemini-t:{action}{query}", mock.base_url());
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let post = |url: String, key: bool| {
        let builder = reqwest::Client::new().post(url).json(&body);
        if key { builder.header("x-goog-api-key", "AIza-test") } else { builder }
    };

    let text = post(url("streamGenerateContent", "?alt=sse"), true).send().await.unwrap().text().await.unwrap();
    assert!(text.ends_with("\r\n\r\n") && !text.replace("\r\n", "").contains('\n'), "CRLF line ends: {text:?}");
    let chunks: Vec<Value> = parse_sse(&text.replace("\r\n", "\n")).iter().map(Sse::json).collect();
    assert_eq!(chunks.len(), 3);
    let pieces: Vec<&str> =
        chunks.iter().filter_map(|c| c.pointer("/candidates/0/content/parts/0/text").and_then(Value::as_str)).collect();
    assert_eq!(pieces, ["Shipped ", "Monday.", ""]);
    assert!(chunks.iter().all(|c| c["modelVersion"] == "gemini-t"));
    assert_eq!(chunks[0]["usageMetadata"], json!({"promptTokenCount": 20, "totalTokenCount": 20}));
    assert_eq!(chunks[2]["candidates"][0]["finishReason"], "STOP");
    assert_eq!(
        chunks[2]["usageMetadata"],
        json!({"promptTokenCount": 20, "candidatesTokenCount": 3, "totalTokenCount": 23})
    );

    // Without alt=sse: one JSON array of the same chunks; generateContent: the whole answer.
    let array: Value = post(url("streamGenerateContent", ""), true).send().await.unwrap().json().await.unwrap();
    assert_eq!(array.as_array().unwrap().len(), 3);
    let whole: Value = post(url("generateContent", ""), true).send().await.unwrap().json().await.unwrap();
    assert_eq!(whole["candidates"][0]["content"]["parts"], json!([{"text": "Shipped Monday."}]));

    // No key: 403; a key the script refuses: 400 API_KEY_INVALID; a safety stop: SAFETY.
    let refused = post(url("streamGenerateContent", "?alt=sse"), false).send().await.unwrap();
    assert_eq!(refused.status(), 403);
    assert_eq!(refused.json::<Value>().await.unwrap()["error"]["status"], "PERMISSION_DENIED");
    mock.script("gemini-t", vec![MockTurn::status(401)]);
    let bad_key = post(url("streamGenerateContent", "?alt=sse"), true).send().await.unwrap();
    assert_eq!(bad_key.status(), 400);
    assert_eq!(bad_key.json::<Value>().await.unwrap()["error"]["details"][0]["reason"], "API_KEY_INVALID");
    mock.script("gemini-t", vec![MockTurn::text("never").with_finish(MockFinish::PromptFiltered)]);
    let blocked: Value = post(url("generateContent", ""), true).send().await.unwrap().json().await.unwrap();
    assert_eq!(blocked["promptFeedback"]["blockReason"], "SAFETY");
    assert!(blocked.get("candidates").is_none());
}

#[tokio::test]
async fn azure_wants_its_key_and_api_version_and_streams_after_a_prompt_filter_chunk() {
    let mock = server().await;
    mock.script("prod", vec![MockTurn::text("Hi there.")]);
    let url = |query: &str| format!("{}/openai/deployments/prod/chat/completions{query}", mock.base_url());
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "stream": true, "stream_options": {"include_usage": true}});
    let post = |url: String, key: bool| {
        let builder = reqwest::Client::new().post(url).json(&body);
        if key { builder.header("api-key", "azure-test") } else { builder }
    };
    assert_eq!(post(url("?api-version=2024-10-21"), false).send().await.unwrap().status(), 401);
    assert_eq!(post(url(""), true).send().await.unwrap().status(), 404);

    let frames = parse_sse(&post(url("?api-version=2024-10-21"), true).send().await.unwrap().text().await.unwrap());
    let first = frames[0].json();
    assert_eq!((first["model"].clone(), first["choices"].clone()), (json!(""), json!([])));
    assert!(first["prompt_filter_results"].is_array());
    assert_eq!(frames[1].json()["model"], "prod");
    assert_eq!(openai_text(&frames[1..]), "Hi there.");

    mock.script("prod", vec![MockTurn::default().with_finish(MockFinish::PromptFiltered)]);
    let filtered = post(url("?api-version=2024-10-21"), true).send().await.unwrap();
    assert_eq!(filtered.status(), 400);
    assert_eq!(filtered.json::<Value>().await.unwrap()["error"]["code"], "content_filter");
}
