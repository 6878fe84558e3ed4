//! The ordered approach of a waiter that lost (docs/DESIGN.md, "Waiting"): its attempt asks
//! the key's arbiter first, and the other nodes only once the arbiter said yes.
//!
//! When a release frees a key that many clients wait for, every client's first waiter wakes
//! and attempts at once. Sent to every node together, their requests reach the nodes in
//! different orders, so the nodes' yes votes split among the clients: often nobody reaches the
//! quorum, every attempt is rolled back (more requests, and notices that wake everybody again)
//! and the key stays free until the next round. Asking one node first, the same one in every
//! client, turns that node into the round's arbiter: one client gets its yes, the others a
//! refusal, and they go back to sleep without touching the other nodes, whose votes then go to
//! the one client the arbiter chose.
//!
//! Safety does not rest on the arbiter: its yes is one vote, and the attempt holds only once a
//! quorum of all N nodes said yes within the validity, counted as for any attempt (the
//! validity runs from before the arbiter was asked). A refusal by the arbiter ends the attempt
//! with nothing to undo (a refusal takes nothing). An arbiter that fails or does not answer
//! in time hands the attempt to the usual fan-out to every node (the arbiter included, with
//! the same holder value), and the attempt's rollback then goes to the arbiter whatever its
//! second request answered, if its first one may have been written. A fresh attempt, and
//! every attempt of the other shapes, still goes to every node at once.
//!
//! The arbiter is the first node, in an order fixed per key (the same in every process), that
//! is answering (connected, admitted, its breaker closed) and not much slower than the fastest
//! node (4x plus 1 ms, or a quarter of the node timeout, whichever is more): a frozen or slow
//! node is passed over, by every client alike since they all see it.

use std::future::Future;

use crate::family::Reader;
use crate::fanout::{all_nodes, call_timeout, fan_out_to, FanOut, NodeAnswer, Outcome};
use crate::fnv::fnv1a;
use crate::node::{Node, Nodes};
use crate::rules::config::from_node_timeout;
use crate::scripts::Call;

/// An arbiter may answer this much slower than the fastest node (x4, plus 1 ms), or a
/// quarter of the node timeout, whichever is more.
const SLOWER_BY: u64 = 4;
const SLOWER_PLUS_US: u64 = 1_000;

/// The key's arbiter, if the ordered approach can be used: at least three nodes, one of them
/// answering and not much slower than the fastest.
pub(crate) fn arbiter(nodes: &[Node], key: &[u8]) -> Option<usize> {
    let n = nodes.len();
    if n < 3 {
        return None;
    }
    let rtts: Vec<Option<u64>> = nodes.iter().map(|n| n.answering(key)).collect();
    let fastest = rtts.iter().flatten().min()?;
    // Never below a quarter of the node timeout: a loaded machine's jitter must not move
    // the arbiter from one attempt to the next (clients would then ask different nodes).
    let floor = from_node_timeout::arbiter_floor(call_timeout(nodes));
    let floor = u64::try_from(floor.as_micros()).unwrap_or(u64::MAX);
    let bound = fastest
        .saturating_mul(SLOWER_BY)
        .saturating_add(SLOWER_PLUS_US)
        .max(floor);
    let start = usize::try_from(fnv1a(key) % n as u64).unwrap_or(0);
    (0..n)
        .map(|k| (start + k) % n)
        .find(|&i| rtts[i].is_some_and(|rtt| rtt <= bound))
}

/// How an attempt's requests went out.
pub(crate) enum Approached<F> {
    /// The arbiter refused: nothing was taken, nothing was sent elsewhere. The outcome holds
    /// its answer (the holder's remaining TTL, a hint for the pause).
    Refused(Outcome),
    /// The fan-out to decide: to the nodes other than the arbiter, with its yes counted, or
    /// to every node.
    Fan {
        fan: FanOut<F>,
        /// After a fallback, the arbiter when its first request may have been written: the
        /// attempt's rollback must go there whatever the fan-out's second request answered (a
        /// first request that ran late took the key, and then the second one is refused by
        /// the attempt's own entry, or not written at all if the breaker opened meanwhile).
        /// The model check found this (docs/SAFETY.md, control 11).
        also_undo: Option<usize>,
    },
}

/// Sends an attempt's acquire (`call()` makes it): to every node at once, or with an
/// `arbiter`, to it first and then, if it said yes, to the others; if it failed, to every
/// node.
pub(crate) async fn approach(
    nodes: &Nodes,
    required: usize,
    call: impl Fn() -> (Call, Reader),
    arbiter: Option<usize>,
) -> Approached<impl Future<Output = NodeAnswer> + Send + 'static> {
    let all = all_nodes(nodes.len());
    let fresh = || Outcome::empty(nodes.len(), required);
    let Some(a) = arbiter else {
        let (call, read) = call();
        let fan = fan_out_to(nodes, all, call, read, fresh());
        return Approached::Fan {
            fan,
            also_undo: None,
        };
    };
    let (first, read) = call();
    let mut asked = fan_out_to(nodes, 1 << a, first, read, fresh());
    asked.decide().await;
    let outcome = std::mem::replace(&mut asked.outcome, fresh());
    if outcome.tally.refused() == 1 {
        return Approached::Refused(outcome);
    }
    let (call, read) = call();
    if outcome.tally.yes() == 1 {
        return Approached::Fan {
            fan: fan_out_to(nodes, all & !(1 << a), call, read, outcome),
            also_undo: None,
        };
    }
    // Failed, not sent, or no answer in time: the request, if written, stays queued ahead of
    // the fan-out's on the arbiter's connection.
    tracing::debug!(arbiter = a, failures = ?outcome.failures, "the arbiter failed: asking every node");
    Approached::Fan {
        fan: fan_out_to(nodes, all, call, read, fresh()),
        also_undo: (!outcome.unsent.contains(&a)).then_some(a),
    }
}
