//! A mock model server speaking the OpenAI Chat Completions, OpenAI Responses, Anthropic
//! Messages, Gemini (`generateContent`) and Azure OpenAI wire formats the way the real
//! services do, answering from scripts.
//!
//! Start one with [`MockServer::start`]; point an OpenAI-style provider (either surface) at
//! `{base_url}/v1`, and an Anthropic, Google or Azure OpenAI provider at `{base_url}`.
//! Responses are chosen by the model — the body's `model`, Gemini's model in the path,
//! Azure's deployment in the path: a script is a list of [`MockTurn`]s, and the turn that
//! answers is the number of the model's turns already in the request (assistant messages;
//! Gemini's `model` contents; in a Responses `input`, each run of assistant message and
//! `function_call` items), so concurrent conversations sharing
//! one script each walk it from the start (past the end the last turn repeats). A script set
//! with [`MockSelect::ByRequest`] ([`MockServer::script_in_order`]) is answered by request
//! count instead: the N-th request to the model since the script was set gets turn N (from
//! 0; past the end the last turn repeats), for callers that send one fresh user message each
//! time, such as a workflow's manager. A model with no script answers [`DEFAULT_TEXT`].
//!
//! Routes:
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/chat/completions` | OpenAI Chat Completions, streamed or whole |
//! | `POST /v1/messages` | Anthropic Messages, streamed or whole; needs `x-api-key` and `anthropic-version` |
//! | `POST /v1/responses` | OpenAI Responses, streamed (named `response.*` events) or whole |
//! | `POST /v1beta/models/{model}:streamGenerateContent` | Gemini, SSE with CRLF line ends under `alt=sse` (one JSON array without); needs `x-goog-api-key` (or `?key=`); a refused key is `400 API_KEY_INVALID`, as Google answers |
//! | `POST /v1beta/models/{model}:generateContent` | Gemini, whole |
//! | `POST /openai/deployments/{deployment}/chat/completions` | Azure OpenAI, streamed (after a prompt-filter chunk) or whole; needs `api-key` and `?api-version=`; [`MockFinish::PromptFiltered`] is Azure's `400 content_filter` |
//! | `POST /_mock/scripts/{model}` | body `{"turns": [MockTurn, …], "select"?: "byAssistantMessages" \| "byRequest"}` replaces the model's script (and restarts its request count) |
//! | `DELETE /_mock/scripts/{model}` | removes it |
//! | `GET /_mock/requests/{model}` | the recorded requests, oldest first ([`MockServer::requests`]) |
//! | `DELETE /_mock/requests/{model}` | forgets them |
//! | `PUT /_mock/chaos` | body [`MockChaos`]: a share of requests fails (429, 500, a broken stream, a stall); `DELETE` turns it off, `GET` reports ([`ChaosReport`]) |
//! | `POST /_mock/release/{model}` | streams of the model held by `hangAfterChunks` go on to the end ([`MockServer::release`]) |
//! | `GET /_mock/health` | 200 |
//!
//! The server stops when the [`MockServer`] is dropped: requests held open by `hang` or
//! `hangAfterChunks` are released then.

mod anthropic;
mod azure;
mod chaos;
mod google;
mod openai;
mod responses;
mod script;

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures::{StreamExt, stream};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use chaos::{ChaosReport, Fault, MockChaos};
pub use script::{DEFAULT_INPUT_TOKENS, DEFAULT_TEXT, MockFinish, MockSelect, MockToolCall, MockTurn, MockUsage};

/// Server-wide timing, for benchmarks. A turn's own `delayMs` / `chunkDelayMs` win.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MockConfig {
    /// Wait before sending response headers.
    pub latency_ms: u64,
    /// Wait between streamed chunks.
    pub chunk_delay_ms: u64,
}

/// A running mock model server. Dropping it stops the server.
pub struct MockServer {
    addr: SocketAddr,
    state: Arc<Shared>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl MockServer {
    /// Starts a server on `127.0.0.1` at a free port.
    pub async fn start(config: MockConfig) -> io::Result<MockServer> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), config).await
    }

    /// Starts a server on `addr` (port 0 picks a free one).
    pub async fn start_on(addr: SocketAddr, config: MockConfig) -> io::Result<MockServer> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Shared {
            config,
            scripts: Mutex::default(),
            requests: Mutex::default(),
            shutdown: CancellationToken::new(),
            releases: Mutex::default(),
            ids: AtomicU64::new(0),
            chaos: Mutex::default(),
        });
        let signal = state.shutdown.clone().cancelled_owned();
        let app = router(state.clone());
        // Small streamed frames must leave at once, not wait for the peer's delayed ACK.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(signal).await });
        Ok(MockServer { addr, state, task: Some(task) })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`: the Anthropic, Google and Azure OpenAI base URL. The OpenAI
    /// one (both surfaces) is this plus `/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Replaces the script of `model`: the turn that answers is the number of assistant
    /// messages already in the request ([`MockSelect::ByAssistantMessages`]).
    pub fn script(&self, model: &str, turns: Vec<MockTurn>) {
        self.script_with(model, turns, MockSelect::ByAssistantMessages);
    }

    /// Replaces the script of `model`, answered by request count
    /// ([`MockSelect::ByRequest`]): the N-th request to `model` from now on gets turn N (from
    /// 0), whatever the request holds; past the end the last turn repeats.
    pub fn script_in_order(&self, model: &str, turns: Vec<MockTurn>) {
        self.script_with(model, turns, MockSelect::ByRequest);
    }

    /// Replaces the script of `model`, its turns picked as `select` says; the request count
    /// starts again from 0.
    pub fn script_with(&self, model: &str, turns: Vec<MockTurn>, select: MockSelect) {
        lock(&self.state.scripts).insert(model.to_owned(), script::Script::new(turns, select));
    }

    /// Removes the script of `model`; it answers the default turn again.
    pub fn clear_script(&self, model: &str) {
        lock(&self.state.scripts).remove(model);
    }

    /// The requests received for `model`, oldest first. Each is `{"path", "query", "body",
    /// "hasAuthorization", "hasApiKey", "hasGoogleApiKey", "hasAzureApiKey"}`: the path and
    /// query string (so a test can see a credential never travels in the URL), the request
    /// body as JSON (a string when it was not JSON) and whether an `authorization` /
    /// `x-api-key` / `x-goog-api-key` / `api-key` header was present. Header values are never
    /// recorded.
    pub fn requests(&self, model: &str) -> Vec<Value> {
        lock(&self.state.requests).get(model).cloned().unwrap_or_default()
    }

    /// Lets the streams of `model` held by `hangAfterChunks` go on to their end, now and
    /// from then on (a stream that reaches its hang point after this does not stall). A
    /// test uses it to see frames arrive while the model is still mid-answer, then finish.
    /// Sets the injected faults ([`MockChaos`]); `None` turns them off. The report restarts.
    pub fn chaos(&self, setting: Option<MockChaos>) {
        lock(&self.state.chaos).set(setting);
    }

    /// What the injected faults did so far.
    pub fn chaos_report(&self) -> ChaosReport {
        lock(&self.state.chaos).report()
    }

    pub fn release(&self, model: &str) {
        self.state.release_token(model).cancel();
    }

    /// Stops the server and waits until it has stopped.
    pub async fn shutdown(mut self) {
        self.state.shutdown.cancel();
        if let Some(task) = self.task.take() {
            // The server's own result carries nothing actionable once it is stopping.
            let _ = task.await;
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.state.shutdown.cancel();
    }
}

struct Shared {
    config: MockConfig,
    scripts: Mutex<HashMap<String, script::Script>>,
    requests: Mutex<HashMap<String, Vec<Value>>>,
    /// Cancelled on shutdown: stops the listener and releases held-open requests.
    shutdown: CancellationToken,
    /// Per model, cancelled by a release: streams held by `hangAfterChunks` go on.
    releases: Mutex<HashMap<String, CancellationToken>>,
    ids: AtomicU64,
    /// Injected faults ([`MockChaos`]).
    chaos: Mutex<chaos::Chaos>,
}

impl Shared {
    fn release_token(&self, model: &str) -> CancellationToken {
        lock(&self.releases).entry(model.to_owned()).or_default().clone()
    }

    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Sleeps `ms`; false when the server shut down meanwhile.
    async fn sleep(&self, ms: u64) -> bool {
        if ms == 0 {
            return true;
        }
        self.shutdown.run_until_cancelled(tokio::time::sleep(Duration::from_millis(ms))).await.is_some()
    }
}

/// A mock never fails a test by panicking on a poisoned lock; the data stays usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn router(state: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/messages", post(messages))
        .route("/v1/responses", post(responses_api))
        .route("/v1beta/models/{model_action}", post(generate_content))
        .route("/openai/deployments/{deployment}/chat/completions", post(azure_chat_completions))
        .route("/_mock/health", get(|| async { axum::Json(json!({"status": "ok"})) }))
        .route("/_mock/scripts/{*model}", post(put_script).delete(delete_script))
        .route("/_mock/requests/{*model}", get(get_requests).delete(delete_requests))
        .route("/_mock/chaos", get(get_chaos).put(put_chaos).delete(delete_chaos))
        .route(
            "/_mock/release/{*model}",
            post(|State(state): State<Arc<Shared>>, Path(model): Path<String>| async move {
                state.release_token(&model).cancel();
                StatusCode::NO_CONTENT
            }),
        )
        .fallback(|| async { (StatusCode::NOT_FOUND, axum::Json(openai::error_body(404))) })
        .with_state(state)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptBody {
    turns: Vec<MockTurn>,
    #[serde(default)]
    select: MockSelect,
}

async fn put_script(State(state): State<Arc<Shared>>, Path(model): Path<String>, body: Bytes) -> Response {
    match serde_json::from_slice::<ScriptBody>(&body) {
        Ok(script) => {
            let turns = script.turns.len();
            lock(&state.scripts).insert(model.clone(), script::Script::new(script.turns, script.select));
            axum::Json(json!({"model": model, "turns": turns, "select": script.select})).into_response()
        }
        Err(e) => {
            (StatusCode::BAD_REQUEST, axum::Json(json!({"error": format!("invalid script: {e}")}))).into_response()
        }
    }
}

async fn put_chaos(State(state): State<Arc<Shared>>, body: Bytes) -> Response {
    match serde_json::from_slice::<MockChaos>(&body) {
        Ok(setting) if (0.0..=1.0).contains(&setting.rate) => {
            lock(&state.chaos).set(Some(setting));
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(_) => (StatusCode::BAD_REQUEST, axum::Json(json!({"error": "rate is between 0 and 1"}))).into_response(),
        Err(e) => {
            (StatusCode::BAD_REQUEST, axum::Json(json!({"error": format!("invalid chaos: {e}")}))).into_response()
        }
    }
}

async fn get_chaos(State(state): State<Arc<Shared>>) -> axum::Json<ChaosReport> {
    axum::Json(lock(&state.chaos).report())
}

async fn delete_chaos(State(state): State<Arc<Shared>>) -> StatusCode {
    lock(&state.chaos).set(None);
    StatusCode::NO_CONTENT
}

async fn delete_script(State(state): State<Arc<Shared>>, Path(model): Path<String>) -> StatusCode {
    lock(&state.scripts).remove(&model);
    StatusCode::NO_CONTENT
}

async fn get_requests(State(state): State<Arc<Shared>>, Path(model): Path<String>) -> axum::Json<Value> {
    axum::Json(Value::Array(lock(&state.requests).get(&model).cloned().unwrap_or_default()))
}

async fn delete_requests(State(state): State<Arc<Shared>>, Path(model): Path<String>) -> StatusCode {
    lock(&state.requests).remove(&model);
    StatusCode::NO_CONTENT
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    OpenAi,
    Anthropic,
    Responses,
    Google,
    Azure,
}

impl Format {
    fn error(self, status: u16) -> Response {
        let body = match self {
            Self::OpenAi | Self::Responses => openai::error_body(status),
            Self::Anthropic => anthropic::error_body(status),
            Self::Google => google::error_body(status),
            Self::Azure => azure::error_body(status),
        };
        json_response(status, body)
    }

    /// As the real services do, the refused key is quoted back in the error text (the way a
    /// provider's answer can carry a secret towards a caller). Google answers a wrong key
    /// with `400 API_KEY_INVALID`.
    fn refused_key(self, key: &str) -> Response {
        let mut body = match self {
            Self::OpenAi | Self::Responses => openai::error_body(401),
            Self::Anthropic => anthropic::error_body(401),
            Self::Google => return json_response(400, google::refused_key(key)),
            Self::Azure => return json_response(401, azure::refused_key(key)),
        };
        body["error"]["message"] = Value::String(format!("Incorrect API key provided: {key} (mock)."));
        json_response(401, body)
    }

    /// What the format refuses before it reads the request: a missing credential header,
    /// Azure's missing `api-version`.
    fn refusal(self, headers: &HeaderMap, query: &HashMap<String, String>) -> Option<Response> {
        match self {
            Self::OpenAi | Self::Responses => None,
            Self::Anthropic => {
                ["x-api-key", "anthropic-version"].into_iter().find(|h| !headers.contains_key(*h)).map(|missing| {
                    json_response(401, anthropic::error_with(401, &format!("{missing} header is required")))
                })
            }
            // The real API also takes `?key=`; the mock records the query, so a test can see
            // that a provider never puts the key there.
            Self::Google => {
                (!headers.contains_key("x-goog-api-key") && !query.contains_key("key")).then(|| self.error(403))
            }
            Self::Azure => {
                if !headers.contains_key("api-key") && !headers.contains_key(header::AUTHORIZATION) {
                    Some(self.error(401))
                } else if !query.contains_key("api-version") {
                    Some(json_response(404, json!({"error": {"code": "404", "message": "Resource not found"}})))
                } else {
                    None
                }
            }
        }
    }
}

/// The credential a caller presented: `Authorization: Bearer …`, `x-api-key`,
/// `x-goog-api-key` or Azure's `api-key`.
fn presented_key(headers: &HeaderMap) -> &str {
    let bearer =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    bearer
        .or_else(|| header("x-api-key"))
        .or_else(|| header("x-goog-api-key"))
        .or_else(|| header("api-key"))
        .unwrap_or_default()
}

fn json_response(status: u16, body: Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(body)).into_response()
}

/// One request to a model route, as the route read it.
struct Call {
    format: Format,
    /// From the path (Google's model, Azure's deployment); otherwise the body's `model`.
    model: Option<String>,
    /// From the path (Google's action); otherwise the body's `stream`.
    streamed: Option<bool>,
    uri: Uri,
    headers: HeaderMap,
}

async fn chat_completions(State(state): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    answer(state, Call { format: Format::OpenAi, model: None, streamed: None, uri, headers }, body).await
}

async fn messages(State(state): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    answer(state, Call { format: Format::Anthropic, model: None, streamed: None, uri, headers }, body).await
}

async fn responses_api(State(state): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    answer(state, Call { format: Format::Responses, model: None, streamed: None, uri, headers }, body).await
}

/// `POST /v1beta/models/{model}:{action}`: `streamGenerateContent` streams, `generateContent`
/// answers whole.
async fn generate_content(
    State(state): State<Arc<Shared>>,
    Path(model_action): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let streamed = match model_action.rsplit_once(':') {
        Some((model, "streamGenerateContent")) => Some((model, true)),
        Some((model, "generateContent")) => Some((model, false)),
        _ => None,
    };
    let Some((model, streamed)) = streamed else { return Format::Google.error(404) };
    let call = Call { format: Format::Google, model: Some(model.to_owned()), streamed: Some(streamed), uri, headers };
    answer(state, call, body).await
}

async fn azure_chat_completions(
    State(state): State<Arc<Shared>>,
    Path(deployment): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(state, Call { format: Format::Azure, model: Some(deployment), streamed: None, uri, headers }, body).await
}

fn query_of(uri: &Uri) -> HashMap<String, String> {
    uri.query()
        .map(|q| {
            q.split('&')
                .filter_map(|pair| {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    (!k.is_empty()).then(|| (k.to_owned(), v.to_owned()))
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn answer(state: Arc<Shared>, call: Call, raw: Bytes) -> Response {
    let Call { format, model, streamed, uri, headers } = call;
    let parsed = serde_json::from_slice::<Value>(&raw).ok();
    let model = model.unwrap_or_else(|| {
        parsed.as_ref().and_then(|b| b.get("model")).and_then(Value::as_str).unwrap_or_default().to_owned()
    });
    let query = query_of(&uri);
    let recorded = json!({
        "path": uri.path(),
        "query": uri.query(),
        "body": parsed.clone().unwrap_or_else(|| Value::String(String::from_utf8_lossy(&raw).into_owned())),
        "hasAuthorization": headers.contains_key(header::AUTHORIZATION),
        "hasApiKey": headers.contains_key("x-api-key"),
        "hasGoogleApiKey": headers.contains_key("x-goog-api-key"),
        "hasAzureApiKey": headers.contains_key("api-key"),
    });
    lock(&state.requests).entry(model.clone()).or_default().push(recorded);

    let Some(body) = parsed.filter(Value::is_object) else {
        return format.error(400);
    };
    if let Some(refused) = format.refusal(&headers, &query) {
        return refused;
    }

    let fault = lock(&state.chaos).draw(&model);
    if let Some((fault, retry_after)) = fault {
        return faulted(&state, format, fault, retry_after).await;
    }

    let (turn, earlier_calls) = match lock(&state.scripts).get_mut(&model) {
        Some(script) => script.answer(&body),
        None => script::select(&[], 0),
    };
    if !state.sleep(turn.delay_ms.unwrap_or(state.config.latency_ms)).await {
        return format.error(503);
    }
    if let Some(status) = turn.status {
        if status == 401 {
            return format.refused_key(presented_key(&headers));
        }
        return format.error(status);
    }
    if turn.hang {
        state.shutdown.cancelled().await;
        return format.error(503);
    }

    let resolved = script::ResolvedTurn::new(&turn, earlier_calls);
    if format == Format::Azure && resolved.finish == MockFinish::PromptFiltered {
        return json_response(400, azure::prompt_filtered());
    }
    let n = state.next_id();
    let streamed = streamed.unwrap_or_else(|| body.get("stream").and_then(Value::as_bool).unwrap_or(false));
    let (chat_id, response_id) = (format!("chatcmpl-mock{n:06}"), format!("resp_mock{n:06}"));
    if !streamed {
        let whole = match format {
            Format::OpenAi => openai::completion(&resolved, &model, &chat_id, unix_now()),
            Format::Anthropic => anthropic::message(&resolved, &model, &format!("msg_mock{n:06}")),
            Format::Responses => responses::whole(&resolved, &model, &response_id, unix_now()),
            Format::Google => google::whole(&resolved, &model, &format!("mock{n:06}")),
            Format::Azure => azure::completion(&resolved, &model, &chat_id, unix_now()),
        };
        if resolved.hang_after_chunks.is_some() {
            // Headers go out, the body never does.
            return stalled_body(state.shutdown.clone(), "application/json");
        }
        return axum::Json(whole).into_response();
    }
    if format == Format::Google && query.get("alt").map(String::as_str) != Some("sse") {
        // Without `alt=sse` Gemini streams one JSON array of chunks.
        let chunks: Vec<Value> =
            google::stream_chunks(&resolved, &model, &format!("mock{n:06}")).into_iter().map(|(c, _)| c).collect();
        return axum::Json(Value::Array(chunks)).into_response();
    }
    let include_usage = body.pointer("/stream_options/include_usage").and_then(Value::as_bool) == Some(true);
    let frames = match format {
        Format::OpenAi => openai::stream_frames(&resolved, &model, &chat_id, unix_now(), include_usage),
        Format::Anthropic => anthropic::stream_frames(&resolved, &model, &format!("msg_mock{n:06}")),
        Format::Responses => responses::stream_frames(&resolved, &model, &response_id, unix_now()),
        Format::Google => google::stream_frames(&resolved, &model, &format!("mock{n:06}")),
        Format::Azure => azure::stream_frames(&resolved, &model, &chat_id, unix_now(), include_usage),
    };
    let chunk_delay = Duration::from_millis(turn.chunk_delay_ms.unwrap_or(state.config.chunk_delay_ms));
    let hold = resolved.hang_after_chunks.map(|n| (n, state.release_token(&model)));
    event_stream(frames, chunk_delay, hold, state.shutdown.clone())
}

/// The answer of a request [`MockChaos`] picked for `fault`.
async fn faulted(state: &Shared, format: Format, fault: Fault, retry_after: Option<u64>) -> Response {
    match fault {
        Fault::RateLimited => {
            let mut response = format.error(429);
            if let Some(seconds) = retry_after {
                response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
            }
            response
        }
        Fault::ServerError => format.error(500),
        Fault::Reset => {
            let broken = stream::once(async {
                Err::<Bytes, _>(io::Error::new(io::ErrorKind::ConnectionReset, "the mock broke the connection"))
            });
            Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
                .body(Body::from_stream(broken))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
        Fault::Stall => {
            state.shutdown.cancelled().await;
            format.error(503)
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

/// One SSE frame as it goes on the wire.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    bytes: Bytes,
    /// Carries content (a text piece or a tool-call part); `hangAfterChunks` counts these.
    content: bool,
}

impl Frame {
    /// `data: {json}` (OpenAI style, unnamed event).
    fn data(payload: &Value) -> Self {
        Self::raw_data(&payload.to_string())
    }

    fn raw_data(payload: &str) -> Self {
        Self { bytes: Bytes::from(format!("data: {payload}\n\n")), content: false }
    }

    /// `data: {json}` with CRLF line ends (Google style).
    fn crlf_data(payload: &Value) -> Self {
        Self { bytes: Bytes::from(format!("data: {payload}\r\n\r\n")), content: false }
    }

    /// `event: name` + `data: {json}` (Anthropic and Responses style, named event).
    fn event(name: &str, payload: &Value) -> Self {
        Self { bytes: Bytes::from(format!("event: {name}\ndata: {payload}\n\n")), content: false }
    }

    fn content(mut self) -> Self {
        self.content = true;
        self
    }
}

/// Streams `frames` with `delay` between them. With `hold = Some((n, release))` it stalls,
/// without closing, before the content frame that would exceed `n`, until `release` is
/// cancelled (then it goes on) or the server shuts down (then it ends there).
fn event_stream(
    frames: Vec<Frame>,
    delay: Duration,
    hold: Option<(usize, CancellationToken)>,
    shutdown: CancellationToken,
) -> Response {
    let body = stream::unfold((frames.into_iter(), 0usize, true), move |(mut frames, sent, first)| {
        let (shutdown, hold) = (shutdown.clone(), hold.clone());
        async move {
            let frame = frames.next()?;
            if let Some((n, release)) = hold
                && frame.content
                && sent >= n
            {
                tokio::select! {
                    () = shutdown.cancelled() => return None,
                    () = release.cancelled() => {}
                }
            }
            if !first && !delay.is_zero() {
                shutdown.run_until_cancelled(tokio::time::sleep(delay)).await?;
            }
            let sent = sent + usize::from(frame.content);
            Some((Ok::<_, Infallible>(frame.bytes), (frames, sent, false)))
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Response headers now, a body that never comes (until shutdown).
fn stalled_body(shutdown: CancellationToken, content_type: &'static str) -> Response {
    let body = stream::once(async move {
        shutdown.cancelled_owned().await;
        Ok::<_, Infallible>(Bytes::new())
    })
    .boxed();
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
