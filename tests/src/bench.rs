//! What the release benchmarks (`bench-run`, `bench-openai`, `bench-postgres`,
//! `bench-triggers`) share: a `tracon serve` child process on a free loopback port (its log
//! kept under `target/bench/`), a loopback HTTP client, the concurrency driver that times
//! requests from C workers ([`measure`]), CPU time from `/proc`, percentiles, and — when a
//! bench runs the server on Postgres — the statements it issued per run, from
//! `pg_stat_statements` ([`StatementLog`]).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A running `tracon serve`; killed on drop.
pub struct Server {
    child: Child,
    pub base: String,
    /// Where its stdout and stderr go (`None` when the file could not be created).
    log: Option<PathBuf>,
}

impl Server {
    /// Starts `bin` with only `env` (and a quiet log), its demo agent answering from the mock
    /// model server at `mock`, and waits until `/api/meta` answers.
    pub async fn start(bin: &Path, mock: &str, env: &[(&str, &str)]) -> Result<Server, BoxError> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut cmd = Command::new(bin);
        cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .env_clear()
            .env("RUST_LOG", "warn")
            .env("OPENAI_API_KEY", "bench-key")
            .env("Tracon__Providers__OpenAI__Endpoint", format!("{mock}/v1"))
            .env("Tracon__Providers__OpenAI__DefaultModel", "bench");
        let log = log_file(port);
        match log.as_ref().and_then(|(_, f)| Some((f.try_clone().ok()?, f.try_clone().ok()?))) {
            Some((out, err)) => cmd.stdout(out).stderr(err),
            None => cmd.stdout(Stdio::null()).stderr(Stdio::null()),
        };
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut server =
            Server { child: cmd.spawn()?, base: format!("http://127.0.0.1:{port}"), log: log.map(|(p, _)| p) };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("tracon exited during start-up ({status}); its log: {}", server.log_hint()).into());
            }
            if let Ok(r) = client.get(format!("{}/api/meta", server.base)).send().await
                && r.status().is_success()
            {
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("tracon did not start within 30 s; its log: {}", server.log_hint()).into())
    }

    /// Where the server's log is, for an error message.
    pub fn log_hint(&self) -> String {
        self.log.as_ref().map_or_else(|| "not kept".to_owned(), |p| p.display().to_string())
    }

    /// SIGTERM (the server drains, then exits), SIGKILL if it has not exited in 5 s.
    pub fn stop(mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        // `kill` the command: sending a signal ourselves would need `unsafe` libc calls.
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The child's process id, for its CPU time ([`cpu_time`]) and memory under `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `target/bench/tracon-<port>.log` under the workspace root, when it can be created.
fn log_file(port: u16) -> Option<(PathBuf, std::fs::File)> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = manifest.parent().unwrap_or(manifest).join("target").join("bench");
    std::fs::create_dir_all(&dir).ok()?;
    let path = dir.join(format!("tracon-{port}.log"));
    let file = std::fs::File::create(&path).ok()?;
    Some((path, file))
}

/// The `p`th percentile of `sorted` microseconds, in milliseconds (nearest rank).
pub fn percentile_ms(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize - 1;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

/// `path` when it is a file; a relative path is also tried from the workspace root, since
/// `cargo run` keeps the caller's directory. The error says how to build the binary.
pub fn resolve_binary(path: &Path) -> Result<PathBuf, BoxError> {
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let from_root = manifest.parent().unwrap_or(manifest).join(path);
    if path.is_relative() && from_root.is_file() {
        return Ok(from_root);
    }
    Err(format!(
        "the tracon binary is not at {} — build it first with `cargo build --release -p tracon` \
         (or pass --tracon <path>)",
        path.display()
    )
    .into())
}

/// A client for loopback benchmarks: `pool` idle connections kept per host, `TCP_NODELAY`
/// (small frames leave at once), no proxy from the environment, `timeout` per request.
pub fn loopback_client(pool: usize, timeout: Duration) -> Result<reqwest::Client, BoxError> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(pool.max(1))
        .tcp_nodelay(true)
        .no_proxy()
        .timeout(timeout)
        .build()?)
}

/// User + system CPU that process `pid` (this process when `None`) used so far, from
/// `/proc/<pid>/stat`; `None` off Linux.
pub fn cpu_time(pid: Option<u32>) -> Option<Duration> {
    let path = pid.map_or_else(|| "/proc/self/stat".to_owned(), |p| format!("/proc/{p}/stat"));
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name may contain spaces; fields are counted after its closing ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 (utime) and 15 (stime) of proc(5); `rest` starts at field 3.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_secs_f64((utime + stime) / clock_ticks_per_second()))
}

/// `getconf CLK_TCK`, asked once; 100 (Linux almost everywhere) when it cannot be asked.
fn clock_ticks_per_second() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|t| *t > 0.0)
            .unwrap_or(100.0)
    })
}

// ---- the concurrency driver -------------------------------------------------------------------

/// Error messages kept per phase (the count of failures is always exact).
pub const KEPT_ERRORS: usize = 3;

/// One measured phase: latencies (sorted, nanoseconds) and what it cost.
pub struct Phase {
    pub requests: usize,
    pub latencies_ns: Vec<u64>,
    /// Failed requests, the warm-up's included.
    pub failures: usize,
    pub errors: Vec<String>,
    pub wall: Duration,
    /// CPU the server used during the measured part.
    pub server_cpu: Option<Duration>,
    /// CPU this process (client and mock) used during the measured part.
    pub bench_cpu: Option<Duration>,
}

impl Phase {
    /// Nearest-rank percentile, in milliseconds.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies_ns.is_empty() {
            return 0.0;
        }
        let rank = ((p / 100.0) * self.latencies_ns.len() as f64).ceil() as usize;
        self.latencies_ns[rank.clamp(1, self.latencies_ns.len()) - 1] as f64 / 1e6
    }

    pub fn mean_ms(&self) -> f64 {
        if self.latencies_ns.is_empty() {
            return 0.0;
        }
        self.latencies_ns.iter().map(|&n| n as f64).sum::<f64>() / self.latencies_ns.len() as f64 / 1e6
    }

    /// Requests per second of wall time.
    pub fn throughput(&self) -> f64 {
        self.requests as f64 / self.wall.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// `cpu` (the server's or this process's) per measured request, in microseconds.
    pub fn cpu_us_per_request(&self, cpu: Option<Duration>) -> Option<f64> {
        cpu.map(|c| c.as_secs_f64() * 1e6 / self.requests.max(1) as f64)
    }
}

/// One measured request: sends the phase's `n`th request (from 0) and returns how long it
/// took (the bench decides what "took" means), or why it failed.
pub trait Request: Fn(usize) -> Self::Fut + Clone + Send + Sync + 'static {
    type Fut: std::future::Future<Output = Result<Duration, String>> + Send + 'static;
}

impl<F, Fut> Request for F
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Duration, String>> + Send + 'static,
{
    type Fut = Fut;
}

/// `warmup` unrecorded requests, then `total` timed ones, each shared out to `concurrency`
/// workers pulling from one counter. `request(n)` sends the phase's `n`th request (from 0)
/// and returns how long it took (the bench decides what "took" means), or why it failed.
/// `label` names the bench in the warm-up's failure line.
pub async fn measure(
    label: &str,
    concurrency: usize,
    warmup: usize,
    total: usize,
    server_pid: u32,
    request: impl Request,
) -> Result<Phase, BoxError> {
    let warm = fan_out(concurrency, warmup, request.clone()).await?;
    if warm.failures > 0 {
        // Reported with the measured failures; the warm-up does not stop the run.
        eprintln!("{label}: {} warm-up request(s) failed: {:?}", warm.failures, warm.errors);
    }
    let server_before = cpu_time(Some(server_pid));
    let bench_before = cpu_time(None);
    let started = Instant::now();
    let mut result = fan_out(concurrency, total, request).await?;
    let wall = started.elapsed();
    let server_after = cpu_time(Some(server_pid));
    let bench_after = cpu_time(None);
    result.latencies_ns.sort_unstable();
    Ok(Phase {
        requests: total,
        latencies_ns: result.latencies_ns,
        failures: result.failures + warm.failures,
        errors: warm.errors.into_iter().chain(result.errors).take(KEPT_ERRORS).collect(),
        wall,
        server_cpu: server_before.zip(server_after).map(|(a, b)| b.saturating_sub(a)),
        bench_cpu: bench_before.zip(bench_after).map(|(a, b)| b.saturating_sub(a)),
    })
}

/// `phase` when every request of it succeeded; its first errors otherwise (for the benches
/// that stop at a failure).
pub fn complete(phase: Phase) -> Result<Phase, BoxError> {
    match phase.failures {
        0 => Ok(phase),
        n => Err(format!("{n} request(s) failed: {:?}", phase.errors).into()),
    }
}

#[derive(Default)]
struct Samples {
    latencies_ns: Vec<u64>,
    failures: usize,
    errors: Vec<String>,
}

async fn fan_out(concurrency: usize, total: usize, request: impl Request) -> Result<Samples, BoxError> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let (request, next) = (request.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut samples =
                Samples { latencies_ns: Vec::with_capacity(total / concurrency + 1), ..Default::default() };
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= total {
                    break;
                }
                match request(n).await {
                    Ok(d) => samples.latencies_ns.push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
                    Err(e) => {
                        samples.failures += 1;
                        if samples.errors.len() < KEPT_ERRORS {
                            samples.errors.push(e);
                        }
                    }
                }
            }
            samples
        }));
    }
    let mut all = Samples { latencies_ns: Vec::with_capacity(total), ..Default::default() };
    for worker in workers {
        let s = worker.await.map_err(|e| format!("a benchmark worker failed: {e}"))?;
        all.latencies_ns.extend(s.latencies_ns);
        all.failures += s.failures;
        all.errors.extend(s.errors);
    }
    all.errors.truncate(KEPT_ERRORS);
    Ok(all)
}

// ---- what the two latency benches (`bench-run`, `bench-openai`) share -----------------------

/// The demo agent shipped with the local server.
pub const DEMO_AGENT: &str = "support";
/// The model the server's `openai` provider asks the mock for ([`Server::start`]); the mock
/// has no script for it, so it gives its default answer (short text, no tool calls).
pub const MOCK_MODEL: &str = "bench";
pub const QUESTION: &str = "Where is order 4182?";
/// A single request that takes this long is a failure, not a data point.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The concurrency the latency targets are set at.
pub const TARGET_CONCURRENCY: usize = 64;

/// The database a Postgres bench uses: `--database-url`, else `TRACON_TEST_DATABASE_URL`,
/// else `DATABASE_URL`.
pub fn database_url(flag: Option<&str>) -> Result<String, BoxError> {
    flag.map(str::to_owned)
        .or_else(|| std::env::var("TRACON_TEST_DATABASE_URL").ok())
        .or_else(|| std::env::var("DATABASE_URL").ok())
        .ok_or_else(|| {
            "give --database-url (or set DATABASE_URL) to a Postgres database you may create a schema in".into()
        })
}

/// The flags of a latency bench: how many requests at which concurrency levels, the server
/// binary, the mock model's pacing, and where to write the JSON.
#[derive(Debug, clap::Args)]
pub struct LatencyArgs {
    /// Measured requests per phase [default: 2000 at C=1, 20000 otherwise].
    #[arg(long)]
    pub requests: Option<usize>,
    /// Concurrency levels, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    pub concurrency: Vec<usize>,
    /// Unrecorded warm-up requests per phase (at least 4 per worker, so every pooled
    /// connection is open before measuring).
    #[arg(long, default_value_t = 200)]
    pub warmup: usize,
    /// The `tracon` binary (a relative path is also tried from the workspace root).
    #[arg(long, default_value = "target/release/tracon")]
    pub tracon: PathBuf,
    /// Mock model: wait before sending response headers.
    #[arg(long, default_value_t = 0)]
    pub mock_latency_ms: u64,
    /// Mock model: wait between streamed chunks.
    #[arg(long, default_value_t = 0)]
    pub mock_chunk_delay_ms: u64,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Run the server on the Postgres stores, in a fresh schema of this database (as
    /// `bench-postgres` does), and count the statements each subject phase issued per run
    /// from `pg_stat_statements` (the database needs it in `shared_preload_libraries`;
    /// `scripts/bench-postgres.sh start` makes such a cluster). Without it: in-memory stores.
    #[arg(long)]
    pub database_url: Option<String>,
    /// With `--database-url`: also list each statement's calls per run and time in Postgres.
    #[arg(long)]
    pub statements: bool,
}

impl LatencyArgs {
    /// This process's flags, for a bench called `name` that measures what `about` says.
    pub fn parse(name: &'static str, about: &'static str) -> LatencyArgs {
        use clap::{Args as _, FromArgMatches as _};
        let matches = LatencyArgs::augment_args(clap::Command::new(name).about(about)).get_matches();
        LatencyArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }

    /// The flags checked, and the server binary they name.
    pub fn check(&self) -> Result<PathBuf, BoxError> {
        if self.concurrency.is_empty() || self.concurrency.contains(&0) {
            return Err("--concurrency needs one or more levels, each at least 1".into());
        }
        if self.requests == Some(0) {
            return Err("--requests must be at least 1".into());
        }
        resolve_binary(&self.tracon)
    }

    /// Measured requests at `concurrency`.
    pub fn requests_for(&self, concurrency: usize) -> usize {
        self.requests.unwrap_or(if concurrency <= 1 { 2_000 } else { 20_000 })
    }

    /// Warm-up requests at `concurrency`: at least four per worker.
    pub fn warmup_for(&self, concurrency: usize) -> usize {
        self.warmup.max(4 * concurrency)
    }

    pub fn mock_config(&self) -> crate::mock::MockConfig {
        crate::mock::MockConfig { latency_ms: self.mock_latency_ms, chunk_delay_ms: self.mock_chunk_delay_ms }
    }

    /// A client pooled for the highest concurrency level.
    pub fn client(&self, timeout: Duration) -> Result<reqwest::Client, BoxError> {
        loopback_client(self.concurrency.iter().copied().max().unwrap_or(1), timeout)
    }

    /// Writes `report` to `--json` when given, and says so on stdout with the report.
    #[allow(clippy::print_stdout)]
    pub fn write_json(&self, report: &serde_json::Value) -> Result<(), BoxError> {
        let Some(path) = &self.json else { return Ok(()) };
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(path, text).map_err(|e| format!("could not write {}: {e}", path.display()))?;
        println!("JSON written to {}", path.display());
        Ok(())
    }

    /// The report's header lines: command, binary, cores, the mock's pacing and `compared`
    /// (what baseline and subject are).
    pub fn header(&self, title: &str, tracon: &Path, compared: &str) -> String {
        format!(
            "\n== {title} ==\ncommand:  {}\ntracon:   {}\ncores:    {}\nload:     {}\nstorage:  {}\nmock:     latency_ms={} chunk_delay_ms={}; {compared}\n",
            command_line(),
            tracon.display(),
            cores(),
            load_average(),
            self.storage(),
            self.mock_latency_ms,
            self.mock_chunk_delay_ms
        )
    }

    /// `memory` or `postgres`: which stores the server runs on.
    pub fn storage(&self) -> &'static str {
        if self.database_url.is_some() { "postgres" } else { "memory" }
    }

    /// The JSON fields every latency report starts with.
    pub fn json_head(&self, tracon: &Path) -> serde_json::Map<String, serde_json::Value> {
        let serde_json::Value::Object(head) = serde_json::json!({
            "command": command_line(),
            "tracon": tracon.display().to_string(),
            "cores": cores(),
            "storage": self.storage(),
            "load": load_average(),
            "mock": {"latencyMs": self.mock_latency_ms, "chunkDelayMs": self.mock_chunk_delay_ms},
            "requestsOverride": self.requests,
        }) else {
            unreachable!("a JSON object literal")
        };
        head
    }
}

/// What a latency bench drives: the mock model server, a `tracon` server answering from it
/// (killed when this is dropped, errors included), and the client pooled for the highest
/// concurrency level.
pub struct LatencyRig {
    pub tracon_bin: PathBuf,
    pub mock: crate::mock::MockServer,
    pub mock_url: String,
    pub client: reqwest::Client,
    pub server: Server,
    /// With `--database-url`: the statement counter and the schema the server runs in.
    pub postgres: Option<(StatementLog, String)>,
}

impl LatencyArgs {
    /// The flags checked, the mock model started with their pacing, and the `--tracon` server
    /// started against it with `env`.
    pub async fn start(&self, env: &[(&str, &str)]) -> Result<LatencyRig, BoxError> {
        let tracon_bin = self.check()?;
        let mock = crate::mock::MockServer::start(self.mock_config())
            .await
            .map_err(|e| format!("could not start the mock model: {e}"))?;
        let mock_url = mock.base_url();
        let client = self.client(REQUEST_TIMEOUT)?;
        let (mut env, mut postgres) = (env.to_vec(), None);
        let schema = format!("bench_{}", std::process::id());
        if let Some(url) = &self.database_url {
            postgres = Some((StatementLog::connect(url).await?, schema.clone()));
            env.extend(postgres_env(url, &schema));
        }
        let server = Server::start(&tracon_bin, &mock_url, &env)
            .await
            .map_err(|e| format!("could not start {}: {e}", tracon_bin.display()))?;
        Ok(LatencyRig { tracon_bin, mock, mock_url, client, server, postgres })
    }
}

impl LatencyRig {
    /// The bench `name` with `args` on this rig, the mock asked for [`MOCK_MODEL`].
    pub fn bench<'a>(&'a self, name: &'a str, args: &'a LatencyArgs) -> LatencyBench<'a> {
        LatencyBench {
            name,
            args,
            server_pid: self.server.pid(),
            client: &self.client,
            mock_url: &self.mock_url,
            model: MOCK_MODEL,
            statements: self.postgres.as_ref().map(|(log, _)| log),
        }
    }

    /// Prints the report `text`, writes its `json` where `--json` says, stops the server and
    /// the mock.
    #[allow(clippy::print_stdout)]
    pub async fn finish(self, args: &LatencyArgs, text: &str, json: &serde_json::Value) -> Result<(), BoxError> {
        println!("{text}");
        args.write_json(json)?;
        self.server.stop();
        self.mock.shutdown().await;
        if let Some((log, schema)) = &self.postgres {
            log.drop_schema(schema).await;
        }
        Ok(())
    }
}

/// The first 300 bytes of a body, for an error message.
pub fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned()
}

/// A report's closing section: the failures of its phases, or `none`.
pub fn failures_section(failures: &str) -> String {
    format!("\n-- failures --\n{}\n", if failures.is_empty() { "none\n" } else { failures })
}

/// The process exit for a bench's outcome: success only when it ran and nothing failed.
pub fn exit_code(name: &str, outcome: Result<bool, BoxError>) -> std::process::ExitCode {
    match outcome {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("{name}: some requests failed (see the report above)");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// This process's command line, quoted where an argument has a space.
pub fn command_line() -> String {
    std::env::args().map(|a| if a.contains(' ') { format!("'{a}'") } else { a }).collect::<Vec<_>>().join(" ")
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

pub fn yes_no(ok: bool) -> &'static str {
    if ok { "yes" } else { "NO" }
}

pub fn met(ok: bool) -> &'static str {
    if ok { "MET" } else { "NOT MET" }
}

/// A microsecond figure, or `n/a`.
pub fn opt_us(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.0}"))
}

/// The mock records every request of `model`; between phases that log is only memory.
pub async fn forget_mock_requests(client: &reqwest::Client, mock_url: &str, model: &str) {
    // Best effort: a failure only means the mock keeps some memory.
    let _ = client.delete(format!("{mock_url}/_mock/requests/{model}")).send().await;
}

/// The column heads of [`Phase::row`].
pub fn phase_heads() -> String {
    format!(
        "{:>6} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>12}",
        "reqs", "fail", "mean", "p50", "p90", "p99", "p99.9", "max", "req/s", "srvCPU us/rq"
    )
}

impl Phase {
    /// Requests, failures, mean, percentiles, throughput and server CPU, in [`PHASE_HEADS`]'s
    /// columns.
    pub fn row(&self) -> String {
        format!(
            "{:>6} {:>5} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>9.0} {:>12}",
            self.requests,
            self.failures,
            self.mean_ms(),
            self.percentile_ms(50.0),
            self.percentile_ms(90.0),
            self.percentile_ms(99.0),
            self.percentile_ms(99.9),
            self.percentile_ms(100.0),
            self.throughput(),
            // The server does no work in a baseline; its column shows idle noise there.
            opt_us(self.cpu_us_per_request(self.server_cpu)),
        )
    }

    /// The phase's figures as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "requests": self.requests,
            "failures": self.failures,
            "errors": self.errors,
            "meanMs": self.mean_ms(),
            "p50Ms": self.percentile_ms(50.0),
            "p90Ms": self.percentile_ms(90.0),
            "p99Ms": self.percentile_ms(99.0),
            "p999Ms": self.percentile_ms(99.9),
            "maxMs": self.percentile_ms(100.0),
            "requestsPerSecond": self.throughput(),
            "wallSeconds": self.wall.as_secs_f64(),
            "serverCpuUsPerRequest": self.cpu_us_per_request(self.server_cpu),
            "clientCpuUsPerRequest": self.cpu_us_per_request(self.bench_cpu),
        })
    }
}

/// A baseline and a subject phase measured side by side.
pub struct Pair {
    pub baseline: Phase,
    pub subject: Phase,
    /// What the subject phase issued to Postgres (when the server runs on it).
    pub statements: Option<Statements>,
}

impl Pair {
    /// Subject − baseline at percentile `p`, in milliseconds.
    pub fn added_ms(&self, p: f64) -> f64 {
        self.subject.percentile_ms(p) - self.baseline.percentile_ms(p)
    }

    pub fn ratio_p50(&self) -> f64 {
        self.subject.percentile_ms(50.0) / self.baseline.percentile_ms(50.0).max(f64::MIN_POSITIVE)
    }

    pub fn failed(&self) -> bool {
        self.baseline.failures > 0 || self.subject.failures > 0
    }

    /// The column heads of [`Pair::row`].
    pub fn heads() -> String {
        format!(
            "{:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9} {:>10} {:>10}",
            "base p50",
            "base p99",
            "subj p50",
            "subj p99",
            "added p50",
            "added p99",
            "ratio p50",
            "base rq/s",
            "subj rq/s"
        )
    }

    /// Both sides' p50 and p99, what the subject added, the ratio and both throughputs.
    pub fn row(&self) -> String {
        format!(
            "{:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>10.3} {:>10.3} {:>8.2}x {:>10.0} {:>10.0}",
            self.baseline.percentile_ms(50.0),
            self.baseline.percentile_ms(99.0),
            self.subject.percentile_ms(50.0),
            self.subject.percentile_ms(99.0),
            self.added_ms(50.0),
            self.added_ms(99.0),
            self.ratio_p50(),
            self.baseline.throughput(),
            self.subject.throughput(),
        )
    }

    /// Each failed phase's line for the report's failures section, `label` naming the level.
    pub fn failure_lines(&self, label: &str) -> String {
        [("baseline", &self.baseline), ("subject", &self.subject)]
            .into_iter()
            .filter(|(_, p)| p.failures > 0)
            .map(|(name, p)| {
                format!("{label} {name}: {} failed (warm-up included); first: {:?}\n", p.failures, p.errors)
            })
            .collect()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "baseline": self.baseline.json(),
            "subject": self.subject.json(),
            "addedP50Ms": self.added_ms(50.0),
            "addedP99Ms": self.added_ms(99.0),
            "ratioP50": self.ratio_p50(),
            "statements": self.statements.as_ref().map(Statements::json),
        })
    }
}

/// `send` as a [`measure`] request: it ignores the request number.
pub fn sender<T, F, Fut>(
    client: &reqwest::Client,
    target: &std::sync::Arc<T>,
    send: F,
) -> impl Fn(usize) -> futures::future::BoxFuture<'static, Result<Duration, String>> + Clone + Send + Sync + 'static
where
    T: Send + Sync + 'static,
    F: Fn(reqwest::Client, std::sync::Arc<T>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Duration, String>> + Send + 'static,
{
    let (client, target) = (client.clone(), target.clone());
    move |_| Box::pin(send(client.clone(), target.clone()))
}

/// One latency bench under way: its name, flags, the server measured, and the mock whose
/// request log is forgotten between phases.
pub struct LatencyBench<'a> {
    pub name: &'a str,
    pub args: &'a LatencyArgs,
    pub server_pid: u32,
    pub client: &'a reqwest::Client,
    pub mock_url: &'a str,
    /// The model the mock is asked for (whose request log is forgotten).
    pub model: &'a str,
    /// Counts the subject phase's statements, when the server runs on Postgres.
    pub statements: Option<&'a StatementLog>,
}

impl LatencyBench<'_> {
    /// Measures `baseline` then `subject` at `concurrency`; `label` names the level in the
    /// progress lines.
    pub async fn pair(
        &self,
        concurrency: usize,
        label: &str,
        baseline: impl Request,
        subject: impl Request,
    ) -> Result<Pair, BoxError> {
        let (name, n, warmup) = (self.name, self.args.requests_for(concurrency), self.args.warmup_for(concurrency));
        eprintln!("{name}: C={concurrency}{label}: baseline ({warmup} warm-up + {n} requests)…");
        let baseline = measure(name, concurrency, warmup, n, self.server_pid, baseline).await?;
        forget_mock_requests(self.client, self.mock_url, self.model).await;
        eprintln!("{name}: C={concurrency}{label}: subject ({warmup} warm-up + {n} requests)…");
        let (subject, statements) = match self.statements {
            None => (measure(name, concurrency, warmup, n, self.server_pid, subject).await?, None),
            Some(log) => {
                // The warm-up apart, so the statement count covers the measured runs only.
                let warm = measure(name, concurrency, warmup, 0, self.server_pid, subject.clone()).await?;
                log.reset().await?;
                let mut phase = measure(name, concurrency, 0, n, self.server_pid, subject).await?;
                let statements = log.read(n).await?;
                phase.failures += warm.failures;
                phase.errors = warm.errors.into_iter().chain(phase.errors).take(KEPT_ERRORS).collect();
                (phase, Some(statements))
            }
        };
        forget_mock_requests(self.client, self.mock_url, self.model).await;
        Ok(Pair { baseline, subject, statements })
    }
}

/// The 1, 5 and 15 minute load averages from `/proc/loadavg` (the machine may be shared), or
/// `n/a`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "n/a".to_owned())
}

// ---- Postgres: the server on a fresh schema, and the statements it issues -------------------

/// The environment that runs `tracon serve` on the Postgres stores in `schema` of `url` (the
/// server creates and migrates the schema at start-up).
pub fn postgres_env<'a>(url: &'a str, schema: &'a str) -> [(&'a str, &'a str); 3] {
    [("DATABASE_URL", url), ("Tracon__PostgreSql__SchemaName", schema), ("Tracon__PostgreSql__MaxConnections", "16")]
}

/// Counts the statements a phase issued, from `pg_stat_statements` in the bench's database:
/// [`reset`](StatementLog::reset) before the phase, [`read`](StatementLog::read) after it.
/// Every statement counted is one round trip from the server (sqlx's extended protocol sends
/// parse, bind and execute in one go); `BEGIN`/`COMMIT` count as statements of their own.
/// Whatever the server does in the background during the phase (a reaper, a scheduler) is
/// counted too — it is part of what a run costs.
pub struct StatementLog {
    pool: sqlx::PgPool,
}

/// One phase's statements.
pub struct Statements {
    /// The runs the phase measured.
    pub runs: usize,
    /// Each statement: its normalised text, calls, mean and total time in Postgres (ms),
    /// most total time first.
    pub each: Vec<(String, i64, f64, f64)>,
}

impl StatementLog {
    /// A small pool on `url`, with the extension created (it needs the server started with
    /// `shared_preload_libraries = 'pg_stat_statements'`).
    pub async fn connect(url: &str) -> Result<StatementLog, BoxError> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(url)
            .await
            .map_err(|e| format!("could not connect to the benchmark database: {e}"))?;
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").execute(&pool).await?;
        let log = StatementLog { pool };
        log.reset().await?;
        Ok(log)
    }

    /// Empties `pg_stat_statements`.
    pub async fn reset(&self) -> Result<(), BoxError> {
        sqlx::query("SELECT pg_stat_statements_reset()").execute(&self.pool).await.map_err(|e| {
            format!("pg_stat_statements is not loaded (set shared_preload_libraries = 'pg_stat_statements'): {e}")
        })?;
        Ok(())
    }

    /// The statements run in this database since the reset, for `runs` runs. Waits a moment
    /// first: a run's last write (its ending) may still be under way when the client has the
    /// whole answer. The bench's own statements mention `pg_stat` and are left out.
    pub async fn read(&self, runs: usize) -> Result<Statements, BoxError> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let each: Vec<(String, i64, f64, f64)> = sqlx::query_as(
            "SELECT query, calls, mean_exec_time, total_exec_time FROM pg_stat_statements \
             WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(Statements { runs, each })
    }

    /// Drops the bench's schema (best effort).
    pub async fn drop_schema(&self, schema: &str) {
        let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).execute(&self.pool).await;
    }
}

impl Statements {
    /// Statements per run, all kinds together.
    pub fn per_run(&self) -> f64 {
        self.each.iter().map(|s| s.1).sum::<i64>() as f64 / self.runs.max(1) as f64
    }

    /// Time in Postgres per run, in milliseconds.
    pub fn ms_per_run(&self) -> f64 {
        self.each.iter().map(|s| s.3).sum::<f64>() / self.runs.max(1) as f64
    }

    /// One line per statement, `indent`ed: calls per run, mean µs and ms per run in Postgres.
    pub fn lines(&self, indent: &str) -> String {
        let runs = self.runs.max(1) as f64;
        let mut out = format!(
            "{indent}{:>9} {:>9} {:>9}  statement (each is one round trip)\n",
            "calls/run", "mean µs", "ms/run"
        );
        for (query, calls, mean, total) in &self.each {
            let text: String = query.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(100).collect();
            out.push_str(&format!(
                "{indent}{:>9.2} {:>9.1} {:>9.3}  {text}\n",
                *calls as f64 / runs,
                mean * 1000.0,
                total / runs
            ));
        }
        out
    }

    pub fn json(&self) -> serde_json::Value {
        let runs = self.runs.max(1) as f64;
        serde_json::json!({
            "runs": self.runs,
            "perRun": self.per_run(),
            "postgresMsPerRun": self.ms_per_run(),
            "each": self.each.iter().map(|(q, calls, mean, _)| serde_json::json!({
                "query": q.split_whitespace().collect::<Vec<_>>().join(" "),
                "callsPerRun": *calls as f64 / runs,
                "meanUs": mean * 1000.0,
            })).collect::<Vec<_>>(),
        })
    }
}

/// The closing line of a bench's output: one JSON object, `{"summary": …}`, for scripts.
#[allow(clippy::print_stdout)]
pub fn print_summary(summary: serde_json::Value) {
    println!("{}", serde_json::json!({ "summary": summary }));
}
