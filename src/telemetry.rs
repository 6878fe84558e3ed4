//! Metrics through the `metrics` facade (feature `metrics`; the table of names is in the
//! README, "Metrics"). With the feature off every function here is empty and compiles away.
//!
//! No label carries a lock key, a holder value or a node address: nodes are labelled by their
//! index in the builder's list, so that a metrics backend never learns a secret and the label
//! sets stay small and fixed.

#[cfg(feature = "metrics")]
use tokio::time::Instant;

/// Metric names, as exported.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) mod names {
    pub(crate) const ACQUIRE_DURATION: &str = "quorum_lock_acquire_duration_seconds";
    pub(crate) const ATTEMPTS: &str = "quorum_lock_acquire_attempts_total";
    pub(crate) const HELD: &str = "quorum_lock_held";
    pub(crate) const HOLD_DURATION: &str = "quorum_lock_hold_duration_seconds";
    pub(crate) const LOST: &str = "quorum_lock_lost_total";
    pub(crate) const RENEWALS: &str = "quorum_lock_renewals_total";
    pub(crate) const RELEASES: &str = "quorum_lock_releases_total";
    pub(crate) const ROLLBACKS: &str = "quorum_lock_rollbacks_total";
    pub(crate) const REPAIRS: &str = "quorum_lock_repaired_entries_total";
    pub(crate) const NODE_REQUESTS: &str = "quorum_lock_node_requests_total";
    pub(crate) const NODE_DURATION: &str = "quorum_lock_node_request_duration_seconds";
    pub(crate) const WAKEUPS: &str = "quorum_lock_wakeups_total";
    pub(crate) const LEADERSHIPS: &str = "quorum_lock_leaderships";
    pub(crate) const LEADER_TERM: &str = "quorum_lock_leader_term";
    pub(crate) const LEADER_CHANGES: &str = "quorum_lock_leader_changes_total";
}

/// How one acquire call (all its attempts) ended.
#[derive(Clone, Copy)]
pub(crate) enum AcquireEnd {
    Acquired,
    /// `try_acquire`: someone else holds the lock.
    Busy,
    /// The wait ran out while others held the lock.
    Timeout,
    /// Nodes failed, or the quorum came too late.
    Failed,
}

/// How one attempt ended.
#[derive(Clone, Copy)]
pub(crate) enum AttemptEnd {
    Acquired,
    Contended,
    Failed,
}

/// Why a lock was found lost.
#[derive(Clone, Copy)]
pub(crate) enum LossReason {
    /// Its validity ran out before a renewal was confirmed.
    Expired,
    /// Enough nodes answered that the entry is gone that no quorum can hold it.
    Refused,
    /// A break's notice (`QuorumLock::break_lock`).
    Broken,
}

/// Who asked for a renewal.
#[derive(Clone, Copy)]
pub(crate) enum RenewedBy {
    Watchdog,
    Extend,
}

/// How a renewal ended.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewalEnd {
    Confirmed,
    /// No quorum, but the lock is still valid (the watchdog retries).
    Failed,
    Lost,
}

/// How a hold ended.
#[derive(Clone, Copy)]
pub(crate) enum HoldEnd {
    /// Released or dropped by its holder.
    Ended,
    Lost,
}

/// Who released a lock on the nodes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleasedBy {
    /// `LockGuard::release`.
    Release,
    /// A guard dropped without release: released in the background.
    Drop,
}

/// How one node request ended.
#[derive(Clone, Copy)]
pub(crate) enum NodeResult {
    /// The node answered (whatever the answer meant for the lock).
    Answered,
    /// The node answered with an error, or the connection failed.
    Error,
    /// No answer within the node timeout.
    Timeout,
    /// Stopped by the caller before the node answered (decided without it).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    Stopped,
}

#[cfg(feature = "metrics")]
impl NodeResult {
    /// Every result, in declaration order: `ALL[r as usize] == r`.
    const ALL: [NodeResult; 4] = [
        NodeResult::Answered,
        NodeResult::Error,
        NodeResult::Timeout,
        NodeResult::Stopped,
    ];
}

#[cfg(feature = "metrics")]
impl LossReason {
    fn label(self) -> &'static str {
        match self {
            LossReason::Expired => "expired",
            LossReason::Refused => "refused",
            LossReason::Broken => "broken",
        }
    }
}

#[cfg(feature = "metrics")]
impl RenewedBy {
    fn label(self) -> &'static str {
        match self {
            RenewedBy::Watchdog => "watchdog",
            RenewedBy::Extend => "extend",
        }
    }
}

#[cfg(feature = "metrics")]
impl RenewalEnd {
    fn label(self) -> &'static str {
        match self {
            RenewalEnd::Confirmed => "confirmed",
            RenewalEnd::Failed => "failed",
            RenewalEnd::Lost => "lost",
        }
    }
}

#[cfg(feature = "metrics")]
impl NodeResult {
    fn label(self) -> &'static str {
        match self {
            NodeResult::Answered => "answered",
            NodeResult::Error => "error",
            NodeResult::Timeout => "timeout",
            NodeResult::Stopped => "stopped",
        }
    }
}

/// When something timed began (nothing, with the feature off: no clock read).
#[derive(Clone, Copy)]
pub(crate) struct Started {
    #[cfg(feature = "metrics")]
    at: Instant,
}

impl Started {
    #[inline]
    pub(crate) fn now() -> Started {
        Started {
            #[cfg(feature = "metrics")]
            at: Instant::now(),
        }
    }
}

/// One acquire call ended.
#[inline]
pub(crate) fn acquire_ended(started: Started, end: AcquireEnd) {
    #[cfg(feature = "metrics")]
    // Literal labels, one match arm each: the macro then keeps a static key rather than
    // building one (a `Vec` of labels) on every call.
    match end {
        AcquireEnd::Acquired => {
            metrics::histogram!(names::ACQUIRE_DURATION, "outcome" => "acquired")
        }
        AcquireEnd::Busy => metrics::histogram!(names::ACQUIRE_DURATION, "outcome" => "busy"),
        AcquireEnd::Timeout => metrics::histogram!(names::ACQUIRE_DURATION, "outcome" => "timeout"),
        AcquireEnd::Failed => metrics::histogram!(names::ACQUIRE_DURATION, "outcome" => "failed"),
    }
    .record(started.at.elapsed());
    #[cfg(not(feature = "metrics"))]
    let _ = (started, end);
}

/// One attempt (one fan-out) ended.
#[inline]
pub(crate) fn attempt(end: AttemptEnd) {
    #[cfg(feature = "metrics")]
    match end {
        AttemptEnd::Acquired => metrics::counter!(names::ATTEMPTS, "outcome" => "acquired"),
        AttemptEnd::Contended => metrics::counter!(names::ATTEMPTS, "outcome" => "contended"),
        AttemptEnd::Failed => metrics::counter!(names::ATTEMPTS, "outcome" => "failed"),
    }
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = end;
}

/// A failed attempt's rollback was sent.
#[inline]
pub(crate) fn rollback() {
    #[cfg(feature = "metrics")]
    metrics::counter!(names::ROLLBACKS).increment(1);
}

/// An observer saw its election's leader change. (No label names the election: its name is
/// a key, and keys are never labels.)
pub(crate) fn leader_changed() {
    #[cfg(feature = "metrics")]
    metrics::counter!(names::LEADER_CHANGES).increment(1);
}

/// A lock was found lost.
#[inline]
pub(crate) fn lost(reason: LossReason) {
    #[cfg(feature = "metrics")]
    metrics::counter!(names::LOST, "reason" => reason.label()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// A renewal (extend or watchdog) ended.
#[inline]
pub(crate) fn renewal(by: RenewedBy, end: RenewalEnd) {
    #[cfg(feature = "metrics")]
    metrics::counter!(names::RENEWALS, "by" => by.label(), "outcome" => end.label()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (by, end);
}

/// A release on the nodes ended; `confirmed` when a quorum confirmed it and the lock had not
/// been lost before.
#[inline]
pub(crate) fn release(by: ReleasedBy, confirmed: bool) {
    #[cfg(feature = "metrics")]
    {
        let n = names::RELEASES;
        match (by, confirmed) {
            (ReleasedBy::Release, true) => {
                metrics::counter!(n, "by" => "release", "outcome" => "confirmed")
            }
            (ReleasedBy::Release, false) => {
                metrics::counter!(n, "by" => "release", "outcome" => "not_held")
            }
            (ReleasedBy::Drop, true) => {
                metrics::counter!(n, "by" => "drop", "outcome" => "confirmed")
            }
            (ReleasedBy::Drop, false) => {
                metrics::counter!(n, "by" => "drop", "outcome" => "not_held")
            }
        }
        .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (by, confirmed);
}

/// `n` node entries were restored by the watchdog's repair.
#[inline]
pub(crate) fn repaired(n: usize) {
    #[cfg(feature = "metrics")]
    metrics::counter!(names::REPAIRS).increment(n as u64);
    #[cfg(not(feature = "metrics"))]
    let _ = n;
}

/// A wait between two attempts ended: by a release notice, or on its timer.
#[inline]
pub(crate) fn wakeup(by_notice: bool) {
    #[cfg(feature = "metrics")]
    {
        let source = if by_notice { "notice" } else { "timer" };
        metrics::counter!(names::WAKEUPS, "source" => source).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = by_notice;
}

/// The metrics side of one hold: the gauge of locks held goes up when it is made and down,
/// with the hold's duration recorded, when it ends (once).
pub(crate) struct Hold {
    #[cfg(feature = "metrics")]
    since: Instant,
    /// The hold is an election's leadership (counted in its gauge until it ends).
    #[cfg(feature = "metrics")]
    leads: std::sync::atomic::AtomicBool,
}

impl Hold {
    #[inline]
    pub(crate) fn start() -> Hold {
        #[cfg(feature = "metrics")]
        {
            metrics::gauge!(names::HELD).increment(1.0);
            Hold {
                since: Instant::now(),
                leads: std::sync::atomic::AtomicBool::new(false),
            }
        }
        #[cfg(not(feature = "metrics"))]
        Hold {}
    }

    /// The hold became an election's leadership, with `term`; before it ended (a hold that
    /// ended first is not counted).
    pub(crate) fn leads(&self, term: u64) {
        #[cfg(feature = "metrics")]
        {
            self.leads.store(true, std::sync::atomic::Ordering::SeqCst);
            metrics::gauge!(names::LEADERSHIPS).increment(1.0);
            metrics::gauge!(names::LEADER_TERM).set(term as f64);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = term;
    }

    /// The hold ended; called once per hold.
    #[inline]
    pub(crate) fn end(&self, end: HoldEnd) {
        #[cfg(feature = "metrics")]
        {
            metrics::gauge!(names::HELD).decrement(1.0);
            if self.leads.swap(false, std::sync::atomic::Ordering::SeqCst) {
                metrics::gauge!(names::LEADERSHIPS).decrement(1.0);
            }
            match end {
                HoldEnd::Ended => metrics::histogram!(names::HOLD_DURATION, "end" => "ended"),
                HoldEnd::Lost => metrics::histogram!(names::HOLD_DURATION, "end" => "lost"),
            }
            .record(self.since.elapsed());
        }
        #[cfg(not(feature = "metrics"))]
        let _ = end;
    }
}

/// One node request, timed from its start; records its result and, when the node answered,
/// its latency. A request dropped before it ended counts as stopped.
pub(crate) struct NodeRequest {
    #[cfg(feature = "metrics")]
    node: usize,
    #[cfg(feature = "metrics")]
    operation: &'static str,
    #[cfg(feature = "metrics")]
    started: Instant,
    #[cfg(feature = "metrics")]
    done: bool,
}

impl NodeRequest {
    #[inline]
    pub(crate) fn start(node: usize, operation: &'static str) -> NodeRequest {
        #[cfg(feature = "metrics")]
        {
            NodeRequest {
                node,
                operation,
                started: Instant::now(),
                done: false,
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = (node, operation);
            NodeRequest {}
        }
    }

    #[inline]
    pub(crate) fn end(mut self, result: NodeResult) {
        #[cfg(feature = "metrics")]
        {
            self.done = true;
            self.record(result);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (&mut self, result);
    }

    #[cfg(feature = "metrics")]
    fn record(&self, result: NodeResult) {
        // The keys are built once per node and operation: a `counter!` with labels builds
        // (allocates and hashes) its key on every call, also without a recorder installed.
        let keys = node_keys::get(self.node, self.operation);
        let requests = &keys.requests[result as usize];
        metrics::with_recorder(|r| r.register_counter(requests, &node_keys::METADATA)).increment(1);
        if matches!(result, NodeResult::Answered) {
            metrics::with_recorder(|r| r.register_histogram(&keys.duration, &node_keys::METADATA))
                .record(self.started.elapsed());
        }
    }
}

/// The metric keys of one node's requests, by operation: built on a node's first request of
/// an operation, then kept for the process's life (a few nodes times the scripts' names).
#[cfg(feature = "metrics")]
mod node_keys {
    use std::collections::HashMap;
    use std::sync::{OnceLock, PoisonError, RwLock};

    use metrics::{Key, Label, Level, Metadata};

    use super::{names, node_label, NodeResult};

    /// What `counter!` and `histogram!` called here would give.
    pub(super) static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    /// One node and operation's keys.
    pub(super) struct NodeKeys {
        /// The request counter's, indexed by `NodeResult as usize`.
        pub(super) requests: [Key; 4],
        /// The latency histogram's.
        pub(super) duration: Key,
    }

    /// Node index (capped as its label is), and the operation name's address and length: the
    /// names are `&'static str` literals, so a name has one address (or a few, each its own
    /// entry with the same labels).
    type Id = (usize, usize, usize);

    type Map = HashMap<Id, &'static NodeKeys, crate::fnv::FnvBuild>;

    pub(super) fn get(node: usize, operation: &'static str) -> &'static NodeKeys {
        static KEYS: OnceLock<RwLock<Map>> = OnceLock::new();
        let node = node.min(crate::scripts::MAX_NODES);
        let id = (node, operation.as_ptr() as usize, operation.len());
        let map = KEYS.get_or_init(Default::default);
        if let Some(keys) = map.read().unwrap_or_else(PoisonError::into_inner).get(&id) {
            return keys;
        }
        let mut map = map.write().unwrap_or_else(PoisonError::into_inner);
        map.entry(id)
            .or_insert_with(|| Box::leak(Box::new(build(node_label(node), operation))))
    }

    fn build(node: &'static str, operation: &'static str) -> NodeKeys {
        let key = |name: &'static str, result: Option<NodeResult>| {
            let mut labels = vec![
                Label::from_static_parts("node", node),
                Label::from_static_parts("operation", operation),
            ];
            labels.extend(result.map(|r| Label::from_static_parts("result", r.label())));
            Key::from_parts(name, labels)
        };
        NodeKeys {
            requests: NodeResult::ALL.map(|r| key(names::NODE_REQUESTS, Some(r))),
            duration: key(names::NODE_DURATION, None),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn each_result_has_its_own_key_in_the_order_of_the_enum() {
            let keys = get(1, "acquire");
            for (i, r) in NodeResult::ALL.into_iter().enumerate() {
                assert_eq!(r as usize, i);
                let labels: Vec<_> = keys.requests[i]
                    .labels()
                    .map(|l| (l.key(), l.value()))
                    .collect();
                assert_eq!(
                    labels,
                    [
                        ("node", "1"),
                        ("operation", "acquire"),
                        ("result", r.label())
                    ]
                );
            }
            assert!(std::ptr::eq(keys, get(1, "acquire")));
            // A node past the labelled ones shares the "other" label's keys.
            let far = get(usize::MAX, "acquire");
            assert_eq!(
                far.duration.labels().next().map(|l| l.value()),
                Some("other")
            );
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for NodeRequest {
    fn drop(&mut self) {
        if !self.done {
            self.record(NodeResult::Stopped);
        }
    }
}

/// The label of node `i`: its index in the builder's list, as a static string (no allocation
/// per request).
#[cfg(feature = "metrics")]
fn node_label(i: usize) -> &'static str {
    use std::sync::OnceLock;
    static LABELS: OnceLock<Vec<&'static str>> = OnceLock::new();
    let labels = LABELS.get_or_init(|| {
        (0..crate::scripts::MAX_NODES)
            .map(|i| &*Box::leak(i.to_string().into_boxed_str()))
            .collect()
    });
    labels.get(i).copied().unwrap_or("other")
}

/// Describes every metric (units and help) to the installed recorder. Called by
/// [`Builder::build`](crate::Builder::build); call it again after installing a recorder
/// later than the first client was built.
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_histogram!(
        names::ACQUIRE_DURATION,
        Unit::Seconds,
        "Duration of one acquire call (all its attempts), by outcome"
    );
    describe_counter!(
        names::ATTEMPTS,
        "Acquire attempts (one fan-out each), by outcome"
    );
    describe_gauge!(
        names::HELD,
        "Locks held: acquired, not yet released, dropped or lost"
    );
    describe_histogram!(
        names::HOLD_DURATION,
        Unit::Seconds,
        "Time from acquisition to release, drop or loss"
    );
    describe_counter!(names::LOST, "Locks found lost, by reason");
    describe_counter!(
        names::RENEWALS,
        "Renewals (extend and watchdog), by outcome"
    );
    describe_counter!(names::RELEASES, "Releases on the nodes, by outcome");
    describe_counter!(
        names::ROLLBACKS,
        "Failed attempts rolled back on every node"
    );
    describe_counter!(
        names::REPAIRS,
        "Node entries restored by the watchdog's repair"
    );
    describe_counter!(
        names::NODE_REQUESTS,
        "Requests to one node, by node index, operation and result"
    );
    describe_histogram!(
        names::NODE_DURATION,
        Unit::Seconds,
        "Latency of answered requests to one node, by node index and operation"
    );
    describe_counter!(
        names::WAKEUPS,
        "Waits between acquire attempts, by what ended them"
    );
    describe_gauge!(names::LEADERSHIPS, "Elections this process leads");
    describe_gauge!(
        names::LEADER_TERM,
        "The term of the latest leadership this process won"
    );
    describe_counter!(
        names::LEADER_CHANGES,
        "Changes of leader, term or value that this process's observers returned"
    );
}
