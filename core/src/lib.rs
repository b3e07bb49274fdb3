//! Tracon core: the platform-agnostic heart of the control plane.
//!
//! - [`definition`] — agent definitions as data; [`compiler`] and [`catalog`] turn them into
//!   runnable [`compiler::CompiledAgent`]s.
//! - [`tools`] — the `Tool` trait, registrations, and the call [`tools::pipeline`].
//! - [`model`] — the provider port and the OpenAI, Anthropic and scripted providers.
//! - [`engine`] — the streaming tool-call loop; [`events`] its event vocabulary.
//! - [`error`] — [`error::StoreError`], what every store port returns;
//! - [`definitions`], [`runs`], [`sessions`], [`keys`], [`audit`], … — each aggregate's
//!   records, port and in-memory store side by side; [`stores`] bundles the ports;
//! - [`runs`] — also the run lifecycle every run-starting surface calls;
//! - [`ports`] — clock and spawner, supplied by the adapter.
//! - [`runtime`] — the builder an adapter calls at start-up.
//!
//! Core names no web framework, database driver or platform, and builds for
//! `wasm32-unknown-unknown`.

pub mod access;
pub mod approvals;
pub mod attribution;
pub mod audit;
pub mod background;
pub mod catalog;
pub mod compiler;
pub mod config;
#[cfg(feature = "contract-tests")]
pub mod contract;
pub mod culture;
pub mod definition;
pub mod definitions;
pub mod demo;
pub mod egress;
pub mod engine;
pub mod error;
pub mod events;
pub mod exposure;
pub mod failure;
pub mod harness;
pub mod idempotency;
pub mod identity;
pub mod jobs;
pub mod keys;
pub mod model;
pub mod names;
pub mod placeholders;
pub mod platform;
pub mod ports;
pub mod pricing;
pub mod quota;
pub mod recorder;
pub mod report;
pub mod runs;
pub mod runtime;
pub mod schedules;
pub mod schema;
pub mod secret_names;
pub mod sessions;
pub mod setup;
pub mod stores;
pub mod structured;
pub(crate) mod sync;
pub mod tenants;
pub mod text;
pub mod tokens;
pub mod tools;
pub mod triggers;
pub mod webhooks;
pub mod workflows;
