//! An approximate token count of a prompt — what the pre-flight check and
//! `POST /api/agents/{name}/estimate` compare with a model's context window.
//!
//! **Approximate, by design.** No tokenizer ships here (a byte-pair vocabulary is megabytes,
//! and the Worker bundle has no room for one), and each provider tokenizes differently anyway.
//! [`count_text`] splits text the way a byte-pair tokenizer of OpenAI's kind roughly does —
//! a short word is one token and a long one a few, digits go in threes, runs of punctuation
//! and whitespace merge, a CJK character is a token of its own — and the message, tool and
//! reply overheads follow OpenAI's chat format. For English prose, code and JSON it lands near
//! what OpenAI's tokenizers count; for other text it can be off by tens of percent. It is
//! deterministic: the same prompt always counts the same.

use serde::Serialize;
use utoipa::ToSchema;

use crate::model::{Message, ToolSpec};

/// What every message costs besides its text (role and delimiters).
pub const PER_MESSAGE: u64 = 4;
/// The priming of the model's answer, once per prompt.
pub const PER_REPLY: u64 = 3;
/// What every offered tool costs besides its name, description and schema text.
pub const PER_TOOL: u64 = 8;
/// What every tool call in an assistant message costs besides its name and arguments.
pub const PER_CALL: u64 = 3;

/// A prompt's estimated tokens, by part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptTokens {
    /// The system text: the agent's instructions (shared block, culture, parameters applied).
    pub instructions: u64,
    /// The offered tools' names, descriptions and parameter schemas.
    pub tools: u64,
    /// The conversation before this turn (a session's, or the one a caller sent).
    pub history: u64,
    /// This turn's new messages: the user's message with its documents, or the tool results it
    /// answers with.
    pub message: u64,
}

impl PromptTokens {
    /// The parts of a model call with `system`, `tools`, the earlier `history` and this turn's
    /// `new` messages.
    pub fn of(system: Option<&str>, tools: &[ToolSpec], history: &[Message], new: &[Message]) -> Self {
        Self {
            instructions: system.map_or(0, |s| PER_MESSAGE + count_text(s)),
            tools: tools.iter().map(count_tool).sum(),
            history: history.iter().map(count_message).sum(),
            message: new.iter().map(count_message).sum(),
        }
    }

    /// The whole prompt, the answer's priming included.
    pub fn total(&self) -> u64 {
        self.instructions + self.tools + self.history + self.message + PER_REPLY
    }
}

/// One message's tokens.
pub fn count_message(message: &Message) -> u64 {
    PER_MESSAGE
        + match message {
            Message::User { text } => count_text(text),
            Message::Assistant { text, tool_calls, reasoning } => {
                text.as_deref().map_or(0, count_text)
                    + tool_calls.iter().map(|c| PER_CALL + count_text(&c.name) + count_text(&c.arguments)).sum::<u64>()
                    + reasoning.iter().map(|r| count_text(&r.text)).sum::<u64>()
            }
            Message::Tool { name, content, .. } => count_text(name) + count_text(content),
        }
}

/// One offered tool's tokens.
pub fn count_tool(tool: &ToolSpec) -> u64 {
    PER_TOOL + count_text(&tool.name) + count_text(&tool.description) + count_text(&tool.parameters.to_string())
}

/// What a character starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Letter,
    Digit,
    Space,
    Break,
    Punctuation,
    /// A letter of another alphabet (accented Latin, Cyrillic, Greek, Arabic, …).
    Foreign,
    /// A CJK ideograph, kana or hangul syllable: about one token each.
    Ideograph,
    /// An emoji or another symbol outside ASCII: usually several bytes, two tokens or so.
    Symbol,
}

fn kind(c: char) -> Kind {
    match c {
        'a'..='z' | 'A'..='Z' => Kind::Letter,
        '0'..='9' => Kind::Digit,
        ' ' => Kind::Space,
        '\n' | '\r' | '\t' => Kind::Break,
        c if c.is_ascii() => Kind::Punctuation,
        '\u{2E80}'..='\u{9FFF}' | '\u{AC00}'..='\u{D7AF}' | '\u{F900}'..='\u{FAFF}' | '\u{FF00}'..='\u{FFEF}' => {
            Kind::Ideograph
        }
        c if c.is_alphabetic() => Kind::Foreign,
        _ => Kind::Symbol,
    }
}

/// The estimated tokens of `text` (see the module documentation).
pub fn count_text(text: &str) -> u64 {
    let mut tokens = 0u64;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let k = kind(c);
        let mut len = 1u64;
        let mut lower = c.is_ascii_lowercase();
        while let Some(&next) = chars.peek() {
            let same = kind(next) == k && !matches!(k, Kind::Ideograph | Kind::Symbol);
            // camelCase splits where a lower-case letter meets an upper-case one.
            if !same || (k == Kind::Letter && lower && next.is_ascii_uppercase()) {
                break;
            }
            lower = next.is_ascii_lowercase();
            len += 1;
            chars.next();
        }
        tokens += match k {
            // Short words are one token; a long word is a few pieces.
            Kind::Letter => 1 + (len - 1) / 8,
            Kind::Digit | Kind::Punctuation => len.div_ceil(3),
            // One space joins the word after it; more are indentation, about four a token.
            Kind::Space => (len - 1).div_ceil(4),
            Kind::Break | Kind::Foreign => len.div_ceil(2),
            Kind::Ideograph => 1,
            Kind::Symbol => 2,
        };
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn english_prose_counts_about_a_token_a_word() {
        // OpenAI's cl100k_base counts 9 tokens here.
        assert_eq!(count_text("The quick brown fox jumps over the lazy dog"), 9);
        assert_eq!(count_text(""), 0);
        assert_eq!(count_text("Hello, world!"), 4);
    }

    #[test]
    fn long_words_digits_json_and_other_scripts_cost_more() {
        assert_eq!(count_text("internationalization"), 3);
        assert_eq!(count_text("getOrderStatus"), 3, "camelCase splits");
        assert_eq!(count_text("1234567"), 3, "digits go in threes");
        let json = r#"{"type":"object","properties":{"orderId":{"type":"string"}}}"#;
        let n = count_text(json);
        assert!((14..=20).contains(&n), "{n}");
        assert_eq!(count_text("日本語"), 3);
        assert!(count_text("Привет мир") >= 4);
        assert_eq!(count_text("👍"), 2);
    }

    #[test]
    fn the_count_is_deterministic_and_grows_with_the_text() {
        let short = "Where is my order 123?";
        let long = short.repeat(100);
        assert_eq!(count_text(short), count_text(short));
        assert!(count_text(&long) >= 90 * count_text(short));
    }

    #[test]
    fn a_prompt_counts_each_part_and_the_overheads() {
        let tools = [ToolSpec {
            name: "get_order_status".into(),
            description: "Looks an order up.".into(),
            parameters: serde_json::json!({"type": "object"}),
        }];
        let history = [
            Message::user("hi"),
            Message::Assistant { text: Some("hello".into()), tool_calls: vec![], reasoning: vec![] },
        ];
        let new = [Message::user("Where is order 42?")];
        let p = PromptTokens::of(Some("Be brief."), &tools, &history, &new);
        assert_eq!(p.instructions, PER_MESSAGE + count_text("Be brief."));
        assert_eq!(p.history, 2 * PER_MESSAGE + 2);
        assert_eq!(p.message, PER_MESSAGE + count_text("Where is order 42?"));
        assert!(p.tools > PER_TOOL);
        assert_eq!(p.total(), p.instructions + p.tools + p.history + p.message + PER_REPLY);
        assert_eq!(PromptTokens::of(None, &[], &[], &[]).total(), PER_REPLY);
    }
}
