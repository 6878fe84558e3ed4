//! The crate's error enum and the per-node failure type.

use std::fmt;
use std::time::Duration;

use crate::human::Human;

/// A `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why one node did not confirm an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// No answer within the per-node timeout (a slow, paused or black-holed node).
    Timeout,
    /// The connection could not be made or was dropped (refused, reset, closed).
    Connection,
    /// The host name did not resolve.
    UnknownHost,
    /// The node rejected the credentials (wrong user or password, or none given).
    Auth,
    /// The TLS handshake failed (`rediss://`): the node's certificate is not trusted or not
    /// valid for its name, or the node refused the client certificate, or asked for one.
    Tls,
    /// The node answered with an error (e.g. out of memory, a read-only replica, a busy script).
    Server,
    /// The node answered something the lock protocol does not expect.
    Protocol,
    /// The node refused what the address asks of the connection: a database index it does not
    /// have (`redis://host:6379/99`), or TLS from a server without it (`rediss://` to a plain
    /// server, found by a plain `PING` after the handshake timed out).
    Config,
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailureKind::Timeout => "timed out",
            FailureKind::Connection => "connection failed",
            FailureKind::UnknownHost => "unknown host",
            FailureKind::Auth => "authentication failed",
            FailureKind::Tls => "tls failed",
            FailureKind::Server => "server error",
            FailureKind::Protocol => "unexpected reply",
            FailureKind::Config => "misconfigured",
        })
    }
}

/// Why a request was never written to its node (see [`NodeFailure::unsent`]): nothing of it
/// reached the node, so nothing there needs undoing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Unsent {
    /// The node's circuit breaker is open: it has left requests unanswered for longer than
    /// the node timeout, so the request counts as timed out without being written (a probe
    /// of the breaker's own finds out when the node is back).
    BreakerOpen,
    /// The node's build-time check has not answered yet: it takes no lock calls until its
    /// check passes.
    Unchecked,
    /// The call no longer needed this node's answer (a later call of the same lease stopped
    /// it) before the request was written.
    Stopped,
}

impl fmt::Display for Unsent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unsent::BreakerOpen => "circuit breaker open",
            Unsent::Unchecked => "build-time check pending",
            Unsent::Stopped => "call stopped",
        })
    }
}

/// One node's failure, naming the node by its redacted address (never its password) and, once
/// known, by its position in the client's node list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFailure {
    node: String,
    index: Option<usize>,
    kind: FailureKind,
    unsent: Option<Unsent>,
    detail: String,
}

impl NodeFailure {
    pub(crate) fn new(
        node: impl Into<String>,
        kind: FailureKind,
        detail: impl Into<String>,
    ) -> Self {
        // One line: a driver's message can span several (a parse error quoting what a
        // node that is not Redis sent back), and every error is shown on one line.
        let detail: String = detail.into();
        let detail = match detail.contains(['\n', '\r']) {
            true => detail.split_whitespace().collect::<Vec<_>>().join(" "),
            false => detail,
        };
        NodeFailure {
            node: node.into(),
            index: None,
            kind,
            unsent: None,
            detail,
        }
    }

    /// A request that was never written to the node, and why (its kind follows from `why`).
    pub(crate) fn not_sent(
        node: impl Into<String>,
        why: Unsent,
        detail: impl Into<String>,
    ) -> Self {
        let kind = match why {
            // As good as a timeout: an answer the node would not have given in time.
            Unsent::BreakerOpen | Unsent::Unchecked => FailureKind::Timeout,
            Unsent::Stopped => FailureKind::Connection,
        };
        NodeFailure {
            unsent: Some(why),
            ..NodeFailure::new(node, kind, detail)
        }
    }

    /// The same failure, of the node at `index` in the client's node list.
    pub(crate) fn at(mut self, index: usize) -> Self {
        self.index = Some(index);
        self
    }

    /// The same failure with `detail` in front of its own, and no longer counted as never
    /// written (`unsent` cleared): for a re-send whose first send may have been written.
    pub(crate) fn maybe_written(self, detail: &str) -> Self {
        NodeFailure {
            unsent: None,
            detail: format!("{detail} {}", self.detail),
            ..self
        }
    }

    /// The same failure, named by `node`, with `after` behind its detail (a cluster's
    /// primary's failure, named by its node).
    pub(crate) fn renamed(self, node: &str, after: &str) -> Self {
        NodeFailure {
            node: node.into(),
            detail: format!("{} {after}", self.detail),
            ..self
        }
    }

    /// The request was never written to the node (its circuit breaker was open, its
    /// build-time check had not answered, or its call was stopped first).
    pub(crate) fn is_unsent(&self) -> bool {
        self.unsent.is_some()
    }

    /// Why the request was never written to the node, if it was not: then nothing of it
    /// reached the node. `None` when it was, or may have been, written.
    pub fn unsent(&self) -> Option<Unsent> {
        self.unsent
    }

    /// The node's position in the list given to [`Builder::nodes`](crate::Builder::nodes)
    /// (from 0), when the failure is of one of the client's nodes.
    pub fn index(&self) -> Option<usize> {
        self.index
    }

    /// The node's address with any password replaced by `***`.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// What went wrong.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The underlying error's message (already redacted).
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The node did not answer within the per-node timeout.
    pub fn is_timeout(&self) -> bool {
        self.kind == FailureKind::Timeout
    }

    /// The node could not be reached or dropped the connection.
    pub fn is_connection(&self) -> bool {
        matches!(
            self.kind,
            FailureKind::Connection | FailureKind::UnknownHost
        )
    }
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            write!(f, "{}: {}", self.node, self.kind)
        } else {
            write!(f, "{}: {}: {}", self.node, self.kind, self.detail)
        }
    }
}

/// The operation an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Taking the lock.
    Acquire,
    /// Extending (or renewing) the lock's lease.
    Extend,
    /// Releasing the lock.
    Release,
    /// Breaking the lock ([`QuorumLock::break_lock`](crate::QuorumLock::break_lock)).
    Break,
    /// Asking its holders to release it
    /// ([`QuorumLock::request_release`](crate::QuorumLock::request_release)).
    AskRelease,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Acquire => "acquire",
            Op::Extend => "extend",
            Op::Release => "release",
            Op::Break => "break",
            Op::AskRelease => "ask to release",
        })
    }
}

/// Everything that can go wrong. Messages are lowercase and never contain a password.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A builder setting is out of range or inconsistent; `field` names it.
    #[error("invalid configuration: {field}: {reason}")]
    InvalidConfig {
        /// The setting at fault.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },

    /// A node address could not be used.
    #[error("invalid node address {address}: {reason}")]
    InvalidNodeUrl {
        /// The address as given, with any password replaced by `***`.
        address: String,
        /// Why it was rejected.
        reason: String,
    },

    /// The lock key is not acceptable (e.g. empty).
    #[error("invalid key: {reason}")]
    InvalidKey {
        /// Why it was rejected.
        reason: String,
    },

    /// A holder value given to [`QuorumLock::extend_by_holder`](crate::QuorumLock::extend_by_holder) or
    /// [`QuorumLock::release_by_holder`](crate::QuorumLock::release_by_holder) is not one: empty, longer
    /// than [`MAX_HOLDER_LEN`](crate::MAX_HOLDER_LEN), or with a character no holder value has.
    /// The message never shows the value.
    #[error("invalid holder value: {reason}")]
    InvalidHolder {
        /// Why it was rejected.
        reason: String,
    },

    /// The lock TTL is not acceptable (zero, or too short to ever yield any validity).
    #[error("invalid ttl {}: {reason}", Human(*.ttl))]
    InvalidTtl {
        /// The TTL given.
        ttl: Duration,
        /// Why it was rejected.
        reason: String,
    },

    /// The same Redis server is configured twice (same `run_id`); it would count twice toward
    /// the quorum.
    #[error("nodes {first} and {second} are the same redis server (run_id {run_id})")]
    DuplicateNode {
        /// The first address.
        first: String,
        /// The second address of the same server.
        second: String,
        /// The server's run id.
        run_id: String,
    },

    /// Two nodes are members of one Redis or Valkey Cluster (one's members include a member
    /// of the other): one cluster is one node of the quorum, however many of its members are
    /// listed, and would count twice toward it. List the cluster once (any one member).
    #[error(
        "nodes {first} and {second} are members of one cluster (member {member}): one cluster is one node; list it once"
    )]
    SameCluster {
        /// The first address.
        first: String,
        /// The second address, a member of the same cluster.
        second: String,
        /// The id of a member both belong to (`CLUSTER MYID`).
        member: String,
    },

    /// The same address (host and port, or socket path, and database) is listed twice: it
    /// would count twice toward the quorum. Refused before any node is contacted.
    #[error("node {node} is listed twice: it would count twice toward the quorum")]
    DuplicateAddress {
        /// The address (redacted).
        node: String,
    },

    /// A configured node is a replica; locks need independent masters.
    #[error("node {node} is a replica; every node must be an independent master")]
    ReplicaNode {
        /// The replica's address.
        node: String,
    },

    /// A node is misconfigured in a way that will not heal by waiting (unknown host, wrong
    /// password, a certificate refused).
    #[error("node {0}")]
    Node(NodeFailure),

    /// Fewer nodes are reachable than the quorum needs (at build time).
    #[error("only {reachable} of {nodes} nodes reachable, the quorum needs {required}: {}", list(.failures))]
    Unreachable {
        /// Nodes that answered.
        reachable: usize,
        /// Nodes configured.
        nodes: usize,
        /// Nodes the quorum needs.
        required: usize,
        /// Why the others did not answer.
        failures: Vec<NodeFailure>,
    },

    /// An operation did not reach its quorum.
    #[error("no quorum to {op} {key:?}: {confirmed} of {required} required nodes confirmed, {refused} refused{}", failed(.failures))]
    NoQuorum {
        /// What was attempted.
        op: Op,
        /// The lock key (lossy UTF-8).
        key: String,
        /// Nodes that confirmed.
        confirmed: usize,
        /// Nodes required.
        required: usize,
        /// Nodes that answered with a refusal (held by another holder, or not ours).
        refused: usize,
        /// Nodes that failed or timed out.
        failures: Vec<NodeFailure>,
    },

    /// A quorum confirmed, but so late that no validity was left (slow nodes, or a TTL that is
    /// too short for the network).
    #[error("acquiring {key:?} took {}, leaving no validity of the {} ttl", Human(*.elapsed), Human(*.ttl))]
    ValidityExhausted {
        /// The lock key (lossy UTF-8).
        key: String,
        /// How long the attempt took.
        elapsed: Duration,
        /// The TTL requested.
        ttl: Duration,
    },

    /// `acquire` gave up waiting: the lock stayed held by others.
    #[error("timed out after {} waiting for {key:?} ({attempts} attempts)", Human(*.waited))]
    WaitTimeout {
        /// The lock key (lossy UTF-8).
        key: String,
        /// How long it waited.
        waited: Duration,
        /// How many attempts were made.
        attempts: u32,
    },

    /// A read-write lock request waited until its wait ended while the task that made it
    /// holds a lock of the same key (through this client) that it was waiting for: a read
    /// lock's holder asking for the write lock (there is no upgrade), the writer asking for a
    /// read lock (no downgrade) or for the write lock again, or a second read lock queued
    /// behind a writer that waits for the task's first. Release the lock the task holds
    /// first. (Reported instead of [`Error::WaitTimeout`]; a guard moved to another task still
    /// counts as the task's that took it.)
    #[error("{key:?}: this task holds a {held} lock of the key, and its request for a {wanted} lock waited for that lock until its wait ended (no upgrade or downgrade; a second read lock waits behind a waiting writer): release the {held} lock first")]
    WaitsForItself {
        /// The lock key (lossy UTF-8).
        key: String,
        /// The kind held: `"read"` or `"write"`.
        held: &'static str,
        /// The kind asked for.
        wanted: &'static str,
    },

    /// The lock can no longer be trusted: its validity ran out or a quorum no longer holds it.
    #[error("lock {key:?} is lost")]
    LockLost {
        /// The lock key (lossy UTF-8).
        key: String,
    },

    /// Release found the lock not held by a quorum: the critical section may have overlapped
    /// with another holder's.
    #[error("lock {key:?} was not held by a quorum at release: {confirmed} of {required} nodes confirmed{}", failed(.failures))]
    NotHeld {
        /// The lock key (lossy UTF-8).
        key: String,
        /// Nodes that confirmed.
        confirmed: usize,
        /// Nodes required.
        required: usize,
        /// Nodes that failed or timed out.
        failures: Vec<NodeFailure>,
    },

    /// Release could not be confirmed: fewer than a quorum confirmed in time, but too few
    /// refused to show that a quorum no longer held the lock (the others were slow, silent or
    /// unreachable). A guard released while its validity lasted held the lock to the end (its
    /// acquire's quorum guarantees that, not the release); the entries on the nodes that did
    /// not confirm expire with their TTL, so the next holder may wait for them. Not a loss:
    /// [`is_lost`](Error::is_lost) is false.
    #[error("release of lock {key:?} unconfirmed: {confirmed} of {required} nodes confirmed, {refused} refused{}", failed(.failures))]
    ReleaseUnconfirmed {
        /// The lock key (lossy UTF-8).
        key: String,
        /// Nodes that confirmed.
        confirmed: usize,
        /// Nodes required.
        required: usize,
        /// Nodes that answered that they did not hold this holder's entry.
        refused: usize,
        /// Nodes that failed or timed out.
        failures: Vec<NodeFailure>,
    },
}

impl Error {
    /// The lock is held by someone else (the wait ran out).
    pub fn is_wait_timeout(&self) -> bool {
        matches!(self, Error::WaitTimeout { .. })
    }

    /// The lock was lost or not held: the critical section may have overlapped another's.
    pub fn is_lost(&self) -> bool {
        matches!(self, Error::LockLost { .. } | Error::NotHeld { .. })
    }

    /// The per-node failures this error carries, if any.
    pub fn node_failures(&self) -> &[NodeFailure] {
        match self {
            Error::Unreachable { failures, .. }
            | Error::NoQuorum { failures, .. }
            | Error::NotHeld { failures, .. }
            | Error::ReleaseUnconfirmed { failures, .. } => failures,
            Error::Node(f) => std::slice::from_ref(f),
            _ => &[],
        }
    }
}

fn list(failures: &[NodeFailure]) -> String {
    failures
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn failed(failures: &[NodeFailure]) -> String {
    if failures.is_empty() {
        String::new()
    } else {
        format!(", {} failed: {}", failures.len(), list(failures))
    }
}
