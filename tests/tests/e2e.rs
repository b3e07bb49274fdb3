//! End-to-end: the real `tracon` binary, over TCP, against the mock model server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{Value, json};
use support::{Tracon, of_kind, run, text_of};
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

const TOKEN: &str = "e2e-token-0123456789abcdef";

async fn mock() -> MockServer {
    MockServer::start(MockConfig::default()).await.unwrap()
}

async fn tracon_with_providers(mock: &MockServer, extra: &[(&str, &str)]) -> Tracon {
    let openai = format!("{}/v1", mock.base_url());
    let anthropic = mock.base_url();
    let mut env = vec![
        ("OPENAI_API_KEY", "test-openai-key"),
        ("Tracon__Providers__OpenAI__Endpoint", openai.as_str()),
        ("ANTHROPIC_API_KEY", "test-anthropic-key"),
        ("Tracon__Providers__Anthropic__Endpoint", anthropic.as_str()),
    ];
    env.extend_from_slice(extra);
    Tracon::start(&env).await
}

async fn create_agent(server: &Tracon, definition: Value) {
    let res = reqwest::Client::new().post(server.url("/api/agents")).json(&definition).send().await.unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
}

fn order_agent(name: &str, provider: &str, model: &str) -> Value {
    json!({
        "name": name,
        "instructions": "Answer order questions.",
        "model": {"provider": provider, "model": model},
        "toolNames": ["get_order_status", "get_store_hours"]
    })
}

#[tokio::test]
async fn the_keyless_demo_streams_an_answer_with_a_tool_call() {
    let server = Tracon::start(&[]).await;
    let (status, frames, raw) = run(&server, "support", json!({"message": "Where is order 4182?"})).await;
    assert_eq!(status, 200);
    assert_eq!(frames.first().unwrap().event, "run");
    let calls = of_kind(&frames, "toolCall");
    assert_eq!(calls.len(), 1, "{raw}");
    assert_eq!(calls[0]["toolName"], "get_order_status");
    assert_eq!(calls[0]["arguments"], r#"{"orderId":"4182"}"#);
    assert_eq!(of_kind(&frames, "toolResult")[0]["status"], "Succeeded");
    assert!(text_of(&frames).contains("4182"));
    let done = frames.last().unwrap();
    assert_eq!(done.event, "done");
    assert_eq!(done.data["status"], "Completed");
    assert_eq!(done.data["usage"], Value::Null, "the scripted model measures nothing, so usage stays null");
}

async fn two_tool_calls_through(provider: &str) {
    let mock = mock().await;
    let model = format!("two-tools-{provider}");
    mock.script(
        &model,
        vec![
            MockTurn::text("Let me check.")
                .and_tool_call("get_order_status", json!({"orderId": "4182"}))
                .and_tool_call("get_store_hours", json!({"city": "Utrecht"}))
                .with_usage(40, 12),
            MockTurn::text("Order 4182 is on its way; the Utrecht store opens at 09:00.").with_usage(90, 15),
        ],
    );
    let server = tracon_with_providers(&mock, &[]).await;
    create_agent(&server, order_agent("orders", provider, &model)).await;
    let (status, frames, raw) =
        run(&server, "orders", json!({"message": "Where is order 4182, and when does Utrecht open?"})).await;
    assert_eq!(status, 200, "{raw}");

    let calls = of_kind(&frames, "toolCall");
    let names: Vec<&str> = calls.iter().map(|c| c["toolName"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["get_order_status", "get_store_hours"], "{raw}");
    assert_eq!(
        serde_json::from_str::<Value>(calls[1]["arguments"].as_str().unwrap()).unwrap(),
        json!({"city": "Utrecht"})
    );
    let results = of_kind(&frames, "toolResult");
    assert!(results.iter().all(|r| r["status"] == "Succeeded"), "{raw}");
    assert!(results[0]["result"].as_str().unwrap().contains("\"orderId\":\"4182\""));
    assert_eq!(text_of(&frames), "Let me check.Order 4182 is on its way; the Utrecht store opens at 09:00.");
    let done = &frames.last().unwrap().data;
    assert_eq!(done["status"], "Completed");
    assert_eq!(done["usage"]["inputTokens"], 130);
    assert_eq!(done["usage"]["outputTokens"], 27);

    // The provider really sent the conversation back with the tool results.
    let requests = mock.requests(&model);
    assert_eq!(requests.len(), 2);
    let second = requests[1]["body"].to_string();
    assert!(second.contains("Utrecht") && second.contains("09:00-18:00"), "{second}");
    assert!(requests[0]["body"]["tools"].as_array().is_some_and(|t| t.len() == 2));
}

#[tokio::test]
async fn a_streamed_openai_run_with_two_tool_calls() {
    two_tool_calls_through("openai").await;
}

#[tokio::test]
async fn a_streamed_anthropic_run_with_two_tool_calls() {
    two_tool_calls_through("anthropic").await;
}

#[tokio::test]
async fn arguments_the_tool_schema_refuses_are_rejected_and_the_run_goes_on() {
    let mock = mock().await;
    mock.script(
        "bad-args",
        vec![
            MockTurn::tool_call("get_order_status", json!({"order": 1})).and_raw_tool_call("get_store_hours", "{oops"),
            MockTurn::text("Sorry, I could not look that up."),
        ],
    );
    let server = tracon_with_providers(&mock, &[]).await;
    create_agent(&server, order_agent("orders", "openai", "bad-args")).await;
    let (_, frames, raw) = run(&server, "orders", json!({"message": "?"})).await;
    let results = of_kind(&frames, "toolResult");
    assert_eq!(results.len(), 2, "{raw}");
    assert!(results.iter().all(|r| r["status"] == "Rejected"), "{raw}");
    assert!(results[0]["error"].as_str().unwrap().contains("orderId"));
    assert_eq!(frames.last().unwrap().data["status"], "Completed");
}

async fn error_frame_for(turn: MockTurn, extra: &[(&str, &str)]) -> Value {
    let mock = mock().await;
    mock.script("failing", vec![turn]);
    let server = tracon_with_providers(&mock, extra).await;
    create_agent(&server, order_agent("orders", "openai", "failing")).await;
    let (status, frames, raw) = run(&server, "orders", json!({"message": "hi"})).await;
    assert_eq!(status, 200);
    let last = frames.last().unwrap();
    assert_eq!(last.event, "error", "{raw}");
    assert_eq!(last.data["status"], "Failed");
    assert!(!raw.contains("test-openai-key"));
    last.data.clone()
}

#[tokio::test]
async fn provider_failures_are_classified_as_the_spec_says() {
    for (status, error_type, class) in [
        (401, "provider_authentication_failed", "ProviderAuthentication"),
        (403, "provider_authentication_failed", "ProviderAuthentication"),
        (429, "provider_rate_limited", "RateLimited"),
        (500, "provider_unavailable", "ProviderUnavailable"),
        (503, "provider_unavailable", "ProviderUnavailable"),
    ] {
        let error = error_frame_for(MockTurn::status(status), &[]).await;
        assert_eq!(error["errorType"], error_type, "HTTP {status}: {error}");
        assert_eq!(error["errorClass"], class);
        assert!(error["message"].as_str().unwrap().contains("(ref: "));
    }
}

#[tokio::test]
async fn a_model_that_never_answers_fails_with_the_timeout_class() {
    let short = [("Tracon__Providers__RequestTimeoutSeconds", "0.5")];
    let error = error_frame_for(MockTurn::hang(), &short).await;
    assert_eq!(error["errorType"], "timeout");
    assert_eq!(error["errorClass"], "Timeout");
    // A stream that stalls midway is a timeout too, not a cancellation.
    let error = error_frame_for(MockTurn::text("one two three four").hang_after_chunks(2), &short).await;
    assert_eq!(error["errorClass"], "Timeout");
}

#[tokio::test]
async fn a_content_filter_finish_fails_the_run_as_content_filtered() {
    let error =
        error_frame_for(MockTurn::text("I can").with_finish(tracon_tests::mock::MockFinish::ContentFilter), &[]).await;
    assert_eq!(error["errorType"], "content_filtered");
}

#[tokio::test]
async fn parameters_and_culture_reach_the_model_as_instructions() {
    let mock = mock().await;
    let server = tracon_with_providers(&mock, &[]).await;
    create_agent(
        &server,
        json!({
            "name": "greeter",
            "instructions": "Greet {{customer}} in a {{tone}} tone. Context: {\"customer\": \"{{customer}}\"}",
            "instructionsByCulture": {"tr": "{{customer}} adlı müşteriyi selamla."},
            "parameters": [{"name": "customer", "required": true}, {"name": "tone", "defaultValue": "warm"}],
            "model": {"provider": "openai", "model": "greet"}
        }),
    )
    .await;
    let (status, _, _) =
        run(&server, "greeter", json!({"message": "hi", "parameters": {"customer": "Ada \"Countess\""}})).await;
    assert_eq!(status, 200);
    let (status, _, _) =
        run(&server, "greeter", json!({"message": "hi", "culture": "tr-TR", "parameters": {"customer": "Ada"}})).await;
    assert_eq!(status, 200);
    let systems: Vec<String> = mock
        .requests("greet")
        .iter()
        .map(|r| r["body"]["messages"][0]["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(systems[0], "Greet Ada \"Countess\" in a warm tone. Context: {\"customer\": \"Ada \\\"Countess\\\"\"}");
    assert_eq!(systems[1], "Ada adlı müşteriyi selamla.");

    let res = reqwest::Client::new()
        .post(server.url("/api/agents/greeter/run"))
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    let doc: Value = res.json().await.unwrap();
    assert_eq!(doc["missing"], json!(["customer"]));
}

#[tokio::test]
async fn a_definition_naming_unknown_things_is_refused_with_every_problem() {
    let server = Tracon::start(&[]).await;
    let client = reqwest::Client::new();
    let bad = json!({
        "name": "broken",
        "model": {"provider": "openai", "model": "m", "providerSettings": {"x.y": 1}},
        "toolNames": ["delete_everything"],
        "callableAgentNames": ["ghost"],
        "sharedInstructionsName": "nowhere"
    });
    let report: Value =
        client.post(server.url("/api/agents/validate")).json(&bad).send().await.unwrap().json().await.unwrap();
    assert_eq!(report["valid"], false);
    let codes: Vec<&str> = report["problems"].as_array().unwrap().iter().map(|p| p["code"].as_str().unwrap()).collect();
    for code in ["unknown_provider", "unknown_tool", "unknown_callable_agent", "unknown_shared_instructions"] {
        assert!(codes.contains(&code), "{code} missing from {codes:?}");
    }
    let res = client.post(server.url("/api/agents")).json(&bad).send().await.unwrap();
    assert_eq!(res.status(), 400);
}

#[tokio::test]
async fn the_static_token_guards_everything_but_meta() {
    let server = Tracon::start(&[("TRACON_AUTH_TOKEN", TOKEN)]).await;
    let client = reqwest::Client::new();
    assert_eq!(client.get(server.url("/api/meta")).send().await.unwrap().status(), 200);
    let res = client.get(server.url("/api/agents")).send().await.unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(res.headers()["www-authenticate"], "Bearer");
    assert_eq!(
        client.get(server.url("/api/agents")).bearer_auth("wrong-token-wrong-token").send().await.unwrap().status(),
        401
    );
    assert_eq!(client.get(server.url("/api/agents")).bearer_auth(TOKEN).send().await.unwrap().status(), 200);
    assert!(!server.log_text().contains(TOKEN), "the token never reaches the log");
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_run_finish_then_exits() {
    let mock = mock().await;
    mock.script("slow", vec![MockTurn::text("one two three four five six seven eight").with_chunk_delay_ms(150)]);
    let mut server = tracon_with_providers(&mock, &[]).await;
    create_agent(&server, order_agent("orders", "openai", "slow")).await;

    let res = reqwest::Client::new()
        .post(server.url("/api/agents/orders/run"))
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    // Wait for the first text frame, so the run is in flight, then ask the server to stop.
    let mut stream = res.bytes_stream();
    let mut body = String::new();
    use futures::StreamExt;
    while !body.contains("\"kind\":\"text\"") {
        body.push_str(&String::from_utf8_lossy(&stream.next().await.unwrap().unwrap()));
    }
    let kill = std::process::Command::new("kill").args(["-TERM", &server.pid().to_string()]).status().unwrap();
    assert!(kill.success());
    while let Some(chunk) = stream.next().await {
        body.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    let frames = support::parse_frames(&body);
    let done = frames.last().unwrap();
    assert_eq!(done.event, "done", "{body}");
    assert_eq!(text_of(&frames), "one two three four five six seven eight");
    let status = server.child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}; log:\n{}", server.log_text());
    assert!(server.log_text().contains("draining"));
    // The listener is closed: new connections are refused.
    assert!(reqwest::Client::new().get(server.url("/api/meta")).send().await.is_err());
}

#[tokio::test]
async fn a_run_is_read_back_with_its_log_tools_and_session_from_the_real_binary() {
    let server = Tracon::start(&[]).await;
    let (_, frames, _) =
        run(&server, "support", json!({"message": "Where is order 77?", "sessionId": "e2e-session"})).await;
    let run_id = frames[0].data["runId"].as_str().unwrap().to_owned();
    let client = reqwest::Client::new();
    let get = |path: String| {
        let client = client.clone();
        let url = server.url(&path);
        async move { client.get(url).send().await.unwrap() }
    };
    let run_row: Value = get(format!("/api/runs/{run_id}")).await.json().await.unwrap();
    assert_eq!(run_row["status"], "Completed");
    assert_eq!(run_row["sessionId"], "e2e-session");
    let log = get(format!("/api/runs/{run_id}/events")).await.text().await.unwrap();
    let log = support::parse_frames(&log);
    assert_eq!(log.first().unwrap().event, "run.started");
    assert_eq!(log.last().unwrap().event, "run.completed");
    let tools: Value = get(format!("/api/runs/{run_id}/tools")).await.json().await.unwrap();
    assert_eq!(tools[0]["toolName"], "get_order_status");
    let session: Value = get("/api/sessions/e2e-session".into()).await.json().await.unwrap();
    assert_eq!(session["messages"][0]["text"], "Where is order 77?");
    let stats: Value = get("/api/stats".into()).await.json().await.unwrap();
    assert_eq!(stats["totalRuns"], 1);
}

/// `Prefer: respond-async` on the real binary: `202` at once, the in-process consumer runs
/// it, and the record and the log read as a live run's.
#[tokio::test]
async fn a_queued_run_is_accepted_at_once_and_run_by_the_local_consumer() {
    let server = Tracon::start(&[]).await;
    let client = reqwest::Client::new();
    let accepted = client
        .post(server.url("/api/agents/support/run"))
        .header("Prefer", "respond-async")
        .json(&json!({"message": "Where is order 4182?"}))
        .send()
        .await
        .unwrap();
    let (location, body, run) = support::accepted_run(&client, &server, accepted).await;
    assert_eq!(run["status"], "Completed", "{run}");
    let log = client.get(server.url(&format!("{location}/events"))).send().await.unwrap().text().await.unwrap();
    let log = support::parse_frames(&log);
    assert_eq!(
        (log.first().unwrap().event.as_str(), log.last().unwrap().event.as_str()),
        ("run.started", "run.completed")
    );
    let job = support::json_of(client.get(server.url(&format!("/api/jobs/{}", body["jobId"].as_str().unwrap())))).await;
    assert_eq!(job["status"], "Succeeded", "{job}");
}

#[tokio::test]
async fn a_whole_chat_completion_is_one_upstream_completion_with_its_usage_and_a_streamed_one_streams() {
    let mock = mock().await;
    mock.script("whole", vec![MockTurn::text("Order 4182 ships tomorrow.").with_usage(12, 6)]);
    let server = tracon_with_providers(&mock, &[]).await;
    create_agent(
        &server,
        json!({"name": "whole-agent", "instructions": "Answer.", "model": {"provider": "openai", "model": "whole"}}),
    )
    .await;
    let client = reqwest::Client::new();
    let chat = |stream: bool| json!({"model": "whole-agent", "stream": stream, "messages": [{"role": "user", "content": "Where is 4182?"}]});
    let res = client.post(server.url("/v1/chat/completions")).json(&chat(false)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let answer: Value = res.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "Order 4182 ships tomorrow.");
    assert_eq!(
        (answer["usage"]["prompt_tokens"].as_u64(), answer["usage"]["completion_tokens"].as_u64()),
        (Some(12), Some(6))
    );
    let res = client.post(server.url("/v1/chat/completions")).json(&chat(true)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.text().await.unwrap().contains("ships"));

    // Upstream: the whole answer was asked for as one completion, the streamed one as a stream.
    let sent: Vec<(Value, Value)> = mock
        .requests("whole")
        .iter()
        .map(|r| (r["body"]["stream"].clone(), r["body"]["stream_options"]["include_usage"].clone()))
        .collect();
    assert_eq!(sent, vec![(json!(false), Value::Null), (json!(true), json!(true))]);
}
