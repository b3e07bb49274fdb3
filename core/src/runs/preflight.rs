//! The pre-flight check's settings and arithmetic (`Tracon:Preflight:*`): how much of a
//! model's context window a prompt may take, and the refusal when it takes more.
//!
//! Off by default — the token count is an estimate ([`crate::tokens`]), and a wrong one
//! would stop a run that would have succeeded. On, every run whose model has a
//! `contextWindowTokens` in the model catalog is checked in `prepare` (and before a run is
//! queued), before any provider is called: a prompt estimated over
//! `floor(window × (1 − ReserveRatio))` tokens is refused (`StartError::ContextWindow`). A
//! model without a known window is never refused — there is nothing to compare with.

use crate::config::{Config, ConfigError};

/// The share of the window held back for the answer unless configured (the spec's default).
pub const DEFAULT_RESERVE_RATIO: f64 = 0.2;

/// `Tracon:Preflight:Enabled` (false) and `Tracon:Preflight:ReserveRatio` (0.2, from 0 up to
/// but not including 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PreflightSettings {
    pub enabled: bool,
    pub reserve_ratio: f64,
}

impl Default for PreflightSettings {
    fn default() -> Self {
        Self { enabled: false, reserve_ratio: DEFAULT_RESERVE_RATIO }
    }
}

/// What a context window leaves for the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Held back for the answer: `window − allowed`.
    pub reserve_tokens: u64,
    /// The most a prompt may be estimated at: `floor(window × (1 − reserve ratio))`.
    pub allowed_prompt_tokens: u64,
}

impl PreflightSettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        let reserve_ratio = config.parse::<f64>("Tracon:Preflight:ReserveRatio")?.unwrap_or(d.reserve_ratio);
        if !(0.0..1.0).contains(&reserve_ratio) {
            return Err(ConfigError::Message(
                "Tracon__Preflight__ReserveRatio is a share of the context window, from 0 up to (not including) 1."
                    .into(),
            ));
        }
        Ok(Self { enabled: config.bool("Tracon:Preflight:Enabled")?.unwrap_or(d.enabled), reserve_ratio })
    }

    /// What a window of `context_window_tokens` leaves for the prompt.
    pub fn budget(&self, context_window_tokens: u64) -> Budget {
        let allowed = (context_window_tokens as f64 * (1.0 - self.reserve_ratio)).floor();
        let allowed_prompt_tokens = (allowed.max(0.0) as u64).min(context_window_tokens);
        Budget { reserve_tokens: context_window_tokens - allowed_prompt_tokens, allowed_prompt_tokens }
    }
}

/// A prompt the pre-flight check refused: estimated over what its model's window allows.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextWindowExceeded {
    pub provider: String,
    pub model: String,
    pub estimated_prompt_tokens: u64,
    pub allowed_prompt_tokens: u64,
    pub context_window_tokens: u64,
    pub reserve_ratio: f64,
}

impl ContextWindowExceeded {
    /// What happened, in our words.
    pub fn message(&self) -> String {
        format!(
            "The prompt is estimated at {} tokens, over the {} this run may send: model '{}' has a context window of {} tokens, {}% of which is held back for the answer. Shorten the conversation, the documents or the instructions, or start a new session.",
            self.estimated_prompt_tokens,
            self.allowed_prompt_tokens,
            crate::names::truncate_for_message(&self.model),
            self.context_window_tokens,
            (self.reserve_ratio * 100.0).round()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_with_a_fifth_held_back() {
        let s = PreflightSettings::from_config(&Config::default()).unwrap();
        assert_eq!(s, PreflightSettings { enabled: false, reserve_ratio: 0.2 });
        assert_eq!(s.budget(1000), Budget { reserve_tokens: 200, allowed_prompt_tokens: 800 });
        assert_eq!(s.budget(1001), Budget { reserve_tokens: 201, allowed_prompt_tokens: 800 });
        let none = PreflightSettings { enabled: true, reserve_ratio: 0.0 };
        assert_eq!(none.budget(1000), Budget { reserve_tokens: 0, allowed_prompt_tokens: 1000 });
    }

    #[test]
    fn a_ratio_outside_zero_to_one_is_a_configuration_error() {
        for bad in ["1", "-0.1", "2", "NaN", "lots"] {
            let c = Config::from_pairs([("Tracon__Preflight__ReserveRatio", bad)]);
            let err = PreflightSettings::from_config(&c).unwrap_err().to_string();
            assert!(err.contains("ReserveRatio"), "{bad}: {err}");
        }
        let c =
            Config::from_pairs([("Tracon__Preflight__Enabled", "true"), ("Tracon__Preflight__ReserveRatio", "0.5")]);
        assert_eq!(
            PreflightSettings::from_config(&c).unwrap(),
            PreflightSettings { enabled: true, reserve_ratio: 0.5 }
        );
    }
}
