//! The answers a replay in `ReplayTools` mode gives its tool calls: the source run's
//! recorded calls, each used once. A call matches a recorded one with the same tool name and
//! the same arguments (as JSON values, so spacing and key order do not matter), earliest
//! first. A call with no match is a mismatch: the replay stops rather than run anything for
//! real.

use std::sync::Mutex;

use serde_json::Value;

use crate::events::ToolCallStatus;
use crate::model::ToolCall;
use crate::runs::store::ToolCallRecord;

/// A recorded answer: the status and the text the model got.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: ToolCallStatus,
    pub result: String,
    pub error: Option<String>,
}

/// The source run's recorded calls, not yet used.
#[derive(Debug, Default)]
pub struct Recorded {
    calls: Mutex<Vec<(String, Value, Answer)>>,
}

impl Recorded {
    /// The calls that ended (a call that never did has no answer to give).
    pub fn new(records: Vec<ToolCallRecord>) -> Self {
        let calls = records
            .into_iter()
            .filter(|r| !matches!(r.status, ToolCallStatus::Started | ToolCallStatus::AwaitingApproval))
            .map(|r| {
                let arguments = parse(&r.arguments);
                let text = r.result.clone().or_else(|| r.error.clone()).unwrap_or_default();
                (r.tool_name, arguments, Answer { status: r.status, result: text, error: r.error })
            })
            .collect();
        Self { calls: Mutex::new(calls) }
    }

    /// The answer for `call`, taken so it is not given twice; `None` on a mismatch.
    pub fn take(&self, call: &ToolCall) -> Option<Answer> {
        let arguments = parse(&call.arguments);
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        let at = calls.iter().position(|(name, args, _)| *name == call.name && *args == arguments)?;
        Some(calls.remove(at).2)
    }
}

fn parse(arguments: &str) -> Value {
    match arguments.trim() {
        "" => Value::Object(Default::default()),
        text => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::RunId;

    fn record(name: &str, arguments: &str, result: &str) -> ToolCallRecord {
        let call = ToolCall { id: "c".into(), name: name.into(), arguments: arguments.into() };
        ToolCallRecord {
            result: Some(result.into()),
            ..ToolCallRecord::opened(
                RunId(uuid::Uuid::nil()),
                call,
                None,
                ToolCallStatus::Succeeded,
                chrono::Utc::now(),
            )
        }
    }

    #[test]
    fn each_recorded_answer_is_given_once_to_a_call_with_the_same_name_and_arguments() {
        let recorded = Recorded::new(vec![
            record("lookup", r#"{"id": 1, "deep": true}"#, "first"),
            record("lookup", r#"{"id": 1, "deep": true}"#, "second"),
            record("lookup", r#"{"id": 2}"#, "other"),
        ]);
        let call = |args: &str| ToolCall { id: "x".into(), name: "lookup".into(), arguments: args.into() };
        // Key order and spacing do not matter; the earliest unused answer comes first.
        assert_eq!(recorded.take(&call(r#"{"deep":true,"id":1}"#)).map(|a| a.result), Some("first".into()));
        assert_eq!(recorded.take(&call(r#"{"id":2}"#)).map(|a| a.result), Some("other".into()));
        assert_eq!(recorded.take(&call(r#"{"id":1,"deep":true}"#)).map(|a| a.result), Some("second".into()));
        assert_eq!(recorded.take(&call(r#"{"id":1,"deep":true}"#)), None, "used up");
        assert_eq!(recorded.take(&call(r#"{"id":3}"#)), None, "never called so");
        let other = ToolCall { id: "y".into(), name: "refund".into(), arguments: r#"{"id":2}"#.into() };
        assert_eq!(recorded.take(&other), None);
    }
}
