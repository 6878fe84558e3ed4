//! Sends one script call to every node at once and tallies the answers, returning as soon as
//! the outcome is decided (RedLock steps 2 and 3 for acquire; the same shape serves extend and
//! release).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::Value;

use crate::error::{FailureKind, NodeFailure};
use crate::node::{Form, Nodes};
use crate::quorum::{Decision, Tally, Vote};
use crate::scripts::Call;

/// What a node's script answer means for the operation.
pub(crate) enum Answer {
    /// Counts toward the quorum, with the script's value (the fencing counter for a fenced
    /// acquire; otherwise not meaningful).
    Yes(i64),
    /// Refused; for acquire, with the holder's remaining TTL as a wake-up hint.
    Refused(Option<Duration>),
}

/// What happens to the calls still in flight once the outcome is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stragglers {
    /// Let them finish in a background task, so that every node gets the call even though the
    /// caller returned at quorum (release, extend: neither can create an entry).
    Finish,
    /// On success, let them finish in a background task that is returned (acquire: every
    /// reachable node should get the entry, so one node that later forgets it cannot leave the
    /// lock on a bare majority; the release settles it first, so it cannot be overtaken). On failure, drop them: a request already written stays queued on its
    /// node's connection, ahead of the rollback; one not yet written is never sent, nor is a
    /// NOSCRIPT fallback that could land after the rollback.
    FinishIfReached,
    /// Wait for every node's answer (each bounded by its timeout) before deciding: the
    /// watchdog's renewal, which runs in the background and needs to know which nodes lack
    /// the entry.
    Wait,
}

/// The result of one fan-out.
pub(crate) struct Outcome {
    pub(crate) decision: Decision,
    pub(crate) tally: Tally,
    pub(crate) failures: Vec<NodeFailure>,
    /// The smallest remaining TTL another holder reported (acquire only).
    pub(crate) hint: Option<Duration>,
    /// The nodes that answered with a refusal (in answer order).
    pub(crate) refused: Vec<usize>,
    /// The largest value among the yes answers counted.
    pub(crate) max_yes: Option<i64>,
    /// The stragglers finishing in the background ([`Stragglers::FinishIfReached`]).
    pub(crate) background: Option<Background>,
}

/// Calls of an operation still running after it returned.
pub(crate) struct Background {
    call: Arc<Call>,
    task: tokio::task::JoinHandle<()>,
}

impl Background {
    /// Makes sure no straggler can land after what the caller sends next: stops the ones not
    /// yet queued, and waits for the task if one may still be on its way.
    pub(crate) async fn settle(self) {
        let maybe_on_its_way = self.call.progress.as_ref().is_none_or(|p| p.stop());
        if maybe_on_its_way {
            let _ = self.task.await;
        }
    }
}

/// One node's part of a call, owning what it needs so that it can outlive the caller.
fn node_call(
    nodes: &Nodes,
    i: usize,
    call: &Arc<Call>,
    form: Form,
) -> impl Future<Output = (usize, Result<Value, NodeFailure>)> + Send + 'static {
    let (nodes, call) = (nodes.clone(), call.clone());
    async move { (i, nodes[i].run(&call, form, i).await) }
}

/// Runs `call` on all `nodes` concurrently, each bounded by its node's timeout, and stops as
/// soon as `required` nodes said yes or that became impossible.
pub(crate) async fn fan_out(
    nodes: &Nodes,
    required: usize,
    call: Call,
    read: fn(&Value) -> Option<Answer>,
    stragglers: Stragglers,
) -> Outcome {
    let call = Arc::new(call);
    let mut pending: FuturesUnordered<_> = (0..nodes.len())
        .map(|i| node_call(nodes, i, &call, Form::Sha))
        .collect();
    let mut tally = Tally::new(nodes.len(), required);
    let mut failures = Vec::new();
    let mut hint: Option<Duration> = None;
    let mut refused = Vec::new();
    let mut max_yes: Option<i64> = None;
    let mut decision = tally.decision();
    while decision == Decision::Pending || (stragglers == Stragglers::Wait && !pending.is_empty()) {
        let Some((i, result)) = pending.next().await else {
            break;
        };
        let vote = match result.map(|v| (read(&v), v)) {
            Ok((Some(Answer::Yes(value)), _)) => {
                max_yes = max_yes.max(Some(value));
                Vote::Yes
            }
            Ok((Some(Answer::Refused(h)), _)) => {
                refused.push(i);
                hint = match (hint, h) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                Vote::Refused
            }
            Ok((None, v)) => {
                failures.push(NodeFailure::new(
                    nodes[i].name(),
                    FailureKind::Protocol,
                    format!("{} answered {v:?}", call.name),
                ));
                Vote::Failed
            }
            Err(f) => {
                failures.push(f);
                Vote::Failed
            }
        };
        decision = tally.add(vote);
        tracing::debug!(
            node = nodes[i].name(),
            ?vote,
            ?decision,
            call = call.name,
            "node answered"
        );
    }
    let finish = match stragglers {
        Stragglers::Finish => true,
        Stragglers::FinishIfReached => decision == Decision::Reached,
        Stragglers::Wait => false,
    };
    let background = (finish && !pending.is_empty()).then(|| Background {
        call: call.clone(),
        task: tokio::spawn(async move { while pending.next().await.is_some() {} }),
    });
    Outcome {
        decision,
        tally,
        failures,
        hint,
        refused,
        max_yes,
        background,
    }
}

/// Runs `call` on the nodes numbered in `which` and waits for all of them (each bounded by
/// its node's timeout), returning their answers in that order. With [`Form::Eval`] (the
/// rollback of a failed attempt) no node can answer NOSCRIPT, so the call cannot fail late
/// on a node where the attempt's acquire ran (DESIGN 3, "ordering trap").
pub(crate) async fn broadcast(
    nodes: &Nodes,
    which: impl IntoIterator<Item = usize>,
    call: Call,
    form: Form,
) -> Vec<Result<Value, NodeFailure>> {
    let call = Arc::new(call);
    futures::future::join_all(which.into_iter().map(|i| node_call(nodes, i, &call, form)))
        .await
        .into_iter()
        .map(|(_, r)| r)
        .collect()
}

/// Reads an integer reply.
pub(crate) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

/// Reads an acquire's reply: `OK` / nil from `SET NX`, or the fenced script's
/// `{1, counter}` / `{0, pttl}`.
pub(crate) fn read_acquire(v: &Value) -> Option<Answer> {
    let items = match v {
        Value::Okay => return Some(Answer::Yes(1)),
        Value::Nil => return Some(Answer::Refused(None)),
        Value::Array(items) => items,
        _ => return None,
    };
    match (items.first().and_then(int), items.get(1).and_then(int)) {
        (Some(1), Some(value)) => Some(Answer::Yes(value)),
        (Some(0), Some(pttl)) => Some(Answer::Refused(
            u64::try_from(pttl).ok().map(Duration::from_millis),
        )),
        _ => None,
    }
}

/// Reads a 1 / 0 script reply: 1 yes (released, extended, token written), 0 refused (this
/// holder does not hold the key there).
pub(crate) fn read_flag(v: &Value) -> Option<Answer> {
    match int(v)? {
        1 => Some(Answer::Yes(1)),
        0 => Some(Answer::Refused(None)),
        _ => None,
    }
}
