//! A2A's objects in their ProtoJSON form (camelCase members, enum names as strings), read
//! from requests and written from runs: a task is a run, its `contextId` the run's session,
//! its one artifact (`answer`) the run's final text.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use tracon_core::runs::store::{RunRecord, RunStatus};

use super::rpc::{CONTENT_TYPE_NOT_SUPPORTED, RpcError};

/// The one artifact a task produces: the agent's answer.
pub const ANSWER_ARTIFACT: &str = "answer";

/// A message as a client sends it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InMessage {
    #[serde(default)]
    pub message_id: String,
    #[serde(default)]
    pub context_id: Option<String>,
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub parts: Vec<InPart>,
}

/// A part: exactly one of `text`, `raw`, `url` or `data`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InPart {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub raw: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub data: Option<Value>,
    #[serde(default)]
    pub media_type: Option<String>,
}

/// A request's own `tenant` member must be the key's tenant (or absent): the key decides.
pub fn check_tenant(tenant: &tracon_core::names::TenantId, given: Option<&str>) -> Result<(), RpcError> {
    match given {
        Some(t) if !t.is_empty() && t != tenant.as_str() => {
            Err(RpcError::params("'tenant' is decided by the API key; leave it out."))
        }
        _ => Ok(()),
    }
}

/// `historyLength`: at least 0.
pub fn history_length(value: Option<i64>) -> Result<Option<usize>, RpcError> {
    value.map(|n| usize::try_from(n).map_err(|_| RpcError::params("'historyLength' is at least 0."))).transpose()
}

/// The input modes the agents accept and the output mode they answer in.
pub const INPUT_MODES: [&str; 2] = ["text/plain", "application/json"];
pub const OUTPUT_MODES: [&str; 1] = ["text/plain"];

impl InMessage {
    /// The run's message: the text parts, and `data` parts as their JSON text, one per
    /// paragraph. Files (`raw`, `url`) are refused with `ContentTypeNotSupported`.
    pub fn text(&self) -> Result<String, RpcError> {
        if self.message_id.trim().is_empty() {
            return Err(RpcError::params("'message.messageId' is required."));
        }
        if !matches!(self.role.as_str(), "ROLE_USER" | "user") {
            return Err(RpcError::params("'message.role' must be ROLE_USER."));
        }
        if self.parts.is_empty() {
            return Err(RpcError::params("'message.parts' needs at least one part."));
        }
        let mut paragraphs = Vec::with_capacity(self.parts.len());
        for part in &self.parts {
            if let Some(media) = &part.media_type {
                let mime = media.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
                if !mime.is_empty() && !INPUT_MODES.contains(&mime.as_str()) {
                    return Err(RpcError::new(
                        CONTENT_TYPE_NOT_SUPPORTED,
                        format!(
                            "This agent reads {}; a part of another media type is not accepted.",
                            INPUT_MODES.join(" and ")
                        ),
                    ));
                }
            }
            match (&part.text, &part.data, part.raw.is_some() || part.url.is_some()) {
                (Some(text), None, false) => paragraphs.push(text.clone()),
                (None, Some(data), false) => paragraphs.push(data.to_string()),
                (None, None, true) => {
                    return Err(RpcError::new(
                        CONTENT_TYPE_NOT_SUPPORTED,
                        "This agent reads text and JSON data parts; file parts ('raw', 'url') are not accepted.",
                    ));
                }
                _ => return Err(RpcError::params("Each part carries exactly one of 'text', 'raw', 'url' or 'data'.")),
            }
        }
        Ok(paragraphs.join("\n\n"))
    }
}

/// Whether a client that accepts `modes` can read our answers (an empty list accepts all).
pub fn accepts_text(modes: &[String]) -> bool {
    modes.is_empty()
        || modes.iter().any(|m| {
            let m = m.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
            matches!(m.as_str(), "text/plain" | "text/*" | "*/*")
        })
}

/// A task's state for its run ([`tracon_core::webhooks::a2a::task_state`]).
pub fn state(run: &RunRecord) -> &'static str {
    tracon_core::webhooks::a2a::task_state(run.status, run.cancel_requested)
}

/// Whether a task in `state` is over.
pub fn is_terminal(state: &str) -> bool {
    matches!(state, "TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_CANCELED" | "TASK_STATE_REJECTED")
}

/// A state's status message, when the state needs one said.
pub fn status_message(status: RunStatus, failure: Option<&tracon_core::failure::RunFailure>) -> Option<String> {
    match status {
        RunStatus::Failed | RunStatus::Canceled => failure.map(|f| f.message.clone()),
        RunStatus::AwaitingApproval | RunStatus::AwaitingInput => Some(
            "The run stopped for a person's decision, which an external caller cannot give; it waits in Tracon's approval mailbox.".into(),
        ),
        _ => None,
    }
}

pub fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// An agent's message with one text part.
pub fn agent_message(task_id: &str, context_id: &str, text: &str, id: &str) -> Value {
    json!({
        "messageId": id,
        "contextId": context_id,
        "taskId": task_id,
        "role": "ROLE_AGENT",
        "parts": [{ "text": text }],
    })
}

/// A status: its state, when, and a message when there is something to say.
pub fn status(task_id: &str, context_id: &str, state: &str, at: DateTime<Utc>, message: Option<&str>) -> Value {
    let mut status = json!({ "state": state, "timestamp": timestamp(at) });
    if let Some(text) = message {
        status["message"] = agent_message(task_id, context_id, text, &format!("{task_id}-status"));
    }
    status
}

/// The answer artifact.
pub fn answer_artifact(text: &str) -> Value {
    json!({ "artifactId": ANSWER_ARTIFACT, "name": ANSWER_ARTIFACT, "parts": [{ "text": text }] })
}

/// A task from its run: `answer` is the final text (completed runs), `input` the recorded
/// message (the history's user turn, when input recording is on and `history` is asked).
pub fn task(run: &RunRecord, answer: Option<&str>, input: Option<&str>, history: Option<usize>) -> Value {
    let id = run.id.to_string();
    let context = run.session_id.clone().unwrap_or_default();
    let state = state(run);
    let at = run.ended_at.unwrap_or(run.started_at);
    let message = status_message(run.status, run.error.as_ref());
    let mut task = json!({
        "id": id,
        "contextId": context,
        "status": status(&id, &context, state, at, message.as_deref()),
        "metadata": {
            "tracon": {
                "runId": id,
                "agentName": run.agent_name,
                "agentVersion": run.agent_version,
                "runStatus": run.status.as_str(),
                "usage": run.usage,
            }
        },
    });
    if let Some(text) = answer.filter(|_| run.status == RunStatus::Completed) {
        task["artifacts"] = json!([answer_artifact(text)]);
    }
    let mut turns = Vec::new();
    if let Some(text) = input {
        turns.push(json!({
            "messageId": format!("{id}-input"),
            "contextId": context,
            "taskId": id,
            "role": "ROLE_USER",
            "parts": [{ "text": text }],
        }));
    }
    if let Some(text) = answer.filter(|_| run.status == RunStatus::Completed) {
        turns.push(agent_message(&id, &context, text, &format!("{id}-answer")));
    }
    let keep = history.unwrap_or(turns.len()).min(turns.len());
    if keep > 0 {
        task["history"] = Value::Array(turns.split_off(turns.len() - keep));
    }
    task
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(text: Option<&str>, url: Option<&str>, media: Option<&str>) -> InPart {
        InPart {
            text: text.map(str::to_owned),
            raw: None,
            url: url.map(str::to_owned),
            data: None,
            media_type: media.map(str::to_owned),
        }
    }

    fn message(parts: Vec<InPart>) -> InMessage {
        InMessage { message_id: "m1".into(), context_id: None, task_id: None, role: "ROLE_USER".into(), parts }
    }

    #[test]
    fn text_parts_are_read_and_files_are_an_unsupported_content_type() {
        assert_eq!(message(vec![part(Some("a"), None, None), part(Some("b"), None, None)]).text().unwrap(), "a\n\nb");
        let file = message(vec![part(None, Some("https://x/y.png"), None)]).text().unwrap_err();
        assert_eq!(file.code, CONTENT_TYPE_NOT_SUPPORTED);
        let image = message(vec![part(Some("x"), None, Some("image/png"))]).text().unwrap_err();
        assert_eq!(image.code, CONTENT_TYPE_NOT_SUPPORTED);
        assert_eq!(message(vec![]).text().unwrap_err().code, super::super::rpc::INVALID_PARAMS);
        assert!(accepts_text(&[]));
        assert!(accepts_text(&["application/json".into(), "text/plain".into()]));
        assert!(!accepts_text(&["image/png".into()]));
    }
}
