//! The response cache (`model.responseCache`): a model call whose whole request — the tenant,
//! the provider, the model, the sorted tool set, the system prompt, the conversation and
//! every setting — was answered within the cache's lifetime gets that answer again without a
//! call. A hit spends no tokens (the run's usage and cost do not grow) and is recorded on the
//! run as a `model.cache_hit` event; the tools the cached answer calls run as they would. The
//! cache lives in the run's own store — Postgres in a real deployment, no new infrastructure —
//! one row per key and tenant: a hit never crosses a tenant, and never lands on an agent
//! with another tool set or another prompt.

use std::collections::HashMap;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{FinishReason, Message, ModelEvent, ModelRequest, ReasoningBlock, ToolCall};
use crate::error::StoreError;
use crate::names::TenantId;
use crate::sync::lock;

/// The most answers the memory store keeps; the soonest to expire go first.
pub const MEMORY_KEEPS: usize = 10_000;

/// A model call's answer as the cache keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedAnswer {
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<ReasoningBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<FinishReason>,
    /// The model that answered, when the provider said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl CachedAnswer {
    /// The answer as a provider would stream it (no usage: a hit spends nothing).
    pub fn events(&self) -> Vec<ModelEvent> {
        let mut events = Vec::with_capacity(4 + self.tool_calls.len() + self.reasoning.len());
        if let Some(model) = &self.model {
            events.push(ModelEvent::Model(model.clone()));
        }
        events.extend(self.reasoning.iter().cloned().map(ModelEvent::ReasoningBlock));
        if !self.text.is_empty() {
            events.push(ModelEvent::TextDelta(self.text.clone()));
        }
        events.extend(self.tool_calls.iter().cloned().map(ModelEvent::ToolCall));
        events.extend(self.finish.map(ModelEvent::Finish));
        events
    }
}

/// Cached answers, per tenant and key.
#[async_trait::async_trait]
pub trait ResponseCacheStore: Send + Sync {
    /// The answer under `key`, unless it expired by `now`.
    async fn get(&self, tenant: &TenantId, key: &str, now: DateTime<Utc>) -> Result<Option<CachedAnswer>, StoreError>;
    /// Keeps `answer` under `key` until `expires_at` (replacing what was there).
    async fn put(
        &self,
        tenant: &TenantId,
        key: &str,
        answer: &CachedAnswer,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError>;
    /// Removes up to `limit` answers that expired before `now`, of any tenant; how many.
    async fn purge_expired(&self, now: DateTime<Utc>, limit: usize) -> Result<u64, StoreError>;
}

/// An answer kept in memory, and when it expires.
type Kept = (CachedAnswer, DateTime<Utc>);

/// Cached answers in process memory, at most [`MEMORY_KEEPS`].
#[derive(Default)]
pub struct MemoryResponseCache {
    rows: Mutex<HashMap<(TenantId, String), Kept>>,
}

#[async_trait::async_trait]
impl ResponseCacheStore for MemoryResponseCache {
    async fn get(&self, tenant: &TenantId, key: &str, now: DateTime<Utc>) -> Result<Option<CachedAnswer>, StoreError> {
        let rows = lock(&self.rows);
        Ok(rows.get(&(tenant.clone(), key.to_owned())).filter(|(_, expires)| *expires > now).map(|(a, _)| a.clone()))
    }

    async fn put(
        &self,
        tenant: &TenantId,
        key: &str,
        answer: &CachedAnswer,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        crate::error::check_text("answer", &answer.text)?;
        let mut rows = lock(&self.rows);
        if rows.len() >= MEMORY_KEEPS
            && let Some(soonest) = rows.iter().min_by_key(|(_, (_, expires))| *expires).map(|(k, _)| k.clone())
        {
            rows.remove(&soonest);
        }
        rows.insert((tenant.clone(), key.to_owned()), (answer.clone(), expires_at));
        Ok(())
    }

    async fn purge_expired(&self, now: DateTime<Utc>, limit: usize) -> Result<u64, StoreError> {
        let mut rows = lock(&self.rows);
        let expired: Vec<_> = rows.iter().filter(|(_, (_, e))| *e < now).map(|(k, _)| k.clone()).take(limit).collect();
        for k in &expired {
            rows.remove(k);
        }
        Ok(expired.len() as u64)
    }
}

/// The cache key of `request` to `provider` for `tenant`: SHA-256 (hex) over everything that
/// shapes the answer. Tools are keyed sorted by name, so their order does not matter; their
/// descriptions and schemas are part of the key. `None` when the request cannot be encoded
/// (the call then skips the cache).
pub fn key(tenant: &TenantId, provider: &str, request: &ModelRequest) -> Option<String> {
    #[derive(Serialize)]
    struct Keyed<'a> {
        version: u8,
        tenant: &'a str,
        provider: String,
        model: &'a str,
        system: Option<&'a str>,
        messages: &'a [Message],
        tools: Vec<(&'a str, &'a str, &'a serde_json::Value)>,
        temperature: Option<f64>,
        top_p: Option<f64>,
        max_output_tokens: Option<u32>,
        reasoning_effort: Option<&'static str>,
        response_format: Option<&'a crate::definition::ResponseFormat>,
        provider_settings: &'a std::collections::BTreeMap<String, serde_json::Value>,
        parallel_tool_calls: bool,
        tool_choice: Option<serde_json::Value>,
    }
    let mut tools: Vec<_> =
        request.tools.iter().map(|t| (t.name.as_str(), t.description.as_str(), &t.parameters)).collect();
    tools.sort_by(|a, b| a.0.cmp(b.0));
    let keyed = Keyed {
        version: 1,
        tenant: tenant.as_str(),
        provider: provider.to_ascii_lowercase(),
        model: &request.model,
        system: request.system.as_deref(),
        messages: &request.messages,
        tools,
        temperature: request.temperature,
        top_p: request.top_p,
        max_output_tokens: request.max_output_tokens,
        reasoning_effort: request.reasoning_effort.map(|e| e.as_wire()),
        response_format: request.response_format.as_ref(),
        provider_settings: &request.provider_settings,
        parallel_tool_calls: request.parallel_tool_calls,
        tool_choice: super::openai::chat_tool_choice(&request.tool_choice),
    };
    let bytes = serde_json::to_vec(&keyed).ok()?;
    Some(Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::definition::ModelBinding;
    use crate::model::ToolSpec;

    fn request() -> ModelRequest {
        let mut r = ModelRequest::from_binding(&ModelBinding {
            provider: "openai".into(),
            model: "m".into(),
            ..Default::default()
        });
        r.system = Some("You help.".into());
        r.messages = vec![Message::user("hi")];
        r.tools = Arc::from(vec![
            ToolSpec { name: "b".into(), description: "B".into(), parameters: json!({"type": "object"}) },
            ToolSpec { name: "a".into(), description: "A".into(), parameters: json!({"type": "object"}) },
        ]);
        r
    }

    #[test]
    fn the_key_changes_with_everything_that_shapes_the_answer_and_nothing_else() {
        let t = TenantId::default_tenant();
        let base = key(&t, "openai", &request()).unwrap();
        assert_eq!(base.len(), 64);
        assert_eq!(key(&t, "OpenAI", &request()).unwrap(), base, "provider names are case-insensitive");
        let mut reordered = request();
        reordered.tools = Arc::from(reordered.tools.iter().rev().cloned().collect::<Vec<_>>());
        assert_eq!(key(&t, "openai", &reordered).unwrap(), base, "the tool order does not matter");
        let other = TenantId::parse("acme").unwrap();
        let mut changed: Vec<String> =
            vec![key(&other, "openai", &request()).unwrap(), key(&t, "anthropic", &request()).unwrap()];
        type Edit = Box<dyn Fn(&mut ModelRequest)>;
        let edits: Vec<Edit> = vec![
            Box::new(|r| r.model = "n".into()),
            Box::new(|r| r.system = Some("You refuse.".into())),
            Box::new(|r| r.messages.push(Message::user("again"))),
            Box::new(|r| r.tools = Arc::from(r.tools[..1].to_vec())),
            Box::new(|r| r.temperature = Some(0.5)),
            Box::new(|r| r.max_output_tokens = Some(5)),
            Box::new(|r| r.response_format = Some(crate::definition::ResponseFormat::Json)),
            Box::new(|r| {
                r.provider_settings.insert("x".into(), json!(1));
            }),
        ];
        for edit in &edits {
            let mut r = request();
            edit(&mut r);
            changed.push(key(&t, "openai", &r).unwrap());
        }
        for (i, k) in changed.iter().enumerate() {
            assert_ne!(*k, base, "edit {i}");
        }
    }

    #[test]
    fn a_cached_answer_streams_back_without_usage() {
        let answer = CachedAnswer {
            text: "hello".into(),
            tool_calls: vec![ToolCall { id: "c1".into(), name: "a".into(), arguments: "{}".into() }],
            reasoning: Vec::new(),
            finish: Some(FinishReason::ToolCalls),
            model: Some("m-1".into()),
        };
        let events = answer.events();
        assert_eq!(events.len(), 4);
        assert!(!events.iter().any(|e| matches!(e, ModelEvent::Usage(_))));
        assert_eq!(ModelEvent::text_of(&events), "hello");
    }
}
