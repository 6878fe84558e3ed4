//! Invariant 5 (ownership) and 6 (loss is loud): release and extend act only for the holder,
//! and extend never revives an expired lock (for every kind alike: tests/family/kinds.rs).

mod common;

use std::time::Duration;

use common::*;
use quorum_lock::{Error, Quorum};

const SHORT: Duration = Duration::from_millis(400);

/// Sleeps past the lock's deadline and its expiry on the nodes: time passing is what these
/// tests are about.
async fn let_expire(ttl: Duration) {
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_holder_cannot_release_or_extend_the_new_holders_lock() {
    let fleet = shared_fleet();
    let a = client(fleet, Quorum::Majority).await;
    let b = client(fleet, Quorum::Majority).await;
    let key = unique_key("stale");
    let stale = a.try_acquire(&key, SHORT).await.unwrap().expect("free key");
    let_expire(SHORT).await;
    assert!(!stale.is_held(), "past its deadline");
    assert_eq!(stale.validity(), Duration::ZERO);

    let fresh = b
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("expired key is free");
    let err = stale.extend(Duration::from_secs(30)).await.unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    let err = stale.release().await.unwrap_err();
    assert!(matches!(err, Error::NotHeld { confirmed: 0, .. }), "{err}");

    assert!(
        nodes_holding(fleet, &key, fresh.holder()).await >= 3,
        "new holder intact"
    );
    assert!(fresh.is_held());
    fresh
        .release()
        .await
        .expect("the new holder releases normally");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_refused_by_a_majority_marks_the_guard_lost() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("deleted");
    let guard = locks
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    // Its requests to every node landed first (the acquire returned at a quorum).
    locks.finish_background().await;
    // Three nodes forget the lock (as after a restart without persistence).
    for i in 0..3 {
        let mut c = conn(fleet, i).await;
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    assert!(guard.is_held(), "the client cannot know yet");
    let err = guard.extend(Duration::from_secs(30)).await.unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    assert!(!guard.is_held());
    for i in 0..3 {
        assert!(
            entry(fleet, i, &key).await.is_none(),
            "extend re-created node {i}'s entry"
        );
    }
    assert_eq!(locks.stats().lost, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_moves_the_deadline_from_its_own_start() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("extend");
    let guard = locks
        .try_acquire(&key, Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    let before = tokio::time::Instant::now();
    guard.extend(Duration::from_secs(20)).await.unwrap();
    let after = tokio::time::Instant::now();
    let drift = Duration::from_millis(202); // 20 s * 0.01 + 2 ms
    assert!(guard.deadline() >= before + Duration::from_secs(20) - drift);
    assert!(guard.deadline() <= after + Duration::from_secs(20) - drift);
    assert_eq!(guard.ttl(), Duration::from_secs(20));
    let mut extended = 0;
    for i in 0..fleet.len() {
        let mut c = conn(fleet, i).await;
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap();
        extended += usize::from(pttl > 10_000);
    }
    assert!(extended >= 3, "only {extended} nodes extended");
    guard.release().await.unwrap();
}
