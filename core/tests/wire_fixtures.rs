//! Recorded streaming transcripts (byte-exact SSE as the services send it, under
//! `tests/fixtures/`) through the stream parsers: each must yield exactly the
//! [`ModelEvent`]s a turn engine needs — whole tool calls, measured usage only, the right
//! finish reason, classified errors.

// Test helpers outside #[test] functions may fail loudly too (clippy.toml covers only the tests).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::path::Path;

use bytes::Bytes;
use eventsource_stream::{Event, Eventsource};
use futures::{StreamExt, stream};
use tracon_core::model::anthropic::MessagesStreamParser;
use tracon_core::model::google::GenerateStreamParser;
use tracon_core::model::openai::ChatStreamParser;
use tracon_core::model::openai_responses::ResponsesStreamParser;
use tracon_core::model::{FinishReason, ModelEvent, ProviderError, ProviderErrorKind, ReasoningBlock, ToolCall, Usage};

const FIXTURES: [&str; 18] = [
    "openai/text_with_usage.sse",
    "openai/two_tool_calls.sse",
    "openai/content_filter.sse",
    "openai/no_usage.sse",
    "anthropic/text.sse",
    "anthropic/tool_use.sse",
    "anthropic/thinking_tool_use.sse",
    "anthropic/refusal.sse",
    "anthropic/overloaded_error.sse",
    "openai-responses/text_with_usage.sse",
    "openai-responses/two_function_calls.sse",
    "openai-responses/incomplete_max_output_tokens.sse",
    "openai-responses/failed_server_error.sse",
    "google/text_with_usage.sse",
    "google/two_function_calls.sse",
    "google/safety_blocked_answer.sse",
    "google/prompt_blocked.sse",
    "azure/tool_call.sse",
];

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fixture's bytes, delivered in pieces of `piece` bytes, as SSE events.
async fn sse_in_pieces(name: &str, piece: usize) -> Vec<Event> {
    let pieces: Vec<Result<Bytes, Infallible>> =
        fixture(name).chunks(piece).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    stream::iter(pieces).eventsource().map(|e| e.unwrap_or_else(|e| panic!("{name}: {e}"))).collect().await
}

async fn sse(name: &str) -> Vec<Event> {
    sse_in_pieces(name, usize::MAX).await
}

type Parsed = Result<Vec<ModelEvent>, (Vec<ModelEvent>, ProviderError)>;

/// Everything `parser` yields from the transcript `name` (each event through `push`, then
/// `finish`), or the first error with what came before it.
async fn parse<P>(
    name: &str,
    mut parser: P,
    push: impl Fn(&mut P, &Event) -> Result<Vec<ModelEvent>, ProviderError>,
    finish: impl FnOnce(P) -> Result<Vec<ModelEvent>, ProviderError>,
) -> Parsed {
    let mut out = Vec::new();
    for event in sse(name).await {
        match push(&mut parser, &event) {
            Ok(events) => out.extend(events),
            Err(e) => return Err((out, e)),
        }
    }
    match finish(parser) {
        Ok(events) => out.extend(events),
        Err(e) => return Err((out, e)),
    }
    Ok(out)
}

/// Everything an OpenAI transcript yields, or the first error.
async fn openai(name: &str) -> Parsed {
    parse(name, ChatStreamParser::default(), |p, e| p.push(&e.data), ChatStreamParser::finish).await
}

/// Everything an Anthropic transcript yields, or the first error with what came before it.
async fn anthropic(name: &str) -> Parsed {
    parse(name, MessagesStreamParser::default(), |p, e| p.push(&e.event, &e.data), MessagesStreamParser::finish).await
}

/// Everything a Responses API transcript yields, or the first error with what came before it.
async fn responses(name: &str) -> Parsed {
    parse(name, ResponsesStreamParser::default(), |p, e| p.push(&e.event, &e.data), ResponsesStreamParser::finish).await
}

/// Everything a Gemini transcript yields (in a conversation with `earlier_calls` calls before
/// it), or the first error with what came before it.
async fn google(name: &str, earlier_calls: usize) -> Parsed {
    parse(name, GenerateStreamParser::new(earlier_calls), |p, e| p.push(&e.data), GenerateStreamParser::finish).await
}

fn deltas(pieces: &[&str]) -> Vec<ModelEvent> {
    pieces.iter().map(|p| ModelEvent::TextDelta((*p).to_owned())).collect()
}

fn call(id: &str, name: &str, arguments: &str) -> ModelEvent {
    ModelEvent::ToolCall(ToolCall { id: id.into(), name: name.into(), arguments: arguments.into() })
}

fn usage(input: u64, output: u64, cached: Option<u64>, reasoning: Option<u64>) -> ModelEvent {
    ModelEvent::Usage(Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: input + output,
        cached_input_tokens: cached,
        reasoning_tokens: reasoning,
    })
}

fn model(name: &str) -> ModelEvent {
    ModelEvent::Model(name.into())
}

#[tokio::test]
async fn every_fixture_is_well_formed_sse_and_splits_the_same_at_any_byte_boundary() {
    for name in FIXTURES {
        let bytes = fixture(name);
        let text = std::str::from_utf8(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Google ends its lines with CRLF, the others with LF; none mixes them.
        let blank = if name.starts_with("google/") { "\r\n\r\n" } else { "\n\n" };
        assert!(text.ends_with(blank), "{name}: frames end with a blank line");
        assert_eq!(text.contains('\r'), name.starts_with("google/"), "{name}");
        let whole = sse(name).await;
        assert_eq!(whole.len(), text.matches(blank).count(), "{name}: one event per frame");
        assert!(whole.iter().all(|e| !e.data.is_empty()), "{name}");
        if name.starts_with("anthropic/") || name.starts_with("openai-responses/") {
            // Named events whose name repeats the payload's `type`, as both APIs send them.
            for e in &whole {
                let v: serde_json::Value = serde_json::from_str(&e.data).unwrap();
                assert_eq!(v["type"], e.event.as_str(), "{name}");
            }
        }
        // Pieces of 5 bytes split the multi-byte characters in the fixtures too (and Google's
        // CRLF between its CR and its LF).
        assert_eq!(sse_in_pieces(name, 5).await, whole, "{name}");
    }
}

#[tokio::test]
async fn openai_text_with_usage_reports_cached_and_reasoning_tokens() {
    let events = openai("openai/text_with_usage.sse").await.unwrap();
    let mut expected = vec![model("o4-mini-2025-04-16")];
    expected.extend(deltas(&[
        "Your",
        " order",
        " #",
        "4182",
        " shipped",
        " on",
        " Monday",
        " —",
        " it",
        "\u{2019}s",
        " due",
        " Thursday",
        ".",
    ]));
    expected.push(usage(1342, 271, Some(1152), Some(256)));
    expected.push(ModelEvent::Finish(FinishReason::Stop));
    assert_eq!(events, expected);
    assert_eq!(ModelEvent::text_of(&events), "Your order #4182 shipped on Monday — it\u{2019}s due Thursday.");
}

#[tokio::test]
async fn openai_parallel_tool_calls_are_assembled_by_index_from_interleaved_fragments() {
    let events = openai("openai/two_tool_calls.sse").await.unwrap();
    assert_eq!(
        events,
        vec![
            model("gpt-4.1-2025-04-14"),
            call("call_Qm3xT9bLr2VfK8sWn1Yd0aZe", "get_order_status", r#"{"orderId":"4182"}"#),
            call("call_H7pLw4cN0sDq2RjX5uVb9eTk", "get_weather", r#"{"city":"Paris","unit":"celsius"}"#),
            usage(211, 58, Some(0), Some(0)),
            ModelEvent::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn openai_content_filter_keeps_the_partial_text_and_finishes_as_content_filter() {
    let events = openai("openai/content_filter.sse").await.unwrap();
    // Azure's leading prompt-filter chunk has an empty model: the real model comes next.
    let mut expected = vec![model("gpt-4o-2024-11-20")];
    expected.extend(deltas(&["Here", " is", " how", " the", " scene", " continues", ":"]));
    expected.push(usage(87, 9, Some(0), Some(0)));
    expected.push(ModelEvent::Finish(FinishReason::ContentFilter));
    assert_eq!(events, expected);
}

#[tokio::test]
async fn openai_compatible_server_without_usage_yields_no_usage_event() {
    let events = openai("openai/no_usage.sse").await.unwrap();
    let mut expected = vec![model("llama3.2:3b")];
    expected.extend(deltas(&["Paris", " is", " the", " capital", " of", " France", "."]));
    expected.push(ModelEvent::Finish(FinishReason::Stop));
    assert_eq!(events, expected);
    assert!(!events.iter().any(|e| matches!(e, ModelEvent::Usage(_))), "absent usage is never invented");
}

#[tokio::test]
async fn anthropic_text_counts_cache_reads_as_input_and_reports_them_as_cached() {
    let events = anthropic("anthropic/text.sse").await.unwrap();
    let mut expected = vec![model("claude-sonnet-4-20250514")];
    expected.extend(deltas(&["Your order", " #4182 shipped on Monday", " and should arrive", " by Thursday."]));
    // input = input_tokens 24 + cache creation 0 + cache read 2048.
    expected.push(usage(24 + 2048, 19, Some(2048), None));
    expected.push(ModelEvent::Finish(FinishReason::Stop));
    assert_eq!(events, expected);
}

#[tokio::test]
async fn anthropic_tool_use_assembles_the_input_json_from_its_fragments() {
    let events = anthropic("anthropic/tool_use.sse").await.unwrap();
    let mut expected = vec![model("claude-sonnet-4-20250514")];
    expected.extend(deltas(&["I'll check", " the weather", " in Paris for you."]));
    expected.push(call("toolu_01A9xZk3BqW7nE5vR2cYtLp4", "get_weather", r#"{"city": "Paris", "unit": "celsius"}"#));
    // message_delta repeats the input counts cumulatively; they must not be added twice.
    expected.push(usage(412, 71, Some(0), None));
    expected.push(ModelEvent::Finish(FinishReason::ToolCalls));
    assert_eq!(events, expected);
}

#[tokio::test]
async fn anthropic_thinking_block_is_kept_whole_with_its_signature_before_the_tool_call() {
    let events = anthropic("anthropic/thinking_tool_use.sse").await.unwrap();
    let thinking = ["The user wants order 4182.", " I should call get_order_status", " before answering."];
    let mut expected = vec![model("claude-sonnet-4-20250514")];
    expected.extend(thinking.iter().map(|t| ModelEvent::ReasoningDelta((*t).to_owned())));
    expected.push(ModelEvent::ReasoningBlock(ReasoningBlock {
        text: thinking.concat(),
        signature: Some(
            "EqQBCkgIBRABGAIiQJ3mZl0vXy8R4cK1pNqW7tH2aJ5sL9eF3gD6uB0zY4xV8nM1oQ7rT2wS5kC9jA3hG6fE0dB4iU8yP1lO7mN2qKEgzX3vR5tY9uW1sA7dFGgxjH2kL4nP6rT8vX0yIjB1c3d5e7f9g1h3j5k7m9n1p3r5t7v9x1z3"
                .to_owned(),
        ),
    }));
    expected.push(call("toolu_01Lx4Nc8Wq2Rv6Tb0Ym3Hd7S", "get_order_status", r#"{"orderId": "4182"}"#));
    expected.push(usage(530, 96, Some(0), None));
    expected.push(ModelEvent::Finish(FinishReason::ToolCalls));
    assert_eq!(events, expected);
    assert_eq!(ModelEvent::text_of(&events), "", "thinking never leaks into the answer text");
}

#[tokio::test]
async fn anthropic_refusal_finishes_as_content_filter() {
    let events = anthropic("anthropic/refusal.sse").await.unwrap();
    let mut expected = vec![model("claude-sonnet-4-20250514")];
    expected.extend(deltas(&["I can", "'t help with"]));
    expected.push(usage(61, 6, Some(0), None));
    expected.push(ModelEvent::Finish(FinishReason::ContentFilter));
    assert_eq!(events, expected);
}

#[tokio::test]
async fn anthropic_mid_stream_overloaded_error_is_a_retryable_server_error() {
    let (before, err) = anthropic("anthropic/overloaded_error.sse").await.unwrap_err();
    assert_eq!(before, vec![model("claude-sonnet-4-20250514"), ModelEvent::TextDelta("Let me".into())]);
    assert_eq!(err.kind, ProviderErrorKind::ServerError);
    assert_eq!(err.status, Some(529));
    assert!(err.is_retryable());
    assert!(err.detail.contains("overloaded_error"));
}

#[tokio::test]
async fn a_transcript_cut_before_its_end_is_a_transport_failure() {
    // The same bytes, minus the frames that close the stream.
    for (name, keep) in [
        ("openai/text_with_usage.sse", 5),
        ("anthropic/text.sse", 5),
        ("openai-responses/text_with_usage.sse", 12),
        ("azure/tool_call.sse", 5),
        ("google/text_with_usage.sse", 2),
    ] {
        let events = sse(name).await;
        let err = if name.starts_with("openai/") || name.starts_with("azure/") {
            let mut p = ChatStreamParser::default();
            for e in &events[..keep] {
                p.push(&e.data).unwrap();
            }
            p.finish().unwrap_err()
        } else if name.starts_with("anthropic/") {
            let mut p = MessagesStreamParser::default();
            for e in &events[..keep] {
                p.push(&e.event, &e.data).unwrap();
            }
            p.finish().unwrap_err()
        } else if name.starts_with("openai-responses/") {
            let mut p = ResponsesStreamParser::default();
            for e in &events[..keep] {
                p.push(&e.event, &e.data).unwrap();
            }
            p.finish().unwrap_err()
        } else {
            let mut p = GenerateStreamParser::default();
            for e in &events[..keep] {
                p.push(&e.data).unwrap();
            }
            p.finish().unwrap_err()
        };
        assert_eq!(err.kind, ProviderErrorKind::Transport, "{name}");
    }
}

#[tokio::test]
async fn responses_yield_what_chat_completions_yields_for_the_same_answer() {
    // The Responses transcripts record the very answers of the Chat Completions ones (text
    // with cached and reasoning tokens; two parallel calls): through either surface a turn
    // engine must see the same events. The reasoning item of the first carries no text, its
    // done events repeat what the deltas said, and each call is known by its `call_id` (what
    // a function_call_output answers), not by its item id `fc_…`.
    for (responses_name, chat_name) in [
        ("openai-responses/text_with_usage.sse", "openai/text_with_usage.sse"),
        ("openai-responses/two_function_calls.sse", "openai/two_tool_calls.sse"),
    ] {
        let through_responses = responses(responses_name).await.unwrap();
        assert_eq!(through_responses, openai(chat_name).await.unwrap(), "{responses_name}");
    }
    let text = responses("openai-responses/text_with_usage.sse").await.unwrap();
    assert_eq!(text.iter().rev().nth(1), Some(&usage(1342, 271, Some(1152), Some(256))));
    let calls = responses("openai-responses/two_function_calls.sse").await.unwrap();
    assert_eq!(calls[1], call("call_Qm3xT9bLr2VfK8sWn1Yd0aZe", "get_order_status", r#"{"orderId":"4182"}"#));
    assert_eq!(calls.last(), Some(&ModelEvent::Finish(FinishReason::ToolCalls)));
}

#[tokio::test]
async fn responses_incomplete_at_max_output_tokens_finishes_as_length_with_its_usage() {
    let events = responses("openai-responses/incomplete_max_output_tokens.sse").await.unwrap();
    let mut expected = vec![model("gpt-4.1-mini-2025-04-14")];
    expected.extend(deltas(&["Here", " are", " the", " steps", ":", " first", ","]));
    expected.push(usage(64, 7, Some(0), Some(0)));
    expected.push(ModelEvent::Finish(FinishReason::Length));
    assert_eq!(events, expected);
}

#[tokio::test]
async fn responses_failed_is_a_retryable_server_error_after_what_was_said() {
    let (before, err) = responses("openai-responses/failed_server_error.sse").await.unwrap_err();
    assert_eq!(before, vec![model("gpt-4.1-2025-04-14"), ModelEvent::TextDelta("Let me".into())]);
    assert_eq!((err.kind, err.status), (ProviderErrorKind::ServerError, Some(500)));
    assert!(err.is_retryable());
    assert!(err.detail.contains("server_error"));
}

#[tokio::test]
async fn google_text_streams_thoughts_apart_and_counts_thinking_as_output() {
    let events = google("google/text_with_usage.sse", 0).await.unwrap();
    let expected = vec![
        model("gemini-2.5-flash"),
        ModelEvent::ReasoningDelta(
            "**Locating the order**\n\nThe user asks about order 4182; the status says it shipped Monday.\n".into(),
        ),
        ModelEvent::TextDelta("Your order #4182 shipped on Monday".into()),
        ModelEvent::TextDelta(" — it\u{2019}s due Thursday.".into()),
        // The last usageMetadata wins (each chunk's is cumulative): output = 14 candidates +
        // 188 thinking tokens, input 1342 of which 1024 came from the cache.
        ModelEvent::Usage(Usage {
            input_tokens: 1342,
            output_tokens: 14 + 188,
            total_tokens: 1342 + 14 + 188,
            cached_input_tokens: Some(1024),
            reasoning_tokens: Some(188),
        }),
        ModelEvent::Finish(FinishReason::Stop),
    ];
    assert_eq!(events, expected);
    assert_eq!(ModelEvent::text_of(&events), "Your order #4182 shipped on Monday — it\u{2019}s due Thursday.");
}

#[tokio::test]
async fn google_parallel_calls_get_stable_ids_and_keep_the_first_calls_thought_signature() {
    // Two calls earlier in the conversation: these are the third and fourth.
    let events = google("google/two_function_calls.sse", 2).await.unwrap();
    let signature = "CrYCAdHtim9kQ3lZ0vXy8R4cK1pNqW7tH2aJ5sL9eF3gD6uB0zY4xV8nM1oQ7rT2wS5kC9jA3hG6fE0dB4iU8yP1lO7mN2qKEgzX3vR5tY9uW1sA7dFGgxjH2kL4nP6rT8vX0yIjB1c3d5e7f9g1h3j5k7m9n1p3r5t7v9x1z3Q==";
    assert_eq!(
        events,
        vec![
            model("gemini-2.5-flash"),
            ModelEvent::ReasoningBlock(ReasoningBlock {
                text: String::new(),
                signature: Some(format!("gemini:0:{signature}")),
            }),
            call("gemini_call_3", "get_order_status", r#"{"orderId":"4182"}"#),
            call("gemini_call_4", "get_weather", r#"{"city":"Paris","unit":"celsius"}"#),
            ModelEvent::Usage(Usage {
                input_tokens: 211,
                output_tokens: 38 + 97,
                total_tokens: 346,
                cached_input_tokens: None,
                reasoning_tokens: Some(97),
            }),
            // Gemini says STOP; a turn that ends in calls finishes as ToolCalls.
            ModelEvent::Finish(FinishReason::ToolCalls),
        ]
    );
    assert_eq!(google("google/two_function_calls.sse", 2).await.unwrap(), events, "the same transcript, the same ids");
}

#[tokio::test]
async fn google_answer_stopped_by_the_safety_filter_finishes_as_content_filter() {
    let events = google("google/safety_blocked_answer.sse", 0).await.unwrap();
    assert_eq!(
        events,
        vec![
            model("gemini-2.5-flash"),
            // The prompt was measured; nothing was generated.
            ModelEvent::Usage(Usage { input_tokens: 87, output_tokens: 0, total_tokens: 87, ..Usage::default() }),
            ModelEvent::Finish(FinishReason::ContentFilter),
        ]
    );
}

#[tokio::test]
async fn google_refused_prompt_finishes_as_content_filter() {
    let events = google("google/prompt_blocked.sse", 0).await.unwrap();
    assert_eq!(
        events,
        vec![
            model("gemini-2.5-flash"),
            ModelEvent::Usage(Usage { input_tokens: 61, output_tokens: 0, total_tokens: 61, ..Usage::default() }),
            ModelEvent::Finish(FinishReason::ContentFilter),
        ]
    );
}

#[tokio::test]
async fn azure_tool_call_after_the_prompt_filter_chunk_reads_as_openai() {
    let events = openai("azure/tool_call.sse").await.unwrap();
    assert_eq!(
        events,
        vec![
            // The leading prompt-filter chunk has an empty model: the real one comes next.
            model("gpt-4o-2024-11-20"),
            call("call_Zt5wK2nB8qRx1VmL4cJh7sPd", "get_order_status", r#"{"orderId":"4182"}"#),
            usage(152, 18, Some(0), Some(0)),
            ModelEvent::Finish(FinishReason::ToolCalls),
        ]
    );
}
