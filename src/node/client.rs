//! A configured node, for connections of the application's own.

use std::sync::Arc;
use std::time::Duration;

use redis::RedisError;

#[cfg(doc)]
use crate::error::FailureKind;
use crate::error::NodeFailure;
use crate::node::address::NodeAddr;

use super::connection::classify;

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

    /// Another member of the cluster this node is a member of, at `host` and `port` (as a
    /// `MOVED` answer names it), with this node's credentials and TLS settings.
    ///
    /// # Errors
    /// [`Error::InvalidNodeUrl`](crate::Error::InvalidNodeUrl) when `host` is not a host name
    /// or address.
    pub fn at(&self, host: &str, port: u16) -> crate::Result<NodeClient> {
        Ok(NodeClient::new(self.addr.at(host, port)?))
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

    /// The check [`build`](crate::Builder::build) runs on the node, as `quorum-lock check`
    /// reports it: `INFO` and `CONFIG GET appendfsync`; for a cluster, its shape and state
    /// (`CLUSTER SLOTS`, `CLUSTER NODES`, `CLUSTER INFO`), the weakest persistence of its
    /// primaries, and every member that does not answer (named in
    /// [`ClusterInfo::not_answering`](crate::rules::safety::ClusterInfo::not_answering)). Each
    /// server is given `limit`, connecting included. Hand the answers of every node to
    /// [`safety::findings`](crate::rules::safety::findings).
    ///
    /// # Errors
    /// The node (for a cluster, the member given) did not answer within `limit`, or answered
    /// wrongly: classified and redacted as [`failure`](Self::failure).
    ///
    /// # Cancel safety
    /// Cancel safe: the connections it made are dropped with the future.
    pub async fn probe(
        &self,
        limit: Duration,
    ) -> Result<crate::rules::safety::NodeInfo, NodeFailure> {
        super::Node::shared(self.addr.clone(), limit, limit)
            .probe(limit, limit)
            .await
    }

    /// Under `appendfsync everysec`, whether the server answers `WAITAOF` before its fsync
    /// (the probe [`build`](crate::Builder::build) runs for
    /// [`DurableVotes::Local`](crate::DurableVotes::Local), which writes a key of its own for
    /// at most 5 s): `None` where `info` (this node's [`probe`](Self::probe)) shows no such
    /// node (a cluster, AOF off, another fsync policy, a server before 7.2), or the probe
    /// could not tell. Takes up to `limit` and 1.6 s.
    pub async fn waitaof_early(
        &self,
        info: &crate::rules::safety::NodeInfo,
        limit: Duration,
    ) -> Option<bool> {
        if !crate::rules::durable::needs_probe(info) {
            return None;
        }
        super::Node::shared(self.addr.clone(), limit, limit)
            .waitaof_early(limit)
            .await
    }

    /// An error of a connection to this node, as the lock client reads its own: classified
    /// ([`FailureKind::Tls`] for a certificate refused on either side, in plain words,
    /// [`FailureKind::Auth`], [`FailureKind::Connection`], ...), naming the node by its
    /// redacted address, and with every form of its password removed from the message.
    pub fn failure(&self, error: &RedisError) -> NodeFailure {
        classify(&self.addr, error)
    }

    /// What a connect that timed out after `limit` means, where more can be told than "timed
    /// out": a `rediss://` node that answers a plain `PING` is a server without TLS
    /// ([`FailureKind::Config`](crate::FailureKind::Config)). `None`: a plain timeout (a
    /// slow, frozen or unreachable node).
    pub async fn timed_out(&self, limit: Duration) -> Option<NodeFailure> {
        super::connection::tls_to_plain(&self.addr, limit).await
    }
}
