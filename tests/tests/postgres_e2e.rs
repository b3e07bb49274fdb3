//! End-to-end on Postgres: the real binary restarted, the database cut away and given back,
//! migrations run twice and concurrently and tampered with, content protection on disk.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The filters the in-memory handler tests check for U+0000.
#[path = "../../handlers/tests/fixtures/nul_filters.rs"]
mod nul_filters;
mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use nul_filters::NUL_FILTERS;
use serde_json::{Value, json};
use support::{Tracon, database_url, of_kind, run, text_of, tracon_bin};
use tracon_tests::chaos::ChaosProxy;
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

fn fresh_schema() -> String {
    format!("e_{}", uuid_like())
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{:x}{:x}", nanos, std::process::id())
}

async fn db() -> sqlx::PgPool {
    sqlx::PgPool::connect(&database_url()).await.unwrap()
}

async fn start_on_pg(schema: &str, url: &str, extra: &[(&str, &str)]) -> Tracon {
    let mut env = vec![("DATABASE_URL", url), ("Tracon__PostgreSql__SchemaName", schema)];
    env.extend_from_slice(extra);
    Tracon::start(&env).await
}

#[tokio::test]
async fn after_a_kill_and_restart_runs_events_tools_and_sessions_are_all_readable() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    mock.script(
        "restart-model",
        vec![
            MockTurn::tool_call("get_order_status", json!({"orderId": "4182"})),
            MockTurn::text("Order 4182 is on its way.").with_usage(30, 6),
        ],
    );
    let endpoint = format!("{}/v1", mock.base_url());
    let provider = [
        ("OPENAI_API_KEY", "k"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        ("Tracon__Providers__OpenAI__DefaultModel", "restart-model"),
    ];
    let (schema, url) = (fresh_schema(), database_url());
    let mut first = start_on_pg(&schema, &url, &provider).await;
    let (_, frames, raw) =
        run(&first, "support", json!({"message": "Where is order 4182?", "sessionId": "kept"})).await;
    assert_eq!(frames.last().unwrap().event, "done", "{raw}");
    let run_id = frames[0].data["runId"].as_str().unwrap().to_owned();
    first.child.kill().unwrap(); // SIGKILL: no drain, no goodbye
    first.child.wait().unwrap();

    let second = start_on_pg(&schema, &url, &provider).await;
    let client = reqwest::Client::new();
    let get = |path: String| {
        let (client, url) = (client.clone(), second.url(&path));
        async move { client.get(url).send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let run_row = get(format!("/api/runs/{run_id}")).await;
    assert_eq!(run_row["status"], "Completed");
    assert_eq!(run_row["usage"]["inputTokens"], 42, "12 from the tool turn + 30");
    let log = client.get(second.url(&format!("/api/runs/{run_id}/events"))).send().await.unwrap().text().await.unwrap();
    let log = support::parse_frames(&log);
    assert_eq!(log.first().unwrap().event, "run.started");
    assert_eq!(log.last().unwrap().event, "run.completed");
    let tools = get(format!("/api/runs/{run_id}/tools")).await;
    assert_eq!(tools[0]["toolName"], "get_order_status");
    assert!(tools[0]["result"].as_str().unwrap().contains("4182"));
    let session = get("/api/sessions/kept".into()).await;
    assert_eq!(session["messages"].as_array().unwrap().len(), 4);

    // The next turn in the session is sent the history.
    let (_, frames, _) = run(&second, "support", json!({"message": "And when?", "sessionId": "kept"})).await;
    assert_eq!(frames.last().unwrap().event, "done");
    let requests = mock.requests("restart-model");
    let last = requests.last().unwrap()["body"]["messages"].to_string();
    assert!(
        last.contains("Where is order 4182?")
            && last.contains("Order 4182 is on its way.")
            && last.contains("And when?"),
        "{last}"
    );
    let session = get("/api/sessions/kept".into()).await;
    assert_eq!(session["messages"].as_array().unwrap().len(), 6);
    assert_eq!(get("/api/meta".into()).await["storage"]["persistent"], true);
}

#[tokio::test]
async fn when_the_database_goes_away_requests_get_503_and_the_server_recovers_on_its_own() {
    let url = database_url();
    let target: SocketAddr = {
        let u = reqwest::Url::parse(&url).unwrap();
        let host = u.host_str().unwrap().replace("localhost", "127.0.0.1");
        format!("{host}:{}", u.port().unwrap_or(5432)).parse().unwrap()
    };
    let proxy = ChaosProxy::start(target).await.unwrap();
    let mut via_proxy = reqwest::Url::parse(&url).unwrap();
    via_proxy.set_host(Some("127.0.0.1")).unwrap();
    via_proxy.set_port(Some(proxy.addr().port())).unwrap();
    let schema = fresh_schema();
    let server = start_on_pg(&schema, via_proxy.as_str(), &[("Tracon__PostgreSql__AcquireTimeoutSeconds", "1")]).await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();

    let submit = |message: String| {
        let (client, url) = (client.clone(), server.url("/api/agents/support/run"));
        async move {
            let res = client.post(url).json(&json!({"message": message})).send().await.unwrap();
            let status = res.status().as_u16();
            let content_type =
                res.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
            (status, content_type, res.text().await.unwrap())
        }
    };
    let (status, _, _) = submit("before".into()).await;
    assert_eq!(status, 200);

    proxy.cut();
    let mut refused = 0;
    let mut started_runs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let (status, content_type, body) = submit("during the outage".into()).await;
        match status {
            503 => {
                assert_eq!(content_type, "application/problem+json");
                let doc: Value = serde_json::from_str(&body).unwrap();
                assert_eq!(doc["errorType"], "store_unavailable");
                refused += 1;
            }
            200 => started_runs.push(body),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert!(refused > 0, "requests during the outage are refused with 503");
    let (status, _, _) = {
        let r = client.get(server.url("/api/runs")).send().await.unwrap();
        (r.status().as_u16(), (), ())
    };
    assert_eq!(status, 503, "reads fail the same way");

    proxy.restore();
    let recovered_by = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _, body) = submit("after".into()).await;
        if status == 200 && body.contains("event: done") {
            break;
        }
        assert!(Instant::now() < recovered_by, "the server did not recover: {status} {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // No half-written run: everything the server accepted ends complete in the store.
    let runs: Value = client.get(server.url("/api/runs?take=200")).send().await.unwrap().json().await.unwrap();
    let pool = db().await;
    let count: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {schema}.runs")).fetch_one(&pool).await.unwrap();
    assert_eq!(count as usize, runs.as_array().unwrap().len());
    let settle_by = Instant::now() + Duration::from_secs(20);
    loop {
        let open: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {schema}.runs WHERE status = 'Running'"))
            .fetch_one(&pool)
            .await
            .unwrap();
        if open == 0 {
            break;
        }
        assert!(Instant::now() < settle_by, "{open} run(s) left open after the database came back");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(!server.log_text().contains("panicked"));
}

/// `database_url()` with another database name.
fn url_of_database(name: &str) -> String {
    let mut u = reqwest::Url::parse(&database_url()).unwrap();
    u.set_path(&format!("/{name}"));
    u.to_string()
}

#[tokio::test]
async fn a_database_that_refuses_connections_is_503_store_unavailable_with_retry_after() {
    let admin = db().await;
    let name = format!("refuse_{}", uuid_like());
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&admin).await.unwrap();
    let server =
        start_on_pg(&fresh_schema(), &url_of_database(&name), &[("Tracon__PostgreSql__AcquireTimeoutSeconds", "2")])
            .await;
    let client = reqwest::Client::new();
    assert_eq!(client.get(server.url("/api/runs")).send().await.unwrap().status(), 200);

    // The operator closes the database: new connections answer SQLSTATE 55000, open ones
    // are ended (57P01).
    sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false")).execute(&admin).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&name)
        .execute(&admin)
        .await
        .unwrap();
    for path in ["/api/runs", "/api/sessions", "/api/agents"] {
        let res = client.get(server.url(path)).send().await.unwrap();
        let (status, retry_after) = (res.status().as_u16(), res.headers().get("retry-after").cloned());
        let doc: Value = res.json().await.unwrap();
        assert_eq!((status, doc["errorType"].as_str()), (503, Some("store_unavailable")), "{path}: {doc}");
        let retry: u64 = retry_after.expect("Retry-After").to_str().unwrap().parse().unwrap();
        assert!(retry > 0, "{path}");
    }
    let (status, _, body) = run(&server, "support", json!({"message": "while closed"})).await;
    assert_eq!(status, 503, "a run is refused before it starts: {body}");

    sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true")).execute(&admin).await.unwrap();
    let recovered_by = Instant::now() + Duration::from_secs(30);
    while client.get(server.url("/api/runs")).send().await.unwrap().status() != 200 {
        assert!(Instant::now() < recovered_by, "the server did not recover");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!server.log_text().contains("request failed") && !server.log_text().contains("panicked"));
    drop(server);
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&admin).await.unwrap();
}

#[tokio::test]
async fn a_nul_character_is_the_same_400_on_postgres_as_in_memory() {
    let server = start_on_pg(&fresh_schema(), &database_url(), &[]).await;
    let client = reqwest::Client::new();
    for (path, field) in NUL_FILTERS {
        let res = client.get(server.url(path)).send().await.unwrap();
        let status = res.status().as_u16();
        let doc: Value = res.json().await.unwrap();
        assert_eq!((status, doc["field"].as_str()), (400, Some(field)), "{path}: {doc}");
    }
    for (key, value) in
        [("displayName", json!("a\u{0}")), ("instructions", json!("b\u{0}")), ("metadata", json!({"k": "\u{0}"}))]
    {
        let mut body = json!({"name": "nul", "instructions": "Help.", "model": {"provider": "scripted", "model": "m"}});
        body[key] = value;
        let res = client.post(server.url("/api/agents")).json(&body).send().await.unwrap();
        let status = res.status().as_u16();
        let doc: Value = res.json().await.unwrap();
        assert_eq!(status, 400, "{key}: {doc}");
        assert!(doc["field"].as_str().unwrap().starts_with(key), "{doc}");
    }
    assert!(!server.log_text().contains("22021") && !server.log_text().contains("22P05"));
}

fn migrate(schema: &str, status: bool) -> std::process::Output {
    let mut cmd = Command::new(tracon_bin());
    cmd.arg("migrate");
    if status {
        cmd.arg("status");
    }
    cmd.env_clear().env("DATABASE_URL", database_url()).env("Tracon__PostgreSql__SchemaName", schema).output().unwrap()
}

/// How many migrations the binary carries (every file in `migrations/`).
fn migration_count() -> usize {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations");
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "sql"))
        .count()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test]
async fn a_second_migration_applies_nothing_and_status_writes_nothing() {
    let schema = fresh_schema();
    let status = migrate(&schema, true);
    assert!(status.status.success());
    let all = migration_count();
    assert!(stdout(&status).starts_with(&format!("{all} pending")), "{}", stdout(&status));
    let pool = db().await;
    let exists: Option<String> =
        sqlx::query_scalar(&format!("SELECT to_regclass('{schema}.runs')::text")).fetch_one(&pool).await.unwrap();
    assert!(exists.is_none(), "status wrote nothing");
    let first = migrate(&schema, false);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert!(stdout(&first).starts_with(&format!("{all} applied")), "{}", stdout(&first));
    let second = migrate(&schema, false);
    assert!(stdout(&second).starts_with("0 applied"), "{}", stdout(&second));
    assert!(stdout(&migrate(&schema, true)).starts_with("0 pending"));
}

#[tokio::test]
async fn two_processes_migrating_at_once_both_succeed() {
    let schema = fresh_schema();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| migrate(&schema, false));
        let b = s.spawn(|| migrate(&schema, false));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let applied: Vec<String> = [&a, &b].iter().map(|o| stdout(o)).collect();
    let all = format!("{} applied", migration_count());
    assert_eq!(applied.iter().filter(|s| s.starts_with(&all)).count(), 1, "{applied:?}");
    assert_eq!(applied.iter().filter(|s| s.starts_with("0 applied")).count(), 1, "{applied:?}");
}

#[tokio::test]
async fn an_edited_applied_migration_fails_startup_loudly() {
    let schema = fresh_schema();
    assert!(migrate(&schema, false).status.success());
    let pool = db().await;
    sqlx::query(&format!("UPDATE {schema}._sqlx_migrations SET checksum = '\\x00'::bytea"))
        .execute(&pool)
        .await
        .unwrap();
    let out = Command::new(tracon_bin())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_clear()
        .env("DATABASE_URL", database_url())
        .env("Tracon__PostgreSql__SchemaName", &schema)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("migration 1 was changed after it was applied"), "{stderr}");
    let status = migrate(&schema, true);
    assert!(!status.status.success());
}

#[tokio::test]
async fn with_a_content_key_nothing_a_user_wrote_is_plaintext_in_the_database() {
    let key = "C2C2C2C2C2C2C2C2C2C2C2C2C2C2C2C2C2C2C2C2C2E=";
    let schema = fresh_schema();
    let url = database_url();
    let server = start_on_pg(&schema, &url, &[("Tracon__ContentProtection__Key", key)]).await;
    let marker = "Marker-Order-918273";
    let (_, frames, raw) = run(
        &server,
        "support",
        json!({"message": format!("Where is order 918273? {marker}"), "sessionId": "secret-session",
               "documents": [{"name": "note.txt", "content": format!("private {marker}")}]}),
    )
    .await;
    assert_eq!(frames.last().unwrap().event, "done", "{raw}");
    assert!(of_kind(&frames, "toolCall")[0]["arguments"].as_str().unwrap().contains("918273"));
    assert!(text_of(&frames).contains("918273"));

    let pool = db().await;
    let mut stored = Vec::new();
    for (column, table) in [
        ("content", "session_items"),
        ("payload", "run_events"),
        ("input", "runs"),
        ("arguments", "tool_calls"),
        ("result", "tool_calls"),
    ] {
        let rows: Vec<Option<Vec<u8>>> =
            sqlx::query_scalar(&format!("SELECT {column} FROM {schema}.{table}")).fetch_all(&pool).await.unwrap();
        stored.extend(rows.into_iter().flatten());
    }
    assert!(!stored.is_empty());
    for value in &stored {
        assert_eq!(value[0], 0x01);
        for needle in [marker, "918273", "order"] {
            assert!(!value.windows(needle.len()).any(|w| w == needle.as_bytes()), "'{needle}' in the table");
        }
    }
    let session: Value = reqwest::get(server.url("/api/sessions/secret-session")).await.unwrap().json().await.unwrap();
    assert!(session["messages"][0]["text"].as_str().unwrap().contains(marker), "reads are transparent");
}

/// The leak test: a server configured with known secrets — the bearer token and both
/// providers' keys — is driven through every kind of request, including provider failures
/// whose error text quotes the key back (as the real services do). None of the secrets may
/// appear in any response body or header, in any row of any table, or in any log line,
/// even at debug level.
#[tokio::test]
async fn no_configured_secret_reaches_a_response_a_stored_row_or_a_log_line() {
    const TOKEN: &str = "leak-token-5c1e9a7f3b2d8e60";
    const OPENAI_KEY: &str = "sk-leak-openai-0f9e8d7c6b5a";
    const ANTHROPIC_KEY: &str = "sk-ant-leak-1a2b3c4d5e6f";
    const JWT_SECRET: &str = "leak-jwt-secret-7d3c9e1f0a2b4c6d8e0f1a2b";
    const TRIGGER_SECRET: &str = "leak-trigger-secret-4e5f6a7b8c9d0e1f";
    const WEBHOOK_SECRET: &str = "leak-webhook-secret-9a8b7c6d5e4f3a2b";
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    mock.script(
        "leak-ok",
        vec![
            MockTurn::tool_call("get_order_status", json!({"orderId": "77"})),
            MockTurn::text("Order 77 is on its way.").with_usage(20, 5),
        ],
    );
    mock.script("leak-fail", vec![MockTurn::status(401)]);
    // The trap is armed: the mock quotes a refused key back.
    let refused = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", mock.base_url()))
        .bearer_auth(OPENAI_KEY)
        .json(&json!({"model": "leak-fail", "messages": []}))
        .send()
        .await
        .unwrap();
    assert!(refused.text().await.unwrap().contains(OPENAI_KEY));

    let endpoint = format!("{}/v1", mock.base_url());
    let (schema, url) = (fresh_schema(), database_url());
    let server = start_on_pg(
        &schema,
        &url,
        &[
            ("RUST_LOG", "debug"),
            ("TRACON_AUTH_TOKEN", TOKEN),
            ("OPENAI_API_KEY", OPENAI_KEY),
            ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
            ("Tracon__Providers__OpenAI__DefaultModel", "leak-ok"),
            ("ANTHROPIC_API_KEY", ANTHROPIC_KEY),
            ("Tracon__Providers__Anthropic__Endpoint", mock.base_url().as_str()),
            ("Tracon__Jwt__Issuer", "https://leak.example"),
            ("Tracon__Jwt__Audience", "tracon"),
            ("Tracon__Jwt__Algorithms", "HS256"),
            ("Tracon__Jwt__SigningKeyConfigurationName", "Leak:JwtSecret"),
            ("Leak__JwtSecret", JWT_SECRET),
            ("Tracon__TriggerSecrets__leak", TRIGGER_SECRET),
            ("Tracon__WebhookSecrets__leak", WEBHOOK_SECRET),
            // Deliveries go to the mock on loopback, so nothing leaves the machine.
            ("Tracon__Egress__AllowHttp", "true"),
            ("Tracon__Egress__AllowedNetworks__0", "127.0.0.0/8"),
        ],
    )
    .await;

    let client = reqwest::Client::new();
    let mut seen = String::new();
    let mut call = async |method: reqwest::Method, path: String, body: Option<Value>, token: Option<&str>| {
        let mut request = client.request(method, server.url(&path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        for (name, value) in response.headers() {
            seen.push_str(&format!("{name}: {}\n", String::from_utf8_lossy(value.as_bytes())));
        }
        let text = response.text().await.unwrap();
        seen.push_str(&text);
        seen.push('\n');
        (status.as_u16(), text)
    };
    use reqwest::Method;
    let agent = |name: &str, provider: &str| json!({"name": name, "instructions": "Answer.", "model": {"provider": provider, "model": "leak-fail"}});
    assert_eq!(call(Method::POST, "/api/agents".into(), Some(agent("leaky", "openai")), Some(TOKEN)).await.0, 201);
    assert_eq!(
        call(Method::POST, "/api/agents".into(), Some(agent("leaky-claude", "anthropic")), Some(TOKEN)).await.0,
        201
    );

    let mut run_ids = Vec::new();
    for (agent, session) in [("support", "s-ok"), ("leaky", "s-openai"), ("leaky-claude", "s-anthropic")] {
        let body = json!({"message": "Where is order 77?", "sessionId": session});
        let (status, text) = call(Method::POST, format!("/api/agents/{agent}/run"), Some(body), Some(TOKEN)).await;
        assert_eq!(status, 200, "{text}");
        let frames = support::parse_frames(&text);
        run_ids.push(frames[0].data["runId"].as_str().unwrap().to_owned());
        let expected_end = if agent == "support" { "done" } else { "error" };
        assert_eq!(frames.last().unwrap().event, expected_end, "{agent}: {text}");
    }
    let mut paths: Vec<String> = [
        "/api/meta",
        "/api/agents",
        "/api/agents/leaky",
        "/api/agents/leaky/versions",
        "/api/runs",
        "/api/stats",
        "/api/sessions",
        "/api/openapi.json",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    for id in &run_ids {
        for tail in ["", "/events", "/tools", "/input"] {
            paths.push(format!("/api/runs/{id}{tail}"));
        }
    }
    // A failed turn saves nothing, so only the answered conversation exists.
    paths.push("/api/sessions/s-ok".to_owned());
    for path in &paths {
        let (status, text) = call(Method::GET, path.clone(), None, Some(TOKEN)).await;
        assert_eq!(status, 200, "{path}: {text}");
    }
    // Refusals: no token, a wrong token, a near miss of the real one.
    for token in [None, Some("wrong-token-0000000000000000"), Some(&TOKEN[..TOKEN.len() - 1])] {
        assert_eq!(call(Method::GET, "/api/runs".into(), None, token).await.0, 401);
    }
    // An API key: the answer that issues it is the one place it may appear (kept out of
    // `seen`); then it is used, listed, refused a scope, rotated away and refused.
    let issued = server.issue_key(TOKEN, "leak test", &["RunsRead", "SecurityAdmin"]).await;
    let api_key = issued["key"].as_str().unwrap().to_owned();
    let key_id = issued["id"].as_str().unwrap().to_owned();
    assert_eq!(call(Method::GET, "/api/runs".into(), None, Some(&api_key)).await.0, 200);
    assert_eq!(call(Method::GET, "/api/api-keys".into(), None, Some(&api_key)).await.0, 200);
    assert_eq!(call(Method::GET, "/api/agents".into(), None, Some(&api_key)).await.0, 403);
    assert_eq!(call(Method::GET, "/api/runs".into(), None, Some(&api_key[..api_key.len() - 1])).await.0, 401);
    let rotated =
        support::json_of(client.post(server.url(&format!("/api/api-keys/{key_id}/rotate"))).bearer_auth(TOKEN)).await;
    let rotated_key = rotated["key"].as_str().unwrap().to_owned();
    assert_eq!(call(Method::GET, "/api/runs".into(), None, Some(&api_key)).await.0, 401);
    assert_eq!(call(Method::GET, "/api/runs".into(), None, Some(&rotated_key)).await.0, 200);
    assert_eq!(call(Method::DELETE, format!("/api/api-keys/{key_id}"), None, Some(TOKEN)).await.0, 200);
    assert_eq!(call(Method::GET, "/api/runs".into(), None, Some(&rotated_key)).await.0, 401);

    // A JWT: used, then refused when its signature is off by one character or it is expired.
    let mint = |exp_offset: i64| {
        let now = chrono::Utc::now().timestamp();
        let claims = json!({"iss": "https://leak.example", "aud": "tracon", "sub": "leaky-user", "roles": ["Admin"],
            "iat": now, "exp": now + exp_offset});
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).unwrap(),
        )
        .unwrap()
    };
    let jwt = mint(600);
    assert_eq!(call(Method::GET, "/api/runs".into(), None, Some(&jwt)).await.0, 200);
    let body = json!({"message": "Where is order 77?", "sessionId": "s-jwt"});
    assert_eq!(call(Method::POST, "/api/agents/leaky/run".into(), Some(body), Some(&jwt)).await.0, 200);
    let mut forged = jwt.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(call(Method::GET, "/api/runs".into(), None, Some(&forged)).await.0, 401);
    let expired = mint(-600);
    assert_eq!(call(Method::GET, "/api/runs".into(), None, Some(&expired)).await.0, 401);
    let jwt_signature = jwt.rsplit('.').next().unwrap().to_owned();

    // An inbound trigger: defined by key name, fired signed (accepted) and mis-signed (401).
    let trigger = json!({"targetKind": "agent", "targetName": "support",
        "signingSecretConfigurationName": "Tracon:TriggerSecrets:leak"});
    assert_eq!(call(Method::PUT, "/api/triggers/leak".into(), Some(trigger), Some(TOKEN)).await.0, 201);
    let sign = |secret: &str, timestamp: &str, body: &str| {
        use hmac::{Hmac, Mac};
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{timestamp}.{body}").as_bytes());
        let bytes = mac.finalize().into_bytes();
        format!("sha256={}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
    };
    let event = json!({"event": {"text": "Where is order 77?"}}).to_string();
    let mut trigger_answers = String::new();
    for (secret, expected) in [(TRIGGER_SECRET, 202), ("not-the-trigger-secret", 401)] {
        let timestamp = chrono::Utc::now().timestamp().to_string();
        let response = client
            .post(server.url("/api/triggers/default/leak"))
            .header("Content-Type", "application/json")
            .header("X-Tracon-Timestamp", &timestamp)
            .header("X-Tracon-Signature", sign(secret, &timestamp, &event))
            .body(event.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), expected);
        trigger_answers.push_str(&response.text().await.unwrap());
    }
    // An outbound webhook: subscribed by key name, pinged, delivered signed to the mock.
    let hook = json!({"url": format!("{}/hooks/leak", mock.base_url()), "events": ["run.completed"],
        "secretConfigurationName": "Tracon:WebhookSecrets:leak"});
    let (status, created) = call(Method::POST, "/api/webhooks".into(), Some(hook), Some(TOKEN)).await;
    assert_eq!(status, 201, "{created}");
    let hook_id = serde_json::from_str::<Value>(&created).unwrap()["id"].as_str().unwrap().to_owned();
    assert_eq!(call(Method::POST, format!("/api/webhooks/{hook_id}/test"), None, Some(TOKEN)).await.0, 202);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, history) = call(Method::GET, format!("/api/webhooks/{hook_id}/deliveries"), None, Some(TOKEN)).await;
        let history: Value = serde_json::from_str(&history).unwrap();
        if history.as_array().is_some_and(|h| h.iter().any(|d| d["attempts"].as_u64().unwrap_or(0) >= 1)) {
            break;
        }
        assert!(Instant::now() < deadline, "the test delivery was never attempted: {history}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen.push_str(&trigger_answers);

    // Every row of every table of the schema, as JSON (bytea as hex).
    let pool = db().await;
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1")
            .bind(&schema)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(tables.len() >= 5, "{tables:?}");
    let mut stored = String::new();
    for table in &tables {
        let rows: Option<String> = sqlx::query_scalar(&format!(
            "SELECT string_agg(row_to_json(t)::text, E'\\n') FROM \"{schema}\".\"{table}\" t"
        ))
        .fetch_one(&pool)
        .await
        .unwrap();
        stored.push_str(&rows.unwrap_or_default());
    }
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    let holds = |text: &str, needle: &str| text.contains(needle) || text.contains(&hex(needle));
    assert!(holds(&stored, "Order 77 is on its way"), "the dump reads the tables (bytea columns as hex)");

    let log = server.log_text();
    assert!(log.lines().count() > 10, "debug logging is on:\n{log}");
    // The keys' secret halves too: a log line or a row must not carry even the part after the id.
    let secret_half = |k: &str| k["trk_".len() + 13..].to_owned();
    let (key_half, rotated_half) = (secret_half(&api_key), secret_half(&rotated_key));
    for secret in [
        TOKEN,
        OPENAI_KEY,
        ANTHROPIC_KEY,
        JWT_SECRET,
        TRIGGER_SECRET,
        WEBHOOK_SECRET,
        &api_key,
        &rotated_key,
        &key_half,
        &rotated_half,
        &jwt,
        &jwt_signature,
        &forged,
        &expired,
    ] {
        for (place, text) in [("a response", &seen), ("a stored row", &stored), ("the log", &log)] {
            let lines: Vec<&str> = text.lines().filter(|l| holds(l, secret)).take(3).collect();
            assert!(lines.is_empty(), "{secret} is in {place}: {lines:#?}");
        }
    }
}

/// The audit chain on Postgres, tampered with in SQL: `Valid`, then `Broken` at the row
/// edited, `Valid` again once it is put back, then `Gap` at the row deleted.
#[tokio::test]
async fn the_audit_chain_on_postgres_finds_an_edited_row_and_a_deleted_one() {
    const TOKEN: &str = "audit-token-0123456789abcdef";
    let (schema, url) = (fresh_schema(), database_url());
    let server = start_on_pg(&schema, &url, &[("TRACON_AUTH_TOKEN", TOKEN)]).await;
    let client = reqwest::Client::new();
    let agent =
        |text: &str| json!({"name": "audited", "instructions": text, "model": {"provider": "openai", "model": "m"}});
    let send = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut request = client.request(method, server.url(path)).bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send()
    };
    // Without a provider configured the agent cannot compile; use the demo agent's provider.
    let demo: Value = send(reqwest::Method::GET, "/api/agents/support", None).await.unwrap().json().await.unwrap();
    let provider = demo["provider"].as_str().unwrap().to_owned();
    let with = |text: &str| {
        let mut a = agent(text);
        a["model"]["provider"] = json!(provider);
        a["model"]["model"] = demo["model"].clone();
        a
    };
    let created = send(reqwest::Method::POST, "/api/agents", Some(with("One."))).await.unwrap();
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
    for text in ["Two.", "Three."] {
        assert_eq!(send(reqwest::Method::PUT, "/api/agents/audited", Some(with(text))).await.unwrap().status(), 200);
    }
    let verify = async || -> Value {
        send(reqwest::Method::GET, "/api/audit/verify", None).await.unwrap().json().await.unwrap()
    };
    assert_eq!(verify().await, json!({"status": "Valid", "entries": 3, "firstFailingSequence": null}));

    let pool = db().await;
    let table = format!("\"{schema}\".audit_entries");
    let original: String =
        sqlx::query_scalar(&format!("SELECT after FROM {table} WHERE sequence = 3")).fetch_one(&pool).await.unwrap();
    let forged = original.replace("Three.", "Forged.");
    sqlx::query(&format!("UPDATE {table} SET after = $1 WHERE sequence = 3"))
        .bind(&forged)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(verify().await, json!({"status": "Broken", "entries": 2, "firstFailingSequence": 3}));
    sqlx::query(&format!("UPDATE {table} SET after = $1 WHERE sequence = 3"))
        .bind(&original)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(verify().await["status"], "Valid");
    sqlx::query(&format!("DELETE FROM {table} WHERE sequence = 2")).execute(&pool).await.unwrap();
    assert_eq!(verify().await, json!({"status": "Gap", "entries": 1, "firstFailingSequence": 2}));
}

/// An approval on Postgres through the real binary: the run stops, the request survives a
/// kill and restart, the in-band decision resumes the session as a new run, and a second
/// decision is refused.
#[tokio::test]
async fn an_approval_survives_a_restart_and_its_decision_resumes_the_session() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    mock.script(
        "approve-model",
        vec![
            MockTurn::tool_call("cancel_order", json!({"orderId": "4182"})),
            MockTurn::text("Order 4182 is cancelled.").with_usage(30, 6),
        ],
    );
    let endpoint = format!("{}/v1", mock.base_url());
    let provider = [
        ("OPENAI_API_KEY", "k"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        ("Tracon__Providers__OpenAI__DefaultModel", "approve-model"),
    ];
    let (schema, url) = (fresh_schema(), database_url());
    let mut first = start_on_pg(&schema, &url, &provider).await;
    let client = reqwest::Client::new();
    let agent = json!({"name": "canceller", "instructions": "Cancel orders.", "toolNames": ["cancel_order"],
        "model": {"provider": "openai", "model": "approve-model"}});
    let created = client.post(first.url("/api/agents")).json(&agent).send().await.unwrap();
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
    let (_, frames, raw) = run(&first, "canceller", json!({"message": "Cancel 4182", "sessionId": "appr"})).await;
    let approvals = frames.iter().find(|f| f.event == "approvals").unwrap_or_else(|| panic!("{raw}"));
    let request_id = approvals.data[0]["requestId"].as_str().unwrap().to_owned();
    assert_eq!(frames.last().unwrap().data["status"], "AwaitingApproval");
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let second = start_on_pg(&schema, &url, &provider).await;
    let pending: Value = client.get(second.url("/api/approvals/pending")).send().await.unwrap().json().await.unwrap();
    assert_eq!(pending[0]["id"], request_id.as_str(), "{pending}");
    assert_eq!(pending[0]["arguments"], json!({"orderId": "4182"}));
    let (_, frames, raw) = run(
        &second,
        "canceller",
        json!({"sessionId": "appr", "approvals": [{"requestId": request_id, "approved": true}]}),
    )
    .await;
    assert_eq!(frames.last().unwrap().data["status"], "Completed", "{raw}");
    assert!(text_of(&frames).contains("Order 4182 is cancelled."), "{raw}");
    let resumed = frames[0].data["runId"].as_str().unwrap().to_owned();
    let tools: Value =
        client.get(second.url(&format!("/api/runs/{resumed}/tools"))).send().await.unwrap().json().await.unwrap();
    assert_eq!((tools[0]["toolName"].as_str(), tools[0]["status"].as_str()), (Some("cancel_order"), Some("Succeeded")));
    let again = client
        .post(second.url(&format!("/api/approvals/{request_id}/decision")))
        .json(&json!({"approved": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
    let decided: Value =
        client.get(second.url(&format!("/api/approvals/{request_id}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        (decided["status"].as_str(), decided["resumedRunId"].as_str()),
        (Some("Approved"), Some(resumed.as_str()))
    );
    // The model saw the call's result on the resumed run.
    let last = mock.requests("approve-model").last().unwrap()["body"]["messages"].to_string();
    assert!(last.contains("cancelled") && last.contains("Cancel 4182"), "{last}");
}

/// The crash test of the job queue: `kill -9` while 50 queued runs are in flight, then a
/// restart on the same database. Every job ends exactly once in a terminal state, none is
/// lost, no run's model call is made twice (the mock server counts the calls per run, each
/// run's message being unique), and the runs the killed process was executing are closed
/// `Orphaned` by reconciliation, not run again.
#[tokio::test]
async fn killed_mid_queue_every_job_ends_once_and_the_orphaned_runs_are_reconciled() {
    const RUNS: usize = 50;
    const SLOTS: usize = 8;
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    // Until the kill, every model call is held open: the first process's slots all hang.
    mock.script("crash-model", vec![MockTurn::hang()]);
    let endpoint = format!("{}/v1", mock.base_url());
    let slots = SLOTS.to_string();
    let settings = [
        ("OPENAI_API_KEY", "k"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        ("Tracon__Jobs__Concurrency", slots.as_str()),
        ("Tracon__Jobs__LeaseSeconds", "3"),
        ("Tracon__RunReconciliation__HeartbeatSeconds", "1"),
        ("Tracon__RunReconciliation__OrphanAfterSeconds", "3"),
        ("Tracon__Scheduling__TickSeconds", "1"),
        // What reconciliation alone does; `crash_matrix.rs` has continuation (the default).
        ("Tracon__RunContinuation__Enabled", "false"),
    ];
    let (schema, url) = (fresh_schema(), database_url());
    let mut first = start_on_pg(&schema, &url, &settings).await;
    let client = reqwest::Client::new();
    let agent =
        json!({"name": "crasher", "instructions": "Answer.", "model": {"provider": "openai", "model": "crash-model"}});
    let created = client.post(first.url("/api/agents")).json(&agent).send().await.unwrap();
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());

    let mut runs = Vec::new();
    for i in 0..RUNS {
        runs.push((i, support::queue_run(&client, &first, "crasher", &format!("job-{i}")).await));
    }
    // Wait until every slot of the first process is inside a model call.
    let deadline = Instant::now() + Duration::from_secs(60);
    while mock.requests("crash-model").len() < SLOTS {
        assert!(Instant::now() < deadline, "the consumer never filled its slots:\n{}", first.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.child.kill().unwrap(); // SIGKILL: leases, heartbeats and runs stop mid-flight
    first.child.wait().unwrap();
    let in_flight: Vec<String> =
        mock.requests("crash-model").iter().map(|r| r["body"]["messages"].to_string()).collect();
    assert_eq!(in_flight.len(), SLOTS, "no call after the kill");

    mock.clear_script("crash-model");
    mock.script("crash-model", vec![MockTurn::text("Done.").with_usage(3, 1)]);
    let second = start_on_pg(&schema, &url, &settings).await;
    let pool = db().await;
    support::until_all_ended(&pool, &schema, Duration::from_secs(120), Duration::from_millis(200), || {
        second.log_text()
    })
    .await;

    // Every job ended once, none lost, each settled as its run ended: the orphaned runs'
    // jobs failed (never a success for work that did not finish), every other one succeeded.
    let jobs: Vec<(String, Option<String>, String)> = sqlx::query_as(&format!(
        "SELECT status, error_code, run_id::text FROM {schema}.jobs WHERE handler_key = 'run.execute'"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(jobs.len(), RUNS);
    // No run's model call was made twice, in either process.
    let calls = mock.requests("crash-model");
    for (i, run_id) in &runs {
        let marker = format!("\"job-{i}\"");
        let made = calls.iter().filter(|r| r["body"]["messages"].to_string().contains(&marker)).count();
        let run: Value =
            client.get(second.url(&format!("/api/runs/{run_id}"))).send().await.unwrap().json().await.unwrap();
        let was_in_flight = in_flight.iter().any(|m| m.contains(&marker));
        assert_eq!(made, 1, "run {i} ({run}) made {made} model calls");
        let job = jobs.iter().find(|(_, _, id)| id == run_id).unwrap();
        if was_in_flight {
            // The killed process was executing it: reconciliation closes it, nobody re-runs it,
            // and its job reports the failure.
            assert_eq!(run["status"], "Failed", "{run}");
            assert_eq!(run["error"]["errorClass"], "Orphaned", "{run}");
            assert_eq!((job.0.as_str(), job.1.as_deref()), ("Failed", Some("tracon.run.orphaned")), "{job:?}");
            let log = client.get(second.url(&format!("/api/runs/{run_id}/events"))).send().await.unwrap();
            let log = support::parse_frames(&log.text().await.unwrap());
            assert_eq!(log.last().unwrap().event, "run.failed", "the closing event follows the run's own");
        } else {
            assert_eq!(run["status"], "Completed", "{run}");
            assert_eq!(job.0, "Succeeded", "{job:?}");
        }
    }
    assert_eq!(calls.len(), RUNS, "one model call per run across both processes");
    let orphaned: i64 =
        sqlx::query_scalar(&format!("SELECT count(*) FROM {schema}.runs WHERE error->>'errorClass' = 'Orphaned'"))
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(orphaned, SLOTS as i64);
    assert!(second.log_text().contains("closed an orphaned run"), "{}", second.log_text());
}

/// A live SSE response read frame by frame.
struct Live {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
    raw: String,
}

impl Live {
    async fn open(request: reqwest::RequestBuilder) -> Live {
        use futures::StreamExt;
        let res = request.send().await.unwrap();
        assert_eq!(res.status(), 200);
        Live { body: res.bytes_stream().boxed(), buffer: String::new(), raw: String::new() }
    }

    /// The next frame; `None` when the stream ended. Waits at most 60 s: a frame that never
    /// comes fails the test instead of hanging it.
    async fn next(&mut self) -> Option<support::Frame> {
        use futures::StreamExt;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                self.raw.push_str(&frame);
                match support::parse_frames(&frame).into_iter().next() {
                    Some(f) => return Some(f),
                    None => continue, // a keep-alive comment
                }
            }
            let chunk =
                tokio::time::timeout(Duration::from_secs(60), self.body.next()).await.expect("no frame within 60 s")?;
            self.buffer.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        }
    }

    async fn until(&mut self, wanted: impl Fn(&support::Frame) -> bool) -> support::Frame {
        loop {
            match self.next().await {
                Some(f) if wanted(&f) => return f,
                Some(_) => {}
                None => panic!("the stream ended first:\n{}", self.raw),
            }
        }
    }
}

/// Two servers on one database, each hearing the other through `LISTEN tracon_runs`. A run
/// on the first whose model has gone silent writes nothing while nobody follows it (no
/// event batches on a timer, no cancel-flag reads); a follower on the second tells it so and
/// then sees what the model already said; a cancel through the second stops the first's
/// run at once. Heartbeats are pushed out to ten minutes, so neither can arrive by the
/// heartbeat's piggy-backed stop flag.
#[tokio::test]
async fn across_two_servers_a_follower_and_a_cancel_reach_a_live_run_through_notify() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let quiet = || MockTurn::text("Still thinking about it.").hang_after_chunks(1);
    mock.script("quiet-model", vec![quiet(), quiet()]);
    let endpoint = format!("{}/v1", mock.base_url());
    let env = [
        ("OPENAI_API_KEY", "k"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        ("Tracon__Providers__OpenAI__DefaultModel", "quiet-model"),
        ("Tracon__RunReconciliation__HeartbeatSeconds", "600"),
        ("Tracon__RunReconciliation__OrphanAfterSeconds", "1200"),
    ];
    let (schema, url) = (fresh_schema(), database_url());
    let a = start_on_pg(&schema, &url, &env).await;
    let b = start_on_pg(&schema, &url, &env).await;
    let (client, pool) = (reqwest::Client::new(), db().await);
    let events_of = |id: String| {
        let (pool, schema) = (pool.clone(), schema.clone());
        async move {
            sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {schema}.run_events WHERE run_id = $1::uuid"))
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };

    // A run on A; its model said one thing and went quiet.
    let mut live = Live::open(client.post(a.url("/api/agents/support/run")).json(&json!({"message": "Go."}))).await;
    let id = live.next().await.unwrap().data["runId"].as_str().unwrap().to_owned();
    live.until(|f| f.event == "update" && f.data["kind"] == "text").await;
    let unfollowed = events_of(id.clone()).await;

    // Followed from B: A is told, writes what it has, and B's follower streams it.
    let mut follower = Live::open(client.get(b.url(&format!("/api/runs/{id}/events")))).await;
    let delta = follower.until(|f| f.event == "message.delta").await;
    // What the model said before it went quiet (the mock sends it in pieces).
    assert!(delta.data.to_string().contains("Still"), "{}", follower.raw);
    assert!(events_of(id.clone()).await > unfollowed);

    // A second quiet run on A, nobody following: a cancel through B ends it.
    let mut second =
        Live::open(client.post(a.url("/api/agents/support/run")).json(&json!({"message": "Again."}))).await;
    let second_id = second.next().await.unwrap().data["runId"].as_str().unwrap().to_owned();
    second.until(|f| f.event == "update" && f.data["kind"] == "text").await;
    let res = client.post(b.url(&format!("/api/runs/{second_id}/cancel"))).send().await.unwrap();
    assert_eq!(res.status(), 202);
    let mut frames = Vec::new();
    while let Some(f) = second.next().await {
        frames.push(f);
    }
    assert_eq!(frames.last().unwrap().data["status"], "Canceled", "{}", second.raw);
    let run: Value = client.get(b.url(&format!("/api/runs/{second_id}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(run["status"], "Canceled");
    // Its log ends once, with what the model said before the cancel in it.
    let log = client.get(b.url(&format!("/api/runs/{second_id}/events"))).send().await.unwrap().text().await.unwrap();
    let log = support::parse_frames(&log);
    assert_eq!(log.iter().filter(|f| f.event == "run.canceled").count(), 1, "{log:?}");
    assert!(log.iter().any(|f| f.event == "message.delta"));
    drop(live);
}

/// A stored agent compiled on one server and changed through another: the first server's
/// compiled agent is no longer current, its next run's row (guarded on the tenant's
/// definitions generation) is refused, and the run goes on as the new version — recorded
/// once, under that version.
#[tokio::test]
async fn across_two_servers_a_definition_changed_on_one_is_what_the_next_run_on_the_other_uses() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    mock.script("writer-model", vec![MockTurn::text("Done.").with_usage(3, 1)]);
    let endpoint = format!("{}/v1", mock.base_url());
    let env = [("OPENAI_API_KEY", "k"), ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str())];
    let (schema, url) = (fresh_schema(), database_url());
    let a = start_on_pg(&schema, &url, &env).await;
    let b = start_on_pg(&schema, &url, &env).await;
    let client = reqwest::Client::new();
    let def = |text: &str| json!({"name": "writer", "instructions": text, "model": {"provider": "openai", "model": "writer-model"}});
    let res = client.post(a.url("/api/agents")).json(&def("Write plainly.")).send().await.unwrap();
    assert_eq!(res.status(), 201);
    // Answered as one JSON document (an idempotent run): the row's write overlaps the model call.
    let (client, a) = (&client, &a);
    let run_on_a = |key: &'static str| async move {
        let res = client
            .post(a.url("/api/agents/writer/run"))
            .header("idempotency-key", key)
            .json(&json!({"message": "Go."}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        res.json::<Value>().await.unwrap()
    };
    let system_of = |request: &Value| request["body"]["messages"][0]["content"].as_str().unwrap_or_default().to_owned();

    for key in ["first", "second"] {
        run_on_a(key).await;
    }
    let sent = mock.requests("writer-model");
    assert!(system_of(sent.last().unwrap()).contains("Write plainly."), "{sent:?}");

    let res = client.put(b.url("/api/agents/writer")).json(&def("Write in verse.")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let answer = run_on_a("third").await;
    assert_eq!(answer["status"], "Completed", "{answer}");
    let sent = mock.requests("writer-model");
    assert!(system_of(sent.last().unwrap()).contains("Write in verse."), "{sent:?}");

    // Three runs, each recorded once under the version it ran.
    let pool = db().await;
    let versions: Vec<i32> = sqlx::query_scalar(&format!(
        "SELECT agent_version FROM {schema}.runs WHERE agent_name = 'writer' ORDER BY started_at"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(versions, vec![1, 1, 2]);
}
