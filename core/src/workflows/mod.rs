//! Workflows: several agents (and code) run together as one orchestration you define and
//! can watch — `Sequential`, `Concurrent`, `Handoff`, `GroupChat`, `Magentic`.
//!
//! - [`definition`]: the definition as data, the rules a save checks, the graph.
//! - [`functions`]: function nodes registered in code, with their retry policy.
//! - [`checkpoints`]: the checkpoint port and its memory store.
//! - [`execute`]: a run — root run, one run per agent node, checkpoints, human input.
//! - [`approvals`]: tool approvals inside agent nodes, resumed through the approval mailbox.
//! - [`queued`]: queued runs (`Prefer: respond-async`, triggers), a super-step per
//!   invocation where the host's soft deadline says so, and crash continuation.
//! - [`validate`]: a definition checked against the catalog and the registered functions.
//!
//! Definitions are stored by the [`crate::definitions::DefinitionStore`] port, like agents.

pub mod approvals;
pub mod checkpoints;
pub mod definition;
pub mod execute;
pub mod functions;
pub mod queued;
pub mod validate;

pub use checkpoints::{Checkpoint, CheckpointRef, CheckpointStore, InputRequest};
pub use definition::{WorkflowDefinition, WorkflowKind};

pub use validate::validate;
