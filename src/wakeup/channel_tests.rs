//! Unit tests of `channel.rs`. The wake-up rules, with a deterministic schedule: waiters
//! register exactly as the waiting loop does (a `Notified` enabled before the attempt), and
//! notices arrive at chosen points, from chosen nodes.

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
fn a_refusal_by_a_node_the_release_had_not_reached_wakes_a_waiter_at_its_notice() {
    let chan = Channel::new(QUORUM, PATIENCE);
    // No release woke anybody yet: nothing to wait for.
    assert!(!chan.refused_by(4));
    let mut first = pin!(chan.notify().notified());
    first.as_mut().enable();
    hear_from(&chan, QUORUM, b"h1");
    assert!(first.as_mut().now_or_never().is_some());
    // The woken waiter's attempt was refused by node 1, which had announced the release:
    // another waiter's vote, a lost race.
    assert!(!chan.refused_by(1));
    // Refused by node 4, which had not: its notice, when it comes, wakes a waiter again,
    // once (a node that repeats it wakes nobody).
    assert!(chan.refused_by(4));
    let mut again = pin!(chan.notify().notified());
    again.as_mut().enable();
    assert!(!hear(&chan, 3, b"h1"), "another node's late notice");
    assert!(again.as_mut().now_or_never().is_none());
    assert!(hear(&chan, 4, b"h1"));
    assert!(
        again.as_mut().now_or_never().is_some(),
        "woken by node 4's notice"
    );
    let mut third = pin!(chan.notify().notified());
    third.as_mut().enable();
    assert!(!hear(&chan, 4, b"h1"));
    assert!(third.as_mut().now_or_never().is_none());
    // A later release is the one asked about: node 4 announced h1, not h2.
    hear_from(&chan, QUORUM, b"h2");
    assert!(third.as_mut().now_or_never().is_some());
    assert!(chan.refused_by(4));
    assert!(!chan.refused_by(0));
}

#[test]
fn a_node_that_owes_a_notice_and_loses_its_connection_wakes_a_waiter() {
    let chan = Channel::new(QUORUM, PATIENCE);
    hear_from(&chan, QUORUM, b"h1");
    // The wake-up above is kept as a permit; take it.
    let mut first = pin!(chan.notify().notified());
    assert!(first.as_mut().now_or_never().is_some());
    assert!(chan.refused_by(4));
    let mut waiter = pin!(chan.notify().notified());
    waiter.as_mut().enable();
    // Another node's connection drops: nothing owed there.
    chan.forget_rewakes(3);
    assert!(waiter.as_mut().now_or_never().is_none());
    chan.forget_rewakes(4);
    assert!(waiter.as_mut().now_or_never().is_some());
    // Once: its notice, should it come after all, wakes nobody more.
    let mut next = pin!(chan.notify().notified());
    next.as_mut().enable();
    assert!(!hear(&chan, 4, b"h1"));
    assert!(next.as_mut().now_or_never().is_none());
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
    let (granted, lapse, _, name) = named_noticed(chan, waiter);
    (granted, lapse, name)
}

fn named_noticed(
    chan: &Arc<Channel>,
    waiter: &[u8],
) -> (Arc<Notify>, Arc<Notify>, Arc<Noticed>, Named) {
    let (granted, lapse) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let noticed = Arc::new(Noticed::default());
    let name = chan.name(waiter, granted.clone(), lapse.clone(), noticed.clone());
    (granted, lapse, noticed, name)
}

#[tokio::test(start_paused = true)]
async fn a_short_grants_notice_records_its_round_and_gap_per_node_and_still_names_the_next() {
    let chan = Arc::new(Channel::new(QUORUM, PATIENCE));
    let (b, _, noticed, _b) = named_noticed(&chan, b"b");
    let (_, c_lapse, _, _c) = named_noticed(&chan, b"c.1");
    let grant = |ms: u64, since_ms: u64| NoticedGrant {
        round: 3,
        since_ms,
        ms,
    };
    // With the round and the gap (the next waiter named or not); an older form records none.
    let heard = chan.report_free(0, b"grant:b:d1:200:c.1:3:12");
    assert!(heard.lapse.is_some(), "the next waiter's take-over is lost");
    assert!(!hear(&chan, 1, b"grant:b:d1:180::3:7"));
    assert!(hear(&chan, 2, b"grant:b:d1:200:c.1"));
    assert!(b.notified().now_or_never().is_some());
    assert_eq!(noticed.of_round(3), vec![grant(200, 12), grant(180, 7)]);
    // A later grant by a node replaces its earlier one; other rounds are kept apart.
    assert!(!hear(&chan, 0, b"grant:b:d2:150:c.1:4:1"));
    assert_eq!(noticed.of_round(3), vec![grant(180, 7)]);
    assert_eq!(noticed.of_round(4).len(), 1);
    // Garbage in the tail records nothing.
    assert!(!hear(&chan, 3, b"grant:b:d3:200:c.1:x:12"));
    assert!(!hear(&chan, 3, b"grant:b:d3:nope:c.1:3:12"));
    assert_eq!(noticed.of_round(3), vec![grant(180, 7)]);
    drop(c_lapse);
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

#[test]
fn a_confirmation_after_a_round_that_ended_short_of_a_quorum_is_late() {
    let chan = Channel::new(QUORUM, PATIENCE);
    assert!(
        !chan.set_confirmed(0, true),
        "within the first waiter's round"
    );
    chan.settle();
    // The round ended with one node confirmed: each confirmation up to the quorum is late.
    let late: Vec<bool> = (1..5).map(|node| chan.set_confirmed(node, true)).collect();
    assert_eq!(
        late,
        [true, true, false, false],
        "late until a quorum confirmed"
    );
    assert!(
        !chan.set_confirmed(1, true),
        "a node confirmed again is not late"
    );
}
