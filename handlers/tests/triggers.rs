//! Inbound triggers through the router on the memory stores: management (scope
//! `TriggersAdmin`, audited before applied) and the unauthenticated, signed accept endpoint.
//! Requests are signed by an independent signer — Python's `hmac` module — not by the code
//! under test.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use futures::StreamExt;
use serde_json::{Value, json};
use support::{Manual, Unwritable};
use tower::ServiceExt;
use tracon_core::config::Config;
use tracon_core::definition::AgentDefinition;
use tracon_core::jobs::{JobHandler, JobRunner, JobSettings};
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::names::TenantId;
use tracon_core::ports::tokio_rt;
use tracon_core::runs::queued::QueuedRuns;
use tracon_core::runtime::RunQueue;
use tracon_core::runtime::RuntimeBuilder;
use tracon_core::stores::Stores;
use tracon_handlers::triggers::settings::TriggerSettings;
use tracon_handlers::{AppState, HttpSettings, PeerAddr};

const TOKEN: &str = "a-long-enough-test-token";
const SECRET: &str = "whsec_slack_test_secret";

struct Harness {
    app: Router,
    runner: JobRunner,
    state: AppState,
}

struct Options {
    consumer: bool,
    config: Vec<(&'static str, &'static str)>,
    stores: Option<Stores>,
}

impl Default for Options {
    fn default() -> Self {
        Self { consumer: true, config: Vec::new(), stores: None }
    }
}

fn harness(options: Options) -> Harness {
    // The model echoes what the run was asked, so a test sees which message arrived.
    let script = ScriptedProvider::from_fn("script", |req| {
        ScriptedTurn::text(&format!("Handled: {}", req.last_user_text().unwrap_or_default())).with_usage(5, 3)
    });
    let mut builder = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_agent(AgentDefinition::new("support", "script", "m"));
    if let Some(stores) = options.stores {
        builder = builder.stores(stores);
    }
    let runtime = Arc::new(builder.build().unwrap());
    let handlers: Vec<Arc<dyn JobHandler>> = vec![Arc::new(QueuedRuns { runtime: runtime.clone() })];
    let runner = JobRunner::new(
        runtime.stores.jobs.clone(),
        handlers,
        runtime.platform.clock.clone(),
        JobSettings::default(),
        "test",
    );
    let mut config = vec![
        ("Tracon__TriggerSecrets__Slack", SECRET),
        ("Tracon__TriggerSecrets__Other", "whsec_other_trigger_secret"),
    ];
    config.extend(options.config);
    let triggers = TriggerSettings::from_config(&Config::from_pairs(config)).unwrap();
    let http = HttpSettings { triggers, ..HttpSettings::with_token(TOKEN) };
    if options.consumer {
        runtime.set_queue(RunQueue { transport: Arc::new(Manual), max_attempts: 3 });
    }
    let state = AppState::new(runtime, http);
    Harness { app: tracon_handlers::router(state.clone()), runner, state }
}

/// The address the tests' requests come from.
const SENDER: [u8; 4] = [203, 0, 113, 7];

fn remote() -> PeerAddr {
    PeerAddr(std::net::SocketAddr::from((SENDER, 40000)))
}

/// Another sender's address.
const ANOTHER_SENDER: [u8; 4] = [198, 51, 100, 23];

/// A trigger of `tenant` put straight into the store (the static token acts for the default
/// tenant only; stored as an older release could have stored it).
async fn store_trigger(state: &AppState, tenant: &str, name: &str, secret_name: &str) {
    let at = chrono::Utc::now();
    let record = tracon_core::triggers::TriggerRecord {
        name: tracon_core::triggers::TriggerName::parse(name).unwrap(),
        target_kind: tracon_core::triggers::TargetKind::Agent,
        target_name: "support".into(),
        signing_secret_configuration_name: secret_name.into(),
        payload_mode: tracon_core::triggers::PayloadMode::WholeBody,
        payload_path: None,
        enabled: true,
        created_at: at,
        updated_at: at,
    };
    state.runtime.stores.triggers.put(&TenantId::parse(tenant).unwrap(), &record).await.unwrap();
}

/// An API key of `tenant` with `TriggersAdmin`, put straight into the store.
async fn admin_key(state: &AppState, tenant: &str) -> String {
    support::api_key(&state.runtime, tenant, &[tracon_core::keys::Scope::TriggersAdmin], None).await
}

/// `PUT /api/triggers/{name}` with `bearer`.
async fn put_as(app: &Router, bearer: &str, name: &str, body: Value) -> (StatusCode, Value) {
    let call = support::call(Method::PUT, &format!("/api/triggers/{name}")).from(SENDER).bearer(bearer);
    let reply = call.json(Some(body)).send(app).await;
    (reply.status, json_of(&reply.body))
}

/// A management call with the static token.
async fn call(app: &Router, method: Method, path: &str, body: Option<Value>) -> (StatusCode, HeaderMap, Value) {
    let reply = support::call(method, path).from(SENDER).bearer(TOKEN).json(body).send(app).await;
    (reply.status, reply.headers.clone(), reply.json())
}

/// `sha256=<hex>` of `"{timestamp}.{body}"`, computed by Python's `hmac` module.
fn python_sign(secret: &str, timestamp: &str, body: &[u8]) -> String {
    let script = "import hashlib, hmac, sys\n\
                  body = sys.stdin.buffer.read()\n\
                  mac = hmac.new(sys.argv[1].encode(), sys.argv[2].encode() + b'.' + body, hashlib.sha256)\n\
                  sys.stdout.write('sha256=' + mac.hexdigest())";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script, secret, timestamp])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("these tests sign with python3's hmac module: install python3 and put it on PATH");
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "python3 failed to sign");
    String::from_utf8(out.stdout).unwrap()
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// A raw accept request: no Authorization header, whatever headers the case needs.
struct Accept<'a> {
    path: &'a str,
    body: &'a [u8],
    timestamp: Option<String>,
    signature: Option<String>,
}

impl<'a> Accept<'a> {
    /// Signed now with `secret`.
    fn signed(path: &'a str, body: &'a [u8], secret: &str) -> Self {
        let ts = now().to_string();
        let signature = python_sign(secret, &ts, body);
        Self { path, body, timestamp: Some(ts), signature: Some(signature) }
    }

    async fn send(&self, app: &Router) -> (StatusCode, HeaderMap, Vec<u8>) {
        self.send_from(app, Some(SENDER)).await
    }

    /// Sent from `peer` (`None`: a host that does not know the client's address).
    async fn send_from(&self, app: &Router, peer: Option<[u8; 4]>) -> (StatusCode, HeaderMap, Vec<u8>) {
        let call = support::call(Method::POST, self.path).from(peer);
        let call = call.header_opt("X-Tracon-Timestamp", self.timestamp.as_deref());
        let call = call.header_opt("X-Tracon-Signature", self.signature.as_deref());
        let reply = call.bytes("application/json", self.body.to_vec()).send(app).await;
        (reply.status, reply.headers, reply.body)
    }
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or(Value::Null)
}

async fn define(app: &Router, name: &str, body: Value) {
    let (status, _, doc) = call(app, Method::PUT, &format!("/api/triggers/{name}"), Some(body)).await;
    assert!(status == StatusCode::CREATED || status == StatusCode::OK, "{status} {doc}");
}

fn slack(mode: &str, path: Option<&str>) -> Value {
    let mut v = json!({
        "targetKind": "agent",
        "targetName": "support",
        "signingSecretConfigurationName": "Tracon:TriggerSecrets:Slack",
        "payloadMode": mode,
    });
    if let Some(p) = path {
        v["payloadPath"] = json!(p);
    }
    v
}

async fn job_count(app: &Router) -> usize {
    call(app, Method::GET, "/api/jobs", None).await.2.as_array().map_or(0, Vec::len)
}

// ---- accepting ------------------------------------------------------------------------------

#[tokio::test]
async fn a_signed_event_is_accepted_202_and_its_queued_run_completes() {
    let h = harness(Options::default());
    define(&h.app, "slack", slack("wholeBody", None)).await;
    let body = br#"{"event":{"text":"Reset my password"}}"#;
    let (status, headers, bytes) = Accept::signed("/api/triggers/default/slack", body, SECRET).send(&h.app).await;
    let accepted = json_of(&bytes);
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let run_id = accepted["runId"].as_str().unwrap().to_owned();
    let mut keys: Vec<&str> = accepted.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["eventsLocation", "jobId", "location", "runId"]);
    assert_eq!(headers[header::LOCATION], format!("/api/runs/{run_id}"));
    assert_eq!(accepted["location"], format!("/api/runs/{run_id}"));
    assert_eq!(accepted["eventsLocation"], format!("/api/runs/{run_id}/events"));

    let (_, _, run) = call(&h.app, Method::GET, &format!("/api/runs/{run_id}"), None).await;
    assert_eq!((run["status"].as_str(), run["labels"]["trigger"].as_str()), (Some("Queued"), Some("slack")));
    let (_, _, input) = call(&h.app, Method::GET, &format!("/api/runs/{run_id}/input"), None).await;
    assert_eq!(input["message"], std::str::from_utf8(body).unwrap(), "the whole body, verbatim");

    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let (_, _, run) = call(&h.app, Method::GET, &format!("/api/runs/{run_id}"), None).await;
    assert_eq!(run["status"], "Completed", "{run}");
    let job_id = accepted["jobId"].as_str().unwrap();
    let (_, _, job) = call(&h.app, Method::GET, &format!("/api/jobs/{job_id}"), None).await;
    assert_eq!((job["status"].as_str(), job["runId"].as_str()), (Some("Succeeded"), Some(run_id.as_str())));
}

#[tokio::test]
async fn every_authentication_failure_answers_the_same_401_bytes_and_starts_nothing() {
    let h = harness(Options::default());
    define(&h.app, "slack", slack("wholeBody", None)).await;
    let mut off = slack("wholeBody", None);
    off["enabled"] = json!(false);
    define(&h.app, "disabled", off).await;
    let mut unset = slack("wholeBody", None);
    unset["signingSecretConfigurationName"] = json!("Tracon:TriggerSecrets:NeverSet");
    define(&h.app, "unset", unset).await;

    let body: &[u8] = br#"{"event":{"text":"hi"}}"#;
    let good = Accept::signed("/api/triggers/default/slack", body, SECRET);
    let sig = good.signature.clone().unwrap();
    let ts = good.timestamp.clone().unwrap();
    let with = |timestamp: Option<String>, signature: Option<String>| Accept {
        path: "/api/triggers/default/slack",
        body,
        timestamp,
        signature,
    };
    let stale = (now() - 400).to_string();
    let future = (now() + 400).to_string();
    let cases: Vec<(&str, Accept<'_>)> = vec![
        ("unknown tenant", Accept::signed("/api/triggers/nobody/slack", body, SECRET)),
        ("malformed tenant", Accept::signed("/api/triggers/no%20body/slack", body, SECRET)),
        ("unknown trigger", Accept::signed("/api/triggers/default/nothing", body, SECRET)),
        ("disabled trigger", Accept::signed("/api/triggers/default/disabled", body, SECRET)),
        ("secret has no value", Accept::signed("/api/triggers/default/unset", body, "")),
        ("no signature", with(Some(ts.clone()), None)),
        ("empty signature", with(Some(ts.clone()), Some(String::new()))),
        ("bare prefix", with(Some(ts.clone()), Some("sha256=".into()))),
        ("truncated signature", with(Some(ts.clone()), Some(sig[..sig.len() - 2].to_owned()))),
        ("one hex digit short", with(Some(ts.clone()), Some(sig[..sig.len() - 1].to_owned()))),
        ("garbled signature", with(Some(ts.clone()), Some(format!("sha256={}", "zz".repeat(32))))),
        ("another scheme", with(Some(ts.clone()), Some(sig.replace("sha256=", "sha1=")))),
        ("wrong secret", Accept::signed("/api/triggers/default/slack", body, "whsec_not_the_secret")),
        ("another trigger's secret", Accept::signed("/api/triggers/default/slack", body, "whsec_other_trigger_secret")),
        ("no timestamp", with(None, Some(sig.clone()))),
        ("garbled timestamp", with(Some("yesterday".into()), Some(sig.clone()))),
        ("timestamp not the signed one", with(Some((ts.parse::<i64>().unwrap() - 1).to_string()), Some(sig.clone()))),
        ("stale, signed", with(Some(stale.clone()), Some(python_sign(SECRET, &stale, body)))),
        ("future, signed", with(Some(future.clone()), Some(python_sign(SECRET, &future, body)))),
        ("another body", Accept { path: "/api/triggers/default/slack", body: b"{}", ..with(Some(ts), Some(sig)) }),
    ];
    let mut first: Option<Vec<u8>> = None;
    for (case, request) in &cases {
        let (status, headers, bytes) = request.send(&h.app).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{case}: {}", String::from_utf8_lossy(&bytes));
        assert_eq!(headers[header::CONTENT_TYPE], "application/problem+json", "{case}");
        assert!(headers.get(header::WWW_AUTHENTICATE).is_none(), "{case}: no bearer challenge");
        match &first {
            None => first = Some(bytes),
            Some(expected) => assert_eq!(&bytes, expected, "{case}: the 401 differs"),
        }
    }
    let doc = json_of(first.as_deref().unwrap());
    assert_eq!((doc["errorType"].as_str(), doc["status"].as_u64()), (Some("unauthorized"), Some(401)));
    assert_eq!(job_count(&h.app).await, 0, "nothing was queued");
    // The good request still works afterwards: none of the failures consumed anything.
    assert_eq!(good.send(&h.app).await.0, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_replayed_signature_is_409_and_starts_no_second_run() {
    let h = harness(Options::default());
    define(&h.app, "slack", slack("wholeBody", None)).await;
    let request = Accept::signed("/api/triggers/default/slack", br#"{"n":1}"#, SECRET);
    assert_eq!(request.send(&h.app).await.0, StatusCode::ACCEPTED);
    let (status, _, bytes) = request.send(&h.app).await;
    assert_eq!((status, json_of(&bytes)["errorType"].as_str()), (StatusCode::CONFLICT, Some("trigger_replayed")));
    assert_eq!(request.send(&h.app).await.0, StatusCode::CONFLICT);
    h.runner.drain(10).await.unwrap();
    let (_, _, runs) = call(&h.app, Method::GET, "/api/runs", None).await;
    assert_eq!(runs.as_array().unwrap().len(), 1, "exactly one run: {runs}");
    assert_eq!(job_count(&h.app).await, 1);
    // A genuine retry carries a fresh signature (another body here: a fresh timestamp may
    // fall in the same second) and starts its own run.
    let retry = Accept::signed("/api/triggers/default/slack", br#"{"n":2}"#, SECRET);
    assert_eq!(retry.send(&h.app).await.0, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_before_it_is_read_to_the_end() {
    let h = harness(Options { config: vec![("Tracon__InboundTriggers__MaxBodyBytes", "1024")], ..Options::default() });
    define(&h.app, "slack", slack("wholeBody", None)).await;

    // Declared too large: refused from the header alone.
    let big = vec![b'x'; 1025];
    let (status, _, bytes) = Accept::signed("/api/triggers/default/slack", &big, SECRET).send(&h.app).await;
    assert_eq!(
        (status, json_of(&bytes)["errorType"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );

    // Streamed with no length: a body that would be 64 MB is dropped once past the limit.
    const CHUNK: usize = 256;
    let produced = Arc::new(AtomicUsize::new(0));
    let counter = produced.clone();
    let stream = futures::stream::iter(0..262_144).map(move |_| {
        counter.fetch_add(CHUNK, Ordering::SeqCst);
        Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b'y'; CHUNK]))
    });
    let req = Request::builder()
        .method(Method::POST)
        .uri("/api/triggers/default/slack")
        .extension(remote())
        .header("X-Tracon-Timestamp", now().to_string())
        .header("X-Tracon-Signature", format!("sha256={}", "0".repeat(64)))
        .body(Body::from_stream(stream))
        .unwrap();
    let res = h.app.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let read = produced.load(Ordering::SeqCst);
    assert!(read <= 1024 + 2 * CHUNK, "the server read {read} bytes of a 64 MB body");

    // At the limit is fine.
    let exact = vec![b'z'; 1024];
    assert_eq!(
        Accept::signed("/api/triggers/default/slack", &exact, SECRET).send(&h.app).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(job_count(&h.app).await, 1);
}

#[tokio::test]
async fn requests_over_the_per_trigger_limit_get_429_with_retry_after() {
    let h =
        harness(Options { config: vec![("Tracon__InboundTriggers__MaxRequestsPerMinute", "3")], ..Options::default() });
    define(&h.app, "slack", slack("wholeBody", None)).await;
    for i in 0..3 {
        let body = format!("{{\"n\":{i}}}");
        let request = Accept::signed("/api/triggers/default/slack", body.as_bytes(), SECRET);
        assert_eq!(request.send(&h.app).await.0, StatusCode::ACCEPTED, "request {i}");
    }
    let request = Accept::signed("/api/triggers/default/slack", b"{\"n\":3}", SECRET);
    let (status, headers, bytes) = request.send(&h.app).await;
    assert_eq!((status, json_of(&bytes)["errorType"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("rate_limited")));
    let retry: u64 = headers[header::RETRY_AFTER].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(job_count(&h.app).await, 3);
    // The limit is per trigger: another name has its own budget (and answers 401 here).
    let other = Accept::signed("/api/triggers/default/other", b"{}", SECRET);
    assert_eq!(other.send(&h.app).await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn path_mode_takes_one_field_and_a_missing_field_is_400() {
    let h = harness(Options::default());
    define(&h.app, "slack", slack("path", Some("event.text"))).await;
    let (status, _, bytes) =
        Accept::signed("/api/triggers/default/slack", br#"{"event":{"user":"u1"}}"#, SECRET).send(&h.app).await;
    let doc = json_of(&bytes);
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("payload_not_found")), "{doc}");
    assert!(doc["detail"].as_str().unwrap().contains("event.text"));
    assert!(!doc.to_string().contains(SECRET) && !doc.to_string().contains("u1"));
    assert_eq!(job_count(&h.app).await, 0);

    let (status, _, bytes) =
        Accept::signed("/api/triggers/default/slack", br#"{"event":{"text":"Reset my password"}}"#, SECRET)
            .send(&h.app)
            .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let run_id = json_of(&bytes)["runId"].as_str().unwrap().to_owned();
    h.runner.drain(10).await.unwrap();
    let (_, _, input) = call(&h.app, Method::GET, &format!("/api/runs/{run_id}/input"), None).await;
    assert_eq!(input["message"], "Reset my password");
    let (_, _, run) = call(&h.app, Method::GET, &format!("/api/runs/{run_id}"), None).await;
    assert_eq!(run["status"], "Completed");
}

#[tokio::test]
async fn without_a_job_consumer_a_verified_request_is_503_and_nothing_is_queued() {
    let h = harness(Options { consumer: false, ..Options::default() });
    define(&h.app, "slack", slack("wholeBody", None)).await;
    let request = Accept::signed("/api/triggers/default/slack", b"{}", SECRET);
    let (status, _, bytes) = request.send(&h.app).await;
    assert_eq!(
        (status, json_of(&bytes)["errorType"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("queue_unavailable"))
    );
    assert_eq!(job_count(&h.app).await, 0);
    // Unsigned requests still learn nothing more than 401.
    let unsigned = Accept { signature: None, ..Accept::signed("/api/triggers/default/slack", b"{}", SECRET) };
    assert_eq!(unsigned.send(&h.app).await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_tenant_comes_from_the_url_not_from_a_credential() {
    let h = harness(Options::default());
    // Tenant B's trigger, put in the store (the static token acts for the default tenant).
    let b = TenantId::parse("tenant-b").unwrap();
    let at = chrono::Utc::now();
    let record = tracon_core::triggers::TriggerRecord {
        name: tracon_core::triggers::TriggerName::parse("slack").unwrap(),
        target_kind: tracon_core::triggers::TargetKind::Agent,
        target_name: "support".into(),
        signing_secret_configuration_name: "Tracon:TriggerSecrets:Slack".into(),
        payload_mode: tracon_core::triggers::PayloadMode::WholeBody,
        payload_path: None,
        enabled: true,
        created_at: at,
        updated_at: at,
    };
    h.state.runtime.stores.triggers.put(&b, &record).await.unwrap();
    // The default tenant has no "slack": a bearer token changes nothing, still 401.
    let body: &[u8] = b"{\"x\":1}";
    let mut req = Accept::signed("/api/triggers/default/slack", body, SECRET);
    assert_eq!(req.send(&h.app).await.0, StatusCode::UNAUTHORIZED);
    req.path = "/api/triggers/tenant-b/slack";
    let (status, _, bytes) = req.send(&h.app).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{}", String::from_utf8_lossy(&bytes));
    // The run is tenant B's: the default tenant's token does not see it.
    let run_id = json_of(&bytes)["runId"].as_str().unwrap().to_owned();
    assert_eq!(call(&h.app, Method::GET, &format!("/api/runs/{run_id}"), None).await.0, StatusCode::NOT_FOUND);
    let run = h.state.runtime.stores.runs.get_run(&b, tracon_core::names::RunId::parse(&run_id).unwrap()).await;
    assert!(run.unwrap().is_some());
    // Management still needs credentials.
    let res = h
        .app
        .clone()
        .oneshot(Request::builder().uri("/api/triggers").extension(remote()).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn one_signed_request_starts_at_most_one_run_across_every_trigger_that_shares_its_secret() {
    // Two triggers of the default tenant name one key; a third, in another tenant, names a
    // key of its own partition that holds the same secret value.
    let h =
        harness(Options { config: vec![("Tracon__TriggerSecrets__tenant-b__Slack", SECRET)], ..Options::default() });
    define(&h.app, "t1", slack("wholeBody", None)).await;
    define(&h.app, "t2", slack("wholeBody", None)).await;
    store_trigger(&h.state, "tenant-b", "t3", "Tracon:TriggerSecrets:tenant-b:Slack").await;

    let body: &[u8] = br#"{"event":{"text":"captured once"}}"#;
    let first = Accept::signed("/api/triggers/default/t1", body, SECRET);
    let (status, _, bytes) = first.send(&h.app).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{}", String::from_utf8_lossy(&bytes));
    for path in ["/api/triggers/default/t2", "/api/triggers/tenant-b/t3", "/api/triggers/default/t1"] {
        let replay = Accept { path, body, timestamp: first.timestamp.clone(), signature: first.signature.clone() };
        let (status, _, bytes) = replay.send(&h.app).await;
        assert_eq!(
            (status, json_of(&bytes)["errorType"].as_str()),
            (StatusCode::CONFLICT, Some("trigger_replayed")),
            "{path}"
        );
    }
    assert_eq!(job_count(&h.app).await, 1, "one run in the default tenant");
    let b = TenantId::parse("tenant-b").unwrap();
    let theirs = h.state.runtime.stores.jobs.list(&b, &Default::default(), 0, 10).await.unwrap();
    assert!(theirs.is_empty(), "and none in tenant-b: {theirs:?}");
    // A fresh signature for the same body is a new request everywhere.
    let fresh = Accept::signed("/api/triggers/tenant-b/t3", br#"{"event":{"text":"a new one"}}"#, SECRET);
    assert_eq!(fresh.send(&h.app).await.0, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn forged_requests_never_use_up_a_triggers_limit_and_are_bounded_per_address() {
    let h = harness(Options {
        config: vec![
            ("Tracon__InboundTriggers__MaxRequestsPerMinute", "4"),
            ("Tracon__InboundTriggers__MaxUnverifiedRequestsPerMinute", "3"),
        ],
        ..Options::default()
    });
    define(&h.app, "slack", slack("wholeBody", None)).await;
    let forged = |n: usize| {
        let body = format!("{{\"forged\":{n}}}").into_bytes();
        let ts = now().to_string();
        (body, ts)
    };
    // An attacker at one address: three 401s, then 429 before any lookup or HMAC.
    let mut answers = Vec::new();
    for n in 0..8 {
        let (body, ts) = forged(n);
        let request = Accept {
            path: "/api/triggers/default/slack",
            body: &body,
            timestamp: Some(ts),
            signature: Some(format!("sha256={}", "ab".repeat(32))),
        };
        answers.push(request.send_from(&h.app, Some(SENDER)).await.0.as_u16());
    }
    assert_eq!(answers, [401, 401, 401, 429, 429, 429, 429, 429]);
    // The real sender, elsewhere, still has the trigger's whole budget.
    for n in 0..4 {
        let body = format!("{{\"real\":{n}}}");
        let request = Accept::signed("/api/triggers/default/slack", body.as_bytes(), SECRET);
        assert_eq!(request.send_from(&h.app, Some(ANOTHER_SENDER)).await.0, StatusCode::ACCEPTED, "real {n}");
    }
    // The trigger's own limit still holds for verified requests.
    let request = Accept::signed("/api/triggers/default/slack", b"{\"real\":4}", SECRET);
    let (status, headers, _) = request.send_from(&h.app, Some(ANOTHER_SENDER)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(headers.contains_key(header::RETRY_AFTER));
    assert_eq!(job_count(&h.app).await, 4);
}

#[tokio::test]
async fn without_a_known_address_forgeries_share_one_bucket_that_never_holds_up_a_valid_sender() {
    let h = harness(Options {
        config: vec![("Tracon__InboundTriggers__MaxUnverifiedRequestsPerMinute", "2")],
        ..Options::default()
    });
    define(&h.app, "slack", slack("wholeBody", None)).await;
    let mut answers = Vec::new();
    for _ in 0..4 {
        let request = Accept {
            signature: Some(format!("sha256={}", "cd".repeat(32))),
            ..Accept::signed("/api/triggers/default/slack", b"{}", SECRET)
        };
        answers.push(request.send_from(&h.app, None).await.0.as_u16());
    }
    assert_eq!(answers, [401, 401, 429, 429]);
    let valid = Accept::signed("/api/triggers/default/slack", b"{\"ok\":true}", SECRET);
    assert_eq!(valid.send_from(&h.app, None).await.0, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_tenant_names_secret_keys_only_in_its_own_partition_or_under_a_grant() {
    let h = harness(Options {
        config: vec![
            ("Tracon__TriggerSecrets__acme__Slack", "whsec_acme"),
            ("Tracon__InboundTriggers__TenantPrefixes__globex", "Shared:Globex:"),
        ],
        ..Options::default()
    });
    let acme = admin_key(&h.state, "acme").await;
    let with_secret = |name: &str| {
        let mut body = slack("wholeBody", None);
        body["signingSecretConfigurationName"] = json!(name);
        body
    };
    // acme cannot name the default tenant's key, nor another tenant's, nor nest deeper.
    for foreign in
        ["Tracon:TriggerSecrets:Slack", "Tracon:TriggerSecrets:globex:Slack", "Tracon:TriggerSecrets:acme:eu:Slack"]
    {
        let (status, doc) = put_as(&h.app, &acme, "hook", with_secret(foreign)).await;
        assert_eq!(
            (status, doc["errorType"].as_str()),
            (StatusCode::BAD_REQUEST, Some("validation_failed")),
            "{foreign}: {doc}"
        );
        assert_eq!(doc["field"], "signingSecretConfigurationName");
        assert_eq!(doc["allowedPrefix"], "Tracon:TriggerSecrets:acme:", "{doc}");
        assert!(doc["detail"].as_str().unwrap().contains("'Tracon:TriggerSecrets:acme:'"), "{doc}");
    }
    let (status, doc) = put_as(&h.app, &acme, "hook", with_secret("Tracon__TriggerSecrets__acme__Slack")).await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");
    assert_eq!(doc["signingSecretConfigurationName"], "Tracon:TriggerSecrets:acme:Slack");
    // The default tenant cannot reach into acme's partition.
    let (status, _, doc) =
        call(&h.app, Method::PUT, "/api/triggers/hook", Some(with_secret("Tracon:TriggerSecrets:acme:Slack"))).await;
    assert_eq!((status, doc["allowedPrefix"].as_str()), (StatusCode::BAD_REQUEST, Some("Tracon:TriggerSecrets:")));
    // The operator's grant is globex's only, and the only way outside the partition.
    let globex = admin_key(&h.state, "globex").await;
    assert_eq!(put_as(&h.app, &globex, "hook", with_secret("Shared:Globex:Slack")).await.0, StatusCode::CREATED);
    assert_eq!(put_as(&h.app, &acme, "other", with_secret("Shared:Globex:Slack")).await.0, StatusCode::BAD_REQUEST);
    // acme's trigger verifies with acme's secret, not the default tenant's.
    let body: &[u8] = b"{\"x\":1}";
    let (status, _, _) = Accept::signed("/api/triggers/acme/hook", body, SECRET).send(&h.app).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, bytes) = Accept::signed("/api/triggers/acme/hook", body, "whsec_acme").send(&h.app).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{}", String::from_utf8_lossy(&bytes));
}

#[tokio::test]
async fn a_record_saved_before_the_partition_keeps_working_for_its_tenant_and_is_reported() {
    let h = harness(Options::default());
    // Saved by an older release: tenant acme names the default tenant's key.
    store_trigger(&h.state, "acme", "legacy", "Tracon:TriggerSecrets:Slack").await;
    define(&h.app, "fine", slack("wholeBody", None)).await;
    let runtime = &h.state.runtime;
    let found = tracon_core::setup::report_foreign_references(
        &runtime.stores,
        &h.state.http.triggers.secret_names,
        &runtime.webhooks.secret_names,
    )
    .await
    .unwrap();
    let reported: Vec<(&str, &str, &str)> =
        found.iter().map(|(kind, r)| (*kind, r.tenant.as_str(), r.record.as_str())).collect();
    assert_eq!(reported, [("trigger", "acme", "legacy")]);
    // It still verifies for acme,
    let (status, _, _) = Accept::signed("/api/triggers/acme/legacy", b"{}", SECRET).send(&h.app).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // acme may re-save it with the name it has, but not move it to another foreign name.
    let acme = admin_key(&h.state, "acme").await;
    let mut body = slack("wholeBody", None);
    body["enabled"] = json!(false);
    let (status, doc) = put_as(&h.app, &acme, "legacy", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    body["signingSecretConfigurationName"] = json!("Tracon:TriggerSecrets:Other");
    assert_eq!(put_as(&h.app, &acme, "legacy", body).await.0, StatusCode::BAD_REQUEST);
}

// ---- management -----------------------------------------------------------------------------

#[tokio::test]
async fn triggers_are_defined_read_replaced_and_deleted_with_audit_entries() {
    let h = harness(Options::default());
    let (status, headers, created) =
        call(&h.app, Method::PUT, "/api/triggers/slack", Some(slack("wholeBody", None))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(headers[header::LOCATION], "/api/triggers/slack");
    assert_eq!(created["name"], "slack");
    assert_eq!(created["enabled"], true, "enabled by default");
    assert_eq!(created["payloadMode"], "wholeBody");
    assert_eq!(created["acceptPath"], "/api/triggers/default/slack");
    assert_eq!(created["signingSecretConfigurationName"], "Tracon:TriggerSecrets:Slack");
    assert!(!created.to_string().contains(SECRET));

    // The `__` spelling is accepted and stored in the `:` spelling.
    let mut body = slack("path", Some("event.text"));
    body["signingSecretConfigurationName"] = json!("Tracon__TriggerSecrets__Slack");
    body["enabled"] = json!(false);
    let (status, _, replaced) = call(&h.app, Method::PUT, "/api/triggers/slack", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{replaced}");
    assert_eq!(replaced["signingSecretConfigurationName"], "Tracon:TriggerSecrets:Slack");
    assert_eq!((replaced["payloadPath"].as_str(), replaced["enabled"].as_bool()), (Some("event.text"), Some(false)));
    assert_eq!(replaced["createdAt"], created["createdAt"]);

    let (_, _, one) = call(&h.app, Method::GET, "/api/triggers/slack", None).await;
    assert_eq!(one, replaced);
    define(&h.app, "alpha", slack("wholeBody", None)).await;
    let (_, _, list) = call(&h.app, Method::GET, "/api/triggers", None).await;
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alpha", "slack"]);

    assert_eq!(call(&h.app, Method::DELETE, "/api/triggers/slack", None).await.0, StatusCode::NO_CONTENT);
    let (status, _, doc) = call(&h.app, Method::GET, "/api/triggers/slack", None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("trigger_not_found")));
    assert_eq!(call(&h.app, Method::DELETE, "/api/triggers/slack", None).await.0, StatusCode::NOT_FOUND);

    let (_, _, trail) = call(&h.app, Method::GET, "/api/audit?entityType=trigger&entityId=slack", None).await;
    let actions: Vec<&str> = trail.as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["trigger.delete", "trigger.update", "trigger.create"], "{trail}");
    assert!(trail.as_array().unwrap().iter().all(|e| e["actor"] == "token"));
    assert!(!trail.to_string().contains(SECRET));
}

#[tokio::test]
async fn bad_definitions_are_400_naming_the_field_and_never_echo_a_secret() {
    let h = harness(Options::default());
    let pasted = "whsec_pasted_by_mistake_123";
    let with = |k: &str, v: Value| {
        let mut b = slack("wholeBody", None);
        b[k] = v;
        b
    };
    let mut no_path = slack("path", None);
    no_path.as_object_mut().unwrap().remove("payloadPath");
    let cases = vec![
        // A workflow target must name a workflow that exists (here, none does).
        (with("targetKind", json!("workflow")), "validation_failed", Some("targetName")),
        (with("targetKind", json!("robot")), "validation_failed", Some("targetKind")),
        (with("targetName", json!("Not An Agent")), "validation_failed", Some("targetName")),
        (with("targetName", json!("nobody")), "validation_failed", Some("targetName")),
        (
            with("signingSecretConfigurationName", json!(pasted)),
            "validation_failed",
            Some("signingSecretConfigurationName"),
        ),
        (
            with("signingSecretConfigurationName", json!("Tracon:Providers:OpenAI:ApiKey")),
            "validation_failed",
            Some("signingSecretConfigurationName"),
        ),
        (
            with("signingSecretConfigurationName", json!("Tracon:TriggerSecrets:")),
            "validation_failed",
            Some("signingSecretConfigurationName"),
        ),
        (no_path, "validation_failed", Some("payloadPath")),
        (slack("path", Some("event..text")), "validation_failed", Some("payloadPath")),
        (slack("wholeBody", Some("event.text")), "validation_failed", Some("payloadPath")),
        (with("payloadMode", json!("template")), "validation_failed", Some("payloadMode")),
        (with("secret", json!(pasted)), "validation_failed", None),
    ];
    for (body, error_type, field) in cases {
        let (status, _, doc) = call(&h.app, Method::PUT, "/api/triggers/slack", Some(body.clone())).await;
        assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some(error_type)), "{body}: {doc}");
        if let Some(field) = field {
            assert_eq!(doc["field"], field, "{body}: {doc}");
        }
        assert!(!doc.to_string().contains(pasted), "echoed a pasted secret: {doc}");
    }
    let (status, _, doc) = call(&h.app, Method::PUT, "/api/triggers/Bad%20Name", Some(slack("wholeBody", None))).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_trigger_name")));
    let (status, _, doc) = call(&h.app, Method::GET, "/api/triggers/UPPER", None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_trigger_name")));
    let (_, _, list) = call(&h.app, Method::GET, "/api/triggers", None).await;
    assert_eq!(list, json!([]), "nothing was written");
    let (_, _, trail) = call(&h.app, Method::GET, "/api/audit?entityType=trigger", None).await;
    assert_eq!(trail, json!([]), "refused writes are not audited");
}

#[tokio::test]
async fn a_write_that_cannot_be_audited_is_refused_and_not_applied() {
    let working = harness(Options::default());
    define(&working.app, "slack", slack("wholeBody", None)).await;
    let mut stores = Stores::in_memory();
    stores.triggers = working.state.runtime.stores.triggers.clone();
    stores.audit = Arc::new(Unwritable);
    let h = harness(Options { stores: Some(stores), ..Options::default() });

    let mut changed = slack("wholeBody", None);
    changed["enabled"] = json!(false);
    for (method, path, body) in [
        (Method::PUT, "/api/triggers/slack", Some(changed)),
        (Method::PUT, "/api/triggers/new-one", Some(slack("wholeBody", None))),
        (Method::DELETE, "/api/triggers/slack", None),
    ] {
        let (status, headers, doc) = call(&h.app, method.clone(), path, body).await;
        assert_eq!(
            (status, doc["errorType"].as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, Some("audit_unavailable")),
            "{method} {path}: {doc}"
        );
        assert!(headers.contains_key(header::RETRY_AFTER));
        assert!(!doc.to_string().contains("audit database down"));
    }
    let (_, _, list) = call(&h.app, Method::GET, "/api/triggers", None).await;
    assert_eq!(list.as_array().unwrap().len(), 1, "nothing created or deleted: {list}");
    assert_eq!(list[0]["enabled"], true, "nothing replaced");
}

#[tokio::test]
async fn on_a_serverless_host_without_a_token_only_the_signed_accept_endpoint_answers() {
    // A trigger defined earlier (through another instance), in the shared store.
    let defined = harness(Options::default());
    define(&defined.app, "slack", slack("wholeBody", None)).await;
    let stores = defined.state.runtime.stores.clone();
    let runtime = Arc::new(
        RuntimeBuilder::new(tokio_rt::platform())
            .add_provider(
                Arc::new(ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("ok"))) as Arc<dyn ModelProvider>
            )
            .add_agent(AgentDefinition::new("support", "script", "m"))
            .stores(stores)
            .build()
            .unwrap(),
    );
    let config = Config::from_pairs([("Tracon__TriggerSecrets__Slack", SECRET)]);
    let http = HttpSettings::serverless_from_config(&config).unwrap();
    runtime.set_queue(RunQueue { transport: Arc::new(Manual), max_attempts: 3 });
    let state = AppState::new(runtime, http);
    let app = tracon_handlers::router(state);

    let res = app
        .clone()
        .oneshot(Request::builder().uri("/api/triggers").extension(remote()).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE, "management waits for authentication");
    let (status, _, bytes) = Accept::signed("/api/triggers/default/slack", b"{}", SECRET).send(&app).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{}", String::from_utf8_lossy(&bytes));
    let unsigned = Accept { signature: None, ..Accept::signed("/api/triggers/default/slack", b"{}", SECRET) };
    assert_eq!(unsigned.send(&app).await.0, StatusCode::UNAUTHORIZED);
    // Any other shape of the path is not the accept endpoint and is not let through.
    let other = Accept {
        path: "/api/triggers/default/slack/x",
        ..Accept::signed("/api/triggers/default/slack", b"{}", SECRET)
    };
    assert_eq!(other.send(&app).await.0, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn an_event_over_the_message_limit_is_400_and_queues_nothing() {
    let h = harness(Options::default());
    define(&h.app, "slack", slack("path", Some("event.text"))).await;
    // Within the body limit (256 KB), over the message limit (Tracon:Limits:MaxMessageChars).
    let body = json!({"event": {"text": "x".repeat(100_001)}}).to_string();
    let (status, _, bytes) = Accept::signed("/api/triggers/default/slack", body.as_bytes(), SECRET).send(&h.app).await;
    let doc = json_of(&bytes);
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("validation_failed")), "{doc}");
    assert_eq!((doc["field"].as_str(), doc["maxChars"].as_u64()), (Some("event.text"), Some(100_000)), "{doc}");
    assert_eq!(job_count(&h.app).await, 0);
}
