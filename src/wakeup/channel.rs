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
    /// Releases that woke a waiter so far (orders them, see `ReleaseNotices::woke_order`).
    wakes: AtomicU64,
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
    /// The short grants to it that the notices told of, for a hold without a claim.
    noticed: Arc<Noticed>,
}

/// The short grants to one fair waiter that their notices told of, the latest per node (see
/// "Grants held from their notices" in `family/lua/fair_line.lua`): what lets the waiter hold
/// one round trip after the release, without an attempt to claim them (see `take::fair`).
#[derive(Default)]
pub(crate) struct Noticed(Mutex<Vec<(usize, NoticedGrant)>>);

/// One node's short grant to a fair waiter, as its notice tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NoticedGrant {
    /// The round of the waiter's attempt whose entry the grant answers: the key holds the
    /// waiter's hand-off value of that round.
    pub(crate) round: u64,
    /// The node's ms between that attempt's run and the grant.
    pub(crate) since_ms: u64,
    /// The grant's TTL on the node, in ms.
    pub(crate) ms: u64,
}

impl Noticed {
    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<(usize, NoticedGrant)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Node `node`'s latest grant: a later one replaces it.
    fn record(&self, node: usize, grant: NoticedGrant) {
        let mut slots = self.slots();
        match slots.iter_mut().find(|(n, _)| *n == node) {
            Some(slot) => slot.1 = grant,
            None => slots.push((node, grant)),
        }
    }

    /// The nodes' latest grants that answer the waiter's attempt of `round`.
    pub(crate) fn of_round(&self, round: u64) -> Vec<NoticedGrant> {
        self.slots()
            .iter()
            .map(|(_, g)| *g)
            .filter(|g| g.round == round)
            .collect()
    }
}

/// Reads a short grant's notice's tail after its `ms`, `<next waiter>[:<round>:<ms since>]`:
/// the next waiter, and the grant a hold from notices counts when the tail has its round (the
/// last two parts are absent from a grant to an entry without its round).
fn noticed_tail<'a>(ms: &[u8], rest: &'a [u8]) -> (&'a [u8], Option<NoticedGrant>) {
    let number = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u64>().ok();
    let mut parts = rest.rsplitn(3, |&b| b == b':');
    if let (Some(since), Some(round), Some(next)) = (parts.next(), parts.next(), parts.next()) {
        if let (Some(since_ms), Some(round), Some(ms)) = (number(since), number(round), number(ms))
        {
            let grant = NoticedGrant {
                round,
                since_ms,
                ms,
            };
            return (next, Some(grant));
        }
    }
    (rest, None)
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
    /// When it woke one: the channel's wake-up count then (the latest release to wake a
    /// waiter has the highest).
    woke_order: u64,
    /// Bit `i`: node `i`'s notice of this release, when it comes, wakes a waiter again (see
    /// [`Channel::refused_by`]).
    rewake: u64,
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
            wakes: AtomicU64::new(0),
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
    /// Answers whether this was a late confirmation: one that came after the first waiter's
    /// round ended with fewer than a quorum confirmed. Until then a release could be
    /// announced to too few subscribed nodes to wake anyone, so the caller wakes a waiter to
    /// try again (see `Wakeups::confirm`).
    pub(super) fn set_confirmed(&self, node: usize, subscribed: bool) -> bool {
        let Some(bit) = node_bit(node) else {
            return false;
        };
        if subscribed {
            let before = self.confirmed.fetch_or(bit, Ordering::Relaxed);
            before & bit == 0 && (before.count_ones() as usize) < self.quorum && self.is_settled()
        } else {
            self.confirmed.fetch_and(!bit, Ordering::Relaxed);
            false
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
        noticed: Arc<Noticed>,
    ) -> Named {
        self.named().insert(
            waiter.to_vec(),
            NamedWaiter {
                granted,
                grants: Arc::default(),
                partial: Timer::default(),
                lapse,
                timer: Timer::default(),
                noticed,
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
                    woke_order: 0,
                    rewake: 0,
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
        let bit = node_bit(node).unwrap_or(0);
        release.nodes |= bit;
        let counted = release.nodes.count_ones() as usize;
        if release.woke && release.rewake & bit != 0 {
            // The node a woken waiter's attempt was refused by, before this release reached
            // it: it is free there now.
            release.rewake &= !bit;
            tracing::trace!(node, "a release's late notice wakes a waiter again");
        } else if release.woke || counted < self.threshold() {
            return Heard::default();
        } else {
            release.woke = true;
            release.woke_order = self.wakes.fetch_add(1, Ordering::Relaxed) + 1;
        }
        drop(recent);
        // A wake-up that finds no waiter is kept as a permit for the next one.
        self.notify.notify_one();
        Heard {
            woke: true,
            ..Heard::default()
        }
    }

    /// A waiter woken by a release was refused by node `node` (the key's arbiter, which it
    /// asks first). A release returns at a quorum, so the one that woke the waiter (the latest
    /// to wake one here) may not have reached `node` yet: its entry there is then the
    /// released holder's, not another waiter's vote, and the waiter would sleep its whole
    /// retry delay (the release's notices already woke somebody). Answers true when `node`
    /// has not announced that release: its notice, when it comes, then wakes the longest
    /// waiter again (once). False when `node` announced it already (another waiter has its
    /// vote: a lost race, or the release reached `node` while the attempt ran, which is not
    /// told apart: see docs/DESIGN.md, "Ordered approach"), or no release woke a waiter.
    pub(crate) fn refused_by(&self, node: usize) -> bool {
        let Some(bit) = node_bit(node) else {
            return false;
        };
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let Some(latest) = recent
            .iter_mut()
            .filter(|r| r.woke)
            .max_by_key(|r| r.woke_order)
        else {
            return false;
        };
        if latest.nodes & bit != 0 {
            return false;
        }
        latest.rewake |= bit;
        true
    }

    /// Node `node`'s pub/sub connection was lost: a release notice it owed (see
    /// [`refused_by`](Self::refused_by)) may never come (a node killed after it refused), so
    /// the longest waiter tries now instead of on its timer.
    pub(super) fn forget_rewakes(&self, node: usize) {
        let Some(bit) = node_bit(node) else { return };
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let mut owed = false;
        for release in recent.iter_mut() {
            owed |= release.rewake & bit != 0;
            release.rewake &= !bit;
        }
        drop(recent);
        if owed {
            self.notify.notify_one();
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
        let (ms, rest) = (parts.next(), parts.next());
        let (next, noticed) = match (ms, rest) {
            (Some(ms), Some(rest)) => {
                let (next, noticed) = noticed_tail(ms, rest);
                (Some(next), noticed)
            }
            (_, rest) => (rest, None),
        };
        // The next waiter's take-over of a short grant, once per grant (its waiter and
        // release), whatever claim window each node cut it to.
        if let (Some(ms), Some(next)) = (ms, next) {
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
                        after: claim + crate::rules::quorum::drift(claim, LAPSE_DRIFT_FACTOR),
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
        // Recorded before the waiter is woken: its next try may hold from them.
        if let Some(grant) = noticed {
            named.noticed.record(node, grant);
        }
        let bit = node_bit(node).unwrap_or(0);
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

/// Node `node`'s bit in a set of nodes (`u64`): `None` past the 64 a set holds (the client
/// takes no more nodes than that, `scripts::MAX_NODES`).
fn node_bit(node: usize) -> Option<u64> {
    u32::try_from(node).ok().and_then(|n| 1u64.checked_shl(n))
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
#[path = "channel_tests.rs"]
mod tests;
