//! The fair lock (`fair_lock`): grants in the order of tickets drawn from a quorum counter,
//! the same order on every node; no deadlock between any number of waiters; a dead waiter
//! leaves the line with its queue lease; a release hands the key to the next waiter on the
//! nodes themselves. The negative control shows what tickets prevent: nodes that order their
//! lines by arrival split the waiters between them, and nobody ever gets a quorum.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use quorum_lock::testkit::history::{self, Interval};
use quorum_lock::testkit::{self, Fleet};
use quorum_lock::{Error, LockGuard, Quorum, QuorumLock};

const LONG: Duration = Duration::from_secs(30);

/// The waiter ids in `key`'s line on node `i`, first first.
async fn line(fleet: &Fleet, i: usize, key: &str) -> Vec<String> {
    let mut c = conn(fleet, i).await;
    redis::cmd("ZRANGE")
        .arg(quorum_lock::names::line(key.as_bytes()))
        .arg(0)
        .arg(-1)
        .query_async(&mut c)
        .await
        .expect("ZRANGE")
}

/// How many waiters are in `key`'s line on every node (the least over the nodes).
async fn queued_everywhere(fleet: &Fleet, key: &str) -> usize {
    let mut least = usize::MAX;
    for i in 0..fleet.len() {
        least = least.min(line(fleet, i, key).await.len());
    }
    least
}

/// Whether any of the fair lock's keys of `key` exists on any node.
async fn any_line_keys(fleet: &Fleet, key: &str) -> bool {
    for i in 0..fleet.len() {
        let mut c = conn(fleet, i).await;
        let n: usize = redis::cmd("EXISTS")
            .arg(quorum_lock::names::line(key.as_bytes()))
            .arg(quorum_lock::names::line_leases(key.as_bytes()))
            .arg(quorum_lock::names::line_entries(key.as_bytes()))
            .query_async(&mut c)
            .await
            .unwrap();
        if n > 0 {
            return true;
        }
    }
    false
}

/// A client whose waiters never wake on their timer within a test: they move only on
/// notices and hand-offs.
async fn patient_client(fleet: &Fleet) -> QuorumLock {
    builder(fleet, Quorum::Majority)
        .retry_delay(Duration::from_secs(60))
        .retry_jitter(Duration::ZERO)
        .queue_lease(Duration::from_secs(300))
        .wait_timeout(Duration::from_secs(120))
        .build()
        .await
        .expect("client")
}

#[tokio::test]
async fn a_free_fair_lock_is_taken_in_one_attempt_and_leaves_nothing_behind() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("fair-free");
    let guard = locks.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    assert_eq!(locks.stats().attempts, 1, "a free key takes one attempt");
    assert!(guard.is_held());
    assert!(guard.validity() <= LONG);
    // A single attempt while it is held is refused, and never joins the line.
    assert!(locks
        .fair_lock(&key)
        .ttl(LONG)
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    assert!(
        !any_line_keys(fleet, &key).await,
        "a single attempt joined the line"
    );
    guard.release().await.unwrap();
    // Once every call has landed on every node (a release returns at a quorum).
    locks.finish_background().await;
    for i in 0..fleet.len() {
        assert_eq!(entry(fleet, i, &key).await, None, "node {i} kept the entry");
    }
    assert!(!any_line_keys(fleet, &key).await);
}

/// Starts `n` waiters, each of its own client (its own connections: as separate processes),
/// one after the other: each starts once the one before it is in line on every node. Each
/// records its number when it gets the lock, holds it briefly and releases.
async fn waiters_in_line(
    fleet: &Fleet,
    key: &str,
    clients: &[QuorumLock],
    order: &Arc<Mutex<Vec<usize>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for (n, locks) in clients.iter().enumerate() {
        let (locks, owned, order) = (locks.clone(), key.to_string(), order.clone());
        tasks.push(tokio::spawn(async move {
            let guard = locks.fair_lock(&owned).ttl(LONG).acquire().await.unwrap();
            order.lock().unwrap().push(n);
            guard.release().await.unwrap();
        }));
        eventually(
            fleet,
            LONG,
            "the waiter joins the line everywhere",
            || async { queued_everywhere(fleet, key).await == n + 1 },
        )
        .await;
    }
    tasks
}

#[tokio::test]
async fn waiters_of_different_clients_are_served_in_the_order_they_joined_the_line() {
    let fleet = shared_fleet();
    let key = unique_key("fair-order");
    let holder = client(fleet, Quorum::Majority).await;
    let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(patient_client(fleet).await);
    }
    let order = Arc::new(Mutex::new(Vec::new()));
    let tasks = waiters_in_line(fleet, &key, &clients, &order).await;
    eventually(
        fleet,
        LONG,
        "every waiter listens for its grant",
        || async { clients.iter().all(|c| c.stats().waiting == 1) },
    )
    .await;
    guard.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    // Each waiter of another client claimed the key with one attempt after a notice naming
    // it (their timers are a minute long).
    for locks in &clients {
        assert_eq!(locks.stats().woken, 1, "{:?}", locks.stats());
    }
    // Once every call has landed on every node (a release returns at a quorum).
    holder.finish_background().await;
    finish_background(&clients).await;
    assert!(
        !any_line_keys(fleet, &key).await,
        "the line was left behind"
    );
}

#[tokio::test]
async fn the_line_keeps_its_order_with_one_node_killed_and_another_paused() {
    let fleet = own_fleet(5);
    let key = unique_key("fair-faults");
    let holder = patient_client(&fleet).await;
    let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(patient_client(&fleet).await);
    }
    let order = Arc::new(Mutex::new(Vec::new()));
    let tasks = waiters_in_line(&fleet, &key, &clients, &order).await;
    eventually(
        &fleet,
        LONG,
        "every waiter listens for its grant",
        || async { clients.iter().all(|c| c.stats().waiting == 1) },
    )
    .await;
    // Two of five nodes go: one killed, one frozen (its requests time out).
    fleet.kill(3).unwrap();
    fleet.pause(4).unwrap();
    guard.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(LONG, t)
            .await
            .expect("served")
            .unwrap();
    }
    fleet.resume(4).unwrap();
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn a_release_hands_the_lock_to_a_waiter_of_its_own_client_without_a_round_trip_of_its_own() {
    let fleet = shared_fleet();
    let key = unique_key("fair-hand-off");
    let locks = patient_client(fleet).await;
    let guard = locks.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let clients = vec![locks.clone(); 4];
    let tasks = waiters_in_line(fleet, &key, &clients, &order).await;
    // Every waiter made its attempts and sleeps: no attempt is in flight.
    eventually(fleet, LONG, "the waiters sleep", || async {
        let s = locks.stats();
        s.waiting == 4 && s.attempts == s.acquired + s.contended + s.failed
    })
    .await;
    let before = locks.stats();
    guard.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    let after = locks.stats();
    assert_eq!(
        after.attempts, before.attempts,
        "a waiter handed the lock made an attempt: {before:?} -> {after:?}"
    );
    assert_eq!(after.acquired - before.acquired, 4);
    assert_eq!(after.released - before.released, 5);
}

/// The remaining TTL in ms of `key` on node `i` (negative when absent).
async fn pttl(fleet: &Fleet, i: usize, key: &str) -> i64 {
    let mut c = conn(fleet, i).await;
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_handed_over_guards_deadline_is_no_later_than_its_entries_on_a_quorum() {
    let fleet = shared_fleet();
    let key = unique_key("fair-hand-off-deadline");
    let locks = patient_client(fleet).await;
    let held = locks.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let waiter = {
        let (locks, key) = (locks.clone(), key.clone());
        tokio::spawn(async move { locks.fair_lock(&key).ttl(LONG).acquire().await })
    };
    eventually(fleet, LONG, "the waiter sleeps in line", || async {
        let s = locks.stats();
        queued_everywhere(fleet, &key).await == 1
            && s.waiting == 1
            && s.attempts == s.acquired + s.contended + s.failed
    })
    .await;
    let attempts = locks.stats().attempts;
    held.release().await.unwrap();
    let handed = waiter.await.unwrap().unwrap();
    assert_eq!(
        locks.stats().attempts,
        attempts,
        "handed over, not taken by an attempt"
    );
    // The guard's validity first, the nodes' TTLs after: a deadline later than an entry's
    // expiry by more than the time between the two reads (and the ms rounding) shows.
    let validity = handed.validity().as_millis() as i64;
    let mut covering = 0;
    for i in 0..fleet.len() {
        if pttl(fleet, i, &key).await + 1 >= validity {
            covering += 1;
        }
    }
    assert!(
        covering >= locks.quorum_size(),
        "validity {validity} ms outlives the entries: only {covering} nodes cover it"
    );
    assert!(validity <= LONG.as_millis() as i64);
    handed.release().await.unwrap();
}

#[tokio::test]
async fn a_fair_guard_extends_fences_and_reports_its_release_as_the_mutex() {
    let fleet = shared_fleet();
    let key = unique_key("fair-guard");
    let locks = client(fleet, Quorum::Majority).await;
    let first = locks
        .fair_lock(&key)
        .ttl(LONG)
        .fencing(true)
        .acquire()
        .await
        .unwrap();
    let t1 = first.fencing_token().unwrap();
    first.extend(Duration::from_secs(60)).await.unwrap();
    assert!(first.validity() > LONG);
    // A waiter from another client, handed the lock by the release, gets a larger token.
    let other = patient_client(fleet).await;
    let waiter = {
        let (other, key) = (other.clone(), key.clone());
        tokio::spawn(async move {
            other
                .fair_lock(&key)
                .ttl(LONG)
                .fencing(true)
                .acquire()
                .await
        })
    };
    eventually(fleet, LONG, "the waiter joins the line", || async {
        queued_everywhere(fleet, &key).await == 1
    })
    .await;
    first.release().await.unwrap();
    let second = waiter.await.unwrap().unwrap();
    assert!(second.fencing_token().unwrap() > t1);
    // The lock is the holder value at the key, as the mutex's (once every call landed).
    finish_background(&[locks.clone(), other.clone()]).await;
    for i in 0..fleet.len() {
        assert!(entry(fleet, i, &key).await.is_some(), "node {i}");
    }
    second.release().await.unwrap();
    // A guard whose entries were taken away reports its release as refused, with the count.
    let third = locks.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    // Its requests to every node landed before the entries are taken away.
    locks.finish_background().await;
    for i in 0..fleet.len() {
        let mut c = conn(fleet, i).await;
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    match third.release().await {
        Err(Error::NotHeld { confirmed: 0, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_clients_never_deadlock_and_never_overlap() {
    let fleet = shared_fleet();
    let key = unique_key("fair-race");
    let history = Arc::new(Mutex::new(Vec::<Interval>::new()));
    let mut tasks = Vec::new();
    let mut clients = Vec::new();
    for c in 0..4 {
        let locks = client(fleet, Quorum::Majority).await;
        clients.push(locks.clone());
        for t in 0..3 {
            let (locks, key, history) = (locks.clone(), key.clone(), history.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..8 {
                    let guard: LockGuard = locks
                        .fair_lock(&key)
                        .ttl(Duration::from_secs(5))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await
                        .unwrap();
                    let interval = Interval::begin(&guard, format!("c{c}t{t}"));
                    tokio::task::yield_now().await;
                    history.lock().unwrap().push(interval.finish(&guard));
                    guard.release().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let history = history.lock().unwrap().clone();
    assert_eq!(history.len(), 4 * 3 * 8, "every acquisition completed");
    let report = history::check(&history);
    assert!(report.is_safe(), "{report:?}");
    // Once every call has landed on every node (a release returns at a quorum).
    finish_background(&clients).await;
    assert!(
        !any_line_keys(fleet, &key).await,
        "the line was left behind"
    );
}

/// The place in line of each node's line of `key`, as lengths.
async fn line_lengths(fleet: &Fleet, key: &str) -> Vec<usize> {
    let mut lengths = Vec::new();
    for i in 0..fleet.len() {
        lengths.push(line(fleet, i, key).await.len());
    }
    lengths
}

/// Starts a fair acquire of `key` by `locks` (a 3 s TTL), and returns its task once it is the
/// `n`-th waiter in line on every node.
async fn wait_in_line(
    fleet: &Fleet,
    locks: &QuorumLock,
    key: &str,
    n: usize,
) -> tokio::task::JoinHandle<quorum_lock::Result<LockGuard>> {
    let (locks, owned) = (locks.clone(), key.to_string());
    let task = tokio::spawn(async move {
        locks
            .fair_lock(&owned)
            .ttl(Duration::from_secs(3))
            .acquire()
            .await
    });
    eventually(
        fleet,
        LONG,
        &format!("waiter {n} is in line everywhere"),
        || async { line_lengths(fleet, key).await.iter().all(|&len| len == n) },
    )
    .await;
    task
}

/// A waiter in a process of its own that stops once it is in line everywhere: its runtime's
/// only thread blocks for good, so its request is never polled again, nor dropped (it
/// neither renews its place nor withdraws), and its connections go quiet, as a process that
/// was killed or froze.
async fn waiter_that_dies_in_line(fleet: &Fleet, key: &str, queue_lease: Duration) {
    let (freeze, frozen) = std::sync::mpsc::channel::<()>();
    let (urls, key_owned) = (fleet.urls(), key.to_string());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let locks = QuorumLock::builder()
                .nodes(urls)
                .queue_lease(queue_lease)
                .build()
                .await
                .unwrap();
            let mut request = Box::pin(locks.fair_lock(&key_owned).ttl(LONG).acquire());
            loop {
                tokio::select! {
                    got = &mut request => panic!("the dying waiter got the lock: {got:?}"),
                    () = tokio::time::sleep(Duration::from_millis(5)) => {}
                }
                if frozen.try_recv().is_ok() {
                    loop {
                        std::thread::park();
                    }
                }
            }
        });
    });
    eventually(fleet, LONG, "the dying waiter joins the line", || async {
        queued_everywhere(fleet, key).await == 1
    })
    .await;
    freeze.send(()).unwrap();
}

#[tokio::test]
async fn a_dead_waiter_leaves_the_line_when_its_queue_lease_ends() {
    let fleet = shared_fleet();
    let key = unique_key("fair-dead");
    let holder = client(fleet, Quorum::Majority).await;
    let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    waiter_that_dies_in_line(fleet, &key, Duration::from_millis(600)).await;
    // A live waiter joins behind it.
    let live = patient_client(fleet).await;
    let waiting = {
        let (live, key) = (live.clone(), key.clone());
        tokio::spawn(async move { live.fair_lock(&key).ttl(LONG).acquire().await })
    };
    eventually(fleet, LONG, "the live waiter joins the line", || async {
        line_lengths(fleet, &key).await.iter().all(|&n| n == 2) && live.stats().waiting == 1
    })
    .await;
    // The dead waiter's place expires on every node by itself. A node purges expired places
    // whenever it runs a fair script; the live waiter's renewals are minutes apart, so single
    // attempts (which never join the line) ask meanwhile.
    eventually(fleet, LONG, "the dead waiter's place expires", || async {
        assert!(holder
            .fair_lock(&key)
            .ttl(LONG)
            .try_acquire()
            .await
            .unwrap()
            .is_none());
        line_lengths(fleet, &key).await.iter().all(|&n| n == 1)
    })
    .await;
    // The release goes to the live waiter, not to the dead one.
    guard.release().await.unwrap();
    let got = tokio::time::timeout(LONG, waiting).await.unwrap().unwrap();
    let got = got.expect("the live waiter got the lock");
    assert_eq!(live.stats().woken, 1, "woken by the grant naming it");
    got.release().await.unwrap();
    // Once every call has landed on every node (a release returns at a quorum).
    finish_background(&[holder.clone(), live.clone()]).await;
    assert!(!any_line_keys(fleet, &key).await);
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_line_at_once() {
    let fleet = shared_fleet();
    let key = unique_key("fair-give-up");
    let holder = client(fleet, Quorum::Majority).await;
    let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let locks = patient_client(fleet).await;
    // Its wait ends.
    let refused = locks
        .fair_lock(&key)
        .ttl(LONG)
        .wait(Duration::from_millis(300))
        .acquire()
        .await;
    assert!(
        matches!(refused, Err(Error::WaitTimeout { .. })),
        "{refused:?}"
    );
    // Its future is dropped while it waits.
    let mut cancelled = Box::pin(locks.fair_lock(&key).ttl(LONG).acquire());
    eventually(fleet, LONG, "the waiter joins the line", || {
        assert!(futures::FutureExt::now_or_never(cancelled.as_mut()).is_none());
        async { queued_everywhere(fleet, &key).await == 1 }
    })
    .await;
    drop(cancelled);
    eventually(fleet, LONG, "both withdrew", || async {
        !any_line_keys(fleet, &key).await
    })
    .await;
    guard.release().await.unwrap();
    // Once every call has landed on every node (a release returns at a quorum).
    holder.finish_background().await;
    for i in 0..fleet.len() {
        assert_eq!(entry(fleet, i, &key).await, None, "node {i}");
    }
}

/// Three waiters arrive at the five nodes in different orders (as they do when their
/// requests race), each first on a different part of the nodes: nodes 0 and 1 saw A first,
/// nodes 2 and 3 saw B, node 4 saw C.
const ARRIVALS: [[usize; 3]; 5] = [[0, 1, 2], [0, 1, 2], [1, 2, 0], [1, 2, 0], [2, 0, 1]];

#[tokio::test]
async fn negative_control_a_fair_lock_ordered_by_arrival_deadlocks_and_tickets_do_not() {
    let fleet = shared_fleet();
    let queue_lease = Duration::from_secs(60);
    let waiters = ["a", "b", "c"].map(|w| format!("waiter-{w}-{}", unique_key("")));
    let holders = ["a", "b", "c"].map(|w| format!("holder-{w}-{}", unique_key("")));
    let mut nodes = Vec::new();
    for i in 0..fleet.len() {
        nodes.push(conn(fleet, i).await);
    }
    // Round after round, every waiter tries on every node; its place on a node is where it
    // arrived there (no tickets), or its ticket (the same on every node).
    let run = |key: String, place: Box<dyn Fn(usize, usize) -> u64>| {
        let (waiters, holders, mut nodes) = (waiters.clone(), holders.clone(), nodes.clone());
        async move {
            // They arrive while another holder has the key: each joins every node's line.
            for node in nodes.iter_mut() {
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg("the-holder-before")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(node)
                    .await
                    .unwrap();
            }
            for (i, node) in nodes.iter_mut().enumerate() {
                for &w in &ARRIVALS[i] {
                    let took = testkit::fair_attempt_on_node(
                        node,
                        key.as_bytes(),
                        &waiters[w],
                        &holders[w],
                        LONG,
                        place(i, w),
                        queue_lease,
                    )
                    .await
                    .unwrap();
                    assert!(!took, "the key was held");
                }
            }
            // The holder before them is gone: the key is free on every node.
            for node in nodes.iter_mut() {
                let _: () = redis::cmd("DEL").arg(&key).query_async(node).await.unwrap();
            }
            let mut granted = Vec::new();
            for _round in 0..10 {
                for (w, (waiter, holder)) in waiters.iter().zip(&holders).enumerate() {
                    if granted.contains(&w) {
                        continue;
                    }
                    let mut yes = Vec::new();
                    for (i, node) in nodes.iter_mut().enumerate() {
                        let ok = testkit::fair_attempt_on_node(
                            node,
                            key.as_bytes(),
                            waiter,
                            holder,
                            LONG,
                            place(i, w),
                            queue_lease,
                        )
                        .await
                        .unwrap();
                        if ok {
                            yes.push(i);
                        }
                    }
                    if yes.len() >= 3 {
                        granted.push(w);
                        // The holder is done: it leaves the key and the line (the release
                        // script's effect, written out).
                        for node in nodes.iter_mut() {
                            del_if(node, &key, holder, waiter).await;
                        }
                    } else {
                        // A failed attempt gives back what it took.
                        for &i in &yes {
                            let node = &mut nodes[i];
                            let _: i64 = redis::cmd("EVAL")
                                .arg("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0")
                                .arg(1)
                                .arg(&key)
                                .arg(holder)
                                .query_async(node)
                                .await
                                .unwrap();
                        }
                    }
                }
            }
            granted
        }
    };
    // By arrival: each waiter is first on two nodes at most. Nobody ever gets three.
    let by_arrival = unique_key("fair-arrival");
    let granted = run(
        by_arrival.clone(),
        Box::new(|i, w| ARRIVALS[i].iter().position(|&x| x == w).unwrap() as u64 + 1),
    )
    .await;
    assert!(
        granted.is_empty(),
        "ordered by arrival, {granted:?} got the lock"
    );
    // Each node may have granted the free key to its own first waiter (a refused attempt
    // grants it), but no holder has it on three nodes.
    let mut entries = Vec::new();
    for i in 0..fleet.len() {
        entries.push(entry(fleet, i, &by_arrival).await);
    }
    for holder in &holders {
        let on = entries
            .iter()
            .filter(|e| e.as_deref() == Some(holder.as_str()))
            .count();
        assert!(on < 3, "{holder} holds the key on {on} nodes: {entries:?}");
    }
    // With tickets (A drew 1, B 2, C 3, the same on every node), all three are served, in
    // ticket order, from the same arrivals.
    let granted = run(unique_key("fair-ticket"), Box::new(|_, w| w as u64 + 1)).await;
    assert_eq!(granted, vec![0, 1, 2]);
}

/// The release script's effect for a holder that is done: delete its entry, leave the line.
async fn del_if(
    node: &mut redis::aio::MultiplexedConnection,
    key: &str,
    holder: &str,
    waiter: &str,
) {
    let _: () = redis::cmd("EVAL")
        .arg(
            "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end \
             redis.call('zrem', KEYS[2], ARGV[2]) redis.call('zrem', KEYS[3], ARGV[2]) \
             redis.call('hdel', KEYS[4], ARGV[2])",
        )
        .arg(4)
        .arg(key)
        .arg(quorum_lock::names::line(key.as_bytes()))
        .arg(quorum_lock::names::line_leases(key.as_bytes()))
        .arg(quorum_lock::names::line_entries(key.as_bytes()))
        .arg(holder)
        .arg(waiter)
        .query_async(node)
        .await
        .unwrap();
}

/// Publishes `message` on `channel` on node `i` (as a node does for a grant).
async fn publish(fleet: &Fleet, i: usize, channel: &str, message: &str) {
    let mut c = conn(fleet, i).await;
    let _: i64 = redis::cmd("PUBLISH")
        .arg(channel)
        .arg(message)
        .query_async(&mut c)
        .await
        .unwrap();
}

/// One round of the late-rollback test: the waiter's attempt fails while its connection to
/// node 0 is being re-made (slowly), so the attempt's rollback to node 0 waits for the new
/// connection; the holder releases (granting the key to the waiter on nodes 0 and 1); the
/// waiter's next attempt takes the lock. Returns the waiter's guard and whether its entry on
/// node 0 was gone a second later (a rollback landing after the attempt deletes it: all
/// attempts of a fair request share its holder value).
async fn late_rollback_round(
    fleet: &Fleet,
    holder: &QuorumLock,
    waiter_client: &QuorumLock,
    key: &str,
) -> (LockGuard, bool) {
    let channel =
        String::from_utf8_lossy(&quorum_lock::names::release_channel(key.as_bytes())).into_owned();
    let held = holder.fair_lock(key).ttl(LONG).acquire().await.unwrap();
    // Read before the waiter starts: `waiting` is a gauge, and a waiter that is already
    // asleep when it is read would never show as one more.
    let before = waiter_client.stats().waiting;
    let waiting = {
        let (c, k) = (waiter_client.clone(), key.to_string());
        tokio::spawn(async move {
            c.fair_lock(&k)
                .ttl(LONG)
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        })
    };
    eventually(
        fleet,
        LONG,
        "the waiter is in line, listens and sleeps",
        || async {
            let s = waiter_client.stats();
            line(fleet, 0, key).await.len() == 1
                && line(fleet, 1, key).await.len() == 1
                && s.waiting > before
                && s.attempts == s.acquired + s.contended + s.failed
        },
    )
    .await;
    let waiter_id = line(fleet, 1, key).await.remove(0);
    // The waiter's connection to node 0 drops; the new one is slow to come.
    fleet.proxy(0).latency(Duration::from_millis(300));
    fleet.proxy(0).reset();
    // Wake the waiter (a quorum of notices naming it): its attempt fails (node 1 held, node 2
    // down), and its rollback to node 0 waits for the new connection.
    let attempts = waiter_client.stats().attempts;
    for _ in 0..2 {
        publish(fleet, 1, &channel, &format!("grant:{waiter_id}:first")).await;
    }
    eventually(fleet, LONG, "the attempt decided", || async {
        let s = waiter_client.stats();
        s.attempts > attempts && s.attempts == s.acquired + s.contended + s.failed
    })
    .await;
    // The holder (direct connections) releases: nodes 0 and 1 grant the key to the waiter,
    // whose next attempt takes it.
    held.release().await.unwrap();
    for _ in 0..2 {
        publish(fleet, 1, &channel, &format!("grant:{waiter_id}:second")).await;
    }
    let guard = tokio::time::timeout(LONG, waiting)
        .await
        .expect("the waiter got the lock")
        .unwrap()
        .unwrap();
    fleet.proxy(0).heal();
    // Long enough for a rollback held up behind the reconnect to land.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let gone = entry(fleet, 0, key).await.is_none();
    (guard, gone)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_held_up_by_a_reconnect_never_deletes_the_entry_of_the_next_attempt() {
    let fleet = Fleet::builder().nodes(3).proxied(true).start().unwrap();
    let direct: Vec<String> = (0..3).map(|i| fleet.direct_url(i)).collect();
    let holder = QuorumLock::builder()
        .nodes(direct)
        .node_timeout(Duration::from_millis(500))
        .retry_delay(Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    let waiter_client = builder(&fleet, Quorum::Majority)
        .node_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(5))
        .queue_lease(Duration::from_secs(300))
        .retry_delay(Duration::from_secs(60))
        .retry_jitter(Duration::ZERO)
        .build()
        .await
        .unwrap();
    // One node of three down: tolerated (N - q = 1). The guard then rests on nodes 0 and 1.
    fleet.kill(2).unwrap();
    for round in 0..3 {
        let key = unique_key("fair-late-rollback");
        let (guard, gone) = late_rollback_round(&fleet, &holder, &waiter_client, &key).await;
        assert!(
            !(gone && guard.is_held()),
            "round {round}: a valid guard whose entry on node 0 a late rollback deleted"
        );
        guard.release().await.unwrap();
    }
}

/// A waiter first in line that reaches only two of four nodes (fewer than the quorum of
/// three, but enough that nobody else can have three where it is not first) must not keep
/// its place with its failing attempts: it leaves the line, and the waiter behind it, which
/// reaches every node, gets the lock.
#[tokio::test]
async fn a_first_waiter_cut_off_from_a_quorum_leaves_the_line_to_the_next() {
    use quorum_lock::testkit::FaultProxy;
    let fleet = own_fleet(4);
    let direct: Vec<String> = (0..4).map(|i| fleet.direct_url(i)).collect();
    let key = unique_key("fair-cut-off");
    let quick = |nodes: Vec<String>, wait: Duration| {
        QuorumLock::builder()
            .nodes(nodes)
            .node_timeout(Duration::from_millis(250))
            .queue_lease(Duration::from_secs(1))
            .retry_delay(Duration::from_millis(50))
            .retry_jitter(Duration::from_millis(20))
            .wait_timeout(wait)
            .build()
    };
    let holder = quick(direct.clone(), LONG).await.unwrap();
    let held = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    // The first waiter reaches nodes 2 and 3 through links of its own.
    let links = [
        FaultProxy::start(fleet.node(2).port()).unwrap(),
        FaultProxy::start(fleet.node(3).port()).unwrap(),
    ];
    let mut first_nodes = direct[..2].to_vec();
    first_nodes.extend(
        links
            .iter()
            .map(|p| format!("redis://127.0.0.1:{}", p.port())),
    );
    let first = quick(first_nodes, LONG).await.unwrap();
    let first_waits = wait_in_line(&fleet, &first, &key, 1).await;
    let second = quick(direct, Duration::from_secs(10)).await.unwrap();
    let second_waits = wait_in_line(&fleet, &second, &key, 2).await;
    // The first waiter's links to nodes 2 and 3 go down; the holder releases.
    for l in &links {
        l.black_hole();
    }
    held.release().await.unwrap();
    let got = second_waits.await.unwrap();
    let stalled = line(&fleet, 0, &key).await;
    for l in &links {
        l.heal();
    }
    let _ = first_waits.await;
    assert!(
        got.is_ok(),
        "the second waiter (reaching all four nodes) never got the lock: {got:?}; node 0's \
         line: {stalled:?}"
    );
}

/// One node's view of a fair key as [`line_dump`] reads it: holder, PTTL, line (member,
/// ticket), queue leases (member, ms left), members with an entry, the node's clock (ms).
type NodeView = (
    String,
    String,
    Vec<(String, String)>,
    Vec<(String, String)>,
    Vec<String>,
    String,
);

/// Every node's view of a fair key, for a failing test, each node's read in one script (so
/// that it is one moment's view): the entry's holder (by its waiter id, and whether that
/// waiter is in line) and PTTL, the line with tickets, and the queue leases (ms left).
async fn line_dump(fleet: &Fleet, key: &str) -> String {
    const READ: &str = r#"
        local t = redis.call('time')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local leases = redis.call('zrange', KEYS[3], 0, -1, 'WITHSCORES')
        for i = 2, #leases, 2 do leases[i] = tostring(tonumber(leases[i]) - now) end
        return {redis.call('get', KEYS[1]) or '', tostring(redis.call('pttl', KEYS[1])),
                redis.call('zrange', KEYS[2], 0, -1, 'WITHSCORES'), leases,
                redis.call('hkeys', KEYS[4]), tostring(now)}"#;
    let mut out = String::new();
    for i in 0..fleet.len() {
        let mut c = conn(fleet, i).await;
        let (holder, pttl, line, leases, entries, now): NodeView = redis::cmd("EVAL")
            .arg(READ)
            .arg(4)
            .arg(key)
            .arg(quorum_lock::names::line(key.as_bytes()))
            .arg(quorum_lock::names::line_leases(key.as_bytes()))
            .arg(quorum_lock::names::line_entries(key.as_bytes()))
            .query_async(&mut c)
            .await
            .unwrap();
        // A fair holder value is `fair:<waiter id>:<secret>`: the waiter id is public.
        let held = match holder.strip_prefix("fair:").and_then(|h| h.split_once(':')) {
            Some((w, _)) if entries.iter().any(|e| e == w) => format!("{w} (in line)"),
            Some((w, _)) => format!("{w} (not in line)"),
            None if holder.is_empty() => "nobody".to_string(),
            None => "a holder value that is not a fair one".to_string(),
        };
        out.push_str(&format!(
            "node {i} (ms {now}): key held by {held}, pttl {pttl}; line {line:?}; \
             queue leases (ms left) {leases:?}\n"
        ));
    }
    out
}

/// Sixteen tasks of eight clients take turns on one key; their timers are a minute long, so
/// every turn must come from a hand-off (within a client) or a grant's notice (across
/// clients): a line that stalls (a free key whose first waiter sleeps) fails the test by its
/// wait. Heavy on purpose: a stall that needs a loaded machine to show shows here first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_several_clients_take_turns_without_falling_back_to_their_timers() {
    if let Ok(path) = std::env::var("QUORUM_LOCK_TEST_TRACE") {
        let file = std::fs::File::create(path).expect("trace file");
        let _ = tracing::subscriber::set_global_default(
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new("quorum_lock=trace"))
                .with_writer(Mutex::new(file))
                .with_ansi(false)
                .finish(),
        );
    }
    let fleet = shared_fleet();
    let key = unique_key("fair-turns");
    const CLIENTS: usize = 8;
    const TASKS: usize = 16;
    const TURNS: usize = 25;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(patient_client(fleet).await);
    }
    // The line's state when it first stalls (no turn for three seconds), for the failure
    // message: the state once the waits have ended says little.
    let turns = Arc::new(AtomicUsize::new(0));
    let monitor = {
        let (turns, key) = (turns.clone(), key.clone());
        tokio::spawn(async move {
            let mut last = (0, std::time::Instant::now());
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let now = turns.load(Ordering::Relaxed);
                if now != last.0 {
                    last = (now, std::time::Instant::now());
                } else if last.1.elapsed() > Duration::from_secs(3) {
                    return format!(
                        "after turn {now}, no turn for 3 s:\n{}",
                        line_dump(shared_fleet(), &key).await
                    );
                }
            }
        })
    };
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (locks, key, turns) = (clients[t % CLIENTS].clone(), key.clone(), turns.clone());
        tasks.push(tokio::spawn(async move {
            for turn in 0..TURNS {
                let started = std::time::Instant::now();
                let guard = match locks
                    .fair_lock(&key)
                    .ttl(LONG)
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
                {
                    Ok(guard) => guard,
                    Err(e) => {
                        return Err(format!(
                            "task {t}, turn {turn}: no turn within the wait ({:?}): {e}; {:?}\n{}",
                            started.elapsed(),
                            locks.stats(),
                            line_dump(shared_fleet(), &key).await
                        ))
                    }
                };
                turns.fetch_add(1, Ordering::Relaxed);
                guard.release().await.unwrap();
            }
            Ok(())
        }));
    }
    let mut stalled = Vec::new();
    for t in tasks {
        if let Err(e) = t.await.unwrap() {
            stalled.push(e);
        }
    }
    let first_stall = match monitor.is_finished() {
        true => monitor.await.unwrap(),
        false => {
            monitor.abort();
            "none seen".to_string()
        }
    };
    if !stalled.is_empty() {
        panic!(
            "the line stalled: {stalled:#?}\nfirst stall: {first_stall}\nat the end:\n{}",
            line_dump(fleet, &key).await
        );
    }
    let acquired: u64 = clients.iter().map(|c| c.stats().acquired).sum();
    assert_eq!(acquired, (TASKS * TURNS) as u64);
    // Once every call has landed on every node (a release returns at a quorum).
    finish_background(&clients).await;
    assert!(
        !any_line_keys(fleet, &key).await,
        "the line was left behind"
    );
}

/// A release grants the key to the first waiter; one that died in line (its place good for
/// a minute) would hold the line for its whole TTL (30 s here) if the grant were for its TTL,
/// as Redisson's is (#1353). A grant to a waiter of another client is short (its claim
/// window, four of its node timeouts) and, unclaimed, passes to the next waiter, whose client
/// tries at the end of the window: a patient waiter (timers a minute long) gets the lock
/// within a fraction of a second.
#[tokio::test]
async fn a_grant_to_a_dead_waiter_passes_to_the_next_one_after_its_claim_window() {
    let fleet = shared_fleet();
    let key = unique_key("fair-dead-grant");
    let holder = client(fleet, Quorum::Majority).await;
    let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let doomed = {
        let key = key.clone();
        Doomed::start(
            QuorumLock::builder()
                .nodes(fleet.urls())
                .queue_lease(Duration::from_secs(60)),
            move |locks| async move { locks.fair_lock(&key).ttl(LONG).acquire().await },
        )
    };
    eventually(fleet, LONG, "the doomed waiter joins the line", || async {
        queued_everywhere(fleet, &key).await == 1
    })
    .await;
    doomed.freeze();
    let live = patient_client(fleet).await;
    let waiting = {
        let (live, key) = (live.clone(), key.clone());
        tokio::spawn(async move {
            live.fair_lock(&key)
                .ttl(LONG)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    eventually(fleet, LONG, "the live waiter joins the line", || async {
        line_lengths(fleet, &key).await.iter().all(|&n| n == 2) && live.stats().waiting == 1
    })
    .await;
    let released = tokio::time::Instant::now();
    guard.release().await.unwrap();
    let got = tokio::time::timeout(LONG, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}\n{}", fleet.all_logs()));
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the line stalled {took:?} behind the dead waiter's grant"
    );
    got.release().await.unwrap();
    finish_background(&[holder.clone(), live.clone()]).await;
}

/// A waiting request draws its ticket with its first refused attempt, then joins the line
/// with the next. The counter it raised must not outlive it if it dies in between (no line
/// is there yet to keep the counter, or to delete it with itself).
#[tokio::test]
async fn a_ticket_drawn_by_a_waiter_that_never_joins_the_line_expires() {
    let fleet = shared_fleet();
    let key = unique_key("fair-ticket-expiry");
    let holder = client(fleet, Quorum::Majority).await;
    let _guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    // The acquire returned at a quorum: node 0 may not have the entry yet.
    holder.finish_background().await;
    let mut node = conn(fleet, 0).await;
    let queue_lease = Duration::from_secs(2);
    let drawn = testkit::fair_first_attempt_on_node(
        &mut node,
        key.as_bytes(),
        "waiter-that-dies",
        "fair:waiter-that-dies:0123456789abcdef",
        LONG,
        queue_lease,
    )
    .await
    .unwrap();
    assert!(drawn.is_some(), "refused: someone holds the key");
    let counter = quorum_lock::names::tickets(key.as_bytes());
    let pttl = |mut node: redis::aio::MultiplexedConnection| {
        let counter = counter.clone();
        async move {
            let ms: i64 = redis::cmd("PTTL")
                .arg(&counter)
                .query_async(&mut node)
                .await
                .unwrap();
            ms
        }
    };
    let left = pttl(node.clone()).await;
    assert!(
        left > 0 && left <= 2000,
        "the ticket counter lives {left} ms (-1: for ever)"
    );
    // The same for a ticket drawn in a round of its own, on a node without the counter.
    let mut other = conn(fleet, 1).await;
    let _: () = redis::cmd("DEL")
        .arg(&counter)
        .query_async(&mut other)
        .await
        .unwrap();
    let ticket = testkit::fair_draw_on_node(&mut other, key.as_bytes(), queue_lease)
        .await
        .unwrap();
    assert!(ticket > 0);
    let left = pttl(other).await;
    assert!(
        left > 0 && left <= 2000,
        "the ticket counter lives {left} ms after a draw round (-1: for ever)"
    );
}

/// A fair lock's token releases it as its guard would: the next waiter in line gets the key
/// handed on by the nodes (its grant's notices wake it), not after a timer.
#[tokio::test]
async fn a_fair_locks_token_releases_it_from_another_client_with_the_hand_off() {
    let fleet = shared_fleet();
    let key = unique_key("fair-token");
    let holder = client(fleet, Quorum::Majority).await;
    let token = holder
        .fair_lock(&key)
        .ttl(LONG)
        .acquire()
        .await
        .unwrap()
        .into_holder()
        .expect("a fair lock's guard gives its token");
    holder.finish_background().await;
    let live = patient_client(fleet).await;
    let waiting = {
        let (live, key) = (live.clone(), key.clone());
        tokio::spawn(async move {
            live.fair_lock(&key)
                .ttl(LONG)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    eventually(fleet, LONG, "the waiter joins the line", || async {
        queued_everywhere(fleet, &key).await == 1 && live.stats().waiting == 1
    })
    .await;
    let other = client(fleet, Quorum::Majority).await;
    let validity = other
        .extend_by_holder(&key, &token, LONG)
        .await
        .expect("extended by holder value");
    assert!(validity > LONG / 2);
    other.release_by_holder(&key, &token).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter was handed the key, not left to its timer")
        .unwrap()
        .unwrap();
    assert_eq!(live.stats().woken, 1, "woken by the grant naming it");
    got.release().await.unwrap();
    finish_background(&[live.clone(), other.clone()]).await;
    assert!(
        !any_line_keys(fleet, &key).await,
        "the line was left behind"
    );
}

/// A token's release by holder value takes its request out of the line as the guard's would: here
/// its holder came through the line (so its waiter is still first in line, its place good
/// for a minute), and the next waiter must be handed the key at once, not after that minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_token_of_a_holder_that_came_through_the_line_hands_the_key_on() {
    let fleet = shared_fleet();
    let key = unique_key("fair-token-line");
    let blocker = client(fleet, Quorum::Majority).await;
    let first = blocker.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let holder = builder(fleet, Quorum::Majority)
        .queue_lease(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let held = {
        let (holder, key) = (holder.clone(), key.clone());
        tokio::spawn(async move {
            holder
                .fair_lock(&key)
                .ttl(LONG)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    eventually(fleet, LONG, "the holder waits in line", || async {
        line_lengths(fleet, &key).await.iter().all(|&n| n == 1)
    })
    .await;
    first.release().await.unwrap();
    let token = held.await.unwrap().unwrap().into_holder().unwrap();
    holder.finish_background().await;
    let live = patient_client(fleet).await;
    let waiting = {
        let (live, key) = (live.clone(), key.clone());
        tokio::spawn(async move {
            live.fair_lock(&key)
                .ttl(LONG)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    eventually(fleet, LONG, "the live waiter joins", || async {
        live.stats().waiting == 1 && line_lengths(fleet, &key).await.iter().all(|&n| n >= 1)
    })
    .await;
    let other = client(fleet, Quorum::Majority).await;
    other.release_by_holder(&key, &token).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("handed on by the token's release")
        .unwrap()
        .unwrap();
    got.release().await.unwrap();
    finish_background(&[live, other, holder, blocker]).await;
}

/// A made-up token naming a waiter (its id is public: grant notices and the line carry it)
/// takes nobody out of the line: the release of a holder value that holds nothing leaves the
/// line as it is, and the waiter keeps its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_made_up_fair_token_takes_nobody_out_of_the_line() {
    let fleet = shared_fleet();
    let key = unique_key("fair-forged");
    let holder = client(fleet, Quorum::Majority).await;
    let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let victim = patient_client(fleet).await;
    let victim_wait = {
        let (victim, key) = (victim.clone(), key.clone());
        tokio::spawn(async move {
            victim
                .fair_lock(&key)
                .ttl(LONG)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    eventually(fleet, LONG, "the victim joins the line", || async {
        line_lengths(fleet, &key).await.iter().all(|&n| n == 1) && victim.stats().waiting == 1
    })
    .await;
    let waiter_id = line(fleet, 0, &key).await[0].clone();
    let stranger = client(fleet, Quorum::Majority).await;
    let forged = format!("fair:{waiter_id}:0123456789abcdef0123456789abcdef:g");
    assert!(matches!(
        stranger.release_by_holder(&key, &forged).await,
        Err(Error::NotHeld { .. })
    ));
    stranger.finish_background().await;
    assert_eq!(
        line_lengths(fleet, &key).await,
        vec![1; 5],
        "the made-up token took the waiter out of the line"
    );
    guard.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), victim_wait)
        .await
        .expect("the victim keeps its turn")
        .unwrap()
        .unwrap();
    got.release().await.unwrap();
    finish_background(&[holder, victim, stranger]).await;
}

/// Two waiters die in line one behind the other: a crashed process with two waiting tasks.
/// The grant to the first names as the next waiter the first one behind it of another client
/// (the live waiter), whose client tries at the end of the claim window; its attempt finds
/// the key free and the second dead waiter first, and grants it its own claim window (and
/// names the live waiter again). Each dead waiter costs one claim window, not a queue lease
/// (a minute here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dead_waiters_of_one_process_cost_two_claim_windows() {
    let fleet = shared_fleet();
    let key = unique_key("fair-two-dead");
    let holder = client(fleet, Quorum::Majority).await;
    let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    let doomed = {
        let k = key.clone();
        Doomed::start(
            QuorumLock::builder()
                .nodes(fleet.urls())
                .queue_lease(Duration::from_secs(60)),
            move |locks| async move {
                let first = locks.fair_lock(&k).ttl(LONG).acquire();
                // The second task joins the line after the first.
                let second = async {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    locks.fair_lock(&k).ttl(LONG).acquire().await
                };
                tokio::select! {
                    got = first => got,
                    got = second => got,
                }
            },
        )
    };
    eventually(fleet, LONG, "both doomed waiters join the line", || async {
        line_lengths(fleet, &key).await.iter().all(|&l| l == 2)
    })
    .await;
    doomed.freeze();
    let live = patient_client(fleet).await;
    let waiting = {
        let (live, key) = (live.clone(), key.clone());
        tokio::spawn(async move {
            live.fair_lock(&key)
                .ttl(LONG)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    eventually(fleet, LONG, "the live waiter joins the line", || async {
        line_lengths(fleet, &key).await.iter().all(|&n| n == 3) && live.stats().waiting == 1
    })
    .await;
    let released = tokio::time::Instant::now();
    guard.release().await.unwrap();
    let got = waiting.await.unwrap();
    let took = released.elapsed();
    assert!(
        got.is_ok() && took < Duration::from_secs(5),
        "the line stalled {took:?}: {got:?}"
    );
    got.unwrap().release().await.unwrap();
    finish_background(&[holder, live]).await;
}

/// A first waiter that moves on its timer (pub/sub off; likewise one whose notices were
/// lost) with a retry delay of 1 s: its claim window covers its own pause, so it keeps its
/// turn, and the waiter that joined after it is served after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_waiter_that_moves_on_its_timer_keeps_its_turn() {
    let fleet = shared_fleet();
    for _ in 0..2 {
        let key = unique_key("fair-timer-waiter");
        let holder = client(fleet, Quorum::Majority).await;
        let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
        let slow = QuorumLock::builder()
            .nodes(fleet.urls())
            .node_timeout(Duration::from_millis(50))
            .retry_delay(Duration::from_secs(1))
            .retry_jitter(Duration::ZERO)
            .pubsub(false)
            .build()
            .await
            .unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let spawn_waiter = |locks: QuorumLock, name: &'static str| {
            let (key, order) = (key.clone(), order.clone());
            tokio::spawn(async move {
                let g = locks
                    .fair_lock(&key)
                    .ttl(LONG)
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
                    .unwrap();
                order.lock().unwrap().push(name);
                tokio::time::sleep(Duration::from_millis(50)).await;
                g.release().await.unwrap();
            })
        };
        let first = spawn_waiter(slow.clone(), "first, on its timer");
        eventually(fleet, LONG, "the first waiter joins", || async {
            line_lengths(fleet, &key).await.iter().all(|&n| n == 1)
        })
        .await;
        let later = client(fleet, Quorum::Majority).await;
        let second = spawn_waiter(later.clone(), "second");
        eventually(fleet, LONG, "the second waiter joins", || async {
            line_lengths(fleet, &key).await.iter().all(|&n| n == 2)
        })
        .await;
        guard.release().await.unwrap();
        first.await.unwrap();
        second.await.unwrap();
        let order = order.lock().unwrap().clone();
        assert_eq!(
            order,
            ["first, on its timer", "second"],
            "out of ticket order"
        );
        finish_background(&[holder, slow, later]).await;
    }
}

/// Takes `waiter` out of `key`'s line on node `i`, as if its join had not landed there yet
/// (a join lands on each node in its own time).
async fn not_joined_yet(fleet: &Fleet, i: usize, key: &str, waiter: &str) {
    let mut c = conn(fleet, i).await;
    let _: () = redis::pipe()
        .cmd("ZREM")
        .arg(quorum_lock::names::line(key.as_bytes()))
        .arg(waiter)
        .cmd("ZREM")
        .arg(quorum_lock::names::line_leases(key.as_bytes()))
        .arg(waiter)
        .cmd("HDEL")
        .arg(quorum_lock::names::line_entries(key.as_bytes()))
        .arg(waiter)
        .query_async(&mut c)
        .await
        .unwrap();
}

/// The waiter that joined `key`'s line last, as node `i` has it (highest ticket).
async fn last_in_line(fleet: &Fleet, i: usize, key: &str) -> String {
    line(fleet, i, key).await.pop().expect("a waiter in line")
}

/// A release lands while the nodes' lines differ (a join not yet landed everywhere): each
/// node grants its own first waiter, here nodes 0-1 the first waiter, 2-3 the second and 4
/// the third. No waiter has a quorum of grants, so no notice wakes one, and the grants are
/// short, but a claim window outlasts the waiters' timers, a minute here: waiting the grants
/// out would stall the line for their 30 s. A waiter named by a minority of grants tries
/// after a node timeout instead; its try rejoins the line on the nodes that had lost its
/// place, and the rollbacks of those tries hand their nodes to the first waiter there, which
/// takes the lock; every waiter gets it within its wait. (Which of the first two goes first
/// depends on which rejoin reaches node 4 first: the first waiter's place was lost on a
/// majority of the nodes, the second's on one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_split_between_waiters_is_mended_without_waiting_the_grants_out() {
    let fleet = shared_fleet();
    let key = unique_key("fair-split");
    let holder = client(fleet, Quorum::Majority).await;
    let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
    holder.finish_background().await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    // Each waiter joins behind the ones before it; then the nodes listed forget its place.
    for (n, forgotten_on) in [(1, &[2, 3, 4][..]), (2, &[4][..]), (3, &[][..])] {
        let locks = patient_client(fleet).await;
        let (k, order) = (key.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let got = locks
                .fair_lock(&k)
                .ttl(LONG)
                .wait(Duration::from_secs(20))
                .acquire()
                .await;
            order.lock().unwrap().push(n);
            let stats = locks.stats();
            got.map_err(|e| format!("waiter {n}: {e}; {stats:?}"))?
                .release()
                .await
                .map_err(|e| format!("waiter {n}'s release: {e}"))
        }));
        eventually(
            fleet,
            Duration::from_secs(10),
            "the waiter in line",
            || async { line(fleet, 0, &key).await.len() == n },
        )
        .await;
        let waiter = last_in_line(fleet, 0, &key).await;
        eventually(
            fleet,
            Duration::from_secs(10),
            "its join everywhere",
            || async {
                let mut everywhere = true;
                for i in 0..fleet.len() {
                    everywhere &= line(fleet, i, &key).await.contains(&waiter);
                }
                everywhere
            },
        )
        .await;
        for &i in forgotten_on {
            not_joined_yet(fleet, i, &key, &waiter).await;
        }
    }
    let before = line_dump(fleet, &key).await;
    guard.release().await.unwrap();
    let mut failed = Vec::new();
    for w in waiters {
        if let Err(e) = w.await.unwrap() {
            failed.push(e);
        }
    }
    assert!(
        failed.is_empty(),
        "{failed:#?}\nbefore the release:\n{before}\nnow:\n{}",
        line_dump(fleet, &key).await
    );
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), 3, "{order:?}");
    assert_eq!(
        order[2], 3,
        "the last to join, whose place no node lost, went before another: {order:?}"
    );
}

/// An attempt, a rollback or a withdrawal that lands late on a node (written on a connection
/// that was then replaced) must not undo what a later attempt, or a grant, of the same
/// request counts on: each attempt holds the key with a value of its own and claims only a
/// grant, and a rollback deletes only its own attempt's value. A request cut off from
/// a quorum goes on under a new identity, which its old withdrawal cannot touch. (When all
/// attempts shared one holder value, the late rollback deleted the next attempt's entry;
/// `tests/model_fair/` finds the two holders that follows.) The library's own scripts,
/// on one node, in the order a late delivery gives them.
#[tokio::test]
async fn late_rollbacks_and_withdrawals_touch_nothing_a_later_attempt_or_grant_counts_on() {
    let fleet = shared_fleet();
    let key = unique_key("fair-late-scripts");
    let mut node = conn(fleet, 0).await;
    let lease = Duration::from_secs(30);
    let base = "fair:late.w1:0123456789abcdef0123456789abcdef";
    let (first, second) = (format!("{base}:1"), format!("{base}:2"));
    let attempt = |holder: String, waiter: &'static str, ticket: u64| {
        let key = key.clone();
        async move {
            let mut node = conn(fleet, 0).await;
            testkit::fair_attempt_on_node(
                &mut node,
                key.as_bytes(),
                waiter,
                &holder,
                LONG,
                ticket,
                lease,
            )
            .await
            .unwrap()
        }
    };
    // Attempt 1 takes the free key. Attempt 2 (attempt 1 failed elsewhere, and its rollback
    // has not reached this node yet) is refused: an earlier attempt's value is never claimed.
    assert!(attempt(first.clone(), "late.w1", 1).await);
    assert!(!attempt(second.clone(), "late.w1", 1).await);
    assert_eq!(entry(fleet, 0, &key).await.as_deref(), Some(first.as_str()));
    // Attempt 1's rollback lands: the key goes straight back to the request, first in line,
    // as a grant, which attempt 2's retry claims.
    assert!(
        testkit::fair_rollback_on_node(&mut node, key.as_bytes(), "late.w1", &first)
            .await
            .unwrap()
    );
    assert_eq!(
        entry(fleet, 0, &key).await,
        Some(format!("{base}:g")),
        "the rollback granted the key to its request"
    );
    assert!(attempt(second.clone(), "late.w1", 1).await);
    // Attempt 1 and its rollback land once more (a copy written on a replaced connection):
    // neither touches attempt 2's entry.
    assert!(!attempt(first.clone(), "late.w1", 1).await);
    let deleted = testkit::fair_rollback_on_node(&mut node, key.as_bytes(), "late.w1", &first)
        .await
        .unwrap();
    assert!(!deleted, "a late rollback deleted the next attempt's entry");
    assert_eq!(
        entry(fleet, 0, &key).await.as_deref(),
        Some(second.as_str())
    );
    // Attempt 2 fails too and rolls back: the key goes straight back to the request, first
    // in line, as a grant; attempt 1's rollback, landing again, leaves the grant.
    assert!(
        testkit::fair_rollback_on_node(&mut node, key.as_bytes(), "late.w1", &second)
            .await
            .unwrap()
    );
    let grant = format!("{base}:g");
    assert_eq!(entry(fleet, 0, &key).await.as_deref(), Some(grant.as_str()));
    let deleted = testkit::fair_rollback_on_node(&mut node, key.as_bytes(), "late.w1", &first)
        .await
        .unwrap();
    assert!(!deleted, "a late rollback deleted a grant to its request");
    assert_eq!(entry(fleet, 0, &key).await.as_deref(), Some(grant.as_str()));
    // Cut off, the request withdraws (deleting its grant) and goes on as a new identity,
    // which joins the line and takes the key; the old withdrawal, landing again, leaves both.
    assert!(
        testkit::fair_withdraw_on_node(&mut node, key.as_bytes(), "late.w1", &first)
            .await
            .unwrap()
    );
    let renewed = "fair:late.w2:fedcba9876543210fedcba9876543210:1".to_string();
    assert!(attempt(renewed.clone(), "late.w2", 2).await);
    let deleted = testkit::fair_withdraw_on_node(&mut node, key.as_bytes(), "late.w1", &first)
        .await
        .unwrap();
    assert!(
        !deleted,
        "a late withdrawal deleted the new identity's entry"
    );
    assert_eq!(
        entry(fleet, 0, &key).await.as_deref(),
        Some(renewed.as_str())
    );
    assert_eq!(line(fleet, 0, &key).await, vec!["late.w2".to_string()]);
    forget_fair_key(fleet, 0, &key).await;
}

/// A release handing the lock to a waiter of its own client sets the key to the waiter's
/// hand-off value for the round of its last attempt (`<base>:h<round>`), which the handed-over
/// guard holds. An attempt of that round or an earlier one, landing late, finds it held and
/// changes nothing (were it to take the key over, its rollback, landing after it, would
/// delete what the guard counts on); an attempt of a later round (the hand-off did not
/// happen, since the waiter attempts again) claims it. The library's own acquire script on
/// one node, for an attempt of round 1.
#[tokio::test]
async fn a_hand_off_value_is_claimed_only_by_an_attempt_of_a_later_round() {
    let fleet = shared_fleet();
    let key = unique_key("fair-handed");
    let mut node = conn(fleet, 0).await;
    let base = "fair:handed.w1:0123456789abcdef0123456789abcdef";
    let attempt = format!("{base}:1");
    for (handed_round, claimed) in [(1, false), (2, false), (0, true)] {
        let handed = format!("{base}:h{handed_round}");
        plant(fleet, 0, &key, &handed).await;
        let took = testkit::fair_attempt_on_node(
            &mut node,
            key.as_bytes(),
            "handed.w1",
            &attempt,
            LONG,
            1,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        let now = entry(fleet, 0, &key).await;
        assert_eq!(took, claimed, "hand-off of round {handed_round}: {now:?}");
        let expected = if claimed { &attempt } else { &handed };
        assert_eq!(now.as_deref(), Some(expected.as_str()));
    }
    forget_fair_key(fleet, 0, &key).await;
}

/// Deletes a fair key and its line from node `i` of the shared fleet, as a test that edits
/// one node by hand leaves it.
async fn forget_fair_key(fleet: &Fleet, i: usize, key: &str) {
    let mut c = conn(fleet, i).await;
    let _: () = redis::cmd("DEL")
        .arg(key)
        .arg(quorum_lock::names::line(key.as_bytes()))
        .arg(quorum_lock::names::line_leases(key.as_bytes()))
        .arg(quorum_lock::names::line_entries(key.as_bytes()))
        .arg(quorum_lock::names::tickets(key.as_bytes()))
        .query_async(&mut c)
        .await
        .unwrap();
}
