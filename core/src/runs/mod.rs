//! Running an agent, end to end: the service every run-starting surface calls.
//!
//! - [`request`] — what a surface asks for ([`request::RunRequest`]) and why a start is refused;
//! - [`input`] — the rules its input is held to (the message limit, culture tags), and
//!   [`answers`] — where a tool answer a caller sends stands;
//! - [`prepare`] — everything that can refuse a run before anything streams (with the
//!   pre-flight check of the prompt against its model's context window, [`preflight`]);
//! - [`estimate`] — a run's prompt counted against that window, without running it;
//! - [`execute`] — a prepared run to its end: the turn, the session save, the terminal event;
//! - [`outcome`] — how a run ended;
//! - [`queued`] — runs accepted for a worker, and the job handler that executes them;
//! - [`reconcile`] — closing runs whose executor went away;
//! - [`continuation`] — continuing them as new runs from the step ledger;
//! - [`tree`] and [`children`] — a run's place in its call tree, the budget the tree shares,
//!   and the child runs an agent's generated agent tools start;
//! - [`store`] and [`memory`] — the run records, their port and the in-memory store.
//!
//! Nothing here names a web framework: the HTTP handlers parse, call these, and map the
//! outcome to a response.

pub mod admission;
pub mod answers;
pub mod caller;
pub mod children;
pub mod continuation;
pub mod drain;
pub mod estimate;
pub mod execute;
pub mod input;
pub mod launch;
pub mod memory;
pub mod opening;
pub mod outcome;
pub mod preflight;
pub mod prepare;
pub mod queued;
pub mod reconcile;
pub mod replay;
pub mod request;
pub mod store;
pub mod tree;
