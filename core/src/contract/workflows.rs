//! The workflow stores' contract: definitions kept by version like agents', and checkpoints
//! kept in order per run and tenant.

use std::collections::BTreeMap;

use chrono::Duration;

use super::fixtures::{a, b, t0};
use super::{conflict, ended, event, not_found, run_row};
use crate::error::StoreError;
use crate::events::{RecordedEvent, RunEvent};
use crate::names::{RunId, WorkflowName};
use crate::runs::store::RunStatus;
use crate::stores::Stores;
use crate::workflows::checkpoints::{Checkpoint, CheckpointRef, ENVELOPE, InputRequest, Position};
use crate::workflows::definition::{WorkflowDefinition, WorkflowKind};
use crate::workflows::functions::{Role, WorkflowMessage};

fn flow(name: &str, agents: &[&str]) -> WorkflowDefinition {
    WorkflowDefinition {
        name: name.into(),
        display_name: None,
        description: Some("a flow".into()),
        kind: WorkflowKind::Sequential,
        agent_names: agents.iter().map(|s| (*s).to_owned()).collect(),
        nodes: Vec::new(),
        manager_agent_name: None,
        max_iterations: None,
        max_duration_seconds: None,
    }
}

fn wname(s: &str) -> WorkflowName {
    WorkflowName::parse(s).unwrap()
}

fn checkpoint(run: RunId, sequence: u32, text: &str) -> Checkpoint {
    Checkpoint {
        id: uuid::Uuid::now_v7(),
        run_id: run,
        sequence,
        envelope: ENVELOPE,
        created_at: t0() + Duration::seconds(i64::from(sequence)),
        position: Position {
            super_step: sequence,
            turns: sequence,
            next_node: sequence as usize,
            speaker: Some("writer".into()),
            request: Some(InputRequest {
                request_id: uuid::Uuid::nil(),
                executor_id: "human-input".into(),
                prompt: "sure?".into(),
            }),
            ..Position::default()
        },
        messages: vec![WorkflowMessage {
            role: Role::Assistant,
            executor_id: Some("writer".into()),
            run_id: Some(RunId(uuid::Uuid::nil())),
            text: text.into(),
        }],
        base: (sequence == 1)
            .then_some(CheckpointRef { run_id: RunId(uuid::Uuid::nil()), checkpoint_id: uuid::Uuid::nil() }),
    }
}

pub async fn workflow_definitions_keep_every_version_within_their_tenant(s: Stores) {
    let w = &s.workflows;
    let v1 = w.create(&a(), flow("pipeline", &["writer"]), t0()).await.unwrap();
    let v2 = w.update(&a(), flow("pipeline", &["writer", "reviewer"]), t0() + Duration::seconds(1)).await.unwrap();
    assert_eq!((v1.version, v2.version, v2.created_at), (1, 2, v1.created_at));
    assert_eq!(w.get(&a(), &wname("pipeline")).await.unwrap().unwrap().definition.agent_names.len(), 2);
    assert_eq!(
        w.versions(&a(), &wname("pipeline")).await.unwrap().iter().map(|v| v.version).collect::<Vec<_>>(),
        [2, 1]
    );
    assert_eq!(
        w.version(&a(), &wname("pipeline"), 1).await.unwrap().unwrap().definition,
        flow("pipeline", &["writer"])
    );
    match w.create(&a(), flow("pipeline", &["x"]), t0()).await {
        Err(StoreError::Conflict(m)) => assert_eq!(m, "A workflow named 'pipeline' already exists."),
        other => panic!("{other:?}"),
    }
    assert!(not_found(w.update(&a(), flow("ghost", &["x"]), t0()).await));
    // Another tenant sees nothing of it, and may use the name itself.
    assert!(w.get(&b(), &wname("pipeline")).await.unwrap().is_none());
    assert!(w.list(&b(), 0, 10).await.unwrap().is_empty());
    assert!(not_found(w.update(&b(), flow("pipeline", &["hijack"]), t0()).await));
    assert!(!w.delete(&b(), &wname("pipeline")).await.unwrap());
    w.create(&b(), flow("pipeline", &["theirs"]), t0()).await.unwrap();
    // Workflows and agents are separate catalogs.
    assert!(s.definitions.list(&a(), 0, 10).await.unwrap().is_empty());
    assert!(w.delete(&a(), &wname("pipeline")).await.unwrap());
    assert!(w.versions(&a(), &wname("pipeline")).await.unwrap().is_empty());
    assert_eq!(w.get(&b(), &wname("pipeline")).await.unwrap().unwrap().definition.agent_names, ["theirs"]);
    let nul = WorkflowDefinition { description: Some("bad\u{0}".into()), ..flow("nul", &["x"]) };
    assert!(matches!(w.create(&a(), nul, t0()).await, Err(StoreError::InvalidText { .. })));
}

pub async fn checkpoints_are_kept_in_order_per_run_and_tenant(s: Stores) {
    let c = &s.checkpoints;
    let (run, other) = (RunId(uuid::Uuid::now_v7()), RunId(uuid::Uuid::now_v7()));
    for n in [2, 1, 3] {
        c.save(&a(), &checkpoint(run, n, &format!("message {n}"))).await.unwrap();
    }
    c.save(&a(), &checkpoint(other, 1, "elsewhere")).await.unwrap();
    let list = c.list(&a(), run).await.unwrap();
    assert_eq!(list.iter().map(|k| k.sequence).collect::<Vec<_>>(), [1, 2, 3]);
    let expected = checkpoint(run, 2, "message 2");
    let read = &list[1];
    assert_eq!((&read.position, &read.messages, read.base), (&expected.position, &expected.messages, None));
    assert_eq!((read.envelope, read.run_id, read.created_at), (ENVELOPE, run, expected.created_at));
    assert!(list[0].base.is_some());
    // One writer per run: the same number again is refused, and so is the same id.
    assert!(conflict(c.save(&a(), &checkpoint(run, 2, "again")).await));
    let mut same_id = checkpoint(run, 9, "x");
    same_id.id = list[0].id;
    assert!(conflict(c.save(&a(), &same_id).await));
    // Another tenant sees none of them.
    assert!(c.list(&b(), run).await.unwrap().is_empty());
    let nul = checkpoint(run, 4, "bad\u{0}");
    assert!(matches!(c.save(&a(), &nul).await, Err(StoreError::InvalidText { .. })));
    assert_eq!(c.list(&a(), run).await.unwrap().len(), 3);
}

pub async fn checkpoints_are_purged_by_whole_runs_once_the_newest_is_old(s: Stores) {
    let c = &s.checkpoints;
    let (old, fresh) = (RunId(uuid::Uuid::now_v7()), RunId(uuid::Uuid::now_v7()));
    for n in 1..=3 {
        c.save(&a(), &checkpoint(old, n, "old")).await.unwrap();
    }
    // `fresh` began as long ago, but its newest checkpoint is recent.
    c.save(&b(), &checkpoint(fresh, 1, "fresh")).await.unwrap();
    let mut recent = checkpoint(fresh, 2, "fresh");
    recent.created_at = t0() + Duration::days(30);
    c.save(&b(), &recent).await.unwrap();
    let removed = c.purge(t0() + Duration::days(1), 100).await.unwrap();
    assert_eq!(removed, 3);
    assert!(c.list(&a(), old).await.unwrap().is_empty());
    assert_eq!(c.list(&b(), fresh).await.unwrap().len(), 2);
}

/// What a checkpoint's reference to an agent's answer reads back: the text of each completed
/// run's `RunCompleted`, in one call, for the caller's tenant only.
pub async fn agents_answers_are_read_back_by_run_for_completed_runs_within_their_tenant(s: Stores) {
    let r = &s.runs;
    let completed = |sequence: u64, text: &str| RecordedEvent {
        sequence,
        timestamp: t0(),
        event: RunEvent::RunCompleted {
            text: text.into(),
            usage: None,
            cost: None,
            finish_reason: None,
            client_tool_calls: Vec::new(),
        },
    };
    let open = |tenant, agent: &'static str| async move {
        let row = run_row(agent, t0());
        r.create_run(&tenant, &row, None).await.unwrap();
        row.id
    };
    let (first, second, failed, running) =
        (open(a(), "w").await, open(a(), "w").await, open(a(), "w").await, open(a(), "w").await);
    let theirs = open(b(), "w").await;
    r.finish_run(&a(), first, &ended(RunStatus::Completed), &[event(1, "thinking"), completed(2, "first answer")])
        .await
        .unwrap();
    r.finish_run(&a(), second, &ended(RunStatus::Completed), &[completed(1, "second answer")]).await.unwrap();
    r.finish_run(&a(), failed, &ended(RunStatus::Failed), &[event(1, "half an answer")]).await.unwrap();
    r.append_events(&a(), running, &[event(1, "still going")], t0()).await.unwrap();
    r.finish_run(&b(), theirs, &ended(RunStatus::Completed), &[completed(1, "theirs")]).await.unwrap();

    let missing = RunId(uuid::Uuid::now_v7());
    let asked = [second, first, failed, running, theirs, missing];
    let answers = r.answers(&a(), &asked).await.unwrap();
    let expected = BTreeMap::from([(first, "first answer".to_owned()), (second, "second answer".to_owned())]);
    assert_eq!(answers, expected, "completed runs only, and only the caller's");
    assert_eq!(r.answers(&b(), &asked).await.unwrap(), BTreeMap::from([(theirs, "theirs".to_owned())]));
    assert!(r.answers(&a(), &[]).await.unwrap().is_empty());
}
