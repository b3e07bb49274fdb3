//! OpenAI's Responses and Conversations APIs through the router: responses whole and
//! streamed, chaining with `previous_response_id`, conversations (a reservation, their
//! items, a lost race), tenancy and session ownership, and OpenAI's envelope for every refusal.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::Utc;
use serde_json::{Value, json};
use tracon_core::definition::AgentDefinition;
use tracon_core::keys::Scope;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider};
use tracon_core::names::TenantId;
use tracon_core::ports::tokio_rt;
use tracon_core::runs::store::RunFilter;
use tracon_core::runtime::{Runtime, RuntimeBuilder, RuntimeSettings};
use tracon_core::sessions::SessionWrite;
use tracon_core::sessions::ownership::SessionOwnership;
use tracon_handlers::{AppState, HttpSettings};

const TOKEN: &str = "a-long-enough-test-token";

/// What the model was sent: the system text and the messages.
type Seen = Arc<Mutex<Vec<(Option<String>, Vec<Message>)>>>;

struct App {
    router: Router,
    runtime: Arc<Runtime>,
    state: AppState,
    seen: Seen,
}

/// The `support` agent answers "Answer N." to its N-th call.
fn app_with(http: HttpSettings) -> App {
    app_owned(http, SessionOwnership::default())
}

/// [`app_with`], with session ownership as given.
fn app_owned(http: HttpSettings, session_ownership: SessionOwnership) -> App {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let script = ScriptedProvider::from_fn("script", move |req| {
        let mut log = log.lock().unwrap();
        log.push((req.system.clone(), req.messages.clone()));
        ScriptedTurn::text(&format!("Answer {}.", log.len())).with_usage(11, 5)
    });
    let runtime = Arc::new(
        RuntimeBuilder::new(tokio_rt::platform())
            .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
            .add_agent(AgentDefinition::new("support", "script", "m").with_instructions("You are the support agent."))
            .attribution(Arc::new(support::TestUsers))
            .settings(RuntimeSettings { session_ownership, ..RuntimeSettings::default() })
            .build()
            .unwrap(),
    );
    let state = AppState::new(runtime.clone(), http);
    App { router: tracon_handlers::router(state.clone()), runtime, state, seen }
}

fn app() -> App {
    app_with(HttpSettings::default())
}

struct Call<'a> {
    bearer: Option<&'a str>,
    user: Option<&'a str>,
}

const ANON: Call<'static> = Call { bearer: None, user: None };

async fn send(app: &Router, who: &Call<'_>, method: Method, path: &str, body: Option<Value>) -> (StatusCode, String) {
    let call = support::call(method, path).bearer_opt(who.bearer).header_opt("x-test-user", who.user);
    let reply = call.json(body).send(app).await;
    (reply.status, reply.text())
}

async fn call(app: &Router, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let (status, text) = send(app, &ANON, method, path, body).await;
    (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}")))
}

async fn respond(app: &Router, body: Value) -> Value {
    let (status, answer) = call(app, Method::POST, "/v1/responses", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

fn output_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|item| item["content"].as_array().unwrap().iter())
        .map(|part| part["text"].as_str().unwrap().to_owned())
        .collect()
}

/// A stream's events: `(event name, data)`.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|f| !f.is_empty())
        .map(|frame| {
            let mut lines = frame.lines();
            let event = lines.next().unwrap().strip_prefix("event: ").unwrap_or_else(|| panic!("{frame}"));
            let data = lines.next().unwrap().strip_prefix("data: ").unwrap_or_else(|| panic!("{frame}"));
            (event.to_owned(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

#[tokio::test]
async fn a_response_is_a_recorded_run_saved_as_a_session_named_after_it() {
    let App { router, runtime, seen, .. } = app();
    let body = json!({"model": "support", "instructions": "Answer in one sentence.", "temperature": 0.2,
    "input": [
        {"role": "developer", "content": "Never promise dates."},
        {"role": "user", "content": [{"type": "input_text", "text": "Where is order 4182?"}]},
    ]});
    let answer = respond(&router, body).await;
    assert_eq!(answer["object"], "response");
    assert_eq!(answer["status"], "completed");
    assert_eq!(answer["model"], "support");
    assert_eq!(answer["instructions"], "Answer in one sentence.");
    assert_eq!((answer["store"].clone(), answer["error"].clone()), (json!(true), Value::Null));
    assert_eq!(answer["tools"], json!([]));
    let item = &answer["output"][0];
    assert_eq!(
        (item["type"].as_str(), item["role"].as_str(), item["status"].as_str()),
        (Some("message"), Some("assistant"), Some("completed"))
    );
    assert!(item["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        item["content"],
        json!([{"type": "output_text", "text": "Answer 1.", "annotations": [], "logprobs": []}])
    );
    assert_eq!(
        answer["usage"],
        json!({"input_tokens": 11, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 16})
    );

    // The caller's instructions follow the agent's own; the developer item joins them.
    let (system, messages) = seen.lock().unwrap()[0].clone();
    assert_eq!(
        system.as_deref(),
        Some("You are the support agent.\n\nAnswer in one sentence.\n\nNever promise dates.")
    );
    assert_eq!(messages, [Message::User { text: "Where is order 4182?".into() }]);

    // A recorded run, whose id the response carries; the conversation is a session by that id.
    let tenant = TenantId::default_tenant();
    let runs = runtime.stores.runs.list_runs(&tenant, &RunFilter::default(), 0, 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    let id = answer["id"].as_str().unwrap();
    assert_eq!(id, format!("resp_{}", runs[0].id.0.simple()));
    let items = runtime.stores.sessions.items(&tenant, id).await.unwrap();
    assert_eq!(items.len(), 2, "{items:?}");

    // Read back.
    let (status, stored) = call(&router, Method::GET, &format!("/v1/responses/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{stored}");
    assert_eq!((stored["id"].as_str(), stored["status"].as_str()), (Some(id), Some("completed")));
    assert_eq!(stored["output"], answer["output"]);
    assert_eq!(stored["usage"], answer["usage"]);
}

#[tokio::test]
async fn a_streamed_response_sends_the_responses_events_in_order() {
    let App { router, .. } = app();
    let (status, text) = send(
        &router,
        &ANON,
        Method::POST,
        "/v1/responses",
        Some(json!({"model": "support", "input": "Where is order 4182?", "stream": true})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let events = events(&text);
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    let deltas = names.iter().filter(|n| **n == "response.output_text.delta").count();
    assert!(deltas >= 2, "the text arrives in pieces: {names:?}");
    let mut expected =
        vec!["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"];
    expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(names, expected);
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!((data["type"].as_str(), data["sequence_number"].as_u64()), (Some(name.as_str()), Some(i as u64)));
    }
    let created = &events[0].1["response"];
    assert_eq!((created["status"].as_str(), created["output"].clone()), (Some("in_progress"), json!([])));
    let item_id = events[2].1["item"]["id"].as_str().unwrap().to_owned();
    let streamed: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| {
            assert_eq!((d["item_id"].as_str(), d["output_index"].as_u64()), (Some(item_id.as_str()), Some(0)));
            d["delta"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(streamed, "Answer 1.");
    let done = &events.last().unwrap().1["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["id"], created["id"]);
    assert_eq!(output_text(done), "Answer 1.");
    assert_eq!(done["output"][0]["id"].as_str(), Some(item_id.as_str()));
    assert_eq!(done["usage"]["total_tokens"], 16);

    // The streamed response was stored like any other.
    let id = done["id"].as_str().unwrap();
    let (status, stored) = call(&router, Method::GET, &format!("/v1/responses/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{stored}");
    assert_eq!(stored["output"], done["output"]);
}

#[tokio::test]
async fn previous_response_id_chains_turns_and_each_response_keeps_the_whole_conversation() {
    let App { router, runtime, seen, .. } = app();
    let first = respond(&router, json!({"model": "support", "input": "My order is 4182."})).await;
    let second = respond(
        &router,
        json!({"model": "support", "input": "When does it ship?", "previous_response_id": first["id"], "stream": false}),
    )
    .await;
    assert_eq!(second["previous_response_id"], first["id"]);
    // A streamed third turn chains the same way.
    let (status, text) = send(
        &router,
        &ANON,
        Method::POST,
        "/v1/responses",
        Some(json!({"model": "support", "input": "Thanks!", "previous_response_id": second["id"], "stream": true})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let third = events(&text).last().unwrap().1["response"].clone();
    assert_eq!((third["status"].as_str(), output_text(&third).as_str()), (Some("completed"), "Answer 3."));

    // The model saw the earlier turns, in order.
    let (_, messages) = seen.lock().unwrap()[2].clone();
    assert_eq!(
        messages,
        [
            Message::User { text: "My order is 4182.".into() },
            Message::Assistant { text: Some("Answer 1.".into()), tool_calls: vec![], reasoning: vec![] },
            Message::User { text: "When does it ship?".into() },
            Message::Assistant { text: Some("Answer 2.".into()), tool_calls: vec![], reasoning: vec![] },
            Message::User { text: "Thanks!".into() },
        ]
    );
    // Each response is its own session with the conversation up to it; the sources are unchanged.
    let tenant = TenantId::default_tenant();
    for (response, len) in [(&first, 2), (&second, 4), (&third, 6)] {
        let id = response["id"].as_str().unwrap();
        assert_eq!(runtime.stores.sessions.items(&tenant, id).await.unwrap().len(), len, "{id}");
    }

    // Branching: a second answer to the first turn leaves the chain above alone.
    let again =
        respond(&router, json!({"model": "support", "input": "Cancel it.", "previous_response_id": first["id"]})).await;
    assert_eq!(output_text(&again), "Answer 4.");
    assert_eq!(seen.lock().unwrap()[3].1.len(), 3);

    // store: false saves nothing, and chains like the others.
    let unsaved = respond(
        &router,
        json!({"model": "support", "input": "One more?", "previous_response_id": third["id"], "store": false}),
    )
    .await;
    assert_eq!(unsaved["store"], false);
    assert_eq!(seen.lock().unwrap()[4].1.len(), 7);
    let id = unsaved["id"].as_str().unwrap();
    assert!(runtime.stores.sessions.get(&tenant, id).await.unwrap().is_none());
    let (status, error) = call(&router, Method::GET, &format!("/v1/responses/{id}"), None).await;
    assert_eq!((status, error["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("response_not_found")));
    let (status, error) = call(
        &router,
        Method::POST,
        "/v1/responses",
        Some(json!({"model": "support", "input": "Hm?", "previous_response_id": id})),
    )
    .await;
    assert_eq!(
        (status, error["error"]["code"].as_str(), error["error"]["param"].as_str()),
        (StatusCode::NOT_FOUND, Some("previous_response_not_found"), Some("previous_response_id")),
        "{error}"
    );
}

#[tokio::test]
async fn a_conversation_is_a_reservation_whose_items_grow_with_each_response() {
    let App { router, seen, .. } = app();
    let (status, created) = call(
        &router,
        Method::POST,
        "/v1/conversations",
        Some(json!({"items": [
            {"type": "message", "role": "user", "content": "Hello"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Hi, how can I help?"}]},
        ]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let conv = created["id"].as_str().unwrap().to_owned();
    assert!(conv.starts_with("conv_"), "{conv}");
    assert_eq!((created["object"].as_str(), created["metadata"].clone()), (Some("conversation"), json!({})));
    assert!(created["created_at"].as_i64().unwrap() > 0);

    // Valid before any response carries it.
    let (status, read) = call(&router, Method::GET, &format!("/v1/conversations/{conv}"), None).await;
    assert_eq!((status, read.clone()), (StatusCode::OK, created.clone()));

    let answer = respond(
        &router,
        json!({"model": "support", "conversation": conv, "input": [
            {"role": "user", "content": "Where is order 4182?"},
        ]}),
    )
    .await;
    assert_eq!(answer["conversation"], json!({"id": conv}));
    assert_eq!(seen.lock().unwrap()[0].1.len(), 3, "the model saw the conversation's items");
    // `{"id": …}` names it too; earlier input items join the conversation before the turn.
    let (status, text) = send(
        &router,
        &ANON,
        Method::POST,
        "/v1/responses",
        Some(json!({"model": "support", "conversation": {"id": conv}, "stream": true, "input": [
            {"role": "assistant", "content": "(an aside)"},
            {"role": "user", "content": "And order 77?"},
        ]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(events(&text).last().unwrap().0, "response.completed", "{text}");
    assert_eq!(seen.lock().unwrap()[1].1.len(), 6);

    // The items, newest first by default; ascending on request; paged.
    let (status, page) = call(&router, Method::GET, &format!("/v1/conversations/{conv}/items"), None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!((page["object"].as_str(), page["has_more"].as_bool()), (Some("list"), Some(false)));
    let texts = |page: &Value| -> Vec<String> {
        page["data"].as_array().unwrap().iter().map(|i| i["content"][0]["text"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(
        texts(&page),
        [
            "Answer 2.",
            "And order 77?",
            "(an aside)",
            "Answer 1.",
            "Where is order 4182?",
            "Hi, how can I help?",
            "Hello"
        ]
    );
    let first = &page["data"][6];
    assert_eq!(
        (first["type"].as_str(), first["role"].as_str(), first["status"].as_str()),
        (Some("message"), Some("user"), Some("completed"))
    );
    assert_eq!(first["content"], json!([{"type": "input_text", "text": "Hello"}]));
    assert_eq!(page["data"][0]["content"][0]["type"], "output_text");
    assert_eq!(page["first_id"], page["data"][0]["id"]);
    assert_eq!(page["last_id"], page["data"][6]["id"]);
    let (_, asc) = call(&router, Method::GET, &format!("/v1/conversations/{conv}/items?order=asc&limit=3"), None).await;
    assert_eq!(texts(&asc), ["Hello", "Hi, how can I help?", "Where is order 4182?"]);
    assert_eq!(asc["has_more"], true);
    let after = asc["last_id"].as_str().unwrap();
    let (_, next) =
        call(&router, Method::GET, &format!("/v1/conversations/{conv}/items?order=asc&limit=3&after={after}"), None)
            .await;
    assert_eq!(texts(&next), ["Answer 1.", "(an aside)", "And order 77?"]);

    // A response in a conversation reads back from it.
    let id = answer["id"].as_str().unwrap();
    let (status, stored) = call(&router, Method::GET, &format!("/v1/responses/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{stored}");
    assert_eq!((output_text(&stored).as_str(), stored["conversation"].clone()), ("Answer 1.", json!({"id": conv})));

    // An id never reserved is refused; deleting ends the conversation.
    let (status, error) = call(
        &router,
        Method::POST,
        "/v1/responses",
        Some(json!({"model": "support", "conversation": "conv_nothing", "input": "Hi"})),
    )
    .await;
    assert_eq!(
        (status, error["error"]["code"].as_str(), error["error"]["param"].as_str()),
        (StatusCode::NOT_FOUND, Some("conversation_not_found"), Some("conversation"))
    );
    let (status, deleted) = call(&router, Method::DELETE, &format!("/v1/conversations/{conv}"), None).await;
    assert_eq!(
        (status, deleted),
        (StatusCode::OK, json!({"id": conv, "object": "conversation.deleted", "deleted": true}))
    );
    for path in [format!("/v1/conversations/{conv}"), format!("/v1/conversations/{conv}/items")] {
        let (status, error) = call(&router, Method::GET, &path, None).await;
        assert_eq!((status, error["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("conversation_not_found")));
    }
    let (status, _) = call(&router, Method::DELETE, &format!("/v1/conversations/{conv}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Where the rival turn writes: the runtime and the conversation.
type Rival = (Arc<Runtime>, String);

#[tokio::test]
async fn a_turn_that_loses_the_race_for_its_conversation_is_a_409_session_conflict() {
    // The model call lets another turn save the conversation first.
    let holder: Arc<Mutex<Option<Rival>>> = Arc::default();
    let race = holder.clone();
    let script = ScriptedProvider::from_fn("script", move |_| {
        if let Some((runtime, conv)) = race.lock().unwrap().clone() {
            let tenant = TenantId::default_tenant();
            let sessions = runtime.stores.sessions.clone();
            let write = SessionWrite {
                agent_name: "support".into(),
                run_id: None,
                messages: vec![Message::User { text: "the other turn".into() }],
                owner_user_id: None,
                now: Utc::now(),
            };
            // The in-memory store never waits: its futures finish on their first poll.
            futures::executor::block_on(async {
                let version = sessions.get(&tenant, &conv).await.unwrap().unwrap().version;
                sessions.try_append(&tenant, &conv, version, &write).await.unwrap();
            });
        }
        ScriptedTurn::text("Answer.")
    });
    let runtime = Arc::new(
        RuntimeBuilder::new(tokio_rt::platform())
            .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
            .add_agent(AgentDefinition::new("support", "script", "m"))
            .build()
            .unwrap(),
    );
    let router = tracon_handlers::router(AppState::new(runtime.clone(), HttpSettings::default()));
    let (_, created) = call(&router, Method::POST, "/v1/conversations", Some(json!({}))).await;
    let conv = created["id"].as_str().unwrap().to_owned();
    *holder.lock().unwrap() = Some((runtime.clone(), conv.clone()));

    let body = json!({"model": "support", "conversation": conv, "input": "Hi"});
    let (status, error) = call(&router, Method::POST, "/v1/responses", Some(body.clone())).await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(
        (error["error"]["type"].as_str(), error["error"]["code"].as_str()),
        (Some("session_conflict"), Some("session_conflict"))
    );

    // Streamed, the headers are out: the conflict arrives as an `error` event, then `response.failed`.
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let (status, text) = send(&router, &ANON, Method::POST, "/v1/responses", Some(streamed)).await;
    assert_eq!(status, StatusCode::OK);
    let events = events(&text);
    let (name, error) = &events[events.len() - 2];
    assert_eq!((name.as_str(), error["code"].as_str()), ("error", Some("session_conflict")), "{text}");
    let (name, failed) = events.last().unwrap();
    assert_eq!(name, "response.failed");
    assert_eq!(
        (failed["response"]["status"].as_str(), failed["response"]["error"]["code"].as_str()),
        (Some("failed"), Some("session_conflict"))
    );
    // Only the winning turns are in the conversation.
    let items = runtime.stores.sessions.items(&TenantId::default_tenant(), &conv).await.unwrap();
    assert!(items.iter().all(|i| i.message == Message::User { text: "the other turn".into() }), "{items:?}");
}

#[tokio::test]
async fn requests_that_would_change_meaning_if_ignored_are_refused_with_their_param() {
    let App { router, runtime, .. } = app();
    let ask = |extra: Value| {
        let mut body = json!({"model": "support", "input": "Where is order 4182?"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    for (body, param) in [
        (ask(json!({"tools": [{"type": "function", "name": "x", "parameters": {}}]})), "tools"),
        (ask(json!({"tool_choice": "required"})), "tool_choice"),
        (ask(json!({"text": {"format": {"type": "json_schema", "name": "x", "schema": {}}}})), "text.format"),
        (ask(json!({"background": true})), "background"),
        (ask(json!({"n": 2})), "n"),
        (ask(json!({"frobnicate": 1})), "frobnicate"),
        (ask(json!({"stream": "yes"})), "stream"),
        (ask(json!({"store": "no"})), "store"),
        (ask(json!({"conversation": "conv_x", "previous_response_id": "resp_x"})), "previous_response_id"),
        (ask(json!({"conversation": "conv_x", "store": false})), "store"),
        (json!({"model": "support"}), "input"),
        (json!({"model": "support", "input": []}), "input"),
        (json!({"input": "hi"}), "model"),
        (json!({"model": "support", "input": [{"role": "assistant", "content": "x"}]}), "input"),
        (json!({"model": "support", "input": [{"role": "tool", "content": "x"}]}), "input[0].role"),
        (
            // An output for a call nobody made (see tests/client_tools.rs for the round trip).
            json!({"model": "support", "input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}),
            "input",
        ),
        (
            json!({"model": "support", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
            "input[0].content[0]",
        ),
    ] {
        let (status, error) = call(&router, Method::POST, "/v1/responses", Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {error}");
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
        assert!(error["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{error}");
        assert_eq!(error["error"]["type"], error["error"]["code"]);
    }
    // Sampling settings are the agent's business: accepted.
    respond(
        &router,
        ask(json!({"temperature": 0.1, "top_p": 0.5, "max_output_tokens": 50, "tool_choice": "auto",
        "tools": [], "text": {"format": {"type": "text"}}, "metadata": {"k": "v"}, "truncation": "auto"})),
    )
    .await;
    let (status, error) = call(&router, Method::POST, "/v1/responses", Some(ask(json!({"model": "ghost"})))).await;
    assert_eq!((status, error["error"]["type"].as_str()), (StatusCode::NOT_FOUND, Some("agent_not_found")));
    for (body, param) in [
        (json!({"items": [{"role": "system", "content": "x"}]}), "items[0].role"),
        (json!({"metadata": {"k": "v"}}), "metadata"),
        (json!({"items": "x"}), "items"),
        (json!({"title": "x"}), "title"),
    ] {
        let (status, error) = call(&router, Method::POST, "/v1/conversations", Some(body.clone())).await;
        assert_eq!(
            (status, error["error"]["param"].as_str()),
            (StatusCode::BAD_REQUEST, Some(param)),
            "{body}: {error}"
        );
    }
    let (_, created) = call(&router, Method::POST, "/v1/conversations", Some(json!({"metadata": {}}))).await;
    let conv = created["id"].as_str().unwrap();
    for (query, param) in
        [("limit=0", "limit"), ("limit=101", "limit"), ("order=up", "order"), ("after=msg_x", "after")]
    {
        let (status, error) =
            call(&router, Method::GET, &format!("/v1/conversations/{conv}/items?{query}"), None).await;
        assert_eq!((status, error["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some(param)), "{query}");
    }
    // Only the one accepted request ran.
    let runs = runtime.stores.runs.list_runs(&TenantId::default_tenant(), &RunFilter::default(), 0, 10).await.unwrap();
    assert_eq!(runs.len(), 1);
}

/// Puts a key straight into the store.
async fn key_in(state: &AppState, tenant: &str) -> String {
    support::api_key(&state.runtime, tenant, &[Scope::RunsWrite], None).await
}

#[tokio::test]
async fn another_tenants_response_and_conversation_answer_exactly_like_missing_ones() {
    let App { router, state, .. } = app_with(HttpSettings::with_token(TOKEN));
    let (a_key, b_key) = (key_in(&state, "tenant-a").await, key_in(&state, "tenant-b").await);
    let (a, b) = (Call { bearer: Some(&a_key), user: None }, Call { bearer: Some(&b_key), user: None });
    let definitions = &state.runtime.stores.definitions;
    for (tenant, agent) in [("tenant-a", "a-agent"), ("tenant-b", "b-agent")] {
        let definition = AgentDefinition::new(agent, "script", "m");
        definitions.create(&TenantId::parse(tenant).unwrap(), definition, Utc::now()).await.unwrap();
    }

    let (status, text) =
        send(&router, &b, Method::POST, "/v1/responses", Some(json!({"model": "b-agent", "input": "B's secret"})))
            .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let response: Value = serde_json::from_str(&text).unwrap();
    let resp = response["id"].as_str().unwrap().to_owned();
    let (_, text) = send(&router, &b, Method::POST, "/v1/conversations", Some(json!({}))).await;
    let conv = serde_json::from_str::<Value>(&text).unwrap()["id"].as_str().unwrap().to_owned();
    // B reads its own.
    assert_eq!(send(&router, &b, Method::GET, &format!("/v1/responses/{resp}"), None).await.0, StatusCode::OK);
    assert_eq!(send(&router, &b, Method::GET, &format!("/v1/conversations/{conv}"), None).await.0, StatusCode::OK);

    let missing_resp = format!("resp_{}", uuid::Uuid::now_v7().simple());
    for (theirs, missing) in [
        (format!("/v1/responses/{resp}"), format!("/v1/responses/{missing_resp}")),
        (format!("/v1/conversations/{conv}"), "/v1/conversations/conv_missing".to_owned()),
        (format!("/v1/conversations/{conv}/items"), "/v1/conversations/conv_missing/items".to_owned()),
    ] {
        let theirs_answer = send(&router, &a, Method::GET, &theirs, None).await;
        assert_eq!(theirs_answer.0, StatusCode::NOT_FOUND, "{theirs}: {}", theirs_answer.1);
        assert_eq!(theirs_answer, send(&router, &a, Method::GET, &missing, None).await, "{theirs}");
        assert!(!theirs_answer.1.contains("secret"));
    }
    let deleted = send(&router, &a, Method::DELETE, &format!("/v1/conversations/{conv}"), None).await;
    assert_eq!(deleted, send(&router, &a, Method::DELETE, "/v1/conversations/conv_missing", None).await);
    assert_eq!(deleted.0, StatusCode::NOT_FOUND);
    // Chaining on B's response or joining B's conversation is the same 404 as a missing one.
    for (field, theirs, missing) in [
        ("previous_response_id", resp.as_str(), missing_resp.as_str()),
        ("conversation", conv.as_str(), "conv_missing"),
    ] {
        let ask = |id: &str| json!({"model": "a-agent", "input": "hi", field: id});
        let theirs_answer = send(&router, &a, Method::POST, "/v1/responses", Some(ask(theirs))).await;
        assert_eq!(theirs_answer.0, StatusCode::NOT_FOUND, "{field}: {}", theirs_answer.1);
        assert_eq!(theirs_answer, send(&router, &a, Method::POST, "/v1/responses", Some(ask(missing))).await);
    }
    // Nothing of B's changed.
    assert_eq!(send(&router, &b, Method::GET, &format!("/v1/conversations/{conv}"), None).await.0, StatusCode::OK);
    let items = state.runtime.stores.sessions.items(&TenantId::parse("tenant-b").unwrap(), &resp).await.unwrap();
    assert_eq!(items.len(), 2);
}

#[tokio::test]
async fn with_session_ownership_another_users_conversation_and_response_look_missing() {
    let ownership = SessionOwnership { enabled: true, refuse_unowned: false, require_authenticated_owner: true };
    let App { router, state, .. } = app_owned(HttpSettings::with_token(TOKEN), ownership);
    // API key holders: the static token manages, and would read every session.
    let key = key_in(&state, "default").await;
    let u1 = Call { bearer: Some(&key), user: Some("u1") };
    let u2 = Call { bearer: Some(&key), user: Some("u2") };
    let (status, text) = send(&router, &u1, Method::POST, "/v1/conversations", Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let conv = serde_json::from_str::<Value>(&text).unwrap()["id"].as_str().unwrap().to_owned();
    let (_, text) =
        send(&router, &u1, Method::POST, "/v1/responses", Some(json!({"model": "support", "input": "mine"}))).await;
    let resp = serde_json::from_str::<Value>(&text).unwrap()["id"].as_str().unwrap().to_owned();

    // u2 finds neither, exactly as if they did not exist.
    let missing_resp = format!("resp_{}", uuid::Uuid::now_v7().simple());
    for (theirs, missing) in [
        (format!("/v1/responses/{resp}"), format!("/v1/responses/{missing_resp}")),
        (format!("/v1/conversations/{conv}"), "/v1/conversations/conv_missing".to_owned()),
        (format!("/v1/conversations/{conv}/items"), "/v1/conversations/conv_missing/items".to_owned()),
    ] {
        let theirs_answer = send(&router, &u2, Method::GET, &theirs, None).await;
        assert_eq!(theirs_answer.0, StatusCode::NOT_FOUND, "{theirs}");
        assert_eq!(theirs_answer, send(&router, &u2, Method::GET, &missing, None).await, "{theirs}");
    }
    let chained = |id: &str| json!({"model": "support", "input": "x", "previous_response_id": id});
    let theirs_answer = send(&router, &u2, Method::POST, "/v1/responses", Some(chained(&resp))).await;
    assert_eq!(theirs_answer.0, StatusCode::NOT_FOUND);
    assert_eq!(theirs_answer, send(&router, &u2, Method::POST, "/v1/responses", Some(chained(&missing_resp))).await);
    let deleted = send(&router, &u2, Method::DELETE, &format!("/v1/conversations/{conv}"), None).await;
    assert_eq!(deleted.0, StatusCode::NOT_FOUND);

    // Reading as u1 works; appending as u2 is refused.
    assert_eq!(send(&router, &u1, Method::GET, &format!("/v1/conversations/{conv}"), None).await.0, StatusCode::OK);
    assert_eq!(send(&router, &u1, Method::GET, &format!("/v1/responses/{resp}"), None).await.0, StatusCode::OK);
    let (status, text) = send(
        &router,
        &u2,
        Method::POST,
        "/v1/responses",
        Some(json!({"model": "support", "input": "theirs", "conversation": conv})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    assert!(text.contains("session_forbidden"), "{text}");
    // Without an identity no conversation or stored response is opened.
    let nobody = Call { bearer: Some(&key), user: None };
    let (status, text) = send(&router, &nobody, Method::POST, "/v1/conversations", Some(json!({}))).await;
    assert_eq!((status, text.contains("session_owner_required")), (StatusCode::FORBIDDEN, true), "{text}");
    let (status, _) =
        send(&router, &nobody, Method::POST, "/v1/responses", Some(json!({"model": "support", "input": "x"}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let unsaved = json!({"model": "support", "input": "x", "store": false});
    assert_eq!(send(&router, &nobody, Method::POST, "/v1/responses", Some(unsaved)).await.0, StatusCode::OK);
}
