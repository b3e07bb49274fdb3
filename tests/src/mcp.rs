//! A real MCP server for end-to-end tests: the official Rust SDK's server side (`rmcp`) over
//! Streamable HTTP on 127.0.0.1, the kind of server a tenant registers. It offers a CRM:
//! `lookup` (read-only), `refund` (destructive) and `explode` (always an error whose text must
//! never reach a run's record), one resource (`file:///policy.md`) and one prompt. Every tool
//! call it gets is kept, with its arguments, so a test sees what the server was asked.
//!
//! [`McpTestServer::start_protected`] puts it behind OAuth: a request without a bearer token
//! the guard accepts is answered `401` with `WWW-Authenticate: Bearer resource_metadata=…`,
//! and the RFC 9728 metadata at `/.well-known/oauth-protected-resource/mcp` names the
//! authorization server.
//!
//! [`McpTestServer::stop`] takes it away (the port refuses connections) and
//! [`McpTestServer::restart`] brings it back on the same port.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, Implementation,
    ListPromptsResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams, Prompt, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource, ResourceContents,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The text of `file:///policy.md`.
pub const POLICY: &str = "Refunds are granted within 30 days of purchase.";
/// What `explode` says; a run's record must never carry it.
pub const SECRET_FAILURE: &str = "db password=hunter2 at 10.1.2.3";

/// What the server offers, and what it was asked.
#[derive(Clone)]
struct Crm {
    calls: Arc<Mutex<Vec<(String, Value)>>>,
    /// `None`: every revision rmcp speaks; `Some`: only these (an older server).
    versions: Option<&'static [ProtocolVersion]>,
}

fn schema(value: Value) -> Arc<rmcp::model::JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::default(),
    }
}

impl ServerHandler for Crm {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().enable_prompts().build())
            .with_server_info(Implementation::new("crm-test-server", "1.0.0"))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        match self.versions {
            Some(versions) => Cow::Borrowed(versions),
            None => Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS),
        }
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let id = json!({"type": "object", "properties": {"customerId": {"type": "string", "minLength": 1}},
            "required": ["customerId"]});
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("lookup", "Finds a customer by id.", schema(id.clone()))
                .with_annotations(ToolAnnotations::new().read_only(true)),
            Tool::new("refund", "Refunds a customer's last order.", schema(id))
                .with_annotations(ToolAnnotations::new().destructive(true)),
            Tool::new("explode", "Always fails.", schema(json!({"type": "object"}))),
            // Not a name a Tracon tool can have once prefixed: left out with a warning.
            Tool::new("bad name!", "Has a name no tool may have.", schema(json!({"type": "object"}))),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((request.name.to_string(), arguments.clone()));
        let customer = arguments.get("customerId").and_then(Value::as_str).unwrap_or_default().to_owned();
        let result = match request.name.as_ref() {
            "lookup" => CallToolResult::success(vec![ContentBlock::text(format!(
                "Customer {customer}: Ada Lovelace, plan Gold."
            ))]),
            "refund" => {
                CallToolResult::success(vec![ContentBlock::text(format!("Refunded the last order of {customer}."))])
            }
            "explode" => CallToolResult::error(vec![ContentBlock::text(SECRET_FAILURE)]),
            _ => return Err(ErrorData::invalid_params(format!("no tool {} ({SECRET_FAILURE})", request.name), None)),
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new("file:///policy.md", "policy").with_description("The refund policy."),
            Resource::new("file:///huge.txt", "huge"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let text = match request.uri.as_str() {
            "file:///policy.md" => POLICY.to_owned(),
            "file:///huge.txt" => "x".repeat(70 * 1024),
            _ => return Err(ErrorData::resource_not_found(SECRET_FAILURE, None)),
        };
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, request.uri)]).into())
    }

    async fn list_prompts(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new("greeting", Some("Greets a customer."), None)]))
    }
}

/// Whether a bearer token is good (the authorization server's answer).
pub type TokenCheck = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// What protects a server: the token check and the authorization server its metadata names.
#[derive(Clone)]
struct Protection {
    accepts: TokenCheck,
    issuer: String,
    refused: Arc<std::sync::atomic::AtomicU64>,
}

/// A running test server.
pub struct McpTestServer {
    /// `http://127.0.0.1:{port}/mcp`.
    pub url: String,
    port: u16,
    versions: Option<&'static [ProtocolVersion]>,
    calls: Arc<Mutex<Vec<(String, Value)>>>,
    cancel: Mutex<CancellationToken>,
    protection: Option<Protection>,
}

impl McpTestServer {
    /// Speaks every revision the SDK knows (the current one first).
    pub async fn start() -> std::io::Result<Self> {
        Self::start_with(None).await
    }

    /// Speaks only `2025-11-25`: a server of the revision before the current one.
    pub async fn start_previous_revision() -> std::io::Result<Self> {
        Self::start_with(Some(&[ProtocolVersion::V_2025_11_25])).await
    }

    async fn start_with(versions: Option<&'static [ProtocolVersion]>) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let cancel = serve(listener, Crm { calls: calls.clone(), versions }, None);
        Ok(Self {
            url: format!("http://127.0.0.1:{port}/mcp"),
            port,
            versions,
            calls,
            cancel: Mutex::new(cancel),
            protection: None,
        })
    }

    /// Behind OAuth: only bearer tokens `accepts` takes get through; the metadata names
    /// `issuer` as the authorization server.
    pub async fn start_protected(accepts: TokenCheck, issuer: &str) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let protection = Protection { accepts, issuer: issuer.to_owned(), refused: Arc::default() };
        let cancel = serve(listener, Crm { calls: calls.clone(), versions: None }, Some(protection.clone()));
        Ok(Self {
            url: format!("http://127.0.0.1:{port}/mcp"),
            port,
            versions: None,
            calls,
            cancel: Mutex::new(cancel),
            protection: Some(protection),
        })
    }

    /// How many requests a protected server refused with `401`.
    pub fn refused(&self) -> u64 {
        self.protection.as_ref().map_or(0, |p| p.refused.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// The tool calls the server got: `(tool, arguments)`.
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Takes the server away: its port refuses connections until [`Self::restart`].
    pub async fn stop(&self) {
        self.cancel.lock().unwrap_or_else(std::sync::PoisonError::into_inner).cancel();
        // Until the listener is really closed.
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Brings it back on the same port.
    pub async fn restart(&self) -> std::io::Result<()> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await?;
        let cancel =
            serve(listener, Crm { calls: self.calls.clone(), versions: self.versions }, self.protection.clone());
        *self.cancel.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = cancel;
        Ok(())
    }
}

fn serve(listener: tokio::net::TcpListener, crm: Crm, protection: Option<Protection>) -> CancellationToken {
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let cancel = CancellationToken::new();
    let config =
        StreamableHttpServerConfig::default().with_sse_keep_alive(None).with_cancellation_token(cancel.child_token());
    let service: StreamableHttpService<Crm, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(crm.clone()), Default::default(), config);
    let mut router = axum::Router::new().nest_service("/mcp", service);
    if let Some(p) = protection {
        let base = format!("http://127.0.0.1:{port}");
        let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
        let metadata = json!({"resource": format!("{base}/mcp"), "authorization_servers": [p.issuer],
            "scopes_supported": ["crm.read"], "bearer_methods_supported": ["header"]});
        router = router.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let p = p.clone();
                let challenge = format!(r#"Bearer resource_metadata="{metadata_url}", scope="crm.read""#);
                async move {
                    let token = request
                        .headers()
                        .get(axum::http::header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.strip_prefix("Bearer "))
                        .map(str::to_owned);
                    if token.as_deref().is_some_and(|t| (p.accepts)(t)) {
                        return next.run(request).await;
                    }
                    p.refused.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let mut refused = axum::response::Response::new(axum::body::Body::empty());
                    *refused.status_mut() = axum::http::StatusCode::UNAUTHORIZED;
                    if let Ok(v) = axum::http::HeaderValue::from_str(&challenge) {
                        refused.headers_mut().insert(axum::http::header::WWW_AUTHENTICATE, v);
                    }
                    refused
                }
            },
        ));
        router = router.route(
            "/.well-known/oauth-protected-resource/mcp",
            axum::routing::get(move || {
                let metadata = metadata.clone();
                async move { axum::Json(metadata) }
            }),
        );
    }
    let stop = cancel.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await;
    });
    cancel
}
