//! Scripts: what the mock answers, turn by turn, in a format-neutral form.
//!
//! A [`MockTurn`] is one scripted answer (JSON: camelCase, every field optional). The
//! wire modules ([`super::openai`], [`super::anthropic`], [`super::responses`],
//! [`super::google`], [`super::azure`]) render a [`ResolvedTurn`] — a turn with its defaults
//! applied — as their own format.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The text a model without a script answers.
pub const DEFAULT_TEXT: &str = "Hello from the mock model.";
/// Input tokens reported when a turn does not say.
pub const DEFAULT_INPUT_TOKENS: u64 = 12;

/// One scripted model answer.
///
/// ```json
/// {"text": "Looking it up.", "toolCalls": [{"name": "lookup", "arguments": {"q": "x"}}],
///  "usage": {"input": 20, "output": 7}, "finish": "tool_calls"}
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MockTurn {
    /// Streamed in word-sized pieces that concatenate to the text exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<MockToolCall>,
    /// `None` (field absent): input 12, output = words + 1. `Some(None)` (`"usage": null`):
    /// the answer carries no usage at all. `Some(Some(u))`: exactly `u`.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<MockUsage>>,
    /// Default: `tool_calls` when the turn has tool calls, else `stop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<MockFinish>,
    /// Answer with this HTTP error status and the format's error body instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Accept the request and never send response headers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hang: bool,
    /// Send this many content chunks, then stall without closing the stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang_after_chunks: Option<usize>,
    /// Wait this long before sending response headers (overrides the server's latency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Wait this long between chunks (overrides the server's chunk delay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_delay_ms: Option<u64>,
}

/// Distinguishes `"usage": null` (present, null) from an absent field.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<MockUsage>>, D::Error> {
    Option::<MockUsage>::deserialize(d).map(Some)
}

/// A scripted tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MockToolCall {
    /// Default: `call_<n>` (OpenAI) or `toolu_<n>` (Anthropic), `n` counting the calls of
    /// the conversation from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub name: String,
    /// A JSON value is sent serialized; a JSON string is sent verbatim as the raw argument
    /// text, so a script can send invalid JSON.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// Token usage to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockUsage {
    pub input: u64,
    pub output: u64,
}

/// Why the scripted model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MockFinish {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    /// The provider's filter refused the prompt itself: Azure answers `400` with
    /// `code: content_filter`, Google a chunk with `promptFeedback.blockReason` and no
    /// candidate; the other formats end as for [`MockFinish::ContentFilter`].
    PromptFiltered,
}

impl MockFinish {
    pub fn openai(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::ContentFilter | Self::PromptFiltered => "content_filter",
        }
    }

    pub fn anthropic(self) -> &'static str {
        match self {
            Self::Stop => "end_turn",
            Self::Length => "max_tokens",
            Self::ToolCalls => "tool_use",
            Self::ContentFilter | Self::PromptFiltered => "refusal",
        }
    }
}

impl MockTurn {
    /// A text answer.
    pub fn text(text: &str) -> Self {
        Self { text: Some(text.to_owned()), ..Self::default() }
    }

    /// An answer with one tool call.
    pub fn tool_call(name: &str, arguments: Value) -> Self {
        Self::default().and_tool_call(name, arguments)
    }

    /// Adds a tool call with JSON arguments.
    pub fn and_tool_call(mut self, name: &str, arguments: Value) -> Self {
        self.tool_calls.push(MockToolCall { id: None, name: name.to_owned(), arguments });
        self
    }

    /// Adds a tool call whose argument text is sent verbatim (possibly invalid JSON).
    pub fn and_raw_tool_call(mut self, name: &str, arguments: &str) -> Self {
        self.tool_calls.push(MockToolCall {
            id: None,
            name: name.to_owned(),
            arguments: Value::String(arguments.into()),
        });
        self
    }

    /// An HTTP error answer.
    pub fn status(status: u16) -> Self {
        Self { status: Some(status), ..Self::default() }
    }

    /// Accepts the request and never answers.
    pub fn hang() -> Self {
        Self { hang: true, ..Self::default() }
    }

    pub fn with_usage(mut self, input: u64, output: u64) -> Self {
        self.usage = Some(Some(MockUsage { input, output }));
        self
    }

    /// The answer carries no usage at all (like some compatible servers).
    pub fn without_usage(mut self) -> Self {
        self.usage = Some(None);
        self
    }

    pub fn with_finish(mut self, finish: MockFinish) -> Self {
        self.finish = Some(finish);
        self
    }

    pub fn hang_after_chunks(mut self, n: usize) -> Self {
        self.hang_after_chunks = Some(n);
        self
    }

    pub fn with_delay_ms(mut self, ms: u64) -> Self {
        self.delay_ms = Some(ms);
        self
    }

    pub fn with_chunk_delay_ms(mut self, ms: u64) -> Self {
        self.chunk_delay_ms = Some(ms);
        self
    }

    /// The turn a model without a script answers.
    pub fn default_answer() -> Self {
        Self::text(DEFAULT_TEXT).with_usage(DEFAULT_INPUT_TOKENS, 6)
    }
}

/// How a script picks the turn that answers a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MockSelect {
    /// Turn N answers a request whose conversation already holds N assistant messages, so
    /// concurrent conversations sharing the script each walk it from the start. The default.
    #[default]
    ByAssistantMessages,
    /// Turn N answers the N-th request (from 0) the model got since the script was set,
    /// whatever the request holds: for callers that send one fresh message each time (a
    /// workflow manager, whose transcript is inlined in a single user message).
    ByRequest,
}

/// Which turn of `turns` answers as the `position`-th one (the last turn repeats), and the
/// number of tool calls made before it (so default call ids stay unique within a
/// conversation, or across the requests of a [`MockSelect::ByRequest`] script). `position`
/// is the assistant messages already in the request, or the request's number.
pub fn select(turns: &[MockTurn], position: usize) -> (MockTurn, usize) {
    let Some(last) = turns.last() else {
        return (MockTurn::default_answer(), 0);
    };
    let at = |k: usize| turns.get(k).unwrap_or(last);
    let earlier_calls = (0..position).map(|k| at(k).tool_calls.len()).sum();
    (at(position).clone(), earlier_calls)
}

/// A model's script: its turns, how a request picks one, and how many requests it answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Script {
    pub turns: Vec<MockTurn>,
    pub select: MockSelect,
    /// Requests answered since the script was set ([`MockSelect::ByRequest`] counts on it).
    pub served: usize,
}

impl Script {
    pub fn new(turns: Vec<MockTurn>, select: MockSelect) -> Self {
        Self { turns, select, served: 0 }
    }

    /// The turn that answers a request with `body` (counting the request), and the tool
    /// calls before it.
    pub fn answer(&mut self, body: &Value) -> (MockTurn, usize) {
        let position = match self.select {
            MockSelect::ByAssistantMessages => assistant_messages(body),
            MockSelect::ByRequest => self.served,
        };
        self.served += 1;
        select(&self.turns, position)
    }
}

/// The number of the model's turns already in a request body: `messages` with role
/// `assistant` (Chat Completions, Messages), `contents` with role `model` (Gemini), or in a
/// Responses `input` each run of items the model wrote (an assistant message and the
/// `function_call` items after it are one turn).
pub fn assistant_messages(body: &Value) -> usize {
    let role = |item: &Value| item.get("role").and_then(Value::as_str).map(str::to_owned);
    if let Some(messages) = body.get("messages").and_then(Value::as_array) {
        return messages.iter().filter(|m| role(m).as_deref() == Some("assistant")).count();
    }
    if let Some(contents) = body.get("contents").and_then(Value::as_array) {
        return contents.iter().filter(|c| role(c).as_deref() == Some("model")).count();
    }
    let Some(input) = body.get("input").and_then(Value::as_array) else { return 0 };
    let by_model = |item: &Value| {
        role(item).as_deref() == Some("assistant")
            || matches!(item.get("type").and_then(Value::as_str), Some("function_call" | "reasoning"))
    };
    let mut turns = 0;
    let mut in_turn = false;
    for item in input {
        let model = by_model(item);
        if model && !in_turn {
            turns += 1;
        }
        in_turn = model;
    }
    turns
}

/// A tool call ready to render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedCall {
    /// The scripted id, if any; the format supplies its own default otherwise.
    pub id: Option<String>,
    /// 1-based position of the call within the conversation.
    pub number: usize,
    pub name: String,
    /// The argument text exactly as it goes on the wire.
    pub arguments: String,
}

impl ResolvedCall {
    pub fn id_or(&self, prefix: &str) -> String {
        self.id.clone().unwrap_or_else(|| format!("{prefix}{}", self.number))
    }
}

/// A turn with every default applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedTurn {
    pub text: String,
    pub calls: Vec<ResolvedCall>,
    pub usage: Option<MockUsage>,
    pub finish: MockFinish,
    pub hang_after_chunks: Option<usize>,
}

impl ResolvedTurn {
    pub fn new(turn: &MockTurn, earlier_calls: usize) -> Self {
        let text = turn.text.clone().unwrap_or_default();
        let calls: Vec<ResolvedCall> = turn
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| ResolvedCall {
                id: c.id.clone(),
                number: earlier_calls + i + 1,
                name: c.name.clone(),
                arguments: match &c.arguments {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                },
            })
            .collect();
        let usage = match turn.usage {
            None => Some(MockUsage { input: DEFAULT_INPUT_TOKENS, output: text.split_whitespace().count() as u64 + 1 }),
            Some(u) => u,
        };
        let finish = turn.finish.unwrap_or(if calls.is_empty() { MockFinish::Stop } else { MockFinish::ToolCalls });
        Self { text, calls, usage, finish, hang_after_chunks: turn.hang_after_chunks }
    }

    /// The text in word-sized pieces, spaces kept, concatenating to the text exactly.
    pub fn text_pieces(&self) -> Vec<&str> {
        self.text.split_inclusive(' ').collect()
    }
}

/// Splits tool-call argument text into fragments, at least two when it has two or more
/// characters, never inside a UTF-8 character.
pub fn fragments(arguments: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = arguments.char_indices().collect();
    if chars.len() < 2 {
        return if arguments.is_empty() { Vec::new() } else { vec![arguments] };
    }
    let pieces = chars.len().div_ceil(10).max(2);
    let size = chars.len().div_ceil(pieces);
    let mut out = Vec::with_capacity(pieces);
    let mut start = 0;
    for chunk in chars.chunks(size).skip(1) {
        let end = chunk[0].0;
        out.push(&arguments[start..end]);
        start = end;
    }
    out.push(&arguments[start..]);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn usage_absent_null_and_given_are_three_different_things() {
        let absent: MockTurn = serde_json::from_value(json!({"text": "a b"})).unwrap();
        let null: MockTurn = serde_json::from_value(json!({"usage": null})).unwrap();
        let given: MockTurn = serde_json::from_value(json!({"usage": {"input": 3, "output": 4}})).unwrap();
        assert_eq!(absent.usage, None);
        assert_eq!(null.usage, Some(None));
        assert_eq!(given.usage, Some(Some(MockUsage { input: 3, output: 4 })));
        assert_eq!(ResolvedTurn::new(&absent, 0).usage, Some(MockUsage { input: 12, output: 3 }));
        assert_eq!(ResolvedTurn::new(&null, 0).usage, None);
        assert_eq!(serde_json::to_value(&null).unwrap(), json!({"usage": null}));
    }

    #[test]
    fn fragments_concatenate_and_are_at_least_two() {
        for s in ["{}", r#"{"city":"Paris"}"#, "ünïcødé ärgs", &"x".repeat(95)] {
            let f = fragments(s);
            assert!(f.len() >= 2, "{s}");
            assert_eq!(f.concat(), s);
        }
        assert_eq!(fragments(""), Vec::<&str>::new());
    }

    #[test]
    fn by_request_the_nth_request_gets_turn_n_whatever_it_holds_and_the_last_turn_repeats() {
        let turns = vec![
            MockTurn::text("plan"),
            MockTurn::tool_call("look", json!({})),
            MockTurn::text("pick"),
            MockTurn::text("done"),
        ];
        let one_user_message = json!({"messages": [{"role": "user", "content": "task"}]});
        let mut script = Script::new(turns.clone(), MockSelect::ByRequest);
        let answers: Vec<(MockTurn, usize)> = (0..6).map(|_| script.answer(&one_user_message)).collect();
        assert_eq!(
            answers.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>(),
            [&turns[..], &[turns[3].clone(), turns[3].clone()]].concat()
        );
        // Call numbers go on across requests: the second turn's call was number 1.
        assert_eq!(answers.iter().map(|(_, calls)| *calls).collect::<Vec<_>>(), [0, 0, 1, 1, 1, 1]);
        assert_eq!(script.served, 6);

        // The default mode answers the same body with the first turn every time.
        let mut by_messages = Script::new(turns.clone(), MockSelect::default());
        assert_eq!(MockSelect::default(), MockSelect::ByAssistantMessages);
        assert!((0..3).all(|_| by_messages.answer(&one_user_message).0 == turns[0]));
        let two_assistant = json!({"messages": [{"role": "assistant"}, {"role": "user"}, {"role": "assistant"}]});
        assert_eq!(by_messages.answer(&two_assistant).0, turns[2]);

        // An empty script answers the default turn in either mode.
        assert_eq!(
            Script::new(Vec::new(), MockSelect::ByRequest).answer(&one_user_message).0,
            MockTurn::default_answer()
        );
        assert_eq!(serde_json::to_value(MockSelect::ByRequest).unwrap(), json!("byRequest"));
        assert_eq!(serde_json::from_value::<MockSelect>(json!("byAssistantMessages")).unwrap(), MockSelect::default());
    }

    #[test]
    fn the_models_turns_are_counted_in_every_format() {
        let chat = json!({"messages": [{"role": "system"}, {"role": "user"}, {"role": "assistant"}, {"role": "tool"}]});
        assert_eq!(assistant_messages(&chat), 1);
        let gemini = json!({"contents": [{"role": "user"}, {"role": "model"}, {"role": "user"}, {"role": "model"}, {"role": "user"}]});
        assert_eq!(assistant_messages(&gemini), 2);
        let responses = json!({"input": [
            {"type": "message", "role": "user"},
            {"type": "message", "role": "assistant"}, {"type": "function_call"}, {"type": "function_call"},
            {"type": "function_call_output"}, {"type": "function_call_output"},
            {"type": "function_call"},
            {"type": "function_call_output"},
        ]});
        assert_eq!(assistant_messages(&responses), 2);
        assert_eq!(assistant_messages(&json!({"input": "just text"})), 0);
    }

    #[test]
    fn the_last_turn_repeats_and_call_numbers_continue() {
        let turns = vec![MockTurn::tool_call("a", json!({})).and_tool_call("b", json!({})), MockTurn::text("x")];
        assert_eq!(select(&turns, 0).1, 0);
        assert_eq!(select(&turns, 1), (MockTurn::text("x"), 2));
        assert_eq!(select(&turns, 5).0, MockTurn::text("x"));
        assert_eq!(select(&[], 3).0, MockTurn::default_answer());
    }
}
