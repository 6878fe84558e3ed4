//! Making a node's connection, bounded by the connect timeout, and reading its errors.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError};

use crate::error::{FailureKind, NodeFailure};
use crate::node::address::NodeAddr;

use super::backlog::Backlog;
use super::send::top_level_error;
use super::shard::{Connected, Link};
use super::QUEUE_CAPACITY;

/// The background connect of one node: connects, loads every script, and publishes the new
/// connection (or the failure) in the slot, waking the callers waiting for it.
pub(super) async fn connect(addr: Arc<NodeAddr>, link: Arc<Link>, limit: Duration) {
    let mut pending = ConnectInFlight {
        link: &link,
        addr: &addr,
        result: None,
    };
    pending.result = Some(match tokio::time::timeout(limit, open(&addr)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(classify(&addr, &e)),
        Err(_) => Err(match tls_to_plain(&addr, limit).await {
            Some(failure) => failure,
            None => NodeFailure::new(
                &addr.display,
                FailureKind::Timeout,
                format!("could not connect within {limit:?}"),
            ),
        }),
    });
}

/// After a connect that timed out: a `rediss://` node that answers a plain `PING` is a
/// server without TLS, a configuration error ([`FailureKind::Config`]) rather than a node
/// too slow to answer.
pub(crate) async fn tls_to_plain(addr: &NodeAddr, limit: Duration) -> Option<NodeFailure> {
    #[cfg(feature = "tls")]
    if addr.is_tls() && plain_server(addr, limit).await {
        return Some(NodeFailure::new(
            &addr.display,
            FailureKind::Config,
            format!(
                "no TLS handshake within {}, and the node answers in plain text: a server \
                 without TLS (use redis:// or valkey://)",
                crate::human::Human(limit)
            ),
        ));
    }
    #[cfg(not(feature = "tls"))]
    let _ = (addr, limit);
    None
}

/// Whether a `rediss://` node whose TLS handshake never finished answers a plain `PING`: a
/// server without TLS waits for the rest of a "command" (the ClientHello) and never answers
/// it, which looks like a frozen node; a plain reply (`+PONG`, `-NOAUTH ...`) tells them
/// apart. A TLS server answers plain text with an alert or nothing, a frozen one not at all.
#[cfg(feature = "tls")]
async fn plain_server(addr: &NodeAddr, limit: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let redis::ConnectionAddr::TcpTls { host, port, .. } = addr.client.get_connection_info().addr()
    else {
        return false;
    };
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host.as_str(), *port))
            .await
            .ok()?;
        stream.write_all(b"PING\r\n").await.ok()?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).await.ok()?;
        Some(matches!(first[0], b'+' | b'-'))
    };
    tokio::time::timeout(limit.min(Duration::from_secs(1)), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Publishes a background connect's outcome when it ends, also when the task is dropped
/// before finishing (its runtime shut down): the slot is never left "connecting" with
/// callers waiting for a connect that will not come.
pub(super) struct ConnectInFlight<'a> {
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
pub(super) async fn open(addr: &NodeAddr) -> Result<MultiplexedConnection, RedisError> {
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
    let loads = crate::family::scripts().map(|script| {
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

pub(super) fn classify(addr: &NodeAddr, e: &RedisError) -> NodeFailure {
    #[cfg(feature = "tls")]
    if let Some(tls) = crate::node::tls::rustls_error(e) {
        let msg = addr.scrub(&crate::node::tls::explain(tls));
        return NodeFailure::new(&addr.display, FailureKind::Tls, msg);
    }
    // What a non-Redis endpoint "answered" is the parser's complaint about its bytes: say
    // what it means instead.
    if matches!(e.kind(), ErrorKind::Parse) {
        return NodeFailure::new(
            &addr.display,
            FailureKind::Protocol,
            "did not answer in the Redis protocol: not a Redis or Valkey server (or a TLS \
             port: use rediss://)"
                .to_string(),
        );
    }
    let msg = addr.scrub(&e.to_string());
    // The database index of the address (`/99`) is one the server does not have.
    if msg.contains("refused to switch database") {
        return NodeFailure::new(
            &addr.display,
            FailureKind::Config,
            "the server has no such database (the address's /N: the default server has \
             0 to 15)"
                .to_string(),
        );
    }
    let kind = match e.kind() {
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
