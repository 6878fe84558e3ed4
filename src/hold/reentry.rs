//! The reentrancy table of one [`Owner`](crate::Owner): which live lease it holds per key, so
//! that a nested acquire joins it (docs/DESIGN.md, "Reentrancy").
//!
//! The hold count lives in the client, not on the nodes, which keep one entry per
//! acquisition. Per-node counters (Redisson's layout) drift apart under a quorum protocol: an
//! increment that returned at quorum or timed out may or may not have been applied on the
//! other nodes, and rolling it back would decrement nodes that never incremented, deleting
//! the outer hold's entry there. A client-side count cannot drift, and a nested acquire costs
//! no round trip.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::hold::lease::Lease;
use crate::rules::key::Key;

/// An owner's live holds, by key.
#[derive(Debug)]
pub(crate) struct HoldTable {
    /// The owner's id; its acquisitions' holder values start with it.
    pub(crate) id: String,
    held: Mutex<HashMap<Key, Weak<Lease>>>,
}

impl HoldTable {
    pub(crate) fn new() -> HoldTable {
        HoldTable {
            id: uuid::Uuid::new_v4().simple().to_string(),
            held: Mutex::new(HashMap::new()),
        }
    }

    fn held(&self) -> MutexGuard<'_, HashMap<Key, Weak<Lease>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins a live lease this owner holds on `key`, incrementing its hold count.
    pub(crate) fn reenter(&self, key: &[u8]) -> Option<Arc<Lease>> {
        let held = self.held();
        let lease = held.get(key)?.upgrade()?;
        // Under the map lock, so a concurrent last release cannot end it in between.
        if lease.live_deadline().is_none() || lease.holds.load(Ordering::Acquire) == 0 {
            return None;
        }
        lease.holds.fetch_add(1, Ordering::AcqRel);
        Some(lease)
    }

    /// Records a fresh acquisition.
    pub(crate) fn register(&self, lease: &Arc<Lease>) {
        self.held().insert(lease.key.clone(), Arc::downgrade(lease));
    }

    /// Gives up one hold; true when it was the last (the caller releases on the nodes).
    pub(crate) fn drop_hold(&self, lease: &Arc<Lease>) -> bool {
        let mut held = self.held();
        if lease.holds.fetch_sub(1, Ordering::AcqRel) != 1 {
            return false;
        }
        if held
            .get(&lease.key)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(lease)))
        {
            held.remove(&lease.key);
        }
        true
    }

    /// How many guards hold `key` (0 when none, or when the lock was lost).
    pub(crate) fn hold_count(&self, key: &[u8]) -> usize {
        self.held()
            .get(key)
            .and_then(Weak::upgrade)
            .filter(|l| l.live_deadline().is_some())
            .map_or(0, |l| l.holds.load(Ordering::Acquire))
    }
}
