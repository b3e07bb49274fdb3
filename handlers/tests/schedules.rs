//! Schedules through the router, and the tick: due schedules queue runs once per occurrence,
//! due jobs get a wake-up, orphaned runs are reconciled.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use support::TestClock;
use tracon_core::background::{TickReport, job_handlers, tick};
use tracon_core::definition::AgentDefinition;
use tracon_core::failure::ErrorClass;
use tracon_core::jobs::{JobRunner, JobSettings, JobTransport};
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::names::{RunId, TenantId};
use tracon_core::ports::{Clock, Platform, tokio_rt};
use tracon_core::runs::store::{RunRecord, RunStatus};
use tracon_core::runtime::RunQueue;
use tracon_core::runtime::{Runtime, RuntimeBuilder};
use tracon_handlers::{AppState, HttpSettings};

/// Counts wake-ups; the test drains the queue itself.
#[derive(Default)]
struct Counting(AtomicUsize);

#[async_trait::async_trait]
impl JobTransport for Counting {
    async fn wake(&self, _: uuid::Uuid) -> Result<(), String> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

struct Harness {
    app: Router,
    runtime: Arc<Runtime>,
    clock: Arc<TestClock>,
    transport: Arc<Counting>,
    runner: JobRunner,
}

fn harness() -> Harness {
    let clock = Arc::new(TestClock::default());
    let platform = Platform { clock: clock.clone(), spawner: tokio_rt::platform().spawner };
    let script = ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("Report sent."));
    let runtime = Arc::new(
        RuntimeBuilder::new(platform)
            .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
            .add_agent(AgentDefinition::new("reporter", "script", "m"))
            .build()
            .unwrap(),
    );
    let runner = JobRunner::new(
        runtime.stores.jobs.clone(),
        job_handlers(&runtime),
        runtime.platform.clock.clone(),
        JobSettings::default(),
        "test",
    );
    let transport = Arc::new(Counting::default());
    runtime.set_queue(RunQueue { transport: transport.clone(), max_attempts: 3 });
    let state = AppState::new(runtime.clone(), HttpSettings::default());
    Harness { app: tracon_handlers::router(state), runtime, clock, transport, runner }
}

async fn call(app: &Router, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let reply = support::call(method, path).json(body).send(app).await;
    (reply.status, reply.json())
}

async fn scheduled_runs(runtime: &Runtime) -> Vec<RunRecord> {
    let filter = tracon_core::runs::store::RunFilter::default();
    let runs = runtime.stores.runs.list_runs(&TenantId::default_tenant(), &filter, 0, 100).await.unwrap();
    runs.into_iter().filter(|r| r.labels.contains_key("schedule")).collect()
}

#[tokio::test]
async fn schedules_are_validated_with_clear_errors() {
    let h = harness();
    let base = json!({"name": "nightly", "agentName": "reporter", "message": "Send the report."});
    let with = |extra: Value| {
        let mut body = base.clone();
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    for (body, field, needle) in [
        (with(json!({"cron": "0 2 * * *"})), "cron", "timeZone"),
        (with(json!({"cron": "0 2 * *", "timeZone": "UTC"})), "cron", "five fields"),
        (with(json!({"cron": "0 2 * * *", "timeZone": "Nowhere/City"})), "cron", "IANA"),
        (with(json!({"cron": "0 2 * * *", "timeZone": "UTC", "runAt": "2027-01-01T00:00:00Z"})), "cron", "not both"),
        (base.clone(), "cron", "runAt"),
        (with(json!({"runAt": "2027-01-01T00:00:00Z", "agentName": "ghost"})), "agentName", "does not exist"),
        (with(json!({"runAt": "2027-01-01T00:00:00Z", "name": "no spaces"})), "name", "letters"),
        (with(json!({"runAt": "2027-01-01T00:00:00Z", "message": " "})), "message", "required"),
        (with(json!({"runAt": "2027-01-01T00:00:00Z", "agentName": null})), "agentName", "workflowName"),
        (with(json!({"runAt": "2027-01-01T00:00:00Z", "workflowName": "triage"})), "workflowName", "not both"),
        (
            json!({"name": "n", "workflowName": "ghost", "message": "m", "runAt": "2027-01-01T00:00:00Z"}),
            "workflowName",
            "does not exist",
        ),
    ] {
        let (status, problem) = call(&h.app, Method::POST, "/api/schedules", Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} → {problem}");
        assert_eq!(problem["field"], field, "{problem}");
        assert!(problem["detail"].as_str().unwrap().contains(needle), "{needle}: {problem}");
    }
    let (status, problem) = call(&h.app, Method::POST, "/api/schedules", Some(with(json!({"runAt": "soon"})))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    let (status, _) = call(&h.app, Method::GET, "/api/schedules/not-a-uuid", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_cron_schedule_queues_one_run_per_occurrence_and_is_managed_over_http() {
    let h = harness();
    let (status, created) = call(
        &h.app,
        Method::POST,
        "/api/schedules",
        Some(json!({
            "name": "every-five", "agentName": "reporter", "message": "Send the report.",
            "cron": "*/5 * * * *", "timeZone": "Europe/Berlin"
        })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let next: DateTime<Utc> = created["nextRunAt"].as_str().unwrap().parse().unwrap();
    assert!(next > h.clock.now() && next <= h.clock.now() + chrono::Duration::minutes(5), "{created}");
    assert_eq!(created["timeZone"], "Europe/Berlin");
    let (status, _) = call(
        &h.app,
        Method::POST,
        "/api/schedules",
        Some(json!({"name": "every-five", "agentName": "reporter", "message": "x", "runAt": "2027-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "names are unique in a tenant");

    // Nothing is due yet.
    assert_eq!(tick(&h.runtime, h.transport.as_ref()).await, TickReport::default());
    // The occurrence comes: one run is queued however many ticks race for it.
    h.clock.advance(5 * 60);
    let reports = futures::future::join_all((0..4).map(|_| tick(&h.runtime, h.transport.as_ref()))).await;
    assert_eq!(reports.iter().map(|r| r.schedules_enqueued).sum::<usize>(), 1, "{reports:?}");
    assert!(h.runner.drain(10).await.unwrap() >= 1);
    let runs = scheduled_runs(&h.runtime).await;
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].status, runs[0].labels["schedule"].as_str()), (RunStatus::Completed, "every-five"));

    let (_, read) = call(&h.app, Method::GET, &format!("/api/schedules/{id}"), None).await;
    assert_eq!(read["lastRunId"], json!(runs[0].id.to_string()), "{read}");
    let moved: DateTime<Utc> = read["nextRunAt"].as_str().unwrap().parse().unwrap();
    assert!(moved > next, "the next occurrence moved on: {read}");

    // Disabled: nothing more is queued.
    let (status, updated) = call(
        &h.app,
        Method::PUT,
        &format!("/api/schedules/{id}"),
        Some(json!({
            "name": "every-five", "agentName": "reporter", "message": "Send the report.",
            "cron": "*/5 * * * *", "timeZone": "Europe/Berlin", "enabled": false
        })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(updated["lastRunId"], read["lastRunId"], "history survives an update");
    h.clock.advance(10 * 60);
    assert_eq!(tick(&h.runtime, h.transport.as_ref()).await.schedules_enqueued, 0);

    let (_, list) = call(&h.app, Method::GET, "/api/schedules", None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    let (_, audit) = call(&h.app, Method::GET, "/api/audit?entityType=schedule", None).await;
    let actions: Vec<&str> = audit.as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert!(actions.contains(&"schedule.create") && actions.contains(&"schedule.update"), "{actions:?}");
    assert_eq!(call(&h.app, Method::DELETE, &format!("/api/schedules/{id}"), None).await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&h.app, Method::GET, &format!("/api/schedules/{id}"), None).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_one_time_schedule_runs_once_and_records_why_when_it_cannot() {
    let h = harness();
    let at = (h.clock.now() + chrono::Duration::minutes(1)).to_rfc3339();
    let (status, created) = call(
        &h.app,
        Method::POST,
        "/api/schedules",
        Some(json!({"name": "once", "agentName": "reporter", "message": "Once.", "runAt": at})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    h.clock.advance(120);
    assert_eq!(tick(&h.runtime, h.transport.as_ref()).await.schedules_enqueued, 1);
    assert_eq!(h.transport.0.load(Ordering::SeqCst), 1, "the queued run's job was woken");
    h.clock.advance(3600);
    assert_eq!(tick(&h.runtime, h.transport.as_ref()).await.schedules_enqueued, 0, "once means once");
    let (_, read) = call(&h.app, Method::GET, &format!("/api/schedules/{id}"), None).await;
    assert_eq!(read["nextRunAt"], Value::Null, "{read}");

    // The agent goes away before the next schedule fires: the schedule says why.
    let definition = serde_json::to_value(AgentDefinition::new("temporary", "script", "m")).unwrap();
    let (status, made) = call(&h.app, Method::POST, "/api/agents", Some(definition)).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let at = (h.clock.now() + chrono::Duration::seconds(30)).to_rfc3339();
    let (status, second) = call(
        &h.app,
        Method::POST,
        "/api/schedules",
        Some(json!({"name": "orphan", "agentName": "temporary", "message": "Later.", "runAt": at})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_eq!(call(&h.app, Method::DELETE, "/api/agents/temporary", None).await.0, StatusCode::NO_CONTENT);
    h.clock.advance(60);
    assert_eq!(tick(&h.runtime, h.transport.as_ref()).await.schedules_enqueued, 0);
    let (_, read) =
        call(&h.app, Method::GET, &format!("/api/schedules/{}", second["id"].as_str().unwrap()), None).await;
    assert_eq!(read["lastError"], "The agent does not exist.", "{read}");
}

#[tokio::test]
async fn a_workflow_schedule_queues_a_workflow_run_that_completes_its_nodes() {
    let h = harness();
    let workflow = json!({"name": "nightly-report", "kind": "Sequential", "agentNames": ["reporter", "reporter"]});
    let (status, made) = call(&h.app, Method::POST, "/api/workflows", Some(workflow)).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let body = |extra: Value| {
        let mut body = json!({"name": "nightly", "workflowName": "nightly-report", "message": "Report.", "cron": "0 2 * * *", "timeZone": "UTC"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let (status, problem) =
        call(&h.app, Method::POST, "/api/schedules", Some(body(json!({"parameters": {"team": "a"}})))).await;
    assert_eq!((status, problem["field"].as_str()), (StatusCode::BAD_REQUEST, Some("parameters")), "{problem}");
    let (status, created) = call(&h.app, Method::POST, "/api/schedules", Some(body(json!({})))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!((created["workflowName"].as_str(), created.get("agentName")), (Some("nightly-report"), None));

    h.clock.advance(24 * 3600);
    let reports = futures::future::join_all((0..3).map(|_| tick(&h.runtime, h.transport.as_ref()))).await;
    assert_eq!(reports.iter().map(|r| r.schedules_enqueued).sum::<usize>(), 1, "{reports:?}");
    assert!(h.transport.0.load(Ordering::SeqCst) >= 1, "the workflow's job was woken");
    while h.runner.drain(10).await.unwrap() > 0 {}
    let runs = scheduled_runs(&h.runtime).await;
    assert_eq!(runs.len(), 3, "the root run and its two nodes, all labelled with the schedule: {runs:?}");
    let roots: Vec<&RunRecord> = runs.iter().filter(|r| r.parent_run_id.is_none()).collect();
    assert_eq!(roots.len(), 1, "one occurrence, one workflow run");
    let root = roots[0];
    assert_eq!((root.agent_name.as_str(), root.status), ("nightly-report", RunStatus::Completed), "{root:?}");
    let (_, read) =
        call(&h.app, Method::GET, &format!("/api/schedules/{}", created["id"].as_str().unwrap()), None).await;
    assert_eq!((read["lastRunId"].clone(), read["lastError"].clone()), (json!(root.id.to_string()), Value::Null));
    let (status, tree) = call(&h.app, Method::GET, &format!("/api/runs/{}/tree", root.id), None).await;
    assert_eq!(status, StatusCode::OK, "{tree}");
    let nodes: Vec<&Value> = tree["runs"].as_array().unwrap().iter().filter(|r| r["depth"] == 1).collect();
    assert_eq!(nodes.len(), 2, "both nodes ran under the root: {tree}");
    assert!(nodes.iter().all(|n| n["status"] == "Completed" && n["parentRunId"] == json!(root.id.to_string())));

    // The workflow goes away: the next occurrence records why it queued nothing.
    assert_eq!(call(&h.app, Method::DELETE, "/api/workflows/nightly-report", None).await.0, StatusCode::NO_CONTENT);
    h.clock.advance(24 * 3600);
    assert_eq!(tick(&h.runtime, h.transport.as_ref()).await.schedules_enqueued, 0);
    let (_, read) =
        call(&h.app, Method::GET, &format!("/api/schedules/{}", created["id"].as_str().unwrap()), None).await;
    assert_eq!(read["lastError"], "The workflow does not exist.", "{read}");
}

#[tokio::test]
async fn the_tick_reconciles_a_run_whose_executor_stopped_and_wakes_due_jobs() {
    let h = harness();
    let tenant = TenantId::default_tenant();
    let now = h.clock.now();
    let mut row = RunRecord::opened(RunId(uuid::Uuid::now_v7()), "reporter", Some(1), RunStatus::Running, now);
    h.runtime.stores.runs.create_run(&tenant, &row, None).await.unwrap();
    let alive = RunId(uuid::Uuid::now_v7());
    row.id = alive;
    h.runtime.stores.runs.create_run(&tenant, &row, None).await.unwrap();
    let dead = h.runtime.stores.runs.list_runs(&tenant, &Default::default(), 0, 10).await.unwrap();
    let dead = dead.iter().find(|r| r.id != alive).unwrap().id;

    // Inside the orphan window nothing happens.
    h.clock.advance(200);
    h.runtime.stores.runs.heartbeat(&tenant, alive, h.clock.now()).await.unwrap();
    assert_eq!(tick(&h.runtime, h.transport.as_ref()).await.runs_reconciled, 0);
    h.clock.advance(200);
    let report = tick(&h.runtime, h.transport.as_ref()).await;
    assert_eq!(report.runs_reconciled, 1, "{report:?}");
    let (status, run) = call(&h.app, Method::GET, &format!("/api/runs/{dead}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["status"], "Failed", "{run}");
    assert_eq!(run["error"]["errorClass"], json!(ErrorClass::Orphaned), "{run}");
    let (_, events) = call(&h.app, Method::GET, &format!("/api/runs/{dead}/events"), None).await;
    let last = events.as_array().and_then(|e| e.last().cloned()).unwrap_or(events.clone());
    assert!(last.to_string().contains("orphaned"), "{events}");
    let (_, alive_run) = call(&h.app, Method::GET, &format!("/api/runs/{alive}"), None).await;
    assert_eq!(alive_run["status"], "Running", "a heartbeating run is left alone");

    // A job queued long ago whose wake-up was lost gets a new one.
    let (status, accepted) = call(
        &h.app,
        Method::POST,
        "/api/schedules",
        Some(json!({"name": "soon", "agentName": "reporter", "message": "x", "runAt": h.clock.now().to_rfc3339()})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{accepted}");
    let before = h.transport.0.load(Ordering::SeqCst);
    assert_eq!(tick(&h.runtime, h.transport.as_ref()).await.schedules_enqueued, 1);
    assert_eq!(h.transport.0.load(Ordering::SeqCst), before + 1);
    h.clock.advance(60);
    let report = tick(&h.runtime, h.transport.as_ref()).await;
    assert_eq!(report.jobs_woken, 1, "the queued job was not leased: it is woken again ({report:?})");
}
