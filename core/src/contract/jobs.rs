//! The job store contract: one suite every [`JobStore`] must pass — the in-memory store
//! here, the Postgres stores in `tracon-postgres` — unchanged.
//!
//! Each check takes a fresh, empty store. [`job_store_contract_tests!`] expands to one
//! `#[tokio::test]` per check for a given factory:
//!
//! ```text
//! tracon_core::job_store_contract_tests!(async {
//!     std::sync::Arc::new(tracon_core::jobs::MemoryJobStore::default())
//!         as std::sync::Arc<dyn tracon_core::jobs::JobStore>
//! });
//! ```

// A test suite: assertions are its whole point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use super::StoreError;
use crate::contract::fixtures::{a, b, secs};
use crate::jobs::{JobError, JobFilter, JobRecord, JobStatus, JobStore, Lease, LeaseRequest, Outcome};
use crate::names::{RunId, TenantId};

const RUN: &str = "run.execute";
const HOOK: &str = "webhook.deliver";
const LEASE_FOR: i64 = 30;

/// A queued job of `tenant`, created and available at `at`, with an id that sorts by `n`.
fn job(tenant: TenantId, n: u128, key: &str, at: DateTime<Utc>) -> JobRecord {
    JobRecord::queued(Uuid::from_u128(n), tenant, key, json!({"n": n as u64}), 3, at)
}

fn request(owner: &str, keys: &[&str], now: DateTime<Utc>) -> LeaseRequest {
    LeaseRequest {
        owner: owner.into(),
        handler_keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        lease_for: Duration::seconds(LEASE_FOR),
        now,
    }
}

fn ids(leases: &[Lease]) -> Vec<Uuid> {
    leases.iter().map(|l| l.job.id).collect()
}

fn err(code: &str) -> JobError {
    JobError { code: code.into(), message: format!("{code} happened.") }
}

async fn read(s: &Arc<dyn JobStore>, j: &JobRecord) -> JobRecord {
    s.get(&j.tenant, j.id).await.unwrap().expect("the job is stored")
}

pub async fn jobs_are_enqueued_read_and_listed_newest_first(s: Arc<dyn JobStore>) {
    let jobs = [
        job(a(), 1, RUN, secs(0)),
        job(a(), 2, HOOK, secs(1)),
        job(a(), 3, RUN, secs(2)),
        // Same creation time as job 3: the greater id is newer.
        job(a(), 4, RUN, secs(2)),
        job(b(), 5, RUN, secs(3)),
    ];
    for j in &jobs {
        s.enqueue(j).await.unwrap();
    }
    assert_eq!(s.get(&a(), jobs[0].id).await.unwrap().as_ref(), Some(&jobs[0]));
    assert_eq!(s.get(&b(), jobs[4].id).await.unwrap().as_ref(), Some(&jobs[4]));
    assert!(s.get(&a(), Uuid::from_u128(99)).await.unwrap().is_none());

    // An id is taken in every tenant.
    assert!(matches!(s.enqueue(&jobs[0]).await, Err(StoreError::Conflict(_))));
    let other = JobRecord { tenant: b(), ..jobs[0].clone() };
    assert!(matches!(s.enqueue(&other).await, Err(StoreError::Conflict(_))));
    assert_eq!(read(&s, &jobs[0]).await, jobs[0], "the first job stays");

    let listed = |rows: Vec<JobRecord>| rows.into_iter().map(|j| j.id.as_u128()).collect::<Vec<_>>();
    let all = JobFilter::default();
    assert_eq!(listed(s.list(&a(), &all, 0, 10).await.unwrap()), [4, 3, 2, 1]);
    assert_eq!(listed(s.list(&a(), &all, 1, 2).await.unwrap()), [3, 2]);
    assert!(s.list(&a(), &all, 4, 10).await.unwrap().is_empty());
    let runs = JobFilter { handler_key: Some(RUN.into()), ..JobFilter::default() };
    assert_eq!(listed(s.list(&a(), &runs, 0, 10).await.unwrap()), [4, 3, 1]);

    // Tenant isolation, both ways.
    assert_eq!(s.list(&b(), &all, 0, 10).await.unwrap(), [jobs[4].clone()]);
    assert!(s.get(&b(), jobs[0].id).await.unwrap().is_none());
    assert!(s.get(&a(), jobs[4].id).await.unwrap().is_none());

    // The status filter follows the row.
    let lease = s.lease_one(jobs[0].id, &request("w1", &[RUN], secs(10))).await.unwrap().unwrap();
    let running = JobFilter { status: Some(JobStatus::Running), ..JobFilter::default() };
    assert_eq!(s.list(&a(), &running, 0, 10).await.unwrap(), std::slice::from_ref(&lease.job));
    assert!(s.list(&b(), &running, 0, 10).await.unwrap().is_empty());
    let queued_runs = JobFilter { status: Some(JobStatus::Queued), handler_key: Some(RUN.into()) };
    assert_eq!(listed(s.list(&a(), &queued_runs, 0, 10).await.unwrap()), [4, 3]);
}

pub async fn lease_takes_the_oldest_available_jobs_of_the_requested_handlers(s: Arc<dyn JobStore>) {
    // Available (oldest first): 3 (b, at 0), 1 (a, at 1), 2 (a, at 2); 4 is in the future;
    // 5 has another handler key.
    let mut j1 = job(a(), 1, RUN, secs(0));
    j1.available_at = secs(1);
    let mut j2 = job(a(), 2, RUN, secs(0));
    j2.available_at = secs(2);
    let j3 = job(b(), 3, RUN, secs(0));
    let mut j4 = job(a(), 4, RUN, secs(0));
    j4.available_at = secs(35);
    let j5 = job(a(), 5, HOOK, secs(0));
    for j in [&j1, &j2, &j3, &j4, &j5] {
        s.enqueue(j).await.unwrap();
    }
    let now = secs(10);
    assert!(s.lease(&request("w1", &[RUN], now), 0).await.unwrap().is_empty(), "a limit of 0 leases nothing");
    assert!(s.lease(&request("w1", &[], now), 10).await.unwrap().is_empty(), "no handler keys, no jobs");

    let first = s.lease(&request("w1", &[RUN], now), 2).await.unwrap();
    assert_eq!(ids(&first), [j3.id, j1.id], "oldest available first, across tenants");
    for lease in &first {
        let j = &lease.job;
        assert_eq!(j.status, JobStatus::Running);
        assert_eq!(j.attempts, 1);
        assert_eq!(j.lease_owner.as_deref(), Some("w1"));
        assert_eq!(j.lease_token, Some(lease.token));
        assert_eq!(j.lease_expires_at, Some(now + Duration::seconds(LEASE_FOR)));
        assert_eq!(j.heartbeat_at, Some(now));
        assert_eq!(j.updated_at, now);
        assert_eq!(j.completed_at, None);
        assert_eq!(read(&s, j).await, lease.job, "the lease is what is stored");
    }
    assert_ne!(first[0].token, first[1].token, "a fresh token per lease");

    let second = s.lease(&request("w2", &[RUN], now), 10).await.unwrap();
    assert_eq!(ids(&second), [j2.id], "not a taken job, not one in the future, not another handler's");
    assert!(s.lease(&request("w2", &[RUN], now), 10).await.unwrap().is_empty());
    assert_eq!(read(&s, &j4).await, j4, "a job available later is untouched");

    let hooks = s.lease(&request("w3", &[HOOK, "other.key"], now), 10).await.unwrap();
    assert_eq!(ids(&hooks), [j5.id]);
    // At 35 the job in the future has come due; the leases taken at 10 still run until 40.
    let later = s.lease(&request("w3", &[RUN, HOOK], secs(35)), 10).await.unwrap();
    assert_eq!(ids(&later), [j4.id], "available once its time has come");
}

pub async fn concurrent_leases_take_each_job_exactly_once(s: Arc<dyn JobStore>) {
    let jobs: Vec<JobRecord> = (1..=5).map(|n| job(if n % 2 == 0 { a() } else { b() }, n, RUN, secs(0))).collect();
    for j in &jobs {
        s.enqueue(j).await.unwrap();
    }
    let callers = (0..16).map(|i| {
        let s = s.clone();
        async move { s.lease(&request(&format!("w{i}"), &[RUN], secs(10)), 1).await.unwrap() }
    });
    let results = futures::future::join_all(callers).await;
    assert!(results.iter().all(|r| r.len() <= 1), "a limit of 1: {results:?}");
    let leased: Vec<Uuid> = results.iter().flatten().map(|l| l.job.id).collect();
    let distinct: BTreeSet<Uuid> = leased.iter().copied().collect();
    assert_eq!(leased.len(), distinct.len(), "no job is leased twice: {leased:?}");
    // SKIP LOCKED may leave a caller empty-handed while another holds a row; what is left is
    // leased by the next call.
    let rest = s.lease(&request("late", &[RUN], secs(10)), 10).await.unwrap();
    let all: BTreeSet<Uuid> = distinct.iter().copied().chain(ids(&rest)).collect();
    assert_eq!(all.len(), leased.len() + rest.len(), "no job is leased twice");
    assert_eq!(all, jobs.iter().map(|j| j.id).collect(), "every job is leased");
    for j in &jobs {
        let stored = read(&s, j).await;
        assert_eq!((stored.status, stored.attempts), (JobStatus::Running, 1));
    }
}

pub async fn an_expired_lease_is_leased_again_and_the_old_token_changes_nothing(s: Arc<dyn JobStore>) {
    let j = job(a(), 1, RUN, secs(0));
    s.enqueue(&j).await.unwrap();
    let old = s.lease(&request("w1", &[RUN], secs(0)), 1).await.unwrap().remove(0);
    let expiry = secs(LEASE_FOR);
    assert!(s.lease(&request("w2", &[RUN], expiry - Duration::seconds(1)), 1).await.unwrap().is_empty());
    assert!(s.lease_one(j.id, &request("w2", &[RUN], expiry - Duration::seconds(1))).await.unwrap().is_none());

    let new = s.lease(&request("w2", &[RUN], expiry), 1).await.unwrap().remove(0);
    assert_eq!(new.job.id, j.id);
    assert_ne!(new.token, old.token, "a new token");
    assert_eq!(new.job.attempts, 2);
    assert_eq!(new.job.lease_owner.as_deref(), Some("w2"));
    assert_eq!(new.job.lease_expires_at, Some(expiry + Duration::seconds(LEASE_FOR)));

    // The first holder wakes up: nothing it does lands.
    assert_eq!(s.heartbeat(j.id, old.token, secs(500), secs(40)).await.unwrap(), None);
    assert!(!s.finish(j.id, old.token, &Outcome::Succeeded(Some(json!("stale"))), secs(41)).await.unwrap());
    let retry = Outcome::Retry { error: err("stale"), retry_at: secs(42) };
    assert!(!s.finish(j.id, old.token, &retry, secs(41)).await.unwrap());
    assert!(!s.finish(j.id, old.token, &Outcome::Failed(err("stale")), secs(41)).await.unwrap());
    assert!(!s.finish(j.id, old.token, &Outcome::Canceled, secs(41)).await.unwrap());
    assert_eq!(read(&s, &j).await, new.job, "the row is the new holder's");

    // The new holder finishes; its token is spent afterwards.
    assert!(s.finish(j.id, new.token, &Outcome::Succeeded(Some(json!({"ok": true}))), secs(45)).await.unwrap());
    let done = read(&s, &j).await;
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(done.result, Some(json!({"ok": true})));
    assert_eq!((done.lease_owner, done.lease_token, done.lease_expires_at), (None, None, None));
    assert_eq!((done.completed_at, done.updated_at), (Some(secs(45)), secs(45)));
    assert!(!s.finish(j.id, new.token, &Outcome::Canceled, secs(46)).await.unwrap());
    assert_eq!(s.heartbeat(j.id, new.token, secs(500), secs(46)).await.unwrap(), None);
    assert!(s.lease(&request("w3", &[RUN], secs(1000)), 1).await.unwrap().is_empty(), "a finished job stays");
}

pub async fn a_job_out_of_attempts_is_closed_failed_and_not_leased(s: Arc<dyn JobStore>) {
    // 1 runs once and its lease expires; 2 and 3 are live, behind it in the order.
    let mut j1 = job(a(), 1, RUN, secs(0));
    j1.max_attempts = 1;
    s.enqueue(&j1).await.unwrap();
    let first = s.lease(&request("w1", &[RUN], secs(0)), 1).await.unwrap().remove(0);
    assert_eq!(first.job.attempts, 1);
    let j2 = job(a(), 2, RUN, secs(1));
    let j3 = job(b(), 3, RUN, secs(2));
    s.enqueue(&j2).await.unwrap();
    s.enqueue(&j3).await.unwrap();

    let now = secs(100);
    let leases = s.lease(&request("w2", &[RUN], now), 2).await.unwrap();
    assert_eq!(ids(&leases), [j2.id, j3.id], "the closed job does not count against the limit");
    let closed = read(&s, &j1).await;
    assert_eq!(closed.status, JobStatus::Failed);
    assert_eq!(closed.error.as_ref().map(|e| e.code.as_str()), Some("tracon.job.attempts-exhausted"));
    assert_eq!(closed.attempts, 1, "closing is not an attempt");
    assert_eq!((closed.lease_owner, closed.lease_token, closed.lease_expires_at), (None, None, None));
    assert_eq!((closed.completed_at, closed.updated_at), (Some(now), now));
    assert_eq!(s.heartbeat(j1.id, first.token, secs(500), now).await.unwrap(), None);
    assert!(!s.finish(j1.id, first.token, &Outcome::Succeeded(None), now).await.unwrap());
    for lease in &leases {
        assert!(s.finish(lease.job.id, lease.token, &Outcome::Succeeded(None), now).await.unwrap());
    }

    // A job out of attempts that failed before keeps its own error; one whose cancellation
    // was asked ends Canceled; lease_one closes the same way.
    let mut j4 = job(a(), 4, RUN, secs(0));
    j4.attempts = 3;
    j4.error = Some(err("tracon.test.earlier"));
    let mut j5 = job(a(), 5, RUN, secs(0));
    j5.max_attempts = 1;
    let mut j6 = job(a(), 6, RUN, secs(0));
    j6.attempts = 3;
    for j in [&j4, &j5, &j6] {
        s.enqueue(j).await.unwrap();
    }
    let lease5 = s.lease_one(j5.id, &request("w3", &[RUN], now)).await.unwrap().unwrap();
    s.cancel(&a(), j5.id, now).await.unwrap();
    assert!(s.lease(&request("w4", &[RUN], secs(200)), 10).await.unwrap().is_empty(), "nothing is leasable");
    let j4 = read(&s, &j4).await;
    assert_eq!((j4.status, j4.error), (JobStatus::Failed, Some(err("tracon.test.earlier"))));
    let j5 = read(&s, &j5).await;
    assert_eq!((j5.status, j5.error, j5.completed_at), (JobStatus::Canceled, None, Some(secs(200))));
    assert_eq!(s.heartbeat(j5.id, lease5.token, secs(500), secs(201)).await.unwrap(), None);
    assert_eq!(read(&s, &j6).await.status, JobStatus::Failed);
    let mut j7 = job(a(), 7, RUN, secs(0));
    j7.attempts = 3;
    s.enqueue(&j7).await.unwrap();
    assert!(s.lease_one(j7.id, &request("w5", &[RUN], now)).await.unwrap().is_none());
    assert_eq!(read(&s, &j7).await.status, JobStatus::Failed);
}

pub async fn retry_returns_the_job_to_the_queue_after_its_backoff(s: Arc<dyn JobStore>) {
    let mut j = job(a(), 1, RUN, secs(0));
    j.max_attempts = 2;
    s.enqueue(&j).await.unwrap();
    let first = s.lease(&request("w1", &[RUN], secs(0)), 1).await.unwrap().remove(0);
    let retry = Outcome::Retry { error: err("tracon.test.flaky"), retry_at: secs(20) };
    assert!(s.finish(j.id, first.token, &retry, secs(5)).await.unwrap());
    let queued = read(&s, &j).await;
    assert_eq!(queued.status, JobStatus::Queued);
    assert_eq!(queued.available_at, secs(20));
    assert_eq!(queued.error, Some(err("tracon.test.flaky")), "the error is kept meanwhile");
    assert_eq!(queued.attempts, 1);
    assert_eq!((queued.lease_owner, queued.lease_token, queued.lease_expires_at), (None, None, None));
    assert_eq!((queued.completed_at, queued.updated_at), (None, secs(5)));
    assert!(!s.finish(j.id, first.token, &retry, secs(6)).await.unwrap(), "the token is spent");

    assert!(s.lease(&request("w2", &[RUN], secs(19)), 1).await.unwrap().is_empty(), "not before its time");
    assert!(s.lease_one(j.id, &request("w2", &[RUN], secs(19))).await.unwrap().is_none());
    let second = s.lease(&request("w2", &[RUN], secs(20)), 1).await.unwrap().remove(0);
    assert_eq!(second.job.attempts, 2);

    // The last attempt's retry ends the job.
    let last = Outcome::Retry { error: err("tracon.test.again"), retry_at: secs(60) };
    assert!(s.finish(j.id, second.token, &last, secs(25)).await.unwrap());
    let failed = read(&s, &j).await;
    assert_eq!(failed.status, JobStatus::Failed);
    assert_eq!(failed.error, Some(err("tracon.test.again")));
    assert_eq!(failed.completed_at, Some(secs(25)));
    assert_eq!(failed.available_at, secs(20), "not requeued");
    assert!(s.lease(&request("w3", &[RUN], secs(100)), 1).await.unwrap().is_empty());

    // Failed ends at once, attempts left or not.
    let k = job(a(), 2, RUN, secs(0));
    s.enqueue(&k).await.unwrap();
    let lease = s.lease_one(k.id, &request("w4", &[RUN], secs(0))).await.unwrap().unwrap();
    assert!(s.finish(k.id, lease.token, &Outcome::Failed(err("tracon.test.bad")), secs(3)).await.unwrap());
    let k = read(&s, &k).await;
    assert_eq!((k.status, k.error, k.completed_at), (JobStatus::Failed, Some(err("tracon.test.bad")), Some(secs(3))));
}

pub async fn a_requeue_hands_the_job_to_a_later_attempt_without_using_one_up(s: Arc<dyn JobStore>) {
    let mut j = job(a(), 1, RUN, secs(0));
    j.max_attempts = 1;
    s.enqueue(&j).await.unwrap();
    // More hand-overs than attempts: each gives its attempt back.
    for round in 0..3 {
        let lease = s.lease(&request("w", &[RUN], secs(round * 10)), 1).await.unwrap().remove(0);
        assert_eq!(lease.job.attempts, 1, "round {round}");
        assert!(s.finish(j.id, lease.token, &Outcome::Requeue, secs(round * 10 + 1)).await.unwrap());
        let queued = read(&s, &j).await;
        assert_eq!((queued.status, queued.attempts, queued.error), (JobStatus::Queued, 0, None), "round {round}");
        assert_eq!((queued.available_at, queued.completed_at), (secs(round * 10 + 1), None), "due at once");
        assert!(!s.finish(j.id, lease.token, &Outcome::Requeue, secs(round * 10 + 2)).await.unwrap(), "spent token");
    }
    let lease = s.lease(&request("w", &[RUN], secs(40)), 1).await.unwrap().remove(0);
    assert!(s.finish(j.id, lease.token, &Outcome::Succeeded(None), secs(41)).await.unwrap());
    assert_eq!(read(&s, &j).await.status, JobStatus::Succeeded);

    // A cancel asked meanwhile ends it instead.
    let k = job(a(), 2, RUN, secs(0));
    s.enqueue(&k).await.unwrap();
    let lease = s.lease_one(k.id, &request("w", &[RUN], secs(0))).await.unwrap().unwrap();
    s.cancel(&a(), k.id, secs(1)).await.unwrap();
    assert!(s.finish(k.id, lease.token, &Outcome::Requeue, secs(2)).await.unwrap());
    let k = read(&s, &k).await;
    assert_eq!((k.status, k.completed_at), (JobStatus::Canceled, Some(secs(2))));
}

pub async fn heartbeat_extends_the_lease_and_reports_cancellation(s: Arc<dyn JobStore>) {
    let j = job(a(), 1, RUN, secs(0));
    s.enqueue(&j).await.unwrap();
    let lease = s.lease(&request("w1", &[RUN], secs(0)), 1).await.unwrap().remove(0);
    assert_eq!(s.heartbeat(j.id, lease.token, secs(60), secs(10)).await.unwrap(), Some(false));
    let stored = read(&s, &j).await;
    assert_eq!(stored.lease_expires_at, Some(secs(60)));
    assert_eq!((stored.heartbeat_at, stored.updated_at), (Some(secs(10)), secs(10)));
    assert_eq!(stored.lease_token, Some(lease.token));
    assert!(s.lease(&request("w2", &[RUN], secs(LEASE_FOR)), 1).await.unwrap().is_empty(), "the lease was extended");

    assert_eq!(s.heartbeat(j.id, Uuid::from_u128(42), secs(90), secs(11)).await.unwrap(), None, "another token");
    assert_eq!(s.heartbeat(Uuid::from_u128(42), lease.token, secs(90), secs(11)).await.unwrap(), None, "another job");
    assert_eq!(read(&s, &j).await, stored, "nothing changed");

    let flagged = s.cancel(&a(), j.id, secs(20)).await.unwrap();
    assert_eq!((flagged.status, flagged.cancel_requested), (JobStatus::Running, true));
    assert_eq!(s.heartbeat(j.id, lease.token, secs(80), secs(21)).await.unwrap(), Some(true), "it sees the cancel");
    assert_eq!(read(&s, &j).await.lease_expires_at, Some(secs(80)));
}

pub async fn cancel_ends_a_queued_job_and_flags_a_running_one(s: Arc<dyn JobStore>) {
    let queued = job(a(), 1, RUN, secs(0));
    let running = job(a(), 2, RUN, secs(0));
    let retried = job(a(), 3, RUN, secs(0));
    for j in [&queued, &running, &retried] {
        s.enqueue(j).await.unwrap();
    }
    let canceled = s.cancel(&a(), queued.id, secs(5)).await.unwrap();
    assert_eq!(canceled.status, JobStatus::Canceled);
    assert!(canceled.cancel_requested);
    assert_eq!((canceled.completed_at, canceled.updated_at), (Some(secs(5)), secs(5)));
    assert_eq!(read(&s, &queued).await, canceled);
    assert!(s.lease_one(queued.id, &request("w1", &[RUN], secs(6))).await.unwrap().is_none());

    let lease = s.lease_one(running.id, &request("w1", &[RUN], secs(6))).await.unwrap().unwrap();
    let flagged = s.cancel(&a(), running.id, secs(7)).await.unwrap();
    assert_eq!((flagged.status, flagged.cancel_requested, flagged.completed_at), (JobStatus::Running, true, None));
    assert_eq!(flagged.lease_token, Some(lease.token), "the holder keeps its lease");
    assert_eq!(read(&s, &running).await, flagged);
    let again = s.cancel(&a(), running.id, secs(8)).await.unwrap();
    assert_eq!((again.status, again.cancel_requested), (JobStatus::Running, true), "asking twice is fine");
    assert!(s.finish(running.id, lease.token, &Outcome::Canceled, secs(9)).await.unwrap());
    let ended = read(&s, &running).await;
    assert_eq!((ended.status, ended.completed_at), (JobStatus::Canceled, Some(secs(9))));
    assert_eq!((ended.lease_owner, ended.lease_token, ended.lease_expires_at), (None, None, None));

    // A retry asked for after the cancel ends the job instead.
    let lease = s.lease_one(retried.id, &request("w1", &[RUN], secs(10))).await.unwrap().unwrap();
    s.cancel(&a(), retried.id, secs(11)).await.unwrap();
    let retry = Outcome::Retry { error: err("tracon.test.flaky"), retry_at: secs(12) };
    assert!(s.finish(retried.id, lease.token, &retry, secs(12)).await.unwrap());
    assert_eq!(read(&s, &retried).await.status, JobStatus::Canceled);

    // Ended jobs conflict; another tenant's or an unknown job is not found.
    for j in [&queued, &running, &retried] {
        assert!(matches!(s.cancel(&a(), j.id, secs(20)).await, Err(StoreError::Conflict(_))));
    }
    let done = job(a(), 4, RUN, secs(0));
    s.enqueue(&done).await.unwrap();
    let lease = s.lease_one(done.id, &request("w1", &[RUN], secs(0))).await.unwrap().unwrap();
    assert!(s.finish(done.id, lease.token, &Outcome::Succeeded(None), secs(1)).await.unwrap());
    assert!(matches!(s.cancel(&a(), done.id, secs(2)).await, Err(StoreError::Conflict(_))));

    let theirs = job(b(), 5, RUN, secs(0));
    s.enqueue(&theirs).await.unwrap();
    assert!(matches!(s.cancel(&a(), theirs.id, secs(3)).await, Err(StoreError::NotFound)));
    assert!(matches!(s.cancel(&b(), queued.id, secs(3)).await, Err(StoreError::NotFound)));
    assert!(matches!(s.cancel(&a(), Uuid::from_u128(99), secs(3)).await, Err(StoreError::NotFound)));
    assert_eq!(read(&s, &theirs).await, theirs, "another tenant's job is untouched");
}

pub async fn lease_one_leases_a_delivered_job_under_the_same_rules(s: Arc<dyn JobStore>) {
    let j = job(b(), 1, RUN, secs(0));
    let mut later = job(a(), 2, RUN, secs(0));
    later.available_at = secs(50);
    s.enqueue(&j).await.unwrap();
    s.enqueue(&later).await.unwrap();

    assert!(s.lease_one(Uuid::from_u128(99), &request("w1", &[RUN], secs(1))).await.unwrap().is_none(), "unknown");
    assert!(s.lease_one(j.id, &request("w1", &[HOOK], secs(1))).await.unwrap().is_none(), "another handler's");
    assert!(s.lease_one(later.id, &request("w1", &[RUN], secs(1))).await.unwrap().is_none(), "not yet available");
    assert_eq!(read(&s, &later).await, later);

    let lease = s.lease_one(j.id, &request("w1", &[RUN], secs(1))).await.unwrap().unwrap();
    assert_eq!((lease.job.id, lease.job.status, lease.job.attempts), (j.id, JobStatus::Running, 1));
    assert_eq!(lease.job.lease_token, Some(lease.token));
    assert_eq!(read(&s, &j).await, lease.job);
    assert!(s.lease_one(j.id, &request("w2", &[RUN], secs(2))).await.unwrap().is_none(), "taken");
    assert_eq!(read(&s, &j).await, lease.job, "a taken job is untouched");

    let again = s.lease_one(j.id, &request("w2", &[RUN], secs(1 + LEASE_FOR))).await.unwrap().unwrap();
    assert_ne!(again.token, lease.token);
    assert_eq!(again.job.attempts, 2, "an expired lease is leased again");
    assert!(s.finish(j.id, again.token, &Outcome::Succeeded(None), secs(40)).await.unwrap());
    assert!(s.lease_one(j.id, &request("w3", &[RUN], secs(500))).await.unwrap().is_none(), "finished");
    assert!(s.lease_one(later.id, &request("w1", &[RUN], secs(50))).await.unwrap().is_some(), "available now");
}

pub async fn payloads_and_results_round_trip_with_nested_json(s: Arc<dyn JobStore>) {
    let payload: Value = json!({
        "request": {
            "message": "Wie geht's? — 你好 \"quoted\" \\ back\nslash",
            "history": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, null, true, 1.5, -7],
            "empty": {}, "none": [], "big": 9_007_199_254_740_993_u64
        },
        "labels": {"b": "2", "a": "1"}
    });
    let mut j = JobRecord::queued(Uuid::from_u128(1), a(), RUN, payload.clone(), 5, secs(0));
    j.run_id = Some(RunId(Uuid::from_u128(77)));
    s.enqueue(&j).await.unwrap();
    let stored = read(&s, &j).await;
    assert_eq!(stored, j);
    assert_eq!(stored.payload, payload);

    let lease = s.lease(&request("w1", &[RUN], secs(1)), 1).await.unwrap().remove(0);
    assert_eq!(lease.job.payload, payload);
    assert_eq!(lease.job.run_id, Some(RunId(Uuid::from_u128(77))));
    let result = json!({"runId": "x", "counts": [1, 2, {"deep": {"deeper": [null]}}], "ok": true});
    assert!(s.finish(j.id, lease.token, &Outcome::Succeeded(Some(result.clone())), secs(2)).await.unwrap());
    let done = read(&s, &j).await;
    assert_eq!((done.payload, done.result), (payload, Some(result)));

    // A scalar payload and no result.
    let scalar = JobRecord::queued(Uuid::from_u128(2), a(), HOOK, json!("just text"), 1, secs(0));
    s.enqueue(&scalar).await.unwrap();
    let lease = s.lease_one(scalar.id, &request("w1", &[HOOK], secs(1))).await.unwrap().unwrap();
    assert!(s.finish(scalar.id, lease.token, &Outcome::Succeeded(None), secs(2)).await.unwrap());
    let done = read(&s, &scalar).await;
    assert_eq!((done.payload, done.result, done.status), (json!("just text"), None, JobStatus::Succeeded));
}

pub async fn due_lists_jobs_that_may_lack_a_wake_up(s: Arc<dyn JobStore>) {
    let young = job(a(), 1, RUN, secs(0));
    let old = job(b(), 2, RUN, secs(-120));
    let mut later = job(a(), 3, RUN, secs(60));
    later.created_at = secs(-120);
    for j in [&young, &old, &later] {
        s.enqueue(j).await.unwrap();
    }
    // `young` was enqueued a moment ago: its own wake-up is on the way.
    assert_eq!(s.due(secs(0), secs(-30), 10).await.unwrap(), vec![old.id]);
    // A leased job whose lease expired is due; a retry is due once its backoff passed.
    let lease = s.lease_one(young.id, &request("w", &[RUN], secs(0))).await.unwrap().unwrap();
    let retry = Outcome::Retry { error: JobError { code: "x".into(), message: "x".into() }, retry_at: secs(10) };
    assert!(s.finish(young.id, lease.token, &retry, secs(1)).await.unwrap());
    assert_eq!(s.due(secs(5), secs(-30), 10).await.unwrap(), vec![old.id]);
    assert_eq!(s.due(secs(10), secs(-30), 10).await.unwrap(), vec![old.id, young.id]);
    let leased = s.lease_one(old.id, &request("w", &[RUN], secs(10))).await.unwrap().unwrap();
    assert_eq!(s.due(secs(11), secs(-30), 10).await.unwrap(), vec![young.id]);
    assert_eq!(s.due(secs(10 + LEASE_FOR), secs(-30), 10).await.unwrap(), vec![old.id, young.id]);
    assert_eq!(s.due(secs(61), secs(-30), 1).await.unwrap().len(), 1, "at most the limit");
    drop(leased);
}

/// One `#[tokio::test]` per contract check, for stores made by `$make` (an expression
/// evaluating to a future of a fresh `Arc<dyn JobStore>`).
#[macro_export]
macro_rules! job_store_contract_tests {
    ($make:expr) => {
        $crate::contract_checks!(jobs, $make;
            jobs_are_enqueued_read_and_listed_newest_first,
            lease_takes_the_oldest_available_jobs_of_the_requested_handlers,
            concurrent_leases_take_each_job_exactly_once,
            an_expired_lease_is_leased_again_and_the_old_token_changes_nothing,
            a_job_out_of_attempts_is_closed_failed_and_not_leased,
            retry_returns_the_job_to_the_queue_after_its_backoff,
            a_requeue_hands_the_job_to_a_later_attempt_without_using_one_up,
            heartbeat_extends_the_lease_and_reports_cancellation,
            cancel_ends_a_queued_job_and_flags_a_running_one,
            lease_one_leases_a_delivered_job_under_the_same_rules,
            payloads_and_results_round_trip_with_nested_json,
            due_lists_jobs_that_may_lack_a_wake_up,
        );
    };
}
