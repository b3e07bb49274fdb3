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
//! With `--database-url <url>` the server runs on the Postgres stores in a fresh schema (as
//! `bench-postgres` does) and each subject phase also reports the statements it issued per
//! request, from `pg_stat_statements` (`--statements` lists them one by one); run it once
//! without and once with to put memory and Postgres side by side. The last line of the
//! output is one JSON object, `{"summary": …}`: per level the server's CPU per request, the
//! statements per run, p50/p99 of the whole answer, and the time to first token (p50).
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
    failures_section, met, phase_heads, print_summary, sender, yes_no,
};

type Result<T, E = BoxError> = std::result::Result<T, E>;

/// The server's static bearer token (at least 16 characters).
const TOKEN: &str = "bench-openai-token-0123456789abcdef";
const TARGET_P99_MS: f64 = 5.0;

/// The bench's name, in its progress lines.
const NAME: &str = "bench-openai";

/// What `--help` says the bench measures.
const ABOUT: &str = "Measures the latency Tracon adds on POST /v1/chat/completions over calling the model directly.";

#[tokio::main]
async fn main() -> ExitCode {
    exit_code(NAME, run(LatencyArgs::parse(NAME, ABOUT)).await)
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
async fn run(args: LatencyArgs) -> Result<bool> {
    // The guard kills the server on every path, errors included.
    let rig = args.start(&[("TRACON_AUTH_TOKEN", TOKEN)]).await?;
    let (client, mock_url, server) = (&rig.client, &rig.mock_url, &rig.server);

    let targets = |mode: Mode| -> (Arc<Target>, Arc<Target>) {
        let stream = mode == Mode::FirstChunk;
        let question = json!([{"role": "user", "content": QUESTION}]);
        // The baseline asks what the server's provider asks the mock (a streamed call
        // includes usage); the subject is what an OpenAI client sends Tracon.
        let base_body = if stream {
            json!({"model": MOCK_MODEL, "stream": true, "stream_options": {"include_usage": true}, "messages": question})
        } else {
            json!({"model": MOCK_MODEL, "messages": question})
        };
        let subject_body = if stream {
            json!({"model": DEMO_AGENT, "stream": true, "messages": question})
        } else {
            json!({"model": DEMO_AGENT, "messages": question})
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
        one_request(client.clone(), baseline)
            .await
            .map_err(|e| format!("the mock model does not answer ({}): {e}", mode.label()))?;
        one_request(client.clone(), subject)
            .await
            .map_err(|e| format!("POST /v1/chat/completions ({}) did not complete: {e}", mode.label()))?;
    }

    let bench = rig.bench(NAME, &args);
    let mut levels = Vec::new();
    for &c in &args.concurrency {
        for mode in Mode::ALL {
            let (baseline, subject) = targets(mode);
            let label = format!(" {}", mode.label());
            let pair = bench
                .pair(c, &label, sender(client, &baseline, one_request), sender(client, &subject, one_request))
                .await?;
            levels.push(Level { concurrency: c, mode, warmup: args.warmup_for(c), pair });
        }
    }

    let report = Report { args: &args, tracon_bin: &rig.tracon_bin, levels: &levels };
    let (text, json, summary) = (report.text(), report.json(), report.summary());
    rig.finish(&args, &text, &json).await?;
    print_summary(summary);
    Ok(levels.iter().all(|l| !l.pair.failed()))
}

/// One kind of request: where it goes, its body, and what is timed.
struct Target {
    url: String,
    body: Bytes,
    mode: Mode,
}

/// Sends one request; the time from send to the last byte ([`Mode::Whole`]) or to the first
/// content chunk ([`Mode::FirstChunk`]). The answer is checked after the clock stops.
async fn one_request(client: reqwest::Client, target: Arc<Target>) -> Result<Duration, String> {
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

/// One concurrency level of one mode: its baseline and subject phases.
struct Level {
    concurrency: usize,
    mode: Mode,
    warmup: usize,
    pair: Pair,
}

impl Level {
    fn meets_p99(&self) -> bool {
        self.pair.added_ms(99.0) < TARGET_P99_MS
    }
}

struct Report<'a> {
    args: &'a LatencyArgs,
    tracon_bin: &'a Path,
    levels: &'a [Level],
}

impl Report<'_> {
    fn text(&self) -> String {
        // `write!` to a String cannot fail; the results are ignored on purpose.
        let mut out = self.args.header(
            "Tracon OpenAI-compatible route latency benchmark",
            self.tracon_bin,
            &format!(
                "baseline = mock POST /v1/chat/completions, subject = tracon POST /v1/chat/completions \
                 (model \"{DEMO_AGENT}\", bearer token)"
            ),
        );
        for mode in Mode::ALL {
            let _ = writeln!(out, "{:<9} {}", format!("{}:", mode.label()), mode.describe());
        }
        let _ = writeln!(out, "times:    ms; percentiles are nearest-rank");

        let _ = writeln!(out, "\n-- per phase --");
        let _ = writeln!(out, "{:>4} {:<9} {:<8} {}", "C", "mode", "phase", phase_heads());
        for l in self.levels {
            for (name, p) in [("baseline", &l.pair.baseline), ("subject", &l.pair.subject)] {
                let _ = writeln!(out, "{:>4} {:<9} {:<8} {}", l.concurrency, l.mode.label(), name, p.row());
            }
        }

        let _ = writeln!(out, "\n-- added by Tracon (subject − baseline) --");
        let _ = writeln!(out, "{:>4} {:<9} {} {:>8}", "C", "mode", Pair::heads(), "p99<5ms");
        for l in self.levels {
            let _ = writeln!(
                out,
                "{:>4} {:<9} {} {:>8}",
                l.concurrency,
                l.mode.label(),
                l.pair.row(),
                yes_no(l.meets_p99())
            );
        }

        if self.levels.iter().any(|l| l.pair.statements.is_some()) {
            let _ = writeln!(out, "\n-- statements per run in Postgres (subject phases, pg_stat_statements) --");
            for l in self.levels {
                if let Some(s) = &l.pair.statements {
                    let _ = writeln!(
                        out,
                        "{:>4} {:<9} {:.2} statements/run, {:.3} ms/run in Postgres",
                        l.concurrency,
                        l.mode.label(),
                        s.per_run(),
                        s.ms_per_run()
                    );
                    if self.args.statements {
                        out.push_str(&s.lines("     "));
                    }
                }
            }
        }

        let _ = writeln!(out, "\n-- target (C={TARGET_CONCURRENCY}): added p99 < {TARGET_P99_MS} ms --");
        for mode in Mode::ALL {
            match self.levels.iter().find(|l| l.concurrency == TARGET_CONCURRENCY && l.mode == mode) {
                Some(l) => {
                    let _ = writeln!(
                        out,
                        "{:<9} added p99 {:.3} ms: {}",
                        mode.label(),
                        l.pair.added_ms(99.0),
                        met(l.meets_p99())
                    );
                }
                None => {
                    let _ =
                        writeln!(out, "{:<9} not measured (add {TARGET_CONCURRENCY} to --concurrency)", mode.label());
                }
            }
        }

        let failures: String = self
            .levels
            .iter()
            .map(|l| l.pair.failure_lines(&format!("C={} {}", l.concurrency, l.mode.label())))
            .collect();
        out.push_str(&failures_section(&failures));
        out
    }

    /// The closing JSON line: per level, the server's CPU per request and statements per run
    /// on the whole-answer route, its p50/p99, and the streamed route's time to first token.
    fn summary(&self) -> Value {
        let mut levels = Vec::new();
        for &c in &self.args.concurrency {
            let find = |mode: Mode| self.levels.iter().find(|l| l.concurrency == c && l.mode == mode);
            let (whole, first) = (find(Mode::Whole), find(Mode::FirstChunk));
            levels.push(json!({
                "concurrency": c,
                "serverCpuUsPerRequest": whole.and_then(|l| l.pair.subject.cpu_us_per_request(l.pair.subject.server_cpu)),
                "statementsPerRun": whole.and_then(|l| l.pair.statements.as_ref().map(|s| s.per_run())),
                "p50Ms": whole.map(|l| l.pair.subject.percentile_ms(50.0)),
                "p99Ms": whole.map(|l| l.pair.subject.percentile_ms(99.0)),
                "addedP50Ms": whole.map(|l| l.pair.added_ms(50.0)),
                "ttftP50Ms": first.map(|l| l.pair.subject.percentile_ms(50.0)),
                "ttftAddedP50Ms": first.map(|l| l.pair.added_ms(50.0)),
                "streamedServerCpuUsPerRequest":
                    first.and_then(|l| l.pair.subject.cpu_us_per_request(l.pair.subject.server_cpu)),
                "streamedStatementsPerRun": first.and_then(|l| l.pair.statements.as_ref().map(|s| s.per_run())),
            }));
        }
        json!({"bench": NAME, "storage": self.args.storage(), "load": tracon_tests::bench::load_average(), "levels": levels})
    }

    fn json(&self) -> Value {
        let levels: Vec<Value> = self
            .levels
            .iter()
            .map(|l| {
                let mut level = l.pair.json();
                level["concurrency"] = json!(l.concurrency);
                level["mode"] = json!(match l.mode {
                    Mode::Whole => "whole",
                    Mode::FirstChunk => "firstChunk",
                });
                level["warmup"] = json!(l.warmup);
                level["meetsP99Target"] = json!(l.meets_p99());
                level
            })
            .collect();
        let met = |mode: Mode| {
            self.levels.iter().find(|l| l.concurrency == TARGET_CONCURRENCY && l.mode == mode).map(Level::meets_p99)
        };
        let mut report = self.args.json_head(self.tracon_bin);
        report.insert("levels".into(), json!(levels));
        report.insert(
            "targets".into(),
            json!({
                "concurrency": TARGET_CONCURRENCY,
                "addedP99Ms": TARGET_P99_MS,
                "wholeP99Met": met(Mode::Whole),
                "firstChunkP99Met": met(Mode::FirstChunk),
            }),
        );
        Value::Object(report)
    }
}
