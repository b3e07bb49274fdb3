//! What the release benchmarks (`bench-postgres`, `bench-triggers`) share: a `tracon serve`
//! child process on a free loopback port, and percentiles.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
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
