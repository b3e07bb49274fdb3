//! Synthetic API Gateway (REST and HTTP API) and Lambda function URL events pushed through
//! each group's handler, exactly as `lambda_http` hands them to the function.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use axum::Router;
use http_body_util::BodyExt;
use lambda_http::{Context, RequestExt};
use serde_json::{Value, json};
use tower::ServiceExt;
use tracon_core::config::Config;
use tracon_core::stores::Stores;
use tracon_handlers::AppState;
use tracon_handlers::groups::deployments::{AGENTS, ALL, RUNS, SESSIONS};
use tracon_lambda::{BasePath, Function};

const TOKEN: &str = "lambda-test-token-0123456789";

fn app(routes: Router<AppState>, stores: Stores, token: bool) -> Function {
    app_under(routes, stores, token, BasePath::default())
}

fn app_under(routes: Router<AppState>, stores: Stores, token: bool, base_path: BasePath) -> Function {
    let mut config = Config::default();
    if token {
        config = config.with("TRACON_AUTH_TOKEN", TOKEN);
    }
    let state = tracon_lambda::state_with_stores(&config, stores).unwrap();
    tracon_lambda::function(state, routes, base_path)
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
    rest_event_on("prod", method, path, query)
}

/// A REST API event on `stage`. `path` is what the client asked for after the stage (on the
/// execute-api domain) or the whole path (on a custom domain, base path mapping included).
fn rest_event_on(stage: &str, method: &str, path: &str, query: Option<(&str, &str)>) -> String {
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
            "accountId": "123456789012", "resourceId": "abc123", "stage": stage, "requestId": "req-2",
            "identity": {"sourceIp": "203.0.113.7", "userAgent": "test"},
            "resourcePath": "/api/{proxy+}", "httpMethod": method, "apiId": "a1b2c3d4e5",
            "path": format!("/{stage}{path}"), "protocol": "HTTP/1.1", "requestTimeEpoch": 1796040000000u64
        },
        "body": null,
        "isBase64Encoded": false
    })
    .to_string()
}

/// An HTTP API (payload 2.0) event on the named stage `stage`, whose `rawPath` is `raw_path`
/// (`/prod/api/meta` on the execute-api domain, `/api/meta` through a custom domain).
fn named_stage_event(stage: &str, raw_path: &str) -> String {
    let mut event: Value = serde_json::from_str(&event("GET", raw_path, None, false)).unwrap();
    event["requestContext"]["stage"] = json!(stage);
    event.to_string()
}

async fn call(app: &Function, raw_event: String) -> (u16, String, String) {
    invoke(app, raw_event, None).await
}

/// `raw_event` as the runtime hands it over; with `request_id`, as invocation `request_id`.
async fn invoke(app: &Function, raw_event: String, request_id: Option<&str>) -> (u16, String, String) {
    let mut request = lambda_http::request::from_str(&raw_event).expect("a valid Lambda event");
    if let Some(id) = request_id {
        let mut context = Context::default();
        context.request_id = id.to_owned();
        request = request.with_lambda_context(context);
    }
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
    let agents = app(AGENTS.routes(), stores.clone(), true);
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
    let agents = app(AGENTS.routes(), stores.clone(), true);
    let runs = app(RUNS.routes(), stores.clone(), true);
    let sessions = app(SESSIONS.routes(), stores.clone(), true);
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
    for routes in [AGENTS.routes(), RUNS.routes(), SESSIONS.routes(), ALL.routes()] {
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
    let sessions = app(SESSIONS.routes(), stores.clone(), true);
    let (status, content_type, body) = call(&sessions, rest_event("GET", "/api/sessions", Some(("take", "5")))).await;
    assert_eq!((status, content_type.as_str()), (200, "application/json"), "{body}");
    assert_eq!(body, "[]");
    let (status, _, body) = call(&sessions, rest_event("GET", "/api/sessions/missing", None)).await;
    assert_eq!(status, 404);
    assert!(body.contains("session_not_found") || body.contains("not_found"), "{body}");
    let (status, _, _) = call(&sessions, rest_event("GET", "/api/meta", None)).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_rest_api_event_on_a_stage_named_api_keeps_its_api_prefix() {
    // lambda_http leaves `/api/meta` alone on a stage named `api` (it already starts with
    // `/api/`); the stage must not be taken off it a second time.
    let sessions = app(SESSIONS.routes(), Stores::in_memory(), true);
    let (status, _, body) = call(&sessions, rest_event_on("api", "GET", "/api/meta", None)).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = call(&sessions, rest_event_on("api", "GET", "/api/sessions", Some(("take", "5")))).await;
    assert_eq!((status, body.as_str()), (200, "[]"));
}

#[tokio::test]
async fn a_rest_api_event_through_a_base_path_mapping_reaches_the_route_under_the_base_path() {
    let base_path = BasePath::new("/v1").unwrap();
    let sessions = app_under(SESSIONS.routes(), Stores::in_memory(), true, base_path);
    // A custom domain maps base path `v1` to the stage `prod`: the event's path is
    // `/v1/api/…` and the stage is not in it.
    let (status, _, body) = call(&sessions, rest_event("GET", "/v1/api/meta", None)).await;
    assert_eq!(status, 200, "{body}");
    let (status, content_type, body) =
        call(&sessions, rest_event("GET", "/v1/api/sessions", Some(("take", "5")))).await;
    assert_eq!((status, content_type.as_str(), body.as_str()), (200, "application/json", "[]"));
    // The base path is a whole segment: `/v1x` is not under `/v1`.
    let (status, _, _) = call(&sessions, rest_event("GET", "/v1x/api/meta", None)).await;
    assert_eq!(status, 404);
    // A path without the base path is left as it is.
    let (status, _, _) = call(&sessions, rest_event("GET", "/api/meta", None)).await;
    assert_eq!(status, 200);

    let without_base_path = app(SESSIONS.routes(), Stores::in_memory(), true);
    let (status, _, _) = call(&without_base_path, rest_event("GET", "/v1/api/meta", None)).await;
    assert_eq!(status, 404, "no base path is taken off unless one is configured");
}

#[tokio::test]
async fn an_http_api_event_on_a_named_stage_reaches_the_route_without_the_stage() {
    let sessions = app(SESSIONS.routes(), Stores::in_memory(), true);
    // The execute-api domain keeps the stage in `rawPath`; a custom domain does not, and
    // lambda_http puts it in front.
    for raw_path in ["/prod/api/meta", "/api/meta"] {
        let (status, _, body) = call(&sessions, named_stage_event("prod", raw_path)).await;
        assert_eq!(status, 200, "{raw_path}: {body}");
    }
    let under_v1 = app_under(SESSIONS.routes(), Stores::in_memory(), true, BasePath::new("/v1").unwrap());
    let (status, _, body) = call(&under_v1, named_stage_event("prod", "/prod/v1/api/meta")).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = call(&under_v1, event("GET", "/v1/api/meta", None, false)).await;
    assert_eq!(status, 200, "{body}");
}

#[test]
fn without_stage_takes_a_rest_api_path_as_the_client_sent_it_keeping_the_query() {
    let path_of = |raw_event: String, base_path: &BasePath| {
        let request = lambda_http::request::from_str(&raw_event).unwrap();
        let request = tracon_lambda::without_stage(request, base_path);
        request.uri().path_and_query().unwrap().to_string()
    };
    let none = BasePath::default();
    let v1 = BasePath::new("/v1").unwrap();
    assert_eq!(path_of(rest_event("GET", "/api/sessions", Some(("take", "5"))), &none), "/api/sessions?take=5");
    assert_eq!(
        path_of(rest_event_on("api", "GET", "/api/sessions", Some(("take", "5"))), &none),
        "/api/sessions?take=5"
    );
    assert_eq!(path_of(rest_event("GET", "/v1/api/sessions", Some(("take", "5"))), &v1), "/api/sessions?take=5");
    assert_eq!(path_of(rest_event("GET", "/v1", None), &v1), "/");
    // A decoded path is encoded again, as lambda_http encodes the one it builds.
    assert_eq!(path_of(rest_event("GET", "/api/sessions/a b", None), &none), "/api/sessions/a%20b");
    assert_eq!(path_of(named_stage_event("prod", "/prod/api/meta"), &v1), "/api/meta");
    assert_eq!(path_of(event("GET", "/prod/api/meta", None, true), &none), "/prod/api/meta");
}

#[test]
fn a_base_path_is_read_from_the_environment_and_checked_at_start_up() {
    let config = Config::from_pairs([("Tracon__Http__BasePath", "/tracon/v1")]);
    assert_eq!(BasePath::from_config(&config).unwrap(), BasePath::new("/tracon/v1").unwrap());
    assert_eq!(BasePath::from_config(&Config::default()).unwrap(), BasePath::default());
    for bad in ["v1", "/", "/v1/", "/a//b", "/a/../b", "/..", "/v 1", "/v1?x"] {
        let config = Config::from_pairs([("Tracon__Http__BasePath", bad)]);
        let err = BasePath::from_config(&config).err().unwrap_or_else(|| panic!("{bad} was accepted"));
        assert!(err.contains("Tracon__Http__BasePath"), "{err}");
    }
    let base_path = BasePath::new("/v1").unwrap();
    assert_eq!(base_path.strip("/v1/api/meta"), "/api/meta");
    assert_eq!(base_path.strip("/v1"), "/");
    assert_eq!(base_path.strip("/v1x/api/meta"), "/v1x/api/meta");
    assert_eq!(BasePath::default().strip("/v1/api/meta"), "/v1/api/meta");
}

#[tokio::test]
async fn an_invocation_handed_out_again_is_answered_502_and_not_run_twice() {
    let stores = Stores::in_memory();
    let agents = app(AGENTS.routes(), stores.clone(), true);
    let definition = json!({"name": "helper", "model": {"provider": "scripted", "model": "demo"}});
    let (status, _, body) = invoke(&agents, event("POST", "/api/agents", Some(definition), true), Some("create")).await;
    assert_eq!(status, 201, "{body}");

    let run = event("POST", "/api/agents/helper/run", Some(json!({"message": "hi"})), true);
    let (status, _, body) = invoke(&agents, run.clone(), Some("run-1")).await;
    assert_eq!(status, 200, "{body}");
    let (status, content_type, body) = invoke(&agents, run.clone(), Some("run-1")).await;
    assert_eq!((status, content_type.as_str()), (502, "application/problem+json"));
    let problem: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["errorType"], "invocation_replayed");
    assert_eq!(problem["status"], 502);
    assert!(problem["detail"].as_str().unwrap().contains("not run twice"), "{body}");

    let runs = app(RUNS.routes(), stores.clone(), true);
    let (_, _, list) = call(&runs, event("GET", "/api/runs", None, true)).await;
    assert_eq!(serde_json::from_str::<Value>(&list).unwrap().as_array().unwrap().len(), 1, "{list}");

    // Another invocation of the same request runs; so does a request built without a
    // Lambda context (it is not an invocation), however often it comes.
    let (status, _, body) = invoke(&agents, run.clone(), Some("run-2")).await;
    assert_eq!(status, 200, "{body}");
    for _ in 0..2 {
        let (status, _, _) = call(&agents, event("GET", "/api/agents/helper", None, true)).await;
        assert_eq!(status, 200);
    }
    let (_, _, list) = call(&runs, event("GET", "/api/runs", None, true)).await;
    assert_eq!(serde_json::from_str::<Value>(&list).unwrap().as_array().unwrap().len(), 2, "{list}");
}

#[test]
fn a_missing_database_url_is_a_start_up_error_that_says_what_to_set() {
    let err = tracon_lambda::state_from_env(&Config::default()).err().unwrap();
    assert!(err.contains("DATABASE_URL"), "{err}");
}

/// Every route of the OpenAPI document is routed by the split template's API Gateway to a
/// function whose group serves it: the template is read as text (the paths and the
/// function each integration names), and each route is sent to that function.
#[tokio::test]
async fn the_split_template_routes_every_endpoint_to_a_function_that_serves_it() {
    let template =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../infra/aws/template.yaml")).unwrap();
    let mut gateway: Vec<(String, String)> = Vec::new();
    let mut current: Option<String> = None;
    for line in template.lines() {
        let trimmed = line.trim();
        if line.starts_with("          /") && trimmed.ends_with(':') {
            current = Some(trimmed.trim_end_matches(':').to_owned());
        } else if let (Some(path), Some(at)) = (&current, trimmed.find("functions/${")) {
            let function = trimmed[at + "functions/${".len()..].split("Function.Arn").next().unwrap().to_owned();
            gateway.push((path.clone(), function));
            current = None;
        }
    }
    assert!(gateway.len() > 10, "{gateway:?}");
    let route_of = |path: &str| {
        gateway
            .iter()
            .filter(|(p, _)| match p.strip_suffix("{proxy+}") {
                Some(prefix) => path.starts_with(prefix),
                None => p == path,
            })
            .max_by_key(|(p, _)| p.len())
            .map(|(_, f)| f.clone())
    };
    let doc: Value = serde_json::from_str(tracon_handlers::meta::openapi::DOCUMENT).unwrap();
    for (template_path, ops) in doc["paths"].as_object().unwrap() {
        let path = template_path
            .replace("{tenantId}", "default")
            .replace("{name}", "some-agent")
            .replace("{id}", "000000000000")
            .replace("{a}", "1")
            .replace("{b}", "1");
        let function = route_of(&path).unwrap_or_else(|| panic!("API Gateway routes nothing to {template_path}"));
        let routes = match function.as_str() {
            "Agents" => AGENTS.routes(),
            "Runs" => RUNS.routes(),
            "Sessions" => SESSIONS.routes(),
            other => panic!("{template_path} goes to an unknown function {other}"),
        };
        let app = app(routes, Stores::in_memory(), true);
        for method in ops.as_object().unwrap().keys() {
            let method = method.to_uppercase();
            let (status, _, body) = call(&app, event(&method, &path, Some(json!({})), false)).await;
            let problem: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            assert!(
                status != 405 && problem["errorType"] != "route_not_found",
                "{method} {template_path} is routed to the {function} function, which does not serve it: {status} {body}"
            );
        }
    }
}
