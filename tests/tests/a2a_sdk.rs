//! The official A2A Python SDK (`a2a-sdk` from PyPI) as a client of the real binary's A2A
//! server, against the mock model: it resolves the card, sends, streams, reads a task back,
//! and runs a background task with a push notification, polled to completion. The push
//! reaches a receiver this test runs, which checks its signature. The script is
//! `tests/sdk/a2a_client.py`; `scripts/test` installs the SDK (`scripts/sdk-tools.sh`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use support::Tracon;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

const TOKEN: &str = "a2a-sdk-admin-token-0123456789";
const PUSH_SECRET: &str = "a2a-push-signing-secret-for-the-test";

fn python() -> PathBuf {
    support::sdk_python()
}

/// One request the receiver got: lowercase headers and the body.
#[derive(Debug, Clone)]
struct Received {
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

/// The client's push receiver: HTTP/1.1 on 127.0.0.1, answering 200, keeping every request.
async fn receiver() -> (String, Arc<Mutex<Vec<Received>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/a2a/push", listener.local_addr().unwrap());
    let kept = Arc::new(Mutex::new(Vec::new()));
    let seen = kept.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let seen = seen.clone();
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
                seen.lock().unwrap().push(Received { headers, body: buf[head_end..head_end + length].to_vec() });
                let _ = socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (url, kept)
}

/// The receiver's check, from the webhook contract alone: HMAC-SHA256 of
/// `"{X-Tracon-Timestamp}.{body}"` with the tenant's push secret, hex after `sha256=`.
fn signature_is_valid(r: &Received) -> bool {
    let Some(hex) = r.headers.get("x-tracon-signature").and_then(|s| s.strip_prefix("sha256=")) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(PUSH_SECRET.as_bytes()).unwrap();
    mac.update(r.headers["x-tracon-timestamp"].as_bytes());
    mac.update(b".");
    mac.update(&r.body);
    let expected: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    expected == hex
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_a2a_python_sdk_sends_streams_reads_and_gets_a_signed_push() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    mock.script("sdk-model", vec![MockTurn::text("Order 4182 ships tomorrow.").with_usage(11, 5)]);
    let endpoint = format!("{}/v1", mock.base_url());
    let (push_url, received) = receiver().await;
    let server = Tracon::start(&[
        ("TRACON_AUTH_TOKEN", TOKEN),
        ("OPENAI_API_KEY", "mock-key"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        ("Tracon__Providers__OpenAI__DefaultModel", "sdk-model"),
        ("Tracon__A2A__ExposedAgents__0", "support"),
        ("Tracon__A2A__PushSecretName", "A2A"),
        ("Tracon__WebhookSecrets__A2A", PUSH_SECRET),
        // The receiver is on loopback, over plain HTTP: allowed for this test only.
        ("Tracon__Egress__AllowHttp", "true"),
        ("Tracon__Egress__AllowedNetworks__0", "127.0.0.0/8"),
    ])
    .await;
    let issued = server.issue_key(TOKEN, "a2a", &["ExternalInvoke"]).await;
    let key = issued["key"].as_str().unwrap();

    let output = Command::new(python())
        .arg("a2a_client.py")
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TRACON_A2A_URL", server.url("/a2a/support"))
        .env("TRACON_A2A_KEY", key)
        .env("TRACON_PUSH_URL", &push_url)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("a2a: ok"),
        "a2a_client.py failed\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        server.log_text()
    );
    let task_id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("push task: "))
        .unwrap_or_else(|| panic!("{stdout}"))
        .trim()
        .to_owned();

    // The push is a webhook delivery: queued at the run's end, sent by the job consumer.
    let deadline = Instant::now() + Duration::from_secs(30);
    let push = loop {
        if let Some(push) = received.lock().unwrap().first().cloned() {
            break push;
        }
        assert!(Instant::now() < deadline, "no push arrived; server log:\n{}", server.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(signature_is_valid(&push), "the receiver verifies the signature: {push:?}");
    assert_eq!(push.headers.get("x-a2a-notification-token").map(String::as_str), Some("sdk-push-token"));
    let body: Value = serde_json::from_slice(&push.body).unwrap();
    assert_eq!(body["statusUpdate"]["taskId"], task_id.as_str(), "{body}");
    assert_eq!(body["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
    assert_eq!(received.lock().unwrap().len(), 1, "one push for the one configured task");

    // Every task was an ordinary run of the agent, labelled as A2A's.
    let runs = support::json_of(reqwest::Client::new().get(server.url("/api/runs")).bearer_auth(TOKEN)).await;
    let a2a_runs = runs.as_array().unwrap().iter().filter(|r| r["labels"]["a2a.agent"] == "support").count();
    assert_eq!(a2a_runs, 3, "{runs}");
    drop(mock);
}
