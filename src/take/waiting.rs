//! Waiting for a lock: attempts until one succeeds or the wait ends, sleeping in between
//! until a release notice, a grant or the backoff's pause (docs/DESIGN.md, "Waiting" and
//! "Fair lock"). Each kind's part comes through the seam of `family::Kind`; a fair request's
//! place in line, through [`Line`] (`take/fair.rs`).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use super::attempt::{attempt, reenter, Approach, Miss};
use super::fair::{self, Line};
use super::plan::{plan, Plan, Spec};
use crate::error::{Error, Result};
use crate::fanout::broadcast;
use crate::fanout::ordering::write_from_drop;
use crate::hold::guard::LockGuard;
use crate::hold::lease::Lease;
use crate::rules::backoff::Backoff;
use crate::scripts::{Call, SendBy};
use crate::state::ClientState;
use crate::telemetry::{self, AcquireEnd, Started};
use crate::wakeup::courtesy::COURTESY;
use crate::wakeup::{Channel, Waiter};

/// Attempts until success or the wait ends. Between attempts the waiter sleeps until the key's
/// release notice or its [`Backoff`] pause.
pub(crate) async fn waiting(state: &Arc<ClientState>, spec: Spec<'_>) -> Result<LockGuard> {
    let mut plan = plan(state, spec)?;
    // What a read-write request is, for the report of a wait that ended (see below).
    let wanted = plan.shape.kind().rw_side();
    let span = tracing::debug_span!("acquire", key = %plan.shape, ttl = ?plan.ttl, wait = ?plan.wait, waiter = fair::waiter(&plan.shape));
    let started = Started::now();
    let mut result = Waiting::new(state, &mut plan).run().instrument(span).await;
    // A read-write request whose wait ended while its own task holds a lock of the key that
    // conflicts (read then write, write then read or write, or a second read lock behind a
    // writer that waits for the first) waited for itself: said so, naming the locks, rather
    // than as a busy lock. Checked only when the wait ended: a guard moved to another task,
    // or another future of the task, may well end its hold before that.
    if let (Err(Error::WaitTimeout { .. }), Some(wanted)) = (&result, wanted) {
        let key = plan.shape.primary();
        if let Some(held) = Lease::rw_held_by_current_task(state, key.bytes()) {
            result = Err(Error::WaitsForItself {
                key: key.to_string(),
                held,
                wanted,
            });
        }
    }
    let end = match &result {
        Ok(_) => AcquireEnd::Acquired,
        Err(Error::WaitTimeout { .. }) => AcquireEnd::Timeout,
        Err(_) => AcquireEnd::Failed,
    };
    telemetry::acquire_ended(started, end);
    result
}

/// A waiting writer that gives up takes back its pending mark, so that readers need not wait
/// for it to expire, and a fair waiter its place in line: when its request fails, and also when its future is dropped (a timeout
/// around it, an aborted task), as long as a runtime is there to send it.
struct Withdraw<'a> {
    state: &'a Arc<ClientState>,
    call: Option<Call>,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let Some(call) = self.call.take() else {
            return;
        };
        let state = self.state.clone();
        write_from_drop(&self.state.background, async move {
            broadcast(&state.nodes, 0..state.nodes.len(), call, SendBy::Eval).await;
        });
    }
}

/// A waiting request between its attempts.
struct Waiting<'a, 'p> {
    state: &'a Arc<ClientState>,
    plan: &'a mut Plan<'p>,
    start: Instant,
    deadline: Instant,
    backoff: Backoff,
    /// A fair request's place in line (dropped before the waiters below).
    line: Option<Line>,
    /// One waiter per key: a multi-key lock listens to the release channel of every key of
    /// its set, as any of them may be the one that blocked it.
    waiters: Vec<Waiter>,
    attempts: u32,
    /// An attempt of this wait met another holder: the next ones ask the key's arbiter first
    /// (see `take::arbiter`) while the waiter is woken by release notices.
    lost: bool,
    /// The latest pause did not run its whole retry delay: it ended on a notice, a quick retry
    /// after one, or the waiter's first subscription (when it attempts again at once). Other
    /// clients' waiters may be racing for the key. A pause that ran its whole retry delay
    /// heard no release: the next attempt asks every node, so that an entry left on the
    /// arbiter alone (a cancelled attempt, a crashed client) keeps nobody out while the other
    /// nodes are free.
    heard: bool,
    /// What a request that gives up takes back (sent when the wait is dropped unless it got
    /// the lock).
    withdraw: Withdraw<'a>,
    /// The channel whose release notice ended the latest pause, if one did: an arbiter's
    /// refusal asks it about that release (see `Channel::refused_by`).
    woken_by: Option<Arc<Channel>>,
}

/// What a waiter listens to between two attempts: enabled before the attempt, so that a
/// notice that comes while it runs is not missed.
struct Listening {
    /// A release notice of any of its keys, or a grant naming this fair request.
    notices: Vec<Pin<Box<OwnedNotified>>>,
    /// The keys' channels, in the order of the first of `notices`.
    channels: Vec<Arc<Channel>>,
    /// The end of the claim window of a short grant to the fair waiter before this one: the
    /// key may be free then, and this waiter first (see `wakeup`).
    lapse: Option<Pin<Box<OwnedNotified>>>,
}

/// What comes after an attempt that missed.
enum Next {
    /// Attempt again at once (a fair request just joined the line, or a key's channel was just
    /// subscribed).
    Attempt,
    /// Pause, then attempt again.
    Pause {
        /// The attempt failed (rather than met another holder).
        failed: bool,
        /// The smallest PTTL another holder reported.
        hint: Option<Duration>,
    },
}

impl<'a, 'p> Waiting<'a, 'p> {
    fn new(state: &'a Arc<ClientState>, plan: &'a mut Plan<'p>) -> Self {
        let config = &state.config;
        let start = Instant::now();
        let waiters = plan
            .shape
            .keys()
            .iter()
            .map(|k| Waiter::new(state.wakeups.as_ref(), k.release_channel()))
            .collect();
        let line = Line::join(state, plan);
        let withdraw = Withdraw {
            state,
            call: plan.shape.withdraw(),
        };
        // A mutex this client just released while others waited: they go first (see
        // `Courtesy`).
        let courtesy =
            plan.shape.kind().courteous() && state.courtesy.owed(plan.shape.primary().bytes());
        Waiting {
            state,
            start,
            deadline: start + plan.wait,
            plan,
            backoff: Backoff::new(config.retry_delay, config.retry_jitter),
            waiters,
            line,
            attempts: 0,
            lost: courtesy,
            heard: courtesy,
            withdraw,
            woken_by: None,
        }
    }

    /// Attempts until one succeeds, the wait ends, or the retries run out.
    async fn run(mut self) -> Result<LockGuard> {
        if self.lost {
            self.let_others_go_first().await;
        }
        loop {
            if let Some(guard) = reenter(self.plan) {
                self.withdraw.call = None;
                return Ok(guard);
            }
            let listening = self.listen();
            let miss = match self.try_once().await {
                Ok(guard) => {
                    // The lock is held: its release takes back the writer's mark or the fair
                    // request's place.
                    self.withdraw.call = None;
                    return Ok(guard);
                }
                Err(miss) => miss,
            };
            let miss = self.after(miss).await;
            match self.next(miss)? {
                Next::Attempt => continue,
                Next::Pause { failed, hint } => self.pause(listening, failed, hint).await?,
            }
        }
    }

    /// A mutex this client just released while other clients waited (see `Courtesy`):
    /// pauses [`COURTESY`] (never past the wait's end) before its first attempt, which then
    /// asks the key's arbiter.
    async fn let_others_go_first(&mut self) {
        tracing::trace!("just released with others waiting: lets them go first");
        tokio::time::sleep_until((Instant::now() + COURTESY).min(self.deadline)).await;
    }

    /// Names a fair request on its key's channel (once the channel exists), and listens for
    /// every notice that may end the pause after the coming attempt.
    fn listen(&mut self) -> Listening {
        let channel = self.waiters[0].channel();
        let line = self
            .line
            .as_mut()
            .map(|line| line.listen(&self.plan.shape, channel));
        let enabled = |notify: &Arc<Notify>| {
            let mut n = Box::pin(notify.clone().notified_owned());
            n.as_mut().enable();
            n
        };
        let channels: Vec<Arc<Channel>> = self.waiters.iter().filter_map(Waiter::channel).collect();
        Listening {
            notices: channels
                .iter()
                .map(|c| enabled(c.notify()))
                .chain(line.as_ref().map(|(granted, _)| enabled(granted)))
                .collect(),
            channels,
            lapse: line.as_ref().map(|(_, lapse)| enabled(lapse)),
        }
    }

    /// One try: an attempt, a fair request's try (see [`Line::try_once`]), or nothing when a
    /// release notice gave another waiter of this client the first turn. `Err(None)` for a
    /// turn left to another waiter.
    async fn try_once(&mut self) -> std::result::Result<LockGuard, Option<Miss>> {
        let (state, plan) = (self.state, &*self.plan);
        // Every waiter's turn is taken (not just the first found). A fair request does not
        // wait for its turn among its client's waiters: its ticket orders it among all.
        let mut turn_first = false;
        for waiter in &mut self.waiters {
            turn_first |= waiter.take_turn_first();
        }
        if let Some(line) = &mut self.line {
            return line
                .try_once(state, plan, self.deadline, &mut self.attempts)
                .await
                .map_err(Some);
        }
        if turn_first {
            return Err(None);
        }
        self.attempts = self.attempts.saturating_add(1);
        let approach = match self.lost && self.heard {
            true => Approach::Ordered,
            false => Approach::All,
        };
        let result = attempt(state, plan, approach, &Default::default()).await;
        self.lost |= matches!(result, Err(Miss::Contended(_)));
        result.map_err(Some)
    }

    /// After a miss, a fair request's part (see [`Line::after`]). `None` for a fair request
    /// that just joined the line.
    async fn after(&mut self, miss: Option<Miss>) -> Option<Option<Miss>> {
        match &mut self.line {
            Some(line) => {
                line.after(self.state, self.plan, miss, &mut self.withdraw.call)
                    .await
            }
            None => Some(miss),
        }
    }

    /// What follows a miss: the end of the wait (its error), attempting again at once, or a
    /// pause. `None` for a fair request that just joined the line.
    fn next(&mut self, miss: Option<Option<Miss>>) -> Result<Next> {
        let Some(miss) = miss else {
            return Ok(Next::Attempt);
        };
        let retries_left = (self.state.config.max_retries).is_none_or(|max| self.attempts <= max);
        let (error, hint) = match miss {
            Some(Miss::Failed(e)) => (Some(e), None),
            Some(Miss::Contended(c)) => {
                // A fair request whose attempt raced a change of holder, or whose rollback
                // gave the key straight back to it, retries quickly: nobody but its next
                // attempt claims a key granted to it, and the grant's notices may have come
                // (and been counted) while it was attempting.
                if c.partly && self.line.is_some() {
                    self.backoff.woken();
                }
                // Refused by the key's arbiter: another waiter has its vote for this release
                // and will hold the key (its release wakes this waiter) or, if its attempt
                // fails, retry at once itself. Quick retries here only ask the arbiter again
                // while the winner holds: 3 more refused attempts per client and release.
                // Unless the release that woke this waiter had not reached the arbiter yet (a
                // release returns at a quorum): the arbiter's own notice of it, when it
                // comes, then wakes the waiter again (see `Channel::refused_by`).
                // The channel asked is the one whose notice woke this waiter: a multi-key
                // waiter's release may have come on any of its keys.
                if let Some(arbiter) = c.by_arbiter {
                    let channel = self
                        .woken_by
                        .clone()
                        .or_else(|| self.waiters.first().and_then(Waiter::channel));
                    self.backoff.lost_the_race();
                    if channel.is_some_and(|channel| channel.refused_by(arbiter)) {
                        tracing::trace!(arbiter, "the release has not reached the arbiter yet");
                    }
                }
                (None, c.hint)
            }
            None => (None, None),
        };
        // Out of time or retries, once at least one attempt was made.
        if (Instant::now() >= self.deadline || !retries_left) && self.attempts > 0 {
            return Err(error.unwrap_or_else(|| self.timed_out()));
        }
        Ok(Next::Pause {
            failed: error.is_some(),
            hint,
        })
    }

    /// The wait ran out.
    fn timed_out(&self) -> Error {
        Error::WaitTimeout {
            key: self.plan.shape.to_string(),
            waited: self.start.elapsed(),
            attempts: self.attempts,
        }
    }

    /// Pauses until a notice, the end of a short grant before this fair request, or the
    /// backoff's pause, never past the wait's end. A contended waiter first subscribes every
    /// key's channel it has not yet subscribed, and attempts again at once when it did; the
    /// wait ends if that takes it past its end.
    async fn pause(
        &mut self,
        mut listening: Listening,
        failed: bool,
        hint: Option<Duration>,
    ) -> Result<()> {
        let now = Instant::now();
        let config = &self.state.config;
        self.woken_by = None;
        if !failed {
            // Every key's channel at once (each subscription waits at most the node timeout
            // for its nodes), and never past the wait's end.
            let subscribing =
                futures::future::join_all(self.waiters.iter_mut().map(|w| w.subscribe()));
            match tokio::time::timeout_at(self.deadline, subscribing).await {
                Ok(subscribed) if subscribed.contains(&true) => {
                    self.heard = true;
                    return Ok(());
                }
                Ok(_) => {}
                Err(_) => return Err(self.timed_out()),
            }
        }
        let mut pause = self.backoff.pause(!failed, hint, rand::random());
        if self.plan.shape.keeps_a_place() {
            // A fair waiter renews its place in line, and a waiting writer its pending mark,
            // with each attempt: both last a queue lease.
            pause = pause.min(config.queue_lease / 3);
        }
        let sleep = tokio::time::sleep_until((now + pause).min(self.deadline));
        let counters = &self.state.counters;
        // A quick retry (shorter than the retry delay) follows a notice.
        self.heard = pause < config.retry_delay;
        if listening.notices.is_empty() {
            sleep.await;
            counters.wakeup(false);
            return Ok(());
        }
        let notice = futures::future::select_all(listening.notices.iter_mut().map(|n| n.as_mut()));
        let lapse = async {
            match &mut listening.lapse {
                Some(n) => n.as_mut().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ((), woke, _) = notice => {
                tracing::trace!("woken by a notice");
                self.woken_by = listening.channels.get(woke).cloned();
                counters.wakeup(true);
                self.backoff.woken();
                self.heard = true;
            }
            // One attempt, with no quick retries: the waiter before this one most likely
            // claimed its grant.
            () = lapse => {
                tracing::trace!("woken at the end of a short grant before this waiter");
                counters.wakeup(true);
                self.heard = true;
            }
            () = sleep => {
                tracing::trace!(?pause, "woken by the timer");
                counters.wakeup(false);
            }
        }
        Ok(())
    }
}
