//! Sends one script call to every node at once and tallies the answers, returning as soon as
//! the outcome is decided (RedLock step 2 and 3 for acquire; the same shape serves extend and
//! release).

use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::Value;

use crate::error::{FailureKind, NodeFailure};
use crate::node::{Node, ScriptArgs};
use crate::quorum::{Decision, Tally, Vote};
use crate::scripts::LockScript;

/// What a node's script answer means for the operation.
pub(crate) enum Answer {
    /// Counts toward the quorum.
    Yes,
    /// Refused; for acquire, with the holder's remaining TTL as a wake-up hint.
    Refused(Option<Duration>),
}

/// The result of one fan-out.
pub(crate) struct Outcome {
    pub(crate) decision: Decision,
    pub(crate) tally: Tally,
    pub(crate) failures: Vec<NodeFailure>,
    /// The smallest remaining TTL another holder reported (acquire only).
    pub(crate) hint: Option<Duration>,
}

/// Runs `script` on all `nodes` concurrently, each call bounded by its node's timeout, and
/// stops as soon as `required` nodes said yes or that became impossible. Calls still in flight
/// are dropped: a request already written stays queued on its node's connection (and is covered
/// by a later release or renewal, which address every node); one not yet written is never sent.
pub(crate) async fn fan_out(
    nodes: &[Node],
    required: usize,
    script: &LockScript,
    args: &ScriptArgs<'_>,
    read: fn(&Value) -> Option<Answer>,
) -> Outcome {
    let evalsha = &script.evalsha_cmd(args);
    let mut pending: FuturesUnordered<_> = nodes
        .iter()
        .map(|node| {
            async move { (node, node.run(script, evalsha, args).await) }
        })
        .collect();
    let mut tally = Tally::new(nodes.len(), required);
    let mut failures = Vec::new();
    let mut hint: Option<Duration> = None;
    let mut decision = tally.decision();
    while decision == Decision::Pending {
        let Some((node, result)) = pending.next().await else {
            break;
        };
        let vote = match result.map(|v| (read(&v), v)) {
            Ok((Some(Answer::Yes), _)) => Vote::Yes,
            Ok((Some(Answer::Refused(h)), _)) => {
                hint = match (hint, h) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                Vote::Refused
            }
            Ok((None, v)) => {
                failures.push(NodeFailure::new(
                    node.name(),
                    FailureKind::Protocol,
                    format!("{} script answered {v:?}", script.name()),
                ));
                Vote::Failed
            }
            Err(f) => {
                failures.push(f);
                Vote::Failed
            }
        };
        decision = tally.add(vote);
        tracing::trace!(node = node.name(), ?vote, ?decision, script = script.name());
    }
    Outcome {
        decision,
        tally,
        failures,
        hint,
    }
}

/// Runs `script` by plain EVAL on every node and waits for all of them (each bounded by its
/// node's timeout); returns how many answered yes. Used for the rollback of a failed attempt:
/// EVAL cannot answer NOSCRIPT, so the rollback cannot fail late on a node where the attempt's
/// acquire ran (DESIGN 3, "ordering trap").
pub(crate) async fn broadcast_eval(
    nodes: &[Node],
    script: &LockScript,
    args: &ScriptArgs<'_>,
    read: fn(&Value) -> Option<Answer>,
) -> usize {
    let eval = &script.eval_cmd(args);
    let results =
        futures::future::join_all(nodes.iter().map(|node| node.run(script, eval, args))).await;
    results
        .iter()
        .filter(|r| matches!(r.as_ref().map(read), Ok(Some(Answer::Yes))))
        .count()
}

/// Reads an integer reply.
pub(crate) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

/// Reads the acquire script's `{1, count}` / `{0, pttl}` reply.
pub(crate) fn read_acquire(v: &Value) -> Option<Answer> {
    let Value::Array(items) = v else { return None };
    match (items.first().and_then(int), items.get(1).and_then(int)) {
        (Some(1), Some(_count)) => Some(Answer::Yes),
        (Some(0), Some(pttl)) => Some(Answer::Refused(
            u64::try_from(pttl).ok().map(Duration::from_millis),
        )),
        _ => None,
    }
}

/// Reads the release script's reply: 1 deleted, 2 decremented, 0 not ours.
pub(crate) fn read_release(v: &Value) -> Option<Answer> {
    match int(v)? {
        1 | 2 => Some(Answer::Yes),
        0 => Some(Answer::Refused(None)),
        _ => None,
    }
}

/// Reads the extend script's reply: 1 extended, 0 not ours.
pub(crate) fn read_extend(v: &Value) -> Option<Answer> {
    match int(v)? {
        1 => Some(Answer::Yes),
        0 => Some(Answer::Refused(None)),
        _ => None,
    }
}
