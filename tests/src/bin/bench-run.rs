//! `bench-run`: how much latency the Tracon runtime adds to a model call, and how much
//! memory the server needs while doing it.
//!
//! What is measured, per concurrency level C (default `1,64`):
//!
//! - **baseline** — `POST {mock}/v1/chat/completions` (streamed, with usage) straight to the
//!   in-process mock model server, reading the whole streamed body;
//! - **subject** — `POST /api/agents/support/run` on a real `tracon` child process whose
//!   `openai` provider points at that same mock, reading the whole SSE body. The demo agent
//!   `support` gets the mock's default answer (short text, no tool calls), so every run is
//!   exactly one model call; a run counts as failed unless its body contains `event: done`.
//!
//! Each request is timed with [`Instant`] from send to the last body byte. C workers share
//! one `reqwest::Client` (pool ≥ C, `TCP_NODELAY`), first through a warm-up that is not
//! recorded, then through N requests (default 2000 at C=1, 20000 otherwise). The report
//! gives p50/p99 of both, the difference (subject − baseline, a difference of percentiles),
//! throughput, the CPU each request cost the server and this process, and the server's
//! peak memory (`VmHWM` from `/proc/<pid>/status`, Linux only). Targets: under 1 ms added
//! at p50 and under 5 ms added at p99 with 64 concurrent runs.
//!
//! Everything runs on one machine: at C=64 the client, the mock and the server compete
//! for the same cores, so "added" includes the server's CPU cost queueing behind the
//! others — which is what a co-located deployment sees too.
//!
//! Run it (from the workspace root):
//!
//! ```text
//! cargo build --release -p tracon
//! cargo run --release -p tracon-tests --bin bench-run -- [--requests N] [--concurrency 1,64] \
//!     [--tracon target/release/tracon] [--mock-latency-ms 0] [--mock-chunk-delay-ms 0] [--json out.json]
//! ```
//!
//! It exits non-zero when any request failed or the server could not be started; a missed
//! target is reported, not an error.

// A report tool: its output is the point, so printing to stdout is the job.
#![allow(clippy::print_stdout)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use reqwest::header::CONTENT_TYPE;
use serde_json::{Value, json};
use tracon_tests::bench::{BoxError, Phase, Server, loopback_client, measure, resolve_binary};
use tracon_tests::mock::{MockConfig, MockServer};

type Result<T, E = BoxError> = std::result::Result<T, E>;

/// The demo agent shipped with the local server.
const AGENT: &str = "support";
/// The model name the server is configured with; the mock has no script for it.
const MODEL: &str = "bench";
const QUESTION: &str = "Where is order 4182?";
/// A single request that takes this long is a failure, not a data point.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Targets at C = [`TARGET_CONCURRENCY`], in milliseconds added over the baseline.
const TARGET_CONCURRENCY: usize = 64;
const TARGET_P50_MS: f64 = 1.0;
const TARGET_P99_MS: f64 = 5.0;

/// The bench's name, in its progress lines.
const NAME: &str = "bench-run";

#[derive(Debug, Parser)]
#[command(
    name = "bench-run",
    about = "Measures the latency Tracon adds on POST /api/agents/{name}/run over calling the model directly."
)]
struct Args {
    /// Measured requests per phase [default: 2000 at C=1, 20000 otherwise].
    #[arg(long)]
    requests: Option<usize>,
    /// Concurrency levels, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    concurrency: Vec<usize>,
    /// Unrecorded warm-up requests per phase (at least 4 per worker, so every pooled
    /// connection is open before measuring).
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// The `tracon` binary (a relative path is also tried from the workspace root).
    #[arg(long, default_value = "target/release/tracon")]
    tracon: PathBuf,
    /// Mock model: wait before sending response headers.
    #[arg(long, default_value_t = 0)]
    mock_latency_ms: u64,
    /// Mock model: wait between streamed chunks.
    #[arg(long, default_value_t = 0)]
    mock_chunk_delay_ms: u64,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

impl Args {
    fn requests_for(&self, concurrency: usize) -> usize {
        self.requests.unwrap_or(if concurrency <= 1 { 2_000 } else { 20_000 })
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("bench-run: some requests failed (see the report above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("bench-run: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The whole benchmark; `Ok(false)` when it completed but some requests failed.
async fn run(args: Args) -> Result<bool> {
    if args.concurrency.is_empty() || args.concurrency.contains(&0) {
        return Err("--concurrency needs one or more levels, each at least 1".into());
    }
    if args.requests == Some(0) {
        return Err("--requests must be at least 1".into());
    }
    let tracon_bin = resolve_binary(&args.tracon)?;

    let mock_config = MockConfig { latency_ms: args.mock_latency_ms, chunk_delay_ms: args.mock_chunk_delay_ms };
    let mock = MockServer::start(mock_config).await.map_err(|e| format!("could not start the mock model: {e}"))?;
    let mock_url = mock.base_url();

    let max_concurrency = args.concurrency.iter().copied().max().unwrap_or(1);
    let client = loopback_client(max_concurrency, REQUEST_TIMEOUT)?;

    // From here on the guard kills the server on every path, errors included.
    let server = Server::start(&tracon_bin, &mock_url, &[])
        .await
        .map_err(|e| format!("could not start {}: {e}", tracon_bin.display()))?;
    let pid = server.pid();

    let baseline = Arc::new(Target {
        url: format!("{mock_url}/v1/chat/completions"),
        body: Bytes::from(
            json!({
                "model": MODEL,
                "stream": true,
                "stream_options": {"include_usage": true},
                "messages": [{"role": "user", "content": QUESTION}],
            })
            .to_string(),
        ),
        must_contain: b"data: [DONE]",
    });
    let subject = Arc::new(Target {
        url: format!("{}/api/agents/{AGENT}/run", server.base),
        body: Bytes::from(json!({ "message": QUESTION }).to_string()),
        must_contain: b"event: done",
    });

    // One request of each before anything else, so a misconfiguration fails fast and clearly.
    one_request(&client, &baseline).await.map_err(|e| format!("the mock model does not answer: {e}"))?;
    one_request(&client, &subject).await.map_err(|e| {
        format!("POST /api/agents/{AGENT}/run did not complete (server log: {}): {e}", server.log_hint())
    })?;

    let mut levels = Vec::new();
    for &c in &args.concurrency {
        let n = args.requests_for(c);
        let warmup = args.warmup.max(4 * c);
        eprintln!("bench-run: C={c}: baseline ({warmup} warm-up + {n} requests)…");
        let base = measure(NAME, c, warmup, n, pid, sender(&client, &baseline)).await?;
        forget_mock_requests(&client, &mock_url).await;
        eprintln!("bench-run: C={c}: subject ({warmup} warm-up + {n} runs)…");
        let subj = measure(NAME, c, warmup, n, pid, sender(&client, &subject)).await?;
        forget_mock_requests(&client, &mock_url).await;
        let memory_after = Memory::read(pid);
        levels.push(Level { concurrency: c, warmup, baseline: base, subject: subj, memory_after });
    }
    let memory = Memory::read(pid);
    let server_runs = 1 + levels.iter().map(|l| l.warmup + l.subject.requests).sum::<usize>();

    let report = Report { args: &args, tracon_bin: &tracon_bin, mock_config, levels: &levels, memory, server_runs };
    println!("{}", report.text());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.json())?;
        std::fs::write(path, text).map_err(|e| format!("could not write {}: {e}", path.display()))?;
        println!("JSON written to {}", path.display());
    }

    server.stop();
    mock.shutdown().await;
    Ok(levels.iter().all(|l| l.baseline.failures == 0 && l.subject.failures == 0))
}

/// One kind of request: where it goes and what a complete answer contains.
struct Target {
    url: String,
    body: Bytes,
    must_contain: &'static [u8],
}

/// Sends one request and reads the whole body; the time from send to last byte.
async fn one_request(client: &reqwest::Client, target: &Target) -> Result<Duration, String> {
    let started = Instant::now();
    let response = client
        .post(&target.url)
        .header(CONTENT_TYPE, "application/json")
        .body(target.body.clone())
        .send()
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| format!("read: {e}"))?;
    let elapsed = started.elapsed();
    // Checked after the clock stops, so verification is not part of the latency.
    if !status.is_success() {
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body[..body.len().min(300)])));
    }
    if !contains(&body, target.must_contain) {
        return Err(format!(
            "the body lacks `{}`: {}",
            String::from_utf8_lossy(target.must_contain),
            String::from_utf8_lossy(&body[..body.len().min(300)])
        ));
    }
    Ok(elapsed)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// Sends `target` once per call, for [`measure`].
fn sender(
    client: &reqwest::Client,
    target: &Arc<Target>,
) -> impl Fn(usize) -> futures::future::BoxFuture<'static, Result<Duration, String>> + Clone + Send + Sync + 'static {
    let (client, target) = (client.clone(), target.clone());
    move |_| {
        let (client, target) = (client.clone(), target.clone());
        Box::pin(async move { one_request(&client, &target).await })
    }
}

/// The mock records every request; between phases that log is only memory.
async fn forget_mock_requests(client: &reqwest::Client, mock_url: &str) {
    // Best effort: a failure only means the mock keeps some memory.
    let _ = client.delete(format!("{mock_url}/_mock/requests/{MODEL}")).send().await;
}

/// Resident memory of the server (kB), from `/proc/<pid>/status`; `None` off Linux.
#[derive(Clone, Copy)]
struct Memory {
    hwm_kb: u64,
    rss_kb: u64,
}

impl Memory {
    fn read(pid: u32) -> Option<Memory> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        };
        Some(Memory { hwm_kb: field("VmHWM:")?, rss_kb: field("VmRSS:")? })
    }
}

struct Level {
    concurrency: usize,
    warmup: usize,
    baseline: Phase,
    subject: Phase,
    memory_after: Option<Memory>,
}

impl Level {
    fn added_ms(&self, p: f64) -> f64 {
        self.subject.percentile_ms(p) - self.baseline.percentile_ms(p)
    }

    fn ratio_p50(&self) -> f64 {
        self.subject.percentile_ms(50.0) / self.baseline.percentile_ms(50.0).max(f64::MIN_POSITIVE)
    }

    fn meets_p50(&self) -> bool {
        self.added_ms(50.0) < TARGET_P50_MS
    }

    fn meets_p99(&self) -> bool {
        self.added_ms(99.0) < TARGET_P99_MS
    }
}

struct Report<'a> {
    args: &'a Args,
    tracon_bin: &'a Path,
    mock_config: MockConfig,
    levels: &'a [Level],
    memory: Option<Memory>,
    /// Runs the server executed in total (warm-ups and the first check included); the
    /// in-memory store keeps every one, so memory grows with this.
    server_runs: usize,
}

fn yes_no(ok: bool) -> &'static str {
    if ok { "yes" } else { "NO" }
}

fn opt_us(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.0}"))
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

impl Report<'_> {
    fn command_line() -> String {
        std::env::args().map(|a| if a.contains(' ') { format!("'{a}'") } else { a }).collect::<Vec<_>>().join(" ")
    }

    fn cores() -> usize {
        std::thread::available_parallelism().map_or(1, usize::from)
    }

    fn text(&self) -> String {
        // `write!` to a String cannot fail; the results are ignored on purpose.
        let mut out = String::new();
        let _ = writeln!(out, "\n== Tracon run latency benchmark ==");
        let _ = writeln!(out, "command:  {}", Self::command_line());
        let _ = writeln!(out, "tracon:   {}", self.tracon_bin.display());
        let _ = writeln!(out, "cores:    {}", Self::cores());
        let _ = writeln!(
            out,
            "mock:     latency_ms={} chunk_delay_ms={}; baseline = POST /v1/chat/completions (stream), \
             subject = POST /api/agents/{AGENT}/run (SSE)",
            self.mock_config.latency_ms, self.mock_config.chunk_delay_ms
        );
        let _ = writeln!(out, "times:    send → last body byte; ms; percentiles are nearest-rank");

        let _ = writeln!(out, "\n-- per phase --");
        let _ = writeln!(
            out,
            "{:>4} {:<8} {:>6} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>12} {:>12}",
            "C",
            "phase",
            "reqs",
            "fail",
            "mean",
            "p50",
            "p90",
            "p99",
            "p99.9",
            "max",
            "req/s",
            "srvCPU us/rq",
            "clientCPU us"
        );
        for l in self.levels {
            for (name, p) in [("baseline", &l.baseline), ("subject", &l.subject)] {
                let _ = writeln!(
                    out,
                    "{:>4} {:<8} {:>6} {:>5} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>9.0} {:>12} {:>12}",
                    l.concurrency,
                    name,
                    p.requests,
                    p.failures,
                    p.mean_ms(),
                    p.percentile_ms(50.0),
                    p.percentile_ms(90.0),
                    p.percentile_ms(99.0),
                    p.percentile_ms(99.9),
                    p.percentile_ms(100.0),
                    p.throughput(),
                    // The server does no work in the baseline; its column shows idle noise there.
                    opt_us(p.cpu_us_per_request(p.server_cpu)),
                    opt_us(p.cpu_us_per_request(p.bench_cpu)),
                );
            }
        }

        let _ = writeln!(out, "\n-- added by Tracon (subject − baseline) --");
        let _ = writeln!(
            out,
            "{:>4} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9} {:>10} {:>10} {:>8} {:>8}",
            "C",
            "base p50",
            "base p99",
            "subj p50",
            "subj p99",
            "added p50",
            "added p99",
            "ratio p50",
            "base rq/s",
            "subj rq/s",
            "p50<1ms",
            "p99<5ms"
        );
        for l in self.levels {
            let _ = writeln!(
                out,
                "{:>4} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>10.3} {:>10.3} {:>8.2}x {:>10.0} {:>10.0} {:>8} {:>8}",
                l.concurrency,
                l.baseline.percentile_ms(50.0),
                l.baseline.percentile_ms(99.0),
                l.subject.percentile_ms(50.0),
                l.subject.percentile_ms(99.0),
                l.added_ms(50.0),
                l.added_ms(99.0),
                l.ratio_p50(),
                l.baseline.throughput(),
                l.subject.throughput(),
                yes_no(l.meets_p50()),
                yes_no(l.meets_p99()),
            );
        }

        let _ = writeln!(out, "\n-- targets (C={TARGET_CONCURRENCY}) --");
        match self.levels.iter().find(|l| l.concurrency == TARGET_CONCURRENCY) {
            Some(l) => {
                let _ = writeln!(
                    out,
                    "added p50 {:.3} ms < {TARGET_P50_MS} ms: {}",
                    l.added_ms(50.0),
                    if l.meets_p50() { "MET" } else { "NOT MET" }
                );
                let _ = writeln!(
                    out,
                    "added p99 {:.3} ms < {TARGET_P99_MS} ms: {}",
                    l.added_ms(99.0),
                    if l.meets_p99() { "MET" } else { "NOT MET" }
                );
            }
            None => {
                let _ = writeln!(out, "not measured (add {TARGET_CONCURRENCY} to --concurrency)");
            }
        }

        let _ =
            writeln!(out, "\n-- tracon memory (pid /proc/<pid>/status, {} runs kept in memory) --", self.server_runs);
        for l in self.levels {
            match l.memory_after {
                Some(m) => {
                    let _ = writeln!(out, "after C={:<3} VmRSS {:>8.1} MiB", l.concurrency, mib(m.rss_kb));
                }
                None => {
                    let _ = writeln!(out, "after C={:<3} unavailable", l.concurrency);
                }
            }
        }
        match self.memory {
            Some(m) => {
                let _ =
                    writeln!(out, "at end      VmRSS {:>8.1} MiB, peak VmHWM {:.1} MiB", mib(m.rss_kb), mib(m.hwm_kb));
            }
            None => {
                let _ = writeln!(out, "peak memory unavailable (needs Linux /proc)");
            }
        }

        let failed: Vec<_> = self
            .levels
            .iter()
            .flat_map(|l| [("baseline", l.concurrency, &l.baseline), ("subject", l.concurrency, &l.subject)])
            .filter(|(_, _, p)| p.failures > 0)
            .collect();
        let _ = writeln!(out, "\n-- failures --");
        if failed.is_empty() {
            let _ = writeln!(out, "none");
        }
        for (name, c, p) in failed {
            let _ = writeln!(out, "C={c} {name}: {} failed (warm-up included); first: {:?}", p.failures, p.errors);
        }
        out
    }

    fn json(&self) -> Value {
        let phase = |p: &Phase| {
            json!({
                "requests": p.requests,
                "failures": p.failures,
                "errors": p.errors,
                "meanMs": p.mean_ms(),
                "p50Ms": p.percentile_ms(50.0),
                "p90Ms": p.percentile_ms(90.0),
                "p99Ms": p.percentile_ms(99.0),
                "p999Ms": p.percentile_ms(99.9),
                "maxMs": p.percentile_ms(100.0),
                "requestsPerSecond": p.throughput(),
                "wallSeconds": p.wall.as_secs_f64(),
                "serverCpuUsPerRequest": p.cpu_us_per_request(p.server_cpu),
                "clientCpuUsPerRequest": p.cpu_us_per_request(p.bench_cpu),
            })
        };
        let levels: Vec<Value> = self
            .levels
            .iter()
            .map(|l| {
                json!({
                    "concurrency": l.concurrency,
                    "warmup": l.warmup,
                    "baseline": phase(&l.baseline),
                    "subject": phase(&l.subject),
                    "addedP50Ms": l.added_ms(50.0),
                    "addedP99Ms": l.added_ms(99.0),
                    "ratioP50": l.ratio_p50(),
                    "meetsP50Target": l.meets_p50(),
                    "meetsP99Target": l.meets_p99(),
                    "serverRssKbAfter": l.memory_after.map(|m| m.rss_kb),
                })
            })
            .collect();
        let target = self.levels.iter().find(|l| l.concurrency == TARGET_CONCURRENCY);
        json!({
            "command": Self::command_line(),
            "tracon": self.tracon_bin.display().to_string(),
            "cores": Self::cores(),
            "mock": {"latencyMs": self.mock_config.latency_ms, "chunkDelayMs": self.mock_config.chunk_delay_ms},
            "requestsOverride": self.args.requests,
            "levels": levels,
            "targets": {
                "concurrency": TARGET_CONCURRENCY,
                "addedP50Ms": TARGET_P50_MS,
                "addedP99Ms": TARGET_P99_MS,
                "p50Met": target.map(Level::meets_p50),
                "p99Met": target.map(Level::meets_p99),
            },
            "server": {
                "runs": self.server_runs,
                "vmHwmKb": self.memory.map(|m| m.hwm_kb),
                "vmRssKb": self.memory.map(|m| m.rss_kb),
            },
        })
    }
}
