//! The fair lock (`fair_lock`): grants in the order of tickets drawn from a quorum counter,
//! the same order on every node; no deadlock between any number of waiters; a dead waiter
//! leaves the line with its queue lease; a release hands the key to the next waiter on the
//! nodes themselves. The negative control shows what tickets prevent: nodes that order their
//! lines by arrival split the waiters between them, and nobody ever gets a quorum.
//!
//! Here: the helpers that read the nodes' lines, and the line's order, hand-off, extends,
//! fencing, races and dead or departing waiters. `faults`: the negative control and the line
//! under faults and races; `holders`: the fair forms' holder values and the waiters' timers.

mod combinations;
#[path = "../common/mod.rs"]
mod common;
mod faults;
mod holders;
mod review_notices;
mod review_notices_guards;

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

/// Starts a fair acquire of `key` by `locks`, without waiting for its place in line.
pub(crate) fn start_waiting(
    locks: &QuorumLock,
    key: &str,
    ttl: Duration,
    wait: Duration,
) -> tokio::task::JoinHandle<quorum_lock::Result<LockGuard>> {
    let (locks, key) = (locks.clone(), key.to_string());
    tokio::spawn(async move { locks.fair_lock(&key).ttl(ttl).wait(wait).acquire().await })
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

/// A waiter of another client holds from the notices of a quorum's short grants, one round
/// trip after the release, without an attempt to claim them: its guard holds its hand-off
/// value (`<base>:h<round>`), and starts with the claim window's validity (5 s here), which
/// its first renewal (the watchdog's, or one sent at once for a fixed TTL) turns into its TTL.
#[tokio::test]
async fn a_waiter_of_another_client_holds_from_the_grant_notices_without_a_claim() {
    let fleet = shared_fleet();
    let holder = client(fleet, Quorum::Majority).await;
    // Its claim window is about its retry delay: 5 s, against a TTL of 30 s.
    let waiting = builder(fleet, Quorum::Majority)
        .retry_delay(Duration::from_secs(5))
        .retry_jitter(Duration::ZERO)
        .queue_lease(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    for watchdog in [false, true] {
        let key = unique_key("fair-noticed");
        // On a loaded machine the waiter's own attempt (its quick retry after subscribing)
        // may come first and claim the grants: that hand-over is released and tried again.
        let mut tries = 0;
        let handed = loop {
            tries += 1;
            assert!(tries <= 10, "never held from the notices in 10 hand-overs");
            let guard = holder.fair_lock(&key).ttl(LONG).acquire().await.unwrap();
            let (locks, owned) = (waiting.clone(), key.clone());
            let task = tokio::spawn(async move {
                let request = locks.fair_lock(&owned);
                match watchdog {
                    true => request.watchdog(LONG).acquire().await,
                    false => request.ttl(LONG).acquire().await,
                }
            });
            eventually(fleet, LONG, "the waiter is in line everywhere", || async {
                queued_everywhere(fleet, &key).await == 1 && waiting.stats().waiting == 1
            })
            .await;
            let (attempts, noticed) = (waiting.stats().attempts, waiting.stats().noticed);
            guard.release().await.unwrap();
            let handed = task.await.unwrap().unwrap();
            let stats = waiting.stats();
            if stats.attempts == attempts {
                assert_eq!(stats.noticed, noticed + 1, "{stats:?}");
                break handed;
            }
            handed.release().await.unwrap();
        };
        let value = handed.holder().to_string();
        let suffix = value.rsplit(':').next().unwrap();
        assert!(
            suffix.starts_with('h') && suffix[1..].parse::<u64>().is_ok(),
            "not a hand-off value: {suffix}"
        );
        eventually(fleet, LONG, "the first renewal gives the TTL", || async {
            handed.validity() > LONG / 2
        })
        .await;
        let mut renewed = 0;
        for i in 0..fleet.len() {
            if entry(fleet, i, &key).await.as_deref() == Some(value.as_str())
                && pttl(fleet, i, &key).await > (LONG / 2).as_millis() as i64
            {
                renewed += 1;
            }
        }
        assert!(renewed > fleet.len() / 2, "renewed on {renewed} nodes");
        handed.release().await.unwrap();
        waiting.finish_background().await;
        holder.finish_background().await;
        assert!(
            !any_line_keys(fleet, &key).await,
            "the line was left behind"
        );
    }
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
