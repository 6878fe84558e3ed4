//! One server's connection: the live multiplexed connection with its background reconnect.
//! A standalone node is one shard; a cluster node has one per primary it has sent to
//! (`cluster`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::sync::Notify;

use crate::error::{FailureKind, NodeFailure};
use crate::node::address::NodeAddr;

use super::backlog::Backlog;
use super::connection::connect;

/// The connection slot: the live connection with a generation number (so that a failure
/// observed on an old connection does not throw away a newer one), and the state of the
/// background connect.
#[derive(Default)]
pub(super) struct Slot {
    pub(super) generation: u64,
    pub(super) conn: Option<Connected>,
    /// A background connect is under way.
    pub(super) connecting: bool,
    /// Why the latest connect failed, for the callers that waited for it.
    pub(super) failure: Option<NodeFailure>,
}

/// A live connection and the account of its requests not answered yet.
#[derive(Clone)]
pub(super) struct Connected {
    pub(super) conn: MultiplexedConnection,
    pub(super) backlog: Arc<Backlog>,
}

/// What a shard's background connect shares with the shard.
pub(super) struct Link {
    // std Mutex: held only to read or swap the slot, never across an await.
    pub(super) slot: Mutex<Slot>,
    /// Wakes the callers waiting for a connect to end.
    pub(super) connected: Notify,
}

/// One server: its address and its connection. Every request to it goes through the one
/// connection, in the order sent (ordering invariants 1 and 2, see `Node`).
pub(crate) struct Shard {
    pub(super) addr: Arc<NodeAddr>,
    pub(super) link: Arc<Link>,
}

impl Shard {
    pub(super) fn new(addr: Arc<NodeAddr>) -> Shard {
        Shard {
            addr,
            link: Arc::new(Link {
                slot: Mutex::new(Slot::default()),
                connected: Notify::new(),
            }),
        }
    }

    pub(super) fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.link.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn forget(&self, generation: u64) {
        let mut slot = self.slot();
        if slot.generation == generation {
            slot.conn = None;
        }
    }

    /// Whether a connection is open now (nothing is started).
    pub(super) fn is_connected(&self) -> bool {
        self.slot().conn.is_some()
    }

    /// The live connection; without one, waits for the background connect (starting it if
    /// none is under way). The caller bounds the wait; the connect itself is bounded by
    /// `connect_timeout`.
    pub(super) async fn connection(
        &self,
        connect_timeout: Duration,
    ) -> Result<(u64, Connected), NodeFailure> {
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
                    connect_timeout,
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
                &self.addr.display,
                FailureKind::Connection,
                "connection lost while connecting",
            )),
        }
    }

    /// The smoothed round trip in µs of the open connection, if it is answering (see
    /// `Backlog::answering`).
    pub(super) fn answering(&self, timeout: Duration) -> Option<u64> {
        let backlog = self.slot().conn.as_ref()?.backlog.clone();
        backlog.answering(timeout)
    }
}
