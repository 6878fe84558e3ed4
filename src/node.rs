//! One Redis master: one multiplexed connection with its background reconnect, the per-node
//! timeout, script calls with NOSCRIPT fallback, and error classification.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use std::time::Duration;
use tokio::sync::Notify;
use tracing::Instrument;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

use crate::address::NodeAddr;
use crate::error::{FailureKind, NodeFailure};
use crate::scripts::{Call, SendBy, ALL_SCRIPTS};
use crate::telemetry::{NodeRequest, NodeResult};

/// The connection slot: the live connection with a generation number (so that a failure
/// observed on an old connection does not throw away a newer one), and the state of the
/// background connect.
#[derive(Default)]
struct Slot {
    generation: u64,
    conn: Option<Connected>,
    /// A background connect is under way.
    connecting: bool,
    /// Why the latest connect failed, for the callers that waited for it.
    failure: Option<NodeFailure>,
}

/// A live connection and the account of its requests not answered yet.
#[derive(Clone)]
struct Connected {
    conn: MultiplexedConnection,
    backlog: Arc<Backlog>,
}

/// The requests written to one connection and not answered yet, as far as this client can
/// tell: a node answers in order, so an answer to a request says that every request written
/// before it was answered too, also those whose callers stopped waiting (timed out) and will
/// never read their answers.
///
/// A node that stopped answering (frozen, black-holed) would otherwise collect every request
/// of this client, each one timed out and forgotten by its caller but still queued on the
/// connection; once it answers again, new requests would wait behind all of them. So once the
/// node has been silent for a node timeout with [`MAX_SILENT_BACKLOG`] requests unanswered,
/// requests fail at once without being written ("not sent"), except one probe per node
/// timeout, whose answer shows that the node is back (and that the backlog drained).
struct Backlog {
    /// Sequence number of the latest request written.
    written: AtomicU64,
    /// The highest sequence number answered.
    answered: AtomicU64,
    /// When (ms since `epoch`) the node last answered, or a request was written while
    /// everything before had been answered.
    quiet_since: AtomicU64,
    /// When (ms since `epoch`) the latest probe was let through.
    probed_at: AtomicU64,
    epoch: tokio::time::Instant,
}

/// How many unanswered requests a silent node may collect before further requests are not
/// sent (see [`Backlog`]): its answers to them, once it is back, take well under a
/// millisecond each.
const MAX_SILENT_BACKLOG: u64 = 256;

impl Backlog {
    fn new() -> Backlog {
        Backlog {
            written: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            quiet_since: AtomicU64::new(0),
            probed_at: AtomicU64::new(0),
            epoch: tokio::time::Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A sequence number for a request about to be written, or `None` when it must not be
    /// (the node has been silent for `timeout` with a full backlog, and a probe went out
    /// less than `timeout` ago).
    fn admit(&self, timeout: Duration) -> Option<u64> {
        let now = self.now_ms();
        let timeout = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let written = self.written.load(Ordering::Acquire);
        let outstanding = written.saturating_sub(self.answered.load(Ordering::Acquire));
        if outstanding == 0 {
            self.quiet_since.store(now, Ordering::Release);
        } else if outstanding >= MAX_SILENT_BACKLOG
            && now.saturating_sub(self.quiet_since.load(Ordering::Acquire)) > timeout
        {
            let probed = self.probed_at.load(Ordering::Acquire);
            if now.saturating_sub(probed) <= timeout
                || self
                    .probed_at
                    .compare_exchange(probed, now, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                return None;
            }
        }
        Some(self.written.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// The request numbered `seq` was answered (and so was every request before it).
    fn answered(&self, seq: u64) {
        self.answered.fetch_max(seq, Ordering::AcqRel);
        self.quiet_since.store(self.now_ms(), Ordering::Release);
    }

    /// Requests written and not answered yet.
    fn outstanding(&self) -> u64 {
        self.written
            .load(Ordering::Acquire)
            .saturating_sub(self.answered.load(Ordering::Acquire))
    }
}

/// What a node's background connect shares with the node.
struct Link {
    // std Mutex: held only to read or swap the slot, never across an await.
    slot: Mutex<Slot>,
    /// Wakes the callers waiting for a connect to end.
    connected: Notify,
}

/// One Redis master.
///
/// All commands to a node go through one multiplexed connection, so they execute on the server
/// in the order they were sent: an attempt's rollback always runs after the attempt's acquire
/// on that node, even when the acquire answered too late to be counted (ordering invariant 1).
/// A connection is replaced only after it failed, never because of a timeout: a timed-out
/// command may still be queued behind a paused server, and so must its rollback be (ordering
/// invariant 2).
///
/// Connecting (TCP, handshake, loading the scripts: several round trips) runs in a background
/// task bounded by the connect timeout, not inside a call: a call waits for it at most its own
/// timeout, and the connect goes on when the call gives up, so that a link whose round trip is
/// a large part of the node timeout still gets its connection back.
pub(crate) struct Node {
    addr: Arc<NodeAddr>,
    timeout: Duration,
    connect_timeout: Duration,
    link: Arc<Link>,
    /// Requests of this client on their way to the node or waiting for its answer.
    in_flight: AtomicUsize,
}

/// The capacity of a connection's request queue.
const QUEUE_CAPACITY: usize = 1 << 16;

/// The most requests a client keeps in flight to one node; a call beyond it fails at once.
/// Below the queue's capacity, so that the queue is never full and a request always takes
/// its place on its first poll (a full queue would make it wait for room, and a later
/// request could take the room first).
const MAX_IN_FLIGHT: usize = QUEUE_CAPACITY - 64;

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("addr", &self.addr.display)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Node {
    pub(crate) fn new(addr: NodeAddr, timeout: Duration, connect_timeout: Duration) -> Node {
        Node {
            addr: Arc::new(addr),
            timeout,
            connect_timeout,
            link: Arc::new(Link {
                slot: Mutex::new(Slot::default()),
                connected: Notify::new(),
            }),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// The redacted address.
    pub(crate) fn name(&self) -> &str {
        &self.addr.display
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.link.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn forget(&self, generation: u64) {
        let mut slot = self.slot();
        if slot.generation == generation {
            slot.conn = None;
        }
    }

    /// The live connection; without one, waits for the background connect (starting it if
    /// none is under way). The caller bounds the wait; the connect itself is bounded by the
    /// connect timeout.
    async fn connection(&self) -> Result<(u64, Connected), NodeFailure> {
        let connected = self.link.connected.notified();
        {
            let mut slot = self.slot();
            if let Some(conn) = &slot.conn {
                return Ok((slot.generation, conn.clone()));
            }
            if !slot.connecting {
                slot.connecting = true;
                tokio::spawn(connect(
                    self.addr.clone(),
                    self.link.clone(),
                    self.connect_timeout,
                ));
            }
        }
        // Registered before the slot was released: the connect's wake-up cannot be missed.
        connected.await;
        let slot = self.slot();
        match (&slot.conn, &slot.failure) {
            (Some(conn), _) => Ok((slot.generation, conn.clone())),
            (None, Some(failure)) => Err(failure.clone()),
            (None, None) => Err(NodeFailure::new(
                self.name(),
                FailureKind::Connection,
                "connection lost while connecting",
            )),
        }
    }

    /// Sends one command (connecting first if needed), bounded by `limit`.
    pub(crate) async fn query_within(
        &self,
        cmd: &Cmd,
        limit: Duration,
    ) -> Result<Value, NodeFailure> {
        self.bounded(
            limit,
            self.on_connection(|mut link, _resent| async move {
                link.conn
                    .send_packed_command(cmd)
                    .await
                    .and_then(top_level_error)
            }),
        )
        .await
    }

    /// Runs a lock call, bounded by the per-node timeout: for calls that wait for every
    /// node's answer ([`broadcast`](crate::fanout::broadcast)). A fan-out bounds its requests
    /// by one deadline of its own instead (see [`run`](Self::run)).
    pub(crate) async fn run_within_timeout(
        &self,
        call: &Call,
        form: SendBy,
        slot: usize,
    ) -> Result<Value, NodeFailure> {
        // This request's own flag (the call is shared by the other nodes' requests, which may
        // end otherwise), declared first so that it outlives the request, and set before the
        // request is dropped.
        let expired = AtomicBool::new(false);
        let mut request = std::pin::pin!(self.run(call, form, slot, &expired));
        match tokio::time::timeout(self.timeout, request.as_mut()).await {
            Ok(result) => result,
            Err(_) => {
                expired.store(true, Ordering::Relaxed);
                Err(self.timed_out())
            }
        }
    }

    /// The failure of a request that got no answer within the node timeout.
    pub(crate) fn timed_out(&self) -> NodeFailure {
        self.no_answer_within(self.timeout)
    }

    fn no_answer_within(&self, limit: Duration) -> NodeFailure {
        NodeFailure::new(
            self.name(),
            FailureKind::Timeout,
            format!("no answer within {limit:?}"),
        )
    }

    /// The per-node timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs a lock call, unbounded: the caller bounds it by the node timeout, and sets
    /// `expired` before dropping a request that ran out of time (it is then recorded as timed
    /// out, not stopped). In [`SendBy::Sha`] a script is sent by
    /// EVALSHA, falling back to EVAL when the node answers NOSCRIPT (scripts flushed). The
    /// fallback is sent from the same future: a caller that drops the future (decided, or
    /// timed out) can be sure no EVAL follows its rollback.
    pub(crate) async fn run(
        &self,
        call: &Call,
        form: SendBy,
        slot: usize,
        expired: &AtomicBool,
    ) -> Result<Value, NodeFailure> {
        let Some(_in_flight) = InFlightRequest::enter(&self.in_flight) else {
            return Err(NodeFailure::new(
                self.name(),
                FailureKind::Connection,
                format!("more than {MAX_IN_FLIGHT} requests in flight to this node"),
            ));
        };
        let mut request = Recorded {
            request: Some(NodeRequest::start(slot, call.name)),
            expired,
        };
        // Named as the OpenTelemetry conventions for Redis clients name a command's span; the
        // node is given by its index, never its address.
        let span = tracing::trace_span!(
            "redis",
            "db.system.name" = "redis",
            "db.operation.name" = call.verb(),
            "quorum_lock.node" = slot,
            "quorum_lock.operation" = call.name,
        );
        let result = self
            .on_connection(|mut conn, resent| async move {
                let timeout = self.timeout;
                let first = match (form, resent) {
                    (_, true) => send(&mut conn, &call.resend(form), call, slot, timeout).await,
                    (SendBy::Sha, false) => {
                        send(&mut conn, call.command(), call, slot, timeout).await
                    }
                    (SendBy::Eval, false) => {
                        send(&mut conn, &call.eval(), call, slot, timeout).await
                    }
                };
                match first.and_then(top_level_error) {
                    Err(e)
                        if call.is_script()
                            && e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
                    {
                        tracing::debug!(node = %self.name(), script = call.name, "NOSCRIPT, falling back to EVAL");
                        send(&mut conn, &call.eval(), call, slot, timeout)
                            .await
                            .and_then(top_level_error)
                    }
                    other => other,
                }
            })
            .instrument(span)
            .await
            .map_err(|(_, failure)| failure);
        request.end(match &result {
            Ok(_) => NodeResult::Answered,
            Err(f) if f.kind() == FailureKind::Timeout => NodeResult::Timeout,
            Err(f) if f.detail().contains(NOT_SENT) => NodeResult::Timeout,
            Err(f) if f.detail().contains(STOPPED) => NodeResult::Stopped,
            Err(_) => NodeResult::Error,
        });
        result
    }

    /// Runs `op` on the node's connection. When a connection that was already open turns out
    /// to be dead (the server restarted, or the connection was reset), `op` runs once more on
    /// a fresh connection (with the scripts loaded again), told that it is a re-send:
    /// otherwise every client would fail its first call to each restarted node. Every lock
    /// call is safe to repeat in its re-sent form ([`Call::resend`]): the acquire is re-sent
    /// as a script that recognises this holder's own entry; extend, repair and the fencing
    /// write-back are idempotent for one holder value; a repeated fencing increment only
    /// raises the token; a repeated release can only under-report (answer "not held" for an
    /// entry it already deleted).
    async fn on_connection<'a, F, Fut>(&'a self, op: F) -> Result<Value, (u64, NodeFailure)>
    where
        F: Fn(Connected, bool) -> Fut + 'a,
        Fut: std::future::Future<Output = Result<Value, RedisError>> + 'a,
    {
        let (generation, conn) = self.connection().await.map_err(|f| (0, f))?;
        match op(conn, false).await {
            Err(e) if e.is_io_error() => {
                self.forget(generation);
                tracing::debug!(node = %self.name(), error = %self.scrubbed(&e), "connection dropped; reconnecting once");
                let (generation, conn) = self.connection().await.map_err(|f| (0, f))?;
                op(conn, true)
                    .await
                    .map_err(|e| (generation, self.failure(generation, &e)))
            }
            other => other.map_err(|e| (generation, self.failure(generation, &e))),
        }
    }

    /// Classifies a call's error, dropping the connection when it is broken.
    fn failure(&self, generation: u64, e: &RedisError) -> NodeFailure {
        if e.is_io_error() {
            self.forget(generation);
        }
        classify(&self.addr, e)
    }

    fn scrubbed(&self, e: &RedisError) -> String {
        self.addr.scrub(&e.to_string())
    }

    /// A dedicated pub/sub connection (release notices), not bounded here.
    pub(crate) async fn pubsub(&self) -> Result<redis::aio::PubSub, NodeFailure> {
        self.addr
            .client
            .get_async_pubsub()
            .await
            .map_err(|e| classify(&self.addr, &e))
    }

    /// Runs `fut` within `limit`.
    ///
    /// A plain function, not an `async fn`: an `async fn` keeps its argument `fut` in its own
    /// state beside the timeout it is moved into, doubling the size of every node request's
    /// future (and of each copy made of it when a fan-out starts it).
    fn bounded<'a, F>(
        &'a self,
        limit: Duration,
        fut: F,
    ) -> impl Future<Output = Result<Value, NodeFailure>> + 'a
    where
        F: Future<Output = Result<Value, (u64, NodeFailure)>> + 'a,
    {
        futures::FutureExt::map(tokio::time::timeout(limit, fut), move |r| match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err((_, failure))) => Err(failure),
            Err(_) => Err(self.no_answer_within(limit)),
        })
    }
}

/// The background connect of one node: connects, loads every script, and publishes the new
/// connection (or the failure) in the slot, waking the callers waiting for it.
async fn connect(addr: Arc<NodeAddr>, link: Arc<Link>, limit: Duration) {
    let mut pending = ConnectInFlight {
        link: &link,
        addr: &addr,
        result: None,
    };
    pending.result = Some(match tokio::time::timeout(limit, open(&addr)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(classify(&addr, &e)),
        Err(_) => Err(NodeFailure::new(
            &addr.display,
            FailureKind::Timeout,
            format!("could not connect within {limit:?}"),
        )),
    });
}

/// Publishes a background connect's outcome when it ends, also when the task is dropped
/// before finishing (its runtime shut down): the slot is never left "connecting" with
/// callers waiting for a connect that will not come.
struct ConnectInFlight<'a> {
    link: &'a Link,
    addr: &'a NodeAddr,
    result: Option<Result<MultiplexedConnection, NodeFailure>>,
}

impl Drop for ConnectInFlight<'_> {
    fn drop(&mut self) {
        let result = self.result.take().unwrap_or_else(|| {
            Err(NodeFailure::new(
                &self.addr.display,
                FailureKind::Connection,
                "connect abandoned (runtime shut down)",
            ))
        });
        {
            let mut slot = self.link.slot.lock().unwrap_or_else(|p| p.into_inner());
            slot.connecting = false;
            match result {
                Ok(conn) => {
                    slot.generation += 1;
                    slot.conn = Some(Connected {
                        conn,
                        backlog: Arc::new(Backlog::new()),
                    });
                    slot.failure = None;
                }
                Err(failure) => {
                    tracing::debug!(node = %self.addr.display, error = %failure, "connect failed");
                    slot.failure = Some(failure);
                }
            }
        }
        self.link.connected.notify_waiters();
    }
}

/// Opens a connection and loads every script on it, before it is used, so that a call can
/// only answer NOSCRIPT after an explicit SCRIPT FLUSH.
async fn open(addr: &NodeAddr) -> Result<MultiplexedConnection, RedisError> {
    // Timeouts are ours (per call), not the driver's: a driver timeout would fail a request
    // that is still queued, and we must not reconnect underneath it.
    // The request queue is large enough never to be full (see `MAX_IN_FLIGHT`): a request
    // then takes its place in the queue on its first poll (ordering invariant 3).
    let config = AsyncConnectionConfig::new()
        .set_response_timeout(None)
        .set_connection_timeout(None)
        .set_pipeline_buffer_size(QUEUE_CAPACITY);
    let conn = addr
        .client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    // Sent as separate commands (the connection pipelines them anyway) so that a failure
    // keeps its error kind, e.g. NOAUTH.
    let loads = ALL_SCRIPTS.iter().map(|script| {
        let mut conn = conn.clone();
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(script.source());
        async move {
            conn.send_packed_command(&load)
                .await
                .and_then(top_level_error)
        }
    });
    for loaded in futures::future::join_all(loads).await {
        loaded?;
    }
    Ok(conn)
}

fn classify(addr: &NodeAddr, e: &RedisError) -> NodeFailure {
    #[cfg(feature = "tls")]
    if let Some(tls) = crate::tls::rustls_error(e) {
        let msg = addr.scrub(&crate::tls::explain(tls));
        return NodeFailure::new(&addr.display, FailureKind::Tls, msg);
    }
    let msg = addr.scrub(&e.to_string());
    let kind = match e.kind() {
        // A silent node with a full backlog (see `Backlog`): as good as a timeout.
        ErrorKind::Client if msg.contains(NOT_SENT) => FailureKind::Timeout,
        ErrorKind::AuthenticationFailed => FailureKind::Auth,
        _ if matches!(e.code(), Some("WRONGPASS" | "NOAUTH")) => FailureKind::Auth,
        ErrorKind::Io if msg.contains("lookup address") => FailureKind::UnknownHost,
        ErrorKind::Io => FailureKind::Connection,
        ErrorKind::Server(_) | ErrorKind::Extension => FailureKind::Server,
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => FailureKind::Protocol,
        _ => FailureKind::Connection,
    };
    NodeFailure::new(&addr.display, kind, msg)
}

/// Why a request was not sent: the call was stopped (the caller decided without it).
const STOPPED: &str = "call stopped by a later call of the same lease";

/// Why a request was not sent: the node is silent with a full backlog (see [`Backlog`]).
const NOT_SENT: &str = "not sent: the node has answered none of the";

/// Sends one command of `call`, recording when it holds its place in the connection's queue,
/// and refusing to start once the call was stopped (see
/// [`Progress`](crate::scripts::Progress)) or while the node is silent with a full backlog.
async fn send(
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
    let Some(seq) = link.backlog.admit(timeout) else {
        progress.written(slot);
        return Err(RedisError::from((
            ErrorKind::Client,
            NOT_SENT,
            format!(
                "{} requests written to it, for longer than the node timeout ({timeout:?})",
                link.backlog.outstanding()
            ),
        )));
    };
    // Unconstrained: a task out of its scheduling budget would otherwise get its room in the
    // queue and yet return before writing the request.
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
    }
    result
}

/// Counts a request in flight to a node, for as long as it lives.
struct InFlightRequest<'a>(&'a AtomicUsize);

impl<'a> InFlightRequest<'a> {
    fn enter(count: &'a AtomicUsize) -> Option<InFlightRequest<'a>> {
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
struct Recorded<'a> {
    request: Option<NodeRequest>,
    expired: &'a AtomicBool,
}

impl Recorded<'_> {
    /// Records the request's result, once.
    fn end(&mut self, result: NodeResult) {
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
fn top_level_error(v: Value) -> Result<Value, RedisError> {
    match v {
        Value::ServerError(e) => Err(e.into()),
        v => Ok(v),
    }
}

/// Node connections shared by a client and its guards.
pub(crate) type Nodes = Arc<[Node]>;

/// One configured node, for connections of your own beside the lock client's (diagnostics:
/// `INFO`, `TIME`, reading a lock's entry), made by
/// [`Builder::node_clients`](crate::Builder::node_clients): the address parsed as the lock
/// client parses it, a [`redis::Client`] with the builder's TLS settings, the address as it may
/// be shown, and the lock client's reading of its errors. The `quorum-lock` command's `status`
/// and `check` use it.
///
/// The client is the redis crate's (1.x), which this method makes part of the public API.
/// Cheap to clone; its `Debug` output shows the redacted address only.
#[derive(Clone)]
pub struct NodeClient {
    addr: Arc<NodeAddr>,
}

impl std::fmt::Debug for NodeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClient")
            .field("node", &self.addr.display)
            .finish_non_exhaustive()
    }
}

impl NodeClient {
    pub(crate) fn new(addr: NodeAddr) -> NodeClient {
        NodeClient {
            addr: Arc::new(addr),
        }
    }

    /// The address with its password replaced by `***`: the only form to show.
    pub fn name(&self) -> &str {
        &self.addr.display
    }

    /// A redis client for this node, with the builder's TLS settings for `rediss://` (trusted
    /// roots, client certificate). Connections made from it are yours: no timeout is set on
    /// them, and they are not the lock client's.
    pub fn client(&self) -> &redis::Client {
        &self.addr.client
    }

    /// An error of a connection to this node, as the lock client reads its own: classified
    /// ([`FailureKind::Tls`] for a certificate refused on either side, in plain words,
    /// [`FailureKind::Auth`], [`FailureKind::Connection`], ...), naming the node by its redacted
    /// address, and with every form of its password removed from the message.
    pub fn failure(&self, error: &RedisError) -> NodeFailure {
        classify(&self.addr, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_silent_node_collects_a_bounded_backlog_and_gets_one_probe_per_timeout() {
        let timeout = Duration::from_millis(100);
        let backlog = Backlog::new();
        // A healthy node: requests come and go; nothing is held back however many are out.
        for _ in 0..1000 {
            assert!(backlog.admit(timeout).is_some());
        }
        backlog.answered(1000);
        assert_eq!(backlog.outstanding(), 0);
        // Many requests at once, answered a moment later: busy, not silent.
        let mut last = 0;
        for _ in 0..2 * MAX_SILENT_BACKLOG {
            last = backlog.admit(timeout).expect("a busy node takes requests");
        }
        tokio::time::advance(timeout / 2).await;
        assert!(
            backlog.admit(timeout).is_some(),
            "silent for less than the timeout"
        );
        backlog.answered(last + 1);
        // The node stops answering: requests are written until the backlog is full and the
        // node has been silent for a timeout...
        let written = (0..MAX_SILENT_BACKLOG)
            .filter(|_| backlog.admit(timeout).is_some())
            .count();
        assert_eq!(written as u64, MAX_SILENT_BACKLOG);
        tokio::time::advance(timeout * 2).await;
        // ...then one probe per timeout, and nothing else.
        assert!(backlog.admit(timeout).is_some(), "the probe");
        for _ in 0..100 {
            assert!(backlog.admit(timeout).is_none(), "held back");
        }
        tokio::time::advance(timeout + Duration::from_millis(1)).await;
        let probe = backlog.admit(timeout).expect("the next probe");
        assert!(backlog.admit(timeout).is_none());
        // The node is back: it answers the probe (so, everything before it).
        backlog.answered(probe);
        assert_eq!(backlog.outstanding(), 0);
        assert!(backlog.admit(timeout).is_some(), "flowing again");
    }
}
