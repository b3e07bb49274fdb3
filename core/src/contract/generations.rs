//! The definitions generation part of the store contract (a check of
//! [`crate::store_contract_tests!`]): what moves a tenant's generation, and the run row's write
//! guarded on it.

// A test suite: assertions are its whole point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::contract::fixtures::{a, b, t0};
use crate::definition::AgentDefinition;
use crate::error::StoreError;
use crate::names::{AgentName, RunId, SkillName, TenantId};
use crate::runs::store::{RunInputRecord, RunRecord, RunStatus};
use crate::skills::SkillDefinition;
use crate::stores::Stores;

fn row() -> RunRecord {
    RunRecord::opened(RunId(uuid::Uuid::now_v7()), "writer", Some(1), RunStatus::Running, t0())
}

async fn generation(s: &Stores, tenant: &TenantId) -> u64 {
    let agents = s.definitions.generation(tenant).await.unwrap();
    // One number for both kinds, whichever store is asked.
    assert_eq!(s.skills.generation(tenant).await.unwrap(), agents);
    agents
}

pub async fn a_run_row_guarded_on_a_definitions_generation_is_written_only_while_it_is_current(s: Stores) {
    let (defs, skills, runs) = (&s.definitions, &s.skills, &s.runs);
    let agent = AgentName::parse("writer").unwrap();
    let skill = SkillName::parse("house-style").unwrap();
    assert_eq!(generation(&s, &a()).await, 0, "no definition written yet");

    // Every write moves it: a new agent, a new version, a new skill, a skill's version, deletes.
    let mut seen = vec![0];
    defs.create(&a(), AgentDefinition::new("writer", "scripted", "m"), t0()).await.unwrap();
    seen.push(generation(&s, &a()).await);
    defs.update(&a(), AgentDefinition::new("writer", "scripted", "m").with_instructions("Be brief."), t0())
        .await
        .unwrap();
    seen.push(generation(&s, &a()).await);
    skills.create(&a(), SkillDefinition::new("house-style", "How we write.", "Short."), t0()).await.unwrap();
    seen.push(generation(&s, &a()).await);
    skills.update(&a(), SkillDefinition::new("house-style", "How we write.", "Shorter."), t0()).await.unwrap();
    seen.push(generation(&s, &a()).await);
    assert!(skills.delete(&a(), &skill).await.unwrap());
    seen.push(generation(&s, &a()).await);
    assert!(seen.windows(2).all(|w| w[1] > w[0]), "each write moves the generation on: {seen:?}");

    // A refused write moves nothing, and nothing moves another tenant's.
    let before = generation(&s, &a()).await;
    assert!(matches!(
        defs.create(&a(), AgentDefinition::new("writer", "scripted", "m"), t0()).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(!skills.delete(&a(), &skill).await.unwrap());
    assert!(matches!(
        defs.update(&a(), AgentDefinition::new("nobody", "scripted", "m"), t0()).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(generation(&s, &a()).await, before, "refused writes leave it alone");
    assert_eq!(generation(&s, &b()).await, 0, "another tenant's writes leave b's alone");

    // The guarded write: written at the current generation (with its input), not at an older one.
    let current = generation(&s, &a()).await;
    let input = RunInputRecord {
        message: "hello".into(),
        culture: None,
        parameters: Default::default(),
        documents: Vec::new(),
    };
    let fresh = row();
    assert!(runs.create_run_at(&a(), &fresh, Some(&input), current).await.unwrap());
    assert_eq!(runs.get_run(&a(), fresh.id).await.unwrap().map(|r| r.id), Some(fresh.id));
    assert_eq!(runs.get_input(&a(), fresh.id).await.unwrap().map(|i| i.message), Some("hello".into()));
    let stale = row();
    assert!(!runs.create_run_at(&a(), &stale, Some(&input), current - 1).await.unwrap());
    assert!(runs.get_run(&a(), stale.id).await.unwrap().is_none(), "nothing written under a stale generation");
    assert!(runs.get_input(&a(), stale.id).await.unwrap().is_none());
    // Each tenant's own generation guards its rows: b has written nothing.
    assert!(!runs.create_run_at(&b(), &stale, None, current).await.unwrap());
    assert!(runs.create_run_at(&b(), &stale, None, 0).await.unwrap());
    // A taken id is a conflict, as for an unguarded row.
    assert!(matches!(runs.create_run_at(&a(), &fresh, None, current).await, Err(StoreError::Conflict(_))));

    // Deleting an agent moves it too; a row guarded on the generation before is refused.
    assert!(defs.delete(&a(), &agent).await.unwrap());
    let after = generation(&s, &a()).await;
    assert!(after > current);
    assert!(!runs.create_run_at(&a(), &row(), None, current).await.unwrap());
    assert!(runs.create_run_at(&a(), &row(), None, after).await.unwrap());
}
