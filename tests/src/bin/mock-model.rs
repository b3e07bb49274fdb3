//! `mock-model`: the mock model server on its own, for manual runs and load tests.
//!
//! Prints one line, `mock-model listening on http://127.0.0.1:PORT`, then serves until
//! SIGTERM or ctrl-c. Scripts are registered over HTTP (`POST /_mock/scripts/{model}`).

use std::io::Write;
use std::net::SocketAddr;

use clap::Parser;
use tracon_tests::mock::{MockConfig, MockServer};

/// How scripts are given, for `--help`.
const SCRIPT_FORMAT: &str = "\
Scripts (per model name; a model without one answers \"Hello from the mock model.\"):
  POST /_mock/scripts/{model}   {\"turns\": [TURN, ...], \"select\": \"byAssistantMessages\" | \"byRequest\"}
  DELETE /_mock/scripts/{model} removes it
  GET /_mock/requests/{model}   the requests it got, oldest first ({\"path\", \"query\", \"body\", ...})
  PUT /_mock/chaos              a share of requests fails; DELETE turns it off, GET reports
  POST /_mock/release/{model}   streams held by hangAfterChunks go on

A TURN is one answer; every field is optional:
  {\"text\": \"Looking it up.\",
   \"toolCalls\": [{\"name\": \"lookup\", \"arguments\": {\"q\": \"x\"}, \"id\": \"call_1\"}],
   \"usage\": {\"input\": 20, \"output\": 7},   (null: no usage at all)
   \"finish\": \"stop\" | \"tool_calls\" | \"length\" | \"content_filter\" | \"prompt_filtered\",
   \"status\": 503,                             (answer with this HTTP error instead)
   \"hang\": true, \"hangAfterChunks\": 2, \"delayMs\": 100, \"chunkDelayMs\": 10}
A string \"arguments\" is sent verbatim (so it can be invalid JSON).

select: byAssistantMessages (default) answers turn N to a request whose conversation already
holds N assistant messages, so a fresh conversation starts at turn 0 and a tool round trip
walks the script; byRequest answers turn N to the N-th request. Past the end the last turn
repeats.

Example:
  curl -X POST localhost:PORT/_mock/scripts/gpt-4o-mini -H 'Content-Type: application/json' \\
    -d '{\"turns\": [{\"toolCalls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Izmir\"}}]},
                   {\"text\": \"It is sunny in Izmir.\"}]}'";

#[derive(Debug, Parser)]
#[command(
    name = "mock-model",
    about = "A mock OpenAI / Anthropic / Gemini / Azure OpenAI model server answering from scripts.",
    after_help = SCRIPT_FORMAT
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
