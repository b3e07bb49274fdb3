//! The webhook store contract: one suite every [`WebhookStore`] must pass — the in-memory
//! store here, the Postgres stores in `tracon-postgres` — unchanged, tenant isolation
//! checked in both directions.
//!
//! ```text
//! tracon_core::webhook_store_contract_tests!(async {
//!     std::sync::Arc::new(tracon_core::webhooks::memory::MemoryWebhookStore::default())
//!         as std::sync::Arc<dyn tracon_core::webhooks::WebhookStore>
//! });
//! ```

// A test suite: assertions are its whole point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;

use uuid::Uuid;

use crate::contract::fixtures::{a, assert_secret_references, b, secs};
use crate::error::StoreError;
use crate::names::TenantId;
use crate::webhooks::{
    DeliveryAttempt, DeliveryError, DeliveryStatus, SubscriptionChange, WebhookDelivery, WebhookStore,
    WebhookSubscription,
};

fn id(n: u128) -> Uuid {
    Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + n)
}

fn subscription(tenant: &TenantId, n: u128, events: &[&str]) -> WebhookSubscription {
    WebhookSubscription {
        id: id(n),
        tenant: tenant.clone(),
        url: format!("https://hooks.example.com/{n}?q=ü"),
        events: events.iter().map(|e| (*e).to_owned()).collect(),
        secret_configuration_name: "Tracon:WebhookSecrets:Orders".into(),
        headers: BTreeMap::from([("X-Team".to_owned(), "payments".to_owned())]),
        description: Some("Orders — prod".into()),
        enabled: true,
        consecutive_failures: 0,
        disabled_at: None,
        created_at: secs(n as i64),
        updated_at: secs(n as i64),
    }
}

fn delivery(tenant: &TenantId, n: u128, subscription: u128, at: i64) -> WebhookDelivery {
    WebhookDelivery {
        id: id(1000 + n),
        tenant: tenant.clone(),
        subscription_id: id(subscription),
        event_id: id(5000 + n),
        event_type: "run.completed".into(),
        status: DeliveryStatus::Pending,
        attempts: 0,
        last_status_code: None,
        last_error: None,
        job_id: Some(id(9000 + n)),
        created_at: secs(at),
        updated_at: secs(at),
        last_attempt_at: None,
        completed_at: None,
    }
}

pub async fn a_subscription_round_trips_and_lists_oldest_first(s: Arc<dyn WebhookStore>) {
    let t = a();
    let second = subscription(&t, 2, &["run.failed", "job.failed"]);
    let first = subscription(&t, 1, &["run.completed"]);
    s.create(&t, &second).await.unwrap();
    s.create(&t, &first).await.unwrap();
    assert_eq!(s.get(&t, id(2)).await.unwrap(), Some(second.clone()));
    assert_eq!(s.list(&t, 0, 50).await.unwrap(), vec![first.clone(), second.clone()]);
    assert_eq!(s.list(&t, 1, 1).await.unwrap(), vec![second.clone()]);
    assert!(matches!(s.create(&t, &first).await, Err(StoreError::Conflict(_))), "a duplicate id");
    assert_eq!(s.get(&t, id(3)).await.unwrap(), None);
}

pub async fn an_update_replaces_what_the_api_owns_and_reenabling_resets_failures(s: Arc<dyn WebhookStore>) {
    let t = a();
    s.create(&t, &subscription(&t, 1, &["run.completed"])).await.unwrap();
    let disabled = s.settle(&t, id(1), false, 1, secs(10)).await.unwrap().unwrap();
    assert_eq!((disabled.enabled, disabled.consecutive_failures, disabled.disabled_at), (false, 1, Some(secs(10))));
    let change = SubscriptionChange {
        url: "https://other.example.com/hook".into(),
        events: vec!["test.ping".into(), "quota.threshold".into()],
        secret_configuration_name: "Tracon:WebhookSecrets:Other".into(),
        headers: BTreeMap::new(),
        description: None,
        enabled: true,
    };
    let after = s.update(&t, id(1), &change, secs(20)).await.unwrap();
    assert_eq!(after.url, change.url);
    assert_eq!(after.events, change.events);
    assert_eq!(after.secret_configuration_name, change.secret_configuration_name);
    assert!(after.headers.is_empty() && after.description.is_none());
    assert_eq!((after.enabled, after.consecutive_failures, after.disabled_at), (true, 0, None));
    assert_eq!((after.created_at, after.updated_at), (secs(1), secs(20)));
    assert_eq!(s.get(&t, id(1)).await.unwrap(), Some(after));
    assert!(matches!(s.update(&t, id(2), &change, secs(20)).await, Err(StoreError::NotFound)));
}

pub async fn subscribed_finds_only_enabled_subscriptions_to_the_event(s: Arc<dyn WebhookStore>) {
    let t = a();
    s.create(&t, &subscription(&t, 1, &["run.completed", "run.failed"])).await.unwrap();
    s.create(&t, &subscription(&t, 2, &["run.failed"])).await.unwrap();
    s.create(&t, &subscription(&t, 3, &["run.completed"])).await.unwrap();
    s.settle(&t, id(3), false, 1, secs(5)).await.unwrap();
    let ids = |v: Vec<WebhookSubscription>| v.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(ids(s.subscribed(&t, "run.completed").await.unwrap()), vec![id(1)]);
    assert_eq!(ids(s.subscribed(&t, "run.failed").await.unwrap()), vec![id(1), id(2)]);
    assert!(s.subscribed(&t, "job.failed").await.unwrap().is_empty());
    assert!(s.subscribed(&t, "run").await.unwrap().is_empty(), "whole names only");
}

pub async fn settling_counts_failures_in_a_row_and_disables_at_the_limit(s: Arc<dyn WebhookStore>) {
    let t = a();
    s.create(&t, &subscription(&t, 1, &["run.completed"])).await.unwrap();
    assert_eq!(s.settle(&t, id(1), false, 3, secs(1)).await.unwrap().unwrap().consecutive_failures, 1);
    assert_eq!(s.settle(&t, id(1), true, 3, secs(2)).await.unwrap().unwrap().consecutive_failures, 0);
    for i in 1..=2 {
        let after = s.settle(&t, id(1), false, 3, secs(2 + i)).await.unwrap().unwrap();
        assert_eq!((after.consecutive_failures, after.enabled), (i as u32, true));
    }
    let after = s.settle(&t, id(1), false, 3, secs(9)).await.unwrap().unwrap();
    assert_eq!((after.consecutive_failures, after.enabled, after.disabled_at), (3, false, Some(secs(9))));
    // Zero never disables.
    s.create(&t, &subscription(&t, 2, &["run.completed"])).await.unwrap();
    for i in 0..5 {
        assert!(s.settle(&t, id(2), false, 0, secs(i)).await.unwrap().unwrap().enabled);
    }
    assert_eq!(s.settle(&t, id(7), true, 3, secs(1)).await.unwrap(), None);
}

pub async fn a_delivery_entry_is_updated_in_place_and_listed_newest_first(s: Arc<dyn WebhookStore>) {
    let t = a();
    s.create(&t, &subscription(&t, 1, &["run.completed"])).await.unwrap();
    s.create(&t, &subscription(&t, 2, &["run.completed"])).await.unwrap();
    let first = delivery(&t, 1, 1, 10);
    s.add_delivery(&t, &first).await.unwrap();
    s.add_delivery(&t, &delivery(&t, 2, 1, 20)).await.unwrap();
    s.add_delivery(&t, &delivery(&t, 3, 2, 30)).await.unwrap();
    assert_eq!(s.get_delivery(&t, first.id).await.unwrap(), Some(first.clone()));
    assert!(matches!(s.add_delivery(&t, &first).await, Err(StoreError::Conflict(_))));
    assert!(matches!(s.add_delivery(&t, &delivery(&t, 4, 99, 40)).await, Err(StoreError::NotFound)));

    let error =
        DeliveryError { code: "tracon.webhook.http-status".into(), message: "The receiver answered 500.".into() };
    let retry = DeliveryAttempt {
        status: DeliveryStatus::Retrying,
        attempts: 1,
        status_code: Some(500),
        error: Some(error.clone()),
        at: secs(11),
    };
    s.record_attempt(&t, first.id, &retry).await.unwrap();
    let d = s.get_delivery(&t, first.id).await.unwrap().unwrap();
    assert_eq!(
        (d.status, d.attempts, d.last_status_code, d.last_error.clone(), d.last_attempt_at, d.completed_at),
        (DeliveryStatus::Retrying, 1, Some(500), Some(error), Some(secs(11)), None)
    );
    let done = DeliveryAttempt {
        status: DeliveryStatus::Succeeded,
        attempts: 2,
        status_code: Some(204),
        error: None,
        at: secs(12),
    };
    s.record_attempt(&t, first.id, &done).await.unwrap();
    let d = s.get_delivery(&t, first.id).await.unwrap().unwrap();
    assert_eq!(
        (d.status, d.attempts, d.last_status_code, d.last_error, d.completed_at, d.updated_at, d.created_at),
        (DeliveryStatus::Succeeded, 2, Some(204), None, Some(secs(12)), secs(12), secs(10))
    );
    let listed: Vec<Uuid> = s.deliveries(&t, id(1), 0, 50).await.unwrap().into_iter().map(|d| d.id).collect();
    assert_eq!(listed, vec![id(1002), id(1001)], "one entry per event, newest first");
    assert_eq!(s.deliveries(&t, id(1), 1, 5).await.unwrap().len(), 1);
    assert!(matches!(s.record_attempt(&t, id(4242), &done).await, Err(StoreError::NotFound)));
}

pub async fn deleting_a_subscription_removes_its_deliveries(s: Arc<dyn WebhookStore>) {
    let t = a();
    s.create(&t, &subscription(&t, 1, &["run.completed"])).await.unwrap();
    s.create(&t, &subscription(&t, 2, &["run.completed"])).await.unwrap();
    s.add_delivery(&t, &delivery(&t, 1, 1, 10)).await.unwrap();
    s.add_delivery(&t, &delivery(&t, 2, 2, 10)).await.unwrap();
    assert!(s.delete(&t, id(1)).await.unwrap());
    assert!(!s.delete(&t, id(1)).await.unwrap());
    assert_eq!(s.get(&t, id(1)).await.unwrap(), None);
    assert_eq!(s.get_delivery(&t, id(1001)).await.unwrap(), None);
    assert!(s.get_delivery(&t, id(1002)).await.unwrap().is_some(), "another subscription's history stays");
}

pub async fn tenants_never_see_each_others_subscriptions_or_deliveries(s: Arc<dyn WebhookStore>) {
    for (mine, theirs) in [(a(), b()), (b(), a())] {
        let s = s.clone();
        let n = if mine == a() { 1 } else { 2 };
        s.create(&mine, &subscription(&mine, n, &["run.completed"])).await.unwrap();
        s.add_delivery(&mine, &delivery(&mine, n, n, 10)).await.unwrap();
        assert_eq!(s.get(&theirs, id(n)).await.unwrap(), None);
        assert!(s.list(&theirs, 0, 50).await.unwrap().iter().all(|x| x.id != id(n)));
        assert!(s.subscribed(&theirs, "run.completed").await.unwrap().iter().all(|x| x.id != id(n)));
        assert_eq!(s.get_delivery(&theirs, id(1000 + n)).await.unwrap(), None);
        assert!(s.deliveries(&theirs, id(n), 0, 50).await.unwrap().is_empty());
        let change = SubscriptionChange {
            url: "https://evil.example.com/".into(),
            events: vec!["run.failed".into()],
            secret_configuration_name: "Tracon:WebhookSecrets:X".into(),
            headers: BTreeMap::new(),
            description: None,
            enabled: false,
        };
        assert!(matches!(s.update(&theirs, id(n), &change, secs(1)).await, Err(StoreError::NotFound)));
        assert_eq!(s.settle(&theirs, id(n), false, 1, secs(1)).await.unwrap(), None);
        let attempt = DeliveryAttempt {
            status: DeliveryStatus::Failed,
            attempts: 9,
            status_code: None,
            error: None,
            at: secs(1),
        };
        assert!(matches!(s.record_attempt(&theirs, id(1000 + n), &attempt).await, Err(StoreError::NotFound)));
        assert!(
            matches!(s.add_delivery(&theirs, &delivery(&theirs, 10 + n, n, 1)).await, Err(StoreError::NotFound)),
            "a delivery cannot hang off another tenant's subscription"
        );
        assert!(!s.delete(&theirs, id(n)).await.unwrap());
        // Nothing of the owner's changed.
        let kept = s.get(&mine, id(n)).await.unwrap().unwrap();
        assert_eq!(
            (kept.enabled, kept.consecutive_failures, kept.url.as_str()),
            (true, 0, subscription(&mine, n, &[]).url.as_str())
        );
        assert_eq!(s.get_delivery(&mine, id(1000 + n)).await.unwrap().unwrap().attempts, 0);
    }
}

pub async fn secret_references_list_every_tenants_key_names_in_order(s: Arc<dyn WebhookStore>) {
    assert!(s.secret_references().await.unwrap().is_empty());
    s.create(&b(), &subscription(&b(), 1, &["run.completed"])).await.unwrap();
    let mut later = subscription(&a(), 3, &["run.completed"]);
    later.secret_configuration_name = "Tracon:WebhookSecrets:tenant-a:Orders".into();
    s.create(&a(), &later).await.unwrap();
    s.create(&a(), &subscription(&a(), 2, &["run.failed"])).await.unwrap();
    let (one, two, three) = (id(1).to_string(), id(2).to_string(), id(3).to_string());
    assert_secret_references(
        s.secret_references().await.unwrap(),
        &[
            ("tenant-a", &two, "Tracon:WebhookSecrets:Orders"),
            ("tenant-a", &three, "Tracon:WebhookSecrets:tenant-a:Orders"),
            ("tenant-b", &one, "Tracon:WebhookSecrets:Orders"),
        ],
    );
}

/// One `#[tokio::test]` per check of the webhook store contract, each on a fresh store from
/// `$make` (an expression yielding a future of `Arc<dyn WebhookStore>`).
#[macro_export]
macro_rules! webhook_store_contract_tests {
    ($make:expr) => {
        $crate::contract_checks!(webhooks, $make;
            a_subscription_round_trips_and_lists_oldest_first,
            an_update_replaces_what_the_api_owns_and_reenabling_resets_failures,
            subscribed_finds_only_enabled_subscriptions_to_the_event,
            settling_counts_failures_in_a_row_and_disables_at_the_limit,
            a_delivery_entry_is_updated_in_place_and_listed_newest_first,
            deleting_a_subscription_removes_its_deliveries,
            tenants_never_see_each_others_subscriptions_or_deliveries,
            secret_references_list_every_tenants_key_names_in_order,
        );
    };
}
