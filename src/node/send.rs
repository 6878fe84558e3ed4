//! One command on a node's connection, holding its place in the connection's queue.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use redis::{Cmd, ErrorKind, RedisError, Value};

use crate::scripts::Call;
use crate::telemetry::{NodeRequest, NodeResult};

use super::backlog::Admit;
use super::{Connected, MAX_IN_FLIGHT};

/// Why a request was not sent: the call was stopped (the caller decided without it).
pub(super) const STOPPED: &str = "call stopped by a later call of the same lease";

/// Why a request was not sent: the node is silent with a full backlog (see [`Backlog`]).
pub(super) const NOT_SENT: &str = "not sent: the node has answered none of the";

/// Sends one command of `call`, recording when it holds its place in the connection's queue,
/// and refusing to start once the call was stopped (see
/// [`Progress`](crate::scripts::Progress)) or while the node is silent with a full backlog.
pub(super) async fn send(
    link: &mut Connected,
    cmd: &Cmd,
    call: &Call,
    slot: usize,
    timeout: Duration,
) -> Result<Value, RedisError> {
    let progress = &call.progress;
    if !progress.may_send(slot) {
        return Err(RedisError::from((ErrorKind::Client, STOPPED)));
    }
    // Releases and rollbacks (scripts named so) must follow what they undo (see `Backlog`).
    let cleanup = matches!(call.name, "release" | "withdraw");
    let seq = match link.backlog.admit(timeout, cleanup) {
        Admit::Send(seq) => seq,
        Admit::Refused { probe } => {
            if let Some(seq) = probe {
                probe_in_background(link, seq, timeout);
            }
            progress.written(slot);
            return Err(RedisError::from((
                ErrorKind::Client,
                NOT_SENT,
                format!(
                    "{} requests written to it, for longer than the node timeout ({timeout:?})",
                    link.backlog.outstanding()
                ),
            )));
        }
    };
    // Unconstrained: a task out of its scheduling budget would otherwise get its room in the
    // queue and yet return before writing the request.
    let sent_at = tokio::time::Instant::now();
    let mut request = std::pin::pin!(tokio::task::unconstrained(
        link.conn.send_packed_command(cmd)
    ));
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(request.as_mut().poll(cx))).await;
    progress.written(slot);
    let result = match first {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => request.await,
    };
    if result.as_ref().is_ok() {
        link.backlog.answered(seq);
        link.backlog.round_trip(sent_at.elapsed());
    }
    result
}

/// The circuit breaker's probe (see [`Backlog`](super::backlog::Backlog)): a `PING` on the
/// connection that no operation waits for; its answer, if it comes within a while, closes the
/// breaker (and says that every request written before it was answered).
fn probe_in_background(link: &Connected, seq: u64, timeout: Duration) {
    let (mut conn, backlog) = (link.conn.clone(), link.backlog.clone());
    // Long enough for a node that resumes to answer its backlog first; bounded, so that a node
    // frozen for minutes does not collect waiting tasks.
    let wait = (timeout * 20).clamp(Duration::from_secs(1), Duration::from_secs(30));
    tokio::spawn(async move {
        let ping = redis::cmd("PING");
        if let Ok(Ok(_)) = tokio::time::timeout(wait, conn.send_packed_command(&ping)).await {
            backlog.answered(seq);
        }
    });
}

/// Counts a request in flight to a node, for as long as it lives.
pub(super) struct InFlightRequest<'a>(&'a AtomicUsize);

impl<'a> InFlightRequest<'a> {
    pub(super) fn enter(count: &'a AtomicUsize) -> Option<InFlightRequest<'a>> {
        let before = count.fetch_add(1, Ordering::AcqRel);
        let request = InFlightRequest(count);
        (before < MAX_IN_FLIGHT).then_some(request)
    }
}

impl Drop for InFlightRequest<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A node request's record: ended with its result, or, when the request is dropped first,
/// as timed out if its time ran out (its caller's flag), else as stopped.
pub(super) struct Recorded<'a> {
    pub(super) request: Option<NodeRequest>,
    pub(super) expired: &'a AtomicBool,
}

impl Recorded<'_> {
    /// Records the request's result, once.
    pub(super) fn end(&mut self, result: NodeResult) {
        if let Some(request) = self.request.take() {
            request.end(result);
        }
    }
}

impl Drop for Recorded<'_> {
    fn drop(&mut self) {
        let result = if self.expired.load(Ordering::Relaxed) {
            NodeResult::Timeout
        } else {
            NodeResult::Stopped
        };
        self.end(result);
    }
}

/// The multiplexed connection hands a command's error reply back as a value; make it an error
/// so that it is classified (NOSCRIPT, NOAUTH, OOM, ...).
pub(super) fn top_level_error(v: Value) -> Result<Value, RedisError> {
    match v {
        Value::ServerError(e) => Err(e.into()),
        v => Ok(v),
    }
}
