//! The store contract against the in-memory stores.

tracon_core::store_contract_tests!(async { tracon_core::store::Stores::in_memory() });

mod jobs {
    use std::sync::Arc;

    use tracon_core::jobs::JobStore;
    use tracon_core::store::memory::MemoryJobStore;

    tracon_core::job_store_contract_tests!(async { Arc::new(MemoryJobStore::default()) as Arc<dyn JobStore> });
}

mod idempotency {
    use std::sync::Arc;

    use tracon_core::idempotency::IdempotencyStore;
    use tracon_core::store::memory::MemoryIdempotencyStore;

    tracon_core::idempotency_store_contract_tests!(async {
        Arc::new(MemoryIdempotencyStore::default()) as Arc<dyn IdempotencyStore>
    });
}
