//! The extend and release rounds (one call to every node, and what its answers mean), shared
//! by a guard's lease (`hold/lease.rs`) and the calls by holder value (`hold/by_holder.rs`).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Op, Result};
use crate::family::{read_flag, Notice, Shape};
use crate::fanout::ordering::Stragglers;
use crate::fanout::{fan_out, FanOut, NodeAnswer, Outcome};
use crate::rules::quorum::Decision;
use crate::state::ClientState;
use crate::telemetry::ReleasedBy;

/// How one extend round ended: what a lease's renewal and an extend by holder value both act on.
pub(crate) enum Extended {
    /// A quorum confirmed, at this instant, before the bound.
    Confirmed(Instant),
    /// No quorum before the bound, or it came after it: the entries cannot be trusted.
    TooLate,
    /// Enough nodes answered that this holder does not hold the key there that no quorum can.
    Refused,
    /// Too many nodes failed to answer; the error names them.
    Failed(Error),
}

/// An extend of `key` for `holder` to `ttl` on every node: the extend script, which acts only
/// where the stored holder value matches and never creates an entry, so an expired or released
/// lock stays gone (invariant 5). With `recorded` (the holder published a holder record), the
/// record's expiry moves with the entry's. Nothing is sent until the fan-out is first polled.
pub(crate) fn extend_call(
    client: &ClientState,
    shape: &Shape,
    holder: &str,
    ttl: Duration,
    recorded: bool,
) -> FanOut<impl Future<Output = NodeAnswer> + Send + 'static> {
    let ttl_ms = client.config.node_ttl_ms(ttl);
    let call = shape
        .extend_with_record(holder, &ttl_ms, recorded)
        .durable(client.config.durable);
    fan_out(&client.nodes, client.config.required, call, read_flag)
}

/// Decides an extend before `bound`, the deadline the caller may trust the entries until: a
/// quorum confirmed after it proves nothing, since the entries may have expired in between.
///
/// Cancel safe: answers not yet counted stay pending.
pub(crate) async fn decide_extend<F>(fan: &mut FanOut<F>, key: &Shape, bound: Instant) -> Extended
where
    F: Future<Output = NodeAnswer> + Send + 'static,
{
    let decided = tokio::time::timeout_at(bound, fan.decide()).await;
    let at = Instant::now();
    match decided {
        Ok(Decision::Reached) if at < bound => Extended::Confirmed(at),
        Ok(Decision::Reached) | Err(_) => Extended::TooLate,
        Ok(_) if fan.outcome.tally.refusals_rule_out_quorum() => Extended::Refused,
        Ok(_) => Extended::Failed(fan.outcome.no_quorum(Op::Extend, key)),
    }
}

/// Releases `key` for `holder` on every node: compare-and-delete, publishing the release notice
/// wherever the key is now free (see the release script). Returns at quorum, with the requests
/// still running; when the quorum is not reached, waits for every node's answer (each bounded by
/// the node timeout), so that the count is exact.
pub(crate) async fn release_round(
    client: &ClientState,
    shape: &Shape,
    holder: &str,
) -> (Outcome, Option<Stragglers>) {
    // A release may hand the key to a waiter of this client (see `wakeup::handoff`).
    // Under durable votes, no hand-off to this client's waiters from the release's answers:
    // the release waits for no WAITAOF, so each waiter claims the grant with an acquire of
    // its own, whose votes are durable.
    let handing = match client.config.durable {
        Some(_) => None,
        None => client.handoff.before_release(shape),
    };
    let sure = handing.as_ref().map_or(&[][..], |h| h.sure());
    let (call, read) = shape.release_handing_off(holder, Notice::Release, sure);
    let mut fan = fan_out(&client.nodes, client.config.required, call, read);
    if fan.decide().await == Decision::Reached {
        let mut stragglers = fan.detach(&client.background);
        client
            .courtesy
            .after_release(shape, fan.outcome.max_yes, client.wakeups.as_deref());
        if let Some(handing) = handing {
            handing.confirmed(&client.config, &fan.outcome, &mut stragglers);
        }
        (fan.outcome, stragglers)
    } else {
        fan.collect().await;
        (fan.outcome, None)
    }
}

/// A release's report, counted: `Ok` when a quorum confirmed and the lock was not lost before;
/// [`Error::ReleaseUnconfirmed`] when the lock is known to have been held to the end
/// (`held_to_the_end`: its lease ended within its deadline, not lost) and the nodes that did
/// not confirm were only slow or unreachable (too few refused to rule out a quorum); else
/// [`Error::NotHeld`] with the exact count (also for a release by holder value without a
/// lease, whose validity this client does not know).
pub(crate) fn release_result(
    client: &ClientState,
    key: &Shape,
    outcome: &Outcome,
    was_lost: bool,
    held_to_the_end: bool,
) -> Result<()> {
    let confirmed = outcome.decision == Decision::Reached && !was_lost;
    client.counters.release(ReleasedBy::Release, confirmed);
    if crate::failpoints::on(crate::failpoints::FailPoint::RefusedReleaseReportsOk)
        && outcome.tally.refused() > 0
    {
        return Ok(());
    }
    if confirmed {
        Ok(())
    } else if was_lost || !held_to_the_end || outcome.tally.refusals_rule_out_quorum() {
        Err(outcome.not_held(key))
    } else {
        Err(outcome.release_unconfirmed(key))
    }
}
