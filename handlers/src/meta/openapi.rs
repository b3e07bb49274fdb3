//! The OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]` annotations.
//!
//! The document is generated once, by a test, into `handlers/openapi.json`, and served from
//! there as static bytes: no host builds it per request, and the Worker bundle carries 60 KB
//! (gzipped) less code. `build.rs` drops the file's indentation (139 KB of the 295 KB), so
//! what is served is the same document, compact. The test
//! `the_served_openapi_document_is_generated_from_the_code` fails when the file is stale
//! (`TRACON_UPDATE_OPENAPI=1` rewrites it), and another test walks every route the router
//! mounts and fails when one is missing from the document.

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::OpenApi;

/// The generated document as committed (`handlers/openapi.json`), without its indentation.
pub const DOCUMENT: &str = include_str!(concat!(env!("OUT_DIR"), "/openapi.min.json"));

#[derive(OpenApi)]
#[openapi(
    info(title = "Tracon", description = "Agent control plane: definitions, runs and their records over HTTP."),
    paths(
        crate::meta::meta,
        crate::meta::openapi::document,
        crate::agents::definitions::list,
        crate::agents::definitions::get,
        crate::agents::definitions::create,
        crate::agents::definitions::replace,
        crate::agents::definitions::delete,
        crate::agents::definitions::validate,
        crate::agents::definitions::versions,
        crate::agents::definitions::diff,
        crate::agents::definitions::rollback,
        crate::agents::run::run,
        crate::agents::estimate::estimate,
        crate::models::list,
        crate::models::health,
        crate::skills::definitions::list,
        crate::skills::definitions::get,
        crate::skills::definitions::create,
        crate::skills::definitions::replace,
        crate::skills::definitions::delete,
        crate::skills::definitions::versions,
        crate::skills::definitions::version,
        crate::workflows::definitions::list,
        crate::workflows::definitions::get,
        crate::workflows::definitions::create,
        crate::workflows::definitions::replace,
        crate::workflows::definitions::delete,
        crate::workflows::definitions::validate,
        crate::workflows::definitions::versions,
        crate::workflows::definitions::graph,
        crate::workflows::definitions::functions,
        crate::workflows::run::run,
        crate::workflows::run::resume,
        crate::workflows::run::respond,
        crate::workflows::run::checkpoints,
        crate::workflows::run::requests,
        crate::runs::list,
        crate::runs::get,
        crate::runs::events,
        crate::runs::tools,
        crate::runs::input,
        crate::runs::cancel,
        crate::runs::tree,
        crate::runs::replay::replay,
        crate::runs::compare,
        crate::runs::stats,
        crate::sessions::list,
        crate::sessions::get,
        crate::sessions::delete,
        crate::sessions::branch,
        crate::security::keys::list,
        crate::security::keys::create,
        crate::security::keys::get,
        crate::security::keys::revoke,
        crate::security::keys::rotate,
        crate::security::audit::list,
        crate::security::audit::verify,
        crate::approvals::pending,
        crate::approvals::get,
        crate::approvals::decide::decide,
        crate::approvals::rules::list_rules,
        crate::approvals::rules::create_rule,
        crate::approvals::rules::delete_rule,
        crate::security::tenants::list,
        crate::security::tenants::get,
        crate::security::tenants::create,
        crate::security::tenants::update,
        crate::security::tenants::delete,
        crate::security::providers::list_providers,
        crate::security::providers::put_provider,
        crate::security::providers::delete_provider,
        crate::security::providers::get_egress,
        crate::security::providers::put_egress,
        crate::security::providers::delete_egress,
        crate::jobs::list,
        crate::jobs::get,
        crate::jobs::cancel,
        crate::webhooks::list,
        crate::webhooks::create,
        crate::webhooks::get,
        crate::webhooks::update,
        crate::webhooks::delete,
        crate::webhooks::test,
        crate::webhooks::deliveries,
        crate::openai::chat::chat_completions,
        crate::openai::models,
        crate::openai::model,
        crate::openai::responses::create_response,
        crate::openai::responses::get_response,
        crate::openai::responses::delete_response,
        crate::openai::input_items::list_input_items,
        crate::openai::conversations::create_conversation,
        crate::openai::conversations::get_conversation,
        crate::openai::conversations::delete_conversation,
        crate::openai::conversations::list_conversation_items,
        crate::schedules::list,
        crate::schedules::get,
        crate::schedules::create,
        crate::schedules::update,
        crate::schedules::delete,
        crate::mcp_servers::list,
        crate::mcp_servers::read,
        crate::mcp_servers::create,
        crate::mcp_servers::replace,
        crate::mcp_servers::delete,
        crate::mcp_servers::refresh,
        crate::mcp_servers::oauth::authorize_server,
        crate::mcp_servers::oauth::callback,
        crate::mcp_servers::oauth::forget,
        crate::triggers::definitions::list,
        crate::triggers::definitions::get,
        crate::triggers::definitions::put,
        crate::triggers::definitions::delete,
        crate::triggers::accept::accept,
        crate::meta::widget::embed_js,
    ),
    components(schemas(
        crate::error::ProblemDetails,
        tracon_core::definition::AgentDefinition,
        tracon_core::report::ValidationReport,
    )),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "meta", description = "Server metadata"),
        (name = "agents", description = "Agent definitions"),
        (name = "skills", description = "Skills: instructions and text resources agents load on demand"),
        (name = "models", description = "The model catalog and provider health"),
        (name = "workflows", description = "Workflows: several agents run together, with checkpoints and human input"),
        (name = "runs", description = "Running agents and reading what happened"),
        (name = "sessions", description = "Conversations between turns"),
        (name = "security", description = "API keys, tenants and the audit trail"),
        (name = "approvals", description = "Tool calls waiting for a person, and standing pre-approvals"),
        (name = "webhooks", description = "Outbound webhooks: signed event deliveries to your endpoints"),
        (name = "openai", description = "OpenAI-compatible endpoints: `model` is an agent name"),
        (name = "mcp_servers", description = "Remote MCP servers whose tools, prompts and resources agents use"),
        (name = "triggers", description = "Inbound triggers: signed requests from other systems that start queued runs"),
        (name = "widget", description = "The embeddable chat widget's script"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// This document.
#[utoipa::path(get, path = "/api/openapi.json", tag = "meta", responses((status = 200, description = "OpenAPI 3.1 document", body = Object)))]
pub async fn document() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT)
}

/// The document as the annotations describe it now, with the [`conventions`] every route
/// shares, in the committed file's format.
pub fn generate() -> String {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    conventions(&mut doc);
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// What every route shares, written into the document once here rather than on each
/// annotation, from the same sources the server answers from:
///
/// - security: an open route (`crate::access::requirement`) has `security: []`; every other
///   one answers `401` (no or a bad credential), `403` (a key without the scope, another
///   tenant named, a non-loopback caller of an unauthenticated server) and `429` (the rate
///   limit, when configured);
/// - input: a route with parameters or a JSON body answers `400` (`validation_failed`, a
///   bad name, U+0000 anywhere); a JSON body also `413` (over `MaxRequestBodyBytes`) and
///   `415` (not JSON);
/// - parameter schemas: `skip`/`take` and every path id carry the server's own rules
///   (ranges, the name patterns of `tracon_core::names`, UUIDs);
/// - errors are `application/problem+json`, except under `/v1`, which answers OpenAI's
///   `{"error": {…}}` envelope as `application/json`.
pub fn conventions(doc: &mut serde_json::Value) {
    use serde_json::{Value, json};
    let problem = json!({"$ref": "#/components/schemas/ProblemDetails"});
    let openai_error = json!({"$ref": "#/components/schemas/OpenAiError"});
    if let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut) {
        schemas.insert(
            "OpenAiError".into(),
            json!({
                "type": "object",
                "description": "OpenAI's error envelope, which every `/v1` error answers with.",
                "required": ["error"],
                "properties": {"error": {
                    "type": "object",
                    "required": ["message", "type", "code"],
                    "properties": {
                        "message": {"type": "string"},
                        "type": {"type": "string"},
                        "param": {"type": ["string", "null"]},
                        "code": {"type": ["string", "null"]}
                    }
                }}
            }),
        );
    }
    unsigned_ranges(doc);
    // `validate` reports what breaks a definition's rules instead of refusing it: its body is
    // the definition's shape without the rules (a wrong type is still a 400).
    if let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut)
        && let Some(mut draft) = schemas.get("AgentDefinition").cloned()
    {
        if let Some(name) = draft.pointer_mut("/properties/name").and_then(Value::as_object_mut) {
            name.remove("pattern");
        }
        draft["description"] =
            json!("A definition to check: the shape of AgentDefinition, whose rules are reported, not enforced.");
        schemas.insert("AgentDefinitionDraft".into(), draft);
    }
    if let Some(body) =
        doc.pointer_mut("/paths/~1api~1agents~1validate/post/requestBody/content/application~1json/schema")
    {
        *body = json!({"$ref": "#/components/schemas/AgentDefinitionDraft"});
    }
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else { return };
    // Handler names repeat across groups (`list`, `get`): the group makes them unique.
    for (path, item) in paths.iter_mut() {
        let group = path.trim_start_matches('/').split('/').nth(1).unwrap_or_default().replace('-', "_");
        for op in item.as_object_mut().into_iter().flat_map(|i| i.values_mut()) {
            if let Some(id) = op.get("operationId").and_then(Value::as_str) {
                let unique = if id.starts_with(&group) { id.to_owned() } else { format!("{group}_{id}") };
                op["operationId"] = Value::String(unique);
            }
        }
    }
    add_links(paths);
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for (method, op) in item.iter_mut() {
            let Ok(m) = axum::http::Method::from_bytes(method.to_ascii_uppercase().as_bytes()) else { continue };
            let Some(op) = op.as_object_mut() else { continue };
            let open = crate::access::requirement(&m, path) == crate::access::Requirement::Open;
            let v1 = path.starts_with("/v1/");
            let error = |description: &str| {
                let (content_type, schema) =
                    if v1 { ("application/json", &openai_error) } else { ("application/problem+json", &problem) };
                json!({"description": description, "content": {content_type: {"schema": schema}}})
            };
            if let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) {
                for param in params.iter_mut() {
                    let name = param["name"].as_str().unwrap_or_default().to_owned();
                    let location = param["in"].as_str().unwrap_or_default().to_owned();
                    if let Some(schema) = parameter_schema(path, &name, &location) {
                        param["schema"] = schema;
                    }
                }
            }
            let has_params = op.get("parameters").and_then(Value::as_array).is_some_and(|p| !p.is_empty());
            let json_body = op
                .get("requestBody")
                .and_then(|b| b.get("content"))
                .and_then(Value::as_object)
                .is_some_and(|c| c.keys().any(|k| k == "application/json"));
            let responses = op.entry("responses").or_insert_with(|| json!({}));
            let Some(responses) = responses.as_object_mut() else { continue };
            for response in responses.values_mut() {
                if let Some(media) = response.pointer_mut("/content/text~1event-stream") {
                    media["schema"] = sse_event_schema(path);
                }
            }
            let mut add = |status: &str, description: &str| {
                responses.entry(status.to_owned()).or_insert_with(|| error(description));
            };
            if has_params || json_body {
                add("400", "The request is invalid: a malformed parameter or body (U+0000 is refused everywhere)");
            }
            if json_body {
                add("413", "The body is larger than Tracon:Http:MaxRequestBodyBytes");
                add("415", "The body is not JSON");
            }
            if open {
                op.insert("security".into(), json!([]));
            } else {
                add("401", "No credential, or one that is not valid");
                add("403", "The credential may not use this route, or may not act for this tenant");
                add("429", "Over the rate limit (when configured); Retry-After says when to try again");
            }
        }
    }
}

/// Where a response names a resource other operations take: OpenAPI links, so a client
/// (and a stateful test) can follow a created resource to its reads, updates and deletes.
fn add_links(paths: &mut serde_json::Map<String, serde_json::Value>) {
    use serde_json::{Value, json};
    // (source path, method, status, parameter, runtime expression, targets (path, method)).
    type Link =
        (&'static str, &'static str, &'static str, &'static str, &'static str, &'static [(&'static str, &'static str)]);
    const LINKS: &[Link] = &[
        (
            "/api/agents",
            "post",
            "201",
            "name",
            "$response.body#/definition/name",
            &[
                ("/api/agents/{name}", "get"),
                ("/api/agents/{name}", "put"),
                ("/api/agents/{name}", "delete"),
                ("/api/agents/{name}/versions", "get"),
                ("/api/agents/{name}/rollback", "post"),
                ("/api/agents/{name}/run", "post"),
            ],
        ),
        (
            "/api/runs",
            "get",
            "200",
            "id",
            "$response.body#/0/id",
            &[
                ("/api/runs/{id}", "get"),
                ("/api/runs/{id}/events", "get"),
                ("/api/runs/{id}/input", "get"),
                ("/api/runs/{id}/tools", "get"),
                ("/api/runs/{id}/tree", "get"),
                ("/api/runs/{id}/replay", "post"),
                ("/api/runs/{id}/cancel", "post"),
            ],
        ),
        (
            "/api/jobs",
            "get",
            "200",
            "id",
            "$response.body#/0/id",
            &[("/api/jobs/{id}", "get"), ("/api/jobs/{id}/cancel", "post")],
        ),
        (
            "/api/sessions",
            "get",
            "200",
            "id",
            "$response.body#/0/id",
            &[("/api/sessions/{id}", "get"), ("/api/sessions/{id}", "delete"), ("/api/sessions/{id}/branch", "post")],
        ),
        (
            "/api/approvals/pending",
            "get",
            "200",
            "id",
            "$response.body#/0/id",
            &[("/api/approvals/{id}", "get"), ("/api/approvals/{id}/decision", "post")],
        ),
        ("/api/approvals/rules", "post", "201", "id", "$response.body#/id", &[("/api/approvals/rules/{id}", "delete")]),
        (
            "/api/api-keys",
            "post",
            "201",
            "id",
            "$response.body#/id",
            &[("/api/api-keys/{id}", "get"), ("/api/api-keys/{id}", "delete"), ("/api/api-keys/{id}/rotate", "post")],
        ),
        (
            "/api/tenants",
            "post",
            "201",
            "id",
            "$response.body#/id",
            &[("/api/tenants/{id}", "get"), ("/api/tenants/{id}", "put"), ("/api/tenants/{id}", "delete")],
        ),
        (
            "/api/schedules",
            "post",
            "201",
            "id",
            "$response.body#/id",
            &[("/api/schedules/{id}", "get"), ("/api/schedules/{id}", "put"), ("/api/schedules/{id}", "delete")],
        ),
        (
            "/api/mcp-servers",
            "post",
            "201",
            "name",
            "$response.body#/name",
            &[
                ("/api/mcp-servers/{name}", "get"),
                ("/api/mcp-servers/{name}", "put"),
                ("/api/mcp-servers/{name}", "delete"),
            ],
        ),
        (
            "/api/triggers/{name}",
            "put",
            "201",
            "name",
            "$response.body#/name",
            &[("/api/triggers/{name}", "get"), ("/api/triggers/{name}", "delete")],
        ),
        (
            "/api/webhooks",
            "post",
            "201",
            "id",
            "$response.body#/id",
            &[
                ("/api/webhooks/{id}", "get"),
                ("/api/webhooks/{id}", "put"),
                ("/api/webhooks/{id}", "delete"),
                ("/api/webhooks/{id}/test", "post"),
                ("/api/webhooks/{id}/deliveries", "get"),
            ],
        ),
        (
            "/v1/conversations",
            "post",
            "200",
            "id",
            "$response.body#/id",
            &[
                ("/v1/conversations/{id}", "get"),
                ("/v1/conversations/{id}", "delete"),
                ("/v1/conversations/{id}/items", "get"),
            ],
        ),
        ("/v1/responses", "post", "200", "id", "$response.body#/id", &[("/v1/responses/{id}", "get")]),
    ];
    for (source, method, status, parameter, expression, targets) in LINKS {
        let mut links = serde_json::Map::new();
        for (path, target_method) in *targets {
            let Some(operation_id) =
                paths.get(*path).and_then(|i| i.get(*target_method)).and_then(|o| o.get("operationId")).cloned()
            else {
                continue;
            };
            let name = operation_id.as_str().unwrap_or_default().to_owned();
            links.insert(name, json!({"operationId": operation_id, "parameters": {*parameter: expression}}));
        }
        if let Some(response) = paths
            .get_mut(*source)
            .and_then(|i| i.get_mut(*method))
            .and_then(|o| o.pointer_mut(&format!("/responses/{status}")))
            && !links.is_empty()
        {
            response["links"] = Value::Object(links);
        }
    }
}

/// utoipa writes Rust's unsigned integers as `int32`/`int64` with `minimum: 0`, which says
/// the top half of their range is refused: a `u32` accepts up to 4 294 967 295 and a `u64`
/// up to 18 446 744 073 709 551 615, so the document says that instead.
fn unsigned_ranges(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let integer = match map.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(types)) => types.iter().any(|t| t == "integer"),
                _ => false,
            };
            let unsigned =
                integer && map.get("minimum").and_then(Value::as_u64) == Some(0) && !map.contains_key("maximum");
            match map.get("format").and_then(Value::as_str) {
                Some("int32") if unsigned => {
                    map.insert("format".into(), "int64".into());
                    map.insert("maximum".into(), u32::MAX.into());
                }
                Some("int64") if unsigned => {
                    map.remove("format");
                    map.insert("maximum".into(), u64::MAX.into());
                }
                _ => {}
            }
            map.values_mut().for_each(unsigned_ranges);
        }
        Value::Array(items) => items.iter_mut().for_each(unsigned_ranges),
        _ => {}
    }
}

/// What one server-sent event of a stream carries (OpenAPI 3.1 describes an event stream
/// by its events): the live run's five frame names with a JSON `data`; the event log's event
/// types with `id: <sequence>` and a JSON `data`; the OpenAI streams' JSON chunks (and
/// chat's closing `[DONE]`).
fn sse_event_schema(path: &str) -> serde_json::Value {
    use serde_json::json;
    let json_data = json!({"type": "string", "contentMediaType": "application/json"});
    if path.ends_with("/run") {
        json!({"type": "object", "required": ["event", "data"], "properties": {
            "event": {"type": "string", "enum": ["run", "update", "approvals", "done", "error"]},
            "data": json_data}})
    } else if path.ends_with("/events") {
        json!({"type": "object", "required": ["event", "data"], "properties": {
            "event": {"type": "string", "description": "The recorded event's type (`run.started`, `message.delta`, …)"},
            "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The event's sequence number"},
            "data": json_data}})
    } else {
        json!({"type": "object", "required": ["data"], "properties": {
            "event": {"type": "string"},
            "data": {"type": "string", "description": "A JSON chunk (chat's last event is `[DONE]`)"}}})
    }
}

/// A parameter's schema, from the rules the server applies to it (`None`: as annotated).
fn parameter_schema(path: &str, name: &str, location: &str) -> Option<serde_json::Value> {
    use serde_json::json;
    use tracon_core::names::{AgentName, SessionId, TenantId};
    let pattern = |p: &str| json!({"type": "string", "pattern": p});
    let uuid = || json!({"type": "string", "format": "uuid"});
    let group = path.trim_start_matches('/').split('/').nth(1).unwrap_or_default();
    Some(match (location, name) {
        ("query", "skip") => json!({"type": "integer", "format": "int64", "minimum": 0, "maximum": i64::MAX,
            "default": 0, "description": "Items to skip"}),
        ("query", "take") => json!({"type": "integer", "format": "int64", "minimum": 1, "maximum": i64::MAX,
            "default": crate::extract::DEFAULT_TAKE,
            "description": format!("Items to return; at most {} are (larger values are clamped)", crate::extract::MAX_TAKE)}),
        ("query", "status") if group == "runs" => {
            let names: Vec<&str> = tracon_core::runs::store::RunStatus::ALL.iter().map(|s| s.as_str()).collect();
            json!({"type": "string", "enum": names})
        }
        ("query", "limit") if group == "conversations" => {
            json!({"type": "integer", "minimum": 1, "maximum": 100, "default": 20})
        }
        ("query", "order") if group == "conversations" => {
            json!({"type": "string", "enum": ["asc", "desc"], "default": "desc"})
        }
        ("query", "from" | "to") => json!({"type": "string", "format": "date-time"}),
        ("query", "label") => json!({"type": "string", "pattern": ":", "description": "key:value; repeatable"}),
        ("path", "name") if group == "agents" => pattern(AgentName::PATTERN),
        ("path", "name") if group == "skills" => {
            json!({"type": "string", "pattern": tracon_core::names::SkillName::PATTERN,
            "maxLength": tracon_core::names::MAX_SKILL_NAME_LEN})
        }
        ("path", "version") if group == "skills" => json!({"type": "integer", "minimum": 1, "maximum": u32::MAX}),
        ("path", "name") if group == "triggers" => pattern(tracon_core::triggers::TriggerName::PATTERN),
        ("path", "name") if group == "mcp-servers" => pattern(tracon_core::mcp::McpServerName::PATTERN),
        ("query", "name") if group == "mcp-servers" => pattern(tracon_core::mcp::McpServerName::PATTERN),
        ("path", "tenantId") => pattern(TenantId::PATTERN),
        ("path", "a" | "b") if group == "agents" => json!({"type": "integer", "minimum": 1, "maximum": u32::MAX}),
        ("path", "a" | "b") if group == "runs" => uuid(),
        ("path", "id") => match group {
            "sessions" => pattern(SessionId::PATTERN),
            "tenants" => pattern(TenantId::PATTERN),
            "api-keys" => pattern(tracon_core::keys::ID_PATTERN),
            "responses" => pattern("^resp_[0-9a-f]{32}$"),
            "conversations" => pattern(SessionId::PATTERN),
            "runs" | "jobs" | "webhooks" | "approvals" | "schedules" => uuid(),
            "rules" => uuid(),
            _ => return None,
        },
        _ => return None,
    })
}
