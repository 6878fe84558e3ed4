// The stop-or-wait handshake between a call's requests still in flight (stragglers) and the
// next call of the same lease (ordering invariant 4). Included by `lib.rs`
// with std's atomics, and by tests/loom_progress.rs with loom's: this file names
// `AtomicBool`, `AtomicU64` and `Ordering` without importing them.

/// Lets a later call of the same lease (a renewal, the release) know whether it can be sent at
/// once: a request whose send has begun keeps its place in the connection's queue (the
/// multiplexed connection's channel is FIFO, also when full), so anything sent later runs
/// after it on that node. A request that has not begun (still connecting, or between a
/// NOSCRIPT answer and its EVAL fallback, or between a dropped connection and the retry) could
/// be overtaken, so the later call either waits for it or stops it: either the straggler sees
/// `stopped` before it sends, or the caller sees it unqueued and waits.
///
/// Each side writes its flag and then reads the other's (a Dekker-style handshake). Every
/// access is a read-modify-write, so that the handshake holds by the modification order of
/// each flag alone (an RMW reads the latest value, and a release RMW read by an acquire RMW
/// synchronizes), not only by the total order of `SeqCst` loads, which loom does not model:
/// tests/loom_progress.rs checks every interleaving.
#[derive(Default)]
#[allow(unreachable_pub)]
pub struct Progress {
    /// Bit `i`: node `i`'s request holds its place in the queue.
    queued: AtomicU64,
    stopped: AtomicBool,
}

impl Progress {
    /// Before a node's request is sent: false when the caller has stopped the call.
    pub fn may_send(&self, slot: usize) -> bool {
        self.queued.fetch_and(!(1 << slot), Ordering::SeqCst);
        !self.stopped.fetch_or(false, Ordering::SeqCst)
    }

    /// After a node's request was first polled: it holds its place in the queue.
    pub fn queued(&self, slot: usize) {
        self.queued.fetch_or(1 << slot, Ordering::SeqCst);
    }

    /// Stops every request of the `nodes` nodes not yet queued; true when one may still be on
    /// its way (the caller must wait for the stragglers before overtaking them).
    pub fn stop(&self, nodes: usize) -> bool {
        self.stopped.swap(true, Ordering::SeqCst);
        let all = if nodes >= 64 {
            u64::MAX
        } else {
            (1u64 << nodes) - 1
        };
        self.queued.fetch_or(0, Ordering::SeqCst) & all != all
    }
}

