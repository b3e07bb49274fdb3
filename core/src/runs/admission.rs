//! Admission: the checks every run-starting surface makes before anything runs, in the
//! spec's order — the host is not draining, the run policy allows it, the caller's
//! attribution (labels within their limits), session ownership, the session's agent (a
//! session is one agent's conversation), the quotas. [`admit`] is the one place they are
//! made; each surface maps a [`Refusal`] to its own answer.

use crate::access::{RunAction, is_allowed};
use crate::attribution::{self, Attribution, AttributionRequest};
use crate::error::StoreError;
use crate::identity::Caller;
use crate::names::{AgentName, SessionId, TenantId};
use crate::quota::QuotaExceeded;
use crate::runtime::Runtime;
use crate::sessions::AgentMismatch;
use crate::sessions::ownership::SessionRefusal;

/// Who asks to run what, where.
pub struct Admission<'a> {
    pub tenant: &'a TenantId,
    pub caller: &'a Caller,
    pub agent: &'a AgentName,
    /// The session the run continues (or opens), if any.
    pub session: Option<&'a SessionId>,
    pub attribution: Attributed<'a>,
}

/// Where a run's attribution comes from.
pub enum Attributed<'a> {
    /// The host's attribution port, shown the request's headers (`(lowercase name, value)`).
    Port(&'a [(String, String)]),
    /// Given by the surface itself: an inbound trigger's run is labelled with its trigger.
    Given(Attribution),
}

/// Why a run was not admitted.
#[derive(Debug, Clone)]
pub enum Refusal {
    /// The host is shutting down (`503 shutting_down`).
    Draining,
    /// The run policy refuses it (`403 run_denied`).
    Denied,
    /// The attributed labels break a limit (`400 invalid_labels`; the message is ours).
    InvalidLabels(String),
    /// Session ownership refuses the session (`403`).
    Session(SessionRefusal),
    /// The session is another agent's conversation (`409 session_agent_mismatch`).
    SessionAgent(AgentMismatch),
    /// A quota is used up (`429 quota_exceeded`), as of `now`.
    Quota {
        over: QuotaExceeded,
        now: chrono::DateTime<chrono::Utc>,
    },
    Store(StoreError),
}

impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// Admits a run, or says why not. Returns the run's attribution — one for the whole run, so
/// the owner checked is the user recorded.
pub async fn admit(runtime: &Runtime, admission: Admission<'_>) -> Result<Attribution, Refusal> {
    if runtime.drain.is_draining() {
        return Err(Refusal::Draining);
    }
    let (tenant, agent) = (admission.tenant, admission.agent);
    let attribution = may_run(runtime, admission).await?;
    let now = runtime.platform.clock.now();
    if let Some(over) = runtime.quotas.check(runtime.stores.runs.as_ref(), tenant, agent.as_str(), now).await? {
        return Err(Refusal::Quota { over, now });
    }
    Ok(attribution)
}

/// The checks of [`admit`] about who may run what, where — the run policy, the attribution,
/// session ownership — without those about now (draining, the quotas): what a dry run
/// (`POST /api/agents/{name}/estimate`, which reads the session a run would) passes.
pub async fn may_run(runtime: &Runtime, admission: Admission<'_>) -> Result<Attribution, Refusal> {
    let Admission { tenant, caller, agent, session, attribution } = admission;
    let start = RunAction::StartRun { agent: agent.as_str(), session: session.map(SessionId::as_str) };
    if !is_allowed(runtime.run_authorizer.as_ref(), caller, tenant, start).await {
        return Err(Refusal::Denied);
    }
    let attribution = match attribution {
        Attributed::Port(headers) => attribute(runtime, tenant, caller, headers)?,
        Attributed::Given(given) => given,
    };
    if let Some(id) = session {
        let existing = runtime.stores.sessions.get(tenant, id.as_str()).await?;
        let ownership = runtime.settings.session_ownership;
        if ownership.enabled {
            ownership.may_run(attribution.user_id.as_deref(), existing.as_ref()).map_err(Refusal::Session)?;
        }
        // After ownership: another user's session says nothing of whose agent it is.
        if let Some(record) = &existing {
            record.check_agent(agent.as_str()).map_err(Refusal::SessionAgent)?;
        }
    }
    Ok(attribution)
}

/// The run's user and labels through the attribution port. A failing port leaves the run
/// unattributed; labels over their limits refuse it.
pub fn attribute(
    runtime: &Runtime,
    tenant: &TenantId,
    caller: &Caller,
    headers: &[(String, String)],
) -> Result<Attribution, Refusal> {
    let raw = match runtime.attribution.attribute(&AttributionRequest { tenant, caller, headers }) {
        Ok(a) => a,
        Err(detail) => {
            tracing::warn!(detail = %detail, "run attribution failed; the run is recorded without user and labels");
            Attribution::default()
        }
    };
    attribution::check(raw).map_err(|e| Refusal::InvalidLabels(e.0))
}

/// The caller's user id as the attribution port names it, for session ownership on reads
/// (labels are not checked: nothing is recorded). The same rule [`attribution::check`]
/// applies before a user id is recorded: an id a run would drop is no identity here either.
pub fn user_id(runtime: &Runtime, tenant: &TenantId, caller: &Caller, headers: &[(String, String)]) -> Option<String> {
    runtime
        .attribution
        .attribute(&AttributionRequest { tenant, caller, headers })
        .ok()
        .and_then(|a| a.user_id)
        .filter(|u| !u.is_empty() && u.chars().count() <= attribution::MAX_USER_ID)
}
