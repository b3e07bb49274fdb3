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
//! With `--database-url <url>` the server runs on the Postgres stores in a fresh schema (as
//! `bench-postgres` does) and each subject phase also reports the statements it issued per
//! run, from `pg_stat_statements` (`--statements` lists them one by one); run it once
//! without and once with to put memory and Postgres side by side. The last line of the
//! output is one JSON object, `{"summary": …}`: per level the server's CPU per run, the
//! statements per run and p50/p99.
//!
//! It exits non-zero when any request failed or the server could not be started; a missed
//! target is reported, not an error.

// A report tool: its output is the point, so printing to stdout is the job.
#![allow(clippy::print_stdout)]

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::CONTENT_TYPE;
use serde_json::{Value, json};
use tracon_tests::bench::{
    BoxError, DEMO_AGENT, LatencyArgs, MOCK_MODEL, Pair, QUESTION, TARGET_CONCURRENCY, excerpt, exit_code,
    failures_section, met, opt_us, phase_heads, print_summary, sender, yes_no,
};

type Result<T, E = BoxError> = std::result::Result<T, E>;

const TARGET_P50_MS: f64 = 1.0;
const TARGET_P99_MS: f64 = 5.0;

/// The bench's name, in its progress lines.
const NAME: &str = "bench-run";

/// What `--help` says the bench measures.
const ABOUT: &str = "Measures the latency Tracon adds on POST /api/agents/{name}/run over calling the model directly.";

#[tokio::main]
async fn main() -> ExitCode {
    exit_code(NAME, run(LatencyArgs::parse(NAME, ABOUT)).await)
}

/// The whole benchmark; `Ok(false)` when it completed but some requests failed.
async fn run(args: LatencyArgs) -> Result<bool> {
    // From here on the guard kills the server on every path, errors included.
    let rig = args.start(&[]).await?;
    let (client, mock_url, server) = (&rig.client, &rig.mock_url, &rig.server);
    let pid = server.pid();

    let baseline = Arc::new(Target {
        url: format!("{mock_url}/v1/chat/completions"),
        body: Bytes::from(
            json!({
                "model": MOCK_MODEL,
                "stream": true,
                "stream_options": {"include_usage": true},
                "messages": [{"role": "user", "content": QUESTION}],
            })
            .to_string(),
        ),
        must_contain: b"data: [DONE]",
    });
    let subject = Arc::new(Target {
        url: format!("{}/api/agents/{DEMO_AGENT}/run", server.base),
        body: Bytes::from(json!({ "message": QUESTION }).to_string()),
        must_contain: b"event: done",
    });

    // One request of each before anything else, so a misconfiguration fails fast and clearly.
    one_request(client.clone(), baseline.clone()).await.map_err(|e| format!("the mock model does not answer: {e}"))?;
    one_request(client.clone(), subject.clone()).await.map_err(|e| {
        format!("POST /api/agents/{DEMO_AGENT}/run did not complete (server log: {}): {e}", server.log_hint())
    })?;

    let bench = rig.bench(NAME, &args);
    let mut levels = Vec::new();
    for &c in &args.concurrency {
        let pair =
            bench.pair(c, "", sender(client, &baseline, one_request), sender(client, &subject, one_request)).await?;
        levels.push(Level { concurrency: c, warmup: args.warmup_for(c), pair, memory_after: Memory::read(pid) });
    }
    let memory = Memory::read(pid);
    let server_runs = 1 + levels.iter().map(|l| l.warmup + l.pair.subject.requests).sum::<usize>();

    let report = Report { args: &args, tracon_bin: &rig.tracon_bin, levels: &levels, memory, server_runs };
    let (text, json, summary) = (report.text(), report.json(), report.summary());
    rig.finish(&args, &text, &json).await?;
    print_summary(summary);
    Ok(levels.iter().all(|l| !l.pair.failed()))
}

/// One kind of request: where it goes and what a complete answer contains.
struct Target {
    url: String,
    body: Bytes,
    must_contain: &'static [u8],
}

/// Sends one request and reads the whole body; the time from send to last byte.
async fn one_request(client: reqwest::Client, target: Arc<Target>) -> Result<Duration, String> {
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
        return Err(format!("HTTP {status}: {}", excerpt(&body)));
    }
    if !contains(&body, target.must_contain) {
        return Err(format!("the body lacks `{}`: {}", String::from_utf8_lossy(target.must_contain), excerpt(&body)));
    }
    Ok(elapsed)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
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
    pair: Pair,
    memory_after: Option<Memory>,
}

impl Level {
    fn meets_p50(&self) -> bool {
        self.pair.added_ms(50.0) < TARGET_P50_MS
    }

    fn meets_p99(&self) -> bool {
        self.pair.added_ms(99.0) < TARGET_P99_MS
    }
}

struct Report<'a> {
    args: &'a LatencyArgs,
    tracon_bin: &'a Path,
    levels: &'a [Level],
    memory: Option<Memory>,
    /// Runs the server executed in total (warm-ups and the first check included); the
    /// in-memory store keeps every one, so memory grows with this.
    server_runs: usize,
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

impl Report<'_> {
    fn text(&self) -> String {
        // `write!` to a String cannot fail; the results are ignored on purpose.
        let mut out = self.args.header(
            "Tracon run latency benchmark",
            self.tracon_bin,
            &format!(
                "baseline = POST /v1/chat/completions (stream), subject = POST /api/agents/{DEMO_AGENT}/run (SSE)"
            ),
        );
        let _ = writeln!(out, "times:    send → last body byte; ms; percentiles are nearest-rank");

        let _ = writeln!(out, "\n-- per phase --");
        let _ = writeln!(out, "{:>4} {:<8} {} {:>12}", "C", "phase", phase_heads(), "clientCPU us");
        for l in self.levels {
            for (name, p) in [("baseline", &l.pair.baseline), ("subject", &l.pair.subject)] {
                let client_cpu = opt_us(p.cpu_us_per_request(p.bench_cpu));
                let _ = writeln!(out, "{:>4} {:<8} {} {:>12}", l.concurrency, name, p.row(), client_cpu);
            }
        }

        let _ = writeln!(out, "\n-- added by Tracon (subject − baseline) --");
        let _ = writeln!(out, "{:>4} {} {:>8} {:>8}", "C", Pair::heads(), "p50<1ms", "p99<5ms");
        for l in self.levels {
            let (p50, p99) = (yes_no(l.meets_p50()), yes_no(l.meets_p99()));
            let _ = writeln!(out, "{:>4} {} {:>8} {:>8}", l.concurrency, l.pair.row(), p50, p99);
        }

        if self.levels.iter().any(|l| l.pair.statements.is_some()) {
            let _ = writeln!(out, "\n-- statements per run in Postgres (subject phases, pg_stat_statements) --");
            for l in self.levels {
                if let Some(s) = &l.pair.statements {
                    let _ = writeln!(
                        out,
                        "{:>4} {:.2} statements/run, {:.3} ms/run in Postgres",
                        l.concurrency,
                        s.per_run(),
                        s.ms_per_run()
                    );
                    if self.args.statements {
                        out.push_str(&s.lines("     "));
                    }
                }
            }
        }

        let _ = writeln!(out, "\n-- targets (C={TARGET_CONCURRENCY}) --");
        match self.levels.iter().find(|l| l.concurrency == TARGET_CONCURRENCY) {
            Some(l) => {
                let _ = writeln!(
                    out,
                    "added p50 {:.3} ms < {TARGET_P50_MS} ms: {}",
                    l.pair.added_ms(50.0),
                    met(l.meets_p50())
                );
                let _ = writeln!(
                    out,
                    "added p99 {:.3} ms < {TARGET_P99_MS} ms: {}",
                    l.pair.added_ms(99.0),
                    met(l.meets_p99())
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

        let failures: String =
            self.levels.iter().map(|l| l.pair.failure_lines(&format!("C={}", l.concurrency))).collect();
        out.push_str(&failures_section(&failures));
        out
    }

    /// The closing JSON line: per level, the server's CPU per run, statements per run and
    /// p50/p99 (send → last byte; this bench does not time the first token — `bench-postgres
    /// --stream-seconds` and `bench-openai` do).
    fn summary(&self) -> Value {
        let levels: Vec<Value> = self
            .levels
            .iter()
            .map(|l| {
                let s = &l.pair.subject;
                json!({
                    "concurrency": l.concurrency,
                    "serverCpuUsPerRequest": s.cpu_us_per_request(s.server_cpu),
                    "statementsPerRun": l.pair.statements.as_ref().map(|s| s.per_run()),
                    "p50Ms": s.percentile_ms(50.0),
                    "p99Ms": s.percentile_ms(99.0),
                    "addedP50Ms": l.pair.added_ms(50.0),
                    "ttftP50Ms": null,
                })
            })
            .collect();
        json!({"bench": NAME, "storage": self.args.storage(), "load": tracon_tests::bench::load_average(), "levels": levels})
    }

    fn json(&self) -> Value {
        let levels: Vec<Value> = self
            .levels
            .iter()
            .map(|l| {
                let mut level = l.pair.json();
                level["concurrency"] = json!(l.concurrency);
                level["warmup"] = json!(l.warmup);
                level["meetsP50Target"] = json!(l.meets_p50());
                level["meetsP99Target"] = json!(l.meets_p99());
                level["serverRssKbAfter"] = json!(l.memory_after.map(|m| m.rss_kb));
                level
            })
            .collect();
        let target = self.levels.iter().find(|l| l.concurrency == TARGET_CONCURRENCY);
        let mut report = self.args.json_head(self.tracon_bin);
        report.insert("levels".into(), json!(levels));
        report.insert(
            "targets".into(),
            json!({
                "concurrency": TARGET_CONCURRENCY,
                "addedP50Ms": TARGET_P50_MS,
                "addedP99Ms": TARGET_P99_MS,
                "p50Met": target.map(Level::meets_p50),
                "p99Met": target.map(Level::meets_p99),
            }),
        );
        report.insert(
            "server".into(),
            json!({
                "runs": self.server_runs,
                "vmHwmKb": self.memory.map(|m| m.hwm_kb),
                "vmRssKb": self.memory.map(|m| m.rss_kb),
            }),
        );
        Value::Object(report)
    }
}
