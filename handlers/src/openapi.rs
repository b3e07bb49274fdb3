//! The OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]` annotations.
//!
//! The document is generated once, by a test, into `handlers/openapi.json`, and served from
//! there as static bytes: no host builds it per request, and the Worker bundle carries 60 KB
//! (gzipped) less code. The test `the_served_openapi_document_is_generated_from_the_code`
//! fails when the file is stale (`TRACON_UPDATE_OPENAPI=1` rewrites it), and another test
//! walks every route the router mounts and fails when one is missing from the document.

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::OpenApi;

/// The generated document, as committed.
pub const DOCUMENT: &str = include_str!("../openapi.json");

#[derive(OpenApi)]
#[openapi(
    info(title = "Tracon", description = "Agent control plane: definitions, runs and their records over HTTP."),
    paths(
        crate::meta::meta,
        crate::openapi::document,
        crate::agents::list,
        crate::agents::get,
        crate::agents::create,
        crate::agents::replace,
        crate::agents::delete,
        crate::agents::validate,
        crate::agents::versions,
        crate::agents::diff,
        crate::agents::rollback,
        crate::run::run,
        crate::runs::list,
        crate::runs::get,
        crate::runs::events,
        crate::runs::tools,
        crate::runs::input,
        crate::runs::cancel,
        crate::runs::compare,
        crate::runs::stats,
        crate::sessions::list,
        crate::sessions::get,
        crate::sessions::delete,
        crate::sessions::branch,
        crate::keys::list,
        crate::keys::create,
        crate::keys::get,
        crate::keys::revoke,
        crate::keys::rotate,
        crate::audit::list,
        crate::audit::verify,
        crate::approvals::pending,
        crate::approvals::get,
        crate::approvals::decide,
        crate::approvals::list_rules,
        crate::approvals::create_rule,
        crate::approvals::delete_rule,
        crate::tenants::list,
        crate::tenants::get,
        crate::tenants::create,
        crate::tenants::update,
        crate::tenants::delete,
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
        crate::openai::chat_completions,
        crate::openai::models,
        crate::openai_responses::create_response,
        crate::openai_responses::get_response,
        crate::openai_responses::create_conversation,
        crate::openai_responses::get_conversation,
        crate::openai_responses::delete_conversation,
        crate::openai_responses::list_conversation_items,
        crate::schedules::list,
        crate::schedules::get,
        crate::schedules::create,
        crate::schedules::update,
        crate::schedules::delete,
        crate::triggers::list,
        crate::triggers::get,
        crate::triggers::put,
        crate::triggers::delete,
        crate::triggers::accept,
        crate::widget::embed_js,
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
        (name = "runs", description = "Running agents and reading what happened"),
        (name = "sessions", description = "Conversations between turns"),
        (name = "security", description = "API keys, tenants and the audit trail"),
        (name = "approvals", description = "Tool calls waiting for a person, and standing pre-approvals"),
        (name = "webhooks", description = "Outbound webhooks: signed event deliveries to your endpoints"),
        (name = "openai", description = "OpenAI-compatible endpoints: `model` is an agent name"),
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

/// The document as the annotations describe it now, in the committed file's format.
pub fn generate() -> String {
    let mut text = ApiDoc::openapi().to_pretty_json().unwrap_or_default();
    text.push('\n');
    text
}
