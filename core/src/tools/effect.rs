//! [`ToolEffect`]: what a tool does to the world, as data every layer shares.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a tool does to the world. Information, not a gate: shown as a badge and recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub enum ToolEffect {
    #[default]
    Read,
    Write,
    Destructive,
    External,
}
