//! Trigger rows (`sql::TRIGGER_*`) ⇄ [`TriggerRecord`], for both drivers. Nothing in a
//! trigger row is a protected value: the signing secret is stored by key name only.

use chrono::{DateTime, Utc};
use tracon_core::error::StoreError;
use tracon_core::triggers::{PayloadMode, TargetKind, TriggerName, TriggerRecord};

use super::corrupt;

/// The columns `sql::TRIGGER_*` select, as either driver reads them.
pub struct TriggerColumns {
    pub name: String,
    pub target_kind: String,
    pub target_name: String,
    pub signing_secret_configuration_name: String,
    pub payload_mode: String,
    pub payload_path: Option<String>,
    pub enabled: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TriggerColumns {
    pub fn record(self) -> Result<TriggerRecord, StoreError> {
        Ok(TriggerRecord {
            name: TriggerName::parse(&self.name).map_err(|e| corrupt("trigger name", e))?,
            target_kind: TargetKind::parse(&self.target_kind)
                .ok_or_else(|| corrupt("trigger target kind", &self.target_kind))?,
            target_name: self.target_name,
            signing_secret_configuration_name: self.signing_secret_configuration_name,
            payload_mode: PayloadMode::parse(&self.payload_mode)
                .ok_or_else(|| corrupt("trigger payload mode", &self.payload_mode))?,
            payload_path: self.payload_path,
            enabled: self.enabled,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// The values `sql::TRIGGER_PUT` binds after the tenant: `$2` name … `$10` updated_at.
pub struct TriggerValues<'a> {
    pub name: &'a str,
    pub target_kind: &'static str,
    pub target_name: &'a str,
    pub signing_secret_configuration_name: &'a str,
    pub payload_mode: &'static str,
    pub payload_path: Option<&'a str>,
    pub enabled: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl<'a> TriggerValues<'a> {
    pub fn of(r: &'a TriggerRecord) -> Self {
        Self {
            name: r.name.as_str(),
            target_kind: r.target_kind.as_str(),
            target_name: &r.target_name,
            signing_secret_configuration_name: &r.signing_secret_configuration_name,
            payload_mode: r.payload_mode.as_str(),
            payload_path: r.payload_path.as_deref(),
            enabled: r.enabled,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}
