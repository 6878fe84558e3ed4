//! Sends one call to every node at once and tallies the answers, deciding as soon as the
//! outcome is known (RedLock steps 2 and 3 for acquire; the same shape serves extend, release
//! and the fencing write-back).

pub(crate) mod ordering;

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::Value;
use tokio::time::{Instant, Sleep};

use crate::error::{Error, FailureKind, NodeFailure, Op};
use crate::failpoints::FailPoint;
use crate::family::{granted_to, Answer, Reader};
use crate::fanout::ordering::{BackgroundWork, Stragglers};
use crate::node::{Node, Nodes};
use crate::rules::quorum::{Decision, Tally, Vote};
use crate::scripts::{Call, SendBy};

/// The answers counted so far of one fan-out.
pub(crate) struct Outcome {
    pub(crate) decision: Decision,
    pub(crate) tally: Tally,
    pub(crate) failures: Vec<NodeFailure>,
    /// The smallest remaining TTL another holder reported (acquire only).
    pub(crate) hint: Option<Duration>,
    /// The nodes that answered with a refusal (in answer order).
    pub(crate) refused: Vec<usize>,
    /// Nodes whose request was never written (their circuit breaker was open, or their
    /// build-time check had not answered): nothing to undo there.
    pub(crate) unsent: Vec<usize>,
    /// The largest value among the yes answers counted.
    pub(crate) max_yes: Option<i64>,
    /// Bit `i`: node `i` answered yes.
    pub(crate) yes: u64,
    /// The waiters a fair lock's release handed the key to, with the grant's TTL in ms, one
    /// entry per node that did.
    pub(crate) granted: Vec<(Vec<u8>, i64)>,
    /// How many refusals came with a ticket number, and the largest.
    pub(crate) drawn: usize,
    pub(crate) max_drawn: Option<i64>,
}

/// One node's answer to a call, with the node's index.
pub(crate) type NodeAnswer = (usize, Result<Value, NodeFailure>);

/// One node's part of a fan-out, owning what it needs so that it can outlive the caller;
/// unbounded: the fan-out bounds all its requests by one deadline. Marks the request polled
/// (see [`send_all`]).
fn node_call(
    nodes: &Nodes,
    i: usize,
    call: &Arc<Call>,
) -> impl Future<Output = NodeAnswer> + Send + 'static {
    let (nodes, call) = (nodes.clone(), call.clone());
    async move {
        call.mark_polled(i);
        // A durable vote's `WAITAOF` follows on the same connection (`Node::run`).
        let answer = nodes[i].run(&call, SendBy::Sha, i, call.expired()).await;
        (i, answer)
    }
}

/// Bits `0..n`.
pub(crate) fn all_nodes(n: usize) -> u64 {
    u64::MAX.checked_shr(64 - n as u32).unwrap_or(0)
}

/// Polls the requests of a fan-out until each was polled once, and so written (ordering
/// invariant 3), unless it waits for its connection; keeps the answers that come meanwhile in
/// `early`, to be counted first.
///
/// One poll of the set is not enough: it returns at the first request that is ready, and
/// yields after two that were woken while being polled, leaving the rest unpolled. On a
/// loaded machine a node's answer can come within its request's first poll (the thread
/// writing it is preempted by the one reading the answer), and a quorum of such answers would
/// decide the call before the last nodes' requests were ever written: a later call of the
/// lease then stops them (ordering invariant 4), so those nodes never get the request. RedLock
/// sends to every node at once.
fn send_all<F>(
    pending: &mut FuturesUnordered<F>,
    call: &Call,
    asked: u64,
    early: &mut Vec<NodeAnswer>,
    cx: &mut Context<'_>,
) where
    F: Future<Output = NodeAnswer>,
{
    let (all, nodes) = (asked, asked.count_ones());
    // The requests not yet polled lead the set's queue (a woken request queues behind them),
    // so every round polls one at least: `nodes` rounds are enough. The bound only keeps a
    // change of the set's internals from looping here (the rest are then polled later).
    for _ in 0..nodes {
        if call.polled() & all == all {
            return;
        }
        match pending.poll_next_unpin(cx) {
            Poll::Ready(Some(answer)) => early.push(answer),
            Poll::Ready(None) => return,
            // Yielded: the set woke this task, and the requests not yet polled still lead.
            Poll::Pending => {}
        }
    }
}

/// The longest of the nodes' timeouts (they are all the client's node timeout).
pub(crate) fn call_timeout(nodes: &[Node]) -> Duration {
    nodes.iter().map(Node::timeout).max().unwrap_or_default()
}

impl Outcome {
    /// No answer counted yet.
    pub(crate) fn empty(nodes: usize, required: usize) -> Outcome {
        let required = match crate::failpoints::on(FailPoint::QuorumOfOne) {
            true => 1,
            false => required,
        };
        let tally = Tally::new(nodes, required);
        Outcome {
            decision: tally.decision(),
            tally,
            failures: Vec::new(),
            hint: None,
            refused: Vec::new(),
            unsent: Vec::new(),
            max_yes: None,
            yes: 0,
            granted: Vec::new(),
            drawn: 0,
            max_drawn: None,
        }
    }

    /// The error of a release that did not reach the quorum: the exact count, and the
    /// per-node failures.
    pub(crate) fn not_held(&self, key: &impl std::fmt::Display) -> Error {
        Error::NotHeld {
            key: key.to_string(),
            confirmed: self.tally.yes(),
            required: self.tally.required(),
            failures: self.failures.clone(),
        }
    }

    /// The error of a release that did not reach the quorum while too few nodes refused it to
    /// rule one out: the nodes that did not confirm were slow, silent or unreachable.
    pub(crate) fn release_unconfirmed(&self, key: &impl std::fmt::Display) -> Error {
        Error::ReleaseUnconfirmed {
            key: key.to_string(),
            confirmed: self.tally.yes(),
            required: self.tally.required(),
            refused: self.tally.refused(),
            failures: self.failures.clone(),
        }
    }

    /// The error of an operation that did not reach the quorum, with the per-node failures.
    pub(crate) fn no_quorum(&self, op: Op, key: &impl std::fmt::Display) -> Error {
        Error::NoQuorum {
            op,
            key: key.to_string(),
            confirmed: self.tally.yes(),
            required: self.tally.required(),
            refused: self.tally.refused(),
            failures: self.failures.clone(),
        }
    }
}

/// `call` running on all nodes concurrently, every request bounded by the node timeout from
/// the fan-out's first poll (RedLock steps 2 and 3): one deadline for the call, rather than a
/// timer per request. The first poll writes every node's request (but one waiting for its
/// connection) before an answer is counted ([`send_all`]). [`decide`](Self::decide) returns as
/// soon as `required` nodes said yes or that became impossible; the requests still running
/// are then the caller's to
/// [`collect`](Self::collect), [`detach`](Self::detach) or drop. Dropping stops every request
/// not yet sent (a request already written stays queued on its node's connection, ahead of
/// anything sent later), and never sends a NOSCRIPT fallback.
pub(crate) struct FanOut<F> {
    nodes: Nodes,
    call: Arc<Call>,
    read: Reader,
    /// `None` once detached: taking the set out, rather than leaving an empty one behind,
    /// spares allocating a new one for every call that returns at quorum.
    pending: Option<FuturesUnordered<F>>,
    /// Answers that came while the first poll was still writing the other requests (see
    /// [`send_all`]), in order, to be counted before any other.
    early: Vec<NodeAnswer>,
    /// When the requests still running time out: the node timeout after the first poll.
    deadline: Option<Instant>,
    /// The deadline was found passed long after it passed, and was set once more (see
    /// [`next`](Self::next)).
    rearmed: bool,
    /// Bit `i`: node `i` is asked.
    asked: u64,
    /// Bit `i`: node `i`'s answer was counted.
    counted: u64,
    /// Bit `i`: node `i`'s request was dropped at the deadline, its timeout not yet counted.
    timed_out: u64,
    pub(crate) outcome: Outcome,
}

/// Starts `call` on every node. Nothing is sent until the fan-out is first polled.
pub(crate) fn fan_out(
    nodes: &Nodes,
    required: usize,
    call: Call,
    read: Reader,
) -> FanOut<impl Future<Output = NodeAnswer> + Send + 'static> {
    let outcome = Outcome::empty(nodes.len(), required);
    fan_out_to(nodes, all_nodes(nodes.len()), call, read, outcome)
}

/// Starts `call` on the nodes of `asked` (bit `i`: node `i`), counting on from `outcome`:
/// the answers of the nodes asked before, by an earlier fan-out of the same attempt (see
/// `arbiter`). Nothing is sent until the fan-out is first polled.
pub(crate) fn fan_out_to(
    nodes: &Nodes,
    asked: u64,
    call: Call,
    read: Reader,
    outcome: Outcome,
) -> FanOut<impl Future<Output = NodeAnswer> + Send + 'static> {
    let call = Arc::new(call);
    let pending = (0..nodes.len())
        .filter(|i| asked & (1 << i) != 0)
        .map(|i| node_call(nodes, i, &call))
        .collect();
    FanOut {
        nodes: nodes.clone(),
        call,
        read,
        pending: Some(pending),
        early: Vec::new(),
        rearmed: false,
        deadline: None,
        asked,
        counted: 0,
        timed_out: 0,
        outcome,
    }
}

impl<F> FanOut<F>
where
    F: Future<Output = NodeAnswer> + Send + 'static,
{
    /// Counts answers until the quorum is reached or impossible; logs the tally once.
    ///
    /// Cancel safe: answers not yet counted stay pending.
    pub(crate) async fn decide(&mut self) -> Decision {
        let expiry = tokio::time::sleep_until(self.deadline());
        let mut expiry = std::pin::pin!(expiry);
        while self.outcome.decision == Decision::Pending {
            let Some((i, result)) = self.next(expiry.as_mut()).await else {
                break;
            };
            self.count(i, result);
        }
        self.log("tallied");
        self.outcome.decision
    }

    /// Counts every remaining answer (until the call's deadline): for the exact figures of a
    /// failed release, and for the renewal's repair, which needs to know which nodes lack the
    /// entry.
    ///
    /// Cancel safe: answers not yet counted stay pending.
    pub(crate) async fn collect(&mut self) {
        let expiry = tokio::time::sleep_until(self.deadline());
        let mut expiry = std::pin::pin!(expiry);
        while let Some((i, result)) = self.next(expiry.as_mut()).await {
            self.count(i, result);
        }
    }

    /// Lets the requests still running finish in a background task, until the call's
    /// deadline; `None` when none is running, or when the deadline already passed (the
    /// requests are then dropped, and one not yet written is never sent).
    pub(crate) fn detach(&mut self, background: &Arc<BackgroundWork>) -> Option<Stragglers> {
        let mut pending = self.pending.take().filter(|p| !p.is_empty())?;
        let deadline = self.deadline();
        let timeout = call_timeout(&self.nodes);
        if deadline <= Instant::now() {
            self.call.expire();
            return None;
        }
        let call = self.call.clone();
        Some(Stragglers::spawn(
            background,
            self.call.clone(),
            async move {
                let rest = std::pin::pin!(async { while pending.next().await.is_some() {} });
                // Found passed long after it passed (a stalled thread): once more, as `next`.
                if crate::node::until_or_late(deadline, timeout, rest)
                    .await
                    .is_err()
                {
                    // Marked before the requests are dropped (with this future).
                    call.expire();
                }
            },
        ))
    }

    /// Stops the requests not yet written, and lets those written finish in the background
    /// (until the call's deadline) instead of dropping them: the driver skips a request whose
    /// caller went away before the request left the connection's queue, so a request dropped
    /// once written may still never reach its node. For a call whose requests should land
    /// even after its decision (a fair attempt, which keeps its place in line with them).
    pub(crate) fn finish_written(mut self, background: &Arc<BackgroundWork>) {
        // No request is being written between two polls of the fan-out (see `send_all`).
        self.call.progress.stop();
        let _ = self.detach(background);
    }

    /// The instant the requests still running time out, fixed on the first call.
    fn deadline(&mut self) -> Instant {
        *self
            .deadline
            .get_or_insert_with(|| Instant::now() + call_timeout(&self.nodes))
    }

    /// The next answer; `None` when every request ended or the rest were detached. When the
    /// deadline passes, the requests still running are dropped, and their nodes' timeouts
    /// are the next answers, one at a time (so that [`decide`](Self::decide) stops counting
    /// at the decision, as it does for answers).
    async fn next(&mut self, mut expiry: Pin<&mut Sleep>) -> Option<NodeAnswer> {
        if let Some(pending) = self.pending.as_mut() {
            let (call, asked, early) = (&*self.call, self.asked, &mut self.early);
            loop {
                let expired = poll_fn(|cx| {
                    send_all(pending, call, asked, early, cx);
                    if !early.is_empty() {
                        return Poll::Ready(Some(Some(early.remove(0))));
                    }
                    match pending.poll_next_unpin(cx) {
                        Poll::Ready(answer) => Poll::Ready(Some(answer)),
                        Poll::Pending => expiry.as_mut().poll(cx).map(|()| None),
                    }
                })
                .await;
                let Some(answer) = expired else {
                    // The deadline passed. Found passed long after it passed: this task could
                    // not run meanwhile (a stalled thread), nor could the connections' writers
                    // and readers (tasks of the same runtime); the requests may have left only
                    // now, their answers may wait unread. Once, the nodes get their time
                    // again: a node is not silent for the client's own stall (its breaker
                    // would open on a healthy fleet). Safe: validity is measured from the
                    // call's start.
                    let due = self.deadline.unwrap_or_else(Instant::now);
                    let timeout = call_timeout(&self.nodes);
                    if !self.rearmed && crate::node::late(due, timeout) {
                        self.rearmed = true;
                        let again = Instant::now() + timeout;
                        self.deadline = Some(again);
                        expiry.as_mut().reset(again);
                        continue;
                    }
                    break;
                };
                return answer;
            }
            self.time_out();
        }
        let i = self.timed_out.trailing_zeros() as usize;
        if i >= self.nodes.len() {
            return None;
        }
        self.timed_out &= !(1 << i);
        Some((i, Err(self.nodes[i].timed_out(&self.call))))
    }

    /// The deadline passed: drops the requests still running (the call marked expired
    /// first) and keeps their nodes as timed out, to be counted.
    fn time_out(&mut self) {
        self.call.expire();
        self.pending = None;
        self.timed_out = self.asked & !self.counted;
    }

    fn count(&mut self, i: usize, result: Result<Value, NodeFailure>) {
        self.counted |= 1 << i;
        let node = &self.nodes[i];
        let out = &mut self.outcome;
        if let Some((waiter, ms)) = result.as_ref().ok().and_then(granted_to) {
            out.granted.push((waiter.to_vec(), ms));
        }
        if matches!(&result, Err(f) if f.is_unsent()) {
            out.unsent.push(i);
        }
        let vote = match result.map(|v| ((self.read)(&v), v)) {
            Ok((Some(Answer::Yes(value)), _)) => {
                out.max_yes = out.max_yes.max(Some(value));
                out.yes |= 1 << i;
                Vote::Yes
            }
            Ok((Some(Answer::Drawn(n)), _)) => {
                out.refused.push(i);
                out.drawn += 1;
                out.max_drawn = out.max_drawn.max(Some(n));
                Vote::Refused
            }
            Ok((Some(Answer::Refused(h)), _)) => {
                out.refused.push(i);
                out.hint = match (out.hint, h) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                Vote::Refused
            }
            Ok((None, v)) => {
                out.failures.push(
                    NodeFailure::new(
                        node.name(),
                        FailureKind::Protocol,
                        format!("{} answered {v:?}", self.call.name),
                    )
                    .at(i),
                );
                Vote::Failed
            }
            Err(f) => {
                out.failures.push(f.at(i));
                Vote::Failed
            }
        };
        out.decision = out.tally.add(vote);
        tracing::debug!(
            node = node.name(),
            ?vote,
            decision = ?out.decision,
            call = self.call.name,
            "node answered"
        );
    }

    fn log(&self, what: &str) {
        let out = &self.outcome;
        tracing::debug!(
            call = self.call.name,
            yes = out.tally.yes(),
            refused = out.tally.refused(),
            failed = out.tally.failed(),
            failures = ?out.failures,
            "{what}"
        );
    }
}

/// Runs `call` on the nodes numbered in `which` and waits for all of them (each bounded by
/// its node's timeout), returning their answers in that order. With [`SendBy::Eval`] (the
/// rollback of a failed attempt) no node can answer NOSCRIPT, so the call cannot fail late
/// on a node where the attempt's acquire ran (ordering invariant 5).
pub(crate) async fn broadcast(
    nodes: &Nodes,
    which: impl IntoIterator<Item = usize>,
    call: Call,
    form: SendBy,
) -> Vec<Result<Value, NodeFailure>> {
    let call = Arc::new(call);
    futures::future::join_all(which.into_iter().map(|i| {
        let (nodes, call) = (nodes.clone(), call.clone());
        async move {
            let answer = nodes[i].run_within_timeout(&call, form, i).await;
            answer.map_err(|f| f.at(i))
        }
    }))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::read_flag;
    use crate::node::address::NodeAddr;

    /// Node `i`'s request: answered within its first poll (as on a loaded machine, where the
    /// answer can come while the request is being written), or never.
    fn request(
        call: &Arc<Call>,
        i: usize,
        answered: bool,
    ) -> impl Future<Output = NodeAnswer> + Send + 'static {
        let call = call.clone();
        async move {
            call.mark_polled(i);
            if !answered {
                std::future::pending::<()>().await;
            }
            (i, Ok(Value::Int(1)))
        }
    }

    #[tokio::test]
    async fn a_quorum_answered_at_once_decides_only_once_every_request_was_polled() {
        let n = 5;
        let nodes: Nodes = (0..n)
            .map(|i| {
                let addr = NodeAddr::parse(&format!("redis://127.0.0.1:{}", 6400 + i)).unwrap();
                Node::new(addr, Duration::from_secs(1), Duration::from_secs(1))
            })
            .collect();
        let call = Arc::new(Call::increment("test", b"k"));
        let mut fan = FanOut {
            nodes,
            call: call.clone(),
            read: read_flag,
            pending: Some((0..n).map(|i| request(&call, i, i < 3)).collect()),
            early: Vec::new(),
            rearmed: false,
            deadline: None,
            asked: 0b11111,
            counted: 0,
            timed_out: 0,
            outcome: Outcome::empty(n, 3),
        };
        assert_eq!(fan.decide().await, Decision::Reached);
        assert_eq!(fan.outcome.tally.yes(), 3);
        assert_eq!(
            call.polled(),
            0b11111,
            "requests left unpolled at the decision"
        );
    }
}
