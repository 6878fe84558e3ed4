//! Pub/sub hand-off: waiters take the lock about one round trip after its release, one waiter
//! per release, and still get it (on their timer) where pub/sub is unavailable.

mod common;

use std::time::Duration;

use common::*;
use quorum_lock::testkit::Fleet;
use quorum_lock::{Quorum, QuorumLock};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);

/// A waiter's client: `retry_delay` without jitter, waits of up to 60 s.
fn waiter_builder(fleet: &Fleet, retry_delay: Duration) -> quorum_lock::Builder {
    builder(fleet, Quorum::Majority)
        .retry_delay(retry_delay)
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(60))
}

async fn waiter_client(fleet: &Fleet, retry_delay: Duration) -> QuorumLock {
    waiter_builder(fleet, retry_delay).build().await.unwrap()
}

/// Waits until the client has made `n` contended attempts (its waiters are then listening).
async fn until_contended(fleet: &Fleet, locks: &QuorumLock, n: u64) {
    eventually(
        fleet,
        Duration::from_secs(10),
        "waiters are waiting",
        || async { locks.stats().contended >= n },
    )
    .await;
}

/// Some attempt of `waiter` since its stats counted `ordered` asked the key's arbiter first.
fn asked_the_arbiter(waiter: &QuorumLock, ordered: u64) {
    assert!(
        waiter.stats().ordered > ordered,
        "no attempt asked the arbiter: {:?}",
        waiter.stats()
    );
}

/// A holder on one client, a waiter (3 s retry delay) on another: once the waiter waits, the
/// holder releases, and the waiter must hold the lock well before its retry delay.
async fn assert_prompt_handoff(fleet: &Fleet, name: &str) {
    let holder = client(fleet, Quorum::Majority).await;
    let waiter = waiter_client(fleet, Duration::from_secs(3)).await;
    let key = unique_key(name);
    let held = holder.try_acquire(&key, TTL).await.unwrap().unwrap();
    let task = {
        let (waiter, key) = (waiter.clone(), key.clone());
        tokio::spawn(async move {
            let guard = waiter.acquire(&key, TTL).await.unwrap();
            (Instant::now(), guard)
        })
    };
    until_contended(fleet, &waiter, 2).await;
    let released_at = Instant::now();
    held.release().await.unwrap();
    let (acquired_at, guard) = task.await.unwrap();
    let handoff = acquired_at - released_at;
    let stats = waiter.stats();
    assert!(
        handoff < Duration::from_secs(1),
        "hand-off took {handoff:?} (retry delay 3 s): {stats:?}"
    );
    assert!(stats.woken >= 1 && stats.notices >= 1, "{stats:?}");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_takes_the_lock_soon_after_release_not_after_its_retry_delay() {
    init_tracing();
    assert_prompt_handoff(&own_fleet(5), "handoff").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_waiters_one_attempt_per_release_and_no_lost_wakeups() {
    init_tracing();
    const WAITERS: u64 = 32;
    let fleet = own_fleet(5);
    let holder = client(&fleet, Quorum::Majority).await;
    // With a 60 s retry delay, any waiter not woken by a notice would stall the chain.
    let waiter = waiter_client(&fleet, Duration::from_secs(60)).await;
    let key = unique_key("herd");
    let held = holder.try_acquire(&key, TTL).await.unwrap().unwrap();
    let spawn = || {
        let (waiter, key) = (waiter.clone(), key.clone());
        tokio::spawn(async move {
            let guard = waiter.acquire(&key, TTL).await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
            guard.release().await.unwrap();
        })
    };
    // The first waiter attempts, subscribes the key's channel and attempts again (a release
    // before the subscription was active would have gone unheard), then sleeps; the others
    // then queue behind it without attempting (a client's newcomers wait for a turn).
    let mut tasks = vec![spawn()];
    let in_line = |waiting: u64| {
        let waiter = waiter.clone();
        move || {
            let s = waiter.stats();
            let settled = s.attempts == s.acquired + s.contended + s.failed;
            async move { s.waiting == waiting && s.attempts >= 2 && settled }
        }
    };
    eventually(
        &fleet,
        Duration::from_secs(10),
        "the first waiter in line",
        in_line(1),
    )
    .await;
    tasks.extend((1..WAITERS).map(|_| spawn()));
    eventually(
        &fleet,
        Duration::from_secs(10),
        "all waiters in line",
        in_line(WAITERS),
    )
    .await;
    let before = waiter.stats();
    let started = Instant::now();
    held.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("a wake-up was lost: the chain stalled")
            .unwrap();
    }
    let after = waiter.stats();
    let attempts = after.attempts - before.attempts;
    println!(
        "{WAITERS} hand-offs in {:?}: {attempts} attempts, {} woken, {} notices",
        started.elapsed(),
        after.woken - before.woken,
        after.notices - before.notices
    );
    assert_eq!(after.acquired - before.acquired, WAITERS);
    // One woken waiter per release, plus its quick retries while a release is still reaching
    // the other nodes (measured: 32 to 39 on a loaded 2-core machine). Waking every waiter
    // would cost about WAITERS attempts per release.
    assert!(
        attempts <= 2 * WAITERS,
        "{attempts} attempts for {WAITERS} releases: a herd"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_fall_back_to_their_timer_without_pubsub() {
    // SUBSCRIBE is disabled on every node; PUBLISH (in the release script) still works.
    let fleet = Fleet::builder()
        .nodes(5)
        .server_args(["--rename-command", "SUBSCRIBE", ""])
        .start()
        .unwrap();
    let holder = client(&fleet, Quorum::Majority).await;
    let waiter = waiter_client(&fleet, Duration::from_millis(200)).await;
    let key = unique_key("no-pubsub");
    let held = holder.try_acquire(&key, TTL).await.unwrap().unwrap();
    let task = {
        let (waiter, key) = (waiter.clone(), key.clone());
        tokio::spawn(async move { waiter.acquire(&key, TTL).await })
    };
    until_contended(&fleet, &waiter, 2).await;
    held.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the timer fallback did not fire")
        .unwrap()
        .unwrap();
    let stats = waiter.stats();
    assert_eq!(
        (stats.woken, stats.notices),
        (0, 0),
        "no notices without pub/sub: {stats:?}"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notices_from_the_nodes_that_have_pubsub_suffice() {
    // SUBSCRIBE is disabled on nodes 0-2: notices come from nodes 3 and 4 only.
    let fleet = Fleet::builder()
        .nodes(5)
        .node_server_args(0, ["--rename-command", "SUBSCRIBE", ""])
        .node_server_args(1, ["--rename-command", "SUBSCRIBE", ""])
        .node_server_args(2, ["--rename-command", "SUBSCRIBE", ""])
        .start()
        .unwrap();
    assert_prompt_handoff(&fleet, "some-pubsub").await;
}

/// The pub/sub connections honour the client's connect timeout, as its lock connections do
/// (they used a fixed 2 s). On a slow link (2.2 s to every answer) a connection's handshake
/// (AUTH: the nodes have a password) takes longer than 2 s: with a connect timeout of 15 s the
/// waiter's subscriptions are made, and a release's notices wake it, long before its
/// minute-long retry delay. The clients are built before the link slows down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_honour_the_connect_timeout_on_a_slow_link() {
    let fleet = Fleet::builder()
        .nodes(3)
        .proxied(true)
        .password("slow-link-pw")
        .start()
        .expect("fleet");
    let slow = |retry: Duration| {
        QuorumLock::builder()
            .nodes(fleet.urls())
            .node_timeout(Duration::from_secs(5))
            .connect_timeout(Duration::from_secs(15))
            .retry_delay(retry)
            .retry_jitter(Duration::ZERO)
            .build()
    };
    let holder = slow(Duration::from_millis(100)).await.unwrap();
    let waiter = slow(Duration::from_secs(60)).await.unwrap();
    let key = unique_key("slow-link");
    let held = holder.try_acquire(&key, TTL).await.unwrap().unwrap();
    for i in 0..3 {
        fleet.proxy(i).latency(Duration::from_millis(2200));
    }
    let task = {
        let (waiter, key) = (waiter.clone(), key.clone());
        tokio::spawn(async move {
            waiter
                .lock(&key)
                .ttl(TTL)
                .wait(Duration::from_secs(50))
                .acquire()
                .await
        })
    };
    eventually(
        &fleet,
        Duration::from_secs(40),
        "the waiter listens",
        || async { waiter.stats().contended >= 2 },
    )
    .await;
    // Its second attempt came after its subscriptions were made (or given up).
    held.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("woken by the release's notices, not by its minute-long timer")
        .unwrap()
        .unwrap();
    assert!(waiter.stats().woken >= 1, "{:?}", waiter.stats());
    for i in 0..3 {
        fleet.proxy(i).heal();
    }
    guard.release().await.unwrap();
    finish_background(&[holder, waiter]).await;
}

/// A waiter woken by a release notice asks the key's arbiter first (a herd of woken clients
/// then does not split the nodes' votes), and one whose pause ran its whole retry delay asks
/// every node: an entry left on the arbiter alone (a cancelled attempt, a crashed client)
/// keeps nobody out while a quorum of the other nodes is free. With the entry on each node in
/// turn, one of them is the key's arbiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_left_on_the_arbiter_does_not_keep_waiters_out() {
    init_tracing();
    let fleet = own_fleet(5);
    let holder = client(&fleet, Quorum::Majority).await;
    let waiter = waiter_client(&fleet, Duration::from_millis(250)).await;
    let ordered = waiter.stats().ordered;
    for n in 0..fleet.len() {
        let key = unique_key(&format!("orphan-{n}"));
        let mut c = conn(&fleet, n).await;
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("an-attempt-never-rolled-back")
            .arg("PX")
            .arg(60_000)
            .query_async(&mut c)
            .await
            .unwrap();
        let held = holder.try_acquire(&key, TTL).await.unwrap().unwrap();
        let contended = waiter.stats().contended;
        let task = {
            let (waiter, key) = (waiter.clone(), key.clone());
            tokio::spawn(async move { waiter.acquire(&key, TTL).await })
        };
        until_contended(&fleet, &waiter, contended + 2).await;
        held.release().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .unwrap_or_else(|_| panic!("entry on n{n}: the waiter never got the key"))
            .unwrap()
            .unwrap();
        guard.release().await.unwrap();
    }
    // Woken by the releases, the waiter asked the arbiter first (each time, unless its timer
    // happened to end a pause just as the release came).
    asked_the_arbiter(&waiter, ordered);
}

/// A client that releases a key while another client's waiter listens, and asks for the key
/// again at once, pauses first (courtesy) and then asks the arbiter; with nobody else
/// listening it attempts at once, on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_releaser_lets_other_clients_waiters_go_first() {
    init_tracing();
    let fleet = shared_fleet();
    let releaser = client(fleet, Quorum::Majority).await;
    let waiter = waiter_client(fleet, Duration::from_secs(60)).await;

    // Nobody else listening: the next acquire attempts at once, on every node.
    let alone = unique_key("courtesy-alone");
    let guard = releaser.acquire(&alone, TTL).await.unwrap();
    guard.release().await.unwrap();
    let before = releaser.stats();
    let guard = releaser.acquire(&alone, TTL).await.unwrap();
    let after = releaser.stats();
    assert_eq!(after.ordered, before.ordered, "{after:?}");
    assert_eq!(after.attempts, before.attempts + 1, "{after:?}");
    guard.release().await.unwrap();

    // Another client's waiter listens: the releaser's next acquire pauses, then asks the
    // arbiter.
    let key = unique_key("courtesy");
    let held = releaser.try_acquire(&key, TTL).await.unwrap().unwrap();
    let task = {
        let (waiter, key) = (waiter.clone(), key.clone());
        tokio::spawn(async move {
            let guard = waiter.acquire(&key, TTL).await.unwrap();
            guard.release().await.unwrap();
        })
    };
    until_contended(fleet, &waiter, 2).await;
    held.release().await.unwrap();
    let before = releaser.stats();
    let asked = Instant::now();
    let guard = releaser.acquire(&key, TTL).await.unwrap();
    let waited = asked.elapsed();
    let after = releaser.stats();
    assert!(after.ordered > before.ordered, "{after:?}");
    assert!(
        waited >= Duration::from_millis(2),
        "the releaser took the key back after {waited:?}, without a pause"
    );
    guard.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the waiter got the key")
        .unwrap();
}

/// A release returns at a quorum, and its request to a slow node lands later. A waiter woken
/// by the quorum's notices asks the key's arbiter first; where the arbiter is that slow node,
/// it still holds the releasing holder's entry and refuses. That refusal is no lost race: the
/// arbiter's own notice of the release, when it lands, wakes the waiter again, well before its
/// 20 s retry delay. With the holder's link slow to each node in turn, one of them is the
/// key's arbiter. The mutex and the multi-key lock (the kinds that ask an arbiter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_refused_by_an_arbiter_the_release_had_not_reached_yet_is_woken_by_its_notice() {
    init_tracing();
    let fleet = Fleet::builder().nodes(5).proxied(true).start().unwrap();
    // Through the proxies; a node timeout the held-up link stays well within.
    let holder = builder(&fleet, Quorum::Majority)
        .node_timeout(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    let waiter = waiter_builder(&fleet, Duration::from_secs(20))
        .nodes((0..fleet.len()).map(|i| fleet.direct_url(i)))
        .build()
        .await
        .unwrap();
    let ordered = waiter.stats().ordered;
    // The holder takes the waiter's keys, or (last) only the multi-key waiter's second key
    // (in key order; the arbiter is its first key's): the notice that wakes the waiter then
    // comes on another key's channel than the arbiter's.
    let second: KindRequest = |l, k| l.lock(k.iter().max().unwrap());
    let [mutex, multi, ..] = kinds(2);
    let cases = [
        (mutex.0, mutex.1, mutex.2, mutex.2),
        (multi.0, multi.1, multi.2, multi.2),
        ("multi-key, its second key held", 2, second, multi.2),
    ];
    for (kind, keys, held_by, request) in cases {
        for slow in 0..fleet.len() {
            let keys: Vec<String> = (0..keys)
                .map(|_| unique_key(&format!("late-arbiter-{slow}")))
                .collect();
            let held = held_by(&holder, &keys)
                .ttl(TTL)
                .try_acquire()
                .await
                .unwrap()
                .unwrap();
            let contended = waiter.stats().contended;
            let task = {
                let (waiter, keys) = (waiter.clone(), keys.clone());
                tokio::spawn(async move { request(&waiter, &keys).ttl(TTL).acquire().await })
            };
            until_contended(&fleet, &waiter, contended + 2).await;
            // The release reaches node `slow` only when its link heals, 400 ms after the
            // quorum's answers (and notices).
            fleet.proxy(slow).black_hole();
            held.release().await.unwrap();
            tokio::time::sleep(Duration::from_millis(400)).await;
            fleet.proxy(slow).heal();
            let guard = tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "{kind}, release held up on n{slow}: the waiter slept through its notice: {:?}",
                        waiter.stats()
                    )
                })
                .unwrap()
                .unwrap();
            guard.release().await.unwrap();
        }
    }
    asked_the_arbiter(&waiter, ordered);
}
