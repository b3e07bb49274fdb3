//! The skill store's contract: skills kept by version like agents', per tenant, with their
//! resources intact, in a catalog of their own.

use chrono::Duration;

use super::fixtures::{a, b, t0};
use super::not_found;
use crate::error::StoreError;
use crate::names::SkillName;
use crate::skills::SkillDefinition;
use crate::stores::Stores;

fn skill(name: &str, instructions: &str) -> SkillDefinition {
    SkillDefinition::new(name, "How we write.", instructions).with_resource("references/terms.md", "Say 'customer'.")
}

fn sname(s: &str) -> SkillName {
    SkillName::parse(s).unwrap()
}

pub async fn skill_definitions_keep_every_version_within_their_tenant(s: Stores) {
    let k = &s.skills;
    let v1 = k.create(&a(), skill("house-style", "Be brief."), t0()).await.unwrap();
    let v2 = k.update(&a(), skill("house-style", "Be briefer."), t0() + Duration::seconds(1)).await.unwrap();
    assert_eq!((v1.version, v2.version, v2.created_at), (1, 2, v1.created_at));
    let current = k.get(&a(), &sname("house-style")).await.unwrap().unwrap();
    assert_eq!((current.version, current.definition.clone()), (2, skill("house-style", "Be briefer.")));
    assert_eq!(current.updated_at, t0() + Duration::seconds(1));
    assert_eq!(
        k.versions(&a(), &sname("house-style")).await.unwrap().iter().map(|v| v.version).collect::<Vec<_>>(),
        [2, 1]
    );
    assert_eq!(
        k.version(&a(), &sname("house-style"), 1).await.unwrap().unwrap().definition,
        skill("house-style", "Be brief.")
    );
    assert!(k.version(&a(), &sname("house-style"), 3).await.unwrap().is_none());
    k.create(&a(), skill("alpha", "First."), t0()).await.unwrap();
    let names: Vec<String> = k.list(&a(), 0, 10).await.unwrap().into_iter().map(|s| s.definition.name).collect();
    assert_eq!(names, ["alpha", "house-style"]);
    assert_eq!(k.list(&a(), 1, 10).await.unwrap().len(), 1);
    match k.create(&a(), skill("house-style", "again"), t0()).await {
        Err(StoreError::Conflict(m)) => assert_eq!(m, "A skill named 'house-style' already exists."),
        other => panic!("{other:?}"),
    }
    assert!(not_found(k.update(&a(), skill("ghost", "x"), t0()).await));
    // Another tenant sees nothing of it, and may use the name itself.
    assert!(k.get(&b(), &sname("house-style")).await.unwrap().is_none());
    assert!(k.list(&b(), 0, 10).await.unwrap().is_empty());
    assert!(k.versions(&b(), &sname("house-style")).await.unwrap().is_empty());
    assert!(k.version(&b(), &sname("house-style"), 1).await.unwrap().is_none());
    assert!(not_found(k.update(&b(), skill("house-style", "hijack"), t0()).await));
    assert!(!k.delete(&b(), &sname("house-style")).await.unwrap());
    k.create(&b(), skill("house-style", "theirs"), t0()).await.unwrap();
    // Skills, agents and workflows are separate catalogs.
    assert!(s.definitions.list(&a(), 0, 10).await.unwrap().is_empty());
    assert!(s.workflows.list(&a(), 0, 10).await.unwrap().is_empty());
    assert!(k.delete(&a(), &sname("house-style")).await.unwrap());
    assert!(k.versions(&a(), &sname("house-style")).await.unwrap().is_empty());
    assert_eq!(k.get(&b(), &sname("house-style")).await.unwrap().unwrap().definition.instructions, "theirs");
    let nul = skill("nul", "bad\u{0}");
    assert!(matches!(k.create(&a(), nul, t0()).await, Err(StoreError::InvalidText { .. })));
}
