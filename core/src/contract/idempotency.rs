//! The idempotency store contract: one suite every [`IdempotencyStore`] must pass — the
//! in-memory store here, the Postgres stores in `tracon-postgres` — unchanged.
//!
//! Each check takes a fresh, empty store. [`idempotency_store_contract_tests!`] expands to
//! one `#[tokio::test]` per check for a given factory:
//!
//! ```text
//! tracon_core::idempotency_store_contract_tests!(async {
//!     std::sync::Arc::new(tracon_core::idempotency::MemoryIdempotencyStore::default())
//!         as std::sync::Arc<dyn tracon_core::idempotency::IdempotencyStore>
//! });
//! ```

// A test suite: assertions are its whole point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::contract::fixtures::{a, b, secs};
use crate::idempotency::{Claim, IdempotencyStore, KeyRef};
use crate::names::TenantId;

const OP: &str = "run:support-bot";
const KEY: &str = "key-1";
const H1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const H2: &str = "2222222222222222222222222222222222222222222222222222222222222222";
/// How long a record lives in these checks.
const TTL: i64 = 3600;

fn key<'a>(tenant: &'a TenantId, operation: &'a str, key: &'a str) -> KeyRef<'a> {
    KeyRef { tenant, operation, key }
}

async fn claim(s: &Arc<dyn IdempotencyStore>, k: KeyRef<'_>, hash: &str, now: DateTime<Utc>) -> Claim {
    s.claim(k, hash, now, now + Duration::seconds(TTL)).await.unwrap()
}

fn in_progress(hash: &str) -> Claim {
    Claim::InProgress { request_hash: hash.into() }
}

fn completed(hash: &str, status: u16, body: Value) -> Claim {
    Claim::Completed { request_hash: hash.into(), status, body }
}

pub async fn a_free_key_is_claimed_and_a_duplicate_sees_it_in_progress(s: Arc<dyn IdempotencyStore>) {
    let t = a();
    let k = key(&t, OP, KEY);
    assert_eq!(claim(&s, k, H1, secs(0)).await, Claim::Claimed);
    assert_eq!(claim(&s, k, H1, secs(1)).await, in_progress(H1), "the same request");
    assert_eq!(claim(&s, k, H2, secs(2)).await, in_progress(H1), "another request: the first hash");
    assert_eq!(claim(&s, k, H1, secs(3)).await, in_progress(H1), "a refused duplicate changed nothing");
}

pub async fn a_completed_key_returns_its_response_to_later_claims(s: Arc<dyn IdempotencyStore>) {
    let t = a();
    let k = key(&t, OP, KEY);
    assert_eq!(claim(&s, k, H1, secs(0)).await, Claim::Claimed);
    let body = json!({"id": "run-1", "status": "Succeeded", "output": "done"});
    s.complete(k, 201, &body, secs(5)).await.unwrap();
    assert_eq!(claim(&s, k, H1, secs(6)).await, completed(H1, 201, body.clone()));
    assert_eq!(claim(&s, k, H2, secs(7)).await, completed(H1, 201, body.clone()), "the stored hash, not the asker's");
    assert_eq!(claim(&s, k, H1, secs(8)).await, completed(H1, 201, body), "claims do not change a completed record");
}

pub async fn concurrent_claims_give_the_key_to_exactly_one(s: Arc<dyn IdempotencyStore>) {
    let t = a();
    let k = key(&t, OP, KEY);
    let claimers = (0..16).map(|i| {
        let s = s.clone();
        let hash = if i % 2 == 0 { H1 } else { H2 };
        async move { s.claim(k, hash, secs(0), secs(TTL)).await.unwrap() }
    });
    let claims = futures::future::join_all(claimers).await;
    let winners = claims.iter().filter(|c| **c == Claim::Claimed).count();
    assert_eq!(winners, 1, "{claims:?}");
    let others: Vec<&Claim> = claims.iter().filter(|c| **c != Claim::Claimed).collect();
    let Claim::InProgress { request_hash: first } = others[0] else { panic!("{claims:?}") };
    assert!(first == H1 || first == H2, "{first}");
    for c in &others {
        assert_eq!(**c, in_progress(first), "every loser sees the winner's hash: {claims:?}");
    }
    assert_eq!(claim(&s, k, H1, secs(1)).await, in_progress(first));
}

pub async fn release_frees_an_in_progress_claim(s: Arc<dyn IdempotencyStore>) {
    let t = a();
    let k = key(&t, OP, KEY);
    assert_eq!(claim(&s, k, H1, secs(0)).await, Claim::Claimed);
    s.release(k).await.unwrap();
    assert_eq!(claim(&s, k, H2, secs(1)).await, Claim::Claimed, "the next request claims it");
    assert_eq!(claim(&s, k, H1, secs(2)).await, in_progress(H2), "with its own hash");
    // Releasing a key that has no record is fine.
    s.release(key(&t, OP, "never-claimed")).await.unwrap();
    assert_eq!(claim(&s, key(&t, OP, "never-claimed"), H1, secs(3)).await, Claim::Claimed);
}

pub async fn release_after_completion_changes_nothing(s: Arc<dyn IdempotencyStore>) {
    let t = a();
    let k = key(&t, OP, KEY);
    assert_eq!(claim(&s, k, H1, secs(0)).await, Claim::Claimed);
    s.complete(k, 200, &json!({"ok": true}), secs(1)).await.unwrap();
    s.release(k).await.unwrap();
    assert_eq!(claim(&s, k, H2, secs(2)).await, completed(H1, 200, json!({"ok": true})));
}

pub async fn an_expired_record_is_claimed_anew(s: Arc<dyn IdempotencyStore>) {
    let t = a();
    let k = key(&t, OP, KEY);
    // In progress, expiring at 10.
    assert_eq!(s.claim(k, H1, secs(0), secs(10)).await.unwrap(), Claim::Claimed);
    assert_eq!(s.claim(k, H2, secs(9), secs(100)).await.unwrap(), in_progress(H1), "still live at 9");
    assert_eq!(s.claim(k, H2, secs(10), secs(100)).await.unwrap(), Claim::Claimed, "expired at 10 (expires_at <= now)");
    assert_eq!(claim(&s, k, H1, secs(11)).await, in_progress(H2), "the new claim replaced the old one");

    // Completed, expiring at 100: the response lives until then, and not after.
    s.complete(k, 202, &json!({"n": 1}), secs(12)).await.unwrap();
    assert_eq!(s.claim(k, H1, secs(99), secs(200)).await.unwrap(), completed(H2, 202, json!({"n": 1})));
    assert_eq!(s.claim(k, H1, secs(100), secs(200)).await.unwrap(), Claim::Claimed);
    assert_eq!(claim(&s, k, H2, secs(101)).await, in_progress(H1), "the old response is gone");
    s.release(k).await.unwrap();
    assert_eq!(claim(&s, k, H2, secs(102)).await, Claim::Claimed, "the replacing claim is a plain claim");
}

pub async fn keys_are_isolated_by_tenant_and_by_operation(s: Arc<dyn IdempotencyStore>) {
    let (ta, tb) = (a(), b());
    let other_op = "run:other-bot";
    assert_eq!(claim(&s, key(&ta, OP, KEY), H1, secs(0)).await, Claim::Claimed);
    assert_eq!(claim(&s, key(&tb, OP, KEY), H2, secs(0)).await, Claim::Claimed, "another tenant");
    assert_eq!(claim(&s, key(&ta, other_op, KEY), H2, secs(0)).await, Claim::Claimed, "another operation");
    assert_eq!(claim(&s, key(&ta, OP, "key-2"), H2, secs(0)).await, Claim::Claimed, "another key");

    s.complete(key(&ta, OP, KEY), 201, &json!({"tenant": "a"}), secs(1)).await.unwrap();
    assert_eq!(claim(&s, key(&tb, OP, KEY), H1, secs(2)).await, in_progress(H2), "b's record is untouched");
    assert_eq!(claim(&s, key(&ta, other_op, KEY), H1, secs(2)).await, in_progress(H2));
    s.release(key(&tb, OP, KEY)).await.unwrap();
    assert_eq!(claim(&s, key(&ta, OP, KEY), H2, secs(3)).await, completed(H1, 201, json!({"tenant": "a"})));
    assert_eq!(claim(&s, key(&ta, other_op, KEY), H1, secs(3)).await, in_progress(H2), "a's other op is held");
    assert_eq!(claim(&s, key(&tb, OP, KEY), H1, secs(3)).await, Claim::Claimed, "b's release freed only b's key");
    // Operation and key do not run into one another.
    assert_eq!(claim(&s, key(&ta, "run:a/b", "c"), H1, secs(4)).await, Claim::Claimed);
    assert_eq!(claim(&s, key(&ta, "run:a", "b/c"), H2, secs(4)).await, Claim::Claimed);
    s.complete(key(&ta, "run:a", "b/c"), 200, &json!("second"), secs(5)).await.unwrap();
    assert_eq!(claim(&s, key(&ta, "run:a/b", "c"), H1, secs(6)).await, in_progress(H1));
}

pub async fn response_bodies_round_trip_with_nested_json_and_unicode(s: Arc<dyn IdempotencyStore>) {
    let t = a();
    let body = json!({
        "id": "run-42",
        "output": "Grüße, 世界! 👋 — \"quoted\" \\ back\nslash\t\u{0001}",
        "usage": {"input_tokens": 12, "output_tokens": 34, "cost": 0.125},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "héllo"}]},
            {"role": "assistant", "content": [], "tool_calls": null},
        ],
        "flags": [true, false, null, -1, 2.5],
        "empty": {},
    });
    for (i, (status, body)) in
        [(201u16, body), (500, json!(null)), (200, json!("just a string")), (204, json!([])), (299, json!(42))]
            .into_iter()
            .enumerate()
    {
        let name = format!("key-{i}");
        let k = key(&t, OP, &name);
        assert_eq!(claim(&s, k, H1, secs(0)).await, Claim::Claimed);
        s.complete(k, status, &body, secs(1)).await.unwrap();
        assert_eq!(claim(&s, k, H2, secs(2)).await, completed(H1, status, body));
    }
}

/// One `#[tokio::test]` per check of the idempotency store contract, each on a fresh store
/// from `$make` (an expression yielding a future of `Arc<dyn IdempotencyStore>`).
#[macro_export]
macro_rules! idempotency_store_contract_tests {
    ($make:expr) => {
        $crate::contract_checks!(idempotency, $make;
            a_free_key_is_claimed_and_a_duplicate_sees_it_in_progress,
            a_completed_key_returns_its_response_to_later_claims,
            concurrent_claims_give_the_key_to_exactly_one,
            release_frees_an_in_progress_claim,
            release_after_completion_changes_nothing,
            an_expired_record_is_claimed_anew,
            keys_are_isolated_by_tenant_and_by_operation,
            response_bodies_round_trip_with_nested_json_and_unicode,
        );
    };
}
