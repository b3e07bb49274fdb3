//! The real providers of `tracon-core` (OpenAI Chat Completions and Responses, Anthropic,
//! Google, Azure OpenAI), over HTTP, against the mock model server: the events they yield,
//! what they send, and how they classify failures.

// Test helpers outside #[test] functions may fail loudly too (clippy.toml covers only the tests).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use futures::TryStreamExt;
use serde_json::json;
use tracon_core::definition::ModelBinding;
use tracon_core::model::anthropic::AnthropicProvider;
use tracon_core::model::azure::AzureOpenAiProvider;
use tracon_core::model::google::GoogleProvider;
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

fn responses(mock: &MockServer) -> OpenAiProvider {
    openai(mock).responses_surface()
}

const GOOGLE_KEY: &str = "AIza-mock-google-key";
const AZURE_KEY: &str = "mock-azure-key-0123456789";

fn google(mock: &MockServer) -> GoogleProvider {
    GoogleProvider::new(reqwest::Client::new(), GOOGLE_KEY.into(), Some(mock.base_url())).unwrap()
}

fn azure(mock: &MockServer) -> AzureOpenAiProvider {
    AzureOpenAiProvider::new(reqwest::Client::new(), &format!("{}/", mock.base_url()), AZURE_KEY.into(), None).unwrap()
}

/// The three providers this file added, each with the credential it was built with.
fn new_providers(mock: &MockServer) -> [(Box<dyn ModelProvider>, &'static str); 3] {
    [(Box::new(responses(mock)), "test-key"), (Box::new(google(mock)), GOOGLE_KEY), (Box::new(azure(mock)), AZURE_KEY)]
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

#[tokio::test]
async fn responses_streams_a_text_answer_with_usage_from_the_responses_route() {
    let mock = mock().await;
    mock.script("gpt-mock", vec![MockTurn::text("It shipped on Monday.").with_usage(42, 5)]);
    let provider = responses(&mock);
    assert_eq!(provider.name(), "openai-responses");
    let events = run(&provider, request("gpt-mock")).await.unwrap();
    let mut expected = vec![ModelEvent::Model("gpt-mock".into())];
    expected.extend(deltas(&["It ", "shipped ", "on ", "Monday."]));
    expected.push(ModelEvent::Usage(Usage {
        input_tokens: 42,
        output_tokens: 5,
        total_tokens: 47,
        cached_input_tokens: Some(0),
        reasoning_tokens: Some(0),
    }));
    expected.push(ModelEvent::Finish(FinishReason::Stop));
    assert_eq!(events, expected);

    let recorded = &mock.requests("gpt-mock")[0];
    assert_eq!(recorded["path"], "/v1/responses");
    assert_eq!(recorded["hasAuthorization"], true);
    let body = &recorded["body"];
    assert_eq!(body["instructions"], "You are terse.");
    assert_eq!(body["input"], json!([{"type": "message", "role": "user", "content": "Where is order 4182?"}]));
    assert_eq!(body["tools"][0]["name"], "get_order_status");
    assert_eq!((body["stream"].clone(), body["store"].clone()), (json!(true), json!(false)));
}

#[tokio::test]
async fn google_streams_a_text_answer_with_usage_and_keeps_the_key_out_of_the_url() {
    let mock = mock().await;
    mock.script("gemini-mock", vec![MockTurn::text("It shipped on Monday.").with_usage(42, 5)]);
    let events = run(&google(&mock), request("gemini-mock")).await.unwrap();
    let mut expected = vec![ModelEvent::Model("gemini-mock".into())];
    expected.extend(deltas(&["It ", "shipped ", "on ", "Monday."]));
    expected.push(usage(42, 5));
    expected.push(ModelEvent::Finish(FinishReason::Stop));
    assert_eq!(events, expected);

    let recorded = &mock.requests("gemini-mock")[0];
    assert_eq!(recorded["path"], "/v1beta/models/gemini-mock:streamGenerateContent");
    assert_eq!(recorded["query"], "alt=sse", "the key travels in a header, never in the URL");
    assert_eq!(recorded["hasGoogleApiKey"], true);
    assert_eq!(recorded["hasAuthorization"], false);
    let body = &recorded["body"];
    assert_eq!(body["systemInstruction"], json!({"parts": [{"text": "You are terse."}]}));
    assert_eq!(body["contents"], json!([{"role": "user", "parts": [{"text": "Where is order 4182?"}]}]));
    assert_eq!(body["tools"][0]["functionDeclarations"][0]["name"], "get_order_status");
}

#[tokio::test]
async fn azure_streams_a_text_answer_with_usage_from_its_deployment() {
    let mock = mock().await;
    mock.script("support-prod", vec![MockTurn::text("It shipped on Monday.").with_usage(42, 5)]);
    let events = run(&azure(&mock), request("support-prod")).await.unwrap();
    let mut expected = vec![ModelEvent::Model("support-prod".into())];
    expected.extend(deltas(&["It ", "shipped ", "on ", "Monday."]));
    expected.push(usage(42, 5));
    expected.push(ModelEvent::Finish(FinishReason::Stop));
    assert_eq!(events, expected, "the leading prompt-filter chunk yields nothing");

    let recorded = &mock.requests("support-prod")[0];
    assert_eq!(recorded["path"], "/openai/deployments/support-prod/chat/completions");
    assert_eq!(recorded["query"], "api-version=2024-10-21");
    assert_eq!((recorded["hasAzureApiKey"].clone(), recorded["hasAuthorization"].clone()), (json!(true), json!(false)));
    assert_eq!(recorded["body"]["messages"][0], json!({"role": "system", "content": "You are terse."}));
    assert_eq!(recorded["body"]["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn the_new_providers_assemble_two_tool_calls_under_stable_ids() {
    let mock = mock().await;
    let turn = MockTurn::tool_call("get_order_status", json!({"orderId": "4182"}))
        .and_tool_call("get_weather", json!({"city": "Paris", "unit": "celsius"}))
        .with_usage(80, 30);
    mock.script("tools", vec![turn]);
    for (provider, ids) in [
        (Box::new(responses(&mock)) as Box<dyn ModelProvider>, ["call_1", "call_2"]),
        // Gemini gives no ids: the provider numbers the conversation's calls.
        (Box::new(google(&mock)), ["gemini_call_1", "gemini_call_2"]),
        (Box::new(azure(&mock)), ["call_1", "call_2"]),
    ] {
        let events = run(provider.as_ref(), request("tools")).await.unwrap();
        let calls: Vec<&ModelEvent> = events.iter().filter(|e| matches!(e, ModelEvent::ToolCall(_))).collect();
        assert_eq!(
            calls,
            [
                &call(ids[0], "get_order_status", r#"{"orderId":"4182"}"#),
                &call(ids[1], "get_weather", r#"{"city":"Paris","unit":"celsius"}"#),
            ],
            "{}",
            provider.name()
        );
        assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::ToolCalls)), "{}", provider.name());
    }
}

#[tokio::test]
async fn the_new_providers_send_a_tool_round_back_in_their_own_format() {
    let mock = mock().await;
    mock.script(
        "loop",
        vec![MockTurn::tool_call("get_order_status", json!({"orderId": "4182"})), MockTurn::text("Shipped.")],
    );
    for (provider, _) in new_providers(&mock) {
        let mut r = request("loop");
        let first = run(provider.as_ref(), r.clone()).await.unwrap();
        let Some(ModelEvent::ToolCall(c)) = first.iter().find(|e| matches!(e, ModelEvent::ToolCall(_))).cloned() else {
            panic!("{}: no tool call in {first:?}", provider.name());
        };
        r.messages.push(Message::Assistant { text: None, tool_calls: vec![c.clone()], reasoning: vec![] });
        r.messages.push(Message::Tool { call_id: c.id, name: c.name, content: "shipped".into(), is_error: false });
        let second = run(provider.as_ref(), r).await.unwrap();
        assert_eq!(ModelEvent::text_of(&second), "Shipped.", "{}", provider.name());
        assert_eq!(second.last(), Some(&ModelEvent::Finish(FinishReason::Stop)), "{}", provider.name());
    }
    let sent: Vec<serde_json::Value> = mock.requests("loop").into_iter().map(|r| r["body"].clone()).collect();
    assert_eq!(sent.len(), 6);
    // Responses: the call as a function_call item, the answer as function_call_output.
    assert_eq!(
        sent[1]["input"].as_array().unwrap()[1..],
        [
            json!({"type": "function_call", "call_id": "call_1", "name": "get_order_status", "arguments": "{\"orderId\":\"4182\"}"}),
            json!({"type": "function_call_output", "call_id": "call_1", "output": "shipped"}),
        ]
    );
    // Google: a model turn with the call (its generated id not sent), a user turn answering it by name.
    assert_eq!(
        sent[3]["contents"].as_array().unwrap()[1..],
        [
            json!({"role": "model", "parts": [{"functionCall": {"name": "get_order_status", "args": {"orderId": "4182"}}}]}),
            json!({"role": "user", "parts": [{"functionResponse": {"name": "get_order_status", "response": {"output": "shipped"}}}]}),
        ]
    );
    // Azure: OpenAI's tool message.
    assert_eq!(sent[5]["messages"][3], json!({"role": "tool", "tool_call_id": "call_1", "content": "shipped"}));
}

#[tokio::test]
async fn the_new_providers_classify_http_failures_and_keep_their_key_out_of_the_detail() {
    let mock = mock().await;
    for (status, kind) in [
        (401, ProviderErrorKind::Unauthorized),
        (403, ProviderErrorKind::Unauthorized),
        (429, ProviderErrorKind::RateLimited),
        (500, ProviderErrorKind::ServerError),
        (503, ProviderErrorKind::ServerError),
        (404, ProviderErrorKind::Rejected),
    ] {
        mock.script("failing", vec![MockTurn::status(status)]);
        for (provider, key) in new_providers(&mock) {
            let err = run(provider.as_ref(), request("failing")).await.unwrap_err();
            assert_eq!(err.kind, kind, "{} HTTP {status}", provider.name());
            // Google refuses a key with 400 API_KEY_INVALID; it is still an authentication failure.
            let expected = if status == 401 && provider.name() == "google" { 400 } else { status };
            assert_eq!(err.status, Some(expected), "{} HTTP {status}", provider.name());
            assert!(!err.to_string().contains("mock"), "upstream text stays out of Display: {err}");
            assert!(
                !err.detail.contains(key),
                "{}: the key is removed from the detail: {}",
                provider.name(),
                err.detail
            );
            if status == 401 {
                // The mock quoted the refused key back; it was redacted, not merely absent.
                assert!(err.detail.contains("[redacted]"), "{}: {}", provider.name(), err.detail);
            }
            if status == 429 && provider.name() == "google" {
                // Google's RetryInfo in the body stands in for a Retry-After header.
                assert_eq!(err.retry_after, Some(std::time::Duration::from_secs(1)));
            }
        }
    }
}

#[tokio::test]
async fn safety_filters_end_the_answer_as_content_filter() {
    let mock = mock().await;
    // The answer stopped by the filter part-way.
    mock.script("filtered", vec![MockTurn::text("Here is how").with_finish(MockFinish::ContentFilter)]);
    for (provider, _) in new_providers(&mock) {
        let events = run(provider.as_ref(), request("filtered")).await.unwrap();
        assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::ContentFilter)), "{}", provider.name());
    }
    // The prompt refused outright: Google's promptFeedback.blockReason, Azure's 400 content_filter.
    mock.script("refused", vec![MockTurn::text("never said").with_finish(MockFinish::PromptFiltered)]);
    let events = run(&google(&mock), request("refused")).await.unwrap();
    assert_eq!(
        events,
        [
            ModelEvent::Model("refused".into()),
            ModelEvent::Usage(Usage { input_tokens: 12, output_tokens: 0, total_tokens: 12, ..Usage::default() }),
            ModelEvent::Finish(FinishReason::ContentFilter),
        ]
    );
    let events = run(&azure(&mock), request("refused")).await.unwrap();
    assert_eq!(
        events,
        [ModelEvent::Finish(FinishReason::ContentFilter)],
        "a filtered prompt is an answer, not a failure"
    );
}

#[tokio::test]
async fn a_keyless_compatible_server_can_enable_its_responses_surface() {
    let mock = mock().await;
    mock.script("qwen-mock", vec![MockTurn::text("Paris.").without_usage()]);
    let chat =
        OpenAiProvider::compatible(reqwest::Client::new(), "local", &format!("{}/v1", mock.base_url()), None).unwrap();
    let provider = chat.responses_surface();
    assert_eq!(provider.name(), "local-responses");
    let events = run(&provider, request("qwen-mock")).await.unwrap();
    assert_eq!(
        events,
        [
            ModelEvent::Model("qwen-mock".into()),
            ModelEvent::TextDelta("Paris.".into()),
            ModelEvent::Finish(FinishReason::Stop)
        ],
        "usage: null stays unreported"
    );
    let recorded = &mock.requests("qwen-mock")[0];
    assert_eq!(
        (recorded["path"].clone(), recorded["hasAuthorization"].clone()),
        (json!("/v1/responses"), json!(false))
    );
}
