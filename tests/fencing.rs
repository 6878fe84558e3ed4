//! Fencing tokens: strictly increasing across successive holders of a key, surviving release,
//! expiry and node restarts with persistence; and a store that uses them turns away a writer
//! whose lock expired while it stalled.

mod common;

use std::time::Duration;

use common::*;
use quorum_lock::testkit::{FencedStore, Fleet, Persistence};
use quorum_lock::{LockGuard, Quorum, QuorumLock};

async fn fenced(locks: &QuorumLock, key: &str, ttl: Duration) -> LockGuard {
    locks
        .lock(key)
        .ttl(ttl)
        .fencing(true)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("fenced acquire")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_holders_release_expiry_and_restarts() {
    let fleet = Fleet::builder()
        .nodes(5)
        .persistence(Persistence::AofAlways)
        .start()
        .unwrap();
    let a = client(&fleet, Quorum::Majority).await;
    let b = client(&fleet, Quorum::Majority).await;
    let key = unique_key("fence");
    let mut tokens = Vec::new();

    let g = fenced(&a, &key, Duration::from_secs(10)).await;
    tokens.push(g.fencing_token().expect("a token"));
    g.release().await.unwrap();

    let g = fenced(&b, &key, Duration::from_millis(400)).await;
    tokens.push(g.fencing_token().unwrap());
    tokio::time::sleep(Duration::from_millis(500)).await; // expires unreleased
    assert!(!g.is_held());
    drop(g);

    // Two nodes restart (AOF keeps their counters); one of them stays down.
    fleet.kill(0).unwrap();
    fleet.kill(1).unwrap();
    fleet.restart(0).unwrap();
    let g = fenced(&a, &key, Duration::from_secs(10)).await;
    tokens.push(g.fencing_token().unwrap());
    g.release().await.unwrap();
    fleet.restart(1).unwrap();

    for _ in 0..5 {
        let g = fenced(&b, &key, Duration::from_secs(10)).await;
        tokens.push(g.fencing_token().unwrap());
        g.release().await.unwrap();
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not increasing: {tokens:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_is_opt_in() {
    let fleet = shared_fleet();
    let locks = client(fleet, Quorum::Majority).await;
    let key = unique_key("no-fence");
    let guard = locks
        .try_acquire(&key, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(guard.fencing_token(), None);
    guard.release().await.unwrap();
    let mut c = conn(fleet, 0).await;
    let exists: bool = redis::cmd("EXISTS")
        .arg(quorum_lock::names::fencing_counter(key.as_bytes()))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(!exists, "an unfenced lock created a counter");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_checking_tokens_rejects_the_writer_whose_lock_expired() {
    let fleet = shared_fleet();
    let database = Fleet::start(1).unwrap();
    let store = FencedStore::connect(&database.client(0)).await.unwrap();
    let a = client(fleet, Quorum::Majority).await;
    let b = client(fleet, Quorum::Majority).await;
    let key = unique_key("store");
    let record = "account:7";

    let stale = fenced(&a, &key, Duration::from_millis(400)).await;
    let stale_token = stale.fencing_token().unwrap();
    // A stalls (a long pause, a slow disk) past its lock's expiry...
    tokio::time::sleep(Duration::from_millis(500)).await;
    // ... B takes the lock and writes.
    let fresh = fenced(&b, &key, Duration::from_secs(10)).await;
    let fresh_token = fresh.fencing_token().unwrap();
    assert!(fresh_token > stale_token);
    assert!(store
        .write(record, "written by B", fresh_token)
        .await
        .unwrap());
    // A wakes up and writes with its old token: refused.
    assert!(
        !store
            .write(record, "written by A", stale_token)
            .await
            .unwrap(),
        "stale write accepted"
    );
    assert_eq!(
        store.read(record).await.unwrap().as_deref(),
        Some("written by B")
    );
    fresh.release().await.unwrap();
}
