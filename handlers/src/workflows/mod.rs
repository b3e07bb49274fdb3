//! The workflows group: definitions as data (`/api/workflows`, versions, validation, the
//! graph, the registered functions) in [`definitions`], and runs — starting one, its
//! checkpoints, resuming it, the requests it asks a person and their answers — in [`run`].

pub mod definitions;
pub mod run;

use axum::Router;
use axum::routing::{get, post};

use crate::state::AppState;

/// The workflows group (its runs stream, like an agent's).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/workflows", get(definitions::list).post(definitions::create))
        .route("/api/workflows/validate", post(definitions::validate))
        .route("/api/workflows/functions", get(definitions::functions))
        .route("/api/workflows/{name}", get(definitions::get).put(definitions::replace).delete(definitions::delete))
        .route("/api/workflows/{name}/versions", get(definitions::versions))
        .route("/api/workflows/{name}/graph", get(definitions::graph))
        .route("/api/workflows/{name}/run", post(run::run))
        .route("/api/workflows/runs/{id}/checkpoints", get(run::checkpoints))
        .route("/api/workflows/runs/{id}/resume", post(run::resume))
        .route("/api/workflows/runs/{id}/requests", get(run::requests))
        .route("/api/workflows/runs/{id}/requests/{request}/respond", post(run::respond))
}
