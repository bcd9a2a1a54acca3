//! Per-sandbox serialisation: requests for one sandbox run one at a time, in arrival order;
//! different sandboxes run in parallel; an entry lives only while someone holds or waits for it.

use std::collections::HashMap;

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OwnedMutexGuard;

/// One async mutex per key, created on demand and removed when nobody holds or waits for it.
///
/// Invariant: every clone of an entry's `Arc` is made under the map lock, and every holder
/// re-checks under the map lock after dropping its clone, so the last one out removes the entry.
#[derive(Debug, Default)]
pub(crate) struct KeyedLocks {
    pub(crate) map: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Holds the lock for one key; releasing it may remove the key's entry.
#[derive(Debug)]
pub(crate) struct KeyGuard {
    pub(crate) locks: Arc<KeyedLocks>,
    pub(crate) key: String,
    pub(crate) guard: Option<OwnedMutexGuard<()>>,
}

/// A waiter's reference to the key's mutex; cleans up if the wait is cancelled.
pub(crate) struct Waiter {
    pub(crate) locks: Arc<KeyedLocks>,
    pub(crate) key: String,
    pub(crate) mutex: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl KeyedLocks {
    /// Waits for the lock of `key` (FIFO among waiters).
    pub(crate) async fn lock(self: Arc<Self>, key: String) -> KeyGuard {
        let mutex = {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            map.entry(key.clone()).or_default().clone()
        };
        let mut waiter = Waiter {
            locks: self.clone(),
            key: key.clone(),
            mutex: Some(mutex.clone()),
        };
        let guard = mutex.lock_owned().await;
        waiter.mutex = None; // the guard keeps the mutex alive now
        drop(waiter);
        KeyGuard {
            locks: self,
            key,
            guard: Some(guard),
        }
    }

    /// Number of keys with a holder or waiter.
    pub(crate) fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub(crate) fn release(&self, key: &str) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if map.get(key).is_some_and(|m| Arc::strong_count(m) == 1) {
            map.remove(key);
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.mutex.take().is_some() {
            self.locks.release(&self.key);
        }
    }
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.locks.release(&self.key);
    }
}
