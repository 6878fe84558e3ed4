//! One node's subscriber: the pub/sub connection a client's waiters share on that node.

use std::sync::Weak;
use std::time::Duration;

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Command, Wakeups};
use crate::node::Nodes;

type Connection = (PubSubSink, PubSubStream);

/// Pause between attempts to (re)connect a subscriber while channels are waited on.
const RECONNECT_DELAY: Duration = Duration::from_millis(250);

/// One node's subscriber: a pub/sub connection made on demand, re-made (and every waited-on
/// channel re-subscribed) after it drops. Ends when the client is dropped.
pub(super) async fn worker(
    index: usize,
    nodes: Nodes,
    wakeups: Weak<Wakeups>,
    timeout: Duration,
    connect_timeout: Duration,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let node = &nodes[index];
    // Connecting happens here, off every caller's path (callers wait at most the node timeout
    // for a confirmation), bounded by the client's connect timeout, as the lock connections
    // are.
    let mut conn: Option<Connection> = None;
    let mut retry_at: Option<Instant> = None;
    loop {
        let reconnect = async {
            match retry_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let message = async {
            match conn.as_mut() {
                Some((_, stream)) => stream.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else { return };
                match command {
                    Command::Subscribe(name, reply) => {
                        if conn.is_none() {
                            conn = connect(index, node, &wakeups, connect_timeout).await;
                            if conn.is_none() {
                                // Keep trying while the channel is waited on: its waiters are
                                // on their timers meanwhile.
                                retry_at = Some(Instant::now() + RECONNECT_DELAY);
                            }
                        }
                        let ok = match conn.as_mut() {
                            Some((sink, _)) => matches!(tokio::time::timeout(timeout, sink.subscribe(&name)).await, Ok(Ok(()))),
                            None => false,
                        };
                        if ok {
                            if let Some(w) = wakeups.upgrade() {
                                w.confirm(index, std::slice::from_ref(&name), true);
                            }
                        }
                        let _ = reply.send(ok);
                    }
                    Command::Unsubscribe(name) => {
                        if let Some((sink, _)) = conn.as_mut() {
                            let _ = tokio::time::timeout(timeout, sink.unsubscribe(&name)).await;
                        }
                    }
                }
            }
            msg = message => match msg {
                Some(msg) => {
                    let Some(w) = wakeups.upgrade() else { return };
                    if let Ok(channel) = msg.get_channel::<Vec<u8>>() {
                        w.on_message(index, &channel, msg.get_payload_bytes());
                    }
                }
                None => {
                    tracing::debug!(node = node.name(), "pub/sub connection dropped");
                    if let Some(w) = wakeups.upgrade() {
                        w.confirm(index, &[], false);
                    }
                    conn = None;
                    retry_at = Some(Instant::now());
                }
            },
            () = reconnect => {
                retry_at = None;
                let wanted = wakeups.upgrade().is_some_and(|w| !w.channel_names().is_empty());
                if wanted && conn.is_none() {
                    conn = connect(index, node, &wakeups, connect_timeout).await;
                    if conn.is_none() {
                        retry_at = Some(Instant::now() + RECONNECT_DELAY);
                    }
                }
            }
        }
    }
}

/// Connects and subscribes every channel currently waited on (and marks them confirmed by
/// node `index`).
async fn connect(
    index: usize,
    node: &crate::node::Node,
    wakeups: &Weak<Wakeups>,
    timeout: Duration,
) -> Option<Connection> {
    let connected = tokio::time::timeout(timeout, node.pubsub()).await;
    let (mut sink, stream) = match connected {
        Ok(Ok(pubsub)) => pubsub.split(),
        Ok(Err(e)) => {
            tracing::debug!(node = node.name(), error = %e, "pub/sub connect failed");
            return None;
        }
        Err(_) => return None,
    };
    let names = wakeups.upgrade()?.channel_names();
    if !names.is_empty() {
        let resubscribed = tokio::time::timeout(timeout, sink.subscribe(&names)).await;
        if !matches!(resubscribed, Ok(Ok(()))) {
            return None;
        }
        wakeups.upgrade()?.confirm(index, &names, true);
    }
    Some((sink, stream))
}
