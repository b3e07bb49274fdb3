//! One conversation with a remote MCP server over Streamable HTTP: JSON-RPC requests sent as
//! HTTP `POST`s, each answered with a JSON body or an event stream that carries the answer.
//!
//! Two protocol revisions are spoken, the current one and the one before it:
//!
//! - **2026-07-28** (stateless): no handshake. [`Connection::open`] asks `server/discover`;
//!   every request then carries the client context in `_meta` and the standard headers
//!   (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`), so a tool call is one round trip.
//! - **2025-11-25** (and 2025-06-18, whose wire is the same for what Tracon asks): a server
//!   that does not know `server/discover` gets the `initialize` handshake, then
//!   `notifications/initialized`, and later requests carry its `Mcp-Session-Id`.
//!
//! Every request goes through the egress guard (the URL checked before it is sent; natively
//! the client resolves and filters addresses itself, see [`crate::egress`]) and under the
//! connection timeout. Nothing a server says in an error reaches a caller: [`McpError`]'s
//! public text is ours, its detail goes to the log.

use std::time::Duration;

use futures::StreamExt;
use rmcp::model::{ProtocolVersion, RequestMetaObject};
use serde_json::{Value, json};

use super::{McpServerRecord, McpSettings};
use crate::names::TenantId;
use crate::platform::send_future;
use crate::ports::Clock;

/// Largest answer read from a server (a JSON body, or one event of a stream).
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// The revisions Tracon speaks, preferred first.
pub fn spoken_versions() -> [ProtocolVersion; 3] {
    [ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2025_06_18]
}

/// Why an exchange failed. [`McpError::public_text`] is what a record, a warning or a tool
/// result may say; the detail is for the log only.
#[derive(Debug, Clone, thiserror::Error)]
pub enum McpError {
    #[error("the egress guard refused the endpoint: {0}")]
    Refused(String),
    #[error("configuration key {0} holds no value")]
    CredentialMissing(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("transport: {0}")]
    Transport(String),
    #[error("HTTP status {0}")]
    Status(u16),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("JSON-RPC error {code}: {message}")]
    Rpc { code: i32, message: String },
    #[error("the server speaks only {0}")]
    Unsupported(String),
    #[error("the server needs OAuth authorization and has no token")]
    OAuthRequired,
    #[error("OAuth: {0}")]
    OAuth(String),
}

impl McpError {
    /// Our words for it, safe for a stored warning, a response or a tool result.
    pub fn public_text(&self) -> String {
        match self {
            McpError::Refused(why) => why.clone(),
            McpError::CredentialMissing(key) => {
                format!("The configuration key '{key}' named for this server's credential holds no value.")
            }
            McpError::Timeout(t) => format!("The server did not answer within {} seconds.", t.as_secs().max(1)),
            McpError::Transport(_) => "The server could not be reached.".into(),
            McpError::Status(401 | 403) => "The server refused the credential (HTTP 401/403).".into(),
            McpError::Status(s) => format!("The server answered HTTP {s}."),
            McpError::Protocol(_) => "The server's answer was not valid MCP.".into(),
            McpError::Rpc { code, .. } => format!("The server answered with JSON-RPC error {code}."),
            McpError::Unsupported(_) => format!(
                "The server speaks no MCP revision Tracon speaks ({}).",
                spoken_versions().iter().map(|v| v.as_str().to_owned()).collect::<Vec<_>>().join(", ")
            ),
            McpError::OAuthRequired => "The server needs OAuth authorization: an administrator connects it with POST /api/mcp-servers/{name}/oauth/authorize.".into(),
            McpError::OAuth(public) => format!("The server's OAuth token could not be refreshed: {public} Connect it again with POST /api/mcp-servers/{{name}}/oauth/authorize."),
        }
    }
}

/// An open conversation: the revision agreed, and what later requests must carry.
pub struct Connection<'a> {
    settings: &'a McpSettings,
    clock: &'a dyn Clock,
    url: reqwest::Url,
    headers: reqwest::header::HeaderMap,
    version: ProtocolVersion,
    session: Option<String>,
    next_id: u64,
}

/// What one HTTP exchange brought back.
struct Answer {
    status: u16,
    session: Option<String>,
    message: Option<Value>,
}

impl<'a> Connection<'a> {
    /// Agrees on a revision with the server `record` names: `server/discover` first, the
    /// `initialize` handshake for a server that does not know it.
    pub async fn open(
        settings: &'a McpSettings,
        clock: &'a dyn Clock,
        tenant: &TenantId,
        record: &McpServerRecord,
        bearer: Option<&str>,
    ) -> Result<Connection<'a>, McpError> {
        let url = settings.check_endpoint(&record.endpoint).map_err(McpError::Refused)?;
        let mut headers = credential_headers(settings, tenant, record)?;
        if let Some(token) = bearer {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| McpError::OAuth("The stored access token is not a valid header value.".into()))?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let mut conn = Connection {
            settings,
            clock,
            url,
            headers,
            version: ProtocolVersion::V_2026_07_28,
            session: None,
            next_id: 0,
        };
        match conn.request("server/discover", json!({})).await {
            Ok(result) => {
                let supported: Vec<String> = result
                    .get("supportedVersions")
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or_default();
                if supported.iter().any(|v| v == ProtocolVersion::V_2026_07_28.as_str()) {
                    return Ok(conn);
                }
            }
            // A server of an earlier revision: an unknown method, or a request it could not
            // take (a 4xx other than a credential refusal).
            Err(McpError::Rpc { .. }) => {}
            Err(McpError::Status(s)) if (400..500).contains(&s) && s != 401 && s != 403 => {}
            Err(other) => return Err(other),
        }
        conn.initialize().await?;
        Ok(conn)
    }

    /// The revision agreed.
    pub fn version(&self) -> &str {
        self.version.as_str()
    }

    fn modern(&self) -> bool {
        !self.version.has_initialize()
    }

    async fn initialize(&mut self) -> Result<(), McpError> {
        self.version = ProtocolVersion::V_2025_11_25;
        let params = json!({
            "protocolVersion": ProtocolVersion::V_2025_11_25.as_str(),
            "capabilities": {},
            "clientInfo": client_info(),
        });
        let result = self.request("initialize", params).await?;
        let agreed = result.get("protocolVersion").and_then(Value::as_str).unwrap_or_default().to_owned();
        let Some(version) = spoken_versions().into_iter().find(|v| v.as_str() == agreed && v.has_initialize()) else {
            return Err(McpError::Unsupported(crate::names::truncate_for_message(&agreed)));
        };
        self.version = version;
        self.notify("notifications/initialized").await
    }

    /// Sends a request and returns its `result`.
    pub async fn request(&mut self, method: &str, mut params: Value) -> Result<Value, McpError> {
        self.next_id += 1;
        let id = self.next_id;
        if self.modern()
            && let Some(object) = params.as_object_mut()
        {
            let meta = RequestMetaObject::with_client_context(
                self.version.clone(),
                serde_json::from_value(client_info()).map_err(|e| McpError::Protocol(e.to_string()))?,
                Default::default(),
            );
            object.insert("_meta".into(), serde_json::to_value(meta).map_err(|e| McpError::Protocol(e.to_string()))?);
        }
        let name = match method {
            "tools/call" | "prompts/get" => params.get("name").and_then(Value::as_str).map(str::to_owned),
            "resources/read" => params.get("uri").and_then(Value::as_str).map(str::to_owned),
            _ => None,
        };
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let answer = self.exchange(method, name.as_deref(), &body, Some(id)).await?;
        if answer.session.is_some() && self.session.is_none() {
            self.session = answer.session;
        }
        if !(200..300).contains(&answer.status) {
            // A JSON-RPC error in a 4xx body says more than the status.
            if let Some(error) = answer.message.as_ref().and_then(|m| m.get("error")) {
                return Err(rpc_error(error));
            }
            return Err(McpError::Status(answer.status));
        }
        let message = answer.message.ok_or_else(|| McpError::Protocol("no answer to the request".into()))?;
        if let Some(error) = message.get("error") {
            return Err(rpc_error(error));
        }
        message.get("result").cloned().ok_or_else(|| McpError::Protocol("an answer without a result".into()))
    }

    async fn notify(&mut self, method: &str) -> Result<(), McpError> {
        let body = json!({ "jsonrpc": "2.0", "method": method });
        let answer = self.exchange(method, None, &body, None).await?;
        if (200..300).contains(&answer.status) { Ok(()) } else { Err(McpError::Status(answer.status)) }
    }

    /// Every page of a list (`tools/list`, …), following `nextCursor`, until `max` items.
    pub async fn list(&mut self, method: &str, field: &str, max: usize) -> Result<(Vec<Value>, bool), McpError> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        // A server that pages forever is cut off: at most this many pages.
        for _ in 0..50 {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let result = self.request(method, params).await?;
            let page = result.get(field).and_then(Value::as_array).cloned().unwrap_or_default();
            items.extend(page);
            if items.len() > max {
                items.truncate(max);
                return Ok((items, true));
            }
            cursor = result.get("nextCursor").and_then(Value::as_str).map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        Ok((items, false))
    }

    /// One HTTP `POST` under the connection timeout.
    async fn exchange(
        &self,
        method: &str,
        name: Option<&str>,
        body: &Value,
        id: Option<u64>,
    ) -> Result<Answer, McpError> {
        let timeout = self.settings.connection_timeout;
        let sleep = self.clock.sleep(timeout);
        let work = send_future(self.post(method, name, body, id));
        tokio::select! {
            biased;
            answer = work => answer,
            _ = sleep => Err(McpError::Timeout(timeout)),
        }
    }

    async fn post(&self, method: &str, name: Option<&str>, body: &Value, id: Option<u64>) -> Result<Answer, McpError> {
        use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
        let mut request = self
            .settings
            .client()
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if method != "initialize" {
            request = request.header("MCP-Protocol-Version", self.version.as_str());
        }
        if let Some(session) = &self.session
            && let Ok(v) = HeaderValue::from_str(session)
        {
            request = request.header("Mcp-Session-Id", v);
        }
        if self.modern() {
            request = request.header("Mcp-Method", method);
            if let Some(name) = name {
                request = request.header("Mcp-Name", header_text(name));
            }
        }
        let reply = transmit(request).await?;
        let status = reply_status(&reply);
        let session = reply_header(&reply, "mcp-session-id");
        let message = match id {
            None => None,
            Some(id) if crate::model::sse::is_json(&reply) => {
                let bytes = body_bytes(reply).await?;
                serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| pick_answer(v, id))
            }
            Some(id) if is_event_stream(&reply) => answer_in_stream(reply, id).await?,
            Some(_) => None,
        };
        Ok(Answer { status, session, message })
    }
}

/// Who we are, as `clientInfo`.
fn client_info() -> Value {
    json!({ "name": "tracon", "version": env!("CARGO_PKG_VERSION") })
}

/// The headers a record's key names resolve to now. A name without a value fails the
/// exchange rather than going out without its credential.
fn credential_headers(
    settings: &McpSettings,
    tenant: &TenantId,
    record: &McpServerRecord,
) -> Result<reqwest::header::HeaderMap, McpError> {
    use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
    let mut headers = HeaderMap::new();
    let mut named: Vec<(HeaderName, &str)> = Vec::new();
    if let Some(key) = &record.authorization_configuration_key {
        named.push((AUTHORIZATION, key));
    }
    for (header, key) in &record.header_configuration_keys {
        // Validated when written; a stored header that no longer parses is skipped.
        if let Ok(h) = HeaderName::from_bytes(header.as_bytes()) {
            named.push((h, key));
        }
    }
    for (header, key) in named {
        let value = settings.secret(tenant, key).ok_or_else(|| McpError::CredentialMissing(key.to_owned()))?;
        let mut value = HeaderValue::from_str(value.trim()).map_err(|_| McpError::CredentialMissing(key.to_owned()))?;
        value.set_sensitive(true);
        headers.insert(header, value);
    }
    Ok(headers)
}

/// A header value as the standard headers carry it: plain when it is visible ASCII, else
/// `=?base64?…?=`.
fn header_text(value: &str) -> String {
    use base64::Engine;
    let visible = value.bytes().all(|b| (0x20..0x7f).contains(&b));
    let padded = value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']);
    let looks_wrapped = value.starts_with("=?base64?") && value.ends_with("?=");
    let plain = !value.is_empty() && visible && !padded && !looks_wrapped;
    if plain {
        value.to_owned()
    } else {
        format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode(value))
    }
}

fn rpc_error(error: &Value) -> McpError {
    McpError::Rpc {
        code: error.get("code").and_then(Value::as_i64).and_then(|c| i32::try_from(c).ok()).unwrap_or(0),
        message: error.get("message").and_then(Value::as_str).unwrap_or_default().chars().take(500).collect(),
    }
}

/// The response to request `id` in a JSON body (one message, or a batch).
fn pick_answer(value: Value, id: u64) -> Option<Value> {
    let is_ours = |m: &Value| m.get("id").and_then(Value::as_u64) == Some(id);
    match value {
        Value::Array(batch) => batch.into_iter().find(is_ours),
        one if is_ours(&one) => Some(one),
        // An error about a request the server could not read carries `id: null`.
        one if one.get("error").is_some() && one.get("id").is_some_and(Value::is_null) => Some(one),
        _ => None,
    }
}

/// Reads an event stream until the response to `id` (notifications and the server's own
/// requests, which Tracon does not answer, are passed over).
async fn answer_in_stream(reply: Reply, id: u64) -> Result<Option<Value>, McpError> {
    let mut events = crate::model::sse::events(reply);
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| McpError::Transport(e.to_string()))?;
        if event.data.len() > MAX_ANSWER_BYTES {
            return Err(McpError::Protocol("an event larger than the answer limit".into()));
        }
        if let Ok(message) = serde_json::from_str::<Value>(&event.data)
            && let Some(answer) = pick_answer(message, id)
        {
            return Ok(Some(answer));
        }
    }
    Ok(None)
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) type Reply = reqwest::Response;
#[cfg(target_arch = "wasm32")]
pub(crate) type Reply = crate::model::fetch::Reply;

#[cfg(not(target_arch = "wasm32"))]
pub(crate) async fn transmit(request: reqwest::RequestBuilder) -> Result<Reply, McpError> {
    request.send().await.map_err(|e| match crate::egress::SendError::from(e) {
        crate::egress::SendError::Refused(refused) => McpError::Refused(format!("{refused}.")),
        crate::egress::SendError::Http(e) if e.is_timeout() => McpError::Transport("timed out".into()),
        crate::egress::SendError::Http(e) => McpError::Transport(e.to_string()),
    })
}

/// On Workers no redirect is followed: `fetch` would follow it to an address the egress guard
/// never saw (natively the guarded client checks every hop). A `3xx` is the server's answer.
#[cfg(target_arch = "wasm32")]
pub(crate) async fn transmit(request: reqwest::RequestBuilder) -> Result<Reply, McpError> {
    crate::model::fetch::send_unredirected(request).await.map_err(|e| McpError::Transport(e.to_string()))
}

pub(crate) fn reply_status(reply: &Reply) -> u16 {
    reply.status().as_u16()
}

pub(crate) fn reply_header(reply: &Reply, name: &str) -> Option<String> {
    #[cfg(not(target_arch = "wasm32"))]
    return reply.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    #[cfg(target_arch = "wasm32")]
    return reply.header(name);
}

fn is_event_stream(reply: &Reply) -> bool {
    reply_header(reply, "content-type")
        .is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("text/event-stream"))
}

pub(crate) async fn body_bytes(reply: Reply) -> Result<bytes::Bytes, McpError> {
    #[cfg(not(target_arch = "wasm32"))]
    let bytes = reply.bytes().await.map_err(|e| McpError::Transport(e.to_string()))?;
    #[cfg(target_arch = "wasm32")]
    let bytes = reply.bytes().await.map_err(|e| McpError::Transport(e.to_string()))?;
    if bytes.len() > MAX_ANSWER_BYTES {
        return Err(McpError::Protocol("an answer larger than the limit".into()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_base64_wrapped_only_when_they_must_be() {
        assert_eq!(header_text("lookup"), "lookup");
        assert_eq!(header_text("file:///a b.md"), "file:///a b.md");
        assert_eq!(header_text("ünï"), "=?base64?w7xuw68=?=");
        assert_eq!(header_text(" x"), "=?base64?IHg=?=");
    }

    #[test]
    fn answers_are_matched_by_id_in_bodies_and_batches() {
        let one = json!({"jsonrpc": "2.0", "id": 3, "result": {}});
        assert_eq!(pick_answer(one.clone(), 3), Some(one.clone()));
        assert_eq!(pick_answer(one.clone(), 4), None);
        let batch = json!([{"jsonrpc": "2.0", "method": "notifications/progress"}, one.clone()]);
        assert_eq!(pick_answer(batch, 3), Some(one));
        let unreadable = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "x"}});
        assert!(pick_answer(unreadable, 9).is_some());
    }

    #[test]
    fn public_text_never_carries_the_servers_words() {
        let e = McpError::Rpc { code: -32000, message: "secret=hunter2 at /etc/passwd".into() };
        assert!(!e.public_text().contains("hunter2"));
        assert!(!McpError::Transport("dns error for internal.host".into()).public_text().contains("internal"));
        assert!(!McpError::Protocol("token abc".into()).public_text().contains("abc"));
    }
}
