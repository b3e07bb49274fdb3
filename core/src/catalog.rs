//! The catalog: code-defined agents and stored definitions merged into one view, name
//! resolution for the compiler, and the compiled-agent cache.
//!
//! **Code wins.** A code agent shadows a stored definition of the same name, and the
//! management API refuses to store under a code agent's name. The cache is an
//! optimisation only — keyed by tenant, name, version, a fingerprint of the dependencies
//! (the shared block's version), the named skills' versions and the resolved culture — so any instance compiles the
//! same agent from the store; parameterised runs are never cached.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use utoipa::ToSchema;

use crate::compiler::{self, CompileFailure, CompiledAgent, ParameterError, Resolution};
use crate::definition::AgentDefinition;
use crate::definitions::DefinitionStore;
use crate::error::StoreError;
use crate::model::ProviderRegistry;
use crate::names::{AgentName, TenantId};
use crate::report::{Problem, ValidationReport};
use crate::sync::lock;
use crate::tools::ToolRegistry;

const CACHE_CAPACITY: usize = 512;
/// How far the callable-agent cycle check walks.
const MAX_CALLABLE_WALK: usize = 256;

/// Where an agent comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub enum AgentSource {
    /// Registered in code: read-only, no version history.
    Code,
    /// Written through the API: editable and versioned.
    Stored,
}

/// An agent the catalog knows.
#[derive(Debug, Clone)]
pub struct CatalogEntry {
    pub definition: Arc<AgentDefinition>,
    pub source: AgentSource,
    pub version: Option<u32>,
    pub created_at: Option<chrono::DateTime<chrono::Utc>>,
    pub updated_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Why an agent could not be made ready to run.
#[derive(Debug, Clone)]
pub enum CatalogError {
    NotFound,
    Invalid(Vec<Problem>),
    Parameters(ParameterError),
    Store(StoreError),
}

impl From<StoreError> for CatalogError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    tenant: TenantId,
    name: String,
    version: Option<u32>,
    fingerprint: Option<u32>,
    /// The named skills' versions ([`skills_fingerprint`]): a changed skill compiles its
    /// agents again.
    skills: u64,
    culture: Option<String>,
}

/// What tells one set of resolved skills' contents from another: each skill's name, and for a
/// stored one its version and when that version was written (a skill deleted and created again
/// starts at version 1 again, at a new time). A code skill never changes while the process lives.
fn skills_fingerprint(skills: &[crate::skills::ResolvedSkill]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for skill in skills {
        skill.definition.name.hash(&mut hasher);
        skill.version.hash(&mut hasher);
        skill.updated_at.map(|t| t.timestamp_nanos_opt()).hash(&mut hasher);
    }
    hasher.finish()
}

/// What a run asks for by name: the compiled agent it got last ([`Catalog::compile_current`]).
#[derive(Clone, PartialEq, Eq, Hash)]
struct CurrentKey {
    tenant: TenantId,
    name: String,
    culture: Option<String>,
}

/// A compiled agent and the definitions generation it is current under (`None`: it depends on
/// no stored definition — a code agent that names no shared block, skill or callable agent).
#[derive(Clone)]
struct Current {
    agent: Arc<CompiledAgent>,
    generation: Option<u64>,
}

/// Forgets the compiled agents [`Catalog::compile_current`] keeps ([`Catalog::forgetting`]).
#[derive(Clone)]
pub struct Forgetting(Arc<Mutex<HashMap<CurrentKey, Current>>>);

impl Forgetting {
    /// One tenant's (`Some`), or every tenant's (`None`: signals may have been missed).
    pub fn moved(&self, tenant: Option<&TenantId>) {
        let mut current = lock(&self.0);
        match tenant {
            Some(tenant) => current.retain(|k, _| k.tenant != *tenant),
            None => current.clear(),
        }
    }
}

pub struct Catalog {
    code: BTreeMap<String, Arc<AgentDefinition>>,
    store: Arc<dyn DefinitionStore>,
    providers: ProviderRegistry,
    tools: ToolRegistry,
    skills: crate::skills::SkillCatalog,
    loops: crate::harness::Loops,
    cache: Mutex<HashMap<CacheKey, Arc<CompiledAgent>>>,
    /// Runs' agents by name, each with the generation it was compiled under: read without
    /// touching the store ([`Self::compile_current`]).
    current: Arc<Mutex<HashMap<CurrentKey, Current>>>,
    /// Tenants' egress policies: a definition naming a provider its tenant does not allow
    /// does not validate and does not compile.
    providers_allowed: Option<Arc<crate::model::byok::TenantProviders>>,
    /// Tenants' MCP servers, whose discovered tools definitions name as `{server}_{tool}`.
    mcp: Option<Arc<crate::mcp::service::McpServers>>,
}

impl Catalog {
    pub fn new(
        code: BTreeMap<String, Arc<AgentDefinition>>,
        store: Arc<dyn DefinitionStore>,
        providers: ProviderRegistry,
        tools: ToolRegistry,
    ) -> Self {
        Self {
            code,
            store,
            providers,
            tools,
            skills: crate::skills::SkillCatalog::default(),
            loops: crate::harness::Loops::default(),
            cache: Mutex::new(HashMap::new()),
            current: Arc::default(),
            providers_allowed: None,
            mcp: None,
        }
    }

    /// Resolves `{server}_{tool}` tool names against tenants' MCP servers.
    pub fn with_mcp(mut self, mcp: Arc<crate::mcp::service::McpServers>) -> Self {
        self.mcp = Some(mcp);
        self
    }

    /// Holds definitions to their tenants' egress policies.
    pub fn with_provider_policy(mut self, policy: Arc<crate::model::byok::TenantProviders>) -> Self {
        self.providers_allowed = Some(policy);
        self
    }

    /// The problems `binding` has under `tenant`'s egress policy (none without one).
    async fn egress_problems(
        &self,
        tenant: &TenantId,
        binding: &crate::definition::ModelBinding,
    ) -> Result<Vec<Problem>, StoreError> {
        match &self.providers_allowed {
            Some(policy) => Ok(policy.state(tenant).await?.egress_problems(binding)),
            None => Ok(Vec::new()),
        }
    }

    /// `compiled`, unless its tenant's egress policy refuses a provider it names.
    async fn allowed(
        &self,
        tenant: &TenantId,
        compiled: Arc<CompiledAgent>,
    ) -> Result<Arc<CompiledAgent>, CatalogError> {
        let problems = self.egress_problems(tenant, &compiled.definition.model).await?;
        if problems.is_empty() { Ok(compiled) } else { Err(CatalogError::Invalid(problems)) }
    }

    /// The skills definitions may name: code skills, then each tenant's stored skills.
    pub fn with_skills(mut self, skills: crate::skills::SkillCatalog) -> Self {
        self.skills = skills;
        self
    }

    pub fn skills(&self) -> &crate::skills::SkillCatalog {
        &self.skills
    }

    /// The harness-loop criteria registered in code, and the judge binding.
    pub fn with_loops(mut self, loops: crate::harness::Loops) -> Self {
        self.loops = loops;
        self
    }

    pub fn loops(&self) -> &crate::harness::Loops {
        &self.loops
    }

    pub fn providers(&self) -> &ProviderRegistry {
        &self.providers
    }

    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    pub fn is_code_agent(&self, name: &str) -> bool {
        self.code.contains_key(name)
    }

    /// Looks a name up: code first, then the tenant's stored definitions.
    pub async fn get(&self, tenant: &TenantId, name: &AgentName) -> Result<Option<CatalogEntry>, StoreError> {
        if let Some(def) = self.code.get(name.as_str()) {
            return Ok(Some(CatalogEntry {
                definition: def.clone(),
                source: AgentSource::Code,
                version: None,
                created_at: None,
                updated_at: None,
            }));
        }
        Ok(self.store.get(tenant, name).await?.map(|s| CatalogEntry {
            definition: Arc::new(s.definition),
            source: AgentSource::Stored,
            version: Some(s.version),
            created_at: Some(s.created_at),
            updated_at: Some(s.updated_at),
        }))
    }

    /// Code agents first (by name), then stored definitions (by name) that no code agent
    /// shadows.
    pub async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<CatalogEntry>, StoreError> {
        crate::definitions::code_then_stored(
            &self.code,
            self.store.as_ref(),
            tenant,
            (skip, take),
            |d| CatalogEntry {
                definition: d.clone(),
                source: AgentSource::Code,
                version: None,
                created_at: None,
                updated_at: None,
            },
            |s| CatalogEntry {
                definition: Arc::new(s.definition),
                source: AgentSource::Stored,
                version: Some(s.version),
                created_at: Some(s.created_at),
                updated_at: Some(s.updated_at),
            },
        )
        .await
    }

    /// Resolves a definition's outward names in `tenant`. `walk_callables` also follows the
    /// callable-agent graph to find cycles (the save path does; a run only needs existence).
    pub async fn resolve(
        &self,
        tenant: &TenantId,
        def: &AgentDefinition,
        walk_callables: bool,
    ) -> Result<(Resolution, Option<u32>), StoreError> {
        let mut resolution = Resolution::default();
        let mut fingerprint = None;
        if let Some(shared) = def.shared_instructions_name.as_deref()
            && shared != def.name
            && let Ok(name) = AgentName::parse(shared)
            && let Some(entry) = self.get(tenant, &name).await?
        {
            fingerprint = entry.version;
            resolution.shared_block = Some(entry.definition);
        }
        for name in &def.skill_names {
            let Ok(parsed) = crate::names::SkillName::parse(name) else { continue };
            match self.skills.get(tenant, &parsed).await? {
                Some(skill) => resolution.skills.push(skill),
                None => resolution.missing_skills.push(name.clone()),
            }
        }
        let mut frontier: Vec<(String, Vec<String>)> = Vec::new();
        for name in &def.callable_agent_names {
            let Ok(parsed) = AgentName::parse(name) else { continue };
            if name == &def.name {
                continue;
            }
            match self.get(tenant, &parsed).await? {
                None => resolution.missing_callable_agents.push(name.clone()),
                Some(entry) => {
                    if walk_callables {
                        frontier.push((name.clone(), entry.definition.callable_agent_names.clone()));
                    }
                    resolution.callables.push(entry.definition);
                }
            }
        }
        // MCP tools: the save path reads the stored catalog; a run refreshes a stale one.
        if let Some(mcp) = &self.mcp {
            resolution.mcp_tools =
                crate::mcp::tools::resolve(mcp, tenant, &def.tool_names, &self.tools, !walk_callables).await?;
        }
        // Breadth-first walk from the direct callees; reaching `def.name` again is a cycle.
        let mut seen: BTreeSet<String> = frontier.iter().map(|(n, _)| n.clone()).collect();
        let mut paths: BTreeMap<String, Vec<String>> =
            frontier.iter().map(|(n, _)| (n.clone(), vec![def.name.clone(), n.clone()])).collect();
        let mut steps = 0;
        while let Some((name, callees)) = (!frontier.is_empty()).then(|| frontier.remove(0)) {
            for callee in callees {
                steps += 1;
                if steps > MAX_CALLABLE_WALK {
                    break;
                }
                let mut path = paths.get(&name).cloned().unwrap_or_default();
                path.push(callee.clone());
                if callee == def.name {
                    resolution.callable_cycle = Some(path);
                    return Ok((resolution, fingerprint));
                }
                if !seen.insert(callee.clone()) {
                    continue;
                }
                if let Ok(parsed) = AgentName::parse(&callee)
                    && let Some(entry) = self.get(tenant, &parsed).await?
                {
                    paths.insert(callee.clone(), path);
                    frontier.push((callee, entry.definition.callable_agent_names.clone()));
                }
            }
        }
        Ok((resolution, fingerprint))
    }

    /// What `POST /api/agents/validate` and the save path run. Calls no model.
    pub async fn validate(&self, tenant: &TenantId, def: &AgentDefinition) -> Result<ValidationReport, StoreError> {
        let (resolution, _) = self.resolve(tenant, def, true).await?;
        let mut problems = compiler::check(def, &resolution, &self.providers, &self.tools);
        problems.extend(self.loops.check(def));
        problems.extend(self.egress_problems(tenant, &def.model).await?);
        if let Some(mcp) = &self.mcp {
            problems.extend(crate::mcp::resources::problems(mcp, tenant, &def.mcp_resource_uris).await?);
        }
        Ok(ValidationReport::from_problems(problems))
    }

    /// Checks a code definition against the registries at start-up (stored definitions are
    /// not reachable then, so only code agents count as existing).
    pub fn validate_code_agent(&self, def: &AgentDefinition) -> Vec<Problem> {
        let mut resolution = Resolution::default();
        if let Some(shared) = &def.shared_instructions_name {
            resolution.shared_block = self.code.get(shared).cloned();
        }
        let mut problems = compiler::check(def, &resolution, &self.providers, &self.tools);
        problems.extend(self.loops.check(def));
        // A code agent may name a block or callee that tenants store later; only the
        // registry-backed names are start-up errors.
        problems.retain(|p| {
            !matches!(
                p.code,
                crate::report::ProblemCode::UnknownSharedInstructions
                    | crate::report::ProblemCode::UnknownCallableAgent
                    | crate::report::ProblemCode::UnknownSkill
            )
        });
        problems
    }

    /// [`Self::compile`] for a run whose row is written with [`RunStore::create_run_at`]: the
    /// agent, and the tenant's definitions generation it is current under, which the row's
    /// write is to be guarded on (`None`: write it unguarded). An agent compiled before is
    /// handed out again without reading the store: if a definition was written since, the
    /// guarded write refuses the row, the caller calls [`Self::moved`] and compiles again.
    ///
    /// [`RunStore::create_run_at`]: crate::runs::store::RunStore::create_run_at
    pub async fn compile_current(
        &self,
        tenant: &TenantId,
        name: &AgentName,
        culture: Option<&str>,
        parameters: &BTreeMap<String, String>,
    ) -> Result<(Arc<CompiledAgent>, Option<u64>), CatalogError> {
        if !parameters.is_empty() {
            return Ok((self.compile(tenant, name, culture, parameters).await?, None));
        }
        let key =
            CurrentKey { tenant: tenant.clone(), name: name.as_str().to_owned(), culture: culture.map(str::to_owned) };
        let hit = lock(&self.current).get(&key).cloned();
        if let Some(Current { agent, generation }) = hit {
            return Ok((self.allowed(tenant, agent).await?, generation));
        }
        let self_contained = self.code.get(name.as_str()).is_some_and(|d| {
            d.shared_instructions_name.is_none() && d.skill_names.is_empty() && d.callable_agent_names.is_empty()
        });
        // Read before the definitions: a write after this read moves the generation past the
        // one the row is guarded on, so nothing compiled from an older definition is recorded.
        let generation = if self_contained { None } else { Some(self.store.generation(tenant).await?) };
        let (agent, cacheable) = self.compiled(tenant, name, culture, parameters).await?;
        if cacheable {
            let mut current = lock(&self.current);
            if current.len() >= CACHE_CAPACITY {
                current.clear();
            }
            current.insert(key, Current { agent: agent.clone(), generation });
        }
        Ok((self.allowed(tenant, agent).await?, generation))
    }

    /// The tenant's definitions moved on (a guarded row write was refused, a write went
    /// through here): nothing compiled for it before is handed out again.
    pub fn moved(&self, tenant: &TenantId) {
        self.forgetting().moved(Some(tenant));
    }

    /// A handle that forgets compiled agents from elsewhere: the drain, when another instance
    /// says a tenant's definitions moved (`defs:<tenant>` on Postgres).
    pub fn forgetting(&self) -> Forgetting {
        Forgetting(self.current.clone())
    }

    /// Makes an agent ready for one run in `tenant`, from its definition as stored now.
    pub async fn compile(
        &self,
        tenant: &TenantId,
        name: &AgentName,
        culture: Option<&str>,
        parameters: &BTreeMap<String, String>,
    ) -> Result<Arc<CompiledAgent>, CatalogError> {
        let (agent, _) = self.compiled(tenant, name, culture, parameters).await?;
        self.allowed(tenant, agent).await
    }

    /// The agent compiled from its definition as stored now (not yet held to the egress
    /// policy), and whether it may be kept for another run.
    async fn compiled(
        &self,
        tenant: &TenantId,
        name: &AgentName,
        culture: Option<&str>,
        parameters: &BTreeMap<String, String>,
    ) -> Result<(Arc<CompiledAgent>, bool), CatalogError> {
        let entry = self.get(tenant, name).await?.ok_or(CatalogError::NotFound)?;
        let (resolution, fingerprint) = self.resolve(tenant, &entry.definition, false).await?;
        // MCP tools come and go with their servers' discoveries: such an agent is compiled anew.
        let cacheable =
            parameters.is_empty() && entry.definition.parameters.is_empty() && resolution.mcp_tools.is_empty();
        // Two cultures share a compiled instance only if they resolve to the same texts,
        // for the agent and for its shared block alike.
        let block_culture = resolution.shared_block.as_ref().and_then(|b| compiler::resolve_culture(b, culture).1);
        let culture_key = match (compiler::resolve_culture(&entry.definition, culture).1, block_culture) {
            (None, None) => None,
            (a, b) => Some(format!("{}|{}", a.unwrap_or_default(), b.unwrap_or_default())),
        };
        let key = CacheKey {
            tenant: tenant.clone(),
            name: name.as_str().to_owned(),
            version: entry.version,
            fingerprint,
            skills: skills_fingerprint(&resolution.skills),
            culture: culture_key,
        };
        let hit = if cacheable { self.cache_lock().get(&key).cloned() } else { None };
        if let Some(hit) = hit {
            return Ok((hit, true));
        }
        let loop_problems = self.loops.check(&entry.definition);
        if !loop_problems.is_empty() {
            return Err(CatalogError::Invalid(loop_problems));
        }
        let compiled = compiler::compile(
            entry.definition,
            entry.version,
            &resolution,
            culture,
            parameters,
            &self.providers,
            &self.tools,
        )
        .map_err(|e| match e {
            CompileFailure::Invalid(p) => CatalogError::Invalid(p),
            CompileFailure::Parameters(p) => CatalogError::Parameters(p),
        })?;
        let compiled = Arc::new(compiled);
        if cacheable {
            let mut cache = self.cache_lock();
            if cache.len() >= CACHE_CAPACITY {
                cache.clear();
            }
            cache.insert(key, compiled.clone());
        }
        Ok((compiled, cacheable))
    }

    /// Compiles `definition` (one stored version, not necessarily the latest) in `tenant`,
    /// uncached: a replay against a selected version.
    pub async fn compile_definition(
        &self,
        tenant: &TenantId,
        definition: Arc<AgentDefinition>,
        version: Option<u32>,
        culture: Option<&str>,
        parameters: &BTreeMap<String, String>,
    ) -> Result<Arc<CompiledAgent>, CatalogError> {
        let (resolution, _) = self.resolve(tenant, &definition, false).await?;
        let loop_problems = self.loops.check(&definition);
        if !loop_problems.is_empty() {
            return Err(CatalogError::Invalid(loop_problems));
        }
        let compiled =
            compiler::compile(definition, version, &resolution, culture, parameters, &self.providers, &self.tools)
                .map(Arc::new)
                .map_err(|e| match e {
                    CompileFailure::Invalid(p) => CatalogError::Invalid(p),
                    CompileFailure::Parameters(p) => CatalogError::Parameters(p),
                })?;
        self.allowed(tenant, compiled).await
    }

    fn cache_lock(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, Arc<CompiledAgent>>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}
