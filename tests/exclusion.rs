//! Invariant 1 (mutual exclusion): many tasks on several clients contend for one key; an
//! in-process flag is never seen set by a second holder.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use quorum_lock::Quorum;

async fn sixteen_tasks_never_overlap(quorum: Quorum) {
    const TASKS: usize = 16;
    const ROUNDS: usize = 8;
    let fleet = shared_fleet();
    let key = unique_key("exclusion");
    let mut clients = Vec::new();
    for _ in 0..4 {
        // Every release must be confirmed (by all five nodes under `Quorum::All`).
        clients.push(long_timeout_client(fleet, quorum).await);
    }
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let locks = clients[t % clients.len()].clone();
        let (key, inside, overlaps) = (key.clone(), inside.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locks
                    .lock(&key)
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire within the wait time");
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                inside.store(false, Ordering::SeqCst);
                guard
                    .release()
                    .await
                    .expect("release confirmed by a quorum");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task panicked");
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two holders were inside at once"
    );
    let acquired: u64 = clients.iter().map(|c| c.stats().acquired).sum();
    assert_eq!(
        acquired,
        (TASKS * ROUNDS) as u64,
        "every round held the lock once"
    );
    // Once every call has landed on every node (a release returns at a quorum).
    finish_background(&clients).await;
    for i in 0..fleet.len() {
        assert!(
            entry(fleet, i, &key).await.is_none(),
            "node {i} still holds the key"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_sixteen_tasks_never_overlap() {
    sixteen_tasks_never_overlap(Quorum::Majority).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multilock_sixteen_tasks_never_overlap() {
    sixteen_tasks_never_overlap(Quorum::All).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_key_is_refused_and_binary_keys_work() {
    let fleet = shared_fleet();
    let a = client(fleet, Quorum::Majority).await;
    let b = client(fleet, Quorum::Majority).await;
    let mut key = unique_key("binary").into_bytes();
    key.extend_from_slice(&[0, 255, 10, 13]);
    let guard = a
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("free key");
    assert_eq!(guard.key(), &key[..]);
    assert!(guard.is_held());
    assert!(guard.validity() > Duration::from_secs(9));
    assert!(b
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .is_none());
    let waited = b
        .lock(&key)
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap_err();
    assert!(waited.is_wait_timeout(), "{waited}");
    guard.release().await.unwrap();
    let again = b.try_acquire(&key, Duration::from_secs(10)).await.unwrap();
    assert!(again.is_some(), "free again after release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_guard_is_released_in_the_background() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("drop");
    let guard = locks
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let holder = guard.holder().to_string();
    assert!(nodes_holding(fleet, &key, &holder).await >= 3);
    drop(guard);
    eventually(
        fleet,
        Duration::from_secs(5),
        "dropped guard released",
        || async { nodes_holding(fleet, &key, &holder).await == 0 },
    )
    .await;
}
