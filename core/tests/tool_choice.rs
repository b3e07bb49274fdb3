//! `tool_choice` in each provider's words, sent only beside tools: what an OpenAI client's
//! `tool_choice` becomes on the wire to OpenAI (both APIs), Anthropic and Google.

#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};
use tracon_core::definition::{ModelBinding, ResponseFormat};
use tracon_core::model::{ModelRequest, ToolChoice, ToolSpec, anthropic, google, openai, openai_responses};

fn request(choice: ToolChoice, tools: bool) -> ModelRequest {
    let mut r =
        ModelRequest::from_binding(&ModelBinding { provider: "p".into(), model: "m".into(), ..Default::default() });
    r.messages = vec![tracon_core::model::Message::user("hi")];
    if tools {
        r.tools =
            vec![ToolSpec { name: "lookup".into(), description: "d".into(), parameters: json!({"type": "object"}) }]
                .into();
    }
    r.tool_choice = choice;
    r
}

fn bodies(choice: ToolChoice, tools: bool) -> [Value; 4] {
    let r = request(choice, tools);
    [
        openai::build_body(&r, openai::Flavor::OpenAi),
        openai_responses::build_body(&r),
        anthropic::build_body(&r, 1024),
        google::build_body(&r),
    ]
}

#[test]
fn each_choice_is_said_in_each_providers_words() {
    let named = ToolChoice::Function("lookup".into());
    let [chat, responses, claude, gemini] = bodies(ToolChoice::None, true);
    assert_eq!((chat["tool_choice"].clone(), responses["tool_choice"].clone()), (json!("none"), json!("none")));
    assert_eq!(claude["tool_choice"], json!({"type": "none"}));
    assert_eq!(gemini["toolConfig"], json!({"functionCallingConfig": {"mode": "NONE"}}));

    let [chat, responses, claude, gemini] = bodies(ToolChoice::Required, true);
    assert_eq!((chat["tool_choice"].clone(), responses["tool_choice"].clone()), (json!("required"), json!("required")));
    assert_eq!(claude["tool_choice"]["type"], "any");
    assert_eq!(gemini["toolConfig"]["functionCallingConfig"]["mode"], "ANY");

    let [chat, responses, claude, gemini] = bodies(named, true);
    assert_eq!(chat["tool_choice"], json!({"type": "function", "function": {"name": "lookup"}}));
    assert_eq!(responses["tool_choice"], json!({"type": "function", "name": "lookup"}));
    assert_eq!(
        (claude["tool_choice"]["type"].clone(), claude["tool_choice"]["name"].clone()),
        (json!("tool"), json!("lookup"))
    );
    assert_eq!(
        gemini["toolConfig"]["functionCallingConfig"],
        json!({"mode": "ANY", "allowedFunctionNames": ["lookup"]})
    );
}

#[test]
fn auto_is_left_unsaid_and_no_choice_goes_without_tools() {
    let [chat, responses, claude, gemini] = bodies(ToolChoice::Auto, true);
    assert!(chat.get("tool_choice").is_none() && responses.get("tool_choice").is_none());
    assert_eq!(claude["tool_choice"]["type"], "auto");
    assert!(gemini.get("toolConfig").is_none());
    for body in bodies(ToolChoice::Required, false) {
        assert!(body.get("tool_choice").is_none() && body.get("toolConfig").is_none(), "{body}");
    }
}

#[test]
fn anthropics_answer_tool_is_still_forced_when_tools_are_not_to_be_called() {
    let mut r = request(ToolChoice::None, true);
    r.response_format = Some(ResponseFormat::Json);
    let body = anthropic::build_body(&r, 1024);
    assert_eq!(body["tool_choice"]["type"], "tool");
    assert_ne!(body["tool_choice"]["name"], "lookup");
}
