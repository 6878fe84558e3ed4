//! The client handle: acquire (one attempt and the waiting loop), the rollback of failed
//! attempts, and the counters behind [`Stats`].

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;
use tracing::Instrument;

use crate::builder::Builder;
use crate::config::check_duration;
use crate::error::{Error, Op, Result};
use crate::fanout::{broadcast, fan_out, read_acquire, read_flag, Outcome};
use crate::guard::LockGuard;
use crate::key::Key;
use crate::lease::{Lease, LostSignal};
use crate::ordering::{write_now_finish_later, Stragglers};
use crate::owner::Owner;
use crate::quorum::{self, Decision};
use crate::scripts::{Call, SendBy, ACQUIRE_FENCED, FENCE_MAX, RELEASE};
use crate::state::{ClientState, Stats};
use crate::wakeup::Subscription;

/// A client for locks held across N independent Redis masters (RedLock, or MultiLock with
/// [`Quorum::All`](crate::Quorum::All)).
///
/// Cheap to clone (an `Arc`); clones share connections and counters. The connections close
/// when the last clone and the last guard are dropped.
#[derive(Clone)]
pub struct QuorumLock {
    shared: Arc<ClientState>,
}

impl std::fmt::Debug for QuorumLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumLock")
            .field("nodes", &self.nodes())
            .field("quorum", &self.shared.config.quorum)
            .field("required", &self.shared.config.required)
            .finish()
    }
}

/// What one attempt ended with, short of a guard.
enum Miss {
    /// Other holders refused enough nodes; the smallest PTTL they reported.
    Contended(Option<Duration>),
    /// Nodes failed, or the quorum came too late.
    Failed(Error),
}

impl QuorumLock {
    /// Starts configuring a client.
    pub fn builder() -> Builder {
        Builder::default()
    }

    pub(crate) fn from_state(shared: ClientState) -> QuorumLock {
        QuorumLock {
            shared: Arc::new(shared),
        }
    }

    /// The configured nodes, passwords redacted.
    pub fn nodes(&self) -> Vec<String> {
        self.shared
            .nodes
            .iter()
            .map(|n| n.name().to_string())
            .collect()
    }

    /// How many nodes must confirm an operation.
    pub fn quorum_size(&self) -> usize {
        self.shared.config.required
    }

    /// A snapshot of this client's counters (shared by its clones).
    pub fn stats(&self) -> Stats {
        self.shared.snapshot()
    }

    /// Starts a request for `key` with per-request settings. Without [`ttl`](LockRequest::ttl)
    /// the lock is kept alive by the watchdog (a lease of the client's
    /// [`watchdog_lease`](Builder::watchdog_lease), renewed every third of it) until released.
    pub fn lock(&self, key: impl AsRef<[u8]>) -> LockRequest<'_> {
        LockRequest {
            client: self,
            owner: None,
            key: key.as_ref().to_vec(),
            lease: LeaseMode::Watchdog(None),
            max_hold: None,
            wait: None,
            fencing: false,
        }
    }

    /// A new reentrant owner (see [`Owner`]).
    pub fn owner(&self) -> Owner {
        Owner::new(self.clone())
    }

    /// Acquires `key` for a fixed `ttl` (no watchdog), waiting up to the configured wait time
    /// (default 10 s) while others hold it: woken by the holder's release notice, or retrying
    /// after a jittered delay.
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::InvalidTtl`]; [`Error::WaitTimeout`] when the lock stayed
    /// held by others; [`Error::NoQuorum`] or [`Error::ValidityExhausted`] when the last
    /// attempt failed for lack of nodes or time.
    ///
    /// # Cancel safety
    /// Cancel safe in effect: an attempt interrupted by cancellation leaves at most entries
    /// that expire with their TTL (no guard exists, so none is released); it never leaves a
    /// lock that is reported as held.
    pub async fn acquire(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        self.lock(key).ttl(ttl).acquire().await
    }

    /// One attempt to acquire `key` for a fixed `ttl`: `Ok(None)` when another holder has it.
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::InvalidTtl`]; [`Error::NoQuorum`] when too many nodes
    /// failed to tell; [`Error::ValidityExhausted`] when the quorum came too late.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(
        &self,
        key: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        self.lock(key).ttl(ttl).try_acquire().await
    }

    /// Runs `work` while holding `key` under the watchdog, and releases at the end.
    ///
    /// `work` gets the lock's [`LostSignal`] (for tasks it spawns); the future itself is
    /// dropped (cancelled) the moment the lock is lost. The result says whether the work
    /// completed within the lock or was cut off. See [`LockRequest::run`] for per-request
    /// settings.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), for taking the lock.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and releases the lock in the background.
    pub async fn with_lock<F, Fut, T>(&self, key: impl AsRef<[u8]>, work: F) -> Result<Scoped<T>>
    where
        F: FnOnce(LostSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lock(key).run(work).await
    }

    fn holder_value(&self, owner: Option<&Owner>) -> String {
        let nonce = uuid::Uuid::new_v4().simple();
        match owner {
            Some(o) => format!("{}:{}:{nonce}", self.shared.client_id, o.id()),
            None => nonce.to_string(),
        }
    }

    /// One attempt (docs/DESIGN.md, "Acquire"): fan out, tally, compute the validity, and roll back
    /// on every node when it is not a success.
    async fn attempt(&self, key: &Key, plan: &Plan<'_>) -> std::result::Result<LockGuard, Miss> {
        let shared = &self.shared;
        let config = &shared.config;
        let ttl = plan.ttl;
        let holder = self.holder_value(plan.owner);
        let ttl_ms = ttl.as_millis().to_string();
        let fence = plan.fencing.then(|| key.fence_key());
        let argv: [&[u8]; 2] = [holder.as_bytes(), ttl_ms.as_bytes()];
        let call = match &fence {
            Some(fence) => Call::with_keys(&ACQUIRE_FENCED, &[key.bytes(), fence], &argv),
            None => Call::set_if_absent("acquire", key.bytes(), argv[0], argv[1]),
        };
        shared.counters.attempts.fetch_add(1, Ordering::Relaxed);

        // Step 1: the validity is measured from before the first request is sent.
        let t0 = Instant::now();
        let mut fan = fan_out(&shared.nodes, config.required, call, read_acquire);
        let decision = fan.decide().await;
        let drift = quorum::drift(ttl, config.drift_factor);
        let outcome = &mut fan.outcome;

        let miss = match decision {
            Decision::Reached => {
                let (token, written) = match &fence {
                    Some(fence) => self.fence(key, fence, outcome.max_yes).await,
                    None => (Ok(None), None),
                };
                let elapsed = t0.elapsed();
                let error = match (token, quorum::validity(ttl, elapsed, drift)) {
                    (Ok(token), Some(v)) if v > config.min_validity => {
                        shared.counters.acquired.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(validity = ?v, ?token, ?elapsed, "acquired");
                        // Every reachable node should get the entry (so that one node that
                        // later forgets it cannot leave the lock on a bare quorum): the
                        // stragglers finish in the background, and the lease's next call
                        // settles them first (ordering invariant 4).
                        let in_flight = fan.detach().into_iter().chain(written).collect();
                        let deadline = t0 + quorum::trusted_for(ttl, drift);
                        return Ok(self.hold(key, holder, plan, deadline, token, in_flight));
                    }
                    (Err(e), _) => e,
                    _ => Error::ValidityExhausted {
                        key: key.to_string(),
                        elapsed,
                        ttl,
                    },
                };
                // Dropping the fan-out (below) stops the acquire's stragglers not yet sent; the
                // write-back's must not overtake the rollback either (ordering invariant 4).
                if let Some(written) = written {
                    written.settle().await;
                }
                Miss::Failed(error)
            }
            // Contention: with every refusal turned into a yes, the failed nodes alone would
            // not have prevented the quorum.
            _ if shared.nodes.len() - outcome.tally.failed() >= config.required => {
                Miss::Contended(outcome.hint)
            }
            _ => Miss::Failed(Error::NoQuorum {
                op: Op::Acquire,
                key: key.to_string(),
                confirmed: outcome.tally.yes(),
                required: config.required,
                refused: outcome.tally.refused(),
                failures: std::mem::take(&mut outcome.failures),
            }),
        };
        // Stops the requests not yet written; those written stay queued ahead of the rollback
        // on their connections (ordering invariant 5).
        drop(fan);
        match &miss {
            Miss::Contended(_) => shared.counters.contended.fetch_add(1, Ordering::Relaxed),
            Miss::Failed(_) => shared.counters.failed.fetch_add(1, Ordering::Relaxed),
        };
        // Step 5: roll back on every node, also those that failed or timed out: they may have
        // applied the acquire. The holder value is unique to this attempt, so a late rollback
        // can never delete a later attempt's entry.
        // Written before a retry can be sent (ordering invariant 5): otherwise the retry could
        // be refused by this attempt's own entry.
        write_now_finish_later(rollback(self.shared.clone(), key.clone(), holder));
        Err(miss)
    }

    /// The fencing token of an acquisition (docs/DESIGN.md, "Fencing tokens"): the largest
    /// counter among the confirming nodes, written back (`max`) to a quorum before the guard
    /// exists, so that any later quorum sees it and hands out a larger one. Returns the
    /// write-back's requests still in flight, for the lease to order before its next call.
    async fn fence(
        &self,
        key: &Key,
        fence: &[u8],
        max: Option<i64>,
    ) -> (Result<Option<u64>>, Option<Stragglers>) {
        let shared = &self.shared;
        let no_quorum = |outcome: Option<&Outcome>| Error::NoQuorum {
            op: Op::Acquire,
            key: key.to_string(),
            confirmed: outcome.map_or(0, |o| o.tally.yes()),
            required: shared.config.required,
            refused: outcome.map_or(0, |o| o.tally.refused()),
            failures: outcome.map_or_else(Vec::new, |o| o.failures.clone()),
        };
        let token = max.and_then(|m| u64::try_from(m).ok()).filter(|&t| t > 0);
        let Some(token) = token else {
            return (Err(no_quorum(None)), None);
        };
        let token_arg = token.to_string();
        let call = Call::new(&FENCE_MAX, fence, &[token_arg.as_bytes()]);
        let mut written = fan_out(&shared.nodes, shared.config.required, call, read_flag);
        let result = if written.decide().await == Decision::Reached {
            Ok(Some(token))
        } else {
            Err(no_quorum(Some(&written.outcome)))
        };
        (result, written.detach())
    }

    /// Wraps a confirmed acquisition in its guard, starting the watchdog if asked.
    fn hold(
        &self,
        key: &Key,
        holder: String,
        plan: &Plan<'_>,
        deadline: Instant,
        token: Option<u64>,
        in_flight: Vec<Stragglers>,
    ) -> LockGuard {
        let lease = Arc::new(Lease::new(
            key.clone(),
            holder,
            plan.ttl,
            deadline,
            token,
            in_flight,
        ));
        if plan.watchdog {
            tokio::spawn(crate::watchdog::run(
                self.shared.clone(),
                lease.clone(),
                plan.ttl,
                plan.max_hold,
            ));
        }
        let owner = plan.owner.map(|o| {
            o.inner().register(&lease);
            o.inner().clone()
        });
        LockGuard::new(self.shared.clone(), lease, owner)
    }

    /// A reentrant owner's nested acquire: joins its live hold on the key, if any.
    fn reenter(&self, key: &Key, plan: &Plan<'_>) -> Option<LockGuard> {
        let owner = plan.owner?;
        let lease = owner.inner().reenter(key.bytes())?;
        Some(LockGuard::new(
            self.shared.clone(),
            lease,
            Some(owner.inner().clone()),
        ))
    }

    /// Checks a request's key and lease.
    fn prepare<'r>(&self, req: &LockRequest<'r>) -> Result<(Key, Plan<'r>)> {
        let config = &self.shared.config;
        let key = Key::new(&req.key)?;
        let (ttl, watchdog) = match req.lease {
            LeaseMode::Fixed(ttl) => (ttl, false),
            LeaseMode::Watchdog(lease) => (lease.unwrap_or(config.watchdog_lease), true),
        };
        let ttl = config.check_ttl(ttl)?;
        if let Some(max_hold) = req.max_hold {
            check_duration("max_hold", max_hold)?;
        }
        if let Some(wait) = req.wait {
            check_duration("wait", wait)?;
        }
        let plan = Plan {
            ttl,
            watchdog,
            fencing: req.fencing,
            max_hold: req.max_hold,
            owner: req.owner,
        };
        Ok((key, plan))
    }

    async fn run_once(&self, req: LockRequest<'_>) -> Result<Option<LockGuard>> {
        let (key, plan) = self.prepare(&req)?;
        let span = tracing::debug_span!("acquire", key = %key, ttl = ?plan.ttl);
        async {
            if let Some(guard) = self.reenter(&key, &plan) {
                return Ok(Some(guard));
            }
            match self.attempt(&key, &plan).await {
                Ok(guard) => Ok(Some(guard)),
                Err(Miss::Contended(_)) => Ok(None),
                Err(Miss::Failed(e)) => Err(e),
            }
        }
        .instrument(span)
        .await
    }

    async fn run_waiting(&self, req: LockRequest<'_>) -> Result<LockGuard> {
        let (key, plan) = self.prepare(&req)?;
        let wait = req.wait.unwrap_or(self.shared.config.wait_timeout);
        let span = tracing::debug_span!("acquire", key = %key, ttl = ?plan.ttl, ?wait);
        self.wait_loop(key, plan, wait).instrument(span).await
    }

    /// Attempts until success or the wait ends. Between attempts a waiter sleeps until the
    /// key's release notice, or until min(the holder's PTTL, the jittered retry delay).
    async fn wait_loop(&self, key: Key, plan: Plan<'_>, wait: Duration) -> Result<LockGuard> {
        let config = &self.shared.config;
        let start = Instant::now();
        let deadline = start + wait;
        let mut attempts: u32 = 0;
        let mut subscription: Option<Subscription> = None;
        let mut quick_retries = 0;
        // Where this client already has waiters on the key, wait for a turn before the first
        // attempt (local FIFO): racing them would split the next hand-off's votes.
        let mut wait_first = false;
        if let Some(wakeups) = &self.shared.wakeups {
            subscription = wakeups.join_line(key.release_channel());
            wait_first = subscription.is_some();
        }
        loop {
            if let Some(guard) = self.reenter(&key, &plan) {
                return Ok(guard);
            }
            // Listen before the attempt, so that a release between the attempt and the wait
            // below is not missed.
            let channel = subscription.as_ref().map(|s| s.channel().clone());
            let mut notified = pin!(channel.as_ref().map(|c| c.notify().notified()));
            if let Some(n) = notified.as_mut().as_pin_mut() {
                n.enable();
            }
            let (error, hint) = if wait_first {
                wait_first = false;
                (None, None)
            } else {
                attempts = attempts.saturating_add(1);
                match self.attempt(&key, &plan).await {
                    Ok(guard) => return Ok(guard),
                    Err(Miss::Contended(hint)) => (None, hint),
                    Err(Miss::Failed(e)) => (Some(e), None),
                }
            };
            let now = Instant::now();
            let retries_left = config.max_retries.is_none_or(|max| attempts <= max);
            // Out of time or retries, once at least one attempt was made.
            if (now >= deadline || !retries_left) && attempts > 0 {
                return Err(error.unwrap_or_else(|| Error::WaitTimeout {
                    key: key.to_string(),
                    waited: now - start,
                    attempts,
                }));
            }
            if error.is_none() && subscription.is_none() {
                if let Some(wakeups) = &self.shared.wakeups {
                    let (sub, confirmed) = wakeups.join(key.release_channel().to_vec()).await;
                    tracing::debug!(confirmed, "subscribed to release notices");
                    subscription = Some(sub);
                    // Try again at once: a release before the subscription was active sent a
                    // notice nobody heard.
                    continue;
                }
            }
            let mut delay = config.retry_delay + jitter(config.retry_jitter);
            if let Some(hint) = hint {
                // The holder's key expires by then: no point sleeping past it.
                delay = delay.min(hint);
            }
            if error.is_none() && quick_retries > 0 {
                // Woken by release notices, but the attempt lost (another client raced for the
                // freed nodes, or a split vote): try again in a moment rather than waiting
                // for notices that, for this release, already came.
                quick_retries -= 1;
                delay = delay.min(QUICK_RETRY * (1 << (QUICK_RETRIES - 1 - quick_retries)));
            }
            let sleep = tokio::time::sleep_until((now + delay).min(deadline));
            match notified.as_mut().as_pin_mut() {
                Some(n) => tokio::select! {
                    () = n => {
                        self.shared.counters.woken.fetch_add(1, Ordering::Relaxed);
                        quick_retries = QUICK_RETRIES;
                    }
                    () = sleep => {}
                },
                None => sleep.await,
            }
        }
    }
}

/// After a wake-up, up to this many contended attempts are retried after `QUICK_RETRY`,
/// doubling: another client may have raced for the nodes the release freed.
const QUICK_RETRIES: u32 = 3;
const QUICK_RETRY: Duration = Duration::from_millis(1);

/// Releases an attempt's entries on every node, by plain EVAL (ordering invariant 5),
/// announcing only the nodes it gave back (see the release script).
async fn rollback(shared: Arc<ClientState>, key: Key, holder: String) {
    let call = Call::new(
        &RELEASE,
        key.bytes(),
        &[holder.as_bytes(), key.release_channel(), b"2"],
    );
    broadcast(&shared.nodes, 0..shared.nodes.len(), call, SendBy::Eval).await;
}

fn jitter(max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

/// How a request's lock is kept.
#[derive(Debug, Clone, Copy)]
enum LeaseMode {
    /// A fixed TTL; it expires unless extended.
    Fixed(Duration),
    /// Renewed by the watchdog; the lease length, or the client's default.
    Watchdog(Option<Duration>),
}

/// A checked request.
struct Plan<'a> {
    ttl: Duration,
    watchdog: bool,
    fencing: bool,
    max_hold: Option<Duration>,
    owner: Option<&'a Owner>,
}

/// What [`QuorumLock::with_lock`] and [`LockRequest::run`] report.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scoped<T> {
    /// The work completed while the lock was held.
    Completed(T),
    /// The lock was lost; the work was cut off (dropped) at that moment.
    Lost,
}

impl<T> Scoped<T> {
    /// The work's result, if it completed.
    pub fn completed(self) -> Option<T> {
        match self {
            Scoped::Completed(v) => Some(v),
            Scoped::Lost => None,
        }
    }
}

/// A request for one lock, with settings that override the client's defaults.
#[must_use]
pub struct LockRequest<'a> {
    client: &'a QuorumLock,
    owner: Option<&'a Owner>,
    key: Vec<u8>,
    lease: LeaseMode,
    max_hold: Option<Duration>,
    wait: Option<Duration>,
    fencing: bool,
}

impl<'a> LockRequest<'a> {
    /// A fixed TTL: the lock expires after it unless extended or released; no watchdog.
    /// Defaults to none (the watchdog keeps the lock).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.lease = LeaseMode::Fixed(ttl);
        self
    }

    /// The lease: `Some(ttl)` is [`ttl`](Self::ttl); `None` keeps the lock with the watchdog
    /// and the client's [`watchdog_lease`](Builder::watchdog_lease). Defaults to `None`.
    pub fn lease(mut self, lease: Option<Duration>) -> Self {
        self.lease = match lease {
            Some(ttl) => LeaseMode::Fixed(ttl),
            None => LeaseMode::Watchdog(None),
        };
        self
    }

    /// Keeps the lock with the watchdog, renewing a lease of `lease` every third of it.
    /// Defaults to the client's [`watchdog_lease`](Builder::watchdog_lease) (30 s).
    pub fn watchdog(mut self, lease: Duration) -> Self {
        self.lease = LeaseMode::Watchdog(Some(lease));
        self
    }

    /// Stops the watchdog's renewals once the lock has been held this long; it then expires
    /// at the end of its current lease. Defaults to none (renewed until released).
    pub fn max_hold(mut self, max: Duration) -> Self {
        self.max_hold = Some(max);
        self
    }

    /// How long [`acquire`](Self::acquire) keeps trying. Defaults to the client's
    /// [`wait_timeout`](Builder::wait_timeout) (10 s).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Hands out a fencing token with the lock ([`LockGuard::fencing_token`]): strictly
    /// increasing across successive holders of the key, for storage that rejects writes
    /// carrying an older token. Costs one more round trip (the token is written back to a
    /// quorum before the guard is returned). Defaults to `false`.
    pub fn fencing(mut self, enabled: bool) -> Self {
        self.fencing = enabled;
        self
    }

    pub(crate) fn owner(mut self, owner: &'a Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Acquires the lock, waiting while others hold it. See [`QuorumLock::acquire`].
    ///
    /// # Errors
    /// As [`QuorumLock::acquire`].
    ///
    /// # Cancel safety
    /// As [`QuorumLock::acquire`].
    pub async fn acquire(self) -> Result<LockGuard> {
        self.client.run_waiting(self).await
    }

    /// One attempt; `Ok(None)` when another holder has the lock. See
    /// [`QuorumLock::try_acquire`].
    ///
    /// # Errors
    /// As [`QuorumLock::try_acquire`].
    ///
    /// # Cancel safety
    /// As [`QuorumLock::acquire`].
    pub async fn try_acquire(self) -> Result<Option<LockGuard>> {
        self.client.run_once(self).await
    }

    /// Acquires the lock (waiting), runs `work` while holding it, and releases it. See
    /// [`QuorumLock::with_lock`].
    ///
    /// # Errors
    /// As [`QuorumLock::acquire`], for taking the lock.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and releases the lock in the background.
    pub async fn run<F, Fut, T>(self, work: F) -> Result<Scoped<T>>
    where
        F: FnOnce(LostSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire().await?;
        let signal = guard.lost_signal();
        let work = work(signal.clone());
        let outcome = tokio::select! {
            // Loss first: work that finishes in the same instant the lock is lost is reported
            // as cut off.
            biased;
            () = signal.wait() => Scoped::Lost,
            value = work => Scoped::Completed(value),
        };
        if let Err(e) = guard.release().await {
            tracing::warn!(error = %e, "release after scoped work was not confirmed");
        }
        Ok(outcome)
    }
}
