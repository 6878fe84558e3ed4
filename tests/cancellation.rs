//! Calls abandoned by their callers (a timeout around them, a dropped future, a request past
//! the node timeout, a stalled client thread) never make a later call fail on a healthy fleet:
//! the answers nobody read still count for the node's health (`node/send.rs`, `Unread`).

mod common;

use std::time::Duration;

use common::builder;
use quorum_lock::testkit::Fleet;
use quorum_lock::{Quorum, QuorumLock};

const TTL: Duration = Duration::from_secs(10);

fn proxied_fleet(n: usize) -> Fleet {
    Fleet::builder()
        .nodes(n)
        .proxied(true)
        .start()
        .expect("starting a proxied fleet")
}

async fn connected(fleet: &Fleet, node_timeout: Duration, key: &str) -> QuorumLock {
    let locks = builder(fleet, Quorum::Majority)
        .node_timeout(node_timeout)
        .build()
        .await
        .expect("building the client");
    // Every connection open before the faults.
    let guard = locks
        .try_acquire(key, TTL)
        .await
        .expect("a healthy fleet answers")
        .expect("a free key");
    guard.release().await.expect("released");
    locks.finish_background().await;
    locks
}

/// The next call after the abandoned one: it must be taken at once, on the first try.
async fn next_call_takes_the_key(locks: &QuorumLock, key: &str, what: &str) {
    match locks.try_acquire(key, TTL).await {
        Ok(Some(guard)) => guard.release().await.expect("released"),
        Ok(None) => {
            panic!("{what}: the key is taken, though every entry was rolled back or released")
        }
        Err(e) => panic!("{what}: the next call on a healthy fleet failed: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_cancelled_by_a_timeout_around_it_does_not_fail_the_next_call() {
    let fleet = proxied_fleet(5);
    let key = common::unique_key("cancelled-acquire");
    let locks = connected(&fleet, Duration::from_millis(250), &key).await;
    for i in 0..fleet.len() {
        fleet.proxy(i).latency(Duration::from_millis(60));
    }
    let abandoned = tokio::time::timeout(Duration::from_millis(30), locks.acquire(&key, TTL)).await;
    assert!(
        abandoned.is_err(),
        "the acquire was cancelled by its timeout"
    );
    for i in 0..fleet.len() {
        fleet.proxy(i).heal();
    }
    // Idle for longer than the node timeout: the abandoned requests were answered meanwhile,
    // and their entries expire or were rolled back by their straggler handling.
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The cancelled acquire may have left its entries (nobody rolled them back): they name a
    // holder nobody has, and go with their TTL. Another key shows the nodes' health.
    let other = common::unique_key("cancelled-acquire-next");
    next_call_takes_the_key(&locks, &other, "after a cancelled acquire").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_came_after_the_node_timeout_close_the_breaker_before_the_next_call() {
    let fleet = proxied_fleet(5);
    let key = common::unique_key("late-answers");
    let locks = connected(&fleet, Duration::from_millis(200), &key).await;
    for i in 0..3 {
        fleet.proxy(i).latency(Duration::from_millis(700));
    }
    let slow = locks.try_acquire(&key, TTL).await;
    assert!(
        slow.is_err(),
        "a majority slower than the node timeout: no quorum ({slow:?})"
    );
    // Slow for a while longer: the rollback's answers come after its callers gave up too.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for i in 0..3 {
        fleet.proxy(i).heal();
    }
    // The late answers arrive 700 ms after their requests; the breaker must have heard them.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let other = common::unique_key("late-answers-next");
    next_call_takes_the_key(&locks, &other, "after answers later than the node timeout").await;
}

#[test]
fn a_stall_of_the_clients_thread_does_not_fail_the_next_call() {
    // One thread: a stall of it stops the connections' readers as well as the callers, so
    // that the callers' deadlines can pass before the answers that came meanwhile are read.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fleet = Fleet::start(5).expect("starting a fleet");
    runtime.block_on(async {
        let key = common::unique_key("stalled-thread");
        let locks = connected(&fleet, Duration::from_millis(250), &key).await;
        let held = common::unique_key("stalled-thread-held");
        let guard = locks
            .try_acquire(&held, TTL)
            .await
            .expect("a healthy fleet answers")
            .expect("a free key");
        for round in 0..3 {
            // An extend has no rollback whose answer could be read in its place.
            let extend = guard.extend(TTL);
            let stalled = async {
                // Let the extend write its requests, then stall the thread past its deadline.
                tokio::task::yield_now().await;
                std::thread::sleep(Duration::from_millis(600));
            };
            let (_extended, ()) = tokio::join!(extend, stalled);
            tokio::time::sleep(Duration::from_millis(400)).await;
            let next = common::unique_key("stalled-thread-next");
            next_call_takes_the_key(&locks, &next, &format!("round {round}: after a stall")).await;
        }
        drop(guard);
    });
}
