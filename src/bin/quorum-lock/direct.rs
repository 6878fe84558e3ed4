//! Direct connections to each node, for what the lock client does not do: `status` and `check`
//! read every node's own view, also of nodes the lock client could not use. The nodes come from
//! the library (`Builder::node_clients`): parsed as the lock client parses them, with the same
//! TLS settings, shown without passwords, their errors classified and redacted as the lock
//! client's are.

use std::time::Duration;

use quorum_lock::{FailureKind, NodeClient, NodeFailure};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, Value};

use crate::exit::Failure;
use crate::settings::tls_refused;
use crate::values::format_duration;

/// Why a node could not be read.
pub enum NodeError {
    /// The connection or a command failed (classified, the password removed).
    Failed(NodeFailure),
    /// No connection, or no answer, within the limit.
    TimedOut(String),
    /// A member of a cluster node other than the one given (named `host:port`) failed.
    Member(String, Box<NodeError>),
    /// The node is a cluster, which cannot keep the key's names in its slot: a usage error,
    /// as it is for the lock calls.
    Refused(quorum_lock::Error),
}

impl NodeError {
    /// The reason, without the node's name (shown beside it).
    pub fn reason(&self) -> String {
        match self {
            NodeError::Failed(f) if f.detail().is_empty() => f.kind().to_string(),
            NodeError::Failed(f) => format!("{}: {}", f.kind(), f.detail()),
            NodeError::TimedOut(reason) => reason.clone(),
            NodeError::Member(member, e) => format!("member {member}: {}", e.reason()),
            NodeError::Refused(e) => e.to_string(),
        }
    }

    /// The failure itself, for a member's too.
    fn failed(&self) -> Option<&NodeFailure> {
        match self {
            NodeError::Failed(f) => Some(f),
            NodeError::Member(_, e) => e.failed(),
            _ => None,
        }
    }
}

/// A node that answered wrongly is configuration for every command (78), as it is for the
/// lock client's build: waiting will not fix it. A TLS handshake refused on either side,
/// rejected credentials, an unknown host, a server that does not speak Redis. The first such
/// node names it.
///
/// # Errors
/// Exit 78 when a node is misconfigured.
pub fn misconfigured<'a>(errors: impl IntoIterator<Item = &'a NodeError>) -> Result<(), Failure> {
    match errors
        .into_iter()
        .filter_map(NodeError::failed)
        .find(|f| crate::exit::misconfigured(f.kind()))
    {
        Some(failure) if failure.kind() == FailureKind::Tls => Err(tls_refused(failure)),
        Some(failure) => Err(Failure::config(format!("configuration: node {failure}"))),
        None => Ok(()),
    }
}

/// Connects within `connect_timeout`; each later command is bounded by `response_timeout`.
///
/// # Errors
/// Why not, redacted.
pub async fn connect(
    node: &NodeClient,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<MultiplexedConnection, NodeError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(response_timeout));
    // The driver's connection timeout covers the TCP connect; the handshake (TLS, AUTH, a
    // paused server) needs a bound too.
    match tokio::time::timeout(
        connect_timeout,
        node.client()
            .get_multiplexed_async_connection_with_config(&config),
    )
    .await
    {
        Ok(Ok(conn)) => Ok(conn),
        // The driver's own timeout (of the TCP connect or the TLS handshake).
        Ok(Err(e)) if e.is_timeout() => Err(NodeError::Failed(
            match node.timed_out(connect_timeout).await {
                Some(failure) => failure,
                None => node.failure(&e),
            },
        )),
        Ok(Err(e)) => Err(NodeError::Failed(node.failure(&e))),
        Err(_) => Err(match node.timed_out(connect_timeout).await {
            Some(failure) => NodeError::Failed(failure),
            None => NodeError::TimedOut(format!(
                "no connection within {}",
                format_duration(connect_timeout)
            )),
        }),
    }
}

/// Sends one command, bounded by `limit`; a server error reply is an error.
///
/// # Errors
/// Why not, redacted.
pub async fn query(
    node: &NodeClient,
    conn: &mut MultiplexedConnection,
    cmd: &Cmd,
    limit: Duration,
) -> Result<Value, NodeError> {
    match tokio::time::timeout(limit, conn.send_packed_command(cmd)).await {
        Ok(Ok(Value::ServerError(e))) => {
            Err(NodeError::Failed(node.failure(&redis::RedisError::from(e))))
        }
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(NodeError::Failed(node.failure(&e))),
        Err(_) => Err(NodeError::TimedOut(format!(
            "no answer within {}",
            format_duration(limit)
        ))),
    }
}

/// A reply as text (bulk, simple or verbatim string).
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

/// A reply as an integer (integer or numeric string).
pub fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        other => text(other).and_then(|t| t.trim().parse().ok()),
    }
}
