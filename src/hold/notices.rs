//! Notices to holders (docs/DESIGN.md, "Breaking a lock, and asking a holder to release"):
//! a break (`lua/break.lua`) and a request to release (`lua/ask.lua`) publish, for each
//! holder they concern, `break <digest> <key>` or `ask <digest> <key>` (the digest the SHA1 of
//! the holder value) on one channel, [`names::holder_notices`](crate::names::holder_notices).
//! A client that holds locks listens on every node (one pub/sub connection each, made at its
//! first hold, kept while the client lives; a client that never holds opens none): a break marks the lease lost at once (its loss
//! signal fires within a round trip of the break), a request to release fires the guard's
//! "asked to release" signal. A notice from one node is enough: losing a lock early is always
//! safe. Notices are a fast path: a broken holder whose notices were all missed learns at its
//! next renewal, which every node refuses; so does one broken in the moment after its
//! client's first hold, before the subscriptions are made.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;

use crate::hold::lease::Lease;
use crate::rules::key::HOLDER_NOTICES;
use crate::state::ClientState;
use crate::telemetry::LossReason;

/// Pause before a listener connects again after its connection failed or dropped.
const RECONNECT: Duration = Duration::from_secs(1);

/// Pause before a listener asks again after its subscription was refused (an ACL rule
/// without the channel): it is not going to change soon.
const REFUSED: Duration = Duration::from_secs(60);

/// How often a listener looks whether its client is gone.
const ALIVE: Duration = Duration::from_secs(1);

/// Starts the client's listeners, once (and not with pub/sub turned off).
pub(crate) fn listen(client: &Arc<ClientState>) {
    if !client.config.pubsub || client.notices_started.swap(true, Ordering::SeqCst) {
        return;
    }
    for i in 0..client.nodes.len() {
        tokio::spawn(listener(Arc::downgrade(client), i));
    }
}

/// Node `i`'s listener, until its client is gone.
async fn listener(client: Weak<ClientState>, i: usize) {
    let mut refused = false;
    loop {
        let mut pause = RECONNECT;
        let Some(state) = client.upgrade() else {
            return;
        };
        let (nodes, limit) = (state.nodes.clone(), state.config.connect_timeout);
        drop(state);
        let node = &nodes[i];
        let connected = tokio::time::timeout(limit, node.pubsub(&[])).await;
        if let Ok((_, Ok(mut pubsub))) = connected {
            match pubsub.subscribe(HOLDER_NOTICES).await {
                Ok(()) => {
                    let mut messages = pubsub.on_message();
                    loop {
                        tokio::select! {
                            message = messages.next() => match message {
                                Some(m) => match client.upgrade() {
                                    Some(state) => on_notice(&state, m.get_payload_bytes()),
                                    None => return,
                                },
                                None => break,
                            },
                            () = tokio::time::sleep(ALIVE) => if client.strong_count() == 0 {
                                return;
                            },
                        }
                    }
                }
                // An ACL rule without the channel: said once; holders then learn of a break
                // at their next renewal.
                Err(e) => {
                    if !refused {
                        tracing::warn!(node = %node.name(), error = %e, "holder notices not subscribed");
                    }
                    refused = true;
                    pause = REFUSED;
                }
            }
        }
        // Waits in steps, so that a dropped client ends its listener within one.
        let until = tokio::time::Instant::now() + pause;
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(ALIVE.min(until - tokio::time::Instant::now())).await;
            if client.strong_count() == 0 {
                return;
            }
        }
    }
}

/// One notice: `break <digest> <key>` or `ask <digest> <key>`.
fn on_notice(client: &ClientState, payload: &[u8]) {
    let mut parts = payload.splitn(3, |&b| b == b' ');
    let (Some(kind), Some(digest), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    for lease in client
        .held
        .of(key)
        .into_iter()
        .filter_map(|l| l.downcast::<Lease>().ok())
        .filter(|l| !l.is_ended() && holder_digest(l).as_bytes() == digest)
    {
        match kind {
            b"break" => {
                tracing::warn!(key = %lease.shape, "lock broken (a break's notice)");
                lease.mark_lost(LossReason::Broken);
            }
            b"ask" if lease.asked.ask() => {
                tracing::info!(key = %lease.shape, "asked to release");
            }
            _ => {}
        }
    }
}

/// The SHA1 hex of a lease's holder value, as the scripts name a holder.
fn holder_digest(lease: &Lease) -> String {
    sha1_smol::Sha1::from(lease.holder.as_str())
        .digest()
        .to_string()
}
