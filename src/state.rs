//! A client's state, shared by its clones, its guards and their background tasks: the nodes,
//! the settings, the wake-up registry and the counters behind [`Stats`].

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::fanout::ordering::BackgroundWork;
use crate::node::Nodes;
use crate::rules::config::Config;
use crate::telemetry::{self, AttemptEnd, LossReason, ReleasedBy, RenewalEnd, RenewedBy};
use crate::wakeup::courtesy::Courtesy;
use crate::wakeup::handoff::FairWaiters;
use crate::wakeup::Wakeups;

/// State shared by a client's clones and its guards.
pub(crate) struct ClientState {
    pub(crate) nodes: Nodes,
    pub(crate) config: Config,
    pub(crate) counters: Counters,
    /// Work still running in the background (see [`BackgroundWork`]).
    pub(crate) background: Arc<BackgroundWork>,
    /// Pub/sub wake-ups for waiters; `None` when disabled.
    pub(crate) wakeups: Option<Arc<Wakeups>>,
    /// Identifies this client in holder values.
    pub(crate) client_id: String,
    /// The client's waiting fair requests, for a release's hand-off.
    pub(crate) handoff: Arc<FairWaiters>,
    /// The client's live leases (see [`HeldLeases`]).
    pub(crate) held: HeldLeases,
    /// The holder notices' listeners were started (`hold::notices`).
    pub(crate) notices_started: std::sync::atomic::AtomicBool,
    /// Mutex keys just released while other clients waited (see [`Courtesy`]).
    pub(crate) courtesy: Courtesy,
}

/// A lease as the registry keeps it: type-erased (`lease::Lease`, which imports this module),
/// and weak, so that the registry never keeps a lease alive.
pub(crate) type AnyLease = Arc<dyn Any + Send + Sync>;

/// The live leases of a client, by each key they hold: a call by holder value on a lock this client
/// holds goes through its lease, so that the guard learns of it (docs/DESIGN.md, "By holder value"),
/// and a task that holds a read lock of a key is told it cannot wait for the write lock.
#[derive(Default)]
pub(crate) struct HeldLeases(Mutex<LeasesByKey>);

/// A registered lease, weakly.
type WeakLease = Weak<dyn Any + Send + Sync>;

/// The leases of each key.
type LeasesByKey = HashMap<Vec<u8>, Vec<WeakLease>, crate::fnv::FnvBuild>;

impl HeldLeases {
    fn map(&self) -> MutexGuard<'_, LeasesByKey> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a lease of `key`.
    pub(crate) fn insert(&self, key: &[u8], lease: &AnyLease) {
        let mut map = self.map();
        let leases = map.entry(key.to_vec()).or_default();
        leases.retain(|l| l.strong_count() > 0);
        leases.push(Arc::downgrade(lease));
    }

    /// Forgets the lease at `lease` (its address) of `key`.
    pub(crate) fn remove(&self, key: &[u8], lease: *const ()) {
        let mut map = self.map();
        if let Some(leases) = map.get_mut(key) {
            leases.retain(|l| l.strong_count() > 0 && l.as_ptr().cast::<()>() != lease);
            if leases.is_empty() {
                map.remove(key);
            }
        }
    }

    /// The leases of `key` still registered.
    pub(crate) fn of(&self, key: &[u8]) -> Vec<AnyLease> {
        self.map()
            .get(key)
            .map(|leases| leases.iter().filter_map(Weak::upgrade).collect())
            .unwrap_or_default()
    }
}

impl ClientState {
    pub(crate) fn new(nodes: Nodes, config: Config) -> ClientState {
        let wakeups = config.pubsub.then(|| {
            Arc::new(Wakeups::new(
                nodes.clone(),
                config.required,
                config.node_timeout,
                config.connect_timeout,
            ))
        });
        ClientState {
            nodes,
            config,
            counters: Counters::default(),
            background: Arc::default(),
            wakeups,
            client_id: uuid::Uuid::new_v4().simple().to_string(),
            handoff: Arc::default(),
            held: HeldLeases::default(),
            notices_started: std::sync::atomic::AtomicBool::new(false),
            courtesy: Courtesy::default(),
        }
    }
}

/// Counters of one client, shared by its clones. Every outcome is recorded once, here: each
/// method below bumps the counter behind [`Stats`] and records the metric (`telemetry`), so
/// the two never disagree.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) attempts: AtomicU64,
    pub(crate) ordered: AtomicU64,
    pub(crate) acquired: AtomicU64,
    pub(crate) contended: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) release_failed: AtomicU64,
    pub(crate) extended: AtomicU64,
    pub(crate) lost: AtomicU64,
    pub(crate) repaired: AtomicU64,
    pub(crate) woken: AtomicU64,
    pub(crate) noticed: AtomicU64,
}

impl Counters {
    /// An attempt starts (one fan-out to every node, or to the key's arbiter first).
    pub(crate) fn attempt_started(&self, ordered: bool) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        if ordered {
            self.ordered.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An attempt (or a claim of a grant) ended.
    pub(crate) fn attempt(&self, end: AttemptEnd) {
        let counter = match end {
            AttemptEnd::Acquired => &self.acquired,
            AttemptEnd::Contended => &self.contended,
            AttemptEnd::Failed => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        telemetry::attempt(end);
    }

    /// A fair lock was held from the grant notices of a quorum (counted as acquired too).
    pub(crate) fn held_from_notices(&self) {
        self.noticed.fetch_add(1, Ordering::Relaxed);
        self.attempt(AttemptEnd::Acquired);
    }

    /// A failed or contended attempt is rolled back.
    pub(crate) fn rollback(&self) {
        telemetry::rollback();
    }

    /// A wait between two attempts ended: by a notice (a release's, a grant's, the lapse of
    /// a grant to the waiter before) or by the waiter's timer.
    pub(crate) fn wakeup(&self, by_notice: bool) {
        if by_notice {
            self.woken.fetch_add(1, Ordering::Relaxed);
        }
        telemetry::wakeup(by_notice);
    }

    /// A renewal (an extend, the watchdog's) ended.
    pub(crate) fn renewal(&self, by: RenewedBy, end: RenewalEnd) {
        if end == RenewalEnd::Confirmed {
            self.extended.fetch_add(1, Ordering::Relaxed);
        }
        telemetry::renewal(by, end);
    }

    /// A lock was found lost.
    pub(crate) fn lost(&self, reason: LossReason) {
        self.lost.fetch_add(1, Ordering::Relaxed);
        telemetry::lost(reason);
    }

    /// Nodes got an entry back from a repair.
    pub(crate) fn repaired(&self, nodes: usize) {
        self.repaired.fetch_add(nodes as u64, Ordering::Relaxed);
        telemetry::repaired(nodes);
    }

    /// A release ended, confirmed by a quorum or not. Releases of dropped guards are not
    /// counted in the stats (nobody learns their outcome), only in the metrics.
    pub(crate) fn release(&self, by: ReleasedBy, confirmed: bool) {
        if by == ReleasedBy::Release {
            let counter = match confirmed {
                true => &self.released,
                false => &self.release_failed,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        telemetry::release(by, confirmed);
    }
}

impl ClientState {
    /// A short tag of this client (the start of its id): a fair waiter's id starts with it.
    pub(crate) fn client_tag(&self) -> &str {
        &self.client_id[..8]
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let c = &self.counters;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            attempts: get(&c.attempts),
            ordered: get(&c.ordered),
            acquired: get(&c.acquired),
            contended: get(&c.contended),
            failed: get(&c.failed),
            released: get(&c.released),
            release_failed: get(&c.release_failed),
            extended: get(&c.extended),
            lost: get(&c.lost),
            repaired: get(&c.repaired),
            woken: get(&c.woken),
            noticed: get(&c.noticed),
            notices: self.wakeups.as_ref().map_or(0, |w| w.notices()),
            waiting: self.wakeups.as_ref().map_or(0, |w| w.waiting()),
            redirects: self.nodes.iter().map(crate::node::Node::redirects).sum(),
        }
    }
}

/// A snapshot of a client's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Acquire attempts (each a fan-out to all nodes, or to the key's arbiter first).
    pub attempts: u64,
    /// Of `attempts`, those of a mutex or multi-key waiter that lost an earlier attempt (and
    /// whose pause did not run its whole retry delay), which asked the key's arbiter first and
    /// the other nodes only after its yes (docs/DESIGN.md, "Waiting").
    pub ordered: u64,
    /// Attempts that returned a guard.
    pub acquired: u64,
    /// Attempts refused because others held the lock.
    pub contended: u64,
    /// Attempts that failed for lack of nodes or validity.
    pub failed: u64,
    /// Releases a quorum confirmed.
    pub released: u64,
    /// Releases a quorum did not confirm (the lock was lost or nodes failed).
    pub release_failed: u64,
    /// Extensions and watchdog renewals a quorum confirmed.
    pub extended: u64,
    /// Guards that became lost (including fixed-TTL locks whose validity ran out unreleased).
    pub lost: u64,
    /// Node entries restored by the watchdog's repair.
    pub repaired: u64,
    /// Waits that a release notice ended (the rest ended on their timer).
    pub woken: u64,
    /// Wake-ups from release notices: each time a quorum of nodes reported a waited-on key
    /// free.
    pub notices: u64,
    /// Tasks currently waiting for a release notice on some key (a gauge, not a counter).
    pub waiting: u64,
    /// Of `acquired`, fair locks held from the grant notices of a quorum of nodes, without an
    /// attempt of their own (a waiter of another client than the releasing one; docs/
    /// DESIGN.md, "Grants held from their notices").
    pub noticed: u64,
    /// `MOVED` and `ASK` answers of cluster nodes (docs/DESIGN.md, "Cluster nodes"): each is
    /// a request not run, one "no" of its node; the node's slot map is corrected at once.
    pub redirects: u64,
}
