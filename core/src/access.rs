//! Run and session authorization: the host's own policy, asked at every endpoint that starts
//! a run or reaches a run's or a session's resources.
//!
//! The default allows everything. A policy that fails — an `Err`, or a panic — denies: the
//! decision fails closed. What a denial looks like is the handlers' business: a denied
//! single resource answers exactly what a missing one answers (its existence is not
//! revealed), a denied list or start answers `403`.

use futures::FutureExt;

use crate::identity::Caller;
use crate::names::TenantId;
use crate::runs::store::RunRecord;

/// What the caller asks to do.
#[derive(Debug, Clone, Copy)]
pub enum RunAction<'a> {
    /// Start a run of `agent`, in `session` when it continues one.
    StartRun {
        agent: &'a str,
        session: Option<&'a str>,
    },
    /// Read a run: its summary, events, tool calls, input, or a comparison with it.
    ReadRun {
        run: &'a RunRecord,
    },
    CancelRun {
        run: &'a RunRecord,
    },
    /// List runs or their statistics.
    ListRuns,
    ReadSession {
        session: &'a str,
    },
    ListSessions,
    DeleteSession {
        session: &'a str,
    },
    BranchSession {
        session: &'a str,
    },
}

/// The host's policy for runs and sessions.
#[async_trait::async_trait]
pub trait RunAuthorizer: Send + Sync {
    /// `Ok(true)` allows; `Ok(false)` and any `Err` deny.
    async fn authorize(&self, caller: &Caller, tenant: &TenantId, action: RunAction<'_>) -> Result<bool, String>;
}

/// The default: everything is allowed.
pub struct AllowAllRuns;

#[async_trait::async_trait]
impl RunAuthorizer for AllowAllRuns {
    async fn authorize(&self, _: &Caller, _: &TenantId, _: RunAction<'_>) -> Result<bool, String> {
        Ok(true)
    }
}

/// Asks `authorizer`; an error or a panic denies (and is logged, never shown).
pub async fn is_allowed(
    authorizer: &dyn RunAuthorizer,
    caller: &Caller,
    tenant: &TenantId,
    action: RunAction<'_>,
) -> bool {
    let decision = std::panic::AssertUnwindSafe(authorizer.authorize(caller, tenant, action)).catch_unwind().await;
    match decision {
        Ok(Ok(allowed)) => allowed,
        Ok(Err(e)) => {
            tracing::warn!(action = ?action_name(&action), error = %e, "the run authorization policy failed; denied");
            false
        }
        Err(_) => {
            tracing::error!(action = ?action_name(&action), "the run authorization policy panicked; denied");
            false
        }
    }
}

fn action_name(action: &RunAction<'_>) -> &'static str {
    match action {
        RunAction::StartRun { .. } => "StartRun",
        RunAction::ReadRun { .. } => "ReadRun",
        RunAction::CancelRun { .. } => "CancelRun",
        RunAction::ListRuns => "ListRuns",
        RunAction::ReadSession { .. } => "ReadSession",
        RunAction::ListSessions => "ListSessions",
        RunAction::DeleteSession { .. } => "DeleteSession",
        RunAction::BranchSession { .. } => "BranchSession",
    }
}
