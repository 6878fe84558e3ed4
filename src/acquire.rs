//! Taking a lock: one attempt (fan-out, validity, fencing token, rollback) and the waiting
//! loop around it (docs/DESIGN.md, "Acquire", "Fencing tokens" and "Waiting").

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::config::check_duration;
use crate::error::{Error, Op, Result};
use crate::fair::Grant;
use crate::fanout::{broadcast, fan_out, granted_to, read_counter, read_flag};
use crate::guard::LockGuard;
use crate::key::Key;
use crate::lease::Lease;
use crate::ordering::{write_now_finish_later, Stragglers};
use crate::quorum::{self, Decision};
use crate::reentry::HoldTable;
use crate::scripts::{Call, SendBy, TICKET_DRAW};
use crate::shape::{Fair, Notice, Shape};
use crate::state::ClientState;
use crate::telemetry::{self, AcquireEnd, AttemptEnd, Started};
use crate::wakeup::Waiter;

/// How a request's lock is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeaseMode {
    /// A fixed TTL; it expires unless extended.
    Fixed(Duration),
    /// Renewed by the watchdog; the lease length, or the client's default.
    Watchdog(Option<Duration>),
}

/// What a request asks for, as the caller named it (checked into a [`Shape`]).
#[derive(Clone)]
pub(crate) enum Target {
    /// One key (the mutex).
    Key(Vec<u8>),
    /// Several keys taken as one.
    Keys(Vec<Vec<u8>>),
    /// A permit of a semaphore; `checked: false` skips the quorum check (test kit only).
    Permit {
        key: Vec<u8>,
        permits: u32,
        checked: bool,
    },
    /// A read lock of the read-write lock on a key.
    Read(Vec<u8>),
    /// The write lock of the read-write lock on a key.
    Write(Vec<u8>),
    /// The fair lock on a key.
    Fair(Vec<u8>),
}

// Keys shown as lossy UTF-8, as a lock request always showed its key.
impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lossy = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
        match self {
            Target::Key(key) => write!(f, "{:?}", lossy(key)),
            Target::Keys(keys) => f
                .debug_list()
                .entries(keys.iter().map(|k| lossy(k)))
                .finish(),
            Target::Permit { key, permits, .. } => f
                .debug_struct("Permit")
                .field("key", &lossy(key))
                .field("permits", permits)
                .finish(),
            Target::Read(key) => f.debug_tuple("Read").field(&lossy(key)).finish(),
            Target::Write(key) => f.debug_tuple("Write").field(&lossy(key)).finish(),
            Target::Fair(key) => f.debug_tuple("Fair").field(&lossy(key)).finish(),
        }
    }
}

/// A request's settings as the caller gave them (see [`LockRequest`](crate::LockRequest)).
pub(crate) struct Spec<'a> {
    pub(crate) target: Target,
    pub(crate) lease: LeaseMode,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) wait: Option<Duration>,
    pub(crate) fencing: bool,
    pub(crate) owner: Option<&'a Arc<HoldTable>>,
}

/// A checked request.
struct Plan<'a> {
    shape: Shape,
    ttl: Duration,
    watchdog: bool,
    fencing: bool,
    max_hold: Option<Duration>,
    wait: Duration,
    owner: Option<&'a Arc<HoldTable>>,
}

/// What a contended attempt learned.
struct Contention {
    /// The smallest PTTL another holder reported.
    hint: Option<Duration>,
    /// A fair request's ticket, when a quorum of refusals drew it.
    drawn: Option<u64>,
    /// Some nodes said yes (the attempt raced a change of holder: a release, a grant), or a
    /// fair request's rollback gave the key back to it.
    partly: bool,
}

/// What one attempt ended with, short of a guard.
enum Miss {
    /// Other holders refused enough nodes.
    Contended(Contention),
    /// Nodes failed, or the quorum came too late.
    Failed(Error),
}

/// One attempt: `Ok(None)` when another holder has the lock.
pub(crate) async fn once(state: &Arc<ClientState>, spec: Spec<'_>) -> Result<Option<LockGuard>> {
    let mut plan = plan(state, spec)?;
    // A single attempt does not wait, so it leaves no pending-writer mark behind to keep
    // readers out.
    // Nor does it draw a fair lock's ticket: it never joins the line.
    match &mut plan.shape {
        Shape::Write { waiter, .. } => *waiter = None,
        Shape::Fair(fair) => fair.draws = false,
        _ => {}
    }
    let span = tracing::debug_span!("acquire", key = %plan.shape, ttl = ?plan.ttl);
    let started = Started::now();
    let result = async {
        if let Some(guard) = reenter(&plan) {
            return Ok(Some(guard));
        }
        match attempt(state, &plan).await {
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

/// Attempts until success or the wait ends. Between attempts the waiter sleeps until the key's
/// release notice or its [`Backoff`] pause.
pub(crate) async fn waiting(state: &Arc<ClientState>, spec: Spec<'_>) -> Result<LockGuard> {
    let mut plan = plan(state, spec)?;
    // What a read-write request is, for the report of a wait that ended (see below).
    let wanted = match &plan.shape {
        Shape::Read(_) => Some("read"),
        Shape::Write { .. } => Some("write"),
        _ => None,
    };
    let span =
        tracing::debug_span!("acquire", key = %plan.shape, ttl = ?plan.ttl, wait = ?plan.wait);
    let started = Started::now();
    let mut withdraw = Withdraw {
        state,
        call: plan.shape.withdraw(),
    };
    let mut result = wait_loop(state, &mut plan).instrument(span).await;
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
    if result.is_ok() {
        // The writer holds the lock: its release takes the mark back.
        withdraw.call = None;
    }
    drop(withdraw);
    let end = match &result {
        Ok(_) => AcquireEnd::Acquired,
        Err(Error::WaitTimeout { .. }) => AcquireEnd::Timeout,
        Err(_) => AcquireEnd::Failed,
    };
    telemetry::acquire_ended(started, end);
    result
}

/// A waiting writer that gives up takes back its pending mark, so that readers need not wait
/// for it to expire: when its request fails, and also when its future is dropped (a timeout
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
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let state = self.state.clone();
        write_now_finish_later(&self.state.background, async move {
            broadcast(&state.nodes, 0..state.nodes.len(), call, SendBy::Eval).await;
        });
    }
}

/// Checks a request's key and durations against the client's settings.
fn plan<'a>(state: &ClientState, spec: Spec<'a>) -> Result<Plan<'a>> {
    let config = &state.config;
    let shape = match &spec.target {
        Target::Key(key) => Shape::Single(Key::new(key)?),
        Target::Keys(keys) => Shape::set(keys)?,
        Target::Permit {
            key,
            permits,
            checked,
        } => Shape::permit(key, *permits, config, state.nodes.len(), *checked)?,
        Target::Read(key) => Shape::Read(Key::new(key)?),
        // The request's id, the value of its pending-writer mark: one for all its attempts
        // (each attempt has its own holder value), so that the mark outlives the rollback of
        // a refused attempt and stops new readers until the writer gets in or gives up.
        Target::Write(key) => Shape::Write {
            key: Key::new(key)?,
            waiter: Some(uuid::Uuid::new_v4().simple().to_string().into()),
            mark_ms: config.queue_lease.as_millis().to_string().into(),
        },
        // The request's id and holder value, one each for all its attempts (see `Fair`).
        Target::Fair(key) => {
            // Tagged with its client, so that a short grant's notice names the next waiter
            // of another client (see `scripts::FAIR_ACQUIRE`).
            let waiter = format!("{}.{}", state.client_tag(), uuid::Uuid::new_v4().simple());
            Shape::Fair(Fair {
                key: Key::new(key)?,
                holder: fair_holder(&waiter).into(),
                waiter: waiter.into(),
                ticket: None,
                draws: true,
                queue_lease_ms: config.queue_lease.as_millis().to_string().into(),
                claim_ms: config.claim_window().as_millis().to_string().into(),
            })
        }
    };
    // Read-write guards are not reentrant: only an `Owner` sets one, and its requests are
    // for one key's mutex. A nested read or write would share a lease of the wrong kind.
    debug_assert!(
        spec.owner.is_none() || matches!(shape, Shape::Single(_)),
        "an owner's request is for one key's mutex"
    );
    let (mut ttl, mut watchdog) = match spec.lease {
        LeaseMode::Fixed(ttl) => (ttl, false),
        LeaseMode::Watchdog(lease) => (lease.unwrap_or(config.watchdog_lease), true),
    };
    // A maximum hold within the first lease (or the fixed TTL) is that lease: the lock must
    // not outlive it, and nothing is left for the watchdog to renew.
    let mut cut_by_max_hold = false;
    if let Some(max_hold) = spec.max_hold {
        check_duration("max_hold", max_hold)?;
        if max_hold.is_zero() {
            return Err(Error::InvalidConfig {
                field: "max_hold",
                reason: "must be positive".into(),
            });
        }
        if max_hold <= ttl {
            (ttl, watchdog, cut_by_max_hold) = (max_hold, false, true);
        }
    }
    let ttl = config.check_ttl(ttl).map_err(|e| match e {
        Error::InvalidTtl { reason, .. } if cut_by_max_hold => Error::InvalidConfig {
            field: "max_hold",
            reason: format!("the lock's first and only lease: {reason}"),
        },
        e => e,
    })?;
    if let Some(wait) = spec.wait {
        check_duration("wait", wait)?;
    }
    Ok(Plan {
        shape,
        ttl,
        watchdog,
        fencing: spec.fencing,
        max_hold: spec.max_hold,
        wait: spec.wait.unwrap_or(config.wait_timeout),
        owner: spec.owner,
    })
}

async fn wait_loop(state: &Arc<ClientState>, plan: &mut Plan<'_>) -> Result<LockGuard> {
    let config = &state.config;
    let start = Instant::now();
    let deadline = start + plan.wait;
    let mut backoff = Backoff::new(config.retry_delay, config.retry_jitter);
    // One waiter per key: a multi-key lock listens to the release channel of every key of
    // its set, as any of them may be the one that blocked it.
    let mut waiters: Vec<Waiter> = plan
        .shape
        .keys()
        .iter()
        .map(|k| Waiter::new(state.wakeups.as_ref(), k.release_channel()))
        .collect();
    // A fair request's place among its client's waiters (for a release's hand-off) and its
    // name on the release channel (for the grant notices naming it).
    let mut fair = match &plan.shape {
        Shape::Fair(f) => {
            let grant_ms = state
                .config
                .node_ttl_ms(plan.ttl)
                .parse()
                .unwrap_or(i64::MAX);
            let registration = state
                .fair
                .register(f.key.bytes(), &f.waiter, plan.ttl, grant_ms);
            Some((registration, None))
        }
        _ => None,
    };
    let mut attempts: u32 = 0;
    loop {
        if let Some(guard) = reenter(plan) {
            return Ok(guard);
        }
        if let (Some((registration, named @ None)), Some(channel), Shape::Fair(f)) =
            (&mut fair, waiters[0].channel(), &plan.shape)
        {
            *named = Some(channel.name(
                f.waiter.as_bytes(),
                registration.slot.notify.clone(),
                registration.slot.lapse.clone(),
            ));
        }
        // Listen before the attempt, so that a release between the attempt and the wait below
        // is not missed.
        let channels: Vec<_> = waiters.iter().filter_map(Waiter::channel).collect();
        let mut notified: Vec<_> = channels
            .iter()
            .map(|c| Box::pin(c.notify().notified()))
            .collect();
        for n in &mut notified {
            n.as_mut().enable();
        }
        let mut named_notified = fair
            .as_ref()
            .map(|(r, _)| Box::pin(r.slot.notify.notified()));
        if let Some(n) = &mut named_notified {
            n.as_mut().enable();
        }
        // The end of the claim window of a short grant to the waiter before this one: the key
        // may be free then, and this waiter first (see `wakeup`).
        let mut lapsed = fair
            .as_ref()
            .map(|(r, _)| Box::pin(r.slot.lapse.notified()));
        if let Some(n) = &mut lapsed {
            n.as_mut().enable();
        }
        // Every waiter's turn is taken (not just the first found). A fair request does not
        // wait for its turn among its client's waiters: its ticket orders it among all.
        let mut turn_first = false;
        for waiter in &mut waiters {
            turn_first |= waiter.take_turn_first();
        }
        let turn_first = turn_first && fair.is_none();
        if fair.is_some() {
            let released = state
                .fair
                .after_local_releases(plan.shape.primary().bytes());
            // Bounded by the wait: a release's rounds are bounded by the node timeout anyway.
            let _ = tokio::time::timeout_at(deadline, released).await;
        }
        let grant = fair.as_ref().and_then(|(r, _)| r.take_grant_or_attempt());
        let miss = if let Some(grant) = grant {
            match claim(state, plan, grant).await {
                Ok(guard) => return Ok(guard),
                Err(miss) => Some(miss),
            }
        } else if turn_first {
            None
        } else {
            attempts = attempts.saturating_add(1);
            match attempt(state, plan).await {
                Ok(guard) => return Ok(guard),
                Err(miss) => Some(miss),
            }
        };
        // A fair request cut off from a quorum (its nodes failed, not refused) leaves the line:
        // a place it kept with failing attempts would hold up the waiters behind it, on the
        // nodes it still reaches, for its whole wait. It draws a new ticket once a quorum
        // answers again (waited for, as its rollback: nothing of it may land later).
        let cut_off = matches!(
            (&miss, &plan.shape),
            (
                Some(Miss::Failed(Error::NoQuorum { .. })),
                Shape::Fair(Fair {
                    ticket: Some(_),
                    ..
                })
            )
        );
        if cut_off {
            if let Some(call) = plan.shape.withdraw() {
                broadcast(&state.nodes, 0..state.nodes.len(), call, SendBy::Eval).await;
            }
            if let Shape::Fair(f) = &mut plan.shape {
                f.ticket = None;
            }
        }
        // The attempt's rollback, and a withdrawal, have run: a release may now hand this
        // request the lock. Not before the withdrawal: a release in between could hand over
        // a grant that the withdrawal then deletes and passes on to the next waiter.
        if let Some((registration, _)) = &fair {
            registration.waiting();
        }
        // A fair request refused without a ticket draws one and joins the line at once.
        let miss = match (miss, &mut plan.shape) {
            (Some(Miss::Contended(c)), Shape::Fair(f)) if f.ticket.is_none() => {
                let ticket = match c.drawn {
                    Some(ticket) => Ok(ticket),
                    None => draw_ticket(state, f).await,
                };
                match ticket {
                    Ok(ticket) => {
                        f.ticket = Some(ticket);
                        continue;
                    }
                    Err(e) => Some(Miss::Failed(e)),
                }
            }
            (miss, _) => miss,
        };
        let now = Instant::now();
        let retries_left = config.max_retries.is_none_or(|max| attempts <= max);
        let (error, hint) = match miss {
            Some(Miss::Failed(e)) => (Some(e), None),
            Some(Miss::Contended(c)) => {
                // A fair request whose attempt raced a change of holder, or whose rollback
                // gave the key straight back to it, retries quickly: nobody but its next
                // attempt claims a key granted to it, and the grant's notices may have come
                // (and been counted) while it was attempting.
                if c.partly && fair.is_some() {
                    backoff.woken();
                }
                (None, c.hint)
            }
            None => (None, None),
        };
        // Out of time or retries, once at least one attempt was made.
        if (now >= deadline || !retries_left) && attempts > 0 {
            return Err(error.unwrap_or_else(|| Error::WaitTimeout {
                key: plan.shape.to_string(),
                waited: now - start,
                attempts,
            }));
        }
        if error.is_none() {
            // Every key's channel at once (each subscription waits at most the node timeout
            // for its nodes), and never past the wait's end.
            let subscribing = futures::future::join_all(waiters.iter_mut().map(|w| w.subscribe()));
            match tokio::time::timeout_at(deadline, subscribing).await {
                Ok(subscribed) if subscribed.contains(&true) => continue,
                Ok(_) => {}
                Err(_) => {
                    return Err(Error::WaitTimeout {
                        key: plan.shape.to_string(),
                        waited: start.elapsed(),
                        attempts,
                    })
                }
            }
        }
        let mut pause = backoff.pause(error.is_none(), hint, rand::random());
        if plan.shape.keeps_a_place() {
            // A fair waiter renews its place in line, and a waiting writer its pending mark,
            // with each attempt: both last a queue lease.
            pause = pause.min(config.queue_lease / 3);
        }
        let sleep = tokio::time::sleep_until((now + pause).min(deadline));
        let any_notice = (!notified.is_empty() || named_notified.is_some()).then(|| {
            futures::future::select_all(
                notified
                    .iter_mut()
                    .map(|n| n.as_mut())
                    .chain(named_notified.iter_mut().map(|n| n.as_mut())),
            )
        });
        let lapse = async {
            match &mut lapsed {
                Some(n) => n.as_mut().await,
                None => std::future::pending().await,
            }
        };
        match any_notice {
            Some(n) => tokio::select! {
                _ = n => {
                    state.counters.woken.fetch_add(1, Ordering::Relaxed);
                    telemetry::wakeup(true);
                    backoff.woken();
                }
                // One attempt, with no quick retries: the waiter before this one most likely
                // claimed its grant.
                () = lapse => telemetry::wakeup(true),
                () = sleep => telemetry::wakeup(false),
            },
            None => {
                sleep.await;
                telemetry::wakeup(false);
            }
        }
    }
}

/// A reentrant owner's nested acquire: joins its live hold on the key, if any.
fn reenter(plan: &Plan<'_>) -> Option<LockGuard> {
    let owner = plan.owner?;
    let lease = owner.reenter(plan.shape.primary().bytes())?;
    Some(LockGuard::new(lease, Some(owner.clone())))
}

/// 128 bits from the thread's cryptographically secure generator, as 32 hex digits: the
/// secret part of every holder value.
fn secret() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// A fair request's holder value: its waiter id (public: grant notices name it) and 128
/// random bits, so that a call by token on a fair lock can leave the line and hand the key on
/// (see `shape::Fair::waiter_of`).
fn fair_holder(waiter: &str) -> String {
    format!(
        "{}{waiter}:{}",
        Fair::HOLDER_PREFIX,
        uuid::Uuid::new_v4().simple()
    )
}

/// A fresh holder value: 128 random bits, prefixed for an owner with the client's and the
/// owner's ids.
fn holder_value(state: &ClientState, owner: Option<&Arc<HoldTable>>) -> String {
    let nonce = secret();
    match owner {
        Some(o) => format!("{}:{}:{nonce}", state.client_id, o.id),
        None => nonce.to_string(),
    }
}

/// One attempt: fan out, tally, compute the validity, and roll back on every node when it is
/// not a success.
async fn attempt(
    state: &Arc<ClientState>,
    plan: &Plan<'_>,
) -> std::result::Result<LockGuard, Miss> {
    let config = &state.config;
    let (key, ttl) = (&plan.shape, plan.ttl);
    let holder = plan
        .shape
        .request_holder()
        .map_or_else(|| holder_value(state, plan.owner), str::to_owned);
    let ttl_ms = config.node_ttl_ms(ttl);
    let (call, read) = key.acquire(&holder, &ttl_ms);
    state.counters.attempts.fetch_add(1, Ordering::Relaxed);

    // RedLock step 1: the validity is measured from before the first request is sent.
    let t0 = Instant::now();
    let mut fan = fan_out(&state.nodes, config.required, call, read);
    let decision = fan.decide().await;
    let drift = quorum::drift(ttl, config.drift_factor);

    let miss = match decision {
        Decision::Reached => {
            let (token, fencing) = match plan.fencing {
                true => fence_token(state, key).await,
                false => (Ok(None), Vec::new()),
            };
            let elapsed = t0.elapsed();
            let error = match (token, quorum::validity(ttl, elapsed, drift)) {
                (Ok(token), Some(v)) if v > config.min_validity => {
                    state.counters.acquired.fetch_add(1, Ordering::Relaxed);
                    telemetry::attempt(AttemptEnd::Acquired);
                    tracing::debug!(validity = ?v, ?token, ?elapsed, "acquired");
                    // Every reachable node should get the entry (so that one node that later
                    // forgets it cannot leave the lock on a bare quorum): the stragglers
                    // finish in the background, and the lease's next call settles them first
                    // (ordering invariant 4).
                    let in_flight = fan
                        .detach(&state.background)
                        .into_iter()
                        .chain(fencing)
                        .collect();
                    let deadline = config.trusted_until(t0, ttl);
                    return Ok(hold(state, plan, holder, deadline, token, in_flight));
                }
                (Err(e), _) => e,
                _ => Error::ValidityExhausted {
                    key: key.to_string(),
                    elapsed,
                    ttl,
                },
            };
            // The fencing calls' stragglers must not overtake the rollback (ordering invariant
            // 4); dropping the fan-out below stops the acquire's.
            for stragglers in fencing {
                stragglers.settle().await;
            }
            Miss::Failed(error)
        }
        _ if fan.outcome.tally.failures_leave_room() => {
            // A fair request's first attempt drew its ticket where it was refused: the
            // largest number of a quorum of refusals is the ticket (see `draw_ticket`).
            let drawn = (fan.outcome.drawn >= config.required)
                .then_some(fan.outcome.max_drawn)
                .flatten()
                .and_then(|n| u64::try_from(n).ok());
            Miss::Contended(Contention {
                hint: fan.outcome.hint,
                drawn,
                partly: fan.outcome.tally.yes() > 0,
            })
        }
        _ => Miss::Failed(fan.outcome.no_quorum(Op::Acquire, key)),
    };
    // A node that answered "refused" took nothing (a re-sent request answers yes where the
    // first one took the key), so the rollback goes to every other node: those that said yes,
    // failed, timed out or were not waited for, since they may have applied the acquire.
    let refused = std::mem::take(&mut fan.outcome.refused);
    let give_back_to: Vec<usize> = (0..state.nodes.len())
        .filter(|i| !refused.contains(i))
        .collect();
    // Stops the requests not yet written; those written stay queued ahead of the rollback on
    // their connections (ordering invariant 5).
    drop(fan);
    let (counter, end) = match &miss {
        Miss::Contended(..) => (&state.counters.contended, AttemptEnd::Contended),
        Miss::Failed(_) => (&state.counters.failed, AttemptEnd::Failed),
    };
    counter.fetch_add(1, Ordering::Relaxed);
    telemetry::attempt(end);
    telemetry::rollback();
    // RedLock step 5: roll back, also on the nodes that failed or timed out.
    let regranted = give_back(state, key, holder, give_back_to).await;
    let mut miss = miss;
    if let Miss::Contended(c) = &mut miss {
        c.partly |= regranted;
    }
    Err(miss)
}

/// Rolls a failed attempt back on `nodes` (RedLock step 5), before a retry can be sent
/// (ordering invariant 5): otherwise the retry could be refused by this attempt's own entry.
/// An attempt every node refused has nothing to give back.
///
/// An attempt's holder value is its own, so a rollback that lands late can never delete a
/// later attempt's entry, and it is enough to write it onto every live connection now and
/// let it finish in the background. A fair request's attempts share one holder value (a
/// release grants the key to the request, not to an attempt), so there a late rollback
/// would delete the entry of the request's next attempt, or of a grant: a rollback waiting
/// for a connection being re-made, or re-sent after its connection dropped, can land after
/// them. So a fair request waits for its rollback (each node's part bounded by the node
/// timeout; a part stopped before it was written is never sent) before it tries again or
/// counts as waiting for a hand-off.
///
/// Returns whether a fair request's rollback gave the key straight back to the request, first
/// in line (see `scripts::FAIR_RELEASE`): its next attempt should come at once, since no other
/// notice of that grant is sure to reach it.
async fn give_back(
    state: &Arc<ClientState>,
    shape: &Shape,
    holder: String,
    nodes: Vec<usize>,
) -> bool {
    if nodes.is_empty() {
        return false;
    }
    let Shape::Fair(fair) = shape else {
        let work = rollback(state.clone(), shape.clone(), holder, nodes);
        write_now_finish_later(&state.background, async move {
            work.await;
        });
        return false;
    };
    let answers = state
        .background
        .track(rollback(state.clone(), shape.clone(), holder, nodes))
        .await;
    answers.iter().any(|a| {
        a.as_ref()
            .ok()
            .and_then(granted_to)
            .is_some_and(|(w, _)| w == fair.waiter.as_bytes())
    })
}

/// Takes the lock a release of this client handed to a waiting fair request (see `fair`):
/// its entries were set by the release, and its deadline runs from the release's first send.
/// With fencing, the token is drawn as after an attempt's quorum. When the token cannot be
/// drawn, or the validity is gone, the entries are rolled back as a failed attempt's.
async fn claim(
    state: &Arc<ClientState>,
    plan: &Plan<'_>,
    grant: Grant,
) -> std::result::Result<LockGuard, Miss> {
    let holder = plan.shape.request_holder().unwrap_or_default().to_owned();
    let (token, fencing) = match plan.fencing {
        true => fence_token(state, &plan.shape).await,
        false => (Ok(None), Vec::new()),
    };
    let left = grant.deadline.saturating_duration_since(Instant::now());
    let error = match token {
        Ok(token) if left > state.config.min_validity => {
            state.counters.acquired.fetch_add(1, Ordering::Relaxed);
            telemetry::attempt(AttemptEnd::Acquired);
            tracing::debug!(validity = ?left, ?token, "handed over by a release");
            let in_flight = grant.in_flight.into_iter().chain(fencing).collect();
            return Ok(hold(state, plan, holder, grant.deadline, token, in_flight));
        }
        Ok(_) => Error::ValidityExhausted {
            key: plan.shape.to_string(),
            elapsed: plan.ttl.saturating_sub(left),
            ttl: plan.ttl,
        },
        Err(e) => e,
    };
    for stragglers in fencing.into_iter().chain(grant.in_flight) {
        stragglers.settle().await;
    }
    state.counters.failed.fetch_add(1, Ordering::Relaxed);
    telemetry::attempt(AttemptEnd::Failed);
    telemetry::rollback();
    let every = (0..state.nodes.len()).collect();
    give_back(state, &plan.shape, holder, every).await;
    Err(Miss::Failed(error))
}

/// Draws a ticket for `fair`: `INCR` of the key's ticket counter on every node, the largest
/// answer of a quorum. The request's next attempt raises the counter to it on the nodes it
/// reaches and joins the line there; once a quorum answered that attempt, every ticket drawn
/// afterwards is larger (its quorum meets that attempt's in a node whose counter is at least
/// this ticket, and keeps it as long as the line is not empty), so a request that started
/// waiting later is served later.
async fn draw_ticket(state: &ClientState, fair: &Fair) -> Result<u64> {
    let call = Call::new(
        &TICKET_DRAW,
        &fair.key.ticket_key(),
        &[fair.queue_lease_ms.as_bytes()],
    );
    let mut drawn = fan_out(&state.nodes, state.config.required, call, read_counter);
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
async fn fence_token(state: &ClientState, key: &Shape) -> (Result<Option<u64>>, Vec<Stragglers>) {
    let required = state.config.required;
    let (increment, read) = key.fence_increment();
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
    let call = key.fence_write(&token_arg);
    let mut written = fan_out(&state.nodes, required, call, read_flag);
    let result = match written.decide().await {
        Decision::Reached => Ok(Some(token)),
        _ => Err(written.outcome.no_quorum(Op::Acquire, key)),
    };
    in_flight.extend(written.detach(&state.background));
    (result, in_flight)
}

/// Wraps a confirmed acquisition in its guard, starting the watchdog if asked.
fn hold(
    state: &Arc<ClientState>,
    plan: &Plan<'_>,
    holder: String,
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
        tokio::spawn(crate::watchdog::run(lease.clone(), plan.ttl, plan.max_hold));
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
    holder: String,
    nodes: Vec<usize>,
) -> Vec<std::result::Result<redis::Value, crate::error::NodeFailure>> {
    let call = key.release(&holder, Notice::Rollback);
    broadcast(&state.nodes, nodes, call, SendBy::Eval).await
}
