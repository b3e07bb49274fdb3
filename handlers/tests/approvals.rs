//! Approvals through the router: the in-band decision, the mailbox, expiry, rules and
//! policies, and the audit entry written before a decision applies.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::TestClock;
use tracon_core::approvals::{ApprovalContext, ApprovalPolicy, PolicyVerdict};
use tracon_core::audit::{AuditEntry, AuditFilter, AuditStore, NewAuditEntry};
use tracon_core::definition::AgentDefinition;
use tracon_core::error::StoreError;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider};
use tracon_core::names::TenantId;
use tracon_core::ports::{Platform, tokio_rt};
use tracon_core::runtime::RuntimeBuilder;
use tracon_core::stores::Stores;
use tracon_core::tools::{ToolOutput, ToolRegistration, tool_fn};
use tracon_handlers::{AppState, HttpSettings};

/// An audit store whose appends can be made to fail.
#[derive(Default)]
struct FlakyAudit {
    inner: tracon_core::audit::MemoryAuditStore,
    failing: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl AuditStore for FlakyAudit {
    async fn append(&self, tenant: &TenantId, entry: NewAuditEntry) -> Result<AuditEntry, StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable { detail: "audit down".into() });
        }
        self.inner.append(tenant, entry).await
    }
    async fn list(
        &self,
        t: &TenantId,
        f: &AuditFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.inner.list(t, f, skip, take).await
    }
    async fn chain(&self, t: &TenantId) -> Result<Vec<AuditEntry>, StoreError> {
        self.inner.chain(t).await
    }
}

/// `amount` ≤ 1 never asks, ≥ 1000 always asks, 13 fails (asks), anything else: the rules.
struct RefundPolicy;

#[async_trait::async_trait]
impl ApprovalPolicy for RefundPolicy {
    async fn evaluate(&self, context: &ApprovalContext<'_>) -> Result<PolicyVerdict, String> {
        match context.arguments["amount"].as_f64() {
            Some(13.0) => Err("policy backend down".into()),
            Some(a) if a <= 1.0 => Ok(PolicyVerdict::NotRequired),
            Some(a) if a >= 1000.0 => Ok(PolicyVerdict::Required),
            _ => Ok(PolicyVerdict::Undecided),
        }
    }
}

struct Harness {
    app: Router,
    clock: Arc<TestClock>,
    audit: Arc<FlakyAudit>,
}

/// The model asks for `refund` with the amount the user names ("refund 50", or
/// "refund text" for a string amount); once the call has a result it answers with it.
fn harness() -> Harness {
    let refund = ToolRegistration::new(
        "refund",
        "Refunds an order.",
        json!({"type": "object", "properties": {"amount": {}}, "required": ["amount"]}),
        tool_fn(|args: Value, _| async move { Ok(ToolOutput::from(format!("refunded {}", args["amount"]))) }),
    )
    .map(|r| r.requires_approval(true));
    let script = ScriptedProvider::from_fn("script", |req| {
        if let Some(Message::Tool { content, .. }) = req.messages.last() {
            return ScriptedTurn::text(&format!("Result: {content}"));
        }
        let asked = req.last_user_text();
        if asked == Some("pair") {
            return ScriptedTurn::tool_call("refund", json!({"amount": 50}))
                .and_tool_call("refund", json!({"amount": 60}));
        }
        match asked.and_then(|t| t.strip_prefix("refund ")) {
            Some("text") => ScriptedTurn::tool_call("refund", json!({"amount": "50"})),
            Some(n) => ScriptedTurn::tool_call("refund", json!({"amount": n.parse::<f64>().unwrap()})),
            None => ScriptedTurn::text("Nothing to do."),
        }
    });
    let clock = Arc::new(TestClock::default());
    let audit = Arc::new(FlakyAudit::default());
    let mut stores = Stores::in_memory();
    stores.audit = audit.clone();
    let platform = Platform { clock: clock.clone(), spawner: tokio_rt::platform().spawner };
    let runtime = RuntimeBuilder::new(platform)
        .stores(stores)
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_tool(refund)
        .approval_policy("refund", Arc::new(RefundPolicy))
        .add_agent(AgentDefinition::new("shop", "script", "m").with_tools(&["refund"]))
        .build()
        .unwrap();
    let state = AppState::new(Arc::new(runtime), HttpSettings::default());
    Harness { app: tracon_handlers::router(state), clock, audit }
}

async fn call(app: &Router, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Vec<u8>) {
    let reply = support::call(method, path).json(body).send(app).await;
    (reply.status, reply.body)
}

async fn json_call(app: &Router, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let reply = support::call(method, path).json(body).send(app).await;
    (reply.status, reply.json_or_null())
}

/// The SSE frames of a run request, as (event, data).
async fn run(app: &Router, body: Value) -> Vec<(String, Value)> {
    let (status, bytes) = call(app, Method::POST, "/api/agents/shop/run", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&bytes));
    String::from_utf8_lossy(&bytes)
        .split("\n\n")
        .filter(|f| !f.trim().is_empty() && !f.starts_with(':'))
        .map(|f| {
            let event = f.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or_default().to_owned();
            let data = f.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("null");
            (event, serde_json::from_str(data).unwrap())
        })
        .collect()
}

fn done(frames: &[(String, Value)]) -> &Value {
    &frames.iter().rev().find(|(e, _)| e == "done").expect("a done frame").1
}

fn approvals(frames: &[(String, Value)]) -> Vec<Value> {
    frames.iter().find(|(e, _)| e == "approvals").map(|(_, v)| v.as_array().unwrap().clone()).unwrap_or_default()
}

fn run_id(frames: &[(String, Value)]) -> String {
    frames.iter().find(|(e, _)| e == "run").unwrap().1["runId"].as_str().unwrap().to_owned()
}

/// Reads a run until it leaves `Running` (the mailbox resumes in the background).
async fn settled_run(app: &Router, id: &str) -> Value {
    for _ in 0..500 {
        let (status, run) = json_call(app, Method::GET, &format!("/api/runs/{id}"), None).await;
        if status == StatusCode::OK && run["status"] != "Running" {
            return run;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("run {id} never ended");
}

#[tokio::test]
async fn an_in_band_approval_resumes_the_session_as_a_new_run() {
    let h = harness();
    let stop = run(&h.app, json!({"message": "refund 50", "sessionId": "s1"})).await;
    assert_eq!(done(&stop)["status"], "AwaitingApproval");
    let asked = approvals(&stop);
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["toolName"], "refund");
    let request_id = asked[0]["requestId"].as_str().unwrap().to_owned();

    let (status, pending) = json_call(&h.app, Method::GET, "/api/approvals/pending", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(pending.as_array().unwrap().len(), 1);
    assert_eq!(pending[0]["id"], request_id.as_str());
    assert_eq!(pending[0]["arguments"], json!({"amount": 50.0}));
    assert_eq!(pending[0]["status"], "Pending");
    assert_eq!(pending[0]["sessionId"], "s1");
    assert!(pending[0]["expiresAt"].as_str().is_some());

    let resumed =
        run(&h.app, json!({"sessionId": "s1", "approvals": [{"requestId": request_id, "approved": true}]})).await;
    assert_eq!(done(&resumed)["status"], "Completed", "{resumed:?}");
    assert_ne!(run_id(&resumed), run_id(&stop), "a decision opens a new run");
    let text = resumed
        .iter()
        .filter(|(e, _)| e == "update")
        .map(|(_, v)| v["text"].as_str().unwrap_or(""))
        .collect::<String>();
    assert!(text.contains("Result: refunded 50"), "{text}");

    // The stopped run is never rewritten; the request names the run that resumed it.
    let (_, stopped) = json_call(&h.app, Method::GET, &format!("/api/runs/{}", run_id(&stop)), None).await;
    assert_eq!(stopped["status"], "AwaitingApproval");
    let (_, decided) = json_call(&h.app, Method::GET, &format!("/api/approvals/{request_id}"), None).await;
    assert_eq!(decided["status"], "Approved");
    assert_eq!(decided["resumedRunId"], run_id(&resumed).as_str());
    assert_eq!(decided["decidedBy"], "anonymous");
    let (_, pending) = json_call(&h.app, Method::GET, "/api/approvals/pending", None).await;
    assert_eq!(pending, json!([]));

    // The resumed run says which run it continues, in its own log.
    let (_, events) = call(&h.app, Method::GET, &format!("/api/runs/{}/events", run_id(&resumed)), None).await;
    let events = String::from_utf8_lossy(&events);
    assert!(events.contains("tracon.approval.resumed") && events.contains(&run_id(&stop)), "{events}");

    // The session holds the whole conversation, the call's result included.
    let (_, session) = json_call(&h.app, Method::GET, "/api/sessions/s1", None).await;
    assert!(session.to_string().contains("refunded 50"), "{session}");

    // Deciding again is refused; the audit trail has the decision.
    let again =
        call(&h.app, Method::POST, &format!("/api/approvals/{request_id}/decision"), Some(json!({"approved": false})))
            .await;
    assert_eq!(again.0, StatusCode::CONFLICT);
    assert!(String::from_utf8_lossy(&again.1).contains("approval_already_decided"));
    let (_, trail) = json_call(&h.app, Method::GET, "/api/audit?action=approval.approve", None).await;
    assert_eq!(trail.as_array().unwrap().len(), 1, "{trail}");
}

#[tokio::test]
async fn a_denial_reaches_the_model_as_the_calls_refusal() {
    let h = harness();
    let stop = run(&h.app, json!({"message": "refund 70", "sessionId": "s2"})).await;
    let id = approvals(&stop)[0]["requestId"].clone();
    let resumed = run(
        &h.app,
        json!({"sessionId": "s2", "approvals": [{"requestId": id, "approved": false, "reason": "too large"}]}),
    )
    .await;
    assert_eq!(done(&resumed)["status"], "Completed");
    let text = resumed
        .iter()
        .filter(|(e, _)| e == "update")
        .map(|(_, v)| v["text"].as_str().unwrap_or(""))
        .collect::<String>();
    assert!(text.contains("A person denied this tool call: too large"), "{text}");
}

#[tokio::test]
async fn the_mailbox_decides_a_run_without_a_session_and_resumes_it_in_the_background() {
    let h = harness();
    let stop = run(&h.app, json!({"message": "refund 20"})).await;
    let id = approvals(&stop)[0]["requestId"].as_str().unwrap().to_owned();
    let (status, result) =
        json_call(&h.app, Method::POST, &format!("/api/approvals/{id}/decision"), Some(json!({"approved": true})))
            .await;
    assert_eq!(status, StatusCode::OK, "{result}");
    assert_eq!(result["approval"]["status"], "Approved");
    assert_eq!(result["pending"], 0);
    let resumed = result["resumedRunId"].as_str().expect("the decision resumed the run").to_owned();
    let run = settled_run(&h.app, &resumed).await;
    assert_eq!(run["status"], "Completed", "{run}");
    let (_, events) = call(&h.app, Method::GET, &format!("/api/runs/{resumed}/events"), None).await;
    assert!(String::from_utf8_lossy(&events).contains("refunded 20"));
}

#[tokio::test]
async fn an_expired_request_can_no_longer_be_decided() {
    let h = harness();
    let stop = run(&h.app, json!({"message": "refund 30", "sessionId": "s3"})).await;
    let id = approvals(&stop)[0]["requestId"].as_str().unwrap().to_owned();
    h.clock.advance(24 * 3600 + 1);
    let (status, body) =
        json_call(&h.app, Method::POST, &format!("/api/approvals/{id}/decision"), Some(json!({"approved": true})))
            .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["errorType"], "approval_expired");
    let (_, read) = json_call(&h.app, Method::GET, &format!("/api/approvals/{id}"), None).await;
    assert_eq!(read["status"], "Expired");
    let (_, pending) = json_call(&h.app, Method::GET, "/api/approvals/pending", None).await;
    assert_eq!(pending, json!([]));
    // In-band too; and the session's next message closes the call as undecided.
    let (status, body) = json_call(
        &h.app,
        Method::POST,
        "/api/agents/shop/run",
        Some(json!({"sessionId": "s3", "approvals": [{"requestId": id, "approved": true}]})),
    )
    .await;
    assert_eq!((status, body["errorType"].as_str()), (StatusCode::CONFLICT, Some("approval_expired")));
    let next = run(&h.app, json!({"message": "hello", "sessionId": "s3"})).await;
    assert_eq!(done(&next)["status"], "Completed", "{next:?}");
}

#[tokio::test]
async fn a_decision_whose_audit_entry_fails_is_refused_and_nothing_changes() {
    let h = harness();
    let stop = run(&h.app, json!({"message": "refund 40", "sessionId": "s4"})).await;
    let id = approvals(&stop)[0]["requestId"].as_str().unwrap().to_owned();
    h.audit.failing.store(true, Ordering::SeqCst);
    let (status, body) =
        json_call(&h.app, Method::POST, &format!("/api/approvals/{id}/decision"), Some(json!({"approved": true})))
            .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["errorType"], "audit_unavailable");
    let (status, _) = call(
        &h.app,
        Method::POST,
        "/api/agents/shop/run",
        Some(json!({"sessionId": "s4", "approvals": [{"requestId": id, "approved": true}]})),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (_, read) = json_call(&h.app, Method::GET, &format!("/api/approvals/{id}"), None).await;
    assert_eq!(read["status"], "Pending");
    assert_eq!(read["resumedRunId"], Value::Null);
    // Once the trail is back, the same decision goes through.
    h.audit.failing.store(false, Ordering::SeqCst);
    let (status, _) =
        json_call(&h.app, Method::POST, &format!("/api/approvals/{id}/decision"), Some(json!({"approved": true})))
            .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn rules_release_calls_and_their_conditions_fail_closed() {
    let h = harness();
    let (status, rule) = json_call(
        &h.app,
        Method::POST,
        "/api/approvals/rules",
        Some(json!({"toolName": "refund", "conditions": [{"path": "amount", "operator": "LessThanOrEqual", "value": 100}]})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{rule}");
    let small = run(&h.app, json!({"message": "refund 50"})).await;
    assert_eq!(done(&small)["status"], "Completed", "a matching rule runs the call without asking");
    let large = run(&h.app, json!({"message": "refund 500"})).await;
    assert_eq!(done(&large)["status"], "AwaitingApproval");
    let text = run(&h.app, json!({"message": "refund text"})).await;
    assert_eq!(done(&text)["status"], "AwaitingApproval", "text \"50\" does not satisfy a numeric rule");

    let (_, listed) = json_call(&h.app, Method::GET, "/api/approvals/rules?toolName=refund", None).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    let (_, trail) = json_call(&h.app, Method::GET, "/api/audit?action=approvalRule.create", None).await;
    assert_eq!(trail.as_array().unwrap().len(), 1);
    let rule_id = rule["id"].as_str().unwrap();
    let (status, _) = call(&h.app, Method::DELETE, &format!("/api/approvals/rules/{rule_id}"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&h.app, Method::DELETE, &format!("/api/approvals/rules/{rule_id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let again = run(&h.app, json!({"message": "refund 50"})).await;
    assert_eq!(done(&again)["status"], "AwaitingApproval");
}

#[tokio::test]
async fn rules_that_could_never_be_evaluated_are_refused() {
    let h = harness();
    let hash = "a".repeat(64);
    for body in [
        json!({"toolName": "nope"}),
        json!({"toolName": "refund", "argumentsHash": "xyz"}),
        json!({"toolName": "refund", "argumentsHash": hash, "conditions": [{"path": "a", "operator": "Equals", "value": 1}]}),
        json!({"toolName": "refund", "conditions": [{"path": "amount", "operator": "GreaterThan", "value": "100"}]}),
        json!({"toolName": "refund", "conditions": [{"path": "amount", "operator": "Or", "value": 1}]}),
        json!({"toolName": "refund", "conditions": [{"path": "", "operator": "Equals", "value": 1}]}),
        json!({"toolName": "refund", "conditions": [{"path": "a", "operator": "In", "value": []}]}),
        json!({"toolName": "refund", "agentName": "Not A Name"}),
    ] {
        let (status, problem) = json_call(&h.app, Method::POST, "/api/approvals/rules", Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} → {problem}");
    }
}

#[tokio::test]
async fn dont_ask_again_pre_approves_that_exact_call_only() {
    let h = harness();
    let stop = run(&h.app, json!({"message": "refund 60", "sessionId": "s5"})).await;
    let id = approvals(&stop)[0]["requestId"].clone();
    let resumed = run(
        &h.app,
        json!({"sessionId": "s5", "approvals": [{"requestId": id, "approved": true, "dontAskAgain": true}]}),
    )
    .await;
    assert_eq!(done(&resumed)["status"], "Completed");
    let (_, rules) = json_call(&h.app, Method::GET, "/api/approvals/rules", None).await;
    assert_eq!(rules[0]["agentName"], "shop");
    assert_eq!(rules[0]["argumentsHash"].as_str().unwrap().len(), 64);
    assert_eq!(done(&run(&h.app, json!({"message": "refund 60"})).await)["status"], "Completed");
    assert_eq!(done(&run(&h.app, json!({"message": "refund 61"})).await)["status"], "AwaitingApproval");
}

#[tokio::test]
async fn a_code_policy_runs_first_and_a_failing_one_asks() {
    let h = harness();
    // A rule releasing every refund cannot loosen a policy that says Required.
    let (status, _) =
        json_call(&h.app, Method::POST, "/api/approvals/rules", Some(json!({"toolName": "refund"}))).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(done(&run(&h.app, json!({"message": "refund 5000"})).await)["status"], "AwaitingApproval");
    assert_eq!(done(&run(&h.app, json!({"message": "refund 13"})).await)["status"], "AwaitingApproval");
    assert_eq!(
        done(&run(&h.app, json!({"message": "refund 50"})).await)["status"],
        "Completed",
        "undecided → the rule"
    );
    let (status, _) =
        call(&h.app, Method::DELETE, "/api/approvals/rules/00000000-0000-0000-0000-000000000000", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Waived by the policy, with no rule at all.
    let (_, rules) = json_call(&h.app, Method::GET, "/api/approvals/rules", None).await;
    let id = rules[0]["id"].as_str().unwrap();
    call(&h.app, Method::DELETE, &format!("/api/approvals/rules/{id}"), None).await;
    assert_eq!(done(&run(&h.app, json!({"message": "refund 1"})).await)["status"], "Completed");
    assert_eq!(done(&run(&h.app, json!({"message": "refund 50"})).await)["status"], "AwaitingApproval");
}

#[tokio::test]
async fn in_band_decisions_must_cover_the_stopped_run_and_come_alone() {
    let h = harness();
    let stop = run(&h.app, json!({"message": "refund 80", "sessionId": "s6"})).await;
    let id = approvals(&stop)[0]["requestId"].clone();
    let post = |body: Value| {
        let app = h.app.clone();
        async move { json_call(&app, Method::POST, "/api/agents/shop/run", Some(body)).await }
    };
    let (status, _) =
        post(json!({"sessionId": "s6", "message": "hi", "approvals": [{"requestId": id, "approved": true}]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = post(json!({"approvals": [{"requestId": id, "approved": true}]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = post(json!({"sessionId": "other", "approvals": [{"requestId": id, "approved": true}]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let unknown = "00000000-0000-7000-8000-000000000000";
    let (status, body) =
        post(json!({"sessionId": "s6", "approvals": [{"requestId": unknown, "approved": true}]})).await;
    assert_eq!((status, body["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("approval_not_found")));
    let (status, _) =
        post(json!({"sessionId": "s6", "approvals": [{"requestId": id, "approved": false, "dontAskAgain": true}]}))
            .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Nothing above decided anything.
    let (_, read) = json_call(&h.app, Method::GET, &format!("/api/approvals/{}", id.as_str().unwrap()), None).await;
    assert_eq!(read["status"], "Pending");
}

#[tokio::test]
async fn a_run_waiting_on_two_calls_resumes_once_both_are_decided() {
    let h = harness();
    let stop = run(&h.app, json!({"message": "pair", "sessionId": "s7"})).await;
    let asked = approvals(&stop);
    assert_eq!(asked.len(), 2);
    let (a, b) =
        (asked[0]["requestId"].as_str().unwrap().to_owned(), asked[1]["requestId"].as_str().unwrap().to_owned());
    // In-band must cover both.
    let (status, body) = json_call(
        &h.app,
        Method::POST,
        "/api/agents/shop/run",
        Some(json!({"sessionId": "s7", "approvals": [{"requestId": a, "approved": true}]})),
    )
    .await;
    assert_eq!((status, body["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("approvals_incomplete")));
    assert_eq!(body["missing"], json!([b]));
    // Through the mailbox: the first decision waits, the second resumes — with one call run
    // and one refused.
    let (_, first) =
        json_call(&h.app, Method::POST, &format!("/api/approvals/{a}/decision"), Some(json!({"approved": true}))).await;
    assert_eq!((first["pending"].as_u64(), &first["resumedRunId"]), (Some(1), &Value::Null));
    let (_, second) = json_call(
        &h.app,
        Method::POST,
        &format!("/api/approvals/{b}/decision"),
        Some(json!({"approved": false, "reason": "one is enough"})),
    )
    .await;
    let resumed = second["resumedRunId"].as_str().expect("resumed").to_owned();
    assert_eq!(settled_run(&h.app, &resumed).await["status"], "Completed");
    let (_, tools) = json_call(&h.app, Method::GET, &format!("/api/runs/{resumed}/tools"), None).await;
    let statuses: Vec<&str> = tools.as_array().unwrap().iter().map(|t| t["status"].as_str().unwrap()).collect();
    assert_eq!(statuses.len(), 2, "{tools}");
    assert!(statuses.contains(&"Denied"), "{tools}");
    let (_, session) = json_call(&h.app, Method::GET, "/api/sessions/s7", None).await;
    let text = session.to_string();
    assert!(text.contains("refunded 50") && text.contains("one is enough"), "{text}");
}
