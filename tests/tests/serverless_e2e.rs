//! End-to-end on the serverless builds: the Worker bundle under `wrangler dev` (Postgres
//! through the local Hyperdrive binding) and the Lambda functions under `cargo lambda watch`,
//! both against the test Postgres and the mock model server, with the local server reading
//! the same database afterwards. All three hosts share one schema per test.
//!
//! Needs what `./scripts/test` provides: `TRACON_TEST_DATABASE_URL`, the Worker bundles in
//! `adapters/worker/dist/` (built by `adapters/worker/build.sh`), wrangler in
//! `adapters/worker/node_modules` and `cargo-lambda` on `PATH` (or in `target/tools/venv`).
//! A missing piece fails the test with what to run; nothing is skipped.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use support::{Frame, Tracon, parse_frames, text_of, tracon_bin};
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

const TOKEN: &str = "serverless-e2e-token-0123456789";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap()
}

fn database_url() -> String {
    std::env::var("TRACON_TEST_DATABASE_URL").or_else(|_| std::env::var("DATABASE_URL")).unwrap_or_else(|_| {
        panic!("These tests need PostgreSQL: run ./scripts/test (it provisions one), or set TRACON_TEST_DATABASE_URL.")
    })
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}_{nanos:x}{:x}", std::process::id())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Hyperdrive insists on a password in its connection string; the test cluster trusts
/// loopback and ignores it.
fn with_password(url: &str) -> String {
    let mut url = reqwest::Url::parse(url).unwrap();
    if url.password().is_none() {
        url.set_password(Some("unused")).unwrap();
    }
    url.to_string()
}

/// Serverless hosts never migrate: the schema is prepared the way a deploy step would.
fn migrate(schema: &str) {
    let out = Command::new(tracon_bin())
        .arg("migrate")
        .env_clear()
        .env("DATABASE_URL", database_url())
        .env("Tracon__PostgreSql__SchemaName", schema)
        .output()
        .unwrap();
    assert!(out.status.success(), "tracon migrate failed: {}", String::from_utf8_lossy(&out.stderr));
}

async fn pool() -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&database_url()).await.unwrap()
}

// ---- hosts ---------------------------------------------------------------------------------

/// Where each endpoint group is served.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Group {
    Agents,
    Runs,
    Sessions,
}

/// A serverless host process (and its children, in their own process group); killed on drop.
struct Host {
    child: Child,
    /// Base URL per group.
    bases: [(Group, String); 3],
    log: PathBuf,
    name: &'static str,
}

impl Host {
    fn url(&self, group: Group, path: &str) -> String {
        let base = &self.bases.iter().find(|(g, _)| *g == group).unwrap().1;
        format!("{base}{path}")
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `/api/meta` answers 200 through every group's base.
    async fn wait_ready(self, timeout: Duration) -> Host {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + timeout;
        for (_, base) in &self.bases {
            loop {
                if let Ok(r) = client.get(format!("{base}/api/meta")).send().await
                    && r.status().is_success()
                {
                    break;
                }
                assert!(Instant::now() < deadline, "{} did not start; log:\n{}", self.name, self.log_text());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        self
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // wrangler runs workerd, cargo lambda runs cargo and the functions: end the group.
        let _ = Command::new("kill").args(["-s", "KILL", "--", &format!("-{}", self.child.id())]).status();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

fn spawn_logged(mut cmd: Command, name: &str) -> (Child, PathBuf) {
    let log = std::env::temp_dir().join(format!("{}.log", unique(name)));
    let file = std::fs::File::create(&log).unwrap();
    cmd.stdin(Stdio::null()).stdout(Stdio::from(file.try_clone().unwrap())).stderr(Stdio::from(file)).process_group(0);
    (cmd.spawn().unwrap_or_else(|e| panic!("could not start {name}: {e}")), log)
}

/// What every host is configured with: the token, the mock model, the schema.
fn common_config(schema: &str, mock: &MockServer) -> Vec<(String, String)> {
    vec![
        ("TRACON_AUTH_TOKEN".into(), TOKEN.into()),
        ("OPENAI_API_KEY".into(), "test-openai-key".into()),
        ("Tracon__Providers__OpenAI__Endpoint".into(), format!("{}/v1", mock.base_url())),
        ("Tracon__PostgreSql__SchemaName".into(), schema.into()),
        ("Tracon__Runs__CancelCheckIntervalSeconds".into(), "0.05".into()),
    ]
}

/// The `all` Worker bundle under `wrangler dev`, Postgres through the local Hyperdrive
/// binding. Its connections carry `application_name` so a test can count them.
async fn start_worker(schema: &str, mock: &MockServer, application_name: &str) -> Host {
    let root = root();
    let bundle = root.join("adapters/worker/dist/all/index.js");
    assert!(
        bundle.exists(),
        "no Worker bundle at {}: build it with adapters/worker/build.sh all (./scripts/test does)",
        bundle.display()
    );
    let wrangler = root.join("adapters/worker/node_modules/.bin/wrangler");
    assert!(wrangler.exists(), "wrangler is not installed: run `npm ci` in adapters/worker (./scripts/test does)");
    let port = free_port();
    let mut cmd = Command::new(wrangler);
    cmd.current_dir(&root)
        .args(["dev", "--config", "wrangler.toml", "--ip", "127.0.0.1", "--log-level", "warn"])
        .args(["--port", &port.to_string(), "--inspector-port", &free_port().to_string()])
        .args(["--show-interactive-dev-session=false"])
        .arg("--persist-to")
        .arg(std::env::temp_dir().join(unique("wrangler-state")))
        .env("CLOUDFLARE_HYPERDRIVE_LOCAL_CONNECTION_STRING_HYPERDRIVE", with_password(&database_url()))
        .env("WRANGLER_SEND_METRICS", "false")
        .env("WRANGLER_SEND_ERROR_REPORTS", "false")
        .env("CLOUDFLARE_CF_FETCH_ENABLED", "false")
        .env("CI", "1");
    let mut vars = common_config(schema, mock);
    vars.push(("Tracon__PostgreSql__Tls".into(), "off".into()));
    vars.push(("Tracon__PostgreSql__ApplicationName".into(), application_name.into()));
    for (k, v) in vars {
        cmd.arg("--var").arg(format!("{k}:{v}"));
    }
    let (child, log) = spawn_logged(cmd, "wrangler");
    let base = format!("http://127.0.0.1:{port}");
    let host = Host {
        child,
        bases: [(Group::Agents, base.clone()), (Group::Runs, base.clone()), (Group::Sessions, base)],
        log,
        name: "wrangler dev",
    };
    host.wait_ready(Duration::from_secs(60)).await
}

/// The Lambda binaries are built once, as `cargo lambda watch` would build them (for the
/// one package, so its `cargo run` finds them fresh).
fn build_lambda_functions() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "tracon-lambda", "--bins"])
            .current_dir(root())
            .status()
            .unwrap();
        assert!(status.success(), "building the Lambda functions failed");
    });
}

fn cargo_lambda() -> PathBuf {
    let venv = root().join("target/tools/venv/bin/cargo-lambda");
    if venv.exists() {
        return venv;
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join("cargo-lambda")).find(|p| p.exists()));
    on_path.unwrap_or_else(|| {
        panic!("cargo-lambda is not installed: pip install cargo-lambda==1.9.2 (./scripts/test installs it)")
    })
}

/// Every function under `cargo lambda watch`, reached through the function-URL paths
/// `/lambda-url/<function>/…`: each group goes to its own function.
async fn start_lambda(schema: &str, mock: &MockServer) -> Host {
    tokio::task::spawn_blocking(build_lambda_functions).await.unwrap();
    let port = free_port();
    let mut cmd = Command::new(cargo_lambda());
    cmd.current_dir(root())
        .args(["lambda", "watch", "--ignore-changes", "--quiet", "-A", "127.0.0.1"])
        .args(["-P", &port.to_string()])
        .env("CARGO", env!("CARGO"));
    let mut vars = common_config(schema, mock);
    vars.push(("DATABASE_URL".into(), database_url()));
    for (k, v) in vars {
        cmd.arg("--env-var").arg(format!("{k}={v}"));
    }
    let (child, log) = spawn_logged(cmd, "cargo-lambda");
    let base = |function: &str| format!("http://127.0.0.1:{port}/lambda-url/{function}");
    let host = Host {
        child,
        bases: [
            (Group::Agents, base("tracon-agents")),
            (Group::Runs, base("tracon-runs")),
            (Group::Sessions, base("tracon-sessions")),
        ],
        log,
        name: "cargo lambda watch",
    };
    host.wait_ready(Duration::from_secs(180)).await
}

// ---- streams -------------------------------------------------------------------------------

/// An SSE response read frame by frame as the bytes arrive.
struct Live {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
    raw: String,
}

impl Live {
    async fn open(request: reqwest::RequestBuilder) -> Live {
        let res = request.send().await.unwrap();
        let status = res.status();
        let content_type = res.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
        if status != 200 {
            panic!("{status}: {}", res.text().await.unwrap());
        }
        assert_eq!(content_type.as_deref(), Some("text/event-stream"));
        Live { body: res.bytes_stream().boxed(), buffer: String::new(), raw: String::new() }
    }

    /// The next frame; `None` when the stream ended.
    async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                self.raw.push_str(&frame);
                return parse_frames(&frame).into_iter().next();
            }
            let chunk = tokio::time::timeout(Duration::from_secs(60), self.body.next())
                .await
                .expect("no frame within 60 s")?
                .unwrap();
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    async fn rest(&mut self) -> Vec<Frame> {
        let mut out = Vec::new();
        while let Some(f) = self.next().await {
            out.push(f);
        }
        out
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap()
}

fn authed(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    request.bearer_auth(TOKEN)
}

async fn get_json(url: String) -> Value {
    let res = authed(client().get(&url)).send().await.unwrap();
    assert_eq!(res.status(), 200, "GET {url}");
    res.json().await.unwrap()
}

async fn get_text(url: String) -> String {
    let res = authed(client().get(&url)).send().await.unwrap();
    assert_eq!(res.status(), 200, "GET {url}");
    res.text().await.unwrap()
}

fn agent(name: &str, model: &str) -> Value {
    json!({"name": name, "instructions": "Answer briefly.", "model": {"provider": "openai", "model": model}})
}

async fn create_agent(host: &Host, definition: &Value) {
    let res = authed(client().post(host.url(Group::Agents, "/api/agents"))).json(definition).send().await.unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
}

const ANSWER: &str = "Hello from the edge, streamed in small pieces.";

/// The round trip every host must pass: create an agent, stream a run whose frames are
/// seen while the model is still answering, read the run and its log back, continue the
/// session. Returns the run id and its recorded log.
async fn round_trip(host: &Host, mock: &MockServer, model: &str) -> (String, String) {
    mock.script(model, vec![MockTurn::text(ANSWER).hang_after_chunks(2), MockTurn::text("Second answer.")]);
    create_agent(host, &agent("edge", model)).await;

    let session = unique("session");
    let mut live = Live::open(
        authed(client().post(host.url(Group::Agents, "/api/agents/edge/run")))
            .json(&json!({"message": "Say hello.", "sessionId": session})),
    )
    .await;
    let opening = live.next().await.unwrap();
    assert_eq!(opening.event, "run", "{}", host.log_text());
    let run_id = opening.data["runId"].as_str().unwrap().to_owned();
    // The model has sent two pieces and holds the rest: these frames can only be here if
    // the host streams as it goes.
    let mut early = Vec::new();
    while early.len() < 2 {
        let frame = live.next().await.unwrap_or_else(|| panic!("stream ended early: {}", live.raw));
        if frame.data["kind"] == "text" {
            early.push(frame.data["text"].as_str().unwrap().to_owned());
        }
    }
    mock.release(model);
    let rest = live.rest().await;
    let done = rest.last().unwrap();
    assert_eq!((done.event.as_str(), done.data["status"].as_str()), ("done", Some("Completed")), "{}", live.raw);
    assert_eq!(early.concat() + &text_of(&rest), ANSWER);

    let run = get_json(host.url(Group::Runs, &format!("/api/runs/{run_id}"))).await;
    assert_eq!(run["status"], "Completed");
    assert_eq!(run["sessionId"].as_str(), Some(session.as_str()));
    let log = get_text(host.url(Group::Runs, &format!("/api/runs/{run_id}/events"))).await;
    let frames = parse_frames(&log);
    assert_eq!(frames.first().unwrap().event, "run.started");
    assert_eq!(frames.last().unwrap().event, "run.completed");

    // The session goes on: the next turn is sent the history.
    let res = authed(client().post(host.url(Group::Agents, "/api/agents/edge/run")))
        .json(&json!({"message": "Again.", "sessionId": session}))
        .send()
        .await
        .unwrap();
    let second = parse_frames(&res.text().await.unwrap());
    assert_eq!(second.last().unwrap().data["status"], "Completed");
    assert_eq!(text_of(&second), "Second answer.");
    let sent = mock.requests(model).last().unwrap()["body"]["messages"].to_string();
    assert!(sent.contains("Say hello.") && sent.contains(ANSWER) && sent.contains("Again."), "{sent}");
    let stored = get_json(host.url(Group::Sessions, &format!("/api/sessions/{session}"))).await;
    let texts: Vec<&str> = stored["messages"].as_array().unwrap().iter().map(|m| m["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["Say hello.", ANSWER, "Again.", "Second answer."]);
    (run_id, log)
}

/// The local server on the same schema reads the run back exactly.
async fn read_back_locally(schema: &str, run_id: &str, log: &str) {
    let url = database_url();
    let local = Tracon::start(&[
        ("DATABASE_URL", url.as_str()),
        ("Tracon__PostgreSql__SchemaName", schema),
        ("Tracon__PostgreSql__AutoApplyMigrations", "false"),
    ])
    .await;
    let run: Value =
        client().get(local.url(&format!("/api/runs/{run_id}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(run["status"], "Completed");
    let local_log =
        client().get(local.url(&format!("/api/runs/{run_id}/events"))).send().await.unwrap().text().await.unwrap();
    assert_eq!(local_log, log, "the local server replays the very log the serverless host wrote");
}

async fn connections(pool: &sqlx::PgPool, application_name: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
        .bind(application_name)
        .fetch_one(pool)
        .await
        .unwrap()
}

// ---- tests ---------------------------------------------------------------------------------

#[tokio::test]
async fn the_worker_streams_a_run_keeps_it_in_postgres_and_leaks_no_connections() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let schema = unique("w");
    migrate(&schema);
    let application_name = unique("tracon_worker");
    let worker = start_worker(&schema, &mock, &application_name).await;

    let (run_id, log) = round_trip(&worker, &mock, "worker-model").await;
    read_back_locally(&schema, &run_id, &log).await;

    // The agent the round trip created is in the audit trail, appended through the Worker's
    // own transaction, and the chain verifies.
    let trail: Value =
        authed(client().get(worker.url(Group::Runs, "/api/audit"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        (trail[0]["action"].as_str(), trail[0]["entityId"].as_str()),
        (Some("agent.create"), Some("edge")),
        "{trail}"
    );
    let report: Value =
        authed(client().get(worker.url(Group::Runs, "/api/audit/verify"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(report["status"], "Valid", "{report}");

    // 200 requests of every kind: each opens its connection and closes it before answering.
    let db = pool().await;
    let mut most = 0;
    for i in 0..200 {
        let path = match i % 4 {
            0 => "/api/agents".to_owned(),
            1 => format!("/api/runs/{run_id}"),
            2 => format!("/api/runs/{run_id}/events"),
            _ => "/api/runs?take=5".to_owned(),
        };
        let res = authed(client().get(worker.url(Group::Runs, &path))).send().await.unwrap();
        assert_eq!(res.status(), 200, "{path}");
        res.bytes().await.unwrap();
        most = most.max(connections(&db, &application_name).await);
    }
    eprintln!("worker connections listed after a request, at most: {most}");
    assert!(most <= 2, "at most a closing connection or two may still be listed, saw {most}");

    // A run cancelled through the Worker while its model is silent (a read of the model's
    // body outstanding): the Worker drops that read without tearing down the isolate, the
    // live stream ends Canceled, and the model call's connection is let go.
    let quiet = || MockTurn::text("Still thinking about it.").hang_after_chunks(1);
    mock.script("quiet-model", vec![quiet(), quiet()]);
    create_agent(&worker, &agent("quiet", "quiet-model")).await;
    let mut live = Live::open(
        authed(client().post(worker.url(Group::Agents, "/api/agents/quiet/run"))).json(&json!({"message": "Go."})),
    )
    .await;
    let live_id = live.next().await.unwrap().data["runId"].as_str().unwrap().to_owned();
    let res =
        authed(client().post(worker.url(Group::Runs, &format!("/api/runs/{live_id}/cancel")))).send().await.unwrap();
    assert_eq!(res.status(), 202);
    let end = live.rest().await.pop().unwrap();
    assert_eq!(end.data["status"], "Canceled", "{}", live.raw);
    // The isolate lived through it: the next request is served, nothing was reset.
    let res = authed(client().get(worker.url(Group::Runs, &format!("/api/runs/{live_id}")))).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.json::<Value>().await.unwrap()["status"], "Canceled");
    let log = worker.log_text();
    for fatal in [
        "Critical error",
        "previous Wasm instance",
        "previous WASM instance",
        "invoked recursively or after being dropped",
    ] {
        assert!(!log.contains(fatal), "the Worker logged '{fatal}':\n{log}");
    }
    // Followers of a live run that hang up mid-stream: the Worker cancels their streams,
    // store calls in flight included, and the run itself is untouched and still cancellable.
    let mut live = Live::open(
        authed(client().post(worker.url(Group::Agents, "/api/agents/quiet/run"))).json(&json!({"message": "Again."})),
    )
    .await;
    let live_id = live.next().await.unwrap().data["runId"].as_str().unwrap().to_owned();
    for _ in 0..10 {
        let mut follower =
            Live::open(authed(client().get(worker.url(Group::Runs, &format!("/api/runs/{live_id}/events"))))).await;
        assert_eq!(follower.next().await.unwrap().event, "run.started");
        drop(follower);
    }
    let res =
        authed(client().post(worker.url(Group::Runs, &format!("/api/runs/{live_id}/cancel")))).send().await.unwrap();
    assert_eq!(res.status(), 202);
    let end = live.rest().await.pop().unwrap();
    assert_eq!(end.data["status"], "Canceled", "{}", live.raw);
    let log = worker.log_text();
    for fatal in [
        "Critical error",
        "previous Wasm instance",
        "previous WASM instance",
        "invoked recursively or after being dropped",
    ] {
        assert!(!log.contains(fatal), "the Worker logged '{fatal}':\n{log}");
    }
    // Whatever was still closing is gone soon after; nothing stays open.
    let deadline = Instant::now() + Duration::from_secs(10);
    while connections(&db, &application_name).await > 0 {
        assert!(Instant::now() < deadline, "the Worker left connections open:\n{}", worker.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_lambda_functions_stream_a_run_keep_it_in_postgres_and_serve_one_group_each() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let schema = unique("l");
    migrate(&schema);
    let lambda = start_lambda(&schema, &mock).await;

    let (run_id, log) = round_trip(&lambda, &mock, "lambda-model").await;
    read_back_locally(&schema, &run_id, &log).await;

    // Each function serves its own group only.
    let res = authed(client().get(lambda.url(Group::Sessions, "/api/agents"))).send().await.unwrap();
    assert_eq!(res.status(), 404);
    // And nothing but /api/meta without the token.
    let res = client().get(lambda.url(Group::Runs, "/api/runs")).send().await.unwrap();
    assert_eq!(res.status(), 401);
}

#[tokio::test]
async fn a_run_on_the_worker_is_cancelled_through_lambda_and_the_worker_sees_it_canceled() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let schema = unique("x");
    migrate(&schema);
    let application_name = unique("tracon_worker");
    let (worker, lambda) = tokio::join!(start_worker(&schema, &mock, &application_name), start_lambda(&schema, &mock));
    mock.script("cross-model", vec![MockTurn::text("This answer never gets to its end.").hang_after_chunks(1)]);
    create_agent(&worker, &agent("cross", "cross-model")).await;

    let mut live = Live::open(
        authed(client().post(worker.url(Group::Agents, "/api/agents/cross/run"))).json(&json!({"message": "Go."})),
    )
    .await;
    let run_id = live.next().await.unwrap().data["runId"].as_str().unwrap().to_owned();
    while live.next().await.unwrap().data["kind"] != "text" {}
    // The Worker's recorded log of the run, followed while it is running.
    let mut log =
        Live::open(authed(client().get(worker.url(Group::Runs, &format!("/api/runs/{run_id}/events"))))).await;
    assert_eq!(log.next().await.unwrap().event, "run.started");

    let res =
        authed(client().post(lambda.url(Group::Runs, &format!("/api/runs/{run_id}/cancel")))).send().await.unwrap();
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());

    let end = live.rest().await.pop().unwrap();
    assert_eq!((end.event.as_str(), end.data["status"].as_str()), ("error", Some("Canceled")), "{}", live.raw);
    let last = log.rest().await.pop().unwrap();
    assert_eq!(last.event, "run.canceled", "{}", log.raw);
    let run = get_json(worker.url(Group::Runs, &format!("/api/runs/{run_id}"))).await;
    assert_eq!(run["status"], "Canceled");
    let run = get_json(lambda.url(Group::Runs, &format!("/api/runs/{run_id}"))).await;
    assert_eq!(run["status"], "Canceled");
}
