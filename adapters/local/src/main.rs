//! `tracon` — the local server: every endpoint group on one port, in-memory stores, a
//! demo agent that works without any key. `tracon` and `tracon serve` are the same.

// The request path allocates many small, short-lived buffers (JSON, SSE frames, HTTP);
// mimalloc serves those markedly cheaper than the system allocator (see bench-run).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod app;
mod demo;
mod server;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tracon_core::config::Config;

#[derive(Parser)]
#[command(name = "tracon", version, about = "Tracon: an agent control plane")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve(ServeArgs),
}

#[derive(clap::Args, Clone)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "TRACON_LISTEN", default_value = "127.0.0.1:5081")]
    listen: SocketAddr,
    /// How long in-flight runs may finish after SIGTERM / Ctrl-C before they are cancelled.
    #[arg(long, env = "TRACON_DRAIN_TIMEOUT_SECONDS", default_value_t = 30.0)]
    drain_timeout_seconds: f64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = Config::from_pairs(std::env::vars());
    if let Err(e) = server::init_logging(&config) {
        eprintln!("tracon: {e}");
        return ExitCode::from(2);
    }
    let args = match cli.command {
        Some(Command::Serve(a)) => a,
        None => cli.serve,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tracon: could not start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let drain = Duration::from_secs_f64(args.drain_timeout_seconds.max(0.0));
    match runtime.block_on(server::serve(config, args.listen, drain)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tracon: {e}");
            ExitCode::from(1)
        }
    }
}
