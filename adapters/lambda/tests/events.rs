//! Synthetic API Gateway v2 and Lambda function URL events pushed through each group's
//! handler, exactly as `lambda_http` hands them to the router.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use axum::Router;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use tracon_core::config::Config;
use tracon_core::store::Stores;
use tracon_handlers::{AppState, agents_router, all_routes, runs_router, sessions_router};

const TOKEN: &str = "lambda-test-token-0123456789";

type Function = tower::util::MapRequest<axum::Router, fn(lambda_http::Request) -> lambda_http::Request>;

fn app(routes: Router<AppState>, stores: Stores, token: bool) -> Function {
    let mut config = Config::default();
    if token {
        config = config.with("TRACON_AUTH_TOKEN", TOKEN);
    }
    let state = tracon_lambda::state_with_stores(&config, stores).unwrap();
    tracon_lambda::function(state, routes)
}

/// An HTTP API (payload 2.0) event, or a function URL event (`function_url = true`).
fn event(method: &str, path: &str, body: Option<Value>, function_url: bool) -> String {
    let (domain, api) = if function_url {
        ("abcdefghijklmnop.lambda-url.eu-west-1.on.aws", "abcdefghijklmnop")
    } else {
        ("a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com", "a1b2c3d4e5")
    };
    json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {
            "host": domain,
            "content-type": "application/json",
            "authorization": format!("Bearer {TOKEN}"),
            "x-forwarded-for": "203.0.113.7"
        },
        "requestContext": {
            "accountId": "123456789012",
            "apiId": api,
            "domainName": domain,
            "domainPrefix": api,
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "203.0.113.7", "userAgent": "test"},
            "requestId": "req-1",
            "routeKey": "$default",
            "stage": "$default",
            "time": "30/Nov/2026:12:00:00 +0000",
            "timeEpoch": 1796040000000u64
        },
        "body": body.map(|b| b.to_string()),
        "isBase64Encoded": false
    })
    .to_string()
}

/// A REST API (payload 1.0) event on the named stage `prod`, as API Gateway sends it.
fn rest_event(method: &str, path: &str, query: Option<(&str, &str)>) -> String {
    json!({
        "resource": "/api/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {"Host": "a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com", "Authorization": format!("Bearer {TOKEN}")},
        "multiValueHeaders": {"Host": ["a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com"], "Authorization": [format!("Bearer {TOKEN}")]},
        "queryStringParameters": query.map(|(k, v)| json!({k: v})),
        "multiValueQueryStringParameters": query.map(|(k, v)| json!({k: [v]})),
        "pathParameters": {"proxy": path.trim_start_matches("/api/")},
        "stageVariables": null,
        "requestContext": {
            "accountId": "123456789012", "resourceId": "abc123", "stage": "prod", "requestId": "req-2",
            "identity": {"sourceIp": "203.0.113.7", "userAgent": "test"},
            "resourcePath": "/api/{proxy+}", "httpMethod": method, "apiId": "a1b2c3d4e5",
            "path": format!("/prod{path}"), "protocol": "HTTP/1.1", "requestTimeEpoch": 1796040000000u64
        },
        "body": null,
        "isBase64Encoded": false
    })
    .to_string()
}

async fn call(app: &Function, raw_event: String) -> (u16, String, String) {
    let request = lambda_http::request::from_str(&raw_event).expect("a valid Lambda event");
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let body = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    (status, content_type, body)
}

#[tokio::test]
async fn the_agents_function_stores_an_agent_and_streams_a_run() {
    let stores = Stores::in_memory();
    let agents = app(agents_router(), stores.clone(), true);
    let definition = json!({"name": "helper", "instructions": "Help.", "model": {"provider": "scripted", "model": "demo"},
                            "toolNames": ["get_order_status"]});
    for function_url in [false, true] {
        let (status, _, body) =
            call(&agents, event("POST", "/api/agents", Some(definition.clone()), function_url)).await;
        assert!(status == 201 || (function_url && status == 409), "{status} {body}");
        let (status, content_type, body) = call(
            &agents,
            event("POST", "/api/agents/helper/run", Some(json!({"message": "Where is order 12?"})), function_url),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(content_type, "text/event-stream");
        assert!(body.starts_with("event: run\n"));
        assert!(body.contains("\"toolName\":\"get_order_status\"") && body.contains("event: done"), "{body}");
    }
    let (status, _, _) = call(&agents, event("GET", "/api/sessions", None, false)).await;
    assert_eq!(status, 404, "the agents function serves no session routes");
}

#[tokio::test]
async fn the_runs_and_sessions_functions_read_what_the_agents_function_wrote() {
    let stores = Stores::in_memory();
    let agents = app(agents_router(), stores.clone(), true);
    let runs = app(runs_router(), stores.clone(), true);
    let sessions = app(sessions_router(), stores.clone(), true);
    call(
        &agents,
        event("POST", "/api/agents", Some(json!({"name": "a", "model": {"provider": "scripted", "model": "m"}})), true),
    )
    .await;
    let (_, _, live) =
        call(&agents, event("POST", "/api/agents/a/run", Some(json!({"message": "hi", "sessionId": "s1"})), true))
            .await;
    let run_id = live.split("\"runId\":\"").nth(1).unwrap().split('"').next().unwrap().to_owned();

    let (status, _, run) = call(&runs, event("GET", &format!("/api/runs/{run_id}"), None, false)).await;
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<Value>(&run).unwrap()["status"], "Completed");
    let (status, content_type, log) =
        call(&runs, event("GET", &format!("/api/runs/{run_id}/events"), None, true)).await;
    assert_eq!((status, content_type.as_str()), (200, "text/event-stream"));
    assert!(log.contains("event: run.completed"));
    let (status, _, session) = call(&sessions, event("GET", "/api/sessions/s1", None, false)).await;
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<Value>(&session).unwrap()["messages"][0]["text"], "hi");
    let (status, _, _) = call(&sessions, event("GET", "/api/runs", None, false)).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn without_a_token_every_function_serves_only_meta() {
    for routes in [agents_router(), runs_router(), sessions_router(), all_routes()] {
        let app = app(routes, Stores::in_memory(), false);
        let (status, _, _) = call(&app, event("GET", "/api/meta", None, true)).await;
        assert_eq!(status, 200);
        let (status, content_type, body) = call(&app, event("GET", "/api/agents", None, true)).await;
        assert_eq!((status, content_type.as_str()), (503, "application/problem+json"));
        assert!(body.contains("authentication_not_configured") && body.contains("TRACON_AUTH_TOKEN"));
    }
}

#[tokio::test]
async fn a_rest_api_event_on_a_named_stage_reaches_the_route_without_the_stage() {
    let stores = Stores::in_memory();
    let sessions = app(sessions_router(), stores.clone(), true);
    let (status, content_type, body) = call(&sessions, rest_event("GET", "/api/sessions", Some(("take", "5")))).await;
    assert_eq!((status, content_type.as_str()), (200, "application/json"), "{body}");
    assert_eq!(body, "[]");
    let (status, _, body) = call(&sessions, rest_event("GET", "/api/sessions/missing", None)).await;
    assert_eq!(status, 404);
    assert!(body.contains("session_not_found") || body.contains("not_found"), "{body}");
    let (status, _, _) = call(&sessions, rest_event("GET", "/api/meta", None)).await;
    assert_eq!(status, 200);
}

#[test]
fn a_missing_database_url_is_a_start_up_error_that_says_what_to_set() {
    let err = tracon_lambda::state_from_env(&Config::default()).err().unwrap();
    assert!(err.contains("DATABASE_URL"), "{err}");
}
