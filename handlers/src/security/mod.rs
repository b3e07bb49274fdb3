//! The security administration, served by every deployment: API keys ([`keys`]), the
//! audit trail ([`audit`]), standing approval rules ([`crate::approvals::rules`]), tenants
//! ([`tenants`]) and their own provider credentials and egress policies ([`providers`]).

pub mod audit;
pub mod keys;
pub mod providers;
pub mod tenants;

use axum::Router;
use axum::routing::{delete, get, post};

use crate::approvals::rules;
use crate::state::AppState;

/// The security group.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/api-keys", get(keys::list).post(keys::create))
        .route("/api/api-keys/{id}", get(keys::get).delete(keys::revoke))
        .route("/api/api-keys/{id}/rotate", post(keys::rotate))
        .route("/api/audit", get(audit::list))
        .route("/api/audit/verify", get(audit::verify))
        .route("/api/approvals/rules", get(rules::list_rules).post(rules::create_rule))
        .route("/api/approvals/rules/{id}", delete(rules::delete_rule))
        .route("/api/tenants", get(tenants::list).post(tenants::create))
        .route("/api/tenants/{id}", get(tenants::get).put(tenants::update).delete(tenants::delete))
        .route("/api/tenants/{id}/providers", get(providers::list_providers))
        .route(
            "/api/tenants/{id}/providers/{provider}",
            axum::routing::put(providers::put_provider).delete(providers::delete_provider),
        )
        .route(
            "/api/tenants/{id}/egress",
            get(providers::get_egress).put(providers::put_egress).delete(providers::delete_egress),
        )
}
