//! Agent definitions as data: the JSON shape the management API reads and writes.
//!
//! An [`AgentDefinition`] names everything an agent uses (provider, tools, callable agents,
//! a shared instructions block) but holds no code and no credential. Whether those names
//! resolve is the compiler's question ([`crate::compiler`]); this module only checks the
//! shape rules that need nothing but the definition itself ([`AgentDefinition::check_shape`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::names::{AgentName, SkillName, ToolName};
use crate::report::{Problem, ProblemCode};

/// Default bound of the inner tool-calling loop (model calls per request).
pub const DEFAULT_MAX_ITERATIONS: u32 = 40;
/// Highest accepted `harness.maximumIterationsPerRequest`.
pub const MAX_ITERATIONS_LIMIT: u32 = 1000;

pub const MAX_DISPLAY_NAME_LEN: usize = 200;
pub const MAX_DESCRIPTION_LEN: usize = 4_000;
pub const MAX_INSTRUCTIONS_LEN: usize = 200_000;
pub const MAX_TOOLS: usize = 128;
pub const MAX_CALLABLE_AGENTS: usize = 32;
pub const MAX_PARAMETERS: usize = 32;
pub const MAX_METADATA_ENTRIES: usize = 64;
pub const MAX_METADATA_KEY_LEN: usize = 64;
pub const MAX_METADATA_VALUE_LEN: usize = 1_024;
pub const MAX_CULTURES: usize = 64;
pub const MAX_PARAMETER_VALUE_LEN: usize = 16_384;

/// An agent: model binding, instructions and the names of what it may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentDefinition {
    /// Unique within a tenant; lowercase letters, digits, `.`, `_`, `-`; at most 64 characters.
    #[schema(pattern = "^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The default instructions, used when no culture-specific text matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Culture tag (`en`, `tr`, `pt-BR`) → instructions.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instructions_by_culture: BTreeMap<String, String>,
    /// Named `{{name}}` placeholders the instructions may reference.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "objects_only::list")]
    pub parameters: Vec<AgentParameter>,
    /// Another definition whose instructions are prepended to this one's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_instructions_name: Option<String>,
    #[serde(deserialize_with = "objects_only::required")]
    pub model: ModelBinding,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callable_agent_names: Vec<String>,
    /// Skills the agent may load (`load_skill`, `read_skill_resource`): code skills, then the
    /// tenant's stored skills. Each must exist, as a tool must.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skill_names: Vec<String>,
    /// How the skill tools behave; unset, every call asks a person first.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "objects_only::optional")]
    pub skills: Option<SkillSettings>,
    /// Static resources of the tenant's MCP servers, read when a run starts and added to its
    /// instructions: `{server}:{uri}`, only URIs the server advertises; 64 KB each, 256 KB in
    /// all (see [`crate::mcp::resources`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_resource_uris: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "objects_only::optional")]
    pub harness: Option<HarnessSettings>,
    /// The wait limits of this agent's calls to its callable agents; unset fields take the
    /// installation's (`Tracon:SubAgents:*`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "objects_only::optional")]
    pub sub_agents: Option<SubAgentSettings>,
    /// What an OpenAI-compatible caller may add to a run of this agent besides its
    /// messages; unset, it adds nothing (`tools` and `response_format` are refused).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "objects_only::optional")]
    pub open_ai: Option<OpenAiSettings>,
}

/// What an OpenAI-compatible caller (`/v1/chat/completions`, `/v1/responses`) may add to a
/// run of the agent, for that request only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenAiSettings {
    /// The caller's `tools`: `Refuse` (the default: only the agent's own client-side tools
    /// may be declared) or `ClientSide` (they join the run as client-side tools).
    #[serde(default)]
    pub caller_tools: CallerTools,
    /// The caller's `response_format` / `text.format`: `Refuse` (the default: the agent
    /// fixes its output format) or `Allow` (it holds for that request, checked and repaired
    /// like the definition's own `model.responseFormat`).
    #[serde(default)]
    pub caller_response_format: CallerResponseFormat,
}

/// Whether a caller's `tools` join its run ([`OpenAiSettings::caller_tools`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub enum CallerTools {
    #[default]
    Refuse,
    /// Declared by the caller, never executed on the server: each call is handed back as a
    /// `tool_calls` / `function_call` item and answered by the caller's next request.
    ClientSide,
}

/// Whether a caller's output format holds for its run ([`OpenAiSettings::caller_response_format`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub enum CallerResponseFormat {
    #[default]
    Refuse,
    Allow,
}

/// Most skills one agent names.
pub const MAX_SKILLS: usize = 16;

/// `skills` on a definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SkillSettings {
    /// `load_skill` and `read_skill_resource` run without asking a person. Off by default: a
    /// person approves each call. Turn it on only for skills a tenant administrator writes.
    #[serde(default)]
    pub disable_read_approval: bool,
}

/// Longest accepted sub-agent wait limit, in seconds (a day).
pub const MAX_SUB_AGENT_SECONDS: u32 = 86_400;

/// The two-layer wait limit of a call to a callable agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubAgentSettings {
    /// The cooperative deadline: when it passes, the child run is asked to stop (its
    /// cancellation token fires) and ends `Canceled`. 1 to 86400 seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_deadline_seconds: Option<u32>,
    /// The hard cutoff: when it passes, the caller stops waiting and the tree goes on; a
    /// child still running finishes in the background and its result is discarded. 1 to
    /// 86400 seconds, and not shorter than the deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_timeout_seconds: Option<u32>,
}

/// Which model answers, and how.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelBinding {
    /// A registered provider name (`openai`, `anthropic`, `scripted`, a compatible endpoint's name).
    pub provider: String,
    /// The provider's model identifier; required.
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Vendor-only settings (`anthropic.promptCaching`, …); unknown keys fail compilation.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = Object)]
    pub provider_settings: BTreeMap<String, serde_json::Value>,
    /// Run one turn's independent tool calls at the same time. Off by default.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_concurrent_tool_calls: bool,
    /// Where a model call goes when this binding's provider fails in a way another could
    /// help with (a timeout, `429`, `5xx`, a broken connection, an open circuit breaker —
    /// never a refused credential or a cancellation): each link in order, at most
    /// [`MAX_FALLBACKS`]. Only before the answer has started: once output reached the caller,
    /// a failure ends the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<FallbackLink>,
    /// With a JSON `responseFormat`: how many times a run that is not streamed to its caller
    /// asks the model again when its answer is not valid JSON for the format (0 to
    /// [`MAX_REPAIR_ATTEMPTS`]; none by default): the structured-output check of the answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_repair_attempts: Option<u32>,
    /// Answer a model call from the response cache when the same request was answered within
    /// the cache's lifetime (the response cache of the model calls). Off by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_cache: Option<ResponseCacheSettings>,
}

/// How long a cached answer stays when the binding sets no `ttlSeconds` (the spec's default).
pub const DEFAULT_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(600);
/// The longest lifetime a binding may give its cached answers.
pub const MAX_CACHE_TTL_SECONDS: u32 = 86_400;

/// `model.responseCache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResponseCacheSettings {
    pub enabled: bool,
    /// How long an answer stays, 1 to 86400 seconds (600 by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u32>,
}

impl ResponseCacheSettings {
    /// The lifetime of an answer, when caching is on.
    pub fn lifetime(&self) -> Option<std::time::Duration> {
        self.enabled
            .then(|| self.ttl_seconds.map_or(DEFAULT_CACHE_TTL, |s| std::time::Duration::from_secs(u64::from(s))))
    }
}

/// The most repair turns a binding may ask for.
pub const MAX_REPAIR_ATTEMPTS: u32 = 3;

/// The most fallback links a binding may have.
pub const MAX_FALLBACKS: usize = 4;

/// A link of a fallback chain: another provider and model, with its own settings. Unset
/// `temperature`, `topP` and `maxOutputTokens` take the primary binding's; `reasoningEffort`
/// and `providerSettings` are the link's own (not every provider takes the primary's).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FallbackLink {
    pub provider: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = Object)]
    pub provider_settings: BTreeMap<String, serde_json::Value>,
}

impl ModelBinding {
    /// The binding a call through `link` uses: the link's provider, model and vendor
    /// settings, its sampling fields or else this binding's, this binding's response format
    /// and tool settings, and no further fallbacks.
    pub fn for_link(&self, link: &FallbackLink) -> ModelBinding {
        ModelBinding {
            provider: link.provider.clone(),
            model: link.model.clone(),
            temperature: link.temperature.or(self.temperature),
            top_p: link.top_p.or(self.top_p),
            max_output_tokens: link.max_output_tokens.or(self.max_output_tokens),
            // Not inherited, like the vendor settings: not every provider takes one.
            reasoning_effort: link.reasoning_effort,
            response_format: self.response_format.clone(),
            provider_settings: link.provider_settings.clone(),
            allow_concurrent_tool_calls: self.allow_concurrent_tool_calls,
            fallbacks: Vec::new(),
            max_repair_attempts: self.max_repair_attempts,
            response_cache: self.response_cache,
        }
    }

    /// The primary binding, then one per fallback link, each with the JSON path of its
    /// fields (`model`, `model.fallbacks[0]`, …).
    pub fn chain(&self) -> Vec<(String, std::borrow::Cow<'_, ModelBinding>)> {
        let mut links = vec![("model".to_owned(), std::borrow::Cow::Borrowed(self))];
        for (i, link) in self.fallbacks.iter().enumerate() {
            links.push((format!("model.fallbacks[{i}]"), std::borrow::Cow::Owned(self.for_link(link))));
        }
        links
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum ReasoningEffort {
    Minimal,
    Low,
    Medium,
    High,
}

impl ReasoningEffort {
    pub fn as_wire(self) -> &'static str {
        match self {
            Self::Minimal => "minimal",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

/// Explicit text, JSON, or JSON Schema responses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum ResponseFormat {
    Text,
    Json,
    #[serde(rename_all = "camelCase")]
    JsonSchema {
        name: String,
        /// A JSON Schema object (the compiler checks it is a valid one).
        #[schema(value_type = Object)]
        #[serde(deserialize_with = "schema_object")]
        schema: serde_json::Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
}

/// The shape of one link of a binding's chain, its fields under `path`: provider and model
/// named, sampling values in range.
fn check_route(p: &mut Vec<Problem>, path: &str, m: &ModelBinding) {
    if m.provider.trim().is_empty() {
        p.push(Problem::new(ProblemCode::Required, format!("{path}.provider"), "A model provider is required."));
    }
    if m.model.trim().is_empty() {
        p.push(Problem::new(ProblemCode::Required, format!("{path}.model"), "A model name is required."));
    } else if m.model.len() > 200 {
        p.push(Problem::new(
            ProblemCode::LimitExceeded,
            format!("{path}.model"),
            "A model name is at most 200 characters.",
        ));
    }
    if let Some(t) = m.temperature
        && !(0.0..=2.0).contains(&t)
    {
        p.push(Problem::new(
            ProblemCode::OutOfRange,
            format!("{path}.temperature"),
            "temperature must be between 0 and 2.",
        ));
    }
    if let Some(t) = m.top_p
        && !(t > 0.0 && t <= 1.0)
    {
        p.push(Problem::new(
            ProblemCode::OutOfRange,
            format!("{path}.topP"),
            "topP must be greater than 0 and at most 1.",
        ));
    }
    if m.max_output_tokens == Some(0) {
        p.push(Problem::new(
            ProblemCode::OutOfRange,
            format!("{path}.maxOutputTokens"),
            "maxOutputTokens must be at least 1.",
        ));
    }
}

/// A response schema is a JSON object: anything else is refused as the body is read.
fn schema_object<'de, D: serde::Deserializer<'de>>(d: D) -> Result<serde_json::Value, D::Error> {
    match serde_json::Value::deserialize(d)? {
        v @ serde_json::Value::Object(_) => Ok(v),
        _ => Err(serde::de::Error::custom("a response schema is a JSON Schema object")),
    }
}

/// Settings objects are read only from JSON objects: serde's derived `Deserialize` would also
/// take an array of the fields' values in order (`"subAgents": [null, null]`). These ask the
/// deserializer for a map and hand it to the derived code, so paths in error messages stay.
mod objects_only {
    use std::marker::PhantomData;

    use serde::Deserialize;
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor, value::MapAccessDeserializer};

    /// Reads one `T` from a map only.
    pub struct ObjectSeed<T>(pub PhantomData<T>);

    impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for ObjectSeed<T> {
        type Value = T;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
            d.deserialize_map(self)
        }
    }

    impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectSeed<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(MapAccessDeserializer::new(map))
        }
    }

    struct Optional<T>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for Optional<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object or null")
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
            ObjectSeed(PhantomData).deserialize(d).map(Some)
        }
    }

    struct List<T>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for List<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list of objects")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
            while let Some(item) = seq.next_element_seed(ObjectSeed(PhantomData))? {
                items.push(item);
            }
            Ok(items)
        }
    }

    pub fn required<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
        ObjectSeed(PhantomData).deserialize(d)
    }

    pub fn optional<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_option(Optional(PhantomData))
    }

    pub fn list<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_seq(List(PhantomData))
    }
}

/// A named placeholder the instructions may reference as `{{name}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentParameter {
    pub name: String,
    /// Labels the expected shape for input forms; every value travels as a string.
    #[serde(default)]
    pub kind: ParameterKind,
    #[serde(default, skip_serializing_if = "is_false")]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub enum ParameterKind {
    #[default]
    Text,
    Number,
    Boolean,
}

/// Harness limits.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HarnessSettings {
    /// Bound of the inner tool-calling loop: model calls per request (default 40).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_iterations_per_request: Option<u32>,
    /// Invoke the agent again until its stop criteria say the work is finished (off while
    /// unset). See [`crate::harness`].
    #[serde(
        default,
        rename = "loop",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "objects_only::optional"
    )]
    pub r#loop: Option<LoopSettings>,
}

/// `harness.loop.maxIterations` when unset.
pub const DEFAULT_LOOP_ITERATIONS: u32 = 10;
/// Highest accepted `harness.loop.maxIterations`.
pub const MAX_LOOP_ITERATIONS: u32 = 100;

/// `harness.loop`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoopSettings {
    /// Evaluated in order after each answer; the loop stops when every one is satisfied.
    #[serde(deserialize_with = "objects_only::list")]
    pub criteria: Vec<LoopCriterion>,
    /// Invocations at most, the first included (1–100; default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
}

impl LoopSettings {
    pub fn max_iterations(&self) -> u32 {
        self.max_iterations.unwrap_or(DEFAULT_LOOP_ITERATIONS)
    }
}

/// One stop criterion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoopCriterion {
    /// A built-in kind or one registered in code.
    pub kind: String,
    /// `completionMarker`: the text the answer must contain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker: Option<String>,
    /// `todoCompletion`: which items count as open — `unchecked` (`- [ ]`, the default) and
    /// `inProgress` (`- [~]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modes: Option<Vec<String>>,
    /// `aiJudge`: what "finished" means, for the judge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_criteria: Option<String>,
    /// `aiJudge`: instructions for the judge beyond Tracon's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_instructions: Option<String>,
}

impl AgentDefinition {
    /// A minimal definition, for code registrations and tests.
    pub fn new(name: &str, provider: &str, model: &str) -> Self {
        Self {
            name: name.to_owned(),
            display_name: None,
            description: None,
            instructions: None,
            instructions_by_culture: BTreeMap::new(),
            parameters: Vec::new(),
            shared_instructions_name: None,
            model: ModelBinding { provider: provider.to_owned(), model: model.to_owned(), ..ModelBinding::default() },
            tool_names: Vec::new(),
            callable_agent_names: Vec::new(),
            skill_names: Vec::new(),
            skills: None,
            mcp_resource_uris: Vec::new(),
            metadata: BTreeMap::new(),
            harness: None,
            sub_agents: None,
            open_ai: None,
        }
    }

    pub fn with_instructions(mut self, text: &str) -> Self {
        self.instructions = Some(text.to_owned());
        self
    }

    pub fn with_tools(mut self, tools: &[&str]) -> Self {
        self.tool_names = tools.iter().map(|t| (*t).to_owned()).collect();
        self
    }

    pub fn max_iterations(&self) -> u32 {
        self.harness.as_ref().and_then(|h| h.maximum_iterations_per_request).unwrap_or(DEFAULT_MAX_ITERATIONS)
    }

    /// Every rule that needs only the definition itself: name patterns, lengths, numeric
    /// ranges, duplicate names. Name *resolution* is the compiler's job.
    pub fn check_shape(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        if let Err(e) = AgentName::parse(&self.name) {
            p.push(Problem::new(ProblemCode::InvalidName, "name", e.0));
        }
        check_len(&mut p, "displayName", self.display_name.as_deref(), MAX_DISPLAY_NAME_LEN);
        check_len(&mut p, "description", self.description.as_deref(), MAX_DESCRIPTION_LEN);
        check_len(&mut p, "instructions", self.instructions.as_deref(), MAX_INSTRUCTIONS_LEN);

        if self.instructions_by_culture.len() > MAX_CULTURES {
            p.push(Problem::new(
                ProblemCode::LimitExceeded,
                "instructionsByCulture",
                format!("At most {MAX_CULTURES} cultures are allowed."),
            ));
        }
        for (tag, text) in &self.instructions_by_culture {
            if !is_culture_tag(tag) {
                p.push(Problem::new(
                    ProblemCode::InvalidCulture,
                    format!("instructionsByCulture.{tag}"),
                    "A culture is a BCP 47 language tag (RFC 5646) of at most 35 characters, such as 'en', 'tr-TR', 'pt-BR' or 'zh-Hant-TW'.",
                ));
            }
            check_len(&mut p, &format!("instructionsByCulture.{tag}"), Some(text), MAX_INSTRUCTIONS_LEN);
        }

        if self.parameters.len() > MAX_PARAMETERS {
            p.push(Problem::new(
                ProblemCode::LimitExceeded,
                "parameters",
                format!("At most {MAX_PARAMETERS} parameters are allowed."),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, param) in self.parameters.iter().enumerate() {
            let field = format!("parameters[{i}].name");
            if !is_parameter_name(&param.name) {
                p.push(Problem::new(
                    ProblemCode::InvalidParameter,
                    field,
                    format!(
                        "'{}' is not a valid parameter name: use letters, digits and '_', starting with a letter or '_', at most 64 characters.",
                        crate::names::truncate_for_message(&param.name)
                    ),
                ));
            } else if !seen.insert(param.name.as_str()) {
                p.push(Problem::new(
                    ProblemCode::InvalidParameter,
                    field,
                    format!("Parameter '{}' is declared more than once.", param.name),
                ));
            }
            check_len(
                &mut p,
                &format!("parameters[{i}].defaultValue"),
                param.default_value.as_deref(),
                MAX_PARAMETER_VALUE_LEN,
            );
        }

        if let Some(shared) = &self.shared_instructions_name {
            if let Err(e) = AgentName::parse(shared) {
                p.push(Problem::new(ProblemCode::InvalidName, "sharedInstructionsName", e.0));
            } else if shared == &self.name {
                p.push(Problem::new(
                    ProblemCode::NestedSharedInstructions,
                    "sharedInstructionsName",
                    "A definition cannot use itself as its shared instructions block.",
                ));
            }
        }

        let m = &self.model;
        if m.fallbacks.len() > MAX_FALLBACKS {
            p.push(Problem::new(
                ProblemCode::LimitExceeded,
                "model.fallbacks",
                format!("At most {MAX_FALLBACKS} fallback links are allowed."),
            ));
        }
        check_route(&mut p, "model", m);
        if let Some(ttl) = m.response_cache.and_then(|c| c.ttl_seconds)
            && !(1..=MAX_CACHE_TTL_SECONDS).contains(&ttl)
        {
            p.push(Problem::new(
                ProblemCode::OutOfRange,
                "model.responseCache.ttlSeconds",
                format!("ttlSeconds is 1 to {MAX_CACHE_TTL_SECONDS}."),
            ));
        }
        if let Some(n) = m.max_repair_attempts {
            let structured =
                matches!(m.response_format, Some(ResponseFormat::Json | ResponseFormat::JsonSchema { .. }));
            if n > MAX_REPAIR_ATTEMPTS {
                p.push(Problem::new(
                    ProblemCode::OutOfRange,
                    "model.maxRepairAttempts",
                    format!("maxRepairAttempts is 0 to {MAX_REPAIR_ATTEMPTS}."),
                ));
            } else if n > 0 && !structured {
                p.push(Problem::new(
                    ProblemCode::InvalidResponseFormat,
                    "model.maxRepairAttempts",
                    "maxRepairAttempts needs a JSON responseFormat (json or jsonSchema) to check answers against.",
                ));
            }
        }
        for (i, link) in m.fallbacks.iter().enumerate() {
            // The link's own values only: what it inherits was checked as the primary's.
            let own = ModelBinding::default().for_link(link);
            check_route(&mut p, &format!("model.fallbacks[{i}]"), &own);
        }
        if let Some(ResponseFormat::JsonSchema { name, schema, .. }) = &m.response_format {
            if name.is_empty()
                || name.len() > 64
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                p.push(Problem::new(
                    ProblemCode::InvalidResponseFormat,
                    "model.responseFormat.name",
                    "A JSON schema response format needs a name of 1 to 64 letters, digits, '_' or '-'.",
                ));
            }
            if !schema.is_object() {
                p.push(Problem::new(
                    ProblemCode::InvalidResponseFormat,
                    "model.responseFormat.schema",
                    "The response schema must be a JSON object.",
                ));
            } else if let Err(reason) = crate::schema::Validator::new(schema) {
                p.push(Problem::new(
                    ProblemCode::InvalidResponseFormat,
                    "model.responseFormat.schema",
                    format!("The response schema is not a valid JSON Schema: {reason}."),
                ));
            }
        }

        if self.tool_names.len() > MAX_TOOLS {
            p.push(Problem::new(
                ProblemCode::LimitExceeded,
                "toolNames",
                format!("At most {MAX_TOOLS} tools are allowed."),
            ));
        }
        let mut seen_tools = std::collections::BTreeSet::new();
        for (i, t) in self.tool_names.iter().enumerate() {
            if let Err(e) = ToolName::parse(t) {
                p.push(Problem::new(ProblemCode::InvalidName, format!("toolNames[{i}]"), e.0));
            } else if !seen_tools.insert(t.as_str()) {
                p.push(Problem::new(
                    ProblemCode::Duplicate,
                    format!("toolNames[{i}]"),
                    format!("Tool '{t}' is listed more than once."),
                ));
            }
        }
        p.extend(mcp_resource_problems(&self.mcp_resource_uris));
        if self.callable_agent_names.len() > MAX_CALLABLE_AGENTS {
            p.push(Problem::new(
                ProblemCode::LimitExceeded,
                "callableAgentNames",
                format!("At most {MAX_CALLABLE_AGENTS} callable agents are allowed."),
            ));
        }
        let mut seen_agents = std::collections::BTreeSet::new();
        for (i, a) in self.callable_agent_names.iter().enumerate() {
            if let Err(e) = AgentName::parse(a) {
                p.push(Problem::new(ProblemCode::InvalidName, format!("callableAgentNames[{i}]"), e.0));
            } else if a == &self.name {
                p.push(Problem::new(
                    ProblemCode::CallableAgentCycle,
                    format!("callableAgentNames[{i}]"),
                    "An agent cannot call itself.",
                ));
            } else if !seen_agents.insert(a.as_str()) {
                p.push(Problem::new(
                    ProblemCode::Duplicate,
                    format!("callableAgentNames[{i}]"),
                    format!("Agent '{a}' is listed more than once."),
                ));
            }
        }

        if self.skill_names.len() > MAX_SKILLS {
            p.push(Problem::new(
                ProblemCode::LimitExceeded,
                "skillNames",
                format!("At most {MAX_SKILLS} skills are allowed."),
            ));
        }
        let mut seen_skills = std::collections::BTreeSet::new();
        for (i, s) in self.skill_names.iter().enumerate() {
            if let Err(e) = SkillName::parse(s) {
                p.push(Problem::new(ProblemCode::InvalidName, format!("skillNames[{i}]"), e.0));
            } else if !seen_skills.insert(s.as_str()) {
                p.push(Problem::new(
                    ProblemCode::Duplicate,
                    format!("skillNames[{i}]"),
                    format!("Skill '{s}' is listed more than once."),
                ));
            }
        }

        if self.metadata.len() > MAX_METADATA_ENTRIES {
            p.push(Problem::new(
                ProblemCode::LimitExceeded,
                "metadata",
                format!("At most {MAX_METADATA_ENTRIES} metadata entries are allowed."),
            ));
        }
        for (k, v) in &self.metadata {
            if k.is_empty() || k.chars().count() > MAX_METADATA_KEY_LEN {
                p.push(Problem::new(
                    ProblemCode::LimitExceeded,
                    "metadata",
                    format!("A metadata key is 1 to {MAX_METADATA_KEY_LEN} characters."),
                ));
            }
            if v.chars().count() > MAX_METADATA_VALUE_LEN {
                p.push(Problem::new(
                    ProblemCode::LimitExceeded,
                    format!("metadata.{k}"),
                    format!("A metadata value is at most {MAX_METADATA_VALUE_LEN} characters."),
                ));
            }
        }

        if let Some(h) = &self.harness
            && let Some(n) = h.maximum_iterations_per_request
            && !(1..=MAX_ITERATIONS_LIMIT).contains(&n)
        {
            p.push(Problem::new(
                ProblemCode::OutOfRange,
                "harness.maximumIterationsPerRequest",
                format!("maximumIterationsPerRequest must be between 1 and {MAX_ITERATIONS_LIMIT}."),
            ));
        }
        if let Some(s) = &self.sub_agents {
            for (field, value) in [
                ("subAgents.childDeadlineSeconds", s.child_deadline_seconds),
                ("subAgents.waitTimeoutSeconds", s.wait_timeout_seconds),
            ] {
                if value.is_some_and(|v| !(1..=MAX_SUB_AGENT_SECONDS).contains(&v)) {
                    p.push(Problem::new(
                        ProblemCode::OutOfRange,
                        field,
                        format!("{field} must be between 1 and {MAX_SUB_AGENT_SECONDS}."),
                    ));
                }
            }
            if let (Some(deadline), Some(wait)) = (s.child_deadline_seconds, s.wait_timeout_seconds)
                && wait < deadline
            {
                p.push(Problem::new(
                    ProblemCode::OutOfRange,
                    "subAgents.waitTimeoutSeconds",
                    "subAgents.waitTimeoutSeconds must not be shorter than subAgents.childDeadlineSeconds.",
                ));
            }
        }
        p
    }
}

fn check_len(p: &mut Vec<Problem>, field: &str, value: Option<&str>, max: usize) {
    if let Some(v) = value
        && v.chars().count() > max
    {
        p.push(Problem::new(ProblemCode::LimitExceeded, field, format!("{field} is at most {max} characters.")));
    }
}

/// Most `mcpResourceUris` entries a definition may list.
pub const MAX_MCP_RESOURCES: usize = 16;
/// Longest URI of an `mcpResourceUris` entry.
pub const MAX_MCP_RESOURCE_URI_LEN: usize = 2_048;

/// An `mcpResourceUris` entry, `{server}:{uri}`, split (at the first `:`) when well formed.
pub fn mcp_resource(entry: &str) -> Option<(crate::names::McpServerName, &str)> {
    let (server, uri) = entry.split_once(':')?;
    let server = crate::names::McpServerName::parse(server).ok()?;
    (!uri.trim().is_empty() && uri.len() <= MAX_MCP_RESOURCE_URI_LEN && !uri.chars().any(char::is_control))
        .then_some((server, uri))
}

/// What the `mcpResourceUris` entries themselves get wrong (the servers are checked by
/// `crate::mcp::resources::problems`).
pub fn mcp_resource_problems(entries: &[String]) -> Vec<Problem> {
    let mut problems = Vec::new();
    if entries.len() > MAX_MCP_RESOURCES {
        problems.push(Problem::new(
            ProblemCode::LimitExceeded,
            "mcpResourceUris",
            format!("At most {MAX_MCP_RESOURCES} MCP resources are allowed."),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, entry) in entries.iter().enumerate() {
        if mcp_resource(entry).is_none() {
            problems.push(Problem::new(
                ProblemCode::InvalidName,
                format!("mcpResourceUris[{i}]"),
                format!("An MCP resource is written '{{server}}:{{uri}}' (for example 'crm:file:///policy.md'), the URI at most {MAX_MCP_RESOURCE_URI_LEN} characters."),
            ));
        } else if !seen.insert(entry.as_str()) {
            problems.push(Problem::new(
                ProblemCode::Duplicate,
                format!("mcpResourceUris[{i}]"),
                "This MCP resource is listed more than once.",
            ));
        }
    }
    problems
}

/// `en`, `tr-TR`, `zh-Hant-TW`: a well-formed BCP 47 tag ([`crate::culture::is_culture_tag`]).
pub fn is_culture_tag(tag: &str) -> bool {
    crate::culture::is_culture_tag(tag)
}

/// Parameter names: `[A-Za-z_][A-Za-z0-9_]{0,63}`.
pub fn is_parameter_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definition_round_trips_in_camel_case() {
        let json = serde_json::json!({
            "name": "support",
            "displayName": "Support",
            "instructions": "Help {{customer}}.",
            "instructionsByCulture": {"tr": "Yardım et."},
            "parameters": [{"name": "customer", "kind": "Text", "required": true}],
            "model": {"provider": "openai", "model": "m", "topP": 0.5, "maxOutputTokens": 100,
                      "reasoningEffort": "Low", "responseFormat": {"type": "json"},
                      "providerSettings": {"x": 1}, "allowConcurrentToolCalls": true},
            "toolNames": ["a"],
            "callableAgentNames": ["billing"],
            "metadata": {"team": "x"},
            "harness": {"maximumIterationsPerRequest": 5}
        });
        let def: AgentDefinition = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(def.max_iterations(), 5);
        assert!(def.model.allow_concurrent_tool_calls);
        assert_eq!(serde_json::to_value(&def).unwrap(), json);
    }

    #[test]
    fn unknown_fields_are_refused_not_dropped() {
        let json = serde_json::json!({"name": "a", "model": {"provider": "p", "model": "m"}, "skillz": []});
        assert!(serde_json::from_value::<AgentDefinition>(json).is_err());
    }

    #[test]
    fn shape_problems_are_reported_with_their_field() {
        let mut d = AgentDefinition::new(&"x".repeat(65), "", "");
        d.model.temperature = Some(3.0);
        d.tool_names = vec!["ok".into(), "ok".into(), "1bad".into()];
        d.instructions_by_culture.insert("not a tag".into(), "x".into());
        let fields: Vec<String> = d.check_shape().into_iter().map(|p| p.field).collect();
        for f in [
            "name",
            "model.provider",
            "model.model",
            "model.temperature",
            "toolNames[1]",
            "toolNames[2]",
            "instructionsByCulture.not a tag",
        ] {
            assert!(fields.iter().any(|x| x == f), "missing {f} in {fields:?}");
        }
    }

    #[test]
    fn culture_tags() {
        for ok in ["en", "tr-TR", "zh-Hant-TW", "pt-BR"] {
            assert!(is_culture_tag(ok), "{ok}");
        }
        for bad in ["", "e", "en_US", "en-", "-en", "toolonglanguage"] {
            assert!(!is_culture_tag(bad), "{bad}");
        }
    }
}
