//! Every compile error kind, parameters and culture rules, through the catalog.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;
use tracon_core::catalog::CatalogError;
use tracon_core::definition::{AgentDefinition, AgentParameter, FallbackLink, ParameterKind};
use tracon_core::model::ModelProvider;
use tracon_core::model::anthropic::AnthropicProvider;
use tracon_core::model::azure::AzureOpenAiProvider;
use tracon_core::model::google::GoogleProvider;
use tracon_core::model::scripted::ScriptedProvider;
use tracon_core::names::{AgentName, TenantId};
use tracon_core::ports::tokio_rt;
use tracon_core::report::ProblemCode;
use tracon_core::runtime::{Runtime, RuntimeBuilder};
use tracon_core::tools::{ToolOutput, ToolRegistration, tool_fn};

fn runtime() -> Runtime {
    let tool = ToolRegistration::new(
        "lookup",
        "Looks up.",
        json!({"type": "object"}),
        tool_fn(|_, _| async { Ok(ToolOutput::from("x")) }),
    );
    RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(ScriptedProvider::demo()) as Arc<dyn ModelProvider>)
        .add_provider(Arc::new(AnthropicProvider::new(reqwest::Client::new(), "k".into(), None)))
        .add_tool(tool)
        .add_agent(AgentDefinition::new("code-agent", "scripted", "m").with_instructions("I am code."))
        .build()
        .unwrap()
}

fn tenant() -> TenantId {
    TenantId::default_tenant()
}

async fn store(rt: &Runtime, def: AgentDefinition) {
    rt.stores.definitions.create(&tenant(), def, rt.platform.clock.now()).await.unwrap();
}

async fn codes(rt: &Runtime, def: &AgentDefinition) -> Vec<ProblemCode> {
    rt.catalog.validate(&tenant(), def).await.unwrap().problems.into_iter().map(|p| p.code).collect()
}

#[tokio::test]
async fn every_compile_error_kind_is_reported_with_its_field() {
    let rt = runtime();
    store(&rt, AgentDefinition::new("block", "scripted", "m").with_instructions("House rules.")).await;
    let mut nested = AgentDefinition::new("nested-block", "scripted", "m").with_instructions("x");
    nested.shared_instructions_name = Some("block".into());
    store(&rt, nested).await;

    let mut d = AgentDefinition::new("a", "nope", "m");
    assert_eq!(codes(&rt, &d).await, vec![ProblemCode::UnknownProvider]);

    d.model.provider = "scripted".into();
    d.tool_names = vec!["lookup".into(), "missing".into()];
    assert_eq!(codes(&rt, &d).await, vec![ProblemCode::UnknownTool]);

    d.tool_names = vec!["lookup".into()];
    d.callable_agent_names = vec!["ghost".into()];
    assert_eq!(codes(&rt, &d).await, vec![ProblemCode::UnknownCallableAgent]);

    d.callable_agent_names = vec![];
    d.shared_instructions_name = Some("absent".into());
    assert_eq!(codes(&rt, &d).await, vec![ProblemCode::UnknownSharedInstructions]);
    d.shared_instructions_name = Some("nested-block".into());
    assert_eq!(codes(&rt, &d).await, vec![ProblemCode::NestedSharedInstructions]);
    d.shared_instructions_name = Some("block".into());
    assert!(codes(&rt, &d).await.is_empty());

    d.model.provider_settings.insert("scripted.magic".into(), json!(true));
    assert_eq!(codes(&rt, &d).await, vec![ProblemCode::UnknownProviderSetting]);

    let mut a = AgentDefinition::new("c", "anthropic", "claude");
    a.provider_settings_insert("anthropic.promptCaching", json!(true));
    assert!(codes(&rt, &a).await.is_empty());
    a.provider_settings_insert("anthropic.thinking.budgetTokens", json!(100_000));
    assert_eq!(codes(&rt, &a).await, vec![ProblemCode::InvalidProviderSetting]);

    // Every problem at once, not the first one only.
    let mut many = AgentDefinition::new("m", "nope", "m").with_tools(&["missing"]);
    many.callable_agent_names = vec!["ghost".into()];
    many.shared_instructions_name = Some("absent".into());
    let mut got = codes(&rt, &many).await;
    got.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(got.len(), 4, "{got:?}");
}

#[tokio::test]
async fn google_settings_and_any_azure_setting_fail_compilation() {
    let rt = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(GoogleProvider::new(reqwest::Client::new(), "k".into(), None).unwrap()))
        .add_provider(Arc::new(
            AzureOpenAiProvider::new(reqwest::Client::new(), "https://r.openai.azure.com", "k".into(), None).unwrap(),
        ))
        .build()
        .unwrap();

    let mut g = AgentDefinition::new("g", "google", "gemini-2.5-flash");
    g.provider_settings_insert("google.safety.harassment", json!("BLOCK_ONLY_HIGH"));
    g.provider_settings_insert("google.safety.civicIntegrity", json!("OFF"));
    g.provider_settings_insert("google.thinking.budgetTokens", json!(512));
    g.provider_settings_insert("google.thinking.includeThoughts", json!(true));
    assert!(codes(&rt, &g).await.is_empty());
    g.provider_settings_insert("google.safety.hateSpeech", json!("BLOCK_SOME"));
    g.provider_settings_insert("google.thinking.budgetTokens", json!(70_000));
    assert_eq!(codes(&rt, &g).await, vec![ProblemCode::InvalidProviderSetting; 2]);
    let mut unknown = AgentDefinition::new("g2", "google", "gemini-2.5-flash");
    unknown.provider_settings_insert("google.safety.everything", json!("OFF"));
    assert_eq!(codes(&rt, &unknown).await, vec![ProblemCode::UnknownProviderSetting]);

    let mut a = AgentDefinition::new("a", "azure-openai", "support-production");
    assert!(codes(&rt, &a).await.is_empty());
    a.provider_settings_insert("azure.dataSources", json!([]));
    assert_eq!(codes(&rt, &a).await, vec![ProblemCode::UnknownProviderSetting]);
}

#[tokio::test]
async fn every_fallback_link_is_checked_like_the_primary_under_its_own_path() {
    let rt = runtime();
    let link = |provider: &str, model: &str| FallbackLink {
        provider: provider.into(),
        model: model.into(),
        ..FallbackLink::default()
    };
    let problems = |def: AgentDefinition| {
        let rt = &rt;
        async move {
            let report = rt.catalog.validate(&tenant(), &def).await.unwrap();
            report.problems.into_iter().map(|p| (p.code, p.field)).collect::<Vec<_>>()
        }
    };
    let mut d = AgentDefinition::new("chained", "scripted", "m");
    d.model.fallbacks = vec![link("anthropic", "claude")];
    assert!(problems(d.clone()).await.is_empty(), "a registered provider is a valid link");

    d.model.fallbacks = vec![link("anthropic", "claude"), link("nope", "m"), link("scripted", " ")];
    assert_eq!(
        problems(d.clone()).await,
        [
            (ProblemCode::Required, "model.fallbacks[2].model".to_owned()),
            (ProblemCode::UnknownProvider, "model.fallbacks[1].provider".to_owned()),
        ]
    );
    // A link's settings are its provider's, checked by its provider, under the link's path.
    let mut settings = link("anthropic", "claude");
    settings.provider_settings.insert("anthropic.thinking.budgetTokens".into(), json!(100_000));
    settings.provider_settings.insert("scripted.magic".into(), json!(1));
    settings.temperature = Some(7.0);
    d.model.fallbacks = vec![settings];
    let mut got = problems(d.clone()).await;
    got.sort_by(|a, b| a.1.cmp(&b.1));
    let fields: Vec<&str> = got.iter().map(|(_, f)| f.as_str()).collect();
    // (Anthropic's own rule adds a second temperature problem: thinking needs it absent or 1.)
    assert_eq!(
        fields,
        [
            "model.fallbacks[0].providerSettings.anthropic.thinking.budgetTokens",
            "model.fallbacks[0].providerSettings.scripted.magic",
            "model.fallbacks[0].temperature",
            "model.fallbacks[0].temperature",
        ],
        "{got:?}"
    );
    d.model.fallbacks = (0..5).map(|_| link("anthropic", "claude")).collect();
    assert_eq!(problems(d).await, [(ProblemCode::LimitExceeded, "model.fallbacks".to_owned())]);
}

trait SettingsExt {
    fn provider_settings_insert(&mut self, k: &str, v: serde_json::Value);
}
impl SettingsExt for AgentDefinition {
    fn provider_settings_insert(&mut self, k: &str, v: serde_json::Value) {
        self.model.provider_settings.insert(k.into(), v);
    }
}

#[tokio::test]
async fn callable_agent_cycles_are_found_across_stored_definitions() {
    let rt = runtime();
    let mut b = AgentDefinition::new("b", "scripted", "m");
    b.callable_agent_names = vec!["c".into()];
    store(&rt, b).await;
    let mut c = AgentDefinition::new("c", "scripted", "m");
    c.callable_agent_names = vec!["a".into()];
    store(&rt, c).await;
    let mut a = AgentDefinition::new("a", "scripted", "m");
    a.callable_agent_names = vec!["b".into()];
    let report = rt.catalog.validate(&tenant(), &a).await.unwrap();
    assert_eq!(report.problems.len(), 1);
    assert_eq!(report.problems[0].code, ProblemCode::CallableAgentCycle);
    assert!(report.problems[0].message.contains("a → b → c → a"), "{}", report.problems[0].message);
}

#[tokio::test]
async fn a_stored_agent_resolves_only_in_its_own_tenant() {
    let rt = runtime();
    store(&rt, AgentDefinition::new("mine", "scripted", "m")).await;
    let other = TenantId::parse("other").unwrap();
    let name = AgentName::parse("mine").unwrap();
    assert!(rt.catalog.get(&other, &name).await.unwrap().is_none());
    assert!(matches!(rt.catalog.compile(&other, &name, None, &BTreeMap::new()).await, Err(CatalogError::NotFound)));
    assert!(rt.catalog.compile(&tenant(), &name, None, &BTreeMap::new()).await.is_ok());
}

fn parameterised() -> AgentDefinition {
    let mut d = AgentDefinition::new("p", "scripted", "m").with_instructions("Help {{customer}} in a {{tone}} tone.");
    d.instructions_by_culture.insert("tr".into(), "{{customer}} için yardım et.".into());
    d.parameters = vec![
        AgentParameter {
            name: "customer".into(),
            kind: ParameterKind::Text,
            required: true,
            default_value: None,
            description: None,
        },
        AgentParameter {
            name: "tone".into(),
            kind: ParameterKind::Text,
            required: false,
            default_value: Some("formal".into()),
            description: None,
        },
    ];
    d
}

fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[tokio::test]
async fn parameters_bind_per_run_and_are_never_shared_through_the_cache() {
    let rt = runtime();
    store(&rt, parameterised()).await;
    let name = AgentName::parse("p").unwrap();
    let a = rt.catalog.compile(&tenant(), &name, None, &values(&[("customer", "Ada")])).await.unwrap();
    let b = rt.catalog.compile(&tenant(), &name, None, &values(&[("customer", "Grace")])).await.unwrap();
    assert_eq!(a.instructions.as_deref(), Some("Help Ada in a formal tone."));
    assert_eq!(b.instructions.as_deref(), Some("Help Grace in a formal tone."));
    assert!(!Arc::ptr_eq(&a, &b));

    match rt.catalog.compile(&tenant(), &name, None, &BTreeMap::new()).await {
        Err(CatalogError::Parameters(p)) => assert_eq!(p.missing, vec!["customer"]),
        other => panic!("expected a missing parameter, got {other:?}"),
    }
    match rt.catalog.compile(&tenant(), &name, None, &values(&[("customer", "x"), ("age", "3")])).await {
        Err(CatalogError::Parameters(p)) => assert_eq!(p.unknown, vec!["age"]),
        other => panic!("expected an unknown parameter, got {other:?}"),
    }
    let tr = rt.catalog.compile(&tenant(), &name, Some("tr-TR"), &values(&[("customer", "Ada")])).await.unwrap();
    assert_eq!(tr.instructions.as_deref(), Some("Ada için yardım et."));
}

#[tokio::test]
async fn compiled_agents_are_cached_per_version_and_resolved_culture() {
    let rt = runtime();
    let mut d = AgentDefinition::new("c", "scripted", "m").with_instructions("default");
    d.instructions_by_culture.insert("tr".into(), "turkish".into());
    store(&rt, d.clone()).await;
    let name = AgentName::parse("c").unwrap();
    let none = BTreeMap::new();
    let en1 = rt.catalog.compile(&tenant(), &name, Some("en"), &none).await.unwrap();
    let de = rt.catalog.compile(&tenant(), &name, Some("de"), &none).await.unwrap();
    let tr = rt.catalog.compile(&tenant(), &name, Some("tr"), &none).await.unwrap();
    let tr_tr = rt.catalog.compile(&tenant(), &name, Some("tr-TR"), &none).await.unwrap();
    assert!(Arc::ptr_eq(&en1, &de), "both resolve to the default text");
    assert!(Arc::ptr_eq(&tr, &tr_tr), "both resolve to 'tr'");
    assert!(!Arc::ptr_eq(&en1, &tr));
    assert_eq!(tr.instructions.as_deref(), Some("turkish"));

    // A new version is compiled afresh.
    d.instructions = Some("changed".into());
    rt.stores.definitions.update(&tenant(), d, rt.platform.clock.now()).await.unwrap();
    let en2 = rt.catalog.compile(&tenant(), &name, Some("en"), &none).await.unwrap();
    assert!(!Arc::ptr_eq(&en1, &en2));
    assert_eq!(en2.instructions.as_deref(), Some("changed"));
    assert_eq!(en2.version, Some(2));
}

#[tokio::test]
async fn a_shared_block_is_prepended_and_its_new_version_invalidates_the_cache() {
    let rt = runtime();
    store(&rt, AgentDefinition::new("rules", "scripted", "m").with_instructions("Always cite your source.")).await;
    let mut d = AgentDefinition::new("support", "scripted", "m").with_instructions("Answer billing questions.");
    d.shared_instructions_name = Some("rules".into());
    store(&rt, d).await;
    let name = AgentName::parse("support").unwrap();
    let first = rt.catalog.compile(&tenant(), &name, None, &BTreeMap::new()).await.unwrap();
    assert_eq!(first.instructions.as_deref(), Some("Always cite your source.\n\nAnswer billing questions."));
    rt.stores
        .definitions
        .update(
            &tenant(),
            AgentDefinition::new("rules", "scripted", "m").with_instructions("Be brief."),
            rt.platform.clock.now(),
        )
        .await
        .unwrap();
    let second = rt.catalog.compile(&tenant(), &name, None, &BTreeMap::new()).await.unwrap();
    assert_eq!(second.instructions.as_deref(), Some("Be brief.\n\nAnswer billing questions."));
}

#[test]
fn bad_code_registrations_fail_start_up_with_every_problem() {
    let err = match RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(ScriptedProvider::demo()) as Arc<dyn ModelProvider>)
        .add_provider(Arc::new(ScriptedProvider::demo()) as Arc<dyn ModelProvider>)
        .add_tool(ToolRegistration::new(
            "1bad",
            "x",
            json!({"type": "object"}),
            tool_fn(|_, _| async { Ok(ToolOutput::from("")) }),
        ))
        .add_agent(AgentDefinition::new("Bad Name", "scripted", "m"))
        .add_agent(AgentDefinition::new("ok", "missing-provider", "m").with_tools(&["nope"]))
        .build()
    {
        Err(e) => e,
        Ok(_) => panic!("start-up must fail"),
    };
    let text = err.to_string();
    for needle in ["registered under the name 'scripted'", "1bad", "Bad Name", "missing-provider", "nope"] {
        assert!(text.contains(needle), "{needle} missing from: {text}");
    }
}
