//! [`LostSignal`]: what the guarded work waits on to learn that its lock can no longer be
//! trusted.

use std::sync::Arc;

use crate::hold::lease::Lease;
use crate::telemetry::LossReason;

/// Completes when a lock can no longer be trusted: lost (a renewal or extend could not confirm
/// a quorum in time, or its validity ran out) or ended (released or dropped). It fires no later
/// than the lock's validity deadline, even when nothing else is running.
///
/// Cheap to clone, `Send + Sync + 'static`: hand it to the tasks doing the guarded work.
#[derive(Clone)]
pub struct LostSignal {
    lease: Arc<Lease>,
}

impl std::fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LostSignal")
            .field("key", &self.lease.shape.to_string())
            .field("fired", &self.is_fired())
            .finish()
    }
}

impl LostSignal {
    pub(crate) fn new(lease: Arc<Lease>) -> LostSignal {
        LostSignal { lease }
    }

    /// Whether the lock can no longer be trusted (lost, expired, released or dropped).
    pub fn is_fired(&self) -> bool {
        self.lease.live_deadline().is_none()
    }

    /// Waits until the lock can no longer be trusted. Follows every move of the deadline,
    /// earlier (a shortening extend or renewal) as well as later.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn wait(&self) {
        loop {
            // Registered before the deadline is read, so that no move is missed.
            let moved = self.lease.moved.notified();
            let deadline = self.lease.deadline();
            tokio::select! {
                () = self.lease.signal().cancelled() => return,
                () = moved => {}
                () = tokio::time::sleep_until(deadline) => {
                    // The deadline may have moved (renewed) while we slept.
                    if self.lease.live_deadline().is_none() {
                        self.lease.mark_lost(LossReason::Expired);
                        return;
                    }
                }
            }
        }
    }
}
