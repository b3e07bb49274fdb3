//! Locks that outlive a panic.

use std::sync::{Mutex, MutexGuard};

/// Locks, recovering from a poisoned lock: every critical section of the in-memory stores
/// leaves its maps consistent before it could panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
