//! End-to-end on the serverless builds: the Worker bundle under `wrangler dev` (Postgres
//! through the local Hyperdrive binding) and the Lambda functions under `cargo lambda watch`,
//! both against the test Postgres and the mock model server, with the local server reading
//! the same database afterwards. All three hosts share one schema per test. On the Worker
//! also: JWT bearer tokens verified with WebCrypto (keys from a JWKS served by the test on
//! loopback, from a PEM, from a shared secret), and approvals resumed through the mailbox
//! (in the background, under `waitUntil`) and in-band. Across hosts: a run on the Worker
//! cancelled through Lambda, and a workflow on the Worker that asks a person, answered through
//! Lambda; and the MCP client both ways round — a remote MCP server registered and discovered
//! on one host, its tool called (after an approval) by a run on the other, from the catalog
//! cached in Postgres — and each host's MCP server (`/mcp`) serving the other host's client,
//! and its A2A server answering a task the other host reads back; and MCP OAuth across them —
//! a server authorized through Lambda, its callback delivered to the Worker, its tokens
//! (sealed with one content protection key) refreshed on either host and used by the other.
//!
//! Needs what `./scripts/test` provides: `TRACON_TEST_DATABASE_URL`, the Worker bundles in
//! `adapters/worker/dist/` (built by `adapters/worker/build.sh`), wrangler in
//! `adapters/worker/node_modules` and `cargo-lambda` and moto's `moto_server` (the SQS emulator
//! of the Lambda queue test) on `PATH` (or in `target/tools/venv`). Background work runs on
//! both: Cloudflare Queues and the cron trigger under `wrangler dev`, SQS through moto's server
//! with the test playing the event source mapping for the Lambda consumer.
//! A missing piece fails the test with what to run; nothing is skipped.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The test-only keys of handlers/tests/fixtures/jwt.
#[path = "../../handlers/tests/fixtures/jwt/keys.rs"]
mod jwt_keys;
mod support;

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jsonwebtoken::{Algorithm, EncodingKey};
use jwt_keys::{EC_PRIVATE, OTHER_RSA_PRIVATE, RSA_PRIVATE, RSA_PUBLIC};
use serde_json::{Value, json};
use support::{Frame, Tracon, last_user_message, parse_frames, text_of, tracon_bin};
use tracon_tests::mcp::{McpTestServer, POLICY};
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
/// binding. Its connections carry `application_name` so a test can count them; `extra` vars
/// come on top of the common configuration.
async fn start_worker(schema: &str, mock: &MockServer, application_name: &str, extra: &[(&str, &str)]) -> Host {
    let root = root();
    let bundle = root.join("adapters/worker/dist/all/index.js");
    assert!(
        bundle.exists(),
        "no Worker bundle at {}: build it with adapters/worker/build.sh all (./scripts/test does)",
        bundle.display()
    );
    let wrangler = root.join("adapters/worker/node_modules/.bin/wrangler");
    assert!(wrangler.exists(), "wrangler is not installed: run `npm ci` in adapters/worker (./scripts/test does)");
    let mut cmd = Command::new(wrangler);
    // Port 0: wrangler binds free ports itself and says which. A port picked here and
    // released could be taken meanwhile by one of the ports wrangler opens (several Workers
    // start at once), and then `/api/meta` might even answer from another test's Worker.
    cmd.current_dir(&root)
        .args(["dev", "--config", "wrangler.toml", "--ip", "127.0.0.1", "--log-level", "info"])
        .args(["--port", "0", "--inspector-port", "0"])
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
    vars.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    for (k, v) in vars {
        cmd.arg("--var").arg(format!("{k}:{v}"));
    }
    let (mut child, log) = spawn_logged(cmd, "wrangler");
    let deadline = Instant::now() + Duration::from_secs(60);
    let base = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some((_, rest)) = text.split_once("Ready on http://") {
            let address: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':').collect();
            break format!("http://{address}");
        }
        let exited = child.try_wait().unwrap();
        assert!(exited.is_none() && Instant::now() < deadline, "wrangler dev did not start; log:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
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
    start_lambda_with(schema, mock, &[]).await
}

/// [`start_lambda`] with `extra` environment variables on top of the common configuration.
async fn start_lambda_with(schema: &str, mock: &MockServer, extra: &[(String, String)]) -> Host {
    tokio::task::spawn_blocking(build_lambda_functions).await.unwrap();
    let port = free_port();
    let mut cmd = Command::new(cargo_lambda());
    cmd.current_dir(root())
        .args(["lambda", "watch", "--ignore-changes", "--quiet", "-A", "127.0.0.1"])
        .args(["-P", &port.to_string()])
        .env("CARGO", env!("CARGO"));
    let mut vars = common_config(schema, mock);
    vars.push(("DATABASE_URL".into(), database_url()));
    vars.extend(extra.iter().cloned());
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

/// The Worker and the Lambda functions, started together on one fresh schema (migrated):
/// the schema and both hosts.
async fn worker_and_lambda(mock: &MockServer, prefix: &str) -> (String, Host, Host) {
    worker_and_lambda_with(mock, prefix, &[]).await
}

/// [`worker_and_lambda`] with `extra` configuration on top of the common one, on both hosts.
async fn worker_and_lambda_with(mock: &MockServer, prefix: &str, extra: &[(&str, &str)]) -> (String, Host, Host) {
    let schema = unique(prefix);
    migrate(&schema);
    let (worker, lambda) = start_both(&schema, mock, extra).await;
    (schema, worker, lambda)
}

/// The Worker and the Lambda functions, started together on `schema` (migrated).
async fn start_both(schema: &str, mock: &MockServer, extra: &[(&str, &str)]) -> (Host, Host) {
    let application_name = unique("tracon_worker");
    let owned: Vec<(String, String)> = extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    tokio::join!(start_worker(schema, mock, &application_name, extra), start_lambda_with(schema, mock, &owned))
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

/// The local server on the schema the serverless hosts use (migrated by their deploy step).
async fn local_server(schema: &str) -> Tracon {
    let url = database_url();
    Tracon::start(&[
        ("DATABASE_URL", url.as_str()),
        ("Tracon__PostgreSql__SchemaName", schema),
        ("Tracon__PostgreSql__AutoApplyMigrations", "false"),
    ])
    .await
}

/// `GET {path}` on the local server (it takes no token), as JSON.
async fn local_json(local: &Tracon, path: &str) -> Value {
    let res = client().get(local.url(path)).send().await.unwrap();
    assert_eq!(res.status(), 200, "GET {path} on the local server");
    res.json().await.unwrap()
}

/// The local server on the same schema reads the run back exactly.
async fn read_back_locally(schema: &str, run_id: &str, log: &str) {
    let local = local_server(schema).await;
    let run = local_json(&local, &format!("/api/runs/{run_id}")).await;
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
    let worker = start_worker(&schema, &mock, &application_name, &[]).await;

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
    let (_, worker, lambda) = worker_and_lambda(&mock, "x").await;
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

// ---- a workflow that asks a person, across hosts -----------------------------------------------

const DRAFT: &str = "Version 2 adds workflows.";
const PERSON: &str = "Approved; mention the migration guide.";
const EDITED: &str = "Version 2 adds workflows; see the migration guide.";

/// A `Sequential` workflow started on the Worker — an agent drafts, the built-in `human-input`
/// node asks a person, another agent edits — stops `AwaitingInput` with a checkpoint. Through
/// Lambda's agents function the request is listed and answered: a **new** run (continuing the
/// first) resumes from the checkpoint and completes; the drafter did not run again and the
/// editor was given the person's answer. The local server on the same schema reads both runs'
/// trees and checkpoints as the serverless hosts wrote them.
#[tokio::test]
async fn a_workflow_on_the_worker_asks_a_person_and_the_answer_through_lambda_resumes_it_without_repeating_a_node() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let (schema, worker, lambda) = worker_and_lambda(&mock, "i").await;
    mock.script("drafter-model", vec![MockTurn::text(DRAFT).with_usage(20, 8)]);
    mock.script("editor-model", vec![MockTurn::text(EDITED).with_usage(30, 5)]);
    create_agent(&worker, &agent("drafter", "drafter-model")).await;
    create_agent(&worker, &agent("editor", "editor-model")).await;
    let res = authed(client().post(worker.url(Group::Agents, "/api/workflows")))
        .json(&json!({"name": "note", "kind": "Sequential", "nodes": [{"name": "drafter", "kind": "Agent"},
            {"name": "human-input", "kind": "Function"}, {"name": "editor", "kind": "Agent"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());

    // ---- On the Worker: the draft, then the question; the run stops.
    let (frames, raw) = stream_from(&worker, "/api/workflows/note/run", json!({"message": "Write the note"})).await;
    let first = frames[0].data["runId"].as_str().unwrap_or_else(|| panic!("{raw}")).to_owned();
    let done = frames.last().unwrap();
    assert_eq!((done.event.as_str(), done.data["status"].as_str()), ("done", Some("AwaitingInput")), "{raw}");
    let asked = &done.data["requests"];
    assert_eq!(
        (asked[0]["executorId"].as_str(), asked[0]["prompt"].as_str()),
        (Some("human-input"), Some(DRAFT)),
        "the node asks with its input, the draft: {raw}"
    );
    let request_id = asked[0]["requestId"].as_str().unwrap().to_owned();

    // ---- Through Lambda: the request listed, then answered; the answer streams the new run.
    let listed = get_json(lambda.url(Group::Agents, &format!("/api/workflows/runs/{first}/requests"))).await;
    assert_eq!(&listed, asked, "Lambda lists what the Worker's run asked");
    let respond = format!("/api/workflows/runs/{first}/requests/{request_id}/respond");
    let (frames, raw) = stream_from(&lambda, &respond, json!({"response": PERSON})).await;
    let second = frames[0].data["runId"].as_str().unwrap_or_else(|| panic!("{raw}\n{}", lambda.log_text())).to_owned();
    assert_ne!(second, first, "the answer opens a new run");
    let done = frames.last().unwrap();
    assert_eq!(
        (done.event.as_str(), done.data["status"].as_str(), done.data["text"].as_str()),
        ("done", Some("Completed"), Some(EDITED)),
        "{raw}\n{}",
        lambda.log_text()
    );
    let ran: Vec<&str> = frames
        .iter()
        .filter(|f| f.data["kind"] == "executorCompleted")
        .map(|f| f.data["executorId"].as_str().unwrap())
        .collect();
    assert_eq!(ran, ["human-input", "editor"], "nothing before the question runs again: {raw}");
    assert_eq!(mock.requests("drafter-model").len(), 1, "the drafter's model was called once, on the Worker");
    let edited = mock.requests("editor-model");
    assert_eq!(edited.len(), 1);
    assert_eq!(last_user_message(&edited[0]), PERSON, "the editor's input is the person's answer");
    let second_run = get_json(lambda.url(Group::Runs, &format!("/api/runs/{second}"))).await;
    assert_eq!(second_run["continuedFromRunId"], first.as_str(), "{second_run}");
    let first_run = get_json(worker.url(Group::Runs, &format!("/api/runs/{first}"))).await;
    assert_eq!(
        (first_run["status"].as_str(), first_run["continuedByRunId"].as_str()),
        (Some("AwaitingInput"), Some(second.as_str())),
        "the asking run stays as it was, naming its continuation: {first_run}"
    );
    // Answered once: the Worker refuses a second answer.
    let again = authed(client().post(worker.url(Group::Agents, &respond))).json(&json!({"response": "No."}));
    assert_eq!(again.send().await.unwrap().status(), 409);

    // ---- The local server reads both runs' trees and checkpoints as the hosts wrote them.
    let local = local_server(&schema).await;
    let both = [(&first, "AwaitingInput", "drafter", 28, [1, 1]), (&second, "Completed", "editor", 35, [2, 3])];
    for (run, status, node, tokens, steps) in both {
        let tree = local_json(&local, &format!("/api/runs/{run}/tree")).await;
        let members: Vec<(&str, &str, u64)> = tree["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["agentName"].as_str().unwrap(), r["status"].as_str().unwrap(), r["depth"].as_u64().unwrap()))
            .collect();
        assert_eq!(members, [("note", status, 0), (node, "Completed", 1)], "{tree}");
        assert_eq!(tree["totalUsage"]["totalTokens"], tokens, "{tree}");
        assert_eq!(tree, get_json(lambda.url(Group::Runs, &format!("/api/runs/{run}/tree"))).await);
        let checkpoints = local_json(&local, &format!("/api/workflows/runs/{run}/checkpoints")).await;
        let super_steps: Vec<u64> =
            checkpoints.as_array().unwrap().iter().map(|c| c["superStep"].as_u64().unwrap()).collect();
        assert_eq!(super_steps, steps, "a checkpoint per super-step, the resumed run counting on: {checkpoints}");
        let listed = get_json(lambda.url(Group::Agents, &format!("/api/workflows/runs/{run}/checkpoints"))).await;
        assert_eq!(checkpoints, listed);
    }
    let asked_at = local_json(&local, &format!("/api/workflows/runs/{first}/checkpoints")).await;
    assert_eq!(asked_at[1]["position"]["request"]["requestId"], request_id.as_str(), "{asked_at}");
    assert_no_fatal_log(&worker);
}

// ---- JWT bearer tokens on the Worker --------------------------------------------------------

const ISSUER: &str = "https://issuer.example";
const AUDIENCE: &str = "tracon-worker";
const HS_SECRET: &str = "a-worker-hs256-test-secret-of-more-than-32-bytes";
const OTHER_HS_SECRET: &str = "another-hs256-test-secret-of-more-than-32-bytes";
const NOT_VALID: &str = "The bearer token is not valid.";

/// Claims that pass every check, naming `roles`; `edit` changes them.
fn claims(roles: Value, edit: impl FnOnce(&mut Value)) -> Value {
    let now = chrono::Utc::now().timestamp();
    let mut c = json!({
        "iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "roles": roles,
        "iat": now, "nbf": now - 5, "exp": now + 600,
    });
    edit(&mut c);
    c
}

fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut header = jsonwebtoken::Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

/// `token`'s header and payload under `other`'s signature: a signature of another message.
fn resigned(token: &str, other: &str) -> String {
    let (message, _) = token.rsplit_once('.').unwrap();
    let (_, signature) = other.rsplit_once('.').unwrap();
    format!("{message}.{signature}")
}

/// The public JWK of a private key, with its `kid` and `alg`.
fn public_jwk(key: &EncodingKey, alg: Algorithm, kid: &str) -> Value {
    let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(key, alg).unwrap();
    jwk.common.key_id = Some(kid.to_owned());
    serde_json::to_value(jwk).unwrap()
}

/// Serves `set` as the issuer's JWKS on loopback (http is allowed there); counts the fetches.
async fn serve_jwks(set: Value) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/.well-known/jwks.json", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().route(
        "/.well-known/jwks.json",
        axum::routing::get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            let set = set.clone();
            async move { axum::Json(set) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, hits)
}

/// A request with `bearer`: the status and the JSON answer (the text when it is not JSON).
async fn call(request: reqwest::RequestBuilder, bearer: &str) -> (u16, Value) {
    let res = request.bearer_auth(bearer).send().await.unwrap();
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn runs_as(host: &Host, bearer: &str) -> (u16, Value) {
    call(client().get(host.url(Group::Runs, "/api/runs")), bearer).await
}

fn assert_not_valid((status, body): (u16, Value), case: &str) {
    assert_eq!(status, 401, "{case}: {body}");
    assert_eq!(body["detail"], NOT_VALID, "{case}: {body}");
}

fn assert_no_fatal_log(host: &Host) {
    let log = host.log_text();
    for fatal in [
        "Critical error",
        "previous Wasm instance",
        "previous WASM instance",
        "invoked recursively or after being dropped",
        "panicked",
    ] {
        assert!(!log.contains(fatal), "the Worker logged '{fatal}':\n{log}");
    }
}

/// The Worker verifies signatures with WebCrypto (`crypto.subtle`), not the native
/// `jsonwebtoken`: RSASSA-PKCS1-v1_5 and ECDSA P-256 keys imported as JWKs from the
/// issuer's key set, an RSA key imported as SPKI from a PEM, HMAC from a shared secret. Each
/// accepts what its key signed and refuses a signature of another key or another message,
/// and the claim checks and roles apply as on every host.
#[tokio::test]
async fn the_worker_verifies_jwt_bearer_tokens_with_webcrypto() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let schema = unique("j");
    migrate(&schema);
    let rsa = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap();
    let other_rsa = EncodingKey::from_rsa_pem(OTHER_RSA_PRIVATE.as_bytes()).unwrap();
    let ec = EncodingKey::from_ec_pem(EC_PRIVATE.as_bytes()).unwrap();
    let (jwks_url, jwks_hits) = serve_jwks(json!({"keys": [
        public_jwk(&rsa, Algorithm::RS256, "k-rsa"),
        public_jwk(&ec, Algorithm::ES256, "k-ec"),
    ]}))
    .await;

    let issuer = [("Tracon__Jwt__Issuer", ISSUER), ("Tracon__Jwt__Audience", AUDIENCE)];
    let named = ("Tracon__Jwt__SigningKeyConfigurationName", "Test:JwtKey");
    let by_jwks_vars =
        [issuer[0], issuer[1], ("Tracon__Jwt__JwksUrl", &jwks_url), ("Tracon__Jwt__Algorithms", "RS256,ES256")];
    let by_pem_vars = [issuer[0], issuer[1], named, ("Test__JwtKey", RSA_PUBLIC), ("Tracon__Jwt__Algorithms", "RS256")];
    let by_secret_vars = [issuer[0], issuer[1], named, ("Test__JwtKey", HS_SECRET)];
    let application_name = unique("tracon_jwt");
    let (by_jwks, by_pem, by_secret) = tokio::join!(
        start_worker(&schema, &mock, &application_name, &by_jwks_vars),
        start_worker(&schema, &mock, &application_name, &by_pem_vars),
        start_worker(&schema, &mock, &application_name, &by_secret_vars),
    );

    // ---- RS256 and ES256 from the issuer's key set.
    let operator = claims(json!(["Operator"]), |_| {});
    let admin = claims(json!("Admin"), |_| {});
    let rs_operator = sign(Algorithm::RS256, Some("k-rsa"), &rsa, &operator);
    let (status, body) = runs_as(&by_jwks, &rs_operator).await;
    assert_eq!(status, 200, "RS256 from the JWKS: {body}\n{}", by_jwks.log_text());
    // An Operator runs agents but does not define them. The scope is checked before the body
    // is read, so the request carries none: under `wrangler dev` a POST answered with its
    // body unread breaks the dev proxy's connection to the Worker, and the next POST through
    // it fails with "Your worker restarted mid-request" (a local-only artifact).
    let (status, body) = call(client().post(by_jwks.url(Group::Agents, "/api/agents")), &rs_operator).await;
    assert_eq!((status, body["errorType"].as_str()), (403, Some("insufficient_scope")), "{body}");
    assert_eq!(body["requiredScope"], "AgentsAdmin", "{body}");
    // An Admin does.
    let rs_admin = sign(Algorithm::RS256, Some("k-rsa"), &rsa, &admin);
    let (status, body) =
        call(client().post(by_jwks.url(Group::Agents, "/api/agents")).json(&agent("jwt", "m")), &rs_admin).await;
    assert_eq!(status, 201, "{body}\n{}", by_jwks.log_text());
    // Without a kid, the set's only key for the algorithm.
    let (status, body) = runs_as(&by_jwks, &sign(Algorithm::RS256, None, &rsa, &operator)).await;
    assert_eq!(status, 200, "RS256 without a kid: {body}");

    let es_operator = sign(Algorithm::ES256, Some("k-ec"), &ec, &operator);
    let (status, body) = runs_as(&by_jwks, &es_operator).await;
    assert_eq!(status, 200, "ES256 from the JWKS: {body}\n{}", by_jwks.log_text());
    let (status, body) = call(client().get(by_jwks.url(Group::Agents, "/api/agents")), &es_operator).await;
    assert_eq!((status, body[0]["name"].as_str()), (200, Some("jwt")), "{body}");

    let es_admin = sign(Algorithm::ES256, Some("k-ec"), &ec, &admin);
    for (case, token) in [
        ("RS256 signed by another key", sign(Algorithm::RS256, Some("k-rsa"), &other_rsa, &admin)),
        ("RS256 signature of another payload", resigned(&rs_admin, &rs_operator)),
        ("ES256 signature of another payload", resigned(&es_admin, &es_operator)),
        ("an RS256 signature under an ES256 header", resigned(&es_admin, &rs_admin)),
        ("RS256 expired", sign(Algorithm::RS256, Some("k-rsa"), &rsa, &claims(json!(["Admin"]), expired))),
        ("ES256 expired", sign(Algorithm::ES256, Some("k-ec"), &ec, &claims(json!(["Admin"]), expired))),
        ("RS256 wrong audience", sign(Algorithm::RS256, Some("k-rsa"), &rsa, &claims(json!(["Admin"]), elsewhere))),
        ("ES256 wrong audience", sign(Algorithm::ES256, Some("k-ec"), &ec, &claims(json!(["Admin"]), elsewhere))),
        ("the kid of a key of another type", sign(Algorithm::ES256, Some("k-rsa"), &ec, &admin)),
        ("HS256 where only keys of the set verify", sign(Algorithm::HS256, None, &hs_key(HS_SECRET), &admin)),
    ] {
        assert_not_valid(runs_as(&by_jwks, &token).await, case);
    }
    // A token that verifies but names no role of this server.
    let (status, body) =
        runs_as(&by_jwks, &sign(Algorithm::ES256, Some("k-ec"), &ec, &claims(json!(["Guest"]), |_| {}))).await;
    assert_eq!((status, body["errorType"].as_str()), (403, Some("no_role")), "{body}");
    // The isolate fetched the key set once and kept it.
    assert_eq!(jwks_hits.load(Ordering::SeqCst), 1, "the key set is cached by the isolate");

    // ---- RS256 from a PEM public key (SPKI).
    let rs_reader = sign(Algorithm::RS256, None, &rsa, &claims(json!(["Reader"]), |_| {}));
    let (status, body) = runs_as(&by_pem, &rs_reader).await;
    assert_eq!(status, 200, "RS256 from a PEM: {body}\n{}", by_pem.log_text());
    for (case, token) in [
        ("PEM: RS256 signed by another key", sign(Algorithm::RS256, None, &other_rsa, &admin)),
        ("PEM: RS256 signature of another payload", resigned(&rs_admin, &rs_reader)),
        ("PEM: expired", sign(Algorithm::RS256, None, &rsa, &claims(json!(["Admin"]), expired))),
        ("PEM: ES256 is not allowed", es_admin.clone()),
    ] {
        assert_not_valid(runs_as(&by_pem, &token).await, case);
    }

    // ---- HS256 with a shared secret.
    let hs_operator = sign(Algorithm::HS256, None, &hs_key(HS_SECRET), &operator);
    let (status, body) = runs_as(&by_secret, &hs_operator).await;
    assert_eq!(status, 200, "HS256: {body}\n{}", by_secret.log_text());
    let hs_admin = sign(Algorithm::HS256, None, &hs_key(HS_SECRET), &admin);
    for (case, token) in [
        ("HS256 with another secret", sign(Algorithm::HS256, None, &hs_key(OTHER_HS_SECRET), &admin)),
        ("HS256 signature of another payload", resigned(&hs_admin, &hs_operator)),
        (
            "HS256 wrong audience",
            sign(Algorithm::HS256, None, &hs_key(HS_SECRET), &claims(json!(["Admin"]), elsewhere)),
        ),
        ("HS256 expired", sign(Algorithm::HS256, None, &hs_key(HS_SECRET), &claims(json!(["Admin"]), expired))),
        ("RS256 where a secret verifies", rs_admin.clone()),
    ] {
        assert_not_valid(runs_as(&by_secret, &token).await, case);
    }

    // The static token still works beside JWT, and no isolate fell over on the way.
    for host in [&by_jwks, &by_pem, &by_secret] {
        let (status, _) = runs_as(host, TOKEN).await;
        assert_eq!(status, 200);
        assert_no_fatal_log(host);
    }
}

fn expired(c: &mut Value) {
    // Past the minute of clock skew.
    c["exp"] = json!(chrono::Utc::now().timestamp() - 120);
}

fn elsewhere(c: &mut Value) {
    c["aud"] = json!("someone-else");
}

fn hs_key(secret: &str) -> EncodingKey {
    EncodingKey::from_secret(secret.as_bytes()).unwrap()
}

// ---- approvals on the Worker ----------------------------------------------------------------

/// A whole run stream: its frames and the raw text.
async fn run_stream(host: &Host, agent: &str, body: Value) -> (Vec<Frame>, String) {
    stream_from(host, &format!("/api/agents/{agent}/run"), body).await
}

/// The whole stream of `POST {path}` in the agents group (an agent's or a workflow's run, a
/// person's answer to a workflow): its frames and the raw text.
async fn stream_from(host: &Host, path: &str, body: Value) -> (Vec<Frame>, String) {
    let mut live = Live::open(authed(client().post(host.url(Group::Agents, path))).json(&body)).await;
    let frames = live.rest().await;
    (frames, live.raw)
}

/// Runs `agent` on a new session until it stops for approval of a call of `tool`: the
/// session, the stopped run and the request id of its one waiting call.
async fn stop_for_approval(host: &Host, agent: &str, message: &str, tool: &str) -> (String, String, String) {
    let session = unique("approval-session");
    let (frames, raw) = run_stream(host, agent, json!({"message": message, "sessionId": session})).await;
    let approvals = frames.iter().find(|f| f.event == "approvals").unwrap_or_else(|| panic!("{raw}"));
    assert_eq!(approvals.data[0]["toolName"], tool, "{raw}");
    let done = frames.last().unwrap();
    assert_eq!((done.event.as_str(), done.data["status"].as_str()), ("done", Some("AwaitingApproval")), "{raw}");
    let stopped = frames[0].data["runId"].as_str().unwrap().to_owned();
    (session, stopped, approvals.data[0]["requestId"].as_str().unwrap().to_owned())
}

async fn decide(host: &Host, request_id: &str, approved: bool) -> reqwest::Response {
    authed(client().post(host.url(Group::Runs, &format!("/api/approvals/{request_id}/decision"))))
        .json(&json!({"approved": approved}))
        .send()
        .await
        .unwrap()
}

fn approving_agent(name: &str, model: &str) -> Value {
    json!({"name": name, "instructions": "Cancel orders.", "toolNames": ["cancel_order"],
        "model": {"provider": "openai", "model": model}})
}

/// A run that calls a tool needing approval stops; a decision through the mailbox resumes
/// the session in the background (the Worker's `waitUntil`) and the resumed run completes
/// after the answer; an in-band decision streams the resumed run. Deciding again is `409`.
#[tokio::test]
async fn approvals_on_the_worker_resume_through_the_mailbox_in_the_background_and_in_band() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let schema = unique("a");
    migrate(&schema);
    let worker = start_worker(&schema, &mock, &unique("tracon_approvals"), &[]).await;
    mock.script(
        "mailbox-model",
        vec![
            MockTurn::tool_call("cancel_order", json!({"orderId": "4182"})),
            MockTurn::text("Order 4182 is cancelled."),
        ],
    );
    mock.script(
        "inband-model",
        vec![
            MockTurn::tool_call("cancel_order", json!({"orderId": "5150"})),
            MockTurn::text("Order 5150 is cancelled."),
        ],
    );
    create_agent(&worker, &approving_agent("mailbox", "mailbox-model")).await;
    create_agent(&worker, &approving_agent("inband", "inband-model")).await;

    // ---- The mailbox.
    let (_, stopped, request_id) = stop_for_approval(&worker, "mailbox", "Cancel 4182", "cancel_order").await;
    let pending = get_json(worker.url(Group::Runs, "/api/approvals/pending")).await;
    assert_eq!(pending[0]["id"], request_id.as_str(), "{pending}");
    assert_eq!(pending[0]["arguments"], json!({"orderId": "4182"}), "{pending}");
    let stopped_run = get_json(worker.url(Group::Runs, &format!("/api/runs/{stopped}"))).await;
    assert_eq!(stopped_run["status"], "AwaitingApproval", "{stopped_run}");

    let res = decide(&worker, &request_id, true).await;
    assert_eq!(res.status(), 200);
    let decision: Value = res.json().await.unwrap();
    assert_eq!((decision["approval"]["status"].as_str(), decision["pending"].as_u64()), (Some("Approved"), Some(0)));
    let resumed = decision["resumedRunId"].as_str().unwrap_or_else(|| panic!("{decision}")).to_owned();
    // The resumed run goes on after the answer, kept alive by waitUntil.
    let deadline = Instant::now() + Duration::from_secs(60);
    let run = loop {
        let run = get_json(worker.url(Group::Runs, &format!("/api/runs/{resumed}"))).await;
        if run["status"] != "Running" {
            break run;
        }
        assert!(Instant::now() < deadline, "the resumed run did not end: {run}\n{}", worker.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(run["status"], "Completed", "{run}\n{}", worker.log_text());
    let tools = get_json(worker.url(Group::Runs, &format!("/api/runs/{resumed}/tools"))).await;
    assert_eq!(
        (tools[0]["toolName"].as_str(), tools[0]["status"].as_str()),
        (Some("cancel_order"), Some("Succeeded")),
        "{tools}"
    );
    let log = get_text(worker.url(Group::Runs, &format!("/api/runs/{resumed}/events"))).await;
    assert!(log.contains("tracon.approval.resumed") && log.contains(&stopped), "{log}");
    assert_eq!(parse_frames(&log).last().unwrap().event, "run.completed", "{log}");
    // The model was sent the call's result and answered.
    let last = mock.requests("mailbox-model").last().unwrap()["body"]["messages"].to_string();
    assert!(last.contains("Cancel 4182") && last.contains("cancel_order"), "{last}");
    let res = decide(&worker, &request_id, false).await;
    assert_eq!(res.status(), 409);
    assert_eq!(res.json::<Value>().await.unwrap()["errorType"], "approval_already_decided");
    let decided = get_json(worker.url(Group::Runs, &format!("/api/approvals/{request_id}"))).await;
    assert_eq!(decided["resumedRunId"], resumed.as_str(), "{decided}");

    // ---- In-band: the session's next run request carries the decision and streams the
    // resumed run.
    let (session, _, request_id) = stop_for_approval(&worker, "inband", "Cancel 5150", "cancel_order").await;
    let (frames, raw) = run_stream(
        &worker,
        "inband",
        json!({"sessionId": session, "approvals": [{"requestId": request_id, "approved": true}]}),
    )
    .await;
    let done = frames.last().unwrap();
    assert_eq!((done.event.as_str(), done.data["status"].as_str()), ("done", Some("Completed")), "{raw}");
    assert!(text_of(&frames).contains("Order 5150 is cancelled."), "{raw}");
    let resumed = frames[0].data["runId"].as_str().unwrap().to_owned();
    let tools = get_json(worker.url(Group::Runs, &format!("/api/runs/{resumed}/tools"))).await;
    assert_eq!((tools[0]["toolName"].as_str(), tools[0]["status"].as_str()), (Some("cancel_order"), Some("Succeeded")));
    let res = decide(&worker, &request_id, true).await;
    assert_eq!(res.status(), 409);
    let decided = get_json(worker.url(Group::Runs, &format!("/api/approvals/{request_id}"))).await;
    assert_eq!(
        (decided["status"].as_str(), decided["resumedRunId"].as_str()),
        (Some("Approved"), Some(resumed.as_str())),
        "{decided}"
    );
    assert_no_fatal_log(&worker);
}

// ---- background work: queued runs, the job queue consumers, the tick -------------------------

/// Answers `POST /api/agents/{agent}/run` with `Prefer: respond-async`: `202` and the run's id.
async fn queue_run(host: &Host, agent: &str, message: &str) -> String {
    let res = authed(client().post(host.url(Group::Agents, &format!("/api/agents/{agent}/run"))))
        .header("Prefer", "respond-async")
        .json(&json!({"message": message}))
        .send()
        .await
        .unwrap();
    let status = res.status();
    let applied = res.headers().get("preference-applied").map(|v| v.to_str().unwrap().to_owned());
    let body: Value = res.json().await.unwrap();
    assert_eq!(status, 202, "{body}\n{}", host.log_text());
    assert_eq!(applied.as_deref(), Some("respond-async"));
    assert_eq!(body["status"], "Queued", "{body}");
    body["runId"].as_str().unwrap().to_owned()
}

/// Polls the run until it is no longer queued or running (no timing is asserted: the deadline
/// only bounds a test that would otherwise hang).
async fn run_settles(host: &Host, run_id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let run = get_json(host.url(Group::Runs, &format!("/api/runs/{run_id}"))).await;
        if !matches!(run["status"].as_str(), Some("Queued" | "Running")) {
            return run;
        }
        assert!(Instant::now() < deadline, "the run did not end: {run}\n{}", host.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A run row as a process that died mid-run leaves it: `Running`, not heard from for an hour.
async fn plant_orphan(db: &sqlx::PgPool, schema: &str, like_run: &str, agent: &str) -> String {
    let tenant: String = sqlx::query_scalar(&format!("SELECT tenant_id FROM \"{schema}\".runs WHERE id = $1::uuid"))
        .bind(like_run)
        .fetch_one(db)
        .await
        .unwrap();
    let id = uuid::Uuid::now_v7().to_string();
    sqlx::query(&format!(
        "INSERT INTO \"{schema}\".runs (tenant_id, id, agent_name, status, started_at, heartbeat_at) \
         VALUES ($1, $2::uuid, $3, 'Running', now() - interval '1 hour', now() - interval '1 hour')"
    ))
    .bind(&tenant)
    .bind(&id)
    .bind(agent)
    .execute(db)
    .await
    .unwrap();
    id
}

/// On the Worker under `wrangler dev` (Miniflare's local Cloudflare Queues and cron): a run
/// queued with `Prefer: respond-async` answers 202, travels through the `TRACON_JOBS` queue
/// and is run by the `queue` handler to `Completed`; so does a run queued by a signed inbound
/// trigger request; the cron trigger fired through the local
/// scheduled endpoint runs the tick, which closes a run whose heartbeat expired as `Failed`
/// (`Orphaned`).
#[tokio::test]
async fn the_worker_queues_runs_through_cloudflare_queues_and_ticks_from_its_cron_trigger() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let schema = unique("q");
    migrate(&schema);
    let hook_secret = "an-inbound-trigger-secret-0123456789";
    let worker =
        start_worker(&schema, &mock, &unique("tracon_queue"), &[("Tracon__TriggerSecrets__Hook", hook_secret)]).await;
    // (A script's turn is chosen by the conversation's length: every one-message run gets the first.)
    mock.script("queued-model", vec![MockTurn::text("Queued and done.")]);
    mock.script("trigger-model", vec![MockTurn::text("Triggered and done.")]);
    create_agent(&worker, &agent("queued", "queued-model")).await;
    create_agent(&worker, &agent("hooked", "trigger-model")).await;

    let run_id = queue_run(&worker, "queued", "Run later.").await;
    let run = run_settles(&worker, &run_id).await;
    assert_eq!(run["status"], "Completed", "{run}\n{}", worker.log_text());
    let log = get_text(worker.url(Group::Runs, &format!("/api/runs/{run_id}/events"))).await;
    let frames = parse_frames(&log);
    assert_eq!(frames.last().unwrap().event, "run.completed", "{log}");
    assert!(log.contains("Queued and done."), "{log}");
    // Two more at once: each message's job runs once.
    let (a, b) = tokio::join!(queue_run(&worker, "queued", "One."), queue_run(&worker, "queued", "Two."));
    for id in [a, b] {
        assert_eq!(run_settles(&worker, &id).await["status"], "Completed", "{}", worker.log_text());
    }
    assert_eq!(mock.requests("queued-model").len(), 3, "each queued run called the model once");

    // An inbound trigger: a signed request (no bearer token) queues a run the same way.
    let res = authed(client().put(worker.url(Group::Runs, "/api/triggers/hook")))
        .json(&json!({"targetKind": "agent", "targetName": "hooked",
            "signingSecretConfigurationName": "Tracon__TriggerSecrets__Hook"}))
        .send()
        .await
        .unwrap();
    let status = res.status();
    let trigger: Value = res.json().await.unwrap();
    assert!(status.is_success(), "{status} {trigger}\n{}", worker.log_text());
    let accept_path = trigger["acceptPath"].as_str().unwrap().to_owned();
    let body = "Deploy finished; say so.";
    let timestamp = chrono::Utc::now().timestamp().to_string();
    let signature = tracon_core::triggers::sign(hook_secret.as_bytes(), &timestamp, body.as_bytes());
    let res = client()
        .post(worker.url(Group::Runs, &accept_path))
        .header("X-Tracon-Timestamp", &timestamp)
        .header("X-Tracon-Signature", &signature)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = res.status();
    let accepted: Value = res.json().await.unwrap();
    assert_eq!(status, 202, "{accepted}\n{}", worker.log_text());
    let triggered = accepted["runId"].as_str().unwrap_or_else(|| panic!("{accepted}")).to_owned();
    let run = run_settles(&worker, &triggered).await;
    assert_eq!(run["status"], "Completed", "{run}\n{}", worker.log_text());
    let log = get_text(worker.url(Group::Runs, &format!("/api/runs/{triggered}/events"))).await;
    assert!(log.contains("Triggered and done."), "{log}");
    let sent = mock.requests("trigger-model").last().unwrap()["body"]["messages"].to_string();
    assert!(sent.contains(body), "the trigger's body is the run's message: {sent}");

    // The cron trigger, fired locally: the tick reconciles the orphan.
    let db = pool().await;
    let orphan = plant_orphan(&db, &schema, &run_id, "queued").await;
    let base = worker.url(Group::Runs, "");
    let res = client().get(format!("{base}/cdn-cgi/handler/scheduled?cron=*+*+*+*+*")).send().await.unwrap();
    let status = res.status();
    let text = res.text().await.unwrap();
    assert_eq!(status, 200, "the scheduled endpoint: {text}\n{}", worker.log_text());
    let run = run_settles(&worker, &orphan).await;
    assert_eq!(run["status"], "Failed", "{run}\n{}", worker.log_text());
    assert!(run.to_string().contains("Orphaned"), "{run}");
    assert_no_fatal_log(&worker);
}

// -- Runs longer than one invocation: three hand-overs at the soft deadline.

/// The soft deadline of the hand-over tests, and the mock model's latency: every model call
/// takes longer than the deadline, so each attempt is past it at its first step boundary (after
/// its tool round) and hands the run over there — by construction, not by a timing assertion.
const SOFT_DEADLINE: &str = "0.05";
const MODEL_LATENCY_MS: u64 = 100;

/// An agent whose run takes four model steps: three tool rounds, then the answer.
async fn three_step_agent(host: &Host, mock: &MockServer, model: &str) {
    let turns = ["1001", "1002", "1003"]
        .into_iter()
        .map(|order| MockTurn::tool_call("get_order_status", json!({"orderId": order})))
        .chain([MockTurn::text("All three orders are on their way.")])
        .collect();
    mock.script(model, turns);
    create_agent(
        host,
        &json!({"name": "steps", "instructions": "Look up each order, one at a time.",
            "toolNames": ["get_order_status"], "model": {"provider": "openai", "model": model}}),
    )
    .await;
}

/// A follower of `GET /api/runs/{id}/events` from before the run starts until it ends: the
/// raw stream it read.
fn follow(host: &Host, run_id: &str) -> tokio::task::JoinHandle<String> {
    let request = authed(client().get(host.url(Group::Runs, &format!("/api/runs/{run_id}/events"))));
    tokio::spawn(async move {
        let mut live = Live::open(request).await;
        live.rest().await;
        live.raw
    })
}

/// What three hand-overs leave: one run, `Completed` in place; the follower's stream one
/// gapless, ordered log with one start, three `tracon.run.yielded` and three
/// `tracon.run.resumed`, the same log a later reader gets; each tool call run once; each model
/// step asked once; the job done in one attempt (a hand-over gives its attempt back).
async fn assert_three_hand_overs(
    host: &Host,
    schema: &str,
    run_id: &str,
    followed: &str,
    mock: &MockServer,
    model: &str,
) {
    let run = get_json(host.url(Group::Runs, &format!("/api/runs/{run_id}"))).await;
    assert_eq!(run["status"], "Completed", "{run}\n{}", host.log_text());
    assert_eq!(run["continuedByRunId"], Value::Null, "handed over in place, not continued as another run: {run}");
    let ids: Vec<u64> = followed.lines().filter_map(|l| l.strip_prefix("id: ")).map(|i| i.parse().unwrap()).collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>(), "the follower read a gapless log: {followed}");
    let names: Vec<String> = parse_frames(followed).into_iter().map(|f| f.event).collect();
    assert_eq!(names.iter().filter(|n| *n == "run.started").count(), 1, "{names:?}");
    assert_eq!(names.last().map(String::as_str), Some("run.completed"), "{names:?}");
    assert_eq!(followed.matches("tracon.run.yielded").count(), 3, "{followed}");
    assert_eq!(followed.matches("tracon.run.resumed").count(), 3, "{followed}");
    assert!(followed.contains("All three orders are on their way."), "{followed}");
    let later = get_text(host.url(Group::Runs, &format!("/api/runs/{run_id}/events"))).await;
    assert_eq!(later, *followed, "a later reader gets the log the follower read");

    let tools = get_json(host.url(Group::Runs, &format!("/api/runs/{run_id}/tools"))).await;
    let calls: Vec<(&str, &str)> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["toolName"].as_str().unwrap(), t["status"].as_str().unwrap()))
        .collect();
    assert_eq!(calls, [("get_order_status", "Succeeded"); 3], "one call a step, each run once: {tools}");
    assert_eq!(mock.requests(model).len(), 4, "each model step asked once across the hand-overs");
    let db = pool().await;
    let (status, attempts): (String, i32) =
        sqlx::query_as(&format!("SELECT status, attempts FROM \"{schema}\".jobs WHERE run_id = $1::uuid"))
            .bind(run_id)
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!((status.as_str(), attempts), ("Succeeded", 1), "a hand-over gives its attempt back");
}

/// Agents calling agents and the harness loop on a serverless host: `lead` asks `helper` (a
/// child run in the same invocation, `child.started` / `child.completed` on the lead's log),
/// answers without its completion marker, is sent the loop's feedback and answers again with
/// it; the tree endpoint returns both runs from the child, with the tokens rolled up.
async fn assert_children_and_the_loop(host: &Host, mock: &MockServer, prefix: &str) {
    let (lead, helper) = (format!("{prefix}-lead"), format!("{prefix}-helper"));
    mock.script(&helper, vec![MockTurn::text("Order 1001 left the warehouse on Monday.")]);
    mock.script(
        &lead,
        vec![
            MockTurn::tool_call("ask_helper", json!({"task": "When did order 1001 leave the warehouse?"})),
            MockTurn::text("It left on Monday."),
            MockTurn::text("Order 1001 left the warehouse on Monday. ALL DONE"),
        ],
    );
    create_agent(host, &agent("helper", &helper)).await;
    create_agent(
        host,
        &json!({"name": "lead", "instructions": "Delegate, then answer.", "callableAgentNames": ["helper"],
            "harness": {"loop": {"criteria": [{"kind": "completionMarker", "marker": "ALL DONE"}]}},
            "model": {"provider": "openai", "model": lead}}),
    )
    .await;
    let (frames, raw) = run_stream(host, "lead", json!({"message": "When did order 1001 leave?"})).await;
    let done = frames.last().unwrap();
    assert_eq!(
        (done.event.as_str(), done.data["status"].as_str()),
        ("done", Some("Completed")),
        "{raw}\n{}",
        host.log_text()
    );
    assert!(text_of(&frames).ends_with("ALL DONE"), "{raw}");
    let root = frames[0].data["runId"].as_str().unwrap().to_owned();
    let log = get_text(host.url(Group::Runs, &format!("/api/runs/{root}/events"))).await;
    let names: Vec<String> = parse_frames(&log).into_iter().map(|f| f.event).collect();
    for (name, times) in [("child.started", 1), ("child.completed", 1), ("loop.iteration_completed", 2)] {
        assert_eq!(names.iter().filter(|n| *n == name).count(), times, "{name}: {log}");
    }
    let child = parse_frames(&log).into_iter().find(|f| f.event == "child.started").unwrap().data["childRunId"]
        .as_str()
        .unwrap_or_else(|| panic!("{log}"))
        .to_owned();
    let tree = get_json(host.url(Group::Runs, &format!("/api/runs/{child}/tree"))).await;
    let runs = tree["runs"].as_array().unwrap_or_else(|| panic!("{tree}"));
    let members: Vec<(&str, u64)> =
        runs.iter().map(|r| (r["agentName"].as_str().unwrap(), r["depth"].as_u64().unwrap())).collect();
    assert_eq!(members, [("lead", 0), ("helper", 1)], "{tree}");
    let summed: u64 = runs.iter().map(|r| r["usage"]["totalTokens"].as_u64().unwrap()).sum();
    assert_eq!(tree["totalUsage"]["totalTokens"].as_u64(), Some(summed), "{tree}");
    assert_eq!(mock.requests(&lead).len(), 3, "the call, the answer without the marker, the answer with it");
}

/// On the Worker under `wrangler dev`: a queued run whose work takes three soft deadlines hands
/// itself over three times — each attempt stops at its step boundary, the job goes back to the
/// `TRACON_JOBS` queue as a fresh message, and the `queue` handler's next delivery takes the run
/// back — and completes; a follower connected before it started reads one gapless log. The
/// same Worker runs a child agent and the harness loop ([`assert_children_and_the_loop`]).
#[tokio::test]
async fn a_run_on_the_worker_outlasts_three_soft_deadlines_and_agents_call_agents_in_a_loop() {
    let mock = MockServer::start(MockConfig { latency_ms: MODEL_LATENCY_MS, ..MockConfig::default() }).await.unwrap();
    let schema = unique("h");
    migrate(&schema);
    let worker = start_worker(
        &schema,
        &mock,
        &unique("tracon_handover"),
        &[("Tracon__RunContinuation__SoftDeadlineSeconds", SOFT_DEADLINE)],
    )
    .await;
    three_step_agent(&worker, &mock, "steps-model").await;
    let run_id = queue_run(&worker, "steps", "Where are orders 1001, 1002 and 1003?").await;
    let followed = follow(&worker, &run_id).await.unwrap();
    assert_three_hand_overs(&worker, &schema, &run_id, &followed, &mock, "steps-model").await;
    assert_children_and_the_loop(&worker, &mock, "worker").await;
    assert_no_fatal_log(&worker);
}

// -- Lambda: SQS through moto_server, the consumer through cargo lambda's Runtime API emulator.

fn moto_server() -> PathBuf {
    let venv = root().join("target/tools/venv/bin/moto_server");
    if venv.exists() {
        return venv;
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join("moto_server")).find(|p| p.exists()));
    on_path.unwrap_or_else(|| {
        panic!("moto_server is not installed: pip install 'moto[server]==5.2.1' (./scripts/test installs it)")
    })
}

/// An SQS emulator (moto's server) on loopback; killed on drop.
struct Sqs {
    child: Child,
    endpoint: String,
    log: PathBuf,
}

impl Drop for Sqs {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-s", "KILL", "--", &format!("-{}", self.child.id())]).status();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

impl Sqs {
    async fn start() -> Sqs {
        let port = free_port();
        let mut cmd = Command::new(moto_server());
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
        let (child, log) = spawn_logged(cmd, "moto");
        let sqs = Sqs { child, endpoint: format!("http://127.0.0.1:{port}"), log };
        let deadline = Instant::now() + Duration::from_secs(60);
        while client().get(format!("{}/moto-api/", sqs.endpoint)).send().await.is_err() {
            let log = std::fs::read_to_string(&sqs.log).unwrap_or_default();
            assert!(Instant::now() < deadline, "moto_server did not start:\n{log}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        sqs
    }

    /// One call of SQS's JSON protocol (moto does not check signatures).
    async fn call(&self, action: &str, body: Value) -> Value {
        let res = client()
            .post(format!("{}/", self.endpoint))
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", format!("AmazonSQS.{action}"))
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=0",
            )
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = res.status();
        let text = res.text().await.unwrap();
        assert!(status.is_success(), "SQS {action}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// What the functions are configured with to use this emulator's `queue_url` (SigV4 with
    /// test credentials), and `more` on top.
    fn config(&self, queue_url: &str, more: &[(&str, &str)]) -> Vec<(String, String)> {
        [
            ("Tracon__Queue__SqsQueueUrl", queue_url),
            ("Tracon__Queue__SqsEndpoint", self.endpoint.as_str()),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "test-access-key"),
            ("AWS_SECRET_ACCESS_KEY", "test-secret-key"),
        ]
        .iter()
        .chain(more)
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
    }

    async fn create_queue(&self, name: &str) -> String {
        self.call("CreateQueue", json!({"QueueName": name})).await["QueueUrl"].as_str().unwrap().to_owned()
    }

    /// What the event source mapping would hand the consumer: the waiting messages as an
    /// `SqsEvent`'s records.
    async fn receive(&self, queue_url: &str) -> Vec<Value> {
        let answer = self
            .call(
                "ReceiveMessage",
                json!({"QueueUrl": queue_url, "MaxNumberOfMessages": 10, "WaitTimeSeconds": 1, "AttributeNames": ["All"]}),
            )
            .await;
        let messages = answer["Messages"].as_array().cloned().unwrap_or_default();
        messages
            .into_iter()
            .map(|m| {
                json!({
                    "messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
                    "md5OfBody": m["MD5OfBody"], "attributes": m["Attributes"], "messageAttributes": {},
                    "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tracon-jobs",
                    "awsRegion": "us-east-1",
                })
            })
            .collect()
    }
}

/// Invokes a function under `cargo lambda watch` the way an event source does.
async fn invoke(host: &Host, function: &str, event: &Value) -> Value {
    let (origin, _) =
        host.url(Group::Agents, "").split_once("/lambda-url/").map(|(o, r)| (o.to_owned(), r.to_owned())).unwrap();
    let res = client()
        .post(format!("{origin}/2015-03-31/functions/{function}/invocations"))
        .json(event)
        .send()
        .await
        .unwrap();
    let status = res.status();
    let text = res.text().await.unwrap();
    assert_eq!(status, 200, "invoking {function}: {text}\n{}", host.log_text());
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("{function} answered {text}"))
}

/// On the Lambda build: the agents function queues a run (`Prefer: respond-async`) with a
/// signed `SendMessage` to the SQS emulator (moto's server); the test plays the event source
/// mapping — it receives the messages and invokes the `tracon-jobs` consumer with them as an
/// `SqsEvent` through cargo lambda's Runtime API emulator — and the run completes. A batch
/// with a record that is not a job id reports exactly that record in `batchItemFailures`; a
/// job delivered again is acknowledged, not run twice. The `tracon-tick` function, invoked with
/// an EventBridge scheduled event, reconciles an orphaned run and wakes a job whose message was
/// lost, through the queue again, and the consumer runs it.
#[tokio::test]
async fn the_lambda_functions_queue_runs_through_sqs_and_the_consumer_reports_failed_records() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let schema = unique("s");
    migrate(&schema);
    let sqs = Sqs::start().await;
    let queue_url = sqs.create_queue(&unique("tracon-jobs")).await;
    let lambda = start_lambda_with(&schema, &mock, &sqs.config(&queue_url, &[])).await;
    mock.script("sqs-model", vec![MockTurn::text("Done through SQS.")]);
    create_agent(&lambda, &agent("queued", "sqs-model")).await;

    let run_id = queue_run(&lambda, "queued", "Run later.").await;
    let run = get_json(lambda.url(Group::Runs, &format!("/api/runs/{run_id}"))).await;
    assert_eq!(run["status"], "Queued", "nothing runs it until the consumer is invoked: {run}");
    let mut records = sqs.receive(&queue_url).await;
    assert_eq!(records.len(), 1, "{records:?}");
    let good = records[0].clone();
    let job_id = good["body"].as_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&job_id).is_ok(), "the message carries only the job id: {job_id}");
    let mut bad = good.clone();
    bad["messageId"] = json!("not-a-job-message");
    bad["body"] = json!("{\"runId\": \"not a job id\"}");
    records.push(bad);

    let answer = invoke(&lambda, "tracon-jobs", &json!({"Records": records})).await;
    assert_eq!(
        answer,
        json!({"batchItemFailures": [{"itemIdentifier": "not-a-job-message"}]}),
        "{}",
        lambda.log_text()
    );
    let run = get_json(lambda.url(Group::Runs, &format!("/api/runs/{run_id}"))).await;
    assert_eq!(run["status"], "Completed", "{run}\n{}", lambda.log_text());
    let log = get_text(lambda.url(Group::Runs, &format!("/api/runs/{run_id}/events"))).await;
    assert!(log.contains("Done through SQS."), "{log}");

    // The same message again (at-least-once delivery): acknowledged, the run not repeated.
    let answer = invoke(&lambda, "tracon-jobs", &json!({"Records": [good]})).await;
    assert_eq!(answer, json!({"batchItemFailures": []}));
    assert_eq!(mock.requests("sqs-model").len(), 1, "the model was called once");

    // A wake-up that got lost: the message is dropped, and once the job is older than the
    // grace a fresh enqueue gets (aged here rather than waited for), the tick wakes it again.
    let db = pool().await;
    let lost_run = queue_run(&lambda, "queued", "Lost, then found.").await;
    let lost = sqs.receive(&queue_url).await;
    assert_eq!(lost.len(), 1, "{lost:?}");
    let lost_job = lost[0]["body"].as_str().unwrap().to_owned();
    sqs.call("DeleteMessage", json!({"QueueUrl": queue_url, "ReceiptHandle": lost[0]["receiptHandle"]})).await;
    sqlx::query(&format!(
        "UPDATE \"{schema}\".jobs SET created_at = created_at - interval '1 hour' WHERE id = $1::uuid"
    ))
    .bind(&lost_job)
    .execute(&db)
    .await
    .unwrap();

    // The tick on its schedule wakes the job and closes a run whose heartbeat expired.
    let orphan = plant_orphan(&db, &schema, &run_id, "queued").await;
    let scheduled = json!({
        "version": "0", "id": "5f1b6b1e-0000-0000-0000-000000000000", "detail-type": "Scheduled Event",
        "source": "aws.events", "account": "123456789012", "time": "2026-01-01T00:00:00Z", "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/tracon-tick"], "detail": {}
    });
    let report = invoke(&lambda, "tracon-tick", &scheduled).await;
    assert_eq!(
        (&report["runsReconciled"], &report["jobsWoken"]),
        (&json!(1), &json!(1)),
        "{report}\n{}",
        lambda.log_text()
    );
    let run = get_json(lambda.url(Group::Runs, &format!("/api/runs/{orphan}"))).await;
    assert_eq!(run["status"], "Failed", "{run}");
    assert!(run.to_string().contains("Orphaned"), "{run}");
    let woken = sqs.receive(&queue_url).await;
    assert_eq!(woken.len(), 1, "{woken:?}");
    assert_eq!(woken[0]["body"], lost_job.as_str());
    let answer = invoke(&lambda, "tracon-jobs", &json!({"Records": woken})).await;
    assert_eq!(answer, json!({"batchItemFailures": []}), "{}", lambda.log_text());
    let run = get_json(lambda.url(Group::Runs, &format!("/api/runs/{lost_run}"))).await;
    assert_eq!(run["status"], "Completed", "{run}\n{}", lambda.log_text());
}

/// On the Lambda build under `cargo lambda watch`: a queued run whose work takes three soft
/// deadlines completes through three hand-overs. The test plays the event source mapping: each
/// `tracon-jobs` invocation runs one attempt, which stops at its step boundary and sends the
/// job's next wake-up to SQS itself; so the queue holds exactly one message after each of the
/// first three invocations and none after the fourth. A follower of the `tracon-runs` function
/// connected before the run started reads one gapless log. The same functions run a child
/// agent and the harness loop ([`assert_children_and_the_loop`]).
#[tokio::test]
async fn a_run_on_lambda_outlasts_three_soft_deadlines_and_agents_call_agents_in_a_loop() {
    let mock = MockServer::start(MockConfig { latency_ms: MODEL_LATENCY_MS, ..MockConfig::default() }).await.unwrap();
    let schema = unique("l");
    migrate(&schema);
    let sqs = Sqs::start().await;
    let queue_url = sqs.create_queue(&unique("tracon-jobs")).await;
    let extra = sqs.config(&queue_url, &[("Tracon__RunContinuation__SoftDeadlineSeconds", SOFT_DEADLINE)]);
    let lambda = start_lambda_with(&schema, &mock, &extra).await;
    three_step_agent(&lambda, &mock, "lambda-steps-model").await;
    let run_id = queue_run(&lambda, "steps", "Where are orders 1001, 1002 and 1003?").await;
    let follower = follow(&lambda, &run_id);

    let mut invocations = 0;
    loop {
        let records = sqs.receive(&queue_url).await;
        if records.is_empty() {
            break;
        }
        assert_eq!(records.len(), 1, "one wake-up at a time: {records:?}");
        let answer = invoke(&lambda, "tracon-jobs", &json!({"Records": records})).await;
        assert_eq!(answer, json!({"batchItemFailures": []}), "{}", lambda.log_text());
        invocations += 1;
        assert!(invocations <= 10, "the run never finished: {}", lambda.log_text());
    }
    assert_eq!(invocations, 4, "three hand-overs, and the invocation that finished the run");
    let followed = follower.await.unwrap();
    assert_three_hand_overs(&lambda, &schema, &run_id, &followed, &mock, "lambda-steps-model").await;
    assert_children_and_the_loop(&lambda, &mock, "lambda").await;
}

// ---- the MCP client on both hosts -------------------------------------------------------------

/// What both hosts need for the test's MCP servers: the egress guard's exception for servers
/// on this machine, and the credential the `crm` registration names (a Worker var, a Lambda
/// environment variable).
const MCP_CONFIG: [(&str, &str); 4] = [
    ("Tracon__Egress__AllowHttp", "true"),
    ("Tracon__Egress__AllowedNetworks__0", "127.0.0.0/8"),
    ("Tracon__McpSecrets__Crm", "Bearer crm-test-token"),
    // Short, so a silent server is given up on soon (one exchange here takes milliseconds).
    ("Tracon__Mcp__ConnectionTimeoutSeconds", "3"),
];

async fn send_json(request: reqwest::RequestBuilder) -> (u16, Value) {
    let res = authed(request).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Registers an MCP server through `host`'s agents group.
async fn register_mcp_server(host: &Host, registration: &Value) {
    let (status, created) =
        send_json(client().post(host.url(Group::Agents, "/api/mcp-servers")).json(registration)).await;
    assert_eq!(status, 201, "{created}\n{}", host.log_text());
}

/// `POST /api/mcp-servers/refresh?name={name}` on `host`: the server as discovered now.
async fn refresh_mcp_server(host: &Host, name: &str) -> Value {
    let (status, refreshed) =
        send_json(client().post(host.url(Group::Agents, &format!("/api/mcp-servers/refresh?name={name}")))).await;
    assert_eq!(status, 200, "{refreshed}\n{}", host.log_text());
    refreshed[0].clone()
}

async fn mcp_server(host: &Host, name: &str) -> Value {
    get_json(host.url(Group::Agents, &format!("/api/mcp-servers/{name}"))).await
}

fn mcp_tool_names(server: &Value) -> Vec<&str> {
    server["discovery"]["tools"].as_array().unwrap().iter().map(|t| t["toolName"].as_str().unwrap()).collect()
}

/// The MCP client on the serverless hosts, both ways round, on one Postgres, against real MCP
/// servers (the official Rust SDK's server side, `tracon_tests::mcp`).
///
/// Registered and discovered through Lambda's agents function (the current, stateless
/// revision), a server is in the Worker's catalog straight from the store, its credential
/// resolved from the Worker's vars. An agent on the Worker names its tool and one of its
/// resources: the run snapshots the resource into the instructions (read from the Worker)
/// and stops for approval; the decision through the Worker's mailbox resumes it in the
/// background, the tool is called from the Worker and its result is what the model answers
/// from. The other way round, a server of the previous revision (the `initialize` handshake,
/// then its session) is registered and discovered on the Worker, and a run on Lambda is
/// offered its tool while the server is away — the cached catalog, no round trip; once the
/// server is back, the in-band approval calls it from Lambda. Neither run asked for a new
/// discovery. Last, a refresh on the Worker of a server that went away loses its tools with a
/// warning in our words, and the next one, with the server back, finds them again; one that
/// never answers is given up on after the connection timeout.
#[tokio::test]
async fn mcp_servers_registered_on_one_host_serve_runs_on_the_other_from_the_cached_catalog() {
    let crm = McpTestServer::start().await.unwrap();
    let old = McpTestServer::start_previous_revision().await.unwrap();
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let (_, worker, lambda) = worker_and_lambda_with(&mock, "mcp", &MCP_CONFIG).await;

    // ---- Registered and discovered through Lambda; the Worker reads the same catalog.
    register_mcp_server(
        &lambda,
        &json!({"name": "crm", "endpoint": crm.url, "authorizationConfigurationKey": "Tracon:McpSecrets:Crm"}),
    )
    .await;
    // The egress guard on the Worker, where Tracon resolves no names: only the URL is checked,
    // and a private address outside the allowed network or a local name is refused on save.
    for endpoint in ["http://10.1.2.3/mcp", "http://localhost:8080/mcp", "http://metadata.google.internal/mcp"] {
        let registration = json!({"name": "intranet", "endpoint": endpoint});
        let (status, refused) =
            send_json(client().post(worker.url(Group::Agents, "/api/mcp-servers")).json(&registration)).await;
        assert_eq!((status, refused["field"].as_str()), (400, Some("endpoint")), "{endpoint}: {refused}");
    }
    let discovered = refresh_mcp_server(&lambda, "crm").await;
    assert_eq!(discovered["discovery"]["reachable"], true, "{discovered}\n{}", lambda.log_text());
    assert_eq!(discovered["discovery"]["protocolVersion"], "2026-07-28", "{discovered}");
    assert_eq!(mcp_tool_names(&discovered), ["crm_lookup", "crm_refund", "crm_explode"]);
    let seen = mcp_server(&worker, "crm").await;
    assert_eq!(seen["discovery"], discovered["discovery"], "the Worker reads the stored discovery");
    assert_eq!(seen["credentialsResolved"], true, "the Worker resolves the key from its vars: {seen}");

    // ---- On the Worker: the resource snapshot, the approval, the call.
    mock.script(
        "worker-mcp-model",
        vec![
            MockTurn::tool_call("crm_lookup", json!({"customerId": "c-42"})),
            MockTurn::text("Ada is on the Gold plan."),
        ],
    );
    create_agent(
        &worker,
        &json!({"name": "crm-desk", "instructions": "Answer briefly.", "toolNames": ["crm_lookup"],
            "mcpResourceUris": ["crm:file:///policy.md"], "model": {"provider": "openai", "model": "worker-mcp-model"}}),
    )
    .await;
    let (_, stopped, request_id) = stop_for_approval(&worker, "crm-desk", "Who is c-42?", "crm_lookup").await;
    assert!(crm.calls().is_empty(), "nothing reaches the server before the approval");
    let first = &mock.requests("worker-mcp-model")[0]["body"];
    assert!(first["tools"].to_string().contains("customerId"), "{first}");
    let system = first["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(system.contains(POLICY), "the Worker read the resource into the instructions: {system}");

    let res = decide(&worker, &request_id, true).await;
    assert_eq!(res.status(), 200);
    let decision: Value = res.json().await.unwrap();
    let resumed = decision["resumedRunId"].as_str().unwrap_or_else(|| panic!("{decision}")).to_owned();
    let run = run_settles(&worker, &resumed).await;
    assert_eq!(run["status"], "Completed", "{run}\n{}", worker.log_text());
    assert_eq!(crm.calls(), [("lookup".to_owned(), json!({"customerId": "c-42"}))], "called once, from the Worker");
    let tools = get_json(worker.url(Group::Runs, &format!("/api/runs/{resumed}/tools"))).await;
    assert_eq!(
        (tools[0]["toolName"].as_str(), tools[0]["status"].as_str(), tools[0]["effect"].as_str()),
        (Some("crm_lookup"), Some("Succeeded"), Some("Read")),
        "{tools}"
    );
    assert!(tools[0]["result"].as_str().unwrap_or_default().contains("Ada Lovelace"), "{tools}");
    let answered_from = mock.requests("worker-mcp-model").last().unwrap()["body"]["messages"].to_string();
    assert!(answered_from.contains("Customer c-42: Ada Lovelace, plan Gold."), "{answered_from}");
    let log = get_text(worker.url(Group::Runs, &format!("/api/runs/{resumed}/events"))).await;
    assert!(log.contains("Ada is on the Gold plan.") && log.contains(&stopped), "{log}");
    assert_eq!(mcp_server(&lambda, "crm").await["discovery"], discovered["discovery"], "not discovered again");

    // ---- The other way round: the handshake on the Worker, the run on Lambda.
    register_mcp_server(&worker, &json!({"name": "old", "endpoint": old.url})).await;
    let discovered = refresh_mcp_server(&worker, "old").await;
    assert_eq!(discovered["discovery"]["protocolVersion"], "2025-11-25", "{discovered}\n{}", worker.log_text());
    assert_eq!(mcp_tool_names(&discovered), ["old_lookup", "old_refund", "old_explode"]);
    create_agent(
        &lambda,
        &json!({"name": "legacy", "instructions": "Answer briefly.", "toolNames": ["old_lookup"],
            "model": {"provider": "openai", "model": "lambda-mcp-model"}}),
    )
    .await;
    mock.script(
        "lambda-mcp-model",
        vec![MockTurn::tool_call("old_lookup", json!({"customerId": "c-7"})), MockTurn::text("Found c-7.")],
    );
    old.stop().await;
    let (session, _, request_id) = stop_for_approval(&lambda, "legacy", "Find c-7", "old_lookup").await;
    let offered = mock.requests("lambda-mcp-model")[0]["body"]["tools"].to_string();
    assert!(offered.contains("old_lookup"), "offered from the cached catalog while the server is away: {offered}");
    old.restart().await.unwrap();
    let (frames, raw) = run_stream(
        &lambda,
        "legacy",
        json!({"sessionId": session, "approvals": [{"requestId": request_id, "approved": true}]}),
    )
    .await;
    let done = frames.last().unwrap();
    assert_eq!((done.event.as_str(), done.data["status"].as_str()), ("done", Some("Completed")), "{raw}");
    assert_eq!(text_of(&frames), "Found c-7.", "{raw}");
    assert_eq!(old.calls(), [("lookup".to_owned(), json!({"customerId": "c-7"}))]);
    let answered_from = mock.requests("lambda-mcp-model").last().unwrap()["body"]["messages"].to_string();
    assert!(answered_from.contains("Customer c-7: Ada Lovelace, plan Gold."), "{answered_from}");
    assert_eq!(mcp_server(&worker, "old").await["discovery"], discovered["discovery"], "not discovered again");

    // ---- Away and back, seen from the Worker.
    crm.stop().await;
    let lost = refresh_mcp_server(&worker, "crm").await;
    assert_eq!((lost["discovery"]["reachable"].as_bool(), mcp_tool_names(&lost).len()), (Some(false), 0), "{lost}");
    let warning = lost["discovery"]["warnings"][0].as_str().unwrap();
    assert!(warning.starts_with("The server could not be reached."), "{warning}");
    crm.restart().await.unwrap();
    let found = refresh_mcp_server(&worker, "crm").await;
    assert_eq!(mcp_tool_names(&found), ["crm_lookup", "crm_refund", "crm_explode"], "{found}");

    // A server that takes the connection and never answers: the Worker gives up after the
    // connection timeout (its clock's timer, not the platform's), in our words.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}/mcp", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    register_mcp_server(&worker, &json!({"name": "silent", "endpoint": silent_url})).await;
    let asked = Instant::now();
    let silent = refresh_mcp_server(&worker, "silent").await;
    let waited = asked.elapsed();
    let warning = silent["discovery"]["warnings"][0].as_str().unwrap_or_default();
    assert!(warning.starts_with("The server did not answer within 3 seconds."), "{silent}");
    assert!(waited < Duration::from_secs(20), "the refresh took {waited:?}");
    assert_no_fatal_log(&worker);
}

const HELPER_ANSWER: &str = "Order 4182 ships tomorrow.";

/// Each host's `/mcp` serves the other host's MCP client: Tracon as the remote MCP server a
/// tenant registers. An `ExternalInvoke` key (issued before the hosts start, so both can hold
/// it as the credential) lets Lambda's agents function register the Worker's `/mcp`, discover
/// the exposed agent `helper` as a tool and call it from a run — the Worker runs `helper` and
/// its answer is what the calling run's model is given — and the Worker do the same with
/// Lambda's `/mcp`. The servers are registered approval-free (the static token may), so the
/// calls go through without a person. With the same key, the A2A server on each host answers
/// `SendMessage` with the completed task, and the other host's `GetTask` reads it back.
#[tokio::test]
async fn each_hosts_mcp_server_serves_the_other_hosts_mcp_client() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let schema = unique("mcpx");
    migrate(&schema);
    let key = {
        let url = database_url();
        let local = Tracon::start(&[
            ("DATABASE_URL", url.as_str()),
            ("Tracon__PostgreSql__SchemaName", schema.as_str()),
            ("Tracon__PostgreSql__AutoApplyMigrations", "false"),
            ("TRACON_AUTH_TOKEN", TOKEN),
        ])
        .await;
        local.issue_key(TOKEN, "peer", &["ExternalInvoke"]).await["key"].as_str().unwrap().to_owned()
    };
    let credential = format!("Bearer {key}");
    let mut config: Vec<(&str, &str)> = MCP_CONFIG[..2].to_vec();
    config.push(("Tracon__McpServer__ExposedAgents__0", "helper"));
    config.push(("Tracon__A2A__ExposedAgents__0", "helper"));
    config.push(("Tracon__McpSecrets__Peer", &credential));
    let (worker, lambda) = start_both(&schema, &mock, &config).await;

    mock.script_in_order("helper-model", vec![MockTurn::text(HELPER_ANSWER)]);
    create_agent(
        &worker,
        &json!({"name": "helper", "description": "Answers order questions.",
        "instructions": "Answer briefly.", "model": {"provider": "openai", "model": "helper-model"}}),
    )
    .await;

    // On the Worker a refusal does not cost the next request its connection: an MCP client's
    // probe of a revision this server does not speak (`400`, answered before the body is
    // parsed), then its `initialize`, over and over on one connection pool. (`/mcp` once
    // answered the `400` with the body unread, and under `wrangler dev` the next request now
    // and then got wrangler's `503` "Your worker restarted mid-request".)
    {
        let host = &worker;
        let pooled = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params":
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}});
        for _ in 0..20 {
            for (version, expected) in [("2026-07-28", 400), ("2025-11-25", 200)] {
                let res = pooled
                    .post(host.url(Group::Agents, "/mcp"))
                    .bearer_auth(&key)
                    .header("Accept", "application/json, text/event-stream")
                    .header("MCP-Protocol-Version", version)
                    .json(&initialize)
                    .send()
                    .await
                    .unwrap();
                let status = res.status().as_u16();
                assert_eq!(status, expected, "{} ({version}): {}", host.name, res.text().await.unwrap());
            }
        }
    }

    for (client_host, server_host, server, model) in
        [(&lambda, &worker, "edge", "lambda-caller-model"), (&worker, &lambda, "fn", "worker-caller-model")]
    {
        let endpoint = server_host.url(Group::Agents, "/mcp");
        register_mcp_server(
            client_host,
            &json!({"name": server, "endpoint": endpoint, "authorizationConfigurationKey": "Tracon:McpSecrets:Peer",
                "requiresApproval": false}),
        )
        .await;
        let discovered = refresh_mcp_server(client_host, server).await;
        let tool = format!("{server}_helper");
        assert_eq!(
            mcp_tool_names(&discovered),
            [tool.as_str()],
            "{}: {discovered}\n{}\n{}",
            client_host.name,
            client_host.log_text(),
            server_host.log_text()
        );
        mock.script(
            model,
            vec![MockTurn::tool_call(&tool, json!({"message": "Where is order 4182?"})), MockTurn::text("Tomorrow.")],
        );
        let caller = format!("{server}-caller");
        create_agent(
            client_host,
            &json!({"name": caller, "instructions": "Ask the helper.", "toolNames": [tool],
                "model": {"provider": "openai", "model": model}}),
        )
        .await;
        let helped_before = mock.requests("helper-model").len();
        let (frames, raw) = run_stream(client_host, &caller, json!({"message": "Where is my order?"})).await;
        let done = frames.last().unwrap();
        assert_eq!(
            (done.event.as_str(), done.data["status"].as_str()),
            ("done", Some("Completed")),
            "{raw}\n{}\n{}",
            client_host.log_text(),
            server_host.log_text()
        );
        assert_eq!(mock.requests("helper-model").len(), helped_before + 1, "the other host ran the helper");
        let asked = last_user_message(mock.requests("helper-model").last().unwrap());
        assert_eq!(asked, "Where is order 4182?");
        let answered_from = mock.requests(model).last().unwrap()["body"]["messages"].to_string();
        assert!(answered_from.contains(HELPER_ANSWER), "the helper's answer came back: {answered_from}");
        let run_id = frames[0].data["runId"].as_str().unwrap();
        let tools = get_json(client_host.url(Group::Runs, &format!("/api/runs/{run_id}/tools"))).await;
        assert_eq!(
            (tools[0]["toolName"].as_str(), tools[0]["status"].as_str()),
            (Some(tool.as_str()), Some("Succeeded"))
        );
    }
    assert!(worker.log_text().contains("POST /mcp 200"), "the Worker's /mcp answered:\n{}", worker.log_text());

    // ---- A2A with the same key: a task on each host, read back through the other.
    for (host, other) in [(&worker, &lambda), (&lambda, &worker)] {
        let card = client().get(host.url(Group::Runs, "/a2a/helper/.well-known/agent-card.json")).send().await.unwrap();
        assert_eq!(card.status(), 200, "{}: the card is open", host.name);
        let card: Value = card.json().await.unwrap();
        assert_eq!(card["name"], "helper", "{card}");
        let send = json!({"jsonrpc": "2.0", "id": "r1", "method": "SendMessage", "params": {"message":
            {"messageId": unique("m"), "role": "ROLE_USER", "parts": [{"text": "Where is order 4182?"}]}}});
        let a2a = |h: &Host, body: &Value| {
            client().post(h.url(Group::Runs, "/a2a/helper")).bearer_auth(&key).header("A2A-Version", "1.0").json(body)
        };
        let answer: Value = a2a(host, &send).send().await.unwrap().json().await.unwrap();
        let task = &answer["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{}: {answer}\n{}", host.name, host.log_text());
        assert_eq!(task["artifacts"][0]["parts"][0]["text"], HELPER_ANSWER, "{answer}");
        let get = json!({"jsonrpc": "2.0", "id": "r2", "method": "GetTask", "params": {"id": task["id"]}});
        let read: Value = a2a(other, &get).send().await.unwrap().json().await.unwrap();
        assert_eq!(read["result"]["status"]["state"], "TASK_STATE_COMPLETED", "{}: {read}", other.name);
    }
    assert_no_fatal_log(&worker);
}

// ---- MCP OAuth across the hosts ------------------------------------------------------------

/// base64 of 32 bytes: content protection on, the same key on both hosts.
const PROTECTION_KEY: &str = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";
/// The public callback both hosts name (as behind one domain in production): the browser
/// is sent there, and the test delivers its query to the Worker.
const OAUTH_CALLBACK: &str = "https://tracon.example/api/mcp-servers/oauth/callback";

/// A run of `crm-agent` on `host` that calls `crm_lookup` once (no approval: a rule allows
/// it); the remote tool's answer is what the model is given.
async fn oauth_tools_run(host: &Host, mock: &MockServer, customer: &str) {
    mock.script_in_order(
        "oauth-model",
        vec![MockTurn::tool_call("crm_lookup", json!({"customerId": customer})), MockTurn::text("Found.")],
    );
    let (frames, raw) = run_stream(host, "crm-agent", json!({"message": format!("Who is {customer}?")})).await;
    let done = frames.last().unwrap();
    assert_eq!(
        (done.event.as_str(), done.data["status"].as_str()),
        ("done", Some("Completed")),
        "{raw}\n{}",
        host.log_text()
    );
    let last = mock.requests("oauth-model").last().unwrap()["body"]["messages"].to_string();
    assert!(last.contains(&format!("Customer {customer}: Ada Lovelace")), "the remote tool answered: {last}");
}

/// OAuth for remote MCP servers across the serverless hosts, one Postgres, content protection
/// on both (one key). Registered and authorized through Lambda's agents function (discovery
/// from the 401, dynamic client registration, PKCE S256, the resource indicator, the
/// configured public callback); the authorization server's redirect is delivered to the
/// Worker, which exchanges the code with the verifier Lambda stored and discovers the tools
/// with the token. A run on the Worker calls the tool with it. When the server stops taking
/// the token, a run on the Worker refreshes it once, and a run on Lambda uses the Worker's
/// new access token as it is; the next forced refresh happens on Lambda with the refresh
/// token the Worker rotated (the first is spent), and the Worker then uses Lambda's. At rest
/// the tokens are ciphertext.
#[tokio::test]
async fn an_oauth_mcp_server_authorized_on_lambda_connects_on_the_worker_and_both_share_its_tokens() {
    let auth = tracon_tests::oauth::AuthServer::start().await.unwrap();
    let mcp = McpTestServer::start_protected(auth.guard(), &auth.issuer).await.unwrap();
    auth.set_resource(&mcp.url);
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let mut config = MCP_CONFIG.to_vec();
    config.push(("Tracon__ContentProtection__Key", PROTECTION_KEY));
    config.push(("Tracon__Mcp__OAuthRedirectUri", OAUTH_CALLBACK));
    let (schema, worker, lambda) = worker_and_lambda_with(&mock, "mcpoauth", &config).await;

    // ---- Registered and authorized through Lambda.
    let server = json!({"name": "crm", "endpoint": mcp.url, "oauth": {"scopes": ["crm.read"]}});
    let (status, created) = send_json(client().post(lambda.url(Group::Agents, "/api/mcp-servers")).json(&server)).await;
    assert_eq!((status, created["oauth"]["status"].as_str()), (201, Some("not_connected")), "{created}");
    let (status, started) =
        send_json(client().post(lambda.url(Group::Agents, "/api/mcp-servers/crm/oauth/authorize"))).await;
    assert_eq!(status, 200, "{started}\n{}", lambda.log_text());
    let url = reqwest::Url::parse(started["authorizationUrl"].as_str().unwrap()).unwrap();
    assert!(url.as_str().starts_with(&format!("{}/authorize?", auth.issuer)), "{url}");
    let query: std::collections::BTreeMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!(
        (query["code_challenge_method"].as_str(), query["resource"].as_str(), query["redirect_uri"].as_str()),
        ("S256", mcp.url.as_str(), OAUTH_CALLBACK)
    );
    assert_eq!(auth.registrations(), 1, "registered dynamically");

    // ---- The browser: the authorization server sends it to the public callback, which
    // reaches the Worker (no credential of Tracon's).
    let browser = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let reply = browser.get(url.as_str()).send().await.unwrap();
    assert_eq!(reply.status().as_u16(), 302, "{:?}", reply.text().await);
    let location = reply.headers()["location"].to_str().unwrap().to_owned();
    let callback_query =
        location.strip_prefix(&format!("{OAUTH_CALLBACK}?")).unwrap_or_else(|| panic!("sent to {location}")).to_owned();
    let callback = worker.url(Group::Agents, &format!("/api/mcp-servers/oauth/callback?{callback_query}"));
    let res = client().get(&callback).send().await.unwrap();
    let status = res.status().as_u16();
    let connected: Value = res.json().await.unwrap_or(Value::Null);
    assert_eq!(status, 200, "{connected} ({:?})\n{}", auth.last_refusal(), worker.log_text());
    assert_eq!((connected["connected"].as_bool(), connected["toolCount"].as_u64()), (Some(true), Some(3)));
    assert_eq!(auth.exchanges(), 1);

    // ---- Both hosts see it connected; a refresh on the Worker discovers with the token.
    let seen = mcp_server(&lambda, "crm").await;
    assert_eq!(seen["oauth"]["status"], "connected", "{seen}");
    let refreshed = refresh_mcp_server(&worker, "crm").await;
    assert_eq!(refreshed["discovery"]["reachable"], true, "{refreshed}\n{}", worker.log_text());
    assert_eq!(mcp_tool_names(&refreshed), ["crm_lookup", "crm_refund", "crm_explode"]);
    let shown = refreshed.to_string();
    assert!(auth.issued_tokens().iter().all(|t| !shown.contains(&format!("\"{t}\""))), "never a token: {shown}");

    // ---- A run on the Worker calls the tool with the token.
    let rule = json!({"toolName": "crm_lookup"});
    assert_eq!(send_json(client().post(worker.url(Group::Runs, "/api/approvals/rules")).json(&rule)).await.0, 201);
    create_agent(
        &worker,
        &json!({"name": "crm-agent", "instructions": "Answer briefly.", "toolNames": ["crm_lookup"],
            "model": {"provider": "openai", "model": "oauth-model"}}),
    )
    .await;
    oauth_tools_run(&worker, &mock, "c-1").await;
    assert_eq!((mcp.calls().len(), auth.refreshes()), (1, 0));

    // ---- Refused once on the Worker, refreshed there; Lambda uses the new access token.
    let refused = mcp.refused();
    auth.revoke_access_tokens();
    oauth_tools_run(&worker, &mock, "c-2").await;
    assert_eq!((auth.refreshes(), mcp.refused()), (1, refused + 1), "{:?}", auth.last_refusal());
    oauth_tools_run(&lambda, &mock, "c-3").await;
    assert_eq!((auth.refreshes(), mcp.refused()), (1, refused + 1), "Lambda sent the Worker's token");

    // ---- Refreshed on Lambda, with the refresh token the Worker's refresh rotated (the
    // first one is spent); the Worker then uses Lambda's access token.
    auth.revoke_access_tokens();
    oauth_tools_run(&lambda, &mock, "c-4").await;
    assert_eq!((auth.refreshes(), mcp.refused()), (2, refused + 2), "{:?}", auth.last_refusal());
    oauth_tools_run(&worker, &mock, "c-5").await;
    assert_eq!((auth.refreshes(), mcp.refused()), (2, refused + 2), "the Worker sent Lambda's token");
    assert_eq!(mcp.calls().len(), 5);

    // ---- At rest, sealed with the key both hosts share: none of the tokens issued appears.
    let db = pool().await;
    let (access, refresh): (Vec<u8>, Vec<u8>) =
        sqlx::query_as(&format!("SELECT access_token, refresh_token FROM {schema}.mcp_oauth_tokens"))
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!((access[0], refresh[0]), (0x01, 0x01), "sealed with the content protection key");
    for token in auth.issued_tokens() {
        let plain = token.as_bytes();
        assert!(!access.windows(plain.len()).any(|w| w == plain) && !refresh.windows(plain.len()).any(|w| w == plain));
    }
    assert_no_fatal_log(&worker);
}
