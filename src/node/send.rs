//! One command on a node's connection, holding its place in the connection's queue.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{Cmd, ErrorKind, RedisError, Value};

use crate::error::Unsent;

use crate::scripts::Call;
use crate::telemetry::{NodeRequest, NodeResult};

use super::backlog::{Admit, Backlog};
use super::{Connected, MAX_IN_FLIGHT};

/// A request's failure before the node's answer was classified: never written, and why, or the
/// driver's error.
pub(super) enum SendError {
    /// Not written to the node.
    Unsent(Unsent, String),
    /// The driver's error (an I/O failure, a reply it could not read, an error reply).
    Redis(RedisError),
}

impl From<RedisError> for SendError {
    fn from(e: RedisError) -> SendError {
        SendError::Redis(e)
    }
}

impl SendError {
    /// The connection failed: the request may or may not have been written.
    pub(super) fn is_io_error(&self) -> bool {
        matches!(self, SendError::Redis(e) if e.is_io_error())
    }
}

/// What one request writes: a command, or `ASKING` and a command as one write (a redirect's
/// `ASK`, see `redirect`), answered by the command's answer.
#[derive(Clone, Copy)]
pub(super) enum Packed<'a> {
    One(&'a Cmd),
    Asking(&'a redis::Pipeline),
}

/// Who waits for a request: the node's index in the call, and the flag the caller sets
/// before it drops the request because its time ran out (the node timeout or the fan-out's
/// deadline), as opposed to a caller that went away early (a timeout around the call, a
/// decided fan-out).
#[derive(Clone, Copy)]
pub(super) struct Caller<'a> {
    pub(super) index: usize,
    pub(super) expired: &'a AtomicBool,
}

/// Sends one command of `call` (see [`write`]).
pub(super) async fn send(
    link: &Connected,
    cmd: &Cmd,
    call: &Call,
    caller: Caller<'_>,
    timeout: Duration,
) -> Result<Value, SendError> {
    write(link, Packed::One(cmd), call, caller, timeout).await
}

/// Writes one request of `call`, recording when it holds its place in the connection's queue,
/// and refusing to start once the call was stopped (see
/// [`Progress`](crate::scripts::Progress)) or while the node is silent with a full backlog.
pub(super) async fn write(
    link: &Connected,
    packed: Packed<'_>,
    call: &Call,
    caller: Caller<'_>,
    timeout: Duration,
) -> Result<Value, SendError> {
    let index = caller.index;
    let progress = &call.progress;
    if !progress.may_send(index) {
        return Err(SendError::Unsent(
            Unsent::Stopped,
            "call stopped by a later call of the same lease".into(),
        ));
    }
    // Releases and rollbacks (scripts named so) must follow what they undo (see `Backlog`).
    let cleanup = matches!(call.name, "release" | "withdraw");
    let seq = match link.backlog.admit(timeout, cleanup) {
        Admit::Send(seq) => seq,
        Admit::Refused { probe } => {
            if let Some(seq) = probe {
                probe_in_background(link, seq, timeout);
            }
            progress.written(index);
            return Err(SendError::Unsent(
                Unsent::BreakerOpen,
                format!(
                    "not sent: the node has left {} requests unanswered for longer than the node \
                     timeout ({timeout:?}); its circuit breaker is open",
                    link.backlog.outstanding()
                ),
            ));
        }
    };
    // A handle of its own (a few reference counts), so that the request's borrow leaves
    // `link` to the follow-up below.
    let mut conn = link.conn.clone();
    let sent_at = tokio::time::Instant::now();
    // Unconstrained: a task out of its scheduling budget would otherwise get its room in the
    // queue and yet return before writing the request.
    let mut request = std::pin::pin!(tokio::task::unconstrained(async {
        match packed {
            Packed::One(cmd) => conn.send_packed_command(cmd).await,
            Packed::Asking(pipe) => conn
                .send_packed_commands(pipe, 1, 1)
                .await?
                .pop()
                .ok_or_else(|| (ErrorKind::Client, "ASKING: no answer to the command").into()),
        }
    }));
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(request.as_mut().poll(cx))).await;
    progress.written(index);
    // The request is on the connection: if this future is dropped before its answer is read
    // (a timeout around the call, a decided fan-out, a dropped future), the answer is still
    // counted, by a `PING` behind it (see `Unread`).
    let unread = Unread {
        link,
        timeout,
        sent_at,
        expired: caller.expired,
        armed: true,
    };
    let result = match first {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => request.await,
    };
    unread.disarm();
    if result.is_ok() {
        link.backlog.answered(seq);
        link.backlog.round_trip(sent_at.elapsed());
    }
    Ok(result?)
}

/// A request written to the connection whose answer nobody has read yet. Dropped armed (its
/// caller went away), it has the connection count that answer all the same: a `PING` follows
/// it, and the `PING`'s answer says that every request written before it was answered
/// ([`follow_up`]). Otherwise a node that answers every request, only after their
/// callers stopped waiting, would keep them "unanswered" for ever, and its breaker would open
/// on a healthy node: the next call would fail at once.
struct Unread<'a> {
    link: &'a Connected,
    timeout: Duration,
    sent_at: tokio::time::Instant,
    /// Set by the caller when its time ran out (see [`Caller`]).
    expired: &'a AtomicBool,
    armed: bool,
}

impl Unread<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Unread<'_> {
    fn drop(&mut self) {
        if self.armed {
            if crate::failpoints::on(crate::failpoints::FailPoint::AbandonedAnswersUncounted) {
                return;
            }
            // Its round trip is at least this long: a node slower than the node timeout
            // must not keep the quick estimate of its last answer read in time (it would
            // stay a key's arbiter, and every ordered attempt would wait a node timeout).
            self.link.backlog.at_least(self.sent_at.elapsed());
            if self.expired.load(Ordering::Relaxed) {
                self.link.backlog.waited_out();
            }
            follow_up(self.link, self.timeout);
        }
    }
}

/// Sends a `PING` behind the requests written so far, in the background, unless one is under
/// way (which then sends another once it is answered); its answer counts every request before
/// it as answered. Without a runtime (a future dropped after its runtime ended) nothing is
/// sent: the connection goes with the runtime.
fn follow_up(link: &Connected, timeout: Duration) {
    if !link.backlog.follow_up_wanted() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        link.backlog.follow_up_ended();
        return;
    };
    let (mut conn, backlog) = (link.conn.clone(), link.backlog.clone());
    runtime.spawn(async move {
        loop {
            let seq = backlog.follow_up_sent();
            if !follow_up_ping(&mut conn, timeout, &backlog).await {
                backlog.follow_up_ended();
                return;
            }
            backlog.answered(seq);
            if !backlog.follow_up_again() {
                return;
            }
        }
    });
}

/// How long a probe or a follow-up waits for its `PING`'s answer: long enough for a node that
/// resumes to answer its backlog first; bounded, so that a node frozen for minutes does not
/// collect waiting tasks.
fn ping_wait(timeout: Duration) -> Duration {
    crate::rules::config::from_node_timeout::probe_wait(timeout)
}

/// Whether the follow-up's `PING` is answered within [`ping_wait`]; one not answered within
/// the node timeout is a wait that ran out ([`Backlog::waited_out`](super::backlog::Backlog::waited_out)),
/// as a caller's would be.
async fn follow_up_ping(
    conn: &mut MultiplexedConnection,
    timeout: Duration,
    backlog: &Backlog,
) -> bool {
    let ping = redis::cmd("PING");
    let mut answer = std::pin::pin!(tokio::time::timeout(
        ping_wait(timeout),
        conn.send_packed_command(&ping)
    ));
    // Found passed long after it passed (a stalled thread): once more, as a call's deadline.
    let due = tokio::time::Instant::now() + timeout;
    match super::until_or_late(due, timeout, answer.as_mut()).await {
        Ok(answer) => matches!(answer, Ok(Ok(_))),
        Err(_) => {
            backlog.waited_out();
            matches!(answer.await, Ok(Ok(_)))
        }
    }
}

/// Whether a `PING` on `conn` is answered within `wait`.
async fn ping(conn: &mut MultiplexedConnection, wait: Duration) -> bool {
    let ping = redis::cmd("PING");
    matches!(
        tokio::time::timeout(wait, conn.send_packed_command(&ping)).await,
        Ok(Ok(_))
    )
}

/// The circuit breaker's probe (see [`Backlog`](super::backlog::Backlog)): a `PING` on the
/// connection that no operation waits for; its answer, if it comes within a while, closes the
/// breaker (and says that every request written before it was answered).
fn probe_in_background(link: &Connected, seq: u64, timeout: Duration) {
    let (mut conn, backlog) = (link.conn.clone(), link.backlog.clone());
    tokio::spawn(async move {
        if ping(&mut conn, ping_wait(timeout)).await {
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

/// [`top_level_error`] for a request's answer.
pub(super) fn answered(v: Value) -> Result<Value, SendError> {
    Ok(top_level_error(v)?)
}
