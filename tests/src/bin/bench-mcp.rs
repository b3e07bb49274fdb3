//! `bench-mcp`: how much latency the MCP server's `tools/call` adds over
//! `POST /api/agents/{name}/run` for the same agent.
//!
//! A real `tracon serve` child process runs with its `openai` provider pointed at the
//! in-process mock model server, the demo agent `support` exposed over MCP
//! (`Tracon__McpServer__ExposedAgents__0=support`) and an `ExternalInvoke` key issued at
//! start. Both sides run the same agent on the same question (one model call, the mock's
//! short default answer) and are timed from send to the last byte:
//!
//! - **baseline**: `POST /api/agents/support/run` with the static token, the live turn read
//!   to its end (it must carry a `done` frame);
//! - **subject**: `POST /mcp` `tools/call` of `support` with the key, answered as JSON (it must
//!   be a result with `isError: false` and text).
//!
//! Each concurrency level C (default `1,64`) warms up, then sends N requests (default 2000 at
//! C=1, 20000 otherwise) from C workers sharing one client. The report gives p50/p99 of each
//! and the difference (subject − baseline), throughput and the server's CPU per request.
//!
//! ```text
//! cargo build --release -p tracon && cargo run --release -p tracon-tests --bin bench-mcp -- \
//!     [--requests N] [--concurrency 1,64] [--warmup 200] [--tracon target/release/tracon] [--json out.json]
//! ```

// A report tool: its output is the point, so printing to stdout is the job.
#![allow(clippy::print_stdout)]

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{Value, json};
use tracon_tests::bench::{
    BoxError, DEMO_AGENT, LatencyArgs, Pair, QUESTION, excerpt, exit_code, failures_section, phase_heads, sender,
};

type Result<T, E = BoxError> = std::result::Result<T, E>;

const TOKEN: &str = "bench-mcp-token-0123456789abcdef";
const NAME: &str = "bench-mcp";
const ABOUT: &str = "Measures the latency /mcp tools/call adds over POST /api/agents/{name}/run for the same agent.";

#[tokio::main]
async fn main() -> ExitCode {
    exit_code(NAME, run(LatencyArgs::parse(NAME, ABOUT)).await)
}

/// One kind of request: where it goes, with which credential and body, and how its answer is
/// checked.
struct Target {
    url: String,
    bearer: String,
    body: Bytes,
    mcp: bool,
}

async fn run(args: LatencyArgs) -> Result<bool> {
    let rig = args.start(&[("TRACON_AUTH_TOKEN", TOKEN), ("Tracon__McpServer__ExposedAgents__0", DEMO_AGENT)]).await?;
    let (client, server) = (&rig.client, &rig.server);
    let issued: Value = client
        .post(format!("{}/api/api-keys", server.base))
        .bearer_auth(TOKEN)
        .json(&json!({"name": "bench", "scopes": ["ExternalInvoke"]}))
        .send()
        .await?
        .json()
        .await?;
    let key = issued["key"].as_str().ok_or_else(|| format!("no key issued: {issued}"))?.to_owned();
    let baseline = Arc::new(Target {
        url: format!("{}/api/agents/{DEMO_AGENT}/run", server.base),
        bearer: TOKEN.to_owned(),
        body: Bytes::from(json!({"message": QUESTION}).to_string()),
        mcp: false,
    });
    let subject = Arc::new(Target {
        url: format!("{}/mcp", server.base),
        bearer: key,
        body: Bytes::from(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": DEMO_AGENT, "arguments": {"message": QUESTION}}})
            .to_string(),
        ),
        mcp: true,
    });
    one_request(client.clone(), baseline.clone()).await.map_err(|e| format!("the native run did not complete: {e}"))?;
    one_request(client.clone(), subject.clone()).await.map_err(|e| format!("the MCP call did not complete: {e}"))?;

    let bench = rig.bench(NAME, &args);
    let mut levels = Vec::new();
    for &c in &args.concurrency {
        let pair =
            bench.pair(c, "", sender(client, &baseline, one_request), sender(client, &subject, one_request)).await?;
        levels.push((c, pair));
    }
    let text = report(&args, &rig.tracon_bin, &levels);
    let mut head = args.json_head(&rig.tracon_bin);
    head.insert(
        "levels".into(),
        json!(
            levels
                .iter()
                .map(|(c, p)| {
                    let mut l = p.json();
                    l["concurrency"] = json!(c);
                    l
                })
                .collect::<Vec<_>>()
        ),
    );
    rig.finish(&args, &text, &Value::Object(head)).await?;
    Ok(levels.iter().all(|(_, p)| !p.failed()))
}

async fn one_request(client: reqwest::Client, target: Arc<Target>) -> Result<Duration, String> {
    let started = Instant::now();
    let response = client
        .post(&target.url)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, if target.mcp { "application/json, text/event-stream" } else { "text/event-stream" })
        .bearer_auth(&target.bearer)
        .body(target.body.clone())
        .send()
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| format!("read: {e}"))?;
    let elapsed = started.elapsed();
    if !status.is_success() {
        return Err(format!("HTTP {status}: {}", excerpt(&body)));
    }
    if target.mcp {
        let answer: Value = serde_json::from_slice(&body).map_err(|e| format!("not JSON ({e}): {}", excerpt(&body)))?;
        let text = answer.pointer("/result/content/0/text").and_then(Value::as_str).unwrap_or_default();
        if answer["result"]["isError"] != false || text.is_empty() {
            return Err(format!("not a successful tool result: {}", excerpt(&body)));
        }
    } else if !body.windows(11).any(|w| w == b"event: done") {
        return Err(format!("the live turn has no done frame: {}", excerpt(&body)));
    }
    Ok(elapsed)
}

fn report(args: &LatencyArgs, bin: &Path, levels: &[(usize, Pair)]) -> String {
    // `write!` to a String cannot fail; the results are ignored on purpose.
    let mut out = args.header(
        "Tracon MCP server latency benchmark",
        bin,
        &format!(
            "baseline = POST /api/agents/{DEMO_AGENT}/run (live turn to its end), \
             subject = POST /mcp tools/call {DEMO_AGENT} (JSON), same agent and question"
        ),
    );
    let _ = writeln!(out, "times:    ms, send → last byte; percentiles are nearest-rank");
    let _ = writeln!(out, "\n-- per phase --");
    let _ = writeln!(out, "{:>4} {:<8} {}", "C", "phase", phase_heads());
    for (c, pair) in levels {
        for (name, p) in [("baseline", &pair.baseline), ("subject", &pair.subject)] {
            let _ = writeln!(out, "{c:>4} {name:<8} {}", p.row());
        }
    }
    let _ = writeln!(out, "\n-- added by /mcp (subject − baseline) --");
    let _ = writeln!(out, "{:>4} {}", "C", Pair::heads());
    for (c, pair) in levels {
        let _ = writeln!(out, "{c:>4} {}", pair.row());
    }
    let failures: String = levels.iter().map(|(c, p)| p.failure_lines(&format!("C={c}"))).collect();
    out.push_str(&failures_section(&failures));
    out
}
