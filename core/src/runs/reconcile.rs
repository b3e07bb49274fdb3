//! Reconciliation: running runs whose executor stopped heartbeating are closed `Orphaned`.

use crate::error::StoreError;
use crate::events::RunEvent;
use crate::failure::{ErrorClass, RunFailure};
use crate::runs::store::RunEnd;
use crate::runtime::Runtime;

/// Closes running runs whose executor stopped heartbeating: `Failed`, error class
/// `Orphaned`, with a closing `RunFailed` event after the last stored one. A run whose
/// executor came back in the meantime is left alone. Returns how many were closed.
pub async fn reconcile_orphans(runtime: &Runtime, limit: usize) -> Result<usize, StoreError> {
    let settings = &runtime.settings.reconciliation;
    if !settings.enabled {
        return Ok(0);
    }
    let now = runtime.platform.clock.now();
    let orphan_after = chrono::Duration::from_std(settings.orphan_after).unwrap_or(chrono::Duration::minutes(5));
    let stale_before = now - orphan_after;
    let store = &runtime.stores.runs;
    let mut closed = 0;
    for stale in store.stale_runs(stale_before, limit).await? {
        match close_orphan(runtime, &stale.tenant, stale.id, stale.started_at, stale.last_sequence, stale_before).await
        {
            Ok(true) => closed += 1,
            Ok(false) => {}
            // One run's failure (a racing writer took the sequence) does not stop the others.
            Err(e) => tracing::warn!(run_id = %stale.id, error = ?e, "could not close an orphaned run"),
        }
    }
    Ok(closed)
}

/// Closes one running run whose heartbeat is older than `stale_before`: `Failed`, error class
/// `Orphaned`, with a closing `RunFailed` event after `last_sequence`, and the run-failed
/// webhooks. `false` when the run moved on meanwhile (it finished, or its executor came back).
pub async fn close_orphan(
    runtime: &Runtime,
    tenant: &crate::names::TenantId,
    id: crate::names::RunId,
    started_at: chrono::DateTime<chrono::Utc>,
    last_sequence: u64,
    stale_before: chrono::DateTime<chrono::Utc>,
) -> Result<bool, StoreError> {
    let now = runtime.platform.clock.now();
    let failure = RunFailure::new(
        ErrorClass::Orphaned,
        "The process executing this run stopped before it finished; reconciliation closed it.",
    );
    let duration_ms = u64::try_from((now - started_at).num_milliseconds()).unwrap_or(0);
    let end = RunEnd::failed(now, duration_ms, failure.clone());
    let event = crate::events::RecordedEvent {
        sequence: last_sequence + 1,
        timestamp: now,
        event: RunEvent::RunFailed { error: failure.clone() },
    };
    let closed = runtime.stores.runs.close_stale(tenant, id, stale_before, &end, &[event]).await?;
    if closed {
        tracing::warn!(run_id = %id, tenant = %tenant, "closed an orphaned run");
        crate::webhooks::sources::publish_run_failed(runtime, tenant, id, None, &failure).await;
    }
    Ok(closed)
}
