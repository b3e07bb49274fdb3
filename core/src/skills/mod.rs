//! Skills: markdown instructions plus bounded text resources an agent loads when a task needs
//! them. A [`SkillDefinition`] is stored through the definitions port
//! ([`crate::definitions::DefinitionStore`]`<SkillDefinition>`, every version kept, per tenant)
//! or registered in code (`RuntimeBuilder::add_skill`); the [`SkillCatalog`] looks a name up
//! in code first, then in the tenant's store — **code wins**, and the API refuses to store a
//! skill under a code skill's name. An agent names skills in `skillNames`; the compiler
//! resolves them like tools and gives the agent the two reading tools of [`tools`].
//!
//! Skill **scripts** are not supported: a skill that carries any is refused (see
//! [`SCRIPTS_UNSUPPORTED`]).

pub mod tools;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::definitions::{Definition, DefinitionStore, StoredDefinition};
use crate::error::StoreError;
use crate::names::{SkillName, TenantId};
use crate::report::{Problem, ProblemCode};

/// Longest description, in characters (the Agent Skills format's limit): the model reads
/// every named skill's description in its instructions.
pub const MAX_DESCRIPTION_LEN: usize = 1_024;
/// Largest instructions text, in UTF-8 bytes (64 KiB).
pub const MAX_INSTRUCTIONS_BYTES: usize = 65_536;
/// Most resources one skill carries.
pub const MAX_RESOURCES: usize = 32;
/// Largest resource, in UTF-8 bytes (64 KiB, an MCP resource's snapshot limit).
pub const MAX_RESOURCE_BYTES: usize = 65_536;
/// Largest sum of one skill's resources, in UTF-8 bytes (256 KiB).
pub const MAX_RESOURCES_TOTAL_BYTES: usize = 262_144;
/// Longest resource name, in characters.
pub const MAX_RESOURCE_NAME_LEN: usize = 128;

/// Why a skill script is refused, wherever one is asked for.
pub const SCRIPTS_UNSUPPORTED: &str = "Skill scripts are not supported: running a script needs an isolated process, which a Lambda function or a Cloudflare Worker cannot give. Put the reference text in resources instead.";

/// A skill: what the model reads when it loads it, and the resources it may read after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SkillDefinition {
    /// Unique within a tenant: 1–64 lowercase letters, digits and single `-` between them.
    #[schema(pattern = "^[a-z0-9]+(-[a-z0-9]+)*$", max_length = 64)]
    pub name: String,
    /// What the skill is for and when to load it (1–1024 characters); the model sees it before
    /// it loads the skill.
    pub description: String,
    /// The markdown body the model gets from `load_skill` (at most 64 KiB).
    pub instructions: String,
    /// Reference text the model reads with `read_skill_resource`, each named once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<SkillResource>,
}

/// One named text resource of a skill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SkillResource {
    /// A relative path such as `references/faq.md`: segments of letters, digits, `.`, `_` or
    /// `-` joined by `/`, at most 128 characters; no segment is `.` or `..`.
    pub name: String,
    /// The text (at most 64 KiB).
    pub content: String,
}

impl Definition for SkillDefinition {
    type Name = SkillName;
    const NOUN: &'static str = "A skill";
    fn name(&self) -> &str {
        &self.name
    }
}

impl SkillDefinition {
    pub fn new(name: &str, description: &str, instructions: &str) -> Self {
        Self {
            name: name.to_owned(),
            description: description.to_owned(),
            instructions: instructions.to_owned(),
            resources: Vec::new(),
        }
    }

    pub fn with_resource(mut self, name: &str, content: &str) -> Self {
        self.resources.push(SkillResource { name: name.to_owned(), content: content.to_owned() });
        self
    }

    /// A skill from a `SKILL.md` text: YAML-style frontmatter between `---` lines holding
    /// `name` and `description` (one line each; other keys are ignored), then the markdown body.
    pub fn from_markdown(text: &str) -> Result<Self, String> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let rest = text
            .strip_prefix("---\n")
            .or_else(|| text.strip_prefix("---\r\n"))
            .ok_or("A SKILL.md starts with a '---' frontmatter line.")?;
        let (front, body) = rest
            .split_once("\n---\n")
            .or_else(|| rest.split_once("\r\n---\r\n"))
            .or_else(|| rest.strip_suffix("\n---").map(|f| (f, "")))
            .ok_or("The SKILL.md frontmatter has no closing '---' line.")?;
        let mut fields = BTreeMap::new();
        for line in front.lines() {
            if line.starts_with([' ', '\t']) {
                continue;
            }
            if let Some((key, value)) = line.split_once(':') {
                let value = value.trim();
                let unquoted = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                    .unwrap_or(value);
                fields.insert(key.trim().to_owned(), unquoted.to_owned());
            }
        }
        let field = |key: &str| fields.get(key).cloned().ok_or(format!("The SKILL.md frontmatter has no '{key}'."));
        Ok(Self {
            name: field("name")?,
            description: field("description")?,
            instructions: body.trim_start_matches(['\r', '\n']).to_owned(),
            resources: Vec::new(),
        })
    }

    /// The resource named `name`.
    pub fn resource(&self, name: &str) -> Option<&SkillResource> {
        self.resources.iter().find(|r| r.name == name)
    }

    /// Every rule that needs only the skill itself: the name, the lengths, the resources'
    /// names and sizes, and no scripts.
    pub fn check_shape(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        if let Err(e) = SkillName::parse(&self.name) {
            p.push(Problem::new(ProblemCode::InvalidName, "name", e.0));
        }
        let description = self.description.chars().count();
        if self.description.trim().is_empty() {
            p.push(Problem::new(
                ProblemCode::Required,
                "description",
                "A skill needs a description; the model reads it to decide when to load the skill.",
            ));
        } else if description > MAX_DESCRIPTION_LEN {
            p.push(Problem::new(
                ProblemCode::LimitExceeded,
                "description",
                format!("description is at most {MAX_DESCRIPTION_LEN} characters."),
            ));
        }
        if self.instructions.trim().is_empty() {
            p.push(Problem::new(ProblemCode::Required, "instructions", "A skill needs instructions."));
        } else if self.instructions.len() > MAX_INSTRUCTIONS_BYTES {
            p.push(Problem::new(
                ProblemCode::LimitExceeded,
                "instructions",
                format!("instructions are at most {MAX_INSTRUCTIONS_BYTES} bytes."),
            ));
        }
        if self.resources.len() > MAX_RESOURCES {
            p.push(Problem::new(
                ProblemCode::LimitExceeded,
                "resources",
                format!("A skill carries at most {MAX_RESOURCES} resources."),
            ));
        }
        let total: usize = self.resources.iter().map(|r| r.content.len()).sum();
        if total > MAX_RESOURCES_TOTAL_BYTES {
            p.push(Problem::new(
                ProblemCode::LimitExceeded,
                "resources",
                format!("A skill's resources are at most {MAX_RESOURCES_TOTAL_BYTES} bytes together."),
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, r) in self.resources.iter().enumerate() {
            let field = format!("resources[{i}].name");
            if r.name.split('/').next() == Some("scripts") {
                p.push(Problem::new(ProblemCode::SkillScriptsUnsupported, field, SCRIPTS_UNSUPPORTED));
            } else if !is_resource_name(&r.name) {
                p.push(Problem::new(
                    ProblemCode::InvalidName,
                    field,
                    format!(
                        "'{}' is not a valid resource name: a relative path of letters, digits, '.', '_' or '-' joined by '/', at most {MAX_RESOURCE_NAME_LEN} characters.",
                        crate::names::truncate_for_message(&r.name)
                    ),
                ));
            } else if !seen.insert(r.name.as_str()) {
                p.push(Problem::new(
                    ProblemCode::Duplicate,
                    field,
                    format!("Resource '{}' is listed more than once.", r.name),
                ));
            }
            if r.content.len() > MAX_RESOURCE_BYTES {
                p.push(Problem::new(
                    ProblemCode::LimitExceeded,
                    format!("resources[{i}].content"),
                    format!("A resource is at most {MAX_RESOURCE_BYTES} bytes."),
                ));
            }
        }
        p
    }
}

/// `references/faq.md`: `/`-joined segments of ASCII letters, digits, `.`, `_` or `-`, none
/// empty, `.` or `..`.
pub fn is_resource_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= MAX_RESOURCE_NAME_LEN
        && name.split('/').all(|segment| {
            !segment.is_empty()
                && segment != "."
                && segment != ".."
                && segment.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        })
}

/// Where a skill comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub enum SkillSource {
    /// Registered in code: read-only, no version history, installation-wide.
    Code,
    /// Written through the API: editable, versioned, the tenant's own.
    Stored,
}

/// A skill the catalog found.
#[derive(Debug, Clone)]
pub struct ResolvedSkill {
    pub definition: Arc<SkillDefinition>,
    pub source: SkillSource,
    /// The stored version; `None` for a code skill.
    pub version: Option<u32>,
    pub created_at: Option<DateTime<Utc>>,
    /// When this version was written; with the version it tells two contents apart (a skill
    /// deleted and created again starts at version 1 again).
    pub updated_at: Option<DateTime<Utc>>,
}

impl ResolvedSkill {
    /// A stored version as the catalog answers it.
    pub fn stored(stored: StoredDefinition<SkillDefinition>) -> Self {
        Self {
            definition: Arc::new(stored.definition),
            source: SkillSource::Stored,
            version: Some(stored.version),
            created_at: Some(stored.created_at),
            updated_at: Some(stored.updated_at),
        }
    }
}

/// Code skills and the tenants' stored skills, looked up in that order.
#[derive(Clone)]
pub struct SkillCatalog {
    code: BTreeMap<String, Arc<SkillDefinition>>,
    store: Arc<dyn DefinitionStore<SkillDefinition>>,
}

impl Default for SkillCatalog {
    fn default() -> Self {
        Self::new(BTreeMap::new(), Arc::new(crate::definitions::memory::MemoryDefinitionStore::default()))
    }
}

impl SkillCatalog {
    pub fn new(code: BTreeMap<String, Arc<SkillDefinition>>, store: Arc<dyn DefinitionStore<SkillDefinition>>) -> Self {
        Self { code, store }
    }

    pub fn is_code_skill(&self, name: &str) -> bool {
        self.code.contains_key(name)
    }

    pub fn store(&self) -> &Arc<dyn DefinitionStore<SkillDefinition>> {
        &self.store
    }

    /// Looks a name up: code first, then the tenant's stored skills.
    pub async fn get(&self, tenant: &TenantId, name: &SkillName) -> Result<Option<ResolvedSkill>, StoreError> {
        if let Some(def) = self.code.get(name.as_str()) {
            return Ok(Some(Self::code_entry(def)));
        }
        Ok(self.store.get(tenant, name).await?.map(ResolvedSkill::stored))
    }

    /// Code skills first (by name), then stored skills (by name) no code skill shadows.
    pub async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<ResolvedSkill>, StoreError> {
        crate::definitions::code_then_stored(
            &self.code,
            self.store.as_ref(),
            tenant,
            (skip, take),
            Self::code_entry,
            ResolvedSkill::stored,
        )
        .await
    }

    fn code_entry(def: &Arc<SkillDefinition>) -> ResolvedSkill {
        ResolvedSkill {
            definition: def.clone(),
            source: SkillSource::Code,
            version: None,
            created_at: None,
            updated_at: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skill_md_is_read_from_its_frontmatter() {
        let skill = SkillDefinition::from_markdown(
            "---\nname: house-style\ndescription: \"How we write: tone, terms.\"\nmetadata:\n  author: x\n---\n\n# House style\nBe brief.\n",
        )
        .unwrap();
        assert_eq!(skill.name, "house-style");
        assert_eq!(skill.description, "How we write: tone, terms.");
        assert_eq!(skill.instructions, "# House style\nBe brief.\n");
        assert!(skill.check_shape().is_empty());
        assert!(SkillDefinition::from_markdown("# no frontmatter").is_err());
        assert!(SkillDefinition::from_markdown("---\nname: x\n---\nbody").is_err());
    }

    #[test]
    fn shape_limits_name_their_fields() {
        let mut skill = SkillDefinition::new("Bad--name", "", &"x".repeat(MAX_INSTRUCTIONS_BYTES + 1))
            .with_resource("scripts/run.py", "print()")
            .with_resource("../etc", "x")
            .with_resource("a.md", &"y".repeat(MAX_RESOURCE_BYTES + 1))
            .with_resource("a.md", "z");
        skill.description = "d".repeat(MAX_DESCRIPTION_LEN + 1);
        let problems = skill.check_shape();
        let fields: Vec<(&str, ProblemCode)> = problems.iter().map(|p| (p.field.as_str(), p.code)).collect();
        for expected in [
            ("name", ProblemCode::InvalidName),
            ("description", ProblemCode::LimitExceeded),
            ("instructions", ProblemCode::LimitExceeded),
            ("resources[0].name", ProblemCode::SkillScriptsUnsupported),
            ("resources[1].name", ProblemCode::InvalidName),
            ("resources[2].content", ProblemCode::LimitExceeded),
            ("resources[3].name", ProblemCode::Duplicate),
        ] {
            assert!(fields.contains(&expected), "missing {expected:?} in {fields:?}");
        }
    }

    #[test]
    fn resource_names_are_relative_paths() {
        for ok in ["faq.md", "references/faq.md", "a_b-c.txt"] {
            assert!(is_resource_name(ok), "{ok}");
        }
        for bad in ["", "/abs", "a//b", "a/../b", ".", "a b", "a\\b", &"a".repeat(129)] {
            assert!(!is_resource_name(bad), "{bad}");
        }
    }
}
