//! Tracon's store ports on PostgreSQL.
//!
//! - [`sql`] — every statement, in one place: the sqlx stores here and the Worker's
//!   tokio-postgres stores run the same text;
//! - [`codec`] — column values ⇄ domain types, shared by both drivers;
//! - [`driver`] — the seam the stores are written over ([`driver::Driver`]);
//! - [`store`] — every store port, written once over a driver;
//! - [`protect`] — at-rest content protection (AES-256-GCM behind a per-value header);
//! - [`pg`] (feature `sqlx`) — the sqlx driver, the pool, migrations and SQLSTATE mapping.

pub mod codec;
pub mod driver;
pub mod protect;
pub mod settings;
pub mod sql;
pub mod store;
pub mod webhooks;

#[cfg(feature = "sqlx")]
pub mod pg;
