//! Starting the real `tracon` binary for end-to-end tests, and reading its SSE streams.
//!
//! The binary is `TRACON_BIN` when set; otherwise it is built once per test process with
//! the same cargo that builds the tests (a no-op when up to date), so `cargo test` alone is
//! enough and nothing is skipped.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The test database: `TRACON_TEST_DATABASE_URL`, else `DATABASE_URL`; a test without one
/// fails, saying how to get one.
pub fn database_url() -> String {
    std::env::var("TRACON_TEST_DATABASE_URL").or_else(|_| std::env::var("DATABASE_URL")).unwrap_or_else(|_| {
        panic!("These tests need PostgreSQL: run ./scripts/test (it provisions one), or set TRACON_TEST_DATABASE_URL.")
    })
}

/// A small deterministic generator: the same kill moments every run of a test.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, below: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Python of the SDK venv (`scripts/sdk-tools.sh`: the OpenAI, LangChain and A2A SDKs),
/// or `TRACON_SDK_PYTHON`; a missing one fails the test with how to install it.
pub fn sdk_python() -> PathBuf {
    let path = std::env::var_os("TRACON_SDK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tools/sdk-venv/bin/python"));
    assert!(
        path.exists(),
        "the Python SDKs are not installed at {}: run `. scripts/sdk-tools.sh && install_sdk_tools` (scripts/test does)",
        path.display()
    );
    path
}

/// The path of the `tracon` binary, building it if needed.
pub fn tracon_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("TRACON_BIN") {
            return PathBuf::from(p);
        }
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "tracon", "--bin", "tracon"])
            .current_dir(workspace_root())
            .status()
            .expect("running cargo to build the tracon binary");
        assert!(status.success(), "`cargo build -p tracon` failed; build it or set TRACON_BIN to a tracon binary");
        let target =
            std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"));
        let bin = target.join("debug").join("tracon");
        assert!(bin.exists(), "expected the tracon binary at {}; set TRACON_BIN to its path", bin.display());
        bin
    })
    .clone()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running `tracon` server; killed on drop.
pub struct Tracon {
    pub child: Child,
    pub base: String,
    pub log: PathBuf,
}

impl Tracon {
    /// Starts the binary with `env` (nothing inherited that could point it at a real
    /// provider) and waits until `/api/meta` answers.
    pub async fn start(env: &[(&str, &str)]) -> Tracon {
        Self::start_bin(&tracon_bin(), env).await
    }

    /// [`Tracon::start`] with another build of the server (`tracon-probe`).
    pub async fn start_bin(bin: &std::path::Path, env: &[(&str, &str)]) -> Tracon {
        let port = free_port();
        let log = std::env::temp_dir().join(format!("tracon-e2e-{port}.log"));
        let log_file = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(bin);
        cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--drain-timeout-seconds", "10"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawning tracon");
        let server = Tracon { child, base: format!("http://127.0.0.1:{port}"), log };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(format!("{}/api/meta", server.base)).send().await
                && r.status().is_success()
            {
                return server;
            }
            assert!(Instant::now() < deadline, "tracon did not start; log:\n{}", server.log_text());
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Issues an API key with `scopes` through `POST /api/api-keys`, as the holder of `token`:
    /// the whole answer (the key is in it, once).
    pub async fn issue_key(&self, token: &str, name: &str, scopes: &[&str]) -> Value {
        let res = reqwest::Client::new()
            .post(self.url("/api/api-keys"))
            .bearer_auth(token)
            .json(&serde_json::json!({"name": name, "scopes": scopes}))
            .send()
            .await
            .unwrap();
        let issued: Value = res.json().await.unwrap();
        assert!(issued["key"].is_string(), "{issued}");
        issued
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Tracon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One SSE frame.
#[derive(Debug, Clone)]
pub struct Frame {
    pub event: String,
    pub data: Value,
}

pub fn parse_frames(body: &str) -> Vec<Frame> {
    body.split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .map(|f| {
            let mut event = String::new();
            let mut data = String::new();
            for line in f.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = e.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            Frame { event, data: serde_json::from_str(&data).unwrap_or(Value::Null) }
        })
        .collect()
}

/// `POST /api/agents/{agent}/run` and the whole stream.
pub async fn run(server: &Tracon, agent: &str, body: Value) -> (reqwest::StatusCode, Vec<Frame>, String) {
    stream(server, &format!("/api/agents/{agent}/run"), body).await
}

/// `POST {path}` with `body` (an agent's or a workflow's run, a resume, an answer) and the
/// whole stream: its status, frames and raw text.
pub async fn stream(server: &Tracon, path: &str, body: Value) -> (reqwest::StatusCode, Vec<Frame>, String) {
    let res = reqwest::Client::new().post(server.url(path)).json(&body).send().await.unwrap();
    let status = res.status();
    let text = res.text().await.unwrap();
    (status, parse_frames(&text), text)
}

/// The text of the last user message in a request the mock model recorded
/// ([`tracon_tests::mock::MockServer::requests`]): what an agent node was given to answer.
pub fn last_user_message(request: &Value) -> String {
    let messages = request["body"]["messages"].as_array().unwrap_or_else(|| panic!("no messages: {request}"));
    let user =
        messages.iter().rev().find(|m| m["role"] == "user").unwrap_or_else(|| panic!("no user message: {request}"));
    user["content"].as_str().unwrap_or_else(|| panic!("not text: {user}")).to_owned()
}

pub fn text_of(frames: &[Frame]) -> String {
    frames.iter().filter(|f| f.data["kind"] == "text").filter_map(|f| f.data["text"].as_str()).collect()
}

pub fn of_kind<'a>(frames: &'a [Frame], kind: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f.data["kind"] == kind).map(|f| &f.data).collect()
}

/// Waits until no job and no run in `schema` is still open, polling every `every` (no timing
/// is asserted: `within` only bounds a test that would otherwise hang); `log` is shown if
/// they never end.
pub async fn until_all_ended(
    pool: &sqlx::PgPool,
    schema: &str,
    within: Duration,
    every: Duration,
    log: impl Fn() -> String,
) {
    let deadline = Instant::now() + within;
    loop {
        let open: i64 = sqlx::query_scalar(&format!(
            "SELECT (SELECT count(*) FROM {schema}.jobs WHERE status NOT IN ('Succeeded', 'Failed', 'Canceled')) \
             + (SELECT count(*) FROM {schema}.runs WHERE status IN ('Queued', 'Running'))"
        ))
        .fetch_one(pool)
        .await
        .unwrap();
        if open == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{open} jobs or runs never ended:\n{}", log());
        tokio::time::sleep(every).await;
    }
}

/// Queues a run of `agent` on `message` (`Prefer: respond-async`), checks the `202`: the
/// run's id.
pub async fn queue_run(client: &reqwest::Client, server: &Tracon, agent: &str, message: &str) -> String {
    let accepted = client
        .post(server.url(&format!("/api/agents/{agent}/run")))
        .header("Prefer", "respond-async")
        .json(&serde_json::json!({"message": message}))
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    let body: Value = accepted.json().await.unwrap();
    body["runId"].as_str().unwrap().to_owned()
}

/// Checks an answer is `202` with `Location` (also in the body): the location, the body, and
/// the run there once it is no longer queued or running (polled; the bound only stops a test
/// that would hang).
pub async fn accepted_run(
    client: &reqwest::Client,
    server: &Tracon,
    accepted: reqwest::Response,
) -> (String, Value, Value) {
    assert_eq!(accepted.status(), 202);
    let location = accepted.headers()["location"].to_str().unwrap().to_owned();
    let doc: Value = accepted.json().await.unwrap();
    assert_eq!(doc["location"], location.as_str());
    let mut run = Value::Null;
    for _ in 0..400 {
        run = client.get(server.url(&location)).send().await.unwrap().json().await.unwrap();
        if run["status"] != "Queued" && run["status"] != "Running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    (location, doc, run)
}

/// `POST path` with `definition` on `server`, which must answer `201` (a definition saved).
pub async fn create(server: &Tracon, path: &str, definition: Value) {
    let res = reqwest::Client::new().post(server.url(path)).json(&definition).send().await.unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
}

/// Sends `request` and reads its answer as JSON.
pub async fn json_of(request: reqwest::RequestBuilder) -> Value {
    request.send().await.unwrap().json().await.unwrap()
}

/// A crash matrix's server: `tracon-probe` on Postgres in a schema of its own, its OpenAI
/// provider the mock model server, with short leases, heartbeats, retries and ticks so that
/// work a kill interrupts is taken up again within seconds.
pub struct CrashServer {
    pub server: Tracon,
    pub url: String,
    pub schema: String,
    endpoint: String,
}

impl CrashServer {
    /// Starts it on [`database_url`] in the schema `prefix_<pid>`, answering from `mock`.
    pub async fn start(mock: &tracon_tests::mock::MockServer, prefix: &str) -> CrashServer {
        let endpoint = format!("{}/v1", mock.base_url());
        let (schema, url) = (format!("{prefix}_{:x}", std::process::id()), database_url());
        let server = Tracon::start_bin(Self::bin(), &Self::settings(&url, &schema, &endpoint)).await;
        CrashServer { server, url, schema, endpoint }
    }

    fn bin() -> &'static std::path::Path {
        std::path::Path::new(env!("CARGO_BIN_EXE_tracon-probe"))
    }

    fn settings<'a>(url: &'a str, schema: &'a str, endpoint: &'a str) -> [(&'static str, &'a str); 12] {
        [
            ("DATABASE_URL", url),
            ("Tracon__PostgreSql__SchemaName", schema),
            ("OPENAI_API_KEY", "k"),
            ("Tracon__Providers__OpenAI__Endpoint", endpoint),
            ("Tracon__Jobs__Concurrency", "8"),
            ("Tracon__Jobs__LeaseSeconds", "2"),
            ("Tracon__Jobs__MaxAttempts", "20"),
            ("Tracon__Jobs__RetryBaseSeconds", "1"),
            ("Tracon__Jobs__RetryMaxSeconds", "1"),
            ("Tracon__RunReconciliation__HeartbeatSeconds", "1"),
            ("Tracon__RunReconciliation__OrphanAfterSeconds", "3"),
            ("Tracon__Scheduling__TickSeconds", "1"),
        ]
    }

    /// Three kills of the server at pseudo-random moments (`rng`: `min_ms` plus up to
    /// `spread_ms` after the last start), each followed by a restart on the same database:
    /// per kill, the wait and what `measure` counted just before it.
    pub async fn kill_three_times<F: Future<Output = i64>>(
        &mut self,
        rng: &mut Lcg,
        (min_ms, spread_ms): (u64, u64),
        measure: impl Fn() -> F,
    ) -> Vec<(Duration, i64)> {
        let mut kills = Vec::new();
        for _ in 0..3 {
            let wait = Duration::from_millis(min_ms + rng.next(spread_ms));
            tokio::time::sleep(wait).await;
            let measured = measure().await;
            self.server.child.kill().unwrap(); // SIGKILL: no drain, leases and heartbeats stop mid-work
            self.server.child.wait().unwrap();
            kills.push((wait, measured));
            self.server =
                Tracon::start_bin(Self::bin(), &Self::settings(&self.url, &self.schema, &self.endpoint)).await;
        }
        kills
    }

    /// Waits (up to four minutes) until no job and no run is still open.
    pub async fn until_all_ended(&self, pool: &sqlx::PgPool) {
        until_all_ended(pool, &self.schema, Duration::from_secs(240), Duration::from_millis(250), || {
            self.server.log_text()
        })
        .await;
    }
}

/// The one number `sql` selects; 0 if it fails (a table not made yet).
pub async fn count(pool: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap_or(0)
}

/// The chain of runs from `first`: it, then each run that continued the one before after a
/// crash (checked: only an `Orphaned` run is continued); with the last run's document.
pub async fn run_chain(client: &reqwest::Client, server: &Tracon, first: &str) -> (Vec<String>, Value) {
    let mut chain = vec![first.to_owned()];
    loop {
        let run = json_of(client.get(server.url(&format!("/api/runs/{}", chain.last().unwrap())))).await;
        match run["continuedByRunId"].as_str() {
            Some(next) => {
                assert_eq!(run["error"]["errorClass"], "Orphaned", "only an interrupted run is continued: {run}");
                chain.push(next.to_owned());
            }
            None => return (chain, run),
        }
    }
}

/// Every run's event log in `schema`, checked to end with one of `terminal`: how many logs
/// there are, and how many have a gap or a duplicate.
pub async fn event_logs(pool: &sqlx::PgPool, schema: &str, terminal: &[&str]) -> (usize, usize) {
    let logs: Vec<(String, i64, i64, String)> = sqlx::query_as(&format!(
        "SELECT e.run_id::text, count(*), max(e.sequence), \
         (SELECT event_type FROM {schema}.run_events l WHERE l.run_id = e.run_id ORDER BY sequence DESC LIMIT 1) \
         FROM {schema}.run_events e GROUP BY e.run_id"
    ))
    .fetch_all(pool)
    .await
    .unwrap();
    let gaps = logs.iter().filter(|(_, n, max, _)| n != max).count();
    for (run, _, _, last) in &logs {
        assert!(terminal.contains(&last.as_str()), "run {run}'s log ends with {last}");
    }
    (logs.len(), gaps)
}
