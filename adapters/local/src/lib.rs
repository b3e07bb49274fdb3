//! The local server's pieces, shared by the `tracon` binary and by a host that serves the same
//! product with registrations of its own (the end-to-end tests' probe server adds tools that
//! count their executions): [`cli`] (the command line), [`server`] (the listener, logging,
//! graceful drain), [`app`] (stores, runtime and HTTP state from configuration), [`jobs`]
//! (the in-process job consumer and tick), [`health`] (`tracon health`: the model providers'
//! health).

pub mod app;
pub mod cli;
pub mod health;
pub mod jobs;
pub mod server;
