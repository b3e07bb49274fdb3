//! `GET /embed.js`: the embeddable chat widget (`handlers/assets/embed.js`), served as
//! static bytes by every host.
//!
//! The route is open (`crate::access::requirement`): a `<script src>` carries no
//! `Authorization` header, and the file holds no secret — the page supplies its own
//! `RunsWrite` API key in `data-api-key`. The widget's calls to the run endpoint are
//! cross-origin, so the embedding page's origin must be in `Tracon:AllowedOrigins`.
//! `scripts/widget-size.sh` keeps the file within its 15 KB (gzipped) budget.

use axum::http::header;
use axum::response::IntoResponse;

/// The widget, as committed: hand-written JavaScript, no build step.
pub const EMBED_JS: &str = include_str!("../../assets/embed.js");

/// A five-minute cache: a widget update reaches pages soon, without a request per page view.
const CACHE_CONTROL: &str = "public, max-age=300";

/// The embeddable chat widget script (no authentication required).
#[utoipa::path(get, path = "/embed.js", tag = "widget", security(()),
    responses((status = 200, description = "The widget's JavaScript", content_type = "text/javascript", body = String)))]
pub async fn embed_js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, CACHE_CONTROL),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        EMBED_JS,
    )
}
