//! One node: a Redis master, or a whole cluster; the per-node timeout, script calls with
//! NOSCRIPT fallback, and error classification.
//!
//! - `shard`: one server's multiplexed connection with its background reconnect.
//! - `cluster`: a node that is a cluster: the slot map, a shard per primary, `MOVED`.
//! - `connection`: making a connection (bounded by the connect timeout) and reading errors.
//! - `send`: one command on the connection, holding its place in the queue.
//! - `backlog`: what a node that stopped answering may still be sent.
//! - `probe`: the check of a node, for `build()` and `quorum-lock check` alike.
//! - `redirect`: a compare-and-delete follows a `MOVED` or `ASK` once.
//! - `client`: [`NodeClient`], a configured node for connections of the application's own.
//! - `bound`: a request's time limit outside a fan-out, and the second chance of a stalled
//!   thread's deadline.
//! - `address`, `tls` (feature): node URLs, passwords kept out of sight, TLS settings.

pub(crate) mod address;
mod backlog;
mod bound;
mod client;
mod cluster;
mod connection;
mod probe;
mod redirect;
mod send;
mod shard;
#[cfg(feature = "tls")]
pub(crate) mod tls;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};
use tracing::Instrument;

use crate::error::{FailureKind, NodeFailure, Unsent};
use crate::node::address::NodeAddr;
use crate::scripts::{Call, SendBy};
use crate::telemetry::{NodeRequest, NodeResult};

pub(crate) use bound::{late, until_or_late};
pub use client::NodeClient;
use cluster::Cluster;
use connection::classify;
use redirect::Redirect;
use send::{answered, send, Caller, InFlightRequest, Recorded, SendError};
use shard::{Connected, Shard};

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
///
/// A node may be a whole Redis or Valkey Cluster (found out at its build-time check, or by its
/// first `MOVED` answer): each request then goes to the primary serving its key's slot, on
/// that primary's one connection (see `cluster`).
pub(crate) struct Node {
    /// The server at the node's address (for a cluster, the member it was given by).
    home: Arc<Shard>,
    /// Set once the node is found to be a cluster.
    cluster: OnceLock<Arc<Cluster>>,
    timeout: Duration,
    connect_timeout: Duration,
    /// Requests of this client on their way to the node or waiting for its answer.
    in_flight: AtomicUsize,
    /// Whether lock calls may use the node yet (see [`Admission`]).
    admission: Admission,
}

/// Whether a node's lock calls may be sent: [`build`](crate::Builder::build) returns once a
/// quorum of nodes answered its checks (and the rest had a node timeout more); a node whose
/// check is still running counts as failed, without being sent anything, until its check
/// passes (or fails to connect: then it is used as a node that was down at build), and is
/// excluded for good when the check finds it unfit (the same server as another node, a
/// replica).
#[derive(Default)]
struct Admission {
    state: std::sync::atomic::AtomicU8,
    /// Why the node was excluded.
    excluded: std::sync::OnceLock<String>,
}

const ADMITTED: u8 = 0;
const CHECKING: u8 = 1;
const EXCLUDED: u8 = 2;

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
            .field("addr", &self.home.addr.display)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Node {
    pub(crate) fn new(addr: NodeAddr, timeout: Duration, connect_timeout: Duration) -> Node {
        Node::shared(Arc::new(addr), timeout, connect_timeout)
    }

    /// A node at an address shared with others (a [`NodeClient`]'s).
    pub(crate) fn shared(
        addr: Arc<NodeAddr>,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Node {
        Node {
            home: Arc::new(Shard::new(addr)),
            cluster: OnceLock::new(),
            timeout,
            connect_timeout,
            in_flight: AtomicUsize::new(0),
            admission: Admission::default(),
        }
    }

    /// Lock calls fail at once, unsent, until [`admit`](Self::admit) or
    /// [`exclude`](Self::exclude): the node's build-time check is still running.
    pub(crate) fn hold_until_checked(&self) {
        self.admission.state.store(CHECKING, Ordering::Release);
    }

    /// The node's check passed (or it could not be reached): lock calls may use it.
    pub(crate) fn admit(&self) {
        let _ = self.admission.state.compare_exchange(
            CHECKING,
            ADMITTED,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// The node's late check found it unfit: lock calls fail at once, for good.
    pub(crate) fn exclude(&self, why: String) {
        let _ = self.admission.excluded.set(why);
        self.admission.state.store(EXCLUDED, Ordering::Release);
    }

    /// Why lock calls may not use the node now, if they may not.
    fn not_admitted(&self) -> Option<NodeFailure> {
        match self.admission.state.load(Ordering::Acquire) {
            ADMITTED => None,
            CHECKING => Some(NodeFailure::not_sent(
                self.name(),
                Unsent::Unchecked,
                "not sent: the node's build-time check has not answered yet",
            )),
            _ => Some(NodeFailure::new(
                self.name(),
                FailureKind::Protocol,
                format!(
                    "excluded: {}",
                    self.admission.excluded.get().map_or("", String::as_str)
                ),
            )),
        }
    }

    /// The redacted address.
    pub(crate) fn name(&self) -> &str {
        &self.home.addr.display
    }

    /// Whether the node is a cluster (as far as it has been found out).
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster.get().is_some()
    }

    /// The node is a cluster: from now on, requests go to the primary serving their key.
    fn become_cluster(&self) -> &Arc<Cluster> {
        self.cluster.get_or_init(|| {
            tracing::debug!(node = %self.name(), "the node is a cluster");
            Arc::new(Cluster::new(self.home.clone(), self.connect_timeout))
        })
    }

    /// `MOVED` and `ASK` answers this node gave (0 for a standalone node).
    pub(crate) fn redirects(&self) -> u64 {
        self.cluster.get().map_or(0, |c| c.redirects())
    }

    /// The server a request goes to: the node's own, or, for a cluster, the primary serving
    /// the slot of `call`'s keys (keyless requests go to the member given). The caller bounds
    /// the wait.
    async fn shard(&self, call: Option<&Call>) -> Result<Arc<Shard>, NodeFailure> {
        match (self.cluster.get(), call.and_then(Call::route)) {
            (Some(cluster), Some(key)) => {
                cluster
                    .shard(crate::rules::key::slot(key), self.name())
                    .await
            }
            _ => Ok(self.home.clone()),
        }
    }

    /// Sends one command (connecting first if needed), bounded by `limit`.
    pub(crate) async fn query_within(
        &self,
        cmd: &Cmd,
        limit: Duration,
    ) -> Result<Value, NodeFailure> {
        let sent = self.on_connection(None, |mut link, _resent| async move {
            answered(link.conn.send_packed_command(cmd).await?)
        });
        let unexpired = AtomicBool::new(false);
        let sent = futures::FutureExt::map(sent, |r| r.map_err(|(_, failure)| failure));
        self.bounded(limit, sent, &unexpired, None).await
    }

    /// Runs a lock call, bounded by the per-node timeout: for calls that wait for every
    /// node's answer ([`broadcast`](crate::fanout::broadcast)). A fan-out bounds its requests
    /// by one deadline of its own instead (see [`run`](Self::run)).
    pub(crate) async fn run_within_timeout(
        &self,
        call: &Call,
        form: SendBy,
        index: usize,
    ) -> Result<Value, NodeFailure> {
        // This request's own flag (the call is shared by the other nodes' requests, which may
        // end otherwise), declared first so that it outlives the request, and set before the
        // request is dropped.
        let expired = AtomicBool::new(false);
        let request = self.run(call, form, index, &expired);
        self.bounded(self.timeout, request, &expired, Some(call))
            .await
    }

    /// The failure of a request of `call` that got no answer within the node timeout: on a
    /// cluster node, naming the primary the request went to when it is not the member the
    /// node was given by.
    pub(crate) fn timed_out(&self, call: &Call) -> NodeFailure {
        self.no_answer_to(self.timeout, Some(call))
    }

    fn no_answer_to(&self, limit: Duration, call: Option<&Call>) -> NodeFailure {
        let failure = self.no_answer_within(limit);
        let serving = match (self.cluster.get(), call.and_then(Call::route)) {
            (Some(cluster), Some(key)) => cluster.serving(crate::rules::key::slot(key)),
            _ => None,
        };
        match serving {
            Some(shard) => self.named(&shard, failure),
            None => failure,
        }
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

    /// The node's smoothed round trip in µs (`Some(0)` before any answer) when it is admitted,
    /// connected and answering (its breaker closed); `None` otherwise. For the choice of a
    /// key's arbiter: never a condition of safety.
    pub(crate) fn answering(&self, key: &[u8]) -> Option<u64> {
        if self.not_admitted().is_some() {
            return None;
        }
        match self.cluster.get() {
            None => self.home.answering(self.timeout),
            Some(cluster) => cluster
                .serving(crate::rules::key::slot(key))?
                .answering(self.timeout),
        }
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
        index: usize,
        expired: &AtomicBool,
    ) -> Result<Value, NodeFailure> {
        if let Some(failure) = self.not_admitted() {
            return Err(failure);
        }
        let Some(_in_flight) = InFlightRequest::enter(&self.in_flight) else {
            return Err(NodeFailure::new(
                self.name(),
                FailureKind::Connection,
                format!("more than {MAX_IN_FLIGHT} requests in flight to this node"),
            ));
        };
        let mut request = Recorded {
            request: Some(NodeRequest::start(index, call.name)),
            expired,
        };
        // Named as the OpenTelemetry conventions for Redis clients name a command's span; the
        // node is given by its index, never its address.
        let span = tracing::trace_span!(
            "redis",
            "db.system.name" = "redis",
            "db.operation.name" = call.verb(),
            "quorum_lock.node" = index,
            "quorum_lock.operation" = call.name,
        );
        let redirected = std::sync::Mutex::new(None);
        let redirected = &redirected;
        let result = self
            .on_connection(Some(call), |conn, resent| async move {
                let timeout = self.timeout;
                let first = match (form, resent) {
                    (_, true) => send(&conn, &call.resend(form), call, Caller { index, expired }, timeout).await,
                    (SendBy::Sha, false) => {
                        send(&conn, call.command(), call, Caller { index, expired }, timeout).await
                    }
                    (SendBy::Eval, false) => {
                        send(&conn, &call.eval(), call, Caller { index, expired }, timeout).await
                    }
                };
                let answer = match first.and_then(answered) {
                    Err(SendError::Redis(e))
                        if call.is_script()
                            && e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
                    {
                        tracing::debug!(node = %self.name(), script = call.name, "NOSCRIPT, falling back to EVAL");
                        send(&conn, &call.eval(), call, Caller { index, expired }, timeout)
                            .await
                            .and_then(answered)
                    }
                    other => other,
                };
                if let Err(e) = &answer {
                    *redirected.lock().unwrap_or_else(|p| p.into_inner()) = Redirect::of(call, e);
                }
                match (answer, call.durability()) {
                    (Ok(v), Some(durable)) if !crate::rules::durable::refusal(&v) => {
                        self.made_durable(&conn, durable, v, resent, Caller { index, expired })
                            .await
                    }
                    (answer, _) => answer,
                }
            })
            .instrument(span)
            .await
            .map_err(|(_, failure)| failure);
        // A compare-and-delete follows a redirect once, within the same bound (`redirect`).
        let redirect = redirected.lock().unwrap_or_else(|p| p.into_inner()).take();
        let result = match (result, redirect) {
            (Err(failure), Some(redirect)) => {
                self.follow(call, Caller { index, expired }, redirect, failure)
                    .instrument(tracing::trace_span!("redirect"))
                    .await
            }
            (result, _) => result,
        };
        request.end(match &result {
            Ok(_) => NodeResult::Answered,
            Err(f) if f.unsent() == Some(Unsent::Stopped) => NodeResult::Stopped,
            Err(f) if f.kind() == FailureKind::Timeout => NodeResult::Timeout,
            Err(_) => NodeResult::Error,
        });
        result
    }

    /// A durable vote (`rules::durable`): `WAITAOF` on the connection that wrote the vote, so
    /// that it waits for that write (the server waits for the offset of the connection's own
    /// last write). A vote written by a re-send after a dropped connection is not counted: the
    /// re-send may have found its own entry and written nothing, and the new connection's
    /// `WAITAOF` would then wait for nothing.
    async fn made_durable(
        &self,
        conn: &Connected,
        durable: crate::rules::durable::DurableVotes,
        vote: Value,
        resent: bool,
        caller: Caller<'_>,
    ) -> Result<Value, SendError> {
        if resent {
            return Err(not_durable(
                "the connection dropped before the vote was confirmed; a re-sent vote is not \
                 counted"
                    .into(),
            ));
        }
        let wait = durable.wait_call(self.timeout.as_millis() as u64);
        let answer = send(conn, wait.command(), &wait, caller, self.timeout).await;
        if crate::failpoints::on(crate::failpoints::FailPoint::VoteBeforeFsync) {
            return Ok(vote);
        }
        let answer = answer.and_then(answered)?;
        match durable.confirmed_by(&answer) {
            true => Ok(vote),
            false => Err(not_durable(format!(
                "({durable:?}) WAITAOF answered {answer:?}"
            ))),
        }
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
    ///
    /// On a cluster node, `op` runs on the connection of the primary serving `key` (see
    /// `cluster`); an answer that says the cluster changed corrects or refreshes the map, and
    /// nothing is re-sent elsewhere.
    async fn on_connection<'a, F, Fut>(
        &'a self,
        call: Option<&Call>,
        op: F,
    ) -> Result<Value, (u64, NodeFailure)>
    where
        F: Fn(Connected, bool) -> Fut + 'a,
        Fut: std::future::Future<Output = Result<Value, SendError>> + 'a,
    {
        let shard = self.shard(call).await.map_err(|f| (0, f))?;
        let (generation, conn) = self.connection(&shard).await.map_err(|f| (0, f))?;
        match op(conn, false).await {
            Err(e) if e.is_io_error() => {
                shard.forget(generation);
                if let SendError::Redis(e) = &e {
                    tracing::debug!(node = %self.name(), error = %self.scrubbed(e), "connection dropped; reconnecting once");
                    if let Some(cluster) = self.cluster.get() {
                        cluster.observe(e);
                    }
                }
                let (generation, conn) = self.connection(&shard).await.map_err(|f| (0, f))?;
                op(conn, true).await.map_err(|e| {
                    let failure = self.failure(&shard, generation, &e);
                    // The first send may have been written on the dropped connection: a re-send
                    // refused by the breaker must not read as "never written" (a rollback
                    // would skip the node).
                    let failure = match failure.is_unsent() {
                        true => failure.maybe_written("re-send after a dropped connection"),
                        false => failure,
                    };
                    (generation, failure)
                })
            }
            other => other.map_err(|e| (generation, self.failure(&shard, generation, &e))),
        }
    }

    /// `shard`'s live connection (see [`Shard::connection`]); a cluster's map is refreshed
    /// when a primary cannot be reached (a failover may have moved its slots).
    async fn connection(&self, shard: &Arc<Shard>) -> Result<(u64, Connected), NodeFailure> {
        let connected = shard.connection(self.connect_timeout).await;
        match (connected, self.cluster.get()) {
            (Ok(conn), _) => Ok(conn),
            (Err(failure), None) => Err(failure),
            (Err(failure), Some(cluster)) => {
                cluster.unreachable();
                Err(self.named(shard, failure))
            }
        }
    }

    /// Classifies a call's error, dropping the connection when it is broken; a cluster reads
    /// what the answer says about its map (a `MOVED` from a node not known to be a cluster
    /// makes it one).
    fn failure(&self, shard: &Arc<Shard>, generation: u64, e: &SendError) -> NodeFailure {
        let e = match e {
            SendError::Unsent(why, detail) => {
                return self.named(
                    shard,
                    NodeFailure::not_sent(self.name(), *why, detail.clone()),
                )
            }
            SendError::Redis(e) => e,
        };
        if e.is_io_error() {
            shard.forget(generation);
        }
        let cluster = match e.kind() {
            ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask) => {
                Some(self.become_cluster())
            }
            _ => self.cluster.get(),
        };
        if let Some(cluster) = cluster {
            cluster.observe(e);
        }
        self.named(shard, classify(&shard.addr, e))
    }

    /// A failure of a cluster's primary other than the member the node was given by, named
    /// by the node, with the primary at the end of its detail.
    fn named(&self, shard: &Arc<Shard>, failure: NodeFailure) -> NodeFailure {
        if Arc::ptr_eq(shard, &self.home) {
            return failure;
        }
        let primary = format!("(primary {})", shard.addr.display);
        failure.renamed(self.name(), &primary)
    }

    fn scrubbed(&self, e: &RedisError) -> String {
        self.home.addr.scrub(&e.to_string())
    }

    /// A dedicated pub/sub connection (release notices), not bounded here, and the member it
    /// was made to (or tried). On a cluster node, to a primary not in `avoid` (see
    /// [`Cluster::pubsub_shard`](cluster::Cluster::pubsub_shard)): a cluster delivers
    /// `PUBLISH` to the subscribers of every member.
    pub(crate) async fn pubsub(
        &self,
        avoid: &[String],
    ) -> (String, Result<redis::aio::PubSub, NodeFailure>) {
        let shard = match self.cluster.get() {
            Some(cluster) => cluster.pubsub_shard(avoid),
            None => self.home.clone(),
        };
        let connected = shard.addr.client.get_async_pubsub().await;
        let connected = connected.map_err(|e| self.named(&shard, classify(&shard.addr, &e)));
        (shard.addr.display.clone(), connected)
    }
}

/// Node connections shared by a client and its guards.
pub(crate) type Nodes = Arc<[Node]>;

/// A vote that was written but not made durable: counted as a failure (maybe written, so
/// rolled back), never as a yes.
fn not_durable(detail: String) -> SendError {
    SendError::Redis(RedisError::from((
        ErrorKind::UnexpectedReturnType,
        "the vote was not made durable",
        detail,
    )))
}
