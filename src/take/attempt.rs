//! Taking a lock: one attempt (fan-out, validity, fencing token, rollback) (docs/DESIGN.md,
//! "Acquire" and "Fencing tokens"). The waiting loop around attempts is in `take::waiting`
//! (and a fair request's part of it in `take::fair`); a request's checks, in `take::plan`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, Op, Result};
use crate::family::{read_flag, Notice, Shape, Standing};
use crate::fanout::ordering::{write_from_drop, write_now_finish_later, Stragglers};
use crate::fanout::{broadcast, fan_out, Outcome};
use crate::hold::guard::LockGuard;
use crate::hold::lease::Lease;
use crate::rules::config::Config;
use crate::rules::holder::Holder;
use crate::rules::quorum::Decision;
use crate::scripts::SendBy;
use crate::state::ClientState;
use crate::take::arbiter::{approach as approach_nodes, arbiter, Approached};
use crate::take::plan::{plan, Plan, Spec};
use crate::telemetry::{self, AcquireEnd, AttemptEnd, Started};

/// What a contended attempt learned.
pub(crate) struct Contention {
    /// The smallest PTTL another holder reported.
    pub(crate) hint: Option<Duration>,
    /// A fair request's ticket, when a quorum of refusals drew it.
    pub(crate) drawn: Option<u64>,
    /// Some nodes said yes (the attempt raced a change of holder: a release, a grant), or a
    /// fair request's rollback gave the key back to it.
    pub(crate) partly: bool,
    /// The key's arbiter (this node) refused (the ordered approach): another waiter has its
    /// vote for this release, and will hold the key or retry itself, unless the release had
    /// not reached the arbiter yet (see `Channel::refused_by`).
    pub(crate) by_arbiter: Option<usize>,
}

/// What one attempt ended with, short of a guard.
pub(crate) enum Miss {
    /// Other holders refused enough nodes.
    Contended(Contention),
    /// Nodes failed, or the quorum came too late.
    Failed(Error),
}

/// One attempt: `Ok(None)` when another holder has the lock.
pub(crate) async fn once(state: &Arc<ClientState>, spec: Spec<'_>) -> Result<Option<LockGuard>> {
    let mut plan = plan(state, spec)?;
    // A single attempt does not wait: it leaves nothing behind that waiters keep (a
    // pending-writer mark), and its standing draws no fair ticket (it never joins a line).
    plan.shape.single_attempt();
    let span = tracing::debug_span!("acquire", key = %plan.shape, ttl = ?plan.ttl);
    let started = Started::now();
    let result = async {
        if let Some(guard) = reenter(&plan) {
            return Ok(Some(guard));
        }
        match attempt(state, &plan, Approach::All, &Standing::default()).await {
            Ok(guard) => Ok(Some(guard)),
            Err(Miss::Contended(..)) => Ok(None),
            Err(Miss::Failed(e)) => Err(e),
        }
    }
    .instrument(span)
    .await;
    let end = match &result {
        Ok(Some(_)) => AcquireEnd::Acquired,
        Ok(None) => AcquireEnd::Busy,
        Err(_) => AcquireEnd::Failed,
    };
    telemetry::acquire_ended(started, end);
    result
}

/// A reentrant owner's nested acquire: joins its live hold on the key, if any.
pub(crate) fn reenter(plan: &Plan<'_>) -> Option<LockGuard> {
    let owner = plan.owner?;
    let lease = owner.reenter(plan.shape.primary().bytes())?;
    Some(LockGuard::new(lease, Some(owner.clone())))
}

/// How an attempt sends its acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Approach {
    /// To every node at once.
    All,
    /// A mutex or multi-key waiter that lost: to the key's arbiter first (see `take::arbiter`).
    Ordered,
}

/// One attempt, by a request that stands where `standing` says: fan out, tally, compute the
/// validity, and roll back on every node when it is not a success.
pub(crate) async fn attempt(
    state: &Arc<ClientState>,
    plan: &Plan<'_>,
    approach: Approach,
    standing: &Standing,
) -> std::result::Result<LockGuard, Miss> {
    let config = &state.config;
    let (key, ttl) = (&plan.shape, plan.ttl);
    let holder = plan
        .shape
        .attempt_holder()
        .unwrap_or_else(|| Holder::mint(plan.owner.map(|o| (&*state.client_id, &*o.id))));
    let arbiter = match approach {
        Approach::Ordered if key.kind().ordered_approach() => {
            arbiter(&state.nodes, key.primary().bytes())
        }
        _ => None,
    };
    state.counters.attempt_started(arbiter.is_some());

    // RedLock step 1: the validity is measured from before the first request is sent.
    let t0 = Instant::now();
    let durable = state.config.durable;
    let call = || {
        let (call, read) = key.acquire(holder.as_str(), &plan.ttl_ms, standing);
        (call.durable(durable), read)
    };
    // Declared before the fan-outs: dropped after them, so that its rollback follows what
    // they wrote on each connection.
    let mut undo = Undo {
        state,
        key,
        holder: Some(holder.clone()),
    };
    let (mut fan, also_undo) =
        match approach_nodes(&state.nodes, config.required, call, arbiter).await {
            Approached::Fan { fan, also_undo } => (fan, also_undo),
            Approached::Refused(outcome) => {
                // The arbiter took nothing, and nothing else was sent: nothing to roll back.
                undo.disarm();
                state.counters.attempt(AttemptEnd::Contended);
                tracing::trace!(hint = ?outcome.hint, "attempt refused by the key's arbiter");
                return Err(Miss::Contended(Contention {
                    hint: outcome.hint,
                    drawn: None,
                    partly: false,
                    by_arbiter: arbiter,
                }));
            }
        };
    let decision = fan.decide().await;
    let deadline = config.trusted_until(t0, ttl);

    let miss = match decision {
        Decision::Reached => {
            let (token, fencing) = match plan.fencing {
                true => fence_token(state, key).await,
                false => (Ok(None), Vec::new()),
            };
            match verdict(config, plan, t0, deadline, token, Instant::now()) {
                Ok((token, validity)) => {
                    state.counters.attempt(AttemptEnd::Acquired);
                    tracing::debug!(?validity, ?token, elapsed = ?t0.elapsed(), "acquired");
                    // Every reachable node should get the entry (so that one node that later
                    // forgets it cannot leave the lock on a bare quorum): the stragglers
                    // finish in the background, and the lease's next call settles them first
                    // (ordering invariant 4).
                    let in_flight = fan
                        .detach(&state.background)
                        .into_iter()
                        .chain(fencing)
                        .collect();
                    undo.disarm();
                    return Ok(hold(state, plan, holder, deadline, token, in_flight));
                }
                Err(error) => {
                    // The fencing calls' stragglers must not overtake the rollback (ordering
                    // invariant 4); dropping the fan-out below stops the acquire's.
                    for stragglers in fencing {
                        stragglers.settle().await;
                    }
                    Miss::Failed(error)
                }
            }
        }
        _ => short_of_quorum(&fan.outcome, config.required, key),
    };
    let give_back_to = rollback_targets(
        state.nodes.len(),
        &fan.outcome.refused,
        &fan.outcome.unsent,
        also_undo,
    );
    let answered_yes = fan.outcome.yes;
    // Stops the requests not yet written; those written stay queued ahead of the rollback on
    // their connections (ordering invariant 5). A fair request's rollback is not waited for
    // everywhere (see `give_back`), so its next attempt may be written behind this one's
    // rollback on a slow node: its attempts written there must land (they keep its place in
    // line), not be dropped, or a node one round trip behind would never see it join.
    match key.kind().waits_for_rollback() {
        true => fan.finish_written(&state.background),
        false => drop(fan),
    }
    state.counters.attempt(match &miss {
        Miss::Contended(..) => AttemptEnd::Contended,
        Miss::Failed(_) => AttemptEnd::Failed,
    });
    state.counters.rollback();
    // RedLock step 5: roll back, also on the nodes that failed or timed out. Written in the
    // first poll of `give_back` (ordering invariant 5), so no cancellation can come between.
    undo.disarm();
    let regranted = give_back(state, key, holder, give_back_to, answered_yes).await;
    let mut miss = miss;
    if let Miss::Contended(c) = &mut miss {
        c.partly |= regranted;
    }
    Err(miss)
}

/// An attempt under way, rolled back on every node if its future is dropped before it ends
/// (a timeout around the acquire, a dropped future, an aborted task): its requests already
/// written still run on their nodes, and would keep the key, with no guard anywhere, for the
/// entry's TTL (found by a black-box review; model: `Bug::CancelLeavesEntries`). The rollback
/// is written on every connection at once, behind the attempt's requests, whose fan-out is
/// dropped first (requests not yet written are then never written), and deletes only this
/// attempt's holder value. Disarmed once the attempt holds (its guard owns the entries), was
/// refused by the arbiter (nothing taken), or sends its own rollback.
struct Undo<'a> {
    state: &'a Arc<ClientState>,
    key: &'a Shape,
    holder: Option<Holder>,
}

impl Undo<'_> {
    fn disarm(&mut self) {
        self.holder = None;
    }
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        let Some(holder) = self.holder.take() else {
            return;
        };
        tracing::debug!("attempt cancelled by its caller: its rollback goes to every node");
        let every = (0..self.state.nodes.len()).collect();
        let work = rollback(self.state.clone(), self.key.clone(), holder, every);
        write_from_drop(&self.state.background, async move {
            work.await;
        });
    }
}

/// What a quorum of yes comes to (RedLock step 4), once the fencing token (if asked) was
/// drawn, at `now`: the token and the validity left, or why the attempt fails. `since` is
/// when the validity started to run (the attempt's first send, or the release's that handed
/// the key over), `deadline` what it runs to.
pub(super) fn verdict(
    config: &Config,
    plan: &Plan<'_>,
    since: Instant,
    deadline: Instant,
    token: Result<Option<u64>>,
    now: Instant,
) -> Result<(Option<u64>, Duration)> {
    let token = token?;
    match config.validity(deadline, now) {
        Some(validity) => Ok((token, validity)),
        None => Err(Error::ValidityExhausted {
            key: plan.shape.to_string(),
            elapsed: now.saturating_duration_since(since),
            ttl: plan.ttl,
        }),
    }
}

/// What an attempt without a quorum of yes comes to: contended when the failures leave room
/// for a quorum (others hold the lock), failed otherwise.
fn short_of_quorum(outcome: &Outcome, required: usize, key: &Shape) -> Miss {
    if !outcome.tally.failures_leave_room() {
        return Miss::Failed(outcome.no_quorum(Op::Acquire, key));
    }
    // A fair request's first attempt drew its ticket where it was refused: the largest number
    // of a quorum of refusals is the ticket (see `take::fair`).
    let drawn = (outcome.drawn >= required)
        .then_some(outcome.max_drawn)
        .flatten()
        .and_then(|n| u64::try_from(n).ok());
    tracing::trace!(yes = outcome.tally.yes(), hint = ?outcome.hint, "attempt refused");
    Miss::Contended(Contention {
        hint: outcome.hint,
        drawn,
        partly: outcome.tally.yes() > 0,
        by_arbiter: None,
    })
}

/// The nodes a failed attempt of `n` nodes rolls back. A node that answered "refused" took
/// nothing (a re-sent request answers yes where the first one took the key), and nor did one
/// the request was never written to (its circuit breaker was open), so the rollback goes to
/// every other node: those that said yes, failed, timed out or were not waited for, since they
/// may have applied the acquire; and to an arbiter whose first request may have run
/// (`also_undo`, see `Approached::Fan`).
fn rollback_targets(
    n: usize,
    refused: &[usize],
    unsent: &[usize],
    also_undo: Option<usize>,
) -> Vec<usize> {
    (0..n)
        .filter(|i| (!refused.contains(i) && !unsent.contains(i)) || also_undo == Some(*i))
        .collect()
}

/// Rolls a failed attempt back on `nodes` (RedLock step 5), before a retry can be sent
/// (ordering invariant 5): otherwise the retry could be refused by this attempt's own entry.
/// An attempt every node refused has nothing to give back.
///
/// An attempt's holder value is its own (a fair request's too: its base and a nonce), so a
/// rollback that lands late can never delete a later attempt's entry, or a grant, and it is
/// enough to write it onto every live connection now and let it finish in the background.
/// A fair request waits for its rollback's answers from the nodes in `wait_on` (those that
/// answered its attempt yes; each part bounded by the node timeout), to learn whether one gave
/// the key straight back to it; the parts to the other nodes (failed, timed out, not waited
/// for: a silent node among them) are written now and finish in the background, so that a
/// silent node does not hold up every attempt by a node timeout. Not waiting is safe: every
/// value of the request that a release hands over, or that a hold from notices counts, is
/// a hand-off value of a round no earlier than this attempt's, which neither this attempt
/// (landing late) claims nor its rollback deletes (`tests/model_fair/`, whose requests wait
/// for the same nodes' parts; waiting for none was checked as well).
///
/// Returns whether a fair request's rollback gave the key straight back to the request, first
/// in line (see `family/lua/fair_release.lua`): its next attempt should come at once, since no other
/// notice of that grant is sure to reach it.
pub(super) async fn give_back(
    state: &Arc<ClientState>,
    shape: &Shape,
    holder: Holder,
    nodes: Vec<usize>,
    wait_on: u64,
) -> bool {
    if nodes.is_empty() {
        return false;
    }
    let (waited, unwaited): (Vec<usize>, Vec<usize>) = match shape.kind().waits_for_rollback() {
        true => nodes.into_iter().partition(|&i| wait_on & 1 << i != 0),
        false => (Vec::new(), nodes),
    };
    if !unwaited.is_empty() {
        let work = rollback(state.clone(), shape.clone(), holder.clone(), unwaited);
        write_now_finish_later(&state.background, async move {
            work.await;
        });
    }
    if waited.is_empty() {
        return false;
    }
    let answers = state
        .background
        .track(rollback(state.clone(), shape.clone(), holder, waited))
        .await;
    answers
        .iter()
        .any(|a| a.as_ref().is_ok_and(|v| shape.kind().given_back(v)))
}

/// The fencing token of an acquisition that a quorum just confirmed (docs/DESIGN.md, "Fencing
/// tokens"): the key's counter is incremented on every node, the token is the largest answer
/// among a quorum, and it is written back (`max`) to a quorum before the guard exists.
///
/// The increments come after the lock is held, never with the acquire itself: an acquire
/// still contending can read a node before the previous holder's write-back reached it, and
/// another node whose write-back was lost, and so get the previous holder's token again (the
/// model check found this; docs/SAFETY.md). Incremented after the quorum, by a holder that
/// holds only once its predecessor stopped holding, and so after the predecessor's write-back
/// reached a quorum, the largest answer of any quorum exceeds every earlier token.
///
/// Returns the requests still in flight, for the lease to order before its next call.
///
/// A multi-key lock increments every key's counter on each node in one script, which answers
/// the largest, and writes the token back to every counter of the set: the token exceeds
/// every earlier token of every key in the set, and every later holder of any of them
/// (alone or in a set) gets a larger one (docs/DESIGN.md, "Lock family").
pub(super) async fn fence_token(
    state: &ClientState,
    key: &Shape,
) -> (Result<Option<u64>>, Vec<Stragglers>) {
    let required = state.config.required;
    // Under durable votes both the increments and the write-back count only once made
    // durable: a node that restarts after a machine crash keeps a counter at least the token.
    let durable = state.config.durable;
    let (increment, read) = key.fence_increment();
    let increment = increment.durable(durable);
    let mut incremented = fan_out(&state.nodes, required, increment, read);
    let mut in_flight = Vec::new();
    let token = match incremented.decide().await {
        Decision::Reached => incremented
            .outcome
            .max_yes
            .and_then(|m| u64::try_from(m).ok()),
        _ => None,
    };
    in_flight.extend(incremented.detach(&state.background));
    let Some(token) = token else {
        return (
            Err(incremented.outcome.no_quorum(Op::Acquire, key)),
            in_flight,
        );
    };
    let token_arg = token.to_string();
    let call = key.fence_write(&token_arg).durable(durable);
    let mut written = fan_out(&state.nodes, required, call, read_flag);
    let result = match written.decide().await {
        Decision::Reached => Ok(Some(token)),
        _ => Err(written.outcome.no_quorum(Op::Acquire, key)),
    };
    in_flight.extend(written.detach(&state.background));
    (result, in_flight)
}

/// Wraps a confirmed acquisition in its guard, starting the watchdog if asked.
pub(super) fn hold(
    state: &Arc<ClientState>,
    plan: &Plan<'_>,
    holder: Holder,
    deadline: Instant,
    token: Option<u64>,
    in_flight: Vec<Stragglers>,
) -> LockGuard {
    let lease = Arc::new(Lease::new(
        state.clone(),
        plan.shape.clone(),
        holder,
        plan.ttl,
        deadline,
        token,
        in_flight,
    ));
    lease.register();
    if plan.watchdog {
        tokio::spawn(crate::hold::watchdog::run(
            lease.clone(),
            plan.ttl,
            plan.max_hold,
        ));
    }
    let owner = plan.owner.map(|o| {
        o.register(&lease);
        o.clone()
    });
    LockGuard::new(lease, owner)
}

/// Releases an attempt's entries on `nodes`, by plain EVAL (ordering invariant 5),
/// announcing only the nodes it gave back (see the release script).
async fn rollback(
    state: Arc<ClientState>,
    key: Shape,
    holder: Holder,
    nodes: Vec<usize>,
) -> Vec<std::result::Result<redis::Value, crate::error::NodeFailure>> {
    let call = key.release(holder.as_str(), Notice::Rollback);
    broadcast(&state.nodes, nodes, call, SendBy::Eval).await
}

#[cfg(test)]
mod tests {
    use super::rollback_targets;

    #[test]
    fn a_rollback_skips_the_nodes_that_took_nothing_but_not_a_written_arbiter() {
        // Node 1 refused, node 3 was never sent the request: neither took anything.
        assert_eq!(rollback_targets(5, &[1], &[3], None), vec![0, 2, 4]);
        // The arbiter (node 1) refused its second request, but its first may have run.
        assert_eq!(rollback_targets(5, &[1], &[3], Some(1)), vec![0, 1, 2, 4]);
        // Every node refused: nothing to give back.
        assert!(rollback_targets(3, &[2, 0, 1], &[], None).is_empty());
    }
}
