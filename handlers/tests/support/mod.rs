//! What the HTTP tests share: a request builder sent through the router ([`call`],
//! [`send`]), the answer ([`Reply`]), SSE frames, a clock the test moves ([`TestClock`]), a
//! tool that waits for approval ([`approval_tool`]), an audit trail that cannot be written
//! ([`Unwritable`]), a host identity layer ([`TestUsers`]) and a job transport that wakes
//! nobody ([`Manual`]).
//!
//! Each test binary includes this module (`mod support;`) and uses what it needs.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;
use tracon_core::audit::{AuditEntry, AuditFilter, AuditStore, NewAuditEntry};
use tracon_core::error::StoreError;
use tracon_core::jobs::JobTransport;
use tracon_core::names::TenantId;
use tracon_core::ports::Clock;
use tracon_core::tools::{RegistrationError, ToolOutput, ToolRegistration, tool_fn};
use tracon_handlers::PeerAddr;

/// A loopback caller (trusted without a token when remote access is off).
pub const LOOPBACK: [u8; 4] = [127, 0, 0, 1];
/// A remote caller (documentation range).
pub const REMOTE: [u8; 4] = [203, 0, 113, 9];

/// What the router answered.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("a UTF-8 body")
    }

    /// The body as JSON; a body that is not JSON (a stream's frames) as its text.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&self.body).into()))
    }

    /// The body as JSON, `null` when it is not JSON.
    pub fn json_or_null(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A request being built: from loopback unless [`Call::from`] says otherwise.
pub struct Call {
    builder: axum::http::request::Builder,
    body: Body,
    peer: Option<[u8; 4]>,
}

/// Starts a request.
pub fn call(method: Method, path: &str) -> Call {
    let builder = Request::builder().method(method).uri(path);
    Call { builder, body: Body::empty(), peer: Some(LOOPBACK) }
}

impl Call {
    /// The connection's address (`None`: a host that does not know it).
    pub fn from(mut self, ip: impl Into<Option<[u8; 4]>>) -> Self {
        self.peer = ip.into();
        self
    }

    pub fn bearer(mut self, token: &str) -> Self {
        self.builder = self.builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
        self
    }

    /// `Authorization: Bearer` when a token is given.
    pub fn bearer_opt(self, token: Option<&str>) -> Self {
        match token {
            Some(t) => self.bearer(t),
            None => self,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.builder = self.builder.header(name, value);
        self
    }

    /// The header when a value is given.
    pub fn header_opt(self, name: &str, value: Option<&str>) -> Self {
        match value {
            Some(v) => self.header(name, v),
            None => self,
        }
    }

    pub fn headers(self, headers: &[(&str, &str)]) -> Self {
        headers.iter().fold(self, |call, (name, value)| call.header(name, value))
    }

    /// A JSON body (none for `None`).
    pub fn json(mut self, body: Option<Value>) -> Self {
        if let Some(v) = body {
            self.builder = self.builder.header(header::CONTENT_TYPE, "application/json");
            self.body = Body::from(v.to_string());
        }
        self
    }

    /// A body of `content_type` as given, byte for byte.
    pub fn bytes(mut self, content_type: &str, body: impl Into<Body>) -> Self {
        self.builder = self.builder.header(header::CONTENT_TYPE, content_type);
        self.body = body.into();
        self
    }

    pub fn request(self) -> Request<Body> {
        let builder = match self.peer {
            Some(ip) => self.builder.extension(PeerAddr(SocketAddr::from((ip, 40000)))),
            None => self.builder,
        };
        builder.body(self.body).unwrap()
    }

    pub async fn send(self, app: &Router) -> Reply {
        send(app, self.request()).await
    }
}

/// Sends a request through the router.
pub async fn send(app: &Router, request: Request<Body>) -> Reply {
    let res = app.clone().oneshot(request).await.unwrap();
    let (status, headers) = (res.status(), res.headers().clone());
    let body = res.into_body().collect().await.unwrap().to_bytes().to_vec();
    Reply { status, headers, body }
}

/// The frames of an SSE body as (event, data), comments left out; data that is not JSON
/// is kept as a string.
pub fn frames(body: &str) -> Vec<(String, Value)> {
    raw_frames(body)
        .filter(|f| !f.starts_with(':'))
        .map(|f| {
            let (event, data) = event_and_data(f);
            (event, serde_json::from_str(&data).unwrap_or(Value::String(data)))
        })
        .collect()
}

/// The frames of an SSE body, every one of which must carry JSON data (no comments).
pub fn json_frames(body: &[u8]) -> Vec<(String, Value)> {
    raw_frames(&String::from_utf8_lossy(body))
        .map(|f| {
            let (event, data) = event_and_data(f);
            (event, serde_json::from_str(&data).unwrap_or_else(|e| panic!("frame data is not JSON ({e}): {f}")))
        })
        .collect()
}

fn raw_frames(body: &str) -> impl Iterator<Item = &str> {
    body.split("\n\n").filter(|f| !f.trim().is_empty())
}

fn event_and_data(frame: &str) -> (String, String) {
    let (mut event, mut data) = (String::new(), String::new());
    for line in frame.lines() {
        if let Some(e) = line.strip_prefix("event: ") {
            event = e.to_owned();
        } else if let Some(d) = line.strip_prefix("data: ") {
            data = d.to_owned();
        }
    }
    (event, data)
}

/// A clock the test moves forward: real time plus an offset, or (frozen) a fixed instant
/// plus the offset. Sleeping is real.
pub struct TestClock {
    base: Option<DateTime<Utc>>,
    offset_ms: AtomicI64,
}

impl TestClock {
    /// The wall clock, shifted by what the test advances.
    pub fn shifted() -> Self {
        Self { base: None, offset_ms: AtomicI64::new(0) }
    }

    /// Stands at `at` until the test moves it.
    pub fn frozen(at: DateTime<Utc>) -> Self {
        Self { base: Some(at), offset_ms: AtomicI64::new(0) }
    }

    /// Moves the clock `seconds` forward.
    pub fn advance(&self, seconds: i64) {
        self.offset_ms.fetch_add(seconds * 1000, Ordering::SeqCst);
    }
}

impl Default for TestClock {
    fn default() -> Self {
        Self::shifted()
    }
}

impl Clock for TestClock {
    fn now(&self) -> DateTime<Utc> {
        self.base.unwrap_or_else(Utc::now) + chrono::Duration::milliseconds(self.offset_ms.load(Ordering::SeqCst))
    }

    fn sleep(&self, duration: std::time::Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// An API key of `tenant` with `scopes` (expiring at `expires_at`), put straight into
/// `runtime`'s key store; the key itself.
pub async fn api_key(
    runtime: &tracon_core::runtime::Runtime,
    tenant: &str,
    scopes: &[tracon_core::keys::Scope],
    expires_at: Option<DateTime<Utc>>,
) -> String {
    use tracon_core::keys::ApiKeyRecord;
    let secret = tracon_core::keys::generate().unwrap();
    let tenant = tracon_core::names::TenantId::parse(tenant).unwrap();
    let name = format!("{tenant} key");
    let record = ApiKeyRecord {
        expires_at,
        ..ApiKeyRecord::issued(&secret, tenant, &name, scopes.iter().copied().collect(), Utc::now())
    };
    runtime.stores.keys.create(&record).await.unwrap();
    secret.key
}

/// A tool taking arguments of `schema` that runs only once approved, and then answers
/// `output`.
pub fn approval_tool(
    name: &str,
    description: &str,
    schema: Value,
    output: &'static str,
) -> Result<ToolRegistration, RegistrationError> {
    ToolRegistration::new(name, description, schema, tool_fn(move |_, _| async move { Ok(ToolOutput::from(output)) }))
        .map(|r| r.requires_approval(true))
}

/// A trail that cannot be written.
pub struct Unwritable;

#[async_trait::async_trait]
impl AuditStore for Unwritable {
    async fn append(&self, _: &TenantId, _: NewAuditEntry) -> Result<AuditEntry, StoreError> {
        Err(StoreError::Unavailable { detail: "audit database down".into() })
    }
    async fn list(&self, _: &TenantId, _: &AuditFilter, _: usize, _: usize) -> Result<Vec<AuditEntry>, StoreError> {
        Err(StoreError::Unavailable { detail: "audit database down".into() })
    }
    async fn chain(&self, _: &TenantId) -> Result<Vec<AuditEntry>, StoreError> {
        Err(StoreError::Unavailable { detail: "audit database down".into() })
    }
}

/// The host's identity layer, as the tests see it: the user is the `x-test-user` header.
pub struct TestUsers;

impl tracon_core::attribution::RunAttribution for TestUsers {
    fn attribute(
        &self,
        request: &tracon_core::attribution::AttributionRequest<'_>,
    ) -> Result<tracon_core::attribution::Attribution, String> {
        let user = request.headers.iter().find(|(k, _)| k == "x-test-user").map(|(_, v)| v.clone());
        Ok(tracon_core::attribution::Attribution { user_id: user, ..Default::default() })
    }
}

/// Wakes nobody: the test drains the queue itself, so it decides when a worker runs.
pub struct Manual;

#[async_trait::async_trait]
impl JobTransport for Manual {
    async fn wake(&self, _: uuid::Uuid) -> Result<(), String> {
        Ok(())
    }
}

/// A request an [`http_stub`] received: method, path, headers (lowercase names) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StubRequest {
    pub method: String,
    pub path: String,
    pub headers: std::collections::BTreeMap<String, String>,
    pub body: Vec<u8>,
}

/// An HTTP/1.1 server on 127.0.0.1 that answers every request with what `answer` says for it
/// (status, JSON body), one request per connection; its address, and every request it got.
/// For the outside world a test talks to (a provider's model list), never the internet.
pub async fn http_stub(
    answer: impl Fn(&StubRequest) -> (u16, String) + Send + Sync + 'static,
) -> (SocketAddr, std::sync::Arc<std::sync::Mutex<Vec<StubRequest>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (kept, answer) = (seen.clone(), std::sync::Arc::new(answer));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (kept, answer) = (kept.clone(), answer.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let mut line = head.lines().next().unwrap_or_default().split(' ');
                let headers: std::collections::BTreeMap<String, String> = head
                    .lines()
                    .skip(1)
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                    .collect();
                let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
                while buf.len() < head_end + length {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let request = StubRequest {
                    method: line.next().unwrap_or_default().to_owned(),
                    path: line.next().unwrap_or_default().to_owned(),
                    headers,
                    body: buf[head_end..head_end + length].to_vec(),
                };
                let (status, body) = answer(&request);
                kept.lock().unwrap().push(request);
                let response = format!(
                    "HTTP/1.1 {status} Stub\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (addr, seen)
}
