//! One node's subscriber: the pub/sub connection a client's waiters share on that node.

use std::sync::Weak;
use std::time::Duration;

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Command, Wakeups};
use crate::node::Nodes;

/// Pause between attempts to (re)connect a subscriber while channels are waited on.
const RECONNECT_DELAY: Duration = Duration::from_millis(250);

/// How often a subscriber asks its member whether it still answers (`PING`) while channels
/// are waited on, and how long (at least) it waits for the answer: a frozen member keeps the
/// connection open and delivers nothing, which no other sign shows.
const KEEPALIVE: Duration = Duration::from_secs(1);

/// How many members a cluster node's subscriber remembers having failed it.
const AVOIDED: usize = 8;

/// A live subscription: the connection and the member it was made to.
struct Live {
    sink: PubSubSink,
    stream: PubSubStream,
    member: String,
    /// When to ask the member next whether it still answers.
    ping_at: Instant,
}

/// The members that failed a subscriber (dropped its connection, stayed silent, refused to
/// connect), the latest last: a cluster node's next subscription goes to another primary
/// (a standalone node has no other).
#[derive(Default)]
struct Avoided(Vec<String>);

impl Avoided {
    fn failed(&mut self, member: String) {
        self.0.retain(|m| *m != member);
        self.0.push(member);
        if self.0.len() > AVOIDED {
            self.0.remove(0);
        }
    }

    fn answered(&mut self, member: &str) {
        self.0.retain(|m| m != member);
    }
}

/// One node's subscriber: a pub/sub connection made on demand, re-made (and every waited-on
/// channel re-subscribed) after it drops or its member stops answering, on a cluster node at
/// another primary. Ends when the client is dropped.
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
    let mut conn: Option<Live> = None;
    let mut avoided = Avoided::default();
    let mut retry_at: Option<Instant> = None;
    let wanted = |wakeups: &Weak<Wakeups>| {
        wakeups
            .upgrade()
            .is_some_and(|w| !w.channel_names().is_empty())
    };
    loop {
        let reconnect = async {
            match retry_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let ping_at = conn.as_ref().map(|c| c.ping_at);
        let keepalive = async {
            match ping_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let message = async {
            match conn.as_mut() {
                Some(live) => live.stream.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else { return };
                match command {
                    Command::Subscribe(name, reply) => {
                        if conn.is_none() {
                            conn = connect(index, node, &wakeups, connect_timeout, &mut avoided, false).await;
                            if conn.is_none() {
                                // Keep trying while the channel is waited on: its waiters are
                                // on their timers meanwhile.
                                retry_at = Some(Instant::now() + RECONNECT_DELAY);
                            }
                        }
                        let ok = match conn.as_mut() {
                            Some(live) => matches!(tokio::time::timeout(timeout, live.sink.subscribe(&name)).await, Ok(Ok(()))),
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
                        if let Some(live) = conn.as_mut() {
                            let _ = tokio::time::timeout(timeout, live.sink.unsubscribe(&name)).await;
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
                    lost(index, &wakeups, &mut conn, &mut avoided);
                    retry_at = Some(Instant::now());
                }
            },
            () = keepalive => {
                let Some(live) = conn.as_mut() else { continue };
                if !wanted(&wakeups) {
                    live.ping_at = Instant::now() + KEEPALIVE;
                    continue;
                }
                let answered = tokio::time::timeout(timeout.max(KEEPALIVE), live.sink.ping::<redis::Value>()).await;
                if matches!(answered, Ok(Ok(_))) {
                    live.ping_at = Instant::now() + KEEPALIVE;
                } else {
                    tracing::debug!(node = node.name(), "pub/sub member stopped answering");
                    lost(index, &wakeups, &mut conn, &mut avoided);
                    retry_at = Some(Instant::now());
                }
            }
            () = reconnect => {
                retry_at = None;
                if wanted(&wakeups) && conn.is_none() {
                    conn = connect(index, node, &wakeups, connect_timeout, &mut avoided, true).await;
                    if conn.is_none() {
                        retry_at = Some(Instant::now() + RECONNECT_DELAY);
                    }
                }
            }
        }
    }
}

/// The subscription is gone (dropped, or its member silent): its channels count as not
/// confirmed by this node until it is made again, elsewhere where the node can.
fn lost(index: usize, wakeups: &Weak<Wakeups>, conn: &mut Option<Live>, avoided: &mut Avoided) {
    if let Some(w) = wakeups.upgrade() {
        w.confirm(index, &[], false);
    }
    if let Some(live) = conn.take() {
        avoided.failed(live.member);
    }
}

/// Connects and subscribes every channel currently waited on (and marks them confirmed by
/// node `index`), within `timeout`. A member that fails or does not answer in time is avoided
/// next time; one that answered is not any more. `again`: the channels had a subscription
/// that was lost; a release may have been announced meanwhile, unheard, so each channel's
/// longest waiter is woken to try (a hint, as every wake-up).
async fn connect(
    index: usize,
    node: &crate::node::Node,
    wakeups: &Weak<Wakeups>,
    timeout: Duration,
    avoided: &mut Avoided,
    again: bool,
) -> Option<Live> {
    let mut tried: Option<String> = None;
    let made = tokio::time::timeout(timeout, async {
        let (member, connected) = node.pubsub(&avoided.0).await;
        tried = Some(member.clone());
        let (mut sink, stream) = match connected {
            Ok(pubsub) => pubsub.split(),
            Err(e) => {
                tracing::debug!(node = node.name(), error = %e, "pub/sub connect failed");
                return None;
            }
        };
        let names = wakeups.upgrade()?.channel_names();
        if !names.is_empty() {
            sink.subscribe(&names).await.ok()?;
            let w = wakeups.upgrade()?;
            w.confirm(index, &names, true);
            if again {
                w.missed(&names);
            }
        }
        Some(Live {
            sink,
            stream,
            member,
            ping_at: Instant::now() + KEEPALIVE,
        })
    })
    .await
    .ok()
    .flatten();
    match (&made, tried) {
        (Some(live), _) => avoided.answered(&live.member),
        (None, Some(member)) => avoided.failed(member),
        (None, None) => {}
    }
    made
}
