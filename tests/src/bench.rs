//! What the release benchmarks (`bench-postgres`, `bench-triggers`, `bench-openai`) share: a
//! `tracon serve` child process on a free loopback port, a loopback HTTP client, CPU time
//! from `/proc`, and percentiles.

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
            .env("Tracon__Providers__OpenAI__DefaultModel", "bench")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let server = Server { child: cmd.spawn()?, base: format!("http://127.0.0.1:{port}") };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(r) = client.get(format!("{}/api/meta", server.base)).send().await
                && r.status().is_success()
            {
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err("tracon did not start within 30 s".into())
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
