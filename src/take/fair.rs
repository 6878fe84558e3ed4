//! A fair request's client side (docs/DESIGN.md, "Fair lock"): its place among its client's
//! waiters and its name on the release channel, its standing (ticket and round), its claim of
//! a key a release of its client handed over, a new identity when cut off from a quorum, and
//! its ticket drawn in a round of its own. What runs on the nodes is in `family/fair.rs`; the
//! release's hand-off to a waiter of its own client, in `wakeup/handoff.rs`. The waiting loop
//! (`take/waiting.rs`) reaches all of it through [`Line`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::attempt::{attempt, fence_token, give_back, hold, verdict, Approach, Miss};
use super::plan::Plan;
use crate::error::{Error, Op, Result};
use crate::family::{Fair, Shape, Standing};
use crate::fanout::{broadcast, fan_out};
use crate::hold::guard::LockGuard;
use crate::rules::config::Config;
use crate::rules::holder::Holder;
use crate::rules::quorum::{self, Decision};
use crate::scripts::{Call, SendBy};
use crate::state::ClientState;
use crate::telemetry::AttemptEnd;
use crate::wakeup::handoff::{Grant, Registration};
use crate::wakeup::{Channel, Named, NoticedGrant};

/// A waiting fair request's place in line: among its client's waiters (for a release's
/// hand-off), on its key's release channel (for the grant notices naming it), and on the
/// nodes (its standing).
pub(crate) struct Line {
    /// Its ticket and round, which its attempts send.
    pub(crate) standing: Standing,
    registration: Registration,
    named: Option<Named>,
    /// The round of its latest try and when it was sent, if that try was an attempt: the
    /// short grants that answer it may be held from their notices (see [`Line::held_from_notices`]).
    last_attempt: Option<(u64, Instant)>,
}

/// The waiter id of a fair request (public: grant notices name it), for its span.
pub(crate) fn waiter(shape: &Shape) -> Option<&str> {
    match shape {
        Shape::Fair(f) => Some(&f.waiter),
        _ => None,
    }
}

impl Line {
    /// A waiting request's place in line, if it is a fair request: registered among its
    /// client's waiters at once, named on the release channel before its first pause.
    pub(crate) fn join(state: &ClientState, plan: &Plan<'_>) -> Option<Line> {
        let Shape::Fair(f) = &plan.shape else {
            return None;
        };
        Some(Line {
            // No attempt yet: the round is raised before each one (see `try_once`).
            standing: Standing {
                ticket: None,
                round: 0,
                draws: true,
            },
            registration: register(state, f, plan.ttl, &plan.ttl_ms),
            named: None,
            last_attempt: None,
        })
    }

    /// Names the request on its key's release `channel` (once the channel exists), and
    /// returns what wakes it besides the key's notices: a grant naming it, and the end of a
    /// short grant to the waiter before it.
    pub(crate) fn listen(
        &mut self,
        shape: &Shape,
        channel: Option<Arc<Channel>>,
    ) -> (Arc<Notify>, Arc<Notify>) {
        let slot = &self.registration.slot;
        if let (None, Some(channel), Shape::Fair(f)) = (&self.named, channel, shape) {
            tracing::trace!("named on the release channel");
            self.named = Some(channel.name(
                f.waiter.as_bytes(),
                slot.notify.clone(),
                slot.lapse.clone(),
                slot.noticed.clone(),
            ));
        }
        (slot.notify.clone(), slot.lapse.clone())
    }

    /// One try: the claim of a key a release of this client handed over, or an attempt (to
    /// every node: its ticket orders it among all waiters). Counts an attempt in `attempts`.
    pub(crate) async fn try_once(
        &mut self,
        state: &Arc<ClientState>,
        plan: &Plan<'_>,
        deadline: Instant,
        attempts: &mut u32,
    ) -> std::result::Result<LockGuard, Miss> {
        let released = state
            .handoff
            .after_local_releases(plan.shape.primary().bytes());
        // Bounded by the wait: a release's rounds are bounded by the node timeout anyway.
        let _ = tokio::time::timeout_at(deadline, released).await;
        let grant = self.registration.take_grant_or_attempt();
        if grant.is_none() {
            if let Some(guard) = self.held_from_notices(state, plan).await {
                return Ok(guard);
            }
        }
        // A new round for each attempt, and for each hand-off taken: an attempt claims a
        // hand-off value of an earlier round only, and a later hand-off's value differs from
        // one whose give-back (should the claim fail) may still land.
        self.standing.round += 1;
        self.last_attempt = None;
        if let (Some(grant), Shape::Fair(f)) = (grant, &plan.shape) {
            tracing::trace!("claiming the lock a release of this client handed over");
            // The release set the key to the request's hand-off value on the nodes it counted.
            let holder = f.handed_holder(grant.round);
            return claim(state, plan, holder, grant).await;
        }
        *attempts = attempts.saturating_add(1);
        // Taken before the attempt is sent: each node runs it later.
        self.last_attempt = Some((self.standing.round, Instant::now()));
        attempt(state, plan, Approach::All, &self.standing).await
    }

    /// Holds the lock from the notices of short grants by a quorum of nodes, without a claim
    /// (docs/DESIGN.md, "Fair lock"; "Grants held from their notices" in
    /// `family/lua/fair_line.lua`): one round trip from the release that freed the key.
    ///
    /// Only grants that answer this request's latest try, an attempt of round `r` sent at `t`,
    /// count. Each set the key to the request's hand-off value of round `r`, which no attempt
    /// of round `r` or earlier claims: none of this request's attempts, however late it
    /// lands, takes it over (and no rollback of one deletes it), and the request attempts no
    /// more once it holds. Each node's notice tells the node's ms `d` between running that
    /// attempt (after `t`) and the grant, so the grant was made no earlier than
    /// `t + d - drift(d)` by this client's clock, and its entry lasts its ms from then. The
    /// deadline is the quorum's latest such end (less the drift and the lock delay, as every
    /// deadline). The guard starts with the claim window's validity; its first renewal, sent
    /// at once in the background, gives it what is left of its TTL (see
    /// `LockGuard::renew_first_in_background`).
    ///
    /// `None` when no quorum of such grants leaves a validity, or the fencing token cannot be
    /// drawn: the next attempt then claims them as any short grant.
    async fn held_from_notices(
        &mut self,
        state: &Arc<ClientState>,
        plan: &Plan<'_>,
    ) -> Option<LockGuard> {
        let (round, sent) = self.last_attempt?;
        let Shape::Fair(f) = &plan.shape else {
            return None;
        };
        // Under durable votes a grant's notices are not durable votes: the waiter claims the
        // grant with an acquire of its own.
        if state.config.durable.is_some() {
            return None;
        }
        let config = &state.config;
        let noticed = self.registration.slot.noticed.of_round(round);
        let deadline = notices_deadline(config, sent, &noticed)?;
        config.validity(deadline, Instant::now())?;
        let (token, fencing) = match plan.fencing {
            true => fence_token(state, &plan.shape).await,
            false => (Ok(None), Vec::new()),
        };
        let Ok((token, validity)) = verdict(config, plan, sent, deadline, token, Instant::now())
        else {
            for stragglers in fencing {
                stragglers.settle().await;
            }
            return None;
        };
        self.last_attempt = None;
        state.counters.held_from_notices();
        tracing::debug!(
            ?validity,
            ?token,
            "held from the notices of a quorum's grants"
        );
        let guard = hold(
            state,
            plan,
            f.handed_holder(round),
            deadline,
            token,
            fencing,
        );
        guard.renew_first_in_background(plan.watchdog);
        Some(guard)
    }

    /// After a miss: leaves the line when cut off from a quorum (taking a new identity, and
    /// `withdraw` becomes its withdrawal), waits for a hand-off again, and draws a ticket
    /// when it has none (`None`: it joined the line).
    pub(crate) async fn after(
        &mut self,
        state: &ClientState,
        plan: &mut Plan<'_>,
        miss: Option<Miss>,
        withdraw: &mut Option<Call>,
    ) -> Option<Option<Miss>> {
        // A fair request cut off from a quorum (its nodes failed, not refused) leaves the line:
        // a place it kept with failing attempts would hold up the waiters behind it, on the
        // nodes it still reaches, for its whole wait. It goes on under a new identity (waiter
        // id and base) and draws a new ticket once a quorum answers again. The withdrawal is
        // waited for, but a part of it that timed out may still land later (on a connection
        // that was replaced meanwhile): it deletes whatever holds the old base, which is then
        // nothing any later attempt or grant of the request counts on.
        let cut_off = matches!(&miss, Some(Miss::Failed(Error::NoQuorum { .. })))
            && self.standing.ticket.is_some();
        if cut_off {
            if let Some(call) = plan.shape.withdraw() {
                broadcast(&state.nodes, 0..state.nodes.len(), call, SendBy::Eval).await;
            }
            if let Shape::Fair(f) = &mut plan.shape {
                *f = Fair::new(f.key.clone(), state.client_tag(), &state.config);
                self.standing.ticket = None;
                self.registration = register(state, f, plan.ttl, &plan.ttl_ms);
                self.named = None;
                tracing::debug!(waiter = %f.waiter, "cut off from a quorum: left the line");
            }
            // A give-up withdraws the new identity.
            *withdraw = plan.shape.withdraw();
        }
        // The attempt's rollback is written (and has run where the attempt was answered
        // yes), and a withdrawal has run: a release may now hand this request the lock. Not
        // before the withdrawal: a release in between could hand over a grant that the
        // withdrawal then deletes and passes on to the next waiter. A part of the rollback
        // still on its way deletes only the attempt's own value, and the attempt, landing
        // late, claims no hand-off value of its round.
        self.registration.waiting(self.standing.round);
        // A fair request refused without a ticket draws one and joins the line at once.
        match miss {
            Some(Miss::Contended(c)) if self.standing.ticket.is_none() => {
                let ticket = match (c.drawn, &plan.shape) {
                    (Some(ticket), _) => Ok(ticket),
                    (None, Shape::Fair(f)) => draw_ticket(state, f).await,
                    (None, _) => return Some(Some(Miss::Contended(c))),
                };
                match ticket {
                    Ok(ticket) => {
                        self.standing.ticket = Some(crate::failpoints::fair_ticket(ticket));
                        None
                    }
                    Err(e) => Some(Some(Miss::Failed(e))),
                }
            }
            miss => Some(miss),
        }
    }
}

/// The deadline of a hold from `noticed` short grants answering an attempt sent at `sent`: the
/// `required`-th latest of their ends (see [`Line::held_from_notices`]); `None` with fewer grants.
fn notices_deadline(config: &Config, sent: Instant, noticed: &[NoticedGrant]) -> Option<Instant> {
    let mut ends: Vec<Instant> = noticed
        .iter()
        .filter_map(|g| {
            // The node's clock keeps whole ms: the gap it measured may be 1 ms more than the
            // time that passed.
            let since = Duration::from_millis(g.since_ms.saturating_sub(1));
            let made = sent + quorum::trusted_for(since, quorum::drift(since, config.drift_factor));
            let lasts = Duration::from_millis(g.ms).checked_sub(config.lock_delay)?;
            Some(config.trusted_until(made, lasts))
        })
        .collect();
    ends.sort_unstable_by(|a, b| b.cmp(a));
    ends.get(config.required.checked_sub(1)?).copied()
}

/// The place of fair request `f` among its client's waiters.
fn register(state: &ClientState, f: &Fair, ttl: Duration, ttl_ms: &str) -> Registration {
    let grant_ms = ttl_ms.parse().unwrap_or(i64::MAX);
    state
        .handoff
        .register(f.key.bytes(), &f.waiter, ttl, grant_ms)
}

/// Takes the lock a release of this client handed to a waiting fair request (see
/// `wakeup::handoff`): its entries were set by the release, and its deadline runs from the
/// release's first send. With fencing, the token is drawn as after an attempt's quorum. When
/// the token cannot be drawn, or the validity is gone, the entries are rolled back as a failed
/// attempt's.
async fn claim(
    state: &Arc<ClientState>,
    plan: &Plan<'_>,
    holder: Holder,
    grant: Grant,
) -> std::result::Result<LockGuard, Miss> {
    let (token, fencing) = match plan.fencing {
        true => fence_token(state, &plan.shape).await,
        false => (Ok(None), Vec::new()),
    };
    let now = Instant::now();
    let error = match verdict(&state.config, plan, grant.sent, grant.deadline, token, now) {
        Ok((token, validity)) => {
            state.counters.attempt(AttemptEnd::Acquired);
            tracing::debug!(?validity, ?token, "handed over by a release");
            let in_flight = grant.in_flight.into_iter().chain(fencing).collect();
            return Ok(hold(state, plan, holder, grant.deadline, token, in_flight));
        }
        Err(error) => error,
    };
    for stragglers in fencing.into_iter().chain(grant.in_flight) {
        stragglers.settle().await;
    }
    state.counters.attempt(AttemptEnd::Failed);
    state.counters.rollback();
    let every = (0..state.nodes.len()).collect();
    give_back(state, &plan.shape, holder, every, u64::MAX).await;
    Err(Miss::Failed(error))
}

/// Draws a ticket for `fair`: `INCR` of the key's ticket counter on every
/// node, the largest answer of a quorum. The request's next attempt raises the counter to it
/// on the nodes it reaches and joins the line there; once a quorum answered that attempt,
/// every ticket drawn afterwards is larger (its quorum meets that attempt's in a node whose
/// counter is at least this ticket, and keeps it as long as the line is not empty), so a
/// request that started waiting later is served later.
async fn draw_ticket(state: &ClientState, fair: &Fair) -> Result<u64> {
    let (call, read) = fair.draw();
    let mut drawn = fan_out(&state.nodes, state.config.required, call, read);
    let decision = drawn.decide().await;
    // The increments still running only raise counters: nothing needs to follow them.
    drawn.detach(&state.background);
    match (
        decision,
        drawn.outcome.max_yes.and_then(|m| u64::try_from(m).ok()),
    ) {
        (Decision::Reached, Some(ticket)) => Ok(ticket),
        _ => Err(drawn.outcome.no_quorum(Op::Acquire, &fair.key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::quorum::Quorum;

    fn config(lock_delay: Duration) -> Config {
        Config {
            quorum: Quorum::Majority,
            required: 3,
            node_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(1),
            drift_factor: 0.01,
            retry_delay: Duration::from_millis(100),
            retry_jitter: Duration::ZERO,
            max_retries: None,
            wait_timeout: Duration::from_secs(10),
            min_validity: Duration::ZERO,
            watchdog_lease: Duration::from_secs(30),
            queue_lease: Duration::from_secs(30),
            lock_delay,
            pubsub: true,
            durable: None,
        }
    }

    fn grant(since_ms: u64, ms: u64) -> NoticedGrant {
        NoticedGrant {
            round: 2,
            since_ms,
            ms,
        }
    }

    #[test]
    fn a_notices_deadline_is_the_quorums_latest_end_from_the_attempts_send() {
        let sent = Instant::now();
        let plain = config(Duration::ZERO);
        // Each grant was made its gap (less 1 ms and the drift) after the send, and lasts its
        // ms (less the drift).
        let end = |since: u64, ms: u64| {
            let since = Duration::from_millis(since - 1);
            let made = sent + since - quorum::drift(since, 0.01);
            let lasts = Duration::from_millis(ms);
            made + lasts - quorum::drift(lasts, 0.01)
        };
        let noticed = [
            grant(100, 1_000),
            grant(5, 1_000),
            grant(300, 200),
            grant(0, 2_000),
        ];
        // The ends, latest first: (0, 2000), (100, 1000), (5, 1000), (300, 200): the third.
        assert_eq!(
            notices_deadline(&plain, sent, &noticed),
            Some(end(5, 1_000))
        );
        // Never later than the grant's own end counted from the send.
        assert!(end(5, 1_000) < sent + Duration::from_millis(5 + 1_000));
        // Fewer grants than the quorum: none.
        assert_eq!(notices_deadline(&plain, sent, &noticed[..2]), None);
        // The lock delay comes off each grant's ms; a grant shorter than it counts for nothing.
        let delayed = config(Duration::from_millis(500));
        let lasts = |ms: u64| Duration::from_millis(ms - 500);
        let made = |since: u64| {
            let since = Duration::from_millis(since - 1);
            sent + since - quorum::drift(since, 0.01)
        };
        assert_eq!(
            notices_deadline(&delayed, sent, &noticed),
            Some(made(5) + lasts(1_000) - quorum::drift(lasts(1_000), 0.01))
        );
        assert_eq!(notices_deadline(&delayed, sent, &noticed[1..]), None);
    }
}
