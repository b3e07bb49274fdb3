//! The store contract against the in-memory stores.

tracon_core::store_contract_tests!(async { tracon_core::store::Stores::in_memory() });
