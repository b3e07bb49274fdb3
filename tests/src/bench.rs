//! What the release benchmarks (`bench-run`, `bench-openai`, `bench-postgres`,
//! `bench-triggers`) share: a `tracon serve` child process on a free loopback port (its log
//! kept under `target/bench/`), a loopback HTTP client, the concurrency driver that times
//! requests from C workers ([`measure`]), CPU time from `/proc`, and percentiles.

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

/// `warmup` unrecorded requests, then `total` timed ones, each shared out to `concurrency`
/// workers pulling from one counter. `request(n)` sends the phase's `n`th request (from 0)
/// and returns how long it took (the bench decides what "took" means), or why it failed.
/// `label` names the bench in the warm-up's failure line.
pub async fn measure<F, Fut>(
    label: &str,
    concurrency: usize,
    warmup: usize,
    total: usize,
    server_pid: u32,
    request: F,
) -> Result<Phase, BoxError>
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Duration, String>> + Send + 'static,
{
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

async fn fan_out<F, Fut>(concurrency: usize, total: usize, request: F) -> Result<Samples, BoxError>
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Duration, String>> + Send + 'static,
{
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
