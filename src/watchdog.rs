//! Renewal of a lock taken without an explicit lease (DESIGN 3, "Extend / watchdog"): every
//! lease/3 the lease is extended on all nodes, which needs a quorum each time; a failed
//! renewal is retried until the current validity runs out, and then the lock is lost.
//!
//! One task per watched guard: it sleeps on a timer between renewals and ends as soon as the
//! guard is released, dropped or lost (the lease's signal).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{key_display, Error};
use crate::lease::Lease;
use crate::lock::Shared;

/// Keeps `lease` alive with renewals of `ttl` until it ends, is lost, or `max_hold` (from now)
/// is reached; after that the lock simply runs out at its deadline.
pub(crate) async fn run(
    shared: Arc<Shared>,
    lease: Arc<Lease>,
    ttl: Duration,
    max_hold: Option<Duration>,
) {
    let limit = max_hold.map(|m| Instant::now() + m);
    let mut next = Instant::now() + ttl / 3;
    loop {
        tokio::select! {
            () = lease.signal().cancelled() => return,
            () = tokio::time::sleep_until(next) => {}
        }
        let mut renew_ttl = ttl;
        if let Some(limit) = limit {
            renew_ttl = renew_ttl.min(limit.saturating_duration_since(Instant::now()));
            if shared.config.check_ttl(renew_ttl).is_err() {
                tracing::debug!(key = %key_display(&lease.key), "maximum hold time reached; renewals stop");
                return;
            }
        }
        match lease.renew(&shared, renew_ttl, true).await {
            Ok(()) => next = Instant::now() + ttl / 3,
            Err(Error::LockLost { .. }) => return,
            Err(e) => {
                // The current validity still stands: try again soon, until it runs out (renew
                // then reports the loss).
                tracing::warn!(key = %key_display(&lease.key), error = %e, "renewal failed; retrying");
                next = Instant::now() + shared.config.retry_delay.max(Duration::from_millis(10));
            }
        }
    }
}
