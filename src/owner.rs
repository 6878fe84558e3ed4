//! Reentrancy: an explicit owner handle that may acquire a key it already holds.
//!
//! Plain [`QuorumLock::acquire`] is not reentrant, on purpose. Redisson ties reentrancy to the
//! calling thread; in async Rust a task moves between worker threads and many tasks share one
//! thread, so "the same thread" identifies nobody: two tasks on one worker would both pass.
//! Ownership must be a value you hand to exactly the code allowed to re-enter: an [`Owner`].
//!
//! The hold count lives here, in the client, not on the nodes. The nodes keep one entry per
//! acquisition, as for any lock. Per-node counters (Redisson's layout) drift apart under RedLock:
//! an increment that returned at quorum or timed out may or may not have been applied on the
//! other nodes, and rolling it back would decrement nodes that never incremented, deleting the
//! outer hold's entry there. A client-side count cannot drift, and a nested acquire costs no
//! round trip.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::error::Result;
use crate::key::Key;
use crate::lease::Lease;
use crate::lock::{LockRequest, QuorumLock};
use crate::LockGuard;

/// A reentrant lock owner: acquiring a key it already holds succeeds at once and increments a
/// hold count; each guard's release decrements it; the lock is released on the nodes (and the
/// release notice published) when the count reaches zero.
///
/// Different owners, of the same client or not, exclude each other. Clones are the same
/// owner. Nested guards share the outer acquisition's lease: its validity, watchdog and loss.
#[derive(Clone)]
pub struct Owner {
    client: QuorumLock,
    inner: Arc<OwnerInner>,
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner").field("id", &self.inner.id).finish()
    }
}

pub(crate) struct OwnerInner {
    pub(crate) id: String,
    held: Mutex<HashMap<Key, Weak<Lease>>>,
}

impl OwnerInner {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Weak<Lease>>> {
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
}

impl Owner {
    pub(crate) fn new(client: QuorumLock) -> Owner {
        Owner {
            client,
            inner: Arc::new(OwnerInner {
                id: uuid::Uuid::new_v4().simple().to_string(),
                held: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// This owner's id; its acquisitions' holder values start with it.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// How many guards this owner holds on `key` (0 when none, or when the lock was lost).
    pub fn hold_count(&self, key: impl AsRef<[u8]>) -> usize {
        self.inner
            .held()
            .get(key.as_ref())
            .and_then(Weak::upgrade)
            .filter(|l| l.live_deadline().is_some())
            .map_or(0, |l| l.holds.load(Ordering::Acquire))
    }

    /// A request for `key` on behalf of this owner. See [`QuorumLock::lock`].
    pub fn lock(&self, key: impl AsRef<[u8]>) -> LockRequest<'_> {
        self.client.lock(key).owner(self)
    }

    /// Acquires `key` for `ttl` (waiting), or joins this owner's hold on it.
    ///
    /// # Errors
    /// As [`QuorumLock::acquire`].
    ///
    /// # Cancel safety
    /// As [`QuorumLock::acquire`].
    pub async fn acquire(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        self.lock(key).ttl(ttl).acquire().await
    }

    /// One attempt to acquire `key` for `ttl`, or joins this owner's hold on it.
    ///
    /// # Errors
    /// As [`QuorumLock::try_acquire`].
    ///
    /// # Cancel safety
    /// As [`QuorumLock::acquire`].
    pub async fn try_acquire(
        &self,
        key: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        self.lock(key).ttl(ttl).try_acquire().await
    }

    pub(crate) fn inner(&self) -> &Arc<OwnerInner> {
        &self.inner
    }
}
