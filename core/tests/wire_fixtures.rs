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
use tracon_core::model::openai::ChatStreamParser;
use tracon_core::model::{FinishReason, ModelEvent, ProviderError, ProviderErrorKind, ReasoningBlock, ToolCall, Usage};

const FIXTURES: [&str; 9] = [
    "openai/text_with_usage.sse",
    "openai/two_tool_calls.sse",
    "openai/content_filter.sse",
    "openai/no_usage.sse",
    "anthropic/text.sse",
    "anthropic/tool_use.sse",
    "anthropic/thinking_tool_use.sse",
    "anthropic/refusal.sse",
    "anthropic/overloaded_error.sse",
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
        assert!(text.ends_with("\n\n") && !text.contains('\r'), "{name}: frames end with a blank line");
        let whole = sse(name).await;
        assert_eq!(whole.len(), text.matches("\n\n").count(), "{name}: one event per frame");
        assert!(whole.iter().all(|e| !e.data.is_empty()), "{name}");
        if name.starts_with("anthropic/") {
            // Named events whose name repeats the payload's `type`, as the Messages API sends them.
            for e in &whole {
                let v: serde_json::Value = serde_json::from_str(&e.data).unwrap();
                assert_eq!(v["type"], e.event.as_str(), "{name}");
            }
        }
        // Pieces of 5 bytes split the multi-byte characters in the fixtures too.
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
    for (name, keep) in [("openai/text_with_usage.sse", 5), ("anthropic/text.sse", 5)] {
        let events = sse(name).await;
        let err = if name.starts_with("openai/") {
            let mut p = ChatStreamParser::default();
            for e in &events[..keep] {
                p.push(&e.data).unwrap();
            }
            p.finish().unwrap_err()
        } else {
            let mut p = MessagesStreamParser::default();
            for e in &events[..keep] {
                p.push(&e.event, &e.data).unwrap();
            }
            p.finish().unwrap_err()
        };
        assert_eq!(err.kind, ProviderErrorKind::Transport, "{name}");
    }
}
