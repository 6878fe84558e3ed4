//! One acquisition's shared state (key, holder value, deadline, loss) and the operations on it
//! that talk to the nodes: renew (extend), repair and release. Guards, the watchdog and loss
//! signals all share one `Lease`. The extend and release rounds themselves (one call to every
//! node, and what its answers mean) are in `hold/rounds.rs`, which the calls by holder value
//! (`hold/by_holder.rs`) share.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::family::Shape;
use crate::fanout::ordering::{BackgroundWork, InFlight, Stragglers};
use crate::fanout::{broadcast, Outcome};
use crate::hold::rounds::{decide_extend, extend_call, release_result, release_round, Extended};
use crate::rules::config::Config;
use crate::rules::holder::Holder;
use crate::rules::key::Key;
use crate::scripts::SendBy;
use crate::state::{AnyLease, ClientState};
use crate::telemetry::{Hold, HoldEnd, LossReason, RenewalEnd, RenewedBy};

pub(crate) struct Lease {
    /// The client's nodes, settings and counters.
    client: Arc<ClientState>,
    /// The first key of what it holds (see [`Shape::primary`]).
    pub(crate) key: Key,
    /// What it holds: one key, a set of keys, or a semaphore permit.
    pub(crate) shape: Shape,
    pub(crate) holder: Holder,
    state: Mutex<State>,
    /// Cancelled once the lease can no longer be trusted: lost, or ended by release or drop.
    signal: CancellationToken,
    /// Wakes the loss signals' timers whenever the deadline moves.
    pub(crate) moved: Notify,
    /// Serialises the operations that write to the nodes (renew, repair, release), so that a
    /// later one is never sent while an earlier one is being sent.
    ops: tokio::sync::Mutex<()>,
    /// Guards sharing this lease (more than one only for a reentrant owner).
    pub(crate) holds: AtomicUsize,
    /// The fencing token, when asked for.
    pub(crate) token: Option<u64>,
    /// The lease's calls still in flight to slower nodes after they were decided (acquire,
    /// fencing write-back, extend): the next operation settles them first, so that on each
    /// node it runs after them (ordering invariant 4).
    in_flight: InFlight,
    /// The metrics of this hold (nothing without the `metrics` feature).
    hold: Hold,
    /// The task that acquired it (see [`Lease::rw_held_by_current_task`]).
    taken_by: Caller,
    /// A release by holder value from this client ran on the nodes: the guard's own release has
    /// nothing left to send.
    released_by_holder_value: std::sync::atomic::AtomicBool,
    /// The holder record last asked for, if any (see `hold::record`).
    record: crate::hold::record::Record,
    /// Someone asked the holder to release (`QuorumLock::request_release`).
    pub(crate) asked: crate::hold::record::Asked,
    /// For a lease held from a fair lock's short grants (see `take::fair`): when it was made,
    /// until its first renewal starts. That renewal gives the entries what is left of the TTL
    /// from then; any renewal that starts first takes its place.
    first_renewal: Mutex<Option<Instant>>,
}

/// Who is calling: a tokio task, or the future a runtime's `block_on` runs (no task of its
/// own; it stays on its thread), told apart by the thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Caller {
    fn current() -> Caller {
        match tokio::task::try_id() {
            Some(id) => Caller::Task(id),
            None => Caller::Thread(std::thread::current().id()),
        }
    }
}

struct State {
    ttl: Duration,
    deadline: Instant,
    lost: bool,
    ended: bool,
    /// The lease ended (release or drop) within its deadline, not lost: the lock was held to
    /// the end, whatever the release's answers.
    held_to_the_end: bool,
    /// When the lease was lost or ended, if it was: nobody may trust it past that.
    ended_at: Option<Instant>,
}

impl Lease {
    pub(crate) fn new(
        client: Arc<ClientState>,
        shape: Shape,
        holder: Holder,
        ttl: Duration,
        deadline: Instant,
        token: Option<u64>,
        in_flight: Vec<Stragglers>,
    ) -> Lease {
        Lease {
            client,
            key: shape.primary().clone(),
            shape,
            holder,
            state: Mutex::new(State {
                ttl,
                deadline,
                lost: false,
                ended: false,
                held_to_the_end: false,
                ended_at: None,
            }),
            signal: CancellationToken::new(),
            moved: Notify::new(),
            ops: tokio::sync::Mutex::new(()),
            holds: AtomicUsize::new(1),
            token,
            in_flight: InFlight::new(in_flight),
            hold: Hold::start(),
            taken_by: Caller::current(),
            released_by_holder_value: std::sync::atomic::AtomicBool::new(false),
            record: Default::default(),
            asked: Default::default(),
            first_renewal: Mutex::new(None),
        }
    }

    /// Registers the lease with its client (`state::HeldLeases`) until it ends, under every key
    /// it holds: a call by holder value on any key of a multi-key lock acts through the lease.
    pub(crate) fn register(self: &Arc<Self>) {
        let any: AnyLease = self.clone();
        for key in self.shape.keys() {
            self.client.held.insert(key.bytes(), &any);
        }
        crate::hold::notices::listen(&self.client);
    }

    /// The live lease of this client that holds `key` with `holder`, if any: a call by holder value
    /// from this client then acts through it.
    pub(crate) fn find(client: &ClientState, key: &[u8], holder: &Holder) -> Option<Arc<Lease>> {
        client
            .held
            .of(key)
            .into_iter()
            .filter_map(|l| l.downcast::<Lease>().ok())
            .find(|l| l.holder == *holder && !l.is_ended())
    }

    /// The kind of read-write hold (`"read"` or `"write"`) the current task took on `key`
    /// through a live lease of this client, if any.
    pub(crate) fn rw_held_by_current_task(
        client: &ClientState,
        key: &[u8],
    ) -> Option<&'static str> {
        let caller = Caller::current();
        client
            .held
            .of(key)
            .into_iter()
            .filter_map(|l| l.downcast::<Lease>().ok())
            .filter(|l| l.taken_by == caller && l.live_deadline().is_some())
            .find_map(|l| l.shape.kind().rw_side())
    }

    /// Whether the lease has ended (released, dropped, given up as a holder value, or released
    /// by holder value from this client).
    pub(crate) fn is_ended(&self) -> bool {
        self.state().ended
    }

    /// The client.
    pub(crate) fn client(&self) -> &ClientState {
        &self.client
    }

    /// The client's settings.
    pub(crate) fn config(&self) -> &Config {
        &self.client.config
    }

    /// The client's background work.
    pub(crate) fn background(&self) -> &Arc<BackgroundWork> {
        &self.client.background
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.state().ttl
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.state().deadline
    }

    /// The deadline, cut to the moment the lease was lost or ended if that came first: what
    /// a guard reports (it must never say the lock may be trusted after it was lost or let
    /// go).
    pub(crate) fn trusted_until(&self) -> Instant {
        let s = self.state();
        s.ended_at.map_or(s.deadline, |at| at.min(s.deadline))
    }

    /// Moves the deadline and wakes the loss signals' timers.
    fn set_deadline(&self, update: impl FnOnce(&mut State)) {
        update(&mut self.state());
        self.moved.notify_waiters();
    }

    /// The deadline while the lease may be trusted: not lost, not ended, not past it.
    pub(crate) fn live_deadline(&self) -> Option<Instant> {
        let s = self.state();
        (!s.lost && !s.ended && Instant::now() < s.deadline).then_some(s.deadline)
    }

    /// Fires when the lease can no longer be trusted (see [`LostSignal`]).
    pub(crate) fn signal(&self) -> &CancellationToken {
        &self.signal
    }

    pub(crate) fn mark_lost(&self, reason: LossReason) {
        let first = {
            let mut s = self.state();
            let first = !s.lost && !s.ended;
            s.lost = true;
            s.ended_at.get_or_insert_with(Instant::now);
            first
        };
        if first {
            self.client.counters.lost(reason);
            self.hold.end(HoldEnd::Lost);
            tracing::warn!(key = %self.shape, "lock lost");
        }
        self.signal.cancel();
    }

    /// Ends the lease (release or drop): stops its watchdog and fires its signal. Returns
    /// whether it had been lost before.
    pub(crate) fn end(&self) -> bool {
        let (was_lost, first) = {
            let mut s = self.state();
            let first = !s.lost && !s.ended;
            if first {
                s.held_to_the_end = Instant::now() < s.deadline;
            }
            s.ended = true;
            s.ended_at.get_or_insert_with(Instant::now);
            (s.lost, first)
        };
        if first {
            self.hold.end(HoldEnd::Ended);
        }
        self.signal.cancel();
        self.moved.notify_waiters();
        for key in self.shape.keys() {
            self.client
                .held
                .remove(key.bytes(), std::ptr::from_ref(self).cast());
        }
        was_lost
    }

    /// A release by holder value of this lease's holder value from its own client: ends the lease
    /// first (its guards stop trusting the lock before any node lets go of it), then releases
    /// as the guard would.
    pub(crate) async fn release_by_holder_value(&self) -> Result<()> {
        let was_lost = self.end();
        let outcome = self.release_on_nodes().await;
        // Only now: a release by holder value cancelled before its round leaves the guard's own
        // release (or drop) to send it.
        self.released_by_holder_value.store(true, Ordering::Release);
        self.release_result(&outcome, was_lost)
    }

    /// Whether a release by holder value from this client already released the lease on the nodes.
    pub(crate) fn released_by_holder_value(&self) -> bool {
        self.released_by_holder_value.load(Ordering::Acquire)
    }

    pub(crate) fn lost_error(&self) -> Error {
        Error::LockLost {
            key: self.shape.to_string(),
        }
    }

    /// Confirms a renewal: moves the deadline to `next` if the lease is still live and the
    /// quorum came before the deadline in force (`now` is when the decision was taken).
    /// False when it came too late, or the lease was lost or ended meanwhile: a renewal never
    /// brings a lease back.
    fn confirm(&self, ttl: Duration, next: Instant, now: Instant) -> bool {
        {
            let mut s = self.state();
            if s.lost || s.ended || now >= s.deadline {
                return false;
            }
            s.ttl = ttl;
            s.deadline = next;
        }
        self.moved.notify_waiters();
        true
    }

    /// Waits for the operation lock while the lease is live, following moves of the deadline
    /// (another renewal may extend it while this one waits). `None` once the lease is not
    /// live any more.
    async fn ops_while_live(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        loop {
            let current = self.live_deadline()?;
            if let Ok(ops) = tokio::time::timeout_at(current, self.ops.lock()).await {
                return Some(ops);
            }
        }
    }

    /// Extends the lease to `ttl` from now where this holder still holds it (docs/DESIGN.md,
    /// "Extend and watchdog"). A quorum must confirm before the current deadline; the new
    /// deadline runs from this call's start and takes effect when the quorum confirms. A request
    /// that may shorten the entries cuts the deadline before it is sent (invariant 2), so a
    /// failed, late or cancelled shortening never leaves the later deadline behind.
    ///
    /// With `repair_by` (the watchdog), the answers of the other nodes are awaited until then,
    /// and the nodes that said they lack the entry get it back.
    pub(crate) async fn renew(&self, ttl: Duration, repair_by: Option<Instant>) -> Result<()> {
        self.renew_as(ttl, repair_by, false).await
    }

    /// Marks a lease held from short grants (see `take::fair`), made at `made`: its first
    /// renewal is still due (see [`Lease::renew_first`]).
    pub(crate) fn await_first_renewal(&self, made: Instant) {
        *self.first_renewal.lock().unwrap_or_else(|p| p.into_inner()) = Some(made);
    }

    /// When the lease was made, if its first renewal is still due.
    pub(crate) fn first_renewal_due(&self) -> Option<Instant> {
        *self.first_renewal.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The first renewal of a lease held from short grants: what is left of the TTL since the
    /// lease was made, unless another renewal (an extend, the watchdog's) started first.
    pub(crate) async fn renew_first(&self) -> Result<()> {
        let ttl = self.ttl();
        self.renew_as(ttl, None, true).await
    }

    async fn renew_as(&self, ttl: Duration, repair_by: Option<Instant>, first: bool) -> Result<()> {
        let span = tracing::debug_span!("extend", key = %self.shape, ?ttl);
        async {
            let by = match repair_by {
                Some(_) => RenewedBy::Watchdog,
                None => RenewedBy::Extend,
            };
            let lost = || {
                if !self.state().ended {
                    self.mark_lost(LossReason::Expired);
                }
                self.client.counters.renewal(by, RenewalEnd::Lost);
                Err(self.lost_error())
            };
            // A quorum confirmed after the deadline proves nothing: the entries may have
            // expired in between. So every wait below is bounded by the deadline in force
            // (read afresh after each wait: another renewal may have moved it).
            let Some(_ops) = self.ops_while_live().await else {
                return lost();
            };
            // Every renewal takes the place of a first one still due; the first one, once
            // another started, has nothing left to do.
            let made = self
                .first_renewal
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            let ttl = match (first, made) {
                (false, _) => ttl,
                (true, None) => return Ok(()),
                (true, Some(made)) => {
                    match self
                        .client
                        .config
                        .check_ttl(ttl.saturating_sub(made.elapsed()))
                    {
                        Ok(left) => left,
                        // Too little is left to renew: the short deadline stands.
                        Err(_) => return Ok(()),
                    }
                }
            };
            let Some(current) = self.live_deadline() else {
                return lost();
            };
            if tokio::time::timeout_at(current, self.in_flight.settle())
                .await
                .is_err()
            {
                return lost();
            }
            let start = Instant::now();
            if self.live_deadline().is_none() {
                return lost();
            }
            let next = self.client.config.trusted_until(start, ttl);
            // Invariant 2: a request that may shorten the entries cuts the deadline before it
            // is sent, never after.
            self.set_deadline(|s| s.deadline = s.deadline.min(next));
            let recorded = self.record.exists();
            let holder = self.holder.as_str();
            let mut fan = extend_call(&self.client, &self.shape, holder, ttl, recorded);
            let ended = decide_extend(&mut fan, &self.shape, self.deadline()).await;
            let background = &self.client.background;
            match ended {
                Extended::Confirmed(at) if self.confirm(ttl, next, at) => {
                    self.client.counters.renewal(by, RenewalEnd::Confirmed);
                    if let Some(by) = repair_by {
                        // Bounded, so that the next renewal is not delayed by a slow node.
                        let _ = tokio::time::timeout_at(by, fan.collect()).await;
                        let refused = fan.outcome.refused.clone();
                        self.in_flight.push(fan.detach(background));
                        if !refused.is_empty() {
                            self.repair(&refused).await;
                        }
                    } else {
                        self.in_flight.push(fan.detach(background));
                    }
                    Ok(())
                }
                // No quorum before the deadline, or it came too late to count.
                Extended::Confirmed(_) | Extended::TooLate => {
                    self.in_flight.push(fan.detach(background));
                    lost()
                }
                Extended::Refused => {
                    self.in_flight.push(fan.detach(background));
                    self.mark_lost(LossReason::Refused);
                    self.client.counters.renewal(by, RenewalEnd::Lost);
                    Err(self.lost_error())
                }
                Extended::Failed(error) => {
                    self.in_flight.push(fan.detach(background));
                    self.client.counters.renewal(by, RenewalEnd::Failed);
                    Err(error)
                }
            }
        }
        .instrument(span)
        .await
    }

    /// The lease is an election's leadership with `term` (its metrics count it so until it
    /// ends; a lease already ended or lost is not counted).
    pub(crate) fn leads(&self, term: u64) {
        let s = self.state();
        if !s.lost && !s.ended {
            self.hold.leads(term);
        }
    }

    /// Publishes `fields` as the key's holder record where this holder holds the entry
    /// (docs/DESIGN.md, "Who holds a lock"), with the lease's next record version: `Ok` once
    /// a quorum stored it before the deadline, after the lease's earlier calls on each node.
    /// Refused by so many nodes that no quorum holds the entry: the lease is lost. Too many
    /// failures: the error, the lease kept (the record may show on some nodes: a later
    /// publish, with a later version, replaces it).
    /// With `first`, nothing is published where the lease already has a record (a reentrant
    /// owner's first label stays while any of its guards holds).
    pub(crate) async fn publish(&self, fields: &[(&str, &str)], first: bool) -> Result<()> {
        let Some(_ops) = self.ops_while_live().await else {
            return Err(self.lost_error());
        };
        let Some(current) = self.live_deadline() else {
            return Err(self.lost_error());
        };
        if tokio::time::timeout_at(current, self.in_flight.settle())
            .await
            .is_err()
        {
            return Err(self.lost_error());
        }
        // Taken before the record can exist anywhere: every renewal from now on moves it too.
        let Some(version) = self.record.next(fields, first) else {
            return Ok(());
        };
        let call = self.shape.publish(self.holder.as_str(), version, fields);
        let client = &self.client;
        let mut fan = crate::fanout::fan_out(
            &client.nodes,
            client.config.required,
            call,
            crate::family::read_flag,
        );
        let ended = decide_extend(&mut fan, &self.shape, self.deadline()).await;
        self.in_flight.push(fan.detach(&client.background));
        match ended {
            Extended::Confirmed(_) => Ok(()),
            Extended::TooLate => Err(self.lost_error()),
            Extended::Refused => {
                self.mark_lost(LossReason::Refused);
                Err(self.lost_error())
            }
            Extended::Failed(error) => Err(error),
        }
    }

    /// Puts the entry back on `nodes` where the key is absent, for the remaining validity
    /// (docs/DESIGN.md, "Repair"). Only called right after a quorum confirmed a renewal, for
    /// the nodes that answered that they lack the entry.
    async fn repair(&self, nodes: &[usize]) {
        let Some(remaining) = self.live_deadline().map(|d| d - Instant::now()) else {
            return;
        };
        if remaining.as_millis() == 0 {
            return;
        }
        let ms = self.client.config.node_ttl_ms(remaining);
        let (call, put_back) = self.shape.repair(self.holder.as_str(), &ms);
        let answers = broadcast(&self.client.nodes, nodes.iter().copied(), call, SendBy::Sha).await;
        let repaired = answers
            .iter()
            .filter(|a| a.as_ref().is_ok_and(put_back))
            .count();
        if repaired > 0 {
            self.client.counters.repaired(repaired);
            tracing::info!(key = %self.shape, repaired, "lock entry restored on nodes that had lost it");
            self.republish(nodes).await;
        }
    }

    /// Puts the holder record (if any) back on `nodes`, after a repair there: the record is
    /// written only where the entry is this holder's, so where the repair did not put it back
    /// nothing changes.
    async fn republish(&self, nodes: &[usize]) {
        if !self.record.exists() {
            return;
        }
        let (version, fields) = self.record.current();
        let fields: Vec<(&str, &str)> = fields
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let call = self.shape.publish(self.holder.as_str(), version, &fields);
        broadcast(&self.client.nodes, nodes.iter().copied(), call, SendBy::Sha).await;
    }

    /// Releases on every node (compare-and-delete, publishing the release notice), after the
    /// lease's calls in flight. Returns at quorum; when the quorum is not reached, waits for
    /// every node's answer (each bounded by the node timeout), so that the report is exact.
    pub(crate) async fn release_on_nodes(&self) -> Outcome {
        let span = tracing::debug_span!("release", key = %self.shape);
        async {
            let _ops = self.ops.lock().await;
            self.in_flight.settle().await;
            // Stragglers finish in the background: nothing of this lease follows.
            let (outcome, _stragglers) =
                release_round(&self.client, &self.shape, self.holder.as_str()).await;
            outcome
        }
        .instrument(span)
        .await
    }

    /// What a release by [`LockGuard::release`](crate::LockGuard::release) reports (see
    /// [`release_result`]).
    pub(crate) fn release_result(&self, outcome: &Outcome, was_lost: bool) -> Result<()> {
        let held = self.state().held_to_the_end;
        release_result(&self.client, &self.shape, outcome, was_lost, held)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        for key in self.shape.keys() {
            self.client
                .held
                .remove(key.bytes(), std::ptr::from_ref(self).cast());
        }
    }
}
