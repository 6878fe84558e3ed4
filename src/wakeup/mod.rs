//! Pub/sub wake-ups for waiters (docs/DESIGN.md, "Waiting"): one subscriber
//! connection per node, shared by all waiters of a client, routed by channel; once a quorum
//! of nodes announced the same release, one waiter of the key (the longest waiting) wakes.
//!
//! Wake-ups are a fast path, never a correctness mechanism: a waiter also wakes after
//! min(PTTL hint, jittered retry delay), so a lost notice, or a node whose pub/sub is down,
//! costs at most that delay.
//!
//! - `channel`: one key's release channel: counting notices per release and node, and who
//!   wakes (the longest waiting, or the fair waiter a grant names).
//! - `subscriber`: one node's pub/sub connection, made and re-made off the callers' path.
//! - `handoff`: the fair lock's waiters within a client, and a release's hand-off to one.
//! - `courtesy`: a client that just released a key others wait for lets them go first.
//! - here: the client's registry of channels, and a waiter's subscription to one.

mod channel;
pub(crate) mod courtesy;
pub(crate) mod handoff;
mod subscriber;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::node::Nodes;

use channel::schedule;
pub(crate) use channel::{Channel, Named, Noticed, NoticedGrant};
use subscriber::worker;

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
    /// The client's connect timeout, for the subscriber connections as for the others.
    connect_timeout: Duration,
    channels: Mutex<Registry>,
    workers: OnceLock<Vec<mpsc::UnboundedSender<Command>>>,
    notices: AtomicU64,
}

impl Wakeups {
    pub(crate) fn new(
        nodes: Nodes,
        quorum: usize,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Wakeups {
        Wakeups {
            nodes,
            quorum,
            timeout,
            connect_timeout,
            channels: Mutex::new(HashMap::new()),
            workers: OnceLock::new(),
            notices: AtomicU64::new(0),
        }
    }

    /// Wake-ups given (each after a quorum of nodes reported the key free).
    pub(crate) fn notices(&self) -> u64 {
        self.notices.load(Ordering::Relaxed)
    }

    /// Whether this client is subscribed to `channel` (has waiters on its key).
    pub(crate) fn listens(&self, channel: &[u8]) -> bool {
        self.channels().contains_key(channel)
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
                        self.connect_timeout,
                        rx,
                    ));
                    tx
                })
                .collect()
        })
    }

    /// Joins the line of this client's waiters on `channel`, if there is one: a newcomer then
    /// waits for its turn (a wake-up, FIFO) instead of racing the waiters already in line,
    /// which would only split the votes of the next hand-off. Not while the channel's first
    /// subscription round is under way: a release then reaches nobody here, so the newcomer
    /// subscribes (waiting for that round) and attempts at once, as the first waiter does.
    fn join_line(self: &Arc<Self>, channel: &[u8]) -> Option<Subscription> {
        let mut channels = self.channels();
        let registration = channels
            .get_mut(channel)
            .filter(|r| r.channel.is_settled())?;
        registration.waiters += 1;
        Some(Subscription {
            wakeups: self.clone(),
            name: channel.to_vec(),
            channel: registration.channel.clone(),
        })
    }

    /// Registers a waiter on `channel`; the first waiter subscribes on every node and waits
    /// (bounded by the node timeout) until a quorum of the subscriptions is confirmed (or
    /// every node answered), so that a release after this returns is seen. A later waiter waits for that round too: until it ends, a
    /// release is announced to nobody here, and the waiter must try again after it rather
    /// than sleep through a notice that never came. Returns the subscription and how many
    /// nodes confirmed.
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
                    let chan = Arc::new(Channel::new(self.quorum, self.timeout));
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
        tracing::trace!(first = !replies.is_empty(), "joining a release channel");
        let confirmed = if replies.is_empty() {
            chan.settled(self.timeout).await
        } else {
            // Until a quorum of nodes confirmed (the wake-up threshold is then the quorum, and
            // a later confirmation changes nothing), or every node answered, or the node
            // timeout: a silent node must not hold every waiter for a node timeout, which let
            // the holder's client take the key again before anyone else could listen.
            let mut replies: futures::stream::FuturesUnordered<_> = replies.into_iter().collect();
            let deadline = tokio::time::sleep(self.timeout);
            tokio::pin!(deadline);
            let mut confirmed = 0;
            while confirmed < self.quorum {
                tokio::select! {
                    reply = futures::StreamExt::next(&mut replies) => match reply {
                        Some(Ok(true)) => confirmed += 1,
                        Some(_) => {}
                        None => break,
                    },
                    () = &mut deadline => break,
                }
            }
            // Each node's subscriber marks the channel confirmed itself (see `worker`), and the
            // threshold follows (`Channel::threshold`).
            chan.settle();
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
            if crate::failpoints::on(crate::failpoints::FailPoint::SubscriptionLeft) {
                return;
            }
            if let Some(workers) = self.workers.get() {
                for w in workers {
                    let _ = w.send(Command::Unsubscribe(name.to_vec()));
                }
            }
        }
    }

    fn on_message(&self, node: usize, channel: &[u8], message: &[u8]) {
        let chan = self.channels().get(channel).map(|r| r.channel.clone());
        tracing::trace!(
            node,
            channel = %String::from_utf8_lossy(channel),
            message = %String::from_utf8_lossy(message),
            waited_on = chan.is_some(),
            "notice"
        );
        if let Some(chan) = chan {
            let heard = chan.report_free(node, message);
            if heard.woke {
                self.notices.fetch_add(1, Ordering::Relaxed);
            }
            for timed in [heard.lapse, heard.partial].into_iter().flatten() {
                schedule(timed);
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
                    // Confirmed after the first waiter's round gave up on a quorum (a slow
                    // node, a loaded machine): a release announced before now may have woken
                    // nobody, so the longest waiter tries again (a hint, as in `missed`).
                    if r.channel.set_confirmed(node, true) {
                        r.channel.notify().notify_one();
                    }
                }
            }
        } else {
            for r in channels.values() {
                r.channel.set_confirmed(node, false);
                r.channel.forget_rewakes(node);
            }
        }
    }

    /// `names` were subscribed again after their subscription on a node was lost: a release
    /// announced meanwhile went unheard there, so each channel's longest waiter is woken to
    /// try now instead of on its timer (a wake-up is a hint: a waiter that finds the key held
    /// waits again).
    fn missed(&self, names: &[Vec<u8>]) {
        let channels = self.channels();
        for name in names {
            if let Some(r) = channels.get(name) {
                r.channel.notify().notify_one();
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
