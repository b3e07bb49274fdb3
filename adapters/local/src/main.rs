//! `tracon` — the local server: every endpoint group on one port, a demo agent that works
//! without any key; in-memory stores by default, Postgres with `--database-url`.
//!
//! - `tracon` / `tracon serve` — serve the HTTP API;
//! - `tracon migrate` — apply the database migrations and exit (`0 applied` when current);
//! - `tracon migrate status` — list pending migrations without writing;
//! - `tracon health` — check every configured model provider, one line each (exit 1 when any
//!   is Unhealthy).

// The request path allocates many small, short-lived buffers (JSON, SSE frames, HTTP);
// mimalloc serves those markedly cheaper than the system allocator (see bench-run).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

fn main() -> ExitCode {
    tracon::cli::main(|builder| builder)
}
