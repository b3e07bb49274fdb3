//! A workflow as data ([`WorkflowDefinition`]), the rules a definition must meet to be saved
//! ([`check`], the ones the executor relies on), and its graph ([`WorkflowGraph`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::report::{Problem, ProblemCode};

/// The most participants (agents and functions) one workflow names.
pub const MAX_PARTICIPANTS: usize = 32;
/// `maxIterations` of a looping kind when the definition sets none.
pub const DEFAULT_MAX_ITERATIONS: u32 = 10;
/// The largest `maxIterations`.
pub const MAX_ITERATIONS: u32 = 1_000;
/// The largest `maxDurationSeconds` (one day).
pub const MAX_DURATION_SECONDS: u32 = 86_400;
/// Longest `displayName`, and `description`.
pub const MAX_DISPLAY_NAME_LEN: usize = 200;
pub const MAX_DESCRIPTION_LEN: usize = 4_000;

/// How the participants work together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum WorkflowKind {
    /// Nodes run in order; each one's output is the next one's input.
    Sequential,
    /// Agents run at the same time on the same input; their answers are merged.
    Concurrent,
    /// The first agent starts and hands off to another when its model decides to.
    Handoff,
    /// Participants take turns; a manager agent (when set) picks who speaks next, otherwise
    /// they speak in order.
    GroupChat,
    /// A manager agent plans, picks each step's participant, tracks progress and replans.
    Magentic,
}

impl WorkflowKind {
    /// The kinds `maxIterations` bounds.
    pub fn loops(self) -> bool {
        matches!(self, Self::Handoff | Self::GroupChat | Self::Magentic)
    }
}

/// What a node of a `Sequential` workflow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum WorkflowNodeKind {
    /// An agent of the catalog: it opens a run of its own.
    Agent,
    /// A function registered in code: it opens no run and costs nothing.
    Function,
}

/// One node of a `Sequential` workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowNodeReference {
    pub name: String,
    pub kind: WorkflowNodeKind,
}

/// A workflow definition, as the API stores it (every save a new version).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowDefinition {
    /// 1–64 lowercase letters, digits, `.`, `_` or `-`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub kind: WorkflowKind,
    /// The participating agents, in order. Exclusive with `nodes`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_names: Vec<String>,
    /// `Sequential` only: agents and functions, in order. Exclusive with `agentNames`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<WorkflowNodeReference>,
    /// The manager agent: required by `Magentic`, optional for `GroupChat` (without one,
    /// participants speak in order), not used by the other kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager_agent_name: Option<String>,
    /// `Handoff`, `GroupChat` and `Magentic`: the most agent turns (default 10, at most 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// The longest a run may take; past it the run ends `Canceled` (1 to 86,400 seconds; none
    /// by default, the call tree's own limits still apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration_seconds: Option<u32>,
}

impl crate::definitions::Definition for WorkflowDefinition {
    type Name = crate::names::WorkflowName;
    const NOUN: &'static str = "A workflow";
    fn name(&self) -> &str {
        &self.name
    }
}

/// One participant of a workflow, as the executor addresses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    /// The executor id: the node's name, with `#2`, `#3`… for a name a `Sequential`
    /// workflow repeats. Run events and the graph use it.
    pub id: String,
    pub name: String,
    pub kind: WorkflowNodeKind,
}

impl WorkflowDefinition {
    /// The participants in order (the manager is not one).
    pub fn participants(&self) -> Vec<Participant> {
        let named: Vec<(String, WorkflowNodeKind)> = if self.nodes.is_empty() {
            self.agent_names.iter().map(|n| (n.clone(), WorkflowNodeKind::Agent)).collect()
        } else {
            self.nodes.iter().map(|n| (n.name.clone(), n.kind)).collect()
        };
        let mut seen: std::collections::BTreeMap<String, u32> = Default::default();
        named
            .into_iter()
            .map(|(name, kind)| {
                let count = seen.entry(name.clone()).or_default();
                *count += 1;
                let id = if *count == 1 { name.clone() } else { format!("{name}#{count}") };
                Participant { id, name, kind }
            })
            .collect()
    }

    /// `maxIterations`, or the default of a looping kind.
    pub fn iterations(&self) -> u32 {
        self.max_iterations.unwrap_or(DEFAULT_MAX_ITERATIONS)
    }
}

/// What [`check`] asks of the world: whether an agent and a function exist.
pub struct Known<'a> {
    /// The agents of the tenant's catalog the definition names that exist.
    pub agents: &'a BTreeSet<String>,
    /// The registered functions.
    pub functions: &'a BTreeSet<String>,
}

/// Every problem that would keep the definition from running, each naming its field.
pub fn check(def: &WorkflowDefinition, known: &Known<'_>) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut problem = |code, field: &str, message: String| problems.push(Problem::new(code, field, message));
    if let Err(e) = crate::names::WorkflowName::parse(&def.name) {
        problem(ProblemCode::InvalidName, "name", e.0);
    }
    if def.display_name.as_ref().is_some_and(|d| d.chars().count() > MAX_DISPLAY_NAME_LEN) {
        problem(ProblemCode::LimitExceeded, "displayName", format!("At most {MAX_DISPLAY_NAME_LEN} characters."));
    }
    if def.description.as_ref().is_some_and(|d| d.chars().count() > MAX_DESCRIPTION_LEN) {
        problem(ProblemCode::LimitExceeded, "description", format!("At most {MAX_DESCRIPTION_LEN} characters."));
    }
    let kind = def.kind;
    match (def.agent_names.is_empty(), def.nodes.is_empty()) {
        (false, false) => problem(
            ProblemCode::NotApplicable,
            "nodes",
            "Set 'nodes' or 'agentNames', not both: they are two spellings of the same list.".into(),
        ),
        (true, true) => problem(
            ProblemCode::Required,
            if kind == WorkflowKind::Sequential { "nodes" } else { "agentNames" },
            format!("A {kind:?} workflow needs its participants."),
        ),
        (true, false) if kind != WorkflowKind::Sequential => problem(
            ProblemCode::NotApplicable,
            "nodes",
            format!("Only a Sequential workflow takes 'nodes'; a {kind:?} workflow lists its agents in 'agentNames'."),
        ),
        _ => {}
    }
    let participants = def.participants();
    if participants.len() > MAX_PARTICIPANTS {
        problem(ProblemCode::LimitExceeded, "agentNames", format!("At most {MAX_PARTICIPANTS} participants."));
    }
    let least = match kind {
        WorkflowKind::Handoff | WorkflowKind::GroupChat => 2,
        _ => 1,
    };
    if !participants.is_empty() && participants.len() < least {
        problem(
            ProblemCode::Required,
            "agentNames",
            format!("A {kind:?} workflow needs at least {least} agents to pass turns between."),
        );
    }
    let list = if def.nodes.is_empty() { "agentNames" } else { "nodes" };
    let mut seen = BTreeSet::new();
    for (i, p) in participants.iter().enumerate() {
        let field = if list == "nodes" { format!("nodes[{i}].name") } else { format!("agentNames[{i}]") };
        match p.kind {
            WorkflowNodeKind::Agent => {
                if let Err(e) = crate::names::AgentName::parse(&p.name) {
                    problem(ProblemCode::InvalidName, &field, e.0);
                } else if !known.agents.contains(&p.name) {
                    problem(ProblemCode::UnknownAgent, &field, format!("There is no agent named '{}'.", p.name));
                }
            }
            WorkflowNodeKind::Function => {
                if !known.functions.contains(&p.name) {
                    problem(
                        ProblemCode::UnknownFunction,
                        &field,
                        format!(
                            "No workflow function named '{}' is registered (GET /api/workflows/functions).",
                            p.name
                        ),
                    );
                }
            }
        }
        // Only a pipeline can use a node twice; a chat with the same agent twice is one agent.
        if !seen.insert(p.name.clone()) && kind != WorkflowKind::Sequential {
            problem(ProblemCode::Duplicate, &field, format!("'{}' is listed twice.", p.name));
        }
    }
    match (&def.manager_agent_name, kind) {
        (None, WorkflowKind::Magentic) => problem(
            ProblemCode::Required,
            "managerAgentName",
            "A Magentic workflow needs a manager agent: it plans and picks each step.".into(),
        ),
        (Some(_), WorkflowKind::Sequential | WorkflowKind::Concurrent | WorkflowKind::Handoff) => problem(
            ProblemCode::NotApplicable,
            "managerAgentName",
            format!("A {kind:?} workflow has no manager; only GroupChat and Magentic take one."),
        ),
        (Some(m), _) => {
            if let Err(e) = crate::names::AgentName::parse(m) {
                problem(ProblemCode::InvalidName, "managerAgentName", e.0);
            } else if !known.agents.contains(m) {
                problem(ProblemCode::UnknownAgent, "managerAgentName", format!("There is no agent named '{m}'."));
            } else if participants.iter().any(|p| &p.name == m) {
                problem(
                    ProblemCode::Duplicate,
                    "managerAgentName",
                    format!("'{m}' is a participant; the manager is a separate agent."),
                );
            }
        }
        (None, _) => {}
    }
    match def.max_iterations {
        Some(_) if !kind.loops() => problem(
            ProblemCode::NotApplicable,
            "maxIterations",
            format!("A {kind:?} workflow runs each node once; only Handoff, GroupChat and Magentic loop."),
        ),
        Some(n) if !(1..=MAX_ITERATIONS).contains(&n) => {
            problem(ProblemCode::OutOfRange, "maxIterations", format!("1 to {MAX_ITERATIONS}."))
        }
        _ => {}
    }
    if def.max_duration_seconds.is_some_and(|s| !(1..=MAX_DURATION_SECONDS).contains(&s)) {
        problem(ProblemCode::OutOfRange, "maxDurationSeconds", format!("1 to {MAX_DURATION_SECONDS} seconds."))
    }
    problems
}

/// The names a definition's agents could resolve to: its participants' and its manager's.
pub fn agent_references(def: &WorkflowDefinition) -> BTreeSet<String> {
    def.participants()
        .into_iter()
        .filter(|p| p.kind == WorkflowNodeKind::Agent)
        .map(|p| p.name)
        .chain(def.manager_agent_name.clone())
        .collect()
}

/// What a graph node stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum GraphNodeKind {
    /// Where the input enters.
    Start,
    Agent,
    Function,
    /// A `GroupChat` or `Magentic` manager.
    Manager,
    /// Where the answer leaves.
    End,
}

/// A node of the compiled graph; `id` is the executor id the run events carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GraphNode {
    pub id: String,
    pub name: String,
    pub kind: GraphNodeKind,
}

/// A possible move from one node to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GraphEdge {
    pub from: String,
    pub to: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// `GET /api/workflows/{name}/graph`: the nodes and edges the executor follows, and the same
/// as Mermaid flowchart text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowGraph {
    pub kind: WorkflowKind,
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<GraphEdge>,
    pub mermaid: String,
}

/// The start and end nodes' ids (no agent or function can be named so: names begin with a
/// letter or digit).
pub const START: &str = "_start";
pub const END: &str = "_end";

/// The graph of a definition that passed [`check`].
pub fn graph(def: &WorkflowDefinition) -> WorkflowGraph {
    let participants = def.participants();
    let node = |p: &Participant| GraphNode {
        id: p.id.clone(),
        name: p.name.clone(),
        kind: match p.kind {
            WorkflowNodeKind::Agent => GraphNodeKind::Agent,
            WorkflowNodeKind::Function => GraphNodeKind::Function,
        },
    };
    let mut nodes = vec![GraphNode { id: START.into(), name: "input".into(), kind: GraphNodeKind::Start }];
    nodes.extend(participants.iter().map(node));
    let manager = def.manager_agent_name.as_ref().map(|m| GraphNode {
        id: m.clone(),
        name: m.clone(),
        kind: GraphNodeKind::Manager,
    });
    nodes.extend(manager.clone());
    nodes.push(GraphNode { id: END.into(), name: "output".into(), kind: GraphNodeKind::End });
    let edge = |from: &str, to: &str, label: Option<&str>| GraphEdge {
        from: from.to_owned(),
        to: to.to_owned(),
        label: label.map(str::to_owned),
    };
    let ids: Vec<&str> = participants.iter().map(|p| p.id.as_str()).collect();
    let mut edges = Vec::new();
    match def.kind {
        WorkflowKind::Sequential => {
            let chain: Vec<&str> = std::iter::once(START).chain(ids.iter().copied()).chain([END]).collect();
            edges.extend(chain.windows(2).map(|w| edge(w[0], w[1], None)));
        }
        WorkflowKind::Concurrent => {
            for id in &ids {
                edges.push(edge(START, id, None));
                edges.push(edge(id, END, Some("merge")));
            }
        }
        WorkflowKind::Handoff => {
            if let Some(first) = ids.first() {
                edges.push(edge(START, first, None));
            }
            for from in &ids {
                for to in ids.iter().filter(|to| *to != from) {
                    edges.push(edge(from, to, Some("handoff")));
                }
                edges.push(edge(from, END, Some("answer")));
            }
        }
        WorkflowKind::GroupChat | WorkflowKind::Magentic => match &manager {
            Some(m) => {
                edges.push(edge(START, &m.id, None));
                for id in &ids {
                    edges.push(edge(&m.id, id, Some("turn")));
                    edges.push(edge(id, &m.id, None));
                }
                edges.push(edge(&m.id, END, Some("done")));
            }
            None => {
                let chain: Vec<&str> = std::iter::once(START).chain(ids.iter().copied()).collect();
                edges.extend(chain.windows(2).map(|w| edge(w[0], w[1], None)));
                if let (Some(first), Some(last)) = (ids.first(), ids.last()) {
                    edges.push(edge(last, first, Some("next round")));
                    edges.push(edge(last, END, Some("maxIterations")));
                }
            }
        },
    }
    let mermaid = mermaid(&nodes, &edges);
    WorkflowGraph { kind: def.kind, nodes, edges, mermaid }
}

/// Mermaid flowchart text: node keys `n0`, `n1`… (executor ids may hold characters Mermaid
/// reads as syntax), labels quoted.
fn mermaid(nodes: &[GraphNode], edges: &[GraphEdge]) -> String {
    let key = |id: &str| nodes.iter().position(|n| n.id == id).map_or_else(|| "n?".to_owned(), |i| format!("n{i}"));
    let quoted = |s: &str| s.replace('"', "#quot;");
    let mut text = String::from("flowchart LR\n");
    for (i, n) in nodes.iter().enumerate() {
        let label = quoted(&n.name);
        let shape = match n.kind {
            GraphNodeKind::Start | GraphNodeKind::End => format!("n{i}((\"{label}\"))"),
            GraphNodeKind::Function => format!("n{i}[[\"{label}\"]]"),
            GraphNodeKind::Manager => format!("n{i}{{\"{label}\"}}"),
            GraphNodeKind::Agent => format!("n{i}[\"{label}\"]"),
        };
        text.push_str("    ");
        text.push_str(&shape);
        text.push('\n');
    }
    for e in edges {
        let arrow = match &e.label {
            Some(l) => format!(" -->|\"{}\"| ", quoted(l)),
            None => " --> ".to_owned(),
        };
        text.push_str(&format!("    {}{arrow}{}\n", key(&e.from), key(&e.to)));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(kind: WorkflowKind, agents: &[&str]) -> WorkflowDefinition {
        WorkflowDefinition {
            name: "flow".into(),
            display_name: None,
            description: None,
            kind,
            agent_names: agents.iter().map(|a| (*a).to_owned()).collect(),
            nodes: Vec::new(),
            manager_agent_name: None,
            max_iterations: None,
            max_duration_seconds: None,
        }
    }

    fn problems(def: &WorkflowDefinition) -> Vec<(ProblemCode, String)> {
        let agents = ["a", "b", "m"].iter().map(|s| (*s).to_owned()).collect();
        let functions = ["count"].iter().map(|s| (*s).to_owned()).collect();
        check(def, &Known { agents: &agents, functions: &functions }).into_iter().map(|p| (p.code, p.field)).collect()
    }

    #[test]
    fn each_kind_takes_only_the_fields_it_can_run() {
        assert_eq!(problems(&def(WorkflowKind::Sequential, &["a", "b", "a"])), vec![]);
        assert_eq!(problems(&def(WorkflowKind::Handoff, &["a"])), vec![(ProblemCode::Required, "agentNames".into())]);
        assert_eq!(
            problems(&def(WorkflowKind::GroupChat, &["a", "a"])),
            vec![(ProblemCode::Duplicate, "agentNames[1]".into())]
        );
        assert_eq!(
            problems(&def(WorkflowKind::Magentic, &["a"])),
            vec![(ProblemCode::Required, "managerAgentName".into())]
        );
        let mut manager_is_participant = def(WorkflowKind::Magentic, &["a"]);
        manager_is_participant.manager_agent_name = Some("a".into());
        assert_eq!(problems(&manager_is_participant), vec![(ProblemCode::Duplicate, "managerAgentName".into())]);
        let mut sequential = def(WorkflowKind::Sequential, &[]);
        sequential.nodes = vec![
            WorkflowNodeReference { name: "a".into(), kind: WorkflowNodeKind::Agent },
            WorkflowNodeReference { name: "count".into(), kind: WorkflowNodeKind::Function },
            WorkflowNodeReference { name: "nope".into(), kind: WorkflowNodeKind::Function },
        ];
        sequential.max_iterations = Some(3);
        assert_eq!(
            problems(&sequential),
            vec![
                (ProblemCode::UnknownFunction, "nodes[2].name".into()),
                (ProblemCode::NotApplicable, "maxIterations".into())
            ]
        );
        let mut both = def(WorkflowKind::Concurrent, &["a"]);
        both.nodes = sequential.nodes.clone();
        assert!(problems(&both).contains(&(ProblemCode::NotApplicable, "nodes".into())));
        assert_eq!(
            problems(&def(WorkflowKind::Concurrent, &["zz"])),
            vec![(ProblemCode::UnknownAgent, "agentNames[0]".into())]
        );
    }

    #[test]
    fn a_repeated_node_gets_its_own_executor_id_and_the_graph_uses_them() {
        let d = def(WorkflowKind::Sequential, &["a", "b", "a"]);
        let ids: Vec<String> = d.participants().into_iter().map(|p| p.id).collect();
        assert_eq!(ids, ["a", "b", "a#2"]);
        let g = graph(&d);
        let edges: Vec<(String, String)> = g.edges.iter().map(|e| (e.from.clone(), e.to.clone())).collect();
        assert_eq!(
            edges,
            [(START, "a"), ("a", "b"), ("b", "a#2"), ("a#2", END)].map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
        assert!(g.mermaid.starts_with("flowchart LR\n"), "{}", g.mermaid);
        assert!(g.mermaid.contains("n3[\"a\"]") && g.mermaid.contains("n2 --> n3"), "{}", g.mermaid);
    }
}
