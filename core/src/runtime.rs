//! The runtime an adapter builds once at start-up: registries, catalog, stores, platform
//! ports and settings. [`RuntimeBuilder`] is the Rust face of the spec's `AddTracon()` /
//! `Use…()` registrations; replaceable ports (tool authorization, argument validation,
//! stores) keep a built-in default unless the host sets its own.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::access::{AllowAllRuns, RunAuthorizer};
use crate::approvals::{ApprovalPolicy, Gatekeeper};
use crate::attribution::{NoAttribution, RunAttribution};
use crate::catalog::Catalog;
use crate::config::{Config, ConfigError};
use crate::definition::AgentDefinition;
use crate::jobs::JobTransport;
use crate::model::catalog::ModelCatalog;
use crate::model::{ModelProvider, ProviderRegistry};
use crate::names::AgentName;
use crate::ports::Platform;
use crate::pricing::Pricing;
use crate::quota::{QuotaNoticeSink, Quotas};
use crate::recorder::{RecordingSettings, RunEventSink};
use crate::runs::drain::Drain;
use crate::stores::Stores;
use crate::tools::pipeline::{DEFAULT_TOOL_TIMEOUT, RequiredPermissions, ToolArgumentsValidator, ToolAuthorizer};
use crate::tools::{ToolRegistration, ToolRegistry};

/// Installation-wide run settings.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// Longest wait for a model's first byte, and between two streamed chunks.
    pub model_timeout: Duration,
    /// Timeout of a tool without its own (`Tracon:Tools:DefaultTimeoutSeconds`).
    pub default_tool_timeout: Duration,
    /// Output limit of a tool without its own; unlimited by default.
    pub default_max_output_bytes: Option<usize>,
    /// On a host that does not hear signals ([`crate::runs::drain::Drain::set_heard`]), how
    /// long a running turn may go without learning its cancel flag
    /// (`Tracon:Runs:CancelCheckIntervalSeconds`, 1 s): every event write returns it, and the
    /// flag is read only when no write did within this time. Where signals are heard a cancel
    /// reaches the run's token and the flag is never read.
    pub cancel_check_interval: Duration,
    pub recording: RecordingSettings,
    /// How long a pending approval request can be decided (`Tracon:Approvals:ExpirySeconds`,
    /// 24 hours).
    pub approval_expiry: Duration,
    /// Heartbeats of executing runs and the reconciliation of orphaned ones.
    pub reconciliation: ReconciliationSettings,
    /// Session ownership (`Tracon:SessionOwnership:*`; off by default).
    pub session_ownership: crate::sessions::ownership::SessionOwnership,
    /// `Tracon:RunContinuation:Enabled` (true): a queued run whose executor went away is
    /// continued as a new run by whichever worker gets its job next (see
    /// [`crate::runs::continuation`]); off, it stays closed `Orphaned`.
    pub continuation: bool,
    /// `Tracon:RunContinuation:SoftDeadlineSeconds` (none): how long one attempt of a queued
    /// run may go on before it hands the run over, at its next step boundary, to a later
    /// attempt (the SAM templates and `wrangler.toml` set it below each platform's limit).
    pub soft_deadline: Option<Duration>,
    /// `Tracon:AgentGraph:*`: the limits every root run's call tree shares.
    pub agent_graph: Arc<crate::runs::tree::AgentGraphSettings>,
    /// `Tracon:SubAgents:*`: the default wait limits of a call to a callable agent.
    pub sub_agents: crate::runs::tree::SubAgentDefaults,
    /// `Tracon:Harness:Judge:Provider` and `:Model`: the model a loop's `aiJudge` criterion
    /// asks (none: `aiJudge` does not compile).
    pub loop_judge: Option<(String, String)>,
    /// `Tracon:Workflows:EnableCheckpointing` (true): workflow runs write a checkpoint at
    /// every super-step boundary; off, a workflow that asks a person fails instead of waiting.
    pub workflow_checkpointing: bool,
    /// Retries, the circuit breaker and the concurrency limit of model calls
    /// (`Tracon:ModelRetry:*`, `Tracon:CircuitBreaker:*`, `Tracon:ModelConcurrency:*`).
    pub resilience: crate::model::resilience::ResilienceSettings,
    /// `Tracon:Preflight:*`: the prompt checked against its model's context window before any
    /// provider is called (off by default).
    pub preflight: crate::runs::preflight::PreflightSettings,
    /// `Tracon:Limits:*`: how large a run's input may be (`MaxMessageChars`, 100,000).
    pub limits: crate::runs::input::InputLimits,
}

/// `Tracon:RunReconciliation:*`: an executing run moves its heartbeat every `heartbeat`
/// (`HeartbeatSeconds`, 30); the tick closes a running run not heard from for `orphan_after`
/// (`OrphanAfterSeconds`, 300) as `Failed` with error class `Orphaned`. `Enabled` (true) turns
/// the closing off; heartbeats are written either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconciliationSettings {
    pub enabled: bool,
    pub heartbeat: Duration,
    pub orphan_after: Duration,
}

impl Default for ReconciliationSettings {
    fn default() -> Self {
        Self { enabled: true, heartbeat: Duration::from_secs(30), orphan_after: Duration::from_secs(300) }
    }
}

impl ReconciliationSettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        let s = Self {
            enabled: config.bool("Tracon:RunReconciliation:Enabled")?.unwrap_or(d.enabled),
            heartbeat: config.seconds("Tracon:RunReconciliation:HeartbeatSeconds")?.unwrap_or(d.heartbeat),
            orphan_after: config.seconds("Tracon:RunReconciliation:OrphanAfterSeconds")?.unwrap_or(d.orphan_after),
        };
        if s.heartbeat.is_zero() || s.orphan_after < s.heartbeat * 2 {
            return Err(ConfigError::Message(
                "Tracon__RunReconciliation__HeartbeatSeconds must be positive and OrphanAfterSeconds at least twice it."
                    .into(),
            ));
        }
        Ok(s)
    }
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        Self {
            model_timeout: Duration::from_secs(100),
            default_tool_timeout: DEFAULT_TOOL_TIMEOUT,
            default_max_output_bytes: None,
            cancel_check_interval: Duration::from_secs(1),
            recording: RecordingSettings::default(),
            approval_expiry: Duration::from_secs(24 * 3600),
            reconciliation: ReconciliationSettings::default(),
            session_ownership: crate::sessions::ownership::SessionOwnership::default(),
            continuation: true,
            soft_deadline: None,
            agent_graph: Arc::default(),
            sub_agents: crate::runs::tree::SubAgentDefaults::default(),
            loop_judge: None,
            workflow_checkpointing: true,
            resilience: crate::model::resilience::ResilienceSettings::default(),
            preflight: crate::runs::preflight::PreflightSettings::default(),
            limits: crate::runs::input::InputLimits::default(),
        }
    }
}

impl RuntimeSettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            model_timeout: config.seconds("Tracon:Providers:RequestTimeoutSeconds")?.unwrap_or(d.model_timeout),
            default_tool_timeout: config
                .seconds("Tracon:Tools:DefaultTimeoutSeconds")?
                .unwrap_or(d.default_tool_timeout),
            default_max_output_bytes: config.parse::<usize>("Tracon:Tools:DefaultMaxOutputBytes")?,
            cancel_check_interval: config
                .seconds("Tracon:Runs:CancelCheckIntervalSeconds")?
                .unwrap_or(d.cancel_check_interval),
            recording: RecordingSettings::from_config(config)?,
            approval_expiry: match config.seconds("Tracon:Approvals:ExpirySeconds")? {
                Some(d) if d.is_zero() => {
                    return Err(ConfigError::Message("Tracon__Approvals__ExpirySeconds must be positive.".into()));
                }
                Some(d) => d,
                None => d.approval_expiry,
            },
            reconciliation: ReconciliationSettings::from_config(config)?,
            continuation: config.bool("Tracon:RunContinuation:Enabled")?.unwrap_or(true),
            soft_deadline: config.seconds("Tracon:RunContinuation:SoftDeadlineSeconds")?,
            agent_graph: Arc::new(crate::runs::tree::AgentGraphSettings::from_config(config)?),
            sub_agents: crate::runs::tree::SubAgentDefaults::from_config(config)?,
            loop_judge: match (config.get("Tracon:Harness:Judge:Provider"), config.get("Tracon:Harness:Judge:Model")) {
                (None, None) => None,
                (Some(p), Some(m)) if !p.trim().is_empty() && !m.trim().is_empty() => {
                    Some((p.trim().to_owned(), m.trim().to_owned()))
                }
                _ => {
                    return Err(ConfigError::Message(
                        "Tracon__Harness__Judge__Provider and __Model are set together, or neither.".into(),
                    ));
                }
            },
            session_ownership: crate::sessions::ownership::SessionOwnership::from_config(config)?,
            workflow_checkpointing: config.bool("Tracon:Workflows:EnableCheckpointing")?.unwrap_or(true),
            resilience: crate::model::resilience::ResilienceSettings::from_config(config)?,
            preflight: crate::runs::preflight::PreflightSettings::from_config(config)?,
            limits: crate::runs::input::InputLimits::from_config(config)?,
        })
    }
}

/// Everything a run needs, shared by every request.
pub struct Runtime {
    pub catalog: Catalog,
    pub stores: Stores,
    pub platform: Platform,
    pub pricing: Pricing,
    pub settings: RuntimeSettings,
    pub tool_authorizer: Arc<dyn ToolAuthorizer>,
    pub tool_validator: Option<Arc<dyn ToolArgumentsValidator>>,
    pub attribution: Arc<dyn RunAttribution>,
    pub event_sinks: Vec<Arc<dyn RunEventSink>>,
    /// The host's policy for runs and sessions (allows everything by default).
    pub run_authorizer: Arc<dyn RunAuthorizer>,
    /// Quota rules checked before a run starts (none by default).
    pub quotas: Quotas,
    /// Whether a call of a tool that requires approval asks (policies, then rules).
    pub gatekeeper: Arc<Gatekeeper>,
    /// Where quota threshold notices go (besides the log and, when on, the run's stream).
    pub quota_sinks: Vec<Arc<dyn QuotaNoticeSink>>,
    /// Outbound webhooks: delivery settings, the egress policy, where secrets are read.
    pub webhooks: Arc<crate::webhooks::WebhookSettings>,
    /// The host's own job handlers ([`RuntimeBuilder::add_job_handler`]), served next to the
    /// built-in ones by every consumer.
    pub custom_job_handlers: Vec<Arc<dyn crate::jobs::JobHandler>>,
    /// The drain switch and the runs executing in this process.
    pub drain: Arc<Drain>,
    /// The functions a workflow's function nodes may name.
    pub workflow_functions: crate::workflows::functions::FunctionRegistry,
    /// How model calls get to an answer: retries, fallback links, the shared circuit breaker,
    /// this instance's concurrency slots.
    pub models: crate::model::resilience::ModelCalls,
    /// The host's own check of structured answers, after the built-in ones.
    pub response_validator: Option<Arc<dyn crate::structured::ResponseValidator>>,
    /// Tenants' own provider credentials (BYOK) and egress policies, as this instance sees them.
    pub tenant_providers: Arc<crate::model::byok::TenantProviders>,
    /// The providers' health, cached per provider in this instance.
    pub model_health: crate::model::health::HealthChecks,
    /// Tenants' remote MCP servers: discovery and the catalog it keeps.
    pub mcp: Arc<crate::mcp::service::McpServers>,
    /// Where queued runs go: set once by a host that runs a job consumer
    /// ([`Runtime::set_queue`]); without one a run cannot be queued.
    queue: OnceLock<RunQueue>,
}

/// How this host queues runs: the transport that wakes its consumer, and the attempts of a
/// queued run's job.
#[derive(Clone)]
pub struct RunQueue {
    pub transport: Arc<dyn JobTransport>,
    pub max_attempts: u32,
}

impl Runtime {
    /// Turns queued runs on (`Prefer: respond-async`, inbound triggers), with the transport
    /// that wakes this host's consumer. Set once; a second call is ignored.
    pub fn set_queue(&self, queue: RunQueue) {
        if self.queue.set(queue).is_err() {
            tracing::warn!("the run queue was set twice; the first one stays");
        }
    }

    /// The host's run queue, when it runs a job consumer.
    pub fn queue(&self) -> Option<&RunQueue> {
        self.queue.get()
    }
}

/// Start-up registrations. Problems are collected and reported together by [`build`](Self::build).
pub struct RuntimeBuilder {
    agents: Vec<AgentDefinition>,
    skills: Vec<crate::skills::SkillDefinition>,
    tools: ToolRegistry,
    providers: ProviderRegistry,
    models: ModelCatalog,
    stores: Option<Stores>,
    platform: Platform,
    pricing: Pricing,
    settings: RuntimeSettings,
    tool_authorizer: Arc<dyn ToolAuthorizer>,
    tool_validator: Option<Arc<dyn ToolArgumentsValidator>>,
    attribution: Arc<dyn RunAttribution>,
    event_sinks: Vec<Arc<dyn RunEventSink>>,
    run_authorizer: Arc<dyn RunAuthorizer>,
    quotas: Quotas,
    approval_policies: HashMap<String, Arc<dyn ApprovalPolicy>>,
    quota_sinks: Vec<Arc<dyn QuotaNoticeSink>>,
    webhooks: crate::webhooks::WebhookSettings,
    custom_job_handlers: Vec<Arc<dyn crate::jobs::JobHandler>>,
    loop_evaluators: BTreeMap<String, Arc<dyn crate::harness::LoopEvaluator>>,
    workflow_functions: crate::workflows::functions::FunctionRegistry,
    response_validator: Option<Arc<dyn crate::structured::ResponseValidator>>,
    provider_keys: crate::model::byok::ProviderKeySettings,
    mcp: crate::mcp::McpSettings,
    errors: Vec<String>,
}

/// Start-up failed; every problem is listed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("Tracon could not start:\n  - {}", .0.join("\n  - "))]
pub struct BuildError(pub Vec<String>);

impl RuntimeBuilder {
    pub fn new(platform: Platform) -> Self {
        Self {
            agents: Vec::new(),
            skills: Vec::new(),
            tools: ToolRegistry::default(),
            providers: ProviderRegistry::default(),
            models: ModelCatalog::default(),
            stores: None,
            platform,
            pricing: Pricing::new("USD"),
            settings: RuntimeSettings::default(),
            tool_authorizer: Arc::new(RequiredPermissions),
            tool_validator: None,
            attribution: Arc::new(NoAttribution),
            run_authorizer: Arc::new(AllowAllRuns),
            quotas: Quotas::default(),
            event_sinks: Vec::new(),
            approval_policies: HashMap::new(),
            quota_sinks: Vec::new(),
            webhooks: crate::webhooks::WebhookSettings::default(),
            custom_job_handlers: Vec::new(),
            loop_evaluators: BTreeMap::new(),
            workflow_functions: Default::default(),
            response_validator: None,
            provider_keys: crate::model::byok::ProviderKeySettings::default(),
            mcp: crate::mcp::McpSettings::default(),
            errors: Vec::new(),
        }
    }

    /// Where tenants' provider key names go and their values are read (`Tracon:ProviderKeys:*`).
    pub fn provider_keys(mut self, settings: crate::model::byok::ProviderKeySettings) -> Self {
        self.provider_keys = settings;
        self
    }

    /// The MCP client's settings (`Tracon:Mcp:*`): refresh interval, connection timeout, tools
    /// per server, where credential key names go, the egress guard.
    pub fn mcp(mut self, settings: crate::mcp::McpSettings) -> Self {
        self.mcp = settings;
        self
    }

    /// The host's own check of structured answers (the spec's `IStructuredResponseValidator`):
    /// runs after the JSON and schema checks on every answer of an agent with a JSON
    /// `responseFormat`; a refusal rejects the answer (see [`crate::structured`]).
    pub fn response_validator(mut self, validator: Arc<dyn crate::structured::ResponseValidator>) -> Self {
        self.response_validator = Some(validator);
        self
    }

    /// Registers a harness-loop criterion written in code, for definitions to name as
    /// `harness.loop.criteria[].kind`. A built-in kind or a kind registered twice is a
    /// start-up error.
    pub fn add_loop_evaluator(mut self, kind: &str, evaluator: Arc<dyn crate::harness::LoopEvaluator>) -> Self {
        if crate::harness::BUILT_IN.contains(&kind) || self.loop_evaluators.contains_key(kind) || kind.trim().is_empty()
        {
            self.errors.push(format!("The loop criterion kind '{kind}' is built in, empty or registered twice."));
        } else {
            self.loop_evaluators.insert(kind.to_owned(), evaluator);
        }
        self
    }

    /// Adds a job type of the host's own: jobs with its handler key ([`crate::background::enqueue`])
    /// run through it on every host's consumer, at least once. A key the runtime serves
    /// already (`run.execute`, `webhook.deliver`, or another added handler's) is a start-up
    /// error: dispatch is an exact key match, never an order.
    pub fn add_job_handler(mut self, handler: Arc<dyn crate::jobs::JobHandler>) -> Self {
        let key = handler.key();
        if crate::jobs::BUILT_IN_JOB_KEYS.contains(&key) || self.custom_job_handlers.iter().any(|h| h.key() == key) {
            self.errors.push(format!("Two job handlers serve the key '{key}'."));
        } else {
            self.custom_job_handlers.push(handler);
        }
        self
    }

    /// Registers a workflow function (the spec's `AddWorkflowFunction`): a `Sequential`
    /// workflow's `nodes` may name it. `retry` retries a transient failure inside the node's
    /// one call. A name taken (`human-input` is built in) is a start-up error.
    pub fn add_workflow_function(
        mut self,
        name: &str,
        description: &str,
        function: Arc<dyn crate::workflows::functions::WorkflowFunction>,
        retry: Option<crate::workflows::functions::RetryPolicy>,
    ) -> Self {
        let registered =
            crate::workflows::functions::Registered { description: description.to_owned(), function, retry };
        if let Err(e) = self.workflow_functions.insert(name, registered) {
            self.errors.push(e);
        }
        self
    }

    /// Registers a code-defined approval policy for one tool (the spec's
    /// `AddToolApprovalPolicy`): it runs before the stored approval rules and can force or
    /// waive the approval; a failing policy forces it (see [`crate::approvals`]).
    pub fn approval_policy(mut self, tool: &str, policy: Arc<dyn ApprovalPolicy>) -> Self {
        if self.approval_policies.insert(tool.to_owned(), policy).is_some() {
            self.errors.push(format!("Two approval policies are registered for tool '{tool}'."));
        }
        self
    }

    /// Binds the host's run and session authorization policy (see [`crate::access`]).
    pub fn run_authorizer(mut self, authorizer: Arc<dyn RunAuthorizer>) -> Self {
        self.run_authorizer = authorizer;
        self
    }

    /// The quota rules checked before a run starts.
    pub fn quotas(mut self, quotas: Quotas) -> Self {
        self.quotas = quotas;
        self
    }

    /// Outbound webhook settings (`Tracon:Webhooks:*`, `Tracon:Egress:*`, and the
    /// configuration signing secrets are read from).
    pub fn webhooks(mut self, settings: crate::webhooks::WebhookSettings) -> Self {
        self.webhooks = settings;
        self
    }

    /// Adds a receiver of quota threshold notices.
    pub fn add_quota_notice_sink(mut self, sink: Arc<dyn QuotaNoticeSink>) -> Self {
        self.quota_sinks.push(sink);
        self
    }

    /// Binds run attribution (user id and labels) to the host's identity layer.
    pub fn attribution(mut self, attribution: Arc<dyn RunAttribution>) -> Self {
        self.attribution = attribution;
        self
    }

    /// Adds a sink that receives every recorded event.
    pub fn add_event_sink(mut self, sink: Arc<dyn RunEventSink>) -> Self {
        self.event_sinks.push(sink);
        self
    }

    /// Registers a code-defined agent. It wins a name clash with any stored definition.
    pub fn add_agent(mut self, definition: AgentDefinition) -> Self {
        self.agents.push(definition);
        self
    }

    /// Registers a code skill (see [`crate::skills`]): every tenant's agents may name it, and it
    /// wins a name clash with any stored skill. Its shape is checked at build.
    pub fn add_skill(mut self, skill: crate::skills::SkillDefinition) -> Self {
        self.skills.push(skill);
        self
    }

    pub fn add_tool(mut self, registration: Result<ToolRegistration, crate::tools::RegistrationError>) -> Self {
        match registration.and_then(|r| self.tools.insert(r)) {
            Ok(()) => {}
            Err(e) => self.errors.push(e.0),
        }
        self
    }

    /// Declares a client-side tool ([`ToolRegistration::client`]): the model may call it, and
    /// the call goes back to the run's caller instead of running here.
    pub fn add_client_tool(self, name: &str, description: &str, schema: serde_json::Value) -> Self {
        self.add_tool(ToolRegistration::client(name, description, schema))
    }

    pub fn add_provider(mut self, provider: Arc<dyn ModelProvider>) -> Self {
        if let Err(e) = self.providers.insert(provider) {
            self.errors.push(e);
        }
        self
    }

    /// Describes providers' models ([`crate::model::catalog`]): their context windows,
    /// capability flags and prices. Added to what earlier calls described; the prices join
    /// [`Self::pricing`]'s at build.
    pub fn model_catalog(mut self, catalog: ModelCatalog) -> Self {
        self.models.merge(catalog);
        self
    }

    pub fn stores(mut self, stores: Stores) -> Self {
        self.stores = Some(stores);
        self
    }

    pub fn pricing(mut self, pricing: Pricing) -> Self {
        self.pricing = pricing;
        self
    }

    pub fn settings(mut self, settings: RuntimeSettings) -> Self {
        self.settings = settings;
        self
    }

    pub fn tool_authorizer(mut self, authorizer: Arc<dyn ToolAuthorizer>) -> Self {
        self.tool_authorizer = authorizer;
        self
    }

    pub fn tool_arguments_validator(mut self, validator: Arc<dyn ToolArgumentsValidator>) -> Self {
        self.tool_validator = Some(validator);
        self
    }

    /// Checks every registration and every code agent; fails with the full list.
    pub fn build(self) -> Result<Runtime, BuildError> {
        let mut errors = self.errors;
        let mut code = BTreeMap::new();
        for def in self.agents {
            if let Err(e) = AgentName::parse(&def.name) {
                errors.push(format!("Code agent '{}': {}", def.name, e.0));
                continue;
            }
            if code.contains_key(&def.name) {
                errors.push(format!("Two code agents are named '{}'.", def.name));
                continue;
            }
            code.insert(def.name.clone(), Arc::new(def));
        }
        let mut code_skills = BTreeMap::new();
        for skill in self.skills {
            for p in skill.check_shape() {
                errors.push(format!("Code skill '{}': {} ({})", skill.name, p.message, p.field));
            }
            if code_skills.contains_key(&skill.name) {
                errors.push(format!("Two code skills are named '{}'.", skill.name));
            }
            code_skills.insert(skill.name.clone(), Arc::new(skill));
        }
        let stores = self.stores.unwrap_or_else(Stores::in_memory);
        let judge = match &self.settings.loop_judge {
            None => None,
            Some((provider, model)) => match self.providers.get(provider) {
                Some(p) => Some(crate::harness::JudgeBinding { provider: p.clone(), model: model.clone() }),
                None => {
                    errors.push(format!("Tracon:Harness:Judge:Provider names '{provider}', which is not registered."));
                    None
                }
            },
        };
        let loops = crate::harness::Loops { evaluators: self.loop_evaluators, judge };
        // The catalog feeds pricing: one list of prices.
        let pricing = self.pricing.with_catalog(&self.models);
        let mut providers = self.providers;
        providers.set_catalog(self.models);
        let tenant_providers = Arc::new(crate::model::byok::TenantProviders::new(
            stores.tenant_providers.clone(),
            self.provider_keys,
            self.platform.clock.clone(),
        ));
        let mcp = Arc::new(crate::mcp::service::McpServers::new(
            stores.mcp_servers.clone(),
            stores.mcp_oauth.clone(),
            self.mcp,
            self.platform.clock.clone(),
        ));
        let catalog = Catalog::new(code.clone(), stores.definitions.clone(), providers, self.tools)
            .with_loops(loops)
            .with_skills(crate::skills::SkillCatalog::new(code_skills, stores.skills.clone()))
            .with_provider_policy(tenant_providers.clone())
            .with_mcp(mcp.clone());
        let catalog_forgetting = catalog.forgetting();
        for def in code.values() {
            for p in catalog.validate_code_agent(def) {
                errors.push(format!("Code agent '{}': {} ({})", def.name, p.message, p.field));
            }
        }
        for tool in self.approval_policies.keys() {
            if catalog.tools().get(tool).is_none() {
                errors.push(format!("An approval policy names tool '{tool}', which is not registered."));
            }
        }
        if !errors.is_empty() {
            return Err(BuildError(errors));
        }
        let gatekeeper =
            Arc::new(Gatekeeper { policies: self.approval_policies, store: Some(stores.approvals.clone()) });
        // `quota.threshold` webhooks go through the quota notice seam like any other sink.
        let mut quota_sinks = self.quota_sinks;
        quota_sinks.push(Arc::new(crate::webhooks::QuotaEvents(crate::webhooks::Publisher {
            webhooks: stores.webhooks.clone(),
            jobs: stores.jobs.clone(),
            clock: self.platform.clock.clone(),
            max_attempts: self.webhooks.max_attempts,
            quiet: self.webhooks.quiet.clone(),
        })));
        let models = crate::model::resilience::ModelCalls::new(
            self.settings.resilience,
            stores.breakers.clone(),
            self.platform.clock.clone(),
        );
        Ok(Runtime {
            models,
            response_validator: self.response_validator,
            tenant_providers,
            gatekeeper,
            quota_sinks,
            webhooks: Arc::new(self.webhooks),
            custom_job_handlers: self.custom_job_handlers,
            catalog,
            stores,
            platform: self.platform,
            pricing,
            settings: self.settings,
            tool_authorizer: self.tool_authorizer,
            tool_validator: self.tool_validator,
            attribution: self.attribution,
            run_authorizer: self.run_authorizer,
            quotas: self.quotas,
            event_sinks: self.event_sinks,
            drain: {
                let drain = Arc::new(Drain::default());
                drain.forget_on_signal(Arc::new(move |tenant| catalog_forgetting.moved(tenant)));
                drain
            },
            workflow_functions: self.workflow_functions,
            model_health: Default::default(),
            mcp,
            queue: OnceLock::new(),
        })
    }
}
