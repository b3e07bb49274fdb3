//! Configuration values and secrets, read the way .NET hosts read them.
//!
//! A setting has a colon-separated key (`Tracon:Providers:OpenAI:ApiKey`); in the
//! environment each `:` becomes `__` (`Tracon__Providers__OpenAI__ApiKey`). Keys compare
//! case-insensitively. [`Config`] is an immutable snapshot the adapter builds once at start-up
//! (from `std::env` natively, from Worker vars and secrets on Cloudflare); core code only
//! reads it. Records never hold a secret value: they hold a key *name* and resolve it here.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

/// An immutable set of configuration values.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Normalised key (lowercase, `:`-separated) → value.
    values: BTreeMap<String, String>,
}

impl Config {
    /// Builds a snapshot from `(name, value)` pairs such as `std::env::vars()`. Both
    /// `Tracon__A__B` and `Tracon:A:B` spellings are accepted; empty values are ignored.
    pub fn from_pairs<I, K, V>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: Into<String>,
    {
        let mut values = BTreeMap::new();
        for (k, v) in pairs {
            let v = v.into();
            if v.is_empty() {
                continue;
            }
            values.insert(normalise(k.as_ref()), v);
        }
        Self { values }
    }

    /// Returns a copy with one more value (tests and builders).
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.values.insert(normalise(key), value.into());
        self
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(&normalise(key)).map(String::as_str)
    }

    /// The first key of `keys` that has a value.
    pub fn first(&self, keys: &[&str]) -> Option<&str> {
        keys.iter().find_map(|k| self.get(k))
    }

    /// Parses a typed value; a value that does not parse is a configuration error that
    /// names the key (never the value, which may be a secret).
    pub fn parse<T: FromStr>(&self, key: &str) -> Result<Option<T>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(raw) => raw
                .trim()
                .parse::<T>()
                .map(Some)
                .map_err(|_| ConfigError::Invalid { key: display_key(key), expected: std::any::type_name::<T>() }),
        }
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(raw) => match raw.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(Some(true)),
                "false" | "0" | "no" | "off" => Ok(Some(false)),
                _ => Err(ConfigError::Invalid { key: display_key(key), expected: "a boolean (true/false)" }),
            },
        }
    }

    pub fn seconds(&self, key: &str) -> Result<Option<Duration>, ConfigError> {
        match self.parse::<f64>(key)? {
            None => Ok(None),
            Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
            Some(_) => Err(ConfigError::Invalid { key: display_key(key), expected: "a positive number of seconds" }),
        }
    }

    /// Every distinct child section name directly under `prefix`
    /// (`Tracon:Providers:Compatible` → `["ollama", "vllm"]`), lowercase.
    pub fn child_sections(&self, prefix: &str) -> Vec<String> {
        let p = format!("{}:", normalise(prefix));
        let mut out: Vec<String> = self
            .values
            .keys()
            .filter_map(|k| k.strip_prefix(&p))
            .filter_map(|rest| rest.split(':').next())
            .map(str::to_owned)
            .collect();
        out.dedup();
        out
    }
}

/// A configuration value that could not be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration value {key} is not {expected}")]
    Invalid { key: String, expected: &'static str },
    #[error("{0}")]
    Message(String),
}

fn normalise(key: &str) -> String {
    key.replace("__", ":").to_ascii_lowercase()
}

/// How a key is spelled in the environment, for error messages.
pub fn env_name(key: &str) -> String {
    key.replace(':', "__")
}

fn display_key(key: &str) -> String {
    format!("{key} ({})", env_name(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_underscore_and_colon_are_the_same_key() {
        let c = Config::from_pairs([("Tracon__Providers__OpenAI__ApiKey", "k")]);
        assert_eq!(c.get("Tracon:Providers:OpenAI:ApiKey"), Some("k"));
        assert_eq!(c.get("tracon:providers:openai:apikey"), Some("k"));
    }

    #[test]
    fn typed_values_name_the_key_not_the_value() {
        let c = Config::from_pairs([("Tracon__X", "secret-ish")]);
        let err = c.parse::<u32>("Tracon:X").unwrap_err().to_string();
        assert!(err.contains("Tracon__X"));
        assert!(!err.contains("secret-ish"));
    }

    #[test]
    fn child_sections_are_listed_once() {
        let c = Config::from_pairs([
            ("Tracon__Providers__Compatible__ollama__Endpoint", "http://x"),
            ("Tracon__Providers__Compatible__ollama__ApiKey", "k"),
            ("Tracon__Providers__Compatible__vllm__Endpoint", "http://y"),
        ]);
        assert_eq!(c.child_sections("Tracon:Providers:Compatible"), vec!["ollama".to_owned(), "vllm".to_owned()]);
    }
}
