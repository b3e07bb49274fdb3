//! `mock-model`: the mock model server on its own, for manual runs and load tests.
//!
//! Prints one line, `mock-model listening on http://127.0.0.1:PORT`, then serves until
//! SIGTERM or ctrl-c. Scripts are registered over HTTP (`POST /_mock/scripts/{model}`).

use std::io::Write;
use std::net::SocketAddr;

use clap::Parser;
use tracon_tests::mock::{MockConfig, MockServer};

#[derive(Debug, Parser)]
#[command(
    name = "mock-model",
    about = "A mock OpenAI / Anthropic / Gemini / Azure OpenAI model server answering from scripts."
)]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Wait before sending response headers, for every response that sets no delay.
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Wait between streamed chunks, for every response that sets no chunk delay.
    #[arg(long, default_value_t = 0)]
    chunk_delay_ms: u64,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let config = MockConfig { latency_ms: args.latency_ms, chunk_delay_ms: args.chunk_delay_ms };
    let server = MockServer::start_on(SocketAddr::from(([127, 0, 0, 1], args.port)), config).await?;
    {
        // The one line a launcher waits for; flushed so a pipe sees it at once.
        let mut out = std::io::stdout().lock();
        writeln!(out, "mock-model listening on {}", server.base_url())?;
        out.flush()?;
    }
    shutdown_signal().await;
    server.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
