//! Tools are code. A [`Tool`] is a Rust type registered at start-up in a
//! [`ToolRegistration`] carrying its policy (effect, approval, permission, timeout, output
//! limit, repeatability, source); the [`ToolRegistry`] is the start-up snapshot definitions
//! select from by name. Every call goes through [`pipeline`] — authorization → argument
//! validation → timeout → approval → body — so no tool body re-implements any of them.

pub mod agents;
pub mod effect;
pub mod output;
pub mod pipeline;
pub mod replayed;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::identity::Caller;
use crate::names::{RunId, TenantId, ToolName};
pub use output::ToolOutput;

use effect::ToolEffect;

/// What a tool body can see of the run it serves.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub tenant: TenantId,
    pub run_id: RunId,
    pub agent: String,
    pub call_id: String,
    pub caller: Caller,
    /// Cancelled when the call times out or the run is cancelled. Cooperative: a body that
    /// never looks at it keeps running (and a late result is still recorded).
    pub cancel: CancellationToken,
    /// The run's event log, for a tool's own `Custom` events.
    pub events: crate::events::EventWriter,
    /// This call's key, for a body that passes one on to an external system so a repeated
    /// call has no second effect: `{originRunId}:{step}:{callId}`, the same in every run that
    /// continues the one the model asked in (see [`crate::runs::continuation`]).
    pub idempotency_key: String,
    /// Starts child runs, for a generated agent tool (`callableAgentNames`); `None` where a
    /// run cannot have children.
    pub children: agents::Children,
}

/// A tool failure.
#[derive(Debug, Clone)]
pub enum ToolError {
    /// Tracon's own failure, written by the tool author for the model: its message is kept.
    Message(String),
    /// Anything else. The model and the record see only `Tool failed with <Type>.`; the
    /// detail goes to the log.
    Foreign { type_name: String, detail: String },
}

impl ToolError {
    pub fn message(m: impl Into<String>) -> Self {
        Self::Message(m.into())
    }

    pub fn foreign<E: std::error::Error + ?Sized>(e: &E) -> Self {
        Self::Foreign { type_name: short_type_name::<E>(), detail: e.to_string() }
    }
}

/// `?` on any foreign error inside a tool body hides its text.
impl<E: std::error::Error + Send + Sync + 'static> From<E> for ToolError {
    fn from(e: E) -> Self {
        ToolError::foreign(&e)
    }
}

/// A readable, secret-free type name: `std::io::error::Error` → `IoError`,
/// `reqwest::error::Error` → `ReqwestError`, `my_crate::LookupFailed` → `LookupFailed`.
pub fn short_type_name<T: ?Sized>() -> String {
    let full = std::any::type_name::<T>();
    let base = full.split('<').next().unwrap_or(full);
    let segments: Vec<&str> = base.split("::").collect();
    let last = segments.last().copied().unwrap_or(base);
    if last != "Error" {
        return last.to_owned();
    }
    let owner = segments
        .iter()
        .rev()
        .skip(1)
        .find(|s| !s.eq_ignore_ascii_case("error") && !s.eq_ignore_ascii_case("errors"))
        .copied()
        .unwrap_or("Unknown");
    let camel: String = owner
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect();
    format!("{camel}Error")
}

/// A tool body. One instance serves every run and tenant concurrently: keep no per-call
/// state in it.
#[async_trait::async_trait]
pub trait Tool: Send + Sync + 'static {
    async fn call(&self, arguments: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError>;
}

/// A tool from an async closure.
pub struct FnTool<F>(F);

/// Wraps `|arguments, ctx| async move { … }` as a [`Tool`].
pub fn tool_fn<F, Fut>(f: F) -> FnTool<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    FnTool(f)
}

#[async_trait::async_trait]
impl<F, Fut> Tool for FnTool<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    async fn call(&self, arguments: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        (self.0)(arguments, ctx).await
    }
}

/// The body of a client-side tool. The engine never calls it; if anything ever did, the
/// model would get an error rather than a silent success.
struct ClientSide;

#[async_trait::async_trait]
impl Tool for ClientSide {
    async fn call(&self, _arguments: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::message("This tool is answered by the client, not the server."))
    }
}

/// Longest tool display name, in characters.
pub const MAX_DISPLAY_NAME: usize = 64;

/// A registration refused at start-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RegistrationError(pub String);

/// One registered tool and its policy. Immutable once registered; shared by every run.
pub struct ToolRegistration {
    name: ToolName,
    description: String,
    schema: Value,
    validator: crate::schema::Validator,
    pub effect: ToolEffect,
    pub requires_approval: bool,
    pub required_permission: Option<String>,
    pub timeout: Option<Duration>,
    pub max_output_bytes: Option<usize>,
    pub safe_to_repeat: bool,
    pub source: Option<String>,
    /// What people see while the tool runs ("Looking up the order"); the chat widget and the
    /// `toolCall` update show it. `None`: the tool's name.
    pub display_name: Option<String>,
    body: Arc<dyn Tool>,
    /// Declared here, answered by the caller: the server never runs a body for it.
    client: bool,
}

impl fmt::Debug for ToolRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistration")
            .field("name", &self.name)
            .field("effect", &self.effect)
            .field("requires_approval", &self.requires_approval)
            .finish_non_exhaustive()
    }
}

impl ToolRegistration {
    /// Registers `body` under `name`, with `schema` the JSON Schema of its arguments (an
    /// object schema). The name rules and the schema are checked here, at start-up.
    pub fn new(name: &str, description: &str, schema: Value, body: impl Tool) -> Result<Self, RegistrationError> {
        let name = ToolName::parse(name).map_err(|e| RegistrationError(e.0))?;
        if description.trim().is_empty() {
            return Err(RegistrationError(format!("Tool '{name}' needs a description; the model reads it.")));
        }
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(RegistrationError(format!(
                "Tool '{name}': the argument schema must be a JSON Schema with \"type\": \"object\"."
            )));
        }
        let validator = crate::schema::Validator::new(&schema)
            .map_err(|e| RegistrationError(format!("Tool '{name}': the argument schema is invalid: {e}")))?;
        Ok(Self {
            name,
            description: description.to_owned(),
            schema,
            validator,
            effect: ToolEffect::Read,
            requires_approval: false,
            required_permission: None,
            timeout: None,
            max_output_bytes: None,
            safe_to_repeat: false,
            source: None,
            display_name: None,
            body: Arc::new(body),
            client: false,
        })
    }

    /// A client-side tool: a declaration the model can call, with no server-side body. The
    /// live run hands the call back to its caller (a browser, an OpenAI client), which
    /// answers it on its next request. Name, description and schema are checked like any
    /// other tool's.
    pub fn client(name: &str, description: &str, schema: Value) -> Result<Self, RegistrationError> {
        let mut reg = Self::new(name, description, schema, ClientSide)?;
        reg.client = true;
        Ok(reg)
    }

    /// Whether the caller answers this tool ([`ToolRegistration::client`]).
    pub fn is_client(&self) -> bool {
        self.client
    }

    pub fn effect(mut self, effect: ToolEffect) -> Self {
        self.effect = effect;
        self
    }
    pub fn requires_approval(mut self, yes: bool) -> Self {
        self.requires_approval = yes;
        self
    }
    pub fn required_permission(mut self, name: &str) -> Self {
        self.required_permission = Some(name.to_owned());
        self
    }
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }
    pub fn max_output_bytes(mut self, n: usize) -> Self {
        self.max_output_bytes = Some(n);
        self
    }
    pub fn safe_to_repeat(mut self, yes: bool) -> Self {
        self.safe_to_repeat = yes;
        self
    }
    pub fn source(mut self, s: &str) -> Self {
        self.source = Some(s.to_owned());
        self
    }
    /// What people see while the tool runs; blank is none, and it is cut at
    /// [`MAX_DISPLAY_NAME`] characters.
    pub fn display_name(mut self, name: &str) -> Self {
        let name = name.trim();
        self.display_name = (!name.is_empty()).then(|| name.chars().take(MAX_DISPLAY_NAME).collect());
        self
    }

    pub fn name(&self) -> &str {
        self.name.as_str()
    }
    pub fn description(&self) -> &str {
        &self.description
    }
    pub fn schema(&self) -> &Value {
        &self.schema
    }
    pub(crate) fn body(&self) -> Arc<dyn Tool> {
        self.body.clone()
    }

    /// Schema errors for `arguments`, as readable messages (empty when valid).
    pub fn schema_errors(&self, arguments: &Value) -> Vec<String> {
        self.validator.errors(arguments, 8)
    }
}

/// The start-up snapshot of every registered tool.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    by_name: BTreeMap<String, Arc<ToolRegistration>>,
}

impl ToolRegistry {
    pub fn insert(&mut self, reg: ToolRegistration) -> Result<(), RegistrationError> {
        let key = reg.name().to_owned();
        if self.by_name.contains_key(&key) {
            return Err(RegistrationError(format!("Tool '{key}' is registered twice.")));
        }
        self.by_name.insert(key, Arc::new(reg));
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Arc<ToolRegistration>> {
        self.by_name.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<ToolRegistration>> {
        self.by_name.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn noop() -> impl Tool {
        tool_fn(|_, _| async { Ok(ToolOutput::from("ok")) })
    }

    #[test]
    fn registration_enforces_name_and_schema_rules() {
        assert!(ToolRegistration::new("9bad", "d", json!({"type": "object"}), noop()).is_err());
        assert!(ToolRegistration::new("ok", "", json!({"type": "object"}), noop()).is_err());
        assert!(ToolRegistration::new("ok", "d", json!({"type": "string"}), noop()).is_err());
        assert!(
            ToolRegistration::new("ok", "d", json!({"type": "object", "properties": {"a": {"type": 5}}}), noop())
                .is_err()
        );
        let mut r = ToolRegistry::default();
        r.insert(ToolRegistration::new("ok", "d", json!({"type": "object"}), noop()).unwrap()).unwrap();
        assert!(r.insert(ToolRegistration::new("ok", "d", json!({"type": "object"}), noop()).unwrap()).is_err());
    }

    #[test]
    fn foreign_errors_keep_only_their_type_name() {
        let e: ToolError = std::io::Error::other("password=hunter2").into();
        match e {
            ToolError::Foreign { type_name, detail } => {
                assert_eq!(type_name, "IoError");
                assert!(detail.contains("hunter2"));
            }
            ToolError::Message(_) => unreachable!(),
        }
    }
}
