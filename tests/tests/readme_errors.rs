//! The README's errors table is complete: every `errorType` the handlers and hosts answer
//! with is named in it. Read from the sources — every `ApiError` constructor and the
//! helpers that make one — so a new error type without a row fails here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The calls whose first string argument (after an optional `StatusCode::…`) is an error type.
const MAKERS: &[&str] =
    &["ApiError::new(", "Self::new(", "bad_request(", "not_found(", "conflict(", "forbidden(", "unavailable("];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The snake_case string literal an error maker is called with, if its call starts with one.
fn error_type(after: &str) -> Option<&str> {
    let mut rest = after.trim_start();
    if let Some(status) = rest.strip_prefix("StatusCode::") {
        rest = status.trim_start_matches(|c: char| c.is_ascii_uppercase() || c == '_').trim_start();
        rest = rest.strip_prefix(',')?.trim_start();
    }
    let literal = rest.strip_prefix('"')?;
    let end = literal.find('"')?;
    let name = &literal[..end];
    let snake = !name.is_empty()
        && name.contains('_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        && !name.starts_with('_')
        && !name.ends_with('_');
    snake.then_some(name)
}

fn error_types() -> BTreeSet<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["handlers/src", "adapters/lambda/src", "adapters/worker/src", "adapters/local/src"] {
        sources(&root.join(dir), &mut files);
    }
    let mut found = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests make errors of their own to test the mapping.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for maker in MAKERS {
            for (at, _) in code.match_indices(maker) {
                if let Some(name) = error_type(&code[at + maker.len()..]) {
                    found.insert(name.to_owned());
                }
            }
        }
    }
    found
}

#[test]
fn every_error_type_the_server_answers_with_has_a_row_in_the_readme() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let start = readme.find("\n### Errors\n").expect("the README has an Errors section");
    let section = &readme[start..];
    let section = &section[..section[1..].find("\n### ").map_or(section.len(), |e| e + 1)];
    let found = error_types();
    assert!(found.len() > 40, "read too few error types: {found:?}");
    let missing: Vec<&String> = found.iter().filter(|t| !section.contains(&format!("`{t}`"))).collect();
    assert!(missing.is_empty(), "error types without a row in the README's Errors table: {missing:?}");
}
