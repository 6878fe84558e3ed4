//! Reentrancy: an explicit owner handle that may acquire a key it already holds.
//!
//! Plain [`QuorumLock::acquire`](crate::QuorumLock::acquire) is not reentrant, on purpose.
//! Redisson ties reentrancy to the calling thread; in async Rust a task moves between worker
//! threads and many tasks share one thread, so "the same thread" identifies nobody: two tasks
//! on one worker would both pass. Ownership must be a value you hand to exactly the code
//! allowed to re-enter: an [`Owner`]. Its hold counts live in `hold::reentry`.

use std::sync::Arc;
use std::time::Duration;

use crate::client::request::LockRequest;
use crate::error::Result;
use crate::hold::guard::LockGuard;
use crate::hold::reentry::HoldTable;
use crate::state::ClientState;

/// A reentrant lock owner: acquiring a key it already holds succeeds at once and increments a
/// hold count; each guard's release decrements it; the lock is released on the nodes (and the
/// release notice published) when the count reaches zero.
///
/// Different owners, of the same client or not, exclude each other. Clones are the same
/// owner. Nested guards share the outer acquisition's lease: its validity, watchdog and loss.
#[derive(Clone)]
pub struct Owner {
    state: Arc<ClientState>,
    holds: Arc<HoldTable>,
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner").field("id", &self.holds.id).finish()
    }
}

impl Owner {
    pub(crate) fn new(state: Arc<ClientState>) -> Owner {
        Owner {
            state,
            holds: Arc::new(HoldTable::new()),
        }
    }

    /// This owner's id; its acquisitions' holder values start with it.
    pub fn id(&self) -> &str {
        &self.holds.id
    }

    /// How many guards this owner holds on `key` (0 when none, or when the lock was lost).
    pub fn hold_count(&self, key: impl AsRef<[u8]>) -> usize {
        self.holds.hold_count(key.as_ref())
    }

    /// A request for `key` on behalf of this owner. See
    /// [`QuorumLock::lock`](crate::QuorumLock::lock).
    pub fn lock(&self, key: impl AsRef<[u8]>) -> LockRequest<'_> {
        LockRequest::new(&self.state, key.as_ref()).owner(&self.holds)
    }

    /// Acquires `key` for `ttl` (waiting), or joins this owner's hold on it.
    ///
    /// # Errors
    /// As [`QuorumLock::acquire`](crate::QuorumLock::acquire).
    ///
    /// # Cancel safety
    /// As [`QuorumLock::acquire`](crate::QuorumLock::acquire).
    pub async fn acquire(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        self.lock(key).ttl(ttl).acquire().await
    }

    /// One attempt to acquire `key` for `ttl`, or joins this owner's hold on it.
    ///
    /// # Errors
    /// As [`QuorumLock::try_acquire`](crate::QuorumLock::try_acquire).
    ///
    /// # Cancel safety
    /// As [`QuorumLock::acquire`](crate::QuorumLock::acquire).
    pub async fn try_acquire(
        &self,
        key: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        self.lock(key).ttl(ttl).try_acquire().await
    }
}
