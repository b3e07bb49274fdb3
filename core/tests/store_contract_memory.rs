//! The store contract against the in-memory stores.

tracon_core::store_contract_tests!(async { tracon_core::stores::Stores::in_memory() });

mod jobs {
    use std::sync::Arc;

    use tracon_core::jobs::JobStore;
    use tracon_core::jobs::MemoryJobStore;

    tracon_core::job_store_contract_tests!(async { Arc::new(MemoryJobStore::default()) as Arc<dyn JobStore> });
}

mod idempotency {
    use std::sync::Arc;

    use tracon_core::idempotency::IdempotencyStore;
    use tracon_core::idempotency::MemoryIdempotencyStore;

    tracon_core::idempotency_store_contract_tests!(async {
        Arc::new(MemoryIdempotencyStore::default()) as Arc<dyn IdempotencyStore>
    });
}

mod triggers {
    use std::sync::Arc;

    use tracon_core::triggers::{MemoryTriggerStore, TriggerStore};

    tracon_core::trigger_store_contract_tests!(async {
        Arc::new(MemoryTriggerStore::default()) as Arc<dyn TriggerStore>
    });
}

mod webhooks {
    use std::sync::Arc;

    use tracon_core::webhooks::WebhookStore;
    use tracon_core::webhooks::memory::MemoryWebhookStore;

    tracon_core::webhook_store_contract_tests!(async {
        Arc::new(MemoryWebhookStore::default()) as Arc<dyn WebhookStore>
    });
}
