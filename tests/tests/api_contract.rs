//! The OpenAPI document is the contract: schemathesis (PyPI, installed by `scripts/test`)
//! generates requests from the real binary's `GET /api/openapi.json` — valid ones, and ones
//! that break the document on purpose — and checks every answer against it, with the store
//! in memory and on Postgres. A failure of any of these checks fails the test:
//!
//! - `not_a_server_error` — no 5xx for any input;
//! - `status_code_conformance` — every status is documented for its operation;
//! - `content_type_conformance` — every answer has a documented media type;
//! - `response_schema_conformance` — every body (and every server-sent event) fits its schema;
//! - `negative_data_rejection` — a request the document calls invalid is refused.
//!
//! Bounded: 20 examples per operation, one fixed seed (the same cases every run, so a
//! failure reproduces with `st replay` from the printed test case id).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::Tracon;

const TOKEN: &str = "api-contract-admin-token-0123456789";
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
                      response_schema_conformance,negative_data_rejection";

fn schemathesis() -> PathBuf {
    let path = std::env::var_os("TRACON_SCHEMATHESIS").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tools/contract-venv/bin/schemathesis")
    });
    assert!(
        path.exists(),
        "schemathesis is not installed at {}: run `. scripts/sdk-tools.sh && install_contract_tools` (scripts/test does)",
        path.display()
    );
    path
}

/// Runs schemathesis against `server` and fails with its report unless every check passed.
fn check(server: &Tracon, label: &str) {
    let report = std::env::temp_dir().join(format!("tracon-schemathesis-{label}-{}", std::process::id()));
    let out = Command::new(schemathesis())
        .args(["run", &server.url("/api/openapi.json")])
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--checks", CHECKS, "--max-examples", "20", "--seed", "20261201"])
        .args(["--request-timeout", "30", "--no-color", "--generation-database", "none"])
        .arg("--report-dir")
        .arg(&report)
        .env("NO_COLOR", "1")
        .output()
        .expect("running schemathesis");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.contains("SUMMARY"))
        .filter(|l| l.contains("Selected:") || l.contains("Tested:") || l.contains("generated") || l.contains("❌"))
        .collect();
    // The operation count and the cases in the test log (and so in CI's).
    eprintln!("schemathesis ({label}): {}", summary.iter().map(|l| l.trim()).collect::<Vec<_>>().join("; "));
    assert!(
        out.status.success(),
        "schemathesis found failures ({label}):\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_text()
    );
    assert!(stdout.contains("Tested: "), "schemathesis tested nothing:\n{stdout}");
    assert!(!server.log_text().contains("panicked"), "{}", server.log_text());
}

#[tokio::test]
async fn the_document_holds_for_every_operation_in_memory() {
    let server = Tracon::start(&[("TRACON_AUTH_TOKEN", TOKEN)]).await;
    check(&server, "memory");
}

#[tokio::test]
async fn the_document_holds_for_every_operation_on_postgres() {
    let url =
        std::env::var("TRACON_TEST_DATABASE_URL").or_else(|_| std::env::var("DATABASE_URL")).unwrap_or_else(|_| {
            panic!(
                "This test needs PostgreSQL: run ./scripts/test (it provisions one), or set TRACON_TEST_DATABASE_URL."
            )
        });
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let schema = format!("contract_{nanos:x}");
    let server = Tracon::start(&[
        ("TRACON_AUTH_TOKEN", TOKEN),
        ("DATABASE_URL", url.as_str()),
        ("Tracon__PostgreSql__SchemaName", schema.as_str()),
    ])
    .await;
    check(&server, "postgres");
}
