//! The API keys an instance read recently, so authentication does not read the store on
//! every request (`Tracon:ApiKeys:CacheSeconds`).

use std::collections::HashMap;
use std::sync::Mutex;

use chrono::{DateTime, Duration, Utc};
use tracon_core::error::StoreError;
use tracon_core::keys::ApiKeyRecord;
use tracon_core::runtime::Runtime;

/// How often a key's `lastUsedAt` is written at most.
const TOUCH_EVERY: Duration = Duration::seconds(60);

/// API keys recently read from the store, by id.
#[derive(Default)]
pub struct KeyCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, Cached>>,
    /// Bumped by every [`KeyCache::forget`]: a store read that started before a revocation
    /// or rotation is not cached after it (it may hold the old record).
    generation: std::sync::atomic::AtomicU64,
}

struct Cached {
    record: ApiKeyRecord,
    fetched: DateTime<Utc>,
    touched: Option<DateTime<Utc>>,
}

impl KeyCache {
    pub fn new(ttl: std::time::Duration) -> Self {
        Self {
            ttl: Duration::from_std(ttl).unwrap_or(Duration::zero()),
            entries: Mutex::default(),
            generation: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) async fn lookup(
        &self,
        runtime: &Runtime,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<ApiKeyRecord>, StoreError> {
        if let Some(hit) = self.entries().get(id).filter(|c| now - c.fetched < self.ttl) {
            return Ok(Some(hit.record.clone()));
        }
        let generation = self.generation.load(std::sync::atomic::Ordering::SeqCst);
        let found = runtime.stores.keys.find(id).await?;
        if let Some(record) = &found
            && self.ttl > Duration::zero()
        {
            // Checked under the lock `forget` bumps the generation under.
            let mut entries = self.entries();
            if self.generation.load(std::sync::atomic::Ordering::SeqCst) == generation {
                let touched = entries.get(id).and_then(|c| c.touched);
                entries.insert(id.to_owned(), Cached { record: record.clone(), fetched: now, touched });
            }
        }
        Ok(found)
    }

    /// Forgets a key, so this instance's next request reads it again (after a revocation
    /// or rotation).
    pub fn forget(&self, id: &str) {
        let mut entries = self.entries();
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        entries.remove(id);
    }

    /// Writes `lastUsedAt` at most once a minute per key per instance, off the request path;
    /// a failed write is logged and changes nothing for the request.
    pub(super) fn touch_if_due(&self, runtime: &Runtime, record: &ApiKeyRecord, now: DateTime<Utc>) {
        {
            let mut entries = self.entries();
            let last = entries.get(&record.id).and_then(|c| c.touched).or(record.last_used_at);
            if last.is_some_and(|at| now - at < TOUCH_EVERY) {
                return;
            }
            if let Some(entry) = entries.get_mut(&record.id) {
                entry.touched = Some(now);
            }
        }
        let store = runtime.stores.keys.clone();
        let id = record.id.clone();
        runtime.platform.spawner.spawn(Box::pin(tracon_core::platform::send_future(async move {
            if let Err(e) = store.touch(&id, now).await {
                tracing::warn!(key = %id, error = %e, "could not record an API key's use");
            }
        })));
    }
}
