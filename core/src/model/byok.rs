//! A tenant's own provider credentials (BYOK) and the providers its agents may call.
//!
//! - A **binding** ties a tenant and a provider to the *name* of a configuration key (under
//!   `Tracon:ProviderKeys:`, partitioned per tenant like every stored secret name — see
//!   [`crate::secret_names`]) and, optionally, an endpoint of the tenant's own. The value is
//!   read from configuration at call time and is never stored, logged or answered. A call to a
//!   bound provider goes out with the tenant's key ([`ModelProvider::with_credential`]); a
//!   provider that takes no tenant credential fails the run `provider_credential_unsupported`
//!   and a name that resolves to nothing fails it `provider_credential_missing` — never the
//!   host's key in their place, so a tenant is never billed to the wrong account. A tenant
//!   without a binding for a provider uses the host's credential, as before.
//! - An **egress policy** lists the providers a tenant's agents may call. Without one the
//!   tenant is unrestricted; with one, a definition naming another provider (as its model or a
//!   fallback link) is refused when it is saved and when it runs, and so is a binding for one.
//!
//! A tenant's endpoint is a URL a tenant named, so it goes through the egress guard
//! ([`crate::egress`]): the URL is checked when it is saved and when it is called, and
//! natively the client that reaches it resolves and filters addresses itself. Its calls have
//! a circuit breaker of their own, so a tenant's broken endpoint never opens the breaker of
//! the host's.
//!
//! [`TenantProviders`] is the per-instance view: a tenant's bindings and policy, read from the
//! store at most every `Tracon:ProviderKeys:CacheSeconds` (5).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ModelProvider, ModelRequest, ModelStream, ProviderError};
use crate::config::{Config, ConfigError};
use crate::definition::ModelBinding;
use crate::error::StoreError;
use crate::names::TenantId;
use crate::ports::Clock;
use crate::report::{Problem, ProblemCode};
use crate::secret_names::SecretNamespace;
use crate::sync::lock;

/// Where a tenant's provider key names go (`Tracon:ProviderKeys:AllowedConfigurationPrefix`).
pub const DEFAULT_KEY_PREFIX: &str = "Tracon:ProviderKeys:";

/// A tenant's binding of a provider to its own credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderBinding {
    /// The provider's name, lowercase.
    pub provider: String,
    /// The configuration key that holds the tenant's API key (never the key).
    pub api_key_configuration_name: String,
    /// The tenant's own endpoint for the provider (none: the host's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    pub updated_at: DateTime<Utc>,
}

/// The providers a tenant's agents may call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderEgress {
    /// Provider names, lowercase, sorted.
    pub allowed_providers: Vec<String>,
    pub updated_at: DateTime<Utc>,
}

impl ProviderEgress {
    pub fn allows(&self, provider: &str) -> bool {
        self.allowed_providers.iter().any(|p| p.eq_ignore_ascii_case(provider))
    }
}

/// A tenant's bindings and egress policy.
#[async_trait::async_trait]
pub trait TenantProviderStore: Send + Sync {
    /// The tenant's bindings, by provider.
    async fn bindings(&self, tenant: &TenantId) -> Result<Vec<ProviderBinding>, StoreError>;
    /// Writes (or replaces) the tenant's binding for `binding.provider`.
    async fn put_binding(&self, tenant: &TenantId, binding: &ProviderBinding) -> Result<(), StoreError>;
    /// Removes it; `false` when there was none.
    async fn delete_binding(&self, tenant: &TenantId, provider: &str) -> Result<bool, StoreError>;
    async fn egress(&self, tenant: &TenantId) -> Result<Option<ProviderEgress>, StoreError>;
    async fn put_egress(&self, tenant: &TenantId, policy: &ProviderEgress) -> Result<(), StoreError>;
    /// Removes it (the tenant is unrestricted again); `false` when there was none.
    async fn delete_egress(&self, tenant: &TenantId) -> Result<bool, StoreError>;
}

/// Bindings and policies in process memory.
#[derive(Default)]
pub struct MemoryTenantProviderStore {
    bindings: Mutex<HashMap<(TenantId, String), ProviderBinding>>,
    egress: Mutex<HashMap<TenantId, ProviderEgress>>,
}

#[async_trait::async_trait]
impl TenantProviderStore for MemoryTenantProviderStore {
    async fn bindings(&self, tenant: &TenantId) -> Result<Vec<ProviderBinding>, StoreError> {
        let mut out: Vec<ProviderBinding> =
            lock(&self.bindings).iter().filter(|((t, _), _)| t == tenant).map(|(_, b)| b.clone()).collect();
        out.sort_by(|a, b| a.provider.cmp(&b.provider));
        Ok(out)
    }

    async fn put_binding(&self, tenant: &TenantId, binding: &ProviderBinding) -> Result<(), StoreError> {
        check_binding_text(binding)?;
        lock(&self.bindings).insert((tenant.clone(), binding.provider.clone()), binding.clone());
        Ok(())
    }

    async fn delete_binding(&self, tenant: &TenantId, provider: &str) -> Result<bool, StoreError> {
        Ok(lock(&self.bindings).remove(&(tenant.clone(), provider.to_owned())).is_some())
    }

    async fn egress(&self, tenant: &TenantId) -> Result<Option<ProviderEgress>, StoreError> {
        Ok(lock(&self.egress).get(tenant).cloned())
    }

    async fn put_egress(&self, tenant: &TenantId, policy: &ProviderEgress) -> Result<(), StoreError> {
        for p in &policy.allowed_providers {
            crate::error::check_text("allowedProviders", p)?;
        }
        lock(&self.egress).insert(tenant.clone(), policy.clone());
        Ok(())
    }

    async fn delete_egress(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        Ok(lock(&self.egress).remove(tenant).is_some())
    }
}

/// [`crate::error::check_text`] over a binding's text.
pub fn check_binding_text(binding: &ProviderBinding) -> Result<(), StoreError> {
    crate::error::check_text("provider", &binding.provider)?;
    crate::error::check_text("apiKeyConfigurationName", &binding.api_key_configuration_name)?;
    crate::error::check_text_opt("endpoint", binding.endpoint.as_deref())
}

/// A tenant's credential, as a provider is handed it.
pub struct TenantCredential<'a> {
    pub api_key: &'a str,
    /// The tenant's own endpoint, and the guarded client that reaches it.
    pub endpoint: Option<(&'a str, &'a reqwest::Client)>,
}

/// Why a tenant's call cannot go out.
#[derive(Debug, Clone)]
pub enum CredentialError {
    /// The tenant bound a credential to a provider that takes none.
    Unsupported(String),
    /// The binding's configuration key holds no value (or is not the tenant's to read).
    Missing(String),
    /// The tenant's endpoint is one the egress guard refuses.
    EndpointRefused(String),
    /// The tenant's bindings could not be read: the call does not go out on a guess.
    Store(StoreError),
}

/// `Tracon:ProviderKeys:*`: where a tenant's key names go, where their values are read, how
/// long an instance trusts what it read, and the guard a tenant's endpoint goes through.
#[derive(Clone)]
pub struct ProviderKeySettings {
    pub names: SecretNamespace,
    secrets: Config,
    pub cache_for: Duration,
    pub egress: crate::egress::EgressPolicy,
    /// The client a tenant's endpoint is called with (natively: addresses checked at connect).
    client: reqwest::Client,
}

impl std::fmt::Debug for ProviderKeySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The configuration holds secrets: never printed.
        f.debug_struct("ProviderKeySettings").field("names", &self.names).field("cache_for", &self.cache_for).finish()
    }
}

impl Default for ProviderKeySettings {
    fn default() -> Self {
        Self {
            names: SecretNamespace::new(DEFAULT_KEY_PREFIX),
            secrets: Config::default(),
            cache_for: Duration::from_secs(5),
            egress: crate::egress::EgressPolicy::default(),
            client: reqwest::Client::new(),
        }
    }
}

impl ProviderKeySettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let egress = crate::egress::EgressPolicy::from_config(config)?;
        Ok(Self {
            names: SecretNamespace::from_config(config, "Tracon:ProviderKeys", DEFAULT_KEY_PREFIX)?,
            secrets: config.clone(),
            cache_for: config.seconds("Tracon:ProviderKeys:CacheSeconds")?.unwrap_or(Duration::from_secs(5)),
            client: endpoint_client(&egress)?,
            egress,
        })
    }

    /// Replaces the configuration key values are read from.
    pub fn with_secrets(mut self, secrets: Config) -> Self {
        self.secrets = secrets;
        self
    }

    /// Replaces the egress guard of tenants' endpoints (and its client).
    pub fn with_egress(mut self, egress: crate::egress::EgressPolicy) -> Result<Self, ConfigError> {
        self.client = endpoint_client(&egress)?;
        self.egress = egress;
        Ok(self)
    }

    /// The value of `tenant`'s key name, when it may read it and it holds one.
    fn secret(&self, tenant: &TenantId, name: &str) -> Option<String> {
        if !self.names.may_resolve(tenant, name) {
            return None;
        }
        self.secrets.get(name).map(str::to_owned).filter(|v| !v.trim().is_empty())
    }

    /// Whether `tenant`'s binding's key name holds a value now.
    pub fn resolves(&self, tenant: &TenantId, name: &str) -> bool {
        self.secret(tenant, name).is_some()
    }

    /// Checks a tenant's endpoint against the egress guard.
    pub fn check_endpoint(&self, endpoint: &str) -> Result<(), String> {
        let url = reqwest::Url::parse(endpoint).map_err(|_| "is not an absolute URL".to_owned())?;
        self.egress.check_url(&url).map_err(|e| e.to_string())
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn endpoint_client(egress: &crate::egress::EgressPolicy) -> Result<reqwest::Client, ConfigError> {
    crate::egress::guarded_client(Arc::new(egress.clone()))
        .map_err(|e| ConfigError::Message(format!("could not build the client of tenants' provider endpoints: {e}")))
}

/// On Workers the platform's `fetch` connects (and cannot reach private networks): the URL
/// check is the guard.
#[cfg(target_arch = "wasm32")]
fn endpoint_client(_: &crate::egress::EgressPolicy) -> Result<reqwest::Client, ConfigError> {
    Ok(reqwest::Client::new())
}

/// What an instance knows of one tenant.
#[derive(Debug, Default)]
pub struct TenantProviderState {
    pub bindings: Vec<ProviderBinding>,
    pub egress: Option<ProviderEgress>,
}

impl TenantProviderState {
    pub fn binding(&self, provider: &str) -> Option<&ProviderBinding> {
        self.bindings.iter().find(|b| b.provider.eq_ignore_ascii_case(provider))
    }

    /// Whether the tenant may call `provider`.
    pub fn allows(&self, provider: &str) -> bool {
        self.egress.as_ref().is_none_or(|e| e.allows(provider))
    }

    /// The problems of a binding chain (the model, then each fallback link) the egress policy
    /// refuses, each under its field.
    pub fn egress_problems(&self, binding: &ModelBinding) -> Vec<Problem> {
        binding
            .chain()
            .into_iter()
            .filter(|(_, b)| !b.provider.trim().is_empty() && !self.allows(&b.provider))
            .map(|(path, b)| {
                Problem::new(
                    ProblemCode::ProviderNotAllowed,
                    format!("{path}.provider"),
                    format!("This tenant's egress policy does not allow the provider '{}'.", b.provider),
                )
            })
            .collect()
    }
}

/// What an instance read of a tenant, and when.
type Read = (Arc<TenantProviderState>, DateTime<Utc>);

/// The per-instance view of tenants' bindings and policies.
pub struct TenantProviders {
    store: Arc<dyn TenantProviderStore>,
    settings: ProviderKeySettings,
    clock: Arc<dyn Clock>,
    seen: Mutex<HashMap<TenantId, Read>>,
}

impl TenantProviders {
    pub fn new(store: Arc<dyn TenantProviderStore>, settings: ProviderKeySettings, clock: Arc<dyn Clock>) -> Self {
        Self { store, settings, clock, seen: Mutex::new(HashMap::new()) }
    }

    pub fn settings(&self) -> &ProviderKeySettings {
        &self.settings
    }

    pub fn store(&self) -> &Arc<dyn TenantProviderStore> {
        &self.store
    }

    /// What `tenant` has bound and allows, read at most every `cache_for`.
    pub async fn state(&self, tenant: &TenantId) -> Result<Arc<TenantProviderState>, StoreError> {
        let now = self.clock.now();
        if let Some((state, read_at)) = lock(&self.seen).get(tenant).cloned()
            && (now - read_at).to_std().is_ok_and(|age| age < self.settings.cache_for)
        {
            return Ok(state);
        }
        let state = Arc::new(TenantProviderState {
            bindings: self.store.bindings(tenant).await?,
            egress: self.store.egress(tenant).await?,
        });
        lock(&self.seen).insert(tenant.clone(), (state.clone(), now));
        Ok(state)
    }

    /// Forgets what this instance read of `tenant` (after a write through it).
    pub fn forget(&self, tenant: &TenantId) {
        lock(&self.seen).remove(tenant);
    }

    /// The provider a call of `tenant` goes out through: `provider` itself without a binding,
    /// with the tenant's credential with one.
    pub fn resolve(
        &self,
        tenant: &TenantId,
        state: &TenantProviderState,
        provider: &Arc<dyn ModelProvider>,
    ) -> Result<Arc<dyn ModelProvider>, CredentialError> {
        let Some(binding) = state.binding(provider.name()) else { return Ok(provider.clone()) };
        let key = self
            .settings
            .secret(tenant, &binding.api_key_configuration_name)
            .ok_or_else(|| CredentialError::Missing(provider.name().to_owned()))?;
        let endpoint = match &binding.endpoint {
            Some(url) => {
                self.settings.check_endpoint(url).map_err(CredentialError::EndpointRefused)?;
                Some((url.as_str(), &self.settings.client))
            }
            None => None,
        };
        let credential = TenantCredential { api_key: &key, endpoint };
        let own = provider
            .with_credential(&credential)
            .ok_or_else(|| CredentialError::Unsupported(provider.name().to_owned()))?;
        Ok(match &binding.endpoint {
            // A tenant's endpoint has a breaker of its own.
            Some(_) => Arc::new(TenantEndpoint { inner: own, breaker_key: format!("{}@{}", provider.name(), tenant) }),
            None => own,
        })
    }
}

/// A provider reached at a tenant's own endpoint: everything as the provider, but its
/// circuit breaker.
struct TenantEndpoint {
    inner: Arc<dyn ModelProvider>,
    breaker_key: String,
}

#[async_trait::async_trait]
impl ModelProvider for TenantEndpoint {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn breaker_key(&self) -> &str {
        &self.breaker_key
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        self.inner.stream(request).await
    }
}
