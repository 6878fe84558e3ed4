//! Acting on a lock by its holder value, without a guard (docs/DESIGN.md, "By holder value"): extend
//! and release for a process that was handed the holder, or a guard given up with
//! [`LockGuard::into_holder`](crate::LockGuard::into_holder). The rounds are a lease's own (`rounds::extend_call`,
//! `rounds::release_round`); only the deadline differs: with no guard, none is known before the
//! call, so the new one must hold when the quorum confirms.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::family::{Fair, Shape};
use crate::hold::lease::Lease;
use crate::hold::rounds::{decide_extend, extend_call, release_result, release_round, Extended};
use crate::rules::holder::Holder;
use crate::rules::key::Key;
use crate::state::ClientState;
use crate::telemetry::{RenewalEnd, RenewedBy};

/// What a holder value acts on: a mutex's entry, or a fair lock's (whose holder value names
/// its waiter, so that a release leaves the line and hands the key on as the guard's would).
/// The holder value, checked (see [`Holder::parse`]).
fn shape_of(client: &ClientState, key: &[u8], holder: &str) -> Result<(Shape, Holder)> {
    let key = Key::new(key)?;
    let holder = Holder::parse(holder)?;
    let shape = match Fair::of_holder(&key, &holder, &client.config) {
        Some(fair) => Shape::Fair(fair),
        None => Shape::mutex(key),
    };
    Ok((shape, holder))
}

/// The live lease of this client that holds `key` with `holder`, if any.
fn find_lease(client: &ClientState, key: &Shape, holder: &Holder) -> Option<std::sync::Arc<Lease>> {
    if crate::failpoints::on(crate::failpoints::FailPoint::HolderCallBypassesGuard) {
        return None;
    }
    Lease::find(client, key.primary().bytes(), holder)
}

/// [`QuorumLock::extend_by_holder`](crate::QuorumLock::extend_by_holder).
pub(crate) async fn extend(
    client: &ClientState,
    key: &[u8],
    holder: &str,
    ttl: Duration,
) -> Result<Duration> {
    let (key, holder) = shape_of(client, key, holder)?;
    let ttl = client.config.check_ttl(ttl)?;
    // A lock this client holds is extended through its guard's lease: the guard's deadline
    // follows (cut before a shortening is sent), as for the guard's own extend.
    if let Some(lease) = find_lease(client, &key, &holder) {
        lease.renew(ttl, None).await?;
        let validity = lease.deadline().saturating_duration_since(Instant::now());
        return match validity.is_zero() {
            true => Err(lease.lost_error()),
            false => Ok(validity),
        };
    }
    let span = tracing::debug_span!("extend", key = %key, ?ttl, by = "holder");
    async {
        let lost = || {
            client.counters.renewal(RenewedBy::Extend, RenewalEnd::Lost);
            Err(Error::LockLost {
                key: key.to_string(),
            })
        };
        // The validity runs from before the first request is sent, as a guard's extend's does;
        // the quorum must come before it ends.
        let deadline = client.config.trusted_until(Instant::now(), ttl);
        // The holder record too: whoever took the lock may have published one (a label, a
        // leader's value), which must last as long as the entry.
        let mut fan = extend_call(client, &key, holder.as_str(), ttl, true);
        let ended = decide_extend(&mut fan, &key, deadline).await;
        // No lease to leave the requests still in flight with: those not yet written to their
        // connection are stopped before the call returns (waiting only for one being written
        // at that moment), so that none can land after what this client sends next (ordering
        // invariant 4); those written finish in the background.
        if let Some(stragglers) = fan.detach(&client.background) {
            stragglers.settle().await;
        }
        match ended {
            Extended::Confirmed(_) => {
                let Some(validity) = client.config.validity(deadline, Instant::now()) else {
                    return lost();
                };
                client
                    .counters
                    .renewal(RenewedBy::Extend, RenewalEnd::Confirmed);
                Ok(validity)
            }
            Extended::TooLate | Extended::Refused => lost(),
            Extended::Failed(error) => {
                client
                    .counters
                    .renewal(RenewedBy::Extend, RenewalEnd::Failed);
                Err(error)
            }
        }
    }
    .instrument(span)
    .await
}

/// [`QuorumLock::release_by_holder`](crate::QuorumLock::release_by_holder).
pub(crate) async fn release(client: &ClientState, key: &[u8], holder: &str) -> Result<()> {
    let (key, holder) = shape_of(client, key, holder)?;
    // A lock this client holds is released through its guard's lease: the guard stops
    // trusting the lock (and its loss signals fire) before any node lets go of it.
    if let Some(lease) = find_lease(client, &key, &holder) {
        return lease.release_by_holder_value().await;
    }
    let span = tracing::debug_span!("release", key = %key, by = "holder");
    async {
        // The slower nodes' releases finish in the background, as a guard's do: after a
        // release nothing may be sent with this holder that a late compare-and-delete could
        // undo (an extend never re-creates an entry), and stopping them would leave the
        // entry on a node that was reconnecting until its TTL.
        let (outcome, _in_background) = release_round(client, &key, holder.as_str()).await;
        release_result(client, &key, &outcome, false, false)
    }
    .instrument(span)
    .await
}
