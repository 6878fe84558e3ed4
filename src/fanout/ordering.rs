//! In-flight ordering: on each node, a later call of one lease never overtakes an earlier one
//! (an extend must not land after the release, a shorter extend not after a longer one, a
//! rollback not before its own acquire). The rest of the crate cites these invariants by
//! number ("ordering invariant N"); docs/DESIGN.md, "Ordering", gives the reasons.
//!
//! # Invariants
//!
//! 1. **One FIFO connection per node.** Every call to a node goes through one multiplexed
//!    connection: a request written to it runs on the node before anything written later
//!    (`node`).
//! 2. **A connection is replaced only after it failed**, never on a timeout: a timed-out
//!    request may still be queued behind a paused node, and so must be what follows it.
//! 3. **A request takes its place on its first poll.** The connection's queue is never full
//!    and the first poll is not limited by the task's budget (`node::send`), so once polled, a
//!    request is ahead of every later one. A fan-out polls every node's request before it
//!    counts an answer (`fanout::send_all`), so none is left unwritten by a quick quorum.
//! 4. **Stragglers are settled before the next call.** A call decided at quorum leaves its
//!    undecided requests ([`Stragglers`]) with its lease ([`InFlight`]); the lease's next call
//!    first stops those not yet written and waits only if one is being written right then
//!    (the handshake of `rules/progress.rs`: either the straggler sees "stopped" before it writes,
//!    or the next call sees it writing and waits). Cancel safe: everything is stopped before
//!    the first await. A call by holder value (`hold/by_holder.rs`), which has no lease, settles its own
//!    stragglers before it returns.
//! 5. **A failed attempt is rolled back behind itself.** Dropping its fan-out stops the
//!    requests not yet written (and any NOSCRIPT fallback); the rollback, sent as plain EVAL,
//!    is written onto every live connection in one poll ([`write_now_finish_later`]) before a
//!    retry can be sent.
//! 6. **A re-sent request recognises its own entry.** A request re-sent after its connection
//!    dropped may already have been applied, so it is re-sent in a form that counts this
//!    holder's own entry as its own (`scripts::Call::resend`).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{watch, Notify};

use crate::scripts::Call;

/// Invariant 5: polls `work` once, which writes its requests onto every live connection,
/// and lets it finish in a background task. What the caller sends next runs after it.
pub(crate) fn write_now_finish_later(
    background: &Arc<BackgroundWork>,
    work: impl Future<Output = ()> + Send + 'static,
) {
    let mut work = Box::pin(background.track(work));
    if futures::FutureExt::now_or_never(work.as_mut()).is_none() {
        tokio::spawn(work);
    }
}

/// [`write_now_finish_later`] from a `Drop` (a cancelled attempt's rollback, a dropped wait's
/// withdrawal): with no tokio runtime at hand (a client dropped after its runtime), nothing is
/// sent, and what `work` would have undone goes with its TTL.
pub(crate) fn write_from_drop(
    background: &Arc<BackgroundWork>,
    work: impl Future<Output = ()> + Send + 'static,
) {
    if tokio::runtime::Handle::try_current().is_ok() {
        write_now_finish_later(background, work);
    }
}

/// A client's work still running in the background: the slower nodes' answers to calls that
/// returned at quorum, rollbacks, and the releases of dropped guards (not the watchdogs).
/// [`idle`](Self::idle) waits for it, so that a short-lived process can let every reachable
/// node get every request before it exits.
#[derive(Debug, Default)]
pub(crate) struct BackgroundWork {
    running: AtomicUsize,
    idle: Notify,
}

impl BackgroundWork {
    /// `work`, counted as running from now until it ends or is dropped.
    pub(crate) fn track<F: Future>(self: &Arc<Self>, work: F) -> impl Future<Output = F::Output> {
        let running = Running::new(self.clone());
        async move {
            let _running = running;
            work.await
        }
    }

    /// Waits until no tracked work runs.
    pub(crate) async fn idle(&self) {
        loop {
            let idle = self.idle.notified();
            if self.running.load(AtomicOrdering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// Counts one piece of background work while it lives.
struct Running(Arc<BackgroundWork>);

impl Running {
    fn new(work: Arc<BackgroundWork>) -> Running {
        work.running.fetch_add(1, AtomicOrdering::AcqRel);
        Running(work)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, AtomicOrdering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The requests of a call still running after the call was decided, finishing in a
/// background task. A lease keeps those of its own calls ([`InFlight`]) until its next call
/// settles them (invariant 4).
pub(crate) struct Stragglers {
    call: Arc<Call>,
    /// Closed when the task ends (its sender is dropped with it, also on panic or shutdown).
    done: watch::Receiver<()>,
}

impl Stragglers {
    /// Lets `rest` (the call's undecided requests) finish in a background task.
    pub(crate) fn spawn(
        background: &Arc<BackgroundWork>,
        call: Arc<Call>,
        rest: impl Future<Output = ()> + Send + 'static,
    ) -> Stragglers {
        let (finished, done) = watch::channel(());
        tokio::spawn(background.track(async move {
            let _finished = finished;
            rest.await;
        }));
        Stragglers { call, done }
    }

    fn is_done(&self) -> bool {
        self.done.has_changed().is_err()
    }

    /// Stops the requests not yet written to their connection; true when one may be being
    /// written right now (the caller must wait for the task before sending anything after
    /// it).
    fn stop(&self) -> bool {
        self.call.progress.stop() && !self.is_done()
    }

    async fn finished(mut done: watch::Receiver<()>) {
        while done.changed().await.is_ok() {}
    }

    /// Makes sure no straggler can land after what the caller sends next (at most the node
    /// timeout).
    pub(crate) async fn settle(self) {
        if self.stop() {
            Self::finished(self.done).await;
        }
    }
}

/// The calls of one lease still in flight, which its next call must not overtake on any node
/// (invariant 4).
#[derive(Default)]
pub(crate) struct InFlight(Mutex<Vec<Stragglers>>);

impl InFlight {
    pub(crate) fn new(calls: Vec<Stragglers>) -> InFlight {
        InFlight(Mutex::new(calls))
    }

    fn calls(&self) -> MutexGuard<'_, Vec<Stragglers>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn push(&self, stragglers: Option<Stragglers>) {
        self.calls().extend(stragglers);
    }

    /// Stops every call's requests not yet written, then waits for those that may be on
    /// their way (at most the node timeout). Cancel safe: every call is stopped before the
    /// first await, and a call is forgotten only once nothing of it can be sent any more.
    pub(crate) async fn settle(&self) {
        let waits: Vec<watch::Receiver<()>> = {
            let mut calls = self.calls();
            calls.retain(Stragglers::stop);
            calls.iter().map(|b| b.done.clone()).collect()
        };
        for done in waits {
            Stragglers::finished(done).await;
        }
        self.calls().retain(|b| !b.is_done());
    }
}
