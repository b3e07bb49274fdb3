//! The endpoint groups and the deployments made of them: the one table that says which
//! routes a host serves.
//!
//! A [`Group`] is a set of routes that serve one thing; its handlers, settings and router
//! live in `handlers/src/<group>/`. A [`Deployment`] is what one Lambda function or one
//! Worker bundle serves: its groups, plus [`EVERYWHERE`] (metadata, the API document, the
//! widget and the security administration), which every deployment answers. The local
//! server and the `all` deployments serve [`ALL`].
//!
//! A serverless build names its deployment by constant (`groups::deployments::RUNS`), so the routers of
//! groups it does not serve are never referenced and not linked in. The Lambda binaries,
//! the Worker's `group-*` features and the SAM templates each list the deployments by name;
//! a test (`tests/tests/deployments.rs`) holds them to this table.

use axum::Router;

use crate::state::AppState;

/// An endpoint group.
#[derive(Clone, Copy)]
pub struct Group {
    /// The folder and the OpenAPI tag (`agents`, `runs`, …).
    pub name: &'static str,
    pub router: fn() -> Router<AppState>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// `/api/meta`, `/api/openapi.json`, `/embed.js`.
pub const META: Group = Group { name: "meta", router: crate::meta::router };
/// API keys, the audit trail, approval rules, tenants.
pub const SECURITY: Group = Group { name: "security", router: crate::security::router };
/// Agent definitions, their versions, and starting a run (`POST /api/agents/{name}/run`).
pub const AGENTS: Group = Group { name: "agents", router: crate::agents::router };
/// Workflow definitions, their graph and functions; workflow runs, checkpoints, resumes and
/// the requests they ask a person (their runs stream, like an agent's).
pub const WORKFLOWS: Group = Group { name: "workflows", router: crate::workflows::router };
/// Skills (`/api/skills…`): the instructions and resources agents load, with their versions.
pub const SKILLS: Group = Group { name: "skills", router: crate::skills::router };
/// Reading runs, their event logs and statistics; cancelling.
pub const RUNS: Group = Group { name: "runs", router: crate::runs::router };
pub const SESSIONS: Group = Group { name: "sessions", router: crate::sessions::router };
/// The approval mailbox: pending requests and their decisions.
pub const APPROVALS: Group = Group { name: "approvals", router: crate::approvals::router };
pub const JOBS: Group = Group { name: "jobs", router: crate::jobs::router };
pub const WEBHOOKS: Group = Group { name: "webhooks", router: crate::webhooks::router };
pub const SCHEDULES: Group = Group { name: "schedules", router: crate::schedules::router };
/// Trigger definitions and the signed accept endpoint.
pub const TRIGGERS: Group = Group { name: "triggers", router: crate::triggers::router };
/// The model catalog and each provider's health (`/api/models…`).
pub const MODELS: Group = Group { name: "models", router: crate::models::router };
/// `/mcp`: exposed agents as MCP tools (Streamable HTTP, stateless).
pub const MCP: Group = Group { name: "mcp", router: crate::mcp::router };
/// Tenants' remote MCP servers, whose tools agents name (`/api/mcp-servers…`).
pub const MCP_SERVERS: Group = Group { name: "mcp_servers", router: crate::mcp_servers::router };
/// `/v1/chat/completions`, `/v1/models`, `/v1/responses`, `/v1/conversations`.
pub const OPENAI: Group = Group { name: "openai", router: crate::openai::router };

/// The A2A server: `/a2a/{agent}` and its card (`crate::a2a`), a protocol surface.
pub const A2A: Group = Group { name: "a2a", router: crate::a2a::router };

/// The groups every deployment serves.
pub const EVERYWHERE: &[Group] = &[META, SECURITY];

/// A deployable unit: one Lambda function, one Worker bundle.
#[derive(Debug, Clone, Copy)]
pub struct Deployment {
    /// `agents` → the Lambda function `tracon-agents`, the Worker feature `group-agents`.
    pub name: &'static str,
    /// Its groups, besides [`EVERYWHERE`].
    pub groups: &'static [Group],
    /// Whether its Lambda function streams responses (server-sent events).
    pub streams: bool,
}

impl Deployment {
    /// The routes of its groups (not yet behind the access layers: see [`crate::app`]).
    pub fn routes(&self) -> Router<AppState> {
        self.groups.iter().fold(Router::new(), |routes, group| routes.merge((group.router)()))
    }
}

/// The deployments, each named as its Lambda function (`tracon-<name>`), Worker feature
/// (`group-<name>`) and wrangler environment.
pub mod deployments {
    use super::Deployment;

    /// Agent and workflow definitions, their live runs, the model catalog they pick from, the
    /// skills and remote MCP servers they name, and the MCP server that runs agents for
    /// outside callers.
    pub const AGENTS: Deployment = Deployment {
        name: "agents",
        groups: &[super::AGENTS, super::WORKFLOWS, super::MODELS, super::SKILLS, super::MCP_SERVERS, super::MCP],
        streams: true,
    };
    /// Everything that follows, decides or queues runs.
    pub const RUNS: Deployment = Deployment {
        name: "runs",
        groups: &[
            super::RUNS,
            super::APPROVALS,
            super::JOBS,
            super::WEBHOOKS,
            super::OPENAI,
            super::SCHEDULES,
            super::TRIGGERS,
            super::A2A,
        ],
        streams: true,
    };
    pub const SESSIONS: Deployment = Deployment { name: "sessions", groups: &[super::SESSIONS], streams: false };
    /// Every group in one function or bundle.
    pub const ALL: Deployment = Deployment {
        name: "all",
        groups: &[
            super::AGENTS,
            super::WORKFLOWS,
            super::MODELS,
            super::SKILLS,
            super::MCP_SERVERS,
            super::RUNS,
            super::SESSIONS,
            super::APPROVALS,
            super::JOBS,
            super::WEBHOOKS,
            super::OPENAI,
            super::SCHEDULES,
            super::TRIGGERS,
            super::MCP,
            super::A2A,
        ],
        streams: true,
    };

    /// Every deployment, in the order the docs list them.
    pub const EVERY: &[Deployment] = &[ALL, AGENTS, RUNS, SESSIONS];
}
