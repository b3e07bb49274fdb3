//! The real OpenAI and Anthropic providers of `tracon-core`, over HTTP, against the mock
//! model server: the events they yield and how they classify failures.

// Test helpers outside #[test] functions may fail loudly too (clippy.toml covers only the tests).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use futures::TryStreamExt;
use serde_json::json;
use tracon_core::definition::ModelBinding;
use tracon_core::model::anthropic::AnthropicProvider;
use tracon_core::model::openai::OpenAiProvider;
use tracon_core::model::{
    FinishReason, Message, ModelEvent, ModelProvider, ModelRequest, ProviderError, ProviderErrorKind, ToolCall,
    ToolSpec, Usage,
};
use tracon_tests::mock::{MockConfig, MockFinish, MockServer, MockTurn};

async fn mock() -> MockServer {
    MockServer::start(MockConfig::default()).await.unwrap()
}

fn openai(mock: &MockServer) -> OpenAiProvider {
    OpenAiProvider::openai(reqwest::Client::new(), "test-key".into(), Some(format!("{}/v1", mock.base_url())))
}

fn anthropic(mock: &MockServer) -> AnthropicProvider {
    AnthropicProvider::new(reqwest::Client::new(), "k".into(), Some(mock.base_url()))
}

fn request(model: &str) -> ModelRequest {
    let mut r = ModelRequest::from_binding(&ModelBinding {
        provider: "test".into(),
        model: model.into(),
        ..Default::default()
    });
    r.system = Some("You are terse.".into());
    r.messages = vec![Message::user("Where is order 4182?")];
    r.tools = vec![ToolSpec {
        name: "get_order_status".into(),
        description: "Looks up an order.".into(),
        parameters: json!({"type": "object", "properties": {"orderId": {"type": "string"}}}),
    }]
    .into();
    r
}

async fn run(provider: &dyn ModelProvider, request: ModelRequest) -> Result<Vec<ModelEvent>, ProviderError> {
    provider.stream(&request).await?.try_collect().await
}

fn usage(input: u64, output: u64) -> ModelEvent {
    ModelEvent::Usage(Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: input + output,
        ..Usage::default()
    })
}

fn deltas(pieces: &[&str]) -> Vec<ModelEvent> {
    pieces.iter().map(|p| ModelEvent::TextDelta((*p).to_owned())).collect()
}

fn call(id: &str, name: &str, arguments: &str) -> ModelEvent {
    ModelEvent::ToolCall(ToolCall { id: id.into(), name: name.into(), arguments: arguments.into() })
}

#[tokio::test]
async fn openai_streams_a_text_answer_with_usage() {
    let mock = mock().await;
    mock.script("gpt-mock", vec![MockTurn::text("It shipped on Monday.").with_usage(42, 5)]);
    let events = run(&openai(&mock), request("gpt-mock")).await.unwrap();
    let mut expected = vec![ModelEvent::Model("gpt-mock".into())];
    expected.extend(deltas(&["It ", "shipped ", "on ", "Monday."]));
    expected.push(usage(42, 5));
    expected.push(ModelEvent::Finish(FinishReason::Stop));
    assert_eq!(events, expected);

    let recorded = mock.requests("gpt-mock");
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["hasAuthorization"], true);
    assert_eq!(recorded[0]["body"]["stream"], true);
    assert_eq!(recorded[0]["body"]["stream_options"]["include_usage"], true);
    assert_eq!(recorded[0]["body"]["messages"][0], json!({"role": "system", "content": "You are terse."}));
}

#[tokio::test]
async fn anthropic_streams_a_text_answer_with_usage() {
    let mock = mock().await;
    mock.script("claude-mock", vec![MockTurn::text("It shipped on Monday.").with_usage(42, 5)]);
    let events = run(&anthropic(&mock), request("claude-mock")).await.unwrap();
    let mut expected = vec![ModelEvent::Model("claude-mock".into())];
    expected.extend(deltas(&["It ", "shipped ", "on ", "Monday."]));
    expected.push(usage(42, 5));
    expected.push(ModelEvent::Finish(FinishReason::Stop));
    assert_eq!(events, expected);

    let recorded = mock.requests("claude-mock");
    assert_eq!(recorded[0]["hasApiKey"], true);
    assert_eq!(recorded[0]["body"]["system"], "You are terse.");
    assert_eq!(recorded[0]["body"]["max_tokens"], 4096);
}

#[tokio::test]
async fn both_providers_assemble_two_streamed_tool_calls() {
    let mock = mock().await;
    let turn = MockTurn::tool_call("get_order_status", json!({"orderId": "4182"}))
        .and_tool_call("get_weather", json!({"city": "Paris", "unit": "celsius"}))
        .with_usage(80, 30);
    mock.script("tools", vec![turn]);

    let events = run(&openai(&mock), request("tools")).await.unwrap();
    assert_eq!(
        events[1..],
        [
            call("call_1", "get_order_status", r#"{"orderId":"4182"}"#),
            call("call_2", "get_weather", r#"{"city":"Paris","unit":"celsius"}"#),
            usage(80, 30),
            ModelEvent::Finish(FinishReason::ToolCalls),
        ]
    );
    let events = run(&anthropic(&mock), request("tools")).await.unwrap();
    assert_eq!(
        events[1..],
        [
            call("toolu_1", "get_order_status", r#"{"orderId":"4182"}"#),
            call("toolu_2", "get_weather", r#"{"city":"Paris","unit":"celsius"}"#),
            usage(80, 30),
            ModelEvent::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn a_tool_loop_walks_the_script_turn_by_turn() {
    let mock = mock().await;
    mock.script(
        "loop",
        vec![MockTurn::tool_call("get_order_status", json!({"orderId": "4182"})), MockTurn::text("Shipped.")],
    );
    for provider in [&openai(&mock) as &dyn ModelProvider, &anthropic(&mock)] {
        let mut r = request("loop");
        let first = run(provider, r.clone()).await.unwrap();
        let Some(ModelEvent::ToolCall(c)) = first.iter().find(|e| matches!(e, ModelEvent::ToolCall(_))).cloned() else {
            panic!("no tool call in {first:?}");
        };
        r.messages.push(Message::Assistant { text: None, tool_calls: vec![c.clone()], reasoning: vec![] });
        r.messages.push(Message::Tool { call_id: c.id, name: c.name, content: "shipped".into(), is_error: false });
        let second = run(provider, r).await.unwrap();
        assert_eq!(ModelEvent::text_of(&second), "Shipped.");
        assert_eq!(second.last(), Some(&ModelEvent::Finish(FinishReason::Stop)));
    }
}

#[tokio::test]
async fn http_failures_are_classified() {
    let mock = mock().await;
    for (status, kind) in [
        (401, ProviderErrorKind::Unauthorized),
        (429, ProviderErrorKind::RateLimited),
        (500, ProviderErrorKind::ServerError),
    ] {
        mock.script("failing", vec![MockTurn::status(status)]);
        for provider in [&openai(&mock) as &dyn ModelProvider, &anthropic(&mock)] {
            let err = run(provider, request("failing")).await.unwrap_err();
            assert_eq!(err.kind, kind, "{} HTTP {status}", provider.name());
            assert_eq!(err.status, Some(status));
            assert!(!err.to_string().contains("mock"), "upstream text stays out of Display: {err}");
        }
    }
}

#[tokio::test]
async fn a_content_filter_finish_reaches_the_caller() {
    let mock = mock().await;
    mock.script("filtered", vec![MockTurn::text("Here is how").with_finish(MockFinish::ContentFilter)]);
    for provider in [&openai(&mock) as &dyn ModelProvider, &anthropic(&mock)] {
        let events = run(provider, request("filtered")).await.unwrap();
        assert_eq!(ModelEvent::text_of(&events), "Here is how");
        assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::ContentFilter)), "{}", provider.name());
    }
}

#[tokio::test]
async fn a_keyless_compatible_server_without_usage_yields_no_usage() {
    let mock = mock().await;
    mock.script("llama-mock", vec![MockTurn::text("Paris.").without_usage()]);
    let provider =
        OpenAiProvider::compatible(reqwest::Client::new(), "local", &format!("{}/v1", mock.base_url()), None).unwrap();
    let events = run(&provider, request("llama-mock")).await.unwrap();
    assert_eq!(
        events,
        [
            ModelEvent::Model("llama-mock".into()),
            ModelEvent::TextDelta("Paris.".into()),
            ModelEvent::Finish(FinishReason::Stop)
        ]
    );
    assert_eq!(mock.requests("llama-mock")[0]["hasAuthorization"], false);
}
