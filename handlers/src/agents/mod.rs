//! The agents group: definitions as data (`/api/agents`, versions, diffs, rollback,
//! validation) in [`definitions`], starting a run (`POST /api/agents/{name}/run`) in [`run`],
//! and a run's prompt counted against its model's context window
//! (`POST /api/agents/{name}/estimate`) in [`estimate`].

pub mod definitions;
pub mod estimate;
pub mod run;

use axum::Router;
use axum::routing::{get, post};

use crate::state::AppState;

/// The agents group: definitions, their history, and starting runs (the live run streams).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/agents", get(definitions::list).post(definitions::create))
        .route("/api/agents/validate", post(definitions::validate))
        .route("/api/agents/{name}", get(definitions::get).put(definitions::replace).delete(definitions::delete))
        .route("/api/agents/{name}/versions", get(definitions::versions))
        .route("/api/agents/{name}/versions/{a}/diff/{b}", get(definitions::diff))
        .route("/api/agents/{name}/rollback", post(definitions::rollback))
        .route("/api/agents/{name}/run", post(run::run))
        .route("/api/agents/{name}/estimate", post(estimate::estimate))
}
