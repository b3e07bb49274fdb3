//! The rules a run's input is held to before anything runs, the same on every surface:
//!
//! - a message (the native `message`, each OpenAI chat message, each Responses input item and
//!   `instructions`, a trigger's event, a schedule's message) is at most
//!   `Tracon:Limits:MaxMessageChars` characters ([`InputLimits`], 100,000 by default) — a
//!   longer one would go to the provider in full, and be paid for;
//! - a `culture` is a well-formed BCP 47 language tag ([`crate::culture`]); the same rule
//!   holds for a definition's `instructionsByCulture` keys.
//!
//! A break is an [`InputRefusal`] naming the field: `400 validation_failed`. `launch` holds
//! every request's message and culture to them; the OpenAI surfaces check the messages a
//! request carries besides its last one with [`InputLimits::check_message`], under their own
//! names.

use crate::config::{Config, ConfigError};
use crate::culture::MAX_CULTURE_LEN;

/// `Tracon:Limits:MaxMessageChars` when it is not set.
pub const DEFAULT_MAX_MESSAGE_CHARS: usize = 100_000;

/// `Tracon:Limits:*`: how large a run's input may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLimits {
    /// `MaxMessageChars`: the most characters (Unicode scalar values) one message may have.
    pub max_message_chars: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        Self { max_message_chars: DEFAULT_MAX_MESSAGE_CHARS }
    }
}

impl InputLimits {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let max_message_chars =
            config.parse::<usize>("Tracon:Limits:MaxMessageChars")?.unwrap_or(DEFAULT_MAX_MESSAGE_CHARS);
        if max_message_chars == 0 {
            return Err(ConfigError::Message("Tracon__Limits__MaxMessageChars must be positive.".into()));
        }
        Ok(Self { max_message_chars })
    }

    /// Refuses `text` (the request's `field`) over the message limit.
    pub fn check_message(&self, field: &str, text: &str) -> Result<(), InputRefusal> {
        // No text of at most max bytes has more characters than that: most never count.
        if text.len() <= self.max_message_chars {
            return Ok(());
        }
        let chars = text.chars().count();
        if chars <= self.max_message_chars {
            return Ok(());
        }
        Err(InputRefusal::MessageTooLong { field: field.to_owned(), chars, max_chars: self.max_message_chars })
    }
}

/// Input that breaks a rule (`400 validation_failed`, naming the field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputRefusal {
    /// A message over `Tracon:Limits:MaxMessageChars`.
    MessageTooLong { field: String, chars: usize, max_chars: usize },
    /// A culture that is not a well-formed BCP 47 tag.
    Culture { field: String },
}

impl InputRefusal {
    /// The request field at fault (`message`, `messages[2].content`, `culture` …).
    pub fn field(&self) -> &str {
        match self {
            Self::MessageTooLong { field, .. } | Self::Culture { field } => field,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Self::MessageTooLong { field, chars, max_chars } => format!(
                "'{field}' has {chars} characters; a message is at most {max_chars} (Tracon:Limits:MaxMessageChars). Send long reference text as documents, or shorten it."
            ),
            Self::Culture { field } => format!(
                "'{field}' must be a BCP 47 language tag of at most {MAX_CULTURE_LEN} characters, such as 'en', 'tr-TR', 'pt-BR' or 'zh-Hant-TW'."
            ),
        }
    }
}

/// Refuses a `culture` (the request's `field`) that is not a culture tag.
pub fn check_culture(field: &str, culture: &str) -> Result<(), InputRefusal> {
    if crate::culture::is_culture_tag(culture) {
        Ok(())
    } else {
        Err(InputRefusal::Culture { field: field.to_owned() })
    }
}

/// What every run's input is held to: its message within the limit, its culture a tag.
pub fn check_run_input(limits: &InputLimits, message: &str, culture: Option<&str>) -> Result<(), InputRefusal> {
    limits.check_message("message", message)?;
    match culture {
        Some(culture) => check_culture("culture", culture),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_limit_counts_characters_not_bytes() {
        let limits = InputLimits { max_message_chars: 3 };
        assert!(limits.check_message("message", "ééé").is_ok(), "6 bytes, 3 characters");
        let refusal = limits.check_message("messages[1].content", "abcd").unwrap_err();
        assert_eq!(
            refusal,
            InputRefusal::MessageTooLong { field: "messages[1].content".into(), chars: 4, max_chars: 3 }
        );
        assert_eq!(refusal.field(), "messages[1].content");
        assert!(refusal.message().contains("Tracon:Limits:MaxMessageChars"));
    }

    #[test]
    fn the_limit_is_configured_positive() {
        let config = |v: &str| Config::from_pairs([("Tracon__Limits__MaxMessageChars", v.to_owned())]);
        assert_eq!(InputLimits::from_config(&Config::default()).unwrap(), InputLimits::default());
        assert_eq!(InputLimits::from_config(&config("500")).unwrap().max_message_chars, 500);
        assert!(InputLimits::from_config(&config("0")).is_err());
        assert!(InputLimits::from_config(&config("lots")).is_err());
    }
}
