//! Outbound webhooks through the router: subscriptions (validation, reserved headers, the
//! egress guard at write time, audit before apply), `test.ping` via the endpoint, events
//! from runs, jobs and quota notices, and deliveries to a local receiver run by a job
//! runner the test drains — signatures verified independently with the `hmac` crate,
//! retries updating the one delivery entry in place, a subscription disabled after the
//! configured failures, and private destinations refused without a connection.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::Utc;
use hmac::{Hmac, Mac};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use serde_json::{Value, json};
use sha2::Sha256;
use support::{Manual, TestClock, approval_tool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracon_core::audit::{AuditEntry, AuditFilter, AuditStore, NewAuditEntry};
use tracon_core::config::Config;
use tracon_core::definition::AgentDefinition;
use tracon_core::error::StoreError;
use tracon_core::jobs::{JobRunner, JobSettings};
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::names::TenantId;
use tracon_core::ports::{Clock, Platform, tokio_rt};
use tracon_core::runtime::RunQueue;
use tracon_core::runtime::{Runtime, RuntimeBuilder};
use tracon_core::stores::Stores;
use tracon_core::webhooks::{WebhookSettings, WebhookSubscription};
use tracon_handlers::{AppState, HttpSettings};

const SECRET: &str = "whsec-test-value-never-shown";
const SECRET_NAME: &str = "Tracon:WebhookSecrets:Orders";

// ---- a local receiver ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Received {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

/// An HTTP/1.1 receiver on 127.0.0.1 answering the scripted statuses in order (then 200),
/// keeping every request and counting connections.
struct Receiver {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Received>>>,
    connections: Arc<AtomicUsize>,
}

impl Receiver {
    async fn start(statuses: &[u16]) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let script = Arc::new(Mutex::new(statuses.iter().copied().collect::<VecDeque<u16>>()));
        let (kept, counter) = (requests.clone(), connections.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let (kept, script) = (kept.clone(), script.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                    let headers: BTreeMap<String, String> = head
                        .lines()
                        .skip(1)
                        .filter_map(|l| l.split_once(':'))
                        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                        .collect();
                    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
                    while buf.len() < head_end + length {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body = buf[head_end..head_end + length].to_vec();
                    let mut request_line = head.lines().next().unwrap_or_default().split(' ');
                    let method = request_line.next().unwrap_or_default().to_owned();
                    let path = request_line.next().unwrap_or_default().to_owned();
                    kept.lock().unwrap().push(Received { method, path, headers, body });
                    let status = script.lock().unwrap().pop_front().unwrap_or(200);
                    // A large answer: the client reads at most its limit and keeps none of it.
                    let filler = "x".repeat(100 * 1024);
                    // A redirect points at another path of this receiver (which answers 200).
                    let location = if (300..400).contains(&status) { "location: /moved\r\n" } else { "" };
                    let response = format!(
                        "HTTP/1.1 {status} Scripted\r\n{location}content-length: {}\r\nconnection: close\r\n\r\n{filler}",
                        filler.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Receiver { addr, requests, connections }
    }

    fn url(&self) -> String {
        format!("http://{}/hooks/tracon?source=test", self.addr)
    }

    fn requests(&self) -> Vec<Received> {
        self.requests.lock().unwrap().clone()
    }

    /// The request lines' paths, in order.
    fn paths(&self) -> Vec<String> {
        self.requests.lock().unwrap().iter().map(|r| r.path.clone()).collect()
    }
}

/// Answers every name with one address: a public-looking name that resolves to a private
/// one, without the internet.
struct FixedDns(IpAddr);

impl Resolve for FixedDns {
    fn resolve(&self, _name: Name) -> Resolving {
        let addr = SocketAddr::new(self.0, 0);
        Box::pin(async move { Ok(Box::new(std::iter::once(addr)) as Addrs) })
    }
}

// ---- the harness --------------------------------------------------------------------------------

struct Harness {
    app: Router,
    runner: JobRunner,
    runtime: Arc<Runtime>,
    clock: Arc<TestClock>,
}

fn config(pairs: &[(&str, &str)]) -> Config {
    let mut all = vec![("Tracon__WebhookSecrets__Orders", SECRET)];
    all.extend_from_slice(pairs);
    Config::from_pairs(all)
}

/// Local testing: plain http and 127.0.0.0/8 allowed.
fn local(extra: &[(&str, &str)]) -> WebhookSettings {
    let mut pairs = vec![("Tracon__Egress__AllowHttp", "true"), ("Tracon__Egress__AllowedNetworks__0", "127.0.0.0/8")];
    pairs.extend_from_slice(extra);
    WebhookSettings::from_config(&config(&pairs)).unwrap()
}

fn harness_with(settings: WebhookSettings, stores: Stores) -> Harness {
    let clock = Arc::new(TestClock::frozen(Utc::now()));
    let platform = Platform { clock: clock.clone(), spawner: tokio_rt::platform().spawner };
    let refund = approval_tool("refund", "Refunds an order.", json!({"type": "object"}), "refunded");
    let script = ScriptedProvider::from_fn("script", |req| match req.last_user_text() {
        Some("refund") if !matches!(req.messages.last(), Some(tracon_core::model::Message::Tool { .. })) => {
            ScriptedTurn::tool_call("refund", json!({"order": 7}))
        }
        Some("fail") => ScriptedTurn::failing(tracon_core::model::ProviderError::new(
            tracon_core::model::ProviderErrorKind::ServerError,
            "HttpRequestException",
            "upstream said no",
        )),
        _ => ScriptedTurn::text("Done.").with_usage(5, 3),
    });
    let runtime = Arc::new(
        RuntimeBuilder::new(platform)
            .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
            .add_tool(refund)
            .add_agent(AgentDefinition::new("bot", "script", "m").with_tools(&["refund"]))
            .stores(stores)
            .webhooks(settings)
            .build()
            .unwrap(),
    );
    let runner = tracon_core::background::job_runner(&runtime, JobSettings::default(), "test");
    runtime.set_queue(RunQueue { transport: Arc::new(Manual), max_attempts: 3 });
    let state = AppState::new(runtime.clone(), HttpSettings::default());
    Harness { app: tracon_handlers::router(state), runner, runtime, clock }
}

fn harness(settings: WebhookSettings) -> Harness {
    harness_with(settings, Stores::in_memory())
}

async fn call(app: &Router, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    call_with(app, method, path, body, &[]).await
}

async fn call_with(
    app: &Router,
    method: Method,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> (StatusCode, Value) {
    let reply = support::call(method, path).headers(headers).json(body).send(app).await;
    (reply.status, reply.json())
}

fn subscription(url: &str, events: &[&str]) -> Value {
    json!({"url": url, "events": events, "secretConfigurationName": SECRET_NAME,
        "headers": {"X-Team": "payments"}, "description": "Orders"})
}

async fn subscribe(h: &Harness, url: &str, events: &[&str]) -> String {
    let (status, created) = call(&h.app, Method::POST, "/api/webhooks", Some(subscription(url, events))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["id"].as_str().unwrap().to_owned()
}

async fn deliveries(h: &Harness, id: &str) -> Vec<Value> {
    let (status, list) = call(&h.app, Method::GET, &format!("/api/webhooks/{id}/deliveries"), None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list.as_array().unwrap().clone()
}

async fn ping(h: &Harness, id: &str) -> Value {
    let (status, queued) = call(&h.app, Method::POST, &format!("/api/webhooks/{id}/test"), None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    queued
}

/// The receiver's check, written from the contract alone: HMAC-SHA256 over
/// `"{timestamp}.{body}"` with the shared secret, hex, after `sha256=`.
fn signature_is_valid(r: &Received) -> bool {
    let timestamp = &r.headers["x-tracon-timestamp"];
    let Some(hex) = r.headers["x-tracon-signature"].strip_prefix("sha256=") else { return false };
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(&r.body);
    let expected: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    expected == hex
}

// ---- deliveries ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_finished_run_is_delivered_signed_and_the_receiver_verifies_it() {
    let receiver = Receiver::start(&[]).await;
    let h = harness(local(&[]));
    let id = subscribe(&h, &receiver.url(), &["run.completed"]).await;

    let (status, _) = call(&h.app, Method::POST, "/api/agents/bot/run", Some(json!({"message": "hello"}))).await;
    assert_eq!(status, StatusCode::OK);
    let (_, runs) = call(&h.app, Method::GET, "/api/runs", None).await;
    let run_id = runs[0]["id"].as_str().unwrap().to_owned();
    let listed = deliveries(&h, &id).await;
    assert_eq!((listed.len(), listed[0]["status"].as_str()), (1, Some("Pending")), "queued, not sent: {listed:?}");

    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let got = receiver.requests();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert!(signature_is_valid(r), "{:?}", r.headers);
    let now = h.clock.now().timestamp();
    assert_eq!(r.headers["x-tracon-timestamp"].parse::<i64>().unwrap(), now);
    assert_eq!(r.headers["x-tracon-event"], "run.completed");
    assert_eq!(r.headers["x-tracon-delivery"], listed[0]["id"].as_str().unwrap());
    assert_eq!(r.headers["content-type"], "application/json");
    assert_eq!(r.headers["x-team"], "payments", "custom headers are sent");
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!((body["type"].as_str(), body["data"]["runId"].as_str()), (Some("run.completed"), Some(run_id.as_str())));
    assert_eq!(body["data"]["agentName"], "bot");
    assert_eq!(body["tenantId"], "default");
    assert_eq!(body["id"], listed[0]["eventId"]);

    let listed = deliveries(&h, &id).await;
    assert_eq!(listed.len(), 1);
    let d = &listed[0];
    assert_eq!(
        (d["status"].as_str(), d["attempts"].as_u64(), d["lastStatusCode"].as_u64()),
        (Some("Succeeded"), Some(1), Some(200))
    );
    assert!(d["lastError"].is_null());
    // Nothing of the secret, or of the receiver's 100 KB answer, is stored or shown.
    for path in [format!("/api/webhooks/{id}"), format!("/api/webhooks/{id}/deliveries"), "/api/jobs".to_owned()] {
        let (_, v) = call(&h.app, Method::GET, &path, None).await;
        assert!(!v.to_string().contains(SECRET) && !v.to_string().contains("xxxxxxxx"), "{path}: {v}");
    }
    // The delivery job settled without a job.completed about itself (no loop).
    assert_eq!(h.runner.drain(10).await.unwrap(), 0);
}

/// Runs `bot` on `message` with one subscription to `events` and delivers what that queued:
/// exactly one event, in one delivery entry. The harness and that event's body.
async fn the_one_event_of_a_run(message: &str, events: &[&str]) -> (Harness, Value) {
    let receiver = Receiver::start(&[]).await;
    let h = harness(local(&[]));
    let id = subscribe(&h, &receiver.url(), events).await;
    call(&h.app, Method::POST, "/api/agents/bot/run", Some(json!({"message": message}))).await;
    h.runner.drain(10).await.unwrap();
    let got = receiver.requests();
    assert_eq!(got.len(), 1);
    assert_eq!(deliveries(&h, &id).await.len(), 1);
    let body = serde_json::from_slice(&got[0].body).unwrap();
    (h, body)
}

#[tokio::test]
async fn a_failed_run_publishes_run_failed_with_a_safe_message() {
    let (_, body) = the_one_event_of_a_run("fail", &["run.failed", "run.completed"]).await;
    assert_eq!(body["type"], "run.failed");
    assert_eq!(body["data"]["status"], "Failed");
    assert!(!body.to_string().contains("upstream said no"), "foreign text stays in the log: {body}");
}

#[tokio::test]
async fn a_run_stopping_for_approval_publishes_approval_pending_without_the_arguments() {
    let (h, body) = the_one_event_of_a_run("refund", &["approval.pending", "run.completed"]).await;
    assert_eq!(body["type"], "approval.pending");
    assert_eq!(body["data"]["requests"][0]["toolName"], "refund");
    assert!(body["data"]["requests"][0]["requestId"].is_string());
    assert!(!body.to_string().contains("order"), "no arguments: {body}");
    let (_, pending) = call(&h.app, Method::GET, "/api/approvals/pending", None).await;
    assert_eq!(pending[0]["id"], body["data"]["requests"][0]["requestId"]);
}

#[tokio::test]
async fn a_failing_receiver_is_retried_with_backoff_and_its_one_entry_updated_in_place() {
    let receiver = Receiver::start(&[500, 500, 200]).await;
    let h = harness(local(&[("Tracon__Webhooks__MaxAttempts", "3")]));
    let id = subscribe(&h, &receiver.url(), &["run.completed"]).await;
    let queued = ping(&h, &id).await;
    assert_eq!(queued["status"], "Pending");
    assert_eq!(queued["deliveriesLocation"], format!("/api/webhooks/{id}/deliveries"));

    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let d = &deliveries(&h, &id).await[0];
    assert_eq!(
        (d["status"].as_str(), d["attempts"].as_u64(), d["lastStatusCode"].as_u64()),
        (Some("Retrying"), Some(1), Some(500))
    );
    assert_eq!(d["lastError"]["code"], "tracon.webhook.http-status");
    assert_eq!(d["lastError"]["message"], "The receiver answered 500.");
    assert_eq!(h.runner.drain(10).await.unwrap(), 0, "not before the backoff passed");

    h.clock.advance(6);
    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let d = &deliveries(&h, &id).await[0];
    assert_eq!((d["status"].as_str(), d["attempts"].as_u64()), (Some("Retrying"), Some(2)));

    h.clock.advance(11);
    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let listed = deliveries(&h, &id).await;
    assert_eq!(listed.len(), 1, "one entry per event: {listed:?}");
    let d = &listed[0];
    assert_eq!(
        (d["status"].as_str(), d["attempts"].as_u64(), d["lastStatusCode"].as_u64()),
        (Some("Succeeded"), Some(3), Some(200))
    );
    assert!(d["lastError"].is_null() && d["completedAt"].is_string());
    let got = receiver.requests();
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(signature_is_valid));
    assert!(got.iter().all(|r| r.headers["x-tracon-delivery"] == d["id"].as_str().unwrap()));
    assert!(got.iter().all(|r| r.body == got[0].body), "every attempt sends the same body");
    let (_, sub) = call(&h.app, Method::GET, &format!("/api/webhooks/{id}"), None).await;
    assert_eq!(sub["consecutiveFailures"], 0);
}

#[tokio::test]
async fn a_receivers_redirect_is_a_failed_attempt_with_its_status_and_is_never_followed() {
    // 302, then 200 for everything: a client that followed the redirect would GET /moved.
    let receiver = Receiver::start(&[302]).await;
    let h = harness(local(&[]));
    let id = subscribe(&h, &receiver.url(), &["test.ping"]).await;
    ping(&h, &id).await;
    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    assert_eq!(receiver.paths(), ["/hooks/tracon?source=test"], "the redirect was not followed");
    assert_eq!(receiver.requests()[0].method, "POST");
    let listed = deliveries(&h, &id).await;
    assert_eq!(listed[0]["status"], "Retrying", "{listed:?}");
    assert_eq!(listed[0]["lastStatusCode"], 302);
    assert_eq!(listed[0]["lastError"]["code"], "tracon.webhook.redirect", "{listed:?}");
}

/// An API key of `tenant` with `WebhooksAdmin`, put straight into the store.
async fn webhooks_key(runtime: &Runtime, tenant: &str) -> String {
    support::api_key(runtime, tenant, &[tracon_core::keys::Scope::WebhooksAdmin], None).await
}

#[tokio::test]
async fn a_tenant_cannot_name_another_tenants_signing_secret_and_its_deliveries_use_its_own() {
    const ACME_SECRET: &str = "whsec-acme-only";
    let receiver = Receiver::start(&[]).await;
    let h = harness(local(&[("Tracon__WebhookSecrets__acme__Orders", ACME_SECRET)]));
    let key = webhooks_key(&h.runtime, "acme").await;
    let bearer = format!("Bearer {key}");
    let headers = [("Authorization", bearer.as_str())];
    // The default tenant's key name: refused, naming the partition acme may use.
    let (status, problem) =
        call_with(&h.app, Method::POST, "/api/webhooks", Some(subscription(&receiver.url(), &["test.ping"])), &headers)
            .await;
    assert_eq!((status, problem["field"].as_str()), (StatusCode::BAD_REQUEST, Some("secretConfigurationName")));
    assert_eq!(problem["allowedPrefix"], "Tracon:WebhookSecrets:acme:", "{problem}");
    let mut own = subscription(&receiver.url(), &["test.ping"]);
    own["secretConfigurationName"] = json!("Tracon:WebhookSecrets:acme:Orders");
    let (status, created) = call_with(&h.app, Method::POST, "/api/webhooks", Some(own), &headers).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap();
    let (status, _) = call_with(&h.app, Method::POST, &format!("/api/webhooks/{id}/test"), None, &headers).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let got = receiver.requests();
    assert_eq!(got.len(), 1);
    assert!(!signature_is_valid(&got[0]), "not signed with the default tenant's secret");
    let mut mac = Hmac::<Sha256>::new_from_slice(ACME_SECRET.as_bytes()).unwrap();
    mac.update(got[0].headers["x-tracon-timestamp"].as_bytes());
    mac.update(b".");
    mac.update(&got[0].body);
    let expected: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(got[0].headers["x-tracon-signature"], format!("sha256={expected}"));
    let body: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(body["tenantId"], "acme", "the receiver can check whose event it is");
}

#[tokio::test]
async fn a_subscription_is_disabled_after_the_configured_failed_deliveries_and_a_success_resets_the_count() {
    let receiver = Receiver::start(&[500, 200, 500, 500]).await;
    let h = harness(local(&[("Tracon__Webhooks__MaxAttempts", "1"), ("Tracon__Webhooks__DisableAfterFailures", "2")]));
    let id = subscribe(&h, &receiver.url(), &["run.completed"]).await;
    let path = format!("/api/webhooks/{id}");
    let mut counts = Vec::new();
    for _ in 0..3 {
        // Entries list newest first; ids minted in one millisecond have no order.
        h.clock.advance(1);
        ping(&h, &id).await;
        h.runner.drain(10).await.unwrap();
        let (_, s) = call(&h.app, Method::GET, &path, None).await;
        counts.push((s["consecutiveFailures"].as_u64().unwrap(), s["enabled"].as_bool().unwrap()));
    }
    assert_eq!(counts, [(1, true), (0, true), (1, true)]);
    h.clock.advance(1);
    ping(&h, &id).await;
    h.runner.drain(10).await.unwrap();
    let (_, s) = call(&h.app, Method::GET, &path, None).await;
    assert_eq!((s["consecutiveFailures"].as_u64(), s["enabled"].as_bool()), (Some(2), Some(false)));
    assert!(s["disabledAt"].is_string());
    let failed = deliveries(&h, &id).await;
    assert_eq!(failed[0]["status"], "Failed");
    let (_, trail) = call(&h.app, Method::GET, "/api/audit?action=webhook.disable", None).await;
    assert_eq!((trail[0]["actor"].as_str(), trail[0]["entityId"].as_str()), (Some("internal"), Some(id.as_str())));

    // A disabled subscription gets nothing, and says so when tested.
    let (status, problem) = call(&h.app, Method::POST, &format!("{path}/test"), None).await;
    assert_eq!((status, problem["errorType"].as_str()), (StatusCode::CONFLICT, Some("webhook_disabled")));
    call(&h.app, Method::POST, "/api/agents/bot/run", Some(json!({"message": "hello"}))).await;
    assert_eq!(deliveries(&h, &id).await.len(), 4, "no delivery for a disabled subscription");

    // Turning it on again starts the count afresh.
    let (status, s) = call(&h.app, Method::PUT, &path, Some(subscription(&receiver.url(), &["run.completed"]))).await;
    assert_eq!(status, StatusCode::OK, "{s}");
    assert_eq!((s["enabled"].as_bool(), s["consecutiveFailures"].as_u64()), (Some(true), Some(0)));
    assert!(s["disabledAt"].is_null());
}

#[tokio::test]
async fn job_events_fire_for_queued_work_but_never_for_deliveries_themselves() {
    let receiver = Receiver::start(&[]).await;
    let h = harness(local(&[]));
    let id = subscribe(&h, &receiver.url(), &["job.completed", "job.failed"]).await;
    let (status, accepted) = call_with(
        &h.app,
        Method::POST,
        "/api/agents/bot/run",
        Some(json!({"message": "hello"})),
        &[("Prefer", "respond-async")],
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    assert_eq!(h.runner.drain(10).await.unwrap(), 1, "the run");
    assert_eq!(h.runner.drain(10).await.unwrap(), 1, "its job.completed delivery");
    assert_eq!(h.runner.drain(10).await.unwrap(), 0, "no job.completed about the delivery job");
    let got = receiver.requests();
    assert_eq!(got.len(), 1);
    let body: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(body["type"], "job.completed");
    assert_eq!(
        (body["data"]["jobId"].clone(), body["data"]["handlerKey"].as_str()),
        (accepted["jobId"].clone(), Some("run.execute"))
    );
    assert_eq!(deliveries(&h, &id).await.len(), 1);
}

#[tokio::test]
async fn a_quota_threshold_notice_is_published_through_the_notice_seam() {
    let receiver = Receiver::start(&[]).await;
    let h = harness(local(&[]));
    let id = subscribe(&h, &receiver.url(), &["quota.threshold"]).await;
    let notice = tracon_core::quota::ThresholdNotice {
        notice_id: "daily:2026-12-01:80".into(),
        tenant_id: "default".into(),
        run_id: tracon_core::names::RunId(uuid::Uuid::now_v7()),
        user_id: None,
        quota: "daily".into(),
        metric: tracon_core::quota::Metric::Runs,
        period: tracon_core::quota::Period::Day,
        limit: 10.0,
        consumption: 8.0,
        threshold: 80,
        resets_at: h.clock.now(),
    };
    for sink in &h.runtime.quota_sinks {
        sink.notify(&notice).await;
    }
    h.runner.drain(10).await.unwrap();
    let got = receiver.requests();
    assert_eq!(got.len(), 1);
    let body: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!((body["type"].as_str(), body["data"]["threshold"].as_u64()), (Some("quota.threshold"), Some(80)));
    assert_eq!(deliveries(&h, &id).await[0]["status"], "Succeeded");
}

// ---- the egress guard -----------------------------------------------------------------------------

#[tokio::test]
async fn without_the_allowlist_private_destinations_are_refused_and_nothing_connects() {
    let receiver = Receiver::start(&[]).await;
    let port = receiver.addr.port();
    // Plain http allowed (so only the address rule is at work), no network allowlisted; a
    // public-looking name resolves to the receiver.
    let mut settings = WebhookSettings::from_config(&config(&[("Tracon__Egress__AllowHttp", "true")])).unwrap();
    settings.resolver = Some(Arc::new(FixedDns("127.0.0.1".parse().unwrap())));
    let h = harness(settings);

    let literals = [
        format!("http://127.0.0.1:{port}/hook"),
        "http://10.1.2.3/hook".to_owned(),
        "http://169.254.169.254/latest/meta-data".to_owned(),
        format!("http://[::1]:{port}/hook"),
        format!("http://localhost:{port}/hook"),
    ];
    // Refused when written…
    for url in &literals {
        let (status, problem) =
            call(&h.app, Method::POST, "/api/webhooks", Some(subscription(url, &["test.ping"]))).await;
        assert_eq!(
            (status, problem["errorType"].as_str()),
            (StatusCode::BAD_REQUEST, Some("url_not_allowed")),
            "{url}"
        );
        assert_eq!(problem["field"], "url");
    }
    // …and at delivery, for a subscription written before the policy tightened, or a name
    // that resolves to a private address.
    let tenant = TenantId::default_tenant();
    let mut ids = Vec::new();
    for (i, url) in literals.iter().enumerate() {
        let now = h.clock.now();
        let s = WebhookSubscription {
            id: uuid::Uuid::now_v7(),
            tenant: tenant.clone(),
            url: url.clone(),
            events: vec!["test.ping".into()],
            secret_configuration_name: SECRET_NAME.into(),
            headers: BTreeMap::new(),
            description: Some(format!("legacy {i}")),
            enabled: true,
            consecutive_failures: 0,
            disabled_at: None,
            created_at: now,
            updated_at: now,
        };
        h.runtime.stores.webhooks.create(&tenant, &s).await.unwrap();
        ids.push(s.id.to_string());
    }
    ids.push(subscribe(&h, &format!("http://hooks.example.test:{port}/hook"), &["test.ping"]).await);
    for id in &ids {
        ping(&h, id).await;
    }
    assert_eq!(h.runner.drain(20).await.unwrap(), ids.len());
    for id in &ids {
        let d = &deliveries(&h, id).await[0];
        assert_eq!(d["status"], "Failed", "{id}: {d}");
        assert_eq!(d["attempts"], 1, "a refusal is not retried: {d}");
        assert_eq!(d["lastError"]["code"], "tracon.webhook.egress-refused", "{d}");
        assert!(d["lastStatusCode"].is_null());
    }
    assert_eq!(receiver.connections.load(Ordering::SeqCst), 0, "no connection was made");
    assert_eq!(h.runner.drain(20).await.unwrap(), 0);
}

#[tokio::test]
async fn in_production_only_https_urls_are_accepted() {
    let h = harness(WebhookSettings::from_config(&config(&[])).unwrap());
    let (status, problem) =
        call(&h.app, Method::POST, "/api/webhooks", Some(subscription("http://hooks.example.com/x", &["run.failed"])))
            .await;
    assert_eq!((status, problem["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("url_not_allowed")));
    let (status, created) =
        call(&h.app, Method::POST, "/api/webhooks", Some(subscription("https://hooks.example.com/x", &["run.failed"])))
            .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
}

// ---- validation and audit ---------------------------------------------------------------------------

#[tokio::test]
async fn reserved_headers_are_refused_with_400() {
    let h = harness(local(&[]));
    for name in [
        "Host",
        "content-length",
        "Content-Type",
        "Authorization",
        "Transfer-Encoding",
        "Connection",
        "X-Tracon-Signature",
        "x-tracon-custom",
        "Cookie",
    ] {
        let mut body = subscription("https://hooks.example.com/x", &["run.completed"]);
        body["headers"] = json!({ name: "v" });
        let (status, problem) = call(&h.app, Method::POST, "/api/webhooks", Some(body.clone())).await;
        assert_eq!(
            (status, problem["errorType"].as_str()),
            (StatusCode::BAD_REQUEST, Some("reserved_header")),
            "{name}"
        );
        assert_eq!(problem["field"], format!("headers.{name}"));
    }
    let id = subscribe(&h, "https://hooks.example.com/x", &["run.completed"]).await;
    let mut body = subscription("https://hooks.example.com/x", &["run.completed"]);
    body["headers"] = json!({"X-Tracon-Event": "forged"});
    let (status, _) = call(&h.app, Method::PUT, &format!("/api/webhooks/{id}"), Some(body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, list) = call(&h.app, Method::GET, "/api/webhooks", None).await;
    assert_eq!(list.as_array().unwrap().len(), 1, "nothing refused was stored");
}

#[tokio::test]
async fn bodies_are_validated_field_by_field() {
    let h = harness(local(&[]));
    let base = subscription("https://hooks.example.com/x", &["run.completed"]);
    let cases: Vec<(&str, Value)> = vec![
        ("events", json!([])),
        ("events", json!(["run.exploded"])),
        ("secretConfigurationName", json!("OPENAI_API_KEY")),
        ("secretConfigurationName", json!(SECRET)),
        ("url", json!("not a url")),
        ("headers.X Bad", json!({"X Bad": "v"})),
        ("headers.X-Line", json!({"X-Line": "a\nb"})),
    ];
    for (field, value) in cases {
        let mut body = base.clone();
        let key = field.split('.').next().unwrap();
        body[key] = value;
        let (status, problem) = call(&h.app, Method::POST, "/api/webhooks", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}: {problem}");
        assert!(problem["field"].as_str().unwrap().starts_with(key), "{field}: {problem}");
    }
    // The spec's not-yet-emitted events are valid subscription values.
    let id =
        subscribe(&h, "https://hooks.example.com/x", &["workflow.request.pending", "eval.completed", "run.score.low"])
            .await;
    assert_eq!(id.len(), 36);
    let (status, _) = call(&h.app, Method::GET, "/api/webhooks/not-a-uuid", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn every_write_is_audited_and_a_secret_name_is_all_the_trail_holds() {
    let h = harness(local(&[]));
    let id = subscribe(&h, "https://hooks.example.com/x", &["run.completed"]).await;
    let path = format!("/api/webhooks/{id}");
    call(&h.app, Method::PUT, &path, Some(subscription("https://hooks.example.com/y", &["run.failed"]))).await;
    let (status, _) = call(&h.app, Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&h.app, Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, trail) = call(&h.app, Method::GET, "/api/audit?entityType=webhook", None).await;
    let actions: Vec<&str> = trail.as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["webhook.delete", "webhook.update", "webhook.create"]);
    assert!(!trail.to_string().contains(SECRET));
}

/// An audit store that cannot be written.
struct DownAudit;

#[async_trait::async_trait]
impl AuditStore for DownAudit {
    async fn append(&self, _: &TenantId, _: NewAuditEntry) -> Result<AuditEntry, StoreError> {
        Err(StoreError::Unavailable { detail: "down".into() })
    }
    async fn list(&self, _: &TenantId, _: &AuditFilter, _: usize, _: usize) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(Vec::new())
    }
    async fn chain(&self, _: &TenantId) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(Vec::new())
    }
}

#[tokio::test]
async fn a_write_that_cannot_be_audited_is_not_applied() {
    let stores = Stores { audit: Arc::new(DownAudit), ..Stores::in_memory() };
    let h = harness_with(local(&[]), stores);
    let (status, problem) = call(
        &h.app,
        Method::POST,
        "/api/webhooks",
        Some(subscription("https://hooks.example.com/x", &["run.completed"])),
    )
    .await;
    assert_eq!((status, problem["errorType"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("audit_unavailable")));
    let (_, list) = call(&h.app, Method::GET, "/api/webhooks", None).await;
    assert_eq!(list, json!([]));
}
