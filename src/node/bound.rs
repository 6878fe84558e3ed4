//! The time bound of a node request that is not part of a fan-out ([`Bounded`]), and the
//! rule that gives a request its limit once more when its deadline is found passed long after
//! it passed (a stalled thread, not a silent node): [`late`], [`until_or_late`].

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::Value;

use super::Node;
use crate::error::NodeFailure;
use crate::scripts::Call;

impl Node {
    /// Runs `request` within `limit`: the one bound of a node request that is not part of a
    /// fan-out (a fan-out bounds all its requests by one deadline: see
    /// [`fan_out`](crate::fanout::fan_out)). `expired` is set before a request that ran out of
    /// time is dropped, so that it is recorded as timed out, not stopped.
    pub(super) fn bounded<'a, F>(
        &'a self,
        limit: Duration,
        request: F,
        expired: &'a AtomicBool,
        call: Option<&'a Call>,
    ) -> Bounded<'a, F>
    where
        F: Future<Output = Result<Value, NodeFailure>>,
    {
        Bounded {
            request,
            sleep: tokio::time::sleep(limit),
            node: self,
            limit,
            expired,
            call,
            rearmed: false,
        }
    }
}

pin_project_lite::pin_project! {
    /// A node request bounded by a time limit (see [`Node::bounded`]). A future of its own,
    /// not an `async fn`: an `async fn` would keep the request in its state beside the timer,
    /// doubling the size of every node request's future; and the request must still be
    /// alive when `expired` is set.
    pub(super) struct Bounded<'a, F> {
        #[pin]
        request: F,
        #[pin]
        sleep: tokio::time::Sleep,
        node: &'a Node,
        limit: Duration,
        expired: &'a AtomicBool,
        // The call the request is of, to name a cluster's primary in a timeout.
        call: Option<&'a Call>,
        // The limit was found passed long after it passed, and was set once more (see
        // `late`).
        rearmed: bool,
    }
}

impl<F: Future<Output = Result<Value, NodeFailure>>> Future for Bounded<'_, F> {
    type Output = Result<Value, NodeFailure>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let mut this = self.project();
        if let std::task::Poll::Ready(answer) = this.request.as_mut().poll(cx) {
            return std::task::Poll::Ready(answer);
        }
        let due = this.sleep.deadline();
        std::task::ready!(this.sleep.as_mut().poll(cx));
        // Found passed long after it passed: this task could not run meanwhile (a stalled
        // thread), and neither could the connection's writer and reader; the request may
        // have left only now. Once, the node gets its time again (see `late`).
        if !*this.rearmed && late(due, *this.limit) {
            *this.rearmed = true;
            this.sleep
                .as_mut()
                .reset(tokio::time::Instant::now() + *this.limit);
            cx.waker().wake_by_ref();
            return std::task::Poll::Pending;
        }
        this.expired.store(true, Ordering::Relaxed);
        std::task::Poll::Ready(Err(this.node.no_answer_to(*this.limit, *this.call)))
    }
}

/// Whether a deadline of a request bounded by `limit` is found passed so long after `due`
/// (more than a quarter of the limit) that the task waiting for it could not have been
/// running: its thread stalled (a blocking call on a current-thread runtime), and the
/// connections' writers and readers, tasks of the same runtime, stalled with it. Counting
/// the node as silent then would open its breaker on a healthy fleet for the client's own
/// stall; the request gets its limit once more instead. Safe: a lock's validity is measured
/// from the call's start, whatever the wait.
pub(crate) fn late(due: tokio::time::Instant, limit: Duration) -> bool {
    tokio::time::Instant::now().saturating_duration_since(due) > limit / 4
}

/// `work` until `due`; a deadline found passed long after it passed ([`late`]) gives it
/// `limit` once more. `Err` when it did not finish.
pub(crate) async fn until_or_late<F: Future + Unpin>(
    due: tokio::time::Instant,
    limit: Duration,
    mut work: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    match tokio::time::timeout_at(due, &mut work).await {
        Err(_) if late(due, limit) => tokio::time::timeout(limit, work).await,
        done => done,
    }
}
