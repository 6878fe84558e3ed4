//! One key's release channel: the release notices heard from each node, counted per release
//! (by holder digest) and per node, and the waiters they wake: the client's longest waiting
//! waiter of the key at a quorum of notices, or a fair waiter named by a quorum of grants
//! (or by fewer, after a node timeout).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The waiters of one key's release channel.
pub(crate) struct Channel {
    notify: Arc<Notify>,
    /// The latest releases heard of, each with the nodes that announced it.
    recent: Mutex<Vec<ReleaseNotices>>,
    /// The quorum: how many nodes must announce one holder's release before a waiter is
    /// woken, unless fewer confirmed the subscription (see [`threshold`](Self::threshold)).
    quorum: usize,
    /// How long the rest of a grant's notices may take after the first: the node timeout.
    patience: Duration,
    /// Bit `i`: node `i`'s subscriber has this channel subscribed (set when the node
    /// confirms, cleared when its pub/sub connection drops).
    confirmed: AtomicU64,
    /// Whether the first waiter's subscription round has ended (every node confirmed, or the
    /// node timeout passed): a later waiter on the channel waits for it too, since a release
    /// announced before the nodes had the subscription reached nobody.
    settled: tokio::sync::watch::Sender<bool>,
    /// Fair waiters of this client by waiter id: a grant notice (see
    /// `family/lua/fair_line.lua`) wakes the waiter it names, and nobody else.
    named: Mutex<HashMap<Vec<u8>, NamedWaiter>>,
}

/// What a fair waiter named on a channel is woken by.
#[derive(Clone)]
struct NamedWaiter {
    /// Grants to it: by a quorum of nodes, or by fewer and then a node timeout.
    granted: Arc<Notify>,
    /// Bit `i`: node `i` granted it the key since it was last woken by grants.
    grants: Arc<AtomicU64>,
    /// The wake-up after a node timeout, when fewer than a quorum granted it.
    partial: Timer,
    /// The end of the claim window of a short grant to the waiter before it.
    lapse: Arc<Notify>,
    /// The timer of that wake-up.
    timer: Timer,
}

/// A waiter's timer task, if one runs; aborted when the waiter leaves (nothing of a waiter
/// outlives it).
type Timer = Arc<Mutex<Option<tokio::task::AbortHandle>>>;

/// The prefix of a fair release's notice that it handed the key to a waiter.
const GRANT_PREFIX: &[u8] = b"grant:";

/// The notices heard of one release (one holder value, known by its digest), or of one
/// grant (its waiter and release).
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
/// release whose notices were forgotten before a quorum came would wake nobody. Each entry
/// is a few dozen bytes.
const RECENT_RELEASES: usize = 64;

/// A fair waiter's wake-up after a delay, for the caller to start (see [`schedule`]).
pub(crate) struct Timed {
    notify: Arc<Notify>,
    after: Duration,
    /// Where the timer's handle goes, so that the waiter's leaving aborts it.
    timer: Timer,
    /// A partial wake-up: it clears the waiter's count of grants (its attempt starts a new
    /// one), and leaves a timer already running alone.
    clears: Option<Arc<AtomicU64>>,
}

/// What one notice asks of the caller, besides the wake-ups it gave itself.
#[derive(Default)]
pub(crate) struct Heard {
    /// A waiter was woken (the notices reached the threshold).
    pub(crate) woke: bool,
    /// Wake the fair waiter after the one a short grant names, at the end of the grant's
    /// claim window: it then takes the key over if the grant lapsed.
    pub(crate) lapse: Option<Timed>,
    /// Wake the fair waiter a grant names after a node timeout, unless a quorum of grants
    /// to it comes first.
    pub(crate) partial: Option<Timed>,
}

impl Channel {
    pub(super) fn new(quorum: usize, patience: Duration) -> Channel {
        Channel {
            notify: Arc::default(),
            recent: Mutex::new(Vec::with_capacity(RECENT_RELEASES)),
            quorum,
            patience,
            confirmed: AtomicU64::new(0),
            settled: tokio::sync::watch::Sender::new(false),
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

    /// The first waiter's subscription round has ended.
    pub(super) fn settle(&self) {
        self.settled.send_replace(true);
    }

    /// Whether the first waiter's subscription round has ended.
    pub(super) fn is_settled(&self) -> bool {
        *self.settled.borrow()
    }

    /// Waits (at most `timeout`) until the first waiter's subscription round has ended;
    /// answers how many nodes have the channel subscribed then.
    pub(super) async fn settled(&self, timeout: Duration) -> usize {
        let mut settled = self.settled.subscribe();
        let _ = tokio::time::timeout(timeout, settled.wait_for(|s| *s)).await;
        self.confirmed.load(Ordering::Relaxed).count_ones() as usize
    }

    /// Node `node` has this channel subscribed (`true`) or lost it with its connection.
    pub(super) fn set_confirmed(&self, node: usize, subscribed: bool) {
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
                grants: Arc::default(),
                partial: Timer::default(),
                lapse,
                timer: Timer::default(),
            },
        );
        Named {
            channel: self.clone(),
            waiter: waiter.to_vec(),
        }
    }

    pub(crate) fn notify(&self) -> &Arc<Notify> {
        &self.notify
    }

    /// The record of the release (or grant) `digest`, made if it is new (forgetting the
    /// oldest).
    fn record<'r>(recent: &'r mut Vec<ReleaseNotices>, digest: &[u8]) -> &'r mut ReleaseNotices {
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
        &mut recent[at]
    }

    /// Counts node `node`'s notice `message`: the digest of a holder value it freed the key
    /// from, or a fair grant (`grant:<waiter>:<digest>`, and for a short grant
    /// `:<claim ms>:<next waiter>`, see `family/lua/fair_line.lua`). Once the threshold of
    /// nodes announced one release (an attempt can now succeed), wakes one waiter: the
    /// longest waiting; the release's remaining notices wake nobody. A failed attempt's
    /// rollback frees at most a minority of nodes, so it wakes nobody (no ping-pong of
    /// failing attempts). Grants are counted apart (see `report_grant`).
    pub(super) fn report_free(&self, node: usize, message: &[u8]) -> Heard {
        if let Some(grant) = message.strip_prefix(GRANT_PREFIX) {
            return self.report_grant(node, grant);
        }
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let release = Self::record(&mut recent, message);
        if node < 64 {
            release.nodes |= 1 << node;
        }
        let counted = release.nodes.count_ones() as usize;
        if release.woke || counted < self.threshold() {
            return Heard::default();
        }
        release.woke = true;
        drop(recent);
        // A wake-up that finds no waiter is kept as a permit for the next one.
        self.notify.notify_one();
        Heard {
            woke: true,
            ..Heard::default()
        }
    }

    /// Counts a grant notice (`<waiter>:<digest>`, and for a short grant
    /// `:<claim ms>:<next waiter>`).
    ///
    /// Grants are counted by the waiter they name, whatever freed the key on each node (a
    /// release, a rollback, a withdrawal, or an attempt that found the key free): each node
    /// grants its own first waiter when the key comes free there, and the nodes' reasons need
    /// not agree. A quorum of nodes granting the waiter wakes it (and starts a new count).
    ///
    /// Fewer than a quorum wake it after a node timeout (by then the rest of one release's
    /// grants would have come): the nodes granted different waiters, because a release came
    /// while a join had not landed on every node and their lines differed. None of those
    /// waiters has a quorum, so none would be woken, and the grants are short but as long as
    /// a claim window, which outlasts the waiters' own timers. Woken, each tries: it fails,
    /// and its rollback hands its nodes to the first waiter of lines that agree by then, which
    /// is then granted by a quorum.
    fn report_grant(&self, node: usize, grant: &[u8]) -> Heard {
        let mut heard = Heard::default();
        let mut parts = grant.splitn(4, |&b| b == b':');
        let (waiter, by) = (parts.next().unwrap_or_default(), parts.next());
        // The next waiter's take-over of a short grant, once per grant (its waiter and
        // release), whatever claim window each node cut it to.
        if let (Some(ms), Some(next)) = (parts.next(), parts.next()) {
            let claim = std::str::from_utf8(ms)
                .ok()
                .and_then(|ms| ms.parse::<u64>().ok());
            let named = self.named().get(next).cloned();
            if let (Some(claim), Some(named)) = (claim, named) {
                let once = waiter.len() + by.map_or(0, |b| 1 + b.len());
                let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
                let mut key = GRANT_PREFIX.to_vec();
                key.extend_from_slice(&grant[..once]);
                let record = Self::record(&mut recent, &key);
                if !record.lapse_scheduled {
                    record.lapse_scheduled = true;
                    // The node set the grant to expire `claim` after it ran, which was
                    // before this notice was read here; the allowance covers clocks that run
                    // at slightly different rates.
                    let claim = Duration::from_millis(claim);
                    heard.lapse = Some(Timed {
                        notify: named.lapse,
                        after: claim + crate::quorum::drift(claim, LAPSE_DRIFT_FACTOR),
                        timer: named.timer,
                        clears: None,
                    });
                }
            }
        }
        let Some(named) = self.named().get(waiter).cloned() else {
            // A waiter of another client: nothing to wake here.
            tracing::trace!(
                waiter = %String::from_utf8_lossy(waiter),
                named = ?self
                    .named()
                    .keys()
                    .map(|w| String::from_utf8_lossy(w).into_owned())
                    .collect::<Vec<_>>(),
                "grant to a waiter not named here"
            );
            return heard;
        };
        let bit = if node < 64 { 1 << node } else { 0 };
        let nodes = named.grants.fetch_or(bit, Ordering::Relaxed) | bit;
        tracing::trace!(
            waiter = %String::from_utf8_lossy(waiter),
            node,
            granted_by = nodes.count_ones(),
            threshold = self.threshold(),
            "grant heard"
        );
        if nodes.count_ones() as usize >= self.threshold() {
            named.grants.store(0, Ordering::Relaxed);
            if let Some(partial) = lock(&named.partial).take() {
                partial.abort();
            }
            named.granted.notify_one();
            heard.woke = true;
        } else {
            heard.partial = Some(Timed {
                notify: named.granted,
                after: self.patience,
                timer: named.partial,
                clears: Some(named.grants),
            });
        }
        heard
    }
}

fn lock(timer: &Timer) -> std::sync::MutexGuard<'_, Option<tokio::task::AbortHandle>> {
    timer.lock().unwrap_or_else(|p| p.into_inner())
}

/// The rate difference allowed between a node's clock and this client's when waiting out a
/// short grant's claim window (as the default drift factor).
const LAPSE_DRIFT_FACTOR: f64 = 0.01;

/// Starts a fair waiter's timed wake-up, in a timer task whose handle the waiter's name
/// keeps (dropping the name aborts it). A lapse replaces the waiter's running one; a partial
/// wake-up leaves a running one alone (a stream of grants does not put it off).
pub(super) fn schedule(timed: Timed) {
    let Timed {
        notify,
        after,
        timer,
        clears,
    } = timed;
    let mut slot = lock(&timer);
    if clears.is_some() && slot.as_ref().is_some_and(|t| !t.is_finished()) {
        return;
    }
    let task = tokio::spawn(async move {
        tokio::time::sleep(after).await;
        if let Some(grants) = clears {
            grants.store(0, Ordering::Relaxed);
        }
        notify.notify_one();
    });
    if let Some(previous) = slot.replace(task.abort_handle()) {
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
        if let Some(named) = self.channel.named().remove(&self.waiter) {
            for timer in [&named.timer, &named.partial] {
                if let Some(task) = lock(timer).take() {
                    task.abort();
                }
            }
        }
    }
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
    const PATIENCE: Duration = Duration::from_millis(250);

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
        let chan = Channel::new(QUORUM, PATIENCE);
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
        let chan = Channel::new(QUORUM, PATIENCE);
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
        let chan = Channel::new(QUORUM, PATIENCE);
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
        let chan = Channel::new(QUORUM, PATIENCE);
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
        let chan = Arc::new(Channel::new(QUORUM, PATIENCE));
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
    fn grants_are_counted_by_waiter_whatever_freed_the_key_on_each_node() {
        let chan = Arc::new(Channel::new(QUORUM, PATIENCE));
        let (b, _, _b) = named(&chan, b"b");
        // Each node granted b when the key came free there: one by a release, one by a
        // rollback, one by an attempt that found the key free; each cut the grant to what
        // was left of b's place there, and named the next waiter it has.
        assert!(!hear(&chan, 0, b"grant:b:d1:200:c"));
        assert!(!hear(&chan, 1, b"grant:b:d2:180:c"));
        assert!(hear(&chan, 2, b"grant:b:d3:200:"));
        assert!(b.notified().now_or_never().is_some(), "b was not woken");
        // A new count starts: the next grants wake b again only at a quorum.
        assert!(!hear(&chan, 3, b"grant:b:d4"));
        assert!(!hear(&chan, 4, b"grant:b:d4"));
        assert!(b.notified().now_or_never().is_none(), "woken by two grants");
        assert!(hear(&chan, 0, b"grant:b:d4"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_granted_by_fewer_than_a_quorum_is_woken_after_a_node_timeout() {
        let chan = Arc::new(Channel::new(QUORUM, PATIENCE));
        let (b, _, named_b) = named(&chan, b"b");
        let (c, _, _c) = named(&chan, b"c");
        // The nodes' lines differed when the key came free: two nodes granted b, two c.
        for (node, grant) in [
            (0, &b"grant:b:d1"[..]),
            (1, b"grant:b:d1"),
            (2, b"grant:c:d1"),
        ] {
            let heard = chan.report_free(node, grant);
            assert!(!heard.woke);
            schedule(heard.partial.expect("a partial wake-up"));
        }
        schedule(chan.report_free(3, b"grant:c:d1").partial.unwrap());
        tokio::time::sleep(PATIENCE / 2).await;
        assert!(b.notified().now_or_never().is_none(), "b woken early");
        // Another grant from a node already counted does not put the wake-up off.
        schedule(chan.report_free(1, b"grant:b:d2").partial.unwrap());
        tokio::time::sleep(PATIENCE / 2 + Duration::from_millis(1)).await;
        assert!(b.notified().now_or_never().is_some(), "b was not woken");
        assert!(c.notified().now_or_never().is_some(), "c was not woken");
        // The count starts again: one grant is one node.
        schedule(chan.report_free(0, b"grant:b:d3").partial.unwrap());
        assert!(!hear(&chan, 1, b"grant:b:d3"));
        // A quorum wakes b at once, and its partial wake-up is called off.
        assert!(hear(&chan, 2, b"grant:b:d3"));
        assert!(b.notified().now_or_never().is_some());
        tokio::time::sleep(PATIENCE * 2).await;
        assert!(b.notified().now_or_never().is_none(), "woken twice");
        // A waiter that leaves takes its timer with it.
        let alive = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = alive();
        schedule(chan.report_free(0, b"grant:b:d4").partial.unwrap());
        assert_eq!(alive(), before + 1, "the timer runs");
        drop(named_b);
        tokio::task::yield_now().await;
        assert_eq!(alive(), before, "the timer outlived its waiter");
    }

    #[test]
    fn the_next_waiter_is_woken_once_when_a_short_grant_to_the_one_before_it_lapses() {
        let chan = Arc::new(Channel::new(QUORUM, PATIENCE));
        let (_, c_lapse, _c) = named(&chan, b"c");
        let heard = chan.report_free(0, b"grant:b:d1:200:c");
        let Timed { notify, after, .. } = heard.lapse.expect("c's take-over is scheduled");
        assert!(Arc::ptr_eq(&notify, &c_lapse));
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
        let chan = Arc::new(Channel::new(QUORUM, PATIENCE));
        let (_, c_lapse, c) = named(&chan, b"c");
        let alive = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = alive();
        schedule(chan.report_free(0, b"grant:b:d1:200:c").lapse.unwrap());
        assert_eq!(alive(), before + 1, "the timer runs");
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(
            c_lapse.notified().now_or_never().is_some(),
            "c was not woken"
        );
        // A waiter that leaves before its lapse takes its timer with it.
        schedule(chan.report_free(0, b"grant:b:d2:200:c").lapse.unwrap());
        drop(c);
        tokio::task::yield_now().await;
        assert_eq!(alive(), before, "the timer outlived its waiter");
    }

    #[test]
    fn interleaved_releases_are_counted_apart() {
        let chan = Channel::new(QUORUM, PATIENCE);
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
        let chan = Arc::new(Channel::new(QUORUM, PATIENCE));
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
        let chan = Channel::new(QUORUM, PATIENCE);
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
