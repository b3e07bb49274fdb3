//! The crates' module graphs have no import circles: layers stay layers, and a newcomer can
//! read a crate from the bottom up (`tracon_tests::modules` reads the graph from the
//! sources).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use tracon_tests::modules;

fn check(krate: &str) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let src = root.join(krate).join("src");
    let graph = modules::graph(&src);
    assert!(graph.len() > 5, "read too little of {krate}: {graph:?}");
    let circles = modules::circles(&graph);
    let report: Vec<String> = circles
        .iter()
        .map(|c| format!("a circle of {} files:\n{}", c.len(), modules::describe(&graph, c, &src)))
        .collect();
    assert!(circles.is_empty(), "{krate} has import circles:\n{}", report.join("\n"));
}

#[test]
fn core_has_no_import_circle() {
    check("core");
}

#[test]
fn handlers_have_no_import_circle() {
    check("handlers");
}

#[test]
fn the_postgres_stores_have_no_import_circle() {
    check("adapters/postgres");
}
