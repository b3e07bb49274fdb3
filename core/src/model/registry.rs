//! The set of model providers, fixed at start-up.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::ModelProvider;

/// Providers by case-insensitive name. Built once; two providers under one name is a
/// start-up error, not last-one-wins.
#[derive(Clone, Default)]
pub struct ProviderRegistry {
    by_name: BTreeMap<String, Arc<dyn ModelProvider>>,
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
}
