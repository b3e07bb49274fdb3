//! `POST /api/agents/{name}/estimate`: how big a run's prompt would be — the agent compiled
//! with the request's culture and parameters, its tools, the session's history, the new
//! message with its documents — against its model's context window, without running it,
//! whether the pre-flight check is on or off. Nothing is written and no provider is called.
//!
//! The count is the same estimate the pre-flight check uses ([`crate::tokens`]): an
//! approximation, which the answer says (`approximate: true`).

use serde::Serialize;
use utoipa::ToSchema;

use crate::runs::prepare::{check_documents, context_window, load_session, turn_messages};
use crate::runs::request::{RunRequest, StartError};
use crate::runtime::Runtime;
use crate::tokens::PromptTokens;

/// A run's prompt against its model's context window.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    pub agent: String,
    pub provider: String,
    pub model: String,
    /// The estimated tokens of the whole first model call (the parts below and the answer's
    /// priming).
    pub prompt_tokens: u64,
    pub breakdown: PromptTokens,
    /// The model's context window from the model catalog; `null` when the catalog does not
    /// list it (then nothing is compared and the pre-flight check never refuses).
    pub context_window_tokens: Option<u64>,
    /// The share of the window held back for the answer (`Tracon:Preflight:ReserveRatio`).
    pub reserve_ratio: f64,
    /// `contextWindowTokens − allowedPromptTokens`; `null` without a window.
    pub reserve_tokens: Option<u64>,
    /// The most the prompt may be estimated at: `floor(contextWindowTokens × (1 − reserveRatio))`;
    /// `null` without a window.
    pub allowed_prompt_tokens: Option<u64>,
    /// `allowedPromptTokens − promptTokens`: how much more the prompt may grow before the
    /// pre-flight check refuses it (negative: it is over); `null` without a window.
    pub remaining_tokens: Option<i64>,
    /// Whether the prompt is within `allowedPromptTokens`; `null` without a window.
    pub fits: Option<bool>,
    /// Whether the pre-flight check is on (`Tracon:Preflight:Enabled`): with it on, a run that
    /// does not fit is refused before any provider is called.
    pub preflight_enabled: bool,
    /// Always `true`: the count is an estimate, not a provider's tokenizer.
    pub approximate: bool,
}

/// Counts `request`'s prompt (see the module documentation). Refuses what a run would refuse
/// first: an unknown agent, bad parameters or documents, a definition that no longer compiles.
pub async fn estimate(runtime: &Runtime, request: &RunRequest) -> Result<Estimate, StartError> {
    crate::runs::input::check_run_input(&runtime.settings.limits, &request.message, request.culture.as_deref())
        .map_err(StartError::Input)?;
    check_documents(&request.documents)?;
    let agent = runtime
        .catalog
        .compile(&request.tenant, &request.agent, request.culture.as_deref(), &request.parameters)
        .await?;
    let history = load_session(runtime, request).await?.map(|s| s.history).unwrap_or_default();
    let turn = turn_messages(&agent, request, &history, &[]);
    let breakdown = PromptTokens::of(agent.instructions.as_deref(), &agent.tool_specs, &history, &turn);
    let prompt_tokens = breakdown.total();
    let settings = runtime.settings.preflight;
    let context_window_tokens = context_window(runtime, &agent);
    let budget = context_window_tokens.map(|w| settings.budget(w));
    let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    Ok(Estimate {
        agent: agent.name.clone(),
        provider: agent.definition.model.provider.clone(),
        model: agent.definition.model.model.clone(),
        prompt_tokens,
        breakdown,
        context_window_tokens,
        reserve_ratio: settings.reserve_ratio,
        reserve_tokens: budget.map(|b| b.reserve_tokens),
        allowed_prompt_tokens: budget.map(|b| b.allowed_prompt_tokens),
        remaining_tokens: budget.map(|b| signed(b.allowed_prompt_tokens).saturating_sub(signed(prompt_tokens))),
        fits: budget.map(|b| prompt_tokens <= b.allowed_prompt_tokens),
        preflight_enabled: settings.enabled,
        approximate: true,
    })
}
