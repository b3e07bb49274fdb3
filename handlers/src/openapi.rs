//! The OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]` annotations.
//! A test walks every route the router mounts and fails when one is missing here.

use axum::Json;
use utoipa::OpenApi;

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
pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
