//! Renewal of a lock taken without an explicit lease (docs/DESIGN.md, "Extend and watchdog"): every
//! lease/3 the lease is extended on all nodes, which needs a quorum each time; a failed
//! renewal is retried until the current validity runs out, and then the lock is lost.
//!
//! One task per watched guard: it sleeps on a timer between renewals and ends as soon as the
//! guard is released, dropped or lost (the lease's signal).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;
use crate::hold::lease::Lease;
use crate::rules::backoff::Backoff;

/// Keeps `lease` alive with renewals of `ttl` until it ends, is lost, or `max_hold` (from now)
/// is reached; after that the lock simply runs out at its deadline.
///
/// Renewals are due every `ttl / 3` from the start of the previous one (the first a third into
/// the lease, measured from the acquire's start). A renewal takes effect
/// as soon as a quorum confirms it; the slower nodes' answers are awaited (for repair) only
/// until the next one is due, so that one slow node cannot delay the schedule.
pub(crate) async fn run(lease: Arc<Lease>, ttl: Duration, max_hold: Option<Duration>) {
    // Beyond what an Instant can hold, there is no limit.
    let limit = max_hold.and_then(|m| Instant::now().checked_add(m));
    // The first renewal is due a third into the lease as the acquire measured it (from its
    // start, not from now: a slow acquire leaves less of the lease).
    // Failed renewals are retried with the waiting acquire's policy: the retry delay plus a
    // share of the jitter (so that the watchdogs of many guards cut off at once do not retry
    // in step), never sooner than 10 ms, and never later than the next renewal would be due.
    let config = lease.config();
    let mut backoff = Backoff::new(
        config.retry_delay.max(Duration::from_millis(10)),
        config.retry_jitter,
    );
    let mut next = lease
        .deadline()
        .checked_sub(ttl * 2 / 3)
        .unwrap_or_else(Instant::now);
    loop {
        tokio::select! {
            () = lease.signal().cancelled() => return,
            () = tokio::time::sleep_until(next) => {}
        }
        let start = Instant::now();
        let mut renew_ttl = ttl;
        if let Some(limit) = limit {
            // The last renewal is shortened to end at the limit (the lease cuts its deadline
            // before sending it).
            renew_ttl = renew_ttl.min(limit.saturating_duration_since(start));
            if lease.config().check_ttl(renew_ttl).is_err() {
                tracing::debug!(key = %lease.key, "maximum hold time reached; renewals stop");
                return;
            }
        }
        let due = start + ttl / 3;
        match lease.renew(renew_ttl, Some(due)).await {
            Ok(()) => next = due,
            Err(Error::LockLost { .. }) => return,
            Err(e) => {
                // The current validity still stands: try again soon, until it runs out (renew
                // then reports the loss).
                tracing::warn!(key = %lease.key, error = %e, "renewal failed; retrying");
                next = Instant::now() + backoff.pause(false, Some(ttl / 3), rand::random());
            }
        }
    }
}
