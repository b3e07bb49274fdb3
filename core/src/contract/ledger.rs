//! The step ledger and continuation part of the run store contract (checks of
//! [`crate::store_contract_tests!`]): every [`RunStore`](crate::runs::store::RunStore) must
//! pass them unchanged.

// A test suite: assertions are its whole point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use chrono::Duration;

use crate::contract::fixtures::{a, b, t0};
use crate::error::StoreError;
use crate::events::ToolCallStatus;
use crate::failure::{ErrorClass, RunFailure};
use crate::model::{Message, ToolCall};
use crate::names::RunId;
use crate::runs::store::{ModelStep, RunEnd, RunRecord, RunStatus, ToolCallRecord};
use crate::stores::Stores;
use crate::tools::effect::ToolEffect;

fn running() -> RunRecord {
    RunRecord::opened(RunId(uuid::Uuid::now_v7()), "agent", Some(1), RunStatus::Running, t0())
}

fn step(n: u32, calls: &[&str]) -> ModelStep {
    ModelStep {
        step: n,
        message: Message::Assistant {
            text: Some(format!("step {n}")),
            tool_calls: calls
                .iter()
                .map(|id| ToolCall { id: (*id).into(), name: "lookup".into(), arguments: format!(r#"{{"q":"{id}"}}"#) })
                .collect(),
            reasoning: Vec::new(),
        },
        recorded_at: t0() + Duration::seconds(i64::from(n)),
    }
}

fn start(run: RunId, id: &str, effect: ToolEffect) -> ToolCallRecord {
    let call = ToolCall { id: id.into(), name: "lookup".into(), arguments: format!(r#"{{"q":"{id}"}}"#) };
    ToolCallRecord::opened(run, call, Some(effect), ToolCallStatus::Started, t0() + Duration::seconds(1))
}

fn failed() -> RunEnd {
    RunEnd::failed(t0() + Duration::seconds(30), 30_000, RunFailure::new(ErrorClass::Orphaned, "gone"))
}

pub async fn the_ledger_records_each_step_with_its_calls_starts_before_their_endings(s: Stores) {
    let r = &s.runs;
    let row = running();
    r.create_run(&a(), &row, None).await.unwrap();
    let first = step(1, &["c1", "c2"]);
    let starts = [start(row.id, "c1", ToolEffect::Read), start(row.id, "c2", ToolEffect::External)];
    assert!(r.begin_step(&a(), row.id, Some(&first), &starts).await.unwrap());
    let mut ended = start(row.id, "c1", ToolEffect::Read);
    ended.status = ToolCallStatus::Succeeded;
    ended.result = Some("one".into());
    ended.duration_ms = 12;
    r.record_tool_call(&a(), &ended).await.unwrap();
    // A resumed round writes its calls' starts without a model step.
    assert!(r.begin_step(&a(), row.id, None, &[start(row.id, "c3", ToolEffect::Write)]).await.unwrap());
    let second = step(2, &[]);
    assert!(r.begin_step(&a(), row.id, Some(&second), &[]).await.unwrap());

    assert_eq!(r.list_steps(&a(), row.id).await.unwrap(), vec![first.clone(), second]);
    let calls = r.list_tool_calls(&a(), row.id).await.unwrap();
    let seen: Vec<(&str, ToolCallStatus, Option<&str>)> =
        calls.iter().map(|c| (c.call_id.as_str(), c.status, c.result.as_deref())).collect();
    assert_eq!(
        seen,
        [
            ("c1", ToolCallStatus::Succeeded, Some("one")),
            ("c2", ToolCallStatus::Started, None),
            ("c3", ToolCallStatus::Started, None)
        ],
        "in call order; the ending overwrites the start"
    );
    assert_eq!(calls[1].effect, Some(ToolEffect::External));
    assert_eq!(calls[1].arguments, r#"{"q":"c2"}"#);

    let again = r.begin_step(&a(), row.id, Some(&first), &[]).await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "a step number is written once: {again:?}");
    assert!(r.list_steps(&b(), row.id).await.unwrap().is_empty(), "another tenant sees no step");
    assert!(!r.begin_step(&b(), row.id, Some(&step(3, &[])), &[]).await.unwrap(), "nor writes one");
    assert_eq!(r.list_steps(&a(), row.id).await.unwrap().len(), 2);
}

pub async fn the_ledger_is_fenced_by_the_run_being_running(s: Stores) {
    let r = &s.runs;
    let row = running();
    r.create_run(&a(), &row, None).await.unwrap();
    r.finish_run(&a(), row.id, &failed(), &[]).await.unwrap();
    let (first, starts) = (step(1, &["c1"]), [start(row.id, "c1", ToolEffect::Read)]);
    let written = r.begin_step(&a(), row.id, Some(&first), &starts).await.unwrap();
    assert!(!written, "an ended run takes no step: its executor lost it");
    assert!(r.list_steps(&a(), row.id).await.unwrap().is_empty());
    assert!(r.list_tool_calls(&a(), row.id).await.unwrap().is_empty(), "and no call starts");
    let missing = RunId(uuid::Uuid::now_v7());
    assert!(!r.begin_step(&a(), missing, Some(&step(1, &[])), &[]).await.unwrap());
}

pub async fn an_ended_run_is_continued_once_and_linked_both_ways(s: Stores) {
    let r = &s.runs;
    let from = running();
    r.create_run(&a(), &from, None).await.unwrap();
    let next = RunRecord {
        session_id: Some("s-1".into()),
        user_id: Some("u-1".into()),
        ..RunRecord::opened(RunId(uuid::Uuid::now_v7()), "agent", Some(1), RunStatus::Running, t0())
    };
    assert!(!r.open_continuation(&a(), from.id, &next).await.unwrap(), "a running run is not continued");
    assert_eq!(r.last_sequence(&a(), from.id).await.unwrap(), 0, "no events yet");
    let ev = |n: u64| crate::events::RecordedEvent {
        sequence: n,
        timestamp: t0(),
        event: crate::events::RunEvent::MessageDelta { text: format!("d{n}") },
    };
    r.append_events(&a(), from.id, &[ev(1), ev(2), ev(3)], t0()).await.unwrap();
    assert_eq!(r.last_sequence(&a(), from.id).await.unwrap(), 3);
    assert_eq!(r.last_sequence(&b(), from.id).await.unwrap(), 0, "another tenant's run has none");
    r.finish_run(&a(), from.id, &failed(), &[]).await.unwrap();
    assert!(!r.open_continuation(&b(), from.id, &next).await.unwrap(), "nor another tenant's");
    assert!(r.get_run(&b(), next.id).await.unwrap().is_none());

    let tenant = a();
    let racing: Vec<RunRecord> = (0..4)
        .map(|_| RunRecord { id: RunId(uuid::Uuid::now_v7()), ..next.clone() })
        .chain(std::iter::once(next.clone()))
        .collect();
    let opened = futures::future::join_all(racing.iter().map(|n| r.open_continuation(&tenant, from.id, n))).await;
    let winners: Vec<&RunRecord> =
        racing.iter().zip(&opened).filter(|(_, o)| *o.as_ref().unwrap()).map(|(n, _)| n).collect();
    assert_eq!(winners.len(), 1, "one continuation however many try: {opened:?}");
    let winner = winners[0];
    let original = r.get_run(&a(), from.id).await.unwrap().unwrap();
    assert_eq!(
        (original.status, original.continued_by_run_id),
        (RunStatus::Failed, Some(winner.id)),
        "stays as it was, linked"
    );
    assert_eq!(original.error.map(|e| e.error_class), Some(ErrorClass::Orphaned));
    let continued = r.get_run(&a(), winner.id).await.unwrap().unwrap();
    assert_eq!(continued.continued_from_run_id, Some(from.id));
    assert_eq!(continued.status, RunStatus::Running);
    assert_eq!((continued.session_id.as_deref(), continued.user_id.as_deref()), (Some("s-1"), Some("u-1")));
    assert_eq!(continued.heartbeat_at, Some(t0()), "a continuation starts alive");
    for loser in racing.iter().filter(|n| n.id != winner.id) {
        assert!(r.get_run(&a(), loser.id).await.unwrap().is_none(), "a lost race writes nothing");
    }
}

pub async fn a_running_run_yields_once_and_is_taken_back_once(s: Stores) {
    let r = &s.runs;
    let row = running();
    r.create_run(&a(), &row, None).await.unwrap();
    let ev = |n: u64| crate::events::RecordedEvent {
        sequence: n,
        timestamp: t0(),
        event: crate::events::RunEvent::MessageDelta { text: format!("d{n}") },
    };
    let later = t0() + Duration::seconds(9);
    assert!(!r.yield_run(&b(), row.id, &[ev(1)], None, later).await.unwrap(), "another tenant's run is not touched");
    let usage = crate::model::Usage { input_tokens: 7, output_tokens: 3, total_tokens: 10, ..Default::default() };
    assert!(r.yield_run(&a(), row.id, &[ev(1), ev(2)], Some(&usage), later).await.unwrap());
    let read = r.get_run(&a(), row.id).await.unwrap().unwrap();
    assert_eq!(read.usage, Some(usage), "the usage so far is kept");
    assert_eq!((read.status, read.yielded_at, read.heartbeat_at), (RunStatus::Running, Some(later), Some(later)));
    assert_eq!(r.last_sequence(&a(), row.id).await.unwrap(), 2, "the events went with it");
    assert!(!r.yield_run(&a(), row.id, &[ev(3)], None, later).await.unwrap(), "yielded once");
    assert_eq!(r.last_sequence(&a(), row.id).await.unwrap(), 2, "and nothing appended by the refusal");

    assert!(!r.resume_yielded(&b(), row.id, later).await.unwrap());
    let tenant = a();
    let taken = futures::future::join_all((0..4).map(|_| r.resume_yielded(&tenant, row.id, later))).await;
    assert_eq!(taken.into_iter().filter(|t| *t.as_ref().unwrap()).count(), 1, "one attempt takes it back");
    assert_eq!(r.get_run(&a(), row.id).await.unwrap().unwrap().yielded_at, None);
    let taken_again = r.yield_run(&a(), row.id, &[ev(2)], None, later).await;
    assert!(matches!(taken_again, Err(StoreError::Conflict(_))), "sequences stay the log's: {taken_again:?}");

    r.finish_run(&a(), row.id, &failed(), &[]).await.unwrap();
    assert!(!r.yield_run(&a(), row.id, &[ev(3)], None, later).await.unwrap(), "an ended run does not yield");
    assert!(!r.resume_yielded(&a(), row.id, later).await.unwrap());
}

/// A call tree by its root: the root and every run under it (by depth, then start), the same
/// from any store; another tenant's tree and an unrelated run are not part of it.
pub async fn a_call_tree_is_listed_by_its_root_in_depth_order_within_its_tenant(s: Stores) {
    let r = &s.runs;
    let root = running();
    let at = |seconds: i64| t0() + Duration::seconds(seconds);
    let child = |parent: &RunRecord, depth: u32, started: i64| RunRecord {
        parent_run_id: Some(parent.id),
        root_run_id: Some(root.id),
        depth,
        ..RunRecord::opened(RunId(uuid::Uuid::now_v7()), "child", None, RunStatus::Running, at(started))
    };
    let mid = child(&root, 1, 5);
    // (A replay's row names its source: kept like any other link.)
    let late_mid = RunRecord { replay_of_run_id: Some(mid.id), ..child(&root, 1, 9) };
    let leaf = child(&mid, 2, 6);
    for run in [&root, &leaf, &late_mid, &mid] {
        r.create_run(&a(), run, None).await.unwrap();
    }
    // An unrelated run in the same tenant, and a same-shaped tree in another tenant.
    r.create_run(&a(), &running(), None).await.unwrap();
    r.create_run(&b(), &RunRecord { root_run_id: Some(root.id), depth: 1, ..running() }, None).await.unwrap();

    let ids = |tree: Vec<RunRecord>| tree.into_iter().map(|run| run.id).collect::<Vec<_>>();
    let tree = r.list_tree(&a(), root.id).await.unwrap();
    assert_eq!(tree[2].parent_run_id, Some(root.id));
    assert_eq!(tree[3].depth, 2);
    assert_eq!(tree[2].replay_of_run_id, Some(mid.id));
    assert_eq!(r.get_run(&a(), mid.id).await.unwrap().unwrap().replay_of_run_id, None);
    assert_eq!(ids(tree), vec![root.id, mid.id, late_mid.id, leaf.id]);
    assert_eq!(ids(r.list_tree(&b(), root.id).await.unwrap()).len(), 1, "the other tenant sees its own row only");
    // A run that is in no tree is a tree of one; an unknown id is an empty one.
    assert_eq!(ids(r.list_tree(&a(), leaf.id).await.unwrap()), vec![leaf.id]);
    assert!(r.list_tree(&a(), RunId(uuid::Uuid::now_v7())).await.unwrap().is_empty());
}

fn delta(sequence: u64, text: &str) -> crate::events::RecordedEvent {
    crate::events::RecordedEvent {
        sequence,
        timestamp: t0() + Duration::seconds(sequence as i64),
        event: crate::events::RunEvent::MessageDelta { text: text.into() },
    }
}

pub async fn a_step_and_a_call_ending_carry_the_events_recorded_before_them_in_one_write(s: Stores) {
    let r = &s.runs;
    let row = running();
    r.create_run(&a(), &row, None).await.unwrap();
    let (first, starts) = (step(1, &["c1"]), [start(row.id, "c1", ToolEffect::Read)]);
    let now = t0() + Duration::seconds(5);
    let events = [delta(1, "one"), delta(2, "two")];
    assert!(r.begin_step_with(&a(), row.id, Some(&first), &starts, &events, now).await.unwrap());
    let mut ended = start(row.id, "c1", ToolEffect::Read);
    ended.status = ToolCallStatus::Succeeded;
    ended.result = Some("done".into());
    r.record_tool_call_with(&a(), &ended, &[delta(3, "three")], now).await.unwrap();
    let log = r.read_events(&a(), row.id, 0, 10).await.unwrap();
    assert_eq!(log.iter().map(|e| e.sequence).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(log[2], delta(3, "three"));
    assert_eq!(r.list_steps(&a(), row.id).await.unwrap(), vec![first]);

    // All of it or none: a sequence already stored writes neither the step nor the ending.
    let again = r.begin_step_with(&a(), row.id, Some(&step(2, &[])), &[], &[delta(3, "x")], now).await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    assert_eq!(r.list_steps(&a(), row.id).await.unwrap().len(), 1);
    let mut changed = ended.clone();
    changed.result = Some("changed".into());
    let again = r.record_tool_call_with(&a(), &changed, &[delta(2, "x")], now).await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    assert_eq!(r.list_tool_calls(&a(), row.id).await.unwrap()[0].result.as_deref(), Some("done"));
    assert_eq!(r.read_events(&a(), row.id, 0, 10).await.unwrap().len(), 3);

    // Another tenant's run, or none, takes no events.
    let foreign = r.begin_step_with(&b(), row.id, Some(&step(3, &[])), &[], &[delta(4, "x")], now).await;
    assert!(matches!(foreign, Err(StoreError::NotFound)), "{foreign:?}");
    let missing = start(RunId(uuid::Uuid::now_v7()), "c9", ToolEffect::Read);
    let gone = r.record_tool_call_with(&a(), &missing, &[delta(1, "x")], now).await;
    assert!(matches!(gone, Err(StoreError::NotFound)), "{gone:?}");
    assert_eq!(r.read_events(&a(), row.id, 0, 10).await.unwrap().len(), 3);
}
