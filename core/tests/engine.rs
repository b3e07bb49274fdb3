//! The turn engine and the tool pipeline, stage by stage, against the scripted provider.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracon_core::definition::AgentDefinition;
use tracon_core::events::RunEvent;
use tracon_core::events::ToolCallStatus;
use tracon_core::failure::ErrorClass;
use tracon_core::identity::Caller;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{ModelProvider, ProviderError, Usage};
use tracon_core::names::{AgentName, TenantId};
use tracon_core::ports::tokio_rt;
use tracon_core::pricing::{ModelPrice, Pricing};
use tracon_core::runs;
use tracon_core::runs::outcome::RunOutcome;
use tracon_core::runs::request::RunRequest;
use tracon_core::runs::store::RunStatus;
use tracon_core::runtime::{Runtime, RuntimeBuilder, RuntimeSettings};
use tracon_core::tools::pipeline::{ToolArgumentsValidator, ToolAuthorizationRequest, ToolAuthorizer, ToolDecision};
use tracon_core::tools::{ToolError, ToolOutput, ToolRegistration, tool_fn};

fn echo_tool(name: &str) -> ToolRegistration {
    ToolRegistration::new(
        name,
        "Echoes its input.",
        json!({"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}),
        tool_fn(|args: Value, _| async move {
            Ok(ToolOutput::from(format!("echo:{}", args["value"].as_str().unwrap_or(""))))
        }),
    )
    .unwrap()
}

struct Harness {
    runtime: Arc<Runtime>,
}

impl Harness {
    fn new(turns: Vec<ScriptedTurn>, tools: Vec<ToolRegistration>, agent: AgentDefinition) -> Self {
        Self::build(turns, tools, agent, |b| b)
    }

    fn build(
        turns: Vec<ScriptedTurn>,
        tools: Vec<ToolRegistration>,
        agent: AgentDefinition,
        configure: impl FnOnce(RuntimeBuilder) -> RuntimeBuilder,
    ) -> Self {
        let mut b = RuntimeBuilder::new(tokio_rt::platform())
            .add_provider(Arc::new(ScriptedProvider::with_turns("script", turns)) as Arc<dyn ModelProvider>);
        for t in tools {
            b = b.add_tool(Ok(t));
        }
        let runtime = configure(b.add_agent(agent)).build().unwrap();
        Self { runtime: Arc::new(runtime) }
    }

    async fn run(&self, name: &str, message: &str) -> (RunOutcome, Vec<RunEvent>) {
        self.run_with(name, message, CancellationToken::new()).await
    }

    async fn run_with(&self, name: &str, message: &str, cancel: CancellationToken) -> (RunOutcome, Vec<RunEvent>) {
        let prepared = runs::prepare::prepare(&self.runtime, request(name, message), None).await.unwrap();
        let (tx, mut rx) = mpsc::channel(1024);
        let outcome = runs::execute::execute(&self.runtime, prepared, cancel, Some(tx)).await;
        let mut events = Vec::new();
        while let Some(e) = rx.recv().await {
            events.push(e);
        }
        (outcome, events)
    }
}

fn request(name: &str, message: &str) -> RunRequest {
    let agent = AgentName::parse(name).unwrap();
    RunRequest::new(TenantId::default_tenant(), agent, message.to_owned(), Caller::anonymous(), Default::default())
}

fn agent(tools: &[&str]) -> AgentDefinition {
    AgentDefinition::new("a", "script", "m").with_instructions("Be helpful.").with_tools(tools)
}

fn tool_results(events: &[RunEvent]) -> Vec<(String, ToolCallStatus, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ToolInvoked { tool_name, status, result, .. } => {
                Some((tool_name.clone(), *status, result.clone()))
            }
            RunEvent::ToolFailed { tool_name, status, error, .. } => Some((tool_name.clone(), *status, error.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_streamed_run_with_two_tool_calls_completes_and_sums_usage() {
    let turns = vec![
        ScriptedTurn::tool_call("one", json!({"value": "a"}))
            .and_tool_call("two", json!({"value": "b"}))
            .with_usage(10, 5),
        ScriptedTurn::text("Both tools answered.").with_usage(20, 7),
    ];
    let h = Harness::new(turns, vec![echo_tool("one"), echo_tool("two")], agent(&["one", "two"]));
    let (outcome, events) = h.run("a", "go").await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.text, "Both tools answered.");
    assert_eq!(
        outcome.usage,
        Some(Usage { input_tokens: 30, output_tokens: 12, total_tokens: 42, ..Usage::default() })
    );
    assert_eq!(
        tool_results(&events),
        vec![
            ("one".into(), ToolCallStatus::Succeeded, "echo:a".into()),
            ("two".into(), ToolCallStatus::Succeeded, "echo:b".into())
        ]
    );
    assert!(matches!(events.first(), Some(RunEvent::RunStarted { .. })));
    assert!(matches!(events.last(), Some(RunEvent::RunCompleted { .. })));
    let deltas: String = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::MessageDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "Both tools answered.");
    // Tool calls are stored individually.
    let calls = h.runtime.stores.runs.list_tool_calls(&TenantId::default_tenant(), outcome.run_id).await.unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].arguments, r#"{"value":"a"}"#);
    let run = h.runtime.stores.runs.get_run(&TenantId::default_tenant(), outcome.run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.model_provider.as_deref(), Some("script"));
}

#[tokio::test]
async fn concurrent_tool_calls_run_together_only_when_the_binding_allows() {
    // Two calls that each wait for the other at a barrier: they can only both finish in
    // time when they run at the same time.
    fn waiting_pair(timeout: Duration) -> Vec<ToolRegistration> {
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        ["left", "right"]
            .into_iter()
            .map(|name| {
                let b = barrier.clone();
                ToolRegistration::new(
                    name,
                    "Waits for its sibling.",
                    json!({"type": "object"}),
                    tool_fn(move |_, _| {
                        let b = b.clone();
                        async move {
                            b.wait().await;
                            Ok(ToolOutput::from("met"))
                        }
                    }),
                )
                .unwrap()
                .timeout(timeout)
            })
            .collect()
    }
    let turns =
        || vec![ScriptedTurn::tool_call("left", json!({})).and_tool_call("right", json!({})), ScriptedTurn::text("ok")];

    let mut def = agent(&["left", "right"]);
    def.model.allow_concurrent_tool_calls = true;
    let h = Harness::new(turns(), waiting_pair(Duration::from_secs(30)), def);
    let (outcome, events) = h.run("a", "go").await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert!(tool_results(&events).iter().all(|(_, s, r)| *s == ToolCallStatus::Succeeded && r == "met"));

    // Without the flag the calls run one after another: the first waits alone until its
    // timeout; only then does the second start (and, the first having arrived, pass).
    let h = Harness::new(turns(), waiting_pair(Duration::from_millis(100)), agent(&["left", "right"]));
    let (_, events) = h.run("a", "go").await;
    let statuses: Vec<ToolCallStatus> = tool_results(&events).into_iter().map(|(_, s, _)| s).collect();
    assert_eq!(statuses, vec![ToolCallStatus::TimedOut, ToolCallStatus::Succeeded]);
}

struct Deny;
#[async_trait::async_trait]
impl ToolAuthorizer for Deny {
    async fn authorize(&self, r: &ToolAuthorizationRequest<'_>) -> Result<ToolDecision, String> {
        Ok(if r.tool_name == "secret" {
            ToolDecision::Deny("You cannot read secrets.".into())
        } else {
            ToolDecision::Allow
        })
    }
}

struct Broken;
#[async_trait::async_trait]
impl ToolAuthorizer for Broken {
    async fn authorize(&self, _: &ToolAuthorizationRequest<'_>) -> Result<ToolDecision, String> {
        Err("policy service unreachable: password=hunter2".into())
    }
}

#[tokio::test]
async fn a_denied_call_becomes_the_result_text_and_the_run_goes_on() {
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let secret = ToolRegistration::new(
        "secret",
        "Reads a secret.",
        json!({"type": "object"}),
        tool_fn(move |_, _| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(ToolOutput::from("the secret")) }
        }),
    )
    .unwrap();
    let turns = vec![ScriptedTurn::tool_call("secret", json!({})), ScriptedTurn::text("I may not.")];
    let h = Harness::build(turns, vec![secret], agent(&["secret"]), |b| b.tool_authorizer(Arc::new(Deny)));
    let (outcome, events) = h.run("a", "tell me").await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(
        tool_results(&events),
        vec![("secret".into(), ToolCallStatus::Denied, "You cannot read secrets.".into())]
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_erroring_authorization_handler_denies() {
    let turns = vec![ScriptedTurn::tool_call("one", json!({"value": "x"})), ScriptedTurn::text("done")];
    let h = Harness::build(turns, vec![echo_tool("one")], agent(&["one"]), |b| b.tool_authorizer(Arc::new(Broken)));
    let (outcome, events) = h.run("a", "go").await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let results = tool_results(&events);
    assert_eq!(results[0].1, ToolCallStatus::Denied);
    assert!(!format!("{events:?}").contains("hunter2"));
}

struct NoShouting;
#[async_trait::async_trait]
impl ToolArgumentsValidator for NoShouting {
    async fn validate(&self, _: &ToolRegistration, args: &Value) -> Result<Option<String>, String> {
        match args["value"].as_str() {
            Some("BOOM") => Err("validator crashed".into()),
            Some(v) if v.chars().all(|c| c.is_uppercase()) => Ok(Some("no shouting".into())),
            _ => Ok(None),
        }
    }
}

#[tokio::test]
async fn rejected_arguments_are_tool_failures_and_the_body_never_runs() {
    let turns = vec![
        ScriptedTurn::tool_call("one", json!({"wrong": 1}))
            .raw_tool_call("one", "{not json")
            .and_tool_call("one", json!({"value": "LOUD"}))
            .and_tool_call("one", json!({"value": "BOOM"}))
            .and_tool_call("missing_tool", json!({})),
        ScriptedTurn::text("ok"),
    ];
    let h = Harness::build(turns, vec![echo_tool("one")], agent(&["one"]), |b| {
        b.tool_arguments_validator(Arc::new(NoShouting))
    });
    let (outcome, events) = h.run("a", "go").await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let results = tool_results(&events);
    assert_eq!(results.len(), 5);
    assert!(results.iter().all(|(_, s, _)| *s == ToolCallStatus::Rejected), "{results:?}");
    assert!(results[0].2.contains("value"), "schema error names the field: {}", results[0].2);
    assert!(results[1].2.contains("not valid JSON"));
    assert!(results[2].2.contains("no shouting"));
    assert!(results[3].2.contains("could not be validated"));
    assert!(results[4].2.contains("not available"));
    assert!(events.iter().filter(|e| matches!(e, RunEvent::ToolFailed { .. })).count() == 5);
}

#[tokio::test]
async fn a_timed_out_call_is_a_tool_error_and_its_late_result_is_recorded_on_the_same_call() {
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = release.clone();
    let slow = ToolRegistration::new(
        "slow",
        "Ignores its cancellation token.",
        json!({"type": "object"}),
        tool_fn(move |_, _| {
            let gate = gate.clone();
            async move {
                gate.notified().await;
                Ok(ToolOutput::from("finally"))
            }
        }),
    )
    .unwrap()
    .timeout(Duration::from_millis(50));
    let turns = vec![ScriptedTurn::tool_call("slow", json!({})), ScriptedTurn::text("moved on")];
    let h = Harness::new(turns, vec![slow], agent(&["slow"]));
    let (outcome, events) = h.run("a", "go").await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.text, "moved on");
    let results = tool_results(&events);
    assert_eq!(results[0].1, ToolCallStatus::TimedOut);

    release.notify_one();
    let tenant = TenantId::default_tenant();
    let mut call = None;
    for _ in 0..500 {
        let calls = h.runtime.stores.runs.list_tool_calls(&tenant, outcome.run_id).await.unwrap();
        if calls.len() == 1 && calls[0].late_completed_at.is_some() {
            call = Some(calls[0].clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let call = call.expect("the late completion reaches the call record");
    assert!(call.timed_out);
    assert_eq!(call.status, ToolCallStatus::TimedOut);
    assert_eq!(call.late_result.as_deref(), Some("finally"));
}

#[tokio::test]
async fn a_call_that_needs_approval_stops_the_turn_before_any_body_runs() {
    let ran = Arc::new(AtomicUsize::new(0));
    let c1 = ran.clone();
    let c2 = ran.clone();
    let refund = ToolRegistration::new(
        "refund",
        "Refunds an order.",
        json!({"type": "object"}),
        tool_fn(move |_, _| {
            c1.fetch_add(1, Ordering::SeqCst);
            async { Ok(ToolOutput::from("refunded")) }
        }),
    )
    .unwrap()
    .requires_approval(true)
    .effect(tracon_core::tools::effect::ToolEffect::Write);
    let lookup = ToolRegistration::new(
        "lookup",
        "Looks up.",
        json!({"type": "object"}),
        tool_fn(move |_, _| {
            c2.fetch_add(1, Ordering::SeqCst);
            async { Ok(ToolOutput::from("found")) }
        }),
    )
    .unwrap();
    let turns = vec![ScriptedTurn::tool_call("lookup", json!({})).and_tool_call("refund", json!({"order": 1}))];
    let h = Harness::new(turns, vec![refund, lookup], agent(&["refund", "lookup"]));
    let (outcome, events) = h.run("a", "refund order 1").await;
    assert_eq!(outcome.status, RunStatus::AwaitingApproval);
    assert_eq!(ran.load(Ordering::SeqCst), 0, "no body runs while an approval is pending");
    assert_eq!(outcome.approvals.len(), 1);
    assert_eq!(outcome.approvals[0].tool_name, "refund");
    assert_eq!(outcome.approvals[0].arguments, json!({"order": 1}));
    assert!(matches!(events.last(), Some(RunEvent::RunAwaitingApproval { requests }) if requests.len() == 1));
}

#[tokio::test]
async fn an_over_limit_result_is_trimmed_into_a_valid_envelope_without_splitting_a_character() {
    let big = ToolRegistration::new(
        "big",
        "Returns a long text.",
        json!({"type": "object"}),
        tool_fn(|_, _| async { Ok(ToolOutput::from("ab€cd".repeat(100))) }),
    )
    .unwrap()
    .max_output_bytes(4); // "ab€" is 5 bytes: the cut falls inside "€".
    let turns = vec![ScriptedTurn::tool_call("big", json!({})), ScriptedTurn::text("ok")];
    let h = Harness::new(turns, vec![big], agent(&["big"]));
    let (_, events) = h.run("a", "go").await;
    let result = &tool_results(&events)[0].2;
    let envelope: Value = serde_json::from_str(result).unwrap();
    assert_eq!(envelope["truncated"], true);
    assert_eq!(envelope["content"], "ab");
    assert_eq!(envelope["omittedBytes"], 700 - 2);
}

#[tokio::test]
async fn a_foreign_tool_error_never_shows_its_text() {
    let failing = ToolRegistration::new(
        "db",
        "Queries a database.",
        json!({"type": "object"}),
        tool_fn(|_, _| async {
            let e = std::io::Error::other("connect to 10.0.0.7 as admin password=hunter2 failed");
            Err::<ToolOutput, ToolError>(e.into())
        }),
    )
    .unwrap();
    let own = ToolRegistration::new(
        "own",
        "Fails with our own message.",
        json!({"type": "object"}),
        tool_fn(|_, _| async { Err::<ToolOutput, ToolError>(ToolError::message("Order not found.")) }),
    )
    .unwrap();
    let turns =
        vec![ScriptedTurn::tool_call("db", json!({})).and_tool_call("own", json!({})), ScriptedTurn::text("sorry")];
    let h = Harness::new(turns, vec![failing, own], agent(&["db", "own"]));
    let (outcome, events) = h.run("a", "go").await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let results = tool_results(&events);
    assert_eq!(results[0], ("db".into(), ToolCallStatus::Failed, "Tool failed with IoError.".into()));
    assert_eq!(results[1], ("own".into(), ToolCallStatus::Failed, "Order not found.".into()));
    let all = format!("{events:?}");
    assert!(!all.contains("hunter2") && !all.contains("10.0.0.7"));
    let calls = h.runtime.stores.runs.list_tool_calls(&TenantId::default_tenant(), outcome.run_id).await.unwrap();
    assert!(!format!("{calls:?}").contains("hunter2"));
}

#[tokio::test]
async fn the_last_iteration_offers_no_tools_so_the_loop_is_bounded() {
    let turns = vec![ScriptedTurn::tool_call("one", json!({"value": "x"}))]; // always asks for a tool
    let mut def = agent(&["one"]);
    def.harness =
        Some(tracon_core::definition::HarnessSettings { maximum_iterations_per_request: Some(3), r#loop: None });
    let h = Harness::new(turns, vec![echo_tool("one")], def);
    let (outcome, events) = h.run("a", "go").await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(tool_results(&events).len(), 2, "two iterations call tools, the third may not");
}

#[tokio::test]
async fn cost_is_a_snapshot_of_configured_prices_and_null_without_usage() {
    let price = ModelPrice { input_per_million: 1.0, output_per_million: 2.0, cached_input_per_million: None };
    let h = Harness::build(vec![ScriptedTurn::text("hi").with_usage(1_000_000, 1_000_000)], vec![], agent(&[]), |b| {
        b.pricing(Pricing::new("EUR").with_price("script", "m", price))
    });
    let (outcome, _) = h.run("a", "go").await;
    let cost = outcome.cost.unwrap();
    assert_eq!(cost.currency, "EUR");
    assert_eq!(cost.total_cost, tracon_core::pricing::Money::from_nanos(3_000_000_000));
    assert_eq!(cost.input_per_million, 1.0);

    let h = Harness::build(vec![ScriptedTurn::text("hi")], vec![], agent(&[]), |b| {
        b.pricing(Pricing::new("EUR").with_price("script", "m", price))
    });
    let (outcome, _) = h.run("a", "go").await;
    assert_eq!(outcome.usage, None, "unmeasured usage stays null");
    assert_eq!(outcome.cost, None);
}

async fn failure_class(turn: ScriptedTurn, timeout: Duration) -> (RunStatus, ErrorClass, String) {
    let h = Harness::build(vec![turn], vec![], agent(&[]), |b| {
        b.settings(RuntimeSettings { model_timeout: timeout, ..RuntimeSettings::default() })
    });
    let (outcome, events) = h.run("a", "go").await;
    let failure = outcome.failure.unwrap();
    assert!(matches!(events.last(), Some(RunEvent::RunFailed { .. } | RunEvent::RunCanceled { .. })));
    (outcome.status, failure.error_class, failure.message)
}

#[tokio::test]
async fn provider_failures_are_classified_as_the_spec_says() {
    let long = Duration::from_secs(30);
    let cases = [
        (ProviderError::from_status(401, "bad key sk-live-123"), ErrorClass::ProviderAuthentication),
        (ProviderError::from_status(403, ""), ErrorClass::ProviderAuthentication),
        (ProviderError::from_status(429, ""), ErrorClass::RateLimited),
        (ProviderError::from_status(500, "stack trace at db.internal"), ErrorClass::ProviderUnavailable),
        (ProviderError::from_status(503, ""), ErrorClass::ProviderUnavailable),
        (ProviderError::from_status(400, ""), ErrorClass::ProviderRejected),
    ];
    for (error, class) in cases {
        let (status, got, message) = failure_class(ScriptedTurn::failing(error), long).await;
        assert_eq!((status, got), (RunStatus::Failed, class));
        assert!(message.contains("(ref: "), "{message}");
        assert!(!message.contains("sk-live") && !message.contains("db.internal"), "{message}");
    }
    let (status, class, _) = failure_class(ScriptedTurn::content_filtered(), long).await;
    assert_eq!((status, class), (RunStatus::Failed, ErrorClass::ContentFiltered));
}

#[tokio::test]
async fn a_model_that_never_answers_is_a_timeout_failure_not_a_cancellation() {
    let (status, class, _) = failure_class(ScriptedTurn::hanging(), Duration::from_millis(50)).await;
    assert_eq!((status, class), (RunStatus::Failed, ErrorClass::Timeout));
}

#[tokio::test]
async fn a_caller_that_cancels_ends_the_run_canceled() {
    let h = Harness::new(
        vec![ScriptedTurn { text: Some("partial".into()), hang_after_text: true, ..Default::default() }],
        vec![],
        agent(&[]),
    );
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        trigger.cancel();
    });
    let (outcome, events) = h.run_with("a", "go", cancel).await;
    assert_eq!(outcome.status, RunStatus::Canceled);
    assert_eq!(outcome.failure.unwrap().error_class, ErrorClass::Canceled);
    assert!(matches!(events.last(), Some(RunEvent::RunCanceled { .. })));
}

#[tokio::test]
async fn a_dropped_event_receiver_cancels_the_run() {
    let h = Harness::new(
        vec![ScriptedTurn { text: Some("a b c".into()), hang_after_text: true, ..Default::default() }],
        vec![],
        agent(&[]),
    );
    let prepared = runs::prepare::prepare(&h.runtime, request("a", "go"), None).await.unwrap();
    let (tx, rx) = mpsc::channel(1);
    drop(rx);
    let outcome = runs::execute::execute(&h.runtime, prepared, CancellationToken::new(), Some(tx)).await;
    assert_eq!(outcome.status, RunStatus::Canceled);
}
