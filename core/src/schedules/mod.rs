//! Schedules: runs of an agent or a workflow at a time (`runAt`) or on a cron pattern in an
//! explicit IANA time zone. The **tick** ([`crate::background::tick`]) enqueues what is due as queued runs.
//!
//! Each schedule stores its next occurrence. A tick takes the due ones and moves each one's
//! next occurrence forward with a compare-and-set on the value it read, so two ticks racing
//! (two processes, a retried cron event) start an occurrence once: the loser's update
//! matches nothing and it moves on. Occurrences missed while nothing ticked are not caught
//! up one by one: the next tick runs the schedule once and moves on to the next occurrence
//! after *now*. A one-time schedule runs once; its next occurrence is then empty.

pub mod due;

use std::collections::BTreeMap;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::StoreError;
use crate::names::{AgentName, RunId, TenantId, WorkflowName};

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Timing {
    /// Once, at this instant.
    Once(DateTime<Utc>),
    /// On a five-field cron pattern (minute hour day-of-month month day-of-week), read in
    /// `time_zone` — daylight-saving changes follow the zone's rules.
    Cron { expression: String, time_zone: String },
}

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRecord {
    pub id: Uuid,
    pub tenant: TenantId,
    /// Unique per tenant.
    pub name: String,
    /// What each occurrence runs.
    pub target: ScheduleTarget,
    pub message: String,
    pub parameters: BTreeMap<String, String>,
    pub timing: Timing,
    pub enabled: bool,
    /// The next occurrence; `None` once a one-time schedule ran.
    pub next_run_at: Option<DateTime<Utc>>,
    pub last_run_at: Option<DateTime<Utc>>,
    /// The run the last occurrence queued.
    pub last_run_id: Option<RunId>,
    /// Why the last occurrence queued nothing (a stable, display-safe sentence).
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What a schedule's occurrences run: a queued agent run, or a queued workflow run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleTarget {
    Agent(AgentName),
    Workflow(WorkflowName),
}

impl ScheduleTarget {
    /// `agent` or `workflow` (the stored kind).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Agent(_) => "agent",
            Self::Workflow(_) => "workflow",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Self::Agent(a) => a.as_str(),
            Self::Workflow(w) => w.as_str(),
        }
    }

    /// Reads a stored kind and name back; `None` for a kind this build does not know or a
    /// name that does not parse.
    pub fn parse(kind: &str, name: &str) -> Option<Self> {
        match kind {
            "agent" => AgentName::parse(name).ok().map(Self::Agent),
            "workflow" => WorkflowName::parse(name).ok().map(Self::Workflow),
            _ => None,
        }
    }
}

/// Why a timing is refused (the text is safe to show).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TimingError(pub String);

impl Timing {
    /// Checks a cron pattern and zone: five fields, a known IANA zone name.
    pub fn cron(expression: &str, time_zone: &str) -> Result<Self, TimingError> {
        parse_cron(expression)?;
        parse_zone(time_zone)?;
        Ok(Self::Cron { expression: expression.trim().to_owned(), time_zone: time_zone.to_owned() })
    }

    /// The first occurrence strictly after `after`; `None` when there is none (a one-time
    /// schedule whose instant passed, a pattern that never matches again).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Self::Once(at) => (*at > after).then_some(*at),
            Self::Cron { expression, time_zone } => {
                let cron = parse_cron(expression).ok()?;
                let zone = parse_zone(time_zone).ok()?;
                cron.find_next_occurrence(&after.with_timezone(&zone), false).ok().map(|t| t.with_timezone(&Utc))
            }
        }
    }
}

fn parse_cron(expression: &str) -> Result<Cron, TimingError> {
    let parser = CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).build();
    let cron = parser.parse(expression.trim()).map_err(|e| {
        TimingError(format!(
            "'{expression}' is not a cron pattern of five fields (minute hour day-of-month month day-of-week): {e}."
        ))
    })?;
    // A pattern that parses but never matches (`0 0 31 2 *`) would never run.
    cron.find_next_occurrence(&Utc::now(), false)
        .map_err(|_| TimingError(format!("The cron pattern '{expression}' never matches.")))?;
    Ok(cron)
}

fn parse_zone(name: &str) -> Result<chrono_tz::Tz, TimingError> {
    chrono_tz::Tz::from_str(name)
        .map_err(|_| TimingError(format!("'{name}' is not an IANA time zone name (such as UTC or Europe/Berlin).")))
}

/// The schedule rows.
#[async_trait::async_trait]
pub trait ScheduleStore: Send + Sync {
    /// `Conflict` when the tenant has a schedule of this name.
    async fn create(&self, schedule: &ScheduleRecord) -> Result<(), StoreError>;
    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<ScheduleRecord>, StoreError>;
    /// By name.
    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<ScheduleRecord>, StoreError>;
    /// Replaces the definition fields and the next occurrence; `NotFound` when missing,
    /// `Conflict` when the new name is taken.
    async fn update(&self, schedule: &ScheduleRecord) -> Result<(), StoreError>;
    /// `false` when there was nothing to delete.
    async fn delete(&self, tenant: &TenantId, id: Uuid) -> Result<bool, StoreError>;
    /// Enabled schedules of any tenant whose next occurrence is at or before `now`, the
    /// earliest first, at most `limit`.
    async fn due(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<ScheduleRecord>, StoreError>;
    /// Moves the next occurrence from `expected` to `next` and records `now` as the last
    /// run — only while the stored next occurrence is still `expected`. `false` when another
    /// tick took this occurrence (or the schedule changed or went away).
    async fn advance(
        &self,
        tenant: &TenantId,
        id: Uuid,
        expected: DateTime<Utc>,
        next: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
    /// What the occurrence just taken queued: a run, or why nothing.
    async fn record_outcome(
        &self,
        tenant: &TenantId,
        id: Uuid,
        run: Option<RunId>,
        error: Option<&str>,
    ) -> Result<(), StoreError>;
}

/// How a schedule is shown and written over HTTP.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimingView {
    /// One-time: the instant, with an offset (`2026-12-24T18:00:00+01:00`).
    pub run_at: Option<DateTime<Utc>>,
    /// Recurring: five cron fields.
    pub cron: Option<String>,
    /// Recurring: the IANA zone the pattern is read in (required with `cron`).
    pub time_zone: Option<String>,
}

impl From<&Timing> for TimingView {
    fn from(t: &Timing) -> Self {
        match t {
            Timing::Once(at) => Self { run_at: Some(*at), cron: None, time_zone: None },
            Timing::Cron { expression, time_zone } => {
                Self { run_at: None, cron: Some(expression.clone()), time_zone: Some(time_zone.clone()) }
            }
        }
    }
}

impl TimingView {
    /// Exactly one of `runAt` and `cron` (with `timeZone`).
    pub fn timing(&self) -> Result<Timing, TimingError> {
        match (&self.run_at, &self.cron, &self.time_zone) {
            (Some(at), None, None) => Ok(Timing::Once(*at)),
            (None, Some(cron), Some(zone)) => Timing::cron(cron, zone),
            (None, Some(_), None) => Err(TimingError(
                "A cron schedule needs an explicit 'timeZone' (an IANA name such as UTC or Europe/Berlin).".into(),
            )),
            (Some(_), None, Some(_)) => Err(TimingError("'timeZone' goes with 'cron', not with 'runAt'.".into())),
            (Some(_), Some(_), _) => Err(TimingError("Give either 'runAt' or 'cron', not both.".into())),
            (None, None, _) => {
                Err(TimingError("Give 'runAt' (one-time) or 'cron' with 'timeZone' (recurring).".into()))
            }
        }
    }
}

/// The in-memory schedules (the local server's zero-setup default, and the contract
/// tests' reference).
#[derive(Default)]
pub struct MemoryScheduleStore {
    rows: std::sync::Mutex<Vec<ScheduleRecord>>,
}

impl MemoryScheduleStore {
    fn rows(&self) -> std::sync::MutexGuard<'_, Vec<ScheduleRecord>> {
        self.rows.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait::async_trait]
impl ScheduleStore for MemoryScheduleStore {
    async fn create(&self, schedule: &ScheduleRecord) -> Result<(), StoreError> {
        let mut rows = self.rows();
        if rows.iter().any(|s| s.tenant == schedule.tenant && (s.name == schedule.name || s.id == schedule.id)) {
            return Err(StoreError::Conflict("A schedule with this name exists.".into()));
        }
        rows.push(schedule.clone());
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<ScheduleRecord>, StoreError> {
        Ok(self.rows().iter().find(|s| s.tenant == *tenant && s.id == id).cloned())
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<ScheduleRecord>, StoreError> {
        let mut mine: Vec<ScheduleRecord> = self.rows().iter().filter(|s| s.tenant == *tenant).cloned().collect();
        mine.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(mine.into_iter().skip(skip).take(take).collect())
    }

    async fn update(&self, schedule: &ScheduleRecord) -> Result<(), StoreError> {
        let mut rows = self.rows();
        if rows.iter().any(|s| s.tenant == schedule.tenant && s.name == schedule.name && s.id != schedule.id) {
            return Err(StoreError::Conflict("A schedule with this name exists.".into()));
        }
        let row =
            rows.iter_mut().find(|s| s.tenant == schedule.tenant && s.id == schedule.id).ok_or(StoreError::NotFound)?;
        let (last_run_at, last_run_id, last_error, created_at) =
            (row.last_run_at, row.last_run_id, row.last_error.take(), row.created_at);
        *row = ScheduleRecord { last_run_at, last_run_id, last_error, created_at, ..schedule.clone() };
        Ok(())
    }

    async fn delete(&self, tenant: &TenantId, id: Uuid) -> Result<bool, StoreError> {
        let mut rows = self.rows();
        let before = rows.len();
        rows.retain(|s| !(s.tenant == *tenant && s.id == id));
        Ok(rows.len() < before)
    }

    async fn due(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<ScheduleRecord>, StoreError> {
        let mut due: Vec<ScheduleRecord> =
            self.rows().iter().filter(|s| s.enabled && s.next_run_at.is_some_and(|at| at <= now)).cloned().collect();
        due.sort_by_key(|s| (s.next_run_at, s.id));
        due.truncate(limit);
        Ok(due)
    }

    async fn advance(
        &self,
        tenant: &TenantId,
        id: Uuid,
        expected: DateTime<Utc>,
        next: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut rows = self.rows();
        let Some(row) = rows.iter_mut().find(|s| s.tenant == *tenant && s.id == id && s.next_run_at == Some(expected))
        else {
            return Ok(false);
        };
        row.next_run_at = next;
        row.last_run_at = Some(now);
        row.last_run_id = None;
        row.last_error = None;
        Ok(true)
    }

    async fn record_outcome(
        &self,
        tenant: &TenantId,
        id: Uuid,
        run: Option<RunId>,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        if let Some(row) = self.rows().iter_mut().find(|s| s.tenant == *tenant && s.id == id) {
            row.last_run_id = run;
            row.last_error = error.map(str::to_owned);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn cron_occurrences_follow_the_zone_across_daylight_saving() {
        let t = Timing::cron("30 9 * * *", "Europe/Berlin").unwrap();
        // Before the spring change Berlin is UTC+1, after it UTC+2.
        let before = Utc.with_ymd_and_hms(2026, 3, 27, 12, 0, 0).unwrap();
        assert_eq!(t.next_after(before), Some(Utc.with_ymd_and_hms(2026, 3, 28, 8, 30, 0).unwrap()));
        let after = Utc.with_ymd_and_hms(2026, 3, 29, 12, 0, 0).unwrap();
        assert_eq!(t.next_after(after), Some(Utc.with_ymd_and_hms(2026, 3, 30, 7, 30, 0).unwrap()));
    }

    #[test]
    fn next_is_strictly_after() {
        let t = Timing::cron("0 * * * *", "UTC").unwrap();
        let on = Utc.with_ymd_and_hms(2026, 1, 1, 10, 0, 0).unwrap();
        assert_eq!(t.next_after(on), Some(Utc.with_ymd_and_hms(2026, 1, 1, 11, 0, 0).unwrap()));
        let once = Timing::Once(on);
        assert_eq!(once.next_after(on - chrono::Duration::seconds(1)), Some(on));
        assert_eq!(once.next_after(on), None);
    }

    #[test]
    fn bad_timings_are_refused_with_a_reason() {
        for (cron, zone) in [
            ("* * * *", "UTC"),
            ("0 0 * * * *", "UTC"),
            ("61 * * * *", "UTC"),
            ("0 0 31 2 *", "UTC"),
            ("0 9 * * *", "Mars/Olympus"),
            ("0 9 * * *", "+02:00"),
        ] {
            assert!(Timing::cron(cron, zone).is_err(), "{cron} {zone}");
        }
        let view = |run_at: Option<&str>, cron: Option<&str>, zone: Option<&str>| TimingView {
            run_at: run_at.map(|s| s.parse().unwrap()),
            cron: cron.map(str::to_owned),
            time_zone: zone.map(str::to_owned),
        };
        assert!(view(None, Some("0 9 * * *"), None).timing().unwrap_err().0.contains("timeZone"));
        assert!(view(Some("2026-01-01T00:00:00Z"), Some("0 9 * * *"), Some("UTC")).timing().is_err());
        assert!(view(None, None, None).timing().is_err());
        assert!(view(Some("2026-01-01T00:00:00Z"), None, None).timing().is_ok());
    }
}
