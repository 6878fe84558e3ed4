//! Pub/sub wake-ups for waiters (docs/DESIGN.md, "Waiting"): one subscriber
//! connection per node, shared by all waiters of a client, routed by channel; once a quorum
//! of nodes announced the same release, one waiter of the key (the longest waiting) wakes.
//!
//! Wake-ups are a fast path, never a correctness mechanism: a waiter also wakes after
//! min(PTTL hint, jittered retry delay), so a lost notice, or a node whose pub/sub is down,
//! costs at most that delay.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;

use crate::node::Nodes;

/// The waiters of one key's release channel.
pub(crate) struct Channel {
    notify: Notify,
    /// The latest releases heard of, each with the nodes that announced it.
    recent: Mutex<Vec<ReleaseNotices>>,
    /// The quorum: how many nodes must announce one holder's release before a waiter is
    /// woken, unless fewer confirmed the subscription (see [`threshold`](Self::threshold)).
    quorum: usize,
    /// Bit `i`: node `i`'s subscriber has this channel subscribed (set when the node
    /// confirms, cleared when its pub/sub connection drops).
    confirmed: AtomicU64,
    /// Fair waiters of this client by waiter id: a grant notice (see
    /// `scripts::FAIR_RELEASE`) wakes the waiter it names, and nobody else.
    named: Mutex<HashMap<Vec<u8>, NamedWaiter>>,
}

/// What a fair waiter named on a channel is woken by.
#[derive(Clone)]
struct NamedWaiter {
    /// A quorum of grants to it.
    granted: Arc<Notify>,
    /// The end of the claim window of a short grant to the waiter before it.
    lapse: Arc<Notify>,
    /// The timer of that wake-up, aborted when the waiter leaves (nothing of a waiter
    /// outlives it).
    timer: LapseTimer,
}

/// A waiter's lapse timer task, if one runs.
type LapseTimer = Arc<Mutex<Option<tokio::task::AbortHandle>>>;

/// The prefix of a fair release's notice that it handed the key to a waiter.
const GRANT_PREFIX: &[u8] = b"grant:";

/// The notices heard of one release (one holder value, known by its digest).
struct ReleaseNotices {
    digest: Vec<u8>,
    /// Bit `i`: node `i` announced it freed the key from this holder (counted once per node,
    /// so that a node that announces the same digest again adds nothing).
    nodes: u64,
    /// Whether this release already woke a waiter.
    woke: bool,
    /// Whether the next waiter's take-over of a short grant was already scheduled.
    lapse_scheduled: bool,
}

/// Releases tracked per channel. The notices of different releases interleave, and one
/// node's subscriber may lag behind the others by many releases on a loaded machine: a
/// release whose notices were forgotten before a quorum came would wake nobody (and a grant
/// nobody claimed would hold the line for its claim window). Each entry is a few dozen bytes.
const RECENT_RELEASES: usize = 64;

/// What one notice asks of the caller, besides the wake-ups it gave itself.
#[derive(Default)]
pub(crate) struct Heard {
    /// A waiter was woken (the notices reached the threshold).
    pub(crate) woke: bool,
    /// Wake this fair waiter after this long: the end of the claim window of a short grant to
    /// the waiter before it, which it then takes over if the grant lapsed. The timer's handle
    /// goes in the slot, so that the waiter's leaving aborts it.
    pub(crate) lapse: Option<(Arc<Notify>, Duration, LapseTimer)>,
}

impl Channel {
    fn new(quorum: usize) -> Channel {
        Channel {
            notify: Notify::new(),
            recent: Mutex::new(Vec::with_capacity(RECENT_RELEASES)),
            quorum,
            confirmed: AtomicU64::new(0),
            named: Mutex::new(HashMap::new()),
        }
    }

    fn named(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, NamedWaiter>> {
        self.named.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many nodes must announce one release before a waiter is woken: the quorum, or
    /// fewer while fewer nodes have the subscription confirmed (a wake-up is a hint that an
    /// attempt may now succeed, not a proof). Rises again as nodes confirm it.
    fn threshold(&self) -> usize {
        match self.confirmed.load(Ordering::Relaxed).count_ones() as usize {
            0 => self.quorum,
            n => self.quorum.min(n),
        }
    }

    /// Node `node` has this channel subscribed (`true`) or lost it with its connection.
    fn set_confirmed(&self, node: usize, subscribed: bool) {
        let bit = 1u64 << node;
        if subscribed {
            self.confirmed.fetch_or(bit, Ordering::Relaxed);
        } else {
            self.confirmed.fetch_and(!bit, Ordering::Relaxed);
        }
    }

    /// Names a fair waiter on this channel: grant notices naming `waiter` wake `granted`,
    /// and the end of a short grant to the waiter before it wakes `lapse` (a wake-up that
    /// finds nobody waiting is kept for the next wait). Unnamed on drop.
    pub(crate) fn name(
        self: &Arc<Self>,
        waiter: &[u8],
        granted: Arc<Notify>,
        lapse: Arc<Notify>,
    ) -> Named {
        self.named().insert(
            waiter.to_vec(),
            NamedWaiter {
                granted,
                lapse,
                timer: LapseTimer::default(),
            },
        );
        Named {
            channel: self.clone(),
            waiter: waiter.to_vec(),
        }
    }

    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }

    /// Counts node `node`'s notice `message`: the digest of a holder value it freed the key
    /// from, or a fair grant (`grant:<waiter>:<digest>`, and for a short grant
    /// `:<claim ms>:<next waiter>`, see `scripts::FAIR_RELEASE`). Once the threshold of nodes
    /// announced one release (an attempt can now succeed), wakes one waiter: the longest
    /// waiting, or the waiter a grant names; the release's remaining notices wake nobody. A
    /// failed attempt's rollback frees at most a minority of nodes, so it wakes nobody (no
    /// ping-pong of failing attempts).
    fn report_free(&self, node: usize, message: &[u8]) -> Heard {
        let mut heard = Heard::default();
        // A grant is counted by its waiter and release; its claim window and next waiter,
        // which may differ from node to node, are not part of what is counted.
        let (digest, short) = match message.strip_prefix(GRANT_PREFIX) {
            Some(grant) => {
                let mut parts = grant.splitn(4, |&b| b == b':');
                let (waiter, by) = (parts.next().unwrap_or_default(), parts.next());
                let counted = GRANT_PREFIX.len() + waiter.len() + by.map_or(0, |b| 1 + b.len());
                let short = match (parts.next(), parts.next()) {
                    (Some(ms), Some(next)) => std::str::from_utf8(ms)
                        .ok()
                        .and_then(|ms| ms.parse::<u64>().ok())
                        .map(|ms| (Duration::from_millis(ms), next)),
                    _ => None,
                };
                (&message[..counted], short)
            }
            None => (message, None),
        };
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let at = match recent.iter().position(|r| r.digest == digest) {
            Some(at) => at,
            None => {
                if recent.len() == RECENT_RELEASES {
                    recent.remove(0);
                }
                recent.push(ReleaseNotices {
                    digest: digest.to_vec(),
                    nodes: 0,
                    woke: false,
                    lapse_scheduled: false,
                });
                recent.len() - 1
            }
        };
        let release = &mut recent[at];
        if let Some((claim, next)) = short.filter(|_| !release.lapse_scheduled) {
            if let Some(named) = self.named().get(next) {
                release.lapse_scheduled = true;
                // The node set the grant to expire `claim` after it ran, which was before
                // this notice was read here; the allowance covers clocks that run at
                // slightly different rates.
                let after = claim + crate::quorum::drift(claim, LAPSE_DRIFT_FACTOR);
                heard.lapse = Some((named.lapse.clone(), after, named.timer.clone()));
            }
        }
        if node < 64 {
            release.nodes |= 1 << node;
        }
        let counted = release.nodes.count_ones() as usize;
        if release.woke || counted < self.threshold() {
            return heard;
        }
        release.woke = true;
        drop(recent);
        if let Some(grant) = digest.strip_prefix(GRANT_PREFIX) {
            // The key went to the waiter named: only it can take it now.
            let waiter = grant.split(|&b| b == b':').next().unwrap_or_default();
            if let Some(named) = self.named().get(waiter).cloned() {
                named.granted.notify_one();
                heard.woke = true;
            }
            return heard;
        }
        // A wake-up that finds no waiter is kept as a permit for the next one.
        self.notify.notify_one();
        heard.woke = true;
        heard
    }
}

/// The rate difference allowed between a node's clock and this client's when waiting out a
/// short grant's claim window (as the default drift factor).
const LAPSE_DRIFT_FACTOR: f64 = 0.01;

/// Wakes a fair waiter after the claim window of a short grant to the waiter before it, in
/// a timer task whose handle the waiter's name keeps (dropping the name aborts it).
fn schedule_lapse((lapse, after, timer): (Arc<Notify>, Duration, LapseTimer)) {
    let task = tokio::spawn(async move {
        tokio::time::sleep(after).await;
        lapse.notify_one();
    });
    let previous = timer
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .replace(task.abort_handle());
    if let Some(previous) = previous {
        previous.abort();
    }
}

/// A fair waiter's name on a channel (see [`Channel::name`]).
pub(crate) struct Named {
    channel: Arc<Channel>,
    waiter: Vec<u8>,
}

impl Drop for Named {
    fn drop(&mut self) {
        let named = self.channel.named().remove(&self.waiter);
        if let Some(timer) = named.and_then(|n| n.timer.lock().ok()?.take()) {
            timer.abort();
        }
    }
}

/// A waited-on channel: how many of the client's tasks wait on it.
struct Registration {
    waiters: usize,
    channel: Arc<Channel>,
}

/// Channel name -> its registration.
type Registry = HashMap<Vec<u8>, Registration>;

enum Command {
    Subscribe(Vec<u8>, oneshot::Sender<bool>),
    Unsubscribe(Vec<u8>),
}

/// The registry of waited-on channels and the per-node subscriber tasks.
pub(crate) struct Wakeups {
    nodes: Nodes,
    quorum: usize,
    timeout: Duration,
    channels: Mutex<Registry>,
    workers: OnceLock<Vec<mpsc::UnboundedSender<Command>>>,
    notices: AtomicU64,
}

impl Wakeups {
    pub(crate) fn new(nodes: Nodes, quorum: usize, timeout: Duration) -> Wakeups {
        Wakeups {
            nodes,
            quorum,
            timeout,
            channels: Mutex::new(HashMap::new()),
            workers: OnceLock::new(),
            notices: AtomicU64::new(0),
        }
    }

    /// Wake-ups given (each after a quorum of nodes reported the key free).
    pub(crate) fn notices(&self) -> u64 {
        self.notices.load(Ordering::Relaxed)
    }

    /// Tasks of this client currently waiting for a release notice.
    pub(crate) fn waiting(&self) -> u64 {
        self.channels().values().map(|r| r.waiters as u64).sum()
    }

    fn channels(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn workers(self: &Arc<Self>) -> &[mpsc::UnboundedSender<Command>] {
        self.workers.get_or_init(|| {
            (0..self.nodes.len())
                .map(|i| {
                    let (tx, rx) = mpsc::unbounded_channel();
                    tokio::spawn(worker(
                        i,
                        self.nodes.clone(),
                        Arc::downgrade(self),
                        self.timeout,
                        rx,
                    ));
                    tx
                })
                .collect()
        })
    }

    /// Joins the line of this client's waiters on `channel`, if there is one: a newcomer then
    /// waits for its turn (a wake-up, FIFO) instead of racing the waiters already in line,
    /// which would only split the votes of the next hand-off.
    fn join_line(self: &Arc<Self>, channel: &[u8]) -> Option<Subscription> {
        let mut channels = self.channels();
        let registration = channels.get_mut(channel)?;
        registration.waiters += 1;
        Some(Subscription {
            wakeups: self.clone(),
            name: channel.to_vec(),
            channel: registration.channel.clone(),
        })
    }

    /// Registers a waiter on `channel`; the first waiter subscribes on every node and waits
    /// (bounded by the node timeout) until the subscriptions are confirmed, so that a release
    /// after this returns is seen. Returns the subscription and how many nodes confirmed (N
    /// when the channel was already subscribed).
    async fn join(self: &Arc<Self>, channel: Vec<u8>) -> (Subscription, usize) {
        let (sub, replies) = {
            // The map lock orders SUBSCRIBE and UNSUBSCRIBE commands per channel: a leave and a
            // join racing each other reach every node's worker in the order they happened.
            let mut channels = self.channels();
            let (chan, replies) = match channels.get_mut(&channel) {
                Some(registration) => {
                    registration.waiters += 1;
                    (registration.channel.clone(), Vec::new())
                }
                None => {
                    let chan = Arc::new(Channel::new(self.quorum));
                    let registration = Registration {
                        waiters: 1,
                        channel: chan.clone(),
                    };
                    channels.insert(channel.clone(), registration);
                    let replies = self
                        .workers()
                        .iter()
                        .filter_map(|w| {
                            let (tx, rx) = oneshot::channel();
                            w.send(Command::Subscribe(channel.clone(), tx))
                                .ok()
                                .map(|()| rx)
                        })
                        .collect::<Vec<_>>();
                    (chan, replies)
                }
            };
            // The registration is owned by its drop guard before the first await: a caller
            // that drops this future while the nodes confirm leaves (and unsubscribes) at once.
            let sub = Subscription {
                wakeups: self.clone(),
                name: channel,
                channel: chan,
            };
            (sub, replies)
        };
        let chan = &sub.channel;
        let confirmed = if replies.is_empty() {
            self.nodes.len()
        } else {
            let all = futures::future::join_all(replies);
            let confirmed = match tokio::time::timeout(self.timeout, all).await {
                Ok(answers) => answers
                    .into_iter()
                    .filter(|a| matches!(a, Ok(true)))
                    .count(),
                Err(_) => 0,
            };
            // Each node's subscriber marks the channel confirmed itself (see `worker`), and the
            // threshold follows (`Channel::threshold`).
            let _ = chan;
            confirmed
        };
        (sub, confirmed)
    }

    fn leave(&self, name: &[u8]) {
        let mut channels = self.channels();
        let Some(registration) = channels.get_mut(name) else {
            return;
        };
        registration.waiters -= 1;
        if registration.waiters == 0 {
            channels.remove(name);
            if let Some(workers) = self.workers.get() {
                for w in workers {
                    let _ = w.send(Command::Unsubscribe(name.to_vec()));
                }
            }
        }
    }

    fn on_message(&self, node: usize, channel: &[u8], message: &[u8]) {
        let chan = self.channels().get(channel).map(|r| r.channel.clone());
        if let Some(chan) = chan {
            let heard = chan.report_free(node, message);
            if heard.woke {
                self.notices.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(lapse) = heard.lapse {
                schedule_lapse(lapse);
            }
        }
    }

    /// Node `node`'s subscriber has `names` subscribed (`true`), or lost every subscription
    /// with its connection (`names` empty, `false`).
    fn confirm(&self, node: usize, names: &[Vec<u8>], subscribed: bool) {
        let channels = self.channels();
        if subscribed {
            for name in names {
                if let Some(r) = channels.get(name) {
                    r.channel.set_confirmed(node, true);
                }
            }
        } else {
            for r in channels.values() {
                r.channel.set_confirmed(node, false);
            }
        }
    }

    fn channel_names(&self) -> Vec<Vec<u8>> {
        self.channels().keys().cloned().collect()
    }
}

/// One waiting acquire's place among its client's waiters of a key: its subscription to the
/// key's release channel, made when first needed and left when the waiter is dropped (also
/// when its acquire is cancelled).
pub(crate) struct Waiter {
    wakeups: Option<Arc<Wakeups>>,
    channel: Vec<u8>,
    subscription: Option<Subscription>,
    /// The client already had waiters on the key: wait for a turn before the first attempt.
    turn_first: bool,
}

impl Waiter {
    /// A waiter on `channel`; with `wakeups` (pub/sub on) it joins the line of the client's
    /// waiters already there (local FIFO): racing them would only split the next hand-off's
    /// votes.
    pub(crate) fn new(wakeups: Option<&Arc<Wakeups>>, channel: &[u8]) -> Waiter {
        let subscription = wakeups.and_then(|w| w.join_line(channel));
        Waiter {
            wakeups: wakeups.cloned(),
            channel: channel.to_vec(),
            turn_first: subscription.is_some(),
            subscription,
        }
    }

    /// True once, when the waiter is to wait for its turn before its first attempt.
    pub(crate) fn take_turn_first(&mut self) -> bool {
        std::mem::take(&mut self.turn_first)
    }

    /// The channel to listen on, once subscribed.
    pub(crate) fn channel(&self) -> Option<Arc<Channel>> {
        self.subscription.as_ref().map(|s| s.channel.clone())
    }

    /// Subscribes, unless already subscribed or pub/sub is off. True when it just did: a
    /// release before the subscription was active sent a notice nobody heard, so the caller
    /// tries again at once.
    ///
    /// Cancel safe: a subscription interrupted while the nodes confirm it is left at once.
    pub(crate) async fn subscribe(&mut self) -> bool {
        let Some(wakeups) = self
            .wakeups
            .as_ref()
            .filter(|_| self.subscription.is_none())
        else {
            return false;
        };
        let (subscription, confirmed) = wakeups.join(self.channel.clone()).await;
        tracing::debug!(confirmed, "subscribed to release notices");
        self.subscription = Some(subscription);
        true
    }
}

/// A waiter's registration on a release channel; leaving (drop) unsubscribes with the last
/// waiter.
struct Subscription {
    wakeups: Arc<Wakeups>,
    name: Vec<u8>,
    channel: Arc<Channel>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.wakeups.leave(&self.name);
    }
}

type Connection = (PubSubSink, PubSubStream);

/// Pause between attempts to (re)connect a subscriber while channels are waited on.
const RECONNECT_DELAY: Duration = Duration::from_millis(250);

/// One node's subscriber: a pub/sub connection made on demand, re-made (and every waited-on
/// channel re-subscribed) after it drops. Ends when the client is dropped.
async fn worker(
    index: usize,
    nodes: Nodes,
    wakeups: Weak<Wakeups>,
    timeout: Duration,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let node = &nodes[index];
    // Connecting happens here, off every caller's path (callers wait at most the node timeout
    // for a confirmation), so it may take longer than one lock call.
    let connect_timeout = timeout.max(Duration::from_secs(2));
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

#[cfg(test)]
mod tests {
    //! The wake-up rules, with a deterministic schedule: waiters register exactly as the
    //! waiting loop does (a `Notified` enabled before the attempt), and notices arrive at
    //! chosen points, from chosen nodes.
    use super::*;
    use futures::FutureExt;
    use std::pin::pin;

    const QUORUM: usize = 3;

    /// Node `node`'s notice `message`: whether it woke a waiter.
    fn hear(chan: &Channel, node: usize, message: &[u8]) -> bool {
        chan.report_free(node, message).woke
    }

    /// The same notice from nodes `0..n`.
    fn hear_from(chan: &Channel, n: usize, message: &[u8]) {
        for node in 0..n {
            hear(chan, node, message);
        }
    }

    #[test]
    fn one_waiter_wakes_per_release_and_only_at_a_quorum_of_notices() {
        let chan = Channel::new(QUORUM);
        let mut a = pin!(chan.notify().notified());
        let mut b = pin!(chan.notify().notified());
        let mut c = pin!(chan.notify().notified());
        for n in [a.as_mut(), b.as_mut(), c.as_mut()] {
            n.enable();
        }
        // Two nodes announce a release: fewer than a quorum (a rollback looks like this).
        assert!(!hear(&chan, 0, b"h1"));
        assert!(!hear(&chan, 1, b"h1"));
        assert!(a.as_mut().now_or_never().is_none(), "woken below a quorum");
        // The third notice makes the quorum: exactly one waiter wakes, the first in line.
        assert!(hear(&chan, 2, b"h1"));
        assert!(a.as_mut().now_or_never().is_some(), "the first waiter");
        assert!(b.as_mut().now_or_never().is_none());
        // The release's remaining notices wake nobody more.
        assert!(!hear(&chan, 3, b"h1"));
        assert!(!hear(&chan, 4, b"h1"));
        assert!(b.as_mut().now_or_never().is_none());
        // The next release wakes the next waiter.
        hear_from(&chan, QUORUM, b"h2");
        assert!(b.as_mut().now_or_never().is_some(), "the second waiter");
        assert!(c.as_mut().now_or_never().is_none());
    }

    #[test]
    fn a_node_that_repeats_a_notice_counts_once() {
        let chan = Channel::new(QUORUM);
        let mut waiter = pin!(chan.notify().notified());
        waiter.as_mut().enable();
        for _ in 0..QUORUM {
            assert!(!hear(&chan, 0, b"h1"));
        }
        assert!(!hear(&chan, 1, b"h1"));
        assert!(
            waiter.as_mut().now_or_never().is_none(),
            "woken by one node"
        );
        assert!(hear(&chan, 2, b"h1"));
        assert!(waiter.now_or_never().is_some());
    }

    #[test]
    fn a_release_during_the_attempt_is_not_lost() {
        let chan = Channel::new(QUORUM);
        // The waiting loop listens before its attempt...
        let mut waiter = pin!(chan.notify().notified());
        waiter.as_mut().enable();
        // ...the attempt fails, and the holder releases before the waiter starts to wait...
        hear_from(&chan, QUORUM, b"h1");
        // ...and the wait completes at once.
        assert!(waiter.now_or_never().is_some(), "the wake-up was lost");
    }

    #[test]
    fn a_release_with_no_waiter_is_kept_for_the_next_one() {
        let chan = Channel::new(QUORUM);
        hear_from(&chan, QUORUM, b"h1");
        let waiter = chan.notify().notified();
        assert!(waiter.now_or_never().is_some(), "the permit was lost");
    }

    fn named(chan: &Arc<Channel>, waiter: &[u8]) -> (Arc<Notify>, Arc<Notify>, Named) {
        let (granted, lapse) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let name = chan.name(waiter, granted.clone(), lapse.clone());
        (granted, lapse, name)
    }

    #[test]
    fn a_grant_wakes_only_the_waiter_it_names_at_a_quorum() {
        let chan = Arc::new(Channel::new(QUORUM));
        let mut anyone = pin!(chan.notify().notified());
        anyone.as_mut().enable();
        let (a, _, _a) = named(&chan, b"a");
        let (b, _, named_b) = named(&chan, b"b");
        for node in 0..QUORUM - 1 {
            assert!(!hear(&chan, node, b"grant:b:d1"));
        }
        assert!(hear(&chan, QUORUM - 1, b"grant:b:d1"));
        assert!(b.notified().now_or_never().is_some(), "b was not woken");
        assert!(a.notified().now_or_never().is_none(), "a was woken");
        assert!(
            anyone.as_mut().now_or_never().is_none(),
            "an unnamed waiter was woken"
        );
        // A second grant to b (after an earlier one lapsed) is another release: it wakes again.
        hear_from(&chan, QUORUM, b"grant:b:d2");
        assert!(
            b.notified().now_or_never().is_some(),
            "the second grant was lost"
        );
        // A grant to a waiter of another client wakes nobody here.
        drop(named_b);
        for node in 0..QUORUM {
            assert!(!hear(&chan, node, b"grant:b:d3"));
        }
        assert!(anyone.now_or_never().is_none());
    }

    #[test]
    fn short_grants_are_counted_by_waiter_and_release_whatever_each_node_cut_them_to() {
        let chan = Arc::new(Channel::new(QUORUM));
        let (b, _, _b) = named(&chan, b"b");
        // Each node cut the grant to what was left of b's place there, and named the next
        // waiter it has.
        assert!(!hear(&chan, 0, b"grant:b:d1:200:c"));
        assert!(!hear(&chan, 1, b"grant:b:d1:180:c"));
        assert!(hear(&chan, 2, b"grant:b:d1:200:"));
        assert!(b.notified().now_or_never().is_some(), "b was not woken");
    }

    #[test]
    fn the_next_waiter_is_woken_once_when_a_short_grant_to_the_one_before_it_lapses() {
        let chan = Arc::new(Channel::new(QUORUM));
        let (_, c_lapse, _c) = named(&chan, b"c");
        let heard = chan.report_free(0, b"grant:b:d1:200:c");
        let (lapse, after, _) = heard.lapse.expect("c's take-over is scheduled");
        assert!(Arc::ptr_eq(&lapse, &c_lapse));
        assert!(
            after > Duration::from_millis(200),
            "not before the lapse: {after:?}"
        );
        assert!(after < Duration::from_millis(210), "{after:?}");
        // Once per grant, whichever nodes announce it.
        assert!(chan.report_free(1, b"grant:b:d1:190:c").lapse.is_none());
        // Nothing for a waiter of another client, nor for a whole-TTL grant.
        assert!(chan.report_free(0, b"grant:b:d2:200:x").lapse.is_none());
        assert!(chan.report_free(0, b"grant:b:d3").lapse.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lapse_timer_wakes_its_waiter_and_ends_with_it() {
        let chan = Arc::new(Channel::new(QUORUM));
        let (_, c_lapse, c) = named(&chan, b"c");
        let alive = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = alive();
        schedule_lapse(chan.report_free(0, b"grant:b:d1:200:c").lapse.unwrap());
        assert_eq!(alive(), before + 1, "the timer runs");
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(
            c_lapse.notified().now_or_never().is_some(),
            "c was not woken"
        );
        // A waiter that leaves before its lapse takes its timer with it.
        schedule_lapse(chan.report_free(0, b"grant:b:d2:200:c").lapse.unwrap());
        drop(c);
        tokio::task::yield_now().await;
        assert_eq!(alive(), before, "the timer outlived its waiter");
    }

    #[test]
    fn interleaved_releases_are_counted_apart() {
        let chan = Channel::new(QUORUM);
        let mut waiter = pin!(chan.notify().notified());
        waiter.as_mut().enable();
        // Two releases' notices interleave; neither has a quorum yet.
        for (node, h) in [(0, b"h1"), (0, b"h2"), (1, b"h1"), (1, b"h2")] {
            assert!(!hear(&chan, node, h));
        }
        assert!(waiter.as_mut().now_or_never().is_none());
        assert!(hear(&chan, 2, b"h2"));
        assert!(waiter.now_or_never().is_some());
    }

    #[test]
    fn a_release_is_counted_while_a_lagging_node_reports_many_older_ones() {
        let chan = Arc::new(Channel::new(QUORUM));
        let (w, _, _w) = named(&chan, b"w");
        // Two nodes announce a grant to w...
        hear(&chan, 0, b"grant:w:latest");
        hear(&chan, 1, b"grant:w:latest");
        // ...while a lagging node's subscriber delivers the notices of dozens of earlier
        // releases...
        for n in 0..40 {
            hear(&chan, 4, format!("older-{n}").as_bytes());
        }
        // ...and the third notice still makes the quorum.
        assert!(hear(&chan, 2, b"grant:w:latest"));
        assert!(
            w.notified().now_or_never().is_some(),
            "the grant was forgotten"
        );
    }

    #[test]
    fn the_threshold_follows_the_nodes_that_have_the_subscription() {
        let chan = Channel::new(QUORUM);
        assert_eq!(chan.threshold(), QUORUM, "nothing confirmed yet");
        chan.set_confirmed(0, true);
        chan.set_confirmed(1, true);
        assert_eq!(chan.threshold(), 2, "two nodes can announce a release");
        // The other nodes come back (their subscribers re-subscribe): it rises again.
        for node in 2..5 {
            chan.set_confirmed(node, true);
        }
        assert_eq!(chan.threshold(), QUORUM);
        chan.set_confirmed(1, false);
        chan.set_confirmed(2, false);
        chan.set_confirmed(3, false);
        assert_eq!(chan.threshold(), 2);
    }
}
