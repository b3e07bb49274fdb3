//! The HTTP contract, driven through the router in-process.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

#[path = "fixtures/nul_filters.rs"]
mod nul_filters;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use nul_filters::NUL_FILTERS;
use serde_json::{Value, json};
use tracon_core::definition::AgentDefinition;
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::RuntimeBuilder;
use tracon_core::tools::{ToolOutput, ToolRegistration, tool_fn};
use tracon_handlers::{AppState, HttpSettings, PeerAddr};

const TOKEN: &str = "a-long-enough-test-token";

fn runtime_builder() -> RuntimeBuilder {
    let lookup = ToolRegistration::new(
        "lookup",
        "Looks something up.",
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
        tool_fn(
            |args: Value, _| async move { Ok(ToolOutput::from(format!("found {}", args["q"].as_str().unwrap_or("")))) },
        ),
    );
    let refund = support::approval_tool("refund", "Refunds.", json!({"type": "object"}), "done");
    let script = ScriptedProvider::from_fn("script", |req| {
        let answered = req.messages.iter().any(|m| matches!(m, tracon_core::model::Message::Tool { .. }));
        match req.last_user_text() {
            Some("fail") => {
                ScriptedTurn::failing(tracon_core::model::ProviderError::from_status(500, "internal db=secret"))
            }
            Some("refund") if !answered => ScriptedTurn::tool_call("refund", json!({})),
            Some(_) if !answered && !req.tools.is_empty() => {
                ScriptedTurn::tool_call("lookup", json!({"q": "a"})).and_tool_call("lookup", json!({"q": "b"}))
            }
            _ => ScriptedTurn::text("All done here.").with_usage(3, 4),
        }
    });
    RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_tool(lookup)
        .add_tool(refund)
        .add_agent(
            AgentDefinition::new("code-agent", "script", "m")
                .with_instructions("I am code.")
                .with_tools(&["lookup", "refund"]),
        )
}

fn app_with(http: HttpSettings) -> (Router, AppState) {
    let state = AppState::new(Arc::new(runtime_builder().build().unwrap()), http);
    (tracon_handlers::router(state.clone()), state)
}

fn app() -> Router {
    app_with(HttpSettings::default()).0
}

fn loopback() -> PeerAddr {
    PeerAddr(SocketAddr::from(([127, 0, 0, 1], 40000)))
}

fn remote() -> PeerAddr {
    PeerAddr(SocketAddr::from(([203, 0, 113, 9], 40000)))
}

fn request(method: Method, path: &str, body: Option<Value>) -> Request<Body> {
    support::call(method, path).json(body).request()
}

async fn send(app: &Router, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let reply = support::send(app, req).await;
    (reply.status, reply.headers, reply.body)
}

async fn json_of(app: &Router, req: Request<Body>) -> (StatusCode, Value) {
    let reply = support::send(app, req).await;
    (reply.status, reply.json_or_null())
}

/// A problem document with this status and errorType, served as problem+json.
async fn expect_problem(app: &Router, req: Request<Body>, status: StatusCode, error_type: &str) -> Value {
    let (got, headers, body) = send(app, req).await;
    let doc: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    assert_eq!(got, status, "{doc}");
    assert_eq!(headers[header::CONTENT_TYPE], "application/problem+json");
    assert_eq!(doc["errorType"], error_type, "{doc}");
    assert_eq!(doc["status"], status.as_u16());
    assert!(doc["detail"].as_str().is_some_and(|d| !d.is_empty()));
    doc
}

fn frames(body: &[u8]) -> Vec<(String, Value)> {
    support::json_frames(body)
}

fn stored(name: &str) -> Value {
    json!({"name": name, "instructions": "Help.", "model": {"provider": "script", "model": "m"}, "toolNames": ["lookup"]})
}

// ---- access layers -------------------------------------------------------------------

#[tokio::test]
async fn meta_is_open_to_everyone_and_reveals_no_secret() {
    let (app, _) = app_with(HttpSettings::with_token(TOKEN));
    let req = Request::get("/api/meta").extension(remote()).body(Body::empty()).unwrap();
    let (status, body) = json_of(&app, req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["authentication"]["methods"], json!(["bearerToken", "apiKey"]));
    assert_eq!(body["storage"]["persistent"], false);
    assert!(!body.to_string().contains(TOKEN));
}

#[tokio::test]
async fn the_widget_script_is_served_to_anyone_as_cacheable_javascript() {
    // A token is configured and the caller is remote: the script needs neither.
    let (app, _) = app_with(HttpSettings::with_token(TOKEN));
    let req = Request::get("/embed.js").extension(remote()).body(Body::empty()).unwrap();
    let (status, headers, body) = send(&app, req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
    assert_eq!(headers[header::CACHE_CONTROL], "public, max-age=300");
    assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert_eq!(body, include_bytes!("../assets/embed.js"));
    // A credential that would be refused anywhere else changes nothing here.
    let req = Request::get("/embed.js")
        .extension(remote())
        .header(header::AUTHORIZATION, "Bearer not-a-valid-token")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, req).await.0, StatusCode::OK);
    let req = Request::post("/embed.js").extension(remote()).body(Body::empty()).unwrap();
    assert_eq!(send(&app, req).await.0, StatusCode::METHOD_NOT_ALLOWED);
}

/// `GET /embed.js` from a remote caller with these request headers.
fn widget_request(headers: &[(header::HeaderName, &str)]) -> Request<Body> {
    let mut req = Request::get("/embed.js").extension(remote());
    for (name, value) in headers {
        req = req.header(name, *value);
    }
    req.body(Body::empty()).unwrap()
}

fn gunzip(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(body), &mut out).unwrap();
    out
}

fn unbrotli(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut brotli::Decompressor::new(body, 4096), &mut out).unwrap();
    out
}

#[tokio::test]
async fn the_widget_script_is_served_brotli_or_gzip_as_accepted_and_as_it_is_otherwise() {
    let (app, _) = app_with(HttpSettings::with_token(TOKEN));
    let source = include_bytes!("../assets/embed.js");
    let mut tags = BTreeSet::new();
    for (accept, coding) in [
        (None, None),
        (Some("gzip"), Some("gzip")),
        (Some("gzip, deflate"), Some("gzip")),
        (Some("gzip, deflate, br, zstd"), Some("br")),
        (Some("br;q=0.5, gzip"), Some("gzip")),
        (Some("br"), Some("br")),
        (Some("deflate"), None),
        (Some("identity"), None),
        (Some("gzip;q=0, br;q=0"), None),
    ] {
        let headers: Vec<_> = accept.map(|a| (header::ACCEPT_ENCODING, a)).into_iter().collect();
        let (status, headers, body) = send(&app, widget_request(&headers)).await;
        assert_eq!(status, StatusCode::OK, "{accept:?}");
        assert_eq!(headers.get(header::CONTENT_ENCODING).map(|v| v.to_str().unwrap()), coding, "{accept:?}");
        assert_eq!(headers[header::VARY], "accept-encoding", "{accept:?}");
        assert_eq!(headers[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
        assert_eq!(headers[header::CACHE_CONTROL], "public, max-age=300");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        let decoded = match coding {
            None => body.clone(),
            Some("gzip") => gunzip(&body),
            Some(_) => unbrotli(&body),
        };
        assert_eq!(decoded, source, "{accept:?}: the same script, byte for byte");
        if coding.is_some() {
            assert!(body.len() * 2 < source.len(), "{accept:?}: {} of {} bytes", body.len(), source.len());
        }
        // A strong validator, one per representation.
        let tag = headers[header::ETAG].to_str().unwrap().to_owned();
        assert!(tag.starts_with('"') && tag.ends_with('"') && tag.len() > 20, "{tag}");
        tags.insert((coding, tag));
    }
    let distinct: BTreeSet<_> = tags.iter().map(|(_, tag)| tag).collect();
    assert_eq!(tags.len(), 3, "one tag per coding: {tags:?}");
    assert_eq!(distinct.len(), 3, "no two codings share a tag: {tags:?}");
}

#[tokio::test]
async fn a_matching_if_none_match_gets_304_for_the_widget_script() {
    let (app, _) = app_with(HttpSettings::with_token(TOKEN));
    let etag = |headers: &axum::http::HeaderMap| headers[header::ETAG].to_str().unwrap().to_owned();
    let (_, plain, _) = send(&app, widget_request(&[])).await;
    let (_, gzipped, _) = send(&app, widget_request(&[(header::ACCEPT_ENCODING, "gzip")])).await;
    let (plain, gzipped) = (etag(&plain), etag(&gzipped));

    let weak = format!("W/{gzipped}");
    let listed = format!("\"stale\", {gzipped}");
    for tags in [gzipped.as_str(), weak.as_str(), listed.as_str(), "*"] {
        let req = widget_request(&[(header::ACCEPT_ENCODING, "gzip"), (header::IF_NONE_MATCH, tags)]);
        let (status, headers, body) = send(&app, req).await;
        assert_eq!(status, StatusCode::NOT_MODIFIED, "{tags}");
        assert!(body.is_empty(), "{tags}");
        // What a 200 would have said about caching, so the cache can refresh its copy.
        assert_eq!(etag(&headers), gzipped, "{tags}");
        assert_eq!(headers[header::VARY], "accept-encoding");
        assert_eq!(headers[header::CACHE_CONTROL], "public, max-age=300");
        assert!(headers.get(header::CONTENT_ENCODING).is_none());
    }

    // The tag of another copy, or of an older script, does not match: the body comes.
    for (accept, tags, expected) in [
        ("identity", gzipped.as_str(), plain.as_str()),
        ("gzip", plain.as_str(), gzipped.as_str()),
        ("gzip", "\"an-older-script\"", gzipped.as_str()),
    ] {
        let req = widget_request(&[(header::ACCEPT_ENCODING, accept), (header::IF_NONE_MATCH, tags)]);
        let (status, headers, body) = send(&app, req).await;
        assert_eq!(status, StatusCode::OK, "{accept} / {tags}");
        assert_eq!(etag(&headers), expected);
        assert!(!body.is_empty());
    }
    // The identity copy revalidates the same way.
    let (status, _, _) = send(&app, widget_request(&[(header::IF_NONE_MATCH, plain.as_str())])).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
}

#[tokio::test]
async fn non_loopback_callers_get_403_while_no_authentication_is_configured() {
    let app = app();
    let req = Request::get("/api/agents").extension(remote()).body(Body::empty()).unwrap();
    expect_problem(&app, req, StatusCode::FORBIDDEN, "remote_access_denied").await;
    // No peer address at all (an unknown transport) is not loopback either.
    let req = Request::get("/api/agents").body(Body::empty()).unwrap();
    expect_problem(&app, req, StatusCode::FORBIDDEN, "remote_access_denied").await;
    let (status, _) = json_of(&app, request(Method::GET, "/api/agents", None)).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn the_static_token_is_required_and_lifts_the_loopback_restriction() {
    let (app, _) = app_with(HttpSettings::with_token(TOKEN));
    let missing = Request::get("/api/agents").extension(remote()).body(Body::empty()).unwrap();
    let (status, headers, _) = send(&app, missing).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");
    for wrong in ["Bearer nope", "Bearer a-long-enough-test-toke", "Basic abc", "Bearer a-long-enough-test-tokenX"] {
        let req = Request::get("/api/agents")
            .extension(remote())
            .header(header::AUTHORIZATION, wrong)
            .body(Body::empty())
            .unwrap();
        expect_problem(&app, req, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
    let ok = Request::get("/api/agents")
        .extension(remote())
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .unwrap();
    let (status, _) = json_of(&app, ok).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn credentials_sent_to_a_server_without_authentication_are_refused() {
    let app = app();
    let mut req = request(Method::GET, "/api/agents", None);
    req.headers_mut().insert(header::AUTHORIZATION, "Bearer something".parse().unwrap());
    expect_problem(&app, req, StatusCode::UNAUTHORIZED, "unauthorized").await;
}

#[test]
fn short_tokens_and_remote_access_without_a_token_are_refused_at_start_up() {
    use tracon_core::config::Config;
    assert!(HttpSettings::from_config(&Config::from_pairs([("TRACON_AUTH_TOKEN", "short")])).is_err());
    assert!(HttpSettings::from_config(&Config::from_pairs([("Tracon__AllowRemoteAccess", "true")])).is_err());
    let s = HttpSettings::from_config(&Config::from_pairs([("TRACON_AUTH_TOKEN", TOKEN)])).unwrap();
    assert!(s.allow_remote_access && s.auth_token_digest.is_some());
    let s = HttpSettings::from_config(&Config::default()).unwrap();
    assert!(!s.allow_remote_access && s.auth_token_digest.is_none());
}

// ---- agents ----------------------------------------------------------------------------

#[tokio::test]
async fn stored_definitions_are_created_read_replaced_and_deleted() {
    let app = app();
    let (status, headers, body) = send(&app, request(Method::POST, "/api/agents", Some(stored("helper")))).await;
    assert_eq!(status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&body));
    assert_eq!(headers[header::LOCATION], "/api/agents/helper");
    let created: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(created["version"], 1);
    assert_eq!(created["isEditable"], true);
    assert_eq!(created["definition"]["toolNames"], json!(["lookup"]));

    let mut changed = stored("helper");
    changed["instructions"] = json!("Help more.");
    let (status, body) = json_of(&app, request(Method::PUT, "/api/agents/helper", Some(changed))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["version"], 2);
    let (_, body) = json_of(&app, request(Method::GET, "/api/agents/helper", None)).await;
    assert_eq!(body["definition"]["instructions"], "Help more.");

    expect_problem(
        &app,
        request(Method::POST, "/api/agents", Some(stored("helper"))),
        StatusCode::CONFLICT,
        "agent_exists",
    )
    .await;
    expect_problem(
        &app,
        request(Method::PUT, "/api/agents/helper", Some(stored("other"))),
        StatusCode::BAD_REQUEST,
        "name_mismatch",
    )
    .await;
    expect_problem(
        &app,
        request(Method::PUT, "/api/agents/ghost", Some(stored("ghost"))),
        StatusCode::NOT_FOUND,
        "agent_not_found",
    )
    .await;

    let (list_status, list) = json_of(&app, request(Method::GET, "/api/agents", None)).await;
    assert_eq!(list_status, StatusCode::OK);
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["code-agent", "helper"]);

    let (status, _, _) = send(&app, request(Method::DELETE, "/api/agents/helper", None)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    expect_problem(&app, request(Method::DELETE, "/api/agents/helper", None), StatusCode::NOT_FOUND, "agent_not_found")
        .await;
    expect_problem(&app, request(Method::GET, "/api/agents/helper", None), StatusCode::NOT_FOUND, "agent_not_found")
        .await;
}

#[tokio::test]
async fn a_code_agent_is_readable_but_its_name_cannot_be_stored_replaced_or_deleted() {
    let app = app();
    let (status, body) = json_of(&app, request(Method::GET, "/api/agents/code-agent", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["definition"], Value::Null);
    assert_eq!(body["isEditable"], false);
    assert_eq!(body["source"], "Code");
    expect_problem(
        &app,
        request(Method::POST, "/api/agents", Some(stored("code-agent"))),
        StatusCode::CONFLICT,
        "agent_is_code_defined",
    )
    .await;
    expect_problem(
        &app,
        request(Method::PUT, "/api/agents/code-agent", Some(stored("code-agent"))),
        StatusCode::CONFLICT,
        "agent_is_code_defined",
    )
    .await;
    expect_problem(
        &app,
        request(Method::DELETE, "/api/agents/code-agent", None),
        StatusCode::CONFLICT,
        "agent_is_code_defined",
    )
    .await;
}

#[tokio::test]
async fn validate_answers_200_with_a_report_and_save_answers_400_with_the_same_problems() {
    let app = app();
    let bad = json!({"name": "x", "model": {"provider": "nope", "model": "m"}, "toolNames": ["missing"]});
    let (status, report) = json_of(&app, request(Method::POST, "/api/agents/validate", Some(bad.clone()))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(report["valid"], false);
    let codes: BTreeSet<&str> =
        report["problems"].as_array().unwrap().iter().map(|p| p["code"].as_str().unwrap()).collect();
    assert_eq!(codes, BTreeSet::from(["unknown_provider", "unknown_tool"]), "every problem, not the first");
    let doc = expect_problem(
        &app,
        request(Method::POST, "/api/agents", Some(bad)),
        StatusCode::BAD_REQUEST,
        "validation_failed",
    )
    .await;
    assert_eq!(doc["problems"], report["problems"]);

    let (status, report) = json_of(&app, request(Method::POST, "/api/agents/validate", Some(stored("fine")))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(report, json!({"valid": true, "problems": []}));
}

#[tokio::test]
async fn a_response_schema_is_refused_with_the_reason_it_is_invalid() {
    let app = app();
    let with_schema = |schema: Value| {
        let mut agent = stored("shaped");
        agent["model"]["responseFormat"] = json!({"type": "jsonSchema", "name": "answer", "schema": schema});
        agent
    };
    for (schema, reason) in [
        (json!({"type": 12}), "not valid against metaschema"),
        (json!({"type": "string", "pattern": "^\\p{L}+$"}), "Unicode character classes are not supported"),
    ] {
        let (status, report) =
            json_of(&app, request(Method::POST, "/api/agents/validate", Some(with_schema(schema)))).await;
        assert_eq!(status, StatusCode::OK);
        let problem = &report["problems"][0];
        assert_eq!(problem["code"], "invalid_response_format", "{report}");
        assert_eq!(problem["field"], "model.responseFormat.schema");
        let message = problem["message"].as_str().unwrap();
        assert!(message.contains(reason) && !message.contains("urn:"), "{message}");
    }
    let fine =
        with_schema(json!({"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{2}-\\d+$"}}}));
    let (_, report) = json_of(&app, request(Method::POST, "/api/agents/validate", Some(fine))).await;
    assert_eq!(report, json!({"valid": true, "problems": []}));
}

#[tokio::test]
async fn lists_clamp_a_large_take_and_refuse_paging_outside_the_documented_range() {
    let app = app();
    for i in 0..3 {
        send(&app, request(Method::POST, "/api/agents", Some(stored(&format!("a{i}"))))).await;
    }
    let (_, page) = json_of(&app, request(Method::GET, "/api/agents?skip=1&take=2", None)).await;
    let names: Vec<&str> = page.as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["a0", "a1"]);
    let (_, page) = json_of(&app, request(Method::GET, "/api/agents?take=100000", None)).await;
    assert_eq!(page.as_array().unwrap().len(), 4, "take above 200 is clamped");
    // What the document declares (skip ≥ 0, take ≥ 1, 64-bit integers) is what is enforced.
    for (query, field) in
        [("take=0", "take"), ("take=-3", "take"), ("skip=-1500", "skip"), ("skip=99999999999999999999", "skip")]
    {
        let doc = expect_problem(
            &app,
            request(Method::GET, &format!("/api/agents?{query}"), None),
            StatusCode::BAD_REQUEST,
            "validation_failed",
        )
        .await;
        assert_eq!(doc["field"], field, "{query}: {doc}");
    }
    expect_problem(
        &app,
        request(Method::GET, "/api/agents?skip=abc", None),
        StatusCode::BAD_REQUEST,
        "validation_failed",
    )
    .await;
}

// ---- bad input -------------------------------------------------------------------------

#[tokio::test]
async fn bad_input_answers_with_a_clear_problem_and_the_right_status() {
    let app = app();
    let raw = |method: Method, path: &str, content_type: &str, body: &str| {
        Request::builder()
            .method(method)
            .uri(path)
            .extension(loopback())
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(body.to_owned()))
            .unwrap()
    };
    expect_problem(
        &app,
        raw(Method::POST, "/api/agents/code-agent/run", "application/json", "{\"message\":"),
        StatusCode::BAD_REQUEST,
        "invalid_json",
    )
    .await;
    expect_problem(
        &app,
        raw(Method::POST, "/api/agents", "application/json", ""),
        StatusCode::BAD_REQUEST,
        "invalid_json",
    )
    .await;
    expect_problem(
        &app,
        raw(Method::POST, "/api/agents/code-agent/run", "text/plain", "{}"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    let doc = expect_problem(
        &app,
        request(Method::POST, "/api/agents/code-agent/run", Some(json!({"message": 5}))),
        StatusCode::BAD_REQUEST,
        "validation_failed",
    )
    .await;
    assert_eq!(doc["field"], "message");
    expect_problem(
        &app,
        request(Method::POST, "/api/agents/code-agent/run", Some(json!({"message": "hi", "userId": "x"}))),
        StatusCode::BAD_REQUEST,
        "validation_failed",
    )
    .await;
    expect_problem(
        &app,
        request(Method::POST, "/api/agents/code-agent/run", Some(json!({"message": "  "}))),
        StatusCode::BAD_REQUEST,
        "validation_failed",
    )
    .await;
    expect_problem(
        &app,
        request(Method::POST, "/api/agents/nobody/run", Some(json!({"message": "hi"}))),
        StatusCode::NOT_FOUND,
        "agent_not_found",
    )
    .await;
    let long = "a".repeat(65);
    let doc = expect_problem(
        &app,
        request(Method::POST, &format!("/api/agents/{long}/run"), Some(json!({"message": "hi"}))),
        StatusCode::BAD_REQUEST,
        "invalid_agent_name",
    )
    .await;
    assert!(doc["detail"].as_str().unwrap().contains("at most 64"));
    let doc = expect_problem(
        &app,
        request(Method::POST, "/api/agents", Some(stored(&long))),
        StatusCode::BAD_REQUEST,
        "validation_failed",
    )
    .await;
    assert_eq!(doc["problems"][0]["field"], "name");
    let huge = json!({"message": "x".repeat(2 * 1024 * 1024)});
    expect_problem(
        &app,
        request(Method::POST, "/api/agents/code-agent/run", Some(huge)),
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    )
    .await;
    expect_problem(&app, request(Method::GET, "/api/nothing-here", None), StatusCode::NOT_FOUND, "route_not_found")
        .await;
    expect_problem(
        &app,
        request(Method::PATCH, "/api/agents", None),
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    )
    .await;
}

#[tokio::test]
async fn a_nul_character_is_400_naming_the_field_in_every_filter_and_definition_field() {
    let app = app();
    for (path, field) in NUL_FILTERS {
        let doc =
            expect_problem(&app, request(Method::GET, path, None), StatusCode::BAD_REQUEST, "validation_failed").await;
        assert_eq!(doc["field"], field, "{path}: {doc}");
        assert!(doc["detail"].as_str().unwrap().contains("U+0000"), "{doc}");
    }
    for (key, value, field) in [
        ("displayName", json!("Bot\u{0}"), "displayName"),
        ("instructions", json!("Help.\u{0}"), "instructions"),
        ("metadata", json!({"owner": "a\u{0}b"}), "metadata.owner"),
        ("metadata", json!({"k\u{0}": "v"}), "metadata.k\\u0000"),
    ] {
        let mut body = stored("nul-agent");
        body[key] = value;
        let doc = expect_problem(
            &app,
            request(Method::POST, "/api/agents", Some(body)),
            StatusCode::BAD_REQUEST,
            "validation_failed",
        )
        .await;
        assert_eq!(doc["field"], field, "{doc}");
    }
    // A run message is refused the same way; the escaped text `\u0000` is just text.
    let doc = expect_problem(
        &app,
        request(Method::POST, "/api/agents/code-agent/run", Some(json!({"message": "hi\u{0}"}))),
        StatusCode::BAD_REQUEST,
        "validation_failed",
    )
    .await;
    assert_eq!(doc["field"], "message");
    let mut body = stored("escaped-agent");
    body["instructions"] = json!("Write \\u0000 literally.");
    let (status, created) = json_of(&app, request(Method::POST, "/api/agents", Some(body))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["definition"]["instructions"], "Write \\u0000 literally.");
    // Nothing was stored by the refused writes.
    let (_, list) = json_of(&app, request(Method::GET, "/api/agents", None)).await;
    assert!(!list.to_string().contains("nul-agent"), "{list}");
}

#[tokio::test]
async fn a_missing_required_parameter_is_named_before_the_run_starts() {
    let app = app();
    let mut def = stored("greeter");
    def["instructions"] = json!("Greet {{customer}}.");
    def["parameters"] = json!([{"name": "customer", "required": true}]);
    let (status, _, _) = send(&app, request(Method::POST, "/api/agents", Some(def))).await;
    assert_eq!(status, StatusCode::CREATED);
    let doc = expect_problem(
        &app,
        request(Method::POST, "/api/agents/greeter/run", Some(json!({"message": "hi"}))),
        StatusCode::BAD_REQUEST,
        "invalid_parameters",
    )
    .await;
    assert_eq!(doc["missing"], json!(["customer"]));
    assert!(doc["detail"].as_str().unwrap().contains("customer"));
    let doc = expect_problem(
        &app,
        request(
            Method::POST,
            "/api/agents/greeter/run",
            Some(json!({"message": "hi", "parameters": {"customer": "Ada", "age": 3}})),
        ),
        StatusCode::BAD_REQUEST,
        "invalid_parameters",
    )
    .await;
    assert_eq!(doc["unknown"], json!(["age"]));
    expect_problem(
        &app,
        request(
            Method::POST,
            "/api/agents/greeter/run",
            Some(json!({"message": "hi", "parameters": {"customer": {"nested": true}}})),
        ),
        StatusCode::BAD_REQUEST,
        "validation_failed",
    )
    .await;
    let (status, headers, _) = send(
        &app,
        request(
            Method::POST,
            "/api/agents/greeter/run",
            Some(json!({"message": "hi", "parameters": {"customer": "Ada"}})),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/event-stream");
}

// ---- live runs ---------------------------------------------------------------------------

#[tokio::test]
async fn a_run_streams_run_update_and_done_frames_with_two_tool_calls() {
    let app = app();
    let (status, headers, body) =
        send(&app, request(Method::POST, "/api/agents/code-agent/run", Some(json!({"message": "look"})))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/event-stream");
    let frames = frames(&body);
    let names: Vec<&str> = frames.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"run"));
    assert_eq!(names.last(), Some(&"done"));
    let run_id = frames[0].1["runId"].as_str().unwrap().to_owned();
    let tool_calls: Vec<&Value> = frames.iter().filter(|(_, d)| d["kind"] == "toolCall").map(|(_, d)| d).collect();
    let tool_results: Vec<&Value> = frames.iter().filter(|(_, d)| d["kind"] == "toolResult").map(|(_, d)| d).collect();
    assert_eq!(tool_calls.len(), 2);
    assert_eq!(
        tool_results.iter().map(|r| r["result"].as_str().unwrap()).collect::<Vec<_>>(),
        vec!["found a", "found b"]
    );
    let text: String =
        frames.iter().filter(|(_, d)| d["kind"] == "text").map(|(_, d)| d["text"].as_str().unwrap()).collect();
    assert_eq!(text, "All done here.");
    let done = &frames.last().unwrap().1;
    assert_eq!(done["runId"], run_id.as_str());
    assert_eq!(done["status"], "Completed");
    assert_eq!(done["usage"]["inputTokens"], 3);
}

#[tokio::test]
async fn an_approval_need_ends_the_stream_with_approvals_then_done() {
    let app = app();
    let (_, _, body) =
        send(&app, request(Method::POST, "/api/agents/code-agent/run", Some(json!({"message": "refund"})))).await;
    let frames = frames(&body);
    let names: Vec<&str> = frames.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(&names[names.len() - 2..], ["approvals", "done"]);
    let approvals = &frames[frames.len() - 2].1;
    assert_eq!(approvals[0]["toolName"], "refund");
    assert!(approvals[0]["requestId"].as_str().is_some());
    assert_eq!(frames.last().unwrap().1["status"], "AwaitingApproval");
}

#[tokio::test]
async fn a_provider_failure_after_the_stream_started_is_an_error_frame_without_foreign_text() {
    let app = app();
    let (status, _, body) =
        send(&app, request(Method::POST, "/api/agents/code-agent/run", Some(json!({"message": "fail"})))).await;
    assert_eq!(status, StatusCode::OK);
    let frames = frames(&body);
    let (name, error) = frames.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(error["errorType"], "provider_unavailable");
    assert_eq!(error["errorClass"], "ProviderUnavailable");
    assert!(!String::from_utf8_lossy(&body).contains("secret"));
}

#[tokio::test]
async fn a_draining_server_refuses_new_runs_with_503() {
    let (app, state) = app_with(HttpSettings::default());
    state.runtime.drain.start();
    expect_problem(
        &app,
        request(Method::POST, "/api/agents/code-agent/run", Some(json!({"message": "hi"}))),
        StatusCode::SERVICE_UNAVAILABLE,
        "shutting_down",
    )
    .await;
}

// ---- the API document --------------------------------------------------------------------

/// Routes that speak a protocol of their own, not the management API.
const PROTOCOL_SURFACES: &[&str] = &["/mcp", "/a2a/{agent}", "/a2a/{agent}/.well-known/agent-card.json"];

/// Every (method, path) the router mounts. axum has no public route listing, so this reads
/// the router's `Debug` output (pinned by Cargo.lock): the `paths` map names each route id,
/// and each method router's `allow_header` lists its methods.
fn mounted_routes(router: &Router) -> BTreeSet<(String, String)> {
    let debug = format!("{router:?}");
    let main = debug.split("fallback_router").next().unwrap();
    let path_re = regex::Regex::new(r#"RouteId\((\d+)\): "([^"]+)""#).unwrap();
    let methods_re =
        regex::Regex::new(r#"RouteId\((\d+)\): MethodRouter\(.*?allow_header: Bytes\(b"([A-Z,]*)"\)"#).unwrap();
    let paths: BTreeMap<String, String> =
        path_re.captures_iter(main).map(|c| (c[1].to_owned(), c[2].to_owned())).collect();
    let mut out = BTreeSet::new();
    for c in methods_re.captures_iter(main) {
        let path = paths.get(&c[1]).unwrap_or_else(|| panic!("route id {} has no path", &c[1]));
        for m in c[2].split(',').filter(|m| *m != "HEAD") {
            out.insert((m.to_ascii_lowercase(), path.clone()));
        }
    }
    out
}

#[test]
fn the_document_is_well_formed_for_generated_clients() {
    let doc: Value = serde_json::from_str(tracon_handlers::meta::openapi::DOCUMENT).unwrap();
    let mut ids = BTreeSet::new();
    let mut linked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(ids.insert(id.to_owned()), "operationId {id} repeats ({method} {path})");
            let open = tracon_handlers::access::requirement(&method.to_uppercase().parse().unwrap(), path)
                == tracon_handlers::access::Requirement::Open;
            assert_eq!(
                op["security"] == json!([]),
                open,
                "{method} {path}: an open route, and only one, has security: []"
            );
            if !open {
                assert!(op["responses"]["401"].is_object(), "{method} {path} documents 401");
            }
            for response in op["responses"].as_object().unwrap().values() {
                for link in response["links"].as_object().into_iter().flat_map(|l| l.values()) {
                    linked += 1;
                    assert!(link["operationId"].is_string(), "{method} {path}: {link}");
                }
            }
        }
    }
    let targets: BTreeSet<String> = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|i| i.as_object().unwrap().values())
        .flat_map(|op| op["responses"].as_object().unwrap().values())
        .flat_map(|r| r["links"].as_object().into_iter().flat_map(|l| l.values()))
        .map(|l| l["operationId"].as_str().unwrap().to_owned())
        .collect();
    assert!(targets.is_subset(&ids), "links name operations that exist: {:?}", targets.difference(&ids));
    // The body patterns are the parsers' own (the parsers' tests check they agree).
    let schemas = &doc["components"]["schemas"];
    use tracon_core::names::{AgentName, TenantId, ToolName};
    for (schema, field, pattern) in [
        ("AgentDefinition", "name", AgentName::PATTERN),
        ("CreateTenant", "id", TenantId::PATTERN),
        ("CreateRule", "toolName", ToolName::PATTERN),
        ("CreateRule", "agentName", AgentName::PATTERN),
        ("ScheduleInput", "agentName", AgentName::PATTERN),
        ("ScheduleInput", "workflowName", tracon_core::names::WorkflowName::PATTERN),
        ("TriggerBody", "targetName", AgentName::PATTERN),
    ] {
        assert_eq!(schemas[schema]["properties"][field]["pattern"], pattern, "{schema}.{field}");
    }
    assert!(linked > 20, "{linked}");
}

#[test]
fn the_served_openapi_document_is_generated_from_the_code() {
    let generated = tracon_handlers::meta::openapi::generate();
    if std::env::var_os("TRACON_UPDATE_OPENAPI").is_some() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
        std::fs::write(path, &generated).unwrap();
        return;
    }
    assert!(
        include_str!("../openapi.json") == generated,
        "handlers/openapi.json is stale: run `TRACON_UPDATE_OPENAPI=1 cargo test -p tracon-handlers --test http openapi` and commit it"
    );
    // What is served is that document, compact.
    let served: Value = serde_json::from_str(tracon_handlers::meta::openapi::DOCUMENT).unwrap();
    assert_eq!(served, serde_json::from_str::<Value>(&generated).unwrap());
    assert!(tracon_handlers::meta::openapi::DOCUMENT.len() < generated.len() * 3 / 5);
    assert!(!tracon_handlers::meta::openapi::DOCUMENT.contains("\n  "));
}

#[tokio::test]
async fn every_mounted_route_is_in_the_openapi_document() {
    let (router, _) = app_with(HttpSettings::default());
    let mut mounted = mounted_routes(&router);
    assert!(mounted.len() >= 9, "route discovery found too little: {mounted:?}");
    // Protocol surfaces are not management operations and stay out of the document (the
    // spec's "MCP server and A2A routes are protocol surfaces").
    for surface in PROTOCOL_SURFACES {
        let before = mounted.len();
        mounted.retain(|(_, path)| path != surface);
        assert!(mounted.len() < before, "{surface} is not mounted");
    }
    let (status, doc) = json_of(&router, request(Method::GET, "/api/openapi.json", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| item.as_object().unwrap().keys().map(move |m| (m.clone(), path.clone())))
        .collect();
    let missing: Vec<_> = mounted.difference(&documented).collect();
    assert!(missing.is_empty(), "mounted but not documented: {missing:?}");
    let stale: Vec<_> = documented.difference(&mounted).collect();
    assert!(stale.is_empty(), "documented but not mounted: {stale:?}");
}

// ---- the pipeline as a client sees it --------------------------------------------------------

struct DenyDangerous;
#[async_trait::async_trait]
impl tracon_core::tools::pipeline::ToolAuthorizer for DenyDangerous {
    async fn authorize(
        &self,
        r: &tracon_core::tools::pipeline::ToolAuthorizationRequest<'_>,
    ) -> Result<tracon_core::tools::pipeline::ToolDecision, String> {
        use tracon_core::tools::pipeline::ToolDecision;
        Ok(if r.tool_name == "dangerous" { ToolDecision::Deny("Not for you.".into()) } else { ToolDecision::Allow })
    }
}

#[tokio::test]
async fn every_pipeline_stage_shows_in_the_live_stream_and_the_run_completes() {
    use std::time::Duration;
    let tool = |name: &str, body: tracon_core::tools::FnTool<_>| {
        ToolRegistration::new(name, "A test tool.", json!({"type": "object"}), body)
    };
    let dangerous = tool("dangerous", tool_fn(|_, _| async { Ok(ToolOutput::from("boom")) }));
    let strict = ToolRegistration::new(
        "strict",
        "Needs an id.",
        json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}),
        tool_fn(|_, _| async { Ok(ToolOutput::from("ok")) }),
    );
    let slow = ToolRegistration::new(
        "slow",
        "Never finishes in time.",
        json!({"type": "object"}),
        tool_fn(|_, _| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(ToolOutput::from("late"))
        }),
    )
    .map(|t| t.timeout(Duration::from_millis(50)));
    let big = ToolRegistration::new(
        "big",
        "Returns too much.",
        json!({"type": "object"}),
        tool_fn(|_, _| async { Ok(ToolOutput::from("ü".repeat(100))) }),
    )
    .map(|t| t.max_output_bytes(7)); // 3½ characters of two bytes each: the cut falls inside one
    let failing = ToolRegistration::new(
        "failing",
        "Fails with a foreign error.",
        json!({"type": "object"}),
        tool_fn(|_, _| async {
            Err::<ToolOutput, tracon_core::tools::ToolError>(
                std::io::Error::other("dsn=postgres://admin:hunter2@db").into(),
            )
        }),
    );
    let script = ScriptedProvider::with_turns(
        "pipeline",
        vec![
            ScriptedTurn::tool_call("dangerous", json!({}))
                .and_tool_call("strict", json!({"id": "not a number"}))
                .and_tool_call("slow", json!({}))
                .and_tool_call("big", json!({}))
                .and_tool_call("failing", json!({})),
            ScriptedTurn::text("Handled everything."),
        ],
    );
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_tool(dangerous)
        .add_tool(strict)
        .add_tool(slow)
        .add_tool(big)
        .add_tool(failing)
        .tool_authorizer(Arc::new(DenyDangerous))
        .add_agent(AgentDefinition::new("p", "pipeline", "m").with_tools(&[
            "dangerous",
            "strict",
            "slow",
            "big",
            "failing",
        ]))
        .build()
        .unwrap();
    let app = tracon_handlers::router(AppState::new(Arc::new(runtime), HttpSettings::default()));
    let (_, _, body) = send(&app, request(Method::POST, "/api/agents/p/run", Some(json!({"message": "go"})))).await;
    let raw = String::from_utf8_lossy(&body).into_owned();
    let frames = frames(&body);
    let results: BTreeMap<String, Value> = frames
        .iter()
        .filter(|(_, d)| d["kind"] == "toolResult")
        .map(|(_, d)| (d["toolName"].as_str().unwrap().to_owned(), d.clone()))
        .collect();
    assert_eq!(results["dangerous"]["status"], "Denied");
    assert_eq!(results["dangerous"]["result"], "Not for you.");
    assert_eq!(results["strict"]["status"], "Rejected");
    assert_eq!(results["slow"]["status"], "TimedOut");
    assert_eq!(results["big"]["status"], "Succeeded");
    let envelope: Value = serde_json::from_str(results["big"]["result"].as_str().unwrap()).unwrap();
    assert_eq!(envelope, json!({"truncated": true, "omittedBytes": 194, "content": "üüü"}));
    assert_eq!(results["failing"]["status"], "Failed");
    assert_eq!(results["failing"]["error"], "Tool failed with IoError.");
    assert!(!raw.contains("hunter2"));
    assert_eq!(frames.last().unwrap().1["status"], "Completed", "{raw}");
}

// ---- serverless deployments ---------------------------------------------------------------------

#[tokio::test]
async fn a_serverless_deployment_serves_only_meta_until_a_token_is_configured() {
    use tracon_core::config::Config;
    let open = HttpSettings::serverless_from_config(&Config::default()).unwrap();
    let state = AppState::new(Arc::new(runtime_builder().build().unwrap()), open);
    let app = tracon_handlers::router(state);
    let meta = Request::get("/api/meta").body(Body::empty()).unwrap();
    let (status, _) = json_of(&app, meta).await;
    assert_eq!(status, StatusCode::OK);
    let doc = expect_problem(
        &app,
        Request::get("/api/agents").body(Body::empty()).unwrap(),
        StatusCode::SERVICE_UNAVAILABLE,
        "authentication_not_configured",
    )
    .await;
    assert!(doc["detail"].as_str().unwrap().contains("TRACON_AUTH_TOKEN"));

    let with_token = HttpSettings::serverless_from_config(&Config::from_pairs([("TRACON_AUTH_TOKEN", TOKEN)])).unwrap();
    let state = AppState::new(Arc::new(runtime_builder().build().unwrap()), with_token);
    let app = tracon_handlers::router(state);
    // No peer address (there is none on Lambda or Workers), and still served with the token.
    let req = Request::get("/api/agents")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .unwrap();
    let (status, _) = json_of(&app, req).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(&app, Request::get("/api/agents").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_group_deployment_serves_its_own_routes_and_meta_only() {
    let (_, state) = app_with(HttpSettings::default());
    let sessions_only = tracon_handlers::deployment_app(state, &tracon_handlers::groups::deployments::SESSIONS);
    let (status, _) = json_of(&sessions_only, request(Method::GET, "/api/sessions", None)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = json_of(&sessions_only, request(Method::GET, "/api/meta", None)).await;
    assert_eq!(status, StatusCode::OK);
    expect_problem(&sessions_only, request(Method::GET, "/api/agents", None), StatusCode::NOT_FOUND, "route_not_found")
        .await;
    expect_problem(&sessions_only, request(Method::GET, "/api/runs", None), StatusCode::NOT_FOUND, "route_not_found")
        .await;
}

// ---- cross-origin access ------------------------------------------------------------------

fn from_origin(mut req: Request<Body>, origin: &str) -> Request<Body> {
    req.headers_mut().insert(header::ORIGIN, origin.parse().unwrap());
    req
}

fn preflight(path: &str, origin: &str) -> Request<Body> {
    let mut req = from_origin(request(Method::OPTIONS, path, None), origin);
    req.headers_mut().insert(header::ACCESS_CONTROL_REQUEST_METHOD, "POST".parse().unwrap());
    req.headers_mut().insert(header::ACCESS_CONTROL_REQUEST_HEADERS, "authorization,content-type".parse().unwrap());
    req
}

#[tokio::test]
async fn no_cors_header_is_sent_until_an_origin_is_configured() {
    let router = app();
    let (status, headers, _) =
        send(&router, from_origin(request(Method::GET, "/api/agents", None), "https://app.example.com")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none(), "{headers:?}");
    let (_, headers, _) = send(&router, preflight("/api/agents", "https://app.example.com")).await;
    assert!(headers.keys().all(|k| !k.as_str().starts_with("access-control-")), "{headers:?}");
}

#[tokio::test]
async fn only_a_configured_exact_origin_gets_cors_headers() {
    let token = "cors-test-token-0123456789";
    let http =
        HttpSettings { allowed_origins: vec!["https://app.example.com".into()], ..HttpSettings::with_token(token) };
    let (router, _) = app_with(http);
    let authed = |req: Request<Body>| {
        let mut req = req;
        req.headers_mut().insert(header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        req
    };

    // A preflight carries no credentials and is answered without them.
    let (status, headers, _) = send(&router, preflight("/api/agents", "https://app.example.com")).await;
    assert!(status.is_success(), "{status}");
    assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], "https://app.example.com");
    let allowed = headers[header::ACCESS_CONTROL_ALLOW_HEADERS].to_str().unwrap().to_ascii_lowercase();
    assert!(allowed.contains("authorization") && allowed.contains("content-type"), "{allowed}");
    assert!(headers[header::ACCESS_CONTROL_ALLOW_METHODS].to_str().unwrap().contains("POST"));

    // The real request still needs the token; with it, the page may read the answer.
    let req = from_origin(request(Method::GET, "/api/agents", None), "https://app.example.com");
    let (status, _, _) = send(&router, req).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let req = authed(from_origin(request(Method::GET, "/api/agents", None), "https://app.example.com"));
    let (status, headers, _) = send(&router, req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], "https://app.example.com");
    assert!(headers.get_all(header::VARY).iter().any(|v| v.to_str().unwrap().contains("origin")), "{headers:?}");

    // Anything that is not exactly the configured origin gets no CORS header at all.
    for other in ["https://evil.example.com", "https://app.example.com.evil.com", "http://app.example.com", "null"] {
        let req = authed(from_origin(request(Method::GET, "/api/agents", None), other));
        let (status, headers, _) = send(&router, req).await;
        assert_eq!(status, StatusCode::OK);
        assert!(headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none(), "{other}: {headers:?}");
        let (_, headers, _) = send(&router, preflight("/api/agents", other)).await;
        assert!(headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none(), "{other}: {headers:?}");
    }
}
