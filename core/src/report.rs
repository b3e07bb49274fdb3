//! The validation report: every problem a definition has, each naming its field.
//!
//! `POST /api/agents/validate` returns a [`ValidationReport`] with `200`; the save path runs
//! the same checks and answers `400` carrying the same problems.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A stable, machine-matchable problem kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProblemCode {
    InvalidName,
    Required,
    LimitExceeded,
    OutOfRange,
    Duplicate,
    InvalidCulture,
    InvalidParameter,
    InvalidResponseFormat,
    UnknownProvider,
    UnknownTool,
    /// A `{{name}}` placeholder that names no declared parameter.
    UnknownParameter,
    UnknownCallableAgent,
    CallableAgentCycle,
    UnknownSharedInstructions,
    NestedSharedInstructions,
    UnknownProviderSetting,
    InvalidProviderSetting,
    /// A harness setting that cannot work: an unknown loop criterion kind, a judge without a
    /// binding.
    InvalidHarness,
    /// A workflow names an agent the catalog does not have.
    UnknownAgent,
    /// A workflow names a function no code registered.
    UnknownFunction,
    /// A field this kind of workflow does not use, or two fields that exclude each other.
    NotApplicable,
    /// JSON output asked of a model the model catalog lists as unable to give it.
    StructuredOutputUnsupported,
    /// A provider the tenant's egress policy does not allow.
    ProviderNotAllowed,
    /// A skill name in `skillNames` that no code skill and no stored skill of the tenant has.
    UnknownSkill,
    /// A skill script, or a definition asking to run one: not supported on any host.
    SkillScriptsUnsupported,
    /// An `mcpResourceUris` entry whose server is not registered, or whose URI the server
    /// does not advertise.
    UnknownMcpResource,
}

/// One thing wrong with a definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    pub code: ProblemCode,
    /// The JSON path of the offending field (`model.provider`, `toolNames[2]`).
    pub field: String,
    pub message: String,
}

impl Problem {
    pub fn new(code: ProblemCode, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code, field: field.into(), message: message.into() }
    }
}

/// The answer of a validation: valid, or the list of problems.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidationReport {
    pub valid: bool,
    pub problems: Vec<Problem>,
}

impl ValidationReport {
    pub fn from_problems(problems: Vec<Problem>) -> Self {
        Self { valid: problems.is_empty(), problems }
    }
}
