//! Tracon's store ports on PostgreSQL.
//!
//! - [`sql`] — every statement, in one place: the sqlx stores here and the Worker's
//!   tokio-postgres stores run the same text;
//! - [`codec`] — column values ⇄ domain types, shared by both drivers;
//! - [`protect`] — at-rest content protection (AES-256-GCM behind a per-value header);
//! - [`pg`] (feature `sqlx`) — the sqlx stores, the pool, migrations and SQLSTATE mapping.

pub mod codec;
pub mod protect;
pub mod sql;
pub mod webhooks;

#[cfg(feature = "sqlx")]
pub mod pg;
