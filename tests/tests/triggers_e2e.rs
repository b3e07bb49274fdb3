//! Inbound triggers end to end: the real `tracon` binary (on the memory store, and on
//! Postgres across a restart), a trigger defined over HTTP, and a request signed exactly as
//! the README shows — by `openssl` in a shell, independent of the code under test —
//! accepted, run by the local consumer, and refused when replayed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{Value, json};
use support::{Tracon, database_url};

const SECRET: &str = "whsec_e2e_trigger_secret";

/// `sha256=<hex>` of `"{ts}.{body}"`, computed by the README's `openssl` one-liner.
fn openssl_sign(ts: &str, body: &str) -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", r#"printf '%s.%s' "$TS" "$BODY" | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1"#])
        .env("TS", ts)
        .env("BODY", body)
        .env("SECRET", SECRET)
        .output()
        .expect("this test signs with openssl through sh: install openssl");
    assert!(out.status.success(), "openssl failed: {}", String::from_utf8_lossy(&out.stderr));
    let hex = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert_eq!(hex.len(), 64, "openssl printed {hex:?}");
    format!("sha256={hex}")
}

#[tokio::test]
async fn a_signed_trigger_starts_a_queued_run_on_the_real_server_and_a_replay_is_refused() {
    let server = Tracon::start(&[("Tracon__TriggerSecrets__Demo", SECRET)]).await;
    let client = reqwest::Client::new();
    let defined = client
        .put(server.url("/api/triggers/demo"))
        .json(&json!({
            "targetKind": "agent",
            "targetName": "support",
            "signingSecretConfigurationName": "Tracon__TriggerSecrets__Demo",
            "payloadMode": "path",
            "payloadPath": "event.text"
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(defined.status(), 201, "{}", defined.text().await.unwrap());

    let body = r#"{"event":{"text":"Where is order 4182?"}}"#;
    let ts = chrono::Utc::now().timestamp().to_string();
    let signature = openssl_sign(&ts, body);
    let send = |signature: String| {
        client
            .post(server.url("/api/triggers/default/demo"))
            .header("Content-Type", "application/json")
            .header("X-Tracon-Timestamp", &ts)
            .header("X-Tracon-Signature", signature)
            .body(body)
            .send()
    };
    let accepted = send(signature.clone()).await.unwrap();
    let (location, _, run) = support::accepted_run(&client, &server, accepted).await;
    assert_eq!(run["status"], "Completed", "{run}");
    assert_eq!(run["labels"]["trigger"], "demo");
    let input: Value = client.get(server.url(&format!("{location}/input"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(input["message"], "Where is order 4182?");

    // The same signed request again: 409, and still one run.
    let replay = send(signature.clone()).await.unwrap();
    assert_eq!(replay.status(), 409);
    // A forged signature: the generic 401.
    let forged = send(format!("sha256={}", "ab".repeat(32))).await.unwrap();
    assert_eq!(forged.status(), 401);
    let runs: Value = client.get(server.url("/api/runs")).send().await.unwrap().json().await.unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    assert!(!server.log_text().contains(SECRET), "the secret never reaches the log");
}

/// On Postgres the replay key outlives the process: after a restart the same signed request
/// is still `409`, and the trigger definition is still there.
#[tokio::test]
async fn on_postgres_a_replay_is_refused_even_after_a_restart() {
    let schema = format!("e_trig_{}", uuid::Uuid::new_v4().simple());
    let url = database_url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("Tracon__PostgreSql__SchemaName", schema.as_str()),
        ("Tracon__TriggerSecrets__Demo", SECRET),
    ];
    let client = reqwest::Client::new();
    let body = r#"{"event":{"text":"Where is order 4182?"}}"#;
    let ts = chrono::Utc::now().timestamp().to_string();
    let signature = openssl_sign(&ts, body);
    let send = |server: &Tracon| {
        client
            .post(server.url("/api/triggers/default/demo"))
            .header("X-Tracon-Timestamp", &ts)
            .header("X-Tracon-Signature", &signature)
            .body(body)
            .send()
    };

    let first = Tracon::start(&env).await;
    let defined = client
        .put(first.url("/api/triggers/demo"))
        .json(&json!({"targetKind": "agent", "targetName": "support",
            "signingSecretConfigurationName": "Tracon:TriggerSecrets:Demo", "payloadMode": "path", "payloadPath": "event.text"}))
        .send()
        .await
        .unwrap();
    assert_eq!(defined.status(), 201, "{}", defined.text().await.unwrap());
    let accepted = send(&first).await.unwrap();
    assert_eq!(accepted.status(), 202, "{}", accepted.text().await.unwrap());
    drop(first);

    let second = Tracon::start(&env).await;
    assert_eq!(send(&second).await.unwrap().status(), 409, "the replay key is in the database");
    let triggers: Value = client.get(second.url("/api/triggers")).send().await.unwrap().json().await.unwrap();
    assert_eq!(triggers[0]["name"], "demo", "{triggers}");
    let runs: Value = client.get(second.url("/api/runs")).send().await.unwrap().json().await.unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
}
