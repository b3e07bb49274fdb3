//! `bench-postgres`: what recording to Postgres costs per run, against in-memory storage.
//!
//! Starts the mock model server in-process and two release `tracon` servers against it —
//! one on in-memory stores, one on Postgres (a fresh schema) — and drives the same
//! workload through both: `POST /api/agents/support/run` in a session-less run, the demo
//! agent on the `openai` provider pointed at the mock (one model call per run, no tool
//! call). Per storage and concurrency level it reports runs/second, p50/p99 latency (send →
//! last byte), time to first token (send → the first `update` frame of kind `text`), the
//! server process's CPU per run (user + system from `/proc/<pid>/stat`), and for Postgres:
//! database transactions per run (`pg_stat_database`) and **statements per run**
//! (`pg_stat_statements`, reset before each measured phase; `--statements` lists them).
//!
//! **Streamed answers** (`--stream-seconds 1,10`): the mock's `bench` model is scripted to
//! answer [`STREAM_WORDS`] words, one per chunk, with `S × 1000 / STREAM_WORDS` ms between
//! chunks, so a run's answer streams for about S seconds (the mock sends its role chunk at
//! once, then waits before each further chunk: the first word comes one chunk delay after
//! the headers, in both storages). For each S, `--stream-runs` runs (default 20) at
//! `--stream-concurrency` (default 1) go through each server, no warm-up; the report gives
//! statements per run — which grow with how long the answer streams when the recorder
//! flushes and polls on a timer — and time to first token with and without Postgres.
//! `--stream-only` skips the whole-answer phases.
//!
//! The Postgres to use: `--database-url`, else `TRACON_TEST_DATABASE_URL`, else
//! `DATABASE_URL`; it needs `shared_preload_libraries = 'pg_stat_statements'`. Figures meant
//! for users come from a default-configured cluster (`scripts/bench-postgres.sh start`:
//! fsync, synchronous_commit and full_page_writes on), not the test suite's throwaway one.
//!
//! ```text
//! cargo build --release -p tracon -p tracon-tests
//! scripts/bench-postgres.sh start
//! target/release/bench-postgres --database-url "$(scripts/bench-postgres.sh url)" \
//!     [--requests 2000] [--concurrency 1,64] [--statements] [--stream-seconds 1,10] [--json out.json]
//! ```
//! The last line of the output is one JSON object, `{"summary": …}`: per storage and phase
//! the server's CPU µs per run, statements per run, p50/p99 and the time to first token p50.
//! Target: recording to Postgres adds under 2 ms at p50 per run over in-memory.

// A report tool: its output is the point.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{Value, json};
use tracon_tests::bench::{
    BoxError, Phase, Server, StatementLog, Statements, complete, database_url, load_average, measure, postgres_env,
    print_summary, resolve_binary,
};
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

#[derive(Parser)]
struct Args {
    /// Runs measured per concurrency level (after a warm-up).
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Concurrency levels.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    concurrency: Vec<usize>,
    /// The tracon binary.
    #[arg(long, default_value = "target/release/tracon")]
    tracon: PathBuf,
    /// Postgres to record into (default: TRACON_TEST_DATABASE_URL, then DATABASE_URL).
    #[arg(long)]
    database_url: Option<String>,
    /// Every run makes one tool round (the model calls `get_order_status`, then answers):
    /// compared with a plain run, what the step ledger and the call's record add on Postgres.
    #[arg(long)]
    tool_round: bool,
    /// After each Postgres phase, list the statements it ran from `pg_stat_statements`:
    /// calls per run and the mean time in the server of each, so one statement's cost (the
    /// step ledger's) is read directly. (Statements per run are always counted.)
    #[arg(long)]
    statements: bool,
    /// Streamed-answer phases: for each S, an answer that streams for about S seconds.
    #[arg(long, value_delimiter = ',')]
    stream_seconds: Vec<u64>,
    /// Runs per streamed-answer phase.
    #[arg(long, default_value_t = 20)]
    stream_runs: usize,
    /// Concurrency of the streamed-answer phases.
    #[arg(long, default_value_t = 1)]
    stream_concurrency: usize,
    /// Only the streamed-answer phases.
    #[arg(long)]
    stream_only: bool,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The bench's name, in its progress lines.
const NAME: &str = "bench-postgres";

/// Words (one per chunk) of a streamed answer.
const STREAM_WORDS: u64 = 100;

/// Time-to-first-token samples (ns) of the requests in flight; emptied before each phase.
type Ttft = Arc<Mutex<Vec<u64>>>;

fn lock(ttft: &Ttft) -> std::sync::MutexGuard<'_, Vec<u64>> {
    ttft.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One run through `base`'s native run endpoint, timed to the last byte of its stream; the
/// time to its first text `update` frame goes to `ttft`.
fn run_once(
    client: &reqwest::Client,
    base: &str,
    ttft: &Ttft,
) -> impl Fn(usize) -> futures::future::BoxFuture<'static, Result<Duration, String>> + Clone + Send + Sync + 'static {
    let (client, url, ttft) = (client.clone(), Arc::new(format!("{base}/api/agents/support/run")), ttft.clone());
    move |_| {
        let (client, url, ttft) = (client.clone(), url.clone(), ttft.clone());
        Box::pin(async move {
            let t = Instant::now();
            let sent = client.post(url.as_str()).json(&json!({"message": "Where is order 4182?"})).send().await;
            let mut response = sent.map_err(|e| e.to_string())?;
            let mut body = Vec::new();
            let mut first = None;
            while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
                body.extend_from_slice(&chunk);
                if first.is_none() && contains(&body, b"event: update\ndata: {\"kind\":\"text\"") {
                    first = Some(t.elapsed());
                }
            }
            let elapsed = t.elapsed();
            let body = String::from_utf8_lossy(&body);
            if !body.contains("event: done") {
                return Err(format!("a run did not complete: {body}"));
            }
            if let Some(first) = first {
                lock(&ttft).push(u64::try_from(first.as_nanos()).unwrap_or(u64::MAX));
            }
            Ok(elapsed)
        })
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Transactions committed in this database so far. Backends report their counters to the
/// statistics system in the background, so wait for them to land first.
async fn commits(pool: &sqlx::PgPool) -> Result<i64, BoxError> {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut conn = pool.acquire().await?;
    sqlx::query("SELECT pg_stat_clear_snapshot()").execute(&mut *conn).await?;
    Ok(sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        .fetch_one(&mut *conn)
        .await?)
}

/// One measured phase of one storage.
struct Row {
    /// `whole` or `stream Ns`.
    kind: String,
    concurrency: usize,
    storage: &'static str,
    phase: Phase,
    ttft_ms: Option<f64>,
    /// Postgres transactions per run (whole-answer phases only).
    transactions: Option<f64>,
    statements: Option<Statements>,
}

impl Row {
    fn cpu_us(&self) -> Option<f64> {
        self.phase.cpu_us_per_request(self.phase.server_cpu)
    }

    fn print(&self) {
        let opt = |v: Option<f64>, digits: usize| v.map_or_else(|| "—".to_owned(), |v| format!("{v:.digits$}"));
        println!(
            "{:<10} {:>4} {:<9} {:>8.0} {:>9.3} {:>9.3} {:>9} {:>10} {:>9} {:>9}",
            self.kind,
            self.concurrency,
            self.storage,
            self.phase.throughput(),
            self.phase.percentile_ms(50.0),
            self.phase.percentile_ms(99.0),
            opt(self.ttft_ms, 3),
            opt(self.cpu_us(), 0),
            opt(self.statements.as_ref().map(Statements::per_run), 2),
            opt(self.transactions, 2),
        );
    }

    fn json(&self) -> Value {
        json!({
            "kind": self.kind,
            "concurrency": self.concurrency,
            "storage": self.storage,
            "runs": self.phase.requests,
            "runsPerSecond": self.phase.throughput(),
            "p50Ms": self.phase.percentile_ms(50.0),
            "p99Ms": self.phase.percentile_ms(99.0),
            "ttftP50Ms": self.ttft_ms,
            "serverCpuUsPerRequest": self.cpu_us(),
            "statementsPerRun": self.statements.as_ref().map(Statements::per_run),
            "postgresMsPerRun": self.statements.as_ref().map(Statements::ms_per_run),
            "transactionsPerRun": self.transactions,
        })
    }
}

/// The median of `samples` (ns), in milliseconds.
fn median_ms(mut samples: Vec<u64>) -> Option<f64> {
    samples.sort_unstable();
    (!samples.is_empty()).then(|| tracon_tests::bench::percentile_ms(&samples, 50.0) / 1000.0)
}

/// What every phase needs: the client, the Postgres pool and statement counter, the flags.
struct Rig {
    client: reqwest::Client,
    pool: sqlx::PgPool,
    log: StatementLog,
    ttft: Ttft,
    args: Args,
}

impl Rig {
    /// Measures `runs` runs at `c` through `server` after `warmup` unmeasured ones.
    async fn phase(
        &self,
        kind: &str,
        c: usize,
        (storage, server): (&'static str, &Server),
        warmup: usize,
        runs: usize,
    ) -> Result<Row, BoxError> {
        let request = run_once(&self.client, &server.base, &self.ttft);
        if warmup > 0 {
            complete(measure(NAME, c, 0, warmup, server.pid(), request.clone()).await?)?;
        }
        let on_postgres = storage == "postgres";
        // Transactions only for whole answers: the counter needs 1.5 s to settle.
        let count_transactions = on_postgres && kind == "whole";
        let before = if count_transactions { commits(&self.pool).await? } else { 0 };
        if on_postgres {
            self.log.reset().await?;
        }
        lock(&self.ttft).clear();
        let phase = complete(measure(NAME, c, 0, runs, server.pid(), request).await?)?;
        let ttft_ms = median_ms(std::mem::take(&mut *lock(&self.ttft)));
        let statements = if on_postgres { Some(self.log.read(runs).await?) } else { None };
        // The two reads of the statistics are themselves two transactions.
        let transactions = if count_transactions {
            Some((commits(&self.pool).await? - 2 - before) as f64 / runs as f64)
        } else {
            None
        };
        let row = Row { kind: kind.to_owned(), concurrency: c, storage, phase, ttft_ms, transactions, statements };
        row.print();
        if self.args.statements
            && let Some(s) = &row.statements
        {
            print!("{}", s.lines("           "));
        }
        Ok(row)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let url = database_url(args.database_url.as_deref())?;
    let tracon = resolve_binary(&args.tracon)?;
    if args.stream_seconds.contains(&0) || args.stream_runs == 0 || args.stream_concurrency == 0 {
        return Err("--stream-seconds, --stream-runs and --stream-concurrency must each be at least 1".into());
    }
    let mock = MockServer::start(MockConfig::default()).await?;
    if args.tool_round {
        // The mock picks a turn by the assistant messages already sent: first the call, then
        // the answer, for every run at any concurrency.
        let call: MockTurn = serde_json::from_value(
            json!({"toolCalls": [{"name": "get_order_status", "arguments": {"orderId": "4182"}}]}),
        )?;
        let answer: MockTurn = serde_json::from_value(json!({"text": "It has shipped."}))?;
        mock.script("bench", vec![call, answer]);
    }
    let schema = format!("bench_{}", std::process::id());
    let memory = Server::start(&tracon, &mock.base_url(), &[]).await?;
    let postgres = Server::start(&tracon, &mock.base_url(), &postgres_env(&url, &schema)).await?;
    let pool = sqlx::PgPool::connect(&url).await?;
    let log = StatementLog::connect(&url).await?;
    let client = reqwest::Client::builder().pool_max_idle_per_host(256).tcp_nodelay(true).build()?;
    let rig = Rig { client, pool, log, ttft: Arc::default(), args };
    let args = &rig.args;

    println!("== Tracon on Postgres vs in-memory ==");
    println!("command: {}", tracon_tests::bench::command_line());
    println!("tracon:  {}", tracon.display());
    println!("cores:   {}", tracon_tests::bench::cores());
    println!("load:    {} (at start)", load_average());
    println!();
    println!(
        "{:<10} {:>4} {:<9} {:>8} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}",
        "answer", "C", "storage", "runs/s", "p50 ms", "p99 ms", "ttft p50", "srvCPU µs", "stmts/run", "xacts/run"
    );
    let servers = [("memory", &memory), ("postgres", &postgres)];
    let mut rows = Vec::new();
    let mut worst_added = None::<f64>;
    if !args.stream_only {
        for &c in &args.concurrency {
            let mut p50s = [0.0; 2];
            for (i, server) in servers.into_iter().enumerate() {
                let row = rig.phase("whole", c, server, 200.max(c * 4), args.requests).await?;
                p50s[i] = row.phase.percentile_ms(50.0);
                rows.push(row);
            }
            let added = p50s[1] - p50s[0];
            worst_added = Some(worst_added.unwrap_or(0.0).max(added));
            println!("           postgres − memory at p50: {added:.3} ms; load {}", load_average());
        }
    }
    for &seconds in &args.stream_seconds {
        let delay = seconds * 1000 / STREAM_WORDS;
        let text: String = (0..STREAM_WORDS).map(|i| format!("w{i} ")).collect();
        let turn: MockTurn = serde_json::from_value(json!({"text": text.trim_end(), "chunkDelayMs": delay}))?;
        mock.script("bench", vec![turn]);
        let kind = format!("stream {seconds}s");
        let mut ttfts = [None; 2];
        for (i, server) in servers.into_iter().enumerate() {
            let row = rig.phase(&kind, args.stream_concurrency, server, 0, args.stream_runs).await?;
            ttfts[i] = row.ttft_ms;
            rows.push(row);
        }
        if let [Some(m), Some(p)] = ttfts {
            println!(
                "           time to first token, postgres − memory at p50: {:.3} ms; load {}",
                p - m,
                load_average()
            );
        }
        mock.clear_script("bench");
    }
    println!();
    if let Some(worst) = worst_added {
        println!(
            "target: recording to Postgres adds < 2 ms p50 per run: {}",
            if worst < 2.0 { "met" } else { "NOT MET" }
        );
    }
    let report = json!({
        "bench": NAME,
        "command": tracon_tests::bench::command_line(),
        "tracon": tracon.display().to_string(),
        "load": load_average(),
        "phases": rows.iter().map(|r| {
            let mut j = r.json();
            j["statements"] = r.statements.as_ref().map_or(Value::Null, Statements::json);
            j
        }).collect::<Vec<_>>(),
    });
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .map_err(|e| format!("could not write {}: {e}", path.display()))?;
        println!("JSON written to {}", path.display());
    }
    rig.log.drop_schema(&schema).await;
    memory.stop();
    postgres.stop();
    print_summary(json!({
        "bench": NAME,
        "load": load_average(),
        "phases": rows.iter().map(Row::json).collect::<Vec<_>>(),
    }));
    Ok(())
}
