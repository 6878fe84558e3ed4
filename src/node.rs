//! One Redis master: its (redacted) address, one multiplexed connection with reconnect, the
//! per-node timeout, script calls with NOSCRIPT fallback, and error classification.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

use crate::error::{Error, FailureKind, NodeFailure};
use crate::scripts::{Call, ALL_SCRIPTS};

/// A parsed node address: the redis client for it, and its display form without the password.
pub(crate) struct NodeAddr {
    pub(crate) display: String,
    secret: Option<String>,
    client: redis::Client,
}

impl NodeAddr {
    /// Parses `redis://[user:pass@]host:port[/db]`, `rediss://...` or `unix:///path`.
    pub(crate) fn parse(raw: &str) -> Result<NodeAddr, Error> {
        let invalid = |reason: String| Error::InvalidNodeUrl {
            address: redact_unparsed(raw),
            reason,
        };
        let url = url::Url::parse(raw.trim()).map_err(|e| invalid(e.to_string()))?;
        match url.scheme() {
            "redis" | "unix" | "redis+unix" => {}
            "rediss" if cfg!(feature = "tls") => {}
            "rediss" => {
                return Err(invalid(
                    "rediss:// needs the `tls` feature of quorum-lock".into(),
                ))
            }
            other => {
                return Err(invalid(format!(
                    "unsupported scheme {other:?} (use redis://, rediss:// or unix://)"
                )))
            }
        }
        if matches!(url.scheme(), "redis" | "rediss") && url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("no host".into()));
        }
        let secret = url
            .password()
            .map(|p| percent_decode(p).unwrap_or_else(|| p.to_string()));
        let mut shown = url.clone();
        if url.password().is_some() {
            // Cannot fail: the URL has a host, since it has a password.
            let _ = shown.set_password(Some("***"));
        }
        let display = shown.to_string();
        let client = redis::Client::open(url.as_str())
            .map_err(|e| invalid(scrub(&e.to_string(), secret.as_deref())))?;
        Ok(NodeAddr {
            display,
            secret,
            client,
        })
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Redacts the credentials of an address that did not even parse: everything between `://`
/// and the last `@` is hidden.
pub(crate) fn redact_unparsed(raw: &str) -> String {
    match (raw.find("://"), raw.rfind('@')) {
        (Some(s), Some(at)) if at > s + 3 => format!("{}***{}", &raw[..s + 3], &raw[at..]),
        (None, Some(at)) => format!("***{}", &raw[at..]),
        _ => raw.to_string(),
    }
}

/// Removes every occurrence of the secret from a message (defence in depth: redis errors do
/// not normally echo passwords, but nothing we print may).
fn scrub(msg: &str, secret: Option<&str>) -> String {
    match secret {
        Some(s) if !s.is_empty() => msg.replace(s, "***"),
        _ => msg.to_string(),
    }
}

/// The connection slot: the live connection and a generation number, so that a failure
/// observed on an old connection does not throw away a newer one.
#[derive(Default)]
struct Slot {
    generation: u64,
    conn: Option<MultiplexedConnection>,
}

/// One Redis master.
///
/// All commands to a node go through one multiplexed connection, so they execute on the server
/// in the order they were sent: an attempt's rollback always runs after the attempt's acquire
/// on that node, even when the acquire answered too late to be counted (DESIGN 3, "ordering
/// trap"). A connection is replaced only after it failed, never because of a timeout: a
/// timed-out command may still be queued behind a paused server, and so must its rollback be.
pub(crate) struct Node {
    addr: NodeAddr,
    timeout: Duration,
    // std Mutex: held only to clone or swap the handle, never across an await.
    slot: Mutex<Slot>,
    // tokio Mutex: held across the connect, so concurrent callers share one connect attempt.
    connecting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("addr", &self.addr.display)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Node {
    pub(crate) fn new(addr: NodeAddr, timeout: Duration) -> Node {
        Node {
            addr,
            timeout,
            slot: Mutex::new(Slot::default()),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// The redacted address.
    pub(crate) fn name(&self) -> &str {
        &self.addr.display
    }

    fn current(&self) -> (u64, Option<MultiplexedConnection>) {
        let slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        (slot.generation, slot.conn.clone())
    }

    fn forget(&self, generation: u64) {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if slot.generation == generation {
            slot.conn = None;
        }
    }

    /// The live connection, connecting (and loading the scripts) if there is none.
    async fn connection(&self) -> Result<(u64, MultiplexedConnection), RedisError> {
        if let (generation, Some(conn)) = self.current() {
            return Ok((generation, conn));
        }
        let _connecting = self.connecting.lock().await;
        if let (generation, Some(conn)) = self.current() {
            return Ok((generation, conn));
        }
        // Timeouts are ours (per call), not the driver's: a driver timeout would fail a
        // request that is still queued, and we must not reconnect underneath it.
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(None);
        let conn = self
            .addr
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        // Load every script on every (re)connect, before the connection is used, so that an
        // acquire can only answer NOSCRIPT after an explicit SCRIPT FLUSH.
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
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        slot.generation += 1;
        slot.conn = Some(conn.clone());
        Ok((slot.generation, conn))
    }

    /// Sends one command (connecting first if needed), bounded by `limit`.
    pub(crate) async fn query_within(
        &self,
        cmd: &Cmd,
        limit: Duration,
    ) -> Result<Value, NodeFailure> {
        self.bounded(
            limit,
            self.on_connection(|mut conn| async move {
                conn.send_packed_command(cmd)
                    .await
                    .and_then(top_level_error)
            }),
        )
        .await
    }

    /// Runs a lock script call, bounded by the per-node timeout. In [`Form::Sha`] it is sent
    /// by EVALSHA, falling back to EVAL when the node answers NOSCRIPT (scripts flushed). The
    /// fallback is sent from the same future: a caller that drops the future (decided, or
    /// timed out) can be sure no EVAL follows its rollback.
    pub(crate) async fn run(
        &self,
        call: &Call,
        form: Form,
        slot: usize,
    ) -> Result<Value, NodeFailure> {
        self.bounded(self.timeout, self.on_connection(|mut conn| async move {
            let first = match form {
                Form::Sha => send(&mut conn, call.command(), call, slot).await,
                Form::Eval => send(&mut conn, &call.eval(), call, slot).await,
            };
            match first.and_then(top_level_error) {
                Err(e)
                    if call.is_script()
                        && e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
                {
                    tracing::debug!(node = %self.name(), script = call.name, "NOSCRIPT, falling back to EVAL");
                    send(&mut conn, &call.eval(), call, slot)
                        .await
                        .and_then(top_level_error)
                }
                other => other,
            }
        }))
        .await
    }

    /// Runs `op` on the node's connection. When a connection that was already open turns out
    /// to be dead (the server restarted, or the connection was reset), `op` runs once more on
    /// a fresh connection (with the scripts loaded again): otherwise every client would fail
    /// its first call to each restarted node. Every lock script is safe to repeat: acquire,
    /// extend and repair are idempotent for one holder value, and a repeated release can only
    /// under-report (answer "not held" for an entry it already deleted).
    async fn on_connection<'a, F, Fut>(&'a self, op: F) -> Result<Value, (u64, RedisError)>
    where
        F: Fn(MultiplexedConnection) -> Fut + 'a,
        Fut: std::future::Future<Output = Result<Value, RedisError>> + 'a,
    {
        let (generation, conn) = self.connection().await.map_err(|e| (0, e))?;
        match op(conn).await {
            Err(e) if e.is_io_error() => {
                self.forget(generation);
                tracing::debug!(node = %self.name(), error = %e, "connection dropped; reconnecting once");
                let (generation, conn) = self.connection().await.map_err(|e| (0, e))?;
                op(conn).await.map_err(|e| (generation, e))
            }
            other => other.map_err(|e| (generation, e)),
        }
    }

    /// A dedicated pub/sub connection (release notices), not bounded here.
    pub(crate) async fn pubsub(&self) -> Result<redis::aio::PubSub, NodeFailure> {
        self.addr
            .client
            .get_async_pubsub()
            .await
            .map_err(|e| self.classify(&e))
    }

    /// Runs `fut` within `limit`, classifying failures and dropping a broken connection.
    async fn bounded<F>(&self, limit: Duration, fut: F) -> Result<Value, NodeFailure>
    where
        F: std::future::Future<Output = Result<Value, (u64, RedisError)>>,
    {
        match tokio::time::timeout(limit, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err((generation, e))) => {
                if generation != 0 && e.is_io_error() {
                    self.forget(generation);
                }
                Err(self.classify(&e))
            }
            Err(_) => Err(NodeFailure::new(
                self.name(),
                FailureKind::Timeout,
                format!("no answer within {limit:?}"),
            )),
        }
    }

    fn classify(&self, e: &RedisError) -> NodeFailure {
        let msg = scrub(&e.to_string(), self.addr.secret.as_deref());
        let kind = match e.kind() {
            ErrorKind::AuthenticationFailed => FailureKind::Auth,
            _ if matches!(e.code(), Some("WRONGPASS" | "NOAUTH")) => FailureKind::Auth,
            ErrorKind::Io if msg.contains("lookup address") => FailureKind::UnknownHost,
            ErrorKind::Io => FailureKind::Connection,
            ErrorKind::Server(_) | ErrorKind::Extension => FailureKind::Server,
            ErrorKind::Parse | ErrorKind::UnexpectedReturnType => FailureKind::Protocol,
            _ => FailureKind::Connection,
        };
        NodeFailure::new(self.name(), kind, msg)
    }
}

/// Sends one command of `call`, recording (for tracked calls) when it holds its place in the
/// connection's queue, and refusing to start once the call was stopped (see
/// [`Progress`](crate::scripts::Progress)).
async fn send(
    conn: &mut MultiplexedConnection,
    cmd: &Cmd,
    call: &Call,
    slot: usize,
) -> Result<Value, RedisError> {
    let Some(progress) = &call.progress else {
        return conn.send_packed_command(cmd).await;
    };
    if !progress.may_send(slot) {
        return Err(RedisError::from((
            ErrorKind::Client,
            "call stopped by a later release",
        )));
    }
    let mut request = std::pin::pin!(conn.send_packed_command(cmd));
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(request.as_mut().poll(cx))).await;
    progress.queued(slot);
    match first {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => request.await,
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

/// How a script call is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// EVALSHA, with EVAL fallback on NOSCRIPT.
    Sha,
    /// Plain EVAL (rollback: must not fail late with NOSCRIPT).
    Eval,
}

/// Node connections shared by a client and its guards.
pub(crate) type Nodes = Arc<[Node]>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        let a = NodeAddr::parse("redis://user:s3cr%40t@127.0.0.1:7001/2").unwrap();
        assert_eq!(a.display, "redis://user:***@127.0.0.1:7001/2");
        assert_eq!(a.secret.as_deref(), Some("s3cr@t"));
        assert_eq!(
            scrub("bad s3cr@t here", a.secret.as_deref()),
            "bad *** here"
        );
        let a = NodeAddr::parse("redis://:pw@localhost:6379").unwrap();
        assert!(!a.display.contains("pw"), "{}", a.display);
    }

    #[test]
    fn unparsable_addresses_hide_credentials() {
        assert_eq!(redact_unparsed("redis://u:p@[bad"), "redis://***@[bad");
        assert_eq!(redact_unparsed("u:p@host"), "***@host");
        let err = NodeAddr::parse("redis://u:hunter2@[bad:1").err().unwrap();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn schemes_are_checked() {
        assert!(NodeAddr::parse("http://127.0.0.1:1").is_err());
        assert!(NodeAddr::parse("unix:///tmp/redis.sock").is_ok());
        assert!(NodeAddr::parse("redis://127.0.0.1:1").is_ok());
        assert!(NodeAddr::parse("not a url").is_err());
        assert!(NodeAddr::parse("").is_err());
    }
}
