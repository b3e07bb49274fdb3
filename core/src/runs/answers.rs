//! Answers to tool calls that a caller sends (an OpenAI client's `tool` messages and
//! `function_call_output` items): [`call_answer`] says whether the call is waiting, answered
//! already, or no call at all, so each refusal says which.

use crate::model::Message;

/// What a tool answer's call id names in the conversation before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallAnswer {
    /// A call waiting for its answer (the tool's name).
    Open(String),
    /// A call of the last assistant message that an earlier answer already answered.
    AlreadyAnswered,
    /// No call of the last assistant message.
    Unknown,
}

/// Where `call_id` stands in `history`: open, answered already, or no call at all — so a
/// caller that answers one call twice is told so, not that the call does not exist.
pub fn call_answer(history: &[Message], call_id: &str) -> CallAnswer {
    if let Some(call) = crate::engine::open_calls(history).into_iter().find(|c| c.id == call_id) {
        return CallAnswer::Open(call.name);
    }
    let trailing = history.iter().rev().take_while(|m| matches!(m, Message::Tool { .. })).count();
    let (before, answers) = history.split_at(history.len() - trailing);
    let asked = matches!(before.last(), Some(Message::Assistant { tool_calls, .. }) if tool_calls.iter().any(|c| c.id == call_id));
    let answered = answers.iter().any(|m| matches!(m, Message::Tool { call_id: id, .. } if id == call_id));
    if asked && answered { CallAnswer::AlreadyAnswered } else { CallAnswer::Unknown }
}
