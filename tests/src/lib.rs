//! Test support for Tracon.
//!
//! [`mock`] is a mock model server that speaks the OpenAI Chat Completions and Anthropic
//! Messages wire formats, answering from scripts, so end-to-end tests and load tests run
//! real providers against it without a network or a key. The `mock-model` binary serves it
//! stand-alone. [`chaos`] is a TCP proxy that cuts connections on demand, to take a database
//! away and give it back. [`mcp`] is a real MCP server (the official SDK's server side) for the
//! MCP client's tests, and [`oauth`] the local authorization server its OAuth tests use.

pub mod bench;
pub mod chaos;
pub mod mcp;
pub mod mock;
pub mod modules;
pub mod oauth;
