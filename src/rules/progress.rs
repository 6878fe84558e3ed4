// The stop-or-wait handshake between a call's requests still in flight (stragglers) and the
// next call of the same lease (ordering invariant 4). Included by `lib.rs`
// with std's atomics, and by tests/loom_progress.rs with loom's: this file names
// `AtomicBool`, `AtomicU64` and `Ordering` without importing them.

/// Lets a later call of the same lease (a renewal, the release) know whether it can be sent at
/// once. A request is "on its way" only while it is being written to its connection: before,
/// it checks whether the call was stopped (and then is never written); after, it holds its
/// place in the connection's queue (ordering invariant 3), so anything written later runs
/// after it. So the later call stops the call and waits only when a request is caught in that
/// short window; a request still waiting for its connection, or for a NOSCRIPT fallback or a
/// re-send, checks again before it writes and is never written.
///
/// Each side writes its flag and then reads the other's (a Dekker-style handshake). Every
/// access is a read-modify-write, so that the handshake holds by the modification order of
/// each flag alone (an RMW reads the latest value, and a release RMW read by an acquire RMW
/// synchronizes), not only by the total order of `SeqCst` loads, which loom does not model:
/// tests/loom_progress.rs checks every interleaving.
#[derive(Default)]
pub(crate) struct Progress {
    /// Bit `i`: node `i`'s request is being written to its connection.
    writing: AtomicU64,
    stopped: AtomicBool,
}

impl Progress {
    /// Before a node's request is written: false when the call was stopped (the request must
    /// not be written); true when it may be, and is now "on its way" until
    /// [`written`](Self::written).
    pub(crate) fn may_send(&self, index: usize) -> bool {
        self.writing.fetch_or(1 << index, Ordering::SeqCst);
        if self.stopped.fetch_or(false, Ordering::SeqCst) {
            self.writing.fetch_and(!(1 << index), Ordering::SeqCst);
            return false;
        }
        true
    }

    /// After a node's request was first polled: it holds its place in the queue.
    pub(crate) fn written(&self, index: usize) {
        self.writing.fetch_and(!(1 << index), Ordering::SeqCst);
    }

    /// Stops every request not yet written; true when one may be being written right now
    /// (the caller must wait for the call to end before writing anything after it).
    pub(crate) fn stop(&self) -> bool {
        self.stopped.swap(true, Ordering::SeqCst);
        self.writing.fetch_or(0, Ordering::SeqCst) != 0
    }
}
