//! Names and identifiers that cross a trust boundary, parsed once.
//!
//! Use [`AgentName`] for anything that addresses an agent (URL path segments, definition
//! names, callable-agent and shared-instructions references), [`ToolName`] for tool
//! registrations and references, [`TenantId`] for the tenant every store call carries, and
//! [`RunId`] for runs. Constructing one validates it; holding one proves it is valid.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest agent name accepted anywhere (definitions, paths, references).
pub const MAX_AGENT_NAME_LEN: usize = 64;
/// Longest tool name; the OpenAI and Anthropic function-name limit.
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// Why a name was refused. The message is ours and safe to show.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidName(pub String);

/// An agent name: 1–64 characters, lowercase ASCII letters, digits, `.`, `_` or `-`,
/// starting with a letter or digit. Lowercase only, so two names never differ by case
/// alone and the name is safe in a URL path and as an OpenAI `model` value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct AgentName(String);

impl AgentName {
    /// What [`Self::parse`] accepts, as an ECMA regular expression (the OpenAPI document's).
    pub const PATTERN: &'static str = "^[a-z0-9][a-z0-9._-]{0,63}$";

    pub fn parse(value: &str) -> Result<Self, InvalidName> {
        check_name("An agent", "agent", value).map(|()| Self(value.to_owned()))
    }
}

impl<'de> Deserialize<'de> for AgentName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        AgentName::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl AsRef<str> for AgentName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The rules of an agent's (and a workflow's) name; `article_noun` and `noun` name the kind in
/// the refusal.
fn check_name(article_noun: &str, noun: &str, value: &str) -> Result<(), InvalidName> {
    if value.is_empty() {
        return Err(InvalidName(format!("{article_noun} name must not be empty.")));
    }
    if value.len() > MAX_AGENT_NAME_LEN {
        return Err(InvalidName(format!(
            "{article_noun} name is at most {MAX_AGENT_NAME_LEN} characters; this one has {}.",
            value.chars().count()
        )));
    }
    let mut chars = value.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_' || c == '.');
    if !first_ok || !rest_ok {
        return Err(InvalidName(format!(
            "'{}' is not a valid {noun} name: use lowercase letters, digits, '.', '_' or '-', starting with a letter or digit.",
            truncate_for_message(value)
        )));
    }
    Ok(())
}

/// A workflow name: the rules of an [`AgentName`] (a workflow and an agent may share a name;
/// they live in different catalogs and URLs).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct WorkflowName(String);

impl WorkflowName {
    /// The syntax [`Self::parse`] accepts (an agent name's), as a JSON Schema pattern.
    pub const PATTERN: &'static str = AgentName::PATTERN;

    pub fn parse(value: &str) -> Result<Self, InvalidName> {
        check_name("A workflow", "workflow", value).map(|()| Self(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WorkflowName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for WorkflowName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A skill name, the Agent Skills format's rule: 1–64 characters of lowercase ASCII letters,
/// digits and `-`, neither starting nor ending with `-` and never `--`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct SkillName(String);

/// Longest skill name (the Agent Skills format's limit).
pub const MAX_SKILL_NAME_LEN: usize = 64;

impl SkillName {
    /// What [`Self::parse`] accepts apart from the length, as an ECMA regular expression (the
    /// OpenAPI document's, beside `maxLength: 64`).
    pub const PATTERN: &'static str = "^[a-z0-9]+(-[a-z0-9]+)*$";

    pub fn parse(value: &str) -> Result<Self, InvalidName> {
        if value.is_empty() || value.len() > MAX_SKILL_NAME_LEN {
            return Err(InvalidName(format!("A skill name is 1 to {MAX_SKILL_NAME_LEN} characters long.")));
        }
        let chars_ok = value.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !chars_ok || value.starts_with('-') || value.ends_with('-') || value.contains("--") {
            return Err(InvalidName(format!(
                "'{}' is not a valid skill name: use lowercase letters, digits and single '-' between them.",
                truncate_for_message(value)
            )));
        }
        Ok(Self(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SkillName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for SkillName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A tool name: 1–64 characters of ASCII letters, digits, `_` or `-`, starting with a
/// letter — the intersection of what the OpenAI and Anthropic APIs accept.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ToolName(String);

impl ToolName {
    /// What [`Self::parse`] accepts, as an ECMA regular expression (the OpenAPI document's).
    pub const PATTERN: &'static str = "^[A-Za-z][A-Za-z0-9_-]{0,63}$";

    pub fn parse(value: &str) -> Result<Self, InvalidName> {
        if value.is_empty() || value.len() > MAX_TOOL_NAME_LEN {
            return Err(InvalidName(format!("A tool name is 1 to {MAX_TOOL_NAME_LEN} characters long.")));
        }
        let mut chars = value.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
        let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !first_ok || !rest_ok {
            return Err(InvalidName(format!(
                "'{}' is not a valid tool name: use ASCII letters, digits, '_' or '-', starting with a letter.",
                truncate_for_message(value)
            )));
        }
        Ok(Self(value.to_owned()))
    }
}

/// The tenant a request acts for. Every store method takes one first, so no store call
/// can read across tenants by accident. Until tenancy is configured every request acts
/// for [`TenantId::default_tenant`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TenantId(String);

impl TenantId {
    pub const DEFAULT: &'static str = "default";

    pub fn default_tenant() -> Self {
        Self(Self::DEFAULT.to_owned())
    }

    /// The scope of records that belong to the whole installation rather than one tenant:
    /// the inbound-trigger replay reservations, which must hold across tenants. [`Self::parse`]
    /// refuses its spelling, so no request can ever act for it.
    pub fn installation() -> Self {
        Self(Self::INSTALLATION.to_owned())
    }

    const INSTALLATION: &'static str = "*";

    /// What [`Self::parse`] accepts, as an ECMA regular expression (the OpenAPI document's).
    pub const PATTERN: &'static str = "^[A-Za-z0-9._-]{1,64}$";

    /// 1–64 characters of ASCII letters, digits, `-`, `_` or `.`.
    pub fn parse(value: &str) -> Result<Self, InvalidName> {
        let ok = !value.is_empty()
            && value.len() <= 64
            && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
        if ok {
            Ok(Self(value.to_owned()))
        } else {
            Err(InvalidName("A tenant id is 1 to 64 ASCII letters, digits, '-', '_' or '.'.".into()))
        }
    }
}

/// A run identifier (UUIDv7, so ids sort by creation time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(transparent)]
#[schema(value_type = String, format = Uuid)]
pub struct RunId(pub uuid::Uuid);

impl RunId {
    pub fn parse(value: &str) -> Option<Self> {
        uuid::Uuid::parse_str(value).ok().map(Self)
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A session id chosen by the caller: 1–128 characters of ASCII letters, digits, `.`,
/// `_`, `-` or `:`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    /// What [`Self::parse`] accepts, as an ECMA regular expression (the OpenAPI document's).
    pub const PATTERN: &'static str = "^[A-Za-z0-9._:-]{1,128}$";

    pub fn parse(value: &str) -> Result<Self, InvalidName> {
        let ok = (1..=128).contains(&value.len())
            && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
        if ok {
            Ok(Self(value.to_owned()))
        } else {
            Err(InvalidName("A session id is 1 to 128 ASCII letters, digits, '.', '_', '-' or ':'.".into()))
        }
    }
}

/// `as_str` and `Display` for text newtypes (`struct Name(String)`), which show as the text
/// they hold.
macro_rules! text_newtype {
    ($($name:ident),+ $(,)?) => {$(
        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    )+};
}
pub(crate) use text_newtype;

text_newtype!(AgentName, ToolName, TenantId, SessionId);

/// Keeps user-supplied text in our own messages short (and on a char boundary).
pub(crate) fn truncate_for_message(value: &str) -> String {
    const MAX: usize = 80;
    if value.chars().count() <= MAX {
        value.to_owned()
    } else {
        let cut: String = value.chars().take(MAX).collect();
        format!("{cut}…")
    }
}

/// Longest MCP server name: `{server}_{tool}` must still leave room in a 64-character tool name.
pub const MAX_SERVER_NAME_LEN: usize = 32;

/// A server's name: lowercase letters, digits and `-`, starting with a letter, at most
/// [`MAX_SERVER_NAME_LEN`] characters. No `_`, so `{server}_{tool}` splits at its first `_`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(transparent)]
#[schema(value_type = String, pattern = "^[a-z][a-z0-9-]{0,31}$")]
pub struct McpServerName(String);

impl McpServerName {
    pub const PATTERN: &'static str = "^[a-z][a-z0-9-]{0,31}$";

    pub fn parse(value: &str) -> Result<Self, InvalidName> {
        let mut chars = value.chars();
        let ok = value.len() <= MAX_SERVER_NAME_LEN
            && chars.next().is_some_and(|c| c.is_ascii_lowercase())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if ok {
            Ok(Self(value.to_owned()))
        } else {
            Err(InvalidName(format!(
                "'{}' is not a valid MCP server name: 1 to {MAX_SERVER_NAME_LEN} lowercase letters, digits or '-', starting with a letter.",
                truncate_for_message(value)
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for McpServerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_names_follow_the_pattern() {
        for ok in ["support", "a", "house-rules", "gpt-4o.mini", "a_b", "9lives"] {
            assert!(AgentName::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Support", "-x", ".x", "a b", "a/b", "ä", "a:b"] {
            assert!(AgentName::parse(bad).is_err(), "{bad}");
        }
        assert!(AgentName::parse(&"a".repeat(64)).is_ok());
        let err = AgentName::parse(&"a".repeat(65)).unwrap_err();
        assert!(err.0.contains("at most 64"));
    }

    #[test]
    fn tool_names_follow_the_pattern() {
        for ok in ["get_order_status", "A", "x-1"] {
            assert!(ToolName::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1x", "_x", "a.b", "a b", &"a".repeat(65)] {
            assert!(ToolName::parse(bad).is_err(), "{bad}");
        }
    }
}

#[cfg(test)]
mod pattern_tests {
    use super::*;

    /// Each documented pattern accepts exactly what the parser accepts.
    #[test]
    fn the_documented_patterns_agree_with_the_parsers() {
        let samples = [
            "",
            "a",
            "A",
            "0",
            "support",
            "Support",
            "a.b_c-d",
            "-x",
            ".x",
            "_x",
            "a b",
            "a/b",
            "ä",
            "conv:1",
            "tenant-b",
            "x:y:z",
            "a%00",
            "\u{0}",
            &"a".repeat(64),
            &"a".repeat(65),
            &"a".repeat(128),
            &"a".repeat(129),
        ];
        let agree = |pattern: &str, parses: &dyn Fn(&str) -> bool| {
            let re = regex::Regex::new(pattern).unwrap();
            for s in samples {
                assert_eq!(re.is_match(s), parses(s), "{pattern} vs the parser on {s:?}");
            }
        };
        agree(AgentName::PATTERN, &|s| AgentName::parse(s).is_ok());
        agree(WorkflowName::PATTERN, &|s| WorkflowName::parse(s).is_ok());
        agree(TenantId::PATTERN, &|s| TenantId::parse(s).is_ok());
        agree(SessionId::PATTERN, &|s| SessionId::parse(s).is_ok());
        agree(ToolName::PATTERN, &|s| ToolName::parse(s).is_ok());
        let skill_samples = ["a-b", "a--b", "-a", "a-", "ab9", "A", "a_b"];
        let re = regex::Regex::new(SkillName::PATTERN).unwrap();
        for s in samples.iter().chain(skill_samples.iter()).filter(|s| s.len() <= MAX_SKILL_NAME_LEN) {
            assert_eq!(re.is_match(s), SkillName::parse(s).is_ok(), "skill name {s:?}");
        }
    }
}
