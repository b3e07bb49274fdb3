//! Inbound triggers: `/api/triggers` management (scope `TriggersAdmin`) and the accept
//! endpoint `POST /api/triggers/{tenantId}/{name}`, which carries **no** bearer token.
//!
//! The accept endpoint's whole authentication is the HMAC signature. It checks, in order:
//!
//! 1. the body size (`MaxBodyBytes`): `413` from `Content-Length`, or as soon as a streamed
//!    body passes the limit — it is never read further;
//! 2. the source address: one whose requests failed verification more than
//!    `MaxUnverifiedRequestsPerMinute` times is `429` before any lookup (per process);
//! 3. the tenant (from the URL only), the trigger (exists, enabled), `X-Tracon-Timestamp`
//!    (inside `TimestampTolerance`, either direction), `X-Tracon-Signature` (HMAC-SHA256
//!    over `"{timestamp}.{rawBody}"` with the secret read from configuration now). Every
//!    failure here answers the same generic `401`, byte for byte, so names cannot be
//!    enumerated, and counts against the source address — never against the trigger;
//! 4. the per-trigger limit (`MaxRequestsPerMinute`), which counts verified requests only:
//!    `429` + `Retry-After`;
//! 5. the signature is reserved as the replay key in the idempotency store, for the whole
//!    installation: a replay — to this trigger or to any other that shares its secret, in
//!    any tenant — is `409` and never a second run;
//! 6. the message is taken from the body (`400` when `payloadPath` finds nothing), and a
//!    queued run is accepted: `202` with `Location`.
//!
//! A trigger names its secret's configuration key, under its tenant's partition of
//! `AllowedConfigurationPrefix` ([`tracon_core::secret_names`]).
//!
//! A host without a job consumer answers `503 queue_unavailable` rather than accept work
//! nobody will run. Definition writes (`PUT`, `DELETE`) are audited before they are
//! applied: a write that cannot be audited is refused (`503 audit_unavailable`).

pub mod accept;
pub mod definitions;
pub mod settings;

use axum::Router;
use axum::routing::{get, post};

use crate::state::AppState;

/// The triggers group: definitions (scope `TriggersAdmin`) and the signed accept endpoint.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/triggers", get(definitions::list))
        .route("/api/triggers/{name}", get(definitions::get).put(definitions::put).delete(definitions::delete))
        .route("/api/triggers/{tenantId}/{name}", post(accept::accept))
}
