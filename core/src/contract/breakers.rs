//! The circuit breakers' contract: a provider's breaker opens at its threshold, keeps its
//! opening time through later failures, admits one half-open probe across every caller,
//! opens again when the probe fails and closes on a success.

use chrono::Duration;

use super::fixtures::t0;
use crate::model::breaker::BreakerState;
use crate::stores::Stores;

pub async fn breakers_open_at_the_threshold_and_close_on_a_success(s: Stores) {
    let b = &s.breakers;
    let at = |seconds: i64| t0() + Duration::seconds(seconds);
    assert_eq!(b.get("flaky").await.unwrap(), BreakerState::default(), "a provider never seen is closed");
    for n in 1..=4 {
        let state = b.failed("flaky", at(n), 5, false).await.unwrap();
        assert_eq!((state.consecutive_failures, state.opened_at), (n as u32, None));
    }
    let open = b.failed("flaky", at(5), 5, false).await.unwrap();
    assert_eq!((open.consecutive_failures, open.opened_at), (5, Some(at(5))), "opens at the fifth");
    // A failure that slipped through while it was open does not move its opening.
    assert_eq!(b.failed("flaky", at(6), 5, false).await.unwrap().opened_at, Some(at(5)));
    assert_eq!(b.get("flaky").await.unwrap().consecutive_failures, 6);
    assert_eq!(b.get("steady").await.unwrap(), BreakerState::default(), "each provider has its own");

    // The break (30 s here) is not over yet: no probe.
    assert!(!b.claim_probe("flaky", at(20), at(20) - Duration::seconds(30), at(50)).await.unwrap());
    // It is: one probe, held until its claim expires.
    assert!(b.claim_probe("flaky", at(40), at(10), at(70)).await.unwrap());
    assert!(!b.claim_probe("flaky", at(41), at(11), at(71)).await.unwrap(), "one probe at a time");
    assert_eq!(b.get("flaky").await.unwrap().probe_until, Some(at(70)));
    // The probe failed: open again from now, the claim released.
    let reopened = b.failed("flaky", at(42), 5, true).await.unwrap();
    assert_eq!((reopened.opened_at, reopened.probe_until), (Some(at(42)), None));
    assert!(!b.claim_probe("flaky", at(43), at(13), at(73)).await.unwrap(), "a new break began");
    assert!(b.claim_probe("flaky", at(80), at(50), at(110)).await.unwrap());
    // The probe succeeded: closed, nothing counted.
    b.succeeded("flaky", at(81)).await.unwrap();
    let closed = b.get("flaky").await.unwrap();
    assert_eq!((closed.consecutive_failures, closed.opened_at, closed.probe_until), (0, None, None));
    assert!(!b.claim_probe("flaky", at(200), at(170), at(230)).await.unwrap(), "a closed breaker has no probe");
    // A probe that failed after another caller closed the breaker counts as one failure; it
    // does not open it again.
    let late = b.failed("flaky", at(201), 5, true).await.unwrap();
    assert_eq!((late.consecutive_failures, late.opened_at), (1, None));
    // A threshold of one opens at the first failure; a success on an unknown provider is fine.
    assert_eq!(b.failed("fragile", at(1), 1, false).await.unwrap().opened_at, Some(at(1)));
    b.succeeded("unknown", at(1)).await.unwrap();
}

pub async fn concurrent_probe_claims_let_exactly_one_through(s: Stores) {
    let b = &s.breakers;
    b.failed("contested", t0(), 1, false).await.unwrap();
    let now = t0() + Duration::seconds(60);
    let claims = futures::future::join_all(
        (0..8).map(|_| b.claim_probe("contested", now, now - Duration::seconds(30), now + Duration::seconds(30))),
    )
    .await;
    assert_eq!(claims.into_iter().filter(|c| matches!(c, Ok(true))).count(), 1);
}
