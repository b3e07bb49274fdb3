//! A deterministic provider for tests and for the keyless demo.
//!
//! A [`ScriptedProvider`] answers from a script instead of a network. Which turn of the
//! script answers is decided by the request itself — the number of assistant messages
//! already in the conversation — so concurrent runs sharing one provider each walk the
//! script from the start. [`ScriptedProvider::demo`] answers any agent sensibly: it calls
//! the first offered tool with arguments drawn from the user's message, then summarises
//! the tool results.

use std::sync::Arc;

use futures::{StreamExt, stream};
use serde_json::{Map, Value, json};

use super::{
    FinishReason, Message, ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, ToolCall, Usage,
};

pub const SCRIPTED: &str = "scripted";

/// One scripted model answer.
#[derive(Debug, Clone, Default)]
pub struct ScriptedTurn {
    pub text: Option<String>,
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<Usage>,
    pub finish: Option<FinishReason>,
    /// Fail the call with this error instead of answering.
    pub error: Option<ProviderError>,
    /// Stream the text and then never finish (for timeout and cancellation tests).
    pub hang_after_text: bool,
}

impl ScriptedTurn {
    pub fn text(text: &str) -> Self {
        Self { text: Some(text.to_owned()), ..Self::default() }
    }

    pub fn tool_call(name: &str, arguments: Value) -> Self {
        Self::default().and_tool_call(name, arguments)
    }

    pub fn and_tool_call(mut self, name: &str, arguments: Value) -> Self {
        let id = format!("call_{}", self.tool_calls.len() + 1);
        self.tool_calls.push(ToolCall { id, name: name.to_owned(), arguments: arguments.to_string() });
        self
    }

    pub fn raw_tool_call(mut self, name: &str, arguments: &str) -> Self {
        let id = format!("call_{}", self.tool_calls.len() + 1);
        self.tool_calls.push(ToolCall { id, name: name.to_owned(), arguments: arguments.to_owned() });
        self
    }

    pub fn with_usage(mut self, input: u64, output: u64) -> Self {
        self.usage = Some(Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input + output,
            ..Usage::default()
        });
        self
    }

    pub fn failing(error: ProviderError) -> Self {
        Self { error: Some(error), ..Self::default() }
    }

    pub fn hanging() -> Self {
        Self { hang_after_text: true, ..Self::default() }
    }

    pub fn content_filtered() -> Self {
        Self { finish: Some(FinishReason::ContentFilter), ..Self::default() }
    }
}

type Responder = dyn Fn(&ModelRequest) -> ScriptedTurn + Send + Sync;

#[derive(Clone)]
enum Script {
    Turns(Arc<Vec<ScriptedTurn>>),
    Fn(Arc<Responder>),
}

/// A provider that answers from a script.
#[derive(Clone)]
pub struct ScriptedProvider {
    name: String,
    script: Script,
}

impl ScriptedProvider {
    /// Answers turn *n* of a conversation with `turns[n]` (the last turn repeats).
    pub fn with_turns(name: &str, turns: Vec<ScriptedTurn>) -> Self {
        Self { name: name.to_owned(), script: Script::Turns(Arc::new(turns)) }
    }

    pub fn from_fn(name: &str, f: impl Fn(&ModelRequest) -> ScriptedTurn + Send + Sync + 'static) -> Self {
        Self { name: name.to_owned(), script: Script::Fn(Arc::new(f)) }
    }

    /// The keyless demo: calls the first offered tool once, then summarises what it returned.
    pub fn demo() -> Self {
        Self::from_fn(SCRIPTED, demo_turn)
    }

    fn turn_for(&self, request: &ModelRequest) -> ScriptedTurn {
        match &self.script {
            Script::Fn(f) => f(request),
            Script::Turns(turns) => {
                let n = request.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count();
                turns.get(n).or_else(|| turns.last()).cloned().unwrap_or_default()
            }
        }
    }
}

#[async_trait::async_trait]
impl ModelProvider for ScriptedProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        let turn = self.turn_for(request);
        if let Some(e) = turn.error {
            return Err(e);
        }
        let mut events = vec![ModelEvent::Model(request.model.clone())];
        if let Some(r) = &turn.reasoning {
            events.push(ModelEvent::ReasoningDelta(r.clone()));
        }
        if let Some(text) = &turn.text {
            events.extend(text.split_inclusive(' ').map(|w| ModelEvent::TextDelta(w.to_owned())));
        }
        if turn.hang_after_text {
            return Ok(stream::iter(events.into_iter().map(Ok)).chain(stream::pending()).boxed());
        }
        let has_calls = !turn.tool_calls.is_empty();
        events.extend(turn.tool_calls.into_iter().map(ModelEvent::ToolCall));
        if let Some(u) = turn.usage {
            events.push(ModelEvent::Usage(u));
        }
        let finish = turn.finish.unwrap_or(if has_calls { FinishReason::ToolCalls } else { FinishReason::Stop });
        events.push(ModelEvent::Finish(finish));
        Ok(stream::iter(events.into_iter().map(Ok)).boxed())
    }
}

fn demo_turn(request: &ModelRequest) -> ScriptedTurn {
    let user_text = request.last_user_text().unwrap_or_default();
    // Tool results since the last user message.
    let results: Vec<(&str, &str)> = request
        .messages
        .iter()
        .rev()
        .take_while(|m| !matches!(m, Message::User { .. }))
        .filter_map(|m| match m {
            Message::Tool { name, content, .. } => Some((name.as_str(), content.as_str())),
            _ => None,
        })
        .collect();
    if !results.is_empty() {
        let mut text = String::from("Here is what I found.");
        for (name, content) in results.iter().rev() {
            text.push_str(&format!(" {name}: {}.", describe(content)));
        }
        text.push_str(" Anything else?");
        return ScriptedTurn::text(&text);
    }
    if let Some(tool) = request.tools.first() {
        return ScriptedTurn::tool_call(&tool.name, demo_arguments(&tool.parameters, user_text));
    }
    ScriptedTurn::text(&format!(
        "This is the scripted demo model (set OPENAI_API_KEY or ANTHROPIC_API_KEY for a real one). You said: {user_text}"
    ))
}

/// A JSON object result reads as `key value, key value`; anything else as it is.
fn describe(content: &str) -> String {
    match serde_json::from_str::<Value>(content) {
        Ok(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k} {s}"),
                other => format!("{k} {other}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => content.to_owned(),
    }
}

/// Fills a tool's declared properties from the user's text: a string gets the first run of
/// digits (an order number, say) or the whole text; numbers get the first number; booleans
/// get `true`.
fn demo_arguments(schema: &Value, text: &str) -> Value {
    let digits: String =
        text.split(|c: char| !c.is_ascii_digit()).find(|s| !s.is_empty()).unwrap_or_default().to_owned();
    let mut args = Map::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            let value = match prop.get("type").and_then(Value::as_str) {
                Some("integer") | Some("number") => json!(digits.parse::<i64>().unwrap_or(1)),
                Some("boolean") => json!(true),
                _ if !digits.is_empty() => json!(digits),
                _ => json!(text),
            };
            args.insert(name.clone(), value);
        }
    }
    Value::Object(args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::ModelBinding;
    use crate::model::ToolSpec;

    fn request() -> ModelRequest {
        ModelRequest::from_binding(&ModelBinding {
            provider: "scripted".into(),
            model: "demo".into(),
            ..Default::default()
        })
    }

    async fn collect(p: &ScriptedProvider, r: ModelRequest) -> Vec<ModelEvent> {
        p.stream(&r).await.unwrap().map(|e| e.unwrap()).collect().await
    }

    #[tokio::test]
    async fn demo_calls_the_first_tool_with_the_order_number_then_summarises() {
        let p = ScriptedProvider::demo();
        let mut r = request();
        r.messages.push(Message::user("Where is order 4182?"));
        r.tools = vec![ToolSpec {
            name: "get_order_status".into(),
            description: "d".into(),
            parameters: json!({"type": "object", "properties": {"orderId": {"type": "string"}}}),
        }]
        .into();
        let ev = collect(&p, r.clone()).await;
        let call = ev
            .iter()
            .find_map(|e| match e {
                ModelEvent::ToolCall(c) => Some(c.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(call.name, "get_order_status");
        assert_eq!(call.arguments, r#"{"orderId":"4182"}"#);
        r.messages.push(Message::Assistant { text: None, tool_calls: vec![call.clone()], reasoning: vec![] });
        r.messages.push(Message::Tool {
            call_id: call.id,
            name: call.name,
            content: "shipped".into(),
            is_error: false,
        });
        let ev = collect(&p, r).await;
        let text = ModelEvent::text_of(&ev);
        assert!(text.contains("get_order_status: shipped."), "{text}");
        assert_eq!(ev.last(), Some(&ModelEvent::Finish(FinishReason::Stop)));
    }

    #[tokio::test]
    async fn turns_are_chosen_by_conversation_position() {
        let p = ScriptedProvider::with_turns(
            "s",
            vec![ScriptedTurn::tool_call("t", json!({})), ScriptedTurn::text("done")],
        );
        let mut r = request();
        r.messages.push(Message::user("x"));
        assert!(collect(&p, r.clone()).await.iter().any(|e| matches!(e, ModelEvent::ToolCall(_))));
        r.messages.push(Message::Assistant { text: None, tool_calls: vec![], reasoning: vec![] });
        assert!(collect(&p, r).await.contains(&ModelEvent::TextDelta("done".into())));
    }
}
