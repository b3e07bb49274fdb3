//! The store contract: one suite every implementation of the store ports must pass — the
//! in-memory stores here, the Postgres stores in `tracon-postgres` — unchanged.
//!
//! Each check takes a fresh, empty [`Stores`] and covers one behaviour, including tenant
//! isolation in both directions for every method. [`store_contract_tests!`] expands to one
//! `#[tokio::test]` per check for a given factory:
//!
//! ```text
//! tracon_core::store_contract_tests!(async { tracon_core::stores::Stores::in_memory() });
//! ```

// A test suite: assertions are its whole point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod breakers;
mod cache;
mod counted;
mod fixtures;
mod generations;
mod ledger;
mod mcp_oauth;
mod mcp_servers;
mod tenant_providers;
pub use breakers::{
    breakers_open_at_the_threshold_and_close_on_a_success, concurrent_probe_claims_let_exactly_one_through,
};
pub use cache::cached_answers_are_read_per_tenant_until_they_expire;
pub use counted::CountedRuns;
pub use generations::a_run_row_guarded_on_a_definitions_generation_is_written_only_while_it_is_current;
pub use ledger::{
    a_call_tree_is_listed_by_its_root_in_depth_order_within_its_tenant,
    a_running_run_yields_once_and_is_taken_back_once,
    a_step_and_a_call_ending_carry_the_events_recorded_before_them_in_one_write,
    an_ended_run_is_continued_once_and_linked_both_ways, the_ledger_is_fenced_by_the_run_being_running,
    the_ledger_records_each_step_with_its_calls_starts_before_their_endings,
};
pub use mcp_oauth::{
    oauth_tokens_are_kept_per_tenant_and_replaced_only_over_the_version_read,
    pending_authorizations_are_taken_once_and_never_after_expiry,
};
pub use mcp_servers::mcp_servers_are_kept_per_tenant_with_their_discovery;
pub use tenant_providers::provider_bindings_and_egress_are_kept_per_tenant;
pub mod idempotency;
pub mod jobs;
mod skills;
pub mod triggers;
pub mod webhooks;
pub use skills::skill_definitions_keep_every_version_within_their_tenant;
mod workflows;
pub use workflows::{
    agents_answers_are_read_back_by_run_for_completed_runs_within_their_tenant,
    checkpoints_are_kept_in_order_per_run_and_tenant, checkpoints_are_purged_by_whole_runs_once_the_newest_is_old,
    workflow_definitions_keep_every_version_within_their_tenant,
};

/// The checks of the [`Stores`] bundle under a module name of their own, as
/// [`contract_checks!`](crate::contract_checks) calls every contract's checks.
#[doc(hidden)]
pub mod stores {
    pub use super::*;
}

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};

use crate::approvals::{
    ApprovalDecision, ApprovalRecord, ApprovalRule, ApprovalStatus, Condition, Operator, arguments_hash,
};
use crate::audit::{AuditFilter, ChainStatus, NewAuditEntry};
use crate::contract::fixtures::{a, b, t0};
use crate::definition::AgentDefinition;
use crate::error::StoreError;
use crate::events::ToolCallStatus;
use crate::events::{RecordedEvent, RunEvent};
use crate::failure::{ErrorClass, RunFailure};
use crate::keys::{ApiKeyRecord, Scope};
use crate::model::{Message, Usage};
use crate::names::{AgentName, RunId, TenantId};
use crate::pricing::{CostSnapshot, Money};
use crate::runs::store::DocumentInput;
use crate::runs::store::LateCompletion;
use crate::runs::store::{
    CancelOutcome, RunEnd, RunFilter, RunInputRecord, RunRecord, RunStats, RunStatus, ToolCallRecord,
};
use crate::sessions::SessionWrite;
use crate::stores::Stores;
use crate::tenants::TenantRecord;
use crate::tools::effect::ToolEffect;

fn name(s: &str) -> AgentName {
    AgentName::parse(s).unwrap()
}
fn def(n: &str, instructions: &str) -> AgentDefinition {
    AgentDefinition::new(n, "scripted", "m").with_instructions(instructions)
}

fn run_row(agent: &str, started: DateTime<Utc>) -> RunRecord {
    RunRecord::opened(RunId(uuid::Uuid::now_v7()), agent, Some(1), RunStatus::Running, started)
}

/// A run's end at `t0()`, 1 ms in, with nothing to account for.
fn ended(status: RunStatus) -> RunEnd {
    RunEnd {
        status,
        ended_at: t0(),
        duration_ms: 1,
        usage: None,
        cost: None,
        model_provider: None,
        model: None,
        error: None,
    }
}

fn event(sequence: u64, text: &str) -> RecordedEvent {
    RecordedEvent {
        sequence,
        timestamp: t0() + Duration::milliseconds(sequence as i64),
        event: RunEvent::MessageDelta { text: text.into() },
    }
}

fn write(messages: Vec<Message>, now: DateTime<Utc>) -> SessionWrite {
    SessionWrite { agent_name: "agent".into(), run_id: None, messages, owner_user_id: None, now }
}

fn conflict<T: std::fmt::Debug>(r: Result<T, StoreError>) -> bool {
    matches!(r, Err(StoreError::Conflict(_)))
}

fn not_found<T: std::fmt::Debug>(r: Result<T, StoreError>) -> bool {
    matches!(r, Err(StoreError::NotFound))
}

// ---- definitions ----------------------------------------------------------------------------

pub async fn definitions_keep_every_version(s: Stores) {
    let d = &s.definitions;
    let v1 = d.create(&a(), def("agent", "one"), t0()).await.unwrap();
    assert_eq!(v1.version, 1);
    let v2 = d.update(&a(), def("agent", "two"), t0() + Duration::seconds(1)).await.unwrap();
    assert_eq!(v2.version, 2);
    assert_eq!(v2.created_at, v1.created_at);
    let current = d.get(&a(), &name("agent")).await.unwrap().unwrap();
    assert_eq!((current.version, current.definition.instructions.as_deref()), (2, Some("two")));
    let versions = d.versions(&a(), &name("agent")).await.unwrap();
    assert_eq!(versions.iter().map(|v| v.version).collect::<Vec<_>>(), vec![2, 1], "newest first");
    assert_eq!(versions[1].definition.instructions.as_deref(), Some("one"), "full snapshots");
    let old = d.version(&a(), &name("agent"), 1).await.unwrap().unwrap();
    assert_eq!(old.definition, def("agent", "one"));
    assert!(d.version(&a(), &name("agent"), 3).await.unwrap().is_none());
    let list = d.list(&a(), 0, 10).await.unwrap();
    assert_eq!(list.len(), 1, "the list holds current versions only");
    assert_eq!(list[0].version, 2);
}

pub async fn definitions_refuse_duplicates_and_missing_updates(s: Stores) {
    let d = &s.definitions;
    d.create(&a(), def("agent", "one"), t0()).await.unwrap();
    assert!(conflict(d.create(&a(), def("agent", "again"), t0()).await));
    assert!(not_found(d.update(&a(), def("ghost", "x"), t0()).await));
    assert_eq!(d.get(&a(), &name("agent")).await.unwrap().unwrap().version, 1);
}

pub async fn definitions_delete_with_their_history(s: Stores) {
    let d = &s.definitions;
    d.create(&a(), def("agent", "one"), t0()).await.unwrap();
    d.update(&a(), def("agent", "two"), t0()).await.unwrap();
    assert!(d.delete(&a(), &name("agent")).await.unwrap());
    assert!(!d.delete(&a(), &name("agent")).await.unwrap());
    assert!(d.get(&a(), &name("agent")).await.unwrap().is_none());
    assert!(d.versions(&a(), &name("agent")).await.unwrap().is_empty());
    let again = d.create(&a(), def("agent", "fresh"), t0()).await.unwrap();
    assert_eq!(again.version, 1);
}

pub async fn definitions_list_in_name_order_with_paging(s: Stores) {
    let d = &s.definitions;
    for n in ["c", "a", "b"] {
        d.create(&a(), def(n, n), t0()).await.unwrap();
    }
    let names: Vec<String> = d.list(&a(), 0, 10).await.unwrap().into_iter().map(|x| x.definition.name).collect();
    assert_eq!(names, vec!["a", "b", "c"]);
    let page: Vec<String> = d.list(&a(), 1, 1).await.unwrap().into_iter().map(|x| x.definition.name).collect();
    assert_eq!(page, vec!["b"]);
}

pub async fn definitions_are_isolated_between_tenants(s: Stores) {
    let d = &s.definitions;
    for (mine, other) in [(a(), b()), (b(), a())] {
        d.create(&mine, def("only-mine", "x"), t0()).await.unwrap();
        assert!(d.get(&other, &name("only-mine")).await.unwrap().is_none());
        assert!(d.list(&other, 0, 10).await.unwrap().iter().all(|x| x.definition.name != "only-mine"));
        assert!(d.versions(&other, &name("only-mine")).await.unwrap().is_empty());
        assert!(d.version(&other, &name("only-mine"), 1).await.unwrap().is_none());
        assert!(not_found(d.update(&other, def("only-mine", "hijack"), t0()).await));
        assert!(!d.delete(&other, &name("only-mine")).await.unwrap());
        assert_eq!(
            d.get(&mine, &name("only-mine")).await.unwrap().unwrap().definition.instructions.as_deref(),
            Some("x")
        );
        d.delete(&mine, &name("only-mine")).await.unwrap();
    }
    // The same name lives independently in both tenants.
    d.create(&a(), def("shared", "a"), t0()).await.unwrap();
    d.create(&b(), def("shared", "b"), t0()).await.unwrap();
    d.update(&b(), def("shared", "b2"), t0()).await.unwrap();
    assert_eq!(d.get(&a(), &name("shared")).await.unwrap().unwrap().version, 1);
    assert_eq!(d.get(&b(), &name("shared")).await.unwrap().unwrap().version, 2);
}

// ---- runs -----------------------------------------------------------------------------------

pub async fn runs_are_created_read_and_finished(s: Stores) {
    let r = &s.runs;
    let mut row = run_row("agent", t0());
    row.session_id = Some("s1".into());
    row.user_id = Some("u1".into());
    row.labels.insert("team".into(), "payments".into());
    r.create_run(&a(), &row, None).await.unwrap();
    assert!(conflict(r.create_run(&a(), &row, None).await));
    let got = r.get_run(&a(), row.id).await.unwrap().unwrap();
    assert_eq!((got.status, got.labels.len(), got.user_id.as_deref()), (RunStatus::Running, 1, Some("u1")));
    let end = RunEnd {
        status: RunStatus::Failed,
        ended_at: t0() + Duration::seconds(2),
        duration_ms: 2000,
        usage: Some(Usage { input_tokens: 3, output_tokens: 4, total_tokens: 7, ..Usage::default() }),
        cost: Some(CostSnapshot {
            currency: "USD".into(),
            input_cost: Money::from_nanos(100_000_000),
            output_cost: Money::from_nanos(200_000_000),
            total_cost: Money::from_nanos(300_000_000),
            input_per_million: 1.0,
            output_per_million: 2.0,
            cached_input_per_million: None,
        }),
        model_provider: Some("openai".into()),
        model: Some("m-2025".into()),
        error: Some(RunFailure::new(ErrorClass::RateLimited, "limited")),
    };
    r.finish_run(&a(), row.id, &end, &[event(1, "last words")]).await.unwrap();
    assert_eq!(
        r.read_events(&a(), row.id, 0, 10).await.unwrap(),
        vec![event(1, "last words")],
        "closed with its last events"
    );
    let got = r.get_run(&a(), row.id).await.unwrap().unwrap();
    assert_eq!(got.status, RunStatus::Failed);
    assert_eq!(got.duration_ms, Some(2000));
    assert_eq!(got.usage, end.usage);
    assert_eq!(got.cost, end.cost);
    assert_eq!(got.model.as_deref(), Some("m-2025"));
    assert_eq!(got.error, end.error);
    assert!(not_found(r.finish_run(&a(), RunId(uuid::Uuid::now_v7()), &end, &[]).await));
}

pub async fn runs_list_with_filters_newest_first(s: Stores) {
    let r = &s.runs;
    let mut rows = Vec::new();
    for i in 0..6 {
        let mut row = run_row(if i % 2 == 0 { "even" } else { "odd" }, t0() + Duration::seconds(i));
        row.session_id = (i < 2).then(|| "s1".to_owned());
        row.user_id = Some(format!("u{}", i % 3));
        if i >= 3 {
            row.labels.insert("team".into(), "payments".into());
        }
        if i == 5 {
            row.labels.insert("job".into(), "nightly".into());
        }
        r.create_run(&a(), &row, None).await.unwrap();
        rows.push(row);
    }
    let done = ended(RunStatus::Completed);
    r.finish_run(&a(), rows[4].id, &done, &[]).await.unwrap();
    let ids = |v: Vec<RunRecord>| v.into_iter().map(|x| x.id).collect::<Vec<_>>();
    let all = ids(r.list_runs(&a(), &RunFilter::default(), 0, 50).await.unwrap());
    assert_eq!(all, rows.iter().rev().map(|x| x.id).collect::<Vec<_>>(), "newest first");
    assert_eq!(ids(r.list_runs(&a(), &RunFilter::default(), 1, 2).await.unwrap()), vec![rows[4].id, rows[3].id]);
    let f = RunFilter { agent: Some("even".into()), ..RunFilter::default() };
    assert_eq!(ids(r.list_runs(&a(), &f, 0, 50).await.unwrap()), vec![rows[4].id, rows[2].id, rows[0].id]);
    let f = RunFilter { status: Some(RunStatus::Completed), ..RunFilter::default() };
    assert_eq!(ids(r.list_runs(&a(), &f, 0, 50).await.unwrap()), vec![rows[4].id]);
    let f = RunFilter { session_id: Some("s1".into()), ..RunFilter::default() };
    assert_eq!(ids(r.list_runs(&a(), &f, 0, 50).await.unwrap()), vec![rows[1].id, rows[0].id]);
    let f = RunFilter { user_id: Some("u2".into()), ..RunFilter::default() };
    assert_eq!(ids(r.list_runs(&a(), &f, 0, 50).await.unwrap()), vec![rows[5].id, rows[2].id]);
    let mut labels = BTreeMap::from([("team".to_owned(), "payments".to_owned())]);
    let f = RunFilter { labels: labels.clone(), ..RunFilter::default() };
    assert_eq!(ids(r.list_runs(&a(), &f, 0, 50).await.unwrap()), vec![rows[5].id, rows[4].id, rows[3].id]);
    labels.insert("job".into(), "nightly".into());
    let f = RunFilter { labels, ..RunFilter::default() };
    assert_eq!(ids(r.list_runs(&a(), &f, 0, 50).await.unwrap()), vec![rows[5].id], "every label must match");
    let f = RunFilter {
        from: Some(t0() + Duration::seconds(2)),
        to: Some(t0() + Duration::seconds(4)),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(r.list_runs(&a(), &f, 0, 50).await.unwrap()),
        vec![rows[3].id, rows[2].id],
        "from inclusive, to exclusive"
    );
}

pub async fn run_stats_aggregate_the_filtered_runs(s: Stores) {
    let r = &s.runs;
    let mut expected = RunStats::default();
    for i in 0..5u64 {
        let mut row = run_row(if i < 3 { "x" } else { "y" }, t0() + Duration::seconds(i as i64));
        row.user_id = (i != 4).then(|| format!("u{}", i % 2));
        row.labels =
            BTreeMap::from([("team".to_owned(), format!("t{}", i % 2)), ("env".to_owned(), "prod".to_owned())]);
        r.create_run(&a(), &row, None).await.unwrap();
        let end = RunEnd {
            status: if i == 1 { RunStatus::Failed } else { RunStatus::Completed },
            ended_at: t0(),
            duration_ms: 5,
            usage: (i != 2).then_some(Usage {
                input_tokens: 10 * i,
                output_tokens: i,
                total_tokens: 11 * i,
                ..Usage::default()
            }),
            cost: (i == 3).then(|| CostSnapshot {
                currency: "EUR".into(),
                input_cost: Money::from_nanos(1_000_000_000),
                output_cost: Money::from_nanos(500_000_000),
                total_cost: Money::from_nanos(1_500_000_000),
                input_per_million: 1.0,
                output_per_million: 1.0,
                cached_input_per_million: None,
            }),
            model_provider: None,
            model: None,
            error: (i == 1).then(|| RunFailure::new(ErrorClass::Timeout, "t")),
        };
        r.finish_run(&a(), row.id, &end, &[]).await.unwrap();
        row.status = end.status;
        row.usage = end.usage;
        row.cost = end.cost.clone();
        row.error = end.error.clone();
        expected.add(&row);
    }
    // Another tenant's runs never count.
    r.create_run(&b(), &run_row("x", t0()), None).await.unwrap();
    let stats = r.stats(&a(), &RunFilter::default()).await.unwrap();
    assert_eq!(stats, expected);
    assert_eq!(stats.total_runs, 5);
    assert_eq!(stats.by_label.get("env:prod"), Some(&5), "a run counts once per label");
    assert_eq!(stats.by_error_class.get(&ErrorClass::Timeout), Some(&1));
    let only_y = r.stats(&a(), &RunFilter { agent: Some("y".into()), ..RunFilter::default() }).await.unwrap();
    assert_eq!(only_y.total_runs, 2);
}

pub async fn run_stats_sum_costs_exactly(s: Stores) {
    let r = &s.runs;
    for (i, nanos) in [100_000_000, 200_000_000, 130_000].into_iter().enumerate() {
        let row = run_row("x", t0() + Duration::seconds(i as i64));
        r.create_run(&a(), &row, None).await.unwrap();
        let cost = Money::from_nanos(nanos);
        let end = RunEnd {
            cost: Some(CostSnapshot {
                currency: "USD".into(),
                input_cost: cost,
                output_cost: Money::ZERO,
                total_cost: cost,
                input_per_million: 0.5,
                output_per_million: 2.0,
                cached_input_per_million: None,
            }),
            status: RunStatus::Completed,
            error: None,
            ..RunEnd::failed(t0(), 5, RunFailure::new(ErrorClass::Internal, "unused"))
        };
        r.finish_run(&a(), row.id, &end, &[]).await.unwrap();
        assert_eq!(r.get_run(&a(), row.id).await.unwrap().unwrap().cost, end.cost, "a cost reads back exactly");
    }
    let stats = r.stats(&a(), &RunFilter::default()).await.unwrap();
    // In f64, 0.1 + 0.2 + 0.00013 is 0.30013000000000003.
    assert_eq!(stats.cost.get("USD"), Some(&Money::from_nanos(300_130_000)));
    assert_eq!(serde_json::to_string(&stats.cost).unwrap(), r#"{"USD":0.30013}"#);
    assert_eq!(stats.runs_with_cost, 3);
}

pub async fn events_append_in_batches_and_read_after_a_cursor(s: Stores) {
    let r = &s.runs;
    let row = run_row("agent", t0());
    r.create_run(&a(), &row, None).await.unwrap();
    r.append_events(&a(), row.id, &[event(1, "a"), event(2, "b")], t0() + Duration::seconds(5)).await.unwrap();
    r.append_events(&a(), row.id, &[event(3, "c")], t0() + Duration::seconds(6)).await.unwrap();
    let all = r.read_events(&a(), row.id, 0, 100).await.unwrap();
    assert_eq!(all.iter().map(|e| e.sequence).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(all[1], event(2, "b"), "events round-trip exactly");
    let after = r.read_events(&a(), row.id, 1, 1).await.unwrap();
    assert_eq!(after.iter().map(|e| e.sequence).collect::<Vec<_>>(), vec![2]);
    assert!(r.read_events(&a(), row.id, 3, 100).await.unwrap().is_empty());
    let heartbeat = r.get_run(&a(), row.id).await.unwrap().unwrap().heartbeat_at;
    assert_eq!(heartbeat, Some(t0() + Duration::seconds(6)), "appending moves the heartbeat");
    // A sequence already stored refuses the whole batch.
    assert!(conflict(r.append_events(&a(), row.id, &[event(4, "d"), event(3, "dup")], t0()).await));
    assert_eq!(r.read_events(&a(), row.id, 0, 100).await.unwrap().len(), 3, "nothing of a refused batch is written");
    assert!(not_found(r.append_events(&a(), RunId(uuid::Uuid::now_v7()), &[event(1, "x")], t0()).await));
}

pub async fn concurrent_appends_to_different_runs_stay_gapless(s: Stores) {
    let r = s.runs.clone();
    let mut ids = Vec::new();
    for _ in 0..20 {
        let row = run_row("agent", t0());
        r.create_run(&a(), &row, None).await.unwrap();
        ids.push(row.id);
    }
    let tasks = ids.iter().map(|id| {
        let r = r.clone();
        let id = *id;
        async move {
            for batch in 0..5u64 {
                let events: Vec<RecordedEvent> = (1..=4).map(|k| event(batch * 4 + k, "x")).collect();
                r.append_events(&a(), id, &events, t0()).await.unwrap();
            }
        }
    });
    futures::future::join_all(tasks).await;
    for id in ids {
        let seqs: Vec<u64> = r.read_events(&a(), id, 0, 1000).await.unwrap().into_iter().map(|e| e.sequence).collect();
        assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
    }
}

fn call(run: RunId, id: &str) -> ToolCallRecord {
    ToolCallRecord {
        run_id: run,
        call_id: id.into(),
        tool_name: "lookup".into(),
        arguments: r#"{"q":1}"#.into(),
        effect: Some(crate::tools::effect::ToolEffect::Read),
        status: ToolCallStatus::TimedOut,
        result: None,
        error: Some("timed out".into()),
        omitted_bytes: None,
        started_at: t0(),
        duration_ms: 50,
        timed_out: true,
        late_completed_at: None,
        late_duration_ms: None,
        late_result: None,
        late_error: None,
    }
}

pub async fn tool_calls_are_stored_individually_with_late_completions(s: Stores) {
    let r = &s.runs;
    let row = run_row("agent", t0());
    r.create_run(&a(), &row, None).await.unwrap();
    r.record_tool_call(&a(), &call(row.id, "c1")).await.unwrap();
    r.record_tool_call(&a(), &call(row.id, "c2")).await.unwrap();
    let mut updated = call(row.id, "c1");
    updated.duration_ms = 60;
    r.record_tool_call(&a(), &updated).await.unwrap();
    let late = LateCompletion {
        tenant: a(),
        run_id: row.id,
        call_id: "c2".into(),
        completed_at: t0() + Duration::seconds(9),
        duration_ms: 9000,
        result: Ok("finally".into()),
    };
    r.complete_tool_call_late(&a(), &late).await.unwrap();
    let calls = r.list_tool_calls(&a(), row.id).await.unwrap();
    assert_eq!(
        calls.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(),
        vec!["c1", "c2"],
        "in call order, no duplicate"
    );
    assert_eq!(calls[0].duration_ms, 60);
    assert_eq!(calls[1].late_result.as_deref(), Some("finally"));
    assert_eq!(calls[1].late_duration_ms, Some(9000));
    assert_eq!(calls[1].error.as_deref(), Some("timed out"), "what the model was told stays");
    let missing = LateCompletion { call_id: "nope".into(), ..late };
    assert!(not_found(r.complete_tool_call_late(&a(), &missing).await));
}

pub async fn run_input_is_recorded(s: Stores) {
    let r = &s.runs;
    let with_input = run_row("agent", t0());
    let first =
        RunInputRecord { message: "first".into(), culture: None, parameters: BTreeMap::new(), documents: Vec::new() };
    r.create_run(&a(), &with_input, Some(&first)).await.unwrap();
    assert_eq!(r.get_input(&a(), with_input.id).await.unwrap(), Some(first), "written with the row");
    let row = run_row("agent", t0());
    r.create_run(&a(), &row, None).await.unwrap();
    assert!(r.get_input(&a(), row.id).await.unwrap().is_none());
    let input = RunInputRecord {
        message: "hello".into(),
        culture: Some("tr".into()),
        parameters: BTreeMap::from([("customer".to_owned(), "Ada".to_owned())]),
        documents: vec![DocumentInput { name: "a.md".into(), content: "text".into() }],
    };
    r.record_input(&a(), row.id, &input).await.unwrap();
    assert_eq!(r.get_input(&a(), row.id).await.unwrap(), Some(input));
}

pub async fn cancel_is_a_flag_on_a_running_run(s: Stores) {
    let r = &s.runs;
    let row = run_row("agent", t0());
    r.create_run(&a(), &row, None).await.unwrap();
    assert!(!r.is_cancel_requested(&a(), row.id).await.unwrap());
    // The statements a running run makes anyway say whether it is to stop: no read of its own.
    assert!(!r.append_events(&a(), row.id, &[event(1, "a")], t0()).await.unwrap(), "an event write: go on");
    assert!(!r.heartbeat(&a(), row.id, t0()).await.unwrap(), "a heartbeat: go on");
    assert_eq!(r.request_cancel(&a(), row.id).await.unwrap(), CancelOutcome::Requested);
    assert!(r.is_cancel_requested(&a(), row.id).await.unwrap());
    assert!(r.append_events(&a(), row.id, &[event(2, "b")], t0()).await.unwrap(), "an event write: stop");
    assert!(r.heartbeat(&a(), row.id, t0()).await.unwrap(), "a heartbeat: stop");
    assert!(r.heartbeat(&b(), row.id, t0()).await.unwrap(), "another tenant's run is missing: stop");
    let done = ended(RunStatus::Canceled);
    r.finish_run(&a(), row.id, &done, &[]).await.unwrap();
    assert_eq!(r.request_cancel(&a(), row.id).await.unwrap(), CancelOutcome::AlreadyEnded(RunStatus::Canceled));
    assert!(not_found(r.request_cancel(&a(), RunId(uuid::Uuid::now_v7())).await));
}

pub async fn a_queued_run_starts_once_and_can_be_cancelled_while_it_waits(s: Stores) {
    let r = &s.runs;
    let mut row = run_row("agent", t0());
    row.status = RunStatus::Queued;
    r.create_run(&a(), &row, None).await.unwrap();
    assert_eq!(r.request_cancel(&a(), row.id).await.unwrap(), CancelOutcome::Requested, "a queued run takes the flag");
    assert_eq!(r.start_queued(&b(), row.id, t0()).await.unwrap(), None, "another tenant's run is not started");
    let later = t0() + Duration::seconds(5);
    let tenant = a();
    let started = futures::future::join_all((0..4).map(|_| r.start_queued(&tenant, row.id, later))).await;
    let started: Vec<Option<bool>> = started.into_iter().map(Result::unwrap).collect();
    assert_eq!(started.iter().flatten().collect::<Vec<_>>(), [&true], "one worker starts it, told of the cancel");
    let read = r.get_run(&a(), row.id).await.unwrap().unwrap();
    assert_eq!((read.status, read.started_at, read.cancel_requested), (RunStatus::Running, later, true));
    assert_eq!(r.start_queued(&a(), RunId(uuid::Uuid::now_v7()), later).await.unwrap(), None);
}

pub async fn stale_runs_are_found_across_tenants_and_closed_once(s: Stores) {
    let r = &s.runs;
    let fresh = run_row("agent", t0());
    let mut quiet = run_row("agent", t0());
    quiet.heartbeat_at = Some(t0() - Duration::minutes(10));
    let mut theirs = run_row("agent", t0());
    theirs.heartbeat_at = Some(t0() - Duration::minutes(20));
    let mut queued = run_row("agent", t0() - Duration::hours(1));
    queued.status = RunStatus::Queued;
    queued.heartbeat_at = None;
    r.create_run(&a(), &fresh, None).await.unwrap();
    r.create_run(&a(), &quiet, None).await.unwrap();
    r.create_run(&b(), &theirs, None).await.unwrap();
    r.create_run(&a(), &queued, None).await.unwrap();
    r.append_events(&a(), quiet.id, &[event(1, "a"), event(2, "b")], t0() - Duration::minutes(10)).await.unwrap();
    // The fresh run's executor is alive: its heartbeat moves.
    r.heartbeat(&a(), fresh.id, t0() + Duration::minutes(1)).await.unwrap();

    let stale_before = t0() - Duration::minutes(5);
    let stale = r.stale_runs(stale_before, 10).await.unwrap();
    let found: Vec<(TenantId, RunId, u64)> = stale.iter().map(|s| (s.tenant.clone(), s.id, s.last_sequence)).collect();
    assert_eq!(found, vec![(b(), theirs.id, 0), (a(), quiet.id, 2)], "oldest first, queued and fresh runs left out");
    assert_eq!(r.stale_runs(stale_before, 1).await.unwrap().len(), 1);

    let failure = RunFailure::new(ErrorClass::Orphaned, "closed");
    let end = RunEnd::failed(t0(), 5, failure.clone());
    let closing = RecordedEvent { sequence: 3, timestamp: t0(), event: RunEvent::RunFailed { error: failure.clone() } };
    assert!(
        !r.close_stale(&b(), quiet.id, stale_before, &end, std::slice::from_ref(&closing)).await.unwrap(),
        "not b's run"
    );
    let tenant = a();
    let racing = futures::future::join_all(
        (0..3).map(|_| r.close_stale(&tenant, quiet.id, stale_before, &end, std::slice::from_ref(&closing))),
    )
    .await;
    assert_eq!(racing.into_iter().filter(|c| matches!(c, Ok(true))).count(), 1, "closed once");
    let read = r.get_run(&a(), quiet.id).await.unwrap().unwrap();
    assert_eq!((read.status, read.error.map(|e| e.error_class)), (RunStatus::Failed, Some(ErrorClass::Orphaned)));
    let events = r.read_events(&a(), quiet.id, 0, 10).await.unwrap();
    assert_eq!(events.iter().map(|e| e.sequence).collect::<Vec<_>>(), [1, 2, 3]);
    // An executor that wakes up under a closed run reads that it is to stop; a running or
    // queued run's executor does not.
    assert!(r.is_cancel_requested(&a(), quiet.id).await.unwrap());
    assert!(!r.is_cancel_requested(&a(), fresh.id).await.unwrap());
    assert!(!r.is_cancel_requested(&a(), queued.id).await.unwrap());
    assert_eq!(events[2].event, RunEvent::RunFailed { error: failure });
    // A run that heartbeats again is no longer stale and is not closed.
    r.heartbeat(&b(), theirs.id, t0()).await.unwrap();
    let third = RecordedEvent { sequence: 1, ..closing };
    assert!(!r.close_stale(&b(), theirs.id, stale_before, &end, &[third]).await.unwrap());
    assert_eq!(r.get_run(&b(), theirs.id).await.unwrap().unwrap().status, RunStatus::Running);
    assert!(r.stale_runs(stale_before, 10).await.unwrap().is_empty());
    // A heartbeat never reopens or touches an ended run.
    r.heartbeat(&a(), quiet.id, t0() + Duration::hours(1)).await.unwrap();
    assert_eq!(r.get_run(&a(), quiet.id).await.unwrap().unwrap().heartbeat_at, Some(t0()));
}

fn schedule(
    tenant: TenantId,
    name: &str,
    timing: crate::schedules::Timing,
    next: DateTime<Utc>,
) -> crate::schedules::ScheduleRecord {
    crate::schedules::ScheduleRecord {
        id: uuid::Uuid::now_v7(),
        tenant,
        name: name.into(),
        target: crate::schedules::ScheduleTarget::Agent(AgentName::parse("agent").unwrap()),
        message: "Summarize the day's tickets.".into(),
        parameters: BTreeMap::from([("team".to_owned(), "support".to_owned())]),
        timing,
        enabled: true,
        next_run_at: Some(next),
        last_run_at: None,
        last_run_id: None,
        last_error: None,
        created_at: t0(),
        updated_at: t0(),
    }
}

pub async fn schedules_are_stored_listed_updated_and_isolated(s: Stores) {
    use crate::schedules::Timing;
    let st = &s.schedules;
    let daily = schedule(a(), "daily", Timing::cron("0 9 * * *", "Europe/Berlin").unwrap(), t0());
    let once = schedule(a(), "once", Timing::Once(t0() + Duration::hours(1)), t0() + Duration::hours(1));
    st.create(&daily).await.unwrap();
    st.create(&once).await.unwrap();
    assert!(conflict(st.create(&schedule(a(), "daily", Timing::Once(t0()), t0())).await), "names are unique");
    st.create(&schedule(b(), "daily", Timing::Once(t0()), t0())).await.unwrap();
    assert_eq!(st.get(&a(), daily.id).await.unwrap().as_ref(), Some(&daily));
    assert_eq!(st.get(&b(), daily.id).await.unwrap(), None, "another tenant's schedule is missing");
    let names: Vec<String> = st.list(&a(), 0, 10).await.unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["daily", "once"]);
    assert_eq!(st.list(&a(), 1, 10).await.unwrap().len(), 1);

    let mut changed = daily.clone();
    changed.name = "weekday".into();
    changed.timing = Timing::cron("30 8 * * 1-5", "UTC").unwrap();
    changed.enabled = false;
    changed.target = crate::schedules::ScheduleTarget::Workflow(crate::names::WorkflowName::parse("triage").unwrap());
    st.update(&changed).await.unwrap();
    let read = st.get(&a(), daily.id).await.unwrap().unwrap();
    assert_eq!((&read.timing, &read.target), (&changed.timing, &changed.target), "a workflow target reads back");
    let mut clash = changed.clone();
    clash.name = "once".into();
    assert!(conflict(st.update(&clash).await));
    let mut foreign = changed.clone();
    foreign.tenant = b();
    assert!(not_found(st.update(&foreign).await), "an update cannot reach another tenant");
    assert!(!st.delete(&b(), once.id).await.unwrap());
    assert!(st.delete(&a(), once.id).await.unwrap());
    assert!(!st.delete(&a(), once.id).await.unwrap());
}

pub async fn due_schedules_are_taken_once_per_occurrence(s: Stores) {
    use crate::schedules::Timing;
    let st = &s.schedules;
    let due = schedule(a(), "due", Timing::cron("*/5 * * * *", "UTC").unwrap(), t0());
    let theirs = schedule(b(), "theirs", Timing::Once(t0() - Duration::minutes(1)), t0() - Duration::minutes(1));
    let later = schedule(a(), "later", Timing::Once(t0() + Duration::hours(1)), t0() + Duration::hours(1));
    let mut off = schedule(a(), "off", Timing::Once(t0()), t0());
    off.enabled = false;
    for s in [&due, &theirs, &later, &off] {
        st.create(s).await.unwrap();
    }
    let found: Vec<String> = st.due(t0(), 10).await.unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(found, ["theirs", "due"], "enabled and due, across tenants, earliest first");

    let next = t0() + Duration::minutes(5);
    let tenant = a();
    let racing = futures::future::join_all((0..4).map(|_| st.advance(&tenant, due.id, t0(), Some(next), t0()))).await;
    assert_eq!(racing.into_iter().filter(|r| matches!(r, Ok(true))).count(), 1, "one tick takes the occurrence");
    let run = RunId(uuid::Uuid::now_v7());
    st.record_outcome(&a(), due.id, Some(run), None).await.unwrap();
    let read = st.get(&a(), due.id).await.unwrap().unwrap();
    assert_eq!((read.next_run_at, read.last_run_at, read.last_run_id), (Some(next), Some(t0()), Some(run)));
    assert!(!st.advance(&b(), theirs.id, t0(), None, t0()).await.unwrap(), "a stale expectation takes nothing");
    assert!(st.advance(&b(), theirs.id, t0() - Duration::minutes(1), None, t0()).await.unwrap());
    st.record_outcome(&b(), theirs.id, None, Some("The agent does not exist.")).await.unwrap();
    let done = st.get(&b(), theirs.id).await.unwrap().unwrap();
    assert_eq!((done.next_run_at, done.last_error.as_deref()), (None, Some("The agent does not exist.")));
    assert!(st.due(t0(), 10).await.unwrap().is_empty());
    assert_eq!(st.due(next, 10).await.unwrap().len(), 1);
}

pub async fn runs_are_isolated_between_tenants(s: Stores) {
    let r = &s.runs;
    for (mine, other) in [(a(), b()), (b(), a())] {
        let others_before = r.stats(&other, &RunFilter::default()).await.unwrap().total_runs;
        let row = run_row("agent", t0());
        r.create_run(&mine, &row, None).await.unwrap();
        r.append_events(&mine, row.id, &[event(1, "secret")], t0()).await.unwrap();
        r.record_tool_call(&mine, &call(row.id, "c1")).await.unwrap();
        let input =
            RunInputRecord { message: "m".into(), culture: None, parameters: BTreeMap::new(), documents: Vec::new() };
        r.record_input(&mine, row.id, &input).await.unwrap();

        assert!(r.get_run(&other, row.id).await.unwrap().is_none());
        assert!(r.list_runs(&other, &RunFilter::default(), 0, 100).await.unwrap().iter().all(|x| x.id != row.id));
        assert_eq!(r.stats(&other, &RunFilter::default()).await.unwrap().total_runs, others_before);
        assert!(r.read_events(&other, row.id, 0, 100).await.unwrap().is_empty());
        assert!(r.list_tool_calls(&other, row.id).await.unwrap().is_empty());
        assert!(r.get_input(&other, row.id).await.unwrap().is_none());
        assert!(!r.is_cancel_requested(&other, row.id).await.unwrap());
        assert!(not_found(r.request_cancel(&other, row.id).await));
        assert!(not_found(r.append_events(&other, row.id, &[event(2, "x")], t0()).await));
        assert!(not_found(r.record_tool_call(&other, &call(row.id, "c9")).await));
        assert!(not_found(r.record_input(&other, row.id, &input).await));
        let end = ended(RunStatus::Completed);
        assert!(not_found(r.finish_run(&other, row.id, &end, &[]).await));
        let late = LateCompletion {
            tenant: other.clone(),
            run_id: row.id,
            call_id: "c1".into(),
            completed_at: t0(),
            duration_ms: 1,
            result: Ok("x".into()),
        };
        assert!(not_found(r.complete_tool_call_late(&other, &late).await));
        // Nothing the other tenant tried changed the owner's run.
        let mine_row = r.get_run(&mine, row.id).await.unwrap().unwrap();
        assert_eq!(mine_row.status, RunStatus::Running);
        assert!(!mine_row.cancel_requested);
        assert_eq!(r.read_events(&mine, row.id, 0, 100).await.unwrap().len(), 1);
        assert_eq!(r.list_tool_calls(&mine, row.id).await.unwrap().len(), 1);
    }
    let only_a = r.stats(&a(), &RunFilter::default()).await.unwrap();
    assert_eq!(only_a.total_runs, 1);
}

// ---- sessions -----------------------------------------------------------------------------------

pub async fn sessions_create_once_and_append_against_the_generation_read(s: Stores) {
    let ss = &s.sessions;
    let first = ss.try_create(&a(), "s1", &write(vec![Message::user("hi"), assistant("hello")], t0())).await.unwrap();
    assert_eq!((first.version, first.item_count), (1, 2));
    assert!(conflict(ss.try_create(&a(), "s1", &write(vec![Message::user("again")], t0())).await));
    let second =
        ss.try_append(&a(), "s1", 1, &write(vec![Message::user("more"), assistant("sure")], t0())).await.unwrap();
    assert_eq!((second.version, second.item_count), (2, 4));
    // A writer that read generation 1 lost the race: refused, nothing written.
    assert!(conflict(ss.try_append(&a(), "s1", 1, &write(vec![Message::user("stale")], t0())).await));
    let items = ss.items(&a(), "s1").await.unwrap();
    assert_eq!(items.iter().map(|i| i.sequence).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    assert_eq!(items[2].message, Message::user("more"));
    assert!(not_found(ss.try_append(&a(), "ghost", 1, &write(vec![Message::user("x")], t0())).await));
    assert_eq!(ss.get(&a(), "s1").await.unwrap().unwrap().version, 2);
}

pub async fn concurrent_saves_of_one_generation_let_exactly_one_through(s: Stores) {
    let ss = s.sessions.clone();
    ss.try_create(&a(), "race", &write(vec![Message::user("start")], t0())).await.unwrap();
    let attempts = (0..50).map(|i| {
        let ss = ss.clone();
        async move { ss.try_append(&a(), "race", 1, &write(vec![Message::user(format!("turn {i}"))], t0())).await }
    });
    let results = futures::future::join_all(attempts).await;
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    assert!(results.iter().filter(|r| r.is_err()).all(|r| matches!(r, Err(StoreError::Conflict(_)))));
    let session = ss.get(&a(), "race").await.unwrap().unwrap();
    assert_eq!((session.version, session.item_count), (2, 2));
}

pub async fn sessions_list_newest_first_and_delete(s: Stores) {
    let ss = &s.sessions;
    for (i, id) in ["old", "mid", "new"].iter().enumerate() {
        ss.try_create(&a(), id, &write(vec![Message::user("x")], t0() + Duration::seconds(i as i64))).await.unwrap();
    }
    let ids: Vec<String> = ss.list(&a(), None, 0, 10).await.unwrap().into_iter().map(|x| x.id).collect();
    assert_eq!(ids, vec!["new", "mid", "old"]);
    let page: Vec<String> = ss.list(&a(), None, 1, 1).await.unwrap().into_iter().map(|x| x.id).collect();
    assert_eq!(page, vec!["mid"]);
    assert!(ss.delete(&a(), "mid").await.unwrap());
    assert!(!ss.delete(&a(), "mid").await.unwrap());
    assert!(ss.get(&a(), "mid").await.unwrap().is_none());
    assert!(ss.items(&a(), "mid").await.unwrap().is_empty());
}

pub async fn sessions_list_narrows_to_an_owner_before_paging(s: Stores) {
    let ss = &s.sessions;
    for (i, (id, owner)) in
        [("u1-old", Some("u1")), ("u2", Some("u2")), ("unowned", None), ("u1-new", Some("u1"))].into_iter().enumerate()
    {
        let w = SessionWrite {
            owner_user_id: owner.map(str::to_owned),
            ..write(vec![Message::user("x")], t0() + Duration::seconds(i as i64))
        };
        ss.try_create(&a(), id, &w).await.unwrap();
    }
    let ids = |v: Vec<crate::sessions::SessionRecord>| v.into_iter().map(|x| x.id).collect::<Vec<_>>();
    assert_eq!(ids(ss.list(&a(), Some("u1"), 0, 10).await.unwrap()), ["u1-new", "u1-old"]);
    assert_eq!(ids(ss.list(&a(), Some("u1"), 1, 1).await.unwrap()), ["u1-old"], "narrowed before paging");
    assert_eq!(ss.list(&a(), None, 0, 10).await.unwrap().len(), 4, "the unfiltered listing has the unowned row");
    assert!(ss.list(&b(), Some("u1"), 0, 10).await.unwrap().is_empty());
}

pub async fn branching_copies_items_and_leaves_the_parent_alone(s: Stores) {
    let ss = &s.sessions;
    let messages: Vec<Message> = (0..6).map(|i| Message::user(format!("m{i}"))).collect();
    ss.try_create(&a(), "parent", &write(messages, t0())).await.unwrap();
    let parent_before = ss.items(&a(), "parent").await.unwrap();
    let branch = ss.branch(&a(), "parent", 3, "child", Some("u1".into()), t0() + Duration::seconds(1)).await.unwrap();
    assert_eq!(branch.item_count, 4);
    let parent = branch.parent.clone().unwrap();
    assert_eq!((parent.session_id.as_str(), parent.sequence), ("parent", 3));
    assert_eq!(branch.owner_user_id.as_deref(), Some("u1"));
    let child_items = ss.items(&a(), "child").await.unwrap();
    assert_eq!(
        child_items.iter().map(|i| i.message.clone()).collect::<Vec<_>>(),
        parent_before[..4].iter().map(|i| i.message.clone()).collect::<Vec<_>>()
    );
    // Writing to the branch never changes the parent.
    ss.try_append(&a(), "child", 1, &write(vec![Message::user("branch only")], t0())).await.unwrap();
    assert_eq!(ss.items(&a(), "parent").await.unwrap(), parent_before);
    assert_eq!(ss.get(&a(), "parent").await.unwrap().unwrap().version, 1);
    assert!(not_found(ss.branch(&a(), "ghost", 0, "x", None, t0()).await));
    assert!(conflict(ss.branch(&a(), "parent", 1, "child", None, t0()).await));
}

pub async fn a_session_names_its_agent_and_a_branch_none_until_its_first_turn(s: Stores) {
    let ss = &s.sessions;
    let turn =
        |agent: &str, text: &str| SessionWrite { agent_name: agent.into(), ..write(vec![Message::user(text)], t0()) };
    let created = ss.try_create(&a(), "support-1", &turn("support", "hi")).await.unwrap();
    assert_eq!(created.agent_name.as_deref(), Some("support"));
    let appended = ss.try_append(&a(), "support-1", 1, &turn("support", "again")).await.unwrap();
    assert_eq!(appended.agent_name.as_deref(), Some("support"));
    assert_eq!(ss.get(&a(), "support-1").await.unwrap().unwrap().agent(), Some("support"));
    // A reserved conversation names no agent (an empty name is none).
    ss.try_create(&a(), "conv", &turn("", "reserved")).await.unwrap();
    assert_eq!(ss.get(&a(), "conv").await.unwrap().unwrap().agent(), None);
    // A branch is a new conversation: no agent until its first turn names one.
    let branch = ss.branch(&a(), "support-1", 0, "branch", None, t0()).await.unwrap();
    assert_eq!(branch.agent_name, None);
    assert_eq!(ss.get(&a(), "branch").await.unwrap().unwrap().agent_name, None);
    let taken = ss.try_append(&a(), "branch", 1, &turn("orders", "mine now")).await.unwrap();
    assert_eq!(taken.agent_name.as_deref(), Some("orders"));
    assert_eq!(ss.get(&a(), "support-1").await.unwrap().unwrap().agent(), Some("support"), "the parent is unchanged");
}

pub async fn sessions_are_isolated_between_tenants(s: Stores) {
    let ss = &s.sessions;
    for (mine, other) in [(a(), b()), (b(), a())] {
        ss.try_create(&mine, "private", &write(vec![Message::user("secret")], t0())).await.unwrap();
        assert!(ss.get(&other, "private").await.unwrap().is_none());
        assert!(ss.items(&other, "private").await.unwrap().is_empty());
        assert!(ss.list(&other, None, 0, 100).await.unwrap().iter().all(|x| x.id != "private"));
        assert!(not_found(ss.try_append(&other, "private", 1, &write(vec![Message::user("x")], t0())).await));
        assert!(!ss.delete(&other, "private").await.unwrap());
        assert!(not_found(ss.branch(&other, "private", 0, "stolen", None, t0()).await));
        assert_eq!(ss.items(&mine, "private").await.unwrap().len(), 1);
        assert!(ss.delete(&mine, "private").await.unwrap());
    }
    // The same id lives independently in both tenants.
    ss.try_create(&a(), "same", &write(vec![Message::user("a")], t0())).await.unwrap();
    ss.try_create(&b(), "same", &write(vec![Message::user("b1"), Message::user("b2")], t0())).await.unwrap();
    assert_eq!(ss.get(&a(), "same").await.unwrap().unwrap().item_count, 1);
    assert_eq!(ss.get(&b(), "same").await.unwrap().unwrap().item_count, 2);
}

fn assistant(text: &str) -> Message {
    Message::Assistant { text: Some(text.into()), tool_calls: Vec::new(), reasoning: Vec::new() }
}

fn key_row(tenant: TenantId, name: &str, created: DateTime<Utc>) -> (ApiKeyRecord, String) {
    let secret = crate::keys::generate().unwrap();
    let scopes = [Scope::RunsWrite, Scope::RunsRead].into();
    let row = ApiKeyRecord {
        expires_at: Some(created + Duration::days(30)),
        ..ApiKeyRecord::issued(&secret, tenant, name, scopes, created)
    };
    (row, secret.key)
}

pub async fn api_keys_are_stored_as_hashes_and_found_by_id(s: Stores) {
    let (row, key) = key_row(a(), "widget", t0());
    s.keys.create(&row).await.unwrap();
    let found = s.keys.find(&row.id).await.unwrap().unwrap();
    assert_eq!(found, row, "every field round-trips");
    assert_eq!(found.hash, crate::keys::digest(&key));
    assert_eq!(s.keys.find("000000000000").await.unwrap(), None);
    // The id is unique across tenants.
    let mut clash = key_row(b(), "other", t0()).0;
    clash.id = row.id.clone();
    assert!(matches!(s.keys.create(&clash).await, Err(StoreError::Conflict(_))));
}

pub async fn api_keys_revoke_once_rotate_and_record_use(s: Stores) {
    let (row, _) = key_row(a(), "ci", t0());
    s.keys.create(&row).await.unwrap();
    s.keys.touch(&row.id, t0() + Duration::minutes(1)).await.unwrap();
    assert_eq!(s.keys.get(&a(), &row.id).await.unwrap().unwrap().last_used_at, Some(t0() + Duration::minutes(1)));

    let rotated = s.keys.rotate(&a(), &row.id, [7; 32], t0() + Duration::minutes(2)).await.unwrap();
    assert_eq!(rotated.hash, [7; 32]);
    assert_eq!(rotated.rotated_at, Some(t0() + Duration::minutes(2)));
    assert_eq!(s.keys.find(&row.id).await.unwrap().unwrap().hash, [7; 32]);

    let revoked = s.keys.revoke(&a(), &row.id, t0() + Duration::minutes(3)).await.unwrap();
    assert_eq!(revoked.revoked_at, Some(t0() + Duration::minutes(3)));
    assert!(!revoked.is_active(t0() + Duration::minutes(4)));
    let again = s.keys.revoke(&a(), &row.id, t0() + Duration::minutes(9)).await.unwrap();
    assert_eq!(again.revoked_at, Some(t0() + Duration::minutes(3)), "the first revocation time stays");
    assert!(matches!(s.keys.rotate(&a(), &row.id, [8; 32], t0()).await, Err(StoreError::Conflict(_))));
}

pub async fn api_keys_are_isolated_between_tenants(s: Stores) {
    let (older, _) = key_row(a(), "older", t0());
    let (newer, _) = key_row(a(), "newer", t0() + Duration::seconds(1));
    let (theirs, _) = key_row(b(), "theirs", t0());
    for k in [&older, &newer, &theirs] {
        s.keys.create(k).await.unwrap();
    }
    let names: Vec<String> = s.keys.list(&a()).await.unwrap().into_iter().map(|k| k.name).collect();
    assert_eq!(names, ["newer", "older"], "newest first, only the tenant's");
    assert_eq!(s.keys.get(&a(), &theirs.id).await.unwrap(), None);
    assert!(matches!(s.keys.revoke(&a(), &theirs.id, t0()).await, Err(StoreError::NotFound)));
    assert!(matches!(s.keys.rotate(&a(), &theirs.id, [1; 32], t0()).await, Err(StoreError::NotFound)));
    assert!(s.keys.get(&b(), &theirs.id).await.unwrap().unwrap().is_active(t0()), "untouched by tenant a");
}

fn audit_entry(action: &str, entity: &str, at: DateTime<Utc>) -> NewAuditEntry {
    NewAuditEntry::new(
        at,
        "key:0123456789ab",
        action,
        ("agent", entity),
        Some(&serde_json::json!({"name": entity, "apiKey": "must-not-be-stored", "version": 1})),
        Some(&serde_json::json!({"name": entity, "instructions": "Ünïcode \"quoted\" text", "version": 2})),
    )
}

pub async fn audit_entries_chain_per_tenant_and_read_back_verifiable(s: Stores) {
    for i in 0..3 {
        s.audit.append(&a(), audit_entry("agent.update", "support", t0() + Duration::seconds(i))).await.unwrap();
    }
    let first_b = s.audit.append(&b(), audit_entry("agent.create", "other", t0())).await.unwrap();
    assert_eq!(first_b.sequence, 1, "numbering is per tenant");
    let chain = s.audit.chain(&a()).await.unwrap();
    assert_eq!(chain.iter().map(|e| e.sequence).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(crate::audit::verify(&chain).status, ChainStatus::Valid, "read back, the chain still verifies");
    assert!(chain.iter().all(|e| !e.before.as_deref().unwrap_or_default().contains("must-not-be-stored")));
    assert_eq!(chain[0].at, (t0()), "microsecond times round-trip");
    // Newest first, filtered, paged, only the tenant's.
    s.audit.append(&a(), audit_entry("agent.delete", "billing", t0() + Duration::seconds(9))).await.unwrap();
    let listed = s.audit.list(&a(), &AuditFilter::default(), 0, 10).await.unwrap();
    assert_eq!(listed.iter().map(|e| e.sequence).collect::<Vec<_>>(), [4, 3, 2, 1]);
    let only = AuditFilter { entity_id: Some("support".into()), ..AuditFilter::default() };
    assert_eq!(s.audit.list(&a(), &only, 1, 1).await.unwrap()[0].sequence, 2);
    let deletes = AuditFilter { action: Some("agent.delete".into()), ..AuditFilter::default() };
    assert_eq!(s.audit.list(&a(), &deletes, 0, 10).await.unwrap().len(), 1);
    let window = AuditFilter {
        from: Some(t0() + Duration::seconds(1)),
        to: Some(t0() + Duration::seconds(2)),
        ..AuditFilter::default()
    };
    assert_eq!(s.audit.list(&a(), &window, 0, 10).await.unwrap().iter().map(|e| e.sequence).collect::<Vec<_>>(), [2]);
    assert!(s.audit.list(&b(), &only, 0, 10).await.unwrap().is_empty());
}

pub async fn concurrent_audit_appends_never_share_or_skip_a_number(s: Stores) {
    let appends = (0..16).map(|i| {
        let store = s.audit.clone();
        async move { store.append(&a(), audit_entry("agent.update", &format!("a{i}"), t0())).await.unwrap() }
    });
    futures::future::join_all(appends).await;
    let chain = s.audit.chain(&a()).await.unwrap();
    assert_eq!(chain.iter().map(|e| e.sequence).collect::<Vec<_>>(), (1..=16).collect::<Vec<u64>>());
    assert_eq!(crate::audit::verify(&chain).status, ChainStatus::Valid);
}

// ---- approvals ------------------------------------------------------------------------------

fn approval_request(tenant: TenantId, run: RunId, call: &str, created: DateTime<Utc>) -> ApprovalRecord {
    ApprovalRecord {
        id: uuid::Uuid::now_v7(),
        tenant,
        run_id: run,
        session_id: Some("s1".into()),
        agent_name: "support".into(),
        call_id: call.into(),
        tool_name: "refund".into(),
        arguments: serde_json::json!({"amount": 80, "note": "Ünïcode \"quoted\"", "order": {"items": [{"sku": "A1"}]}}),
        effect: ToolEffect::Destructive,
        requested_by: Some("u1".into()),
        created_at: created,
        expires_at: created + Duration::hours(1),
        status: ApprovalStatus::Pending,
        decided_at: None,
        decided_by: None,
        reason: None,
        resumed_run_id: None,
    }
}

fn decision(approved: bool, by: &str, reason: Option<&str>) -> ApprovalDecision {
    ApprovalDecision { approved, decided_by: by.into(), reason: reason.map(str::to_owned) }
}

fn ids(rows: &[ApprovalRecord]) -> Vec<uuid::Uuid> {
    rows.iter().map(|r| r.id).collect()
}

pub async fn approvals_are_created_read_and_isolated_between_tenants(s: Stores) {
    let ap = &s.approvals;
    let run = RunId(uuid::Uuid::now_v7());
    let first = approval_request(a(), run, "c1", t0());
    let mut second = approval_request(a(), run, "c2", t0() + Duration::seconds(1));
    second.session_id = None;
    second.requested_by = None;
    second.effect = ToolEffect::External;
    second.arguments = serde_json::json!([1, 2.5, null, true, "x"]);
    ap.create(&[first.clone(), second.clone()]).await.unwrap();
    assert_eq!(ap.get(&a(), first.id).await.unwrap().as_ref(), Some(&first), "every field round-trips");
    assert_eq!(ap.get(&a(), second.id).await.unwrap().as_ref(), Some(&second));
    assert!(ap.get(&a(), uuid::Uuid::now_v7()).await.unwrap().is_none());
    // A taken id refuses the whole batch.
    let fresh = approval_request(a(), run, "c3", t0());
    assert!(conflict(ap.create(&[fresh.clone(), first.clone()]).await));
    assert!(ap.get(&a(), fresh.id).await.unwrap().is_none(), "nothing of a refused batch is stored");
    assert_eq!(ids(&ap.list_for_run(&a(), run).await.unwrap()), [first.id, second.id]);

    // Another tenant's request looks missing, for every method, in both directions.
    let other_run = RunId(uuid::Uuid::now_v7());
    let theirs = approval_request(b(), other_run, "c1", t0());
    ap.create(std::slice::from_ref(&theirs)).await.unwrap();
    let later = t0() + Duration::seconds(10);
    for (mine, mine_run, other_run, other_id) in [(a(), run, other_run, theirs.id), (b(), other_run, run, first.id)] {
        assert!(ap.get(&mine, other_id).await.unwrap().is_none());
        assert!(ap.list_for_run(&mine, other_run).await.unwrap().is_empty());
        assert!(ap.list_pending(&mine, later, 10).await.unwrap().iter().all(|r| r.tenant == mine));
        assert!(ap.list_pending(&mine, later, 10).await.unwrap().iter().all(|r| r.run_id == mine_run));
        assert!(not_found(ap.decide(&mine, other_id, &decision(true, "intruder", None), later).await));
        assert!(!ap.claim_resume(&mine, other_run, RunId(uuid::Uuid::now_v7())).await.unwrap());
    }
    assert_eq!(ap.get(&b(), theirs.id).await.unwrap().unwrap().status, ApprovalStatus::Pending, "untouched");
    assert_eq!(ap.get(&a(), first.id).await.unwrap().unwrap().status, ApprovalStatus::Pending, "untouched");
    assert_eq!(ids(&ap.list_pending(&a(), later, 10).await.unwrap()), [first.id, second.id]);
    assert_eq!(ids(&ap.list_pending(&b(), later, 10).await.unwrap()), [theirs.id]);
}

pub async fn approvals_list_pending_oldest_first_without_decided_or_expired(s: Stores) {
    let ap = &s.approvals;
    let run = RunId(uuid::Uuid::now_v7());
    let now = t0() + Duration::seconds(100);
    let newest = approval_request(a(), run, "c1", t0() + Duration::seconds(3));
    let oldest = approval_request(a(), run, "c2", t0() + Duration::seconds(1));
    let middle = approval_request(a(), run, "c3", t0() + Duration::seconds(2));
    let mut expired = approval_request(a(), run, "c4", t0());
    expired.expires_at = now; // expiry is exclusive: at `now` it has expired
    let decided = approval_request(a(), run, "c5", t0());
    ap.create(&[newest.clone(), oldest.clone(), middle.clone(), expired.clone(), decided.clone()]).await.unwrap();
    ap.decide(&a(), decided.id, &decision(false, "ops", None), t0() + Duration::seconds(5)).await.unwrap();

    assert_eq!(ids(&ap.list_pending(&a(), now, 10).await.unwrap()), [oldest.id, middle.id, newest.id]);
    assert_eq!(ids(&ap.list_pending(&a(), now, 2).await.unwrap()), [oldest.id, middle.id], "take keeps the oldest");
    let before = now - Duration::seconds(1);
    assert_eq!(
        ids(&ap.list_pending(&a(), before, 10).await.unwrap()),
        [expired.id, oldest.id, middle.id, newest.id],
        "not yet expired a second earlier"
    );
    let stored = ap.get(&a(), expired.id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.status_at(now)), (ApprovalStatus::Pending, ApprovalStatus::Expired));

    // The run's requests, decided and expired included, oldest first (ties by id).
    let mut tie = [approval_request(a(), run, "c6", t0()), approval_request(a(), run, "c7", t0())];
    tie.sort_by_key(|r| std::cmp::Reverse(r.id)); // created in the opposite order
    ap.create(&tie).await.unwrap();
    let mut at_t0 = vec![expired.id, decided.id, tie[0].id, tie[1].id];
    at_t0.sort();
    let expected: Vec<uuid::Uuid> = at_t0.into_iter().chain([oldest.id, middle.id, newest.id]).collect();
    assert_eq!(ids(&ap.list_for_run(&a(), run).await.unwrap()), expected);
    assert!(ap.list_for_run(&a(), RunId(uuid::Uuid::now_v7())).await.unwrap().is_empty());
}

pub async fn approvals_are_decided_once(s: Stores) {
    let ap = &s.approvals;
    let run = RunId(uuid::Uuid::now_v7());
    let approve = approval_request(a(), run, "c1", t0());
    let deny = approval_request(a(), run, "c2", t0());
    let mut lapsed = approval_request(a(), run, "c3", t0());
    lapsed.expires_at = t0() + Duration::seconds(30);
    ap.create(&[approve.clone(), deny.clone(), lapsed.clone()]).await.unwrap();
    let at = t0() + Duration::seconds(30);

    let decided = ap.decide(&a(), approve.id, &decision(true, "alice", Some("looks fine")), at).await.unwrap();
    let expected = ApprovalRecord {
        status: ApprovalStatus::Approved,
        decided_at: Some(at),
        decided_by: Some("alice".into()),
        reason: Some("looks fine".into()),
        ..approve.clone()
    };
    assert_eq!(decided, expected, "the decision returns the record as stored");
    assert_eq!(ap.get(&a(), approve.id).await.unwrap().unwrap(), expected);
    // A second decision, either way, is refused and changes nothing.
    assert!(conflict(ap.decide(&a(), approve.id, &decision(false, "bob", None), at).await));
    assert!(conflict(ap.decide(&a(), approve.id, &decision(true, "alice", None), at).await));
    assert_eq!(ap.get(&a(), approve.id).await.unwrap().unwrap(), expected);

    let denied = ap.decide(&a(), deny.id, &decision(false, "bob", None), at).await.unwrap();
    assert_eq!(
        (denied.status, denied.decided_by.as_deref(), denied.reason),
        (ApprovalStatus::Denied, Some("bob"), None)
    );

    // At its expiry the request can no longer be decided: a conflict, and it stays pending.
    assert!(conflict(ap.decide(&a(), lapsed.id, &decision(true, "alice", None), at).await));
    let still = ap.get(&a(), lapsed.id).await.unwrap().unwrap();
    assert_eq!((still.status, still.decided_at), (ApprovalStatus::Pending, None));
    // Unknown, or another tenant's: not found.
    assert!(not_found(ap.decide(&a(), uuid::Uuid::now_v7(), &decision(true, "alice", None), at).await));
    assert!(not_found(ap.decide(&b(), deny.id, &decision(true, "alice", None), at).await));
}

pub async fn concurrent_decisions_of_one_request_let_exactly_one_through(s: Stores) {
    let request = approval_request(a(), RunId(uuid::Uuid::now_v7()), "c1", t0());
    s.approvals.create(std::slice::from_ref(&request)).await.unwrap();
    let deciders = (0..16).map(|i| {
        let store = s.approvals.clone();
        async move {
            let d = decision(i % 2 == 0, &format!("decider-{i}"), None);
            (i, store.decide(&a(), request.id, &d, t0() + Duration::seconds(1)).await)
        }
    });
    let results = futures::future::join_all(deciders).await;
    let winners: Vec<_> = results.iter().filter(|(_, r)| r.is_ok()).collect();
    assert_eq!(winners.len(), 1, "exactly one decision wins: {results:?}");
    assert!(results.iter().filter(|(_, r)| r.is_err()).all(|(_, r)| matches!(r, Err(StoreError::Conflict(_)))));
    let (i, _) = winners[0];
    let stored = s.approvals.get(&a(), request.id).await.unwrap().unwrap();
    let expected_status = if i % 2 == 0 { ApprovalStatus::Approved } else { ApprovalStatus::Denied };
    assert_eq!((stored.status, stored.decided_by), (expected_status, Some(format!("decider-{i}"))));
}

pub async fn resumption_is_claimed_once_after_every_request_is_decided(s: Stores) {
    let ap = &s.approvals;
    let run = RunId(uuid::Uuid::now_v7());
    let requests: Vec<ApprovalRecord> =
        (0..3).map(|i| approval_request(a(), run, &format!("c{i}"), t0() + Duration::seconds(i))).collect();
    ap.create(&requests).await.unwrap();
    let at = t0() + Duration::seconds(10);
    assert!(!ap.claim_resume(&a(), run, RunId(uuid::Uuid::now_v7())).await.unwrap(), "all pending");
    ap.decide(&a(), requests[0].id, &decision(true, "alice", None), at).await.unwrap();
    ap.decide(&a(), requests[1].id, &decision(false, "alice", None), at).await.unwrap();
    assert!(!ap.claim_resume(&a(), run, RunId(uuid::Uuid::now_v7())).await.unwrap(), "one still pending");
    assert!(ap.list_for_run(&a(), run).await.unwrap().iter().all(|r| r.resumed_run_id.is_none()), "nothing claimed");
    assert!(
        !ap.claim_resume(&a(), RunId(uuid::Uuid::now_v7()), RunId(uuid::Uuid::now_v7())).await.unwrap(),
        "no such run"
    );
    ap.decide(&a(), requests[2].id, &decision(true, "alice", None), at).await.unwrap();
    assert!(!ap.claim_resume(&b(), run, RunId(uuid::Uuid::now_v7())).await.unwrap(), "another tenant's run");

    // Concurrent claimers, over several runs (so later rounds race on warm connections).
    for round in 0..6 {
        let run = if round == 0 {
            run
        } else {
            let run = RunId(uuid::Uuid::now_v7());
            let more: Vec<ApprovalRecord> =
                (0..3).map(|i| approval_request(a(), run, &format!("c{i}"), t0())).collect();
            ap.create(&more).await.unwrap();
            for r in &more {
                ap.decide(&a(), r.id, &decision(true, "alice", None), at).await.unwrap();
            }
            run
        };
        let claims = (0..16).map(|_| {
            let store = s.approvals.clone();
            let resumed = RunId(uuid::Uuid::now_v7());
            async move { (resumed, store.claim_resume(&a(), run, resumed).await.unwrap()) }
        });
        let results = futures::future::join_all(claims).await;
        let winners: Vec<RunId> = results.iter().filter(|(_, won)| *won).map(|(r, _)| *r).collect();
        assert_eq!(winners.len(), 1, "round {round}: exactly one claimer resumes the run: {results:?}");
        let rows = ap.list_for_run(&a(), run).await.unwrap();
        assert!(
            rows.iter().all(|r| r.resumed_run_id == Some(winners[0])),
            "round {round}: every request names the winner: {rows:?}"
        );
        assert!(!ap.claim_resume(&a(), run, RunId(uuid::Uuid::now_v7())).await.unwrap(), "claimed before");
        assert!(!ap.claim_resume(&a(), run, winners[0]).await.unwrap(), "even by the winner");
    }
}

pub async fn claims_racing_the_last_decisions_still_claim_once_and_whole(s: Stores) {
    let ap = &s.approvals;
    for round in 0..4 {
        let run = RunId(uuid::Uuid::now_v7());
        let requests: Vec<ApprovalRecord> =
            (0..4).map(|i| approval_request(a(), run, &format!("c{i}"), t0() + Duration::seconds(i))).collect();
        ap.create(&requests).await.unwrap();
        let at = t0() + Duration::seconds(10);
        // Decisions and claims interleave; some claims may see a request still pending.
        let work = (0..12).map(|i| {
            let store = s.approvals.clone();
            let id = requests.get(i / 3).map(|r| r.id);
            async move {
                if i % 3 == 0 {
                    store.decide(&a(), id.unwrap(), &decision(true, "alice", None), at).await.unwrap();
                    None
                } else {
                    let resumed = RunId(uuid::Uuid::now_v7());
                    store.claim_resume(&a(), run, resumed).await.unwrap().then_some(resumed)
                }
            }
        });
        let mut winners: Vec<RunId> = futures::future::join_all(work).await.into_iter().flatten().collect();
        let late = RunId(uuid::Uuid::now_v7());
        if ap.claim_resume(&a(), run, late).await.unwrap() {
            winners.push(late);
        }
        assert_eq!(winners.len(), 1, "round {round}: one claim in all");
        let rows = ap.list_for_run(&a(), run).await.unwrap();
        assert!(
            rows.iter().all(|r| r.status == ApprovalStatus::Approved && r.resumed_run_id == Some(winners[0])),
            "round {round}: a claim covers every request of the run: {rows:?}"
        );
    }
}

fn rule(tenant: TenantId, tool: &str, created: DateTime<Utc>) -> ApprovalRule {
    ApprovalRule {
        id: uuid::Uuid::now_v7(),
        tenant,
        tool_name: tool.into(),
        agent_name: None,
        arguments_hash: None,
        conditions: vec![],
        description: None,
        created_at: created,
        created_by: "key:0123456789ab".into(),
    }
}

pub async fn approval_rules_are_stored_listed_and_deleted(s: Stores) {
    let ap = &s.approvals;
    let plain = rule(a(), "refund", t0() + Duration::seconds(1));
    let mut exact = rule(a(), "refund", t0() + Duration::seconds(2));
    exact.agent_name = Some("billing".into());
    exact.arguments_hash = Some(arguments_hash(&serde_json::json!({"amount": 500})));
    exact.description = Some("The one refund we agreed on".into());
    let mut other_tool = rule(a(), "cancel", t0());
    other_tool.conditions = vec![Condition { path: "amount".into(), operator: Operator::LessThan, value: 10.into() }];
    for r in [&other_tool, &plain, &exact] {
        ap.create_rule(r).await.unwrap();
    }
    assert!(conflict(ap.create_rule(&plain).await));
    let all = ap.list_rules(&a(), None).await.unwrap();
    assert_eq!(all, [other_tool.clone(), plain.clone(), exact.clone()], "oldest first, every field");
    assert_eq!(ap.list_rules(&a(), Some("refund")).await.unwrap(), [plain.clone(), exact.clone()]);
    assert!(ap.list_rules(&a(), Some("unknown")).await.unwrap().is_empty());
    assert_eq!(ap.get_rule(&a(), exact.id).await.unwrap().as_ref(), Some(&exact));
    assert!(ap.get_rule(&a(), uuid::Uuid::now_v7()).await.unwrap().is_none());

    // Another tenant sees none of them and cannot delete them; its own rules are its own.
    let theirs = rule(b(), "refund", t0());
    ap.create_rule(&theirs).await.unwrap();
    assert_eq!(ap.list_rules(&b(), None).await.unwrap(), std::slice::from_ref(&theirs));
    assert_eq!(ap.list_rules(&b(), Some("refund")).await.unwrap(), std::slice::from_ref(&theirs));
    assert!(ap.get_rule(&b(), exact.id).await.unwrap().is_none());
    assert!(ap.get_rule(&a(), theirs.id).await.unwrap().is_none());
    assert!(not_found(ap.delete_rule(&b(), exact.id).await));
    assert!(not_found(ap.delete_rule(&a(), theirs.id).await));
    assert_eq!(ap.list_rules(&a(), None).await.unwrap().len(), 3);

    assert_eq!(ap.delete_rule(&a(), exact.id).await.unwrap(), exact, "delete returns the rule");
    assert!(ap.get_rule(&a(), exact.id).await.unwrap().is_none());
    assert!(not_found(ap.delete_rule(&a(), exact.id).await));
    assert_eq!(ap.list_rules(&a(), Some("refund")).await.unwrap(), [plain]);
    assert_eq!(ap.list_rules(&b(), None).await.unwrap(), [theirs]);
}

pub async fn approval_rule_conditions_round_trip(s: Stores) {
    let c = |path: &str, operator: Operator, value: serde_json::Value| Condition { path: path.into(), operator, value };
    let mut r = rule(a(), "refund", t0());
    r.agent_name = Some("support".into());
    r.conditions = vec![
        c("amount", Operator::LessThanOrEqual, serde_json::json!(100)),
        c("amount", Operator::GreaterThan, serde_json::json!(-12.75)),
        c("ratio", Operator::GreaterThanOrEqual, serde_json::json!(0.1)),
        c("big", Operator::LessThan, serde_json::json!(u64::MAX)),
        c("currency", Operator::In, serde_json::json!(["EUR", "USD"])),
        c("order.items.0.sku", Operator::NotIn, serde_json::json!(["Ü-1", "quote\"d"])),
        c("express", Operator::Equals, serde_json::json!(true)),
        c("coupon", Operator::Equals, serde_json::Value::Null),
        c("limits", Operator::NotEquals, serde_json::json!({"b": [1, 2.5], "a": {"nested": "x"}})),
        c("level", Operator::In, serde_json::json!([1, 2, 3])),
    ];
    s.approvals.create_rule(&r).await.unwrap();
    let back = s.approvals.get_rule(&a(), r.id).await.unwrap().unwrap();
    assert_eq!(back, r);
    assert_eq!(s.approvals.list_rules(&a(), Some("refund")).await.unwrap(), [r.clone()]);
    // And it still means the same thing.
    let call = serde_json::json!({
        "amount": 80, "ratio": 0.5, "big": 7, "currency": "EUR", "order": {"items": [{"sku": "A1"}]},
        "express": true, "coupon": null, "limits": {"a": 1}, "level": 2
    });
    assert!(r.matches("support", "refund", &call));
    assert!(back.matches("support", "refund", &call));
    let over = serde_json::json!({"amount": 101});
    assert!(!back.matches("support", "refund", &over));
}

// ---- tenants --------------------------------------------------------------------------------

fn tenant(id: &str, display: &str, at: DateTime<Utc>) -> TenantRecord {
    TenantRecord { id: TenantId::parse(id).unwrap(), display_name: display.into(), created_at: at, updated_at: at }
}

pub async fn quota_thresholds_are_claimed_once_per_tenant_quota_period_and_percentage(s: Stores) {
    let q = &s.quota_notices;
    let day = t0();
    let tenant = a();
    let claims = futures::future::join_all((0..8).map(|_| q.claim(&tenant, "daily", day, 80, t0()))).await;
    assert_eq!(claims.into_iter().map(Result::unwrap).filter(|won| *won).count(), 1, "one of concurrent claimers wins");
    assert!(!q.claim(&a(), "daily", day, 80, t0()).await.unwrap(), "claimed before");
    assert!(q.claim(&a(), "daily", day, 100, t0()).await.unwrap(), "another percentage");
    assert!(q.claim(&a(), "daily", day + Duration::days(1), 80, t0()).await.unwrap(), "another period");
    assert!(q.claim(&a(), "monthly", day, 80, t0()).await.unwrap(), "another quota");
    assert!(q.claim(&b(), "daily", day, 80, t0()).await.unwrap(), "another tenant");
}

pub async fn tenants_are_created_listed_updated_and_deleted(s: Stores) {
    let t = &s.tenants;
    let records = [
        tenant("tenant-b", "Tenant B", t0()),
        tenant("acme", "Acme Ünïcode", t0() + Duration::seconds(1)),
        tenant("Zeta", "Upper case sorts first", t0() + Duration::seconds(2)),
        tenant("acme.eu", "Acme EU", t0()),
        tenant("default", "Default", t0()),
    ];
    for r in &records {
        t.create(r).await.unwrap();
    }
    assert!(conflict(t.create(&tenant("acme", "Again", t0())).await));
    assert_eq!(t.get(&records[1].id).await.unwrap().as_ref(), Some(&records[1]), "the first record stays");
    assert!(t.get(&TenantId::parse("ghost").unwrap()).await.unwrap().is_none());

    let order = |rows: Vec<TenantRecord>| rows.into_iter().map(|r| r.id.as_str().to_owned()).collect::<Vec<_>>();
    assert_eq!(
        order(t.list(0, 10).await.unwrap()),
        ["Zeta", "acme", "acme.eu", "default", "tenant-b"],
        "by id, byte order"
    );
    assert_eq!(order(t.list(1, 2).await.unwrap()), ["acme", "acme.eu"]);
    assert!(t.list(5, 10).await.unwrap().is_empty());

    let later = t0() + Duration::seconds(60);
    let renamed = t.update(&records[1].id, "Acme Corp", later).await.unwrap();
    let expected = TenantRecord { display_name: "Acme Corp".into(), updated_at: later, ..records[1].clone() };
    assert_eq!(renamed, expected);
    assert_eq!(t.get(&records[1].id).await.unwrap(), Some(expected.clone()));
    assert!(not_found(t.update(&TenantId::parse("ghost").unwrap(), "x", later).await));

    assert_eq!(t.delete(&records[1].id).await.unwrap(), expected, "delete returns the record");
    assert!(t.get(&records[1].id).await.unwrap().is_none());
    assert!(not_found(t.delete(&records[1].id).await));
    assert_eq!(order(t.list(0, 10).await.unwrap()), ["Zeta", "acme.eu", "default", "tenant-b"]);
    // The id is free again.
    t.create(&tenant("acme", "Acme again", later)).await.unwrap();
    assert_eq!(t.get(&records[1].id).await.unwrap().unwrap().display_name, "Acme again");
}

/// U+0000 cannot be stored in Postgres `text` or `jsonb`: every store answers `InvalidText`
/// for it, before it writes or reads anything, so memory and Postgres never disagree.
pub async fn text_holding_nul_is_refused_alike_by_every_store(s: Stores) {
    let t = a();
    let invalid = |r: Result<(), StoreError>| matches!(r, Err(StoreError::InvalidText { .. }));
    let nul = Some("a\u{0}b".to_owned());
    for filter in [
        RunFilter { agent: nul.clone(), ..RunFilter::default() },
        RunFilter { session_id: nul.clone(), ..RunFilter::default() },
        RunFilter { user_id: nul.clone(), ..RunFilter::default() },
        RunFilter { labels: BTreeMap::from([("k".to_owned(), "\u{0}".to_owned())]), ..RunFilter::default() },
    ] {
        assert!(invalid(s.runs.list_runs(&t, &filter, 0, 10).await.map(drop)), "{filter:?}");
        assert!(invalid(s.runs.stats(&t, &filter).await.map(drop)), "{filter:?}");
    }
    for filter in [
        AuditFilter { actor: nul.clone(), ..AuditFilter::default() },
        AuditFilter { entity_type: nul.clone(), ..AuditFilter::default() },
        AuditFilter { entity_id: nul.clone(), ..AuditFilter::default() },
        AuditFilter { action: nul.clone(), ..AuditFilter::default() },
    ] {
        assert!(invalid(s.audit.list(&t, &filter, 0, 10).await.map(drop)), "{filter:?}");
    }
    let jobs = crate::jobs::JobFilter { handler_key: nul.clone(), ..Default::default() };
    assert!(invalid(s.jobs.list(&t, &jobs, 0, 10).await.map(drop)));
    assert!(invalid(s.approvals.list_rules(&t, nul.as_deref()).await.map(drop)));
    let mut d = def("nul-agent", "Help.\u{0}");
    assert!(invalid(s.definitions.create(&t, d.clone(), t0()).await.map(drop)));
    d.instructions = Some("Help.".into());
    d.metadata.insert("owner".into(), "\u{0}".into());
    assert!(invalid(s.definitions.create(&t, d.clone(), t0()).await.map(drop)));
    assert!(s.definitions.get(&t, &name("nul-agent")).await.unwrap().is_none(), "nothing was written");
    d.metadata.clear();
    s.definitions.create(&t, d.clone(), t0()).await.unwrap();
    d.display_name = Some("N\u{0}".into());
    assert!(invalid(s.definitions.update(&t, d, t0()).await.map(drop)));
    assert_eq!(s.definitions.versions(&t, &name("nul-agent")).await.unwrap().len(), 1);
    // Escaped text is ordinary text.
    let fine = RunFilter { agent: Some("\\u0000".to_owned()), ..RunFilter::default() };
    assert!(s.runs.list_runs(&t, &fine, 0, 10).await.unwrap().is_empty());
}

/// One `#[tokio::test]` per contract check, for stores made by `$make` (an expression
/// evaluating to a future of a fresh [`Stores`]).
#[macro_export]
macro_rules! store_contract_tests {
    ($make:expr) => {
        $crate::contract_checks!(stores, $make;
            definitions_keep_every_version,
            definitions_refuse_duplicates_and_missing_updates,
            definitions_delete_with_their_history,
            definitions_list_in_name_order_with_paging,
            definitions_are_isolated_between_tenants,
            runs_are_created_read_and_finished,
            runs_list_with_filters_newest_first,
            run_stats_aggregate_the_filtered_runs,
            run_stats_sum_costs_exactly,
            events_append_in_batches_and_read_after_a_cursor,
            concurrent_appends_to_different_runs_stay_gapless,
            tool_calls_are_stored_individually_with_late_completions,
            run_input_is_recorded,
            cancel_is_a_flag_on_a_running_run,
            a_queued_run_starts_once_and_can_be_cancelled_while_it_waits,
            stale_runs_are_found_across_tenants_and_closed_once,
            schedules_are_stored_listed_updated_and_isolated,
            due_schedules_are_taken_once_per_occurrence,
            runs_are_isolated_between_tenants,
            sessions_create_once_and_append_against_the_generation_read,
            concurrent_saves_of_one_generation_let_exactly_one_through,
            sessions_list_newest_first_and_delete,
            sessions_list_narrows_to_an_owner_before_paging,
            branching_copies_items_and_leaves_the_parent_alone,
            a_session_names_its_agent_and_a_branch_none_until_its_first_turn,
            sessions_are_isolated_between_tenants,
            api_keys_are_stored_as_hashes_and_found_by_id,
            api_keys_revoke_once_rotate_and_record_use,
            api_keys_are_isolated_between_tenants,
            audit_entries_chain_per_tenant_and_read_back_verifiable,
            concurrent_audit_appends_never_share_or_skip_a_number,
            approvals_are_created_read_and_isolated_between_tenants,
            approvals_list_pending_oldest_first_without_decided_or_expired,
            approvals_are_decided_once,
            concurrent_decisions_of_one_request_let_exactly_one_through,
            resumption_is_claimed_once_after_every_request_is_decided,
            claims_racing_the_last_decisions_still_claim_once_and_whole,
            approval_rules_are_stored_listed_and_deleted,
            approval_rule_conditions_round_trip,
            tenants_are_created_listed_updated_and_deleted,
            quota_thresholds_are_claimed_once_per_tenant_quota_period_and_percentage,
            text_holding_nul_is_refused_alike_by_every_store,
            the_ledger_records_each_step_with_its_calls_starts_before_their_endings,
            a_step_and_a_call_ending_carry_the_events_recorded_before_them_in_one_write,
            a_run_row_guarded_on_a_definitions_generation_is_written_only_while_it_is_current,
            the_ledger_is_fenced_by_the_run_being_running,
            an_ended_run_is_continued_once_and_linked_both_ways,
            a_running_run_yields_once_and_is_taken_back_once,
            a_call_tree_is_listed_by_its_root_in_depth_order_within_its_tenant,
            workflow_definitions_keep_every_version_within_their_tenant,
            skill_definitions_keep_every_version_within_their_tenant,
            checkpoints_are_kept_in_order_per_run_and_tenant,
            checkpoints_are_purged_by_whole_runs_once_the_newest_is_old,
            agents_answers_are_read_back_by_run_for_completed_runs_within_their_tenant,
            breakers_open_at_the_threshold_and_close_on_a_success,
            concurrent_probe_claims_let_exactly_one_through,
            cached_answers_are_read_per_tenant_until_they_expire,
            provider_bindings_and_egress_are_kept_per_tenant,
            mcp_servers_are_kept_per_tenant_with_their_discovery,
            pending_authorizations_are_taken_once_and_never_after_expiry,
            oauth_tokens_are_kept_per_tenant_and_replaced_only_over_the_version_read,
        );
    };
}

/// The tests of a store contract: one `#[tokio::test]` per check named, each calling
/// `contract::$module::$check` on a fresh store from `$make` (an expression yielding a future of
/// the store). What every `*_store_contract_tests!` expands to; the checks of the [`Stores`]
/// bundle are under `contract::stores` for it.
#[doc(hidden)]
#[macro_export]
macro_rules! contract_checks {
    ($module:ident, $make:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                $crate::contract::$module::$check($make.await).await;
            }
        )*
    };
}
