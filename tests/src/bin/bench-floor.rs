//! `bench-floor`: the floor under the benchmarks' server-CPU figures. A server built from the
//! same parts as Tracon (tokio's multi-threaded runtime, axum on hyper, reqwest, serde_json,
//! sqlx) that does only what any recorded run must do and nothing of Tracon's own: no
//! agent, no auth, no limits, no recorder, no drain, no background work.
//!
//! It starts the way `tracon` does (`serve --listen ADDR`, the OpenAI provider's
//! `Tracon__Providers__OpenAI__Endpoint`, `DATABASE_URL` and
//! `Tracon__PostgreSql__SchemaName`), so every latency bench takes it as `--tracon`:
//!
//! ```text
//! target/release/bench-run --tracon target/release/bench-floor
//! target/release/bench-postgres --tracon target/release/bench-floor --database-url "$(scripts/bench-postgres.sh url)"
//! target/release/bench-openai --tracon target/release/bench-floor [--database-url …]
//! ```
//!
//! What each request does:
//!
//! - `POST /api/agents/{name}/run`: parses `{"message"}`, calls the model streamed (with
//!   usage), parses each chunk, and writes the same SSE frames a Tracon run writes (`run`,
//!   one `update` per text delta, `done` with the text and usage);
//! - `POST /v1/chat/completions`: a whole request calls the model whole and answers its
//!   completion re-serialized; a streamed one relays each chunk, parsed and re-serialized;
//! - with a database: the run row is inserted while the model call is in flight (the first
//!   frame waits for it), and one statement at the end writes the events and the ending
//!   before the last frame — Tracon's two statements per run, on a pool of plain sqlx
//!   connections that are handed out without a ping.
//!
//! The difference between Tracon's CPU per run and this server's is what Tracon itself
//! costs; this server's is what the parts cost on the machine.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Connections in the database pool (Tracon's benches set `MaxConnections` to 16).
const POOL_SIZE: usize = 16;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let mut listen: SocketAddr = "127.0.0.1:5081".parse()?;
    while let Some(a) = args.next() {
        if a == "--listen" {
            listen = args.next().ok_or("--listen needs an address")?.parse()?;
        }
    }
    let endpoint = std::env::var("Tracon__Providers__OpenAI__Endpoint")
        .map_err(|_| "set Tracon__Providers__OpenAI__Endpoint to the model's base URL")?;
    let db = match std::env::var("DATABASE_URL") {
        Ok(url) => {
            let schema = std::env::var("Tracon__PostgreSql__SchemaName").unwrap_or_else(|_| "bench_floor".to_owned());
            Some(Db::open(&url, &schema).await?)
        }
        Err(_) => None,
    };
    let state = Arc::new(Floor {
        http: reqwest::Client::builder().tcp_nodelay(true).build()?,
        completions: format!("{}/chat/completions", endpoint.trim_end_matches('/')),
        model: std::env::var("Tracon__Providers__OpenAI__DefaultModel").unwrap_or_else(|_| "bench".to_owned()),
        db,
    });
    let app = Router::new()
        .route("/api/meta", get(|| async { axum::Json(json!({"name": "bench-floor"})) }))
        .route("/api/agents/{name}/run", post(run))
        .route("/v1/chat/completions", post(chat))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    // As Tracon does: without TCP_NODELAY each small SSE write waits for a delayed ACK.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

struct Floor {
    http: reqwest::Client,
    completions: String,
    model: String,
    db: Option<Db>,
}

fn bad(status: StatusCode, why: &str) -> Response {
    (status, axum::Json(json!({"error": why}))).into_response()
}

/// `POST /api/agents/{name}/run`: one streamed model call relayed as a run's SSE frames.
async fn run(State(floor): State<Arc<Floor>>, Path(name): Path<String>, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return bad(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    let Some(message) = request.get("message").and_then(Value::as_str) else {
        return bad(StatusCode::BAD_REQUEST, "message is required");
    };
    let id = uuid::Uuid::now_v7();
    let upstream = json!({
        "model": floor.model,
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": "You are a helpful support agent."},
            {"role": "user", "content": message},
        ],
    });
    let call = floor.http.post(&floor.completions).json(&upstream).send();
    let started = chrono::Utc::now();
    let (sent, written) = tokio::join!(call, async {
        match &floor.db {
            Some(db) => db.insert_run(id, &name, message).await,
            None => Ok(()),
        }
    });
    if written.is_err() {
        return bad(StatusCode::SERVICE_UNAVAILABLE, "the store is unavailable");
    }
    let upstream = match sent {
        Ok(r) if r.status().is_success() => r,
        _ => return bad(StatusCode::BAD_GATEWAY, "the model call failed"),
    };
    let first =
        frame("run", &json!({"runId": id, "agentName": name, "agentVersion": null, "startedAt": started.to_rfc3339()}));
    let relay = Relay { lines: Lines::default(), text: String::new(), usage: Value::Null, events: Vec::new() };
    let chunks = upstream.bytes_stream();
    let stream = futures::stream::once(async move { Ok::<_, Infallible>(first) }).chain(futures::stream::unfold(
        Some((chunks, relay, floor, id)),
        |state| async move {
            let (mut chunks, mut relay, floor, id) = state?;
            loop {
                if let Some(line) = relay.lines.next_data() {
                    if line == "[DONE]" {
                        continue;
                    }
                    if let Some(out) = relay.chunk(&line) {
                        return Some((Ok(out), Some((chunks, relay, floor, id))));
                    }
                    continue;
                }
                match chunks.next().await {
                    Some(Ok(bytes)) => relay.lines.push(&bytes),
                    _ => break,
                }
            }
            let done = json!({
                "runId": id, "status": "Completed", "text": relay.text, "usage": relay.usage,
                "cost": null, "finishReason": "stop",
            });
            if let Some(db) = &floor.db {
                relay.events.push(done.clone());
                if db.end_run(id, &relay.events, &done).await.is_err() {
                    return Some((Ok(frame("error", &json!({"error": "store unavailable"}))), None));
                }
            }
            Some((Ok(frame("done", &done)), None))
        },
    ));
    sse(stream)
}

/// A streamed answer's state: the upstream's unread lines, the text so far, the usage, and
/// (with a database) the events to record.
struct Relay {
    lines: Lines,
    text: String,
    usage: Value,
    events: Vec<Value>,
}

impl Relay {
    /// One upstream chunk: the `update` frame of its text delta, if it has one.
    fn chunk(&mut self, data: &str) -> Option<Bytes> {
        let chunk: Value = serde_json::from_str(data).ok()?;
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = json!({
                "inputTokens": usage["prompt_tokens"], "outputTokens": usage["completion_tokens"],
                "totalTokens": usage["total_tokens"],
            });
        }
        let text = chunk.pointer("/choices/0/delta/content").and_then(Value::as_str).filter(|t| !t.is_empty())?;
        self.text.push_str(text);
        let update = json!({"kind": "text", "text": text});
        let out = frame("update", &update);
        self.events.push(update);
        Some(out)
    }
}

/// The `data:` lines of an SSE body, across chunk boundaries.
#[derive(Default)]
struct Lines {
    pending: Vec<u8>,
    ready: VecDeque<String>,
}

impl Lines {
    fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            if let Some(data) = line.trim_end().strip_prefix("data:") {
                self.ready.push_back(data.trim_start().to_owned());
            }
        }
    }

    fn next_data(&mut self) -> Option<String> {
        self.ready.pop_front()
    }
}

fn frame(event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

fn sse(stream: impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// `POST /v1/chat/completions`: whole asks whole and answers the completion; streamed relays.
async fn chat(State(floor): State<Arc<Floor>>, body: Bytes) -> Response {
    let Ok(mut request) = serde_json::from_slice::<Value>(&body) else {
        return bad(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    let Some(messages) = request.get_mut("messages").map(Value::take) else {
        return bad(StatusCode::BAD_REQUEST, "messages is required");
    };
    let name = request.get("model").and_then(Value::as_str).unwrap_or("agent").to_owned();
    let streamed = request.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let id = uuid::Uuid::now_v7();
    let mut upstream = json!({"model": floor.model, "messages": messages, "stream": streamed});
    if streamed {
        upstream["stream_options"] = json!({"include_usage": true});
    }
    let call = floor.http.post(&floor.completions).json(&upstream).send();
    let (sent, written) = tokio::join!(call, async {
        match &floor.db {
            Some(db) => db.insert_run(id, &name, "").await,
            None => Ok(()),
        }
    });
    if written.is_err() {
        return bad(StatusCode::SERVICE_UNAVAILABLE, "the store is unavailable");
    }
    let Ok(answer) = sent else {
        return bad(StatusCode::BAD_GATEWAY, "the model call failed");
    };
    if !streamed {
        let Ok(mut completion) = answer.json::<Value>().await else {
            return bad(StatusCode::BAD_GATEWAY, "the model's answer is not JSON");
        };
        completion["model"] = json!(name);
        if let Some(db) = &floor.db {
            let text = completion.pointer("/choices/0/message/content").cloned().unwrap_or(Value::Null);
            let events = [json!({"kind": "text", "text": text})];
            if db.end_run(id, &events, &completion).await.is_err() {
                return bad(StatusCode::SERVICE_UNAVAILABLE, "the store is unavailable");
            }
        }
        return axum::Json(completion).into_response();
    }
    let chunks = answer.bytes_stream();
    let stream =
        futures::stream::unfold(Some((chunks, Lines::default(), Vec::new(), floor, id, name)), |state| async move {
            let (mut chunks, mut lines, mut events, floor, id, name) = state?;
            loop {
                if let Some(line) = lines.next_data() {
                    if line == "[DONE]" {
                        continue;
                    }
                    let Ok(mut chunk) = serde_json::from_str::<Value>(&line) else { continue };
                    chunk["model"] = json!(name);
                    if let Some(t) =
                        chunk.pointer("/choices/0/delta/content").filter(|t| t.as_str().is_some_and(|t| !t.is_empty()))
                    {
                        events.push(json!({"kind": "text", "text": t}));
                    }
                    let out = Bytes::from(format!("data: {chunk}\n\n"));
                    return Some((Ok::<_, Infallible>(out), Some((chunks, lines, events, floor, id, name))));
                }
                match chunks.next().await {
                    Some(Ok(bytes)) => lines.push(&bytes),
                    _ => break,
                }
            }
            if let Some(db) = &floor.db
                && db.end_run(id, &events, &json!({"status": "Completed"})).await.is_err()
            {
                return Some((Ok(Bytes::from_static(b"data: {\"error\":\"store unavailable\"}\n\n")), None));
            }
            Some((Ok(Bytes::from_static(b"data: [DONE]\n\n")), None))
        });
    sse(stream)
}

/// The database: a fixed set of plain sqlx connections (no ping on check-out or return) and
/// the two statements of a run.
struct Db {
    idle: Arc<Mutex<Vec<PgConnection>>>,
    permits: Arc<Semaphore>,
    insert: String,
    end: String,
}

struct Checkout {
    conn: Option<PgConnection>,
    idle: Arc<Mutex<Vec<PgConnection>>>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if let (Some(c), Ok(mut idle)) = (self.conn.take(), self.idle.lock()) {
            idle.push(c);
        }
    }
}

impl Db {
    async fn open(url: &str, schema: &str) -> Result<Db, BoxError> {
        if !schema.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err("the schema name must be letters, digits and underscores".into());
        }
        let mut setup = PgConnection::connect(url).await?;
        for statement in [
            format!("CREATE SCHEMA IF NOT EXISTS {schema}"),
            format!(
                "CREATE TABLE IF NOT EXISTS {schema}.runs (id uuid PRIMARY KEY, agent text NOT NULL, input text NOT NULL, \
                 status text NOT NULL, started_at timestamptz NOT NULL DEFAULT now(), ended_at timestamptz, result jsonb)"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {schema}.run_events (run_id uuid NOT NULL, seq int NOT NULL, payload jsonb NOT NULL, \
                 PRIMARY KEY (run_id, seq))"
            ),
        ] {
            sqlx::query(&statement).execute(&mut setup).await?;
        }
        setup.close().await?;
        let mut idle = Vec::with_capacity(POOL_SIZE);
        for _ in 0..POOL_SIZE {
            idle.push(PgConnection::connect(url).await?);
        }
        Ok(Db {
            idle: Arc::new(Mutex::new(idle)),
            permits: Arc::new(Semaphore::new(POOL_SIZE)),
            insert: format!("INSERT INTO {schema}.runs (id, agent, input, status) VALUES ($1, $2, $3, 'Running')"),
            end: format!(
                "WITH e AS (INSERT INTO {schema}.run_events (run_id, seq, payload) \
                 SELECT $1, (n - 1)::int, p FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS x(p, n)) \
                 UPDATE {schema}.runs SET status = 'Completed', ended_at = now(), result = $3 WHERE id = $1"
            ),
        })
    }

    async fn checkout(&self) -> Result<Checkout, BoxError> {
        let permit = self.permits.clone().acquire_owned().await?;
        let conn = self.idle.lock().map_err(|_| "pool poisoned")?.pop().ok_or("no idle connection")?;
        Ok(Checkout { conn: Some(conn), idle: self.idle.clone(), _permit: permit })
    }

    async fn insert_run(&self, id: uuid::Uuid, agent: &str, input: &str) -> Result<(), BoxError> {
        let mut c = self.checkout().await?;
        let conn = c.conn.as_mut().ok_or("no connection")?;
        sqlx::query(&self.insert).bind(id).bind(agent).bind(input).execute(conn).await?;
        Ok(())
    }

    async fn end_run(&self, id: uuid::Uuid, events: &[Value], result: &Value) -> Result<(), BoxError> {
        let mut c = self.checkout().await?;
        let conn = c.conn.as_mut().ok_or("no connection")?;
        sqlx::query(&self.end)
            .bind(id)
            .bind(sqlx::types::Json(events))
            .bind(sqlx::types::Json(result))
            .execute(conn)
            .await?;
        Ok(())
    }
}
