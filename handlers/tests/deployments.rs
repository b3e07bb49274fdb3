//! The table of groups and deployments (`tracon_handlers::groups`) is the one list: every
//! place that names a deployment — the Lambda binaries, the Worker's features and its
//! build script, the SAM templates, the wrangler environments — names exactly the
//! deployments in the table, and every group is served somewhere.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use tracon_handlers::groups::{self, deployments};

fn repo(path: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn names() -> Vec<&'static str> {
    deployments::EVERY.iter().map(|d| d.name).collect()
}

#[test]
fn every_group_is_served_by_the_all_deployment_or_everywhere_once() {
    let mut seen = BTreeSet::new();
    for group in groups::EVERYWHERE.iter().chain(deployments::ALL.groups) {
        assert!(seen.insert(group.name), "{} is listed twice", group.name);
    }
    for deployment in deployments::EVERY {
        for group in deployment.groups {
            assert!(seen.contains(group.name), "{} serves {}, which `all` does not", deployment.name, group.name);
            assert!(
                !groups::EVERYWHERE.iter().any(|g| g.name == group.name),
                "{} lists {}, which every deployment serves already",
                deployment.name,
                group.name
            );
        }
    }
    // Each group is in some single-purpose deployment too, so a split install serves it.
    for group in deployments::ALL.groups {
        let served = deployments::EVERY
            .iter()
            .filter(|d| d.name != "all")
            .any(|d| d.groups.iter().any(|g| g.name == group.name));
        assert!(served, "no deployment but `all` serves {}", group.name);
    }
}

#[test]
fn each_lambda_binary_serves_the_deployment_it_is_named_after() {
    let manifest = repo("adapters/lambda/Cargo.toml");
    for name in names() {
        let bin = format!("name = \"tracon-{name}\"\npath = \"src/bin/{name}.rs\"");
        assert!(manifest.contains(&bin), "adapters/lambda/Cargo.toml has no binary tracon-{name}");
        let source = repo(&format!("adapters/lambda/src/bin/{name}.rs"));
        let constant = format!("groups::deployments::{}", name.to_uppercase());
        assert!(source.contains(&constant), "tracon-{name} does not serve {constant}");
    }
}

#[test]
fn each_worker_feature_is_a_deployment_and_builds_its_bundle() {
    let manifest = repo("adapters/worker/Cargo.toml");
    let features: BTreeSet<String> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("group-").and_then(|r| r.split_once(" =")).map(|(n, _)| n.to_owned()))
        .collect();
    let expected: BTreeSet<String> = names().into_iter().map(str::to_owned).collect();
    assert_eq!(features, expected, "the Worker's group-* features are not the deployments");
    let source = repo("adapters/worker/src/lib.rs");
    for name in names().into_iter().filter(|n| *n != "all") {
        let cfg = format!(
            "#[cfg(feature = \"group-{name}\")]\nconst DEPLOYMENT: &Deployment = &groups::deployments::{};",
            name.to_uppercase()
        );
        assert!(
            source.contains(&cfg),
            "the Worker's group-{name} does not select deployments::{}",
            name.to_uppercase()
        );
    }
    let build = repo("adapters/worker/build.sh");
    let accepted = format!("case \"$group\" in {}) ;;", names().join(" | "));
    assert!(build.contains(&accepted), "adapters/worker/build.sh does not accept exactly the deployments");
}

#[test]
fn the_sam_templates_and_wrangler_environments_name_the_deployments() {
    let split = repo("infra/aws/template.yaml");
    let all = repo("infra/aws/template-all.yaml");
    let wrangler = repo("wrangler.toml");
    for name in names() {
        let binary = format!("Binary: tracon-{name}");
        if name == "all" {
            assert!(all.contains(&binary), "template-all.yaml has no tracon-all function");
            assert!(!split.contains(&binary));
        } else {
            assert!(split.contains(&binary), "template.yaml has no tracon-{name} function");
            assert!(wrangler.contains(&format!("[env.{name}]")), "wrangler.toml has no {name} environment");
        }
    }
}
