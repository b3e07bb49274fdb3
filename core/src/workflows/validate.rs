//! A workflow definition checked against the tenant's catalog and the registered functions:
//! what a save requires.

use crate::error::StoreError;
use crate::names::{AgentName, TenantId};
use crate::report::ValidationReport;
use crate::runtime::Runtime;
use crate::workflows::definition::{self, WorkflowDefinition};

/// Checks a definition against the rules of its kind, the tenant's catalog and the registered
/// functions — what a save requires.
pub async fn validate(
    runtime: &Runtime,
    tenant: &TenantId,
    def: &WorkflowDefinition,
) -> Result<ValidationReport, StoreError> {
    let mut agents = std::collections::BTreeSet::new();
    for name in definition::agent_references(def) {
        let Ok(parsed) = AgentName::parse(&name) else { continue };
        if runtime.catalog.get(tenant, &parsed).await?.is_some() {
            agents.insert(name);
        }
    }
    let functions = runtime.workflow_functions.names();
    let known = definition::Known { agents: &agents, functions: &functions };
    Ok(ValidationReport::from_problems(definition::check(def, &known)))
}
