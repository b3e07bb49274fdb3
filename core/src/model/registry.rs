//! The set of model providers, fixed at start-up, with their model catalog.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::ModelProvider;
use super::catalog::ModelCatalog;

/// Providers by case-insensitive name. Built once; two providers under one name is a
/// start-up error, not last-one-wins.
#[derive(Clone, Default)]
pub struct ProviderRegistry {
    by_name: BTreeMap<String, Arc<dyn ModelProvider>>,
    /// What the host says about the providers' models (metadata, not permission).
    catalog: Arc<ModelCatalog>,
}

impl ProviderRegistry {
    pub fn insert(&mut self, provider: Arc<dyn ModelProvider>) -> Result<(), String> {
        let key = provider.name().to_ascii_lowercase();
        if self.by_name.contains_key(&key) {
            return Err(format!("Two model providers are registered under the name '{key}'."));
        }
        self.by_name.insert(key, provider);
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn ModelProvider>> {
        self.by_name.get(&name.to_ascii_lowercase())
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// The model catalog ([`super::catalog`]).
    pub fn catalog(&self) -> &ModelCatalog {
        &self.catalog
    }

    pub fn set_catalog(&mut self, catalog: ModelCatalog) {
        self.catalog = Arc::new(catalog);
    }
}
