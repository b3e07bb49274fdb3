//! At-rest content protection: AES-256-GCM over conversation items, run input and events,
//! and tool arguments and results.
//!
//! Every protected column holds a value behind a one-byte header, so turning protection on
//! never strands old rows — each value's own header decides how to read it:
//!
//! | header | layout |
//! |---|---|
//! | `0x00` | plain UTF-8 text |
//! | `0x01` | key id (1 byte) · nonce (12 bytes) · ciphertext with the GCM tag |
//!
//! The associated data binds a ciphertext to its tenant, table, column and row, so a value
//! copied onto another row (or another tenant's row) fails to open. Any failure to open —
//! a tampered byte, an unknown key, a moved value — is an error: reads fail closed.
//!
//! Configuration: `Tracon:ContentProtection:Key` (base64 of 32 bytes) turns it on;
//! `Tracon:ContentProtection:KeyId` (1–255, default 1) names it; older keys stay readable as
//! `Tracon:ContentProtection:PreviousKeys:<id>`.

use std::collections::BTreeMap;
use std::fmt;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine;
use tracon_core::config::{Config, ConfigError};

const PLAIN: u8 = 0x00;
const SEALED: u8 = 0x01;
const NONCE_LEN: usize = 12;

/// Where a value lives; bound into the ciphertext.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub tenant: &'a str,
    pub table: &'static str,
    pub column: &'static str,
    pub row: &'a str,
}

impl Place<'_> {
    fn aad(&self) -> Vec<u8> {
        format!("tracon.v1|{}|{}|{}|{}", self.table, self.column, self.tenant, self.row).into_bytes()
    }
}

/// A value that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtectionError {
    #[error("the stored value is empty")]
    Empty,
    #[error("the stored value has an unknown header {0:#04x}")]
    UnknownHeader(u8),
    #[error("the stored value was sealed with key {0}, which is not configured")]
    UnknownKey(u8),
    #[error("the stored value failed authentication (tampered, moved, or the wrong key)")]
    Authentication,
    #[error("the stored value is not UTF-8")]
    NotText,
}

/// Seals and opens protected values. Without a key it writes plain values and still reads
/// sealed ones only if their key is configured.
#[derive(Clone, Default)]
pub struct Protection {
    current: Option<u8>,
    keys: BTreeMap<u8, Aes256Gcm>,
}

impl fmt::Debug for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Protection").field("current_key_id", &self.current).field("keys", &self.keys.len()).finish()
    }
}

fn decode_key(key: &str, name: &str) -> Result<Aes256Gcm, ConfigError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .map_err(|_| ConfigError::Message(format!("{name} is not base64.")))?;
    if bytes.len() != 32 {
        return Err(ConfigError::Message(format!("{name} must be 32 bytes (base64 of `openssl rand 32`).")));
    }
    Ok(Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&bytes)))
}

impl Protection {
    /// Protection off: values are written in plain text.
    pub fn off() -> Self {
        Self::default()
    }

    /// Seals new values with `key` (32 bytes) under `key_id`.
    pub fn with_key(key_id: u8, key: &[u8; 32]) -> Self {
        let mut keys = BTreeMap::new();
        keys.insert(key_id, Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(key)));
        Self { current: Some(key_id), keys }
    }

    /// Also opens values sealed with an older key.
    pub fn with_previous_key(mut self, key_id: u8, key: &[u8; 32]) -> Self {
        self.keys.entry(key_id).or_insert_with(|| Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(key)));
        self
    }

    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let mut p = Self::default();
        for id in config.child_sections("Tracon:ContentProtection:PreviousKeys") {
            let key_id: u8 = id.parse().map_err(|_| {
                ConfigError::Message(format!("Tracon:ContentProtection:PreviousKeys:{id}: a key id is 1 to 255."))
            })?;
            let name = format!("Tracon:ContentProtection:PreviousKeys:{id}");
            if let Some(k) = config.get(&name) {
                p.keys.insert(key_id, decode_key(k, &name)?);
            }
        }
        if let Some(k) = config.get("Tracon:ContentProtection:Key") {
            let key_id = config.parse::<u8>("Tracon:ContentProtection:KeyId")?.unwrap_or(1);
            if key_id == 0 {
                return Err(ConfigError::Message("Tracon:ContentProtection:KeyId is 1 to 255.".into()));
            }
            p.keys.insert(key_id, decode_key(k, "Tracon:ContentProtection:Key")?);
            p.current = Some(key_id);
        }
        Ok(p)
    }

    pub fn enabled(&self) -> bool {
        self.current.is_some()
    }

    /// The stored form of `text` at `place`.
    pub fn seal(&self, place: &Place<'_>, text: &str) -> Vec<u8> {
        let Some((id, cipher)) = self.current.and_then(|id| self.keys.get(&id).map(|c| (id, c))) else {
            let mut out = Vec::with_capacity(text.len() + 1);
            out.push(PLAIN);
            out.extend_from_slice(text.as_bytes());
            return out;
        };
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let aad = place.aad();
        match cipher.encrypt(&nonce, Payload { msg: text.as_bytes(), aad: &aad }) {
            Ok(ct) => {
                let mut out = Vec::with_capacity(2 + NONCE_LEN + ct.len());
                out.push(SEALED);
                out.push(id);
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&ct);
                out
            }
            // AES-GCM encryption only fails for inputs beyond 64 GiB.
            Err(_) => Vec::new(),
        }
    }

    /// The text of a stored value at `place`.
    pub fn open(&self, place: &Place<'_>, stored: &[u8]) -> Result<String, ProtectionError> {
        let (&header, rest) = stored.split_first().ok_or(ProtectionError::Empty)?;
        match header {
            PLAIN => String::from_utf8(rest.to_vec()).map_err(|_| ProtectionError::NotText),
            SEALED => {
                let (&id, rest) = rest.split_first().ok_or(ProtectionError::Authentication)?;
                let cipher = self.keys.get(&id).ok_or(ProtectionError::UnknownKey(id))?;
                if rest.len() < NONCE_LEN {
                    return Err(ProtectionError::Authentication);
                }
                let (nonce, ct) = rest.split_at(NONCE_LEN);
                let aad = place.aad();
                let plain = cipher
                    .decrypt(Nonce::from_slice(nonce), Payload { msg: ct, aad: &aad })
                    .map_err(|_| ProtectionError::Authentication)?;
                String::from_utf8(plain).map_err(|_| ProtectionError::NotText)
            }
            other => Err(ProtectionError::UnknownHeader(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(row: &str) -> Place<'_> {
        Place { tenant: "t1", table: "session_items", column: "content", row }
    }

    #[test]
    fn round_trip_with_a_fresh_nonce_per_write() {
        let p = Protection::with_key(1, &[7; 32]);
        let a = p.seal(&place("s/0"), "hello secret");
        let b = p.seal(&place("s/0"), "hello secret");
        assert_ne!(a, b, "a fresh nonce per write");
        assert!(!a.windows(6).any(|w| w == b"secret"));
        assert_eq!(p.open(&place("s/0"), &a).unwrap(), "hello secret");
    }

    #[test]
    fn tampering_moving_or_the_wrong_key_fail_closed() {
        let p = Protection::with_key(1, &[7; 32]);
        let mut sealed = p.seal(&place("s/0"), "hello");
        assert_eq!(p.open(&place("s/1"), &sealed), Err(ProtectionError::Authentication), "moved to another row");
        let other = Place { tenant: "t2", ..place("s/0") };
        assert_eq!(p.open(&other, &sealed), Err(ProtectionError::Authentication), "moved to another tenant");
        let wrong = Protection::with_key(1, &[8; 32]);
        assert_eq!(wrong.open(&place("s/0"), &sealed), Err(ProtectionError::Authentication));
        let last = sealed.len() - 1;
        sealed[last] ^= 1;
        assert_eq!(p.open(&place("s/0"), &sealed), Err(ProtectionError::Authentication));
        assert_eq!(p.open(&place("s/0"), &sealed[..5]), Err(ProtectionError::Authentication), "truncated");
        assert_eq!(
            Protection::off().open(&place("s/0"), &p.seal(&place("s/0"), "x")),
            Err(ProtectionError::UnknownKey(1))
        );
    }

    #[test]
    fn plain_rows_stay_readable_and_old_keys_keep_working() {
        let off = Protection::off();
        let plain = off.seal(&place("s/0"), "before");
        assert_eq!(plain[0], PLAIN);
        let old = Protection::with_key(1, &[1; 32]);
        let sealed_old = old.seal(&place("s/1"), "old key");
        let rotated = Protection::with_key(2, &[2; 32]).with_previous_key(1, &[1; 32]);
        assert_eq!(rotated.open(&place("s/0"), &plain).unwrap(), "before");
        assert_eq!(rotated.open(&place("s/1"), &sealed_old).unwrap(), "old key");
        let new = rotated.seal(&place("s/2"), "new key");
        assert_eq!(new[1], 2);
        assert_eq!(rotated.open(&place("s/2"), &new).unwrap(), "new key");
    }

    #[test]
    fn configuration_checks_the_key() {
        let key = base64::engine::general_purpose::STANDARD.encode([9u8; 32]);
        let c = Config::from_pairs([
            ("Tracon__ContentProtection__Key", key.as_str()),
            ("Tracon__ContentProtection__KeyId", "3"),
        ]);
        let p = Protection::from_config(&c).unwrap();
        assert!(p.enabled());
        assert_eq!(p.seal(&place("r"), "x")[1], 3);
        let short = Config::from_pairs([("Tracon__ContentProtection__Key", "c2hvcnQ=")]);
        assert!(Protection::from_config(&short).is_err());
        assert!(!Protection::from_config(&Config::default()).unwrap().enabled());
    }
}
