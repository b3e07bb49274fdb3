//! `bench-openai`: how much latency Tracon's OpenAI-compatible route,
//! `POST /v1/chat/completions`, adds over calling the model directly.
//!
//! A real `tracon serve` child process runs with its `openai` provider pointed at the
//! in-process mock model server and a static bearer token (`TRACON_AUTH_TOKEN`); every
//! request carries `Authorization: Bearer <token>`, as an OpenAI SDK configured with Tracon
//! as its base URL does. The request names the demo agent, `model: "support"`, which gets
//! the mock's default answer (short text, no tool calls): one model call per request.
//! Two modes, each with a baseline and a subject, per concurrency level C (default `1,64`):
//!
//! - **whole** (non-streaming) — send → last byte of the `chat.completion` JSON. Baseline:
//!   the mock's own non-streaming `POST {mock}/v1/chat/completions`. Subject: Tracon's
//!   route without `stream`. A response counts only if it is a `chat.completion` whose
//!   `choices[0].message.content` is non-empty;
//! - **first chunk** (streaming time-to-first-chunk) — send → the first `data:` chunk whose
//!   `choices[0].delta.content` is non-empty (the role-only opening chunk does not count).
//!   Baseline: the mock's streamed response. Subject: Tracon's route with `stream: true`.
//!   The rest of the stream is read after the clock stops (the connection goes back to the
//!   pool, the run completes) and must end with `data: [DONE]` and carry no error frame.
//!
//! Each request is timed with [`Instant`]. C workers share one `reqwest::Client` (pool ≥ C,
//! `TCP_NODELAY`), first through a warm-up that is not recorded, then through N requests
//! (default 2000 at C=1, 20000 otherwise). The report gives p50/p99 of baseline and subject,
//! the difference (subject − baseline, a difference of percentiles), throughput and the
//! server's CPU per request. Target: under 5 ms added at p99 with 64 concurrent requests,
//! in both modes.
//!
//! Everything runs on one machine: at C=64 the client, the mock and the server compete for
//! the same cores, so "added" includes the server's CPU cost queueing behind the others.
//!
//! Run it (from the workspace root):
//!
//! ```text
//! cargo build --release -p tracon && cargo run --release -p tracon-tests --bin bench-openai -- \
//!     [--requests N] [--concurrency 1,64] [--warmup 200] [--tracon target/release/tracon] \
//!     [--mock-latency-ms 0] [--mock-chunk-delay-ms 0] [--json out.json]
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

/// The demo agent shipped with the local server: the `model` of every subject request.
const AGENT: &str = "support";
/// The model the server's `openai` provider asks the mock for; the baseline asks for the
/// same, so both get the mock's default answer.
const MODEL: &str = "bench";
const QUESTION: &str = "Where is order 4182?";
/// The server's static bearer token (at least 16 characters).
const TOKEN: &str = "bench-openai-token-0123456789abcdef";
/// A single request that takes this long is a failure, not a data point.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Target at C = [`TARGET_CONCURRENCY`], in milliseconds added over the baseline at p99.
const TARGET_CONCURRENCY: usize = 64;
const TARGET_P99_MS: f64 = 5.0;

/// The bench's name, in its progress lines.
const NAME: &str = "bench-openai";

#[derive(Debug, Parser)]
#[command(
    name = "bench-openai",
    about = "Measures the latency Tracon adds on POST /v1/chat/completions over calling the model directly."
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
            eprintln!("bench-openai: some requests failed (see the report above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("bench-openai: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What is timed: the whole response, or the stream up to its first content chunk.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Whole,
    FirstChunk,
}

impl Mode {
    const ALL: [Mode; 2] = [Mode::Whole, Mode::FirstChunk];

    fn label(self) -> &'static str {
        match self {
            Mode::Whole => "whole",
            Mode::FirstChunk => "1st-chunk",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Mode::Whole => "non-streaming, send → last byte of the chat.completion",
            Mode::FirstChunk => "stream: true, send → first chunk with non-empty delta.content",
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

    // The guard kills the server on every path, errors included.
    let server = Server::start(&tracon_bin, &mock_url, &[("TRACON_AUTH_TOKEN", TOKEN)])
        .await
        .map_err(|e| format!("could not start {}: {e}", tracon_bin.display()))?;
    let pid = server.pid();

    let targets = |mode: Mode| -> (Arc<Target>, Arc<Target>) {
        let stream = mode == Mode::FirstChunk;
        let question = json!([{"role": "user", "content": QUESTION}]);
        // The baseline asks what the server's provider asks the mock (a streamed call
        // includes usage); the subject is what an OpenAI client sends Tracon.
        let base_body = if stream {
            json!({"model": MODEL, "stream": true, "stream_options": {"include_usage": true}, "messages": question})
        } else {
            json!({"model": MODEL, "messages": question})
        };
        let subject_body = if stream {
            json!({"model": AGENT, "stream": true, "messages": question})
        } else {
            json!({"model": AGENT, "messages": question})
        };
        let target = |url: String, body: Value| Arc::new(Target { url, body: Bytes::from(body.to_string()), mode });
        (
            target(format!("{mock_url}/v1/chat/completions"), base_body),
            target(format!("{}/v1/chat/completions", server.base), subject_body),
        )
    };

    // One request of each before anything else, so a misconfiguration fails fast and clearly.
    for mode in Mode::ALL {
        let (baseline, subject) = targets(mode);
        one_request(&client, &baseline)
            .await
            .map_err(|e| format!("the mock model does not answer ({}): {e}", mode.label()))?;
        one_request(&client, &subject)
            .await
            .map_err(|e| format!("POST /v1/chat/completions ({}) did not complete: {e}", mode.label()))?;
    }

    let mut levels = Vec::new();
    for &c in &args.concurrency {
        let n = args.requests_for(c);
        let warmup = args.warmup.max(4 * c);
        for mode in Mode::ALL {
            let (baseline, subject) = targets(mode);
            eprintln!("bench-openai: C={c} {}: baseline ({warmup} warm-up + {n} requests)…", mode.label());
            let base = measure(NAME, c, warmup, n, pid, sender(&client, &baseline)).await?;
            forget_mock_requests(&client, &mock_url).await;
            eprintln!("bench-openai: C={c} {}: subject ({warmup} warm-up + {n} requests)…", mode.label());
            let subj = measure(NAME, c, warmup, n, pid, sender(&client, &subject)).await?;
            forget_mock_requests(&client, &mock_url).await;
            levels.push(Level { concurrency: c, mode, warmup, baseline: base, subject: subj });
        }
    }

    let report = Report { args: &args, tracon_bin: &tracon_bin, mock_config, levels: &levels };
    println!("{}", report.text());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.json())?;
        std::fs::write(path, text).map_err(|e| format!("could not write {}: {e}", path.display()))?;
        println!("JSON written to {}", path.display());
    }

    drop(server);
    mock.shutdown().await;
    Ok(levels.iter().all(|l| l.baseline.failures == 0 && l.subject.failures == 0))
}

/// One kind of request: where it goes, its body, and what is timed.
struct Target {
    url: String,
    body: Bytes,
    mode: Mode,
}

/// Sends one request; the time from send to the last byte ([`Mode::Whole`]) or to the first
/// content chunk ([`Mode::FirstChunk`]). The answer is checked after the clock stops.
async fn one_request(client: &reqwest::Client, target: &Target) -> Result<Duration, String> {
    let started = Instant::now();
    let mut response = client
        .post(&target.url)
        .header(CONTENT_TYPE, "application/json")
        .bearer_auth(TOKEN)
        .body(target.body.clone())
        .send()
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    if !status.is_success() || target.mode == Mode::Whole {
        let body = response.bytes().await.map_err(|e| format!("read: {e}"))?;
        let elapsed = started.elapsed();
        if !status.is_success() {
            return Err(format!("HTTP {status}: {}", excerpt(&body)));
        }
        let answer: Value = serde_json::from_slice(&body).map_err(|e| format!("not JSON ({e}): {}", excerpt(&body)))?;
        let content = answer.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap_or_default();
        if answer["object"] != "chat.completion" || content.is_empty() {
            return Err(format!("not a chat.completion with content: {}", excerpt(&body)));
        }
        return Ok(elapsed);
    }

    let mut body = Vec::new();
    // Complete frames before this offset have been looked at.
    let mut scanned = 0;
    let mut first_content = None;
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("read: {e}"))? {
        body.extend_from_slice(&chunk);
        while first_content.is_none()
            && let Some(end) = find(&body[scanned..], b"\n\n")
        {
            let frame = &body[scanned..scanned + end];
            scanned += end + 2;
            if has_content(frame) {
                first_content = Some(started.elapsed());
            }
        }
    }
    let elapsed = first_content.ok_or_else(|| format!("no chunk carried content: {}", excerpt(&body)))?;
    if !body.ends_with(b"data: [DONE]\n\n") {
        return Err(format!("the stream does not end with `data: [DONE]`: {}", excerpt(&body)));
    }
    if find(&body, b"data: {\"error\"").is_some() {
        return Err(format!("the stream carries an error: {}", excerpt(&body)));
    }
    Ok(elapsed)
}

/// Whether one server-sent event carries a `chat.completion.chunk` with non-empty
/// `choices[0].delta.content`.
fn has_content(frame: &[u8]) -> bool {
    frame.split(|&b| b == b'\n').filter_map(|line| line.strip_prefix(b"data:")).any(|data| {
        serde_json::from_slice::<Value>(data.trim_ascii()).ok().is_some_and(|chunk| {
            chunk.pointer("/choices/0/delta/content").and_then(Value::as_str).is_some_and(|c| !c.is_empty())
        })
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned()
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

/// One concurrency level of one mode: its baseline and subject phases.
struct Level {
    concurrency: usize,
    mode: Mode,
    warmup: usize,
    baseline: Phase,
    subject: Phase,
}

impl Level {
    fn added_ms(&self, p: f64) -> f64 {
        self.subject.percentile_ms(p) - self.baseline.percentile_ms(p)
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
}

fn yes_no(ok: bool) -> &'static str {
    if ok { "yes" } else { "NO" }
}

fn opt_us(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.0}"))
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
        let _ = writeln!(out, "\n== Tracon OpenAI-compatible route latency benchmark ==");
        let _ = writeln!(out, "command:  {}", Self::command_line());
        let _ = writeln!(out, "tracon:   {}", self.tracon_bin.display());
        let _ = writeln!(out, "cores:    {}", Self::cores());
        let _ = writeln!(
            out,
            "mock:     latency_ms={} chunk_delay_ms={}; baseline = mock POST /v1/chat/completions, \
             subject = tracon POST /v1/chat/completions (model \"{AGENT}\", bearer token)",
            self.mock_config.latency_ms, self.mock_config.chunk_delay_ms
        );
        for mode in Mode::ALL {
            let _ = writeln!(out, "{:<9} {}", format!("{}:", mode.label()), mode.describe());
        }
        let _ = writeln!(out, "times:    ms; percentiles are nearest-rank");

        let _ = writeln!(out, "\n-- per phase --");
        let _ = writeln!(
            out,
            "{:>4} {:<9} {:<8} {:>6} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>12}",
            "C", "mode", "phase", "reqs", "fail", "mean", "p50", "p90", "p99", "p99.9", "max", "req/s", "srvCPU us/rq"
        );
        for l in self.levels {
            for (name, p) in [("baseline", &l.baseline), ("subject", &l.subject)] {
                let _ = writeln!(
                    out,
                    "{:>4} {:<9} {:<8} {:>6} {:>5} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>9.0} {:>12}",
                    l.concurrency,
                    l.mode.label(),
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
                );
            }
        }

        let _ = writeln!(out, "\n-- added by Tracon (subject − baseline) --");
        let _ = writeln!(
            out,
            "{:>4} {:<9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>8}",
            "C",
            "mode",
            "base p50",
            "base p99",
            "subj p50",
            "subj p99",
            "added p50",
            "added p99",
            "base rq/s",
            "subj rq/s",
            "p99<5ms"
        );
        for l in self.levels {
            let _ = writeln!(
                out,
                "{:>4} {:<9} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>10.3} {:>10.3} {:>10.0} {:>10.0} {:>8}",
                l.concurrency,
                l.mode.label(),
                l.baseline.percentile_ms(50.0),
                l.baseline.percentile_ms(99.0),
                l.subject.percentile_ms(50.0),
                l.subject.percentile_ms(99.0),
                l.added_ms(50.0),
                l.added_ms(99.0),
                l.baseline.throughput(),
                l.subject.throughput(),
                yes_no(l.meets_p99()),
            );
        }

        let _ = writeln!(out, "\n-- target (C={TARGET_CONCURRENCY}): added p99 < {TARGET_P99_MS} ms --");
        for mode in Mode::ALL {
            match self.levels.iter().find(|l| l.concurrency == TARGET_CONCURRENCY && l.mode == mode) {
                Some(l) => {
                    let _ = writeln!(
                        out,
                        "{:<9} added p99 {:.3} ms: {}",
                        mode.label(),
                        l.added_ms(99.0),
                        if l.meets_p99() { "MET" } else { "NOT MET" }
                    );
                }
                None => {
                    let _ =
                        writeln!(out, "{:<9} not measured (add {TARGET_CONCURRENCY} to --concurrency)", mode.label());
                }
            }
        }

        let failed: Vec<_> = self
            .levels
            .iter()
            .flat_map(|l| [("baseline", l, &l.baseline), ("subject", l, &l.subject)])
            .filter(|(_, _, p)| p.failures > 0)
            .collect();
        let _ = writeln!(out, "\n-- failures --");
        if failed.is_empty() {
            let _ = writeln!(out, "none");
        }
        for (name, l, p) in failed {
            let _ = writeln!(
                out,
                "C={} {} {name}: {} failed (warm-up included); first: {:?}",
                l.concurrency,
                l.mode.label(),
                p.failures,
                p.errors
            );
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
            })
        };
        let levels: Vec<Value> = self
            .levels
            .iter()
            .map(|l| {
                json!({
                    "concurrency": l.concurrency,
                    "mode": match l.mode { Mode::Whole => "whole", Mode::FirstChunk => "firstChunk" },
                    "warmup": l.warmup,
                    "baseline": phase(&l.baseline),
                    "subject": phase(&l.subject),
                    "addedP50Ms": l.added_ms(50.0),
                    "addedP99Ms": l.added_ms(99.0),
                    "meetsP99Target": l.meets_p99(),
                })
            })
            .collect();
        let met = |mode: Mode| {
            self.levels.iter().find(|l| l.concurrency == TARGET_CONCURRENCY && l.mode == mode).map(Level::meets_p99)
        };
        json!({
            "command": Self::command_line(),
            "tracon": self.tracon_bin.display().to_string(),
            "cores": Self::cores(),
            "mock": {"latencyMs": self.mock_config.latency_ms, "chunkDelayMs": self.mock_config.chunk_delay_ms},
            "requestsOverride": self.args.requests,
            "levels": levels,
            "targets": {
                "concurrency": TARGET_CONCURRENCY,
                "addedP99Ms": TARGET_P99_MS,
                "wholeP99Met": met(Mode::Whole),
                "firstChunkP99Met": met(Mode::FirstChunk),
            },
        })
    }
}
