//! Reentrant owners: nested acquires count, other owners are excluded meanwhile.

mod common;

use std::time::Duration;

use common::*;
use quorum_lock::Quorum;

const TTL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_acquires_count_and_exclude_other_owners() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let other_client = client(fleet, Quorum::Majority).await;
    let key = unique_key("reentrant");
    let owner = locks.owner();
    let rival = locks.owner();

    let outer = owner.try_acquire(&key, TTL).await.unwrap().expect("free");
    assert!(
        outer.holder().contains(owner.id()),
        "holder value names the owner"
    );
    let attempts = locks.stats().attempts;
    let inner = owner
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .expect("reentrant");
    let in_task = {
        let owner = owner.clone();
        let key = key.clone();
        tokio::spawn(async move { owner.acquire(&key, TTL).await })
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(owner.hold_count(&key), 3);
    assert_eq!(
        locks.stats().attempts,
        attempts,
        "nested acquires cost no round trip"
    );
    assert_eq!(
        inner.holder(),
        outer.holder(),
        "nested guards share the acquisition"
    );

    assert!(
        rival.try_acquire(&key, TTL).await.unwrap().is_none(),
        "another owner of the same client"
    );
    assert!(
        other_client.try_acquire(&key, TTL).await.unwrap().is_none(),
        "another client"
    );
    assert!(
        locks.try_acquire(&key, TTL).await.unwrap().is_none(),
        "plain acquire is not reentrant"
    );

    outer.release().await.unwrap();
    in_task.release().await.unwrap();
    assert_eq!(owner.hold_count(&key), 1);
    assert!(
        nodes_holding(fleet, &key, inner.holder()).await >= 3,
        "still held on the nodes"
    );
    assert!(
        rival.try_acquire(&key, TTL).await.unwrap().is_none(),
        "still excluded"
    );

    let holder = inner.holder().to_string();
    inner.release().await.unwrap();
    assert_eq!(owner.hold_count(&key), 0);
    eventually(
        fleet,
        Duration::from_secs(5),
        "released at count zero",
        || async { nodes_holding(fleet, &key, &holder).await == 0 },
    )
    .await;
    let taken = rival
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .expect("free after the last release");
    assert_ne!(taken.holder(), holder);
    taken.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_owner_joins_its_own_hold() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("join");
    let owner = locks.owner();
    let outer = owner.lock(&key).acquire().await.unwrap(); // watchdog
    let nested = tokio::time::timeout(Duration::from_secs(2), owner.lock(&key).acquire())
        .await
        .expect("an owner never waits for itself")
        .unwrap();
    assert_eq!(owner.hold_count(&key), 2);
    drop(nested);
    assert_eq!(owner.hold_count(&key), 1);
    assert!(
        outer.is_held(),
        "dropping a nested guard leaves the outer hold"
    );
    outer.release().await.unwrap();
    assert_eq!(owner.hold_count(&key), 0);
}
