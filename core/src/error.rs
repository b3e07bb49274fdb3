//! The error vocabulary the stores speak, and the text rule every store applies alike.
//!
//! [`StoreError`] is what every store port returns: a conflict, a missing record, a store
//! that cannot be reached now, a failure of its own, or text it cannot hold (U+0000,
//! [`crate::text`]). Its `detail` is for the log only; the HTTP layer maps each kind to one
//! status and `errorType` (`tracon_handlers::error`).

/// A store failure. `detail` is for the log; it never reaches a response.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness or concurrency rule refused the write (the display text is ours).
    #[error("{0}")]
    Conflict(String),
    #[error("not found")]
    NotFound,
    /// The store cannot be reached right now (a `503` at the edge).
    #[error("store unavailable")]
    Unavailable { detail: String },
    #[error("store failure")]
    Internal { detail: String },
    /// A text value no store can hold: U+0000 ([`crate::text`]). Every store refuses it the
    /// same way, before it writes or queries anything; `field` names where it was.
    #[error("'{field}' contains U+0000")]
    InvalidText { field: String },
    /// A run row guarded on a definitions generation was not written: the tenant's agent or
    /// skill definitions changed since the run's agent was compiled
    /// ([`crate::runs::store::RunStore::create_run_at`]). The run is compiled again; it reaches
    /// no response unless definitions keep changing under every attempt.
    #[error("the agent's definitions changed while the run started")]
    DefinitionsMoved,
}

/// `Err(InvalidText)` when `value` holds U+0000 (see [`crate::text`]).
pub fn check_text(field: &str, value: &str) -> Result<(), StoreError> {
    if crate::text::has_nul(value) {
        return Err(StoreError::InvalidText { field: field.to_owned() });
    }
    Ok(())
}

/// [`check_text`] for an optional value.
pub fn check_text_opt(field: &str, value: Option<&str>) -> Result<(), StoreError> {
    value.map_or(Ok(()), |v| check_text(field, v))
}
