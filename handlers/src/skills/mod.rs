//! The skills group: `/api/skills` — list, read, create, replace and delete skills, and read
//! their versions. Code skills are listed and readable (`isEditable: false`) but the API
//! refuses to store, replace or delete under their names (`409`): a stored copy would never
//! be used. Writes are audited (`skill.create`, `skill.update`, `skill.delete`) as agent
//! writes are; a skill that carries scripts is refused (`400 skill_scripts_unsupported`).

pub mod definitions;

use axum::Router;
use axum::routing::get;

use crate::state::AppState;

/// The skills group (beside the agent definitions that name them).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/skills", get(definitions::list).post(definitions::create))
        .route("/api/skills/{name}", get(definitions::get).put(definitions::replace).delete(definitions::delete))
        .route("/api/skills/{name}/versions", get(definitions::versions))
        .route("/api/skills/{name}/versions/{version}", get(definitions::version))
}
