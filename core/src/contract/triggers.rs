//! The trigger store contract: one suite every [`TriggerStore`] must pass — the in-memory
//! store in core, the Postgres stores in `tracon-postgres` — unchanged.
//!
//! Each check takes a fresh, empty store. [`trigger_store_contract_tests!`] expands to one
//! `#[tokio::test]` per check for a given factory:
//!
//! ```text
//! tracon_core::trigger_store_contract_tests!(async {
//!     std::sync::Arc::new(tracon_core::triggers::MemoryTriggerStore::default())
//!         as std::sync::Arc<dyn tracon_core::triggers::TriggerStore>
//! });
//! ```

// A test suite: assertions are its whole point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use crate::contract::fixtures::{a, assert_secret_references, b, t0};
use crate::triggers::{PayloadMode, TargetKind, TriggerName, TriggerRecord, TriggerStore};

fn name(n: &str) -> TriggerName {
    TriggerName::parse(n).unwrap()
}

fn trigger(n: &str, at: DateTime<Utc>) -> TriggerRecord {
    TriggerRecord {
        name: name(n),
        target_kind: TargetKind::Agent,
        target_name: "support".into(),
        signing_secret_configuration_name: format!("Tracon:TriggerSecrets:{n}"),
        payload_mode: PayloadMode::WholeBody,
        payload_path: None,
        enabled: true,
        created_at: at,
        updated_at: at,
    }
}

pub async fn a_put_trigger_reads_back_exactly(s: Arc<dyn TriggerStore>) {
    let t = a();
    assert_eq!(s.get(&t, &name("slack")).await.unwrap(), None);
    let mut r = trigger("slack", t0());
    r.payload_mode = PayloadMode::Path;
    r.payload_path = Some("event.text".into());
    let stored = s.put(&t, &r).await.unwrap();
    assert_eq!(stored, r);
    assert_eq!(s.get(&t, &name("slack")).await.unwrap(), Some(r.clone()));
    assert_eq!(s.find_enabled(&t, &name("slack")).await.unwrap(), Some(r));
}

pub async fn a_second_put_replaces_everything_but_the_creation_time(s: Arc<dyn TriggerStore>) {
    let t = a();
    s.put(&t, &trigger("slack", t0())).await.unwrap();
    let later = t0() + Duration::seconds(90);
    let replacement = TriggerRecord {
        name: name("slack"),
        target_kind: TargetKind::Workflow,
        target_name: "other".into(),
        signing_secret_configuration_name: "Tracon:TriggerSecrets:Rotated".into(),
        payload_mode: PayloadMode::Path,
        payload_path: Some("a.b.0".into()),
        enabled: false,
        created_at: later,
        updated_at: later,
    };
    let stored = s.put(&t, &replacement).await.unwrap();
    assert_eq!(stored, TriggerRecord { created_at: t0(), ..replacement.clone() });
    assert_eq!(s.get(&t, &name("slack")).await.unwrap(), Some(stored));
    assert_eq!(s.list(&t, 0, 10).await.unwrap().len(), 1, "replaced, not added");
}

pub async fn a_disabled_trigger_is_read_but_not_found_for_accepting(s: Arc<dyn TriggerStore>) {
    let t = a();
    let mut r = trigger("off", t0());
    r.enabled = false;
    s.put(&t, &r).await.unwrap();
    assert_eq!(s.get(&t, &name("off")).await.unwrap(), Some(r.clone()));
    assert_eq!(s.find_enabled(&t, &name("off")).await.unwrap(), None);
    r.enabled = true;
    s.put(&t, &r).await.unwrap();
    assert_eq!(s.find_enabled(&t, &name("off")).await.unwrap(), Some(r));
    assert_eq!(s.find_enabled(&t, &name("never")).await.unwrap(), None);
}

pub async fn the_list_is_ordered_by_name_and_paged(s: Arc<dyn TriggerStore>) {
    let t = a();
    for n in ["charlie", "alpha", "bravo", "delta"] {
        s.put(&t, &trigger(n, t0())).await.unwrap();
    }
    let names = |v: Vec<TriggerRecord>| v.into_iter().map(|r| r.name.as_str().to_owned()).collect::<Vec<_>>();
    assert_eq!(names(s.list(&t, 0, 10).await.unwrap()), ["alpha", "bravo", "charlie", "delta"]);
    assert_eq!(names(s.list(&t, 1, 2).await.unwrap()), ["bravo", "charlie"]);
    assert!(s.list(&t, 4, 10).await.unwrap().is_empty());
}

pub async fn delete_removes_once(s: Arc<dyn TriggerStore>) {
    let t = a();
    s.put(&t, &trigger("slack", t0())).await.unwrap();
    assert!(s.delete(&t, &name("slack")).await.unwrap());
    assert!(!s.delete(&t, &name("slack")).await.unwrap(), "nothing left to delete");
    assert_eq!(s.get(&t, &name("slack")).await.unwrap(), None);
    assert_eq!(s.find_enabled(&t, &name("slack")).await.unwrap(), None);
    assert!(s.list(&t, 0, 10).await.unwrap().is_empty());
}

pub async fn tenants_are_isolated_in_both_directions(s: Arc<dyn TriggerStore>) {
    let (ta, tb) = (a(), b());
    let mut theirs = trigger("slack", t0());
    theirs.target_name = "b-agent".into();
    s.put(&tb, &theirs).await.unwrap();
    assert_eq!(s.get(&ta, &name("slack")).await.unwrap(), None);
    assert_eq!(s.find_enabled(&ta, &name("slack")).await.unwrap(), None);
    assert!(s.list(&ta, 0, 10).await.unwrap().is_empty());
    assert!(!s.delete(&ta, &name("slack")).await.unwrap(), "a cannot delete b's");

    // The same name in tenant a is a separate trigger; writing it leaves b's alone.
    let ours = trigger("slack", t0() + Duration::seconds(5));
    s.put(&ta, &ours).await.unwrap();
    assert_eq!(s.get(&tb, &name("slack")).await.unwrap(), Some(theirs.clone()));
    assert_eq!(s.get(&ta, &name("slack")).await.unwrap(), Some(ours.clone()));
    assert!(s.delete(&ta, &name("slack")).await.unwrap());
    assert_eq!(s.get(&tb, &name("slack")).await.unwrap(), Some(theirs));
    assert_eq!(s.list(&tb, 0, 10).await.unwrap().len(), 1);
}

pub async fn secret_references_list_every_tenants_key_names_in_order(s: Arc<dyn TriggerStore>) {
    assert!(s.secret_references().await.unwrap().is_empty());
    s.put(&b(), &trigger("zeta", t0())).await.unwrap();
    s.put(&a(), &trigger("slack", t0())).await.unwrap();
    let mut legacy = trigger("alpha", t0());
    legacy.signing_secret_configuration_name = "Tracon:TriggerSecrets:Shared".into();
    s.put(&a(), &legacy).await.unwrap();
    assert_secret_references(
        s.secret_references().await.unwrap(),
        &[
            ("tenant-a", "alpha", "Tracon:TriggerSecrets:Shared"),
            ("tenant-a", "slack", "Tracon:TriggerSecrets:slack"),
            ("tenant-b", "zeta", "Tracon:TriggerSecrets:zeta"),
        ],
    );
}

/// One `#[tokio::test]` per check of the trigger store contract, each on a fresh store from
/// `$make` (an expression yielding a future of `Arc<dyn TriggerStore>`).
#[macro_export]
macro_rules! trigger_store_contract_tests {
    ($make:expr) => {
        $crate::contract_checks!(triggers, $make;
            a_put_trigger_reads_back_exactly,
            a_second_put_replaces_everything_but_the_creation_time,
            a_disabled_trigger_is_read_but_not_found_for_accepting,
            the_list_is_ordered_by_name_and_paged,
            delete_removes_once,
            tenants_are_isolated_in_both_directions,
            secret_references_list_every_tenants_key_names_in_order,
        );
    };
}
